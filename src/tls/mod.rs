//! TLS for everything nodefence connects to over HTTPS (Redfish BMCs, EC2 and
//! AWS-compatible endpoints).
//!
//! - The process has exactly one rustls crypto provider, ring, installed before any
//!   TLS client or server is built so no dependency can pick another one.
//! - [`client_config`] builds the rustls configuration for one trust setting (system
//!   store, `ca_file`, `tls_fingerprint`, `insecure`) with nodefence's own verifier
//!   ([`verifier`](mod@verifier)), so a BMC's self-signed `CA:TRUE` certificate can be trusted as
//!   itself and every refusal says which check failed and what to set.
//! - [`refusal_in`] finds that explanation again in a failed request's error chain: a
//!   certificate failure is permanent (retrying cannot change the certificate), so
//!   callers report it once instead of retrying it.

pub mod fingerprint;
pub mod inspect;
pub mod probe;
pub mod verifier;

use std::sync::Arc;

pub use fingerprint::CertFingerprint;
pub use verifier::{BmcCertVerifier, CertRefusal, RefusalKind, TrustError};

use crate::config::TlsSettings;

/// Installs ring as the process-wide rustls provider. Idempotent: a second call (or a
/// provider installed earlier by a test harness) is not an error.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The ring provider, for configurations that name theirs.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The verifier for one trust setting.
pub fn verifier(settings: &TlsSettings) -> Result<BmcCertVerifier, TrustError> {
    let provider = provider();
    if settings.insecure {
        return Ok(BmcCertVerifier::insecure(provider));
    }
    if let Some(pin) = settings.fingerprint {
        return Ok(BmcCertVerifier::pinned(pin, provider));
    }
    match &settings.ca_file {
        Some(path) => BmcCertVerifier::ca_file(path, provider),
        None => BmcCertVerifier::system(provider),
    }
}

/// A rustls client configuration (TLS 1.2 and 1.3, HTTP/1.1) trusting what `settings`
/// says.
pub fn client_config(settings: &TlsSettings) -> Result<rustls::ClientConfig, TrustError> {
    let verifier = verifier(settings)?;
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TrustError(format!("TLS configuration: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// What went wrong in a TLS handshake, found in an error's source chain.
#[derive(Debug, Clone)]
pub enum HandshakeFailure {
    /// nodefence's verifier refused the certificate (the message says why and what
    /// to set).
    Certificate(CertRefusal),
    /// Another TLS failure (no common protocol version or cipher suite, an alert from
    /// the server...).
    Other(String),
}

impl HandshakeFailure {
    /// The operator's message.
    pub fn message(&self) -> String {
        match self {
            HandshakeFailure::Certificate(r) => r.message.clone(),
            HandshakeFailure::Other(e) => format!(
                "the TLS handshake failed: {e} (nodefence speaks TLS 1.2 and 1.3; a BMC that \
                 only offers older versions needs a firmware update)"
            ),
        }
    }
}

/// The TLS failure behind `error`, if any: a rustls error anywhere in its source
/// chain, including inside the `std::io::Error`s that HTTP stacks wrap it in.
pub fn refusal_in(error: &(dyn std::error::Error + 'static)) -> Option<HandshakeFailure> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = next {
        if let Some(found) = as_rustls(e) {
            return Some(classify(found));
        }
        // `io::Error::source` skips the error it wraps (it returns *that* error's
        // source), and TLS stacks nest io::Errors: step into each one instead.
        next = match e
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    None
}

fn as_rustls<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    e.downcast_ref::<rustls::Error>()
}

fn classify(error: &rustls::Error) -> HandshakeFailure {
    if let rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other)) = error
        && let Some(refusal) = other.0.downcast_ref::<CertRefusal>()
    {
        return HandshakeFailure::Certificate(refusal.clone());
    }
    HandshakeFailure::Other(crate::untrusted::field(&error.to_string()))
}
