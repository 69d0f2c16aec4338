//! What a replica knows of every companion: its session (key, last sequence), when
//! its last beat arrived, its watchdog, its hold on the control plane, and what this
//! replica can prove of that hold ([`Heard`]). Every replica keeps it, the standbys
//! too, so a new leader does not start counting from its own first sight.
//!
//! Bounded: one session per node (a new hello replaces the old one), and nothing is
//! kept of a datagram that does not open under a session's key.
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
use nodefence_watchdog::wire::{self, Key, WatchdogState};

use crate::telemetry::CompanionSummary;

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
    pub heard: Heard,
    /// The largest cluster size this replica can prove the companion was told: the
    /// one in the latest acknowledgement its beats echo. It counts its peers'
    /// majority (the feeding rule's third basis) of at least this many.
    pub cluster_known: u16,
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
    /// the session it replaces names no session any more.
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
                entry.companion.session = session;
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
                        heard: Heard::default(),
                        cluster_known: 0,
                    },
                    node: node.to_string(),
                });
                self.nodes.insert(node.to_string(), at);
            }
        }
        session
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
        let result = self.take_beat(datagram, now, leader, marked);
        if let Err(why) = result {
            self.refused[why.index()] += 1;
        }
        result
    }

    fn take_beat(
        &mut self,
        datagram: &[u8],
        now: Duration,
        leader: bool,
        marked: impl Fn(&str) -> bool,
    ) -> Result<Vec<u8>, Dropped> {
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
        let marked = marked(node);
        let ack = end.acknowledge(&beat, leader, marked, now, cluster, membership);
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
            c.reaching = Reaching {
                held_for: beat.held_for,
                valid_for: beat.valid_for,
            };
            if let Some((_, ack_sent)) = beat.echo {
                c.heard.beat(&self.timing, now, ack_sent, c.reaching);
            }
            if leader && !marked {
                c.last_ack = Some(now);
            }
        }
        Ok(ack)
    }

    /// One node's companion.
    pub fn companion(&self, node: &str) -> Option<&Companion> {
        self.nodes
            .get(node)
            .and_then(|at| self.entries.get(*at))
            .map(|e| &e.companion)
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
        for (node, c) in self.companions() {
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
mod tests {
    use super::*;
    use nodefence_watchdog::session::CompanionEnd;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    const ARMED: WatchdogState = WatchdogState::Armed {
        granted: Duration::from_secs(10),
        device: nodefence_watchdog::wire::DeviceName::new("iTCO_wdt"),
    };

    #[test]
    fn a_beat_is_recorded_and_acknowledged_and_a_silence_is_seen() {
        let mut t = Table::new(Timing::default());
        let session = t.open("worker-1", 7 << 32, Key([1; 32]));
        let mut c = CompanionEnd::new(Key([1; 32]), session, Duration::from_secs(2));
        let ack = t
            .beat(
                &c.beat(ms(100), Reaching::default(), ARMED),
                ms(5_000),
                true,
                |_| false,
            )
            .unwrap_or_else(|e| panic!("{e:?}"));
        let taken = c
            .acknowledged(&ack, ms(120))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(taken.leader && !taken.marked);
        assert_eq!(taken.cluster, 1);
        let w1 = t
            .companion("worker-1")
            .unwrap_or_else(|| panic!("recorded"));
        assert_eq!(
            (w1.beats, w1.watchdog, w1.last_ack),
            (1, ARMED, Some(ms(5_000)))
        );
        assert!(t.silent(ms(6_999), Duration::from_secs(2)).is_empty());
        assert_eq!(
            t.silent(ms(7_000), Duration::from_secs(2)),
            [("worker-1".to_string(), ms(5_000))]
        );
        // Its last beat says it is stopping: left to the Lease.
        t.beat(
            &c.beat(ms(200), Reaching::default(), WatchdogState::Stopping),
            ms(7_100),
            true,
            |_| false,
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert!(t.silent(ms(60_000), Duration::from_secs(2)).is_empty());
    }

    #[test]
    fn nodes_of_the_watchdog_level_without_an_armed_beating_companion_are_unarmed() {
        let mut t = Table::new(Timing::default());
        let configured: std::collections::BTreeSet<String> = ["armed", "bare", "absent", "silent"]
            .into_iter()
            .map(String::from)
            .collect();
        let mut ends = Vec::new();
        for (i, (node, state)) in [
            ("armed", ARMED),
            ("bare", WatchdogState::None),
            ("silent", ARMED),
            ("not-configured", WatchdogState::None),
        ]
        .into_iter()
        .enumerate()
        {
            let session = t.open(node, (10 + i as u64) << 32, Key([2; 32]));
            let mut c = CompanionEnd::new(Key([2; 32]), session, Duration::from_secs(2));
            let at = if node == "silent" {
                ms(1_000)
            } else {
                ms(9_000)
            };
            t.beat(&c.beat(ms(1), Reaching::default(), state), at, true, |_| {
                false
            })
            .unwrap_or_else(|e| panic!("{e:?}"));
            ends.push(c);
        }
        assert_eq!(
            t.unarmed(&configured, ms(9_500), Duration::from_secs(2)),
            ["absent", "bare", "silent"]
        );
    }

    #[test]
    fn garbage_unknown_sessions_replays_and_forgeries_get_nothing() {
        let mut t = Table::new(Timing::default());
        let session = t.open("worker-1", 7 << 32, Key([1; 32]));
        let mut c = CompanionEnd::new(Key([1; 32]), session, Duration::from_secs(2));
        let first = c.beat(ms(100), Reaching::default(), ARMED);
        assert!(t.beat(&first, ms(1), true, |_| false).is_ok());
        assert_eq!(
            t.beat(&first, ms(2), true, |_| false),
            Err(Dropped::Rejected(Rejected::Replayed))
        );
        assert_eq!(
            t.beat(&[0u8; 5000], ms(2), true, |_| false),
            Err(Dropped::NotABeat)
        );
        assert_eq!(
            t.beat(b"hello", ms(2), true, |_| false),
            Err(Dropped::NotABeat)
        );
        // Another session id: one that names this node's place, and one that names none.
        for foreign in [8 << 32, session + 1] {
            let mut stranger = CompanionEnd::new(Key([1; 32]), foreign, Duration::from_secs(2));
            let beat = stranger.beat(ms(1), Reaching::default(), ARMED);
            assert_eq!(
                t.beat(&beat, ms(2), true, |_| false),
                Err(Dropped::NoSession),
                "session {foreign:#x}"
            );
        }
        // Another key, the right session, a sequence not seen yet.
        let mut forger = CompanionEnd::new(Key([9; 32]), session, Duration::from_secs(2));
        let _ = forger.beat(ms(1), Reaching::default(), ARMED);
        let forged = forger.beat(ms(3), Reaching::default(), ARMED);
        assert!(matches!(
            t.beat(&forged, ms(3), true, |_| false),
            Err(Dropped::Rejected(Rejected::Seal(_)))
        ));
        assert_eq!(t.companion("worker-1").map(|c| c.beats), Some(1));
        let s = t.summary(ms(10), Duration::from_secs(2));
        // not-a-beat twice, no-session twice, seal, replayed.
        assert_eq!(s.refused, [2, 2, 1, 0, 1, 0]);
        assert_eq!((s.beating, s.armed, s.stopped), (1, 1, 0));
        assert_eq!(s.oldest_beat_seconds, 0.009);
        let s = t.summary(ms(3_000), Duration::from_secs(2));
        assert_eq!(
            (s.beating, s.silent.as_slice()),
            (0, ["worker-1".to_string()].as_slice())
        );
    }

    #[test]
    fn a_marked_node_is_told_and_a_standby_never_acknowledges_as_leader() {
        let mut t = Table::new(Timing::default());
        let session = t.open("worker-1", 7 << 32, Key([1; 32]));
        let mut c = CompanionEnd::new(Key([1; 32]), session, Duration::from_secs(2));
        let ack = t
            .beat(
                &c.beat(ms(1), Reaching::default(), ARMED),
                ms(1),
                true,
                |n| n == "worker-1",
            )
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert!(
            c.acknowledged(&ack, ms(2))
                .unwrap_or_else(|e| panic!("{e}"))
                .marked
        );
        assert_eq!(t.companion("worker-1").and_then(|c| c.last_ack), None);
        let ack = t
            .beat(
                &c.beat(ms(3), Reaching::default(), ARMED),
                ms(3),
                false,
                |_| false,
            )
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert!(
            !c.acknowledged(&ack, ms(4))
                .unwrap_or_else(|e| panic!("{e}"))
                .leader
        );
        // A new session replaces the node's old one, even one drawn with its id.
        let next = t.open("worker-1", 7 << 32, Key([2; 32]));
        assert_ne!(next, session);
        assert_eq!(
            t.beat(
                &c.beat(ms(5), Reaching::default(), ARMED),
                ms(5),
                true,
                |_| false
            ),
            Err(Dropped::NoSession)
        );
        assert_eq!(t.membership(), 2, "one node joined once");
    }

    #[test]
    fn the_cluster_size_never_shrinks_and_what_a_companion_was_told_is_proven_by_its_echo() {
        let mut t = Table::new(Timing::default());
        let session = t.open("worker-1", 1 << 32, Key([1; 32]));
        t.open("worker-2", 2 << 32, Key([2; 32]));
        t.set_nodes_in_cluster(3);
        let mut c = CompanionEnd::new(Key([1; 32]), session, Duration::from_secs(2));
        let beat = |c: &mut CompanionEnd, t: &mut Table, at: u64| {
            let ack = t
                .beat(
                    &c.beat(ms(at), Reaching::default(), ARMED),
                    ms(at),
                    true,
                    |_| false,
                )
                .unwrap_or_else(|e| panic!("{e:?}"));
            c.acknowledged(&ack, ms(at))
                .unwrap_or_else(|e| panic!("{e}"))
                .cluster
        };
        // The Nodes counted, not only the companions known.
        assert_eq!(beat(&mut c, &mut t, 100), 3);
        assert_eq!(t.cluster(), 3);
        let known = |t: &Table| t.companion("worker-1").map(|c| c.cluster_known);
        assert_eq!(known(&t), Some(0), "no acknowledgement echoed yet");
        // Two Nodes join: acknowledgements say 5 from now on.
        t.set_nodes_in_cluster(5);
        assert_eq!(t.cluster(), 5);
        // This beat echoes the acknowledgement that said 3: proven told 3, not 5.
        assert_eq!(beat(&mut c, &mut t, 200), 5);
        assert_eq!(known(&t), Some(3));
        // The next echoes the one that said 5.
        beat(&mut c, &mut t, 300);
        assert_eq!(known(&t), Some(5));
        // A Node deleted: the size does not shrink (a companion may still count on 5).
        t.set_nodes_in_cluster(4);
        assert_eq!((t.cluster(), beat(&mut c, &mut t, 400)), (5, 5));
    }
}
