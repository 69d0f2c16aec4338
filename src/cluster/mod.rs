//! Everything nodefence reads from and writes to the Kubernetes API.
//!
//! - [`access`]: the table of every call, from which RBAC and the start-up
//!   permission check are derived.
//! - [`events`]: Kubernetes Events for nodefence's notices, repeated ones as series.
//! - [`facts`]: Node and Lease objects → the engine's [`crate::engine::NodeFacts`].
//! - [`fresh`]: a bounded read right before a command, which holds it when it fails.
//! - [`leader`]: fail-stop leader election on a Lease.
//! - [`pause`]: the cluster-wide pause switch (a ConfigMap).
//! - [`release`]: the out-of-service taint, Node, Pod and VolumeAttachment deletion, with re-checks.
//! - [`records`]: per-node progress that outlives a leader and the Node object.

pub mod access;
pub mod events;
pub mod facts;
pub mod fresh;
pub mod leader;
pub mod pause;
pub mod records;
pub mod release;

/// The `User-Agent` of every request nodefence sends (Kubernetes, Redfish, EC2), so
/// an API server's audit log or a BMC's access log can pick its requests out.
pub const USER_AGENT: &str = concat!("nodefence/", env!("CARGO_PKG_VERSION"));

/// A Kubernetes client for `config` that identifies itself as nodefence.
pub fn client(mut config: kube::Config) -> Result<kube::Client, kube::Error> {
    config.headers.push((
        reqwest::header::USER_AGENT,
        reqwest::header::HeaderValue::from_static(USER_AGENT),
    ));
    kube::Client::try_from(config)
}
