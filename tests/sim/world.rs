//! One seeded run: builds the world, plays the schedule, heals, and checks the end.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use nodefence::cluster::facts::{EXCLUDE_ANNOTATION, node_facts};
use nodefence::daemon::{self, DaemonOptions, DriverSource};
use nodefence_mocks::kube::FakeKube;
use nodefence_mocks::kube::resources::{CONFIG_MAPS, CORE_EVENTS, EVENTS_V1, LEASES, NODES};
use nodefence_mocks::kube::sim::{NodeSpec, SimConfig, SimHandle, Simulation, WorkloadSpec};
use nodefence_mocks::kube::store::Store;
use serde_json::Value;
use tokio::time::Instant;

use super::api::{self, ApiMode, ApiSide, LEADER, tainted};
use super::machine::{Bmc, Counters, Gate, Machine, Rng, SimDriver, Truth, lock};

pub const WORKERS: usize = 5;
const PASSWORD: &str = "sim-BMC-Secret-7781";
const BOOT: Duration = Duration::from_secs(40);
const TRANSITION: Duration = Duration::from_secs(4);
/// How long faults are played (then everything but dead machines is healed).
const CHAOS: Duration = Duration::from_secs(600);
/// Invariant 6: a machine really off, with a working BMC, is released within this
/// much of the faults ending (Lease staleness 25 s, a leader failover 15 s, a query
/// backoff of at most 60 s left from the chaos, three readings 1 s apart).
pub const LIVENESS_BOUND: Duration = Duration::from_secs(150);
/// After the repair: every node Ready again ends untainted within this.
const RECOVERY_BOUND: Duration = Duration::from_secs(240);

/// What one seed did.
#[derive(Debug, Default)]
pub struct Outcome {
    pub violations: Vec<String>,
    pub counters: Counters,
    pub events: Vec<String>,
}

/// A fault the schedule plays.
#[derive(Debug, Clone)]
enum Fault {
    PowerLoss(usize),
    NetworkCut(usize),
    Hang(usize),
    /// Power back (if off), network back, hang over: the machine comes back.
    Restore(usize),
    Bmc(usize, Bmc, Duration),
    Api(usize, ApiMode, Duration),
    Crash(usize, Duration),
    /// Most nodes cut at once (a partition on the control-plane side).
    Storm(Duration),
    Pause(Duration),
    OptOut(usize, Duration),
}

fn schedule(rng: &mut Rng) -> Vec<(Duration, Fault)> {
    let n = 8 + rng.below(12);
    let mut out = Vec::new();
    for _ in 0..n {
        let at = Duration::from_secs(20 + rng.below(CHAOS.as_secs() - 60));
        let node = rng.below(WORKERS as u64) as usize;
        let span = Duration::from_secs(10 + rng.below(120));
        let fault = match rng.below(15) {
            0 | 1 => Fault::PowerLoss(node),
            2 => Fault::NetworkCut(node),
            3 => Fault::Hang(node),
            4 => Fault::Restore(node),
            5 | 6 | 12 => {
                let bmc = match rng.below(7) {
                    0 => Bmc::Timeout,
                    1 => Bmc::ServerError,
                    2 => Bmc::AuthRefused,
                    3 => Bmc::Lies,
                    4 => Bmc::Flapping,
                    5 => Bmc::OtherMachine(node + 1 + rng.below(WORKERS as u64 - 1) as usize),
                    _ => Bmc::LosesReplies,
                };
                // Half the BMC faults strike a node that fails at the same time: the
                // moment the fault matters.
                if rng.below(2) == 1 {
                    let cut = if rng.below(2) == 1 {
                        Fault::NetworkCut(node)
                    } else {
                        Fault::PowerLoss(node)
                    };
                    out.push((at, cut));
                }
                Fault::Bmc(node, bmc, span + Duration::from_secs(rng.below(120)))
            }
            7 | 8 => {
                let mode = match rng.below(5) {
                    0 => ApiMode::Errors500,
                    1 => ApiMode::Conflicts,
                    2 => ApiMode::TooMany,
                    3 => ApiMode::Slow(Duration::from_millis(200 + rng.below(3000))),
                    _ => ApiMode::Cut,
                };
                Fault::Api(rng.below(2) as usize, mode, span)
            }
            9 => Fault::Crash(rng.below(2) as usize, Duration::from_secs(rng.below(60))),
            10 | 11 => match rng.below(3) {
                0 => Fault::Storm(span),
                1 => Fault::Pause(span),
                _ => Fault::OptOut(node, span),
            },
            _ => Fault::PowerLoss(node),
        };
        out.push((at, fault));
    }
    out.sort_by_key(|(at, _)| *at);
    out
}

/// A running replica incarnation.
struct Replica {
    side: Arc<ApiSide>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

struct World {
    truth: Arc<Truth>,
    sim: Arc<SimHandle>,
    store: Store,
    router: axum::Router,
    token: String,
    operator: kube::Client,
    config_path: std::path::PathBuf,
    replicas: Vec<Option<Replica>>,
    /// When each replica's pending API fault ends, per replica.
    policy: nodefence::engine::Policy,
    /// Pause and opt-out switches: (since when, set).
    paused_since: Arc<Mutex<Option<Instant>>>,
    opted_out: Arc<Mutex<BTreeMap<String, Instant>>>,
}

pub fn node_name(i: usize) -> String {
    format!("worker-{}", i + 1)
}

fn uuid_of(i: usize) -> String {
    format!("4c4c4544-0042-3510-8053-b7c04f3{i:05}")
}

fn write_config(dir: &std::path::Path, power_on_after_fence: bool) -> std::path::PathBuf {
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text).unwrap_or_else(|e| panic!("writing {name}: {e}"))
    };
    write("bmc-password", PASSWORD);
    write(
        "nodefence.toml",
        &format!(
            "inventory = \"inventory.toml\"\n[power]\nmonitor_interval = \"60s\"\n\
             [policy]\npower_on_after_fence = {power_on_after_fence}\n"
        ),
    );
    let mut inventory = String::from(
        "[defaults]\ndriver = \"redfish\"\nusername = \"fence\"\npassword_file = \"bmc-password\"\n",
    );
    for i in 0..WORKERS {
        inventory.push_str(&format!(
            "\n[nodes.{}]\nendpoint = \"https://bmc-{}.sim.invalid\"\n",
            node_name(i),
            i + 1
        ));
    }
    write("inventory.toml", &inventory);
    dir.join("nodefence.toml")
}

impl World {
    fn start_replica(&mut self, r: usize) {
        let alive = Arc::new(AtomicBool::new(true));
        let side = Arc::new(ApiSide {
            identity: format!("nodefence-{}", ["a", "b"][r]),
            alive: alive.clone(),
            mode: Mutex::new(ApiMode::Normal),
        });
        let client = api::client(
            self.router.clone(),
            self.token.clone(),
            self.store.clone(),
            side.clone(),
            self.truth.clone(),
        );
        let truth = self.truth.clone();
        let names: Vec<String> = (0..WORKERS).map(node_name).collect();
        let build: Arc<daemon::DriverBuilder> = Arc::new(move |target| {
            let index = names
                .iter()
                .position(|n| *n == target.name)
                .ok_or_else(|| nodefence::power::PowerError::config("not simulated"))?;
            Ok(Arc::new(SimDriver {
                truth: truth.clone(),
                index,
                alive: alive.clone(),
                transition: TRANSITION,
                request_timeout: Duration::from_secs(10),
            }) as Arc<dyn nodefence::power::PowerDriver>)
        });
        let options = DaemonOptions {
            drivers: DriverSource::Given(build),
            dry_run: false,
            listen: "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}")),
            lease_namespace: LEADER.0.into(),
            lease_name: LEADER.1.into(),
            identity: side.identity.clone(),
            leader_timings: Default::default(),
            config_check: None,
        };
        let config = match nodefence::config::load(&self.config_path) {
            Ok(c) => c,
            Err(e) => panic!("the simulation's configuration is invalid: {e}"),
        };
        let task = tokio::spawn(daemon::run(config, client, options, std::future::pending()));
        self.replicas[r] = Some(Replica { side, task });
    }

    fn crash(&mut self, r: usize) {
        if let Some(rep) = self.replicas[r].take() {
            rep.side.alive.store(false, Ordering::SeqCst);
            rep.task.abort();
        }
    }

    fn set_api(&self, r: usize, mode: ApiMode) {
        if let Some(rep) = &self.replicas[r] {
            *lock(&rep.side.mode) = mode;
        }
    }

    fn machine<R>(&self, i: usize, f: impl FnOnce(&mut Machine) -> R) -> R {
        self.truth.with(|ms| f(&mut ms[i]))
    }

    async fn pause(&self, on: bool) {
        if on {
            *lock(&self.paused_since) = Some(Instant::now());
        }
        let _ = nodefence::cluster::pause::set(
            self.operator.clone(),
            LEADER.0,
            on,
            Some("simulated"),
            "sim",
        )
        .await;
        if !on {
            *lock(&self.paused_since) = None;
        }
    }

    async fn opt_out(&self, node: &str, on: bool) {
        if on {
            lock(&self.opted_out).insert(node.to_string(), Instant::now());
        }
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.operator.clone());
        let value = if on {
            Value::String("true".into())
        } else {
            Value::Null
        };
        let patch = serde_json::json!({"metadata": {"annotations": {EXCLUDE_ANNOTATION: value}}});
        let _ = nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
        if !on {
            lock(&self.opted_out).remove(node);
        }
    }

    /// Machines and kubelets follow the truth (every 250 ms of virtual time).
    fn physics(&self) {
        let wall = nodefence::clock::now();
        self.truth.settle(wall, BOOT);
        let now = Instant::now();
        let states: Vec<(String, bool)> = self.truth.with(|ms| {
            ms.iter_mut()
                .map(|m| {
                    let up = m.kubelet_up(now);
                    if up {
                        m.failed_at = None;
                    } else {
                        m.fail(wall);
                    }
                    (m.node.clone(), up)
                })
                .collect()
        });
        for (node, up) in states {
            if self.sim.kubelet_running(&node) != Some(up) {
                self.sim.set_kubelet(&node, up);
            }
        }
    }

    /// Why a power-off sent now breaks invariant 2, if it does.
    fn gate(&self) -> Arc<Gate> {
        let store = self.store.clone();
        let paused = self.paused_since.clone();
        let opted = self.opted_out.clone();
        let policy = self.policy.clone();
        Arc::new(move |node: &str| {
            let settled =
                |since: Instant| Instant::now().duration_since(since) >= Duration::from_secs(1);
            if lock(&paused).is_some_and(settled) {
                return Some("fencing is paused".into());
            }
            if lock(&opted).get(node).copied().is_some_and(settled) {
                return Some("the node is opted out".into());
            }
            // Storm: more nodes unhealthy than allowed already 2 s ago.
            let then = nodefence::clock::now() - Duration::from_secs(2);
            let (nodes, _) = store.list(NODES, None);
            let mut unhealthy = 0;
            let mut total = 0;
            for n in &nodes {
                let Ok(node) =
                    serde_json::from_value::<k8s_openapi::api::core::v1::Node>(n.clone())
                else {
                    continue;
                };
                let name = node.metadata.name.clone().unwrap_or_default();
                let lease = store
                    .get(LEASES, Some("kube-node-lease"), &name)
                    .ok()
                    .and_then(|l| serde_json::from_value(l).ok());
                let facts = node_facts(&node, lease.as_ref(), true);
                total += 1;
                if facts.health(then, policy.lease_stale_after)
                    != nodefence::engine::Health::Healthy
                {
                    unhealthy += 1;
                }
            }
            if policy.max_unhealthy.exceeded(unhealthy, total) {
                return Some(format!(
                    "{unhealthy} of {total} nodes were unhealthy: storm protection holds"
                ));
            }
            None
        })
    }

    async fn apply(&mut self, fault: &Fault, later: &mut Vec<(Instant, Fault)>) {
        let wall = nodefence::clock::now();
        match fault.clone() {
            Fault::PowerLoss(i) => self.machine(i, |m| {
                if m.on {
                    m.on = false;
                    m.transition = None;
                    m.off_since = Some(wall);
                    m.fail(wall);
                }
            }),
            Fault::NetworkCut(i) => self.machine(i, |m| m.network = false),
            Fault::Hang(i) => self.machine(i, |m| m.hung = true),
            Fault::Restore(i) => self.machine(i, |m| {
                m.network = true;
                m.hung = false;
                if !m.on && m.transition.is_none() {
                    m.transition = Some((Instant::now() + TRANSITION, true));
                }
            }),
            Fault::Bmc(i, bmc, span) => {
                self.machine(i, |m| m.bmc = bmc);
                later.push((
                    Instant::now() + span,
                    Fault::Bmc(i, Bmc::Healthy, Duration::ZERO),
                ));
            }
            Fault::Api(r, mode, span) => {
                self.set_api(r, mode);
                if mode != ApiMode::Normal {
                    later.push((
                        Instant::now() + span,
                        Fault::Api(r, ApiMode::Normal, Duration::ZERO),
                    ));
                }
            }
            Fault::Crash(r, down) => {
                self.crash(r);
                later.push((
                    Instant::now() + down,
                    Fault::Api(r, ApiMode::Normal, Duration::MAX),
                ));
            }
            Fault::Storm(span) => {
                for i in 0..WORKERS - 1 {
                    self.machine(i, |m| m.network = false);
                }
                for i in 0..WORKERS - 1 {
                    later.push((Instant::now() + span, Fault::Restore(i)));
                }
            }
            Fault::Pause(span) => {
                self.pause(true).await;
                later.push((Instant::now() + span, Fault::Pause(Duration::ZERO)));
            }
            Fault::OptOut(i, span) => {
                self.opt_out(&node_name(i), true).await;
                later.push((Instant::now() + span, Fault::OptOut(i, Duration::ZERO)));
            }
        }
    }

    /// Ends a fault whose time is up (`Api(r, Normal, MAX)` restarts a crashed replica).
    async fn end(&mut self, fault: Fault) {
        match fault {
            Fault::Api(r, _, Duration::MAX) if self.replicas[r].is_none() => {
                self.start_replica(r);
            }
            Fault::Api(r, mode, _) => self.set_api(r, mode),
            Fault::Bmc(i, bmc, _) => self.machine(i, |m| m.bmc = bmc),
            Fault::Pause(_) => self.pause(false).await,
            Fault::OptOut(i, _) => self.opt_out(&node_name(i), false).await,
            Fault::Restore(i) => self.machine(i, |m| {
                m.network = true;
                m.hung = false;
            }),
            _ => {}
        }
    }

    async fn run_for(&self, d: Duration) {
        let end = Instant::now() + d;
        while Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(250)).await;
            self.physics();
        }
    }

    fn node(&self, name: &str) -> Option<Value> {
        self.store.get(NODES, None, name).ok()
    }

    fn released(&self, name: &str) -> bool {
        self.node(name).is_none_or(|n| tainted(&n))
    }

    fn ready(&self, name: &str) -> bool {
        self.node(name).is_some_and(|n| {
            n.pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
        })
    }
}

/// Plays seed `seed` and returns what broke (nothing, when nodefence is right).
pub fn run(seed: u64) -> Outcome {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
    {
        Ok(r) => r,
        Err(e) => panic!("runtime: {e}"),
    };
    let logs = Arc::new(Mutex::new(Vec::<u8>::new()));
    let writer = {
        let logs = logs.clone();
        move || LogWriter(logs.clone())
    };
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("nodefence=info"))
        .with_writer(writer)
        .with_ansi(false)
        .finish();
    let _log = tracing::subscriber::set_default(subscriber);
    let outcome = runtime.block_on(play(seed, logs.clone()));
    drop(runtime);
    if std::env::var_os("NODEFENCE_SIM_LOG").is_some() {
        eprintln!("{}", String::from_utf8_lossy(&lock(&logs)));
    }
    outcome
}

struct LogWriter(Arc<Mutex<Vec<u8>>>);
impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        lock(&self.0).extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

async fn play(seed: u64, logs: Arc<Mutex<Vec<u8>>>) -> Outcome {
    let _clock =
        nodefence::clock::virtualize(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let mut rng = Rng::new(seed);
    let power_on_after_fence = rng.below(2) == 1;
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => panic!("tempdir: {e}"),
    };
    let config_path = write_config(dir.path(), power_on_after_fence);
    let policy = match nodefence::config::load(&config_path) {
        Ok(c) => c.agent.policy,
        Err(e) => panic!("the simulation's configuration is invalid: {e}"),
    };
    let store = Store::default();
    let kube = FakeKube::builder().store(store.clone()).in_process();
    let sim = Arc::new(Simulation::start(store.clone(), SimConfig::default()));
    sim.add_node(NodeSpec::new("cp-1").control_plane(true));
    let truth = Arc::new(Truth {
        rng: Mutex::new(Rng::new(seed ^ 0xA5A5)),
        ..Truth::default()
    });
    for i in 0..WORKERS {
        sim.add_node(NodeSpec::new(node_name(i)).system_uuid(uuid_of(i).to_uppercase()));
        let mut machine = Machine::new(&node_name(i), &uuid_of(i));
        machine.lags = rng.below(2) == 1;
        truth.with(|ms| ms.push(machine));
    }
    sim.add_stateful_workload(WorkloadSpec::new("default", "db"));
    let operator_side = Arc::new(ApiSide {
        identity: "operator".into(),
        alive: Arc::new(AtomicBool::new(true)),
        mode: Mutex::new(ApiMode::Normal),
    });
    // The operator's writes (namespace, pause, opt-out) are not nodefence's: a
    // separate truth absorbs their checks.
    let operator = api::client(
        kube.router(),
        kube.token(),
        store.clone(),
        operator_side,
        Arc::new(Truth::default()),
    );
    let namespaces: Api<Namespace> = Api::all(operator.clone());
    let ns = serde_json::from_value(serde_json::json!({"metadata": {"name": LEADER.0}}))
        .unwrap_or_else(|e| panic!("{e}"));
    if let Err(e) = namespaces.create(&PostParams::default(), &ns).await {
        panic!("creating the namespace: {e}");
    }
    let mut world = World {
        truth: truth.clone(),
        sim: sim.clone(),
        store: store.clone(),
        router: kube.router(),
        token: kube.token(),
        operator,
        config_path,
        replicas: vec![None, None],
        policy: policy.clone(),
        paused_since: Arc::new(Mutex::new(None)),
        opted_out: Arc::new(Mutex::new(BTreeMap::new())),
    };
    *lock(&truth.gate) = Some(world.gate());
    world.start_replica(0);
    world.start_replica(1);
    world.run_for(Duration::from_secs(20)).await;

    let start = Instant::now();
    let mut pending: Vec<(Instant, Fault)> = Vec::new();
    let mut events = Vec::new();
    for (at, fault) in schedule(&mut rng) {
        let when = start + at;
        loop {
            pending.sort_by_key(|(t, _)| *t);
            let next_end = pending.first().map(|(t, _)| *t).filter(|t| *t <= when);
            let until = next_end.unwrap_or(when);
            while Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(250).min(until - Instant::now())).await;
                world.physics();
            }
            match next_end {
                Some(_) => {
                    let (_, f) = pending.remove(0);
                    world.end(f).await;
                }
                None => break,
            }
        }
        events.push(format!("{:>4}s {fault:?}", at.as_secs()));
        truth.count(|c| c.faults += 1);
        let mut later = Vec::new();
        world.apply(&fault, &mut later).await;
        pending.extend(later);
    }
    let chaos_end = start + CHAOS;
    if Instant::now() < chaos_end {
        world.run_for(chaos_end - Instant::now()).await;
    }
    // Heal everything but power: every fault's end, every replica back, switches off.
    pending.sort_by_key(|(t, _)| *t);
    for (_, f) in std::mem::take(&mut pending) {
        world.end(f).await;
    }
    for r in 0..2 {
        world.set_api(r, ApiMode::Normal);
        if world.replicas[r].is_none() {
            world.start_replica(r);
        }
    }
    world.pause(false).await;
    for i in 0..WORKERS {
        world.opt_out(&node_name(i), false).await;
        world.machine(i, |m| {
            m.bmc = Bmc::Healthy;
            m.network = true;
            m.hung = false;
        });
    }
    // Invariant 6: machines really off are released within the bound.
    let off: Vec<usize> = (0..WORKERS)
        .filter(|i| world.machine(*i, |m| !m.on))
        .collect();
    let healed = Instant::now();
    let mut waiting = off.clone();
    while !waiting.is_empty() && Instant::now() < healed + LIVENESS_BOUND {
        world.run_for(Duration::from_secs(1)).await;
        waiting.retain(|i| !world.released(&node_name(*i)));
    }
    for i in waiting {
        truth.violation(format!(
            "invariant 6 (liveness): {} has been really off with a working BMC for {}s after the faults ended and is not released",
            node_name(i),
            LIVENESS_BOUND.as_secs()
        ));
    }
    // Invariant 5, reboot-style: with power_on_after_fence every machine nodefence
    // powered off is powered on again (once Kubernetes let go, or release_timeout).
    if power_on_after_fence {
        let deadline = Instant::now() + policy.release_timeout + Duration::from_secs(120);
        let still_off = |w: &World| {
            w.truth.with(|ms| {
                ms.iter()
                    .filter(|m| m.fenced_by_us && !m.on && m.transition.is_none())
                    .map(|m| m.node.clone())
                    .collect::<Vec<_>>()
            })
        };
        while !still_off(&world).is_empty() && Instant::now() < deadline {
            world.run_for(Duration::from_secs(1)).await;
        }
        for node in still_off(&world) {
            truth.violation(format!(
                "invariant 5: {node}'s machine was powered off by nodefence under power_on_after_fence and is still off {}s after the faults ended",
                (Instant::now() - healed).as_secs()
            ));
        }
    }
    // The operator repairs every machine still off; invariant 5: all end Ready and untainted.
    for i in 0..WORKERS {
        world.machine(i, |m| {
            if !m.on && m.transition.is_none() {
                m.transition = Some((Instant::now() + TRANSITION, true));
            }
        });
    }
    let repaired = Instant::now();
    let whole =
        |w: &World| (0..WORKERS).all(|i| w.ready(&node_name(i)) && !w.released(&node_name(i)));
    while !whole(&world) && Instant::now() < repaired + RECOVERY_BOUND {
        world.run_for(Duration::from_secs(1)).await;
    }
    for i in 0..WORKERS {
        let name = node_name(i);
        if !world.ready(&name) {
            truth.violation(format!(
                "invariant 5: {name} is not Ready {}s after its machine was repaired",
                RECOVERY_BOUND.as_secs()
            ));
        } else if world.released(&name) {
            truth.violation(format!(
                "invariant 5: {name} is Ready again but still tainted out-of-service"
            ));
        }
    }
    // Invariant 7: no password or token in any log line or Event.
    let text = String::from_utf8_lossy(&lock(&logs)).into_owned();
    let token = kube.token();
    let mut shown = text;
    for rt in [CORE_EVENTS, EVENTS_V1, CONFIG_MAPS] {
        for e in store.list(rt, None).0 {
            shown.push_str(&e.to_string());
        }
    }
    for (secret, what) in [
        (PASSWORD, "the BMC password"),
        (token.as_str(), "the API token"),
    ] {
        if shown.contains(secret) {
            truth.violation(format!(
                "invariant 7: {what} appears in a log line or an Event"
            ));
        }
    }
    for r in 0..2 {
        world.crash(r);
    }
    drop(sim);
    let violations = lock(&truth.violations).clone();
    let counters = *lock(&truth.counters);
    Outcome {
        violations,
        counters,
        events,
    }
}
