//! Power through Metal3 against stand-ins for Metal3's operator and Ironic
//! (`nodefence_mocks::metal3`) and a mock Redfish BMC: a ForceOff sent to the BMC
//! behind Ironic's back is undone by its power-state sync; the same machine powered
//! off through Metal3 (nodefence's reboot annotation, hard mode) stays off, is proven
//! Off by the BMC and the BareMetalHost together, and comes back when nodefence
//! removes the annotation.
//!
//! The node's entry is built from its BareMetalHost, as `nodefence run` builds it
//! (address → Redfish endpoint and system). The BareMetalHost is read and written in
//! fake-kube's store directly, until fake-kube serves custom resources over HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use nodefence::config::{Credential, Metal3Settings, SecretSource};
use nodefence::identity::MachineIdentity;
use nodefence::metal3::mapping::{Chain, NodeFacts};
use nodefence::metal3::power::{HostApi, Metal3Driver};
use nodefence::metal3::{BareMetalHost, HostRef};
use nodefence::power::confirm::{ConfirmPolicy, execute};
use nodefence::power::registry::DriverFactory;
use nodefence::power::{PowerAction, PowerDriver, PowerError, PowerState};
use nodefence_mocks::kube::store::Store;
use nodefence_mocks::metal3::{BAREMETALHOSTS, Enrolled, Metal3StandIn, Timing};
use nodefence_mocks::redfish::{MockPower, MockRedfish, MockRedfishHandle, SystemSpec};
use serde_json::{Value, json};

const UUID: &str = "4c4c4544-0031-3510-8052-b2c04f503131";

/// Ironic's sync and the operator, faster than their 60 s defaults.
const TIMING: Timing = Timing {
    reconcile: Duration::from_millis(150),
    sync_power_state_interval: Duration::from_millis(400),
    force_power_state_during_sync: true,
    power_state_sync_max_retries: 3,
};

/// nodefence's Off proof, quicker than the default's.
const PROOF: ConfirmPolicy = ConfirmPolicy {
    readings: 3,
    interval: Duration::from_millis(100),
    timeout: Duration::from_secs(15),
};

/// [`HostApi`] over the store.
struct StoreHosts(Store);

#[async_trait]
impl HostApi for StoreHosts {
    async fn get(&self, host: &HostRef) -> Result<BareMetalHost, PowerError> {
        let v = self
            .0
            .get(BAREMETALHOSTS, Some(&host.namespace), &host.name)
            .map_err(|e| PowerError::config(format!("{e:?}")))?;
        serde_json::from_value(v).map_err(|e| PowerError::protocol(e.to_string()))
    }

    async fn annotate(
        &self,
        host: &HostRef,
        key: &str,
        value: Option<&str>,
    ) -> Result<(), PowerError> {
        self.0
            .modify(BAREMETALHOSTS, Some(&host.namespace), &host.name, |o| {
                let meta = o["metadata"].as_object_mut().unwrap();
                let a = meta
                    .entry("annotations")
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
                    .unwrap();
                match value {
                    Some(v) => a.insert(key.into(), json!(v)),
                    None => a.remove(key),
                };
                Ok(())
            })
            .map(|_| ())
            .map_err(|e| PowerError::config(format!("{e:?}")))
    }
}

struct Rig {
    bmc: MockRedfishHandle,
    store: Store,
    metal3: Metal3StandIn,
    /// The node's own driver: Redfish, straight to the BMC.
    direct: Arc<dyn PowerDriver>,
    href: HostRef,
}

async fn rig() -> Rig {
    nodefence::tls::install_crypto_provider();
    let bmc = MockRedfish::builder()
        .system(SystemSpec::new("1").uuid(UUID).power(MockPower::On))
        .credentials("admin", "bmc-pw")
        .start()
        .await
        .unwrap();
    let store = Store::default();
    let address = format!("redfish+http://{}/redfish/v1/Systems/1", bmc.addr());
    store
        .create(
            BAREMETALHOSTS,
            Some("metal3"),
            json!({
                "metadata": {"name": "worker-1", "annotations": {}},
                "spec": {"online": true, "bmc": {"address": address, "credentialsName": "worker-1-bmc-secret"}},
                "status": {"poweredOn": true, "provisioning": {"state": "provisioned"}, "operationalStatus": "OK"},
            }),
        )
        .unwrap();
    let metal3 = Metal3StandIn::start(
        store.clone(),
        vec![Enrolled {
            namespace: "metal3".into(),
            name: "worker-1".into(),
            bmc: bmc.base_url(),
            system_id: "1".into(),
            username: "admin".into(),
            password: "bmc-pw".into(),
        }],
        TIMING,
    );
    // The entry nodefence builds from the host; the Secret's values filled in as
    // resolve_secrets would.
    let host: BareMetalHost = serde_json::from_value(
        store
            .get(BAREMETALHOSTS, Some("metal3"), "worker-1")
            .unwrap(),
    )
    .unwrap();
    let settings = Metal3Settings {
        hosts: true,
        namespaces: vec!["metal3".into()],
        ..Metal3Settings::default()
    };
    let nodes = [NodeFacts {
        name: "worker-1".into(),
        provider_id: Some("metal3://metal3/worker-1/test1-workers-x7k2p".into()),
        annotation: None,
    }];
    let discovery =
        nodefence::metal3::inventory::entries(&settings, &[host], &nodes, &Chain::default());
    assert!(discovery.problems.is_empty(), "{:?}", discovery.problems);
    let mut target = discovery.entries[0].clone();
    let href = target.metal3_host.clone().expect("managed by Metal3");
    *target.power.credential_mut().unwrap() = Credential {
        username: "admin".into(),
        password: "bmc-pw".to_string().into(),
        source: SecretSource::Inline,
    };
    target.metal3_host = None;
    let direct = DriverFactory::new(4).driver(&target).unwrap();
    Rig {
        bmc,
        store,
        metal3,
        direct,
        href,
    }
}

impl Rig {
    fn through_metal3(&self) -> Metal3Driver {
        Metal3Driver::new(
            self.direct.clone(),
            self.href.clone(),
            Arc::new(StoreHosts(self.store.clone())),
        )
    }

    fn host(&self) -> Value {
        self.store
            .get(BAREMETALHOSTS, Some("metal3"), "worker-1")
            .unwrap()
    }

    fn resets(&self) -> Vec<String> {
        self.bmc.reset_log().into_iter().map(|(_, t)| t).collect()
    }

    /// Waits until Ironic has recorded the host's power state.
    async fn enrolled(&self) {
        eventually("Ironic records the host on", || {
            self.metal3
                .node("metal3", "worker-1")
                .and_then(|n| n.power_state)
                == Some(true)
        })
        .await;
    }

    async fn shutdown(self) {
        self.metal3.shutdown().await;
        self.bmc.shutdown().await;
    }
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..200 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("never: {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_force_off_is_undone_by_ironics_power_sync() {
    let rig = rig().await;
    rig.enrolled().await;
    // What nodefence would do without Metal3: ForceOff to the BMC, Off read back.
    rig.direct.power_off().await.unwrap();
    eventually("the BMC reads Off", || {
        rig.bmc.power("1") == Some(MockPower::Off)
    })
    .await;
    // Ironic's database still says power on: its sync powers the machine back on,
    // while nodefence would be releasing the node's volumes.
    eventually("Ironic's sync powers it back on", || {
        rig.bmc.power("1") == Some(MockPower::On)
    })
    .await;
    assert_eq!(rig.resets(), ["ForceOff", "On"], "ours, then Ironic's");
    let node = rig.metal3.node("metal3", "worker-1").unwrap();
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
    rig.enrolled().await;
    let driver = rig.through_metal3();
    // The fence, as nodefence carries it out: command, then the Off proof.
    let off = execute(&driver, PowerAction::Off, &PROOF)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(off.off.is_some(), "Off confirmed: {off:?}");
    assert_eq!(
        rig.host()
            .pointer("/metadata/annotations/reboot.metal3.io~1nodefence")
            .and_then(Value::as_str),
        Some(r#"{"mode":"hard"}"#)
    );
    assert_eq!(rig.host()["status"]["poweredOn"], false);
    // Many syncs later the machine is still off, and every reading says so.
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(driver.status().await.unwrap().state, PowerState::Off);
        assert_eq!(rig.bmc.power("1"), Some(MockPower::Off));
    }
    assert_eq!(rig.resets(), ["ForceOff"], "only Metal3's hard power off");
    let node = rig.metal3.node("metal3", "worker-1").unwrap();
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
    assert!(
        rig.host()
            .pointer("/metadata/annotations/reboot.metal3.io~1nodefence")
            .is_none()
    );
    assert_eq!(rig.resets(), ["ForceOff", "On"]);
    assert_eq!(rig.host()["status"]["poweredOn"], true);
    rig.shutdown().await;
}
