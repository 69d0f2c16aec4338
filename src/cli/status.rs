//! `nodefence status [NODE...]`: one power reading per node, queried concurrently
//! (bounded by `power.max_concurrent_requests`), as a table or JSON, with the machine
//! identity each power source reports. With `--cluster` (or `--kubeconfig`) each
//! identity is cross-checked against the Node's systemUUID ([`crate::identity`]): an
//! IDENTITY column, the explanation of every mismatch or unknown under the table, and
//! exit 1 on a mismatch.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use futures::StreamExt;
use serde::Serialize;

use super::{OutputFormat, exit, table};
use crate::config::{Config, NodeTarget};
use crate::identity::{self, IdentityCheck, MachineIdentity, NodeIdentity};
use crate::power::PowerDriver;
use crate::power::registry::DriverFactory;

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Nodes to query (default: every node in the inventory).
    pub nodes: Vec<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    /// The BMC identity cross-check against the cluster's Nodes.
    #[command(flatten)]
    pub identity: super::cluster_args::IdentityArgs,
    /// Cluster access: the identity cross-check, and BMC passwords kept in Kubernetes
    /// Secrets (`password_secret`).
    #[command(flatten)]
    pub cluster: super::cluster_args::ClusterArgs,
}

/// One node's line of the report.
#[derive(Debug, Serialize)]
pub struct StatusRow {
    pub node: String,
    /// Where the node's entry came from: `inventory.toml:12`, `BareMetalHost ns/name`.
    pub source: String,
    /// The BareMetalHost through which its power is asked of Metal3, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metal3_host: Option<String>,
    pub driver: String,
    pub endpoint: String,
    /// The reported power state, absent when the query failed.
    pub power: Option<String>,
    pub latency_ms: Option<u64>,
    pub error: Option<ErrorReport>,
    /// The machine the power source says it controls; absent when it was not read.
    pub machine: Option<MachineReport>,
    /// The identity cross-check, with `--cluster` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity: Option<IdentityReport>,
    /// The node's companion as the leader last published it (`--cluster` only, when
    /// companions run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub companion: Option<crate::heartbeat::report::CompanionReport>,
    #[serde(skip)]
    pub machine_identity: Option<MachineIdentity>,
}

/// What a power source reports about its machine.
#[derive(Debug, Serialize)]
pub struct MachineReport {
    /// `uuid`, `instance-id` or `unavailable`.
    pub kind: &'static str,
    /// The UUID or instance id as reported, or why it is unavailable.
    pub value: String,
}

impl MachineReport {
    pub fn new(m: &MachineIdentity) -> Self {
        let (kind, value) = match m {
            MachineIdentity::Uuid(u) => ("uuid", u.as_str()),
            MachineIdentity::InstanceId(i) => ("instance-id", i.as_str()),
            MachineIdentity::Unavailable(why) => ("unavailable", why.as_str()),
        };
        // As the power source sent it, made safe to print.
        Self {
            kind,
            value: crate::untrusted::field(value),
        }
    }
}

/// The result of the identity cross-check of one node.
#[derive(Debug, Serialize)]
pub struct IdentityReport {
    /// `match`, `mismatch` or `unknown`.
    pub result: &'static str,
    /// How it matched (`exact`, `fields-swapped`, `reversed`, `instance-id`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub equivalence: Option<&'static str>,
    /// One sentence for the operator.
    pub message: String,
}

impl IdentityReport {
    pub fn new(check: &IdentityCheck) -> Self {
        Self {
            result: check.label(),
            equivalence: match check {
                IdentityCheck::Match(e) => Some(e.as_str()),
                _ => None,
            },
            message: check.describe(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct ErrorReport {
    pub kind: String,
    pub message: String,
}

pub async fn run(config_path: &Path, args: &StatusArgs) -> u8 {
    let mut config = match super::load_config(config_path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    // Nodes from Metal3 BareMetalHosts (problems are printed; the inventory file's
    // nodes are still queried).
    let metal3 = super::cluster_args::read_metal3_hosts(&mut config, &args.cluster).await;
    // BMC passwords in Kubernetes Secrets: read them (problems are printed; the nodes
    // concerned then show the factory's refusal in their row, the others are queried).
    let _ = super::cluster_args::read_secrets(&mut config, &args.cluster, &args.nodes).await;
    let targets = match select_nodes(&config, &args.nodes) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let factory = super::cluster_args::factory(&config, metal3.as_ref());
    let cross_check_wanted = args.identity.wanted(&args.cluster);
    // The Nodes are read first when a driver finds its machine through them.
    let needed = targets.iter().any(|t| t.needs_node_identity());
    let mut failed = false;
    let nodes = if cross_check_wanted || needed {
        match super::cluster_args::node_identities(&args.cluster).await {
            Ok(n) => Some(n),
            Err(e) => {
                eprintln!("error: {e}");
                failed = true;
                None
            }
        }
    } else {
        None
    };
    let mut rows = query_all(
        &factory,
        &targets,
        config.agent.power.max_concurrent_requests,
        nodes.as_ref(),
    )
    .await;
    failed |= rows.iter().any(|r| r.error.is_some()) || metal3.is_err();
    if cross_check_wanted {
        for row in &mut rows {
            let check = cross_check(&row.node, row.machine_identity.as_ref(), nodes.as_ref());
            failed |= check.is_mismatch();
            row.identity = Some(IdentityReport::new(&check));
        }
    }
    if cross_check_wanted {
        match companions(&args.cluster).await {
            Ok(Some(published)) => {
                for row in &mut rows {
                    row.companion = published.iter().find(|c| c.node == row.node).cloned();
                }
            }
            Ok(None) => {}
            Err(e) => eprintln!("warning: the companions' table could not be read: {e}"),
        }
    }
    match args.output {
        OutputFormat::Json => match serde_json::to_string_pretty(&rows) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("error: cannot encode JSON: {e}");
                return exit::FAILED;
            }
        },
        OutputFormat::Table => print!("{}{}", render(&rows), identity_notes(&rows)),
    }
    if failed { exit::FAILED } else { exit::OK }
}

/// The companions' table as the leader last published it (`None`: no companions, or
/// nothing published yet).
async fn companions(
    access: &super::cluster_args::ClusterArgs,
) -> anyhow::Result<Option<Vec<crate::heartbeat::report::CompanionReport>>> {
    let client = access.client().await?;
    let store = crate::cluster::records::RecordStore::new(
        client,
        &access.namespace,
        crate::cluster::leader::Leadership::never(),
    );
    Ok(store.load_companions().await?)
}

/// The named nodes (all when none are named); unknown names are a usage error.
pub(super) fn select_nodes<'a>(
    config: &'a Config,
    names: &[String],
) -> Result<Vec<&'a NodeTarget>, u8> {
    if names.is_empty() {
        return Ok(config.inventory.nodes.values().collect());
    }
    let mut selected = Vec::with_capacity(names.len());
    for name in names {
        match config.inventory.nodes.get(name) {
            Some(t) => selected.push(t),
            None => {
                let known: Vec<&str> = config
                    .inventory
                    .nodes
                    .keys()
                    .map(String::as_str)
                    .take(20)
                    .collect();
                eprintln!(
                    "error: node {name:?} is not in the inventory {} (known: {}{})",
                    config.inventory_path.display(),
                    known.join(", "),
                    if config.inventory.nodes.len() > known.len() {
                        ", ..."
                    } else {
                        ""
                    }
                );
                return Err(exit::USAGE);
            }
        }
    }
    Ok(selected)
}

/// One reading per target (at most `concurrency` at once). `nodes` is what the
/// cluster says about each Node, for drivers that find their machine through it.
pub(super) async fn query_all(
    factory: &DriverFactory,
    targets: &[&NodeTarget],
    concurrency: usize,
    nodes: Option<&BTreeMap<String, NodeIdentity>>,
) -> Vec<StatusRow> {
    let mut rows: Vec<StatusRow> =
        futures::stream::iter(targets.iter().map(|t| query_one(factory, t, nodes)))
            .buffer_unordered(concurrency.max(1))
            .collect()
            .await;
    rows.sort_by(|a, b| a.node.cmp(&b.node));
    rows
}

async fn query_one(
    factory: &DriverFactory,
    target: &NodeTarget,
    nodes: Option<&BTreeMap<String, NodeIdentity>>,
) -> StatusRow {
    let driver: Arc<dyn PowerDriver> = match factory.driver(target) {
        Ok(d) => d,
        Err(e) => {
            return StatusRow {
                node: target.name.clone(),
                source: target.origin.to_string(),
                metal3_host: target.metal3_host.as_ref().map(ToString::to_string),
                driver: target.power.driver_name().to_string(),
                endpoint: String::from("-"),
                power: None,
                latency_ms: None,
                error: Some(ErrorReport {
                    kind: e.kind.to_string(),
                    message: e.message,
                }),
                machine: None,
                identity: None,
                companion: None,
                machine_identity: None,
            };
        }
    };
    if let Some(identity) = nodes.and_then(|n| n.get(&target.name)) {
        driver.node_identity(identity);
    }
    // The identity of the machine whose reading this is (a fencing topology: the
    // level that answered), as the daemon judges it.
    let (machine, result) = driver.read_with_identity().await;
    let machine = machine.ok();
    driver.close().await;
    let mut row = StatusRow {
        node: target.name.clone(),
        source: target.origin.to_string(),
        metal3_host: target.metal3_host.as_ref().map(ToString::to_string),
        driver: driver.driver_name().to_string(),
        endpoint: driver.endpoint(),
        power: None,
        latency_ms: None,
        error: None,
        machine: machine.as_ref().map(MachineReport::new),
        identity: None,
        companion: None,
        machine_identity: machine,
    };
    match result {
        Ok(reading) => {
            row.power = Some(reading.state.to_string());
            row.latency_ms = Some(reading.latency.as_millis() as u64);
        }
        Err(e) => {
            row.error = Some(ErrorReport {
                kind: e.kind.to_string(),
                message: e.message,
            });
        }
    }
    row
}

/// The cross-check of one node: its Node's identity (`nodes`: `None` when the cluster
/// could not be read) against what its power source reported (`None`: not read).
pub(super) fn cross_check(
    node: &str,
    machine: Option<&MachineIdentity>,
    nodes: Option<&BTreeMap<String, NodeIdentity>>,
) -> IdentityCheck {
    let Some(nodes) = nodes else {
        return IdentityCheck::Unknown("the cluster's Nodes could not be read".into());
    };
    let Some(ours) = nodes.get(node) else {
        return IdentityCheck::Unknown(format!("Node {node} does not exist in the cluster"));
    };
    let Some(machine) = machine else {
        return IdentityCheck::Unknown(
            "the power source could not be read, so neither could the machine's identity".into(),
        );
    };
    identity::check(ours, machine)
}

fn render(rows: &[StatusRow]) -> String {
    let with_identity = rows.iter().any(|r| r.identity.is_some());
    let with_companions = rows.iter().any(|r| r.companion.is_some());
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut cells = vec![
                r.node.clone(),
                r.source.clone(),
                r.driver.clone(),
                r.endpoint.clone(),
                r.power.clone().unwrap_or_else(|| "?".into()),
                r.latency_ms
                    .map_or_else(|| "-".into(), |ms| format!("{ms}ms")),
                match &r.machine_identity {
                    Some(MachineIdentity::Uuid(u)) => u.clone(),
                    Some(MachineIdentity::InstanceId(i)) => i.clone(),
                    Some(MachineIdentity::Unavailable(_)) => "unavailable".into(),
                    None => "-".into(),
                },
            ];
            if with_identity {
                cells.push(
                    r.identity
                        .as_ref()
                        .map_or_else(|| "-".into(), |i| i.result.to_string()),
                );
            }
            if with_companions {
                cells.push(
                    r.companion
                        .as_ref()
                        .map_or_else(|| "none".into(), |c| c.describe()),
                );
            }
            cells.push(
                r.error
                    .as_ref()
                    .map_or_else(String::new, |e| format!("{}: {}", e.kind, e.message)),
            );
            cells
        })
        .collect();
    let mut headers = vec![
        "NODE", "SOURCE", "DRIVER", "ENDPOINT", "POWER", "LATENCY", "MACHINE",
    ];
    if with_identity {
        headers.push("IDENTITY");
    }
    if with_companions {
        headers.push("COMPANION");
    }
    headers.push("ERROR");
    table::render(&headers, &body)
}

/// Under the table: why each node's identity is not a match (mismatches first).
fn identity_notes(rows: &[StatusRow]) -> String {
    let mut notes: Vec<(bool, String)> = rows
        .iter()
        .filter_map(|r| {
            let i = r.identity.as_ref()?;
            (i.result != "match").then(|| {
                (
                    i.result != "mismatch",
                    format!("{}: {}\n", r.node, i.message),
                )
            })
        })
        .collect();
    if notes.is_empty() {
        return String::new();
    }
    notes.sort();
    let mut out = String::from("\n");
    out.extend(notes.into_iter().map(|(_, line)| line));
    out
}
