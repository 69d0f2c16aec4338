//! Cipher suites 3 and 17: RAKP key-exchange auth codes, session keys (SIK, K1, K2)
//! and the per-packet integrity AuthCode. HMACs come from RustCrypto `hmac`/`sha1`/
//! `sha2`; comparisons are constant time (`subtle`); keys are zeroized on drop.
//!
//! Naming follows the spec: `SIDm`/`Rm` belong to the remote console, `SIDc`/`Rc`/
//! `GUIDc` to the managed system (BMC). K1 and K2 are HMAC(SIK, 0x01×20) and
//! HMAC(SIK, 0x02×20) for both suites — 20-byte constants also for SHA-256, as
//! ipmitool (the de facto reference peer) does.

use hmac::{Hmac, KeyInit, Mac};
use sha1::Sha1;
use sha2::Sha256;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::{Error, Result};

/// Maximum user name length (bytes).
pub const MAX_USERNAME_LEN: usize = 16;
/// Maximum password length (bytes) for IPMI v2.0 (20-byte passwords).
pub const MAX_PASSWORD_LEN: usize = 20;
/// Maximum BMC key (K_g) length (bytes).
pub const MAX_KG_LEN: usize = 20;

/// Authentication algorithm numbers (Open Session payload type 0x00).
pub const AUTH_HMAC_SHA1: u8 = 0x01;
/// RAKP-HMAC-SHA256.
pub const AUTH_HMAC_SHA256: u8 = 0x03;
/// Integrity algorithm HMAC-SHA1-96.
pub const INTEGRITY_HMAC_SHA1_96: u8 = 0x01;
/// Integrity algorithm HMAC-SHA256-128.
pub const INTEGRITY_HMAC_SHA256_128: u8 = 0x04;
/// Confidentiality algorithm AES-CBC-128.
pub const CONFIDENTIALITY_AES_CBC_128: u8 = 0x01;

/// The algorithm triple proposed/accepted in Open Session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Algorithms {
    /// Authentication (RAKP) algorithm number.
    pub auth: u8,
    /// Integrity algorithm number.
    pub integrity: u8,
    /// Confidentiality algorithm number.
    pub confidentiality: u8,
}

/// The supported cipher suites.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CipherSuite {
    /// Suite 3: RAKP-HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128.
    Suite3,
    /// Suite 17: RAKP-HMAC-SHA256, HMAC-SHA256-128, AES-CBC-128.
    Suite17,
}

impl CipherSuite {
    /// The suite id (3 or 17).
    pub fn id(self) -> u8 {
        match self {
            Self::Suite3 => 3,
            Self::Suite17 => 17,
        }
    }

    /// Suite for an id.
    pub fn from_id(id: u8) -> Result<Self> {
        match id {
            3 => Ok(Self::Suite3),
            17 => Ok(Self::Suite17),
            _ => Err(Error::FieldOutOfRange {
                what: "cipher suite id",
                value: u32::from(id),
            }),
        }
    }

    /// Algorithm numbers for Open Session.
    pub fn algorithms(self) -> Algorithms {
        match self {
            Self::Suite3 => Algorithms {
                auth: AUTH_HMAC_SHA1,
                integrity: INTEGRITY_HMAC_SHA1_96,
                confidentiality: CONFIDENTIALITY_AES_CBC_128,
            },
            Self::Suite17 => Algorithms {
                auth: AUTH_HMAC_SHA256,
                integrity: INTEGRITY_HMAC_SHA256_128,
                confidentiality: CONFIDENTIALITY_AES_CBC_128,
            },
        }
    }

    /// Suite for an algorithm triple, if supported.
    pub fn from_algorithms(a: Algorithms) -> Result<Self> {
        [Self::Suite3, Self::Suite17]
            .into_iter()
            .find(|s| s.algorithms() == a)
            .ok_or(Error::UnsupportedCipherSuite {
                auth: a.auth,
                integrity: a.integrity,
                confidentiality: a.confidentiality,
            })
    }

    /// Length of RAKP 2/3 auth codes and of SIK/K1/K2 (the full HMAC output).
    pub fn rakp_auth_len(self) -> usize {
        match self {
            Self::Suite3 => 20,
            Self::Suite17 => 32,
        }
    }

    /// Length of the RAKP 4 integrity check value (truncated HMAC).
    pub fn rakp4_icv_len(self) -> usize {
        match self {
            Self::Suite3 => 12,
            Self::Suite17 => 16,
        }
    }

    /// Length of a session packet AuthCode (truncated HMAC).
    pub fn integrity_len(self) -> usize {
        self.rakp4_icv_len()
    }

    fn hmac(self, key: &[u8], parts: &[&[u8]]) -> Zeroizing<Vec<u8>> {
        fn run<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> Zeroizing<Vec<u8>> {
            // HMAC accepts keys of any length, so this cannot fail; fall back to an
            // empty-key MAC rather than panicking should that ever change.
            let mut mac = <M as KeyInit>::new_from_slice(key)
                .unwrap_or_else(|_| <M as KeyInit>::new(&Default::default()));
            for p in parts {
                mac.update(p);
            }
            Zeroizing::new(mac.finalize().into_bytes().to_vec())
        }
        match self {
            Self::Suite3 => run::<Hmac<Sha1>>(key, parts),
            Self::Suite17 => run::<Hmac<Sha256>>(key, parts),
        }
    }
}

/// Compares `got` with the first `got.len()` bytes of `expected` in constant time;
/// length mismatch fails.
fn ct_eq_prefix(expected: &[u8], len: usize, got: &[u8]) -> bool {
    match expected.get(..len) {
        Some(e) if got.len() == len => bool::from(e.ct_eq(got)),
        _ => false,
    }
}

/// User credentials and optional BMC key, validated against the spec's limits.
pub struct Credentials {
    username: Vec<u8>,
    password: Zeroizing<Vec<u8>>,
    kg: Option<Zeroizing<Vec<u8>>>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &String::from_utf8_lossy(&self.username))
            .field("password", &"<redacted>")
            .field("kg", &self.kg.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Credentials {
    /// Validates user name (≤ 16 bytes), password (≤ 20 bytes) and K_g (≤ 20 bytes).
    /// An empty or all-zero K_g means "no BMC key" (the password keys the SIK).
    pub fn new(username: &[u8], password: &[u8], kg: Option<&[u8]>) -> Result<Self> {
        if username.len() > MAX_USERNAME_LEN {
            return Err(Error::UsernameTooLong(username.len()));
        }
        if password.len() > MAX_PASSWORD_LEN {
            return Err(Error::PasswordTooLong(password.len()));
        }
        let kg = match kg {
            Some(k) if k.len() > MAX_KG_LEN => return Err(Error::KgTooLong(k.len())),
            Some(k) if k.iter().any(|&b| b != 0) => Some(Zeroizing::new(k.to_vec())),
            _ => None,
        };
        Ok(Self {
            username: username.to_vec(),
            password: Zeroizing::new(password.to_vec()),
            kg,
        })
    }

    /// The user name bytes.
    pub fn username(&self) -> &[u8] {
        &self.username
    }

    fn kuid(&self) -> &[u8] {
        &self.password
    }

    fn ulen(&self) -> [u8; 1] {
        // ≤ 16, checked in `new`.
        [u8::try_from(self.username.len()).unwrap_or(u8::MAX)]
    }
}

/// Everything both sides agree on by the time RAKP 2 is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RakpContext {
    /// Negotiated suite.
    pub suite: CipherSuite,
    /// SIDm: the remote console's session id.
    pub console_session_id: u32,
    /// SIDc: the managed system's (BMC's) session id.
    pub bmc_session_id: u32,
    /// Rm: remote console random number (RAKP 1).
    pub console_random: [u8; 16],
    /// Rc: managed system random number (RAKP 2).
    pub bmc_random: [u8; 16],
    /// GUIDc: managed system GUID (RAKP 2).
    pub bmc_guid: [u8; 16],
    /// RoleM: the requested maximum privilege byte exactly as sent in RAKP 1.
    pub role: u8,
}

impl RakpContext {
    /// RAKP 2 key exchange auth code: HMAC_Kuid(SIDm | SIDc | Rm | Rc | GUIDc | RoleM |
    /// ULengthM | UNameM).
    pub fn rakp2_auth_code(&self, creds: &Credentials) -> Vec<u8> {
        self.suite
            .hmac(
                creds.kuid(),
                &[
                    &self.console_session_id.to_le_bytes(),
                    &self.bmc_session_id.to_le_bytes(),
                    &self.console_random,
                    &self.bmc_random,
                    &self.bmc_guid,
                    &[self.role],
                    &creds.ulen(),
                    creds.username(),
                ],
            )
            .to_vec()
    }

    /// Console side: verifies the RAKP 2 auth code from the BMC.
    pub fn verify_rakp2(&self, creds: &Credentials, got: &[u8]) -> Result<()> {
        let exp = self.rakp2_auth_code(creds);
        if ct_eq_prefix(&exp, self.suite.rakp_auth_len(), got) {
            Ok(())
        } else {
            Err(Error::Rakp2Mismatch)
        }
    }

    /// RAKP 3 auth code: HMAC_Kuid(Rc | SIDm | RoleM | ULengthM | UNameM).
    pub fn rakp3_auth_code(&self, creds: &Credentials) -> Vec<u8> {
        self.suite
            .hmac(
                creds.kuid(),
                &[
                    &self.bmc_random,
                    &self.console_session_id.to_le_bytes(),
                    &[self.role],
                    &creds.ulen(),
                    creds.username(),
                ],
            )
            .to_vec()
    }

    /// BMC side: verifies the RAKP 3 auth code from the console.
    pub fn verify_rakp3(&self, creds: &Credentials, got: &[u8]) -> Result<()> {
        let exp = self.rakp3_auth_code(creds);
        if ct_eq_prefix(&exp, self.suite.rakp_auth_len(), got) {
            Ok(())
        } else {
            Err(Error::Rakp3Mismatch)
        }
    }

    /// Derives SIK = HMAC_{K_g or K_uid}(Rm | Rc | RoleM | ULengthM | UNameM), then
    /// K1 and K2.
    pub fn session_keys(&self, creds: &Credentials) -> SessionKeys {
        let key: &[u8] = creds.kg.as_deref().map_or(creds.kuid(), |k| k.as_slice());
        let sik = self.suite.hmac(
            key,
            &[
                &self.console_random,
                &self.bmc_random,
                &[self.role],
                &creds.ulen(),
                creds.username(),
            ],
        );
        let k1 = self.suite.hmac(&sik, &[&[0x01; 20]]);
        let k2 = self.suite.hmac(&sik, &[&[0x02; 20]]);
        SessionKeys {
            suite: self.suite,
            sik,
            k1,
            k2,
        }
    }

    /// RAKP 4 integrity check value: HMAC_SIK(Rm | SIDc | GUIDc), truncated.
    pub fn rakp4_icv(&self, keys: &SessionKeys) -> Vec<u8> {
        let full = self.suite.hmac(
            &keys.sik,
            &[
                &self.console_random,
                &self.bmc_session_id.to_le_bytes(),
                &self.bmc_guid,
            ],
        );
        full.get(..self.suite.rakp4_icv_len())
            .unwrap_or_default()
            .to_vec()
    }

    /// Console side: verifies the RAKP 4 integrity check value from the BMC.
    pub fn verify_rakp4(&self, keys: &SessionKeys, got: &[u8]) -> Result<()> {
        let exp = self.rakp4_icv(keys);
        if ct_eq_prefix(&exp, self.suite.rakp4_icv_len(), got) {
            Ok(())
        } else {
            Err(Error::Rakp4Mismatch)
        }
    }
}

/// Session keys; zeroized on drop, redacted in `Debug`.
pub struct SessionKeys {
    suite: CipherSuite,
    sik: Zeroizing<Vec<u8>>,
    k1: Zeroizing<Vec<u8>>,
    k2: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionKeys")
            .field("suite", &self.suite)
            .finish_non_exhaustive()
    }
}

impl SessionKeys {
    /// The suite these keys are for.
    pub fn suite(&self) -> CipherSuite {
        self.suite
    }

    /// Session Integrity Key.
    pub fn sik(&self) -> &[u8] {
        &self.sik
    }

    /// K1 (integrity key).
    pub fn k1(&self) -> &[u8] {
        &self.k1
    }

    /// K2 (its first 16 bytes are the AES-CBC-128 key).
    pub fn k2(&self) -> &[u8] {
        &self.k2
    }

    /// Session packet AuthCode: HMAC_K1(data), truncated to 12 (SHA1-96) or 16
    /// (SHA256-128) bytes.
    pub fn auth_code(&self, data: &[u8]) -> Vec<u8> {
        let full = self.suite.hmac(&self.k1, &[data]);
        full.get(..self.suite.integrity_len())
            .unwrap_or_default()
            .to_vec()
    }

    /// Verifies a session packet AuthCode in constant time.
    pub fn verify_auth_code(&self, data: &[u8], got: &[u8]) -> Result<()> {
        let full = self.suite.hmac(&self.k1, &[data]);
        if ct_eq_prefix(&full, self.suite.integrity_len(), got) {
            Ok(())
        } else {
            Err(Error::BadAuthCode)
        }
    }
}
