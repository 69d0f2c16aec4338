//! A `NodeFenceRemediation` as the controller keeps it between watch events: which
//! node it names, when it was made, whether its requester timed it out, and what its
//! status and finalizers say now.

use std::time::SystemTime;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;

use super::types::NodeFenceRemediation;
use super::{NODE_NAME_ANNOTATION, TAINT_FINALIZER, TIMED_OUT_ANNOTATION, condition};
use crate::engine::Request;

/// Which node a request is about, as far as the object itself says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestTarget {
    /// Named (NodeHealthCheck's annotation, or the object's own name).
    Node(String),
    /// Cluster API: the request is named after a Machine and owned by it; the node is
    /// the Machine's `status.nodeRef` (read at the owner reference's `apiVersion`).
    Machine {
        namespace: String,
        name: String,
        api_version: String,
    },
}

/// The API group of Cluster API's Machines.
pub const CLUSTER_API_GROUP: &str = "cluster.x-k8s.io";

/// What the controller keeps of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct KeptRequest {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub target: RequestTarget,
    /// Its creationTimestamp (the API server's clock).
    pub created: SystemTime,
    /// The value of NodeHealthCheck's timeout annotation, if set.
    pub timed_out: Option<String>,
    /// Being deleted (its requester found the node healthy, or a person deleted it).
    pub deleting: bool,
    /// It carries nodefence's finalizer.
    pub finalizer: bool,
    /// Its finalizers, to write them back with one added or removed.
    pub finalizers: Vec<String>,
    pub resource_version: Option<String>,
    pub generation: Option<i64>,
    /// `status.nodeName` and `status.conditions` as last read.
    pub status_node: Option<String>,
    pub conditions: Vec<Condition>,
}

impl KeptRequest {
    /// `None` for an object without the metadata every stored object has (a name, a
    /// namespace, a uid).
    pub fn new(object: &NodeFenceRemediation) -> Option<Self> {
        let meta = &object.metadata;
        let name = meta.name.clone()?;
        let namespace = meta.namespace.clone()?;
        let uid = meta.uid.clone()?;
        let annotations = object.annotations();
        let named = annotations
            .get(NODE_NAME_ANNOTATION)
            .map(|n| n.trim())
            .filter(|n| !n.is_empty());
        let machine_owner = object.owner_references().iter().find(|o| {
            o.kind == "Machine"
                && o.api_version
                    .split_once('/')
                    .is_some_and(|(group, _)| group == CLUSTER_API_GROUP)
        });
        let target = match (named, machine_owner) {
            (Some(node), _) => RequestTarget::Node(node.to_string()),
            (None, Some(owner)) => RequestTarget::Machine {
                namespace: namespace.clone(),
                name: owner.name.clone(),
                api_version: owner.api_version.clone(),
            },
            (None, None) => RequestTarget::Node(name.clone()),
        };
        let finalizers = object.finalizers().to_vec();
        let status = object.status.clone().unwrap_or_default();
        Some(Self {
            target,
            created: meta
                .creation_timestamp
                .as_ref()
                .map_or_else(crate::clock::now, |t| SystemTime::from(t.0)),
            timed_out: annotations.get(TIMED_OUT_ANNOTATION).cloned(),
            deleting: meta.deletion_timestamp.is_some(),
            finalizer: finalizers.iter().any(|f| f == TAINT_FINALIZER),
            finalizers,
            resource_version: meta.resource_version.clone(),
            generation: meta.generation,
            status_node: status.node_name,
            conditions: status.conditions,
            namespace,
            name,
            uid,
        })
    }

    /// `NodeFenceRemediation ns/name`, for messages.
    pub fn describe(&self) -> String {
        format!("NodeFenceRemediation {}/{}", self.namespace, self.name)
    }

    /// `ns/name`, the key of the controller's map.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The condition of this type as last read.
    pub fn condition(&self, kind: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == kind)
    }

    /// nodefence already reported it done (`Succeeded=True`): a new leader does not
    /// serve it again (the node may have come back since).
    pub fn reported_succeeded(&self) -> bool {
        self.condition(condition::SUCCEEDED)
            .is_some_and(|c| c.status == "True")
    }

    /// The request as the engine sees it: `None` once served (unless timed out since:
    /// it still stops power commands, a power-on after fence among them) or being
    /// deleted (its requester found the node healthy).
    pub fn engine_request(&self) -> Option<Request> {
        if self.deleting || self.reported_succeeded() && self.timed_out.is_none() {
            return None;
        }
        Some(Request {
            uid: self.uid.clone(),
            by: self.describe(),
            since: self.created,
            timed_out: self.timed_out.is_some(),
        })
    }
}

/// Of several requests for one node, the one the engine follows: the latest one that
/// timed out, if any stands (its requester moved on to another remediator, which may
/// be working on the machine: no power command goes out behind it, whoever else
/// asks); else the earliest live one.
pub fn merged<'a>(requests: impl IntoIterator<Item = &'a KeptRequest>) -> Option<Request> {
    let all: Vec<Request> = requests
        .into_iter()
        .filter_map(KeptRequest::engine_request)
        .collect();
    all.iter()
        .filter(|r| r.timed_out)
        .max_by_key(|r| r.since)
        .or_else(|| all.iter().min_by_key(|r| r.since))
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

    fn request(name: &str) -> NodeFenceRemediation {
        let mut r = NodeFenceRemediation::new(name, Default::default());
        r.metadata.namespace = Some("nodefence".into());
        r.metadata.uid = Some(format!("uid-{name}"));
        r.metadata.creation_timestamp = Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).unwrap_or_default(),
        ));
        r
    }

    #[test]
    fn the_annotation_names_the_node_before_the_objects_name() {
        let mut r = request("worker-1-x7k2p");
        let kept = KeptRequest::new(&r).unwrap_or_else(|| panic!("kept"));
        assert_eq!(kept.target, RequestTarget::Node("worker-1-x7k2p".into()));
        r.metadata.annotations = Some(
            [(NODE_NAME_ANNOTATION.to_string(), " worker-1 ".to_string())]
                .into_iter()
                .collect(),
        );
        let kept = KeptRequest::new(&r).unwrap_or_else(|| panic!("kept"));
        assert_eq!(kept.target, RequestTarget::Node("worker-1".into()));
        assert_eq!(
            kept.describe(),
            "NodeFenceRemediation nodefence/worker-1-x7k2p"
        );
    }

    #[test]
    fn a_request_owned_by_a_cluster_api_machine_names_the_machine() {
        let mut r = request("md-0-abcde");
        r.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "cluster.x-k8s.io/v1beta1".into(),
            kind: "Machine".into(),
            name: "md-0-abcde".into(),
            uid: "m1".into(),
            ..Default::default()
        }]);
        let kept = KeptRequest::new(&r).unwrap_or_else(|| panic!("kept"));
        assert_eq!(
            kept.target,
            RequestTarget::Machine {
                namespace: "nodefence".into(),
                name: "md-0-abcde".into(),
                api_version: "cluster.x-k8s.io/v1beta1".into(),
            }
        );
        // A Machine of another API (OpenShift's machine.openshift.io) is not followed.
        r.metadata
            .owner_references
            .as_mut()
            .unwrap_or_else(|| panic!("refs"))[0]
            .api_version = "machine.openshift.io/v1beta1".into();
        let kept = KeptRequest::new(&r).unwrap_or_else(|| panic!("kept"));
        assert_eq!(kept.target, RequestTarget::Node("md-0-abcde".into()));
    }

    #[test]
    fn timed_out_deleted_and_succeeded_requests_as_the_engine_sees_them() {
        let mut r = request("worker-1");
        let kept = KeptRequest::new(&r).unwrap_or_else(|| panic!("kept"));
        let live = kept.engine_request().unwrap_or_else(|| panic!("live"));
        assert!(!live.timed_out);
        assert_eq!(live.uid, "uid-worker-1");
        r.metadata.annotations = Some(
            [(
                TIMED_OUT_ANNOTATION.to_string(),
                "2026-11-27T00:00:00Z".to_string(),
            )]
            .into_iter()
            .collect(),
        );
        let timed_out = KeptRequest::new(&r).unwrap_or_else(|| panic!("kept"));
        assert!(timed_out.engine_request().is_some_and(|e| e.timed_out));
        // Both stand: power stays stopped (simulation seeds 15 and 185: another
        // requester's live request let a power-on out behind the next remediator).
        let mut other = kept.clone();
        other.uid = "uid-2".into();
        assert_eq!(
            merged([&timed_out, &other]).map(|r| r.timed_out),
            Some(true)
        );
        assert_eq!(
            merged([&other, &timed_out]).map(|r| r.timed_out),
            Some(true)
        );
        assert_eq!(merged([&other]).map(|r| r.timed_out), Some(false));
        assert_eq!(merged([&timed_out]).map(|r| r.timed_out), Some(true));
        let mut deleting = kept.clone();
        deleting.deleting = true;
        assert_eq!(deleting.engine_request(), None);
        let mut done = kept;
        done.conditions = vec![Condition {
            type_: condition::SUCCEEDED.into(),
            status: "True".into(),
            reason: "Released".into(),
            message: String::new(),
            last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            observed_generation: None,
        }];
        assert_eq!(done.engine_request(), None, "served by an earlier leader");
        // Served, then timed out (by a requester other than NodeHealthCheck, which
        // leaves a succeeded request alone): it still stops power commands.
        done.timed_out = Some("2026-11-27T00:01:00Z".into());
        assert!(done.engine_request().is_some_and(|e| e.timed_out));
    }
}
