//! What the engine asks the executor to do, and what it tells operators.
//!
//! The engine never performs I/O: every effect is one of these values. The executor
//! carries them out behind its own checks (leadership, a fresh re-read of the node),
//! and reports back; a `Release` is only ever built from an [`OffProof`].

use std::fmt;
use std::time::SystemTime;

use super::policy::ReleaseMode;
use crate::identity::{MachineIdentity, NodeIdentity};

/// What a release does, decided when the proof is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReleasePlan {
    pub mode: ReleaseMode,
    /// Delete the VolumeAttachments that name the node.
    pub delete_volume_attachments: bool,
    /// Force-delete the node's pods (grace period 0).
    pub force_delete_pods: bool,
}

/// Evidence that a node's machine is off: consecutive Off readings, every one newer
/// than the node's last sign of life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffProof {
    /// The node's last sign of life as the clocks that wrote it tell it: a fresh Node
    /// or Lease showing a later one refuses the release.
    pub last_sign_of_life: SystemTime,
    /// Every reading must be newer than this: the last sign of life, and when
    /// nodefence saw the last Lease renewal, by its own clock.
    pub readings_after: SystemTime,
    /// The kubelet's renewTime as the engine last saw it. A fresh Lease with any other
    /// renewTime was renewed since, whichever way the kubelet's clock is off.
    pub lease_renewed: Option<SystemTime>,
    pub readings: Vec<SystemTime>,
    /// The machine the readings came from, as its source identified it; re-checked
    /// against a fresh read of the Node before the release.
    pub machine: Option<MachineIdentity>,
    /// The release must be refused unless `machine` is proven to be the node's own.
    pub require_identity: bool,
    /// The release must be refused once the newest reading is older than this: the
    /// machine may have been switched on since (the engine reads again).
    pub max_age: std::time::Duration,
}

/// Evidence that a node's machine was reset by its own hardware watchdog after the
/// node was marked for fencing: the one exception to the Off proof, opt-in per node
/// (`watchdog_fencing`). It is not an Off reading and never reads as one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchdogProof {
    /// As in [`OffProof::last_sign_of_life`]: a fresh Node or Lease showing a later
    /// one refuses the release.
    pub last_sign_of_life: SystemTime,
    /// As in [`OffProof::lease_renewed`].
    pub lease_renewed: Option<SystemTime>,
    /// When the API server accepted the fencing mark (this replica's wall clock).
    pub marked_at: SystemTime,
    /// The release rule's arithmetic ([`crate::watchdog::release::decide`]).
    pub proof: crate::watchdog::release::Proof,
}

/// What a release rests on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseProof {
    /// Consecutive Off readings from the node's own machine's power source.
    Off(OffProof),
    /// The node's own hardware watchdog, proven to have reset its machine.
    Watchdog(Box<WatchdogProof>),
}

impl From<&OffProof> for ReleaseProof {
    fn from(p: &OffProof) -> Self {
        ReleaseProof::Off(p.clone())
    }
}

impl From<&ReleaseProof> for ReleaseProof {
    fn from(p: &ReleaseProof) -> Self {
        p.clone()
    }
}

impl ReleaseProof {
    pub fn last_sign_of_life(&self) -> SystemTime {
        match self {
            ReleaseProof::Off(p) => p.last_sign_of_life,
            ReleaseProof::Watchdog(p) => p.last_sign_of_life,
        }
    }

    pub fn lease_renewed(&self) -> Option<SystemTime> {
        match self {
            ReleaseProof::Off(p) => p.lease_renewed,
            ReleaseProof::Watchdog(p) => p.lease_renewed,
        }
    }

    /// The metric label (`proof` of `nodefence_releases_total`).
    pub fn label(&self) -> &'static str {
        match self {
            ReleaseProof::Off(_) => "off-readings",
            ReleaseProof::Watchdog(_) => "watchdog",
        }
    }

    /// The Off proof, if the release rests on one.
    pub fn off(&self) -> Option<&OffProof> {
        match self {
            ReleaseProof::Off(p) => Some(p),
            ReleaseProof::Watchdog(_) => None,
        }
    }
}

/// When each step of an incident happened, for the per-incident breakdown
/// (`nodefence_release_step_seconds`, the `Released` Event): all measured from the
/// node's last sign of life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Steps {
    /// The node's last sign of life when nodefence saw it fail (a later NotReady
    /// transition does not move it).
    pub last_sign_of_life: SystemTime,
    /// nodefence saw the failure (the incident started).
    pub detected: SystemTime,
    /// The first power reading answered in this incident.
    pub first_reading: Option<SystemTime>,
    /// nodefence's last power-off command, if it sent one.
    pub power_off_sent: Option<SystemTime>,
    /// The API server accepted the fencing mark (the watchdog level), if written.
    pub fencing_marked: Option<SystemTime>,
    /// The Off proof was complete (the release was decided).
    pub off_proven: SystemTime,
}

impl Steps {
    /// `(step, time)` in order, the release itself (`released`, at `released`) last.
    pub fn list(&self, released: Option<SystemTime>) -> Vec<(&'static str, SystemTime)> {
        let mut out = vec![("detected", self.detected)];
        out.extend(self.first_reading.map(|t| ("first_reading", t)));
        out.extend(self.power_off_sent.map(|t| ("power_off_sent", t)));
        out.extend(self.fencing_marked.map(|t| ("fencing_marked", t)));
        out.push(("off_proven", self.off_proven));
        out.extend(released.map(|t| ("released", t)));
        out
    }

    /// "detected +12.0s, first reading +12.0s, Off proven +14.0s, released +14.1s
    /// after the last sign of life".
    pub fn describe(&self, released: Option<SystemTime>) -> String {
        let parts: Vec<String> = self
            .list(released)
            .into_iter()
            .map(|(step, t)| {
                let after = t
                    .duration_since(self.last_sign_of_life)
                    .unwrap_or_default()
                    .as_secs_f64();
                let step = match step {
                    "first_reading" => "first reading",
                    "power_off_sent" => "power-off sent",
                    "fencing_marked" => "marked for its watchdog",
                    "off_proven" => "Off proven",
                    other => other,
                };
                format!("{step} +{after:.1}s")
            })
            .collect();
        format!("{} after the last sign of life", parts.join(", "))
    }
}

/// The machine a power command is meant for. The executor reads the power source's
/// identity again immediately before the command, in the same exchange, and refuses
/// to send it to a machine proven to be another (or, with `require_identity`, to one
/// not proven to be the node's own): a BMC remapped since the last reading must not
/// switch somebody else's machine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Target {
    /// What the cluster says about the node's machine.
    pub node: NodeIdentity,
    pub require_identity: bool,
}

/// Progress that must survive a new leader and the deletion of the Node object: a
/// released node whose machine still has to be powered back on. Kept in the cluster
/// by the executor (see `cluster::records`); `None` clears it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseRecord {
    pub released_at: SystemTime,
    pub mode: ReleaseMode,
    pub power_on_pending: bool,
    /// The released node's identity, for the identity check of its power-on when its
    /// Node object is gone (delete-node) by the time a new leader resumes it.
    pub identity: NodeIdentity,
    /// What the release rested on when it was not Off readings (the watchdog level's
    /// proof, in words).
    pub rests_on: Option<String>,
}

/// One effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Read the machine's power state (answer with `Engine::power_read`).
    QueryPower { node: String },
    /// Send a forced power off (answer with `Engine::power_off_done`).
    PowerOff {
        node: String,
        attempt: u32,
        target: Target,
    },
    /// Send power on (answer with `Engine::power_on_done`).
    PowerOn { node: String, target: Target },
    /// Release the node's volumes (answer with `Engine::release_done`). The executor
    /// must re-read the node and refuse if it is Ready again or changed identity.
    Release {
        node: String,
        plan: ReleasePlan,
        proof: ReleaseProof,
        /// Where the time went so far (the executor adds the release's own steps).
        steps: Steps,
    },
    /// The watchdog level: mark the node for fencing (its acknowledgements carry the
    /// mark, then the Node's annotation for its current boot), so its companion stops
    /// feeding its hardware watchdog (answer with `Engine::mark_written`). Refused
    /// unless its companion reports an armed watchdog.
    MarkForFencing {
        node: String,
        context: WatchdogContext,
    },
    /// The watchdog level: the node recovered before its release (or a new term found
    /// a healthy node still marked); its mark goes (the acknowledgements, and the
    /// Node's annotation), so its next companion is not told to stop. Nothing was
    /// released on it.
    ClearMark { node: String },
    /// The watchdog level: apply the release rule to what the heartbeat knows now
    /// (answer with `Engine::watchdog_checked`), with what the Node says now.
    CheckWatchdog {
        node: String,
        context: WatchdogContext,
    },
    /// A new term found the node marked for fencing (its annotation, for the boot it
    /// reports) and the node unhealthy: its acknowledgements carry the mark from now
    /// on (a term that did not write a mark never lifts it unknowingly), and what the
    /// heartbeat proved of its companion's hold starts over.
    HoldMark { node: String },
    /// Check whether a released node's pods are gone and its volumes detached
    /// (answer with `Engine::drain_checked`); gates `power_on_after_fence`.
    CheckDrained { node: String },
    /// Store (or, with `None`, clear) the node's [`ReleaseRecord`] in the cluster.
    Record {
        node: String,
        record: Option<ReleaseRecord>,
    },
    /// Remove the out-of-service taint nodefence added (answer with `Engine::taint_removed`).
    RemoveTaint { node: String },
    /// The node came back with the boot its release ended: record it on the Node
    /// ([`super::returned::PROOF_CONTRADICTED_ANNOTATION`], `value`), so that no
    /// leader lets it back unchecked, and count it.
    RecordContradiction {
        node: String,
        value: String,
        proof: super::returned::ProofKind,
    },
    /// Tell operators (Kubernetes Event + log).
    Notify(Notice),
}

impl Action {
    /// The node the action concerns, if any.
    pub fn node(&self) -> Option<&str> {
        match self {
            Action::QueryPower { node }
            | Action::PowerOff { node, .. }
            | Action::PowerOn { node, .. }
            | Action::Release { node, .. }
            | Action::RemoveTaint { node }
            | Action::RecordContradiction { node, .. }
            | Action::CheckDrained { node }
            | Action::MarkForFencing { node, .. }
            | Action::ClearMark { node }
            | Action::HoldMark { node }
            | Action::CheckWatchdog { node, .. }
            | Action::Record { node, .. } => Some(node),
            Action::Notify(n) => n.node.as_deref(),
        }
    }

    /// True for actions that change a machine or the cluster.
    pub fn mutates(&self) -> bool {
        matches!(
            self,
            Action::PowerOff { .. }
                | Action::PowerOn { .. }
                | Action::Release { .. }
                | Action::RemoveTaint { .. }
                | Action::RecordContradiction { .. }
                | Action::MarkForFencing { .. }
                | Action::ClearMark { .. }
                | Action::HoldMark { .. }
                | Action::Record { .. }
        )
    }
}

/// What the watchdog level's mark and release rest on besides the heartbeat: the
/// proof may rest only on beats of the boot the Node reports now (a companion's of a
/// boot since reset proves nothing of the boot that runs), and on a virtual machine
/// only where the policy opted it in.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WatchdogContext {
    /// The boot the Node reports (`status.nodeInfo.bootID`).
    pub boot_id: Option<String>,
    /// The policy's `watchdog_fencing_on_vm`: the operator's reason for trusting the
    /// watchdog of a virtual machine.
    pub on_virtual_machine: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Normal,
    Warning,
}

/// Why an event was raised: stable names for Event reasons and metric labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    NodeUnhealthy,
    NodeSuspect,
    RemediationRequested,
    NodeIgnored,
    PowerQueryFailed,
    ContradictingPowerReadings,
    MachineStillOn,
    PoweringOff,
    PowerOffFailed,
    PowerOnFailed,
    IdentityMismatch,
    IdentityUnproven,
    PodsForceDeleted,
    ConfirmedOff,
    WatchdogFencing,
    ResetByWatchdog,
    Releasing,
    Released,
    ReleaseFailed,
    RecoveredBeforeRelease,
    Recovered,
    /// Back with a new boot: the proof is not contradicted.
    BootedAgain,
    /// Back with the boot it failed with: the release was false.
    ProofContradicted,
    /// Back, but without a boot ID to tell whether it went down.
    ProofUncheckable,
    TaintRemoved,
    PoweringOn,
    Blocked,
    StormProtection,
    StormOver,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NodeUnhealthy => "NodeUnhealthy",
            Reason::NodeSuspect => "NodeSuspect",
            Reason::RemediationRequested => "RemediationRequested",
            Reason::NodeIgnored => "NodeIgnored",
            Reason::PowerQueryFailed => "PowerQueryFailed",
            Reason::ContradictingPowerReadings => "ContradictingPowerReadings",
            Reason::MachineStillOn => "MachineStillOn",
            Reason::PoweringOff => "PoweringOff",
            Reason::PowerOffFailed => "PowerOffFailed",
            Reason::PowerOnFailed => "PowerOnFailed",
            Reason::IdentityMismatch => "IdentityMismatch",
            Reason::IdentityUnproven => "IdentityUnproven",
            Reason::PodsForceDeleted => "PodsForceDeleted",
            Reason::ConfirmedOff => "ConfirmedOff",
            Reason::WatchdogFencing => "WatchdogFencing",
            Reason::ResetByWatchdog => "ResetByWatchdog",
            Reason::Releasing => "Releasing",
            Reason::Released => "Released",
            Reason::ReleaseFailed => "ReleaseFailed",
            Reason::RecoveredBeforeRelease => "RecoveredBeforeRelease",
            Reason::Recovered => "Recovered",
            Reason::BootedAgain => "BootedAgain",
            Reason::ProofContradicted => "ProofContradicted",
            Reason::ProofUncheckable => "ProofUncheckable",
            Reason::TaintRemoved => "TaintRemoved",
            Reason::PoweringOn => "PoweringOn",
            Reason::Blocked => "FenceBlocked",
            Reason::StormProtection => "StormProtection",
            Reason::StormOver => "StormProtectionOver",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An operator-facing message about a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// `None` for cluster-wide notices (storm protection).
    pub node: Option<String>,
    pub severity: Severity,
    pub reason: Reason,
    pub message: String,
    /// Notices of one series (a block, then its reminders while it lasts) update one
    /// Kubernetes Event (its count, last time and note); without it, only the same
    /// message repeated does.
    pub series: Option<&'static str>,
}

impl Notice {
    /// A Warning of series `series` (see [`Notice::series`]).
    pub fn warning_in(
        series: &'static str,
        node: &str,
        reason: Reason,
        message: impl Into<String>,
    ) -> Action {
        Action::Notify(Self {
            node: Some(node.to_string()),
            severity: Severity::Warning,
            reason,
            message: message.into(),
            series: Some(series),
        })
    }

    pub fn normal(node: &str, reason: Reason, message: impl Into<String>) -> Action {
        Action::Notify(Self {
            node: Some(node.to_string()),
            severity: Severity::Normal,
            reason,
            message: message.into(),
            series: None,
        })
    }

    pub fn warning(node: &str, reason: Reason, message: impl Into<String>) -> Action {
        Action::Notify(Self {
            node: Some(node.to_string()),
            severity: Severity::Warning,
            reason,
            message: message.into(),
            series: None,
        })
    }
}
