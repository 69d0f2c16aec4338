//! The certificate `/metrics` is served with over TLS: from PEM files
//! (`--metrics-cert-file`/`--metrics-key-file`, e.g. a cert-manager Certificate's
//! Secret mounted in the pod), read again whenever either file changes, so a renewed
//! certificate is served without a restart; or, without files, a self-signed one
//! made at start-up (ECDSA P-256, logged with its SHA-256 fingerprint), as
//! controller-runtime does: the scrape's bearer token is what is checked, and a
//! Prometheus that must verify the server mounts a real certificate instead.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::tls::CertFingerprint;

/// How often the certificate files are checked for a change.
pub const FILE_CHECK_INTERVAL: Duration = Duration::from_secs(10);

/// Where the serving certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertificateSource {
    /// Made at start-up, self-signed.
    SelfSigned,
    /// PEM files: the certificate (chain) and its private key.
    Files { cert: PathBuf, key: PathBuf },
}

#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: no PEM certificate in it (expected \"-----BEGIN CERTIFICATE-----\")", path.display())]
    NoCertificate { path: PathBuf },
    #[error("{}: no PEM private key in it (PKCS#8, PKCS#1 or SEC1)", path.display())]
    NoKey { path: PathBuf },
    #[error("{} and {} do not make a usable TLS identity: {message}", cert.display(), key.display())]
    Unusable {
        cert: PathBuf,
        key: PathBuf,
        message: String,
    },
    #[error("cannot make a self-signed certificate: {0}")]
    SelfSigned(String),
}

/// A server configuration from a certificate chain and its key (HTTP/1.1).
fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<ServerConfig, String> {
    let mut config = ServerConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| e.to_string())?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The configuration from the PEM files, and the fingerprint of the leaf.
pub fn from_files(
    cert: &Path,
    key: &Path,
) -> Result<(ServerConfig, CertFingerprint), CertificateError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|source| CertificateError::Read {
            path: path.to_owned(),
            source,
        })
    };
    let cert_pem = read(cert)?;
    let key_pem = read(key)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .filter_map(Result::ok)
        .collect();
    let Some(leaf) = chain.first() else {
        return Err(CertificateError::NoCertificate {
            path: cert.to_owned(),
        });
    };
    let fingerprint = CertFingerprint::of(leaf);
    let private_key =
        PrivateKeyDer::from_pem_slice(&key_pem).map_err(|_| CertificateError::NoKey {
            path: key.to_owned(),
        })?;
    let config =
        server_config(chain, private_key).map_err(|message| CertificateError::Unusable {
            cert: cert.to_owned(),
            key: key.to_owned(),
            message,
        })?;
    Ok((config, fingerprint))
}

/// A self-signed certificate for `names` (DNS names or IP addresses), and its
/// fingerprint.
pub fn self_signed(
    names: Vec<String>,
) -> Result<(ServerConfig, CertFingerprint), CertificateError> {
    let certified = rcgen::generate_simple_self_signed(names)
        .map_err(|e| CertificateError::SelfSigned(e.to_string()))?;
    let der = certified.cert.der().clone();
    let fingerprint = CertFingerprint::of(&der);
    let key = PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let config = server_config(vec![der], key).map_err(CertificateError::SelfSigned)?;
    Ok((config, fingerprint))
}

/// The names a self-signed certificate is made for: `localhost`, this host's name,
/// and the pod's IP address when the Downward API gives it (`POD_IP`).
pub fn self_signed_names() -> Vec<String> {
    let mut names = vec!["localhost".to_owned()];
    for var in ["HOSTNAME", "POD_IP"] {
        if let Ok(value) = std::env::var(var)
            && !value.trim().is_empty()
            && !names.contains(&value)
        {
            names.push(value.trim().to_owned());
        }
    }
    names
}

/// The configuration for `source`, logged with its fingerprint and `what` it serves.
pub fn load(source: &CertificateSource, what: &str) -> Result<ServerConfig, CertificateError> {
    let (config, fingerprint) = match source {
        CertificateSource::SelfSigned => self_signed(self_signed_names())?,
        CertificateSource::Files { cert, key } => from_files(cert, key)?,
    };
    match source {
        CertificateSource::SelfSigned => {
            tracing::info!(%fingerprint, "serving {what} with a self-signed certificate made at start-up");
        }
        CertificateSource::Files { cert, .. } => {
            tracing::info!(%fingerprint, file = %cert.display(), "serving {what} with the certificate from file");
        }
    }
    Ok(config)
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Reads the files again whenever either changes (every [`FILE_CHECK_INTERVAL`]),
/// and gives each new configuration to `apply`. A pair that does not load (a
/// renewal caught half-written) keeps the one in use, logged, and is tried again.
/// Runs until dropped.
pub async fn follow_files(cert: PathBuf, key: PathBuf, apply: impl Fn(Arc<ServerConfig>)) {
    let stamp = || (modified(&cert), modified(&key));
    let mut seen = stamp();
    let mut interval = tokio::time::interval(FILE_CHECK_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    interval.tick().await;
    loop {
        interval.tick().await;
        let now = stamp();
        if now == seen {
            continue;
        }
        match from_files(&cert, &key) {
            Ok((config, fingerprint)) => {
                seen = now;
                apply(Arc::new(config));
                tracing::info!(%fingerprint, file = %cert.display(), "metrics certificate changed on disk: serving the new one");
            }
            Err(e) => {
                tracing::warn!(error = %e, "metrics certificate changed on disk but does not load; still serving the previous one");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn write_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf, CertFingerprint) {
        let certified = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
        let cert = dir.join("tls.crt");
        let key = dir.join("tls.key");
        std::fs::write(&cert, certified.cert.pem()).unwrap();
        std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
        (cert, key, CertFingerprint::of(certified.cert.der()))
    }

    #[test]
    fn files_load_and_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key, fingerprint) = write_pair(dir.path(), "nodefence");
        let (_, loaded) = from_files(&cert, &key).unwrap();
        assert_eq!(loaded, fingerprint);

        let missing = dir.path().join("absent.crt");
        let e = from_files(&missing, &key).unwrap_err().to_string();
        assert!(e.contains("absent.crt"), "{e}");

        // The key where the certificate should be, and the other way round.
        let e = from_files(&key, &key).unwrap_err().to_string();
        assert!(
            e.contains("tls.key") && e.contains("no PEM certificate"),
            "{e}"
        );
        let e = from_files(&cert, &cert).unwrap_err().to_string();
        assert!(
            e.contains("tls.crt") && e.contains("no PEM private key"),
            "{e}"
        );

        // A key that is not the certificate's.
        let other = tempfile::tempdir().unwrap();
        let (_, other_key, _) = write_pair(other.path(), "other");
        let e = from_files(&cert, &other_key).unwrap_err().to_string();
        assert!(e.contains("do not make a usable TLS identity"), "{e}");
    }

    #[test]
    fn a_self_signed_certificate_is_made_for_the_names() {
        let (config, _) = self_signed(vec!["localhost".into(), "10.0.0.7".into()]).unwrap();
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewed_certificate_is_applied_and_a_broken_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key, _) = write_pair(dir.path(), "first");
        let applied = Arc::new(std::sync::Mutex::new(0usize));
        let counter = applied.clone();
        let follower = tokio::spawn(follow_files(cert.clone(), key.clone(), move |_| {
            *counter.lock().unwrap() += 1;
        }));
        let settle = || async {
            for _ in 0..3 {
                tokio::time::advance(FILE_CHECK_INTERVAL).await;
                tokio::task::yield_now().await;
            }
        };
        settle().await;
        assert_eq!(*applied.lock().unwrap(), 0, "nothing changed yet");
        // Half a renewal: a certificate whose key is not there yet.
        std::fs::write(&key, "not a key").unwrap();
        settle().await;
        assert_eq!(*applied.lock().unwrap(), 0, "a broken pair is not applied");
        write_pair(dir.path(), "second");
        // Some filesystems keep whole-second times: make the change visible.
        let later = SystemTime::now() + Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(&cert)
            .unwrap()
            .set_modified(later)
            .unwrap();
        settle().await;
        assert_eq!(
            *applied.lock().unwrap(),
            1,
            "the renewed pair is applied once"
        );
        follower.abort();
    }
}
