//! RMCP header and IPMI session framing (v1.5 for pre-session commands, v2.0 / RMCP+).
//!
//! This module only frames bytes; integrity and confidentiality live in
//! [`crate::session`], which builds on [`V2Header`] and [`split`].

use crate::wire::Reader;
use crate::{Error, Result};

/// RMCP header: version 1.0, reserved, sequence 0xFF (no RMCP ACK), class IPMI.
pub const RMCP_HEADER: [u8; 4] = [0x06, 0x00, 0xFF, 0x07];
/// Session authentication type "none" (IPMI v1.5 framing, pre-session).
pub const AUTH_TYPE_NONE: u8 = 0x00;
/// Session authentication type "RMCP+" (IPMI v2.0 framing).
pub const AUTH_TYPE_RMCP_PLUS: u8 = 0x06;
/// Length of the v2.0 session header, from the auth type byte to the payload length.
pub const V2_HEADER_LEN: usize = 12;

const ENCRYPTED_BIT: u8 = 0x80;
const AUTHENTICATED_BIT: u8 = 0x40;

/// RMCP+ payload types this crate handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum PayloadType {
    /// An IPMI message ([`crate::message::IpmiMessage`]).
    IpmiMessage = 0x00,
    /// RMCP+ Open Session Request.
    OpenSessionRequest = 0x10,
    /// RMCP+ Open Session Response.
    OpenSessionResponse = 0x11,
    /// RAKP message 1.
    Rakp1 = 0x12,
    /// RAKP message 2.
    Rakp2 = 0x13,
    /// RAKP message 3.
    Rakp3 = 0x14,
    /// RAKP message 4.
    Rakp4 = 0x15,
}

impl TryFrom<u8> for PayloadType {
    type Error = Error;
    fn try_from(v: u8) -> Result<Self> {
        Ok(match v {
            0x00 => Self::IpmiMessage,
            0x10 => Self::OpenSessionRequest,
            0x11 => Self::OpenSessionResponse,
            0x12 => Self::Rakp1,
            0x13 => Self::Rakp2,
            0x14 => Self::Rakp3,
            0x15 => Self::Rakp4,
            other => return Err(Error::UnsupportedPayloadType(other)),
        })
    }
}

/// IPMI v2.0 (RMCP+) session header, without the payload length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct V2Header {
    /// What the payload is.
    pub payload_type: PayloadType,
    /// Payload is encrypted (confidentiality).
    pub encrypted: bool,
    /// Packet carries an integrity trailer.
    pub authenticated: bool,
    /// Session id of the receiver (0 outside a session).
    pub session_id: u32,
    /// Session sequence number (0 outside a session).
    pub session_seq: u32,
}

impl V2Header {
    /// An unauthenticated, unencrypted header with session id and sequence 0, as used
    /// for Open Session and RAKP messages.
    pub fn pre_session(payload_type: PayloadType) -> Self {
        Self {
            payload_type,
            encrypted: false,
            authenticated: false,
            session_id: 0,
            session_seq: 0,
        }
    }

    fn type_byte(&self) -> u8 {
        let mut b = self.payload_type as u8;
        if self.encrypted {
            b |= ENCRYPTED_BIT;
        }
        if self.authenticated {
            b |= AUTHENTICATED_BIT;
        }
        b
    }

    /// Appends the RMCP header and this session header (with `payload_len`) to `out`.
    pub fn encode_prefix(&self, payload_len: usize, out: &mut Vec<u8>) -> Result<()> {
        let len = u16::try_from(payload_len).map_err(|_| Error::BadLength {
            what: "RMCP+ payload",
            len: payload_len,
        })?;
        out.extend_from_slice(&RMCP_HEADER);
        out.push(AUTH_TYPE_RMCP_PLUS);
        out.push(self.type_byte());
        out.extend_from_slice(&self.session_id.to_le_bytes());
        out.extend_from_slice(&self.session_seq.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        Ok(())
    }
}

/// Encodes an IPMI v2.0 packet with no integrity trailer. Errors if the header says
/// `authenticated` (use [`crate::session::seal`]).
pub fn encode_v2_plain(header: &V2Header, payload: &[u8]) -> Result<Vec<u8>> {
    if header.authenticated || header.encrypted {
        return Err(Error::FieldOutOfRange {
            what: "plain RMCP+ header flags",
            value: u32::from(header.type_byte()),
        });
    }
    let mut out = Vec::with_capacity(4 + V2_HEADER_LEN + payload.len());
    header.encode_prefix(payload.len(), &mut out)?;
    out.extend_from_slice(payload);
    Ok(out)
}

/// Encodes an IPMI v1.5 packet with authentication type none, as used for
/// Get Channel Authentication Capabilities before a session exists.
pub fn encode_v15(session_seq: u32, session_id: u32, message: &[u8]) -> Result<Vec<u8>> {
    let len = u8::try_from(message.len()).map_err(|_| Error::BadLength {
        what: "IPMI v1.5 message",
        len: message.len(),
    })?;
    let mut out = Vec::with_capacity(4 + 10 + message.len());
    out.extend_from_slice(&RMCP_HEADER);
    out.push(AUTH_TYPE_NONE);
    out.extend_from_slice(&session_seq.to_le_bytes());
    out.extend_from_slice(&session_id.to_le_bytes());
    out.push(len);
    out.extend_from_slice(message);
    Ok(out)
}

/// A decoded RMCP packet, borrowing from the datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet<'a> {
    /// IPMI v1.5 packet with authentication type none.
    V15 {
        /// Session sequence number.
        session_seq: u32,
        /// Session id.
        session_id: u32,
        /// The IPMI message bytes.
        message: &'a [u8],
    },
    /// IPMI v2.0 (RMCP+) packet.
    V2 {
        /// Session header.
        header: V2Header,
        /// Payload bytes (still encrypted if `header.encrypted`).
        payload: &'a [u8],
        /// Integrity trailer (pad, pad length, next header, AuthCode); empty unless
        /// `header.authenticated`.
        trailer: &'a [u8],
        /// Everything after the RMCP header (auth type byte to the end): an AuthCode
        /// covers this minus the AuthCode itself.
        session_bytes: &'a [u8],
    },
}

/// Splits a UDP datagram into RMCP / session framing. Rejects anything that is not
/// RMCP class IPMI with auth type none (v1.5) or RMCP+ (v2.0); v2.0 OEM payloads are
/// not supported.
pub fn split(datagram: &[u8]) -> Result<Packet<'_>> {
    let mut r = Reader::new(datagram, "RMCP packet");
    let rmcp: [u8; 4] = r.array()?;
    if rmcp != RMCP_HEADER {
        return Err(Error::BadRmcpHeader(rmcp));
    }
    let session_start = 4;
    match r.u8()? {
        AUTH_TYPE_NONE => {
            let session_seq = r.u32_le()?;
            let session_id = r.u32_le()?;
            let len = usize::from(r.u8()?);
            let message = r.take(len)?;
            r.finish()?;
            Ok(Packet::V15 {
                session_seq,
                session_id,
                message,
            })
        }
        AUTH_TYPE_RMCP_PLUS => {
            let type_byte = r.u8()?;
            let payload_type = PayloadType::try_from(type_byte & 0x3F)?;
            let header = V2Header {
                payload_type,
                encrypted: type_byte & ENCRYPTED_BIT != 0,
                authenticated: type_byte & AUTHENTICATED_BIT != 0,
                session_id: r.u32_le()?,
                session_seq: r.u32_le()?,
            };
            let len = usize::from(r.u16_le()?);
            let payload = r.take(len)?;
            let trailer = r.rest();
            if !header.authenticated && !trailer.is_empty() {
                return Err(Error::TrailingBytes {
                    what: "unauthenticated RMCP+ packet",
                    extra: trailer.len(),
                });
            }
            let session_bytes = datagram.get(session_start..).unwrap_or_default();
            Ok(Packet::V2 {
                header,
                payload,
                trailer,
                session_bytes,
            })
        }
        other => Err(Error::UnsupportedAuthType(other)),
    }
}
