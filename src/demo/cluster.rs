//! The demo's world, all in this process and on loopback: fake-kube with its simulated
//! control plane, a control-plane node and three workers, one Redfish BMC whose
//! systems are the workers' machines (linked to their kubelets), the `db` StatefulSet
//! with its ReadWriteOnce volume, and the real nodefence daemon talking to fake-kube
//! over HTTP with timings scaled to the demo's speed; plus the queries and levers the
//! scenarios use, and an orderly teardown.
//!
//! With [`Workers::Vms`], the workers' machines are VMs on one mock vCenter instead
//! (`driver = "vsphere"`), each found by its Node's systemUUID, the VM's BIOS UUID
//! (the second one's with its first three fields byte-swapped, as older guests
//! report it); the Redfish BMC then serves no node.
//!
//! The remediation component is installed too (the `NodeFenceRemediation` CRDs and
//! the template `nodefence/nodefence`, as `deploy/components/remediation` applies
//! them), and the stand-in of the NodeHealthCheck operator runs, idle until a
//! `NodeHealthCheck` names the template. The daemon runs with one of two
//! configurations ([`Profile`]); a scenario that needs the other restarts it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, anyhow};
use nodefence_mocks::kube::resources::{LEASES, NODES, PODS};
use nodefence_mocks::kube::sim::{NodeSpec, SimConfig, SimHandle, Simulation, WorkloadSpec};
use nodefence_mocks::kube::store::Store;
use nodefence_mocks::kube::{FakeKube, FakeKubeHandle};
use nodefence_mocks::machines::{self, Machine};
use nodefence_mocks::redfish::{
    MockPower, MockRedfish, MockRedfishHandle, Profile as BmcProfile, ResetRecord, SystemSpec,
};
use nodefence_mocks::vsphere::{MockVsphere, MockVsphereHandle, VmSpec};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::config::{self, DemoConfig, Profile};
use super::feeds::{self, PowerLedger};
use super::narrate::Wording;
use super::timeline::Story;
use crate::daemon::{self, DaemonOptions};

pub const CONTROL_PLANE: &str = "cp-1";
pub const WORKERS: [&str; 3] = ["worker-1", "worker-2", "worker-3"];
pub const NAMESPACE: &str = "default";
pub const WORKLOAD: &str = "db";
pub const POD: &str = "db-0";
const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";
const IDENTITY: &str = "nodefence-demo";
const LEADER_LEASE: (&str, &str) = ("kube-system", "nodefence");

/// The namespace of the remediation template and of the requests made from it.
pub const REMEDIATION_NAMESPACE: &str = "nodefence";
/// The template's name (`deploy/components/remediation/template.yaml`).
pub const REMEDIATION_TEMPLATE: &str = "nodefence";
/// The NodeHealthCheck of the `nhc` scenario.
pub const NHC_NAME: &str = "workers-nodefence";

/// What the workers' machines are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workers {
    /// Systems of one Redfish BMC.
    BmcSystems,
    /// VMs on one vCenter.
    Vms,
}

/// Everything running for the demo.
pub struct World {
    pub speed: f64,
    kube: FakeKubeHandle,
    sim: Arc<SimHandle>,
    bmc: Arc<MockRedfishHandle>,
    /// The mock vCenter, when the workers are VMs ([`Workers::Vms`]); `machines` then
    /// holds each VM's managed object id.
    vcenter: Option<Arc<MockVsphereHandle>>,
    machines: Vec<Machine>,
    ledger: PowerLedger,
    link: JoinHandle<()>,
    feeds: Vec<JoinHandle<()>>,
    /// The running daemon, with the feed of its Events.
    daemon: Mutex<Option<Daemon>>,
    /// The words of the daemon's settings, from the last one started.
    wording: Mutex<Wording>,
    /// The NodeHealthCheck operator's stand-in (aborted when dropped).
    nhc: Option<nodefence_mocks::remediation::nhc::NodeHealthCheckController>,
    /// A client of the demo's own (the NodeHealthCheck object).
    client: kube::Client,
    story: Story,
    /// What the daemon's files are made from, and the files.
    demo: DemoConfig,
    files: config::Files,
    /// The simulation's settings before scaling (the words quote them).
    stock: SimConfig,
}

/// The daemon and what belongs to its configuration.
struct Daemon {
    profile: Profile,
    stop: oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<()>>,
    /// The feed of its Events, worded with its settings.
    events: JoinHandle<()>,
}

impl World {
    /// Starts everything; steps go to `story` from the first moment.
    pub async fn start(
        speed: f64,
        status_after_lease: Duration,
        story: &Story,
        profile: Profile,
        workers: Workers,
    ) -> anyhow::Result<World> {
        let store = Store::default();
        let kube = FakeKube::builder()
            .store(store.clone())
            .start()
            .await
            .context("starting fake-kube")?;
        let sim = Arc::new(Simulation::start(
            store.clone(),
            SimConfig {
                speed,
                ..SimConfig::default()
            },
        ));
        let stock = SimConfig::default();
        let mut feeds = Vec::new();
        let mut machines: Vec<Machine> = WORKERS
            .iter()
            .enumerate()
            .map(|(i, w)| Machine::new(format!("Blade{}", i + 1), *w))
            .collect();
        let password = uuid::Uuid::new_v4().simple().to_string();
        // Each machine's SMBIOS UUID, as its kubelet reports it (systemUUID) and as
        // its BMC does (ComputerSystem.UUID): nodefence proves the mapping with it.
        // The second BMC reports its first three fields byte-swapped, as real
        // firmware often does; that is still the same machine.
        let uuids: Vec<uuid::Uuid> = machines.iter().map(|_| uuid::Uuid::new_v4()).collect();
        let bmc_uuid = |i: usize| {
            let u = uuids[i];
            if i == 1 {
                uuid::Uuid::from_bytes_le(*u.as_bytes()).to_string()
            } else {
                u.to_string()
            }
        };
        let bmc = Arc::new(
            MockRedfish::builder()
                .profile(BmcProfile::MultiSystem)
                .systems(machines.iter().enumerate().map(|(i, m)| {
                    SystemSpec::new(&m.system_id)
                        .power(MockPower::On)
                        .uuid(bmc_uuid(i))
                }))
                .credentials("fence", &password)
                .transition_delay(
                    Duration::from_secs(3)
                        .div_f64(speed)
                        .max(Duration::from_millis(50)),
                )
                .start()
                .await
                .context("starting the mock Redfish BMC")?,
        );
        let vcenter = match workers {
            Workers::BmcSystems => None,
            Workers::Vms => {
                let mut builder = MockVsphere::builder()
                    .credentials("fence", &password)
                    .task_delay(
                        Duration::from_secs(2)
                            .div_f64(speed)
                            .max(Duration::from_millis(20)),
                    );
                for (i, w) in WORKERS.iter().enumerate() {
                    builder = builder.vm(VmSpec::new(*w).folder("k8s").bios_uuid(bmc_uuid(i)));
                }
                let vcenter = builder.start().await.context("starting the mock vCenter")?;
                machines = vcenter
                    .vms()
                    .into_iter()
                    .map(|vm| Machine::new(vm.moid, vm.name))
                    .collect();
                Some(Arc::new(vcenter))
            }
        };
        let mut demo = DemoConfig::new(speed, &bmc.base_url(), &password, &machines);
        if let Some(vc) = &vcenter {
            demo = demo.on_vcenter(&vc.base_url(), &vc.ca_pem());
        }
        let files = config::Files::write(&demo)?;
        // The simulation's words are the same in both profiles.
        let (_, stock_words) = config::load(&files, &demo, &stock, Profile::Stock)?;
        let client = client(&kube).await?;
        install_remediation(&client).await?;

        let ledger = PowerLedger::default();
        feeds.push(feeds::simulation(
            sim.subscribe(),
            story.clone(),
            stock_words.clone(),
        ));
        feeds.push(feeds::requests(&store, story.clone(), speed));
        feeds.push(match &vcenter {
            Some(vc) => feeds::vcenter(vc.clone(), machines.clone(), ledger.clone(), story.clone()),
            None => feeds::bmc(bmc.clone(), machines.clone(), ledger.clone(), story.clone()),
        });
        sim.add_node(NodeSpec::new(CONTROL_PLANE).control_plane(true));
        for (w, u) in WORKERS.iter().zip(&uuids) {
            sim.add_node(
                NodeSpec::new(*w)
                    .system_uuid(u.to_string().to_uppercase())
                    .status_after_lease(status_after_lease),
            );
        }
        sim.add_stateful_workload(WorkloadSpec::new(NAMESPACE, WORKLOAD));
        let link = match &vcenter {
            Some(vc) => machines::link_probes(
                sim.clone(),
                machines
                    .iter()
                    .map(|m| {
                        let (vc, moid) = (vc.clone(), m.system_id.clone());
                        let probe: machines::PowerProbe = Arc::new(move || {
                            vc.power(&moid)
                                .map(|p| p != nodefence_mocks::vsphere::VmPower::PoweredOff)
                        });
                        (m.node.clone(), probe)
                    })
                    .collect(),
                Duration::from_millis(50),
            ),
            None => machines::link(
                bmc.clone(),
                sim.clone(),
                machines.clone(),
                Duration::from_millis(50),
            ),
        };

        // NodeHealthCheck's operator has a client of its own, as in a cluster.
        let nhc = nodefence_mocks::remediation::nhc::NodeHealthCheckController::spawn(
            self::client(&kube).await?,
        );
        let world = World {
            speed,
            kube,
            sim,
            bmc,
            vcenter,
            machines,
            ledger,
            link,
            feeds,
            daemon: Mutex::new(None),
            wording: Mutex::new(stock_words),
            nhc: Some(nhc),
            client,
            story: story.clone(),
            demo,
            files,
            stock,
        };
        world.start_daemon(profile).await?;
        Ok(world)
    }

    /// Starts the daemon with `profile`'s configuration, and the feed of its Events.
    async fn start_daemon(&self, profile: Profile) -> anyhow::Result<()> {
        let (config, wording) = config::load(&self.files, &self.demo, &self.stock, profile)?;
        let (stop, stopped) = oneshot::channel::<()>();
        let options = DaemonOptions {
            drivers: Default::default(),
            config_check: None,
            companions: None,
            dry_run: false,
            health_listen: "127.0.0.1:0".parse().map_err(|e| anyhow!("{e}"))?,
            metrics: crate::daemon::MetricsEndpoint::plain(
                "127.0.0.1:0".parse().map_err(|e| anyhow!("{e}"))?,
            ),
            lease_namespace: LEADER_LEASE.0.into(),
            lease_name: LEADER_LEASE.1.into(),
            identity: IDENTITY.into(),
            leader_timings: self.demo.leader_timings(),
        };
        let events = feeds::nodefence_events(&self.store(), self.story.clone(), wording.clone());
        let task = tokio::spawn(daemon::run(config, self.client.clone(), options, async {
            let _ = stopped.await;
        }));
        *lock(&self.wording) = wording;
        *lock(&self.daemon) = Some(Daemon {
            profile,
            stop,
            task,
            events,
        });
        Ok(())
    }

    /// What the workers' machines are.
    pub fn workers(&self) -> Workers {
        if self.vcenter.is_some() {
            Workers::Vms
        } else {
            Workers::BmcSystems
        }
    }

    /// The configuration the daemon runs with.
    pub fn profile(&self) -> Option<Profile> {
        lock(&self.daemon).as_ref().map(|d| d.profile)
    }

    /// The words of the daemon's settings (cluster time).
    pub fn wording(&self) -> Wording {
        lock(&self.wording).clone()
    }

    /// Stops the daemon (it releases its leader Lease) and starts it again with
    /// `profile`'s configuration, as an operator would after changing its files.
    pub async fn restart_daemon(&self, profile: Profile) -> anyhow::Result<()> {
        self.stop_daemon().await;
        self.start_daemon(profile).await
    }

    async fn stop_daemon(&self) {
        let Some(daemon) = lock(&self.daemon).take() else {
            return;
        };
        let _ = daemon.stop.send(());
        let mut task = daemon.task;
        match tokio::time::timeout(Duration::from_secs(10), &mut task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::warn!("demo: the daemon ended with an error: {e:#}"),
            Ok(Err(e)) => tracing::warn!("demo: the daemon task failed: {e}"),
            Err(_) => {
                tracing::warn!("demo: the daemon did not stop within 10s; aborted");
                task.abort();
                let _ = task.await;
            }
        }
        // Its last Events are told before the feed goes.
        tokio::time::sleep(Duration::from_millis(50)).await;
        daemon.events.abort();
        let _ = daemon.events.await;
    }

    /// Creates the NodeHealthCheck of the `nhc` scenario (see
    /// [`super::scenarios::nhc::node_health_check`]).
    pub async fn create_node_health_check(
        &self,
        check: nodefence_mocks::remediation::nhc::NodeHealthCheck,
    ) -> anyhow::Result<()> {
        use kube::api::{Api, PostParams};
        use nodefence_mocks::remediation::nhc::NodeHealthCheck;
        let api: Api<NodeHealthCheck> = Api::all(self.client.clone());
        api.create(&PostParams::default(), &check)
            .await
            .context("creating the NodeHealthCheck")?;
        Ok(())
    }

    /// Deletes the NodeHealthCheck of the `nhc` scenario, if it is there.
    pub async fn delete_node_health_check(&self) {
        use kube::api::{Api, DeleteParams};
        use nodefence_mocks::remediation::nhc::NodeHealthCheck;
        let api: Api<NodeHealthCheck> = Api::all(self.client.clone());
        let _ = api.delete(NHC_NAME, &DeleteParams::default()).await;
    }

    /// Whether the request `nodefence/<name>` exists (asked of the API server).
    pub async fn request_exists(&self, name: &str) -> anyhow::Result<bool> {
        let api: kube::api::Api<crate::remediation::NodeFenceRemediation> =
            kube::api::Api::namespaced(self.client.clone(), REMEDIATION_NAMESPACE);
        Ok(api.get_opt(name).await?.is_some())
    }

    /// A real-time deadline for something that takes `cluster` in a real cluster.
    pub fn within(&self, cluster: Duration) -> Duration {
        cluster.div_f64(self.speed) + Duration::from_secs(10)
    }

    /// Real time that stands for `cluster` in cluster time.
    pub fn real(&self, cluster: Duration) -> Duration {
        cluster.div_f64(self.speed)
    }

    fn store(&self) -> Store {
        self.kube.store()
    }

    /// True while the daemon runs (it only ends on shutdown or a start-up error).
    pub fn daemon_alive(&self) -> bool {
        lock(&self.daemon)
            .as_ref()
            .is_some_and(|d| !d.task.is_finished())
    }

    /// True once nodefence holds its leader Lease.
    pub fn nodefence_leads(&self) -> bool {
        self.store()
            .get(LEASES, Some(LEADER_LEASE.0), LEADER_LEASE.1)
            .ok()
            .and_then(|l| {
                l.pointer("/spec/holderIdentity")
                    .and_then(Value::as_str)
                    .map(|h| h == IDENTITY)
            })
            .unwrap_or(false)
    }

    /// The `renewTime` of the node's kubelet Lease, as written (RFC 3339).
    pub fn lease_renewed(&self, node: &str) -> Option<String> {
        let lease = self
            .store()
            .get(LEASES, Some("kube-node-lease"), node)
            .ok()?;
        lease
            .pointer("/spec/renewTime")
            .and_then(Value::as_str)
            .map(str::to_string)
    }

    fn node(&self, name: &str) -> Option<Value> {
        self.store().get(NODES, None, name).ok()
    }

    pub fn node_ready(&self, name: &str) -> bool {
        self.node(name).is_some_and(|n| {
            n.pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
        })
    }

    pub fn out_of_service(&self, name: &str) -> bool {
        self.node(name).is_some_and(|n| {
            n.pointer("/spec/taints")
                .and_then(Value::as_array)
                .is_some_and(|ts| ts.iter().any(|t| t["key"] == OUT_OF_SERVICE))
        })
    }

    /// The node `db-0` is Running on (not Terminating), if it is.
    pub fn db_running_on(&self) -> Option<String> {
        let pod = self.store().get(PODS, Some(NAMESPACE), POD).ok()?;
        let running = pod.pointer("/status/phase").and_then(Value::as_str) == Some("Running");
        if !running || pod.pointer("/metadata/deletionTimestamp").is_some() {
            return None;
        }
        pod.pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .map(str::to_string)
    }

    /// Every node Ready and untainted by nodefence, every machine On with its kubelet
    /// running, and db-0 Running.
    pub fn whole(&self) -> bool {
        std::iter::once(CONTROL_PLANE)
            .chain(WORKERS)
            .all(|n| self.node_ready(n) && !self.out_of_service(n))
            && WORKERS.iter().all(|w| {
                self.power(w) == Some(MockPower::On) && self.sim.kubelet_running(w) == Some(true)
            })
            && self.db_running_on().is_some()
    }

    fn system(&self, node: &str) -> anyhow::Result<&str> {
        self.machines
            .iter()
            .find(|m| m.node == node)
            .map(|m| m.system_id.as_str())
            .ok_or_else(|| anyhow!("{node} has no machine"))
    }

    /// The machine's real power state (a VM's `runtime.powerState`, `suspended` as
    /// Paused).
    pub fn power(&self, node: &str) -> Option<MockPower> {
        let system = self.system(node).ok()?;
        match &self.vcenter {
            Some(vc) => vc.power(system).map(feeds::mock_power),
            None => self.bmc.power(system),
        }
    }

    /// Pulls the plug (`Off`) or restores power (`On`), as a person would; a VM's
    /// power changes out of band (its host lost power, or came back).
    pub fn set_power(&self, node: &str, power: MockPower) -> anyhow::Result<()> {
        let system = self.system(node)?;
        match &self.vcenter {
            Some(vc) => {
                if self.ledger.set_vm(vc, system, power) {
                    Ok(())
                } else {
                    Err(anyhow!("VM {system} of {node} cannot be set {power:?}"))
                }
            }
            None => self
                .ledger
                .set(&self.bmc, system, power)
                .map_err(|e| anyhow!("{e}")),
        }
    }

    /// The vSphere methods the mock vCenter answered so far (none without VMs).
    pub fn vcenter_methods(&self) -> Vec<String> {
        self.vcenter
            .as_ref()
            .map(|vc| vc.methods())
            .unwrap_or_default()
    }

    /// Cuts (`false`) or restores (`true`) the node's network: its kubelet falls
    /// silent or comes back; the machine's power is untouched.
    pub fn set_network(&self, node: &str, up: bool) {
        self.sim.set_kubelet(node, up);
    }

    pub fn kubelet_running(&self, node: &str) -> bool {
        self.sim.kubelet_running(node) == Some(true)
    }

    /// Makes every BMC request hang (`true`) or answers normally again (`false`).
    /// (With VMs, the vCenter answers 503 instead: it does not hang.)
    pub fn bmc_hangs(&self, hang: bool) {
        if hang {
            self.bmc.inject(nodefence_mocks::redfish::Fault::Hang);
            if let Some(vc) = &self.vcenter {
                vc.inject(nodefence_mocks::vsphere::Fault::Unavailable);
            }
        } else {
            self.bmc.clear_faults();
            if let Some(vc) = &self.vcenter {
                vc.clear_faults();
            }
        }
    }

    /// The power commands the machines received: Resets at the BMC, or power tasks
    /// at the vCenter (`PowerOffVM_Task`...), with the managed object id.
    fn power_commands(&self) -> Vec<ResetRecord> {
        match &self.vcenter {
            Some(vc) => vc
                .power_calls()
                .into_iter()
                .map(|(method, moid)| ResetRecord {
                    system: moid,
                    reset_type: method,
                })
                .collect(),
            None => self.bmc.resets(),
        }
    }

    /// How many power commands the machines have received so far (a mark for
    /// [`Self::resets_since`]).
    pub fn reset_mark(&self) -> usize {
        self.power_commands().len()
    }

    /// The power commands received since `mark`, as `(node, ResetType)` (or the
    /// vSphere method, `PowerOffVM_Task`).
    pub fn resets_since(&self, mark: usize) -> Vec<(String, String)> {
        self.power_commands()
            .into_iter()
            .skip(mark)
            .map(|ResetRecord { system, reset_type }| {
                let node = self
                    .machines
                    .iter()
                    .find(|m| m.system_id == system)
                    .map_or(system, |m| m.node.clone());
                (node, reset_type)
            })
            .collect()
    }

    /// Stops the daemon (it releases its leader Lease), then the NodeHealthCheck
    /// stand-in, the link, the feeds, the simulation, the BMC and fake-kube, each
    /// within a deadline, and removes the temporary files.
    pub async fn stop(mut self) {
        self.stop_daemon().await;
        drop(self.nhc.take());
        self.link.abort();
        let _ = (&mut self.link).await;
        for feed in self.feeds.drain(..) {
            feed.abort();
            let _ = feed.await;
        }
        if let Ok(sim) = Arc::try_unwrap(self.sim) {
            let _ = tokio::time::timeout(Duration::from_secs(10), sim.shutdown()).await;
        }
        if let Ok(bmc) = Arc::try_unwrap(self.bmc) {
            let _ = tokio::time::timeout(Duration::from_secs(5), bmc.shutdown()).await;
        }
        if let Some(Ok(vc)) = self.vcenter.take().map(Arc::try_unwrap) {
            let _ = tokio::time::timeout(Duration::from_secs(5), vc.shutdown()).await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), self.kube.shutdown()).await;
    }

    /// The daemon's error, when it ended by itself (e.g. it could not start).
    pub async fn daemon_error(&mut self) -> Option<String> {
        if self.daemon_alive() {
            return None;
        }
        let daemon = lock(&self.daemon).take()?;
        daemon.events.abort();
        match daemon.task.await {
            Ok(Ok(())) => Some("the daemon stopped".into()),
            Ok(Err(e)) => Some(format!("{e:#}")),
            Err(e) => Some(e.to_string()),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A kube client from fake-kube's kubeconfig, as `nodefence run --kubeconfig` builds one.
async fn client(kube: &FakeKubeHandle) -> anyhow::Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&kube.kubeconfig_yaml())
        .context("reading fake-kube's kubeconfig")?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .context("configuring the Kubernetes client")?;
    crate::cluster::client(config).context("building the Kubernetes client")
}

/// Installs what `deploy/components/remediation` applies and nodefence reads: the
/// `NodeFenceRemediation` CRDs (generated from the same Rust types as its
/// `crds.yaml`), the namespace `nodefence` and the template `nodefence/nodefence`
/// (its `template.yaml`); and the `NodeHealthCheck` CRD, as NHC's operator installs it.
async fn install_remediation(client: &kube::Client) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::CustomResourceExt;
    use kube::api::{Api, PostParams};

    use crate::remediation::{NodeFenceRemediation, NodeFenceRemediationTemplate};
    use nodefence_mocks::remediation::{install_crds, nhc};

    install_crds(
        client,
        [
            NodeFenceRemediation::crd(),
            NodeFenceRemediationTemplate::crd(),
            nhc::nhc_crd(),
        ],
    )
    .await
    .context("installing the remediation CRDs")?;
    let namespace: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": REMEDIATION_NAMESPACE}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .context("creating the namespace nodefence")?;
    let template: NodeFenceRemediationTemplate = serde_json::from_value(serde_json::json!({
        "apiVersion": "remediation.nodefence.io/v1alpha1",
        "kind": "NodeFenceRemediationTemplate",
        "metadata": {"name": REMEDIATION_TEMPLATE, "namespace": REMEDIATION_NAMESPACE},
        "spec": {"template": {"spec": {}}},
    }))?;
    Api::<NodeFenceRemediationTemplate>::namespaced(client.clone(), REMEDIATION_NAMESPACE)
        .create(&PostParams::default(), &template)
        .await
        .context("creating the template nodefence/nodefence")?;
    Ok(())
}
