//! The check on return ([`crate::engine::returned`]) through the whole procedure: a
//! machine that went down comes back with a new boot and is let back after
//! `recovered_after`; one whose BMC lied comes back with the same boot, and its
//! taint stays, nothing is powered, until an operator checked it.

use super::*;

fn removals(h: &Harness, node: &str) -> usize {
    h.count(|a| matches!(a, Action::RemoveTaint { node: n } if n == node))
}

#[test]
fn a_machine_that_went_down_is_let_back_only_after_its_new_boot_was_seen() {
    let mut h = Harness::new(Policy::default());
    h.add("w1", Bmc::State(PowerState::On));
    h.add("w2", Bmc::State(PowerState::On));
    h.lose_power("w1");
    h.advance(secs(40));
    assert!(h.released("w1"));
    // The kubelet of the new boot renews its Lease first; the Node still shows the
    // old boot's status: no verdict, no removal, however long.
    h.alive.insert("w1".into());
    h.set_facts("w1", |f| f.readiness = Readiness::Ready);
    h.advance(secs(120));
    assert_eq!(removals(&h, "w1"), 0, "no new boot seen yet");
    assert!(!h.reasons("w1").contains(&Reason::ProofContradicted));
    // Its first status: the new boot. Removed recovered_after later, not before.
    h.bmc.insert("w1".into(), Bmc::State(PowerState::On));
    h.ready("w1");
    assert!(h.reasons("w1").contains(&Reason::BootedAgain));
    h.advance(secs(29));
    assert_eq!(
        removals(&h, "w1"),
        0,
        "recovered_after counts from the new boot"
    );
    h.advance(secs(2));
    assert_eq!(removals(&h, "w1"), 1);
    assert!(!h.reasons("w1").contains(&Reason::ProofContradicted));
}

#[test]
fn a_bmc_that_read_off_while_the_machine_ran_is_caught_when_the_node_returns() {
    let mut h = Harness::new(Policy {
        power_on_after_fence: true,
        ..Policy::default()
    });
    h.add("w1", Bmc::State(PowerState::On));
    h.add("w2", Bmc::State(PowerState::On));
    // Cut off (its kubelet silent), its machine running; its BMC's firmware reads Off.
    h.hang_kubelet("w1");
    h.bmc.insert("w1".into(), Bmc::State(PowerState::Off));
    h.advance(secs(40));
    assert!(h.released("w1"), "the lie is believed: the release happens");
    // The partition heals: the same boot posts its status.
    h.ready("w1");
    let reasons = h.reasons("w1");
    assert!(reasons.contains(&Reason::ProofContradicted), "{reasons:?}");
    assert_eq!(
        h.count(
            |a| matches!(a, Action::RecordContradiction { node, proof, .. }
            if node == "w1" && *proof == crate::engine::returned::ProofKind::OffReadings)
        ),
        1
    );
    let powered_on = h.power_on_times.len();
    h.advance(secs(600));
    assert_eq!(removals(&h, "w1"), 0, "the taint stays");
    assert_eq!(h.power_on_times.len(), powered_on, "nothing is powered on");
    assert_eq!(
        h.reasons("w1")
            .iter()
            .filter(|r| **r == Reason::ProofContradicted)
            .count(),
        1,
        "said once, not on every evaluation"
    );
    // A new leader reads the contradiction from the Node and keeps it out too.
    let facts = h.facts["w1"].clone();
    let mut again = Harness::new(Policy::default());
    again.facts.insert("w1".into(), facts.clone());
    again.alive.insert("w1".into());
    let a = again.engine.observe(facts, again.now);
    again.run(a);
    again.advance(secs(120));
    assert_eq!(removals(&again, "w1"), 0, "a new leader keeps it out");
    // An operator checked it: let back.
    h.set_facts("w1", |f| {
        f.returned_mut().proof_checked =
            Some("alice: data checked, BMC firmware 2.81 replaced".into())
    });
    h.advance(secs(31));
    assert_eq!(removals(&h, "w1"), 1);
}

#[test]
fn a_node_without_a_boot_id_stays_out_unless_its_policy_says_otherwise() {
    for opted_in in [false, true] {
        let mut h = Harness::new(Policy {
            unfence_without_boot_id: opted_in,
            ..Policy::default()
        });
        h.add("w1", Bmc::State(PowerState::On));
        h.add("w2", Bmc::State(PowerState::On));
        h.set_facts("w1", |f| f.boot_id = None);
        h.lose_power("w1");
        h.advance(secs(40));
        assert!(h.released("w1"));
        h.bmc.insert("w1".into(), Bmc::State(PowerState::On));
        h.ready("w1");
        h.set_facts("w1", |f| f.boot_id = None);
        h.advance(secs(60));
        assert!(h.reasons("w1").contains(&Reason::ProofUncheckable));
        assert!(!h.reasons("w1").contains(&Reason::ProofContradicted));
        assert_eq!(
            removals(&h, "w1"),
            usize::from(opted_in),
            "opted in: {opted_in}"
        );
    }
}
