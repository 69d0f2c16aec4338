//! The watchdog level's feeding and release rules, model-checked: every interleaving
//! of message loss and delay, partitions, crashes, restarts and reboots, a peer's
//! mark and its lift, an old leader, a blocked resolver, duplicated answers and clock
//! drift, for 3 and 5 nodes, explored breadth first ([`explorer`]) over a model that
//! runs nodefence's own rules ([`model`]). Eighteen deliberate bugs must each be
//! caught: rule c without the majority, the wait counted from the mark alone, the
//! drift margin dropped, the scheduling allowance dropped, the leader not asking that
//! a majority of the other companions was heard, a mark the leader gave up (N came
//! back) still counted when it fences N again; of a peer the leader marked, what it
//! proved not ended at the mark, the hold the peer reports kept across its mark, and
//! the peer counted as heard while marked; and issue 52's others: feeding that waits
//! on a name lookup, a driver without the magic close accepted, evidence of another
//! boot taken, the peers' answers counted per answer rather than per node, leadership
//! without a term, a successor answering its peers at once, a successor ignoring
//! the state its predecessor kept or the term in it, and a release on the watchdog of
//! a boot begun after the last acknowledgement. One more search shows what the term
//! does not cover (a new pod's companion takes none:
//! [`an_old_leader_feeds_a_new_pods_companion_that_took_no_term`]).
//!
//! About 79 million states in all: `cargo test --release -p nodefence-watchdog`
//! explores them in under five minutes on two cores (CI does; about five minutes of
//! CPU); a debug build, a hundred times slower, leaves these tests out (`#[ignore]`,
//! listed as not run). `NODEFENCE_MODEL_PROGRESS=1` prints the search's progress,
//! and `NODEFENCE_MODEL_TRY` runs a search of one's choosing ([`try_a_search`]).

mod explorer;
mod model;

use explorer::{Report, explore};
use model::{Mutation, Profile, WatchdogModel};

/// A search given on the command line, for trying budgets: `NODEFENCE_MODEL_TRY="3
/// ControlPlane None 3 lifecycle"` (nodes, profile, mutation, faults, then any of
/// `lifts`, `long`, `lifecycle`, `old-leader`, `restarts`); without it, nothing.
#[test]
#[ignore = "only with NODEFENCE_MODEL_TRY"]
fn try_a_search() {
    let Ok(spec) = std::env::var("NODEFENCE_MODEL_TRY") else {
        return;
    };
    let words: Vec<&str> = spec.split_whitespace().collect();
    let profile = Profile::ALL
        .into_iter()
        .find(|p| format!("{p:?}") == words[1])
        .unwrap_or_else(|| panic!("{}: not a profile", words[1]));
    let mutation = Mutation::ALL
        .into_iter()
        .find(|m| format!("{m:?}") == words[2])
        .unwrap_or_else(|| panic!("{}: not a mutation", words[2]));
    let mut model = WatchdogModel::new(
        words[0].parse().unwrap_or(3),
        profile,
        words[3].parse().unwrap_or(2),
        mutation,
    );
    for w in &words[4..] {
        model = match *w {
            "lifts" => model.with_lifts(),
            "long" => model.with_long_isolation(),
            "lifecycle" => model.with_lifecycle(),
            "old-leader" => model.with_old_leader(),
            "restarts" => model.with_restarts(),
            "kept-only" => model.with_kept_restarts_only(),
            other => panic!("{other}?"),
        };
    }
    let report = search(model);
    match &report.violation {
        Some((broken, steps)) => eprintln!("  {broken}\n  after: {}", steps.join("\n         ")),
        None => eprintln!("  holds"),
    }
}

/// More states than this means the model grew beyond what was intended.
const LIMIT: usize = 20_000_000;

/// The fault budget of a run: changes of connectivity, late or lost
/// acknowledgements and a crash, each one fault, placed at any ticks (the Outage
/// profile's faults are not counted: every tick may bring any of them).
fn faults(nodes: usize, profile: Profile) -> u8 {
    match (profile, nodes >= 5) {
        (Profile::ControlPlane, _) => 4,
        (Profile::Peers, false) => 3,
        (Profile::Peers, true) => 2,
        (Profile::Outage, _) => 0,
        (Profile::PeerMarks, _) => 2,
        (Profile::PeerRestarts, false) => 3,
        (Profile::PeerRestarts, true) => 2,
    }
}

fn run(nodes: usize, profile: Profile, mutation: Mutation) -> Report {
    search(WatchdogModel::new(
        nodes,
        profile,
        faults(nodes, profile),
        mutation,
    ))
}

fn search(model: WatchdogModel) -> Report {
    let started = std::time::Instant::now();
    let (nodes, profile, mutation) = (model.nodes(), model.profile(), model.mutation());
    let report = explore(&model, LIMIT);
    eprintln!(
        "{nodes} nodes, {profile:?}, {mutation:?}{}{}{}{}{}{}, {} faults: {} states, depth {}, {} \
         released, {:.1?}",
        if model.lifts() { ", lifts" } else { "" },
        if model.lifecycle() { ", lifecycle" } else { "" },
        if model.old_leader() {
            ", old leader"
        } else {
            ""
        },
        if model.restarts() { ", restarts" } else { "" },
        if model.kept_restarts_only() {
            ", kept restarts only"
        } else {
            ""
        },
        if model.isolation() > std::time::Duration::from_secs(2) {
            ", I = 4 s"
        } else {
            ""
        },
        model.faults(),
        report.states,
        report.depth,
        report.examples,
        started.elapsed()
    );
    report
}

fn holds(report: &Report) {
    if let Some((property, steps)) = &report.violation {
        panic!("{property}\n  after: {}", steps.join("\n         "));
    }
    assert!(
        report.examples > 0,
        "no run ever released N: the model is vacuous"
    );
}

fn caught(report: &Report, property: &str) {
    match &report.violation {
        Some((broken, steps)) => {
            assert!(broken.starts_with(property), "{broken}");
            eprintln!("  caught: {broken}\n  after: {}", steps.join("\n         "));
        }
        None => panic!("the mutation was not caught ({} states)", report.states),
    }
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn the_control_plane_answers_never_outlast_the_wait() {
    holds(&run(3, Profile::ControlPlane, Mutation::None));
}

/// The leader gives fencing N up once (N came back) and may fence it again: a mark
/// lifted by the leader's acknowledgement, then written again, never lets a release
/// through before N's machine was reset.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn a_mark_given_up_and_written_again_never_outlasts_the_wait() {
    holds(&search(lifting(Mutation::None)));
}

/// The control-plane search where the leader may give fencing up once. One fault
/// fewer than that profile's own search: the give-up and the second fencing are two
/// more steps at any ticks (13 million states with four faults, four minutes on two
/// cores; 4.7 million, one minute, with three).
fn lifting(mutation: Mutation) -> WatchdogModel {
    let profile = Profile::ControlPlane;
    WatchdogModel::new(3, profile, faults(3, profile) - 1, mutation).with_lifts()
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn a_mark_given_up_but_still_counted_is_caught() {
    caught(
        &search(lifting(Mutation::GivenUpMarkKept)),
        "release safety",
    );
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn three_nodes_peers_never_keep_a_released_node_fed() {
    holds(&run(3, Profile::Peers, Mutation::None));
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn five_nodes_peers_never_keep_a_released_node_fed() {
    holds(&run(5, Profile::Peers, Mutation::None));
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn a_control_plane_outage_resets_no_machine() {
    for nodes in [3, 5] {
        let report = run(nodes, Profile::Outage, Mutation::None);
        assert!(report.violation.is_none(), "{:?}", report.violation);
    }
}

/// Issue 52, item 1: a feed loop that waits on a name lookup makes no feed while the
/// cluster's resolver blocks, the leader answering all along.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn feeding_that_waits_on_lookups_is_caught() {
    for nodes in [3, 5] {
        caught(
            &run(nodes, Profile::Outage, Mutation::FeedingWaitsOnLookups),
            "outage safety",
        );
    }
}

/// The outage profile where one companion (N or a peer) restarts once from the state
/// its predecessor kept, the faults counted (a restart is one).
fn restarting(nodes: usize, mutation: Mutation) -> WatchdogModel {
    let faults = if nodes >= 5 { 4 } else { 5 };
    WatchdogModel::new(nodes, Profile::Outage, faults, mutation).with_restarts()
}

/// A companion's successor, started from the kept state (`--state-dir`) during an
/// outage, feeds in time: no machine is reset.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn a_restart_from_the_kept_state_in_an_outage_resets_no_machine() {
    for nodes in [3, 5] {
        let report = search(restarting(nodes, Mutation::None));
        assert!(report.violation.is_none(), "{:?}", report.violation);
    }
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn a_successor_that_ignores_the_kept_state_is_caught() {
    for nodes in [3, 5] {
        caught(
            &search(restarting(nodes, Mutation::KeptStateIgnored)),
            "outage safety",
        );
    }
}

/// The control-plane profile where N's companion may crash, its successor start
/// with the kept state or without or never, its machine (reset) boot again, and its
/// driver may lack the magic close; two faults (one with five nodes: the peers only
/// beat and are acknowledged in this profile, so that five add nothing but the
/// majority's arithmetic).
fn lifecycle(nodes: usize, mutation: Mutation) -> WatchdogModel {
    let faults = if nodes >= 5 { 1 } else { 2 };
    WatchdogModel::new(nodes, Profile::ControlPlane, faults, mutation).with_lifecycle()
}

/// Issue 52, items 2 and 3: a crash, a restart, a reboot (its companion started or
/// not) never let a release through while N's machine runs a boot that reached the
/// API server.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn crashes_restarts_and_reboots_never_outlast_the_wait() {
    for nodes in [3, 5] {
        holds(&search(lifecycle(nodes, Mutation::None)));
    }
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn a_driver_without_the_magic_close_accepted_is_caught() {
    for nodes in [3, 5] {
        caught(
            &search(lifecycle(nodes, Mutation::NonMagicCloseAccepted)),
            "release safety",
        );
    }
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn the_evidence_of_another_boot_taken_is_caught() {
    for nodes in [3, 5] {
        caught(
            &search(lifecycle(nodes, Mutation::OtherBootEvidence)),
            "release safety",
        );
    }
}

/// Issue 52, item 4: every peer's answer arrives twice (a duplicate, a replay within
/// the round); counted per answer, N and one peer of five are a majority.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn answers_counted_per_answer_not_per_node_is_caught() {
    caught(
        &run(5, Profile::Peers, Mutation::CountedPerAnswer),
        "release safety",
    );
}

/// The control-plane profile with a replica that believes it still leads in the
/// term before the leader's, reached by N alone in a partition of its own; three
/// faults (two with five nodes).
fn old_leader(nodes: usize, mutation: Mutation) -> WatchdogModel {
    let faults = if nodes >= 5 { 2 } else { 3 };
    WatchdogModel::new(nodes, Profile::ControlPlane, faults, mutation).with_old_leader()
}

/// Issue 52, item 5: an old leader never keeps fed a node its companion took the
/// newer term of (the companion refuses its acknowledgements; it stands down on the
/// first beat that names the newer term).
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn an_old_leader_never_keeps_a_released_node_fed() {
    for nodes in [3, 5] {
        holds(&search(old_leader(nodes, Mutation::None)));
    }
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn leadership_without_a_term_is_caught() {
    for nodes in [3, 5] {
        caught(
            &search(old_leader(nodes, Mutation::NoTerm)),
            "release safety",
        );
    }
}

/// N's crash and an old leader in one search, N's successor of the same boot
/// started from the kept state (a container restarted in its pod): it holds the term
/// its predecessor took (`Kept::term_seen`) and refuses the old leader's
/// acknowledgements. Its machine reset and booted again, the new boot's companion
/// (which holds no term) may be fed by the old leader, but the leader never releases
/// on its watchdog: its last acknowledgement without the mark went to the boot before.
fn old_leader_and_lifecycle(mutation: Mutation) -> WatchdogModel {
    WatchdogModel::new(3, Profile::ControlPlane, 2, mutation)
        .with_lifecycle()
        .with_old_leader()
        .with_kept_restarts_only()
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn an_old_leader_never_feeds_a_successor_that_kept_the_term() {
    holds(&search(old_leader_and_lifecycle(Mutation::None)));
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn a_term_not_kept_across_a_restart_is_caught() {
    caught(
        &search(old_leader_and_lifecycle(Mutation::TermNotKept)),
        "release safety",
    );
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn a_watchdog_of_a_boot_begun_after_the_last_acknowledgement_is_caught() {
    caught(
        &search(old_leader_and_lifecycle(Mutation::AckOfAnotherBoot)),
        "release safety",
    );
}

/// Not a mutation: what the term does not cover. A successor started afresh on the
/// same boot (a new pod, its emptyDir gone, while the crashed one's watchdog still
/// counts) holds no term, so, cut off with an old leader, it takes its acknowledgement
/// and feeds while the leader releases N. Only the old leader's own checks stand
/// against it (its Lease's renew deadline on the boot clock, the clock skew its
/// companions' beats show: `Leadership`, `SkewWatch`), which the model does not hold;
/// docs/proof.md lists it among what the proof assumes.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn an_old_leader_feeds_a_new_pods_companion_that_took_no_term() {
    let model = WatchdogModel::new(3, Profile::ControlPlane, 2, Mutation::None)
        .with_lifecycle()
        .with_old_leader();
    caught(&search(model), "release safety");
}

/// A peer's restart: the leader's proof of its predecessor's hold reaches past the
/// crash, and its successor says nothing to its peers until that proof has run out.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn a_peers_restart_never_lets_it_keep_a_released_node_fed() {
    holds(&run(3, Profile::PeerRestarts, Mutation::None));
    holds(&run(5, Profile::PeerRestarts, Mutation::None));
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn a_successor_answering_its_peers_at_once_is_caught() {
    caught(
        &run(3, Profile::PeerRestarts, Mutation::AnswersPeersAtOnce),
        "release safety",
    );
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn rule_c_without_the_majority_is_caught() {
    caught(
        &run(5, Profile::Peers, Mutation::PeersWithoutMajority),
        "release safety",
    );
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn the_wait_counted_from_the_mark_alone_is_caught() {
    caught(
        &run(3, Profile::ControlPlane, Mutation::WaitFromMarkAlone),
        "release safety",
    );
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn the_drift_margin_dropped_is_caught() {
    caught(
        &run(3, Profile::ControlPlane, Mutation::NoDriftMargin),
        "release safety",
    );
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn the_majority_heard_dropped_is_caught() {
    caught(
        &run(3, Profile::Peers, Mutation::NoMajorityHeard),
        "release safety",
    );
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn the_allowance_dropped_is_caught() {
    caught(&search(long(Mutation::NoAllowance)), "release safety");
}

/// The control-plane search with I = 4 s, where every leader's clock may release
/// (with I = 2 s only the slowest does, whose wait hides the allowance), with two
/// faults.
fn long(mutation: Mutation) -> WatchdogModel {
    WatchdogModel::new(3, Profile::ControlPlane, 2, mutation).with_long_isolation()
}

/// With I = 4 s, the allowance included in the wait covers a feed that lands late.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn the_control_plane_answers_never_outlast_the_wait_with_a_longer_isolation() {
    holds(&search(long(Mutation::None)));
}

/// The leader marks one of N's peers and may lift the mark: what it proves of that
/// peer never counts a moment in which it could have told N "neither".
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn a_peers_mark_never_lets_it_keep_a_released_node_fed() {
    holds(&run(3, Profile::PeerMarks, Mutation::None));
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn a_peers_proof_not_ended_at_its_mark_is_caught() {
    caught(
        &run(3, Profile::PeerMarks, Mutation::HeardNotEndedAtMark),
        "release safety",
    );
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn a_hold_kept_across_a_mark_is_caught() {
    caught(
        &run(3, Profile::PeerMarks, Mutation::HoldKeptAcrossMark),
        "release safety",
    );
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of states: cargo test --release -p nodefence-watchdog"
)]
fn a_marked_peer_counted_as_heard_is_caught() {
    caught(
        &run(3, Profile::PeerMarks, Mutation::MarkedPeerHeard),
        "release safety",
    );
}
