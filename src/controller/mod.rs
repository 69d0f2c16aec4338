//! The daemon's control loop: watch Nodes and kubelet Leases, decide, act.
//!
//! One task owns the [`Engine`]. Watch events (event-driven, no polling of the API),
//! action completions and the engine's own deadlines are its only inputs; actions
//! go to the [`executor`]. The loop runs only while this replica leads: when
//! leadership is lost it stops at once and the state is rebuilt from the cluster
//! when it is regained: the out-of-service taint nodefence added is recorded on the
//! Node itself, and a pending power-on (even for a deleted Node) in the release
//! records ([`crate::cluster::records`]), read before any Node is watched.

pub mod executor;
pub mod monitor;
mod requests;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event as WatchEvent};
use kube::{Api, Client, Resource};
use tokio::sync::mpsc;

use crate::cluster::facts::{KeptLease, KeptNode};
use crate::cluster::pause::{PAUSE_CONFIGMAP, PauseState};
use crate::engine::{Action, Engine, Policy};
use crate::telemetry::{Health, Metrics};
use executor::{Completion, Executor};

/// The longest the loop sleeps without input (engine deadlines are usually sooner).
const MAX_IDLE: Duration = Duration::from_secs(5);
/// The engine-derived gauges are refreshed at least this often while events that
/// produce no action stream in (Lease renewals: 500 a second at 5,000 nodes), and at
/// once after any action. Walking every node after each renewal cost a fleet most of
/// the daemon's CPU.
const PUBLISH_EVERY: Duration = Duration::from_secs(1);

/// The longest a term that ends for a reload waits for its actions under way (power
/// commands, releases) before the new configuration takes over.
const DRAIN_LIMIT: Duration = Duration::from_secs(300);

/// Why a leadership term ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TermEnd {
    /// The process is stopping.
    Shutdown,
    /// This replica no longer leads.
    LeadershipLost,
    /// A new configuration is ready: every action under way has finished.
    Reload,
}

/// What the loop watches and decides with.
pub struct Controller {
    pub client: Client,
    pub policy: Policy,
    /// Nodes whose group or inventory entry overrides `policy`.
    pub node_policies: BTreeMap<String, Policy>,
    /// Kubernetes node names in the inventory.
    pub inventory: BTreeSet<String>,
    pub executor_template: ExecutorParts,
    pub metrics: Arc<Metrics>,
    pub health: Health,
    /// Namespace of nodefence's own objects (the pause switch).
    pub control_namespace: String,
    /// BMC monitor period (zero: off) and its concurrency.
    pub monitor_interval: Duration,
    pub monitor_concurrency: usize,
    /// Remediation requests are watched and answered (`[remediation] requests`).
    pub requests: Option<crate::remediation::writer::RequestWriter>,
    /// The companions' heartbeat (`--companion-listen`): a companion fallen silent
    /// makes its node suspect, as a stale Lease does; the watchdog level marks and
    /// proves through it.
    pub companions: Option<crate::heartbeat::Heartbeat>,
}

/// The executor's parts, completed with a fresh channel for each leadership term.
#[derive(Clone)]
pub struct ExecutorParts {
    pub drivers: Arc<crate::power::registry::NodeDrivers>,
    pub releaser: crate::cluster::release::Releaser,
    pub records: crate::cluster::records::RecordStore,
    pub leadership: crate::cluster::leader::Leadership,
    /// The pause switch as the executor reads it before each power command and release.
    pub pause: crate::cluster::pause::PauseCheck,
    /// The engine's cluster-wide hold on power-offs, for the executor.
    pub power_off_hold: executor::PowerOffHold,
    pub recorder: Option<crate::cluster::events::Recorder>,
    /// Cluster-wide notices are Events on this object (the leader Lease).
    pub cluster_ref: Option<k8s_openapi::api::core::v1::ObjectReference>,
    pub dry_run: bool,
}

/// Tells the heartbeat that this replica's term ended (when dropped).
struct StoppedLeading(crate::heartbeat::Heartbeat);

impl Drop for StoppedLeading {
    fn drop(&mut self) {
        self.0.stopped_leading();
    }
}

/// Aborts a task when dropped (the term's helpers end with the term).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Nodes per page of the Node list at the start of a term (and at each re-list).
/// Kubelets' Nodes are 10-20 KB of JSON each; a page of kube's default 500 is text and
/// objects of 10+ MiB at once, which set the daemon's peak memory at 5,000 nodes
/// (the allocator keeps it). 100 is 50 requests for 5,000 Nodes, once per term.
const NODE_LIST_PAGE: u32 = 100;

/// Watch state for one term.
#[derive(Default)]
struct Observed {
    /// What the decisions read of each Node and kubelet Lease.
    /// Boxed: a `BTreeMap` leaf holds eleven values inline and fills about half of
    /// them, so a 352-byte value would cost twice that per node.
    nodes: BTreeMap<String, Box<KeptNode>>,
    leases: BTreeMap<String, KeptLease>,
    /// Names seen during a re-list (watch restart): the others were deleted meanwhile.
    relist_nodes: Option<BTreeSet<String>>,
    nodes_synced: bool,
    leases_synced: bool,
    pause_synced: bool,
    /// The switch was in the current (re-)list.
    pause_listed: bool,
    pause: Option<PauseState>,
    /// A Node changed since the identities were last sent to the BMC monitor.
    identities_stale: bool,
    /// The last reference of each deleted Node (until it registers again).
    deleted_refs: BTreeMap<String, k8s_openapi::api::core::v1::ObjectReference>,
    /// Remediation requests (when watched).
    requests: requests::Requests,
    /// The companions fallen silent, as last followed.
    silent: crate::heartbeat::Silent,
    /// The Nodes last counted for the companions' peer majority.
    nodes_counted: usize,
}

impl Controller {
    /// Runs until `shutdown` resolves, leadership is lost, or `reload` is notified (a
    /// new configuration is ready). A term that ends for a reload first waits for
    /// every action under way (at most `DRAIN_LIMIT`): the next term starts from
    /// the cluster, as a new leader does, and must not overlap a power command.
    pub async fn run_term(
        &self,
        shutdown: &mut (impl std::future::Future<Output = ()> + Unpin),
        reload: &tokio::sync::Notify,
    ) -> TermEnd {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let tasks = tokio_util::task::TaskTracker::new();
        let parts = self.executor_template.clone();
        // Everything this term dispatches acts in this term only: once it ends (the
        // Lease lost, even if won back at once, or a reload), what is still under way
        // is refused at its next leadership check, and the next term starts from the
        // cluster (seed 4252).
        let (_term, leadership) = parts.leadership.this_term();
        let executor = Executor {
            drivers: parts.drivers,
            releaser: parts.releaser.in_term(&leadership),
            records: parts.records.in_term(&leadership),
            leadership: leadership.clone(),
            pause: parts.pause,
            timed_out_requests: self
                .requests
                .as_ref()
                .map(|w| crate::remediation::gate::TimedOutRequests::new(w.client())),
            power_off_hold: parts.power_off_hold.clone(),
            recorder: parts.recorder,
            cluster_ref: parts.cluster_ref,
            metrics: self.metrics.clone(),
            dry_run: parts.dry_run,
            completions: tx,
            tasks: tasks.clone(),
            heartbeat: self.companions.clone(),
        };
        // The watchdog level's wait counts from this term's start at the earliest:
        // every acknowledgement an earlier term (or leader) sent precedes it.
        if let Some(heartbeat) = &self.companions {
            heartbeat.began_leading();
            heartbeat.set_watchdog_nodes(
                self.inventory
                    .iter()
                    .filter(|n| {
                        self.node_policies
                            .get(*n)
                            .unwrap_or(&self.policy)
                            .watchdog_fencing
                    })
                    .cloned()
                    .collect(),
            );
        }
        let _stopped_leading = self.companions.clone().map(StoppedLeading);
        // The companions' table, for `nodefence status`: published when it changed.
        let publish = self
            .companions
            .clone()
            .filter(|_| !self.executor_template.dry_run);
        let _publish_companions = publish.map(|heartbeat| {
            let records = executor.records.clone();
            AbortOnDrop(tokio::spawn(async move {
                let mut last = None;
                let mut every = tokio::time::interval(crate::heartbeat::report::PUBLISH_EVERY);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    every.tick().await;
                    let report = heartbeat.report();
                    if last.as_ref() == Some(&report) {
                        continue;
                    }
                    match records.put_companions(&report).await {
                        Ok(()) => last = Some(report),
                        Err(e) => {
                            tracing::debug!(error = %e, "could not publish the companions' table")
                        }
                    }
                }
            }))
        });
        // The BMC monitor runs for this term only (the leader checks; standbys do not
        // load the BMCs). Aborted when the term ends. It starts once the Nodes are
        // listed and their identities (systemUUID, providerID) sent: a driver that
        // finds its machine through the Node (a cloud instance named by its
        // providerID) cannot be checked before, and would fail its first check.
        let (identities_tx, identities) =
            tokio::sync::watch::channel(monitor::NodeIdentities::new());
        let mut monitor_pending = (!self.monitor_interval.is_zero()).then_some(identities);
        let mut _monitor: Option<AbortOnDrop> = None;
        let mut engine =
            Engine::new(self.policy.clone()).with_node_policies(self.node_policies.clone());
        // Paused until the pause switch, every Node and every kubelet Lease have been
        // read: a new leader never acts before it knows whether fencing is paused, nor
        // counts the unhealthy nodes for storm protection on half a picture (Nodes
        // listed, Leases not yet: a storm seen as one failure).
        engine.set_syncing(true, crate::clock::now());
        // Progress an earlier leader recorded (a pending power-on, a deleted Node),
        // resumed before any Node is watched. Without it a new leader could not power
        // a deleted node's machine back on; retried until read (no action before).
        loop {
            match executor.records.load().await {
                Ok(records) => {
                    for (name, record) in &records {
                        tracing::info!(node = %name, "resuming a release recorded by an earlier leader");
                        // Only notices can come out while paused; nothing to dispatch yet.
                        let _ = engine.resume(name, record, crate::clock::now());
                    }
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the release records; retrying");
                    tokio::select! {
                        () = &mut *shutdown => return TermEnd::Shutdown,
                        () = tokio::time::sleep(Duration::from_secs(2)) => {}
                    }
                    if !executor.leadership.is_leader() {
                        self.health.set_ready(false);
                        return TermEnd::LeadershipLost;
                    }
                }
            }
        }
        let mut seen = Observed::default();
        let mut pause = watcher::watcher(
            Api::<ConfigMap>::namespaced(self.client.clone(), &self.control_namespace),
            watcher::Config::default().fields(&format!("metadata.name={PAUSE_CONFIGMAP}")),
        )
        .default_backoff()
        .boxed();
        let mut nodes = watcher::watcher(
            Api::<Node>::all(self.client.clone()),
            watcher::Config::default().page_size(NODE_LIST_PAGE),
        )
        .default_backoff()
        .boxed();
        let mut leases = watcher::watcher(
            Api::<Lease>::namespaced(self.client.clone(), "kube-node-lease"),
            watcher::Config::default(),
        )
        .default_backoff()
        .boxed();
        let mut remediations = match &self.requests {
            Some(_) => watcher::watcher(
                Api::<crate::remediation::NodeFenceRemediation>::all(self.client.clone()),
                watcher::Config::default(),
            )
            .default_backoff()
            .boxed(),
            None => futures::stream::pending().boxed(),
        };
        let (requests_tx, mut requests_rx) = mpsc::unbounded_channel();
        let requests_writer = self.requests.as_ref().map(|w| w.in_term(&leadership));
        // Standbys kept the table: a silence that began before this term counts now.
        let mut companions = self.companions.as_ref().map(|h| h.silent());
        if let Some(rx) = &mut companions {
            seen.silent = rx.borrow_and_update().clone();
        }
        let mut not_in_inventory_logged = BTreeSet::new();
        // When the gauges were last refreshed, and whether they may be stale since.
        let mut published = tokio::time::Instant::now();
        let mut unpublished = false;
        loop {
            let now = crate::clock::now();
            let sleep = engine
                .next_deadline()
                .map(|d| d.duration_since(now).unwrap_or_default())
                .unwrap_or(MAX_IDLE)
                .min(MAX_IDLE)
                .min(seen.requests.next_retry().map_or(MAX_IDLE, |t| {
                    t.saturating_duration_since(tokio::time::Instant::now())
                }))
                .max(Duration::from_millis(10));
            let actions = tokio::select! {
                biased;
                () = &mut *shutdown => return TermEnd::Shutdown,
                () = reload.notified() => {
                    return self.drain(&tasks, shutdown).await;
                }
                Some(c) = rx.recv() => self.complete(&mut engine, c),
                Some(ev) = nodes.next() => match ev {
                    Ok(ev) => self.node_event(&mut engine, &mut seen, ev, &mut not_in_inventory_logged),
                    Err(e) => { tracing::warn!(error = %e, "Node watch failed; retrying"); Vec::new() }
                },
                Some(ev) = pause.next() => match ev {
                    Ok(ev) => self.pause_event(&mut engine, &mut seen, ev),
                    Err(e) => { tracing::warn!(error = %e, "pause switch watch failed; retrying"); Vec::new() }
                },
                Some(ev) = leases.next() => match ev {
                    Ok(ev) => self.lease_event(&mut engine, &mut seen, ev),
                    Err(e) => { tracing::warn!(error = %e, "Lease watch failed; retrying"); Vec::new() }
                },
                Some(ev) = remediations.next() => match ev {
                    Ok(ev) => self.request_event(&mut engine, &mut seen, ev),
                    Err(e) => self.request_watch_failed(&mut engine, &mut seen, &e),
                },
                Some(silent) = silence_changed(&mut companions) => {
                    self.companions_changed(&mut engine, &mut seen, silent)
                },
                Some(c) = requests_rx.recv() => {
                    let affected = seen.requests.complete(c);
                    self.observe_nodes(&mut engine, &seen, affected)
                },
                () = tokio::time::sleep(sleep) => engine.wake(crate::clock::now()),
                () = tokio::time::sleep_until(published + PUBLISH_EVERY), if unpublished => Vec::new(),
            };
            // Before any action of this event goes out: a power-off already on its
            // way checks this right before it is sent.
            executor.power_off_hold.set(if engine.syncing() {
                Some("this leader has not yet read every Node and kubelet Lease")
            } else if engine.storm_active() {
                Some("storm protection: too many nodes unhealthy at once")
            } else {
                None
            });
            let acted = !actions.is_empty();
            if !executor.leadership.is_leader() {
                tracing::warn!("leadership lost: stopping all fencing at once");
                self.health.set_ready(false);
                return TermEnd::LeadershipLost;
            }
            for action in actions {
                let node = action.node().and_then(|n| seen.nodes.get(n));
                // A Node deleted by a delete-node release still gets its Events
                // (released, powering on) on the object it was.
                let node_ref = node.map(|n| n.reference().clone()).or_else(|| {
                    action
                        .node()
                        .and_then(|n| seen.deleted_refs.get(n).cloned())
                });
                let uid = node.and_then(|n| n.uid());
                executor.dispatch(action, node_ref, uid.map(|u| u.to_string()));
            }
            if let Some(writer) = &requests_writer
                && !seen.requests.is_empty()
            {
                let spawn = |task| {
                    tasks.spawn(task);
                };
                let nodes = &seen.nodes;
                seen.requests.tick(
                    &engine,
                    |node| nodes.get(node).map(|n| n.facts(None, true).our_taint),
                    seen.nodes_synced,
                    writer,
                    !executor.dry_run,
                    &requests::Spawner {
                        spawn: &spawn,
                        tx: &requests_tx,
                    },
                );
            }
            self.health
                .set_ready(seen.nodes_synced && seen.leases_synced);
            if seen.nodes_synced && std::mem::take(&mut seen.identities_stale) {
                identities_tx.send_if_modified(|known| {
                    let now: monitor::NodeIdentities = seen
                        .nodes
                        .iter()
                        .filter(|(name, _)| self.inventory.contains(*name))
                        .map(|(name, node)| (name.clone(), node.identity().clone()))
                        .collect();
                    let changed = *known != now;
                    if changed {
                        // Drivers that find their machine through the Node (a cloud
                        // instance named by its providerID) learn it here.
                        for (name, identity) in &now {
                            if let Some(Ok(driver)) = executor.drivers.get(name) {
                                driver.node_identity(identity);
                            }
                        }
                    }
                    *known = now;
                    changed
                });
            }
            if seen.nodes_synced
                && let Some(identities) = monitor_pending.take()
            {
                _monitor = Some(AbortOnDrop(tokio::spawn(monitor::run(
                    executor.drivers.clone(),
                    self.monitor_interval,
                    self.metrics.clone(),
                    executor.recorder.clone(),
                    self.monitor_concurrency,
                    identities,
                ))));
            }
            if acted || published.elapsed() >= PUBLISH_EVERY {
                self.publish(&engine);
                published = tokio::time::Instant::now();
                unpublished = false;
            } else {
                unpublished = true;
            }
        }
    }

    /// Ends a term for a reload: no new action starts; the ones under way finish.
    async fn drain(
        &self,
        tasks: &tokio_util::task::TaskTracker,
        shutdown: &mut (impl std::future::Future<Output = ()> + Unpin),
    ) -> TermEnd {
        tasks.close();
        if !tasks.is_empty() {
            tracing::info!(
                under_way = tasks.len(),
                "new configuration: waiting for the actions under way to finish"
            );
        }
        tokio::select! {
            () = &mut *shutdown => TermEnd::Shutdown,
            () = tasks.wait() => TermEnd::Reload,
            () = tokio::time::sleep(DRAIN_LIMIT) => {
                tracing::warn!(
                    under_way = tasks.len(),
                    "actions still under way after {}s; applying the new configuration anyway",
                    DRAIN_LIMIT.as_secs()
                );
                TermEnd::Reload
            }
        }
    }

    fn facts(&self, seen: &Observed, name: &str) -> Option<crate::engine::NodeFacts> {
        let node = seen.nodes.get(name)?;
        let mut facts = node.facts(seen.leases.get(name), self.inventory.contains(name));
        facts.request = seen.requests.request_for(name).map(Box::new);
        facts.companion_silent = seen.silent.get(name).copied();
        Some(facts)
    }

    /// The set of silent companions changed: the nodes that joined or left it are
    /// observed again.
    fn companions_changed(
        &self,
        engine: &mut Engine,
        seen: &mut Observed,
        silent: crate::heartbeat::Silent,
    ) -> Vec<Action> {
        let changed: BTreeSet<String> = silent
            .iter()
            .filter(|(n, t)| seen.silent.get(*n) != Some(t))
            .map(|(n, _)| n.clone())
            .chain(
                seen.silent
                    .keys()
                    .filter(|n| !silent.contains_key(*n))
                    .cloned(),
            )
            .collect();
        seen.silent = silent;
        self.observe_nodes(engine, seen, changed)
    }

    /// The engine observes these nodes again (their requests changed).
    fn observe_nodes(
        &self,
        engine: &mut Engine,
        seen: &Observed,
        nodes: BTreeSet<String>,
    ) -> Vec<Action> {
        let now = crate::clock::now();
        nodes
            .iter()
            .filter_map(|name| self.facts(seen, name))
            .flat_map(|f| engine.observe(f, now))
            .collect()
    }

    /// The request watch failed. Without the CRDs (404) there can be no request:
    /// nodefence goes on without (its own detection is unchanged) and says so, rather
    /// than hold every node as unsynced; the watch keeps retrying.
    fn request_watch_failed(
        &self,
        engine: &mut Engine,
        seen: &mut Observed,
        error: &watcher::Error,
    ) -> Vec<Action> {
        let missing = matches!(
            error,
            watcher::Error::InitialListFailed(kube::Error::Api(s))
                | watcher::Error::WatchStartFailed(kube::Error::Api(s))
                if s.code == 404
        );
        if !missing {
            tracing::warn!(error = %error, "NodeFenceRemediation watch failed; retrying");
            return Vec::new();
        }
        if seen.requests.synced {
            return Vec::new();
        }
        tracing::warn!(
            "[remediation] requests = true, but the NodeFenceRemediation CRD is not installed \
             (apply deploy/components/remediation): no request can be made; nodefence's own \
             detection goes on, and the watch keeps trying"
        );
        seen.requests.synced = true;
        self.apply_pause(engine, seen)
    }

    fn request_event(
        &self,
        engine: &mut Engine,
        seen: &mut Observed,
        ev: WatchEvent<crate::remediation::NodeFenceRemediation>,
    ) -> Vec<Action> {
        let done = matches!(ev, WatchEvent::InitDone);
        let affected = seen.requests.event(ev);
        let mut out = self.observe_nodes(engine, seen, affected);
        if done {
            out.extend(self.apply_pause(engine, seen));
        }
        out
    }

    fn node_event(
        &self,
        engine: &mut Engine,
        seen: &mut Observed,
        ev: WatchEvent<Node>,
        logged: &mut BTreeSet<String>,
    ) -> Vec<Action> {
        let now = crate::clock::now();
        let mut out = Vec::new();
        seen.identities_stale = true;
        match ev {
            WatchEvent::Init => seen.relist_nodes = Some(BTreeSet::new()),
            WatchEvent::InitApply(node) | WatchEvent::Apply(node) => {
                let Some(name) = node.metadata.name.clone() else {
                    return out;
                };
                if let Some(relist) = &mut seen.relist_nodes {
                    relist.insert(name.clone());
                }
                if !self.inventory.contains(&name) && logged.insert(name.clone()) {
                    tracing::info!(node = %name, "node is not in the inventory: nodefence will never touch it");
                }
                seen.deleted_refs.remove(&name);
                seen.nodes
                    .insert(name.clone(), Box::new(KeptNode::new(&node)));
                if let Some(f) = self.facts(seen, &name) {
                    out.extend(engine.observe(f, now));
                }
            }
            WatchEvent::Delete(node) => {
                let reference = node.object_ref(&());
                if let Some(name) = node.metadata.name {
                    if self.inventory.contains(&name) {
                        // Bounded by the inventory.
                        seen.deleted_refs.insert(name.clone(), reference);
                    }
                    seen.nodes.remove(&name);
                    out.extend(engine.node_deleted(&name, now));
                }
            }
            WatchEvent::InitDone => {
                if let Some(relist) = seen.relist_nodes.take() {
                    let gone: Vec<String> = seen
                        .nodes
                        .keys()
                        .filter(|n| !relist.contains(*n))
                        .cloned()
                        .collect();
                    for name in gone {
                        seen.nodes.remove(&name);
                        out.extend(engine.node_deleted(&name, now));
                    }
                }
                seen.nodes_synced = true;
                out.extend(self.apply_pause(engine, seen));
            }
        }
        if let Some(heartbeat) = &self.companions
            && seen.nodes.len() != seen.nodes_counted
        {
            seen.nodes_counted = seen.nodes.len();
            heartbeat.set_nodes_in_cluster(seen.nodes_counted);
        }
        out
    }

    fn lease_event(
        &self,
        engine: &mut Engine,
        seen: &mut Observed,
        ev: WatchEvent<Lease>,
    ) -> Vec<Action> {
        let now = crate::clock::now();
        match ev {
            WatchEvent::InitApply(lease) | WatchEvent::Apply(lease) => {
                let Some(name) = lease.metadata.name.clone() else {
                    return Vec::new();
                };
                let kept = KeptLease::observed(&lease, seen.leases.get(&name), now);
                seen.leases.insert(name.clone(), kept);
                self.facts(seen, &name)
                    .map_or_else(Vec::new, |f| engine.observe(f, now))
            }
            WatchEvent::Delete(lease) => {
                if let Some(name) = lease.metadata.name {
                    seen.leases.remove(&name);
                }
                Vec::new()
            }
            WatchEvent::Init => Vec::new(),
            WatchEvent::InitDone => {
                seen.leases_synced = true;
                self.apply_pause(engine, seen)
            }
        }
    }

    fn pause_event(
        &self,
        engine: &mut Engine,
        seen: &mut Observed,
        ev: WatchEvent<ConfigMap>,
    ) -> Vec<Action> {
        match ev {
            // A re-list keeps the last state until it is done (a switch deleted
            // meanwhile is simply not listed).
            WatchEvent::Init => {
                seen.pause_listed = false;
                return Vec::new();
            }
            WatchEvent::InitApply(cm) => {
                seen.pause_listed = true;
                seen.pause = Some(PauseState::from_config_map(&cm));
            }
            WatchEvent::Apply(cm) => seen.pause = Some(PauseState::from_config_map(&cm)),
            WatchEvent::Delete(_) => seen.pause = None,
            WatchEvent::InitDone => {
                if !seen.pause_listed {
                    seen.pause = None;
                }
                seen.pause_synced = true;
            }
        }
        // The executor reads this flag between its last reading of a machine and the
        // command, before the engine has even heard of the pause.
        self.executor_template
            .pause
            .saw(seen.pause.as_ref().is_some_and(|s| s.paused));
        self.apply_pause(engine, seen)
    }

    /// Sets the engine's pause gate from the pause switch, once the switch, the Nodes
    /// and the Leases have all been read (until then the engine holds everything).
    fn apply_pause(&self, engine: &mut Engine, seen: &Observed) -> Vec<Action> {
        // A request that timed out stops power commands: read them all first too.
        let requests_synced = self.requests.is_none() || seen.requests.synced;
        if !(seen.pause_synced && seen.nodes_synced && seen.leases_synced && requests_synced) {
            return Vec::new();
        }
        let now = crate::clock::now();
        let paused = seen.pause.as_ref().is_some_and(|s| s.paused);
        if paused != engine.paused() {
            let text = seen
                .pause
                .as_ref()
                .map_or_else(|| "fencing is active".to_string(), PauseState::describe);
            if paused {
                tracing::warn!("{text}: no power command and no release until `nodefence resume`");
            } else {
                tracing::info!("{text}");
            }
        }
        if !engine.syncing() {
            return engine.set_paused(paused, now);
        }
        tracing::info!(
            nodes = seen.nodes.len(),
            leases = seen.leases.len(),
            "every Node, kubelet Lease and the pause switch read: deciding"
        );
        // The pause switch first, so that no decision is taken between the two (the
        // engine still holds everything back: only notices come out of the first).
        let _ = engine.set_paused(paused, now);
        engine.set_syncing(false, now)
    }

    fn complete(&self, engine: &mut Engine, c: Completion) -> Vec<Action> {
        let now = crate::clock::now();
        match c {
            Completion::PowerRead { node, result } => engine.power_read(&node, result, now),
            Completion::PowerOff { node, result } => engine.power_off_done(&node, result, now),
            Completion::PowerOn { node, result } => engine.power_on_done(&node, result, now),
            Completion::Release { node, result, .. } => engine.release_done(&node, result, now),
            Completion::Untaint { node, result } => engine.taint_removed(&node, result, now),
            Completion::Drained { node, result } => engine.drain_checked(&node, result, now),
            Completion::Identity { node, machine } => {
                engine.machine_identified(&node, machine, now)
            }
            Completion::Marked { node, result } => engine.mark_written(&node, result, now),
            Completion::WatchdogChecked { node, result } => {
                engine.watchdog_checked(&node, result, now)
            }
        }
    }

    fn publish(&self, engine: &Engine) {
        self.metrics.observe_engine(engine);
    }
}

/// The next set of silent companions; pending for ever without a listener (or once
/// it is gone).
async fn silence_changed(
    rx: &mut Option<tokio::sync::watch::Receiver<crate::heartbeat::Silent>>,
) -> Option<crate::heartbeat::Silent> {
    let Some(r) = rx else {
        return std::future::pending().await;
    };
    if r.changed().await.is_err() {
        *rx = None;
        return std::future::pending().await;
    }
    Some(r.borrow_and_update().clone())
}
