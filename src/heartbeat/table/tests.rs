//! The table's tests: sessions, beats and acknowledgements, silences, marks and
//! what is proven of a companion's hold.

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

/// No drift: what a beat proves is exact.
fn exact() -> Timing {
    Timing {
        max_drift_ppm: 0,
        ..Timing::default()
    }
}

fn held(held_for: u64, valid_for: u64) -> Reaching {
    Reaching {
        held_for: ms(held_for),
        valid_for: ms(valid_for),
    }
}

/// A beat sent and received at `at` (this replica's clock and the companion's
/// read alike), reporting `reaching`; its acknowledgement taken by the companion
/// (so its next beat echoes it). `marked`: the acknowledgement carries the mark.
fn beat_at(
    t: &mut Table,
    c: &mut CompanionEnd,
    at: u64,
    reaching: Reaching,
    marked: bool,
) -> Option<(Duration, Duration)> {
    let ack = t
        .beat(&c.beat(ms(at), reaching, ARMED), ms(at), true, |_| marked)
        .unwrap_or_else(|e| panic!("{e:?}"));
    c.acknowledged(&ack, ms(at))
        .unwrap_or_else(|e| panic!("{e}"));
    heard(t, "worker-1")
}

fn heard(t: &Table, node: &str) -> Option<(Duration, Duration)> {
    t.companion(node).and_then(|c| c.heard.covered())
}

/// worker-1 beating, acknowledged at 10 s, then at 10.5 s reporting a hold of 3 s
/// with 1.5 s left: proven held from 7.5 s to 11.5 s.
fn proven_held() -> (Table, CompanionEnd) {
    let mut t = Table::new(exact());
    let session = t.open("worker-1", 7 << 32, Key([1; 32]));
    let mut c = CompanionEnd::new(Key([1; 32]), session, Duration::from_secs(2));
    beat_at(&mut t, &mut c, 10_000, held(2_000, 1_500), false);
    assert_eq!(
        beat_at(&mut t, &mut c, 10_500, held(3_000, 1_500), false),
        Some((ms(7_500), ms(11_500)))
    );
    (t, c)
}

#[test]
fn a_new_hello_starts_over_what_was_proven_but_keeps_the_silence_and_the_anchor() {
    let (mut t, _) = proven_held();
    let w1 = |t: &Table| {
        t.companion("worker-1")
            .cloned()
            .unwrap_or_else(|| panic!("known"))
    };
    assert_eq!((w1(&t).watchdog, w1(&t).cluster_known), (ARMED, 1));
    // A new hello: maybe a new process, which holds nothing its predecessor did.
    let session = t.open("worker-1", 8 << 32, Key([2; 32]));
    let c = w1(&t);
    assert_eq!(
        c.watchdog,
        WatchdogState::None,
        "its watchdog is not known yet"
    );
    assert_eq!(c.reaching, Reaching::default());
    assert_eq!(c.heard.covered(), None, "nothing proven of the new process");
    assert_eq!(c.cluster_known, 0);
    // What the silence detector and the release's anchor count on stays.
    assert_eq!(
        (c.session, c.last_beat, c.beats, c.last_ack),
        (session, Some(ms(10_500)), 2, Some(ms(10_500)))
    );
    assert_eq!(
        t.silent(ms(12_500), Duration::from_secs(2)),
        [("worker-1".to_string(), ms(10_500))]
    );
    // One that said it was stopping stays left to its Lease until its successor
    // beats.
    let mut c = CompanionEnd::new(Key([2; 32]), session, Duration::from_secs(2));
    t.beat(
        &c.beat(ms(11_000), Reaching::default(), WatchdogState::Stopping),
        ms(11_000),
        true,
        |_| false,
    )
    .unwrap_or_else(|e| panic!("{e:?}"));
    t.open("worker-1", 9 << 32, Key([3; 32]));
    assert_eq!(w1(&t).watchdog, WatchdogState::Stopping);
    assert!(t.silent(ms(60_000), Duration::from_secs(2)).is_empty());
}

#[test]
fn a_mark_ends_what_was_proven_and_no_beat_extends_it_while_it_stands() {
    let (mut t, mut c) = proven_held();
    // Marked at 11 s: from then on the acknowledgements carry it, and the
    // companion may answer "neither" as soon as it learns it.
    t.mark("worker-1", ms(11_000));
    assert!(t.marked("worker-1"));
    assert_eq!(heard(&t, "worker-1"), Some((ms(7_500), ms(11_000))));
    // A mark told again changes nothing.
    t.mark("worker-1", ms(11_100));
    assert_eq!(
        t.companion("worker-1").and_then(|c| c.mark.since),
        Some(ms(11_000))
    );
    // Its beats prove nothing while it stands, whatever they report (here with an
    // acknowledgement without the mark, as if it had not been told yet).
    assert_eq!(
        beat_at(&mut t, &mut c, 11_200, held(4_000, 1_500), false),
        Some((ms(7_500), ms(11_000)))
    );
    assert_eq!(
        beat_at(&mut t, &mut c, 11_400, held(4_000, 1_500), true),
        Some((ms(7_500), ms(11_000)))
    );
}

#[test]
fn after_a_lift_no_coverage_begins_before_it() {
    let (mut t, mut c) = proven_held();
    t.mark("worker-1", ms(11_000));
    beat_at(&mut t, &mut c, 11_500, held(4_000, 1_500), true);
    t.unmark("worker-1", ms(12_000));
    assert!(!t.marked("worker-1"));
    // Unmarking an unmarked node changes nothing.
    t.unmark("worker-1", ms(12_050));
    assert_eq!(
        t.companion("worker-1").map(|c| c.mark),
        Some(Mark {
            since: None,
            lifted: Some(ms(12_000))
        })
    );
    beat_at(&mut t, &mut c, 12_100, held(4_600, 1_500), false);
    // A hold reported from 7.6 s: proven only from the lift, never joined to what
    // was proven before the mark.
    assert_eq!(
        beat_at(&mut t, &mut c, 12_600, held(5_000, 1_500), false),
        Some((ms(12_000), ms(13_600)))
    );
}

#[test]
fn a_mark_set_before_the_first_hello_or_across_a_new_one_stands() {
    let mut t = Table::new(exact());
    t.mark("worker-1", ms(1_000));
    assert!(t.marked("worker-1"));
    let session = t.open("worker-1", 7 << 32, Key([1; 32]));
    let mut c = CompanionEnd::new(Key([1; 32]), session, Duration::from_secs(2));
    beat_at(&mut t, &mut c, 10_000, held(2_000, 1_500), false);
    assert_eq!(
        beat_at(&mut t, &mut c, 10_500, held(3_000, 1_500), false),
        None
    );
    // A new hello does not lift it.
    let session = t.open("worker-1", 8 << 32, Key([2; 32]));
    assert!(t.marked("worker-1"));
    let mut c = CompanionEnd::new(Key([2; 32]), session, Duration::from_secs(2));
    t.unmark("worker-1", ms(11_000));
    beat_at(&mut t, &mut c, 11_500, held(2_000, 1_500), false);
    assert_eq!(
        beat_at(&mut t, &mut c, 12_000, held(9_000, 1_500), false),
        Some((ms(11_000), ms(13_000)))
    );
}

#[test]
fn a_companion_marked_now_is_not_counted_among_the_others_heard() {
    let mut t = Table::new(exact());
    for (i, node) in ["worker-1", "worker-2", "worker-3"].into_iter().enumerate() {
        let session = t.open(node, (30 + i as u64) << 32, Key([5; 32]));
        let mut c = CompanionEnd::new(Key([5; 32]), session, Duration::from_secs(2));
        for at in [10_000, 10_500] {
            let ack = t
                .beat(
                    &c.beat(ms(at), held(3_000, 1_500), ARMED),
                    ms(at),
                    true,
                    |_| false,
                )
                .unwrap_or_else(|e| panic!("{e:?}"));
            c.acknowledged(&ack, ms(at))
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }
    let held_at_11 = |t: &Table| {
        t.others_heard("worker-1")
            .filter(|h| h.throughout(ms(8_000), ms(11_000)))
            .count()
    };
    assert_eq!(t.others_heard("worker-1").count(), 2);
    assert_eq!(held_at_11(&t), 2);
    // worker-2 marked at 11 s: held up to then, but left out while marked.
    t.mark("worker-2", ms(11_000));
    assert_eq!(t.others_heard("worker-1").count(), 1);
    assert_eq!(held_at_11(&t), 1);
    t.unmark("worker-2", ms(11_500));
    assert_eq!(t.others_heard("worker-1").count(), 2);
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

/// Issue 52, item 5: a beat that shows this replica stood still (its clock stopped
/// while the companion's ran: a paused VM), or that names a newer term than the one
/// it leads in, is not acknowledged as the leader's, and the table says why once.
#[test]
fn a_beat_that_shows_this_replica_stood_still_or_was_superseded_is_not_the_leaders() {
    let mut t = Table::new(Timing::default());
    let session = t.open("worker-1", 7 << 32, Key([1; 32]));
    let mut c = CompanionEnd::new(Key([1; 32]), session, Duration::from_secs(2)).with_identity(
        nodefence_watchdog::session::Identity {
            boot: BootId([9; 16]),
            virtual_machine: false,
        },
    );
    let answer = |t: &mut Table, c: &mut CompanionEnd, sent: u64, received: u64| {
        let mut out = Vec::new();
        t.beat_into(
            &c.beat(ms(sent), Reaching::default(), ARMED),
            ms(received),
            Some(5),
            |_| false,
            |_| true,
            &mut out,
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        c.acknowledged(&out, ms(sent))
            .unwrap_or_else(|e| panic!("{e}"))
    };
    for k in 0..10 {
        let a = answer(&mut t, &mut c, 1_000 + 500 * k, 50_000 + 500 * k);
        assert!(a.leader && a.term == 5 && a.arm, "{a:?}");
    }
    assert_eq!(t.take_suspicion(), None);
    // Sixty seconds of the companion's time in a tenth of the replica's.
    let a = answer(&mut t, &mut c, 65_500, 54_600);
    assert!(!a.leader && a.term == 0 && !a.arm, "{a:?}");
    assert!(matches!(t.take_suspicion(), Some(Suspicion::Paused { node }) if node == "worker-1"));
    assert_eq!(t.take_suspicion(), None, "told once");
    // A companion that took term 7 from another replica.
    c.heard_term(7);
    let a = answer(&mut t, &mut c, 66_000, 55_100);
    assert!(!a.leader, "{a:?}");
    match t.take_suspicion() {
        Some(
            s @ Suspicion::NewerTerm {
                term: 7, ours: 5, ..
            },
        ) => {
            assert!(s.to_string().contains("another replica leads"), "{s}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(t.companion("worker-1").map(|c| c.term_seen), Some(7));
}

/// A standby's acknowledgement carries neither the mark nor `arm` (an old leader's
/// marks, kept, would alternate with the new leader's lifts); the leader's carry
/// both as the marks and the policy say.
#[test]
fn only_the_leaders_acknowledgement_carries_the_mark_and_the_policy() {
    let mut t = Table::new(Timing::default());
    let session = t.open("worker-1", 7 << 32, Key([1; 32]));
    let mut c = CompanionEnd::new(Key([1; 32]), session, Duration::from_secs(2));
    for (k, (leader, arm)) in [(None, true), (Some(3), true), (Some(3), false)]
        .into_iter()
        .enumerate()
    {
        let sent = ms(1_000 * (k as u64 + 1));
        let mut out = Vec::new();
        t.beat_into(
            &c.beat(sent, Reaching::default(), ARMED),
            sent,
            leader,
            |_| true,
            |_| arm,
            &mut out,
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        let a = c.acknowledged(&out, sent).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (a.leader, a.marked, a.arm, a.term),
            (
                leader.is_some(),
                leader.is_some(),
                leader.is_some() && arm,
                leader.unwrap_or(0)
            ),
            "{leader:?} {arm}"
        );
    }
}
