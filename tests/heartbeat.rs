//! The companions' heartbeat end to end: nodefence's listener (`heartbeat`: a hello
//! over HTTPS whose projected token fake-kube reviews as the API server does, beats
//! and acknowledgements over UDP) and the real companion (`companion::run`) with a
//! watchdog in memory.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use nodefence::cluster::leader::Leadership;
use nodefence::companion::{self, Options, Status, WatchdogChoice};
use nodefence::heartbeat::{self, Heartbeat, Settings, hello};
use nodefence::tls::CertFingerprint;
use nodefence::watchdog::device::{Disarmed, RecordingWatchdog};
use nodefence::watchdog::timing::Timing;
use nodefence::watchdog::wire::WatchdogState;
use nodefence_mocks::kube::{BoundToken, FakeKube, FakeKubeHandle};

pub(crate) const COMPANION: &str = "system:serviceaccount:nodefence:nodefence-companion";

pub(crate) async fn client(kube: &FakeKubeHandle) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&kube.kubeconfig_yaml()).unwrap();
    nodefence::cluster::client(
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap(),
    )
    .unwrap()
}

/// The listeners' one certificate (for 127.0.0.1 and localhost) and its fingerprint.
fn certificate() -> &'static (Arc<rustls::ServerConfig>, CertFingerprint) {
    static CERT: std::sync::OnceLock<(Arc<rustls::ServerConfig>, CertFingerprint)> =
        std::sync::OnceLock::new();
    CERT.get_or_init(|| {
        nodefence::tls::install_crypto_provider();
        let (config, fingerprint) = nodefence::telemetry::certificate::self_signed(vec![
            "127.0.0.1".into(),
            "localhost".into(),
        ])
        .unwrap();
        (Arc::new(config), fingerprint)
    })
}

pub(crate) fn leader_tls() -> RustlsConfig {
    RustlsConfig::from_config(certificate().0.clone())
}

/// fake-kube with a projected token of the companion on `node`, and nodefence's
/// listener (self-signed; its fingerprint returned) as `leadership` has it.
pub(crate) async fn world(
    node: &str,
    audience: &str,
    leadership: Leadership,
) -> (FakeKubeHandle, Heartbeat, CertFingerprint) {
    nodefence::tls::install_crypto_provider();
    let kube = FakeKube::builder().start().await.unwrap();
    kube.issue_token(BoundToken {
        token: format!("token-{node}"),
        user: COMPANION.into(),
        audiences: vec![audience.into()],
        pod: Some((format!("nodefence-companion-{node}"), "pod-uid".into())),
        node: Some((node.into(), "node-uid".into())),
    });
    let fingerprint = certificate().1;
    let settings = Settings {
        listen: "127.0.0.1:0".parse().unwrap(),
        companion_user: COMPANION.into(),
        timing: Timing::default(),
        heartbeat_interval: Duration::from_millis(100),
        heartbeat_timeout: Duration::from_millis(500),
        metrics: None,
    };
    let hb = heartbeat::start(
        settings,
        client(&kube).await,
        leader_tls(),
        leadership,
        std::future::pending(),
    )
    .await
    .unwrap();
    // As the leader's term sets it: the node's policy has the watchdog level on.
    hb.set_watchdog_nodes(std::iter::once(node.to_string()).collect());
    (kube, hb, fingerprint)
}

pub(crate) fn options(
    hb: &Heartbeat,
    pin: CertFingerprint,
    token: &std::path::Path,
    dog: RecordingWatchdog,
) -> Options {
    Options {
        nodefence: format!("https://127.0.0.1:{}", hb.addr().port())
            .parse()
            .unwrap(),
        tls: nodefence::config::TlsSettings {
            fingerprint: Some(pin),
            ..Default::default()
        },
        token_file: token.to_path_buf(),
        watchdog: WatchdogChoice::Given(Box::new(dog)),
        replicas: None,
        api: None,
        peers: None,
        state_dir: None,
        resolver: Default::default(),
        realtime: false,
        boot_id: "0c5a3b1e-6f1d-4b7e-9a2c-1d3e5f7a9b0c".into(),
        machine: nodefence::companion::machine::MachineKind::Physical,
    }
}

pub(crate) type Running = tokio::task::JoinHandle<anyhow::Result<Option<Disarmed>>>;

/// The companion, running until the sender is used: its status, the stop, the task.
pub(crate) fn spawn(
    options: Options,
) -> (
    Arc<Mutex<Status>>,
    tokio::sync::oneshot::Sender<()>,
    Running,
) {
    let status = Arc::new(Mutex::new(Status::default()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(companion::run(options, status.clone(), async move {
        let _ = stopped.await;
    }));
    (status, stop, run)
}

pub(crate) async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_companion_beats_is_acknowledged_feeds_and_stops_feeding_once_marked() {
    let (kube, hb, pin) = world("worker-1", hello::AUDIENCE, Leadership::always()).await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "token-worker-1\n").unwrap();
    let dog = RecordingWatchdog::new("iTCO_wdt", Duration::from_secs(10), false);
    let (status, stop, run) = spawn(options(&hb, pin, &token, dog.clone()));
    // The node is the token's; beats are acknowledged and the watchdog fed.
    eventually("acknowledged and fed", || {
        status.lock().unwrap().acknowledged >= 3 && dog.recorded().feeds >= 3
    })
    .await;
    assert_eq!(status.lock().unwrap().node.as_deref(), Some("worker-1"));
    let seen = hb.with_table(|t| t.companion("worker-1").cloned()).unwrap();
    assert_eq!(
        seen.watchdog,
        WatchdogState::Armed {
            granted: Duration::from_secs(10),
            device: nodefence::watchdog::wire::DeviceName::new("iTCO_wdt"),
        }
    );
    assert!(seen.beats >= 3 && seen.last_ack.is_some());
    // A standby's view: a beat was heard recently; silence is seen after the timeout.
    assert!(
        hb.with_table(|t| t.silent(hb.now(), Duration::from_secs(2)))
            .is_empty()
    );

    // Marked: the next acknowledgement says so, and feeding stops while it stands.
    hb.set_marked("worker-1", true);
    eventually("told", || status.lock().unwrap().marked).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = dog.recorded().feeds;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(dog.recorded().feeds, after, "no feed once marked");
    // Lifted (the node recovered): the leader's next acknowledgement feeds it again.
    hb.set_marked("worker-1", false);
    eventually("lifted and fed again", || {
        !status.lock().unwrap().marked && dog.recorded().feeds > after
    })
    .await;

    // A clean stop: "stopping" beaten, then disarmed.
    stop.send(()).unwrap();
    let disarmed = run.await.unwrap().unwrap();
    assert_eq!(
        disarmed,
        Some(Disarmed::Stopped),
        "the only replica acknowledged it"
    );
    assert!(dog.recorded().disarmed);
    eventually("stopping seen", || {
        hb.with_table(|t| t.companion("worker-1").map(|c| c.watchdog))
            == Some(WatchdogState::Stopping)
    })
    .await;
    kube.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standbys_acknowledgements_never_feed_the_watchdog() {
    let (kube, hb, pin) = world("worker-2", hello::AUDIENCE, Leadership::never()).await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "token-worker-2").unwrap();
    let dog = RecordingWatchdog::new("iTCO_wdt", Duration::from_secs(10), true);
    let (status, stop, run) = spawn(options(&hb, pin, &token, dog.clone()));
    eventually("acknowledged", || status.lock().unwrap().acknowledged >= 3).await;
    assert_eq!(
        dog.recorded().feeds,
        0,
        "a standby's acknowledgement is no basis"
    );
    // Feeding never allowed: never armed, and the beats say so.
    assert_eq!(status.lock().unwrap().armed, None);
    // The standby keeps the table all the same.
    assert!(hb.with_table(|t| {
        t.companion("worker-2")
            .is_some_and(|c| c.beats >= 3 && c.watchdog == WatchdogState::None)
    }));
    stop.send(()).unwrap();
    assert_eq!(
        run.await.unwrap().unwrap(),
        None,
        "never armed: nothing to disarm"
    );
    assert!(!dog.recorded().disarmed);
    kube.shutdown().await;
}

/// A node still marked when its companion starts (its machine was reset for that mark,
/// and the leader still says so): feeding is not allowed, so the watchdog is not
/// armed, and the machine is not reset again. Once the leader lifts the mark (the
/// node recovered), it arms and feeds: seed 4610, where it never did, and the node's
/// next loss with its BMC could not be fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_companion_marked_before_it_may_feed_arms_its_watchdog_once_the_mark_is_lifted() {
    let (kube, hb, pin) = world("worker-5", hello::AUDIENCE, Leadership::always()).await;
    hb.set_marked("worker-5", true);
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "token-worker-5").unwrap();
    let dog = RecordingWatchdog::new("iTCO_wdt", Duration::from_secs(10), true);
    let (status, stop, run) = spawn(options(&hb, pin, &token, dog.clone()));
    eventually("told", || {
        let s = status.lock().unwrap();
        s.marked && s.acknowledged >= 3
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(dog.recorded().feeds, 0);
    assert_eq!(status.lock().unwrap().armed, None);
    assert_eq!(
        hb.with_table(|t| t.companion("worker-5").map(|c| c.watchdog)),
        Some(WatchdogState::None)
    );
    // Lifted: armed at the first acknowledgement without the mark, and fed.
    hb.set_marked("worker-5", false);
    eventually("armed and fed", || {
        let s = status.lock().unwrap();
        !s.marked && s.armed.is_some() && dog.recorded().feeds >= 1
    })
    .await;
    eventually("the beats say armed", || {
        matches!(
            hb.with_table(|t| t.companion("worker-5").map(|c| c.watchdog)),
            Some(WatchdogState::Armed { .. })
        )
    })
    .await;
    stop.send(()).unwrap();
    assert_eq!(
        run.await.unwrap().unwrap(),
        Some(Disarmed::StillRunning),
        "armed now, and this device is nowayout"
    );
    kube.shutdown().await;
}

/// The watchdog is armed at the first acknowledgement that lets it be fed, and the
/// beats say `None` until then, `Armed` from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_is_armed_when_feeding_is_first_allowed() {
    let (switch, leadership) = Leadership::switched(false);
    let (kube, hb, pin) = world("worker-6", hello::AUDIENCE, leadership).await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "token-worker-6").unwrap();
    let dog = RecordingWatchdog::new("iTCO_wdt", Duration::from_secs(10), false);
    let (status, stop, run) = spawn(options(&hb, pin, &token, dog.clone()));
    eventually("acknowledged by a standby", || {
        status.lock().unwrap().acknowledged >= 3
    })
    .await;
    assert_eq!(status.lock().unwrap().armed, None);
    assert_eq!(
        hb.with_table(|t| t.companion("worker-6").map(|c| c.watchdog)),
        Some(WatchdogState::None)
    );
    switch.set(true);
    eventually("armed and fed", || dog.recorded().feeds >= 3).await;
    assert_eq!(
        status.lock().unwrap().armed,
        Some(("iTCO_wdt".to_string(), Duration::from_secs(10)))
    );
    eventually("the beats say armed", || {
        hb.with_table(|t| t.companion("worker-6").map(|c| c.watchdog))
            == Some(WatchdogState::Armed {
                granted: Duration::from_secs(10),
                device: nodefence::watchdog::wire::DeviceName::new("iTCO_wdt"),
            })
    })
    .await;
    stop.send(()).unwrap();
    assert_eq!(run.await.unwrap().unwrap(), Some(Disarmed::Stopped));
    assert!(dog.recorded().disarmed);
    kube.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_for_another_audience_or_none_opens_no_session() {
    let (kube, hb, _pin) = world(
        "worker-3",
        "https://kubernetes.default.svc",
        Leadership::always(),
    )
    .await;
    let http = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    let url = format!("https://127.0.0.1:{}{}", hb.addr().port(), hello::PATH);
    let refused = http
        .post(&url)
        .bearer_auth("token-worker-3")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let body = refused.text().await.unwrap();
    assert!(
        body.contains("did not authenticate") && !body.contains("token-worker-3"),
        "{body}"
    );
    let none = http.post(&url).send().await.unwrap();
    assert_eq!(none.status(), 401);
    assert!(hb.with_table(|t| t.companions().count()) == 0);
    kube.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_oversized_datagrams_get_nothing_back() {
    let (kube, hb, _pin) = world("worker-4", hello::AUDIENCE, Leadership::always()).await;
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.connect(hb.addr()).await.unwrap();
    let mut beat_like = b"NFWD\x01\x01".to_vec();
    beat_like.resize(100, 7);
    for datagram in [vec![0u8; 10], vec![0xff; 2000], beat_like] {
        socket.send(&datagram).await.unwrap();
    }
    let mut buf = [0u8; 512];
    let answer = tokio::time::timeout(Duration::from_millis(500), socket.recv(&mut buf)).await;
    assert!(answer.is_err(), "no answer to garbage");
    assert_eq!(hb.with_table(|t| t.companions().count()), 0);
    kube.shutdown().await;
}

/// Every replica gets a session and the beats: the companion looks the name up (here:
/// given the two addresses, `localhost` on 127.0.0.1 and 127.0.0.2, one port), the
/// standby's table is as current as the leader's, and only the leader's
/// acknowledgements feed the watchdog. A clean stop reaches both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_companion_beats_to_every_replica_and_the_standby_keeps_the_table_too() {
    let (kube, leader, pin) = world("worker-1", hello::AUDIENCE, Leadership::always()).await;
    let port = leader.addr().port();
    // The standby: another replica, with the same certificate (a Secret both mount).
    let standby = heartbeat::start(
        Settings {
            listen: format!("127.0.0.2:{port}").parse().unwrap(),
            companion_user: COMPANION.into(),
            timing: Timing::default(),
            heartbeat_interval: Duration::from_millis(100),
            heartbeat_timeout: Duration::from_millis(500),
            metrics: None,
        },
        client(&kube).await,
        leader_tls(),
        Leadership::never(),
        std::future::pending(),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "token-worker-1\n").unwrap();
    let dog = RecordingWatchdog::new("iTCO_wdt", Duration::from_secs(10), false);
    let mut opts = options(&leader, pin, &token, dog.clone());
    opts.nodefence = format!("https://localhost:{port}").parse().unwrap();
    opts.replicas = Some(vec![leader.addr(), standby.addr()]);
    let (status, stop, run) = spawn(opts);
    let beats = |hb: &Heartbeat| hb.with_table(|t| t.companion("worker-1").map_or(0, |c| c.beats));
    eventually("both replicas hear the beats, the watchdog fed", || {
        beats(&leader) >= 3 && beats(&standby) >= 3 && dog.recorded().feeds >= 3
    })
    .await;
    assert_eq!(
        standby.with_table(|t| t.companion("worker-1").and_then(|c| c.last_ack)),
        None,
        "a standby never acknowledges as leader"
    );
    assert!(status.lock().unwrap().feeding);
    let _ = stop.send(());
    run.await.unwrap().unwrap();
    // The last beat is a datagram: each replica takes it at its next batch.
    eventually("a clean stop reaches every replica", || {
        [&leader, &standby].iter().all(|hb| {
            hb.with_table(|t| t.companion("worker-1").map(|c| c.watchdog))
                == Some(WatchdogState::Stopping)
        })
    })
    .await;
}

/// A clean stop that one replica does not acknowledge (it cannot be reached): that
/// replica may still hold the watchdog armed and release the node on it, so the
/// watchdog is left running (closed without the magic character) and the kept state
/// stays for the successor (seed 1971: a companion restarted while its uplink was down
/// disarmed, the leader never heard "stopping", and released the running machine on
/// a watchdog that no longer counted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_not_every_replica_acknowledged_leaves_the_watchdog_running() {
    let (kube, hb, pin) = world("worker-1", hello::AUDIENCE, Leadership::always()).await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "token-worker-1\n").unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let dog = RecordingWatchdog::new("iTCO_wdt", Duration::from_secs(10), false);
    // A second replica no one answers for (its hello fails: no session).
    let nowhere = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut options = options(&hb, pin, &token, dog.clone());
    options.replicas = Some(vec![hb.addr(), nowhere]);
    options.state_dir = Some(state.clone());
    let (status, stop, run) = spawn(options);
    eventually("acknowledged and fed", || {
        status.lock().unwrap().acknowledged >= 3 && dog.recorded().feeds >= 3
    })
    .await;
    assert!(nodefence::companion::state::load(&state).unwrap().is_some());
    stop.send(()).unwrap();
    let disarmed = run.await.unwrap().unwrap();
    assert_eq!(disarmed, Some(Disarmed::StillRunning));
    assert!(!dog.recorded().disarmed, "no magic close");
    let kept = nodefence::companion::state::load(&state).unwrap();
    assert_eq!(
        kept.map(|k| k.node).as_deref(),
        Some("worker-1"),
        "kept for the successor"
    );
    // The replica that answered was told.
    assert_eq!(
        hb.with_table(|t| t.companion("worker-1").map(|c| c.watchdog)),
        Some(WatchdogState::Stopping)
    );
    kube.shutdown().await;
}

/// The beats' loop reads its clock once a batch: after the batch is in hand, never
/// while it waits for one. A beat that comes after the loop has waited is recorded,
/// and acknowledged, no earlier than it was sent: the watchdog level's wait counts
/// from the last acknowledgement, and one recorded early would release early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledgement_is_recorded_no_earlier_than_the_beat_it_answers_arrived() {
    use nodefence::watchdog::feeding::Reaching;
    use nodefence::watchdog::session::CompanionEnd;
    let (_kube, hb, _pin) = world("worker-1", hello::AUDIENCE, Leadership::always()).await;
    let (id, key) = hb.open_session("worker-1").unwrap();
    let mut end = CompanionEnd::new(key, id, Duration::from_secs(2));
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.connect(hb.addr()).await.unwrap();
    for round in 0..3 {
        // The loop idles: waiting for a datagram (its read wakes every 200 ms).
        tokio::time::sleep(Duration::from_millis(350)).await;
        let before = hb.now();
        let beat = end.beat(before, Reaching::default(), WatchdogState::None);
        socket.send(&beat).await.unwrap();
        let mut buf = [0u8; 512];
        let n = tokio::time::timeout(Duration::from_secs(5), socket.recv(&mut buf))
            .await
            .expect("an acknowledgement")
            .unwrap();
        let after = hb.now();
        let acknowledged = end.acknowledged(&buf[..n], after).unwrap();
        assert!(acknowledged.leader, "round {round}");
        let seen = hb.with_table(|t| t.companion("worker-1").cloned()).unwrap();
        let (last_beat, last_ack) = (seen.last_beat.unwrap(), seen.last_ack.unwrap());
        assert!(
            before <= last_ack && last_ack <= after,
            "round {round}: the acknowledgement recorded at {last_ack:?}, the beat sent at \
             {before:?}, its acknowledgement received at {after:?}"
        );
        assert_eq!(last_beat, last_ack, "round {round}");
    }
}
