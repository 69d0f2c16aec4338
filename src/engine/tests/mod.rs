//! The engine driven by a scripted BMC and an injected clock. Each test asserts what
//! was (not) done; `random::random_fault_schedules_never_release_without_proof`
//! drives thousands of random schedules and checks the one rule on every release.
//!
//! The harness is here; tests by theme: [`procedure`] (detection to release),
//! [`proof`] (the Off proof, and blocked incidents), [`gates`] (storm protection,
//! concurrency, pause, exclusions, per-node policies), [`identity`] (the identity
//! cross-check), [`recovery`] (after the release: power-on, records, recovery),
//! [`requests`] (remediation requests), [`watchdog`] (the watchdog level),
//! [`random`] (randomized fault schedules).

mod gates;
mod identity;
mod procedure;
mod proof;
mod random;
mod recovery;
mod requests;
mod returned;
mod watchdog;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, SystemTime};

use super::*;
use crate::identity::MachineIdentity;
use crate::power::{PowerError, PowerReading, PowerState};

pub(super) fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

/// What the scripted BMC answers for one node.
#[derive(Debug, Clone)]
enum Bmc {
    State(PowerState),
    Error,
    /// Answers from the script, then repeats the last entry.
    Script(VecDeque<Result<PowerState, ()>>),
    /// Accepts ForceOff but stays On.
    Liar,
}

struct Harness {
    engine: Engine,
    now: SystemTime,
    bmc: BTreeMap<String, Bmc>,
    facts: BTreeMap<String, NodeFacts>,
    log: Vec<Action>,
    /// Hold PowerOff answers (to test concurrency limits).
    hold_power_off: bool,
    held: Vec<String>,
    /// Every reading handed to the engine, per node: (time, state).
    readings: BTreeMap<String, Vec<(SystemTime, Option<PowerState>)>>,
    power_off_times: Vec<SystemTime>,
    release_times: BTreeMap<String, SystemTime>,
    power_on_times: Vec<SystemTime>,
    /// Kubelets that renew their Lease while their node is Ready.
    alive: BTreeSet<String>,
    last_renewal: SystemTime,
    /// Nodes whose pods are gone and volumes detached (answers to CheckDrained).
    drained: BTreeSet<String>,
    /// The release records the engine asked to keep.
    records: BTreeMap<String, ReleaseRecord>,
    /// Each release's plan, per node.
    plans: BTreeMap<String, ReleasePlan>,
    /// What each node's power source says its machine is (default: the node's own).
    machines: BTreeMap<String, MachineIdentity>,
    /// Power-on commands still to fail (the BMC unreachable, or the executor's
    /// pre-command identity check refusing).
    power_on_failures: u32,
    /// The watchdog level, as the heartbeat would answer: nodes with a companion that
    /// reports an armed watchdog, and how long after its mark the release rule proves
    /// a machine reset.
    armed: BTreeSet<String>,
    watchdog_wait: Duration,
    /// When each node's mark was written.
    marks: BTreeMap<String, SystemTime>,
    /// The executor refuses the next releases, with this reason.
    refuse_releases: Vec<String>,
    /// When each refused release was asked.
    refused_at: Vec<SystemTime>,
    /// Each node's boots so far (its kubelet reports `boot-<n>`), and the machines
    /// that went down since their kubelet last posted (their next status is a new
    /// boot's).
    boots: BTreeMap<String, u32>,
    went_down: BTreeSet<String>,
}

/// A watchdog proof as the release rule gives it.
pub(super) fn watchdog_proof(past: Duration) -> crate::watchdog::release::Proof {
    use crate::watchdog::release::{Anchor, Armed, Proof};
    use crate::watchdog::timing::Timing;
    Proof {
        armed: Armed {
            device: "iTCO_wdt".into(),
            granted: Duration::from_secs(10),
        },
        anchor: Anchor::Mark,
        since_anchor: Timing::default().wait(Duration::from_secs(10)).total() + past,
        wait: Timing::default().wait(Duration::from_secs(10)),
        heard: 2,
        cluster: 3,
    }
}

/// A distinct, well-formed SMBIOS UUID per node name.
pub(super) fn uuid_of(name: &str) -> String {
    let n = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    format!(
        "{:08x}-{:04x}-4{:03x}-8000-{:012x}",
        n >> 32,
        n & 0xffff,
        (n >> 16) & 0xfff,
        n & 0xffff_ffff_ffff
    )
}

impl Harness {
    fn new(policy: Policy) -> Self {
        Self {
            engine: Engine::new(policy),
            now: t0(),
            bmc: BTreeMap::new(),
            facts: BTreeMap::new(),
            log: Vec::new(),
            hold_power_off: false,
            held: Vec::new(),
            readings: BTreeMap::new(),
            power_off_times: Vec::new(),
            release_times: BTreeMap::new(),
            power_on_times: Vec::new(),
            alive: BTreeSet::new(),
            last_renewal: t0(),
            drained: BTreeSet::new(),
            records: BTreeMap::new(),
            plans: BTreeMap::new(),
            machines: BTreeMap::new(),
            power_on_failures: 0,
            armed: BTreeSet::new(),
            watchdog_wait: Duration::from_millis(12_743),
            marks: BTreeMap::new(),
            refuse_releases: Vec::new(),
            refused_at: Vec::new(),
            boots: BTreeMap::new(),
            went_down: BTreeSet::new(),
        }
    }

    fn add(&mut self, name: &str, bmc: Bmc) {
        self.bmc.insert(name.into(), bmc);
        self.alive.insert(name.into());
        self.machines
            .insert(name.into(), MachineIdentity::Uuid(uuid_of(name)));
        let mut f = NodeFacts::ready(name, self.now);
        f.identity.system_uuid = Some(uuid_of(name));
        f.last_heartbeat = Some(self.now);
        self.boots.insert(name.into(), 1);
        f.boot_id = Some(format!("{name}-boot-1"));
        self.facts.insert(name.into(), f.clone());
        let a = self.engine.observe(f, self.now);
        self.run(a);
    }

    /// A node an earlier term released, as this term first sees it: NotReady for a
    /// minute, its machine Off, nodefence's taint on it (and no release record).
    fn add_released_by_earlier_term(&mut self, name: &str) {
        let now = self.now;
        let mut facts = NodeFacts::ready(name, now - secs(120));
        facts.readiness = Readiness::NotReady {
            since: now - secs(60),
        };
        facts.our_taint = true;
        facts.our_taint_added = Some(now - secs(50));
        facts.identity.system_uuid = Some(uuid_of(name));
        self.bmc.insert(name.into(), Bmc::State(PowerState::Off));
        self.machines
            .insert(name.into(), MachineIdentity::Uuid(uuid_of(name)));
        self.facts.insert(name.into(), facts.clone());
        let a = self.engine.observe(facts, now);
        self.run(a);
    }

    fn set_facts(&mut self, name: &str, change: impl FnOnce(&mut NodeFacts)) {
        let f = self.facts.get_mut(name).expect("known node");
        change(f);
        let f = f.clone();
        let a = self.engine.observe(f, self.now);
        self.run(a);
    }

    /// The kubelet died at `now`: Lease stops; NotReady from `now + grace`.
    fn lose_power(&mut self, name: &str) {
        self.alive.remove(name);
        self.went_down.insert(name.into());
        self.bmc.insert(name.into(), Bmc::State(PowerState::Off));
    }

    /// The kubelet stops (hung, or cut off) while the machine stays on.
    fn hang_kubelet(&mut self, name: &str) {
        self.alive.remove(name);
    }

    fn not_ready(&mut self, name: &str) {
        let now = self.now;
        self.set_facts(name, |f| f.readiness = Readiness::NotReady { since: now });
    }

    /// Its kubelet posts a Ready status: of a new boot if its machine went down
    /// since it last posted, else of the same one.
    fn ready(&mut self, name: &str) {
        self.alive.insert(name.into());
        let now = self.now;
        let boot = if self.went_down.remove(name) {
            let n = self.boots.entry(name.into()).or_insert(1);
            *n += 1;
            Some(format!("{name}-boot-{n}"))
        } else {
            None
        };
        self.set_facts(name, |f| {
            f.readiness = Readiness::Ready;
            f.lease_renewed = Some(now);
            f.last_heartbeat = Some(now);
            if let Some(boot) = boot {
                f.boot_id = Some(boot);
            }
        });
    }

    /// Live kubelets of Ready nodes renew their Lease.
    fn renew_leases(&mut self) {
        let now = self.now;
        self.last_renewal = now;
        let names: Vec<String> = self
            .facts
            .iter()
            .filter(|(n, f)| f.readiness == Readiness::Ready && self.alive.contains(*n))
            .map(|(n, _)| n.clone())
            .collect();
        for n in names {
            self.set_facts(&n, |f| f.lease_renewed = Some(now));
        }
    }

    fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            self.now = (self.now + Duration::from_millis(250)).min(end);
            if self
                .now
                .duration_since(self.last_renewal)
                .unwrap_or_default()
                >= secs(1)
            {
                self.renew_leases();
            }
            // The bound the controller sleeps on is never later than a node's deadline.
            let bound = self.engine.next_deadline();
            let exact = self.engine.exact_deadline();
            assert!(
                exact.is_none() || bound.is_some_and(|b| Some(b) <= exact),
                "the engine's wake-up {bound:?} is later than a node's deadline {exact:?}"
            );
            let a = self.engine.wake(self.now);
            self.run(a);
        }
    }

    fn read(&mut self, node: &str) -> Result<PowerState, ()> {
        match self.bmc.get_mut(node) {
            Some(Bmc::State(s)) => Ok(s.clone()),
            Some(Bmc::Error) | None => Err(()),
            Some(Bmc::Liar) => Ok(PowerState::On),
            Some(Bmc::Script(q)) => {
                if q.len() > 1 {
                    q.pop_front().unwrap_or(Err(()))
                } else {
                    q.front().cloned().unwrap_or(Err(()))
                }
            }
        }
    }

    fn run(&mut self, actions: Vec<Action>) {
        let mut queue: VecDeque<Action> = actions.into();
        while let Some(a) = queue.pop_front() {
            self.log.push(a.clone());
            let now = self.now;
            let next = match &a {
                Action::QueryPower { node } => {
                    let mut identified = match self.machines.get(node) {
                        Some(m) => self.engine.machine_identified(node, m.clone(), now),
                        None => Vec::new(),
                    };
                    let r = self.read(node);
                    self.readings
                        .entry(node.clone())
                        .or_default()
                        .push((now, r.clone().ok()));
                    let result = r
                        .map(|state| PowerReading {
                            state,
                            at: now,
                            latency: Duration::ZERO,
                        })
                        .map_err(|()| PowerError::unreachable("connection refused"));
                    identified.extend(self.engine.power_read(node, result, now));
                    identified
                }
                Action::PowerOff { node, .. } => {
                    self.power_off_times.push(now);
                    if self.hold_power_off {
                        self.held.push(node.clone());
                        Vec::new()
                    } else {
                        // A real machine turns off (and its kubelet with it); liars,
                        // scripts and dead BMCs go on as they were.
                        if matches!(self.bmc.get(node), Some(Bmc::State(_))) {
                            self.bmc.insert(node.clone(), Bmc::State(PowerState::Off));
                            self.alive.remove(node);
                            self.went_down.insert(node.clone());
                        }
                        self.engine.power_off_done(node, Ok(()), now)
                    }
                }
                Action::PowerOn { node, .. } => {
                    self.power_on_times.push(now);
                    if self.power_on_failures > 0 {
                        self.power_on_failures -= 1;
                        let e = PowerError::unreachable("connection refused");
                        self.engine.power_on_done(node, Err(e), now)
                    } else {
                        self.bmc.insert(node.clone(), Bmc::State(PowerState::On));
                        self.engine.power_on_done(node, Ok(()), now)
                    }
                }
                Action::Release { node, .. } if !self.refuse_releases.is_empty() => {
                    let why = self.refuse_releases.remove(0);
                    self.refused_at.push(now);
                    self.engine.release_done(node, Err(why), now)
                }
                Action::Release {
                    node, proof, plan, ..
                } => {
                    self.check_release(node, proof);
                    self.plans.insert(node.clone(), *plan);
                    self.release_times.entry(node.clone()).or_insert(now);
                    let mut next = Vec::new();
                    if plan.mode == ReleaseMode::DeleteNode {
                        // As in the daemon: the Node watch reports the deletion before
                        // the executor reports the release done.
                        self.facts.remove(node);
                        next.extend(self.engine.node_deleted(node, now));
                    } else if let Some(f) = self.facts.get_mut(node) {
                        f.our_taint = true;
                        f.our_taint_added = Some(now);
                        // As the releaser writes it with the taint.
                        f.returned_mut().released_boot = Some(crate::engine::returned::EndedBoot {
                            since: proof.last_sign_of_life(),
                            boot: f.boot_id.clone(),
                            proof: match proof {
                                ReleaseProof::Off(_) => {
                                    crate::engine::returned::ProofKind::OffReadings
                                }
                                ReleaseProof::Watchdog(_) => {
                                    crate::engine::returned::ProofKind::Watchdog
                                }
                            },
                        });
                    }
                    next.extend(self.engine.release_done(node, Ok(()), now));
                    next
                }
                Action::RemoveTaint { node } => {
                    if let Some(f) = self.facts.get_mut(node) {
                        f.our_taint = false;
                        f.our_taint_added = None;
                        f.returned = None;
                    }
                    self.engine.taint_removed(node, Ok(()), now)
                }
                Action::CheckDrained { node } => {
                    let drained = self.drained.contains(node);
                    self.engine.drain_checked(node, Ok(drained), now)
                }
                Action::Record { node, record } => {
                    match record {
                        Some(r) => self.records.insert(node.clone(), r.clone()),
                        None => self.records.remove(node),
                    };
                    Vec::new()
                }
                Action::MarkForFencing { node, .. } => {
                    if self.armed.contains(node) {
                        self.marks.insert(node.clone(), now);
                        self.engine.mark_written(node, Ok(()), now)
                    } else {
                        let why = "its companion reports no armed hardware watchdog";
                        self.engine.mark_written(node, Err(why.into()), now)
                    }
                }
                Action::ClearMark { node } => {
                    self.marks.remove(node);
                    Vec::new()
                }
                Action::HoldMark { .. } => Vec::new(),
                Action::CheckWatchdog { node, .. } => {
                    let verdict = match self.marks.get(node) {
                        _ if !self.armed.contains(node) => WatchdogCheck::Refused(
                            "its companion reported no armed hardware watchdog".into(),
                        ),
                        Some(at) if now >= *at + self.watchdog_wait => {
                            WatchdogCheck::Proven(watchdog_proof(
                                now.duration_since(*at + self.watchdog_wait)
                                    .unwrap_or_default(),
                            ))
                        }
                        Some(at) => WatchdogCheck::Wait {
                            retry_at: *at + self.watchdog_wait,
                            why: "the wait after the mark".into(),
                        },
                        None => WatchdogCheck::Refused("the fencing mark is not written".into()),
                    };
                    self.engine.watchdog_checked(node, verdict, now)
                }
                Action::RecordContradiction { node, .. } => {
                    if let Some(f) = self.facts.get_mut(node) {
                        f.returned_mut().proof_contradicted = true;
                    }
                    Vec::new()
                }
                Action::Notify(_) => Vec::new(),
            };
            queue.extend(next);
        }
    }

    /// The one rule, checked against what the harness really answered.
    fn check_release(&self, node: &str, proof: &ReleaseProof) {
        match proof {
            ReleaseProof::Off(off) => self.check_off_release(node, off),
            ReleaseProof::Watchdog(w) => {
                let marked =
                    self.marks.get(node).copied().unwrap_or_else(|| {
                        panic!("{node} released on its watchdog without a mark")
                    });
                assert!(
                    self.now >= marked + self.watchdog_wait,
                    "{node} released on its watchdog before the wait"
                );
                assert!(self.armed.contains(node), "{node}: no armed watchdog");
                let given = self
                    .readings
                    .get(node)
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                let since = self.facts[node]
                    .health(self.now, self.engine.policy_for(node).lease_stale_after)
                    .since()
                    .unwrap_or_else(|| panic!("{node} released while healthy"));
                assert!(w.last_sign_of_life >= since);
                // Readings of the very instant of the decision may have been handed to
                // the engine after it (one batch of actions): the decision saw none.
                assert!(
                    given
                        .iter()
                        .filter(|(at, _)| *at > since && *at < self.now)
                        .all(|(_, s)| s.is_none()),
                    "{node}: released on its watchdog although its power source answered: {given:?}"
                );
            }
        }
    }

    fn check_off_release(&self, node: &str, proof: &OffProof) {
        let policy = self.engine.policy_for(node);
        let n = policy.confirm_readings as usize;
        let facts = &self.facts[node];
        let health = facts.health(self.now, policy.lease_stale_after);
        let since = health
            .since()
            .unwrap_or_else(|| panic!("{node} released while healthy: {facts:?}"));
        assert!(
            proof.last_sign_of_life >= since,
            "proof older than the last sign of life"
        );
        let identity = match &proof.machine {
            Some(m) => crate::identity::check(&facts.identity, m),
            None => crate::identity::IdentityCheck::Unknown("none".into()),
        };
        assert!(
            identity.is_match() || (!proof.require_identity && !identity.is_mismatch()),
            "{node}: released on a power source not proven to be its own: {identity:?}"
        );
        let given = &self.readings[node];
        assert!(given.len() >= n, "released with fewer than {n} readings");
        for (at, state) in &given[given.len() - n..] {
            assert_eq!(
                state.as_ref(),
                Some(&PowerState::Off),
                "{node}: a non-Off among the last {n} readings"
            );
            assert!(
                *at > since,
                "{node}: an Off reading older than the last sign of life"
            );
        }
    }

    fn count(&self, pred: impl Fn(&Action) -> bool) -> usize {
        self.log.iter().filter(|a| pred(a)).count()
    }

    fn released(&self, node: &str) -> bool {
        self.count(|a| matches!(a, Action::Release { node: n, .. } if n == node)) > 0
    }

    fn power_offs(&self, node: &str) -> usize {
        self.count(|a| matches!(a, Action::PowerOff { node: n, .. } if n == node))
    }

    fn reasons(&self, node: &str) -> Vec<Reason> {
        self.log
            .iter()
            .filter_map(|a| match a {
                Action::Notify(n) if n.node.as_deref() == Some(node) => Some(n.reason),
                _ => None,
            })
            .collect()
    }
}

pub(super) fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[test]
fn walking_nodes_and_policies_together_finds_each_nodes_policy() {
    let mut policies = BTreeMap::new();
    for (n, s) in [("a0", 5), ("b", 7), ("d", 9), ("zz", 11)] {
        policies.insert(
            n.to_string(),
            Policy {
                unhealthy_after: secs(s),
                ..Policy::default()
            },
        );
    }
    let mut engine = Engine::new(Policy::default()).with_node_policies(policies);
    for n in ["a", "b", "c", "d", "e"] {
        engine.observe(NodeFacts::ready(n, t0()), t0());
    }
    let walked: Vec<(String, Duration)> = engine
        .nodes_with_policies()
        .map(|(n, p)| (n.name().to_string(), p.unhealthy_after))
        .collect();
    let looked_up: Vec<(String, Duration)> = engine
        .nodes()
        .map(|n| {
            let p = engine.policy_for(n.name());
            (n.name().to_string(), p.unhealthy_after)
        })
        .collect();
    assert_eq!(walked, looked_up);
    assert_eq!(walked[1], ("b".to_string(), secs(7)));
    assert_eq!(
        walked[2],
        ("c".to_string(), Policy::default().unhealthy_after)
    );
}
