//! What nodefence reports on a request: `status.nodeName` and the three conditions
//! NodeHealthCheck and Cluster API read (`Processing`, `Succeeded`,
//! `PermanentNodeDeletionExpected`), from the engine's state of the node. Pure: the
//! controller writes the result only when it differs from what the object says.
//!
//! `Succeeded` is `True` once the node's volumes were released (for this request, or
//! on nodefence's own before it came). It is `False` only where nodefence will not act
//! whatever happens next, so an escalating requester moves on at once: the node is
//! not in the inventory, a control-plane node that policy does not fence, the BMC
//! is another machine's, `on_powered_on = "wait"`, or every power-off attempt failed.
//! Everything that may pass (paused, storm protection, a BMC that cannot be read
//! now, an opted-out or cordoned node) holds it at `Processing=True`, `Succeeded=Unknown`,
//! with the reason and what to do in the message.

use std::time::SystemTime;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::condition::{PERMANENT_NODE_DELETION_EXPECTED, PROCESSING, SUCCEEDED};
use super::request::KeptRequest;
use crate::engine::{Block, Exclusion, NodeState, Phase, Policy, PowerOffStatus, ReleaseMode};

/// One condition as it should read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WantedCondition {
    pub type_: &'static str,
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    /// CamelCase, as Kubernetes conditions have it.
    pub reason: &'static str,
    pub message: String,
}

/// The status a request should have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub node_name: Option<String>,
    pub conditions: Vec<WantedCondition>,
}

fn cond(
    type_: &'static str,
    status: &'static str,
    reason: &'static str,
    message: impl Into<String>,
) -> WantedCondition {
    WantedCondition {
        type_,
        status,
        reason,
        message: message.into(),
    }
}

/// Where a request stands, before it is spelt as conditions.
enum Progress {
    /// Still being worked on, or held back (reason, message).
    Working(&'static str, String),
    /// Done: the node's volumes were released.
    Done(String),
    /// nodefence will not act on it (reason, message).
    Failed(&'static str, String),
    /// Its requester timed it out and nothing was released.
    TimedOut(String),
}

/// The status `request` should have. `node` is the node it resolved to (`Err`: why
/// none), `state` the engine's state of that node, `served` whether the engine
/// released the node for (or at) this request, `policy` the node's policy.
pub fn wanted_status(
    request: &KeptRequest,
    node: Result<&str, &str>,
    state: Option<&NodeState>,
    served: bool,
    policy: &Policy,
) -> Wanted {
    let deletes_node = policy.release == ReleaseMode::DeleteNode;
    let progress = match (node, state) {
        _ if served => {
            Progress::Done("the machine was confirmed Off and the node's volumes released".into())
        }
        (Err(why), _) => Progress::Working("ResolvingNode", why.to_string()),
        (Ok(name), None) => Progress::Failed(
            "NodeNotFound",
            format!("there is no Node {name}: nothing to fence"),
        ),
        (Ok(_), Some(state)) => progress(request, state, policy),
    };
    let release = if deletes_node {
        "its Node object deleted"
    } else {
        "the out-of-service taint added"
    };
    let mut conditions = match progress {
        Progress::Working(reason, message) => vec![
            cond(PROCESSING, "True", reason, message),
            cond(SUCCEEDED, "Unknown", reason, "not released yet"),
        ],
        Progress::Done(message) => vec![
            cond(PROCESSING, "False", "Released", message.clone()),
            cond(SUCCEEDED, "True", "Released", message),
        ],
        Progress::Failed(reason, message) => vec![
            cond(PROCESSING, "False", reason, message.clone()),
            cond(SUCCEEDED, "False", reason, message),
        ],
        Progress::TimedOut(message) => vec![
            cond(PROCESSING, "False", "TimedOut", message.clone()),
            cond(SUCCEEDED, "Unknown", "TimedOut", message),
        ],
    };
    if let Some(done) = conditions
        .iter_mut()
        .find(|c| c.type_ == PROCESSING && c.reason == "Released")
    {
        done.message = format!("{}; {release}", done.message);
    }
    conditions.push(if deletes_node {
        cond(
            PERMANENT_NODE_DELETION_EXPECTED,
            "True",
            "DeleteNodeRelease",
            "release = \"delete-node\": once its machine is confirmed Off, the Node object is deleted (it registers again when the machine boots)",
        )
    } else {
        cond(
            PERMANENT_NODE_DELETION_EXPECTED,
            "False",
            "OutOfServiceTaintRelease",
            "the node's volumes are released with the out-of-service taint; the Node object is kept",
        )
    });
    Wanted {
        node_name: node.ok().map(str::to_string),
        conditions,
    }
}

fn progress(request: &KeptRequest, state: &NodeState, policy: &Policy) -> Progress {
    if let Phase::Released(_) = state.phase {
        return Progress::Done(
            "the machine was confirmed Off and the node's volumes released".into(),
        );
    }
    if let Some(excl) = state.exclusion(policy) {
        return match excl {
            Exclusion::NotInInventory => Progress::Failed(
                "NotInInventory",
                format!(
                    "node {} is not in nodefence's inventory: it has no way to prove the machine is off; add it to inventory.toml (or a BareMetalHost) to have it fenced",
                    state.name()
                ),
            ),
            Exclusion::ControlPlane => Progress::Failed(
                "ControlPlaneNotFenced",
                "a control-plane node and fence_control_plane = false: nodefence never fences it"
                    .into(),
            ),
            Exclusion::OptedOut => Progress::Working(
                "OptedOut",
                "held: the node is opted out (annotation nodefence.io/exclude: \"true\"); remove the annotation to have it fenced".into(),
            ),
            Exclusion::Cordoned => Progress::Working(
                "Cordoned",
                "held: the node is cordoned and skip_cordoned = true; uncordon it to have it fenced".into(),
            ),
        };
    }
    if request.timed_out.is_some() {
        return Progress::TimedOut(format!(
            "{} timed out at {}: no power command is sent any more; a machine proven Off is still released",
            request.describe(),
            request.timed_out.as_deref().unwrap_or_default()
        ));
    }
    if let Some(other) = state
        .facts
        .request_timed_out()
        .filter(|r| r.uid != request.uid)
    {
        return Progress::Working(
            "HeldByTimedOutRequest",
            format!(
                "held: {} for this node timed out (its requester moved on to another remediator): no power command is sent while it stands; a machine proven Off is still released",
                other.by
            ),
        );
    }
    let Phase::Incident(inc) = &state.phase else {
        return Progress::Working(
            "Starting",
            "the request was received; reading the machine's power".into(),
        );
    };
    let block = inc.block.as_ref();
    match block {
        Some(Block::Identity(check)) if check.is_mismatch() => {
            return Progress::Failed(
                "IdentityMismatch",
                block.map(Block::describe).unwrap_or_default(),
            );
        }
        Some(Block::PowerOffAttemptsExhausted(_)) => {
            return Progress::Failed(
                "PowerOffFailed",
                block.map(Block::describe).unwrap_or_default(),
            );
        }
        Some(Block::OnAndPolicyWaits) => {
            return Progress::Failed(
                "PolicyWaits",
                block.map(Block::describe).unwrap_or_default(),
            );
        }
        _ => {}
    }
    if let Some(block) = block {
        let reason = match block {
            Block::Paused => "Paused",
            Block::Syncing => "Syncing",
            Block::Storm => "StormProtection",
            Block::RateLimited => "RateLimited",
            Block::Undetermined(_) => "PowerStateUndetermined",
            Block::QueryFailing(_) => "PowerStateUnreadable",
            Block::Identity(_) => "IdentityUnproven",
            Block::RequestTimedOut(_) => "TimedOut",
            Block::OnUntil(_) | Block::OnButOnlyLeaseStale | Block::OnButOnlyCompanionSilent => {
                "MachineOn"
            }
            Block::Excluded(_) | Block::PowerOffAttemptsExhausted(_) | Block::OnAndPolicyWaits => {
                "Held"
            }
            Block::WatchdogUntil(_) | Block::WatchdogWaitsForNotReady => "PowerStateUnreadable",
            Block::WatchdogWait(_) => "WaitingForWatchdog",
        };
        return Progress::Working(reason, format!("held: {}", block.describe()));
    }
    if inc.releasing {
        return Progress::Working(
            "Releasing",
            if matches!(inc.watchdog, crate::engine::WatchdogStep::Proven { .. }) {
                "the machine is proven reset by its hardware watchdog: releasing the node's volumes"
            } else {
                "the machine is confirmed Off: releasing the node's volumes"
            }
            .into(),
        );
    }
    match inc.power_off {
        PowerOffStatus::InFlight { attempt } => Progress::Working(
            "PoweringOff",
            format!("the machine reads On: power-off command {attempt} under way"),
        ),
        PowerOffStatus::Sent { attempt, .. } | PowerOffStatus::Failed { attempt, .. } => {
            Progress::Working(
                "ConfirmingOff",
                format!(
                    "{attempt} power-off command(s) sent; confirming the machine is Off ({} of {} Off readings since its last sign of life)",
                    inc.off_readings.len(),
                    policy.confirm_readings.max(1)
                ),
            )
        }
        PowerOffStatus::NotSent => Progress::Working(
            "ConfirmingOff",
            format!(
                "reading the machine's power through its out-of-band controller ({} of {} Off readings since its last sign of life)",
                inc.off_readings.len(),
                policy.confirm_readings.max(1)
            ),
        ),
    }
}

/// The conditions to write for `wanted`, keeping each unchanged condition's
/// lastTransitionTime, or `None` when the object already says all of it.
pub fn conditions_to_write(
    wanted: &Wanted,
    request: &KeptRequest,
    now: SystemTime,
) -> Option<Vec<Condition>> {
    let same = request.status_node == wanted.node_name
        && wanted.conditions.iter().all(|w| {
            request.condition(w.type_).is_some_and(|c| {
                c.status == w.status
                    && c.reason == w.reason
                    && c.message == w.message
                    && c.observed_generation == request.generation
            })
        });
    if same {
        return None;
    }
    let now = Time(
        k8s_openapi::jiff::Timestamp::try_from(now)
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    );
    Some(
        wanted
            .conditions
            .iter()
            .map(|w| Condition {
                type_: w.type_.to_string(),
                status: w.status.to_string(),
                reason: w.reason.to_string(),
                message: w.message.clone(),
                observed_generation: request.generation,
                last_transition_time: request
                    .condition(w.type_)
                    .filter(|c| c.status == w.status)
                    .map_or_else(|| now.clone(), |c| c.last_transition_time.clone()),
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{NodeFacts, Request};
    use crate::remediation::NodeFenceRemediation;

    fn kept(name: &str, uid: &str) -> KeptRequest {
        let mut r = NodeFenceRemediation::new(name, Default::default());
        r.metadata.namespace = Some("nodefence".into());
        r.metadata.uid = Some(uid.into());
        KeptRequest::new(&r).unwrap_or_else(|| panic!("kept"))
    }

    fn condition<'a>(w: &'a Wanted, type_: &str) -> &'a WantedCondition {
        w.conditions
            .iter()
            .find(|c| c.type_ == type_)
            .unwrap_or_else(|| panic!("{type_} in {w:?}"))
    }

    #[test]
    fn a_request_held_by_another_that_timed_out_says_which_and_why() {
        let now = crate::clock::now();
        let mut facts = NodeFacts::ready("worker-1", now);
        facts.request = Some(Box::new(Request {
            uid: "uid-nhc".into(),
            by: "NodeFenceRemediation nodefence/worker-1".into(),
            since: now,
            timed_out: true,
        }));
        let state = NodeState::new(facts, now);
        let policy = Policy::default();
        let mine = kept("by-hand-1", "uid-mine");
        let wanted = wanted_status(&mine, Ok("worker-1"), Some(&state), false, &policy);
        let processing = condition(&wanted, PROCESSING);
        assert_eq!(
            (processing.status, processing.reason),
            ("True", "HeldByTimedOutRequest")
        );
        assert!(
            processing
                .message
                .contains("NodeFenceRemediation nodefence/worker-1 for this node timed out"),
            "{}",
            processing.message
        );
        assert_eq!(condition(&wanted, SUCCEEDED).status, "Unknown");
        // The timed-out request itself reads as timed out, not as held by itself.
        let mut theirs = kept("worker-1", "uid-nhc");
        theirs.timed_out = Some("2026-11-27T00:00:00Z".into());
        let wanted = wanted_status(&theirs, Ok("worker-1"), Some(&state), false, &policy);
        assert_eq!(condition(&wanted, PROCESSING).reason, "TimedOut");
    }
}
