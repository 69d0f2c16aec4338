//! How nodefence decides to trust a BMC's (or a private cloud endpoint's) certificate.
//!
//! - **System trust store** (no setting): webpki against the system's CA certificates.
//! - **`ca_file`**: the certificates in the file are trusted two ways. A certificate
//!   the server presents that *is* one of them (byte for byte) is trusted as itself,
//!   whatever its CA flag: most BMCs ship a self-signed certificate marked `CA:TRUE`,
//!   which webpki refuses as a server certificate (`CaUsedAsEndEntity`), while curl
//!   and Python accept it. Its validity dates and its names are still checked, as
//!   OpenSSL does. Any other certificate must chain to one of them (a private CA).
//! - **`tls_fingerprint`**: the server's certificate must have exactly that SHA-256.
//!   The name and the dates are not checked: a pin names one certificate, which is
//!   what an operator wants for a BMC reached by IP whose certificate names a vendor
//!   default host (and BMC certificates often carry odd dates).
//! - **`insecure`**: anything is accepted (warned about at load).
//!
//! In every mode the handshake signature is verified with the certificate's key, so
//! the server must hold the private key of the certificate it presents.
//!
//! Every refusal is a [`CertRefusal`] carrying the whole operator message (which
//! check failed, what was presented, what to set); [`super::refusal_in`] finds it
//! again in the error chain a failed request returns.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, UNIX_EPOCH};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, DigitallySignedStruct, Error, OtherError, RootCertStore, SignatureScheme,
};

use super::fingerprint::CertFingerprint;
use super::inspect::{CertSummary, Validity, date};

/// Which check refused a certificate (for tests, metrics and the choice of advice).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// The certificate does not name the host the endpoint names.
    NameMismatch,
    Expired,
    NotYetValid,
    /// Not signed by a trusted CA (and not itself in `ca_file`).
    UnknownIssuer,
    /// A CA certificate (typically self-signed) presented as the server's own, and not
    /// the one in `ca_file`.
    SelfSignedCa,
    /// The pinned fingerprint does not match.
    PinMismatch,
    /// Anything else webpki refused (bad encoding, bad signature, wrong purpose).
    Invalid,
}

/// A refused certificate: the operator message says which check, what the server
/// presented and what to set.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct CertRefusal {
    pub kind: RefusalKind,
    pub message: String,
}

/// What the verifier trusts.
#[derive(Debug)]
enum Trust {
    System(Arc<WebPkiServerVerifier>),
    CaFile {
        path: PathBuf,
        exact: Vec<CertificateDer<'static>>,
        chain: Option<Arc<WebPkiServerVerifier>>,
    },
    Pin(CertFingerprint),
    Insecure,
}

/// Verifies a server certificate the way [the module docs](self) describe.
#[derive(Debug)]
pub struct BmcCertVerifier {
    trust: Trust,
    provider: Arc<CryptoProvider>,
}

/// Why a verifier could not be built (a configuration problem).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct TrustError(pub String);

impl BmcCertVerifier {
    /// Trusts the system's CA certificates (loaded once per process).
    pub fn system(provider: Arc<CryptoProvider>) -> Result<Self, TrustError> {
        let roots = system_roots()?;
        let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|e| TrustError(format!("cannot use the system trust store: {e}")))?;
        Ok(Self {
            trust: Trust::System(webpki),
            provider,
        })
    }

    /// Trusts the certificates of a PEM file: as CAs, and each as itself.
    pub fn ca_file(path: &Path, provider: Arc<CryptoProvider>) -> Result<Self, TrustError> {
        let pem = std::fs::read(path)
            .map_err(|e| TrustError(format!("cannot read ca_file {}: {e}", path.display())))?;
        let certs: Vec<CertificateDer<'static>> = rustls_pemfile_certs(&pem).map_err(|e| {
            TrustError(format!(
                "ca_file {} holds no usable PEM certificate: {e}",
                path.display()
            ))
        })?;
        let mut roots = RootCertStore::empty();
        let (added, _ignored) = roots.add_parsable_certificates(certs.iter().cloned());
        let chain = if added > 0 {
            Some(
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| TrustError(format!("ca_file {}: {e}", path.display())))?,
            )
        } else {
            None
        };
        Ok(Self {
            trust: Trust::CaFile {
                path: path.to_path_buf(),
                exact: certs,
                chain,
            },
            provider,
        })
    }

    /// Trusts exactly the certificate with this fingerprint.
    pub fn pinned(fingerprint: CertFingerprint, provider: Arc<CryptoProvider>) -> Self {
        Self {
            trust: Trust::Pin(fingerprint),
            provider,
        }
    }

    /// Trusts anything (`insecure = true`).
    pub fn insecure(provider: Arc<CryptoProvider>) -> Self {
        Self {
            trust: Trust::Insecure,
            provider,
        }
    }

    /// The verdict on a presented chain, with the operator's message on refusal
    /// (what the handshake would decide; `nodefence tls-fingerprint` shows it).
    pub fn check_presented(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        now: UnixTime,
    ) -> Result<(), CertRefusal> {
        self.check(end_entity, intermediates, server_name, &[], now)
    }

    fn check(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<(), CertRefusal> {
        let host = server_name.to_str();
        match &self.trust {
            Trust::Insecure => Ok(()),
            Trust::Pin(pin) => {
                let presented = CertFingerprint::of(end_entity);
                if presented == *pin {
                    return Ok(());
                }
                Err(refusal(
                    RefusalKind::PinMismatch,
                    format!(
                        "the certificate of {host} does not match tls_fingerprint {pin}: it \
                         presents {}; if the BMC's certificate was replaced on purpose, check \
                         the new one and update tls_fingerprint (`nodefence tls-fingerprint \
                         NODE` shows it), otherwise something else answers at this address",
                        describe(end_entity)
                    ),
                ))
            }
            Trust::CaFile { path, exact, chain } => {
                if exact.iter().any(|c| c.as_ref() == end_entity.as_ref()) {
                    return exact_certificate(end_entity, server_name, now, path);
                }
                let Some(chain) = chain else {
                    return Err(unknown_issuer(end_entity, &host, &Source::CaFile(path)));
                };
                chain
                    .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
                    .map(drop)
                    .map_err(|e| webpki_refusal(&e, end_entity, &host, &Source::CaFile(path)))
            }
            Trust::System(webpki) => webpki
                .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
                .map(drop)
                .map_err(|e| webpki_refusal(&e, end_entity, &host, &Source::System)),
        }
    }
}

impl ServerCertVerifier for BmcCertVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        self.check(end_entity, intermediates, server_name, ocsp_response, now)
            .map(|()| ServerCertVerified::assertion())
            .map_err(|r| {
                Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(r))))
            })
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Where trust came from, for the advice in a refusal.
enum Source<'a> {
    System,
    CaFile(&'a Path),
}

impl Source<'_> {
    fn describe(&self) -> String {
        match self {
            Source::System => "the system trust store".to_string(),
            Source::CaFile(p) => format!("ca_file {}", p.display()),
        }
    }
}

fn refusal(kind: RefusalKind, message: String) -> CertRefusal {
    CertRefusal { kind, message }
}

/// `sha256:..., subject ..., names ..., CA:TRUE, valid ... to ...` for messages (only
/// the fingerprint when the certificate cannot be parsed).
fn describe(der: &CertificateDer<'_>) -> String {
    let fingerprint = CertFingerprint::of(der);
    match CertSummary::parse(der) {
        Ok(s) => format!(
            "{fingerprint} (subject {}; names {}; {}valid {} to {})",
            s.subject,
            s.names_text(),
            if s.is_ca { "CA:TRUE; " } else { "" },
            date(s.not_before),
            date(s.not_after)
        ),
        Err(_) => fingerprint.to_string(),
    }
}

/// The presented certificate is one of `ca_file`'s: check its dates and names only.
fn exact_certificate(
    der: &CertificateDer<'_>,
    server_name: &ServerName<'_>,
    now: UnixTime,
    path: &Path,
) -> Result<(), CertRefusal> {
    let host = server_name.to_str();
    let summary = CertSummary::parse(der).map_err(|e| {
        refusal(
            RefusalKind::Invalid,
            format!(
                "the certificate of {host} (from ca_file {}): {e}",
                path.display()
            ),
        )
    })?;
    let now_time = UNIX_EPOCH + Duration::from_secs(now.as_secs());
    match summary.validity_at(now_time) {
        Validity::Valid => {}
        Validity::Expired { not_after } => {
            return Err(expired(
                &host,
                not_after,
                "it is the certificate in ca_file",
            ));
        }
        Validity::NotYetValid { not_before } => {
            return Err(not_yet_valid(&host, not_before));
        }
    }
    let parsed = rustls::server::ParsedCertificate::try_from(der).map_err(|e| {
        refusal(
            RefusalKind::Invalid,
            format!("the certificate of {host} cannot be read: {e}"),
        )
    })?;
    rustls::client::verify_server_name(&parsed, server_name)
        .map_err(|_| name_mismatch(&host, &summary.names_text()))
}

fn expired(host: &str, not_after: std::time::SystemTime, context: &str) -> CertRefusal {
    refusal(
        RefusalKind::Expired,
        format!(
            "the certificate of {host} expired on {} ({context}); renew the BMC's certificate, \
             or pin it with tls_fingerprint (a pin does not check dates; `nodefence \
             tls-fingerprint NODE` shows it)",
            date(not_after)
        ),
    )
}

fn not_yet_valid(host: &str, not_before: std::time::SystemTime) -> CertRefusal {
    refusal(
        RefusalKind::NotYetValid,
        format!(
            "the certificate of {host} is not valid before {}; check this machine's clock and \
             the BMC's (a BMC whose clock was reset makes certificates dated in the future), \
             or pin it with tls_fingerprint",
            date(not_before)
        ),
    )
}

fn name_mismatch(host: &str, names: &str) -> CertRefusal {
    refusal(
        RefusalKind::NameMismatch,
        format!(
            "the certificate of {host} is not valid for that name: it names {names}; set the \
             endpoint to one of those names, or pin the certificate with tls_fingerprint (a pin \
             checks the certificate, not the name; `nodefence tls-fingerprint NODE` shows it)"
        ),
    )
}

fn unknown_issuer(der: &CertificateDer<'_>, host: &str, source: &Source<'_>) -> CertRefusal {
    let self_signed = CertSummary::parse(der).is_ok_and(|s| s.self_issued);
    let (kind, what) = if self_signed {
        (
            RefusalKind::SelfSignedCa,
            "presents a self-signed certificate,",
        )
    } else {
        (
            RefusalKind::UnknownIssuer,
            "presents a certificate from an unknown issuer,",
        )
    };
    refusal(
        kind,
        format!(
            "{host} {what} {}, which {} does not trust; set ca_file to the CA that signed it, \
             or to the certificate itself, or pin it with tls_fingerprint (`nodefence \
             tls-fingerprint NODE` shows it and can save it)",
            describe(der),
            source.describe()
        ),
    )
}

/// Turns a webpki refusal into the operator's message.
fn webpki_refusal(
    error: &Error,
    der: &CertificateDer<'_>,
    host: &str,
    source: &Source<'_>,
) -> CertRefusal {
    match error {
        Error::InvalidCertificate(e) => match e {
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                let names = CertSummary::parse(der)
                    .map(|s| s.names_text())
                    .unwrap_or_else(|_| "other names".to_string());
                name_mismatch(host, &names)
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                let not_after = CertSummary::parse(der)
                    .map(|s| s.not_after)
                    .unwrap_or(UNIX_EPOCH);
                expired(host, not_after, "or a certificate of its chain")
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                let not_before = CertSummary::parse(der)
                    .map(|s| s.not_before)
                    .unwrap_or(UNIX_EPOCH);
                not_yet_valid(host, not_before)
            }
            CertificateError::UnknownIssuer => unknown_issuer(der, host, source),
            CertificateError::Other(OtherError(inner))
                if inner.downcast_ref::<webpki::Error>()
                    == Some(&webpki::Error::CaUsedAsEndEntity) =>
            {
                unknown_issuer(der, host, source)
            }
            other => refusal(
                RefusalKind::Invalid,
                format!(
                    "the certificate of {host} was refused ({other:?}): {}; checked against {}",
                    describe(der),
                    source.describe()
                ),
            ),
        },
        other => refusal(
            RefusalKind::Invalid,
            format!("the certificate of {host} was refused: {other}"),
        ),
    }
}

/// The DER certificates of a PEM bundle (at least one).
fn rustls_pemfile_certs(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no \"-----BEGIN CERTIFICATE-----\" block".into());
    }
    Ok(certs)
}

/// The system's CA certificates, read once per process (`SSL_CERT_FILE` and
/// `SSL_CERT_DIR` are honoured).
fn system_roots() -> Result<Arc<RootCertStore>, TrustError> {
    static ROOTS: OnceLock<Result<Arc<RootCertStore>, String>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            let mut roots = RootCertStore::empty();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                let why = found
                    .errors
                    .first()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default();
                return Err(format!(
                    "the system trust store holds no CA certificates{why}; install the \
                     ca-certificates package, set SSL_CERT_FILE, or set ca_file"
                ));
            }
            Ok(Arc::new(roots))
        })
        .clone()
        .map_err(TrustError)
}
