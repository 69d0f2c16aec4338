//! A fake Kubernetes API server with the node-failure behaviour that matters.
//!
//! nodefence talks to a real cluster over HTTP; its tests and `nodefence demo` talk to
//! this one, which kube-rs and kubectl cannot tell from the real thing for the calls
//! nodefence makes (discovery, CRUD, the status subresource, merge/JSON/strategic
//! patches, graceful deletion, selectors, pagination, watches, Tables). Layout:
//! - [`resources`]: the served types (Nodes, Pods, Leases, VolumeAttachments, ...).
//! - [`store`]: objects, resourceVersions, conflicts, watch history.
//! - [`server`]: [`FakeKube`] builder and [`FakeKubeHandle`]; [`kubeconfig`] for clients.
//! - `routes` → `handlers`: URL mapping, auth, request log, the REST verbs.
//! - [`strategy`], [`deletion`]: per-type write rules and DELETE semantics (shared
//!   with the simulation).
//! - [`query`], [`selector`]: list options, pagination, label/field selectors.
//! - [`patch`], [`smp`]: merge, JSON and strategic merge patches.
//! - [`watch`]: watch streams; [`negotiate`], [`table`] (+ `printers`),
//!   [`discovery`], [`status`]: representations and documents; [`admin`]: `/admin`.
//!
//! Known differences from a real apiserver (each refused loudly or documented where
//! it is implemented):
//! - JSON only: no protobuf, YAML or CBOR bodies (415) or answers (406); no
//!   server-side apply (415, see [`patch`]); `dryRun` is refused (400).
//! - No schema validation beyond names, kind/apiVersion and patch merge keys;
//!   `fieldValidation` and `fieldManager` are ignored, no `managedFields`.
//! - No garbage collector or namespace controller: `propagationPolicy` has no
//!   effect, namespaces are deleted at once (no `spec.finalizers`).
//! - `continue` pages list current objects after the cursor, not a snapshot (see
//!   [`query`]); list `resourceVersion`/`resourceVersionMatch` are accepted but
//!   always served from the current state.
//! - core/v1 and events.k8s.io/v1 Events are separate types here (the real server
//!   stores both in one place and converts).
//! - Subresources other than `status` (eviction, binding, log, exec, ...) and
//!   `/openapi` are 404; kubectl's `get`, `taint`, `cordon`, `label` and `delete`
//!   do not need them.

pub mod admin;
pub mod authz;
pub mod deletion;
pub mod discovery;
mod handlers;
pub mod kubeconfig;
pub mod meta;
pub mod negotiate;
pub mod patch;
mod printers;
pub mod query;
pub mod resources;
mod routes;
pub mod selector;
pub mod server;
pub mod sim;
pub mod smp;
pub mod status;
pub mod store;
pub mod strategy;
pub mod table;
pub mod watch;

pub use server::{FakeKube, FakeKubeHandle, InProcessKube, RequestRecord, StartError};
