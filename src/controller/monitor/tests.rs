//! Unit tests of the monitor's pass: its spacing and its concurrency bound.
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
fn a_pass_is_spread_over_half_the_interval_and_a_small_one_is_quick() {
    let s = Duration::from_secs;
    // 5,000 BMCs every 5 min: one check every 30 ms, the pass over in 150 s.
    assert_eq!(spacing(s(300), 5000), Duration::from_millis(30));
    // A rack: 50 ms apart at most, the pass over in a second.
    assert_eq!(spacing(s(300), 20), MAX_SPACING);
    // A short interval shortens the spacing with it.
    assert_eq!(spacing(s(10), 1000), Duration::from_millis(5));
    assert_eq!(spacing(s(300), 0), MAX_SPACING);
    assert_eq!(spacing(Duration::ZERO, 10), Duration::ZERO);
}
