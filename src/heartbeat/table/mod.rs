//! What a replica knows of every companion: its session (key, last sequence), when
//! its last beat arrived, its watchdog, its hold on the control plane, and what this
//! replica can prove of that hold ([`Heard`]). Every replica keeps it, the standbys
//! too, so a new leader does not start counting from its own first sight.
//!
//! Bounded: one session per node (a new hello replaces the old one), and nothing is
//! kept of a datagram that does not open under a session's key.
//!
//! What it proves of a companion's hold counts only what the companion could not have
//! said otherwise: a new hello (maybe a new process) starts it over; a mark ends it at
//! the mark (from the moment acknowledgements carry it the companion may answer its
//! peers "neither"), no beat extends it while the mark stands, and after a lift none
//! begins before the lift ([`Table::mark`], [`Table::unmark`]).
//!
//! Laid out for the beat (10,000 a second from 5,000 companions, none of which stays
//! in the cache between two of its beats): a session id carries its node's place in
//! the table in its low 32 bits, and that place holds the session's end beside the
//! companion, so a beat reads one region of memory found with no lookup.

use std::collections::BTreeMap;
use std::time::Duration;

use nodefence_watchdog::feeding::Reaching;
use nodefence_watchdog::release::Heard;
use nodefence_watchdog::session::{Rejected, ReplicaEnd};
use nodefence_watchdog::timing::Timing;
use nodefence_watchdog::wire::{self, BootId, Key, WatchdogState};

use crate::telemetry::CompanionSummary;

mod skew;
pub use skew::PAUSE_TOLERANCE;
use skew::SkewWatch;

/// One node's companion, as this replica sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Companion {
    pub session: u64,
    /// This replica's clock when the last beat arrived.
    pub last_beat: Option<Duration>,
    pub beats: u64,
    pub watchdog: WatchdogState,
    pub reaching: Reaching,
    /// This replica's clock when it last acknowledged a beat without the mark.
    pub last_ack: Option<Duration>,
    /// The boot the beat acknowledged then named: a watchdog a later boot's companion
    /// reports armed proves nothing of the wait counted from that acknowledgement.
    pub last_ack_boot: Option<BootId>,
    pub heard: Heard,
    /// The largest cluster size this replica can prove the companion was told: the
    /// one in the latest acknowledgement its beats echo. It counts its peers'
    /// majority (the feeding rule's third basis) of at least this many.
    pub cluster_known: u16,
    /// This replica's mark of the node, as `heard` counts it.
    pub mark: Mark,
    /// What the session's beats say of the machine: its boot (`None`: none heard in
    /// this session, or a version 2 companion's, which names none), whether it is a
    /// virtual machine, the layout they come in.
    pub boot: Option<BootId>,
    pub virtual_machine: bool,
    pub version: u8,
    /// The highest leader's term its beats say it took.
    pub term_seen: u64,
    /// The boot its last hello named (`None`: an older companion, or none yet).
    pub hello_boot: Option<BootId>,
    /// This replica's clock against the companion's ([`SkewWatch`]).
    skew: SkewWatch,
}

/// A node's mark as this replica set it (its clock), for what [`Heard`] may count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mark {
    /// Since when the node is marked, while it is.
    pub since: Option<Duration>,
    /// When its mark was last lifted.
    pub lifted: Option<Duration>,
}

/// Why this replica stopped acknowledging beats as the leader's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Suspicion {
    /// A companion's clock ran on while this replica's stood still.
    Paused { node: String },
    /// A companion took a leader's acknowledgement of a newer term than this one's.
    NewerTerm { node: String, term: u64, ours: u64 },
}

impl std::fmt::Display for Suspicion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Suspicion::Paused { node } => write!(
                f,
                "the beats of {node}'s companion show this replica's clock stood still while \
                 the companion's ran (a paused VM, a stopped process)"
            ),
            Suspicion::NewerTerm { node, term, ours } => write!(
                f,
                "{node}'s companion took a leader's acknowledgement of term {term}, newer than \
                 this replica's {ours}: another replica leads"
            ),
        }
    }
}

/// Why a datagram got no acknowledgement (counted, never answered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// Not a beat, or longer than any datagram.
    NotABeat,
    /// No session of that id.
    NoSession,
    Rejected(Rejected),
}

impl Dropped {
    /// A metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Dropped::NotABeat => "not-a-beat",
            Dropped::NoSession => "no-session",
            Dropped::Rejected(Rejected::Seal(_)) => "seal",
            Dropped::Rejected(Rejected::Session) => "session",
            Dropped::Rejected(Rejected::Replayed) => "replayed",
            Dropped::Rejected(Rejected::Unknown) => "unknown",
        }
    }

    /// Its place in the `reason` labels of `nodefence_companion_datagrams_refused_total`.
    fn index(self) -> usize {
        match self {
            Dropped::NotABeat => 0,
            Dropped::NoSession => 1,
            Dropped::Rejected(Rejected::Seal(_)) => 2,
            Dropped::Rejected(Rejected::Session) => 3,
            Dropped::Rejected(Rejected::Replayed) => 4,
            Dropped::Rejected(Rejected::Unknown) => 5,
        }
    }
}

/// One node's place in the table.
#[derive(Debug)]
struct Entry {
    /// Its session's end (the session id is `companion.session`).
    end: ReplicaEnd,
    companion: Companion,
    node: String,
}

/// The place in [`Table`]'s entries a session id names (its low 32 bits).
fn place_of(session: u64) -> usize {
    usize::try_from(session & u64::from(u32::MAX)).unwrap_or(usize::MAX)
}

/// Every companion's session and beats.
#[derive(Debug)]
pub struct Table {
    timing: Timing,
    /// node → its place in `entries` (in order, for listing).
    nodes: BTreeMap<String, usize>,
    /// Every node's companion and its session's end, in the order they first said
    /// hello (never removed): a beat finds its node by session id alone
    /// ([`place_of`]), with no name compared or copied and no lookup.
    entries: Vec<Entry>,
    /// Bumped when the set of nodes with a companion changes.
    membership: u64,
    /// The cluster's Nodes, as the leader's Node watch last counted them.
    nodes_in_cluster: u16,
    /// The cluster size the acknowledgements carried from each time on (this
    /// replica's clock): never smaller than before, so a peer majority counted by a
    /// companion on an older size is never smaller than one counted on a newer.
    cluster_history: Vec<(Duration, u16)>,
    /// Datagrams refused, by [`Dropped::index`].
    refused: [u64; 6],
    /// A beat showed this replica stood still, or named a newer term than the one it
    /// leads in: it acknowledges no more beats as the leader's until its leadership
    /// was told ([`Table::take_suspicion`]).
    suspicion: Option<Suspicion>,
    /// The marks of nodes with no companion yet, taken by its first hello.
    unseen_marks: BTreeMap<String, Mark>,
}

impl Table {
    pub fn new(timing: Timing) -> Self {
        Self {
            timing,
            nodes: BTreeMap::new(),
            entries: Vec::new(),
            membership: 1,
            nodes_in_cluster: 0,
            cluster_history: Vec::new(),
            refused: [0; 6],
            suspicion: None,
            unseen_marks: BTreeMap::new(),
        }
    }

    /// The cluster's Nodes, counted by the leader's Node watch: every companion runs
    /// on one, so every peer that could answer a companion is counted.
    pub fn set_nodes_in_cluster(&mut self, nodes: usize) {
        self.nodes_in_cluster = u16::try_from(nodes).unwrap_or(u16::MAX);
    }

    /// The cluster size acknowledgements carry from `now` on: the largest of the
    /// Nodes counted, the companions known, and every size carried before.
    fn cluster_at_now(&mut self, now: Duration) -> u16 {
        let known = u16::try_from(self.nodes.len()).unwrap_or(u16::MAX);
        let last = self.cluster_history.last().map_or(0, |(_, c)| *c);
        let size = last.max(known).max(self.nodes_in_cluster);
        if size > last {
            self.cluster_history.push((now, size));
        }
        size
    }

    /// The cluster size the rule counts with now: what acknowledgements carry.
    pub fn cluster(&self) -> usize {
        let known = u16::try_from(self.nodes.len()).unwrap_or(u16::MAX);
        let last = self.cluster_history.last().map_or(0, |(_, c)| *c);
        usize::from(last.max(known).max(self.nodes_in_cluster))
    }

    /// A new session for `node` (replacing its last one), its key `key`: its id, the
    /// high 32 bits of `drawn` (random) and the node's place in the table. A beat of
    /// the session it replaces names no session any more. A hello may come from a new
    /// process: what the last one reported and what this replica proved of its hold
    /// start over (a watchdog it said was armed is not known to be any more; one that
    /// said it was stopping stays so, its node left to its Lease until the next
    /// beat, as before the hello); its last beat (the silence), its last
    /// acknowledgement (a later anchor is only safer) and its mark stay.
    pub fn open(&mut self, node: &str, drawn: u64, key: Key) -> u64 {
        let at = self.nodes.get(node).copied().unwrap_or(self.entries.len());
        let high = drawn & !u64::from(u32::MAX);
        let place = u64::try_from(at).unwrap_or(u64::MAX) & u64::from(u32::MAX);
        let mut session = high | place;
        match self.entries.get_mut(at) {
            Some(entry) => {
                if entry.companion.session == session {
                    // Never the id it replaces.
                    session ^= 1 << 32;
                }
                let c = &mut entry.companion;
                c.session = session;
                if c.watchdog != WatchdogState::Stopping {
                    c.watchdog = WatchdogState::None;
                }
                c.reaching = Reaching::default();
                c.heard = Heard::default();
                c.cluster_known = 0;
                c.boot = None;
                c.term_seen = 0;
                entry.end = ReplicaEnd::new(key, session);
            }
            None => {
                self.membership += 1;
                self.entries.push(Entry {
                    end: ReplicaEnd::new(key, session),
                    companion: Companion {
                        session,
                        last_beat: None,
                        beats: 0,
                        watchdog: WatchdogState::None,
                        reaching: Reaching::default(),
                        last_ack: None,
                        last_ack_boot: None,
                        heard: Heard::default(),
                        cluster_known: 0,
                        mark: self.unseen_marks.remove(node).unwrap_or_default(),
                        boot: None,
                        virtual_machine: false,
                        version: 0,
                        term_seen: 0,
                        hello_boot: None,
                        skew: SkewWatch::default(),
                    },
                    node: node.to_string(),
                });
                self.nodes.insert(node.to_string(), at);
            }
        }
        session
    }

    /// The node's companion's hello (the session just opened) named `boot`.
    pub fn said_hello(&mut self, node: &str, boot: Option<BootId>) {
        if let Some(at) = self.nodes.get(node).copied()
            && let Some(entry) = self.entries.get_mut(at)
        {
            entry.companion.hello_boot = boot;
        }
    }

    /// Nothing proven of the node's companion's hold counts any more (its mark was
    /// found, written at a time this replica does not know).
    pub fn forget_hold(&mut self, node: &str) {
        if let Some(at) = self.nodes.get(node).copied()
            && let Some(entry) = self.entries.get_mut(at)
        {
            entry.companion.heard = Heard::default();
        }
    }

    /// The node's acknowledgements carry the mark from `now` on (this replica's clock;
    /// before the mark is written to the Node, so also before its companion can read
    /// it there): what this replica proved of its companion's hold ends now, and no
    /// beat extends it while the mark stands. A node already marked stays as it is.
    pub fn mark(&mut self, node: &str, now: Duration) {
        let Some(c) = self.companion_mut(node) else {
            let mark = self.unseen_marks.entry(node.to_string()).or_default();
            mark.since.get_or_insert(now);
            return;
        };
        if c.mark.since.is_none() {
            c.mark.since = Some(now);
            c.heard.end_at(now);
        }
    }

    /// The node's mark is lifted `now`: its beats prove its hold again, never from
    /// before now. A node not marked stays as it is.
    pub fn unmark(&mut self, node: &str, now: Duration) {
        let mark = match self.nodes.get(node).copied() {
            Some(at) => self.entries.get_mut(at).map(|e| &mut e.companion.mark),
            None => self.unseen_marks.get_mut(node),
        };
        if let Some(mark) = mark
            && mark.since.take().is_some()
        {
            mark.lifted = Some(now);
        }
    }

    /// Whether this replica marks the node now.
    pub fn marked(&self, node: &str) -> bool {
        match self.companion(node) {
            Some(c) => c.mark.since.is_some(),
            None => self
                .unseen_marks
                .get(node)
                .is_some_and(|m| m.since.is_some()),
        }
    }

    fn companion_mut(&mut self, node: &str) -> Option<&mut Companion> {
        let at = *self.nodes.get(node)?;
        self.entries.get_mut(at).map(|e| &mut e.companion)
    }

    /// A datagram received `now` (this replica's clock): the acknowledgement to send
    /// back, or why none. `leader`: whether this replica leads; `marked`: whether the
    /// node is marked for fencing.
    pub fn beat(
        &mut self,
        datagram: &[u8],
        now: Duration,
        leader: bool,
        marked: impl Fn(&str) -> bool,
    ) -> Result<Vec<u8>, Dropped> {
        let mut ack = Vec::new();
        self.beat_into(
            datagram,
            now,
            leader.then_some(1),
            marked,
            |_| false,
            &mut ack,
        )?;
        Ok(ack)
    }

    /// Why the last beats were not acknowledged as the leader's, once (the caller
    /// tells its leadership: [`crate::cluster::leader::Leadership::suspect`]).
    pub fn take_suspicion(&mut self) -> Option<Suspicion> {
        self.suspicion.take()
    }

    /// [`Table::beat`], the acknowledgement sealed at the end of `out` (nothing
    /// written there when there is none): the beats' loop keeps one buffer for a
    /// batch's acknowledgements rather than allocate one for each.
    ///
    /// `leader`: the term this replica leads in (its fencing token), if it leads;
    /// `marked`, `arm`: whether the node is marked for fencing, and whether its
    /// policy has the watchdog level on. A standby's acknowledgement carries neither
    /// the mark nor `arm`: only the leader's count.
    pub fn beat_into(
        &mut self,
        datagram: &[u8],
        now: Duration,
        leader: Option<u64>,
        marked: impl Fn(&str) -> bool,
        arm: impl Fn(&str) -> bool,
        out: &mut Vec<u8>,
    ) -> Result<(), Dropped> {
        let result = self.take_beat(datagram, now, leader, marked, arm, out);
        if let Err(why) = result {
            self.refused[why.index()] += 1;
        }
        result
    }

    fn take_beat(
        &mut self,
        datagram: &[u8],
        now: Duration,
        leader: Option<u64>,
        marked: impl Fn(&str) -> bool,
        arm: impl Fn(&str) -> bool,
        out: &mut Vec<u8>,
    ) -> Result<(), Dropped> {
        if datagram.len() > wire::MAX_DATAGRAM || wire::kind(datagram) != Some(wire::BEAT_KIND) {
            return Err(Dropped::NotABeat);
        }
        let id = wire::session_of(datagram).ok_or(Dropped::NotABeat)?;
        let cluster = self.cluster_at_now(now);
        let membership = self.membership;
        let Entry {
            end,
            companion: c,
            node,
        } = self
            .entries
            .get_mut(place_of(id))
            .filter(|e| e.companion.session == id)
            .ok_or(Dropped::NoSession)?;
        let beat = end.beat(datagram).map_err(Dropped::Rejected)?;
        // Before it is answered: a beat that shows this replica stood still, or took
        // a newer term, is not acknowledged as the leader's, nor is any after it.
        if let Some(boot) = beat.boot
            && c.skew.beat(&self.timing, boot, beat.sent, now)
        {
            self.suspicion
                .get_or_insert(Suspicion::Paused { node: node.clone() });
        }
        if let Some(term) = leader
            && beat.term_seen > term
        {
            self.suspicion.get_or_insert(Suspicion::NewerTerm {
                node: node.clone(),
                term: beat.term_seen,
                ours: term,
            });
        }
        let leader = leader.filter(|_| self.suspicion.is_none());
        // A standby never marks: an old leader's marks, kept, would alternate with the
        // new leader's lifts.
        let marked = leader.is_some() && marked(node);
        end.acknowledge_into(
            &beat,
            &nodefence_watchdog::session::Answer {
                leader,
                marked,
                arm: leader.is_some() && arm(node),
                now,
                cluster,
                membership,
            },
            out,
        );
        let echoed_cluster = beat
            .echo
            .map(|(_, sent)| cluster_sent_at(&self.cluster_history, sent));
        {
            if let Some(size) = echoed_cluster {
                c.cluster_known = c.cluster_known.max(size);
            }
            c.last_beat = Some(now);
            c.beats += 1;
            c.watchdog = beat.watchdog;
            c.boot = beat.boot;
            c.virtual_machine = beat.virtual_machine;
            c.version = beat.version;
            c.term_seen = c.term_seen.max(beat.term_seen);
            c.reaching = Reaching {
                held_for: beat.held_for,
                valid_for: beat.valid_for,
            };
            // Marked, the companion may answer "neither" (it does once it learns the
            // mark): nothing proven while the mark stands, nothing before its lift.
            if let Some((_, ack_sent)) = beat.echo
                && !marked
                && c.mark.since.is_none()
            {
                let lifted = c.mark.lifted.unwrap_or_default();
                c.heard
                    .beat_since(&self.timing, now, ack_sent, c.reaching, lifted);
            }
            if leader.is_some() && !marked {
                c.last_ack = Some(now);
                c.last_ack_boot = beat.boot;
            }
        }
        Ok(())
    }

    /// Reads the entry of each datagram's session (its session's end and its
    /// companion), all of a batch before any of it is answered: their cache misses
    /// (none of 5,000 entries stays cached between two of its beats) overlap instead
    /// of coming one at a time. Read only; what it reads is thrown away.
    pub fn warm<'a>(&self, datagrams: impl Iterator<Item = &'a [u8]>) {
        for d in datagrams {
            if let Some(e) = wire::session_of(d).and_then(|id| self.entries.get(place_of(id))) {
                std::hint::black_box((e.end.clone(), e.companion.clone(), e.node.len()));
            }
        }
    }

    /// One node's companion.
    pub fn companion(&self, node: &str) -> Option<&Companion> {
        self.nodes
            .get(node)
            .and_then(|at| self.entries.get(*at))
            .map(|e| &e.companion)
    }

    /// What this replica proved of every companion but `node`'s, for the release
    /// rule. A companion marked now is left out: it may answer "neither".
    pub fn others_heard<'a>(&'a self, node: &'a str) -> impl Iterator<Item = &'a Heard> + 'a {
        self.companions()
            .filter(move |(n, c)| n.as_str() != node && c.mark.since.is_none())
            .map(|(_, c)| &c.heard)
    }

    /// Every node with a companion, by name.
    pub fn companions(&self) -> impl Iterator<Item = (&String, &Companion)> {
        self.nodes
            .iter()
            .filter_map(|(n, at)| self.entries.get(*at).map(|e| (n, &e.companion)))
    }

    /// Nodes whose companion was beating and has been silent for `timeout` by `now`,
    /// with when it was last heard. A companion that said it was stopping (a clean
    /// stop, a rolling update) is not silent: its node is left to its Lease.
    pub fn silent(&self, now: Duration, timeout: Duration) -> Vec<(String, Duration)> {
        // The entries in place (ten scans a second over every companion: no map walk).
        self.entries
            .iter()
            .filter(|e| e.companion.watchdog != WatchdogState::Stopping)
            .filter_map(|e| {
                e.companion
                    .last_beat
                    .filter(|t| now.saturating_sub(*t) >= timeout)
                    .map(|t| (e.node.clone(), t))
            })
            .collect()
    }

    /// [`Table::silent`], or `None` when it is the answer `watch` last gave: told
    /// without a walk over every companion (ten looks a second at 5,000 would each
    /// miss the cache 5,000 times). It is, until the first moment a companion that
    /// was not silent at the last walk could be (its last beat plus `timeout`; one
    /// that beats after the walk, at `timeout` after it), unless one of those that
    /// were silent beat since. The beats' clock is read under the table's lock, so a
    /// beat taken after a walk is never counted as older than it.
    pub fn silent_if_changed(
        &self,
        watch: &mut SilenceWatch,
        now: Duration,
        timeout: Duration,
    ) -> Option<Vec<(String, Duration)>> {
        let same = watch.timeout == timeout
            && watch.quiet_until.is_some_and(|until| now < until)
            && watch.silent.iter().all(|(at, last)| {
                self.entries
                    .get(*at)
                    .is_some_and(|e| e.companion.last_beat == Some(*last))
            });
        if same {
            return None;
        }
        let mut quiet_until = now.saturating_add(timeout);
        watch.silent.clear();
        let mut silent = Vec::new();
        for (at, e) in self.entries.iter().enumerate() {
            let Some(last) = e.companion.last_beat else {
                continue;
            };
            if e.companion.watchdog == WatchdogState::Stopping {
                continue;
            }
            if now.saturating_sub(last) >= timeout {
                watch.silent.push((at, last));
                silent.push((e.node.clone(), last));
            } else {
                quiet_until = quiet_until.min(last.saturating_add(timeout));
            }
        }
        watch.timeout = timeout;
        watch.quiet_until = Some(quiet_until);
        Some(silent)
    }

    pub fn membership(&self) -> u64 {
        self.membership
    }

    /// Of `configured` (the nodes whose policy has the watchdog level), those whose
    /// companion is not beating with an armed watchdog at `now`: no companion, silent,
    /// stopped, or one without a watchdog. Their level cannot fence them.
    pub fn unarmed(
        &self,
        configured: &std::collections::BTreeSet<String>,
        now: Duration,
        timeout: Duration,
    ) -> Vec<String> {
        configured
            .iter()
            .filter(|node| {
                !self.companion(node).is_some_and(|c| {
                    matches!(c.watchdog, WatchdogState::Armed { .. })
                        && c.last_beat.is_some_and(|t| now.saturating_sub(t) < timeout)
                })
            })
            .cloned()
            .collect()
    }

    /// The table summed up for the metrics, at `now` with `timeout`.
    pub fn summary(&self, now: Duration, timeout: Duration) -> CompanionSummary {
        let mut s = CompanionSummary {
            refused: self.refused,
            ..CompanionSummary::default()
        };
        let mut oldest = Duration::ZERO;
        // The entries in place, not by name (once a second over every companion).
        for Entry {
            companion: c, node, ..
        } in &self.entries
        {
            let Some(last) = c.last_beat else { continue };
            let age = now.saturating_sub(last);
            if c.watchdog == WatchdogState::Stopping {
                s.stopped += 1;
            } else if age >= timeout {
                s.silent.push(node.clone());
            } else {
                s.beating += 1;
                if matches!(c.watchdog, WatchdogState::Armed { .. }) {
                    s.armed += 1;
                }
                oldest = oldest.max(age);
            }
        }
        s.oldest_beat_seconds = oldest.as_secs_f64();
        s
    }
}

/// What [`Table::silent_if_changed`] found at its last walk over the companions.
#[derive(Debug, Default)]
pub struct SilenceWatch {
    timeout: Duration,
    /// Before this (the table's clock), no companion that was not silent at the walk
    /// can be; `None`: no walk yet.
    quiet_until: Option<Duration>,
    /// The silent ones: their place in the table and their last beat.
    silent: Vec<(usize, Duration)>,
}

/// The cluster size the acknowledgement sent at `sent` carried (`history`: the
/// size carried from each time on).
fn cluster_sent_at(history: &[(Duration, u16)], sent: Duration) -> u16 {
    let after = history.partition_point(|(t, _)| *t <= sent);
    after
        .checked_sub(1)
        .and_then(|i| history.get(i))
        .map_or(0, |(_, c)| *c)
}

#[cfg(test)]
mod tests;
