//! The wall clock every decision reads: `SystemTime::now()`, except in the
//! whole-system simulation, which makes it follow tokio's paused time (see the
//! `nodefence-clock` crate).

pub use nodefence_clock::{VirtualClock, now, since_boot, virtualize};
