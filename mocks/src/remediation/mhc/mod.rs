//! A stand-in for Cluster API's MachineHealthCheck controller (MHC), external
//! remediation included.
//!
//! Cluster API v1.14 (the current release) serves `cluster.x-k8s.io/v1beta2` as its
//! storage and default version (v1beta1 is still served but deprecated), so the
//! stand-in implements v1beta2: `spec.checks` (`nodeStartupTimeoutSeconds`,
//! `unhealthyNodeConditions`, `unhealthyMachineConditions` with `timeoutSeconds`),
//! `spec.remediation.triggerIf` (`unhealthyLessThanOrEqualTo`, `unhealthyInRange`)
//! and `spec.remediation.templateRef` (v1beta1's `spec.remediationTemplate`).
//! [`MachineHealthCheckController::spawn`] runs it; [`cluster_crd`], [`machine_crd`]
//! and [`machine_health_check_crd`] are minimal CRDs; [`Cluster`], [`Machine`] and
//! [`MachineHealthCheck`] are typed objects with small builders.
//!
//! Followed from cluster-api v1.14 (docs/proposals/20191030-machine-health-checking.md,
//! docs/book/src/tasks/automated-machine-management/healthchecking.md,
//! core/reconcilers/machinehealthcheck/{machinehealthcheck_controller.go,
//! machinehealthcheck_targets.go}, controllers/external/util.go, util/paused,
//! util/controller):
//! - The MHC needs its Cluster (`spec.clusterName`, same namespace); it is paused
//!   (condition `Paused`, nothing else done) while the Cluster has `spec.paused` or
//!   the MHC the `cluster.x-k8s.io/paused` annotation. It labels itself
//!   `cluster.x-k8s.io/cluster-name` and gets an owner reference to the Cluster.
//! - Targets: Machines in the MHC's namespace matching `selector` plus
//!   `cluster.x-k8s.io/cluster-name=<clusterName>`, minus those annotated
//!   `cluster.x-k8s.io/paused` or `cluster.x-k8s.io/skip-remediation`. Nodes (by
//!   `status.nodeRef.name`) are read only once the Cluster's `ControlPlaneInitialized`
//!   condition is True; before that, and while `InfrastructureReady` is not True,
//!   targets are not evaluated (control-plane Machines excepted for the former).
//! - Health (`needsRemediation`): the `cluster.x-k8s.io/remediate-machine`
//!   annotation; Machine conditions and Node conditions held longer than their
//!   `timeoutSeconds`; a Node that was deleted (`NodeDeleted`); no Node within
//!   `nodeStartupTimeoutSeconds` (default 600 s, 0 disables). The result is the
//!   Machine's `HealthCheckSucceeded` condition (reasons `HealthCheckSucceeded`,
//!   `UnhealthyNode`, `UnhealthyMachine`, `NodeDeleted`, `NodeStartupTimeout`,
//!   `HasRemediateAnnotation`, with CAPI's messages). Targets about to go unhealthy
//!   are requeued for then (+1 s) and count as neither healthy nor unhealthy.
//! - Short-circuit (`isAllowedRemediation`): `unhealthyInRange` ("[min-max]") takes
//!   precedence over `unhealthyLessThanOrEqualTo` (default 100%, percent of the
//!   targets rounded down), both compared with targets minus healthy ones; when
//!   remediation is not allowed the MHC's `RemediationAllowed` condition is False
//!   (`TooManyUnhealthy`) and only Machine conditions are written.
//! - External remediation (`patchUnhealthyTargets`): a CR cloned from the template's
//!   `spec.template` (metadata and spec): the template's apiVersion, its kind minus
//!   `Template`, named after the Machine, in the Machine's namespace, annotations
//!   `cluster.x-k8s.io/cloned-from-name` and `cluster.x-k8s.io/cloned-from-groupkind`,
//!   label `cluster.x-k8s.io/cluster-name`, and one owner reference to the Machine
//!   (`cluster.x-k8s.io/v1beta2`, no controller flag). The Machine gets
//!   `ExternallyRemediated=False` (`WaitingForRemediation`). As in CAPI, once an
//!   unhealthy Machine already has its CR, the remaining unhealthy targets of that
//!   reconcile are not processed. Without `templateRef`, the Machine gets
//!   `OwnerRemediated=False` (`WaitingForRemediation`, "Waiting for remediation")
//!   for its owner to act on.
//! - Healthy again (`patchHealthyTargets`): the CR named after the Machine is
//!   deleted. That is the only signal: CAPI does nothing when the remediator
//!   finishes; the CR lives until the Node is healthy (or is garbage-collected with
//!   its Machine), and `ExternallyRemediated` is left for the remediator to update.
//!   As in CAPI, a healthy Machine's `HealthCheckSucceeded=True` is only written
//!   here when a CR was found (with `templateRef`), or with a short-circuit.
//! - Status: `expectedMachines`, `currentHealthy`, `remediationsAllowed`, `targets`,
//!   `observedGeneration`, conditions `Paused` and `RemediationAllowed`.
//! - Timing: reconciles are triggered by MHC changes, Machine creates/deletes and
//!   updates of nodeRef, labels, annotations or conditions, Node creates/deletes and
//!   condition changes, and Cluster pause transitions, plus `RequeueAfter`; and, as
//!   CAPI's `ReconcilerRateLimiting` (default on) with the MHC's 15 s interval, one
//!   MHC is reconciled at most once per interval (errors back off from the interval
//!   plus 5 ms doubling). [`MachineHealthCheckController::with_rate_limit`] lowers
//!   it for tests, as CAPI's own tests do (never below CAPI's 1 s floor).
//!
//! Left out: the v1beta1 API and its deprecated conditions
//! (`status.deprecated.v1beta1`), Kubernetes Events, the admission webhooks (their
//! defaults, the `cluster-name` labels and `nodeStartupTimeoutSeconds: 600`, are
//! set by the [`Machine::new`] and [`MachineHealthCheck::new`] builders instead),
//! a separate workload cluster (Nodes are read from the API server the stand-in
//! talks to, i.e. a self-hosted cluster), the garbage collector (it is not CAPI's:
//! fake-kube does not delete a CR whose Machine is gone), and condition sorting.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::NamespaceResourceScope;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::common;
use super::runtime::TaskGuard;

mod controller;
mod logic;

/// The Cluster API group.
pub const GROUP: &str = "cluster.x-k8s.io";
/// The version the stand-in serves (CAPI v1.14's storage version).
pub const VERSION: &str = "v1beta2";
/// `apiVersion` of Clusters, Machines and MachineHealthChecks.
pub const API_VERSION: &str = "cluster.x-k8s.io/v1beta2";

/// Label naming a Machine's (and an MHC's, a cloned CR's) Cluster.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// Label of control-plane Machines.
pub const CONTROL_PLANE_LABEL: &str = "cluster.x-k8s.io/control-plane";
/// Annotation pausing an object (Machine, MHC).
pub const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";
/// Machine annotation excluding it from health checks.
pub const SKIP_REMEDIATION_ANNOTATION: &str = "cluster.x-k8s.io/skip-remediation";
/// Machine annotation asking for its remediation.
pub const REMEDIATE_MACHINE_ANNOTATION: &str = "cluster.x-k8s.io/remediate-machine";
/// Annotation on a cloned object: the template's name.
pub const CLONED_FROM_NAME_ANNOTATION: &str = "cluster.x-k8s.io/cloned-from-name";
/// Annotation on a cloned object: the template's `Kind.group`.
pub const CLONED_FROM_GROUPKIND_ANNOTATION: &str = "cluster.x-k8s.io/cloned-from-groupkind";

/// Machine condition set by the MHC.
pub const HEALTH_CHECK_SUCCEEDED_CONDITION: &str = "HealthCheckSucceeded";
/// Machine condition asking the Machine's owner to remediate.
pub const OWNER_REMEDIATED_CONDITION: &str = "OwnerRemediated";
/// Machine condition of an external remediation.
pub const EXTERNALLY_REMEDIATED_CONDITION: &str = "ExternallyRemediated";
/// MHC condition.
pub const REMEDIATION_ALLOWED_CONDITION: &str = "RemediationAllowed";
/// MHC condition.
pub const PAUSED_CONDITION: &str = "Paused";
/// Cluster condition gating Node reads.
pub const CONTROL_PLANE_INITIALIZED_CONDITION: &str = "ControlPlaneInitialized";
/// Cluster (and Machine) condition.
pub const INFRASTRUCTURE_READY_CONDITION: &str = "InfrastructureReady";

const TEMPLATE_SUFFIX: &str = "Template";
const WAITING_FOR_REMEDIATION: &str = "WaitingForRemediation";
/// `DefaultNodeStartupTimeoutSeconds`.
const DEFAULT_NODE_STARTUP_TIMEOUT_SECONDS: i32 = 600;
/// The MHC reconciler's rate-limit interval (`SetupWithManager`).
pub const DEFAULT_RATE_LIMIT: Duration = Duration::from_secs(15);
/// `WithRateLimitInterval` ignores shorter intervals.
const MIN_RATE_LIMIT: Duration = Duration::from_secs(1);

// ---------------------------------------------------------------------------------
// The API

macro_rules! namespaced_resource {
    ($t:ty, $kind:literal, $plural:literal) => {
        impl Resource for $t {
            type DynamicType = ();
            type Scope = NamespaceResourceScope;

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                GROUP.into()
            }
            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                VERSION.into()
            }
            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// A Cluster API `Cluster` (the fields the MHC reads).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cluster {
    #[serde(rename = "apiVersion", default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ClusterSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ConditionsStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
}

/// A status with only conditions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConditionsStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

namespaced_resource!(Cluster, "Cluster", "clusters");

impl Cluster {
    pub fn new(namespace: &str, name: &str) -> Self {
        Self {
            api_version: API_VERSION.to_owned(),
            kind: "Cluster".to_owned(),
            metadata: meta(namespace, name),
            ..Default::default()
        }
    }
}

/// A Cluster API `Machine` (the fields the MHC reads).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    #[serde(rename = "apiVersion", default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: MachineSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<MachineStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    #[serde(default)]
    pub cluster_name: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_ref: Option<MachineNodeReference>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// `status.nodeRef` (v1beta2: the Node's name only).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineNodeReference {
    #[serde(default)]
    pub name: String,
}

namespaced_resource!(Machine, "Machine", "machines");

impl Machine {
    /// A Machine of `cluster`, labelled `cluster.x-k8s.io/cluster-name` as CAPI's
    /// defaulting webhook labels it.
    pub fn new(namespace: &str, name: &str, cluster: &str) -> Self {
        let mut metadata = meta(namespace, name);
        metadata.labels = Some(BTreeMap::from([(
            CLUSTER_NAME_LABEL.to_owned(),
            cluster.to_owned(),
        )]));
        Self {
            api_version: API_VERSION.to_owned(),
            kind: "Machine".to_owned(),
            metadata,
            spec: MachineSpec {
                cluster_name: cluster.to_owned(),
            },
            status: None,
        }
    }

    /// Adds labels.
    pub fn with_labels<K: Into<String>, V: Into<String>>(
        mut self,
        labels: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.metadata
            .labels
            .get_or_insert_default()
            .extend(labels.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// The condition of `type_`, if set.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
    }

    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
}

/// A `MachineHealthCheck` (`cluster.x-k8s.io/v1beta2`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineHealthCheck {
    #[serde(rename = "apiVersion", default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: MachineHealthCheckSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<MachineHealthCheckStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckSpec {
    #[serde(default)]
    pub cluster_name: String,
    #[serde(default)]
    pub selector: LabelSelector,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<MachineHealthCheckChecks>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<MachineHealthCheckRemediation>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckChecks {
    /// Default 600; 0 disables the startup check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_startup_timeout_seconds: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unhealthy_node_conditions: Vec<UnhealthyConditionCheck>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unhealthy_machine_conditions: Vec<UnhealthyConditionCheck>,
}

/// An entry of `unhealthyNodeConditions` / `unhealthyMachineConditions`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnhealthyConditionCheck {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckRemediation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_if: Option<TriggerIf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_ref: Option<TemplateReference>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TriggerIf {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy_less_than_or_equal_to: Option<IntOrString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy_in_range: Option<String>,
}

/// `spec.remediation.templateRef`: a template in the MHC's namespace.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateReference {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
}

impl TemplateReference {
    fn is_defined(&self) -> bool {
        !(self.api_version.is_empty() && self.kind.is_empty() && self.name.is_empty())
    }

    /// apiVersion and kind of the CRs cloned from the template.
    fn cr_kind(&self) -> (String, String) {
        (
            self.api_version.clone(),
            self.kind
                .strip_suffix(TEMPLATE_SUFFIX)
                .unwrap_or(&self.kind)
                .to_owned(),
        )
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_machines: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_healthy: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediations_allowed: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
}

namespaced_resource!(
    MachineHealthCheck,
    "MachineHealthCheck",
    "machinehealthchecks"
);

impl MachineHealthCheck {
    /// An MHC for `cluster` (chain the builder methods; give it a selector), with
    /// what CAPI's defaulting webhook adds on create: the
    /// `cluster.x-k8s.io/cluster-name` label and `nodeStartupTimeoutSeconds: 600`.
    pub fn new(namespace: &str, name: &str, cluster: &str) -> Self {
        let mut metadata = meta(namespace, name);
        metadata.labels = Some(BTreeMap::from([(
            CLUSTER_NAME_LABEL.to_owned(),
            cluster.to_owned(),
        )]));
        Self {
            api_version: API_VERSION.to_owned(),
            kind: "MachineHealthCheck".to_owned(),
            metadata,
            spec: MachineHealthCheckSpec {
                cluster_name: cluster.to_owned(),
                checks: Some(MachineHealthCheckChecks {
                    node_startup_timeout_seconds: Some(DEFAULT_NODE_STARTUP_TIMEOUT_SECONDS),
                    ..Default::default()
                }),
                ..Default::default()
            },
            status: None,
        }
    }

    /// Adds `matchLabels`.
    pub fn select_labels<K: Into<String>, V: Into<String>>(
        mut self,
        labels: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.spec
            .selector
            .match_labels
            .get_or_insert_default()
            .extend(labels.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// Adds an `unhealthyNodeConditions` entry (`timeoutSeconds` in whole seconds).
    pub fn unhealthy_node_condition(
        mut self,
        type_: &str,
        status: &str,
        timeout: Duration,
    ) -> Self {
        self.checks()
            .unhealthy_node_conditions
            .push(check(type_, status, timeout));
        self
    }

    /// Adds an `unhealthyMachineConditions` entry.
    pub fn unhealthy_machine_condition(
        mut self,
        type_: &str,
        status: &str,
        timeout: Duration,
    ) -> Self {
        self.checks()
            .unhealthy_machine_conditions
            .push(check(type_, status, timeout));
        self
    }

    /// Sets `nodeStartupTimeoutSeconds` (zero disables the check).
    pub fn node_startup_timeout(mut self, timeout: Duration) -> Self {
        self.checks().node_startup_timeout_seconds = Some(secs(timeout));
        self
    }

    pub fn unhealthy_less_than_or_equal_to(mut self, v: IntOrString) -> Self {
        self.trigger_if().unhealthy_less_than_or_equal_to = Some(v);
        self
    }

    /// `"[min-max]"`.
    pub fn unhealthy_in_range(mut self, range: &str) -> Self {
        self.trigger_if().unhealthy_in_range = Some(range.to_owned());
        self
    }

    /// Sets `remediation.templateRef` (a template in the MHC's namespace).
    pub fn remediation_template(mut self, api_version: &str, kind: &str, name: &str) -> Self {
        self.spec.remediation.get_or_insert_default().template_ref = Some(TemplateReference {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            name: name.to_owned(),
        });
        self
    }

    fn checks(&mut self) -> &mut MachineHealthCheckChecks {
        self.spec.checks.get_or_insert_default()
    }

    fn trigger_if(&mut self) -> &mut TriggerIf {
        self.spec
            .remediation
            .get_or_insert_default()
            .trigger_if
            .get_or_insert_default()
    }

    fn template_ref(&self) -> Option<&TemplateReference> {
        self.spec
            .remediation
            .as_ref()?
            .template_ref
            .as_ref()
            .filter(|t| t.is_defined())
    }
}

fn meta(namespace: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        namespace: Some(namespace.to_owned()),
        name: Some(name.to_owned()),
        ..Default::default()
    }
}

fn secs(d: Duration) -> i32 {
    i32::try_from(d.as_secs()).unwrap_or(i32::MAX)
}

fn check(type_: &str, status: &str, timeout: Duration) -> UnhealthyConditionCheck {
    UnhealthyConditionCheck {
        type_: type_.to_owned(),
        status: status.to_owned(),
        timeout_seconds: Some(secs(timeout)),
    }
}

/// Creates `Cluster` `namespace/name` and sets its `ControlPlaneInitialized` and
/// `InfrastructureReady` conditions True (through the status subresource), as CAPI's
/// cluster controller reports a provisioned cluster.
pub async fn create_ready_cluster(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Cluster> {
    let api: Api<Cluster> = Api::namespaced(client.clone(), namespace);
    api.create(&PostParams::default(), &Cluster::new(namespace, name))
        .await
        .with_context(|| format!("creating Cluster {namespace}/{name}"))?;
    let now = common::now();
    let conditions = [
        CONTROL_PLANE_INITIALIZED_CONDITION,
        INFRASTRUCTURE_READY_CONDITION,
    ]
    .map(|t| common::condition(t, "True", t, "", now));
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"conditions": conditions}})),
    )
    .await
    .with_context(|| format!("setting the conditions of Cluster {namespace}/{name}"))
}

/// Sets a Machine's `status.nodeRef` (as CAPI's Machine controller does once the
/// Node has joined).
pub async fn set_node_ref(
    client: &kube::Client,
    namespace: &str,
    machine: &str,
    node: &str,
) -> anyhow::Result<Machine> {
    Api::<Machine>::namespaced(client.clone(), namespace)
        .patch_status(
            machine,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"nodeRef": {"name": node}}})),
        )
        .await
        .with_context(|| format!("setting the nodeRef of Machine {namespace}/{machine}"))
}

fn capi_crd(
    kind: &str,
    plural: &str,
    short_names: &[&str],
    spec: Value,
    status: Value,
) -> CustomResourceDefinition {
    let mut names = json!({
        "kind": kind,
        "listKind": format!("{kind}List"),
        "plural": plural,
        "singular": kind.to_ascii_lowercase(),
        "categories": ["cluster-api"],
    });
    if !short_names.is_empty() {
        names["shortNames"] = json!(short_names);
    }
    common::from_json(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "names": names,
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec,
                        "status": status,
                    },
                }},
                "subresources": {"status": {}},
            }],
        },
    }))
}

fn conditions_only_status(extra: Value) -> Value {
    let mut properties = json!({"conditions": common::conditions_schema()});
    if let (Some(p), Value::Object(e)) = (properties.as_object_mut(), extra) {
        p.extend(e);
    }
    json!({"type": "object", "properties": properties, "x-kubernetes-preserve-unknown-fields": true})
}

/// A minimal `Cluster` CRD (v1beta2): `spec.paused` (other spec fields kept
/// unvalidated), `status.conditions`.
pub fn cluster_crd() -> CustomResourceDefinition {
    capi_crd(
        "Cluster",
        "clusters",
        &["cl"],
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true,
               "properties": {"paused": {"type": "boolean"}}}),
        conditions_only_status(json!({})),
    )
}

/// A minimal `Machine` CRD (v1beta2): `spec.clusterName` (other spec fields kept
/// unvalidated), `status.nodeRef.name`, `status.conditions`.
pub fn machine_crd() -> CustomResourceDefinition {
    capi_crd(
        "Machine",
        "machines",
        &["ma"],
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true,
               "required": ["clusterName"],
               "properties": {"clusterName": {"type": "string", "minLength": 1}}}),
        conditions_only_status(json!({
            "nodeRef": {"type": "object", "properties": {"name": {"type": "string"}}},
        })),
    )
}

/// A minimal `MachineHealthCheck` CRD (v1beta2) with the spec fields the stand-in
/// implements and its status.
pub fn machine_health_check_crd() -> CustomResourceDefinition {
    let condition_check = json!({
        "type": "array",
        "items": {
            "type": "object",
            "required": ["type", "status", "timeoutSeconds"],
            "properties": {
                "type": {"type": "string", "minLength": 1},
                "status": {"type": "string", "minLength": 1},
                "timeoutSeconds": {"type": "integer", "format": "int32", "minimum": 0},
            },
        },
    });
    let spec = json!({
        "type": "object",
        "required": ["clusterName", "selector"],
        "properties": {
            "clusterName": {"type": "string", "minLength": 1, "maxLength": 63},
            "selector": common::label_selector_schema(),
            "checks": {
                "type": "object",
                "properties": {
                    "nodeStartupTimeoutSeconds": {"type": "integer", "format": "int32", "minimum": 0},
                    "unhealthyNodeConditions": condition_check.clone(),
                    "unhealthyMachineConditions": condition_check,
                },
            },
            "remediation": {
                "type": "object",
                "properties": {
                    "triggerIf": {
                        "type": "object",
                        "properties": {
                            "unhealthyLessThanOrEqualTo": common::int_or_string_schema(),
                            "unhealthyInRange": {"type": "string", "pattern": "^\\[[0-9]+-[0-9]+\\]$"},
                        },
                    },
                    "templateRef": {
                        "type": "object",
                        "required": ["apiVersion", "kind", "name"],
                        "properties": {
                            "apiVersion": {"type": "string"},
                            "kind": {"type": "string"},
                            "name": {"type": "string"},
                        },
                    },
                },
            },
        },
    });
    let status = conditions_only_status(json!({
        "expectedMachines": {"type": "integer", "format": "int32"},
        "currentHealthy": {"type": "integer", "format": "int32"},
        "remediationsAllowed": {"type": "integer", "format": "int32"},
        "observedGeneration": {"type": "integer", "format": "int64"},
        "targets": {"type": "array", "items": {"type": "string"}},
    }));
    let mut crd = capi_crd(
        "MachineHealthCheck",
        "machinehealthchecks",
        &["mhc", "mhcs"],
        spec,
        status,
    );
    if let Some(v) = crd.spec.versions.first_mut() {
        v.additional_printer_columns = Some(common::from_json(json!([
            {"name": "Cluster", "type": "string", "jsonPath": ".spec.clusterName"},
            {"name": "Replicas", "type": "integer", "jsonPath": ".status.expectedMachines"},
            {"name": "Healthy", "type": "integer", "jsonPath": ".status.currentHealthy"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ])));
    }
    crd
}

/// The running MHC stand-in; aborted when dropped.
#[derive(Debug)]
pub struct MachineHealthCheckController {
    _task: TaskGuard,
}

impl MachineHealthCheckController {
    /// Starts the controller with CAPI's 15 s rate-limit interval.
    pub fn spawn(client: kube::Client) -> Self {
        Self::with_rate_limit(client, DEFAULT_RATE_LIMIT)
    }

    /// Starts the controller with another rate-limit interval (at least 1 s, as in
    /// CAPI's controller builder).
    pub fn with_rate_limit(client: kube::Client, interval: Duration) -> Self {
        Self {
            _task: TaskGuard(tokio::spawn(controller::run(
                client,
                interval.max(MIN_RATE_LIMIT),
            ))),
        }
    }
}
