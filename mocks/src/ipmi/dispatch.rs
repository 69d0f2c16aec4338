//! One datagram in, at most one datagram out: RMCP/ASF Presence Ping, IPMI messages
//! outside a session (v1.5 or v2.0 framing, answered in the framing they came in),
//! the RMCP+ handshake, and authenticated + encrypted session packets.
//!
//! A session packet must name an established session, carry a valid AuthCode and a
//! sequence number inside the window (checked in that order, so a forged packet
//! cannot move the window); anything else is dropped silently and counted, as real
//! BMCs do. Faults on incoming datagrams apply before anything else, faults on
//! replies after the reply is built (so the command has run).

use std::net::SocketAddr;

use nodefence_ipmi_proto::Error as ProtoError;
use nodefence_ipmi_proto::message::IpmiMessage;
use nodefence_ipmi_proto::rmcp::{self, Packet, PayloadType, V2Header};
use nodefence_ipmi_proto::session;
use tokio::time::Instant;

use super::commands::{self, Caller, Effect};
use super::faults::Garble;
use super::handshake;
use super::sessions::{Phase, random};
use super::state::{Config, Inner, SessionEnd, Shared};

/// RMCP header of an ASF message (class 6), and the ASF IANA number (4542).
const ASF_RMCP: [u8; 4] = [0x06, 0x00, 0xFF, 0x06];
const ASF_IANA: [u8; 4] = [0x00, 0x00, 0x11, 0xBE];
const ASF_PING: u8 = 0x80;
const ASF_PONG: u8 = 0x40;

/// A reply to send.
#[derive(Debug)]
pub(crate) struct Outgoing {
    pub(crate) bytes: Vec<u8>,
    /// Whether it answers an in-session request (the only replies garbling touches).
    in_session: bool,
    /// The (net_fn, cmd) of the request, for replies to IPMI messages.
    command: Option<(u8, u8)>,
}

impl Outgoing {
    fn plain(bytes: Vec<u8>) -> Self {
        Self {
            bytes,
            in_session: false,
            command: None,
        }
    }
}

impl Shared {
    /// Processes one datagram; returns the reply to send, if any.
    pub(crate) fn handle(
        &self,
        datagram: &[u8],
        peer: SocketAddr,
        now: Instant,
    ) -> Option<Vec<u8>> {
        let mut inner = self.lock();
        if inner.faults.take_incoming_drop() {
            inner.counters.dropped.injected += 1;
            return None;
        }
        inner.expire_idle(&self.config, now);
        let mut out = route(&mut inner, &self.config, datagram, peer, now)?;
        if inner.faults.take_reply_drop(out.command) {
            inner.counters.replies_dropped += 1;
            return None;
        }
        if out.in_session {
            match inner.faults.garble {
                Some(Garble::RandomBytes) => {
                    out.bytes
                        .iter_mut()
                        .for_each(|b| *b = random::<1>().map_or(0, |r| r[0]));
                }
                Some(Garble::Truncated) => out.bytes.truncate(out.bytes.len() / 2),
                Some(Garble::BadAuthCode) => {
                    if let Some(last) = out.bytes.last_mut() {
                        *last ^= 0xFF;
                    }
                }
                None => {}
            }
        }
        Some(out.bytes)
    }
}

fn route(
    inner: &mut Inner,
    config: &Config,
    datagram: &[u8],
    peer: SocketAddr,
    now: Instant,
) -> Option<Outgoing> {
    if datagram.starts_with(&ASF_RMCP) {
        return pong(inner, datagram).map(Outgoing::plain);
    }
    let packet = match rmcp::split(datagram) {
        Ok(p) => p,
        Err(_) => {
            inner.counters.dropped.malformed += 1;
            return None;
        }
    };
    let reply = match packet {
        Packet::V15 {
            session_id: 0,
            message,
            ..
        } => {
            let (resp, command) = outside_session(inner, config, message, now)?;
            let bytes = rmcp::encode_v15(0, 0, &resp).ok()?;
            return Some(Outgoing {
                command: Some(command),
                ..Outgoing::plain(bytes)
            });
        }
        Packet::V15 { .. } => {
            // IPMI v1.5 sessions are not offered.
            inner.counters.dropped.unknown_session += 1;
            None
        }
        Packet::V2 {
            header, payload, ..
        } => match header.payload_type {
            PayloadType::IpmiMessage
                if header.session_id == 0 && !header.authenticated && !header.encrypted =>
            {
                let (resp, command) = outside_session(inner, config, payload, now)?;
                let header = V2Header::pre_session(PayloadType::IpmiMessage);
                let bytes = rmcp::encode_v2_plain(&header, &resp).ok()?;
                return Some(Outgoing {
                    command: Some(command),
                    ..Outgoing::plain(bytes)
                });
            }
            PayloadType::IpmiMessage => return in_session(inner, config, datagram, header, now),
            PayloadType::OpenSessionRequest => {
                handshake::open_session(inner, config, payload, peer, now)
            }
            PayloadType::Rakp1 => handshake::rakp1(inner, config, payload, now),
            PayloadType::Rakp3 => handshake::rakp3(inner, config, payload, now),
            PayloadType::OpenSessionResponse | PayloadType::Rakp2 | PayloadType::Rakp4 => {
                inner.counters.dropped.malformed += 1;
                None
            }
        },
    };
    reply.map(Outgoing::plain)
}

/// ASF Presence Ping → Presence Pong announcing IPMI support.
fn pong(inner: &mut Inner, datagram: &[u8]) -> Option<Vec<u8>> {
    let ping = datagram.get(4..12);
    let Some([i0, i1, i2, i3, ASF_PING, tag, _, _]) = ping else {
        inner.counters.dropped.malformed += 1;
        return None;
    };
    if [*i0, *i1, *i2, *i3] != ASF_IANA {
        inner.counters.dropped.malformed += 1;
        return None;
    }
    let mut out = Vec::with_capacity(28);
    out.extend_from_slice(&ASF_RMCP);
    out.extend_from_slice(&ASF_IANA);
    out.extend_from_slice(&[ASF_PONG, *tag, 0x00, 0x10]);
    out.extend_from_slice(&ASF_IANA);
    out.extend_from_slice(&[0; 4]); // OEM-defined
    out.extend_from_slice(&[0x81, 0x00]); // IPMI supported, ASF 1.0; no interactions
    out.extend_from_slice(&[0; 6]);
    Some(out)
}

/// Decodes a request message; `None` (counted) if it is not one.
fn request(inner: &mut Inner, bytes: &[u8]) -> Option<IpmiMessage> {
    match IpmiMessage::decode(bytes) {
        Ok(m) if m.net_fn & 1 == 0 => Some(m),
        _ => {
            inner.counters.dropped.malformed += 1;
            None
        }
    }
}

/// An IPMI request outside a session: returns the encoded response message and the
/// request's (net_fn, cmd).
fn outside_session(
    inner: &mut Inner,
    config: &Config,
    bytes: &[u8],
    now: Instant,
) -> Option<(Vec<u8>, (u8, u8))> {
    let req = request(inner, bytes)?;
    let answer = commands::execute(inner, config, &req, None, now);
    Some((answer.response?.encode().ok()?, (req.net_fn, req.cmd)))
}

/// An authenticated, encrypted session packet.
fn in_session(
    inner: &mut Inner,
    config: &Config,
    datagram: &[u8],
    header: V2Header,
    now: Instant,
) -> Option<Outgoing> {
    let id = header.session_id;
    let Some(session) = inner.sessions.get_mut(id) else {
        inner.counters.dropped.unknown_session += 1;
        return None;
    };
    let Phase::Active(active) = &mut session.phase else {
        inner.counters.dropped.unknown_session += 1;
        return None;
    };
    let opened = match session::open(&active.keys, datagram) {
        Ok(o) => o,
        Err(ProtoError::BadAuthCode) => {
            inner.counters.dropped.bad_auth_code += 1;
            return None;
        }
        Err(_) => {
            inner.counters.dropped.malformed += 1;
            return None;
        }
    };
    if active.inbound.accept(opened.session_seq).is_err() {
        inner.counters.dropped.out_of_sequence += 1;
        return None;
    }
    session.last_activity = now;
    let caller = Caller {
        session_id: id,
        privilege: active.privilege,
        max_privilege: active.max_privilege,
        username: active.username.clone(),
    };
    let req = request(inner, &opened.payload)?;
    let answer = commands::execute(inner, config, &req, Some(&caller), now);
    let response = answer.response?.encode().ok()?;
    let session = inner.sessions.get_mut(id)?;
    let console_id = session.console_id;
    let Phase::Active(active) = &mut session.phase else {
        return None;
    };
    if let Effect::SetPrivilege(p) = answer.effect {
        active.privilege = p;
    }
    let seq = active.outbound.next_seq();
    let bytes = session::seal(
        &active.keys,
        PayloadType::IpmiMessage,
        console_id,
        seq,
        &response,
        random::<16>()?,
    )
    .ok()?;
    if let Effect::Close(closed) = answer.effect
        && inner.sessions.remove(closed).is_some()
    {
        inner.end_session(closed, SessionEnd::Closed, now);
    }
    Some(Outgoing {
        bytes,
        in_session: true,
        command: Some((req.net_fn, req.cmd)),
    })
}
