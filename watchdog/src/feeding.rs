//! The companion's feeding rule: when it may feed its node's hardware watchdog.
//!
//! The companion feeds only while one of three answers is fresh, each for
//! `isolation_timeout` (I) on its own monotonic clock, counted from when it *sent*
//! the beat or request that was answered (a late answer buys nothing extra):
//!
//! - **leader**: the leader acknowledged a beat and has not marked the node for
//!   fencing;
//! - **API server**: the API server answered a read of the node's fencing mark, and
//!   there is none (nodefence down, upgrading or failing over never reboots anything);
//! - **peers**: a strict majority of the cluster's companions, itself included, say
//!   they reach neither the leader nor the API server either (an outage of the whole
//!   control plane never reboots the fleet; a node cut off alone, or with a minority,
//!   gets no such majority).
//!
//! A mark, from the leader or the API server, stops feeding at once (the poison
//! pill), and for as long as it stands: only the leader lifts it, by acknowledging
//! without the mark a beat sent *after* the companion learned of it (the node
//! recovered, or its machine was proven reset and this companion is its next boot's;
//! seed 4610: a companion started on the new boot before the leader had cleared the
//! old boot's mark never fed, never armed, and left its node without the watchdog
//! level for good). An answer to an earlier beat, the API server's and the peers'
//! never lift it; the leader's release rule counts from its last acknowledgement
//! without the mark, so a lifted mark only delays a release. A mark learned also
//! ends the hold reported to the leader (below) at once: a marked companion answers
//! its peers "neither", and after a lift its hold starts over from the lift.
//!
//! A feed that reached the device later than the scheduling allowance after the
//! decision to feed it ([`Feeding::stalled`]: the companion was starved of CPU,
//! stopped, or blocked in the write) is outside what the leader's wait counts. The
//! companion then holds nothing it was told before (no answer, no hold) and counts no
//! answer to a request it sent before that feed landed: whatever it held may have run
//! out while it could not look. A mark is still learned from any answer, however old
//! its request: a mark only stops feeding.
//!
//! The companion also tells: peers, whether it reaches the leader or the API server
//! itself ([`Feeding::reach`]); the leader, in each beat, how long it has held one of
//! those two answers without a gap and how much longer the freshest one holds
//! ([`Feeding::reaching`]), from which the leader proves that it could not have told
//! a peer "neither" during a window ([`super::release`]). Pure: times are readings of
//! the companion's monotonic clock, given by the caller.

use std::time::Duration;

use super::timing::Timing;

/// What keeps a companion feeding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Basis {
    Leader,
    ApiServer,
    Peers,
}

impl Basis {
    pub fn as_str(self) -> &'static str {
        match self {
            Basis::Leader => "leader",
            Basis::ApiServer => "api-server",
            Basis::Peers => "peers",
        }
    }
}

/// What a companion answers a peer that asks whether it reaches the control plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reach {
    Leader,
    ApiServer,
    Neither,
}

/// The rule of the peers' answer: `neither` companions, the asking one included, of
/// `cluster` reach neither the leader nor the API server. A strict majority only.
pub fn peers_majority(neither: usize, cluster: usize) -> bool {
    neither.saturating_mul(2) > cluster
}

/// What the companion has been told, and until when it holds (its monotonic clock).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Feeding {
    isolation: Duration,
    leader: Option<Duration>,
    api: Option<Duration>,
    peers: Option<Duration>,
    /// When it last learned of a mark (its clock), while the mark stands.
    marked: Option<Duration>,
    /// The leader or API answers held without a gap: since when, until when.
    reaching: Option<(Duration, Duration)>,
    /// No answer to a request sent before this counts (the end of the last stall).
    floor: Duration,
}

/// Reported in each beat: the companion's hold on the leader or the API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Reaching {
    /// How long it has held one without a gap, up to now.
    pub held_for: Duration,
    /// How much longer the freshest one holds.
    pub valid_for: Duration,
}

impl Feeding {
    pub fn new(timing: &Timing) -> Self {
        Self {
            isolation: timing.isolation_timeout,
            leader: None,
            api: None,
            peers: None,
            marked: None,
            reaching: None,
            floor: Duration::ZERO,
        }
    }

    /// The leader answered the beat sent at `beat_sent_at`, received `now`.
    /// `marked`: the acknowledgement carries the mark. The leader's answer without it
    /// to a beat sent after the companion learned of the mark lifts the mark.
    pub fn acknowledged(&mut self, beat_sent_at: Duration, marked: bool, now: Duration) {
        if marked {
            self.learn_mark(now);
            return;
        }
        if beat_sent_at < self.floor {
            return;
        }
        match self.marked {
            Some(at) if beat_sent_at <= at => return,
            Some(_) => self.marked = None,
            None => {}
        }
        let until = beat_sent_at.saturating_add(self.isolation);
        extend(&mut self.leader, until);
        self.reached(now, until);
    }

    /// The API server answered the read of the mark sent at `sent_at`, received `now`.
    pub fn api_answered(&mut self, sent_at: Duration, marked: bool, now: Duration) {
        if marked {
            self.learn_mark(now);
            return;
        }
        if self.marked.is_some() || sent_at < self.floor {
            return;
        }
        let until = sent_at.saturating_add(self.isolation);
        extend(&mut self.api, until);
        self.reached(now, until);
    }

    /// The peers asked at `sent_at` answered: `neither` of them (this companion not
    /// counted) reach neither the leader nor the API server, of `cluster` companions
    /// (this one counted).
    pub fn peers_answered(&mut self, sent_at: Duration, neither: usize, cluster: usize) {
        if sent_at >= self.floor && peers_majority(neither.saturating_add(1), cluster) {
            extend(&mut self.peers, sent_at.saturating_add(self.isolation));
        }
    }

    /// A feed of the watchdog completed at `at`, later than the scheduling allowance
    /// after the decision to feed it: every answer held so far is dropped, and no
    /// answer to a request sent before `at` counts any more (a mark still does).
    pub fn stalled(&mut self, at: Duration) {
        self.leader = None;
        self.api = None;
        self.peers = None;
        self.reaching = None;
        self.floor = self.floor.max(at);
    }

    /// Whether the companion may feed its watchdog `now`, and on what.
    pub fn may_feed(&self, now: Duration) -> Option<Basis> {
        if self.marked.is_some() {
            return None;
        }
        [
            (self.leader, Basis::Leader),
            (self.api, Basis::ApiServer),
            (self.peers, Basis::Peers),
        ]
        .into_iter()
        .find_map(|(until, basis)| until.is_some_and(|u| now < u).then_some(basis))
    }

    /// Until when (its clock) it may feed on what it has been told so far, if at all:
    /// the latest answer's end, or `None` once marked.
    pub fn feeding_until(&self) -> Option<Duration> {
        if self.marked.is_some() {
            return None;
        }
        [self.leader, self.api, self.peers]
            .into_iter()
            .flatten()
            .max()
    }

    /// The node is marked for fencing (and the leader has not lifted the mark).
    pub fn marked(&self) -> bool {
        self.marked.is_some()
    }

    /// What it answers a peer `now`. A marked companion says "neither": it no longer
    /// counts on the control plane.
    pub fn reach(&self, now: Duration) -> Reach {
        if self.marked.is_some() {
            Reach::Neither
        } else if self.leader.is_some_and(|u| now < u) {
            Reach::Leader
        } else if self.api.is_some_and(|u| now < u) {
            Reach::ApiServer
        } else {
            Reach::Neither
        }
    }

    /// Its hold on the leader or the API server `now`, for a beat.
    pub fn reaching(&self, now: Duration) -> Reaching {
        match self.reaching {
            Some((since, until)) if now < until && self.marked.is_none() => Reaching {
                held_for: now.saturating_sub(since),
                valid_for: until - now,
            },
            _ => Reaching::default(),
        }
    }

    /// The same knowledge without what can no longer matter `now`: answers that have
    /// run out, a hold that has ended. Nothing it answers changes.
    pub fn forget_expired(&mut self, now: Duration) {
        for slot in [&mut self.leader, &mut self.api, &mut self.peers] {
            if slot.is_some_and(|u| u <= now) {
                *slot = None;
            }
        }
        if self.reaching.is_some_and(|(_, until)| until <= now) {
            self.reaching = None;
        }
    }

    /// The same knowledge read on a clock set `by` earlier, so that a state can be
    /// kept relative to now (the model check does): times before its origin become
    /// the origin (a hold held since then is held "at least that long").
    pub fn shifted_back(&self, by: Duration) -> Self {
        let shift = |t: Option<Duration>| t.map(|t| t.saturating_sub(by));
        Self {
            isolation: self.isolation,
            leader: shift(self.leader),
            api: shift(self.api),
            peers: shift(self.peers),
            marked: shift(self.marked),
            reaching: self
                .reaching
                .map(|(since, until)| (since.saturating_sub(by), until.saturating_sub(by))),
            floor: self.floor.saturating_sub(by),
        }
    }

    /// A mark learned `now`: it stands from then, and the hold on the control plane
    /// ends (a marked companion answers its peers "neither"; a lift starts it over).
    fn learn_mark(&mut self, now: Duration) {
        self.marked = Some(self.marked.map_or(now, |at| at.max(now)));
        self.reaching = None;
    }

    fn reached(&mut self, now: Duration, until: Duration) {
        if until <= now {
            return;
        }
        self.reaching = Some(match self.reaching {
            Some((since, held)) if now < held => (since, held.max(until)),
            _ => (now, until),
        });
    }
}

fn extend(slot: &mut Option<Duration>, until: Duration) {
    *slot = Some(slot.map_or(until, |u| u.max(until)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn feeding() -> Feeding {
        Feeding::new(&Timing::default())
    }

    #[test]
    fn an_answer_holds_for_the_isolation_timeout_from_when_its_request_was_sent() {
        let mut f = feeding();
        assert_eq!(f.may_feed(s(0)), None, "nothing heard yet");
        // A beat sent at 10 s, acknowledged at 11 s: fresh until 12 s, not 13 s.
        f.acknowledged(s(10), false, s(11));
        assert_eq!(f.may_feed(s(11)), Some(Basis::Leader));
        assert_eq!(
            f.may_feed(s(12) - Duration::from_nanos(1)),
            Some(Basis::Leader)
        );
        assert_eq!(f.may_feed(s(12)), None);
        // A late answer to an old request buys nothing.
        f.acknowledged(s(9), false, s(12));
        assert_eq!(f.may_feed(s(12)), None);
        f.api_answered(s(12), false, s(12));
        assert_eq!(f.may_feed(s(13)), Some(Basis::ApiServer));
        assert_eq!(f.reach(s(13)), Reach::ApiServer);
    }

    #[test]
    fn a_mark_from_either_side_stops_feeding_until_the_leader_lifts_it() {
        for from_leader in [true, false] {
            let mut f = feeding();
            f.acknowledged(s(10), false, s(10));
            f.api_answered(s(10), false, s(10));
            f.peers_answered(s(10), 2, 3);
            if from_leader {
                f.acknowledged(s(10), true, s(11));
            } else {
                f.api_answered(s(10), true, s(11));
            }
            assert_eq!(f.may_feed(s(11)), None);
            assert!(f.marked());
            // Answers that say nothing of the mark as it stands now do not undo it:
            // the leader's to a beat sent before the companion learned of it (late,
            // or overtaken), the API server's, the peers'.
            f.acknowledged(s(11), false, s(12));
            f.api_answered(s(12), false, s(12));
            f.peers_answered(s(12), 2, 3);
            assert_eq!(f.may_feed(s(12)), None, "from the leader: {from_leader}");
            assert_eq!(f.reach(s(12)), Reach::Neither);
            assert_eq!(f.reaching(s(12)), Reaching::default());
            assert_eq!(f.feeding_until(), None);
            // A standing mark told again keeps it; the leader's answer without it to a
            // later beat lifts it.
            f.acknowledged(s(12), true, s(13));
            f.acknowledged(s(13), false, s(13));
            assert!(f.marked(), "the beat was sent when the mark was told again");
            f.acknowledged(s(14), false, s(14));
            assert!(!f.marked());
            assert_eq!(f.may_feed(s(14)), Some(Basis::Leader));
        }
    }

    #[test]
    fn a_mark_learned_before_the_clock_was_shifted_is_lifted_only_by_a_later_beat() {
        let mut f = feeding();
        f.acknowledged(s(10), true, s(10));
        let f = f.shifted_back(s(20));
        let mut g = f.clone();
        g.acknowledged(s(0), false, s(1));
        assert!(g.marked(), "a beat at the origin may predate the mark");
        let mut g = f;
        g.acknowledged(s(1), false, s(1));
        assert!(!g.marked());
    }

    #[test]
    fn a_mark_ends_the_hold_at_once_and_a_lift_starts_it_over() {
        for from_leader in [true, false] {
            let mut f = feeding();
            f.acknowledged(ms(10_000), false, ms(10_000)); // held until 12 s
            // The mark learned at 10.5 s: no hold from then on.
            if from_leader {
                f.acknowledged(ms(10_400), true, ms(10_500));
            } else {
                f.api_answered(ms(10_400), true, ms(10_500));
            }
            assert_eq!(f.reaching(ms(10_600)), Reaching::default());
            // Lifted at 11 s, while the hold from 10 s would still be valid: it starts
            // over at the lift, it does not count the marked half second.
            f.acknowledged(ms(11_000), false, ms(11_000));
            assert!(!f.marked());
            assert_eq!(
                f.reaching(ms(11_500)),
                Reaching {
                    held_for: ms(500),
                    valid_for: ms(1_500)
                },
                "from the leader: {from_leader}"
            );
        }
    }

    #[test]
    fn a_stall_drops_everything_held_and_every_answer_to_an_earlier_request() {
        let mut f = feeding();
        f.acknowledged(s(10), false, s(10));
        f.api_answered(s(11), false, s(11));
        f.peers_answered(s(11), 2, 3);
        // A feed decided before 11.5 s landed at 12 s.
        f.stalled(s(12));
        assert_eq!(f.may_feed(s(12)), None);
        assert_eq!(f.feeding_until(), None);
        assert_eq!(f.reach(s(12)), Reach::Neither);
        assert_eq!(f.reaching(s(12)), Reaching::default());
        // Answers to requests sent before the feed landed count for nothing.
        let just_before = s(12) - Duration::from_nanos(1);
        f.acknowledged(just_before, false, s(12));
        f.api_answered(just_before, false, s(12));
        f.peers_answered(just_before, 2, 3);
        assert_eq!(f.may_feed(s(12)), None);
        assert_eq!(f.reaching(s(12)), Reaching::default());
        // A mark is learned whatever its request's age, and an earlier beat's answer
        // does not lift it.
        let mut marked = f.clone();
        marked.acknowledged(s(5), true, s(12));
        assert!(marked.marked());
        marked.acknowledged(s(13), false, s(13));
        assert!(!marked.marked(), "a beat sent after the mark lifts it");
        // A request sent from then on counts.
        f.api_answered(s(12), false, s(12));
        assert_eq!(f.may_feed(s(13)), Some(Basis::ApiServer));
        f.peers_answered(s(13), 2, 3);
        assert_eq!(f.may_feed(s(14) + ms(500)), Some(Basis::Peers));
    }

    #[test]
    fn a_stall_read_on_a_shifted_clock_still_refuses_earlier_requests() {
        let mut f = feeding();
        f.stalled(s(12));
        let f = f.shifted_back(s(10));
        let mut g = f.clone();
        g.acknowledged(ms(1_999), false, s(2));
        assert_eq!(g.may_feed(s(2)), None, "sent before the stall ended");
        let mut g = f;
        g.acknowledged(s(2), false, s(2));
        assert_eq!(g.may_feed(s(2)), Some(Basis::Leader));
    }

    #[test]
    fn peers_count_only_as_a_strict_majority_of_the_cluster() {
        assert!(!peers_majority(1, 3) && peers_majority(2, 3));
        assert!(!peers_majority(2, 4) && peers_majority(3, 4));
        assert!(!peers_majority(2, 5) && peers_majority(3, 5));
        assert!(!peers_majority(0, 0), "no cluster, no majority");
        let mut f = feeding();
        // Of 5: itself and one peer are 2, not a majority.
        f.peers_answered(s(10), 1, 5);
        assert_eq!(f.may_feed(s(10)), None);
        f.peers_answered(s(10), 2, 5);
        assert_eq!(f.may_feed(s(11)), Some(Basis::Peers));
        // Peers' answers never make it reach anything itself.
        assert_eq!(f.reach(s(11)), Reach::Neither);
        assert_eq!(f.reaching(s(11)), Reaching::default());
    }

    #[test]
    fn the_hold_on_the_control_plane_is_reported_without_gaps() {
        let mut f = feeding();
        f.acknowledged(s(10), false, s(10)); // until 12
        f.api_answered(s(11), false, s(11)); // until 13
        assert_eq!(
            f.reaching(s(12)),
            Reaching {
                held_for: s(2),
                valid_for: s(1)
            }
        );
        // A gap: nothing from 13 s to 20 s.
        f.acknowledged(s(20), false, s(20));
        assert_eq!(
            f.reaching(s(21)),
            Reaching {
                held_for: s(1),
                valid_for: s(1)
            }
        );
        assert_eq!(f.reaching(s(22)), Reaching::default());
    }
}
