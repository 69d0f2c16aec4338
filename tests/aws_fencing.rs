//! `nodefence run` end to end on EC2: the real daemon against fake-kube's simulated
//! control plane, every machine an instance in a moto server (PyPI `moto[server]`).
//! Each Node carries its instance's providerID (`aws:///us-east-1a/i-…`) and the
//! inventory names no instance: the driver learns it from the Node (the
//! `node_identity` hook), the region from the zone, its credentials from a profile in
//! a shared credentials file. The engine has no AWS code.
//!
//! Without moto the tests print a "skipped" line, unless `NODEFENCE_REQUIRE_PEERS=1`
//! (CI), which makes its absence a failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::world::*;
use nodefence_mocks::redfish::MockPower;

/// Three workers, each an EC2 instance.
fn ec2_world() -> WorldBuilder {
    WorldBuilder::new().methods(&[Method::Aws])
}

async fn state(w: &World, node: &str) -> String {
    w.moto().state(AWS_REGION, &w.instance_of(node)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_cut_on_ec2_is_force_stopped_then_released() {
    let Some(w) = ec2_world().try_start().await else {
        return;
    };
    let victim = w.db_placed().await;
    w.cut_network(&victim); // the instance keeps running
    w.released_and_moved(&victim).await;
    // boto3, an independent client, sees what nodefence did.
    assert_eq!(state(&w, &victim).await, "stopped");
    w.expect_event(&victim, "PoweringOff").await;
    w.expect_event(&victim, "Released").await;
    w.assert_no_identity_events(&victim);
    for other in w.nodes.iter().filter(|n| n.name != victim) {
        assert_eq!(state(&w, &other.name).await, "running", "{}", other.name);
        assert!(!w.has_out_of_service_taint(&other.name));
    }
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_stopped_elsewhere_is_released_without_a_command_and_comes_back() {
    let Some(w) = ec2_world().try_start().await else {
        return;
    };
    let victim = w.db_placed().await;
    // Stopped from the console (or by the cloud): the kubelet goes with it.
    w.moto().stop(AWS_REGION, &w.instance_of(&victim)).await;
    eventually("out-of-service taint", Duration::from_secs(45), || async {
        w.has_out_of_service_taint(&victim)
    })
    .await;
    w.expect_event(&victim, "ConfirmedOff").await;
    assert!(
        !w.event_reasons(&victim).iter().any(|r| r == "PoweringOff"),
        "a stopped instance needs no command: {:?}",
        w.event_reasons(&victim)
    );
    // Started again: the kubelet returns and the taint goes.
    w.moto().start(AWS_REGION, &w.instance_of(&victim)).await;
    eventually("taint removed", Duration::from_secs(60), || async {
        !w.has_out_of_service_taint(&victim)
    })
    .await;
    w.expect_event(&victim, "TaintRemoved").await;
    assert_eq!(w.power_of(&victim), Some(MockPower::On));
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inventory_naming_another_nodes_instance_stops_nothing_and_releases_nothing() {
    // worker-1's entry names worker-2's instance: the Node's providerID disagrees.
    let Some(w) = ec2_world()
        .node("worker-1", |n| {
            n.inventory_lines = vec!["instance_id = \"{instance:worker-2}\"".into()];
        })
        .try_start()
        .await
    else {
        return;
    };
    eventually(
        "an IdentityMismatch warning on worker-1",
        Duration::from_secs(30),
        || async {
            w.event_reasons("worker-1")
                .iter()
                .any(|r| r == "IdentityMismatch")
        },
    )
    .await;
    w.cut_network("worker-1");
    // The engine's own warning, once the node is unhealthy: the block, and why.
    w.expect_identity_block("worker-1", "IdentityMismatch")
        .await;
    // Well past the point where a fence would have happened.
    tokio::time::sleep(w.scaled(Duration::from_secs(120))).await;
    assert!(!w.has_out_of_service_taint("worker-1"));
    assert_eq!(state(&w, "worker-1").await, "running");
    assert_eq!(state(&w, "worker-2").await, "running", "the named instance");
    assert!(
        !w.event_reasons("worker-1")
            .iter()
            .any(|r| r == "PoweringOff" || r == "Released")
    );
    w.stop().await;
}
