//! Applying a changed configuration without a restart.
//!
//! A background task checks the configuration files every few seconds (and at once on
//! `SIGHUP`; see [`crate::config::watch`]). A changed version goes through every check
//! a start-up does: the whole loader (every node, every file), the cluster's support
//! for its release mechanism, the BMC passwords it keeps in Secrets, the permissions
//! it needs (SelfSubjectAccessReview). Then:
//!
//! - **refused**: anything wrong refuses the *whole* version; the running one is kept
//!   untouched. A Warning Event `ConfigRejected` on the leader Lease (from the leader),
//!   a log line with every problem, and `nodefence_config_last_reload_successful` = 0
//!   say so; the same version is not tried again until the files change again;
//! - **applied**: the control loop's current term ends once its actions under way are
//!   done (no power command of the old configuration overlaps the new one), and a new
//!   term starts with the new drivers, policies and inventory, from the cluster's
//!   state, as a new leader does. A Normal Event `ConfigReloaded` names the nodes
//!   added, removed and changed.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::cluster::events::{Event, EventType, Recorder};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use tokio::sync::Notify;

use super::DaemonOptions;
use crate::cluster::leader::Leadership;
use crate::config::Config;
use crate::config::watch::{ConfigWatch, Fingerprint};
use crate::telemetry::Metrics;

/// A configuration that passed every check, waiting for the control loop.
pub struct Prepared {
    pub config: Config,
    pub version: Fingerprint,
}

/// The hand-over point between the reloader and the control loop (the newest
/// prepared version wins).
#[derive(Clone, Default)]
pub struct Ready(Arc<Mutex<Option<Prepared>>>);

impl Ready {
    fn put(&self, prepared: Prepared) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(prepared);
    }

    /// The prepared version, if one is waiting.
    pub fn take(&self) -> Option<Prepared> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// The running reloader.
pub struct Running {
    pub task: tokio_util::task::AbortOnDropHandle<()>,
    pub ready: Ready,
    /// Notified when a version is ready.
    pub notify: Arc<Notify>,
}

/// Watches, checks and hands over new configurations.
pub struct Reloader {
    watch: ConfigWatch,
    client: Client,
    options: DaemonOptions,
    metrics: Arc<Metrics>,
    recorder: Option<Recorder>,
    cluster_ref: Option<ObjectReference>,
    leadership: Leadership,
}

impl Reloader {
    pub fn new(
        running: &Config,
        client: Client,
        options: &DaemonOptions,
        metrics: Arc<Metrics>,
        recorder: Option<Recorder>,
        cluster_ref: Option<ObjectReference>,
        leadership: Leadership,
    ) -> Self {
        Self {
            watch: ConfigWatch::new(running),
            client,
            options: options.clone(),
            metrics,
            recorder,
            cluster_ref,
            leadership,
        }
    }

    /// Starts checking every `interval` (and on `SIGHUP`).
    pub fn spawn(self, interval: Duration) -> Running {
        let ready = Ready::default();
        let notify = Arc::new(Notify::new());
        let task = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(self.run(
            interval,
            ready.clone(),
            notify.clone(),
        )));
        Running {
            task,
            ready,
            notify,
        }
    }

    async fn run(mut self, interval: Duration, ready: Ready, notify: Arc<Notify>) {
        let mut hangup =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        let mut tick = tokio::time::interval(interval.max(Duration::from_millis(50)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                Some(()) = async {
                    match hangup.as_mut() {
                        Some(h) => h.recv().await,
                        None => std::future::pending().await,
                    }
                } => tracing::info!("SIGHUP: checking the configuration files"),
            }
            let watch = self.watch.clone();
            let Ok(Some(version)) = tokio::task::spawn_blocking(move || watch.changed()).await
            else {
                continue;
            };
            tracing::info!(version = %version.short(), "the configuration files changed: checking the new version");
            match self.prepare().await {
                Ok(config) => {
                    for warning in &config.warnings {
                        tracing::warn!("{warning}");
                    }
                    self.watch.applied(&config);
                    ready.put(Prepared { config, version });
                    notify.notify_one();
                }
                Err(why) => {
                    self.watch.refused(version);
                    self.report_refused(&version, &why).await;
                }
            }
        }
    }

    /// Loads and checks the configuration on disk, as a start-up does.
    async fn prepare(&self) -> Result<Config, String> {
        let path = self.watch.config_path().to_path_buf();
        let loaded = tokio::task::spawn_blocking(move || crate::config::load(&path))
            .await
            .map_err(|e| format!("the loader stopped: {e}"))?
            .map_err(|errors| errors.to_string())?;
        let config = super::admit(loaded, &self.client, &self.options.lease_namespace)
            .await
            .map_err(|e| format!("{e:#}"))?;
        // A new version may need more (release = "delete-node"...): checked first.
        super::check_permissions(&config, &self.client, &self.options)
            .await
            .map_err(|e| format!("{e:#}"))?;
        Ok(config)
    }

    async fn report_refused(&self, version: &Fingerprint, why: &str) {
        self.metrics.config_reload(false);
        let running = self.watch.running().short();
        tracing::error!(
            version = %version.short(),
            running = %running,
            "the new configuration was refused; the running one is kept:\n{why}"
        );
        let first: Vec<&str> = why
            .lines()
            .filter(|l| !l.trim().is_empty())
            .take(3)
            .collect();
        publish(
            self.recorder.as_ref(),
            self.cluster_ref.as_ref(),
            &self.leadership,
            EventType::Warning,
            "ConfigRejected",
            &format!(
                "configuration {} refused whole, configuration {running} still runs: {} \
                 (run `nodefence validate` for every problem)",
                version.short(),
                first.join(" | ")
            ),
        )
        .await;
    }
}

/// What changed between two configurations, for the Event and the log.
pub fn summary(old: &Config, new: &Config) -> String {
    let before: BTreeSet<&String> = old.inventory.nodes.keys().collect();
    let after: BTreeSet<&String> = new.inventory.nodes.keys().collect();
    let added: Vec<&str> = after.difference(&before).map(|s| s.as_str()).collect();
    let removed: Vec<&str> = before.difference(&after).map(|s| s.as_str()).collect();
    let changed: Vec<&str> = after
        .intersection(&before)
        .filter(|name| {
            let (o, n) = (&old.inventory.nodes[**name], &new.inventory.nodes[**name]);
            format!("{:?}{:?}{:?}", o.power, o.fallback, o.policy)
                != format!("{:?}{:?}{:?}", n.power, n.fallback, n.policy)
        })
        .map(|s| s.as_str())
        .collect();
    let list = |v: &[&str]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    let mut text = format!(
        "{} node(s); added: {}; removed: {}; changed: {}",
        after.len(),
        list(&added),
        list(&removed),
        list(&changed)
    );
    if old.agent != new.agent {
        text.push_str("; nodefence.toml changed");
    }
    text
}

/// Metric, log and Event for an applied version.
pub async fn report_applied(
    recorder: Option<&Recorder>,
    cluster_ref: Option<&ObjectReference>,
    leadership: &Leadership,
    metrics: &Metrics,
    version: &Fingerprint,
    summary: &str,
) {
    metrics.config_reload(true);
    tracing::warn!(version = %version.short(), "new configuration applied: {summary}");
    publish(
        recorder,
        cluster_ref,
        leadership,
        EventType::Normal,
        "ConfigReloaded",
        &format!("configuration {} applied: {summary}", version.short()),
    )
    .await;
}

/// An Event on the leader Lease, from the leader only (every replica reads the same
/// files; one Event is enough).
async fn publish(
    recorder: Option<&Recorder>,
    reference: Option<&ObjectReference>,
    leadership: &Leadership,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    let (Some(recorder), Some(reference)) = (recorder, reference) else {
        return;
    };
    if !leadership.is_leader() {
        return;
    }
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(crate::untrusted::event_note(note)),
        action: "Reload".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, reference).await {
        tracing::debug!(error = %e, "could not publish a Kubernetes Event");
    }
}
