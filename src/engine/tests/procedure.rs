//! From an unhealthy node to a release, and every gate on the way.

use super::*;

#[test]
fn power_loss_is_released_from_the_stale_lease_before_not_ready() {
    let mut h = Harness::new(Policy::default());
    h.add("w1", Bmc::State(PowerState::On));
    h.add("w2", Bmc::State(PowerState::On));
    let lost = h.now;
    h.lose_power("w1");
    h.advance(secs(50)); // Kubernetes would mark it NotReady only now
    let released = h
        .release_times
        .get("w1")
        .copied()
        .expect("released on the fast path");
    let took = released.duration_since(lost).unwrap_or_default();
    // Suspect at the first missed renewal (12 s for the kubelet's 40 s Lease: it
    // renews every 10 s), then three readings half a second apart.
    assert!(
        took >= secs(12) && took <= secs(16),
        "released {took:?} after the power loss"
    );
    assert_eq!(
        h.power_offs("w1"),
        0,
        "no power command for a machine already off"
    );
    assert!(!h.released("w2"));
}

#[test]
fn without_the_fast_path_release_follows_not_ready_within_the_confirmation() {
    let policy = Policy {
        lease_stale_after: None,
        ..Policy::default()
    };
    let mut h = Harness::new(policy);
    h.add("w1", Bmc::State(PowerState::On));
    h.lose_power("w1");
    h.advance(secs(50));
    assert!(!h.released("w1"), "not before Kubernetes says NotReady");
    h.not_ready("w1");
    let start = h.now;
    h.advance(secs(5));
    assert!(h.released("w1"));
    assert!(h.now.duration_since(start).unwrap_or_default() <= secs(5));
    assert!(h.reasons("w1").contains(&Reason::ConfirmedOff));
}

#[test]
fn a_machine_still_on_is_powered_off_after_unhealthy_after_then_released() {
    let mut h = Harness::new(Policy::default());
    h.add("w1", Bmc::State(PowerState::On));
    h.add("w2", Bmc::State(PowerState::On));
    h.add("w3", Bmc::State(PowerState::On));
    h.hang_kubelet("w1");
    h.not_ready("w1");
    h.advance(secs(59));
    assert_eq!(h.power_offs("w1"), 0, "not before unhealthy_after");
    assert!(!h.released("w1"));
    assert!(h.reasons("w1").contains(&Reason::MachineStillOn));
    h.advance(secs(10));
    assert_eq!(h.power_offs("w1"), 1);
    assert!(h.released("w1"));
    // The command names the machine it is meant for: the executor checks it against
    // the BMC's identity read in the same exchange.
    let target = h.log.iter().find_map(|a| match a {
        Action::PowerOff { target, .. } => Some(target.clone()),
        _ => None,
    });
    assert_eq!(
        target,
        Some(Target {
            node: h.facts["w1"].identity.clone(),
            require_identity: Policy::default().require_identity,
        })
    );
}

#[test]
fn a_partitioned_node_is_powered_off_unhealthy_after_its_first_missed_renewal() {
    // The kubelet is cut off (machine On). nodefence sees the Lease miss a renewal at
    // 12 s; Kubernetes marks the node NotReady only at 50 s. unhealthy_after (60 s)
    // counts from the failure nodefence saw, not from NotReady: the power-off comes at
    // about 72 s, not 110 s. Then nodefence deletes the pods itself, as PodGC would
    // only on its next 20 s pass.
    let mut h = Harness::new(Policy::default());
    for n in ["w1", "w2", "w3"] {
        h.add(n, Bmc::State(PowerState::On));
    }
    let cut = h.now;
    h.hang_kubelet("w1");
    h.advance(secs(50));
    h.not_ready("w1");
    h.advance(secs(20));
    assert_eq!(h.power_offs("w1"), 0, "not before unhealthy_after");
    h.advance(secs(5));
    assert_eq!(
        h.power_offs("w1"),
        1,
        "unhealthy_after from the missed renewal"
    );
    let off_at = h.power_off_times[0].duration_since(cut).unwrap_or_default();
    assert!(
        off_at >= secs(71) && off_at <= secs(74),
        "powered off {off_at:?} after the cut (12 s + 60 s)"
    );
    h.advance(secs(10));
    assert!(h.released("w1"));
    assert!(
        h.plans["w1"].force_delete_pods,
        "after its own power-off nodefence deletes the pods itself"
    );
    // The Released Event says where the time went, from the last sign of life.
    let released = h
        .log
        .iter()
        .find_map(|a| match a {
            Action::Notify(n) if n.reason == Reason::Released => Some(n.message.clone()),
            _ => None,
        })
        .expect("a Released notice");
    for step in [
        "detected +1",
        "first reading +1",
        "power-off sent +7",
        "Off proven +",
        "released +",
    ] {
        assert!(released.contains(step), "{step:?} missing in {released:?}");
    }
    let steps = h
        .log
        .iter()
        .find_map(|a| match a {
            Action::Release { steps, .. } => Some(*steps),
            _ => None,
        })
        .expect("a release");
    assert!(steps.detected <= steps.first_reading.expect("read"));
    assert!(steps.power_off_sent.expect("sent") < steps.off_proven);
}

#[test]
fn a_node_not_ready_before_its_lease_went_stale_counts_from_not_ready() {
    // NotReady first (the kubelet reports itself not ready and keeps renewing, then
    // stops): unhealthy_after counts from the earlier of the two.
    let mut h = Harness::new(Policy::default());
    for n in ["w1", "w2", "w3"] {
        h.add(n, Bmc::State(PowerState::On));
    }
    h.not_ready("w1");
    let not_ready = h.now;
    h.advance(secs(30));
    h.hang_kubelet("w1");
    h.advance(secs(29));
    assert_eq!(h.power_offs("w1"), 0);
    h.advance(secs(2));
    assert_eq!(h.power_offs("w1"), 1);
    let off_at = h.power_off_times[0]
        .duration_since(not_ready)
        .unwrap_or_default();
    assert!(off_at >= secs(60) && off_at <= secs(61), "{off_at:?}");
}

#[test]
fn lease_staleness_alone_never_powers_off() {
    let mut h = Harness::new(Policy::default());
    h.add("w1", Bmc::State(PowerState::On));
    h.add("w2", Bmc::State(PowerState::On));
    // Kubelet stops renewing but the node is not yet NotReady; BMC says On.
    h.hang_kubelet("w1");
    h.advance(secs(300));
    assert_eq!(h.power_offs("w1"), 0);
    assert!(!h.released("w1"));
}

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
    assert!(proof.readings.iter().all(|t| *t > now), "{proof:?}");
}

#[test]
fn storm_protection_stops_power_offs_but_not_releases_of_off_machines() {
    let mut h = Harness::new(Policy::default());
    for i in 0..10 {
        h.add(&format!("w{i}"), Bmc::State(PowerState::On));
    }
    h.add("dead", Bmc::State(PowerState::Off));
    h.hang_kubelet("dead");
    for i in 0..5 {
        h.hang_kubelet(&format!("w{i}"));
        h.not_ready(&format!("w{i}"));
    }
    h.not_ready("dead");
    h.advance(secs(120));
    let power_offs = h.count(|a| matches!(a, Action::PowerOff { .. }));
    assert_eq!(power_offs, 0, "6 of 11 unhealthy > 40%: no power-off");
    assert!(h.released("dead"), "an Off machine is still released");
    assert!(h.engine.storm_active());
    assert!(
        h.log
            .iter()
            .any(|a| matches!(a, Action::Notify(n) if n.reason == Reason::StormProtection))
    );
}

#[test]
fn power_offs_respect_concurrency_and_spacing() {
    let mut h = Harness::new(Policy {
        max_unhealthy: MaxUnhealthy::Count(100),
        max_concurrent_fences: 2,
        min_power_off_interval: secs(10),
        ..Policy::default()
    });
    for i in 0..4 {
        h.add(&format!("w{i}"), Bmc::State(PowerState::On));
        h.hang_kubelet(&format!("w{i}"));
    }
    for i in 0..4 {
        h.not_ready(&format!("w{i}"));
    }
    h.hold_power_off = true;
    h.advance(secs(120));
    assert_eq!(
        h.count(|a| matches!(a, Action::PowerOff { .. })),
        2,
        "two in flight at most"
    );
    let t = &h.power_off_times;
    assert!(
        t[1].duration_since(t[0]).unwrap_or_default() >= secs(10),
        "spaced by min_power_off_interval"
    );
    // Answering the held commands frees the slots for the other two.
    h.hold_power_off = false;
    for node in std::mem::take(&mut h.held) {
        let a = h.engine.power_off_done(&node, Ok(()), h.now);
        h.bmc.insert(node, Bmc::State(PowerState::Off));
        h.run(a);
    }
    h.advance(secs(60));
    assert_eq!(h.count(|a| matches!(a, Action::PowerOff { .. })), 4);
}

#[test]
fn pause_stops_every_mutation_and_resume_continues() {
    let mut h = Harness::new(Policy::default());
    h.add("w1", Bmc::State(PowerState::Off));
    h.add("w2", Bmc::State(PowerState::On));
    for n in ["h1", "h2", "h3"] {
        h.add(n, Bmc::State(PowerState::On));
    }
    for n in ["w1", "w2"] {
        h.hang_kubelet(n);
    }
    let a = h.engine.set_paused(true, h.now);
    h.run(a);
    h.not_ready("w1");
    h.not_ready("w2");
    h.advance(secs(300));
    assert!(
        !h.log.iter().any(Action::mutates),
        "paused: nothing mutating"
    );
    let a = h.engine.set_paused(false, h.now);
    h.run(a);
    for _ in 0..90 {
        h.renew_leases();
        h.advance(secs(1));
    }
    assert!(h.released("w1"));
    assert!(
        h.released("w2"),
        "powered off after unhealthy_after, then released"
    );
}

#[test]
fn excluded_nodes_are_never_touched() {
    let mut h = Harness::new(Policy::default());
    h.add("cp", Bmc::State(PowerState::Off));
    h.add("out", Bmc::State(PowerState::Off));
    h.add("unknown", Bmc::State(PowerState::Off));
    h.set_facts("cp", |f| f.control_plane = true);
    h.set_facts("out", |f| f.opted_out = true);
    h.set_facts("unknown", |f| f.in_inventory = false);
    for n in ["cp", "out", "unknown"] {
        h.not_ready(n);
    }
    h.advance(secs(300));
    assert!(!h.log.iter().any(|a| a.mutates()));
    assert!(!h.log.iter().any(|a| matches!(a, Action::QueryPower { .. })));
    assert_eq!(h.reasons("unknown"), vec![Reason::NodeIgnored], "said once");
}

#[test]
fn a_recovered_node_gets_its_taint_removed_after_recovered_after() {
    let mut h = Harness::new(Policy::default());
    h.add("w1", Bmc::State(PowerState::On));
    h.lose_power("w1");
    h.advance(secs(30));
    h.not_ready("w1");
    h.advance(secs(5));
    assert!(h.released("w1"));
    h.bmc.insert("w1".into(), Bmc::State(PowerState::On));
    h.ready("w1");
    h.advance(secs(10));
    assert_eq!(
        h.count(|a| matches!(a, Action::RemoveTaint { .. })),
        0,
        "not before recovered_after"
    );
    for _ in 0..30 {
        h.renew_leases();
        h.advance(secs(1));
    }
    assert_eq!(h.count(|a| matches!(a, Action::RemoveTaint { .. })), 1);
    assert!(matches!(
        h.engine.node("w1").map(|n| &n.phase),
        Some(Phase::Healthy)
    ));
}

#[test]
fn pods_are_force_deleted_only_where_podgc_would_not() {
    // Fast path (node still Ready in the API): nodefence deletes the pods itself.
    let mut h = Harness::new(Policy::default());
    h.add("w1", Bmc::State(PowerState::On));
    h.add("w2", Bmc::State(PowerState::On));
    h.lose_power("w1");
    h.advance(secs(35));
    assert!(h.plans["w1"].force_delete_pods, "fast path");
    // Without the fast path the release follows NotReady: PodGC does it.
    let mut h = Harness::new(Policy {
        lease_stale_after: None,
        ..Policy::default()
    });
    h.add("w1", Bmc::State(PowerState::On));
    h.add("w2", Bmc::State(PowerState::On));
    h.lose_power("w1");
    h.advance(secs(40));
    h.not_ready("w1");
    h.advance(secs(5));
    assert!(!h.plans["w1"].force_delete_pods, "NotReady: PodGC's job");
    for (setting, expected) in [
        (ForceDeletePods::Always, true),
        (ForceDeletePods::Never, false),
    ] {
        let mut h = Harness::new(Policy {
            force_delete_pods: setting,
            ..Policy::default()
        });
        h.add("w1", Bmc::State(PowerState::On));
        h.add("w2", Bmc::State(PowerState::On));
        h.lose_power("w1");
        h.advance(secs(35));
        assert_eq!(h.plans["w1"].force_delete_pods, expected, "{setting:?}");
    }
}

#[test]
fn a_node_policy_overrides_the_cluster_policy() {
    let wait = Policy {
        on_powered_on: OnPoweredOn::Wait,
        ..Policy::default()
    };
    let mut h = Harness::new(Policy::default());
    h.engine = Engine::new(Policy::default())
        .with_node_policies(BTreeMap::from([("gpu1".to_string(), wait)]));
    for n in ["w1", "gpu1", "w2", "w3", "w4"] {
        h.add(n, Bmc::State(PowerState::On));
    }
    h.hang_kubelet("w1");
    h.hang_kubelet("gpu1");
    h.advance(secs(40));
    h.not_ready("w1");
    h.not_ready("gpu1");
    h.advance(secs(90));
    assert_eq!(h.power_offs("w1"), 1, "cluster policy: power off");
    assert_eq!(h.power_offs("gpu1"), 0, "its own policy: wait");
    assert!(h.released("w1"));
    assert!(!h.released("gpu1"));
}

/// A power-off another term already sent for this failure (recorded on the Node before
/// it was sent) is not sent again by a new leader until `power_off_retry_after` from
/// it; one recorded for an earlier failure changes nothing. Found by the whole-system
/// simulation (seed 26): leadership flapping under API conflicts sent a second
/// ForceOff to a machine still powering off.
#[test]
fn a_power_off_recorded_by_an_earlier_term_is_not_sent_again() {
    for (recorded_after_failure, expected_at_first) in [(true, 0), (false, 1)] {
        let mut h = Harness::new(Policy {
            confirm_interval: secs(1),
            ..Policy::default()
        });
        h.add("w1", Bmc::Liar);
        h.add("w2", Bmc::State(PowerState::On));
        h.add("w3", Bmc::State(PowerState::On));
        h.hang_kubelet("w1");
        h.not_ready("w1");
        let failed = h.now;
        let recorded = if recorded_after_failure {
            failed + secs(55)
        } else {
            failed - secs(3600)
        };
        h.set_facts("w1", |f| f.power_off_recorded = Some((recorded, 1)));
        h.advance(secs(70));
        assert_eq!(
            h.power_offs("w1"),
            expected_at_first,
            "recorded after the failure: {recorded_after_failure}"
        );
        // The retry after a recorded power-off counts from the record.
        h.advance(secs(60));
        assert_eq!(h.power_offs("w1"), expected_at_first + 1);
        assert!(!h.released("w1"), "a liar's machine is never released");
    }
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
        proof.readings.iter().all(|t| *t >= resumed),
        "released on readings taken before fencing resumed: {:?} (resumed {resumed:?})",
        proof.readings
    );
    assert_eq!(h.power_offs("w1"), 1, "fenced again once");
}
