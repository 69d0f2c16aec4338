//! End to end (the real daemon with `--companion-listen`, real companions with a
//! watchdog in memory, fake-kube's simulated control plane and TokenReviews, the mock
//! Redfish BMC): a companion's silence makes its node suspect before its Lease says
//! anything, and a release still needs the machine read Off.
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
    /// Its projected token issued (bound to `node`), then started.
    fn start(w: &World, certs: &Certificates, node: &str) -> Self {
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
                "iTCO_wdt",
                Duration::from_secs(10),
                false,
            ))),
            replicas: None,
            api: None,
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
        // What the daemon checks at start-up: the companions may read their Node.
        .service_account(
            "companion-api-token",
            LEADER_LEASE_NAMESPACE,
            "nodefence-companion",
            crate::common::deploy_common::companion_rbac(LEADER_LEASE_NAMESPACE),
        )
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
