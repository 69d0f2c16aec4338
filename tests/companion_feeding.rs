//! What the companion's feeding may wait on, and what it refuses, end to end
//! (nodefence's listener and the real `companion::run`, a watchdog in memory):
//! a name lookup that hangs delays no feed (issue 52, item 1); a driver a crash would
//! stop is refused (item 2); a feed that lands later than the allowance after its
//! decision is never repeated on the answer it rested on (item 7).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nodefence::cluster::leader::Leadership;
use nodefence::companion::Resolver;
use nodefence::heartbeat::hello;
use nodefence::watchdog::device::{
    DeviceInfo, Disarmed, OPTION_SET_TIMEOUT, RecordingWatchdog, Watchdog,
};
use nodefence::watchdog::wire::WatchdogState;

use crate::heartbeat::{eventually, options, spawn, world};

fn token(dir: &tempfile::TempDir, node: &str) -> std::path::PathBuf {
    let token = dir.path().join("token");
    std::fs::write(&token, format!("token-{node}\n")).unwrap();
    token
}

/// The replicas' name is looked up through a resolver that answers once (the first
/// hello) and never again, as a cluster DNS that stopped answering: the companion
/// keeps beating to the replica it knows and feeds its watchdog without a gap. (The
/// companion of 2026-11 awaited that lookup between two feeds, and in a pod a lookup
/// against a silent DNS lasts tens of seconds: every armed machine was reset.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_lookup_that_never_answers_delays_no_feed() {
    let (kube, hb, pin) = world("worker-1", hello::AUDIENCE, Leadership::always()).await;
    let dir = tempfile::tempdir().unwrap();
    let dog = RecordingWatchdog::new("iTCO_wdt", Duration::from_secs(10), false);
    let mut opts = options(&hb, pin, &token(&dir, "worker-1"), dog.clone());
    // Under a name (the certificate is for localhost too), looked up for real.
    opts.nodefence = format!("https://localhost:{}", hb.addr().port())
        .parse()
        .unwrap();
    let replica = hb.addr();
    let lookups = Arc::new(AtomicU64::new(0));
    let counted = lookups.clone();
    opts.resolver = Resolver::new(move |_, _| {
        let first = counted.fetch_add(1, Ordering::SeqCst) == 0;
        Box::pin(async move {
            if first {
                Ok(vec![replica])
            } else {
                std::future::pending().await
            }
        })
    });
    let (status, stop, run) = spawn(opts);
    eventually("acknowledged and fed", || {
        status.lock().unwrap().acknowledged >= 3 && dog.recorded().feeds >= 3
    })
    .await;
    assert!(
        lookups.load(Ordering::SeqCst) >= 2,
        "the replicas' name was looked up again (and hangs)"
    );
    let (fed, acknowledged) = (dog.recorded().feeds, status.lock().unwrap().acknowledged);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let seen = dog.recorded();
    assert!(
        seen.feeds >= fed + 20,
        "fed every 100 ms while the lookup hangs: {} feeds in 3 s",
        seen.feeds - fed
    );
    assert!(
        seen.longest_gap < Duration::from_millis(500),
        "the watchdog went unfed for {:?}",
        seen.longest_gap
    );
    assert!(status.lock().unwrap().acknowledged > acknowledged + 10);
    stop.send(()).unwrap();
    assert_eq!(run.await.unwrap().unwrap(), Some(Disarmed::Stopped));
    kube.shutdown().await;
}

/// A driver without `WDIOF_MAGICCLOSE` stops its timer on any close, the kernel's
/// close of a killed companion included: a silent companion would not mean a reset
/// machine. It is refused (the companion beats without a watchdog, and the leader
/// never releases on one), unless the kernel's `nowayout` is set for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_a_crash_would_stop_is_refused_unless_nowayout_is_set() {
    for nowayout in [false, true] {
        let (kube, hb, pin) = world("worker-1", hello::AUDIENCE, Leadership::always()).await;
        let dir = tempfile::tempdir().unwrap();
        let dog = RecordingWatchdog::new("wdat_wdt", Duration::from_secs(10), nowayout)
            .with_options(OPTION_SET_TIMEOUT);
        let (status, stop, run) = spawn(options(&hb, pin, &token(&dir, "worker-1"), dog.clone()));
        eventually("acknowledged", || status.lock().unwrap().acknowledged >= 5).await;
        let beat = hb
            .with_table(|t| t.companion("worker-1").map(|c| c.watchdog))
            .unwrap();
        if nowayout {
            assert!(matches!(beat, WatchdogState::Armed { .. }), "{beat:?}");
            assert!(status.lock().unwrap().armed.is_some());
            eventually("fed", || dog.recorded().feeds > 0).await;
        } else {
            assert_eq!(beat, WatchdogState::None, "refused: no watchdog reported");
            let s = status.lock().unwrap().clone();
            assert!(s.armed.is_none() && s.feeding, "{s:?}");
            assert_eq!(dog.recorded().feeds, 0, "never fed");
            assert!(
                dog.recorded().disarmed,
                "closed at once, with the magic close"
            );
        }
        stop.send(()).unwrap();
        run.await.unwrap().unwrap();
        kube.shutdown().await;
    }
}

/// A watchdog whose feed number `stall_at` takes `stall` (a starved CPU, a write
/// blocked on a busy BMC), calling `on_stall` as it begins.
struct StallingWatchdog {
    inner: RecordingWatchdog,
    stall_at: u64,
    stall: Duration,
    on_stall: Box<dyn Fn() + Send + Sync>,
    feeds: Arc<AtomicU64>,
    /// Feeds after the stall's.
    after: Arc<AtomicU64>,
    stalled: Arc<AtomicBool>,
}

impl Watchdog for StallingWatchdog {
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }
    fn nowayout(&self) -> Option<bool> {
        self.inner.nowayout()
    }
    fn granted(&self) -> Duration {
        self.inner.granted()
    }
    fn feed(&mut self) -> std::io::Result<()> {
        let n = self.feeds.fetch_add(1, Ordering::SeqCst) + 1;
        if self.stalled.load(Ordering::SeqCst) {
            self.after.fetch_add(1, Ordering::SeqCst);
        }
        if n == self.stall_at {
            (self.on_stall)();
            std::thread::sleep(self.stall);
            self.stalled.store(true, Ordering::SeqCst);
        }
        self.inner.feed()
    }
    fn disarm(self: Box<Self>) -> std::io::Result<Disarmed> {
        Box::new(self.inner).disarm()
    }
}

/// The leader stops leading as a feed stalls for 700 ms (past the 500 ms
/// allowance): the answers the companion held when it decided that feed were given
/// before the stall ended, and it never feeds on them again. Without the check it
/// fed on for about the isolation timeout after the last acknowledgement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_that_stalls_past_the_allowance_is_not_repeated_on_its_answer() {
    let (switch, leadership) = Leadership::switched(true);
    let switch = Arc::new(Mutex::new(switch));
    let (kube, hb, pin) = world("worker-1", hello::AUDIENCE, leadership).await;
    let dir = tempfile::tempdir().unwrap();
    let feeds = Arc::new(AtomicU64::new(0));
    let after = Arc::new(AtomicU64::new(0));
    let stalled = Arc::new(AtomicBool::new(false));
    let lose = switch.clone();
    let dog = StallingWatchdog {
        inner: RecordingWatchdog::new("iTCO_wdt", Duration::from_secs(10), false),
        stall_at: 10,
        stall: Duration::from_millis(700),
        on_stall: Box::new(move || lose.lock().unwrap().set(false)),
        feeds: feeds.clone(),
        after: after.clone(),
        stalled: stalled.clone(),
    };
    let mut opts = options(
        &hb,
        pin,
        &token(&dir, "worker-1"),
        RecordingWatchdog::new("unused", Duration::from_secs(10), false),
    );
    opts.watchdog = nodefence::companion::WatchdogChoice::Given(Box::new(dog));
    let (status, stop, run) = spawn(opts);
    eventually("the stall over", || stalled.load(Ordering::SeqCst)).await;
    // Well within the isolation timeout (2 s) of the last leader's acknowledgement.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let s = status.lock().unwrap().clone();
    assert_eq!(s.stalls, 1, "{s:?}");
    assert_eq!(
        after.load(Ordering::SeqCst),
        0,
        "fed again on an answer held before the stall ended"
    );
    assert!(!s.feeding, "{s:?}");
    // The leader back: fresh answers feed it again.
    switch.lock().unwrap().set(true);
    eventually("fed on fresh answers", || after.load(Ordering::SeqCst) > 0).await;
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
    kube.shutdown().await;
}
