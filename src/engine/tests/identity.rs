//! The identity cross-check: a BMC not proven to be the node's own is never trusted.

use super::*;
use crate::identity::MachineIdentity;

/// `name`'s UUID with its first three fields byte-swapped, as some firmware reports it.
fn swapped(name: &str) -> String {
    let u = uuid::Uuid::parse_str(&uuid_of(name)).expect("well-formed");
    uuid::Uuid::from_bytes_le(*u.as_bytes()).to_string()
}

/// w1 loses power; the cluster has w2..w4 so one failure is no storm.
fn power_loss_with(policy: Policy, setup: impl FnOnce(&mut Harness)) -> Harness {
    let mut h = Harness::new(policy);
    for n in ["w1", "w2", "w3", "w4"] {
        h.add(n, Bmc::State(PowerState::On));
    }
    setup(&mut h);
    h.lose_power("w1");
    h.advance(secs(40));
    h.not_ready("w1");
    h.advance(secs(120));
    h
}

#[test]
fn a_bmc_of_another_machine_is_never_trusted_even_when_it_reads_off() {
    // The inventory points w1 at w3's BMC; w3's machine is off, w1 is really dead too
    // here, but nothing proves that.
    let h = power_loss_with(Policy::default(), |h| {
        h.machines
            .insert("w1".into(), MachineIdentity::Uuid(uuid_of("w3")));
    });
    assert!(!h.released("w1"), "a mismatched BMC proves nothing");
    assert_eq!(
        h.power_offs("w1"),
        0,
        "and it would power off another machine"
    );
    let mismatches = h
        .reasons("w1")
        .iter()
        .filter(|r| **r == Reason::IdentityMismatch)
        .count();
    assert!(
        (1..=2).contains(&mismatches),
        "said once, then reminded every remind_every (2m), not on every reading: {mismatches}"
    );
    // Even with require_identity = false a positive mismatch blocks.
    let h = power_loss_with(
        Policy {
            require_identity: false,
            ..Policy::default()
        },
        |h| {
            h.machines
                .insert("w1".into(), MachineIdentity::Uuid(uuid_of("w3")));
        },
    );
    assert!(!h.released("w1"));
}

#[test]
fn a_byte_swapped_uuid_is_the_same_machine() {
    let h = power_loss_with(Policy::default(), |h| {
        h.machines
            .insert("w1".into(), MachineIdentity::Uuid(swapped("w1")));
    });
    assert!(h.released("w1"));
}

#[test]
fn an_unknown_identity_blocks_only_under_require_identity() {
    let no_uuid = |h: &mut Harness| {
        h.machines.insert(
            "w1".into(),
            MachineIdentity::Unavailable("the BMC's ComputerSystem has no UUID".into()),
        );
    };
    let h = power_loss_with(Policy::default(), no_uuid);
    assert!(!h.released("w1"));
    assert!(h.reasons("w1").contains(&Reason::IdentityUnproven));
    let h = power_loss_with(
        Policy {
            require_identity: false,
            ..Policy::default()
        },
        no_uuid,
    );
    assert!(h.released("w1"), "policy accepts an unprovable source");
    // A node without systemUUID cannot be matched either.
    let h = power_loss_with(Policy::default(), |h| {
        h.set_facts("w1", |f| f.identity.system_uuid = None);
    });
    assert!(!h.released("w1"));
}

#[test]
fn a_machine_still_on_behind_a_mismatched_bmc_is_not_powered_off() {
    let mut h = Harness::new(Policy::default());
    for n in ["w1", "w2", "w3", "w4"] {
        h.add(n, Bmc::State(PowerState::On));
    }
    h.machines
        .insert("w1".into(), MachineIdentity::Uuid(uuid_of("w2")));
    h.hang_kubelet("w1");
    h.advance(secs(40));
    h.not_ready("w1");
    h.advance(secs(300));
    assert_eq!(h.power_offs("w1"), 0);
    assert!(!h.released("w1"));
}

#[test]
fn a_changed_identity_discards_the_readings_taken_so_far() {
    let mut h = Harness::new(Policy::default());
    for n in ["w1", "w2", "w3", "w4"] {
        h.add(n, Bmc::State(PowerState::On));
    }
    h.machines
        .insert("w1".into(), MachineIdentity::Uuid(uuid_of("w2")));
    h.lose_power("w1");
    h.advance(secs(40)); // Off readings pile up behind the wrong identity
    assert!(!h.released("w1"));
    h.machines
        .insert("w1".into(), MachineIdentity::Uuid(uuid_of("w1")));
    let fixed = h.now;
    h.advance(secs(10));
    let released = h
        .release_times
        .get("w1")
        .copied()
        .expect("released once proven");
    let policy = Policy::default();
    let min = policy.confirm_interval * (policy.confirm_readings - 1);
    assert!(
        released.duration_since(fixed).unwrap_or_default() >= min,
        "the proof restarted with the identity: released {:?} after the fix",
        released.duration_since(fixed)
    );
}

#[test]
fn an_answer_for_another_machine_is_forgotten_once_the_bmc_answers_for_the_node_again() {
    // Seeds 5121, 5439, 6483 of the long simulation run: the BMC answered for another
    // machine (On) while the node's own was off; when it answered for the right machine
    // again, the other machine's On led to a power-off the node's machine did not need.
    let mut h = Harness::new(Policy::default());
    for n in ["w1", "w2", "w3", "w4"] {
        h.add(n, Bmc::State(PowerState::On));
    }
    h.machines
        .insert("w1".into(), MachineIdentity::Uuid(uuid_of("w3")));
    h.hang_kubelet("w1");
    h.advance(secs(40));
    h.not_ready("w1");
    h.advance(secs(120));
    assert_eq!(
        h.power_offs("w1"),
        0,
        "another machine's BMC commands nothing"
    );
    // w1's own machine is off, and its BMC answers for it again.
    h.bmc.insert("w1".into(), Bmc::State(PowerState::Off));
    h.machines
        .insert("w1".into(), MachineIdentity::Uuid(uuid_of("w1")));
    h.advance(secs(60));
    assert_eq!(
        h.power_offs("w1"),
        0,
        "the On was the other machine's: the node's own machine reads Off"
    );
    assert!(h.released("w1"), "and its own Off readings prove it");
}
