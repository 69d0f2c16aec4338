//! `nodefence run` end to end: the real daemon (in process) against fake-kube with
//! its simulated control plane and a mock Redfish BMC whose systems are the nodes'
//! machines. Every assertion is on the cluster's or the BMC's state.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use nodefence::cluster::leader::LeaderTimings;
use nodefence::daemon::{self, DaemonOptions};
use nodefence_mocks::kube::resources::{EVENTS_V1, NODES, PODS};
use nodefence_mocks::kube::sim::{NodeSpec, SimConfig, SimHandle, Simulation, WorkloadSpec};
use nodefence_mocks::kube::store::Store;
use nodefence_mocks::kube::{FakeKube, FakeKubeHandle};
use nodefence_mocks::machines::{self, Machine};
use nodefence_mocks::redfish::{
    Fault, MockPower, MockRedfish, MockRedfishHandle, Profile, SystemSpec,
};
use serde_json::Value;
use tokio::time::Instant;

const PASSWORD: &str = "run-test-Secret";

struct World {
    kube: FakeKubeHandle,
    sim: Arc<SimHandle>,
    bmc: Arc<MockRedfishHandle>,
    link: tokio::task::JoinHandle<()>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    daemon: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    client: kube::Client,
    config: nodefence::config::Config,
    options: DaemonOptions,
    _dir: tempfile::TempDir,
}

impl World {
    fn store(&self) -> Store {
        self.kube.store()
    }

    fn node(&self, name: &str) -> Option<Value> {
        self.store().get(NODES, None, name).ok()
    }

    fn pod(&self, name: &str) -> Option<Value> {
        self.store().get(PODS, Some("default"), name).ok()
    }

    fn has_out_of_service_taint(&self, node: &str) -> bool {
        self.node(node).is_some_and(|n| {
            n.pointer("/spec/taints")
                .and_then(Value::as_array)
                .is_some_and(|t| {
                    t.iter()
                        .any(|t| t["key"] == "node.kubernetes.io/out-of-service")
                })
        })
    }

    fn event_reasons(&self, node: &str) -> Vec<String> {
        let (events, _) = self.store().list(EVENTS_V1, None);
        events
            .iter()
            .filter(|e| e.pointer("/regarding/name").and_then(Value::as_str) == Some(node))
            .filter_map(|e| e["reason"].as_str().map(str::to_string))
            .collect()
    }

    /// Waits (bounded) for an Event with `reason` on `node`: Events are published
    /// asynchronously, a moment after the change they describe.
    async fn expect_event(&self, node: &str, reason: &str) {
        eventually(
            &format!("Event {reason} on {node}"),
            Duration::from_secs(10),
            || async { self.event_reasons(node).iter().any(|r| r == reason) },
        )
        .await;
    }

    /// The node db-0 runs on, once it is Running.
    fn db_node(&self) -> Option<String> {
        let pod = self.pod("db-0")?;
        if pod.pointer("/status/phase") != Some(&Value::from("Running"))
            || pod.pointer("/metadata/deletionTimestamp").is_some()
        {
            return None;
        }
        pod.pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .map(str::to_string)
    }

    /// Stops the daemon and starts a new one with another identity (a restart, or a
    /// new leader after a crash of the old one).
    async fn restart_daemon(&mut self, identity: &str) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(d) = self.daemon.take() {
            d.await.unwrap().unwrap();
        }
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let mut options = self.options.clone();
        options.identity = identity.to_string();
        self.daemon = Some(tokio::spawn(daemon::run(
            self.config.clone(),
            self.client.clone(),
            options,
            async {
                let _ = stopped.await;
            },
        )));
        self.stop = Some(stop);
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(d) = self.daemon.take() {
            d.await.unwrap().unwrap();
        }
        self.link.abort();
    }
}

fn write_config(dir: &Path, bmc: &MockRedfishHandle) -> std::path::PathBuf {
    std::fs::write(dir.join("bmc-password"), PASSWORD).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            dir.join("bmc-password"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
    }
    std::fs::write(
        dir.join("nodefence.toml"),
        "inventory = \"inventory.toml\"\n[power]\nconfirm_readings = 3\nconfirm_interval = \"100ms\"\nconfirm_timeout = \"10s\"\n",
    )
    .unwrap();
    let mut inv = format!(
        "[defaults]\ndriver = \"redfish\"\nendpoint = \"{}\"\nusername = \"fence\"\npassword_file = \"bmc-password\"\n\
         connect_timeout = \"1s\"\nrequest_timeout = \"1s\"\noperation_timeout = \"3s\"\nretries = 1\n",
        bmc.base_url()
    );
    for i in 1..=3 {
        inv.push_str(&format!("[nodes.worker-{i}]\nsystem_id = \"Blade{i}\"\n"));
    }
    std::fs::write(dir.join("inventory.toml"), inv).unwrap();
    dir.join("nodefence.toml")
}

/// Three workers (one machine each, Blade1..3), a one-replica stateful workload, the
/// daemon running with timings scaled like the simulation (10x).
async fn world(dry_run: bool) -> World {
    nodefence::tls::install_crypto_provider();
    let store = Store::default();
    let kube = FakeKube::builder()
        .store(store.clone())
        .start()
        .await
        .unwrap();
    let sim = Arc::new(Simulation::start(
        store.clone(),
        SimConfig {
            speed: 10.0,
            ..SimConfig::default()
        },
    ));
    for i in 1..=3 {
        sim.add_node(NodeSpec::new(format!("worker-{i}")));
    }
    sim.add_stateful_workload(WorkloadSpec::new("default", "db"));
    let bmc = Arc::new(
        MockRedfish::builder()
            .profile(Profile::MultiSystem)
            .systems((1..=3).map(|i| SystemSpec::new(format!("Blade{i}")).power(MockPower::On)))
            .credentials("fence", PASSWORD)
            .transition_delay(Duration::from_millis(200))
            .start()
            .await
            .unwrap(),
    );
    let link = machines::link(
        bmc.clone(),
        sim.clone(),
        (1..=3)
            .map(|i| Machine::new(format!("Blade{i}"), format!("worker-{i}")))
            .collect(),
        Duration::from_millis(50),
    );
    let dir = tempfile::tempdir().unwrap();
    let mut config = nodefence::config::load(&write_config(dir.path(), &bmc)).unwrap();
    let policy = &mut config.agent.policy;
    policy.lease_stale_after = Some(Duration::from_millis(2500));
    policy.unhealthy_after = Duration::from_secs(6);
    policy.recovered_after = Duration::from_secs(2);
    policy.min_power_off_interval = Duration::ZERO;
    policy.power_off_retry_after = Duration::from_secs(6);
    policy.on_poll_interval = Duration::from_millis(500);
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&kube.kubeconfig_yaml()).unwrap();
    let client = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap(),
    )
    .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let options = DaemonOptions {
        dry_run,
        listen: "127.0.0.1:0".parse().unwrap(),
        lease_namespace: "kube-system".into(),
        lease_name: "nodefence".into(),
        identity: "test-replica".into(),
        leader_timings: LeaderTimings {
            lease_duration: Duration::from_secs(3),
            renew_deadline: Duration::from_secs(2),
            retry_period: Duration::from_millis(200),
        },
    };
    let daemon = tokio::spawn(daemon::run(
        config.clone(),
        client.clone(),
        options.clone(),
        async {
            let _ = stopped.await;
        },
    ));
    World {
        kube,
        sim,
        bmc,
        link,
        stop: Some(stop),
        daemon: Some(daemon),
        client,
        config,
        options,
        _dir: dir,
    }
}

async fn eventually<F: Future<Output = bool>>(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> F,
) {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out after {within:?} waiting for: {what}");
}

fn blade(node: &str) -> String {
    node.replace("worker-", "Blade")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_loss_is_confirmed_off_tainted_and_the_pod_moves() {
    let w = world(false).await;
    eventually("db-0 Running", Duration::from_secs(30), || async {
        w.db_node().is_some()
    })
    .await;
    let victim = w.db_node().unwrap();
    w.bmc.set_power(&blade(&victim), MockPower::Off); // pull the plug
    eventually("out-of-service taint", Duration::from_secs(30), || async {
        w.has_out_of_service_taint(&victim)
    })
    .await;
    assert!(
        w.bmc.reset_log().is_empty(),
        "an Off machine needs no power command"
    );
    eventually(
        "db-0 Running elsewhere",
        Duration::from_secs(60),
        || async { w.db_node().is_some_and(|n| n != victim) },
    )
    .await;
    w.expect_event(&victim, "ConfirmedOff").await;
    w.expect_event(&victim, "Released").await;
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_node_whose_machine_is_on_is_powered_off_then_tainted() {
    let w = world(false).await;
    eventually("db-0 Running", Duration::from_secs(30), || async {
        w.db_node().is_some()
    })
    .await;
    let victim = w.db_node().unwrap();
    w.sim.set_kubelet(&victim, false); // network cut: the machine stays on
    eventually("out-of-service taint", Duration::from_secs(45), || async {
        w.has_out_of_service_taint(&victim)
    })
    .await;
    assert_eq!(
        w.bmc.reset_log(),
        vec![(blade(&victim), "ForceOff".to_string())]
    );
    assert_eq!(w.bmc.power(&blade(&victim)), Some(MockPower::Off));
    w.expect_event(&victim, "PoweringOff").await;
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_bmc_releases_nothing_and_says_why() {
    let w = world(false).await;
    eventually("db-0 Running", Duration::from_secs(30), || async {
        w.db_node().is_some()
    })
    .await;
    let victim = w.db_node().unwrap();
    w.bmc.inject(Fault::Hang);
    w.sim.set_kubelet(&victim, false);
    eventually(
        "a PowerQueryFailed warning",
        Duration::from_secs(30),
        || async {
            w.event_reasons(&victim)
                .iter()
                .any(|r| r == "PowerQueryFailed")
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(10)).await; // well past unhealthy_after
    assert!(!w.has_out_of_service_taint(&victim));
    assert!(w.node(&victim).is_some(), "the Node still exists");
    w.bmc.clear_faults();
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovered_node_gets_its_taint_removed() {
    let w = world(false).await;
    eventually("db-0 Running", Duration::from_secs(30), || async {
        w.db_node().is_some()
    })
    .await;
    let victim = w.db_node().unwrap();
    w.bmc.set_power(&blade(&victim), MockPower::Off);
    eventually("out-of-service taint", Duration::from_secs(30), || async {
        w.has_out_of_service_taint(&victim)
    })
    .await;
    w.bmc.set_power(&blade(&victim), MockPower::On); // power restored: the kubelet comes back
    eventually("taint removed", Duration::from_secs(60), || async {
        !w.has_out_of_service_taint(&victim)
    })
    .await;
    w.expect_event(&victim, "TaintRemoved").await;
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_decides_but_changes_nothing() {
    let w = world(true).await;
    eventually("db-0 Running", Duration::from_secs(30), || async {
        w.db_node().is_some()
    })
    .await;
    let victim = w.db_node().unwrap();
    w.sim.set_kubelet(&victim, false);
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert!(!w.has_out_of_service_taint(&victim));
    assert!(w.bmc.reset_log().is_empty(), "no power command in dry-run");
    assert_eq!(w.bmc.power(&blade(&victim)), Some(MockPower::On));
    assert!(
        w.event_reasons(&victim).iter().all(|r| !r.is_empty())
            && w.event_reasons(&victim).iter().all(|r| r != "Released")
    );
    let writes: Vec<_> = w
        .kube
        .request_log()
        .into_iter()
        .filter(|(m, p, _)| m != "GET" && !p.contains("/leases/"))
        .collect();
    assert!(
        writes.is_empty(),
        "dry-run wrote to the cluster: {writes:?}"
    );
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_stops_fencing_and_resume_lets_it_continue() {
    let w = world(false).await;
    eventually("db-0 Running", Duration::from_secs(30), || async {
        w.db_node().is_some()
    })
    .await;
    let victim = w.db_node().unwrap();
    nodefence::cluster::pause::set(
        w.client.clone(),
        "kube-system",
        true,
        Some("upgrade"),
        "test",
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    w.sim.set_kubelet(&victim, false); // network cut while paused
    tokio::time::sleep(Duration::from_secs(15)).await; // well past unhealthy_after
    assert!(!w.has_out_of_service_taint(&victim), "paused: no release");
    assert!(w.bmc.reset_log().is_empty(), "paused: no power command");
    nodefence::cluster::pause::set(w.client.clone(), "kube-system", false, None, "test")
        .await
        .unwrap();
    eventually("fenced after resume", Duration::from_secs(30), || async {
        w.has_out_of_service_taint(&victim)
    })
    .await;
    assert_eq!(
        w.bmc.reset_log(),
        vec![(blade(&victim), "ForceOff".to_string())]
    );
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_shows_what_was_seen_and_decided() {
    let w = world(false).await;
    eventually("db-0 Running", Duration::from_secs(30), || async {
        w.db_node().is_some()
    })
    .await;
    let victim = w.db_node().unwrap();
    w.bmc.set_power(&blade(&victim), MockPower::Off);
    eventually("out-of-service taint", Duration::from_secs(30), || async {
        w.has_out_of_service_taint(&victim)
    })
    .await;
    w.expect_event(&victim, "Released").await;
    let kubeconfig = w._dir.path().join("kubeconfig");
    w.kube.write_kubeconfig(&kubeconfig).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_nodefence"))
        .arg("--config")
        .arg(w._dir.path().join("nodefence.toml"))
        .args([
            "explain",
            &victim,
            "--namespace",
            "kube-system",
            "--kubeconfig",
        ])
        .arg(&kubeconfig)
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "Released:",
        "added by nodefence",
        "Power now:",
        "Off",
        "already released",
        "ConfirmedOff",
        "fencing is active",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_mid_fence_resumes_without_a_second_power_command() {
    let mut w = world(false).await;
    eventually("db-0 Running", Duration::from_secs(30), || async {
        w.db_node().is_some()
    })
    .await;
    let victim = w.db_node().unwrap();
    w.sim.set_kubelet(&victim, false); // network cut: powered off after unhealthy_after
    eventually("ForceOff sent", Duration::from_secs(40), || async {
        !w.bmc.reset_log().is_empty()
    })
    .await;
    w.restart_daemon("replica-after-restart").await;
    eventually("out-of-service taint", Duration::from_secs(30), || async {
        w.has_out_of_service_taint(&victim)
    })
    .await;
    assert_eq!(
        w.bmc.reset_log(),
        vec![(blade(&victim), "ForceOff".to_string())],
        "the new instance reads Off and sends nothing"
    );
    w.stop().await;
}
