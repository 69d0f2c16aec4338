//! Throwaway TLS material for mock servers, in the shapes real BMCs present
//! ([`CertKind`]).
//!
//! - A private CA and a leaf signed by it (a site that runs its own CA): the CA is
//!   only ever handed to clients, the leaf names `localhost`, `127.0.0.1` and `::1`.
//! - One self-signed certificate marked `basicConstraints CA:TRUE`, as most BMCs ship
//!   (and as `openssl req -x509 -newkey ...` makes by default), naming the loopback
//!   names; or naming only a vendor default host (`idrac-7H2KQ43`, in its subject and
//!   nowhere else, as older iDRAC and Supermicro certificates do), so a client that
//!   reaches it by address finds no matching name; or expired.
//!
//! Everything is generated in memory at start and never reused.
//!
//! The only rustls crypto provider in the tree is ring; [`install_crypto_provider`]
//! installs it and the server config names it explicitly.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// The names every leaf is valid for.
pub const LOOPBACK_NAMES: &[&str] = &["localhost", "127.0.0.1", "::1"];

/// Installs ring as the process-wide rustls provider. Idempotent: an already
/// installed provider is not an error.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The certificate a mock server presents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CertKind {
    /// A leaf signed by a private CA (the CA is what clients trust).
    #[default]
    PrivateCa,
    /// One self-signed `CA:TRUE` certificate naming the loopback names.
    SelfSigned,
    /// One self-signed `CA:TRUE` certificate naming only [`DEFAULT_BMC_NAME`], in its
    /// subject (no subject alternative names): no client reaching the mock by address
    /// or `localhost` finds its name in it.
    SelfSignedDefaultName,
    /// Self-signed, the right names, valid from 2015 to 2020: expired.
    Expired,
}

impl std::str::FromStr for CertKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "private-ca" => Ok(CertKind::PrivateCa),
            "self-signed" => Ok(CertKind::SelfSigned),
            "self-signed-default-name" => Ok(CertKind::SelfSignedDefaultName),
            "expired" => Ok(CertKind::Expired),
            _ => Err(format!(
                "unknown certificate kind {s:?} (expected private-ca, self-signed, \
                 self-signed-default-name or expired)"
            )),
        }
    }
}

/// The host name a factory BMC certificate names (Dell's `idrac-<service tag>` style).
pub const DEFAULT_BMC_NAME: &str = "idrac-7H2KQ43";

/// Why TLS material could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("generating a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("building the rustls server config: {0}")]
    Rustls(#[from] rustls::Error),
}

/// A CA and one server leaf it signed, as PEM (and DER for rustls).
#[derive(Clone)]
pub struct TlsMaterial {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
    cert_der: CertificateDer<'static>,
    key_der: Vec<u8>,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("ca_pem", &self.ca_pem)
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

impl TlsMaterial {
    /// A fresh CA and a leaf for [`LOOPBACK_NAMES`].
    pub fn generate() -> Result<Self, TlsError> {
        Self::generate_for(LOOPBACK_NAMES)
    }

    /// Material of `kind`; `names` are the loopback names (and listen address) a
    /// certificate that names its host carries.
    pub fn generate_kind(kind: CertKind, names: &[&str]) -> Result<Self, TlsError> {
        match kind {
            CertKind::PrivateCa => Self::generate_for(names),
            CertKind::SelfSigned => Self::self_signed(names, names.first().copied(), false),
            CertKind::SelfSignedDefaultName => {
                Self::self_signed(&[], Some(DEFAULT_BMC_NAME), false)
            }
            CertKind::Expired => Self::self_signed(names, names.first().copied(), true),
        }
    }

    /// One self-signed `CA:TRUE` certificate: SANs `names`, subject CN `cn`; with
    /// `expired`, valid from 2015 to 2020 only.
    fn self_signed(names: &[&str], cn: Option<&str>, expired: bool) -> Result<Self, TlsError> {
        let owned: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(owned)?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, cn.unwrap_or("localhost"));
        params
            .distinguished_name
            .push(DnType::OrganizationName, "nodefence mock BMC");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
            KeyUsagePurpose::KeyCertSign,
        ];
        if expired {
            params.not_before = rcgen::date_time_ymd(2015, 1, 1);
            params.not_after = rcgen::date_time_ymd(2020, 1, 1);
        }
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok(Self {
            ca_pem: cert.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().clone(),
            key_der: key.serialize_der(),
        })
    }

    /// A fresh CA and a leaf for these DNS names and IP addresses.
    pub fn generate_for(names: &[&str]) -> Result<Self, TlsError> {
        let mut ca_params = CertificateParams::default();
        ca_params.distinguished_name = rcgen::DistinguishedName::new();
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "nodefence mock BMC CA");
        ca_params
            .distinguished_name
            .push(DnType::OrganizationName, "nodefence tests");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate()?;
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, ca_key);

        let owned: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut leaf_params = CertificateParams::new(owned)?;
        leaf_params.distinguished_name = rcgen::DistinguishedName::new();
        leaf_params.distinguished_name.push(
            DnType::CommonName,
            names.first().copied().unwrap_or("localhost"),
        );
        leaf_params.is_ca = IsCa::ExplicitNoCa;
        leaf_params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        leaf_params.use_authority_key_identifier_extension = true;
        let leaf_key = KeyPair::generate()?;
        let leaf_cert = leaf_params.signed_by(&leaf_key, &issuer)?;

        Ok(Self {
            ca_pem: ca_cert.pem(),
            cert_pem: leaf_cert.pem(),
            key_pem: leaf_key.serialize_pem(),
            cert_der: leaf_cert.der().clone(),
            key_der: leaf_key.serialize_der(),
        })
    }

    /// The CA certificate (PEM): what a client puts in its `ca_file` (for a
    /// self-signed kind, the certificate itself).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The server leaf certificate (PEM).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The server leaf's private key (PKCS#8 PEM).
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// A rustls server config (ring provider, HTTP/1.1 ALPN) presenting the leaf.
    pub fn server_config(&self) -> Result<rustls::ServerConfig, TlsError> {
        install_crypto_provider();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()));
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(vec![self.cert_der.clone()], key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

/// A leaf for the loopback names, plus the listen address if it is another one.
pub fn generate_material(ip: std::net::IpAddr) -> Result<TlsMaterial, TlsError> {
    generate_material_kind(CertKind::PrivateCa, ip)
}

/// Material of `kind` for the loopback names, plus the listen address if it is
/// another one.
pub fn generate_material_kind(
    kind: CertKind,
    ip: std::net::IpAddr,
) -> Result<TlsMaterial, TlsError> {
    let extra = ip.to_string();
    let mut names: Vec<&str> = LOOPBACK_NAMES.to_vec();
    if !ip.is_loopback() && !ip.is_unspecified() {
        names.push(&extra);
    }
    TlsMaterial::generate_kind(kind, &names)
}

/// `http://127.0.0.1:PORT` (or `http://[::1]:PORT`), or `https://localhost:PORT` (the
/// name in the certificate) when listening on loopback or everywhere.
pub fn base_url(addr: std::net::SocketAddr, tls: bool) -> String {
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    let ip = addr.ip();
    let shown = if ip.is_unspecified() {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), addr.port())
    } else {
        addr
    };
    if !tls {
        format!("http://{shown}")
    } else if ip.is_loopback() || ip.is_unspecified() {
        format!("https://localhost:{}", addr.port())
    } else {
        format!("https://{shown}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn makes_distinct_ca_and_leaf_and_a_usable_config() {
        let m = TlsMaterial::generate();
        assert!(m.is_ok(), "{m:?}");
        let Ok(m) = m else { return };
        assert!(m.ca_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(m.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        assert_ne!(m.ca_pem(), m.cert_pem());
        assert!(m.key_pem().contains("PRIVATE KEY"));
        assert!(m.server_config().is_ok());
    }

    #[test]
    fn every_kind_makes_a_usable_server_config() {
        for kind in [
            CertKind::PrivateCa,
            CertKind::SelfSigned,
            CertKind::SelfSignedDefaultName,
            CertKind::Expired,
        ] {
            let m = TlsMaterial::generate_kind(kind, LOOPBACK_NAMES).unwrap();
            assert!(m.server_config().is_ok(), "{kind:?}");
            let self_signed = kind != CertKind::PrivateCa;
            assert_eq!(m.ca_pem() == m.cert_pem(), self_signed, "{kind:?}");
        }
        assert_eq!("expired".parse::<CertKind>(), Ok(CertKind::Expired));
        assert!("bogus".parse::<CertKind>().is_err());
    }
}
