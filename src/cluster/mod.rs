//! Everything nodefence reads from and writes to the Kubernetes API.
//!
//! - [`facts`]: Node and Lease objects → the engine's [`crate::engine::NodeFacts`].

pub mod facts;
