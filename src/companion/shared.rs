//! What the companion's parts share: the feeding rule's state, the status, the
//! watchdog's state for the beats, the cluster's size, what each replica gave for the
//! peers and this companion's own key (kept for a successor), and the clock they all
//! read.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nodefence_watchdog::feeding::Feeding;
use nodefence_watchdog::session::Identity;
use nodefence_watchdog::timing::Timing;
use nodefence_watchdog::wire::{Credential, Key, PublicKey, SigningKey, WatchdogState};

use super::clock::BootClock;
use super::state::ReplicaKeys;
use super::{Status, peers, state};

/// What a companion holds for its peers: what each replica gave, and its own key.
pub(super) struct PeerKeys {
    pub(super) replicas: std::collections::BTreeMap<SocketAddr, ReplicaKeys>,
    pub(super) signing_key: SigningKey,
}

/// What every replica's link, the API and peers' tasks and the feeding thread share.
/// Its locks are held for a few reads or writes of memory, never across I/O.
pub(super) struct Shared {
    pub(super) feeding: std::sync::Mutex<Feeding>,
    pub(super) status: Arc<std::sync::Mutex<Status>>,
    /// What the beats say of the watchdog: `None` until it is armed.
    pub(super) watchdog: std::sync::Mutex<WatchdogState>,
    pub(super) clock: BootClock,
    pub(super) interval: Duration,
    /// When the latest beat the leader acknowledged without the mark was sent, or,
    /// before any, when the companion began to beat (its clock).
    pub(super) leader_heard: std::sync::Mutex<Duration>,
    /// The largest cluster size an acknowledgement carried: a peer majority is
    /// counted of at least this many.
    pub(super) cluster: std::sync::atomic::AtomicU16,
    /// What each replica gave at its last hello for the peers, by its address.
    pub(super) replica_keys: std::sync::Mutex<std::collections::BTreeMap<SocketAddr, ReplicaKeys>>,
    /// This companion's own key: its answers to its peers are signed with it, under
    /// the credentials the replicas issued it.
    pub(super) signing_key: SigningKey,
    /// Its node and timing, and where they are kept with the size and the keys.
    pub(super) node: String,
    pub(super) isolation_timeout: Duration,
    pub(super) state_dir: Option<PathBuf>,
    /// What its beats say of its machine (boot, virtual or not).
    pub(super) identity: Identity,
    /// When this process began (its clock).
    pub(super) started: Duration,
    /// The highest term a leader's acknowledgement it took was of: a leader's of an
    /// older term is refused.
    pub(super) term_seen: AtomicU64,
    /// Whether the node's policy wants the watchdog armed, as the latest leader's
    /// acknowledgement said (`None`: not told yet).
    pub(super) arm_wanted: std::sync::Mutex<Option<bool>>,
    /// A predecessor of this process armed the watchdog (the kept state says so): it
    /// may still count, and is fed by the rule before the policy is heard.
    pub(super) armed_before: std::sync::atomic::AtomicBool,
    /// The replicas beaten to now (a link each).
    pub(super) replicas: std::sync::Mutex<BTreeSet<SocketAddr>>,
    /// While the watchdog is being disarmed (the policy turned the level off): since
    /// when its beats say so, and the replicas that acknowledged a beat sent since.
    pub(super) disarming: std::sync::Mutex<Option<(Duration, BTreeSet<SocketAddr>)>>,
}

impl Shared {
    /// A companion for `node` that has heard the leader just now (its clock starts
    /// here), nothing armed.
    pub(super) fn new(
        node: String,
        timing: &Timing,
        interval: Duration,
        cluster: u16,
        keys: PeerKeys,
        status: Arc<std::sync::Mutex<Status>>,
        state_dir: Option<PathBuf>,
    ) -> Self {
        let clock = BootClock::start();
        let started = clock.now();
        Shared {
            feeding: std::sync::Mutex::new(Feeding::new(timing)),
            status,
            watchdog: std::sync::Mutex::new(WatchdogState::None),
            clock,
            interval: interval.max(Duration::from_millis(50)),
            leader_heard: std::sync::Mutex::new(started),
            cluster: std::sync::atomic::AtomicU16::new(cluster),
            replica_keys: std::sync::Mutex::new(keys.replicas),
            signing_key: keys.signing_key,
            node,
            isolation_timeout: timing.isolation_timeout,
            state_dir,
            identity: Identity::default(),
            started,
            term_seen: AtomicU64::new(0),
            arm_wanted: std::sync::Mutex::new(None),
            armed_before: std::sync::atomic::AtomicBool::new(false),
            replicas: std::sync::Mutex::new(BTreeSet::new()),
            disarming: std::sync::Mutex::new(None),
        }
    }

    /// The same, its beats telling `identity`.
    pub(super) fn with_identity(mut self, identity: Identity) -> Self {
        self.identity = identity;
        self
    }

    /// A leader's acknowledgement of `term` arrived: whether it may be taken (its
    /// term is no older than one taken before), and, if so, `term` is the one taken.
    /// A newer term is kept before it is taken (a successor refuses the older ones).
    pub(super) fn take_term(&self, term: u64) -> bool {
        let before = self.term_seen.fetch_max(term, Ordering::SeqCst);
        if term > before {
            self.keep();
        }
        term >= before
    }

    /// The term a predecessor took (the kept state): an older one is refused.
    pub(super) fn resume_term(&self, term: u64) {
        self.term_seen.fetch_max(term, Ordering::SeqCst);
    }

    pub(super) fn term_seen(&self) -> u64 {
        self.term_seen.load(Ordering::SeqCst)
    }

    /// What the latest leader's acknowledgement said of the node's policy.
    pub(super) fn told_arm(&self, arm: bool) {
        *self.arm_wanted.lock().unwrap_or_else(|e| e.into_inner()) = Some(arm);
    }

    pub(super) fn arm_wanted(&self) -> Option<bool> {
        *self.arm_wanted.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The replicas beaten to now.
    pub(super) fn set_replicas(&self, replicas: impl IntoIterator<Item = SocketAddr>) {
        *self.replicas.lock().unwrap_or_else(|e| e.into_inner()) = replicas.into_iter().collect();
    }

    /// The replica at `replica` acknowledged the beat sent at `beat_sent`: if the
    /// beats said "disarming" by then, it knows this watchdog no longer counts.
    pub(super) fn acknowledged_by(&self, replica: SocketAddr, beat_sent: Duration) {
        let mut disarming = self.disarming.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((since, told)) = disarming.as_mut()
            && beat_sent >= *since
        {
            told.insert(replica);
        }
    }

    /// Whether every replica beaten to (one at least) acknowledged a beat that said
    /// "disarming".
    pub(super) fn every_replica_told_disarming(&self) -> bool {
        let replicas = self.replicas.lock().unwrap_or_else(|e| e.into_inner());
        let disarming = self.disarming.lock().unwrap_or_else(|e| e.into_inner());
        disarming
            .as_ref()
            .is_some_and(|(_, told)| !replicas.is_empty() && replicas.is_subset(told))
    }

    /// The companion's clock ([`BootClock`]): every time the feeding rule reads.
    pub(super) fn now(&self) -> Duration {
        self.clock.now()
    }

    pub(super) fn feeding(&self) -> std::sync::MutexGuard<'_, Feeding> {
        self.feeding.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn status(&self) -> std::sync::MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the beats say of the watchdog from now on.
    pub(super) fn set_watchdog(&self, state: WatchdogState) {
        *self.watchdog.lock().unwrap_or_else(|e| e.into_inner()) = state;
    }

    /// Whether this companion answers its peers yet: not during its first isolation
    /// timeout. A leader may still count its predecessor's hold on the control plane
    /// (a crashed process's, whose successor resumed from the kept state) up to an
    /// isolation timeout after that predecessor's last beat; an answer "neither" from
    /// the successor within it would be one the leader proved could not be given.
    pub(super) fn may_answer_peers(&self) -> bool {
        self.now().saturating_sub(self.started) >= self.isolation_timeout
    }

    pub(super) fn watchdog(&self) -> WatchdogState {
        *self.watchdog.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn leader_heard(&self) -> Duration {
        *self.leader_heard.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn cluster(&self) -> u16 {
        self.cluster.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A replica told the cluster's size and gave a peer key and its authority key:
    /// the peers can be asked, and their answers checked (the feeding rule's third
    /// basis), so the watchdog may be armed.
    pub(super) fn can_hold_every_basis(&self) -> bool {
        self.cluster() > 0 && !self.authorities().is_empty()
    }

    /// An acknowledgement said the cluster has `size` companions' Nodes.
    pub(super) fn told_cluster(&self, size: u16) {
        let before = self
            .cluster
            .fetch_max(size, std::sync::atomic::Ordering::Relaxed);
        if size > before {
            self.keep();
        }
    }

    /// Writes what a successor needs ([`state`]), when a state directory is given.
    pub(super) fn keep(&self) {
        let Some(dir) = &self.state_dir else {
            return;
        };
        let kept = state::Kept {
            node: self.node.clone(),
            isolation_timeout: self.isolation_timeout,
            heartbeat_interval: self.interval,
            cluster: self.cluster(),
            replicas: self.replica_keys().clone(),
            signing_key: Some(self.signing_key.clone()),
            armed: self.armed_before.load(Ordering::SeqCst),
            term_seen: self.term_seen(),
        };
        if let Err(e) = state::save(dir, &kept) {
            tracing::error!(error = %e, "cannot keep the companion's state: a crash during a control-plane outage would leave its successor unable to ask its peers");
        }
    }

    fn replica_keys(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<SocketAddr, ReplicaKeys>> {
        self.replica_keys.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The peer keys held, each once (a question is sealed under each).
    pub(super) fn peer_keys(&self) -> Vec<Key> {
        peers::distinct(self.replica_keys().values().map(|r| r.peer.clone()))
    }

    /// The replicas' authority keys held, each once (an answer counts under a
    /// credential one of them signed).
    pub(super) fn authorities(&self) -> Vec<PublicKey> {
        let mut out: Vec<PublicKey> = self
            .replica_keys()
            .values()
            .filter_map(|r| r.authority)
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Each peer key with the credential the same replica issued: a question that
    /// opens under the key is answered with that credential (its asker holds that
    /// replica's authority key).
    pub(super) fn answer_keys(&self) -> Vec<(Key, Credential)> {
        self.replica_keys()
            .values()
            .filter_map(|r| Some((r.peer.clone(), r.credential.clone()?)))
            .collect()
    }

    /// A hello to the replica at `replica` gave these keys (`None`: no peer key).
    pub(super) fn keep_replica_keys(&self, replica: SocketAddr, keys: Option<ReplicaKeys>) {
        let Some(keys) = keys else {
            return;
        };
        let (before, credentials) = {
            let mut held = self.replica_keys();
            let before = held.insert(replica, keys.clone());
            let credentials = held.values().filter(|r| r.credential.is_some()).count();
            (before, credentials)
        };
        self.status().credentials = credentials;
        if before.as_ref() != Some(&keys) {
            self.keep();
        }
    }

    /// The leader acknowledged, without the mark, the beat sent at `beat_sent`.
    pub(super) fn heard_leader(&self, beat_sent: Duration) {
        let mut heard = self.leader_heard.lock().unwrap_or_else(|e| e.into_inner());
        *heard = (*heard).max(beat_sent);
    }
}
