//! `driver = "kubevirt"`: the kubeconfig checked when the config loads (never quoted:
//! it holds a token), the VM's namespace and name, and the errors, each at its
//! file:line and naming the field.

use super::*;
use crate::config::{KubevirtTarget, PowerSource};

const TOKEN: &str = "kv-token-do-not-print-1234";

fn kubeconfig(namespace: Option<&str>) -> String {
    let ns = namespace.map_or(String::new(), |n| format!("    namespace: {n}\n"));
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: infra\nclusters:\n- name: infra\n  \
         cluster:\n    server: https://infra.example.com:6443\ncontexts:\n- name: infra\n  \
         context:\n    cluster: infra\n    user: fencer\n{ns}- name: other\n  context:\n    \
         cluster: nowhere\n    user: fencer\nusers:\n- name: fencer\n  user:\n    token: {TOKEN}\n"
    )
}

fn kubevirt_node(extra: &[&str]) -> String {
    let mut l = vec![
        "[nodes.worker-1]",                  // 1
        "driver = \"kubevirt\"",             // 2
        "kubeconfig = \"infra.kubeconfig\"", // 3
    ];
    l.extend_from_slice(extra);
    lines(&l)
}

fn target(config: &Config) -> KubevirtTarget {
    match &config.inventory.nodes["worker-1"].power {
        PowerSource::Kubevirt(t) => t.clone(),
        other => panic!("a kubevirt node, got {other:?}"),
    }
}

#[test]
fn the_vm_is_the_node_in_the_kubeconfigs_namespace_unless_written() {
    let f = Fixture::new();
    f.write("infra.kubeconfig", &kubeconfig(Some("guests")));
    let config = f.ok(&kubevirt_node(&[]));
    let t = target(&config);
    assert_eq!(
        (t.namespace.as_str(), t.vm.as_str()),
        ("guests", "worker-1")
    );
    assert_eq!(t.context, None);
    assert!(t.kubeconfig.ends_with("infra.kubeconfig"));
    let node = &config.inventory.nodes["worker-1"];
    assert!(
        node.policy.require_identity,
        "identity is required by default"
    );
    assert!(!node.needs_node_identity());

    let config = f.ok(&kubevirt_node(&[
        "namespace = \"tenant-a\"",
        "vm = \"capk-{node}\"",
    ]));
    let t = target(&config);
    assert_eq!(
        (t.namespace.as_str(), t.vm.as_str()),
        ("tenant-a", "capk-worker-1")
    );

    // No namespace anywhere: `default`, as kubectl.
    f.write("infra.kubeconfig", &kubeconfig(None));
    assert_eq!(target(&f.ok(&kubevirt_node(&[]))).namespace, "default");
}

#[test]
fn a_kubeconfig_that_cannot_serve_is_an_error_at_its_line_without_its_content() {
    let f = Fixture::new();
    // Missing.
    let errs = f.errors(&kubevirt_node(&[]));
    let e = find(&errs, "does not exist");
    assert_at(e, Some("worker-1"), 3, "kubeconfig");
    // Not a kubeconfig: the parser's message could quote the token.
    f.write(
        "infra.kubeconfig",
        &format!("token: {TOKEN}\n\tclusters: [\n"),
    );
    let errs = f.errors(&kubevirt_node(&[]));
    assert_at(
        find(&errs, "not a valid kubeconfig"),
        Some("worker-1"),
        3,
        "kubeconfig",
    );
    // A context it does not have, named with the ones it has.
    f.write("infra.kubeconfig", &kubeconfig(Some("guests")));
    let errs = f.errors(&kubevirt_node(&["kubeconfig_context = \"prod\""]));
    let e = find(&errs, "no context \"prod\"");
    assert_eq!(e.line, Some(3), "{e}");
    assert!(
        e.help
            .as_deref()
            .is_some_and(|h| h.contains("infra, other")),
        "{e}"
    );
    // A context whose cluster is not in the file.
    let errs = f.errors(&kubevirt_node(&["kubeconfig_context = \"other\""]));
    find(&errs, "has no server");
    for errs in [
        f.errors(&kubevirt_node(&["kubeconfig_context = \"other\""])),
        f.errors(&kubevirt_node(&["kubeconfig_context = \"prod\""])),
    ] {
        for e in &errs {
            assert!(!e.to_string().contains(TOKEN), "{e}");
            assert!(!e.help.clone().unwrap_or_default().contains(TOKEN), "{e}");
        }
    }
}

#[test]
fn names_are_checked_and_other_drivers_fields_refused() {
    let f = Fixture::new();
    f.write("infra.kubeconfig", &kubeconfig(Some("guests")));
    let errs = f.errors(&kubevirt_node(&["namespace = \"Guests_A\""])); // 4
    assert_at(
        find(&errs, "not a Kubernetes namespace"),
        Some("worker-1"),
        4,
        "namespace",
    );
    let errs = f.errors(&kubevirt_node(&["vm = \"{host}-vm\""])); // 4
    assert_at(find(&errs, "placeholder"), Some("worker-1"), 4, "vm");
    let errs = f.errors(&kubevirt_node(&["vm = \"Worker 1\""]));
    assert_at(find(&errs, "VirtualMachine"), Some("worker-1"), 4, "vm");
    let errs = f.errors(&kubevirt_node(&["endpoint = \"https://x\""]));
    assert_eq!(find(&errs, "endpoint").line, Some(4));
    let errs = f.errors(&lines(&["[nodes.worker-1]", "driver = \"kubevirt\""]));
    assert_at(
        find(&errs, "needs `kubeconfig`"),
        Some("worker-1"),
        1,
        "kubeconfig",
    );
    let errs = f.errors(&lines(&[
        "[nodes.r-1]",
        "driver = \"redfish\"",
        "endpoint = \"https://r-1-bmc\"",
        "username = \"fence\"",
        "password_file = \"secrets/bmc-password\"",
        "kubeconfig = \"infra.kubeconfig\"", // 6
    ]));
    assert_eq!(find(&errs, "kubeconfig").line, Some(6));
}

#[test]
fn two_nodes_on_one_vm_are_refused() {
    let f = Fixture::new();
    f.write("infra.kubeconfig", &kubeconfig(Some("guests")));
    let errs = f.errors(&lines(&[
        "[groups.guests]",
        "driver = \"kubevirt\"",
        "kubeconfig = \"infra.kubeconfig\"",
        "[nodes.worker-1]",
        "group = \"guests\"",
        "vm = \"shared\"",
        "[nodes.worker-2]",
        "group = \"guests\"",
        "vm = \"shared\"",
    ]));
    let e = find(&errs, "VirtualMachine shared");
    assert!(
        e.message.contains("worker-1") || e.message.contains("worker-2"),
        "{e}"
    );
}
