//! The feeding rule's third basis end to end: three real companions (`companion::run`,
//! watchdogs in memory) beating to nodefence's real listener, reading their Nodes from
//! fake-kube with their own token, and asking each other over UDP (`--peers`) when
//! neither answers. What is asserted is what each watchdog saw:
//! - the whole control plane out (no leader, no API server): every companion goes on
//!   feeding, on its peers' answers, without a gap;
//! - one node cut off alone (the others still read the API server): its peers answer
//!   "the API server", no majority, and it stops feeding;
//! - the whole control plane out and one node cut from its peers too: the two that hear
//!   each other are a majority of three and feed; the third stops;
//! - a question under a key no replica gave, or from an address the peers' lookup does
//!   not list, gets no answer.
//!
//! Who answered (issue 52, item 4): in a cluster of five Nodes, three with a
//! companion, worker-1 feeds on its peers only if two other nodes say "neither". It
//! hears one, worker-2, and an attacker tries to make that two: worker-2's genuine
//! answer replayed from other ports, or sent from addresses the lookup does not list;
//! a second companion process on worker-2; answers minted by worker-3, which holds its
//! own state (its key, its credential, every peer key). Counted by node, under a
//! credential only the node's own key can sign for, from listed addresses only:
//! worker-1 stops feeding each time.
//!
//! Times are bounds, never exact.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use k8s_openapi::api::core::v1::Node;
use kube::api::PostParams;
use nodefence::cluster::leader::{Leadership, LeadershipSwitch};
use nodefence::companion::api::ApiAccess;
use nodefence::companion::peers::PeerSource;
use nodefence::companion::{self, Options, Status, WatchdogChoice};
use nodefence::heartbeat::{self, Heartbeat, Settings, hello};
use nodefence::watchdog::device::RecordingWatchdog;
use nodefence::watchdog::feeding::Basis;
use nodefence::watchdog::timing::Timing;
use nodefence::watchdog::wire::{self, Answer, BootId, Credential, Key, Question, SigningKey};
use nodefence_mocks::kube::authz::Policy;
use nodefence_mocks::kube::{BoundToken, FakeKube, FakeKubeHandle};
use tokio::time::Instant;

const NODES: [&str; 3] = ["worker-1", "worker-2", "worker-3"];
// The listener's certificate, the companions' identity and timing: as companion_api's.
use crate::companion_api::{API_TOKEN, BOOT, COMPANION, ISOLATION, certificate, client_from};

/// fake-kube with the companions' grant, their bound tokens and the three Nodes.
async fn cluster() -> (FakeKubeHandle, kube::Client) {
    let rbac = crate::deploy_common::companion_rbac("nodefence");
    let kube = FakeKube::builder()
        .identity(
            API_TOKEN,
            COMPANION,
            Policy::for_service_account(&rbac, "nodefence", "nodefence-companion"),
        )
        .start()
        .await
        .unwrap();
    for node in NODES {
        kube.issue_token(BoundToken {
            token: format!("token-{node}"),
            user: COMPANION.into(),
            audiences: vec![hello::AUDIENCE.into()],
            pod: Some((format!("nodefence-companion-{node}"), format!("pod-{node}"))),
            node: Some((node.into(), format!("uid-{node}"))),
        });
    }
    let admin = client_from(&kube.kubeconfig_yaml()).await;
    for node in NODES {
        kube::Api::<Node>::all(admin.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(serde_json::json!({"metadata": {"name": node}})).unwrap(),
            )
            .await
            .unwrap();
    }
    (kube, admin)
}

struct Companion {
    dog: RecordingWatchdog,
    status: Arc<Mutex<Status>>,
    run: tokio::task::JoinHandle<anyhow::Result<Option<nodefence::watchdog::device::Disarmed>>>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// What it takes to start a companion (again, after a crash).
struct Recipe {
    nodefence: String,
    token: std::path::PathBuf,
    dog: RecordingWatchdog,
    /// The API server it reads its Node from (a client made from it never fails).
    api_kubeconfig: String,
    peers: Vec<SocketAddr>,
    state_dir: Option<std::path::PathBuf>,
}

impl Recipe {
    async fn spawn(&self, socket: tokio::net::UdpSocket) -> Companion {
        let options = Options {
            nodefence: self.nodefence.parse().unwrap(),
            tls: nodefence::config::TlsSettings {
                fingerprint: Some(certificate().1),
                ..Default::default()
            },
            token_file: self.token.clone(),
            watchdog: WatchdogChoice::Given(Box::new(self.dog.clone())),
            replicas: None,
            api: Some(ApiAccess {
                client: client_from(&self.api_kubeconfig).await,
            }),
            peers: Some((socket, PeerSource::Fixed(self.peers.clone()))),
            state_dir: self.state_dir.clone(),
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
        Companion {
            dog: self.dog.clone(),
            status,
            run,
            _stop: stop,
        }
    }
}

impl Companion {
    fn status(&self) -> Status {
        self.status.lock().unwrap().clone()
    }

    fn feeds(&self) -> u64 {
        self.dog.recorded().feeds
    }
}

/// Who a companion is told its peers are.
#[derive(Debug, Clone, Copy)]
enum Peer {
    /// Companion `i`'s peer address.
    Companion(usize),
    /// Another address (an attacker's socket, a second process's).
    At(SocketAddr),
}

/// The listener, fake-kube, and three companions beating and asking each other.
struct World {
    /// The API server the companions read their Nodes from; node 0's may be its own.
    kube: Option<FakeKubeHandle>,
    own_kube: Option<FakeKubeHandle>,
    switch: LeadershipSwitch,
    _hb: Heartbeat,
    companions: Vec<Companion>,
    recipes: Vec<Recipe>,
    peer_addrs: Vec<SocketAddr>,
    _dir: tempfile::TempDir,
}

/// How the world starts.
#[derive(Default)]
struct Start {
    /// Node 0 reads its Node from an API server of its own (to cut it off alone).
    own_api_for_first: bool,
    /// Node 0 is told a peer address where no one listens (cut from its peers).
    first_cut_from_peers: bool,
    /// Each companion keeps its state (`--state-dir`).
    state_dirs: bool,
    /// The cluster's Nodes, as the leader's Node watch would count them (`None`: the
    /// companions'): the peers' majority is of this many.
    cluster: Option<usize>,
    /// Whom companion `i` is told its peers are (the others: every companion, itself
    /// included, as a headless Service lists them).
    peers: Vec<(usize, Vec<Peer>)>,
}

impl World {
    async fn start(start: Start) -> Self {
        nodefence::tls::install_crypto_provider();
        let (kube, admin) = cluster().await;
        let own = if start.own_api_for_first {
            Some(cluster().await.0)
        } else {
            None
        };
        let (switch, leadership) = Leadership::switched(true);
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
        // As the leader's term sets it: every node's policy has the watchdog level on.
        hb.set_watchdog_nodes(NODES.iter().map(|n| n.to_string()).collect());
        if let Some(nodes) = start.cluster {
            hb.set_nodes_in_cluster(nodes);
        }
        let dir = tempfile::tempdir().unwrap();
        // Every companion's peer socket first: each is told the others' addresses.
        let mut sockets = Vec::new();
        for _ in NODES {
            sockets.push(
                tokio::net::UdpSocket::bind("127.0.0.1:0".parse::<SocketAddr>().unwrap())
                    .await
                    .unwrap(),
            );
        }
        let peer_addrs: Vec<SocketAddr> = sockets.iter().map(|s| s.local_addr().unwrap()).collect();
        // An address no one listens on.
        let nowhere = {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            s.local_addr().unwrap()
        };
        let mut companions = Vec::new();
        let mut recipes = Vec::new();
        for (i, (node, socket)) in NODES.iter().zip(sockets).enumerate() {
            let token = dir.path().join(format!("token-{node}"));
            std::fs::write(&token, format!("token-{node}\n")).unwrap();
            let api_kube = match (&own, i) {
                (Some(own), 0) => own,
                _ => &kube,
            };
            let state_dir = start.state_dirs.then(|| {
                let d = dir.path().join(format!("state-{node}"));
                std::fs::create_dir(&d).unwrap();
                d
            });
            // Its own address is among its peers, as a headless Service lists it.
            let told = start.peers.iter().find(|(j, _)| *j == i).map(|(_, p)| {
                p.iter()
                    .map(|p| match p {
                        Peer::Companion(j) => peer_addrs[*j],
                        Peer::At(addr) => *addr,
                    })
                    .collect()
            });
            let peers = match told {
                Some(told) => told,
                None if i == 0 && start.first_cut_from_peers => vec![nowhere],
                None => peer_addrs.clone(),
            };
            let recipe = Recipe {
                nodefence: format!("https://127.0.0.1:{}", hb.addr().port()),
                token,
                dog: RecordingWatchdog::new("iTCO_wdt", Duration::from_secs(10), false),
                api_kubeconfig: api_kube.kubeconfig_yaml_for(API_TOKEN),
                peers,
                state_dir,
            };
            companions.push(recipe.spawn(socket).await);
            recipes.push(recipe);
        }
        let w = Self {
            kube: Some(kube),
            own_kube: own,
            switch,
            _hb: hb,
            companions,
            recipes,
            peer_addrs,
            _dir: dir,
        };
        eventually(
            "every companion armed and fed on the leader's answer",
            Duration::from_secs(20),
            || {
                w.companions.iter().all(|c| {
                    let s = c.status();
                    s.basis == Some(Basis::Leader) && s.armed.is_some() && c.feeds() >= 3
                })
            },
        )
        .await;
        w
    }

    /// Waits until every companion feeds on `basis`.
    async fn all_feeding_on(&self, basis: Basis, within: Duration) {
        eventually(
            &format!("every companion feeding on {basis:?}"),
            within,
            || {
                self.companions
                    .iter()
                    .all(|c| c.status().basis == Some(basis))
            },
        )
        .await;
    }

    /// Companions `which` are fed without a gap for `window` on `basis`.
    async fn fed_throughout(&self, which: &[usize], window: Duration, basis: Basis) {
        let deadline = Instant::now() + window;
        let mut last: Vec<(u64, Instant)> = which
            .iter()
            .map(|i| (self.companions[*i].feeds(), Instant::now()))
            .collect();
        while Instant::now() < deadline {
            for (k, i) in which.iter().enumerate() {
                let c = &self.companions[*i];
                let s = c.status();
                assert!(
                    s.feeding && s.basis == Some(basis),
                    "{} fed throughout on {basis:?}: {s:?}",
                    NODES[*i]
                );
                let feeds = c.feeds();
                if feeds > last[k].0 {
                    last[k] = (feeds, Instant::now());
                }
                assert!(
                    last[k].1.elapsed() < Duration::from_millis(500),
                    "{}'s watchdog fed all along",
                    NODES[*i]
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Companion `i` stops feeding within the isolation timeout and a round, and is
    /// not fed for `window` after.
    async fn stops_feeding(&self, i: usize, window: Duration) {
        let c = &self.companions[i];
        eventually(
            &format!("{} no longer fed", NODES[i]),
            ISOLATION + Duration::from_secs(2),
            || !c.status().feeding,
        )
        .await;
        let before = c.feeds();
        let deadline = Instant::now() + window;
        while Instant::now() < deadline {
            assert!(!c.status().feeding, "{}: {:?}", NODES[i], c.status());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(c.feeds(), before, "{} not fed", NODES[i]);
    }

    /// Kills companion `i` (no clean stop: its watchdog stays armed, its state kept)
    /// and starts its successor on the same peer address, with the kept state or
    /// (`keep` false) without.
    async fn crash_and_restart(&mut self, i: usize, keep: bool) {
        self.companions[i].run.abort();
        let _ = (&mut self.companions[i].run).await;
        if !keep && let Some(dir) = &self.recipes[i].state_dir {
            std::fs::remove_dir_all(dir).unwrap();
            std::fs::create_dir(dir).unwrap();
        }
        // The killed one's peer socket closes once its aborted tasks are dropped.
        let deadline = Instant::now() + Duration::from_secs(5);
        let socket = loop {
            match tokio::net::UdpSocket::bind(self.peer_addrs[i]).await {
                Ok(s) => break s,
                Err(e) if Instant::now() >= deadline => {
                    panic!("rebinding {}: {e}", self.peer_addrs[i])
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        self.companions[i] = self.recipes[i].spawn(socket).await;
    }

    /// A second companion process of node `i` (its token, a watchdog of its own, no
    /// state kept), on `socket`, told every companion's address.
    async fn second_process_of(&self, i: usize, socket: tokio::net::UdpSocket) -> Companion {
        let first = &self.recipes[i];
        Recipe {
            nodefence: first.nodefence.clone(),
            token: first.token.clone(),
            dog: RecordingWatchdog::new("iTCO_wdt", Duration::from_secs(10), false),
            api_kubeconfig: first.api_kubeconfig.clone(),
            peers: self.peer_addrs.clone(),
            state_dir: None,
        }
        .spawn(socket)
        .await
    }

    /// What companion `i` keeps (`Start::state_dirs`): what an attacker on its node
    /// holds.
    fn kept(&self, i: usize) -> companion::state::Kept {
        let dir = self.recipes[i].state_dir.as_ref().expect("a state dir");
        companion::state::load(dir).unwrap().expect("a state kept")
    }

    /// The leader's answers stop (its replica no longer leads), and the API server
    /// the companions read goes away.
    async fn control_plane_out(&mut self) {
        self.switch.set(false);
        self.kube.take().unwrap().shutdown().await;
    }
}

async fn eventually(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Nothing asked of the peers while the leader answers; the whole control plane out:
/// every companion feeds on its peers' answers, without a gap, and not one is reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_of_the_whole_control_plane_resets_no_machine() {
    let mut w = World::start(Start::default()).await;
    w.fed_throughout(&[0, 1, 2], ISOLATION, Basis::Leader).await;
    for c in &w.companions {
        let s = c.status();
        assert_eq!((s.peer_rounds, s.peers_known), (0, 3), "{s:?}");
    }
    w.control_plane_out().await;
    w.all_feeding_on(Basis::Peers, ISOLATION * 2).await;
    w.fed_throughout(&[0, 1, 2], ISOLATION * 3, Basis::Peers)
        .await;
    for c in &w.companions {
        let s = c.status();
        assert!(s.peer_rounds >= 3 && s.peer_answers >= 4, "{s:?}");
        assert!(!s.marked);
    }
    // Fed all along: no gap at the switch from the API server to the peers either.
    for (i, c) in w.companions.iter().enumerate() {
        let gap = c.dog.recorded().longest_gap;
        assert!(
            gap < Duration::from_secs(2),
            "{}: the watchdog went unfed for {gap:?}",
            NODES[i]
        );
    }
}

/// One node cut off alone from the leader and the API server: the others still read
/// theirs and answer so; no majority says "neither", and it stops feeding (its
/// watchdog would reset it) while they go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_alone_is_not_kept_alive_by_its_peers() {
    let mut w = World::start(Start {
        own_api_for_first: true,
        ..Start::default()
    })
    .await;
    w.switch.set(false);
    w.own_kube.take().unwrap().shutdown().await;
    w.stops_feeding(0, ISOLATION * 2).await;
    let s = w.companions[0].status();
    assert!(
        s.peer_rounds >= 2 && s.peer_answers >= 2,
        "it asked and its peers answered: {s:?}"
    );
    w.fed_throughout(&[1, 2], ISOLATION, Basis::ApiServer).await;
}

/// The whole control plane out and one node cut from its peers too: the two that hear
/// each other are a strict majority of three and feed; the third hears no one and
/// stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_of_the_cluster_feeds_on_its_peers_and_a_minority_does_not() {
    let mut w = World::start(Start {
        first_cut_from_peers: true,
        ..Start::default()
    })
    .await;
    w.control_plane_out().await;
    w.stops_feeding(0, ISOLATION * 2).await;
    assert_eq!(w.companions[0].status().peer_answers, 0);
    w.fed_throughout(&[1, 2], ISOLATION * 2, Basis::Peers).await;
}

/// A question sealed under a key no replica gave, and garbage, get nothing back, even
/// from an address the peers' lookup lists; one under the replica's key gets an
/// answer from there, and none from an address it does not list (an answer is ten
/// times a question's size: no reflection at a stranger's address).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_under_another_key_or_from_an_unlisted_address_gets_no_answer() {
    let probe = udp().await;
    let stranger = udp().await;
    let listed = |i| {
        let mut peers: Vec<Peer> = (0..NODES.len()).map(Peer::Companion).collect();
        peers.push(Peer::At(probe.local_addr().unwrap()));
        (i, peers)
    };
    let w = World::start(Start {
        state_dirs: true,
        peers: (0..NODES.len()).map(listed).collect(),
        ..Start::default()
    })
    .await;
    let forged = Question { from: 9, nonce: 7 }.seal(&Key([0x5a; 32]));
    for to in &w.peer_addrs {
        probe.send_to(&forged, to).await.unwrap();
        probe.send_to(b"garbage", to).await.unwrap();
        probe.send_to(&[0u8; 4096], to).await.unwrap();
    }
    let answer = next_answer(&probe, Duration::from_millis(800)).await;
    assert!(answer.is_none(), "something answered: {answer:?}");
    // Under the replica's peer key (worker-3 holds it): answered at the listed address
    // only, by the node each companion is (once its first isolation timeout is over).
    tokio::time::sleep(ISOLATION).await;
    let key = peer_key(&w.kept(2));
    let question = Question { from: 9, nonce: 8 }.seal(&key);
    for to in &w.peer_addrs {
        stranger.send_to(&question, to).await.unwrap();
    }
    let answer = next_answer(&stranger, Duration::from_millis(800)).await;
    assert!(answer.is_none(), "an unlisted address answered: {answer:?}");
    probe.send_to(&question, w.peer_addrs[1]).await.unwrap();
    let (answer, from) = next_answer(&probe, Duration::from_secs(2))
        .await
        .expect("worker-2 answers a listed address");
    assert_eq!(from, w.peer_addrs[1]);
    assert_eq!((answer.node.as_str(), answer.nonce), ("worker-2", 8));
    // None of it stopped a companion: each is fed again on the leader's answer.
    for (i, c) in w.companions.iter().enumerate() {
        let before = c.feeds();
        eventually(
            &format!("{} fed on the leader's answer", NODES[i]),
            ISOLATION * 2,
            || c.status().basis == Some(Basis::Leader) && c.feeds() >= before + 3,
        )
        .await;
    }
}

/// An answer as read off the wire: the node its credential names, and its nonce.
#[derive(Debug)]
struct Heard {
    node: String,
    nonce: u64,
}

/// The next answer `socket` receives within `within`, and where from. A question is
/// passed over: the probe is among the peers every companion was told, so one whose
/// leader and API server both fell silent (a loaded machine's stall) asks it too.
async fn next_answer(
    socket: &tokio::net::UdpSocket,
    within: Duration,
) -> Option<(Heard, SocketAddr)> {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 1024];
    loop {
        let (len, from) = tokio::time::timeout_at(deadline, socket.recv_from(&mut buf))
            .await
            .ok()?
            .unwrap();
        match Answer::parse(&buf[..len]) {
            Ok(heard) => {
                let answer = heard.answer;
                let node = answer.credential.node().to_string();
                return Some((
                    Heard {
                        node,
                        nonce: answer.nonce,
                    },
                    from,
                ));
            }
            Err(_) => assert!(
                len < wire::ANSWER_LEN,
                "{len} bytes from {from} that are no answer"
            ),
        }
    }
}

/// A UDP socket on the loopback, at a port of its own.
async fn udp() -> Arc<tokio::net::UdpSocket> {
    Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap())
}

/// The peer key a companion kept (the one replica's).
fn peer_key(kept: &companion::state::Kept) -> Key {
    kept.replicas
        .values()
        .next()
        .expect("a replica's keys")
        .peer
        .clone()
}

/// Tasks aborted when dropped (an attacker's, stopped with its test).
struct Tasks(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// An attacker that relays: what worker-1 asks at any socket of `asked` (its lookup
/// lists them) is forwarded from `via` to each of `to` (whose lookups list `via`), and
/// each answer `via` gets back is sent to worker-1 (at `target`) from every socket in
/// `send_from` as it is then. Counts the answers it got back.
struct Relay {
    send_from: Arc<Mutex<Vec<Arc<tokio::net::UdpSocket>>>>,
    answers: Arc<std::sync::atomic::AtomicUsize>,
    _tasks: Tasks,
}

impl Relay {
    fn start(
        asked: &[Arc<tokio::net::UdpSocket>],
        via: Arc<tokio::net::UdpSocket>,
        to: Vec<SocketAddr>,
        target: SocketAddr,
        send_from: Vec<Arc<tokio::net::UdpSocket>>,
    ) -> Self {
        let send_from = Arc::new(Mutex::new(send_from));
        let answers = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for socket in asked {
            let (socket, via, to) = (socket.clone(), via.clone(), to.clone());
            tasks.push(tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok((len, _)) = socket.recv_from(&mut buf).await {
                    if wire::kind(&buf[..len]) == Some(wire::QUESTION_KIND) {
                        for peer in &to {
                            let _ = via.send_to(&buf[..len], peer).await;
                        }
                    }
                }
            }));
        }
        let (from, counted) = (send_from.clone(), answers.clone());
        tasks.push(tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            while let Ok((len, _)) = via.recv_from(&mut buf).await {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let sockets = from.lock().unwrap().clone();
                for socket in sockets {
                    let _ = socket.send_to(&buf[..len], target).await;
                }
            }
        }));
        Self {
            send_from,
            answers,
            _tasks: Tasks(tasks),
        }
    }

    fn answers(&self) -> usize {
        self.answers.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// In a cluster of five Nodes (three with a companion), worker-1 is told `peers` and
/// worker-2 and worker-3 every companion and `listed_by_others`: worker-1 feeds on its
/// peers only if two other nodes say "neither".
async fn five_nodes(peers: Vec<Peer>, listed_by_others: Vec<Peer>, state_dirs: bool) -> World {
    let others = |i: usize| {
        let mut told: Vec<Peer> = (0..NODES.len()).map(Peer::Companion).collect();
        told.extend(listed_by_others.iter().copied());
        (i, told)
    };
    World::start(Start {
        cluster: Some(5),
        peers: vec![(0, peers), others(1), others(2)],
        state_dirs,
        ..Start::default()
    })
    .await
}

/// worker-1 and the addresses `at`, as its peers.
fn worker_1_and(at: &[Arc<tokio::net::UdpSocket>]) -> Vec<Peer> {
    let mut peers = vec![Peer::Companion(0)];
    peers.extend(at.iter().map(|s| Peer::At(s.local_addr().unwrap())));
    peers
}

/// One genuine "neither" of worker-2's, to worker-1's own question, replayed from four
/// ports its lookup lists (a Service listing stale ports, a dual-stack listener): one
/// node. Counted by source address it was four, a majority of five with worker-1, and
/// it fed (the whole control plane out, cut from all but one peer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_genuine_neither_replayed_from_other_ports_counts_once() {
    let ports = [udp().await, udp().await, udp().await, udp().await];
    let via = udp().await;
    let mut w = five_nodes(
        worker_1_and(&ports),
        vec![Peer::At(via.local_addr().unwrap())],
        false,
    )
    .await;
    let relay = Relay::start(
        &ports,
        via,
        vec![w.peer_addrs[1]],
        w.peer_addrs[0],
        ports.to_vec(),
    );
    w.control_plane_out().await;
    w.stops_feeding(0, ISOLATION * 2).await;
    assert!(
        relay.answers() >= 2,
        "worker-2 answered the relayed questions"
    );
    let s = w.companions[0].status();
    assert!(
        s.peer_rounds >= 3 && s.peer_answers >= 1,
        "worker-2's answer taken, once a round: {s:?}"
    );
}

/// worker-2's and worker-3's genuine "neither", sent from addresses worker-1's lookup
/// does not list: not counted (counted by source address, they were two, and it fed).
/// The same answers from a listed address are two nodes, and it feeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_from_an_address_not_among_the_peers_is_not_counted() {
    let asked = udp().await;
    let via = udp().await;
    let (unlisted_1, unlisted_2) = (udp().await, udp().await);
    let mut w = five_nodes(
        worker_1_and(std::slice::from_ref(&asked)),
        vec![Peer::At(via.local_addr().unwrap())],
        false,
    )
    .await;
    let relay = Relay::start(
        std::slice::from_ref(&asked),
        via,
        vec![w.peer_addrs[1], w.peer_addrs[2]],
        w.peer_addrs[0],
        vec![unlisted_1, unlisted_2],
    );
    w.control_plane_out().await;
    w.stops_feeding(0, ISOLATION * 2).await;
    assert!(relay.answers() >= 4, "both answered the relayed questions");
    let s = w.companions[0].status();
    assert!(s.peer_answers_refused >= 4 && s.peer_answers == 0, "{s:?}");
    // From the address worker-1 asked at, listed: worker-2 and worker-3, a majority.
    *relay.send_from.lock().unwrap() = vec![asked];
    eventually(
        "worker-1 feeding on the two nodes' answers",
        ISOLATION * 2,
        || w.companions[0].status().basis == Some(Basis::Peers),
    )
    .await;
    w.fed_throughout(&[0], ISOLATION, Basis::Peers).await;
}

/// Two companion processes on worker-2 (each with its own key and a credential for
/// worker-2, at two addresses worker-1's lookup lists) are one node (counted by
/// address they were two, and worker-1 fed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_companion_processes_of_one_node_count_once() {
    let second = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let second_addr = second.local_addr().unwrap();
    let mut w = five_nodes(
        vec![
            Peer::Companion(0),
            Peer::Companion(1),
            Peer::At(second_addr),
        ],
        Vec::new(),
        false,
    )
    .await;
    let other = w.second_process_of(1, second).await;
    eventually(
        "the second process said hello",
        Duration::from_secs(10),
        || other.status().node.as_deref() == Some("worker-2"),
    )
    .await;
    // It answers once its first isolation timeout is over.
    tokio::time::sleep(ISOLATION).await;
    w.control_plane_out().await;
    w.stops_feeding(0, ISOLATION * 2).await;
    let s = w.companions[0].status();
    assert!(s.peer_rounds >= 3 && s.peer_answers >= 1, "{s:?}");
    drop(other);
}

/// worker-3, holding its own state (its key, its credential, the peer key), answers
/// worker-1's questions from three addresses worker-1's lookup lists: as worker-2
/// (worker-2's credential, which each of its answers shows, signed with worker-3's
/// key), as a node it made up under an authority of its own, as the retired answer
/// sealed under the peer key, and as itself. Only the last counts: worker-3, once (any
/// of the others counted, and worker-1 fed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_minted_by_another_node_are_refused() {
    let at = [udp().await, udp().await, udp().await];
    let mut w = five_nodes(worker_1_and(&at), Vec::new(), true).await;
    let worker_3 = w.kept(2);
    let key = worker_3.signing_key.clone().expect("worker-3's key");
    let keys = worker_3.replicas.values().next().unwrap().clone();
    let own = keys.credential.clone().expect("worker-3's credential");
    let worker_2s = w
        .kept(1)
        .replicas
        .values()
        .next()
        .unwrap()
        .clone()
        .credential
        .unwrap();
    let made_up_authority = SigningKey::from_seed([0x66; 32]);
    let made_up = Credential::issue(
        &made_up_authority,
        key.public(),
        "worker-4",
        BootId::of("boot"),
        1,
    )
    .unwrap();
    let target = w.peer_addrs[0];
    let mut tasks = Vec::new();
    for (k, socket) in at.iter().enumerate() {
        let (socket, key, peer) = (socket.clone(), key.clone(), keys.peer.clone());
        let (own, worker_2s, made_up) = (own.clone(), worker_2s.clone(), made_up.clone());
        tasks.push(tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            while let Ok((len, _)) = socket.recv_from(&mut buf).await {
                let Ok(q) = Question::open(&buf[..len], &peer) else {
                    continue;
                };
                let answer = |credential: &Credential| Answer {
                    credential: credential.clone(),
                    nonce: q.nonce,
                    reach: 0,
                };
                let forged = match k {
                    0 => answer(&worker_2s).sign(&key),
                    1 => answer(&made_up).sign(&key),
                    _ => {
                        let mut body = q.from.to_be_bytes().to_vec();
                        body.extend_from_slice(&q.nonce.to_be_bytes());
                        body.push(0);
                        wire::seal_body(4, &body, &peer)
                    }
                };
                let _ = socket.send_to(&forged, target).await;
                let _ = socket.send_to(&answer(&own).sign(&key), target).await;
            }
        }));
    }
    let _tasks = Tasks(tasks);
    w.control_plane_out().await;
    w.stops_feeding(0, ISOLATION * 2).await;
    let s = w.companions[0].status();
    assert!(
        s.peer_answers >= 2 && s.peer_answers_refused >= 4,
        "worker-3 counted, once a round; the rest refused: {s:?}"
    );
}

/// A companion that crashes while the whole control plane is out leaves its
/// watchdog armed. Its successor, from the state its predecessor kept
/// (`--state-dir`), feeds it on its peers' answers before any hello, well within the
/// watchdog's timeout (seeds 176 and 243). With nothing kept it cannot: it waits for
/// a hello no replica can give, and its machine would be reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_companion_restarted_during_a_control_plane_outage_feeds_on_its_peers() {
    let mut w = World::start(Start {
        state_dirs: true,
        ..Start::default()
    })
    .await;
    w.control_plane_out().await;
    w.all_feeding_on(Basis::Peers, ISOLATION * 2).await;
    w.crash_and_restart(1, true).await;
    w.crash_and_restart(2, false).await;
    eventually(
        "worker-2's successor feeding on its peers",
        ISOLATION * 2,
        || w.companions[1].status().basis == Some(Basis::Peers),
    )
    .await;
    let s = w.companions[1].status();
    assert_eq!(s.node.as_deref(), Some("worker-2"), "{s:?}");
    // The successor answers no peer in its first isolation timeout (the leader may
    // still count its predecessor's hold until then): worker-1, whose majority of
    // three needs it, may go without for that long, far within its watchdog's 10 s.
    tokio::time::sleep(ISOLATION + Duration::from_secs(1)).await;
    w.fed_throughout(&[0, 1], ISOLATION * 2, Basis::Peers).await;
    for i in [0, 1] {
        let gap = w.companions[i].dog.recorded().longest_gap;
        assert!(
            gap < Duration::from_secs(5),
            "{}'s watchdog (10 s) unfed for {gap:?} across the crash",
            NODES[i]
        );
    }
    // Nothing kept: no node known, nothing fed since the crash.
    let s = w.companions[2].status();
    assert!(s.node.is_none() && !s.feeding, "{s:?}");
    let fed_before = w.companions[2].feeds();
    tokio::time::sleep(ISOLATION).await;
    assert_eq!(w.companions[2].feeds(), fed_before, "worker-3 unfed");
}
