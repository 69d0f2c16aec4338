//! From Kubernetes objects to [`NodeFacts`]: which conditions, labels, annotations
//! and taints mean what to nodefence.
//!
//! A Node without a Ready condition is not judged: the node lifecycle controller adds
//! `Ready=Unknown` to nodes that never report, and nodefence waits for that.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::Resource;

use crate::engine::facts::ReturnFacts;
use crate::engine::returned::EndedBoot;
pub use crate::engine::returned::{
    PROOF_CHECKED_ANNOTATION, PROOF_CONTRADICTED_ANNOTATION, RELEASED_BOOT_ANNOTATION,
};
use crate::engine::{NodeFacts, Readiness};

/// The non-graceful node shutdown taint.
pub const OUT_OF_SERVICE_TAINT: &str = "node.kubernetes.io/out-of-service";
/// Its value when nodefence adds it (as in the Kubernetes documentation).
pub const OUT_OF_SERVICE_VALUE: &str = "nodeshutdown";
/// `nodefence.io/exclude: "true"` on a Node: nodefence never touches it. Nothing
/// nodefence does ever removes or changes this annotation.
pub const EXCLUDE_ANNOTATION: &str = "nodefence.io/exclude";
/// Set by nodefence when it adds the out-of-service taint (RFC 3339 time); only a
/// taint recorded here is ever removed by nodefence.
pub const TAINTED_ANNOTATION: &str = "nodefence.io/out-of-service-added";
/// Written by nodefence just before it sends a power-off (`"<time> attempt <n> boot
/// <bootID>"`, the boot the Node reported then; older records lack it), so that a new
/// leader, a restarted replica or a reloaded configuration does not send a second one
/// for the same failure within `power_off_retry_after`: a sign of life after the
/// command from the same boot is the machine still going down, not a new life.
pub const POWER_OFF_ANNOTATION: &str = "nodefence.io/power-off-sent";
/// Written by nodefence when it removes its out-of-service taint: the release that
/// just ended, as an ISO 8601 interval `"<taint added>/<taint removed>"` (RFC 3339,
/// nodefence's clock). A remediation request created before that end, which no
/// replica saw while the node was released (its watches were down, or no replica
/// led), was served by that release: it does not fence the node again.
pub const LAST_RELEASE_ANNOTATION: &str = "nodefence.io/last-release";
/// Control-plane role labels (current and legacy).
pub const CONTROL_PLANE_LABELS: &[&str] = &[
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
];

/// True when the Node carries `nodefence.io/exclude: "true"` (any case, spaces
/// around ignored).
pub fn opted_out(node: &Node) -> bool {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(EXCLUDE_ANNOTATION))
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// The facts the engine needs about `node`.
pub fn node_facts(node: &Node, lease: Option<&Lease>, in_inventory: bool) -> NodeFacts {
    let meta = &node.metadata;
    let labels = meta.labels.as_ref();
    let annotations = meta.annotations.as_ref();
    let spec = node.spec.as_ref();
    let taints = spec.and_then(|s| s.taints.as_deref()).unwrap_or_default();
    let has_taint = taints.iter().any(|t| t.key == OUT_OF_SERVICE_TAINT);
    let power_off = annotations
        .and_then(|a| a.get(POWER_OFF_ANNOTATION))
        .and_then(|v| parse_power_off(v));
    let lease = lease.map(KeptLease::new).unwrap_or_default();
    NodeFacts {
        name: meta.name.clone().unwrap_or_default(),
        readiness: readiness(node),
        lease_renewed: lease.renewed,
        lease_seen: lease.seen,
        lease_change_seen: lease.change_seen,
        lease_duration: lease.duration,
        last_heartbeat: node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .into_iter()
            .flatten()
            .filter_map(|c| {
                c.last_heartbeat_time
                    .as_ref()
                    .map(|t| SystemTime::from(t.0))
            })
            .max(),
        control_plane: labels
            .is_some_and(|l| CONTROL_PLANE_LABELS.iter().any(|k| l.contains_key(*k))),
        opted_out: opted_out(node),
        cordoned: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        in_inventory,
        our_taint: has_taint && annotations.is_some_and(|a| a.contains_key(TAINTED_ANNOTATION)),
        our_taint_added: annotations
            .filter(|_| has_taint)
            .and_then(|a| a.get(TAINTED_ANNOTATION))
            .and_then(|v| humantime::parse_rfc3339_weak(v.trim()).ok()),
        identity: crate::identity::NodeIdentity::from_node(node),
        power_off_recorded: power_off.map(|r| (r.at, r.attempt)),
        power_off_this_boot: power_off
            .and_then(|r| r.boot)
            .is_some_and(|boot| crate::watchdog::mark::boot_id_of(node) == Some(boot)),
        last_release_ended: annotations
            .and_then(|a| a.get(LAST_RELEASE_ANNOTATION))
            .and_then(|v| parse_last_release(v))
            .map(|(_, ended)| ended),
        registered: meta
            .creation_timestamp
            .as_ref()
            .map(|t| SystemTime::from(t.0)),
        request: None,
        companion_silent: None,
        boot_id: crate::watchdog::mark::boot_id_of(node).map(str::to_string),
        fencing_marked: crate::watchdog::mark::of_node(node).is_some_and(|mark| {
            crate::watchdog::mark::boot_id_of(node).is_none_or(|boot| mark.applies_to(boot))
        }),
        returned: return_facts(annotations, has_taint),
    }
}

/// What the Node's annotations record of nodefence's release and its check on
/// return (`None`: nothing).
fn return_facts(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
    has_taint: bool,
) -> Option<Box<ReturnFacts>> {
    let a = annotations?;
    let facts = ReturnFacts {
        // Present but unreadable (edited by hand, a newer format): no boot to compare
        // with, so nothing can be told on return (never "recorded none": that is an
        // older version's release, let back as before).
        released_boot: a
            .get(RELEASED_BOOT_ANNOTATION)
            .filter(|_| has_taint)
            .map(|v| {
                EndedBoot::parse(v).unwrap_or(EndedBoot {
                    since: std::time::UNIX_EPOCH,
                    boot: None,
                    proof: crate::engine::returned::ProofKind::OffReadings,
                })
            }),
        proof_contradicted: a.contains_key(PROOF_CONTRADICTED_ANNOTATION),
        proof_checked: a
            .get(PROOF_CHECKED_ANNOTATION)
            .map(|v| v.trim().to_string()),
    };
    (facts != ReturnFacts::default()).then(|| Box::new(facts))
}

/// What the controller keeps of a Node between events: the facts the engine reads
/// from it and the reference its Events name, nothing else (a few hundred bytes). A
/// kubelet's Node carries its image list, managed fields, capacity and addresses
/// (10-20 KB of JSON, and 1.5 KB inline even emptied); kept, 5,000 of them were most
/// of the daemon's memory. Releases read the Node again from the API server, never
/// this.
#[derive(Debug, Clone)]
pub struct KeptNode {
    /// [`node_facts`] of the Node without a Lease (the Lease's part and
    /// `in_inventory` are filled in by [`KeptNode::facts`]).
    facts: NodeFacts,
    reference: ObjectReference,
}

impl KeptNode {
    pub fn new(node: &Node) -> Self {
        Self {
            facts: node_facts(node, None, false),
            reference: node.object_ref(&()),
        }
    }

    /// [`node_facts`] of the Node kept, with its kubelet `lease`.
    pub fn facts(&self, lease: Option<&KeptLease>, in_inventory: bool) -> NodeFacts {
        let lease = lease.copied().unwrap_or_default();
        NodeFacts {
            in_inventory,
            lease_renewed: lease.renewed,
            lease_seen: lease.seen,
            lease_change_seen: lease.change_seen,
            lease_duration: lease.duration,
            ..self.facts.clone()
        }
    }

    /// Which machine the Node says it runs on.
    pub fn identity(&self) -> &crate::identity::NodeIdentity {
        &self.facts.identity
    }

    /// The object an Event about this Node names.
    pub fn reference(&self) -> &ObjectReference {
        &self.reference
    }

    pub fn uid(&self) -> Option<&str> {
        self.reference.uid.as_deref()
    }
}

/// What [`node_facts`] reads of a kubelet Lease: its last renewal and its duration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeptLease {
    renewed: Option<SystemTime>,
    duration: Option<Duration>,
    /// When this renewal was seen, by nodefence's clock (see `NodeFacts::lease_seen`).
    seen: Option<SystemTime>,
    /// When this renewTime was seen to change (`None` at first sight: see
    /// `NodeFacts::lease_change_seen`).
    change_seen: Option<SystemTime>,
}

impl KeptLease {
    /// `lease` as it says (no time of sight).
    pub fn new(lease: &Lease) -> Self {
        let spec = lease.spec.as_ref();
        Self {
            renewed: spec
                .and_then(|s| s.renew_time.as_ref())
                .map(|t| SystemTime::from(t.0)),
            duration: spec
                .and_then(|s| s.lease_duration_seconds)
                .and_then(|s| u64::try_from(s).ok())
                .map(Duration::from_secs),
            seen: None,
            change_seen: None,
        }
    }

    /// `lease` as the watch delivered it at `now`, after `before` (the version kept
    /// until then). A new renewTime was seen now, whatever the kubelet's clock wrote; an
    /// unchanged one keeps its time of sight. At first sight (start-up, a new leader)
    /// it counts as seen now too: a renewTime read against another clock could make a
    /// renewing node suspect at every start, and a node that had already stopped
    /// renewing is only found one threshold later (12 s by default; one already
    /// NotReady is unhealthy anyway).
    pub fn observed(lease: &Lease, before: Option<&KeptLease>, now: SystemTime) -> Self {
        let mut kept = Self::new(lease);
        kept.seen = match before {
            Some(b) if b.renewed == kept.renewed => b.seen,
            _ => kept.renewed.map(|_| now),
        };
        // A renewal this replica saw happen, not one it found at first sight.
        kept.change_seen = match before {
            Some(b) if b.renewed == kept.renewed => b.change_seen,
            Some(_) => kept.renewed.map(|_| now),
            None => None,
        };
        kept
    }
}

/// A [`POWER_OFF_ANNOTATION`] value: when the power-off was sent, which attempt it
/// was, and the boot the Node reported then (`None`: an older record, or none known).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PowerOffRecord<'a> {
    pub at: SystemTime,
    pub attempt: u32,
    pub boot: Option<&'a str>,
}

/// `"<RFC 3339 time> attempt <n>[ boot <bootID>]"`, as [`power_off_annotation`]
/// writes it. `None`: the time or the attempt does not read.
pub fn parse_power_off(value: &str) -> Option<PowerOffRecord<'_>> {
    let (at, rest) = value.trim().split_once(" attempt ")?;
    let (attempt, boot) = match rest.split_once(" boot ") {
        Some((attempt, boot)) => (attempt, Some(boot.trim()).filter(|b| !b.is_empty())),
        None => (rest, None),
    };
    Some(PowerOffRecord {
        at: humantime::parse_rfc3339(at.trim()).ok()?,
        attempt: attempt.trim().parse().ok()?,
        boot,
    })
}

/// The value of [`POWER_OFF_ANNOTATION`] for a power-off sent at `at` to the machine
/// whose Node reports boot `boot`.
pub fn power_off_annotation(at: SystemTime, attempt: u32, boot: Option<&str>) -> String {
    let at = humantime::format_rfc3339_micros(at);
    match boot {
        Some(boot) => format!("{at} attempt {attempt} boot {boot}"),
        None => format!("{at} attempt {attempt}"),
    }
}

/// The release [`LAST_RELEASE_ANNOTATION`] records: when the taint was added (if that
/// part reads) and when it was removed. `None`: the end does not read.
pub fn parse_last_release(value: &str) -> Option<(Option<SystemTime>, SystemTime)> {
    let (added, removed) = value.trim().split_once('/')?;
    Some((
        humantime::parse_rfc3339_weak(added.trim()).ok(),
        humantime::parse_rfc3339_weak(removed.trim()).ok()?,
    ))
}

/// The value of [`LAST_RELEASE_ANNOTATION`] for a release whose taint was added as
/// `added` says (the taint's own annotation, as written) and removed at `removed`.
pub fn last_release_annotation(added: &str, removed: SystemTime) -> String {
    let removed = humantime::format_rfc3339_seconds(removed).to_string();
    let added = Some(added.trim())
        .filter(|a| humantime::parse_rfc3339_weak(a).is_ok())
        .unwrap_or(&removed);
    format!("{added}/{removed}")
}

/// The Ready condition: True → Ready; False or Unknown → NotReady since its last
/// transition; absent → Ready (not judged yet).
pub fn readiness(node: &Node) -> Readiness {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    match ready {
        Some(c) if c.status != "True" => Readiness::NotReady {
            since: c
                .last_transition_time
                .as_ref()
                .map(|t| SystemTime::from(t.0))
                .or_else(|| {
                    node.metadata
                        .creation_timestamp
                        .as_ref()
                        .map(|t| SystemTime::from(t.0))
                })
                .unwrap_or(SystemTime::UNIX_EPOCH),
        },
        _ => Readiness::Ready,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(v: serde_json::Value) -> Node {
        serde_json::from_value(v).expect("valid Node")
    }

    /// A Node as a kubelet writes it, with what nodefence reads and much it does not.
    fn kubelet_node() -> Node {
        let images: Vec<_> = (0..60)
            .map(|i| {
                json!({"names": [format!("registry.example.com/team/app-{i}@sha256:{i:064x}"),
                                      format!("registry.example.com/team/app-{i}:v1.{i}.0")],
                            "sizeBytes": 123_456_789 + i})
            })
            .collect();
        let condition = |t: &str, status: &str| {
            json!({"type": t, "status": status,
            "lastHeartbeatTime": "2026-11-22T10:00:00Z", "lastTransitionTime": "2026-11-20T08:00:00Z",
            "reason": format!("Kubelet{t}"), "message": format!("kubelet reports {t} is {status}")})
        };
        node(json!({
            "metadata": {"name": "worker-7", "uid": "3f1c0b9e-1111-4222-8333-444455556666",
                "resourceVersion": "987654", "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"kubernetes.io/hostname": "worker-7", "kubernetes.io/os": "linux",
                    "node-role.kubernetes.io/master": "", "topology.kubernetes.io/zone": "rack-3"},
                "annotations": {"nodefence.io/exclude": "true",
                    POWER_OFF_ANNOTATION: "2026-11-22T10:00:05.000000Z attempt 2",
                    "node.alpha.kubernetes.io/ttl": "0",
                    "csi.volume.kubernetes.io/nodeid": "{\"rbd.csi.ceph.com\":\"worker-7\"}",
                    "projectcalico.org/IPv4Address": "10.0.3.7/24"},
                "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                    "time": "2026-11-22T10:00:00Z", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {"f:images": {}, "f:conditions": {}}}}]},
            "spec": {"podCIDR": "10.244.7.0/24", "providerID": "metal://rack-3/worker-7",
                "taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]},
            "status": {
                "conditions": [condition("MemoryPressure", "False"), condition("DiskPressure", "False"),
                    condition("PIDPressure", "False"), condition("Ready", "Unknown")],
                "addresses": [{"type": "InternalIP", "address": "10.0.3.7"},
                    {"type": "Hostname", "address": "worker-7"}],
                "capacity": {"cpu": "64", "memory": "527988912Ki", "pods": "110"},
                "allocatable": {"cpu": "63", "memory": "527886512Ki", "pods": "110"},
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "images": images,
                "volumesInUse": ["kubernetes.io/csi/rbd.csi.ceph.com^0001-0009-rook-ceph"],
                "nodeInfo": {"machineID": "ab", "systemUUID": "4C4C4544-0042-3510-8051-C4C04F4B4E32",
                    "bootID": "b", "kernelVersion": "6.1.0", "osImage": "Debian GNU/Linux 12",
                    "containerRuntimeVersion": "containerd://1.7.0", "kubeletVersion": "v1.33.0",
                    "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"}}
        }))
    }

    #[test]
    fn a_kept_node_gives_the_same_facts_identity_and_reference_in_a_fraction_of_the_memory() {
        let full = kubelet_node();
        let kept = KeptNode::new(&full);
        for in_inventory in [true, false] {
            assert_eq!(
                kept.facts(None, in_inventory),
                node_facts(&full, None, in_inventory)
            );
        }
        assert_eq!(
            kept.identity(),
            &crate::identity::NodeIdentity::from_node(&full)
        );
        assert_eq!(kept.reference(), &full.object_ref(&()));
        assert_eq!(kept.uid(), full.metadata.uid.as_deref());
        let facts = kept.facts(None, true);
        assert!(facts.control_plane && facts.opted_out);
        assert!(facts.power_off_recorded.is_some() && facts.last_heartbeat.is_some());
        assert!(matches!(facts.readiness, Readiness::NotReady { .. }));
        assert!(
            std::mem::size_of::<KeptNode>() * 3 < std::mem::size_of::<Node>(),
            "kept {} bytes inline, a Node {}",
            std::mem::size_of::<KeptNode>(),
            std::mem::size_of::<Node>()
        );
        let lease: Lease = serde_json::from_value(json!({
            "metadata": {"name": "worker-7", "namespace": "kube-node-lease", "uid": "u",
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "worker-7", "uid": "3f1c"}],
                "managedFields": [{"manager": "kubelet", "operation": "Update"}]},
            "spec": {"holderIdentity": "worker-7", "leaseDurationSeconds": 40,
                "renewTime": "2026-11-22T10:00:01.123456Z"}}))
        .expect("valid Lease");
        let with_lease = kept.facts(Some(&KeptLease::new(&lease)), true);
        assert_eq!(with_lease, node_facts(&full, Some(&lease), true));
        assert_eq!(with_lease.lease_duration, Some(Duration::from_secs(40)));
        assert!(with_lease.lease_renewed.is_some());
    }

    #[test]
    fn ready_not_ready_and_unknown() {
        let ready = node(json!({"metadata": {"name": "a"}, "status": {"conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-22T10:00:00Z"}]}}));
        assert_eq!(readiness(&ready), Readiness::Ready);
        let unknown = node(json!({"metadata": {"name": "a"}, "status": {"conditions": [
            {"type": "MemoryPressure", "status": "Unknown", "lastTransitionTime": "2026-11-22T09:00:00Z"},
            {"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-11-22T10:00:00Z"}]}}));
        let since = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_795_341_600);
        assert_eq!(readiness(&unknown), Readiness::NotReady { since });
        let never = node(json!({"metadata": {"name": "a"}}));
        assert_eq!(
            readiness(&never),
            Readiness::Ready,
            "not judged before the controller does"
        );
    }

    #[test]
    fn labels_annotations_and_taints() {
        let n = node(json!({
            "metadata": {"name": "cp-1",
                "labels": {"node-role.kubernetes.io/control-plane": ""},
                "annotations": {"nodefence.io/exclude": "True", TAINTED_ANNOTATION: "2026-11-22T10:00:00Z"}},
            "spec": {"unschedulable": true, "taints": [
                {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}]}
        }));
        let f = node_facts(&n, None, true);
        assert_eq!(f.name, "cp-1");
        assert!(f.control_plane && f.opted_out && f.cordoned && f.our_taint);
        assert_eq!(
            f.our_taint_added,
            humantime::parse_rfc3339("2026-11-22T10:00:00Z").ok()
        );
        assert_eq!(f.lease_renewed, None);
    }

    #[test]
    fn the_last_release_reads_back_as_written_and_a_broken_one_reads_as_none() {
        let added = "2027-01-15T08:06:09Z";
        let removed =
            humantime::parse_rfc3339("2027-01-15T08:07:27Z").unwrap_or_else(|e| panic!("{e}"));
        let value = last_release_annotation(added, removed);
        assert_eq!(value, "2027-01-15T08:06:09Z/2027-01-15T08:07:27Z");
        let parsed = parse_last_release(&value);
        assert_eq!(parsed.map(|(_, r)| r), Some(removed));
        assert!(parsed.is_some_and(|(a, _)| a.is_some_and(|a| a < removed)));
        // A taint annotation that does not read: the interval starts at its end.
        assert_eq!(
            last_release_annotation("yesterday", removed),
            "2027-01-15T08:07:27Z/2027-01-15T08:07:27Z"
        );
        for broken in [
            "",
            "2027-01-15T08:07:27Z",
            "x/y",
            "2027-01-15T08:06:09Z/soon",
        ] {
            assert_eq!(parse_last_release(broken).map(|(_, r)| r), None, "{broken}");
        }
        let n = node(json!({"metadata": {"name": "w", "annotations": {
            LAST_RELEASE_ANNOTATION: value}, "creationTimestamp": "2027-01-15T08:09:00Z"}}));
        let facts = node_facts(&n, None, true);
        assert_eq!(facts.last_release_ended, Some(removed));
        assert_eq!(
            facts.registered,
            humantime::parse_rfc3339("2027-01-15T08:09:00Z").ok()
        );
    }

    #[test]
    fn an_administrators_taint_is_not_ours() {
        let n = node(json!({"metadata": {"name": "w"}, "spec": {"taints": [
            {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}]}}));
        assert!(!node_facts(&n, None, true).our_taint);
    }

    #[test]
    fn lease_renew_time_is_read() {
        let lease: Lease = serde_json::from_value(
            json!({"metadata": {"name": "w", "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": "w", "renewTime": "2026-11-22T10:00:00.123456Z"}}),
        )
        .expect("lease");
        let n = node(json!({"metadata": {"name": "w"}}));
        let f = node_facts(&n, Some(&lease), true);
        let renewed = f.lease_renewed.expect("renewTime");
        let secs = renewed
            .duration_since(SystemTime::UNIX_EPOCH)
            .expect("after epoch");
        assert_eq!(secs.as_secs(), 1_795_341_600);
        assert_eq!(secs.subsec_micros(), 123_456);
    }

    #[test]
    fn a_renewal_counts_as_seen_when_the_watch_delivered_it() {
        let lease = |renew: &str| -> Lease {
            serde_json::from_value(json!({"metadata": {"name": "w"},
                "spec": {"holderIdentity": "w", "renewTime": renew, "leaseDurationSeconds": 40}}))
            .expect("lease")
        };
        let at =
            |s: u64| SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000 + s);
        // The kubelet's clock is a minute behind ours: its renewTime says so.
        let first = KeptLease::observed(&lease("2027-01-15T07:59:00Z"), None, at(0));
        assert_eq!(first.seen, Some(at(0)), "first sight: seen now");
        assert_eq!(
            first.change_seen, None,
            "first sight: no renewal seen happen"
        );
        assert_eq!(
            first.renewed,
            humantime::parse_rfc3339("2027-01-15T07:59:00Z").ok()
        );
        // The same renewal again (a resync, a relist): still seen when it first was.
        let again = KeptLease::observed(&lease("2027-01-15T07:59:00Z"), Some(&first), at(7));
        assert_eq!(again.seen, Some(at(0)));
        assert_eq!(again.change_seen, None);
        // The next renewal: seen now, whatever its renewTime says.
        let next = KeptLease::observed(&lease("2027-01-15T07:59:10Z"), Some(&again), at(10));
        assert_eq!(next.seen, Some(at(10)));
        assert_eq!(next.change_seen, Some(at(10)), "a renewal seen happen");
        let n = node(json!({"metadata": {"name": "w"}}));
        let f = KeptNode::new(&n).facts(Some(&next), true);
        assert_eq!((f.lease_seen, f.lease_renewed), (next.seen, next.renewed));
        assert_eq!(f.lease_change_seen, next.change_seen);
        // A Lease without a renewTime was never renewed: nothing seen.
        let empty: Lease =
            serde_json::from_value(json!({"metadata": {"name": "w"}, "spec": {}})).expect("lease");
        assert_eq!(KeptLease::observed(&empty, Some(&next), at(20)).seen, None);
    }

    #[test]
    fn the_release_records_read_back_and_an_unreadable_boot_is_uncheckable_not_absent() {
        let tainted = |annotations: serde_json::Value| {
            node(
                json!({"metadata": {"name": "w", "annotations": annotations},
                "spec": {"taints": [{"key": OUT_OF_SERVICE_TAINT, "value": OUT_OF_SERVICE_VALUE, "effect": "NoExecute"}]}}),
            )
        };
        let ended = EndedBoot {
            since: std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000),
            boot: Some("b0a7-1".into()),
            proof: crate::engine::returned::ProofKind::Watchdog,
        };
        let f = node_facts(
            &tainted(json!({TAINTED_ANNOTATION: "2027-01-15T08:00:00Z",
                RELEASED_BOOT_ANNOTATION: ended.value(),
                PROOF_CONTRADICTED_ANNOTATION: "2027-01-15T08:10:00Z proof watchdog boot b0a7-1",
                PROOF_CHECKED_ANNOTATION: " alice "})),
            None,
            true,
        );
        assert_eq!(f.released_boot(), Some(&ended));
        assert!(f.proof_contradicted());
        assert_eq!(f.proof_checked(), Some("alice"));
        // Edited by hand: no boot to compare with, so nothing can be told on return
        // (not an older version's release, which kept none).
        let f = node_facts(
            &tainted(json!({TAINTED_ANNOTATION: "2027-01-15T08:00:00Z",
                RELEASED_BOOT_ANNOTATION: "someone was here"})),
            None,
            true,
        );
        assert_eq!(f.released_boot().map(|e| e.boot.clone()), Some(None));
        // Nothing of nodefence's: nothing kept (the facts of 5,000 Nodes).
        assert!(
            node_facts(&node(json!({"metadata": {"name": "w"}})), None, true)
                .returned
                .is_none()
        );
    }

    #[test]
    fn a_recorded_power_off_reads_back_and_garbage_is_no_record() {
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_micros(1_800_000_000_123_456);
        let value = power_off_annotation(at, 2, None);
        let record = |attempt, boot| PowerOffRecord { at, attempt, boot };
        assert_eq!(parse_power_off(&value), Some(record(2, None)));
        let value = power_off_annotation(at, 3, Some("b0a7-1"));
        assert_eq!(parse_power_off(&value), Some(record(3, Some("b0a7-1"))));
        // A time that does not read is no record at all, whatever boot it names.
        assert_eq!(parse_power_off("yesterday attempt 1 boot b0a7-1"), None);
        // The Node's boot now against the record's: the same boot, or not.
        let node = |boot: &str| {
            serde_json::from_value::<Node>(json!({"metadata": {"name": "w",
                "annotations": {POWER_OFF_ANNOTATION: value}},
                "status": {"nodeInfo": {"bootID": boot, "machineID": "", "systemUUID": "",
                    "kernelVersion": "", "osImage": "", "containerRuntimeVersion": "",
                    "kubeletVersion": "", "kubeProxyVersion": "", "operatingSystem": "linux",
                    "architecture": "amd64"}}}))
            .expect("node")
        };
        let same = node_facts(&node("b0a7-1"), None, true);
        assert!(same.power_off_this_boot && same.power_off_recorded == Some((at, 3)));
        assert!(!node_facts(&node("c1d2-2"), None, true).power_off_this_boot);
        for bad in [
            "",
            "yesterday attempt 1",
            "2026-11-25T10:00:00Z",
            "2026-11-25T10:00:00Z attempt x",
        ] {
            assert_eq!(parse_power_off(bad), None, "{bad:?}");
        }
    }
}
