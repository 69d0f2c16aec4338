//! `nodefence fence NODE --action off|on|reboot`: manual fencing with proof.
//!
//! Asks before acting (type the node name) unless `--yes`; refuses to act without a
//! terminal to ask on. Waits for the confirmed result and exits non-zero when the
//! state could not be proven.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

use serde::Serialize;

use super::{OutputFormat, exit};
use crate::power::PowerAction;
use crate::power::confirm::{self, ActionError, ActionOutcome};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ActionArg {
    /// Forced power off (not a graceful shutdown), then confirm Off.
    Off,
    /// Power on, then confirm On.
    On,
    /// Power off, confirm Off, power on, confirm On.
    Reboot,
}

impl From<ActionArg> for PowerAction {
    fn from(a: ActionArg) -> Self {
        match a {
            ActionArg::Off => PowerAction::Off,
            ActionArg::On => PowerAction::On,
            ActionArg::Reboot => PowerAction::Reboot,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct FenceArgs {
    /// The Kubernetes node name, as in the inventory.
    pub node: String,
    /// What to do.
    #[arg(long, short = 'a', value_enum)]
    pub action: ActionArg,
    /// Do not ask for confirmation.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Output format of the result.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    /// Cluster access, used only when the node's BMC password is in a Kubernetes
    /// Secret (`password_secret`).
    #[command(flatten)]
    pub cluster: super::cluster_args::ClusterArgs,
}

#[derive(Debug, Serialize)]
struct FenceReport {
    node: String,
    action: String,
    confirmed: bool,
    initial_power: Option<String>,
    final_power: Option<String>,
    commands_sent: Vec<String>,
    readings: usize,
    error: Option<String>,
    error_kind: Option<String>,
}

pub async fn run(config_path: &Path, args: &FenceArgs) -> u8 {
    let mut config = match super::load_config(config_path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let node = std::slice::from_ref(&args.node);
    // A node from a Metal3 BareMetalHost, or whose power Metal3 manages.
    let metal3 = super::cluster_args::read_metal3_hosts(&mut config, &args.cluster).await;
    if metal3.is_err() {
        // Without the hosts, a Metal3 machine would be powered off behind Ironic's
        // back (and powered on again by its power sync).
        eprintln!("error: not fencing: the BareMetalHosts could not be read (above)");
        return exit::FAILED;
    }
    if let Err(code) = super::cluster_args::read_secrets(&mut config, &args.cluster, node).await {
        return code;
    }
    let target = match super::status::select_nodes(&config, std::slice::from_ref(&args.node)) {
        Ok(t) => t[0],
        Err(code) => return code,
    };
    let factory = super::cluster_args::factory(&config, metal3.as_ref());
    let driver = match factory.driver(target) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::FAILED;
        }
    };
    if target.needs_node_identity() {
        // The machine is named by the Node (its providerID): read it first.
        match super::cluster_args::node_identities(&args.cluster).await {
            Ok(nodes) => match nodes.get(&args.node) {
                Some(identity) => driver.node_identity(identity),
                None => {
                    eprintln!(
                        "error: node {} is not in the cluster, and its inventory entry names \
                         no machine (aws: instance_id or instance_tag; vsphere: bios_uuid, \
                         moid or vm_path)",
                        args.node
                    );
                    return exit::FAILED;
                }
            },
            Err(e) => {
                eprintln!("error: {e}");
                return exit::FAILED;
            }
        }
    }
    let action = PowerAction::from(args.action);
    if !args.yes
        && let Err(code) = ask(&args.node, action, &driver.endpoint())
    {
        return code;
    }
    let policy = config.agent.power.confirm;
    eprintln!(
        "{}: power {action} via {} {}; confirming with {} consecutive readings {} apart (up to {})",
        args.node,
        driver.driver_name(),
        driver.endpoint(),
        policy.readings,
        humantime::format_duration(policy.interval),
        humantime::format_duration(policy.timeout)
    );
    let result = confirm::execute(driver.as_ref(), action, &policy).await;
    driver.close().await;
    let report = report(&args.node, action, &result);
    match args.output {
        OutputFormat::Json => match serde_json::to_string_pretty(&report) {
            Ok(json) => println!("{json}"),
            Err(e) => eprintln!("error: cannot encode JSON: {e}"),
        },
        OutputFormat::Table => print_human(&report, &result),
    }
    if report.confirmed {
        exit::OK
    } else {
        exit::FAILED
    }
}

/// Asks the operator to type the node name. Never proceeds without a terminal.
fn ask(node: &str, action: PowerAction, endpoint: &str) -> Result<(), u8> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        eprintln!(
            "error: refusing to power {action} {node} without confirmation: standard input is not a terminal; pass --yes"
        );
        return Err(exit::ABORTED);
    }
    let warning = match action {
        PowerAction::Off => "This cuts power at once; the operating system is not shut down.",
        PowerAction::On => "This powers the machine on.",
        PowerAction::Reboot => "This cuts power at once, then powers the machine on again.",
    };
    eprint!("Power {action} node {node} ({endpoint})? {warning}\nType the node name to continue: ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    if stdin.lock().read_line(&mut answer).is_err() || answer.trim() != node {
        eprintln!("aborted: nothing was done");
        return Err(exit::ABORTED);
    }
    Ok(())
}

fn report(
    node: &str,
    action: PowerAction,
    result: &Result<ActionOutcome, ActionError>,
) -> FenceReport {
    match result {
        Ok(outcome) => {
            let last = outcome.on.as_ref().or(outcome.off.as_ref());
            FenceReport {
                node: node.to_string(),
                action: action.to_string(),
                confirmed: true,
                initial_power: Some(outcome.initial.state.to_string()),
                final_power: last.map(|c| c.state.to_string()),
                commands_sent: outcome
                    .commands_sent
                    .iter()
                    .map(ToString::to_string)
                    .collect(),
                readings: outcome
                    .off
                    .iter()
                    .chain(outcome.on.iter())
                    .map(|c| c.readings.len())
                    .sum(),
                error: None,
                error_kind: None,
            }
        }
        Err(e) => FenceReport {
            node: node.to_string(),
            action: action.to_string(),
            confirmed: false,
            initial_power: None,
            final_power: match e {
                ActionError::NotConfirmed(n) => n.last_state.as_ref().map(ToString::to_string),
                _ => None,
            },
            commands_sent: Vec::new(),
            readings: 0,
            error: Some(e.to_string()),
            error_kind: Some(e.label().to_string()),
        },
    }
}

fn print_human(report: &FenceReport, result: &Result<ActionOutcome, ActionError>) {
    match result {
        Ok(outcome) => {
            let sent = if outcome.commands_sent.is_empty() {
                "no command needed: it was already in that state".to_string()
            } else {
                format!("commands sent: {}", report.commands_sent.join(", "))
            };
            println!(
                "{}: confirmed {} ({} readings; was {}; {sent})",
                report.node,
                report.final_power.as_deref().unwrap_or("?"),
                report.readings,
                report.initial_power.as_deref().unwrap_or("?"),
            );
        }
        Err(e) => {
            println!("{}: NOT confirmed: {e}", report.node);
        }
    }
}
