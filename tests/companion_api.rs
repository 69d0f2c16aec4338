//! The feeding rule's second basis end to end: the real companion (`companion::run`,
//! a watchdog in memory) beating to nodefence's real listener (whose leadership the
//! test switches: a failover), and reading its own Node from fake-kube with its own
//! token, authorized by exactly the RBAC of `deploy/components/companion`. What is
//! asserted is what the watchdog saw (fed throughout, or no longer fed) and what
//! fake-kube saw (the Node read only while the leader is silent, at most once per
//! `isolation_timeout / 2`); times are bounds, never exact.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum_server::tls_rustls::RustlsConfig;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams, PostParams};
use nodefence::cluster::leader::{Leadership, LeadershipSwitch};
use nodefence::companion::api::ApiAccess;
use nodefence::companion::{self, Options, Status, WatchdogChoice};
use nodefence::heartbeat::{self, Heartbeat, Settings, hello};
use nodefence::tls::CertFingerprint;
use nodefence::watchdog::device::{Disarmed, RecordingWatchdog};
use nodefence::watchdog::feeding::Basis;
use nodefence::watchdog::mark::{FENCING_MARK_ANNOTATION, Mark};
use nodefence::watchdog::timing::Timing;
use nodefence_mocks::kube::authz::Policy;
use nodefence_mocks::kube::{BoundToken, FakeKube, FakeKubeHandle};
use tokio::time::Instant;

const NODE: &str = "worker-1";
pub(crate) const COMPANION: &str = "system:serviceaccount:nodefence:nodefence-companion";
/// The companion's API token (the pod's mounted ServiceAccount token).
pub(crate) const API_TOKEN: &str = "companion-api-token";
/// This machine's boot.
pub(crate) const BOOT: &str = "5e1f0c2a-this-boot";
/// The listener's `isolation_timeout` (the default): an answer holds this long.
pub(crate) const ISOLATION: Duration = Duration::from_secs(2);

/// The listener's certificate (for 127.0.0.1 and the relay's 127.0.0.2) and its
/// fingerprint.
pub(crate) fn certificate() -> &'static (Arc<rustls::ServerConfig>, CertFingerprint) {
    static CERT: std::sync::OnceLock<(Arc<rustls::ServerConfig>, CertFingerprint)> =
        std::sync::OnceLock::new();
    CERT.get_or_init(|| {
        nodefence::tls::install_crypto_provider();
        let (config, fingerprint) = nodefence::telemetry::certificate::self_signed(vec![
            "127.0.0.1".into(),
            "127.0.0.2".into(),
        ])
        .unwrap();
        (Arc::new(config), fingerprint)
    })
}

pub(crate) async fn client_from(kubeconfig: &str) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(kubeconfig).unwrap();
    nodefence::cluster::client(
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap(),
    )
    .unwrap()
}

/// How a world starts.
struct Start {
    /// The companions' grant as `deploy/components/companion` ships it; or none.
    granted: bool,
    /// The listener's replica leads.
    leading: bool,
    /// The Node exists.
    node: bool,
    /// The Node's fencing mark at the start.
    mark: Option<String>,
    /// The companion keeps its state in a directory (as the DaemonSet ships it).
    state_dir: bool,
    /// The cluster's size the listener's acknowledgements carry (0: none known).
    cluster: usize,
    /// The companion reaches the listener through a relay ([`Relay`]) whose UDP
    /// path the test can cut.
    relayed: bool,
}

impl Default for Start {
    fn default() -> Self {
        Self {
            granted: true,
            leading: true,
            node: true,
            mark: None,
            state_dir: false,
            cluster: 0,
            relayed: false,
        }
    }
}

/// fake-kube, nodefence's listener and one companion, running.
struct World {
    kube: Option<FakeKubeHandle>,
    admin: kube::Client,
    switch: LeadershipSwitch,
    _hb: Heartbeat,
    relay: Option<Relay>,
    dog: RecordingWatchdog,
    status: Arc<Mutex<Status>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    run: tokio::task::JoinHandle<anyhow::Result<Option<Disarmed>>>,
    _dir: tempfile::TempDir,
}

impl World {
    async fn start(start: Start) -> Self {
        nodefence::tls::install_crypto_provider();
        let rbac = crate::deploy_common::companion_rbac("nodefence");
        let policy = if start.granted {
            Policy::for_service_account(&rbac, "nodefence", "nodefence-companion")
        } else {
            Policy::default()
        };
        let kube = FakeKube::builder()
            .identity(API_TOKEN, COMPANION, policy)
            .start()
            .await
            .unwrap();
        kube.issue_token(BoundToken {
            token: format!("token-{NODE}"),
            user: COMPANION.into(),
            audiences: vec![hello::AUDIENCE.into()],
            pod: Some((format!("nodefence-companion-{NODE}"), "pod-uid".into())),
            node: Some((NODE.into(), "node-uid".into())),
        });
        let admin = client_from(&kube.kubeconfig_yaml()).await;
        if start.node {
            let mut node = serde_json::json!({"metadata": {"name": NODE}});
            if let Some(mark) = &start.mark {
                node["metadata"]["annotations"] =
                    serde_json::json!({ FENCING_MARK_ANNOTATION: mark });
            }
            kube::Api::<Node>::all(admin.clone())
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(node).unwrap(),
                )
                .await
                .unwrap();
        }
        let (switch, leadership) = Leadership::switched(start.leading);
        let hb = heartbeat::start(
            Settings {
                listen: "127.0.0.1:0".parse().unwrap(),
                companion_user: COMPANION.into(),
                timing: Timing::default(),
                heartbeat_interval: Duration::from_millis(100),
                heartbeat_timeout: Duration::from_millis(500),
                metrics: None,
            },
            admin.clone(),
            RustlsConfig::from_config(certificate().0.clone()),
            leadership,
            std::future::pending(),
        )
        .await
        .unwrap();
        assert_eq!(Timing::default().isolation_timeout, ISOLATION);
        // As the leader's term sets it: the node's policy has the watchdog level on.
        hb.set_watchdog_nodes(std::iter::once(NODE.to_string()).collect());
        if start.cluster > 0 {
            hb.set_nodes_in_cluster(start.cluster);
        }
        let relay = if start.relayed {
            Some(Relay::start(hb.addr()).await)
        } else {
            None
        };
        let host = if relay.is_some() {
            "127.0.0.2"
        } else {
            "127.0.0.1"
        };
        let port = hb.addr().port();
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, format!("token-{NODE}\n")).unwrap();
        let dog = RecordingWatchdog::new("iTCO_wdt", Duration::from_secs(10), false);
        let options = Options {
            nodefence: format!("https://{host}:{port}").parse().unwrap(),
            tls: nodefence::config::TlsSettings {
                fingerprint: Some(certificate().1),
                ..Default::default()
            },
            token_file: token,
            watchdog: WatchdogChoice::Given(Box::new(dog.clone())),
            replicas: None,
            api: Some(ApiAccess {
                client: client_from(&kube.kubeconfig_yaml_for(API_TOKEN)).await,
            }),
            peers: None,
            state_dir: start.state_dir.then(|| dir.path().join("state")),
            resolver: Default::default(),
            realtime: false,
            boot_id: BOOT.into(),
            machine: nodefence::companion::machine::MachineKind::Physical,
        };
        let status = Arc::new(Mutex::new(Status::default()));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(companion::run(options, status.clone(), async move {
            let _ = stopped.await;
        }));
        Self {
            kube: Some(kube),
            admin,
            switch,
            _hb: hb,
            relay,
            dog,
            status,
            stop: Some(stop),
            run,
            _dir: dir,
        }
    }

    fn status(&self) -> Status {
        self.status.lock().unwrap().clone()
    }

    fn feeds(&self) -> u64 {
        self.dog.recorded().feeds
    }

    /// The companion's requests to the API server: (method, path, status).
    fn companion_requests(&self) -> Vec<(String, String, u16)> {
        self.kube
            .as_ref()
            .expect("fake-kube runs")
            .requests()
            .into_iter()
            .filter(|r| r.user.as_deref() == Some(COMPANION))
            .map(|r| (r.method, r.path_and_query, r.status))
            .collect()
    }

    /// Its reads of its Node; every request it sent is one.
    fn node_reads(&self) -> usize {
        let all = self.companion_requests();
        for (method, path, _) in &all {
            assert_eq!(
                (method.as_str(), path.as_str()),
                ("GET", format!("/api/v1/nodes/{NODE}").as_str()),
                "a plain GET of its own Node (no resourceVersion), nothing else"
            );
        }
        all.len()
    }

    /// Sets (or removes) the Node's fencing mark, as the leader would.
    async fn mark(&self, value: Option<String>) {
        let patch =
            serde_json::json!({"metadata": {"annotations": {FENCING_MARK_ANNOTATION: value}}});
        kube::Api::<Node>::all(self.admin.clone())
            .patch(NODE, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Fed without a gap for `window`: the rule allows it at every look (every 50 ms)
    /// on `basis`, and the watchdog is fed all along.
    async fn fed_throughout(&self, window: Duration, basis: Basis) {
        let deadline = Instant::now() + window;
        let mut last = self.feeds();
        let mut last_growth = Instant::now();
        while Instant::now() < deadline {
            let s = self.status();
            assert!(
                s.feeding && s.basis == Some(basis),
                "fed throughout on {basis:?}: {s:?}"
            );
            let feeds = self.feeds();
            if feeds > last {
                (last, last_growth) = (feeds, Instant::now());
            }
            assert!(
                last_growth.elapsed() < Duration::from_millis(500),
                "the watchdog fed all along ({feeds} feeds)"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// No feed at all for `window`.
    async fn not_fed_for(&self, window: Duration) {
        let before = self.feeds();
        tokio::time::sleep(window).await;
        assert_eq!(self.feeds(), before, "no feed");
        assert!(!self.status().feeding);
    }

    async fn stop(mut self) -> Option<Disarmed> {
        let _ = self.stop.take().unwrap().send(());
        let disarmed = (&mut self.run).await.unwrap().unwrap();
        if let Some(kube) = self.kube.take() {
            kube.shutdown().await;
        }
        disarmed
    }
}

/// Between the companion and the listener: TCP (the hello) and UDP (the beats and
/// their acknowledgements) from 127.0.0.2 to the listener's port on 127.0.0.1, the
/// UDP path cut until [`Relay::mend`] (a link that carried the hello and then broke).
struct Relay {
    udp_open: Arc<std::sync::atomic::AtomicBool>,
    _tasks: Vec<tokio_util::task::AbortOnDropHandle<()>>,
}

impl Relay {
    async fn start(to: std::net::SocketAddr) -> Self {
        let near = std::net::SocketAddr::from(([127, 0, 0, 2], to.port()));
        let tcp = tokio::net::TcpListener::bind(near).await.unwrap();
        let tcp_task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = tcp.accept().await {
                tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        let udp_open = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let companion_side = Arc::new(tokio::net::UdpSocket::bind(near).await.unwrap());
        let listener_side = Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap());
        listener_side.connect(to).await.unwrap();
        let companion_at = Arc::new(Mutex::new(None));
        let (open, from, to_listener, at) = (
            udp_open.clone(),
            companion_side.clone(),
            listener_side.clone(),
            companion_at.clone(),
        );
        let beats = tokio::spawn(async move {
            let mut buf = vec![0u8; 65_536];
            while let Ok((n, source)) = from.recv_from(&mut buf).await {
                *at.lock().unwrap() = Some(source);
                if open.load(std::sync::atomic::Ordering::SeqCst) {
                    let _ = to_listener.send(&buf[..n]).await;
                }
            }
        });
        let open = udp_open.clone();
        let acknowledgements = tokio::spawn(async move {
            let mut buf = vec![0u8; 65_536];
            while let Ok(n) = listener_side.recv(&mut buf).await {
                let source = *companion_at.lock().unwrap();
                if let (Some(source), true) =
                    (source, open.load(std::sync::atomic::Ordering::SeqCst))
                {
                    let _ = companion_side.send_to(&buf[..n], source).await;
                }
            }
        });
        Self {
            udp_open,
            _tasks: [tcp_task, beats, acknowledgements]
                .into_iter()
                .map(tokio_util::task::AbortOnDropHandle::new)
                .collect(),
        }
    }

    /// The UDP path carries beats and acknowledgements from now on.
    fn mend(&self) {
        self.udp_open
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

async fn eventually(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// (a) The leader falls silent (a failover: its replica no longer leads): the
/// companion reads its Node, and feeds on the API server's answer without a gap; not
/// one read while the leader answers. (c) A mark for another boot is void. (d) The API
/// server gone as well: feeding stops within the isolation timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_servers_answer_feeds_only_while_the_leader_is_silent() {
    let w = World::start(Start::default()).await;
    eventually(
        "armed and fed on the leader's answer",
        Duration::from_secs(15),
        || w.status().basis == Some(Basis::Leader) && w.feeds() >= 3,
    )
    .await;
    assert!(w.status().armed.is_some());
    // The steady state: the leader answers, the API server hears nothing.
    w.fed_throughout(ISOLATION * 2, Basis::Leader).await;
    assert_eq!(w.node_reads(), 0, "no read while the leader answers");

    // (a) A failover: the leader's answers stop (its replica still acknowledges, as a
    // standby: that is no basis).
    w.switch.set(false);
    let silent = Instant::now();
    eventually("feeding on the API server's answer", ISOLATION * 2, || {
        w.status().basis == Some(Basis::ApiServer)
    })
    .await;
    w.fed_throughout(ISOLATION * 2, Basis::ApiServer).await;
    let reads = w.node_reads();
    // At most one per isolation_timeout / 2 (1 s) since the leader's silence began.
    let most = (silent.elapsed().as_secs_f64() / (ISOLATION / 2).as_secs_f64()).ceil() as usize;
    assert!(
        reads >= 2 && reads <= most + 1,
        "{reads} reads in {:?}",
        silent.elapsed()
    );
    assert!(
        w.companion_requests().iter().all(|(_, _, s)| *s == 200),
        "{:?}",
        w.companion_requests()
    );

    // The leader is back: the reads stop (one may be under way).
    w.switch.set(true);
    eventually("back on the leader", ISOLATION, || {
        w.status().basis == Some(Basis::Leader)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let back = w.node_reads();
    w.fed_throughout(ISOLATION * 2, Basis::Leader).await;
    assert_eq!(w.node_reads(), back, "no read while the leader answers");

    // (c) A mark for another boot (the machine was reset for it): void.
    w.mark(Some(Mark::value(SystemTime::now(), "0ld-b00t")))
        .await;
    w.switch.set(false);
    eventually("the marked Node read", ISOLATION * 2, || {
        w.node_reads() > back && w.status().basis == Some(Basis::ApiServer)
    })
    .await;
    w.fed_throughout(ISOLATION * 2, Basis::ApiServer).await;
    assert!(!w.status().marked);

    // (d) The API server gone too: no answer, nothing extended.
    let mut w = w;
    w.kube.take().unwrap().shutdown().await;
    let down = Instant::now();
    eventually(
        "feeding stops within the isolation timeout",
        ISOLATION + Duration::from_millis(500),
        || !w.status().feeding,
    )
    .await;
    assert!(down.elapsed() <= ISOLATION + Duration::from_millis(500));
    w.not_fed_for(Duration::from_secs(1)).await;
    let s = w.status();
    assert!(!s.marked && s.basis.is_none(), "{s:?}");
    // Not poisoned: the leader's answer feeds it again.
    w.switch.set(true);
    eventually("fed again on the leader's answer", ISOLATION, || {
        w.status().basis == Some(Basis::Leader)
    })
    .await;
    assert_eq!(w.stop().await, Some(Disarmed::Stopped));
}

/// (b) A mark for this boot, read from the API server while the leader is silent:
/// feeding stops at once, and the Node is read no more while it stands. Only the
/// leader lifts it (a new leader that has not marked the node, or one whose removal
/// of the annotation failed): fed again on its answer; silent again, the API server's
/// mark stops feeding again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_for_this_boot_read_from_the_api_server_stops_feeding_until_the_leader_lifts_it() {
    let w = World::start(Start::default()).await;
    eventually(
        "fed on the leader's answer",
        Duration::from_secs(15),
        || w.status().basis == Some(Basis::Leader) && w.feeds() >= 3,
    )
    .await;
    w.switch.set(false);
    eventually("fed on the API server's answer", ISOLATION * 2, || {
        w.status().basis == Some(Basis::ApiServer)
    })
    .await;
    w.mark(Some(Mark::value(SystemTime::now(), BOOT))).await;
    let marked = Instant::now();
    eventually("told", ISOLATION, || w.status().marked).await;
    assert!(marked.elapsed() <= ISOLATION);
    eventually("no longer fed", Duration::from_millis(500), || {
        !w.status().feeding
    })
    .await;
    let reads = w.node_reads();
    w.not_fed_for(ISOLATION).await;
    assert_eq!(w.node_reads(), reads, "nothing to read while marked");
    // The leader answers again, without the mark: lifted, fed on its answer.
    let fed = w.feeds();
    w.switch.set(true);
    eventually("lifted by the leader", ISOLATION * 2, || {
        let s = w.status();
        !s.marked && s.basis == Some(Basis::Leader) && w.feeds() > fed
    })
    .await;
    // Silent again: the Node's mark for this boot stops it again.
    w.switch.set(false);
    eventually("marked again by the API server", ISOLATION * 2, || {
        let s = w.status();
        s.marked && !s.feeding
    })
    .await;
    assert!(w.node_reads() > reads);
    assert_eq!(w.stop().await, Some(Disarmed::Stopped));
}

/// (d) The API server refuses the read (no grant: 403), and the Node of another
/// companion does not exist (404): no answer, so once the leader is silent the
/// watchdog is no longer fed, within the isolation timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_or_absent_node_is_no_answer() {
    for start in [
        Start {
            granted: false,
            ..Start::default()
        },
        Start {
            node: false,
            ..Start::default()
        },
    ] {
        let want = if start.granted { 404 } else { 403 };
        let w = World::start(start).await;
        eventually(
            "fed on the leader's answer",
            Duration::from_secs(15),
            || w.status().basis == Some(Basis::Leader) && w.feeds() >= 3,
        )
        .await;
        w.switch.set(false);
        let silent = Instant::now();
        eventually(
            "no longer fed",
            ISOLATION + Duration::from_millis(500),
            || !w.status().feeding,
        )
        .await;
        assert!(silent.elapsed() <= ISOLATION + Duration::from_millis(500));
        w.not_fed_for(Duration::from_secs(1)).await;
        let requests = w.companion_requests();
        assert!(
            w.node_reads() >= 1 && requests.iter().all(|(_, _, s)| *s == want),
            "{requests:?}"
        );
        assert!(!w.status().marked);
        assert!(
            w.status().armed.is_some(),
            "armed while the leader answered"
        );
        assert_eq!(w.stop().await, Some(Disarmed::Stopped));
    }
}

/// Armed only when feeding is first allowed: with no leader (a failover under way), the
/// API server's answer is a basis and arms it; a Node still marked for this boot when
/// the companion starts (the leader marked it, and no one answers otherwise) never
/// arms it, so the machine is not reset again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_is_armed_on_the_first_basis_and_never_when_marked_first() {
    let w = World::start(Start {
        leading: false,
        ..Start::default()
    })
    .await;
    eventually(
        "armed on the API server's answer",
        Duration::from_secs(15),
        || w.status().basis == Some(Basis::ApiServer) && w.feeds() >= 3,
    )
    .await;
    assert_eq!(
        w.status().armed,
        Some(("iTCO_wdt".to_string(), Duration::from_secs(10)))
    );
    assert_eq!(w.stop().await, Some(Disarmed::Stopped));

    let w = World::start(Start {
        leading: false,
        mark: Some(Mark::value(SystemTime::now(), BOOT)),
        ..Start::default()
    })
    .await;
    eventually("told by the API server", Duration::from_secs(15), || {
        w.status().marked
    })
    .await;
    w.not_fed_for(ISOLATION).await;
    let s = w.status();
    assert_eq!(
        (s.armed.clone(), s.feeding, w.feeds()),
        (None, false, 0),
        "{s:?}"
    );
    assert_eq!(w.node_reads(), 1, "one read told it all");
    assert_eq!(w.stop().await, None, "never armed: nothing to disarm");
}

/// Simulation seed 7850, end to end: a companion that keeps its state (so a crashed
/// predecessor's watchdog would be known) and whose beats are lost from the hello on
/// (its link to nodefence broke) feeds on the API server's answer but does not arm:
/// no replica has told it the cluster's size, so it could not feed on its peers, and
/// an outage of the whole control plane would reset a machine doing its work. Once
/// the beats go through, the first acknowledgement tells the size and it arms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_companion_with_kept_state_arms_only_once_a_replica_told_the_clusters_size() {
    let w = World::start(Start {
        state_dir: true,
        cluster: 3,
        relayed: true,
        ..Start::default()
    })
    .await;
    eventually(
        "feeding allowed on the API server's answer",
        Duration::from_secs(15),
        || {
            let s = w.status();
            s.feeding && s.basis == Some(Basis::ApiServer)
        },
    )
    .await;
    // Two isolation timeouts of reads answered, the rule allowing all along: still
    // nothing armed, nothing fed.
    tokio::time::sleep(2 * ISOLATION).await;
    let s = w.status();
    assert!(s.feeding && s.basis == Some(Basis::ApiServer), "{s:?}");
    assert_eq!(
        (s.acknowledged, s.armed.clone(), w.feeds()),
        (0, None, 0),
        "no acknowledgement, so no watchdog armed: {s:?}"
    );

    w.relay.as_ref().unwrap().mend();
    eventually(
        "armed once an acknowledgement told the size",
        Duration::from_secs(10),
        || w.status().armed.is_some() && w.feeds() >= 3,
    )
    .await;
    let s = w.status();
    assert_eq!(s.basis, Some(Basis::Leader), "{s:?}");
    assert_eq!(
        s.armed,
        Some(("iTCO_wdt".to_string(), Duration::from_secs(10)))
    );
    assert_eq!(w.stop().await, Some(Disarmed::Stopped));
}

/// The real binary refuses to start without what the second basis needs: this
/// machine's boot ID (`--boot-id-file`), or access to the API server (`--kubeconfig`,
/// else the in-cluster ServiceAccount); nothing is armed then.
#[tokio::test]
async fn the_companion_refuses_to_start_without_a_boot_id_or_api_access() {
    let dir = tempfile::tempdir().unwrap();
    let boot = dir.path().join("boot_id");
    std::fs::write(&boot, format!("{BOOT}\n")).unwrap();
    let companion = |boot: &std::path::Path, kubeconfig: &std::path::Path| {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_nodefence"))
            .args(["companion", "--nodefence", "https://127.0.0.1:9"])
            .arg("--boot-id-file")
            .arg(boot)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .output()
    };
    let absent = dir.path().join("absent");
    let out = companion(&absent, &absent).await.unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("cannot read this machine's boot ID"),
        "{said}"
    );
    let out = companion(&boot, &absent).await.unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("no access to the API server") && said.contains("--kubeconfig"),
        "{said}"
    );
}
