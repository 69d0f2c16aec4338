//! The cluster-wide pause switch: a ConfigMap `nodefence-pause` in nodefence's
//! namespace.
//!
//! Stored in the cluster, not in a replica: it survives restarts and leader changes,
//! works while nodefence is down, and every replica sees the same value. While it says
//! paused, no machine is powered off or on and no node is released (power is still
//! read, so `status`, metrics and Events stay informative). `nodefence pause` and
//! `nodefence resume` write it; the daemon watches it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

/// Name of the ConfigMap.
pub const PAUSE_CONFIGMAP: &str = "nodefence-pause";

/// What the switch says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PauseState {
    pub paused: bool,
    pub reason: Option<String>,
    pub since: Option<String>,
    pub by: Option<String>,
}

impl PauseState {
    /// Reads the ConfigMap's data; anything but `paused: "true"` is not paused.
    pub fn from_config_map(cm: &ConfigMap) -> Self {
        let data = cm.data.as_ref();
        let get = |k: &str| {
            data.and_then(|d| d.get(k))
                .cloned()
                .filter(|v| !v.is_empty())
        };
        Self {
            paused: get("paused").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")),
            reason: get("reason"),
            since: get("since"),
            by: get("by"),
        }
    }

    pub fn describe(&self) -> String {
        if !self.paused {
            return "fencing is active".into();
        }
        let mut s = "fencing is PAUSED".to_string();
        if let Some(since) = &self.since {
            s.push_str(&format!(" since {since}"));
        }
        if let Some(by) = &self.by {
            s.push_str(&format!(" by {by}"));
        }
        if let Some(reason) = &self.reason {
            s.push_str(&format!(": {reason}"));
        }
        s
    }
}

/// Sets the switch (server-side merge patch; creates the ConfigMap if missing).
pub async fn set(
    client: Client,
    namespace: &str,
    paused: bool,
    reason: Option<&str>,
    by: &str,
) -> Result<PauseState, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    let mut data = BTreeMap::new();
    data.insert("paused".to_string(), paused.to_string());
    data.insert("reason".to_string(), reason.unwrap_or_default().to_string());
    data.insert(
        "since".to_string(),
        humantime::format_rfc3339_seconds(crate::clock::now()).to_string(),
    );
    data.insert("by".to_string(), by.to_string());
    let cm = match api.get_opt(PAUSE_CONFIGMAP).await? {
        Some(_) => {
            api.patch(
                PAUSE_CONFIGMAP,
                &PatchParams::default(),
                &Patch::Merge(json!({ "data": data })),
            )
            .await?
        }
        None => {
            let cm = ConfigMap {
                metadata: kube::api::ObjectMeta {
                    name: Some(PAUSE_CONFIGMAP.into()),
                    labels: Some(BTreeMap::from([(
                        "app.kubernetes.io/name".into(),
                        "nodefence".into(),
                    )])),
                    ..Default::default()
                },
                data: Some(data),
                ..Default::default()
            };
            api.create(&Default::default(), &cm).await?
        }
    };
    Ok(PauseState::from_config_map(&cm))
}

/// Reads the switch; a missing ConfigMap means not paused.
pub async fn get(client: Client, namespace: &str) -> Result<PauseState, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    Ok(api.get_opt(PAUSE_CONFIGMAP).await?.map_or(
        PauseState {
            paused: false,
            reason: None,
            since: None,
            by: None,
        },
        |cm| PauseState::from_config_map(&cm),
    ))
}
