//! Proving a power state, and carrying out a power action with proof.
//!
//! A command's reply proves nothing (BMCs accept a ForceOff and then do not act, or
//! report Off for a moment and flap back). A state is *confirmed* only after
//! `readings` consecutive fresh readings of exactly that state, `interval` apart,
//! within `timeout`. Any other reading or an error in between starts the count again.

use std::fmt;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::{PowerAction, PowerDriver, PowerError, PowerReading, PowerState};

/// How a state is proven.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConfirmPolicy {
    /// Consecutive matching readings required (at least 1).
    pub readings: u32,
    /// Pause between readings.
    pub interval: Duration,
    /// Give up after this long (counted from the first reading, command excluded).
    pub timeout: Duration,
}

impl Default for ConfirmPolicy {
    fn default() -> Self {
        Self {
            readings: 3,
            interval: Duration::from_millis(500),
            timeout: Duration::from_secs(120),
        }
    }
}

/// Proof that a machine reached a state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confirmation {
    pub state: PowerState,
    /// The consecutive readings that proved it, oldest first.
    pub readings: Vec<PowerReading>,
}

impl Confirmation {
    /// Time of the newest reading in the proof.
    pub fn confirmed_at(&self) -> SystemTime {
        self.readings
            .last()
            .map(|r| r.at)
            .unwrap_or(SystemTime::UNIX_EPOCH)
    }
}

/// Why a state could not be proven.
#[derive(Debug, Clone, thiserror::Error)]
pub struct NotConfirmed {
    pub wanted: PowerState,
    /// The last state the source reported, if any reading succeeded.
    pub last_state: Option<PowerState>,
    /// The last error, if the last attempt failed.
    pub last_error: Option<PowerError>,
    /// Readings of the wanted state followed by a different one: the source flapped or lied.
    pub contradictions: u32,
    pub attempts: u32,
    pub waited: Duration,
}

impl fmt::Display for NotConfirmed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "could not confirm {} after {} readings in {}",
            self.wanted,
            self.attempts,
            humantime::format_duration(round_ms(self.waited))
        )?;
        if let Some(state) = &self.last_state {
            write!(f, "; last reported state {state}")?;
        }
        if self.contradictions > 0 {
            write!(
                f,
                "; the source reported {} and then something else {} time(s): contradicting readings",
                self.wanted, self.contradictions
            )?;
        }
        if let Some(err) = &self.last_error {
            write!(f, "; last error: {err}")?;
        }
        Ok(())
    }
}

fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}

/// Reads `driver` until `policy.readings` consecutive readings are `wanted`.
pub async fn confirm_state(
    driver: &dyn PowerDriver,
    wanted: PowerState,
    policy: &ConfirmPolicy,
) -> Result<Confirmation, NotConfirmed> {
    let started = Instant::now();
    let deadline = started + policy.timeout;
    let needed = policy.readings.max(1) as usize;
    let mut streak: Vec<PowerReading> = Vec::with_capacity(needed);
    let mut last_state = None;
    let mut last_error: Option<PowerError>;
    let mut contradictions = 0;
    let mut attempts = 0;
    loop {
        attempts += 1;
        let remaining = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(remaining, driver.status()).await {
            Ok(Ok(reading)) => {
                last_error = None;
                last_state = Some(reading.state.clone());
                if reading.state == wanted {
                    streak.push(reading);
                    if streak.len() >= needed {
                        return Ok(Confirmation {
                            state: wanted,
                            readings: streak,
                        });
                    }
                } else {
                    if !streak.is_empty() {
                        contradictions += 1;
                    }
                    streak.clear();
                }
            }
            Ok(Err(err)) => {
                last_error = Some(err);
                streak.clear();
            }
            Err(_elapsed) => {
                last_error = Some(PowerError::unreachable(
                    "status query did not finish before the confirmation deadline",
                ));
                streak.clear();
            }
        }
        let now = Instant::now();
        if now + policy.interval > deadline {
            return Err(NotConfirmed {
                wanted,
                last_state,
                last_error,
                contradictions,
                attempts,
                waited: now - started,
            });
        }
        tokio::time::sleep(policy.interval).await;
    }
}

/// Result of [`execute`]: the proofs, and whether a command had to be sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionOutcome {
    pub action: PowerAction,
    /// The state read before anything was done.
    pub initial: PowerReading,
    /// For `off` and `reboot`: proof the machine was off.
    pub off: Option<Confirmation>,
    /// For `on` and `reboot`: proof the machine was on.
    pub on: Option<Confirmation>,
    /// Commands that were sent, in order ("off", "on"). Empty when the machine was
    /// already in the wanted state.
    pub commands_sent: Vec<PowerAction>,
}

/// Why [`execute`] did not end with a proven state.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ActionError {
    #[error("reading the power state failed: {0}")]
    Query(PowerError),
    #[error("power {action} command failed: {error}")]
    Command {
        action: PowerAction,
        error: PowerError,
    },
    #[error(transparent)]
    NotConfirmed(#[from] NotConfirmed),
}

impl ActionError {
    /// A stable label for metrics and exit codes.
    pub fn label(&self) -> &'static str {
        match self {
            ActionError::Query(e) | ActionError::Command { error: e, .. } => e.kind.as_str(),
            ActionError::NotConfirmed(_) => "not_confirmed",
        }
    }
}

/// Carries out `action` and proves its result.
///
/// - `off`: if the machine already reads Off no command is sent (some BMCs reject a
///   reset of an off machine); otherwise a forced power off. Then Off is confirmed.
/// - `on`: the same with On.
/// - `reboot`: `off` then `on`, each confirmed, so the off phase is always observed.
pub async fn execute(
    driver: &dyn PowerDriver,
    action: PowerAction,
    policy: &ConfirmPolicy,
) -> Result<ActionOutcome, ActionError> {
    let initial = driver.status().await.map_err(ActionError::Query)?;
    execute_from(driver, action, policy, initial).await
}

/// [`execute`] from a reading already made (`initial`, the reading the machine's
/// identity was checked on, [`PowerDriver::read_for_command`]): no second reading
/// stands between the check and the first command.
pub async fn execute_from(
    driver: &dyn PowerDriver,
    action: PowerAction,
    policy: &ConfirmPolicy,
    initial: PowerReading,
) -> Result<ActionOutcome, ActionError> {
    let mut outcome = ActionOutcome {
        action,
        initial: initial.clone(),
        off: None,
        on: None,
        commands_sent: Vec::new(),
    };
    if matches!(action, PowerAction::Off | PowerAction::Reboot) {
        if !initial.state.is_off() {
            driver
                .power_off()
                .await
                .map_err(|error| ActionError::Command {
                    action: PowerAction::Off,
                    error,
                })?;
            outcome.commands_sent.push(PowerAction::Off);
        }
        outcome.off = Some(confirm_state(driver, PowerState::Off, policy).await?);
    }
    if matches!(action, PowerAction::On | PowerAction::Reboot) {
        let already_on = action == PowerAction::On && initial.state.is_on();
        if !already_on {
            driver
                .power_on()
                .await
                .map_err(|error| ActionError::Command {
                    action: PowerAction::On,
                    error,
                })?;
            outcome.commands_sent.push(PowerAction::On);
        }
        outcome.on = Some(confirm_state(driver, PowerState::On, policy).await?);
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    //! The confirm loop against a scripted driver, on paused time.
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use async_trait::async_trait;

    use super::*;

    /// Answers `status` from a script; the last entry repeats.
    struct Scripted {
        script: Mutex<VecDeque<Result<PowerState, PowerError>>>,
        commands: Mutex<Vec<PowerAction>>,
    }

    impl Scripted {
        fn new(script: Vec<Result<PowerState, PowerError>>) -> Self {
            Self {
                script: Mutex::new(script.into()),
                commands: Mutex::new(Vec::new()),
            }
        }
        fn commands(&self) -> Vec<PowerAction> {
            self.commands.lock().map(|c| c.clone()).unwrap_or_default()
        }
        fn record(&self, a: PowerAction) {
            if let Ok(mut c) = self.commands.lock() {
                c.push(a);
            }
        }
    }

    #[async_trait]
    impl PowerDriver for Scripted {
        fn driver_name(&self) -> &'static str {
            "scripted"
        }
        fn endpoint(&self) -> String {
            "script".into()
        }
        async fn status(&self) -> Result<PowerReading, PowerError> {
            let mut script = self
                .script
                .lock()
                .map_err(|_| PowerError::protocol("poisoned"))?;
            let next = if script.len() > 1 {
                script.pop_front()
            } else {
                script.front().cloned()
            };
            let state = next.unwrap_or(Ok(PowerState::Unknown(String::new())))?;
            Ok(PowerReading {
                state,
                at: crate::clock::now(),
                latency: Duration::ZERO,
            })
        }
        async fn power_off(&self) -> Result<(), PowerError> {
            self.record(PowerAction::Off);
            Ok(())
        }
        async fn power_on(&self) -> Result<(), PowerError> {
            self.record(PowerAction::On);
            Ok(())
        }
        async fn reboot(&self) -> Result<(), PowerError> {
            self.record(PowerAction::Reboot);
            Ok(())
        }
    }

    fn policy() -> ConfirmPolicy {
        ConfirmPolicy {
            readings: 3,
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(10),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn three_consecutive_offs_confirm() {
        let d = Scripted::new(vec![Ok(PowerState::Off)]);
        let c = confirm_state(&d, PowerState::Off, &policy()).await;
        assert!(matches!(c, Ok(ref c) if c.readings.len() == 3), "{c:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn flapping_source_is_never_confirmed_and_is_called_contradicting() {
        let mut script = Vec::new();
        for _ in 0..20 {
            script.push(Ok(PowerState::Off));
            script.push(Ok(PowerState::Off));
            script.push(Ok(PowerState::On));
        }
        let d = Scripted::new(script);
        let err = confirm_state(&d, PowerState::Off, &policy())
            .await
            .expect_err("a flapping source must not confirm off");
        assert!(err.contradictions >= 2, "{err}");
        assert!(err.to_string().contains("contradicting"), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn errors_and_transitional_states_reset_the_count() {
        let d = Scripted::new(vec![
            Ok(PowerState::Off),
            Ok(PowerState::Off),
            Err(PowerError::unreachable("connection refused")),
            Ok(PowerState::Off),
            Ok(PowerState::PoweringOff),
            Ok(PowerState::Off),
            Ok(PowerState::Off),
            Ok(PowerState::Off),
        ]);
        let c = confirm_state(&d, PowerState::Off, &policy()).await;
        let c = c.expect("eventually three in a row");
        assert_eq!(c.readings.len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn unknown_and_paused_never_count_as_off() {
        for state in [
            PowerState::Unknown(String::new()),
            PowerState::Paused,
            PowerState::PoweringOff,
        ] {
            let d = Scripted::new(vec![Ok(state.clone())]);
            let err = confirm_state(&d, PowerState::Off, &policy()).await;
            assert!(err.is_err(), "{state} must not confirm off");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn already_off_sends_no_command() {
        let d = Scripted::new(vec![Ok(PowerState::Off)]);
        let out = execute(&d, PowerAction::Off, &policy()).await.expect("off");
        assert!(out.commands_sent.is_empty());
        assert!(d.commands().is_empty());
        assert!(out.off.is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn off_sends_one_command_and_proves_it() {
        let d = Scripted::new(vec![
            Ok(PowerState::On),
            Ok(PowerState::PoweringOff),
            Ok(PowerState::Off),
        ]);
        let out = execute(&d, PowerAction::Off, &policy()).await.expect("off");
        assert_eq!(d.commands(), vec![PowerAction::Off]);
        assert_eq!(out.off.map(|c| c.readings.len()), Some(3));
    }

    #[tokio::test(start_paused = true)]
    async fn reboot_observes_off_before_powering_on() {
        let d = Scripted::new(vec![
            Ok(PowerState::On),
            Ok(PowerState::Off),
            Ok(PowerState::Off),
            Ok(PowerState::Off),
            Ok(PowerState::On),
        ]);
        let out = execute(&d, PowerAction::Reboot, &policy())
            .await
            .expect("reboot");
        assert_eq!(d.commands(), vec![PowerAction::Off, PowerAction::On]);
        assert!(out.off.is_some() && out.on.is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn reboot_never_powers_on_when_off_was_not_seen() {
        let d = Scripted::new(vec![Ok(PowerState::On)]);
        let err = execute(&d, PowerAction::Reboot, &policy()).await;
        assert!(matches!(err, Err(ActionError::NotConfirmed(_))), "{err:?}");
        assert_eq!(d.commands(), vec![PowerAction::Off]);
    }

    #[tokio::test(start_paused = true)]
    async fn failed_first_query_sends_nothing() {
        let d = Scripted::new(vec![Err(PowerError::auth("401 Unauthorized"))]);
        let err = execute(&d, PowerAction::Off, &policy()).await;
        assert!(
            matches!(err, Err(ActionError::Query(ref e)) if e.kind == crate::power::PowerErrorKind::Auth)
        );
        assert!(d.commands().is_empty());
    }
}
