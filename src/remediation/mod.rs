//! Remediation requests: how the cluster's own remediation machinery asks nodefence
//! to fence a node, and what nodefence answers on the request.
//!
//! The medik8s NodeHealthCheck operator (and Cluster API's MachineHealthCheck, through
//! its `remediationTemplate`) decides that a node is unhealthy and creates a
//! `NodeFenceRemediation` from a `NodeFenceRemediationTemplate` ([`types`]). A
//! request is another way in, never a way around the one rule: it makes the node
//! suspect at once and lets a machine that reads On be powered off without waiting
//! (the requester already waited), but a release still needs the fresh Off proof,
//! the identity proof, leadership, the pause switch, opt-out and storm protection,
//! exactly as nodefence's own detection does ([`crate::engine::Request`]).
//!
//! - [`types`]: the CRDs' Rust types (the source of `deploy/components/remediation`).
//! - [`request`]: a request object as the controller keeps it, and which node it names.
//! - [`report`]: the `status.conditions` an engine state gives a request.
//! - [`gate`]: a fresh read of the requests before every power command (a timed-out
//!   one the watch has not shown yet still stops it).

pub mod gate;
pub mod report;
pub mod request;
pub mod types;
pub mod writer;

pub use report::{Wanted, wanted_status};
pub use request::{KeptRequest, RequestTarget};
pub use types::{
    NodeFenceRemediation, NodeFenceRemediationSpec, NodeFenceRemediationStatus,
    NodeFenceRemediationTemplate,
};

/// NodeHealthCheck names the node in this annotation (the object's name is the
/// node's too unless its template supports several templates of one kind).
pub const NODE_NAME_ANNOTATION: &str = "remediation.medik8s.io/node-name";
/// NodeHealthCheck's escalation timeout: set on a request it gave up on (RFC 3339).
pub const TIMED_OUT_ANNOTATION: &str = "remediation.medik8s.io/nhc-timed-out";
/// Held on a request whose node carries nodefence's out-of-service taint: the request
/// is not gone (NodeHealthCheck deletes it once the node is healthy) before the taint is.
pub const TAINT_FINALIZER: &str = "remediation.nodefence.io/out-of-service-taint";

/// The condition types NodeHealthCheck and Cluster API read on a remediation.
pub mod condition {
    pub const PROCESSING: &str = "Processing";
    pub const SUCCEEDED: &str = "Succeeded";
    pub const PERMANENT_NODE_DELETION_EXPECTED: &str = "PermanentNodeDeletionExpected";
}
