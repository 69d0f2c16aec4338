//! The MachineHealthCheck reconciler: informers, the rate-limited work queue loop,
//! and `Reconcile` acting through the API server (each method names the CAPI
//! function it follows).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::TypeMeta;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::logic::{
    Target, allowed_remediation, cluster_conditions, cond_is_true, generate_remediation_request,
    int_or_string, machine_changed, needs_remediation, paused_condition,
};
use super::{
    API_VERSION, CLUSTER_NAME_LABEL, CONTROL_PLANE_INITIALIZED_CONDITION, Cluster,
    DEFAULT_NODE_STARTUP_TIMEOUT_SECONDS, EXTERNALLY_REMEDIATED_CONDITION, GROUP,
    HEALTH_CHECK_SUCCEEDED_CONDITION, Machine, MachineHealthCheck, MachineHealthCheckStatus,
    OWNER_REMEDIATED_CONDITION, PAUSED_ANNOTATION, PAUSED_CONDITION, REMEDIATION_ALLOWED_CONDITION,
    SKIP_REMEDIATION_ANNOTATION, TemplateReference, WAITING_FOR_REMEDIATION,
};
use crate::remediation::common::{self, Selector};
use crate::remediation::runtime::{
    Change, Kinds, WorkQueue, is_not_found, sleep_until, spawn_informer,
};

type Key = (String, String);

enum Trigger {
    Mhc(Change<DynamicObject>),
    Machine(Change<DynamicObject>),
    Cluster(Change<DynamicObject>),
    Node(Box<Change<Node>>),
}

fn parse<T: serde::de::DeserializeOwned>(o: &DynamicObject) -> Option<T> {
    serde_json::to_value(o)
        .and_then(serde_json::from_value)
        .ok()
}

fn key_of(o: &impl ResourceExt) -> Key {
    (o.namespace().unwrap_or_default(), o.name_any())
}

struct Controller {
    client: kube::Client,
    informers: JoinSet<()>,
    kinds: Kinds,
    mhcs: BTreeMap<Key, MachineHealthCheck>,
    machines: BTreeMap<Key, Machine>,
    queue: WorkQueue<Key>,
    rate_limit: Duration,
    last_start: HashMap<Key, Instant>,
}

pub(super) async fn run(client: kube::Client, rate_limit: Duration) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut c = Controller {
        client: client.clone(),
        informers: JoinSet::new(),
        kinds: Kinds::default(),
        mhcs: BTreeMap::new(),
        machines: BTreeMap::new(),
        queue: WorkQueue::new(),
        rate_limit,
        last_start: HashMap::new(),
    };
    let dynamic = |r: ApiResource| Api::<DynamicObject>::all_with(client.clone(), &r);
    spawn_informer(
        &mut c.informers,
        dynamic(ApiResource::erase::<MachineHealthCheck>(&())),
        "MachineHealthChecks".into(),
        tx.clone(),
        Trigger::Mhc,
    );
    spawn_informer(
        &mut c.informers,
        dynamic(ApiResource::erase::<Machine>(&())),
        "Machines".into(),
        tx.clone(),
        Trigger::Machine,
    );
    spawn_informer(
        &mut c.informers,
        dynamic(ApiResource::erase::<Cluster>(&())),
        "Clusters".into(),
        tx.clone(),
        Trigger::Cluster,
    );
    spawn_informer(
        &mut c.informers,
        Api::<Node>::all(client.clone()),
        "Nodes".into(),
        tx,
        |c| Trigger::Node(Box::new(c)),
    );
    loop {
        while let Some(key) = c.queue.pop() {
            c.process(key).await;
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
    /// One request through CAPI's `reconcilerWrapper`: at most one reconcile per
    /// interval, `RequeueAfter` no shorter than what is left of it, errors backed off
    /// from the interval.
    async fn process(&mut self, key: Key) {
        let now = Instant::now();
        if let Some(last) = self.last_start.get(&key) {
            let next = *last + self.rate_limit;
            if now < next {
                self.queue.add_after(key, next - now);
                return;
            }
        }
        self.last_start.insert(key.clone(), now);
        match self.reconcile(&key).await {
            Ok(after) => {
                self.queue.forget(&key);
                if let Some(d) = after.filter(|d| !d.is_zero()) {
                    let left = (now + self.rate_limit).saturating_duration_since(Instant::now());
                    self.queue.add_after(key, d.max(left));
                }
            }
            Err(e) => {
                tracing::warn!(mhc = %format!("{}/{}", key.0, key.1), error = format!("{e:#}"), "MachineHealthCheck reconcile failed");
                let d = self.rate_limit + self.queue.next_backoff(&key);
                self.queue.add_after(key, d.min(Duration::from_secs(1000)));
            }
        }
    }

    fn on_trigger(&mut self, t: Trigger) {
        match t {
            Trigger::Mhc(change) => {
                let (o, gone) = match change {
                    Change::Added(o) | Change::Updated { new: o, .. } => (o, false),
                    Change::Deleted(o) => (o, true),
                };
                let key = key_of(&o);
                match parse::<MachineHealthCheck>(&o).filter(|_| !gone) {
                    Some(m) => {
                        self.mhcs.insert(key.clone(), m);
                    }
                    None => {
                        self.mhcs.remove(&key);
                    }
                }
                self.queue.add(key);
            }
            Trigger::Machine(change) => {
                let (machine, relevant, gone) = match change {
                    Change::Added(o) => (parse::<Machine>(&o), true, false),
                    Change::Deleted(o) => (parse::<Machine>(&o), true, true),
                    Change::Updated { old, new } => {
                        let (old, new) = (parse::<Machine>(&old), parse::<Machine>(&new));
                        let changed = match (&old, &new) {
                            (Some(o), Some(n)) => machine_changed(o, n),
                            _ => true,
                        };
                        (new, changed, false)
                    }
                };
                let Some(machine) = machine else { return };
                let key = key_of(&machine);
                if gone {
                    self.machines.remove(&key);
                } else {
                    self.machines.insert(key, machine.clone());
                }
                if relevant {
                    self.enqueue_for_machine(&machine);
                }
            }
            Trigger::Cluster(Change::Updated { old, new }) => {
                let paused = |o: &DynamicObject| {
                    parse::<Cluster>(o)
                        .and_then(|c| c.spec.paused)
                        .unwrap_or(false)
                };
                if paused(&old) != paused(&new) {
                    let (ns, name) = key_of(&new);
                    let targets: Vec<Key> = self
                        .mhcs
                        .iter()
                        .filter(|((mns, _), m)| {
                            *mns == ns && m.labels().get(CLUSTER_NAME_LABEL) == Some(&name)
                        })
                        .map(|(k, _)| k.clone())
                        .collect();
                    for k in targets {
                        self.queue.add(k);
                    }
                }
            }
            Trigger::Cluster(_) => {}
            Trigger::Node(change) => {
                let (node, relevant) = match *change {
                    Change::Added(n) | Change::Deleted(n) => (n, true),
                    Change::Updated { old, new } => {
                        let conds = |n: &Node| n.status.as_ref().and_then(|s| s.conditions.clone());
                        let changed = conds(&old) != conds(&new);
                        (new, changed)
                    }
                };
                if !relevant {
                    return;
                }
                let name = node.name_any();
                let owners: Vec<Machine> = self
                    .machines
                    .values()
                    .filter(|m| {
                        m.status
                            .as_ref()
                            .and_then(|s| s.node_ref.as_ref())
                            .is_some_and(|r| !r.name.is_empty() && r.name == name)
                    })
                    .cloned()
                    .collect();
                if let [machine] = owners.as_slice() {
                    self.enqueue_for_machine(machine);
                }
            }
        }
    }

    /// `machineToMachineHealthCheck`.
    fn enqueue_for_machine(&mut self, machine: &Machine) {
        let ns = machine.namespace().unwrap_or_default();
        let targets: Vec<Key> = self
            .mhcs
            .iter()
            .filter(|((mns, _), m)| {
                *mns == ns
                    && m.labels().get(CLUSTER_NAME_LABEL) == Some(&machine.spec.cluster_name)
                    && Selector::new(&m.spec.selector)
                        .is_ok_and(|s| s != Selector::default() && s.matches(machine.labels()))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in targets {
            self.queue.add(k);
        }
    }

    async fn reconcile(&mut self, key: &Key) -> anyhow::Result<Option<Duration>> {
        let (ns, name) = key;
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            ns,
            &ApiResource::erase::<MachineHealthCheck>(&()),
        );
        let Some(obj) = api
            .get_opt(name)
            .await
            .context("reading the MachineHealthCheck")?
        else {
            return Ok(None);
        };
        let Some(mhc) = parse::<MachineHealthCheck>(&obj) else {
            tracing::warn!(mhc = %name, "MachineHealthCheck does not match the v1beta2 API; ignored");
            return Ok(None);
        };
        let cluster = Api::<Cluster>::namespaced(self.client.clone(), ns)
            .get(&mhc.spec.cluster_name)
            .await
            .with_context(|| {
                format!(
                    "Failed to fetch Cluster {ns}/{} for MachineHealthCheck",
                    mhc.spec.cluster_name
                )
            })?;
        let now = common::now();
        let original = mhc.status.clone().unwrap_or_default();
        let mut status = original.clone();

        // EnsurePausedCondition
        let paused = paused_condition(&cluster, &mhc, now);
        let is_paused = paused.status == "True";
        let old = original
            .conditions
            .iter()
            .find(|c| c.type_ == PAUSED_CONDITION);
        let same = |o: &Condition, gen_too: bool| {
            o.status == paused.status
                && o.reason == paused.reason
                && o.message == paused.message
                && (!gen_too || o.observed_generation == paused.observed_generation)
        };
        match old {
            Some(o) if same(o, true) => {}
            Some(o) if same(o, false) && !is_paused => {
                common::set_condition(&mut status.conditions, paused.clone());
            }
            _ => {
                common::set_condition(&mut status.conditions, paused.clone());
                self.patch_mhc(&mhc, &original, &status, None).await?;
                return Ok(None);
            }
        }
        if is_paused {
            return Ok(None);
        }

        let outcome = self
            .reconcile_targets(&mhc, &cluster, &mut status, now)
            .await;
        if outcome.is_ok() {
            status.observed_generation = mhc.metadata.generation;
        }
        let cluster_owner = OwnerReference {
            api_version: API_VERSION.to_owned(),
            kind: "Cluster".to_owned(),
            name: cluster.name_any(),
            uid: cluster.metadata.uid.clone().unwrap_or_default(),
            controller: None,
            block_owner_deletion: None,
        };
        let patched = self
            .patch_mhc(&mhc, &original, &status, Some(cluster_owner))
            .await;
        let after = outcome?;
        patched?;
        Ok(after)
    }

    /// The body of `reconcile` after the Cluster owner reference.
    async fn reconcile_targets(
        &mut self,
        mhc: &MachineHealthCheck,
        cluster: &Cluster,
        status: &mut MachineHealthCheckStatus,
        now: Timestamp,
    ) -> anyhow::Result<Option<Duration>> {
        let remote = cond_is_true(
            cluster_conditions(cluster),
            CONTROL_PLANE_INITIALIZED_CONDITION,
        );
        let mut targets = self
            .targets(mhc, remote)
            .await
            .context("failed to fetch targets from MachineHealthCheck")?;
        status.expected_machines = Some(i32::try_from(targets.len()).unwrap_or(i32::MAX));
        let mut names: Vec<String> = targets.iter().map(|t| t.machine.name_any()).collect();
        names.sort();
        status.targets = names;

        let startup = mhc
            .spec
            .checks
            .as_ref()
            .and_then(|c| c.node_startup_timeout_seconds)
            .unwrap_or(DEFAULT_NODE_STARTUP_TIMEOUT_SECONDS);
        let startup = u64::try_from(startup).unwrap_or(0);
        let (mut healthy, mut unhealthy, mut next) = (Vec::new(), Vec::new(), Vec::new());
        for mut t in targets.drain(..) {
            let (needs, after) = needs_remediation(&mut t, mhc, cluster, now, startup);
            if needs {
                unhealthy.push(t);
            } else if !after.is_zero() {
                next.push(after);
            } else if !t.deleting() && t.node.is_some() {
                t.set(common::condition(
                    HEALTH_CHECK_SUCCEEDED_CONDITION,
                    "True",
                    "HealthCheckSucceeded",
                    "",
                    now,
                ));
                healthy.push(t);
            }
        }
        let expected = status.expected_machines.unwrap_or(0);
        let healthy_count = i32::try_from(healthy.len()).unwrap_or(i32::MAX);
        status.current_healthy = Some(healthy_count);

        let (allowed, count) = allowed_remediation(&mhc.spec, expected, healthy_count)
            .map_err(|e| anyhow!("error checking if remediation is allowed: {e}"))?;
        if !allowed {
            let trigger = mhc
                .spec
                .remediation
                .as_ref()
                .and_then(|r| r.trigger_if.clone())
                .unwrap_or_default();
            let message = match trigger
                .unhealthy_in_range
                .as_deref()
                .filter(|r| !r.is_empty())
            {
                None => format!(
                    "Remediation is not allowed, the number of not started or unhealthy machines exceeds maxUnhealthy (total: {expected}, unhealthy: {}, maxUnhealthy: {})",
                    unhealthy.len(),
                    int_or_string(
                        &trigger
                            .unhealthy_less_than_or_equal_to
                            .unwrap_or_else(|| IntOrString::String("100%".into()))
                    )
                ),
                Some(range) => format!(
                    "Remediation is not allowed, the number of not started or unhealthy machines does not fall within the range (total: {expected}, unhealthy: {}, unhealthyRange: {range})",
                    unhealthy.len()
                ),
            };
            tracing::info!(mhc = %mhc.name_any(), %message, "short-circuiting remediation");
            status.remediations_allowed = Some(0);
            common::set_condition(
                &mut status.conditions,
                common::condition(
                    REMEDIATION_ALLOWED_CONDITION,
                    "False",
                    "TooManyUnhealthy",
                    message,
                    now,
                ),
            );
            let mut errors = Vec::new();
            for t in healthy.iter().chain(unhealthy.iter()) {
                if let Err(e) = self.patch_machine(t).await {
                    errors.push(e);
                }
            }
            return join_errors(errors).map(|()| None);
        }
        status.remediations_allowed = Some(count);
        common::set_condition(
            &mut status.conditions,
            common::condition(
                REMEDIATION_ALLOWED_CONDITION,
                "True",
                "RemediationAllowed",
                "",
                now,
            ),
        );
        let mut errors = self.patch_unhealthy(mhc, cluster, unhealthy, now).await;
        errors.extend(self.patch_healthy(mhc, healthy).await);
        join_errors(errors)?;
        Ok(next.into_iter().min())
    }

    /// `getTargetsFromMHC`.
    async fn targets(
        &mut self,
        mhc: &MachineHealthCheck,
        remote: bool,
    ) -> anyhow::Result<Vec<Target>> {
        let ns = mhc.namespace().unwrap_or_default();
        let selector = Selector::with_label(
            &mhc.spec.selector,
            CLUSTER_NAME_LABEL,
            &mhc.spec.cluster_name,
        )
        .map_err(|e| anyhow!("failed to build selector: {e}"))?;
        let machines = Api::<DynamicObject>::namespaced_with(
            self.client.clone(),
            &ns,
            &ApiResource::erase::<Machine>(&()),
        )
        .list(&Default::default())
        .await
        .context("failed to list machines")?;
        let nodes: Api<Node> = Api::all(self.client.clone());
        let mut out = Vec::new();
        for o in machines.items {
            let Some(machine) = parse::<Machine>(&o) else {
                tracing::warn!(machine = %o.name_any(), "Machine does not match the v1beta2 API; skipped");
                continue;
            };
            if !selector.matches(machine.labels()) {
                continue;
            }
            let a = machine.annotations();
            if a.contains_key(PAUSED_ANNOTATION) || a.contains_key(SKIP_REMEDIATION_ANNOTATION) {
                tracing::info!(machine = %machine.name_any(), "Skipping remediation: paused or skip-remediation annotation");
                continue;
            }
            let mut t = Target {
                read_conditions: machine.conditions().to_vec(),
                machine,
                node: None,
                node_missing: false,
            };
            let node_ref = t
                .machine
                .status
                .as_ref()
                .and_then(|s| s.node_ref.as_ref())
                .map(|r| r.name.clone())
                .filter(|n| !n.is_empty());
            if let (true, Some(node)) = (remote, node_ref) {
                match nodes.get_opt(&node).await.context("error getting node")? {
                    Some(n) => t.node = Some(n),
                    None => t.node_missing = true,
                }
            }
            out.push(t);
        }
        Ok(out)
    }

    /// `patchUnhealthyTargets`.
    async fn patch_unhealthy(
        &mut self,
        mhc: &MachineHealthCheck,
        cluster: &Cluster,
        unhealthy: Vec<Target>,
        now: Timestamp,
    ) -> Vec<anyhow::Error> {
        let mut errors = Vec::new();
        for mut t in unhealthy {
            let machine = t.machine.name_any();
            if cluster.spec.paused == Some(true)
                || t.machine.annotations().contains_key(PAUSED_ANNOTATION)
            {
                tracing::info!(%machine, "Machine has failed health check, but machine is paused so skipping remediation");
            } else if let Some(template_ref) = mhc.template_ref() {
                // externalRemediationRequestExists: stop at the first Machine that has one.
                if matches!(
                    self.remediation_request(mhc, template_ref, &machine).await,
                    Ok(Some(_))
                ) {
                    return errors;
                }
                let created = self
                    .create_remediation_request(mhc, template_ref, &t.machine)
                    .await;
                if let Err(e) = created {
                    errors.push(e);
                    return errors;
                }
                tracing::info!(%machine, "Machine has failed health check, created an external remediation request");
                t.set(common::condition(
                    EXTERNALLY_REMEDIATED_CONDITION,
                    "False",
                    WAITING_FOR_REMEDIATION,
                    "",
                    now,
                ));
            } else if !t.deleting() {
                tracing::info!(%machine, "Machine has failed health check, marking for remediation");
                let owner_remediated = t.machine.condition(OWNER_REMEDIATED_CONDITION);
                if owner_remediated.is_none_or(|c| c.status == "True") {
                    t.set(common::condition(
                        OWNER_REMEDIATED_CONDITION,
                        "False",
                        WAITING_FOR_REMEDIATION,
                        "Waiting for remediation",
                        now,
                    ));
                }
            }
            if let Err(e) = self.patch_machine(&t).await {
                errors.push(e.context(format!(
                    "failed to patch unhealthy machine status for machine: {machine}"
                )));
            }
        }
        errors
    }

    /// `patchHealthyTargets`.
    async fn patch_healthy(
        &mut self,
        mhc: &MachineHealthCheck,
        healthy: Vec<Target>,
    ) -> Vec<anyhow::Error> {
        let mut errors = Vec::new();
        for t in healthy {
            let machine = t.machine.name_any();
            if let Some(template_ref) = mhc.template_ref() {
                let request = match self.remediation_request(mhc, template_ref, &machine).await {
                    Ok(Some(r)) => r,
                    Ok(None) => continue,
                    Err(e) => {
                        errors.push(e.context(format!(
                            "failed to fetch remediation request for machine {machine:?}"
                        )));
                        continue;
                    }
                };
                if request.metadata.deletion_timestamp.is_none() {
                    if let Err(e) = self
                        .delete_remediation_request(mhc, template_ref, &request)
                        .await
                    {
                        errors.push(e);
                        continue;
                    }
                    tracing::info!(%machine, "Machine is healthy again, deleted its external remediation request");
                }
            }
            if let Err(e) = self.patch_machine(&t).await {
                errors.push(e.context(format!(
                    "failed to patch healthy machine status for machine: {machine}"
                )));
            }
        }
        errors
    }

    /// `getExternalRemediationRequest`: the CR named after the Machine in the MHC's
    /// namespace; `None` when it does not exist.
    async fn remediation_request(
        &mut self,
        mhc: &MachineHealthCheck,
        template_ref: &TemplateReference,
        machine: &str,
    ) -> anyhow::Result<Option<DynamicObject>> {
        let (api_version, kind) = template_ref.cr_kind();
        let k = self
            .kinds
            .resolve(&self.client, &api_version, &kind)
            .await?;
        let ns = mhc.namespace().unwrap_or_default();
        k.api(&self.client, Some(&ns))
            .get_opt(machine)
            .await
            .with_context(|| format!("failed to retrieve {kind} {ns}/{machine}"))
    }

    async fn delete_remediation_request(
        &mut self,
        mhc: &MachineHealthCheck,
        template_ref: &TemplateReference,
        request: &DynamicObject,
    ) -> anyhow::Result<()> {
        let (api_version, kind) = template_ref.cr_kind();
        let k = self
            .kinds
            .resolve(&self.client, &api_version, &kind)
            .await?;
        let ns = mhc.namespace().unwrap_or_default();
        match k
            .api(&self.client, Some(&ns))
            .delete(&request.name_any(), &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => {
                Err(anyhow!(e).context(format!("failed to delete {kind} {:?}", request.name_any())))
            }
        }
    }

    /// Reads the template (in the MHC's namespace) and creates the request.
    async fn create_remediation_request(
        &mut self,
        mhc: &MachineHealthCheck,
        template_ref: &TemplateReference,
        machine: &Machine,
    ) -> anyhow::Result<()> {
        let ns = mhc.namespace().unwrap_or_default();
        let kind = self
            .kinds
            .resolve(&self.client, &template_ref.api_version, &template_ref.kind)
            .await
            .with_context(|| {
                format!(
                    "error retrieving remediation template {} {ns}/{}",
                    template_ref.kind, template_ref.name
                )
            })?;
        let mut template = kind
            .api(&self.client, Some(&ns))
            .get(&template_ref.name)
            .await
            .with_context(|| {
                format!(
                    "error retrieving remediation template {} {ns}/{}",
                    template_ref.kind, template_ref.name
                )
            })?;
        template.types = Some(TypeMeta {
            api_version: template_ref.api_version.clone(),
            kind: template_ref.kind.clone(),
        });
        let request = generate_remediation_request(&template, template_ref, machine)
            .map_err(|e| anyhow!("failed to create template for remediation request: {e}"))?;
        let types = request.types.clone().unwrap_or_default();
        let request_kind = self
            .kinds
            .resolve(&self.client, &types.api_version, &types.kind)
            .await?;
        request_kind
            .api(&self.client, machine.namespace().as_deref())
            .create(&PostParams::default(), &request)
            .await
            .with_context(|| {
                format!(
                    "error creating remediation request for machine {:?}",
                    machine.name_any()
                )
            })?;
        Ok(())
    }

    /// Writes the Machine's conditions when they changed, guarded by the
    /// resourceVersion they were read at.
    async fn patch_machine(&mut self, t: &Target) -> anyhow::Result<()> {
        let conditions = t.machine.conditions();
        if conditions == t.read_conditions.as_slice() {
            return Ok(());
        }
        let api: Api<Machine> = Api::namespaced(
            self.client.clone(),
            &t.machine.namespace().unwrap_or_default(),
        );
        api.patch_status(
            &t.machine.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"resourceVersion": t.machine.resource_version()},
                "status": {"conditions": conditions},
            })),
        )
        .await
        .with_context(|| {
            format!(
                "failed to patch machine status for machine: {}",
                t.machine.name_any()
            )
        })?;
        Ok(())
    }

    /// The patch helper: labels and owner references, then the status.
    async fn patch_mhc(
        &mut self,
        mhc: &MachineHealthCheck,
        original: &MachineHealthCheckStatus,
        status: &MachineHealthCheckStatus,
        cluster_owner: Option<OwnerReference>,
    ) -> anyhow::Result<()> {
        let api: Api<MachineHealthCheck> =
            Api::namespaced(self.client.clone(), &mhc.namespace().unwrap_or_default());
        let name = mhc.name_any();
        if let Some(owner) = cluster_owner {
            let mut labels = mhc.labels().clone();
            labels.insert(CLUSTER_NAME_LABEL.to_owned(), mhc.spec.cluster_name.clone());
            let mut owners = mhc.owner_references().to_vec();
            let group = |api_version: &str| common::split_api_version(api_version).0.to_owned();
            match owners.iter_mut().find(|o| {
                group(&o.api_version) == GROUP && o.kind == owner.kind && o.name == owner.name
            }) {
                Some(o) => *o = owner,
                None => owners.push(owner),
            }
            if &labels != mhc.labels() || owners.as_slice() != mhc.owner_references() {
                api.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"metadata": {"labels": labels, "ownerReferences": owners}}),
                    ),
                )
                .await
                .context("patching the MachineHealthCheck's labels and owner")?;
            }
        }
        if let Some(diff) = common::merge_diff(
            &serde_json::to_value(original)?,
            &serde_json::to_value(status)?,
        ) {
            api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": diff})),
            )
            .await
            .context("patching the MachineHealthCheck's status")?;
        }
        Ok(())
    }
}

fn join_errors(errors: Vec<anyhow::Error>) -> anyhow::Result<()> {
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors
            .into_iter()
            .next()
            .unwrap_or_else(|| anyhow!("unknown error"))),
        _ => Err(anyhow!(
            "{}",
            errors
                .iter()
                .map(|e| format!("{e:#}"))
                .collect::<Vec<_>>()
                .join("; ")
        )),
    }
}
