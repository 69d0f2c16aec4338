//! The check on return end to end (issue 53): the real daemon against fake-kube's
//! simulated control plane and a mock Redfish BMC.
//!
//! - An honest BMC: the machine loses power, is released, is powered on again and
//!   boots (a new `bootID`): `BootedAgain`, then the taint goes.
//! - A lying BMC: its firmware reads `Off` for a machine whose network was cut and
//!   which runs on; the one rule is kept (an out-of-band Off after the node became
//!   unhealthy) and the node is released. When the partition heals, the same boot's
//!   kubelet posts its status: `ProofContradicted`, recorded on the Node, the taint
//!   stays however long the node is Ready, no power command; an operator's check
//!   (`nodefence.io/proof-checked`) lets it back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::world::*;
use nodefence::cluster::facts::{PROOF_CHECKED_ANNOTATION, PROOF_CONTRADICTED_ANNOTATION};
use nodefence_mocks::redfish::{Fault, MockPower};
use serde_json::Value;

fn boot_of(w: &World, node: &str) -> String {
    w.node(node)
        .and_then(|n| {
            n.pointer("/status/nodeInfo/bootID")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .expect("a boot ID")
}

fn annotation(w: &World, node: &str, key: &str) -> Option<String> {
    w.node(node)?
        .pointer("/metadata/annotations")?
        .get(key)?
        .as_str()
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_that_really_went_down_is_let_back_once_it_booted_again() {
    let w = WorldBuilder::new().start().await;
    let victim = w.db_placed().await;
    let boot = boot_of(&w, &victim);
    w.pull_plug(&victim);
    eventually("released", Duration::from_secs(30), || async {
        w.has_out_of_service_taint(&victim)
    })
    .await;
    w.expect_event(&victim, "Released").await;
    let note = w
        .events_on(&victim)
        .into_iter()
        .find(|e| e["reason"] == "Released")
        .and_then(|e| e["note"].as_str().map(str::to_string))
        .unwrap_or_default();
    assert!(
        note.contains(&boot),
        "the Released Event names the boot it ended: {note}"
    );
    w.bmc.set_power(&w.system_of(&victim), MockPower::On);
    w.expect_event(&victim, "BootedAgain").await;
    assert_ne!(boot_of(&w, &victim), boot);
    eventually("the taint removed", Duration::from_secs(30), || async {
        !w.has_out_of_service_taint(&victim)
    })
    .await;
    assert!(
        w.event_reasons(&victim)
            .iter()
            .all(|r| r != "ProofContradicted")
    );
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bmc_that_read_off_for_a_running_machine_is_caught_when_the_node_returns() {
    let w = WorldBuilder::new().start().await;
    let victim = w.db_placed().await;
    let boot = boot_of(&w, &victim);
    // The BMC's firmware reads Off; the machine runs, cut from the network.
    w.bmc.inject(Fault::PowerStateValue("Off".into()));
    w.sim.set_partitioned(&victim, true);
    eventually("released on the lie", Duration::from_secs(30), || async {
        w.has_out_of_service_taint(&victim)
    })
    .await;
    // Past the node lifecycle controller's grace period (40 s, 4 s here), then healed.
    tokio::time::sleep(w.scaled(Duration::from_secs(50))).await;
    w.sim.set_partitioned(&victim, false);
    w.expect_event(&victim, "ProofContradicted").await;
    assert_eq!(boot_of(&w, &victim), boot, "the same boot is back");
    eventually(
        "the contradiction recorded",
        Duration::from_secs(10),
        || async { annotation(&w, &victim, PROOF_CONTRADICTED_ANNOTATION).is_some() },
    )
    .await;
    let note = w
        .events_on(&victim)
        .into_iter()
        .find(|e| e["reason"] == "ProofContradicted")
        .and_then(|e| e["note"].as_str().map(str::to_string))
        .unwrap_or_default();
    assert!(
        note.contains(&boot) && note.contains("Off readings"),
        "{note}"
    );
    // Ready for many times recovered_after (2 s): the taint stays, nothing is powered.
    tokio::time::sleep(w.scaled(Duration::from_secs(20))).await;
    assert!(w.node_ready(&victim), "the node is Ready again");
    assert!(w.has_out_of_service_taint(&victim), "the taint stays");
    assert!(w.resets_of(&victim).is_empty(), "no power command");
    // An operator checked the data and the BMC.
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(w.client.clone());
    nodes
        .patch(
            &victim,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&serde_json::json!({"metadata": {"annotations": {
                PROOF_CHECKED_ANNOTATION: "alice: data checked, BMC firmware replaced"}}})),
        )
        .await
        .unwrap();
    eventually(
        "the taint removed after the check",
        Duration::from_secs(30),
        || async { !w.has_out_of_service_taint(&victim) },
    )
    .await;
    assert_eq!(annotation(&w, &victim, PROOF_CONTRADICTED_ANNOTATION), None);
    assert_eq!(annotation(&w, &victim, PROOF_CHECKED_ANNOTATION), None);
    w.stop().await;
}
