//! A fake Kubernetes API server with the node-failure behaviour that matters.
//!
//! nodefence talks to a real cluster over HTTP; its tests and `nodefence demo` talk to
//! this one, which kube-rs and kubectl cannot tell from the real thing for the calls
//! nodefence makes. Layout:
//! - [`resources`]: the served types (Nodes, Pods, Leases, VolumeAttachments, ...).
//! - [`store`]: objects, resourceVersions, conflicts, watch history.

pub mod resources;
pub mod store;
