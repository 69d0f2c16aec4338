//! The end-to-end world: fake-kube with its simulated control plane, a mock Redfish
//! BMC whose systems are the nodes' machines (linked to their kubelets; a node set up
//! with [`NodeSetup::ipmi`] has a mock IPMI BMC of its own instead), and the real
//! daemon (`nodefence::daemon::run`), in process, as one or more replicas.
//!
//! Each replica runs on its own tokio runtime on its own thread, with its own
//! Kubernetes client: [`World::crash_replica`] drops that runtime, which ends every
//! task of the replica at once (leader election, watches, power commands in flight)
//! without releasing its Lease, like a killed process; [`World::stop_replica`] is a
//! graceful shutdown (SIGTERM), which releases the Lease.
//!
//! The simulation runs `speed` times faster than real time (10x by default); the
//! daemon's policy timings are real time, scaled by hand to match (see
//! [`WorldBuilder::new`]); [`World::scaled`] converts a stock duration.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use nodefence::daemon::DaemonOptions;
use nodefence_mocks::ipmi::{MockIpmiHandle, Power as IpmiPower, control_name};
use nodefence_mocks::kube::FakeKubeHandle;
use nodefence_mocks::kube::resources::{EVENTS_V1, LEASES, NODES, PODS};
use nodefence_mocks::kube::sim::SimHandle;
use nodefence_mocks::kube::store::Store;
use nodefence_mocks::redfish::{MockPower, MockRedfishHandle};
use serde_json::Value;
use tokio::time::Instant;

mod builder;
mod hardware;
mod metal3;

pub use builder::*;
pub use hardware::*;

/// Namespace and name of the daemon's leader-election Lease.
pub const LEADER_LEASE_NAMESPACE: &str = "kube-system";
pub const LEADER_LEASE_NAME: &str = "nodefence";
/// The taint a release adds.
pub const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

/// The cluster, the BMC and the daemon replicas.
pub struct World {
    pub kube: FakeKubeHandle,
    pub sim: Arc<SimHandle>,
    pub bmc: Arc<MockRedfishHandle>,
    /// The IPMI BMCs of the nodes with an IPMI [`Method`], by node name.
    pub ipmi: BTreeMap<String, Arc<MockIpmiHandle>>,
    /// Every machine's hardware besides the shared Redfish BMC.
    pub hw: Arc<Hardware>,
    link: tokio::task::JoinHandle<()>,
    replicas: Vec<Replica>,
    /// A client for the test itself (the replicas have their own).
    pub client: kube::Client,
    pub config: nodefence::config::Config,
    /// The options every replica starts with (its identity replaced).
    pub options: DaemonOptions,
    pub nodes: Vec<NodeSetup>,
    /// Simulation speed.
    pub speed: f64,
    /// Holds the config files (`nodefence.toml`, `inventory.toml`, the password).
    pub _dir: tempfile::TempDir,
    /// The kubeconfig replicas start with (the restricted ServiceAccount's token when
    /// the world enforces RBAC, see [`WorldBuilder::rbac`]).
    pub replica_kubeconfig: String,
    /// The Metal3 stand-in, in worlds with Metal3 ([`WorldBuilder::metal3`]).
    pub metal3: Option<nodefence_mocks::metal3::Metal3StandIn>,
}

impl World {
    pub fn store(&self) -> Store {
        self.kube.store()
    }

    /// A stock (real-cluster) duration at this world's speed.
    pub fn scaled(&self, d: Duration) -> Duration {
        d.div_f64(self.speed)
    }

    /// The BMC system id of `node`'s machine.
    ///
    /// # Panics
    /// For a node not in the world.
    pub fn system_of(&self, node: &str) -> String {
        self.nodes
            .iter()
            .find(|n| n.name == node)
            .map(|n| n.system_id.clone())
            .unwrap_or_else(|| panic!("no node {node} in the world"))
    }

    /// Network cut: the kubelet falls silent, the machine stays On.
    pub fn cut_network(&self, node: &str) {
        self.sim.set_kubelet(node, false);
    }

    /// Power loss: the machine goes Off (and its kubelet with it).
    ///
    /// # Panics
    /// For an EC2 node (stop its instance through [`World::moto`]).
    pub fn pull_plug(&self, node: &str) {
        let n = self.setup(node);
        assert!(!n.has_aws(), "pull the plug of an EC2 node through moto");
        if let Some(bmc) = self.ipmi.get(node) {
            bmc.set_power(IpmiPower::Off);
        }
        if let (Some(vc), Some(moid)) = (&self.hw.vsphere, self.hw.vms.get(node)) {
            vc.set_power(moid, nodefence_mocks::vsphere::VmPower::PoweredOff);
        }
        if let (Some(infra), true) = (&self.hw.kubevirt, n.has_kubevirt()) {
            assert!(
                infra
                    .kv
                    .lose_host(crate::common::kubevirt::VM_NAMESPACE, node),
                "{node}'s VM has no VMI"
            );
        }
        if n.powered_by_redfish() {
            self.bmc.set_power(&n.system_id, MockPower::Off);
        }
    }

    /// The mock vCenter of a world with [`Method::Vsphere`] nodes.
    pub fn vsphere(&self) -> &nodefence_mocks::vsphere::MockVsphereHandle {
        self.hw
            .vsphere
            .as_ref()
            .expect("a node with Method::Vsphere")
    }

    /// The KubeVirt infrastructure cluster of a world with [`Method::Kubevirt`] nodes.
    pub fn kubevirt(&self) -> &crate::common::kubevirt::Infra {
        self.hw
            .kubevirt
            .as_ref()
            .expect("a node with Method::Kubevirt")
    }

    /// The managed object id of `node`'s VM.
    pub fn vm_of(&self, node: &str) -> String {
        self.hw.vms[node].clone()
    }

    /// The machine's power: On only when every power path its methods use is on.
    pub fn power_of(&self, node: &str) -> Option<MockPower> {
        let on = self.hw.powered(&self.bmc, self.setup(node))?;
        Some(if on { MockPower::On } else { MockPower::Off })
    }

    /// Every power command executed for `node`'s machine: the IPMI Chassis Control
    /// operations as the mock names them, then the Redfish ResetTypes (EC2 keeps no
    /// such log: ask moto for the instance's state).
    pub fn resets_of(&self, node: &str) -> Vec<String> {
        let mut out: Vec<String> = self.ipmi.get(node).map_or_else(Vec::new, |bmc| {
            bmc.control_log()
                .into_iter()
                .map(|r| control_name(r.op).to_string())
                .collect()
        });
        let system = self.system_of(node);
        out.extend(
            self.bmc
                .reset_log()
                .into_iter()
                .filter(|(s, _)| *s == system)
                .map(|(_, t)| t),
        );
        out
    }

    /// The world's moto server.
    ///
    /// # Panics
    /// When no node is on EC2.
    pub fn moto(&self) -> &crate::common::moto::Moto {
        self.hw.moto.as_ref().expect("a node with Method::Aws")
    }

    /// The EC2 instance of `node`.
    pub fn instance_of(&self, node: &str) -> String {
        self.hw.instances[node].clone()
    }

    fn setup(&self, node: &str) -> &NodeSetup {
        self.nodes
            .iter()
            .find(|n| n.name == node)
            .unwrap_or_else(|| panic!("no node {node} in the world"))
    }

    pub fn node(&self, name: &str) -> Option<Value> {
        self.store().get(NODES, None, name).ok()
    }

    pub fn pod(&self, name: &str) -> Option<Value> {
        self.store().get(PODS, Some("default"), name).ok()
    }

    /// The Node's Ready condition is True.
    pub fn node_ready(&self, name: &str) -> bool {
        self.node(name)
            .and_then(|n| {
                n.pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .cloned()
            })
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
    }

    /// The out-of-service taints on `node` (0 or 1, unless something is wrong).
    pub fn out_of_service_taints(&self, node: &str) -> usize {
        self.node(node)
            .and_then(|n| n.pointer("/spec/taints").and_then(Value::as_array).cloned())
            .map_or(0, |t| {
                t.iter().filter(|t| t["key"] == OUT_OF_SERVICE).count()
            })
    }

    pub fn has_out_of_service_taint(&self, node: &str) -> bool {
        self.out_of_service_taints(node) > 0
    }

    /// Every `events.k8s.io/v1` Event in the cluster.
    pub fn events(&self) -> Vec<Value> {
        self.store().list(EVENTS_V1, None).0
    }

    /// The Events regarding `node`.
    pub fn events_on(&self, node: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e.pointer("/regarding/name").and_then(Value::as_str) == Some(node))
            .collect()
    }

    /// Every Event with `reason` (whatever it regards).
    pub fn events_with_reason(&self, reason: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["reason"] == reason)
            .collect()
    }

    pub fn event_reasons(&self, node: &str) -> Vec<String> {
        self.events_on(node)
            .iter()
            .filter_map(|e| e["reason"].as_str().map(str::to_string))
            .collect()
    }

    /// Waits (bounded) for an Event with `reason` on `node`: Events are published
    /// asynchronously, a moment after the change they describe.
    pub async fn expect_event(&self, node: &str, reason: &str) {
        eventually(
            &format!("Event {reason} on {node}"),
            Duration::from_secs(10),
            || async { self.event_reasons(node).iter().any(|r| r == reason) },
        )
        .await;
    }

    /// Waits (bounded, 10 s) for at least one Event with `reason` for which `matches`
    /// holds (whatever it regards); returns all such Events.
    pub async fn expect_event_where(
        &self,
        reason: &str,
        matches: impl Fn(&Value) -> bool,
    ) -> Vec<Value> {
        let found = || -> Vec<Value> {
            self.events_with_reason(reason)
                .into_iter()
                .filter(|e| matches(e))
                .collect()
        };
        eventually(
            &format!("an Event {reason} (matching)"),
            Duration::from_secs(10),
            || async { !found().is_empty() },
        )
        .await;
        found()
    }

    /// The node a pod runs on, once it is Running (and not being deleted).
    pub fn running_on(&self, pod: &str) -> Option<String> {
        let pod = self.pod(pod)?;
        if pod.pointer("/status/phase") != Some(&Value::from("Running"))
            || pod.pointer("/metadata/deletionTimestamp").is_some()
        {
            return None;
        }
        pod.pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .map(str::to_string)
    }

    /// The node db-0 runs on, once it is Running.
    pub fn db_node(&self) -> Option<String> {
        self.running_on("db-0")
    }

    /// Waits (bounded, 30 s) for db-0 to be Running; its node.
    pub async fn db_placed(&self) -> String {
        eventually("db-0 Running", Duration::from_secs(30), || async {
            self.db_node().is_some()
        })
        .await;
        self.db_node().unwrap()
    }

    /// Waits (bounded) for the out-of-service taint on `victim`, then for db-0
    /// Running on another node.
    pub async fn released_and_moved(&self, victim: &str) {
        eventually("out-of-service taint", Duration::from_secs(60), || async {
            self.has_out_of_service_taint(victim)
        })
        .await;
        eventually(
            "db-0 Running elsewhere",
            Duration::from_secs(60),
            || async { self.db_node().is_some_and(|n| n != victim) },
        )
        .await;
    }

    /// Asserts that no identity Event was raised on `node` (with `require_identity`
    /// on, a release then proves the identity matched).
    pub fn assert_no_identity_events(&self, node: &str) {
        let reasons = self.event_reasons(node);
        assert!(
            !reasons.iter().any(|r| r.starts_with("Identity")),
            "identity Events on {node}: {reasons:?}"
        );
    }

    /// Waits (bounded, 45 s) for the engine's own warning that it will not act on
    /// `node` for an identity reason (`IdentityMismatch`, `IdentityUnproven`): the
    /// Event whose note says nothing is released or powered off (the BMC monitor's
    /// Events of the same reasons say something else).
    pub async fn expect_identity_block(&self, node: &str, reason: &str) {
        eventually(
            &format!("the engine's {reason} block on {node}"),
            Duration::from_secs(45),
            || async {
                self.events_on(node).iter().any(|e| {
                    e["reason"] == reason
                        && e["note"]
                            .as_str()
                            .is_some_and(|n| n.contains("nothing is released or powered off"))
                })
            },
        )
        .await;
    }

    /// The holder of the daemon's leader Lease, as stored.
    pub fn leader(&self) -> Option<String> {
        self.store()
            .get(LEASES, Some(LEADER_LEASE_NAMESPACE), LEADER_LEASE_NAME)
            .ok()?
            .pointer("/spec/holderIdentity")
            .and_then(Value::as_str)
            .filter(|h| !h.is_empty())
            .map(str::to_string)
    }

    /// Identities of the replicas running now.
    pub fn running_replicas(&self) -> Vec<String> {
        self.replicas
            .iter()
            .filter(|r| r.running())
            .map(|r| r.identity.clone())
            .collect()
    }

    /// Starts a replica with `identity` (its own runtime, thread and client).
    pub fn start_replica(&mut self, identity: &str) {
        assert!(
            !self.running_replicas().iter().any(|r| r == identity),
            "replica {identity} already runs"
        );
        self.replicas.push(Replica::start(
            identity,
            self.config.clone(),
            self.replica_kubeconfig.clone(),
            self.options.clone(),
        ));
    }

    fn replica_mut(&mut self, identity: &str) -> &mut Replica {
        self.replicas
            .iter_mut()
            .find(|r| r.identity == identity && r.running())
            .unwrap_or_else(|| panic!("no running replica {identity}"))
    }

    /// Graceful shutdown of one replica (its shutdown future resolves; it releases
    /// the Lease); panics if the daemon returned an error.
    pub async fn stop_replica(&mut self, identity: &str) {
        self.replica_mut(identity).stop().await;
    }

    /// Waits (bounded) for a replica that ends by itself (a refused start) and returns
    /// how it ended.
    pub async fn replica_outcome(&mut self, identity: &str) -> Option<anyhow::Result<()>> {
        self.replica_mut(identity).wait().await
    }

    /// The requests of the restricted identity (RBAC worlds) that were refused (403).
    pub fn forbidden_requests(&self) -> Vec<String> {
        self.kube
            .requests()
            .into_iter()
            .filter(|r| r.user.is_some() && r.status == 403)
            .map(|r| format!("{} {}", r.method, r.path_and_query))
            .collect()
    }

    /// Kills one replica abruptly: every task ends at once, the Lease is not released.
    pub async fn crash_replica(&mut self, identity: &str) {
        self.replica_mut(identity).crash().await;
    }

    /// Stops every replica and starts a new one with another identity (a restart, or
    /// a new leader after a crash of the old one).
    pub async fn restart_daemon(&mut self, identity: &str) {
        for r in &mut self.replicas {
            r.stop().await;
        }
        self.start_replica(identity);
    }

    /// Stops every replica gracefully and the machine link.
    pub async fn stop(mut self) {
        for r in &mut self.replicas {
            r.stop().await;
        }
        self.link.abort();
        self.hw.stop();
    }
}

impl Drop for World {
    fn drop(&mut self) {
        // A failed test: end the replicas (dropping `kill` ends their runtimes).
        for r in &mut self.replicas {
            r.kill.take();
        }
        self.link.abort();
        self.hw.stop();
    }
}

/// Polls `check` every 100 ms until it holds; panics after `within`.
pub async fn eventually<F: Future<Output = bool>>(
    what: &str,
    within: Duration,
    check: impl FnMut() -> F,
) {
    eventually_every(what, within, Duration::from_millis(100), check).await;
}

/// [`eventually`] with another polling period.
pub async fn eventually_every<F: Future<Output = bool>>(
    what: &str,
    within: Duration,
    period: Duration,
    mut check: impl FnMut() -> F,
) {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if check().await {
            return;
        }
        tokio::time::sleep(period).await;
    }
    panic!("timed out after {within:?} waiting for: {what}");
}

/// `worker-N` → `BladeN` (the default naming).
pub fn blade(node: &str) -> String {
    node.replace("worker-", "Blade")
}
