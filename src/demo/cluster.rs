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
//! `NodeHealthCheck` names the template. The daemon runs with one of its
//! configurations ([`Profile`]); a scenario that needs another restarts it.
//!
//! For the companions of `rack-power` (see `companions`), fake-kube knows their
//! ServiceAccount `kube-system/nodefence-companion` with the grant
//! `deploy/components/companion` gives it (get nodes: the daemon checks it at
//! start-up), and issues each one a projected token bound to its node; with
//! [`Profile::Watchdog`] the daemon hears them on a free loopback port, over TLS with a
//! certificate of a private CA made at start (the companions trust that CA).
//!
//! With a standby ([`World::start`]'s `standby`, `power-loss --kill-leader-after`), a
//! second replica of the daemon runs beside the first once it leads, its companions'
//! listener on 127.0.0.2 (the first's on 127.0.0.1, the same port: the companions
//! beat to both, as to the replicas a headless Service lists); [`World::kill_leader`]
//! ends the leader's task at once (no Lease released), and the standby becomes the
//! daemon the scenarios watch.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::{Context, anyhow};
use nodefence_mocks::kube::resources::{LEASES, NODES, PODS};
use nodefence_mocks::kube::sim::{NodeSpec, SimConfig, SimHandle, Simulation, WorkloadSpec};
use nodefence_mocks::kube::store::Store;
use nodefence_mocks::kube::{BoundToken, FakeKube, FakeKubeHandle};
use nodefence_mocks::machines::{self, Machine};
use nodefence_mocks::redfish::{
    MockPower, MockRedfish, MockRedfishHandle, Profile as BmcProfile, ResetRecord, SystemSpec,
};
use nodefence_mocks::vsphere::{MockVsphere, MockVsphereHandle, VmSpec};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::task::AbortOnDropHandle;

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
/// The standby replica's identity.
const STANDBY_IDENTITY: &str = "nodefence-demo-standby";
/// Where each replica's companions' listener takes its port.
const PRIMARY_IP: [u8; 4] = [127, 0, 0, 1];
const STANDBY_IP: [u8; 4] = [127, 0, 0, 2];
const LEADER_LEASE: (&str, &str) = ("kube-system", "nodefence");
/// The companions' ServiceAccount, in nodefence's namespace.
const COMPANION_ACCOUNT: &str = "nodefence-companion";

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
    /// A second replica, once started ([`World::start_standby`]).
    standby: Mutex<Option<Daemon>>,
    /// Whether a standby will run (its listener's address is kept free too).
    with_standby: bool,
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
    /// What nodefence's companion listener and the companions share.
    companions: CompanionSetup,
}

/// nodefence's listener for the companions and what they need to reach it.
struct CompanionSetup {
    /// The listener's certificate and key, and the CA that signed it (files).
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
    /// The companions' token for the API server (they read their own Node).
    api_token: String,
    /// The listener's port, once a daemon with [`Profile::Watchdog`] was started.
    port: Mutex<Option<u16>>,
}

/// The daemon and what belongs to its configuration.
struct Daemon {
    profile: Profile,
    /// Its identity in the leader Lease.
    identity: String,
    stop: oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<()>>,
    /// The feed of its Events, worded with its settings.
    events: JoinHandle<()>,
}

impl World {
    /// Starts everything; steps go to `story` from the first moment. With `standby`,
    /// the companions' listener port is one both replicas can take.
    pub async fn start(
        speed: f64,
        status_after_lease: Duration,
        story: &Story,
        profile: Profile,
        workers: Workers,
        standby: bool,
        leader_lease: Option<Duration>,
    ) -> anyhow::Result<World> {
        let store = Store::default();
        let companion_api_token = uuid::Uuid::new_v4().simple().to_string();
        let kube = FakeKube::builder()
            .store(store.clone())
            .identity(
                companion_api_token.clone(),
                companion_user(),
                nodefence_mocks::kube::authz::Policy::for_service_account(
                    &companion_rbac(),
                    LEADER_LEASE.0,
                    COMPANION_ACCOUNT,
                ),
            )
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
        let mut demo = DemoConfig::new(speed, &bmc.base_url(), &password, &machines)
            .with_leader_lease(leader_lease);
        if let Some(vc) = &vcenter {
            demo = demo.on_vcenter(&vc.base_url(), &vc.ca_pem());
        }
        let files = config::Files::write(&demo)?;
        let companions = CompanionSetup::write(&files, companion_api_token)?;
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
            standby: Mutex::new(None),
            with_standby: standby,
            wording: Mutex::new(stock_words),
            nhc: Some(nhc),
            client,
            story: story.clone(),
            demo,
            files,
            stock,
            companions,
        };
        world.start_daemon(profile).await?;
        Ok(world)
    }

    /// Starts the daemon with `profile`'s configuration, and the feed of its Events.
    async fn start_daemon(&self, profile: Profile) -> anyhow::Result<()> {
        let (config, wording) = config::load(&self.files, &self.demo, &self.stock, profile)?;
        let listen = if profile.listens() {
            let port = free_port(self.with_standby)?;
            *lock(&self.companions.port) = Some(port);
            Some(std::net::SocketAddr::from((PRIMARY_IP, port)))
        } else {
            None
        };
        let events = feeds::nodefence_events(&self.store(), self.story.clone(), wording.clone());
        let daemon = self.spawn_daemon(config, profile, IDENTITY, listen, events)?;
        *lock(&self.wording) = wording;
        *lock(&self.daemon) = Some(daemon);
        Ok(())
    }

    /// Spawns one replica of the daemon; `listen`: its companions' listener.
    fn spawn_daemon(
        &self,
        config: crate::config::Config,
        profile: Profile,
        identity: &str,
        listen: Option<std::net::SocketAddr>,
        events: JoinHandle<()>,
    ) -> anyhow::Result<Daemon> {
        let (stop, stopped) = oneshot::channel::<()>();
        let companions = listen.map(|listen| {
            daemon::CompanionListener {
                listen,
                service_account: COMPANION_ACCOUNT.into(),
                certificate: crate::telemetry::certificate::CertificateSource::Files {
                    cert: self.companions.cert.clone(),
                    key: self.companions.key.clone(),
                },
                // Not scaled: the companions' timing is real time (their scenarios play
                // at 1x).
                heartbeat_interval: crate::heartbeat::DEFAULT_HEARTBEAT_INTERVAL,
                heartbeat_timeout: crate::heartbeat::DEFAULT_HEARTBEAT_TIMEOUT,
            }
            .into()
        });
        let options = DaemonOptions {
            drivers: Default::default(),
            config_check: None,
            companions,
            dry_run: false,
            health_listen: "127.0.0.1:0".parse().map_err(|e| anyhow!("{e}"))?,
            metrics: crate::daemon::MetricsEndpoint::plain(
                "127.0.0.1:0".parse().map_err(|e| anyhow!("{e}"))?,
            ),
            lease_namespace: LEADER_LEASE.0.into(),
            lease_name: LEADER_LEASE.1.into(),
            identity: identity.into(),
            leader_timings: self.demo.leader_timings(),
        };
        let task = tokio::spawn(daemon::run(config, self.client.clone(), options, async {
            let _ = stopped.await;
        }));
        Ok(Daemon {
            profile,
            identity: identity.to_string(),
            stop,
            task,
            events,
        })
    }

    /// Starts a second replica with the running daemon's configuration, its
    /// companions' listener on 127.0.0.2 (same port). The world must have been
    /// started with `standby`, and the daemon must listen for companions.
    pub async fn start_standby(&self) -> anyhow::Result<()> {
        let profile = self.profile().context("no daemon runs")?;
        let port = (*lock(&self.companions.port))
            .filter(|_| profile.listens() && self.with_standby)
            .context("a standby needs a daemon with its companions' listener")?;
        let (config, _) = config::load(&self.files, &self.demo, &self.stock, profile)?;
        // The first replica's feed tells every Event (it reads the API server's).
        let events = tokio::spawn(async {});
        let standby = self.spawn_daemon(
            config,
            profile,
            STANDBY_IDENTITY,
            Some(std::net::SocketAddr::from((STANDBY_IP, port))),
            events,
        )?;
        *lock(&self.standby) = Some(standby);
        Ok(())
    }

    /// Kills the leading replica at once, as a crashed process (its task and every
    /// task it started end; its Lease is not released); the standby becomes the
    /// daemon the scenarios watch. Returns the killed replica's identity.
    pub fn kill_leader(&self) -> anyhow::Result<String> {
        let standby = lock(&self.standby)
            .take()
            .context("no standby replica runs")?;
        let mut daemon = lock(&self.daemon);
        let leader = daemon.take().context("no daemon runs")?;
        leader.task.abort();
        let killed = leader.identity;
        *daemon = Some(Daemon {
            events: leader.events,
            ..standby
        });
        Ok(killed)
    }

    /// The leader Lease's holder and when it acquired it (the Lease's `acquireTime`).
    pub fn leader_acquired(&self) -> Option<(String, SystemTime)> {
        let lease = self
            .store()
            .get(LEASES, Some(LEADER_LEASE.0), LEADER_LEASE.1)
            .ok()?;
        let holder = lease.pointer("/spec/holderIdentity")?.as_str()?.to_string();
        let at = lease.pointer("/spec/acquireTime")?.as_str()?;
        let at = humantime::parse_rfc3339_weak(at).ok()?;
        Some((holder, at))
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

    /// Stops the daemon and a standby (each releases the leader Lease it holds) and
    /// starts the daemon again with
    /// `profile`'s configuration, as an operator would after changing its files.
    pub async fn restart_daemon(&self, profile: Profile) -> anyhow::Result<()> {
        self.stop_daemon().await;
        self.start_daemon(profile).await
    }

    async fn stop_daemon(&self) {
        let standby = lock(&self.standby).take();
        if let Some(standby) = standby {
            stop_replica(standby).await;
        }
        let daemon = lock(&self.daemon).take();
        if let Some(daemon) = daemon {
            stop_replica(daemon).await;
        }
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

    /// True once the daemon the scenarios watch holds the leader Lease (after
    /// [`Self::kill_leader`], the former standby).
    pub fn nodefence_leads(&self) -> bool {
        let Some(identity) = lock(&self.daemon).as_ref().map(|d| d.identity.clone()) else {
            return false;
        };
        self.store()
            .get(LEASES, Some(LEADER_LEASE.0), LEADER_LEASE.1)
            .ok()
            .and_then(|l| {
                l.pointer("/spec/holderIdentity")
                    .and_then(Value::as_str)
                    .map(|h| h == identity)
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

    /// Makes every BMC request answer 500 (`true`), as a BMC that lost power with its
    /// machine answers nothing useful, or answers normally again (`false`).
    pub fn bmc_fails(&self, fail: bool) {
        if fail {
            self.bmc
                .inject(nodefence_mocks::redfish::Fault::Fail500 { count: u32::MAX });
        } else {
            self.bmc.clear_faults();
        }
    }

    /// The machine of `node` as a switch a task may keep (the BMC's systems only).
    pub fn machine(&self, node: &str) -> anyhow::Result<MachineSwitch> {
        if self.vcenter.is_some() {
            return Err(anyhow!("{node} is a VM: no machine switch"));
        }
        Ok(MachineSwitch::new(
            self.bmc.clone(),
            self.ledger.clone(),
            self.system(node)?,
        ))
    }

    /// The node's fencing mark (`nodefence.io/fencing-mark`), if it carries one.
    pub fn fencing_mark(&self, node: &str) -> Option<String> {
        self.node(node)?
            .pointer("/metadata/annotations")?
            .get(crate::watchdog::mark::FENCING_MARK_ANNOTATION)?
            .as_str()
            .map(str::to_string)
    }

    /// The node's boot ID, as its kubelet reports it.
    pub fn boot_id(&self, node: &str) -> Option<String> {
        self.node(node)?
            .pointer("/status/nodeInfo/bootID")?
            .as_str()
            .map(str::to_string)
    }

    /// From now on, when the API server stores `node` with a fencing mark and with the
    /// out-of-service taint (the first time each).
    pub fn node_writes(&self, node: &str) -> NodeWrites {
        let (_, _, mut writes) = self.store().list_and_subscribe(NODES, None);
        let seen: Arc<Mutex<WriteTimes>> = Arc::default();
        let (name, record) = (node.to_string(), seen.clone());
        let task = tokio::spawn(async move {
            use tokio::sync::broadcast::error::RecvError;
            loop {
                let write = match writes.recv().await {
                    Ok(w) => w,
                    Err(RecvError::Lagged(n)) => {
                        tracing::warn!("demo: {n} store writes were skipped");
                        continue;
                    }
                    Err(RecvError::Closed) => break,
                };
                if write.resource != NODES || write.object["metadata"]["name"] != name.as_str() {
                    continue;
                }
                let marked = write.object["metadata"]["annotations"]
                    [crate::watchdog::mark::FENCING_MARK_ANNOTATION]
                    .is_string();
                let tainted = write.object["spec"]["taints"]
                    .as_array()
                    .is_some_and(|ts| ts.iter().any(|t| t["key"] == OUT_OF_SERVICE));
                let mut times = lock(&record);
                if marked && times.mark.is_none() {
                    times.mark = Some(write.at);
                }
                if tainted && times.taint.is_none() {
                    times.taint = Some(write.at);
                }
            }
        });
        NodeWrites {
            seen,
            _task: AbortOnDropHandle::new(task),
        }
    }

    /// nodefence's companion listener, `https://127.0.0.1:PORT`, once a daemon that
    /// listens ([`Profile::listens`]) was started; `https://localhost:PORT` when a
    /// standby runs beside it (each replica's address is then in
    /// [`Self::companion_replicas`], the certificate checked against the name).
    pub fn companion_listener(&self) -> Option<url::Url> {
        let port = (*lock(&self.companions.port))?;
        let host = if self.with_standby {
            "localhost"
        } else {
            "127.0.0.1"
        };
        url::Url::parse(&format!("https://{host}:{port}")).ok()
    }

    /// Every replica's listener address, when a standby runs (as a headless Service
    /// would list them); `None`: the listener's URL names the only one.
    pub fn companion_replicas(&self) -> Option<Vec<std::net::SocketAddr>> {
        let port = (*lock(&self.companions.port))?;
        self.with_standby.then(|| {
            vec![
                std::net::SocketAddr::from((PRIMARY_IP, port)),
                std::net::SocketAddr::from((STANDBY_IP, port)),
            ]
        })
    }

    /// The CA file the companions trust the listener's certificate with.
    pub fn companion_ca(&self) -> PathBuf {
        self.companions.ca.clone()
    }

    /// Issues `node`'s companion a projected token (its ServiceAccount's, bound to the
    /// node, for nodefence's audience), as the kubelet does for a new pod, and writes
    /// it to a private file; returns the file.
    pub fn companion_token(&self, node: &str) -> anyhow::Result<PathBuf> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let token = format!("companion-{node}-{id}");
        self.kube.issue_token(BoundToken {
            token: token.clone(),
            user: companion_user(),
            audiences: vec![crate::heartbeat::hello::AUDIENCE.into()],
            pod: Some((format!("{COMPANION_ACCOUNT}-{node}"), id.clone())),
            node: Some((node.to_string(), format!("node-uid-{node}"))),
        });
        self.files
            .add(&format!("companion-token-{node}-{id}"), &token)
    }

    /// A client of the API server as the companions' ServiceAccount.
    pub async fn companion_client(&self) -> anyhow::Result<kube::Client> {
        client_from(&self.kube.kubeconfig_yaml_for(&self.companions.api_token)).await
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

/// Stops one replica (it releases its leader Lease), within 10 s, and its feed.
async fn stop_replica(daemon: Daemon) {
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One machine's power, for a task that outlives a borrow of the world (a simulated
/// watchdog): read it, or switch it as a person (or a reset) would.
#[derive(Clone)]
pub struct MachineSwitch {
    bmc: Arc<MockRedfishHandle>,
    ledger: PowerLedger,
    system: String,
}

impl MachineSwitch {
    /// The `system` of `bmc`; `ledger` keeps the BMC feed from telling its switches.
    pub fn new(bmc: Arc<MockRedfishHandle>, ledger: PowerLedger, system: &str) -> Self {
        Self {
            bmc,
            ledger,
            system: system.to_string(),
        }
    }

    pub fn power(&self) -> Option<MockPower> {
        self.bmc.power(&self.system)
    }

    /// Sets the machine's power (the story tells it: the BMC feed does not again).
    pub fn set(&self, power: MockPower) -> anyhow::Result<()> {
        self.ledger
            .set(&self.bmc, &self.system, power)
            .map_err(|e| anyhow!("{e}"))
    }
}

/// When the API server stored a node's first fencing mark and its first
/// out-of-service taint (its clock at each write), since [`World::node_writes`].
pub struct NodeWrites {
    seen: Arc<Mutex<WriteTimes>>,
    _task: AbortOnDropHandle<()>,
}

#[derive(Debug, Clone, Copy, Default)]
struct WriteTimes {
    mark: Option<SystemTime>,
    taint: Option<SystemTime>,
}

impl NodeWrites {
    /// When the mark was stored, once it was.
    pub fn mark(&self) -> Option<SystemTime> {
        lock(&self.seen).mark
    }

    /// When the out-of-service taint was stored, once it was.
    pub fn taint(&self) -> Option<SystemTime> {
        lock(&self.seen).taint
    }
}

/// `system:serviceaccount:kube-system:nodefence-companion`.
fn companion_user() -> String {
    format!(
        "system:serviceaccount:{}:{COMPANION_ACCOUNT}",
        LEADER_LEASE.0
    )
}

/// The companions' grant, as `deploy/components/companion` applies it (bound in the
/// demo's namespace): get nodes, cluster-wide.
fn companion_rbac() -> Vec<Value> {
    vec![
        serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": COMPANION_ACCOUNT},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}],
        }),
        serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": COMPANION_ACCOUNT},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": COMPANION_ACCOUNT,
            },
            "subjects": [{
                "kind": "ServiceAccount",
                "name": COMPANION_ACCOUNT,
                "namespace": LEADER_LEASE.0,
            }],
        }),
    ]
}

impl CompanionSetup {
    /// Makes the listener's certificate (a private CA and a leaf naming the loopback)
    /// and writes it next to the daemon's files.
    fn write(files: &config::Files, api_token: String) -> anyhow::Result<Self> {
        let tls = nodefence_mocks::tls::TlsMaterial::generate_for(&["127.0.0.1", "localhost"])
            .map_err(|e| anyhow!("cannot make the companion listener's certificate: {e}"))?;
        Ok(Self {
            cert: files.add("companion-listener.crt", tls.cert_pem())?,
            key: files.add("companion-listener.key", tls.key_pem())?,
            ca: files.add("companion-ca.crt", tls.ca_pem())?,
            api_token,
            port: Mutex::new(None),
        })
    }
}

/// A loopback port free for TCP and UDP both (the listener takes both), on
/// 127.0.0.1 and, with `standby`, on 127.0.0.2 too.
fn free_port(standby: bool) -> anyhow::Result<u16> {
    for _ in 0..20 {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0")?;
        let port = tcp.local_addr()?.port();
        let free = |ip: [u8; 4]| {
            let addr = std::net::SocketAddr::from((ip, port));
            std::net::UdpSocket::bind(addr).is_ok()
                && (ip == PRIMARY_IP || std::net::TcpListener::bind(addr).is_ok())
        };
        if free(PRIMARY_IP) && (!standby || free(STANDBY_IP)) {
            return Ok(port);
        }
    }
    Err(anyhow!("no loopback port free for both TCP and UDP"))
}

/// A kube client from fake-kube's kubeconfig, as `nodefence run --kubeconfig` builds one.
async fn client(kube: &FakeKubeHandle) -> anyhow::Result<kube::Client> {
    client_from(&kube.kubeconfig_yaml()).await
}

async fn client_from(kubeconfig: &str) -> anyhow::Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(kubeconfig)
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
