//! The feeding rule's third basis: the peers. While neither the leader nor the API
//! server answers, a companion asks every other companion, peer to peer over UDP,
//! whether it reaches either; when a strict majority of the cluster (itself included)
//! reaches neither, the whole control plane is out, not this node alone, and it may
//! go on feeding its watchdog
//! ([`nodefence_watchdog::feeding::Feeding::peers_answered`]). A node cut off alone,
//! or with a minority, hears "the leader" or "the API server" from the rest, or
//! nothing, and stops feeding: its watchdog resets it.
//!
//! - **Who the peers are**: the addresses a name gives (the headless Service
//!   `nodefence-companion-peers`, every companion pod, ready or not), looked up again
//!   every [`RESOLVE_EVERY`] by a task of its own ([`super::resolve::follow`]); a
//!   failed, empty or hung lookup (the cluster's DNS is part of what may be out) keeps
//!   the last list, and no question or answer waits on one.
//! - **Who answers**: every companion that holds a peer key, but not during its first
//!   isolation timeout (`Shared::may_answer_peers`): a successor
//!   resumed from its predecessor's state must not contradict the hold the leader
//!   still counts for that predecessor.
//! - **How many make a majority**: the largest cluster size any replica's
//!   acknowledgement carried (the cluster's Nodes: every companion runs on one). The
//!   leader's release rule counts with what this companion's beats prove it was told
//!   ([`crate::heartbeat::table`], `release::decide`'s `told`).
//! - **Sealed**: a question and its answer are sealed under a peer key each replica of
//!   nodefence gives at the hello (one per replica; every companion beats to every
//!   replica, so they share them). A question is sealed under each key held; an answer
//!   under the key its question opened with, echoing its nonce: an answer is taken
//!   once per address, for the round it answers, and never from this companion
//!   itself. A datagram that opens under no key gets nothing back.
//! - **What it costs**: nothing while the leader or the API server answers. In an
//!   outage of the whole control plane, one question per peer per [`round`] (half the
//!   isolation timeout) from each companion, and one answer to each.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use nodefence_watchdog::feeding::Reach;
use nodefence_watchdog::wire::{self, Answer, Key, Question};
use tokio::net::UdpSocket;

use super::shared::Shared;

/// How often the peers' addresses are looked up again.
pub const RESOLVE_EVERY: Duration = Duration::from_secs(30);
/// How often a companion without a fresh answer from the leader or the API server
/// asks its peers: half the isolation timeout, so each round's answers (holding for
/// the isolation timeout from when it was asked) overlap the next.
pub fn round(isolation: Duration) -> Duration {
    (isolation / 2).max(Duration::from_millis(100))
}

/// Where the peers are.
#[derive(Debug, Clone)]
pub enum PeerSource {
    /// A name and a port, looked up again every [`RESOLVE_EVERY`] (a headless
    /// Service: every companion's address).
    Name { host: String, port: u16 },
    /// These addresses (tests; static setups).
    Fixed(Vec<SocketAddr>),
}

impl std::str::FromStr for PeerSource {
    type Err = String;

    /// `host:port`, or a comma-separated list of `ip:port`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .collect();
        let fixed: Result<Vec<SocketAddr>, _> = parts.iter().map(|p| p.parse()).collect();
        if let Ok(fixed) = fixed
            && !fixed.is_empty()
        {
            return Ok(PeerSource::Fixed(fixed));
        }
        let [one] = parts.as_slice() else {
            return Err(format!(
                "{s:?}: expected host:port (a headless Service) or ip:port,ip:port,..."
            ));
        };
        let (host, port) = one
            .rsplit_once(':')
            .ok_or_else(|| format!("{one:?}: no port (expected host:port)"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("{one:?}: the port is not a number from 1 to 65535"))?;
        if host.is_empty() || port == 0 {
            return Err(format!("{one:?}: expected host:port"));
        }
        Ok(PeerSource::Name {
            host: host.to_string(),
            port,
        })
    }
}

/// How the peers are reached.
#[derive(Debug, Clone)]
pub struct PeerOptions {
    /// Where this companion hears its peers (UDP), e.g. `0.0.0.0:9441`.
    pub listen: SocketAddr,
    pub peers: PeerSource,
}

/// Binds the peers' socket (at start-up: a port taken is an error to say at once).
pub async fn bind(options: &PeerOptions) -> std::io::Result<UdpSocket> {
    UdpSocket::bind(options.listen).await
}

/// A round of questions under way.
struct Round {
    nonce: u64,
    /// This companion's clock when the questions went out.
    sent_at: Duration,
    /// The peers that answered, and whether each reaches neither.
    answered: BTreeMap<SocketAddr, bool>,
}

/// The peers' addresses, followed: a name's by a task of its own (kept while the
/// receiver is), a fixed list as it is.
pub(super) fn addresses(
    source: &PeerSource,
    resolver: &super::resolve::Resolver,
) -> (
    tokio::sync::watch::Receiver<Vec<SocketAddr>>,
    Option<tokio_util::task::AbortOnDropHandle<()>>,
) {
    match source {
        PeerSource::Fixed(fixed) => {
            let unique: BTreeSet<SocketAddr> = fixed.iter().copied().collect();
            let (tx, rx) = tokio::sync::watch::channel(unique.into_iter().collect());
            // Never changes: the sender may go (the receiver keeps the list).
            drop(tx);
            (rx, None)
        }
        PeerSource::Name { host, port } => {
            let (rx, task) = super::resolve::follow(
                resolver.clone(),
                host.clone(),
                *port,
                RESOLVE_EVERY,
                super::resolve::LOOKUP_TIMEOUT,
                "the companions' peers",
            );
            (rx, Some(task))
        }
    }
}

/// Answers the peers' questions, and asks them while neither the leader nor the API
/// server answers this companion; runs until dropped. `peers`: their addresses, as
/// last looked up.
pub(super) async fn follow(
    socket: UdpSocket,
    peers: tokio::sync::watch::Receiver<Vec<SocketAddr>>,
    shared: Arc<Shared>,
    isolation: Duration,
) {
    let tag: u16 = random_u64().map_or(0, |r| (r & 0xffff) as u16);
    let mut ask = tokio::time::interval(round(isolation));
    ask.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut buf = [0u8; wire::MAX_DATAGRAM + 1];
    let mut current: Option<Round> = None;
    loop {
        tokio::select! {
            _ = ask.tick() => {
                let now = shared.now();
                let cluster = shared.cluster();
                let keys = shared.peer_keys();
                let peers = peers.borrow().clone();
                shared.status().peers_known = peers.len();
                let (reach, marked) = {
                    let feeding = shared.feeding();
                    (feeding.reach(now), feeding.marked())
                };
                // Only while neither the leader nor the API server answers: a node
                // that reaches either never needs its peers.
                if reach != Reach::Neither
                    || marked
                    || cluster == 0
                    || keys.is_empty()
                    || peers.is_empty()
                {
                    current = None;
                    continue;
                }
                let Some(nonce) = random_u64() else {
                    tracing::error!("no randomness for a question's nonce: not asking the peers");
                    continue;
                };
                let question = Question { from: tag, nonce };
                let sealed: Vec<Vec<u8>> = keys.iter().map(|k| question.seal(k)).collect();
                for peer in &peers {
                    for datagram in &sealed {
                        if let Err(e) = socket.send_to(datagram, peer).await {
                            tracing::debug!(%peer, error = %e, "a question to a peer");
                        }
                    }
                }
                current = Some(Round { nonce, sent_at: now, answered: BTreeMap::new() });
                shared.status().peer_rounds += 1;
            }
            r = socket.recv_from(&mut buf) => {
                let Ok((len, from)) = r else { continue };
                if len > wire::MAX_DATAGRAM {
                    continue;
                }
                let datagram = &buf[..len];
                let keys = shared.peer_keys();
                if let Some((question, key)) = keys
                    .iter()
                    .find_map(|k| Question::open(datagram, k).ok().map(|q| (q, k)))
                {
                    // Its own question (its address is among the peers) gets no answer;
                    // nor does any in its first isolation timeout.
                    if current.as_ref().is_some_and(|r| r.nonce == question.nonce)
                        || !shared.may_answer_peers()
                    {
                        continue;
                    }
                    let reach = match shared.feeding().reach(shared.now()) {
                        Reach::Neither => 0,
                        Reach::Leader => 1,
                        Reach::ApiServer => 2,
                    };
                    let answer = Answer { from: tag, nonce: question.nonce, reach }.seal(key);
                    if let Err(e) = socket.send_to(&answer, from).await {
                        tracing::debug!(peer = %from, error = %e, "an answer to a peer");
                    }
                    continue;
                }
                let Some(answer) = keys.iter().find_map(|k| Answer::open(datagram, k).ok()) else {
                    continue; // Opens under no key: nothing back.
                };
                let Some(round) = current.as_mut().filter(|r| r.nonce == answer.nonce) else {
                    continue; // A late or replayed answer.
                };
                if round.answered.contains_key(&from) {
                    continue;
                }
                round.answered.insert(from, answer.reach == 0);
                shared.status().peer_answers += 1;
                let neither = round.answered.values().filter(|n| **n).count();
                let was = shared.feeding().may_feed(shared.now());
                shared
                    .feeding()
                    .peers_answered(round.sent_at, neither, usize::from(cluster_of(&shared)));
                if was.is_none() && shared.feeding().may_feed(shared.now()).is_some() {
                    tracing::warn!(
                        neither = neither + 1,
                        cluster = cluster_of(&shared),
                        "neither the leader nor the API server answers, nor do they a majority of \
                         the companions: the whole control plane is out, feeding on the peers' answers"
                    );
                }
            }
        }
    }
}

fn cluster_of(shared: &Shared) -> u16 {
    shared.cluster()
}

fn random_u64() -> Option<u64> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).ok()?;
    Some(u64::from_be_bytes(b))
}

/// The distinct keys of `keys` (two replicas never give the same one, but a key
/// given again by a replica's second hello is one key).
pub(super) fn distinct(keys: impl Iterator<Item = Key>) -> Vec<Key> {
    let mut out: Vec<Key> = Vec::new();
    for k in keys {
        if !out.contains(&k) {
            out.push(k);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_source_is_a_name_with_a_port_or_a_list_of_addresses() {
        match "nodefence-companion-peers.nodefence.svc:9441".parse::<PeerSource>() {
            Ok(PeerSource::Name { host, port }) => {
                assert_eq!(
                    (host.as_str(), port),
                    ("nodefence-companion-peers.nodefence.svc", 9441)
                );
            }
            other => panic!("{other:?}"),
        }
        match "127.0.0.1:1, 127.0.0.2:2".parse::<PeerSource>() {
            Ok(PeerSource::Fixed(list)) => assert_eq!(list.len(), 2),
            other => panic!("{other:?}"),
        }
        for bad in ["", "peers", "peers:", "peers:0", "peers:99999", "a:1,b:2"] {
            assert!(bad.parse::<PeerSource>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_round_is_half_the_isolation_timeout() {
        assert_eq!(round(Duration::from_secs(2)), Duration::from_secs(1));
        assert_eq!(round(Duration::ZERO), Duration::from_millis(100));
    }

    #[test]
    fn keys_are_kept_once() {
        let k = |b| Key([b; 32]);
        assert_eq!(distinct([k(1), k(2), k(1)].into_iter()), vec![k(1), k(2)]);
    }
}
