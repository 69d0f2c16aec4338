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
//!
//! With `[metal3] hosts = true` the BareMetalHosts are a source too: when one changes
//! ([`super::host_watch`]: its spec, annotations, or the version of its credentials
//! Secret Metal3 recorded, a second after the change) and every `[metal3]
//! resync_interval` (1 minute by default) the reloader lists them again (and the
//! Nodes and Cluster API objects that match them) exactly as a start-up does, and a
//! result that differs from the running one's ([`crate::metal3::inventory::
//! fingerprint`]: a host added, removed or changed, a Node newly matched, a host's
//! Secret rotated) is a new version like a changed file: checked whole, then applied
//! (reading the Secrets again) or refused. A refused result is tried again at each
//! resync, not at each file check: what made it fail may be outside the hosts (a
//! host's Secret not created yet), and the Warning Event says so once per resync
//! until it is fixed.
//!
//! The Secrets the inventory's `password_secret`s name are watched
//! ([`super::secret_watch`]): when one's data changes (a rotated password), the whole
//! configuration is read and checked again as for a changed file, and the Event says
//! which Secret. A refused state is tried again when a Secret changes again.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::cluster::events::{Event, EventType, Recorder};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use tokio::sync::Notify;

use super::DaemonOptions;
use super::host_watch::HostWatch;
use super::secret_watch::SecretWatch;
use crate::cluster::leader::Leadership;
use crate::config::watch::{ConfigWatch, Fingerprint};
use crate::config::{Config, SecretsRead};
use crate::telemetry::Metrics;

/// A configuration that passed every check, waiting for the control loop.
pub struct Prepared {
    pub config: Config,
    pub version: Fingerprint,
    /// Why it was read, when not for its files: "Secret nodefence/bmc changed".
    pub cause: Option<String>,
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

/// The BareMetalHosts as the running configuration read them.
struct HostsWatch {
    settings: crate::config::Metal3Settings,
    every: Duration,
    /// When to read them again.
    next: tokio::time::Instant,
    /// When they were last read.
    last_read: tokio::time::Instant,
    /// The running configuration's hosts.
    running: Option<u64>,
    /// Their changes, as they happen.
    watch: HostWatch,
}

/// How long after a host's change its hosts are read again: the changes of one
/// rotation (Metal3's tried, then good, credentials) are read once.
const HOSTS_SETTLE: Duration = Duration::from_secs(1);
/// The shortest time between two readings of the hosts a change asks for (at 5,000
/// hosts a reading lists them all).
const HOSTS_MIN_GAP: Duration = Duration::from_secs(2);

/// Watches, checks and hands over new configurations.
pub struct Reloader {
    watch: ConfigWatch,
    hosts: Option<HostsWatch>,
    /// The Secrets the running configuration's credentials came from.
    secrets: Option<SecretWatch>,
    /// The state of those Secrets ([`SecretWatch::state`]) last refused.
    secrets_refused: Option<u64>,
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
            hosts: None,
            secrets: None,
            secrets_refused: None,
            client,
            options: options.clone(),
            metrics,
            recorder,
            cluster_ref,
            leadership,
        }
    }

    /// Also lists the BareMetalHosts again every `[metal3] resync_interval` of
    /// `running`, whose hosts read gave `fingerprint`.
    pub fn with_hosts(mut self, running: &Config, fingerprint: Option<u64>) -> Self {
        self.set_hosts(running, fingerprint);
        self
    }

    /// Also watches the Secrets the running configuration's credentials were read
    /// from ([`super::secret_watch`]).
    pub fn with_secrets(mut self, read: SecretsRead) -> Self {
        self.secrets = SecretWatch::start(&self.client, read);
        self
    }

    /// What changed in the watched Secrets, unless that state was refused already.
    fn secrets_changed(&self) -> Option<(u64, String)> {
        let watch = self.secrets.as_ref()?;
        let differing = watch.differing();
        let state = watch.state();
        if differing.is_empty() || self.secrets_refused == Some(state) {
            return None;
        }
        let s = if differing.len() == 1 { "" } else { "s" };
        Some((state, format!("Secret{s} {} changed", differing.join(", "))))
    }

    fn set_hosts(&mut self, running: &Config, fingerprint: Option<u64>) {
        let settings = &running.agent.metal3;
        // The watch of the same namespaces goes on (a new one would list every host).
        let kept = self
            .hosts
            .take()
            .map(|h| h.watch)
            .filter(|w| w.namespaces() == settings.namespaces.as_slice());
        let now = tokio::time::Instant::now();
        self.hosts = settings.resync().map(|every| HostsWatch {
            settings: settings.clone(),
            every,
            next: now + every,
            last_read: now,
            running: fingerprint,
            watch: kept.unwrap_or_else(|| HostWatch::start(&self.client, &settings.namespaces)),
        });
    }

    /// A host changed: read the hosts again soon.
    fn hosts_woken(&mut self) {
        if let Some(hosts) = self.hosts.as_mut() {
            let soon =
                (tokio::time::Instant::now() + HOSTS_SETTLE).max(hosts.last_read + HOSTS_MIN_GAP);
            hosts.next = hosts.next.min(soon);
        }
    }

    /// A reading of the BareMetalHosts that differs from the running one's, when a
    /// resync is due.
    async fn hosts_changed(&mut self) -> Option<u64> {
        let hosts = self.hosts.as_mut()?;
        let now = tokio::time::Instant::now();
        if now < hosts.next {
            return None;
        }
        hosts.next = now + hosts.every;
        hosts.last_read = now;
        match crate::metal3::inventory::discover(&self.client, &hosts.settings).await {
            Ok(discovery) => {
                let fingerprint = crate::metal3::inventory::fingerprint(&discovery);
                (Some(fingerprint) != hosts.running).then_some(fingerprint)
            }
            Err(e) => {
                // As at start-up, an unreadable list changes nothing: the running
                // configuration stays.
                tracing::warn!(error = %e, "cannot list the BareMetalHosts again; the running inventory is kept");
                None
            }
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
                () = async {
                    match self.secrets.as_ref() {
                        Some(s) => s.changed().await,
                        None => std::future::pending().await,
                    }
                } => {}
                () = async {
                    match self.hosts.as_ref() {
                        Some(h) => h.watch.changed().await,
                        None => std::future::pending().await,
                    }
                } => {
                    self.hosts_woken();
                    continue;
                }
                () = async {
                    match self.hosts.as_ref() {
                        Some(h) => tokio::time::sleep_until(h.next).await,
                        None => std::future::pending().await,
                    }
                } => {}
            }
            let watch = self.watch.clone();
            let files = tokio::task::spawn_blocking(move || watch.changed())
                .await
                .ok()
                .flatten();
            // The files first; else the Secrets; else the BareMetalHosts, when a resync
            // is due.
            let mut secrets = None;
            let mut hosts = None;
            let version = if let Some(version) = files {
                tracing::info!(version = %version.short(), "the configuration files changed: checking the new version");
                version
            } else if let Some((state, cause)) = self.secrets_changed() {
                let version = self.watch.running().with(state);
                tracing::info!(version = %version.short(), "{cause}: checking the configuration again");
                secrets = Some((state, cause));
                version
            } else if let Some(read) = self.hosts_changed().await {
                let version = self.watch.running().with(read);
                tracing::info!(version = %version.short(), "the BareMetalHosts changed: checking the new version");
                hosts = Some(read);
                version
            } else {
                continue;
            };
            match self.prepare().await {
                Ok(admitted) => {
                    let config = admitted.config;
                    for warning in &config.warnings {
                        tracing::warn!("{warning}");
                    }
                    self.watch.applied(&config);
                    self.set_hosts(&config, admitted.hosts_fingerprint);
                    // The new version's Secrets, as it read them.
                    self.secrets = SecretWatch::start(&self.client, admitted.secrets);
                    self.secrets_refused = None;
                    let cause = secrets.map(|(_, cause)| cause);
                    ready.put(Prepared {
                        config,
                        version,
                        cause,
                    });
                    notify.notify_one();
                }
                Err(why) => {
                    // A refused reading of the hosts is tried again at the next
                    // resync; a refused state of the Secrets when one changes again; a
                    // refused version of the files when they change again.
                    if let Some((state, _)) = &secrets {
                        self.secrets_refused = Some(*state);
                    } else if hosts.is_none() {
                        self.watch.refused(version);
                    }
                    self.report_refused(&version, &why).await;
                }
            }
        }
    }

    /// Loads and checks the configuration on disk, as a start-up does (the
    /// BareMetalHosts read again, their fingerprint returned).
    async fn prepare(&self) -> Result<super::Admitted, String> {
        let path = self.watch.config_path().to_path_buf();
        let loaded = tokio::task::spawn_blocking(move || crate::config::load(&path))
            .await
            .map_err(|e| format!("the loader stopped: {e}"))?
            .map_err(|errors| errors.to_string())?;
        let admitted = super::admit(loaded, &self.client, &self.options.lease_namespace)
            .await
            .map_err(|e| format!("{e:#}"))?;
        // A new version may need more (release = "delete-node"...): checked first.
        super::check_permissions(&admitted.config, &self.client, &self.options)
            .await
            .map_err(|e| format!("{e:#}"))?;
        Ok(admitted)
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

/// What the control loop keeps of the configuration it runs, to say what a new one
/// changes: each node's settings as a hash, and `nodefence.toml`'s settings. The
/// loaded inventory itself is dropped once the drivers are built (at 5,000 nodes it
/// is about 6 MiB: a resolved `NodeTarget` per node).
#[derive(Debug)]
pub struct RunningConfig {
    pub agent: crate::config::AgentConfig,
    nodes: BTreeMap<String, u64>,
}

impl RunningConfig {
    pub fn of(config: &Config) -> Self {
        Self {
            agent: config.agent.clone(),
            nodes: config
                .inventory
                .nodes
                .iter()
                .map(|(name, target)| (name.clone(), node_settings_hash(target)))
                .collect(),
        }
    }

    /// What changed between this configuration and `new`, for the Event and the log.
    pub fn summary(&self, new: &Config) -> String {
        let before: BTreeSet<&String> = self.nodes.keys().collect();
        let after: BTreeSet<&String> = new.inventory.nodes.keys().collect();
        let added: Vec<&str> = after.difference(&before).map(|s| s.as_str()).collect();
        let removed: Vec<&str> = before.difference(&after).map(|s| s.as_str()).collect();
        let changed: Vec<&str> = new
            .inventory
            .nodes
            .iter()
            .filter(|(name, target)| {
                self.nodes
                    .get(*name)
                    .is_some_and(|old| *old != node_settings_hash(target))
            })
            .map(|(name, _)| name.as_str())
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
        if self.agent != new.agent {
            text.push_str("; nodefence.toml changed");
        }
        text
    }
}

/// A node's power methods and policy, hashed (for [`RunningConfig::summary`] only: both
/// sides are hashed by this process, and a collision would only leave a node out of
/// the "changed" list).
fn node_settings_hash(target: &crate::config::NodeTarget) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    format!("{:?}{:?}{:?}", target.power, target.fallback, target.policy).hash(&mut hasher);
    hasher.finish()
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn load(dir: &std::path::Path, agent: &str, nodes: &str) -> Config {
        std::fs::write(dir.join("nodefence.toml"), agent).unwrap();
        std::fs::write(
            dir.join("inventory.toml"),
            format!(
                "[defaults]\ndriver = \"ipmi\"\nusername = \"fence\"\npassword_file = \"pw\"\n{nodes}"
            ),
        )
        .unwrap();
        crate::config::load(&dir.join("nodefence.toml")).unwrap()
    }

    #[test]
    fn the_summary_names_what_a_new_version_adds_removes_and_changes() {
        let dir = tempfile::tempdir().unwrap();
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "secret\n").unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let agent = "inventory = \"inventory.toml\"\n";
        let node = |name: &str, address: &str| format!("[nodes.{name}]\naddress = \"{address}\"\n");
        let three = [
            node("a", "10.0.0.1"),
            node("b", "10.0.0.2"),
            node("c", "10.0.0.3"),
        ]
        .concat();
        let old = load(dir.path(), agent, &three);
        let running = RunningConfig::of(&old);
        drop(old);

        let same = load(dir.path(), agent, &three);
        assert_eq!(
            running.summary(&same),
            "3 node(s); added: none; removed: none; changed: none"
        );

        let new = load(
            dir.path(),
            &format!("{agent}[power]\nmax_concurrent_requests = 8\n"),
            &[
                node("a", "10.0.0.1"),
                node("b", "10.0.0.20"),
                node("d", "10.0.0.4"),
            ]
            .concat(),
        );
        assert_eq!(
            running.summary(&new),
            "3 node(s); added: d; removed: c; changed: b; nodefence.toml changed"
        );
    }
}
