//! `nodefence status [NODE...]`: one power reading per node, queried concurrently
//! (bounded by `power.max_concurrent_requests`), as a table or JSON.

use std::path::Path;
use std::sync::Arc;

use futures::StreamExt;
use serde::Serialize;

use super::{OutputFormat, exit, table};
use crate::config::{Config, NodeTarget};
use crate::power::PowerDriver;
use crate::power::registry::DriverFactory;

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Nodes to query (default: every node in the inventory).
    pub nodes: Vec<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
}

/// One node's line of the report.
#[derive(Debug, Serialize)]
pub struct StatusRow {
    pub node: String,
    pub driver: String,
    pub endpoint: String,
    /// The reported power state, absent when the query failed.
    pub power: Option<String>,
    pub latency_ms: Option<u64>,
    pub error: Option<ErrorReport>,
}

#[derive(Debug, Serialize)]
pub struct ErrorReport {
    pub kind: String,
    pub message: String,
}

pub async fn run(config_path: &Path, args: &StatusArgs) -> u8 {
    let config = match super::load_config(config_path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let targets = match select_nodes(&config, &args.nodes) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let factory = DriverFactory::new(config.agent.power.max_concurrent_requests);
    let rows = query_all(
        &factory,
        &targets,
        config.agent.power.max_concurrent_requests,
    )
    .await;
    let failed = rows.iter().any(|r| r.error.is_some());
    match args.output {
        OutputFormat::Json => match serde_json::to_string_pretty(&rows) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("error: cannot encode JSON: {e}");
                return exit::FAILED;
            }
        },
        OutputFormat::Table => print!("{}", render(&rows)),
    }
    if failed { exit::FAILED } else { exit::OK }
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

async fn query_all(
    factory: &DriverFactory,
    targets: &[&NodeTarget],
    concurrency: usize,
) -> Vec<StatusRow> {
    let mut rows: Vec<StatusRow> =
        futures::stream::iter(targets.iter().map(|t| query_one(factory, t)))
            .buffer_unordered(concurrency.max(1))
            .collect()
            .await;
    rows.sort_by(|a, b| a.node.cmp(&b.node));
    rows
}

async fn query_one(factory: &DriverFactory, target: &NodeTarget) -> StatusRow {
    let driver: Arc<dyn PowerDriver> = match factory.driver(target) {
        Ok(d) => d,
        Err(e) => {
            return StatusRow {
                node: target.name.clone(),
                driver: target.power.driver_name().to_string(),
                endpoint: String::from("-"),
                power: None,
                latency_ms: None,
                error: Some(ErrorReport {
                    kind: e.kind.to_string(),
                    message: e.message,
                }),
            };
        }
    };
    let result = driver.status().await;
    driver.close().await;
    let mut row = StatusRow {
        node: target.name.clone(),
        driver: driver.driver_name().to_string(),
        endpoint: driver.endpoint(),
        power: None,
        latency_ms: None,
        error: None,
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

fn render(rows: &[StatusRow]) -> String {
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.node.clone(),
                r.driver.clone(),
                r.endpoint.clone(),
                r.power.clone().unwrap_or_else(|| "?".into()),
                r.latency_ms
                    .map_or_else(|| "-".into(), |ms| format!("{ms}ms")),
                r.error
                    .as_ref()
                    .map_or_else(String::new, |e| format!("{}: {}", e.kind, e.message)),
            ]
        })
        .collect();
    table::render(
        &["NODE", "DRIVER", "ENDPOINT", "POWER", "LATENCY", "ERROR"],
        &body,
    )
}
