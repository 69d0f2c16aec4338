//! nodefence: fences dead Kubernetes nodes through their out-of-band controller
//! (BMC, cloud API, fence agent) and releases their volumes only once the machine
//! is confirmed powered off.
//!
//! # Layout
//! - [`config`]: agent settings (`nodefence.toml`) and the hardware inventory
//!   (`inventory.toml`), with validation errors that name file, line and fix.
//! - [`power`]: the one [`power::PowerDriver`] trait every power source implements,
//!   the uniform [`power::PowerState`], the confirm-off loop and the drivers.
//! - [`cli`]: one module per subcommand; `main.rs` only dispatches.
//! - [`tls`]: the single rustls crypto provider of the process, and how BMC
//!   certificates are trusted (a CA file, the exact certificate, or a pinned fingerprint).
//! - [`metal3`]: BareMetalHosts as an inventory source, and power through Metal3.
//! - [`untrusted`]: text from BMCs, clouds and the API server, made safe to show.

pub mod cli;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod controller;
pub mod daemon;
pub mod demo;
pub mod engine;
#[doc(hidden)]
pub mod fuzzing;
pub mod identity;
pub mod metal3;
pub mod power;
pub mod remediation;
pub mod telemetry;
pub mod tls;
pub mod untrusted;
