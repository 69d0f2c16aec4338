//! The engine driven by a scripted BMC and an injected clock. Each test asserts what
//! was (not) done; `random_fault_schedules_never_release_without_proof` drives
//! thousands of random schedules and checks the one rule on every release.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, SystemTime};

use super::*;
use crate::power::{PowerError, PowerReading, PowerState};

fn t0() -> SystemTime {
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
        }
    }

    fn add(&mut self, name: &str, bmc: Bmc) {
        self.bmc.insert(name.into(), bmc);
        self.alive.insert(name.into());
        let f = NodeFacts::ready(name, self.now);
        self.facts.insert(name.into(), f.clone());
        let a = self.engine.observe(f, self.now);
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

    fn ready(&mut self, name: &str) {
        self.alive.insert(name.into());
        let now = self.now;
        self.set_facts(name, |f| {
            f.readiness = Readiness::Ready;
            f.lease_renewed = Some(now);
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
            let a = self.engine.tick(self.now);
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
                    self.engine.power_read(node, result, now)
                }
                Action::PowerOff { node, .. } => {
                    self.power_off_times.push(now);
                    if self.hold_power_off {
                        self.held.push(node.clone());
                        Vec::new()
                    } else {
                        // A real machine turns off; liars, scripts and dead BMCs go on as they were.
                        if matches!(self.bmc.get(node), Some(Bmc::State(_))) {
                            self.bmc.insert(node.clone(), Bmc::State(PowerState::Off));
                        }
                        self.engine.power_off_done(node, Ok(()), now)
                    }
                }
                Action::PowerOn { node } => {
                    self.power_on_times.push(now);
                    self.bmc.insert(node.clone(), Bmc::State(PowerState::On));
                    self.engine.power_on_done(node, Ok(()), now)
                }
                Action::Release { node, proof, .. } => {
                    self.check_release(node, proof);
                    self.release_times.entry(node.clone()).or_insert(now);
                    if let Some(f) = self.facts.get_mut(node) {
                        f.our_taint = true;
                    }
                    self.engine.release_done(node, Ok(()), now)
                }
                Action::RemoveTaint { node } => {
                    if let Some(f) = self.facts.get_mut(node) {
                        f.our_taint = false;
                    }
                    self.engine.taint_removed(node, Ok(()), now)
                }
                Action::Notify(_) => Vec::new(),
            };
            queue.extend(next);
        }
    }

    /// The one rule, checked against what the harness really answered.
    fn check_release(&self, node: &str, proof: &OffProof) {
        let n = self.engine.policy().confirm_readings as usize;
        let facts = &self.facts[node];
        let health = facts.health(self.now, self.engine.policy().lease_stale_after);
        let since = health
            .since()
            .unwrap_or_else(|| panic!("{node} released while healthy: {facts:?}"));
        assert!(
            proof.last_sign_of_life >= since,
            "proof older than the last sign of life"
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

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[test]
fn power_loss_is_released_from_the_stale_lease_before_not_ready() {
    let mut h = Harness::new(Policy::default());
    h.add("w1", Bmc::State(PowerState::On));
    h.add("w2", Bmc::State(PowerState::On));
    let lost = h.now;
    h.lose_power("w1");
    h.advance(secs(50)); // Kubernetes would mark it NotReady only now
    let released = h
        .release_times
        .get("w1")
        .copied()
        .expect("released on the fast path");
    let took = released.duration_since(lost).unwrap_or_default();
    // Lease stale after 25 s, then three readings one second apart.
    assert!(
        took >= secs(25) && took <= secs(30),
        "released {took:?} after the power loss"
    );
    assert_eq!(
        h.power_offs("w1"),
        0,
        "no power command for a machine already off"
    );
    assert!(!h.released("w2"));
}

#[test]
fn without_the_fast_path_release_follows_not_ready_within_the_confirmation() {
    let policy = Policy {
        lease_stale_after: None,
        ..Policy::default()
    };
    let mut h = Harness::new(policy);
    h.add("w1", Bmc::State(PowerState::On));
    h.lose_power("w1");
    h.advance(secs(50));
    assert!(!h.released("w1"), "not before Kubernetes says NotReady");
    h.not_ready("w1");
    let start = h.now;
    h.advance(secs(5));
    assert!(h.released("w1"));
    assert!(h.now.duration_since(start).unwrap_or_default() <= secs(5));
    assert!(h.reasons("w1").contains(&Reason::ConfirmedOff));
}

#[test]
fn a_machine_still_on_is_powered_off_after_unhealthy_after_then_released() {
    let mut h = Harness::new(Policy::default());
    h.add("w1", Bmc::State(PowerState::On));
    h.add("w2", Bmc::State(PowerState::On));
    h.add("w3", Bmc::State(PowerState::On));
    h.hang_kubelet("w1");
    h.not_ready("w1");
    h.advance(secs(59));
    assert_eq!(h.power_offs("w1"), 0, "not before unhealthy_after");
    assert!(!h.released("w1"));
    assert!(h.reasons("w1").contains(&Reason::MachineStillOn));
    h.advance(secs(10));
    assert_eq!(h.power_offs("w1"), 1);
    assert!(h.released("w1"));
}

#[test]
fn lease_staleness_alone_never_powers_off() {
    let mut h = Harness::new(Policy::default());
    h.add("w1", Bmc::State(PowerState::On));
    h.add("w2", Bmc::State(PowerState::On));
    // Kubelet stops renewing but the node is not yet NotReady; BMC says On.
    h.hang_kubelet("w1");
    h.advance(secs(300));
    assert_eq!(h.power_offs("w1"), 0);
    assert!(!h.released("w1"));
}

#[test]
fn an_unreachable_bmc_releases_nothing_and_backs_off() {
    let mut h = Harness::new(Policy::default());
    h.add("w1", Bmc::Error);
    h.not_ready("w1");
    h.advance(secs(600));
    assert!(!h.released("w1"));
    assert_eq!(h.power_offs("w1"), 0);
    let queries = h.count(|a| matches!(a, Action::QueryPower { .. }));
    assert!(
        queries < 30,
        "bounded backoff: {queries} queries in 10 minutes"
    );
    assert!(queries > 5, "but it keeps trying: {queries}");
    let warnings = h
        .reasons("w1")
        .iter()
        .filter(|r| **r == Reason::PowerQueryFailed)
        .count();
    assert_eq!(warnings, 1, "one warning, not one per retry");
}

#[test]
fn a_lying_or_flapping_bmc_is_never_released() {
    let mut h = Harness::new(Policy::default());
    let flap: VecDeque<Result<PowerState, ()>> = (0..400)
        .map(|i| {
            Ok(if i % 3 == 2 {
                PowerState::On
            } else {
                PowerState::Off
            })
        })
        .collect();
    h.add("flap", Bmc::Script(flap));
    h.add("liar", Bmc::Liar);
    for n in ["h1", "h2", "h3"] {
        h.add(n, Bmc::State(PowerState::On));
    }
    h.hang_kubelet("flap");
    h.hang_kubelet("liar");
    h.not_ready("flap");
    h.not_ready("liar");
    h.advance(secs(400));
    assert!(!h.released("flap"));
    assert!(!h.released("liar"));
    assert!(
        h.reasons("flap")
            .contains(&Reason::ContradictingPowerReadings)
    );
    assert_eq!(
        h.power_offs("liar"),
        3,
        "max_power_off_attempts, then a person"
    );
    assert!(h.reasons("liar").contains(&Reason::Blocked));
}

#[test]
fn transitional_and_unknown_states_release_nothing() {
    for state in [
        PowerState::PoweringOff,
        PowerState::PoweringOn,
        PowerState::Unknown("Standby".into()),
    ] {
        let mut h = Harness::new(Policy::default());
        h.add("w1", Bmc::State(state.clone()));
        h.not_ready("w1");
        h.advance(secs(300));
        assert!(!h.released("w1"), "{state}");
        assert_eq!(h.power_offs("w1"), 0, "{state}");
    }
}

#[test]
fn a_node_that_recovers_before_the_release_aborts_it() {
    let mut h = Harness::new(Policy {
        confirm_readings: 3,
        confirm_interval: secs(5),
        ..Policy::default()
    });
    h.add("w1", Bmc::State(PowerState::Off));
    h.hang_kubelet("w1");
    h.not_ready("w1");
    h.advance(secs(6));
    assert!(!h.released("w1"));
    h.bmc.insert("w1".into(), Bmc::State(PowerState::On));
    h.ready("w1");
    for _ in 0..60 {
        h.renew_leases();
        h.advance(secs(1));
    }
    assert!(!h.released("w1"), "Ready again: nothing is released");
    assert!(h.reasons("w1").contains(&Reason::RecoveredBeforeRelease));
}

#[test]
fn off_readings_older_than_a_newer_sign_of_life_do_not_count() {
    let mut h = Harness::new(Policy {
        confirm_interval: secs(5),
        ..Policy::default()
    });
    h.add("w1", Bmc::State(PowerState::Off));
    h.hang_kubelet("w1");
    h.not_ready("w1");
    h.advance(secs(6)); // two Off readings so far
    // The kubelet renews its Lease (it was alive after all), still NotReady.
    let now = h.now;
    h.set_facts("w1", |f| f.lease_renewed = Some(now));
    h.advance(secs(6));
    assert!(!h.released("w1"), "needs three readings after the renewal");
    h.advance(secs(10));
    assert!(h.released("w1"));
}

#[test]
fn storm_protection_stops_power_offs_but_not_releases_of_off_machines() {
    let mut h = Harness::new(Policy::default());
    for i in 0..10 {
        h.add(&format!("w{i}"), Bmc::State(PowerState::On));
    }
    h.add("dead", Bmc::State(PowerState::Off));
    h.hang_kubelet("dead");
    for i in 0..5 {
        h.hang_kubelet(&format!("w{i}"));
        h.not_ready(&format!("w{i}"));
    }
    h.not_ready("dead");
    h.advance(secs(120));
    let power_offs = h.count(|a| matches!(a, Action::PowerOff { .. }));
    assert_eq!(power_offs, 0, "6 of 11 unhealthy > 40%: no power-off");
    assert!(h.released("dead"), "an Off machine is still released");
    assert!(h.engine.storm_active());
    assert!(
        h.log
            .iter()
            .any(|a| matches!(a, Action::Notify(n) if n.reason == Reason::StormProtection))
    );
}

#[test]
fn power_offs_respect_concurrency_and_spacing() {
    let mut h = Harness::new(Policy {
        max_unhealthy: MaxUnhealthy::Count(100),
        max_concurrent_fences: 2,
        min_power_off_interval: secs(10),
        ..Policy::default()
    });
    for i in 0..4 {
        h.add(&format!("w{i}"), Bmc::State(PowerState::On));
        h.hang_kubelet(&format!("w{i}"));
    }
    for i in 0..4 {
        h.not_ready(&format!("w{i}"));
    }
    h.hold_power_off = true;
    h.advance(secs(120));
    assert_eq!(
        h.count(|a| matches!(a, Action::PowerOff { .. })),
        2,
        "two in flight at most"
    );
    let t = &h.power_off_times;
    assert!(
        t[1].duration_since(t[0]).unwrap_or_default() >= secs(10),
        "spaced by min_power_off_interval"
    );
    // Answering the held commands frees the slots for the other two.
    h.hold_power_off = false;
    for node in std::mem::take(&mut h.held) {
        let a = h.engine.power_off_done(&node, Ok(()), h.now);
        h.bmc.insert(node, Bmc::State(PowerState::Off));
        h.run(a);
    }
    h.advance(secs(60));
    assert_eq!(h.count(|a| matches!(a, Action::PowerOff { .. })), 4);
}

#[test]
fn pause_stops_every_mutation_and_resume_continues() {
    let mut h = Harness::new(Policy::default());
    h.add("w1", Bmc::State(PowerState::Off));
    h.add("w2", Bmc::State(PowerState::On));
    for n in ["h1", "h2", "h3"] {
        h.add(n, Bmc::State(PowerState::On));
    }
    for n in ["w1", "w2"] {
        h.hang_kubelet(n);
    }
    let a = h.engine.set_paused(true, h.now);
    h.run(a);
    h.not_ready("w1");
    h.not_ready("w2");
    h.advance(secs(300));
    assert!(
        !h.log.iter().any(Action::mutates),
        "paused: nothing mutating"
    );
    let a = h.engine.set_paused(false, h.now);
    h.run(a);
    for _ in 0..90 {
        h.renew_leases();
        h.advance(secs(1));
    }
    assert!(h.released("w1"));
    assert!(
        h.released("w2"),
        "powered off after unhealthy_after, then released"
    );
}

#[test]
fn excluded_nodes_are_never_touched() {
    let mut h = Harness::new(Policy::default());
    h.add("cp", Bmc::State(PowerState::Off));
    h.add("out", Bmc::State(PowerState::Off));
    h.add("unknown", Bmc::State(PowerState::Off));
    h.set_facts("cp", |f| f.control_plane = true);
    h.set_facts("out", |f| f.opted_out = true);
    h.set_facts("unknown", |f| f.in_inventory = false);
    for n in ["cp", "out", "unknown"] {
        h.not_ready(n);
    }
    h.advance(secs(300));
    assert!(!h.log.iter().any(|a| a.mutates()));
    assert!(!h.log.iter().any(|a| matches!(a, Action::QueryPower { .. })));
    assert_eq!(h.reasons("unknown"), vec![Reason::NodeIgnored], "said once");
}

#[test]
fn a_recovered_node_gets_its_taint_removed_after_recovered_after() {
    let mut h = Harness::new(Policy::default());
    h.add("w1", Bmc::State(PowerState::On));
    h.lose_power("w1");
    h.advance(secs(30));
    h.not_ready("w1");
    h.advance(secs(5));
    assert!(h.released("w1"));
    h.bmc.insert("w1".into(), Bmc::State(PowerState::On));
    h.ready("w1");
    h.advance(secs(10));
    assert_eq!(
        h.count(|a| matches!(a, Action::RemoveTaint { .. })),
        0,
        "not before recovered_after"
    );
    for _ in 0..30 {
        h.renew_leases();
        h.advance(secs(1));
    }
    assert_eq!(h.count(|a| matches!(a, Action::RemoveTaint { .. })), 1);
    assert!(matches!(
        h.engine.node("w1").map(|n| &n.phase),
        Some(Phase::Healthy)
    ));
}

/// A tiny deterministic PRNG so the schedules are reproducible without a dependency.
struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn random_fault_schedules_never_release_without_proof() {
    let states = [
        Ok(PowerState::Off),
        Ok(PowerState::On),
        Ok(PowerState::PoweringOff),
        Ok(PowerState::Unknown(String::new())),
        Err(()),
    ];
    let mut releases = 0;
    for seed in 1..=300u64 {
        let mut rng = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut h = Harness::new(Policy {
            confirm_interval: Duration::from_millis(500 + rng.below(2000)),
            max_unhealthy: MaxUnhealthy::Count(3),
            ..Policy::default()
        });
        let nodes = ["a", "b", "c", "d"];
        for n in nodes {
            let script: VecDeque<_> = (0..200)
                .map(|_| states[rng.below(5) as usize].clone())
                .collect();
            h.add(n, Bmc::Script(script));
        }
        for _ in 0..120 {
            let n = nodes[rng.below(4) as usize];
            match rng.below(6) {
                0 => h.not_ready(n),
                1 => h.ready(n),
                2 => {
                    let now = h.now;
                    h.set_facts(n, |f| f.lease_renewed = Some(now));
                }
                3 => {
                    let script: VecDeque<_> = (0..50)
                        .map(|_| states[rng.below(5) as usize].clone())
                        .collect();
                    h.bmc.insert(n.into(), Bmc::Script(script));
                }
                _ => {}
            }
            h.advance(Duration::from_millis(250 * (1 + rng.below(40))));
        }
        releases += h.count(|a| matches!(a, Action::Release { .. }));
    }
    assert!(releases > 0, "the schedules must exercise releases at all");
}

#[test]
fn a_node_released_by_an_earlier_leader_resumes_without_repeating_anything() {
    let mut h = Harness::new(Policy::default());
    h.add("w2", Bmc::State(PowerState::On));
    h.add("w3", Bmc::State(PowerState::On));
    // A new leader first sees w1 NotReady, with the taint nodefence recorded adding.
    let now = h.now;
    let mut facts = NodeFacts::ready("w1", now - secs(120));
    facts.readiness = Readiness::NotReady {
        since: now - secs(60),
    };
    facts.our_taint = true;
    h.bmc.insert("w1".into(), Bmc::State(PowerState::Off));
    h.facts.insert("w1".into(), facts.clone());
    let a = h.engine.observe(facts, now);
    h.run(a);
    h.advance(secs(120));
    assert!(!h.released("w1"), "released already: not again");
    assert_eq!(h.power_offs("w1"), 0);
    assert!(matches!(
        h.engine.node("w1").map(|n| &n.phase),
        Some(Phase::Released(_))
    ));
    // When it recovers, the recorded taint is removed.
    h.bmc.insert("w1".into(), Bmc::State(PowerState::On));
    h.ready("w1");
    h.advance(secs(40));
    assert_eq!(
        h.count(|a| matches!(a, Action::RemoveTaint { node } if node == "w1")),
        1
    );
}

#[test]
fn power_on_after_fence_waits_for_the_release_timeout() {
    let mut h = Harness::new(Policy {
        power_on_after_fence: true,
        release_timeout: secs(120),
        ..Policy::default()
    });
    h.add("w1", Bmc::State(PowerState::On));
    h.add("w2", Bmc::State(PowerState::On));
    h.lose_power("w1");
    h.advance(secs(40));
    let released = h.release_times.get("w1").copied().expect("released");
    h.advance(secs(60));
    assert_eq!(
        h.count(|a| matches!(a, Action::PowerOn { .. })),
        0,
        "not before release_timeout"
    );
    h.advance(secs(90));
    assert_eq!(h.power_on_times.len(), 1);
    let waited = h.power_on_times[0]
        .duration_since(released)
        .unwrap_or_default();
    assert!(
        waited >= secs(120) && waited < secs(122),
        "powered on {waited:?} after the release"
    );
}
