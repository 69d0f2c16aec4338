//! `nodefence validate`: load everything, print every problem and warning, exit 0 or 3.
//!
//! With `--cluster` (or `--kubeconfig`), also the BMC identity cross-check
//! ([`crate::identity`]): every inventory node's power source is read and the machine
//! it reports is compared with the Node's systemUUID. A mismatch is a problem (the
//! inventory points the node at another machine: exit 3); a node that cannot be
//! verified (no systemUUID, a placeholder UUID, an unreachable BMC, a node missing
//! from the cluster) is a warning. A cluster that cannot be read is exit 1.
//!
//! A valid configuration is summed up in one line (nodes per primary driver, and the
//! fallback methods per driver), followed by one line per node with a fencing
//! topology listing every level in order: driver and endpoint or agent, never a
//! secret ([`describe_source`]).

use std::collections::BTreeMap;
use std::path::Path;

use super::cluster_args::{ClusterArgs, IdentityArgs};
use super::exit;
use crate::config::{Config, NodeTarget, PowerSource};
use crate::identity::{IdentityCheck, NodeIdentity};

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// The BMC identity cross-check against the cluster's Nodes.
    #[command(flatten)]
    pub identity: IdentityArgs,
    /// Cluster access for `--cluster` (and for BMC passwords in Kubernetes Secrets).
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `nodefence validate [--cluster]`.
pub async fn run_with(config_path: &Path, args: &ValidateArgs) -> u8 {
    let mut config = match load_and_report(config_path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if !args.identity.wanted(&args.cluster) {
        return exit::OK;
    }
    let metal3 = super::cluster_args::read_metal3_hosts(&mut config, &args.cluster).await;
    if metal3.is_err() {
        return exit::FAILED;
    }
    if config.agent.metal3.hosts {
        print!("{}", origin_lines(&config));
    }
    if let Err(code) = super::cluster_args::read_secrets(&mut config, &args.cluster, &[]).await {
        return code;
    }
    let nodes = match super::cluster_args::node_identities(&args.cluster).await {
        Ok(n) => n,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::FAILED;
        }
    };
    let report = identity_report(&config, &nodes, metal3.as_ref()).await;
    for warning in &report.warnings {
        eprintln!("warning: {warning}");
    }
    for problem in &report.problems {
        eprintln!("{problem}");
    }
    if report.problems.is_empty() {
        println!("identity cross-check: {}", report.summary());
        exit::OK
    } else {
        eprintln!(
            "{}: {} problem(s) found in the identity cross-check ({}); nothing was changed",
            config_path.display(),
            report.problems.len(),
            report.summary()
        );
        exit::CONFIG
    }
}

/// Loads the configuration, printing its warnings and the OK report, or every problem.
fn load_and_report(config_path: &Path) -> Result<Config, u8> {
    match crate::config::load(config_path) {
        Ok(config) => {
            for warning in &config.warnings {
                eprintln!("warning: {warning}");
            }
            print!("{}", ok_report(config_path, &config));
            Ok(config)
        }
        Err(errors) => {
            eprintln!("{errors}");
            eprintln!(
                "{}: {} problem(s) found; nothing was changed",
                config_path.display(),
                errors.0.len()
            );
            Err(exit::CONFIG)
        }
    }
}

/// The OK line (nodes per primary driver, fallback methods per driver), then one
/// line per node with a fencing topology: its levels, in order.
fn ok_report(config_path: &Path, config: &Config) -> String {
    let count = |drivers: BTreeMap<&str, usize>| -> String {
        drivers
            .iter()
            .map(|(d, n)| format!("{n} {d}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut primary = BTreeMap::<&str, usize>::new();
    let mut fallback = BTreeMap::<&str, usize>::new();
    for node in config.inventory.nodes.values() {
        *primary.entry(node.power.driver_name()).or_default() += 1;
        for source in &node.fallback {
            *fallback.entry(source.driver_name()).or_default() += 1;
        }
    }
    let fallbacks = if fallback.is_empty() {
        String::new()
    } else {
        format!("; fallback methods: {}", count(fallback))
    };
    let nodes = match (config.inventory.nodes.len(), config.agent.metal3.hosts) {
        (0, true) => "0 nodes in files; BareMetalHosts add theirs with cluster access".to_string(),
        (n, _) => format!(
            "{n} nodes: {}{fallbacks}; inventory {}",
            count(primary),
            config.inventory_path.display()
        ),
    };
    let mut out = format!("{}: OK ({nodes})\n", config_path.display());
    for node in config.inventory.nodes.values() {
        if !node.fallback.is_empty() {
            out.push_str(&format!(
                "  node \"{}\": {}\n",
                node.name,
                levels(node).join(" → ")
            ));
        }
    }
    if config.agent.metal3.hosts {
        out.push_str(&format!(
            "metal3: the BareMetalHosts of namespace(s) {} add their nodes with cluster access \
             (`nodefence validate --cluster` lists them); an inventory entry wins\n",
            config.agent.metal3.namespaces.join(", ")
        ));
    }
    out.push_str(&deploy_line(config));
    out
}

/// Where each node's entry came from, for the nodes Metal3 is part of: built from a
/// BareMetalHost, or written in the inventory file for a machine whose power Metal3
/// manages.
fn origin_lines(config: &Config) -> String {
    let mut out = String::new();
    for node in config.inventory.nodes.values() {
        let power = match &node.metal3_host {
            Some(host) => format!("; power through Metal3 (BareMetalHost {host})"),
            None => String::new(),
        };
        if node.metal3_host.is_none()
            && !matches!(node.origin, crate::config::Origin::BareMetalHost(_))
        {
            continue;
        }
        out.push_str(&format!(
            "  node \"{}\": {} → {}{power}\n",
            node.name,
            node.origin,
            levels(node).join(" → ")
        ));
    }
    out
}

/// What `deploy/` must grant this configuration: the base alone, or the base and
/// these components (with the Secrets to name in the Secrets component).
fn deploy_line(config: &Config) -> String {
    use crate::cluster::access::{self, Component};
    let components = access::components(config);
    // KubeVirt nodes need no grant here, but their kubeconfig mounted, and an
    // identity in the infrastructure cluster.
    let kubevirt = config
        .inventory
        .nodes
        .values()
        .any(|n| n.sources().any(|s| matches!(s, PowerSource::Kubevirt(_))));
    let kubevirt_note = "; KubeVirt nodes: add components/kubevirt (it mounts the Secret \
                         nodefence-kubevirt holding the infrastructure cluster's kubeconfig) and \
                         apply deploy/kubevirt-infra in the infrastructure cluster";
    if components.is_empty() {
        return if kubevirt {
            format!(
                "deploy: the base of deploy/ grants everything this configuration needs in this \
                 cluster{kubevirt_note}\n"
            )
        } else {
            "deploy: the base of deploy/ grants everything this configuration needs\n".to_string()
        };
    }
    let mut line = format!(
        "deploy: add the Kustomize component(s) {} to deploy/'s base",
        components
            .iter()
            .map(|c| format!("components/{}", c.dir()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if components.contains(&Component::SecretCredentials) {
        let secrets: Vec<String> = access::secrets(config).into_iter().collect();
        line.push_str(&format!(
            "; in components/secret-credentials, name the Secret(s) {} (a bare name is in \
             nodefence's namespace)",
            secrets.join(", ")
        ));
    }
    if kubevirt {
        line.push_str(kubevirt_note);
    }
    line.push('\n');
    line
}

/// A node's power methods in the order they are tried, numbered from 1 (the
/// primary): `1. redfish https://db-1-bmc (system 1)`, `2. exec ...`.
pub(super) fn levels(node: &NodeTarget) -> Vec<String> {
    node.sources()
        .enumerate()
        .map(|(i, source)| format!("{}. {}", i + 1, describe_source(source)))
        .collect()
}

/// One power method for humans: its driver and where it points (endpoint, address,
/// instance, or the agent and the options that select its device and outlet). Never
/// a credential: passwords, user names and the other agent options are left out.
pub(super) fn describe_source(source: &PowerSource) -> String {
    match source {
        PowerSource::Redfish(t) => {
            let base = t.endpoint.as_str().trim_end_matches('/');
            match &t.system_id {
                Some(id) => format!("redfish {base} (system {id})"),
                None => format!("redfish {base}"),
            }
        }
        PowerSource::Ipmi(t) => format!("ipmi {}:{}", t.address, t.port),
        PowerSource::Vsphere(t) => {
            format!(
                "vsphere {} ({})",
                t.endpoint.as_str().trim_end_matches('/'),
                t.vm
            )
        }
        PowerSource::Kubevirt(t) => match &t.context {
            Some(context) => format!(
                "kubevirt VirtualMachine {}/{} (kubeconfig {}, context {context})",
                t.namespace,
                t.vm,
                t.kubeconfig.display()
            ),
            None => format!(
                "kubevirt VirtualMachine {}/{} (kubeconfig {})",
                t.namespace,
                t.vm,
                t.kubeconfig.display()
            ),
        },
        PowerSource::Aws(t) => {
            let mut out = "aws".to_string();
            if let Some(url) = &t.endpoint {
                out.push_str(&format!(" {}", url.as_str().trim_end_matches('/')));
            }
            if let Some(region) = &t.region {
                out.push_str(&format!(" {region}"));
            }
            match (&t.instance_id, &t.instance_tag) {
                (Some(id), _) => out.push_str(&format!(" (instance {id})")),
                (None, Some((k, v))) => out.push_str(&format!(" (tag {k}={v})")),
                (None, None) => out.push_str(" (instance from the Node's providerID)"),
            }
            out
        }
        PowerSource::Exec(t) => {
            let mut out = format!("exec {}", t.agent.display());
            for wanted in ["ip", "ipaddr", "ipport", "plug", "port"] {
                let found = t
                    .options
                    .iter()
                    .find(|(k, _)| k.to_ascii_lowercase().replace('_', "-") == wanted);
                if let Some((key, value)) = found {
                    out.push_str(&format!(" {key}={value}"));
                }
            }
            out
        }
    }
}

/// The outcome of the identity cross-check of every inventory node.
#[derive(Debug, Default)]
struct IdentityReport {
    /// Mismatches, formatted like configuration errors (file, node, message, help).
    problems: Vec<String>,
    /// Nodes that could not be verified, one sentence each.
    warnings: Vec<String>,
    matched: usize,
}

impl IdentityReport {
    fn summary(&self) -> String {
        format!(
            "{} node(s) match, {} mismatch, {} not verified",
            self.matched,
            self.problems.len(),
            self.warnings.len()
        )
    }
}

/// Reads every inventory node's power source (bounded concurrency) and checks each
/// machine identity against `nodes` (node name → what the cluster says).
async fn identity_report(
    config: &Config,
    nodes: &BTreeMap<String, NodeIdentity>,
    metal3: Result<&Option<kube::Client>, &()>,
) -> IdentityReport {
    let concurrency = config.agent.power.max_concurrent_requests;
    let factory = super::cluster_args::factory(config, metal3);
    let targets: Vec<_> = config.inventory.nodes.values().collect();
    let rows = super::status::query_all(&factory, &targets, concurrency, Some(nodes)).await;
    let mut report = IdentityReport::default();
    for row in rows {
        if let Some(e) = &row.error {
            report.warnings.push(format!(
                "node \"{}\": identity not verified: its power source could not be read ({}: {})",
                row.node, e.kind, e.message
            ));
            continue;
        }
        let check =
            super::status::cross_check(&row.node, row.machine_identity.as_ref(), Some(nodes));
        match &check {
            IdentityCheck::Match(_) => report.matched += 1,
            IdentityCheck::Mismatch { .. } => report.problems.push(format!(
                "{}: node \"{}\": {}\n  help: check this node's endpoint and system_id; \
                 nodefence will not release the node's volumes while its power source \
                 reports another machine",
                config.inventory_path.display(),
                row.node,
                check.describe()
            )),
            IdentityCheck::Unknown(_) => {
                report
                    .warnings
                    .push(format!("node \"{}\": {}", row.node, check.describe()))
            }
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodefence_mocks::kube::FakeKube;
    use nodefence_mocks::kube::resources::NODES;
    use nodefence_mocks::redfish::{MockRedfish, MockRedfishHandle, Profile, SystemSpec};

    const U1: &str = "4c4c4544-0031-3510-8052-b2c04f503131";
    const U2: &str = "4c4c4544-0032-3510-8052-b2c04f503132";
    const OTHER: &str = "4c4c4544-0099-3510-8052-b2c04f503199";

    async fn bmc() -> MockRedfishHandle {
        MockRedfish::builder()
            .profile(Profile::MultiSystem)
            .system(SystemSpec::new("Blade1").uuid(U1))
            .system(SystemSpec::new("Blade2").uuid(U2))
            .system(SystemSpec::new("Blade3").uuid(""))
            .credentials("fence", "pw")
            .start()
            .await
            .unwrap()
    }

    fn write_config(dir: &Path, bmc: &MockRedfishHandle) -> std::path::PathBuf {
        std::fs::write(dir.join("bmc-password"), "pw\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(
                dir.join("bmc-password"),
                std::fs::Permissions::from_mode(0o600),
            )
            .unwrap();
        }
        std::fs::write(
            dir.join("nodefence.toml"),
            "inventory = \"inventory.toml\"\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("inventory.toml"),
            format!(
                "[defaults]\ndriver = \"redfish\"\n\
                 endpoint = \"{}\"\nusername = \"fence\"\npassword_file = \"bmc-password\"\n\
                 operation_timeout = \"4s\"\nretries = 0\n\n\
                 [nodes.worker-1]\nsystem_id = \"Blade1\"\n[nodes.worker-2]\nsystem_id = \"Blade2\"\n\
                 [nodes.worker-3]\nsystem_id = \"Blade3\"\n",
                bmc.base_url()
            ),
        )
        .unwrap();
        dir.join("nodefence.toml")
    }

    fn node(name: &str, uuid: &str) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name},
            "status": {"nodeInfo": {
                "systemUUID": uuid, "machineID": "", "bootID": "", "kernelVersion": "",
                "osImage": "", "containerRuntimeVersion": "", "kubeletVersion": "v1.33.0",
                "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"
            }}
        })
    }

    #[test]
    fn the_ok_report_lists_every_level_of_a_topology_without_secrets() {
        let dir = tempfile::tempdir().unwrap();
        let agent = dir.path().join("fence_test");
        std::fs::write(&agent, "#!/bin/sh\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::write(
            dir.path().join("nodefence.toml"),
            "inventory = \"inventory.toml\"\n[security]\nallow_inline_passwords = true\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("inventory.toml"),
            "[defaults]\ndriver = \"redfish\"\nusername = \"fence\"\npassword = \"rf-Secret-1\"\n\
             [nodes.db-1]\nendpoint = \"https://db-1-bmc\"\nsystem_id = \"1\"\n\
             fallback = [\n\
             { driver = \"exec\", agent = \"fence_test\", options = { ip = \"pdu-1\", plug = \"7\", \
             community = \"pdu-community\" }, username = \"apc\", password = \"pdu-Secret-2\" },\n\
             { driver = \"ipmi\", address = \"10.0.9.21\", username = \"admin\", password = \"ipmi-Secret-3\" },\n\
             { driver = \"aws\", region = \"eu-west-1\", instance_id = \"i-0123456789abcdef0\" },\n\
             ]\n\
             [nodes.db-2]\nendpoint = \"https://db-2-bmc\"\n",
        )
        .unwrap();
        let path = dir.path().join("nodefence.toml");
        let config = crate::config::load(&path).unwrap();
        let report = ok_report(&path, &config);
        let lines: Vec<&str> = report.lines().collect();
        assert_eq!(lines.len(), 3, "{report}");
        assert!(
            lines[2].starts_with("deploy: the base of deploy/"),
            "{report}"
        );
        assert!(
            lines[0].contains("OK (2 nodes: 2 redfish; fallback methods: 1 aws, 1 exec, 1 ipmi;"),
            "{report}"
        );
        let expected = format!(
            "  node \"db-1\": 1. redfish https://db-1-bmc (system 1) → 2. exec {} ip=pdu-1 plug=7 → \
             3. ipmi 10.0.9.21:623 → 4. aws eu-west-1 (instance i-0123456789abcdef0)",
            agent.display()
        );
        assert_eq!(lines[1], expected, "{report}");
        for secret in ["Secret", "pdu-community", "apc", "admin"] {
            assert!(!report.contains(secret), "{secret} in {report}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn identity_mismatch_is_a_problem_and_unknowns_are_warnings() {
        crate::tls::install_crypto_provider();
        let bmc = bmc().await;
        let dir = tempfile::tempdir().unwrap();
        let config_path = write_config(dir.path(), &bmc);
        let config = crate::config::load(&config_path).unwrap();
        let nodes: BTreeMap<String, NodeIdentity> =
            [("worker-1", U1), ("worker-2", OTHER), ("worker-3", U1)]
                .into_iter()
                .map(|(n, u)| {
                    (
                        n.to_string(),
                        NodeIdentity {
                            system_uuid: Some(u.into()),
                            provider_id: None,
                        },
                    )
                })
                .collect();
        let report = identity_report(&config, &nodes, Ok(&None)).await;
        assert_eq!(report.matched, 1, "{report:?}");
        assert_eq!(report.problems.len(), 1, "{report:?}");
        let problem = &report.problems[0];
        assert!(problem.contains("node \"worker-2\""), "{problem}");
        assert!(problem.contains(U2) && problem.contains(OTHER), "{problem}");
        assert!(
            problem.contains("inventory.toml") && problem.contains("help:"),
            "{problem}"
        );
        assert_eq!(report.warnings.len(), 1, "{report:?}");
        assert!(
            report.warnings[0].contains("worker-3") && report.warnings[0].contains("has no UUID"),
            "{report:?}"
        );

        // A node missing from the cluster is a warning, never a match.
        let mut partial = nodes.clone();
        partial.remove("worker-1");
        let report = identity_report(&config, &partial, Ok(&None)).await;
        assert_eq!(report.matched, 0);
        assert!(
            report
                .warnings
                .iter()
                .any(|w| w.contains("worker-1") && w.contains("does not exist")),
            "{report:?}"
        );
        bmc.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn identity_exit_codes_follow_the_scheme() {
        crate::tls::install_crypto_provider();
        let bmc = bmc().await;
        let kube = FakeKube::builder().start().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let config_path = write_config(dir.path(), &bmc);
        let kubeconfig = dir.path().join("kubeconfig");
        kube.write_kubeconfig(&kubeconfig).unwrap();
        let args = |cluster: bool, kubeconfig: Option<std::path::PathBuf>| ValidateArgs {
            identity: IdentityArgs { cluster },
            cluster: ClusterArgs {
                kubeconfig,
                namespace: "nodefence".into(),
            },
        };
        for (name, uuid) in [("worker-1", U1), ("worker-2", U2), ("worker-3", U1)] {
            kube.store().create(NODES, None, node(name, uuid)).unwrap();
        }
        // Matches and one unknown (worker-3's BMC reports no UUID): OK.
        assert_eq!(
            run_with(&config_path, &args(false, Some(kubeconfig.clone()))).await,
            exit::OK
        );
        // worker-2's entry now points at another machine: invalid configuration.
        kube.store().delete(NODES, None, "worker-2", None).unwrap();
        kube.store()
            .create(NODES, None, node("worker-2", OTHER))
            .unwrap();
        assert_eq!(
            run_with(&config_path, &args(true, Some(kubeconfig.clone()))).await,
            exit::CONFIG
        );
        // Without --cluster and --kubeconfig the cluster is not read.
        assert_eq!(run_with(&config_path, &args(false, None)).await, exit::OK);
        // An unreachable cluster is a failure, not a pass.
        kube.shutdown().await;
        assert_eq!(
            run_with(&config_path, &args(true, Some(kubeconfig))).await,
            exit::FAILED
        );
        bmc.shutdown().await;
    }

    #[test]
    fn a_kubevirt_node_names_its_component_and_the_infrastructure_role() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("nodefence.toml"),
            "inventory = \"inventory.toml\"\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("infra.kubeconfig"),
            "apiVersion: v1\nkind: Config\ncurrent-context: i\nclusters:\n- name: i\n  \
             cluster:\n    server: https://infra:6443\ncontexts:\n- name: i\n  context:\n    \
             cluster: i\n    user: u\nusers:\n- name: u\n  user:\n    token: t0k3n-x\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("inventory.toml"),
            "[nodes.guest-1]\ndriver = \"kubevirt\"\nkubeconfig = \"infra.kubeconfig\"\n\
             namespace = \"guests\"\n",
        )
        .unwrap();
        let path = dir.path().join("nodefence.toml");
        let config = crate::config::load(&path).unwrap();
        let report = ok_report(&path, &config);
        assert!(report.contains("components/kubevirt"), "{report}");
        assert!(report.contains("deploy/kubevirt-infra"), "{report}");
        assert!(report.contains("1 kubevirt"), "{report}");
        assert!(!report.contains("t0k3n-x"), "{report}");
    }

    #[test]
    fn a_metal3_only_configuration_says_where_its_nodes_come_from() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nodefence.toml");
        std::fs::write(&path, "[metal3]\nhosts = true\nnamespaces = [\"metal3\"]\n").unwrap();
        let config = crate::config::load(&path).unwrap();
        let report = ok_report(&path, &config);
        let first = report.lines().next().unwrap();
        assert_eq!(
            first,
            format!(
                "{}: OK (0 nodes in files; BareMetalHosts add theirs with cluster access)",
                path.display()
            )
        );
        for line in report.lines() {
            assert!(!line.contains("  "), "a run of spaces: {line:?}");
            assert!(!line.contains(": ;"), "an empty list: {line:?}");
        }
    }

    #[test]
    fn each_entry_says_where_it_came_from_and_how_its_power_goes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("nodefence.toml"),
            "inventory = \"inventory.toml\"\n[security]\nallow_inline_passwords = true\n\
             [metal3]\nhosts = true\nnamespaces = [\"metal3\"]\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("inventory.toml"),
            "[nodes.db-1]\ndriver = \"ipmi\"\naddress = \"10.0.9.21\"\nusername = \"u\"\n\
             password = \"ipmi-Secret-1\"\n\n[nodes.worker-1]\ndriver = \"ipmi\"\n\
             address = \"10.0.9.22\"\nusername = \"u\"\npassword = \"ipmi-Secret-2\"\n",
        )
        .unwrap();
        let path = dir.path().join("nodefence.toml");
        let mut config = crate::config::load(&path).unwrap();
        // Offline: the hosts are announced, not read.
        let report = ok_report(&path, &config);
        assert!(
            report.contains("metal3: the BareMetalHosts of namespace(s) metal3 add their nodes"),
            "{report}"
        );
        assert!(report.contains("components/metal3"), "{report}");
        let host = |name: &str, address: &str| -> crate::metal3::BareMetalHost {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "metal3"},
                "spec": {"online": true, "bmc": {"address": address, "credentialsName": "s"}}
            }))
            .unwrap()
        };
        let node = |name: &str, host: &str| crate::metal3::mapping::NodeFacts {
            name: name.into(),
            provider_id: Some(format!("metal3://metal3/{host}/m")),
            annotation: None,
        };
        let d = crate::metal3::inventory::entries(
            &config.agent.metal3,
            &[
                host("bmh-1", "redfish://10.0.7.11/redfish/v1/Systems/1"),
                host(
                    "bmh-2",
                    "idrac-redfish://10.0.7.12/redfish/v1/Systems/System.Embedded.1",
                ),
            ],
            &[node("worker-1", "bmh-1"), node("worker-2", "bmh-2")],
            &Default::default(),
        );
        crate::metal3::inventory::merge(&mut config, &d);
        let lines = origin_lines(&config);
        let lines: Vec<&str> = lines.lines().collect();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].starts_with("  node \"worker-1\": ")
                && lines[0].contains("inventory.toml:7 → 1. ipmi 10.0.9.22:623")
                && lines[0].ends_with("; power through Metal3 (BareMetalHost metal3/bmh-1)"),
            "{lines:?}"
        );
        assert_eq!(
            lines[1],
            "  node \"worker-2\": BareMetalHost metal3/bmh-2 → 1. redfish https://10.0.7.12 \
             (system System.Embedded.1); power through Metal3 (BareMetalHost metal3/bmh-2)"
        );
        assert!(
            !lines
                .iter()
                .any(|l| l.contains("db-1") || l.contains("Secret"))
        );
    }
}
