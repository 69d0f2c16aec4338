//! The process has exactly one rustls crypto provider: ring. It is installed before
//! any TLS client or server is built, so no dependency can pick another one.

/// Installs ring as the process-wide rustls provider. Idempotent: a second call (or a
/// provider installed earlier by a test harness) is not an error.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
