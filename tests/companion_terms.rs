//! Two replicas that both believe they lead (a VM paused and resumed, a dry run
//! beside the real leader), end to end: nodefence's real listeners and the real
//! `companion::run` (issue 52, item 5). A companion takes the leader's
//! acknowledgements of the newest term only, so an old leader can neither keep it fed
//! nor mark it; the old leader finds out from the companion's own beats and stops
//! acknowledging as the leader until it renews its Lease.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use nodefence::cluster::leader::Leadership;
use nodefence::heartbeat::{self, Settings, hello};
use nodefence::watchdog::device::RecordingWatchdog;
use nodefence::watchdog::timing::Timing;

use crate::heartbeat::{COMPANION, client, eventually, leader_tls, options, spawn, world};

/// A second replica on 127.0.0.2 (the same port, the same certificate), leading as
/// `leadership` says.
async fn replica(
    kube: &nodefence_mocks::kube::FakeKubeHandle,
    port: u16,
    leadership: Leadership,
) -> heartbeat::Heartbeat {
    let hb = heartbeat::start(
        Settings {
            listen: format!("127.0.0.2:{port}").parse().unwrap(),
            companion_user: COMPANION.into(),
            timing: Timing::default(),
            heartbeat_interval: Duration::from_millis(100),
            heartbeat_timeout: Duration::from_millis(500),
            metrics: None,
        },
        client(kube).await,
        leader_tls(),
        leadership,
        std::future::pending(),
    )
    .await
    .unwrap();
    hb.set_watchdog_nodes(std::iter::once("worker-1".to_string()).collect());
    hb
}

/// The old leader leads in term 1, the new one in term 2, both at once. The companion
/// takes term 2's acknowledgements and refuses term 1's; the old leader hears of term
/// 2 in the beats and stops leading. Its mark then stops nothing; the new leader's does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_leader_that_believes_it_leads_neither_feeds_nor_marks() {
    let (_old_switch, old) = Leadership::switched(true);
    let (kube, old_hb, pin) = world("worker-1", hello::AUDIENCE, old.clone()).await;
    // The new leader's term: its second (a switch's terms are numbered).
    let (new_switch, new) = Leadership::switched(true);
    new_switch.set(false);
    new_switch.set(true);
    assert_eq!(
        (old.fencing_token(), new.fencing_token()),
        (Some(1), Some(2))
    );
    let new_hb = replica(&kube, old_hb.addr().port(), new.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "token-worker-1\n").unwrap();
    let dog = RecordingWatchdog::new("iTCO_wdt", Duration::from_secs(10), false);
    let mut opts = options(&old_hb, pin, &token, dog.clone());
    opts.nodefence = format!("https://localhost:{}", old_hb.addr().port())
        .parse()
        .unwrap();
    opts.replicas = Some(vec![old_hb.addr(), new_hb.addr()]);
    let (status, stop, run) = spawn(opts);
    eventually("term 2 taken, fed", || {
        status.lock().unwrap().term_seen == 2 && dog.recorded().feeds >= 3
    })
    .await;
    // The old leader hears of term 2 in the beats: it no longer leads.
    eventually("the old leader stood down", || !old.is_leader()).await;
    assert_eq!(old.fencing_token(), None);
    assert!(new.is_leader(), "the new one leads on");
    // Its mark stops nothing: its acknowledgements are no longer the leader's.
    old_hb.set_marked("worker-1", true);
    let fed = dog.recorded().feeds;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let s = status.lock().unwrap().clone();
    assert!(!s.marked && s.feeding, "{s:?}");
    assert!(dog.recorded().feeds >= fed + 5, "fed on term 2's answers");
    // The new leader's mark does.
    new_hb.set_marked("worker-1", true);
    eventually("marked by the leader", || status.lock().unwrap().marked).await;
    let marked_at = dog.recorded().feeds;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(dog.recorded().feeds <= marked_at + 1, "no feed once marked");
    let _ = stop.send(());
    run.await.unwrap().unwrap();
    kube.shutdown().await;
}

/// The term survives a crash: a successor started from the kept state refuses the
/// acknowledgements of a leader older than one its predecessor took (the model's
/// search with a crash and an old leader, `an_old_leader_feeds_a_successor_...`: a
/// successor that took no term fed, cut off with the old leader, while the leader
/// released its node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_refuses_the_old_term_its_predecessor_left_behind() {
    let (_old_switch, old) = Leadership::switched(true);
    let (kube, old_hb, pin) = world("worker-1", hello::AUDIENCE, old.clone()).await;
    let (new_switch, new) = Leadership::switched(true);
    new_switch.set(false);
    new_switch.set(true);
    let new_hb = replica(&kube, old_hb.addr().port(), new.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "token-worker-1\n").unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let dog = RecordingWatchdog::new("iTCO_wdt", Duration::from_secs(10), false);
    let beating_to = |replica: std::net::SocketAddr| {
        let mut opts = options(&old_hb, pin, &token, dog.clone());
        opts.nodefence = format!("https://localhost:{}", old_hb.addr().port())
            .parse()
            .unwrap();
        opts.state_dir = Some(state.clone());
        opts.replicas = Some(vec![replica]);
        opts
    };
    // First it beats to the new leader only, and takes term 2.
    let (status, _stop, run) = spawn(beating_to(new_hb.addr()));
    eventually("term 2 taken", || status.lock().unwrap().term_seen == 2).await;
    assert_eq!(
        nodefence::companion::state::load(&state)
            .unwrap()
            .unwrap()
            .term_seen,
        2,
        "the term is kept"
    );
    // It crashes; its successor reaches the old leader alone.
    run.abort();
    let _ = run.await;
    assert!(old.is_leader(), "the old one still believes it leads");
    let (status, stop, run) = spawn(beating_to(old_hb.addr()));
    // Its beats name term 2: the old leader stands down at the first, or its
    // acknowledgements as the leader of term 1 are refused. Either way none is taken.
    eventually("acknowledged", || status.lock().unwrap().acknowledged >= 10).await;
    let s = status.lock().unwrap().clone();
    assert_eq!(s.term_seen, 2, "{s:?}");
    assert!(
        s.arm_wanted.is_none() && !s.feeding,
        "an old leader's acknowledgement was taken: {s:?}"
    );
    eventually("the old leader stood down", || !old.is_leader()).await;
    let _ = stop.send(());
    let _ = run.await;
    kube.shutdown().await;
}

/// A dry run decides as if it led, but its listener acknowledges no beat as the
/// leader's (issue 52: a dry-run replica behind the Service fed a node cut from the
/// leader, which the leader then released while it ran).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_does_not_lead_never_feeds_a_companion() {
    // The dry run's listener is given `Leadership::never()` (src/daemon).
    let (kube, hb, pin) = world("worker-1", hello::AUDIENCE, Leadership::never()).await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "token-worker-1\n").unwrap();
    let dog = RecordingWatchdog::new("iTCO_wdt", Duration::from_secs(10), false);
    let (status, stop, run) = spawn(options(&hb, pin, &token, dog.clone()));
    eventually("acknowledged", || status.lock().unwrap().acknowledged >= 5).await;
    let s = status.lock().unwrap().clone();
    assert!(!s.feeding && s.term_seen == 0, "{s:?}");
    assert_eq!(dog.recorded().feeds, 0);
    hb.set_marked("worker-1", true);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !status.lock().unwrap().marked,
        "a standby's mark is no mark"
    );
    let _ = stop.send(());
    run.await.unwrap().unwrap();
    kube.shutdown().await;
}
