//! Everything nodefence reads from and writes to the Kubernetes API.
//!
//! - [`facts`]: Node and Lease objects → the engine's [`crate::engine::NodeFacts`].
//! - [`leader`]: fail-stop leader election on a Lease.
//! - [`pause`]: the cluster-wide pause switch (a ConfigMap).
//! - [`release`]: the out-of-service taint, Node, Pod and VolumeAttachment deletion, with re-checks.
//! - [`records`]: per-node progress that outlives a leader and the Node object.

pub mod facts;
pub mod leader;
pub mod pause;
pub mod records;
pub mod release;
