//! Simulated time, and how the controllers wait.
//!
//! Objects carry real wall-clock timestamps (nodefence compares them with its own
//! clock); only the *durations* the simulated components wait for are scaled by
//! `speed`. A [`Clock`] converts between the two: a controller that must wait 300
//! simulated seconds sleeps `300 / speed` real ones, and "how long ago" questions are
//! answered in simulated time from a monotonic [`Instant`].
//!
//! Controllers do not poll blindly: [`pause`] returns early when a write to a type
//! they watch reaches the store (as an informer event would wake the real one), when
//! the simulation shuts down, or when their next deadline comes.

use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use super::super::resources::{NAMESPACES, ResourceType};
use super::super::store::{Store, StoreEvent};

/// Shortest real sleep of a periodic loop, so high speeds do not spin the CPU.
const MIN_REAL_TICK: Duration = Duration::from_millis(2);

/// Converts simulated durations to real ones and back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Clock {
    speed: f64,
}

impl Clock {
    /// A clock running `speed` times faster than real time (1.0 when not finite and
    /// positive).
    pub fn new(speed: f64) -> Self {
        let speed = if speed.is_finite() && speed > 0.0 {
            speed
        } else {
            1.0
        };
        Self { speed }
    }

    /// The real duration of a simulated one.
    pub fn real(&self, sim: Duration) -> Duration {
        Duration::try_from_secs_f64(sim.as_secs_f64() / self.speed).unwrap_or(Duration::MAX)
    }

    /// A periodic loop's real sleep for a simulated period (never below 2ms).
    pub fn tick(&self, sim: Duration) -> Duration {
        self.real(sim).max(MIN_REAL_TICK)
    }

    /// Simulated time elapsed since `start`.
    pub fn since(&self, start: Instant) -> Duration {
        let real = Instant::now().saturating_duration_since(start);
        Duration::try_from_secs_f64(real.as_secs_f64() * self.speed).unwrap_or(Duration::MAX)
    }

    /// The instant `sim` simulated time from now.
    pub fn after(&self, sim: Duration) -> Instant {
        let now = Instant::now();
        now.checked_add(self.real(sim))
            .unwrap_or(now + Duration::from_secs(86_400 * 365))
    }

    /// Simulated time left until `deadline` (zero when past).
    pub fn until(&self, deadline: Instant) -> Duration {
        let real = deadline.saturating_duration_since(Instant::now());
        Duration::try_from_secs_f64(real.as_secs_f64() * self.speed).unwrap_or(Duration::MAX)
    }
}

/// The simulation-wide stop signal.
#[derive(Debug, Clone)]
pub struct Shutdown(watch::Receiver<bool>);

impl Shutdown {
    pub fn new(rx: watch::Receiver<bool>) -> Self {
        Self(rx)
    }

    pub fn is_set(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once shutdown was requested (or its sender is gone).
    pub async fn wait(&mut self) {
        loop {
            if *self.0.borrow_and_update() {
                return;
            }
            if self.0.changed().await.is_err() {
                return;
            }
        }
    }
}

/// Wakes a controller when one of the types it watches is written.
pub struct Wake {
    rx: broadcast::Receiver<StoreEvent>,
    kinds: Vec<ResourceType>,
}

impl Wake {
    pub fn new(store: &Store, kinds: &[ResourceType]) -> Self {
        let rx = match store.subscribe_from(store.resource_version()) {
            Ok((_, rx)) => rx,
            Err(_) => store.list_and_subscribe(NAMESPACES, None).2,
        };
        Self {
            rx,
            kinds: kinds.to_vec(),
        }
    }

    /// Resolves at the next write of a watched type (or when writes were missed).
    async fn next(&mut self) {
        loop {
            match self.rx.recv().await {
                Ok(e) if self.kinds.contains(&e.resource) => break,
                Ok(_) => continue,
                Err(broadcast::error::RecvError::Lagged(_)) => break,
                Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
            }
        }
        // Everything already queued is covered by the pass that follows.
        while let Ok(_) | Err(broadcast::error::TryRecvError::Lagged(_)) = self.rx.try_recv() {}
    }
}

/// Waits `timeout` (real time), or less when a watched type is written; `false` when
/// the simulation is shutting down.
pub async fn pause(shutdown: &mut Shutdown, wake: Option<&mut Wake>, timeout: Duration) -> bool {
    if shutdown.is_set() {
        return false;
    }
    match wake {
        Some(w) => tokio::select! {
            _ = shutdown.wait() => false,
            _ = tokio::time::sleep(timeout) => true,
            _ = w.next() => true,
        },
        None => tokio::select! {
            _ = shutdown.wait() => false,
            _ = tokio::time::sleep(timeout) => true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_both_ways() {
        let c = Clock::new(10.0);
        assert_eq!(c.real(Duration::from_secs(300)), Duration::from_secs(30));
        assert_eq!(Clock::new(f64::NAN), Clock::new(1.0));
        assert_eq!(Clock::new(-3.0), Clock::new(1.0));
        assert_eq!(
            Clock::new(1000.0).tick(Duration::from_millis(100)),
            MIN_REAL_TICK
        );
    }
}
