//! The cluster-wide pause switch: a ConfigMap `nodefence-pause` in nodefence's
//! namespace.
//!
//! Stored in the cluster, not in a replica: it survives restarts and leader changes,
//! works while nodefence is down, and every replica sees the same value. While it says
//! paused, no machine is powered off or on and no release begins (power is still
//! read, so `status`, metrics and Events stay informative). `nodefence pause` and
//! `nodefence resume` write it; the daemon watches it, and [`PauseCheck`] reads it
//! again right before every power command and release.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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

/// The pause switch as the executor checks it immediately before a power command or
/// a release. The controller's watch alone is not enough: a decision taken just
/// before the watch delivered the pause can reach the executor after it (simulation
/// seed 11834), and a watch the API server keeps ending may not deliver it for a long
/// time (seeds 10400, 11586). So the executor asks twice: the controller's latest
/// view (a flag, set the moment the watch shows the pause), and the API server (a
/// fresh GET, whose failure refuses the command: nothing is sent on a switch that
/// cannot be read).
#[derive(Clone)]
pub struct PauseCheck {
    api: Api<ConfigMap>,
    seen_paused: Arc<AtomicBool>,
}

impl PauseCheck {
    pub fn new(client: Client, namespace: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            seen_paused: Arc::new(AtomicBool::new(false)),
        }
    }

    /// What the controller's watch shows now.
    pub fn saw(&self, paused: bool) {
        self.seen_paused.store(paused, Ordering::SeqCst);
    }

    /// Whether the controller's watch shows the switch on (no await: safe to ask
    /// between the last read of a machine and its command).
    pub fn seen_paused(&self) -> bool {
        self.seen_paused.load(Ordering::SeqCst)
    }

    /// `Ok` if the watch and a fresh read of the switch both say fencing is active;
    /// otherwise why not, ending with `outcome` ("power-off not sent").
    pub async fn allows(&self, outcome: &str) -> Result<(), String> {
        if self.seen_paused() {
            return Err(format!("fencing is paused cluster-wide: {outcome}"));
        }
        let state = super::fresh::just_before(
            &format!("the pause switch (ConfigMap {PAUSE_CONFIGMAP})"),
            outcome,
            self.api.get_opt(PAUSE_CONFIGMAP),
            |_| None,
        )
        .await?
        .as_ref()
        .map(PauseState::from_config_map);
        match state {
            Some(s) if s.paused => {
                self.saw(true);
                Err(format!("{}: {outcome}", s.describe()))
            }
            _ if self.seen_paused() => Err(format!("fencing is paused cluster-wide: {outcome}")),
            _ => Ok(()),
        }
    }
}
