//! The daemon under exactly the RBAC `deploy/` installs: fake-kube authorizes its
//! requests as the ServiceAccount `nodefence/nodefence` from the manifests' own
//! ClusterRoles, Roles and bindings, answers 403 to anything else (as the API server
//! would) and answers its SelfSubjectAccessReviews from them. A call the code makes
//! without a grant fails here; a configuration that needs a component the cluster
//! lacks is refused at start-up, naming what is missing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::deploy_common::deploy_rbac;

use std::time::Duration;

use common::world::*;
use nodefence::engine::ReleaseMode;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_base_rbac_is_enough_to_fence_release_and_force_delete_pods() {
    // Five workers: two unhealthy at once stay within storm protection (40%).
    let w = WorldBuilder::new()
        .workers(5)
        .rbac(deploy_rbac(&[]))
        .start()
        .await;
    // Power loss: the Lease fast path releases while the Node is still Ready, so the
    // pods are force-deleted by nodefence itself (list and delete pods).
    let victim = w.db_placed().await;
    w.pull_plug(&victim);
    w.released_and_moved(&victim).await;
    w.expect_event(&victim, "Released").await;
    // A network cut: the machine is powered off first.
    let other = ["worker-1", "worker-2", "worker-3", "worker-4", "worker-5"]
        .into_iter()
        .find(|n| *n != victim)
        .unwrap();
    w.cut_network(other);
    eventually(
        "the cut-off node released",
        Duration::from_secs(45),
        || async { w.has_out_of_service_taint(other) },
    )
    .await;
    assert!(
        w.forbidden_requests().is_empty(),
        "calls the deploy RBAC does not grant: {:?}",
        w.forbidden_requests()
    );
    let lease = w
        .store()
        .get(
            nodefence_mocks::kube::resources::LEASES,
            Some(RBAC_NAMESPACE),
            "nodefence",
        )
        .expect("the leader Lease in nodefence's namespace");
    assert_eq!(lease["spec"]["holderIdentity"], "test-replica");
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_node_without_its_component_is_refused_at_start_and_works_with_it() {
    let mut w = WorldBuilder::new()
        .no_workloads()
        .rbac(deploy_rbac(&[]))
        .replicas(&[])
        .policy(|p| p.release = ReleaseMode::DeleteNode)
        .start()
        .await;
    w.start_replica("refused");
    let outcome = tokio::time::timeout(Duration::from_secs(30), w.replica_outcome("refused"))
        .await
        .expect("the replica stops by itself");
    let error = format!("{:#}", outcome.expect("not killed").expect_err("refused"));
    assert!(error.contains("delete nodes (cluster scope)"), "{error}");
    assert!(error.contains("deploy/components/delete-node"), "{error}");
    assert!(error.contains("refusing to start"), "{error}");
    // Nothing was done: not even the leader Lease.
    assert!(
        w.store()
            .get(
                nodefence_mocks::kube::resources::LEASES,
                Some(RBAC_NAMESPACE),
                "nodefence"
            )
            .is_err()
    );
    w.stop().await;

    let w = WorldBuilder::new()
        .no_workloads()
        .rbac(deploy_rbac(&["delete-node"]))
        .policy(|p| p.release = ReleaseMode::DeleteNode)
        .start()
        .await;
    eventually("worker-2 Ready", Duration::from_secs(30), || async {
        w.node_ready("worker-2")
    })
    .await;
    w.pull_plug("worker-2");
    eventually(
        "worker-2's Node deleted",
        Duration::from_secs(45),
        || async { w.node("worker-2").is_none() },
    )
    .await;
    assert!(
        w.forbidden_requests().is_empty(),
        "{:?}",
        w.forbidden_requests()
    );
    w.stop().await;
}

#[tokio::test]
async fn validate_names_the_components_a_configuration_needs() {
    use common::cli_common::{nodefence, text, write_secret};
    let dir = tempfile::tempdir().unwrap();
    write_secret(&dir.path().join("bmc-password"), "pw");
    std::fs::write(
        dir.path().join("nodefence.toml"),
        "inventory = \"inventory.toml\"\n[policy]\nrelease = \"delete-node\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("inventory.toml"),
        "[defaults]\ndriver = \"redfish\"\nusername = \"fence\"\n\
         [nodes.worker-1]\nendpoint = \"https://10.0.0.1\"\npassword_file = \"bmc-password\"\n\
         [nodes.worker-2]\nendpoint = \"https://10.0.0.2\"\npassword_secret = \"bmc-rack-b\"\n",
    )
    .unwrap();
    let out = nodefence(&dir.path().join("nodefence.toml"), &["validate"]).await;
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(
        shown.contains("components/delete-node, components/secret-credentials"),
        "{shown}"
    );
    assert!(shown.contains("name the Secret(s) bmc-rack-b"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_with_partial_rights_says_what_it_could_not_read_and_what_it_needs() {
    // An operator allowed to read Nodes and the pause switch, nothing else.
    let operator: Vec<Value> = serde_json::from_value(serde_json::json!([
        {"kind": "ClusterRole", "metadata": {"name": "node-reader"},
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]},
        {"kind": "ClusterRoleBinding", "metadata": {"name": "node-reader"},
         "roleRef": {"kind": "ClusterRole", "name": "node-reader"},
         "subjects": [{"kind": "ServiceAccount", "name": "nodefence", "namespace": "nodefence"}]},
        {"kind": "Role", "metadata": {"name": "pause", "namespace": "nodefence"},
         "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"],
                    "resourceNames": ["nodefence-pause"]}]},
        {"kind": "RoleBinding", "metadata": {"name": "pause", "namespace": "nodefence"},
         "roleRef": {"kind": "Role", "name": "pause"},
         "subjects": [{"kind": "ServiceAccount", "name": "nodefence", "namespace": "nodefence"}]}
    ]))
    .unwrap();
    let w = WorldBuilder::new()
        .no_workloads()
        .rbac(operator)
        .replicas(&[])
        .start()
        .await;
    eventually("worker-1 Ready", Duration::from_secs(30), || async {
        w.node_ready("worker-1")
    })
    .await;
    let kubeconfig = w._dir.path().join("operator-kubeconfig");
    std::fs::write(&kubeconfig, &w.replica_kubeconfig).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_nodefence"))
        .arg("--config")
        .arg(w._dir.path().join("nodefence.toml"))
        .args([
            "explain",
            "worker-1",
            "--namespace",
            RBAC_NAMESPACE,
            "--kubeconfig",
        ])
        .arg(&kubeconfig)
        .output()
        .await
        .unwrap();
    let shown = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(
        shown.contains("Ready:"),
        "what it could read is shown: {shown}"
    );
    assert!(
        shown.contains(
            "Events:         cannot be read: forbidden: this identity needs list \
             events.events.k8s.io (cluster scope)"
        ),
        "{shown}"
    );
    assert!(
        shown.contains(
            "cannot be read: forbidden: this identity needs get leases.coordination.k8s.io \
             in namespace kube-node-lease"
        ),
        "{shown}"
    );
    assert!(!shown.contains("Pause:          cannot be read"), "{shown}");
    w.stop().await;
}

/// `password_secret` under the base RBAC and the `secret-credentials` component alone
/// (its Role names the Secret): read, watched by name, a changed Secret applied, and
/// fencing goes on with the credentials read again; not one request refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_secret_is_read_and_watched_under_its_components_role() {
    // The name the component's Role lists under resourceNames.
    const SECRET: &str = "nodefence-bmc-credentials";
    let mut builder = WorldBuilder::new()
        .no_workloads()
        .rbac(deploy_rbac(&["secret-credentials"]))
        .replicas(&[])
        .config_check(Duration::from_millis(200));
    for node in ["worker-1", "worker-2", "worker-3"] {
        builder = builder.node(node, |n| {
            n.inventory_lines
                .push(format!("password_secret = \"{SECRET}\""));
        });
    }
    let mut w = builder.start().await;
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(w.client.clone(), RBAC_NAMESPACE);
    let secret = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": RBAC_NAMESPACE},
        // As a manifest would write it: fake-kube merges it into `data`, as the API
        // server does.
        "stringData": {"password": common::PASSWORD},
    });
    secrets
        .create(
            &kube::api::PostParams::default(),
            &serde_json::from_value(secret).unwrap(),
        )
        .await
        .unwrap();
    w.start_replica("test-replica");
    eventually("worker-2 Ready", Duration::from_secs(30), || async {
        w.node_ready("worker-2")
    })
    .await;
    eventually("the Secret watched", Duration::from_secs(30), || async {
        w.kube.request_log().iter().any(|(method, path, _)| {
            method == "GET" && path.contains("/secrets?") && path.contains("watch=true")
        })
    })
    .await;

    // Another key added: the data changed, so the configuration is read again.
    let patch = serde_json::json!({"stringData": {"rotated-at": "2026-11-27T14:00:00Z"}});
    secrets
        .patch(
            SECRET,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
    let reloaded = w
        .expect_event_where("ConfigReloaded", |e| {
            e["note"]
                .as_str()
                .is_some_and(|n| n.contains(&format!("Secret {RBAC_NAMESPACE}/{SECRET} changed")))
        })
        .await;
    assert_eq!(reloaded[0]["type"], "Normal");

    // The new version's drivers log in with what they read: worker-2 is fenced.
    w.pull_plug("worker-2");
    eventually("worker-2 released", Duration::from_secs(45), || async {
        w.has_out_of_service_taint("worker-2")
    })
    .await;
    assert!(
        w.forbidden_requests().is_empty(),
        "calls the component's Role does not grant: {:?}",
        w.forbidden_requests()
    );
    w.stop().await;
}

/// With `--companion-listen`, the daemon asks (SubjectAccessReview, which the base lets
/// it create) whether the companions' ServiceAccount has its one grant, `get` on Nodes
/// from `components/companion`: refused at start without it, naming the grant and the
/// component; started with it, not one request refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_companions_grant_is_checked_at_start() {
    use common::deploy_common::companion_rbac;
    let listener = || nodefence::daemon::CompanionListener {
        listen: "127.0.0.1:0".parse().unwrap(),
        service_account: "nodefence-companion".into(),
        certificate: nodefence::telemetry::certificate::CertificateSource::SelfSigned,
        heartbeat_interval: Duration::from_millis(100),
        heartbeat_timeout: Duration::from_millis(500),
    };
    let lease = |w: &World| {
        w.store()
            .get(
                nodefence_mocks::kube::resources::LEASES,
                Some(RBAC_NAMESPACE),
                "nodefence",
            )
            .is_ok()
    };
    let mut w = WorldBuilder::new()
        .no_workloads()
        .rbac(deploy_rbac(&[]))
        .replicas(&[])
        .companions(listener())
        .start()
        .await;
    w.start_replica("refused");
    let outcome = tokio::time::timeout(Duration::from_secs(30), w.replica_outcome("refused"))
        .await
        .expect("the replica stops by itself");
    let error = format!("{:#}", outcome.expect("not killed").expect_err("refused"));
    for want in [
        "refusing to start",
        "nodefence/nodefence-companion lacks get nodes (cluster scope)",
        "deploy/components/companion",
    ] {
        assert!(error.contains(want), "{want}: {error}");
    }
    assert!(!lease(&w), "nothing was done");
    let reviews: Vec<u16> = w
        .kube
        .requests()
        .into_iter()
        .filter(|r| {
            r.method == "POST"
                && r.path_and_query
                    .starts_with("/apis/authorization.k8s.io/v1/subjectaccessreviews")
        })
        .map(|r| r.status)
        .collect();
    assert_eq!(reviews, [201], "asked once, as nodefence, and answered");
    w.stop().await;

    let w = WorldBuilder::new()
        .no_workloads()
        .rbac(deploy_rbac(&[]))
        .companions(listener())
        .service_account(
            "companion-api-token",
            RBAC_NAMESPACE,
            "nodefence-companion",
            companion_rbac(RBAC_NAMESPACE),
        )
        .start()
        .await;
    eventually("the replica leads", Duration::from_secs(30), || async {
        lease(&w)
    })
    .await;
    assert!(
        w.forbidden_requests().is_empty(),
        "{:?}",
        w.forbidden_requests()
    );
    w.stop().await;
}
