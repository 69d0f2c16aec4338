//! One seeded run: builds the world, plays the schedule, heals, and checks the end.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::PostParams;
use nodefence_mocks::kube::FakeKube;
use nodefence_mocks::kube::resources::{CONFIG_MAPS, CORE_EVENTS, EVENTS_V1};
use nodefence_mocks::kube::sim::{NodeSpec, SimConfig, Simulation, WorkloadSpec};
use nodefence_mocks::kube::store::Store;
use tokio::time::Instant;

use super::api::{self, ApiMode, ApiSide, LEADER};
use super::companion;
use super::machine::{Bmc, Counters, Machine, Rng, Truth, lock};
use super::requests;
use super::schedule::{
    Fault, clock_skews, companion_faults, companion_faults_52, remediation, report_lags, schedule,
    watch_drops,
};
use super::world::{
    CHAOS, CONTROL_PLANE, LIVENESS_BOUND, PASSWORD, RECOVERY_BOUND, TRANSITION, WORKERS, World,
    node_name, uuid_of, write_config,
};

/// What one seed did.
#[derive(Debug, Default)]
pub struct Outcome {
    pub violations: Vec<String>,
    pub counters: Counters,
    pub events: Vec<String>,
    /// nodefence's log of the run, loopback ports masked (they are the kernel's pick).
    pub log: String,
    /// The seed ran companions (`sim::companion::plan`).
    pub companions: bool,
}

/// Plays seed `seed` and returns what broke (nothing, when nodefence is right).
pub fn run(seed: u64) -> Outcome {
    run_with(seed, None)
}

/// Plays `faults` (at their offsets from the start of the chaos) instead of the
/// seed's schedule; the seed still draws everything else (machines, policy, the
/// API server's coin). For scenarios a random schedule reaches only now and then.
pub fn run_scripted(seed: u64, faults: Vec<(Duration, Fault)>) -> Outcome {
    run_with(seed, Some(faults))
}

/// [`run_scripted`] with companions set as `companions` says (scripted scenarios of
/// the watchdog level).
pub fn run_scripted_with_companions(
    seed: u64,
    faults: Vec<(Duration, Fault)>,
    companions: companion::Plan,
) -> Outcome {
    run_with_companions(seed, Some(faults), Some(companions))
}

fn run_with(seed: u64, script: Option<Vec<(Duration, Fault)>>) -> Outcome {
    let companions = match script {
        Some(_) => None,
        None if crate::REGRESSIONS.contains(&seed) => None,
        None => companion::plan(seed),
    };
    run_with_companions(seed, script, companions)
}

fn run_with_companions(
    seed: u64,
    script: Option<Vec<(Duration, Fault)>>,
    companions: Option<companion::Plan>,
) -> Outcome {
    // The watcher backoff's jitter (kube-runtime through backon) forks this thread's
    // fastrand generator; seeded here, a seed replays the same retries, whatever the
    // other threads do.
    fastrand::seed(seed ^ 0x6a69_7474_6572);
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_all().start_paused(true);
    // `tokio::select!` (nodefence's, kube's, hyper's) polls its branches from a random
    // start; seeded, a replay takes the same branches (.cargo/config.toml enables it).
    #[cfg(tokio_unstable)]
    builder.rng_seed(tokio::runtime::RngSeed::from_bytes(&seed.to_le_bytes()));
    let runtime = match builder.build() {
        Ok(r) => r,
        Err(e) => panic!("runtime: {e}"),
    };
    let logs = Arc::new(Mutex::new(Vec::<u8>::new()));
    let writer = {
        let logs = logs.clone();
        move || LogWriter(logs.clone())
    };
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            std::env::var("NODEFENCE_SIM_FILTER").unwrap_or_else(|_| "nodefence=info".into()),
        ))
        .with_writer(writer)
        .with_timer(VirtualTime)
        .with_ansi(false)
        .finish();
    let _log = tracing::subscriber::set_default(subscriber);
    let mut outcome = runtime.block_on(play(seed, script, companions, logs.clone()));
    drop(runtime);
    let log = String::from_utf8_lossy(&lock(&logs)).into_owned();
    if std::env::var_os("NODEFENCE_SIM_LOG").is_some() {
        eprintln!("{log}");
    }
    outcome.log = mask_ports(&log);
    outcome
}

/// `127.0.0.1:43435` → `127.0.0.1:PORT`.
fn mask_ports(log: &str) -> String {
    const HOST: &str = "127.0.0.1:";
    let mut out = String::with_capacity(log.len());
    let mut rest = log;
    while let Some(i) = rest.find(HOST) {
        out.push_str(&rest[..i + HOST.len()]);
        rest = rest[i + HOST.len()..].trim_start_matches(|c: char| c.is_ascii_digit());
        out.push_str("PORT");
    }
    out.push_str(rest);
    out
}

/// Log lines carry the simulation's (virtual) wall-clock time.
struct VirtualTime;
impl tracing_subscriber::fmt::time::FormatTime for VirtualTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        write!(
            w,
            "{}",
            humantime::format_rfc3339_millis(nodefence::clock::now())
        )
    }
}

/// Kept for the outcome; with `NODEFENCE_SIM_LIVE=1` also written to stderr as it
/// comes (a seed that never ends shows what it loops on).
struct LogWriter(Arc<Mutex<Vec<u8>>>);
impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        lock(&self.0).extend_from_slice(buf);
        if std::env::var_os("NODEFENCE_SIM_LIVE").is_some() {
            let _ = std::io::stderr().write_all(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

async fn play(
    seed: u64,
    script: Option<Vec<(Duration, Fault)>>,
    companions: Option<companion::Plan>,
    logs: Arc<Mutex<Vec<u8>>>,
) -> Outcome {
    let _clock =
        nodefence::clock::virtualize(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let mut rng = Rng::new(seed);
    let power_on_after_fence = rng.below(2) == 1;
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => panic!("tempdir: {e}"),
    };
    // Regression seeds and scripted scenarios play as they did before requests
    // existed (their faults are what they were recorded with).
    let plan = match script {
        Some(_) => None,
        None if crate::REGRESSIONS.contains(&seed) => None,
        None => remediation(seed),
    };
    let watchdog_fencing = companions.as_ref().is_some_and(|c| c.watchdog_fencing);
    let config_path = write_config(
        dir.path(),
        power_on_after_fence,
        plan.is_some(),
        watchdog_fencing,
    );
    let policy = match nodefence::config::load(&config_path) {
        Ok(c) => c.agent.policy,
        Err(e) => panic!("the simulation's configuration is invalid: {e}"),
    };
    let store = Store::default();
    let kube = FakeKube::builder().store(store.clone()).in_process();
    let sim = Arc::new(Simulation::start(store.clone(), SimConfig::default()));
    sim.add_node(NodeSpec::new(CONTROL_PLANE).control_plane(true));
    let truth = Arc::new(Truth {
        rng: Mutex::new(Rng::new(seed ^ 0xA5A5)),
        ..Truth::default()
    });
    // Scripted scenarios keep their BMCs prompt and their clocks right.
    let (lags, skews) = match script {
        Some(_) => (vec![None; WORKERS], vec![Duration::ZERO; WORKERS]),
        None => (report_lags(seed), clock_skews(seed)),
    };
    for (i, (lag, skew)) in lags.iter().zip(&skews).enumerate() {
        sim.add_node(
            NodeSpec::new(node_name(i))
                .system_uuid(uuid_of(i).to_uppercase())
                .clock_behind(*skew),
        );
        let mut machine = Machine::new(&node_name(i), &uuid_of(i));
        machine.lags = rng.below(2) == 1;
        machine.report_lag = *lag;
        truth.with(|ms| ms.push(machine));
    }
    sim.add_stateful_workload(WorkloadSpec::new("default", "db"));
    let operator_side = Arc::new(ApiSide {
        identity: "operator".into(),
        alive: Arc::new(AtomicBool::new(true)),
        mode: tokio::sync::watch::Sender::new(ApiMode::Normal),
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
        opted_out: Arc::new(Mutex::new(BTreeMap::new())),
        fleet: companions
            .clone()
            .map(|c| Arc::new(Mutex::new(companion::Fleet::new(c)))),
    };
    *lock(&truth.gate) = Some(world.gate());
    *lock(&truth.store) = Some(store.clone());
    if let Some(plan) = &plan {
        requests::install(&world.operator, plan.nhc).await;
    }
    world.start_replica(0);
    world.start_replica(1);
    if let Some(fleet) = &world.fleet {
        let side = Arc::new(ApiSide {
            identity: "companions".into(),
            alive: Arc::new(AtomicBool::new(true)),
            mode: tokio::sync::watch::Sender::new(ApiMode::Normal),
        });
        // Reads only: the truth of their checks is not nodefence's.
        let client = api::client(
            kube.router(),
            kube.token(),
            store.clone(),
            side,
            Arc::new(Truth::default()),
        );
        // Ends with the runtime.
        std::mem::forget(tokio::spawn(companion::drive(
            fleet.clone(),
            truth.clone(),
            store.clone(),
            client,
        )));
    }
    world.run_for(Duration::from_secs(20)).await;

    let start = Instant::now();
    let mut pending: Vec<(Instant, Fault)> = Vec::new();
    let mut events: Vec<String> = lags
        .iter()
        .enumerate()
        .filter_map(|(i, lag)| {
            lag.map(|d| {
                format!(
                    "   0s {}'s BMC reports On for {}s after a power-off",
                    node_name(i),
                    d.as_secs()
                )
            })
        })
        .chain(
            skews
                .iter()
                .enumerate()
                .filter(|(_, s)| !s.is_zero())
                .map(|(i, s)| {
                    format!(
                        "   0s {}'s clock runs {}s behind",
                        node_name(i),
                        s.as_secs()
                    )
                }),
        )
        .collect();
    if let Some(c) = &companions {
        events.push(format!(
            "   0s companions on every worker (watchdog {}s{}); clocks {:?} ppm, watchdogs {:?} ppm",
            companion::WATCHDOG.as_secs(),
            if c.watchdog_fencing {
                ", the watchdog level on"
            } else {
                ", the watchdog level off"
            },
            c.clock_ppm,
            c.watchdog_ppm
        ));
    }
    if let Some(nhc) = plan.as_ref().and_then(|p| p.nhc) {
        events.push(format!(
            "   0s NodeHealthCheck: Ready not True for {}s{}",
            nhc.unhealthy_for.as_secs(),
            nhc.escalate_after.map_or(String::new(), |t| format!(
                ", nodefence's step times out after {}s",
                t.as_secs()
            ))
        ));
    }
    let mut faults = match script {
        Some(script) => script,
        None => {
            let mut drawn = schedule(&mut rng);
            drawn.extend(watch_drops(seed));
            drawn.extend(plan.iter().flat_map(|p| p.faults.clone()));
            if companions.is_some() {
                drawn.extend(companion_faults(seed));
                drawn.extend(companion_faults_52(seed));
            }
            drawn
        }
    };
    faults.sort_by_key(|(at, _)| *at);
    for (at, fault) in faults {
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
        match f {
            // Everything but power: the rack's BMC is back, its machine stays off.
            Fault::RackPower(i, _) => world.machine(i, |m| m.bmc = Bmc::Healthy),
            f => world.end(f).await,
        }
    }
    for r in 0..2 {
        world.set_api(r, ApiMode::Normal);
        if world.frozen(r) {
            world.crash(r);
        }
        if world.replicas[r].is_none() {
            world.start_replica(r);
        }
    }
    world.pause(false).await;
    requests::delete_by_hand(&world.operator, &store).await;
    // A machine dead with its BMC stays so while invariant 6 is judged, when the
    // watchdog level can release it: then it must. It cannot under storm protection
    // (the mark is a power command in effect): with more machines off than
    // `max_unhealthy` allows, their BMCs come back as the others do; nor when no
    // replica running now heard its watchdog armed (both restarted after the machine
    // was lost): its BMC comes back too.
    let off_now = (0..WORKERS)
        .filter(|i| world.machine(*i, |m| !m.on))
        .count();
    let storm = policy.max_unhealthy.exceeded(off_now, WORKERS + 1);
    let rack_dead: Vec<usize> = match &world.fleet {
        Some(fleet) => {
            let mut f = lock(fleet);
            f.heal();
            if watchdog_fencing && !storm {
                f.rack_dead_heard()
            } else {
                Vec::new()
            }
        }
        None => Vec::new(),
    };
    for i in 0..WORKERS {
        world.opt_out(&node_name(i), false).await;
        let dead = rack_dead.contains(&i);
        world.machine(i, |m| {
            m.bmc = if dead && !m.on {
                Bmc::Timeout
            } else {
                Bmc::Healthy
            };
            m.network = true;
            m.hung = false;
        });
    }
    // Invariant 6: machines really off are released within the bound.
    let off: Vec<usize> = (0..WORKERS)
        .filter(|i| world.machine(*i, |m| !m.on))
        .collect();
    let gate = world.gate();
    let held_at_heal: Vec<usize> = rack_dead
        .iter()
        .copied()
        .filter(|i| gate(&node_name(*i)).is_some())
        .collect();
    let healed = Instant::now();
    let mut waiting = off.clone();
    while !waiting.is_empty() && Instant::now() < healed + LIVENESS_BOUND {
        world.run_for(Duration::from_secs(1)).await;
        waiting.retain(|i| {
            let released = world.released(&node_name(*i));
            if released && rack_dead.contains(i) {
                let ms = (Instant::now() - healed).as_millis() as u64;
                truth.count(|c| {
                    c.watchdog_liveness += 1;
                    c.watchdog_liveness_max_ms = c.watchdog_liveness_max_ms.max(ms);
                });
            }
            !released
        });
    }
    for i in waiting {
        let dead_bmc = world.machine(i, |m| m.bmc != Bmc::Healthy);
        if dead_bmc
            && (truth.left_to_next_remediator(&node_name(i))
                || held_at_heal.contains(&i)
                || (world.gate())(&node_name(i)).is_some())
        {
            // The mark is a power command in effect: not while its request has timed
            // out (NodeHealthCheck moved on to the next remediator, invariant 8), nor
            // under storm protection (the machines off and the nodes still NotReady
            // count), as a power-off would not be sent.
            continue;
        }
        truth.violation(format!(
            "invariant 6 (liveness): {} has been really off {} for {}s after the faults ended and is not released",
            node_name(i),
            if dead_bmc {
                "with its BMC (the watchdog level on: released on its watchdog)"
            } else {
                "with a working BMC"
            },
            LIVENESS_BOUND.as_secs()
        ));
    }
    for i in rack_dead {
        world.machine(i, |m| m.bmc = Bmc::Healthy);
    }
    // Invariant 5, reboot-style: with power_on_after_fence every machine nodefence
    // powered off is powered on again (once Kubernetes let go, or release_timeout).
    if power_on_after_fence {
        let deadline = Instant::now() + policy.release_timeout + Duration::from_secs(120);
        let still_off = |w: &World| {
            w.truth
                .with(|ms| {
                    ms.iter()
                        .filter(|m| m.fenced_by_us && !m.on && m.transition.is_none())
                        .map(|m| m.node.clone())
                        .collect::<Vec<_>>()
                })
                .into_iter()
                // Its request timed out: powering it on is the next remediator's job.
                .filter(|n| !w.truth.left_to_next_remediator(n))
                .collect::<Vec<_>>()
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
    // The operator repairs every machine still off, and goes on repairing any that is
    // off while they wait (a power-off sent just before the faults ended completes
    // after); invariant 5: all end Ready and untainted.
    let repair = |w: &World| {
        for i in 0..WORKERS {
            w.machine(i, |m| {
                if !m.on && m.transition.is_none() {
                    m.transition = Some((Instant::now() + TRANSITION, true));
                }
            });
        }
    };
    let repaired = Instant::now();
    // Invariant 10: NodeHealthCheck deletes its requests once the nodes are healthy;
    // every request deleted is gone (nodefence let go of its finalizer).
    let whole = |w: &World| {
        (0..WORKERS).all(|i| w.ready(&node_name(i)) && !w.released(&node_name(i)))
            && requests::stored(&w.store).is_empty()
    };
    while !whole(&world) && Instant::now() < repaired + RECOVERY_BOUND {
        repair(&world);
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
    for (key, r) in requests::stored(&store) {
        let finalizers = r
            .pointer("/metadata/finalizers")
            .cloned()
            .unwrap_or_default();
        truth.violation(match r.pointer("/metadata/deletionTimestamp") {
            Some(_) => format!(
                "invariant 10: request {key} was deleted and is still there {}s after the repair (finalizers {finalizers})",
                RECOVERY_BOUND.as_secs()
            ),
            None => format!(
                "invariant 10: request {key} stands {}s after its node was repaired (NodeHealthCheck did not delete it)",
                RECOVERY_BOUND.as_secs()
            ),
        });
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
        log: String::new(),
        companions: companions.is_some(),
    }
}
