//! The machine behind the BMC and the BMC's accounts: power with timed transitions,
//! users with a privilege limit, and the parsers flags and fixtures use.
//!
//! A Chassis Control does not change the power at once: the change lands after the
//! transition delay. IPMI has no transitional power state, so until then the machine
//! is still in its old state, and that is what Get Chassis Status and
//! [`MockIpmiHandle::power`](super::MockIpmiHandle::power) report. Pending changes are
//! applied lazily whenever the state is read (tokio's clock), so there is no
//! background task.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use nodefence_ipmi_proto::command::{CC_NOT_IN_PRESENT_STATE, ChassisControl, Privilege};
use nodefence_ipmi_proto::crypto::CipherSuite;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tokio::time::Instant;

/// The machine's real power state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Power {
    On,
    Off,
}

impl Power {
    /// `"on"` or `"off"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Power::On => "on",
            Power::Off => "off",
        }
    }

    pub fn is_on(self) -> bool {
        self == Power::On
    }

    /// On for Off and Off for On.
    pub fn opposite(self) -> Self {
        match self {
            Power::On => Power::Off,
            Power::Off => Power::On,
        }
    }
}

impl fmt::Display for Power {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Power {
    type Err = ParseError;

    /// `on` or `off`, any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "on" => Ok(Power::On),
            "off" => Ok(Power::Off),
            _ => Err(ParseError::new("power state", s, "on or off")),
        }
    }
}

impl Serialize for Power {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Power {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        raw.parse().map_err(serde::de::Error::custom)
    }
}

/// A flag or fixture value that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {value:?}: expected {expected}")]
pub struct ParseError {
    pub what: &'static str,
    pub value: String,
    pub expected: &'static str,
}

impl ParseError {
    fn new(what: &'static str, value: &str, expected: &'static str) -> Self {
        Self {
            what,
            value: value.to_owned(),
            expected,
        }
    }
}

/// `administrator` (or `admin`), `operator`, `user` or `callback`, any case.
pub fn parse_privilege(s: &str) -> Result<Privilege, ParseError> {
    match s.trim().to_ascii_lowercase().as_str() {
        "administrator" | "admin" => Ok(Privilege::Administrator),
        "operator" => Ok(Privilege::Operator),
        "user" => Ok(Privilege::User),
        "callback" => Ok(Privilege::Callback),
        _ => Err(ParseError::new(
            "privilege",
            s,
            "administrator, operator, user or callback",
        )),
    }
}

/// A cipher suite id: `3` or `17`.
pub fn parse_suite(s: &str) -> Result<CipherSuite, ParseError> {
    s.trim()
        .parse::<u8>()
        .ok()
        .and_then(|id| CipherSuite::from_id(id).ok())
        .ok_or_else(|| ParseError::new("cipher suite", s, "3 or 17"))
}

/// Hex digits (an optional `0x` prefix; `-`, `:` and spaces are ignored).
pub fn parse_hex(s: &str) -> Result<Vec<u8>, ParseError> {
    let bad = || ParseError::new("hex string", s, "an even number of hex digits");
    let t = s.trim();
    let t = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    let digits: Vec<u8> = t
        .chars()
        .filter(|c| !matches!(c, '-' | ':' | ' '))
        .map(|c| c.to_digit(16).and_then(|d| u8::try_from(d).ok()))
        .collect::<Option<_>>()
        .ok_or_else(bad)?;
    if !digits.len().is_multiple_of(2) {
        return Err(bad());
    }
    Ok(digits.chunks_exact(2).map(|p| p[0] << 4 | p[1]).collect())
}

/// A GUID as the 16 bytes Get System GUID sends, in wire order: 32 hex digits
/// (dashes allowed, but no byte swapping is done).
pub fn parse_guid(s: &str) -> Result<[u8; 16], ParseError> {
    parse_hex(s)
        .ok()
        .and_then(|b| <[u8; 16]>::try_from(b).ok())
        .ok_or_else(|| ParseError::new("GUID", s, "32 hex digits (16 bytes in wire order)"))
}

/// Lower-case hex, no separators.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One BMC account. `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq)]
pub struct UserSpec {
    pub(crate) name: String,
    pub(crate) password: String,
    pub(crate) max_privilege: Privilege,
}

impl UserSpec {
    /// A user allowed up to `max_privilege` (IPMI limits: name ≤ 16 bytes, password
    /// ≤ 20 bytes; checked when the BMC starts).
    pub fn new(
        name: impl Into<String>,
        password: impl Into<String>,
        max_privilege: Privilege,
    ) -> Self {
        Self {
            name: name.into(),
            password: password.into(),
            max_privilege,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn max_privilege(&self) -> Privilege {
        self.max_privilege
    }
}

impl fmt::Debug for UserSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserSpec")
            .field("name", &self.name)
            .field("password", &"<redacted>")
            .field("max_privilege", &self.max_privilege)
            .finish()
    }
}

/// The simulated machine: its power and the changes still to land.
#[derive(Debug)]
pub(crate) struct Machine {
    power: Power,
    steps: VecDeque<(Instant, Power)>,
}

impl Machine {
    pub(crate) fn new(power: Power) -> Self {
        Self {
            power,
            steps: VecDeque::new(),
        }
    }

    fn settle(&mut self, now: Instant) {
        while let Some(&(at, power)) = self.steps.front() {
            if at > now {
                break;
            }
            self.power = power;
            self.steps.pop_front();
        }
    }

    /// The real state at `now`.
    pub(crate) fn power(&mut self, now: Instant) -> Power {
        self.settle(now);
        self.power
    }

    /// Admin flip: set at once, cancelling any pending change.
    pub(crate) fn force(&mut self, power: Power) {
        self.steps.clear();
        self.power = power;
    }

    fn schedule(&mut self, steps: &[(Instant, Power)], now: Instant) {
        self.steps = steps.iter().copied().collect();
        self.settle(now);
    }

    /// Executes a Chassis Control; the latest command replaces any pending change.
    /// `Err(cc)` when the operation makes no sense in the present state (the machine is
    /// off for a cycle, reset, soft shutdown or diagnostic interrupt): nothing happens.
    pub(crate) fn control(
        &mut self,
        op: ChassisControl,
        now: Instant,
        delay: Duration,
    ) -> Result<(), u8> {
        let at = now + delay;
        match (op, self.power(now)) {
            (ChassisControl::PowerDown | ChassisControl::SoftShutdown, Power::On) => {
                self.schedule(&[(at, Power::Off)], now);
            }
            (ChassisControl::PowerUp, Power::Off) => self.schedule(&[(at, Power::On)], now),
            (ChassisControl::PowerDown, Power::Off)
            | (ChassisControl::PowerUp | ChassisControl::HardReset, Power::On) => {
                self.steps.clear();
            }
            (ChassisControl::PowerCycle, Power::On) => {
                self.schedule(&[(at, Power::Off), (at + delay, Power::On)], now);
            }
            (ChassisControl::DiagnosticInterrupt, Power::On) => {}
            (
                ChassisControl::PowerCycle
                | ChassisControl::HardReset
                | ChassisControl::SoftShutdown
                | ChassisControl::DiagnosticInterrupt,
                Power::Off,
            ) => return Err(CC_NOT_IN_PRESENT_STATE),
        }
        Ok(())
    }
}

/// The snake_case name of a Chassis Control operation (admin API, logs).
pub fn control_name(op: ChassisControl) -> &'static str {
    match op {
        ChassisControl::PowerDown => "power_down",
        ChassisControl::PowerUp => "power_up",
        ChassisControl::PowerCycle => "power_cycle",
        ChassisControl::HardReset => "hard_reset",
        ChassisControl::DiagnosticInterrupt => "diagnostic_interrupt",
        ChassisControl::SoftShutdown => "soft_shutdown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsers() {
        assert_eq!("ON".parse::<Power>(), Ok(Power::On));
        assert!("standby".parse::<Power>().is_err());
        assert_eq!(parse_privilege("Operator"), Ok(Privilege::Operator));
        assert_eq!(parse_privilege("admin"), Ok(Privilege::Administrator));
        assert!(parse_privilege("root").is_err());
        assert_eq!(parse_suite("17"), Ok(CipherSuite::Suite17));
        assert!(parse_suite("1").is_err());
        assert_eq!(parse_hex("0x0aFf"), Ok(vec![0x0a, 0xff]));
        assert!(parse_hex("abc").is_err());
        assert!(parse_hex("zz").is_err());
        let guid = parse_guid("00112233-4455-6677-8899-aabbccddeeff");
        assert_eq!(
            guid.map(|g| hex(&g)).as_deref(),
            Ok("00112233445566778899aabbccddeeff")
        );
        assert!(parse_guid("0011").is_err());
    }

    #[test]
    fn transitions_land_after_the_delay() {
        let t0 = Instant::now();
        let d = Duration::from_secs(2);
        let mut m = Machine::new(Power::On);
        assert_eq!(m.control(ChassisControl::PowerDown, t0, d), Ok(()));
        assert_eq!(m.power(t0 + Duration::from_secs(1)), Power::On);
        assert_eq!(m.power(t0 + d), Power::Off);
        assert_eq!(
            m.control(ChassisControl::PowerCycle, t0 + d, d),
            Err(CC_NOT_IN_PRESENT_STATE)
        );
        assert_eq!(
            m.control(ChassisControl::PowerUp, t0 + d, Duration::ZERO),
            Ok(())
        );
        assert_eq!(m.power(t0 + d), Power::On);
        let t1 = t0 + d;
        assert_eq!(m.control(ChassisControl::PowerCycle, t1, d), Ok(()));
        assert_eq!(m.power(t1 + d), Power::Off);
        assert_eq!(m.power(t1 + d + d), Power::On);
        // The latest command wins; an admin flip cancels what is pending.
        assert_eq!(m.control(ChassisControl::PowerDown, t1 + d + d, d), Ok(()));
        m.force(Power::On);
        assert_eq!(m.power(t1 + d * 10), Power::On);
    }
}
