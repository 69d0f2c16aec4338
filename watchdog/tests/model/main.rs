//! The watchdog level's feeding and release rules, model-checked: every interleaving
//! of message loss and delay, partitions, a crash, a peer's mark and its lift, and
//! clock drift, for 3 and 5 nodes, explored breadth first ([`explorer`]) over a model
//! that runs nodefence's own rules ([`model`]). Nine deliberate bugs must each be
//! caught: rule c without the majority, the wait counted from the mark alone, the
//! drift margin dropped, the scheduling allowance dropped, the leader not asking that
//! a majority of the other companions was heard, a mark the leader gave up (N came
//! back) still counted when it fences N again, and, of a peer the leader marked, what
//! it proved not ended at the mark, the hold the peer reports kept across its mark,
//! and the peer counted as heard while marked (issue 52).
//!
//! About 55 million states in all: `cargo test --release -p nodefence-watchdog`
//! explores them in about three minutes on two cores (CI does); a debug build, a
//! hundred times slower, leaves these tests out (`#[ignore]`, listed as not run).
//! `NODEFENCE_MODEL_PROGRESS=1` prints the search's progress.

mod explorer;
mod model;

use explorer::{Report, explore};
use model::{Mutation, Profile, WatchdogModel};

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
        "{nodes} nodes, {profile:?}, {mutation:?}{}{}: {} states, depth {}, {} released, {:.1?}",
        if model.lifts() { ", lifts" } else { "" },
        if model.isolation() > std::time::Duration::from_secs(2) {
            ", I = 4 s"
        } else {
            ""
        },
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
