//! The companions' heartbeat, nodefence's side: one listener per replica, HTTPS for
//! the hellos ([`hello`]: a token reviewed once, a session given) and UDP on the same
//! port for the beats ([`table`]: a sealed beat in, a sealed acknowledgement out).
//! No API-server request per beat: 5,000 companions at 2 Hz are 10,000 datagrams a
//! second of a few hundred bytes each, an HMAC apiece.
//!
//! Every replica runs it (the standbys keep the table too); only the leader's
//! acknowledgements carry `leader` and so let a node feed its watchdog. A datagram that
//! does not open under a live session's key gets nothing back (a garbage sender costs
//! one failed MAC), and nothing longer than [`wire::MAX_DATAGRAM`] is read.

pub mod hello;
pub mod table;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum_server::tls_rustls::RustlsConfig;
use base64::Engine as _;
use nodefence_watchdog::timing::Timing;
use nodefence_watchdog::wire::{self, Key};
use tokio::net::{TcpListener, UdpSocket};
use tokio::time::Instant;

use crate::cluster::leader::Leadership;
use table::Table;

/// How the listener runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// TCP (HTTPS, hellos) and UDP (beats), one port.
    pub listen: SocketAddr,
    /// The companions' ServiceAccount, as a TokenReview names it.
    pub companion_user: String,
    pub timing: Timing,
    pub heartbeat_interval: Duration,
}

/// The running listener: its table, and the nodes marked for fencing.
#[derive(Clone)]
pub struct Heartbeat {
    table: Arc<Mutex<Table>>,
    marked: Arc<RwLock<BTreeSet<String>>>,
    origin: Instant,
    addr: SocketAddr,
}

impl Heartbeat {
    /// Where it listens (TCP and UDP).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// This replica's monotonic clock, as the table counts it.
    pub fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// Reads the table.
    pub fn with_table<T>(&self, f: impl FnOnce(&Table) -> T) -> T {
        f(&self.table.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Marks (or unmarks) a node: its acknowledgements say so from now on.
    pub fn set_marked(&self, node: &str, marked: bool) {
        let mut set = self.marked.write().unwrap_or_else(|e| e.into_inner());
        if marked {
            set.insert(node.to_string());
        } else {
            set.remove(node);
        }
    }
}

#[derive(Clone)]
struct HelloState {
    client: kube::Client,
    settings: Settings,
    table: Arc<Mutex<Table>>,
    port: u16,
    /// Reviews under way (each is a TokenReview): a flood of hellos costs the API
    /// server at most this many at once.
    reviews: Arc<tokio::sync::Semaphore>,
}

/// Starts the listener; it runs until `shutdown` resolves.
pub async fn start(
    settings: Settings,
    client: kube::Client,
    tls: RustlsConfig,
    leadership: Leadership,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<Heartbeat> {
    let tcp = TcpListener::bind(settings.listen).await?;
    let addr = tcp.local_addr()?;
    let udp = UdpSocket::bind(addr).await?;
    let heartbeat = Heartbeat {
        table: Arc::new(Mutex::new(Table::new(settings.timing))),
        marked: Arc::new(RwLock::new(BTreeSet::new())),
        origin: Instant::now(),
        addr,
    };
    let state = HelloState {
        client,
        settings,
        table: heartbeat.table.clone(),
        port: addr.port(),
        reviews: Arc::new(tokio::sync::Semaphore::new(8)),
    };
    let routes = axum::Router::new()
        .route(hello::PATH, post(session))
        .with_state(state);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let udp_task = tokio::spawn(serve_udp(udp, heartbeat.clone(), leadership, stop_rx));
    tokio::spawn(async move {
        let result = crate::telemetry::serve(tcp, routes, Some(tls), shutdown).await;
        let _ = stop_tx.send(true);
        udp_task.abort();
        if let Err(e) = result {
            tracing::error!(error = %e, "the companions' listener stopped");
        }
    });
    Ok(heartbeat)
}

async fn session(State(state): State<HelloState>, headers: HeaderMap) -> Response {
    let refuse = |status: StatusCode, why: String| {
        (status, Json(serde_json::json!({ "error": why }))).into_response()
    };
    let Some(token) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
    else {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "no bearer token: send the companion's projected token".into(),
        );
    };
    let Ok(_permit) = state.reviews.acquire().await else {
        return refuse(StatusCode::SERVICE_UNAVAILABLE, "shutting down".into());
    };
    let node = match hello::review(&state.client, token).await {
        Ok(status) => hello::bind(&status, &state.settings.companion_user),
        Err(e) => Err(e),
    };
    let node = match node {
        Ok(node) => node,
        Err(e @ hello::Refusal::Review(_)) => {
            tracing::warn!(error = %e, "a companion's hello could not be reviewed");
            return refuse(StatusCode::SERVICE_UNAVAILABLE, e.to_string());
        }
        Err(e) => {
            tracing::warn!(error = %e, "a companion's hello was refused");
            return refuse(StatusCode::UNAUTHORIZED, e.to_string());
        }
    };
    let mut secret = [0u8; 40];
    if let Err(e) = getrandom::fill(&mut secret) {
        return refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("no randomness for a session key: {e}"),
        );
    }
    let id = u64::from_be_bytes(secret[..8].try_into().unwrap_or([0; 8]));
    let mut key = [0u8; 32];
    key.copy_from_slice(&secret[8..]);
    state
        .table
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .open(&node, id, Key(key));
    tracing::info!(node, "a companion opened a heartbeat session");
    Json(hello::Session {
        node,
        session: id.to_string(),
        key: base64::engine::general_purpose::STANDARD.encode(key),
        heartbeat_port: state.port,
        heartbeat_interval_ms: u64::try_from(state.settings.heartbeat_interval.as_millis())
            .unwrap_or(u64::MAX),
        isolation_timeout_ms: u64::try_from(state.settings.timing.isolation_timeout.as_millis())
            .unwrap_or(u64::MAX),
    })
    .into_response()
}

async fn serve_udp(
    socket: UdpSocket,
    heartbeat: Heartbeat,
    leadership: Leadership,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    // One byte more than any datagram: a longer one is seen as longer, and dropped.
    let mut buf = [0u8; wire::MAX_DATAGRAM + 1];
    loop {
        let (len, from) = tokio::select! {
            r = socket.recv_from(&mut buf) => match r {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(error = %e, "heartbeat socket");
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        let now = heartbeat.now();
        let leader = leadership.is_leader();
        let answer = {
            let marked = heartbeat.marked.read().unwrap_or_else(|e| e.into_inner());
            heartbeat
                .table
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .beat(&buf[..len], now, leader, |n| marked.contains(n))
        };
        match answer {
            Ok((_, ack)) => {
                let _ = socket.send_to(&ack, from).await;
            }
            Err(why) => tracing::trace!(%from, why = why.as_str(), "datagram dropped"),
        }
    }
}
