//! The IPMI commands nodefence speaks, as typed requests and responses: channel
//! authentication capabilities, channel cipher suites, session privilege, close session,
//! system GUID, chassis status and chassis control.
//!
//! Request builders return an [`IpmiMessage`]; response decoders take the response data
//! *after* the completion code (see [`split_completion`]) and, where the BMC side needs
//! them, response encoders return the bytes to pass to [`IpmiMessage::response`].

use crate::message::{IpmiMessage, NETFN_APP, NETFN_CHASSIS};
use crate::wire::Reader;
use crate::{Error, Result};

/// App: Get Device ID.
pub const CMD_GET_DEVICE_ID: u8 = 0x01;
/// App: Get System GUID.
pub const CMD_GET_SYSTEM_GUID: u8 = 0x37;
/// App: Get Channel Authentication Capabilities.
pub const CMD_GET_CHANNEL_AUTH_CAPABILITIES: u8 = 0x38;
/// App: Set Session Privilege Level.
pub const CMD_SET_SESSION_PRIVILEGE: u8 = 0x3B;
/// App: Close Session.
pub const CMD_CLOSE_SESSION: u8 = 0x3C;
/// App: Get Channel Cipher Suites.
pub const CMD_GET_CHANNEL_CIPHER_SUITES: u8 = 0x54;
/// Chassis: Get Chassis Status.
pub const CMD_GET_CHASSIS_STATUS: u8 = 0x01;
/// Chassis: Chassis Control.
pub const CMD_CHASSIS_CONTROL: u8 = 0x02;

/// "This channel" in channel-number fields.
pub const CURRENT_CHANNEL: u8 = 0x0E;

/// Completion code: command completed normally.
pub const CC_OK: u8 = 0x00;
/// Completion code: node busy.
pub const CC_NODE_BUSY: u8 = 0xC0;
/// Completion code: invalid command.
pub const CC_INVALID_COMMAND: u8 = 0xC1;
/// Completion code: request data length invalid.
pub const CC_BAD_LENGTH: u8 = 0xC7;
/// Completion code: parameter out of range.
pub const CC_OUT_OF_RANGE: u8 = 0xC9;
/// Completion code: invalid data field in request.
pub const CC_INVALID_DATA: u8 = 0xCC;
/// Completion code: command not supported in present state.
pub const CC_NOT_IN_PRESENT_STATE: u8 = 0xD5;
/// Completion code: insufficient privilege level.
pub const CC_INSUFFICIENT_PRIVILEGE: u8 = 0xD4;
/// Completion code: unspecified error.
pub const CC_UNSPECIFIED: u8 = 0xFF;

/// What a completion code means, for error messages.
pub fn completion_code_text(code: u8) -> &'static str {
    match code {
        CC_OK => "ok",
        CC_NODE_BUSY => "node busy",
        CC_INVALID_COMMAND => "invalid command",
        0xC2 => "command invalid for this LUN",
        0xC3 => "timeout while processing",
        0xC4 => "out of space",
        0xC5 => "reservation cancelled",
        0xC6 => "request data truncated",
        CC_BAD_LENGTH => "request data length invalid",
        0xC8 => "request data field length limit exceeded",
        CC_OUT_OF_RANGE => "parameter out of range",
        0xCA => "cannot return the requested number of bytes",
        0xCB => "requested sensor, data or record not present",
        CC_INVALID_DATA => "invalid data field in request",
        0xCD => "command illegal for this sensor or record type",
        0xCE => "command response could not be provided",
        0xCF => "duplicated request",
        0xD0 => "SDR repository in update mode",
        0xD1 => "device in firmware update mode",
        0xD2 => "BMC initialization in progress",
        0xD3 => "destination unavailable",
        CC_INSUFFICIENT_PRIVILEGE => "insufficient privilege level",
        CC_NOT_IN_PRESENT_STATE => "command not supported in present state",
        0xD6 => "sub-function disabled or unavailable",
        CC_UNSPECIFIED => "unspecified error",
        0x80..=0xBE => "command-specific error",
        _ => "unknown completion code",
    }
}

/// Splits response data into its completion code and the rest.
pub fn split_completion(data: &[u8]) -> Result<(u8, &[u8])> {
    data.split_first()
        .map(|(&cc, rest)| (cc, rest))
        .ok_or(Error::Truncated {
            what: "IPMI response",
            need: 1,
            got: 0,
        })
}

/// Session privilege levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Privilege {
    /// CALLBACK.
    Callback = 1,
    /// USER: may read, not control.
    User = 2,
    /// OPERATOR: may control the chassis.
    Operator = 3,
    /// ADMINISTRATOR.
    Administrator = 4,
}

impl Privilege {
    /// The level for a wire value.
    pub fn from_u8(v: u8) -> Result<Self> {
        match v & 0x0F {
            1 => Ok(Self::Callback),
            2 => Ok(Self::User),
            3 => Ok(Self::Operator),
            4 => Ok(Self::Administrator),
            other => Err(Error::FieldOutOfRange {
                what: "privilege level",
                value: u32::from(other),
            }),
        }
    }

    /// The name ipmitool and the spec use.
    pub fn name(self) -> &'static str {
        match self {
            Self::Callback => "CALLBACK",
            Self::User => "USER",
            Self::Operator => "OPERATOR",
            Self::Administrator => "ADMINISTRATOR",
        }
    }
}

/// Get Channel Authentication Capabilities for this channel, asking for the IPMI v2.0
/// extended data, at `privilege`.
pub fn get_channel_auth_capabilities(seq: u8, privilege: Privilege) -> IpmiMessage {
    IpmiMessage::request(
        NETFN_APP,
        CMD_GET_CHANNEL_AUTH_CAPABILITIES,
        seq,
        vec![0x80 | CURRENT_CHANNEL, privilege as u8],
    )
}

/// Get Channel Authentication Capabilities response data (after the completion code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelAuthCapabilities {
    /// The channel the request arrived on.
    pub channel: u8,
    /// The BMC supports IPMI v2.0 / RMCP+ connections on this channel.
    pub ipmi_v2: bool,
    /// A non-zero BMC key (K_g) is configured: the console must know it.
    pub kg_set: bool,
    /// Non-null user names are enabled.
    pub non_null_users: bool,
    /// Null user names are enabled.
    pub null_users: bool,
    /// Anonymous login (null user, null password) is enabled.
    pub anonymous_login: bool,
}

impl ChannelAuthCapabilities {
    /// Encodes the response data (8 bytes, no OEM id).
    pub fn encode(&self) -> Vec<u8> {
        let flags = u8::from(self.kg_set) << 5
            | u8::from(self.non_null_users) << 2
            | u8::from(self.null_users) << 1
            | u8::from(self.anonymous_login);
        let ext = if self.ipmi_v2 { 0x02 } else { 0x00 };
        // Bit 7: extended capabilities present; bits 0–5: v1.5 auth types (none offered).
        vec![self.channel, 0x80, flags, ext, 0, 0, 0, 0]
    }

    /// Decodes the response data. A BMC without the extended-capabilities bit, or one
    /// that does not offer IPMI v2.0, decodes with `ipmi_v2 = false`.
    pub fn decode(data: &[u8]) -> Result<Self> {
        let mut r = Reader::new(data, "Get Channel Authentication Capabilities response");
        let channel = r.u8()?;
        let auth_types = r.u8()?;
        let flags = r.u8()?;
        let ext = r.u8()?;
        let _oem: [u8; 4] = r.array()?;
        r.finish()?;
        Ok(Self {
            channel,
            ipmi_v2: auth_types & 0x80 != 0 && ext & 0x02 != 0,
            kg_set: flags & 0x20 != 0,
            non_null_users: flags & 0x04 != 0,
            null_users: flags & 0x02 != 0,
            anonymous_login: flags & 0x01 != 0,
        })
    }
}

/// Get Channel Cipher Suites, record-list form, for IPMI payloads on this channel,
/// starting at list index `index` (0..=0x3F); each answer carries up to 16 bytes.
pub fn get_channel_cipher_suites(seq: u8, index: u8) -> IpmiMessage {
    IpmiMessage::request(
        NETFN_APP,
        CMD_GET_CHANNEL_CIPHER_SUITES,
        seq,
        vec![CURRENT_CHANNEL, 0x00, 0x80 | (index & 0x3F)],
    )
}

/// Splits a Get Channel Cipher Suites response into the channel and its chunk of
/// record data (0..=16 bytes; fewer than 16 means the list is complete).
pub fn decode_cipher_suites_chunk(data: &[u8]) -> Result<(u8, &[u8])> {
    let (&channel, chunk) = data.split_first().ok_or(Error::Truncated {
        what: "Get Channel Cipher Suites response",
        need: 1,
        got: 0,
    })?;
    if chunk.len() > 16 {
        return Err(Error::BadLength {
            what: "Get Channel Cipher Suites record data",
            len: chunk.len(),
        });
    }
    Ok((channel, chunk))
}

/// Cipher suite ids from concatenated cipher suite record data: standard records are
/// `0xC0, id, algorithms…`, OEM records `0xC1, id, IANA (3 bytes), algorithms…`;
/// algorithm bytes carry tag bits 0x00/0x40/0x80 in their top two bits.
pub fn parse_cipher_suite_records(records: &[u8]) -> Result<Vec<u8>> {
    let mut ids = Vec::new();
    let mut i = 0;
    while let Some(&start) = records.get(i) {
        let skip_oem = match start {
            0xC0 => 0,
            0xC1 => 3,
            other => {
                return Err(Error::FieldOutOfRange {
                    what: "cipher suite record start",
                    value: u32::from(other),
                });
            }
        };
        let id = *records.get(i + 1).ok_or(Error::Truncated {
            what: "cipher suite record",
            need: i + 2,
            got: records.len(),
        })?;
        ids.push(id);
        i += 2 + skip_oem;
        // Algorithm bytes run until the next record start (0xC0/0xC1 have both top
        // bits set, which no algorithm tag does).
        while records.get(i).is_some_and(|&b| b & 0xC0 != 0xC0) {
            i += 1;
        }
    }
    Ok(ids)
}

/// Encodes standard cipher suite records for `suites` (BMC side).
pub fn encode_cipher_suite_records(suites: &[crate::crypto::CipherSuite]) -> Vec<u8> {
    let mut out = Vec::new();
    for s in suites {
        let a = s.algorithms();
        out.extend_from_slice(&[
            0xC0,
            s.id(),
            a.auth,
            0x40 | a.integrity,
            0x80 | a.confidentiality,
        ]);
    }
    out
}

/// Set Session Privilege Level.
pub fn set_session_privilege(seq: u8, privilege: Privilege) -> IpmiMessage {
    IpmiMessage::request(
        NETFN_APP,
        CMD_SET_SESSION_PRIVILEGE,
        seq,
        vec![privilege as u8],
    )
}

/// Set Session Privilege Level response data: the new privilege level.
pub fn decode_session_privilege(data: &[u8]) -> Result<Privilege> {
    let mut r = Reader::new(data, "Set Session Privilege Level response");
    let p = r.u8()?;
    r.finish()?;
    Privilege::from_u8(p)
}

/// Close Session for `bmc_session_id` (the managed system's session id).
pub fn close_session(seq: u8, bmc_session_id: u32) -> IpmiMessage {
    IpmiMessage::request(
        NETFN_APP,
        CMD_CLOSE_SESSION,
        seq,
        bmc_session_id.to_le_bytes().to_vec(),
    )
}

/// The session id in a Close Session request (BMC side).
pub fn decode_close_session(data: &[u8]) -> Result<u32> {
    let mut r = Reader::new(data, "Close Session request");
    let id = r.u32_le()?;
    r.finish()?;
    Ok(id)
}

/// Get System GUID.
pub fn get_system_guid(seq: u8) -> IpmiMessage {
    IpmiMessage::request(NETFN_APP, CMD_GET_SYSTEM_GUID, seq, Vec::new())
}

/// Get System GUID response data: the 16 GUID bytes exactly as sent. IPMI sends
/// SMBIOS-style GUIDs least-significant byte first; comparing them with a Node's
/// `systemUUID` is `crate`-external policy (nodefence's identity module).
pub fn decode_system_guid(data: &[u8]) -> Result<[u8; 16]> {
    let mut r = Reader::new(data, "Get System GUID response");
    let guid = r.array()?;
    r.finish()?;
    Ok(guid)
}

/// Get Chassis Status.
pub fn get_chassis_status(seq: u8) -> IpmiMessage {
    IpmiMessage::request(NETFN_CHASSIS, CMD_GET_CHASSIS_STATUS, seq, Vec::new())
}

/// Get Chassis Status response data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChassisStatus {
    /// System power is on.
    pub power_on: bool,
    /// Power overload.
    pub overload: bool,
    /// Power interlock active.
    pub interlock: bool,
    /// Main power fault.
    pub power_fault: bool,
    /// Power control fault.
    pub control_fault: bool,
    /// Power restore policy (0 stay off, 1 restore, 2 always on, 3 unknown).
    pub restore_policy: u8,
    /// Last power event byte.
    pub last_event: u8,
    /// Misc chassis state byte.
    pub misc: u8,
}

impl ChassisStatus {
    /// Encodes the response data (3 bytes, no front panel byte).
    pub fn encode(&self) -> Vec<u8> {
        let current = u8::from(self.power_on)
            | u8::from(self.overload) << 1
            | u8::from(self.interlock) << 2
            | u8::from(self.power_fault) << 3
            | u8::from(self.control_fault) << 4
            | (self.restore_policy & 3) << 5;
        vec![current, self.last_event, self.misc]
    }

    /// Decodes the response data (3 bytes, or 4 with the optional front panel byte).
    pub fn decode(data: &[u8]) -> Result<Self> {
        let mut r = Reader::new(data, "Get Chassis Status response");
        let current = r.u8()?;
        let last_event = r.u8()?;
        let misc = r.u8()?;
        let _front_panel = r.rest();
        if data.len() > 4 {
            return Err(Error::TrailingBytes {
                what: "Get Chassis Status response",
                extra: data.len() - 4,
            });
        }
        Ok(Self {
            power_on: current & 0x01 != 0,
            overload: current & 0x02 != 0,
            interlock: current & 0x04 != 0,
            power_fault: current & 0x08 != 0,
            control_fault: current & 0x10 != 0,
            restore_policy: (current >> 5) & 3,
            last_event,
            misc,
        })
    }
}

/// Chassis Control operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ChassisControl {
    /// Power down (immediate, not a soft shutdown): what fencing uses.
    PowerDown = 0,
    /// Power up.
    PowerUp = 1,
    /// Power cycle (off, at least 1 s, on).
    PowerCycle = 2,
    /// Hard reset.
    HardReset = 3,
    /// Pulse diagnostic interrupt.
    DiagnosticInterrupt = 4,
    /// Soft shutdown via ACPI.
    SoftShutdown = 5,
}

impl ChassisControl {
    /// The operation for a wire value.
    pub fn from_u8(v: u8) -> Result<Self> {
        Ok(match v & 0x0F {
            0 => Self::PowerDown,
            1 => Self::PowerUp,
            2 => Self::PowerCycle,
            3 => Self::HardReset,
            4 => Self::DiagnosticInterrupt,
            5 => Self::SoftShutdown,
            other => {
                return Err(Error::FieldOutOfRange {
                    what: "chassis control",
                    value: u32::from(other),
                });
            }
        })
    }
}

/// Chassis Control request.
pub fn chassis_control(seq: u8, op: ChassisControl) -> IpmiMessage {
    IpmiMessage::request(NETFN_CHASSIS, CMD_CHASSIS_CONTROL, seq, vec![op as u8])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::crypto::CipherSuite;

    #[test]
    fn auth_capabilities_round_trip_and_flags() {
        let caps = ChannelAuthCapabilities {
            channel: 1,
            ipmi_v2: true,
            kg_set: true,
            non_null_users: true,
            null_users: false,
            anonymous_login: false,
        };
        let bytes = caps.encode();
        assert_eq!(bytes, [1, 0x80, 0x24, 0x02, 0, 0, 0, 0]);
        assert_eq!(ChannelAuthCapabilities::decode(&bytes).unwrap(), caps);
        // A v1.5-only BMC (no extended bit) is not IPMI v2.0 even if byte 4 says so.
        let v15 = ChannelAuthCapabilities::decode(&[1, 0x15, 0x04, 0x02, 0, 0, 0, 0]).unwrap();
        assert!(!v15.ipmi_v2);
        assert!(ChannelAuthCapabilities::decode(&[1, 0x80, 0, 2, 0, 0, 0]).is_err());
    }

    #[test]
    fn cipher_suite_records_parse_standard_and_oem() {
        let mut records = encode_cipher_suite_records(&[CipherSuite::Suite3, CipherSuite::Suite17]);
        // An OEM record (IANA 0x0002A2) between them, and suite 0 (no algorithms but auth).
        records.extend_from_slice(&[0xC1, 0x50, 0xA2, 0x02, 0x00, 0x01, 0x41, 0x81]);
        records.extend_from_slice(&[0xC0, 0x00, 0x00, 0x40, 0x80]);
        assert_eq!(
            parse_cipher_suite_records(&records).unwrap(),
            [3, 17, 0x50, 0]
        );
        assert!(parse_cipher_suite_records(&[0x12]).is_err());
        assert!(parse_cipher_suite_records(&[0xC0]).is_err());
        assert!(decode_cipher_suites_chunk(&[1; 18]).is_err());
    }

    #[test]
    fn chassis_status_bits() {
        let on = ChassisStatus::decode(&[0x61, 0x10, 0x00, 0xFF]).unwrap();
        assert!(on.power_on && !on.power_fault);
        assert_eq!(on.restore_policy, 3);
        let off = ChassisStatus::decode(&[0x08, 0, 0]).unwrap();
        assert!(!off.power_on && off.power_fault);
        assert_eq!(ChassisStatus::decode(&off.encode()).unwrap(), off);
        assert!(ChassisStatus::decode(&[0x01, 0]).is_err());
        assert!(ChassisStatus::decode(&[0x01, 0, 0, 0, 0]).is_err());
    }

    #[test]
    fn requests_have_the_documented_bytes() {
        let m = chassis_control(5, ChassisControl::PowerDown);
        assert_eq!(
            (m.net_fn, m.cmd, m.seq, m.data.as_slice()),
            (0, 2, 5, &[0u8][..])
        );
        let m = close_session(1, 0x0403_0201);
        assert_eq!(m.data, [1, 2, 3, 4]);
        assert_eq!(decode_close_session(&m.data).unwrap(), 0x0403_0201);
        let m = get_channel_auth_capabilities(0, Privilege::Administrator);
        assert_eq!(m.data, [0x8E, 4]);
        assert_eq!(decode_session_privilege(&[3]).unwrap(), Privilege::Operator);
        assert!(decode_session_privilege(&[9]).is_err());
        assert!(decode_system_guid(&[0; 15]).is_err());
        assert_eq!(
            ChassisControl::from_u8(2).unwrap(),
            ChassisControl::PowerCycle
        );
        assert!(ChassisControl::from_u8(7).is_err());
        assert_eq!(split_completion(&[0xD4, 1]).unwrap(), (0xD4, &[1u8][..]));
        assert_eq!(completion_code_text(0xD4), "insufficient privilege level");
    }
}
