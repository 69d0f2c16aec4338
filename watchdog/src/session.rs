//! The two ends of one heartbeat session (one companion, one nodefence replica, one
//! key), and what each accepts.
//!
//! The replica ([`ReplicaEnd`]) accepts a beat only under the session's key and with a
//! sequence above every one seen (a replayed or reordered beat is dropped), and learns
//! from it the companion's report and which of its own acknowledgements it echoes.
//!
//! The companion ([`CompanionEnd`]) accepts an acknowledgement only under the key,
//! for a beat it sent and has not had acknowledged yet (a replayed, duplicated or
//! invented acknowledgement is refused), and counts it from when *it* sent that beat,
//! by its own record, whatever the acknowledgement says. It remembers the beats of
//! the last `isolation_timeout` only: an acknowledgement of an older beat would buy
//! nothing anyway. Its beats name its boot and machine ([`Identity`]) and the highest
//! leader's term it took ([`CompanionEnd::heard_term`]); whether a leader's
//! acknowledgement is of a term too old to take is its caller's to say (the term seen
//! is the whole process's, over every replica's session).

use std::collections::VecDeque;
use std::time::Duration;

use crate::feeding::Reaching;
use crate::wire::{Ack, Beat, BootId, Key, PreparedKey, Refused, VERSION, WatchdogState};

/// Why an acknowledgement or a beat, well sealed, is not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// Not sealed for this session (forged, another session's, garbage).
    Seal(Refused),
    /// Another session's.
    Session,
    /// A beat whose sequence is not above every one seen (replayed or reordered).
    Replayed,
    /// An acknowledgement of no beat sent and outstanding (replayed, duplicated,
    /// invented, or older than the isolation timeout).
    Unknown,
}

impl std::fmt::Display for Rejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rejected::Seal(r) => write!(f, "{r}"),
            Rejected::Session => f.write_str("another session's"),
            Rejected::Replayed => f.write_str("replayed or reordered"),
            Rejected::Unknown => f.write_str("no outstanding beat has that sequence"),
        }
    }
}

/// An acknowledgement the companion took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acknowledged {
    /// When the companion sent the beat answered (its clock, its own record).
    pub beat_sent: Duration,
    pub leader: bool,
    pub marked: bool,
    pub cluster: u16,
    pub membership: u64,
    /// The leader's term (0: not a leader's).
    pub term: u64,
    /// The node's policy wants its watchdog armed (a leader's only).
    pub arm: bool,
}

/// What every beat of a companion says of its machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Identity {
    /// The boot it runs.
    pub boot: BootId,
    /// A hypervisor was detected.
    pub virtual_machine: bool,
}

/// The companion's end of a session.
#[derive(Debug)]
pub struct CompanionEnd {
    key: PreparedKey,
    session: u64,
    next_seq: u64,
    /// Beats sent within the isolation timeout, not yet acknowledged: (seq, sent).
    outstanding: VecDeque<(u64, Duration)>,
    window: Duration,
    /// The last acknowledgement taken: the beat it answered, the replica's clock.
    echo: Option<(u64, Duration)>,
    identity: Identity,
    /// The highest leader's term this companion took, as its beats tell.
    term_seen: u64,
}

impl CompanionEnd {
    /// A session the replica opened with `key` and `session`; beats older than
    /// `window` (the isolation timeout) are forgotten.
    pub fn new(key: Key, session: u64, window: Duration) -> Self {
        Self {
            key: PreparedKey::from(&key),
            session,
            next_seq: 1,
            outstanding: VecDeque::new(),
            window,
            echo: None,
            identity: Identity::default(),
            term_seen: 0,
        }
    }

    /// The same end, its beats telling `identity`.
    pub fn with_identity(mut self, identity: Identity) -> Self {
        self.identity = identity;
        self
    }

    /// Its beats tell `identity` from now on.
    pub fn set_identity(&mut self, identity: Identity) {
        self.identity = identity;
    }

    /// The companion took a leader's acknowledgement of `term` (through any session):
    /// its beats say so from now on.
    pub fn heard_term(&mut self, term: u64) {
        self.term_seen = self.term_seen.max(term);
    }

    /// The next beat, sealed, sent `now`.
    pub fn beat(&mut self, now: Duration, reaching: Reaching, watchdog: WatchdogState) -> Vec<u8> {
        self.forget(now);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.outstanding.push_back((seq, now));
        Beat {
            session: self.session,
            seq,
            sent: now,
            echo: self.echo,
            held_for: reaching.held_for,
            valid_for: reaching.valid_for,
            watchdog,
            version: VERSION,
            boot: Some(self.identity.boot),
            term_seen: self.term_seen,
            virtual_machine: self.identity.virtual_machine,
        }
        .seal(&self.key)
    }

    /// An acknowledgement received `now`.
    pub fn acknowledged(
        &mut self,
        datagram: &[u8],
        now: Duration,
    ) -> Result<Acknowledged, Rejected> {
        let ack = Ack::open(datagram, &self.key).map_err(Rejected::Seal)?;
        if ack.session != self.session {
            return Err(Rejected::Session);
        }
        self.forget(now);
        let Some(at) = self
            .outstanding
            .iter()
            .position(|(seq, _)| *seq == ack.beat_seq)
        else {
            return Err(Rejected::Unknown);
        };
        let (seq, sent) = self.outstanding[at];
        // It and every older beat: an older acknowledgement arriving later buys less.
        self.outstanding.drain(..=at);
        self.echo = Some((seq, ack.sent));
        Ok(Acknowledged {
            beat_sent: sent,
            leader: ack.leader,
            marked: ack.marked,
            cluster: ack.cluster,
            membership: ack.membership,
            term: ack.term,
            arm: ack.arm,
        })
    }

    fn forget(&mut self, now: Duration) {
        while self
            .outstanding
            .front()
            .is_some_and(|(_, sent)| now.saturating_sub(*sent) >= self.window)
        {
            self.outstanding.pop_front();
        }
    }
}

/// The replica's end of a session.
#[derive(Debug, Clone)]
pub struct ReplicaEnd {
    key: PreparedKey,
    session: u64,
    last_seq: u64,
}

impl ReplicaEnd {
    pub fn new(key: Key, session: u64) -> Self {
        Self {
            key: PreparedKey::from(&key),
            session,
            last_seq: 0,
        }
    }

    /// A beat received.
    pub fn beat(&mut self, datagram: &[u8]) -> Result<Beat, Rejected> {
        let beat = Beat::open(datagram, &self.key).map_err(Rejected::Seal)?;
        if beat.session != self.session {
            return Err(Rejected::Session);
        }
        if beat.seq <= self.last_seq {
            return Err(Rejected::Replayed);
        }
        self.last_seq = beat.seq;
        Ok(beat)
    }

    /// The acknowledgement of `beat`, sealed, sent `now` (this replica's clock):
    /// `leader` a leader's of term 1 (tests; the table says its term).
    pub fn acknowledge(
        &self,
        beat: &Beat,
        leader: bool,
        marked: bool,
        now: Duration,
        cluster: u16,
        membership: u64,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        let answer = Answer {
            leader: leader.then_some(1),
            marked,
            arm: false,
            now,
            cluster,
            membership,
        };
        self.acknowledge_into(beat, &answer, &mut out);
        out
    }

    /// The acknowledgement of `beat` as `answer` says, sealed at the end of `out` (a
    /// buffer the caller keeps for a batch of them), in the beat's layout: a version 2
    /// beat gets a version 2 acknowledgement (no term, no `arm`).
    pub fn acknowledge_into(&self, beat: &Beat, answer: &Answer, out: &mut Vec<u8>) {
        let leader = answer.leader.filter(|term| *term > 0);
        Ack {
            session: self.session,
            beat_seq: beat.seq,
            beat_sent: beat.sent,
            leader: leader.is_some(),
            marked: answer.marked,
            sent: answer.now,
            cluster: answer.cluster,
            membership: answer.membership,
            version: beat.version,
            term: leader.unwrap_or(0),
            arm: leader.is_some() && answer.arm,
        }
        .seal_into(&self.key, out);
    }
}

/// What a replica answers a beat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// The term this replica leads in, its fencing token; `None`: it does not lead.
    pub leader: Option<u64>,
    pub marked: bool,
    /// The node's policy has the watchdog level on.
    pub arm: bool,
    /// This replica's clock.
    pub now: Duration,
    pub cluster: u16,
    pub membership: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn pair() -> (CompanionEnd, ReplicaEnd) {
        let key = Key([3; 32]);
        (
            CompanionEnd::new(key.clone(), 17, Duration::from_secs(2)),
            ReplicaEnd::new(key, 17),
        )
    }

    const ARMED: WatchdogState = WatchdogState::Armed {
        granted: Duration::from_secs(10),
        device: crate::wire::DeviceName::new("iTCO_wdt"),
    };

    #[test]
    fn a_beat_and_its_acknowledgement_count_from_the_companions_own_send_time() {
        let (mut c, mut r) = pair();
        let sent = c.beat(ms(1_000), Reaching::default(), ARMED);
        let beat = r.beat(&sent).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((beat.seq, beat.echo), (1, None));
        let ack = r.acknowledge(&beat, true, false, ms(50_000), 3, 1);
        let taken = c
            .acknowledged(&ack, ms(1_200))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(taken.beat_sent, ms(1_000));
        assert!(taken.leader && !taken.marked);
        // The next beat echoes it, with the replica's clock.
        let next = r
            .beat(&c.beat(ms(1_500), Reaching::default(), ARMED))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(next.echo, Some((1, ms(50_000))));
    }

    #[test]
    fn replayed_duplicated_forged_and_stale_acknowledgements_are_refused() {
        let (mut c, mut r) = pair();
        let b1 = r
            .beat(&c.beat(ms(1_000), Reaching::default(), ARMED))
            .unwrap_or_else(|e| panic!("{e}"));
        let ack1 = r.acknowledge(&b1, true, false, ms(10), 3, 1);
        assert!(c.acknowledged(&ack1, ms(1_100)).is_ok());
        assert_eq!(
            c.acknowledged(&ack1, ms(1_200)),
            Err(Rejected::Unknown),
            "replayed"
        );
        // Forged: another key.
        let forged = ReplicaEnd::new(Key([4; 32]), 17).acknowledge(&b1, true, false, ms(10), 3, 1);
        assert!(matches!(
            c.acknowledged(&forged, ms(1_200)),
            Err(Rejected::Seal(_))
        ));
        // An acknowledgement of a beat never sent.
        let invented = Beat {
            seq: 99,
            ..b1.clone()
        };
        let ack99 = r.acknowledge(&invented, true, false, ms(10), 3, 1);
        assert_eq!(c.acknowledged(&ack99, ms(1_200)), Err(Rejected::Unknown));
        // Stale: a beat older than the isolation timeout is forgotten.
        let b2 = r
            .beat(&c.beat(ms(2_000), Reaching::default(), ARMED))
            .unwrap_or_else(|e| panic!("{e}"));
        let late = r.acknowledge(&b2, true, false, ms(20), 3, 1);
        assert_eq!(c.acknowledged(&late, ms(4_000)), Err(Rejected::Unknown));
        // Another session's (right key, other id).
        let other = ReplicaEnd::new(Key([3; 32]), 18).acknowledge(&b2, true, false, ms(20), 3, 1);
        assert_eq!(c.acknowledged(&other, ms(2_100)), Err(Rejected::Session));
    }

    #[test]
    fn an_older_acknowledgement_after_a_newer_one_is_refused() {
        let (mut c, mut r) = pair();
        let b1 = r
            .beat(&c.beat(ms(1_000), Reaching::default(), ARMED))
            .unwrap_or_else(|e| panic!("{e}"));
        let b2 = r
            .beat(&c.beat(ms(1_500), Reaching::default(), ARMED))
            .unwrap_or_else(|e| panic!("{e}"));
        let a1 = r.acknowledge(&b1, true, false, ms(10), 3, 1);
        let a2 = r.acknowledge(&b2, true, false, ms(11), 3, 1);
        assert_eq!(
            c.acknowledged(&a2, ms(1_600)).map(|a| a.beat_sent),
            Ok(ms(1_500))
        );
        assert_eq!(c.acknowledged(&a1, ms(1_700)), Err(Rejected::Unknown));
    }

    #[test]
    fn a_replayed_or_reordered_beat_is_refused() {
        let (mut c, mut r) = pair();
        let first = c.beat(ms(1_000), Reaching::default(), ARMED);
        let second = c.beat(ms(1_500), Reaching::default(), ARMED);
        assert!(r.beat(&second).is_ok());
        assert_eq!(r.beat(&first), Err(Rejected::Replayed), "reordered");
        assert_eq!(r.beat(&second), Err(Rejected::Replayed), "replayed");
        let garbage = vec![0u8; 100];
        assert!(matches!(r.beat(&garbage), Err(Rejected::Seal(_))));
    }
}
