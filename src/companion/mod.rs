//! `nodefence companion`: the per-node agent of hardware-watchdog fencing.
//!
//! It says hello to nodefence (its projected ServiceAccount token, over TLS to a
//! certificate it trusts: [`crate::heartbeat::hello`]), beats every
//! `heartbeat_interval` (500 ms) and feeds the node's hardware watchdog
//! ([`nodefence_watchdog::device`]) only while its feeding rule allows
//! ([`nodefence_watchdog::feeding`]): while the leader's acknowledgement of a beat sent
//! less than `isolation_timeout` ago holds and carries no mark, or, once the leader has
//! been silent for half of it, the API server's answer on the Node's fencing mark
//! ([`api`]). A mark, in an acknowledgement or on the Node for this boot, stops feeding
//! at once (the poison pill), until the leader lifts it
//! ([`Feeding::acknowledged`](nodefence_watchdog::feeding::Feeding::acknowledged)).
//!
//! The watchdog is armed only when feeding is first allowed: a node still marked when
//! its next companion starts (after the reset the mark caused) is not armed again
//! while the mark stands, so never reset in a loop; once the leader lifts it (the node
//! recovered, or was released), it arms. A clean stop first beats "stopping" (this node's watchdog no
//! longer counts), then disarms an armed watchdog with the magic close; under
//! `nowayout` it says that the next pod must take over within the watchdog's timeout.
//!
//! Every replica gets its own session and the beats (the `--nodefence` name looked
//! up: a headless Service lists them all), so a standby's table is current when it
//! takes over; of their acknowledgements, only the leader's (not a standby's) counts.
//!
//! While neither the leader nor the API server answers, it asks its peers ([`peers`],
//! the rule's third basis): an outage of the whole control plane never resets the
//! fleet, and a node cut off alone is reset.

pub mod api;
pub mod peers;
mod replicas;

use replicas::{RESOLVE_EVERY, first_hello, follow_replicas, link, peer_key_of};
pub mod state;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use nodefence_watchdog::device::{self, Disarmed, Watchdog};
use nodefence_watchdog::feeding::{Basis, Feeding};
use nodefence_watchdog::timing::Timing;
use nodefence_watchdog::wire::{self, Key, WatchdogState};
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

/// The longest watchdog timeout accepted: beyond it a release would wait minutes.
pub const MAX_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the companion decides whether to feed.
const FEED_EVERY: Duration = Duration::from_millis(100);

/// Which watchdog to arm.
pub enum WatchdogChoice {
    /// A device (`/dev/watchdog`), with the timeout asked.
    Device {
        path: PathBuf,
        timeout: Duration,
        allow_softdog: bool,
    },
    /// None: the companion beats, and nothing rests on a watchdog.
    None,
    /// One already open (tests).
    Given(Box<dyn Watchdog>),
}

/// How the companion runs.
pub struct Options {
    /// nodefence's companion listener, `https://host:port`.
    pub nodefence: url::Url,
    /// How nodefence's certificate is trusted.
    pub tls: crate::config::TlsSettings,
    /// The projected token (read again for every hello: the kubelet rotates it).
    pub token_file: PathBuf,
    pub watchdog: WatchdogChoice,
    /// The replicas' addresses, instead of looking the `nodefence` name up (tests;
    /// a static list).
    pub replicas: Option<Vec<std::net::SocketAddr>>,
    /// Reading its Node when the leader is silent (the rule's second basis); `None`:
    /// only the leader's answer counts.
    pub api: Option<api::ApiAccess>,
    /// Asking its peers when neither the leader nor the API server answers (the
    /// rule's third basis), on this socket (bound at start-up: [`peers::bind`]);
    /// `None`: the peers' answers never count.
    pub peers: Option<(tokio::net::UdpSocket, peers::PeerSource)>,
    /// Where what a crash must not lose is kept ([`state`]); `None`: nothing kept, a
    /// successor waits for a hello.
    pub state_dir: Option<PathBuf>,
}

impl WatchdogChoice {
    fn take(&mut self) -> WatchdogChoice {
        std::mem::replace(self, WatchdogChoice::None)
    }
}

/// What the companion reports while it runs (tests and logs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    pub node: Option<String>,
    pub acknowledged: u64,
    pub marked: bool,
    /// The device's identity and granted timeout, once armed (when feeding was first
    /// allowed and a replica had told the cluster's size and a peer key).
    pub armed: Option<(String, Duration)>,
    pub feeding: bool,
    /// What the feeding rests on now.
    pub basis: Option<Basis>,
    /// Reads of the Node sent to the API server.
    pub api_reads: u64,
    /// The peers' addresses last looked up.
    pub peers_known: usize,
    /// Rounds of questions to the peers, and answers taken.
    pub peer_rounds: u64,
    pub peer_answers: u64,
}

/// What every replica's link shares with the loop that feeds the watchdog.
struct Shared {
    feeding: std::sync::Mutex<Feeding>,
    status: Arc<std::sync::Mutex<Status>>,
    /// What the beats say of the watchdog: `None` until it is armed.
    watchdog: std::sync::Mutex<WatchdogState>,
    origin: Instant,
    interval: Duration,
    /// When the latest beat the leader acknowledged without the mark was sent, or,
    /// before any, when the companion began to beat (its clock).
    leader_heard: std::sync::Mutex<Duration>,
    /// The largest cluster size an acknowledgement carried: a peer majority is
    /// counted of at least this many.
    cluster: std::sync::atomic::AtomicU16,
    /// The peer key each replica gave at its last hello, by its address.
    peer_keys: std::sync::Mutex<std::collections::BTreeMap<std::net::SocketAddr, Key>>,
    /// Its node and timing, and where they are kept with the size and the keys.
    node: String,
    isolation_timeout: Duration,
    state_dir: Option<PathBuf>,
}

impl Shared {
    /// A companion for `node` that has heard the leader just now (its clock starts
    /// here), nothing armed.
    fn new(
        node: String,
        timing: &Timing,
        interval: Duration,
        cluster: u16,
        peer_keys: std::collections::BTreeMap<std::net::SocketAddr, Key>,
        status: Arc<std::sync::Mutex<Status>>,
        state_dir: Option<PathBuf>,
    ) -> Self {
        Shared {
            feeding: std::sync::Mutex::new(Feeding::new(timing)),
            status,
            watchdog: std::sync::Mutex::new(WatchdogState::None),
            origin: Instant::now(),
            interval: interval.max(Duration::from_millis(50)),
            leader_heard: std::sync::Mutex::new(Duration::ZERO),
            cluster: std::sync::atomic::AtomicU16::new(cluster),
            peer_keys: std::sync::Mutex::new(peer_keys),
            node,
            isolation_timeout: timing.isolation_timeout,
            state_dir,
        }
    }

    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    fn feeding(&self) -> std::sync::MutexGuard<'_, Feeding> {
        self.feeding.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn status(&self) -> std::sync::MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn watchdog(&self) -> WatchdogState {
        *self.watchdog.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn leader_heard(&self) -> Duration {
        *self.leader_heard.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn cluster(&self) -> u16 {
        self.cluster.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A replica told the cluster's size and gave a peer key: the peers can be asked
    /// (the feeding rule's third basis), so the watchdog may be armed.
    fn can_hold_every_basis(&self) -> bool {
        self.cluster() > 0
            && !self
                .peer_keys
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_empty()
    }

    /// An acknowledgement said the cluster has `size` companions' Nodes.
    fn told_cluster(&self, size: u16) {
        let before = self
            .cluster
            .fetch_max(size, std::sync::atomic::Ordering::Relaxed);
        if size > before {
            self.keep();
        }
    }

    /// Writes what a successor needs ([`state`]), when a state directory is given.
    fn keep(&self) {
        let Some(dir) = &self.state_dir else {
            return;
        };
        let kept = state::Kept {
            node: self.node.clone(),
            isolation_timeout: self.isolation_timeout,
            heartbeat_interval: self.interval,
            cluster: self.cluster(),
            peer_keys: self
                .peer_keys
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        };
        if let Err(e) = state::save(dir, &kept) {
            tracing::error!(error = %e, "cannot keep the companion's state: a crash during a control-plane outage would leave its successor unable to ask its peers");
        }
    }

    /// The peer keys held, each once.
    fn peer_keys(&self) -> Vec<Key> {
        let keys = self.peer_keys.lock().unwrap_or_else(|e| e.into_inner());
        peers::distinct(keys.values().cloned())
    }

    /// A hello to the replica at `replica` gave this peer key.
    fn keep_peer_key(&self, replica: std::net::SocketAddr, key: Option<Key>) {
        if let Some(key) = key {
            let before = self
                .peer_keys
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(replica, key.clone());
            if before.as_ref() != Some(&key) {
                self.keep();
            }
        }
    }

    /// The leader acknowledged, without the mark, the beat sent at `beat_sent`.
    fn heard_leader(&self, beat_sent: Duration) {
        let mut heard = self.leader_heard.lock().unwrap_or_else(|e| e.into_inner());
        *heard = (*heard).max(beat_sent);
    }
}

/// Runs until `shutdown` resolves; `status` follows what it does.
///
/// Every replica of nodefence gets its own session and the beats (each keeps the
/// table, so a new leader knows who was beating): the `--nodefence` name is looked
/// up (a headless Service gives every replica's address) and each address is told
/// apart by its IP, its certificate checked against the name.
pub async fn run(
    mut options: Options,
    status: Arc<std::sync::Mutex<Status>>,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<Option<Disarmed>> {
    crate::tls::install_crypto_provider();
    let host = options
        .nodefence
        .host_str()
        .context("no host in --nodefence")?
        .to_string();
    let port = options
        .nodefence
        .port_or_known_default()
        .context("no port in --nodefence")?;
    // A predecessor crashed (its watchdog may be counting): start where it stood.
    let resumed = options
        .state_dir
        .as_deref()
        .and_then(|dir| match state::load(dir) {
            Ok(kept) => kept,
            Err(e) => {
                tracing::warn!(error = %e, "the kept state is unusable: starting afresh");
                let _ = state::remove(dir);
                None
            }
        });
    let (first, node, isolation_timeout, interval, cluster, peer_keys) = match resumed {
        Some(kept) => {
            tracing::warn!(
                node = %kept.node,
                cluster = kept.cluster,
                peer_keys = kept.peer_keys.len(),
                "resuming after a predecessor's crash: its node, timing, cluster size and peer keys, before any hello"
            );
            (
                None,
                kept.node,
                kept.isolation_timeout,
                kept.heartbeat_interval,
                kept.cluster,
                kept.peer_keys,
            )
        }
        None => {
            let (addr, hello, session) = first_hello(&options, &host, port).await;
            let keys = peer_key_of(&hello)
                .map(|k| std::collections::BTreeMap::from([(addr, k)]))
                .unwrap_or_default();
            (
                Some((addr, session)),
                hello.node.clone(),
                Duration::from_millis(hello.isolation_timeout_ms),
                Duration::from_millis(hello.heartbeat_interval_ms),
                0,
                keys,
            )
        }
    };
    let timing = Timing {
        isolation_timeout,
        ..Timing::default()
    };
    // Armed only once feeding is first allowed (never, if marked before that), and
    // only once every basis of the feeding rule can be held: a replica told the
    // cluster's size and gave a peer key. Armed on the API server's answer alone, a
    // companion that had not heard a replica yet (its node just rebooted, its link to
    // nodefence down) could not feed on its peers, and an outage of the whole control
    // plane a moment later reset a machine doing its work (simulation seed 7850).
    // A successor resumed from a predecessor that armed it has both in the kept state
    // (the predecessor armed only with them), and arms at once. Without a state
    // directory nothing says whether a predecessor's watchdog is counting: armed on the
    // first basis, as it must be fed within W.
    let arm_on_any_basis = options.state_dir.is_none();
    let mut unarmed = Some(options.watchdog.take());
    let mut watchdog: Option<Box<dyn Watchdog>> = None;
    let shared = Arc::new(Shared::new(
        node.clone(),
        &timing,
        interval,
        cluster,
        peer_keys,
        status.clone(),
        options.state_dir.clone(),
    ));
    shared.keep();
    shared.status().node = Some(node.clone());
    tracing::info!(node = %node, "companion beating");
    // Stopped when dropped: at a clean stop, or with this future.
    let api_task = options.api.take().map(|access| {
        AbortOnDropHandle::new(tokio::spawn(api::follow(
            access,
            node.clone(),
            shared.clone(),
            timing.isolation_timeout / 2,
        )))
    });
    let peers_task = options.peers.take().map(|(socket, source)| {
        AbortOnDropHandle::new(tokio::spawn(peers::follow(
            socket,
            source,
            shared.clone(),
            timing.isolation_timeout,
        )))
    });
    let options = Arc::new(options);
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let mut links: std::collections::BTreeMap<std::net::SocketAddr, AbortOnDropHandle<bool>> =
        std::collections::BTreeMap::new();
    // The links end with this future, also when it is dropped (a killed companion).
    if let Some((first_addr, session)) = first {
        links.insert(
            first_addr,
            AbortOnDropHandle::new(tokio::spawn(link(
                options.clone(),
                host.clone(),
                first_addr,
                Some(session),
                shared.clone(),
                stop.clone(),
            ))),
        );
    }
    let mut feed = tokio::time::interval(FEED_EVERY);
    let mut lookup = tokio::time::interval(RESOLVE_EVERY);
    lookup.reset();
    let mut shutdown = std::pin::pin!(shutdown);
    let mut last_basis: Option<Basis> = None;
    let mut told_why_unarmed = false;
    follow_replicas(&options, &host, port, &mut links, &shared, &stop).await;
    loop {
        tokio::select! {
            _ = feed.tick() => {
                let now = shared.now();
                let basis = shared.feeding().may_feed(now);
                let arming = may_arm(basis, arm_on_any_basis, shared.can_hold_every_basis());
                if arming && let Some(choice) = unarmed.take() {
                    watchdog = arm_now(choice, &shared);
                } else if basis.is_some() && !arming && !told_why_unarmed {
                    told_why_unarmed = true;
                    tracing::warn!(
                        "feeding allowed, but the watchdog stays unarmed until a replica of \
                         nodefence acknowledges a beat (the cluster's size and a peer key: \
                         without them an outage of the whole control plane would reset this \
                         machine)"
                    );
                }
                if basis.is_some() && let Some(w) = watchdog.as_mut() && let Err(e) = w.feed() {
                    tracing::error!(error = %e, "cannot feed the watchdog");
                }
                if basis != last_basis {
                    tell_basis(last_basis, basis, &shared, timing.isolation_timeout);
                    last_basis = basis;
                }
                let mut st = shared.status();
                st.feeding = basis.is_some();
                st.basis = basis;
            }
            _ = lookup.tick() => {
                follow_replicas(&options, &host, port, &mut links, &shared, &stop).await;
            }
            () = &mut shutdown => break,
        }
    }
    drop(api_task);
    drop(peers_task);
    // A clean stop: tell every replica this watchdog no longer counts, then disarm.
    let _ = stop_tx.send(true);
    let mut told = Vec::with_capacity(links.len());
    for (_, task) in links {
        told.push(matches!(
            tokio::time::timeout(Duration::from_secs(2), task).await,
            Ok(Ok(true))
        ));
    }
    let forget = || {
        if let Some(dir) = &shared.state_dir
            && let Err(e) = state::remove(dir)
        {
            tracing::warn!(error = %e, "cannot remove the kept state");
        }
    };
    let Some(w) = watchdog else {
        forget();
        return Ok(None); // Never armed: nothing to disarm.
    };
    if !may_disarm(told) {
        // Closed without the magic character: the timer runs on, and the state is kept
        // for the successor, which must feed it within its timeout.
        drop(w);
        tracing::warn!(
            "not every replica of nodefence acknowledged the stop: the watchdog is left \
             running (one still holds it armed); the next companion must start feeding it \
             within its timeout, or the machine is reset"
        );
        return Ok(Some(Disarmed::StillRunning));
    }
    let disarmed = w.disarm().context("cannot disarm the watchdog")?;
    if disarmed == Disarmed::StillRunning {
        // Kept: the next companion must feed it, also during a control-plane outage.
        tracing::warn!(
            "the watchdog cannot be stopped (nowayout): the next companion must start feeding \
             it within its timeout, or the machine is reset"
        );
    } else {
        forget();
    }
    Ok(Some(disarmed))
}

/// At a clean stop, whether the watchdog may be disarmed, given each listed replica's
/// answer to the "stopping" beat (true: acknowledged): only if every one did, and
/// there was one. A replica that did not may still hold the watchdog armed and, the
/// node marked, release it on that watchdog while the machine runs on unwatched (seed
/// 1971); the watchdog is then left counting for the successor.
pub fn may_disarm(acknowledged: impl IntoIterator<Item = bool>) -> bool {
    let mut any = false;
    for told in acknowledged {
        if !told {
            return false;
        }
        any = true;
    }
    any
}

/// Whether the watchdog may be armed now: feeding is allowed on `basis`, and every
/// basis of the rule can be held (`every_basis`: a replica told the cluster's size and
/// gave a peer key), unless `on_any_basis` (no state directory: a predecessor's
/// watchdog may be counting, and must be fed within W).
fn may_arm(basis: Option<Basis>, on_any_basis: bool, every_basis: bool) -> bool {
    basis.is_some() && (on_any_basis || every_basis)
}

/// Arms the watchdog asked for, now that feeding is first allowed; tells the beats and
/// the status. `None`: no watchdog (none asked, or none usable).
fn arm_now(choice: WatchdogChoice, shared: &Shared) -> Option<Box<dyn Watchdog>> {
    let armed = match arm(choice) {
        Ok(w) => w?,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "cannot arm the watchdog: beating without one");
            return None;
        }
    };
    let granted = armed.granted();
    *shared.watchdog.lock().unwrap_or_else(|e| e.into_inner()) = WatchdogState::Armed {
        granted,
        device: wire::DeviceName::new(&armed.info().identity),
    };
    shared.status().armed = Some((armed.info().identity.clone(), granted));
    tracing::info!(
        device = %armed.info().identity,
        granted_s = granted.as_secs_f64(),
        "feeding allowed: the watchdog is armed"
    );
    Some(armed)
}

/// Logs a change of what the feeding rests on (once per change).
fn tell_basis(was: Option<Basis>, now: Option<Basis>, shared: &Shared, isolation: Duration) {
    match (was, now) {
        (_, Some(Basis::ApiServer)) => tracing::warn!(
            silent_for_at_least = %humantime::format_duration(isolation / 2),
            "the leader does not acknowledge the beats: feeding on the API server's answer \
             (the Node carries no fencing mark for this boot)"
        ),
        (Some(Basis::ApiServer), Some(Basis::Leader)) => {
            tracing::info!("the leader acknowledges the beats again: feeding on its answer");
        }
        (_, Some(b)) => tracing::info!(basis = b.as_str(), "feeding the watchdog"),
        (Some(_), None) if shared.feeding().marked() => {}
        (Some(_), None) => tracing::warn!(
            "neither the leader nor the API server answers: the watchdog is no longer fed \
             (an armed one resets this machine at its timeout unless one answers first)"
        ),
        (None, None) => {}
    }
}

/// Opens the watchdog asked for, refusing one the rule cannot count on.
fn arm(choice: WatchdogChoice) -> anyhow::Result<Option<Box<dyn Watchdog>>> {
    match choice {
        WatchdogChoice::None => Ok(None),
        WatchdogChoice::Given(w) => Ok(Some(w)),
        WatchdogChoice::Device {
            path,
            timeout,
            allow_softdog,
        } => open_device(&path, timeout, allow_softdog),
    }
}

#[cfg(target_os = "linux")]
fn open_device(
    path: &std::path::Path,
    timeout: Duration,
    allow_softdog: bool,
) -> anyhow::Result<Option<Box<dyn Watchdog>>> {
    let w = match device::LinuxWatchdog::open(path, timeout) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(device = %path.display(), error = %e, "no watchdog: beating without one");
            return Ok(None);
        }
    };
    if let Err(refusal) = device::check(
        w.info(),
        timeout,
        w.granted(),
        MAX_WATCHDOG_TIMEOUT,
        allow_softdog,
    ) {
        let boxed: Box<dyn Watchdog> = Box::new(w);
        let _ = boxed.disarm();
        tracing::warn!(device = %path.display(), %refusal, "watchdog refused: beating without one");
        return Ok(None);
    }
    Ok(Some(Box::new(w)))
}

#[cfg(not(target_os = "linux"))]
fn open_device(
    path: &std::path::Path,
    _timeout: Duration,
    _allow_softdog: bool,
) -> anyhow::Result<Option<Box<dyn Watchdog>>> {
    tracing::warn!(device = %path.display(), "no watchdog support on this system");
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(cluster: u16, keys: usize) -> Shared {
        let peer_keys = (0..keys)
            .map(|i| {
                let addr = std::net::SocketAddr::from(([10, 0, 0, i as u8], 9443));
                (addr, Key([i as u8; 32]))
            })
            .collect();
        Shared::new(
            "w1".into(),
            &Timing::default(),
            Duration::from_millis(500),
            cluster,
            peer_keys,
            Arc::default(),
            None,
        )
    }

    /// Simulation seed 7850: a companion that fed on the API server's answer before
    /// any replica had told it the cluster's size armed its watchdog, and an outage of
    /// the whole control plane 10 s later reset the machine (it could not feed on its
    /// peers). Armed only once every basis can be held; without a state directory (a
    /// predecessor's watchdog may be counting) on the first basis, as before.
    #[test]
    fn the_watchdog_is_armed_only_once_the_peers_could_be_asked() {
        assert!(!shared(0, 1).can_hold_every_basis(), "no size told");
        assert!(!shared(5, 0).can_hold_every_basis(), "no peer key");
        assert!(shared(5, 1).can_hold_every_basis());
        for basis in [Basis::Leader, Basis::ApiServer, Basis::Peers] {
            assert!(!may_arm(Some(basis), false, false), "{basis:?}");
            assert!(may_arm(Some(basis), false, true), "{basis:?}");
            assert!(may_arm(Some(basis), true, false), "{basis:?}");
        }
        assert!(!may_arm(None, true, true), "never without a basis");
        // Told the size by an acknowledgement: the peers can be asked from then on.
        let s = shared(0, 1);
        s.told_cluster(5);
        assert!(s.can_hold_every_basis());
    }

    #[test]
    fn the_watchdog_is_disarmed_only_once_every_replica_acknowledged_the_stop() {
        assert!(may_disarm([true]));
        assert!(may_disarm([true, true]));
        assert!(!may_disarm([true, false]), "one replica may still count it");
        assert!(!may_disarm([false, true]));
        assert!(!may_disarm([]), "no replica listed: nobody was told");
    }
}
