//! A fencing topology: several power methods for one machine, tried in order.
//!
//! Like Pacemaker's fencing levels, a node may have a primary method (its BMC) and
//! fallbacks (an exec'd PDU agent, ...) written as `fallback` in the inventory.
//! [`TopologyDriver`] presents them as one [`PowerDriver`]:
//!
//! - `status`: the first level that answers with certainty (`On` or `Off`) decides;
//!   errors and uncertain states (transitions, paused, unknown) move to the next level.
//!   A level that cannot be reached never makes the machine look off.
//! - `power_off`: each level in turn sends its off command and must *confirm* Off
//!   through its own readings ([`confirm_state`]); the first that does ends the
//!   command. The caller still confirms Off again through `status`.
//! - `power_on`: the first level whose command is accepted; `reboot` is refused (the
//!   confirm loop reboots as off, confirm, on, confirm).
//!
//! [`overall`] is the same status decision taken from readings already made: the BMC
//! monitor reads every level once per pass (through [`PowerDriver::levels`]) to check
//! each on its own, and derives the node's answer from those readings.
//!
//! `driver_name` is the first level's: tables, logs and metric labels keep showing
//! the node's primary driver (the same name the inventory shows for it), and the
//! label set stays small; `endpoint` names every level.

use std::fmt::Write as _;
use std::sync::Arc;

use async_trait::async_trait;

use super::confirm::{ConfirmPolicy, confirm_state};
use super::{CommandReading, PowerDriver, PowerError, PowerErrorKind, PowerReading, PowerState};
use crate::identity::{MachineIdentity, NodeIdentity};

/// Several power methods for one machine, in order (see the module documentation).
pub struct TopologyDriver {
    levels: Vec<Arc<dyn PowerDriver>>,
    confirm: ConfirmPolicy,
}

impl TopologyDriver {
    /// `levels` in order, the primary first; `confirm` proves each level's power off.
    /// None when `levels` is empty.
    pub fn new(levels: Vec<Arc<dyn PowerDriver>>, confirm: ConfirmPolicy) -> Option<Self> {
        (!levels.is_empty()).then_some(Self { levels, confirm })
    }

    /// Reads the levels in order until one answers with certainty (that one last);
    /// warns when a fallback answered because earlier levels failed.
    async fn read_levels(&self) -> Vec<Result<PowerReading, PowerError>> {
        let mut readings = Vec::with_capacity(self.levels.len());
        for level in &self.levels {
            let reading = level.status().await;
            let certain = is_certain(&reading);
            readings.push(reading);
            if certain {
                break;
            }
        }
        if readings.len() > 1 && readings.last().is_some_and(is_certain) {
            let failed: Vec<String> = readings
                .iter()
                .zip(&self.levels)
                .enumerate()
                .filter_map(|(i, (r, l))| {
                    r.as_ref()
                        .err()
                        .map(|e| format!("{}: {e}", Self::label(i, l.as_ref())))
                })
                .collect();
            if !failed.is_empty() {
                // The answer is good, but an earlier method is broken: say so, or a
                // dead primary would only show when it is needed.
                let i = readings.len() - 1;
                tracing::warn!(
                    level = %Self::label(i, self.levels[i].as_ref()),
                    failed = %failed.join("; "),
                    "power state read from a fallback level; earlier levels failed"
                );
            }
        }
        readings
    }

    fn label(i: usize, level: &dyn PowerDriver) -> String {
        format!(
            "level {} ({} {})",
            i + 1,
            level.driver_name(),
            level.endpoint()
        )
    }
}

/// One error naming every level's failure. Its kind is the first level's (the
/// primary's failure is what an operator looks at first).
fn combined(what: &str, failures: Vec<(String, PowerError)>) -> PowerError {
    let kind = failures
        .first()
        .map_or(PowerErrorKind::Config, |(_, e)| e.kind);
    let mut message = format!("{what} on every level:");
    for (label, err) in &failures {
        let _ = write!(message, " {label}: {err};");
    }
    message.pop();
    PowerError::new(kind, message)
}

/// `reading` with the latency of the whole call since `started` (the levels that
/// failed or hesitated before the deciding one included), so a slow or hung primary
/// shows in the power-query latency metric and in `nodefence status`.
fn whole_call(
    mut reading: Result<PowerReading, PowerError>,
    started: tokio::time::Instant,
) -> Result<PowerReading, PowerError> {
    if let Ok(r) = &mut reading {
        r.latency = started.elapsed();
    }
    reading
}

/// True for an answer that decides a topology's status: `On` or `Off`.
fn is_certain(reading: &Result<PowerReading, PowerError>) -> bool {
    matches!(reading, Ok(r) if matches!(r.state, PowerState::On | PowerState::Off))
}

/// A topology's power state from its levels' readings, in level order: exactly what
/// [`TopologyDriver::status`] answers. The first certain reading (`On`, `Off`)
/// decides; else the first uncertain one; else an error naming every level's failure.
/// `readings` may stop after the first certain one (as `status` reads them) or hold
/// every level's (as the BMC monitor reads them, each once): the answer is the same.
pub fn overall(
    levels: &[Arc<dyn PowerDriver>],
    readings: Vec<Result<PowerReading, PowerError>>,
) -> Result<PowerReading, PowerError> {
    let mut uncertain: Option<PowerReading> = None;
    let mut failures = Vec::new();
    for (i, (reading, level)) in readings.into_iter().zip(levels).enumerate() {
        match reading {
            Ok(r) if matches!(r.state, PowerState::On | PowerState::Off) => return Ok(r),
            Ok(r) => {
                if uncertain.is_none() {
                    uncertain = Some(r);
                }
            }
            Err(e) => failures.push((TopologyDriver::label(i, level.as_ref()), e)),
        }
    }
    match uncertain {
        Some(reading) => Ok(reading),
        None => Err(combined("status failed", failures)),
    }
}

#[async_trait]
impl PowerDriver for TopologyDriver {
    fn levels(&self) -> &[Arc<dyn PowerDriver>] {
        &self.levels
    }

    fn driver_name(&self) -> &'static str {
        self.levels.first().map_or("topology", |l| l.driver_name())
    }

    fn endpoint(&self) -> String {
        self.levels
            .iter()
            .map(|l| format!("{} {}", l.driver_name(), l.endpoint()))
            .collect::<Vec<_>>()
            .join(" → ")
    }

    async fn status(&self) -> Result<PowerReading, PowerError> {
        let started = tokio::time::Instant::now();
        whole_call(overall(&self.levels, self.read_levels().await), started)
    }

    async fn read_with_identity(
        &self,
    ) -> (
        Result<MachineIdentity, PowerError>,
        Result<PowerReading, PowerError>,
    ) {
        let read = self.read_for_command().await;
        (read.identity, read.reading)
    }

    async fn read_for_command(&self) -> CommandReading {
        let started = tokio::time::Instant::now();
        let readings = self.read_levels().await;
        let deciding = readings.len().saturating_sub(1);
        let decided = readings.last().is_some_and(is_certain);
        let reading = whole_call(overall(&self.levels, readings), started);
        let identity = match decided {
            true => {
                let level = &self.levels[deciding];
                match level.machine_identity().await {
                    Ok(MachineIdentity::Unavailable(why)) if deciding > 0 => {
                        Ok(MachineIdentity::Unavailable(format!(
                            "{} read the power state and cannot prove which machine it \
                             controls ({why}); what another level proved does not vouch for it",
                            Self::label(deciding, level.as_ref())
                        )))
                    }
                    answer => answer,
                }
            }
            // No certain reading: nothing can count as Off, and asking every level
            // again would only wait for the broken ones twice.
            false => Err(super::not_asked(
                reading
                    .as_ref()
                    .err()
                    .map_or(PowerErrorKind::Protocol, |e| e.kind),
            )),
        };
        CommandReading {
            identity,
            reading,
            level: decided.then_some(deciding),
        }
    }

    async fn power_off(&self) -> Result<(), PowerError> {
        let mut failures = Vec::new();
        for (i, level) in self.levels.iter().enumerate() {
            let label = Self::label(i, level.as_ref());
            if let Err(e) = level.power_off().await {
                tracing::warn!(level = %label, error = %e, "power off failed; trying the next level");
                failures.push((label, e));
                continue;
            }
            match confirm_state(level.as_ref(), PowerState::Off, &self.confirm).await {
                Ok(_) => {
                    if i > 0 {
                        tracing::info!(level = %label, "powered off by a fallback level");
                    }
                    return Ok(());
                }
                Err(not) => {
                    tracing::warn!(level = %label, error = %not, "power off not confirmed; trying the next level");
                    let kind = not
                        .last_error
                        .as_ref()
                        .map_or(PowerErrorKind::Protocol, |e| e.kind);
                    failures.push((label, PowerError::new(kind, not.to_string())));
                }
            }
        }
        Err(combined("power off failed", failures))
    }

    async fn power_on(&self) -> Result<(), PowerError> {
        let mut failures = Vec::new();
        for (i, level) in self.levels.iter().enumerate() {
            match level.power_on().await {
                Ok(()) => return Ok(()),
                Err(e) => failures.push((Self::label(i, level.as_ref()), e)),
            }
        }
        Err(combined("power on failed", failures))
    }

    async fn reboot(&self) -> Result<(), PowerError> {
        Err(PowerError::unsupported(
            "a fencing topology does not send one-shot resets: reboot as off, confirm, on",
        ))
    }

    async fn machine_identity(&self) -> Result<MachineIdentity, PowerError> {
        let mut first: Option<Result<MachineIdentity, PowerError>> = None;
        for level in &self.levels {
            let answer = level.machine_identity().await;
            if matches!(
                answer,
                Ok(MachineIdentity::Uuid(_) | MachineIdentity::InstanceId(_))
            ) {
                return answer;
            }
            if first.is_none() {
                first = Some(answer);
            }
        }
        first.unwrap_or_else(|| {
            Ok(MachineIdentity::Unavailable(
                "no power method can report the machine's identity".into(),
            ))
        })
    }

    fn node_identity(&self, node: &NodeIdentity) {
        for level in &self.levels {
            level.node_identity(node);
        }
    }

    async fn close(&self) {
        for level in &self.levels {
            level.close().await;
        }
    }
}

#[cfg(test)]
mod tests;
