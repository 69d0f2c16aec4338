//! The companions' heartbeat, nodefence's side: one listener per replica, HTTPS for
//! the hellos ([`hello`]: a token reviewed once, a session given) and UDP on the same
//! port for the beats ([`table`]: a sealed beat in, a sealed acknowledgement out).
//! No API-server request per beat: 5,000 companions at 2 Hz are 10,000 datagrams a
//! second of a few hundred bytes each, an HMAC apiece.
//!
//! Every replica runs it (the standbys keep the table too); only the leader's
//! acknowledgements carry `leader` and so let a node feed its watchdog. A datagram that
//! does not open under a live session's key gets nothing back (a garbage sender costs
//! one failed MAC), and nothing longer than
//! [`nodefence_watchdog::wire::MAX_DATAGRAM`] is read.

pub mod batch;
pub mod hello;
pub mod report;
pub mod table;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum_server::tls_rustls::RustlsConfig;
use base64::Engine as _;
use nodefence_watchdog::release::{self, Armed, Evidence, Verdict};
use nodefence_watchdog::timing::Timing;
use nodefence_watchdog::wire::{Credential, Key, SigningKey, WatchdogState};
use tokio::net::{TcpListener, UdpSocket};
use tokio::time::Instant;

use crate::cluster::leader::Leadership;
use crate::engine::WatchdogContext;
use table::Table;

/// How the listener runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// TCP (HTTPS, hellos) and UDP (beats), one port.
    pub listen: SocketAddr,
    /// The companions' ServiceAccount, as a TokenReview names it.
    pub companion_user: String,
    pub timing: Timing,
    pub heartbeat_interval: Duration,
    /// A companion that was beating and is silent this long makes its node suspect.
    pub heartbeat_timeout: Duration,
    /// Where the table is summed up every second (`None`: nowhere).
    pub metrics: Option<Arc<crate::telemetry::Metrics>>,
}

/// The default `heartbeat_interval`: a companion beats twice a second.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(500);
/// The default `heartbeat_timeout`: four beats missed.
pub const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the table is scanned for companions fallen silent: a silence is seen at
/// most this long after `heartbeat_timeout`.
const SILENCE_SCAN: Duration = Duration::from_millis(100);

/// The nodes whose companion was beating and has been silent for `heartbeat_timeout`,
/// each with when this replica last heard it and declared it silent (on the
/// decisions' clock, [`crate::clock::now`]). Changes only when the set does.
pub type Silent = Arc<std::collections::BTreeMap<String, crate::engine::CompanionSilence>>;

/// The running listener: its table, and the nodes marked for fencing.
#[derive(Clone)]
pub struct Heartbeat {
    table: Arc<Mutex<Table>>,
    /// Nodes marked for fencing: their acknowledgements carry the mark; with when the
    /// API server accepted the mark (this replica's monotonic clock), once it did.
    marked: Arc<RwLock<BTreeMap<String, Option<Duration>>>>,
    /// When this replica's current term began (its monotonic clock); `None` while it
    /// does not lead.
    leading_since: Arc<Mutex<Option<Duration>>>,
    /// The nodes whose policy has the watchdog level (set by the leader's term), for
    /// `nodefence_watchdog_unarmed{node}`.
    watchdog_nodes: Arc<RwLock<std::collections::BTreeSet<String>>>,
    timing: Timing,
    heartbeat_timeout: Duration,
    origin: Instant,
    addr: SocketAddr,
    silent: tokio::sync::watch::Receiver<Silent>,
}

impl Heartbeat {
    /// Where it listens (TCP and UDP).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A new session for `node` (what a hello gives once its token is reviewed).
    pub fn open_session(&self, node: &str) -> Result<(u64, Key), getrandom::Error> {
        open_session(&self.table, node, None)
    }

    /// Answers one datagram as the beats' loop does (`leader`: whether this replica
    /// leads now).
    ///
    /// `leader`: the term this replica leads in ([`Leadership::fencing_token`]), if
    /// it leads. What the beat showed of this replica ([`table::Suspicion`]) is given
    /// to `leadership`.
    pub fn answer(
        &self,
        datagram: &[u8],
        leader: Option<u64>,
        leadership: &Leadership,
    ) -> Result<Vec<u8>, table::Dropped> {
        let marked = self.marked.read().unwrap_or_else(|e| e.into_inner());
        let arm = self
            .watchdog_nodes
            .read()
            .unwrap_or_else(|e| e.into_inner());
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let mut ack = Vec::new();
        let answering = Answering {
            marked: &marked,
            arm: &arm,
            leader,
            now: self.now(),
        };
        let answered = answer_into(&mut table, &answering, datagram, &mut ack);
        suspect_if_told(&mut table, leadership);
        answered?;
        Ok(ack)
    }

    /// This replica's monotonic clock, as the table counts it.
    pub fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// Reads the table.
    pub fn with_table<T>(&self, f: impl FnOnce(&Table) -> T) -> T {
        f(&self.table.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The companions fallen silent, as the control loop follows them: every replica
    /// keeps it, so a new leader sees a silence that began before it led.
    pub fn silent(&self) -> tokio::sync::watch::Receiver<Silent> {
        self.silent.clone()
    }

    /// Marks (or unmarks) a node: its acknowledgements say so from now on.
    pub fn set_marked(&self, node: &str, marked: bool) {
        if marked {
            self.mark(node);
        } else {
            self.unmark(node);
        }
    }

    /// The node's acknowledgements carry the mark from now on (before the mark is
    /// written to the Node: a node that stops feeding early is only safer), and what
    /// this replica proved of its companion's hold ends now ([`Table::mark`]). Both
    /// under the marks' lock and the table's, taken in the beats' loop's order: no
    /// beat is answered with the mark before the table knows it.
    pub fn mark(&self, node: &str) {
        let mut marked = self.marked_map();
        let mut table = self.lock_table();
        table.mark(node, self.now());
        marked.entry(node.to_string()).or_insert(None);
    }

    /// The API server accepted the node's mark: the release rule counts from now
    /// (read after its answer arrived, so never before it was accepted). A mark
    /// written again counts from the new write: later is only safer, and an earlier
    /// mark may have been removed in between (a person, a recovery).
    pub fn mark_written(&self, node: &str) {
        let mut marked = self.marked_map();
        let mut table = self.lock_table();
        let now = self.now();
        table.mark(node, now);
        marked.insert(node.to_string(), Some(now));
    }

    /// The node is no longer marked (its machine was proven reset, or it recovered):
    /// its next companion, after the reset, is acknowledged without the mark, and its
    /// beats prove its hold again from now on ([`Table::unmark`]).
    pub fn unmark(&self, node: &str) {
        let mut marked = self.marked_map();
        let mut table = self.lock_table();
        table.unmark(node, self.now());
        marked.remove(node);
    }

    /// The node's acknowledgements no longer carry the mark (it recovered), but what
    /// the table proves of its companion resumes only once the Node's annotation is
    /// gone too ([`Heartbeat::mark_removed`]): while it stands, the companion may read
    /// it from the API server and answer its peers "neither".
    pub fn lift_mark(&self, node: &str) {
        self.marked_map().remove(node);
    }

    /// The API server removed the node's mark: its companion's beats prove its hold
    /// again from now on.
    pub fn mark_removed(&self, node: &str) {
        let _marked = self.marked_map();
        let now = self.now();
        self.lock_table().unmark(node, now);
    }

    /// A new term found the node marked (an earlier term's annotation) and unhealthy:
    /// its acknowledgements carry the mark from now on, and nothing proven of its
    /// companion's hold before counts (the mark may have been learned at any time
    /// since it was written).
    pub fn hold_mark(&self, node: &str) {
        let mut marked = self.marked_map();
        let mut table = self.lock_table();
        table.mark(node, self.now());
        table.forget_hold(node);
        marked.entry(node.to_string()).or_insert(None);
    }

    fn lock_table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn marked_map(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Option<Duration>>> {
        self.marked.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The table as the leader publishes it for `nodefence status` ([`report`]).
    pub fn report(&self) -> Vec<report::CompanionReport> {
        let now = self.now();
        let wall = crate::clock::now();
        let marked = self.marked.read().unwrap_or_else(|e| e.into_inner());
        let level = self
            .watchdog_nodes
            .read()
            .unwrap_or_else(|e| e.into_inner());
        self.with_table(|t| {
            report::of_table(
                t,
                now,
                wall,
                self.heartbeat_timeout,
                |n| marked.contains_key(n),
                |n| level.contains(n),
            )
        })
    }

    /// This replica leads from now on (its controller's term began).
    pub fn began_leading(&self) {
        let now = self.now();
        *self.leading_since.lock().unwrap_or_else(|e| e.into_inner()) = Some(now);
    }

    /// This replica's term ended.
    pub fn stopped_leading(&self) {
        *self.leading_since.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.set_watchdog_nodes(std::collections::BTreeSet::new());
        // Its marks were its term's: a standby marks nothing (its acknowledgements carry
        // no mark), and a next term takes its marks from the Nodes' annotations. What
        // the table proves of those companions starts again from their next beats (a
        // marked one reports no hold until its mark is lifted).
        let mut marked = self.marked_map();
        let mut table = self.lock_table();
        let now = self.now();
        for node in std::mem::take(&mut *marked).into_keys() {
            table.unmark(&node, now);
        }
    }

    /// The nodes whose policy has the watchdog level (the leader's term sets them):
    /// each one whose companion is not beating with an armed watchdog is reported by
    /// `nodefence_watchdog_unarmed{node}`.
    pub fn set_watchdog_nodes(&self, nodes: std::collections::BTreeSet<String>) {
        *self
            .watchdog_nodes
            .write()
            .unwrap_or_else(|e| e.into_inner()) = nodes;
    }

    /// The node's companion's armed watchdog (its granted timeout), if its last beat
    /// said it was armed.
    pub fn armed(&self, node: &str) -> Option<Duration> {
        self.armed_or_why(node).ok()
    }

    /// [`Heartbeat::armed`], or why not, for the operator.
    pub fn armed_or_why(&self, node: &str) -> Result<Duration, String> {
        self.with_table(|t| match t.companion(node).map(|c| c.watchdog) {
            Some(WatchdogState::Armed { granted, .. }) => Ok(granted),
            Some(WatchdogState::None) => Err("its companion reports no hardware watchdog".into()),
            Some(WatchdogState::Stopping) => {
                Err("its companion stopped and disarmed its watchdog".into())
            }
            Some(WatchdogState::Disarming { .. }) => Err(
                "its companion is disarming its watchdog (the node's policy has the watchdog level off)"
                    .into(),
            ),
            None => Err(
                "this replica has heard no companion of this node since it started (one started after the machine was lost cannot know its watchdog was armed)"
                    .into(),
            ),
        })
    }

    /// Whether the node's companion's watchdog can rest a release at all, as the Node
    /// is now (`context`): armed, as the session the companion opened last reported it
    /// (a new hello inherits nothing), by a companion that names the boot the Node
    /// reports, and not in a virtual machine unless the policy opted it in. How long
    /// ago the companion fell silent does not matter: its watchdog stays armed and
    /// counting until every replica acknowledged a stop or a disarm, or the machine
    /// rebooted (then the Node names another boot). The granted timeout, or
    /// why not. The mark is refused on the same grounds: it would only stop a node's
    /// feeding for nothing.
    pub fn watchdog_usable(
        &self,
        node: &str,
        context: &WatchdogContext,
    ) -> Result<Duration, String> {
        let granted = self.armed_or_why(node)?;
        self.with_table(|t| {
            let Some(c) = t.companion(node) else {
                return Err("the node has no companion".into());
            };
            let Some(boot) = c.boot else {
                return Err(
                    "its companion's beats name no boot (a companion older than this nodefence): \
                     upgrade the companions' DaemonSet; nothing is released on a watchdog of a \
                     boot nobody names"
                        .into(),
                );
            };
            let Some(reported) = context.boot_id.as_deref() else {
                return Err(
                    "the Node reports no boot ID (status.nodeInfo.bootID): nothing says its \
                     companion's watchdog is this boot's"
                        .into(),
                );
            };
            if !boot.is(reported) {
                return Err(format!(
                    "its companion's beats are of boot {boot}, the Node reports boot {}: the \
                     watchdog they reported is not this boot's (the machine rebooted since, and \
                     no companion beats in this boot)",
                    crate::untrusted::field(reported)
                ));
            }
            if c.last_ack.is_some() && c.last_ack_boot != Some(boot) {
                let acknowledged = c
                    .last_ack_boot
                    .map_or_else(|| "none".to_string(), |b| b.to_string());
                return Err(format!(
                    "the last acknowledgement without the mark went to a beat of boot                      {acknowledged}; boot {boot}'s companion began beating since (the machine                      rebooted during this incident): its watchdog proves nothing of the wait                      counted from that acknowledgement"
                ));
            }
            if c.virtual_machine && context.on_virtual_machine.is_none() {
                return Err(
                    "its machine is a virtual machine (its companion says so): a hypervisor that \
                     pauses it pauses its watchdog too; set watchdog_fencing_on_vm = \"<why>\" in \
                     the node's policy only if its hypervisor never pauses it"
                        .into(),
                );
            }
            Ok(granted)
        })
    }

    /// The cluster's Nodes, as the leader's Node watch counts them: the cluster size
    /// acknowledgements carry (never less than before), for the peers' majority.
    pub fn set_nodes_in_cluster(&self, nodes: usize) {
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .set_nodes_in_cluster(nodes);
    }

    /// The watchdog level's release rule for `node`, now
    /// ([`nodefence_watchdog::release::decide`]), with what this replica knows: its
    /// companion's watchdog, the last acknowledgement without the mark this replica
    /// sent it, when the mark was written, when this term began, and what it can
    /// prove of every other companion's hold on the control plane.
    pub fn watchdog_verdict(&self, node: &str, context: &WatchdogContext) -> Verdict {
        let Some(leading_since) = *self.leading_since.lock().unwrap_or_else(|e| e.into_inner())
        else {
            return Verdict::Refuse("this replica does not lead".into());
        };
        if let Err(why) = self.watchdog_usable(node, context) {
            return Verdict::Refuse(why);
        }
        let mark_written = self
            .marked
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(node)
            .copied()
            .flatten();
        let now = self.now();
        self.with_table(|table| {
            let Some(companion) = table.companion(node) else {
                return Verdict::Refuse("the node has no companion".into());
            };
            let armed = match companion.watchdog {
                WatchdogState::Armed { granted, device } => Some(Armed {
                    device: device.as_str().to_string(),
                    granted,
                }),
                WatchdogState::None | WatchdogState::Stopping | WatchdogState::Disarming { .. } => {
                    None
                }
            };
            let evidence = Evidence {
                armed,
                last_ack: companion.last_ack,
                leading_since,
                mark_written,
                cluster: table.cluster(),
                told: usize::from(companion.cluster_known),
            };
            release::decide(&self.timing, &evidence, table.others_heard(node), now)
        })
    }
}

#[derive(Clone)]
struct HelloState {
    client: kube::Client,
    settings: Settings,
    table: Arc<Mutex<Table>>,
    port: u16,
    /// Reviews under way (each is a TokenReview): a flood of hellos costs the API
    /// server at most this many at once.
    reviews: Arc<tokio::sync::Semaphore>,
    /// The companions' peer key this replica gives ([`hello::Session::peer_key`]).
    peer_key: Key,
    /// This replica's authority key, which signs the companions' credentials
    /// ([`hello::Session::credential`]), and how many it signed. Both in memory alone.
    authority: Arc<SigningKey>,
    issued: Arc<std::sync::atomic::AtomicU64>,
}

/// A heartbeat with an empty table, and the sender of its silences.
fn new_heartbeat(
    timing: Timing,
    heartbeat_timeout: Duration,
    addr: SocketAddr,
) -> (Heartbeat, tokio::sync::watch::Sender<Silent>) {
    let (silent_tx, silent) = tokio::sync::watch::channel(Silent::default());
    let heartbeat = Heartbeat {
        table: Arc::new(Mutex::new(Table::new(timing))),
        marked: Arc::new(RwLock::new(BTreeMap::new())),
        leading_since: Arc::new(Mutex::new(None)),
        watchdog_nodes: Arc::new(RwLock::new(std::collections::BTreeSet::new())),
        timing,
        heartbeat_timeout,
        origin: Instant::now(),
        addr,
        silent,
    };
    (heartbeat, silent_tx)
}

/// Starts the listener; it runs until `shutdown` resolves.
pub async fn start(
    settings: Settings,
    client: kube::Client,
    tls: RustlsConfig,
    leadership: Leadership,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<Heartbeat> {
    let (tcp, udp) = bind_both(settings.listen).await?;
    let addr = tcp.local_addr()?;
    let (heartbeat, silent_tx) = new_heartbeat(settings.timing, settings.heartbeat_timeout, addr);
    let timeout = settings.heartbeat_timeout;
    let metrics = settings.metrics.clone();
    let state = HelloState {
        client,
        settings,
        table: heartbeat.table.clone(),
        port: addr.port(),
        reviews: Arc::new(tokio::sync::Semaphore::new(8)),
        peer_key: Key(random_key()?),
        authority: Arc::new(
            SigningKey::generate()
                .ok_or_else(|| std::io::Error::other("no randomness for the authority key"))?,
        ),
        issued: Arc::new(std::sync::atomic::AtomicU64::new(0)),
    };
    let routes = axum::Router::new()
        .route(hello::PATH, post(session))
        .with_state(state);
    let stop_udp = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let udp = udp.into_std()?;
    {
        let (heartbeat, stop) = (heartbeat.clone(), stop_udp.clone());
        std::thread::Builder::new()
            .name("nodefence-beats".into())
            .spawn(move || serve_udp(udp, heartbeat, leadership, stop))?;
    }
    let scan_task = tokio::spawn(follow_silence(
        heartbeat.clone(),
        timeout,
        silent_tx,
        metrics,
    ));
    tokio::spawn(async move {
        // The beats' thread stops with this task, also when it is dropped (its
        // runtime gone: a replica that crashed answers nothing more).
        let _stop_beats = StopOnDrop(stop_udp);
        let result = crate::telemetry::serve(tcp, routes, Some(tls), shutdown).await;
        scan_task.abort();
        if let Err(e) = result {
            tracing::error!(error = %e, "the companions' listener stopped");
        }
    });
    Ok(heartbeat)
}

/// TCP and UDP on one port. With port 0 (tests, the demo) the kernel picks the TCP
/// port, and the same number may already be some other socket's for UDP: another is
/// picked, a few times.
async fn bind_both(listen: SocketAddr) -> std::io::Result<(TcpListener, UdpSocket)> {
    let mut tries = if listen.port() == 0 { 20 } else { 1 };
    loop {
        let tcp = TcpListener::bind(listen).await?;
        match UdpSocket::bind(tcp.local_addr()?).await {
            Ok(udp) => return Ok((tcp, udp)),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tries > 1 => tries -= 1,
            Err(e) => return Err(e),
        }
    }
}

/// 32 random bytes from the system's generator.
fn random_key() -> std::io::Result<[u8; 32]> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key)
        .map_err(|e| std::io::Error::other(format!("no randomness for a key: {e}")))?;
    Ok(key)
}

/// The heartbeat without a socket, for companions in the same process: the
/// whole-system simulation's, which runs on one thread in paused time where a UDP
/// socket served by a thread of its own cannot be heard. The table, the marks, the
/// release rule and the scan for silences are the listener's own; what the hello
/// (TokenReview, TLS) and the socket do is left out, and a datagram is answered
/// ([`Heartbeat::answer`]) by the same function, under the same locks, as the
/// socket's loop answers each of a batch.
///
/// Cloned by whoever plays the companions; the daemon fills it when it starts
/// ([`start_in_process`]): until then, and once the daemon's future is dropped,
/// nothing is answered.
#[derive(Clone, Default)]
pub struct InProcess {
    running: Arc<Mutex<Option<(Heartbeat, Leadership)>>>,
}

impl std::fmt::Debug for InProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InProcess")
    }
}

impl InProcess {
    pub fn new() -> Self {
        Self::default()
    }

    fn running(&self) -> Option<(Heartbeat, Leadership)> {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// What a hello gives once its token is reviewed: a new session for `node` (its
    /// id and key). `None` while the daemon has not started it, or after it stopped.
    pub fn open_session(&self, node: &str) -> Option<(u64, Key)> {
        let (heartbeat, _) = self.running()?;
        let opened = heartbeat.open_session(node);
        if let Err(e) = &opened {
            tracing::warn!(node, error = %e, "no session for a companion");
        }
        opened.ok()
    }

    /// One datagram from a companion: the acknowledgement to send back, or nothing
    /// (as the socket's loop answers it).
    pub fn datagram(&self, datagram: &[u8]) -> Option<Vec<u8>> {
        let (heartbeat, leadership) = self.running()?;
        heartbeat
            .answer(datagram, leadership.fencing_token(), &leadership)
            .ok()
    }

    /// Whether the replica that answers leads now (what its acknowledgements say).
    pub fn is_leader(&self) -> bool {
        self.running().is_some_and(|(_, l)| l.is_leader())
    }

    /// The heartbeat, while the daemon runs it.
    pub fn heartbeat(&self) -> Option<Heartbeat> {
        self.running().map(|(h, _)| h)
    }
}

/// Starts the heartbeat without a socket ([`InProcess`]): its scan for silences runs
/// until `shutdown` resolves (or its future is dropped with the daemon's), and then
/// `handle` answers nothing more.
pub fn start_in_process(
    timing: Timing,
    heartbeat_timeout: Duration,
    metrics: Option<Arc<crate::telemetry::Metrics>>,
    leadership: Leadership,
    handle: &InProcess,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Heartbeat {
    let addr = SocketAddr::from(([0, 0, 0, 0], 0));
    let (heartbeat, silent_tx) = new_heartbeat(timing, heartbeat_timeout, addr);
    *handle.running.lock().unwrap_or_else(|e| e.into_inner()) =
        Some((heartbeat.clone(), leadership));
    let scan = follow_silence(heartbeat.clone(), heartbeat_timeout, silent_tx, metrics);
    let running = handle.running.clone();
    tokio::spawn(async move {
        // Cleared also when this task is dropped with its runtime (a crashed replica).
        let _clear = ClearOnDrop(running);
        tokio::select! {
            () = scan => {}
            () = shutdown => {}
        }
    });
    heartbeat
}

/// Empties an [`InProcess`] handle when dropped.
struct ClearOnDrop(Arc<Mutex<Option<(Heartbeat, Leadership)>>>);

impl Drop for ClearOnDrop {
    fn drop(&mut self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

async fn session(
    State(state): State<HelloState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let refuse = |status: StatusCode, why: String| {
        (status, Json(serde_json::json!({ "error": why }))).into_response()
    };
    let said = match hello::Request::parse(&body) {
        Ok(said) => said,
        Err(why) => return refuse(StatusCode::BAD_REQUEST, why),
    };
    let Some(token) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
    else {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "no bearer token: send the companion's projected token".into(),
        );
    };
    let Ok(_permit) = state.reviews.acquire().await else {
        return refuse(StatusCode::SERVICE_UNAVAILABLE, "shutting down".into());
    };
    let node = match hello::review(&state.client, token).await {
        Ok(status) => hello::bind(&status, &state.settings.companion_user),
        Err(e) => Err(e),
    };
    let node = match node {
        Ok(node) => node,
        Err(e @ hello::Refusal::Review(_)) => {
            tracing::warn!(error = %e, "a companion's hello could not be reviewed");
            return refuse(StatusCode::SERVICE_UNAVAILABLE, e.to_string());
        }
        Err(e) => {
            tracing::warn!(error = %e, "a companion's hello was refused");
            return refuse(StatusCode::UNAUTHORIZED, e.to_string());
        }
    };
    let boot = said
        .boot_id
        .as_deref()
        .map(nodefence_watchdog::wire::BootId::of);
    // The companion's key bound to the node its token proved: its peers count its
    // answers by that node.
    let credential = said.public_key().and_then(|subject| {
        let serial = state
            .issued
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .wrapping_add(1);
        let issued = Credential::issue(
            &state.authority,
            subject,
            &node,
            boot.unwrap_or_default(),
            serial,
        );
        if issued.is_none() {
            tracing::warn!(
                node = %crate::untrusted::text(&node, 80),
                "the node's name is not 1 to 253 bytes of printable ASCII: no credential, \
                 its companion's answers count for no peer"
            );
        }
        issued
    });
    let (id, Key(key)) = match open_session(&state.table, &node, boot) {
        Ok(opened) => opened,
        Err(e) => {
            return refuse(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("no randomness for a session key: {e}"),
            );
        }
    };
    Json(hello::Session {
        node,
        session: id.to_string(),
        key: base64::engine::general_purpose::STANDARD.encode(key),
        heartbeat_port: state.port,
        heartbeat_interval_ms: u64::try_from(state.settings.heartbeat_interval.as_millis())
            .unwrap_or(u64::MAX),
        isolation_timeout_ms: u64::try_from(state.settings.timing.isolation_timeout.as_millis())
            .unwrap_or(u64::MAX),
        peer_key: Some(base64::engine::general_purpose::STANDARD.encode(state.peer_key.0)),
        authority_key: Some(hello::encode_key(&state.authority.public())),
        credential: credential
            .map(|c| base64::engine::general_purpose::STANDARD.encode(c.to_bytes())),
    })
    .into_response()
}

/// How long the beats' loop lets datagrams queue after answering a batch: at 10,000
/// beats a second, one wake-up for every two hundred or so (two `recvmmsg`, two
/// `sendmmsg`) rather than one for each (a thread's wake-up costs more than the
/// beat). It delays an acknowledgement by at most this, against a
/// `heartbeat_interval` of 500 ms and an `isolation_timeout` of 2 s; the
/// acknowledgement's times are read when it is answered, so the delay is never
/// counted in the companion's favour.
pub const COALESCE: Duration = Duration::from_millis(20);

/// The beats' loop, on a thread of its own (a blocking socket: the runtime's
/// scheduler is not woken for each datagram; [`batch::serve`]): every datagram
/// queued, answered under one lock of the table, then [`COALESCE`] for the next ones
/// to queue.
fn serve_udp(
    socket: std::net::UdpSocket,
    heartbeat: Heartbeat,
    leadership: Leadership,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    let served = batch::serve(&socket, COALESCE, &stop, |received, answers| {
        let marked = heartbeat.marked.read().unwrap_or_else(|e| e.into_inner());
        let arm = heartbeat
            .watchdog_nodes
            .read()
            .unwrap_or_else(|e| e.into_inner());
        let mut table = heartbeat.table.lock().unwrap_or_else(|e| e.into_inner());
        // Read once the whole batch is in hand (see [`answer_into`]): no acknowledgement is
        // recorded before the beat it answers arrived, and every one is sent after
        // both were read. Once a batch, not once a datagram (two clock reads each: a
        // few percent of the loop at 10,000 a second).
        let answering = Answering {
            marked: &marked,
            arm: &arm,
            leader: leadership.fencing_token(),
            now: heartbeat.now(),
        };
        table.warm(received.iter().map(|(d, _)| d));
        for (datagram, from) in received.iter() {
            let answered = answers.push_with(from, |out| {
                answer_into(&mut table, &answering, datagram, out)
            });
            if let Err(why) = answered {
                tracing::trace!(%from, why = why.as_str(), "datagram dropped");
            }
        }
        suspect_if_told(&mut table, &leadership);
    });
    if let Err(e) = served {
        tracing::error!(error = %e, "the heartbeat socket cannot be set up; no beat is heard");
    }
}

/// One datagram in hand, answered: what the beats' loop does for each one it reads,
/// and [`InProcess::datagram`] for a companion in the same process. `leader` and `now`
/// must be read once the datagram is in hand: an acknowledgement is never recorded
/// as sent before the beat it answers was (the release's wait counts from it), nor as
/// the leader's after the leadership.
fn answer_into(
    table: &mut Table,
    answering: &Answering<'_>,
    datagram: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), table::Dropped> {
    table.beat_into(
        datagram,
        answering.now,
        answering.leader,
        |n| answering.marked.contains_key(n),
        |n| answering.arm.contains(n),
        out,
    )
}

/// How this replica answers the beats of a batch, read once the batch is in hand.
struct Answering<'a> {
    marked: &'a BTreeMap<String, Option<Duration>>,
    /// The nodes whose policy has the watchdog level on.
    arm: &'a std::collections::BTreeSet<String>,
    /// The term it leads in, if it does.
    leader: Option<u64>,
    now: Duration,
}

/// A beat showed this replica stood still, or that another leads in a newer term: it
/// no longer leads until its next renewal ([`Leadership::suspect`]).
fn suspect_if_told(table: &mut Table, leadership: &Leadership) {
    if let Some(why) = table.take_suspicion() {
        leadership.suspect();
        tracing::warn!(
            %why,
            "this replica no longer acknowledges beats as the leader's, nor acts as the \
             leader, until it renews its Lease"
        );
    }
}

/// A new session for `node` in `table` (replacing its last one): its id and key,
/// drawn from the system's randomness.
fn open_session(
    table: &Mutex<Table>,
    node: &str,
    boot: Option<nodefence_watchdog::wire::BootId>,
) -> Result<(u64, Key), getrandom::Error> {
    let mut secret = [0u8; 40];
    getrandom::fill(&mut secret)?;
    let drawn = u64::from_be_bytes(secret[..8].try_into().unwrap_or([0; 8]));
    let mut key = [0u8; 32];
    key.copy_from_slice(&secret[8..]);
    let id = {
        let mut table = table.lock().unwrap_or_else(|e| e.into_inner());
        let id = table.open(node, drawn, Key(key));
        table.said_hello(node, boot);
        id
    };
    tracing::info!(node, boot = ?boot, "a companion opened a heartbeat session");
    Ok((id, Key(key)))
}

/// Sets its flag when dropped.
struct StopOnDrop(Arc<std::sync::atomic::AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Looks at the table every [`SILENCE_SCAN`] and publishes the silent companions
/// when the set changes (a beat back, or a new silence): the control loop is woken by
/// a change, never by a beat. A look walks over every companion only when the set may
/// have changed ([`Table::silent_if_changed`]): while every companion beats, once in
/// `heartbeat_timeout` less a `heartbeat_interval` (1.5 s by default), not ten times
/// a second.
async fn follow_silence(
    heartbeat: Heartbeat,
    timeout: Duration,
    publish: tokio::sync::watch::Sender<Silent>,
    metrics: Option<Arc<crate::telemetry::Metrics>>,
) {
    let mut scan = tokio::time::interval(SILENCE_SCAN);
    scan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut scans: u32 = 0;
    let mut watch = table::SilenceWatch::default();
    loop {
        scan.tick().await;
        let now = heartbeat.now();
        scans = scans.wrapping_add(1);
        if let Some(m) = &metrics
            && scans.is_multiple_of(10)
        {
            let configured = heartbeat
                .watchdog_nodes
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            m.observe_companions(&heartbeat.with_table(|t| {
                let mut summary = t.summary(now, timeout);
                summary.unarmed = t.unarmed(&configured, now, timeout);
                summary
            }));
        }
        let wall = crate::clock::now();
        let Some(silent) = heartbeat.with_table(|t| t.silent_if_changed(&mut watch, now, timeout))
        else {
            // The same companions silent as at the last look: nothing to publish.
            continue;
        };
        publish.send_if_modified(|known| {
            if known.len() == silent.len() && silent.iter().all(|(n, _)| known.contains_key(n)) {
                return false;
            }
            let next = silent
                .iter()
                .map(|(node, last)| {
                    // A node already silent keeps what was first published for it.
                    let silence = known.get(node).copied().unwrap_or_else(|| {
                        let last_beat =
                            wall.checked_sub(now.saturating_sub(*last)).unwrap_or(wall);
                        crate::engine::CompanionSilence {
                            last_beat,
                            declared: wall,
                        }
                    });
                    (node.clone(), silence)
                })
                .collect();
            for node in silent.iter().map(|(n, _)| n) {
                if !known.contains_key(node) {
                    tracing::warn!(node = %node, "its companion stopped beating: the node is suspect");
                }
            }
            for node in known.keys() {
                if !silent.iter().any(|(n, _)| n == node) {
                    tracing::info!(node = %node, "its companion is beating again");
                }
            }
            *known = Arc::new(next);
            true
        });
    }
}

#[cfg(test)]
mod tests;
