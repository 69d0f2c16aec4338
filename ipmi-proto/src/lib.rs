//! I/O-free IPMI v2.0 / RMCP+ packet codec and session crypto.
//!
//! Shared by nodefence's IPMI driver (console side) and the mock BMC (managed system
//! side). Nothing here touches the network, a clock or a random number generator:
//! callers pass in random numbers (`Rm`, `Rc`, IVs) and session ids.
//!
//! * [`rmcp`] — RMCP header, IPMI v1.5 and v2.0 (RMCP+) session framing.
//! * [`message`] — the IPMI message inside a session (addresses, netFn, checksums).
//! * [`rakp`] — Open Session Request/Response and RAKP messages 1–4.
//! * [`crypto`] — cipher suites 3 and 17: RAKP auth codes, SIK/K1/K2, integrity.
//! * [`cipher`] — AES-CBC-128 confidentiality with the IPMI pad.
//! * [`session`] — sealing/opening authenticated and encrypted session packets.
//! * [`seq`] — session sequence numbers and the inbound sliding window.
//! * [`command`] — the IPMI commands nodefence uses, typed.
#![forbid(unsafe_code)]

pub mod cipher;
pub mod command;
pub mod crypto;
mod error;
pub mod message;
pub mod rakp;
pub mod rmcp;
pub mod seq;
pub mod session;
mod wire;

pub use error::Error;

/// Result alias used throughout the crate.
pub type Result<T> = std::result::Result<T, Error>;
