//! Releasing a node's volumes, and undoing it: the only code that writes the
//! out-of-service taint or deletes Nodes and VolumeAttachments.
//!
//! Every write is preceded by a fresh read from the API server (never the watch
//! cache) and refused unless all of these hold at that moment:
//! - this replica is the leader;
//! - the Node is the one the engine judged (same uid) and is still not Ready;
//! - its kubelet has not renewed its Lease since the proof's last sign of life: its
//!   renewTime is neither later than it nor other than the one the engine last saw,
//!   whichever way the kubelet's clock is off (a renewal means the machine was alive
//!   after it read Off: contradiction);
//! - the [`OffProof`] has readings, all newer than that last sign of life and than
//!   the moment nodefence saw the last renewal (by its own clock, the readings' clock);
//! - the machine those readings came from is the node's own: its identity matches
//!   the fresh Node's `systemUUID`/`providerID` (unless the policy accepts an
//!   unprovable source, and never on a mismatch).
//!
//! The taint is written with the boot it ends ([`RELEASED_BOOT_ANNOTATION`]), and
//! removed only from a Node that reports another boot, unless an operator checked it
//! ([`PROOF_CHECKED_ANNOTATION`]; `engine::returned` decides when to ask).
//!
//! Writes carry the resourceVersion of that read as a precondition (409 on any change
//! in between), and keep every taint and annotation that is not nodefence's own.
//!
//! [`Releaser::release`] carries out a whole [`ReleasePlan`]: the taint or the Node
//! deletion first (after the checks above), then, when the plan asks, the forced
//! deletion (grace period 0) of the node's pods and the deletion of its
//! VolumeAttachments. Those follow only a successful, verified first step, and
//! leadership is re-checked before each write.

use std::time::SystemTime;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube::{Api, Client};
use serde_json::json;

use super::facts::{
    LAST_RELEASE_ANNOTATION, OUT_OF_SERVICE_TAINT, OUT_OF_SERVICE_VALUE, PROOF_CHECKED_ANNOTATION,
    PROOF_CONTRADICTED_ANNOTATION, RELEASED_BOOT_ANNOTATION, TAINTED_ANNOTATION,
    last_release_annotation, readiness,
};
use super::leader::Leadership;
use crate::engine::returned::{EndedBoot, ProofKind};
use crate::engine::{OffProof, Readiness, ReleaseMode, ReleasePlan, ReleaseProof};
use crate::identity::{IdentityCheck, NodeIdentity};

/// Pods the kubelet creates from files (static pods) are mirrored in the API with this
/// annotation; deleting the mirror does nothing to the pod, so they are skipped.
const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Why a release (or its undoing) was not done.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// A safety check failed; nothing was written.
    #[error("refused: {0}")]
    Refused(String),
    /// The API server refused or failed.
    #[error("Kubernetes API: {0}")]
    Api(#[from] kube::Error),
}

impl ReleaseError {
    /// Stable label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            ReleaseError::Refused(_) => "refused",
            ReleaseError::Api(kube::Error::Api(e)) if e.code == 409 => "conflict",
            ReleaseError::Api(_) => "api_error",
        }
    }
}

/// What was done by a release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Released {
    Tainted,
    Deleted { volume_attachments: usize },
}

/// What a whole [`ReleasePlan`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseOutcome {
    pub released: Released,
    /// Pods force-deleted (grace period 0).
    pub pods_deleted: usize,
    /// VolumeAttachments deleted.
    pub volume_attachments_deleted: usize,
}

/// Writes releases for one cluster.
#[derive(Clone)]
pub struct Releaser {
    nodes: Api<Node>,
    pods: Api<Pod>,
    leases: Api<Lease>,
    attachments: Api<VolumeAttachment>,
    leadership: Leadership,
}

impl Releaser {
    pub fn new(client: Client, leadership: Leadership) -> Self {
        Self {
            nodes: Api::all(client.clone()),
            pods: Api::all(client.clone()),
            leases: Api::namespaced(client.clone(), "kube-node-lease"),
            attachments: Api::all(client),
            leadership,
        }
    }

    /// The same writer, leading only as `leadership` says (one term's view).
    pub fn in_term(&self, leadership: &Leadership) -> Self {
        Self {
            leadership: leadership.clone(),
            ..self.clone()
        }
    }

    /// Re-reads and re-checks `node` against `proof`; returns the fresh Node.
    async fn verify(
        &self,
        node: &str,
        uid: &str,
        proof: &ReleaseProof,
    ) -> Result<Node, ReleaseError> {
        self.require_leader()?;
        if let ReleaseProof::Off(off) = proof {
            Self::check_readings(off)?;
        }
        let Some(fresh) = self.nodes.get_opt(node).await? else {
            return Err(ReleaseError::Refused(format!(
                "Node {node} no longer exists"
            )));
        };
        if fresh.metadata.uid.as_deref() != Some(uid) {
            return Err(ReleaseError::Refused(format!(
                "Node {node} was replaced (uid changed) since it was judged; starting over"
            )));
        }
        match proof {
            ReleaseProof::Off(off) => {
                let identity = match &off.machine {
                    Some(machine) => {
                        crate::identity::check(&NodeIdentity::from_node(&fresh), machine)
                    }
                    None => {
                        IdentityCheck::Unknown("no machine identity came with the Off proof".into())
                    }
                };
                if identity.is_mismatch() || (off.require_identity && !identity.is_match()) {
                    return Err(ReleaseError::Refused(format!(
                        "Node {node}: the power source is not proven to control this node's machine ({})",
                        identity.describe()
                    )));
                }
            }
            // The node's own: its companion's token is bound to it. The mark must
            // still be on the Node (an administrator who removed it called it off).
            ReleaseProof::Watchdog(_) => {
                if crate::watchdog::mark::of_node(&fresh).is_none() {
                    return Err(ReleaseError::Refused(format!(
                        "Node {node} no longer carries its fencing mark ({}); the watchdog level starts over",
                        crate::watchdog::mark::FENCING_MARK_ANNOTATION
                    )));
                }
            }
        }
        let last_sign_of_life = proof.last_sign_of_life();
        if let Some(sign) = alive_after(&fresh, last_sign_of_life) {
            return Err(ReleaseError::Refused(format!(
                "Node {node} showed a sign of life after its last known one ({sign})"
            )));
        }
        if let Some(lease) = self.leases.get_opt(node).await?
            && let Some(renewed) = lease
                .spec
                .and_then(|s| s.renew_time)
                .map(|t| SystemTime::from(t.0))
            && (renewed > last_sign_of_life
                || proof.lease_renewed().is_some_and(|seen| seen != renewed))
        {
            return Err(ReleaseError::Refused(format!(
                "the kubelet of {node} renewed its Lease (renewTime {}) after the last renewal the proof knew of; the proof is contradicted",
                humantime::format_rfc3339_micros(renewed)
            )));
        }
        Ok(fresh)
    }

    /// The Off proof's own checks: readings, all newer than the last sign of life,
    /// the newest young enough.
    fn check_readings(proof: &OffProof) -> Result<(), ReleaseError> {
        let floor = proof.readings_after.max(proof.last_sign_of_life);
        if proof.readings.is_empty() || proof.readings.iter().any(|t| *t <= floor) {
            return Err(ReleaseError::Refused(
                "the Off proof is empty or older than the node's last sign of life".into(),
            ));
        }
        let newest = proof
            .readings
            .iter()
            .max()
            .copied()
            .unwrap_or(proof.last_sign_of_life);
        let age = crate::clock::now()
            .duration_since(newest)
            .unwrap_or_default();
        if age > proof.max_age {
            return Err(ReleaseError::Refused(format!(
                "the Off proof is {}s old (its newest reading); the machine is read again first",
                age.as_secs()
            )));
        }
        Ok(())
    }

    fn require_leader(&self) -> Result<(), ReleaseError> {
        if self.leadership.is_leader() {
            Ok(())
        } else {
            Err(ReleaseError::Refused(
                "this replica is not the leader".into(),
            ))
        }
    }

    /// Adds `node.kubernetes.io/out-of-service=nodeshutdown:NoExecute` and records that
    /// nodefence added it.
    pub async fn taint(
        &self,
        node: &str,
        uid: &str,
        proof: impl Into<ReleaseProof>,
    ) -> Result<Released, ReleaseError> {
        let proof = proof.into();
        let fresh = self.verify(node, uid, &proof).await?;
        let taints = with_out_of_service(taints_of(&fresh));
        // The boot this release ends, for the check on return (`engine::returned`).
        let ended = EndedBoot {
            since: proof.last_sign_of_life(),
            boot: crate::watchdog::mark::boot_id_of(&fresh).map(str::to_string),
            proof: match proof {
                ReleaseProof::Off(_) => ProofKind::OffReadings,
                ReleaseProof::Watchdog(_) => ProofKind::Watchdog,
            },
        };
        let patch = json!({
            "metadata": {
                "resourceVersion": fresh.metadata.resource_version,
                "annotations": {
                    TAINTED_ANNOTATION: humantime::format_rfc3339_seconds(crate::clock::now()).to_string(),
                    RELEASED_BOOT_ANNOTATION: ended.value(),
                    PROOF_CONTRADICTED_ANNOTATION: null,
                    PROOF_CHECKED_ANNOTATION: null,
                },
            },
            "spec": { "taints": taints },
        });
        self.require_leader()?;
        self.nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(Released::Tainted)
    }

    /// Deletes the Node object (uid and resourceVersion as preconditions), then, when
    /// asked, the VolumeAttachments that name it.
    pub async fn delete(
        &self,
        node: &str,
        uid: &str,
        proof: impl Into<ReleaseProof>,
        attachments: bool,
    ) -> Result<Released, ReleaseError> {
        let fresh = self.verify(node, uid, &proof.into()).await?;
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: fresh.metadata.uid.clone(),
                resource_version: fresh.metadata.resource_version.clone(),
            }),
            ..DeleteParams::default()
        };
        self.require_leader()?;
        self.nodes.delete(node, &params).await?;
        let deleted = if attachments {
            self.delete_attachments(node).await?
        } else {
            0
        };
        Ok(Released::Deleted {
            volume_attachments: deleted,
        })
    }

    /// Carries out `plan` for `node`: the taint or the Node deletion (verified against
    /// `proof`), then the forced pod deletion and VolumeAttachment deletion it asks for.
    pub async fn release(
        &self,
        node: &str,
        uid: &str,
        proof: impl Into<ReleaseProof>,
        plan: &ReleasePlan,
    ) -> Result<ReleaseOutcome, ReleaseError> {
        let proof = proof.into();
        let tainted = match plan.mode {
            ReleaseMode::OutOfServiceTaint => self.taint(node, uid, &proof).await?,
            ReleaseMode::DeleteNode => self.delete(node, uid, &proof, false).await?,
        };
        // Pods before attachments: while a pod still wants its volume on this node,
        // the attach/detach controller may re-create a VolumeAttachment deleted under
        // it. The pods of a deleted Node are orphans that can run nowhere: deleting
        // its attachments implies deleting them first.
        let force_pods = plan.force_delete_pods
            || (plan.mode == ReleaseMode::DeleteNode && plan.delete_volume_attachments);
        let pods_deleted = if force_pods {
            self.force_delete_pods(node).await?
        } else {
            0
        };
        let volume_attachments_deleted = if plan.delete_volume_attachments {
            self.delete_attachments(node).await?
        } else {
            0
        };
        let released = match tainted {
            Released::Tainted => Released::Tainted,
            Released::Deleted { .. } => Released::Deleted {
                volume_attachments: volume_attachments_deleted,
            },
        };
        Ok(ReleaseOutcome {
            released,
            pods_deleted,
            volume_attachments_deleted,
        })
    }

    /// Force-deletes (grace period 0, uid precondition) every pod bound to `node`,
    /// except mirror pods. Only called after a verified release of that node.
    async fn force_delete_pods(&self, node: &str) -> Result<usize, ReleaseError> {
        let mut deleted = 0;
        for pod in self.pods_on(node).await? {
            let (Some(name), Some(namespace)) = (
                pod.metadata.name.as_deref(),
                pod.metadata.namespace.as_deref(),
            ) else {
                continue;
            };
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: pod.metadata.uid.clone(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            self.require_leader()?;
            let api: Api<Pod> = Api::namespaced(self.pods.clone().into_client(), namespace);
            match api.delete(name, &params).await {
                Ok(_) => deleted += 1,
                // Gone, or replaced by a new pod of the same name: nothing of this node's.
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(deleted)
    }

    /// Pods bound to `node`, mirror pods excluded.
    async fn pods_on(&self, node: &str) -> Result<Vec<Pod>, ReleaseError> {
        let list = self
            .pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
            .await?;
        Ok(list
            .items
            .into_iter()
            .filter(|p| {
                p.metadata
                    .annotations
                    .as_ref()
                    .is_none_or(|a| !a.contains_key(MIRROR_POD_ANNOTATION))
            })
            .collect())
    }

    /// Deletes the VolumeAttachments that name `node`.
    async fn delete_attachments(&self, node: &str) -> Result<usize, ReleaseError> {
        let mut deleted = 0;
        for va in self.attachments.list(&ListParams::default()).await? {
            if va.spec.node_name != node {
                continue;
            }
            let Some(name) = va.metadata.name.as_deref() else {
                continue;
            };
            self.require_leader()?;
            match self
                .attachments
                .delete(name, &DeleteParams::default())
                .await
            {
                Ok(_) => deleted += 1,
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(deleted)
    }

    /// True when Kubernetes has let go of `node`'s machine: no pod is bound to it
    /// (mirror pods aside) and no VolumeAttachment names it. Read-only.
    pub async fn drained(&self, node: &str) -> Result<bool, ReleaseError> {
        if !self.pods_on(node).await?.is_empty() {
            return Ok(false);
        }
        let attachments = self.attachments.list(&ListParams::default()).await?;
        Ok(attachments.items.iter().all(|va| va.spec.node_name != node))
    }

    /// Records on the Node, before it is sent, the power-off about to be sent (see
    /// [`crate::cluster::facts::POWER_OFF_ANNOTATION`]). A command whose record
    /// could not be written is not sent.
    ///
    /// The write returns the Node as the API server has it now, fresher than the
    /// controller's watch: a Node opted out (`nodefence.io/exclude`) is refused here,
    /// even when the watch has not shown the opt-out yet (seed 6386: a ForceOff sent
    /// 22 s after the opt-out, behind a lagging watch). The record stays; it only
    /// delays a later power-off, never allows one.
    pub async fn record_power_off(&self, node: &str, attempt: u32) -> Result<(), ReleaseError> {
        self.require_leader()?;
        // The boot it goes to: a sign of life from that boot after the command is the
        // machine still going down, not a new failure (a new leader must not send
        // another within `power_off_retry_after`).
        let fresh = self.nodes.get_opt(node).await?;
        let boot = fresh.as_ref().and_then(crate::watchdog::mark::boot_id_of);
        let value = crate::cluster::facts::power_off_annotation(crate::clock::now(), attempt, boot);
        let patch = json!({
            "metadata": { "annotations": { crate::cluster::facts::POWER_OFF_ANNOTATION: value } },
        });
        let now = self
            .nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        if crate::cluster::facts::opted_out(&now) {
            return Err(ReleaseError::Refused(format!(
                "Node {node} is opted out ({}: \"true\")",
                crate::cluster::facts::EXCLUDE_ANNOTATION
            )));
        }
        Ok(())
    }

    /// Records on the Node that its return contradicted its release's proof
    /// ([`PROOF_CONTRADICTED_ANNOTATION`]): no leader lets it back unchecked. Only on
    /// a Node that still carries nodefence's taint.
    pub async fn record_contradiction(&self, node: &str, value: &str) -> Result<(), ReleaseError> {
        self.require_leader()?;
        let Some(fresh) = self.nodes.get_opt(node).await? else {
            return Err(ReleaseError::Refused(format!(
                "Node {node} no longer exists"
            )));
        };
        if !fresh
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(TAINTED_ANNOTATION))
        {
            return Err(ReleaseError::Refused(format!(
                "Node {node} no longer carries nodefence's taint"
            )));
        }
        let patch = json!({
            "metadata": {
                "resourceVersion": fresh.metadata.resource_version,
                "annotations": { PROOF_CONTRADICTED_ANNOTATION: value },
            },
        });
        self.require_leader()?;
        self.nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// The watchdog level: writes the node's fencing mark, for the boot its Node
    /// reports ([`crate::watchdog::mark`]). Read fresh: the boot must be the current
    /// one, and a Node opted out or replaced is refused. `Ok` once the API server
    /// accepted it.
    pub async fn mark_for_fencing(
        &self,
        node: &str,
        uid: Option<&str>,
    ) -> Result<(), ReleaseError> {
        use crate::watchdog::mark::{FENCING_MARK_ANNOTATION, Mark, boot_id_of};
        self.require_leader()?;
        let Some(fresh) = self.nodes.get_opt(node).await? else {
            return Err(ReleaseError::Refused(format!(
                "Node {node} no longer exists"
            )));
        };
        if uid.is_some_and(|uid| fresh.metadata.uid.as_deref() != Some(uid)) {
            return Err(ReleaseError::Refused(format!(
                "Node {node} was replaced (uid changed) since it was judged"
            )));
        }
        if crate::cluster::facts::opted_out(&fresh) {
            return Err(ReleaseError::Refused(format!(
                "Node {node} is opted out ({}: \"true\")",
                crate::cluster::facts::EXCLUDE_ANNOTATION
            )));
        }
        let Some(boot) = boot_id_of(&fresh) else {
            return Err(ReleaseError::Refused(format!(
                "Node {node} reports no boot ID (status.nodeInfo.bootID): a mark for every boot would reset its machine again after the reset"
            )));
        };
        let patch = json!({
            "metadata": {
                "annotations": { FENCING_MARK_ANNOTATION: Mark::value(crate::clock::now(), boot) },
            },
        });
        self.require_leader()?;
        self.nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// Removes the node's fencing mark, if it carries one (the node recovered before
    /// its release).
    pub async fn clear_mark(&self, node: &str) -> Result<(), ReleaseError> {
        use crate::watchdog::mark::{FENCING_MARK_ANNOTATION, of_node};
        self.require_leader()?;
        let Some(fresh) = self.nodes.get_opt(node).await? else {
            return Ok(());
        };
        if of_node(&fresh).is_none() {
            return Ok(());
        }
        let patch = json!({ "metadata": { "annotations": { FENCING_MARK_ANNOTATION: null } } });
        self.nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// Removes the out-of-service taint, only if nodefence's annotation says it added
    /// it; an administrator's taint is left alone. Ok(false): nothing of ours to remove.
    pub async fn untaint(&self, node: &str) -> Result<bool, ReleaseError> {
        self.require_leader()?;
        let Some(fresh) = self.nodes.get_opt(node).await? else {
            return Ok(false);
        };
        let Some(added) = fresh
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(TAINTED_ANNOTATION))
        else {
            return Ok(false);
        };
        if readiness(&fresh) != Readiness::Ready {
            return Err(ReleaseError::Refused(format!(
                "Node {node} is not Ready; the taint stays"
            )));
        }
        let annotations = fresh.metadata.annotations.as_ref();
        let checked = annotations.is_some_and(|a| a.contains_key(PROOF_CHECKED_ANNOTATION));
        if !checked {
            if annotations.is_some_and(|a| a.contains_key(PROOF_CONTRADICTED_ANNOTATION)) {
                return Err(ReleaseError::Refused(format!(
                    "Node {node}'s return contradicted its release's proof and no one has checked it ({PROOF_CHECKED_ANNOTATION}); the taint stays"
                )));
            }
            let ended = annotations
                .and_then(|a| a.get(RELEASED_BOOT_ANNOTATION))
                .and_then(|v| EndedBoot::parse(v));
            let now_boot = crate::watchdog::mark::boot_id_of(&fresh);
            if let Some(then) = ended.as_ref().and_then(|e| e.boot.as_deref())
                && now_boot.is_some_and(|b| b.eq_ignore_ascii_case(then))
            {
                return Err(ReleaseError::Refused(format!(
                    "Node {node} reports boot {then}, the boot its release ended: its machine has not gone down; the taint stays"
                )));
            }
        }
        let taints = without_ours(taints_of(&fresh));
        let patch = json!({
            "metadata": {
                "resourceVersion": fresh.metadata.resource_version,
                "annotations": {
                    TAINTED_ANNOTATION: null,
                    RELEASED_BOOT_ANNOTATION: null,
                    PROOF_CONTRADICTED_ANNOTATION: null,
                    PROOF_CHECKED_ANNOTATION: null,
                    crate::watchdog::mark::FENCING_MARK_ANNOTATION: null,
                    LAST_RELEASE_ANNOTATION: last_release_annotation(added, crate::clock::now()),
                },
            },
            "spec": { "taints": taints },
        });
        self.require_leader()?;
        self.nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(true)
    }
}

/// The Node's taints, as they are.
fn taints_of(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
}

/// The Node's taints with the out-of-service taint added (once): every other taint
/// is kept, in order; an out-of-service NoExecute taint already there (an
/// administrator's) is not duplicated.
pub fn with_out_of_service(mut taints: Vec<Taint>) -> Vec<Taint> {
    if !taints
        .iter()
        .any(|t| t.key == OUT_OF_SERVICE_TAINT && t.effect == "NoExecute")
    {
        taints.push(Taint {
            key: OUT_OF_SERVICE_TAINT.into(),
            value: Some(OUT_OF_SERVICE_VALUE.into()),
            effect: "NoExecute".into(),
            time_added: k8s_openapi::jiff::Timestamp::try_from(crate::clock::now())
                .ok()
                .map(Time),
        });
    }
    taints
}

/// The Node's taints without the out-of-service taint nodefence adds (key and value
/// both ours); every other taint is kept, in order.
pub fn without_ours(taints: Vec<Taint>) -> Vec<Taint> {
    taints
        .into_iter()
        .filter(|t| {
            !(t.key == OUT_OF_SERVICE_TAINT && t.value.as_deref() == Some(OUT_OF_SERVICE_VALUE))
        })
        .collect()
}

/// A sign of life in the Node's status newer than `after`: a transition to Ready, or
/// any condition heartbeat (the kubelet posts these). A node released on the Lease
/// fast path is still Ready in the API, but its Ready transition and heartbeats are
/// older than its last Lease renewal, so it passes.
fn alive_after(node: &Node, after: SystemTime) -> Option<String> {
    let conditions = node.status.as_ref()?.conditions.as_deref()?;
    for c in conditions {
        if c.type_ == "Ready"
            && c.status == "True"
            && let Some(t) = &c.last_transition_time
            && SystemTime::from(t.0) > after
        {
            return Some(format!("Ready since {}", t.0));
        }
        if let Some(t) = &c.last_heartbeat_time
            && SystemTime::from(t.0) > after
        {
            return Some(format!("{} heartbeat at {}", c.type_, t.0));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn taint() -> impl Strategy<Value = Taint> {
        let key = prop_oneof![
            Just(OUT_OF_SERVICE_TAINT.to_string()),
            Just("node.kubernetes.io/unreachable".to_string()),
            Just("dedicated".to_string()),
            "[a-z./-]{1,12}",
        ];
        let value = prop_oneof![
            Just(None),
            Just(Some(OUT_OF_SERVICE_VALUE.to_string())),
            Just(Some("maintenance".to_string())),
        ];
        let effect = prop_oneof![
            Just("NoExecute".to_string()),
            Just("NoSchedule".to_string()),
            Just("PreferNoSchedule".to_string()),
        ];
        (key, value, effect).prop_map(|(key, value, effect)| Taint {
            key,
            value,
            effect,
            time_added: None,
        })
    }

    fn others(taints: &[Taint]) -> Vec<Taint> {
        taints
            .iter()
            .filter(|t| t.key != OUT_OF_SERVICE_TAINT)
            .cloned()
            .collect()
    }

    proptest! {
        /// Adding keeps every other taint in order, ends with exactly one
        /// out-of-service NoExecute taint, and is idempotent.
        #[test]
        fn adding_the_taint_keeps_every_other_taint(taints in proptest::collection::vec(taint(), 0..8)) {
            let added = with_out_of_service(taints.clone());
            prop_assert_eq!(others(&added), others(&taints));
            prop_assert!(added.len() >= taints.len() && added.len() <= taints.len() + 1);
            prop_assert!(added.iter().any(|t| t.key == OUT_OF_SERVICE_TAINT && t.effect == "NoExecute"));
            let again = with_out_of_service(added.clone());
            prop_assert_eq!(again, added);
        }

        /// Removing takes away only nodefence's own taint: an administrator's
        /// out-of-service taint (another value) and every other taint stay, in order.
        #[test]
        fn removing_the_taint_leaves_everyone_elses(taints in proptest::collection::vec(taint(), 0..8)) {
            let removed = without_ours(with_out_of_service(taints.clone()));
            prop_assert_eq!(others(&removed), others(&taints));
            prop_assert!(!removed.iter().any(|t| t.key == OUT_OF_SERVICE_TAINT
                && t.value.as_deref() == Some(OUT_OF_SERVICE_VALUE)));
            let admins: Vec<_> = taints.iter()
                .filter(|t| t.key == OUT_OF_SERVICE_TAINT && t.value.as_deref() != Some(OUT_OF_SERVICE_VALUE))
                .cloned()
                .collect();
            let kept: Vec<_> = removed.iter().filter(|t| t.key == OUT_OF_SERVICE_TAINT).cloned().collect();
            prop_assert_eq!(kept, admins);
        }
    }
}
