//! The pure parts of the MachineHealthCheck stand-in: target health checks,
//! short-circuiting, cloning the remediation request from its template, and the
//! predicates (each function names the CAPI function it follows).

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::core::TypeMeta;
use serde_json::{Value, json};

use super::{
    API_VERSION, CLONED_FROM_GROUPKIND_ANNOTATION, CLONED_FROM_NAME_ANNOTATION, CLUSTER_NAME_LABEL,
    CONTROL_PLANE_INITIALIZED_CONDITION, CONTROL_PLANE_LABEL, Cluster,
    HEALTH_CHECK_SUCCEEDED_CONDITION, INFRASTRUCTURE_READY_CONDITION, Machine, MachineHealthCheck,
    MachineHealthCheckSpec, PAUSED_ANNOTATION, PAUSED_CONDITION, REMEDIATE_MACHINE_ANNOTATION,
    TEMPLATE_SUFFIX, TemplateReference, TriggerIf, UnhealthyConditionCheck,
};
use crate::remediation::common;

pub(super) fn cond_is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

pub(super) fn cond_ltt(conditions: &[Condition], type_: &str) -> Option<Timestamp> {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.last_transition_time.0)
}

pub(super) fn cluster_conditions(cluster: &Cluster) -> &[Condition] {
    cluster.status.as_ref().map_or(&[], |s| &s.conditions)
}

/// One Machine under health check.
#[derive(Debug, Clone)]
pub(super) struct Target {
    pub(super) machine: Machine,
    /// The conditions as read, to patch only what changed.
    pub(super) read_conditions: Vec<Condition>,
    pub(super) node: Option<Node>,
    pub(super) node_missing: bool,
}

impl Target {
    pub(super) fn set(&mut self, c: Condition) {
        let generation = self.machine.metadata.generation;
        let status = self.machine.status.get_or_insert_default();
        common::set_condition(
            &mut status.conditions,
            Condition {
                observed_generation: generation,
                ..c
            },
        );
    }

    pub(super) fn deleting(&self) -> bool {
        self.machine.metadata.deletion_timestamp.is_some()
    }
}

/// `machineChecks` / the condition loop of `nodeChecks`: messages for conditions
/// held past their timeout, else the time until the next one expires (+1 s).
pub(super) fn condition_checks(
    checks: &[UnhealthyConditionCheck],
    current: &[(String, String, String, Option<Timestamp>)],
    on: &str,
    now: Timestamp,
) -> (Vec<String>, Duration) {
    let mut messages = Vec::new();
    let mut next: Option<Duration> = None;
    for c in checks {
        let Some((_, status, reason, since)) = current.iter().find(|(t, ..)| *t == c.type_) else {
            continue;
        };
        if *status != c.status {
            continue;
        }
        let timeout_secs = u64::try_from(c.timeout_seconds.unwrap_or(0)).unwrap_or(0);
        let timeout = Duration::from_secs(timeout_secs);
        let since = since.unwrap_or(Timestamp::MIN);
        if common::add(since, timeout) < now {
            messages.push(format!(
                "Condition {} on {on} is reporting status {} with reason {reason} for more than {}",
                c.type_,
                c.status,
                common::go_duration_string(timeout_secs)
            ));
            continue;
        }
        let check = common::until(now, common::add(since, timeout)) + Duration::from_secs(1);
        next = Some(next.map_or(check, |n| n.min(check)));
    }
    if messages.is_empty() {
        (messages, next.unwrap_or_default())
    } else {
        (messages, Duration::ZERO)
    }
}

/// `needsRemediation`: whether the target is unhealthy (its `HealthCheckSucceeded`
/// condition set False), else when to check again (zero: no need).
pub(super) fn needs_remediation(
    t: &mut Target,
    mhc: &MachineHealthCheck,
    cluster: &Cluster,
    now: Timestamp,
    startup_timeout_secs: u64,
) -> (bool, Duration) {
    if t.machine
        .annotations()
        .contains_key(REMEDIATE_MACHINE_ANNOTATION)
    {
        t.set(common::condition(
            HEALTH_CHECK_SUCCEEDED_CONDITION,
            "False",
            "HasRemediateAnnotation",
            "Health check failed: marked for remediation via cluster.x-k8s.io/remediate-machine annotation",
            now,
        ));
        return (true, Duration::ZERO);
    }
    let cc = cluster_conditions(cluster);
    if !cond_is_true(cc, CONTROL_PLANE_INITIALIZED_CONDITION)
        && !t.machine.labels().contains_key(CONTROL_PLANE_LABEL)
    {
        return (false, Duration::ZERO);
    }
    if !cond_is_true(cc, INFRASTRUCTURE_READY_CONDITION) {
        return (false, Duration::ZERO);
    }
    let checks = mhc.spec.checks.clone().unwrap_or_default();
    let machine_conditions: Vec<_> = t
        .machine
        .conditions()
        .iter()
        .map(|c| {
            (
                c.type_.clone(),
                c.status.clone(),
                c.reason.clone(),
                Some(c.last_transition_time.0),
            )
        })
        .collect();
    let (machine_messages, next_machine) = condition_checks(
        &checks.unhealthy_machine_conditions,
        &machine_conditions,
        "Machine",
        now,
    );

    let (node_reason, node_messages, next_node) = if t.node_missing {
        let name = t
            .machine
            .status
            .as_ref()
            .and_then(|s| s.node_ref.as_ref())
            .map(|r| r.name.clone())
            .unwrap_or_default();
        (
            "NodeDeleted",
            vec![format!("Node {name} has been deleted")],
            Duration::ZERO,
        )
    } else if let Some(node) = &t.node {
        let node_conditions: Vec<_> = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default()
            .iter()
            .map(|c| {
                (
                    c.type_.clone(),
                    c.status.clone(),
                    c.reason.clone().unwrap_or_default(),
                    c.last_transition_time.as_ref().map(|t| t.0),
                )
            })
            .collect();
        let (m, n) = condition_checks(
            &checks.unhealthy_node_conditions,
            &node_conditions,
            "Node",
            now,
        );
        ("UnhealthyNode", m, n)
    } else if startup_timeout_secs == 0 {
        ("", Vec::new(), Duration::ZERO)
    } else {
        let mut since = t
            .machine
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(Timestamp::MIN, |c| c.0);
        for (conditions, type_) in [
            (cc, CONTROL_PLANE_INITIALIZED_CONDITION),
            (cc, INFRASTRUCTURE_READY_CONDITION),
            (t.machine.conditions(), INFRASTRUCTURE_READY_CONDITION),
        ] {
            if cond_is_true(conditions, type_)
                && let Some(ltt) = cond_ltt(conditions, type_)
            {
                since = since.max(ltt);
            }
        }
        let timeout = Duration::from_secs(startup_timeout_secs);
        if common::add(since, timeout) < now {
            (
                "NodeStartupTimeout",
                vec![format!(
                    "Node failed to report startup in {}",
                    common::go_duration_string(startup_timeout_secs)
                )],
                Duration::ZERO,
            )
        } else {
            (
                "",
                Vec::new(),
                common::until(now, common::add(since, timeout)) + Duration::from_secs(1),
            )
        }
    };

    if machine_messages.is_empty() && node_messages.is_empty() {
        let next = [next_machine, next_node]
            .into_iter()
            .filter(|d| !d.is_zero())
            .min()
            .unwrap_or_default();
        return (false, next);
    }
    let reason = if machine_messages.is_empty() {
        node_reason
    } else {
        "UnhealthyMachine"
    };
    let all: Vec<String> = machine_messages.into_iter().chain(node_messages).collect();
    let message = format!(
        "Health check failed:\n{}",
        all.iter()
            .map(|m| format!("  * {m}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    t.set(common::condition(
        HEALTH_CHECK_SUCCEEDED_CONDITION,
        "False",
        reason,
        message,
        now,
    ));
    (true, Duration::ZERO)
}

/// `isAllowedRemediation`: whether remediation may proceed and how many more are
/// allowed.
pub(super) fn allowed_remediation(
    spec: &MachineHealthCheckSpec,
    expected: i32,
    healthy: i32,
) -> Result<(bool, i32), String> {
    let trigger = spec
        .remediation
        .as_ref()
        .and_then(|r| r.trigger_if.clone())
        .unwrap_or_default();
    let unhealthy = expected - healthy;
    if let Some(range) = trigger
        .unhealthy_in_range
        .as_deref()
        .filter(|r| !r.is_empty())
    {
        let (min, max) = unhealthy_range(range)?;
        return Ok((unhealthy >= min && unhealthy <= max, max - unhealthy));
    }
    let max = max_unhealthy(&trigger, expected)?;
    Ok((unhealthy <= max, max - unhealthy))
}

pub(super) fn max_unhealthy(trigger: &TriggerIf, expected: i32) -> Result<i32, String> {
    let value = trigger
        .unhealthy_less_than_or_equal_to
        .clone()
        .unwrap_or_else(|| IntOrString::String("100%".into()));
    common::scaled_value(&value, expected, false)
}

/// `getUnhealthyRange`: "[3-5]" → (3, 5).
pub(super) fn unhealthy_range(range: &str) -> Result<(i32, i32), String> {
    let inner = range
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .ok_or_else(|| format!("invalid unhealthyInRange {range:?}"))?;
    let (a, b) = inner
        .split_once('-')
        .ok_or_else(|| format!("invalid unhealthyInRange {range:?}"))?;
    let parse = |s: &str| {
        s.parse::<u32>()
            .map_err(|e| format!("{e}"))
            .and_then(|v| i32::try_from(v).map_err(|e| format!("{e}")))
    };
    let (min, max) = (parse(a)?, parse(b)?);
    if max < min {
        return Err(format!(
            "max value {max} cannot be less than min value {min} for unhealthyRange"
        ));
    }
    Ok((min, max))
}

pub(super) fn int_or_string(v: &IntOrString) -> String {
    match v {
        IntOrString::Int(i) => i.to_string(),
        IntOrString::String(s) => s.clone(),
    }
}

/// `external.GenerateTemplate` as the MHC calls it: a clone of `spec.template`
/// named after the Machine, in its namespace, owned by it.
pub(super) fn generate_remediation_request(
    template: &DynamicObject,
    template_ref: &TemplateReference,
    machine: &Machine,
) -> Result<DynamicObject, String> {
    let types = template
        .types
        .as_ref()
        .ok_or_else(|| format!("template {} without apiVersion/kind", template.name_any()))?;
    let mut to = match template.data.pointer("/spec/template") {
        None | Some(Value::Null) => json!({}),
        Some(v @ Value::Object(_)) => v.clone(),
        Some(_) => {
            return Err(format!(
                "failed to retrieve Spec.Template map on {} {:?}",
                types.kind,
                template.name_any()
            ));
        }
    };
    let (group, _) = common::split_api_version(&template_ref.api_version);
    let group_kind = if group.is_empty() {
        template_ref.kind.clone()
    } else {
        format!("{}.{group}", template_ref.kind)
    };
    let api_version = to
        .get("apiVersion")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map_or_else(|| types.api_version.clone(), str::to_owned);
    let kind = to
        .get("kind")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map_or_else(
            || {
                types
                    .kind
                    .strip_suffix(TEMPLATE_SUFFIX)
                    .unwrap_or(&types.kind)
                    .to_owned()
            },
            str::to_owned,
        );
    let mut metadata: ObjectMeta = to
        .get("metadata")
        .cloned()
        .map(serde_json::from_value)
        .transpose()
        .map_err(|e| format!("template metadata: {e}"))?
        .unwrap_or_default();
    metadata.resource_version = None;
    metadata.finalizers = None;
    metadata.uid = None;
    metadata.name = Some(machine.name_any());
    metadata.generate_name = None;
    metadata.namespace = machine.namespace();
    metadata.annotations.get_or_insert_default().extend([
        (
            CLONED_FROM_NAME_ANNOTATION.to_owned(),
            template_ref.name.clone(),
        ),
        (CLONED_FROM_GROUPKIND_ANNOTATION.to_owned(), group_kind),
    ]);
    metadata.labels.get_or_insert_default().insert(
        CLUSTER_NAME_LABEL.to_owned(),
        machine.spec.cluster_name.clone(),
    );
    metadata.owner_references = Some(vec![OwnerReference {
        api_version: API_VERSION.to_owned(),
        kind: "Machine".to_owned(),
        name: machine.name_any(),
        uid: machine.metadata.uid.clone().unwrap_or_default(),
        controller: None,
        block_owner_deletion: None,
    }]);
    if let Some(o) = to.as_object_mut() {
        o.remove("apiVersion");
        o.remove("kind");
        o.remove("metadata");
    }
    Ok(DynamicObject {
        types: Some(TypeMeta { api_version, kind }),
        metadata,
        data: to,
    })
}

/// `pausedCondition`.
pub(super) fn paused_condition(
    cluster: &Cluster,
    mhc: &MachineHealthCheck,
    now: Timestamp,
) -> Condition {
    let mut messages = Vec::new();
    if cluster.spec.paused == Some(true) {
        messages.push("Cluster spec.paused is set to true".to_owned());
    }
    if mhc.annotations().contains_key(PAUSED_ANNOTATION) {
        messages.push("MachineHealthCheck has the cluster.x-k8s.io/paused annotation".to_owned());
    }
    let c = if messages.is_empty() {
        common::condition(PAUSED_CONDITION, "False", "NotPaused", "", now)
    } else {
        common::condition(PAUSED_CONDITION, "True", "Paused", messages.join(", "), now)
    };
    Condition {
        observed_generation: mhc.metadata.generation,
        ..c
    }
}

/// Whether a Machine update is one the MHC reconciles for (`machineIsChangedPredicate`).
pub(super) fn machine_changed(old: &Machine, new: &Machine) -> bool {
    let node = |m: &Machine| {
        m.status
            .as_ref()
            .and_then(|s| s.node_ref.clone())
            .map(|r| r.name)
    };
    node(old) != node(new)
        || old.labels() != new.labels()
        || old.annotations() != new.annotations()
        || old.conditions() != new.conditions()
}

#[cfg(test)]
mod tests {
    use kube::api::ApiResource;

    use super::super::{
        ConditionsStatus, GROUP, MachineNodeReference, MachineStatus, cluster_crd, machine_crd,
        machine_health_check_crd,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn ts(s: &str) -> Timestamp {
        common::parse_time(s).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn ready_cluster() -> Cluster {
        let mut c = Cluster::new("ns", "c1");
        let t0 = ts("2026-01-01T09:00:00Z");
        c.status = Some(ConditionsStatus {
            conditions: vec![
                common::condition(CONTROL_PLANE_INITIALIZED_CONDITION, "True", "x", "", t0),
                common::condition(INFRASTRUCTURE_READY_CONDITION, "True", "x", "", t0),
            ],
        });
        c
    }

    fn node(ready: &str, since: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "node-1"},
            "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "KubeletNotReady",
                                        "lastTransitionTime": since}]},
        }))
        .unwrap_or_default()
    }

    fn target(node: Option<Node>, missing: bool) -> Target {
        let mut m = Machine::new("ns", "m1", "c1");
        m.metadata.creation_timestamp = Some(Time(ts("2026-01-01T09:30:00Z")));
        m.metadata.generation = Some(3);
        m.status = Some(MachineStatus {
            node_ref: Some(MachineNodeReference {
                name: "node-1".into(),
            }),
            conditions: Vec::new(),
        });
        Target {
            machine: m,
            read_conditions: Vec::new(),
            node,
            node_missing: missing,
        }
    }

    fn mhc() -> MachineHealthCheck {
        MachineHealthCheck::new("ns", "mhc", "c1")
            .select_labels([("pool", "a")])
            .unhealthy_node_condition("Ready", "False", Duration::from_secs(300))
            .unhealthy_node_condition("Ready", "Unknown", Duration::from_secs(300))
    }

    #[test]
    fn node_conditions_make_a_machine_unhealthy_after_their_timeout() {
        let (cluster, mhc) = (ready_cluster(), mhc());
        let now = ts("2026-01-01T10:04:00Z");
        let mut t = target(Some(node("False", "2026-01-01T10:00:00Z")), false);
        assert_eq!(
            needs_remediation(&mut t, &mhc, &cluster, now, 600),
            (false, Duration::from_secs(61))
        );
        assert!(
            t.machine
                .condition(HEALTH_CHECK_SUCCEEDED_CONDITION)
                .is_none()
        );
        let later = ts("2026-01-01T10:05:01Z");
        assert_eq!(
            needs_remediation(&mut t, &mhc, &cluster, later, 600),
            (true, Duration::ZERO)
        );
        let c = t
            .machine
            .condition(HEALTH_CHECK_SUCCEEDED_CONDITION)
            .cloned()
            .unwrap_or_else(|| panic!("no HealthCheckSucceeded"));
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "UnhealthyNode")
        );
        assert_eq!(
            c.message,
            "Health check failed:\n  * Condition Ready on Node is reporting status False with reason KubeletNotReady for more than 5m0s"
        );
        assert_eq!(c.observed_generation, Some(3));

        let mut gone = target(None, true);
        assert!(needs_remediation(&mut gone, &mhc, &cluster, now, 600).0);
        let c = gone
            .machine
            .condition(HEALTH_CHECK_SUCCEEDED_CONDITION)
            .cloned()
            .unwrap_or_else(|| panic!("no HealthCheckSucceeded"));
        assert_eq!(
            (c.reason.as_str(), c.message.as_str()),
            (
                "NodeDeleted",
                "Health check failed:\n  * Node node-1 has been deleted"
            )
        );

        let mut ready = target(Some(node("True", "2026-01-01T10:00:00Z")), false);
        assert_eq!(
            needs_remediation(&mut ready, &mhc, &cluster, later, 600),
            (false, Duration::ZERO)
        );
    }

    #[test]
    fn machines_without_nodes_time_out_on_startup_and_clusters_gate_checks() {
        let (cluster, mhc) = (ready_cluster(), mhc());
        let mut t = target(None, false);
        assert_eq!(
            needs_remediation(&mut t, &mhc, &cluster, ts("2026-01-01T09:35:00Z"), 600),
            (false, Duration::from_secs(301))
        );
        assert!(needs_remediation(&mut t, &mhc, &cluster, ts("2026-01-01T09:40:01Z"), 600).0);
        let c = t
            .machine
            .condition(HEALTH_CHECK_SUCCEEDED_CONDITION)
            .cloned()
            .unwrap_or_else(|| panic!("no HealthCheckSucceeded"));
        assert_eq!(
            (c.reason.as_str(), c.message.as_str()),
            (
                "NodeStartupTimeout",
                "Health check failed:\n  * Node failed to report startup in 10m0s"
            )
        );
        let mut disabled = target(None, false);
        assert_eq!(
            needs_remediation(&mut disabled, &mhc, &cluster, ts("2026-01-02T00:00:00Z"), 0),
            (false, Duration::ZERO)
        );

        let mut uninitialized = Cluster::new("ns", "c1");
        uninitialized.status = None;
        let mut gone = target(None, true);
        assert_eq!(
            needs_remediation(
                &mut gone,
                &mhc,
                &uninitialized,
                ts("2026-01-02T00:00:00Z"),
                600
            ),
            (false, Duration::ZERO)
        );
        let mut marked = target(None, false);
        marked
            .machine
            .annotations_mut()
            .insert(REMEDIATE_MACHINE_ANNOTATION.into(), String::new());
        assert!(
            needs_remediation(
                &mut marked,
                &mhc,
                &uninitialized,
                ts("2026-01-02T00:00:00Z"),
                600
            )
            .0
        );
    }

    #[test]
    fn machine_conditions_take_the_reason() {
        let cluster = ready_cluster();
        let mhc = mhc().unhealthy_machine_condition(
            "InfrastructureReady",
            "False",
            Duration::from_secs(60),
        );
        let mut t = target(Some(node("False", "2026-01-01T10:00:00Z")), false);
        t.set(common::condition(
            "InfrastructureReady",
            "False",
            "InstanceGone",
            "",
            ts("2026-01-01T10:00:00Z"),
        ));
        assert!(needs_remediation(&mut t, &mhc, &cluster, ts("2026-01-01T10:06:00Z"), 600).0);
        let c = t
            .machine
            .condition(HEALTH_CHECK_SUCCEEDED_CONDITION)
            .cloned()
            .unwrap_or_else(|| panic!("no HealthCheckSucceeded"));
        assert_eq!(c.reason, "UnhealthyMachine");
        assert_eq!(c.message.lines().count(), 3, "{}", c.message);
    }

    #[test]
    fn short_circuit_arithmetic() {
        let spec = |m: MachineHealthCheck| m.spec;
        let base = || MachineHealthCheck::new("ns", "m", "c");
        assert_eq!(allowed_remediation(&spec(base()), 10, 0), Ok((true, 0)));
        let pct = spec(base().unhealthy_less_than_or_equal_to(IntOrString::String("40%".into())));
        assert_eq!(allowed_remediation(&pct, 25, 15), Ok((true, 0)));
        assert_eq!(allowed_remediation(&pct, 25, 14), Ok((false, -1)));
        assert_eq!(allowed_remediation(&pct, 6, 4), Ok((true, 0)));
        assert_eq!(allowed_remediation(&pct, 6, 3), Ok((false, -1)));
        let abs = spec(base().unhealthy_less_than_or_equal_to(IntOrString::Int(2)));
        assert_eq!(allowed_remediation(&abs, 10, 9), Ok((true, 1)));
        let range = spec(
            base()
                .unhealthy_less_than_or_equal_to(IntOrString::Int(0))
                .unhealthy_in_range("[3-5]"),
        );
        assert_eq!(allowed_remediation(&range, 10, 8), Ok((false, 3)));
        assert_eq!(allowed_remediation(&range, 10, 6), Ok((true, 1)));
        assert_eq!(allowed_remediation(&range, 10, 4), Ok((false, -1)));
        assert!(unhealthy_range("[5-3]").is_err() && unhealthy_range("3-5").is_err());
    }

    #[test]
    fn the_request_is_cloned_from_the_template_as_capi_does() {
        let template: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "test.example.com/v1alpha1",
            "kind": "TestRemediationTemplate",
            "metadata": {"name": "tmpl", "namespace": "ns", "uid": "t", "resourceVersion": "3"},
            "spec": {"template": {
                "metadata": {"labels": {"from": "template"}, "annotations": {"a": "b"}},
                "spec": {"strategy": "reboot"},
            }},
        }))
        .unwrap_or_else(|_| DynamicObject::new("", &ApiResource::erase::<Machine>(&())));
        let template_ref = TemplateReference {
            api_version: "test.example.com/v1alpha1".into(),
            kind: "TestRemediationTemplate".into(),
            name: "tmpl".into(),
        };
        let mut machine = Machine::new("ns", "m1", "c1");
        machine.metadata.uid = Some("m-uid".into());
        let r = generate_remediation_request(&template, &template_ref, &machine)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            serde_json::to_value(&r).unwrap_or_default(),
            json!({
                "apiVersion": "test.example.com/v1alpha1",
                "kind": "TestRemediation",
                "metadata": {
                    "name": "m1",
                    "namespace": "ns",
                    "labels": {"from": "template", "cluster.x-k8s.io/cluster-name": "c1"},
                    "annotations": {
                        "a": "b",
                        "cluster.x-k8s.io/cloned-from-name": "tmpl",
                        "cluster.x-k8s.io/cloned-from-groupkind": "TestRemediationTemplate.test.example.com",
                    },
                    "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": "m1", "uid": "m-uid"}],
                },
                "spec": {"strategy": "reboot"},
            })
        );
    }

    #[test]
    fn paused_and_machine_predicates() {
        let mut cluster = ready_cluster();
        let now = ts("2026-01-01T10:00:00Z");
        assert_eq!(paused_condition(&cluster, &mhc(), now).status, "False");
        cluster.spec.paused = Some(true);
        let c = paused_condition(&cluster, &mhc(), now);
        assert_eq!(
            (c.status.as_str(), c.message.as_str()),
            ("True", "Cluster spec.paused is set to true")
        );
        let a = Machine::new("ns", "m", "c");
        let mut b = a.clone();
        assert!(!machine_changed(&a, &b));
        b.status = Some(MachineStatus {
            node_ref: Some(MachineNodeReference { name: "n".into() }),
            conditions: vec![],
        });
        assert!(machine_changed(&a, &b));
        for crd in [cluster_crd(), machine_crd(), machine_health_check_crd()] {
            assert_eq!(crd.spec.group, GROUP);
            assert_eq!(crd.spec.versions[0].name, "v1beta2");
        }
    }
}
