//! A stand-in for Metal3's baremetal-operator (BMO) and Ironic, over fake-kube's
//! store and the mock Redfish BMC.
//!
//! It does what their documentation and source say, with their names, for the part
//! that matters to fencing: who decides a host's power, and what undoes a change.
//!
//! The operator (BMO's `manageHostPower`, run on every change of a BareMetalHost and
//! again every `reconcile` interval, 60 s in BMO's steady state):
//! - copies Ironic's recorded power state into `status.poweredOn` when they differ;
//! - drops the suffixless `reboot.metal3.io` annotation once the host is off (a
//!   one-shot reboot); a suffixed `reboot.metal3.io/{key}` stays until its owner
//!   removes it;
//! - wants the host on when `spec.online`, off while any reboot annotation is set
//!   (on a provisioned or externally provisioned host any; otherwise only one with
//!   `"force": true`), in hard mode when any asks `{"mode":"hard"}`;
//! - asks Ironic for the change: hard is Ironic's `power off` (Redfish `ForceOff`),
//!   soft `soft power off` (`GracefulShutdown`), on is `power on` (`On`);
//! - does nothing for a paused host (`baremetalhost.metal3.io/paused`), and Ironic
//!   knows nothing of a detached one (`baremetalhost.metal3.io/detached`).
//!
//! Ironic's conductor keeps, per node, the power state in its database (set when it
//! powers the node itself) and runs the power-state sync every
//! `sync_power_state_interval` (60 s by default): it reads the BMC; when the BMC
//! disagrees with the database and `force_power_state_during_sync` (true by
//! default), it powers the node back to the database's state; after more than
//! `power_state_sync_max_retries` (3) failed attempts in a row it records the BMC's
//! state instead and puts the node in maintenance. A node without a recorded state
//! gets the BMC's.
//!
//! Every power action goes to the mock BMC over Redfish (HTTP Basic), so the mock's
//! reset log shows what "Ironic" sent. Timings are parameters: tests shorten them.
//!
//! Until fake-kube serves custom resources over HTTP, the stand-in reads and writes
//! BareMetalHosts in the store directly ([`BAREMETALHOSTS`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::kube::resources::ResourceType;
use crate::kube::store::Store;

/// Metal3's BareMetalHost (`metal3.io/v1alpha1`), as a store type.
pub const BAREMETALHOSTS: ResourceType = ResourceType {
    group: "metal3.io",
    version: "v1alpha1",
    plural: "baremetalhosts",
    singular: "baremetalhost",
    kind: "BareMetalHost",
    namespaced: true,
    short_names: &["bmh", "bmhost"],
    verbs: &[
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ],
    custom: None,
};

/// Metal3's reboot annotation prefix.
pub const REBOOT_ANNOTATION: &str = "reboot.metal3.io";
/// Metal3's pause annotation.
pub const PAUSED_ANNOTATION: &str = "baremetalhost.metal3.io/paused";
/// Metal3's detached annotation.
pub const DETACHED_ANNOTATION: &str = "baremetalhost.metal3.io/detached";

/// How often the operator and Ironic act. Their defaults are the real ones.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// BMO's steady-state requeue (60 s).
    pub reconcile: Duration,
    /// Ironic's `[conductor] sync_power_state_interval` (60 s).
    pub sync_power_state_interval: Duration,
    /// Ironic's `[conductor] force_power_state_during_sync` (true).
    pub force_power_state_during_sync: bool,
    /// Ironic's `[conductor] power_state_sync_max_retries` (3).
    pub power_state_sync_max_retries: u32,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            reconcile: Duration::from_secs(60),
            sync_power_state_interval: Duration::from_secs(60),
            force_power_state_during_sync: true,
            power_state_sync_max_retries: 3,
        }
    }
}

/// One host Ironic manages: its BareMetalHost and the BMC behind it.
#[derive(Debug, Clone)]
pub struct Enrolled {
    pub namespace: String,
    pub name: String,
    /// The BMC's base URL (`http://127.0.0.1:port`).
    pub bmc: String,
    /// The ComputerSystem's Id.
    pub system_id: String,
    pub username: String,
    pub password: String,
}

/// Ironic's record of one node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IronicNode {
    /// `power_state` in Ironic's database: `Some(true)` power on, `Some(false)` power
    /// off, `None` not known yet.
    pub power_state: Option<bool>,
    pub maintenance: bool,
    /// Failed syncs in a row.
    pub sync_failures: u32,
    /// Power actions Ironic took because of the sync (it changed the hardware).
    pub sync_actions: u32,
}

#[derive(Default)]
struct Shared {
    nodes: BTreeMap<(String, String), IronicNode>,
}

/// The running stand-in; stops when dropped or shut down.
pub struct Metal3StandIn {
    shared: Arc<Mutex<Shared>>,
    task: JoinHandle<()>,
}

impl Metal3StandIn {
    /// Starts the operator and Ironic for `hosts` (their BareMetalHosts in `store`).
    pub fn start(store: Store, hosts: Vec<Enrolled>, timing: Timing) -> Self {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let ironic = Ironic {
            store,
            hosts,
            timing,
            shared: shared.clone(),
            http: http_client(),
        };
        let task = tokio::spawn(ironic.run());
        Self { shared, task }
    }

    /// Ironic's record of a node, if enrolled.
    pub fn node(&self, namespace: &str, name: &str) -> Option<IronicNode> {
        self.lock()
            .nodes
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stops both loops.
    pub async fn shutdown(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }
}

impl Drop for Metal3StandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn http_client() -> reqwest::Client {
    // reqwest's rustls needs a process-wide provider; the mocks use ring.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .no_proxy()
        .build()
        .unwrap_or_default()
}

struct Ironic {
    store: Store,
    hosts: Vec<Enrolled>,
    timing: Timing,
    shared: Arc<Mutex<Shared>>,
    http: reqwest::Client,
}

impl Ironic {
    async fn run(self) {
        let (_, _, mut events) = self.store.list_and_subscribe(BAREMETALHOSTS, None);
        let mut reconcile = tokio::time::interval(self.timing.reconcile);
        let mut sync = tokio::time::interval(self.timing.sync_power_state_interval);
        sync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        reconcile.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Enrolment: a node without a recorded state gets the BMC's.
        self.power_state_sync().await;
        loop {
            tokio::select! {
                event = events.recv() => match event {
                    Ok(e) if e.resource == BAREMETALHOSTS => self.reconcile_all().await,
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        self.reconcile_all().await;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                },
                _ = reconcile.tick() => self.reconcile_all().await,
                _ = sync.tick() => self.power_state_sync().await,
            }
        }
    }

    fn node(&self, h: &Enrolled) -> IronicNode {
        self.shared
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .nodes
            .get(&(h.namespace.clone(), h.name.clone()))
            .cloned()
            .unwrap_or_default()
    }

    fn set_node(&self, h: &Enrolled, change: impl FnOnce(&mut IronicNode)) {
        let mut shared = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        change(
            shared
                .nodes
                .entry((h.namespace.clone(), h.name.clone()))
                .or_default(),
        );
    }

    async fn reconcile_all(&self) {
        for h in &self.hosts {
            // A few passes: each step of BMO's state machine is its own reconcile.
            for _ in 0..4 {
                if !self.reconcile(h).await {
                    break;
                }
            }
        }
    }

    /// One pass of the operator's `manageHostPower`; true when it changed something
    /// (BMO requeues at once then).
    async fn reconcile(&self, h: &Enrolled) -> bool {
        let Ok(host) = self.store.get(BAREMETALHOSTS, Some(&h.namespace), &h.name) else {
            return false;
        };
        let annotations = host
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        if annotations.contains_key(PAUSED_ANNOTATION)
            || annotations.contains_key(DETACHED_ANNOTATION)
        {
            return false;
        }
        let node = self.node(h);
        let powered_on = host
            .pointer("/status/poweredOn")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        // The state Ironic records is what the status shows.
        if let Some(recorded) = node.power_state
            && recorded != powered_on
        {
            let _ = self
                .store
                .modify(BAREMETALHOSTS, Some(&h.namespace), &h.name, |o| {
                    if let Some(status) = o.get_mut("status").and_then(Value::as_object_mut) {
                        status.insert("poweredOn".into(), json!(recorded));
                    } else if let Some(obj) = o.as_object_mut() {
                        obj.insert("status".into(), json!({"poweredOn": recorded}));
                    }
                    Ok(())
                });
            return true;
        }
        // A one-shot reboot is over once the host is off.
        if !powered_on && annotations.contains_key(REBOOT_ANNOTATION) {
            let _ = self
                .store
                .modify(BAREMETALHOSTS, Some(&h.namespace), &h.name, |o| {
                    if let Some(a) = o
                        .pointer_mut("/metadata/annotations")
                        .and_then(Value::as_object_mut)
                    {
                        a.remove(REBOOT_ANNOTATION);
                    }
                    Ok(())
                });
            return true;
        }
        let state = host
            .pointer("/status/provisioning/state")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let provisioned = matches!(state, "provisioned" | "externally provisioned");
        let mut reboot = false;
        let mut hard = false;
        for (key, value) in &annotations {
            if key != REBOOT_ANNOTATION && !key.starts_with("reboot.metal3.io/") {
                continue;
            }
            // No value, or one that is not JSON, is a soft reboot.
            let args: Value = value
                .as_str()
                .and_then(|v| serde_json::from_str(v).ok())
                .unwrap_or(Value::Null);
            let force = args.get("force").and_then(Value::as_bool).unwrap_or(false);
            if !provisioned && !force {
                continue;
            }
            reboot = true;
            hard |= args.get("mode").and_then(Value::as_str) == Some("hard");
        }
        let online = host
            .pointer("/spec/online")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let desired = online && !reboot;
        if powered_on == desired || node.maintenance {
            return false;
        }
        let reset = match (desired, hard) {
            (true, _) => "On",
            (false, true) => "ForceOff",
            (false, false) => "GracefulShutdown",
        };
        // Ironic's node_power_action: the command, then wait for the state, then
        // record it.
        if self.reset(h, reset).await.is_err() {
            return false;
        }
        if self.wait_for(h, desired).await {
            self.set_node(h, |n| n.power_state = Some(desired));
            return true;
        }
        false
    }

    /// Ironic's power-state sync, for every node.
    async fn power_state_sync(&self) {
        for h in &self.hosts {
            let detached = self
                .store
                .get(BAREMETALHOSTS, Some(&h.namespace), &h.name)
                .ok()
                .and_then(|o| o.pointer("/metadata/annotations").cloned())
                .and_then(|a| a.as_object().map(|a| a.contains_key(DETACHED_ANNOTATION)))
                .unwrap_or(false);
            let node = self.node(h);
            if detached || node.maintenance {
                continue;
            }
            let Ok(actual) = self.read(h).await else {
                self.set_node(h, |n| n.sync_failures += 1);
                continue;
            };
            let Some(actual) = actual else {
                continue;
            };
            match node.power_state {
                None => self.set_node(h, |n| n.power_state = Some(actual)),
                Some(recorded) if recorded == actual => {
                    self.set_node(h, |n| n.sync_failures = 0);
                }
                Some(recorded) => {
                    let count = node.sync_failures + 1;
                    if count > self.timing.power_state_sync_max_retries {
                        self.set_node(h, |n| {
                            n.power_state = Some(actual);
                            n.maintenance = true;
                            n.sync_failures = count;
                        });
                    } else if self.timing.force_power_state_during_sync {
                        self.set_node(h, |n| {
                            n.sync_failures = count;
                            n.sync_actions += 1;
                        });
                        let reset = if recorded { "On" } else { "ForceOff" };
                        let _ = self.reset(h, reset).await;
                    } else {
                        self.set_node(h, |n| {
                            n.power_state = Some(actual);
                            n.sync_failures = count;
                        });
                    }
                }
            }
        }
    }

    fn system_url(&self, h: &Enrolled) -> String {
        format!(
            "{}/redfish/v1/Systems/{}",
            h.bmc.trim_end_matches('/'),
            h.system_id
        )
    }

    /// The BMC's power state: `Some(true)` On, `Some(false)` Off, `None` in between.
    async fn read(&self, h: &Enrolled) -> Result<Option<bool>, reqwest::Error> {
        let system: Value = self
            .http
            .get(self.system_url(h))
            .basic_auth(&h.username, Some(&h.password))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        Ok(match system.get("PowerState").and_then(Value::as_str) {
            Some("On") => Some(true),
            Some("Off") => Some(false),
            _ => None,
        })
    }

    async fn reset(&self, h: &Enrolled, reset_type: &str) -> Result<(), reqwest::Error> {
        self.http
            .post(format!(
                "{}/Actions/ComputerSystem.Reset",
                self.system_url(h)
            ))
            .basic_auth(&h.username, Some(&h.password))
            .json(&json!({ "ResetType": reset_type }))
            .send()
            .await?
            .error_for_status()?;
        Ok(())
    }

    /// Waits (a few seconds at most, Ironic's `power_state_change_timeout` shortened)
    /// for the BMC to report `on`.
    async fn wait_for(&self, h: &Enrolled, on: bool) -> bool {
        for _ in 0..50 {
            if let Ok(Some(state)) = self.read(h).await
                && state == on
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::redfish::{MockPower, MockRedfish, SystemSpec};

    const FAST: Timing = Timing {
        reconcile: Duration::from_millis(100),
        sync_power_state_interval: Duration::from_millis(200),
        force_power_state_during_sync: true,
        power_state_sync_max_retries: 3,
    };

    fn host(store: &Store, annotations: Value, online: bool, state: &str) {
        store
            .create(
                BAREMETALHOSTS,
                Some("metal3"),
                json!({
                    "metadata": {"name": "worker-1", "annotations": annotations},
                    "spec": {"online": online, "bmc": {"address": "redfish+http://x/redfish/v1/Systems/1", "credentialsName": "s"}},
                    "status": {"poweredOn": true, "provisioning": {"state": state}, "operationalStatus": "OK"},
                }),
            )
            .unwrap();
    }

    fn enrolled(base: &str) -> Enrolled {
        Enrolled {
            namespace: "metal3".into(),
            name: "worker-1".into(),
            bmc: base.into(),
            system_id: "1".into(),
            username: "admin".into(),
            password: "pw".into(),
        }
    }

    async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
        for _ in 0..100 {
            if check() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("never: {what}");
    }

    async fn bmc() -> crate::redfish::MockRedfishHandle {
        MockRedfish::builder()
            .system(SystemSpec::new("1").power(MockPower::On))
            .credentials("admin", "pw")
            .start()
            .await
            .unwrap()
    }

    fn powered_on(store: &Store) -> Option<bool> {
        store
            .get(BAREMETALHOSTS, Some("metal3"), "worker-1")
            .ok()?
            .pointer("/status/poweredOn")?
            .as_bool()
    }

    fn annotate(store: &Store, key: &str, value: Option<&str>) {
        store
            .modify(BAREMETALHOSTS, Some("metal3"), "worker-1", |o| {
                let a = o
                    .pointer_mut("/metadata/annotations")
                    .and_then(Value::as_object_mut)
                    .unwrap();
                match value {
                    Some(v) => a.insert(key.into(), json!(v)),
                    None => a.remove(key),
                };
                Ok(())
            })
            .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_power_sync_undoes_a_power_off_behind_ironics_back() {
        let bmc = bmc().await;
        let store = Store::default();
        host(&store, json!({}), true, "provisioned");
        let m3 = Metal3StandIn::start(store.clone(), vec![enrolled(&bmc.base_url())], FAST);
        eventually("enrolled on", || {
            m3.node("metal3", "worker-1").and_then(|n| n.power_state) == Some(true)
        })
        .await;
        bmc.set_power("1", MockPower::Off);
        eventually("powered back on by the sync", || {
            bmc.power("1") == Some(MockPower::On)
        })
        .await;
        let n = m3.node("metal3", "worker-1").unwrap();
        assert!(n.sync_actions >= 1 && !n.maintenance, "{n:?}");
        assert!(
            bmc.reset_log().iter().any(|(_, t)| t == "On"),
            "{:?}",
            bmc.reset_log()
        );
        m3.shutdown().await;
        bmc.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_suffixed_hard_reboot_annotation_keeps_the_host_off_until_removed() {
        let bmc = bmc().await;
        let store = Store::default();
        host(&store, json!({}), true, "provisioned");
        let m3 = Metal3StandIn::start(store.clone(), vec![enrolled(&bmc.base_url())], FAST);
        annotate(&store, "reboot.metal3.io/test", Some(r#"{"mode":"hard"}"#));
        eventually("off", || bmc.power("1") == Some(MockPower::Off)).await;
        eventually("status", || powered_on(&store) == Some(false)).await;
        assert!(
            bmc.reset_log().iter().any(|(_, t)| t == "ForceOff"),
            "hard: ForceOff"
        );
        // Several syncs later: still off, the annotation still there.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert_eq!(bmc.power("1"), Some(MockPower::Off));
        annotate(&store, "reboot.metal3.io/test", None);
        eventually("on again", || bmc.power("1") == Some(MockPower::On)).await;
        eventually("status on", || powered_on(&store) == Some(true)).await;
        m3.shutdown().await;
        bmc.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_suffixless_reboot_is_one_shot_and_unprovisioned_hosts_need_force() {
        let bmc = bmc().await;
        let store = Store::default();
        host(&store, json!({}), true, "available");
        let m3 = Metal3StandIn::start(store.clone(), vec![enrolled(&bmc.base_url())], FAST);
        eventually("enrolled", || m3.node("metal3", "worker-1").is_some()).await;
        // Not provisioned: a reboot annotation without force is ignored.
        annotate(&store, "reboot.metal3.io/x", Some(r#"{"mode":"hard"}"#));
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(bmc.power("1"), Some(MockPower::On));
        annotate(&store, "reboot.metal3.io/x", None);
        // The suffixless one, forced: off once, then the operator removes it and
        // powers the host on again.
        annotate(
            &store,
            "reboot.metal3.io",
            Some(r#"{"mode":"hard","force":true}"#),
        );
        eventually("annotation removed", || {
            store
                .get(BAREMETALHOSTS, Some("metal3"), "worker-1")
                .unwrap()
                .pointer("/metadata/annotations/reboot.metal3.io")
                .is_none()
        })
        .await;
        eventually("on again", || {
            bmc.power("1") == Some(MockPower::On) && powered_on(&store) == Some(true)
        })
        .await;
        let log: Vec<String> = bmc.reset_log().into_iter().map(|(_, t)| t).collect();
        assert!(
            log.contains(&"ForceOff".to_string()) && log.contains(&"On".to_string()),
            "{log:?}"
        );
        m3.shutdown().await;
        bmc.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn online_false_powers_off_and_paused_hosts_are_left_alone() {
        let bmc = bmc().await;
        let store = Store::default();
        let mut paused = serde_json::Map::new();
        paused.insert(PAUSED_ANNOTATION.into(), json!("x"));
        host(&store, Value::Object(paused), false, "provisioned");
        let m3 = Metal3StandIn::start(store.clone(), vec![enrolled(&bmc.base_url())], FAST);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(bmc.power("1"), Some(MockPower::On), "paused: nothing done");
        annotate(&store, PAUSED_ANNOTATION, None);
        eventually("online: false is off", || {
            bmc.power("1") == Some(MockPower::Off)
        })
        .await;
        assert!(
            bmc.reset_log().iter().any(|(_, t)| t == "GracefulShutdown"),
            "soft by default"
        );
        m3.shutdown().await;
        bmc.shutdown().await;
    }
}
