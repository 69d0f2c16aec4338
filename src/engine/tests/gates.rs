//! What holds power-offs and releases back: storm protection, concurrency and spacing,
//! pause, excluded nodes, per-node policies, and a power-off an earlier term sent.

use super::*;

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
