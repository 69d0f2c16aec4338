//! Release records: per-node progress that must outlive a leader and the Node object.
//!
//! The out-of-service taint nodefence added is recorded on the Node itself (an
//! annotation), which is enough to resume a released node. Two things are not: a
//! power-on still to be done (`power_on_after_fence`), and anything at all about a
//! node released by deleting its Node object. Those live in one ConfigMap,
//! `nodefence-state`, in nodefence's namespace: one data key per node, a small JSON
//! value. A new leader reads it before it watches Nodes and resumes each record.
//!
//! Each write is a merge patch of one key (creating the ConfigMap when missing), so
//! records of different nodes never clobber each other. A record lost to a crash
//! between the release and its write only means a missed power-on (the machine stays
//! off): never a repeated release or power-off.

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::leader::Leadership;
use crate::engine::{ReleaseMode, ReleaseRecord};
use crate::identity::NodeIdentity;

/// Name of the ConfigMap.
pub const STATE_CONFIGMAP: &str = "nodefence-state";

/// Why a record could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("this replica is not the leader; record not written")]
    NotLeader,
    #[error("Kubernetes API: {0}")]
    Api(#[from] kube::Error),
}

/// The stored form (stable field names: other tools may read it).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Stored {
    released_at: String,
    release: String,
    power_on_pending: bool,
    /// The node's `status.nodeInfo.systemUUID` when it was released.
    #[serde(
        default,
        rename = "systemUUID",
        skip_serializing_if = "Option::is_none"
    )]
    system_uuid: Option<String>,
    /// The node's `spec.providerID` when it was released.
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    provider_id: Option<String>,
    /// What the release rested on when it was not Off readings: the watchdog level's
    /// arithmetic, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rests_on: Option<String>,
}

impl Stored {
    fn from_record(r: &ReleaseRecord) -> Self {
        Self {
            released_at: humantime::format_rfc3339_seconds(r.released_at).to_string(),
            release: match r.mode {
                ReleaseMode::OutOfServiceTaint => "out-of-service-taint",
                ReleaseMode::DeleteNode => "delete-node",
            }
            .into(),
            power_on_pending: r.power_on_pending,
            system_uuid: r.identity.system_uuid.clone(),
            provider_id: r.identity.provider_id.clone(),
            rests_on: r.rests_on.clone(),
        }
    }

    fn into_record(self) -> Option<ReleaseRecord> {
        let released_at: SystemTime = humantime::parse_rfc3339(&self.released_at).ok()?;
        let mode = match self.release.as_str() {
            "out-of-service-taint" => ReleaseMode::OutOfServiceTaint,
            "delete-node" => ReleaseMode::DeleteNode,
            _ => return None,
        };
        Some(ReleaseRecord {
            released_at,
            mode,
            power_on_pending: self.power_on_pending,
            identity: NodeIdentity {
                system_uuid: self.system_uuid.filter(|s| !s.trim().is_empty()),
                provider_id: self.provider_id.filter(|s| !s.trim().is_empty()),
            },
            rests_on: self.rests_on,
        })
    }
}

/// The state ConfigMap, empty, as nodefence creates it.
fn state_config_map() -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(STATE_CONFIGMAP.into()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/name".into(),
                "nodefence".into(),
            )])),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Reads and writes the records of one cluster.
#[derive(Clone)]
pub struct RecordStore {
    api: Api<ConfigMap>,
    leadership: Leadership,
}

impl RecordStore {
    /// Merges `patch` into the state ConfigMap; when it does not exist, creates it as
    /// `created` (`None`: nothing to do), or merges into the one another write created
    /// meanwhile.
    async fn patch_or_create(
        &self,
        patch: &serde_json::Value,
        created: Option<ConfigMap>,
    ) -> Result<(), RecordError> {
        let (params, merge) = (PatchParams::default(), Patch::Merge(patch));
        match self.api.patch(STATE_CONFIGMAP, &params, &merge).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => {
                let Some(cm) = created else {
                    return Ok(());
                };
                match self.api.create(&PostParams::default(), &cm).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(e)) if e.code == 409 => {
                        self.api.patch(STATE_CONFIGMAP, &params, &merge).await?;
                        Ok(())
                    }
                    Err(e) => Err(e.into()),
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    pub fn new(client: Client, namespace: &str, leadership: Leadership) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            leadership,
        }
    }

    /// The same store, writing only as `leadership` says (one term's view).
    pub fn in_term(&self, leadership: &Leadership) -> Self {
        Self {
            leadership: leadership.clone(),
            ..self.clone()
        }
    }

    /// Every readable record. An unreadable entry is skipped with a warning: it can
    /// only ask for a power-on, and skipping it leaves the machine off (the safe side).
    pub async fn load(&self) -> Result<BTreeMap<String, ReleaseRecord>, RecordError> {
        let mut out = BTreeMap::new();
        let Some(cm) = self.api.get_opt(STATE_CONFIGMAP).await? else {
            return Ok(out);
        };
        for (node, value) in cm.data.unwrap_or_default() {
            match serde_json::from_str::<Stored>(&value)
                .ok()
                .and_then(Stored::into_record)
            {
                Some(record) => {
                    out.insert(node, record);
                }
                None => tracing::warn!(
                    node,
                    configmap = STATE_CONFIGMAP,
                    "unreadable release record ignored; remove the key if it is stale"
                ),
            }
        }
        Ok(out)
    }

    /// Publishes the companions' table ([`crate::heartbeat::report`]) as the state
    /// ConfigMap's binaryData `companions` (JSON), beside the records.
    pub async fn put_companions(
        &self,
        report: &[crate::heartbeat::report::CompanionReport],
    ) -> Result<(), RecordError> {
        use base64::Engine as _;
        if !self.leadership.is_leader() {
            return Err(RecordError::NotLeader);
        }
        let json = serde_json::to_vec(report).unwrap_or_default();
        let encoded = base64::engine::general_purpose::STANDARD.encode(&json);
        let patch = json!({ "binaryData": { crate::heartbeat::report::KEY: encoded } });
        let created = ConfigMap {
            binary_data: Some(BTreeMap::from([(
                crate::heartbeat::report::KEY.to_string(),
                k8s_openapi::ByteString(json),
            )])),
            ..state_config_map()
        };
        self.patch_or_create(&patch, Some(created)).await
    }

    /// The companions' table as the leader last published it (`None`: never).
    pub async fn load_companions(
        &self,
    ) -> Result<Option<Vec<crate::heartbeat::report::CompanionReport>>, RecordError> {
        let Some(cm) = self.api.get_opt(STATE_CONFIGMAP).await? else {
            return Ok(None);
        };
        Ok(cm
            .binary_data
            .unwrap_or_default()
            .get(crate::heartbeat::report::KEY)
            .and_then(|b| serde_json::from_slice(&b.0).ok()))
    }

    /// Stores (`Some`) or removes (`None`) the record of `node`.
    pub async fn put(&self, node: &str, record: Option<&ReleaseRecord>) -> Result<(), RecordError> {
        if !self.leadership.is_leader() {
            return Err(RecordError::NotLeader);
        }
        let value = match record {
            Some(r) => serde_json::Value::String(
                serde_json::to_string(&Stored::from_record(r)).unwrap_or_default(),
            ),
            None => serde_json::Value::Null,
        };
        let patch = json!({ "data": { node: value } });
        // Nothing to remove from a ConfigMap that does not exist.
        let created = record.map(|r| ConfigMap {
            data: Some(BTreeMap::from([(
                node.to_string(),
                serde_json::to_string(&Stored::from_record(r)).unwrap_or_default(),
            )])),
            ..state_config_map()
        });
        self.patch_or_create(&patch, created).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn records_round_trip_at_second_precision() {
        let r = ReleaseRecord {
            released_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            mode: ReleaseMode::DeleteNode,
            power_on_pending: true,
            identity: NodeIdentity {
                system_uuid: Some("4c4c4544-0042-3510-8056-b4c04f4d5331".into()),
                provider_id: None,
            },
            rests_on: None,
        };
        let text = serde_json::to_string(&Stored::from_record(&r)).unwrap();
        assert!(text.contains("\"release\":\"delete-node\""), "{text}");
        assert!(
            text.contains("\"systemUUID\":\"4c4c4544-0042-3510-8056-b4c04f4d5331\""),
            "{text}"
        );
        assert!(!text.contains("providerID"), "{text}");
        let back: Stored = serde_json::from_str(&text).unwrap();
        assert_eq!(back.into_record(), Some(r));
    }

    #[test]
    fn records_written_before_identities_were_kept_still_resume() {
        let old = r#"{"releasedAt":"2026-01-01T00:00:00Z","release":"delete-node","powerOnPending":true}"#;
        let s: Stored = serde_json::from_str(old).unwrap();
        let r = s.into_record().unwrap();
        assert!(r.power_on_pending);
        assert_eq!(r.identity, NodeIdentity::default());
    }

    #[test]
    fn unknown_modes_and_bad_times_are_unreadable() {
        for bad in [
            r#"{"releasedAt":"2026-01-01T00:00:00Z","release":"reboot","powerOnPending":true}"#,
            r#"{"releasedAt":"yesterday","release":"delete-node","powerOnPending":true}"#,
        ] {
            let s: Stored = serde_json::from_str(bad).unwrap();
            assert_eq!(s.into_record(), None, "{bad}");
        }
    }
}
