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
//! The watchdog is fed from a thread of its own that waits on nothing but the clock
//! (`feeder`): the replicas' and the peers' names are looked up by tasks of their
//! own ([`resolve`]), the hellos, beats and acknowledgements run in one task per
//! replica (`replicas`), the API server's reads and the peers' rounds in theirs; each
//! only updates the state they share (`shared`), read on a clock that counts a
//! suspend ([`clock`]). A cluster DNS that stops answering delays the next lookup,
//! never a feed.
//!
//! The watchdog is armed only when feeding is first allowed: a node still marked when
//! its next companion starts (after the reset the mark caused) is not armed again
//! while the mark stands, so never reset in a loop; once the leader lifts it (the node
//! recovered, or was released), it arms. A driver that a crash of this process would
//! stop (no magic close, `nowayout` not set) is refused
//! ([`nodefence_watchdog::device::check`]). A clean stop first beats "stopping" (this
//! node's watchdog no longer counts), then disarms an armed watchdog with the magic
//! close; under `nowayout` it says that the next pod must take over within the
//! watchdog's timeout.
//!
//! Every replica gets its own session and the beats (the `--nodefence` name looked
//! up: a headless Service lists them all), so a standby's table is current when it
//! takes over; of their acknowledgements, only the leader's (not a standby's) counts.
//!
//! While neither the leader nor the API server answers, it asks its peers ([`peers`],
//! the rule's third basis): an outage of the whole control plane never resets the
//! fleet, and a node cut off alone is reset.
//!
//! Layout: `mod.rs` (the options and [`run`]), [`api`], [`clock`], `feeder`,
//! [`machine`], [`peers`], `replicas`, [`resolve`], `shared`, [`state`].

pub mod api;
pub mod clock;
mod feeder;
pub mod machine;
pub mod peers;
mod replicas;
pub mod resolve;
mod shared;
pub mod state;

use replicas::{RESOLVE_EVERY, first_hello, follow_replicas, link, replica_keys_of};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use nodefence_watchdog::device::{Disarmed, Watchdog};
use nodefence_watchdog::feeding::Basis;
use nodefence_watchdog::timing::Timing;
use tokio_util::task::AbortOnDropHandle;

pub use feeder::FEED_EVERY;
pub use resolve::Resolver;
use shared::Shared;

/// The longest watchdog timeout accepted: beyond it a release would wait minutes.
pub const MAX_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(60);

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
    /// How the replicas' and the peers' names become addresses (the system's
    /// resolver; tests give one that hangs).
    pub resolver: Resolver,
    /// Feed at real-time priority with the process's memory locked (`feeder`): the
    /// CLI does; tests, which share a process, do not.
    pub realtime: bool,
    /// This machine's boot ID (`/proc/sys/kernel/random/boot_id`), which every beat
    /// names: a release rests only on beats of the boot the Node reports, and a mark
    /// for another boot is void.
    pub boot_id: String,
    /// Whether the machine is a virtual one ([`machine`]).
    pub machine: machine::MachineKind,
}

impl WatchdogChoice {
    fn take(&mut self) -> WatchdogChoice {
        std::mem::replace(self, WatchdogChoice::None)
    }

    /// What arms it again after a disarm: the same device; a watchdog given (tests)
    /// only once.
    fn reopenable(&self) -> Option<WatchdogChoice> {
        match self {
            WatchdogChoice::Device {
                path,
                timeout,
                allow_softdog,
            } => Some(WatchdogChoice::Device {
                path: path.clone(),
                timeout: *timeout,
                allow_softdog: *allow_softdog,
            }),
            WatchdogChoice::None | WatchdogChoice::Given(_) => None,
        }
    }
}

/// What the companion reports while it runs (tests and logs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    pub node: Option<String>,
    pub acknowledged: u64,
    pub marked: bool,
    /// The device's identity and granted timeout, once armed (when feeding was first
    /// allowed and a replica had told the cluster's size, a peer key and its authority
    /// key).
    pub armed: Option<(String, Duration)>,
    pub feeding: bool,
    /// What the feeding rests on now.
    pub basis: Option<Basis>,
    /// Reads of the Node sent to the API server.
    pub api_reads: u64,
    /// The peers' addresses last looked up.
    pub peers_known: usize,
    /// Rounds of questions to the peers, and answers taken (a node's first of a round,
    /// or one that says it reaches the control plane after it said neither).
    pub peer_rounds: u64,
    pub peer_answers: u64,
    /// Answers refused: from an address not among the peers, malformed, or whose
    /// credential or signature does not verify.
    pub peer_answers_refused: u64,
    /// Credentials held (one per replica that issued one): this companion answers its
    /// peers only under one.
    pub credentials: usize,
    /// Feeds that completed later than the scheduling allowance after their decision.
    pub stalls: u64,
    /// What the latest leader's acknowledgement said of the node's policy: arm the
    /// watchdog (`None`: not told yet).
    pub arm_wanted: Option<bool>,
    /// The policy turned the level off: its beats say "disarming" until every
    /// replica acknowledged.
    pub disarming: bool,
    /// The highest leader's term taken; acknowledgements of an older one refused.
    pub term_seen: u64,
    pub older_terms_refused: u64,
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
    let armed_before = resumed.as_ref().is_some_and(|kept| kept.armed);
    let term_before = resumed.as_ref().map_or(0, |kept| kept.term_seen);
    // Its own key, which its answers to its peers are signed with: the predecessor's
    // (its credentials bind it), or a new one.
    let signing_key = match resumed.as_ref().and_then(|kept| kept.signing_key.clone()) {
        Some(key) => key,
        None => nodefence_watchdog::wire::SigningKey::generate()
            .context("no randomness for the companion's key")?,
    };
    let (first, node, isolation_timeout, interval, cluster, replica_keys) = match resumed {
        Some(kept) => {
            tracing::warn!(
                node = %kept.node,
                cluster = kept.cluster,
                replicas = kept.replicas.len(),
                credentials = kept.replicas.values().filter(|r| r.credential.is_some()).count(),
                "resuming after a predecessor's crash: its node, timing, cluster size, peer \
                 keys, authority keys and credentials, before any hello"
            );
            (
                None,
                kept.node,
                kept.isolation_timeout,
                kept.heartbeat_interval,
                kept.cluster,
                kept.replicas,
            )
        }
        None => {
            let (addr, hello, session) =
                first_hello(&options, &host, port, signing_key.public()).await;
            let keys = replica_keys_of(&hello, signing_key.public())
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
    let credentials = replica_keys
        .values()
        .filter(|r| r.credential.is_some())
        .count();
    let timing = Timing {
        isolation_timeout,
        ..Timing::default()
    };
    let virtual_machine = options.machine.resolve();
    if let Some(how) = &virtual_machine {
        tracing::warn!(
            %how,
            "this machine is a virtual one: a hypervisor that pauses it pauses its watchdog \
             too, and nodefence fences it by its watchdog only where the operator opted the \
             node in"
        );
    }
    let shared = Arc::new(
        Shared::new(
            node.clone(),
            &timing,
            interval,
            cluster,
            shared::PeerKeys {
                replicas: replica_keys,
                signing_key,
            },
            status.clone(),
            options.state_dir.clone(),
        )
        .with_identity(nodefence_watchdog::session::Identity {
            boot: nodefence_watchdog::wire::BootId::of(&options.boot_id),
            virtual_machine: virtual_machine.is_some(),
        }),
    );
    shared
        .armed_before
        .store(armed_before, std::sync::atomic::Ordering::SeqCst);
    shared.resume_term(term_before);
    shared.status().term_seen = term_before;
    shared.keep();
    shared.status().node = Some(node.clone());
    shared.status().credentials = credentials;
    tracing::info!(node = %node, "companion beating");
    // Armed only once feeding is first allowed (never, if marked before that), and
    // only once every basis of the feeding rule can be held: a replica told the
    // cluster's size and gave a peer key and its authority key. Armed on the API server's answer alone, a
    // companion that had not heard a replica yet (its node just rebooted, its link to
    // nodefence down) could not feed on its peers, and an outage of the whole control
    // plane a moment later reset a machine doing its work (simulation seed 7850).
    // A successor resumed from a predecessor that armed it has both in the kept state
    // (the predecessor armed only with them), and arms at once. Without a state
    // directory nothing says whether a predecessor's watchdog is counting: armed on the
    // first basis, as it must be fed within W.
    let (events_tx, events) = tokio::sync::mpsc::channel(64);
    let feeder = feeder::Feeder::start(
        shared.clone(),
        options.watchdog.take(),
        feeder::Settings {
            arm_on_any_basis: options.state_dir.is_none(),
            allowance: timing.scheduling_allowance,
            realtime: options.realtime,
        },
        events_tx,
    )
    .context("cannot start the thread that feeds the watchdog")?;
    // Stopped when dropped: at a clean stop, or with this future.
    let _tell = AbortOnDropHandle::new(tokio::spawn(feeder::tell(
        events,
        shared.clone(),
        timing.isolation_timeout,
    )));
    let api_task = options.api.take().map(|access| {
        AbortOnDropHandle::new(tokio::spawn(api::follow(
            access,
            node.clone(),
            options.boot_id.clone(),
            shared.clone(),
            timing.isolation_timeout / 2,
        )))
    });
    let peers_task = options.peers.take().map(|(socket, source)| {
        let (addresses, lookups) = peers::addresses(&source, &options.resolver);
        let answering = tokio::spawn(peers::follow(
            socket,
            addresses,
            shared.clone(),
            timing.isolation_timeout,
        ));
        (AbortOnDropHandle::new(answering), lookups)
    });
    let (mut replicas, _lookups) = match &options.replicas {
        Some(fixed) => (tokio::sync::watch::channel(fixed.clone()).1, None),
        None => {
            let (rx, task) = resolve::follow(
                options.resolver.clone(),
                host.clone(),
                port,
                RESOLVE_EVERY,
                resolve::LOOKUP_TIMEOUT,
                "nodefence's replicas",
            );
            (rx, Some(task))
        }
    };
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
        shared.set_replicas([first_addr]);
    }
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let now = replicas.borrow_and_update().clone();
        follow_replicas(&options, &host, &now, &mut links, &shared, &stop);
        tokio::select! {
            changed = replicas.changed() => {
                if changed.is_err() {
                    // A fixed list: it never changes.
                    (&mut shutdown).await;
                    break;
                }
            }
            () = &mut shutdown => break,
        }
    }
    drop(api_task);
    drop(peers_task);
    // A clean stop: tell every replica this watchdog no longer counts, then disarm. The
    // watchdog is fed by its rule meanwhile.
    let _ = stop_tx.send(true);
    let mut told = Vec::with_capacity(links.len());
    for (_, task) in links {
        told.push(matches!(
            tokio::time::timeout(Duration::from_secs(2), task).await,
            Ok(Ok(true))
        ));
    }
    let watchdog = feeder.stop().await;
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
    stop_watchdog(w, may_disarm(told), forget)
}

/// The end of a clean stop, once every replica was told (or not): disarms `w` if
/// `every_replica_told`, or leaves it counting for the successor.
fn stop_watchdog(
    w: Box<dyn Watchdog>,
    every_replica_told: bool,
    forget: impl FnOnce(),
) -> anyhow::Result<Option<Disarmed>> {
    if !every_replica_told {
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

#[cfg(test)]
mod tests {
    use super::*;

    use feeder::may_arm;
    use nodefence_watchdog::wire::{Key, PublicKey, SigningKey};

    /// `keys` replicas' keys, the first `authorities` of them with their authority's.
    fn shared_with(cluster: u16, keys: usize, authorities: usize) -> Shared {
        let replica_keys = (0..keys)
            .map(|i| {
                let addr = std::net::SocketAddr::from(([10, 0, 0, i as u8], 9443));
                let keys = state::ReplicaKeys {
                    peer: Key([i as u8; 32]),
                    authority: (i < authorities).then_some(PublicKey([i as u8; 32])),
                    credential: None,
                };
                (addr, keys)
            })
            .collect();
        Shared::new(
            "w1".into(),
            &Timing::default(),
            Duration::from_millis(500),
            cluster,
            shared::PeerKeys {
                replicas: replica_keys,
                signing_key: SigningKey::from_seed([9; 32]),
            },
            Arc::default(),
            None,
        )
    }

    fn shared(cluster: u16, keys: usize) -> Shared {
        shared_with(cluster, keys, keys)
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
        assert!(
            !shared_with(5, 1, 0).can_hold_every_basis(),
            "no authority key: no answer could be checked"
        );
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
