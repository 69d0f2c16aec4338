//! End to end (the real daemon with `--companion-listen`, real companions with a
//! watchdog in memory, fake-kube's simulated control plane and TokenReviews, the mock
//! Redfish BMC): a companion's silence makes its node suspect before its Lease says
//! anything, and a release still needs the machine read Off; with the watchdog level,
//! a machine whose BMC died with it is marked and released once its own watchdog has
//! certainly reset it, and never without the opt-in.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::world::*;
use nodefence::companion::{self, Options, Status, WatchdogChoice};
use nodefence::daemon::CompanionListener;
use nodefence::telemetry::certificate::CertificateSource;
use nodefence::watchdog::device::RecordingWatchdog;
use nodefence_mocks::kube::BoundToken;
use nodefence_mocks::tls::TlsMaterial;

const INTERVAL: Duration = Duration::from_millis(100);
/// Well under the world's Lease staleness (2.5 s after the last renewal, 1 s apart).
const TIMEOUT: Duration = Duration::from_millis(500);

/// A free port on the loopback, for TCP and UDP both.
fn free_port() -> u16 {
    loop {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = tcp.local_addr().unwrap().port();
        if std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// The listener's certificate, as files the daemon reads and a CA the companions trust.
struct Certificates {
    dir: tempfile::TempDir,
    port: u16,
}

impl Certificates {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let tls = TlsMaterial::generate_for(&["127.0.0.1", "localhost"]).unwrap();
        std::fs::write(dir.path().join("tls.crt"), tls.cert_pem()).unwrap();
        std::fs::write(dir.path().join("tls.key"), tls.key_pem()).unwrap();
        std::fs::write(dir.path().join("ca.crt"), tls.ca_pem()).unwrap();
        Self {
            dir,
            port: free_port(),
        }
    }

    fn listener(&self) -> CompanionListener {
        CompanionListener {
            listen: format!("127.0.0.1:{}", self.port).parse().unwrap(),
            service_account: "nodefence-companion".into(),
            certificate: CertificateSource::Files {
                cert: self.dir.path().join("tls.crt"),
                key: self.dir.path().join("tls.key"),
            },
            heartbeat_interval: INTERVAL,
            heartbeat_timeout: TIMEOUT,
        }
    }
}

/// One node's companion, running.
struct Companion {
    status: Arc<Mutex<Status>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Companion {
    /// Its projected token issued (bound to `node`), then started, with a watchdog
    /// granting 10 s.
    fn start(w: &World, certs: &Certificates, node: &str) -> Self {
        Self::start_with(w, certs, node, Duration::from_secs(10))
    }

    /// The same, with a watchdog that grants `granted`.
    fn start_with(w: &World, certs: &Certificates, node: &str, granted: Duration) -> Self {
        let token = format!("companion-token-{node}");
        w.kube.issue_token(BoundToken {
            token: token.clone(),
            user: format!("system:serviceaccount:{LEADER_LEASE_NAMESPACE}:nodefence-companion"),
            audiences: vec![nodefence::heartbeat::hello::AUDIENCE.into()],
            pod: Some((format!("nodefence-companion-{node}"), format!("uid-{node}"))),
            node: Some((node.into(), format!("node-uid-{node}"))),
        });
        let file = certs.dir.path().join(format!("token-{node}"));
        std::fs::write(&file, token).unwrap();
        let options = Options {
            nodefence: format!("https://127.0.0.1:{}", certs.port).parse().unwrap(),
            tls: nodefence::config::TlsSettings {
                ca_file: Some(certs.dir.path().join("ca.crt")),
                ..Default::default()
            },
            token_file: file,
            watchdog: WatchdogChoice::Given(Box::new(RecordingWatchdog::new(
                "iTCO_wdt", granted, false,
            ))),
            replicas: None,
            api: None,
            peers: None,
            state_dir: None,
            resolver: Default::default(),
            realtime: false,
            // The boot the Node reports: a release rests only on beats of it.
            boot_id: w.node(node).unwrap()["status"]["nodeInfo"]["bootID"]
                .as_str()
                .unwrap()
                .to_string(),
            machine: nodefence::companion::machine::MachineKind::Physical,
        };
        let status = Arc::new(Mutex::new(Status::default()));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = status.clone();
        let task = tokio::spawn(async move {
            let _ = companion::run(options, running, async move {
                let _ = stopped.await;
            })
            .await;
        });
        Self {
            status,
            stop: Some(stop),
            task,
        }
    }

    async fn acknowledged(&self) {
        eventually(
            "the companion's beats acknowledged",
            Duration::from_secs(20),
            || async { self.status.lock().unwrap().acknowledged >= 3 },
        )
        .await;
    }

    /// Killed with its machine: no last word.
    fn kill(&self) {
        self.task.abort();
    }

    /// A clean stop (SIGTERM in a rolling update): it says it is stopping first.
    async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

/// When the API server stored `node`'s first fencing mark and its first
/// out-of-service taint (its own clock, at each write).
fn write_times(w: &World, node: &str) -> (std::time::SystemTime, std::time::SystemTime) {
    let store = w.store();
    let (history, _) = match store.subscribe_from(0) {
        Err(nodefence_mocks::kube::store::StoreError::Gone { oldest, .. }) => {
            store.subscribe_from(oldest).expect("history kept")
        }
        other => other.expect("history kept"),
    };
    let nodes = history.iter().filter(|e| {
        e.resource == nodefence_mocks::kube::resources::NODES
            && e.object["metadata"]["name"] == node
    });
    let mut mark = None;
    let mut taint = None;
    for e in nodes {
        let marked = e.object["metadata"]["annotations"]
            [nodefence::watchdog::mark::FENCING_MARK_ANNOTATION]
            .is_string();
        let tainted = e.object["spec"]["taints"].as_array().is_some_and(|t| {
            t.iter()
                .any(|t| t["key"] == "node.kubernetes.io/out-of-service")
        });
        if marked && mark.is_none() {
            mark = Some(e.at);
        }
        if tainted && taint.is_none() {
            taint = Some(e.at);
        }
    }
    (mark.expect("a mark stored"), taint.expect("a taint stored"))
}

/// `nodefence explain NODE` against the world's API server (stdout and stderr).
async fn explain(w: &World, node: &str) -> String {
    nodefence_cli(w, &["explain", node]).await
}

/// `nodefence ARGS... --namespace kube-system --kubeconfig ...` against the world's
/// API server (stdout and stderr).
async fn nodefence_cli(w: &World, args: &[&str]) -> String {
    let kubeconfig = w._dir.path().join("kubeconfig");
    w.kube.write_kubeconfig(&kubeconfig).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_nodefence"))
        .arg("--config")
        .arg(w._dir.path().join("nodefence.toml"))
        .args(args)
        .args(["--namespace", LEADER_LEASE_NAMESPACE, "--kubeconfig"])
        .arg(&kubeconfig)
        .output()
        .await
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The messages of the `NodeSuspect` Events on `node`.
fn suspect_notes(w: &World, node: &str) -> Vec<String> {
    w.events_on(node)
        .into_iter()
        .filter(|e| e["reason"] == "NodeSuspect")
        .map(|e| e["note"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_companion_makes_its_node_suspect_and_only_an_off_machine_is_released() {
    let certs = Certificates::new();
    let w = WorldBuilder::new()
        .no_workloads()
        .companions(certs.listener())
        .start()
        .await;
    let mut companions: Vec<Companion> = (1..=3)
        .map(|i| Companion::start(&w, &certs, &format!("worker-{i}")))
        .collect();
    for c in &companions {
        c.acknowledged().await;
    }

    // A companion that dies on a live machine: suspect, read On, left alone; the
    // kubelet's next renewal outvotes the silence.
    companions[1].kill();
    w.expect_event("worker-2", "NodeSuspect").await;
    assert!(
        suspect_notes(&w, "worker-2")[0].contains("its companion stopped beating"),
        "{:?}",
        suspect_notes(&w, "worker-2")
    );
    w.expect_event("worker-2", "RecoveredBeforeRelease").await;
    assert!(!w.has_out_of_service_taint("worker-2"));
    assert!(w.resets_of("worker-2").is_empty(), "no power command");

    // A clean stop (a rolling update): the node is left to its Lease.
    companions[2].stop().await;
    tokio::time::sleep(TIMEOUT * 4).await;
    assert!(
        suspect_notes(&w, "worker-3").is_empty(),
        "{:?}",
        suspect_notes(&w, "worker-3")
    );

    // Power lost: the companion falls silent with the machine, before the Lease goes
    // stale; the machine reads Off after the last beat, and it is released.
    w.pull_plug("worker-1");
    companions[0].kill();
    eventually("worker-1 released", Duration::from_secs(20), || async {
        w.has_out_of_service_taint("worker-1")
    })
    .await;
    let notes = suspect_notes(&w, "worker-1");
    assert!(
        notes.len() == 1 && notes[0].contains("its companion stopped beating"),
        "suspect first through its companion, not its Lease: {notes:?}"
    );
    assert!(w.resets_of("worker-1").is_empty(), "it was Off: no command");
    assert!(!w.has_out_of_service_taint("worker-2"));
    assert!(!w.has_out_of_service_taint("worker-3"));
    w.stop().await;
}

/// The watchdog level end to end: the machine and its BMC die together (the BMC
/// answers nothing but errors). Without `watchdog_fencing` nothing is released, as
/// before; with it, the node is marked (the annotation names its boot), released
/// after the release rule's wait, and every word says it rests on the watchdog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_dead_with_its_bmc_is_released_on_its_watchdog_only_with_the_opt_in() {
    use nodefence::watchdog::mark::{FENCING_MARK_ANNOTATION, Mark};
    use nodefence_mocks::redfish::Fault;
    const GRANTED: Duration = Duration::from_secs(2);
    for opted_in in [false, true] {
        let certs = Certificates::new();
        let mut builder = WorldBuilder::new()
            .no_workloads()
            .companions(certs.listener());
        if opted_in {
            builder = builder.policy_key("watchdog_fencing", "true");
        }
        let w = builder.start().await;
        let companions: Vec<Companion> = (1..=3)
            .map(|i| Companion::start_with(&w, &certs, &format!("worker-{i}"), GRANTED))
            .collect();
        for c in &companions {
            c.acknowledged().await;
        }
        eventually(
            "every watchdog reported armed",
            Duration::from_secs(10),
            || async { companions.iter().all(|c| c.status.lock().unwrap().feeding) },
        )
        .await;
        let boot = w.node("worker-1").unwrap()["status"]["nodeInfo"]["bootID"]
            .as_str()
            .unwrap()
            .to_string();

        // Rack power: the machine, its BMC and its companion at once.
        w.bmc.inject(Fault::Fail500 { count: u32::MAX });
        w.pull_plug("worker-1");
        companions[0].kill();
        let lost = std::time::Instant::now();

        if !opted_in {
            w.expect_event("worker-1", "PowerQueryFailed").await;
            tokio::time::sleep(Duration::from_secs(8)).await;
            assert!(
                !w.has_out_of_service_taint("worker-1"),
                "no proof, no release"
            );
            let node = w.node("worker-1").unwrap();
            assert!(
                node["metadata"]["annotations"][FENCING_MARK_ANNOTATION].is_null(),
                "not marked without the opt-in"
            );
            assert!(w.events_with_reason("WatchdogFencing").is_empty());
            let explained = explain(&w, "worker-1").await;
            assert!(
                explained.contains("Watchdog level: off")
                    && explained.contains("the BMC cannot be read"),
                "{explained}"
            );
            w.stop().await;
            continue;
        }

        w.expect_event("worker-1", "WatchdogFencing").await;
        eventually("the mark on the Node", Duration::from_secs(10), || async {
            w.node("worker-1").unwrap()["metadata"]["annotations"][FENCING_MARK_ANNOTATION]
                .is_string()
        })
        .await;
        let value = w.node("worker-1").unwrap()["metadata"]["annotations"][FENCING_MARK_ANNOTATION]
            .as_str()
            .unwrap()
            .to_string();
        let mark = Mark::parse(&value);
        assert_eq!(mark.boot_id.as_deref(), Some(boot.as_str()), "{value}");
        let explained = explain(&w, "worker-1").await;
        assert!(
            explained.contains("Watchdog level: on")
                && explained.contains(&format!("for this boot ({boot})")),
            "{explained}"
        );
        assert!(
            explained.contains("Decision:       marked for fencing by its watchdog")
                || explained.contains("Decision:       released"),
            "{explained}"
        );
        eventually("worker-1 released", Duration::from_secs(30), || async {
            w.has_out_of_service_taint("worker-1")
        })
        .await;
        // The rule's wait with the defaults (isolation 2 s, 1 % drift, 0.5 s) and a
        // 2 s watchdog: 4.58 s after the later of the last acknowledgement and the
        // mark. The API server's own write times: the mark is stored before the daemon
        // counts from its answer, the taint after the daemon decided.
        let wait = nodefence::watchdog::timing::Timing::default()
            .wait(GRANTED)
            .total();
        let (mark_at, taint_at) = write_times(&w, "worker-1");
        assert!(
            taint_at.duration_since(mark_at).unwrap_or_default() >= wait,
            "released {:?} after the mark was stored, before the wait {wait:?}",
            taint_at.duration_since(mark_at)
        );
        assert!(
            lost.elapsed() < Duration::from_secs(20),
            "released {:?} after the loss",
            lost.elapsed()
        );
        // The Events are published as the decisions are taken, each its own write:
        // waited for.
        let reset = w
            .expect_event_where("ResetByWatchdog", |e| e["regarding"]["name"] == "worker-1")
            .await;
        assert_eq!(reset.len(), 1, "{reset:?}");
        let note = reset[0]["note"].as_str().unwrap_or_default();
        assert!(
            note.contains("reset by its hardware watchdog")
                && note.contains("not read Off")
                && note.contains("(iTCO_wdt, 2s granted)")
                && note.contains("of 3 companions heard throughout"),
            "{note}"
        );
        w.expect_event_where("Released", |e| {
            e["regarding"]["name"] == "worker-1"
                && e["note"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("rests on its hardware watchdog, not on an Off reading")
        })
        .await;
        assert!(
            w.events_with_reason("ConfirmedOff").is_empty(),
            "no Off reading claimed"
        );
        assert!(
            w.resets_of("worker-1").is_empty(),
            "no power command reached it"
        );
        // The others never stopped feeding: their marks were never set.
        for c in &companions[1..] {
            let s = c.status.lock().unwrap();
            assert!(!s.marked && s.feeding, "{s:?}");
        }
        assert!(!w.has_out_of_service_taint("worker-2"));
        assert!(!w.has_out_of_service_taint("worker-3"));
        // `status` shows each node's companion as the leader published it.
        let mut shown = String::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(25);
        while std::time::Instant::now() < deadline {
            shown = nodefence_cli(&w, &["status", "worker-1", "worker-2"]).await;
            if shown.contains("silent since")
                && shown.contains("beating, watchdog iTCO_wdt 2s armed")
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let line = |node: &str| {
            shown
                .lines()
                .find(|l| l.starts_with(node))
                .unwrap_or_else(|| panic!("no {node} row in\n{shown}"))
                .to_string()
        };
        assert!(line("worker-1").contains("silent since"), "{shown}");
        assert!(shown.contains("COMPANION"), "{shown}");
        assert!(
            line("worker-2").contains("beating, watchdog iTCO_wdt 2s armed"),
            "{shown}"
        );
        // explain shows the same row for the node.
        let explained = explain(&w, "worker-1").await;
        let companion = explained
            .lines()
            .find(|l| l.starts_with("Companion:"))
            .unwrap_or_else(|| panic!("no Companion line in\n{explained}"));
        assert!(
            companion.contains("silent since") && companion.contains("watchdog iTCO_wdt 2s armed"),
            "{companion}"
        );
        w.stop().await;
    }
}

/// `nodefence run --dry-run` behind the companions' Service: it decides as if it led,
/// but never acknowledges a beat as the leader's (issue 52: a dry-run replica fed a
/// node cut from the real leader, which then released it while it ran).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_never_acknowledges_a_beat_as_the_leaders() {
    let certs = Certificates::new();
    let w = WorldBuilder::new()
        .no_workloads()
        .dry_run(true)
        .companions(certs.listener())
        .start()
        .await;
    let c = Companion::start(&w, &certs, "worker-1");
    c.acknowledged().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let s = c.status.lock().unwrap().clone();
    assert!(s.acknowledged > 0 && s.term_seen == 0, "{s:?}");
    assert_ne!(
        s.basis,
        Some(nodefence::watchdog::feeding::Basis::Leader),
        "{s:?}"
    );
    w.stop().await;
}
