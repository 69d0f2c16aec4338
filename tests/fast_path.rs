//! End to end (real daemon, fake-kube's simulated control plane, mock Redfish BMC):
//! the Lease fast path and the BMC identity cross-check. Assertions are on the
//! cluster's and the BMC's state.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, SystemTime};

use common::world::*;
use serde_json::Value;

/// The Node's Ready condition status ("True", "Unknown", ...).
fn ready_status(w: &World, node: &str) -> String {
    w.node(node)
        .and_then(|n| {
            n.pointer("/status/conditions")?
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Ready")
                .and_then(|c| c["status"].as_str().map(str::to_string))
        })
        .unwrap_or_default()
}

async fn db_running(w: &World) -> String {
    eventually("db-0 Running", Duration::from_secs(30), || async {
        w.db_node().is_some()
    })
    .await;
    w.db_node().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_loss_moves_the_pod_before_kubernetes_marks_the_node_not_ready() {
    // 5x: 25 s of Lease staleness is 5 s of test time, NotReady (50 s) 10 s.
    let w = WorldBuilder::new().speed(5.0).start().await;
    let victim = db_running(&w).await;
    w.pull_plug(&victim);
    eventually(
        "db-0 Running elsewhere",
        Duration::from_secs(30),
        || async { w.db_node().is_some_and(|n| n != victim) },
    )
    .await;
    assert_eq!(
        ready_status(&w, &victim),
        "True",
        "the replacement runs before the node is even NotReady"
    );
    assert!(w.has_out_of_service_taint(&victim));
    assert!(
        w.resets_of(&victim).is_empty(),
        "no power command: it was Off"
    );
    w.expect_event(&victim, "NodeSuspect").await;
    w.expect_event(&victim, "PodsForceDeleted").await;
    // Where the time went, in the Released Event (and nodefence_release_step_seconds).
    let note = released_note(&w, &victim).await;
    for step in [
        "detected +",
        "first reading +",
        "Off proven +",
        "released +",
    ] {
        assert!(note.contains(step), "{step:?} missing in {note:?}");
    }
    assert!(
        !note.contains("power-off sent"),
        "no power-off was sent: {note}"
    );
    w.stop().await;
}

/// The note of the `Released` Event on `node`.
async fn released_note(w: &World, node: &str) -> String {
    w.expect_event(node, "Released").await;
    w.events_on(node)
        .into_iter()
        .find(|e| e["reason"] == "Released")
        .and_then(|e| e["note"].as_str().map(str::to_string))
        .unwrap_or_default()
}

/// When the Node's Ready condition last changed (its `lastTransitionTime`).
fn ready_transition(w: &World, node: &str) -> Option<SystemTime> {
    let node = w.node(node)?;
    let ready = node
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?
        .clone();
    humantime::parse_rfc3339_weak(ready["lastTransitionTime"].as_str()?).ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_lease_with_the_machine_on_is_neither_released_nor_powered_off_until_unhealthy_after()
 {
    let w = WorldBuilder::new().start().await;
    let victim = db_running(&w).await;
    let cut = tokio::time::Instant::now();
    w.cut_network(&victim); // kubelet silent, machine On
    w.expect_event(&victim, "NodeSuspect").await;
    assert!(
        w.resets_of(&victim).is_empty() && !w.has_out_of_service_taint(&victim),
        "a stale Lease alone never powers off nor releases"
    );
    // Suspect from 1.5-2.5 s after the cut; NotReady at 5 s; the ForceOff once the
    // node is NotReady and unhealthy_after (6 s here) has passed since it was suspect.
    eventually("ForceOff then taint", Duration::from_secs(30), || async {
        w.has_out_of_service_taint(&victim)
    })
    .await;
    assert_eq!(w.resets_of(&victim), vec!["ForceOff".to_string()]);
    let reset = w.bmc.timed_resets()[0].at;
    assert!(
        reset.duration_since(cut) >= Duration::from_secs(7),
        "not before unhealthy_after from the first missed renewal: {:?} after the cut",
        reset.duration_since(cut)
    );
    let reset_wall = SystemTime::now() - reset.elapsed();
    let not_ready = ready_transition(&w, &victim).expect("the Ready condition's transition");
    assert_ne!(ready_status(&w, &victim), "True");
    assert!(
        not_ready <= reset_wall,
        "never before NotReady: NotReady at {not_ready:?}, ForceOff at {reset_wall:?}"
    );
    let note = released_note(&w, &victim).await;
    assert!(note.contains("power-off sent +"), "{note}");
    w.expect_event(&victim, "PodsForceDeleted").await;
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_that_resumes_renewing_aborts_the_procedure() {
    let w = WorldBuilder::new().start().await;
    let victim = db_running(&w).await;
    w.cut_network(&victim);
    w.expect_event(&victim, "NodeSuspect").await;
    w.sim.set_kubelet(&victim, true); // the network is back before NotReady
    w.expect_event(&victim, "RecoveredBeforeRelease").await;
    tokio::time::sleep(Duration::from_secs(8)).await; // past NotReady + unhealthy_after
    assert!(w.resets_of(&victim).is_empty());
    assert!(!w.has_out_of_service_taint(&victim));
    assert_eq!(w.db_node().as_deref(), Some(victim.as_str()), "db-0 stays");
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_mapped_to_another_machines_bmc_is_never_released_or_powered_off() {
    // worker-1's inventory entry reaches a BMC system whose UUID is another machine's.
    let w = WorldBuilder::new()
        .node("worker-1", |n| {
            n.bmc_uuid = Some("4c4c4544-0000-4000-8000-0000000000ff".into());
        })
        .no_workloads()
        .start()
        .await;
    w.pull_plug("worker-1");
    w.expect_event("worker-1", "IdentityMismatch").await;
    tokio::time::sleep(Duration::from_secs(10)).await; // past NotReady and unhealthy_after
    assert!(
        !w.has_out_of_service_taint("worker-1"),
        "the BMC read Off, but it is not proven to be worker-1's"
    );
    assert!(w.resets_of("worker-1").is_empty());
    let reasons = w.event_reasons("worker-1");
    assert!(!reasons.iter().any(|r| r == "Released"), "{reasons:?}");
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bmc_reporting_the_uuid_byte_swapped_is_the_same_machine() {
    let own = "4c4c4544-0031-4a10-8052-b4c04f4e3232";
    let swapped = uuid::Uuid::from_bytes_le(*uuid::Uuid::parse_str(own).unwrap().as_bytes());
    let w = WorldBuilder::new()
        .node("worker-1", |n| {
            n.uuid = Some(own.to_uppercase());
            n.bmc_uuid = Some(swapped.to_string());
        })
        .no_workloads()
        .start()
        .await;
    w.pull_plug("worker-1");
    eventually("out-of-service taint", Duration::from_secs(30), || async {
        w.has_out_of_service_taint("worker-1")
    })
    .await;
    let mismatches: Vec<Value> = w.events_with_reason("IdentityMismatch");
    assert!(mismatches.is_empty(), "{mismatches:?}");
    w.stop().await;
}

/// A kubelet whose machine's clock runs 2 s behind (no NTP) writes renewTimes that
/// look 2-3 s old when they arrive, and at this speed the Lease reads stale after
/// 2.5 s. Measured from when nodefence saw each renewal, the node is not suspect
/// while it keeps renewing; its power loss is still found and released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_clock_behind_is_not_a_missed_renewal() {
    let w = WorldBuilder::new()
        .node("worker-1", |n| n.clock_behind = Duration::from_secs(2))
        .start()
        .await;
    // Ten renewals (one a second at 10x).
    tokio::time::sleep(Duration::from_secs(10)).await;
    let reasons = w.event_reasons("worker-1");
    assert!(
        !reasons.iter().any(|r| r == "NodeSuspect"),
        "a renewing node was suspect: {reasons:?}"
    );
    assert!(w.resets_of("worker-1").is_empty());
    w.pull_plug("worker-1");
    w.expect_event("worker-1", "NodeSuspect").await;
    w.expect_event("worker-1", "Released").await;
    assert!(w.has_out_of_service_taint("worker-1"));
    assert!(w.resets_of("worker-1").is_empty(), "it was Off already");
    w.stop().await;
}
