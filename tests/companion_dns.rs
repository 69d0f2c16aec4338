//! Feeding never waits on the cluster's DNS (issue 52, item 1), end to end: real
//! companions (`companion::run`, the watchdog in memory), each a process of its own in a
//! node's network namespace with a pod's resolv.conf (`search
//! nodefence.svc.cluster.local svc.cluster.local cluster.local`, `options ndots:5`),
//! looking nodefence's replicas (`--nodefence
//! https://nodefence-companions.nodefence.svc:9440`) and their peers
//! (`nodefence-companion-peers.nodefence.svc:9441`) up by name through glibc and a real
//! dnsmasq playing the cluster's DNS; nodefence's real listener (its replica leads) and
//! fake-kube on the host, at the control plane's address ([`crate::common::netns`]).
//!
//! The cluster's DNS falls silent (SIGSTOP: every query times out, as with a dead
//! CoreDNS; one lookup then takes glibc 20 s: 5 s, twice, for the first name of the
//! search list and again for the name as given) for 45 s, longer than the 30 s after
//! which the companions look both names up again:
//! - the DNS alone: the leader answers every beat, and the watchdog is fed all along;
//! - the DNS with the whole control plane (nodefence's replica and the API server
//!   unreachable, their address gone): every companion goes on feeding on its peers'
//!   answers.
//!
//! What is asserted is what each watchdog saw (every feed, on a clock all namespaces
//! share): never more than [`MAX_GAP`] unfed (the companion decides every 100 ms; a
//! machine's watchdog would give it 10 s), but at the switch from the leader's answers
//! to the peers' ([`MAX_SWITCH_GAP`]). A companion process is this test binary again,
//! running [`companion_in_a_node`] (ignored unless the tests here start it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum_server::tls_rustls::RustlsConfig;
use k8s_openapi::api::core::v1::Node;
use kube::api::PostParams;
use nodefence::cluster::leader::{Leadership, LeadershipSwitch};
use nodefence::companion::api::ApiAccess;
use nodefence::companion::peers::PeerSource;
use nodefence::companion::{self, Options, Status, WatchdogChoice};
use nodefence::heartbeat::{self, Heartbeat, Settings, hello};
use nodefence::watchdog::device::RecordingWatchdog;
use nodefence::watchdog::timing::Timing;
use nodefence_mocks::kube::authz::Policy;
use nodefence_mocks::kube::{BoundToken, FakeKube, FakeKubeHandle};
use nodefence_mocks::tls::TlsMaterial;
use serde::{Deserialize, Serialize};

use crate::common::netns::{self, Dnsmasq, Lab};
use crate::companion_api::{API_TOKEN, BOOT, COMPANION, client_from};

/// The replicas' headless Service, as `--nodefence` names it, and its port.
const REPLICAS: &str = "nodefence-companions.nodefence.svc";
const REPLICAS_PORT: u16 = 9440;
/// The companions' headless Service, as `--peers` names it, and its port.
const PEERS: &str = "nodefence-companion-peers.nodefence.svc";
const PEERS_PORT: u16 = 9441;
/// How long the cluster's DNS stays silent: longer than the 30 s after which the
/// companions look the replicas and the peers up again (`RESOLVE_EVERY`).
const OUTAGE: Duration = Duration::from_secs(45);
/// The longest a watchdog may go unfed: the companion decides every 100 ms.
const MAX_GAP: Duration = Duration::from_secs(1);
/// The longest a watchdog may go unfed at the switch from the leader's answers to the
/// peers' (the whole control plane out): the peers are asked once the leader's
/// answer has run out (`isolation_timeout`, 2 s after the last beat it acknowledged),
/// at the companion's next round (every `isolation_timeout / 2`); one more round if a
/// peer's own hold on the leader had not yet run out when it was asked.
const MAX_SWITCH_GAP: Duration = Duration::from_millis(2500);
/// The watchdog's timeout: a machine unfed this long is reset.
const WATCHDOG: Duration = Duration::from_secs(10);
/// How long the companions have to say hello and feed at the start.
const START_WITHIN: Duration = Duration::from_secs(40);
/// The environment variable that makes [`companion_in_a_node`] a companion: the file of
/// its parameters.
const CHILD: &str = "NODEFENCE_COMPANION_DNS_CHILD";
/// A companion process ends by itself after this long (or once its parent is gone).
const CHILD_LIFETIME: Duration = Duration::from_secs(300);

/// One clock for this process and its children in other namespaces: the kernel's
/// boot clock (`/proc/uptime`, the same in every network namespace), read at a tick
/// of its hundredths once, then followed with this process's monotonic clock (the
/// two differ only across a suspend).
fn clock() -> Duration {
    on_clock(Instant::now())
}

/// An instant of this process, on [`clock`].
fn on_clock(instant: Instant) -> Duration {
    static ANCHOR: OnceLock<(Instant, Duration)> = OnceLock::new();
    let (at, uptime) = *ANCHOR.get_or_init(|| {
        let first = uptime_centiseconds();
        loop {
            let now = uptime_centiseconds();
            if now != first {
                return (Instant::now(), Duration::from_millis(now * 10));
            }
        }
    });
    (uptime + instant.saturating_duration_since(at))
        .saturating_sub(at.saturating_duration_since(instant))
}

fn uptime_centiseconds() -> u64 {
    let text = std::fs::read_to_string("/proc/uptime").unwrap();
    let first = text.split_whitespace().next().unwrap();
    let (s, cs) = first.split_once('.').unwrap();
    s.parse::<u64>().unwrap() * 100 + cs.parse::<u64>().unwrap()
}

/// What a companion process is told (a JSON file named by [`CHILD`]).
#[derive(Debug, Serialize, Deserialize)]
struct ChildParams {
    node: String,
    nodefence: String,
    ca_file: PathBuf,
    token_file: PathBuf,
    /// A kubeconfig for the API server, with the companion's token.
    kubeconfig: String,
    /// `--peers`, a name and a port; `None`: no peers.
    peers: Option<String>,
    peer_listen: SocketAddr,
    state_dir: PathBuf,
    /// Where it reports every feed and its status, one line each ([`Report`]).
    report: PathBuf,
}

/// The companion's options (the one place they are built: a field added to
/// [`Options`] is set here).
async fn companion_options(p: &ChildParams, watchdog: RecordingWatchdog) -> Options {
    let peers = match &p.peers {
        Some(name) => Some((
            tokio::net::UdpSocket::bind(p.peer_listen).await.unwrap(),
            name.parse::<PeerSource>().unwrap(),
        )),
        None => None,
    };
    Options {
        nodefence: p.nodefence.parse().unwrap(),
        // Its certificate is checked against the name looked up.
        tls: nodefence::config::TlsSettings {
            ca_file: Some(p.ca_file.clone()),
            ..Default::default()
        },
        token_file: p.token_file.clone(),
        watchdog: WatchdogChoice::Given(Box::new(watchdog)),
        // The name looked up, through the namespace's resolv.conf.
        replicas: None,
        api: Some(ApiAccess {
            client: client_from(&p.kubeconfig).await,
        }),
        peers,
        state_dir: Some(p.state_dir.clone()),
        // The system's resolver: glibc, the namespace's resolv.conf.
        resolver: nodefence::companion::Resolver::system(),
        realtime: false,
        boot_id: BOOT.into(),
        machine: nodefence::companion::machine::MachineKind::Physical,
    }
}

/// A companion, when a test of this module starts this binary in a node's namespace
/// with [`CHILD`] set; otherwise nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a companion in a node's network namespace: started by this module's tests"]
async fn companion_in_a_node() {
    let Some(file) = std::env::var_os(CHILD) else {
        return;
    };
    let _ = clock();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .try_init();
    let p: ChildParams = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    // The project's watchdog in memory: every feed is reported from its record.
    let dog = RecordingWatchdog::new("iTCO_wdt", WATCHDOG, false);
    let status = Arc::new(Mutex::new(Status::default()));
    report_from(&p.report, dog.clone(), status.clone());
    let options = companion_options(&p, dog).await;
    let parent = std::os::unix::process::parent_id();
    let started = Instant::now();
    let result = companion::run(options, status, async move {
        while std::os::unix::process::parent_id() == parent && started.elapsed() < CHILD_LIFETIME {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    eprintln!("{}: the companion ended: {result:?}", p.node);
}

/// Writes to `report`, from a thread of its own (nothing the companion's runtime does
/// delays it): a `feed` line for every feed of `dog` (sampled every 2 ms; feeds are
/// 100 ms apart), with when it was fed on [`clock`], and a `status` line every
/// 100 ms.
fn report_from(report: &Path, dog: RecordingWatchdog, status: Arc<Mutex<Status>>) {
    use std::io::Write as _;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(report)
        .unwrap();
    std::thread::spawn(move || {
        let mut feeds = 0;
        let mut told = Instant::now();
        loop {
            let r = dog.recorded();
            if r.feeds != feeds
                && let Some(at) = r.last_feed
            {
                let line = format!(
                    "feed {} {} {}\n",
                    on_clock(at).as_nanos(),
                    r.feeds,
                    r.longest_gap.as_nanos()
                );
                let _ = file.write_all(line.as_bytes());
                feeds = r.feeds;
            }
            if told.elapsed() >= Duration::from_millis(100) {
                told = Instant::now();
                let s = status.lock().unwrap_or_else(|e| e.into_inner()).clone();
                let line = format!(
                    "status {} acknowledged={} feeding={} basis={} armed={} marked={} \
                     api_reads={} peers_known={} peer_rounds={} peer_answers={}\n",
                    clock().as_nanos(),
                    s.acknowledged,
                    s.feeding,
                    s.basis.map_or("none", |b| b.as_str()),
                    s.armed.is_some(),
                    s.marked,
                    s.api_reads,
                    s.peers_known,
                    s.peer_rounds,
                    s.peer_answers
                );
                let _ = file.write_all(line.as_bytes());
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    });
}

/// A status line of a companion's report.
#[derive(Debug, Clone, Default)]
struct Seen {
    at: Duration,
    acknowledged: u64,
    feeding: bool,
    basis: String,
    armed: bool,
    marked: bool,
    api_reads: u64,
    peers_known: usize,
    peer_rounds: u64,
    peer_answers: u64,
}

/// A companion's report so far.
#[derive(Debug, Default)]
struct Report {
    /// When each feed seen was made ([`clock`]).
    feeds: Vec<Duration>,
    /// Feeds counted by the watchdog, and its own longest gap, at the last line.
    counted: u64,
    recorded_gap: Duration,
    seen: Vec<Seen>,
}

impl Report {
    fn read(path: &Path) -> Self {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let mut r = Report::default();
        // Only whole lines: the last may be half written.
        let whole = text.rsplit_once('\n').map_or("", |(w, _)| w);
        for line in whole.lines() {
            let mut words = line.split_whitespace();
            let kind = words.next().unwrap_or_default();
            let at = Duration::from_nanos(words.next().and_then(|w| w.parse().ok()).unwrap());
            match kind {
                "feed" => {
                    r.feeds.push(at);
                    r.counted = words.next().and_then(|w| w.parse().ok()).unwrap();
                    r.recorded_gap =
                        Duration::from_nanos(words.next().and_then(|w| w.parse().ok()).unwrap());
                }
                "status" => {
                    let mut s = Seen {
                        at,
                        ..Seen::default()
                    };
                    for pair in words {
                        let (k, v) = pair.split_once('=').unwrap();
                        match k {
                            "acknowledged" => s.acknowledged = v.parse().unwrap(),
                            "feeding" => s.feeding = v == "true",
                            "basis" => s.basis = v.to_string(),
                            "armed" => s.armed = v == "true",
                            "marked" => s.marked = v == "true",
                            "api_reads" => s.api_reads = v.parse().unwrap(),
                            "peers_known" => s.peers_known = v.parse().unwrap(),
                            "peer_rounds" => s.peer_rounds = v.parse().unwrap(),
                            "peer_answers" => s.peer_answers = v.parse().unwrap(),
                            _ => {}
                        }
                    }
                    r.seen.push(s);
                }
                other => panic!("{path:?}: a line of kind {other:?}"),
            }
        }
        r
    }

    fn last(&self) -> Seen {
        self.seen.last().cloned().unwrap_or_default()
    }

    /// The longest time without a feed within `from..to`: from the last feed before
    /// `from` to the next, between feeds, and from the last to `to`. Its start and
    /// length.
    fn longest_gap(&self, from: Duration, to: Duration) -> (Duration, Duration) {
        let mut last = self
            .feeds
            .iter()
            .rev()
            .find(|f| **f <= from)
            .copied()
            .unwrap_or(from);
        let mut worst = (last, Duration::ZERO);
        for &f in self.feeds.iter().filter(|f| **f > from && **f <= to) {
            if f - last > worst.1 {
                worst = (last, f - last);
            }
            last = f;
        }
        if to.saturating_sub(last) > worst.1 {
            worst = (last, to - last);
        }
        worst
    }

    /// The status lines within `from..=to`.
    fn seen_within(&self, from: Duration, to: Duration) -> impl Iterator<Item = &Seen> {
        self.seen.iter().filter(move |s| s.at >= from && s.at <= to)
    }

    /// The beats acknowledged within `from..=to` (by the status lines).
    fn acknowledged_within(&self, from: Duration, to: Duration) -> u64 {
        let mut within = self.seen_within(from, to);
        let first = within.next().map_or(0, |s| s.acknowledged);
        let last = within.last().map_or(first, |s| s.acknowledged);
        last - first
    }

    /// The longest time within `from..=to` in which no beat was acknowledged.
    fn longest_unacknowledged(&self, from: Duration, to: Duration) -> Duration {
        let mut worst = Duration::ZERO;
        let mut since: Option<(Duration, u64)> = None;
        for s in self.seen_within(from, to) {
            match since {
                Some((at, n)) if s.acknowledged == n => worst = worst.max(s.at - at),
                _ => since = Some((s.at, s.acknowledged)),
            }
        }
        worst
    }
}

/// A companion process in a node's namespace; killed when dropped.
struct Companion {
    node: String,
    addr: Ipv4Addr,
    child: Child,
    report: PathBuf,
    log: PathBuf,
}

impl Companion {
    fn report(&self) -> Report {
        Report::read(&self.report)
    }

    /// The last `n` lines of what it logged.
    fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for Companion {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The nodes, the cluster's DNS, nodefence's listener and fake-kube; dropped in this
/// order (the companions killed first, the namespaces deleted last).
struct World {
    companions: Vec<Companion>,
    dns: Dnsmasq,
    _hb: Heartbeat,
    _switch: LeadershipSwitch,
    _kube: FakeKubeHandle,
    lab: Lab,
    _dir: tempfile::TempDir,
}

const NODES: [&str; 3] = ["worker-1", "worker-2", "worker-3"];

impl World {
    /// `nodes` companions (with `--peers` when `peers`), each in its namespace,
    /// beating to nodefence's listener (its replica leads) and fed on its answers.
    /// `None`: skipped (no root, `ip` or dnsmasq).
    async fn start(nodes: usize, peers: bool) -> Option<Self> {
        let tools = netns::tools()?;
        let lab = match Lab::create(&tools, nodes) {
            Ok(lab) => lab,
            Err(e) => {
                return nodefence_mocks::peers::skip(
                    &format!("network namespaces ({e})"),
                    "run the tests as root, with CAP_NET_ADMIN and CAP_SYS_ADMIN",
                );
            }
        };
        nodefence::tls::install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        let cp = lab.control_plane();
        let node_addrs: Vec<Ipv4Addr> = lab.nodes.iter().map(|n| n.addr).collect();
        let dns = Dnsmasq::start(
            &tools,
            lab.dns(),
            &[
                (&format!("{REPLICAS}.cluster.local"), vec![cp]),
                (&format!("{PEERS}.cluster.local"), node_addrs.clone()),
            ],
            &dir.path().join("dnsmasq.log"),
        );
        // The pod's resolv.conf leads to dnsmasq, through the search list.
        let out = lab
            .command_in(0, "getent")
            .args(["ahosts", REPLICAS])
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(&cp.to_string()),
            "getent ahosts {REPLICAS} in {}: {out:?}",
            lab.nodes[0].netns
        );

        let nodes_named = &NODES[..nodes];
        let rbac = crate::deploy_common::companion_rbac("nodefence");
        let kube = FakeKube::builder()
            .listen(SocketAddr::from((cp, 0)))
            .identity(
                API_TOKEN,
                COMPANION,
                Policy::for_service_account(&rbac, "nodefence", "nodefence-companion"),
            )
            .start()
            .await
            .unwrap();
        let admin = client_from(&kube.kubeconfig_yaml()).await;
        for node in nodes_named {
            kube.issue_token(BoundToken {
                token: format!("token-{node}"),
                user: COMPANION.into(),
                audiences: vec![hello::AUDIENCE.into()],
                pod: Some((format!("nodefence-companion-{node}"), format!("pod-{node}"))),
                node: Some(((*node).into(), format!("uid-{node}"))),
            });
            kube::Api::<Node>::all(admin.clone())
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(serde_json::json!({"metadata": {"name": node}}))
                        .unwrap(),
                )
                .await
                .unwrap();
        }
        // A certificate for the Service's name, from a CA the companions trust.
        let tls =
            TlsMaterial::generate_for(&[REPLICAS, &format!("{REPLICAS}.cluster.local")]).unwrap();
        let ca_file = dir.path().join("ca.crt");
        std::fs::write(&ca_file, tls.ca_pem()).unwrap();
        let (switch, leadership) = Leadership::switched(true);
        let hb = heartbeat::start(
            Settings {
                listen: SocketAddr::from((cp, REPLICAS_PORT)),
                companion_user: COMPANION.into(),
                timing: Timing::default(),
                heartbeat_interval: Duration::from_millis(100),
                heartbeat_timeout: Duration::from_millis(500),
                metrics: None,
            },
            admin,
            RustlsConfig::from_config(Arc::new(tls.server_config().unwrap())),
            leadership,
            std::future::pending(),
        )
        .await
        .unwrap();
        // As the controller tells it (every Node counted, and the watchdog level on
        // for each: the leader's acknowledgements tell the companions to arm).
        hb.set_nodes_in_cluster(nodes);
        hb.set_watchdog_nodes(NODES[..nodes].iter().map(|n| n.to_string()).collect());

        let exe = std::env::current_exe().unwrap();
        let child_test = format!(
            "{}::companion_in_a_node",
            module_path!()
                .split_once("::")
                .map_or(module_path!(), |(_, m)| m)
        );
        let mut companions = Vec::new();
        for (i, node) in nodes_named.iter().enumerate() {
            let token_file = dir.path().join(format!("token-{node}"));
            std::fs::write(&token_file, format!("token-{node}\n")).unwrap();
            let state_dir = dir.path().join(format!("state-{node}"));
            std::fs::create_dir(&state_dir).unwrap();
            let params = ChildParams {
                node: (*node).into(),
                nodefence: format!("https://{REPLICAS}:{REPLICAS_PORT}"),
                ca_file: ca_file.clone(),
                token_file,
                kubeconfig: kube.kubeconfig_yaml_for(API_TOKEN),
                peers: peers.then(|| format!("{PEERS}:{PEERS_PORT}")),
                peer_listen: SocketAddr::from(([0, 0, 0, 0], PEERS_PORT)),
                state_dir,
                report: dir.path().join(format!("report-{node}")),
            };
            let params_file = dir.path().join(format!("params-{node}.json"));
            std::fs::write(&params_file, serde_json::to_string(&params).unwrap()).unwrap();
            let log = dir.path().join(format!("{node}.log"));
            let out = std::fs::File::create(&log).unwrap();
            let child = lab
                .command_in(i, &exe)
                .args([
                    "--exact",
                    &child_test,
                    "--include-ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD, &params_file)
                .stdin(Stdio::null())
                .stdout(out.try_clone().unwrap())
                .stderr(out)
                .spawn()
                .unwrap();
            companions.push(Companion {
                node: (*node).into(),
                addr: lab.nodes[i].addr,
                child,
                report: params.report,
                log,
            });
        }
        let mut w = World {
            companions,
            dns,
            _hb: hb,
            _switch: switch,
            _kube: kube,
            lab,
            _dir: dir,
        };
        w.all_fed_on_the_leader(nodes, peers).await;
        Some(w)
    }

    /// Waits until every companion is armed and fed on the leader's answers (and knows
    /// its peers, when it has any).
    async fn all_fed_on_the_leader(&mut self, nodes: usize, peers: bool) {
        let deadline = Instant::now() + START_WITHIN;
        loop {
            let ready = self.companions.iter().all(|c| {
                let r = c.report();
                let s = r.last();
                s.armed
                    && s.feeding
                    && s.basis == "leader"
                    && s.acknowledged >= 3
                    && r.feeds.len() >= 3
                    && (!peers || s.peers_known == nodes)
            });
            if ready {
                return;
            }
            if Instant::now() >= deadline {
                self.tell_all();
                panic!(
                    "not every companion armed and fed on the leader's answer within {START_WITHIN:?}: {:?}",
                    self.companions
                        .iter()
                        .map(|c| (c.node.as_str(), c.report().last()))
                        .collect::<Vec<_>>()
                );
            }
            for i in 0..self.companions.len() {
                if let Ok(Some(status)) = self.companions[i].child.try_wait() {
                    self.tell_all();
                    panic!(
                        "{}'s companion exited at its start: {status}",
                        self.companions[i].node
                    );
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Every companion's lookups reached dnsmasq through the pod's search list: the
    /// first name tried for `name` (in the pod's namespace) and the one answered.
    fn looked_up_through_the_search_list(&self, name: &str) {
        let log = self.dns.log();
        for c in &self.companions {
            for tried in [
                format!("query[A] {name}.{} from {}", netns::POD_SEARCH[0], c.addr),
                format!("query[A] {name}.cluster.local from {}", c.addr),
            ] {
                assert!(
                    log.contains(&tried),
                    "{}'s lookup of {name} never reached dnsmasq as {tried:?}:\n{log}",
                    c.node
                );
            }
        }
    }

    /// The cluster's DNS silent for [`OUTAGE`] (and the control plane cut with it, when
    /// `control_plane`); every companion's report at its end, and the queries dnsmasq
    /// got from each while silent (answered once it resumed). On [`clock`]: when the
    /// outage began and ended.
    async fn outage(&mut self, control_plane: bool) -> Outage {
        let logged = self.dns.log().len();
        let began = clock();
        self.dns.silence();
        if control_plane {
            self.lab.cut_control_plane();
        }
        tokio::time::sleep(OUTAGE).await;
        let ended = clock();
        let reports: Vec<Report> = self.companions.iter().map(Companion::report).collect();
        self.dns.resume();
        // What it had queued while stopped, now answered and logged; and whether the
        // companions feed again.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after: Vec<Report> = self.companions.iter().map(Companion::report).collect();
        let log = self.dns.log();
        let queued = log.get(logged..).unwrap_or_default();
        let queries = self
            .companions
            .iter()
            .map(|c| {
                queued
                    .lines()
                    .filter(|l| l.contains("query[") && l.ends_with(&format!(" from {}", c.addr)))
                    .count()
            })
            .collect();
        Outage {
            began,
            ended,
            reports,
            after,
            queries,
        }
    }

    /// Each companion's last log lines and status, and dnsmasq's last lines, on stderr.
    fn tell_all(&self) {
        for c in &self.companions {
            eprintln!(
                "--- {} ({}), last status {:?}; its log ends:\n{}",
                c.node,
                c.addr,
                c.report().last(),
                c.log_tail(30)
            );
        }
        let log = self.dns.log();
        let lines: Vec<&str> = log.lines().collect();
        eprintln!(
            "--- dnsmasq's log ends:\n{}",
            lines[lines.len().saturating_sub(20)..].join("\n")
        );
    }
}

/// What an outage left in the reports.
struct Outage {
    began: Duration,
    ended: Duration,
    /// Every companion's report when it ended, and 2 s after.
    reports: Vec<Report>,
    after: Vec<Report>,
    /// The queries dnsmasq got from each companion while silent (answered once it
    /// resumed).
    queries: Vec<usize>,
}

impl Outage {
    /// `t` as seconds into the outage.
    fn when(&self, t: Duration) -> String {
        if t >= self.began {
            format!("+{:.1} s", (t - self.began).as_secs_f64())
        } else {
            format!("-{:.1} s", (self.began - t).as_secs_f64())
        }
    }

    /// Companion `i`'s watchdog unfed from `start` for at least `gap`: for how long
    /// in all, and what that means.
    fn unfed(&self, i: usize, start: Duration, gap: Duration) -> String {
        let fed_again = self.after[i].feeds.iter().find(|f| **f > start).copied();
        let (whole, until) = match fed_again {
            Some(t) => (
                t - start,
                format!(
                    "fed again at {}, {:.1} s after the DNS answered again",
                    self.when(t),
                    t.saturating_sub(self.ended).as_secs_f64()
                ),
            ),
            None => (gap, "still unfed 2 s after the outage ended".to_string()),
        };
        let verdict = if whole >= WATCHDOG {
            format!("its watchdog ({WATCHDOG:?}) would have reset the machine")
        } else {
            format!(
                "{:.1} s of its watchdog's {WATCHDOG:?}",
                whole.as_secs_f64()
            )
        };
        format!(
            "its watchdog went unfed for {:.1} s, from {} into the outage ({until}): \
             {verdict}; no gap over {MAX_GAP:?} is allowed",
            whole.as_secs_f64(),
            self.when(start),
        )
    }
}

/// The cluster's DNS silent for 45 s, the leader answering every beat: every
/// companion's watchdog is fed all along, on the leader's answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_cluster_dns_resets_no_machine() {
    let Some(mut w) = World::start(1, false).await else {
        return;
    };
    w.looked_up_through_the_search_list(REPLICAS);
    let o = w.outage(false).await;
    let mut failures = Vec::new();
    for (i, c) in w.companions.iter().enumerate() {
        let r = &o.reports[i];
        let (start, gap) = r.longest_gap(o.began, o.ended);
        eprintln!(
            "{}: longest gap between feeds during the outage {:.2} s (at {}); {} beats \
             acknowledged; {} queries to the silent DNS",
            c.node,
            gap.as_secs_f64(),
            o.when(start),
            r.acknowledged_within(o.began, o.ended),
            o.queries[i]
        );
        if gap > MAX_GAP {
            failures.push(format!(
                "{}: the cluster's DNS silent for {OUTAGE:?}, the leader answering: {}. \
                 Meanwhile the leader acknowledged {} of its beats, and dnsmasq got {} \
                 queries from it (its lookups of {REPLICAS}); the watchdog's own record: \
                 {} feeds, longest gap {:.1} s, 2 s after the outage",
                c.node,
                o.unfed(i, start, gap),
                r.acknowledged_within(start, start + gap),
                o.queries[i],
                o.after[i].counted,
                o.after[i].recorded_gap.as_secs_f64(),
            ));
        }
        if let Some(s) = r
            .seen_within(o.began, o.ended)
            .find(|s| !s.feeding || s.basis != "leader" || s.marked)
        {
            failures.push(format!(
                "{}: not fed on the leader's answer at {} into the outage: {s:?}",
                c.node,
                o.when(s.at)
            ));
        }
        let unacked = r.longest_unacknowledged(o.began, o.ended);
        if unacked > MAX_GAP {
            failures.push(format!(
                "{}: no beat acknowledged for {:.1} s during the outage (the leader answers \
                 every beat)",
                c.node,
                unacked.as_secs_f64()
            ));
        }
        if failures.is_empty() {
            // The test's premise: the companion did look the replicas up, in vain.
            assert!(
                o.queries[i] > 0,
                "{}: no query reached dnsmasq while it was silent: the companion did not \
                 look {REPLICAS} up during the outage, and nothing here was tested",
                c.node
            );
        }
    }
    if !failures.is_empty() {
        w.tell_all();
        panic!("{}", failures.join("\n"));
    }
}

/// The whole control plane out (nodefence's replica and the API server unreachable)
/// and the cluster's DNS silent with it, for 45 s: every companion goes on feeding on
/// its peers' answers, and not one machine is reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_outage_with_a_silent_dns_resets_no_machine() {
    let Some(mut w) = World::start(3, true).await else {
        return;
    };
    w.looked_up_through_the_search_list(REPLICAS);
    w.looked_up_through_the_search_list(PEERS);
    let o = w.outage(true).await;
    let mut failures = Vec::new();
    for (i, c) in w.companions.iter().enumerate() {
        let r = &o.reports[i];
        let Some(on_peers) = r
            .seen_within(o.began, o.ended)
            .find(|s| s.basis == "peers")
            .map(|s| s.at)
        else {
            failures.push(format!(
                "{}: never fed on its peers' answers during the outage (last status {:?})",
                c.node,
                r.last()
            ));
            continue;
        };
        // From the leader's answers to the peers' (see MAX_SWITCH_GAP), then on them.
        let (switch_start, switch_gap) = r.longest_gap(o.began, on_peers);
        let (start, gap) = r.longest_gap(on_peers, o.ended);
        eprintln!(
            "{}: on its peers' answers from {}; longest gap between feeds at the switch \
             {:.2} s (at {}), after it {:.2} s (at {}); {} queries to the silent DNS",
            c.node,
            o.when(on_peers),
            switch_gap.as_secs_f64(),
            o.when(switch_start),
            gap.as_secs_f64(),
            o.when(start),
            o.queries[i]
        );
        if switch_gap > MAX_SWITCH_GAP {
            failures.push(format!(
                "{}: its watchdog went unfed for {:.1} s at the switch to its peers' answers, \
                 from {} into the outage (at most {MAX_SWITCH_GAP:?})",
                c.node,
                switch_gap.as_secs_f64(),
                o.when(switch_start),
            ));
        }
        if gap > MAX_GAP {
            let during = |f: fn(&Seen) -> u64| {
                let within: Vec<&Seen> = r.seen_within(start, start + gap).collect();
                within
                    .last()
                    .zip(within.first())
                    .map_or(0, |(l, f0)| f(l) - f(f0))
            };
            failures.push(format!(
                "{}: the control plane out and the cluster's DNS silent for {OUTAGE:?}, fed \
                 on its peers' answers since {}: {}. Meanwhile it asked its peers {} times \
                 and took {} answers, and dnsmasq got {} queries from it; the watchdog's \
                 own record: {} feeds, longest gap {:.1} s, 2 s after the outage",
                c.node,
                o.when(on_peers),
                o.unfed(i, start, gap),
                during(|s| s.peer_rounds),
                during(|s| s.peer_answers),
                o.queries[i],
                o.after[i].counted,
                o.after[i].recorded_gap.as_secs_f64(),
            ));
        }
        if let Some(s) = r
            .seen_within(on_peers, o.ended)
            .find(|s| !s.feeding || s.basis != "peers" || s.marked)
        {
            failures.push(format!(
                "{}: not fed on its peers' answers at {} into the outage: {s:?}",
                c.node,
                o.when(s.at)
            ));
        }
        if failures.is_empty() {
            assert!(
                o.queries[i] > 0,
                "{}: no query reached dnsmasq while it was silent: the companion looked \
                 nothing up during the outage, and nothing here was tested",
                c.node
            );
        }
    }
    if !failures.is_empty() {
        w.tell_all();
        panic!("{}", failures.join("\n"));
    }
}
