//! Starting and stopping a mock IPMI BMC, and the handle tests steer it with.
//!
//! [`MockIpmi`] is the builder: users, K_g, cipher suites, GUID, initial power,
//! transition delay, session timeout and limit, listen address. [`MockIpmi::start`]
//! binds a UDP socket (`127.0.0.1:0` by default, so tests run in parallel), serves in
//! a background task, and returns a [`MockIpmiHandle`] that changes power behind the
//! client's back, injects faults, and reads what the client did. Dropping the handle
//! stops the BMC; [`MockIpmiHandle::shutdown`] also waits for it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use nodefence_ipmi_proto::command::Privilege;
use nodefence_ipmi_proto::crypto::{CipherSuite, Credentials};
use tokio::net::UdpSocket;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use super::faults::Fault;
use super::model::{Machine, Power, UserSpec};
use super::state::{Config, ControlRecord, Counters, Inner, RequestRecord, SessionRecord, Shared};

/// The user a BMC has when [`MockIpmi::user`] / [`MockIpmi::users`] is not called
/// (with [`DEFAULT_PASSWORD`], ADMINISTRATOR).
pub const DEFAULT_USERNAME: &str = "admin";
/// See [`DEFAULT_USERNAME`].
pub const DEFAULT_PASSWORD: &str = "password";
/// Default session inactivity timeout.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(60);
/// Default limit on sessions (established and half-open).
pub const DEFAULT_MAX_SESSIONS: usize = 4;

/// Why a mock BMC could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("binding udp://{addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("user {name:?}: {source}")]
    InvalidUser {
        name: String,
        source: nodefence_ipmi_proto::Error,
    },
    #[error("user {0:?} given twice")]
    DuplicateUser(String),
    #[error("no users configured")]
    NoUsers,
    #[error("no cipher suites offered")]
    NoSuites,
    #[error("max_sessions must be at least 1")]
    NoSessions,
}

/// A mock IPMI v2.0 BMC, being configured. Start it with [`MockIpmi::start`].
/// `Debug` shows neither passwords nor K_g.
#[derive(Clone)]
pub struct MockIpmi {
    name: String,
    listen: SocketAddr,
    users: Option<Vec<UserSpec>>,
    kg: Option<Vec<u8>>,
    suites: Vec<CipherSuite>,
    guid: Option<[u8; 16]>,
    power: Power,
    delay: Duration,
    session_timeout: Duration,
    max_sessions: usize,
}

impl std::fmt::Debug for MockIpmi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockIpmi")
            .field("name", &self.name)
            .field("listen", &self.listen)
            .field("users", &self.users)
            .field("kg", &self.kg.as_ref().map(|_| "<redacted>"))
            .field("suites", &self.suites)
            .field("guid", &self.guid)
            .field("power", &self.power)
            .field("delay", &self.delay)
            .field("session_timeout", &self.session_timeout)
            .field("max_sessions", &self.max_sessions)
            .finish()
    }
}

impl Default for MockIpmi {
    fn default() -> Self {
        Self {
            name: "bmc".to_owned(),
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            users: None,
            kg: None,
            suites: vec![CipherSuite::Suite3, CipherSuite::Suite17],
            guid: None,
            power: Power::On,
            delay: Duration::ZERO,
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            max_sessions: DEFAULT_MAX_SESSIONS,
        }
    }
}

impl MockIpmi {
    /// `admin`/`password` (ADMINISTRATOR), no K_g, suites 3 and 17, random GUID, power
    /// on, no transition delay, 60 s session timeout, 4 sessions, `127.0.0.1:0`.
    pub fn builder() -> Self {
        Self::default()
    }

    /// A name for logs and the admin API (default `bmc`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Listen here instead of `127.0.0.1:0`.
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// Adds a user. The first call replaces the default `admin` user.
    pub fn user(
        mut self,
        name: impl Into<String>,
        password: impl Into<String>,
        max_privilege: Privilege,
    ) -> Self {
        self.users
            .get_or_insert_with(Vec::new)
            .push(UserSpec::new(name, password, max_privilege));
        self
    }

    /// Replaces all users.
    pub fn users(mut self, users: impl IntoIterator<Item = UserSpec>) -> Self {
        self.users = Some(users.into_iter().collect());
        self
    }

    /// The BMC key K_g (≤ 20 bytes): keys the SIK instead of the password, and sets
    /// the "K_g set" bit in Get Channel Authentication Capabilities. Empty or all-zero
    /// means none.
    pub fn kg(mut self, kg: impl Into<Vec<u8>>) -> Self {
        let kg = kg.into();
        self.kg = kg.iter().any(|&b| b != 0).then_some(kg);
        self
    }

    /// The cipher suites offered, in Get Channel Cipher Suites order (default 3, 17).
    pub fn suites(mut self, suites: impl IntoIterator<Item = CipherSuite>) -> Self {
        self.suites = suites.into_iter().collect();
        self
    }

    /// The system GUID: the 16 bytes Get System GUID (and RAKP 2) send, in wire order.
    pub fn guid(mut self, guid: [u8; 16]) -> Self {
        self.guid = Some(guid);
        self
    }

    /// Initial power (default on).
    pub fn power(mut self, power: Power) -> Self {
        self.power = power;
        self
    }

    /// How long a Chassis Control takes to change the power (default 0).
    pub fn transition_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Sessions without a valid packet for this long are dropped (default 60 s).
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// Open Session is refused (status 0x01) once this many sessions exist,
    /// established or half-open (default 4).
    pub fn max_sessions(mut self, n: usize) -> Self {
        self.max_sessions = n;
        self
    }

    fn validate(&self) -> Result<Vec<UserSpec>, StartError> {
        let users = self.users.clone().unwrap_or_else(|| {
            vec![UserSpec::new(
                DEFAULT_USERNAME,
                DEFAULT_PASSWORD,
                Privilege::Administrator,
            )]
        });
        if users.is_empty() {
            return Err(StartError::NoUsers);
        }
        for (i, u) in users.iter().enumerate() {
            Credentials::new(u.name.as_bytes(), u.password.as_bytes(), self.kg.as_deref())
                .map_err(|source| StartError::InvalidUser {
                    name: u.name.clone(),
                    source,
                })?;
            if users.iter().take(i).any(|o| o.name == u.name) {
                return Err(StartError::DuplicateUser(u.name.clone()));
            }
        }
        if self.suites.is_empty() {
            return Err(StartError::NoSuites);
        }
        if self.max_sessions == 0 {
            return Err(StartError::NoSessions);
        }
        Ok(users)
    }

    /// Binds, starts serving in the background, and returns the handle.
    pub async fn start(self) -> Result<MockIpmiHandle, StartError> {
        let users = self.validate()?;
        let bind_error = |source| StartError::Bind {
            addr: self.listen,
            source,
        };
        let socket = UdpSocket::bind(self.listen).await.map_err(bind_error)?;
        let addr = socket.local_addr().map_err(bind_error)?;
        let guid = self
            .guid
            .unwrap_or_else(|| *uuid::Uuid::new_v4().as_bytes());
        let mut suites: Vec<CipherSuite> = Vec::new();
        for s in &self.suites {
            if !suites.contains(s) {
                suites.push(*s);
            }
        }
        let config = Config {
            name: self.name.clone(),
            users,
            kg: self.kg.clone(),
            suites,
            delay: self.delay,
            session_timeout: self.session_timeout,
            max_sessions: self.max_sessions,
            started: Instant::now(),
        };
        let shared = Arc::new(Shared::new(
            config,
            Inner::new(Machine::new(self.power), guid),
        ));
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(serve(Arc::new(socket), shared.clone(), stopped));
        tracing::info!(bmc = %self.name, %addr, "mock IPMI BMC started");
        Ok(MockIpmiHandle {
            shared,
            addr,
            stop,
            task: Some(task),
        })
    }
}

/// Receives datagrams until told to stop; replies delayed by a fault are sent from
/// tasks that stop with it.
async fn serve(socket: Arc<UdpSocket>, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut buf = vec![0u8; 2048];
    let mut delayed = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            Some(_) = delayed.join_next(), if !delayed.is_empty() => {}
            received = socket.recv_from(&mut buf) => {
                let (n, peer) = match received {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::debug!("mock IPMI BMC: receive failed: {e}");
                        continue;
                    }
                };
                let Some(datagram) = buf.get(..n) else { continue };
                let Some(reply) = shared.handle(datagram, peer, Instant::now()) else {
                    continue;
                };
                let slow = shared.lock().faults.slow;
                match slow {
                    Some(delay) if !delay.is_zero() => {
                        let socket = socket.clone();
                        delayed.spawn(async move {
                            tokio::time::sleep(delay).await;
                            let _ = socket.send_to(&reply, peer).await;
                        });
                    }
                    _ => {
                        if let Err(e) = socket.send_to(&reply, peer).await {
                            tracing::debug!("mock IPMI BMC: send to {peer} failed: {e}");
                        }
                    }
                }
            }
        }
    }
}

/// A running mock BMC. Dropping it stops the BMC.
#[derive(Debug)]
pub struct MockIpmiHandle {
    shared: Arc<Shared>,
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl MockIpmiHandle {
    /// The bound UDP address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn name(&self) -> &str {
        &self.shared.config.name
    }

    /// The offered cipher suites.
    pub fn suites(&self) -> Vec<CipherSuite> {
        self.shared.config.suites.clone()
    }

    /// The configured users (passwords included: tests pass them to clients).
    pub fn users(&self) -> Vec<UserSpec> {
        self.shared.config.users.clone()
    }

    /// The machine's real power now (during a transition: still the old state).
    pub fn power(&self) -> Power {
        self.shared.lock().machine.power(Instant::now())
    }

    /// "Pull the plug" / "restore power": sets the state at once, cancelling any
    /// transition in progress.
    pub fn set_power(&self, power: Power) {
        self.shared.lock().machine.force(power);
    }

    /// The system GUID, in wire order.
    pub fn guid(&self) -> [u8; 16] {
        self.shared.lock().guid
    }

    /// Changes the system GUID (sessions handshaking later see it in RAKP 2).
    pub fn set_guid(&self, guid: [u8; 16]) {
        self.shared.lock().guid = guid;
    }

    /// Injects a fault (see [`Fault`] for how kinds combine).
    pub fn set_fault(&self, fault: Fault) {
        tracing::info!(bmc = %self.name(), ?fault, "fault injected");
        self.shared.lock().faults.insert(fault);
    }

    /// Removes every fault.
    pub fn clear_faults(&self) {
        self.shared.lock().faults = Default::default();
    }

    /// The faults in force (counts are what is left).
    pub fn faults(&self) -> Vec<Fault> {
        self.shared.lock().faults.active()
    }

    /// Every Chassis Control executed, oldest first (retransmissions that executed
    /// again appear again).
    pub fn control_log(&self) -> Vec<ControlRecord> {
        self.shared.lock().controls.clone()
    }

    /// Every IPMI command received, in or outside a session, oldest first.
    pub fn request_log(&self) -> Vec<RequestRecord> {
        self.shared.lock().requests.clone()
    }

    /// Every session that completed the handshake, oldest first.
    pub fn session_log(&self) -> Vec<SessionRecord> {
        self.shared.lock_fresh().session_log.clone()
    }

    /// Empties the control, request and session logs (counters are kept).
    pub fn clear_logs(&self) {
        self.shared.clear_logs();
    }

    /// The counters, with idle sessions expired first.
    pub fn counters(&self) -> Counters {
        self.shared.lock_fresh().counters()
    }

    /// Established sessions now.
    pub fn active_sessions(&self) -> usize {
        self.counters().active_sessions
    }

    /// Ends every established session at once (as a BMC reboot or an admin would):
    /// their next packets are dropped as unknown. Returns how many ended.
    pub fn expire_sessions(&self) -> usize {
        self.shared.expire_sessions()
    }

    /// When the BMC started (the origin of the admin API's `at_ms`).
    pub fn started(&self) -> Instant {
        self.shared.config.started
    }

    pub(crate) fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// Stops the BMC and waits for its task.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take()
            && let Err(e) = task.await
        {
            tracing::warn!("mock IPMI BMC task failed: {e}");
        }
    }
}

impl Drop for MockIpmiHandle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation() {
        let long = MockIpmi::builder().user("u", "p".repeat(21), Privilege::User);
        assert!(matches!(
            long.validate(),
            Err(StartError::InvalidUser { .. })
        ));
        let dup =
            MockIpmi::builder()
                .user("a", "x", Privilege::User)
                .user("a", "y", Privilege::User);
        assert!(matches!(dup.validate(), Err(StartError::DuplicateUser(_))));
        assert!(matches!(
            MockIpmi::builder().users([]).validate(),
            Err(StartError::NoUsers)
        ));
        assert!(matches!(
            MockIpmi::builder().suites([]).validate(),
            Err(StartError::NoSuites)
        ));
        assert!(matches!(
            MockIpmi::builder().max_sessions(0).validate(),
            Err(StartError::NoSessions)
        ));
        let kg = MockIpmi::builder().kg(vec![1; 21]);
        assert!(matches!(kg.validate(), Err(StartError::InvalidUser { .. })));
        assert!(MockIpmi::builder().kg(vec![0; 20]).kg.is_none());
        let shown = format!("{:?}", MockIpmi::builder().kg(*b"Kg-secret"));
        // Neither the default password's value nor K_g's bytes (75 = 'K', 103 = 'g').
        assert!(!shown.contains("\"password\""), "{shown}");
        assert!(
            !shown.contains("75, 103") && shown.contains("<redacted>"),
            "{shown}"
        );
    }
}
