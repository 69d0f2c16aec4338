//! Serving a mock's router on an already-bound listener, over HTTP or HTTPS, and the
//! mock binaries' logging: the same for the Redfish BMC and the fake API server.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum_server::tls_rustls::RustlsConfig;
use tokio::task::JoinHandle;

/// A running server: its handle (for graceful shutdown) and its task.
pub type Running = (
    axum_server::Handle<SocketAddr>,
    JoinHandle<std::io::Result<()>>,
);

/// Serves `app` on `listener` (non-blocking, already bound); HTTPS when `tls` is given.
pub fn spawn(
    listener: std::net::TcpListener,
    app: Router,
    tls: Option<rustls::ServerConfig>,
) -> std::io::Result<Running> {
    let server = axum_server::Handle::new();
    let make_service = app.into_make_service();
    let task = match tls {
        Some(config) => {
            let tls = RustlsConfig::from_config(Arc::new(config));
            let s = axum_server::tls_rustls::from_tcp_rustls(listener, tls)?.handle(server.clone());
            tokio::spawn(async move { s.serve(make_service).await })
        }
        None => {
            let s = axum_server::from_tcp(listener)?.handle(server.clone());
            tokio::spawn(async move { s.serve(make_service).await })
        }
    };
    Ok((server, task))
}

/// Logs to standard error (colour only on a terminal), filtered by `RUST_LOG`
/// (default "info"), and installs the TLS provider: what every mock binary needs first.
pub fn init_binary() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    crate::tls::install_crypto_provider();
}

/// Installs the SIGTERM and SIGINT handlers now, and returns what resolves (with the
/// signal's name) when one arrives. A mock binary installs them *before* it prints its
/// ready line: a script that stops it right after reading that line must not find the
/// default action (killed by the signal, no exit code) still in place.
pub fn shutdown_signals()
-> std::io::Result<impl std::future::Future<Output = &'static str> + Send + 'static> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        }
    })
}
