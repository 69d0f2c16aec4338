//! High availability and cluster-wide limits, end to end: two live daemon replicas
//! (leader election on a Lease), a leader lost mid-fence (crashed or shut down), and
//! several nodes failing at once (rate limits, storm protection). The real daemon runs
//! in process against fake-kube with its simulated control plane (10x) and a mock
//! Redfish BMC; every assertion is on the cluster's or the BMC's state.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::world::*;
use nodefence::cluster::leader::LeaderTimings;
use nodefence_mocks::redfish::MockPower;
use serde_json::Value;
use tokio::time::Instant;

const A: &str = "replica-a";
const B: &str = "replica-b";

fn reporting_instance(event: &Value) -> Option<&str> {
    event["reportingInstance"].as_str()
}

fn regards(event: &Value, node: &str) -> bool {
    event.pointer("/regarding/name").and_then(Value::as_str) == Some(node)
}

/// Starts A, waits until it leads, then starts B as its standby.
async fn two_replicas(w: &mut World) {
    eventually(&format!("{A} leads"), Duration::from_secs(10), || async {
        w.leader().as_deref() == Some(A)
    })
    .await;
    w.start_replica(B);
}

/// Waits (polling every 10 ms, so the leader can be stopped right after) until the
/// BMC has received a Reset for `node`'s machine.
async fn wait_for_power_off(w: &World, node: &str, within: Duration) {
    eventually_every(
        &format!("a ForceOff for {node}"),
        within,
        Duration::from_millis(10),
        || async { !w.resets_of(node).is_empty() },
    )
    .await;
}

/// The leader crashes (no Lease release) right after it sent the ForceOff; the
/// standby takes over once the Lease expires, finds the machine Off and finishes:
/// one ForceOff in all, one taint, the release published by the new leader, and the
/// stateful pod Running elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_crashed_mid_fence_is_replaced_and_the_standby_finishes_without_a_second_power_off()
 {
    // The machine takes 1.5 s to go Off: the leader is killed before it can see Off.
    let mut w = WorldBuilder::new()
        .replicas(&[A])
        .transition_delay(Duration::from_millis(1500))
        .start()
        .await;
    two_replicas(&mut w).await;
    eventually("db-0 Running", Duration::from_secs(30), || async {
        w.db_node().is_some()
    })
    .await;
    let victim = w.db_node().unwrap();
    w.cut_network(&victim); // the machine stays On
    wait_for_power_off(&w, &victim, Duration::from_secs(40)).await;
    w.crash_replica(A).await;
    assert!(
        !w.has_out_of_service_taint(&victim),
        "the leader must have crashed before its release"
    );
    assert_eq!(
        w.leader().as_deref(),
        Some(A),
        "a crashed leader releases nothing: its Lease must expire"
    );
    eventually(
        &format!("{B} takes the Lease over"),
        Duration::from_secs(10),
        || async { w.leader().as_deref() == Some(B) },
    )
    .await;
    eventually("out-of-service taint", Duration::from_secs(30), || async {
        w.has_out_of_service_taint(&victim)
    })
    .await;
    eventually(
        "db-0 Running elsewhere",
        Duration::from_secs(60),
        || async { w.db_node().is_some_and(|n| n != victim) },
    )
    .await;
    assert_eq!(w.out_of_service_taints(&victim), 1);
    assert_eq!(w.power_of(&victim), Some(MockPower::Off));
    assert_eq!(
        w.bmc.reset_log(),
        vec![(w.system_of(&victim), "ForceOff".to_string())],
        "the machine was already Off when {B} took over: no second power command"
    );
    let released = w
        .expect_event_where("Released", |e| regards(e, &victim))
        .await;
    assert!(
        released.iter().all(|e| reporting_instance(e) == Some(B)),
        "the release must be {B}'s: {released:#?}"
    );
    w.stop().await;
}

/// The leader is shut down (SIGTERM) right after it sent the ForceOff: it gives its
/// Lease up, so the standby leads and finishes well before the Lease would expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_shut_down_mid_fence_hands_over_at_once_and_the_standby_finishes() {
    // A long Lease (8 s): a handover that waited for it to expire would show.
    let lease_duration = Duration::from_secs(8);
    let mut w = WorldBuilder::new()
        .no_workloads()
        .replicas(&[A])
        .transition_delay(Duration::from_millis(1500))
        .leader_timings(LeaderTimings {
            lease_duration,
            renew_deadline: Duration::from_secs(5),
            retry_period: Duration::from_millis(200),
        })
        .start()
        .await;
    two_replicas(&mut w).await;
    let victim = "worker-2";
    // Let B's watches and its view of the Lease settle before the incident.
    tokio::time::sleep(Duration::from_secs(1)).await;
    w.cut_network(victim);
    wait_for_power_off(&w, victim, Duration::from_secs(40)).await;
    let stopping = Instant::now();
    w.stop_replica(A).await;
    assert!(
        !w.has_out_of_service_taint(victim),
        "the leader must have stopped before its release"
    );
    eventually(
        &format!("{B} leads at once"),
        Duration::from_secs(3),
        || async { w.leader().as_deref() == Some(B) },
    )
    .await;
    eventually(
        "out-of-service taint from the new leader",
        lease_duration,
        || async { w.has_out_of_service_taint(victim) },
    )
    .await;
    assert!(
        stopping.elapsed() < lease_duration,
        "released {:?} after the shutdown: the handover waited for the Lease to expire",
        stopping.elapsed()
    );
    assert_eq!(w.out_of_service_taints(victim), 1);
    assert_eq!(
        w.bmc.reset_log(),
        vec![(w.system_of(victim), "ForceOff".to_string())],
        "one power command in all"
    );
    let released = w
        .expect_event_where("Released", |e| regards(e, victim))
        .await;
    assert!(
        released.iter().all(|e| reporting_instance(e) == Some(B)),
        "the release must be {B}'s: {released:#?}"
    );
    w.stop().await;
}

/// Four nodes lose their network at once (machines On), with
/// `max_concurrent_fences = 1` and `min_power_off_interval` (10 s, scaled): the BMC
/// receives the four ForceOffs one at a time, each at least the interval after the
/// previous one and after it was answered, and all four nodes are released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simultaneous_failures_are_powered_off_one_at_a_time_and_spaced() {
    let speed = 10.0;
    let interval = Duration::from_secs(10).div_f64(speed);
    let victims = ["worker-1", "worker-2", "worker-3", "worker-4"];
    let w = WorldBuilder::new()
        .speed(speed)
        .workers(6)
        .no_workloads()
        .policy_key("max_concurrent_fences", "1")
        // 4 of 6 unhealthy is not a storm here.
        .policy_key("max_unhealthy", "4")
        .policy(move |p| p.min_power_off_interval = interval)
        .start()
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    for v in victims {
        w.cut_network(v);
    }
    eventually("all four released", Duration::from_secs(40), || async {
        victims.iter().all(|v| w.has_out_of_service_taint(v))
    })
    .await;
    let resets = w.bmc.timed_resets();
    let mut systems: Vec<String> = resets.iter().map(|r| r.system.clone()).collect();
    systems.sort();
    let mut expected: Vec<String> = victims.iter().map(|v| w.system_of(v)).collect();
    expected.sort();
    assert_eq!(
        systems, expected,
        "one Reset per failed machine: {resets:?}"
    );
    assert!(
        resets.iter().all(|r| r.reset_type == "ForceOff"),
        "{resets:?}"
    );
    // A few ms of request latency may differ between two commands.
    let slack = Duration::from_millis(50);
    for pair in resets.windows(2) {
        let gap = pair[1].at.duration_since(pair[0].at);
        assert!(
            gap + slack >= interval,
            "ForceOffs {} and {} only {gap:?} apart (min_power_off_interval {interval:?})",
            pair[0].system,
            pair[1].system
        );
    }
    let commands: Vec<_> = w
        .bmc
        .timed_request_log()
        .into_iter()
        .filter(|r| r.record.method == "POST" && r.record.path.contains("ComputerSystem.Reset"))
        .collect();
    assert_eq!(commands.len(), victims.len(), "{commands:?}");
    for pair in commands.windows(2) {
        let answered = pair[0].answered.expect("every Reset was answered");
        assert!(
            pair[1].received >= answered,
            "two power commands in flight at once (max_concurrent_fences = 1): {pair:?}"
        );
    }
    for v in victims {
        assert_eq!(w.power_of(v), Some(MockPower::Off), "{v}");
        assert_eq!(w.out_of_service_taints(v), 1, "{v}");
    }
    for healthy in ["worker-5", "worker-6"] {
        assert!(!w.has_out_of_service_taint(healthy));
        assert_eq!(w.power_of(healthy), Some(MockPower::On));
    }
    w.stop().await;
}

/// More nodes than `max_unhealthy` lose their network at once (machines On):
/// nodefence suspects a partition on its own side and sends no power command at all,
/// says so with a Warning Event, and still releases a node among them whose machine
/// really lost power.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_sends_no_power_command_but_a_machine_really_off_is_released() {
    let cut = ["worker-1", "worker-2", "worker-3"];
    let powerless = "worker-4";
    let w = WorldBuilder::new()
        .workers(6)
        .no_workloads()
        .policy_key("max_unhealthy", "2")
        .start()
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let cut_at = Instant::now();
    for n in cut {
        w.cut_network(n);
    }
    // The control plane sees them NotReady (its grace period, 50 s scaled, is longer
    // than nodefence's Lease staleness): the storm is declared by then.
    eventually(
        "the cut nodes NotReady",
        Duration::from_secs(20),
        || async {
            cut.iter().all(|n| {
                w.node(n)
                    .and_then(|node| {
                        node.pointer("/status/conditions")?
                            .as_array()?
                            .iter()
                            .find(|c| c["type"] == "Ready")
                            .map(|c| c["status"] != "True")
                    })
                    .unwrap_or(false)
            })
        },
    )
    .await;
    w.pull_plug(powerless);
    eventually(
        "the machine that lost power is released",
        Duration::from_secs(30),
        || async { w.has_out_of_service_taint(powerless) },
    )
    .await;
    // Well past unhealthy_after (6 s) for the nodes cut off with their machines On.
    let quiet_until = cut_at + Duration::from_secs(12);
    tokio::time::sleep_until(quiet_until).await;
    assert!(
        w.bmc.reset_log().is_empty(),
        "storm protection: no power command at all, got {:?}",
        w.bmc.reset_log()
    );
    for n in cut {
        assert!(
            !w.has_out_of_service_taint(n),
            "{n} released during a storm"
        );
        assert_eq!(w.power_of(n), Some(MockPower::On), "{n}");
    }
    assert_eq!(w.out_of_service_taints(powerless), 1);
    w.expect_event_where("StormProtection", |e| e["type"] == "Warning")
        .await;
    w.stop().await;
}
