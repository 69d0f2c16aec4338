//! Vendor profiles: the ways real BMCs differ that a Redfish client must cope with.
//!
//! The same Redfish model is served in the shapes of OpenBMC (bmcweb), Dell iDRAC and
//! HPE iLO, plus a many-blades chassis and a bare minimal service. The differences
//! are the ones that break clients in practice: system ids, where the allowable
//! ResetType values are published (inline, an ActionInfo resource, or nowhere),
//! whether sessions exist, how a Reset is answered (204, 200 with a body, or 202 and a
//! task monitor), and iLO's trailing slashes and absolute `Location` headers.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::model::{SystemSpec, fold_name};

/// Which real BMC the mock imitates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// OpenBMC bmcweb: one system `system`, inline `ResetType@Redfish.AllowableValues`,
    /// Reset answered 204.
    #[default]
    OpenBmc,
    /// Dell iDRAC: `System.Embedded.1`, allowable values in a `@Redfish.ActionInfo`
    /// resource, Reset answered 200 with a message body.
    Idrac,
    /// HPE iLO: system `1`, trailing slashes on every `@odata.id`, absolute `Location`
    /// headers, Reset answered 202 with a task monitor.
    Ilo,
    /// A chassis manager serving several systems (`Blade1`..`Blade4` by default);
    /// clients must pick one by id.
    MultiSystem,
    /// The least a service may offer: no SessionService (clients must use Basic), no
    /// allowable values published, Reset answered 204.
    Minimal,
}

/// How a successful Reset POST is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ResetResponse {
    /// `204 No Content`.
    NoContent,
    /// `200 OK` with a `@Message.ExtendedInfo` success body.
    OkWithBody,
    /// `202 Accepted`, `Location` of a task monitor, Task body.
    AcceptedTask,
}

impl FromStr for ResetResponse {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "no-content" | "204" => Ok(ResetResponse::NoContent),
            "ok-with-body" | "ok" | "200" => Ok(ResetResponse::OkWithBody),
            "accepted-task" | "task" | "202" => Ok(ResetResponse::AcceptedTask),
            _ => Err(format!(
                "unknown reset response {s:?} (expected no-content, ok-with-body or accepted-task)"
            )),
        }
    }
}

/// Where a system's allowable ResetType values are published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AllowableStyle {
    Inline,
    ActionInfo,
    Unpublished,
}

/// Identity strings a profile reports.
pub(crate) struct Identity {
    pub(crate) vendor: Option<&'static str>,
    pub(crate) product: Option<&'static str>,
    pub(crate) redfish_version: &'static str,
    pub(crate) root_type: &'static str,
    pub(crate) system_type: &'static str,
    pub(crate) manufacturer: Option<&'static str>,
    pub(crate) model: Option<&'static str>,
    /// Emit `@odata.context` (older services, iDRAC and iLO, still do).
    pub(crate) odata_context: bool,
}

impl Profile {
    /// Every profile, in a stable order.
    pub const ALL: [Profile; 5] = [
        Profile::OpenBmc,
        Profile::Idrac,
        Profile::Ilo,
        Profile::MultiSystem,
        Profile::Minimal,
    ];

    /// The command-line spelling (`multi-system`).
    pub fn name(self) -> &'static str {
        match self {
            Profile::OpenBmc => "openbmc",
            Profile::Idrac => "idrac",
            Profile::Ilo => "ilo",
            Profile::MultiSystem => "multi-system",
            Profile::Minimal => "minimal",
        }
    }

    /// The system ids this profile uses for `n` systems.
    pub fn system_ids(self, n: usize) -> Vec<String> {
        (1..=n)
            .map(|i| match self {
                Profile::OpenBmc if n == 1 => "system".to_owned(),
                Profile::OpenBmc => format!("system{i}"),
                Profile::Idrac => format!("System.Embedded.{i}"),
                Profile::Ilo | Profile::Minimal => i.to_string(),
                Profile::MultiSystem => format!("Blade{i}"),
            })
            .collect()
    }

    /// The systems served when none are given.
    pub fn default_systems(self) -> Vec<SystemSpec> {
        let n = if self == Profile::MultiSystem { 4 } else { 1 };
        self.system_ids(n)
            .into_iter()
            .map(SystemSpec::new)
            .collect()
    }

    /// The allowable ResetType values this profile's BMC offers.
    pub fn default_reset_types(self) -> Vec<&'static str> {
        match self {
            Profile::OpenBmc | Profile::MultiSystem => vec![
                "On",
                "ForceOff",
                "ForceOn",
                "ForceRestart",
                "GracefulRestart",
                "GracefulShutdown",
                "PowerCycle",
            ],
            Profile::Idrac => vec![
                "On",
                "ForceOff",
                "ForceRestart",
                "GracefulShutdown",
                "PushPowerButton",
                "Nmi",
                "PowerCycle",
            ],
            Profile::Ilo => vec![
                "On",
                "ForceOff",
                "GracefulShutdown",
                "ForceRestart",
                "Nmi",
                "PushPowerButton",
                "GracefulRestart",
            ],
            Profile::Minimal => super::model::ALL_RESET_TYPES.to_vec(),
        }
    }

    /// How this profile answers a successful Reset.
    pub fn reset_response(self) -> ResetResponse {
        match self {
            Profile::OpenBmc | Profile::MultiSystem | Profile::Minimal => ResetResponse::NoContent,
            Profile::Idrac => ResetResponse::OkWithBody,
            Profile::Ilo => ResetResponse::AcceptedTask,
        }
    }

    /// Whether the service has a SessionService (all but Minimal).
    pub fn has_sessions(self) -> bool {
        self != Profile::Minimal
    }

    pub(crate) fn allowable_style(self) -> AllowableStyle {
        match self {
            Profile::OpenBmc | Profile::MultiSystem | Profile::Ilo => AllowableStyle::Inline,
            Profile::Idrac => AllowableStyle::ActionInfo,
            Profile::Minimal => AllowableStyle::Unpublished,
        }
    }

    /// iLO writes every resource URI with a trailing slash and absolute `Location`s.
    pub(crate) fn ilo_style_uris(self) -> bool {
        self == Profile::Ilo
    }

    /// A resource URI in this profile's spelling (`path` has no trailing slash).
    pub(crate) fn uri(self, path: &str) -> String {
        if self.ilo_style_uris() {
            format!("{path}/")
        } else {
            path.to_owned()
        }
    }

    /// The default `Name` of a system.
    pub(crate) fn system_name(self, id: &str) -> String {
        match self {
            Profile::OpenBmc | Profile::MultiSystem | Profile::Minimal => id.to_owned(),
            Profile::Idrac | Profile::Ilo => "Computer System".to_owned(),
        }
    }

    pub(crate) fn identity(self) -> Identity {
        match self {
            Profile::OpenBmc => Identity {
                vendor: Some("OpenBMC"),
                product: None,
                redfish_version: "1.17.0",
                root_type: "#ServiceRoot.v1_15_0.ServiceRoot",
                system_type: "#ComputerSystem.v1_22_0.ComputerSystem",
                manufacturer: Some("OpenBMC"),
                model: Some("Romulus"),
                odata_context: false,
            },
            Profile::Idrac => Identity {
                vendor: Some("Dell"),
                product: Some("Integrated Dell Remote Access Controller"),
                redfish_version: "1.11.0",
                root_type: "#ServiceRoot.v1_6_0.ServiceRoot",
                system_type: "#ComputerSystem.v1_12_0.ComputerSystem",
                manufacturer: Some("Dell Inc."),
                model: Some("PowerEdge R740"),
                odata_context: true,
            },
            Profile::Ilo => Identity {
                vendor: Some("HPE"),
                product: Some("ProLiant DL360 Gen10"),
                redfish_version: "1.6.0",
                root_type: "#ServiceRoot.v1_5_1.ServiceRoot",
                system_type: "#ComputerSystem.v1_10_0.ComputerSystem",
                manufacturer: Some("HPE"),
                model: Some("ProLiant DL360 Gen10"),
                odata_context: true,
            },
            Profile::MultiSystem => Identity {
                vendor: Some("Contoso"),
                product: Some("Blade Chassis Manager"),
                redfish_version: "1.15.0",
                root_type: "#ServiceRoot.v1_13_0.ServiceRoot",
                system_type: "#ComputerSystem.v1_20_0.ComputerSystem",
                manufacturer: Some("Contoso"),
                model: Some("Blade"),
                odata_context: false,
            },
            Profile::Minimal => Identity {
                vendor: None,
                product: None,
                redfish_version: "1.0.0",
                root_type: "#ServiceRoot.v1_0_0.ServiceRoot",
                system_type: "#ComputerSystem.v1_0_0.ComputerSystem",
                manufacturer: None,
                model: None,
                odata_context: false,
            },
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A profile name that is not one of [`Profile::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown profile {0:?} (expected openbmc, idrac, ilo, multi-system or minimal)")]
pub struct ParseProfileError(pub String);

impl FromStr for Profile {
    type Err = ParseProfileError;
    /// Case-insensitive; `multi-system`, `multi_system` and `multisystem` all work.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match fold_name(s).as_str() {
            "openbmc" => Ok(Profile::OpenBmc),
            "idrac" => Ok(Profile::Idrac),
            "ilo" => Ok(Profile::Ilo),
            "multisystem" => Ok(Profile::MultiSystem),
            "minimal" => Ok(Profile::Minimal),
            _ => Err(ParseProfileError(s.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in Profile::ALL {
            assert_eq!(p.name().parse::<Profile>(), Ok(p));
        }
        assert_eq!("MultiSystem".parse::<Profile>(), Ok(Profile::MultiSystem));
        assert!("supermicro".parse::<Profile>().is_err());
    }

    #[test]
    fn realistic_ids() {
        assert_eq!(Profile::OpenBmc.system_ids(1), vec!["system"]);
        assert_eq!(
            Profile::Idrac.system_ids(2),
            vec!["System.Embedded.1", "System.Embedded.2"]
        );
        assert_eq!(Profile::MultiSystem.default_systems().len(), 4);
        assert_eq!(
            Profile::Ilo.uri("/redfish/v1/Systems/1"),
            "/redfish/v1/Systems/1/"
        );
    }
}
