//! The requests the driver sends inside a session (what each is, whether it may be
//! resent), the error for a completion code it cannot use, and what RMCP+ status
//! codes mean and which error each is.

use nodefence_ipmi_proto::command::{self, ChassisControl, Privilege};
use nodefence_ipmi_proto::message::IpmiMessage;

use crate::power::PowerError;

/// One request the driver sends inside a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Command {
    ChassisStatus,
    Control(ChassisControl),
    SystemGuid,
}

impl Command {
    /// Whether sending it twice does no more than sending it once.
    pub(crate) fn idempotent(self) -> bool {
        !matches!(
            self,
            Command::Control(ChassisControl::PowerCycle | ChassisControl::HardReset)
        )
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Command::ChassisStatus => "Get Chassis Status",
            Command::Control(ChassisControl::PowerDown) => "Chassis Control (power down)",
            Command::Control(ChassisControl::PowerUp) => "Chassis Control (power up)",
            Command::Control(ChassisControl::PowerCycle) => "Chassis Control (power cycle)",
            Command::Control(ChassisControl::HardReset) => "Chassis Control (hard reset)",
            Command::Control(_) => "Chassis Control",
            Command::SystemGuid => "Get System GUID",
        }
    }

    pub(crate) fn message(self, rq_seq: u8) -> IpmiMessage {
        match self {
            Command::ChassisStatus => command::get_chassis_status(rq_seq),
            Command::Control(op) => command::chassis_control(rq_seq, op),
            Command::SystemGuid => command::get_system_guid(rq_seq),
        }
    }
}

pub(crate) fn completion_error(command: Command, cc: u8) -> PowerError {
    PowerError::protocol(format!(
        "{}: completion code 0x{cc:02x} ({})",
        command.name(),
        command::completion_code_text(cc)
    ))
}

/// What an RMCP+ / RAKP status code means.
pub(crate) fn rmcp_status_text(status: u8) -> &'static str {
    match status {
        0x01 => "insufficient resources to create a session",
        0x02 => "invalid session id",
        0x03 => "invalid payload type",
        0x04 => "invalid authentication algorithm",
        0x05 => "invalid integrity algorithm",
        0x06 => "no matching authentication payload",
        0x07 => "no matching integrity payload",
        0x08 => "inactive session id",
        0x09 => "invalid role",
        0x0A => "unauthorized role or privilege level requested",
        0x0B => "insufficient resources to create a session at the requested role",
        0x0C => "invalid name length",
        0x0D => "unauthorized name",
        0x0E => "unauthorized GUID",
        0x0F => "invalid integrity check value",
        0x10 => "invalid confidentiality algorithm",
        0x11 => "no cipher suite match with the proposed security algorithms",
        0x12 => "illegal or unrecognized parameter",
        _ => "unknown status",
    }
}

/// Open Session statuses that refuse the proposed algorithms (so another suite may
/// be accepted).
pub(crate) fn refuses_suite(status: u8) -> bool {
    matches!(status, 0x04..=0x07 | 0x10..=0x12)
}

/// The error for a non-zero RMCP+ status in `step`.
pub(crate) fn status_error(
    step: &str,
    status: u8,
    username: &str,
    privilege: Privilege,
) -> PowerError {
    let what = format!(
        "{step}: the BMC answered RMCP+ status 0x{status:02x} ({})",
        rmcp_status_text(status)
    );
    match status {
        0x0D | 0x0C => PowerError::auth(format!(
            "{what}: the BMC does not know user {:?} (check the user name, and that the user is enabled for IPMI over LAN)",
            username
        )),
        0x09..=0x0B => {
            let fix = if privilege > Privilege::Operator {
                "grant it, or set privilege = \"operator\" (enough to power off and on)"
            } else {
                "grant the user OPERATOR (or ADMINISTRATOR) for IPMI over LAN"
            };
            PowerError::auth(format!(
                "{what}: user {username:?} may not have {} privilege on this channel; {fix}",
                privilege.name()
            ))
        }
        0x0F => PowerError::auth(format!(
            "{what}: the BMC rejected our proof of the password (wrong password or K_g?)"
        )),
        0x01 => PowerError::unreachable(format!(
            "{what}: all its session slots are in use; they free up after the BMC's session timeout"
        )),
        _ => PowerError::protocol(what),
    }
}
