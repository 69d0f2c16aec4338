//! `deploy/` must not rot and must grant exactly what the code calls:
//! - every manifest (base, components, examples) parses as its Kubernetes type;
//! - the real `kubectl kustomize` renders the base and the base with each component
//!   (CI installs kubectl; `NODEFENCE_KUBECTL`), and nothing applied holds a Secret;
//! - the configuration it ships loads with the real loader, and the container's
//!   arguments parse with the real CLI;
//! - the RBAC of the base and of each component is, grant by grant, the table of API
//!   calls in the code (`nodefence::cluster::access::DAEMON`): nothing missing,
//!   nothing more. A new call without its grant fails here (and in `tests/rbac.rs`,
//!   which runs the daemon under exactly this RBAC);
//! - the NetworkPolicy of the base lets in the probes and the metrics port, the
//!   latter only from the Prometheus that `components/prometheus` binds to the reader
//!   role and scrapes with over HTTPS, and nothing else;
//! - the remediation CRDs are the ones the Rust types generate, both ways: the file
//!   parses back into exactly those objects, and renders from them to exactly that
//!   text (`NODEFENCE_BLESS=1` rewrites it); the role the requesters are given is
//!   bound to nobody and carries their aggregation labels.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::deploy_common;

use deploy_common::kubectl;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use kube::CustomResourceExt;
use nodefence::cluster::access::{self, Component, Scope};
use serde_json::Value;

pub(crate) fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

/// The documents of one YAML file, as JSON.
pub(crate) fn documents_of(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// Every `.yaml` under `dir`, recursively, but the kustomization files.
fn manifests(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            // Prometheus rule files are not Kubernetes objects (promtool checks them).
            if path.file_name().is_some_and(|n| n == "monitoring") {
                continue;
            }
            out.extend(manifests(&path));
        } else if path.extension().is_some_and(|e| e == "yaml")
            && path.file_name().is_some_and(|n| {
                // Kustomize's JSON patches are not objects either.
                n != "kustomization.yaml" && !n.to_string_lossy().ends_with("-patch.yaml")
            })
        {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The RBAC objects of the base (`deploy/rbac.yaml`) or of a component.
fn rbac_of(component: Component) -> Vec<Value> {
    let file = match component {
        Component::Base => deploy_dir().join("rbac.yaml"),
        c => deploy_dir()
            .join("components")
            .join(c.dir())
            .join("rbac.yaml"),
    };
    documents_of(&file)
}

fn parses_as<T: serde::de::DeserializeOwned>(doc: &Value) -> bool {
    serde_json::from_value::<T>(doc.clone()).is_ok()
}

#[test]
fn every_manifest_is_a_valid_object_of_its_kind() {
    use k8s_openapi::api::core::v1 as core;
    use k8s_openapi::api::rbac::v1 as rbac;
    let files = manifests(&deploy_dir());
    assert!(files.len() >= 8, "{files:?}");
    for file in files {
        for doc in documents_of(&file) {
            let kind = doc["kind"].as_str().unwrap_or_default().to_string();
            let ok = match kind.as_str() {
                "Namespace" => parses_as::<core::Namespace>(&doc),
                "ServiceAccount" => parses_as::<core::ServiceAccount>(&doc),
                "ClusterRole" => parses_as::<rbac::ClusterRole>(&doc),
                "ClusterRoleBinding" => parses_as::<rbac::ClusterRoleBinding>(&doc),
                "Role" => parses_as::<rbac::Role>(&doc),
                "RoleBinding" => parses_as::<rbac::RoleBinding>(&doc),
                "Secret" => {
                    // A ServiceAccount token Secret holds nothing written here: the
                    // infrastructure cluster fills it (deploy/kubevirt-infra).
                    let token_request = doc["type"] == "kubernetes.io/service-account-token"
                        && doc.get("data").is_none()
                        && doc.get("stringData").is_none();
                    assert!(
                        file.starts_with(deploy_dir().join("examples")) || token_request,
                        "{}: a Secret outside deploy/examples/ would be applied",
                        file.display()
                    );
                    parses_as::<core::Secret>(&doc)
                }
                "Deployment" => parses_as::<Deployment>(&doc),
                "DaemonSet" => parses_as::<k8s_openapi::api::apps::v1::DaemonSet>(&doc),
                // cert-manager's CRDs, in an example only.
                "Issuer" | "Certificate" => {
                    file.starts_with(deploy_dir().join("examples"))
                        && doc["apiVersion"] == "cert-manager.io/v1"
                        && doc["spec"].is_object()
                }
                "PodDisruptionBudget" => {
                    parses_as::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(&doc)
                }
                "Service" => parses_as::<core::Service>(&doc),
                "NetworkPolicy" => {
                    parses_as::<k8s_openapi::api::networking::v1::NetworkPolicy>(&doc)
                }
                // prometheus-operator's CRD: no Rust type here; its fields are checked
                // in the_metrics_are_scraped_over_https_and_fenced_by_the_network_policy.
                "ServiceMonitor" => {
                    doc["apiVersion"] == "monitoring.coreos.com/v1"
                        && doc["spec"]["endpoints"].is_array()
                }
                "CustomResourceDefinition" => {
                    parses_as::<apiextensions::CustomResourceDefinition>(&doc)
                }
                "NodeFenceRemediationTemplate" => {
                    parses_as::<nodefence::remediation::NodeFenceRemediationTemplate>(&doc)
                }
                other => panic!("{}: unexpected kind {other}", file.display()),
            };
            assert!(ok, "{}: {kind} does not parse as its type", file.display());
        }
    }
}

/// One RBAC permission: (verb, group, resource, where, object name or `*`).
type Grant = (String, String, String, String, String);

/// The grants a set of RBAC objects gives nodefence's ServiceAccount.
fn grants_of(objects: &[Value]) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    let bound = |b: &Value| {
        b["subjects"].as_array().is_some_and(|s| {
            s.iter().any(|s| {
                s["kind"] == "ServiceAccount"
                    && s["name"] == "nodefence"
                    && s["namespace"] == "nodefence"
            })
        })
    };
    for binding in objects.iter().filter(|o| bound(o)) {
        let kind = binding["kind"].as_str().unwrap();
        let role = binding["roleRef"]["name"].as_str().unwrap();
        let role_kind = binding["roleRef"]["kind"].as_str().unwrap();
        let (scope, ns) = match kind {
            "ClusterRoleBinding" => ("cluster".to_string(), None),
            _ => {
                let ns = binding["metadata"]["namespace"]
                    .as_str()
                    .unwrap()
                    .to_string();
                (ns.clone(), Some(ns))
            }
        };
        let role_obj = objects
            .iter()
            .find(|o| {
                o["kind"] == role_kind
                    && o["metadata"]["name"] == role
                    && (role_kind == "ClusterRole"
                        || o["metadata"]["namespace"].as_str() == ns.as_deref())
            })
            .unwrap_or_else(|| panic!("{kind} {role}: its {role_kind} is not in the same file"));
        for rule in role_obj["rules"].as_array().unwrap() {
            let list = |k: &str| -> Vec<String> {
                rule[k]
                    .as_array()
                    .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
                    .unwrap_or_default()
            };
            let names = list("resourceNames");
            let names = if names.is_empty() {
                vec!["*".to_string()]
            } else {
                names
            };
            for verb in list("verbs") {
                assert_ne!(verb, "*", "a wildcard verb in {role}");
                for group in list("apiGroups") {
                    for resource in list("resources") {
                        assert_ne!(resource, "*", "a wildcard resource in {role}");
                        for name in &names {
                            out.insert((
                                verb.clone(),
                                group.clone(),
                                resource.clone(),
                                scope.clone(),
                                name.clone(),
                            ));
                        }
                    }
                }
            }
        }
    }
    out
}

/// The grants the code's table says `component` must give.
fn table_grants(component: Component) -> BTreeSet<Grant> {
    access::DAEMON
        .iter()
        .filter(|a| a.component == component)
        .map(|a| {
            let scope = match a.scope {
                Scope::Cluster => "cluster",
                Scope::Own => "nodefence",
                Scope::NodeLeases => "kube-node-lease",
                // The shipped component's namespace (copied into each one configured).
                Scope::Metal3Hosts => "metal3",
            };
            (
                a.verb.to_string(),
                a.group.to_string(),
                a.resource.to_string(),
                scope.to_string(),
                a.name.unwrap_or("*").to_string(),
            )
        })
        .collect()
}

#[test]
fn the_rbac_of_the_base_and_of_each_component_is_exactly_the_codes_table() {
    for component in Component::ALL {
        if component == Component::SecretCredentials {
            continue; // named by the inventory: checked below.
        }
        let manifests = grants_of(&rbac_of(component));
        let table = table_grants(component);
        let missing: Vec<_> = table.difference(&manifests).collect();
        let extra: Vec<_> = manifests.difference(&table).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{component:?} ({}): missing from the manifests {missing:?}; granted but never \
             called {extra:?}",
            component.dir()
        );
    }
}

#[test]
fn secrets_are_read_and_watched_only_by_name_in_a_component_and_never_in_the_base() {
    for component in Component::ALL {
        let grants = grants_of(&rbac_of(component));
        let secrets: Vec<&Grant> = grants.iter().filter(|g| g.2 == "secrets").collect();
        if component == Component::Metal3 {
            // The Secrets BareMetalHosts name, in their own namespace: get only (one
            // by one, as a host names it), never list or watch, never nodefence's own.
            assert!(!secrets.is_empty());
            for (verb, group, _, scope, _) in secrets {
                assert_eq!((verb.as_str(), group.as_str()), ("get", ""), "get only");
                assert_eq!(scope, "metal3", "in the BareMetalHosts' namespace");
            }
            continue;
        }
        if component != Component::SecretCredentials {
            assert!(
                secrets.is_empty(),
                "{component:?} grants Secrets: {secrets:?}"
            );
            continue;
        }
        assert!(!secrets.is_empty());
        let verbs: BTreeSet<&str> = secrets.iter().map(|g| g.0.as_str()).collect();
        assert_eq!(
            verbs,
            BTreeSet::from(["get", "list", "watch"]),
            "read, and watched for a rotated password"
        );
        for (_, group, _, scope, name) in secrets {
            assert_eq!(group, "", "core Secrets");
            assert_eq!(scope, "nodefence", "in nodefence's namespace");
            assert_ne!(
                name, "*",
                "only the Secrets it names, even to list or watch"
            );
        }
    }
}

/// The shipped configuration laid out as the pod sees it (config/ and secrets/ side
/// by side), loaded with the real loader.
fn shipped_config() -> (tempfile::TempDir, nodefence::config::Config) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    let secrets = dir.path().join("secrets");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::create_dir_all(&secrets).unwrap();
    for file in ["nodefence.toml", "inventory.toml"] {
        std::fs::copy(deploy_dir().join("config").join(file), config.join(file)).unwrap();
    }
    std::fs::write(secrets.join("bmc-password"), "the-password\n").unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            secrets.join("bmc-password"),
            std::fs::Permissions::from_mode(0o440),
        )
        .unwrap();
    }
    let loaded =
        nodefence::config::load(&config.join("nodefence.toml")).unwrap_or_else(|e| panic!("{e}"));
    (dir, loaded)
}

#[test]
fn the_shipped_config_loads_and_needs_only_the_base() {
    let (_dir, config) = shipped_config();
    assert_eq!(config.inventory.nodes.len(), 3);
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    for node in config.inventory.nodes.values() {
        let nodefence::config::PowerSource::Redfish(t) = &node.power else {
            panic!("redfish");
        };
        assert!(t.tls.fingerprint.is_some() && !t.tls.insecure);
    }
    assert!(access::components(&config).is_empty(), "the base suffices");
}

#[test]
fn the_container_arguments_are_accepted_by_the_cli() {
    let deployment: Deployment = serde_json::from_value(
        documents_of(&deploy_dir().join("deployment.yaml"))
            .into_iter()
            .find(|d| d["kind"] == "Deployment")
            .unwrap(),
    )
    .unwrap();
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    let container = &pod.containers[0];
    let mut argv = vec!["nodefence".to_string()];
    argv.extend(container.args.clone().unwrap());
    let cli = nodefence::cli::Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{e}"));
    let nodefence::cli::Command::Run(run) = &cli.command else {
        panic!("the container runs `nodefence run`");
    };
    // The short Lease the failover bench measured, and valid together.
    let leader = run.leader_timings().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(leader, nodefence::cluster::leader::LeaderTimings::SHIPPED);
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
    let mounts: Vec<(String, String)> = container
        .volume_mounts
        .clone()
        .unwrap()
        .into_iter()
        .map(|m| (m.name, m.mount_path))
        .collect();
    assert!(mounts.contains(&("config".into(), "/etc/nodefence/config".into())));
    assert!(
        mounts.contains(&("secrets".into(), "/etc/nodefence/secrets".into())),
        "the inventory's password_file (../secrets/bmc-password) is there"
    );
    assert_eq!(pod.service_account_name.as_deref(), Some("nodefence"));
    assert_eq!(
        pod.security_context.unwrap().run_as_user,
        Some(65532),
        "the image's non-root user"
    );
}

/// `to` relative to `from` (both absolute): kustomize refuses absolute paths.
fn relative(from: &Path, to: &Path) -> PathBuf {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..from.len() {
        out.push("..");
    }
    for c in &to[common..] {
        out.push(c);
    }
    out
}

/// `kubectl kustomize` of an overlay of the base with these component directories.
pub(crate) fn render_dirs(kubectl: &Path, components: &[&str]) -> Vec<Value> {
    let overlay = tempfile::Builder::new()
        .prefix("overlay")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let base = relative(overlay.path(), &deploy_dir());
    let mut text = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\n",
        base.display()
    );
    if !components.is_empty() {
        text.push_str("components:\n");
        for dir in components {
            text.push_str(&format!("  - {}/components/{dir}\n", base.display()));
        }
    }
    std::fs::write(overlay.path().join("kustomization.yaml"), text).unwrap();
    let out = std::process::Command::new(kubectl)
        .arg("kustomize")
        .arg(overlay.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl kustomize with {components:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_saphyr::from_multiple::<Value>(&String::from_utf8_lossy(&out.stdout))
        .unwrap()
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// [`render_dirs`] for components of the RBAC table.
fn render(kubectl: &Path, components: &[Component]) -> Vec<Value> {
    let dirs: Vec<&str> = components.iter().map(|c| c.dir()).collect();
    render_dirs(kubectl, &dirs)
}

#[test]
fn kustomize_renders_the_base_and_every_component() {
    let Some(kubectl) = kubectl() else { return };
    let base = render(&kubectl, &[]);
    let kinds: BTreeSet<&str> = base.iter().filter_map(|d| d["kind"].as_str()).collect();
    for kind in [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "Role",
        "ConfigMap",
        "Deployment",
    ] {
        assert!(
            kinds.contains(kind),
            "{kind} missing from the base: {kinds:?}"
        );
    }
    assert!(!kinds.contains("Secret"), "the applied set holds no Secret");
    let config_map = base.iter().find(|d| d["kind"] == "ConfigMap").unwrap();
    assert_eq!(
        config_map["metadata"]["name"], "nodefence-config",
        "a stable name: live reload"
    );
    assert!(config_map["data"]["inventory.toml"].is_string());
    assert_eq!(
        grants_of(&base),
        table_grants(Component::Base),
        "the rendered base grants the table's base"
    );
    let mut all = Vec::new();
    for component in Component::ALL.into_iter().filter(|c| *c != Component::Base) {
        let rendered = render(&kubectl, &[component]);
        let grants = grants_of(&rendered);
        if component != Component::SecretCredentials {
            let mut want = table_grants(Component::Base);
            want.extend(table_grants(component));
            assert_eq!(grants, want, "{component:?}");
        }
        all.push(component);
    }
    let image = |docs: &[Value]| {
        docs.iter()
            .find(|d| d["kind"] == "Deployment")
            .and_then(|d| d.pointer("/spec/template/spec/containers/0/image"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    assert_eq!(image(&base).as_deref(), Some("nodefence:0.1.0"));
    let mut everything = render(&kubectl, &all);
    let fence_agents = render_dirs(&kubectl, &["fence-agents"]);
    assert_eq!(
        image(&fence_agents).as_deref(),
        Some("nodefence:0.1.0-fence-agents")
    );
    everything.retain(|d| d["kind"] == "Secret");
    assert!(everything.is_empty(), "no component applies a Secret");
}

/// The remediation CRDs as the Rust types define them.
fn generated_crds() -> Vec<apiextensions::CustomResourceDefinition> {
    vec![
        nodefence::remediation::NodeFenceRemediation::crd(),
        nodefence::remediation::NodeFenceRemediationTemplate::crd(),
    ]
}

const CRDS_HEADER: &str = "\
# Generated from src/remediation/types.rs: do not edit. After changing the types,
# NODEFENCE_BLESS=1 cargo test --test integration deploy_manifests:: rewrites this file.
";

#[test]
fn the_remediation_crds_are_generated_from_the_rust_types_both_ways() {
    let path = deploy_dir().join("components/remediation/crds.yaml");
    let crds = generated_crds();
    let mut text = CRDS_HEADER.to_string();
    for crd in &crds {
        text.push_str("---\n");
        text.push_str(&serde_saphyr::to_string(crd).unwrap());
    }
    if std::env::var("NODEFENCE_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &text).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap();
    // File -> objects: exactly the types' CRDs.
    let parsed: Vec<apiextensions::CustomResourceDefinition> = documents_of(&path)
        .into_iter()
        .map(|d| serde_json::from_value(d).unwrap())
        .collect();
    assert_eq!(
        parsed,
        crds,
        "{} is not what the Rust types generate: run NODEFENCE_BLESS=1 cargo test --test integration deploy_manifests::",
        path.display()
    );
    // Objects -> file: exactly that text (no hand edit hides in formatting).
    assert_eq!(
        committed,
        text,
        "{} was edited by hand: run NODEFENCE_BLESS=1 cargo test --test integration deploy_manifests::",
        path.display()
    );
    // What NodeHealthCheck and Cluster API rely on.
    let (request, template) = (&crds[0], &crds[1]);
    assert_eq!(request.spec.group, "remediation.nodefence.io");
    assert_eq!(request.spec.names.kind, "NodeFenceRemediation");
    assert_eq!(
        template.spec.names.kind,
        format!("{}Template", request.spec.names.kind),
        "NodeHealthCheck strips the Template suffix to find the request's kind"
    );
    assert_eq!(request.spec.scope, "Namespaced");
    assert_eq!(template.spec.scope, "Namespaced");
    let version = &request.spec.versions[0];
    assert!(
        version
            .subresources
            .as_ref()
            .is_some_and(|s| s.status.is_some()),
        "status is a subresource: a requester's write cannot change it"
    );
    let schema = serde_json::to_value(&template.spec.versions[0].schema).unwrap();
    assert!(
        schema
            .pointer("/openAPIV3Schema/properties/spec/properties/template/properties/spec")
            .is_some(),
        "the template carries spec.template.spec: {schema}"
    );
}

#[test]
fn the_requesters_role_is_aggregated_and_bound_to_nobody() {
    let docs = documents_of(&deploy_dir().join("components/remediation/rbac.yaml"));
    let role = docs
        .iter()
        .find(|d| d["metadata"]["name"] == "nodefence-remediation-requester")
        .unwrap();
    let labels = &role["metadata"]["labels"];
    assert_eq!(
        labels["rbac.ext-remediation/aggregate-to-ext-remediation"], "true",
        "NodeHealthCheck's aggregation label"
    );
    assert_eq!(
        labels["cluster.x-k8s.io/aggregate-to-manager"], "true",
        "Cluster API's aggregation label"
    );
    let bound: Vec<&Value> = docs
        .iter()
        .filter(|d| d["roleRef"]["name"] == "nodefence-remediation-requester")
        .collect();
    assert!(bound.is_empty(), "granted to nobody directly: {bound:?}");
    // nodefence itself cannot create requests: it only answers them.
    let grants = grants_of(&docs);
    assert!(
        !grants
            .iter()
            .any(|g| g.2 == "nodefenceremediations" && g.0 == "create"),
        "{grants:?}"
    );
}

#[test]
fn the_metrics_are_scraped_over_https_and_fenced_by_the_network_policy() {
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    let Some(kubectl) = kubectl() else { return };
    let rendered = render_dirs(&kubectl, &["prometheus"]);
    let one = |kind: &str| -> Value {
        let mut found = rendered.iter().filter(|d| d["kind"] == kind);
        let doc = found.next().unwrap_or_else(|| panic!("no {kind} rendered"));
        assert!(found.next().is_none(), "more than one {kind}");
        doc.clone()
    };
    let deployment: Deployment = serde_json::from_value(one("Deployment")).unwrap();
    let pod = deployment.spec.as_ref().unwrap().template.clone();
    let container = &pod.spec.as_ref().unwrap().containers[0];
    let port_named = |name: &str| {
        container
            .ports
            .as_ref()
            .unwrap()
            .iter()
            .find(|p| p.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("the container has no port {name}"))
            .container_port
    };
    // The container listens where the arguments say, and probes the health port.
    let args = container.args.clone().unwrap();
    assert!(
        args.contains(&format!("--health-listen=0.0.0.0:{}", port_named("health"))),
        "{args:?}"
    );
    assert!(
        args.contains(&format!(
            "--metrics-listen=0.0.0.0:{}",
            port_named("metrics")
        )),
        "{args:?}"
    );
    assert!(
        !args.iter().any(|a| a.starts_with("--metrics-secure")),
        "metrics stay guarded: {args:?}"
    );
    for probe in [&container.liveness_probe, &container.readiness_probe] {
        let port = &probe.as_ref().unwrap().http_get.as_ref().unwrap().port;
        assert_eq!(
            *port,
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("health".into())
        );
    }

    // The policy: the nodefence pods, ingress only, two rules.
    let policy: NetworkPolicy = serde_json::from_value(one("NetworkPolicy")).unwrap();
    let spec = policy.spec.unwrap();
    let pod_labels = pod.metadata.unwrap().labels.unwrap();
    for (k, v) in spec
        .pod_selector
        .as_ref()
        .unwrap()
        .match_labels
        .clone()
        .unwrap()
    {
        assert_eq!(pod_labels.get(&k), Some(&v), "the policy selects the pods");
    }
    assert_eq!(spec.policy_types, Some(vec!["Ingress".to_string()]));
    let ingress = spec.ingress.unwrap();
    assert_eq!(ingress.len(), 2, "{ingress:?}");
    let port_of = |rule: &k8s_openapi::api::networking::v1::NetworkPolicyIngressRule| {
        let ports = rule.ports.clone().unwrap();
        assert_eq!(ports.len(), 1, "{ports:?}");
        assert_eq!(ports[0].protocol.as_deref(), Some("TCP"));
        match ports[0].port.clone().unwrap() {
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s,
            other => panic!("ports by name, so they follow the Deployment: {other:?}"),
        }
    };
    let health = ingress.iter().find(|r| port_of(r) == "health").unwrap();
    assert!(health.from.is_none(), "the probes come from the node: open");
    let metrics = ingress.iter().find(|r| port_of(r) == "metrics").unwrap();
    let peers = metrics.from.clone().unwrap();
    assert_eq!(peers.len(), 1, "one scraper: {peers:?}");
    let namespace = peers[0]
        .namespace_selector
        .clone()
        .unwrap()
        .match_labels
        .unwrap();
    let scraper = peers[0].pod_selector.clone().unwrap().match_labels.unwrap();
    assert_eq!(
        namespace
            .get("kubernetes.io/metadata.name")
            .map(String::as_str),
        Some("monitoring")
    );
    assert_eq!(
        scraper.get("app.kubernetes.io/name").map(String::as_str),
        Some("prometheus")
    );

    // The component binds that namespace's Prometheus to the reader role, which
    // grants /metrics and nothing else, and scrapes the Service's metrics port over
    // HTTPS with its token.
    let binding = rendered
        .iter()
        .find(|d| {
            d["kind"] == "ClusterRoleBinding" && d["roleRef"]["name"] == "nodefence-metrics-reader"
        })
        .expect("components/prometheus binds the reader role");
    assert_eq!(binding["roleRef"]["name"], "nodefence-metrics-reader");
    assert_eq!(binding["subjects"][0]["namespace"], "monitoring");
    let reader = rendered
        .iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "nodefence-metrics-reader")
        .unwrap();
    assert_eq!(
        reader["rules"],
        serde_json::json!([{ "nonResourceURLs": ["/metrics"], "verbs": ["get"] }])
    );
    let service = one("Service");
    let service_port = &service["spec"]["ports"][0];
    assert_eq!(service_port["targetPort"], "metrics");
    let monitor = one("ServiceMonitor");
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], service_port["name"]);
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(endpoint["path"], "/metrics");
    assert_eq!(
        endpoint["bearerTokenFile"],
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    );
    for (k, v) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(
            &service["metadata"]["labels"][k], v,
            "the monitor selects the Service"
        );
    }
}

#[test]
fn the_kubevirt_component_mounts_the_kubeconfig_and_the_infra_role_is_least_privilege() {
    let Some(kubectl) = kubectl() else { return };
    let rendered = render_dirs(&kubectl, &["kubevirt"]);
    assert_eq!(
        grants_of(&rendered),
        table_grants(Component::Base),
        "the component grants nothing in nodefence's cluster"
    );
    let deployment = rendered
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("the Deployment");
    let spec = &deployment["spec"]["template"]["spec"];
    let volume = spec["volumes"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == "kubevirt"))
        .expect("the kubevirt volume");
    assert_eq!(volume["secret"]["secretName"], "nodefence-kubevirt");
    let mount = spec["containers"][0]["volumeMounts"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["name"] == "kubevirt"))
        .expect("the kubevirt mount");
    assert_eq!(mount["readOnly"], true);
    // The path the inventory example and the operator guide name.
    let path = format!("{}/kubeconfig", mount["mountPath"].as_str().unwrap());
    assert_eq!(path, "/etc/nodefence/kubevirt/kubeconfig");
    for doc in ["config/inventory.toml", "docs/operator-guide.md"] {
        let text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(doc)).unwrap();
        assert!(text.contains(&path), "{doc} names {path}");
    }

    // The infrastructure side: exactly what src/power/kubevirt calls, in one namespace.
    let infra = std::process::Command::new(&kubectl)
        .arg("kustomize")
        .arg(deploy_dir().join("kubevirt-infra"))
        .output()
        .unwrap();
    assert!(
        infra.status.success(),
        "{}",
        String::from_utf8_lossy(&infra.stderr)
    );
    let docs: Vec<Value> =
        serde_saphyr::from_multiple::<Value>(&String::from_utf8_lossy(&infra.stdout))
            .unwrap()
            .into_iter()
            .filter(|d| !d.is_null())
            .collect();
    let kinds: BTreeSet<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        BTreeSet::from(["Role", "RoleBinding", "Secret", "ServiceAccount"]),
        "namespaced objects only: no ClusterRole"
    );
    let role = docs.iter().find(|d| d["kind"] == "Role").unwrap();
    let mut rules = BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        for group in rule["apiGroups"].as_array().unwrap() {
            for resource in rule["resources"].as_array().unwrap() {
                for verb in rule["verbs"].as_array().unwrap() {
                    rules.insert(format!(
                        "{} {}/{}",
                        verb.as_str().unwrap(),
                        group.as_str().unwrap(),
                        resource.as_str().unwrap()
                    ));
                }
            }
        }
    }
    let want: BTreeSet<String> = [
        "get kubevirt.io/virtualmachines",
        "patch kubevirt.io/virtualmachines",
        "get kubevirt.io/virtualmachineinstances",
        "update subresources.kubevirt.io/virtualmachines/stop",
        "update subresources.kubevirt.io/virtualmachines/start",
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    assert_eq!(rules, want);
    let binding = docs.iter().find(|d| d["kind"] == "RoleBinding").unwrap();
    assert_eq!(binding["subjects"][0]["name"], "nodefence-fencer");
    let secret = docs.iter().find(|d| d["kind"] == "Secret").unwrap();
    assert_eq!(
        secret["metadata"]["annotations"]["kubernetes.io/service-account.name"],
        "nodefence-fencer"
    );
    let namespaces: BTreeSet<&str> = docs
        .iter()
        .filter_map(|d| d["metadata"]["namespace"].as_str())
        .collect();
    assert_eq!(namespaces.len(), 1, "{namespaces:?}");
}
