//! Building a [`World`]: its machines, its policy, its files, its replicas.

use super::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nodefence::cluster::leader::LeaderTimings;
use nodefence::daemon::{self, DaemonOptions};
use nodefence::engine::{LeaseStaleAfter, Policy};
use nodefence_mocks::kube::FakeKube;
use nodefence_mocks::kube::sim::{NodeSpec, SimConfig, Simulation, WorkloadSpec};
use nodefence_mocks::kube::store::Store;
use nodefence_mocks::machines;
use nodefence_mocks::redfish::{MockPower, MockRedfish, MockRedfishHandle, Profile, SystemSpec};
use tokio::sync::oneshot;

use super::super::{PASSWORD, USER};

/// One machine: a Kubernetes node and its BMC system.
#[derive(Debug, Clone)]
pub struct NodeSetup {
    /// Kubernetes node name (`worker-N` by default).
    pub name: String,
    /// The BMC system id (`BladeN` by default).
    pub system_id: String,
    /// The machine's power at start. A machine that starts Off has a silent kubelet.
    pub power: MockPower,
    /// The SMBIOS UUID of the machine: the Node's `systemUUID` and the BMC system's
    /// `UUID`, so the identity cross-check matches (`None`: random on both sides, and
    /// different).
    pub uuid: Option<String>,
    /// The BMC system's UUID when it must differ from [`Self::uuid`] (a miswired
    /// inventory entry).
    pub bmc_uuid: Option<String>,
    /// Listed in the inventory (nodefence never touches a node that is not).
    pub in_inventory: bool,
    /// Extra TOML lines for this node's inventory entry (e.g. `system_uuid = "..."`;
    /// `{instance:worker-2}` becomes that node's EC2 instance id).
    pub inventory_lines: Vec<String>,
    /// How nodefence reaches the machine: its fencing levels, primary first
    /// (`[Redfish]` by default; see [`Method`]). A node with an IPMI method has its
    /// own mock IPMI BMC (GUID = the UUID's bytes reversed, as SMBIOS sends it); one
    /// with [`Method::Aws`] is an EC2 instance in the world's moto server.
    pub methods: Vec<Method>,
    /// How far the machine's clock runs behind (its kubelet's `renewTime`s and
    /// heartbeats look that much older).
    pub clock_behind: Duration,
}

impl NodeSetup {
    /// `worker-{i}` on system `Blade{i}`, powered on, in the inventory, with a UUID
    /// of its own that the Node and the BMC both report.
    pub fn worker(i: usize) -> Self {
        Self {
            name: format!("worker-{i}"),
            system_id: format!("Blade{i}"),
            power: MockPower::On,
            uuid: Some(format!("4c4c4544-0000-4000-8000-{i:012x}")),
            bmc_uuid: None,
            in_inventory: true,
            inventory_lines: Vec::new(),
            methods: vec![Method::Redfish],
            clock_behind: Duration::ZERO,
        }
    }
}

type PolicyTweak = Box<dyn Fn(&mut Policy) + Send>;

/// The namespace of the BareMetalHosts in worlds with Metal3 ([`WorldBuilder::metal3`]).
pub const METAL3_NAMESPACE: &str = "metal3";

/// Metal3 in a world: which nodes' machines are BareMetalHosts, how each Node names
/// its host, and the stand-in's timings.
#[derive(Debug, Clone)]
pub struct Metal3Setup {
    /// The nodes whose machines have a BareMetalHost (named after the node, in
    /// [`METAL3_NAMESPACE`], its BMC the node's system on the shared Redfish BMC,
    /// credentials in Secret `<node>-bmc`, externally provisioned, online).
    pub hosts: Vec<String>,
    /// Nodes matched to their host through the consumerRef chain (a Metal3Machine
    /// owned by a Cluster API Machine whose nodeRef is the Node); the others carry
    /// CAPM3's providerID `metal3://metal3/<host>/<node>-m3m`.
    pub consumer_ref: Vec<String>,
    /// The operator's and Ironic's timings as in a real cluster (the world scales them
    /// by its speed).
    pub timing: nodefence_mocks::metal3::Timing,
    /// Hosts created only later by the test ([`World::add_bare_metal_host`]).
    pub later: Vec<String>,
    /// More lines of `[metal3]` in `nodefence.toml` (e.g. `resync_interval = "1s"`).
    pub toml: String,
}

/// nodefence's namespace in worlds that enforce RBAC (as `deploy/` installs it).
pub const RBAC_NAMESPACE: &str = "nodefence";

/// How the replicas trust a Redfish BMC that serves HTTPS ([`WorldBuilder::bmc_tls`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BmcTrust {
    /// `ca_file` = the certificate the BMC presents (a self-signed one trusted as itself).
    CaFile,
    /// `tls_fingerprint` = its SHA-256.
    Pin,
}

/// How to build a [`World`]. Start from [`WorldBuilder::new`] (or [`world`]).
pub struct WorldBuilder {
    pub nodes: Vec<NodeSetup>,
    pub workloads: Vec<WorkloadSpec>,
    /// Simulation speed (the simulated control plane runs this many times faster).
    pub speed: f64,
    pub dry_run: bool,
    /// How long a BMC power transition takes.
    pub transition_delay: Duration,
    pub leader_timings: LeaderTimings,
    /// Identities of the replicas started with the world (in this order).
    pub replicas: Vec<String>,
    /// `[policy]` in `nodefence.toml`: key → TOML value (`"6s"` with its quotes).
    pub policy_keys: BTreeMap<String, String>,
    /// Appended to `nodefence.toml` after its `[policy]` section (start a new
    /// `[section]`).
    pub agent_toml: String,
    /// More keys of `[power]` in `nodefence.toml` (`monitor_interval = "200ms"`).
    pub power_toml: String,
    /// RBAC objects (as JSON) that authorize the replicas, as the ServiceAccount
    /// `nodefence/nodefence` in namespace `nodefence` (`None`: all-powerful).
    pub rbac: Option<Vec<serde_json::Value>>,
    /// Other ServiceAccounts fake-kube knows (token, namespace, name, the RBAC
    /// objects that authorize them): its TokenReviews and SubjectAccessReviews
    /// answer for them (a scraper of `/metrics`, say).
    pub service_accounts: Vec<(String, String, String, Vec<serde_json::Value>)>,
    /// The Redfish BMC serves HTTPS with this certificate, trusted this way (`None`:
    /// plain HTTP).
    pub bmc_tls: Option<(nodefence_mocks::tls::CertKind, BmcTrust)>,
    /// How often the replicas check their configuration files (`None`: never; a
    /// reload reads the files as written, without the scaled timings).
    pub config_check: Option<Duration>,
    /// fake-kube serves HTTPS (kubectl sends its token only over TLS).
    pub kube_tls: bool,
    /// BareMetalHosts and the Metal3 stand-in (`None`: no Metal3).
    pub metal3: Option<Metal3Setup>,
    /// The replicas hear the companions here (`--companion-listen`).
    pub companions: Option<nodefence::daemon::CompanionListener>,
    policy: Vec<PolicyTweak>,
}

impl Default for WorldBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl WorldBuilder {
    /// Three workers (`worker-1..3` on `Blade1..3`, On), a one-replica stateful
    /// workload `default/db`, 10x speed, one replica `test-replica`, and policy timings
    /// scaled like the simulation ([`scaled_timings`]); leader Lease 3 s / renew
    /// deadline 2 s / retry 200 ms.
    pub fn new() -> Self {
        Self {
            nodes: (1..=3).map(NodeSetup::worker).collect(),
            workloads: vec![WorkloadSpec::new("default", "db")],
            speed: 10.0,
            dry_run: false,
            transition_delay: Duration::from_millis(200),
            leader_timings: LeaderTimings {
                lease_duration: Duration::from_secs(3),
                renew_deadline: Duration::from_secs(2),
                retry_period: Duration::from_millis(200),
            },
            replicas: vec!["test-replica".into()],
            policy_keys: BTreeMap::new(),
            agent_toml: String::new(),
            power_toml: String::new(),
            config_check: None,
            bmc_tls: None,
            rbac: None,
            service_accounts: Vec::new(),
            kube_tls: false,
            metal3: None,
            companions: None,
            policy: Vec::new(),
        }
    }

    /// fake-kube serves HTTPS, its CA in the kubeconfigs (kubectl sends a bearer
    /// token only over TLS).
    /// The replicas hear the companions with `listener`; fake-kube knows the
    /// companions' ServiceAccount with the component's grant (what the daemon checks
    /// at start-up: the companions may read their Node).
    pub fn companions(mut self, listener: nodefence::daemon::CompanionListener) -> Self {
        let account = listener.service_account.clone();
        self.companions = Some(listener);
        self.service_account(
            "companion-api-token",
            super::LEADER_LEASE_NAMESPACE,
            &account,
            crate::common::deploy_common::companion_rbac(super::LEADER_LEASE_NAMESPACE),
        )
    }

    pub fn kube_tls(mut self) -> Self {
        self.kube_tls = true;
        self
    }

    /// Metal3 manages the machines of `hosts`: each gets a BareMetalHost (see
    /// [`Metal3Setup`]), served by fake-kube with the Metal3 CRDs, acted on by the
    /// stand-in for Metal3's operator and Ironic; `[metal3] hosts = true` reads them
    /// (namespace [`METAL3_NAMESPACE`]). Real-cluster timings, scaled.
    pub fn metal3(mut self, hosts: &[&str]) -> Self {
        self.metal3 = Some(Metal3Setup {
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            consumer_ref: Vec::new(),
            timing: nodefence_mocks::metal3::Timing::default(),
            later: Vec::new(),
            toml: String::new(),
        });
        self
    }

    /// Changes the Metal3 set-up.
    ///
    /// # Panics
    /// Without [`Self::metal3`] first.
    pub fn metal3_setup(mut self, change: impl FnOnce(&mut Metal3Setup)) -> Self {
        change(self.metal3.as_mut().expect("WorldBuilder::metal3 first"));
        self
    }

    /// `n` workers `worker-1..n` on `Blade1..n`, all On (replaces the nodes).
    pub fn workers(mut self, n: usize) -> Self {
        self.nodes = (1..=n).map(NodeSetup::worker).collect();
        self
    }

    /// Every node reached through `methods` (its fencing levels, primary first).
    pub fn methods(mut self, methods: &[Method]) -> Self {
        for n in &mut self.nodes {
            n.methods = methods.to_vec();
        }
        self
    }

    /// Changes one node's set-up.
    ///
    /// # Panics
    /// If there is no such node.
    pub fn node(mut self, name: &str, change: impl FnOnce(&mut NodeSetup)) -> Self {
        let node = self
            .nodes
            .iter_mut()
            .find(|n| n.name == name)
            .unwrap_or_else(|| panic!("no node {name} in the world"));
        change(node);
        self
    }

    /// Adds a node.
    pub fn add_node(mut self, node: NodeSetup) -> Self {
        self.nodes.push(node);
        self
    }

    /// No workload at all.
    pub fn no_workloads(mut self) -> Self {
        self.workloads.clear();
        self
    }

    pub fn workload(mut self, spec: WorkloadSpec) -> Self {
        self.workloads.push(spec);
        self
    }

    pub fn dry_run(mut self, on: bool) -> Self {
        self.dry_run = on;
        self
    }

    pub fn speed(mut self, speed: f64) -> Self {
        self.speed = speed;
        self
    }

    pub fn transition_delay(mut self, delay: Duration) -> Self {
        self.transition_delay = delay;
        self
    }

    pub fn leader_timings(mut self, timings: LeaderTimings) -> Self {
        self.leader_timings = timings;
        self
    }

    /// The replicas started with the world (none: start them with
    /// [`World::start_replica`]).
    pub fn replicas(mut self, identities: &[&str]) -> Self {
        self.replicas = identities.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Sets a `[policy]` key in `nodefence.toml` (`value` as TOML: `"\"10s\""`, `3`),
    /// so group and node overrides in the inventory still resolve over it. The
    /// [`scaled_timings`] keys are overwritten after loading: change those with
    /// [`Self::policy`].
    pub fn policy_key(mut self, key: &str, value: &str) -> Self {
        self.policy_keys.insert(key.to_string(), value.to_string());
        self
    }

    /// Changes the loaded policy: the cluster-wide one and every node's (tweaks run in
    /// order, after the configuration is loaded, over any per-node override).
    pub fn policy(mut self, tweak: impl Fn(&mut Policy) + Send + 'static) -> Self {
        self.policy.push(Box::new(tweak));
        self
    }

    /// The Redfish BMC serves HTTPS presenting a `kind` certificate, which the
    /// inventory trusts through `trust` (never `insecure`).
    pub fn bmc_tls(mut self, kind: nodefence_mocks::tls::CertKind, trust: BmcTrust) -> Self {
        self.bmc_tls = Some((kind, trust));
        self
    }

    /// The replicas run as the ServiceAccount `nodefence` of namespace `nodefence`,
    /// authorized by exactly these RBAC objects (fake-kube answers 403 to anything
    /// else, and SelfSubjectAccessReviews from them); their own namespace (Lease,
    /// pause switch, records) is `nodefence`.
    pub fn rbac(mut self, objects: Vec<serde_json::Value>) -> Self {
        self.rbac = Some(objects);
        self
    }

    /// fake-kube also knows the ServiceAccount `namespace/name` by `token`, authorized
    /// by exactly these RBAC objects (for TokenReviews and SubjectAccessReviews).
    pub fn service_account(
        mut self,
        token: &str,
        namespace: &str,
        name: &str,
        rbac: Vec<serde_json::Value>,
    ) -> Self {
        self.service_accounts
            .push((token.into(), namespace.into(), name.into(), rbac));
        self
    }

    /// Replicas reload their configuration files when they change, checking this often.
    pub fn config_check(mut self, every: Duration) -> Self {
        self.config_check = Some(every);
        self
    }

    pub fn agent_toml(mut self, toml: &str) -> Self {
        self.agent_toml.push_str(toml);
        self
    }

    /// More keys of `[power]` in `nodefence.toml`.
    pub fn power_toml(mut self, toml: &str) -> Self {
        self.power_toml.push_str(toml);
        self
    }

    /// Starts the world; panics when a peer it needs (moto, `fence_ipmilan`) is
    /// missing: use [`Self::try_start`] in tests that need one.
    pub async fn start(self) -> World {
        self.try_start()
            .await
            .expect("the peers this world needs are installed")
    }

    /// Starts the world, or `None` (after a "skipped" line) when a peer its nodes'
    /// methods need is missing (a failure under `NODEFENCE_REQUIRE_PEERS=1`).
    pub async fn try_start(self) -> Option<World> {
        nodefence::tls::install_crypto_provider();
        let hw = Arc::new(Hardware::start(&self.nodes, self.transition_delay).await?);
        let store = Store::default();
        let mut kube_builder = FakeKube::builder().store(store.clone()).tls(self.kube_tls);
        let restricted_token = "nodefence-service-account-token";
        if let Some(objects) = &self.rbac {
            let policy = nodefence_mocks::kube::authz::Policy::for_service_account(
                objects,
                RBAC_NAMESPACE,
                "nodefence",
            );
            kube_builder = kube_builder.identity(
                restricted_token,
                format!("system:serviceaccount:{RBAC_NAMESPACE}:nodefence"),
                policy,
            );
        }
        for (token, namespace, name, objects) in &self.service_accounts {
            let policy =
                nodefence_mocks::kube::authz::Policy::for_service_account(objects, namespace, name);
            kube_builder = kube_builder.identity(
                token.as_str(),
                format!("system:serviceaccount:{namespace}:{name}"),
                policy,
            );
        }
        let kube = kube_builder.start().await.unwrap();
        if self.rbac.is_some() {
            let mut ns = serde_json::json!({"metadata": {"name": RBAC_NAMESPACE}});
            nodefence_mocks::kube::strategy::prepare_for_create(
                nodefence_mocks::kube::resources::NAMESPACES,
                &mut ns,
            );
            store
                .create(nodefence_mocks::kube::resources::NAMESPACES, None, ns)
                .unwrap();
        }
        let sim = Arc::new(Simulation::start(
            store.clone(),
            SimConfig {
                speed: self.speed,
                ..SimConfig::default()
            },
        ));
        for n in &self.nodes {
            let mut spec = NodeSpec::new(n.name.clone());
            if let Some(uuid) = &n.uuid {
                spec = spec.system_uuid(uuid.clone());
            }
            if let Some(id) = hw.provider_id(&n.name) {
                spec = spec.provider_id(id);
            }
            if let Some(m) = &self.metal3
                && m.hosts.contains(&n.name)
                && !m.consumer_ref.contains(&n.name)
            {
                spec = spec.provider_id(format!("metal3://{METAL3_NAMESPACE}/{0}/{0}-m3m", n.name));
            }
            sim.add_node(spec.clock_behind(n.clock_behind));
        }
        for w in &self.workloads {
            sim.add_stateful_workload(w.clone());
        }
        let mut bmc_builder = MockRedfish::builder();
        if let Some((kind, _)) = self.bmc_tls {
            bmc_builder = bmc_builder.certificate(kind);
        }
        let bmc = Arc::new(
            bmc_builder
                .profile(Profile::MultiSystem)
                .systems(self.nodes.iter().map(|n| {
                    let spec = SystemSpec::new(n.system_id.clone()).power(n.power);
                    match n.bmc_uuid.as_ref().or(n.uuid.as_ref()) {
                        Some(uuid) => spec.uuid(uuid.clone()),
                        None => spec,
                    }
                }))
                .credentials(USER, PASSWORD)
                .transition_delay(self.transition_delay)
                .start()
                .await
                .unwrap(),
        );
        let probes = self
            .nodes
            .iter()
            .map(|n| (n.name.clone(), hw.probe(&bmc, n)))
            .collect();
        let link = machines::link_probes(sim.clone(), probes, Duration::from_millis(50));
        let dir = tempfile::tempdir().unwrap();
        // Written right after `[power]`'s keys (see `write_config`).
        let mut agent_toml = format!("{}[policy]\n", self.power_toml);
        for (k, v) in &self.policy_keys {
            agent_toml.push_str(&format!("{k} = {v}\n"));
        }
        agent_toml.push_str(&self.agent_toml);
        if let Some(m) = &self.metal3 {
            agent_toml.push_str(&format!(
                "[metal3]\nhosts = true\nnamespaces = [\"{METAL3_NAMESPACE}\"]\n{}",
                m.toml
            ));
        }
        hw.write_files(dir.path());
        let trust = self.bmc_tls.map(|(_, trust)| {
            let pem = bmc
                .certificate_pem()
                .expect("an HTTPS BMC has a certificate");
            std::fs::write(dir.path().join("bmc.pem"), &pem).unwrap();
            match trust {
                BmcTrust::CaFile => "ca_file = \"bmc.pem\"\n".to_string(),
                BmcTrust::Pin => {
                    use rustls::pki_types::pem::PemObject;
                    let der =
                        rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
                    format!(
                        "tls_fingerprint = \"{}\"\n",
                        nodefence::tls::CertFingerprint::of(der.as_ref())
                    )
                }
            }
        });
        let mut config = nodefence::config::load(&write_config(
            dir.path(),
            &bmc,
            &hw,
            &self.nodes,
            &agent_toml,
            trust.as_deref().unwrap_or(""),
        ))
        .unwrap();
        // The scaled timings are below what the configuration accepts: set after loading.
        let tweaks = std::iter::once(&scaled_timings as &(dyn Fn(&mut Policy) + Send))
            .chain(self.policy.iter().map(|t| t.as_ref()));
        for tweak in tweaks {
            tweak(&mut config.agent.policy);
            // The policy of the entries the daemon builds from BareMetalHosts.
            tweak(&mut config.agent.metal3.policy);
            for node in config.inventory.nodes.values_mut() {
                tweak(&mut node.policy);
            }
        }
        let client = client_for(&kube.kubeconfig_yaml()).await;
        let metal3 = match &self.metal3 {
            Some(setup) => {
                Some(super::metal3::start(&client, &bmc, &self.nodes, setup, self.speed).await)
            }
            None => None,
        };
        let replica_kubeconfig = if self.rbac.is_some() {
            kube.kubeconfig_yaml_for(restricted_token)
        } else {
            kube.kubeconfig_yaml()
        };
        let options = DaemonOptions {
            drivers: Default::default(),
            dry_run: self.dry_run,
            health_listen: "127.0.0.1:0".parse().unwrap(),
            metrics: nodefence::daemon::MetricsEndpoint::plain("127.0.0.1:0".parse().unwrap()),
            lease_namespace: if self.rbac.is_some() {
                RBAC_NAMESPACE.into()
            } else {
                LEADER_LEASE_NAMESPACE.into()
            },
            lease_name: LEADER_LEASE_NAME.into(),
            identity: "test-replica".into(),
            leader_timings: self.leader_timings,
            config_check: self.config_check,
            companions: self.companions.clone().map(Into::into),
        };
        let mut world = World {
            kube,
            sim,
            bmc,
            ipmi: hw.ipmi.clone(),
            hw,
            link,
            replicas: Vec::new(),
            client,
            config,
            options,
            nodes: self.nodes,
            speed: self.speed,
            _dir: dir,
            replica_kubeconfig,
            metal3,
        };
        for identity in &self.replicas {
            world.start_replica(identity);
        }
        Some(world)
    }
}

/// The policy timings of every world, at 10x like the simulation (set after loading:
/// the configuration refuses them, rightly, for a real cluster): `unhealthy_after`
/// 6 s, `lease_stale_after` 2.5 s, `recovered_after` 2 s, `power_off_retry_after` 6 s,
/// `on_poll_interval` 500 ms, no `min_power_off_interval`. Applied to the cluster-wide
/// policy and every node's, before [`WorldBuilder::policy`] tweaks.
pub fn scaled_timings(policy: &mut Policy) {
    // Fixed: the simulated kubelets renew every 1 s at 10x, while their Leases say 40 s.
    policy.lease_stale_after = Some(LeaseStaleAfter::Fixed(Duration::from_millis(2500)));
    policy.unhealthy_after = Duration::from_secs(6);
    policy.recovered_after = Duration::from_secs(2);
    policy.min_power_off_interval = Duration::ZERO;
    policy.power_off_retry_after = Duration::from_secs(6);
    policy.on_poll_interval = Duration::from_millis(500);
}

/// The default world ([`WorldBuilder::new`]), with or without dry-run, started.
pub async fn world(dry_run: bool) -> World {
    WorldBuilder::new().dry_run(dry_run).start().await
}

/// A kube client for the fake API server; build it on the runtime that uses it.
pub async fn client_for(kubeconfig_yaml: &str) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(kubeconfig_yaml).unwrap();
    // As `nodefence run` builds it (User-Agent included).
    nodefence::cluster::client(
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap(),
    )
    .unwrap()
}

/// Writes the password file, `nodefence.toml` and `inventory.toml`; returns the
/// path of `nodefence.toml`.
pub fn write_config(
    dir: &Path,
    bmc: &MockRedfishHandle,
    hw: &Hardware,
    nodes: &[NodeSetup],
    agent_toml: &str,
    bmc_trust: &str,
) -> PathBuf {
    std::fs::write(dir.join("bmc-password"), PASSWORD).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            dir.join("bmc-password"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
    }
    std::fs::write(
        dir.join("nodefence.toml"),
        format!(
            "inventory = \"inventory.toml\"\n[power]\nconfirm_readings = 3\nconfirm_interval = \"100ms\"\nconfirm_timeout = \"10s\"\n{agent_toml}"
        ),
    )
    .unwrap();
    let mut inv = format!(
        "[defaults]\ndriver = \"redfish\"\nendpoint = \"{}\"\nusername = \"{USER}\"\npassword_file = \"bmc-password\"\n\
         connect_timeout = \"1s\"\nrequest_timeout = \"1s\"\noperation_timeout = \"3s\"\nretries = 1\n{bmc_trust}",
        bmc.base_url()
    );
    for n in nodes.iter().filter(|n| n.in_inventory) {
        if n.methods == [Method::Redfish] {
            inv.push_str(&format!(
                "[nodes.{}]\nsystem_id = \"{}\"\n",
                n.name, n.system_id
            ));
        } else {
            inv.push_str(&format!(
                "[nodes.{}]\n{}",
                n.name,
                hw.inventory_entry(bmc, n)
            ));
        }
        for line in &n.inventory_lines {
            // `{instance:worker-2}`: that node's EC2 instance id (known only now).
            let mut line = line.clone();
            for (node, id) in &hw.instances {
                line = line.replace(&format!("{{instance:{node}}}"), id);
            }
            inv.push_str(&line);
            inv.push('\n');
        }
    }
    std::fs::write(dir.join("inventory.toml"), inv).unwrap();
    dir.join("nodefence.toml")
}

/// One running daemon replica, on its own runtime and thread.
pub struct Replica {
    pub identity: String,
    /// Resolves the daemon's shutdown future (graceful stop).
    pub(super) stop: Option<oneshot::Sender<()>>,
    /// Ends the replica's runtime at once (crash). Dropping it does the same.
    pub(super) kill: Option<oneshot::Sender<()>>,
    /// The daemon's result; `None` when it was killed.
    pub(super) done: Option<oneshot::Receiver<Option<anyhow::Result<()>>>>,
    pub(super) thread: Option<std::thread::JoinHandle<()>>,
}

impl Replica {
    pub(super) fn start(
        identity: &str,
        config: nodefence::config::Config,
        kubeconfig_yaml: String,
        mut options: DaemonOptions,
    ) -> Self {
        options.identity = identity.to_string();
        let (stop, stopped) = oneshot::channel::<()>();
        let (kill, killed) = oneshot::channel::<()>();
        let (done_tx, done) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name(format!("replica-{identity}"))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                let outcome = runtime.block_on(async move {
                    let client = client_for(&kubeconfig_yaml).await;
                    let run = daemon::run(config, client, options, async {
                        let _ = stopped.await;
                    });
                    tokio::select! {
                        result = run => Some(result),
                        _ = killed => None,
                    }
                });
                // Every task of this replica (election, watches, commands) ends here.
                runtime.shutdown_timeout(Duration::from_secs(1));
                let _ = done_tx.send(outcome);
            })
            .unwrap();
        Self {
            identity: identity.to_string(),
            stop: Some(stop),
            kill: Some(kill),
            done: Some(done),
            thread: Some(thread),
        }
    }

    pub(super) fn running(&self) -> bool {
        self.done.is_some()
    }

    pub(super) async fn wait(&mut self) -> Option<anyhow::Result<()>> {
        let done = self.done.take()?;
        let outcome = tokio::time::timeout(Duration::from_secs(30), done)
            .await
            .unwrap_or_else(|_| panic!("replica {} did not stop within 30s", self.identity))
            .unwrap_or_else(|_| panic!("replica {} panicked", self.identity));
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        outcome
    }

    /// Graceful: the daemon's shutdown future resolves; it releases its Lease.
    pub(super) async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(outcome) = self.wait().await {
            outcome.unwrap_or_else(|e| panic!("replica {} failed: {e:#}", self.identity));
        }
    }

    /// Abrupt: the runtime is dropped mid-flight; nothing is released.
    pub(super) async fn crash(&mut self) {
        if let Some(kill) = self.kill.take() {
            let _ = kill.send(());
        }
        // Keep `stop` until the runtime is gone: dropping it would start a graceful stop.
        let outcome = self.wait().await;
        assert!(
            outcome.is_none(),
            "replica {} ended before the crash",
            self.identity
        );
        self.stop.take();
    }
}
