//! `nodefence run` end to end for a guest cluster on KubeVirt: the real daemon
//! against fake-kube's simulated control plane (the guest cluster), every worker a
//! VirtualMachine in a second fake-kube (the infrastructure cluster, with the
//! KubeVirt stand-in), reached with the kubeconfig of the shipped infrastructure
//! Role. Each VM's firmware UUID is its Node's systemUUID. The engine has no
//! KubeVirt code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::kubevirt::FENCER;
use common::world::*;
use nodefence::power::kubevirt::model::SAVED_RUN_STRATEGY;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_cut_from_the_network_is_stopped_for_good_then_released() {
    let w = WorldBuilder::new()
        .methods(&[Method::Kubevirt])
        .start()
        .await;
    let victim = w.db_placed().await;
    w.cut_network(&victim); // the VM keeps running
    w.released_and_moved(&victim).await;
    let infra = w.kubevirt();
    let vm = infra.vm(&victim).await;
    assert_eq!(
        vm["spec"]["runStrategy"], "Halted",
        "KubeVirt must not restart it"
    );
    assert_eq!(
        vm["metadata"]["annotations"][SAVED_RUN_STRATEGY], "Always",
        "what power-on restores"
    );
    assert!(!infra.running(&victim));
    w.expect_event(&victim, "PoweringOff").await;
    w.expect_event(&victim, "Released").await;
    w.assert_no_identity_events(&victim);
    // Only the victim's VM was written to.
    for (method, path) in infra.writes_by(FENCER) {
        assert!(
            path.contains(&format!("/virtualmachines/{victim}")),
            "{method} {path}"
        );
    }
    for other in w.nodes.iter().filter(|n| n.name != victim) {
        assert!(infra.running(&other.name), "{}", other.name);
        assert_eq!(infra.run_strategy(&other.name).await, "Always");
        assert!(!w.has_out_of_service_taint(&other.name));
    }
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_whose_host_died_is_released_without_a_command() {
    let w = WorldBuilder::new()
        .methods(&[Method::KubevirtManual])
        .start()
        .await;
    let victim = w.db_placed().await;
    w.pull_plug(&victim); // its infrastructure node died: the VMI ends Failed
    w.released_and_moved(&victim).await;
    w.expect_event(&victim, "ConfirmedOff").await;
    assert!(
        w.kubevirt().writes_by(FENCER).is_empty(),
        "a stopped VM needs no command: {:?}",
        w.kubevirt().writes_by(FENCER)
    );
    w.assert_no_identity_events(&victim);
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_of_the_same_name_that_is_not_the_nodes_stops_nothing_and_releases_nothing() {
    // The VM named worker-1 is another guest cluster's worker-1 (the inventory
    // names the wrong namespace, say): its firmware UUID is not this Node's.
    let w = WorldBuilder::new()
        .methods(&[Method::Kubevirt])
        .node("worker-1", |n| {
            n.bmc_uuid = Some("0b7e2c44-1d2f-4e6a-9b8c-7d6e5f4a3b2c".into());
        })
        .start()
        .await;
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
    w.expect_identity_block("worker-1", "IdentityMismatch")
        .await;
    // Well past the point where a fence would have happened.
    tokio::time::sleep(w.scaled(Duration::from_secs(120))).await;
    assert!(!w.has_out_of_service_taint("worker-1"));
    let infra = w.kubevirt();
    assert!(
        infra.writes_by(FENCER).is_empty(),
        "{:?}",
        infra.writes_by(FENCER)
    );
    assert!(infra.running("worker-1"), "the other cluster's VM runs on");
    assert_eq!(infra.run_strategy("worker-1").await, "Always");
    assert!(
        !w.event_reasons("worker-1")
            .iter()
            .any(|r| r == "PoweringOff" || r == "Released")
    );
    w.stop().await;
}
