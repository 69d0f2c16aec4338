//! The decisions inside one node's procedure: whether its power source is trusted,
//! whether its machine is proven Off and may be released, whether it must be powered
//! off (and whether the gates allow it), when to power it back on, and when to read
//! its power next. Called from [`super::node::NodeState::evaluate`].

use std::time::{Duration, SystemTime};

use super::action::{Action, Notice, OffProof, Reason, ReleasePlan, ReleaseProof, Steps, Target};
use super::facts::{Health, NodeFacts};
use super::node::{Block, Gates, Incident, PowerOffStatus, PowerOnStatus, Queries, Released};
use super::policy::{ForceDeletePods, OnPoweredOn, Policy};
use crate::identity::{self, IdentityCheck, MachineIdentity};
use crate::power::PowerState;

/// Reboot-style remediation: power the machine back on once Kubernetes has let go of
/// it (pods gone, no VolumeAttachment names the node) or `release_timeout` passed.
/// Only reached from `Released`, so the Off proof and the release came first. A
/// failed power-on is tried again with bounded backoff (`power_on_retry`): a machine
/// nodefence switched off for a reboot-style policy must come back once its BMC does.
pub(super) fn decide_power_on(
    rel: &mut Released,
    name: &str,
    target: &Target,
    policy: &Policy,
    gates: Gates,
    now: SystemTime,
    out: &mut Vec<Action>,
) {
    if gates.held().is_some() || rel.power_on_retry.is_some_and(|t| t > now) {
        return;
    }
    let timed_out = now.duration_since(rel.at).unwrap_or_default() >= policy.release_timeout;
    if rel.drained || timed_out {
        rel.power_on = PowerOnStatus::InFlight;
        out.push(Notice::normal(
            name,
            Reason::PoweringOn,
            if rel.drained {
                "release done: the node's pods are gone and its volumes detached; powering the machine back on".to_string()
            } else {
                format!(
                    "release done {} ago and Kubernetes has not let go of every pod or volume; powering the machine back on (release_timeout)",
                    humantime::format_duration(policy.release_timeout)
                )
            },
        ));
        out.push(Action::PowerOn {
            node: name.to_string(),
            target: target.clone(),
        });
        return;
    }
    let q = &mut rel.drain_checks;
    if !q.in_flight && q.next_at.is_none_or(|t| t <= now) {
        q.in_flight = true;
        q.next_at = None;
        out.push(Action::CheckDrained {
            node: name.to_string(),
        });
    }
}

pub(super) fn set_block(inc: &mut Incident, block: Block, name: &str, out: &mut Vec<Action>) {
    if inc.block.as_ref() != Some(&block) {
        if let Some(reason) = block.warning_reason() {
            out.push(Notice::warning_in(
                block.kind(),
                name,
                reason,
                block.describe(),
            ));
        } else if matches!(block, Block::OnUntil(_)) {
            out.push(Notice::warning(
                name,
                Reason::MachineStillOn,
                block.describe(),
            ));
        }
        inc.block = Some(block);
    }
}

pub(super) fn schedule_query(q: &mut Queries, _name: &str, now: SystemTime, out: &mut Vec<Action>) {
    if q.in_flight {
        return;
    }
    if q.next_at.is_none_or(|t| t <= now) {
        q.in_flight = true;
        q.next_at = None;
        out.push(Action::QueryPower {
            node: _name.to_string(),
        });
    }
}

/// Whether the power source is proven to control this node's own machine: `None`
/// when it may be trusted, or the block that stops every release and power-off.
/// A mismatch always blocks; an unknown identity blocks under `require_identity`.
pub(super) fn identity_gate(
    facts: &NodeFacts,
    machine: Option<&MachineIdentity>,
    policy: &Policy,
) -> Option<Block> {
    let check = match machine {
        Some(m) => identity::check(&facts.identity, m),
        None => IdentityCheck::Unknown("the machine's identity has not been read yet".into()),
    };
    match check {
        IdentityCheck::Match(_) => None,
        IdentityCheck::Mismatch { .. } => Some(Block::Identity(check)),
        IdentityCheck::Unknown(_) if policy.require_identity => Some(Block::Identity(check)),
        IdentityCheck::Unknown(_) => None,
    }
}

/// How old the newest reading of an Off proof may be when it is acted on: one
/// reading interval and a second.
pub fn proof_fresh_for(policy: &Policy) -> Duration {
    policy.confirm_interval + Duration::from_secs(1)
}

/// Whether a proven node may be released now: a request's requester already waited
/// for the node to stay unhealthy; NotReady for `release_off_after`; a stale Lease on
/// the fast path; a silent companion (the proof is newer than its last beat).
pub(super) fn release_due(
    inc: &Incident,
    health: Health,
    policy: &Policy,
    now: SystemTime,
) -> bool {
    inc.requested_by.is_some()
        || match health {
            Health::NotReady {
                not_ready_since, ..
            } => {
                now.duration_since(not_ready_since).unwrap_or_default() >= policy.release_off_after
            }
            Health::LeaseStale { .. } => policy.lease_stale_after.is_some(),
            Health::CompanionSilent { .. } => true,
            Health::Requested { .. } | Health::Healthy => false,
        }
}

fn release_mode_text(policy: &Policy) -> &'static str {
    match policy.release {
        super::policy::ReleaseMode::OutOfServiceTaint => "adding the out-of-service taint",
        super::policy::ReleaseMode::DeleteNode => "deleting the Node object",
    }
}

/// Starts the release of a proven node: the plan, the steps so far, the action.
pub(super) fn begin_release(
    inc: &mut Incident,
    name: &str,
    health: Health,
    policy: &Policy,
    proof: ReleaseProof,
    now: SystemTime,
    out: &mut Vec<Action>,
) {
    inc.releasing = true;
    inc.block = None;
    let watchdog = matches!(proof, ReleaseProof::Watchdog(_));
    let force_delete_pods = match policy.force_delete_pods {
        ForceDeletePods::Never => false,
        ForceDeletePods::Always => true,
        // PodGC deletes the pods of a tainted node only once it is NotReady, and
        // then on its own 20 s period: nodefence deletes them on the Lease fast path,
        // after its own power-off and after a watchdog reset, the cases where
        // waiting costs most.
        ForceDeletePods::FastPath => {
            watchdog
                || matches!(
                    health,
                    Health::LeaseStale { .. }
                        | Health::CompanionSilent { .. }
                        | Health::Requested { .. }
                )
                || matches!(inc.power_off, PowerOffStatus::Sent { .. })
        }
    };
    let steps = Steps {
        last_sign_of_life: inc.failed_at,
        detected: inc.started,
        first_reading: inc.first_reading,
        power_off_sent: match inc.power_off {
            PowerOffStatus::Sent { at, .. } => Some(at),
            _ => None,
        },
        fencing_marked: inc.watchdog.marked_at(),
        off_proven: if watchdog {
            now
        } else {
            inc.off_readings.last().copied().unwrap_or(now)
        },
    };
    inc.steps = Some(steps);
    out.push(Action::Release {
        node: name.to_string(),
        steps,
        plan: ReleasePlan {
            mode: policy.release,
            delete_volume_attachments: policy.delete_volume_attachments,
            force_delete_pods,
        },
        proof,
    });
}

#[allow(clippy::too_many_arguments)]
pub(super) fn decide_incident(
    inc: &mut Incident,
    name: &str,
    health: Health,
    facts: &super::facts::NodeFacts,
    (identity, machine): (Option<Block>, Option<&MachineIdentity>),
    target: &Target,
    policy: &Policy,
    gates: Gates,
    now: SystemTime,
    out: &mut Vec<Action>,
) {
    if inc.releasing {
        return;
    }
    // A proof that waited (paused, a failed release write, release_off_after) needs
    // one fresh Off reading before it is acted on: the machine may have been switched
    // on since. Its newest reading is dropped, so the node is read again at once.
    if inc.off_readings.len() >= policy.confirm_readings.max(1) as usize
        && inc
            .off_readings
            .last()
            .is_some_and(|t| now.duration_since(*t).unwrap_or_default() > proof_fresh_for(policy))
    {
        inc.off_readings.pop();
    }
    let proven = inc.off_readings.len() >= policy.confirm_readings.max(1) as usize
        && inc.off_readings.iter().all(|t| *t > inc.readings_after);
    // The watchdog level: when no power method can be read at all. It rests on the
    // node's own companion (its token names the node), not on the power source's
    // identity, which cannot be read either.
    if !proven && super::watchdog::decide(inc, name, facts, health, policy, gates, now, out) {
        return;
    }
    if let Some(block) = identity {
        // Only once something would be done: an identity not read yet is no news.
        if proven || inc.last_state.is_some() {
            set_block(inc, block, name, out);
        }
        return;
    }
    if matches!(inc.block, Some(Block::Identity(_))) {
        inc.block = None;
    }
    if proven {
        if let Some(held) = gates.held() {
            set_block(inc, held, name, out);
            return;
        }
        if !release_due(inc, health, policy, now) {
            return;
        }
        let proof = ReleaseProof::Off(OffProof {
            last_sign_of_life: inc.since,
            readings_after: inc.readings_after,
            lease_renewed: inc.lease_renewed,
            readings: inc.off_readings.clone(),
            machine: machine.cloned(),
            require_identity: policy.require_identity,
            // The engine's own bound, plus the time a release write may take.
            max_age: proof_fresh_for(policy) + Duration::from_secs(30),
        });
        let mode = release_mode_text(policy);
        out.push(Notice::normal(name, Reason::ConfirmedOff, format!(
            "the machine is confirmed Off ({} consecutive readings since its last sign of life); {mode}",
            inc.off_readings.len()
        )));
        begin_release(inc, name, health, policy, proof, now, out);
        return;
    }
    let Some((read_at, state)) = inc.last_state.clone() else {
        return;
    };
    // An On reading decides a power-off only if it was taken after the node's last
    // sign of life; under a request, after the incident began is enough (a node whose
    // kubelet still renews is alive at every reading: the request is what counts).
    let fresh_after = if inc.requested_by.is_some() {
        inc.started.min(inc.readings_after)
    } else {
        inc.readings_after
    };
    if read_at < fresh_after
        || (read_at == fresh_after && inc.requested_by.is_none())
        || inc.last_error.as_ref().is_some_and(|(t, _)| *t > read_at)
    {
        return;
    }
    match state {
        PowerState::Off => {}
        PowerState::On | PowerState::Paused => {
            consider_power_off(inc, name, health, target, policy, gates, now, out)
        }
        other => set_block(inc, Block::Undetermined(other), name, out),
    }
}

#[allow(clippy::too_many_arguments)]
fn consider_power_off(
    inc: &mut Incident,
    name: &str,
    health: Health,
    target: &Target,
    policy: &Policy,
    gates: Gates,
    now: SystemTime,
    out: &mut Vec<Action>,
) {
    if let Some(by) = &inc.stopped_by {
        let block = Block::RequestTimedOut(by.clone());
        set_block(inc, block, name, out);
        return;
    }
    let not_ready_since = match health {
        Health::NotReady {
            not_ready_since, ..
        } => Some(not_ready_since),
        _ => None,
    };
    // Counted from the failure nodefence saw (the first missed Lease renewal, when the
    // incident started) or from NotReady, whichever came first; never before NotReady.
    // A request skips the wait: its requester (NodeHealthCheck, a MachineHealthCheck)
    // judged the node unhealthy for its own duration first.
    let why = match (&inc.requested_by, not_ready_since) {
        (Some(by), _) => format!("{by} asks for it to be fenced"),
        (None, None) => {
            let block = if matches!(health, Health::CompanionSilent { .. }) {
                Block::OnButOnlyCompanionSilent
            } else {
                Block::OnButOnlyLeaseStale
            };
            set_block(inc, block, name, out);
            return;
        }
        (None, Some(not_ready_since)) => {
            let unhealthy_since = not_ready_since.min(inc.started);
            let at = unhealthy_since + policy.unhealthy_after;
            if now < at {
                set_block(inc, Block::OnUntil(at), name, out);
                return;
            }
            format!(
                "the node has been unhealthy since {} (NotReady since {})",
                humantime::format_rfc3339_seconds(unhealthy_since),
                humantime::format_rfc3339_seconds(not_ready_since)
            )
        }
    };
    if policy.on_powered_on == OnPoweredOn::Wait {
        set_block(inc, Block::OnAndPolicyWaits, name, out);
        return;
    }
    if let Some(held) = gates.held() {
        set_block(inc, held, name, out);
        return;
    }
    if gates.storm {
        set_block(inc, Block::Storm, name, out);
        return;
    }
    let attempt = match inc.power_off {
        PowerOffStatus::InFlight { .. } => return,
        PowerOffStatus::NotSent => 1,
        PowerOffStatus::Sent { at, attempt } | PowerOffStatus::Failed { at, attempt } => {
            if now.duration_since(at).unwrap_or_default() < policy.power_off_retry_after {
                return;
            }
            if attempt >= policy.max_power_off_attempts {
                set_block(inc, Block::PowerOffAttemptsExhausted(attempt), name, out);
                return;
            }
            attempt + 1
        }
    };
    if !gates.power_off_slot {
        set_block(inc, Block::RateLimited, name, out);
        return;
    }
    inc.power_off = PowerOffStatus::InFlight { attempt };
    inc.block = None;
    out.push(Notice::warning(
        name,
        Reason::PoweringOff,
        format!("the machine is still On and {why}: forcing power off (attempt {attempt})"),
    ));
    out.push(Action::PowerOff {
        node: name.to_string(),
        attempt,
        target: target.clone(),
    });
}

/// Delay before the next power query after `failures` consecutive failures.
pub(crate) fn backoff(policy: &Policy, failures: u32) -> Duration {
    let base = policy.confirm_interval.max(Duration::from_millis(100));
    let factor = 1u32 << failures.min(16);
    (base * factor).min(policy.max_query_backoff)
}
