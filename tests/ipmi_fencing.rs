//! `nodefence run` end to end with IPMI: the real daemon against fake-kube's simulated
//! control plane, every machine behind its own mock IPMI BMC (UDP, RMCP+ suite 17
//! negotiated by the driver). The engine has no IPMI code: these tests prove the
//! driver carries the whole story — and that a BMC whose replies cannot be trusted,
//! or that is another machine's, never leads to a release.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::world::*;
use nodefence_mocks::ipmi::{Fault, Garble, Power};
use nodefence_mocks::redfish::MockPower;

/// Three workers, each with its own IPMI BMC.
fn ipmi_world() -> WorldBuilder {
    WorldBuilder::new().methods(&[Method::Ipmi])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_cut_behind_ipmi_is_powered_down_once_then_released() {
    let w = ipmi_world().start().await;
    let victim = w.db_placed().await;
    w.cut_network(&victim); // the machine stays on
    w.released_and_moved(&victim).await;
    assert_eq!(w.resets_of(&victim), ["power_down"]);
    assert_eq!(w.power_of(&victim), Some(MockPower::Off));
    w.expect_event(&victim, "PoweringOff").await;
    w.expect_event(&victim, "Released").await;
    w.assert_no_identity_events(&victim);
    // Sessions are reused: a handful for the whole story, not one per reading.
    let bmc = &w.ipmi[&victim];
    let opened = bmc.counters().sessions_opened;
    let readings = bmc
        .request_log()
        .iter()
        .filter(|r| r.net_fn == 0x00 && r.cmd == 0x01)
        .count();
    assert!(
        opened <= 4 && readings >= 6,
        "{opened} sessions for {readings} chassis status readings"
    );
    // The other machines were never touched.
    for other in w.nodes.iter().filter(|n| n.name != victim) {
        assert!(w.resets_of(&other.name).is_empty());
    }
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_loss_behind_ipmi_is_released_without_a_command() {
    let w = ipmi_world().start().await;
    let victim = w.db_placed().await;
    w.pull_plug(&victim);
    eventually("out-of-service taint", Duration::from_secs(30), || async {
        w.has_out_of_service_taint(&victim)
    })
    .await;
    assert!(
        w.resets_of(&victim).is_empty(),
        "an Off machine needs no command"
    );
    w.expect_event(&victim, "ConfirmedOff").await;
    // Power restored: the kubelet comes back and the taint goes.
    w.ipmi[&victim].set_power(Power::On);
    eventually("taint removed", Duration::from_secs(60), || async {
        !w.has_out_of_service_taint(&victim)
    })
    .await;
    w.expect_event(&victim, "TaintRemoved").await;
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lossy_link_to_the_bmc_still_fences_and_only_powers_down() {
    let w = ipmi_world().start().await;
    let victim = w.db_placed().await;
    w.ipmi[&victim].set_fault(Fault::Loss { percent: 20 });
    // And surely a loss: a fencing of a few dozen datagrams may draw none at 20 %
    // (CI, 2026-12-02).
    w.ipmi[&victim].set_fault(Fault::DropIncoming { count: 1 });
    w.cut_network(&victim);
    eventually("out-of-service taint", Duration::from_secs(60), || async {
        w.has_out_of_service_taint(&victim)
    })
    .await;
    assert_eq!(w.power_of(&victim), Some(MockPower::Off));
    // A lost reply can make a retransmitted power down run again; nothing else runs.
    let controls = w.resets_of(&victim);
    assert!(
        !controls.is_empty() && controls.iter().all(|c| c == "power_down"),
        "{controls:?}"
    );
    assert!(w.ipmi[&victim].counters().dropped.injected > 0);
    w.ipmi[&victim].clear_faults();
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_that_fail_their_integrity_check_are_never_off() {
    // Query retries back off to 2 s at most, so the honest phase below is quick.
    let w = ipmi_world()
        .policy(|p| p.max_query_backoff = Duration::from_secs(2))
        .start()
        .await;
    let victim = w.db_placed().await;
    // The machine really is off, but every in-session reply is forged.
    w.ipmi[&victim].set_fault(Fault::GarbledReplies(Garble::BadAuthCode));
    w.pull_plug(&victim);
    eventually(
        "a PowerQueryFailed warning",
        Duration::from_secs(30),
        || async {
            w.event_reasons(&victim)
                .iter()
                .any(|r| r == "PowerQueryFailed")
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(10)).await; // well past unhealthy_after
    assert!(!w.has_out_of_service_taint(&victim));
    assert!(w.node(&victim).is_some(), "the Node still exists");
    assert!(w.resets_of(&victim).is_empty());
    // Honest replies again: the same machine is released.
    w.ipmi[&victim].clear_faults();
    eventually("out-of-service taint", Duration::from_secs(30), || async {
        w.has_out_of_service_taint(&victim)
    })
    .await;
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ipmi_bmc_of_another_machine_is_never_obeyed() {
    // worker-1's inventory entry reaches a BMC whose system GUID is another machine's.
    let w = ipmi_world()
        .node("worker-1", |n| {
            n.bmc_uuid = Some("4c4c4544-0000-4000-8000-0000000000ff".into());
        })
        .no_workloads()
        .start()
        .await;
    w.expect_event("worker-1", "IdentityMismatch").await;
    w.cut_network("worker-1");
    w.pull_plug("worker-1");
    tokio::time::sleep(Duration::from_secs(12)).await; // past unhealthy_after
    assert!(!w.has_out_of_service_taint("worker-1"));
    assert!(w.resets_of("worker-1").is_empty());
    // The correctly wired machines pass the check (the other tests release them:
    // `require_identity` is on for ipmi, so each release proves a matching GUID).
    for node in ["worker-2", "worker-3"] {
        assert!(
            !w.event_reasons(node)
                .iter()
                .any(|r| r.starts_with("Identity")),
            "{node}: {:?}",
            w.event_reasons(node)
        );
    }
    w.stop().await;
}
