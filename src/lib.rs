//! nodefence: fences dead Kubernetes nodes through their out-of-band controller
//! (BMC, cloud API, fence agent) and releases their volumes only once the machine
//! is confirmed powered off.
//!
//! # Layout
//! - [`config`]: agent settings (`nodefence.toml`) and the hardware inventory
//!   (`inventory.toml`), with validation errors that name file, line and fix.
//! - [`power`]: the one [`power::PowerDriver`] trait every power source implements,
//!   the uniform [`power::PowerState`], the confirm-off loop and the drivers.
//! - [`identity`]: which machine a Node says it runs on and which one a power source
//!   controls, and whether they are the same.
//! - [`engine`]: the pure decisions (suspect, power off, prove Off, release, recover),
//!   driven by observations and an injected clock.
//! - [`cluster`]: the Kubernetes side: node facts, the releaser (the only code that
//!   writes the taint or deletes Nodes), Events, leader election, the pause switch,
//!   release records and the table of every API call (RBAC).
//! - [`controller`]: the control loop of a leadership term: watches in, engine
//!   decisions, the executor that carries them out behind the one rule's re-checks.
//! - [`remediation`]: remediation requests from NodeHealthCheck and Cluster API (the
//!   CRDs' types, which node a request names, the status nodefence reports).
//! - [`daemon`]: `nodefence run`: leader election, configuration reloads, the
//!   metrics and health server, one controller per term.
//! - [`telemetry`]: Prometheus metrics, `/healthz` and `/readyz`.
//! - [`cli`]: one module per subcommand; `main.rs` only dispatches.
//! - [`heartbeat`]: the companions' heartbeat, nodefence's side (hello, beats, the
//!   table every replica keeps); [`companion`]: `nodefence companion`, the node's side.
//! - `demo`: `nodefence demo`: the whole story on one machine against the mocks; only
//!   with the `demo` feature (on by default, off in the image: it brings the mocks).
//! - [`clock`]: the process's clock, replaceable in simulations.
//! - [`tls`]: the single rustls crypto provider of the process, and how BMC
//!   certificates are trusted (a CA file, the exact certificate, or a pinned fingerprint).
//! - [`metal3`]: BareMetalHosts as an inventory source, and power through Metal3.
//! - [`untrusted`]: text from BMCs, clouds and the API server, made safe to show.
//! - [`watchdog`]: hardware-watchdog fencing: the companion's feeding rule, the
//!   leader's release rule and their timing, model-checked.

pub mod cli;
pub mod clock;
pub mod cluster;
pub mod companion;
pub mod config;
pub mod controller;
pub mod daemon;
#[cfg(feature = "demo")]
pub mod demo;
pub mod engine;
#[doc(hidden)]
pub mod fuzzing;
pub mod heartbeat;
pub mod identity;
pub mod metal3;
pub mod power;
pub mod remediation;
pub mod telemetry;
pub mod tls;
pub mod untrusted;
pub mod watchdog;
