//! The only code that writes to remediation requests: their status, and nodefence's
//! finalizer. And the one read a Cluster API request needs: its Machine's node.
//!
//! Only the leader writes. A finalizer change carries the resourceVersion it was
//! decided on (409 on any change in between, decided again on the next event), and
//! keeps every other finalizer.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use super::TAINT_FINALIZER;
use super::request::KeptRequest;
use super::types::NodeFenceRemediation;
use crate::cluster::leader::Leadership;

/// Why a write was not made.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("this replica is not the leader")]
    NotLeader,
    #[error("Kubernetes API: {0}")]
    Api(#[from] kube::Error),
}

/// Writes to the requests of one cluster.
#[derive(Clone)]
pub struct RequestWriter {
    client: Client,
    leadership: Leadership,
}

impl RequestWriter {
    pub fn new(client: Client, leadership: Leadership) -> Self {
        Self { client, leadership }
    }

    /// The same writer, writing only as `leadership` says (one term's view).
    pub fn in_term(&self, leadership: &Leadership) -> Self {
        Self::new(self.client.clone(), leadership.clone())
    }

    /// The client it writes with (the requests' gate reads with it too).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    fn api(&self, namespace: &str) -> Api<NodeFenceRemediation> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Replaces `status.nodeName` and `status.conditions` (merge patch on the status
    /// subresource: nothing else of the object can change through it).
    pub async fn status(
        &self,
        namespace: &str,
        name: &str,
        node_name: Option<&str>,
        conditions: &[Condition],
    ) -> Result<(), WriteError> {
        if !self.leadership.is_leader() {
            return Err(WriteError::NotLeader);
        }
        let patch = json!({ "status": { "nodeName": node_name, "conditions": conditions } });
        self.api(namespace)
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// Adds (`hold`) or removes nodefence's finalizer, keeping the others.
    pub async fn finalizer(&self, request: &KeptRequest, hold: bool) -> Result<(), WriteError> {
        if !self.leadership.is_leader() {
            return Err(WriteError::NotLeader);
        }
        let mut finalizers: Vec<&str> = request
            .finalizers
            .iter()
            .map(String::as_str)
            .filter(|f| *f != TAINT_FINALIZER)
            .collect();
        if hold {
            finalizers.push(TAINT_FINALIZER);
        }
        let patch = json!({
            "metadata": {
                "resourceVersion": request.resource_version,
                "finalizers": finalizers,
            }
        });
        self.api(&request.namespace)
            .patch(
                &request.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        Ok(())
    }

    /// The node of a Cluster API Machine (`status.nodeRef.name`); `None` while it has
    /// none (its node has not joined, or is gone).
    pub async fn machine_node(
        &self,
        namespace: &str,
        name: &str,
        api_version: &str,
    ) -> Result<Option<String>, WriteError> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, "Machine"));
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &resource);
        let machine = api.get(name).await?;
        Ok(machine
            .data
            .pointer("/status/nodeRef/name")
            .and_then(|n| n.as_str())
            .filter(|n| !n.is_empty())
            .map(str::to_string))
    }
}
