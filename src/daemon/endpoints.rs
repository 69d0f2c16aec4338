//! The daemon's two listeners: the probes (`/healthz`, `/readyz`: plain HTTP, open)
//! and `/metrics` (HTTPS, each scrape's token reviewed by the API server; or plain
//! and open with `--metrics-secure=false`), started together and stopped together.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use axum_server::tls_rustls::RustlsConfig;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::task::AbortOnDropHandle;

use crate::telemetry::access::{KubeReviewer, ScrapeAccess};
use crate::telemetry::certificate::{self, CertificateSource};
use crate::telemetry::{self, Health, Metrics};

/// Where and how `/metrics` is served.
#[derive(Debug, Clone)]
pub struct MetricsEndpoint {
    pub listen: SocketAddr,
    /// `Some`: HTTPS with this certificate, and only to bearer tokens the API server
    /// authenticates (TokenReview) and authorizes for `get /metrics`
    /// (SubjectAccessReview). `None`: plain HTTP to anyone (`--metrics-secure=false`).
    pub secure: Option<CertificateSource>,
}

impl MetricsEndpoint {
    /// Guarded, with a self-signed certificate.
    pub fn secure(listen: SocketAddr) -> Self {
        Self {
            listen,
            secure: Some(CertificateSource::SelfSigned),
        }
    }

    /// Plain HTTP, open: for tests, the demo, and a daemon run by hand.
    pub fn plain(listen: SocketAddr) -> Self {
        Self {
            listen,
            secure: None,
        }
    }
}

/// The running listeners; [`Endpoints::stop`] ends them (so does dropping).
pub struct Endpoints {
    stop: watch::Sender<bool>,
    tasks: Vec<AbortOnDropHandle<std::io::Result<()>>>,
    _certificate_follower: Option<AbortOnDropHandle<()>>,
}

async fn bind(addr: SocketAddr, what: &str) -> anyhow::Result<TcpListener> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} for {what}"))?;
    tracing::info!(address = %listener.local_addr()?, "serving {what}");
    Ok(listener)
}

impl Endpoints {
    /// Binds both listeners (an error names the address) and serves them.
    pub async fn start(
        health_listen: SocketAddr,
        metrics_endpoint: &MetricsEndpoint,
        metrics: Arc<Metrics>,
        health: Health,
        client: &kube::Client,
    ) -> anyhow::Result<Self> {
        let health_listener = bind(health_listen, "/healthz and /readyz (HTTP)").await?;
        let (tls, access, follower) = match &metrics_endpoint.secure {
            Some(source) => {
                let config = certificate::load(source, "/metrics").context(
                    "cannot set up TLS for /metrics (--metrics-cert-file, --metrics-key-file)",
                )?;
                let tls = RustlsConfig::from_config(Arc::new(config));
                let follower = follow(source, &tls);
                let reviewer = Arc::new(KubeReviewer::new(client.clone()));
                (
                    Some(tls),
                    Some(Arc::new(ScrapeAccess::new(reviewer))),
                    follower,
                )
            }
            None => {
                tracing::warn!(
                    "serving /metrics in plain HTTP to anyone (--metrics-secure=false): node names and BMC addresses are readable by every client that reaches the port"
                );
                (None, None, None)
            }
        };
        let what = if tls.is_some() {
            "/metrics (HTTPS; bearer tokens reviewed by the API server)"
        } else {
            "/metrics (HTTP, unauthenticated)"
        };
        let metrics_listener = bind(metrics_endpoint.listen, what).await?;
        let (stop, stopped) = watch::channel(false);
        let until_stopped = |mut rx: watch::Receiver<bool>| async move {
            // Err only when the sender is gone: stop then too.
            let _ = rx.wait_for(|stop| *stop).await;
        };
        let tasks = vec![
            AbortOnDropHandle::new(tokio::spawn(telemetry::serve(
                health_listener,
                telemetry::health_routes(health),
                None,
                until_stopped(stopped.clone()),
            ))),
            AbortOnDropHandle::new(tokio::spawn(telemetry::serve(
                metrics_listener,
                telemetry::metrics_routes(metrics, access),
                tls,
                until_stopped(stopped),
            ))),
        ];
        Ok(Self {
            stop,
            tasks,
            _certificate_follower: follower,
        })
    }

    /// Stops accepting, lets open requests finish (a few seconds at most).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// Follows a certificate read from files (a renewal is served without a restart).
pub(crate) fn follow(
    source: &CertificateSource,
    tls: &RustlsConfig,
) -> Option<AbortOnDropHandle<()>> {
    match source {
        CertificateSource::Files { cert, key } => {
            let reload = tls.clone();
            Some(AbortOnDropHandle::new(tokio::spawn(
                certificate::follow_files(cert.clone(), key.clone(), move |config| {
                    reload.reload_from_config(config)
                }),
            )))
        }
        CertificateSource::SelfSigned => None,
    }
}
