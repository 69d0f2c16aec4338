//! Asking a server which certificate it presents, in the spirit of `ssh-keyscan`:
//! a TLS handshake whose only purpose is to see the certificate chain. Nothing is
//! sent after the handshake (no request, no credentials), so talking to an
//! unverified server this way is safe; whether to *trust* what it showed is the
//! operator's decision, made out of band.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::net::TcpStream;
use url::Url;

use super::verifier::{BmcCertVerifier, CertRefusal};

/// What a server presented.
#[derive(Debug, Clone)]
pub struct Presented {
    /// The server's certificate first, then the chain it sent.
    pub chain: Vec<CertificateDer<'static>>,
    /// `host:port` as connected to.
    pub address: String,
    /// The name the certificate was asked for (SNI, when the host is a name).
    pub server_name: ServerName<'static>,
    /// The TLS version agreed (`TLSv1_3`...).
    pub protocol: String,
}

/// Why the certificate could not be fetched.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct ProbeError(pub String);

/// Records the chain; checks only that the server holds the certificate's key.
#[derive(Debug)]
struct Capture {
    chain: Mutex<Vec<CertificateDer<'static>>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ServerCertVerifier for Capture {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let mut chain = vec![end_entity.clone().into_owned()];
        chain.extend(intermediates.iter().map(|c| c.clone().into_owned()));
        *self.chain.lock().unwrap_or_else(|e| e.into_inner()) = chain;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
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
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
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

/// Connects to `url`'s host and port (443 by default), completes a TLS handshake,
/// and returns the chain the server presented. `timeout` bounds connect and handshake.
pub async fn presented_chain(url: &Url, timeout: Duration) -> Result<Presented, ProbeError> {
    if url.scheme() != "https" {
        return Err(ProbeError(format!(
            "{url} is not an https:// URL: there is no certificate to show"
        )));
    }
    let host = url
        .host_str()
        .ok_or_else(|| ProbeError(format!("{url} names no host")))?;
    let port = url.port_or_known_default().unwrap_or(443);
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let server_name = ServerName::try_from(bare.to_string())
        .map_err(|e| ProbeError(format!("{host:?} is not a usable server name: {e}")))?;
    let provider = super::provider();
    let capture = Arc::new(Capture {
        chain: Mutex::new(Vec::new()),
        provider: provider.clone(),
    });
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ProbeError(format!("TLS configuration: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(capture.clone())
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let address = format!("{host}:{port}");
    let handshake = async {
        let tcp = TcpStream::connect((bare, port))
            .await
            .map_err(|e| ProbeError(format!("cannot connect to {address}: {e}")))?;
        connector
            .connect(server_name.clone(), tcp)
            .await
            .map_err(|e| {
                let why = super::refusal_in(&e)
                    .map(|f| f.message())
                    .unwrap_or_else(|| crate::untrusted::field(&e.to_string()));
                ProbeError(format!("TLS handshake with {address} failed: {why}"))
            })
    };
    let stream = tokio::time::timeout(timeout, handshake)
        .await
        .map_err(|_| {
            ProbeError(format!(
                "no TLS handshake with {address} within {}",
                humantime::format_duration(timeout)
            ))
        })??;
    let protocol = stream
        .get_ref()
        .1
        .protocol_version()
        .map(|v| format!("{v:?}"))
        .unwrap_or_default();
    drop(stream);
    let chain = std::mem::take(&mut *capture.chain.lock().unwrap_or_else(|e| e.into_inner()));
    if chain.is_empty() {
        return Err(ProbeError(format!("{address} presented no certificate")));
    }
    Ok(Presented {
        chain,
        address,
        server_name,
        protocol,
    })
}

/// Would `verifier` accept what was presented, now?
pub fn check(verifier: &BmcCertVerifier, presented: &Presented) -> Result<(), CertRefusal> {
    let Some((leaf, rest)) = presented.chain.split_first() else {
        return Ok(());
    };
    let now = UnixTime::since_unix_epoch(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default(),
    );
    verifier.check_presented(leaf, rest, &presented.server_name, now)
}
