//! A changed configuration is applied without a restart, and a broken one refused
//! whole: the real daemon (in process) against fake-kube and the mock BMC, its
//! inventory file rewritten under it, as a ConfigMap update would.
//!
//! A reload reads the files as written: the world's scaled timings are not applied
//! to it, so the reloaded policy is the file's (defaults), which a machine that is
//! already off and whose node is NotReady needs none of to be released.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::world::*;
use serde_json::Value;

fn inventory(w: &World) -> std::path::PathBuf {
    w._dir.path().join("inventory.toml")
}

fn note(e: &Value) -> String {
    e["note"].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_added_node_is_fenced_after_a_live_reload_and_a_broken_version_is_refused_whole() {
    let w = WorldBuilder::new()
        .no_workloads()
        .node("worker-3", |n| n.in_inventory = false)
        .config_check(Duration::from_millis(200))
        .start()
        .await;
    eventually("worker-1 Ready", Duration::from_secs(30), || async {
        w.node_ready("worker-1") && w.node_ready("worker-3")
    })
    .await;

    // worker-3 is not in the inventory: its power loss is none of nodefence's business.
    w.pull_plug("worker-3");
    eventually("worker-3 NotReady", Duration::from_secs(30), || async {
        !w.node_ready("worker-3")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!w.has_out_of_service_taint("worker-3"));

    // A broken version (a typo in a key): refused whole, said once, the old one runs.
    let good = std::fs::read_to_string(inventory(&w)).unwrap();
    let broken = format!(
        "{good}[nodes.worker-3]\nsystem_id = \"{}\"\nendpiont = \"https://typo\"\n",
        w.system_of("worker-3")
    );
    std::fs::write(inventory(&w), &broken).unwrap();
    let rejected = w
        .expect_event_where("ConfigRejected", |e| note(e).contains("endpiont"))
        .await;
    assert_eq!(rejected[0]["type"], "Warning");
    assert!(
        note(&rejected[0]).contains("still runs"),
        "{}",
        note(&rejected[0])
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let series: u64 = w
        .events_with_reason("ConfigRejected")
        .iter()
        .map(|e| {
            e.pointer("/series/count")
                .and_then(Value::as_u64)
                .unwrap_or(1)
        })
        .sum();
    assert_eq!(series, 1, "the same broken version is reported once");
    assert!(!w.has_out_of_service_taint("worker-3"));
    assert!(w.events_with_reason("ConfigReloaded").is_empty());

    // Fixed: applied live; worker-3, proven Off, is released.
    let fixed = format!(
        "{good}[nodes.worker-3]\nsystem_id = \"{}\"\n",
        w.system_of("worker-3")
    );
    std::fs::write(inventory(&w), &fixed).unwrap();
    let reloaded = w
        .expect_event_where("ConfigReloaded", |e| note(e).contains("added: worker-3"))
        .await;
    assert_eq!(reloaded[0]["type"], "Normal");
    eventually(
        "worker-3 released after the reload",
        Duration::from_secs(30),
        || async { w.has_out_of_service_taint("worker-3") },
    )
    .await;
    w.expect_event("worker-3", "ConfirmedOff").await;
    assert!(
        w.bmc.reset_log().is_empty(),
        "an Off machine gets no power command"
    );
    w.stop().await;
}
