//! Remediation requests in the simulation (issue 27): NodeHealthCheck (the stand-in
//! in `nodefence_mocks::remediation::nhc`, which follows NHC's own timing and fields)
//! running beside the two replicas and naming nodefence's template, and requests made
//! by hand; what the truth learns of them every 250 ms, and the invariants they add:
//! - 8: no power command for a node whose request has been timed out for a second
//!   (NodeHealthCheck has moved on to the next remediator);
//! - 9: a request is served once: no power-off for a node under a request that a
//!   release already served, unless another request came since or the node failed
//!   anew on its own;
//! - 10: every request deleted goes away (its finalizer is not left behind).
//!
//! A request never needs an exception to invariant 1: a machine nodefence powers off
//! for a request stops serving then, and its release needs an Off reading after that.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{CustomResourceExt, Resource};
use nodefence::remediation::types::{GROUP, VERSION};
use nodefence::remediation::{
    NODE_NAME_ANNOTATION, NodeFenceRemediation, NodeFenceRemediationTemplate, TIMED_OUT_ANNOTATION,
};
use nodefence_mocks::kube::crd::Registry;
use nodefence_mocks::kube::resources::{CUSTOM_RESOURCE_DEFINITIONS, NODES, ResourceType};
use nodefence_mocks::kube::store::Store;
use nodefence_mocks::remediation::{install_crds, nhc, remediator_crds};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::api::{LEADER, tainted};
use super::machine::{Truth, lock};
use super::schedule::NhcPlan;

/// Where the template and the requests live (NodeHealthCheck creates each request in
/// its template's namespace).
pub const NAMESPACE: &str = LEADER.0;
const TEMPLATE: &str = "nodefence";
/// How long nodefence is given to hear of a change to a request.
const SETTLE: Duration = Duration::from_secs(1);

/// A request as the truth has seen it.
#[derive(Debug, Clone)]
pub struct SeenRequest {
    /// `namespace/name`.
    pub key: String,
    pub node: String,
    /// Not being deleted.
    pub live: bool,
    pub timed_out_since: Option<Instant>,
    /// The incident of its node's machine in which a release served it (a release
    /// while it stood, or the node already released when it came).
    pub served_in: Option<u64>,
}

/// Installs nodefence's CRDs and template, and NodeHealthCheck if the plan has it
/// (started as NHC is in a cluster: its CRD, one `NodeHealthCheck` over the workers,
/// the controller).
pub async fn install(client: &kube::Client, nhc_plan: Option<NhcPlan>) {
    let crds: Vec<CustomResourceDefinition> = vec![
        NodeFenceRemediation::crd(),
        NodeFenceRemediationTemplate::crd(),
    ];
    if let Err(e) = install_crds(client, crds).await {
        panic!("installing nodefence's CRDs: {e:#}");
    }
    let template: NodeFenceRemediationTemplate = from_json(json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "NodeFenceRemediationTemplate",
        "metadata": {"name": TEMPLATE, "namespace": NAMESPACE},
        "spec": {"template": {"spec": {}}},
    }));
    if let Err(e) = Api::<NodeFenceRemediationTemplate>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &template)
        .await
    {
        panic!("creating the template: {e}");
    }
    let Some(plan) = nhc_plan else {
        return;
    };
    let ours = nhc::template_ref(
        &format!("{GROUP}/{VERSION}"),
        "NodeFenceRemediationTemplate",
        NAMESPACE,
        TEMPLATE,
    );
    let check = nhc::NodeHealthCheck::new("workers")
        .select_expression("node-role.kubernetes.io/control-plane", "DoesNotExist", &[])
        .min_healthy(nhc::percent(51))
        .unhealthy_condition("Ready", "False", plan.unhealthy_for)
        .unhealthy_condition("Ready", "Unknown", plan.unhealthy_for);
    let check = match plan.escalate_after {
        None => check.remediation_template(ours),
        Some(timeout) => check
            .escalating_remediation(ours, 1, timeout)
            .escalating_remediation(next_remediator(client).await, 2, Duration::from_secs(3600)),
    };
    if let Err(e) = install_crds(client, [nhc::nhc_crd()]).await {
        panic!("installing NodeHealthCheck's CRD: {e:#}");
    }
    if let Err(e) = Api::<nhc::NodeHealthCheck>::all(client.clone())
        .create(&PostParams::default(), &check)
        .await
    {
        panic!("creating the NodeHealthCheck: {e}");
    }
    // Runs until the runtime ends.
    std::mem::forget(nhc::NodeHealthCheckController::spawn(client.clone()));
}

/// The escalation's second step: a remediator that does nothing here (reprovisioning
/// would; what matters is that nodefence stops).
async fn next_remediator(client: &kube::Client) -> ObjectReference {
    let kind = "ReprovisionRemediation";
    if let Err(e) = install_crds(
        client,
        remediator_crds("test.example.com", "v1alpha1", kind),
    )
    .await
    {
        panic!("installing the next remediator's CRDs: {e:#}");
    }
    let gvk = kube::core::GroupVersionKind::gvk(
        "test.example.com",
        "v1alpha1",
        &format!("{kind}Template"),
    );
    let resource = kube::api::ApiResource::from_gvk(&gvk);
    let templates: Api<DynamicObject> = Api::namespaced_with(client.clone(), NAMESPACE, &resource);
    let template: DynamicObject = from_json(json!({
        "apiVersion": "test.example.com/v1alpha1",
        "kind": format!("{kind}Template"),
        "metadata": {"name": "reprovision", "namespace": NAMESPACE},
        "spec": {"template": {"spec": {}}},
    }));
    if let Err(e) = templates.create(&PostParams::default(), &template).await {
        panic!("creating the next remediator's template: {e}");
    }
    nhc::template_ref(
        "test.example.com/v1alpha1",
        &format!("{kind}Template"),
        NAMESPACE,
        "reprovision",
    )
}

fn from_json<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
}

fn requests(client: &kube::Client) -> Api<NodeFenceRemediation> {
    Api::namespaced(client.clone(), NAMESPACE)
}

/// A request by hand: named `name`, its node in NodeHealthCheck's annotation.
pub async fn create(client: &kube::Client, name: &str, node: &str) {
    let mut request = NodeFenceRemediation::new(name, Default::default());
    request.meta_mut().namespace = Some(NAMESPACE.into());
    request.meta_mut().annotations =
        Some([(NODE_NAME_ANNOTATION.to_string(), node.to_string())].into());
    // The operator's writes are not faulted; a refusal is the simulation's bug.
    if let Err(e) = requests(client)
        .create(&PostParams::default(), &request)
        .await
    {
        panic!("creating request {name}: {e}");
    }
}

/// Marks `name` timed out, as NodeHealthCheck's escalation does (a merge patch: the
/// object may have changed since it was read).
pub async fn time_out(client: &kube::Client, name: &str) {
    let now = humantime::format_rfc3339_seconds(nodefence::clock::now()).to_string();
    let patch = json!({"metadata": {"annotations": {TIMED_OUT_ANNOTATION: now}}});
    match requests(client)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => panic!("timing out request {name}: {e}"),
    }
}

pub async fn delete(client: &kube::Client, name: &str) {
    match requests(client)
        .delete(name, &DeleteParams::default())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => panic!("deleting request {name}: {e}"),
    }
}

/// Deletes every request made by hand (the faults' end).
pub async fn delete_by_hand(client: &kube::Client, store: &Store) {
    for (key, _) in stored(store) {
        if let Some(name) = key
            .strip_prefix(&format!("{NAMESPACE}/"))
            .filter(|n| n.starts_with("by-hand-"))
        {
            delete(client, name).await;
        }
    }
}

/// The store's type for the requests, once their CRD is served.
fn request_type(store: &Store) -> Option<ResourceType> {
    let registry = Registry::from_crds(&store.snapshot(CUSTOM_RESOURCE_DEFINITIONS));
    registry
        .find(GROUP, VERSION, "nodefenceremediations")
        .map(|v| v.rt)
}

/// Every request in the store: `namespace/name` and the object.
pub fn stored(store: &Store) -> Vec<(String, Value)> {
    let Some(rt) = request_type(store) else {
        return Vec::new();
    };
    store
        .list(rt, None)
        .0
        .into_iter()
        .map(|r| {
            let at = |p: &str| r.pointer(p).and_then(Value::as_str).unwrap_or_default();
            (
                format!("{}/{}", at("/metadata/namespace"), at("/metadata/name")),
                r,
            )
        })
        .collect()
}

/// The node is released: tainted out-of-service, or its Node deleted.
fn released(store: &Store, node: &str) -> bool {
    store.get(NODES, None, node).map_or(true, |n| tainted(&n))
}

/// The truth follows the store's requests (every 250 ms of virtual time, and right
/// before a power command is judged: nodefence may hear of a deletion before the
/// next tick).
pub fn observe(store: &Store, truth: &Truth) {
    let now = Instant::now();
    let incidents: BTreeMap<String, u64> =
        truth.with(|ms| ms.iter().map(|m| (m.node.clone(), m.incident)).collect());
    let mut seen = lock(&truth.requests);
    let mut present = Vec::new();
    for (key, r) in stored(store) {
        let Some(uid) = r.pointer("/metadata/uid").and_then(Value::as_str) else {
            continue;
        };
        present.push(uid.to_string());
        let new = !seen.contains_key(uid);
        let annotations = r.pointer("/metadata/annotations");
        let node = annotations
            .and_then(|a| a.get(NODE_NAME_ANNOTATION))
            .and_then(Value::as_str)
            .unwrap_or_else(|| key.rsplit('/').next().unwrap_or_default())
            .to_string();
        let entry = seen.entry(uid.to_string()).or_insert_with(|| SeenRequest {
            key: key.clone(),
            served_in: released(store, &node)
                .then(|| incidents.get(&node).copied())
                .flatten(),
            node,
            live: true,
            timed_out_since: None,
        });
        if new {
            truth.count(|c| {
                c.requests += 1;
                c.requests_served += u64::from(entry.served_in.is_some());
            });
        }
        entry.live = r.pointer("/metadata/deletionTimestamp").is_none();
        if entry.timed_out_since.is_none()
            && annotations.is_some_and(|a| a.get(TIMED_OUT_ANNOTATION).is_some())
        {
            entry.timed_out_since = Some(now);
        }
    }
    seen.retain(|uid, _| present.contains(uid));
}

impl Truth {
    /// A release of `node` began and was written: it serves every request standing
    /// for the node.
    pub fn release_written(&self, node: &str) {
        let incident = self.with(|ms| ms.iter().find(|m| m.node == node).map(|m| m.incident));
        let mut served = 0;
        for r in lock(&self.requests).values_mut() {
            if r.node == node && r.live && r.served_in.is_none() {
                r.served_in = incident;
                served += 1;
            }
        }
        self.count(|c| c.requests_served += served);
    }

    /// Why a power command for `node` now breaks invariant 8 or 9, if it does.
    pub fn request_refusal(&self, node: &str, on: bool) -> Option<String> {
        if let Some(store) = lock(&self.store).clone() {
            observe(&store, self);
        }
        let (incident, failed) = self.with(|ms| {
            ms.iter()
                .find(|m| m.node == node)
                .map_or((0, false), |m| (m.incident, m.failed_at.is_some()))
        });
        let now = Instant::now();
        let requests = lock(&self.requests);
        for r in requests.values().filter(|r| r.node == node && r.live) {
            if let Some(since) = r.timed_out_since
                && now.duration_since(since) >= SETTLE
            {
                return Some(format!(
                    "invariant 8 (a timed-out request stops power): its request {} timed out {}s ago",
                    r.key,
                    now.duration_since(since).as_secs()
                ));
            }
            // Served, and nothing new since: neither another request nor a new
            // failure of the machine.
            let unasked = requests
                .values()
                .all(|o| o.node != node || !o.live || o.served_in.is_some());
            if !on
                && unasked
                && let Some(served) = r.served_in
                && !(failed && incident > served)
            {
                return Some(format!(
                    "invariant 9 (a request is served once): its request {} was served by a release in the machine's incident {served} (now {incident}, {})",
                    r.key,
                    if failed { "failed" } else { "serving" }
                ));
            }
        }
        None
    }

    /// Under `power_on_after_fence`: a machine whose power nodefence must leave to
    /// the next remediator (a request for it timed out and stands).
    pub fn left_to_next_remediator(&self, node: &str) -> bool {
        lock(&self.requests)
            .values()
            .any(|r| r.node == node && r.live && r.timed_out_since.is_some())
    }
}
