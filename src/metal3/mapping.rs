//! Which Node runs on which BareMetalHost.
//!
//! Three ways, in the order they are trusted:
//!
//! 1. An annotation on the Node, written by the operator:
//!    `nodefence.io/baremetalhost: <namespace>/<name>` ([`NODE_ANNOTATION`]).
//! 2. The Node's `spec.providerID` as Cluster API Provider Metal3 sets it:
//!    `metal3://<namespace>/<bmh-name>/<metal3machine-name>`, or the legacy
//!    `metal3://<bmh-uid>` of older releases.
//! 3. The Cluster API chain: the BareMetalHost's `spec.consumerRef` names a
//!    Metal3Machine (`infrastructure.cluster.x-k8s.io`), whose owner reference names
//!    its Machine (`cluster.x-k8s.io`), whose `status.nodeRef` names the Node.
//!
//! Ways that disagree for one Node, or two Nodes that claim one host, are problems:
//! that Node (those Nodes) get no entry rather than a guess. Which machine actually
//! answers at the BMC is still proven by its UUID against the Node's `systemUUID`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::host::HostRef;

/// The annotation an operator puts on a Node to name its BareMetalHost.
pub const NODE_ANNOTATION: &str = "nodefence.io/baremetalhost";

/// The providerID scheme of Cluster API Provider Metal3.
pub const PROVIDER_ID_PREFIX: &str = "metal3://";

/// The Metal3Machine's API group.
pub const CAPM3_GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// Cluster API's group (Machine).
pub const CLUSTER_API_GROUP: &str = "cluster.x-k8s.io";

/// A host as a Node's providerID names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderHost {
    /// `metal3://<namespace>/<bmh-name>/<m3m-name>`.
    Named(HostRef),
    /// `metal3://<bmh-uid>` (CAPM3 before v1.x's new format).
    Uid(String),
}

/// Reads a Node's providerID; `None` when it is not Metal3's (another cloud, or none).
/// Err: a `metal3://` providerID of neither form.
pub fn provider_host(provider_id: &str) -> Option<Result<ProviderHost, String>> {
    let rest = provider_id.strip_prefix(PROVIDER_ID_PREFIX)?;
    let parts: Vec<&str> = rest.split('/').collect();
    Some(match parts.as_slice() {
        [ns, bmh, m3m] if !ns.is_empty() && !bmh.is_empty() && !m3m.is_empty() => {
            Ok(ProviderHost::Named(HostRef::new(*ns, *bmh)))
        }
        [uid] if !uid.is_empty() => Ok(ProviderHost::Uid((*uid).to_string())),
        _ => Err(format!(
            "providerID {provider_id:?} is neither metal3://<namespace>/<host>/<metal3machine> \
             nor metal3://<host-uid>"
        )),
    })
}

/// Reads [`NODE_ANNOTATION`]'s value: `<namespace>/<name>`.
pub fn annotation_host(value: &str) -> Result<HostRef, String> {
    match value.trim().split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok(HostRef::new(ns, name))
        }
        _ => Err(format!(
            "annotation {NODE_ANNOTATION}={value:?} is not <namespace>/<name> of a BareMetalHost"
        )),
    }
}

/// What the mapping needs of a Node.
#[derive(Debug, Clone, Default)]
pub struct NodeFacts {
    pub name: String,
    pub provider_id: Option<String>,
    /// The value of [`NODE_ANNOTATION`], if set.
    pub annotation: Option<String>,
}

/// What the mapping needs of a BareMetalHost.
#[derive(Debug, Clone)]
pub struct HostFacts {
    pub host: HostRef,
    pub uid: Option<String>,
    /// `spec.consumerRef` when it names a Metal3Machine: its namespace and name.
    pub metal3_machine: Option<(String, String)>,
}

/// The Cluster API objects between a host and its Node: each Metal3Machine's owner
/// Machine, each Machine's node.
#[derive(Debug, Clone, Default)]
pub struct Chain {
    /// Metal3Machine (namespace, name) → its owner Machine's name (same namespace).
    pub machine_of: BTreeMap<(String, String), String>,
    /// Machine (namespace, name) → `status.nodeRef.name`.
    pub node_of: BTreeMap<(String, String), String>,
}

/// How a Node was matched to its host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MatchedBy {
    Annotation,
    ProviderId,
    ConsumerRef,
}

impl fmt::Display for MatchedBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MatchedBy::Annotation => "the Node's annotation nodefence.io/baremetalhost",
            MatchedBy::ProviderId => "the Node's providerID",
            MatchedBy::ConsumerRef => "consumerRef → Metal3Machine → Machine → nodeRef",
        })
    }
}

/// A problem that leaves a Node (or a host) without an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappingProblem {
    /// The Node, when the problem is one Node's.
    pub node: Option<String>,
    pub message: String,
}

impl fmt::Display for MappingProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.node {
            Some(n) => write!(f, "node \"{n}\": {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// The result: each Node's host and how it was found, and every problem.
#[derive(Debug, Clone, Default)]
pub struct Mapping {
    pub nodes: BTreeMap<String, (HostRef, MatchedBy)>,
    pub problems: Vec<MappingProblem>,
}

/// Matches `nodes` to `hosts` (only hosts in this list can be matched: the ones in
/// the namespaces nodefence reads).
pub fn map_nodes(nodes: &[NodeFacts], hosts: &[HostFacts], chain: &Chain) -> Mapping {
    let known: BTreeSet<&HostRef> = hosts.iter().map(|h| &h.host).collect();
    let by_uid: BTreeMap<&str, &HostRef> = hosts
        .iter()
        .filter_map(|h| Some((h.uid.as_deref()?, &h.host)))
        .collect();
    // Node name → host, through the consumerRef chain.
    let mut chained: BTreeMap<&str, Vec<&HostRef>> = BTreeMap::new();
    for h in hosts {
        let Some((ns, m3m)) = &h.metal3_machine else {
            continue;
        };
        let node = chain
            .machine_of
            .get(&(ns.clone(), m3m.clone()))
            .and_then(|machine| chain.node_of.get(&(ns.clone(), machine.clone())));
        if let Some(node) = node {
            chained.entry(node.as_str()).or_default().push(&h.host);
        }
    }
    let mut out = Mapping::default();
    let mut problem = |node: &str, message: String| {
        out.problems.push(MappingProblem {
            node: Some(node.to_string()),
            message,
        })
    };
    let mut found: BTreeMap<String, (HostRef, MatchedBy)> = BTreeMap::new();
    for node in nodes {
        let mut claims: Vec<(HostRef, MatchedBy)> = Vec::new();
        if let Some(value) = &node.annotation {
            match annotation_host(value) {
                Ok(h) => claims.push((h, MatchedBy::Annotation)),
                Err(e) => {
                    problem(&node.name, e);
                    continue;
                }
            }
        }
        match node.provider_id.as_deref().and_then(provider_host) {
            None => {}
            Some(Ok(ProviderHost::Named(h))) => claims.push((h, MatchedBy::ProviderId)),
            Some(Ok(ProviderHost::Uid(uid))) => match by_uid.get(uid.as_str()) {
                Some(h) => claims.push(((*h).clone(), MatchedBy::ProviderId)),
                None => problem(
                    &node.name,
                    format!(
                        "providerID metal3://{uid} names a BareMetalHost by its uid, and no \
                         BareMetalHost nodefence reads has it (is its namespace in [metal3] \
                         namespaces?)"
                    ),
                ),
            },
            Some(Err(e)) => problem(&node.name, e),
        }
        match chained.get(node.name.as_str()).map(Vec::as_slice) {
            None | Some([]) => {}
            Some([h]) => claims.push(((*h).clone(), MatchedBy::ConsumerRef)),
            Some(many) => {
                let list: Vec<String> = many.iter().map(ToString::to_string).collect();
                problem(
                    &node.name,
                    format!(
                        "the consumerRef chain of several BareMetalHosts ends at this Node: {}",
                        list.join(", ")
                    ),
                );
                continue;
            }
        }
        let Some((first, by)) = claims.first().cloned() else {
            continue;
        };
        if let Some((other, other_by)) = claims.iter().find(|(h, _)| *h != first) {
            problem(
                &node.name,
                format!(
                    "{by} names BareMetalHost {first} but {other_by} names {other}: not \
                     guessing (correct the annotation, or the host's consumerRef)"
                ),
            );
            continue;
        }
        if !known.contains(&first) {
            problem(
                &node.name,
                format!(
                    "{by} names BareMetalHost {first}, which nodefence does not read (no such \
                     host, or its namespace is not in [metal3] namespaces)"
                ),
            );
            continue;
        }
        found.insert(node.name.clone(), (first, by));
    }
    // One host, one Node.
    let mut claimed: BTreeMap<&HostRef, Vec<&str>> = BTreeMap::new();
    for (node, (host, _)) in &found {
        claimed.entry(host).or_default().push(node);
    }
    let shared: BTreeSet<String> = claimed
        .iter()
        .filter(|(_, n)| n.len() > 1)
        .flat_map(|(host, nodes)| {
            let names = nodes.join(", ");
            out.problems.push(MappingProblem {
                node: None,
                message: format!(
                    "BareMetalHost {host} is claimed by several Nodes ({names}): none of them \
                     gets an entry from it"
                ),
            });
            nodes.iter().map(|n| (*n).to_string())
        })
        .collect();
    found.retain(|node, _| !shared.contains(node));
    out.nodes = found;
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn host(ns: &str, name: &str, uid: &str, m3m: Option<&str>) -> HostFacts {
        HostFacts {
            host: HostRef::new(ns, name),
            uid: Some(uid.into()),
            metal3_machine: m3m.map(|m| (ns.to_string(), m.to_string())),
        }
    }

    fn node(name: &str, provider_id: Option<&str>, annotation: Option<&str>) -> NodeFacts {
        NodeFacts {
            name: name.into(),
            provider_id: provider_id.map(str::to_string),
            annotation: annotation.map(str::to_string),
        }
    }

    #[test]
    fn provider_ids_of_both_capm3_forms() {
        assert_eq!(
            provider_host("metal3://metal3/worker-1/test1-workers-abcde"),
            Some(Ok(ProviderHost::Named(HostRef::new("metal3", "worker-1"))))
        );
        assert_eq!(
            provider_host("metal3://7f0b9c4e-2bb4-4b4e-9d3f-0a1b2c3d4e5f"),
            Some(Ok(ProviderHost::Uid(
                "7f0b9c4e-2bb4-4b4e-9d3f-0a1b2c3d4e5f".into()
            )))
        );
        assert_eq!(provider_host("aws:///eu-west-1a/i-0123456789abcdef0"), None);
        assert!(provider_host("metal3://a/b").is_some_and(|r| r.is_err()));
        assert!(provider_host("metal3://").is_some_and(|r| r.is_err()));
        assert!(provider_host("metal3://ns//m3m").is_some_and(|r| r.is_err()));
    }

    #[test]
    fn annotations_name_namespace_and_host() {
        assert_eq!(
            annotation_host("metal3/worker-1").unwrap(),
            HostRef::new("metal3", "worker-1")
        );
        for bad in ["worker-1", "/worker-1", "metal3/", "a/b/c"] {
            assert!(annotation_host(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn each_way_finds_its_host() {
        let hosts = [
            host("metal3", "bmh-a", "uid-a", None),
            host("metal3", "bmh-b", "uid-b", None),
            host("metal3", "bmh-c", "uid-c", Some("m3m-c")),
            host("metal3", "bmh-d", "uid-d", None),
        ];
        let mut chain = Chain::default();
        chain
            .machine_of
            .insert(("metal3".into(), "m3m-c".into()), "machine-c".into());
        chain
            .node_of
            .insert(("metal3".into(), "machine-c".into()), "node-c".into());
        let nodes = [
            node("node-a", Some("metal3://metal3/bmh-a/m3m-a"), None),
            node("node-b", Some("metal3://uid-b"), None),
            node("node-c", None, None),
            node("node-d", Some("kind://docker/x"), Some("metal3/bmh-d")),
            node("node-e", None, None),
        ];
        let m = map_nodes(&nodes, &hosts, &chain);
        assert!(m.problems.is_empty(), "{:?}", m.problems);
        let got: Vec<(String, String, MatchedBy)> = m
            .nodes
            .iter()
            .map(|(n, (h, by))| (n.clone(), h.to_string(), *by))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "node-a".into(),
                    "metal3/bmh-a".into(),
                    MatchedBy::ProviderId
                ),
                (
                    "node-b".into(),
                    "metal3/bmh-b".into(),
                    MatchedBy::ProviderId
                ),
                (
                    "node-c".into(),
                    "metal3/bmh-c".into(),
                    MatchedBy::ConsumerRef
                ),
                (
                    "node-d".into(),
                    "metal3/bmh-d".into(),
                    MatchedBy::Annotation
                ),
            ]
        );
    }

    #[test]
    fn agreeing_ways_are_one_match_and_disagreeing_ones_none() {
        let hosts = [
            host("metal3", "bmh-a", "uid-a", Some("m3m-a")),
            host("metal3", "bmh-b", "uid-b", None),
        ];
        let mut chain = Chain::default();
        chain
            .machine_of
            .insert(("metal3".into(), "m3m-a".into()), "machine-a".into());
        chain
            .node_of
            .insert(("metal3".into(), "machine-a".into()), "node-a".into());
        // All three agree.
        let m = map_nodes(
            &[node(
                "node-a",
                Some("metal3://metal3/bmh-a/m3m-a"),
                Some("metal3/bmh-a"),
            )],
            &hosts,
            &chain,
        );
        assert_eq!(
            m.nodes["node-a"],
            (HostRef::new("metal3", "bmh-a"), MatchedBy::Annotation)
        );
        // The annotation says b, the chain says a: no entry, a problem naming both.
        let m = map_nodes(
            &[node("node-a", None, Some("metal3/bmh-b"))],
            &hosts,
            &chain,
        );
        assert!(m.nodes.is_empty());
        let text = m.problems[0].to_string();
        assert!(
            text.starts_with("node \"node-a\"")
                && text.contains("metal3/bmh-a")
                && text.contains("metal3/bmh-b"),
            "{text}"
        );
    }

    #[test]
    fn unknown_hosts_and_shared_hosts_give_no_entry() {
        let hosts = [host("metal3", "bmh-a", "uid-a", None)];
        let m = map_nodes(
            &[
                node("x", Some("metal3://other-ns/bmh-z/m"), None),
                node("y", Some("metal3://uid-zzz"), None),
                node("z", None, Some("not-a-ref")),
            ],
            &hosts,
            &Chain::default(),
        );
        assert!(m.nodes.is_empty());
        assert_eq!(m.problems.len(), 3, "{:?}", m.problems);
        assert!(m.problems[0].message.contains("[metal3] namespaces"));
        assert!(m.problems[1].message.contains("uid"));
        let m = map_nodes(
            &[
                node("n1", Some("metal3://metal3/bmh-a/m1"), None),
                node("n2", None, Some("metal3/bmh-a")),
            ],
            &hosts,
            &Chain::default(),
        );
        assert!(m.nodes.is_empty(), "{:?}", m.nodes);
        assert!(
            m.problems[0]
                .message
                .contains("claimed by several Nodes (n1, n2)")
        );
    }
}
