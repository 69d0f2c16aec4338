//! The crate's single error type.

/// Everything that can go wrong while encoding, decoding or authenticating a packet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Input ended before a field was complete.
    #[error("{what}: truncated, need {need} bytes, got {got}")]
    Truncated {
        what: &'static str,
        need: usize,
        got: usize,
    },
    /// Input has bytes after the end of the structure.
    #[error("{what}: {extra} unexpected trailing bytes")]
    TrailingBytes { what: &'static str, extra: usize },
    /// RMCP header does not say version 1.0 (0x06) / class IPMI (0x07) / no ack.
    #[error("not an RMCP IPMI packet (header {0:02x?})")]
    BadRmcpHeader([u8; 4]),
    /// Session header authentication type is neither none (v1.5) nor RMCP+ (0x06).
    #[error("unsupported session authentication type 0x{0:02x}")]
    UnsupportedAuthType(u8),
    /// Payload type not one this crate handles.
    #[error("unsupported payload type 0x{0:02x}")]
    UnsupportedPayloadType(u8),
    /// A length field does not match the data around it.
    #[error("{what}: bad length {len}")]
    BadLength { what: &'static str, len: usize },
    /// A field has a value outside its allowed range.
    #[error("{what}: value 0x{value:x} out of range")]
    FieldOutOfRange { what: &'static str, value: u32 },
    /// IPMI message checksum 1 (header) or 2 (body) is wrong.
    #[error("IPMI message checksum {0} mismatch")]
    BadChecksum(u8),
    /// Algorithm payload in Open Session is malformed or names an unsupported algorithm.
    #[error("unsupported or malformed {what} algorithm payload")]
    BadAlgorithm { what: &'static str },
    /// The algorithm combination is not cipher suite 3 or 17.
    #[error(
        "unsupported cipher suite (auth {auth}, integrity {integrity}, confidentiality {confidentiality})"
    )]
    UnsupportedCipherSuite {
        auth: u8,
        integrity: u8,
        confidentiality: u8,
    },
    /// User name longer than the 16 bytes IPMI allows.
    #[error("IPMI user name is {0} bytes, at most 16 allowed")]
    UsernameTooLong(usize),
    /// Password longer than the 20 bytes IPMI v2.0 allows.
    #[error("IPMI password is {0} bytes, at most 20 allowed")]
    PasswordTooLong(usize),
    /// BMC key K_g longer than 20 bytes.
    #[error("IPMI BMC key (K_g) is {0} bytes, at most 20 allowed")]
    KgTooLong(usize),
    /// RAKP 2 key exchange auth code did not verify (wrong password or user).
    #[error("RAKP 2 auth code mismatch (wrong user name or password?)")]
    Rakp2Mismatch,
    /// RAKP 3 auth code did not verify (wrong password or user).
    #[error("RAKP 3 auth code mismatch (wrong user name or password?)")]
    Rakp3Mismatch,
    /// RAKP 4 integrity check value did not verify (wrong password or K_g).
    #[error("RAKP 4 integrity check value mismatch (wrong password or K_g?)")]
    Rakp4Mismatch,
    /// Session packet AuthCode did not verify.
    #[error("session packet integrity check failed")]
    BadAuthCode,
    /// Session packet is missing the authenticated or encrypted bit the session requires.
    #[error("session packet is not {0}")]
    NotProtected(&'static str),
    /// Integrity or confidentiality pad is malformed.
    #[error("bad {0} pad")]
    BadPad(&'static str),
    /// The peer put a value in a field that must echo ours.
    #[error("{what} mismatch: expected 0x{expected:x}, got 0x{got:x}")]
    Mismatch {
        what: &'static str,
        expected: u32,
        got: u32,
    },
    /// A session packet's sequence number is a replay or outside the window.
    #[error(
        "session sequence number {got} refused (replay or outside the window; highest seen {highest})"
    )]
    OutOfSequence { got: u32, highest: u32 },
    /// A session packet names a session id that is not ours.
    #[error("packet for session 0x{got:08x}, ours is 0x{expected:08x}")]
    WrongSession { expected: u32, got: u32 },
}
