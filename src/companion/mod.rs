//! `nodefence companion`: the per-node agent of hardware-watchdog fencing.
//!
//! It says hello to nodefence (its projected ServiceAccount token, over TLS to a
//! certificate it trusts: [`crate::heartbeat::hello`]), arms the node's hardware
//! watchdog ([`nodefence_watchdog::device`]), beats every `heartbeat_interval` (500 ms)
//! and feeds the watchdog only while its feeding rule allows
//! ([`nodefence_watchdog::feeding`]): here, while the leader's acknowledgement of a
//! beat sent less than `isolation_timeout` ago holds and carries no mark. An
//! acknowledgement with the mark stops feeding at once and for good (the poison pill).
//! A clean stop first beats "stopping" (this node's watchdog no longer counts), then
//! disarms with the magic close; under `nowayout` it says that the next pod must take
//! over within the watchdog's timeout.
//!
//! Not yet here (issue 36's next steps): the API server's answer on the mark and the
//! peers' answers as the other two bases of the rule, beats to every replica (today:
//! the one address given).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use base64::Engine as _;
use nodefence_watchdog::device::{self, Disarmed, Watchdog};
use nodefence_watchdog::feeding::Feeding;
use nodefence_watchdog::session::CompanionEnd;
use nodefence_watchdog::timing::Timing;
use nodefence_watchdog::wire::{self, Key, WatchdogState};
use tokio::net::UdpSocket;
use tokio::time::Instant;

use crate::heartbeat::hello;

/// The longest watchdog timeout accepted: beyond it a release would wait minutes.
pub const MAX_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the companion decides whether to feed.
const FEED_EVERY: Duration = Duration::from_millis(100);

/// Which watchdog to arm.
pub enum WatchdogChoice {
    /// A device (`/dev/watchdog`), with the timeout asked.
    Device {
        path: PathBuf,
        timeout: Duration,
        allow_softdog: bool,
    },
    /// None: the companion beats, and nothing rests on a watchdog.
    None,
    /// One already open (tests).
    Given(Box<dyn Watchdog>),
}

/// How the companion runs.
pub struct Options {
    /// nodefence's companion listener, `https://host:port`.
    pub nodefence: url::Url,
    /// How nodefence's certificate is trusted.
    pub tls: crate::config::TlsSettings,
    /// The projected token (read again for every hello: the kubelet rotates it).
    pub token_file: PathBuf,
    pub watchdog: WatchdogChoice,
}

/// What the companion reports while it runs (tests and logs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    pub node: Option<String>,
    pub acknowledged: u64,
    pub marked: bool,
    /// The device's identity and granted timeout, when armed.
    pub armed: Option<(String, Duration)>,
    pub feeding: bool,
}

/// Runs until `shutdown` resolves; `status` follows what it does.
pub async fn run(
    options: Options,
    status: Arc<std::sync::Mutex<Status>>,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<Option<Disarmed>> {
    crate::tls::install_crypto_provider();
    let tls = crate::tls::client_config(&options.tls).map_err(|e| anyhow::anyhow!(e.0))?;
    let http = reqwest::Client::builder()
        .user_agent(crate::cluster::USER_AGENT)
        .use_preconfigured_tls(tls)
        .timeout(Duration::from_secs(10))
        .build()
        .context("cannot build the HTTP client")?;
    let origin = Instant::now();
    let now = || origin.elapsed();
    // The session first: until nodefence answers, nothing is armed.
    let session = loop {
        match say_hello(&http, &options).await {
            Ok(s) => break s,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "hello to nodefence failed; trying again in 2s");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    };
    let timing = Timing {
        isolation_timeout: Duration::from_millis(session.isolation_timeout_ms),
        ..Timing::default()
    };
    let interval = Duration::from_millis(session.heartbeat_interval_ms.max(50));
    let id: u64 = session
        .session
        .parse()
        .context("the session id is not a number")?;
    let key = base64::engine::general_purpose::STANDARD
        .decode(&session.key)
        .ok()
        .and_then(|k| <[u8; 32]>::try_from(k).ok())
        .context("the session key is not 32 bytes of base64")?;
    let mut end = CompanionEnd::new(Key(key), id, timing.isolation_timeout);
    let mut feeding = Feeding::new(&timing);
    let mut watchdog = arm(options.watchdog)?;
    let host = options
        .nodefence
        .host_str()
        .context("no host in --nodefence")?;
    let socket = UdpSocket::bind(("0.0.0.0", 0)).await?;
    socket.connect((host, session.heartbeat_port)).await?;
    {
        let mut s = status.lock().unwrap_or_else(|e| e.into_inner());
        s.node = Some(session.node.clone());
        s.armed = watchdog
            .as_ref()
            .map(|w| (w.info().identity.clone(), w.granted()));
    }
    tracing::info!(node = %session.node, armed = watchdog.is_some(), "companion beating");
    let state = |w: &Option<Box<dyn Watchdog>>| match w {
        Some(w) => WatchdogState::Armed {
            granted: w.granted(),
        },
        None => WatchdogState::None,
    };
    let mut beat = tokio::time::interval(interval);
    let mut feed = tokio::time::interval(FEED_EVERY);
    let mut buf = [0u8; wire::MAX_DATAGRAM + 1];
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            _ = beat.tick() => {
                let datagram = end.beat(now(), feeding.reaching(now()), state(&watchdog));
                let _ = socket.send(&datagram).await;
            }
            _ = feed.tick() => {
                let may = feeding.may_feed(now()).is_some();
                if may && let Some(w) = watchdog.as_mut() && let Err(e) = w.feed() {
                    tracing::error!(error = %e, "cannot feed the watchdog");
                }
                status.lock().unwrap_or_else(|e| e.into_inner()).feeding = may;
            }
            r = socket.recv(&mut buf) => {
                let Ok(len) = r else { continue };
                let received = now();
                match end.acknowledged(&buf[..len], received) {
                    Ok(ack) => {
                        if ack.leader || ack.marked {
                            feeding.acknowledged(ack.beat_sent, ack.marked, received);
                        }
                        let mut s = status.lock().unwrap_or_else(|e| e.into_inner());
                        s.acknowledged += 1;
                        s.marked |= ack.marked;
                        if ack.marked {
                            tracing::warn!("nodefence marked this node for fencing: the watchdog is no longer fed");
                        }
                    }
                    Err(why) => tracing::debug!(%why, "datagram dropped"),
                }
            }
            () = &mut shutdown => break,
        }
    }
    // A clean stop: tell nodefence this watchdog no longer counts, then disarm.
    let last = end.beat(now(), feeding.reaching(now()), WatchdogState::Stopping);
    let _ = socket.send(&last).await;
    let Some(w) = watchdog else {
        return Ok(None);
    };
    let disarmed = w.disarm().context("cannot disarm the watchdog")?;
    if disarmed == Disarmed::StillRunning {
        tracing::warn!(
            "the watchdog cannot be stopped (nowayout): the next companion must start feeding \
             it within its timeout, or the machine is reset"
        );
    }
    Ok(Some(disarmed))
}

async fn say_hello(http: &reqwest::Client, options: &Options) -> anyhow::Result<hello::Session> {
    let token = std::fs::read_to_string(&options.token_file)
        .with_context(|| format!("cannot read the token {}", options.token_file.display()))?;
    let url = options
        .nodefence
        .join(hello::PATH)
        .context("the --nodefence URL cannot take a path")?;
    let answer = http
        .post(url)
        .bearer_auth(token.trim())
        .send()
        .await
        .context("nodefence did not answer")?;
    let status = answer.status();
    if !status.is_success() {
        let body = answer.text().await.unwrap_or_default();
        anyhow::bail!(
            "nodefence refused the hello ({status}): {}",
            crate::untrusted::text(&body, 400)
        );
    }
    answer
        .json::<hello::Session>()
        .await
        .context("nodefence's answer is not a session")
}

/// Opens the watchdog asked for, refusing one the rule cannot count on.
fn arm(choice: WatchdogChoice) -> anyhow::Result<Option<Box<dyn Watchdog>>> {
    match choice {
        WatchdogChoice::None => Ok(None),
        WatchdogChoice::Given(w) => Ok(Some(w)),
        WatchdogChoice::Device {
            path,
            timeout,
            allow_softdog,
        } => open_device(&path, timeout, allow_softdog),
    }
}

#[cfg(target_os = "linux")]
fn open_device(
    path: &std::path::Path,
    timeout: Duration,
    allow_softdog: bool,
) -> anyhow::Result<Option<Box<dyn Watchdog>>> {
    let w = match device::LinuxWatchdog::open(path, timeout) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(device = %path.display(), error = %e, "no watchdog: beating without one");
            return Ok(None);
        }
    };
    if let Err(refusal) = device::check(
        w.info(),
        timeout,
        w.granted(),
        MAX_WATCHDOG_TIMEOUT,
        allow_softdog,
    ) {
        let boxed: Box<dyn Watchdog> = Box::new(w);
        let _ = boxed.disarm();
        tracing::warn!(device = %path.display(), %refusal, "watchdog refused: beating without one");
        return Ok(None);
    }
    Ok(Some(Box::new(w)))
}

#[cfg(not(target_os = "linux"))]
fn open_device(
    path: &std::path::Path,
    _timeout: Duration,
    _allow_softdog: bool,
) -> anyhow::Result<Option<Box<dyn Watchdog>>> {
    tracing::warn!(device = %path.display(), "no watchdog support on this system");
    Ok(None)
}
