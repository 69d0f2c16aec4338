//! Hardware-watchdog fencing: the one exception to "released only on an Off reading",
//! opt-in per node. A release that rests on the watchdog says so, with its
//! arithmetic, and never reads as Off.
//!
//! The rules (the companion's feeding rule, the leader's release rule, their timing)
//! are the crate `nodefence-watchdog`, re-exported here: pure and model-checked.

pub use nodefence_watchdog::{device, feeding, release, session, timing, wire};

pub mod mark;
