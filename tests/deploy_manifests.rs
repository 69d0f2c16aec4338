//! `deploy/` must not rot: every manifest parses as its Kubernetes type, the config it
//! ships loads with the real loader, the container's arguments parse with the real
//! CLI, and the RBAC grants what the code calls (and nothing broader).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use serde_json::Value;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

/// Every document of every manifest, as JSON.
fn documents() -> Vec<Value> {
    let mut docs = Vec::new();
    for name in [
        "namespace.yaml",
        "rbac.yaml",
        "config.yaml",
        "deployment.yaml",
    ] {
        let text = std::fs::read_to_string(deploy_dir().join(name)).unwrap();
        let parsed: Vec<Value> =
            serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        docs.extend(parsed.into_iter().filter(|d| !d.is_null()));
    }
    docs
}

fn of_kind<T: serde::de::DeserializeOwned>(kind: &str) -> Vec<T> {
    documents()
        .into_iter()
        .filter(|d| d["kind"] == kind)
        .map(|d| serde_json::from_value(d).unwrap_or_else(|e| panic!("{kind}: {e}")))
        .collect()
}

#[test]
fn every_manifest_is_a_valid_object_of_its_kind() {
    let kinds: Vec<String> = documents()
        .iter()
        .map(|d| d["kind"].as_str().unwrap().to_string())
        .collect();
    for kind in kinds {
        let doc: Vec<Value> = documents()
            .into_iter()
            .filter(|d| d["kind"] == kind.as_str())
            .collect();
        for d in doc {
            let ok = match kind.as_str() {
                "Namespace" => {
                    serde_json::from_value::<k8s_openapi::api::core::v1::Namespace>(d).is_ok()
                }
                "ServiceAccount" => {
                    serde_json::from_value::<k8s_openapi::api::core::v1::ServiceAccount>(d).is_ok()
                }
                "ClusterRole" => serde_json::from_value::<ClusterRole>(d).is_ok(),
                "ClusterRoleBinding" => {
                    serde_json::from_value::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>(d)
                        .is_ok()
                }
                "Role" => serde_json::from_value::<Role>(d).is_ok(),
                "RoleBinding" => {
                    serde_json::from_value::<k8s_openapi::api::rbac::v1::RoleBinding>(d).is_ok()
                }
                "ConfigMap" => serde_json::from_value::<ConfigMap>(d).is_ok(),
                "Secret" => serde_json::from_value::<k8s_openapi::api::core::v1::Secret>(d).is_ok(),
                "Deployment" => serde_json::from_value::<Deployment>(d).is_ok(),
                "PodDisruptionBudget" => {
                    serde_json::from_value::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(d)
                        .is_ok()
                }
                "Service" => {
                    serde_json::from_value::<k8s_openapi::api::core::v1::Service>(d).is_ok()
                }
                other => panic!("unexpected kind {other} in deploy/"),
            };
            assert!(ok, "{kind} does not parse as its type");
        }
    }
}

/// The shipped config, loaded with the real loader from a temporary directory (which
/// must outlive the returned config).
fn shipped_config() -> (tempfile::TempDir, nodefence::config::Config) {
    let cm = of_kind::<ConfigMap>("ConfigMap")
        .into_iter()
        .next()
        .unwrap();
    let data = cm.data.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let secrets = dir.path().join("secrets");
    std::fs::create_dir(&secrets).unwrap();
    std::fs::write(secrets.join("bmc-password"), "change-me\n").unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            secrets.join("bmc-password"),
            std::fs::Permissions::from_mode(0o440),
        )
        .unwrap();
    }
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("config/rack-a-ca.pem"),
        secrets.join("bmc-ca.pem"),
    )
    .unwrap();
    let mounted = format!("{}/", secrets.display());
    std::fs::write(dir.path().join("nodefence.toml"), &data["nodefence.toml"]).unwrap();
    std::fs::write(
        dir.path().join("inventory.toml"),
        data["inventory.toml"].replace("/etc/nodefence/secrets/", &mounted),
    )
    .unwrap();
    let config = nodefence::config::load(&dir.path().join("nodefence.toml"))
        .unwrap_or_else(|e| panic!("{e}"));
    (dir, config)
}

#[test]
fn the_shipped_config_loads() {
    let (_dir, config) = shipped_config();
    assert_eq!(config.inventory.nodes.len(), 3);
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    // The BMC password comes from the Secret through the API, read at start-up.
    for node in config.inventory.nodes.values() {
        let secret = node.pending_secret().expect("password_secret");
        assert_eq!(secret.name, "nodefence-bmc");
        assert_eq!(secret.password_key, "bmc-password");
    }
}

#[test]
fn the_container_arguments_are_accepted_by_the_cli() {
    let deployment = of_kind::<Deployment>("Deployment")
        .into_iter()
        .next()
        .unwrap();
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    let container = &pod.containers[0];
    let mut argv = vec!["nodefence".to_string()];
    argv.extend(container.args.clone().unwrap());
    let cli = nodefence::cli::Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(cli.command, nodefence::cli::Command::Run(_)));
    assert_eq!(
        cli.config,
        PathBuf::from("/etc/nodefence/config/nodefence.toml")
    );
    let env: Vec<String> = container
        .env
        .clone()
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(env.contains(&"POD_NAME".to_string()) && env.contains(&"POD_NAMESPACE".to_string()));
    let paths: Vec<String> = [
        container.liveness_probe.clone(),
        container.readiness_probe.clone(),
    ]
    .into_iter()
    .map(|p| p.unwrap().http_get.unwrap().path.unwrap())
    .collect();
    assert_eq!(paths, vec!["/healthz", "/readyz"]);
    assert_eq!(deployment.metadata.namespace.as_deref(), Some("nodefence"));
}

fn grants(rules: &[PolicyRule], group: &str, resource: &str, verb: &str) -> bool {
    rules.iter().any(|r| {
        r.api_groups
            .as_ref()
            .is_some_and(|g| g.iter().any(|g| g == group))
            && r.resources
                .as_ref()
                .is_some_and(|rs| rs.iter().any(|x| x == resource))
            && r.verbs.iter().any(|v| v == verb)
    })
}

#[test]
fn rbac_grants_exactly_what_the_code_calls() {
    let cluster = of_kind::<ClusterRole>("ClusterRole")
        .remove(0)
        .rules
        .unwrap();
    // What the code does (watchers, release, recorder).
    for (group, resource, verb) in [
        ("", "nodes", "get"),
        ("", "nodes", "list"),
        ("", "nodes", "watch"),
        ("", "nodes", "patch"),
        ("", "nodes", "delete"),
        ("storage.k8s.io", "volumeattachments", "list"),
        ("storage.k8s.io", "volumeattachments", "delete"),
        ("", "pods", "list"),
        ("", "pods", "delete"),
        ("events.k8s.io", "events", "create"),
    ] {
        assert!(
            grants(&cluster, group, resource, verb),
            "ClusterRole lacks {verb} {group}/{resource}"
        );
    }
    // Nothing broader than needed.
    for rule in &cluster {
        assert!(!rule.verbs.iter().any(|v| v == "*"), "wildcard verb");
        assert!(
            !rule
                .resources
                .as_ref()
                .unwrap()
                .iter()
                .any(|r| r == "*" || r == "secrets")
        );
    }
    for verb in ["get", "create", "update", "patch"] {
        assert!(
            !grants(&cluster, "", "pods", verb),
            "pods: list and delete only, never {verb}"
        );
    }
    let roles = of_kind::<Role>("Role");
    let named = |name: &str| {
        roles
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(name))
            .and_then(|r| r.rules.clone())
            .unwrap()
    };
    let node_leases = named("nodefence-node-leases");
    for verb in ["get", "list", "watch"] {
        assert!(grants(&node_leases, "coordination.k8s.io", "leases", verb));
    }
    assert!(
        !grants(&node_leases, "coordination.k8s.io", "leases", "update"),
        "kubelet Leases are read-only"
    );
    let election = named("nodefence-leader-election");
    for verb in ["get", "create", "update"] {
        assert!(grants(&election, "coordination.k8s.io", "leases", verb));
    }
    for verb in ["get", "list", "watch"] {
        assert!(
            grants(&election, "", "configmaps", verb),
            "the pause switch must be readable"
        );
    }
    assert!(
        !grants(&election, "", "configmaps", "update"),
        "the daemon never writes the pause switch"
    );
    // The release records: patch is limited to that one ConfigMap by name.
    for rule in election.iter().filter(|r| {
        r.resources.as_deref() == Some(&["configmaps".to_string()][..])
            && r.verbs.iter().any(|v| v == "patch")
    }) {
        assert_eq!(
            rule.resource_names.as_deref(),
            Some(&[nodefence::cluster::records::STATE_CONFIGMAP.to_string()][..]),
            "configmaps patch only on the release records"
        );
    }
    assert!(grants(&election, "", "configmaps", "patch"));
    assert!(grants(&election, "", "configmaps", "create"));
}

#[test]
fn secrets_are_readable_only_in_nodefences_namespace_only_by_name_and_only_with_get() {
    // No cluster-wide access to Secrets, in any ClusterRole.
    for role in of_kind::<ClusterRole>("ClusterRole") {
        for rule in role.rules.unwrap_or_default() {
            let resources = rule.resources.unwrap_or_default();
            assert!(
                !resources.iter().any(|r| r == "secrets" || r == "*"),
                "a ClusterRole grants secrets"
            );
        }
    }
    let roles = of_kind::<Role>("Role");
    let mut readable = Vec::new();
    for role in &roles {
        for rule in role.rules.clone().unwrap_or_default() {
            let resources = rule.resources.clone().unwrap_or_default();
            if !resources.iter().any(|r| r == "secrets") {
                continue;
            }
            let name = role.metadata.name.clone().unwrap();
            assert_eq!(
                role.metadata.namespace.as_deref(),
                Some("nodefence"),
                "{name}: Secrets only in nodefence's namespace"
            );
            assert_eq!(resources, ["secrets"], "{name}: a rule of its own");
            assert_eq!(rule.verbs, ["get"], "{name}: read-only, and no list/watch");
            let names = rule.resource_names.clone().unwrap_or_default();
            assert!(!names.is_empty(), "{name}: only the Secrets it names");
            // Bound with a RoleBinding (namespaced) to nodefence's service account.
            let bound = of_kind::<RoleBinding>("RoleBinding").into_iter().any(|b| {
                b.metadata.namespace.as_deref() == Some("nodefence")
                    && b.role_ref.kind == "Role"
                    && b.role_ref.name == name
                    && b.subjects.unwrap_or_default().iter().any(|s| {
                        s.kind == "ServiceAccount"
                            && s.name == "nodefence"
                            && s.namespace.as_deref() == Some("nodefence")
                    })
            });
            assert!(bound, "{name} is not bound to nodefence's service account");
            readable.extend(names);
        }
    }
    for binding in of_kind::<ClusterRoleBinding>("ClusterRoleBinding") {
        assert_ne!(binding.role_ref.kind, "Role");
    }
    // Every Secret the shipped inventory names can be read, and nothing else.
    let (_dir, config) = shipped_config();
    let named: std::collections::BTreeSet<String> = config
        .inventory
        .nodes
        .values()
        .filter_map(|n| n.pending_secret())
        .map(|r| {
            assert!(
                r.namespace.is_none() || r.namespace.as_deref() == Some("nodefence"),
                "{r}"
            );
            r.name.clone()
        })
        .collect();
    readable.sort();
    readable.dedup();
    assert_eq!(readable, named.into_iter().collect::<Vec<_>>());
}
