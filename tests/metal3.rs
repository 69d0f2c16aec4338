//! nodefence's Metal3 path over real HTTP: fake-kube serving the BareMetalHost and
//! Metal3Machine CRDs (`nodefence_mocks::metal3`) and Cluster API's Machine CRD, the
//! stand-in for Metal3's operator and Ironic acting through the API, mock BMCs.
//!
//! - Discovery as `nodefence run` does it ([`nodefence::metal3::inventory::discover`],
//!   `merge`, `resolve_secrets`): hosts listed, the Node matched by its annotation,
//!   its providerID or the consumerRef chain (Metal3Machine → Machine →
//!   `status.nodeRef`), the credentials read from the host's Secret, all under
//!   exactly the RBAC of `deploy/` and `deploy/components/metal3`; then a driver per
//!   entry reads the machine's power and identity, for each family of Metal3 BMC
//!   address (`redfish`, `redfish+http`, `idrac-redfish`, `ilo5-redfish`,
//!   `redfish-virtualmedia`, `ipmi`).
//! - Power through Metal3 ([`KubeHosts`]: the real annotation patch): a ForceOff sent
//!   to the BMC behind Ironic's back is undone by its power-state sync; the same
//!   machine powered off through nodefence's reboot annotation stays off, is proven
//!   Off by the BMC and the BareMetalHost together, and comes back when nodefence
//!   removes the annotation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::deploy_common;

use deploy_common::deploy_rbac;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, Secret};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use nodefence::config::{Config, PowerSource};
use nodefence::identity::{MachineIdentity, NodeIdentity};
use nodefence::metal3::mapping::MatchedBy;
use nodefence::metal3::power::{KubeHosts, Metal3Driver};
use nodefence::metal3::{HostRef, inventory};
use nodefence::power::confirm::{ConfirmPolicy, execute};
use nodefence::power::registry::DriverFactory;
use nodefence::power::{PowerAction, PowerDriver, PowerState};
use nodefence_mocks::ipmi::{MockIpmi, Power as IpmiPower, Privilege};
use nodefence_mocks::kube::{FakeKube, FakeKubeHandle};
use nodefence_mocks::metal3::{
    self, BareMetalHost, Metal3Machine, Metal3StandIn, Timing, bmc_secret, state,
};
use nodefence_mocks::redfish::{MockPower, MockRedfish, MockRedfishHandle, SystemSpec};
use nodefence_mocks::remediation::{install_crds, mhc};
use nodefence_mocks::tls::CertKind;
use serde_json::json;

const NS: &str = "metal3";
const UUID: &str = "4c4c4544-0031-3510-8052-b2c04f503131";
const USER: &str = "admin";
const PASSWORD: &str = "bmc-pw";
const TOKEN: &str = "nodefence-token";

/// Ironic's sync and the operator, faster than their 60 s defaults.
const TIMING: Timing = Timing {
    reconcile: Duration::from_millis(300),
    short_retry: Duration::from_millis(100),
    sync_power_state_interval: Duration::from_millis(400),
    force_power_state_during_sync: true,
    power_state_sync_max_retries: 3,
    power_state_change_timeout: Duration::from_secs(5),
};

/// nodefence's Off proof, quicker than the default's.
const PROOF: ConfirmPolicy = ConfirmPolicy {
    readings: 3,
    interval: Duration::from_millis(100),
    timeout: Duration::from_secs(15),
};

/// fake-kube with the CRDs, namespaces `metal3` and `nodefence`, and a client as
/// nodefence's ServiceAccount authorized by exactly the deploy RBAC.
struct Cluster {
    kube: FakeKubeHandle,
    /// The test's own (all-powerful) client.
    admin: Client,
    /// nodefence's.
    nodefence: Client,
}

async fn client_for(yaml: &str) -> Client {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(yaml).unwrap();
    nodefence::cluster::client(
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap(),
    )
    .unwrap()
}

async fn cluster() -> Cluster {
    nodefence::tls::install_crypto_provider();
    let policy = nodefence_mocks::kube::authz::Policy::for_service_account(
        &deploy_rbac(&["metal3"]),
        "nodefence",
        "nodefence",
    );
    let kube = FakeKube::builder()
        .identity(TOKEN, "system:serviceaccount:nodefence:nodefence", policy)
        .start()
        .await
        .unwrap();
    let admin = client_for(&kube.kubeconfig_yaml()).await;
    let nodefence = client_for(&kube.kubeconfig_yaml_for(TOKEN)).await;
    install_crds(
        &admin,
        [
            metal3::bmh_crd(),
            metal3::metal3_machine_crd(),
            mhc::machine_crd(),
        ],
    )
    .await
    .unwrap();
    for ns in [NS, "nodefence"] {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        Api::<Namespace>::all(admin.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
    }
    Cluster {
        kube,
        admin,
        nodefence,
    }
}

impl Cluster {
    async fn secret(&self, name: &str) {
        Api::<Secret>::namespaced(self.admin.clone(), NS)
            .create(
                &PostParams::default(),
                &bmc_secret(NS, name, USER, PASSWORD),
            )
            .await
            .unwrap();
    }

    async fn host(&self, host: BareMetalHost) {
        Api::<BareMetalHost>::namespaced(self.admin.clone(), NS)
            .create(&PostParams::default(), &host)
            .await
            .unwrap();
    }

    async fn node(&self, name: &str, provider_id: Option<&str>, annotation: Option<&str>) {
        let mut node = json!({"metadata": {"name": name}, "spec": {}});
        if let Some(p) = provider_id {
            node["spec"]["providerID"] = json!(p);
        }
        if let Some(a) = annotation {
            node["metadata"]["annotations"] = json!({"nodefence.io/baremetalhost": a});
        }
        Api::<Node>::all(self.admin.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(node).unwrap(),
            )
            .await
            .unwrap();
    }

    /// A Machine of cluster `test1` whose Node is `node`, and its Metal3Machine.
    async fn machine(&self, name: &str, node: &str) -> Metal3Machine {
        let machine = Api::<mhc::Machine>::namespaced(self.admin.clone(), NS)
            .create(
                &PostParams::default(),
                &mhc::Machine::new(NS, name, "test1"),
            )
            .await
            .unwrap();
        mhc::set_node_ref(&self.admin, NS, name, node)
            .await
            .unwrap();
        let m3m = Metal3Machine::new(
            NS,
            &format!("{name}-m3m"),
            "test1",
            name,
            &machine.uid().unwrap(),
        );
        Api::<Metal3Machine>::namespaced(self.admin.clone(), NS)
            .create(&PostParams::default(), &m3m)
            .await
            .unwrap()
    }

    /// The configuration `nodefence run` would have: `[metal3]` (plus `extra`) in
    /// `nodefence.toml`, no inventory file, the hosts' entries merged and their
    /// Secrets read, as nodefence's ServiceAccount.
    async fn config(&self, dir: &Path, extra: &str) -> (Config, inventory::Discovery) {
        std::fs::write(
            dir.join("nodefence.toml"),
            format!("[metal3]\nhosts = true\nnamespaces = [\"{NS}\"]\n{extra}"),
        )
        .unwrap();
        let mut config = nodefence::config::load(&dir.join("nodefence.toml")).unwrap();
        let discovery = inventory::discover(&self.nodefence, &config.agent.metal3)
            .await
            .unwrap();
        inventory::merge(&mut config, &discovery);
        nodefence::config::resolve_secrets(&mut config, &self.nodefence, "nodefence")
            .await
            .unwrap();
        let denied: Vec<String> = self
            .kube
            .requests()
            .into_iter()
            .filter(|r| r.user.is_some() && r.status == 403)
            .map(|r| format!("{} {}", r.method, r.path_and_query))
            .collect();
        assert!(denied.is_empty(), "not granted by deploy/: {denied:?}");
        (config, discovery)
    }
}

async fn redfish(system: &str, tls: bool) -> MockRedfishHandle {
    let mut b = MockRedfish::builder()
        .system(SystemSpec::new(system).uuid(UUID).power(MockPower::On))
        .credentials(USER, PASSWORD)
        .transition_delay(Duration::from_millis(50));
    if tls {
        b = b.certificate(CertKind::SelfSigned);
    }
    b.start().await.unwrap()
}

/// A driver for `node`'s entry, straight to its BMC; its power read On and its
/// identity the machine's UUID.
async fn reads_the_machine(config: &Config, node: &str) -> Arc<dyn PowerDriver> {
    let mut target = config.inventory.nodes[node].clone();
    target.metal3_host = None;
    let driver = DriverFactory::new(4).driver(&target).unwrap();
    assert_eq!(
        driver
            .status()
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .state,
        PowerState::On
    );
    // The identity proof against a Node whose systemUUID is the machine's.
    let node: Node = serde_json::from_value(
        json!({"metadata": {"name": node}, "status": {"nodeInfo": {"systemUUID": UUID}}}),
    )
    .unwrap();
    let machine = driver.machine_identity().await.unwrap();
    let check = nodefence::identity::check(&NodeIdentity::from_node(&node), &machine);
    assert!(check.is_match(), "{check:?}");
    driver
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_matches_nodes_three_ways_and_reads_each_hosts_secret_under_the_deploy_rbac() {
    let c = cluster().await;
    let bmc = MockRedfish::builder()
        .systems(["1", "2", "3"].map(|s| {
            SystemSpec::new(s)
                .uuid(format!("4c4c4544-0000-4000-8000-00000000000{s}"))
                .power(MockPower::On)
        }))
        .credentials(USER, PASSWORD)
        .start()
        .await
        .unwrap();
    let address = |s: &str| format!("redfish+http://{}/redfish/v1/Systems/{s}", bmc.addr());
    for (host, secret, system) in [
        ("bmh-a", "a-bmc", "1"),
        ("bmh-b", "b-bmc", "2"),
        ("bmh-c", "c-bmc", "3"),
    ] {
        c.secret(secret).await;
        let mut h = BareMetalHost::new(NS, host, &address(system), secret);
        if host == "bmh-c" {
            let m3m = c.machine("machine-c", "worker-c").await;
            h = h.consumer(&m3m);
        }
        c.host(h).await;
    }
    // An unrelated Secret in the namespace is never read.
    c.secret("unrelated").await;
    c.node("worker-a", None, Some(&format!("{NS}/bmh-a"))).await;
    c.node(
        "worker-b",
        Some(&format!("metal3://{NS}/bmh-b/machine-b-m3m")),
        None,
    )
    .await;
    c.node("worker-c", None, None).await;
    c.node("worker-x", None, None).await;
    let dir = tempfile::tempdir().unwrap();
    let (config, discovery) = c.config(dir.path(), "").await;
    assert!(discovery.problems.is_empty(), "{:?}", discovery.problems);
    let matched: Vec<(&str, &str, &MatchedBy)> = discovery
        .matched
        .iter()
        .map(|(n, (h, by))| (n.as_str(), h.name.as_str(), by))
        .collect();
    assert_eq!(matched.len(), 3, "{matched:?}");
    assert!(
        matches!(matched[0], ("worker-a", "bmh-a", MatchedBy::Annotation)),
        "{matched:?}"
    );
    assert!(
        matches!(matched[1], ("worker-b", "bmh-b", MatchedBy::ProviderId)),
        "{matched:?}"
    );
    assert!(
        matches!(matched[2], ("worker-c", "bmh-c", MatchedBy::ConsumerRef)),
        "{matched:?}"
    );
    let nodes: Vec<&String> = config.inventory.nodes.keys().collect();
    assert_eq!(nodes, ["worker-a", "worker-b", "worker-c"]);
    for (node, host) in [
        ("worker-a", "bmh-a"),
        ("worker-b", "bmh-b"),
        ("worker-c", "bmh-c"),
    ] {
        let entry = &config.inventory.nodes[node];
        assert_eq!(entry.metal3_host, Some(HostRef::new(NS, host)));
        assert_eq!(
            entry.origin.to_string(),
            format!("BareMetalHost {NS}/{host}")
        );
        let credential = entry.power.credential().unwrap();
        assert_eq!(credential.username, USER);
    }
    // The Secrets read: the three hosts', one by one; never a list, never another.
    let mut secret_reads: Vec<String> = c
        .kube
        .requests()
        .into_iter()
        .filter(|r| r.user.is_some() && r.path_and_query.contains("/secrets"))
        .map(|r| format!("{} {}", r.method, r.path_and_query))
        .collect();
    // Read concurrently: in any order.
    secret_reads.sort();
    assert_eq!(
        secret_reads,
        ["a-bmc", "b-bmc", "c-bmc"].map(|s| format!("GET /api/v1/namespaces/{NS}/secrets/{s}")),
    );
    bmc.shutdown().await;
}

/// One host at `address` for node `worker-1` (by providerID): the entry's driver
/// reads the machine.
async fn one_host(
    address: &str,
    host: impl FnOnce(BareMetalHost) -> BareMetalHost,
    extra: &str,
) -> (Config, tempfile::TempDir) {
    let c = cluster().await;
    c.secret("worker-1-bmc").await;
    c.host(host(BareMetalHost::new(
        NS,
        "worker-1",
        address,
        "worker-1-bmc",
    )))
    .await;
    c.node(
        "worker-1",
        Some(&format!("metal3://{NS}/worker-1/m3m-1")),
        None,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (config, discovery) = c.config(dir.path(), extra).await;
    assert!(discovery.problems.is_empty(), "{:?}", discovery.problems);
    assert!(config.inventory.nodes.contains_key("worker-1"));
    (config, dir)
}

/// `[metal3] ca_file` trusting the mock's self-signed certificate.
fn ca_file(dir: &Path, bmc: &MockRedfishHandle) -> String {
    let path = dir.join("bmc-ca.pem");
    std::fs::write(&path, bmc.certificate_pem().unwrap()).unwrap();
    format!("ca_file = \"{}\"\n", path.display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheme_redfish_is_https_verified_against_the_ca_file() {
    let bmc = redfish("1", true).await;
    let tmp = tempfile::tempdir().unwrap();
    let extra = ca_file(tmp.path(), &bmc);
    let address = format!("redfish://{}/redfish/v1/Systems/1", bmc.addr());
    let (config, _dir) = one_host(&address, |h| h, &extra).await;
    match &config.inventory.nodes["worker-1"].power {
        PowerSource::Redfish(t) => assert_eq!(t.endpoint.scheme(), "https"),
        other => panic!("{other:?}"),
    }
    reads_the_machine(&config, "worker-1").await;
    bmc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheme_redfish_http_is_plain_http() {
    let bmc = redfish("1", false).await;
    let address = format!("redfish+http://{}/redfish/v1/Systems/1", bmc.addr());
    let (config, _dir) = one_host(&address, |h| h, "").await;
    reads_the_machine(&config, "worker-1").await;
    bmc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheme_idrac_redfish_reaches_system_embedded_1() {
    let bmc = redfish("System.Embedded.1", true).await;
    let tmp = tempfile::tempdir().unwrap();
    let extra = ca_file(tmp.path(), &bmc);
    let address = format!(
        "idrac-redfish://{}/redfish/v1/Systems/System.Embedded.1",
        bmc.addr()
    );
    let (config, _dir) = one_host(&address, |h| h, &extra).await;
    reads_the_machine(&config, "worker-1").await;
    bmc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheme_ilo5_redfish_is_redfish_over_https() {
    let bmc = redfish("1", true).await;
    let tmp = tempfile::tempdir().unwrap();
    let extra = ca_file(tmp.path(), &bmc);
    let address = format!("ilo5-redfish://{}/redfish/v1/Systems/1", bmc.addr());
    let (config, _dir) = one_host(&address, |h| h, &extra).await;
    reads_the_machine(&config, "worker-1").await;
    bmc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheme_redfish_virtualmedia_unverified_only_with_allow_insecure() {
    let bmc = redfish("1", true).await;
    let address = format!("redfish-virtualmedia://{}/redfish/v1/Systems/1", bmc.addr());
    // Without allow_insecure the host gets no entry, and says why.
    let c = cluster().await;
    c.secret("worker-1-bmc").await;
    c.host(
        BareMetalHost::new(NS, "worker-1", &address, "worker-1-bmc")
            .disable_certificate_verification(),
    )
    .await;
    c.node(
        "worker-1",
        Some(&format!("metal3://{NS}/worker-1/m3m-1")),
        None,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (config, discovery) = c.config(dir.path(), "").await;
    assert!(config.inventory.nodes.is_empty());
    assert!(
        discovery
            .problems
            .iter()
            .any(|p| p.contains("allow_insecure")),
        "{:?}",
        discovery.problems
    );
    let (config, discovery) = c.config(dir.path(), "allow_insecure = true\n").await;
    assert!(
        discovery
            .warnings
            .iter()
            .any(|w| w.contains("not verified")),
        "{:?}",
        discovery.warnings
    );
    reads_the_machine(&config, "worker-1").await;
    bmc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheme_ipmi_reaches_the_ipmi_bmc() {
    let mut guid = *uuid::Uuid::parse_str(UUID).unwrap().as_bytes();
    guid.reverse();
    let bmc = MockIpmi::builder()
        .name("worker-1")
        .user(USER, PASSWORD, Privilege::Administrator)
        .guid(guid)
        .power(IpmiPower::On)
        .start()
        .await
        .unwrap();
    let address = format!("ipmi://127.0.0.1:{}", bmc.port());
    let (config, _dir) = one_host(&address, |h| h, "").await;
    assert_eq!(
        config.inventory.nodes["worker-1"].power.driver_name(),
        "ipmi"
    );
    reads_the_machine(&config, "worker-1").await;
}

// ---------------------------------------------------------------------------------
// Power through Metal3

struct Rig {
    c: Cluster,
    bmc: MockRedfishHandle,
    metal3: Metal3StandIn,
    /// The node's own driver: Redfish, straight to the BMC.
    direct: Arc<dyn PowerDriver>,
    href: HostRef,
    _dir: tempfile::TempDir,
}

async fn rig() -> Rig {
    let c = cluster().await;
    let bmc = redfish("1", false).await;
    c.secret("worker-1-bmc").await;
    let address = format!("redfish+http://{}/redfish/v1/Systems/1", bmc.addr());
    c.host(BareMetalHost::new(NS, "worker-1", &address, "worker-1-bmc").externally_provisioned())
        .await;
    c.node(
        "worker-1",
        Some(&format!("metal3://{NS}/worker-1/test1-workers-x7k2p")),
        None,
    )
    .await;
    let metal3 = Metal3StandIn::spawn(c.admin.clone(), NS, TIMING);
    let dir = tempfile::tempdir().unwrap();
    let (config, _) = c.config(dir.path(), "").await;
    let mut target = config.inventory.nodes["worker-1"].clone();
    let href = target.metal3_host.take().expect("managed by Metal3");
    let direct = DriverFactory::new(4).driver(&target).unwrap();
    let rig = Rig {
        c,
        bmc,
        metal3,
        direct,
        href,
        _dir: dir,
    };
    // Registered, and Ironic has recorded the host on.
    eventually("externally provisioned, powered on", || async {
        let h = rig.host().await;
        h.state() == state::EXTERNALLY_PROVISIONED && h.powered_on() == Some(true)
    })
    .await;
    rig
}

impl Rig {
    fn through_metal3(&self) -> Metal3Driver {
        Metal3Driver::new(
            self.direct.clone(),
            self.href.clone(),
            Arc::new(KubeHosts::new(self.c.nodefence.clone())),
        )
    }

    async fn host(&self) -> BareMetalHost {
        Api::<BareMetalHost>::namespaced(self.c.admin.clone(), NS)
            .get("worker-1")
            .await
            .unwrap()
    }

    fn resets(&self) -> Vec<String> {
        self.bmc.reset_log().into_iter().map(|(_, t)| t).collect()
    }

    async fn shutdown(self) {
        self.metal3.shutdown().await;
        self.bmc.shutdown().await;
    }
}

async fn eventually<F: std::future::Future<Output = bool>>(
    what: &str,
    mut check: impl FnMut() -> F,
) {
    for _ in 0..300 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("never: {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_force_off_is_undone_by_ironics_power_sync() {
    let rig = rig().await;
    // What nodefence would do without Metal3: ForceOff to the BMC, Off read back.
    rig.direct.power_off().await.unwrap();
    eventually("the BMC reads Off", || async {
        rig.bmc.power("1") == Some(MockPower::Off)
    })
    .await;
    // Ironic's database still says power on: its sync powers the machine back on,
    // while nodefence would be releasing the node's volumes.
    eventually("Ironic's sync powers it back on", || async {
        rig.bmc.power("1") == Some(MockPower::On)
    })
    .await;
    assert_eq!(rig.resets(), ["ForceOff", "On"], "ours, then Ironic's");
    let node = rig.metal3.node(NS, "worker-1").unwrap();
    assert!(node.sync_actions >= 1 && !node.maintenance, "{node:?}");
    assert_eq!(
        rig.direct.status().await.unwrap().state,
        PowerState::On,
        "running again"
    );
    rig.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_off_through_metal3_survives_the_power_sync_and_power_on_removes_the_hold() {
    let rig = rig().await;
    let driver = rig.through_metal3();
    // The fence, as nodefence carries it out: command, then the Off proof.
    let off = execute(&driver, PowerAction::Off, &PROOF)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(off.off.is_some(), "Off confirmed: {off:?}");
    let host = rig.host().await;
    assert_eq!(
        host.annotations()
            .get("reboot.metal3.io/nodefence")
            .map(String::as_str),
        Some(r#"{"mode":"hard"}"#)
    );
    assert_eq!(host.powered_on(), Some(false));
    // Many syncs later the machine is still off, and every reading says so.
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(driver.status().await.unwrap().state, PowerState::Off);
        assert_eq!(rig.bmc.power("1"), Some(MockPower::Off));
    }
    assert_eq!(rig.resets(), ["ForceOff"], "only Metal3's hard power off");
    let node = rig.metal3.node(NS, "worker-1").unwrap();
    assert_eq!((node.power_state, node.sync_actions), (Some(false), 0));
    // The identity proof is the BMC's own, unchanged.
    assert_eq!(
        driver.machine_identity().await.unwrap(),
        MachineIdentity::Uuid(UUID.into())
    );
    // Power on after the fence: the hold is removed, Metal3 powers the host on.
    let on = execute(&driver, PowerAction::On, &PROOF)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(on.on.is_some(), "{on:?}");
    let host = rig.host().await;
    assert!(
        !host
            .annotations()
            .contains_key("reboot.metal3.io/nodefence")
    );
    assert_eq!(rig.resets(), ["ForceOff", "On"]);
    assert_eq!(host.powered_on(), Some(true));
    // nodefence patched the annotation itself, under the deploy RBAC.
    let patches = rig
        .c
        .kube
        .requests()
        .into_iter()
        .filter(|r| r.user.is_some() && r.method == "PATCH")
        .count();
    assert_eq!(patches, 2, "set, then removed");
    rig.shutdown().await;
}

/// `nodefence fence` by hand on a Metal3 host whose BMC address is another machine's
/// (system 2, `OTHER`) while Node worker-1 reports `UUID`: refused for every action,
/// as nodefence's ServiceAccount under the deploy RBAC: no reboot annotation on the
/// host and nothing sent to the BMC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_refuses_a_host_whose_bmc_is_another_machine() {
    const OTHER: &str = "4c4c4544-0032-3510-8052-b2c04f503132";
    let c = cluster().await;
    let bmc = MockRedfish::builder()
        .system(SystemSpec::new("2").uuid(OTHER).power(MockPower::On))
        .credentials(USER, PASSWORD)
        .start()
        .await
        .unwrap();
    c.secret("worker-1-bmc").await;
    let address = format!("redfish+http://{}/redfish/v1/Systems/2", bmc.addr());
    c.host(BareMetalHost::new(NS, "worker-1", &address, "worker-1-bmc").externally_provisioned())
        .await;
    let provider_id = format!("metal3://{NS}/worker-1/test1-workers-x7k2p");
    c.kube
        .store()
        .create(
            nodefence_mocks::kube::resources::NODES,
            None,
            crate::cli_common::node_object("worker-1", UUID, Some(&provider_id)),
        )
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("nodefence.toml"),
        format!("[metal3]\nhosts = true\nnamespaces = [\"{NS}\"]\n"),
    )
    .unwrap();
    let kubeconfig = dir.path().join("nodefence.kubeconfig");
    std::fs::write(&kubeconfig, c.kube.kubeconfig_yaml_for(TOKEN)).unwrap();
    crate::cli_common::assert_fence_refuses_a_mismatch(
        &dir.path().join("nodefence.toml"),
        "worker-1",
        &kubeconfig.to_string_lossy(),
        OTHER,
        UUID,
        &[],
    )
    .await;
    assert!(bmc.reset_log().is_empty(), "{:?}", bmc.reset_log());
    let host = Api::<BareMetalHost>::namespaced(c.admin.clone(), NS)
        .get("worker-1")
        .await
        .unwrap();
    assert!(
        !host
            .annotations()
            .keys()
            .any(|k| k.starts_with("reboot.metal3.io")),
        "no reboot annotation: {:?}",
        host.annotations()
    );
    let denied: Vec<String> = c
        .kube
        .requests()
        .into_iter()
        .filter(|r| r.user.is_some() && r.status == 403)
        .map(|r| format!("{} {}", r.method, r.path_and_query))
        .collect();
    assert!(denied.is_empty(), "not granted by deploy/: {denied:?}");
    bmc.shutdown().await;
}
