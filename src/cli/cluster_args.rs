//! Flags shared by the commands that talk to the Kubernetes API.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Node;
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::identity::NodeIdentity;

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

/// A client from this kubeconfig, or inferred as kubectl would.
pub(super) async fn client(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?
        }
        None => kube::Config::infer().await?,
    };
    Ok(crate::cluster::client(config)?)
}

/// For `status` and `fence`: reads the Kubernetes Secrets holding the BMC passwords of
/// `nodes` (every inventory node when empty), through the same client as `run`
/// (`--kubeconfig`, `--namespace`). Nothing touches the cluster unless one of those
/// nodes has a `password_secret`. Problems are printed; Err is the exit code (the
/// credentials concerned stay pending, and no driver is built from them).
pub(super) async fn read_secrets(
    config: &mut crate::config::Config,
    cluster: &ClusterArgs,
    nodes: &[String],
) -> Result<(), u8> {
    let wanted = |name: &str| nodes.is_empty() || nodes.iter().any(|n| n == name);
    let pending: Vec<String> = config
        .inventory
        .nodes
        .values()
        .filter(|t| wanted(&t.name) && t.pending_secret().is_some())
        .map(|t| t.name.clone())
        .collect();
    let Some(first) = pending.first() else {
        return Ok(());
    };
    let client = match cluster.client().await {
        Ok(c) => c,
        Err(e) => {
            let more = match pending.len() {
                1 => String::new(),
                n => format!(" and {} more nodes", n - 1),
            };
            eprintln!(
                "error: the BMC password of node {first}{more} is in a Kubernetes Secret \
                 (password_secret); reading it needs cluster access, but the Kubernetes client \
                 cannot be configured: {e:#}\n  help: pass --kubeconfig (and --namespace, \
                 nodefence's namespace, for Secrets named without one)"
            );
            return Err(super::exit::FAILED);
        }
    };
    // Only the nodes acted on: a broken Secret of another rack must not stop this.
    let all = std::mem::take(&mut config.inventory.nodes);
    let (selected, rest): (BTreeMap<_, _>, BTreeMap<_, _>) =
        all.into_iter().partition(|(name, _)| wanted(name));
    config.inventory.nodes = selected;
    let result = crate::config::resolve_secrets(config, &client, &cluster.namespace).await;
    config.inventory.nodes.extend(rest);
    result.map(drop).map_err(|e| {
        eprintln!("{e}");
        if e.is_access() {
            super::exit::FAILED
        } else {
            super::exit::CONFIG
        }
    })
}

/// `--cluster` for `status` and `validate`: the BMC identity cross-check.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct IdentityArgs {
    /// Also read the Nodes from the cluster and check that each node's power source
    /// controls the node's own machine (BMC UUID against the Node's systemUUID).
    /// Implied by --kubeconfig.
    #[arg(long = "cluster")]
    pub cluster: bool,
}

impl IdentityArgs {
    /// Whether to cross-check: `--cluster`, or a kubeconfig given explicitly.
    pub fn wanted(&self, access: &ClusterArgs) -> bool {
        self.cluster || access.kubeconfig.is_some()
    }
}

/// What the cluster says about every Node (one LIST), for the identity cross-check and
/// for drivers that find their machine through the Node.
/// Err is a sentence for the operator.
pub(super) async fn node_identities(
    access: &ClusterArgs,
) -> Result<BTreeMap<String, NodeIdentity>, String> {
    let client = access.client().await.map_err(|e| {
        format!(
            "cannot configure the Kubernetes client to read the cluster's Nodes (for the \
             identity cross-check, or for a machine named by its Node's providerID): {e:#} \
             (pass --kubeconfig)"
        )
    })?;
    let nodes = kube::Api::<Node>::all(client)
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("cannot list the cluster's Nodes: {e}"))?;
    Ok(nodes
        .items
        .iter()
        .filter_map(|n| Some((n.metadata.name.clone()?, NodeIdentity::from_node(n))))
        .collect())
}

/// What the cluster says about one Node, for `fence`'s identity check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum NodeLookup {
    /// The Node exists: what it says about its machine.
    Found(NodeIdentity),
    /// The cluster answered: no such Node.
    Absent,
    /// The cluster could not be asked or did not answer; a sentence for the operator.
    NoAccess(String),
}

/// Reads one Node (one GET) with the cluster access of `access`: `--kubeconfig`, or
/// found as kubectl finds it ($KUBECONFIG, ~/.kube/config, the in-cluster service
/// account).
pub(super) async fn node_lookup(access: &ClusterArgs, name: &str) -> NodeLookup {
    let client = match access.client().await {
        Ok(c) => c,
        Err(e) => {
            let looked = match &access.kubeconfig {
                Some(path) => format!("--kubeconfig {}", path.display()),
                None => "no --kubeconfig, and none found in $KUBECONFIG, ~/.kube/config or an \
                         in-cluster service account"
                    .to_string(),
            };
            return NodeLookup::NoAccess(format!("no cluster access ({looked}): {e:#}"));
        }
    };
    match kube::Api::<Node>::all(client).get_opt(name).await {
        Ok(Some(node)) => NodeLookup::Found(NodeIdentity::from_node(&node)),
        Ok(None) => NodeLookup::Absent,
        Err(e) => NodeLookup::NoAccess(format!("cannot read Node {name}: {e}")),
    }
}

/// For `status`, `fence` and `validate --cluster`: with `[metal3] hosts = true`, reads
/// the BareMetalHosts and adds their nodes to the inventory (the file's entries win;
/// a Metal3-managed machine's power goes through Metal3). Problems are printed.
/// `Ok(None)`: not configured; `Ok(Some(client))`: read, with this client (power
/// through Metal3 needs it); `Err(())`: could not be read (printed).
pub(super) async fn read_metal3_hosts(
    config: &mut crate::config::Config,
    cluster: &ClusterArgs,
) -> Result<Option<kube::Client>, ()> {
    if !config.agent.metal3.hosts {
        return Ok(None);
    }
    let client = match cluster.client().await {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "error: [metal3] hosts = true: reading the BareMetalHosts needs cluster access, \
                 but the Kubernetes client cannot be configured: {e:#}\n  help: pass \
                 --kubeconfig; the inventory file's nodes are used alone"
            );
            return Err(());
        }
    };
    let discovery = match crate::metal3::inventory::discover(&client, &config.agent.metal3).await {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}; the inventory file's nodes are used alone");
            return Err(());
        }
    };
    for warning in &discovery.warnings {
        eprintln!("warning: {warning}");
    }
    for problem in &discovery.problems {
        eprintln!("warning: no entry from Metal3: {problem}");
    }
    crate::metal3::inventory::merge(config, &discovery);
    Ok(Some(client))
}

/// The driver factory of `config` for a command, with power through Metal3 when the
/// BareMetalHosts were read with `metal3` (their client).
pub(super) fn factory(
    config: &crate::config::Config,
    metal3: Result<&Option<kube::Client>, &()>,
) -> crate::power::registry::DriverFactory {
    let factory =
        crate::power::registry::DriverFactory::new(config.agent.power.max_concurrent_requests)
            .with_confirm(config.agent.power.confirm);
    match metal3 {
        Ok(Some(client)) => factory.with_metal3(client.clone()),
        _ => factory,
    }
}
