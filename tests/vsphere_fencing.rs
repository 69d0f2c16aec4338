//! `nodefence run` end to end on vSphere: the real daemon against fake-kube's
//! simulated control plane, every worker a VM on the mock vCenter (SOAP over HTTPS).
//! The inventory names no VM: the driver finds each by its Node's systemUUID, which
//! the VM's `config.uuid` carries with its first three fields byte-swapped (as older
//! guests report it), and the identity check accepts that order. The engine has no
//! vSphere code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::world::*;
use nodefence_mocks::vsphere::VmPower;

/// Three workers, each a VM.
fn vm_world() -> WorldBuilder {
    WorldBuilder::new().methods(&[Method::Vsphere])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_cut_from_the_network_is_powered_off_then_released() {
    let w = vm_world().start().await;
    let victim = w.db_placed().await;
    w.cut_network(&victim); // the VM keeps running
    w.released_and_moved(&victim).await;
    let vm = w.vm_of(&victim);
    assert_eq!(w.vsphere().power(&vm), Some(VmPower::PoweredOff));
    assert!(!w.vsphere().power_calls().is_empty());
    assert!(
        w.vsphere()
            .power_calls()
            .iter()
            .all(|(op, target)| op == "PowerOffVM_Task" && *target == vm),
        "only the victim's VM was powered off: {:?}",
        w.vsphere().power_calls()
    );
    w.expect_event(&victim, "PoweringOff").await;
    w.expect_event(&victim, "Released").await;
    w.assert_no_identity_events(&victim);
    for other in w.nodes.iter().filter(|n| n.name != victim) {
        assert_eq!(
            w.vsphere().power(&w.vm_of(&other.name)),
            Some(VmPower::PoweredOn),
            "{}",
            other.name
        );
        assert!(!w.has_out_of_service_taint(&other.name));
    }
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_that_lost_power_is_released_without_a_command() {
    let w = vm_world().start().await;
    let victim = w.db_placed().await;
    w.pull_plug(&victim); // the host died: the VM reads poweredOff
    w.released_and_moved(&victim).await;
    w.expect_event(&victim, "ConfirmedOff").await;
    assert!(
        w.vsphere().power_calls().is_empty(),
        "a powered-off VM needs no command: {:?}",
        w.vsphere().power_calls()
    );
    w.assert_no_identity_events(&victim);
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inventory_naming_another_nodes_vm_powers_off_nothing_and_releases_nothing() {
    // worker-1's entry names worker-2's VM: its config.uuid is not worker-1's.
    let w = vm_world()
        .node("worker-1", |n| {
            n.inventory_lines = vec!["moid = \"vm-102\"".into()];
        })
        .start()
        .await;
    assert_eq!(w.vm_of("worker-2"), "vm-102");
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
    assert!(
        w.vsphere().power_calls().is_empty(),
        "{:?}",
        w.vsphere().power_calls()
    );
    assert_eq!(w.vsphere().power("vm-102"), Some(VmPower::PoweredOn));
    assert!(
        !w.event_reasons("worker-1")
            .iter()
            .any(|r| r == "PoweringOff" || r == "Released")
    );
    w.stop().await;
}
