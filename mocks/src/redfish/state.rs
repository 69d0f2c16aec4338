//! The mock's shared state, and the operations tests and the admin API perform on it.
//!
//! One lock guards everything (systems, faults, sessions, logs, tasks): requests are
//! short and the lock is never held across an await, so a test always sees a
//! consistent picture. Logs record what clients did, so tests can assert on it ("no
//! Reset was sent", "the client re-used its session").

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::Instant;

use super::accounts::{Account, SessionLogin};
use super::faults::{Fault, FaultSet};
use super::model::{MockPower, SystemState};
use super::profile::{Profile, ResetResponse};
use super::sessions::{AuthKind, SessionStore};
use super::tasks::TaskStore;

/// One `/redfish` request the mock received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    pub method: String,
    /// The request path (no query string).
    pub path: String,
    /// The credentials the request presented (valid or not).
    pub auth: AuthKind,
    /// The status answered; `None` if no response was sent (dropped connection, or
    /// still hanging).
    pub status: Option<u16>,
    /// The request's `User-Agent` header.
    #[serde(default)]
    pub user_agent: Option<String>,
}

/// One Reset the mock received (accepted or refused).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResetRecord {
    /// The system's `Id`.
    pub system: String,
    /// The `ResetType` string as sent.
    pub reset_type: String,
}

/// A [`ResetRecord`] with the moment the mock received it (tests measure the
/// spacing of power commands with it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedReset {
    pub system: String,
    pub reset_type: String,
    pub at: Instant,
}

/// A [`RequestRecord`] with when it arrived and when it was answered (`None`: not
/// answered, or not yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedRequest {
    pub record: RequestRecord,
    pub received: Instant,
    pub answered: Option<Instant>,
}

/// A system as the admin API and [`MockRedfishHandle::systems`](super::MockRedfishHandle::systems)
/// show it: its real state, not what a faulty GET would report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemInfo {
    pub id: String,
    pub name: String,
    pub uuid: String,
    pub power: MockPower,
    /// The allowable ResetType values (advertised, except on the Minimal profile).
    pub reset_types: Vec<String>,
}

/// A system id the mock does not serve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no system {0:?}")]
pub struct UnknownSystem(pub String);

/// Settings fixed at start.
#[derive(Debug)]
pub(crate) struct Config {
    pub(crate) profile: Profile,
    pub(crate) username: String,
    pub(crate) password: String,
    /// Every account accepted: the main one (Administrator) first.
    pub(crate) accounts: Vec<Account>,
    pub(crate) session_login: SessionLogin,
    /// What a read-only user's write is refused with (401 or 403).
    pub(crate) privilege_status: u16,
    pub(crate) delay: Duration,
    pub(crate) service_uuid: String,
    pub(crate) reset_response: ResetResponse,
    /// `http://127.0.0.1:PORT` or `https://localhost:PORT`.
    pub(crate) base_url: String,
}

#[derive(Debug, Default)]
pub(crate) struct Inner {
    pub(crate) systems: Vec<SystemState>,
    pub(crate) faults: FaultSet,
    pub(crate) sessions: SessionStore,
    pub(crate) resets: Vec<ResetRecord>,
    /// When each entry of `resets` was received.
    pub(crate) reset_times: Vec<Instant>,
    requests: Vec<(u64, RequestRecord, Instant, Option<Instant>)>,
    next_request: u64,
    pub(crate) tasks: TaskStore,
}

impl Inner {
    pub(crate) fn system_mut(&mut self, id: &str) -> Option<&mut SystemState> {
        self.systems.iter_mut().find(|s| s.id == id)
    }
}

/// Everything the server and the handles share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: Config,
    inner: Mutex<Inner>,
    /// Bumped whenever faults change, to wake hanging requests.
    faults_changed: watch::Sender<u64>,
}

impl Shared {
    pub(crate) fn new(config: Config, systems: Vec<SystemState>) -> Self {
        let inner = Inner {
            systems,
            ..Inner::default()
        };
        Self {
            config,
            inner: Mutex::new(inner),
            faults_changed: watch::Sender::new(0),
        }
    }

    /// The state, even if a panicking test thread poisoned the lock.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn watch_faults(&self) -> watch::Receiver<u64> {
        self.faults_changed.subscribe()
    }

    pub(crate) fn systems(&self) -> Vec<SystemInfo> {
        let now = Instant::now();
        let mut inner = self.lock();
        inner.systems.iter_mut().map(|s| info(s, now)).collect()
    }

    pub(crate) fn system(&self, id: &str) -> Option<SystemInfo> {
        let now = Instant::now();
        self.lock().system_mut(id).map(|s| info(s, now))
    }

    pub(crate) fn power(&self, id: &str) -> Option<MockPower> {
        let now = Instant::now();
        self.lock().system_mut(id).map(|s| s.power(now))
    }

    pub(crate) fn set_power(
        &self,
        id: &str,
        power: MockPower,
    ) -> Result<SystemInfo, UnknownSystem> {
        let now = Instant::now();
        let mut inner = self.lock();
        let system = inner
            .system_mut(id)
            .ok_or_else(|| UnknownSystem(id.to_owned()))?;
        system.force(power);
        Ok(info(system, now))
    }

    pub(crate) fn set_power_feed(&self, id: &str, fed: bool) -> Result<SystemInfo, UnknownSystem> {
        let now = Instant::now();
        let mut inner = self.lock();
        let system = inner
            .system_mut(id)
            .ok_or_else(|| UnknownSystem(id.to_owned()))?;
        system.feed(fed);
        Ok(info(system, now))
    }

    pub(crate) fn set_uuid(&self, id: &str, uuid: &str) -> Result<SystemInfo, UnknownSystem> {
        let now = Instant::now();
        let mut inner = self.lock();
        let system = inner
            .system_mut(id)
            .ok_or_else(|| UnknownSystem(id.to_owned()))?;
        system.uuid = uuid.to_owned();
        Ok(info(system, now))
    }

    pub(crate) fn inject(&self, fault: Fault) {
        {
            let mut inner = self.lock();
            if fault == Fault::Flap {
                for s in &mut inner.systems {
                    s.flap_reads = 0;
                }
            }
            inner.faults.insert(fault);
        }
        self.faults_changed.send_modify(|v| *v += 1);
    }

    pub(crate) fn clear_faults(&self) {
        self.lock().faults = FaultSet::default();
        self.faults_changed.send_modify(|v| *v += 1);
    }

    pub(crate) fn faults(&self) -> Vec<Fault> {
        self.lock().faults.active()
    }

    pub(crate) fn resets(&self) -> Vec<ResetRecord> {
        self.lock().resets.clone()
    }

    pub(crate) fn timed_resets(&self) -> Vec<TimedReset> {
        let inner = self.lock();
        inner
            .resets
            .iter()
            .zip(&inner.reset_times)
            .map(|(r, at)| TimedReset {
                system: r.system.clone(),
                reset_type: r.reset_type.clone(),
                at: *at,
            })
            .collect()
    }

    pub(crate) fn requests(&self) -> Vec<RequestRecord> {
        self.lock()
            .requests
            .iter()
            .map(|(_, r, _, _)| r.clone())
            .collect()
    }

    pub(crate) fn timed_requests(&self) -> Vec<TimedRequest> {
        self.lock()
            .requests
            .iter()
            .map(|(_, r, received, answered)| TimedRequest {
                record: r.clone(),
                received: *received,
                answered: *answered,
            })
            .collect()
    }

    pub(crate) fn clear_logs(&self) {
        let mut inner = self.lock();
        inner.resets.clear();
        inner.reset_times.clear();
        inner.requests.clear();
    }

    pub(crate) fn active_sessions(&self) -> usize {
        self.lock().sessions.len()
    }

    pub(crate) fn expire_sessions(&self) -> usize {
        self.lock().sessions.expire_all()
    }

    /// Logs a request as it arrives (no status yet); returns its log key.
    pub(crate) fn begin_request(
        &self,
        method: &str,
        path: &str,
        auth: AuthKind,
        user_agent: Option<String>,
    ) -> u64 {
        let mut inner = self.lock();
        inner.next_request += 1;
        let key = inner.next_request;
        inner.requests.push((
            key,
            RequestRecord {
                method: method.to_owned(),
                path: path.to_owned(),
                auth,
                status: None,
                user_agent,
            },
            Instant::now(),
            None,
        ));
        key
    }

    /// Records the status a logged request was answered with.
    pub(crate) fn finish_request(&self, key: u64, status: u16) {
        let mut inner = self.lock();
        if let Some((_, record, _, answered)) =
            inner.requests.iter_mut().rev().find(|(k, ..)| *k == key)
        {
            record.status = Some(status);
            *answered = Some(Instant::now());
        }
    }
}

fn info(system: &mut SystemState, now: Instant) -> SystemInfo {
    SystemInfo {
        id: system.id.clone(),
        name: system.name.clone(),
        uuid: system.uuid.clone(),
        power: system.power(now),
        reset_types: system.reset_types.clone(),
    }
}
