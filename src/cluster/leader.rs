//! Leader election on a `coordination.k8s.io/v1` Lease, fail-stop.
//!
//! Only the leader may power machines off or release nodes. Two rules make a lost
//! leadership safe:
//! - **Fail-stop**: leadership is valid until the last successful renewal plus
//!   `renew_deadline` (measured on this process's monotonic clock), which is shorter
//!   than `lease_duration`. A replica that cannot renew stops acting before any other
//!   replica may take the Lease over. Every mutation checks [`Leadership::is_leader`]
//!   right before it is sent.
//! - **No clock comparisons across machines**: another holder's Lease is considered
//!   expired only when *we* have seen its record unchanged for `lease_duration`
//!   (as client-go does), never by comparing its renewTime with our clock.
//!
//! Writes use the Lease's resourceVersion, so two candidates racing for it get one
//! 409 Conflict and one success.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;
use tokio::time::Instant;

/// Timings, client-go's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderTimings {
    /// How long a non-renewed Lease keeps others away.
    pub lease_duration: Duration,
    /// Stop acting when no renewal succeeded for this long (< lease_duration).
    pub renew_deadline: Duration,
    /// Pause between attempts to acquire or renew.
    pub retry_period: Duration,
}

impl LeaderTimings {
    /// The short Lease the shipped Deployment passes (6s/4s/1s): a standby takes over
    /// about 7 s after the leader dies (docs/benchmarks.md, leader killed).
    pub const SHIPPED: Self = Self {
        lease_duration: Duration::from_secs(6),
        renew_deadline: Duration::from_secs(4),
        retry_period: Duration::from_secs(1),
    };
}

impl Default for LeaderTimings {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// Shared view of whether this replica leads. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Leadership {
    valid_until: watch::Receiver<Option<Instant>>,
}

impl Leadership {
    /// True only while the last renewal is recent enough.
    pub fn is_leader(&self) -> bool {
        self.valid_until
            .borrow()
            .is_some_and(|until| Instant::now() < until)
    }

    /// Waits until this replica leads.
    pub async fn wait_until_leader(&mut self) {
        loop {
            if self.is_leader() {
                return;
            }
            if self.valid_until.changed().await.is_err() {
                // The elector is gone: never leader again.
                std::future::pending::<()>().await;
            }
        }
    }

    /// A leadership never held (a standby, in tests).
    pub fn never() -> Self {
        let (_tx, rx) = watch::channel(None);
        Self { valid_until: rx }
    }

    /// A leadership that is always held (for `--dry-run` and single-replica tests).
    pub fn always() -> Self {
        let (_tx, rx) = watch::channel(Some(far_future()));
        Self { valid_until: rx }
    }

    /// A leadership held or not as its switch says (tests: a leader that fails over
    /// and comes back).
    pub fn switched(held: bool) -> (LeadershipSwitch, Self) {
        let (tx, rx) = watch::channel(held.then(far_future));
        (LeadershipSwitch(tx), Self { valid_until: rx })
    }
}

/// Turns a [`Leadership::switched`] on and off.
#[derive(Debug)]
pub struct LeadershipSwitch(watch::Sender<Option<Instant>>);

impl LeadershipSwitch {
    pub fn set(&self, held: bool) {
        self.0.send_replace(held.then(far_future));
    }
}

/// A renewal valid for a century.
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600)
}

/// Runs the election for one identity.
pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timings: LeaderTimings,
    tx: watch::Sender<Option<Instant>>,
    stop: Arc<AtomicBool>,
}

/// What this replica last saw of someone else's Lease record, and when.
#[derive(Debug, Clone, PartialEq)]
struct Observed {
    holder: Option<String>,
    renew: Option<String>,
    transitions: Option<i32>,
    at: Instant,
}

impl LeaderElector {
    /// `api` is namespaced where the Lease lives.
    pub fn new(
        api: Api<Lease>,
        name: &str,
        identity: &str,
        timings: LeaderTimings,
    ) -> (Self, Leadership) {
        let (tx, rx) = watch::channel(None);
        (
            Self {
                api,
                name: name.to_string(),
                identity: identity.to_string(),
                timings,
                tx,
                stop: Arc::new(AtomicBool::new(false)),
            },
            Leadership { valid_until: rx },
        )
    }

    /// A handle that makes [`LeaderElector::run`] release the Lease and return.
    pub fn stopper(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Acquires and renews until stopped; on stop, releases the Lease if held.
    pub async fn run(self) {
        let mut observed: Option<Observed> = None;
        loop {
            if self.stop.load(Ordering::SeqCst) {
                self.release().await;
                return;
            }
            let attempt_started = Instant::now();
            match self.try_acquire_or_renew(&mut observed).await {
                Ok(true) => {
                    let until = attempt_started + self.timings.renew_deadline;
                    let was = self.tx.send_replace(Some(until));
                    if was.is_none_or(|w| Instant::now() >= w) {
                        tracing::info!(lease = %self.name, identity = %self.identity, "became leader");
                    }
                }
                Ok(false) => {
                    if self.tx.send_replace(None).is_some() {
                        tracing::warn!(lease = %self.name, "lost leadership: another replica holds the Lease");
                    }
                }
                Err(e) => {
                    // Keep the current deadline: it expires by itself (fail-stop).
                    tracing::warn!(lease = %self.name, error = %e, "leader election: Lease request failed");
                }
            }
            tokio::time::sleep(self.timings.retry_period).await;
        }
    }

    /// One round. Ok(true): we hold the Lease now.
    async fn try_acquire_or_renew(
        &self,
        observed: &mut Option<Observed>,
    ) -> Result<bool, kube::Error> {
        // The process's clock (virtual in the simulation, so its Lease times follow it).
        let now = MicroTime(
            k8s_openapi::jiff::Timestamp::try_from(crate::clock::now())
                .unwrap_or_else(|_| k8s_openapi::jiff::Timestamp::now()),
        );
        let current = match self.api.get_opt(&self.name).await? {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(self.spec(now.clone(), now, 0)),
                };
                return match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                    Err(e) => Err(e),
                };
            }
            Some(l) => l,
        };
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let ours = holder.as_deref() == Some(self.identity.as_str());
        let record = Observed {
            holder: holder.clone(),
            renew: spec.renew_time.as_ref().map(|t| t.0.to_string()),
            transitions: spec.lease_transitions,
            at: Instant::now(),
        };
        let seen_since = match observed {
            Some(o)
                if o.holder == record.holder
                    && o.renew == record.renew
                    && o.transitions == record.transitions =>
            {
                o.at
            }
            _ => {
                *observed = Some(record.clone());
                record.at
            }
        };
        let duration = spec
            .lease_duration_seconds
            .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)))
            .unwrap_or(self.timings.lease_duration);
        let free = holder.is_none() || Instant::now() >= seen_since + duration;
        if !ours && !free {
            return Ok(false);
        }
        let (acquire, transitions) = if ours {
            (
                spec.acquire_time.clone().unwrap_or_else(|| now.clone()),
                spec.lease_transitions.unwrap_or(0),
            )
        } else {
            (now.clone(), spec.lease_transitions.unwrap_or(0) + 1)
        };
        let mut next = current.clone();
        next.spec = Some(self.spec(acquire, now, transitions));
        match self
            .api
            .replace(&self.name, &PostParams::default(), &next)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn spec(&self, acquire: MicroTime, renew: MicroTime, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            // Rounded up: the Lease must never promise others less than we rely on.
            lease_duration_seconds: Some(
                i32::try_from(self.timings.lease_duration.as_millis().div_ceil(1000)).unwrap_or(15),
            ),
            acquire_time: Some(acquire),
            renew_time: Some(renew),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// Gives the Lease up at once (SIGTERM): others need not wait for it to expire.
    async fn release(&self) {
        let held = self.tx.send_replace(None).is_some();
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) if held => tracing::info!(lease = %self.name, "leadership released"),
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(lease = %self.name, error = %e, "could not release the Lease; it expires by itself")
            }
        }
    }
}
