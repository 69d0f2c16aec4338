//! The watchdog level's arithmetic: how long nodefence waits after the last moment a
//! node could have been told to keep feeding its hardware watchdog, before its machine
//! is certainly reset.
//!
//! Three clocks are involved, and none is trusted to run at the right rate: the
//! companion's monotonic clock (its `isolation_timeout` I), the watchdog's own timer
//! (its granted timeout W) and the leader's monotonic clock (the wait). Each may run
//! fast or slow by up to ρ (`max_clock_drift`). A duration d read on a clock that
//! runs at rate r ∈ [1−ρ, 1+ρ] lasts d / r in real time, so:
//!
//! - the companion's last feed is at most I / (1−ρ) after the last answer it was
//!   given (counted from when it *sent* the request answered);
//! - its watchdog fires at most W / (1−ρ) after that last feed;
//! - a wait of w on the leader's clock lasts at least w / (1+ρ).
//!
//! The leader's wait is therefore `(I + W) × (1+ρ)/(1−ρ)` (the drift margin is the
//! part above I + W), plus a fixed scheduling allowance for the time between the
//! companion's last check and its write to the device. With the defaults (I = 2 s,
//! ρ = 1 %, allowance 500 ms) and a 10 s watchdog: 12 s + 0.2424 s + 0.5 s =
//! 12.742 s. Integer nanoseconds, rounded up: never shorter than the real bound.

use std::fmt;
use std::time::Duration;

/// Parts per million, the unit of [`Timing::max_drift_ppm`].
pub const PPM: u64 = 1_000_000;

/// The default `isolation_timeout`: how long an answer keeps a companion feeding.
pub const DEFAULT_ISOLATION_TIMEOUT: Duration = Duration::from_secs(2);
/// The default `max_clock_drift`: 1 % (10,000 ppm), far above a crystal's 100 ppm
/// and NTP's 500 ppm slew, to cover watchdog timers of lesser quality.
pub const DEFAULT_MAX_DRIFT_PPM: u64 = 10_000;
/// The default scheduling allowance.
pub const DEFAULT_SCHEDULING_ALLOWANCE: Duration = Duration::from_millis(500);
/// The largest drift accepted (10 %): beyond it no clock is a clock.
pub const MAX_DRIFT_PPM: u64 = 100_000;

/// The timing every companion and the leader agree on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// I: how long after sending a request whose answer says "keep going" the
    /// companion may still feed its watchdog on that answer.
    pub isolation_timeout: Duration,
    /// ρ, in parts per million: how far any of the three clocks may run fast or slow.
    pub max_drift_ppm: u64,
    /// Added to every wait: the time a companion may take between deciding to feed
    /// and the feed reaching the device.
    pub scheduling_allowance: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            isolation_timeout: DEFAULT_ISOLATION_TIMEOUT,
            max_drift_ppm: DEFAULT_MAX_DRIFT_PPM,
            scheduling_allowance: DEFAULT_SCHEDULING_ALLOWANCE,
        }
    }
}

impl Timing {
    /// The wait after the last moment the node could have been told to keep going,
    /// for a watchdog whose granted timeout is `watchdog`.
    pub fn wait(&self, watchdog: Duration) -> Wait {
        let base = self.isolation_timeout.saturating_add(watchdog);
        let rho = u128::from(self.max_drift_ppm.min(MAX_DRIFT_PPM));
        let ppm = u128::from(PPM);
        let base_ns = base.as_nanos();
        // (I + W)(1+ρ)/(1−ρ), rounded up.
        let stretched = (base_ns * (ppm + rho)).div_ceil(ppm - rho);
        let drift_margin = nanos(stretched - base_ns);
        Wait {
            isolation_timeout: self.isolation_timeout,
            watchdog,
            drift_margin,
            scheduling_allowance: self.scheduling_allowance,
            max_drift_ppm: self.max_drift_ppm.min(MAX_DRIFT_PPM),
        }
    }

    /// `d` read on one clock, as the shortest it can be on another: `d × (1−ρ)/(1+ρ)`,
    /// rounded down (a coverage the leader may rely on is never overstated).
    pub fn shrink(&self, d: Duration) -> Duration {
        let rho = u128::from(self.max_drift_ppm.min(MAX_DRIFT_PPM));
        let ppm = u128::from(PPM);
        nanos(d.as_nanos() * (ppm - rho) / (ppm + rho))
    }
}

fn nanos(n: u128) -> Duration {
    let secs = u64::try_from(n / 1_000_000_000).unwrap_or(u64::MAX);
    // The remainder is below 10^9: it fits.
    Duration::new(secs, (n % 1_000_000_000) as u32)
}

/// The wait and its parts, for the Event, `explain` and the release record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    pub isolation_timeout: Duration,
    pub watchdog: Duration,
    /// `(I + W) × ((1+ρ)/(1−ρ) − 1)`, rounded up.
    pub drift_margin: Duration,
    pub scheduling_allowance: Duration,
    pub max_drift_ppm: u64,
}

impl Wait {
    /// The whole wait.
    pub fn total(&self) -> Duration {
        self.isolation_timeout
            .saturating_add(self.watchdog)
            .saturating_add(self.drift_margin)
            .saturating_add(self.scheduling_allowance)
    }
}

impl fmt::Display for Wait {
    /// `isolation 2s + watchdog 10s + drift margin 242.5ms (1.0 %) + allowance 500ms = 12.7425s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "isolation {} + watchdog {} + drift margin {} ({}.{} %) + allowance {} = {}",
            short(self.isolation_timeout),
            short(self.watchdog),
            short(self.drift_margin),
            self.max_drift_ppm / 10_000,
            (self.max_drift_ppm % 10_000) / 1_000,
            short(self.scheduling_allowance),
            short(self.total())
        )
    }
}

/// A duration to the 0.1 ms.
fn short(d: Duration) -> String {
    let tenths_of_ms = d.as_nanos().div_ceil(100_000);
    let ms = tenths_of_ms / 10;
    match (ms % 1000, tenths_of_ms % 10) {
        (0, 0) => format!("{}s", ms / 1000),
        (_, 0) if ms < 1000 => format!("{ms}ms"),
        (_, t) if ms < 1000 => format!("{ms}.{t}ms"),
        _ => format!(
            "{}s",
            trim(&format!(
                "{}.{:03}{}",
                ms / 1000,
                ms % 1000,
                tenths_of_ms % 10
            ))
        ),
    }
}

fn trim(s: &str) -> &str {
    s.trim_end_matches('0').trim_end_matches('.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_wait_with_a_ten_second_watchdog() {
        let wait = Timing::default().wait(Duration::from_secs(10));
        // 12 s × 1.01/0.99 = 12.242424... s: the margin is 242,424,243 ns (rounded up).
        assert_eq!(wait.drift_margin, Duration::from_nanos(242_424_243));
        assert_eq!(
            wait.total(),
            Duration::from_secs(12) + Duration::from_nanos(742_424_243)
        );
        assert_eq!(
            wait.to_string(),
            "isolation 2s + watchdog 10s + drift margin 242.5ms (1.0 %) + allowance 500ms = 12.7425s"
        );
    }

    #[test]
    fn the_wait_covers_the_slowest_companion_and_watchdog_seen_by_the_fastest_leader() {
        for ppm in [0, 1, 100, 10_000, 99_999, MAX_DRIFT_PPM] {
            let timing = Timing {
                isolation_timeout: Duration::from_millis(2_000),
                max_drift_ppm: ppm,
                scheduling_allowance: Duration::ZERO,
            };
            for w in [1, 7, 10, 60, 600] {
                let w = Duration::from_secs(w);
                let wait = timing.wait(w).total().as_nanos();
                let rho = ppm as f64 / PPM as f64;
                // Real time of the leader's wait (fast leader) against the real time
                // the slow companion and slow watchdog may take.
                let leader_real = wait as f64 / (1.0 + rho);
                let node_real = (timing.isolation_timeout + w).as_nanos() as f64 / (1.0 - rho);
                assert!(leader_real + 1.0 >= node_real, "{ppm} ppm, {w:?}");
            }
        }
        // A drift beyond 10 % is taken as 10 %.
        let capped = Timing {
            max_drift_ppm: 900_000,
            ..Timing::default()
        };
        assert_eq!(
            capped.wait(Duration::from_secs(10)).max_drift_ppm,
            MAX_DRIFT_PPM
        );
    }

    #[test]
    fn shrink_never_overstates() {
        let t = Timing::default();
        let d = Duration::from_millis(1500);
        let s = t.shrink(d);
        assert!(s < d);
        // 1.5 s × 0.99/1.01 = 1.470297... s
        assert_eq!(s, Duration::from_nanos(1_470_297_029));
        assert_eq!(t.shrink(Duration::ZERO), Duration::ZERO);
    }
}
