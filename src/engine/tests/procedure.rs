//! From an unhealthy node to a release: when the power-off and the release come, what
//! the release does, and the taint's removal once the node has recovered.

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

/// A silence whose last beat was at `last_beat`, declared 2 s later.
fn silence(last_beat: SystemTime) -> CompanionSilence {
    CompanionSilence {
        last_beat,
        declared: last_beat + secs(2),
    }
}

/// The companion's silence makes the node suspect at once, as a stale Lease does: a
/// machine read Off after the last beat is released long before the Lease would
/// have said anything, and no power command is sent.
#[test]
fn a_silent_companion_makes_the_node_suspect_before_its_lease_does() {
    let mut h = Harness::new(Policy::default());
    h.add("w1", Bmc::State(PowerState::On));
    h.add("w2", Bmc::State(PowerState::On));
    let lost = h.now;
    // Power lost; the Lease is still fresh (renewed at `lost`), the companion silent
    // since its last beat, at the same moment.
    h.lose_power("w1");
    h.set_facts("w1", |f| f.companion_silent = Some(silence(lost)));
    h.advance(secs(3));
    let released = h.release_times.get("w1").copied().expect("released");
    assert!(
        released.duration_since(lost).unwrap_or_default() < secs(4),
        "released {:?} after the last beat, not at the Lease's pace",
        released.duration_since(lost)
    );
    assert!(h.reasons("w1").contains(&Reason::NodeSuspect));
    assert_eq!(h.power_offs("w1"), 0);
    assert!(h.plans["w1"].force_delete_pods, "the fast path's pods");
    assert!(!h.released("w2"));
}

/// A companion that crashed on a healthy machine: the node is suspect until its
/// kubelet's next renewal outvotes the silence, read On and left alone meanwhile.
/// A machine whose kubelet is hung too: suspect, On, never powered off on the
/// companion's silence (nor then the stale Lease) alone, never released.
#[test]
fn a_silent_companion_alone_never_powers_off_nor_releases() {
    let mut h = Harness::new(Policy::default());
    h.add("w1", Bmc::State(PowerState::On));
    h.add("w2", Bmc::State(PowerState::On));
    let heard = h.now;
    h.set_facts("w1", |f| f.companion_silent = Some(silence(heard)));
    assert!(h.reasons("w1").contains(&Reason::NodeSuspect));
    h.advance(secs(3));
    assert!(
        matches!(h.engine.node("w1").map(|n| &n.phase), Some(Phase::Healthy)),
        "a renewal after the silence was declared: alive"
    );
    assert!(h.reasons("w1").contains(&Reason::RecoveredBeforeRelease));

    let mut h = Harness::new(Policy::default());
    h.add("w1", Bmc::State(PowerState::On));
    h.add("w2", Bmc::State(PowerState::On));
    let heard = h.now;
    h.hang_kubelet("w1");
    h.set_facts("w1", |f| {
        f.companion_silent = Some(silence(heard));
        f.lease_seen = Some(heard);
    });
    h.advance(secs(5));
    let block = |h: &Harness| match h.engine.node("w1").map(|n| &n.phase) {
        Some(Phase::Incident(inc)) => inc.block.clone(),
        other => panic!("not an incident: {other:?}"),
    };
    assert_eq!(block(&h), Some(Block::OnButOnlyCompanionSilent));
    h.advance(secs(300));
    assert_eq!(h.power_offs("w1"), 0);
    assert!(!h.released("w1"));
    assert_eq!(block(&h), Some(Block::OnButOnlyLeaseStale));
}

/// Off readings taken before the companion's last beat prove nothing.
#[test]
fn the_last_beat_is_a_sign_of_life_readings_must_follow() {
    let now = t0() + secs(100);
    let mut f = NodeFacts::ready("w1", t0() + secs(95));
    f.lease_seen = Some(t0() + secs(95));
    f.companion_silent = Some(silence(t0() + secs(97)));
    assert_eq!(
        f.health(now, Policy::default().lease_stale_after),
        Health::CompanionSilent {
            since: t0() + secs(97)
        }
    );
    // A NotReady node's last sign of life moves on to the beat too.
    f.readiness = Readiness::NotReady {
        since: t0() + secs(90),
    };
    assert_eq!(
        f.health(now, None).since(),
        Some(t0() + secs(97)),
        "the beat is later than NotReady"
    );
    // A renewal seen after the last beat but before the silence was declared does
    // not outvote it (sent before the power went); one seen after does.
    f.readiness = Readiness::Ready;
    f.lease_seen = Some(t0() + secs(98));
    f.lease_change_seen = Some(t0() + secs(98));
    assert!(matches!(
        f.health(now, None),
        Health::CompanionSilent { .. }
    ));
    // A new leader's first sight of an old renewal, after the silence its standby
    // table declared, is no sign of life: the silence stands.
    f.lease_seen = Some(t0() + secs(99) + Duration::from_millis(1));
    f.lease_change_seen = None;
    assert!(matches!(
        f.health(now, None),
        Health::CompanionSilent { .. }
    ));
    f.lease_change_seen = f.lease_seen;
    assert_eq!(f.health(now, None), Health::Healthy);
    // Beating (or stopped cleanly): healthy.
    f.companion_silent = None;
    assert_eq!(f.health(now, None), Health::Healthy);
}
