//! `nodefence run` end to end: the real daemon (in process) against fake-kube with
//! its simulated control plane and a mock Redfish BMC whose systems are the nodes'
//! machines. Every assertion is on the cluster's or the BMC's state.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::world::*;
use nodefence_mocks::redfish::{Fault, MockPower};

/// `nodefence explain NODE` against the world's API server, as an operator runs it.
async fn explain(w: &World, node: &str) -> std::process::Output {
    let kubeconfig = w._dir.path().join("kubeconfig");
    w.kube.write_kubeconfig(&kubeconfig).unwrap();
    tokio::process::Command::new(env!("CARGO_BIN_EXE_nodefence"))
        .arg("--config")
        .arg(w._dir.path().join("nodefence.toml"))
        .args([
            "explain",
            node,
            "--namespace",
            "kube-system",
            "--kubeconfig",
        ])
        .arg(&kubeconfig)
        .output()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_loss_is_confirmed_off_tainted_and_the_pod_moves() {
    let w = world(false).await;
    eventually("db-0 Running", Duration::from_secs(30), || async {
        w.db_node().is_some()
    })
    .await;
    let victim = w.db_node().unwrap();
    w.bmc.set_power(&blade(&victim), MockPower::Off); // pull the plug
    eventually("out-of-service taint", Duration::from_secs(30), || async {
        w.has_out_of_service_taint(&victim)
    })
    .await;
    assert!(
        w.bmc.reset_log().is_empty(),
        "an Off machine needs no power command"
    );
    eventually(
        "db-0 Running elsewhere",
        Duration::from_secs(60),
        || async { w.db_node().is_some_and(|n| n != victim) },
    )
    .await;
    w.expect_event(&victim, "ConfirmedOff").await;
    w.expect_event(&victim, "Released").await;
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_node_whose_machine_is_on_is_powered_off_then_tainted() {
    let w = world(false).await;
    eventually("db-0 Running", Duration::from_secs(30), || async {
        w.db_node().is_some()
    })
    .await;
    let victim = w.db_node().unwrap();
    w.sim.set_kubelet(&victim, false); // network cut: the machine stays on
    eventually("out-of-service taint", Duration::from_secs(45), || async {
        w.has_out_of_service_taint(&victim)
    })
    .await;
    assert_eq!(
        w.bmc.reset_log(),
        vec![(blade(&victim), "ForceOff".to_string())]
    );
    assert_eq!(w.bmc.power(&blade(&victim)), Some(MockPower::Off));
    w.expect_event(&victim, "PoweringOff").await;
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_bmc_releases_nothing_and_says_why() {
    let w = world(false).await;
    eventually("db-0 Running", Duration::from_secs(30), || async {
        w.db_node().is_some()
    })
    .await;
    let victim = w.db_node().unwrap();
    w.bmc.inject(Fault::Hang);
    w.sim.set_kubelet(&victim, false);
    eventually(
        "a PowerQueryFailed warning",
        Duration::from_secs(30),
        || async {
            w.event_reasons(&victim)
                .iter()
                .any(|r| r == "PowerQueryFailed")
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(10)).await; // well past unhealthy_after
    assert!(!w.has_out_of_service_taint(&victim));
    assert!(w.node(&victim).is_some(), "the Node still exists");
    w.bmc.clear_faults();
    w.stop().await;
}

/// Issue 16, goal 3: while a node's BMC cannot be read, its Warning is repeated (one
/// Event series: count, and how long and how many readings in its note) and
/// `explain` names the BMC first, not the identity it leaves unproven.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_the_bmc_cannot_be_read_the_operator_keeps_hearing_why() {
    let w = WorldBuilder::new()
        .policy(|p| p.remind_every = Duration::from_secs(2))
        .start()
        .await;
    eventually("db-0 Running", Duration::from_secs(30), || async {
        w.db_node().is_some()
    })
    .await;
    let victim = w.db_node().unwrap();
    w.bmc.inject(Fault::DropConnection { count: 1_000_000 });
    w.sim.set_kubelet(&victim, false);
    eventually(
        "a repeated PowerQueryFailed warning",
        Duration::from_secs(45),
        || async {
            w.events_on(&victim).iter().any(|e| {
                e["reason"] == "PowerQueryFailed" && e["series"]["count"].as_i64().unwrap_or(0) >= 2
            })
        },
    )
    .await;
    let events: Vec<_> = w
        .events_on(&victim)
        .into_iter()
        .filter(|e| e["reason"] == "PowerQueryFailed")
        .collect();
    assert_eq!(
        events.len(),
        1,
        "one series, not one Event per reminder: {events:#?}"
    );
    let note = events[0]["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("cannot be read")
            && note.contains("still so after")
            && note.contains("failed readings in a row"),
        "{note}"
    );
    assert_eq!(events[0]["type"], "Warning");
    assert!(!w.has_out_of_service_taint(&victim));

    // `explain` judges health with the configuration's own (unscaled) timings.
    eventually("NotReady", Duration::from_secs(60), || async {
        !w.node_ready(&victim)
    })
    .await;
    let out = explain(&w, &victim).await;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let decision = text
        .lines()
        .find(|l| l.starts_with("Decision:"))
        .unwrap_or_default();
    assert!(
        decision.contains("nothing: the BMC cannot be read"),
        "the root cause first:\n{text}"
    );
    w.bmc.clear_faults();
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovered_node_gets_its_taint_removed() {
    let w = world(false).await;
    eventually("db-0 Running", Duration::from_secs(30), || async {
        w.db_node().is_some()
    })
    .await;
    let victim = w.db_node().unwrap();
    w.bmc.set_power(&blade(&victim), MockPower::Off);
    eventually("out-of-service taint", Duration::from_secs(30), || async {
        w.has_out_of_service_taint(&victim)
    })
    .await;
    w.bmc.set_power(&blade(&victim), MockPower::On); // power restored: the kubelet comes back
    eventually("taint removed", Duration::from_secs(60), || async {
        !w.has_out_of_service_taint(&victim)
    })
    .await;
    w.expect_event(&victim, "TaintRemoved").await;
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_decides_but_changes_nothing() {
    let w = world(true).await;
    eventually("db-0 Running", Duration::from_secs(30), || async {
        w.db_node().is_some()
    })
    .await;
    let victim = w.db_node().unwrap();
    w.sim.set_kubelet(&victim, false);
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert!(!w.has_out_of_service_taint(&victim));
    assert!(w.bmc.reset_log().is_empty(), "no power command in dry-run");
    assert_eq!(w.bmc.power(&blade(&victim)), Some(MockPower::On));
    assert!(
        w.event_reasons(&victim).iter().all(|r| !r.is_empty())
            && w.event_reasons(&victim).iter().all(|r| r != "Released")
    );
    let writes: Vec<_> = w
        .kube
        .request_log()
        .into_iter()
        // SelfSubjectAccessReviews are questions, not writes: nothing is stored.
        .filter(|(m, p, _)| {
            m != "GET" && !p.contains("/leases/") && !p.contains("/selfsubjectaccessreviews")
        })
        .collect();
    assert!(
        writes.is_empty(),
        "dry-run wrote to the cluster: {writes:?}"
    );
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_stops_fencing_and_resume_lets_it_continue() {
    let w = world(false).await;
    eventually("db-0 Running", Duration::from_secs(30), || async {
        w.db_node().is_some()
    })
    .await;
    let victim = w.db_node().unwrap();
    nodefence::cluster::pause::set(
        w.client.clone(),
        "kube-system",
        true,
        Some("upgrade"),
        "test",
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    w.sim.set_kubelet(&victim, false); // network cut while paused
    tokio::time::sleep(Duration::from_secs(15)).await; // well past unhealthy_after
    assert!(!w.has_out_of_service_taint(&victim), "paused: no release");
    assert!(w.bmc.reset_log().is_empty(), "paused: no power command");
    nodefence::cluster::pause::set(w.client.clone(), "kube-system", false, None, "test")
        .await
        .unwrap();
    eventually("fenced after resume", Duration::from_secs(30), || async {
        w.has_out_of_service_taint(&victim)
    })
    .await;
    assert_eq!(
        w.bmc.reset_log(),
        vec![(blade(&victim), "ForceOff".to_string())]
    );
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_shows_what_was_seen_and_decided() {
    let w = world(false).await;
    eventually("db-0 Running", Duration::from_secs(30), || async {
        w.db_node().is_some()
    })
    .await;
    let victim = w.db_node().unwrap();
    w.bmc.set_power(&blade(&victim), MockPower::Off);
    eventually("out-of-service taint", Duration::from_secs(30), || async {
        w.has_out_of_service_taint(&victim)
    })
    .await;
    w.expect_event(&victim, "Released").await;
    let out = explain(&w, &victim).await;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "Released:",
        "added by nodefence",
        "Power now:",
        "Off",
        "released on its power source's Off readings (the boot it ended:",
        "ConfirmedOff",
        "fencing is active",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_mid_fence_resumes_without_a_second_power_command() {
    let mut w = world(false).await;
    eventually("db-0 Running", Duration::from_secs(30), || async {
        w.db_node().is_some()
    })
    .await;
    let victim = w.db_node().unwrap();
    w.sim.set_kubelet(&victim, false); // network cut: powered off after unhealthy_after
    eventually("ForceOff sent", Duration::from_secs(40), || async {
        !w.bmc.reset_log().is_empty()
    })
    .await;
    w.restart_daemon("replica-after-restart").await;
    eventually("out-of-service taint", Duration::from_secs(30), || async {
        w.has_out_of_service_taint(&victim)
    })
    .await;
    assert_eq!(
        w.bmc.reset_log(),
        vec![(blade(&victim), "ForceOff".to_string())],
        "the new instance reads Off and sends nothing"
    );
    w.stop().await;
}
