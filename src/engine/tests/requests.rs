//! Remediation requests (NodeHealthCheck, Cluster API): a request makes its node
//! suspect at once and skips the wait before a power-off, but is never a way around
//! the Off proof, the gates or an opt-out; a request that timed out stops power
//! commands; a request is served once.

use super::*;

impl Harness {
    fn request(&mut self, node: &str, uid: &str, timed_out: bool) {
        let since = self.now;
        self.set_facts(node, |f| {
            f.request = Some(Box::new(Request {
                uid: uid.into(),
                by: format!("NodeFenceRemediation nodefence/{node}"),
                since,
                timed_out,
            }));
        });
    }

    fn withdraw_request(&mut self, node: &str) {
        self.set_facts(node, |f| f.request = None);
    }

    fn three_workers() -> Self {
        let mut h = Harness::new(Policy::default());
        for n in ["w1", "w2", "w3"] {
            h.add(n, Bmc::State(PowerState::On));
        }
        h
    }
}

/// A live request made by hand at `since` (`NodeFenceRemediation nodefence/by-hand-<uid>`).
fn by_hand(uid: &str, since: SystemTime) -> Option<Box<Request>> {
    Some(Box::new(Request {
        uid: uid.into(),
        by: format!("NodeFenceRemediation nodefence/by-hand-{uid}"),
        since,
        timed_out: false,
    }))
}

#[test]
fn a_request_powers_a_ready_node_off_at_once_and_releases_it_only_on_an_off_proof() {
    let mut h = Harness::three_workers();
    h.advance(secs(5));
    let asked = h.now;
    h.request("w1", "r1", false);
    assert!(h.reasons("w1").contains(&Reason::RemediationRequested));
    h.advance(secs(5));
    // No `unhealthy_after` (60 s) wait: the requester already waited.
    assert_eq!(h.power_offs("w1"), 1);
    let sent = h.power_off_times[0];
    assert!(sent.duration_since(asked).unwrap_or_default() <= secs(1));
    // Released on the Off readings taken after the kubelet's last renewal, which
    // `check_release` verifies against what the BMC really answered.
    h.advance(secs(20));
    assert!(h.released("w1"));
    assert!(h.release_times["w1"] > sent);
    assert!(h.engine.request_served("r1"));
    assert!(
        h.plans["w1"].force_delete_pods,
        "the Node is still Ready in the API: PodGC would not delete its pods"
    );
    assert!(!h.released("w2") && !h.released("w3"));
}

#[test]
fn a_request_never_releases_a_machine_that_stays_on_or_cannot_be_read() {
    let mut h = Harness::new(Policy::default());
    h.add("liar", Bmc::Liar);
    h.add("dead", Bmc::Error);
    h.add("w3", Bmc::State(PowerState::On));
    h.add("w4", Bmc::State(PowerState::On));
    h.request("liar", "r1", false);
    h.request("dead", "r2", false);
    h.hang_kubelet("liar");
    h.hang_kubelet("dead");
    h.advance(secs(600));
    assert!(
        !h.released("liar"),
        "ForceOff accepted but the machine reads On"
    );
    assert!(!h.released("dead"), "the BMC never answered");
    assert!(h.power_offs("liar") >= 1);
    assert_eq!(h.power_offs("dead"), 0, "no command without an On reading");
    assert!(!h.engine.request_served("r1") && !h.engine.request_served("r2"));
}

#[test]
fn a_request_is_held_by_the_pause_switch_storm_protection_and_an_opt_out() {
    let mut h = Harness::three_workers();
    for n in ["w4", "w5", "w6"] {
        h.add(n, Bmc::State(PowerState::On));
    }
    let a = h.engine.set_paused(true, h.now);
    h.run(a);
    h.request("w1", "r1", false);
    h.advance(secs(30));
    assert_eq!(h.power_offs("w1"), 0, "paused");
    let a = h.engine.set_paused(false, h.now);
    h.run(a);
    h.set_facts("w2", |f| f.opted_out = true);
    h.request("w2", "r2", false);
    h.advance(secs(30));
    assert_eq!(h.power_offs("w2"), 0, "opted out");
    assert!(!h.released("w2"));
    assert_eq!(h.power_offs("w1"), 1, "resumed");
    assert!(h.released("w1"));
}

#[test]
fn storm_protection_holds_the_power_off_a_request_asks_for() {
    let policy = Policy {
        max_unhealthy: MaxUnhealthy::Count(1),
        ..Policy::default()
    };
    let mut h = Harness::new(policy);
    for n in ["w1", "w2", "w3", "w4"] {
        h.add(n, Bmc::State(PowerState::On));
    }
    // w2 is cut off (NotReady, its machine On); then a request comes for w1.
    h.hang_kubelet("w2");
    h.not_ready("w2");
    h.request("w1", "r1", false);
    h.advance(secs(120));
    assert!(
        h.engine.storm_active(),
        "a requested node counts as unhealthy"
    );
    assert_eq!(h.power_offs("w1") + h.power_offs("w2"), 0);
    assert!(h.reasons("w1").contains(&Reason::Blocked));
}

#[test]
fn a_request_that_timed_out_stops_power_commands_but_not_the_release_of_an_off_machine() {
    let mut h = Harness::three_workers();
    h.hang_kubelet("w1");
    h.not_ready("w1");
    h.request("w1", "r1", true);
    h.advance(secs(300));
    assert_eq!(
        h.power_offs("w1"),
        0,
        "NodeHealthCheck moved on to another remediator"
    );
    assert!(!h.released("w1"));
    let blocked = match &h.engine.node("w1").map(|n| &n.phase) {
        Some(Phase::Incident(inc)) => inc.block.clone(),
        other => panic!("{other:?}"),
    };
    assert!(
        matches!(blocked, Some(Block::RequestTimedOut(_))),
        "{blocked:?}"
    );
    // The next remediator switches the machine off: nodefence still releases it.
    h.bmc.insert("w1".into(), Bmc::State(PowerState::Off));
    h.advance(secs(10));
    assert!(h.released("w1"));
    assert_eq!(h.power_offs("w1"), 0);
}

#[test]
fn a_timed_out_request_alone_does_not_make_a_healthy_node_suspect() {
    let mut h = Harness::three_workers();
    h.request("w1", "r1", true);
    h.advance(secs(120));
    assert!(matches!(
        h.engine.node("w1").map(|n| &n.phase),
        Some(Phase::Healthy)
    ));
    assert_eq!(h.power_offs("w1"), 0);
}

#[test]
fn a_served_request_never_fences_the_node_again_after_it_came_back() {
    let policy = Policy {
        power_on_after_fence: true,
        release_timeout: secs(30),
        ..Policy::default()
    };
    let mut h = Harness::new(policy);
    for n in ["w1", "w2", "w3"] {
        h.add(n, Bmc::State(PowerState::On));
    }
    h.request("w1", "r1", false);
    h.advance(secs(30));
    assert!(h.released("w1"));
    h.advance(secs(40));
    assert_eq!(h.power_on_times.len(), 1, "reboot-style: powered back on");
    // The machine boots, its kubelet comes back; NodeHealthCheck has not deleted the
    // request yet (it stands until the node is healthy in its own view).
    h.ready("w1");
    h.advance(secs(300));
    assert_eq!(h.power_offs("w1"), 1, "one request, one fence");
    assert!(matches!(
        h.engine.node("w1").map(|n| &n.phase),
        Some(Phase::Healthy)
    ));
    assert!(!h.facts["w1"].our_taint, "the taint was removed");
    h.withdraw_request("w1");
    // A new request (a new failure) is served again.
    h.request("w1", "r2", false);
    h.advance(secs(30));
    assert_eq!(h.power_offs("w1"), 2);
}

/// Simulation seed 15 (with requests): a request was served (the node released for
/// it), then timed out before the power-on after fence; a new leader powered the
/// machine on behind the requester's next remediator.
#[test]
fn a_served_request_that_times_out_stops_the_power_on_after_fence() {
    let policy = Policy {
        power_on_after_fence: true,
        release_timeout: secs(60),
        ..Policy::default()
    };
    let mut h = Harness::new(policy);
    for n in ["w1", "w2", "w3"] {
        h.add(n, Bmc::State(PowerState::On));
    }
    h.request("w1", "r1", false);
    h.advance(secs(20));
    assert!(h.released("w1"));
    assert!(h.engine.request_served("r1"));
    // Its requester gives up on nodefence before the power-on is due.
    h.request("w1", "r1", true);
    h.advance(secs(300));
    assert!(
        h.power_on_times.is_empty(),
        "powered on behind the next remediator"
    );
    // The next remediator's business ends (the request is deleted): power-on resumes.
    h.withdraw_request("w1");
    h.advance(secs(30));
    assert_eq!(h.power_on_times.len(), 1);
}

#[test]
fn a_node_already_released_on_its_own_serves_a_request_at_once() {
    let mut h = Harness::three_workers();
    h.lose_power("w1");
    h.advance(secs(30));
    assert!(h.released("w1"));
    let actions = h.log.len();
    h.request("w1", "r1", false);
    assert!(h.engine.request_served("r1"));
    h.advance(secs(5));
    assert_eq!(h.power_offs("w1"), 0);
    assert_eq!(
        h.count(|a| matches!(a, Action::Release { .. })),
        1,
        "nothing released twice ({} actions after the request)",
        h.log.len() - actions
    );
}

#[test]
fn a_delete_node_release_serves_its_request_though_the_node_is_forgotten() {
    let policy = Policy {
        release: ReleaseMode::DeleteNode,
        ..Policy::default()
    };
    let mut h = Harness::new(policy);
    for n in ["w1", "w2", "w3"] {
        h.add(n, Bmc::State(PowerState::On));
    }
    h.request("w1", "r1", false);
    h.advance(secs(30));
    assert!(h.released("w1"));
    assert!(h.engine.node("w1").is_none(), "forgotten with its Node");
    assert!(h.engine.request_served("r1"));
    // The machine boots again and its Node registers anew: the request (still
    // standing until NodeHealthCheck deletes it) does not fence it again.
    h.bmc.insert("w1".into(), Bmc::State(PowerState::On));
    h.add("w1", Bmc::State(PowerState::On));
    h.request("w1", "r1", false);
    h.advance(secs(60));
    assert_eq!(h.power_offs("w1"), 1);
}

/// Simulation seed 7104: a request made while its node was released, during an
/// outage of the control plane, was seen by no replica until after the taint was
/// removed; a new leader then powered off the machine that had come back. The end of
/// the last release is recorded on the Node: a request older than it was served by it.
#[test]
fn a_request_made_during_a_release_no_replica_saw_is_served_by_that_release() {
    let mut h = Harness::three_workers();
    h.advance(secs(120));
    let ended = h.now - secs(40);
    let made = ended - secs(45);
    h.set_facts("w1", |f| {
        f.last_release_ended = Some(ended);
        f.request = by_hand("r1", made);
    });
    h.advance(secs(60));
    assert_eq!(h.power_offs("w1"), 0, "fenced again for a request served");
    assert!(h.engine.request_served("r1"), "reported Succeeded");
    assert!(h.reasons("w1").contains(&Reason::RemediationRequested));
    assert!(!h.released("w1"));
    // One made after the release ended is a new one: served as any request.
    h.set_facts("w1", |f| {
        f.request = by_hand("r2", ended + secs(1));
    });
    h.advance(secs(30));
    assert_eq!(h.power_offs("w1"), 1);
    assert!(h.engine.request_served("r2"));
}

/// The analog of seed 7104 under `release = "delete-node"`: the Node was deleted (the
/// release) and registered again by the kubelet when the machine came back, and a
/// request made before that registration is seen only now. It was made for the Node
/// deleted since: not fenced for again. One made after the registration is.
#[test]
fn a_request_made_before_the_node_registered_again_is_not_fenced_for() {
    let mut h = Harness::three_workers();
    h.advance(secs(120));
    let registered = h.now - secs(20);
    h.set_facts("w1", |f| {
        f.registered = Some(registered);
        f.request = by_hand("r1", registered - secs(1));
    });
    h.advance(secs(60));
    assert_eq!(h.power_offs("w1"), 0, "fenced the new registration");
    assert!(h.engine.request_served("r1"));
    assert!(h.reasons("w1").contains(&Reason::RemediationRequested));
    h.set_facts("w1", |f| {
        f.request = by_hand("r2", registered);
    });
    h.advance(secs(30));
    assert_eq!(
        h.power_offs("w1"),
        1,
        "a request for this registration is served"
    );
    assert!(h.engine.request_served("r2"));
}

/// A recorded end of a release far in the future (a replica's broken clock, a value
/// written by hand) would silence every request made before it: beyond the clocks'
/// tolerance it serves none, and a request is fenced for as any other.
#[test]
fn a_release_recorded_as_ending_far_in_the_future_serves_no_request() {
    for (ahead, served_by_it) in [
        (LAST_RELEASE_CLOCK_TOLERANCE - secs(1), true),
        (LAST_RELEASE_CLOCK_TOLERANCE + secs(60), false),
    ] {
        let mut h = Harness::three_workers();
        h.advance(secs(120));
        let made = h.now - secs(5);
        let ended = h.now + ahead;
        h.set_facts("w1", |f| {
            f.last_release_ended = Some(ended);
            f.request = by_hand("r1", made);
        });
        h.advance(secs(30));
        assert_eq!(
            h.power_offs("w1"),
            usize::from(!served_by_it),
            "end {ahead:?} ahead"
        );
        assert!(h.engine.request_served("r1"), "end {ahead:?} ahead");
    }
}

/// Simulation seed 5340: a replica sent a ForceOff for a request (recorded on the Node
/// first), lost the Lease and won it back 2 s later; the kubelet had renewed its Lease
/// 0.9 s after the command, while the machine was still going down, so the new term
/// took the record for an earlier failure's and sent a second ForceOff. A record for
/// the boot the Node still reports holds for `power_off_retry_after`, whatever signs
/// of life follow it; one for an earlier boot (the machine started again since) does
/// not.
#[test]
fn a_power_off_recorded_for_this_boot_is_not_sent_again_by_a_new_term() {
    for this_boot in [true, false] {
        let mut h = Harness::new(Policy::default());
        h.add("w1", Bmc::Liar);
        h.add("w2", Bmc::State(PowerState::On));
        h.add("w3", Bmc::State(PowerState::On));
        h.advance(secs(5));
        let sent = h.now - secs(3);
        h.set_facts("w1", |f| {
            f.power_off_recorded = Some((sent, 1));
            f.power_off_this_boot = this_boot;
        });
        // The kubelet renews after the command (the harness's live kubelets do).
        h.request("w1", "r1", false);
        h.advance(secs(30));
        let expected = usize::from(!this_boot);
        assert_eq!(h.power_offs("w1"), expected, "this boot: {this_boot}");
        // The retry counts from the record.
        h.advance(secs(35));
        assert_eq!(h.power_offs("w1"), expected + 1, "this boot: {this_boot}");
        assert!(!h.released("w1"), "a liar's machine is never released");
    }
}
