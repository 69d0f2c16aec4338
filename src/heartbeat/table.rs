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
        let mut ack = Vec::new();
        self.beat_into(datagram, now, leader, marked, &mut ack)?;
        Ok(ack)
    }

    /// [`Table::beat`], the acknowledgement sealed at the end of `out` (nothing
    /// written there when there is none): the beats' loop keeps one buffer for a
    /// batch's acknowledgements rather than allocate one for each.
    pub fn beat_into(
        &mut self,
        datagram: &[u8],
        now: Duration,
        leader: bool,
        marked: impl Fn(&str) -> bool,
        out: &mut Vec<u8>,
    ) -> Result<(), Dropped> {
        let result = self.take_beat(datagram, now, leader, marked, out);
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
        let marked = marked(node);
        end.acknowledge_into(&beat, leader, marked, now, cluster, membership, out);
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

    proptest::proptest! {
        /// Whatever the beats, hellos and looks, and whenever they come, a look that
        /// skips the walk gives what the walk would have: the answer it last gave.
        #[test]
        fn a_look_without_a_walk_finds_what_a_walk_would(
            steps in proptest::collection::vec((0u8..4, 0usize..5, 0u64..1_500), 1..120)
        ) {
            let timeout = Duration::from_secs(1);
            let mut t = Table::new(Timing::default());
            let mut watch = SilenceWatch::default();
            let mut ends: Vec<Option<CompanionEnd>> = (0..5).map(|_| None).collect();
            let (mut now, mut sent) = (Duration::ZERO, Duration::ZERO);
            let mut last_answer: Option<Vec<(String, Duration)>> = None;
            for (what, node, wait) in steps {
                now += ms(wait);
                sent += ms(1);
                let name = format!("worker-{node}");
                match what {
                    // A hello (a new session, or one replacing its last).
                    0 => {
                        let session = t.open(&name, 9 << 32, Key([3; 32]));
                        ends[node] =
                            Some(CompanionEnd::new(Key([3; 32]), session, Duration::from_secs(2)));
                    }
                    // A beat, now and then saying the companion stops.
                    1 | 2 => {
                        if let Some(c) = ends[node].as_mut() {
                            let state = if what == 2 && wait % 3 == 0 {
                                WatchdogState::Stopping
                            } else {
                                ARMED
                            };
                            let _ = t.beat(&c.beat(sent, Reaching::default(), state), now, true, |_| false);
                        }
                    }
                    // A look.
                    _ => {
                        let walked = t.silent(now, timeout);
                        match t.silent_if_changed(&mut watch, now, timeout) {
                            Some(found) => {
                                proptest::prop_assert_eq!(&found, &walked);
                                last_answer = Some(found);
                            }
                            None => proptest::prop_assert_eq!(last_answer.as_ref(), Some(&walked)),
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn warming_a_batch_changes_nothing_whatever_its_datagrams() {
        let mut t = Table::new(Timing::default());
        let session = t.open("worker-1", 7 << 32, Key([1; 32]));
        let mut c = CompanionEnd::new(Key([1; 32]), session, Duration::from_secs(2));
        let beat = c.beat(ms(100), Reaching::default(), ARMED);
        // A session id naming a place past the table's end, garbage, an oversized one.
        let mut stranger = beat.clone();
        stranger[6..14].copy_from_slice(&(u64::from(u32::MAX) | 5 << 32).to_be_bytes());
        let batch: [&[u8]; 4] = [&beat, &stranger, b"garbage", &[0u8; 5000]];
        t.warm(batch.iter().copied());
        assert_eq!(t.companion("worker-1").map(|c| c.beats), Some(0));
        // And the beat is answered as if nothing had read it.
        assert!(t.beat(&beat, ms(200), true, |_| false).is_ok());
        assert_eq!(t.companion("worker-1").map(|c| c.beats), Some(1));
    }

    #[test]
    fn a_look_walks_only_when_a_silence_may_have_begun_or_ended() {
        let timeout = Duration::from_secs(2);
        let mut t = Table::new(Timing::default());
        let mut watch = SilenceWatch::default();
        let mut ends = Vec::new();
        for (i, node) in ["worker-1", "worker-2"].into_iter().enumerate() {
            let session = t.open(node, (20 + i as u64) << 32, Key([4; 32]));
            ends.push(CompanionEnd::new(
                Key([4; 32]),
                session,
                Duration::from_secs(2),
            ));
        }
        let mut beat = |t: &mut Table, i: usize, at: u64| {
            t.beat(
                &ends[i].beat(ms(at), Reaching::default(), ARMED),
                ms(at),
                true,
                |_| false,
            )
            .unwrap_or_else(|e| panic!("{e:?}"));
        };
        beat(&mut t, 0, 1_000);
        beat(&mut t, 1, 1_500);
        // The first look walks; the next ones do not until worker-1's beat is 2 s old.
        assert_eq!(
            t.silent_if_changed(&mut watch, ms(1_600), timeout),
            Some(vec![])
        );
        assert_eq!(t.silent_if_changed(&mut watch, ms(2_999), timeout), None);
        assert_eq!(
            t.silent_if_changed(&mut watch, ms(3_000), timeout),
            Some(vec![("worker-1".to_string(), ms(1_000))])
        );
        // Still silent; worker-2 beat again, but the walk counted from its last beat
        // it saw (1.5 s): nothing new before 3.5 s.
        beat(&mut t, 1, 3_100);
        assert_eq!(t.silent_if_changed(&mut watch, ms(3_400), timeout), None);
        // worker-1 beats again: the next look walks and finds no one.
        beat(&mut t, 0, 3_600);
        assert_eq!(
            t.silent_if_changed(&mut watch, ms(3_700), timeout),
            Some(vec![])
        );
        assert_eq!(t.silent_if_changed(&mut watch, ms(3_800), timeout), None);
        // Another timeout: a walk.
        assert_eq!(
            t.silent_if_changed(&mut watch, ms(3_900), Duration::from_millis(100)),
            Some(vec![
                ("worker-1".to_string(), ms(3_600)),
                ("worker-2".to_string(), ms(3_100))
            ])
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
