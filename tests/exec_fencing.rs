//! `nodefence run` end to end with fence agents and fencing levels: the real daemon
//! against fake-kube's simulated control plane, machines behind mock IPMI BMCs that
//! nodefence reaches through Debian's real `fence_ipmilan` (`driver = "exec"`), or
//! behind a hung Redfish BMC with a `fallback` level. The engine knows neither: the
//! exec driver and the topology carry the whole story. What is under test:
//! - a fence agent fences and the release follows only nodefence's own Off reading;
//! - a hung primary does not stop fencing: the next level powers the machine off;
//! - the next level's Off is not enough when no level proves which machine it is
//!   (require_identity, on by default for a BMC primary): nothing is powered off or
//!   released until the operator says the wiring is trusted.
//!
//! Without `fence_ipmilan` the tests print a "skipped" line, unless
//! `NODEFENCE_REQUIRE_PEERS=1` (CI), which makes its absence a failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::world::*;
use nodefence_mocks::redfish::MockPower;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_cut_behind_fence_ipmilan_is_powered_down_then_released() {
    let Some(w) = WorldBuilder::new()
        .methods(&[Method::FenceIpmilan])
        .try_start()
        .await
    else {
        return;
    };
    let victim = w.db_placed().await;
    w.cut_network(&victim);
    w.released_and_moved(&victim).await;
    // The agent sent one power down (ipmitool's "chassis power off") and nothing else.
    assert_eq!(w.resets_of(&victim), ["power_down"]);
    assert_eq!(w.power_of(&victim), Some(MockPower::Off));
    w.expect_event(&victim, "PoweringOff").await;
    w.expect_event(&victim, "Released").await;
    for other in w.nodes.iter().filter(|n| n.name != victim) {
        assert!(w.resets_of(&other.name).is_empty(), "{}", other.name);
    }
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_redfish_bmc_is_bypassed_by_the_ipmi_level() {
    let Some(w) = WorldBuilder::new()
        .methods(&[Method::HungRedfish, Method::Ipmi])
        .try_start()
        .await
    else {
        return;
    };
    let victim = w.db_placed().await;
    w.cut_network(&victim);
    w.released_and_moved(&victim).await;
    // Level 2 powered the machine down; the identity came from its GUID (level 1
    // never answered), so require_identity was satisfied by a real proof.
    assert_eq!(w.resets_of(&victim), ["power_down"]);
    assert_eq!(w.power_of(&victim), Some(MockPower::Off));
    w.expect_event(&victim, "Released").await;
    w.assert_no_identity_events(&victim);
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fallback_agent_that_cannot_prove_the_machine_releases_only_when_trusted() {
    // Two nodes: a hung Redfish BMC, then fence_ipmilan (a PDU-like level that
    // cannot say which machine it switches). worker-2's operator trusts the wiring.
    // worker-3 stays healthy; two nodes down at once is within storm protection here.
    let Some(w) = WorldBuilder::new()
        .policy_key("max_unhealthy", "2")
        .node("worker-1", |n| {
            n.methods = vec![Method::HungRedfish, Method::FenceIpmilan];
        })
        .node("worker-2", |n| {
            n.methods = vec![Method::HungRedfish, Method::FenceIpmilan];
            n.inventory_lines = vec!["policy = { require_identity = false }".into()];
        })
        .no_workloads()
        .try_start()
        .await
    else {
        return;
    };
    w.cut_network("worker-1");
    w.cut_network("worker-2");
    w.expect_identity_block("worker-1", "IdentityUnproven")
        .await;
    eventually("worker-2 released", Duration::from_secs(60), || async {
        w.has_out_of_service_taint("worker-2")
    })
    .await;
    assert_eq!(w.resets_of("worker-2"), ["power_down"]);
    assert_eq!(w.power_of("worker-2"), Some(MockPower::Off));
    // worker-1 went unhealthy at the same moment: still on, untouched, not released.
    tokio::time::sleep(w.scaled(Duration::from_secs(60))).await;
    assert!(!w.has_out_of_service_taint("worker-1"));
    assert!(w.resets_of("worker-1").is_empty());
    assert_eq!(w.power_of("worker-1"), Some(MockPower::On));
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_proven_before_it_hung_does_not_vouch_for_the_agent_level() {
    // worker-1: Redfish (proves its machine), then fence_ipmilan. The others are on
    // their own IPMI BMCs, so hanging the shared Redfish BMC only hits worker-1.
    let Some(w) = WorldBuilder::new()
        .node("worker-1", |n| {
            n.methods = vec![Method::Redfish, Method::FenceIpmilan];
        })
        .node("worker-2", |n| n.methods = vec![Method::Ipmi])
        .node("worker-3", |n| n.methods = vec![Method::Ipmi])
        .no_workloads()
        .try_start()
        .await
    else {
        return;
    };
    // Let the Redfish level be read (and its machine proven) while it answers.
    tokio::time::sleep(Duration::from_secs(3)).await;
    w.bmc.inject(nodefence_mocks::redfish::Fault::Hang);
    w.cut_network("worker-1");
    // The power state now comes from the agent level, which cannot say which machine
    // it switches: what the Redfish level proved earlier is no proof for it.
    w.expect_identity_block("worker-1", "IdentityUnproven")
        .await;
    tokio::time::sleep(w.scaled(Duration::from_secs(60))).await;
    assert!(!w.has_out_of_service_taint("worker-1"));
    assert!(
        w.resets_of("worker-1").is_empty(),
        "{:?}",
        w.resets_of("worker-1")
    );
    assert_eq!(w.power_of("worker-1"), Some(MockPower::On));
    // The BMC answers again: its own proof and its own ForceOff, then the release.
    w.bmc.clear_faults();
    eventually("worker-1 released", Duration::from_secs(60), || async {
        w.has_out_of_service_taint("worker-1")
    })
    .await;
    assert_eq!(w.resets_of("worker-1"), ["ForceOff"]);
    assert_eq!(w.power_of("worker-1"), Some(MockPower::Off));
    w.stop().await;
}
