//! Injected misbehaviour: the ways real BMCs fail that a fencing client must survive.
//!
//! A fencing decision must never rest on a lie or a garbled answer, so every failure
//! mode seen in the field can be switched on: errors, hangs, dropped connections,
//! refused credentials, a BMC that accepts ForceOff and does nothing, a power state
//! that flaps, HTML instead of JSON, broken JSON, redirect loops, slowness, missing or
//! unknown PowerState values, redirects (a service root moved to `/redfish/v1/`, a
//! web server adding slashes, another origin), terminal control sequences in every
//! string. Faults apply to `/redfish` requests only, never to the
//! `/admin` API that tests and scripts use to steer the mock.
//!
//! JSON form (`POST /admin/faults`): serde's externally tagged enum in snake_case,
//! e.g. `{"fail500":{"count":2}}`, `"hang"`, `{"slow":"1500ms"}`,
//! `{"power_state_value":"Standby"}`. Durations are humantime strings.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A misbehaviour to inject. Injecting a kind again replaces its previous setting;
/// different kinds combine. [`MockRedfishHandle::clear_faults`](super::MockRedfishHandle::clear_faults)
/// removes them all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// The next `count` `/redfish` requests answer 500 with a Redfish error body.
    Fail500 { count: u32 },
    /// Requests are accepted and never answered, until faults are cleared (then the
    /// waiting requests are answered normally).
    Hang,
    /// The next `count` requests get their connection closed without any response.
    DropConnection { count: u32 },
    /// Every authentication fails with 401: Basic, session tokens and session creation.
    RejectCredentials,
    /// Power-off resets (ForceOff, GracefulShutdown, PushPowerButton while on) are
    /// accepted as usual but nothing happens: the machine stays on and says so.
    LieOnAfterOff,
    /// While a system is off, successive GETs of it report `Off`, `On`, `Off`, `On`...
    Flap,
    /// Every request answers `503` with a `text/html` error page.
    HtmlErrorPage,
    /// Every request answers `200` with a `text/html` login page (a proxy or web UI
    /// answering in place of the API).
    HtmlLoginPage,
    /// JSON bodies are sent with `Content-Type: text/plain`.
    WrongContentType,
    /// JSON bodies are cut in half (still labelled `application/json`).
    MalformedJson,
    /// Every request answers `302` with `Location` pointing at itself.
    RedirectLoop,
    /// Every answer is delayed this long.
    Slow(#[serde(with = "humantime_text")] Duration),
    /// ComputerSystem resources have no `PowerState` property.
    PowerStateAbsent,
    /// ComputerSystem resources report this `PowerState` string (e.g. `"Standby"`).
    PowerStateValue(String),
    /// A Reset that needs power (ForceOff, GracefulShutdown, restarts, Nmi) sent
    /// while the system is off answers 400.
    RejectResetWhenOff,
    /// JSON bodies are padded with a `"Padding"` property to at least this many bytes
    /// (still valid JSON: for testing a client's body size limit).
    OversizedBody { bytes: usize },
    /// Every `/redfish` path not ending in `/` answers `status` (301, 302, 307 or
    /// 308) with `Location: <path>/`, for every method, as web servers in front of
    /// BMCs do; the `/`-terminated path is served.
    TrailingSlashRedirect { status: u16 },
    /// `GET /redfish/v1` (no slash) answers `status` with this `Location`, verbatim
    /// (a path, or an absolute URL, possibly of another origin).
    RedirectServiceRoot { status: u16, location: String },
    /// Every string a client may print carries [`HOSTILE`] (escape sequences, line
    /// breaks, bidirectional and C1 controls): error messages and resolutions, the
    /// ComputerSystem's PowerState, UUID, Name, Manufacturer, Model and
    /// SerialNumber, an extra allowable ResetType, task messages. Ids in URIs stay
    /// clean.
    HostileStrings,
}

/// The text [`Fault::HostileStrings`] puts in every printable field: it clears a
/// terminal, homes the cursor, forges a line, reverses what follows and starts an
/// 8-bit control sequence.
pub const HOSTILE: &str =
    "\u{1b}[2J\u{1b}[H\r\nFAKE: worker-1 confirmed Off\r\n\u{202e}ffO\u{9b}31m";

/// Serde for `Duration` as a humantime string (`"1500ms"`, `"2s"`).
mod humantime_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let raw = String::deserialize(d)?;
        humantime::parse_duration(&raw).map_err(serde::de::Error::custom)
    }
}

/// What a ComputerSystem GET reports instead of the real state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PowerStateOverride {
    Absent,
    Value(String),
}

/// The faults in force, one slot per kind.
#[derive(Debug, Default)]
pub(crate) struct FaultSet {
    pub(crate) fail500: u32,
    pub(crate) hang: bool,
    pub(crate) drop_connection: u32,
    pub(crate) reject_credentials: bool,
    pub(crate) lie_on_after_off: bool,
    pub(crate) flap: bool,
    pub(crate) html_error_page: bool,
    pub(crate) html_login_page: bool,
    pub(crate) wrong_content_type: bool,
    pub(crate) malformed_json: bool,
    pub(crate) redirect_loop: bool,
    pub(crate) slow: Option<Duration>,
    pub(crate) power_state: Option<PowerStateOverride>,
    pub(crate) reject_reset_when_off: bool,
    pub(crate) oversized_body: Option<usize>,
    pub(crate) trailing_slash_redirect: Option<u16>,
    pub(crate) redirect_service_root: Option<(u16, String)>,
    pub(crate) hostile_strings: bool,
}

impl FaultSet {
    pub(crate) fn insert(&mut self, fault: Fault) {
        match fault {
            Fault::Fail500 { count } => self.fail500 = count,
            Fault::Hang => self.hang = true,
            Fault::DropConnection { count } => self.drop_connection = count,
            Fault::RejectCredentials => self.reject_credentials = true,
            Fault::LieOnAfterOff => self.lie_on_after_off = true,
            Fault::Flap => self.flap = true,
            Fault::HtmlErrorPage => self.html_error_page = true,
            Fault::HtmlLoginPage => self.html_login_page = true,
            Fault::WrongContentType => self.wrong_content_type = true,
            Fault::MalformedJson => self.malformed_json = true,
            Fault::RedirectLoop => self.redirect_loop = true,
            Fault::Slow(d) => self.slow = Some(d),
            Fault::TrailingSlashRedirect { status } => self.trailing_slash_redirect = Some(status),
            Fault::RedirectServiceRoot { status, location } => {
                self.redirect_service_root = Some((status, location));
            }
            Fault::HostileStrings => self.hostile_strings = true,
            Fault::PowerStateAbsent => self.power_state = Some(PowerStateOverride::Absent),
            Fault::PowerStateValue(v) => self.power_state = Some(PowerStateOverride::Value(v)),
            Fault::RejectResetWhenOff => self.reject_reset_when_off = true,
            Fault::OversizedBody { bytes } => self.oversized_body = Some(bytes),
        }
    }

    /// The faults in force, as they would be injected (counts are what is left).
    pub(crate) fn active(&self) -> Vec<Fault> {
        let mut out = Vec::new();
        if self.fail500 > 0 {
            out.push(Fault::Fail500 {
                count: self.fail500,
            });
        }
        if self.hang {
            out.push(Fault::Hang);
        }
        if self.drop_connection > 0 {
            out.push(Fault::DropConnection {
                count: self.drop_connection,
            });
        }
        let flags = [
            (self.reject_credentials, Fault::RejectCredentials),
            (self.lie_on_after_off, Fault::LieOnAfterOff),
            (self.flap, Fault::Flap),
            (self.html_error_page, Fault::HtmlErrorPage),
            (self.html_login_page, Fault::HtmlLoginPage),
            (self.wrong_content_type, Fault::WrongContentType),
            (self.malformed_json, Fault::MalformedJson),
            (self.redirect_loop, Fault::RedirectLoop),
            (self.reject_reset_when_off, Fault::RejectResetWhenOff),
            (self.hostile_strings, Fault::HostileStrings),
        ];
        out.extend(flags.into_iter().filter(|(on, _)| *on).map(|(_, f)| f));
        if let Some(d) = self.slow {
            out.push(Fault::Slow(d));
        }
        match &self.power_state {
            Some(PowerStateOverride::Absent) => out.push(Fault::PowerStateAbsent),
            Some(PowerStateOverride::Value(v)) => out.push(Fault::PowerStateValue(v.clone())),
            None => {}
        }
        if let Some(bytes) = self.oversized_body {
            out.push(Fault::OversizedBody { bytes });
        }
        if let Some(status) = self.trailing_slash_redirect {
            out.push(Fault::TrailingSlashRedirect { status });
        }
        if let Some((status, location)) = &self.redirect_service_root {
            out.push(Fault::RedirectServiceRoot {
                status: *status,
                location: location.clone(),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_json_shapes() {
        let cases = [
            (r#"{"fail500":{"count":2}}"#, Fault::Fail500 { count: 2 }),
            (r#""hang""#, Fault::Hang),
            (
                r#"{"drop_connection":{"count":1}}"#,
                Fault::DropConnection { count: 1 },
            ),
            (r#""reject_credentials""#, Fault::RejectCredentials),
            (r#""lie_on_after_off""#, Fault::LieOnAfterOff),
            (r#""flap""#, Fault::Flap),
            (r#""html_error_page""#, Fault::HtmlErrorPage),
            (r#""html_login_page""#, Fault::HtmlLoginPage),
            (r#""wrong_content_type""#, Fault::WrongContentType),
            (r#""malformed_json""#, Fault::MalformedJson),
            (r#""redirect_loop""#, Fault::RedirectLoop),
            (
                r#"{"slow":"1s 500ms"}"#,
                Fault::Slow(Duration::from_millis(1500)),
            ),
            (r#""power_state_absent""#, Fault::PowerStateAbsent),
            (
                r#"{"power_state_value":"Standby"}"#,
                Fault::PowerStateValue("Standby".into()),
            ),
            (r#""reject_reset_when_off""#, Fault::RejectResetWhenOff),
            (
                r#"{"oversized_body":{"bytes":1048576}}"#,
                Fault::OversizedBody { bytes: 1 << 20 },
            ),
            (
                r#"{"trailing_slash_redirect":{"status":308}}"#,
                Fault::TrailingSlashRedirect { status: 308 },
            ),
            (
                r#"{"redirect_service_root":{"status":301,"location":"/redfish/v1/"}}"#,
                Fault::RedirectServiceRoot {
                    status: 301,
                    location: "/redfish/v1/".into(),
                },
            ),
            (r#""hostile_strings""#, Fault::HostileStrings),
        ];
        for (json, want) in cases {
            let got: Result<Fault, _> = serde_json::from_str(json);
            assert_eq!(got.ok(), Some(want.clone()), "{json}");
            let back = serde_json::to_string(&want).unwrap_or_default();
            assert_eq!(
                serde_json::from_str::<Fault>(&back).ok(),
                Some(want),
                "{back}"
            );
        }
    }

    #[test]
    fn same_kind_replaces_and_active_lists_all() {
        let mut set = FaultSet::default();
        set.insert(Fault::Fail500 { count: 3 });
        set.insert(Fault::Fail500 { count: 1 });
        set.insert(Fault::PowerStateAbsent);
        set.insert(Fault::PowerStateValue("Standby".into()));
        set.insert(Fault::Flap);
        assert_eq!(
            set.active(),
            vec![
                Fault::Fail500 { count: 1 },
                Fault::Flap,
                Fault::PowerStateValue("Standby".into())
            ]
        );
    }
}
