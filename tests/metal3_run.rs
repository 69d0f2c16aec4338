//! The daemon with Metal3, end to end: the real daemon against fake-kube serving the
//! BareMetalHost, Metal3Machine and Machine CRDs, the stand-in for Metal3's operator
//! and Ironic acting through the API (`nodefence_mocks::metal3`), and the mock
//! Redfish BMC behind every host. Nodes have no inventory entry of their own unless
//! said: their entries come from their BareMetalHosts (`[metal3] hosts = true`).
//!
//! - A machine that lost power is released only once the Off proof holds: the BMC
//!   and the host's `status.poweredOn` both off, which takes Ironic giving up on
//!   powering it back on and recording it off.
//! - A network cut: the machine is powered off through the annotation (Ironic's hard
//!   power off), stays off through Ironic's power-state sync, and is released; under
//!   exactly the RBAC of `deploy/` and `deploy/components/metal3`.
//! - `power_on_after_fence`: the annotation is removed and Metal3 powers the host on
//!   (under the RBAC of `deploy/` with `components/metal3` and
//!   `components/power-on-after-fence`).
//! - A BareMetalHost created while the daemon runs is picked up without a restart;
//!   one whose Secret is missing is refused whole, then applied once it exists.
//! - `nodefence explain` names where an entry came from.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::deploy_common::deploy_rbac;

use std::time::Duration;

use common::world::*;
use nodefence_mocks::redfish::MockPower;

const ANNOTATION: &str = "reboot.metal3.io/nodefence";
const WORKERS: [&str; 3] = ["worker-1", "worker-2", "worker-3"];

/// Three workers whose entries come only from their BareMetalHosts.
fn hosts_only() -> WorldBuilder {
    let mut b = WorldBuilder::new().metal3(&WORKERS);
    for n in &mut b.nodes {
        n.in_inventory = false;
    }
    b
}

async fn annotation(w: &World, node: &str) -> Option<String> {
    w.bare_metal_host(node)
        .await
        .and_then(|h| h.annotations().get(ANNOTATION).cloned())
}

async fn powered_on(w: &World, node: &str) -> Option<bool> {
    w.bare_metal_host(node).await.and_then(|h| h.powered_on())
}

/// `nodefence explain NODE` against the world's API server (stdout).
async fn explain(w: &World, node: &str, namespace: &str) -> String {
    let kubeconfig = w._dir.path().join("kubeconfig");
    w.kube.write_kubeconfig(&kubeconfig).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_nodefence"))
        .arg("--config")
        .arg(w._dir.path().join("nodefence.toml"))
        .args(["explain", node, "--namespace", namespace, "--kubeconfig"])
        .arg(&kubeconfig)
        .output()
        .await
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_loss_on_a_host_only_node_is_released_once_metal3_records_it_off() {
    // Ironic's sync every 2 s (20 s in a real cluster, scaled).
    let w = hosts_only()
        .node("worker-1", |n| n.in_inventory = true)
        .metal3_setup(|m| m.timing.sync_power_state_interval = Duration::from_secs(20))
        .start()
        .await;
    let victim = w.db_placed().await;
    // The machine's power feed fails; its BMC still answers, and says Off.
    w.bmc.set_power_feed(&w.system_of(&victim), false);
    // Ironic still records power on (status.poweredOn: true): the readings disagree,
    // so nothing is released yet.
    w.expect_event(&victim, "FenceBlocked").await;
    assert!(!w.has_out_of_service_taint(&victim));
    // Ironic's sync tries to power the machine back on (force_power_state_during_sync),
    // which cannot work; after power_state_sync_max_retries it records the BMC's
    // state (off) and puts the node in maintenance; Metal3 copies it into
    // status.poweredOn; the Off proof then holds and the node is released.
    w.released_and_moved(&victim).await;
    w.expect_event(&victim, "Released").await;
    let node = w.ironic_node(&victim).unwrap();
    assert!(
        node.maintenance && node.power_state == Some(false),
        "{node:?}"
    );
    assert_eq!(powered_on(&w, &victim).await, Some(false));
    assert_eq!(w.power_of(&victim), Some(MockPower::Off));
    let resets = w.resets_of(&victim);
    assert!(
        !resets.is_empty() && resets.iter().all(|r| r == "On"),
        "only Ironic's attempts to power it back on: {resets:?}"
    );
    // explain names each entry's source.
    let text = explain(&w, "worker-2", LEADER_LEASE_NAMESPACE).await;
    assert!(text.contains("BareMetalHost metal3/worker-2"), "{text}");
    assert!(text.contains("power through Metal3"), "{text}");
    let text = explain(&w, "worker-1", LEADER_LEASE_NAMESPACE).await;
    assert!(
        text.lines()
            .any(|l| l.starts_with("Source:") && l.contains("inventory.toml:")),
        "{text}"
    );
    assert!(
        text.contains("power through Metal3 (BareMetalHost metal3/worker-1"),
        "{text}"
    );
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_cut_is_powered_off_through_metal3_stays_off_through_the_sync_under_the_deploy_rbac()
 {
    // worker-2 is matched through the consumerRef chain, the others by providerID.
    let w = hosts_only()
        .metal3_setup(|m| {
            m.consumer_ref = vec!["worker-2".into()];
            m.timing.sync_power_state_interval = Duration::from_secs(20);
        })
        .rbac(deploy_rbac(&["metal3"]))
        .start()
        .await;
    let victim = w.db_placed().await;
    w.cut_network(&victim);
    w.released_and_moved(&victim).await;
    assert_eq!(
        annotation(&w, &victim).await.as_deref(),
        Some(r#"{"mode":"hard"}"#)
    );
    assert_eq!(powered_on(&w, &victim).await, Some(false));
    assert_eq!(w.resets_of(&victim), ["ForceOff"]);
    // Several of Ironic's syncs (every 2 s here) later: still off, nothing undone.
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(w.power_of(&victim), Some(MockPower::Off));
    assert_eq!(w.resets_of(&victim), ["ForceOff"]);
    let node = w.ironic_node(&victim).unwrap();
    assert_eq!((node.power_state, node.sync_actions), (Some(false), 0));
    assert!(
        w.forbidden_requests().is_empty(),
        "calls the deploy RBAC does not grant: {:?}",
        w.forbidden_requests()
    );
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_on_after_fence_removes_the_annotation_and_metal3_powers_the_host_on() {
    let w = hosts_only()
        .policy(|p| {
            p.power_on_after_fence = true;
            p.release_timeout = Duration::from_secs(3);
        })
        .rbac(deploy_rbac(&["metal3", "power-on-after-fence"]))
        .start()
        .await;
    let victim = w.db_placed().await;
    w.cut_network(&victim);
    w.released_and_moved(&victim).await;
    eventually(
        "the annotation removed",
        Duration::from_secs(60),
        || async { annotation(&w, &victim).await.is_none() },
    )
    .await;
    eventually("powered on by Metal3", Duration::from_secs(30), || async {
        w.power_of(&victim) == Some(MockPower::On) && powered_on(&w, &victim).await == Some(true)
    })
    .await;
    assert_eq!(w.resets_of(&victim), ["ForceOff", "On"]);
    // The network heals: the node comes back Ready.
    w.sim.set_kubelet(&victim, true);
    eventually("Ready again", Duration::from_secs(60), || async {
        w.node_ready(&victim)
    })
    .await;
    assert_eq!(w.resets_of(&victim), ["ForceOff", "On"], "nothing more");
    assert!(
        w.forbidden_requests().is_empty(),
        "calls the deploy RBAC does not grant: {:?}",
        w.forbidden_requests()
    );
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_metal_host_created_while_the_daemon_runs_is_picked_up_without_a_restart() {
    let w = hosts_only()
        .no_workloads()
        .config_check(Duration::from_millis(200))
        .metal3_setup(|m| {
            m.later = vec!["worker-3".into()];
            m.toml = "resync_interval = \"1s\"\n".into();
        })
        .start()
        .await;
    // The daemon runs (it leads once it has read the hosts): worker-3 has no entry,
    // so its power loss is none of nodefence's business.
    eventually(
        "worker-3 Ready, a leader",
        Duration::from_secs(30),
        || async { w.node_ready("worker-3") && w.leader().is_some() },
    )
    .await;
    w.bmc.set_power_feed(&w.system_of("worker-3"), false);
    eventually("worker-3 NotReady", Duration::from_secs(30), || async {
        !w.node_ready("worker-3")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!w.has_out_of_service_taint("worker-3"));
    // Its BareMetalHost appears: Metal3 registers it (powered off, as its BMC says;
    // Metal3 tries to power it on, online: true, and cannot). The next resync
    // reloads: worker-3 has an entry, its machine is proven Off, it is released.
    w.add_bare_metal_host("worker-3").await;
    let reloaded = w
        .expect_event_where("ConfigReloaded", |e| {
            e["note"]
                .as_str()
                .is_some_and(|n| n.contains("added: worker-3"))
        })
        .await;
    assert_eq!(reloaded.len(), 1, "one reload: {reloaded:?}");
    eventually("worker-3 released", Duration::from_secs(30), || async {
        w.has_out_of_service_taint("worker-3")
    })
    .await;
    w.expect_event("worker-3", "ConfirmedOff").await;
    assert_eq!(powered_on(&w, "worker-3").await, Some(false));
    // Status changes (Metal3's power-on attempts) are no reason to reload.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(w.events_with_reason("ConfigReloaded").len(), 1);
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_host_whose_secret_is_missing_is_refused_whole_then_applied_once_it_exists() {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Api, PostParams};
    use nodefence_mocks::metal3::{BareMetalHost, bmc_secret};

    let w = hosts_only()
        .no_workloads()
        .config_check(Duration::from_millis(200))
        .metal3_setup(|m| {
            m.later = vec!["worker-3".into()];
            m.toml = "resync_interval = \"1s\"\n".into();
        })
        .start()
        .await;
    eventually("a leader", Duration::from_secs(30), || async {
        w.leader().is_some()
    })
    .await;
    // worker-3's host appears before its Secret: the new version cannot read its
    // credentials and is refused whole; the running one (two nodes) stays.
    let address = format!(
        "redfish+http://{}/redfish/v1/Systems/{}",
        w.bmc.addr(),
        w.system_of("worker-3")
    );
    Api::<BareMetalHost>::namespaced(w.client.clone(), METAL3_NAMESPACE)
        .create(
            &PostParams::default(),
            &BareMetalHost::new(METAL3_NAMESPACE, "worker-3", &address, "worker-3-bmc")
                .externally_provisioned(),
        )
        .await
        .unwrap();
    let rejected = w.expect_event_where("ConfigRejected", |_| true).await;
    assert_eq!(rejected[0]["type"], "Warning");
    assert!(w.events_with_reason("ConfigReloaded").is_empty());
    // The Secret is created: the next resync tries again and applies.
    Api::<Secret>::namespaced(w.client.clone(), METAL3_NAMESPACE)
        .create(
            &PostParams::default(),
            &bmc_secret(
                METAL3_NAMESPACE,
                "worker-3-bmc",
                common::USER,
                common::PASSWORD,
            ),
        )
        .await
        .unwrap();
    w.expect_event_where("ConfigReloaded", |e| {
        e["note"]
            .as_str()
            .is_some_and(|n| n.contains("3 node(s); added: worker-3"))
    })
    .await;
    w.stop().await;
}

/// The version of worker-1's Secret Metal3 last tried.
async fn tried_version(w: &World) -> Option<String> {
    w.bare_metal_host("worker-1")
        .await
        .and_then(|h| h.status)
        .and_then(|s| s.tried_credentials)
        .map(|c| c.credentials_version)
}

/// nodefence's own requests to the BMC (the stand-in's Ironic reads it too), by
/// their User-Agent: the statuses answered.
fn nodefence_statuses(w: &World) -> Vec<u16> {
    w.bmc
        .request_log()
        .iter()
        .filter(|r| {
            r.user_agent
                .as_deref()
                .is_some_and(|a| a.starts_with("nodefence/"))
        })
        .filter_map(|r| r.status)
        .collect()
}

/// A password rotated in a BareMetalHost's Secret is used without a restart, under
/// exactly the RBAC of `deploy/` and `components/metal3`: Metal3 (the stand-in, as
/// BMO) records the Secret's new version in the host's `status.triedCredentials`,
/// nodefence hears that host change (its periodic resync is 10 minutes away) and
/// reads the Secret again. The BMC monitor logs in every 200 ms, so the BMC's answers
/// show which password nodefence holds (401 to any other).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_rotated_in_a_hosts_secret_is_used_without_a_restart() {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Api, Patch, PatchParams};

    let w = hosts_only()
        .no_workloads()
        .config_check(Duration::from_millis(200))
        .power_toml("monitor_interval = \"200ms\"\n")
        .metal3_setup(|m| m.toml = "resync_interval = \"10m\"\n".into())
        .rbac(deploy_rbac(&["metal3"]))
        .start()
        .await;
    let secrets = Api::<Secret>::namespaced(w.client.clone(), METAL3_NAMESPACE);
    let rotate = |password: &'static str| {
        let secrets = secrets.clone();
        async move {
            secrets
                .patch(
                    "worker-1-bmc",
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"stringData": {"password": password}})),
                )
                .await
                .unwrap();
        }
    };
    eventually(
        "the leader's monitor logged in",
        Duration::from_secs(30),
        || async { nodefence_statuses(&w).contains(&200) },
    )
    .await;
    assert!(!nodefence_statuses(&w).contains(&401));
    // Metal3 claimed the Secret as BMO does: its label, and the host as an owner.
    let claimed = secrets.get("worker-1-bmc").await.unwrap();
    assert_eq!(
        claimed.metadata.labels.unwrap_or_default()["environment.metal3.io"],
        "baremetal"
    );
    assert!(
        claimed
            .metadata
            .owner_references
            .unwrap_or_default()
            .iter()
            .any(|r| r.kind == "BareMetalHost" && r.name == "worker-1")
    );

    // Rotated to a password the BMC does not know: nodefence reloads and uses it.
    let before = tried_version(&w).await;
    assert!(before.is_some(), "Metal3 recorded the Secret it tried");
    rotate("a-new-password").await;
    let reloaded = w
        .expect_event_where("ConfigReloaded", |e| {
            e["note"].as_str().is_some_and(|n| n.contains("worker-1"))
        })
        .await;
    assert_eq!(reloaded.len(), 1, "{reloaded:?}");
    assert_ne!(
        tried_version(&w).await,
        before,
        "Metal3 recorded the new version"
    );
    w.bmc.clear_logs();
    eventually(
        "the monitor logs in with the new password",
        Duration::from_secs(10),
        || async { nodefence_statuses(&w).contains(&401) },
    )
    .await;

    // And back: the next reload, and logins succeed again.
    rotate(common::PASSWORD).await;
    eventually("a second reload", Duration::from_secs(20), || async {
        w.events_with_reason("ConfigReloaded").len() >= 2
    })
    .await;
    eventually("logins succeed again", Duration::from_secs(10), || async {
        let statuses = nodefence_statuses(&w);
        statuses.len() >= 3 && statuses[statuses.len() - 3..].iter().all(|s| *s < 300)
    })
    .await;
    assert!(
        w.forbidden_requests().is_empty(),
        "calls the deploy RBAC does not grant: {:?}",
        w.forbidden_requests()
    );
    w.stop().await;
}
