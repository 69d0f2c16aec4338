//! The simulated world of one seed: the cluster, the machines, the two replicas, and
//! the levers the schedule pulls.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Api;
use kube::api::{Patch, PatchParams};
use nodefence::cluster::facts::{EXCLUDE_ANNOTATION, node_facts};
use nodefence::daemon::{self, DaemonOptions, DriverSource};
use nodefence_mocks::kube::resources::{LEASES, NODES};
use nodefence_mocks::kube::sim::SimHandle;
use nodefence_mocks::kube::store::Store;
use serde_json::Value;
use tokio::time::Instant;

use super::api::{self, ApiMode, ApiSide, LEADER, tainted};
use super::companion::{Fleet, ReplicaLink};
use super::machine::{Bmc, Gate, Machine, SimDriver, Truth, lock};
use super::requests;
use super::schedule::Fault;

pub const WORKERS: usize = 5;
pub const PASSWORD: &str = "sim-BMC-Secret-7781";
pub const BOOT: Duration = Duration::from_secs(40);
pub const TRANSITION: Duration = Duration::from_secs(4);
/// How long faults are played (then everything but dead machines is healed).
pub const CHAOS: Duration = Duration::from_secs(600);
/// Invariant 6: a machine really off, with a working BMC, is released within this
/// much of the faults ending (Lease staleness 25 s, a leader failover 15 s, a query
/// backoff of at most 60 s left from the chaos, three readings 1 s apart). The same
/// bound holds for a machine dead with its BMC under the watchdog level (companion
/// seeds): a leader failover 15 s, a query backoff of at most 60 s and a reading that
/// times out (10 s) before the level is tried, the mark's write, the wait (12.74 s for
/// W = 10 s) and the majority heard throughout it: about 100 s at worst.
pub const LIVENESS_BOUND: Duration = Duration::from_secs(150);
/// After the repair: every node Ready again ends untainted within this.
pub const RECOVERY_BOUND: Duration = Duration::from_secs(240);

/// A running replica incarnation.
pub struct Replica {
    side: Arc<ApiSide>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

pub struct World {
    pub truth: Arc<Truth>,
    pub sim: Arc<SimHandle>,
    pub store: Store,
    pub router: axum::Router,
    pub token: String,
    pub operator: kube::Client,
    pub config_path: std::path::PathBuf,
    pub replicas: Vec<Option<Replica>>,
    /// The policy the invariants are judged by.
    pub policy: nodefence::engine::Policy,
    /// Opt-out switches: since when, per node (the pause is in the truth).
    pub opted_out: Arc<Mutex<BTreeMap<String, Instant>>>,
    /// Companion seeds: every machine's companion and watchdog.
    pub fleet: Option<Arc<Mutex<Fleet>>>,
}

/// The control-plane node (no machine of the simulation's: never faulted).
pub const CONTROL_PLANE: &str = "cp-1";

pub fn node_name(i: usize) -> String {
    format!("worker-{}", i + 1)
}

pub fn uuid_of(i: usize) -> String {
    format!("4c4c4544-0042-3510-8053-b7c04f3{i:05}")
}

/// `requests`: nodefence answers remediation requests (`[remediation] requests`).
pub fn write_config(
    dir: &std::path::Path,
    power_on_after_fence: bool,
    requests: bool,
    watchdog_fencing: bool,
) -> std::path::PathBuf {
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text).unwrap_or_else(|e| panic!("writing {name}: {e}"))
    };
    write("bmc-password", PASSWORD);
    write(
        "nodefence.toml",
        &format!(
            "inventory = \"inventory.toml\"\n[power]\nmonitor_interval = \"60s\"\n\
             [policy]\npower_on_after_fence = {power_on_after_fence}\n{}{}",
            if watchdog_fencing {
                "watchdog_fencing = true\n"
            } else {
                ""
            },
            if requests {
                "[remediation]\nrequests = true\n"
            } else {
                ""
            }
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
    pub fn start_replica(&mut self, r: usize) {
        let alive = Arc::new(AtomicBool::new(true));
        let side = Arc::new(ApiSide {
            identity: format!("nodefence-{}", ["a", "b"][r]),
            alive: alive.clone(),
            mode: tokio::sync::watch::Sender::new(ApiMode::Normal),
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
            health_listen: "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}")),
            metrics: nodefence::daemon::MetricsEndpoint::plain(
                "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}")),
            ),
            lease_namespace: LEADER.0.into(),
            lease_name: LEADER.1.into(),
            identity: side.identity.clone(),
            leader_timings: Default::default(),
            config_check: None,
            companions: self.fleet.as_ref().map(|fleet| {
                let handle = nodefence::heartbeat::InProcess::new();
                lock(fleet).replicas[r] = Some(ReplicaLink {
                    handle: handle.clone(),
                    alive: side.alive.clone(),
                    started: Instant::now(),
                });
                daemon::CompanionSource::InProcess {
                    handle,
                    heartbeat_timeout: nodefence::heartbeat::DEFAULT_HEARTBEAT_TIMEOUT,
                }
            }),
        };
        let config = match nodefence::config::load(&self.config_path) {
            Ok(c) => c,
            Err(e) => panic!("the simulation's configuration is invalid: {e}"),
        };
        let task = tokio::spawn(daemon::run(config, client, options, std::future::pending()));
        self.replicas[r] = Some(Replica { side, task });
    }

    pub fn crash(&mut self, r: usize) {
        if let Some(rep) = self.replicas[r].take() {
            rep.side.alive.store(false, Ordering::SeqCst);
            rep.task.abort();
        }
        if let Some(fleet) = &self.fleet {
            lock(fleet).replicas[r] = None;
        }
    }

    /// Replica `r` died without being aborted (`Fault::CrashOnNextPowerOff`,
    /// `Fault::CrashOnNextRelease`).
    pub fn frozen(&self, r: usize) -> bool {
        self.replicas[r]
            .as_ref()
            .is_some_and(|rep| !rep.side.alive.load(Ordering::SeqCst))
    }

    pub fn set_api(&self, r: usize, mode: ApiMode) {
        if let Some(rep) = &self.replicas[r] {
            rep.side.mode.send_replace(mode);
        }
    }

    pub fn machine<R>(&self, i: usize, f: impl FnOnce(&mut Machine) -> R) -> R {
        self.truth.with(|ms| f(&mut ms[i]))
    }

    pub async fn pause(&self, on: bool) {
        if on {
            *lock(&self.truth.paused_since) = Some(Instant::now());
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
            *lock(&self.truth.paused_since) = None;
        }
    }

    pub async fn opt_out(&self, node: &str, on: bool) {
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
    pub fn physics(&self) {
        let wall = nodefence::clock::now();
        self.truth.settle(wall, BOOT);
        let now = Instant::now();
        let states: Vec<(String, bool)> = self.truth.with(|ms| {
            ms.iter_mut()
                .map(|m| {
                    let up = m.kubelet_up(now);
                    if up {
                        m.failed_at = None;
                        m.off_after_failure = false;
                    } else {
                        m.fail(wall);
                        m.off_after_failure |= m.really_off();
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
        requests::observe(&self.store, &self.truth);
    }

    /// Why a power-off sent now breaks invariant 2, if it does.
    pub fn gate(&self) -> Arc<Gate> {
        let store = self.store.clone();
        // Weak: the truth keeps the gate, and a strong reference back made a cycle
        // that kept every seed's truth and API server store (about 9 MB) for the rest
        // of a run.
        let truth = Arc::downgrade(&self.truth);
        let opted = self.opted_out.clone();
        let policy = self.policy.clone();
        Arc::new(move |node: &str| {
            let settled =
                |since: Instant| Instant::now().duration_since(since) >= Duration::from_secs(1);
            if let Some(why) = truth.upgrade().and_then(|t| t.pause_refusal()) {
                return Some(why);
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

    pub async fn apply(&mut self, fault: &Fault, later: &mut Vec<(Instant, Fault)>) {
        let wall = nodefence::clock::now();
        match fault.clone() {
            Fault::PowerLoss(i) => self.machine(i, |m| {
                if m.on {
                    m.on = false;
                    m.transition = None;
                    m.off_since = Some(wall);
                    m.fail(wall);
                    m.off_after_failure = true;
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
            Fault::ReportLag(i, lag) => self.machine(i, |m| m.report_lag = Some(lag)),
            Fault::CrashOnNextPowerOff => {
                self.truth.crash_on_power_off.store(true, Ordering::SeqCst);
            }
            Fault::CrashOnNextRelease => {
                self.truth.crash_on_release.store(true, Ordering::SeqCst);
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
            Fault::Request {
                node,
                name,
                timeout,
                span,
            } => {
                requests::create(&self.operator, &name, &node_name(node)).await;
                if let Some(t) = timeout {
                    later.push((Instant::now() + t, Fault::RequestTimesOut(name.clone())));
                }
                later.push((Instant::now() + span, Fault::RequestDeleted(name)));
            }
            Fault::RequestTimesOut(name) => requests::time_out(&self.operator, &name).await,
            Fault::RequestDeleted(name) => requests::delete(&self.operator, &name).await,
            Fault::CompanionLink(i, span) => self.with_fleet(|f| f.cut_link(i, span)),
            Fault::CompanionApi(i, span) => self.with_fleet(|f| f.cut_api(i, span)),
            Fault::CompanionPeers(i, span) => self.with_fleet(|f| f.cut_peers(i, span)),
            Fault::ControlPlaneOut(span) => self.with_fleet(|f| f.control_plane_out(span)),
            Fault::Uplink(i, span) => {
                self.machine(i, |m| m.network = false);
                self.with_fleet(|f| f.uplink(i, span));
                later.push((Instant::now() + span, Fault::Restore(i)));
            }
            Fault::CompanionCrash(i, down) => self.with_fleet(|f| f.crash(i, down)),
            Fault::CompanionDns(i, span) => self.with_fleet(|f| f.dns_out(i, span)),
            Fault::CompanionPaused(i, span) => self.with_fleet(|f| f.pause(i, span)),
            Fault::CompanionCrashLoop(i, span) => self.with_fleet(|f| f.crash_loop(i, span)),
            Fault::CompanionRestart(i, down) => {
                let network = self.machine(i, |m| m.network);
                self.with_fleet(|f| f.restart(i, down, network));
            }
            Fault::RackPower(i, span) => {
                // Its incident begins with the rack's power only if it was serving:
                // a BMC that answered earlier in the incident keeps the watchdog
                // level out of it (the level is tried only when no power method
                // answered since the incident began).
                let serving = self.machine(i, |m| m.failed_at.is_none());
                self.machine(i, |m| {
                    if m.on {
                        m.on = false;
                        m.transition = None;
                        m.off_since = Some(wall);
                        m.fail(wall);
                        m.off_after_failure = true;
                    }
                    m.bmc = Bmc::Timeout;
                });
                match span {
                    Some(span) => later.push((Instant::now() + span, Fault::RackPower(i, None))),
                    None if serving => {
                        // Only a machine whose watchdog was armed can be proven reset
                        // by it (seed 7953: its companion stopped cleanly, disarmed,
                        // and its successor could not arm during a control-plane
                        // outage; the leader rightly refused to mark it).
                        self.with_fleet(|f| {
                            if f.watchdog_armed(i) {
                                f.lasting_rack.insert(i, Instant::now());
                            }
                        });
                    }
                    None => {}
                }
            }
        }
    }

    fn with_fleet(&self, f: impl FnOnce(&mut Fleet)) {
        if let Some(fleet) = &self.fleet {
            f(&mut lock(fleet));
        }
    }

    /// Ends a fault whose time is up (`Api(r, Normal, MAX)` restarts a crashed replica).
    pub async fn end(&mut self, fault: Fault) {
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
            Fault::RequestTimesOut(name) => requests::time_out(&self.operator, &name).await,
            Fault::RequestDeleted(name) => requests::delete(&self.operator, &name).await,
            // The rack's power is back: the machine and its BMC together.
            Fault::RackPower(i, _) => self.machine(i, |m| {
                m.bmc = Bmc::Healthy;
                if !m.on && m.transition.is_none() {
                    m.transition = Some((Instant::now() + TRANSITION, true));
                }
            }),
            _ => {}
        }
    }

    pub async fn run_for(&self, d: Duration) {
        let end = Instant::now() + d;
        while Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(250)).await;
            self.physics();
        }
    }

    pub fn node(&self, name: &str) -> Option<Value> {
        self.store.get(NODES, None, name).ok()
    }

    pub fn released(&self, name: &str) -> bool {
        self.node(name).is_none_or(|n| tainted(&n))
    }

    pub fn ready(&self, name: &str) -> bool {
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
