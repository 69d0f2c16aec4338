//! Unit tests of the monitor's passes: their spacing over the interval, their fixed
//! rate, their concurrency bound, and identity re-checks during a pass.
#![allow(clippy::unwrap_used)]

use super::*;
use crate::power::{PowerReading, PowerState};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts the checks in flight and the most seen at once.
#[derive(Default)]
struct Counting {
    now: AtomicUsize,
    most: AtomicUsize,
}

struct Slow(Arc<Counting>);

#[async_trait::async_trait]
impl PowerDriver for Slow {
    fn driver_name(&self) -> &'static str {
        "slow"
    }
    fn endpoint(&self) -> String {
        "nowhere".into()
    }
    async fn status(&self) -> Result<PowerReading, PowerError> {
        let n = self.0.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.0.most.fetch_max(n, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(5)).await;
        self.0.now.fetch_sub(1, Ordering::SeqCst);
        Ok(PowerReading {
            state: PowerState::On,
            at: crate::clock::now(),
            latency: Duration::ZERO,
        })
    }
    async fn power_off(&self) -> Result<(), PowerError> {
        Err(PowerError::unsupported("read-only"))
    }
    async fn power_on(&self) -> Result<(), PowerError> {
        Err(PowerError::unsupported("read-only"))
    }
    async fn reboot(&self) -> Result<(), PowerError> {
        Err(PowerError::unsupported("read-only"))
    }
}

#[tokio::test]
async fn a_pass_keeps_at_most_its_concurrency_in_flight_and_answers_for_every_node() {
    let counting = Arc::new(Counting::default());
    let entries: Vec<Entry> = (0..60)
        .map(|i| {
            let driver: Arc<dyn PowerDriver> = Arc::new(Slow(counting.clone()));
            (format!("node-{i:02}"), Ok(driver))
        })
        .collect();
    let outcomes = probe(entries, Probe::PowerAndIdentity, 4, Duration::ZERO).await;
    assert_eq!(counting.most.load(Ordering::SeqCst), 4);
    let nodes: Vec<&str> = outcomes.iter().map(|o| o.node.as_str()).collect();
    let expected: Vec<String> = (0..60).map(|i| format!("node-{i:02}")).collect();
    assert_eq!(nodes, expected, "every node once, in name order");
    assert!(outcomes.iter().all(|o| matches!(o.power, Some(Ok(())))));
}

#[test]
fn a_pass_is_spread_over_the_whole_interval_and_a_small_one_is_quick() {
    let s = Duration::from_secs;
    // 5,000 BMCs every 5 min: one check every 60 ms, the pass as long as the interval
    // (not half of it, not a burst).
    assert_eq!(spacing(s(300), 5000), Duration::from_millis(60));
    for nodes in [3000, 5000, 20_000] {
        let pass = spacing(s(300), nodes) * u32::try_from(nodes).unwrap();
        assert!(pass > s(299) && pass <= s(300), "{nodes} nodes: {pass:?}");
    }
    // A rack: 100 ms apart at most, the pass over in 2 s.
    assert_eq!(spacing(s(300), 20), MAX_SPACING);
    assert_eq!(spacing(s(300), 20) * 20, s(2));
    // A short interval shortens the spacing with it.
    assert_eq!(spacing(s(10), 1000), Duration::from_millis(10));
    assert_eq!(spacing(s(300), 0), MAX_SPACING);
    assert_eq!(spacing(Duration::ZERO, 10), Duration::ZERO);
}

/// When each node was read and asked its machine's identity, on the (paused) clock.
#[derive(Default)]
struct Log {
    reads: std::sync::Mutex<Vec<(String, Duration)>>,
    identities: std::sync::Mutex<Vec<(String, Duration)>>,
}

impl Log {
    fn reads(&self) -> Vec<(String, Duration)> {
        self.reads.lock().unwrap().clone()
    }
    fn identities(&self) -> Vec<(String, Duration)> {
        self.identities.lock().unwrap().clone()
    }
}

const UUID_A: &str = "4c4c4544-0000-4000-8000-00000000000a";
const UUID_B: &str = "4c4c4544-0000-4000-8000-00000000000b";

/// A BMC whose reading takes `takes`, logging when it is read; its machine is UUID_A.
struct Clocked {
    node: String,
    base: tokio::time::Instant,
    takes: Duration,
    log: Arc<Log>,
}

#[async_trait::async_trait]
impl PowerDriver for Clocked {
    fn driver_name(&self) -> &'static str {
        "clocked"
    }
    fn endpoint(&self) -> String {
        "nowhere".into()
    }
    async fn status(&self) -> Result<PowerReading, PowerError> {
        let at = self.base.elapsed();
        self.log.reads.lock().unwrap().push((self.node.clone(), at));
        tokio::time::sleep(self.takes).await;
        Ok(PowerReading {
            state: PowerState::On,
            at: crate::clock::now(),
            latency: self.takes,
        })
    }
    async fn machine_identity(&self) -> Result<MachineIdentity, PowerError> {
        let at = self.base.elapsed();
        self.log
            .identities
            .lock()
            .unwrap()
            .push((self.node.clone(), at));
        Ok(MachineIdentity::Uuid(UUID_A.into()))
    }
    async fn power_off(&self) -> Result<(), PowerError> {
        Err(PowerError::unsupported("read-only"))
    }
    async fn power_on(&self) -> Result<(), PowerError> {
        Err(PowerError::unsupported("read-only"))
    }
    async fn reboot(&self) -> Result<(), PowerError> {
        Err(PowerError::unsupported("read-only"))
    }
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// `nodes` nodes `node-0`... (name order is number order below 10), each read in 5 ms
/// but `slow`'s, which takes the time given.
fn fleet(
    nodes: usize,
    slow: Option<(usize, Duration)>,
    base: tokio::time::Instant,
    log: &Arc<Log>,
) -> Arc<NodeDrivers> {
    Arc::new(
        (0..nodes)
            .map(|i| {
                let takes = match slow {
                    Some((n, takes)) if n == i => takes,
                    _ => ms(5),
                };
                let driver: Arc<dyn PowerDriver> = Arc::new(Clocked {
                    node: format!("node-{i}"),
                    base,
                    takes,
                    log: log.clone(),
                });
                (format!("node-{i}"), Ok(driver))
            })
            .collect(),
    )
}

fn known(nodes: usize, uuid: &str) -> NodeIdentities {
    (0..nodes)
        .map(|i| {
            (
                format!("node-{i}"),
                NodeIdentity {
                    system_uuid: Some(uuid.into()),
                    provider_id: None,
                },
            )
        })
        .collect()
}

/// Each `(node, at)` within 2 ms of the expected time (the paused clock advances to
/// the timer wheel's milliseconds).
fn assert_near(seen: &[(String, Duration)], expected: &[(String, Duration)]) {
    assert_eq!(
        seen.len(),
        expected.len(),
        "{seen:?}\nexpected {expected:?}"
    );
    for ((node, at), (want_node, want_at)) in seen.iter().zip(expected) {
        assert_eq!(node, want_node, "{seen:?}");
        assert!(
            at.abs_diff(*want_at) <= ms(2),
            "{node} at {at:?}, expected {want_at:?}: {seen:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn passes_start_at_a_fixed_rate_each_spread_over_the_interval() {
    let base = tokio::time::Instant::now();
    let log = Arc::new(Log::default());
    let (_tx, identities) = watch::channel(NodeIdentities::new());
    // 10 nodes every 500 ms: one read every 50 ms, and the next pass 500 ms after the
    // last one started (not 500 ms after it ended, not all of them at once).
    let monitor = tokio::spawn(run(
        fleet(10, None, base, &log),
        ms(500),
        Arc::new(Metrics::new()),
        None,
        4,
        identities,
    ));
    tokio::time::sleep(ms(1490)).await;
    monitor.abort();
    let expected: Vec<(String, Duration)> = (0..30u64)
        .map(|i| (format!("node-{}", i % 10), ms(50 * i)))
        .collect();
    assert_near(&log.reads(), &expected);
}

#[tokio::test(start_paused = true)]
async fn a_pass_that_overruns_is_followed_at_once_and_still_paced() {
    let base = tokio::time::Instant::now();
    let log = Arc::new(Log::default());
    let (_tx, identities) = watch::channel(NodeIdentities::new());
    // The last node's reading takes 300 ms: the first pass ends at 750 ms, past the
    // second's turn (500 ms). The second starts then, one read every 50 ms again.
    let monitor = tokio::spawn(run(
        fleet(10, Some((9, ms(300))), base, &log),
        ms(500),
        Arc::new(Metrics::new()),
        None,
        4,
        identities,
    ));
    tokio::time::sleep(ms(1240)).await;
    monitor.abort();
    let first = (0..10u64).map(|i| (format!("node-{i}"), ms(50 * i)));
    let second = (0..10u64).map(|i| (format!("node-{i}"), ms(750 + 50 * i)));
    let expected: Vec<(String, Duration)> = first.chain(second).collect();
    assert_near(&log.reads(), &expected);
}

#[tokio::test(start_paused = true)]
async fn an_identity_change_during_a_pass_is_checked_at_once_for_the_nodes_it_reached() {
    let base = tokio::time::Instant::now();
    let log = Arc::new(Log::default());
    let (tx, identities) = watch::channel(known(10, UUID_A));
    let monitor = tokio::spawn(run(
        fleet(10, None, base, &log),
        ms(500),
        Arc::new(Metrics::new()),
        None,
        4,
        identities,
    ));
    // Every Node's systemUUID changes 220 ms into the first pass: nodes 0–4 were read
    // and are re-checked at once (from the drivers' remembered identity); nodes 5–9
    // are left to their turn (no burst of requests to BMCs never read).
    tokio::time::sleep(ms(220)).await;
    tx.send(known(10, UUID_B)).unwrap();
    tokio::time::sleep(ms(270)).await;
    monitor.abort();
    // Each check asks its identity when its reading ends (5 ms after its turn).
    let mut expected: Vec<(String, Duration)> = (0..5u64)
        .map(|i| (format!("node-{i}"), ms(50 * i + 5)))
        .collect();
    expected.extend((0..5u64).map(|i| (format!("node-{i}"), ms(220))));
    expected.extend((5..10u64).map(|i| (format!("node-{i}"), ms(50 * i + 5))));
    assert_near(&log.identities(), &expected);
}
