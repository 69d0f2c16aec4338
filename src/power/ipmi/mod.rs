//! The IPMI v2.0 (RMCP+) power driver, `driver = "ipmi"`.
//!
//! Native and async: one UDP socket per BMC (opened on first use), the packet codec
//! and session crypto of `nodefence-ipmi-proto`, cipher suites 17 and 3 only.
//!
//! - **Session set-up** (`setup`): Get Channel Authentication Capabilities, Open
//!   Session with the configured suite, or 17 and then 3 (many BMCs take one proposal
//!   per Open Session, so a refused or unanswered proposal is followed by a new Open
//!   Session with the next suite; a BMC that answers a proposal with another allowed
//!   suite gets that one; the suite that worked is proposed first next time), RAKP 1–4,
//!   Set Session Privilege Level to the configured privilege. A set-up that loses a
//!   message after Open Session starts over once.
//! - **Requests** (`session`, `transport`): one at a time per BMC. A reply counts only
//!   if it is authentic, for our session, in the sequence window and echoes the
//!   request; everything else is discarded. Idempotent requests (status, power down,
//!   power up, GUID, set-up messages) are resent every `request_timeout / (retries +
//!   1)`, kept between 250 ms and 1 s, until `request_timeout`; power cycle and hard reset are sent
//!   once. `operation_timeout` bounds everything, session set-up included.
//! - **Session reuse**: the session is kept between calls and replaced after
//!   [`IDLE_LIMIT`] without use (BMCs drop idle sessions after about a minute). When
//!   an idempotent request on a kept session gets no answer, a new session is set up
//!   once and the request sent once more. A session given up on (no answer, failed
//!   set-up after RAKP 3, idle) is sent Close Session without waiting for the reply,
//!   so the BMC's few session slots do not fill up.
//! - Commands only ask; [`crate::power::confirm`] reads the state back. IPMI has no
//!   transitional power state: the chassis power bit is On or Off.
//! - The machine identity is the Get System GUID reply in wire order, formatted as a
//!   UUID string ([`format_guid`]); [`crate::identity`] accepts the byte orders BMCs
//!   use. It is read once per session.
//!
//! No message, log line or `Debug` output contains the password, K_g or session keys.

mod request;
mod session;
mod setup;
mod transport;

#[cfg(test)]
mod fake;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use nodefence_ipmi_proto::command::{self, ChassisControl, ChassisStatus, Privilege};
use nodefence_ipmi_proto::crypto::{CipherSuite, Credentials};
use secrecy::ExposeSecret;
use tokio::sync::{Mutex, Semaphore};
use tokio::time::{Instant, timeout_at};

use self::request::{Command, completion_error};
use self::session::Session;
use self::setup::Login;
use self::transport::{ExchangeError, Plan, Transport};
use crate::config::{IpmiKey, IpmiPrivilege, IpmiTarget, Timeouts};
use crate::identity::MachineIdentity;
use crate::power::{PowerDriver, PowerError, PowerReading, PowerState};

/// A session unused this long is replaced by a new one before the next request.
pub const IDLE_LIMIT: Duration = Duration::from_secs(30);
/// The shortest pause between two sends of the same request.
pub const MIN_RETRANSMIT: Duration = Duration::from_millis(250);
/// Budget of the best-effort Close Session in [`PowerDriver::close`].
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// The longest pause between two sends of the same request (ipmitool's lanplus
/// default): one lost datagram must not cost seconds.
pub const MAX_RETRANSMIT: Duration = Duration::from_secs(1);

/// How often a request is resent: `request / (retries + 1)`, kept between 250 ms and
/// 1 s.
pub fn retransmit_interval(timeouts: &Timeouts) -> Duration {
    (timeouts.request / timeouts.retries.saturating_add(1)).clamp(MIN_RETRANSMIT, MAX_RETRANSMIT)
}

/// The 16 Get System GUID bytes, in wire order, as a lowercase 8-4-4-4-12 UUID.
pub fn format_guid(guid: [u8; 16]) -> String {
    uuid::Uuid::from_bytes(guid).hyphenated().to_string()
}

/// What the driver keeps between calls (behind one lock: one request at a time).
struct State {
    transport: Transport,
    session: Option<Session>,
    /// The suite of the last session that was set up; proposed first next time.
    working_suite: Option<CipherSuite>,
}

/// One BMC spoken to over IPMI v2.0 / RMCP+.
///
/// Every call runs in a task of its own, so a caller that gives up (a confirmation
/// deadline drops the reading in flight) never cuts a session set-up or an exchange
/// in half: the call finishes within `operation_timeout`, and the session ends up
/// either kept or closed, never left open on the BMC.
pub struct IpmiDriver {
    inner: Arc<Inner>,
}

/// The driver's state, shared with the tasks that run its calls.
struct Inner {
    endpoint: String,
    username: String,
    creds: Credentials,
    privilege: Privilege,
    /// Suites allowed, in the order to propose them.
    suites: Vec<CipherSuite>,
    kg_configured: bool,
    timeouts: Timeouts,
    state: Mutex<State>,
}

impl std::fmt::Debug for IpmiDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = &self.inner;
        f.debug_struct("IpmiDriver")
            .field("endpoint", &inner.endpoint)
            .field("username", &inner.username)
            .field("privilege", &inner.privilege)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("endpoint", &self.endpoint)
            .field("username", &self.username)
            .field("privilege", &self.privilege)
            .finish_non_exhaustive()
    }
}

impl IpmiDriver {
    /// A driver for `target`; `limiter` bounds requests in flight across all BMCs.
    /// Fails (kind Config) when the credentials exceed IPMI's limits or the cipher
    /// suite is not 3 or 17.
    pub fn new(target: &IpmiTarget, limiter: Arc<Semaphore>) -> Result<Self, PowerError> {
        Ok(Self {
            inner: Arc::new(Inner::new(target, limiter)?),
        })
    }

    /// The cipher suite of the current session, if one is open.
    pub async fn session_cipher_suite(&self) -> Option<u8> {
        self.inner.session_cipher_suite().await
    }

    /// Datagrams received and discarded (not the awaited reply) over the driver's life.
    pub async fn discarded_datagrams(&self) -> u64 {
        self.inner.discarded_datagrams().await
    }

    /// The Get System GUID bytes in wire order (cached for the session's lifetime).
    pub async fn system_guid(&self) -> Result<[u8; 16], PowerError> {
        self.run(|inner| async move { inner.system_guid().await })
            .await
    }

    /// Runs `call` in a task of its own (see the type's doc).
    async fn run<T, F, Fut>(&self, call: F) -> Result<T, PowerError>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Inner>) -> Fut,
        Fut: std::future::Future<Output = Result<T, PowerError>> + Send + 'static,
    {
        let endpoint = self.inner.endpoint.clone();
        tokio::spawn(call(self.inner.clone()))
            .await
            .unwrap_or_else(|e| {
                Err(PowerError::protocol(format!(
                    "BMC {endpoint}: internal: the IPMI call failed: {e}"
                )))
            })
    }
}

impl Inner {
    fn new(target: &IpmiTarget, limiter: Arc<Semaphore>) -> Result<Self, PowerError> {
        let kg = target.kg.as_ref().map(IpmiKey::expose);
        let creds = Credentials::new(
            target.credential.username.as_bytes(),
            target.credential.password.expose_secret().as_bytes(),
            kg,
        )
        .map_err(|e| {
            PowerError::config(format!(
                "{e} (user {:?}, password from {})",
                target.credential.username, target.credential.source
            ))
        })?;
        let suites = match target.cipher_suite {
            None => vec![CipherSuite::Suite17, CipherSuite::Suite3],
            Some(id) => vec![CipherSuite::from_id(id).map_err(|_| {
                PowerError::config(format!("cipher_suite {id} is not supported; use 3 or 17"))
            })?],
        };
        let privilege = match target.privilege {
            IpmiPrivilege::Operator => Privilege::Operator,
            IpmiPrivilege::Administrator => Privilege::Administrator,
        };
        let endpoint = if target.address.contains(':') && !target.address.starts_with('[') {
            format!("ipmi://[{}]:{}", target.address, target.port)
        } else {
            format!("ipmi://{}:{}", target.address, target.port)
        };
        Ok(Self {
            endpoint,
            username: target.credential.username.clone(),
            creds,
            privilege,
            suites,
            kg_configured: kg.is_some_and(|k| k.iter().any(|&b| b != 0)),
            timeouts: target.timeouts,
            state: Mutex::new(State {
                transport: Transport::new(
                    target.address.clone(),
                    target.port,
                    target.timeouts.connect,
                    limiter,
                ),
                session: None,
                working_suite: None,
            }),
        })
    }

    /// The cipher suite of the current session, if one is open.
    pub async fn session_cipher_suite(&self) -> Option<u8> {
        let state = self.state.lock().await;
        state
            .session
            .as_ref()
            .and(state.working_suite)
            .map(CipherSuite::id)
    }

    /// Datagrams received and discarded (not the awaited reply) over the driver's life.
    pub async fn discarded_datagrams(&self) -> u64 {
        self.state.lock().await.transport.discarded_total()
    }

    /// The Get System GUID bytes in wire order (cached for the session's lifetime).
    pub async fn system_guid(&self) -> Result<[u8; 16], PowerError> {
        let deadline = Instant::now() + self.timeouts.operation;
        let mut state = self.lock(deadline).await?;
        self.expire_idle(&mut state, deadline).await;
        if let Some(guid) = state.session.as_ref().and_then(|s| s.guid) {
            return Ok(guid);
        }
        let (cc, data) = self
            .call_locked(&mut state, Command::SystemGuid, deadline)
            .await
            .map_err(|e| self.located(e))?;
        let guid = match cc {
            command::CC_OK => command::decode_system_guid(&data).map_err(|e| {
                self.located(PowerError::protocol(format!(
                    "malformed Get System GUID reply: {e}"
                )))
            })?,
            command::CC_INVALID_COMMAND => {
                return Err(self.located(PowerError::unsupported(
                    "the BMC does not implement Get System GUID (completion code 0xc1)",
                )));
            }
            cc => return Err(self.located(completion_error(Command::SystemGuid, cc))),
        };
        if let Some(session) = state.session.as_mut() {
            session.guid = Some(guid);
        }
        Ok(guid)
    }

    fn located(&self, e: PowerError) -> PowerError {
        PowerError::new(e.kind, format!("BMC {}: {}", self.endpoint, e.message))
    }

    fn plan(&self, idempotent: bool, deadline: Instant) -> Plan {
        Plan {
            request_timeout: self.timeouts.request,
            retransmit: idempotent.then(|| retransmit_interval(&self.timeouts)),
            deadline,
        }
    }

    async fn lock(
        &self,
        deadline: Instant,
    ) -> Result<tokio::sync::MutexGuard<'_, State>, PowerError> {
        timeout_at(deadline, self.state.lock()).await.map_err(|_| {
            self.located(PowerError::unreachable(
                "an earlier request to this BMC was still running at the operation deadline",
            ))
        })
    }

    /// Sends `command` in a session (set up if needed) and returns the completion code
    /// and data of the reply.
    async fn call(&self, command: Command) -> Result<(u8, Vec<u8>), PowerError> {
        let deadline = Instant::now() + self.timeouts.operation;
        let mut state = self.lock(deadline).await?;
        self.call_locked(&mut state, command, deadline)
            .await
            .map_err(|e| self.located(e))
    }

    async fn call_locked(
        &self,
        state: &mut State,
        command: Command,
        deadline: Instant,
    ) -> Result<(u8, Vec<u8>), PowerError> {
        self.expire_idle(state, deadline).await;
        let reused = state.session.is_some();
        let result = match self.send_in_session(state, command, deadline).await {
            Err(ExchangeError::NoAnswer { .. }) if reused && command.idempotent() => {
                tracing::debug!(endpoint = %self.endpoint, command = command.name(), "no answer in the kept IPMI session; setting up a new one");
                self.forget_session(state, deadline).await;
                self.send_in_session(state, command, deadline).await
            }
            other => other,
        };
        let e = match result {
            Ok(reply) => return Ok(reply),
            Err(e) => e,
        };
        let no_answer = matches!(e, ExchangeError::NoAnswer { .. });
        if no_answer {
            self.forget_session(state, deadline).await;
        }
        let mut e = e.into_power_error(command.name());
        if no_answer && !command.idempotent() {
            e.message.push_str(
                "; it was sent once and not repeated (a repeat could act twice): read the power state to see whether it happened",
            );
        }
        Err(e)
    }

    async fn send_in_session(
        &self,
        state: &mut State,
        command: Command,
        deadline: Instant,
    ) -> Result<(u8, Vec<u8>), ExchangeError> {
        if state.session.is_none() {
            self.establish(state, deadline)
                .await
                .map_err(ExchangeError::Failed)?;
        }
        let State {
            transport, session, ..
        } = state;
        let Some(session) = session.as_mut() else {
            return Err(ExchangeError::Failed(PowerError::protocol(
                "internal: no IPMI session",
            )));
        };
        let plan = self.plan(command.idempotent(), deadline);
        session
            .request(transport, |rq| command.message(rq), plan)
            .await
    }

    async fn establish(&self, state: &mut State, deadline: Instant) -> Result<(), PowerError> {
        let mut proposals = self.suites.clone();
        if let Some(working) = state.working_suite
            && let Some(at) = proposals.iter().position(|&s| s == working)
        {
            proposals.remove(at);
            proposals.insert(0, working);
        }
        let login = Login {
            creds: &self.creds,
            username: &self.username,
            privilege: self.privilege,
            suites: &proposals,
            kg_configured: self.kg_configured,
        };
        let plan = self.plan(true, deadline);
        match setup::establish(&mut state.transport, &login, plan).await {
            Ok((session, suite)) => {
                tracing::debug!(endpoint = %self.endpoint, suite = suite.id(), privilege = self.privilege.name(), "IPMI session established");
                state.session = Some(session);
                state.working_suite = Some(suite);
                Ok(())
            }
            Err(e) => {
                if e.kind == crate::power::PowerErrorKind::Unreachable {
                    state.transport.reset();
                }
                Err(e)
            }
        }
    }

    /// Drops the session (telling the BMC, best effort) and the socket.
    async fn forget_session(&self, state: &mut State, deadline: Instant) {
        if let Some(old) = state.session.take() {
            old.abandon(&mut state.transport, deadline).await;
        }
        state.transport.reset();
    }

    /// Replaces a session idle for longer than [`IDLE_LIMIT`]: its Close Session is sent
    /// without waiting, and the next request sets up a new one.
    async fn expire_idle(&self, state: &mut State, deadline: Instant) {
        if state
            .session
            .as_ref()
            .is_none_or(|s| s.last_used.elapsed() <= IDLE_LIMIT)
        {
            return;
        }
        if let Some(old) = state.session.take() {
            tracing::debug!(endpoint = %self.endpoint, "IPMI session idle too long; replacing it");
            old.abandon(&mut state.transport, deadline).await;
        }
    }

    /// Sends a Chassis Control and judges its completion code.
    async fn control(&self, op: ChassisControl) -> Result<(), PowerError> {
        let command = Command::Control(op);
        tracing::info!(endpoint = %self.endpoint, command = command.name(), "sending IPMI chassis control");
        let (cc, _) = self.call(command).await?;
        match cc {
            command::CC_OK => Ok(()),
            command::CC_INSUFFICIENT_PRIVILEGE => Err(self.located(PowerError::auth(format!(
                "{} refused: user {:?} lacks OPERATOR privilege (completion code 0xd4); give the user OPERATOR or ADMINISTRATOR for IPMI over LAN",
                command.name(),
                self.username
            )))),
            command::CC_NOT_IN_PRESENT_STATE | command::CC_INVALID_COMMAND => {
                Err(self.located(PowerError::unsupported(format!(
                    "{}: completion code 0x{cc:02x} ({}); the BMC cannot do this",
                    command.name(),
                    command::completion_code_text(cc)
                ))))
            }
            cc => Err(self.located(completion_error(command, cc))),
        }
    }
}

impl Inner {
    async fn status(&self) -> Result<PowerReading, PowerError> {
        let started = Instant::now();
        let (cc, data) = self.call(Command::ChassisStatus).await?;
        let at = crate::clock::now();
        if cc != command::CC_OK {
            return Err(self.located(completion_error(Command::ChassisStatus, cc)));
        }
        let status = ChassisStatus::decode(&data).map_err(|e| {
            self.located(PowerError::protocol(format!(
                "malformed Get Chassis Status reply: {e}"
            )))
        })?;
        Ok(PowerReading {
            state: if status.power_on {
                PowerState::On
            } else {
                PowerState::Off
            },
            at,
            latency: started.elapsed(),
        })
    }

    async fn close(&self) {
        let deadline = Instant::now() + self.timeouts.request.min(CLOSE_TIMEOUT);
        let Ok(mut state) = timeout_at(deadline, self.state.lock()).await else {
            return;
        };
        let state = &mut *state;
        if let Some(mut session) = state.session.take() {
            let plan = Plan {
                request_timeout: CLOSE_TIMEOUT,
                retransmit: Some(MIN_RETRANSMIT),
                deadline,
            };
            match session.close(&mut state.transport, plan).await {
                Ok(cc) => tracing::debug!(endpoint = %self.endpoint, cc, "IPMI session closed"),
                Err(e) => {
                    tracing::debug!(endpoint = %self.endpoint, error = %e.into_power_error("Close Session"), "IPMI session close failed")
                }
            }
        }
        state.transport.reset();
    }
}

#[async_trait]
impl PowerDriver for IpmiDriver {
    fn driver_name(&self) -> &'static str {
        "ipmi"
    }

    fn endpoint(&self) -> String {
        self.inner.endpoint.clone()
    }

    async fn status(&self) -> Result<PowerReading, PowerError> {
        self.run(|inner| async move { inner.status().await }).await
    }

    async fn power_off(&self) -> Result<(), PowerError> {
        self.run(|inner| async move { inner.control(ChassisControl::PowerDown).await })
            .await
    }

    async fn power_on(&self) -> Result<(), PowerError> {
        self.run(|inner| async move { inner.control(ChassisControl::PowerUp).await })
            .await
    }

    /// Power cycle, sent once (never resent). Fencing does not use it: it powers off,
    /// confirms, powers on and confirms instead.
    async fn reboot(&self) -> Result<(), PowerError> {
        self.run(|inner| async move { inner.control(ChassisControl::PowerCycle).await })
            .await
    }

    async fn machine_identity(&self) -> Result<MachineIdentity, PowerError> {
        Ok(MachineIdentity::Uuid(format_guid(
            self.system_guid().await?,
        )))
    }

    async fn close(&self) {
        let inner = self.inner.clone();
        let _ = tokio::spawn(async move { inner.close().await }).await;
    }
}
