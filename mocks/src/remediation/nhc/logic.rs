//! The pure parts of the NodeHealthCheck stand-in: spec parsing, node health,
//! `minHealthy`/`maxUnhealthy`, remediation CRs from templates, and NHC's status
//! bookkeeping (each function names the NHC function it follows).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeCondition, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::core::TypeMeta;
use serde_json::{Value, json};

use super::{
    API_VERSION, CONTROL_PLANE_ROLE_LABEL, DEFAULT_UNHEALTHY_DURATION, DISABLED_CONDITION,
    EXCLUDE_FROM_REMEDIATION_LABEL, KIND, MANUALLY_CONFIRMED_HEALTHY_ANNOTATION, MASTER_ROLE_LABEL,
    MULTIPLE_TEMPLATES_SUPPORT_ANNOTATION, NODE_NAME_ANNOTATION, NodeHealthCheck,
    NodeHealthCheckSpec, NodeHealthCheckStatus, PART_OF_LABEL, PART_OF_VALUE, Remediation,
    TEMPLATE_NAME_ANNOTATION, TEMPLATE_SUFFIX, UnhealthyNode,
};
use crate::remediation::common::{self, Selector};

/// A spec checked and parsed the way the API server's schema and NHC's webhook
/// would have accepted it.
#[derive(Debug, Clone)]
pub(super) struct Parsed {
    pub(super) selector: Selector,
    pub(super) unhealthy: Vec<(String, String, Duration)>,
    /// Templates in use order, with the escalation timeout (`None` for the single
    /// `remediationTemplate`).
    pub(super) templates: Vec<(ObjectReference, Option<Duration>)>,
}

pub(super) fn parse_spec(spec: &NodeHealthCheckSpec) -> Result<Parsed, String> {
    let selector = Selector::new(&spec.selector).map_err(|e| format!("invalid selector: {e}"))?;
    let unhealthy = match &spec.unhealthy_conditions {
        None => vec![
            (
                "Ready".to_owned(),
                "False".to_owned(),
                DEFAULT_UNHEALTHY_DURATION,
            ),
            (
                "Ready".to_owned(),
                "Unknown".to_owned(),
                DEFAULT_UNHEALTHY_DURATION,
            ),
        ],
        Some(cs) => cs
            .iter()
            .map(|c| {
                common::parse_go_duration(&c.duration)
                    .map(|d| (c.type_.clone(), c.status.clone(), d))
                    .map_err(|e| format!("unhealthyConditions duration: {e}"))
            })
            .collect::<Result<_, _>>()?,
    };
    let escalations = spec.escalating_remediations.as_deref().unwrap_or_default();
    let templates = match (&spec.remediation_template, escalations.is_empty()) {
        (Some(_), false) => {
            return Err(
                "remediationTemplate and escalatingRemediations are mutually exclusive".into(),
            );
        }
        (None, true) => {
            return Err("one of remediationTemplate or escalatingRemediations must be set".into());
        }
        (Some(t), true) => vec![(t.clone(), None)],
        (None, false) => {
            let mut steps = escalations.to_vec();
            steps.sort_by_key(|s| s.order);
            if steps.windows(2).any(|w| w[0].order == w[1].order) {
                return Err("EscalatingRemediation Order must be unique".into());
            }
            steps
                .into_iter()
                .map(|s| {
                    common::parse_go_duration(&s.timeout)
                        .map(|d| (s.remediation_template, Some(d)))
                        .map_err(|e| format!("escalatingRemediations timeout: {e}"))
                })
                .collect::<Result<_, _>>()?
        }
    };
    for (t, _) in &templates {
        let kind = t.kind.as_deref().unwrap_or_default();
        if t.api_version.as_deref().unwrap_or_default().is_empty()
            || !kind.ends_with(TEMPLATE_SUFFIX)
            || t.name.as_deref().unwrap_or_default().is_empty()
        {
            return Err(format!(
                "a remediation template needs apiVersion, a kind ending in {TEMPLATE_SUFFIX:?} and a name: {t:?}"
            ));
        }
    }
    Ok(Parsed {
        selector,
        unhealthy,
        templates,
    })
}

/// `matchesUnhealthyConditions`: whether the node is unhealthy now, else how long
/// until a matching condition's duration expires (+1 s), if one matches.
pub(super) fn node_unhealthy(
    conditions: &[NodeCondition],
    unhealthy: &[(String, String, Duration)],
    now: Timestamp,
) -> (bool, Option<Duration>) {
    let by_type: BTreeMap<&str, &NodeCondition> =
        conditions.iter().map(|c| (c.type_.as_str(), c)).collect();
    let mut expires: Option<Duration> = None;
    for (type_, status, duration) in unhealthy {
        let Some(c) = by_type.get(type_.as_str()) else {
            continue;
        };
        if c.status != *status {
            continue;
        }
        // A condition without a transition time counts from Go's zero time.
        let since = c
            .last_transition_time
            .as_ref()
            .map_or(Timestamp::MIN, |t| t.0);
        let at = common::add(since, *duration);
        if now > at {
            return (true, None);
        }
        let left = common::until(now, at) + Duration::from_secs(1);
        expires = Some(expires.map_or(left, |e| e.min(left)));
    }
    (false, expires)
}

/// `getMinHealthy`: how many selected nodes must be healthy to remediate.
pub(super) fn min_healthy(spec: &NodeHealthCheckSpec, total: i32) -> Result<i32, String> {
    match (&spec.min_healthy, &spec.max_unhealthy) {
        (Some(_), Some(_)) => {
            Err("minHealthy and maxUnhealthy cannot be specified at the same time".into())
        }
        (None, None) => Err("one of minHealthy and maxUnhealthy should be specified".into()),
        (Some(min), None) => {
            if matches!(min, IntOrString::Int(i) if *i < 0) {
                return Err(format!("minHealthy must not be negative: {min:?}"));
            }
            let v = common::scaled_value(min, total, true)?;
            if v < 0 {
                return Err(format!("minHealthy is negative: {v}"));
            }
            Ok(v)
        }
        (None, Some(max)) => {
            if matches!(max, IntOrString::Int(i) if *i < 0) {
                return Err(format!("maxUnhealthy must not be negative: {max:?}"));
            }
            let v = common::scaled_value(max, total, true)?;
            if v < 0 {
                return Err(format!("maxUnhealthy is negative: {v}"));
            }
            if v > total {
                return Err(format!(
                    "maxUnhealthy is greater than the number of selected nodes: {v}"
                ));
            }
            Ok(total - v)
        }
    }
}

pub(super) fn is_control_plane(node: &Node) -> bool {
    let l = node.labels();
    l.contains_key(MASTER_ROLE_LABEL) || l.contains_key(CONTROL_PLANE_ROLE_LABEL)
}

pub(super) fn owner_ref(nhc: &NodeHealthCheck) -> OwnerReference {
    OwnerReference {
        api_version: API_VERSION.to_owned(),
        kind: KIND.to_owned(),
        name: nhc.name_any(),
        uid: nhc.metadata.uid.clone().unwrap_or_default(),
        controller: Some(false),
        block_owner_deletion: None,
    }
}

/// `IsOwner`: the CR has an owner reference to this NHC (by kind, apiVersion, name).
pub(super) fn is_owner(cr: &DynamicObject, nhc_name: &str) -> bool {
    cr.owner_references()
        .iter()
        .any(|o| o.kind == KIND && o.api_version == API_VERSION && o.name == nhc_name)
}

/// `GetNodeNameFromCR`.
pub(super) fn node_name_of(cr: &DynamicObject) -> String {
    cr.annotations()
        .get(NODE_NAME_ANNOTATION)
        .cloned()
        .unwrap_or_else(|| cr.name_any())
}

/// `GetTemplateNameFromCR`.
pub(super) fn template_name_of(cr: &DynamicObject) -> Option<String> {
    cr.annotations().get(TEMPLATE_NAME_ANNOTATION).cloned()
}

/// `isMatchNodeTemplate`.
pub(super) fn matches_node_template(cr: &DynamicObject, node: &str, template: &str) -> bool {
    match (
        cr.annotations().get(TEMPLATE_NAME_ANNOTATION),
        cr.annotations().get(NODE_NAME_ANNOTATION),
    ) {
        (None, _) => cr.name_any() == node,
        (Some(t), n) => t == template && n.map(String::as_str) == Some(node),
    }
}

/// apiVersion and kind of the CRs made from `template` (kind minus `Template`).
pub(super) fn cr_kind_of(template: &ObjectReference) -> (String, String) {
    let kind = template.kind.as_deref().unwrap_or_default();
    (
        template.api_version.clone().unwrap_or_default(),
        kind.strip_suffix(TEMPLATE_SUFFIX)
            .unwrap_or(kind)
            .to_owned(),
    )
}

/// `GenerateRemediationCRForNode` (without OpenShift's Machine owner).
pub(super) fn generate_remediation_cr(
    template: &DynamicObject,
    node: &str,
    owner: OwnerReference,
) -> Result<DynamicObject, String> {
    let types = template
        .types
        .as_ref()
        .ok_or_else(|| format!("template {} without apiVersion/kind", template.name_any()))?;
    let kind = types
        .kind
        .strip_suffix(TEMPLATE_SUFFIX)
        .unwrap_or(&types.kind);
    let spec = template
        .data
        .pointer("/spec/template/spec")
        .filter(|s| s.is_object())
        .cloned()
        .unwrap_or(Value::Null);
    let mut metadata = ObjectMeta {
        namespace: template.metadata.namespace.clone(),
        annotations: Some(BTreeMap::from([
            (NODE_NAME_ANNOTATION.to_owned(), node.to_owned()),
            (TEMPLATE_NAME_ANNOTATION.to_owned(), template.name_any()),
        ])),
        labels: Some(BTreeMap::from([(
            PART_OF_LABEL.to_owned(),
            PART_OF_VALUE.to_owned(),
        )])),
        owner_references: Some(vec![owner]),
        ..Default::default()
    };
    if template
        .annotations()
        .contains_key(MULTIPLE_TEMPLATES_SUPPORT_ANNOTATION)
    {
        metadata.generate_name = Some(format!("{node}-"));
    } else {
        metadata.name = Some(node.to_owned());
    }
    Ok(DynamicObject {
        types: Some(TypeMeta {
            api_version: types.api_version.clone(),
            kind: kind.to_owned(),
        }),
        metadata,
        data: json!({"spec": spec}),
    })
}

pub(super) fn status_node<'a>(
    status: &'a mut NodeHealthCheckStatus,
    node: &str,
) -> Option<&'a mut UnhealthyNode> {
    status.unhealthy_nodes.iter_mut().find(|n| n.name == node)
}

/// `UpdateStatusNodeHealthy`.
pub(super) fn status_node_healthy(status: &mut NodeHealthCheckStatus, node: &str) {
    status.unhealthy_nodes.retain(|n| n.name != node);
}

/// `UpdateStatusNodeUnhealthy`.
pub(super) fn status_node_unhealthy(status: &mut NodeHealthCheckStatus, node: &str) {
    if status_node(status, node).is_none() {
        status.unhealthy_nodes.push(UnhealthyNode {
            name: node.to_owned(),
            ..Default::default()
        });
    }
}

/// `UpdateStatusNodeConditionsHealthy`.
pub(super) fn status_node_conditions_healthy(
    status: &mut NodeHealthCheckStatus,
    node: &str,
    now: Timestamp,
) {
    if let Some(n) = status_node(status, node) {
        n.conditions_healthy_timestamp
            .get_or_insert_with(|| common::time(now));
    }
}

pub(super) fn same_kind(r: &ObjectReference, api_version: &str, kind: &str) -> bool {
    r.api_version.as_deref() == Some(api_version) && r.kind.as_deref() == Some(kind)
}

/// `UpdateStatusRemediationStarted`: records the CR unless the node already has a
/// remediation of its kind.
pub(super) fn status_remediation_started(
    status: &mut NodeHealthCheckStatus,
    node: &str,
    cr: &DynamicObject,
) {
    let (api_version, kind) = cr
        .types
        .as_ref()
        .map(|t| (t.api_version.clone(), t.kind.clone()))
        .unwrap_or_default();
    let remediation = Remediation {
        resource: ObjectReference {
            api_version: Some(api_version.clone()),
            kind: Some(kind.clone()),
            namespace: cr.namespace(),
            name: Some(cr.name_any()),
            uid: cr.uid(),
            ..Default::default()
        },
        started: cr
            .metadata
            .creation_timestamp
            .clone()
            .unwrap_or_else(|| common::time(common::now())),
        timed_out: None,
        template_name: template_name_of(cr),
    };
    match status_node(status, node) {
        Some(n) => {
            if !n
                .remediations
                .iter()
                .any(|r| same_kind(&r.resource, &api_version, &kind))
            {
                n.remediations.push(remediation);
            }
        }
        None => status.unhealthy_nodes.push(UnhealthyNode {
            name: node.to_owned(),
            remediations: vec![remediation],
            ..Default::default()
        }),
    }
}

/// `FindStatusRemediation` for a template: same CR kind, and the same template name
/// when one was recorded.
pub(super) fn status_remediation<'a>(
    status: &'a mut NodeHealthCheckStatus,
    node: &str,
    template: &ObjectReference,
    timed_out: Option<bool>,
) -> Option<&'a mut Remediation> {
    let (api_version, kind) = cr_kind_of(template);
    let name = template.name.clone().unwrap_or_default();
    status_node(status, node)?
        .remediations
        .iter_mut()
        .find(|r| {
            same_kind(&r.resource, &api_version, &kind)
                && r.template_name
                    .as_deref()
                    .is_none_or(|t| t.is_empty() || t == name)
                && timed_out.is_none_or(|t| r.timed_out.is_some() == t)
        })
}

/// `patchStatus`'s phase and reason.
pub(super) fn phase(
    spec: &NodeHealthCheckSpec,
    status: &NodeHealthCheckStatus,
) -> (String, String) {
    let disabled = status
        .conditions
        .iter()
        .find(|c| c.type_ == DISABLED_CONDITION && c.status == "True");
    let pauses = spec.pause_requests.as_deref().unwrap_or_default();
    if let Some(c) = disabled {
        (
            "Disabled".into(),
            format!("NHC is disabled: {}: {}", c.reason, c.message),
        )
    } else if !pauses.is_empty() {
        (
            "Paused".into(),
            format!("NHC is paused: {}", pauses.join(",")),
        )
    } else if status
        .unhealthy_nodes
        .iter()
        .any(|n| !n.remediations.is_empty())
    {
        (
            "Remediating".into(),
            format!("NHC is remediating {} nodes", status.unhealthy_nodes.len()),
        )
    } else {
        (
            "Enabled".into(),
            "NHC is enabled, no ongoing remediation".into(),
        )
    }
}

/// Whether a Node update is one NHC reconciles for (`nodeUpdateNeedsReconcile`).
pub(super) fn node_update_needs_reconcile(
    old: &Node,
    new: &Node,
    selector_keys: &BTreeSet<String>,
) -> bool {
    let (ol, nl) = (old.labels(), new.labels());
    let label_changed = |k: &str| ol.get(k) != nl.get(k);
    if label_changed(EXCLUDE_FROM_REMEDIATION_LABEL)
        || selector_keys.iter().any(|k| label_changed(k))
    {
        return true;
    }
    let conds = |n: &Node| {
        n.status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default()
    };
    let (oc, nc) = (conds(old), conds(new));
    if nc.iter().any(|c| c.type_ == "Ready")
        && (oc.len() != nc.len()
            || oc.iter().any(|o| {
                nc.iter()
                    .find(|n| n.type_ == o.type_)
                    .is_none_or(|n| n.status != o.status)
            }))
    {
        return true;
    }
    old.annotations()
        .contains_key(MANUALLY_CONFIRMED_HEALTHY_ANNOTATION)
        != new
            .annotations()
            .contains_key(MANUALLY_CONFIRMED_HEALTHY_ANNOTATION)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::api::ApiResource;

    use super::super::{nhc_crd, percent, template_ref};
    use super::*;

    fn ts(s: &str) -> Timestamp {
        common::parse_time(s).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn cond(type_: &str, status: &str, since: &str) -> NodeCondition {
        NodeCondition {
            type_: type_.into(),
            status: status.into(),
            last_transition_time: Some(Time(ts(since))),
            ..Default::default()
        }
    }

    fn template() -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "test.example.com/v1alpha1",
            "kind": "TestRemediationTemplate",
            "metadata": {"name": "tmpl", "namespace": "remediators", "uid": "t-uid",
                         "resourceVersion": "7", "labels": {"x": "y"}},
            "spec": {"template": {"spec": {"strategy": "reboot", "nested": {"n": 42}}}},
        }))
        .unwrap_or_else(|_| DynamicObject::new("", &ApiResource::erase::<NodeHealthCheck>(&())))
    }

    fn nhc_owner() -> OwnerReference {
        owner_ref(&NodeHealthCheck {
            metadata: ObjectMeta {
                name: Some("workers".into()),
                uid: Some("nhc-uid".into()),
                ..Default::default()
            },
            ..NodeHealthCheck::new("workers")
        })
    }

    #[test]
    fn a_condition_makes_a_node_unhealthy_only_after_its_duration() {
        let rules = vec![
            (
                "Ready".to_owned(),
                "False".to_owned(),
                Duration::from_secs(300),
            ),
            (
                "Ready".to_owned(),
                "Unknown".to_owned(),
                Duration::from_secs(60),
            ),
        ];
        let not_ready = [cond("Ready", "False", "2026-01-01T10:00:00Z")];
        assert_eq!(
            node_unhealthy(&not_ready, &rules, ts("2026-01-01T10:04:00Z")),
            (false, Some(Duration::from_secs(61)))
        );
        assert_eq!(
            node_unhealthy(&not_ready, &rules, ts("2026-01-01T10:05:00Z")),
            (false, Some(Duration::from_secs(1)))
        );
        assert_eq!(
            node_unhealthy(&not_ready, &rules, ts("2026-01-01T10:05:00.001Z")),
            (true, None)
        );
        let unknown = [cond("Ready", "Unknown", "2026-01-01T10:00:00Z")];
        assert_eq!(
            node_unhealthy(&unknown, &rules, ts("2026-01-01T10:01:01Z")),
            (true, None)
        );
        let ready = [
            cond("Ready", "True", "2026-01-01T10:00:00Z"),
            cond("DiskPressure", "False", "2026-01-01T10:00:00Z"),
        ];
        assert_eq!(
            node_unhealthy(&ready, &rules, ts("2026-01-02T00:00:00Z")),
            (false, None)
        );
        let no_time = [NodeCondition {
            type_: "Ready".into(),
            status: "False".into(),
            ..Default::default()
        }];
        assert_eq!(
            node_unhealthy(&no_time, &rules, ts("2026-01-01T00:00:00Z")),
            (true, None)
        );
        assert_eq!(
            node_unhealthy(&[], &rules, ts("2026-01-01T00:00:00Z")),
            (false, None)
        );
    }

    #[test]
    fn min_healthy_and_max_unhealthy_arithmetic() {
        let spec = |min: Option<IntOrString>, max: Option<IntOrString>| NodeHealthCheckSpec {
            min_healthy: min,
            max_unhealthy: max,
            ..Default::default()
        };
        assert_eq!(min_healthy(&spec(Some(percent(51)), None), 3), Ok(2));
        assert_eq!(min_healthy(&spec(Some(percent(51)), None), 4), Ok(3));
        assert_eq!(
            min_healthy(&spec(Some(IntOrString::Int(2)), None), 5),
            Ok(2)
        );
        assert_eq!(min_healthy(&spec(Some(percent(100)), None), 5), Ok(5));
        assert_eq!(
            min_healthy(&spec(None, Some(IntOrString::Int(1))), 5),
            Ok(4)
        );
        assert_eq!(min_healthy(&spec(None, Some(percent(40))), 5), Ok(3));
        assert_eq!(min_healthy(&spec(None, Some(percent(0))), 5), Ok(5));
        assert!(min_healthy(&spec(None, Some(IntOrString::Int(6))), 5).is_err());
        assert!(min_healthy(&spec(Some(IntOrString::Int(-1)), None), 5).is_err());
        assert!(min_healthy(&spec(None, None), 5).is_err());
        assert!(min_healthy(&spec(Some(percent(1)), Some(percent(1))), 5).is_err());
    }

    #[test]
    fn the_cr_copies_the_template_as_nhc_generates_it() {
        let cr = generate_remediation_cr(&template(), "worker-1", nhc_owner())
            .unwrap_or_else(|e| panic!("{e}"));
        let doc = serde_json::to_value(&cr).unwrap_or_default();
        assert_eq!(
            doc,
            json!({
                "apiVersion": "test.example.com/v1alpha1",
                "kind": "TestRemediation",
                "metadata": {
                    "name": "worker-1",
                    "namespace": "remediators",
                    "annotations": {
                        "remediation.medik8s.io/node-name": "worker-1",
                        "remediation.medik8s.io/template-name": "tmpl",
                    },
                    "labels": {"app.kubernetes.io/part-of": "node-healthcheck-controller"},
                    "ownerReferences": [{
                        "apiVersion": "remediation.medik8s.io/v1alpha1",
                        "kind": "NodeHealthCheck",
                        "name": "workers",
                        "uid": "nhc-uid",
                        "controller": false,
                    }],
                },
                "spec": {"strategy": "reboot", "nested": {"n": 42}},
            })
        );
        let mut multi = template();
        multi
            .annotations_mut()
            .insert(MULTIPLE_TEMPLATES_SUPPORT_ANNOTATION.into(), "true".into());
        let cr = generate_remediation_cr(&multi, "worker-1", nhc_owner())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (cr.metadata.name, cr.metadata.generate_name.as_deref()),
            (None, Some("worker-1-"))
        );
    }

    #[test]
    fn crs_are_matched_to_nodes_and_templates_by_their_annotations() {
        let cr = generate_remediation_cr(&template(), "worker-1", nhc_owner())
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches_node_template(&cr, "worker-1", "tmpl"));
        assert!(!matches_node_template(&cr, "worker-1", "other"));
        assert!(is_owner(&cr, "workers") && !is_owner(&cr, "others"));
        let mut bare = cr.clone();
        bare.metadata.annotations = None;
        assert!(matches_node_template(&bare, "worker-1", "anything"));
        assert_eq!(node_name_of(&bare), "worker-1");
    }

    #[test]
    fn specs_are_parsed_with_defaults_and_escalation_order() {
        let t = |n: &str| {
            template_ref(
                "test.example.com/v1alpha1",
                "TestRemediationTemplate",
                "ns",
                n,
            )
        };
        let nhc = NodeHealthCheck::new("x")
            .escalating_remediation(t("second"), 2, Duration::from_secs(60))
            .escalating_remediation(t("first"), 1, Duration::from_millis(1500));
        let p = parse_spec(&nhc.spec).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.unhealthy.len(), 2);
        assert_eq!(
            p.unhealthy[1],
            ("Ready".into(), "Unknown".into(), Duration::from_secs(300))
        );
        let order: Vec<_> = p
            .templates
            .iter()
            .map(|(r, d)| (r.name.clone().unwrap_or_default(), *d))
            .collect();
        assert_eq!(
            order,
            [
                ("first".to_owned(), Some(Duration::from_millis(1500))),
                ("second".to_owned(), Some(Duration::from_secs(60)))
            ]
        );
        assert!(parse_spec(&nhc.clone().remediation_template(t("x")).spec).is_err());
        assert!(parse_spec(&NodeHealthCheck::new("y").spec).is_err());
        let dup = NodeHealthCheck::new("z")
            .escalating_remediation(t("a"), 1, Duration::from_secs(60))
            .escalating_remediation(t("b"), 1, Duration::from_secs(60));
        assert!(parse_spec(&dup.spec).is_err());
        let bad_kind = NodeHealthCheck::new("w").remediation_template(template_ref(
            "v1",
            "ConfigMap",
            "ns",
            "n",
        ));
        assert!(parse_spec(&bad_kind.spec).is_err());
    }

    #[test]
    fn the_status_tracks_remediations_per_node() {
        let mut status = NodeHealthCheckStatus::default();
        let t = template_ref(
            "test.example.com/v1alpha1",
            "TestRemediationTemplate",
            "ns",
            "tmpl",
        );
        let mut cr = generate_remediation_cr(&template(), "worker-1", nhc_owner())
            .unwrap_or_else(|e| panic!("{e}"));
        cr.metadata.uid = Some("cr-uid".into());
        cr.metadata.creation_timestamp = Some(Time(ts("2026-01-01T10:00:00Z")));
        status_node_unhealthy(&mut status, "worker-1");
        status_remediation_started(&mut status, "worker-1", &cr);
        status_remediation_started(&mut status, "worker-1", &cr);
        let node = &status.unhealthy_nodes[0];
        assert_eq!(node.remediations.len(), 1);
        assert_eq!(
            node.remediations[0].resource.kind.as_deref(),
            Some("TestRemediation")
        );
        assert_eq!(node.remediations[0].template_name.as_deref(), Some("tmpl"));
        assert!(status_remediation(&mut status, "worker-1", &t, Some(true)).is_none());
        if let Some(r) = status_remediation(&mut status, "worker-1", &t, None) {
            r.timed_out = Some(Time(ts("2026-01-01T10:05:00Z")));
        }
        assert!(status_remediation(&mut status, "worker-1", &t, Some(true)).is_some());
        let spec = NodeHealthCheckSpec::default();
        assert_eq!(phase(&spec, &status).0, "Remediating");
        status_node_healthy(&mut status, "worker-1");
        assert_eq!(phase(&spec, &status).0, "Enabled");
        let paused = NodeHealthCheck::new("p").pause("upgrade").spec;
        assert_eq!(
            phase(&paused, &status),
            ("Paused".into(), "NHC is paused: upgrade".into())
        );
    }

    #[test]
    fn node_updates_reconcile_on_conditions_labels_and_annotations() {
        let node = |ready: &str, labels: &[(&str, &str)]| -> Node {
            serde_json::from_value(json!({
                "metadata": {"name": "n", "labels": labels.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect::<serde_json::Map<_, _>>()},
                "status": {"conditions": [{"type": "Ready", "status": ready}]},
            }))
            .unwrap_or_default()
        };
        let keys: BTreeSet<String> = ["role".to_owned()].into();
        assert!(!node_update_needs_reconcile(
            &node("True", &[]),
            &node("True", &[("other", "x")]),
            &keys
        ));
        assert!(node_update_needs_reconcile(
            &node("True", &[]),
            &node("False", &[]),
            &keys
        ));
        assert!(node_update_needs_reconcile(
            &node("True", &[]),
            &node("True", &[("role", "w")]),
            &keys
        ));
        assert!(node_update_needs_reconcile(
            &node("True", &[]),
            &node("True", &[(EXCLUDE_FROM_REMEDIATION_LABEL, "true")]),
            &keys
        ));
    }

    #[test]
    fn the_crd_serves_the_v1alpha1_api() {
        let crd = nhc_crd();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("nodehealthchecks.remediation.medik8s.io")
        );
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(
            crd.spec.names.short_names.as_deref(),
            Some(&["nhc".to_owned()][..])
        );
        let doc = NodeHealthCheck::new("n")
            .select_labels([("role", "worker")])
            .unhealthy_condition("Ready", "False", Duration::from_secs(2))
            .min_healthy(percent(51))
            .remediation_template(template_ref("a.b/v1", "XTemplate", "ns", "t"));
        let v = serde_json::to_value(&doc).unwrap_or_default();
        assert_eq!(v["apiVersion"], "remediation.medik8s.io/v1alpha1");
        assert_eq!(
            v["spec"]["unhealthyConditions"][0],
            json!({"type": "Ready", "status": "False", "duration": "2s"})
        );
        assert_eq!(v["spec"]["minHealthy"], "51%");
        assert_eq!(NodeHealthCheck::from_json(v).ok(), Some(doc));
    }
}
