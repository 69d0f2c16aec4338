//! The NodeHealthCheck reconciler: informers, the work queue loop, and
//! `Reconcile` acting through the API server (each method names the NHC function it
//! follows).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::core::TypeMeta;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::logic::{
    Parsed, cr_kind_of, generate_remediation_cr, is_control_plane, is_owner, matches_node_template,
    min_healthy, node_name_of, node_unhealthy, node_update_needs_reconcile, owner_ref, parse_spec,
    phase, status_node, status_node_conditions_healthy, status_node_healthy, status_node_unhealthy,
    status_remediation, status_remediation_started, template_name_of,
};
use super::{
    API_VERSION, CONTROL_PLANE_CR_LABEL, CONTROL_PLANE_RETRY, DISABLED_CONDITION, ENABLED_MESSAGE,
    EXCLUDE_FROM_REMEDIATION_LABEL, KIND, LOG_PENDING_DELETION, NodeHealthCheck,
    NodeHealthCheckStatus, PERMANENT_NODE_DELETION_EXPECTED_CONDITION, REASON_ENABLED,
    REASON_NOT_SUPPORTED, REASON_SPEC_REFUSED, REASON_TEMPLATE_INVALID, REASON_TEMPLATE_NOT_FOUND,
    SUCCEEDED_CONDITION, TEMPLATE_NOT_FOUND_REQUEUE, TIMED_OUT_ANNOTATION,
};
use crate::remediation::common::{self, Selector};
use crate::remediation::runtime::{
    Change, Kind, Kinds, WorkQueue, is_not_found, sleep_until, spawn_informer,
};

/// What woke the controller.
enum Trigger {
    Nhc(Change<DynamicObject>),
    Node(Box<Change<Node>>),
    Remediation(Change<DynamicObject>),
    Template(Change<DynamicObject>),
}

/// Why a remediation CR could not be created.
enum CreateError {
    NotOwned,
    Other(anyhow::Error),
}

/// Why a template could not be used.
enum TemplateError {
    NotFound(String),
    Invalid(String),
    Other(anyhow::Error),
}

/// The result of a reconcile: when to come back, the earliest wins.
#[derive(Default)]
struct Requeue(Option<Duration>);

impl Requeue {
    fn at_most(&mut self, d: Option<Duration>) {
        if let Some(d) = d.filter(|d| !d.is_zero()) {
            self.0 = Some(self.0.map_or(d, |c| c.min(d)));
        }
    }
}

struct Controller {
    client: kube::Client,
    tx: mpsc::UnboundedSender<Trigger>,
    informers: JoinSet<()>,
    /// Template and CR kinds watched so far.
    watched: HashSet<(String, String)>,
    kinds: Kinds,
    /// The NHCs as last seen by the informer (for mapping events).
    nhcs: BTreeMap<String, NodeHealthCheck>,
    queue: WorkQueue<String>,
}

fn nhc_resource() -> ApiResource {
    ApiResource::erase::<NodeHealthCheck>(&())
}

pub(super) async fn run(client: kube::Client) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut c = Controller {
        client: client.clone(),
        tx: tx.clone(),
        informers: JoinSet::new(),
        watched: HashSet::new(),
        kinds: Kinds::default(),
        nhcs: BTreeMap::new(),
        queue: WorkQueue::new(),
    };
    spawn_informer(
        &mut c.informers,
        Api::<DynamicObject>::all_with(client.clone(), &nhc_resource()),
        "NodeHealthChecks".into(),
        tx.clone(),
        Trigger::Nhc,
    );
    spawn_informer(
        &mut c.informers,
        Api::<Node>::all(client),
        "Nodes".into(),
        tx,
        |c| Trigger::Node(Box::new(c)),
    );
    loop {
        while let Some(name) = c.queue.pop() {
            match c.reconcile(&name).await {
                Ok(after) => {
                    c.queue.forget(&name);
                    if let Some(d) = after {
                        c.queue.add_after(name, d);
                    }
                }
                Err(e) => {
                    tracing::warn!(nhc = %name, error = format!("{e:#}"), "NodeHealthCheck reconcile failed");
                    let d = c.queue.next_backoff(&name);
                    c.queue.add_after(name, d);
                }
            }
            while let Ok(t) = rx.try_recv() {
                c.on_trigger(t);
            }
        }
        tokio::select! {
            t = rx.recv() => match t {
                Some(t) => c.on_trigger(t),
                None => return,
            },
            () = sleep_until(c.queue.next_due()) => {}
        }
    }
}

impl Controller {
    fn on_trigger(&mut self, t: Trigger) {
        match t {
            Trigger::Nhc(change) => self.on_nhc(change),
            Trigger::Node(change) => self.on_node(*change),
            Trigger::Remediation(Change::Added(_)) | Trigger::Template(Change::Added(_)) => {}
            Trigger::Remediation(Change::Updated { new: cr, .. } | Change::Deleted(cr)) => {
                if let Some(owner) = cr
                    .owner_references()
                    .iter()
                    .find(|o| o.kind == KIND && o.api_version == API_VERSION)
                {
                    self.queue.add(owner.name.clone());
                }
            }
            Trigger::Template(Change::Updated { new: t, .. } | Change::Deleted(t)) => {
                let kind = t.types.as_ref().map(|t| t.kind.clone()).unwrap_or_default();
                let name = t.name_any();
                let targets: Vec<String> = self
                    .nhcs
                    .iter()
                    .filter(|(_, n)| {
                        let mut refs = n.spec.remediation_template.iter().chain(
                            n.spec
                                .escalating_remediations
                                .iter()
                                .flatten()
                                .map(|e| &e.remediation_template),
                        );
                        refs.any(|r| {
                            r.kind.as_deref() == Some(kind.as_str())
                                && r.name.as_deref() == Some(name.as_str())
                        })
                    })
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in targets {
                    self.queue.add(k);
                }
            }
        }
    }

    /// Node events: updates NHC cares about (to the NHCs selecting the node), deletes
    /// (to all NHCs); creates are ignored (new nodes have no useful conditions yet).
    fn on_node(&mut self, change: Change<Node>) {
        match change {
            Change::Added(_) => {}
            Change::Updated { old, new } => {
                let keys: BTreeSet<String> = self
                    .nhcs
                    .values()
                    .filter_map(|n| Selector::new(&n.spec.selector).ok())
                    .flat_map(|s| s.keys().map(str::to_owned).collect::<Vec<_>>())
                    .collect();
                if node_update_needs_reconcile(&old, &new, &keys) {
                    let targets: Vec<String> = self
                        .nhcs
                        .iter()
                        .filter(|(_, n)| {
                            Selector::new(&n.spec.selector).is_ok_and(|s| s.matches(new.labels()))
                        })
                        .map(|(k, _)| k.clone())
                        .collect();
                    for k in targets {
                        self.queue.add(k);
                    }
                }
            }
            Change::Deleted(_) => {
                let all: Vec<String> = self.nhcs.keys().cloned().collect();
                for k in all {
                    self.queue.add(k);
                }
            }
        }
    }

    /// NHC events pass the generation predicate: creates, deletes, spec changes.
    fn on_nhc(&mut self, change: Change<DynamicObject>) {
        let parse = |o: &DynamicObject| {
            serde_json::to_value(o)
                .and_then(serde_json::from_value::<NodeHealthCheck>)
                .ok()
        };
        match change {
            Change::Added(o) => {
                let name = o.name_any();
                if let Some(n) = parse(&o) {
                    self.nhcs.insert(name.clone(), n);
                }
                self.queue.add(name);
            }
            Change::Updated { old, new } => {
                let name = new.name_any();
                let changed = old.metadata.generation != new.metadata.generation
                    || old.data.get("spec") != new.data.get("spec");
                match parse(&new) {
                    Some(n) => {
                        self.nhcs.insert(name.clone(), n);
                    }
                    None => {
                        self.nhcs.remove(&name);
                    }
                }
                if changed {
                    self.queue.add(name);
                }
            }
            Change::Deleted(o) => {
                let name = o.name_any();
                self.nhcs.remove(&name);
                self.queue.add(name);
            }
        }
    }

    async fn reconcile(&mut self, name: &str) -> anyhow::Result<Option<Duration>> {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &nhc_resource());
        let Some(obj) = api
            .get_opt(name)
            .await
            .context("reading the NodeHealthCheck")?
        else {
            return Ok(None);
        };
        let nhc: NodeHealthCheck = match serde_json::to_value(&obj).and_then(serde_json::from_value)
        {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(nhc = %name, error = %e, "NodeHealthCheck does not match the v1alpha1 API; ignored");
                return Ok(None);
            }
        };
        let original = nhc.status.clone().unwrap_or_default();
        let mut status = original.clone();
        status.observed_nodes = Some(0);
        status.healthy_nodes = Some(0);
        status.in_flight_remediations = None;
        let mut requeue = Requeue::default();
        let outcome = self.reconcile_status(&nhc, &mut status, &mut requeue).await;
        let patched = self.patch_status(&nhc, &original, status).await;
        outcome?;
        patched?;
        Ok(requeue.0)
    }

    /// The body of `Reconcile` up to the deferred status patch.
    async fn reconcile_status(
        &mut self,
        nhc: &NodeHealthCheck,
        status: &mut NodeHealthCheckStatus,
        requeue: &mut Requeue,
    ) -> anyhow::Result<()> {
        let now = common::now();
        let spec = &nhc.spec;
        if spec.healthy_delay.is_some() || spec.storm_cooldown_duration.is_some() {
            disable(
                status,
                REASON_NOT_SUPPORTED,
                "healthyDelay and stormCooldownDuration are not implemented by the NHC stand-in",
                now,
            );
            return Ok(());
        }
        let parsed = match parse_spec(spec) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(nhc = %nhc.name_any(), error = %e, "NodeHealthCheck refused (the real API server or webhook would not accept it)");
                disable(
                    status,
                    REASON_SPEC_REFUSED,
                    &format!("invalid spec: {e}"),
                    now,
                );
                return Ok(());
            }
        };
        for (template, _) in &parsed.templates {
            match self.get_template(template).await {
                Ok(_) => {}
                Err(TemplateError::NotFound(e)) => {
                    disable(
                        status,
                        REASON_TEMPLATE_NOT_FOUND,
                        &format!("Remediation template not found: {e:?}"),
                        now,
                    );
                    requeue.at_most(Some(TEMPLATE_NOT_FOUND_REQUEUE));
                    return Ok(());
                }
                Err(TemplateError::Invalid(e)) => {
                    disable(
                        status,
                        REASON_TEMPLATE_INVALID,
                        &format!("Remediation template is invalid: {e:?}"),
                        now,
                    );
                    return Ok(());
                }
                Err(TemplateError::Other(e)) => return Err(e.context("validating the templates")),
            }
        }
        if !status
            .conditions
            .iter()
            .any(|c| c.type_ == DISABLED_CONDITION && c.status == "False")
        {
            common::set_condition(
                &mut status.conditions,
                common::condition(
                    DISABLED_CONDITION,
                    "False",
                    REASON_ENABLED,
                    ENABLED_MESSAGE,
                    now,
                ),
            );
        }
        self.ensure_watches(&parsed).await?;

        let nodes: Vec<Node> = Api::<Node>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .context("listing nodes")?
            .items
            .into_iter()
            .filter(|n| parsed.selector.matches(n.labels()))
            .collect();
        let (mut healthy_nodes, mut soon, mut unhealthy) = (Vec::new(), Vec::new(), Vec::new());
        for n in &nodes {
            let conditions = n
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_deref())
                .unwrap_or_default();
            match node_unhealthy(conditions, &parsed.unhealthy, now) {
                (true, _) => unhealthy.push(n),
                (false, Some(left)) => {
                    soon.push(n);
                    requeue.at_most(Some(left));
                }
                (false, None) => healthy_nodes.push(n),
            }
        }

        if !spec
            .pause_requests
            .as_deref()
            .unwrap_or_default()
            .is_empty()
        {
            tracing::info!(nhc = %nhc.name_any(), "postponing potential remediations because of pause requests");
            return Ok(());
        }

        let selected: HashSet<String> = nodes.iter().map(ResourceExt::name_any).collect();
        self.delete_orphans(nhc, &parsed, status, &selected).await?;

        let mut healthy = 0;
        for n in healthy_nodes {
            let name = n.name_any();
            let crs = self.handle_healthy_node(nhc, &parsed, &name).await?;
            if crs.is_empty() {
                status_node_healthy(status, &name);
                healthy += 1;
                continue;
            }
            if status_node(status, &name).is_some() {
                status_node_conditions_healthy(status, &name, now);
                // NHC comes back to log CRs whose deletion is pending for long.
                requeue.at_most(Some(LOG_PENDING_DELETION + Duration::from_secs(1)));
            }
        }
        status.observed_nodes = Some(i32::try_from(nodes.len()).unwrap_or(i32::MAX));
        status.healthy_nodes = Some(healthy);
        for n in soon {
            if status_node(status, &n.name_any()).is_some() {
                tracing::info!(node = %n.name_any(), "ignoring node: it was unhealthy and is likely to be unhealthy again");
            }
        }
        if unhealthy.is_empty() {
            return Ok(());
        }

        let total = i32::try_from(nodes.len()).unwrap_or(i32::MAX);
        let min = min_healthy(spec, total)
            .map_err(|e| anyhow!("failed to calculate min healthy allowed nodes: {e}"))?;
        let skip = healthy < min;
        if skip {
            tracing::info!(
                nhc = %nhc.name_any(),
                "Skipped remediation because the number of healthy nodes selected by the selector is {healthy} and should equal or exceed {min}"
            );
        }
        for n in unhealthy {
            let name = n.name_any();
            status_node_unhealthy(status, &name);
            if skip {
                continue;
            }
            if n.labels()
                .get(EXCLUDE_FROM_REMEDIATION_LABEL)
                .map(String::as_str)
                == Some("true")
            {
                tracing::info!(node = %name, "remediation skipped: node has the exclude-from-remediation label");
                continue;
            }
            let after = self
                .remediate(n, nhc, &parsed, status)
                .await
                .with_context(|| format!("failed to start remediation of {name}"))?;
            requeue.at_most(after);
        }
        Ok(())
    }

    /// `remediate`.
    async fn remediate(
        &mut self,
        node: &Node,
        nhc: &NodeHealthCheck,
        parsed: &Parsed,
        status: &mut NodeHealthCheckStatus,
    ) -> anyhow::Result<Option<Duration>> {
        let node_name = node.name_any();
        let control_plane = is_control_plane(node);
        if control_plane
            && !self
                .control_plane_remediation_allowed(&node_name, parsed)
                .await?
        {
            tracing::info!(node = %node_name, "skipping remediation for preventing control plane / etcd quorum loss, going to retry in a minute");
            return Ok(Some(CONTROL_PLANE_RETRY));
        }
        // GetCurrentTemplateWithTimeout: the first template whose remediation has not
        // timed out for this node.
        let current = parsed.templates.iter().find(|(t, timeout)| {
            timeout.is_none() || status_remediation(status, &node_name, t, Some(true)).is_none()
        });
        let Some((template_ref, timeout)) = current.cloned() else {
            tracing::warn!(node = %node_name, nhc = %nhc.name_any(), "Remediation timed out, and no template left to try");
            return Ok(None);
        };
        let template = match self.get_template(&template_ref).await {
            Ok(t) => t,
            Err(TemplateError::NotFound(e) | TemplateError::Invalid(e)) => {
                return Err(anyhow!("failed to get current template: {e}"));
            }
            Err(TemplateError::Other(e)) => return Err(e.context("failed to get current template")),
        };
        let mut generated = generate_remediation_cr(&template, &node_name, owner_ref(nhc))
            .map_err(|e| anyhow!("failed to generate remediation CR: {e}"))?;
        if control_plane {
            generated
                .labels_mut()
                .insert(CONTROL_PLANE_CR_LABEL.to_owned(), String::new());
        }
        let (created, cr) = match self.create_remediation_cr(generated, nhc, &node_name).await {
            Ok(x) => x,
            Err(CreateError::NotOwned) => return Ok(None),
            Err(CreateError::Other(e)) => return Err(e.context("failed to create remediation CR")),
        };
        status_remediation_started(status, &node_name, &cr);
        if created {
            tracing::info!(node = %node_name, cr = %cr.name_any(), "created remediation object");
            return Ok(timeout.map(|t| t + Duration::from_secs(1)));
        }
        let Some(timeout) = timeout else {
            return Ok(None);
        };
        let Some(started) = status_remediation(status, &node_name, &template_ref, None) else {
            return Err(anyhow!(
                "failed to find started remediation in status for handling timeout"
            ));
        };
        if started.timed_out.is_some() {
            return Err(anyhow!(
                "unexpected timeout found on started remediation in status"
            ));
        }
        let now = common::now();
        let timeout_at = common::add(started.started.0, timeout);
        let timed_out = now > timeout_at;
        let as_json = serde_json::to_value(&cr).unwrap_or_default();
        let succeeded = common::condition_status(&as_json, SUCCEEDED_CONDITION);
        let failed = succeeded == Some("False");
        if !timed_out && !failed {
            return Ok(Some(common::until(now, timeout_at)));
        }
        tracing::info!(node = %node_name, cr = %cr.name_any(), timed_out, failed, "escalating remediation");
        if succeeded == Some("True") {
            tracing::info!(cr = %cr.name_any(), "skipping timeout annotation on remediation CR: Succeeded condition is True");
        } else {
            self.annotate_timed_out(cr, now).await?;
        }
        if let Some(started) = status_remediation(status, &node_name, &template_ref, None) {
            started.timed_out = Some(common::time(now));
        }
        Ok(Some(Duration::from_secs(1)))
    }

    async fn annotate_timed_out(
        &mut self,
        mut cr: DynamicObject,
        now: Timestamp,
    ) -> anyhow::Result<()> {
        cr.annotations_mut()
            .insert(TIMED_OUT_ANNOTATION.to_owned(), common::rfc3339(now));
        let kind = self.cr_kind(&cr).await?;
        kind.api(&self.client, cr.namespace().as_deref())
            .replace(&cr.name_any(), &PostParams::default(), &cr)
            .await
            .context("failed to update remediation CR with timeout annotation")?;
        Ok(())
    }

    /// `isControlPlaneRemediationAllowed` (without the OpenShift etcd check).
    async fn control_plane_remediation_allowed(
        &mut self,
        node: &str,
        parsed: &Parsed,
    ) -> anyhow::Result<bool> {
        let crs = self
            .list_remediation_crs(parsed, |cr| {
                cr.labels().contains_key(CONTROL_PLANE_CR_LABEL)
            })
            .await?;
        if crs.iter().any(|cr| node_name_of(cr) == node) {
            return Ok(true);
        }
        for cr in &crs {
            tracing::info!(node = %node_name_of(cr), "ongoing control plane remediation");
        }
        Ok(crs.is_empty())
    }

    /// `CreateRemediationCR`: creates `cr` unless a CR for its node and template exists.
    async fn create_remediation_cr(
        &mut self,
        cr: DynamicObject,
        nhc: &NodeHealthCheck,
        node: &str,
    ) -> Result<(bool, DynamicObject), CreateError> {
        let kind = self.cr_kind(&cr).await.map_err(CreateError::Other)?;
        let template = template_name_of(&cr).unwrap_or_default();
        let existing = kind
            .api(&self.client, None)
            .list(&ListParams::default())
            .await
            .map_err(|e| CreateError::Other(anyhow!(e).context("failed fetching CRs List")))?
            .items
            .into_iter()
            .find(|c| matches_node_template(c, node, &template));
        if let Some(mut existing) = existing {
            if !is_owner(&existing, &nhc.name_any()) {
                tracing::info!(cr = %existing.name_any(), "external remediation CR already exists, but it's not owned by us");
                return Err(CreateError::NotOwned);
            }
            existing.types = cr.types.clone();
            return Ok((false, existing));
        }
        let ns = cr.namespace();
        let mut created = kind
            .api(&self.client, ns.as_deref())
            .create(&PostParams::default(), &cr)
            .await
            .map_err(|e| {
                CreateError::Other(
                    anyhow!(e).context("failed to create an external remediation object"),
                )
            })?;
        created.types = cr.types.clone();
        Ok((true, created))
    }

    /// `deleteOrphanedRemediationCRs`.
    async fn delete_orphans(
        &mut self,
        nhc: &NodeHealthCheck,
        parsed: &Parsed,
        status: &mut NodeHealthCheckStatus,
        selected: &HashSet<String>,
    ) -> anyhow::Result<()> {
        let name = nhc.name_any();
        let orphans = self
            .list_remediation_crs(parsed, |cr| {
                if cr.metadata.deletion_timestamp.is_some() || !is_owner(cr, &name) {
                    return false;
                }
                let doc = serde_json::to_value(cr).unwrap_or_default();
                let pnde =
                    common::condition_status(&doc, PERMANENT_NODE_DELETION_EXPECTED_CONDITION)
                        == Some("True");
                let succeeded = common::condition_status(&doc, SUCCEEDED_CONDITION) == Some("True");
                if pnde && !succeeded {
                    return false;
                }
                !selected.contains(&node_name_of(cr))
            })
            .await
            .context("failed to check for orphaned remediation CRs")?;
        for cr in orphans {
            let node = node_name_of(&cr);
            status_node_healthy(status, &node);
            if self.delete_remediation_cr(&cr, &name).await? {
                tracing::info!(cr = %cr.name_any(), %node, "deleted orphaned remediation CR");
            }
        }
        Ok(())
    }

    /// `HandleHealthyNode` (without the healthy delay): deletes the NHC's CRs for the
    /// node and returns them as they were before.
    async fn handle_healthy_node(
        &mut self,
        nhc: &NodeHealthCheck,
        parsed: &Parsed,
        node: &str,
    ) -> anyhow::Result<Vec<DynamicObject>> {
        let name = nhc.name_any();
        let crs = self
            .list_remediation_crs(parsed, |cr| {
                (cr.name_any() == node || node_name_of(cr) == node) && is_owner(cr, &name)
            })
            .await
            .with_context(|| format!("failed to get remediation CRs for healthy node {node}"))?;
        for cr in &crs {
            if self.delete_remediation_cr(cr, &name).await? {
                tracing::info!(cr = %cr.name_any(), %node, "deleted remediation CR");
            }
        }
        Ok(crs)
    }

    /// `DeleteRemediationCR`: deletes a CR this NHC owns that is not being deleted.
    async fn delete_remediation_cr(
        &mut self,
        cr: &DynamicObject,
        nhc: &str,
    ) -> anyhow::Result<bool> {
        let kind = self.cr_kind(cr).await?;
        let api = kind.api(&self.client, cr.namespace().as_deref());
        let Some(current) = api
            .get_opt(&cr.name_any())
            .await
            .context("failed to get remediation CR")?
        else {
            return Ok(false);
        };
        if current.metadata.deletion_timestamp.is_some() || !is_owner(&current, nhc) {
            return Ok(false);
        }
        match api.delete(&cr.name_any(), &DeleteParams::default()).await {
            Ok(_) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(anyhow!(e).context("failed to delete remediation CR")),
        }
    }

    /// `ListRemediationCRs`: the CRs of every template's kind (all namespaces) that
    /// belong to that template, filtered.
    async fn list_remediation_crs(
        &mut self,
        parsed: &Parsed,
        filter: impl Fn(&DynamicObject) -> bool,
    ) -> anyhow::Result<Vec<DynamicObject>> {
        let mut out = Vec::new();
        for (template, _) in &parsed.templates {
            let (api_version, kind_name) = cr_kind_of(template);
            let kind = self
                .kinds
                .resolve(&self.client, &api_version, &kind_name)
                .await?;
            let list = kind
                .api(&self.client, None)
                .list(&ListParams::default())
                .await
                .with_context(|| format!("failed to get all remediation objects with kind {kind_name} and apiVersion {api_version}"))?;
            let template_name = template.name.clone().unwrap_or_default();
            for mut cr in list.items {
                cr.types = Some(TypeMeta {
                    api_version: api_version.clone(),
                    kind: kind_name.clone(),
                });
                if matches_node_template(&cr, &node_name_of(&cr), &template_name) && filter(&cr) {
                    out.push(cr);
                }
            }
        }
        Ok(out)
    }

    async fn cr_kind(&mut self, cr: &DynamicObject) -> anyhow::Result<Kind> {
        let t = cr
            .types
            .as_ref()
            .ok_or_else(|| anyhow!("remediation CR {} without apiVersion/kind", cr.name_any()))?;
        Ok(self
            .kinds
            .resolve(&self.client, &t.api_version, &t.kind)
            .await?)
    }

    /// `getTemplate`: the template object, checked for `spec.template`.
    async fn get_template(&mut self, r: &ObjectReference) -> Result<DynamicObject, TemplateError> {
        let api_version = r.api_version.clone().unwrap_or_default();
        let kind_name = r.kind.clone().unwrap_or_default();
        let name = r.name.clone().unwrap_or_default();
        let namespace = r.namespace.clone().unwrap_or_default();
        let kind = self
            .kinds
            .resolve(&self.client, &api_version, &kind_name)
            .await
            .map_err(|e| TemplateError::NotFound(e.to_string()))?;
        if kind.namespaced && namespace.is_empty() {
            return Err(TemplateError::NotFound(format!(
                "remediation template {name:?} not found, it is namespaced, but no namespace is provided"
            )));
        }
        let mut template = match kind.api(&self.client, Some(&namespace)).get(&name).await {
            Ok(t) => t,
            Err(e) if is_not_found(&e) => {
                return Err(TemplateError::NotFound(format!(
                    "failed to get external remediation template {namespace}/{name}: {e}"
                )));
            }
            Err(e) => {
                return Err(TemplateError::Other(anyhow!(e).context(format!(
                    "failed to get external remediation template {namespace}/{name}"
                ))));
            }
        };
        if !template
            .data
            .pointer("/spec/template")
            .is_some_and(Value::is_object)
        {
            return Err(TemplateError::Invalid(format!(
                "invalid template {namespace}/{name}, didn't find spec.template.spec"
            )));
        }
        template.types = Some(TypeMeta {
            api_version,
            kind: kind_name,
        });
        Ok(template)
    }

    /// `AddWatchesNhc`: watches updates and deletes of the templates and CRs in use.
    async fn ensure_watches(&mut self, parsed: &Parsed) -> anyhow::Result<()> {
        for (template, _) in &parsed.templates {
            let template_kind = (
                template.api_version.clone().unwrap_or_default(),
                template.kind.clone().unwrap_or_default(),
            );
            for (is_template, (api_version, kind_name)) in
                [(true, template_kind), (false, cr_kind_of(template))]
            {
                if self
                    .watched
                    .contains(&(api_version.clone(), kind_name.clone()))
                {
                    continue;
                }
                let kind = self
                    .kinds
                    .resolve(&self.client, &api_version, &kind_name)
                    .await
                    .with_context(|| format!("failed to add watch for {kind_name}"))?;
                let api = kind.api(&self.client, None);
                let what = format!("{kind_name} ({api_version})");
                let types = TypeMeta {
                    api_version: api_version.clone(),
                    kind: kind_name.clone(),
                };
                let typed = move |c: Change<DynamicObject>| {
                    let with = |mut o: DynamicObject| {
                        o.types = Some(types.clone());
                        o
                    };
                    match c {
                        Change::Added(o) => Change::Added(with(o)),
                        Change::Updated { old, new } => Change::Updated {
                            old: with(old),
                            new: with(new),
                        },
                        Change::Deleted(o) => Change::Deleted(with(o)),
                    }
                };
                if is_template {
                    spawn_informer(&mut self.informers, api, what, self.tx.clone(), move |c| {
                        Trigger::Template(typed(c))
                    });
                } else {
                    spawn_informer(&mut self.informers, api, what, self.tx.clone(), move |c| {
                        Trigger::Remediation(typed(c))
                    });
                }
                self.watched.insert((api_version, kind_name));
            }
        }
        Ok(())
    }

    /// `patchStatus`: phase and reason, then a merge patch of what changed (with a new
    /// `lastUpdateTime`).
    async fn patch_status(
        &mut self,
        nhc: &NodeHealthCheck,
        original: &NodeHealthCheckStatus,
        mut status: NodeHealthCheckStatus,
    ) -> anyhow::Result<()> {
        let (phase, reason) = phase(&nhc.spec, &status);
        status.phase = Some(phase);
        status.reason = Some(reason);
        let old = serde_json::to_value(original)?;
        if common::merge_diff(&old, &serde_json::to_value(&status)?).is_none() {
            return Ok(());
        }
        status.last_update_time = Some(common::time(common::now()));
        let Some(diff) = common::merge_diff(&old, &serde_json::to_value(&status)?) else {
            return Ok(());
        };
        let api: Api<NodeHealthCheck> = Api::all(self.client.clone());
        api.patch_status(
            &nhc.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": diff})),
        )
        .await
        .context("failed to update status")?;
        Ok(())
    }
}

fn disable(status: &mut NodeHealthCheckStatus, reason: &str, message: &str, now: Timestamp) {
    let already = status
        .conditions
        .iter()
        .any(|c| c.type_ == DISABLED_CONDITION && c.status == "True" && c.reason == reason);
    if !already {
        tracing::info!(reason, message, "disabling NHC");
        common::set_condition(
            &mut status.conditions,
            common::condition(DISABLED_CONDITION, "True", reason, message, now),
        );
    }
}
