//! The results of the actions the executor carried out, fed back to the engine: power
//! readings and identities, power commands, releases and taint removals. Each updates
//! the node's procedure and re-evaluates it.

use std::time::SystemTime;

use super::returned::{EndedBoot, ProofKind};
use super::*;

impl Engine {
    /// The answer to a [`Action::QueryPower`].
    pub fn power_read(
        &mut self,
        name: &str,
        result: Result<PowerReading, PowerError>,
        now: SystemTime,
    ) -> Vec<Action> {
        let policy = self.node_policies.get(name).unwrap_or(&self.policy);
        let confirm_interval = policy.confirm_interval;
        let on_poll = policy.on_poll_interval;
        let mut out = Vec::new();
        let Some(state) = self.nodes.get_mut(name) else {
            return out;
        };
        state.queries.in_flight = false;
        if let Phase::Incident(inc) = &mut state.phase {
            match result {
                Ok(reading) => {
                    state.queries.failures = 0;
                    inc.first_reading.get_or_insert(reading.at);
                    if reading.state.is_off() {
                        if reading.at > inc.readings_after {
                            inc.off_readings.push(reading.at);
                        }
                        // Blocked on identity: no proof is being built, poll gently.
                        let poll = if matches!(inc.block, Some(node::Block::Identity(_))) {
                            on_poll.max(confirm_interval)
                        } else {
                            confirm_interval
                        };
                        state.queries.next_at = Some(now + poll);
                    } else {
                        if !inc.off_readings.is_empty() {
                            out.push(Notice::warning(name, Reason::ContradictingPowerReadings, format!(
                                "the machine read Off {} time(s), then {}: the proof starts over",
                                inc.off_readings.len(),
                                reading.state
                            )));
                        }
                        inc.off_readings.clear();
                        let recently_commanded = matches!(
                            inc.power_off,
                            PowerOffStatus::Sent { .. } | PowerOffStatus::InFlight { .. }
                        );
                        let poll = if recently_commanded {
                            confirm_interval
                        } else {
                            on_poll.max(confirm_interval)
                        };
                        state.queries.next_at = Some(now + poll);
                    }
                    inc.last_state = Some((reading.at, reading.state));
                    if matches!(inc.block, Some(Block::QueryFailing(_))) {
                        inc.block = None;
                    }
                }
                Err(error) => {
                    inc.off_readings.clear();
                    state.queries.failures += 1;
                    state.queries.next_at = Some(now + backoff(policy, state.queries.failures));
                    let block = Block::QueryFailing(error.to_string());
                    if inc
                        .block
                        .as_ref()
                        .is_none_or(|b| !matches!(b, Block::QueryFailing(_)))
                    {
                        out.push(Notice::warning_in(
                            block.kind(),
                            name,
                            Reason::PowerQueryFailed,
                            block.describe(),
                        ));
                    }
                    inc.block = Some(block);
                    inc.last_error = Some((now, error));
                }
            }
        }
        out.extend(self.reevaluate(Some(name), now));
        out
    }

    /// Which machine the node's power source controls, read together with the power
    /// state (before it). A changed identity discards what was read of the other
    /// machine: the Off readings taken so far and the last state, which must not decide
    /// a power command for this one (seeds 5121, 5439, 6483 of the simulation).
    pub fn machine_identified(
        &mut self,
        name: &str,
        machine: MachineIdentity,
        now: SystemTime,
    ) -> Vec<Action> {
        let Some(state) = self.nodes.get_mut(name) else {
            return Vec::new();
        };
        if state.machine.as_ref() == Some(&machine) {
            return Vec::new();
        }
        if let Phase::Incident(inc) = &mut state.phase
            && !inc.releasing
        {
            inc.off_readings.clear();
            inc.last_state = None;
        }
        state.machine = Some(machine);
        self.reevaluate(Some(name), now)
    }

    /// The answer to a [`Action::PowerOff`].
    pub fn power_off_done(
        &mut self,
        name: &str,
        result: Result<(), PowerError>,
        now: SystemTime,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        if let Some(state) = self.nodes.get_mut(name)
            && let Phase::Incident(inc) = &mut state.phase
            && let PowerOffStatus::InFlight { attempt } = inc.power_off
        {
            match result {
                Ok(()) => {
                    inc.power_off = PowerOffStatus::Sent { at: now, attempt };
                    inc.off_readings.clear();
                }
                Err(e) => {
                    inc.power_off = PowerOffStatus::Failed { at: now, attempt };
                    out.push(Notice::warning(
                        name,
                        Reason::PowerOffFailed,
                        format!("power-off command failed: {e}"),
                    ));
                }
            }
            state.queries.next_at = Some(now);
        }
        out.extend(self.reevaluate(Some(name), now));
        out
    }

    /// The answer to a [`Action::PowerOn`].
    pub fn power_on_done(
        &mut self,
        name: &str,
        result: Result<(), PowerError>,
        now: SystemTime,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        let mut forget = false;
        let policy = self.node_policies.get(name).unwrap_or(&self.policy);
        if let Some(state) = self.nodes.get_mut(name)
            && let Phase::Released(rel) = &mut state.phase
            && rel.power_on == PowerOnStatus::InFlight
        {
            match result {
                Ok(()) => {
                    rel.power_on = PowerOnStatus::Done;
                    out.push(Action::Record {
                        node: name.to_string(),
                        record: None,
                    });
                    // A deleted Node re-registers as a fresh node once its machine is back.
                    forget = state.gone;
                }
                Err(e) => {
                    // Not sent, refused or lost: tried again (the record stays, so a
                    // new leader tries too). Its pre-check reads the machine first, so
                    // a command that did get through is not repeated.
                    rel.power_on = PowerOnStatus::Pending;
                    rel.power_on_failures += 1;
                    let wait = decide::backoff(policy, rel.power_on_failures);
                    rel.power_on_retry = Some(now + wait);
                    out.push(Notice::warning(
                        name,
                        Reason::PowerOnFailed,
                        format!(
                            "power-on not done ({e}); trying again in {} (attempt {} failed)",
                            humantime::format_duration(wait),
                            rel.power_on_failures
                        ),
                    ));
                }
            }
        }
        if forget {
            self.nodes.remove(name);
        }
        out.extend(self.reevaluate(Some(name), now));
        out
    }

    /// The answer to a [`Action::Release`]. `Err` carries the executor's reason (it
    /// refused, or the API call failed); the proof is kept and re-checked.
    pub fn release_done(
        &mut self,
        name: &str,
        result: Result<(), String>,
        now: SystemTime,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        if result.is_ok()
            && self
                .nodes
                .get(name)
                .is_some_and(|s| matches!(&s.phase, Phase::Incident(inc) if inc.releasing))
        {
            // Released for its request: served, even if the node is forgotten below
            // (a delete-node release of a machine that stays off).
            self.serve_request(name);
        }
        let power_on = if self.policy_for(name).power_on_after_fence {
            PowerOnStatus::Pending
        } else {
            PowerOnStatus::NotWanted
        };
        let policy = self.node_policies.get(name).unwrap_or(&self.policy);
        let mut forget = false;
        if let Some(state) = self.nodes.get_mut(name)
            && let Phase::Incident(inc) = &mut state.phase
            && inc.releasing
        {
            // Its Node is gone already (deleted by this release): nothing is left to
            // do for it unless its machine is to be powered back on.
            forget = state.gone && !(result.is_ok() && power_on == PowerOnStatus::Pending);
            match result {
                Ok(()) => {
                    let what = match policy.release {
                        ReleaseMode::OutOfServiceTaint => {
                            "out-of-service taint added: Kubernetes now force-deletes the node's pods and detaches its volumes"
                        }
                        ReleaseMode::DeleteNode => {
                            "Node object deleted: its pods and volumes are released"
                        }
                    };
                    let proof_kind = match &inc.watchdog {
                        watchdog::WatchdogStep::Proven { .. } => ProofKind::Watchdog,
                        _ => ProofKind::OffReadings,
                    };
                    let rests_on = match &inc.watchdog {
                        watchdog::WatchdogStep::Proven { proof, .. } => {
                            Some(format!("the machine was {proof}"))
                        }
                        _ => None,
                    };
                    let mut text = match &inc.steps {
                        Some(steps) => format!("{what} ({})", steps.describe(Some(now))),
                        None => what.to_string(),
                    };
                    if let Some(basis) = &rests_on {
                        text.push_str(&format!("; this release rests on its hardware watchdog, not on an Off reading: {basis}"));
                    }
                    if policy.release == ReleaseMode::OutOfServiceTaint {
                        match state.facts.boot_id.as_deref().filter(|b| !b.trim().is_empty()) {
                            Some(boot) => text.push_str(&format!(
                                "; it ended boot {boot}: the taint is removed only once the node is back with another"
                            )),
                            None => text.push_str(
                                "; the node reports no boot ID, so its return cannot show that the machine went down",
                            ),
                        }
                    }
                    out.push(Notice::normal(name, Reason::Released, text));
                    if power_on == PowerOnStatus::Pending {
                        out.push(Action::Record {
                            node: name.to_string(),
                            record: Some(ReleaseRecord {
                                released_at: now,
                                mode: policy.release,
                                power_on_pending: true,
                                identity: state.facts.identity.clone(),
                                rests_on,
                            }),
                        });
                    }
                    let mut rel = Released::new(now, power_on);
                    if policy.release == ReleaseMode::OutOfServiceTaint {
                        rel.ended = Some(EndedBoot {
                            since: inc.since,
                            boot: state.facts.boot_id.clone(),
                            proof: proof_kind,
                        });
                    }
                    state.phase = Phase::Released(rel);
                    state.queries = Default::default();
                }
                Err(reason) => {
                    inc.releasing = false;
                    inc.off_readings.clear();
                    let mut again = String::new();
                    if let watchdog::WatchdogStep::Proven { at, .. } = inc.watchdog {
                        // Proven once, checked again: the executor's refusal may be a
                        // removed mark or a sign of life. Not at once: that proof holds
                        // again at once, and so would the refusal (a pause only the
                        // executor has read yet), in a loop.
                        inc.watchdog_refusals = inc.watchdog_refusals.saturating_add(1);
                        let wait = decide::backoff(policy, inc.watchdog_refusals);
                        inc.watchdog = watchdog::WatchdogStep::Marked {
                            at,
                            check: crate::engine::node::Queries {
                                in_flight: false,
                                next_at: Some(now + wait),
                                failures: 0,
                            },
                            waiting: None,
                        };
                        again =
                            format!(" (the watchdog's, in {})", humantime::format_duration(wait));
                    }
                    state.queries.next_at = Some(now + policy.confirm_interval);
                    out.push(Notice::warning(
                        name,
                        Reason::ReleaseFailed,
                        format!("release not done: {reason}; the proof starts over{again}"),
                    ));
                }
            }
        }
        if forget {
            self.nodes.remove(name);
        }
        out.extend(self.reevaluate(Some(name), now));
        out
    }

    /// The answer to a [`Action::MarkForFencing`].
    pub fn mark_written(
        &mut self,
        name: &str,
        result: Result<(), String>,
        now: SystemTime,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        let policy = self.node_policies.get(name).unwrap_or(&self.policy);
        if let Some(state) = self.nodes.get_mut(name)
            && let Phase::Incident(inc) = &mut state.phase
        {
            let wait = decide::backoff(policy, watchdog::failed_marks(inc) + 1);
            watchdog::marked(inc, name, result, wait, now, &mut out);
        }
        out.extend(self.reevaluate(Some(name), now));
        out
    }

    /// The answer to a [`Action::CheckWatchdog`].
    pub fn watchdog_checked(
        &mut self,
        name: &str,
        result: watchdog::WatchdogCheck,
        now: SystemTime,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        let policy = self.node_policies.get(name).unwrap_or(&self.policy);
        if let Some(state) = self.nodes.get_mut(name)
            && let Phase::Incident(inc) = &mut state.phase
        {
            let failures = match &inc.watchdog {
                watchdog::WatchdogStep::Marked { check, .. } => check.failures + 1,
                _ => 1,
            };
            let retry = decide::backoff(policy, failures);
            watchdog::checked(inc, name, result, retry, now, &mut out);
        }
        out.extend(self.reevaluate(Some(name), now));
        out
    }

    /// The answer to a [`Action::RemoveTaint`].
    pub fn taint_removed(
        &mut self,
        name: &str,
        result: Result<(), String>,
        now: SystemTime,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        if let Some(state) = self.nodes.get_mut(name)
            && let Phase::Released(rel) = &mut state.phase
        {
            match result {
                Ok(()) => {
                    out.push(Notice::normal(
                        name,
                        Reason::TaintRemoved,
                        "node is Ready again: out-of-service taint removed",
                    ));
                    if rel.power_on == PowerOnStatus::Pending {
                        out.push(Action::Record {
                            node: name.to_string(),
                            record: None,
                        });
                    }
                    state.phase = Phase::Healthy;
                    state.facts.our_taint = false;
                    state.our_taint_removed = Some(now);
                }
                Err(reason) => {
                    rel.removing_taint = false;
                    rel.ready_since = Some(now);
                    out.push(Notice::warning(
                        name,
                        Reason::ReleaseFailed,
                        format!("could not remove the out-of-service taint: {reason}"),
                    ));
                }
            }
        }
        out.extend(self.reevaluate(Some(name), now));
        out
    }
}
