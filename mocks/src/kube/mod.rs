//! A fake Kubernetes API server with the node-failure behaviour that matters.
//!
//! nodefence talks to a real cluster over HTTP; its tests and `nodefence demo` talk to
//! this one, which kube-rs and kubectl cannot tell from the real thing for the calls
//! nodefence makes (discovery, CRUD, the status subresource, merge/JSON/strategic
//! patches, graceful deletion, selectors, pagination, watches, Tables) and for
//! CustomResourceDefinitions and their custom resources. Layout:
//! - [`resources`]: the served types (Nodes, Pods, Leases, VolumeAttachments,
//!   CustomResourceDefinitions, ...); [`intern`]: the names of custom types.
//! - [`store`]: objects, resourceVersions, conflicts, watch history.
//! - [`server`]: [`FakeKube`] builder and [`FakeKubeHandle`]; [`kubeconfig`] for clients.
//! - `routes` → `handlers`: URL mapping, auth, request log, the REST verbs.
//! - [`strategy`], [`deletion`]: per-type write rules and DELETE semantics (shared
//!   with the simulation).
//! - [`crd`]: CRDs (validation, status, deletion) and the types they add (schema
//!   pruning, defaulting and validation, printer columns); [`field`]: field errors
//!   and 422s in the apiserver's words.
//! - [`query`], [`selector`]: list options, pagination, label/field selectors.
//! - [`patch`], [`smp`]: merge, JSON and strategic merge patches.
//! - [`watch`]: watch streams; [`negotiate`], [`table`] (+ `printers`),
//!   [`discovery`], [`openapi`], [`status`]: representations and documents;
//!   [`admin`]: `/admin`; [`aggregated`]: group-versions served by another program
//!   behind the aggregator (KubeVirt's virt-api), see [`FakeKube::aggregated_api`].
//!
//! Custom resources: `apiextensions.k8s.io/v1` CustomResourceDefinitions are served
//! with all verbs and `/status`, validated (422 naming the field) and given the
//! status the apiserver's controllers write (`NamesAccepted`, `Established`,
//! `acceptedNames`, `storedVersions`; names taken by another CRD or a built-in type
//! of the group are refused). Every served version of an established CRD is a
//! resource type at once: in every discovery document (`/apis`, `/apis/{g}`,
//! `/apis/{g}/{v}`, aggregated `/apis`) and `/openapi/v3`, at its namespaced or
//! cluster paths (and all-namespaces lists), with every verb: create (with
//! `generateName`), get, list and watch (label selectors; field selectors on
//! `metadata.name`, `metadata.namespace` and the version's `selectableFields`),
//! update, merge and JSON patches (strategic merge patch: 415 as for real custom
//! resources), delete with finalizers, deletecollection, and Tables from the
//! version's `additionalPrinterColumns` (`Name` and `Age` without). The version's
//! `openAPIV3Schema` prunes unknown fields (`fieldValidation`: Ignore, Warn (the
//! default, a `Warning` header each) or Strict), applies defaults and validates
//! (what is and is not enforced: [`crd::schema`]); the status subresource,
//! `generation` and deletion follow the apiextensions-apiserver's strategy.
//! Deleting a CRD deletes its objects, then its routes and discovery entries.
//! Versions share their objects (the `None` conversion: only `apiVersion` differs).
//! Not served: `/scale`, conversion webhooks, CEL rules (`x-kubernetes-validations`);
//! see [`crd`] for the rest.
//!
//! Known differences from a real apiserver (each refused loudly or documented where
//! it is implemented):
//! - JSON only: no protobuf, YAML or CBOR bodies (415) or answers (406); no
//!   server-side apply (415, see [`patch`]); `dryRun` is refused (400).
//! - No schema validation of built-in types beyond names, kind/apiVersion and patch
//!   merge keys (`fieldValidation` applies to custom resources only); `fieldManager`
//!   is ignored, no `managedFields`.
//! - No garbage collector or namespace controller: `propagationPolicy` has no
//!   effect, namespaces are deleted at once (no `spec.finalizers`).
//! - `continue` pages list current objects after the cursor, not a snapshot (see
//!   [`query`]); list `resourceVersion`/`resourceVersionMatch` are accepted but
//!   always served from the current state.
//! - core/v1 and events.k8s.io/v1 Events are separate types here (the real server
//!   stores both in one place and converts).
//! - Subresources other than `status` (eviction, binding, log, exec, scale, ...)
//!   and `/openapi/v2` are 404; `/openapi/v3` has paths and parameters but no
//!   schemas (see [`openapi`]). kubectl's `get`, `apply`, `create`, `taint`,
//!   `cordon`, `label` and `delete` do not need more.

pub mod admin;
pub mod aggregated;
pub mod authz;
pub mod crd;
pub mod deletion;
pub mod discovery;
pub mod field;
mod handlers;
pub mod intern;
pub mod kubeconfig;
pub mod meta;
pub mod negotiate;
pub mod openapi;
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

pub use server::{
    API_AUDIENCE, BoundToken, FakeKube, FakeKubeHandle, InProcessKube, RequestRecord, StartError,
};
