//! Hardware-watchdog fencing, its rules: what lets nodefence fence a node when nothing
//! out of band can be read (its BMC lost power with it, hung, or sits behind the same
//! dead switch), as Pacemaker's SBD and medik8s' Self Node Remediation do, with an
//! acknowledged heartbeat so the wait is seconds, not minutes.
//!
//! A companion on each node arms the node's hardware watchdog and feeds it only while
//! it is told, freshly, that it may ([`feeding`]). The leader marks a node for fencing
//! and, once its arithmetic proves the machine reset by its watchdog, releases it
//! ([`release`]); the arithmetic and its drift margin are in [`timing`]; the device,
//! behind one trait, in [`device`]; the heartbeat's sealed datagrams in [`wire`], and
//! what each end of a session accepts in [`session`].
//!
//! The rules are pure (times are readings of monotonic clocks, given by the caller)
//! and their own crate, so that the model check (`tests/model`) explores every
//! interleaving of message loss and delay, partitions, crashes and clock drift on an
//! optimized build in minutes, and shows that nine deliberate bugs are each caught.

pub mod device;
pub mod feeding;
pub mod release;
pub mod session;
pub mod timing;
pub mod wire;
