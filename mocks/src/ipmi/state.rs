//! The BMC's shared state and what it records about its clients.
//!
//! One lock guards everything (machine, sessions, faults, logs, counters); a datagram
//! is processed start to finish under it and it is never held across an await, so a
//! test always sees a consistent picture. The logs let tests assert what a client
//! really did ("power down executed exactly twice", "every command ran at
//! OPERATOR"), the counters what the BMC silently dropped.

use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use nodefence_ipmi_proto::command::{ChassisControl, Privilege};
use nodefence_ipmi_proto::crypto::CipherSuite;
use serde::Serialize;
use tokio::time::Instant;

use super::faults::FaultSet;
use super::model::{Machine, UserSpec};
use super::sessions::SessionTable;

/// One Chassis Control the BMC executed (refused, ignored or fault-answered ones are
/// only in the request log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlRecord {
    pub op: ChassisControl,
    /// When it was executed.
    pub at: Instant,
    /// The BMC's session id (SIDc) it arrived in.
    pub session_id: u32,
    pub username: String,
}

/// One IPMI command the BMC received, in a session or before one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    pub at: Instant,
    /// Request network function (even).
    pub net_fn: u8,
    pub cmd: u8,
    /// The requester's sequence number (retransmissions repeat it).
    pub rq_seq: u8,
    /// Request data.
    pub data: Vec<u8>,
    /// The BMC's session id (SIDc); `None` outside a session.
    pub session_id: Option<u32>,
    /// The session's privilege level when the command arrived; `None` outside a session.
    pub privilege: Option<Privilege>,
    /// The completion code answered; `None` if the command got no answer by design
    /// ([`Fault::NoCipherSuitesReply`](super::Fault::NoCipherSuitesReply)). A reply
    /// suppressed or spoiled by a fault still shows the code it carried.
    pub completion_code: Option<u8>,
}

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionEnd {
    /// Close Session.
    Closed,
    /// No valid packet for the inactivity timeout.
    TimedOut,
    /// [`MockIpmiHandle::expire_sessions`](super::MockIpmiHandle::expire_sessions).
    Expired,
}

/// One session that completed the RAKP handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    /// SIDc.
    pub bmc_session_id: u32,
    /// SIDm.
    pub console_session_id: u32,
    pub username: String,
    pub suite: CipherSuite,
    /// The maximum privilege negotiated in RAKP 1.
    pub max_privilege: Privilege,
    pub established: Instant,
    /// When and how it ended; `None` while it is active.
    pub ended: Option<(Instant, SessionEnd)>,
}

/// Incoming datagrams dropped without an answer, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DropCounters {
    /// Session packets whose AuthCode did not verify.
    pub bad_auth_code: u64,
    /// Session packets whose sequence number was a replay or outside the window.
    pub out_of_sequence: u64,
    /// Session packets for a session id that is not active (never was, closed,
    /// timed out, or still in its handshake).
    pub unknown_session: u64,
    /// Anything else that could not be parsed or is not a request.
    pub malformed: u64,
    /// Dropped by [`Fault::Loss`](super::Fault::Loss) or
    /// [`Fault::DropIncoming`](super::Fault::DropIncoming).
    pub injected: u64,
}

/// What the BMC counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Sessions that completed the handshake (RAKP 4 sent with status 0).
    pub sessions_opened: u64,
    /// Sessions ended by Close Session.
    pub sessions_closed: u64,
    /// Sessions ended by the inactivity timeout or `expire_sessions`.
    pub sessions_expired: u64,
    /// Sessions active now.
    pub active_sessions: usize,
    /// Handshake messages answered with a non-zero RMCP+ status.
    pub handshakes_refused: u64,
    /// Replies not sent because of [`Fault::DropReplies`](super::Fault::DropReplies).
    pub replies_dropped: u64,
    pub dropped: DropCounters,
}

/// Settings fixed at start.
pub(crate) struct Config {
    pub(crate) name: String,
    pub(crate) users: Vec<UserSpec>,
    pub(crate) kg: Option<Vec<u8>>,
    pub(crate) suites: Vec<CipherSuite>,
    pub(crate) delay: Duration,
    pub(crate) session_timeout: Duration,
    pub(crate) max_sessions: usize,
    pub(crate) started: Instant,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("name", &self.name)
            .field("users", &self.users)
            .field("kg", &self.kg.as_ref().map(|_| "<redacted>"))
            .field("suites", &self.suites)
            .field("delay", &self.delay)
            .field("session_timeout", &self.session_timeout)
            .field("max_sessions", &self.max_sessions)
            .finish()
    }
}

impl Config {
    /// How long a session may stay half-open (between Open Session and RAKP 3).
    pub(crate) fn handshake_timeout(&self) -> Duration {
        self.session_timeout.min(Duration::from_secs(10))
    }
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) machine: Machine,
    pub(crate) guid: [u8; 16],
    pub(crate) faults: FaultSet,
    pub(crate) sessions: SessionTable,
    pub(crate) controls: Vec<ControlRecord>,
    pub(crate) requests: Vec<RequestRecord>,
    pub(crate) session_log: Vec<SessionRecord>,
    pub(crate) counters: Counters,
}

impl Inner {
    pub(crate) fn new(machine: Machine, guid: [u8; 16]) -> Self {
        Self {
            machine,
            guid,
            faults: FaultSet::default(),
            sessions: SessionTable::default(),
            controls: Vec::new(),
            requests: Vec::new(),
            session_log: Vec::new(),
            counters: Counters::default(),
        }
    }

    /// Marks an established session as ended in the session log and counts it.
    pub(crate) fn end_session(&mut self, bmc_session_id: u32, how: SessionEnd, now: Instant) {
        if let Some(rec) = self
            .session_log
            .iter_mut()
            .rev()
            .find(|r| r.bmc_session_id == bmc_session_id && r.ended.is_none())
        {
            rec.ended = Some((now, how));
        }
        match how {
            SessionEnd::Closed => self.counters.sessions_closed += 1,
            SessionEnd::TimedOut | SessionEnd::Expired => self.counters.sessions_expired += 1,
        }
    }

    /// Drops sessions idle for longer than their timeout.
    pub(crate) fn expire_idle(&mut self, config: &Config, now: Instant) {
        let ended = self
            .sessions
            .expire(now, config.session_timeout, config.handshake_timeout());
        for id in ended {
            self.end_session(id, SessionEnd::TimedOut, now);
        }
    }

    pub(crate) fn counters(&self) -> Counters {
        Counters {
            active_sessions: self.sessions.active_count(),
            ..self.counters
        }
    }
}

/// Everything the UDP task, the handles and the admin API share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: Config,
    inner: Mutex<Inner>,
}

impl Shared {
    pub(crate) fn new(config: Config, inner: Inner) -> Self {
        Self {
            config,
            inner: Mutex::new(inner),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The state with idle sessions expired (what every reader wants).
    pub(crate) fn lock_fresh(&self) -> MutexGuard<'_, Inner> {
        let mut inner = self.lock();
        inner.expire_idle(&self.config, Instant::now());
        inner
    }

    /// Empties the control and request logs and the records of ended sessions.
    pub(crate) fn clear_logs(&self) {
        let mut inner = self.lock();
        inner.controls.clear();
        inner.requests.clear();
        inner.session_log.retain(|s| s.ended.is_none());
    }

    /// Ends every established session; returns how many.
    pub(crate) fn expire_sessions(&self) -> usize {
        let mut inner = self.lock();
        let ids = inner.sessions.remove_all_active();
        let now = Instant::now();
        for &id in &ids {
            inner.end_session(id, SessionEnd::Expired, now);
        }
        ids.len()
    }
}
