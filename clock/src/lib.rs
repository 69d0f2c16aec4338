//! The wall clock nodefence and its mocks read, in one place so that a simulation can
//! replace it.
//!
//! In production [`now`] is `SystemTime::now()`. The whole-system simulation runs the
//! daemon, the fake API server and its simulated kubelets on one thread, in a tokio
//! runtime whose time is paused; [`virtualize`] makes [`now`] on that thread follow
//! tokio's virtual time from a fixed start, so every timestamp (Lease renewals, Off
//! readings, proofs) moves with the timers that wait for it and thousands of fault
//! schedules run in minutes. It is thread-local: tests running beside it in the same
//! process keep the real clock.
//!
//! [`since_boot`] is `CLOCK_BOOTTIME`: the time since the machine booted, the time it
//! was suspended included (`CLOCK_MONOTONIC`, `Instant`'s and tokio's, stops while
//! the machine sleeps). A lease measured on it alone ends for a replica whose machine
//! was suspended; a companion's answers go stale across a suspend. On a virtualized
//! thread it follows tokio's virtual time too.

use std::cell::Cell;
use std::time::{Duration, SystemTime};

thread_local! {
    static VIRTUAL: Cell<Option<(SystemTime, tokio::time::Instant)>> = const { Cell::new(None) };
}

/// The current wall-clock time: real, or virtual on a thread [`virtualize`]d.
pub fn now() -> SystemTime {
    match VIRTUAL.with(Cell::get) {
        Some((start, at)) => start + tokio::time::Instant::now().saturating_duration_since(at),
        None => SystemTime::now(),
    }
}

/// The time since the machine booted, its suspends included (`CLOCK_BOOTTIME`); on a
/// [`virtualize`]d thread, tokio's virtual time since then.
pub fn since_boot() -> Duration {
    match VIRTUAL.with(Cell::get) {
        Some((_, at)) => tokio::time::Instant::now().saturating_duration_since(at),
        None => boottime(),
    }
}

#[cfg(target_os = "linux")]
fn boottime() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    // The kernel's readings are never negative, and nanoseconds are below 10^9.
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// Elsewhere, the monotonic clock (a suspend is not counted there).
#[cfg(not(target_os = "linux"))]
fn boottime() -> Duration {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    ORIGIN.get_or_init(std::time::Instant::now).elapsed()
}

/// Makes [`now`] on this thread read `start` plus the tokio time elapsed since this
/// call, until the guard is dropped. Call it inside the (paused, current-thread)
/// runtime the simulation runs on.
#[must_use = "the clock is real again once the guard is dropped"]
pub fn virtualize(start: SystemTime) -> VirtualClock {
    let previous = VIRTUAL.with(|v| v.replace(Some((start, tokio::time::Instant::now()))));
    VirtualClock { previous }
}

/// Restores the clock this thread had before [`virtualize`] when dropped.
#[derive(Debug)]
pub struct VirtualClock {
    previous: Option<(SystemTime, tokio::time::Instant)>,
}

impl Drop for VirtualClock {
    fn drop(&mut self) {
        VIRTUAL.with(|v| v.set(self.previous));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_virtual_clock_moves_with_paused_time_and_only_on_its_thread() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let guard = virtualize(start);
        assert_eq!(now(), start);
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(now(), start + Duration::from_secs(3600));
        let elsewhere = std::thread::spawn(now).join().unwrap_or(start);
        assert!(elsewhere > start + Duration::from_secs(365 * 24 * 3600));
        drop(guard);
        assert!(now() > start + Duration::from_secs(365 * 24 * 3600));
    }

    #[test]
    fn the_time_since_boot_runs_with_the_monotonic_clock_here() {
        let (boot, instant) = (since_boot(), std::time::Instant::now());
        std::thread::sleep(Duration::from_millis(20));
        let (slept, elapsed) = (since_boot() - boot, instant.elapsed());
        assert!(slept >= Duration::from_millis(20), "{slept:?}");
        assert!(
            slept <= elapsed + Duration::from_millis(5),
            "{slept:?} {elapsed:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_time_since_boot_is_virtual_where_the_clock_is() {
        let guard = virtualize(SystemTime::UNIX_EPOCH);
        let at = since_boot();
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(since_boot() - at, Duration::from_secs(600));
        drop(guard);
    }
}
