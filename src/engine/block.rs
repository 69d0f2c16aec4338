//! Why nothing (more) is happening for an unhealthy node: what holds an incident
//! back, how it is told to the operator (its Event reason and text), and whether it
//! is a warning.

use std::time::SystemTime;

use super::action::Reason;
use super::facts::Exclusion;
use crate::identity::IdentityCheck;
use crate::power::PowerState;

/// Why nothing (more) is happening for an unhealthy node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Block {
    Excluded(Exclusion),
    Paused,
    /// This term has not yet read every Node and kubelet Lease (its lists fail or
    /// are under way): it cannot tell one failure from a storm.
    Syncing,
    Storm,
    /// The machine reads On; powering off waits until the node has been NotReady for
    /// `unhealthy_after`.
    OnUntil(SystemTime),
    /// The machine reads On but only the Lease is stale: never powered off on that alone.
    OnButOnlyLeaseStale,
    /// The machine reads On and only its companion is silent (its kubelet still
    /// renews): never powered off on that alone.
    OnButOnlyCompanionSilent,
    /// `on_powered_on = "wait"`.
    OnAndPolicyWaits,
    PowerOffAttemptsExhausted(u32),
    RateLimited,
    /// The last reading was neither On nor Off.
    Undetermined(PowerState),
    /// Power queries fail.
    QueryFailing(String),
    /// The BMC is not proven to control this node's own machine (a mismatch, or an
    /// unknown identity with `require_identity`): no release, no power-off.
    Identity(IdentityCheck),
    /// No power method can be read and the watchdog level waits until then (the node
    /// unhealthy for `unhealthy_after`) to mark the node.
    WatchdogUntil(SystemTime),
    /// No power method can be read, its companion still beats and only the Lease is
    /// stale: the watchdog level waits for NotReady.
    WatchdogWaitsForNotReady,
    /// The node is marked; the release rule waits (why).
    WatchdogWait(String),
    /// The remediation request for the node timed out (its requester moved on to
    /// another remediator): no power command is sent while it stands.
    RequestTimedOut(String),
}

impl Block {
    pub fn describe(&self) -> String {
        match self {
            Block::Excluded(e) => format!("left alone: {}", e.as_str()),
            Block::Paused => "fencing is paused cluster-wide".into(),
            Block::Syncing => "this leader has not yet read every Node and kubelet Lease from the API server: no power command and no release until it has".into(),
            Block::Storm => {
                "storm protection: too many nodes unhealthy at once; no power-off commands".into()
            }
            Block::OnUntil(t) => format!(
                "the machine is On; it will be powered off at {} unless the node recovers",
                humantime::format_rfc3339_seconds(*t)
            ),
            Block::OnButOnlyLeaseStale => {
                "the machine is On and only its Lease is stale: waiting for NotReady".into()
            }
            Block::OnButOnlyCompanionSilent => {
                "the machine is On and only its companion is silent (its kubelet still renews its Lease): waiting for NotReady".into()
            }
            Block::OnAndPolicyWaits => {
                "the machine is On and on_powered_on = \"wait\": a person must decide".into()
            }
            Block::PowerOffAttemptsExhausted(n) => {
                format!("{n} power-off commands did not turn the machine off; waiting for a person")
            }
            Block::RateLimited => {
                "waiting for a power-off slot (max_concurrent_fences / min_power_off_interval)"
                    .into()
            }
            Block::Undetermined(s) => {
                format!("the power state is {s}: neither On nor Off; nothing is released")
            }
            Block::QueryFailing(e) => {
                format!("the power state cannot be read ({e}); nothing is released")
            }
            Block::Identity(check @ IdentityCheck::Mismatch { .. }) => format!(
                "{}: the inventory maps this node to another machine's BMC; nothing is released or powered off until the inventory is fixed",
                check.describe()
            ),
            Block::Identity(check) => format!(
                "the BMC is not proven to control this node's machine ({}) and require_identity = true: nothing is released or powered off",
                check.describe()
            ),
            Block::WatchdogUntil(t) => format!(
                "no power method can be read; the node is marked for fencing by its watchdog at {} unless it recovers",
                humantime::format_rfc3339_seconds(*t)
            ),
            Block::WatchdogWaitsForNotReady => "no power method can be read and its companion still beats (only its Lease is stale): waiting for NotReady before marking it for fencing by its watchdog".into(),
            Block::WatchdogWait(why) => format!(
                "marked for fencing; waiting until its hardware watchdog has certainly reset the machine: {why}"
            ),
            Block::RequestTimedOut(by) => format!(
                "{by} timed out (remediation.medik8s.io/nhc-timed-out): its requester moved on to another remediator, so nodefence sends no power command for this node while it stands; a machine proven Off is still released"
            ),
        }
    }

    /// The kind of block, a closed set (the `reason` label of the incident metrics).
    pub fn kind(&self) -> &'static str {
        match self {
            Block::Excluded(_) => "excluded",
            Block::Paused => "paused",
            Block::Syncing => "syncing",
            Block::Storm => "storm",
            Block::OnUntil(_) => "waiting_unhealthy_after",
            Block::OnButOnlyLeaseStale => "lease_stale_only",
            Block::OnButOnlyCompanionSilent => "companion_silent_only",
            Block::OnAndPolicyWaits => "policy_waits",
            Block::PowerOffAttemptsExhausted(_) => "power_off_attempts_exhausted",
            Block::RateLimited => "rate_limited",
            Block::Undetermined(_) => "undetermined_power_state",
            Block::QueryFailing(_) => "power_query_failing",
            Block::Identity(_) => "identity_unproven",
            Block::WatchdogUntil(_) => "watchdog_waiting_unhealthy_after",
            Block::WatchdogWaitsForNotReady => "watchdog_lease_stale_only",
            Block::WatchdogWait(_) => "watchdog_wait",
            Block::RequestTimedOut(_) => "request_timed_out",
        }
    }

    /// The Event reason a block is announced with, if it is a Warning (and repeated
    /// while it lasts).
    pub(super) fn warning_reason(&self) -> Option<Reason> {
        match self {
            Block::Identity(check) if check.is_mismatch() => Some(Reason::IdentityMismatch),
            Block::Identity(_) => Some(Reason::IdentityUnproven),
            Block::QueryFailing(_) => Some(Reason::PowerQueryFailed),
            b if b.is_warning() => Some(Reason::Blocked),
            _ => None,
        }
    }

    pub(super) fn is_warning(&self) -> bool {
        !matches!(
            self,
            Block::OnUntil(_)
                | Block::RateLimited
                | Block::OnButOnlyLeaseStale
                | Block::OnButOnlyCompanionSilent
                | Block::WatchdogUntil(_)
                | Block::WatchdogWaitsForNotReady
                | Block::WatchdogWait(_)
        )
    }
}
