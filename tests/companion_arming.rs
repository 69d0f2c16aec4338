//! Where a companion arms its watchdog, end to end (nodefence's listener, the real
//! `companion::run`): only while the node's policy has the watchdog level on, as the
//! leader's acknowledgements say; turned off, it disarms once every replica
//! acknowledged that it no longer counts; a driver that may not stop is kept and fed
//! by its rule (issue 52, item 8).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use nodefence::cluster::leader::Leadership;
use nodefence::heartbeat::hello;
use nodefence::watchdog::device::RecordingWatchdog;
use nodefence::watchdog::wire::WatchdogState;

use crate::heartbeat::{eventually, options, spawn, world};

fn only(node: &str) -> BTreeSet<String> {
    std::iter::once(node.to_string()).collect()
}

/// With a state directory (the shipped DaemonSet): unarmed while the policy is off,
/// armed once it is on, disarmed by the handshake when it is off again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_is_armed_only_while_the_policy_has_the_level_on() {
    let (kube, hb, pin) = world("worker-1", hello::AUDIENCE, Leadership::always()).await;
    hb.set_watchdog_nodes(BTreeSet::new());
    hb.set_nodes_in_cluster(3);
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "token-worker-1\n").unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let dog = RecordingWatchdog::new("iTCO_wdt", Duration::from_secs(10), false);
    let mut opts = options(&hb, pin, &token, dog.clone());
    opts.state_dir = Some(state.clone());
    let (status, stop, run) = spawn(opts);
    eventually("told the policy", || {
        status.lock().unwrap().arm_wanted == Some(false)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let s = status.lock().unwrap().clone();
    assert!(s.feeding && s.armed.is_none(), "{s:?}");
    assert_eq!(dog.recorded().feeds, 0, "nothing rests on it: never armed");
    assert!(
        !nodefence::companion::state::load(&state)
            .unwrap()
            .unwrap()
            .armed
    );
    // The level on: armed, and the kept state says so (a successor feeds it).
    hb.set_watchdog_nodes(only("worker-1"));
    eventually("armed", || status.lock().unwrap().armed.is_some()).await;
    eventually("fed", || dog.recorded().feeds > 3).await;
    assert!(
        nodefence::companion::state::load(&state)
            .unwrap()
            .unwrap()
            .armed
    );
    // Off again: "disarming" beaten, then disarmed with the magic close.
    hb.set_watchdog_nodes(BTreeSet::new());
    eventually("disarmed", || dog.recorded().disarmed).await;
    eventually("beats say no watchdog", || {
        hb.with_table(|t| t.companion("worker-1").map(|c| c.watchdog)) == Some(WatchdogState::None)
    })
    .await;
    let s = status.lock().unwrap().clone();
    assert!(s.armed.is_none() && !s.disarming && s.feeding, "{s:?}");
    assert!(
        !nodefence::companion::state::load(&state)
            .unwrap()
            .unwrap()
            .armed
    );
    let _ = stop.send(());
    assert_eq!(
        run.await.unwrap().unwrap(),
        None,
        "nothing armed at the stop"
    );
    kube.shutdown().await;
}

/// A driver that may not stop (`nowayout`): kept armed and fed by its rule when the
/// policy turns the level off (a disarm would leave it counting, unfed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watchdog_that_cannot_be_stopped_is_kept_and_fed() {
    let (kube, hb, pin) = world("worker-1", hello::AUDIENCE, Leadership::always()).await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "token-worker-1\n").unwrap();
    let dog = RecordingWatchdog::new("iTCO_wdt", Duration::from_secs(10), true);
    let (status, stop, run) = spawn(options(&hb, pin, &token, dog.clone()));
    eventually("armed", || status.lock().unwrap().armed.is_some()).await;
    hb.set_watchdog_nodes(BTreeSet::new());
    eventually("told", || status.lock().unwrap().arm_wanted == Some(false)).await;
    let fed = dog.recorded().feeds;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let s = status.lock().unwrap().clone();
    assert!(s.armed.is_some() && !s.disarming, "{s:?}");
    assert!(!dog.recorded().disarmed);
    assert!(dog.recorded().feeds >= fed + 5, "fed by its rule");
    let _ = stop.send(());
    run.await.unwrap().unwrap();
    kube.shutdown().await;
}
