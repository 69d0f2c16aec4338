//! A certificate's SHA-256 fingerprint: how an operator pins a BMC's own certificate.
//!
//! The written form is the one `openssl x509 -noout -fingerprint -sha256` prints, so a
//! value can be pasted from it or from `nodefence tls-fingerprint`: `sha256:` and 32
//! colon-separated hex bytes (`sha256:AB:CD:...`). Also accepted: openssl's own line
//! (`sha256 Fingerprint=AB:CD:...`), lower case, and the hex without colons. SHA-1
//! fingerprints (what many BMC web pages still show) are refused with a way to get
//! the SHA-256 one: a pin is only as strong as its hash.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};

/// The SHA-256 of a certificate's DER encoding.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CertFingerprint([u8; 32]);

impl CertFingerprint {
    /// The fingerprint of a DER-encoded certificate.
    pub fn of(der: &[u8]) -> Self {
        Self(Sha256::digest(der).into())
    }

    /// The raw digest.
    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for CertFingerprint {
    /// `sha256:AB:CD:...`, the form the inventory takes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("sha256:")?;
        for (i, b) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{b:02X}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for CertFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Why a written fingerprint was refused: what is wrong, and what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct FingerprintError {
    pub message: String,
    pub help: String,
}

const HOW_TO_GET: &str = "get it with `nodefence tls-fingerprint NODE` or \
    `openssl x509 -noout -fingerprint -sha256 -in bmc.pem`, and write it as \
    \"sha256:AB:CD:...\" (32 hex bytes)";

impl FromStr for CertFingerprint {
    type Err = FingerprintError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = |message: String| FingerprintError {
            message,
            help: HOW_TO_GET.to_string(),
        };
        let trimmed = text.trim();
        let lower = trimmed.to_ascii_lowercase();
        if lower.starts_with("sha1") || lower.starts_with("md5") {
            return Err(fail(
                "only SHA-256 fingerprints are accepted (this looks like SHA-1 or MD5, which \
                 do not identify a certificate safely)"
                    .to_string(),
            ));
        }
        let hex = ["sha256 fingerprint=", "sha256:", "sha-256:"]
            .iter()
            .find_map(|p| lower.strip_prefix(p).map(|_| &trimmed[p.len()..]))
            .unwrap_or(trimmed);
        let separated = hex.contains(':');
        let digits: String = hex.chars().filter(|c| *c != ':').collect();
        if separated && hex.split(':').any(|byte| byte.len() != 2) {
            return Err(fail(format!(
                "{trimmed:?} is not a fingerprint: with colons, every byte is two hex digits"
            )));
        }
        if digits.len() != 64 || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
            let what = if digits.len() == 40 {
                " (40 hex digits: a SHA-1 fingerprint; only SHA-256 is accepted)".to_string()
            } else {
                format!(
                    " ({} characters where 64 hex digits were expected)",
                    digits.len()
                )
            };
            return Err(fail(format!(
                "{:?} is not a SHA-256 fingerprint{what}",
                crate::untrusted::field(trimmed)
            )));
        }
        let mut bytes = [0u8; 32];
        for (i, byte) in bytes.iter_mut().enumerate() {
            let pair = &digits[2 * i..2 * i + 2];
            *byte = u8::from_str_radix(pair, 16).map_err(|_| fail(format!("bad hex {pair:?}")))?;
        }
        Ok(Self(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "3A:7B:00:FF:10:20:30:40:50:60:70:80:90:A0:B0:C0:D0:E0:F0:01:02:03:04:05:06:07:08:09:0A:0B:0C:0D";

    #[test]
    fn every_written_form_reads_the_same_and_prints_canonically() {
        let canonical = format!("sha256:{HEX}");
        for form in [
            canonical.clone(),
            format!("sha256 Fingerprint={HEX}"),
            format!("SHA256 Fingerprint={HEX}"),
            format!("  sha256:{}  ", HEX.to_lowercase()),
            HEX.replace(':', ""),
            HEX.to_string(),
        ] {
            let fp: CertFingerprint = form.parse().unwrap_or_else(|e| panic!("{form}: {e}"));
            assert_eq!(fp.to_string(), canonical, "{form}");
        }
    }

    #[test]
    fn the_digest_is_sha256_of_the_der() {
        // SHA-256("abc"), FIPS 180-2 appendix B.1.
        assert_eq!(
            CertFingerprint::of(b"abc").to_string(),
            "sha256:BA:78:16:BF:8F:01:CF:EA:41:41:40:DE:5D:AE:22:23:B0:03:61:A3:96:17:7A:9C:B4:10:FF:61:F2:00:15:AD"
        );
    }

    #[test]
    fn wrong_forms_are_refused_with_a_way_out() {
        for (bad, says) in [
            ("sha1:AB:CD", "only SHA-256"),
            (
                "SHA1 Fingerprint=AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD",
                "only SHA-256",
            ),
            ("AABBCCDDEEFF00112233445566778899AABBCCDD", "SHA-1"),
            ("sha256:AB:CD", "64 hex digits"),
            ("sha256:ABC:D", "two hex digits"),
            (&format!("sha256:{}", "zz".repeat(32)), "not a SHA-256"),
            ("", "64 hex digits"),
        ] {
            let e = bad.parse::<CertFingerprint>().unwrap_err();
            assert!(e.message.contains(says), "{bad}: {}", e.message);
            assert!(e.help.contains("tls-fingerprint"), "{}", e.help);
        }
    }
}
