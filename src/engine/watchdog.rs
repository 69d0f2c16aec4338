//! The watchdog level of one node's incident: the last level of its fencing topology,
//! opt-in (`watchdog_fencing`), for a machine whose power methods cannot be read at
//! all (its BMC lost power with it, hung, or sits behind the same dead switch).
//!
//! Tried only when every power method failed and none answered in this incident:
//! never when one reads On (a power-off's case) or Off (the Off proof's), nor
//! after contradicting answers. The mark is a power command in effect (a machine
//! still running is reset by it), so it waits for what a power-off waits for: the
//! node unhealthy for `unhealthy_after`, unless its companion fell silent too (two
//! independent signals that the machine is gone) or a remediation request asks; and
//! no cluster-wide hold, no storm.
//!
//! Then: the executor marks the node ([`Action::MarkForFencing`]); once the API server
//! accepted the mark, the release rule ([`crate::watchdog::release::decide`]) is
//! applied to what the heartbeat knows ([`Action::CheckWatchdog`]) until it proves
//! the machine reset, and the release rests on that proof ([`ReleaseProof::Watchdog`]).
//! A power method that answers in the meantime takes the decision back.

use std::time::{Duration, SystemTime};

use super::action::{Action, Notice, Reason, ReleaseProof, WatchdogProof};
use super::decide::{begin_release, release_due, set_block};
use super::facts::Health;
use super::node::{Block, Gates, Incident, Queries};
use super::policy::Policy;
use crate::watchdog::release::Proof;

/// Where the watchdog level of an incident stands.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum WatchdogStep {
    /// Not tried (or tried and not written: not before `retry_at`).
    #[default]
    NotTried,
    /// Not written: the executor refused or the API server failed (`failures` in a row).
    Failed { retry_at: SystemTime, failures: u32 },
    /// The executor is writing the mark (`failures`: earlier attempts that failed).
    Marking { failures: u32 },
    /// The API server accepted the mark at `at`; the release rule is applied until
    /// it proves the machine reset.
    Marked {
        at: SystemTime,
        check: Queries,
        /// What the last check said it waits for.
        waiting: Option<String>,
    },
    /// Proven reset (at `at`); released once the gates allow.
    Proven { at: SystemTime, proof: Box<Proof> },
}

impl WatchdogStep {
    /// When the API server accepted the mark, once it did.
    pub fn marked_at(&self) -> Option<SystemTime> {
        match self {
            WatchdogStep::Marked { at, .. } | WatchdogStep::Proven { at, .. } => Some(*at),
            WatchdogStep::NotTried | WatchdogStep::Failed { .. } | WatchdogStep::Marking { .. } => {
                None
            }
        }
    }
}

/// What a check of the release rule found (the executor's answer to
/// [`Action::CheckWatchdog`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchdogCheck {
    Proven(Proof),
    /// Not yet: check again at `retry_at`.
    Wait {
        retry_at: SystemTime,
        why: String,
    },
    /// The evidence cannot prove it (no armed watchdog, no mark, no heartbeat):
    /// checked again later, as a failed reading is.
    Refused(String),
}

/// Whether every power method of the node is unreadable: readings failed and none
/// answered since the incident began.
pub(super) fn unreadable(inc: &Incident) -> bool {
    inc.last_state.is_none() && inc.last_error.is_some()
}

/// The node's machine looks gone on a second, independent signal (its companion is
/// silent), or a remediation request asks: the mark need not wait `unhealthy_after`.
fn mark_due(
    inc: &Incident,
    health: Health,
    companion_silent: bool,
    policy: &Policy,
    now: SystemTime,
) -> Result<(), Block> {
    if inc.requested_by.is_some() || companion_silent {
        return Ok(());
    }
    match health {
        Health::NotReady {
            not_ready_since, ..
        } => {
            let at = not_ready_since.min(inc.started) + policy.unhealthy_after;
            if now < at {
                Err(Block::WatchdogUntil(at))
            } else {
                Ok(())
            }
        }
        _ => Err(Block::WatchdogWaitsForNotReady),
    }
}

/// The watchdog level's part of an incident's decision (see the module
/// documentation). Returns true when it decided the incident (a release, or a
/// block it set), so the rest of the decision is skipped.
#[allow(clippy::too_many_arguments)]
pub(super) fn decide(
    inc: &mut Incident,
    name: &str,
    facts: &super::facts::NodeFacts,
    health: Health,
    policy: &Policy,
    gates: Gates,
    now: SystemTime,
    out: &mut Vec<Action>,
) -> bool {
    let companion_silent = facts.companion_silent.is_some();
    if !policy.watchdog_fencing || inc.releasing {
        return false;
    }
    // A power method answered: the decision is its (the mark, if written, stays).
    if !unreadable(inc) {
        if let WatchdogStep::Proven { at, .. } = inc.watchdog {
            inc.watchdog = WatchdogStep::Marked {
                at,
                check: Queries::default(),
                waiting: None,
            };
        }
        return false;
    }
    match &mut inc.watchdog {
        WatchdogStep::NotTried | WatchdogStep::Failed { .. } => {
            if let WatchdogStep::Failed { retry_at, .. } = inc.watchdog
                && now < retry_at
            {
                return false;
            }
            if let Some(by) = &inc.stopped_by {
                set_block(inc, Block::RequestTimedOut(by.clone()), name, out);
                return true;
            }
            if let Err(block) = mark_due(inc, health, companion_silent, policy, now) {
                // The unreadable power source stays the warning told and repeated.
                if !matches!(inc.block, Some(Block::QueryFailing(_))) {
                    set_block(inc, block, name, out);
                }
                return true;
            }
            if let Some(held) = gates.held() {
                set_block(inc, held, name, out);
                return true;
            }
            if gates.storm {
                set_block(inc, Block::Storm, name, out);
                return true;
            }
            let failures = match inc.watchdog {
                WatchdogStep::Failed { failures, .. } => failures,
                _ => 0,
            };
            inc.watchdog = WatchdogStep::Marking { failures };
            inc.block = None;
            out.push(Notice::warning(
                name,
                Reason::WatchdogFencing,
                "no power method of the machine can be read: marking the node for fencing by its own hardware watchdog (its companion stops feeding it)",
            ));
            out.push(Action::MarkForFencing {
                node: name.to_string(),
                context: context(facts, policy),
            });
            true
        }
        WatchdogStep::Marking { .. } => true,
        WatchdogStep::Marked { check, waiting, .. } => {
            if !check.in_flight && check.next_at.is_none_or(|t| t <= now) {
                check.in_flight = true;
                check.next_at = None;
                out.push(Action::CheckWatchdog {
                    node: name.to_string(),
                    context: context(facts, policy),
                });
            }
            let why = waiting.clone();
            if let Some(why) = why {
                set_block(inc, Block::WatchdogWait(why), name, out);
            }
            true
        }
        WatchdogStep::Proven { at, proof } => {
            let (marked_at, proof) = (*at, (**proof).clone());
            if let Some(held) = gates.held() {
                set_block(inc, held, name, out);
                return true;
            }
            if !release_due(inc, health, policy, now) {
                return true;
            }
            let text = format!("the machine was {proof}");
            out.push(Notice::normal(name, Reason::ResetByWatchdog, text));
            let evidence = ReleaseProof::Watchdog(Box::new(WatchdogProof {
                last_sign_of_life: inc.since,
                lease_renewed: inc.lease_renewed,
                marked_at,
                proof,
            }));
            begin_release(inc, name, health, policy, evidence, now, out);
            true
        }
    }
}

/// What the mark and the release rule rest on besides the heartbeat.
fn context(facts: &super::facts::NodeFacts, policy: &Policy) -> super::action::WatchdogContext {
    super::action::WatchdogContext {
        boot_id: facts.boot_id.clone(),
        on_virtual_machine: policy.watchdog_fencing_on_vm.clone(),
    }
}

/// Earlier attempts to mark that failed, while one is under way.
pub(super) fn failed_marks(inc: &Incident) -> u32 {
    match inc.watchdog {
        WatchdogStep::Marking { failures } | WatchdogStep::Failed { failures, .. } => failures,
        _ => 0,
    }
}

/// The executor wrote the mark (or could not); `backoff`: the wait after a failure.
pub(super) fn marked(
    inc: &mut Incident,
    name: &str,
    result: Result<(), String>,
    backoff: Duration,
    now: SystemTime,
    out: &mut Vec<Action>,
) {
    let WatchdogStep::Marking { failures } = inc.watchdog else {
        return;
    };
    match result {
        Ok(()) => {
            inc.watchdog = WatchdogStep::Marked {
                at: now,
                check: Queries {
                    in_flight: false,
                    next_at: Some(now),
                    failures: 0,
                },
                waiting: None,
            };
        }
        Err(why) => {
            inc.watchdog = WatchdogStep::Failed {
                retry_at: now + backoff,
                failures: failures + 1,
            };
            out.push(Notice::warning(
                name,
                Reason::WatchdogFencing,
                format!(
                    "the node could not be marked for fencing ({why}); trying again in {}",
                    humantime::format_duration(backoff)
                ),
            ));
        }
    }
}

/// The executor applied the release rule.
pub(super) fn checked(
    inc: &mut Incident,
    name: &str,
    result: WatchdogCheck,
    retry: Duration,
    now: SystemTime,
    out: &mut Vec<Action>,
) {
    let WatchdogStep::Marked { at, check, waiting } = &mut inc.watchdog else {
        return;
    };
    check.in_flight = false;
    match result {
        WatchdogCheck::Proven(proof) => {
            inc.watchdog = WatchdogStep::Proven {
                at: *at,
                proof: Box::new(proof),
            };
        }
        WatchdogCheck::Wait { retry_at, why } => {
            if waiting.is_none() {
                out.push(Notice::normal(
                    name,
                    Reason::WatchdogFencing,
                    format!(
                        "the node is marked for fencing; its machine is proven reset by its watchdog no sooner than {} ({why})",
                        humantime::format_rfc3339_millis(retry_at)
                    ),
                ));
            }
            check.failures = 0;
            // Never sooner than a reading's pace, never later than asked.
            check.next_at = Some(retry_at.max(now + Duration::from_millis(100)));
            *waiting = Some(why);
        }
        WatchdogCheck::Refused(why) => {
            // Said once per reason (it is asked again every `retry`): the node stays
            // marked and unreleased, and the operator must see why.
            if waiting.as_deref() != Some(why.as_str()) {
                out.push(Notice::warning(
                    name,
                    Reason::WatchdogFencing,
                    format!(
                        "the node is marked for fencing, and its watchdog does not prove its machine reset yet: {why}; nothing is released, checked again every {}",
                        humantime::format_duration(retry)
                    ),
                ));
            }
            check.failures += 1;
            check.next_at = Some(now + retry);
            *waiting = Some(why);
        }
    }
}
