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

use std::cell::Cell;
use std::time::SystemTime;

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
    use std::time::Duration;

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
}
