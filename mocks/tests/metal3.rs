//! The Metal3 stand-in (baremetal-operator + Ironic) against fake-kube over real HTTP
//! and the mock Redfish BMC: the BareMetalHost CRD served with Metal3's printer
//! columns, registration from the credentials Secret through the provisioning states,
//! `status.poweredOn` from Ironic's record, the reboot annotations (suffixed: held
//! off; suffixless: one shot; unprovisioned hosts need force), `online`, paused and
//! detached hosts, and Ironic's power-state sync undoing a power-off behind its back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::kube_common;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube_common::{client, eventually, get_json, start};
use nodefence_mocks::kube::FakeKubeHandle;
use nodefence_mocks::metal3::{
    self, BareMetalHost, DETACHED_ANNOTATION, Metal3StandIn, PAUSED_ANNOTATION, Timing, bmc_secret,
    state,
};
use nodefence_mocks::redfish::{MockPower, MockRedfish, MockRedfishHandle, SystemSpec};
use nodefence_mocks::remediation::install_crds;
use serde_json::{Value, json};

const NS: &str = "metal3";
const WITHIN: Duration = Duration::from_secs(20);

const FAST: Timing = Timing {
    reconcile: Duration::from_millis(300),
    short_retry: Duration::from_millis(100),
    sync_power_state_interval: Duration::from_millis(200),
    force_power_state_during_sync: true,
    power_state_sync_max_retries: 3,
    power_state_change_timeout: Duration::from_secs(5),
};

struct Env {
    kube: FakeKubeHandle,
    client: Client,
    bmc: MockRedfishHandle,
    m3: Metal3StandIn,
}

async fn setup(timing: Timing) -> Env {
    let kube = start(false).await;
    let client = client(&kube).await;
    install_crds(&client, [metal3::bmh_crd(), metal3::metal3_machine_crd()])
        .await
        .unwrap();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(
            &PostParams::default(),
            &bmc_secret(NS, "worker-1-bmc", "admin", "pw"),
        )
        .await
        .unwrap();
    let bmc = MockRedfish::builder()
        .system(SystemSpec::new("1").power(MockPower::On))
        .credentials("admin", "pw")
        .transition_delay(Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    let m3 = Metal3StandIn::spawn(client.clone(), NS, timing);
    Env {
        kube,
        client,
        bmc,
        m3,
    }
}

impl Env {
    fn hosts(&self) -> Api<BareMetalHost> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn address(&self) -> String {
        format!("redfish+http://{}/redfish/v1/Systems/1", self.bmc.addr())
    }

    async fn create(&self, host: BareMetalHost) {
        self.hosts()
            .create(&PostParams::default(), &host)
            .await
            .unwrap();
    }

    async fn host(&self) -> BareMetalHost {
        self.hosts().get("worker-1").await.unwrap()
    }

    async fn wait_state(&self, want: &str) {
        eventually(WITHIN, &format!("state {want}"), || async {
            (self.host().await.state() == want).then_some(())
        })
        .await;
    }

    async fn annotate(&self, key: &str, value: Option<&str>) {
        self.hosts()
            .patch(
                "worker-1",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
            )
            .await
            .unwrap();
    }

    async fn wait_power(&self, on: bool) {
        let want = if on { MockPower::On } else { MockPower::Off };
        eventually(WITHIN, &format!("BMC {want:?}"), || async {
            (self.bmc.power("1") == Some(want)).then_some(())
        })
        .await;
        eventually(WITHIN, &format!("status.poweredOn {on}"), || async {
            (self.host().await.powered_on() == Some(on)).then_some(())
        })
        .await;
    }

    fn resets(&self) -> Vec<String> {
        self.bmc.reset_log().into_iter().map(|(_, t)| t).collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_registers_with_its_secret_and_shows_metal3s_columns() {
    let env = setup(FAST).await;
    env.create(
        BareMetalHost::new(NS, "worker-1", &env.address(), "worker-1-bmc")
            .externally_provisioned()
            .annotation("x", "y"),
    )
    .await;
    env.wait_state(state::EXTERNALLY_PROVISIONED).await;
    let host = env.host().await;
    let status = host.status.clone().unwrap();
    assert_eq!(status.operational_status, "OK");
    assert!(status.powered_on);
    let good = status.good_credentials.unwrap();
    assert_eq!(
        (
            good.credentials.name.as_str(),
            good.credentials.namespace.as_str()
        ),
        ("worker-1-bmc", NS)
    );
    let node = env.m3.node(NS, "worker-1").unwrap();
    assert_eq!(status.provisioning.id, node.uuid);
    assert_eq!(node.power_state, Some(true));
    // kubectl get bmh: Metal3's columns.
    let (code, table) = get_json(
        &env.kube,
        &format!("/apis/metal3.io/v1alpha1/namespaces/{NS}/baremetalhosts"),
        Some("application/json;as=Table;v=v1;g=meta.k8s.io"),
    )
    .await;
    assert_eq!(code, 200);
    let names: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "Name", "Status", "State", "Consumer", "BMC", "Online", "Error", "Age"
        ]
    );
    let cells = &table["rows"][0]["cells"];
    assert_eq!(cells[0], "worker-1");
    assert_eq!(cells[1], "OK");
    assert_eq!(cells[2], "externally provisioned");
    assert_eq!(cells[5], "true");
    assert!(env.resets().is_empty(), "registration powers nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_without_its_secret_is_a_registration_error_until_it_appears() {
    let env = setup(FAST).await;
    env.create(BareMetalHost::new(NS, "worker-1", &env.address(), "missing").image("http://img"))
        .await;
    eventually(WITHIN, "registration error", || async {
        let s = env.host().await.status?;
        (s.error_type == metal3::REGISTRATION_ERROR && s.operational_status == "error")
            .then_some(s.error_message)
    })
    .await;
    Api::<Secret>::namespaced(env.client.clone(), NS)
        .create(
            &PostParams::default(),
            &bmc_secret(NS, "missing", "admin", "pw"),
        )
        .await
        .unwrap();
    // Registered on a later reconcile, then inspected, prepared and provisioned.
    env.wait_state(state::PROVISIONED).await;
    let s = env.host().await.status.unwrap();
    assert_eq!(
        (s.operational_status.as_str(), s.error_type.as_str()),
        ("OK", "")
    );
    assert_eq!(s.provisioning.image.unwrap().url, "http://img");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_power_sync_undoes_a_power_off_behind_ironics_back() {
    let env = setup(FAST).await;
    env.create(
        BareMetalHost::new(NS, "worker-1", &env.address(), "worker-1-bmc").externally_provisioned(),
    )
    .await;
    env.wait_state(state::EXTERNALLY_PROVISIONED).await;
    env.bmc.set_power("1", MockPower::Off);
    eventually(WITHIN, "powered back on by the sync", || async {
        (env.bmc.power("1") == Some(MockPower::On)).then_some(())
    })
    .await;
    let n = env.m3.node(NS, "worker-1").unwrap();
    assert!(n.sync_actions >= 1 && !n.maintenance, "{n:?}");
    assert_eq!(env.resets(), ["On"]);
    assert_eq!(env.host().await.powered_on(), Some(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suffixed_hard_reboot_annotation_keeps_the_host_off_until_removed() {
    let env = setup(FAST).await;
    env.create(
        BareMetalHost::new(NS, "worker-1", &env.address(), "worker-1-bmc").externally_provisioned(),
    )
    .await;
    env.wait_state(state::EXTERNALLY_PROVISIONED).await;
    env.annotate("reboot.metal3.io/test", Some(r#"{"mode":"hard"}"#))
        .await;
    env.wait_power(false).await;
    assert_eq!(env.resets(), ["ForceOff"], "hard: Ironic's power off");
    // Several syncs and reconciles later: still off, the annotation still there.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(env.bmc.power("1"), Some(MockPower::Off));
    assert!(
        env.host()
            .await
            .annotations()
            .contains_key("reboot.metal3.io/test")
    );
    assert_eq!(env.m3.node(NS, "worker-1").unwrap().sync_actions, 0);
    env.annotate("reboot.metal3.io/test", None).await;
    env.wait_power(true).await;
    assert_eq!(env.resets(), ["ForceOff", "On"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suffixless_reboot_is_one_shot_and_unprovisioned_hosts_need_force() {
    let env = setup(FAST).await;
    // No image: the host stays available (not provisioned).
    env.create(BareMetalHost::new(
        NS,
        "worker-1",
        &env.address(),
        "worker-1-bmc",
    ))
    .await;
    env.wait_state(state::AVAILABLE).await;
    env.annotate("reboot.metal3.io/x", Some(r#"{"mode":"hard"}"#))
        .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(env.bmc.power("1"), Some(MockPower::On), "no force: ignored");
    env.annotate("reboot.metal3.io/x", None).await;
    env.annotate("reboot.metal3.io", Some(r#"{"mode":"hard","force":true}"#))
        .await;
    eventually(WITHIN, "the annotation removed", || async {
        (!env
            .host()
            .await
            .annotations()
            .contains_key("reboot.metal3.io"))
        .then_some(())
    })
    .await;
    env.wait_power(true).await;
    assert_eq!(env.resets(), ["ForceOff", "On"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn online_false_powers_off_softly_and_paused_or_detached_hosts_are_left_alone() {
    let env = setup(FAST).await;
    let mut host = BareMetalHost::new(NS, "worker-1", &env.address(), "worker-1-bmc")
        .externally_provisioned()
        .annotation(PAUSED_ANNOTATION, "");
    host.spec.online = false;
    env.create(host).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(env.host().await.status.is_none(), "paused: nothing done");
    env.annotate(PAUSED_ANNOTATION, None).await;
    env.wait_power(false).await;
    assert_eq!(env.resets(), ["GracefulShutdown"], "soft by default");
    // Detached: Ironic forgets the node; nothing powers it any more.
    env.annotate(DETACHED_ANNOTATION, Some("")).await;
    eventually(WITHIN, "detached", || async {
        (env.host().await.status?.operational_status == "detached").then_some(())
    })
    .await;
    assert!(env.m3.node(NS, "worker-1").is_none());
    env.hosts()
        .patch(
            "worker-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"online": true}})),
        )
        .await
        .unwrap();
    env.bmc.set_power("1", MockPower::On);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(env.resets(), ["GracefulShutdown"], "detached: no action");
    // Attached again: enrolled anew, the power state read from the BMC.
    env.annotate(DETACHED_ANNOTATION, None).await;
    eventually(WITHIN, "enrolled again", || async {
        let s = env.host().await.status?;
        (s.operational_status == "OK" && s.powered_on && env.m3.node(NS, "worker-1").is_some())
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_is_written_through_the_status_subresource_only() {
    let env = setup(FAST).await;
    env.create(
        BareMetalHost::new(NS, "worker-1", &env.address(), "worker-1-bmc").externally_provisioned(),
    )
    .await;
    env.wait_state(state::EXTERNALLY_PROVISIONED).await;
    let before = env.host().await;
    // A status in a main-resource patch is ignored, as for any CRD with a status
    // subresource; the generation follows spec changes only.
    env.hosts()
        .patch(
            "worker-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"poweredOn": false}})),
        )
        .await
        .unwrap();
    let after = env.host().await;
    assert_eq!(after.powered_on(), Some(true));
    assert_eq!(after.metadata.generation, before.metadata.generation);
    let raw: Value = serde_json::to_value(&after).unwrap();
    assert!(raw.pointer("/status/provisioning/ID").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_without_power_is_recorded_off_after_the_sync_gives_up() {
    let env = setup(FAST).await;
    env.create(
        BareMetalHost::new(NS, "worker-1", &env.address(), "worker-1-bmc").externally_provisioned(),
    )
    .await;
    env.wait_state(state::EXTERNALLY_PROVISIONED).await;
    // The power feed fails; the BMC still answers, Off. Ironic's sync tries to power
    // the machine back on (accepted, nothing happens), then gives up: maintenance, the
    // BMC's state recorded, and Metal3 copies it into status.poweredOn.
    env.bmc.set_power_feed("1", false);
    assert_eq!(env.bmc.power("1"), Some(MockPower::Off));
    eventually(WITHIN, "maintenance", || async {
        env.m3.node(NS, "worker-1").filter(|n| n.maintenance)
    })
    .await;
    let node = env.m3.node(NS, "worker-1").unwrap();
    assert_eq!(node.power_state, Some(false));
    assert_eq!(node.sync_actions, FAST.power_state_sync_max_retries);
    eventually(WITHIN, "status.poweredOn false", || async {
        (env.host().await.powered_on() == Some(false)).then_some(())
    })
    .await;
    let resets = env.resets();
    assert!(
        !resets.is_empty() && resets.iter().all(|r| r == "On"),
        "{resets:?}"
    );
    assert_eq!(
        env.bmc.power("1"),
        Some(MockPower::Off),
        "no power to turn on with"
    );
    // The feed restored, the machine stays off until something powers it on.
    env.bmc.set_power_feed("1", true);
    assert_eq!(env.bmc.power("1"), Some(MockPower::Off));
}

/// As BMO: the host's Secret is claimed (the environment label, the host as an
/// owner), watched, and a change to it is recorded as `status.triedCredentials` at
/// once (not at the next steady-state reconcile, a minute away here), then as
/// `goodCredentials` once Ironic enrolled the host with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_secret_is_seen_at_once_and_recorded_as_tried_credentials() {
    let env = setup(Timing {
        reconcile: Duration::from_secs(60),
        ..FAST
    })
    .await;
    env.create(
        BareMetalHost::new(NS, "worker-1", &env.address(), "worker-1-bmc").externally_provisioned(),
    )
    .await;
    env.wait_state(state::EXTERNALLY_PROVISIONED).await;
    let secrets = Api::<Secret>::namespaced(env.client.clone(), NS);
    let secret = secrets.get("worker-1-bmc").await.unwrap();
    assert_eq!(
        secret.metadata.labels.clone().unwrap_or_default()["environment.metal3.io"],
        "baremetal"
    );
    let owner = &secret.metadata.owner_references.clone().unwrap_or_default()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("BareMetalHost", "worker-1")
    );
    assert_eq!(owner.controller, None, "an owner, not the controller");
    let host = env.host().await;
    let status = host.status.clone().unwrap();
    let version = secret.metadata.resource_version.clone().unwrap();
    assert_eq!(
        status
            .tried_credentials
            .as_ref()
            .unwrap()
            .credentials_version,
        version
    );
    assert_eq!(
        status
            .good_credentials
            .as_ref()
            .unwrap()
            .credentials_version,
        version
    );

    // The same password written again (a new resourceVersion): tried and good follow.
    secrets
        .patch(
            "worker-1-bmc",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"rotated": "now"}}})),
        )
        .await
        .unwrap();
    let rotated = secrets
        .get("worker-1-bmc")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    assert_ne!(rotated, version);
    eventually(
        Duration::from_secs(5),
        "triedCredentials follows",
        || async {
            let status = env.host().await.status?;
            (status.tried_credentials?.credentials_version == rotated
                && status.good_credentials?.credentials_version == rotated)
                .then_some(())
        },
    )
    .await;
    env.m3.shutdown().await;
    env.bmc.shutdown().await;
    env.kube.shutdown().await;
}
