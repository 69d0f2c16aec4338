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
//!   the last list, and no question or answer waits on one. Only these addresses are
//!   answered, and only their answers count (a source as the socket reports it: the
//!   peer's address and port): a companion at a new address (a new pod) is neither
//!   answered nor counted by a peer until that peer's next lookup.
//! - **Who answers**: every companion that holds a peer key and a credential from the
//!   same replica, but not during its first isolation timeout
//!   (`Shared::may_answer_peers`): a successor
//!   resumed from its predecessor's state must not contradict the hold the leader
//!   still counts for that predecessor.
//! - **How many make a majority**: the largest cluster size any replica's
//!   acknowledgement carried (the cluster's Nodes: every companion runs on one). The
//!   leader's release rule counts with what this companion's beats prove it was told
//!   ([`crate::heartbeat::table`], `release::decide`'s `told`).
//! - **Who answered**: an answer names its node by the credential it carries, which a
//!   replica signed at that node's companion's hello for the companion's own key
//!   (Ed25519; [`nodefence_watchdog::wire::Credential`]), and is signed with that key:
//!   only that node's companion can answer for it, and whoever holds every peer key
//!   still cannot answer for another. An answer counts when its credential is under an
//!   authority key a replica gave this companion, its signature verifies, it answers
//!   the round under way (its nonce), and it comes from an address among the peers as
//!   last looked up. Each node is counted once per round, and reaches neither only if
//!   every answer it gave in the round says so (two processes of one node, an address
//!   listed twice, an answer replayed from other ports: one node); this companion's own
//!   node is never counted. Answers are read up to
//!   [`wire::PEER_MAX_DATAGRAM`] (an answer is [`wire::ANSWER_LEN`]).
//! - **Asked**: a question is sealed (HMAC) under a peer key each replica of nodefence
//!   gives at the hello (one per replica; every companion beats to every replica, so
//!   they share them): only a companion asks. It is sealed under each key held; it is
//!   answered only from an address among the peers, once per nonce (the copies under
//!   each key share it) and at most [`QUESTIONS_PER_ROUND`] an address a round, with
//!   the credential of the replica whose key opened it (its asker holds that replica's
//!   authority key). A datagram that opens under no key gets nothing back.
//! - **What is stored where**: each replica holds its peer key and its authority's
//!   private key in memory alone; each companion holds every replica's peer key and
//!   authority public key, the credentials issued to it and its own private key in its
//!   state file ([`super::state`]: mode 0600, a memory-backed emptyDir of its pod), for
//!   a successor after a crash. Whoever reads a node's file can answer as that node
//!   alone.
//! - **What it costs**: nothing while the leader or the API server answers. In an
//!   outage of the whole control plane, one question per peer per [`round`] (half the
//!   isolation timeout) from each companion, and one answer to each; each answer
//!   signed (about 22 µs), and checked once per node and round (about 35 µs; each
//!   credential's authority signature once, then kept: `Verified`): 0.3 s of a core
//!   a round for 5,000 nodes. A further answer of a node already counted is checked
//!   only if it would change the count, and one from an unlisted address, of another
//!   round or malformed is dropped before any signature is checked.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use nodefence_watchdog::feeding::Reach;
use nodefence_watchdog::wire::{self, Answer, Credential, Key, PublicKey, Question, Refused};
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

/// How many questions from one address are answered a round: an asker asks once a
/// round (under each peer key it holds, the copies sharing a nonce, answered once).
pub const QUESTIONS_PER_ROUND: usize = 4;
/// How many verified credentials are kept: more than a cluster's nodes times its
/// replicas; when full, it starts over (each is checked again once).
const MAX_VERIFIED: usize = 16_384;

/// The peers' addresses as last looked up, each as the socket reports a source (an
/// IPv4 address mapped into IPv6 is the IPv4 one).
#[derive(Debug, Default, Clone)]
pub(super) struct Listed(HashSet<SocketAddr>);

fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

impl Listed {
    pub(super) fn new(peers: &[SocketAddr]) -> Self {
        Self(peers.iter().copied().map(canonical).collect())
    }

    pub(super) fn contains(&self, addr: SocketAddr) -> bool {
        self.0.contains(&canonical(addr))
    }
}

/// The credentials whose authority's signature was checked: each is checked once,
/// and taken again while its authority key is held.
#[derive(Debug, Default)]
pub(super) struct Verified {
    set: HashSet<Credential>,
    /// Authority signatures checked (tests: a credential is checked once).
    checked: u64,
}

impl Verified {
    /// Whether an authority of `authorities` signed `credential`.
    fn check(&mut self, credential: &Credential, authorities: &[PublicKey]) -> Result<(), Refused> {
        if !authorities.contains(&credential.authority) {
            return Err(Refused::Authority);
        }
        if self.set.contains(credential) {
            return Ok(());
        }
        self.checked += 1;
        credential.verify(authorities)?;
        if self.set.len() >= MAX_VERIFIED {
            self.set.clear();
        }
        self.set.insert(credential.clone());
        Ok(())
    }
}

/// A round of questions under way, and the nodes that answered it.
#[derive(Debug)]
pub(super) struct Round {
    nonce: u64,
    /// This companion's clock when the questions went out.
    sent_at: Duration,
    /// Each node that answered, and whether every answer it gave says neither.
    nodes: BTreeMap<String, bool>,
}

/// What became of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Taken {
    /// Counted: this many nodes reach neither, so far this round.
    Counted { neither: usize },
    /// Its node already answered so this round (or said it reaches the control
    /// plane): nothing changes, and nothing was checked.
    Again,
    /// From an address the peers' lookup does not list.
    Unlisted,
    /// Of another round (late, or replayed).
    OtherRound,
    /// This companion's own node (another of its processes).
    Own,
    /// Malformed, or its credential or signature does not verify.
    Refused(Refused),
}

impl Round {
    pub(super) fn new(nonce: u64, sent_at: Duration) -> Self {
        Self {
            nonce,
            sent_at,
            nodes: BTreeMap::new(),
        }
    }

    /// The nodes that reach neither, as answered so far.
    pub(super) fn neither(&self) -> usize {
        self.nodes.values().filter(|n| **n).count()
    }

    /// An answer `datagram` from `from`: counted for the node its credential names
    /// if it comes from a `listed` address, answers this round, names a node other
    /// than `own`, its credential is under one of `authorities` and its signature
    /// verifies. The cheap checks first: the address, the layout, the nonce, whether
    /// the node's count could change; the signatures last.
    pub(super) fn take(
        &mut self,
        datagram: &[u8],
        from: SocketAddr,
        listed: &Listed,
        authorities: &[PublicKey],
        own: &str,
        verified: &mut Verified,
    ) -> Taken {
        if !listed.contains(from) {
            return Taken::Unlisted;
        }
        let parsed = match Answer::parse(datagram) {
            Ok(parsed) => parsed,
            Err(why) => return Taken::Refused(why),
        };
        let answer = &parsed.answer;
        if answer.nonce != self.nonce {
            return Taken::OtherRound;
        }
        let node = answer.credential.node();
        if node == own {
            return Taken::Own;
        }
        let neither = answer.reach == 0;
        match self.nodes.get(node) {
            // It said it reaches the control plane: nothing it says now undoes that.
            Some(false) => return Taken::Again,
            Some(true) if neither => return Taken::Again,
            _ => {}
        }
        if let Err(why) = verified
            .check(&answer.credential, authorities)
            .and_then(|()| parsed.verify_signature())
        {
            return Taken::Refused(why);
        }
        self.nodes.insert(node.to_string(), neither);
        Taken::Counted {
            neither: self.neither(),
        }
    }
}

/// The questions answered lately, by the asker's address: each nonce once, and at
/// most [`QUESTIONS_PER_ROUND`] an address a round (a question is 48 bytes, its answer
/// 484, and each answer a signature: no address gets many).
#[derive(Debug, Default)]
pub(super) struct Answered(BTreeMap<SocketAddr, (Duration, Vec<u64>)>);

impl Answered {
    /// Whether to answer the question `nonce` from `from` at `now` (and, if so, it is
    /// counted as answered), a round lasting `round`.
    pub(super) fn may_answer(
        &mut self,
        from: SocketAddr,
        nonce: u64,
        now: Duration,
        round: Duration,
    ) -> bool {
        let (since, nonces) = self
            .0
            .entry(canonical(from))
            .or_insert_with(|| (now, Vec::new()));
        if now.saturating_sub(*since) >= round {
            *since = now;
            nonces.clear();
        }
        if nonces.contains(&nonce) || nonces.len() >= QUESTIONS_PER_ROUND {
            return false;
        }
        nonces.push(nonce);
        true
    }

    /// Forgets the addresses no longer listed.
    pub(super) fn retain(&mut self, listed: &Listed) {
        self.0.retain(|addr, _| listed.contains(*addr));
    }
}

/// Answers the peers' questions, and asks them while neither the leader nor the API
/// server answers this companion; runs until dropped. `peers`: their addresses, as
/// last looked up.
pub(super) async fn follow(
    socket: UdpSocket,
    mut peers: tokio::sync::watch::Receiver<Vec<SocketAddr>>,
    shared: Arc<Shared>,
    isolation: Duration,
) {
    let tag: u16 = random_u64().map_or(0, |r| (r & 0xffff) as u16);
    let every = round(isolation);
    let mut ask = tokio::time::interval(every);
    ask.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut buf = [0u8; wire::PEER_MAX_DATAGRAM + 1];
    let mut current: Option<Round> = None;
    let mut listed = Listed::new(&peers.borrow_and_update());
    let mut verified = Verified::default();
    let mut answered = Answered::default();
    let mut out = Vec::with_capacity(wire::ANSWER_LEN);
    loop {
        if peers.has_changed().unwrap_or(false) {
            listed = Listed::new(&peers.borrow_and_update());
            answered.retain(&listed);
        }
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
                // that reaches either never needs its peers. Without an authority key
                // no answer could count.
                if reach != Reach::Neither
                    || marked
                    || cluster == 0
                    || keys.is_empty()
                    || shared.authorities().is_empty()
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
                current = Some(Round::new(nonce, now));
                shared.status().peer_rounds += 1;
            }
            r = socket.recv_from(&mut buf) => {
                let Ok((len, from)) = r else { continue };
                if len > wire::PEER_MAX_DATAGRAM {
                    continue;
                }
                let datagram = &buf[..len];
                match wire::kind(datagram) {
                    Some(wire::QUESTION_KIND) => {
                        let Some(answer) = answer_to(
                            datagram,
                            from,
                            &listed,
                            current.as_ref().map(|r| r.nonce),
                            &shared,
                            &mut answered,
                            every,
                        ) else {
                            continue;
                        };
                        out.clear();
                        answer.sign_into(&shared.signing_key, &mut out);
                        if let Err(e) = socket.send_to(&out, from).await {
                            tracing::debug!(peer = %from, error = %e, "an answer to a peer");
                        }
                    }
                    Some(wire::ANSWER_KIND) => {
                        let Some(round) = current.as_mut() else {
                            continue; // No round under way: a late or replayed answer.
                        };
                        let authorities = shared.authorities();
                        let taken =
                            round.take(datagram, from, &listed, &authorities, &shared.node, &mut verified);
                        match taken {
                            Taken::Counted { neither } => {
                                let sent_at = round.sent_at;
                                counted(&shared, sent_at, neither);
                            }
                            Taken::Unlisted | Taken::Refused(_) => {
                                shared.status().peer_answers_refused += 1;
                                tracing::debug!(peer = %from, ?taken, "a peer's answer refused");
                            }
                            Taken::Again | Taken::OtherRound | Taken::Own => {}
                        }
                    }
                    _ => {} // Not a peers' datagram: nothing back.
                }
            }
        }
    }
}

/// The answer to a question `datagram` from `from`, if it gets one: from a `listed`
/// address, sealed under a peer key held with the same replica's credential, not this
/// companion's own round's (`own_round`, its nonce), and not in its first isolation
/// timeout ([`Shared::may_answer_peers`]); each nonce once, a few an address a round.
fn answer_to(
    datagram: &[u8],
    from: SocketAddr,
    listed: &Listed,
    own_round: Option<u64>,
    shared: &Shared,
    answered: &mut Answered,
    round: Duration,
) -> Option<Answer> {
    if !listed.contains(from) {
        return None;
    }
    let (question, credential) = shared
        .answer_keys()
        .into_iter()
        .find_map(|(key, credential)| Some((Question::open(datagram, &key).ok()?, credential)))?;
    // Its own question (its address is among the peers) gets no answer; nor does any
    // in its first isolation timeout.
    if own_round == Some(question.nonce) || !shared.may_answer_peers() {
        return None;
    }
    let now = shared.now();
    if !answered.may_answer(from, question.nonce, now, round) {
        return None;
    }
    let reach = match shared.feeding().reach(now) {
        Reach::Neither => 0,
        Reach::Leader => 1,
        Reach::ApiServer => 2,
    };
    Some(Answer {
        credential,
        nonce: question.nonce,
        reach,
    })
}

/// A round's answers counted `neither` nodes reaching neither: the feeding rule told.
fn counted(shared: &Shared, sent_at: Duration, neither: usize) {
    shared.status().peer_answers += 1;
    let was = shared.feeding().may_feed(shared.now());
    shared
        .feeding()
        .peers_answered(sent_at, neither, usize::from(cluster_of(shared)));
    if was.is_none() && shared.feeding().may_feed(shared.now()).is_some() {
        tracing::warn!(
            neither = neither + 1,
            cluster = cluster_of(shared),
            "neither the leader nor the API server answers, nor do they a majority of \
             the companions: the whole control plane is out, feeding on the peers' answers"
        );
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

    use nodefence_watchdog::wire::{BootId, SigningKey};

    const NONCE: u64 = 0x5eed;

    fn authority() -> SigningKey {
        SigningKey::from_seed([1; 32])
    }

    /// The key of node `i`'s companion (a second process of it: `i + 100`).
    fn key(i: u8) -> SigningKey {
        SigningKey::from_seed([10 + i; 32])
    }

    fn credential(node: &str, key: &SigningKey, authority: &SigningKey) -> Credential {
        Credential::issue(authority, key.public(), node, BootId::of(node), 1)
            .unwrap_or_else(|| panic!("{node} fits"))
    }

    /// Node `node`'s answer `reach`, with key `key` under `authority`'s credential.
    fn answer(node: &str, key: &SigningKey, reach: u8) -> Vec<u8> {
        Answer {
            credential: credential(node, key, &authority()),
            nonce: NONCE,
            reach,
        }
        .sign(key)
    }

    fn at(last: u8, port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, last], port))
    }

    /// A round of worker-1's, its peers listed at `listed`.
    struct Asker {
        round: Round,
        listed: Listed,
        verified: Verified,
    }

    impl Asker {
        fn new(listed: &[SocketAddr]) -> Self {
            Self {
                round: Round::new(NONCE, Duration::from_secs(1)),
                listed: Listed::new(listed),
                verified: Verified::default(),
            }
        }

        fn take(&mut self, datagram: &[u8], from: SocketAddr) -> Taken {
            self.round.take(
                datagram,
                from,
                &self.listed,
                &[authority().public()],
                "worker-1",
                &mut self.verified,
            )
        }
    }

    /// Counted by address, one genuine "neither" replayed from k ports of listed
    /// addresses was k peers (issue 52, item 4): it is its node's, once.
    #[test]
    fn a_genuine_neither_replayed_from_other_ports_counts_once() {
        let ports: Vec<SocketAddr> = (0..5).map(|i| at(2, 9441 + i)).collect();
        let mut asker = Asker::new(&ports);
        let genuine = answer("worker-2", &key(2), 0);
        assert_eq!(
            asker.take(&genuine, ports[0]),
            Taken::Counted { neither: 1 }
        );
        for from in &ports[1..] {
            assert_eq!(asker.take(&genuine, *from), Taken::Again, "{from}");
        }
        assert_eq!(asker.round.neither(), 1);
        // Nothing but the first was checked.
        assert_eq!(asker.verified.checked, 1);
    }

    #[test]
    fn an_answer_from_an_address_not_among_the_peers_is_not_counted() {
        let listed = at(2, 9441);
        let mut asker = Asker::new(&[listed]);
        let genuine = answer("worker-2", &key(2), 0);
        for from in [at(2, 9442), at(9, 9441)] {
            assert_eq!(asker.take(&genuine, from), Taken::Unlisted, "{from}");
        }
        assert_eq!(asker.round.neither(), 0);
        // The listed address as a dual-stack socket reports it is the same address.
        let mapped =
            SocketAddr::from((std::net::Ipv4Addr::new(10, 0, 0, 2).to_ipv6_mapped(), 9441));
        assert_eq!(asker.take(&genuine, mapped), Taken::Counted { neither: 1 });
    }

    /// Two companion processes of one node (two credentials for it, two addresses)
    /// are one node, which reaches neither only if every answer it gave says so.
    #[test]
    fn two_processes_of_one_node_count_once_and_neither_only_if_both_say_so() {
        let (first, second) = (at(2, 9441), at(3, 9441));
        let mut asker = Asker::new(&[first, second]);
        assert_eq!(
            asker.take(&answer("worker-2", &key(2), 0), first),
            Taken::Counted { neither: 1 }
        );
        assert_eq!(
            asker.take(&answer("worker-2", &key(102), 0), second),
            Taken::Again
        );
        assert_eq!(asker.round.neither(), 1);
        // One of them reaches the leader: the node does, whichever came first.
        assert_eq!(
            asker.take(&answer("worker-2", &key(102), 1), second),
            Taken::Counted { neither: 0 }
        );
        assert_eq!(
            asker.take(&answer("worker-2", &key(2), 0), first),
            Taken::Again
        );
        let mut asker = Asker::new(&[first, second]);
        assert_eq!(
            asker.take(&answer("worker-2", &key(102), 2), second),
            Taken::Counted { neither: 0 }
        );
        assert_eq!(
            asker.take(&answer("worker-2", &key(2), 0), first),
            Taken::Again
        );
        assert_eq!(asker.round.neither(), 0);
        // Two nodes are two.
        assert_eq!(
            asker.take(&answer("worker-3", &key(3), 0), first),
            Taken::Counted { neither: 1 }
        );
    }

    /// Any node held the one peer key and could answer for all: an answer now counts
    /// only signed with the key a replica bound to its node.
    #[test]
    fn an_answer_signed_by_another_nodes_key_or_under_an_unknown_authority_is_refused() {
        let from = at(3, 9441);
        let mut asker = Asker::new(&[from]);
        // worker-3, holding worker-2's credential (every answer of worker-2 shows it),
        // signs with its own key.
        let as_worker_2 = Answer {
            credential: credential("worker-2", &key(2), &authority()),
            nonce: NONCE,
            reach: 0,
        }
        .sign(&key(3));
        assert_eq!(
            asker.take(&as_worker_2, from),
            Taken::Refused(Refused::Signature)
        );
        // A credential worker-3 signed itself, for a node that is not.
        let own_authority = SigningKey::from_seed([66; 32]);
        let minted = Answer {
            credential: credential("worker-4", &key(3), &own_authority),
            nonce: NONCE,
            reach: 0,
        }
        .sign(&key(3));
        assert_eq!(
            asker.take(&minted, from),
            Taken::Refused(Refused::Authority)
        );
        // The answer of the retired kind, sealed under the peer key.
        let sealed = wire::seal_body(4, &[0, 9, 0, 0, 0, 0, 0, 0, 0x5e, 0xed, 0], &Key([7; 32]));
        assert_eq!(asker.take(&sealed, from), Taken::Refused(Refused::Length));
        assert_eq!(asker.round.neither(), 0);
        // Its own node's (another process of worker-1), another round's: not counted.
        assert_eq!(
            asker.take(&answer("worker-1", &key(1), 0), from),
            Taken::Own
        );
        let mut other_round = Answer::parse(&answer("worker-3", &key(3), 0))
            .map(|p| p.answer)
            .unwrap_or_else(|e| panic!("{e}"));
        other_round.nonce += 1;
        assert_eq!(
            asker.take(&other_round.sign(&key(3)), from),
            Taken::OtherRound
        );
        // worker-3 speaks for itself: once.
        assert_eq!(
            asker.take(&answer("worker-3", &key(3), 0), from),
            Taken::Counted { neither: 1 }
        );
    }

    #[test]
    fn a_credential_is_checked_once_while_its_authority_is_held() {
        let from = at(2, 9441);
        let mut verified = Verified::default();
        let authorities = [authority().public()];
        for nonce in 1..=3 {
            let mut round = Round::new(nonce, Duration::ZERO);
            let a = Answer {
                credential: credential("worker-2", &key(2), &authority()),
                nonce,
                reach: 0,
            }
            .sign(&key(2));
            let taken = round.take(
                &a,
                from,
                &Listed::new(&[from]),
                &authorities,
                "w",
                &mut verified,
            );
            assert_eq!(taken, Taken::Counted { neither: 1 });
        }
        assert_eq!(verified.checked, 1);
        // The replica restarted (a new authority key): its old credentials count no more.
        let mut round = Round::new(NONCE, Duration::ZERO);
        let taken = round.take(
            &answer("worker-2", &key(2), 0),
            from,
            &Listed::new(&[from]),
            &[SigningKey::from_seed([2; 32]).public()],
            "w",
            &mut verified,
        );
        assert_eq!(taken, Taken::Refused(Refused::Authority));
    }

    #[test]
    fn a_question_is_answered_once_a_nonce_and_a_few_times_an_address_a_round() {
        let round = Duration::from_secs(1);
        let t = Duration::from_secs;
        let mut answered = Answered::default();
        let from = at(2, 9441);
        assert!(answered.may_answer(from, 1, t(10), round));
        assert!(
            !answered.may_answer(from, 1, t(10), round),
            "the copy under another key"
        );
        for nonce in 2..=QUESTIONS_PER_ROUND as u64 {
            assert!(answered.may_answer(from, nonce, t(10), round));
        }
        assert!(
            !answered.may_answer(from, 99, t(10), round),
            "too many this round"
        );
        assert!(
            answered.may_answer(at(3, 9441), 99, t(10), round),
            "another address"
        );
        assert!(
            answered.may_answer(from, 99, t(11), round),
            "the next round"
        );
        answered.retain(&Listed::new(&[at(3, 9441)]));
        assert_eq!(answered.0.len(), 1);
    }

    #[test]
    fn keys_are_kept_once() {
        let k = |b| Key([b; 32]);
        assert_eq!(distinct([k(1), k(2), k(1)].into_iter()), vec![k(1), k(2)]);
    }
}
