//! Choosing the ResetType for a power action from what the system advertises.
//!
//! Off is always `ForceOff`: a graceful shutdown is a request to the OS, and the OS of
//! a node being fenced is by definition not answering. When a system advertises no
//! allowable values at all, the Redfish specification says every value of the enum is
//! allowed, so the standard one is used; when it advertises a list without an
//! acceptable value, nodefence refuses rather than guess.

use crate::power::{PowerAction, PowerError};

/// ResetTypes acceptable for an action, most preferred first.
pub fn preferences(action: PowerAction) -> &'static [&'static str] {
    match action {
        PowerAction::Off => &["ForceOff"],
        PowerAction::On => &["On", "ForceOn"],
        PowerAction::Reboot => &["ForceRestart", "PowerCycle"],
    }
}

/// What a system advertised for `ResetType`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Advertised {
    /// Neither `ResetType@Redfish.AllowableValues` nor an ActionInfo list.
    Nothing,
    List(Vec<String>),
}

/// The ResetType to send, or `Ok(None)` when `Reboot` must fall back to off-then-on.
pub fn choose(action: PowerAction, advertised: &Advertised) -> Result<Option<String>, PowerError> {
    let wanted = preferences(action);
    match advertised {
        Advertised::Nothing => Ok(Some(wanted[0].to_string())),
        Advertised::List(values) => {
            if let Some(found) = wanted.iter().find(|w| values.iter().any(|v| v == *w)) {
                return Ok(Some((*found).to_string()));
            }
            if action == PowerAction::Reboot
                && preferences(PowerAction::Off)
                    .iter()
                    .any(|w| values.iter().any(|v| v == w))
            {
                return Ok(None);
            }
            Err(PowerError::unsupported(format!(
                "the system offers no acceptable ResetType for power {action}: wanted {}, it offers [{}]",
                wanted.join(" or "),
                values.join(", ")
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(v: &[&str]) -> Advertised {
        Advertised::List(v.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn off_is_always_force_off_never_graceful() {
        let adv = list(&["On", "GracefulShutdown", "ForceOff", "PushPowerButton"]);
        assert_eq!(
            choose(PowerAction::Off, &adv).ok().flatten().as_deref(),
            Some("ForceOff")
        );
        let graceful_only = list(&["On", "GracefulShutdown", "PushPowerButton"]);
        let err = choose(PowerAction::Off, &graceful_only).expect_err("no ForceOff");
        assert!(err.message.contains("GracefulShutdown"), "{err}");
        assert!(err.message.contains("ForceOff"), "{err}");
    }

    #[test]
    fn on_prefers_on_then_force_on() {
        assert_eq!(
            choose(PowerAction::On, &list(&["ForceOn", "On"]))
                .ok()
                .flatten()
                .as_deref(),
            Some("On")
        );
        assert_eq!(
            choose(PowerAction::On, &list(&["ForceOn", "ForceOff"]))
                .ok()
                .flatten()
                .as_deref(),
            Some("ForceOn")
        );
    }

    #[test]
    fn reboot_prefers_force_restart_then_power_cycle_then_off_on() {
        assert_eq!(
            choose(PowerAction::Reboot, &list(&["PowerCycle", "ForceRestart"]))
                .ok()
                .flatten()
                .as_deref(),
            Some("ForceRestart")
        );
        assert_eq!(
            choose(PowerAction::Reboot, &list(&["PowerCycle", "On"]))
                .ok()
                .flatten()
                .as_deref(),
            Some("PowerCycle")
        );
        assert!(matches!(
            choose(PowerAction::Reboot, &list(&["ForceOff", "On"])),
            Ok(None)
        ));
    }

    #[test]
    fn nothing_advertised_means_the_standard_value() {
        assert_eq!(
            choose(PowerAction::Off, &Advertised::Nothing)
                .ok()
                .flatten()
                .as_deref(),
            Some("ForceOff")
        );
    }
}
