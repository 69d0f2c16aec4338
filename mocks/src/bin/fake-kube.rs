//! `fake-kube`: the fake Kubernetes API server as a process, for CI scripts, kubectl
//! and manual runs of nodefence.
//!
//! Shell-driven tests need an API server on a port and a kubeconfig file, not a
//! library. This binary starts one, writes the kubeconfig if asked (before it
//! announces itself, so a script can use it as soon as it sees the line), prints
//! exactly one line to stdout once it accepts connections
//! (`fake-kube listening on https://localhost:PORT`), and runs until SIGINT or
//! SIGTERM. Logs go to stderr (`RUST_LOG`).
//!
//! Its defaults are what a user expects of a cluster: HTTPS with a generated CA and
//! a bearer token (both in the kubeconfig: kubectl sends tokens over HTTPS only) and
//! three simulated workers, so `fake-kube --kubeconfig k` then `kubectl --kubeconfig
//! k get nodes` shows nodes. `--plain-http` and `--nodes 0` give the bare server.
//!
//! With `--nodes N` a simulated control plane runs behind the API (kubelets renewing
//! Leases, node lifecycle controller, taint eviction, PodGC, attach/detach, a
//! StatefulSet-like workload per `--workload`), `--speed` times faster than real
//! time. `POST /admin/kubelets/{node}` with `{"running": false}` (bearer token
//! required) silences a node's kubelet, as a power loss would; `GET /admin/sim`
//! shows the nodes and the simulation's timeline.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Parser, ValueEnum};
use nodefence_mocks::kube::FakeKube;
use nodefence_mocks::kube::sim::{NodeSpec, SimConfig, SimHandle, Simulation, WorkloadSpec};
use nodefence_mocks::kube::store::Store;

/// A fake Kubernetes API server (nodes, pods, leases, volume attachments, events,
/// ...) that kube-rs and kubectl can talk to.
#[derive(Debug, Parser)]
#[command(name = "fake-kube", version)]
struct Args {
    /// Address to listen on; port 0 picks a free port (printed when ready).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,

    /// Serve plain HTTP instead of HTTPS. kubectl never sends a bearer token over
    /// plain HTTP, so only kube-rs clients can use such a server.
    #[arg(long)]
    plain_http: bool,

    /// Serve HTTPS (the default; kept for scripts written when it was not).
    #[arg(long, hide = true, conflicts_with = "plain_http")]
    tls: bool,

    /// The bearer token clients must present (default: random; see the kubeconfig).
    #[arg(long, env = "FAKE_KUBE_TOKEN", hide_env_values = true)]
    token: Option<String>,

    /// Write a kubeconfig for this server here before printing the ready line (the
    /// server URL, its CA, the token): `kubectl --kubeconfig PATH get nodes` works.
    #[arg(long, alias = "kubeconfig-out", value_name = "PATH")]
    kubeconfig: Option<PathBuf>,

    /// Simulate N worker nodes (worker-1..worker-N) with running kubelets; 0: no
    /// simulation, an empty cluster.
    #[arg(long, value_name = "N", default_value_t = 3)]
    nodes: u32,

    /// Also simulate a control-plane node named `control-plane`.
    #[arg(long, requires = "nodes")]
    control_plane: bool,

    /// How much faster than real time the simulation runs (e.g. 10: the 40 s node
    /// grace period passes in 4 s). Timestamps stay wall-clock.
    #[arg(long, default_value_t = 1.0, value_parser = parse_speed)]
    speed: f64,

    /// Add a StatefulSet-like workload with this name in namespace `default`, one
    /// ReadWriteOnce volume per replica (repeatable).
    #[arg(long = "workload", value_name = "NAME", requires = "nodes")]
    workloads: Vec<String>,

    /// Replicas of each --workload.
    #[arg(long, default_value_t = 1, value_name = "N")]
    replicas: u32,

    /// The node monitor grace period (simulated time), e.g. 40s.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    node_monitor_grace_period: Option<Duration>,

    /// Seconds pods tolerate not-ready/unreachable taints before eviction.
    #[arg(long, value_name = "SECONDS")]
    default_toleration_seconds: Option<u64>,

    /// Turn a simulated controller off (repeatable).
    #[arg(long = "disable", value_enum, value_name = "CONTROLLER")]
    disabled: Vec<Controller>,
}

/// The simulated controllers that can be turned off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Controller {
    NodeLifecycle,
    TaintEviction,
    PodGc,
    AttachDetach,
    Workloads,
    Scheduler,
}

fn parse_speed(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("{s:?} is not a positive number")),
    }
}

fn sim_config(args: &Args) -> SimConfig {
    let mut config = SimConfig {
        speed: args.speed,
        ..SimConfig::default()
    };
    if let Some(grace) = args.node_monitor_grace_period {
        config.node_monitor_grace_period = grace;
    }
    if let Some(seconds) = args.default_toleration_seconds {
        config.default_toleration_seconds = seconds;
    }
    for c in &args.disabled {
        match c {
            Controller::NodeLifecycle => config.node_lifecycle = false,
            Controller::TaintEviction => config.taint_eviction = false,
            Controller::PodGc => config.pod_gc = false,
            Controller::AttachDetach => config.attach_detach = false,
            Controller::Workloads => config.workloads = false,
            Controller::Scheduler => config.scheduler = false,
        }
    }
    config
}

/// Starts the simulation on `store` when asked for.
fn start_simulation(args: &Args, store: &Store) -> anyhow::Result<Option<Arc<SimHandle>>> {
    if args.nodes == 0 {
        if !args.workloads.is_empty() || !args.disabled.is_empty() {
            bail!("--workload and --disable need a simulation: pass --nodes N");
        }
        return Ok(None);
    }
    let sim = Simulation::start(store.clone(), sim_config(args));
    if args.control_plane {
        sim.add_node(NodeSpec::new("control-plane").control_plane(true));
    }
    for i in 1..=args.nodes {
        sim.add_node(NodeSpec::new(format!("worker-{i}")));
    }
    for name in &args.workloads {
        sim.add_stateful_workload(WorkloadSpec::new("default", name).replicas(args.replicas));
    }
    Ok(Some(Arc::new(sim)))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let signals =
        nodefence_mocks::serve::shutdown_signals().context("installing the signal handlers")?;
    let store = Store::default();
    let sim = start_simulation(&args, &store)?;
    let mut builder = FakeKube::builder()
        .tls(!args.plain_http)
        .listen(args.listen)
        .store(store);
    if let Some(token) = &args.token {
        builder = builder.token(token.clone());
    }
    if let Some(sim) = &sim {
        builder = builder.admin(sim.clone());
    }
    let kube = builder.start().await.context("starting fake-kube")?;
    if let Some(path) = &args.kubeconfig {
        kube.write_kubeconfig(path)
            .with_context(|| format!("writing kubeconfig to {}", path.display()))?;
    }
    tracing::info!(url = %kube.base_url(), nodes = args.nodes, speed = args.speed, "ready");

    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "fake-kube listening on {}", kube.base_url())?;
    stdout.flush()?;
    drop(stdout);

    let signal = signals.await;
    tracing::info!("{signal} received, stopping");
    kube.shutdown().await;
    if let Some(sim) = sim {
        // The server is gone, so this is the last reference; dropping it would
        // stop the controllers too, without waiting.
        if let Ok(sim) = Arc::try_unwrap(sim) {
            sim.shutdown().await;
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    nodefence_mocks::serve::init_binary();
    let args = Args::parse();
    match run(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fake-kube: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
