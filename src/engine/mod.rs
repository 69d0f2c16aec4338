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
//! node's state machine), [`action`] (effects and notices).

pub mod action;
mod decide;
pub mod facts;
pub mod node;
pub mod policy;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::time::SystemTime;

pub use action::{
    Action, Notice, OffProof, Reason, ReleasePlan, ReleaseRecord, Severity, Steps, Target,
};
pub use facts::{Exclusion, Health, NodeFacts, Readiness};
pub use node::{Block, NodeState, Phase, PowerOffStatus, PowerOnStatus};
pub use policy::{
    ForceDeletePods, LeaseStaleAfter, MaxUnhealthy, OnPoweredOn, Policy, ReleaseMode,
};

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
    nodes: BTreeMap<String, NodeState>,
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
        }
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
        self.nodes.get(name)
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
            (state, policy)
        })
    }

    pub fn nodes(&self) -> impl Iterator<Item = &NodeState> {
        self.nodes.values()
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
        match self.nodes.get_mut(&name) {
            Some(state) => {
                let mut facts = facts;
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
                let stays_healthy = matches!(state.phase, Phase::Healthy)
                    && !state.gone
                    && state.excluded_noted.is_none()
                    && !facts.our_taint
                    && state.facts.health(now, policy.lease_stale_after) == Health::Healthy
                    && facts.health(now, policy.lease_stale_after) == Health::Healthy;
                state.facts = facts;
                state.gone = false;
                if stays_healthy {
                    self.lower_deadline(&name);
                    return Vec::new();
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
                self.nodes.insert(name.clone(), state);
            }
        }
        self.reevaluate(Some(&name), now)
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
        let rel = Released::new(record.released_at, power_on);
        match self.nodes.get_mut(name) {
            Some(state) => state.phase = Phase::Released(rel),
            None => {
                let mut facts = NodeFacts::ready(name, now);
                facts.readiness = Readiness::NotReady {
                    since: record.released_at,
                };
                facts.lease_renewed = None;
                facts.identity = record.identity.clone();
                let mut state = NodeState::new(facts, now);
                state.phase = Phase::Released(rel);
                state.gone = true;
                self.nodes.insert(name.to_string(), state);
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
                        if reading.at > inc.since {
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
                    out.push(Notice::normal(
                        name,
                        Reason::Released,
                        match &inc.steps {
                            Some(steps) => format!("{what} ({})", steps.describe(Some(now))),
                            None => what.to_string(),
                        },
                    ));
                    if power_on == PowerOnStatus::Pending {
                        out.push(Action::Record {
                            node: name.to_string(),
                            record: Some(ReleaseRecord {
                                released_at: now,
                                mode: policy.release,
                                power_on_pending: true,
                                identity: state.facts.identity.clone(),
                            }),
                        });
                    }
                    state.phase = Phase::Released(Released::new(now, power_on));
                    state.queries = Default::default();
                }
                Err(reason) => {
                    inc.releasing = false;
                    inc.off_readings.clear();
                    state.queries.next_at = Some(now + policy.confirm_interval);
                    out.push(Notice::warning(
                        name,
                        Reason::ReleaseFailed,
                        format!("release not done: {reason}; the proof starts over"),
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
            if n.facts.health(now, policy.lease_stale_after) != Health::Healthy {
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
