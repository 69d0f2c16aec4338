//! virt-handler's part (and the VMI controller's and the node controller's): a VMI's
//! life, and the domain ("is qemu running?") it stands for.
//!
//! Follows KubeVirt's `pkg/virt-handler/vm.go` (phases, graceful shutdown for
//! `spec.terminationGracePeriodSeconds`, then a hard kill), `pkg/virt-controller/
//! watch/vmi/` (Pending → Scheduling → Scheduled with the launcher pod, the
//! `kubevirt.io/foregroundDeleteVirtualMachine` finalizer removed once final) and
//! `pkg/virt-controller/watch/node/node.go` (a VMI on an unresponsive node is
//! `Failed` after `heartBeatTimeout`):
//!
//! - a new VMI is `Pending` (from virt-api's mutating webhook), then `Scheduling`, `Scheduled` and `Running` after
//!   [`Timing::pending`], [`Timing::scheduling`] and [`Timing::scheduled`]; from
//!   `Running` its domain runs (`status.nodeName`, condition `Ready=True`);
//! - a deleted VMI's domain keeps running for its `terminationGracePeriodSeconds`
//!   (re-read every round, so the stop subresource's patch to 0 cuts it short:
//!   [`Timing::kill`] after the 0 was seen), then it is off and the VMI `Succeeded`;
//!   one deleted before it ran is `Succeeded` at once;
//! - a lost host ([`super::KubevirtStandIn::lose_host`]): the domain is off at
//!   once, the VMI `Failed` after [`Timing::host_lost_to_failed`];
//! - [`super::Faults::forced_kill_fails`]: a `Running` VMI with grace period 0 and a
//!   pending stop request for it is killed and `Failed` before it is deleted;
//! - a final VMI loses the VMI finalizer (not under
//!   [`super::Faults::failed_vmi_stuck`] when `Failed`).

use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::{Faults, Timing, VMI_FINALIZER, is_deleting, is_final, phase, vmi_phase};

/// The node every VMI runs on here.
pub const NODE_NAME: &str = "kubevirt-worker";

/// virt-handler's memory of one VMI (by UID).
#[derive(Debug, Clone)]
pub(crate) struct Domain {
    pub uid: String,
    pub running: bool,
    /// When the VMI reached its current phase (as seen here).
    pub phase_since: Instant,
    pub phase: String,
    pub deletion_seen: Option<Instant>,
    /// When a grace period of 0 was first seen.
    pub zero_grace_seen: Option<Instant>,
    pub host_lost: Option<Instant>,
}

impl Domain {
    pub fn new(uid: &str, now: Instant) -> Self {
        Self {
            uid: uid.to_owned(),
            running: false,
            phase_since: now,
            phase: String::new(),
            deletion_seen: None,
            zero_grace_seen: None,
            host_lost: None,
        }
    }
}

/// What one round decided for a VMI.
#[derive(Debug, Default)]
pub(crate) struct Step {
    /// The VMI to write (`None`: unchanged).
    pub write: Option<Value>,
    /// When to look again (`None`: only on a change).
    pub next: Option<Instant>,
}

fn grace_seconds(vmi: &Value) -> i64 {
    vmi["spec"]["terminationGracePeriodSeconds"]
        .as_i64()
        .unwrap_or(super::DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS)
        .max(0)
}

fn set_phase(vmi: &mut Value, new: &str, d: &mut Domain, now: Instant) {
    vmi["status"]["phase"] = json!(new);
    d.phase = new.to_owned();
    d.phase_since = now;
    let ready = new == phase::RUNNING;
    if ready {
        vmi["status"]["nodeName"] = json!(NODE_NAME);
    }
    if matches!(new, phase::RUNNING | phase::SUCCEEDED | phase::FAILED) {
        let status = if ready { "True" } else { "False" };
        vmi["status"]["conditions"] = json!([{
            "type": "Ready", "status": status,
            "lastProbeTime": null,
            "lastTransitionTime": crate::remediation::common::rfc3339(crate::remediation::common::now()),
        }]);
    }
}

/// Whether the first state change request of `vm` is a stop for `uid`
/// (`hasStopRequestForVMI`).
pub(crate) fn has_stop_request_for(vm: &Value, uid: &str) -> bool {
    vm["status"]["stateChangeRequests"]
        .get(0)
        .is_some_and(|r| r["action"] == "Stop" && r["uid"] == uid)
}

/// One round of virt-handler for `vmi` (its VM, if any, for the forced-kill fault).
pub(crate) fn step(
    vmi: &Value,
    vm: Option<&Value>,
    d: &mut Domain,
    timing: &Timing,
    faults: Faults,
    now: Instant,
) -> Step {
    let mut out = vmi.clone();
    let current = vmi_phase(vmi).to_owned();
    if d.phase != current {
        d.phase.clone_from(&current);
        d.phase_since = now;
    }
    let mut next = None;
    let mut changed = false;
    let deleting = is_deleting(vmi);
    if deleting && d.deletion_seen.is_none() {
        d.deletion_seen = Some(now);
    }
    let grace = grace_seconds(vmi);
    if grace == 0 && d.zero_grace_seen.is_none() {
        d.zero_grace_seen = Some(now);
    }
    if is_final(vmi) {
        d.running = false;
        let stuck = faults.failed_vmi_stuck && current == phase::FAILED;
        if !stuck && remove_finalizer(&mut out, VMI_FINALIZER) {
            changed = true;
        }
    } else if let Some(lost) = d.host_lost {
        d.running = false;
        let at = lost + timing.host_lost_to_failed;
        if now >= at {
            set_phase(&mut out, phase::FAILED, d, now);
            out["status"]["reason"] = json!("NodeUnresponsive");
            changed = true;
        } else {
            next = Some(at);
        }
    } else if faults.forced_kill_fails
        && !deleting
        && current == phase::RUNNING
        && grace == 0
        && vm.is_some_and(|vm| has_stop_request_for(vm, &d.uid))
    {
        d.running = false;
        set_phase(&mut out, phase::FAILED, d, now);
        changed = true;
    } else if deleting {
        if current != phase::RUNNING {
            d.running = false;
            set_phase(&mut out, phase::SUCCEEDED, d, now);
            changed = true;
        } else {
            let seen = d.deletion_seen.unwrap_or(now);
            let at = if grace == 0 {
                seen.max(d.zero_grace_seen.unwrap_or(seen)) + timing.kill
            } else {
                seen + timing
                    .grace_second
                    .saturating_mul(u32::try_from(grace).unwrap_or(u32::MAX))
            };
            if now >= at {
                d.running = false;
                set_phase(&mut out, phase::SUCCEEDED, d, now);
                changed = true;
            } else {
                next = Some(at);
            }
        }
    } else {
        let (after, then) = match current.as_str() {
            phase::UNSET => (Duration::ZERO, phase::PENDING),
            phase::PENDING => (timing.pending, phase::SCHEDULING),
            phase::SCHEDULING => (timing.scheduling, phase::SCHEDULED),
            phase::SCHEDULED => (timing.scheduled, phase::RUNNING),
            _ => (Duration::MAX, ""),
        };
        if !then.is_empty() {
            let at = d.phase_since.checked_add(after).unwrap_or(now);
            if now >= at {
                set_phase(&mut out, then, d, now);
                changed = true;
                next = Some(now);
            } else {
                next = Some(at);
            }
        }
        d.running = vmi_phase(&out) == phase::RUNNING;
    }
    Step {
        write: changed.then_some(out),
        next,
    }
}

/// Removes `name` from `metadata.finalizers`; whether it was there.
pub(crate) fn remove_finalizer(obj: &mut Value, name: &str) -> bool {
    let Some(list) = obj["metadata"]
        .get_mut("finalizers")
        .and_then(Value::as_array_mut)
    else {
        return false;
    };
    let before = list.len();
    list.retain(|f| f != name);
    before != list.len()
}
