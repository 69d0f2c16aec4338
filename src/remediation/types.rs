//! The remediation API (`remediation.nodefence.io/v1alpha1`): the Rust types are the
//! source of the CRDs in `deploy/components/remediation/crds.yaml`.
//!
//! Shaped as the medik8s NodeHealthCheck operator and Cluster API's external
//! remediation expect of a remediator: a `...RemediationTemplate` whose
//! `spec.template.spec` is copied into the `...Remediation` each creates per
//! unhealthy node (or Machine), and `status.conditions` that they read
//! (`Processing`, `Succeeded`, `PermanentNodeDeletionExpected`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of nodefence's remediation kinds.
pub const GROUP: &str = "remediation.nodefence.io";
/// Its one version.
pub const VERSION: &str = "v1alpha1";

/// What a request asks of nodefence. Nothing to set today: how a node is fenced and
/// released is nodefence's own policy (`nodefence.toml`, the inventory), which a
/// request can never loosen. The object's presence is the request.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "remediation.nodefence.io",
    version = "v1alpha1",
    kind = "NodeFenceRemediation",
    namespaced,
    status = "NodeFenceRemediationStatus",
    shortname = "nfr",
    category = "remediation",
    doc = "A request that nodefence fence a node: its machine is powered off through its out-of-band controller when policy allows, and its volumes are released only once the machine is confirmed Off. Created by NodeHealthCheck or Cluster API from a NodeFenceRemediationTemplate, named after the node (or the Machine), or with the node in the annotation remediation.medik8s.io/node-name.",
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".status.nodeName"}"#,
    printcolumn = r#"{"name":"Processing","type":"string","jsonPath":".status.conditions[?(@.type==\"Processing\")].reason"}"#,
    printcolumn = r#"{"name":"Succeeded","type":"string","jsonPath":".status.conditions[?(@.type==\"Succeeded\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct NodeFenceRemediationSpec {}

/// What nodefence reports on a request.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeFenceRemediationStatus {
    /// The node the request was resolved to (its name, its annotation, or the
    /// Machine's `status.nodeRef`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// `Processing`, `Succeeded`, and `PermanentNodeDeletionExpected` when the release
    /// deletes the Node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// A template NodeHealthCheck's `remediationTemplate` (or a MachineHealthCheck's)
/// names; its `spec.template.spec` becomes each request's `spec`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "remediation.nodefence.io",
    version = "v1alpha1",
    kind = "NodeFenceRemediationTemplate",
    namespaced,
    shortname = "nfrt",
    category = "remediation",
    doc = "The template NodeHealthCheck (spec.remediationTemplate or escalatingRemediations) and Cluster API's MachineHealthCheck (remediationTemplate) name to have nodefence fence their unhealthy nodes."
)]
pub struct NodeFenceRemediationTemplateSpec {
    pub template: NodeFenceRemediationTemplateResource,
}

/// `spec.template` of a template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct NodeFenceRemediationTemplateResource {
    /// Labels and annotations Cluster API copies onto each request it clones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    pub spec: NodeFenceRemediationSpec,
}

/// `spec.template.metadata` of a template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct TemplateMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}
