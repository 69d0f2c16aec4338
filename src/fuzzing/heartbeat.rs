//! The heartbeat as the network meets it: the leader's table of companions and one
//! companion's end of its session, both fed the same datagrams: bytes as they come,
//! any body at all sealed under the session's key (what a holder of the key, or a
//! buggy companion, could send, so the checks behind the MAC are reached), the
//! companion's own beats and the table's own acknowledgements, replayed at will. The
//! token a companion proves its node with, as the API server's review of it.
//!
//! Beyond "no panic", what must hold whatever arrives:
//! - a datagram opens the same under a plain and a prepared key, and one that opens
//!   has exactly one encoding (sealing what it says gives back its bytes);
//! - the table answers only a beat of the session it opened, never the same beat
//!   twice, with one acknowledgement that opens under the session's key and echoes
//!   that beat, the leadership and the mark; when it refuses, it writes nothing;
//! - the companion takes only an acknowledgement of a beat it sent (within its
//!   window), and learns that beat's own sending time, not one the datagram says;
//! - a peer's answer opens only with a credential the replica's authority signed and
//!   the signature of that credential's key (a body is signed with the companion's
//!   key, its first bytes made a genuine credential at will, so the checks behind the
//!   signatures are reached), names the credential's node, and has one encoding;
//! - a look at the silent companions without a walk says what a walk says;
//! - a reviewed token binds a node only when authenticated, for the companion's
//!   audience, as the companion's ServiceAccount, with exactly that one node.
//!
//! A broken promise panics (that is how libFuzzer hears of it), hence `expect` on
//! what the daemon's own code must have produced.
#![allow(clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::TokenReviewStatus;
use nodefence_watchdog::feeding::Reaching;
use nodefence_watchdog::session::CompanionEnd;
use nodefence_watchdog::timing::Timing;
use nodefence_watchdog::wire::{
    self, Ack, Answer, Beat, BootId, Credential, DeviceName, Key, PreparedKey, Question,
    SigningKey, WatchdogState,
};

use crate::heartbeat::hello::{self, AUDIENCE, NODE_NAME};
use crate::heartbeat::table::{SilenceWatch, Table};

/// The session's key (the fuzzer cannot forge a MAC; it can have one made).
const KEY: Key = Key([0x5a; 32]);
/// The node the session beats for.
const NODE: &str = "worker-1";
/// The companion's window (the isolation timeout) and the silence timeout.
const WINDOW: Duration = Duration::from_secs(2);
const SILENCE: Duration = Duration::from_secs(2);
/// A time step (an input's byte of it).
const STEP: Duration = Duration::from_millis(50);
/// Bytes already in the answers' buffer: an acknowledgement goes after them.
const BEFORE: &[u8] = b"earlier answers";

/// The replica's authority key, the companion's own, and the credential the first
/// signed for the second (the fuzzer cannot forge a signature; it can have a body
/// signed, and a genuine credential put in it).
static AUTHORITY: std::sync::LazyLock<SigningKey> =
    std::sync::LazyLock::new(|| SigningKey::from_seed([0x11; 32]));
static COMPANION_KEY: std::sync::LazyLock<SigningKey> =
    std::sync::LazyLock::new(|| SigningKey::from_seed([0x22; 32]));
static CREDENTIAL: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
    Credential::issue(
        &AUTHORITY,
        COMPANION_KEY.public(),
        NODE,
        BootId::of("fuzzed-boot"),
        1,
    )
    .expect("the node's name fits a credential")
    .to_bytes()
});

/// One record of the input: `flags`, a time step, a body's length (two bytes,
/// big-endian), the body.
/// `flags`: bits 0-1 the source (0 the bytes as they are, 1 the body sealed as kind
/// bits 2-4, or, for an answer's kind, signed with the companion's key, 2 the
/// companion's next beat, 3 the table's last acknowledgement), bit 5 the session id
/// written over the body's first 8 bytes (an answer's: the genuine credential over
/// its first [`wire::CREDENTIAL_LEN`]), bit 6 the table leads, bit 7 the node is
/// marked. What happened, counted (for the seeds' tests).
pub fn heartbeat_datagrams(bytes: &[u8]) -> Tally {
    let mut tally = Tally::default();
    let mut table = Table::new(Timing::default());
    table.set_nodes_in_cluster(3);
    let session = table.open(NODE, 0x1234_5678_9abc_def0, KEY.clone());
    let mut companion = CompanionEnd::new(KEY.clone(), session, WINDOW);
    let mut watch = SilenceWatch::default();
    let mut last_silent: Vec<(String, Duration)> = Vec::new();
    // The companion's beats: seq -> when sent.
    let mut sent: BTreeMap<u64, Duration> = BTreeMap::new();
    let mut last_answered = 0u64;
    let mut last_ack: Vec<u8> = Vec::new();
    let mut now = Duration::from_secs(1);
    let mut rest = bytes;
    while let [flags, step, len_high, len_low, tail @ ..] = rest {
        let len = usize::from(u16::from_be_bytes([*len_high, *len_low]));
        let body = &tail[..len.min(tail.len())];
        rest = &tail[body.len()..];
        now += STEP * u32::from(*step);
        let (leader, marked) = (flags & 0x40 != 0, flags & 0x80 != 0);
        let datagram = match flags & 3 {
            0 => body.to_vec(),
            1 if (flags >> 2) & 7 == wire::ANSWER_KIND => {
                let mut body = body.to_vec();
                if flags & 0x20 != 0 && body.len() >= wire::CREDENTIAL_LEN {
                    body[..wire::CREDENTIAL_LEN].copy_from_slice(&CREDENTIAL);
                }
                wire::sign_body(&body, &COMPANION_KEY)
            }
            1 => {
                let mut body = body.to_vec();
                if flags & 0x20 != 0 && body.len() >= 8 {
                    body[..8].copy_from_slice(&session.to_be_bytes());
                }
                wire::seal_body((flags >> 2) & 7, &body, &KEY)
            }
            2 => {
                let beat = companion.beat(now, reaching(body), watchdog(body));
                let opened = Beat::open(&beat, &KEY).expect("the companion's beat opens");
                sent.insert(opened.seq, now);
                beat
            }
            _ => last_ack.clone(),
        };
        tally.peers += usize::from(opens_one_way(&datagram));

        let mut out = BEFORE.to_vec();
        let answered = table.beat_into(
            &datagram,
            now,
            leader.then_some(1),
            |_| marked,
            |_| false,
            &mut out,
        );
        // A beat that shows the replica stood still, or names a newer term, is not
        // acknowledged as the leader's (the suspicion is taken here, each record).
        let suspected = table.take_suspicion().is_some();
        match answered {
            Ok(()) => {
                let beat = Beat::open(&datagram, &KEY).expect("an answered beat opens");
                assert_eq!(beat.session, session, "a beat of another session answered");
                assert!(beat.seq > last_answered, "beat {} answered twice", beat.seq);
                last_answered = beat.seq;
                assert_eq!(&out[..BEFORE.len()], BEFORE, "earlier answers overwritten");
                let ack = Ack::open(&out[BEFORE.len()..], &KEY).expect("the ack opens");
                assert_eq!(
                    (ack.session, ack.beat_seq, ack.beat_sent),
                    (session, beat.seq, beat.sent),
                    "the acknowledgement echoes another beat"
                );
                let leads = leader && !suspected;
                assert_eq!(
                    (ack.leader, ack.marked),
                    (leads, leads && marked),
                    "a standby's acknowledgement never carries the mark"
                );
                assert_eq!(ack.term, u64::from(leads), "the term only in a leader's");
                assert_eq!(ack.sent, now);
                last_ack = out[BEFORE.len()..].to_vec();
                tally.answered += 1;
            }
            Err(_) => {
                assert_eq!(out, BEFORE, "a refused datagram was answered");
                tally.refused += 1;
            }
        }

        if let Ok(taken) = companion.acknowledged(&datagram, now) {
            let ack = Ack::open(&datagram, &KEY).expect("a taken ack opens");
            assert_eq!(ack.session, session);
            let beat_sent = sent.get(&ack.beat_seq).copied();
            assert_eq!(
                beat_sent,
                Some(taken.beat_sent),
                "an acknowledgement of a beat never sent was taken, or its time believed"
            );
            assert!(
                now.saturating_sub(taken.beat_sent) < WINDOW,
                "a stale ack taken"
            );
            // It and every older beat are settled: neither is taken again.
            sent.retain(|seq, _| *seq > ack.beat_seq);
            tally.taken += 1;
        }

        let walked = table.silent(now, SILENCE);
        if let Some(looked) = table.silent_if_changed(&mut watch, now, SILENCE) {
            last_silent = looked;
        }
        assert_eq!(last_silent, walked, "a look without a walk missed a change");
        tally.silent += usize::from(!walked.is_empty());
        let _ = table.summary(now, SILENCE);
        let _ = table.unarmed(&[NODE.to_string()].into(), now, SILENCE);
    }
    tally
}

/// What [`heartbeat_datagrams`] saw happen: datagrams the table answered and
/// refused, acknowledgements the companion took, records after which the companion
/// was silent, and datagrams that opened as a peers' question or answer.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub answered: usize,
    pub refused: usize,
    pub taken: usize,
    pub silent: usize,
    pub peers: usize,
}

/// Opened under a plain and a prepared key alike, as each kind; what opens seals back
/// to the same bytes. Whether it opened as a peers' question or answer.
fn opens_one_way(datagram: &[u8]) -> bool {
    let _ = wire::kind(datagram);
    let _ = wire::session_of(datagram);
    let prepared = PreparedKey::from(&KEY);
    let beat = Beat::open(datagram, &KEY);
    assert_eq!(beat, Beat::open(datagram, &prepared));
    if let Ok(b) = beat {
        assert_eq!(b.seal(&KEY), datagram, "a beat with two encodings");
    }
    let ack = Ack::open(datagram, &KEY);
    assert_eq!(ack, Ack::open(datagram, &prepared));
    if let Ok(a) = ack {
        assert_eq!(
            a.seal(&KEY),
            datagram,
            "an acknowledgement with two encodings"
        );
    }
    let question = Question::open(datagram, &KEY);
    assert_eq!(question, Question::open(datagram, &prepared));
    if let Ok(q) = &question {
        assert_eq!(q.seal(&KEY), datagram, "a question with two encodings");
    }
    let answer = Answer::open(datagram, &[AUTHORITY.public()]);
    // Parsed, then checked, it is what opening it says.
    let checked = Answer::parse(datagram).and_then(|p| {
        p.answer.credential.verify(&[AUTHORITY.public()])?;
        p.verify_signature()?;
        Ok(p.answer)
    });
    assert_eq!(answer, checked);
    assert_eq!(
        Answer::open(datagram, &[]).ok(),
        None,
        "an answer opened under no authority"
    );
    if let Ok(a) = &answer {
        assert_eq!(
            a.sign(&COMPANION_KEY),
            datagram,
            "an answer with two encodings"
        );
        assert_eq!(
            (a.credential.node(), a.credential.subject),
            (NODE, COMPANION_KEY.public()),
            "an answer for a node or key no credential was issued"
        );
    }
    question.is_ok() || answer.is_ok()
}

/// The companion's hold on the control plane, from a body's first 16 bytes.
fn reaching(body: &[u8]) -> Reaching {
    let nanos = |at: usize| {
        body.get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_be_bytes)
    };
    Reaching {
        held_for: Duration::from_nanos(nanos(0)),
        valid_for: Duration::from_nanos(nanos(8)),
    }
}

/// The watchdog a beat reports, from a body's 17th byte on. An armed one has a
/// timeout of 1 s or more: the companion arms no device that grants none
/// (`device::check`), and a beat cannot carry one.
fn watchdog(body: &[u8]) -> WatchdogState {
    match body.get(16).map(|b| b % 3) {
        Some(1) => WatchdogState::Armed {
            granted: Duration::from_secs(u64::from(body.get(17).copied().unwrap_or(10).max(1))),
            device: DeviceName::new(&String::from_utf8_lossy(body.get(18..).unwrap_or(&[]))),
        },
        Some(2) => WatchdogState::Stopping,
        _ => WatchdogState::None,
    }
}

/// The companions' ServiceAccount, as the review names it.
const COMPANION_USER: &str = "system:serviceaccount:nodefence:nodefence-companion";

/// A TokenReview's status as the API server could answer it (JSON): bound to a node
/// only when every condition of [`hello::bind`] holds, and then to that one node.
/// The node bound, if any (for the seeds' tests).
pub fn token_review(bytes: &[u8]) -> Option<String> {
    let Ok(status) = serde_json::from_slice::<TokenReviewStatus>(bytes) else {
        return None;
    };
    let bound = hello::bind(&status, COMPANION_USER);
    match &bound {
        Ok(node) => {
            assert_eq!(
                status.authenticated,
                Some(true),
                "bound without authentication"
            );
            assert!(
                status.audiences.iter().flatten().any(|a| a == AUDIENCE),
                "bound for another audience"
            );
            let user = status.user.as_ref().expect("bound without a user");
            assert_eq!(user.username.as_deref(), Some(COMPANION_USER));
            let nodes = user.extra.as_ref().and_then(|e| e.get(NODE_NAME));
            assert_eq!(
                nodes.map(Vec::as_slice),
                Some(std::slice::from_ref(node)),
                "bound to a node not its own"
            );
            assert!(!node.trim().is_empty(), "bound to a blank node");
        }
        // What a refusal says is one line, and fits an Event's note.
        Err(refusal) => {
            let why = refusal.to_string();
            assert!(!why.contains(['\n', '\r']), "{why:?}");
            assert!(
                why.len() <= crate::untrusted::EVENT_NOTE_BYTES,
                "{} bytes",
                why.len()
            );
        }
    }
    bound.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed seeds of the two targets, each a path through the checks.
    fn seed(target: &str, name: &str) -> Vec<u8> {
        let path = format!("{}/fuzz/corpus/{target}/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn a_session_s_life_answers_each_beat_once_and_takes_each_fresh_ack_once() {
        // Six beats, each answered; seven acknowledgements delivered: five taken, one
        // replayed and one three seconds late refused (and all seven refused by the
        // table, as not beats, with the empty datagram). Silent twice, after 3 s.
        assert_eq!(
            heartbeat_datagrams(&seed("heartbeat_datagrams", "session_life")),
            Tally {
                answered: 6,
                refused: 8,
                taken: 5,
                silent: 2,
                peers: 0
            }
        );
    }

    #[test]
    fn of_the_bodies_sealed_under_the_key_only_well_formed_fresh_beats_are_answered() {
        // A beat, an armed one, and one with every field at its limit; refused: an
        // unknown echo flag, watchdog state, an armed watchdog of no timeout or a
        // driver name not printable, a replay, another session, a byte too many, and
        // every acknowledgement, question, answer and unknown kind (the question opens
        // as the peers' one; the answers, sealed under the peer key, are of the
        // retired kind).
        assert_eq!(
            heartbeat_datagrams(&seed("heartbeat_datagrams", "sealed_bodies")),
            Tally {
                answered: 3,
                refused: 13,
                taken: 0,
                silent: 0,
                peers: 1
            }
        );
        let as_they_come = heartbeat_datagrams(&seed("heartbeat_datagrams", "as_they_come"));
        assert_eq!((as_they_come.answered, as_they_come.refused), (0, 4));
    }

    #[test]
    fn a_signed_answer_opens_only_with_the_genuine_credential_and_a_well_formed_body() {
        // Opened: two answers with the genuine credential (reach neither, the API
        // server) and a question. Refused: a reach out of range, a credential of an
        // authority not held, one with no name, a byte short, a byte too many, and the
        // retired answer sealed under the peer key. The table refuses all nine.
        assert_eq!(
            heartbeat_datagrams(&seed("heartbeat_datagrams", "signed_answers")),
            Tally {
                answered: 0,
                refused: 9,
                taken: 0,
                silent: 0,
                peers: 3
            }
        );
    }

    #[test]
    fn every_committed_seed_and_finding_holds() {
        for target in ["heartbeat_datagrams", "token_review"] {
            let dir = format!("{}/fuzz/corpus/{target}", env!("CARGO_MANIFEST_DIR"));
            let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir}: {e}"));
            for entry in entries.flatten() {
                let bytes = std::fs::read(entry.path()).unwrap_or_default();
                match target {
                    "heartbeat_datagrams" => drop(heartbeat_datagrams(&bytes)),
                    _ => drop(token_review(&bytes)),
                }
            }
        }
    }

    #[test]
    fn a_token_binds_its_one_node_only_when_every_condition_holds() {
        assert_eq!(
            token_review(&seed("token_review", "bound")),
            Some("worker-1".into())
        );
        for refused in [
            "another_audience",
            "another_user",
            "two_nodes",
            "blank_node",
            "not_authenticated",
        ] {
            assert_eq!(
                token_review(&seed("token_review", refused)),
                None,
                "{refused}"
            );
        }
    }
}
