//! The simulated machines: their power state and how a Reset changes it over time.
//!
//! A real machine does not switch off the instant a BMC accepts ForceOff; it goes
//! through `PoweringOff` first. Each system keeps a queue of timed steps that are
//! applied lazily whenever the state is read, so there is no background task and the
//! state is always exactly what the clock says (tokio's clock, so paused test time
//! works too).

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tokio::time::Instant;

/// The power state a mock system is really in (Redfish `PowerState` values).
///
/// To make a GET report something else (absent, unknown, lies), inject a
/// [`Fault`](super::Fault) instead: the mock's own state always stays truthful.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MockPower {
    On,
    Off,
    PoweringOn,
    PoweringOff,
    Paused,
}

impl MockPower {
    /// The Redfish spelling (`"PoweringOff"`).
    pub fn as_str(self) -> &'static str {
        match self {
            MockPower::On => "On",
            MockPower::Off => "Off",
            MockPower::PoweringOn => "PoweringOn",
            MockPower::PoweringOff => "PoweringOff",
            MockPower::Paused => "Paused",
        }
    }

    /// True for states in which the machine draws power (everything except `Off`).
    fn is_powered(self) -> bool {
        !matches!(self, MockPower::Off)
    }
}

impl fmt::Display for MockPower {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Lower-cases a name and drops `-` and `_`, so flags and fixtures accept
/// `PoweringOff`, `powering-off` and `powering_off` alike.
pub(crate) fn fold_name(s: &str) -> String {
    s.chars()
        .filter(|c| *c != '-' && *c != '_')
        .collect::<String>()
        .to_ascii_lowercase()
}

/// A power state string that is not one of [`MockPower`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown power state {0:?} (expected On, Off, PoweringOn, PoweringOff or Paused)")]
pub struct ParsePowerError(pub String);

impl FromStr for MockPower {
    type Err = ParsePowerError;

    /// Case-insensitive; `-` and `_` are ignored (`on`, `Off`, `powering-off`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match fold_name(s).as_str() {
            "on" => Ok(MockPower::On),
            "off" => Ok(MockPower::Off),
            "poweringon" => Ok(MockPower::PoweringOn),
            "poweringoff" => Ok(MockPower::PoweringOff),
            "paused" => Ok(MockPower::Paused),
            _ => Err(ParsePowerError(s.to_owned())),
        }
    }
}

impl Serialize for MockPower {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for MockPower {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        raw.parse().map_err(serde::de::Error::custom)
    }
}

/// One ComputerSystem to serve. Anything left unset takes the profile's default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemSpec {
    pub(crate) id: String,
    pub(crate) name: Option<String>,
    pub(crate) power: MockPower,
    pub(crate) uuid: Option<String>,
    pub(crate) reset_types: Option<Vec<String>>,
}

impl SystemSpec {
    /// A system with this `Id` (the last segment of its URI), powered on.
    pub fn new(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            name: None,
            power: MockPower::On,
            uuid: None,
            reset_types: None,
        }
    }

    /// Initial power state (default `On`).
    pub fn power(mut self, power: MockPower) -> Self {
        self.power = power;
        self
    }

    /// The `UUID` property (default: a random v4 UUID).
    pub fn uuid(mut self, uuid: impl Into<String>) -> Self {
        self.uuid = Some(uuid.into());
        self
    }

    /// The `Name` property (default: the profile's naming).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Replaces the profile's allowable `ResetType` list for this system: the list is
    /// both advertised and enforced. Leave out `ForceOff` to test a client's "no
    /// acceptable ResetType" path; an empty list accepts nothing.
    pub fn reset_types<I, S>(mut self, types: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.reset_types = Some(types.into_iter().map(Into::into).collect());
        self
    }

    /// The system's `Id`.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// The ResetType values the mock knows how to act on. Others may be advertised
/// (through [`SystemSpec::reset_types`]) and are then accepted without effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResetKind {
    On,
    ForceOn,
    ForceOff,
    GracefulShutdown,
    GracefulRestart,
    ForceRestart,
    PowerCycle,
    FullPowerCycle,
    PushPowerButton,
    Nmi,
    Pause,
    Resume,
    Other,
}

impl ResetKind {
    pub(crate) fn parse(raw: &str) -> Self {
        match raw {
            "On" => ResetKind::On,
            "ForceOn" => ResetKind::ForceOn,
            "ForceOff" => ResetKind::ForceOff,
            "GracefulShutdown" => ResetKind::GracefulShutdown,
            "GracefulRestart" => ResetKind::GracefulRestart,
            "ForceRestart" => ResetKind::ForceRestart,
            "PowerCycle" => ResetKind::PowerCycle,
            "FullPowerCycle" => ResetKind::FullPowerCycle,
            "PushPowerButton" => ResetKind::PushPowerButton,
            "Nmi" => ResetKind::Nmi,
            "Pause" => ResetKind::Pause,
            "Resume" => ResetKind::Resume,
            _ => ResetKind::Other,
        }
    }

    /// Whether this reset, sent to a machine in `current`, would take power away.
    pub(crate) fn powers_off(self, current: MockPower) -> bool {
        match self {
            ResetKind::ForceOff | ResetKind::GracefulShutdown => true,
            ResetKind::PushPowerButton => current.is_powered(),
            _ => false,
        }
    }

    /// Resets that make no sense on a machine that is off (what some BMCs refuse).
    pub(crate) fn needs_power(self) -> bool {
        matches!(
            self,
            ResetKind::ForceOff
                | ResetKind::GracefulShutdown
                | ResetKind::GracefulRestart
                | ResetKind::ForceRestart
                | ResetKind::Nmi
                | ResetKind::Pause
        )
    }
}

/// Every ResetType value of the DMTF `Resource.ResetType` enum the mock models; the
/// service accepts these when a profile advertises no list (Minimal).
pub(crate) const ALL_RESET_TYPES: &[&str] = &[
    "On",
    "ForceOff",
    "GracefulShutdown",
    "GracefulRestart",
    "ForceRestart",
    "Nmi",
    "ForceOn",
    "PushPowerButton",
    "PowerCycle",
    "FullPowerCycle",
    "Pause",
    "Resume",
];

/// A served system and its live state.
#[derive(Debug)]
pub(crate) struct SystemState {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) uuid: String,
    pub(crate) reset_types: Vec<String>,
    power: MockPower,
    /// Future states, in time order.
    steps: VecDeque<(Instant, MockPower)>,
    /// Successive GETs while the Flap fault is active.
    pub(crate) flap_reads: u64,
    /// The machine's power feed is cut (the BMC, on its own supply, still answers):
    /// it is off, and a reset that would power it on is accepted and does nothing.
    pub(crate) unfed: bool,
}

impl SystemState {
    pub(crate) fn new(
        id: String,
        name: String,
        uuid: String,
        reset_types: Vec<String>,
        power: MockPower,
    ) -> Self {
        Self {
            id,
            name,
            uuid,
            reset_types,
            power,
            steps: VecDeque::new(),
            flap_reads: 0,
            unfed: false,
        }
    }

    /// Cuts (`false`) or restores (`true`) the machine's power feed; a cut stops the
    /// machine at once, a restored feed leaves it off until something powers it on.
    pub(crate) fn feed(&mut self, fed: bool) {
        self.unfed = !fed;
        if self.unfed {
            self.force(MockPower::Off);
        }
    }

    /// Applies every step whose time has come.
    fn settle(&mut self, now: Instant) {
        while let Some((at, state)) = self.steps.front().copied() {
            if at > now {
                break;
            }
            self.power = state;
            self.steps.pop_front();
        }
    }

    /// The state right now.
    pub(crate) fn power(&mut self, now: Instant) -> MockPower {
        self.settle(now);
        self.power
    }

    /// "Pull the plug" / "restore power": jumps to a state, cancelling transitions.
    pub(crate) fn force(&mut self, power: MockPower) {
        self.steps.clear();
        self.power = power;
        self.flap_reads = 0;
    }

    /// When the current transition (if any) ends.
    pub(crate) fn settles_at(&self, now: Instant) -> Instant {
        self.steps.back().map_or(now, |(at, _)| *at)
    }

    /// Starts what `kind` does to the machine; returns when it will have settled.
    pub(crate) fn apply_reset(
        &mut self,
        kind: ResetKind,
        now: Instant,
        delay: Duration,
    ) -> Instant {
        self.settle(now);
        let current = self.power;
        if self.unfed && !kind.powers_off(current) {
            // No power to turn on, cycle or resume with.
            return now;
        }
        match kind {
            ResetKind::ForceOff | ResetKind::GracefulShutdown => self.power_off(now, delay),
            ResetKind::On | ResetKind::ForceOn | ResetKind::Resume
                if current == MockPower::Paused =>
            {
                self.jump(MockPower::On)
            }
            ResetKind::On | ResetKind::ForceOn => self.power_on(now, delay),
            ResetKind::PushPowerButton if current.is_powered() => self.power_off(now, delay),
            ResetKind::PushPowerButton => self.power_on(now, delay),
            ResetKind::ForceRestart
            | ResetKind::GracefulRestart
            | ResetKind::PowerCycle
            | ResetKind::FullPowerCycle => self.cycle(now, delay),
            ResetKind::Pause if current == MockPower::On => self.jump(MockPower::Paused),
            ResetKind::Pause | ResetKind::Resume | ResetKind::Nmi | ResetKind::Other => {}
        }
        self.settles_at(now)
    }

    fn jump(&mut self, power: MockPower) {
        self.steps.clear();
        self.power = power;
    }

    fn power_off(&mut self, now: Instant, delay: Duration) {
        let already = (self.power == MockPower::Off && self.steps.is_empty())
            || self.power == MockPower::PoweringOff;
        if already {
            return;
        }
        self.steps.clear();
        if delay.is_zero() {
            self.power = MockPower::Off;
        } else {
            self.power = MockPower::PoweringOff;
            self.steps.push_back((now + delay, MockPower::Off));
        }
    }

    fn power_on(&mut self, now: Instant, delay: Duration) {
        let already = (self.power == MockPower::On && self.steps.is_empty())
            || self.power == MockPower::PoweringOn;
        if already {
            return;
        }
        self.steps.clear();
        if delay.is_zero() {
            self.power = MockPower::On;
        } else {
            self.power = MockPower::PoweringOn;
            self.steps.push_back((now + delay, MockPower::On));
        }
    }

    /// Off, then on again. A machine that is off is simply powered on.
    fn cycle(&mut self, now: Instant, delay: Duration) {
        if self.power == MockPower::Off || self.power == MockPower::PoweringOff {
            self.power_on(now, delay);
            return;
        }
        self.steps.clear();
        if delay.is_zero() {
            self.power = MockPower::On;
            return;
        }
        self.power = MockPower::PoweringOff;
        self.steps.push_back((now + delay, MockPower::Off));
        self.steps
            .push_back((now + delay * 2, MockPower::PoweringOn));
        self.steps.push_back((now + delay * 3, MockPower::On));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn system(power: MockPower) -> SystemState {
        SystemState::new("1".into(), "1".into(), "u".into(), vec![], power)
    }

    #[test]
    fn force_off_goes_through_powering_off() {
        let now = Instant::now();
        let d = Duration::from_millis(100);
        let mut s = system(MockPower::On);
        let done = s.apply_reset(ResetKind::ForceOff, now, d);
        assert_eq!(done, now + d);
        assert_eq!(s.power(now), MockPower::PoweringOff);
        assert_eq!(s.power(now + d), MockPower::Off);
    }

    #[test]
    fn zero_delay_is_immediate_and_off_is_idempotent() {
        let now = Instant::now();
        let mut s = system(MockPower::On);
        s.apply_reset(ResetKind::ForceOff, now, Duration::ZERO);
        assert_eq!(s.power(now), MockPower::Off);
        s.apply_reset(ResetKind::ForceOff, now, Duration::from_secs(5));
        assert_eq!(s.power(now), MockPower::Off, "off stays off");
    }

    #[test]
    fn restart_passes_through_off() {
        let now = Instant::now();
        let d = Duration::from_millis(10);
        let mut s = system(MockPower::On);
        s.apply_reset(ResetKind::ForceRestart, now, d);
        assert_eq!(s.power(now), MockPower::PoweringOff);
        assert_eq!(s.power(now + d), MockPower::Off);
        assert_eq!(s.power(now + d * 2), MockPower::PoweringOn);
        assert_eq!(s.power(now + d * 3), MockPower::On);
    }

    #[test]
    fn push_button_toggles_and_nmi_does_nothing() {
        let now = Instant::now();
        let mut s = system(MockPower::Off);
        s.apply_reset(ResetKind::Nmi, now, Duration::ZERO);
        assert_eq!(s.power(now), MockPower::Off);
        s.apply_reset(ResetKind::PushPowerButton, now, Duration::ZERO);
        assert_eq!(s.power(now), MockPower::On);
        s.apply_reset(ResetKind::PushPowerButton, now, Duration::ZERO);
        assert_eq!(s.power(now), MockPower::Off);
    }

    #[test]
    fn power_parses_loosely_and_serializes_in_redfish_spelling() {
        assert_eq!("off".parse::<MockPower>(), Ok(MockPower::Off));
        assert_eq!(
            "powering-on".parse::<MockPower>(),
            Ok(MockPower::PoweringOn)
        );
        assert!("standby".parse::<MockPower>().is_err());
        assert_eq!(
            serde_json::to_string(&MockPower::PoweringOff).ok(),
            Some("\"PoweringOff\"".to_owned())
        );
    }
}
