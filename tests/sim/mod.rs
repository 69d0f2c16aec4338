//! The whole-system simulation: the real daemon (two replicas: leader election,
//! controller, executor, cluster writes, engine, BMC monitor) against fake-kube's
//! simulated control plane, served in process, with a driver-level fault layer over
//! simulated machines, all on one thread in tokio's paused time with a virtual wall
//! clock; a seeded schedule of faults; invariants checked on every write and power
//! command, and at the end. On about half the seeds every machine also runs a
//! companion feeding a simulated hardware watchdog ([`companion`]). See
//! `tests/simulation.rs`.

pub mod api;
pub mod companion;
pub mod machine;
pub mod play;
pub mod requests;
pub mod schedule;
pub mod world;
