//! `nodefence fence NODE --action off|on|reboot`: manual fencing with proof.
//!
//! Before any command the machine is read once, its power state and identity
//! together, and the identity is checked against the node's Node as the daemon checks
//! it before each of its own commands ([`identity`]): a machine not proven to be the
//! node's own is refused (exit 5). Asks before acting (type the node name), showing
//! that verdict, unless `--yes`; refuses to act without a terminal to ask on. Waits
//! for the confirmed result and exits non-zero when the state could not be proven.
//! In a fencing topology the command goes to the level whose reading was checked
//! (every level in order only with `--skip-identity-check`).

mod identity;

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
    /// Power the machine even when it cannot be proven to be the node's own: no
    /// cluster access, no such Node (a machine whose Node is gone or that never
    /// joined), or a power source that cannot tell which machine it controls. Never
    /// overrides a mismatch (the entry reaching another node's machine).
    #[arg(long)]
    pub skip_identity_check: bool,
    /// Output format of the result.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    /// Cluster access: the Node's identity (its systemUUID, providerID) that the
    /// machine is checked against, and BMC passwords kept in Kubernetes Secrets
    /// (`password_secret`). Without --kubeconfig it is found as kubectl finds it.
    #[command(flatten)]
    pub cluster: super::cluster_args::ClusterArgs,
}

#[derive(Debug, Serialize)]
struct FenceReport {
    node: String,
    action: String,
    confirmed: bool,
    /// Not sent: the machine is not proven to be the node's own.
    refused: bool,
    identity: super::status::IdentityReport,
    /// The check was not a match and `--skip-identity-check` let the command through.
    identity_check_skipped: bool,
    /// The machine the power source says it controls; absent when not read.
    machine: Option<super::status::MachineReport>,
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
    // What the cluster says about the node: the identity its machine must prove, and
    // for some drivers the name of the machine (its providerID, its systemUUID).
    let lookup = super::cluster_args::node_lookup(&args.cluster, &args.node).await;
    match &lookup {
        super::cluster_args::NodeLookup::Found(identity) => driver.node_identity(identity),
        _ if target.needs_node_identity() => {
            let why = match &lookup {
                super::cluster_args::NodeLookup::NoAccess(why) => why.clone(),
                _ => format!("node {} is not in the cluster", args.node),
            };
            eprintln!(
                "error: {why}; node {}'s inventory entry names no machine itself (aws: \
                 instance_id or instance_tag; vsphere: bios_uuid, moid or vm_path), so it \
                 is found through its Node",
                args.node
            );
            return exit::FAILED;
        }
        _ => {}
    }
    let action = PowerAction::from(args.action);
    // One reading, its power state and the identity of the machine it is of: the
    // command is decided on this reading and nothing else.
    let read = driver.read_for_command().await;
    let check = identity::check(&args.node, &lookup, &read.identity);
    let machine = read
        .identity
        .as_ref()
        .ok()
        .map(super::status::MachineReport::new);
    let mut report = FenceReport {
        node: args.node.clone(),
        action: action.to_string(),
        confirmed: false,
        refused: false,
        identity: super::status::IdentityReport::new(&check),
        identity_check_skipped: false,
        machine,
        initial_power: None,
        final_power: None,
        commands_sent: Vec::new(),
        readings: 0,
        error: None,
        error_kind: None,
    };
    let initial = match read.reading {
        Ok(reading) => reading,
        Err(e) => {
            driver.close().await;
            let e = ActionError::Query(e);
            report.error = Some(e.to_string());
            report.error_kind = Some(e.label().to_string());
            return finish(args, &report, &Err(e));
        }
    };
    report.initial_power = Some(initial.state.to_string());
    let decision = identity::decide(
        &args.node,
        action,
        &driver.endpoint(),
        &check,
        &read.identity,
        &lookup,
        args.skip_identity_check,
    );
    report.identity_check_skipped = decision == identity::Decision::Skipped;
    if let identity::Decision::Refused(why) = &decision {
        driver.close().await;
        eprintln!("error: {why}");
        report.refused = true;
        report.error = Some(why.lines().next().unwrap_or_default().to_string());
        report.error_kind = Some("identity".into());
        if args.output == OutputFormat::Json {
            print_json(&report);
        }
        return exit::REFUSED;
    }
    // A topology's command goes to the level whose reading was checked, unless the
    // operator skipped the proof (then every level in order, as the daemon does).
    let levels = driver.levels();
    let via = match read.level {
        Some(i) if !args.skip_identity_check && i < levels.len() => levels[i].clone(),
        _ => driver.clone(),
    };
    let verdict = identity::verdict_line(&check, &decision);
    if !args.yes
        && let Err(code) = ask(&args.node, action, &via.endpoint(), &verdict)
    {
        driver.close().await;
        return code;
    }
    if report.identity_check_skipped {
        tracing::warn!(node = %args.node, "{verdict}");
    }
    let policy = config.agent.power.confirm;
    eprintln!(
        "{}: power {action} via {} {}; {verdict}; confirming with {} consecutive readings {} \
         apart (up to {})",
        args.node,
        via.driver_name(),
        via.endpoint(),
        policy.readings,
        humantime::format_duration(policy.interval),
        humantime::format_duration(policy.timeout)
    );
    let result = confirm::execute_from(via.as_ref(), action, &policy, initial).await;
    driver.close().await;
    fill(&mut report, &result);
    finish(args, &report, &result)
}

/// Prints the result and returns the exit code.
fn finish(
    args: &FenceArgs,
    report: &FenceReport,
    result: &Result<ActionOutcome, ActionError>,
) -> u8 {
    match args.output {
        OutputFormat::Json => print_json(report),
        OutputFormat::Table => print_human(report, result),
    }
    if report.confirmed {
        exit::OK
    } else {
        exit::FAILED
    }
}

fn print_json(report: &FenceReport) {
    match serde_json::to_string_pretty(report) {
        Ok(json) => println!("{json}"),
        Err(e) => eprintln!("error: cannot encode JSON: {e}"),
    }
}

/// Asks the operator to type the node name, showing the identity verdict. Never
/// proceeds without a terminal.
fn ask(node: &str, action: PowerAction, endpoint: &str, verdict: &str) -> Result<(), u8> {
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
    eprint!(
        "Power {action} node {node} ({endpoint})?\n  {verdict}\n{warning}\nType the node name to continue: "
    );
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    if stdin.lock().read_line(&mut answer).is_err() || answer.trim() != node {
        eprintln!("aborted: nothing was done");
        return Err(exit::ABORTED);
    }
    Ok(())
}

/// The outcome of the command into `report`.
fn fill(report: &mut FenceReport, result: &Result<ActionOutcome, ActionError>) {
    match result {
        Ok(outcome) => {
            let last = outcome.on.as_ref().or(outcome.off.as_ref());
            report.confirmed = true;
            report.initial_power = Some(outcome.initial.state.to_string());
            report.final_power = last.map(|c| c.state.to_string());
            report.commands_sent = outcome
                .commands_sent
                .iter()
                .map(ToString::to_string)
                .collect();
            report.readings = outcome
                .off
                .iter()
                .chain(outcome.on.iter())
                .map(|c| c.readings.len())
                .sum();
        }
        Err(e) => {
            report.final_power = match e {
                ActionError::NotConfirmed(n) => n.last_state.as_ref().map(ToString::to_string),
                _ => None,
            };
            report.error = Some(e.to_string());
            report.error_kind = Some(e.label().to_string());
        }
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
    if report.identity_check_skipped {
        println!(
            "  identity NOT verified ({}): {}",
            identity::SKIP_FLAG,
            report.identity.message
        );
    } else if report.identity.result == "match" {
        println!("  {}", report.identity.message);
    }
}
