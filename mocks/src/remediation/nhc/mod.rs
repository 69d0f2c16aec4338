//! A stand-in for the medik8s NodeHealthCheck operator (NHC).
//!
//! [`NodeHealthCheckController::spawn`] runs a controller that reads
//! `NodeHealthCheck` objects (`remediation.medik8s.io/v1alpha1`, cluster-scoped)
//! from the API server and reconciles them as NHC's `NodeHealthCheckReconciler`
//! does, acting only through the API server. [`nhc_crd`] is a minimal CRD for the
//! type; [`NodeHealthCheck`] is the typed object with a small builder.
//!
//! Followed from node-healthcheck-operator (docs/configuration.md, docs/workflow.md
//! and the files named below):
//! - Node selection: `spec.selector` over Nodes (`resources/manager.go` `GetNodes`).
//! - Health (`nodehealthcheck_controller.go` `matchesUnhealthyConditions`): a Node is
//!   unhealthy once a condition of `spec.unhealthyConditions` (type + status, OR-ed)
//!   has held for its `duration` since `lastTransitionTime`; until then it is "soon
//!   unhealthy" and the NHC is requeued for when the duration expires (+1 s).
//!   `unhealthyConditions` defaults to Ready False/Unknown for 300 s when absent
//!   (the CRD default). Soon-unhealthy nodes are neither remediated nor treated as
//!   healthy (workflow.md, "Special cases").
//! - `pauseRequests` stop all processing after counting (no new and no deleted CRs);
//!   `minHealthy`/`maxUnhealthy` (int or percent of selected nodes, rounded up,
//!   `getMinHealthy`) block new remediations when too few nodes are healthy; a node
//!   only counts as healthy once its remediation CRs are gone.
//! - Remediation CRs (`resources/manager.go` `generateRemediationCR`): same apiVersion
//!   as the template, its kind minus `Template`, the template's namespace, named
//!   after the node (or `generateName: <node>-` when the template carries the
//!   `remediation.medik8s.io/multiple-templates-support` annotation), annotations
//!   `remediation.medik8s.io/node-name` and `remediation.medik8s.io/template-name`,
//!   label `app.kubernetes.io/part-of: node-healthcheck-controller`, an owner
//!   reference to the NHC (`controller: false`), and `spec` copied from the
//!   template's `spec.template.spec`. Control-plane nodes' CRs are labelled
//!   `remediation.medik8s.io/isControlPlaneNode`, and only one control-plane node is
//!   remediated at a time (`isControlPlaneRemediationAllowed`, without OpenShift's
//!   etcd check). Nodes labelled `remediation.medik8s.io/exclude-from-remediation:
//!   "true"` are skipped. An existing CR for the node and template that another NHC
//!   owns is left alone.
//! - Templates (`resources/templates.go`): a missing template disables the NHC
//!   (`Disabled` condition, reason `RemediationTemplateNotFound`, retried every
//!   15 s); one without `spec.template` is `RemediationTemplateInvalid`.
//! - Escalation (`remediate`, `GetCurrentTemplateWithTimeout`): templates in `order`;
//!   when the current one's `timeout` (from the CR's creation) passes, or its CR
//!   reports condition `Succeeded=False`, the CR gets
//!   `remediation.medik8s.io/nhc-timed-out: <RFC 3339>` (not when `Succeeded=True`),
//!   the status records `timedOut`, and the next template's CR is created by the
//!   next reconcile (at once, as the annotated CR's update wakes it; else a second
//!   later). Earlier CRs stay until the node is healthy.
//! - Healthy again (`HandleHealthyNode`): every CR the NHC owns for the node is
//!   deleted; the node leaves `status.unhealthyNodes` once they are gone.
//! - Orphans (`deleteOrphanedRemediationCRs`): CRs the NHC owns whose node is no
//!   longer selected (deleted) are deleted, except while `PermanentNodeDeletionExpected`
//!   is True and `Succeeded` is not True.
//! - Status (`patchStatus`, `resources/status.go`): `observedNodes`, `healthyNodes`,
//!   `unhealthyNodes` with each remediation's resource, `started`, `timedOut` and
//!   `templateName`, `conditions` (`Disabled`), `phase` (Disabled, Paused,
//!   Remediating, Enabled), `reason`, `lastUpdateTime`; written as a merge patch on
//!   the status subresource only when something changed.
//! - Triggers (`SetupWithManager`, `shared.go`, `resources/watch.go`): NHC
//!   create/delete and spec changes (generation predicate); Node updates that change
//!   conditions (once `Ready` exists), selector labels, the exclude label or the
//!   manually-confirmed annotation (mapped to the NHCs selecting the node), Node
//!   deletes (all NHCs); updates and deletes of remediation CRs (their owner NHC) and
//!   of templates (the NHCs naming them); plus each reconcile's `RequeueAfter`, and
//!   controller-runtime's exponential backoff after errors. One reconcile at a time.
//!
//! Left out (NHC does these; the stand-in does not):
//! - The node Lease coordination with other remediation operators
//!   (`resources/lease.go`), including its overdue-lease timeout annotation.
//! - `spec.healthyDelay` and the manually-confirmed-healthy annotation flow, and
//!   storm recovery (`spec.stormCooldownDuration`): an NHC setting either is marked
//!   `Disabled` with reason `NotSupportedByStandIn` instead of silently ignoring it.
//! - OpenShift specifics: Machine owner references on CRs, the Metal3 template
//!   namespace check, cluster-upgrade detection, conflicting MachineHealthCheck
//!   detection, the etcd quorum check.
//! - The validating webhook (e.g. escalation timeouts under one minute are refused
//!   there; the stand-in accepts them so tests can be quick). What the API server's
//!   schema or the webhook would refuse outright (no template, both
//!   `remediationTemplate` and `escalatingRemediations`, duplicate orders, bad
//!   durations or selectors) disables the NHC with reason `SpecRefusedByStandIn`.
//! - Kubernetes Events, Prometheus metrics and the 48 h old-CR alert annotation.
//! - The controller reads through the API server instead of an informer cache, so
//!   it never acts on stale objects (NHC waits for its cache after status patches).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    Condition, LabelSelector, LabelSelectorRequirement, ObjectMeta, Time,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;
use kube::core::ClusterResourceScope;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::common;
use super::runtime::TaskGuard;

mod controller;
mod logic;

/// The API group of `NodeHealthCheck`.
pub const GROUP: &str = "remediation.medik8s.io";
/// The served version.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of a `NodeHealthCheck`.
pub const API_VERSION: &str = "remediation.medik8s.io/v1alpha1";
/// The kind.
pub const KIND: &str = "NodeHealthCheck";

/// Annotation on a remediation CR naming its node.
pub const NODE_NAME_ANNOTATION: &str = "remediation.medik8s.io/node-name";
/// Annotation on a remediation CR naming the template it was made from.
pub const TEMPLATE_NAME_ANNOTATION: &str = "remediation.medik8s.io/template-name";
/// Annotation on a template whose remediator handles several templates of one kind
/// (its CRs get generated names).
pub const MULTIPLE_TEMPLATES_SUPPORT_ANNOTATION: &str =
    "remediation.medik8s.io/multiple-templates-support";
/// Annotation NHC sets on a CR whose remediation timed out or failed.
pub const TIMED_OUT_ANNOTATION: &str = "remediation.medik8s.io/nhc-timed-out";
/// Label on the remediation CRs of control-plane nodes.
pub const CONTROL_PLANE_CR_LABEL: &str = "remediation.medik8s.io/isControlPlaneNode";
/// Node label (value `"true"`) that excludes a node from remediation.
pub const EXCLUDE_FROM_REMEDIATION_LABEL: &str = "remediation.medik8s.io/exclude-from-remediation";
/// Node annotation of the healthy-delay flow (only watched here, see the module doc).
pub const MANUALLY_CONFIRMED_HEALTHY_ANNOTATION: &str =
    "remediation.medik8s.io/manually-confirmed-healthy";
/// Remediation CR condition: the remediation succeeded (True) or failed (False).
pub const SUCCEEDED_CONDITION: &str = "Succeeded";
/// Remediation CR condition: the remediation is in progress.
pub const PROCESSING_CONDITION: &str = "Processing";
/// Remediation CR condition: the remediator will delete the node for good.
pub const PERMANENT_NODE_DELETION_EXPECTED_CONDITION: &str = "PermanentNodeDeletionExpected";
/// NHC's own condition.
pub const DISABLED_CONDITION: &str = "Disabled";

const PART_OF_LABEL: &str = "app.kubernetes.io/part-of";
const PART_OF_VALUE: &str = "node-healthcheck-controller";
const MASTER_ROLE_LABEL: &str = "node-role.kubernetes.io/master";
const CONTROL_PLANE_ROLE_LABEL: &str = "node-role.kubernetes.io/control-plane";
const TEMPLATE_SUFFIX: &str = "Template";

const REASON_TEMPLATE_NOT_FOUND: &str = "RemediationTemplateNotFound";
const REASON_TEMPLATE_INVALID: &str = "RemediationTemplateInvalid";
const REASON_ENABLED: &str = "NodeHealthCheckEnabled";
const REASON_NOT_SUPPORTED: &str = "NotSupportedByStandIn";
const REASON_SPEC_REFUSED: &str = "SpecRefusedByStandIn";
const ENABLED_MESSAGE: &str = "No issues found, NodeHealthCheck is enabled.";

/// `templateNotFoundRequeueAfter`.
const TEMPLATE_NOT_FOUND_REQUEUE: Duration = Duration::from_secs(15);
/// `logWhenCRPendingDeletionDuration`.
const LOG_PENDING_DELETION: Duration = Duration::from_secs(10);
/// Retry of a control-plane node while another one is being remediated.
const CONTROL_PLANE_RETRY: Duration = Duration::from_secs(60);
/// The default `unhealthyConditions` (the CRD's default).
const DEFAULT_UNHEALTHY_DURATION: Duration = Duration::from_secs(300);

// ---------------------------------------------------------------------------------
// The API

/// A `NodeHealthCheck` (`remediation.medik8s.io/v1alpha1`, cluster-scoped).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeHealthCheck {
    #[serde(rename = "apiVersion", default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: NodeHealthCheckSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<NodeHealthCheckStatus>,
}

/// `spec` of a [`NodeHealthCheck`] (the fields of the v1alpha1 API).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeHealthCheckSpec {
    /// The nodes to observe (all when empty).
    #[serde(default)]
    pub selector: LabelSelector,
    /// OR-ed conditions that make a node unhealthy; Ready False/Unknown for 300 s
    /// when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy_conditions: Option<Vec<UnhealthyCondition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_healthy: Option<IntOrString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unhealthy: Option<IntOrString>,
    /// The single template (exclusive with `escalating_remediations`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation_template: Option<ObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalating_remediations: Option<Vec<EscalatingRemediation>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_requests: Option<Vec<String>>,
    /// Not supported by the stand-in (the NHC is disabled when set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy_delay: Option<String>,
    /// Not supported by the stand-in (the NHC is disabled when set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storm_cooldown_duration: Option<String>,
}

/// A node condition type and status that, held for `duration`, makes a node
/// unhealthy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UnhealthyCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    /// A Go duration ("300s", "1.5h").
    pub duration: String,
}

impl UnhealthyCondition {
    pub fn new(type_: &str, status: &str, duration: Duration) -> Self {
        Self {
            type_: type_.to_owned(),
            status: status.to_owned(),
            duration: common::go_duration(duration),
        }
    }
}

/// One step of `escalatingRemediations`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EscalatingRemediation {
    pub remediation_template: ObjectReference,
    pub order: i32,
    /// A Go duration ("300s", "30m").
    pub timeout: String,
}

/// `status` of a [`NodeHealthCheck`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeHealthCheckStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_nodes: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy_nodes: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unhealthy_nodes: Vec<UnhealthyNode>,
    /// Deprecated in NHC; always cleared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight_remediations: Option<BTreeMap<String, Time>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
}

/// A node NHC considers unhealthy, with the remediations created for it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnhealthyNode {
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remediations: Vec<Remediation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions_healthy_timestamp: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy_delayed: Option<bool>,
}

/// A remediation CR NHC created for a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Remediation {
    pub resource: ObjectReference,
    pub started: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed_out: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_name: Option<String>,
}

impl Resource for NodeHealthCheck {
    type DynamicType = ();
    type Scope = ClusterResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        KIND.into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        VERSION.into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "nodehealthchecks".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl NodeHealthCheck {
    /// An NHC named `name` with an empty spec (it selects every node until a
    /// selector is added); chain the builder methods.
    pub fn new(name: &str) -> Self {
        Self {
            api_version: API_VERSION.to_owned(),
            kind: KIND.to_owned(),
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// Adds `matchLabels`.
    pub fn select_labels<K: Into<String>, V: Into<String>>(
        mut self,
        labels: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        let m = self.spec.selector.match_labels.get_or_insert_default();
        m.extend(labels.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// Adds a `matchExpressions` entry (`In`, `NotIn`, `Exists`, `DoesNotExist`).
    pub fn select_expression(mut self, key: &str, operator: &str, values: &[&str]) -> Self {
        self.spec
            .selector
            .match_expressions
            .get_or_insert_default()
            .push(LabelSelectorRequirement {
                key: key.to_owned(),
                operator: operator.to_owned(),
                values: (!values.is_empty())
                    .then(|| values.iter().map(|v| (*v).to_owned()).collect()),
            });
        self
    }

    /// Adds an unhealthy condition (the default pair is replaced by the first one).
    pub fn unhealthy_condition(mut self, type_: &str, status: &str, duration: Duration) -> Self {
        self.spec
            .unhealthy_conditions
            .get_or_insert_default()
            .push(UnhealthyCondition::new(type_, status, duration));
        self
    }

    pub fn min_healthy(mut self, v: IntOrString) -> Self {
        self.spec.min_healthy = Some(v);
        self
    }

    pub fn max_unhealthy(mut self, v: IntOrString) -> Self {
        self.spec.max_unhealthy = Some(v);
        self
    }

    pub fn remediation_template(mut self, template: ObjectReference) -> Self {
        self.spec.remediation_template = Some(template);
        self
    }

    /// Adds an escalation step.
    pub fn escalating_remediation(
        mut self,
        template: ObjectReference,
        order: i32,
        timeout: Duration,
    ) -> Self {
        self.spec
            .escalating_remediations
            .get_or_insert_default()
            .push(EscalatingRemediation {
                remediation_template: template,
                order,
                timeout: common::go_duration(timeout),
            });
        self
    }

    /// Adds a pause request.
    pub fn pause(mut self, reason: &str) -> Self {
        self.spec
            .pause_requests
            .get_or_insert_default()
            .push(reason.to_owned());
        self
    }

    /// The object from JSON (e.g. converted from a YAML manifest).
    pub fn from_json(v: Value) -> Result<Self, serde_json::Error> {
        serde_json::from_value(v)
    }

    /// The unhealthy node entry for `node`, if any.
    pub fn unhealthy_node(&self, node: &str) -> Option<&UnhealthyNode> {
        self.status
            .as_ref()?
            .unhealthy_nodes
            .iter()
            .find(|n| n.name == node)
    }
}

/// A reference to a remediation template (`apiVersion`, `kind`, `namespace`, `name`
/// are mandatory for NHC).
pub fn template_ref(api_version: &str, kind: &str, namespace: &str, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some(api_version.to_owned()),
        kind: Some(kind.to_owned()),
        namespace: Some(namespace.to_owned()),
        name: Some(name.to_owned()),
        ..Default::default()
    }
}

/// `"<p>%"` as an int-or-string.
pub fn percent(p: u32) -> IntOrString {
    IntOrString::String(format!("{p}%"))
}

/// A minimal CRD for `NodeHealthCheck`: the spec fields of the v1alpha1 API (with the
/// `unhealthyConditions` default), the status the stand-in writes, a status
/// subresource, cluster scope and the `nhc` short name.
pub fn nhc_crd() -> CustomResourceDefinition {
    let duration =
        json!({"type": "string", "pattern": "^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"});
    let percent_or_int = {
        let mut s = common::int_or_string_schema();
        s["pattern"] = json!("^((100|[0-9]{1,2})%|[0-9]+)$");
        s
    };
    let object_ref = json!({
        "type": "object",
        "x-kubernetes-map-type": "atomic",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "namespace": {"type": "string"},
            "name": {"type": "string"},
            "uid": {"type": "string"},
            "resourceVersion": {"type": "string"},
            "fieldPath": {"type": "string"},
        },
    });
    let time = json!({"type": "string", "format": "date-time"});
    let schema = json!({
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "properties": {
                    "selector": common::label_selector_schema(),
                    "unhealthyConditions": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["type", "status"],
                        "default": [
                            {"type": "Ready", "status": "False", "duration": "300s"},
                            {"type": "Ready", "status": "Unknown", "duration": "300s"},
                        ],
                        "items": {
                            "type": "object",
                            "required": ["type", "status", "duration"],
                            "properties": {
                                "type": {"type": "string", "minLength": 1},
                                "status": {"type": "string", "minLength": 1},
                                "duration": duration.clone(),
                            },
                        },
                    },
                    "minHealthy": percent_or_int.clone(),
                    "maxUnhealthy": percent_or_int,
                    "remediationTemplate": object_ref.clone(),
                    "escalatingRemediations": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["remediationTemplate", "order", "timeout"],
                            "properties": {
                                "remediationTemplate": object_ref.clone(),
                                "order": {"type": "integer"},
                                "timeout": duration.clone(),
                            },
                        },
                    },
                    "pauseRequests": {"type": "array", "items": {"type": "string"}},
                    "healthyDelay": {"type": "string"},
                    "stormCooldownDuration": duration,
                },
            },
            "status": {
                "type": "object",
                "properties": {
                    "observedNodes": {"type": "integer"},
                    "healthyNodes": {"type": "integer"},
                    "unhealthyNodes": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name"],
                        "items": {
                            "type": "object",
                            "required": ["name"],
                            "properties": {
                                "name": {"type": "string"},
                                "remediations": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "required": ["resource", "started"],
                                        "properties": {
                                            "resource": object_ref,
                                            "started": time.clone(),
                                            "timedOut": time.clone(),
                                            "templateName": {"type": "string"},
                                        },
                                    },
                                },
                                "conditionsHealthyTimestamp": time.clone(),
                                "healthyDelayed": {"type": "boolean"},
                            },
                        },
                    },
                    "inFlightRemediations": {"type": "object", "additionalProperties": time.clone()},
                    "conditions": common::conditions_schema(),
                    "phase": {"type": "string"},
                    "reason": {"type": "string"},
                    "lastUpdateTime": time,
                },
            },
        },
    });
    common::from_json(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("nodehealthchecks.{GROUP}")},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": "NodeHealthCheckList",
                "plural": "nodehealthchecks",
                "singular": "nodehealthcheck",
                "shortNames": ["nhc"],
            },
            "scope": "Cluster",
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": schema},
                "subresources": {"status": {}},
            }],
        },
    }))
}

/// The running NHC stand-in; aborted when dropped.
#[derive(Debug)]
pub struct NodeHealthCheckController {
    _task: TaskGuard,
}

impl NodeHealthCheckController {
    /// Starts the controller on the current tokio runtime. The `NodeHealthCheck` CRD
    /// should be installed (the controller's watch retries with backoff until it is).
    pub fn spawn(client: kube::Client) -> Self {
        Self {
            _task: TaskGuard(tokio::spawn(controller::run(client))),
        }
    }
}
