//! Flags shared by the commands that talk to the Kubernetes API.

use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig};

#[derive(Debug, Clone, clap::Args)]
pub struct ClusterArgs {
    /// kubeconfig to use (default: the in-cluster service account, then $KUBECONFIG or ~/.kube/config).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// nodefence's own namespace: its leader Lease and its pause switch live there.
    #[arg(long, env = "POD_NAMESPACE", default_value = "nodefence")]
    pub namespace: String,
}

impl ClusterArgs {
    /// A client from `--kubeconfig`, or inferred as kubectl would.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        client(self.kubeconfig.as_deref()).await
    }
}

async fn client(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?
        }
        None => kube::Config::infer().await?,
    };
    Ok(kube::Client::try_from(config)?)
}
