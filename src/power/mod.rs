//! Power control, the same for every out-of-band source.
//!
//! Every driver (Redfish, IPMI, cloud, external fence agent) implements
//! [`PowerDriver`] and answers with one [`PowerState`]. Only [`PowerState::Off`] means
//! off; transitional, paused and unknown states are never treated as off. Errors say
//! which kind of failure it was ([`PowerErrorKind`]) so callers can count and explain
//! them without parsing text.
//!
//! A power command's reply is never the proof that it worked: [`confirm`] reads the
//! state back until it has N consecutive matching readings.

pub mod aws;
pub mod confirm;
pub mod exec;
pub mod ipmi;
pub mod kubevirt;
pub mod redfish;
pub mod registry;
pub mod topology;
pub mod vsphere;

use std::fmt;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use crate::identity::MachineIdentity;

/// The power state of one machine, as its out-of-band source reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PowerState {
    On,
    Off,
    PoweringOn,
    PoweringOff,
    Paused,
    /// The source answered but the value is absent or not one we know; the raw value
    /// (possibly empty) is kept for the operator.
    Unknown(String),
}

impl PowerState {
    /// True only for a definite, settled Off.
    pub fn is_off(&self) -> bool {
        matches!(self, PowerState::Off)
    }

    /// True only for a definite, settled On.
    pub fn is_on(&self) -> bool {
        matches!(self, PowerState::On)
    }
}

impl fmt::Display for PowerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PowerState::On => f.write_str("On"),
            PowerState::Off => f.write_str("Off"),
            PowerState::PoweringOn => f.write_str("PoweringOn"),
            PowerState::PoweringOff => f.write_str("PoweringOff"),
            PowerState::Paused => f.write_str("Paused"),
            PowerState::Unknown(raw) if raw.is_empty() => f.write_str("Unknown"),
            PowerState::Unknown(raw) => write!(f, "Unknown({raw})"),
        }
    }
}

/// One reading of a machine's power state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PowerReading {
    pub state: PowerState,
    /// Wall-clock time the answer arrived (for "newer than the failure" checks).
    pub at: SystemTime,
    /// How long the query took, end to end.
    pub latency: Duration,
}

/// The identity of a reading that failed: not asked.
pub(crate) fn not_asked(kind: PowerErrorKind) -> PowerError {
    PowerError::new(
        kind,
        "the machine's identity was not asked: the power state could not be read",
    )
}

/// A machine read just before a power command ([`PowerDriver::read_for_command`]).
#[derive(Debug)]
pub struct CommandReading {
    /// The identity of the machine whose reading this is.
    pub identity: Result<MachineIdentity, PowerError>,
    /// Its power state.
    pub reading: Result<PowerReading, PowerError>,
    /// The index in [`PowerDriver::levels`] of the level that read it, if any.
    pub level: Option<usize>,
}

/// What to do to a machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PowerAction {
    Off,
    On,
    Reboot,
}

impl fmt::Display for PowerAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PowerAction::Off => "off",
            PowerAction::On => "on",
            PowerAction::Reboot => "reboot",
        })
    }
}

/// The kind of a power failure: stable, countable (a metric label), explainable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PowerErrorKind {
    /// Could not reach the source: connect refused, DNS, TLS handshake, timeout.
    Unreachable,
    /// The source refused our credentials.
    Auth,
    /// The credentials were accepted but may not do this (a read-only BMC user asked
    /// to power a machine off).
    Privilege,
    /// The source's TLS certificate was refused (or no TLS handshake was possible).
    /// Permanent until the certificate or the trust setting changes: never retried.
    Tls,
    /// The source answered something we cannot trust: bad status, HTML, malformed
    /// JSON, oversized body, redirect loop, missing fields.
    Protocol,
    /// The source cannot do what was asked (no acceptable ResetType, ambiguous system).
    Unsupported,
    /// The inventory entry cannot be used (bad credentials reference, driver not built).
    Config,
    /// The source is not proven to control the node's own machine: a command was not
    /// sent (read just before it, [`crate::engine::action::Target`]).
    Identity,
    /// nodefence itself did not send the command: this replica is not the leader, or
    /// fencing is paused cluster-wide (or the pause switch could not be read).
    Refused,
}

impl PowerErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PowerErrorKind::Unreachable => "unreachable",
            PowerErrorKind::Auth => "auth",
            PowerErrorKind::Privilege => "privilege",
            PowerErrorKind::Tls => "tls",
            PowerErrorKind::Protocol => "protocol",
            PowerErrorKind::Unsupported => "unsupported",
            PowerErrorKind::Config => "config",
            PowerErrorKind::Identity => "identity",
            PowerErrorKind::Refused => "refused",
        }
    }
}

impl fmt::Display for PowerErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The longest error message kept (a topology's combines every level's).
const MAX_ERROR_CHARS: usize = 4000;

/// A failed power query or command. The message never contains a secret, and never a
/// control character: it often quotes what a BMC or a cloud said, so it is escaped and
/// capped when made ([`crate::untrusted`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct PowerError {
    pub kind: PowerErrorKind,
    pub message: String,
}

impl PowerError {
    pub fn new(kind: PowerErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: crate::untrusted::text(&message.into(), MAX_ERROR_CHARS),
        }
    }
    pub fn unreachable(message: impl Into<String>) -> Self {
        Self::new(PowerErrorKind::Unreachable, message)
    }
    pub fn auth(message: impl Into<String>) -> Self {
        Self::new(PowerErrorKind::Auth, message)
    }
    pub fn privilege(message: impl Into<String>) -> Self {
        Self::new(PowerErrorKind::Privilege, message)
    }
    pub fn tls(message: impl Into<String>) -> Self {
        Self::new(PowerErrorKind::Tls, message)
    }
    pub fn protocol(message: impl Into<String>) -> Self {
        Self::new(PowerErrorKind::Protocol, message)
    }
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(PowerErrorKind::Unsupported, message)
    }
    pub fn config(message: impl Into<String>) -> Self {
        Self::new(PowerErrorKind::Config, message)
    }
}

/// The causes below `e`, each as `: cause`, repeats left out: the detail a transport
/// error's own text hides (DNS, refused connection, certificate). Never contains a
/// URL's credentials: drivers put none in URLs.
pub(crate) fn error_sources(e: &dyn std::error::Error) -> String {
    let mut chain = String::new();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !chain.contains(&text) {
            chain.push_str(": ");
            chain.push_str(&text);
        }
        source = s.source();
    }
    chain
}

/// One machine's out-of-band power control.
///
/// Commands (`power_off`, `power_on`, `reboot`) only *send* the request and wait for
/// the source to accept it; they never claim success. Use [`confirm`] to prove the
/// result from fresh [`PowerDriver::status`] readings.
#[async_trait]
pub trait PowerDriver: Send + Sync {
    /// Short driver name for tables, logs and metric labels ("redfish", "ipmi", ...).
    fn driver_name(&self) -> &'static str;
    /// Where the source is, for humans (never contains credentials).
    fn endpoint(&self) -> String;
    /// Reads the current power state.
    async fn status(&self) -> Result<PowerReading, PowerError>;
    /// Requests an immediate, ungraceful power off (a hung OS ignores graceful ones).
    async fn power_off(&self) -> Result<(), PowerError>;
    /// Requests power on.
    async fn power_on(&self) -> Result<(), PowerError>;
    /// Requests a one-shot hardware reset. Fencing never uses this: its off phase cannot
    /// be observed. [`confirm::execute`] reboots as off, confirm off, on, confirm on.
    async fn reboot(&self) -> Result<(), PowerError>;
    /// Which machine this source controls, for the identity cross-check
    /// ([`crate::identity::check`]). Sources that cannot tell return
    /// [`MachineIdentity::Unavailable`]. Drivers answer from what they already read
    /// when they can (Redfish: the ComputerSystem of the last power reading), so this
    /// is cheap after the first call.
    async fn machine_identity(&self) -> Result<MachineIdentity, PowerError> {
        Ok(MachineIdentity::Unavailable(format!(
            "driver {} cannot report the machine's identity",
            self.driver_name()
        )))
    }
    /// What the cluster says about the node this driver serves (its Node's
    /// `systemUUID` and `spec.providerID`), whenever that is known or changes. Drivers
    /// that find their machine through the Node (a cloud instance named by the
    /// providerID) take it from here; the others ignore it.
    fn node_identity(&self, _node: &crate::identity::NodeIdentity) {}
    /// The power state together with the identity of the machine *whose reading it
    /// is*, for decisions that release volumes: an Off only counts for the machine its
    /// reader can prove. One method: its status, then (when the status was read) its
    /// identity, which drivers answer from that reading or a cache; a source that
    /// cannot be read costs one timeout, not two. A fencing topology answers with the
    /// identity of the level whose reading decided ([`topology::TopologyDriver`]): a
    /// fallback that cannot tell which machine it switches is not vouched for by a
    /// primary that could. The identity is an error ("not asked") when no reading was
    /// certain enough to need one: whoever keeps the last identity keeps it.
    async fn read_with_identity(
        &self,
    ) -> (
        Result<MachineIdentity, PowerError>,
        Result<PowerReading, PowerError>,
    ) {
        let reading = self.status().await;
        let identity = match &reading {
            Ok(_) => self.machine_identity().await,
            Err(e) => Err(not_asked(e.kind)),
        };
        (identity, reading)
    }
    /// [`PowerDriver::read_with_identity`] for a power command typed by hand: also
    /// which of [`PowerDriver::levels`] read the machine, so that the command can go
    /// to that level alone (the machine whose identity was checked). `level` is `None`
    /// for a single method, and for a topology whose levels gave no certain reading.
    async fn read_for_command(&self) -> CommandReading {
        let (identity, reading) = self.read_with_identity().await;
        CommandReading {
            identity,
            reading,
            level: None,
        }
    }
    /// Releases server-side resources (a Redfish session). Best effort.
    async fn close(&self) {}
    /// The separate power methods behind this driver, in order, when it is a fencing
    /// topology ([`topology::TopologyDriver`]); empty for a single method. Lets the
    /// BMC monitor check every level on its own, so a dead fallback (or a dead primary
    /// behind a working fallback) is found before it is needed.
    fn levels(&self) -> &[std::sync::Arc<dyn PowerDriver>] {
        &[]
    }
}
