//! RMCP+ Open Session Request/Response and RAKP messages 1–4: payload bodies, each with
//! `encode` and `decode` so both the console and the BMC side can use them.
//!
//! Responses with a non-zero status code may be cut short after the first 8 bytes
//! (the spec allows it and BMCs do it); they decode with the optional fields absent.

use crate::crypto::{Algorithms, CipherSuite, MAX_USERNAME_LEN};
use crate::wire::Reader;
use crate::{Error, Result};

/// RMCP+ / RAKP status code "no errors".
pub const STATUS_OK: u8 = 0x00;
/// Status "unauthorized name".
pub const STATUS_UNAUTHORIZED_NAME: u8 = 0x0D;
/// Status "invalid integrity check value".
pub const STATUS_INVALID_INTEGRITY_CHECK: u8 = 0x0F;
/// Status "invalid session id".
pub const STATUS_INVALID_SESSION_ID: u8 = 0x02;

fn encode_algorithm(out: &mut Vec<u8>, payload_type: u8, alg: u8) {
    out.extend_from_slice(&[payload_type, 0, 0, 8, alg, 0, 0, 0]);
}

fn decode_algorithm(r: &mut Reader<'_>, payload_type: u8, what: &'static str) -> Result<u8> {
    let b: [u8; 8] = r.array()?;
    if b[0] != payload_type || b[3] != 8 {
        return Err(Error::BadAlgorithm { what });
    }
    Ok(b[4] & 0x3F)
}

fn encode_algorithms(out: &mut Vec<u8>, a: Algorithms) {
    encode_algorithm(out, 0x00, a.auth);
    encode_algorithm(out, 0x01, a.integrity);
    encode_algorithm(out, 0x02, a.confidentiality);
}

fn decode_algorithms(r: &mut Reader<'_>) -> Result<Algorithms> {
    Ok(Algorithms {
        auth: decode_algorithm(r, 0x00, "authentication")?,
        integrity: decode_algorithm(r, 0x01, "integrity")?,
        confidentiality: decode_algorithm(r, 0x02, "confidentiality")?,
    })
}

/// Open Session Request (console → BMC), 32 bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenSessionRequest {
    /// Message tag, echoed in the response.
    pub tag: u8,
    /// Requested maximum privilege (0 = highest the user may have).
    pub max_privilege: u8,
    /// SIDm: the console's session id for this session.
    pub console_session_id: u32,
    /// Proposed algorithms (one proposal; see [`CipherSuite::algorithms`]).
    pub algorithms: Algorithms,
}

impl OpenSessionRequest {
    /// Encodes the payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32);
        out.extend_from_slice(&[self.tag, self.max_privilege, 0, 0]);
        out.extend_from_slice(&self.console_session_id.to_le_bytes());
        encode_algorithms(&mut out, self.algorithms);
        out
    }

    /// Decodes the payload. "BMC chooses" (empty) algorithm proposals are not supported.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::new(bytes, "Open Session Request");
        let tag = r.u8()?;
        let max_privilege = r.u8()? & 0x0F;
        r.take(2)?;
        let console_session_id = r.u32_le()?;
        let algorithms = decode_algorithms(&mut r)?;
        r.finish()?;
        Ok(Self {
            tag,
            max_privilege,
            console_session_id,
            algorithms,
        })
    }
}

/// What an accepting Open Session Response carries beyond its first 8 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenSessionAccepted {
    /// SIDc: the BMC's session id.
    pub bmc_session_id: u32,
    /// Accepted algorithms.
    pub algorithms: Algorithms,
}

/// Open Session Response (BMC → console): 36 bytes, or 8 on error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenSessionResponse {
    /// Echoed message tag.
    pub tag: u8,
    /// Status code ([`STATUS_OK`] on success).
    pub status: u8,
    /// Maximum privilege granted.
    pub max_privilege: u8,
    /// SIDm echoed.
    pub console_session_id: u32,
    /// Present if and only if `status` is [`STATUS_OK`].
    pub accepted: Option<OpenSessionAccepted>,
}

impl OpenSessionResponse {
    /// Encodes the payload (8 bytes when `accepted` is `None`).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(36);
        out.extend_from_slice(&[self.tag, self.status, self.max_privilege, 0]);
        out.extend_from_slice(&self.console_session_id.to_le_bytes());
        if let Some(a) = self.accepted {
            out.extend_from_slice(&a.bmc_session_id.to_le_bytes());
            encode_algorithms(&mut out, a.algorithms);
        }
        out
    }

    /// Decodes the payload.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::new(bytes, "Open Session Response");
        let tag = r.u8()?;
        let status = r.u8()?;
        let max_privilege = r.u8()? & 0x0F;
        r.take(1)?;
        let console_session_id = r.u32_le()?;
        let accepted = if status == STATUS_OK {
            let bmc_session_id = r.u32_le()?;
            let algorithms = decode_algorithms(&mut r)?;
            r.finish()?;
            Some(OpenSessionAccepted {
                bmc_session_id,
                algorithms,
            })
        } else {
            None
        };
        Ok(Self {
            tag,
            status,
            max_privilege,
            console_session_id,
            accepted,
        })
    }
}

/// RAKP message 1 (console → BMC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rakp1 {
    /// Message tag.
    pub tag: u8,
    /// SIDc: the BMC's session id.
    pub bmc_session_id: u32,
    /// Rm: console random number.
    pub console_random: [u8; 16],
    /// RoleM: requested maximum privilege (low 4 bits) and name-only lookup (bit 4).
    pub role: u8,
    /// User name, at most 16 bytes.
    pub username: Vec<u8>,
}

impl Rakp1 {
    /// Encodes the payload; errors if the user name is longer than 16 bytes.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let ulen = u8::try_from(self.username.len())
            .ok()
            .filter(|&l| usize::from(l) <= MAX_USERNAME_LEN)
            .ok_or(Error::UsernameTooLong(self.username.len()))?;
        let mut out = Vec::with_capacity(28 + self.username.len());
        out.extend_from_slice(&[self.tag, 0, 0, 0]);
        out.extend_from_slice(&self.bmc_session_id.to_le_bytes());
        out.extend_from_slice(&self.console_random);
        out.extend_from_slice(&[self.role, 0, 0, ulen]);
        out.extend_from_slice(&self.username);
        Ok(out)
    }

    /// Decodes the payload.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::new(bytes, "RAKP 1");
        let tag = r.u8()?;
        r.take(3)?;
        let bmc_session_id = r.u32_le()?;
        let console_random = r.array()?;
        let role = r.u8()?;
        r.take(2)?;
        let ulen = usize::from(r.u8()?);
        if ulen > MAX_USERNAME_LEN {
            return Err(Error::UsernameTooLong(ulen));
        }
        let username = r.take(ulen)?.to_vec();
        r.finish()?;
        Ok(Self {
            tag,
            bmc_session_id,
            console_random,
            role,
            username,
        })
    }
}

/// Fields of a successful RAKP 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rakp2Accepted {
    /// Rc: BMC random number.
    pub bmc_random: [u8; 16],
    /// GUIDc: BMC GUID.
    pub bmc_guid: [u8; 16],
    /// Key exchange auth code (20 bytes suite 3, 32 bytes suite 17).
    pub auth_code: Vec<u8>,
}

/// RAKP message 2 (BMC → console).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rakp2 {
    /// Echoed message tag.
    pub tag: u8,
    /// Status code.
    pub status: u8,
    /// SIDm: the console's session id.
    pub console_session_id: u32,
    /// Present if and only if `status` is [`STATUS_OK`].
    pub accepted: Option<Rakp2Accepted>,
}

fn status_header(out: &mut Vec<u8>, tag: u8, status: u8, sid: u32) {
    out.extend_from_slice(&[tag, status, 0, 0]);
    out.extend_from_slice(&sid.to_le_bytes());
}

fn decode_status_header(r: &mut Reader<'_>) -> Result<(u8, u8, u32)> {
    let tag = r.u8()?;
    let status = r.u8()?;
    r.take(2)?;
    Ok((tag, status, r.u32_le()?))
}

fn check_len(what: &'static str, got: usize, want: usize) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(Error::BadLength { what, len: got })
    }
}

impl Rakp2 {
    /// Encodes the payload; errors if the auth code length does not fit `suite`.
    pub fn encode(&self, suite: CipherSuite) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(40 + suite.rakp_auth_len());
        status_header(&mut out, self.tag, self.status, self.console_session_id);
        if let Some(a) = &self.accepted {
            check_len("RAKP 2 auth code", a.auth_code.len(), suite.rakp_auth_len())?;
            out.extend_from_slice(&a.bmc_random);
            out.extend_from_slice(&a.bmc_guid);
            out.extend_from_slice(&a.auth_code);
        }
        Ok(out)
    }

    /// Decodes the payload for the negotiated `suite`.
    pub fn decode(bytes: &[u8], suite: CipherSuite) -> Result<Self> {
        let mut r = Reader::new(bytes, "RAKP 2");
        let (tag, status, console_session_id) = decode_status_header(&mut r)?;
        let accepted = if status == STATUS_OK {
            let bmc_random = r.array()?;
            let bmc_guid = r.array()?;
            let auth_code = r.take(suite.rakp_auth_len())?.to_vec();
            r.finish()?;
            Some(Rakp2Accepted {
                bmc_random,
                bmc_guid,
                auth_code,
            })
        } else {
            None
        };
        Ok(Self {
            tag,
            status,
            console_session_id,
            accepted,
        })
    }
}

/// RAKP message 3 (console → BMC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rakp3 {
    /// Message tag.
    pub tag: u8,
    /// Status code (non-zero tells the BMC RAKP 2 failed; then no auth code).
    pub status: u8,
    /// SIDc: the BMC's session id.
    pub bmc_session_id: u32,
    /// Auth code (20 bytes suite 3, 32 bytes suite 17); empty when `status` is not OK.
    pub auth_code: Vec<u8>,
}

impl Rakp3 {
    /// Encodes the payload.
    pub fn encode(&self, suite: CipherSuite) -> Result<Vec<u8>> {
        encode_status_and_code(
            "RAKP 3 auth code",
            (self.tag, self.status, self.bmc_session_id),
            &self.auth_code,
            suite.rakp_auth_len(),
        )
    }

    /// Decodes the payload for the negotiated `suite`.
    pub fn decode(bytes: &[u8], suite: CipherSuite) -> Result<Self> {
        let (tag, status, bmc_session_id, auth_code) =
            decode_status_and_code(bytes, "RAKP 3", suite.rakp_auth_len())?;
        Ok(Self {
            tag,
            status,
            bmc_session_id,
            auth_code,
        })
    }
}

/// RAKP message 4 (BMC → console).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rakp4 {
    /// Echoed message tag.
    pub tag: u8,
    /// Status code.
    pub status: u8,
    /// SIDm: the console's session id.
    pub console_session_id: u32,
    /// Integrity check value (12 bytes suite 3, 16 bytes suite 17); empty on error.
    pub icv: Vec<u8>,
}

impl Rakp4 {
    /// Encodes the payload.
    pub fn encode(&self, suite: CipherSuite) -> Result<Vec<u8>> {
        encode_status_and_code(
            "RAKP 4 integrity check value",
            (self.tag, self.status, self.console_session_id),
            &self.icv,
            suite.rakp4_icv_len(),
        )
    }

    /// Decodes the payload for the negotiated `suite`.
    pub fn decode(bytes: &[u8], suite: CipherSuite) -> Result<Self> {
        let (tag, status, console_session_id, icv) =
            decode_status_and_code(bytes, "RAKP 4", suite.rakp4_icv_len())?;
        Ok(Self {
            tag,
            status,
            console_session_id,
            icv,
        })
    }
}

/// RAKP 3 and 4: tag, status, a session id, then (only when the status is OK) a code
/// of the suite's length.
fn encode_status_and_code(
    what: &'static str,
    (tag, status, session_id): (u8, u8, u32),
    code: &[u8],
    len: usize,
) -> Result<Vec<u8>> {
    let want = if status == STATUS_OK { len } else { 0 };
    check_len(what, code.len(), want)?;
    let mut out = Vec::with_capacity(8 + want);
    status_header(&mut out, tag, status, session_id);
    out.extend_from_slice(code);
    Ok(out)
}

/// The decoding counterpart of [`encode_status_and_code`].
fn decode_status_and_code(
    bytes: &[u8],
    what: &'static str,
    len: usize,
) -> Result<(u8, u8, u32, Vec<u8>)> {
    let mut r = Reader::new(bytes, what);
    let (tag, status, session_id) = decode_status_header(&mut r)?;
    let code = if status == STATUS_OK {
        let c = r.take(len)?.to_vec();
        r.finish()?;
        c
    } else {
        Vec::new()
    };
    Ok((tag, status, session_id, code))
}
