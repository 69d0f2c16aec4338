//! The heartbeat's datagrams: a companion's beat, a replica's acknowledgement, and the
//! question one companion asks its peers with their answer. Binary, fixed layouts. A
//! beat and its acknowledgement are sealed with HMAC-SHA256 under the session key a
//! replica gave that companion over TLS (so only that replica can acknowledge, and only
//! that companion can beat for its node); a peers' question under a peer key, which
//! every replica gives every companion (it proves a companion asks, nothing more). A
//! peer's answer is signed (Ed25519) with the answering companion's own key, and
//! carries the [`Credential`] a replica signed with its authority key at that
//! companion's hello: the node its token proved, bound to that key. Only that node's
//! companion can answer for it, and every companion that holds the replica's authority
//! key can check which node answered.
//!
//! A beat, an acknowledgement or a question is `magic "NFWD" | version 3 | kind | body |
//! MAC (32 bytes)`, the MAC over everything before it. An answer is `magic | version 3 |
//! kind | credential | nonce | reach | signature (64 bytes)`, the signature over
//! everything before it (the credential's own signature inside it), 484 bytes: the
//! peers' socket reads up to [`PEER_MAX_DATAGRAM`], the beats' listeners up to
//! [`MAX_DATAGRAM`]. A credential is `authority's public key | companion's public key |
//! boot | serial | node name (253 bytes, NUL-padded) | the authority's signature`
//! (405 bytes), the signature over [`CREDENTIAL_CONTEXT`] and everything before it.
//! Kind 4 was an answer sealed under the peer key, its `from` a random tag of the
//! process (any holder of the key could answer as any number of peers): retired,
//! refused as an unknown kind.
//!
//! Version 3 puts in a beat the companion's boot ID (a
//! release may rest only on beats of the boot the Node reports), the highest term it
//! has heard a leader in, and whether its machine is a virtual one; in an
//! acknowledgement, the leader's term (its fencing token) and whether the node's
//! policy wants its watchdog armed. A replica still reads a version 2 beat (a
//! companion not upgraded yet) and answers it in version 2; nothing is ever released
//! on such a companion's watchdog (its beats name no boot). Anything else is refused before any field is read:
//! shorter or longer than its kind's exact size, another magic, version or kind, a
//! MAC that does not verify (compared in constant time). Behind the MAC each datagram
//! has one encoding: a flag or state out of range, or bytes in a field its flag says
//! is absent, is refused too. An answer's layout is checked the same way before any
//! signature is ([`Answer::parse`]), and its signatures are Ed25519's, which have one
//! encoding (ring refuses a scalar out of range, and compares the point's encoding).
//! What the fields promise (a sequence never seen, an
//! acknowledgement of a beat actually sent, an answer of the round under way) is
//! checked by the session or the round that reads them, not here. Durations are
//! nanoseconds of the sender's monotonic clock; integers are big-endian.
//!
//! What a signature costs (`ring`, one core of a Xeon, release build): verifying one
//! about 35 µs (a MAC about 0.2 µs), signing one about 22 µs; an answer's layout is read
//! in 0.1 µs. An asker checks each credential once and keeps it
//! (`companion::peers`), then one signature per answering node and round; an answerer
//! signs one answer per question. In an outage of the whole control plane a cluster
//! of N nodes costs each companion, per round (half the isolation timeout, 1 s by
//! default), N signatures made and about N checked: about 60 ms for 1,000 nodes,
//! 0.3 s of a core for 5,000.

use std::time::Duration;

use hmac::block_api::HmacCore;
use hmac::digest::block_api::CoreProxy;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The first bytes of every datagram.
pub const MAGIC: [u8; 4] = *b"NFWD";
/// The layout version (3: a beat names its boot and the term it heard, an
/// acknowledgement its term).
pub const VERSION: u8 = 3;
/// The previous layout, still read in beats (and answered in acknowledgements).
pub const VERSION_2: u8 = 2;
/// The MAC's length.
pub const MAC_LEN: usize = 32;
/// The header: magic, version, kind.
const HEADER: usize = 6;
/// The longest beat or acknowledgement (the beats' listeners read at most this many
/// bytes; a question fits too).
pub const MAX_DATAGRAM: usize = 256;
/// The longest peers' datagram (the peers' socket reads at most this many bytes): an
/// answer is [`ANSWER_LEN`].
pub const PEER_MAX_DATAGRAM: usize = 512;
/// An Ed25519 public key's and signature's lengths.
pub const PUBLIC_KEY_LEN: usize = 32;
pub const SIGNATURE_LEN: usize = 64;
/// How many bytes of a node's name a credential carries: a Kubernetes Node's name is
/// a DNS subdomain, at most 253.
pub const NODE_NAME_LEN: usize = 253;
/// A credential's length: two public keys, a boot, a serial, a name, a signature.
pub const CREDENTIAL_LEN: usize =
    PUBLIC_KEY_LEN + PUBLIC_KEY_LEN + 16 + 8 + NODE_NAME_LEN + SIGNATURE_LEN;
/// What an authority signs before a credential's fields: no other message of this
/// protocol starts so (an answer starts with [`MAGIC`]).
pub const CREDENTIAL_CONTEXT: &[u8] = b"nodefence peer credential 1\0";

/// A shared key (32 random bytes).
#[derive(Clone, PartialEq, Eq)]
pub struct Key(pub [u8; 32]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

/// What seals and opens a datagram: a [`Key`] (its HMAC keyed for each datagram) or a
/// [`PreparedKey`] (keyed once; each datagram starts from a copy).
pub trait MacKey {
    /// An HMAC-SHA256 keyed with this key, nothing fed yet.
    fn hmac(&self) -> Hmac<Sha256>;
}

impl MacKey for Key {
    fn hmac(&self) -> Hmac<Sha256> {
        // HMAC takes keys of any length: a 32-byte key never fails.
        <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0)
            .unwrap_or_else(|_| <Hmac<Sha256> as KeyInit>::new(&Default::default()))
    }
}

/// A key whose HMAC pads are hashed once, for a session's many datagrams (two of
/// the five SHA-256 compressions a short datagram costs, at 10,000 datagrams a second
/// on the leader). Only the two hashed pads are kept (80 bytes, not the 150 of a
/// whole `Hmac` with its empty block buffer): a session's entry on the leader is read
/// for every beat, and each MAC starts from a copy.
#[derive(Clone)]
pub struct PreparedKey(HmacCore<Sha256>);

impl From<&Key> for PreparedKey {
    fn from(key: &Key) -> Self {
        // HMAC takes keys of any length: a 32-byte key never fails.
        Self(
            HmacCore::new_from_slice(&key.0).unwrap_or_else(|_| HmacCore::new(&Default::default())),
        )
    }
}

impl MacKey for PreparedKey {
    fn hmac(&self) -> Hmac<Sha256> {
        Hmac::compose(self.0.clone(), Default::default())
    }
}

impl std::fmt::Debug for PreparedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PreparedKey(..)")
    }
}

/// Why a datagram was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    Length,
    Magic,
    Version,
    Kind,
    Mac,
    /// A credential under an authority key not held.
    Authority,
    /// A signature (a credential's, or an answer's) that does not verify.
    Signature,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refused::Length => "wrong length",
            Refused::Magic => "not a nodefence datagram",
            Refused::Version => "another version",
            Refused::Kind => "unknown kind",
            Refused::Mac => "MAC does not verify",
            Refused::Authority => "a credential of no authority held",
            Refused::Signature => "signature does not verify",
        })
    }
}

impl std::error::Error for Refused {}

/// The companion's hold on the watchdog, reported in each beat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatchdogState {
    /// No usable device, or none armed: the companion beats, and nothing rests on its
    /// watchdog.
    None,
    /// Armed, with the timeout the driver granted, and the driver.
    Armed {
        granted: Duration,
        device: DeviceName,
    },
    /// A clean stop is under way: its watchdog no longer counts.
    Stopping,
    /// Still armed and fed by its rule, but no longer counting: the node's policy
    /// turned the watchdog level off, and the companion disarms it once every replica
    /// acknowledged this (the companion goes on beating). Version 3 only.
    Disarming {
        granted: Duration,
        device: DeviceName,
    },
}

impl WatchdogState {
    /// Whether a release may rest on it: armed, and counting.
    pub fn counts(&self) -> bool {
        matches!(self, WatchdogState::Armed { .. })
    }
}

/// A machine's boot, as its kernel names it (`/proc/sys/kernel/random/boot_id`, which
/// the kubelet reports as the Node's `status.nodeInfo.bootID`): the UUID's 16 bytes, or,
/// for an ID that is not a UUID (some test kubelets), the first 16 bytes of its
/// SHA-256. Two texts of one boot (any case, surrounding spaces) give one value.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct BootId(pub [u8; 16]);

impl BootId {
    /// The boot `text` names.
    pub fn of(text: &str) -> Self {
        let text = text.trim().to_ascii_lowercase();
        let hex: String = text.chars().filter(|c| *c != '-').collect();
        let uuid_shaped = text.len() == 36 && hex.len() == 32;
        if uuid_shaped && let Some(bytes) = parse_hex16(&hex) {
            return Self(bytes);
        }
        use sha2::Digest as _;
        let digest = Sha256::digest(text.as_bytes());
        let mut out = [0u8; 16];
        out.copy_from_slice(&digest[..16]);
        Self(out)
    }

    /// Whether it is the boot `text` names.
    pub fn is(&self, text: &str) -> bool {
        *self == Self::of(text)
    }
}

fn parse_hex16(hex: &str) -> Option<[u8; 16]> {
    let mut out = [0u8; 16];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

impl std::fmt::Debug for BootId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BootId({self})")
    }
}

impl std::fmt::Display for BootId {
    /// Hyphenated, as the kernel writes a UUID (the digest of an ID that is not one
    /// reads as a UUID too).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// How many bytes of a watchdog driver's name a beat carries.
pub const DEVICE_NAME_LEN: usize = 16;

/// A watchdog driver's name as the beats carry it (`iTCO_wdt`, `sp5100_tco`,
/// `ipmi_watchdog`): printable ASCII, at most [`DEVICE_NAME_LEN`] bytes (longer is
/// cut, anything else becomes `?`), padded with NULs on the wire.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DeviceName([u8; DEVICE_NAME_LEN]);

impl DeviceName {
    pub const fn new(identity: &str) -> Self {
        let bytes = identity.as_bytes();
        let mut out = [0u8; DEVICE_NAME_LEN];
        let mut i = 0;
        while i < DEVICE_NAME_LEN && i < bytes.len() {
            let b = bytes[i];
            out[i] = if b.is_ascii_graphic() || b == b' ' {
                b
            } else {
                b'?'
            };
            i += 1;
        }
        Self(out)
    }

    /// The name ("unknown" when none was given).
    pub fn as_str(&self) -> &str {
        let len = self
            .0
            .iter()
            .position(|b| *b == 0)
            .unwrap_or(DEVICE_NAME_LEN);
        match std::str::from_utf8(&self.0[..len]) {
            Ok("") | Err(_) => "unknown",
            Ok(name) => name,
        }
    }

    /// From the wire: printable ASCII, then only NULs.
    fn from_wire(bytes: [u8; DEVICE_NAME_LEN]) -> Option<Self> {
        let len = bytes
            .iter()
            .position(|b| *b == 0)
            .unwrap_or(DEVICE_NAME_LEN);
        let (name, pad) = bytes.split_at(len);
        (name.iter().all(|b| b.is_ascii_graphic() || *b == b' ') && pad.iter().all(|b| *b == 0))
            .then_some(Self(bytes))
    }
}

impl std::fmt::Debug for DeviceName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl std::fmt::Display for DeviceName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A companion's beat (to every replica).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Beat {
    /// The session the replica gave it (which node it beats for).
    pub session: u64,
    /// Increases with every beat of the session.
    pub seq: u64,
    /// Its clock when sent.
    pub sent: Duration,
    /// The last acknowledgement it received from this replica: the beat it answered,
    /// and the replica's clock when it was sent.
    pub echo: Option<(u64, Duration)>,
    /// How long it has held an answer from the leader or the API server without a
    /// gap, and how much longer the freshest holds ([`crate::feeding::Reaching`]).
    pub held_for: Duration,
    pub valid_for: Duration,
    pub watchdog: WatchdogState,
    /// The layout it came in ([`VERSION`], or [`VERSION_2`]: the fields below absent).
    pub version: u8,
    /// The boot its machine runs (`None`: a version 2 beat).
    pub boot: Option<BootId>,
    /// The highest term it has taken a leader's acknowledgement in.
    pub term_seen: u64,
    /// Its machine is a virtual one (a hypervisor was detected): a hypervisor that
    /// pauses it pauses its virtual watchdog too.
    pub virtual_machine: bool,
}

/// A replica's acknowledgement of a beat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    pub session: u64,
    /// The beat answered, and its sending time as the beat said (the companion keeps
    /// its own record and trusts that).
    pub beat_seq: u64,
    pub beat_sent: Duration,
    /// The replica leads: only a leader's acknowledgement lets the node feed.
    pub leader: bool,
    /// The node is marked for fencing: stop feeding at once.
    pub marked: bool,
    /// The replica's clock when sent (echoed in later beats).
    pub sent: Duration,
    /// How many companions the cluster has, and the version of that membership.
    pub cluster: u16,
    pub membership: u64,
    /// The layout ([`VERSION`], or [`VERSION_2`] for a version 2 beat's answer).
    pub version: u8,
    /// The leader's term, its fencing token (`leader` only; 0 otherwise): the same for
    /// every replica, and only growing. A companion refuses a leader's
    /// acknowledgement of a term older than one it has taken.
    pub term: u64,
    /// The node's policy has the watchdog level on: arm its watchdog (`leader` only).
    pub arm: bool,
}

/// A companion asking its peers whether they reach the control plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// A random tag of the asking process (for its logs): not an identity, and nothing
    /// rests on it.
    pub from: u16,
    /// A nonce the asker draws for each round, and accepts answers of that round by.
    pub nonce: u64,
}

/// A peer's answer, and who gave it: the node its credential names (only the holder
/// of the credential's key can sign an answer that opens).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub credential: Credential,
    /// The question's.
    pub nonce: u64,
    /// 0 neither, 1 the leader, 2 the API server.
    pub reach: u8,
}

const BEAT: u8 = 1;
/// The kind byte of a beat (a listener drops any other before looking further).
pub const BEAT_KIND: u8 = BEAT;
const ACK: u8 = 2;
const QUESTION: u8 = 3;
/// The kind byte of a question.
pub const QUESTION_KIND: u8 = QUESTION;
/// Kind 4 was an answer sealed under the peer key: retired.
const ANSWER: u8 = 5;
/// The kind byte of an answer.
pub const ANSWER_KIND: u8 = ANSWER;

/// The body sizes (version 2's, and what version 3 adds).
const BEAT_BODY_2: usize = 8 + 8 + 8 + 1 + 8 + 8 + 8 + 8 + 1 + 8 + DEVICE_NAME_LEN;
const BEAT_BODY: usize = BEAT_BODY_2 + 16 + 8 + 1;
const ACK_BODY_2: usize = 8 + 8 + 8 + 1 + 1 + 8 + 2 + 8;
const ACK_BODY: usize = ACK_BODY_2 + 8 + 1;
/// A beat's flag: its machine is a virtual one.
const FLAG_VIRTUAL: u8 = 1;
const QUESTION_BODY: usize = 2 + 8;
/// An answer's length: header, credential, nonce, reach, signature.
pub const ANSWER_LEN: usize = HEADER + CREDENTIAL_LEN + 8 + 1 + SIGNATURE_LEN;

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Writes one datagram at the end of `out` (after whatever it holds already).
struct Writer<'a> {
    out: &'a mut Vec<u8>,
    start: usize,
}

impl<'a> Writer<'a> {
    fn new(out: &'a mut Vec<u8>, kind: u8, body: usize) -> Self {
        Self::versioned(out, VERSION, kind, body)
    }
    fn versioned(out: &'a mut Vec<u8>, version: u8, kind: u8, body: usize) -> Self {
        out.reserve(HEADER + body + MAC_LEN);
        let start = out.len();
        out.extend_from_slice(&MAGIC);
        out.push(version);
        out.push(kind);
        Self { out, start }
    }
    fn u8(&mut self, x: u8) -> &mut Self {
        self.out.push(x);
        self
    }
    fn u16(&mut self, x: u16) -> &mut Self {
        self.out.extend_from_slice(&x.to_be_bytes());
        self
    }
    fn bytes(&mut self, x: &[u8]) -> &mut Self {
        self.out.extend_from_slice(x);
        self
    }
    fn u64(&mut self, x: u64) -> &mut Self {
        self.out.extend_from_slice(&x.to_be_bytes());
        self
    }
    /// The MAC of everything this datagram holds so far, after it.
    fn seal(self, key: &impl MacKey) {
        let tag = mac(key, &self.out[self.start..]);
        self.out.extend_from_slice(&tag);
    }
}

/// What `seal_into` wrote, in a `Vec` of its own.
fn sealed(seal_into: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::new();
    seal_into(&mut out);
    out
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        let mut out = [0u8; N];
        out.copy_from_slice(head);
        out
    }
    fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.take())
    }
    fn duration(&mut self) -> Duration {
        Duration::from_nanos(self.u64())
    }
}

fn mac(key: &impl MacKey, data: &[u8]) -> [u8; MAC_LEN] {
    let mut m = key.hmac();
    m.update(data);
    m.finalize().into_bytes().into()
}

/// Any `body` at all as a datagram of kind byte `kind`, sealed under `key`: what a
/// holder of the key could send, well-formed or not. For the fuzz targets and tests,
/// which must reach the checks made after the MAC verifies; nothing in the daemon or
/// the companion seals this way.
#[doc(hidden)]
pub fn seal_body(kind: u8, body: &[u8], key: &impl MacKey) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + body.len() + MAC_LEN);
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.push(kind);
    out.extend_from_slice(body);
    let tag = mac(key, &out);
    out.extend_from_slice(&tag);
    out
}

/// The kind of a datagram, from its header alone (to pick the key that opens it);
/// `None` when it is not one of ours (a version 2 beat or acknowledgement is).
pub fn kind(datagram: &[u8]) -> Option<u8> {
    let version = *datagram.get(4)?;
    let kind = *datagram.get(5)?;
    let known = match version {
        VERSION => matches!(kind, BEAT | ACK | QUESTION | ANSWER),
        VERSION_2 => matches!(kind, BEAT | ACK),
        _ => false,
    };
    (datagram.len() > HEADER && datagram[..4] == MAGIC && known).then_some(kind)
}

/// The session a beat or acknowledgement names, before its MAC is checked (to find
/// the key); nothing else of it may be trusted yet.
pub fn session_of(datagram: &[u8]) -> Option<u64> {
    matches!(kind(datagram), Some(BEAT | ACK))
        .then(|| datagram.get(HEADER..HEADER + 8))
        .flatten()
        .map(|b| u64::from_be_bytes(b.try_into().unwrap_or([0; 8])))
}

/// Checks the header, the exact length and the MAC; the body on success.
fn open<'a>(
    datagram: &'a [u8],
    want: u8,
    body: usize,
    key: &impl MacKey,
) -> Result<Reader<'a>, Refused> {
    open_versioned(datagram, VERSION, want, body, key)
}

/// The version a beat or acknowledgement is laid out in (3, or 2), from its header.
fn version_of(datagram: &[u8]) -> Result<u8, Refused> {
    if datagram.len() < HEADER {
        return Err(Refused::Length);
    }
    if datagram[..4] != MAGIC {
        return Err(Refused::Magic);
    }
    match datagram[4] {
        v @ (VERSION | VERSION_2) => Ok(v),
        _ => Err(Refused::Version),
    }
}

/// [`open`] for a layout `version`.
fn open_versioned<'a>(
    datagram: &'a [u8],
    version: u8,
    want: u8,
    body: usize,
    key: &impl MacKey,
) -> Result<Reader<'a>, Refused> {
    if datagram.len() != HEADER + body + MAC_LEN {
        return Err(Refused::Length);
    }
    if datagram[..4] != MAGIC {
        return Err(Refused::Magic);
    }
    if datagram[4] != version {
        return Err(Refused::Version);
    }
    if datagram[5] != want {
        return Err(Refused::Kind);
    }
    let (signed, tag) = datagram.split_at(HEADER + body);
    let mut m = key.hmac();
    m.update(signed);
    m.verify_slice(tag).map_err(|_| Refused::Mac)?;
    Ok(Reader(&signed[HEADER..]))
}

impl Beat {
    pub fn seal(&self, key: &impl MacKey) -> Vec<u8> {
        sealed(|out| self.seal_into(key, out))
    }

    /// Sealed at the end of `out` (after what it holds: the same bytes as
    /// [`Self::seal`], in a buffer the caller keeps), in its [`Beat::version`]'s
    /// layout.
    pub fn seal_into(&self, key: &impl MacKey, out: &mut Vec<u8>) {
        let v3 = self.version != VERSION_2;
        let (version, body) = if v3 {
            (VERSION, BEAT_BODY)
        } else {
            (VERSION_2, BEAT_BODY_2)
        };
        let mut w = Writer::versioned(out, version, BEAT, body);
        let (has_echo, echo_seq, echo_sent) = match self.echo {
            Some((seq, sent)) => (1, seq, nanos(sent)),
            None => (0, 0, 0),
        };
        let (state, granted, device) = match self.watchdog {
            WatchdogState::None => (0, 0, DeviceName::default()),
            WatchdogState::Armed { granted, device } => (1, nanos(granted), device),
            WatchdogState::Stopping => (2, 0, DeviceName::default()),
            WatchdogState::Disarming { granted, device } => (3, nanos(granted), device),
        };
        w.u64(self.session)
            .u64(self.seq)
            .u64(nanos(self.sent))
            .u8(has_echo)
            .u64(echo_seq)
            .u64(echo_sent)
            .u64(nanos(self.held_for))
            .u64(nanos(self.valid_for))
            .u8(state)
            .u64(granted)
            .bytes(&device.0);
        if v3 {
            w.bytes(&self.boot.unwrap_or_default().0)
                .u64(self.term_seen)
                .u8(if self.virtual_machine {
                    FLAG_VIRTUAL
                } else {
                    0
                });
        }
        w.seal(key);
    }

    /// A beat of either layout (3, or 2 from a companion not upgraded yet).
    pub fn open(datagram: &[u8], key: &impl MacKey) -> Result<Self, Refused> {
        let version = version_of(datagram)?;
        let body = if version == VERSION {
            BEAT_BODY
        } else {
            BEAT_BODY_2
        };
        let mut r = open_versioned(datagram, version, BEAT, body, key)?;
        let session = r.u64();
        let seq = r.u64();
        let sent = r.duration();
        let has_echo = r.u8();
        let echo = (r.u64(), r.duration());
        let held_for = r.duration();
        let valid_for = r.duration();
        let state = r.u8();
        let granted = r.duration();
        let device = DeviceName::from_wire(r.take()).ok_or(Refused::Kind)?;
        // One encoding a beat: a field its flag says is absent is all zeros.
        let unarmed = granted.is_zero() && device == DeviceName::default();
        let watchdog = match state {
            0 if unarmed => WatchdogState::None,
            1 if !granted.is_zero() => WatchdogState::Armed { granted, device },
            2 if unarmed => WatchdogState::Stopping,
            3 if !granted.is_zero() && version == VERSION => {
                WatchdogState::Disarming { granted, device }
            }
            _ => return Err(Refused::Kind),
        };
        let (boot, term_seen, virtual_machine) = if version == VERSION {
            let boot = BootId(r.take());
            let term_seen = r.u64();
            let virtual_machine = match r.u8() {
                0 => false,
                FLAG_VIRTUAL => true,
                _ => return Err(Refused::Kind),
            };
            (Some(boot), term_seen, virtual_machine)
        } else {
            (None, 0, false)
        };
        Ok(Self {
            session,
            seq,
            sent,
            echo: match has_echo {
                0 if echo == (0, Duration::ZERO) => None,
                1 => Some(echo),
                _ => return Err(Refused::Kind),
            },
            held_for,
            valid_for,
            watchdog,
            version,
            boot,
            term_seen,
            virtual_machine,
        })
    }
}

impl Ack {
    pub fn seal(&self, key: &impl MacKey) -> Vec<u8> {
        sealed(|out| self.seal_into(key, out))
    }

    /// Sealed at the end of `out` (after what it holds: the same bytes as
    /// [`Self::seal`], in a buffer the caller keeps), in its [`Ack::version`]'s layout
    /// (version 2 has no term and no `arm`).
    pub fn seal_into(&self, key: &impl MacKey, out: &mut Vec<u8>) {
        let v3 = self.version != VERSION_2;
        let (version, body) = if v3 {
            (VERSION, ACK_BODY)
        } else {
            (VERSION_2, ACK_BODY_2)
        };
        let mut w = Writer::versioned(out, version, ACK, body);
        w.u64(self.session)
            .u64(self.beat_seq)
            .u64(nanos(self.beat_sent))
            .u8(u8::from(self.leader))
            .u8(u8::from(self.marked))
            .u64(nanos(self.sent))
            .u16(self.cluster)
            .u64(self.membership);
        if v3 {
            w.u64(self.term).u8(u8::from(self.arm));
        }
        w.seal(key);
    }

    /// An acknowledgement of either layout.
    pub fn open(datagram: &[u8], key: &impl MacKey) -> Result<Self, Refused> {
        let version = version_of(datagram)?;
        let body = if version == VERSION {
            ACK_BODY
        } else {
            ACK_BODY_2
        };
        let mut r = open_versioned(datagram, version, ACK, body, key)?;
        let session = r.u64();
        let beat_seq = r.u64();
        let beat_sent = r.duration();
        let flag = |b: u8| match b {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Refused::Kind),
        };
        let leader = flag(r.u8())?;
        let marked = flag(r.u8())?;
        let sent = r.duration();
        let cluster = r.u16();
        let membership = r.u64();
        let (term, arm) = if version == VERSION {
            let term = r.u64();
            let arm = flag(r.u8())?;
            // One encoding: a term and `arm` only in a leader's, and a leader's always
            // names its term.
            if leader == (term == 0) || (!leader && arm) {
                return Err(Refused::Kind);
            }
            (term, arm)
        } else {
            (0, false)
        };
        Ok(Self {
            session,
            beat_seq,
            beat_sent,
            leader,
            marked,
            sent,
            cluster,
            membership,
            version,
            term,
            arm,
        })
    }
}

impl Question {
    pub fn seal(&self, key: &impl MacKey) -> Vec<u8> {
        sealed(|out| self.seal_into(key, out))
    }

    /// Sealed at the end of `out` (after what it holds: the same bytes as
    /// [`Self::seal`], in a buffer the caller keeps).
    pub fn seal_into(&self, key: &impl MacKey, out: &mut Vec<u8>) {
        let mut w = Writer::new(out, QUESTION, QUESTION_BODY);
        w.u16(self.from).u64(self.nonce);
        w.seal(key);
    }

    pub fn open(datagram: &[u8], key: &impl MacKey) -> Result<Self, Refused> {
        let mut r = open(datagram, QUESTION, QUESTION_BODY, key)?;
        Ok(Self {
            from: r.u16(),
            nonce: r.u64(),
        })
    }
}

/// A public key (Ed25519): a replica's authority key, or a companion's own.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PublicKey(pub [u8; PUBLIC_KEY_LEN]);

impl PublicKey {
    /// Whether `signature` is this key's over `message`.
    fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, &self.0)
            .verify(message, signature)
            .is_ok()
    }
}

impl std::fmt::Debug for PublicKey {
    /// Its first 8 bytes, in hex (enough to tell keys apart in a log).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PublicKey(")?;
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        f.write_str("..)")
    }
}

/// A private key (Ed25519), from its 32-byte seed: a replica's authority key (made at
/// its start, never stored), or a companion's own (made at its start, kept in its state
/// file for a successor). Never printed.
pub struct SigningKey {
    seed: [u8; 32],
    pair: ring::signature::Ed25519KeyPair,
}

impl SigningKey {
    /// A new key from the system's generator; `None` without randomness.
    pub fn generate() -> Option<Self> {
        use ring::rand::SecureRandom as _;
        let mut seed = [0u8; 32];
        ring::rand::SystemRandom::new().fill(&mut seed).ok()?;
        Some(Self::from_seed(seed))
    }

    /// The key of `seed` (any 32 bytes are one).
    pub fn from_seed(seed: [u8; 32]) -> Self {
        let pair = ring::signature::Ed25519KeyPair::from_seed_unchecked(&seed)
            .unwrap_or_else(|_| unreachable!("an Ed25519 seed is any 32 bytes"));
        Self { seed, pair }
    }

    /// Its seed (what a state file keeps).
    pub fn seed(&self) -> [u8; 32] {
        self.seed
    }

    pub fn public(&self) -> PublicKey {
        use ring::signature::KeyPair as _;
        let mut out = [0u8; PUBLIC_KEY_LEN];
        out.copy_from_slice(self.pair.public_key().as_ref());
        PublicKey(out)
    }

    fn sign(&self, message: &[u8]) -> [u8; SIGNATURE_LEN] {
        let mut out = [0u8; SIGNATURE_LEN];
        out.copy_from_slice(self.pair.sign(message).as_ref());
        out
    }
}

impl Clone for SigningKey {
    fn clone(&self) -> Self {
        Self::from_seed(self.seed)
    }
}

impl PartialEq for SigningKey {
    fn eq(&self, other: &Self) -> bool {
        self.seed == other.seed
    }
}

impl Eq for SigningKey {}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey(public {:?})", self.public())
    }
}

/// What a replica signs at a companion's hello, once the API server's review of its
/// token bound it to a node: that node's companion answers its peers with this key.
/// Every peer that holds the authority's public key (a hello to that replica gave it)
/// can check an answer carrying it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Credential {
    /// The replica's authority key, which signed it.
    pub authority: PublicKey,
    /// The companion's key.
    pub subject: PublicKey,
    /// The boot the companion said its machine runs at the hello.
    pub boot: BootId,
    /// The authority's count of credentials issued (tells two of one node apart).
    pub serial: u64,
    node: String,
    signature: [u8; SIGNATURE_LEN],
}

/// Whether `name` can be a credential's node: 1 to [`NODE_NAME_LEN`] bytes of
/// printable ASCII, no space (a Kubernetes Node's name always is).
fn node_name_fits(name: &[u8]) -> bool {
    !name.is_empty() && name.len() <= NODE_NAME_LEN && name.iter().all(u8::is_ascii_graphic)
}

impl Credential {
    /// Signed by `authority`: `node`'s companion answers with `subject`'s key. `None`
    /// when `node` is not 1 to [`NODE_NAME_LEN`] bytes of printable ASCII.
    pub fn issue(
        authority: &SigningKey,
        subject: PublicKey,
        node: &str,
        boot: BootId,
        serial: u64,
    ) -> Option<Self> {
        if !node_name_fits(node.as_bytes()) {
            return None;
        }
        let mut c = Self {
            authority: authority.public(),
            subject,
            boot,
            serial,
            node: node.to_string(),
            signature: [0; SIGNATURE_LEN],
        };
        c.signature = authority.sign(&c.signed());
        Some(c)
    }

    /// The node it binds the key to.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Its fields before the signature, on the wire.
    fn fields(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.authority.0);
        out.extend_from_slice(&self.subject.0);
        out.extend_from_slice(&self.boot.0);
        out.extend_from_slice(&self.serial.to_be_bytes());
        let mut name = [0u8; NODE_NAME_LEN];
        let len = self.node.len().min(NODE_NAME_LEN);
        name[..len].copy_from_slice(&self.node.as_bytes()[..len]);
        out.extend_from_slice(&name);
    }

    /// What the authority signs: [`CREDENTIAL_CONTEXT`], then the fields.
    fn signed(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(CREDENTIAL_CONTEXT.len() + CREDENTIAL_LEN);
        out.extend_from_slice(CREDENTIAL_CONTEXT);
        self.fields(&mut out);
        out
    }

    /// On the wire (in an answer; base64 in a hello's answer and the state file).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(CREDENTIAL_LEN);
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut Vec<u8>) {
        self.fields(out);
        out.extend_from_slice(&self.signature);
    }

    /// Its layout checked (the exact length; a name of printable ASCII, then only
    /// NULs), no signature.
    pub fn parse(bytes: &[u8]) -> Result<Self, Refused> {
        if bytes.len() != CREDENTIAL_LEN {
            return Err(Refused::Length);
        }
        let mut r = Reader(bytes);
        let authority = PublicKey(r.take());
        let subject = PublicKey(r.take());
        let boot = BootId(r.take());
        let serial = r.u64();
        let name: [u8; NODE_NAME_LEN] = r.take();
        let len = name.iter().position(|b| *b == 0).unwrap_or(NODE_NAME_LEN);
        let (node, pad) = name.split_at(len);
        if !node_name_fits(node) || pad.iter().any(|b| *b != 0) {
            return Err(Refused::Kind);
        }
        Ok(Self {
            authority,
            subject,
            boot,
            serial,
            node: String::from_utf8_lossy(node).into_owned(),
            signature: r.take(),
        })
    }

    /// Its authority is one of `authorities`, and signed it.
    pub fn verify(&self, authorities: &[PublicKey]) -> Result<(), Refused> {
        if !authorities.contains(&self.authority) {
            return Err(Refused::Authority);
        }
        if !self.authority.verifies(&self.signed(), &self.signature) {
            return Err(Refused::Signature);
        }
        Ok(())
    }

    /// [`Self::parse`], then [`Self::verify`].
    pub fn open(bytes: &[u8], authorities: &[PublicKey]) -> Result<Self, Refused> {
        let c = Self::parse(bytes)?;
        c.verify(authorities)?;
        Ok(c)
    }
}

/// An answer whose layout holds, its signatures not checked yet: what it says may be
/// read to drop it cheaply (another round's, a node already counted), never to count
/// it.
#[derive(Debug)]
pub struct Unverified<'a> {
    /// What it says.
    pub answer: Answer,
    /// What its signature is over, and the signature.
    signed: &'a [u8],
    signature: &'a [u8],
}

impl Unverified<'_> {
    /// The answer's signature is its credential's key's (the credential itself is not
    /// checked here: [`Credential::verify`]).
    pub fn verify_signature(&self) -> Result<(), Refused> {
        if self
            .answer
            .credential
            .subject
            .verifies(self.signed, self.signature)
        {
            Ok(())
        } else {
            Err(Refused::Signature)
        }
    }
}

impl Answer {
    /// Signed with `key` (the credential's subject: another key's signature opens
    /// nowhere).
    pub fn sign(&self, key: &SigningKey) -> Vec<u8> {
        let mut out = Vec::with_capacity(ANSWER_LEN);
        self.sign_into(key, &mut out);
        out
    }

    /// Signed at the end of `out` (after what it holds: the same bytes as
    /// [`Self::sign`]).
    pub fn sign_into(&self, key: &SigningKey, out: &mut Vec<u8>) {
        out.reserve(ANSWER_LEN);
        let start = out.len();
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(ANSWER);
        self.credential.write(out);
        out.extend_from_slice(&self.nonce.to_be_bytes());
        out.push(self.reach);
        let signature = key.sign(&out[start..]);
        out.extend_from_slice(&signature);
    }

    /// Checks the header, the exact length and the layout (the credential's, a reach
    /// in range); nothing signed is checked yet.
    pub fn parse(datagram: &[u8]) -> Result<Unverified<'_>, Refused> {
        if datagram.len() != ANSWER_LEN {
            return Err(Refused::Length);
        }
        if datagram[..4] != MAGIC {
            return Err(Refused::Magic);
        }
        if datagram[4] != VERSION {
            return Err(Refused::Version);
        }
        if datagram[5] != ANSWER {
            return Err(Refused::Kind);
        }
        let (signed, signature) = datagram.split_at(ANSWER_LEN - SIGNATURE_LEN);
        let (credential, rest) = signed[HEADER..].split_at(CREDENTIAL_LEN);
        let credential = Credential::parse(credential)?;
        let mut r = Reader(rest);
        let nonce = r.u64();
        let reach = r.u8();
        if reach > 2 {
            return Err(Refused::Kind);
        }
        Ok(Unverified {
            answer: Self {
                credential,
                nonce,
                reach,
            },
            signed,
            signature,
        })
    }

    /// An answer whose credential an authority of `authorities` signed, and which its
    /// credential's key signed.
    pub fn open(datagram: &[u8], authorities: &[PublicKey]) -> Result<Self, Refused> {
        let unverified = Self::parse(datagram)?;
        unverified.answer.credential.verify(authorities)?;
        unverified.verify_signature()?;
        Ok(unverified.answer)
    }
}

/// Any `body` at all as an answer (header, `body`, then its signature under `key`):
/// what a holder of the key could send. For the fuzz targets and tests, which must
/// reach the checks made after the signature; nothing in the companion signs this way.
#[doc(hidden)]
pub fn sign_body(body: &[u8], key: &SigningKey) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + body.len() + SIGNATURE_LEN);
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.push(ANSWER);
    out.extend_from_slice(body);
    let signature = key.sign(&out);
    out.extend_from_slice(&signature);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: Key = Key([7; 32]);
    const OTHER: Key = Key([8; 32]);

    fn beat() -> Beat {
        Beat {
            session: 0x1122_3344_5566_7788,
            seq: 42,
            sent: Duration::from_millis(123_456),
            echo: Some((41, Duration::from_nanos(987_654_321))),
            held_for: Duration::from_secs(30),
            valid_for: Duration::from_millis(1_500),
            watchdog: WatchdogState::Armed {
                granted: Duration::from_secs(10),
                device: DeviceName::new("iTCO_wdt"),
            },
            version: VERSION,
            boot: Some(BootId::of("3f2a7c1e-0b5d-4e8a-9c41-6d2f0e7b9a13")),
            term_seen: 41_007,
            virtual_machine: true,
        }
    }

    #[test]
    fn a_device_name_is_printable_ascii_cut_to_its_length_and_checked_on_the_wire() {
        assert_eq!(DeviceName::new("iTCO_wdt").as_str(), "iTCO_wdt");
        assert_eq!(DeviceName::new("").as_str(), "unknown");
        assert_eq!(
            DeviceName::new("a-very-long-watchdog-driver").as_str(),
            "a-very-long-watc"
        );
        assert_eq!(DeviceName::new("w\u{e9}\n").as_str(), "w???");
        assert!(DeviceName::from_wire(*b"iTCO_wdt\0\0\0\0\0\0\0\0").is_some());
        assert!(
            DeviceName::from_wire(*b"iTCO\0wdt\0\0\0\0\0\0\0\0").is_none(),
            "text after the padding"
        );
        assert!(
            DeviceName::from_wire(*b"iTCO\nwdt\0\0\0\0\0\0\0\0").is_none(),
            "not printable"
        );
        // Sealed with a name that is not printable: refused as a malformed beat.
        let mut b = beat();
        b.watchdog = WatchdogState::Armed {
            granted: Duration::from_secs(10),
            device: DeviceName(*b"bad\x01name\0\0\0\0\0\0\0\0"),
        };
        assert_eq!(Beat::open(&b.seal(&K), &K), Err(Refused::Kind));
    }

    fn ack() -> Ack {
        Ack {
            session: 9,
            beat_seq: 42,
            beat_sent: Duration::from_millis(123_456),
            leader: true,
            marked: false,
            sent: Duration::from_secs(77),
            cluster: 5,
            membership: 3,
            version: VERSION,
            term: 41_007,
            arm: true,
        }
    }

    #[test]
    fn every_kind_round_trips_under_its_key() {
        let b = beat();
        let sealed = b.seal(&K);
        assert_eq!(sealed.len(), HEADER + BEAT_BODY + MAC_LEN);
        assert!(sealed.len() <= MAX_DATAGRAM);
        assert_eq!(Beat::open(&sealed, &K), Ok(b.clone()));
        assert_eq!(session_of(&sealed), Some(b.session));
        let no_echo = Beat {
            echo: None,
            watchdog: WatchdogState::Stopping,
            ..b
        };
        assert_eq!(Beat::open(&no_echo.seal(&K), &K), Ok(no_echo));
        let a = ack();
        assert_eq!(Ack::open(&a.seal(&K), &K), Ok(a));
        let q = Question { from: 3, nonce: 99 };
        assert_eq!(Question::open(&q.seal(&K), &K), Ok(q));
        let ans = answer(0);
        let signed = ans.sign(&companion_key());
        assert_eq!(signed.len(), ANSWER_LEN);
        assert!(signed.len() <= PEER_MAX_DATAGRAM && ANSWER_LEN > MAX_DATAGRAM);
        assert_eq!(Answer::open(&signed, &[authority().public()]), Ok(ans));
    }

    #[test]
    fn sealed_into_a_buffer_already_holding_others_each_is_what_seal_gives_and_opens() {
        let prepared = PreparedKey::from(&K);
        let mut out = b"before".to_vec();
        let (a, b) = (ack(), beat());
        let q = Question { from: 3, nonce: 99 };
        let ans = answer(1);
        a.seal_into(&prepared, &mut out);
        b.seal_into(&prepared, &mut out);
        q.seal_into(&K, &mut out);
        ans.sign_into(&companion_key(), &mut out);
        let (before, rest) = out.split_at(6);
        assert_eq!(before, b"before");
        let (sa, rest) = rest.split_at(HEADER + ACK_BODY + MAC_LEN);
        let (sb, rest) = rest.split_at(HEADER + BEAT_BODY + MAC_LEN);
        let (sq, sans) = rest.split_at(HEADER + QUESTION_BODY + MAC_LEN);
        assert_eq!(
            (sa, sb, sq, sans),
            (
                &a.seal(&K)[..],
                &b.seal(&K)[..],
                &q.seal(&K)[..],
                &ans.sign(&companion_key())[..]
            )
        );
        assert_eq!(Ack::open(sa, &K), Ok(a));
        assert_eq!(Beat::open(sb, &K), Ok(b));
        assert_eq!(Question::open(sq, &K), Ok(q));
        assert_eq!(Answer::open(sans, &[authority().public()]), Ok(ans));
    }

    #[test]
    fn a_prepared_key_seals_and_opens_as_its_key_does_every_time() {
        let prepared = PreparedKey::from(&K);
        let a = ack();
        // Each use starts from the keyed state, not from what the last one fed.
        for _ in 0..3 {
            assert_eq!(a.seal(&prepared), a.seal(&K));
            assert_eq!(Ack::open(&a.seal(&K), &prepared), Ok(a.clone()));
        }
        assert_eq!(
            Ack::open(&a.seal(&PreparedKey::from(&OTHER)), &prepared),
            Err(Refused::Mac)
        );
        assert_eq!(format!("{prepared:?}"), "PreparedKey(..)");
    }

    #[test]
    fn another_key_a_flipped_bit_or_another_kind_is_refused() {
        let sealed = ack().seal(&K);
        assert_eq!(Ack::open(&sealed, &OTHER), Err(Refused::Mac), "forged");
        for i in 0..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 0x01;
            assert!(Ack::open(&bad, &K).is_err(), "bit flipped in byte {i}");
        }
        // A beat is not an acknowledgement, even under the right key.
        assert_eq!(Ack::open(&beat().seal(&K), &K), Err(Refused::Length));
        let q = Question { from: 1, nonce: 2 }.seal(&K);
        assert_eq!(Answer::parse(&q).err(), Some(Refused::Length));
    }

    #[test]
    fn garbage_short_and_oversized_datagrams_are_refused_before_any_field() {
        let sealed = beat().seal(&K);
        assert_eq!(Beat::open(&[], &K), Err(Refused::Length));
        assert_eq!(
            Beat::open(&sealed[..sealed.len() - 1], &K),
            Err(Refused::Length)
        );
        let mut long = sealed.clone();
        long.push(0);
        assert_eq!(Beat::open(&long, &K), Err(Refused::Length));
        let mut magic = sealed.clone();
        magic[0] = b'X';
        assert_eq!(Beat::open(&magic, &K), Err(Refused::Magic));
        let mut version = sealed.clone();
        version[4] = 1;
        assert_eq!(Beat::open(&version, &K), Err(Refused::Version));
        assert_eq!(kind(&[0; 300]), None);
        assert_eq!(session_of(b"NFWD"), None);
        // Signed values out of range are refused even with a good signature.
        let mut body = answer(0).credential.to_bytes();
        body.extend_from_slice(&2u64.to_be_bytes());
        body.push(9);
        let out = sign_body(&body, &companion_key());
        assert_eq!(Answer::parse(&out).err(), Some(Refused::Kind));
    }

    #[test]
    fn a_beat_has_one_encoding_an_absent_field_with_bytes_in_it_is_refused() {
        // Found by the heartbeat_datagrams fuzz target: a beat whose watchdog state
        // said "none" opened whatever its timeout's bytes held, so two datagrams said
        // the same beat. Offsets in the body: echo 25..41, state 57, timeout 58..66,
        // driver 66..82.
        let canonical = |b: &Beat| {
            let sealed = b.seal(&K);
            sealed[HEADER..sealed.len() - MAC_LEN].to_vec()
        };
        let with = |body: &[u8], at: usize, byte: u8| {
            let mut body = body.to_vec();
            body[at] = byte;
            seal_body(BEAT, &body, &K)
        };
        let mut none = beat();
        none.echo = None;
        none.watchdog = WatchdogState::None;
        let body = canonical(&none);
        assert_eq!(
            Beat::open(&seal_body(BEAT, &body, &K), &K),
            Ok(none.clone())
        );
        for (at, what) in [
            (28, "an echo's beat"),
            (35, "an echo's time"),
            (60, "a timeout"),
            (70, "a driver"),
        ] {
            assert_eq!(
                Beat::open(&with(&body, at, b'x'), &K),
                Err(Refused::Kind),
                "{what} with no watchdog or echo"
            );
        }
        let mut stopping = none.clone();
        stopping.watchdog = WatchdogState::Stopping;
        let body = canonical(&stopping);
        assert_eq!(Beat::open(&seal_body(BEAT, &body, &K), &K), Ok(stopping));
        assert_eq!(Beat::open(&with(&body, 60, 1), &K), Err(Refused::Kind));
        // What a companion seals opens, and seals back to the same bytes.
        let b = beat();
        assert_eq!(
            Beat::open(&b.seal(&K), &K).map(|o| o.seal(&K)),
            Ok(b.seal(&K))
        );
    }

    #[test]
    fn a_body_sealed_raw_is_the_datagram_its_kind_seals_and_a_prepared_key_opens_it() {
        let ack = Ack {
            session: 9,
            beat_seq: 4,
            beat_sent: Duration::from_millis(1500),
            leader: true,
            marked: false,
            sent: Duration::from_secs(3),
            cluster: 5,
            membership: 2,
            version: VERSION,
            term: 7,
            arm: false,
        };
        let sealed = ack.seal(&K);
        let body = &sealed[HEADER..sealed.len() - MAC_LEN];
        assert_eq!(seal_body(ACK, body, &K), sealed);
        assert_eq!(seal_body(ACK, body, &PreparedKey::from(&K)), sealed);
        assert_eq!(Ack::open(&sealed, &PreparedKey::from(&K)), Ok(ack));
        // Another key's seal of the same body does not open under this one.
        let other = seal_body(ACK, body, &Key([8; 32]));
        assert_eq!(Ack::open(&other, &K), Err(Refused::Mac));
    }

    /// A companion not upgraded yet beats in version 2: a replica reads it (no boot, no
    /// term) and answers in version 2, which such a companion reads.
    #[test]
    fn a_version_2_beat_is_read_and_answered_in_version_2() {
        let v2 = Beat {
            version: VERSION_2,
            boot: None,
            term_seen: 0,
            virtual_machine: false,
            ..beat()
        };
        let sealed = v2.seal(&K);
        assert_eq!(sealed.len(), HEADER + BEAT_BODY_2 + MAC_LEN);
        assert_eq!(sealed[4], VERSION_2);
        assert_eq!(kind(&sealed), Some(BEAT_KIND));
        assert_eq!(session_of(&sealed), Some(v2.session));
        assert_eq!(Beat::open(&sealed, &K), Ok(v2));
        let a = Ack {
            version: VERSION_2,
            term: 0,
            arm: false,
            ..ack()
        };
        let sealed = a.seal(&K);
        assert_eq!(sealed.len(), HEADER + ACK_BODY_2 + MAC_LEN);
        assert_eq!(Ack::open(&sealed, &K), Ok(a));
        // Version 2 had no "disarming": a beat sealed so is not one.
        let mut b = beat();
        b.version = VERSION_2;
        b.boot = None;
        b.term_seen = 0;
        b.virtual_machine = false;
        b.watchdog = WatchdogState::Disarming {
            granted: Duration::from_secs(10),
            device: DeviceName::new("iTCO_wdt"),
        };
        assert_eq!(Beat::open(&b.seal(&K), &K), Err(Refused::Kind));
        // Peer questions are version 3 only.
        let mut q = Question { from: 1, nonce: 2 }.seal(&K);
        q[4] = VERSION_2;
        assert_eq!(kind(&q), None);
    }

    #[test]
    fn a_term_is_in_a_leaders_acknowledgement_only() {
        let standby = Ack {
            leader: false,
            term: 0,
            arm: false,
            ..ack()
        };
        assert_eq!(Ack::open(&standby.seal(&K), &K), Ok(standby.clone()));
        for bad in [
            Ack {
                term: 3,
                ..standby.clone()
            },
            Ack {
                arm: true,
                ..standby.clone()
            },
            Ack {
                leader: true,
                ..standby
            },
        ] {
            assert_eq!(Ack::open(&bad.seal(&K), &K), Err(Refused::Kind), "{bad:?}");
        }
    }

    #[test]
    fn a_boot_id_is_its_uuid_and_any_other_text_its_digest() {
        let id = BootId::of(" 3F2A7C1E-0B5D-4E8A-9C41-6D2F0E7B9A13\n");
        assert_eq!(id.to_string(), "3f2a7c1e-0b5d-4e8a-9c41-6d2f0e7b9a13");
        assert!(id.is("3f2a7c1e-0b5d-4e8a-9c41-6d2f0e7b9a13"));
        assert!(!id.is("3f2a7c1e-0b5d-4e8a-9c41-6d2f0e7b9a14"));
        let other = BootId::of("boot-of-worker-1");
        assert_eq!(other, BootId::of("Boot-of-Worker-1 "));
        assert_ne!(other, BootId::of("boot-of-worker-2"));
        assert_ne!(other, BootId::default());
        // Not a UUID though 36 long: a digest, never a misread.
        let odd = "zz2a7c1e-0b5d-4e8a-9c41-6d2f0e7b9a13";
        assert_ne!(BootId::of(odd).to_string(), odd);
    }

    #[test]
    fn the_key_never_prints() {
        assert_eq!(format!("{K:?}"), "Key(..)");
        let key = format!("{:?}", companion_key());
        assert!(key.starts_with("SigningKey(public PublicKey("), "{key}");
        assert!(!key.contains("0303"), "{key}");
    }

    /// The replica's authority key, and the companion's own (seeds of test keys).
    fn authority() -> SigningKey {
        SigningKey::from_seed([1; 32])
    }

    fn companion_key() -> SigningKey {
        SigningKey::from_seed([3; 32])
    }

    fn credential_for(node: &str, authority: &SigningKey, key: &SigningKey) -> Credential {
        Credential::issue(
            authority,
            key.public(),
            node,
            BootId::of("3f2a7c1e-0b5d-4e8a-9c41-6d2f0e7b9a13"),
            7,
        )
        .unwrap_or_else(|| panic!("{node:?} fits a credential"))
    }

    fn answer(reach: u8) -> Answer {
        Answer {
            credential: credential_for("worker-2", &authority(), &companion_key()),
            nonce: 99,
            reach,
        }
    }

    #[test]
    fn a_credential_names_one_node_under_its_authority_and_round_trips() {
        let c = credential_for("worker-2", &authority(), &companion_key());
        let bytes = c.to_bytes();
        assert_eq!(bytes.len(), CREDENTIAL_LEN);
        assert_eq!(CREDENTIAL_LEN, 405);
        assert_eq!(
            Credential::open(&bytes, &[authority().public()]),
            Ok(c.clone())
        );
        assert_eq!(c.node(), "worker-2");
        assert_eq!(c.subject, companion_key().public());
        // Another authority's, or none held: refused.
        let other = SigningKey::from_seed([2; 32]);
        assert_eq!(
            Credential::open(&bytes, &[other.public()]),
            Err(Refused::Authority)
        );
        assert_eq!(Credential::open(&bytes, &[]), Err(Refused::Authority));
        // Every bit counts.
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x01;
            assert!(
                Credential::open(&bad, &[authority().public()]).is_err(),
                "bit flipped in byte {i}"
            );
        }
        // A credential another key claims to be the authority of does not verify.
        let mut claimed = Credential::parse(&bytes).unwrap_or_else(|e| panic!("{e}"));
        claimed.authority = other.public();
        assert_eq!(claimed.verify(&[other.public()]), Err(Refused::Signature));
        // The longest name a Node can have fits; nothing longer, nothing empty, no
        // space or control byte is issued.
        let longest = "a".repeat(NODE_NAME_LEN);
        let c = credential_for(&longest, &authority(), &companion_key());
        assert_eq!(
            Credential::open(&c.to_bytes(), &[authority().public()]).map(|c| c.node),
            Ok(longest.clone())
        );
        for bad in [
            "".to_string(),
            format!("{longest}a"),
            "worker 1".into(),
            "w\n".into(),
            "w\u{e9}".into(),
        ] {
            let issued = Credential::issue(
                &authority(),
                companion_key().public(),
                &bad,
                BootId::default(),
                1,
            );
            assert!(issued.is_none(), "{bad:?} issued");
        }
    }

    #[test]
    fn a_credential_has_one_encoding_a_name_then_only_nuls() {
        let c = credential_for("worker-2", &authority(), &companion_key());
        let at = 2 * PUBLIC_KEY_LEN + 16 + 8;
        for (offset, byte, what) in [
            (10, b'x', "text after the padding"),
            (3, 0, "a NUL inside the name"),
            (0, 0, "an empty name"),
            (2, b' ', "a space"),
        ] {
            let mut bytes = c.to_bytes();
            bytes[at + offset] = byte;
            assert_eq!(Credential::parse(&bytes), Err(Refused::Kind), "{what}");
        }
        assert_eq!(
            Credential::parse(&c.to_bytes()).map(|p| p.to_bytes()),
            Ok(c.to_bytes())
        );
        assert_eq!(Credential::parse(&[0; 10]), Err(Refused::Length));
    }

    /// An answer names its node by a credential only that node's key can sign for:
    /// a peer holding another node's key (and every peer key) cannot answer for it.
    #[test]
    fn an_answer_signed_by_another_nodes_key_or_under_an_unknown_authority_is_refused() {
        let authorities = [authority().public()];
        let ans = answer(0);
        let signed = ans.sign(&companion_key());
        assert_eq!(Answer::open(&signed, &authorities), Ok(ans.clone()));
        // worker-3's key, worker-2's credential: the signature is not its key's.
        let worker_3 = SigningKey::from_seed([4; 32]);
        assert_eq!(
            Answer::open(&ans.sign(&worker_3), &authorities),
            Err(Refused::Signature)
        );
        // A credential worker-3 made itself, under an authority no replica is.
        let own_authority = SigningKey::from_seed([5; 32]);
        let minted = Answer {
            credential: credential_for("worker-4", &own_authority, &worker_3),
            ..ans.clone()
        };
        assert_eq!(
            Answer::open(&minted.sign(&worker_3), &authorities),
            Err(Refused::Authority)
        );
        // Every bit counts, the credential's and the answer's.
        for i in 0..signed.len() {
            let mut bad = signed.clone();
            bad[i] ^= 0x01;
            assert!(
                Answer::open(&bad, &authorities).is_err(),
                "bit flipped in byte {i}"
            );
        }
        // Parsed, not verified: what it says, to drop it cheaply; then checked.
        let forged = ans.sign(&worker_3);
        let parsed = Answer::parse(&forged).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed.answer, ans);
        assert_eq!(parsed.verify_signature(), Err(Refused::Signature));
        // What opens signs back to the same bytes (Ed25519 signs deterministically).
        assert_eq!(
            Answer::open(&signed, &authorities).map(|a| a.sign(&companion_key())),
            Ok(signed.clone())
        );
    }

    /// Kind 4, an answer sealed under the peer key (any holder of the key could answer
    /// as any node, as many times as it liked), is refused as an unknown kind.
    #[test]
    fn an_answer_sealed_under_the_peer_key_is_no_longer_one() {
        let retired = seal_body(4, &[0, 4, 0, 0, 0, 0, 0, 0, 0, 99, 0], &K);
        assert_eq!(kind(&retired), None);
        assert_eq!(Answer::parse(&retired).err(), Some(Refused::Length));
        let signed = answer(0).sign(&companion_key());
        assert_eq!(kind(&signed), Some(ANSWER_KIND));
        let mut as_4 = signed.clone();
        as_4[5] = 4;
        assert_eq!(Answer::parse(&as_4).err(), Some(Refused::Kind));
        assert_eq!(kind(&as_4), None);
    }
}
