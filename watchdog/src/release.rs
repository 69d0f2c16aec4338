//! The leader's release rule for the watchdog level: when a node's machine is
//! certainly reset by its own hardware watchdog.
//!
//! All of these must hold ([`decide`]):
//!
//! 1. the node's companion reported an armed hardware watchdog (its device and the
//!    timeout W the driver granted) in its recent beats;
//! 2. the mark was written: the API server accepted it at `t_mark` (from then on
//!    every read of it returns it);
//! 3. now ≥ max(`t_ack`, `t_mark`, `t_lead`) + the [wait](super::timing::Timing::wait)
//!    for W, where `t_ack` is the last acknowledgement not carrying the mark this
//!    leader sent the node and `t_lead` when it began to lead (a former leader's
//!    acknowledgements all precede it);
//! 4. a strict majority of the cluster's companions, the node not counted, have been
//!    heard throughout that wait ([`Heard`]): none of them could have told the node
//!    "neither" then, so no strict majority did, and the node cannot have fed on its
//!    peers either.
//!
//! Why that is enough: had the machine still been running at the release, its
//! watchdog would have been fed less than W / (1−ρ) before, on an answer to a request
//! sent less than I / (1−ρ) before that feed; the wait, at least (I + W) / (1−ρ) in
//! real time, puts that request after `t_ack` (no such acknowledgement was sent),
//! after `t_mark` (every read then returns the mark) and inside the window in which a
//! majority of the other companions could not answer "neither". Pure: times are
//! readings of the leader's monotonic clock.

use std::fmt;
use std::time::Duration;

use super::feeding::{Reaching, peers_majority};
use super::timing::{Timing, Wait};

/// One companion's hold on the control plane as this leader can prove it: an interval
/// of the leader's clock throughout which the companion held an answer from the
/// leader or the API server (so would have told a peer it reaches one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Heard {
    covered: Option<(Duration, Duration)>,
}

impl Heard {
    /// A beat received at `received` that echoes the acknowledgement this leader sent
    /// at `ack_sent` (so the beat was sent after it) and reports `reaching` (durations
    /// of the companion's clock). The beat was sent somewhere between the two; the
    /// companion held on throughout `[sent − held_for, sent + valid_for]` of its
    /// clock, so, whichever the moment and however the clocks drift, throughout
    /// `[received − shrink(held_for), ack_sent + shrink(valid_for)]` of this one.
    pub fn beat(
        &mut self,
        timing: &Timing,
        received: Duration,
        ack_sent: Duration,
        reaching: Reaching,
    ) {
        self.beat_since(timing, received, ack_sent, reaching, Duration::ZERO);
    }

    /// [`Heard::beat`], the coverage it proves beginning no earlier than `not_before`
    /// (the companion's mark was lifted then: before it, it may have said "neither").
    pub fn beat_since(
        &mut self,
        timing: &Timing,
        received: Duration,
        ack_sent: Duration,
        reaching: Reaching,
        not_before: Duration,
    ) {
        let lo = received
            .saturating_sub(timing.shrink(reaching.held_for))
            .max(not_before);
        let hi = ack_sent.saturating_add(timing.shrink(reaching.valid_for));
        if hi <= lo {
            return;
        }
        self.covered = Some(match self.covered {
            Some((since, until)) if lo <= until && since <= hi => (since.min(lo), until.max(hi)),
            Some((since, until)) if until >= hi => (since, until),
            _ => (lo, hi),
        });
    }

    /// The coverage ends no later than `t`, and is dropped if it would begin after it:
    /// from `t` on the companion may have said "neither" (it was marked then).
    pub fn end_at(&mut self, t: Duration) {
        self.covered = self
            .covered
            .filter(|(since, _)| *since <= t)
            .map(|(since, until)| (since, until.min(t)));
    }

    /// Whether the companion was held throughout `[from, to]`.
    pub fn throughout(&self, from: Duration, to: Duration) -> bool {
        self.covered
            .is_some_and(|(since, until)| since <= from && until >= to)
    }

    /// The same proof read on a clock set `by` earlier, so that a state can be kept
    /// relative to now (the model check does): times before its origin become the
    /// origin, and a proof that ended before it is dropped.
    pub fn shifted_back(&self, by: Duration) -> Self {
        Self {
            covered: self
                .covered
                .filter(|(_, until)| *until >= by)
                .map(|(since, until)| (since.saturating_sub(by), until - by)),
        }
    }

    /// The interval proven, if any (for `explain`).
    pub fn covered(&self) -> Option<(Duration, Duration)> {
        self.covered
    }
}

/// The node's armed hardware watchdog, as its companion reported it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Armed {
    /// The driver's identity (`iTCO_wdt`, `ipmi_watchdog`, ...).
    pub device: String,
    /// The timeout the driver granted, read back after it was set.
    pub granted: Duration,
}

/// What the leader knows of one node when it considers the watchdog level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    pub armed: Option<Armed>,
    /// The last acknowledgement without the mark this leader sent the node.
    pub last_ack: Option<Duration>,
    /// When this leader began to lead.
    pub leading_since: Duration,
    /// When the API server accepted the mark.
    pub mark_written: Option<Duration>,
    /// The cluster's companions, the node included: at least every companion that
    /// could answer the node's peer questions.
    pub cluster: usize,
    /// The smallest cluster the node's companion may count its peers' majority of:
    /// what its beats prove it was told (`cluster` when it cannot be smaller).
    pub told: usize,
}

/// Which moment the wait is counted from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Anchor {
    LastAcknowledgement,
    Mark,
    Leadership,
}

impl Anchor {
    pub fn as_str(self) -> &'static str {
        match self {
            Anchor::LastAcknowledgement => "the last acknowledgement",
            Anchor::Mark => "the mark",
            Anchor::Leadership => "this replica's leadership",
        }
    }
}

/// The moment the wait counts from: the latest of the last acknowledgement, the
/// mark and the start of this leadership.
pub fn anchor(
    last_ack: Option<Duration>,
    mark: Duration,
    leading_since: Duration,
) -> (Anchor, Duration) {
    let mut at = (Anchor::Mark, mark);
    if leading_since > at.1 {
        at = (Anchor::Leadership, leading_since);
    }
    if let Some(ack) = last_ack.filter(|a| *a > at.1) {
        at = (Anchor::LastAcknowledgement, ack);
    }
    at
}

/// The arithmetic of a release that rests on the watchdog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proof {
    pub armed: Armed,
    pub anchor: Anchor,
    /// How long before the decision the anchor was.
    pub since_anchor: Duration,
    pub wait: Wait,
    /// Companions other than the node heard throughout the wait, of the cluster's.
    pub heard: usize,
    pub cluster: usize,
}

impl fmt::Display for Proof {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "reset by its hardware watchdog ({}, {}s granted), not read Off: {} was {:.4}s \
             ago, at least {} after it; {} of {} companions heard throughout, so none of its \
             peers could have kept it fed",
            self.armed.device,
            self.armed.granted.as_secs_f64(),
            self.anchor.as_str(),
            self.since_anchor.as_secs_f64(),
            self.wait,
            self.heard,
            self.cluster
        )
    }
}

/// Whether the watchdog level proves the node's machine reset now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Release(Proof),
    /// Not yet: nothing to do but wait until then (or longer, for the majority).
    Wait {
        until: Duration,
        why: String,
    },
    /// This evidence can never prove it; why.
    Refuse(String),
}

/// The release rule (see the module documentation). `others` is what this leader
/// heard of every other companion of the cluster.
pub fn decide<'a>(
    timing: &Timing,
    evidence: &Evidence,
    others: impl IntoIterator<Item = &'a Heard>,
    now: Duration,
) -> Verdict {
    let Some(armed) = evidence.armed.clone() else {
        return Verdict::Refuse("its companion reported no armed hardware watchdog".into());
    };
    let Some(mark) = evidence.mark_written else {
        return Verdict::Refuse("the fencing mark is not written".into());
    };
    let wait = timing.wait(armed.granted);
    let (which, at) = anchor(evidence.last_ack, mark, evidence.leading_since);
    let until = at.saturating_add(wait.total());
    if now < until {
        return Verdict::Wait {
            until,
            why: format!("{} after {}", wait, which.as_str()),
        };
    }
    let from = now.saturating_sub(wait.total());
    let heard = others
        .into_iter()
        .filter(|h| h.throughout(from, now))
        .count();
    if !peers_majority(heard, evidence.cluster) {
        return Verdict::Wait {
            until: now,
            why: format!(
                "only {heard} of {} companions heard throughout the last {}: a majority of \
                 its peers may have kept it fed",
                evidence.cluster,
                humantime::format_duration(wait.total())
            ),
        };
    }
    // The node's companion counts a majority of at least `told`. Of the others, those
    // not heard throughout may have said "neither": with it, `cluster − heard`. Never
    // a strict majority of `told` when twice that is at most `told` (always so when
    // `told` is the cluster: the majority heard above implies it).
    let could_say_neither = evidence.cluster.saturating_sub(heard);
    if could_say_neither.saturating_mul(2) > evidence.told {
        return Verdict::Wait {
            until: now,
            why: format!(
                "its companion was last told a cluster of {} (it is {} now): {} of them, \
                 itself included, were not heard throughout and could be a majority of {}",
                evidence.told, evidence.cluster, could_say_neither, evidence.told
            ),
        };
    }
    Verdict::Release(Proof {
        armed,
        anchor: which,
        since_anchor: now - at,
        wait,
        heard,
        cluster: evidence.cluster,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn evidence() -> Evidence {
        Evidence {
            armed: Some(Armed {
                device: "iTCO_wdt".into(),
                granted: s(10),
            }),
            last_ack: Some(s(100)),
            leading_since: s(10),
            mark_written: Some(s(103)),
            cluster: 5,
            told: 5,
        }
    }

    fn heard(from: u64, to: u64) -> Heard {
        Heard {
            covered: Some((s(from), s(to))),
        }
    }

    #[test]
    fn the_wait_counts_from_the_latest_of_acknowledgement_mark_and_leadership() {
        assert_eq!(
            anchor(Some(s(5)), s(4), s(3)),
            (Anchor::LastAcknowledgement, s(5))
        );
        assert_eq!(anchor(Some(s(5)), s(6), s(3)), (Anchor::Mark, s(6)));
        assert_eq!(anchor(Some(s(5)), s(6), s(7)), (Anchor::Leadership, s(7)));
        assert_eq!(anchor(None, s(6), s(2)), (Anchor::Mark, s(6)));
    }

    #[test]
    fn released_only_after_the_wait_and_with_a_majority_heard_throughout() {
        let t = Timing::default();
        let e = evidence();
        let wait = t.wait(s(10)).total();
        let others = [
            heard(0, 500),
            heard(0, 500),
            heard(0, 500),
            Heard::default(),
        ];
        let due = s(103) + wait;
        match decide(&t, &e, &others, due - Duration::from_nanos(1)) {
            Verdict::Wait { until, why } => {
                assert_eq!(until, due);
                assert!(why.contains("after the mark"), "{why}");
            }
            v => panic!("{v:?}"),
        }
        let Verdict::Release(proof) = decide(&t, &e, &others, due) else {
            panic!("released")
        };
        assert_eq!(
            (proof.anchor, proof.heard, proof.cluster),
            (Anchor::Mark, 3, 5)
        );
        let text = proof.to_string();
        assert!(
            text.contains("iTCO_wdt, 10s granted") && text.contains("not read Off"),
            "{text}"
        );
        // Two of four peers heard: not a strict majority of five.
        let two = [
            heard(0, 500),
            heard(0, 500),
            Heard::default(),
            Heard::default(),
        ];
        assert!(matches!(decide(&t, &e, &two, due), Verdict::Wait { .. }));
        // Heard, but not since the start of the window.
        let late = [heard(110, 500), heard(0, 500), heard(0, 500)];
        assert!(matches!(decide(&t, &e, &late, due), Verdict::Wait { .. }));
    }

    #[test]
    fn a_companion_told_a_smaller_cluster_needs_more_of_its_peers_heard() {
        let t = Timing::default();
        let due = s(103) + t.wait(s(10)).total();
        let three_of_four = [
            heard(0, 500),
            heard(0, 500),
            heard(0, 500),
            Heard::default(),
        ];
        // Told 3 of a cluster now 5: the one not heard and itself are 2, a majority of
        // 3. Not released.
        let mut e = evidence();
        e.told = 3;
        match decide(&t, &e, &three_of_four, due) {
            Verdict::Wait { until, why } => {
                assert_eq!(until, due);
                assert!(why.contains("last told a cluster of 3"), "{why}");
            }
            v => panic!("{v:?}"),
        }
        // Every other heard: only itself could say "neither", 1 of 3 is none.
        assert!(matches!(
            decide(&t, &e, &[heard(0, 500); 4], due),
            Verdict::Release(_)
        ));
        // Told nothing (no acknowledgement echoed): never.
        e.told = 0;
        assert!(matches!(
            decide(&t, &e, &[heard(0, 500); 4], due),
            Verdict::Wait { .. }
        ));
        // Told the cluster or more: the majority heard is enough.
        e.told = 7;
        assert!(matches!(
            decide(&t, &e, &three_of_four, due),
            Verdict::Release(_)
        ));
    }

    #[test]
    fn no_watchdog_or_no_mark_never_releases() {
        let t = Timing::default();
        let others = [heard(0, 500); 4];
        let mut e = evidence();
        e.armed = None;
        assert!(matches!(
            decide(&t, &e, &others, s(400)),
            Verdict::Refuse(_)
        ));
        let mut e = evidence();
        e.mark_written = None;
        assert!(matches!(
            decide(&t, &e, &others, s(400)),
            Verdict::Refuse(_)
        ));
    }

    #[test]
    fn a_beat_proves_only_what_holds_wherever_it_was_sent_between_ack_and_receipt() {
        let t = Timing {
            max_drift_ppm: 0,
            ..Timing::default()
        };
        let mut h = Heard::default();
        // Acknowledged at 10 s, the next beat received at 10.6 s, held 3 s, 1.5 s left.
        h.beat(
            &t,
            Duration::from_millis(10_600),
            s(10),
            Reaching {
                held_for: s(3),
                valid_for: Duration::from_millis(1_500),
            },
        );
        assert_eq!(
            h.covered(),
            Some((Duration::from_millis(7_600), Duration::from_millis(11_500)))
        );
        // A beat delayed past what it held proves nothing.
        let mut late = Heard::default();
        late.beat(
            &t,
            s(20),
            s(10),
            Reaching {
                held_for: s(1),
                valid_for: s(1),
            },
        );
        assert_eq!(late.covered(), None);
        // Overlapping proofs join; a gap starts over.
        h.beat(
            &t,
            Duration::from_millis(11_100),
            Duration::from_millis(10_600),
            Reaching {
                held_for: Duration::from_millis(3_500),
                valid_for: Duration::from_millis(1_500),
            },
        );
        assert_eq!(
            h.covered(),
            Some((Duration::from_millis(7_600), Duration::from_millis(12_100)))
        );
        assert!(h.throughout(s(8), s(12)) && !h.throughout(s(7), s(12)));
        h.beat(
            &t,
            s(30),
            Duration::from_millis(29_500),
            Reaching {
                held_for: Duration::from_millis(100),
                valid_for: s(1),
            },
        );
        assert_eq!(
            h.covered(),
            Some((Duration::from_millis(29_900), Duration::from_millis(30_500)))
        );
    }

    #[test]
    fn a_coverage_ended_at_a_moment_proves_nothing_after_it() {
        let mut h = heard(10, 20);
        h.end_at(s(15));
        assert_eq!(h.covered(), Some((s(10), s(15))));
        assert!(h.throughout(s(10), s(15)) && !h.throughout(s(10), s(16)));
        // Ending it later changes nothing.
        h.end_at(s(18));
        assert_eq!(h.covered(), Some((s(10), s(15))));
        // One that would begin after the end is dropped.
        let mut late = heard(16, 20);
        late.end_at(s(15));
        assert_eq!(late.covered(), None);
        let mut none = Heard::default();
        none.end_at(s(15));
        assert_eq!(none.covered(), None);
    }

    #[test]
    fn a_beat_after_a_lift_proves_nothing_before_it() {
        let t = Timing {
            max_drift_ppm: 0,
            ..Timing::default()
        };
        let reaching = Reaching {
            held_for: s(3),
            valid_for: s(1),
        };
        let mut h = Heard::default();
        h.beat_since(&t, s(10), s(10), reaching, s(9));
        assert_eq!(h.covered(), Some((s(9), s(11))));
        // Ended before the lift: a later beat does not join it across the gap.
        let mut ended = heard(0, 8);
        ended.beat_since(&t, s(10), s(10), reaching, s(9));
        assert_eq!(ended.covered(), Some((s(9), s(11))));
        // A lift after all it proves: nothing.
        let mut none = Heard::default();
        none.beat_since(&t, s(10), s(10), reaching, s(11));
        assert_eq!(none.covered(), None);
    }
}
