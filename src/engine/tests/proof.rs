//! The Off proof: readings that fail, contradict, are not Off, predate a newer sign of
//! life or waited out a pause release nothing; and how a blocked incident is announced.

use super::*;

#[test]
fn an_unreachable_bmc_releases_nothing_and_backs_off() {
    let mut h = Harness::new(Policy::default());
    h.add("w1", Bmc::Error);
    h.not_ready("w1");
    h.advance(secs(600));
    assert!(!h.released("w1"));
    assert_eq!(h.power_offs("w1"), 0);
    let queries = h.count(|a| matches!(a, Action::QueryPower { .. }));
    assert!(
        queries < 30,
        "bounded backoff: {queries} queries in 10 minutes"
    );
    assert!(queries > 5, "but it keeps trying: {queries}");
    let warnings = h
        .reasons("w1")
        .iter()
        .filter(|r| **r == Reason::PowerQueryFailed)
        .count();
    assert_eq!(
        warnings,
        1 + 600 / 120,
        "one warning, then one reminder every remind_every (2m), not one per retry"
    );
    let notes: Vec<&Notice> = h
        .log
        .iter()
        .filter_map(|a| match a {
            Action::Notify(n) if n.reason == Reason::PowerQueryFailed => Some(n),
            _ => None,
        })
        .collect();
    assert!(
        notes
            .iter()
            .all(|n| n.series == Some("power_query_failing")),
        "one Event series: {notes:?}"
    );
    let last = &notes[notes.len() - 1].message;
    assert!(
        last.contains("still so after 10m") && last.contains("failed readings in a row"),
        "how long, how many: {last}"
    );
}

#[test]
fn a_block_is_announced_once_when_reminders_are_off() {
    let mut h = Harness::new(Policy {
        remind_every: Duration::ZERO,
        ..Policy::default()
    });
    h.add("w1", Bmc::Error);
    h.not_ready("w1");
    h.advance(secs(600));
    let warnings = h
        .reasons("w1")
        .iter()
        .filter(|r| **r == Reason::PowerQueryFailed)
        .count();
    assert_eq!(warnings, 1);
}

#[test]
fn a_new_kind_of_block_starts_its_own_series_and_clock() {
    let mut h = Harness::new(Policy::default());
    h.add("w1", Bmc::Error);
    h.add("w2", Bmc::State(PowerState::On));
    h.add("w3", Bmc::State(PowerState::On));
    h.not_ready("w1");
    h.advance(secs(300));
    // The BMC answers again: the machine is On, and fencing is paused.
    let a = h.engine.set_paused(true, h.now);
    h.run(a);
    h.bmc.insert("w1".into(), Bmc::State(PowerState::On));
    h.advance(secs(130));
    let blocked: Vec<&Notice> = h
        .log
        .iter()
        .filter_map(|a| match a {
            Action::Notify(n) if n.reason == Reason::Blocked => Some(n),
            _ => None,
        })
        .collect();
    assert!(
        blocked.iter().all(|n| n.series == Some("paused")),
        "{blocked:?}"
    );
    assert_eq!(
        blocked.len(),
        2,
        "announced, then reminded once: {blocked:?}"
    );
    assert!(
        blocked[1].message.contains("still so after 2m"),
        "counted from the pause, not from the failure: {}",
        blocked[1].message
    );
}

#[test]
fn a_lying_or_flapping_bmc_is_never_released() {
    let mut h = Harness::new(Policy::default());
    // More readings than 400 s can take (the script repeats its last one once spent).
    let flap: VecDeque<Result<PowerState, ()>> = (0..3000)
        .map(|i| {
            Ok(if i % 3 == 2 {
                PowerState::On
            } else {
                PowerState::Off
            })
        })
        .collect();
    h.add("flap", Bmc::Script(flap));
    h.add("liar", Bmc::Liar);
    for n in ["h1", "h2", "h3"] {
        h.add(n, Bmc::State(PowerState::On));
    }
    h.hang_kubelet("flap");
    h.hang_kubelet("liar");
    h.not_ready("flap");
    h.not_ready("liar");
    h.advance(secs(400));
    assert!(!h.released("flap"));
    assert!(!h.released("liar"));
    assert!(
        h.reasons("flap")
            .contains(&Reason::ContradictingPowerReadings)
    );
    assert_eq!(
        h.power_offs("liar"),
        3,
        "max_power_off_attempts, then a person"
    );
    assert!(h.reasons("liar").contains(&Reason::Blocked));
}

#[test]
fn transitional_and_unknown_states_release_nothing() {
    for state in [
        PowerState::PoweringOff,
        PowerState::PoweringOn,
        PowerState::Unknown("Standby".into()),
    ] {
        let mut h = Harness::new(Policy::default());
        h.add("w1", Bmc::State(state.clone()));
        h.not_ready("w1");
        h.advance(secs(300));
        assert!(!h.released("w1"), "{state}");
        assert_eq!(h.power_offs("w1"), 0, "{state}");
    }
}

#[test]
fn a_node_that_recovers_before_the_release_aborts_it() {
    let mut h = Harness::new(Policy {
        confirm_readings: 3,
        confirm_interval: secs(5),
        ..Policy::default()
    });
    h.add("w1", Bmc::State(PowerState::Off));
    h.hang_kubelet("w1");
    h.not_ready("w1");
    h.advance(secs(6));
    assert!(!h.released("w1"));
    h.bmc.insert("w1".into(), Bmc::State(PowerState::On));
    h.ready("w1");
    for _ in 0..60 {
        h.renew_leases();
        h.advance(secs(1));
    }
    assert!(!h.released("w1"), "Ready again: nothing is released");
    assert!(h.reasons("w1").contains(&Reason::RecoveredBeforeRelease));
}

#[test]
fn off_readings_older_than_a_newer_sign_of_life_do_not_count() {
    let mut h = Harness::new(Policy {
        confirm_interval: secs(5),
        ..Policy::default()
    });
    h.add("w1", Bmc::State(PowerState::Off));
    h.hang_kubelet("w1");
    h.not_ready("w1");
    h.advance(secs(6)); // two Off readings so far
    // The kubelet renews its Lease (it was alive after all), still NotReady.
    let now = h.now;
    h.set_facts("w1", |f| f.lease_renewed = Some(now));
    h.advance(secs(6));
    assert!(!h.released("w1"), "needs three readings after the renewal");
    h.advance(secs(10));
    assert!(h.released("w1"));
}

/// A kubelet whose clock runs behind writes renewTimes older than the Off readings
/// nodefence already took: the renewal is still a sign of life, judged by when
/// nodefence saw it, and the readings before it prove nothing.
#[test]
fn a_renewal_written_by_a_clock_behind_still_voids_the_readings_before_it() {
    let mut h = Harness::new(Policy {
        confirm_interval: secs(5),
        ..Policy::default()
    });
    h.add("w1", Bmc::State(PowerState::Off));
    h.hang_kubelet("w1");
    h.not_ready("w1");
    h.advance(secs(6)); // two Off readings so far
    let now = h.now;
    h.set_facts("w1", |f| {
        f.lease_renewed = Some(now - secs(20));
        f.lease_seen = Some(now);
    });
    h.advance(secs(6));
    assert!(
        !h.released("w1"),
        "needs three readings after the renewal nodefence saw"
    );
    h.advance(secs(10));
    assert!(h.released("w1"));
    let proof = h
        .log
        .iter()
        .find_map(|a| match a {
            Action::Release { proof, .. } => Some(proof.clone()),
            _ => None,
        })
        .expect("a release");
    assert!(
        proof
            .off()
            .expect("an Off proof")
            .readings
            .iter()
            .all(|t| *t > now),
        "{proof:?}"
    );
}

/// An Off proof that waited out a pause is read again before anything is released:
/// the machine may have been switched on meanwhile (its kubelet still booting, so the
/// node shows no sign of life yet). Found by the whole-system simulation (seed 446):
/// the release went out the moment fencing resumed, on readings minutes old, while
/// the machine was powering on.
#[test]
fn a_proof_that_waited_out_a_pause_is_read_again_before_a_release() {
    let mut h = Harness::new(Policy::default());
    h.add("w1", Bmc::State(PowerState::On));
    h.add("w2", Bmc::State(PowerState::On));
    h.add("w3", Bmc::State(PowerState::On));
    let now = h.now;
    let a = h.engine.set_paused(true, now);
    h.run(a);
    h.lose_power("w1");
    h.not_ready("w1");
    h.advance(secs(120));
    assert!(!h.released("w1"), "paused: nothing is released");
    // Someone powers the machine on while fencing is paused; its kubelet is still
    // booting when fencing resumes.
    h.bmc.insert("w1".into(), Bmc::State(PowerState::On));
    h.advance(secs(5));
    let resumed = h.now;
    let a = h.engine.set_paused(false, resumed);
    h.run(a);
    h.advance(secs(30));
    // The machine is On and its node long NotReady: it is fenced again, and the
    // release rests on readings taken after fencing resumed, never on the old proof.
    let proof = h
        .log
        .iter()
        .find_map(|a| match a {
            Action::Release { node, proof, .. } if node == "w1" => Some(proof.clone()),
            _ => None,
        })
        .expect("released after the new power-off");
    assert!(
        proof
            .off()
            .expect("an Off proof")
            .readings
            .iter()
            .all(|t| *t >= resumed),
        "released on readings taken before fencing resumed: {:?} (resumed {resumed:?})",
        proof.off().expect("an Off proof").readings
    );
    assert_eq!(h.power_offs("w1"), 1, "fenced again once");
}
