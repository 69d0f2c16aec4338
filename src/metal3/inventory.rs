//! Inventory entries built from BareMetalHosts, and their merge with the inventory
//! file's.
//!
//! For every Node matched to a BareMetalHost ([`super::mapping`]) in the namespaces
//! `[metal3] namespaces` names, an entry: the BMC from `spec.bmc.address`
//! ([`super::address`]), the credentials from the Secret `spec.bmc.credentialsName`
//! in the host's namespace (keys `username` and `password`, as Metal3 stores them),
//! left pending and read exactly as a `password_secret` is
//! ([`crate::config::resolve_secrets`]: each Secret once, every problem named, no value
//! ever shown). `disableCertificateVerification` is honoured only with `[metal3]
//! allow_insecure = true`; otherwise that host gets no entry.
//!
//! The inventory file wins: a node written there keeps its entry. But a machine whose
//! BareMetalHost is managed by Metal3 (not detached) has its power asked of Metal3
//! whichever entry describes its BMC ([`NodeTarget::metal3_host`]): Ironic's power
//! sync would undo a power-off sent behind its back.
//!
//! Reading needs cluster access: the loader (and `validate` without `--cluster`)
//! works offline and leaves this to [`discover`], called by `run` at start-up, on
//! every reload and every `[metal3] resync_interval` (a changed [`fingerprint`] is a
//! reload), by `status`, `explain` and `validate --cluster`.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::Node;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Api, Client};
use secrecy::SecretString;

use super::address::{self, BmcAccess};
use super::host::{BareMetalHost, HostRef};
use super::mapping::{self, Chain, HostFacts, MatchedBy, NodeFacts};
use crate::config::{
    Config, Credential, IpmiTarget, Metal3Settings, NodeTarget, Origin, PowerSource, RedfishAuth,
    RedfishTarget, SecretRef, SecretSource, Timeouts, TlsSettings,
};

/// The keys of a BareMetalHost's credentials Secret.
pub const USERNAME_KEY: &str = "username";
pub const PASSWORD_KEY: &str = "password";

/// What the BareMetalHosts gave.
#[derive(Debug, Clone, Default)]
pub struct Discovery {
    /// One entry per Node whose host could be used, origin
    /// [`Origin::BareMetalHost`].
    pub entries: Vec<NodeTarget>,
    /// Every Node matched to a host Metal3 manages (not detached): its power goes
    /// through Metal3, whichever entry describes its BMC.
    pub managed: BTreeMap<String, HostRef>,
    /// How each matched Node was found.
    pub matched: BTreeMap<String, (HostRef, MatchedBy)>,
    /// Nodes and hosts that got no entry, and why (each a sentence with the fix).
    pub problems: Vec<String>,
    /// Allowed but worth an operator's eye.
    pub warnings: Vec<String>,
    /// Node → the `resourceVersion` of its host's credentials Secret as Metal3 last
    /// recorded it ([`BareMetalHost::credentials_version`]), for the nodes whose
    /// host has one: a rotated password changes the [`fingerprint`], so the running
    /// configuration reads the Secret again.
    pub credentials_versions: BTreeMap<String, String>,
}

/// The BareMetalHosts could not be read at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DiscoverError {
    pub message: String,
}

/// The entries for `nodes` from `hosts` (pure: everything already read).
pub fn entries(
    settings: &Metal3Settings,
    hosts: &[BareMetalHost],
    nodes: &[NodeFacts],
    chain: &Chain,
) -> Discovery {
    let facts: Vec<HostFacts> = hosts.iter().filter_map(host_facts).collect();
    let by_ref: BTreeMap<HostRef, &BareMetalHost> = hosts
        .iter()
        .filter_map(|h| Some((HostRef::of(h)?, h)))
        .collect();
    let mapped = mapping::map_nodes(nodes, &facts, chain);
    let mut out = Discovery {
        problems: mapped.problems.iter().map(ToString::to_string).collect(),
        ..Discovery::default()
    };
    for (node, (href, _)) in &mapped.nodes {
        let Some(host) = by_ref.get(href) else {
            continue;
        };
        if host.detached() {
            out.warnings.push(format!(
                "node \"{node}\": BareMetalHost {href} is detached from Ironic: its power is \
                 controlled directly, as Metal3 does not manage it"
            ));
        } else {
            out.managed.insert(node.clone(), href.clone());
            if host.spec.disable_power_off {
                out.warnings.push(format!(
                    "node \"{node}\": BareMetalHost {href} has spec.disablePowerOff: Metal3 \
                     reboots it instead of powering it off, so nodefence can never prove it \
                     Off and will not fence it (clear disablePowerOff to let nodefence fence it)"
                ));
            }
        }
        match target(settings, node, href, host) {
            Ok((entry, warning)) => {
                out.warnings.extend(warning);
                out.entries.push(entry);
                if let Some(version) = host.credentials_version() {
                    out.credentials_versions
                        .insert(node.clone(), version.to_string());
                }
            }
            Err(problem) => out.problems.push(format!("node \"{node}\": {problem}")),
        }
    }
    out.matched = mapped.nodes;
    out
}

/// A host's facts for the mapping (`None` without a name or namespace).
fn host_facts(host: &BareMetalHost) -> Option<HostFacts> {
    Some(HostFacts {
        host: HostRef::of(host)?,
        uid: host.metadata.uid.clone(),
        metal3_machine: metal3_machine(host).map(|(ns, name, _)| (ns, name)),
    })
}

/// The Metal3Machine a host's `spec.consumerRef` names: namespace, name, apiVersion.
fn metal3_machine(host: &BareMetalHost) -> Option<(String, String, String)> {
    let c = host.spec.consumer_ref.as_ref()?;
    let api_version = c.api_version.clone()?;
    let group = api_version.split('/').next()?;
    if c.kind.as_deref() != Some("Metal3Machine") || group != mapping::CAPM3_GROUP {
        return None;
    }
    let ns = c
        .namespace
        .clone()
        .or_else(|| host.metadata.namespace.clone())?;
    Some((ns, c.name.clone()?, api_version))
}

/// The entry of `node` on `host`, and a warning; Err: why it has none.
fn target(
    settings: &Metal3Settings,
    node: &str,
    href: &HostRef,
    host: &BareMetalHost,
) -> Result<(NodeTarget, Option<String>), String> {
    let Some(bmc) = host.spec.bmc.as_ref() else {
        return Err(format!(
            "BareMetalHost {href} has no spec.bmc: add its BMC there, or write the node in the \
             inventory"
        ));
    };
    let parsed = address::parse(href, &bmc.address).map_err(|e| e.to_string())?;
    if bmc.credentials_name.trim().is_empty() {
        return Err(format!(
            "BareMetalHost {href} has no spec.bmc.credentialsName: name the Secret with its \
             BMC's username and password"
        ));
    }
    let credential = Credential {
        username: String::new(),
        password: SecretString::from(String::new()),
        source: SecretSource::SecretPending(SecretRef {
            namespace: Some(href.namespace.clone()),
            name: bmc.credentials_name.clone(),
            password_key: PASSWORD_KEY.into(),
            username_key: Some(USERNAME_KEY.into()),
            written_at: format!("BareMetalHost {href} spec.bmc.credentialsName"),
        }),
    };
    let mut warning = None;
    let power = match parsed.access {
        BmcAccess::Redfish {
            endpoint,
            system_id,
        } => {
            let insecure = bmc.disable_certificate_verification && endpoint.scheme() == "https";
            if insecure && !settings.allow_insecure {
                return Err(format!(
                    "BareMetalHost {href} sets spec.bmc.disableCertificateVerification, and \
                     nodefence verifies BMC certificates: give the CA that signed it as \
                     [metal3] ca_file (and clear disableCertificateVerification), or accept \
                     unverified BMCs with [metal3] allow_insecure = true"
                ));
            }
            if insecure {
                warning = Some(format!(
                    "node \"{node}\": BareMetalHost {href}: disableCertificateVerification is \
                     honoured ([metal3] allow_insecure): the BMC's TLS certificate is not verified"
                ));
            }
            PowerSource::Redfish(RedfishTarget {
                endpoint,
                system_id,
                credential,
                auth: RedfishAuth::Auto,
                tls: TlsSettings {
                    ca_file: settings.ca_file.clone().filter(|_| !insecure),
                    insecure,
                    fingerprint: None,
                },
                timeouts: Timeouts::default(),
            })
        }
        BmcAccess::Ipmi {
            address,
            port,
            privilege,
        } => PowerSource::Ipmi(IpmiTarget {
            address,
            port,
            credential,
            cipher_suite: None,
            privilege,
            kg: None,
            timeouts: Timeouts::default(),
        }),
    };
    Ok((
        NodeTarget {
            name: node.to_string(),
            origin: Origin::BareMetalHost(href.clone()),
            metal3_host: (!host.detached()).then(|| href.clone()),
            group: None,
            power,
            fallback: Vec::new(),
            policy: settings.policy.clone(),
        },
        warning,
    ))
}

/// What a merge did, for `validate` and the logs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Merged {
    /// Nodes added from BareMetalHosts.
    pub added: Vec<String>,
    /// Nodes the inventory file describes though a BareMetalHost does too.
    pub overridden: Vec<String>,
}

impl fmt::Display for Merged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} node(s) from BareMetalHosts, {} overridden by the inventory file",
            self.added.len(),
            self.overridden.len()
        )
    }
}

/// Adds `discovery`'s entries to `config`'s inventory (an entry of the file wins)
/// and marks every Metal3-managed node's power as Metal3's.
pub fn merge(config: &mut Config, discovery: &Discovery) -> Merged {
    let mut merged = Merged::default();
    for entry in &discovery.entries {
        if config.inventory.nodes.contains_key(&entry.name) {
            merged.overridden.push(entry.name.clone());
            continue;
        }
        merged.added.push(entry.name.clone());
        config
            .inventory
            .nodes
            .insert(entry.name.clone(), entry.clone());
    }
    for (node, host) in &discovery.managed {
        if let Some(target) = config.inventory.nodes.get_mut(node) {
            target.metal3_host = Some(host.clone());
        }
    }
    merged
}

/// What the entries of a discovery depend on, hashed: each entry (node, host, BMC
/// target, the Secret it names; never a credential, none is read yet), the version
/// of that Secret Metal3 last recorded (so a rotated password is a change), the nodes
/// whose power Metal3 manages, and the problems. The daemon re-reads the hosts when
/// one changes (it watches them) and every `[metal3] resync_interval`, and reloads
/// when this changes (a host added, removed or changed, a Node matched to one, a
/// Secret rotated); comparing within one process only.
pub fn fingerprint(discovery: &Discovery) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    for entry in &discovery.entries {
        // SecretPending credentials: the Secret's name, no value.
        format!(
            "{}|{}|{:?}|{:?}",
            entry.name, entry.origin, entry.metal3_host, entry.power
        )
        .hash(&mut hasher);
    }
    format!(
        "{:?}|{:?}|{:?}",
        discovery.managed, discovery.problems, discovery.credentials_versions
    )
    .hash(&mut hasher);
    hasher.finish()
}

/// Reads the BareMetalHosts of `settings.namespaces`, the Nodes, and the Cluster API
/// objects between them, and builds the entries. A host or Node that cannot be
/// used is a problem in the result; Err only when the hosts or Nodes cannot be
/// listed at all.
pub async fn discover(
    client: &Client,
    settings: &Metal3Settings,
) -> Result<Discovery, DiscoverError> {
    let mut hosts = Vec::new();
    for ns in &settings.namespaces {
        let api: Api<BareMetalHost> = Api::namespaced(client.clone(), ns);
        let list = api.list(&ListParams::default()).await.map_err(|e| {
            unreadable(
                &e,
                &format!("list BareMetalHosts (metal3.io) in namespace {ns}"),
            )
        })?;
        hosts.extend(list.items);
    }
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| unreadable(&e, "list Nodes"))?;
    let nodes: Vec<NodeFacts> = nodes.items.iter().map(node_facts).collect();
    // The chain is read only for hosts no Node names itself (annotation, providerID).
    let named = mapping::map_nodes(
        &nodes,
        &hosts.iter().filter_map(host_facts).collect::<Vec<_>>(),
        &Chain::default(),
    );
    let taken: Vec<&HostRef> = named.nodes.values().map(|(h, _)| h).collect();
    let mut chain = Chain::default();
    let mut chain_problems = Vec::new();
    for host in &hosts {
        let (Some(href), Some((ns, m3m, api_version))) = (HostRef::of(host), metal3_machine(host))
        else {
            continue;
        };
        if taken.contains(&&href) {
            continue;
        }
        match machine_of(client, &ns, &m3m, &api_version).await {
            Ok(Some((machine, node))) => {
                chain
                    .machine_of
                    .insert((ns.clone(), m3m.clone()), machine.clone());
                if let Some(node) = node {
                    chain.node_of.insert((ns.clone(), machine), node);
                }
            }
            Ok(None) => {}
            Err(e) => chain_problems.push(format!("BareMetalHost {href}: {e}")),
        }
    }
    let mut discovery = entries(settings, &hosts, &nodes, &chain);
    discovery.problems.extend(chain_problems);
    Ok(discovery)
}

/// A Node's facts for the mapping.
pub fn node_facts(node: &Node) -> NodeFacts {
    NodeFacts {
        name: node.metadata.name.clone().unwrap_or_default(),
        provider_id: node.spec.as_ref().and_then(|s| s.provider_id.clone()),
        annotation: node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(mapping::NODE_ANNOTATION))
            .cloned(),
    }
}

/// The Machine that owns Metal3Machine `ns/m3m`, and its node; `None` when it has no
/// owner Machine (yet).
async fn machine_of(
    client: &Client,
    ns: &str,
    m3m: &str,
    api_version: &str,
) -> Result<Option<(String, Option<String>)>, String> {
    let version = api_version.split('/').nth(1).unwrap_or("v1beta1");
    let m3m_api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            mapping::CAPM3_GROUP,
            version,
            "Metal3Machine",
        )),
    );
    let m3m_obj = m3m_api.get_opt(m3m).await.map_err(|e| {
        format!(
            "cannot read Metal3Machine {ns}/{m3m}: {}",
            crate::untrusted::field(&e.to_string())
        )
    })?;
    let Some(m3m_obj) = m3m_obj else {
        return Ok(None);
    };
    let owner = m3m_obj
        .metadata
        .owner_references
        .unwrap_or_default()
        .into_iter()
        .find(|o| {
            o.kind == "Machine"
                && o.api_version.split('/').next() == Some(mapping::CLUSTER_API_GROUP)
        });
    let Some(owner) = owner else {
        return Ok(None);
    };
    let version = owner.api_version.split('/').nth(1).unwrap_or("v1beta1");
    let machines: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            mapping::CLUSTER_API_GROUP,
            version,
            "Machine",
        )),
    );
    let machine = machines.get_opt(&owner.name).await.map_err(|e| {
        format!(
            "cannot read Machine {ns}/{}: {}",
            owner.name,
            crate::untrusted::field(&e.to_string())
        )
    })?;
    let node = machine.and_then(|m| {
        m.data
            .pointer("/status/nodeRef/name")
            .and_then(serde_json::Value::as_str)
            .map(str::to_string)
    });
    Ok(Some((owner.name, node)))
}

fn unreadable(e: &kube::Error, what: &str) -> DiscoverError {
    let message = match e {
        kube::Error::Api(s) if s.code == 403 => format!(
            "cannot {what}: forbidden (403); grant it with the Kustomize component \
             deploy/components/metal3 (a Role in each BareMetalHost namespace)"
        ),
        kube::Error::Api(s) if s.code == 404 => format!(
            "cannot {what}: the API server does not serve it (404): is Metal3's \
             BareMetalHost CRD installed?"
        ),
        other => format!(
            "cannot {what}: {}",
            crate::untrusted::field(&other.to_string())
        ),
    };
    DiscoverError { message }
}

#[cfg(test)]
mod tests;
