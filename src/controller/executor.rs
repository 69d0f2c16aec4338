//! Carries out the engine's actions and reports their results back.
//!
//! Power queries and commands run as tasks (bounded by the driver factory's
//! semaphore); releases go through [`Releaser`], which re-reads and re-checks the node.
//! Power commands check leadership right before they are sent, and read the machine's
//! identity in the same exchange (a remapped BMC must not switch another machine,
//! [`crate::engine::action::Target`]). Power commands and releases also read the pause
//! switch right before ([`PauseCheck`]). In dry-run mode nothing
//! is sent or written: mutations are logged and reported as done, so every decision is
//! still made and shown.

use std::sync::Arc;
use std::time::SystemTime;

use crate::cluster::events::{Event as KubeEvent, EventType, Recorder};
use tokio::sync::mpsc;

use crate::cluster::leader::Leadership;
use crate::cluster::pause::PauseCheck;
use crate::cluster::records::RecordStore;
use crate::cluster::release::{ReleaseError, ReleaseOutcome, Releaser};
use crate::engine::action::Target;
use crate::engine::{Action, Notice, Reason, ReleaseMode, Severity, WatchdogCheck};
use crate::identity::{self, IdentityCheck, MachineIdentity};
use crate::power::{PowerDriver, PowerError, PowerErrorKind, PowerReading, PowerState};
use crate::telemetry::Metrics;

/// Why power-offs are held cluster-wide right now, shared between the controller
/// (which sets it from the engine after every event) and the executor (which reads
/// it between its last reading of a machine and the command). A power-off decided
/// just before a storm was seen must not go out seconds later, after it (simulation
/// seed 2702: sent 7 s after the decision, through a slow API server, 1 s after the
/// storm was seen).
#[derive(Clone, Default)]
pub struct PowerOffHold(Arc<std::sync::Mutex<Option<&'static str>>>);

impl PowerOffHold {
    pub fn set(&self, why: Option<&'static str>) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = why;
    }

    pub fn held(&self) -> Option<&'static str> {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The result of an action, for the engine.
#[derive(Debug)]
pub enum Completion {
    PowerRead {
        node: String,
        result: Result<PowerReading, PowerError>,
    },
    PowerOff {
        node: String,
        result: Result<(), PowerError>,
    },
    PowerOn {
        node: String,
        result: Result<(), PowerError>,
    },
    Release {
        node: String,
        result: Result<(), String>,
        last_sign_of_life: SystemTime,
    },
    Untaint {
        node: String,
        result: Result<(), String>,
    },
    Drained {
        node: String,
        result: Result<bool, String>,
    },
    Identity {
        node: String,
        machine: MachineIdentity,
    },
    Marked {
        node: String,
        result: Result<(), String>,
    },
    WatchdogChecked {
        node: String,
        result: WatchdogCheck,
    },
}

/// Everything the executor needs; cheap to clone into tasks.
#[derive(Clone)]
pub struct Executor {
    pub drivers: Arc<crate::power::registry::NodeDrivers>,
    pub releaser: Releaser,
    pub records: RecordStore,
    pub leadership: Leadership,
    /// The pause switch, read again before every power command and release.
    pub pause: PauseCheck,
    /// The remediation requests, read again before every power command (`None`:
    /// `[remediation] requests` is off, no request can stand).
    pub timed_out_requests: Option<crate::remediation::gate::TimedOutRequests>,
    /// The engine's cluster-wide hold on power-offs (storm protection, a term not yet
    /// synced), as the controller last saw it: checked right before a power-off.
    pub power_off_hold: PowerOffHold,
    pub recorder: Option<Recorder>,
    /// What cluster-wide notices (storm protection) are attached to: the leader Lease.
    pub cluster_ref: Option<k8s_openapi::api::core::v1::ObjectReference>,
    pub metrics: Arc<Metrics>,
    pub dry_run: bool,
    pub completions: mpsc::UnboundedSender<Completion>,
    /// Every action under way (power reads and commands, writes), so a term can end
    /// only once they are done: a reload must not start a new term while the old
    /// one's ForceOff is still in flight.
    pub tasks: tokio_util::task::TaskTracker,
    /// The companions' heartbeat, for the watchdog level (`None`: no listener, the
    /// level refuses).
    pub heartbeat: Option<crate::heartbeat::Heartbeat>,
}

impl Executor {
    /// Builds the Kubernetes Event recorder for this replica.
    pub fn recorder(client: kube::Client, identity: &str) -> Recorder {
        Recorder::new(client, "nodefence", identity)
    }

    fn driver(&self, node: &str) -> Result<Arc<dyn PowerDriver>, PowerError> {
        match self.drivers.get(node) {
            Some(Ok(d)) => Ok(d.clone()),
            Some(Err(e)) => Err(e.clone()),
            None => Err(PowerError::config(format!(
                "node {node} has no inventory entry"
            ))),
        }
    }

    fn driver_name(&self, node: &str) -> &'static str {
        match self.drivers.get(node) {
            Some(Ok(d)) => d.driver_name(),
            _ => "none",
        }
    }

    fn send(&self, c: Completion) {
        // The loop owns the receiver for as long as anything can complete.
        let _ = self.completions.send(c);
    }

    /// Starts `action`; `node_ref` and `uid` identify the Node as the engine judged it.
    pub fn dispatch(
        &self,
        action: Action,
        node_ref: Option<k8s_openapi::api::core::v1::ObjectReference>,
        uid: Option<String>,
    ) {
        match action {
            Action::Notify(notice) => self.notify(notice, node_ref),
            Action::QueryPower { node } => {
                let this = self.clone();
                self.tasks.spawn(async move {
                    let driver_name = this.driver_name(&node);
                    let started = std::time::Instant::now();
                    let result = match this.driver(&node) {
                        Ok(d) => {
                            // The identity of the machine whose reading this is, sent
                            // first so the engine judges the reading with it. An identity
                            // not read (or not asked) changes nothing: the engine keeps
                            // what it knew (never read: unproven).
                            let (identity, reading) = d.read_with_identity().await;
                            match identity {
                                Ok(machine) => this.send(Completion::Identity {
                                    node: node.clone(),
                                    machine,
                                }),
                                Err(e) => {
                                    tracing::debug!(node, error = %e, "machine identity not read")
                                }
                            }
                            reading
                        }
                        Err(e) => Err(e),
                    };
                    // Failed queries are timed too: a slow, failing BMC must show.
                    let latency = result
                        .as_ref()
                        .map_or_else(|_| started.elapsed(), |r| r.latency);
                    this.metrics.power_query(
                        driver_name,
                        crate::telemetry::power_query_result(&result),
                        latency,
                    );
                    this.send(Completion::PowerRead { node, result });
                });
            }
            Action::PowerOff {
                node,
                attempt,
                target,
            } => {
                let this = self.clone();
                self.tasks.spawn(async move {
                    let result = this.power(&node, "off", attempt, &target).await;
                    if let Err(e) = &result
                        && e.kind == PowerErrorKind::Refused
                    {
                        // Also when the term that asked has ended and nobody reads it.
                        tracing::warn!(node, error = %e, "power-off not sent");
                    }
                    this.send(Completion::PowerOff { node, result });
                });
            }
            Action::PowerOn { node, target } => {
                let this = self.clone();
                self.tasks.spawn(async move {
                    let result = this.power(&node, "on", 1, &target).await;
                    this.send(Completion::PowerOn { node, result });
                });
            }
            Action::Release {
                node,
                plan,
                proof,
                steps,
            } => {
                let this = self.clone();
                self.tasks.spawn(async move {
                    let mode_label = match plan.mode {
                        ReleaseMode::OutOfServiceTaint => "out-of-service-taint",
                        ReleaseMode::DeleteNode => "delete-node",
                    };
                    let last_sign_of_life = proof.last_sign_of_life();
                    let proof_label = proof.label();
                    let paused = if this.dry_run {
                        Ok(())
                    } else {
                        this.pause.allows("nothing released").await
                    };
                    let result = if let Err(why) = paused {
                        this.metrics
                            .release_with(mode_label, proof_label, "refused");
                        Err(why)
                    } else if this.dry_run {
                        tracing::warn!(
                            node,
                            mode = mode_label,
                            force_delete_pods = plan.force_delete_pods,
                            delete_volume_attachments = plan.delete_volume_attachments,
                            "dry-run: would release the node's volumes"
                        );
                        Ok(())
                    } else {
                        let uid = uid.unwrap_or_default();
                        let done = this.releaser.release(&node, &uid, &proof, &plan).await;
                        this.metrics.release_with(
                            mode_label,
                            proof_label,
                            done.as_ref().map_or_else(|e| e.label(), |_| "ok"),
                        );
                        if done.is_ok()
                            && let Some(heartbeat) = &this.heartbeat
                        {
                            // Off or reset: its next companion is a new boot's.
                            heartbeat.unmark(&node);
                        }
                        match done {
                            Ok(outcome) => {
                                if outcome.pods_deleted + outcome.volume_attachments_deleted > 0 {
                                    this.notify(
                                        Notice {
                                            node: Some(node.clone()),
                                            severity: Severity::Normal,
                                            reason: Reason::PodsForceDeleted,
                                            message: forced_deletion_text(&outcome),
                                            series: None,
                                        },
                                        node_ref.clone(),
                                    );
                                }
                                tracing::warn!(
                                    node,
                                    release = mode_label,
                                    proof = proof_label,
                                    pods_force_deleted = outcome.pods_deleted,
                                    volume_attachments_deleted = outcome.volume_attachments_deleted,
                                    "node released"
                                );
                                Ok(())
                            }
                            Err(e) => Err(e.to_string()),
                        }
                    };
                    if result.is_ok() {
                        let released = crate::clock::now();
                        this.metrics.time_to_release(
                            released
                                .duration_since(last_sign_of_life)
                                .unwrap_or_default(),
                        );
                        for (step, at) in steps.list(Some(released)) {
                            this.metrics.release_step(
                                step,
                                at.duration_since(steps.last_sign_of_life)
                                    .unwrap_or_default(),
                            );
                        }
                    }
                    this.send(Completion::Release {
                        node,
                        result,
                        last_sign_of_life,
                    });
                });
            }
            Action::CheckDrained { node } => {
                let this = self.clone();
                self.tasks.spawn(async move {
                    let result = this
                        .releaser
                        .drained(&node)
                        .await
                        .map_err(|e| e.to_string());
                    if let Err(e) = &result {
                        tracing::debug!(node, error = %e, "drain check failed");
                    }
                    this.send(Completion::Drained { node, result });
                });
            }
            Action::MarkForFencing { node, context } => {
                let this = self.clone();
                self.tasks.spawn(async move {
                    let result = this.mark_for_fencing(&node, uid.as_deref(), &context).await;
                    this.metrics
                        .watchdog_mark(if result.is_ok() { "ok" } else { "refused" });
                    this.send(Completion::Marked { node, result });
                });
            }
            Action::ClearMark { node } => {
                if let Some(heartbeat) = &self.heartbeat {
                    heartbeat.lift_mark(&node);
                }
                if self.dry_run {
                    return;
                }
                let this = self.clone();
                self.tasks
                    .spawn(async move { this.clear_mark(&node).await });
            }
            Action::HoldMark { node } => {
                if let Some(heartbeat) = &self.heartbeat {
                    tracing::warn!(
                        node,
                        "the node carries a fencing mark an earlier term wrote and is unhealthy: \
                         this term holds it (its acknowledgements carry it) until the watchdog \
                         level or the node's recovery settles it"
                    );
                    heartbeat.hold_mark(&node);
                }
            }
            Action::CheckWatchdog { node, context } => {
                let result = self.check_watchdog(&node, &context);
                self.send(Completion::WatchdogChecked { node, result });
            }
            Action::Record { node, record } => {
                let this = self.clone();
                self.tasks.spawn(async move {
                    if this.dry_run {
                        tracing::info!(node, "dry-run: would update the release record");
                        return;
                    }
                    if let Err(e) = this.records.put(&node, record.as_ref()).await {
                        tracing::warn!(node, error = %e, "could not write the release record; a new leader would not know a power-on is pending");
                    }
                });
            }
            Action::RecordContradiction { node, value, proof } => {
                self.metrics.proof_contradicted(proof.label());
                let this = self.clone();
                self.tasks.spawn(async move {
                    if this.dry_run {
                        tracing::warn!(node, "dry-run: would record the contradicted proof");
                        return;
                    }
                    if let Err(e) = this.releaser.record_contradiction(&node, &value).await {
                        tracing::warn!(node, error = %e, "could not record the contradicted proof on the Node; the taint stays in this term, a new leader would judge the return again");
                    }
                });
            }
            Action::RemoveTaint { node } => {
                let this = self.clone();
                self.tasks.spawn(async move {
                    let result = if this.dry_run {
                        tracing::info!(node, "dry-run: would remove the out-of-service taint");
                        Ok(())
                    } else {
                        let r = this.releaser.untaint(&node).await;
                        this.metrics
                            .release("untaint", r.as_ref().map_or_else(|e| e.label(), |_| "ok"));
                        r.map(|_| ()).map_err(|e| e.to_string())
                    };
                    this.send(Completion::Untaint { node, result });
                });
            }
        }
    }

    async fn power(
        &self,
        node: &str,
        action: &str,
        attempt: u32,
        target: &Target,
    ) -> Result<(), PowerError> {
        let driver = self.driver(node)?;
        if self.dry_run {
            tracing::warn!(node, action, attempt, "dry-run: would send a power command");
            return Ok(());
        }
        if !self.leadership.is_leader() {
            return Err(PowerError::new(
                PowerErrorKind::Refused,
                "not the leader: power command not sent",
            ));
        }
        let what = format!("power-{action} not sent");
        self.pause_allows(driver.as_ref(), action, &what).await?;
        self.requests_allow(node, driver.as_ref(), action, &what)
            .await?;
        if action == "off" {
            // Write-ahead: the next leader must know this was sent (a few quick tries;
            // a command that cannot be recorded is not sent, and retried later).
            let mut tries = 0;
            loop {
                tries += 1;
                match self.releaser.record_power_off(node, attempt).await {
                    Ok(()) => break,
                    Err(ReleaseError::Refused(why)) => {
                        self.metrics
                            .power_command(driver.driver_name(), action, "refused");
                        return Err(PowerError::new(
                            PowerErrorKind::Refused,
                            format!("{why}: power-off not sent"),
                        ));
                    }
                    Err(e) if tries < 4 && self.leadership.is_leader() => {
                        tracing::debug!(node, error = %e, "recording the power-off on the Node; retrying");
                        tokio::time::sleep(std::time::Duration::from_millis(500 * tries)).await;
                    }
                    Err(e) => {
                        return Err(PowerError::unreachable(format!(
                            "the power-off could not be recorded on the Node first ({e}); not sent"
                        )));
                    }
                }
            }
        }
        // Only the pause switch and the requests are read between this check and the
        // command (bounded by their timeouts): the machine read here is the machine
        // the command reaches.
        let state = match self.pre_check(node, driver.as_ref(), target).await {
            Ok(state) => state,
            Err(e) => {
                self.metrics
                    .power_command(driver.driver_name(), action, "refused");
                return Err(e);
            }
        };
        // Again, both at once: the pause may have been switched on, or a request have
        // timed out, while the power-off was recorded and the machine read (seed 3686:
        // under a slow API server a ForceOff went out 1 s after its request timed out,
        // 4 s after the first look).
        let (paused, requests) = tokio::join!(
            self.pause_allows(driver.as_ref(), action, &what),
            self.requests_allow(node, driver.as_ref(), action, &what),
        );
        paused?;
        requests?;
        // And leadership, right before the command: the checks above can take
        // seconds against a slow API server or BMC (seed 2702: a deposed leader's
        // ForceOff went out 7 s after its decision, 7 s after it lost the Lease).
        if !self.leadership.is_leader() {
            self.metrics
                .power_command(driver.driver_name(), action, "refused");
            return Err(PowerError::new(
                PowerErrorKind::Refused,
                "no longer the leader: power command not sent",
            ));
        }
        if action == "off"
            && let Some(why) = self.power_off_hold.held()
        {
            self.metrics
                .power_command(driver.driver_name(), action, "refused");
            return Err(PowerError::new(
                PowerErrorKind::Refused,
                format!("{why}: power-off not sent"),
            ));
        }
        if action == "on" && matches!(state, PowerState::On | PowerState::PoweringOn) {
            tracing::info!(node, %state, "the machine is on already: power-on not sent");
            return Ok(());
        }
        // The engine may decide on a reading that is no longer the machine's (a BMC
        // that answered for another machine until just now): a machine already off
        // gets no second ForceOff (seeds 5121, 5439, 6483). Nothing is released on
        // this: the proof still needs its fresh Off readings.
        if action == "off" && state == PowerState::Off {
            tracing::info!(node, "the machine is off already: power-off not sent");
            return Ok(());
        }
        tracing::warn!(
            node,
            action,
            attempt,
            driver = driver.driver_name(),
            "sending power command"
        );
        let result = match action {
            "off" => driver.power_off().await,
            _ => driver.power_on().await,
        };
        self.metrics.power_command(
            driver.driver_name(),
            action,
            if result.is_ok() { "ok" } else { "error" },
        );
        result
    }

    /// The watchdog level's mark: refused unless this replica leads, fencing is not
    /// paused and the node's companion reports an armed watchdog (a mark without one
    /// proves nothing and would only stop a node's feeding for nothing). The
    /// acknowledgements carry the mark first, then the Node's annotation is written;
    /// the release rule counts from the API server's answer.
    async fn mark_for_fencing(
        &self,
        node: &str,
        uid: Option<&str>,
        context: &crate::engine::WatchdogContext,
    ) -> Result<(), String> {
        let Some(heartbeat) = &self.heartbeat else {
            return Err("no companion listener (nodefence run --companion-listen)".into());
        };
        heartbeat.watchdog_usable(node, context)?;
        if self.dry_run {
            tracing::warn!(
                node,
                "dry-run: would mark the node for fencing by its watchdog"
            );
            return Err("dry-run: the mark is not written".into());
        }
        if !self.leadership.is_leader() {
            return Err("not the leader: the mark is not written".into());
        }
        self.pause.allows("the mark is not written").await?;
        if let Some(check) = &self.timed_out_requests {
            check.allows(node, "the mark is not written").await?;
        }
        heartbeat.mark(node);
        match self.releaser.mark_for_fencing(node, uid).await {
            Ok(()) => {
                heartbeat.mark_written(node);
                tracing::warn!(node, "marked for fencing by its hardware watchdog");
                Ok(())
            }
            // The acknowledgements keep the mark: the node may already have stopped
            // feeding on it, and telling it otherwise proves nothing either way.
            Err(e) => Err(e.to_string()),
        }
    }

    /// Removes the node's fencing mark from the Node, trying again on failure (a mark
    /// left standing for the boot that runs would stop its companion at the next read
    /// of it, and let it answer its peers "neither" while the heartbeat counts its
    /// hold): once removed, the heartbeat proves its hold again.
    async fn clear_mark(&self, node: &str) {
        let mut wait = std::time::Duration::from_secs(1);
        for attempt in 1..=6 {
            if !self.leadership.is_leader() {
                return;
            }
            match self.releaser.clear_mark(node).await {
                Ok(()) => {
                    if let Some(heartbeat) = &self.heartbeat {
                        heartbeat.mark_removed(node);
                    }
                    return;
                }
                Err(e) if attempt < 6 => {
                    tracing::warn!(node, attempt, error = %e, "could not remove the node's fencing mark; trying again");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(std::time::Duration::from_secs(30));
                }
                Err(e) => {
                    tracing::error!(node, error = %e, "could not remove the node's fencing mark: its companion stops feeding its watchdog whenever it reads it (only while the leader is silent to it); remove the annotation nodefence.io/fencing-mark by hand");
                }
            }
        }
    }

    /// The watchdog level's release rule, applied now to what the heartbeat knows.
    fn check_watchdog(
        &self,
        node: &str,
        context: &crate::engine::WatchdogContext,
    ) -> WatchdogCheck {
        use crate::watchdog::release::Verdict;
        let Some(heartbeat) = &self.heartbeat else {
            return WatchdogCheck::Refused(
                "no companion listener (nodefence run --companion-listen)".into(),
            );
        };
        let now = heartbeat.now();
        match heartbeat.watchdog_verdict(node, context) {
            Verdict::Release(proof) => WatchdogCheck::Proven(proof),
            Verdict::Wait { until, why } => WatchdogCheck::Wait {
                // The majority's wait says `until: now`: asked again shortly.
                retry_at: crate::clock::now()
                    + until
                        .saturating_sub(now)
                        .max(std::time::Duration::from_millis(500)),
                why,
            },
            Verdict::Refuse(why) => WatchdogCheck::Refused(why),
        }
    }

    /// Refuses a power command while fencing is paused or the switch cannot be read.
    /// Refuses a power command while a remediation request for the node stands timed
    /// out (its requester moved on to the next remediator), or the requests cannot be
    /// read.
    async fn requests_allow(
        &self,
        node: &str,
        driver: &dyn PowerDriver,
        action: &str,
        what: &str,
    ) -> Result<(), PowerError> {
        let Some(check) = &self.timed_out_requests else {
            return Ok(());
        };
        check.allows(node, what).await.map_err(|why| {
            self.metrics
                .power_command(driver.driver_name(), action, "refused");
            PowerError::new(PowerErrorKind::Refused, why)
        })
    }

    async fn pause_allows(
        &self,
        driver: &dyn PowerDriver,
        action: &str,
        what: &str,
    ) -> Result<(), PowerError> {
        self.pause.allows(what).await.map_err(|why| {
            self.metrics
                .power_command(driver.driver_name(), action, "refused");
            PowerError::new(PowerErrorKind::Refused, why)
        })
    }

    /// Reads the machine (its power state and identity, in one exchange) immediately
    /// before a power command, and refuses the command unless the machine read is
    /// the node's own (a mismatch always; an unproven identity under
    /// `require_identity`) and its power source answers. The identity also goes to
    /// the engine, which then blocks the node on a mismatch.
    async fn pre_check(
        &self,
        node: &str,
        driver: &dyn PowerDriver,
        target: &Target,
    ) -> Result<PowerState, PowerError> {
        let started = std::time::Instant::now();
        let (identity, reading) = driver.read_with_identity().await;
        let latency = reading
            .as_ref()
            .map_or_else(|_| started.elapsed(), |r| r.latency);
        self.metrics.power_query(
            driver.driver_name(),
            crate::telemetry::power_query_result(&reading),
            latency,
        );
        let reading = reading.map_err(|e| {
            PowerError::new(
                e.kind,
                format!("the machine could not be read just before the command ({e}); not sent"),
            )
        })?;
        let check = match &identity {
            Ok(machine) => {
                self.send(Completion::Identity {
                    node: node.to_string(),
                    machine: machine.clone(),
                });
                identity::check(&target.node, machine)
            }
            Err(e) => IdentityCheck::Unknown(format!("the machine's identity was not read ({e})")),
        };
        if check.is_mismatch() || (target.require_identity && !check.is_match()) {
            return Err(PowerError::new(
                PowerErrorKind::Identity,
                format!(
                    "the power source is not proven to control this node's machine just before the command ({}); not sent",
                    check.describe()
                ),
            ));
        }
        Ok(reading.state)
    }

    /// Log + metric always; a Kubernetes Event on the Node unless dry-run.
    fn notify(
        &self,
        notice: Notice,
        node_ref: Option<k8s_openapi::api::core::v1::ObjectReference>,
    ) {
        let warning = notice.severity == Severity::Warning;
        let node = notice.node.as_deref().unwrap_or("-");
        if warning {
            tracing::warn!(node, reason = notice.reason.as_str(), "{}", notice.message);
        } else {
            tracing::info!(node, reason = notice.reason.as_str(), "{}", notice.message);
        }
        self.metrics.notice(notice.reason.as_str(), warning);
        let node_ref = if notice.node.is_none() {
            self.cluster_ref.clone()
        } else {
            node_ref
        };
        let (Some(recorder), Some(reference), false) =
            (self.recorder.clone(), node_ref, self.dry_run)
        else {
            return;
        };
        tokio::spawn(async move {
            let event = KubeEvent {
                type_: if warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: notice.reason.as_str().to_string(),
                note: Some(crate::untrusted::event_note(&notice.message)),
                action: "Fencing".into(),
                secondary: None,
            };
            if let Err(e) = recorder.publish_in(&event, notice.series, &reference).await {
                tracing::debug!(error = %e, "could not publish a Kubernetes Event");
            }
        });
    }
}

/// What the forced deletions of a release did, for its Event.
fn forced_deletion_text(outcome: &ReleaseOutcome) -> String {
    let mut parts = Vec::new();
    if outcome.pods_deleted > 0 {
        parts.push(format!(
            "{} pod(s) force-deleted (grace period 0) so their replacements can start elsewhere",
            outcome.pods_deleted
        ));
    }
    if outcome.volume_attachments_deleted > 0 {
        parts.push(format!(
            "{} VolumeAttachment(s) deleted",
            outcome.volume_attachments_deleted
        ));
    }
    format!("machine confirmed Off: {}", parts.join("; "))
}
