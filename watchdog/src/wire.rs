//! The heartbeat's datagrams: a companion's beat, a replica's acknowledgement, and the
//! question one companion asks its peers with their answer. Binary, fixed layouts,
//! each sealed with HMAC-SHA256 under a key the two ends share: a beat and its
//! acknowledgement under the session key a replica gave that companion over TLS (so
//! only that replica can acknowledge, and only that companion can beat for its node),
//! the peers' question and answer under the cluster's peer key.
//!
//! A datagram is `magic "NFWD" | version 2 | kind | body | MAC (32 bytes)`, the MAC
//! over everything before it. Anything else is refused before any field is read:
//! shorter or longer than its kind's exact size, another magic, version or kind, a
//! MAC that does not verify (compared in constant time). Behind the MAC each datagram
//! has one encoding: a flag or state out of range, or bytes in a field its flag says
//! is absent, is refused too. What the fields promise (a sequence never seen, an
//! acknowledgement of a beat actually sent) is checked by the session that reads
//! them, not here. Durations are nanoseconds of the sender's monotonic clock;
//! integers are big-endian.

use std::time::Duration;

use hmac::block_api::HmacCore;
use hmac::digest::block_api::CoreProxy;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The first bytes of every datagram.
pub const MAGIC: [u8; 4] = *b"NFWD";
/// The layout version (2: a beat names its watchdog's driver).
pub const VERSION: u8 = 2;
/// The MAC's length.
pub const MAC_LEN: usize = 32;
/// The header: magic, version, kind.
const HEADER: usize = 6;
/// The longest datagram of any kind (a listener reads at most this many bytes).
pub const MAX_DATAGRAM: usize = 256;

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
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refused::Length => "wrong length",
            Refused::Magic => "not a nodefence datagram",
            Refused::Version => "another version",
            Refused::Kind => "unknown kind",
            Refused::Mac => "MAC does not verify",
        })
    }
}

impl std::error::Error for Refused {}

/// The companion's hold on the watchdog, reported in each beat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatchdogState {
    /// No usable device: the companion beats, and nothing rests on its watchdog.
    None,
    /// Armed, with the timeout the driver granted, and the driver.
    Armed {
        granted: Duration,
        device: DeviceName,
    },
    /// A clean stop is under way: its watchdog no longer counts.
    Stopping,
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
}

/// A companion asking its peers whether they reach the control plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// The asking node's index in the membership, and a nonce it will accept once.
    pub from: u16,
    pub nonce: u64,
}

/// A peer's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub from: u16,
    pub nonce: u64,
    /// 0 neither, 1 the leader, 2 the API server.
    pub reach: u8,
}

const BEAT: u8 = 1;
/// The kind byte of a beat (a listener drops any other before looking further).
pub const BEAT_KIND: u8 = BEAT;
const ACK: u8 = 2;
const QUESTION: u8 = 3;
const ANSWER: u8 = 4;

/// The body sizes.
const BEAT_BODY: usize = 8 + 8 + 8 + 1 + 8 + 8 + 8 + 8 + 1 + 8 + DEVICE_NAME_LEN;
const ACK_BODY: usize = 8 + 8 + 8 + 1 + 1 + 8 + 2 + 8;
const QUESTION_BODY: usize = 2 + 8;
const ANSWER_BODY: usize = 2 + 8 + 1;

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
        out.reserve(HEADER + body + MAC_LEN);
        let start = out.len();
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
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
/// `None` when it is not one of ours.
pub fn kind(datagram: &[u8]) -> Option<u8> {
    (datagram.len() > HEADER && datagram[..4] == MAGIC && datagram[4] == VERSION)
        .then(|| datagram[5])
        .filter(|k| (BEAT..=ANSWER).contains(k))
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
    if datagram.len() != HEADER + body + MAC_LEN {
        return Err(Refused::Length);
    }
    if datagram[..4] != MAGIC {
        return Err(Refused::Magic);
    }
    if datagram[4] != VERSION {
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
    /// [`Self::seal`], in a buffer the caller keeps).
    pub fn seal_into(&self, key: &impl MacKey, out: &mut Vec<u8>) {
        let mut w = Writer::new(out, BEAT, BEAT_BODY);
        let (has_echo, echo_seq, echo_sent) = match self.echo {
            Some((seq, sent)) => (1, seq, nanos(sent)),
            None => (0, 0, 0),
        };
        let (state, granted, device) = match self.watchdog {
            WatchdogState::None => (0, 0, DeviceName::default()),
            WatchdogState::Armed { granted, device } => (1, nanos(granted), device),
            WatchdogState::Stopping => (2, 0, DeviceName::default()),
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
        w.seal(key);
    }

    pub fn open(datagram: &[u8], key: &impl MacKey) -> Result<Self, Refused> {
        let mut r = open(datagram, BEAT, BEAT_BODY, key)?;
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
            _ => return Err(Refused::Kind),
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
        })
    }
}

impl Ack {
    pub fn seal(&self, key: &impl MacKey) -> Vec<u8> {
        sealed(|out| self.seal_into(key, out))
    }

    /// Sealed at the end of `out` (after what it holds: the same bytes as
    /// [`Self::seal`], in a buffer the caller keeps).
    pub fn seal_into(&self, key: &impl MacKey, out: &mut Vec<u8>) {
        let mut w = Writer::new(out, ACK, ACK_BODY);
        w.u64(self.session)
            .u64(self.beat_seq)
            .u64(nanos(self.beat_sent))
            .u8(u8::from(self.leader))
            .u8(u8::from(self.marked))
            .u64(nanos(self.sent))
            .u16(self.cluster)
            .u64(self.membership);
        w.seal(key);
    }

    pub fn open(datagram: &[u8], key: &impl MacKey) -> Result<Self, Refused> {
        let mut r = open(datagram, ACK, ACK_BODY, key)?;
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
        Ok(Self {
            session,
            beat_seq,
            beat_sent,
            leader,
            marked,
            sent: r.duration(),
            cluster: r.u16(),
            membership: r.u64(),
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

impl Answer {
    pub fn seal(&self, key: &impl MacKey) -> Vec<u8> {
        sealed(|out| self.seal_into(key, out))
    }

    /// Sealed at the end of `out` (after what it holds: the same bytes as
    /// [`Self::seal`], in a buffer the caller keeps).
    pub fn seal_into(&self, key: &impl MacKey, out: &mut Vec<u8>) {
        let mut w = Writer::new(out, ANSWER, ANSWER_BODY);
        w.u16(self.from).u64(self.nonce).u8(self.reach);
        w.seal(key);
    }

    pub fn open(datagram: &[u8], key: &impl MacKey) -> Result<Self, Refused> {
        let mut r = open(datagram, ANSWER, ANSWER_BODY, key)?;
        let a = Self {
            from: r.u16(),
            nonce: r.u64(),
            reach: r.u8(),
        };
        if a.reach > 2 {
            return Err(Refused::Kind);
        }
        Ok(a)
    }
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
        let ans = Answer {
            from: 4,
            nonce: 99,
            reach: 0,
        };
        assert_eq!(Answer::open(&ans.seal(&K), &K), Ok(ans));
    }

    #[test]
    fn sealed_into_a_buffer_already_holding_others_each_is_what_seal_gives_and_opens() {
        let prepared = PreparedKey::from(&K);
        let mut out = b"before".to_vec();
        let (a, b) = (ack(), beat());
        let q = Question { from: 3, nonce: 99 };
        let ans = Answer {
            from: 4,
            nonce: 99,
            reach: 1,
        };
        a.seal_into(&prepared, &mut out);
        b.seal_into(&prepared, &mut out);
        q.seal_into(&K, &mut out);
        ans.seal_into(&K, &mut out);
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
                &ans.seal(&K)[..]
            )
        );
        assert_eq!(Ack::open(sa, &K), Ok(a));
        assert_eq!(Beat::open(sb, &K), Ok(b));
        assert_eq!(Question::open(sq, &K), Ok(q));
        assert_eq!(Answer::open(sans, &K), Ok(ans));
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
        assert_eq!(Answer::open(&q, &K), Err(Refused::Length));
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
        // Sealed values out of range are refused even with a good MAC.
        let mut out = Vec::new();
        let mut w = Writer::new(&mut out, ANSWER, ANSWER_BODY);
        w.u16(1).u64(2).u8(9);
        w.seal(&K);
        assert_eq!(Answer::open(&out, &K), Err(Refused::Kind));
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

    #[test]
    fn the_key_never_prints() {
        assert_eq!(format!("{K:?}"), "Key(..)");
    }
}
