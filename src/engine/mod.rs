//! The remediation engine's decisions: pure, with an injected clock.
//!
//! The engine turns observations (node facts from the cluster, power readings,
//! results of earlier actions) and the current time into [`Action`]s. It performs no
//! I/O and reads no clock, so tests and randomized simulations can drive thousands of
//! fault schedules through the real decision code in seconds.
//!
//! The one rule, as the engine applies it: a node's volumes are released only from an
//! [`OffProof`]: `confirm_readings` consecutive Off readings, every one taken after the
//! node's last sign of life (Ready transition or Lease renewal, whichever is later).
//! Errors, transitional and unknown states, contradicting readings and newer signs of
//! life all reset the proof. The power source must be proven to control the node's
//! own machine ([`crate::identity`]): a mismatch blocks every release and power-off,
//! an unknown identity does too under `require_identity`. The executor re-checks
//! leadership and re-reads the node before it acts on a `Release`.
//!
//! Policies: the cluster's, and per node (groups and inventory entries override it
//! key by key); the cluster-wide gates (storm protection, rate limits) use the
//! cluster's.
//!
//! Layout: [`policy`] (settings), [`facts`] (what the cluster says), [`node`] (one
//! node's state machine), [`action`] (effects and notices), `outcomes` (the results
//! of the actions the executor carried out: readings, commands, releases), [`returned`]
//! (the check of a release's proof when the node comes back), [`watchdog`] (the
//! watchdog level's steps).

pub mod action;
mod block;
mod decide;
pub mod facts;
pub mod node;
mod outcomes;
pub mod policy;
pub mod returned;
pub mod watchdog;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};
use std::time::SystemTime;

pub use action::{
    Action, Notice, OffProof, Reason, ReleasePlan, ReleaseProof, ReleaseRecord, Severity, Steps,
    Target, WatchdogContext, WatchdogProof,
};
pub use facts::{CompanionSilence, Exclusion, Health, NodeFacts, Readiness, Request};
pub use node::{Block, NodeState, Phase, PowerOffStatus, PowerOnStatus};
pub use policy::{
    ForceDeletePods, LeaseStaleAfter, MaxUnhealthy, OnPoweredOn, Policy, ReleaseMode,
};
pub use watchdog::{WatchdogCheck, WatchdogStep};

use crate::identity::MachineIdentity;
use crate::power::{PowerError, PowerReading};
use decide::backoff;
use node::{Gates, Released};

/// All nodes' procedures and the cluster-wide gates.
#[derive(Debug, Clone)]
pub struct Engine {
    /// The cluster's policy: cluster-wide gates, and nodes without their own.
    policy: Policy,
    /// Nodes whose group or inventory entry overrides the policy.
    node_policies: BTreeMap<String, Policy>,
    /// Boxed: a `BTreeMap` leaf holds eleven values inline and fills about half of
    /// them, so a large value costs twice its size per node (at 5,000 nodes).
    nodes: BTreeMap<String, Box<NodeState>>,
    paused: bool,
    /// A new term has not read every Node and kubelet Lease yet.
    syncing: bool,
    storm: bool,
    last_power_off: Option<SystemTime>,
    /// No node's deadline is earlier than this (`Some(None)`: no node has one);
    /// `None`: not known, computed on the next ask. Lowered as nodes change, made
    /// exact again after a pass over every node: the loop asks after every event,
    /// and a pass over 5,000 nodes per kubelet renewal was most of the daemon's CPU.
    /// Waking early is harmless ([`Engine::wake`] re-checks).
    deadline_bound: Option<Option<SystemTime>>,
    /// Remediation requests (uids) served: their node was released for them, or was
    /// found released when they came. A served request never makes its node suspect
    /// again (it may stand a while after the node came back). The newest
    /// [`SERVED_REQUESTS_KEPT`]; a request nodefence reported `Succeeded` is not
    /// passed to the engine at all, so a new leader needs none of them.
    served_requests: VecDeque<String>,
}

/// How many served requests the engine remembers.
const SERVED_REQUESTS_KEPT: usize = 1024;

/// How far in the future a recorded end of a release may lie and still be believed
/// (`nodefence.io/last-release`, written with the leader's clock; a request's time is
/// the API server's). Beyond it the record serves no request.
pub const LAST_RELEASE_CLOCK_TOLERANCE: std::time::Duration = std::time::Duration::from_secs(60);

/// Whether a recorded end of the node's last release is believed at `now`: no later
/// than `now` + [`LAST_RELEASE_CLOCK_TOLERANCE`]. One rule for the engine, which
/// serves a request made before it, and for `explain`, which says so.
pub fn release_end_believed(ended: SystemTime, now: SystemTime) -> bool {
    ended <= now + LAST_RELEASE_CLOCK_TOLERANCE
}

/// The earlier of two optional deadlines (none: never).
fn earliest(a: Option<SystemTime>, b: Option<SystemTime>) -> Option<SystemTime> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

impl Engine {
    pub fn new(policy: Policy) -> Self {
        Self {
            policy,
            node_policies: BTreeMap::new(),
            nodes: BTreeMap::new(),
            paused: false,
            syncing: false,
            storm: false,
            last_power_off: None,
            deadline_bound: None,
            served_requests: VecDeque::new(),
        }
    }

    /// Whether the node was released for (or at) this remediation request.
    pub fn request_served(&self, uid: &str) -> bool {
        self.served_requests.iter().any(|u| u == uid)
    }

    /// The node's live remediation request is served (its volumes were released for
    /// it, or it was found released): remembered, and dropped from the node's facts.
    fn serve_request(&mut self, name: &str) {
        let Some(state) = self.nodes.get_mut(name) else {
            return;
        };
        let Some(request) = state.facts.request.take_if(|r| !r.timed_out) else {
            return;
        };
        self.remember_served(request.uid);
    }

    /// Remembers a served request (the newest [`SERVED_REQUESTS_KEPT`]).
    fn remember_served(&mut self, uid: String) {
        if !self.served_requests.contains(&uid) {
            if self.served_requests.len() >= SERVED_REQUESTS_KEPT {
                self.served_requests.pop_front();
            }
            self.served_requests.push_back(uid);
        }
    }

    /// [`Engine::serve_request`] for a node in `Released`; whether one was served.
    fn serve_if_released(&mut self, name: &str) -> bool {
        let released = self.nodes.get(name).is_some_and(|s| {
            matches!(s.phase, Phase::Released(_)) && s.facts.live_request().is_some()
        });
        if released {
            self.serve_request(name);
        }
        released
    }

    /// Per-node policies (resolved from groups and inventory entries); nodes not in
    /// the map follow the cluster's policy.
    pub fn with_node_policies(mut self, policies: BTreeMap<String, Policy>) -> Self {
        self.node_policies = policies;
        self
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The policy that governs `node`.
    pub fn policy_for(&self, node: &str) -> &Policy {
        self.node_policies.get(node).unwrap_or(&self.policy)
    }

    /// One node's state, for `explain`, metrics and tests.
    pub fn node(&self, name: &str) -> Option<&NodeState> {
        self.nodes.get(name).map(|state| &**state)
    }

    /// Every node with the policy that governs it, without a lookup per node: both
    /// maps are sorted by name, so one pass walks them together (a fleet of 5,000
    /// nodes is walked on every event).
    fn nodes_with_policies(&self) -> impl Iterator<Item = (&NodeState, &Policy)> {
        let mut policies = self.node_policies.iter().peekable();
        self.nodes.iter().map(move |(name, state)| {
            while policies
                .next_if(|(p, _)| p.as_str() < name.as_str())
                .is_some()
            {}
            let policy = match policies.peek() {
                Some((p, policy)) if *p == name => policy,
                _ => &self.policy,
            };
            (&**state, policy)
        })
    }

    pub fn nodes(&self) -> impl Iterator<Item = &NodeState> {
        self.nodes.values().map(|state| &**state)
    }

    pub fn storm_active(&self) -> bool {
        self.storm
    }

    pub fn paused(&self) -> bool {
        self.paused
    }

    /// A node was added or changed.
    pub fn observe(&mut self, facts: NodeFacts, now: SystemTime) -> Vec<Action> {
        let name = facts.name.clone();
        let mut facts = facts;
        // A request this node was already released for (it may stand a while after
        // the node came back, or registered again): nothing to do for it again. Once
        // timed out, it is kept: its requester moved on, and it stops power commands
        // (the power-on after fence too) as any timed-out request does.
        if facts
            .request
            .as_ref()
            .is_some_and(|r| !r.timed_out && self.served_requests.contains(&r.uid))
        {
            facts.request = None;
        }
        // A request created before the node's last release ended, seen only now (no
        // replica saw it while the node was released: its watches were down, or none
        // led): that release served it. Fencing for it now would power off a node
        // that came back since (simulation seed 7104). An end later than now by more
        // than replicas' clocks can differ is not believed (a broken clock or a
        // hand-written value would otherwise silence every request until then).
        //
        // Under `release = "delete-node"` no record survives the release: the Node
        // itself is deleted, and the one the kubelet registers when the machine comes
        // back is a new object. A request made before that object was created was
        // made for an earlier registration of the name (both times are the API
        // server's): fencing the new one for it would power off the machine that came
        // back.
        let mut served_late = None;
        if let Some(request) = facts.live_request() {
            let made = humantime::format_rfc3339_seconds(request.since);
            let why = match (facts.last_release_ended, facts.registered) {
                (Some(ended), _) if request.since <= ended && release_end_believed(ended, now) => {
                    Some(format!(
                        "{} was made at {made}, before this node's last release ended (out-of-service taint removed at {}): served by that release; not fencing again",
                        request.by,
                        humantime::format_rfc3339_seconds(ended),
                    ))
                }
                (_, Some(registered)) if request.since < registered => Some(format!(
                    "{} was made at {made}, before this Node was registered (created at {}): it was made for the Node of that name deleted since (by a release, or by hand); not fencing the one registered now",
                    request.by,
                    humantime::format_rfc3339_seconds(registered),
                )),
                _ => None,
            };
            if let Some(why) = why {
                served_late = Some(Notice::normal(&name, Reason::RemediationRequested, why));
                let uid = request.uid.clone();
                self.remember_served(uid);
                facts.request = None;
            }
        }
        let mut out: Vec<Action> = served_late.into_iter().collect();
        match self.nodes.get_mut(&name) {
            Some(state) => {
                // The taint this term removed, seen again on an older copy of the Node
                // (a Lease event paired with the cached Node while the Node watch lags):
                // not a new release, or the node would wait in `Released` for good.
                if facts.our_taint
                    && state.our_taint_removed.is_some_and(|removed| {
                        facts.our_taint_added.is_none_or(|added| added <= removed)
                    })
                {
                    facts.our_taint = false;
                    facts.our_taint_added = None;
                }
                // A healthy node that stays healthy (a kubelet's renewal: hundreds a
                // second in a large fleet): nothing to decide, and nothing any other
                // node's decision depends on changes (each decision recounts the
                // unhealthy nodes first). Skipping the pass over every node here is
                // what keeps a 5,000-node fleet cheap.
                let policy = self.node_policies.get(&name).unwrap_or(&self.policy);
                if !facts.fencing_marked {
                    state.mark_acted = false;
                }
                // A fencing mark found on it, not acted on yet, is something to decide.
                let no_mark_to_act_on = !facts.fencing_marked || state.mark_acted;
                let stays_healthy = matches!(state.phase, Phase::Healthy)
                    && !state.gone
                    && state.excluded_noted.is_none()
                    && !facts.our_taint
                    && no_mark_to_act_on
                    && state.facts.health(now, policy.lease_stale_after) == Health::Healthy
                    && facts.health(now, policy.lease_stale_after) == Health::Healthy;
                state.facts = facts;
                state.gone = false;
                if stays_healthy {
                    self.lower_deadline(&name);
                    return out;
                }
            }
            None => {
                let mut state = NodeState::new(facts, now);
                // Released by an earlier term whose release record was never written
                // (its leadership ended between the taint and the record): under a
                // reboot-style policy the machine is still to be powered on. The
                // command's pre-check reads the machine, so one already on is left be.
                if let Phase::Released(rel) = &mut state.phase
                    && self.policy_for(&name).power_on_after_fence
                {
                    rel.power_on = PowerOnStatus::Pending;
                }
                self.nodes.insert(name.clone(), Box::new(state));
            }
        }
        // Released already (on nodefence's own, or by an earlier term) when a request
        // comes: served at once.
        self.serve_if_released(&name);
        out.extend(self.reevaluate(Some(&name), now));
        if self.serve_if_released(&name) {
            out.extend(self.reevaluate(Some(&name), now));
        }
        out
    }

    /// A Node object was deleted. In delete-node mode that is our own release: the
    /// node re-registers as a fresh healthy node when its machine comes back.
    ///
    /// Kept (without its Node) while its procedure is not over: a release in flight
    /// (a delete-node release deletes the Node before it reports back), or a
    /// released node whose machine still has to be powered back on.
    pub fn node_deleted(&mut self, name: &str, now: SystemTime) -> Vec<Action> {
        let mut out = Vec::new();
        if let Some(state) = self.nodes.get_mut(name) {
            let keep = match &state.phase {
                Phase::Incident(inc) => inc.releasing,
                Phase::Released(rel) => {
                    matches!(
                        rel.power_on,
                        PowerOnStatus::Pending | PowerOnStatus::InFlight
                    )
                }
                Phase::Healthy => false,
            };
            if keep {
                state.gone = true;
                return self.reevaluate(Some(name), now);
            }
        }
        if let Some(state) = self.nodes.remove(name)
            && let Phase::Incident(inc) = &state.phase
            && !inc.releasing
        {
            out.push(Notice::warning(
                name,
                Reason::Recovered,
                "the Node object was deleted by someone else; procedure dropped",
            ));
        }
        out.extend(self.reevaluate(None, now));
        out
    }

    /// A release recorded by an earlier leader (see [`ReleaseRecord`]): resumes the
    /// node as released, with its pending power-on, whether or not its Node exists.
    /// Nothing is powered off or released again.
    pub fn resume(&mut self, name: &str, record: &ReleaseRecord, now: SystemTime) -> Vec<Action> {
        let power_on = if record.power_on_pending {
            PowerOnStatus::Pending
        } else {
            PowerOnStatus::NotWanted
        };
        match self.nodes.get_mut(name) {
            Some(state) => {
                state.phase = Phase::Released(Released::resumed(
                    record.released_at,
                    power_on,
                    &state.facts,
                ))
            }
            None => {
                let mut facts = NodeFacts::ready(name, now);
                facts.readiness = Readiness::NotReady {
                    since: record.released_at,
                };
                facts.lease_renewed = None;
                facts.identity = record.identity.clone();
                let mut state = NodeState::new(facts, now);
                state.phase = Phase::Released(Released::new(record.released_at, power_on));
                state.gone = true;
                self.nodes.insert(name.to_string(), Box::new(state));
            }
        }
        self.reevaluate(Some(name), now)
    }

    /// The answer to a [`Action::CheckDrained`]: `Ok(true)` when no pod and no
    /// VolumeAttachment is left on the node.
    pub fn drain_checked(
        &mut self,
        name: &str,
        result: Result<bool, String>,
        now: SystemTime,
    ) -> Vec<Action> {
        let interval = self.policy_for(name).on_poll_interval;
        if let Some(state) = self.nodes.get_mut(name)
            && let Phase::Released(rel) = &mut state.phase
        {
            rel.drain_checks.in_flight = false;
            match result {
                Ok(true) => rel.drained = true,
                Ok(false) => rel.drain_checks.next_at = Some(now + interval),
                Err(_) => {
                    rel.drain_checks.failures += 1;
                    rel.drain_checks.next_at = Some(now + interval);
                }
            }
        }
        self.reevaluate(Some(name), now)
    }

    /// Cluster-wide pause (planned maintenance): no power command and no release.
    pub fn set_paused(&mut self, paused: bool, now: SystemTime) -> Vec<Action> {
        self.paused = paused;
        self.reevaluate(None, now)
    }

    /// Holds everything back while a new term has not read every Node and kubelet
    /// Lease (set by the controller at the start of each term).
    pub fn set_syncing(&mut self, syncing: bool, now: SystemTime) -> Vec<Action> {
        self.syncing = syncing;
        self.reevaluate(None, now)
    }

    /// Whether the engine waits for the cluster's first lists.
    pub fn syncing(&self) -> bool {
        self.syncing
    }

    /// Timers: re-decides every node.
    pub fn tick(&mut self, now: SystemTime) -> Vec<Action> {
        self.reevaluate(None, now)
    }

    /// The timer of [`Engine::next_deadline`] fired: re-decides every node if a
    /// deadline is really due (the bound may be early), else only makes the bound
    /// exact.
    pub fn wake(&mut self, now: SystemTime) -> Vec<Action> {
        let exact = self.exact_deadline();
        self.deadline_bound = Some(exact);
        if exact.is_some_and(|d| d <= now) {
            self.tick(now)
        } else {
            Vec::new()
        }
    }

    /// When the engine next wants a [`Engine::wake`] without new observations: never
    /// later than the earliest node deadline, possibly earlier.
    pub fn next_deadline(&mut self) -> Option<SystemTime> {
        match self.deadline_bound {
            Some(bound) => bound,
            None => {
                let exact = self.exact_deadline();
                self.deadline_bound = Some(exact);
                exact
            }
        }
    }

    /// The earliest node deadline, from every node.
    fn exact_deadline(&self) -> Option<SystemTime> {
        self.nodes_with_policies()
            .filter_map(|(n, policy)| n.next_deadline(policy))
            .min()
    }

    /// Keeps the bound at or before `name`'s deadline (after `name` changed).
    fn lower_deadline(&mut self, name: &str) {
        if let Some(bound) = self.deadline_bound {
            let policy = self.node_policies.get(name).unwrap_or(&self.policy);
            let node = self.nodes.get(name).and_then(|n| n.next_deadline(policy));
            self.deadline_bound = Some(earliest(bound, node));
        }
    }

    /// Re-decides one node (or all), keeping the cluster-wide gates current.
    fn reevaluate(&mut self, only: Option<&str>, now: SystemTime) -> Vec<Action> {
        let mut out = self.update_storm(now);
        let names: Vec<String> = match only {
            Some(n) if self.nodes.contains_key(n) => vec![n.to_string()],
            Some(_) => Vec::new(),
            None => self.nodes.keys().cloned().collect(),
        };
        // Counted once; each power-off decided below takes a slot.
        let mut in_flight = self.power_offs_in_flight();
        for name in names {
            let gates = self.gates(in_flight, now);
            let policy = self.node_policies.get(&name).unwrap_or(&self.policy);
            let Some(state) = self.nodes.get_mut(&name) else {
                continue;
            };
            let was_in_flight = state.power_off_in_flight();
            let actions = state.evaluate(policy, gates, now);
            if actions.iter().any(|a| matches!(a, Action::PowerOff { .. })) {
                self.last_power_off = Some(now);
            }
            match (was_in_flight, state.power_off_in_flight()) {
                (false, true) => in_flight += 1,
                (true, false) => in_flight = in_flight.saturating_sub(1),
                _ => {}
            }
            out.extend(actions);
            if only.is_some() {
                self.lower_deadline(&name);
            }
        }
        if only.is_none() {
            self.deadline_bound = None;
        }
        out
    }

    fn power_offs_in_flight(&self) -> usize {
        self.nodes
            .values()
            .filter(|n| n.power_off_in_flight())
            .count()
    }

    fn gates(&self, in_flight: usize, now: SystemTime) -> Gates {
        let spaced = self.last_power_off.is_none_or(|t| {
            now.duration_since(t).unwrap_or_default() >= self.policy.min_power_off_interval
        });
        Gates {
            paused: self.paused,
            syncing: self.syncing,
            storm: self.storm,
            power_off_slot: in_flight < self.policy.max_concurrent_fences && spaced,
        }
    }

    fn update_storm(&mut self, now: SystemTime) -> Vec<Action> {
        // A node whose Node object nodefence deleted is not part of the cluster now.
        let (mut total, mut unhealthy) = (0, 0);
        for (n, policy) in self.nodes_with_policies().filter(|(n, _)| !n.node_gone()) {
            total += 1;
            if n.facts.counts_unhealthy(now, policy.lease_stale_after) {
                unhealthy += 1;
            }
        }
        let storm = self.policy.max_unhealthy.exceeded(unhealthy, total);
        if storm == self.storm {
            return Vec::new();
        }
        self.storm = storm;
        let (severity, reason, message) = if storm {
            (
                Severity::Warning,
                Reason::StormProtection,
                format!(
                    "{unhealthy} of {total} nodes are unhealthy at once: suspecting a partition on the control-plane side; no power-off commands until fewer are (machines confirmed Off may still be released)"
                ),
            )
        } else {
            (
                Severity::Normal,
                Reason::StormOver,
                format!("{unhealthy} of {total} nodes unhealthy: storm protection lifted"),
            )
        };
        vec![Action::Notify(Notice {
            node: None,
            severity,
            reason,
            message,
            series: None,
        })]
    }
}
