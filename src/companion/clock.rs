//! The companion's clock: `CLOCK_BOOTTIME`, which counts the time a suspended
//! machine slept (`CLOCK_MONOTONIC`, the clock of `Instant` and of tokio's timers,
//! does not). Every reading of the feeding rule is taken on it (a beat's sending, an
//! answer's arrival, a feed's decision and its completion), so an answer fresh before
//! a suspend is stale after it, as the real time says; tokio's timers only pace the
//! work and decide nothing.

use std::time::Duration;

/// Readings of `CLOCK_BOOTTIME` ([`crate::clock::since_boot`]): the time since the
/// machine booted. One boot's companions read one clock, so the leader can compare
/// the times in beats of a successor with its predecessor's (a replica whose clock
/// stopped while theirs ran was paused).
#[derive(Debug, Clone, Copy, Default)]
pub struct BootClock;

impl BootClock {
    pub fn start() -> Self {
        Self
    }

    /// The time since the machine booted, its sleep included.
    pub fn now(&self) -> Duration {
        crate::clock::since_boot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_runs_at_the_monotonic_clocks_pace() {
        let clock = BootClock::start();
        let first = clock.now();
        let started = std::time::Instant::now();
        std::thread::sleep(Duration::from_millis(50));
        let slept = clock.now() - first;
        assert!(slept >= Duration::from_millis(50), "{slept:?}");
        // No suspend here: within what the sleep itself took, and a little.
        assert!(
            slept <= started.elapsed() + Duration::from_millis(5),
            "{slept:?}"
        );
    }
}
