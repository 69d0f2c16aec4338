//! What a certificate says about itself, for people: subject, names, validity, CA
//! flag and fingerprint (`nodefence tls-fingerprint`), and the validity check the
//! exact-certificate trust of a `ca_file` needs (webpki will not check a CA
//! certificate presented as a server's own).
//!
//! Every string comes from the far side (the BMC chose it), so each is escaped and
//! capped ([`crate::untrusted`]).

use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use super::fingerprint::CertFingerprint;
use crate::untrusted;

/// A certificate, described.
#[derive(Debug, Clone, Serialize)]
pub struct CertSummary {
    pub subject: String,
    pub issuer: String,
    /// Subject and issuer are the same name: self-signed (or self-issued).
    pub self_issued: bool,
    /// The Subject Alternative Names, as `DNS:name` and `IP:address`.
    pub names: Vec<String>,
    /// `basicConstraints CA:TRUE`.
    pub is_ca: bool,
    #[serde(with = "humantime_serde")]
    pub not_before: SystemTime,
    #[serde(with = "humantime_serde")]
    pub not_after: SystemTime,
    #[serde(serialize_with = "as_text")]
    pub sha256: CertFingerprint,
}

fn as_text<S: serde::Serializer>(fp: &CertFingerprint, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(fp)
}

/// Why a certificate could not be read.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the certificate cannot be parsed: {0}")]
pub struct ParseError(String);

/// When a certificate is valid, relative to a moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validity {
    Valid,
    NotYetValid { not_before: SystemTime },
    Expired { not_after: SystemTime },
}

impl CertSummary {
    /// Reads a DER certificate.
    pub fn parse(der: &[u8]) -> Result<Self, ParseError> {
        let (_, cert) = X509Certificate::from_der(der)
            .map_err(|e| ParseError(untrusted::field(&e.to_string())))?;
        let mut names = Vec::new();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::DNSName(d) => names.push(format!("DNS:{}", untrusted::field(d))),
                    GeneralName::IPAddress(bytes) => {
                        if let Some(ip) = ip_from(bytes) {
                            names.push(format!("IP:{ip}"));
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(Self {
            subject: untrusted::field(&cert.subject().to_string()),
            issuer: untrusted::field(&cert.issuer().to_string()),
            self_issued: cert.subject().as_raw() == cert.issuer().as_raw(),
            names,
            is_ca: cert.is_ca(),
            not_before: time_of(cert.validity().not_before.timestamp()),
            not_after: time_of(cert.validity().not_after.timestamp()),
            sha256: CertFingerprint::of(der),
        })
    }

    /// Whether the certificate is valid at `now`.
    pub fn validity_at(&self, now: SystemTime) -> Validity {
        if now < self.not_before {
            Validity::NotYetValid {
                not_before: self.not_before,
            }
        } else if now > self.not_after {
            Validity::Expired {
                not_after: self.not_after,
            }
        } else {
            Validity::Valid
        }
    }

    /// The names a client can reach it by (SANs), or its subject when it has none.
    pub fn names_text(&self) -> String {
        if self.names.is_empty() {
            format!("none (subject {})", self.subject)
        } else {
            self.names.join(", ")
        }
    }
}

/// A UTC timestamp in seconds (possibly before 1970) as a `SystemTime`.
fn time_of(seconds: i64) -> SystemTime {
    let magnitude = Duration::from_secs(seconds.unsigned_abs());
    if seconds >= 0 {
        UNIX_EPOCH + magnitude
    } else {
        UNIX_EPOCH.checked_sub(magnitude).unwrap_or(UNIX_EPOCH)
    }
}

fn ip_from(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes).ok().map(IpAddr::from),
        16 => <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from),
        _ => None,
    }
}

/// An RFC 3339 date (seconds) for messages.
pub fn date(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};

    fn self_signed(ca: bool, names: &[&str]) -> Vec<u8> {
        let mut params =
            CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "idrac-7H2KQ43\u{1b}[2J");
        if ca {
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        }
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn describes_a_self_signed_ca_certificate() {
        let der = self_signed(true, &["bmc.example", "127.0.0.1"]);
        let s = CertSummary::parse(&der).unwrap();
        assert!(s.is_ca);
        assert!(s.self_issued);
        assert_eq!(s.names, ["DNS:bmc.example", "IP:127.0.0.1"]);
        assert!(s.subject.contains("CN=idrac-7H2KQ43"), "{}", s.subject);
        assert!(
            !s.subject.chars().any(untrusted::is_unsafe),
            "{}",
            s.subject
        );
        assert_eq!(s.sha256, CertFingerprint::of(&der));
        assert_eq!(s.validity_at(SystemTime::now()), Validity::Valid);
        assert!(matches!(
            s.validity_at(s.not_after + Duration::from_secs(1)),
            Validity::Expired { .. }
        ));
        assert!(matches!(
            s.validity_at(s.not_before - Duration::from_secs(1)),
            Validity::NotYetValid { .. }
        ));
        let plain = CertSummary::parse(&self_signed(false, &["x"])).unwrap();
        assert!(!plain.is_ca);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(CertSummary::parse(b"not a certificate").is_err());
        assert!(CertSummary::parse(&[]).is_err());
    }
}
