//! UDP to one BMC: a lazily opened, connected socket and the request/reply exchange
//! every IPMI message goes through.
//!
//! An exchange sends a datagram, then waits for the one reply its `judge` accepts.
//! Everything else that arrives meanwhile (garbage, other sessions, replays, replies
//! to earlier requests) is discarded, counted and logged at debug level: it never
//! completes the exchange. Idempotent requests are resent, freshly built each time
//! (new session sequence number, new IV), every `retransmit` until the request
//! timeout; the others are sent exactly once. The operation deadline bounds it all,
//! including the wait for a permit of the shared limiter.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::sync::Semaphore;
use tokio::time::{Instant, timeout_at};

use crate::power::PowerError;

/// Largest datagram read; IPMI replies nodefence asks for are far smaller, and a
/// longer one is truncated and then fails to decode (and is discarded).
const MAX_DATAGRAM: usize = 2048;

/// What a judge says about one received datagram.
pub(crate) enum Verdict<T> {
    /// The reply: the exchange is over.
    Accept(T),
    /// Not the reply (why, for the debug log); keep waiting.
    Discard(String),
    /// The reply, and it says the operation failed; no point waiting for another.
    Fail(PowerError),
}

/// When to send and how long to wait.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    /// Give up this long after the first send (capped by `deadline`).
    pub request_timeout: Duration,
    /// Resend this often; `None`: send once (non-idempotent requests).
    pub retransmit: Option<Duration>,
    /// The operation deadline.
    pub deadline: Instant,
}

/// Why an exchange ended without a reply.
#[derive(Debug)]
pub(crate) enum ExchangeError {
    /// Nothing acceptable arrived in time.
    NoAnswer {
        attempts: u32,
        /// The host answered ICMP port unreachable at least once.
        refused: bool,
        /// How many datagrams were discarded while waiting.
        discarded: u32,
    },
    /// Building the request failed, the judge failed the reply, or the deadline passed
    /// before anything could be sent.
    Failed(PowerError),
}

impl ExchangeError {
    /// The error for a caller, `what` naming the request.
    pub(crate) fn into_power_error(self, what: &str) -> PowerError {
        match self {
            ExchangeError::Failed(e) => e,
            ExchangeError::NoAnswer {
                attempts,
                refused,
                discarded,
            } => {
                let mut msg = format!(
                    "no answer to {what} after {attempts} attempt{}",
                    if attempts == 1 { "" } else { "s" }
                );
                if refused {
                    msg.push_str(
                        "; the host answered ICMP port unreachable: nothing listens on that UDP \
                         port (check the address and port, and that IPMI over LAN is enabled)",
                    );
                } else {
                    msg.push_str("; check that the BMC is powered and reachable over UDP, and that IPMI over LAN is enabled");
                }
                if discarded > 0 {
                    msg.push_str(&format!(
                        " ({discarded} unusable datagram{} discarded)",
                        if discarded == 1 { "" } else { "s" }
                    ));
                }
                PowerError::unreachable(msg)
            }
        }
    }
}

/// The UDP side of one BMC.
pub(crate) struct Transport {
    address: String,
    port: u16,
    connect_timeout: Duration,
    limiter: Arc<Semaphore>,
    socket: Option<UdpSocket>,
    /// Datagrams discarded over the driver's lifetime (for tests and debugging).
    discarded_total: u64,
}

impl Transport {
    pub(crate) fn new(
        address: String,
        port: u16,
        connect_timeout: Duration,
        limiter: Arc<Semaphore>,
    ) -> Self {
        Self {
            address,
            port,
            connect_timeout,
            limiter,
            socket: None,
            discarded_total: 0,
        }
    }

    pub(crate) fn discarded_total(&self) -> u64 {
        self.discarded_total
    }

    /// Forgets the socket; the next exchange resolves the address again.
    pub(crate) fn reset(&mut self) {
        self.socket = None;
    }

    /// The connected socket, opened (name resolved, first address) on first use.
    async fn socket(&mut self, deadline: Instant) -> Result<&UdpSocket, PowerError> {
        if self.socket.is_none() {
            let resolve_by = deadline.min(Instant::now() + self.connect_timeout);
            let host = self.address.trim_start_matches('[').trim_end_matches(']');
            let addrs: Vec<SocketAddr> =
                match timeout_at(resolve_by, tokio::net::lookup_host((host, self.port))).await {
                    Ok(Ok(addrs)) => addrs.collect(),
                    Ok(Err(e)) => {
                        return Err(PowerError::unreachable(format!(
                            "cannot resolve BMC address {:?}: {e}",
                            self.address
                        )));
                    }
                    Err(_) => {
                        return Err(PowerError::unreachable(format!(
                            "resolving BMC address {:?} timed out",
                            self.address
                        )));
                    }
                };
            let Some(&peer) = addrs.first() else {
                return Err(PowerError::unreachable(format!(
                    "BMC address {:?} resolves to no address",
                    self.address
                )));
            };
            let local: SocketAddr = if peer.is_ipv4() {
                SocketAddr::from(([0, 0, 0, 0], 0))
            } else {
                SocketAddr::from(([0u16; 8], 0))
            };
            let socket = UdpSocket::bind(local)
                .await
                .map_err(|e| PowerError::unreachable(format!("cannot open a UDP socket: {e}")))?;
            socket
                .connect(peer)
                .await
                .map_err(|e| PowerError::unreachable(format!("cannot reach BMC at {peer}: {e}")))?;
            tracing::debug!(address = %self.address, %peer, "IPMI socket opened");
            self.socket = Some(socket);
        }
        self.socket
            .as_ref()
            .ok_or_else(|| PowerError::unreachable("internal: IPMI socket missing"))
    }

    /// Sends one datagram without waiting for anything (Close Session of a session we
    /// abandon). Errors are only logged.
    pub(crate) async fn send_only(&mut self, datagram: &[u8], deadline: Instant) {
        match self.socket(deadline).await {
            Ok(socket) => {
                if let Err(e) = socket.send(datagram).await {
                    tracing::debug!(error = %e, "IPMI datagram not sent");
                }
            }
            Err(e) => tracing::debug!(error = %e.message, "IPMI datagram not sent"),
        }
    }

    /// Sends `build(state)` and waits for the datagram `judge(state, ..)` accepts,
    /// resending per `plan`. `state` is lent to both so they can share mutable session
    /// state (sequence numbers out, the window in).
    pub(crate) async fn exchange<S, T>(
        &mut self,
        state: &mut S,
        mut build: impl FnMut(&mut S) -> Result<Vec<u8>, PowerError>,
        mut judge: impl FnMut(&mut S, &[u8]) -> Verdict<T>,
        plan: Plan,
    ) -> Result<T, ExchangeError> {
        let limiter = self.limiter.clone();
        let _permit = match timeout_at(plan.deadline, limiter.acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => {
                return Err(ExchangeError::Failed(PowerError::unreachable(
                    "shutting down",
                )));
            }
            Err(_) => {
                return Err(ExchangeError::Failed(PowerError::unreachable(
                    "operation deadline passed while waiting for a free request slot (too many BMC requests in flight)",
                )));
            }
        };
        let end = plan.deadline.min(Instant::now() + plan.request_timeout);
        self.socket(plan.deadline)
            .await
            .map_err(ExchangeError::Failed)?;
        let Some(socket) = self.socket.as_ref() else {
            return Err(ExchangeError::Failed(PowerError::unreachable(
                "internal: IPMI socket missing",
            )));
        };
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let (mut attempts, mut refused, mut discarded) = (0u32, false, 0u32);
        loop {
            if Instant::now() >= end {
                break;
            }
            let datagram = build(state).map_err(ExchangeError::Failed)?;
            attempts += 1;
            if let Err(e) = socket.send(&datagram).await {
                refused |= e.kind() == std::io::ErrorKind::ConnectionRefused;
                tracing::debug!(error = %e, "IPMI send failed");
            }
            let resend_at = match plan.retransmit {
                Some(every) => end.min(Instant::now() + every),
                None => end,
            };
            // The clock is checked on every datagram: a flood that is always ready to
            // read must not keep the wait going past its end.
            while Instant::now() < resend_at {
                let received = match timeout_at(resend_at, socket.recv(&mut buf)).await {
                    Err(_) => break,
                    Ok(Err(e)) => {
                        refused |= e.kind() == std::io::ErrorKind::ConnectionRefused;
                        tracing::debug!(error = %e, "IPMI receive failed");
                        // A pending ICMP error is reported once; do not spin on others.
                        if e.kind() != std::io::ErrorKind::ConnectionRefused {
                            tokio::time::sleep_until(resend_at).await;
                        }
                        continue;
                    }
                    Ok(Ok(n)) => buf.get(..n).unwrap_or_default(),
                };
                match judge(state, received) {
                    Verdict::Accept(reply) => {
                        self.discarded_total += u64::from(discarded);
                        return Ok(reply);
                    }
                    Verdict::Discard(why) => {
                        discarded += 1;
                        tracing::debug!(len = received.len(), reason = %why, "IPMI datagram discarded");
                    }
                    Verdict::Fail(e) => {
                        self.discarded_total += u64::from(discarded);
                        return Err(ExchangeError::Failed(e));
                    }
                }
            }
            if plan.retransmit.is_none() {
                break;
            }
        }
        self.discarded_total += u64::from(discarded);
        if attempts == 0 {
            return Err(ExchangeError::Failed(PowerError::unreachable(
                "the operation deadline passed before the request could be sent",
            )));
        }
        Err(ExchangeError::NoAnswer {
            attempts,
            refused,
            discarded,
        })
    }
}
