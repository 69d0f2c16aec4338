//! `nodefence pause` / `nodefence resume`: the cluster-wide switch for planned
//! maintenance and upgrades. Stored in the cluster (see [`crate::cluster::pause`]), so
//! it holds for every replica, across restarts, and while nodefence is down.

use super::cluster_args::ClusterArgs;
use super::exit;
use crate::cluster::pause;

#[derive(Debug, clap::Args)]
pub struct PauseArgs {
    /// Why (shown in logs and by `nodefence pause --show`).
    #[arg(long)]
    pub reason: Option<String>,
    /// Only show the current state; change nothing.
    #[arg(long)]
    pub show: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, clap::Args)]
pub struct ResumeArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

pub async fn pause(args: &PauseArgs) -> u8 {
    let client = match args.cluster.client().await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: cannot configure the Kubernetes client: {e:#}");
            return exit::FAILED;
        }
    };
    let ns = &args.cluster.namespace;
    let result = if args.show {
        pause::get(client, ns).await
    } else {
        pause::set(client, ns, true, args.reason.as_deref(), &who()).await
    };
    report(result, ns)
}

pub async fn resume(args: &ResumeArgs) -> u8 {
    let client = match args.cluster.client().await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: cannot configure the Kubernetes client: {e:#}");
            return exit::FAILED;
        }
    };
    let ns = &args.cluster.namespace;
    report(pause::set(client, ns, false, None, &who()).await, ns)
}

fn report(result: Result<pause::PauseState, kube::Error>, namespace: &str) -> u8 {
    match result {
        Ok(state) => {
            println!(
                "{} (ConfigMap {namespace}/{})",
                state.describe(),
                pause::PAUSE_CONFIGMAP
            );
            exit::OK
        }
        Err(e) => {
            eprintln!(
                "error: cannot read or write ConfigMap {namespace}/{}: {e}",
                pause::PAUSE_CONFIGMAP
            );
            exit::FAILED
        }
    }
}

/// `user@host`, for the record.
fn who() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "unknown".into());
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    format!("{user}@{host}")
}
