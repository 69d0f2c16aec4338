//! `nodefence run`: the daemon (see [`crate::daemon`]). Stops on SIGTERM or Ctrl-C,
//! releasing its leader Lease so another replica takes over at once.

use std::net::SocketAddr;
use std::path::Path;

use super::exit;
use crate::cluster::leader::LeaderTimings;
use crate::daemon::{self, DaemonOptions};

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Read everything and decide everything, log what would be done; send no power
    /// command and write nothing to the cluster.
    #[arg(long)]
    pub dry_run: bool,
    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, default_value = "0.0.0.0:9464")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub cluster: super::cluster_args::ClusterArgs,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "nodefence")]
    pub lease_name: String,
    /// This replica's identity in the Lease (default: $POD_NAME, else the host name, plus a random suffix).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// How often the configuration files are checked for changes and a changed,
    /// valid version applied without a restart (SIGHUP checks at once); "0s": never.
    #[arg(long, default_value = "10s", value_parser = super::duration_arg, value_name = "DURATION")]
    pub config_check_interval: std::time::Duration,
}

pub async fn run(config_path: &Path, args: &RunArgs) -> u8 {
    let config = match super::load_config(config_path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let client = match args.cluster.client().await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: cannot configure the Kubernetes client: {e:#}");
            return exit::FAILED;
        }
    };
    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let options = DaemonOptions {
        drivers: Default::default(),
        dry_run: args.dry_run,
        listen: args.listen,
        lease_namespace: args.cluster.namespace.clone(),
        lease_name: args.lease_name.clone(),
        identity,
        leader_timings: LeaderTimings::default(),
        config_check: (!args.config_check_interval.is_zero()).then_some(args.config_check_interval),
    };
    match daemon::run(config, client, options, shutdown_signal()).await {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("error: {e:#}");
            exit::FAILED
        }
    }
}

fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "nodefence".into());
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}", &suffix[..8])
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(
            tokio::signal::unix::SignalKind::terminate(),
        ) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch SIGTERM; only Ctrl-C stops the daemon");
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
