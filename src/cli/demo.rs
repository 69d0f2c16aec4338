//! `nodefence demo`: the fencing story on this machine, no cluster and no set-up (see
//! [`crate::demo`]). Exit 0 when every scenario behaved as expected, 1 when one did not
//! within its deadline (the demo doubles as a smoke test), 130 when interrupted.

use std::path::PathBuf;
use std::time::Duration;

use clap::ValueEnum;

use super::OutputFormat;
use crate::demo::{self, DemoOptions, Scenario};

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Time scale of the simulated cluster and of nodefence's timings together
    /// (10 = ten times faster than a real cluster; all five scenarios take about 86 s
    /// at the default and 28 s at 20, as measured: they wait on timers, not the CPU).
    #[arg(long, default_value_t = demo::DEFAULT_SPEED, value_parser = parse_speed)]
    pub speed: f64,
    /// Which scenario to run (one that needs an earlier one's state sets it up itself).
    #[arg(long, value_enum, default_value_t = ScenarioArg::All)]
    pub scenario: ScenarioArg,
    /// No colours, even on a terminal (NO_COLOR is honoured too).
    #[arg(long)]
    pub no_color: bool,
    /// Format of the closing summary; with json the story goes to standard error and
    /// standard output carries the JSON alone (each scenario's outcome, with its
    /// steps as the story told them, times in cluster seconds).
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    /// Where the daemon's and the simulation's logs go (default: nodefence-demo.log
    /// in the temporary directory).
    #[arg(long, value_name = "PATH")]
    pub log_file: Option<PathBuf>,
    /// Power-loss scenario: pull the plug this long (cluster time, e.g. "5s") after the
    /// node's kubelet renewed its Lease, instead of at once; the recovery bench sweeps
    /// it across the 10 s renewal interval.
    #[arg(long, value_name = "DURATION", value_parser = parse_phase)]
    pub pull_after_renewal: Option<Duration>,
    /// Every worker's kubelet computes its node status this long (cluster time, under
    /// 10s) after its Lease renewals instead of with them, as on nodes that have run
    /// for a while; the recovery bench sweeps it (a replacement pod mounts its volume
    /// only once its kubelet has reported it in `volumesInUse`).
    #[arg(long, value_name = "DURATION", value_parser = parse_status_offset)]
    pub status_after_lease: Option<Duration>,
    /// Power-loss scenario only: a companion on every worker beats to nodefence (its
    /// listener on, no watchdog level); the victim's dies with its machine, so
    /// nodefence hears the silence in 2 s and still releases only on the BMC's Off
    /// readings. Plays at real time (--speed does not apply: the companions' timing is
    /// not scaled).
    #[arg(long)]
    pub companions: bool,
    /// With --companions: a standby replica of nodefence runs too (the companions beat
    /// to both), and the leader is killed, its Lease not released, this long (e.g.
    /// "3s") after the plug.
    #[arg(long, value_name = "DURATION", requires = "companions", value_parser = parse_kill)]
    pub kill_leader_after: Option<Duration>,
    /// With --kill-leader-after: both replicas' leader Lease lasts this long (default
    /// 15s, kube-controller-manager's), the renew deadline and retry period in
    /// proportion (6s: 4s and 1s), as `nodefence run --leader-elect-*` sets them.
    #[arg(long, value_name = "DURATION", requires = "kill_leader_after", value_parser = parse_lease)]
    pub leader_lease: Option<Duration>,
}

fn parse_lease(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (write it like \"6s\")"))?;
    if d < Duration::from_secs(3) || d > Duration::from_secs(60) {
        return Err("between 3s and 60s".into());
    }
    Ok(d)
}

fn parse_kill(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (write it like \"3s\")"))?;
    if d > Duration::from_secs(60) {
        return Err("at most 60s: the release comes within seconds of the plug".into());
    }
    Ok(d)
}

fn parse_phase(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (write it like \"5s\")"))?;
    if d > Duration::from_secs(60) {
        return Err("at most 60s: a kubelet renews its Lease every 10 s".into());
    }
    Ok(d)
}

fn parse_status_offset(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (write it like \"4s\")"))?;
    if d >= Duration::from_secs(10) {
        return Err("under 10s: a kubelet computes its node status every 10 s".into());
    }
    Ok(d)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScenarioArg {
    /// The worker running db-0 loses power.
    PowerLoss,
    /// Its network is cut; the machine stays On.
    NetworkCut,
    /// The BMC stops answering while a node is unreachable.
    BmcDown,
    /// A fenced machine gets its power back.
    Recovery,
    /// NodeHealthCheck asks nodefence to fence a cut-off node (NodeFenceRemediation).
    Nhc,
    /// All five above, in this order.
    All,
    /// On its own: the workers are VMs on a mock vCenter, and the host of the one
    /// running db-0 loses power (the vsphere driver reads poweredOff).
    VspherePowerLoss,
    /// On its own, in the same world: the network of the VM running db-0 is cut,
    /// nodefence powers it off with PowerOffVM_Task.
    VsphereNetworkCut,
    /// Both vSphere scenarios, in this order.
    Vsphere,
    /// On its own, at real time (--speed does not apply: the watchdog level's timing
    /// is not scaled): a machine loses power with its BMC; nothing is released by
    /// default, then, with companions and watchdog_fencing, it is released on its
    /// hardware watchdog after the stated wait.
    RackPower,
}

fn parse_speed(raw: &str) -> Result<f64, String> {
    let speed: f64 = raw
        .parse()
        .map_err(|_| format!("{raw:?} is not a number"))?;
    if speed.is_finite() && (0.1..=50.0).contains(&speed) {
        Ok(speed)
    } else {
        Err("the speed must be between 0.1 and 50".to_string())
    }
}

pub async fn run(args: &DemoArgs) -> u8 {
    if args.companions && args.scenario != ScenarioArg::PowerLoss {
        eprintln!("error: --companions applies to --scenario power-loss only");
        return 2;
    }
    let scenarios = match args.scenario {
        ScenarioArg::PowerLoss => vec![Scenario::PowerLoss],
        ScenarioArg::NetworkCut => vec![Scenario::NetworkCut],
        ScenarioArg::BmcDown => vec![Scenario::BmcDown],
        ScenarioArg::Recovery => vec![Scenario::Recovery],
        ScenarioArg::Nhc => vec![Scenario::Nhc],
        ScenarioArg::All => Scenario::ALL.to_vec(),
        ScenarioArg::VspherePowerLoss => vec![Scenario::VspherePowerLoss],
        ScenarioArg::VsphereNetworkCut => vec![Scenario::VsphereNetworkCut],
        ScenarioArg::Vsphere => Scenario::VSPHERE.to_vec(),
        ScenarioArg::RackPower => vec![Scenario::RackPower],
    };
    demo::run(DemoOptions {
        speed: args.speed,
        scenarios,
        no_color: args.no_color,
        json: args.output == OutputFormat::Json,
        log_file: args.log_file.clone(),
        pull_after_renewal: args.pull_after_renewal,
        status_after_lease: args.status_after_lease.unwrap_or_default(),
        companions: args.companions,
        kill_leader_after: args.kill_leader_after,
        leader_lease: args.leader_lease,
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speeds() {
        assert_eq!(parse_speed("10"), Ok(10.0));
        assert!(parse_speed("0").is_err());
        assert!(parse_speed("NaN").is_err());
        assert!(parse_speed("fast").is_err());
    }

    #[test]
    fn phases() {
        assert_eq!(parse_phase("5s"), Ok(Duration::from_secs(5)));
        assert!(parse_phase("2m").is_err());
        assert_eq!(
            parse_status_offset("4500ms"),
            Ok(Duration::from_millis(4500))
        );
        let too_long = parse_status_offset("10s").unwrap_err();
        assert!(too_long.contains("every 10 s"), "{too_long}");
        assert!(parse_status_offset("soon").unwrap_err().contains("\"4s\""));
        assert_eq!(parse_kill("3s"), Ok(Duration::from_secs(3)));
        assert!(parse_kill("5m").is_err());
    }
}
