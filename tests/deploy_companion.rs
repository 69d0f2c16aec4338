//! `deploy/components/companion`, rendered by the real `kubectl kustomize`: the
//! DaemonSet's and the Deployment's arguments parse with the real CLI and agree with
//! each other (the name and port the companions dial are the headless Service's and
//! the listener's; the projected token's audience and ServiceAccount are the ones the
//! listener accepts), the Service and the NetworkPolicy open exactly that port to the
//! companions, and the companions get exactly one RBAC grant, `get` on Nodes, with
//! their API token mounted (each reads its own Node when the leader is silent).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::deploy_common::kubectl;
use crate::deploy_manifests::render_dirs;

use clap::Parser;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use nodefence::cli::{Cli, Command};
use nodefence_mocks::kube::authz::{Attributes, Grant, Policy, Rule};
use serde_json::Value;

fn one<T: serde::de::DeserializeOwned>(docs: &[Value], kind: &str, name: &str) -> T {
    let doc = docs
        .iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"));
    serde_json::from_value(doc.clone()).unwrap_or_else(|e| panic!("{kind} {name}: {e}"))
}

fn argv(args: &[String]) -> Cli {
    let argv = std::iter::once("nodefence".to_string()).chain(args.iter().cloned());
    Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_companion_component_renders_and_both_sides_agree() {
    let Some(kubectl) = kubectl() else { return };
    let docs = render_dirs(&kubectl, &["companion"]);

    let deployment: Deployment = one(&docs, "Deployment", "nodefence");
    let pod = deployment.spec.clone().unwrap().template.spec.unwrap();
    let daemon = &pod.containers[0];
    let Command::Run(run) = argv(daemon.args.as_ref().unwrap()).command else {
        panic!("the Deployment runs `run`")
    };
    let listen = run.companion_listen.expect("--companion-listen");
    assert_eq!(listen.port(), 9440);
    let mounted = |c: &k8s_openapi::api::core::v1::Container, path: &str| {
        c.volume_mounts
            .iter()
            .flatten()
            .any(|m| std::path::Path::new(path).starts_with(&m.mount_path))
    };
    for file in [&run.metrics_cert_file, &run.metrics_key_file] {
        let file = file
            .as_ref()
            .expect("the certificate the companions verify");
        assert!(mounted(daemon, &file.display().to_string()), "{file:?}");
    }
    let ports: Vec<(String, i32, String)> = daemon
        .ports
        .iter()
        .flatten()
        .map(|p| {
            (
                p.name.clone().unwrap_or_default(),
                p.container_port,
                p.protocol.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        ports.contains(&("companions".into(), 9440, "TCP".into())),
        "{ports:?}"
    );
    assert!(
        ports.contains(&("beats".into(), 9440, "UDP".into())),
        "{ports:?}"
    );

    let set: DaemonSet = one(&docs, "DaemonSet", "nodefence-companion");
    let namespace = set.metadata.namespace.clone().unwrap();
    assert_eq!(Some(namespace.clone()), deployment.metadata.namespace);
    let set_spec = set.spec.unwrap();
    let companion_labels = set_spec.selector.match_labels.clone();
    let spec = set_spec.template.spec.unwrap();
    assert_eq!(
        spec.service_account_name.as_deref(),
        Some(run.companion_service_account.as_str()),
        "the ServiceAccount the listener accepts"
    );
    assert_eq!(
        spec.automount_service_account_token,
        Some(true),
        "the API token, for reading its Node"
    );
    assert!(
        spec.tolerations
            .iter()
            .flatten()
            .any(|t| t.operator.as_deref() == Some("Exists") && t.key.is_none()),
        "on every node, whatever its taints"
    );
    let companion = &spec.containers[0];
    let Command::Companion(args) = argv(companion.args.as_ref().unwrap()).command else {
        panic!("the DaemonSet runs `companion`")
    };
    assert_eq!(
        args.watchdog_device.as_deref(),
        Some(std::path::Path::new("/dev/watchdog")),
        "the node's hardware watchdog"
    );
    assert!(!args.allow_softdog, "softdog refused");
    // The peers: a headless Service of every companion, on the port they hear on.
    match &args.peers {
        Some(nodefence::companion::peers::PeerSource::Name { host, port }) => {
            assert_eq!(
                host.as_str(),
                format!("nodefence-companion-peers.{namespace}.svc")
            );
            assert_eq!(*port, args.peer_listen.port());
        }
        other => panic!("--peers names the peers' Service: {other:?}"),
    }
    let peers: Service = one(&docs, "Service", "nodefence-companion-peers");
    let peers = peers.spec.unwrap();
    assert_eq!(peers.cluster_ip.as_deref(), Some("None"));
    assert_eq!(peers.publish_not_ready_addresses, Some(true));
    assert_eq!(peers.selector, companion_labels);
    let port = &peers.ports.unwrap()[0];
    assert_eq!(
        (port.port, port.protocol.as_deref()),
        (i32::from(args.peer_listen.port()), Some("UDP"))
    );
    let named = spec.containers[0]
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some("peers"))
        .expect("the companion's peers port");
    assert_eq!(
        (named.container_port, named.protocol.as_deref()),
        (i32::from(args.peer_listen.port()), Some("UDP"))
    );
    let only_companions: NetworkPolicy = one(&docs, "NetworkPolicy", "nodefence-companion");
    let rules = only_companions.spec.unwrap().ingress.unwrap();
    assert_eq!(rules.len(), 1);
    assert!(rules[0].from.iter().flatten().all(|f| {
        f.namespace_selector.is_none()
            && f.pod_selector.as_ref().and_then(|s| s.match_labels.clone()) == companion_labels
    }));
    assert_eq!(args.kubeconfig, None, "in-cluster: the mounted token");
    assert_eq!(
        args.boot_id_file,
        std::path::Path::new(nodefence::companion::api::BOOT_ID_FILE)
    );
    let service: Service = one(&docs, "Service", "nodefence-companions");
    assert_eq!(
        args.nodefence.host_str(),
        Some(format!("nodefence-companions.{namespace}.svc").as_str())
    );
    assert_eq!(args.nodefence.port(), Some(listen.port()));
    let svc = service.spec.unwrap();
    assert_eq!(
        svc.cluster_ip.as_deref(),
        Some("None"),
        "headless: every replica"
    );
    assert_eq!(
        svc.selector,
        deployment
            .spec
            .as_ref()
            .map(|s| s.selector.match_labels.clone().unwrap())
    );
    let mut targets: Vec<(String, String)> = svc
        .ports
        .unwrap()
        .into_iter()
        .map(|p| {
            assert_eq!(p.port, 9440);
            let target = match p.target_port.unwrap() {
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s,
                other => panic!("{other:?}"),
            };
            (target, p.protocol.unwrap())
        })
        .collect();
    targets.sort();
    assert_eq!(
        targets,
        [
            ("beats".into(), "UDP".into()),
            ("companions".into(), "TCP".into())
        ]
    );
    // The projected token: its audience, where --token-file reads it.
    let token = spec
        .volumes
        .iter()
        .flatten()
        .find_map(|v| {
            let source = v.projected.as_ref()?.sources.as_ref()?.first()?;
            source
                .service_account_token
                .clone()
                .map(|t| (v.name.clone(), t))
        })
        .expect("a projected token");
    assert_eq!(
        token.1.audience.as_deref(),
        Some(nodefence::heartbeat::hello::AUDIENCE)
    );
    let mount = companion
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == token.0)
        .unwrap();
    assert_eq!(
        args.token_file,
        std::path::Path::new(&mount.mount_path).join(&token.1.path)
    );
    assert!(mounted(
        companion,
        &args.ca_file.unwrap().display().to_string()
    ));
    // The kept state: the pod's own memory-backed emptyDir (outlives a crash of the
    // process, not the pod; never on the node's disk: it holds the node's private key).
    let state_dir = args.state_dir.clone().expect("--state-dir");
    let state_mount = companion
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| std::path::Path::new(&m.mount_path) == state_dir)
        .expect("--state-dir is mounted");
    assert_ne!(state_mount.read_only, Some(true));
    let state_volume = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == state_mount.name)
        .unwrap();
    assert_eq!(
        state_volume
            .empty_dir
            .as_ref()
            .and_then(|e| e.medium.as_deref()),
        Some("Memory"),
        "{state_volume:?}"
    );

    let policy: NetworkPolicy = one(&docs, "NetworkPolicy", "nodefence");
    let rule = policy
        .spec
        .unwrap()
        .ingress
        .unwrap()
        .into_iter()
        .find(|r| {
            r.from.iter().flatten().any(|f| {
                f.pod_selector
                    .as_ref()
                    .and_then(|s| s.match_labels.as_ref())
                    .and_then(|l| l.get("app.kubernetes.io/name"))
                    .map(String::as_str)
                    == Some("nodefence-companion")
            })
        })
        .expect("the companions may reach the listener");
    assert_eq!(rule.ports.as_ref().map(Vec::len), Some(2));

    // Exactly one grant for the companions: get nodes, cluster-wide (each its own).
    let policy = Policy::for_service_account(&docs, &namespace, "nodefence-companion");
    assert_eq!(
        policy.grants,
        [Grant {
            namespace: None,
            rule: Rule {
                api_groups: vec![String::new()],
                resources: vec!["nodes".into()],
                verbs: vec!["get".into()],
                ..Default::default()
            },
        }],
        "get nodes, nothing else"
    );
    let bindings: Vec<&Value> = docs
        .iter()
        .filter(|d| {
            d["subjects"]
                .as_array()
                .is_some_and(|s| s.iter().any(|s| s["name"] == "nodefence-companion"))
        })
        .collect();
    assert_eq!(bindings.len(), 1, "{bindings:?}");
    assert_eq!(bindings[0]["kind"], "ClusterRoleBinding");
    assert_eq!(bindings[0]["subjects"][0]["namespace"], namespace.as_str());
    // What the daemon's start-up check asks for is what is granted.
    let check = nodefence::cluster::access::COMPANION;
    assert!(policy.allows(&Attributes {
        verb: check.verb.into(),
        group: check.group.into(),
        resource: check.resource.into(),
        namespace: None,
        name: Some("worker-1".into()),
    }));
    assert_eq!(
        run.companion_service_account, "nodefence-companion",
        "the ServiceAccount the daemon checks"
    );
}

/// The base with the companion component, applied by the real `kubectl` to fake-kube
/// (as `kubectl apply -k` would, twice: the second is a no-op patch), and listed back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_the_base_with_the_companion_component() {
    let Some(kubectl) = kubectl() else { return };
    nodefence::tls::install_crypto_provider();
    let kube = nodefence_mocks::kube::FakeKube::builder()
        .tls(true)
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    kube.write_kubeconfig(&kubeconfig).unwrap();
    let docs = render_dirs(&kubectl, &["companion"]);
    // A stream of documents (JSON is YAML), as `kubectl kustomize | kubectl apply -f -`.
    let list: String = docs.iter().map(|d| format!("---\n{d}\n")).collect();
    let run = |args: &[&str], stdin: Option<String>| {
        use std::io::Write as _;
        let mut child = std::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        input
            .write_all(stdin.unwrap_or_default().as_bytes())
            .unwrap();
        drop(input);
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let applied = tokio::task::block_in_place(|| run(&["apply", "-f", "-"], Some(list.clone())));
    for object in [
        "daemonset.apps/nodefence-companion created",
        "serviceaccount/nodefence-companion created",
        "clusterrole.rbac.authorization.k8s.io/nodefence-companion created",
        "clusterrolebinding.rbac.authorization.k8s.io/nodefence-companion created",
        "service/nodefence-companions created",
        "service/nodefence-companion-peers created",
        "networkpolicy.networking.k8s.io/nodefence-companion created",
        "deployment.apps/nodefence created",
        "networkpolicy.networking.k8s.io/nodefence created",
    ] {
        assert!(applied.contains(object), "{object}: {applied}");
    }
    let again = tokio::task::block_in_place(|| run(&["apply", "-f", "-"], Some(list.clone())));
    for object in [
        "daemonset.apps/nodefence-companion unchanged",
        "clusterrole.rbac.authorization.k8s.io/nodefence-companion unchanged",
        "clusterrolebinding.rbac.authorization.k8s.io/nodefence-companion unchanged",
    ] {
        assert!(again.contains(object), "{object}: {again}");
    }
    let listed = tokio::task::block_in_place(|| {
        run(
            &[
                "get",
                "daemonsets,services,serviceaccounts",
                "-n",
                "nodefence",
                "-o",
                "name",
            ],
            None,
        )
    });
    for name in [
        "daemonset.apps/nodefence-companion",
        "service/nodefence-companions",
        "serviceaccount/nodefence-companion",
    ] {
        assert!(listed.lines().any(|l| l == name), "{name}: {listed}");
    }
    // What the API server stored is the DaemonSet rendered.
    let stored = kube.store().get(
        nodefence_mocks::kube::resources::DAEMON_SETS,
        Some("nodefence"),
        "nodefence-companion",
    );
    assert!(stored.is_ok_and(
        |d| d["spec"]["template"]["spec"]["serviceAccountName"] == "nodefence-companion"
    ));
}
