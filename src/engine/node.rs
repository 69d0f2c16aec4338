//! One node's fencing procedure: a state machine driven by observations and time.
//!
//! `Healthy` → (unhealthy) → `Incident` → (N fresh Off readings) → release →
//! `Released` → (Ready again for `recovered_after`) → our taint removed → `Healthy`.
//! An incident whose node turns Ready before the release is dropped: nothing is
//! released. While the machine reads On, the node is NotReady for `unhealthy_after`,
//! and the gates allow it, the machine is powered off and the Off proof starts over.

use std::time::SystemTime;

use super::action::{Action, Notice, Reason, Steps, Target};
pub use super::block::Block;
use super::decide::{decide_incident, decide_power_on, identity_gate, schedule_query, set_block};
use super::facts::{Exclusion, Health, NodeFacts};
use super::policy::Policy;
use super::returned::{self, EndedBoot, Verdict};
use crate::identity::MachineIdentity;
use crate::power::{PowerError, PowerState};

/// Cluster-wide conditions a node's decision depends on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Gates {
    pub paused: bool,
    /// A new term has not yet read every Node and kubelet Lease.
    pub syncing: bool,
    pub storm: bool,
    /// Rate limits allow one more power-off now.
    pub power_off_slot: bool,
}

impl Gates {
    /// What holds every power command and release back cluster-wide, if anything.
    pub fn held(&self) -> Option<Block> {
        if self.syncing {
            Some(Block::Syncing)
        } else if self.paused {
            Some(Block::Paused)
        } else {
            None
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerOffStatus {
    NotSent,
    InFlight { attempt: u32 },
    Sent { at: SystemTime, attempt: u32 },
    Failed { at: SystemTime, attempt: u32 },
}

/// A power-off recorded on the Node that belongs to the failure since `since`: sent
/// after that last sign of life, or sent to this boot of the machine within
/// `power_off_retry_after` (a sign of life after the command, from the same boot, is
/// the machine still going down: simulation seed 5340, where a new term sent a
/// second ForceOff 3 s after the first because the kubelet renewed its Lease 0.9 s
/// after it).
fn recorded_power_off(
    facts: &NodeFacts,
    since: SystemTime,
    now: SystemTime,
    policy: &Policy,
) -> PowerOffStatus {
    match facts.power_off_recorded {
        Some((at, attempt))
            if at > since
                || facts.power_off_this_boot
                    && now.duration_since(at).unwrap_or_default()
                        < policy.power_off_retry_after =>
        {
            PowerOffStatus::Sent { at, attempt }
        }
        _ => PowerOffStatus::NotSent,
    }
}

impl PowerOffStatus {
    fn attempts(self) -> u32 {
        match self {
            PowerOffStatus::NotSent => 0,
            PowerOffStatus::InFlight { attempt }
            | PowerOffStatus::Sent { attempt, .. }
            | PowerOffStatus::Failed { attempt, .. } => attempt,
        }
    }
}

/// An unhealthy node being handled.
#[derive(Debug, Clone, PartialEq)]
pub struct Incident {
    /// The node's last sign of life, as the clocks that wrote it tell it (the
    /// kubelet's renewTime, the NotReady transition): the releaser compares the fresh
    /// Node and Lease with it.
    pub since: SystemTime,
    /// Only readings newer than this count: `since`, and no earlier than nodefence
    /// saw the last Lease renewal ([`NodeFacts::readings_after`]).
    pub readings_after: SystemTime,
    /// The kubelet's renewTime as last seen, for the Off proof.
    pub lease_renewed: Option<SystemTime>,
    /// `since` when the incident started: when the node failed, as far as anyone can
    /// tell (`since` moves later, e.g. to the NotReady transition; this does not).
    pub failed_at: SystemTime,
    pub started: SystemTime,
    /// Consecutive Off readings newer than `readings_after`.
    pub off_readings: Vec<SystemTime>,
    pub last_state: Option<(SystemTime, PowerState)>,
    pub last_error: Option<(SystemTime, PowerError)>,
    /// The first power reading answered in this incident (for the breakdown).
    pub first_reading: Option<SystemTime>,
    pub power_off: PowerOffStatus,
    pub releasing: bool,
    /// Where the time went up to the release decision (set with `releasing`).
    pub steps: Option<Steps>,
    pub block: Option<Block>,
    /// The kind of `block` ([`Block::kind`]), since when it holds the node back, and
    /// when it was last announced (repeated while it lasts, `blocked_reminder_every`).
    pub blocked: Option<Blocked>,
    /// The live remediation request for the node (which object), as last observed:
    /// a machine that reads On is powered off without waiting for `unhealthy_after`,
    /// and a proof is released at once.
    pub requested_by: Option<String>,
    /// A remediation request that timed out (which object): no power command.
    pub stopped_by: Option<String>,
    /// The watchdog level (`watchdog_fencing`): not tried, marking, marked, proven.
    pub watchdog: super::watchdog::WatchdogStep,
    /// Releases on the watchdog's proof refused in a row: the rule is applied again
    /// only after a backoff that grows with them (its proof, unlike an Off reading's,
    /// holds again at once: seed 3006 looped on a pause only the executor had seen).
    pub watchdog_refusals: u32,
}

/// How long one kind of block has held an incident back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocked {
    pub kind: &'static str,
    pub since: SystemTime,
    pub announced: SystemTime,
    /// Reminders sent so far.
    pub reminders: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerOnStatus {
    NotWanted,
    Pending,
    InFlight,
    Done,
}

/// A node whose volumes were released.
#[derive(Debug, Clone, PartialEq)]
pub struct Released {
    pub at: SystemTime,
    pub ready_since: Option<SystemTime>,
    pub removing_taint: bool,
    pub power_on: PowerOnStatus,
    /// The node's pods are gone and no VolumeAttachment names it (checked only while
    /// a power-on waits for it).
    pub drained: bool,
    /// Drain checks (`Action::CheckDrained`) scheduling.
    pub drain_checks: Queries,
    /// Power-on commands that failed or were refused so far.
    pub power_on_failures: u32,
    /// A failed power-on is not tried again before this.
    pub power_on_retry: Option<SystemTime>,
    /// The boot the release ended (`None`: a release that kept none: delete-node, an
    /// earlier version's), for the check on return ([`super::returned`]).
    pub ended: Option<EndedBoot>,
    /// What the node's return said about the proof, once it has come back.
    pub verdict: Option<Verdict>,
}

impl Released {
    pub(crate) fn new(at: SystemTime, power_on: PowerOnStatus) -> Self {
        Self {
            at,
            ready_since: None,
            removing_taint: false,
            power_on,
            drained: false,
            drain_checks: Queries::default(),
            power_on_failures: 0,
            power_on_retry: None,
            ended: None,
            verdict: None,
        }
    }

    /// A release resumed from what its Node records (a new leader, a restart): the
    /// boot it ended, and a contradiction already found.
    pub(crate) fn resumed(at: SystemTime, power_on: PowerOnStatus, facts: &NodeFacts) -> Self {
        let mut rel = Self::new(at, power_on);
        rel.ended = facts.released_boot().cloned();
        if facts.proof_contradicted() {
            rel.verdict = Some(Verdict::Contradicted {
                boot: facts.boot_id.clone().unwrap_or_default(),
                at,
            });
        }
        rel
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Phase {
    Healthy,
    Incident(Box<Incident>),
    Released(Released),
}

/// Power-query scheduling for one node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Queries {
    pub in_flight: bool,
    pub next_at: Option<SystemTime>,
    pub failures: u32,
}

/// Everything the engine knows about one node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeState {
    pub facts: NodeFacts,
    pub phase: Phase,
    pub queries: Queries,
    /// The machine its power source says it controls (read with the power state).
    pub machine: Option<MachineIdentity>,
    /// The Node object is gone, but the procedure is not over: a release in flight
    /// (delete-node deletes it before it reports back) or a pending power-on.
    pub gone: bool,
    /// An excluded unhealthy node was announced once.
    pub(super) excluded_noted: Option<Exclusion>,
    /// When this term removed nodefence's taint from the node (a copy of the Node
    /// older than that still shows it).
    pub our_taint_removed: Option<SystemTime>,
    /// This term acted on the fencing mark it found on the Node (held it, or cleared
    /// it); forgotten once the Node no longer carries one.
    pub(super) mark_acted: bool,
}

impl NodeState {
    /// A node seen for the first time. One that carries the out-of-service taint
    /// nodefence recorded adding was released by an earlier leader or run: it resumes
    /// in `Released` (waiting for recovery), and nothing is powered off or released again.
    pub fn new(facts: NodeFacts, now: SystemTime) -> Self {
        let phase = if facts.our_taint {
            Phase::Released(Released::resumed(now, PowerOnStatus::NotWanted, &facts))
        } else {
            Phase::Healthy
        };
        Self {
            facts,
            phase,
            queries: Queries::default(),
            machine: None,
            gone: false,
            excluded_noted: None,
            our_taint_removed: None,
            mark_acted: false,
        }
    }

    pub fn name(&self) -> &str {
        &self.facts.name
    }

    /// Its Node object is gone (a delete-node release, or resumed from a record) and
    /// has not re-registered yet.
    pub fn node_gone(&self) -> bool {
        self.gone
    }

    pub fn exclusion(&self, policy: &Policy) -> Option<Exclusion> {
        let f = &self.facts;
        if !f.in_inventory {
            Some(Exclusion::NotInInventory)
        } else if f.opted_out {
            Some(Exclusion::OptedOut)
        } else if f.control_plane && !policy.fence_control_plane {
            Some(Exclusion::ControlPlane)
        } else if f.cordoned && policy.skip_cordoned {
            Some(Exclusion::Cordoned)
        } else {
            None
        }
    }

    /// True while a power-off command for this node is in flight.
    pub fn power_off_in_flight(&self) -> bool {
        matches!(&self.phase, Phase::Incident(i) if matches!(i.power_off, PowerOffStatus::InFlight { .. }))
    }

    /// Re-decides this node. Returns the actions to take now.
    pub(crate) fn evaluate(
        &mut self,
        policy: &Policy,
        gates: Gates,
        now: SystemTime,
    ) -> Vec<Action> {
        let mut out = self.step(policy, gates, now);
        self.track_block(policy, now, &mut out);
        out
    }

    /// Keeps [`Incident::blocked`] current and repeats a Warning block's Event every
    /// `remind_every` while it lasts: an operator keeps hearing why, with how long
    /// (and, for a BMC that cannot be read, how many readings failed in a row).
    fn track_block(&mut self, policy: &Policy, now: SystemTime, out: &mut Vec<Action>) {
        let failures = self.queries.failures;
        let Phase::Incident(inc) = &mut self.phase else {
            return;
        };
        let Some(block) = &inc.block else {
            inc.blocked = None;
            return;
        };
        let kind = block.kind();
        let Some(blocked) = inc.blocked.as_mut().filter(|b| b.kind == kind) else {
            inc.blocked = Some(Blocked {
                kind,
                since: now,
                announced: now,
                reminders: 0,
            });
            return;
        };
        let every = policy.remind_every;
        let Some(reason) = block.warning_reason() else {
            return;
        };
        if every.is_zero() || inc.releasing || now < blocked.announced + every {
            return;
        }
        blocked.announced = now;
        blocked.reminders += 1;
        let age = humantime::format_duration(std::time::Duration::from_secs(
            now.duration_since(blocked.since)
                .unwrap_or_default()
                .as_secs(),
        ));
        let count = if matches!(block, Block::QueryFailing(_)) && failures > 0 {
            format!(", {failures} failed readings in a row")
        } else {
            String::new()
        };
        out.push(Notice::warning_in(
            kind,
            &self.facts.name,
            reason,
            format!("{} (still so after {age}{count})", block.describe()),
        ));
    }

    /// A fencing mark on the Node that this term did not write (an earlier term's, or
    /// one found at start-up): on a healthy node it goes (a machine doing its work
    /// must not be kept from feeding its watchdog by a mark nobody stands behind); on
    /// an unhealthy one it is held (the acknowledgements carry it: a term never lifts
    /// a mark it did not decide to lift), until this term's watchdog level or the
    /// node's recovery settles it.
    fn found_mark(&mut self, health: Health, name: &str, out: &mut Vec<Action>) {
        if !self.facts.fencing_marked {
            self.mark_acted = false;
            return;
        }
        if self.mark_acted || self.gone {
            return;
        }
        let ours = matches!(
            &self.phase,
            Phase::Incident(inc) if inc.watchdog.marked_at().is_some()
                || matches!(inc.watchdog, super::watchdog::WatchdogStep::Marking { .. })
        );
        if ours {
            return;
        }
        self.mark_acted = true;
        match (&self.phase, health.since()) {
            (Phase::Healthy, None) => out.push(Action::ClearMark {
                node: name.to_string(),
            }),
            (Phase::Released(_), _) => {}
            _ => out.push(Action::HoldMark {
                node: name.to_string(),
            }),
        }
    }

    fn step(&mut self, policy: &Policy, gates: Gates, now: SystemTime) -> Vec<Action> {
        let health = self.facts.health(now, policy.lease_stale_after);
        let exclusion = self.exclusion(policy);
        let name = self.facts.name.clone();
        let target = Target {
            node: self.facts.identity.clone(),
            require_identity: policy.require_identity,
        };
        let mut out = Vec::new();
        self.found_mark(health, &name, &mut out);
        match &mut self.phase {
            Phase::Healthy if self.facts.our_taint => {
                // nodefence's taint on a node this term holds healthy: a release of an
                // earlier term (same process, its leadership lost and won again) that
                // completed after this term first saw the node. Recover it like any
                // released node, or the taint stays for good.
                self.phase = Phase::Released(Released::resumed(
                    now,
                    PowerOnStatus::NotWanted,
                    &self.facts,
                ));
                out.extend(self.evaluate(policy, gates, now));
            }
            Phase::Healthy => {
                let Some(since) = health.since() else {
                    self.excluded_noted = None;
                    return out;
                };
                if let Some(excl) = exclusion {
                    if self.excluded_noted != Some(excl) {
                        self.excluded_noted = Some(excl);
                        out.push(Notice::normal(
                            &name,
                            Reason::NodeIgnored,
                            format!(
                                "node is unhealthy but {}; nodefence does nothing for it",
                                excl.as_str()
                            ),
                        ));
                    }
                    return out;
                }
                let (reason, what) = match health {
                    Health::LeaseStale { .. } => (
                        Reason::NodeSuspect,
                        "its kubelet stopped renewing its Lease".to_string(),
                    ),
                    Health::CompanionSilent { .. } => (
                        Reason::NodeSuspect,
                        "its companion stopped beating".to_string(),
                    ),
                    Health::Requested { .. } => (
                        Reason::RemediationRequested,
                        format!(
                            "{} asks for it to be fenced",
                            self.facts
                                .live_request()
                                .map_or("a remediation request", |r| r.by.as_str())
                        ),
                    ),
                    _ => (Reason::NodeUnhealthy, "it is NotReady".to_string()),
                };
                out.push(Notice::warning(&name, reason, format!(
                    "{what} (last sign of life {}); checking the machine's power through its out-of-band controller",
                    humantime::format_rfc3339_seconds(since)
                )));
                let readings_after = self.facts.readings_after(since);
                self.phase = Phase::Incident(Box::new(Incident {
                    since,
                    readings_after,
                    lease_renewed: self.facts.lease_renewed,
                    failed_at: since,
                    started: now,
                    off_readings: Vec::new(),
                    last_state: None,
                    last_error: None,
                    first_reading: None,
                    power_off: recorded_power_off(&self.facts, since, now, policy),
                    releasing: false,
                    steps: None,
                    block: None,
                    blocked: None,
                    requested_by: None,
                    stopped_by: None,
                    watchdog: Default::default(),
                    watchdog_refusals: 0,
                }));
                self.queries = Queries {
                    in_flight: self.queries.in_flight,
                    next_at: Some(now),
                    failures: 0,
                };
                out.extend(self.evaluate(policy, gates, now));
            }
            Phase::Incident(inc) => {
                let Some(since) = health.since() else {
                    if inc.releasing {
                        // The executor re-reads the node and refuses a Ready one; wait for its answer.
                        return out;
                    }
                    let sent = inc.power_off.attempts();
                    if inc.watchdog != super::watchdog::WatchdogStep::NotTried {
                        out.push(Action::ClearMark { node: name.clone() });
                    }
                    out.push(Notice::normal(&name, Reason::RecoveredBeforeRelease, if sent > 0 {
                        format!("node is Ready again after {sent} power-off command(s); nothing was released")
                    } else {
                        "node is Ready again; nothing was released".to_string()
                    }));
                    self.phase = Phase::Healthy;
                    self.queries.next_at = None;
                    return out;
                };
                inc.since = inc.since.max(since);
                inc.lease_renewed = self.facts.lease_renewed;
                inc.requested_by = self.facts.live_request().map(|r| r.by.clone());
                inc.stopped_by = self.facts.request_timed_out().map(|r| r.by.clone());
                let readings_after = self.facts.readings_after(since);
                if readings_after > inc.readings_after {
                    // A newer sign of life: older Off readings prove nothing any more.
                    inc.readings_after = readings_after;
                    inc.off_readings.retain(|t| *t > readings_after);
                }
                if inc.power_off == PowerOffStatus::NotSent {
                    // Another term (a replica that crashed, lost the Lease, or ran an
                    // older configuration) already sent one for this failure.
                    inc.power_off = recorded_power_off(&self.facts, inc.since, now, policy);
                }
                if let Some(excl) = exclusion
                    && !inc.releasing
                {
                    set_block(inc, Block::Excluded(excl), &name, &mut out);
                    return out;
                }
                let identity = identity_gate(&self.facts, self.machine.as_ref(), policy);
                decide_incident(
                    inc,
                    &name,
                    health,
                    &self.facts,
                    (identity, self.machine.as_ref()),
                    &target,
                    policy,
                    gates,
                    now,
                    &mut out,
                );
                // Blocked on identity: keep reading (identity comes with each reading),
                // so a fixed mapping or a BMC that starts reporting a UUID is noticed.
                let identity_blocked = matches!(inc.block, Some(Block::Identity(_)));
                if !inc.releasing
                    && (identity_blocked
                        || inc.off_readings.len() < policy.confirm_readings as usize)
                {
                    schedule_query(&mut self.queries, &name, now, &mut out);
                }
            }
            Phase::Released(rel) => {
                if rel.verdict.is_none()
                    && !self.gone
                    && let Some(verdict) = returned::judge(rel.ended.as_ref(), &self.facts, now)
                {
                    announce_verdict(&verdict, rel, &name, policy, &mut out);
                    rel.verdict = Some(verdict);
                }
                let lets_back = rel.verdict.as_ref().is_some_and(|v| {
                    v.lets_back(
                        policy.unfence_without_boot_id,
                        self.facts.proof_checked().is_some(),
                    )
                });
                if health == Health::Healthy && lets_back {
                    let ready_since = *rel.ready_since.get_or_insert(now);
                    let settled = now.duration_since(ready_since).unwrap_or_default()
                        >= policy.recovered_after;
                    if settled && !rel.removing_taint {
                        if self.facts.our_taint {
                            rel.removing_taint = true;
                            out.push(Action::RemoveTaint { node: name.clone() });
                        } else {
                            out.push(Notice::normal(
                                &name,
                                Reason::Recovered,
                                "node is Ready again; fencing procedure closed",
                            ));
                            self.phase = Phase::Healthy;
                        }
                    }
                } else {
                    rel.ready_since = None;
                }
                // An opted-out node is left alone: a person is working on the machine.
                // A request that timed out: its requester moved on (to a reprovisioning
                // remediator, say), and nodefence switches nothing on behind it.
                // A false release: nothing is switched on (or off) through the method
                // that gave its proof until an operator has checked it.
                if let Phase::Released(rel) = &mut self.phase
                    && rel.power_on == PowerOnStatus::Pending
                    && !matches!(rel.verdict, Some(Verdict::Contradicted { .. }))
                    && !self.facts.opted_out
                    && self.facts.request_timed_out().is_none()
                {
                    decide_power_on(rel, &name, &target, policy, gates, now, &mut out);
                }
            }
        }
        out
    }

    /// Earliest time this node wants to be re-evaluated without a new observation.
    pub fn next_deadline(&self, policy: &Policy) -> Option<SystemTime> {
        let mut t = self.queries.next_at.filter(|_| !self.queries.in_flight);
        let mut consider = |x: Option<SystemTime>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t| t.min(x)));
            }
        };
        match &self.phase {
            Phase::Healthy => {
                consider(self.facts.lease_stale_at(policy.lease_stale_after));
            }
            Phase::Incident(inc) => {
                if let Some(Block::OnUntil(at)) = &inc.block {
                    consider(Some(*at));
                }
                if let (Some(block), Some(blocked)) = (&inc.block, &inc.blocked)
                    && block.warning_reason().is_some()
                    && !policy.remind_every.is_zero()
                    && !inc.releasing
                {
                    consider(Some(blocked.announced + policy.remind_every));
                }
                if let PowerOffStatus::Sent { at, .. } | PowerOffStatus::Failed { at, .. } =
                    inc.power_off
                {
                    consider(Some(at + policy.power_off_retry_after));
                }
                if let Some(Block::WatchdogUntil(at)) = &inc.block {
                    consider(Some(*at));
                }
                // The mark's `unhealthy_after` (no earlier: waking early is harmless).
                if policy.watchdog_fencing
                    && inc.watchdog == super::watchdog::WatchdogStep::NotTried
                    && super::watchdog::unreadable(inc)
                {
                    consider(Some(inc.started + policy.unhealthy_after));
                }
                match &inc.watchdog {
                    super::watchdog::WatchdogStep::Failed { retry_at, .. } => {
                        consider(Some(*retry_at))
                    }
                    super::watchdog::WatchdogStep::Marked { check, .. } if !check.in_flight => {
                        consider(check.next_at)
                    }
                    _ => {}
                }
            }
            Phase::Released(rel) => {
                consider(rel.ready_since.map(|r| r + policy.recovered_after));
                if rel.power_on == PowerOnStatus::Pending {
                    consider(Some(rel.at + policy.release_timeout));
                    consider(rel.power_on_retry);
                    if !rel.drain_checks.in_flight {
                        consider(rel.drain_checks.next_at);
                    }
                }
            }
        }
        t
    }
}

/// Says what a released node's return told about its proof, and, for a
/// contradiction, records it on the Node.
fn announce_verdict(
    verdict: &Verdict,
    rel: &Released,
    name: &str,
    policy: &Policy,
    out: &mut Vec<Action>,
) {
    let failed_boot = rel
        .ended
        .as_ref()
        .and_then(|e| e.boot.clone())
        .unwrap_or_else(|| "none".into());
    match (verdict, &rel.ended) {
        (Verdict::NewBoot { boot }, _) => out.push(Notice::normal(
            name,
            Reason::BootedAgain,
            format!(
                "back with a new boot ({boot}; it failed running {failed_boot}): its machine did go down; the out-of-service taint is removed once it has been Ready for {}",
                humantime::format_duration(policy.recovered_after)
            ),
        )),
        (Verdict::Contradicted { boot, at }, Some(ended)) => {
            out.push(Notice::warning(
                name,
                Reason::ProofContradicted,
                returned::contradicted_message(ended, boot),
            ));
            out.push(Action::RecordContradiction {
                node: name.to_string(),
                value: returned::contradicted_value(*at, ended.proof, boot),
                proof: ended.proof,
            });
        }
        (Verdict::NoBootId, _) => out.push(Notice::warning(
            name,
            Reason::ProofUncheckable,
            if policy.unfence_without_boot_id {
                format!(
                    "back, but it reports no boot ID (it failed running {failed_boot}): nodefence cannot tell whether its machine went down; unfence_without_boot_id = true: the taint is removed once it has been Ready for {}",
                    humantime::format_duration(policy.recovered_after)
                )
            } else {
                format!(
                    "back, but it reports no boot ID (it failed running {failed_boot}): nodefence cannot tell whether its machine went down, so the out-of-service taint stays; check the application's data and the machine, then annotate the Node {}=\"<who, why>\" (or set unfence_without_boot_id for nodes that never report one)",
                    returned::PROOF_CHECKED_ANNOTATION
                )
            },
        )),
        (Verdict::Contradicted { .. }, None) | (Verdict::Unrecorded, _) => {}
    }
}
