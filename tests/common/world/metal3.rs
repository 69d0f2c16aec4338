//! Metal3 in a [`World`]: the CRDs, a BareMetalHost per machine Metal3 manages (its
//! BMC the machine's system on the shared Redfish BMC, its credentials in a Secret),
//! the Cluster API objects of the consumerRef chain, and the stand-in for Metal3's
//! operator and Ironic acting through the API.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use nodefence_mocks::metal3::{
    self, BareMetalHost, IronicNode, Metal3Machine, Metal3StandIn, bmc_secret, state,
};
use nodefence_mocks::redfish::{MockPower, MockRedfishHandle};
use nodefence_mocks::remediation::{install_crds, mhc};

use super::{METAL3_NAMESPACE, Metal3Setup, NodeSetup, World, eventually};
use crate::common::{PASSWORD, USER};

/// Installs the CRDs, creates the hosts (all but the `later` ones) and starts the
/// stand-in; returns once every host is registered, its power as its machine's.
pub(super) async fn start(
    client: &kube::Client,
    bmc: &MockRedfishHandle,
    nodes: &[NodeSetup],
    setup: &Metal3Setup,
    speed: f64,
) -> Metal3StandIn {
    install_crds(
        client,
        [
            metal3::bmh_crd(),
            metal3::metal3_machine_crd(),
            mhc::machine_crd(),
        ],
    )
    .await
    .unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces
        .get_opt(METAL3_NAMESPACE)
        .await
        .unwrap()
        .is_none()
    {
        let ns =
            serde_json::from_value(serde_json::json!({"metadata": {"name": METAL3_NAMESPACE}}))
                .unwrap();
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
    }
    for n in nodes
        .iter()
        .filter(|n| setup.hosts.contains(&n.name) && !setup.later.contains(&n.name))
    {
        create_host(client, bmc, n, setup.consumer_ref.contains(&n.name)).await;
    }
    let stand_in =
        Metal3StandIn::spawn(client.clone(), METAL3_NAMESPACE, setup.timing.scaled(speed));
    for n in nodes
        .iter()
        .filter(|n| setup.hosts.contains(&n.name) && !setup.later.contains(&n.name))
    {
        registered(client, n, n.power != MockPower::Off).await;
    }
    stand_in
}

/// The BareMetalHost of `n` (and its Secret; with `consumer_ref`, its Machine and
/// Metal3Machine).
async fn create_host(
    client: &kube::Client,
    bmc: &MockRedfishHandle,
    n: &NodeSetup,
    consumer_ref: bool,
) {
    let secret = format!("{}-bmc", n.name);
    Api::<Secret>::namespaced(client.clone(), METAL3_NAMESPACE)
        .create(
            &PostParams::default(),
            &bmc_secret(METAL3_NAMESPACE, &secret, USER, PASSWORD),
        )
        .await
        .unwrap();
    let address = format!(
        "redfish+http://{}/redfish/v1/Systems/{}",
        bmc.addr(),
        n.system_id
    );
    let mut host =
        BareMetalHost::new(METAL3_NAMESPACE, &n.name, &address, &secret).externally_provisioned();
    if consumer_ref {
        let machine_name = format!("{}-machine", n.name);
        let machine = Api::<mhc::Machine>::namespaced(client.clone(), METAL3_NAMESPACE)
            .create(
                &PostParams::default(),
                &mhc::Machine::new(METAL3_NAMESPACE, &machine_name, "cluster"),
            )
            .await
            .unwrap();
        mhc::set_node_ref(client, METAL3_NAMESPACE, &machine_name, &n.name)
            .await
            .unwrap();
        let m3m = Api::<Metal3Machine>::namespaced(client.clone(), METAL3_NAMESPACE)
            .create(
                &PostParams::default(),
                &Metal3Machine::new(
                    METAL3_NAMESPACE,
                    &format!("{}-m3m", n.name),
                    "cluster",
                    &machine_name,
                    &machine.uid().unwrap(),
                ),
            )
            .await
            .unwrap();
        host = host.consumer(&m3m);
    }
    Api::<BareMetalHost>::namespaced(client.clone(), METAL3_NAMESPACE)
        .create(&PostParams::default(), &host)
        .await
        .unwrap();
}

/// Waits (bounded) until Metal3 has registered `n`'s host, powered `on`.
async fn registered(client: &kube::Client, n: &NodeSetup, on: bool) {
    let hosts = Api::<BareMetalHost>::namespaced(client.clone(), METAL3_NAMESPACE);
    eventually(
        &format!("BareMetalHost {} registered", n.name),
        Duration::from_secs(30),
        || async {
            hosts
                .get_opt(&n.name)
                .await
                .ok()
                .flatten()
                .is_some_and(|h| {
                    h.state() == state::EXTERNALLY_PROVISIONED && h.powered_on() == Some(on)
                })
        },
    )
    .await;
}

impl World {
    /// The BareMetalHost of `node`, if it exists.
    pub async fn bare_metal_host(&self, node: &str) -> Option<BareMetalHost> {
        Api::<BareMetalHost>::namespaced(self.client.clone(), METAL3_NAMESPACE)
            .get_opt(node)
            .await
            .unwrap()
    }

    /// Ironic's record of `node`'s host.
    ///
    /// # Panics
    /// In a world without Metal3.
    pub fn ironic_node(&self, node: &str) -> Option<IronicNode> {
        self.metal3
            .as_ref()
            .expect("a world with Metal3")
            .node(METAL3_NAMESPACE, node)
    }

    /// Creates `node`'s BareMetalHost (one of [`Metal3Setup::later`]) and waits until
    /// Metal3 has registered it, its power as the machine's now.
    pub async fn add_bare_metal_host(&self, node: &str) {
        let n = self.setup(node).clone();
        create_host(&self.client, &self.bmc, &n, false).await;
        let on = self.power_of(node) == Some(MockPower::On);
        registered(&self.client, &n, on).await;
    }
}
