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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

/// One stretch of holding the Lease without a gap: its number (counted by this
/// process's elector) and how long the last renewal keeps it valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    term: u64,
    until: Instant,
}

/// Shared view of whether this replica leads. Cheap to clone.
///
/// A view taken with [`Leadership::this_term`] leads only in the term it was taken
/// in, and only until its [`TermScope`] is dropped: an action dispatched in one term
/// must not go on in the next one, even when this same process won the Lease again
/// (seed 4252: a ForceOff decided in one term, sent 10 s later in the next, after
/// the next term's own ForceOff had already gone out).
#[derive(Debug, Clone)]
pub struct Leadership {
    valid_until: watch::Receiver<Option<Held>>,
    scope: Option<Scope>,
}

#[derive(Debug, Clone)]
struct Scope {
    term: Option<u64>,
    open: Arc<AtomicBool>,
}

/// Ends the term of the views [`Leadership::this_term`] made, when dropped.
#[derive(Debug)]
pub struct TermScope(Arc<AtomicBool>);

impl Drop for TermScope {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

impl Leadership {
    /// True only while the last renewal is recent enough (and, for a view of one
    /// term, while that term lasts).
    pub fn is_leader(&self) -> bool {
        self.valid_until.borrow().is_some_and(|held| {
            Instant::now() < held.until
                && self.scope.as_ref().is_none_or(|scope| {
                    scope.term == Some(held.term) && scope.open.load(Ordering::SeqCst)
                })
        })
    }

    /// A view that leads only in the current term (none when this replica does not
    /// lead now) and only until the returned scope is dropped.
    pub fn this_term(&self) -> (TermScope, Leadership) {
        let term = (*self.valid_until.borrow())
            .filter(|held| Instant::now() < held.until)
            .map(|held| held.term);
        let open = Arc::new(AtomicBool::new(true));
        (
            TermScope(open.clone()),
            Leadership {
                valid_until: self.valid_until.clone(),
                scope: Some(Scope { term, open }),
            },
        )
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

    /// The leadership `valid_until` says (the elector's or a switch's channel).
    fn watching(valid_until: watch::Receiver<Option<Held>>) -> Self {
        Self {
            valid_until,
            scope: None,
        }
    }

    /// A leadership never held (a standby, in tests).
    pub fn never() -> Self {
        let (_tx, rx) = watch::channel(None);
        Self::watching(rx)
    }

    /// A leadership that is always held (for `--dry-run` and single-replica tests).
    pub fn always() -> Self {
        let (_tx, rx) = watch::channel(Some(Held {
            term: 1,
            until: far_future(),
        }));
        Self::watching(rx)
    }

    /// A leadership held or not as its switch says (tests: a leader that fails over
    /// and comes back). Each time it is switched on is a new term.
    pub fn switched(held: bool) -> (LeadershipSwitch, Self) {
        let (tx, rx) = watch::channel(held.then(|| Held {
            term: 1,
            until: far_future(),
        }));
        let switch = LeadershipSwitch {
            tx,
            last_term: AtomicU64::new(1),
        };
        (switch, Self::watching(rx))
    }
}

/// Turns a [`Leadership::switched`] on and off.
#[derive(Debug)]
pub struct LeadershipSwitch {
    tx: watch::Sender<Option<Held>>,
    /// The last term it started: each switch-on starts the next.
    last_term: AtomicU64,
}

impl LeadershipSwitch {
    pub fn set(&self, held: bool) {
        self.tx.send_if_modified(|now| {
            let next = match (*now, held) {
                (Some(h), true) => Some(h),
                (None, true) => Some(Held {
                    term: self.last_term.fetch_add(1, Ordering::SeqCst) + 1,
                    until: far_future(),
                }),
                (_, false) => None,
            };
            let changed = *now != next;
            *now = next;
            changed
        });
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
    tx: watch::Sender<Option<Held>>,
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
            Leadership::watching(rx),
        )
    }

    /// A handle that makes [`LeaderElector::run`] release the Lease and return.
    pub fn stopper(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Acquires and renews until stopped; on stop, releases the Lease if held.
    pub async fn run(self) {
        let mut observed: Option<Observed> = None;
        let mut term = 0;
        loop {
            if self.stop.load(Ordering::SeqCst) {
                self.release().await;
                return;
            }
            let attempt_started = Instant::now();
            match self.try_acquire_or_renew(&mut observed).await {
                Ok(true) => {
                    let until = attempt_started + self.timings.renew_deadline;
                    // A renewal after the last one lapsed starts a new term: another
                    // replica may have led in between.
                    let lapsed = self
                        .tx
                        .borrow()
                        .is_none_or(|held| Instant::now() >= held.until);
                    if lapsed {
                        term += 1;
                        tracing::info!(lease = %self.name, identity = %self.identity, term, "became leader");
                    }
                    self.tx.send_replace(Some(Held { term, until }));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_term_view_leads_only_in_the_term_it_was_taken_in() {
        let (switch, leadership) = Leadership::switched(true);
        let (_scope, term) = leadership.this_term();
        assert!(term.is_leader());
        switch.set(true);
        assert!(
            term.is_leader(),
            "a renewal in the same term changes nothing"
        );
        switch.set(false);
        assert!(!term.is_leader());
        switch.set(true);
        assert!(leadership.is_leader(), "the replica leads again");
        assert!(
            !term.is_leader(),
            "an action of the last term must not go on in the next one"
        );
        let (_scope, next) = leadership.this_term();
        assert!(next.is_leader());
    }

    #[test]
    fn a_term_view_stops_leading_when_its_scope_ends() {
        let leadership = Leadership::always();
        let (scope, term) = leadership.this_term();
        let copy = term.clone();
        assert!(copy.is_leader());
        drop(scope);
        assert!(!term.is_leader() && !copy.is_leader());
        assert!(leadership.is_leader());
    }

    #[test]
    fn a_view_taken_while_not_leading_never_leads() {
        let (switch, leadership) = Leadership::switched(false);
        let (_scope, term) = leadership.this_term();
        switch.set(true);
        assert!(leadership.is_leader() && !term.is_leader());
        assert!(!Leadership::never().this_term().1.is_leader());
    }
}
