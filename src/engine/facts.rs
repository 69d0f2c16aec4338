//! What the cluster says about a node, reduced to what decisions need.
//!
//! Built by the cluster observer from the Node object and its kubelet Lease; the
//! engine never sees Kubernetes types, so it can be driven by tests and simulations.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::policy::LeaseStaleAfter;
use crate::identity::NodeIdentity;

/// The node's Ready condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    /// `Ready` is False or Unknown since `since` (its lastTransitionTime).
    NotReady {
        since: SystemTime,
    },
}

/// Why a node is left alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exclusion {
    /// Not in the inventory: nodefence has no way to prove anything about it.
    NotInInventory,
    /// Opted out by annotation; nothing overwrites this.
    OptedOut,
    /// A control-plane node and `fence_control_plane = false`.
    ControlPlane,
    /// Cordoned and `skip_cordoned = true`.
    Cordoned,
}

impl Exclusion {
    pub fn as_str(self) -> &'static str {
        match self {
            Exclusion::NotInInventory => "not in the inventory",
            Exclusion::OptedOut => "opted out by annotation",
            Exclusion::ControlPlane => "control-plane node (fence_control_plane = false)",
            Exclusion::Cordoned => "cordoned (skip_cordoned = true)",
        }
    }
}

/// A request that nodefence remediate the node (a `NodeFenceRemediation` made by
/// NodeHealthCheck, a MachineHealthCheck or a person). It makes the node suspect at
/// once and lets a machine that reads On be powered off without waiting for
/// `unhealthy_after` (the requester already waited), but a release still needs a
/// fresh Off proof, the identity proof and every gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The request object's uid: one request is served once (a node it got released
    /// is never made suspect again by it, e.g. after it came back).
    pub uid: String,
    /// Which object, for messages (`NodeFenceRemediation ns/name`).
    pub by: String,
    /// When it was made (its creationTimestamp).
    pub since: SystemTime,
    /// The requester gave up on nodefence (NodeHealthCheck's escalation timeout, the
    /// annotation `remediation.medik8s.io/nhc-timed-out`): no power command is sent
    /// for the node any more while it stands, and it no longer makes the node suspect.
    pub timed_out: bool,
}

/// A companion fallen silent, on nodefence's own clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompanionSilence {
    /// When its last beat arrived: a sign of life, readings must be newer.
    pub last_beat: SystemTime,
    /// When the silence was declared (`last_beat + heartbeat_timeout`). A Lease
    /// renewal seen after it outvotes the silence: the kubelet lives, the companion
    /// does not (or cannot reach nodefence). One seen before it does not: a renewal
    /// sent just before the power went can be seen after the last beat.
    pub declared: SystemTime,
}

/// One node as last observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    pub name: String,
    pub readiness: Readiness,
    /// Last renewTime of its kubelet Lease, if there is one (the kubelet's clock).
    pub lease_renewed: Option<SystemTime>,
    /// When nodefence saw that renewal, by its own clock (`None`: not watched, e.g.
    /// a one-off CLI read). The Lease's age is measured from it, so a kubelet whose
    /// clock runs behind does not look late at every renewal (and one ahead does not
    /// look fresh for longer), as the node lifecycle controller measures it.
    pub lease_seen: Option<SystemTime>,
    /// When nodefence saw the renewTime change to this one, by its own clock; `None`
    /// when it only found it at first sight (its watch's list at start-up, or a new
    /// leader's) or does not watch. Only a renewal seen to happen after a companion's
    /// silence was declared outvotes the silence: a new leader's first sight of an old
    /// renewal is no sign of life.
    pub lease_change_seen: Option<SystemTime>,
    /// Its `leaseDurationSeconds` (the kubelet renews every quarter of it).
    pub lease_duration: Option<Duration>,
    /// Newest `lastHeartbeatTime` among its conditions (the kubelet's status posts).
    pub last_heartbeat: Option<SystemTime>,
    pub control_plane: bool,
    pub opted_out: bool,
    pub cordoned: bool,
    pub in_inventory: bool,
    /// The out-of-service taint nodefence added is on the node.
    pub our_taint: bool,
    /// When nodefence added that taint (its annotation, to the second).
    pub our_taint_added: Option<SystemTime>,
    /// Which machine the node says it runs on (SMBIOS UUID, provider ID), for the
    /// identity cross-check.
    pub identity: NodeIdentity,
    /// The last power-off any replica sent for this node's machine (when, which
    /// attempt), recorded on the Node before it was sent: a new leader does not send
    /// it again within `power_off_retry_after`.
    pub power_off_recorded: Option<(SystemTime, u32)>,
    /// That power-off was sent to the boot the Node reports now: the machine has not
    /// started again since (its signs of life after the command are the same life).
    pub power_off_this_boot: bool,
    /// When nodefence last removed its out-of-service taint from the node (the end
    /// of its last release, recorded on the Node): a request created before it was
    /// served by that release, even if no replica saw the request then.
    pub last_release_ended: Option<SystemTime>,
    /// When this Node object was created (its creationTimestamp): a request made
    /// before it was made for an earlier registration of the name, deleted since.
    pub registered: Option<SystemTime>,
    /// A remediation request for the node, if one stands (the earliest live one).
    /// Boxed: a Node rarely has one, and the facts of 5,000 Nodes are kept.
    pub request: Option<Box<Request>>,
    /// Its companion was beating and has fallen silent for `heartbeat_timeout`
    /// ([`crate::heartbeat`]). `None`: beating, never beat, or stopped cleanly.
    pub companion_silent: Option<CompanionSilence>,
    /// The boot it reports (`status.nodeInfo.bootID`).
    pub boot_id: Option<String>,
    /// It carries nodefence's fencing mark ([`crate::watchdog::mark`]) for the boot it
    /// reports (or one that names no boot).
    pub fencing_marked: bool,
    /// What its Node records of nodefence's release and its check on return
    /// ([`super::returned`]). Boxed: only a released node has any, and the facts of
    /// 5,000 Nodes are kept.
    pub returned: Option<Box<ReturnFacts>>,
}

/// What a Node records of nodefence's release and of its check on return.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReturnFacts {
    /// The boot the release nodefence's taint stands for ended, as recorded with the
    /// taint.
    pub released_boot: Option<super::returned::EndedBoot>,
    /// nodefence recorded that the node's return contradicted that release's proof.
    pub proof_contradicted: bool,
    /// An operator checked the release and lets the node back (who and why, as
    /// written).
    pub proof_checked: Option<String>,
}

impl NodeFacts {
    /// A Ready node with a fresh Lease, for tests and fixtures.
    pub fn ready(name: &str, now: SystemTime) -> Self {
        Self {
            name: name.to_string(),
            readiness: Readiness::Ready,
            lease_renewed: Some(now),
            lease_seen: None,
            lease_change_seen: None,
            lease_duration: None,
            last_heartbeat: None,
            control_plane: false,
            opted_out: false,
            cordoned: false,
            in_inventory: true,
            our_taint: false,
            our_taint_added: None,
            identity: NodeIdentity::default(),
            power_off_recorded: None,
            power_off_this_boot: false,
            last_release_ended: None,
            registered: None,
            request: None,
            companion_silent: None,
            boot_id: None,
            fencing_marked: false,
            returned: None,
        }
    }

    /// The boot nodefence's release ended, as its Node records it.
    pub fn released_boot(&self) -> Option<&super::returned::EndedBoot> {
        self.returned.as_ref()?.released_boot.as_ref()
    }

    /// nodefence recorded on the Node that its return contradicted the proof.
    pub fn proof_contradicted(&self) -> bool {
        self.returned.as_ref().is_some_and(|r| r.proof_contradicted)
    }

    /// Who checked a contradicted or uncheckable release, and why, if anyone did.
    pub fn proof_checked(&self) -> Option<&str> {
        self.returned.as_ref()?.proof_checked.as_deref()
    }

    /// What the Node records of the release, to change (tests, the executor's echo).
    pub fn returned_mut(&mut self) -> &mut ReturnFacts {
        self.returned.get_or_insert_default()
    }

    /// The request that makes this node suspect: one that stands and has not timed out.
    pub fn live_request(&self) -> Option<&Request> {
        self.request.as_deref().filter(|r| !r.timed_out)
    }

    /// Power commands are stopped by a request that timed out.
    pub fn request_timed_out(&self) -> Option<&Request> {
        self.request.as_deref().filter(|r| r.timed_out)
    }

    /// Whether the node is unhealthy at `now`, and since when it was last known alive.
    ///
    /// NotReady counts from the condition's transition time. A Lease not renewed for
    /// `lease_stale_after` (for this node's Lease, counted from when nodefence saw the
    /// renewal) makes the node suspect from its last renewal. The last sign of life is
    /// the latest of those and of the kubelet's last status heartbeat: power readings
    /// must be newer than all of them.
    pub fn health(&self, now: SystemTime, lease_stale_after: Option<LeaseStaleAfter>) -> Health {
        let not_ready = match self.readiness {
            Readiness::NotReady { since } => Some(since.min(now)),
            Readiness::Ready => None,
        };
        let lease_stale = match (
            self.lease_stale_after(lease_stale_after),
            self.lease_renewed,
        ) {
            (Some(after), Some(renewed))
                if now
                    .duration_since(self.lease_seen.unwrap_or(renewed))
                    .unwrap_or_default()
                    >= after =>
            {
                Some(renewed)
            }
            _ => None,
        };
        let heartbeat = self.last_heartbeat.map(|h| h.min(now));
        // Every later sign of life counts: the kubelet's status posts and the
        // companion's last beat (a suspect node's readings must be newer than both).
        // A Lease renewal seen after the silence was declared outvotes it: one seen to
        // happen when the Lease is watched (not a new leader's first sight of an old
        // one), else the renewTime itself.
        let renewal = if self.lease_seen.is_some() {
            self.lease_change_seen
        } else {
            self.lease_renewed
        };
        let beat = self
            .companion_silent
            .filter(|s| renewal.is_none_or(|seen| seen <= s.declared))
            .map(|s| s.last_beat.min(now));
        let latest = |t: SystemTime| {
            let t = heartbeat.map_or(t, |h| h.max(t));
            beat.map_or(t, |b| b.max(t))
        };
        match (not_ready, lease_stale) {
            (Some(nr), lease) => Health::NotReady {
                since: latest(lease.map_or(nr, |l| l.max(nr))),
                not_ready_since: nr,
            },
            (None, Some(renewed)) => Health::LeaseStale {
                since: latest(renewed),
            },
            (None, None) if beat.is_some() => Health::CompanionSilent {
                since: latest(self.lease_renewed.unwrap_or(UNIX_EPOCH)),
            },
            (None, None) => match self.live_request() {
                // The kubelet still answers: its last renewal (or status post) is the
                // last sign of life, and every new one moves it on.
                Some(request) => Health::Requested {
                    since: latest(self.lease_renewed.or(heartbeat).unwrap_or(request.since)),
                },
                None => Health::Healthy,
            },
        }
    }
}

impl NodeFacts {
    /// How long this node's Lease may go unrenewed before the node is suspect.
    pub fn lease_stale_after(&self, policy: Option<LeaseStaleAfter>) -> Option<Duration> {
        policy.map(|p| p.for_lease(self.lease_duration))
    }

    /// Whether the node counts as unhealthy for storm protection: unhealthy, or its
    /// Lease stale by the kubelet's own renewTime. The gate must see a failure as early
    /// as any reading of it allows (acting waits for the later one): a renewal seen late
    /// (a slow watch, a new leader's first sight) must not make a partition look
    /// smaller than it is.
    pub fn counts_unhealthy(
        &self,
        now: SystemTime,
        lease_stale_after: Option<LeaseStaleAfter>,
    ) -> bool {
        if self.health(now, lease_stale_after) != Health::Healthy {
            return true;
        }
        match (
            self.lease_stale_after(lease_stale_after),
            self.lease_renewed,
        ) {
            (Some(after), Some(renewed)) => {
                now.duration_since(renewed).unwrap_or_default() >= after
            }
            _ => false,
        }
    }

    /// The time power readings must be newer than, for an unhealthy node last alive at
    /// `since`: also later than nodefence saw the Lease's last renewal, by its own
    /// clock, the clock the readings are taken on. A kubelet whose clock runs behind
    /// writes a renewTime older than readings nodefence took before that renewal.
    pub fn readings_after(&self, since: SystemTime) -> SystemTime {
        self.lease_seen.map_or(since, |seen| seen.max(since))
    }

    /// When the Lease goes stale if it is not renewed again (`None`: no Lease, or the
    /// fast path is off).
    pub fn lease_stale_at(&self, policy: Option<LeaseStaleAfter>) -> Option<SystemTime> {
        let renewed = self.lease_seen.or(self.lease_renewed)?;
        Some(renewed + self.lease_stale_after(policy)?)
    }
}

/// The node's health as decisions see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Healthy,
    /// Ready, but its kubelet has stopped renewing its Lease: suspect, never powered
    /// off on this alone, released only when confirmed Off.
    LeaseStale {
        since: SystemTime,
    },
    /// Ready with a live Lease, but its companion, which was beating, has been silent
    /// for `heartbeat_timeout`: suspect at once, as with a stale Lease (never powered
    /// off on this alone, released only when confirmed Off after `since`).
    CompanionSilent {
        since: SystemTime,
    },
    /// Ready with a live Lease, but a remediation was requested for it
    /// ([`Request`]): suspect, its machine powered off when policy allows, released
    /// only when confirmed Off after `since`, its last sign of life.
    Requested {
        since: SystemTime,
    },
    /// NotReady since `not_ready_since`; `since` is the last sign of life.
    NotReady {
        since: SystemTime,
        not_ready_since: SystemTime,
    },
}

impl Health {
    /// The last sign of life, for an unhealthy node.
    pub fn since(self) -> Option<SystemTime> {
        match self {
            Health::Healthy => None,
            Health::LeaseStale { since }
            | Health::CompanionSilent { since }
            | Health::Requested { since }
            | Health::NotReady { since, .. } => Some(since),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + s)
    }

    #[test]
    fn health_uses_the_latest_sign_of_life() {
        let mut f = NodeFacts::ready("a", t(0));
        let stale = Some(LeaseStaleAfter::Fixed(Duration::from_secs(25)));
        assert_eq!(f.health(t(10), stale), Health::Healthy);
        assert_eq!(f.health(t(30), stale), Health::LeaseStale { since: t(0) });
        assert_eq!(f.health(t(30), None), Health::Healthy, "fast path off");
        f.readiness = Readiness::NotReady { since: t(50) };
        assert_eq!(
            f.health(t(60), stale),
            Health::NotReady {
                since: t(50),
                not_ready_since: t(50)
            }
        );
        f.lease_renewed = Some(t(55));
        assert_eq!(
            f.health(t(90), stale),
            Health::NotReady {
                since: t(55),
                not_ready_since: t(50)
            },
            "a renewal after the transition moves the last sign of life"
        );
    }

    #[test]
    fn the_first_missed_renewal_is_read_from_the_lease_itself() {
        let auto = Some(LeaseStaleAfter::MissedRenewal);
        let mut f = NodeFacts::ready("a", t(0));
        // No leaseDurationSeconds: the kubelet's 40 s, renewed every 10 s: 12 s.
        assert_eq!(f.health(t(11), auto), Health::Healthy);
        assert_eq!(f.health(t(12), auto), Health::LeaseStale { since: t(0) });
        f.lease_duration = Some(Duration::from_secs(40));
        assert_eq!(f.health(t(11), auto), Health::Healthy);
        assert_eq!(f.health(t(12), auto), Health::LeaseStale { since: t(0) });
        // A cluster with --node-lease-duration-seconds=100 renews every 25 s: 30 s.
        f.lease_duration = Some(Duration::from_secs(100));
        assert_eq!(f.health(t(29), auto), Health::Healthy);
        assert_eq!(f.health(t(30), auto), Health::LeaseStale { since: t(0) });
        // A short Lease still allows 2 s of lateness; a zero one is ignored.
        f.lease_duration = Some(Duration::from_secs(4));
        assert_eq!(f.lease_stale_after(auto), Some(Duration::from_secs(3)));
        f.lease_duration = Some(Duration::ZERO);
        assert_eq!(f.lease_stale_after(auto), Some(Duration::from_secs(12)));
        // A written threshold is kept whatever the Lease says.
        let fixed = Some(LeaseStaleAfter::Fixed(Duration::from_secs(25)));
        assert_eq!(f.lease_stale_after(fixed), Some(Duration::from_secs(25)));
        assert_eq!(f.lease_stale_after(None), None, "fast path off");
    }

    #[test]
    fn the_lease_ages_from_when_nodefence_saw_the_renewal() {
        let fixed = Some(LeaseStaleAfter::Fixed(Duration::from_secs(12)));
        let mut f = NodeFacts::ready("a", t(0));
        // A kubelet 30 s behind: its renewal, seen at t(100), says t(70). Not late.
        f.lease_renewed = Some(t(70));
        f.lease_seen = Some(t(100));
        assert_eq!(f.lease_stale_at(fixed), Some(t(112)));
        assert_eq!(f.health(t(111), fixed), Health::Healthy);
        // Stale one threshold after it was seen; the last sign of life stays the
        // kubelet's own word (the releaser compares the Lease with it).
        assert_eq!(f.health(t(112), fixed), Health::LeaseStale { since: t(70) });
        // 30 s ahead: says t(130), seen at t(100). Stale as soon, not 30 s later.
        f.lease_renewed = Some(t(130));
        assert_eq!(f.health(t(111), fixed), Health::Healthy);
        assert_eq!(
            f.health(t(112), fixed),
            Health::LeaseStale { since: t(130) }
        );
        // Storm protection counts it unhealthy by either clock, the earlier one.
        f.lease_renewed = Some(t(70));
        assert!(
            f.counts_unhealthy(t(82), fixed),
            "stale by its own renewTime"
        );
        assert_eq!(f.health(t(82), fixed), Health::Healthy, "not acted on yet");
        f.lease_renewed = Some(t(130));
        assert!(!f.counts_unhealthy(t(111), fixed));
        assert!(f.counts_unhealthy(t(112), fixed), "stale since it was seen");
        // Not watched (a one-off read): the renewTime is all there is.
        f.lease_seen = None;
        assert_eq!(f.lease_stale_at(fixed), Some(t(142)));
        assert_eq!(f.health(t(141), fixed), Health::Healthy);
    }

    #[test]
    fn readings_must_follow_the_renewal_by_either_clock() {
        let mut f = NodeFacts::ready("a", t(0));
        // A clock behind: written at 0, seen at 20; a reading at 10 predates it.
        f.lease_seen = Some(t(20));
        assert_eq!(f.readings_after(t(0)), t(20));
        // A later sign of life (the NotReady transition) still counts.
        assert_eq!(f.readings_after(t(50)), t(50));
        // A clock ahead: the renewTime is the later one, kept.
        f.lease_seen = Some(t(0));
        assert_eq!(f.readings_after(t(20)), t(20));
        // No Lease watched: the last sign of life alone.
        f.lease_seen = None;
        assert_eq!(f.readings_after(t(7)), t(7));
    }

    #[test]
    fn a_status_heartbeat_after_the_last_renewal_is_the_last_sign_of_life() {
        let mut f = NodeFacts::ready("a", t(0));
        f.last_heartbeat = Some(t(4));
        let stale = Some(LeaseStaleAfter::Fixed(Duration::from_secs(25)));
        assert_eq!(f.health(t(30), stale), Health::LeaseStale { since: t(4) });
    }

    #[test]
    fn a_transition_time_in_the_future_is_clamped_to_now() {
        let mut f = NodeFacts::ready("a", t(0));
        f.readiness = Readiness::NotReady { since: t(500) };
        assert_eq!(f.health(t(10), None).since(), Some(t(10)));
    }
}
