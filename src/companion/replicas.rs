//! The companion's links to nodefence's replicas: the first hello, one session per
//! replica (its addresses followed by [`super::resolve::follow`]) beating and reading
//! its acknowledgements, and the "stopping" beat of a clean stop.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use base64::Engine as _;
use nodefence_watchdog::session::CompanionEnd;
use nodefence_watchdog::wire::{self, Credential, Key, PublicKey, WatchdogState};
use tokio::net::UdpSocket;
use tokio_util::task::AbortOnDropHandle;

use super::Options;
use super::resolve::LOOKUP_TIMEOUT;
use super::shared::Shared;
use super::state::ReplicaKeys;
use crate::heartbeat::hello;

/// How often the replicas' addresses are looked up again (a rollout moves them).
pub const RESOLVE_EVERY: Duration = Duration::from_secs(30);

/// A session with one replica, ready to beat.
pub(super) struct Session {
    end: CompanionEnd,
    socket: UdpSocket,
    node: String,
}

/// The first session, from whichever replica answers first: until one does, nothing
/// is armed, and its timing is the one every replica gives.
pub(super) async fn first_hello(
    options: &Options,
    host: &str,
    port: u16,
    public_key: PublicKey,
) -> (std::net::SocketAddr, hello::Session, Session) {
    loop {
        let addresses = resolve(options, host, port).await;
        let mut last = None;
        for addr in &addresses {
            match open_session(options, host, *addr, public_key).await {
                Ok(s) => {
                    last = Some(Ok((*addr, s)));
                    break;
                }
                Err(e) => last = Some(Err(e)),
            }
        }
        match last {
            Some(Ok((addr, (hello, session)))) => return (addr, hello, session),
            Some(Err(e)) => {
                tracing::warn!(error = %format!("{e:#}"), "hello to nodefence failed; trying again in 2s");
            }
            None => tracing::warn!(%host, "no address for nodefence; trying again in 2s"),
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The replicas' addresses: the name looked up (bounded by [`LOOKUP_TIMEOUT`]), or
/// the ones given.
async fn resolve(options: &Options, host: &str, port: u16) -> Vec<std::net::SocketAddr> {
    if let Some(fixed) = &options.replicas {
        return fixed.clone();
    }
    match options.resolver.lookup(host, port, LOOKUP_TIMEOUT).await {
        Ok(found) => found,
        Err(why) => {
            tracing::warn!(%host, %why, "cannot look nodefence's replicas up");
            Vec::new()
        }
    }
}

/// Starts a link to each address of `now`; ends those whose address is gone. An empty
/// list (no lookup has found one yet) ends nothing.
pub(super) fn follow_replicas(
    options: &Arc<Options>,
    host: &str,
    now: &[std::net::SocketAddr],
    links: &mut std::collections::BTreeMap<std::net::SocketAddr, AbortOnDropHandle<bool>>,
    shared: &Arc<Shared>,
    stop: &tokio::sync::watch::Receiver<bool>,
) {
    if now.is_empty() {
        return;
    }
    links.retain(|addr, task| {
        let keep = now.contains(addr);
        if !keep {
            tracing::info!(replica = %addr, "a replica of nodefence is gone");
            task.abort();
        }
        keep
    });
    for &addr in now {
        links.entry(addr).or_insert_with(|| {
            tracing::info!(replica = %addr, "beating to a replica of nodefence");
            AbortOnDropHandle::new(tokio::spawn(link(
                options.clone(),
                host.to_string(),
                addr,
                None,
                shared.clone(),
                stop.clone(),
            )))
        });
    }
    shared.set_replicas(links.keys().copied());
}

/// A hello to the replica at `addr` (saying this companion's public key): its session,
/// and a socket for its beats.
async fn open_session(
    options: &Options,
    host: &str,
    addr: std::net::SocketAddr,
    public_key: PublicKey,
) -> anyhow::Result<(hello::Session, Session)> {
    let tls = crate::tls::client_config(&options.tls).map_err(|e| anyhow::anyhow!(e.0))?;
    let mut builder = reqwest::Client::builder()
        .user_agent(crate::cluster::USER_AGENT)
        .use_preconfigured_tls(tls)
        .timeout(Duration::from_secs(10));
    // This replica, under the name its certificate is checked against.
    if host.parse::<std::net::IpAddr>().is_err() {
        builder = builder.resolve(host, addr);
    }
    let http = builder.build().context("cannot build the HTTP client")?;
    let mut url = options.nodefence.clone();
    if host.parse::<std::net::IpAddr>().is_ok() {
        let _ = url.set_ip_host(addr.ip());
    }
    let said = hello::Request {
        boot_id: Some(options.boot_id.clone()),
        virtual_machine: options.machine.resolve().is_some(),
        public_key: Some(hello::encode_key(&public_key)),
    };
    let hello = say_hello(&http, &url, &options.token_file, &said).await?;
    let id: u64 = hello
        .session
        .parse()
        .context("the session id is not a number")?;
    let key = base64::engine::general_purpose::STANDARD
        .decode(&hello.key)
        .ok()
        .and_then(|k| <[u8; 32]>::try_from(k).ok())
        .context("the session key is not 32 bytes of base64")?;
    let bind: std::net::SocketAddr = if addr.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(bind).await?;
    socket
        .connect(std::net::SocketAddr::new(addr.ip(), hello.heartbeat_port))
        .await?;
    let session = Session {
        end: CompanionEnd::new(
            Key(key),
            id,
            Duration::from_millis(hello.isolation_timeout_ms),
        ),
        socket,
        node: hello.node.clone(),
    };
    Ok((hello, session))
}

/// Beats to one replica until `stop` (true: it acknowledged the stop), saying hello again whenever it stops
/// answering (a restarted replica has lost the session).
pub(super) async fn link(
    options: Arc<Options>,
    host: String,
    addr: std::net::SocketAddr,
    mut session: Option<Session>,
    shared: Arc<Shared>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> bool {
    // Unanswered beats after which the session is renewed.
    const UNANSWERED: u32 = 10;
    let mut buf = [0u8; wire::MAX_DATAGRAM + 1];
    loop {
        let mut s = match session.take() {
            Some(s) => s,
            None => match open_session(&options, &host, addr, shared.signing_key.public()).await {
                Ok((hello, s)) => {
                    shared.keep_replica_keys(
                        addr,
                        replica_keys_of(&hello, shared.signing_key.public()),
                    );
                    s
                }
                Err(e) => {
                    tracing::warn!(replica = %addr, error = %format!("{e:#}"), "hello failed; trying again in 2s");
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(2)) => continue,
                        // No session: this replica was told nothing of the stop.
                        _ = stop.changed() => return false,
                    }
                }
            },
        };
        s.end.set_identity(shared.identity);
        if Some(&s.node)
            != shared
                .status
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .node
                .as_ref()
        {
            tracing::error!(replica = %addr, node = %s.node, "a replica gave a session for another node: ignored");
            return false;
        }
        let mut beat = tokio::time::interval(shared.interval);
        let mut unanswered: u32 = 0;
        loop {
            tokio::select! {
                _ = beat.tick() => {
                    if unanswered >= UNANSWERED {
                        tracing::info!(replica = %addr, "no answer to {UNANSWERED} beats: saying hello again");
                        break;
                    }
                    let now = shared.now();
                    let reaching = shared.feeding().reaching(now);
                    s.end.heard_term(shared.term_seen());
                    let datagram = s.end.beat(now, reaching, shared.watchdog());
                    let _ = s.socket.send(&datagram).await;
                    unanswered += 1;
                }
                r = s.socket.recv(&mut buf) => {
                    let Ok(len) = r else { continue };
                    let received = shared.now();
                    match s.end.acknowledged(&buf[..len], received) {
                        Ok(ack) => {
                            unanswered = 0;
                            shared.told_cluster(ack.cluster);
                            shared.acknowledged_by(addr, ack.beat_sent);
                            take(&shared, &mut s, ack, received);
                        }
                        Err(why) => tracing::debug!(%why, "datagram dropped"),
                    }
                }
                _ = stop.changed() => return stop_acknowledged(&shared, &mut s, addr).await,
            }
        }
    }
}

/// An acknowledgement taken: only a leader's (of a term no older than one taken
/// before) tells the feeding rule anything, the mark included. A standby's, or an
/// old leader's that kept believing it led (its VM paused and resumed), is never
/// taken for the leader's: such a replica could mark a node the leader just lifted,
/// or feed one the leader proves reset.
fn take(
    shared: &Shared,
    s: &mut Session,
    ack: nodefence_watchdog::session::Acknowledged,
    received: std::time::Duration,
) {
    if !ack.leader {
        shared.status().acknowledged += 1;
        return;
    }
    if !shared.take_term(ack.term) {
        let seen = shared.term_seen();
        shared.status().older_terms_refused += 1;
        tracing::debug!(
            term = ack.term,
            seen,
            "a leader's acknowledgement of an older term than one taken: refused"
        );
        return;
    }
    s.end.heard_term(ack.term);
    shared.told_arm(ack.arm);
    let (was, marked) = {
        let mut feeding = shared.feeding();
        let was = feeding.marked();
        feeding.acknowledged(ack.beat_sent, ack.marked, received);
        (was, feeding.marked())
    };
    if !ack.marked {
        shared.heard_leader(ack.beat_sent);
    }
    let mut st = shared.status();
    st.acknowledged += 1;
    st.marked = marked;
    st.arm_wanted = Some(ack.arm);
    st.term_seen = shared.term_seen();
    drop(st);
    if marked && !was {
        tracing::warn!("nodefence marked this node for fencing: the watchdog is no longer fed");
    } else if was && !marked {
        tracing::warn!(
            "nodefence lifted this node's fencing mark (it recovered, or this is its next boot): feeding the watchdog again"
        );
    }
}

/// At a clean stop: beats "stopping" to the replica until it acknowledges one (a few
/// tries, 200 ms apart). Only a replica that acknowledged it knows this watchdog no
/// longer counts; one that did not still holds it armed and could release the node on
/// it, so the watchdog is then left running ([`run`](super::run)).
async fn stop_acknowledged(shared: &Shared, s: &mut Session, addr: std::net::SocketAddr) -> bool {
    const TRIES: u32 = 5;
    const APART: Duration = Duration::from_millis(200);
    let mut buf = [0u8; wire::MAX_DATAGRAM + 1];
    let first = shared.now();
    for _ in 0..TRIES {
        let now = shared.now();
        let reaching = shared.feeding().reaching(now);
        s.end.heard_term(shared.term_seen());
        let stopping = s.end.beat(now, reaching, WatchdogState::Stopping);
        let _ = s.socket.send(&stopping).await;
        let deadline = tokio::time::Instant::now() + APART;
        while let Ok(Ok(len)) = tokio::time::timeout_at(deadline, s.socket.recv(&mut buf)).await {
            if let Ok(ack) = s.end.acknowledged(&buf[..len], shared.now())
                && ack.beat_sent >= first
            {
                return true;
            }
        }
    }
    tracing::warn!(replica = %addr, "the replica did not acknowledge the stop");
    false
}

/// What a hello gave for the peers (`None`: no well-formed peer key): the authority
/// key, if well-formed, and the credential, if that authority signed it for the node
/// the hello names and this companion's key `own`.
pub(super) fn replica_keys_of(hello: &hello::Session, own: PublicKey) -> Option<ReplicaKeys> {
    let peer = peer_key_of(hello)?;
    let authority = hello.authority_key.as_deref().and_then(|encoded| {
        let key = hello::decode_key(encoded);
        if key.is_none() {
            tracing::warn!("the hello's authority key is not 32 bytes of base64: ignored");
        }
        key
    });
    let credential = match (&hello.credential, authority) {
        (Some(encoded), Some(authority)) => {
            let credential = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .ok()
                .and_then(|c| Credential::open(&c, &[authority]).ok())
                .filter(|c| c.node() == hello.node && c.subject == own);
            if credential.is_none() {
                tracing::warn!(
                    "the hello's credential is not its authority's for this node and key: \
                     this companion cannot answer its peers under it"
                );
            }
            credential
        }
        _ => None,
    };
    Some(ReplicaKeys {
        peer,
        authority,
        credential,
    })
}

/// The peer key a hello gave, if it gave a well-formed one.
fn peer_key_of(hello: &hello::Session) -> Option<Key> {
    let encoded = hello.peer_key.as_ref()?;
    match base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()
        .and_then(|k| <[u8; 32]>::try_from(k).ok())
    {
        Some(k) => Some(Key(k)),
        None => {
            tracing::warn!(
                "the hello's peer key is not 32 bytes of base64: the peers' answers cannot count"
            );
            None
        }
    }
}

async fn say_hello(
    http: &reqwest::Client,
    nodefence: &url::Url,
    token_file: &std::path::Path,
    said: &hello::Request,
) -> anyhow::Result<hello::Session> {
    let token = std::fs::read_to_string(token_file)
        .with_context(|| format!("cannot read the token {}", token_file.display()))?;
    let url = nodefence
        .join(hello::PATH)
        .context("the --nodefence URL cannot take a path")?;
    let answer = http
        .post(url)
        .bearer_auth(token.trim())
        .json(said)
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
