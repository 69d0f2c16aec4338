//! The BMC side of the RMCP+ session set-up: Open Session, RAKP 1 → RAKP 2 and
//! RAKP 3 → RAKP 4, exactly the exchange of `ipmi-proto/tests/handshake.rs` over UDP.
//!
//! Refusals carry the RMCP+ status codes of IPMI v2.0 table 13-15 (see [`status`]).
//! Retransmissions are answered idempotently: a repeated Open Session or RAKP 1 gets
//! the same answer again, a repeated RAKP 3 for a session it already opened gets the
//! same RAKP 4. A session whose handshake fails is forgotten at once.

use std::net::SocketAddr;

use nodefence_ipmi_proto::command::Privilege;
use nodefence_ipmi_proto::crypto::{CipherSuite, Credentials, RakpContext};
use nodefence_ipmi_proto::rakp::{
    OpenSessionAccepted, OpenSessionRequest, OpenSessionResponse, Rakp1, Rakp2, Rakp2Accepted,
    Rakp3, Rakp4, STATUS_OK,
};
use nodefence_ipmi_proto::rmcp::{self, PayloadType, V2Header};
use nodefence_ipmi_proto::seq;
use tokio::time::Instant;

use super::sessions::{Active, Phase, Rakp2Sent, Session, random};
use super::state::{Config, Inner, SessionRecord};

/// RMCP+ / RAKP status codes the mock answers with (IPMI v2.0 table 13-15).
pub mod status {
    pub use nodefence_ipmi_proto::rakp::{
        STATUS_INVALID_INTEGRITY_CHECK as INVALID_INTEGRITY_CHECK_VALUE,
        STATUS_INVALID_SESSION_ID as INVALID_SESSION_ID, STATUS_OK as OK,
        STATUS_UNAUTHORIZED_NAME as UNAUTHORIZED_NAME,
    };
    /// Insufficient resources to create a session (the session limit is reached).
    pub const INSUFFICIENT_RESOURCES: u8 = 0x01;
    /// Invalid role (RAKP 1 privilege 0 or above ADMINISTRATOR).
    pub const INVALID_ROLE: u8 = 0x09;
    /// Unauthorized role or privilege level requested (above the user's maximum).
    pub const UNAUTHORIZED_ROLE: u8 = 0x0A;
    /// No cipher suite match with the proposed security algorithms.
    pub const NO_CIPHER_SUITE_MATCH: u8 = 0x11;
    /// Illegal or unrecognized parameter (a malformed Open Session Request).
    pub const ILLEGAL_PARAMETER: u8 = 0x12;
}

/// RAKP 1 role byte: look the user up by name only.
const NAME_ONLY_LOOKUP: u8 = 0x10;

fn plain(payload_type: PayloadType, body: &[u8]) -> Option<Vec<u8>> {
    rmcp::encode_v2_plain(&V2Header::pre_session(payload_type), body).ok()
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    let b: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
    Some(u32::from_le_bytes(b))
}

fn open_refusal(inner: &mut Inner, tag: u8, status: u8, console_id: u32) -> Option<Vec<u8>> {
    inner.counters.handshakes_refused += 1;
    let resp = OpenSessionResponse {
        tag,
        status,
        max_privilege: 0,
        console_session_id: console_id,
        accepted: None,
    };
    plain(PayloadType::OpenSessionResponse, &resp.encode())
}

/// Open Session Request → Response.
pub(crate) fn open_session(
    inner: &mut Inner,
    config: &Config,
    payload: &[u8],
    peer: SocketAddr,
    now: Instant,
) -> Option<Vec<u8>> {
    let req = match OpenSessionRequest::decode(payload) {
        Ok(req) => req,
        Err(_) => {
            let Some(console_id) = u32_at(payload, 4) else {
                inner.counters.dropped.malformed += 1;
                return None;
            };
            let tag = payload.first().copied().unwrap_or_default();
            return open_refusal(inner, tag, status::ILLEGAL_PARAMETER, console_id);
        }
    };
    let (tag, console_id) = (req.tag, req.console_session_id);
    let suite = CipherSuite::from_algorithms(req.algorithms)
        .ok()
        .filter(|s| config.suites.contains(s) && !inner.faults.refuses(s.id()));
    let Some(suite) = suite else {
        return open_refusal(inner, tag, status::NO_CIPHER_SUITE_MATCH, console_id);
    };
    if console_id == 0 {
        return open_refusal(inner, tag, status::ILLEGAL_PARAMETER, console_id);
    }
    if req.max_privilege > Privilege::Administrator as u8 {
        return open_refusal(inner, tag, status::INVALID_ROLE, console_id);
    }
    let bmc_id = match inner.sessions.find_opened(peer, console_id, suite) {
        Some(id) => id,
        None => {
            inner.sessions.remove_half_open(peer, console_id);
            if inner.sessions.len() >= config.max_sessions {
                return open_refusal(inner, tag, status::INSUFFICIENT_RESOURCES, console_id);
            }
            let id = inner.sessions.fresh_id()?;
            inner.sessions.insert(Session {
                bmc_id: id,
                console_id,
                peer,
                suite,
                requested: req.max_privilege,
                phase: Phase::Opened,
                last_activity: now,
            });
            id
        }
    };
    let resp = OpenSessionResponse {
        tag,
        status: STATUS_OK,
        max_privilege: match req.max_privilege {
            0 => Privilege::Administrator as u8,
            p => p,
        },
        console_session_id: console_id,
        accepted: Some(OpenSessionAccepted {
            bmc_session_id: bmc_id,
            algorithms: suite.algorithms(),
        }),
    };
    plain(PayloadType::OpenSessionResponse, &resp.encode())
}

fn rakp2_refusal(inner: &mut Inner, tag: u8, status: u8, console_id: u32) -> Option<Vec<u8>> {
    inner.counters.handshakes_refused += 1;
    let r2 = Rakp2 {
        tag,
        status,
        console_session_id: console_id,
        accepted: None,
    };
    // An error RAKP 2 has no auth code, so the suite does not matter.
    plain(PayloadType::Rakp2, &r2.encode(CipherSuite::Suite3).ok()?)
}

/// Finds the user RAKP 1 names: `Ok(index)` or `Err(status)`.
fn lookup(config: &Config, r1: &Rakp1, requested: Privilege) -> Result<usize, u8> {
    let named = |u: &&super::model::UserSpec| u.name.as_bytes() == r1.username.as_slice();
    if r1.role & NAME_ONLY_LOOKUP != 0 {
        let (i, user) = config
            .users
            .iter()
            .enumerate()
            .find(|(_, u)| named(u))
            .ok_or(status::UNAUTHORIZED_NAME)?;
        if requested > user.max_privilege {
            return Err(status::UNAUTHORIZED_ROLE);
        }
        Ok(i)
    } else {
        // Name + privilege lookup: an entry with this name allowed this privilege.
        config
            .users
            .iter()
            .position(|u| named(&u) && requested <= u.max_privilege)
            .ok_or(status::UNAUTHORIZED_NAME)
    }
}

fn credentials(config: &Config, user: usize) -> Option<Credentials> {
    let u = config.users.get(user)?;
    Credentials::new(
        u.name.as_bytes(),
        u.password.as_bytes(),
        config.kg.as_deref(),
    )
    .ok()
}

/// RAKP 1 → RAKP 2.
pub(crate) fn rakp1(
    inner: &mut Inner,
    config: &Config,
    payload: &[u8],
    now: Instant,
) -> Option<Vec<u8>> {
    let Ok(r1) = Rakp1::decode(payload) else {
        inner.counters.dropped.malformed += 1;
        return None;
    };
    let guid = inner.guid;
    let impostor = inner.faults.impostor;
    let Some(session) = inner.sessions.get_mut(r1.bmc_session_id) else {
        return rakp2_refusal(inner, r1.tag, status::INVALID_SESSION_ID, 0);
    };
    let console_id = session.console_id;
    let fingerprint = (r1.username.clone(), r1.console_random, r1.role);
    match &session.phase {
        Phase::Opened => {}
        Phase::Rakp2Sent(sent) if sent.rakp1 == fingerprint => {
            session.last_activity = now;
            return plain(PayloadType::Rakp2, &sent.rakp2.clone());
        }
        Phase::Rakp2Sent(_) => {}
        Phase::Active(_) => {
            return rakp2_refusal(inner, r1.tag, status::INVALID_SESSION_ID, console_id);
        }
    }
    let requested = match Privilege::from_u8(r1.role & 0x0F) {
        Ok(p) if session.requested == 0 || p as u8 <= session.requested => Ok(p),
        Ok(_) => Err(status::UNAUTHORIZED_ROLE),
        Err(_) => Err(status::INVALID_ROLE),
    };
    let suite = session.suite;
    let found = requested.and_then(|p| lookup(config, &r1, p).map(|i| (i, p)));
    let (user, max_privilege) = match found {
        Ok(found) => found,
        Err(status) => {
            inner.sessions.remove(r1.bmc_session_id);
            return rakp2_refusal(inner, r1.tag, status, console_id);
        }
    };
    let ctx = RakpContext {
        suite,
        console_session_id: console_id,
        bmc_session_id: r1.bmc_session_id,
        console_random: r1.console_random,
        bmc_random: random::<16>()?,
        bmc_guid: guid,
        role: r1.role,
    };
    let mut auth_code = ctx.rakp2_auth_code(&credentials(config, user)?);
    if impostor {
        auth_code.iter_mut().for_each(|b| *b ^= 0x5A);
    }
    let r2 = Rakp2 {
        tag: r1.tag,
        status: STATUS_OK,
        console_session_id: console_id,
        accepted: Some(Rakp2Accepted {
            bmc_random: ctx.bmc_random,
            bmc_guid: guid,
            auth_code,
        }),
    };
    let body = r2.encode(suite).ok()?;
    session.phase = Phase::Rakp2Sent(Box::new(Rakp2Sent {
        ctx,
        user,
        max_privilege,
        rakp1: fingerprint,
        rakp2: body.clone(),
    }));
    session.last_activity = now;
    plain(PayloadType::Rakp2, &body)
}

fn rakp4_refusal(inner: &mut Inner, tag: u8, status: u8, console_id: u32) -> Option<Vec<u8>> {
    inner.counters.handshakes_refused += 1;
    let r4 = Rakp4 {
        tag,
        status,
        console_session_id: console_id,
        icv: Vec::new(),
    };
    plain(PayloadType::Rakp4, &r4.encode(CipherSuite::Suite3).ok()?)
}

/// RAKP 3 → RAKP 4; a verified RAKP 3 establishes the session.
pub(crate) fn rakp3(
    inner: &mut Inner,
    config: &Config,
    payload: &[u8],
    now: Instant,
) -> Option<Vec<u8>> {
    let (Some(&tag), Some(bmc_id)) = (payload.first(), u32_at(payload, 4)) else {
        inner.counters.dropped.malformed += 1;
        return None;
    };
    let Some(session) = inner.sessions.get_mut(bmc_id) else {
        return rakp4_refusal(inner, tag, status::INVALID_SESSION_ID, 0);
    };
    let (console_id, suite) = (session.console_id, session.suite);
    let Ok(r3) = Rakp3::decode(payload, suite) else {
        inner.counters.dropped.malformed += 1;
        return None;
    };
    let sent = match &session.phase {
        Phase::Rakp2Sent(sent) => sent,
        Phase::Active(a) if r3.status == STATUS_OK && a.rakp3_code == r3.auth_code => {
            return plain(PayloadType::Rakp4, &a.rakp4.clone());
        }
        Phase::Opened | Phase::Active(_) => {
            return rakp4_refusal(inner, tag, status::INVALID_SESSION_ID, console_id);
        }
    };
    if r3.status != STATUS_OK {
        // The console refused our RAKP 2 (wrong password, impostor): it gives up.
        inner.sessions.remove(bmc_id);
        return None;
    }
    let creds = credentials(config, sent.user)?;
    if sent.ctx.verify_rakp3(&creds, &r3.auth_code).is_err() {
        inner.sessions.remove(bmc_id);
        return rakp4_refusal(
            inner,
            tag,
            status::INVALID_INTEGRITY_CHECK_VALUE,
            console_id,
        );
    }
    let keys = sent.ctx.session_keys(&creds);
    let r4 = Rakp4 {
        tag,
        status: STATUS_OK,
        console_session_id: console_id,
        icv: sent.ctx.rakp4_icv(&keys),
    };
    let body = r4.encode(suite).ok()?;
    let max_privilege = sent.max_privilege;
    let username = config
        .users
        .get(sent.user)
        .map(|u| u.name.clone())
        .unwrap_or_default();
    session.phase = Phase::Active(Box::new(Active {
        keys,
        inbound: seq::Inbound::default(),
        outbound: seq::Outbound::default(),
        // Sessions start at USER (or lower, if that is all that was negotiated).
        privilege: max_privilege.min(Privilege::User),
        max_privilege,
        username: username.clone(),
        rakp3_code: r3.auth_code,
        rakp4: body.clone(),
    }));
    session.last_activity = now;
    inner.counters.sessions_opened += 1;
    inner.session_log.push(SessionRecord {
        bmc_session_id: bmc_id,
        console_session_id: console_id,
        username,
        suite,
        max_privilege,
        established: now,
        ended: None,
    });
    tracing::debug!(bmc = %config.name, session = format_args!("{bmc_id:08x}"), suite = suite.id(), "session established");
    plain(PayloadType::Rakp4, &body)
}
