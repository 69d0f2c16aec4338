//! Authenticated and encrypted RMCP+ session packets for an established session.
//!
//! Layout after the RMCP header: session header (12 bytes) ‖ payload ‖ integrity pad
//! (0xFF bytes, so that everything from the auth type byte through the next header is
//! a multiple of 4) ‖ pad length ‖ next header (0x07) ‖ AuthCode. The AuthCode is
//! HMAC_K1 over the auth type byte through the next header byte. With cipher suites 3
//! and 17 every session packet is both encrypted and authenticated.

use crate::crypto::SessionKeys;
use crate::rmcp::{self, Packet, PayloadType, V2_HEADER_LEN, V2Header};
use crate::{Error, Result, cipher};

/// Next header value in the integrity trailer.
pub const NEXT_HEADER: u8 = 0x07;
/// Integrity pad byte.
pub const INTEGRITY_PAD: u8 = 0xFF;
const RMCP_LEN: usize = rmcp::RMCP_HEADER.len();

/// A verified, decrypted session packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    /// Payload type.
    pub payload_type: PayloadType,
    /// Session id in the header (the receiver's id).
    pub session_id: u32,
    /// Session sequence number.
    pub session_seq: u32,
    /// Decrypted payload.
    pub payload: Vec<u8>,
}

/// Builds an encrypted, authenticated packet. `session_id` is the receiver's session
/// id; `iv` must be fresh random bytes from the caller.
pub fn seal(
    keys: &SessionKeys,
    payload_type: PayloadType,
    session_id: u32,
    session_seq: u32,
    payload: &[u8],
    iv: [u8; cipher::BLOCK],
) -> Result<Vec<u8>> {
    let encrypted = cipher::encrypt(keys.k2(), iv, payload)?;
    let header = V2Header {
        payload_type,
        encrypted: true,
        authenticated: true,
        session_id,
        session_seq,
    };
    let mut out = Vec::with_capacity(RMCP_LEN + V2_HEADER_LEN + encrypted.len() + 24);
    header.encode_prefix(encrypted.len(), &mut out)?;
    out.extend_from_slice(&encrypted);
    let pad = (4 - (V2_HEADER_LEN + encrypted.len() + 2) % 4) % 4;
    out.extend(std::iter::repeat_n(INTEGRITY_PAD, pad));
    // pad < 4.
    out.push(pad as u8);
    out.push(NEXT_HEADER);
    let code = keys.auth_code(out.get(RMCP_LEN..).unwrap_or_default());
    out.extend_from_slice(&code);
    Ok(out)
}

/// Verifies and decrypts a session packet. Rejects packets that are not both
/// authenticated and encrypted, whose AuthCode does not verify, or whose pads are
/// malformed. Sequence-number and session-id checks are the caller's (they depend on
/// session state).
pub fn open(keys: &SessionKeys, datagram: &[u8]) -> Result<Opened> {
    let Packet::V2 {
        header,
        payload,
        trailer,
        session_bytes,
    } = rmcp::split(datagram)?
    else {
        return Err(Error::NotProtected("an RMCP+ packet"));
    };
    if !header.authenticated {
        return Err(Error::NotProtected("authenticated"));
    }
    if !header.encrypted {
        return Err(Error::NotProtected("encrypted"));
    }
    let code_len = keys.suite().integrity_len();
    // trailer = pad (0..=3) ‖ pad length ‖ next header ‖ AuthCode
    if trailer.len() < code_len + 2 {
        return Err(Error::Truncated {
            what: "integrity trailer",
            need: code_len + 2,
            got: trailer.len(),
        });
    }
    let covered_len = session_bytes.len() - code_len;
    let (covered, code) = session_bytes.split_at(covered_len);
    keys.verify_auth_code(covered, code)?;
    let pad_and_fields = trailer.len() - code_len; // ≥ 2
    let pad = pad_and_fields - 2;
    let pad_len_byte = trailer.get(pad).copied().unwrap_or_default();
    let next = trailer.get(pad + 1).copied().unwrap_or_default();
    if usize::from(pad_len_byte) != pad
        || pad > 3
        || covered.len() % 4 != 0
        || next != NEXT_HEADER
        || trailer
            .get(..pad)
            .is_none_or(|p| p.iter().any(|&b| b != INTEGRITY_PAD))
    {
        return Err(Error::BadPad("integrity"));
    }
    let plain = cipher::decrypt(keys.k2(), payload)?;
    Ok(Opened {
        payload_type: header.payload_type,
        session_id: header.session_id,
        session_seq: header.session_seq,
        payload: plain,
    })
}
