//! The IPMI commands the mock BMC executes, with the privilege each needs.
//!
//! Outside a session only Get Channel Authentication Capabilities, Get Channel Cipher
//! Suites and Get System GUID are allowed (others get 0xD4). In a session a command
//! needs the session's *current* privilege (sessions start at USER; Set Session
//! Privilege Level raises it up to the negotiated maximum): Chassis Control needs
//! OPERATOR. Unknown commands get 0xC1. Every request is logged with the completion
//! code it got; every executed Chassis Control also goes to the control log.

use nodefence_ipmi_proto::command::{
    self as cmd, CC_BAD_LENGTH, CC_INSUFFICIENT_PRIVILEGE, CC_INVALID_COMMAND, CC_INVALID_DATA,
    CC_OK, ChannelAuthCapabilities, ChassisControl, ChassisStatus, Privilege,
};
use nodefence_ipmi_proto::message::{IpmiMessage, NETFN_APP, NETFN_CHASSIS};
use tokio::time::Instant;

use super::state::{Config, ControlRecord, Inner, RequestRecord};

/// The LAN channel the mock answers for.
pub(crate) const LAN_CHANNEL: u8 = 1;
/// Set Session Privilege Level: requested level exceeds the session's limit.
pub(crate) const CC_PRIVILEGE_EXCEEDS_LIMIT: u8 = 0x81;
/// Close Session: invalid session id in request.
pub(crate) const CC_INVALID_SESSION_ID: u8 = 0x87;

/// The session a request arrived in.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    pub(crate) session_id: u32,
    pub(crate) privilege: Privilege,
    pub(crate) max_privilege: Privilege,
    pub(crate) username: String,
}

/// What the session must do after answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Effect {
    None,
    SetPrivilege(Privilege),
    /// Close this session (after the answer is sealed with its keys).
    Close(u32),
}

/// How a command is answered.
#[derive(Debug)]
pub(crate) struct Answer {
    /// `None`: no reply at all.
    pub(crate) response: Option<IpmiMessage>,
    pub(crate) effect: Effect,
}

/// Who may run a command: `None` = unknown command.
fn requirement(net_fn: u8, command: u8) -> Option<(Privilege, bool)> {
    // (privilege needed in a session, allowed outside a session)
    match (net_fn, command) {
        (
            NETFN_APP,
            cmd::CMD_GET_CHANNEL_AUTH_CAPABILITIES | cmd::CMD_GET_CHANNEL_CIPHER_SUITES,
        ) => Some((Privilege::Callback, true)),
        (NETFN_APP, cmd::CMD_GET_SYSTEM_GUID) => Some((Privilege::User, true)),
        (NETFN_APP, cmd::CMD_SET_SESSION_PRIVILEGE | cmd::CMD_CLOSE_SESSION) => {
            Some((Privilege::Callback, false))
        }
        (NETFN_APP, cmd::CMD_GET_DEVICE_ID) | (NETFN_CHASSIS, cmd::CMD_GET_CHASSIS_STATUS) => {
            Some((Privilege::User, false))
        }
        (NETFN_CHASSIS, cmd::CMD_CHASSIS_CONTROL) => Some((Privilege::Operator, false)),
        _ => None,
    }
}

type Outcome = (u8, Vec<u8>, Effect);

fn cc(code: u8) -> Outcome {
    (code, Vec::new(), Effect::None)
}

fn ok(data: Vec<u8>) -> Outcome {
    (CC_OK, data, Effect::None)
}

/// Executes one request and logs it.
pub(crate) fn execute(
    inner: &mut Inner,
    config: &Config,
    req: &IpmiMessage,
    caller: Option<&Caller>,
    now: Instant,
) -> Answer {
    let mut record = RequestRecord {
        at: now,
        net_fn: req.net_fn,
        cmd: req.cmd,
        rq_seq: req.seq,
        data: req.data.clone(),
        session_id: caller.map(|c| c.session_id),
        privilege: caller.map(|c| c.privilege),
        completion_code: None,
    };
    let silent = (req.net_fn, req.cmd) == (NETFN_APP, cmd::CMD_GET_CHANNEL_CIPHER_SUITES)
        && inner.faults.no_cipher_suites;
    if silent {
        inner.requests.push(record);
        return Answer {
            response: None,
            effect: Effect::None,
        };
    }
    let (code, data, effect) = if let Some(code) =
        inner.faults.take_completion_code(req.net_fn, req.cmd)
    {
        cc(code)
    } else {
        match (requirement(req.net_fn, req.cmd), caller) {
            (None, _) => cc(CC_INVALID_COMMAND),
            (Some((_, false)), None) => cc(CC_INSUFFICIENT_PRIVILEGE),
            (Some((needed, _)), Some(c)) if c.privilege < needed => cc(CC_INSUFFICIENT_PRIVILEGE),
            (Some(_), _) => run(inner, config, req, caller, now),
        }
    };
    record.completion_code = Some(code);
    inner.requests.push(record);
    Answer {
        response: Some(req.response(code, &data)),
        effect,
    }
}

fn run(
    inner: &mut Inner,
    config: &Config,
    req: &IpmiMessage,
    caller: Option<&Caller>,
    now: Instant,
) -> Outcome {
    let data = req.data.as_slice();
    match (req.net_fn, req.cmd, caller) {
        (NETFN_APP, cmd::CMD_GET_CHANNEL_AUTH_CAPABILITIES, _) => auth_capabilities(config, data),
        (NETFN_APP, cmd::CMD_GET_CHANNEL_CIPHER_SUITES, _) => cipher_suites(config, data),
        (NETFN_APP, cmd::CMD_GET_SYSTEM_GUID, _) if data.is_empty() => ok(inner.guid.to_vec()),
        (NETFN_APP, cmd::CMD_GET_DEVICE_ID, _) if data.is_empty() => ok(device_id()),
        (NETFN_APP, cmd::CMD_SET_SESSION_PRIVILEGE, Some(c)) => set_privilege(c, data),
        (NETFN_APP, cmd::CMD_CLOSE_SESSION, Some(c)) => close_session(inner, c, data),
        (NETFN_CHASSIS, cmd::CMD_GET_CHASSIS_STATUS, _) if data.is_empty() => {
            let real = inner.machine.power(now);
            let shown = if inner.faults.lying {
                real.opposite()
            } else {
                real
            };
            ok(ChassisStatus {
                power_on: shown.is_on(),
                overload: false,
                interlock: false,
                power_fault: false,
                control_fault: false,
                // "Power up to the previous state" after AC loss.
                restore_policy: 1,
                last_event: 0,
                misc: 0,
            }
            .encode())
        }
        (NETFN_CHASSIS, cmd::CMD_CHASSIS_CONTROL, Some(c)) => {
            chassis_control(inner, config, c, data, now)
        }
        _ => cc(CC_BAD_LENGTH),
    }
}

fn auth_capabilities(config: &Config, data: &[u8]) -> Outcome {
    let [channel, privilege] = data else {
        return cc(CC_BAD_LENGTH);
    };
    if !matches!(channel & 0x0F, cmd::CURRENT_CHANNEL | LAN_CHANNEL)
        || !(1..=5).contains(&(privilege & 0x0F))
    {
        return cc(CC_INVALID_DATA);
    }
    ok(ChannelAuthCapabilities {
        channel: LAN_CHANNEL,
        ipmi_v2: true,
        kg_set: config.kg.is_some(),
        non_null_users: config.users.iter().any(|u| !u.name.is_empty()),
        null_users: config.users.iter().any(|u| u.name.is_empty()),
        anonymous_login: false,
    }
    .encode())
}

fn cipher_suites(config: &Config, data: &[u8]) -> Outcome {
    let [channel, payload_type, index] = data else {
        return cc(CC_BAD_LENGTH);
    };
    if !matches!(channel & 0x0F, cmd::CURRENT_CHANNEL | LAN_CHANNEL) || payload_type & 0x3F > 1 {
        return cc(CC_INVALID_DATA);
    }
    let records = cmd::encode_cipher_suite_records(&config.suites);
    let start = usize::from(index & 0x3F) * 16;
    let mut out = vec![LAN_CHANNEL];
    out.extend(records.iter().skip(start).take(16));
    ok(out)
}

fn device_id() -> Vec<u8> {
    vec![
        0x20, // device id
        0x01, // device revision
        0x01, // firmware 1 (device available)
        0x00, // firmware .00
        0x02, // IPMI 2.0
        0x80, // chassis device
        0x00, 0x00, 0x00, // manufacturer: unspecified
        0x01, 0x00, // product id
    ]
}

fn set_privilege(caller: &Caller, data: &[u8]) -> Outcome {
    let [level] = data else {
        return cc(CC_BAD_LENGTH);
    };
    if level & 0x0F == 0 {
        return ok(vec![caller.privilege as u8]);
    }
    match Privilege::from_u8(*level) {
        Ok(p) if p > caller.max_privilege => cc(CC_PRIVILEGE_EXCEEDS_LIMIT),
        Ok(p) => (CC_OK, vec![p as u8], Effect::SetPrivilege(p)),
        Err(_) => cc(CC_INVALID_DATA),
    }
}

fn close_session(inner: &Inner, caller: &Caller, data: &[u8]) -> Outcome {
    let Ok(id) = cmd::decode_close_session(data) else {
        return cc(CC_BAD_LENGTH);
    };
    let may = id == caller.session_id
        || (caller.privilege >= Privilege::Administrator && inner.sessions.contains_active(id));
    if may {
        (CC_OK, Vec::new(), Effect::Close(id))
    } else {
        cc(CC_INVALID_SESSION_ID)
    }
}

fn chassis_control(
    inner: &mut Inner,
    config: &Config,
    caller: &Caller,
    data: &[u8],
    now: Instant,
) -> Outcome {
    let [byte] = data else {
        return cc(CC_BAD_LENGTH);
    };
    let Ok(op) = ChassisControl::from_u8(*byte) else {
        return cc(CC_INVALID_DATA);
    };
    if inner.faults.ignore_control {
        return ok(Vec::new());
    }
    match inner.machine.control(op, now, config.delay) {
        Ok(()) => {
            tracing::info!(bmc = %config.name, ?op, user = %caller.username, "chassis control executed");
            inner.controls.push(ControlRecord {
                op,
                at: now,
                session_id: caller.session_id,
                username: caller.username.clone(),
            });
            ok(Vec::new())
        }
        Err(code) => cc(code),
    }
}
