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
//!
//! Three more rules make a replica that only *believes* it leads harmless to the
//! companions (issue 52, item 5):
//! - **A fencing token**: each term is named by the resourceVersion of the Lease write
//!   that began it ([`Leadership::fencing_token`]). resourceVersions are etcd's
//!   revisions: one counter for the whole store, only growing (a re-created Lease
//!   gets a larger one; `leaseTransitions` restarts there, and does not change when a
//!   holder takes its own Lease again after a lapse). The leader's acknowledgements
//!   carry it, and a companion refuses a leader's acknowledgement of a term older than
//!   one it has taken. A resourceVersion that is not a number (not etcd) names no
//!   term: the replica then acknowledges no beat as the leader's.
//! - **A clock that counts a suspend**: the renewal's validity is also measured on
//!   `CLOCK_BOOTTIME` ([`crate::clock::since_boot`]): a replica whose machine slept
//!   does not resume leading on a monotonic clock that stopped with it.
//! - **A suspected pause**: what notices that this process stood still while the
//!   others ran (the companions' beats, [`crate::heartbeat::table`]; a beat naming a
//!   newer term) calls [`Leadership::suspect`]: the replica stops leading until a
//!   renewal that began after that.

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
/// process's elector), how long the last renewal keeps it valid, and the term's
/// fencing token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    term: u64,
    until: Instant,
    /// The same deadline on `CLOCK_BOOTTIME` (`None`: none kept, tests' switches).
    boot_until: Option<Duration>,
    /// When the renewal that keeps it valid began (monotonic clock).
    renewed_at: Instant,
    /// The resourceVersion of the write that began the term, when it is a number.
    token: Option<u64>,
}

impl Held {
    fn forever(term: u64) -> Self {
        Self {
            term,
            until: far_future(),
            boot_until: None,
            renewed_at: Instant::now(),
            token: Some(term),
        }
    }

    fn valid(&self) -> bool {
        Instant::now() < self.until
            && self
                .boot_until
                .is_none_or(|until| crate::clock::since_boot() < until)
    }
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
    /// Since when this replica may have stood still ([`Leadership::suspect`]): it
    /// leads again only on a renewal begun after that. Shared by every view.
    suspected: Arc<std::sync::Mutex<Option<Instant>>>,
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
        self.held().is_some()
    }

    /// The term this replica leads in, its fencing token: the same for every replica
    /// and only growing. `None` while it does not lead, or when the Lease's
    /// resourceVersion is not a number.
    pub fn fencing_token(&self) -> Option<u64> {
        self.held().and_then(|held| held.token)
    }

    /// This replica may have stood still (a paused VM, a stopped process) while the
    /// others ran, or heard of a newer term: it does not lead again before a renewal
    /// that begins after now.
    pub fn suspect(&self) {
        let mut suspected = self.suspected.lock().unwrap_or_else(|e| e.into_inner());
        *suspected = Some(Instant::now());
    }

    fn held(&self) -> Option<Held> {
        let held = (*self.valid_until.borrow())?;
        let suspected = *self.suspected.lock().unwrap_or_else(|e| e.into_inner());
        (held.valid()
            && suspected.is_none_or(|at| held.renewed_at > at)
            && self.scope.as_ref().is_none_or(|scope| {
                scope.term == Some(held.term) && scope.open.load(Ordering::SeqCst)
            }))
        .then_some(held)
    }

    /// A view that leads only in the current term (none when this replica does not
    /// lead now) and only until the returned scope is dropped.
    pub fn this_term(&self) -> (TermScope, Leadership) {
        let term = self.held().map(|held| held.term);
        let open = Arc::new(AtomicBool::new(true));
        (
            TermScope(open.clone()),
            Leadership {
                valid_until: self.valid_until.clone(),
                scope: Some(Scope { term, open }),
                suspected: self.suspected.clone(),
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
            suspected: Arc::default(),
        }
    }

    /// A leadership never held (a standby, in tests).
    pub fn never() -> Self {
        let (_tx, rx) = watch::channel(None);
        Self::watching(rx)
    }

    /// A leadership that is always held, in term 1 (for `--dry-run`'s decisions and
    /// single-replica tests; a dry run's companions' listener is given
    /// [`Leadership::never`]: it acknowledges no beat as the leader's).
    pub fn always() -> Self {
        let (_tx, rx) = watch::channel(Some(Held::forever(1)));
        Self::watching(rx)
    }

    /// A leadership held or not as its switch says (tests: a leader that fails over
    /// and comes back). Each time it is switched on is a new term, whose token is its
    /// number.
    pub fn switched(held: bool) -> (LeadershipSwitch, Self) {
        let (tx, rx) = watch::channel(held.then(|| Held::forever(1)));
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
                (None, true) => Some(Held::forever(
                    self.last_term.fetch_add(1, Ordering::SeqCst) + 1,
                )),
                (_, false) => None,
            };
            let changed = *now != next;
            *now = next;
            changed
        });
    }
}

/// The resourceVersion a written Lease came back with (empty when none).
fn version_of(lease: &Lease) -> String {
    lease.metadata.resource_version.clone().unwrap_or_default()
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
        let mut token = None;
        loop {
            if self.stop.load(Ordering::SeqCst) {
                self.release().await;
                return;
            }
            let attempt_started = Instant::now();
            let boot_started = crate::clock::since_boot();
            match self.try_acquire_or_renew(&mut observed).await {
                Ok(Some(version)) => {
                    let until = attempt_started + self.timings.renew_deadline;
                    // A renewal after the last one lapsed starts a new term: another
                    // replica may have led in between. Its token is this write's
                    // resourceVersion.
                    let lapsed = self.tx.borrow().is_none_or(|held| !held.valid());
                    if lapsed {
                        term += 1;
                        token = version.parse::<u64>().ok();
                        tracing::info!(lease = %self.name, identity = %self.identity, term, fencing_token = ?token, "became leader");
                        if token.is_none() {
                            tracing::error!(
                                lease = %self.name,
                                resource_version = %crate::untrusted::field(&version),
                                "the Lease's resourceVersion is not a number, so this term has no \
                                 fencing token: the companions' beats are not acknowledged as the \
                                 leader's (the watchdog level cannot fence)"
                            );
                        }
                    }
                    self.tx.send_replace(Some(Held {
                        term,
                        until,
                        boot_until: Some(boot_started + self.timings.renew_deadline),
                        renewed_at: attempt_started,
                        token,
                    }));
                }
                Ok(None) => {
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

    /// One round. `Ok(Some(resourceVersion))`: we hold the Lease now, and the write
    /// that says so left it at that resourceVersion.
    async fn try_acquire_or_renew(
        &self,
        observed: &mut Option<Observed>,
    ) -> Result<Option<String>, kube::Error> {
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
                    Ok(written) => Ok(Some(version_of(&written))),
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(None),
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
            return Ok(None);
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
            Ok(written) => Ok(Some(version_of(&written))),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(None),
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
    fn each_term_has_its_token_and_a_suspected_replica_leads_again_only_on_a_later_renewal() {
        let (switch, leadership) = Leadership::switched(true);
        assert_eq!(leadership.fencing_token(), Some(1));
        let view = leadership.clone();
        leadership.suspect();
        assert!(!leadership.is_leader() && !view.is_leader(), "every view");
        assert_eq!(leadership.fencing_token(), None);
        // A renewal begun after the suspicion: the next term (a switch's terms are new
        // each time it is switched on).
        switch.set(false);
        std::thread::sleep(Duration::from_millis(2));
        switch.set(true);
        assert!(leadership.is_leader());
        assert_eq!(leadership.fencing_token(), Some(2));
        assert_eq!(Leadership::never().fencing_token(), None);
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
