//! The requests' gate on power commands: a fresh read of the remediation requests
//! right before a power command (off, on, or the watchdog level's mark), which
//! refuses the command while a request for the node stands timed out.
//!
//! The engine already stops power commands for a timed-out request it knows of
//! ([`crate::engine::Request::timed_out`]). It knows of a request only through the
//! watch, though, and a watch can lag by a minute while the API server errs (seed
//! 1219: NodeHealthCheck made a request and timed it out while nodefence's watch was
//! failing; nodefence, which had detected the node itself, powered it back on after
//! its release, under the next remediator's feet). As with the pause switch, the
//! command waits for what the API server says now, and a read that fails refuses it.

use kube::api::ListParams;
use kube::{Api, Client};

use super::request::{KeptRequest, RequestTarget};
use super::types::NodeFenceRemediation;

/// Reads the requests of the whole cluster (as the controller's watch does).
#[derive(Clone)]
pub struct TimedOutRequests {
    api: Api<NodeFenceRemediation>,
}

impl TimedOutRequests {
    pub fn new(client: Client) -> Self {
        Self {
            api: Api::all(client),
        }
    }

    /// `Ok` unless a request for `node` stands timed out now, or the requests cannot
    /// be read; then why not, ending with `outcome` ("power-on not sent").
    pub async fn allows(&self, node: &str, outcome: &str) -> Result<(), String> {
        let items = crate::cluster::fresh::just_before(
            "the remediation requests",
            outcome,
            async { Ok(self.api.list(&ListParams::default()).await?.items) },
            // No CRD: no request can stand.
            |e| matches!(e, kube::Error::Api(s) if s.code == 404).then(Vec::new),
        )
        .await?;
        let requests: Vec<KeptRequest> = items.iter().filter_map(KeptRequest::new).collect();
        match timed_out_for(&requests, node) {
            Some(r) => Err(format!(
                "{} timed out ({}): its requester moved on to another remediator: {outcome}",
                r.describe(),
                super::TIMED_OUT_ANNOTATION
            )),
            None => Ok(()),
        }
    }
}

/// The first request for `node` that stands timed out: named after the node (or
/// annotated with it), or reported for it in its status (a Cluster API request, whose
/// Machine the controller resolved). One being deleted no longer stands.
fn timed_out_for<'a>(requests: &'a [KeptRequest], node: &str) -> Option<&'a KeptRequest> {
    requests.iter().find(|r| {
        !r.deleting
            && r.timed_out.is_some()
            && (matches!(&r.target, RequestTarget::Node(n) if n == node)
                || r.status_node.as_deref() == Some(node))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remediation::types::NodeFenceRemediationStatus;
    use crate::remediation::{NODE_NAME_ANNOTATION, TIMED_OUT_ANNOTATION};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn request(name: &str, annotations: &[(&str, &str)]) -> NodeFenceRemediation {
        let mut r = NodeFenceRemediation::new(name, Default::default());
        r.metadata.namespace = Some("nodefence".into());
        r.metadata.uid = Some(format!("uid-{name}"));
        r.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        r
    }

    fn kept(objects: &[NodeFenceRemediation]) -> Vec<KeptRequest> {
        objects.iter().filter_map(KeptRequest::new).collect()
    }

    const AT: &str = "2026-11-28T10:00:00Z";

    #[test]
    fn a_timed_out_request_for_the_node_refuses() {
        let all = kept(&[
            request("worker-1", &[]),
            request("worker-2", &[(TIMED_OUT_ANNOTATION, AT)]),
        ]);
        assert!(timed_out_for(&all, "worker-1").is_none());
        assert_eq!(
            timed_out_for(&all, "worker-2").map(|r| r.name.as_str()),
            Some("worker-2")
        );
        assert!(timed_out_for(&all, "worker-3").is_none());
    }

    #[test]
    fn the_node_is_taken_from_the_annotation_or_the_status() {
        let annotated = request(
            "worker-1-abcde",
            &[
                (NODE_NAME_ANNOTATION, "worker-1"),
                (TIMED_OUT_ANNOTATION, AT),
            ],
        );
        let mut machine = request("machine-7", &[(TIMED_OUT_ANNOTATION, AT)]);
        machine.status = Some(NodeFenceRemediationStatus {
            node_name: Some("worker-7".into()),
            ..Default::default()
        });
        let all = kept(&[annotated, machine]);
        assert!(timed_out_for(&all, "worker-1").is_some());
        assert!(timed_out_for(&all, "worker-7").is_some());
        assert!(timed_out_for(&all, "worker-1-abcde").is_none());
    }

    #[test]
    fn a_request_being_deleted_no_longer_stands() {
        let mut gone = request("worker-1", &[(TIMED_OUT_ANNOTATION, AT)]);
        gone.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert!(timed_out_for(&kept(&[gone]), "worker-1").is_none());
    }
}
