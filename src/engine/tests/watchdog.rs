//! The watchdog level (`watchdog_fencing`): a node none of whose power methods can be
//! read is marked, and released only on the release rule's proof that its own
//! hardware watchdog reset it; never without the opt-in, an armed watchdog, or while
//! a power method answers; the mark waits for what a power-off waits for.

use super::*;

fn watchdog_policy() -> Policy {
    Policy {
        watchdog_fencing: true,
        ..Policy::default()
    }
}

fn silence(last_beat: SystemTime) -> CompanionSilence {
    CompanionSilence {
        last_beat,
        declared: last_beat + secs(2),
    }
}

/// The machine and its BMC lose power together: its kubelet and companion fall
/// silent, every power reading fails.
fn dies_with_its_bmc(h: &mut Harness, node: &str) {
    let lost = h.now;
    h.alive.remove(node);
    h.bmc.insert(node.into(), Bmc::Error);
    h.set_facts(node, |f| f.companion_silent = Some(silence(lost)));
}

fn marks(h: &Harness, node: &str) -> usize {
    h.count(|a| matches!(a, Action::MarkForFencing { node: n, .. } if n == node))
}

fn release_proof(h: &Harness, node: &str) -> Option<ReleaseProof> {
    h.log.iter().find_map(|a| match a {
        Action::Release { node: n, proof, .. } if n == node => Some(proof.clone()),
        _ => None,
    })
}

/// The machine and its BMC lose power together: nothing can be read, the companion
/// falls silent. Marked at the first failed reading, released once the release rule
/// proves the reset; the release says it rests on the watchdog, not on a reading.
#[test]
fn a_machine_dead_with_its_bmc_is_released_on_its_watchdog() {
    let mut h = Harness::new(watchdog_policy());
    h.add("w1", Bmc::State(PowerState::On));
    h.add("w2", Bmc::State(PowerState::On));
    h.armed.insert("w1".into());
    dies_with_its_bmc(&mut h, "w1");
    assert_eq!(marks(&h, "w1"), 1, "marked at the first failed reading");
    let marked = h.marks["w1"];
    h.advance(secs(30));
    let released = h.release_times.get("w1").copied().expect("released");
    assert!(released >= marked + h.watchdog_wait, "not before the wait");
    assert!(
        released <= marked + h.watchdog_wait + secs(1),
        "released {:?} after the mark",
        released.duration_since(marked)
    );
    let Some(ReleaseProof::Watchdog(proof)) = release_proof(&h, "w1") else {
        panic!("a watchdog proof")
    };
    assert_eq!(proof.marked_at, marked);
    assert_eq!(h.power_offs("w1"), 0);
    assert!(
        h.plans["w1"].force_delete_pods,
        "a reset machine's pods are gone"
    );
    let texts: Vec<String> = h
        .log
        .iter()
        .filter_map(|a| match a {
            Action::Notify(n) if n.reason == Reason::Released => Some(n.message.clone()),
            _ => None,
        })
        .collect();
    assert!(
        texts.iter().any(
            |t| t.contains("rests on its hardware watchdog, not on an Off reading")
                && t.contains("marked for its watchdog +")
        ),
        "{texts:?}"
    );
    assert!(h.reasons("w1").contains(&Reason::ResetByWatchdog));
    assert!(!h.reasons("w1").contains(&Reason::ConfirmedOff));
    assert!(!h.released("w2"));
}

/// Without the opt-in, the same outage is what it always was: nothing is marked,
/// nothing released, and the unreadable BMC is the warning.
#[test]
fn without_the_opt_in_nothing_is_marked_or_released() {
    let mut h = Harness::new(Policy::default());
    h.add("w1", Bmc::State(PowerState::On));
    h.armed.insert("w1".into());
    dies_with_its_bmc(&mut h, "w1");
    h.advance(secs(120));
    assert_eq!(marks(&h, "w1"), 0);
    assert!(!h.released("w1"));
    assert!(h.reasons("w1").contains(&Reason::PowerQueryFailed));
}

/// A companion without an armed watchdog: the mark is refused (and tried again with
/// backoff, told each time), and nothing is released.
#[test]
fn no_armed_watchdog_no_mark_and_no_release() {
    let mut h = Harness::new(watchdog_policy());
    h.add("w1", Bmc::State(PowerState::On));
    dies_with_its_bmc(&mut h, "w1");
    h.advance(secs(120));
    assert!(h.marks.is_empty());
    assert!(marks(&h, "w1") >= 2, "tried again");
    assert!(marks(&h, "w1") <= 10, "with backoff: {}", marks(&h, "w1"));
    assert!(!h.released("w1"));
    let refused = h.log.iter().any(|a| {
        matches!(a, Action::Notify(n)
        if n.reason == Reason::WatchdogFencing && n.message.contains("no armed hardware watchdog"))
    });
    assert!(refused, "said why");
}

/// A power method that answers decides: read On, the machine is powered off through
/// it (after `unhealthy_after`), never marked; read On after the mark, the watchdog
/// proof is not acted on.
#[test]
fn a_power_method_that_answers_takes_the_decision() {
    // On from the start: never marked.
    let mut h = Harness::new(watchdog_policy());
    h.add("w1", Bmc::State(PowerState::On));
    h.armed.insert("w1".into());
    let lost = h.now;
    h.hang_kubelet("w1");
    h.set_facts("w1", |f| f.companion_silent = Some(silence(lost)));
    h.advance(secs(30));
    assert_eq!(marks(&h, "w1"), 0);
    assert!(!h.released("w1"));

    // Unreadable, marked, then the BMC answers On before the proof: no watchdog
    // release (the machine is On: a reset one reboots, and the BMC now decides).
    let mut h = Harness::new(watchdog_policy());
    h.add("w1", Bmc::State(PowerState::On));
    h.armed.insert("w1".into());
    h.watchdog_wait = secs(20);
    let lost = h.now;
    h.hang_kubelet("w1");
    h.bmc.insert("w1".into(), Bmc::Error);
    h.set_facts("w1", |f| f.companion_silent = Some(silence(lost)));
    assert_eq!(marks(&h, "w1"), 1);
    h.advance(secs(5));
    h.bmc.insert("w1".into(), Bmc::State(PowerState::On));
    h.advance(secs(60));
    assert!(
        !matches!(release_proof(&h, "w1"), Some(ReleaseProof::Watchdog(_))),
        "released on the watchdog although the BMC read On"
    );
}

/// Still beating companion (the kubelet is what failed): the mark is a power command
/// in effect and waits, like a power-off, for the node to be NotReady for
/// `unhealthy_after`.
#[test]
fn with_its_companion_beating_the_mark_waits_for_unhealthy_after() {
    let mut h = Harness::new(watchdog_policy());
    h.add("w1", Bmc::State(PowerState::On));
    h.armed.insert("w1".into());
    h.hang_kubelet("w1");
    h.bmc.insert("w1".into(), Bmc::Error);
    h.advance(secs(10));
    assert_eq!(marks(&h, "w1"), 0, "only the Lease is stale");
    h.not_ready("w1");
    let not_ready = h.now;
    h.advance(secs(30));
    assert_eq!(marks(&h, "w1"), 0, "NotReady, not yet for unhealthy_after");
    h.advance(secs(60));
    assert_eq!(marks(&h, "w1"), 1);
    assert!(h.marks["w1"] >= not_ready.min(t0()) + secs(60));
    h.advance(secs(20));
    assert!(h.released("w1"));
}

/// Storm protection and the pause hold the mark, as they hold a power-off.
#[test]
fn storm_and_pause_hold_the_mark() {
    let mut h = Harness::new(watchdog_policy());
    for n in ["w1", "w2", "w3", "w4", "w5"] {
        h.add(n, Bmc::State(PowerState::On));
        h.armed.insert(n.into());
    }
    // Three of five kubelets cut off (a partition on the control plane's side).
    for n in ["w2", "w3", "w4"] {
        h.hang_kubelet(n);
        h.not_ready(n);
    }
    h.advance(secs(10));
    assert!(h.engine.storm_active());
    dies_with_its_bmc(&mut h, "w1");
    h.advance(secs(60));
    assert_eq!(marks(&h, "w1"), 0, "a storm holds the mark");

    let mut h = Harness::new(watchdog_policy());
    h.add("w1", Bmc::State(PowerState::On));
    h.add("w2", Bmc::State(PowerState::On));
    h.armed.insert("w1".into());
    let now = h.now;
    let a = h.engine.set_paused(true, now);
    h.run(a);
    dies_with_its_bmc(&mut h, "w1");
    h.advance(secs(60));
    assert_eq!(marks(&h, "w1"), 0);
    let now = h.now;
    let a = h.engine.set_paused(false, now);
    h.run(a);
    h.advance(secs(20));
    assert_eq!(marks(&h, "w1"), 1);
    assert!(h.released("w1"));
}

/// A release the executor refuses (the mark removed by a person, a sign of life)
/// is not retried on the old proof: the rule is applied again.
#[test]
fn a_refused_watchdog_release_checks_again() {
    let mut h = Harness::new(watchdog_policy());
    h.add("w1", Bmc::State(PowerState::On));
    h.add("w2", Bmc::State(PowerState::On));
    h.armed.insert("w1".into());
    dies_with_its_bmc(&mut h, "w1");
    h.refuse_releases
        .push("Node w1 no longer carries its fencing mark".into());
    h.advance(secs(14));
    assert!(release_proof(&h, "w1").is_some(), "a release was asked");
    assert!(h.reasons("w1").contains(&Reason::ReleaseFailed));
    h.advance(secs(2));
    // Release, refused; the rule applied again; released.
    let steps: Vec<&str> = h
        .log
        .iter()
        .filter_map(|a| match a {
            Action::Release { .. } => Some("release"),
            Action::CheckWatchdog { .. } => Some("check"),
            _ => None,
        })
        .collect();
    let first = steps
        .iter()
        .position(|s| *s == "release")
        .expect("a release");
    assert_eq!(
        &steps[first..],
        ["release", "check", "release"],
        "{steps:?}"
    );
    assert!(h.released("w1"), "and the second release is done");
}

/// Refused again and again (a pause only the executor has read, seed 3006): the rule
/// holds again at once each time, so each new attempt waits a backoff that grows,
/// up to `max_query_backoff`, instead of a loop at one instant.
#[test]
fn refused_watchdog_releases_are_retried_with_a_growing_backoff() {
    let mut h = Harness::new(watchdog_policy());
    h.add("w1", Bmc::State(PowerState::On));
    h.add("w2", Bmc::State(PowerState::On));
    h.armed.insert("w1".into());
    dies_with_its_bmc(&mut h, "w1");
    for _ in 0..6 {
        h.refuse_releases
            .push("fencing is paused cluster-wide: nothing released".into());
    }
    h.advance(secs(90));
    assert_eq!(h.refused_at.len(), 6, "every refusal was met");
    let gaps: Vec<Duration> = h
        .refused_at
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).unwrap_or_default())
        .collect();
    let policy = watchdog_policy();
    for (i, gap) in gaps.iter().enumerate() {
        let least = (policy.confirm_interval * (2u32 << i)).min(policy.max_query_backoff);
        assert!(
            *gap >= least,
            "attempt {}: {gap:?} after the last, not {least:?}: {gaps:?}",
            i + 2
        );
    }
    assert!(gaps.windows(2).all(|g| g[1] >= g[0]), "{gaps:?}");
    assert!(h.released("w1"), "released once the executor allows it");
}

/// A node that recovers after its mark loses it (the acknowledgements and the
/// annotation), and a later incident counts from its own mark: an old one, perhaps
/// removed since, proves nothing (found by the random schedules: a release at the
/// instant of a second mark, on the first's wait).
#[test]
fn a_recovery_clears_the_mark_and_the_next_incident_counts_from_its_own() {
    let mut h = Harness::new(watchdog_policy());
    h.add("w1", Bmc::State(PowerState::On));
    h.add("w2", Bmc::State(PowerState::On));
    h.armed.insert("w1".into());
    let lost = h.now;
    h.hang_kubelet("w1");
    h.bmc.insert("w1".into(), Bmc::Error);
    h.set_facts("w1", |f| f.companion_silent = Some(silence(lost)));
    assert_eq!(marks(&h, "w1"), 1);
    h.advance(secs(3));
    h.set_facts("w1", |f| f.companion_silent = None);
    h.ready("w1");
    assert!(h.reasons("w1").contains(&Reason::RecoveredBeforeRelease));
    assert_eq!(
        h.count(|a| matches!(a, Action::ClearMark { node } if node == "w1")),
        1
    );
    assert!(!h.marks.contains_key("w1"));
    h.advance(secs(60));
    // Fails again: a new mark, and the whole wait after it.
    let lost = h.now;
    h.hang_kubelet("w1");
    h.set_facts("w1", |f| f.companion_silent = Some(silence(lost)));
    assert_eq!(marks(&h, "w1"), 2);
    let second = h.marks["w1"];
    h.advance(secs(30));
    let released = h.release_times["w1"];
    assert!(released >= second + h.watchdog_wait);
}

/// Issue 52, item 5: a new term finds a Node still carrying a fencing mark an earlier
/// term wrote. On a healthy node it goes (once); on an unhealthy one the term holds it
/// (its acknowledgements carry it) instead of lifting it unknowingly; a mark this term
/// wrote is its own and gets neither.
#[test]
fn a_mark_found_on_a_node_is_cleared_when_healthy_and_held_when_not() {
    let mut h = Harness::new(watchdog_policy());
    h.add("w1", Bmc::State(PowerState::On));
    h.add("w2", Bmc::State(PowerState::On));
    h.set_facts("w1", |f| f.fencing_marked = true);
    let clears = |h: &Harness| h.count(|a| matches!(a, Action::ClearMark { node } if node == "w1"));
    let holds =
        |h: &Harness, n: &str| h.count(|a| matches!(a, Action::HoldMark { node } if node == n));
    assert_eq!(clears(&h), 1, "a healthy node's stale mark goes");
    h.advance(secs(5));
    h.set_facts("w1", |f| f.cordoned = false);
    assert_eq!(clears(&h), 1, "once, while the Node still shows it");
    h.set_facts("w1", |f| f.fencing_marked = false);
    h.set_facts("w1", |f| f.fencing_marked = true);
    assert_eq!(clears(&h), 2, "a mark written again is found again");
    // An unhealthy node found marked: held, never cleared.
    h.hang_kubelet("w2");
    h.advance(secs(30));
    assert!(
        h.reasons("w2").contains(&Reason::NodeSuspect),
        "{:?}",
        h.reasons("w2")
    );
    h.set_facts("w2", |f| f.fencing_marked = true);
    h.advance(secs(5));
    assert_eq!(holds(&h, "w2"), 1);
    assert_eq!(
        h.count(|a| matches!(a, Action::ClearMark { node } if node == "w2")),
        0
    );
}

/// A release rule that keeps refusing (here: the armed watchdog no longer reported)
/// is said, once per reason, as a Warning: the node stays marked and unreleased, and
/// the operator sees why rather than nothing at all.
#[test]
fn a_refused_watchdog_proof_is_said_once_not_left_silent() {
    let mut h = Harness::new(watchdog_policy());
    h.add("w1", Bmc::State(PowerState::On));
    h.add("w2", Bmc::State(PowerState::On));
    h.armed.insert("w1".into());
    dies_with_its_bmc(&mut h, "w1");
    assert_eq!(marks(&h, "w1"), 1);
    h.armed.remove("w1");
    h.advance(secs(120));
    assert!(!h.released("w1"), "refused: nothing released");
    let said = h
        .log
        .iter()
        .filter(|a| {
            matches!(a, Action::Notify(n) if n.reason == Reason::WatchdogFencing
            && n.severity == Severity::Warning
            && n.message.contains("does not prove its machine reset yet"))
        })
        .count();
    assert_eq!(said, 1, "said once for one reason");
    let asked = h.count(|a| matches!(a, Action::CheckWatchdog { node, .. } if node == "w1"));
    assert!(asked > 3, "asked again and again ({asked})");
}
