//! Reboot-style remediation (`power_on_after_fence = true`), end to end: the real
//! daemon against fake-kube's simulated control plane (10x) and a mock Redfish BMC
//! whose systems are the nodes' machines (a machine powered On boots its kubelet).
//!
//! A node cut off the network with its machine On is powered off, confirmed Off and
//! released; its machine is powered back On only once Kubernetes has let go of it
//! (no pod bound to the node, no VolumeAttachment naming it), long before
//! `release_timeout`; the pending power-on is kept in the `nodefence-state`
//! ConfigMap, so it survives the deletion of the Node object and a new leader.
//! Every assertion is on the cluster's state (the fake-kube store) or the BMC's
//! (its timed Reset log).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::world::*;
use nodefence::cluster::facts::TAINTED_ANNOTATION;
use nodefence::cluster::records::STATE_CONFIGMAP;
use nodefence::engine::ReleaseMode;
use nodefence_mocks::kube::deletion::finalize_if_done;
use nodefence_mocks::kube::resources::{CONFIG_MAPS, PODS, VOLUME_ATTACHMENTS};
use nodefence_mocks::redfish::{MockPower, TimedReset};
use serde_json::{Value, json};
use tokio::time::Instant;

const A: &str = "replica-a";
const B: &str = "replica-b";

/// A finalizer the test puts on a VolumeAttachment to keep it (terminating) for as
/// long as it likes: the node is not drained while it holds.
const HOLD: &str = "test.nodefence.io/hold";

/// `release_timeout`: 10 minutes of cluster time, at the world's 10x. Every power-on
/// in these tests comes long before it, so only the drain signal can explain it.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(60);

/// A world with reboot-style remediation: `power_on_after_fence = true` through the
/// configuration, `release_timeout` [`RELEASE_TIMEOUT`] (scaled, set after loading).
fn reboot_world() -> WorldBuilder {
    WorldBuilder::new()
        .policy_key("power_on_after_fence", "true")
        .policy(|p| p.release_timeout = RELEASE_TIMEOUT)
}

/// The Node's Ready condition status ("True", "Unknown", ...; "" without a Node).
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

fn uid(object: &Value) -> String {
    object
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Names of the pods bound to `node` (terminating ones included), any namespace.
fn pods_on(w: &World, node: &str) -> Vec<String> {
    w.store()
        .list(PODS, None)
        .0
        .into_iter()
        .filter(|p| p.pointer("/spec/nodeName").and_then(Value::as_str) == Some(node))
        .map(|p| {
            p["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

/// The VolumeAttachments that name `node`.
fn attachments_on(w: &World, node: &str) -> Vec<Value> {
    w.store()
        .list(VOLUME_ATTACHMENTS, None)
        .0
        .into_iter()
        .filter(|va| va.pointer("/spec/nodeName").and_then(Value::as_str) == Some(node))
        .collect()
}

/// `node`'s release record in the `nodefence-state` ConfigMap (in the namespace of
/// the daemon's leader Lease), parsed.
fn record_of(w: &World, node: &str) -> Option<Value> {
    let cm = w
        .store()
        .get(CONFIG_MAPS, Some(LEADER_LEASE_NAMESPACE), STATE_CONFIGMAP)
        .ok()?;
    let text = cm.pointer("/data")?.get(node)?.as_str()?;
    Some(serde_json::from_str(text).unwrap_or_else(|e| panic!("record of {node}: {e}: {text}")))
}

/// The power-on Resets (anything but ForceOff) the BMC received for `node`'s machine.
fn power_ons(w: &World, node: &str) -> Vec<TimedReset> {
    let system = w.system_of(node);
    w.bmc
        .timed_resets()
        .into_iter()
        .filter(|r| r.system == system && r.reset_type != "ForceOff")
        .collect()
}

fn reporting_instance(event: &Value) -> Option<&str> {
    event["reportingInstance"].as_str()
}

fn regards(event: &Value, node: &str) -> bool {
    event.pointer("/regarding/name").and_then(Value::as_str) == Some(node)
}

async fn db_running(w: &World) -> String {
    eventually("db-0 Running", Duration::from_secs(30), || async {
        w.db_node().is_some()
    })
    .await;
    let node = w.db_node().unwrap();
    eventually(
        &format!("db-0's volume attached to {node}"),
        Duration::from_secs(10),
        || async { !attachments_on(w, &node).is_empty() },
    )
    .await;
    node
}

/// What the cluster looked like between the release and the power-on.
#[derive(Debug, Default)]
struct Drain {
    /// The latest moment the node still had a pod or a VolumeAttachment (taken
    /// before the read that showed it, so the drain came after it).
    last_undrained: Option<Instant>,
    /// The first read that showed no pod and no VolumeAttachment.
    first_drained: Option<Instant>,
    /// The last read with a pod bound to the node.
    last_pod: Option<Instant>,
    /// The last read with a VolumeAttachment naming the node.
    last_attachment: Option<Instant>,
    /// The release record at the last look before the power-on.
    record: Option<Value>,
    /// The uids of the Node objects seen, in order (`None`: no Node).
    nodes: Vec<Option<String>>,
}

/// Polls the store every 10 ms until the BMC has received a power-on for `node`'s
/// machine (at most `within`); returns that Reset and what was seen before it.
///
/// The BMC's log is read before and after each look at the store, and a look during
/// which the power-on arrived is discarded: everything in the returned [`Drain`] was
/// seen before the power-on (the mock logs a Reset and applies it under one lock),
/// however late this task is scheduled.
async fn watch_until_power_on(w: &World, node: &str, within: Duration) -> (TimedReset, Drain) {
    let mut seen = Drain::default();
    let end = Instant::now() + within;
    let power_on = || power_ons(w, node).into_iter().next();
    loop {
        if let Some(on) = power_on() {
            return (on, seen);
        }
        let before = Instant::now();
        let pods = pods_on(w, node);
        let attachments = attachments_on(w, node);
        let record = record_of(w, node);
        let current = w.node(node).map(|n| uid(&n));
        let after = Instant::now();
        if let Some(on) = power_on() {
            return (on, seen);
        }
        if !pods.is_empty() {
            seen.last_pod = Some(before);
        }
        if !attachments.is_empty() {
            seen.last_attachment = Some(before);
        }
        if pods.is_empty() && attachments.is_empty() {
            seen.first_drained.get_or_insert(after);
        } else {
            seen.last_undrained = Some(before);
            // Drained, then not again: the drain is the last transition that counts.
            seen.first_drained = None;
        }
        seen.record = record;
        if seen.nodes.last() != Some(&current) {
            seen.nodes.push(current);
        }
        assert!(
            Instant::now() < end,
            "no power-on for {node} within {within:?}; seen: {seen:?}; pods {pods:?}, \
             attachments {attachments:?}; BMC Resets {:?}; Events on {node}: {:?}",
            w.resets_of(node),
            w.event_reasons(node)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Asserts the power-on came after the node was drained, soon after (the drain
/// check runs every `on_poll_interval`, 500 ms here), and long before
/// `release_timeout` counted from `released`.
fn assert_powered_on_after_drain(on: &TimedReset, seen: &Drain, released: Instant) {
    // `None`: the drain was over before the first look (a slow test task), and that
    // look came before the power-on; `first_drained` below still has to be seen.
    if let Some(last_undrained) = seen.last_undrained {
        assert!(
            on.at > last_undrained,
            "powered On {:?} before the node was drained: {seen:?}",
            last_undrained.duration_since(on.at)
        );
    }
    for (what, last) in [
        ("a pod", seen.last_pod),
        ("a VolumeAttachment", seen.last_attachment),
    ] {
        if let Some(last) = last {
            assert!(
                on.at > last,
                "powered On while {what} was still on the node"
            );
        }
    }
    let drained = seen
        .first_drained
        .expect("the node was seen drained before the power-on");
    let lag = on.at.saturating_duration_since(drained);
    assert!(
        lag < Duration::from_secs(3),
        "powered On {lag:?} after the drain: not the drain signal"
    );
    let after_release = on.at.duration_since(released);
    assert!(
        after_release < RELEASE_TIMEOUT / 4,
        "powered On {after_release:?} after the release (release_timeout {RELEASE_TIMEOUT:?})"
    );
}

/// The record of a pending power-on, as the leader wrote it (checked at the last look
/// before the power-on: the record is kept until the machine is On).
fn assert_pending_record(record: Option<&Value>, mode: &str) {
    let record = record.expect("a release record while the power-on was pending");
    assert_eq!(record["release"], mode, "{record}");
    assert_eq!(record["powerOnPending"], true, "{record}");
    assert!(record["releasedAt"].is_string(), "{record}");
}

/// Out-of-service taint: a network cut with the machine On is fenced (ForceOff, Off
/// confirmed, taint), the machine is powered On again as soon as its pod is gone and
/// its VolumeAttachment detached (long before `release_timeout`), the node comes
/// back Ready, and nodefence removes its taint. One ForceOff, one On; the pending
/// power-on is recorded while it is pending and only then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_node_is_powered_back_on_once_drained_and_its_taint_removed_when_ready() {
    let w = reboot_world().start().await;
    assert!(w.config.agent.policy.power_on_after_fence);
    let victim = db_running(&w).await;
    assert_eq!(record_of(&w, &victim), None);
    w.cut_network(&victim); // kubelet silent, machine On
    eventually("ForceOff then taint", Duration::from_secs(30), || async {
        w.has_out_of_service_taint(&victim)
    })
    .await;
    let released = Instant::now();
    assert_eq!(w.resets_of(&victim), vec!["ForceOff".to_string()]);

    let (on, seen) = watch_until_power_on(&w, &victim, Duration::from_secs(15)).await;
    assert_eq!(on.reset_type, "On");
    assert_powered_on_after_drain(&on, &seen, released);
    assert_pending_record(seen.record.as_ref(), "out-of-service-taint");
    assert!(
        seen.nodes.iter().all(|n| n.is_some()),
        "the tainted Node stays: {:?}",
        seen.nodes
    );
    let powering_on = w
        .expect_event_where("PoweringOn", |e| regards(e, &victim))
        .await;
    assert!(
        powering_on.iter().all(|e| e["note"]
            .as_str()
            .is_some_and(|n| n.contains("pods are gone"))),
        "the power-on is the drain's, not release_timeout's: {powering_on:#?}"
    );

    eventually("the node Ready again", Duration::from_secs(10), || async {
        ready_status(&w, &victim) == "True"
    })
    .await;
    w.expect_event(&victim, "TaintRemoved").await;
    eventually("the taint removed", Duration::from_secs(5), || async {
        !w.has_out_of_service_taint(&victim)
    })
    .await;
    eventually(
        "the release record cleared",
        Duration::from_secs(5),
        || async { record_of(&w, &victim).is_none() },
    )
    .await;
    assert_eq!(w.power_of(&victim), Some(MockPower::On));
    assert_eq!(
        w.resets_of(&victim),
        vec!["ForceOff".to_string(), "On".to_string()],
        "one power-off, one power-on"
    );
    assert_eq!(
        w.bmc.reset_log().len(),
        2,
        "no other machine touched: {:?}",
        w.bmc.reset_log()
    );
    w.stop().await;
}

/// `release = "delete-node"` with `delete_volume_attachments`: the Node object and
/// its VolumeAttachment are deleted, the machine is powered On once the orphaned pod
/// is gone although the Node no longer exists, and its kubelet re-registers the
/// Node (a new object) when the machine boots. One ForceOff, one On; the record
/// carries the power-on across the Node's absence and is cleared after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_node_is_powered_back_on_once_drained_and_registers_again() {
    let w = reboot_world()
        .policy_key("release", "\"delete-node\"")
        .policy_key("delete_volume_attachments", "true")
        .start()
        .await;
    let policy = &w.config.agent.policy;
    assert_eq!(policy.release, ReleaseMode::DeleteNode);
    assert!(policy.delete_volume_attachments && policy.power_on_after_fence);
    let victim = db_running(&w).await;
    let old_uid = uid(&w.node(&victim).unwrap());
    let cut = Instant::now();
    w.cut_network(&victim);
    eventually(
        "ForceOff then the Node deleted",
        Duration::from_secs(30),
        || async { w.node(&victim).is_none() },
    )
    .await;
    let node_gone = Instant::now();
    let force_off = w.bmc.timed_resets();
    assert_eq!(force_off.len(), 1, "{force_off:?}");
    assert_eq!(force_off[0].reset_type, "ForceOff");
    assert!(force_off[0].at > cut);
    assert_eq!(w.power_of(&victim), Some(MockPower::Off));
    // The release is done (Node deleted, then its VolumeAttachments): the pending
    // power-on must be recorded, the Node being gone.
    eventually(
        "the deleted Node's pending power-on recorded",
        Duration::from_secs(5),
        || async { record_of(&w, &victim).is_some() },
    )
    .await;

    let (on, seen) = watch_until_power_on(&w, &victim, Duration::from_secs(15)).await;
    assert_eq!(on.reset_type, "On");
    assert_eq!(
        seen.nodes,
        vec![None],
        "the Node stayed absent until the machine was powered On"
    );
    assert_powered_on_after_drain(&on, &seen, node_gone);
    assert_pending_record(seen.record.as_ref(), "delete-node");

    eventually(
        "the kubelet re-registers its Node, Ready",
        Duration::from_secs(10),
        || async {
            w.node(&victim).is_some_and(|n| uid(&n) != old_uid)
                && ready_status(&w, &victim) == "True"
        },
    )
    .await;
    eventually(
        "the release record cleared",
        Duration::from_secs(5),
        || async { record_of(&w, &victim).is_none() },
    )
    .await;
    assert!(
        !w.has_out_of_service_taint(&victim),
        "delete-node adds no taint"
    );
    assert!(attachments_on(&w, &victim).is_empty());
    // Settle: nothing more is done to a node that is back (no second power command).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(w.power_of(&victim), Some(MockPower::On));
    assert_eq!(
        w.resets_of(&victim),
        vec!["ForceOff".to_string(), "On".to_string()],
        "one power-off, one power-on"
    );
    assert_eq!(w.bmc.reset_log().len(), 2, "{:?}", w.bmc.reset_log());
    assert_eq!(ready_status(&w, &victim), "True");
    w.stop().await;
}

/// The leader is killed after it released the node (taint and record written) and
/// before the power-on: the node's VolumeAttachment is held (a test finalizer), so
/// the drain cannot finish. The standby takes over, reads the record, and once the
/// hold is let go it powers the machine On, once: no second ForceOff, no second
/// release, one On from the BMC's point of view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_powers_on_a_node_its_crashed_predecessor_released() {
    let mut w = reboot_world().replicas(&[A]).start().await;
    eventually(&format!("{A} leads"), Duration::from_secs(10), || async {
        w.leader().as_deref() == Some(A)
    })
    .await;
    w.start_replica(B);
    let victim = db_running(&w).await;
    let held = hold_attachment(&w, &victim);
    w.cut_network(&victim);
    eventually("ForceOff then taint", Duration::from_secs(30), || async {
        w.has_out_of_service_taint(&victim)
    })
    .await;
    eventually("the release recorded", Duration::from_secs(5), || async {
        record_of(&w, &victim).is_some()
    })
    .await;
    assert_pending_record(record_of(&w, &victim).as_ref(), "out-of-service-taint");
    let tainted_at =
        w.node(&victim).unwrap()["metadata"]["annotations"][TAINTED_ANNOTATION].clone();
    assert!(tainted_at.is_string(), "nodefence's taint annotation");
    assert!(
        power_ons(&w, &victim).is_empty(),
        "the VolumeAttachment is held"
    );
    w.crash_replica(A).await;
    assert_eq!(
        w.leader().as_deref(),
        Some(A),
        "a crashed leader releases nothing"
    );
    eventually(
        &format!("{B} takes the Lease over"),
        Duration::from_secs(10),
        || async { w.leader().as_deref() == Some(B) },
    )
    .await;
    // Everything but the hold is done: the pod is gone and the detach finished.
    eventually(
        "only the held VolumeAttachment left on the node",
        Duration::from_secs(10),
        || async {
            let vas = attachments_on(&w, &victim);
            pods_on(&w, &victim).is_empty()
                && vas.len() == 1
                && vas[0].pointer("/metadata/deletionTimestamp").is_some()
                && vas[0]["metadata"]["finalizers"] == json!([HOLD])
        },
    )
    .await;
    // The new leader checks the drain (every 500 ms) and waits.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        w.node(&victim).unwrap()["metadata"]["annotations"][TAINTED_ANNOTATION],
        tainted_at,
        "the node was not released again"
    );
    assert_eq!(w.out_of_service_taints(&victim), 1);
    assert!(
        power_ons(&w, &victim).is_empty(),
        "powered On while a VolumeAttachment still named the node"
    );
    assert!(
        record_of(&w, &victim).is_some(),
        "the power-on is still pending"
    );
    let released_hold = Instant::now();
    let_go(&w, &held);
    assert!(attachments_on(&w, &victim).is_empty());

    eventually(
        &format!("{B} powers the machine On"),
        Duration::from_secs(5),
        || async { !power_ons(&w, &victim).is_empty() },
    )
    .await;
    let on = power_ons(&w, &victim).remove(0);
    assert_eq!(on.reset_type, "On");
    assert!(
        on.at > released_hold,
        "powered On before the drain finished"
    );
    let powering_on = w
        .expect_event_where("PoweringOn", |e| regards(e, &victim))
        .await;
    assert!(
        powering_on.iter().all(|e| reporting_instance(e) == Some(B)),
        "the power-on must be {B}'s: {powering_on:#?}"
    );
    eventually("the node Ready again", Duration::from_secs(10), || async {
        ready_status(&w, &victim) == "True"
    })
    .await;
    let untainted = w
        .expect_event_where("TaintRemoved", |e| regards(e, &victim))
        .await;
    assert!(
        untainted.iter().all(|e| reporting_instance(e) == Some(B)),
        "{untainted:#?}"
    );
    eventually(
        "the release record cleared",
        Duration::from_secs(5),
        || async { record_of(&w, &victim).is_none() },
    )
    .await;
    assert!(!w.has_out_of_service_taint(&victim));
    // The release that ended stays on the Node: a request made during it that no
    // replica saw then was served by it (simulation seed 7104).
    let last_release =
        w.node(&victim).unwrap()["metadata"]["annotations"]["nodefence.io/last-release"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_default();
    assert!(
        tainted_at
            .as_str()
            .is_some_and(|added| last_release.starts_with(&format!("{added}/"))),
        "{last_release:?} does not start at {tainted_at}"
    );
    let released: Vec<Value> = w
        .events_with_reason("Released")
        .into_iter()
        .filter(|e| regards(e, &victim))
        .collect();
    assert_eq!(released.len(), 1, "one release: {released:#?}");
    assert_eq!(reporting_instance(&released[0]), Some(A), "{released:#?}");
    assert!(
        released[0].get("series").is_none_or(Value::is_null),
        "released once: {released:#?}"
    );
    assert_eq!(
        w.resets_of(&victim),
        vec!["ForceOff".to_string(), "On".to_string()],
        "one power-off (by {A}), one power-on (by {B})"
    );
    assert_eq!(w.bmc.reset_log().len(), 2, "{:?}", w.bmc.reset_log());
    assert_eq!(w.power_of(&victim), Some(MockPower::On));
    w.stop().await;
}

/// Puts [`HOLD`] on the VolumeAttachment of `node`; returns its name.
fn hold_attachment(w: &World, node: &str) -> String {
    let held = attachments_on(w, node)[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    w.store()
        .modify(VOLUME_ATTACHMENTS, None, &held, |va| {
            let finalizers = &mut va["metadata"]["finalizers"];
            if !finalizers.is_array() {
                *finalizers = json!([]);
            }
            finalizers.as_array_mut().unwrap().push(json!(HOLD));
            Ok(())
        })
        .unwrap();
    held
}

/// Lets [`HOLD`] go: the VolumeAttachment is finalized and the node drained.
fn let_go(w: &World, held: &str) {
    w.store()
        .modify(VOLUME_ATTACHMENTS, None, held, |va| {
            va["metadata"]["finalizers"]
                .as_array_mut()
                .unwrap()
                .retain(|f| f != HOLD);
            Ok(())
        })
        .unwrap();
    finalize_if_done(&w.store(), VOLUME_ATTACHMENTS, None, held).unwrap();
}

/// The BMC address starts answering for another machine between the release and the
/// power-on (re-cabled, re-addressed, or the mainboard swapped). The power-on reads
/// the machine's identity in the same exchange as the command, so it is refused, not
/// sent: no Reset reaches that other machine and a `PowerOnFailed` Warning says why.
/// Once the BMC answers for the node's own machine again, the
/// power-on is tried again and done: exactly one On.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_power_on_is_refused_while_the_bmc_answers_for_another_machine_then_retried() {
    let w = reboot_world().start().await;
    let victim = db_running(&w).await;
    let held = hold_attachment(&w, &victim);
    w.cut_network(&victim);
    eventually("ForceOff then taint", Duration::from_secs(30), || async {
        w.has_out_of_service_taint(&victim)
    })
    .await;
    assert_eq!(w.resets_of(&victim), vec!["ForceOff".to_string()]);
    let system = w.system_of(&victim);
    let own_uuid = w
        .bmc
        .systems()
        .into_iter()
        .find(|s| s.id == system)
        .map(|s| s.uuid)
        .unwrap();
    w.bmc
        .set_uuid(&system, "4c4c4544-0099-4000-8000-0000000000ff");
    let_go(&w, &held);

    let refused = w
        .expect_event_where("PowerOnFailed", |e| regards(e, &victim))
        .await;
    assert!(
        refused.iter().all(|e| e["note"]
            .as_str()
            .is_some_and(|n| n.contains("identity mismatch") && n.contains("not sent"))),
        "{refused:#?}"
    );
    assert!(
        power_ons(&w, &victim).is_empty(),
        "a power-on reached the machine the BMC now answers for: {:?}",
        w.bmc.reset_log()
    );
    assert_eq!(w.power_of(&victim), Some(MockPower::Off));
    assert!(
        record_of(&w, &victim).is_some(),
        "the power-on is still pending"
    );

    w.bmc.set_uuid(&system, &own_uuid);
    let (on, _) = watch_until_power_on(&w, &victim, Duration::from_secs(30)).await;
    assert_eq!(on.reset_type, "On");
    eventually("the node Ready again", Duration::from_secs(10), || async {
        ready_status(&w, &victim) == "True"
    })
    .await;
    assert_eq!(
        w.resets_of(&victim),
        vec!["ForceOff".to_string(), "On".to_string()],
        "one power-off, one power-on"
    );
    w.stop().await;
}
