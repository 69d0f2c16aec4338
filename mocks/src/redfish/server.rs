//! Starting and stopping a mock BMC, and the handle tests steer it with.
//!
//! [`MockRedfish`] is the builder: profile, systems, credentials, transition delay,
//! TLS, listen address. [`MockRedfish::start`] binds (port 0 by default, so tests
//! run in parallel), serves in a background task, and returns a
//! [`MockRedfishHandle`] that knows the URL and the CA to trust, and lets the test
//! change power behind the client's back, inject faults, and read what the client
//! did. Dropping the handle stops the server; [`MockRedfishHandle::shutdown`] also
//! waits for it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::accounts::{Account, Role, SessionLogin};
use super::admin;
use super::faults::Fault;
use super::model::{MockPower, SystemSpec, SystemState};
use super::profile::{Profile, ResetResponse};
use super::service;
use super::state::{
    Config, RequestRecord, ResetRecord, Shared, SystemInfo, TimedRequest, TimedReset, UnknownSystem,
};
use crate::tls::{CertKind, TlsError, TlsMaterial, base_url, generate_material_kind};

/// Credentials used when [`MockRedfish::credentials`] is not called.
pub const DEFAULT_USERNAME: &str = "admin";
/// See [`DEFAULT_USERNAME`].
pub const DEFAULT_PASSWORD: &str = "password";

/// Why a mock could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("TLS setup: {0}")]
    Tls(#[from] TlsError),
    #[error("invalid system id {0:?}: use letters, digits, '.', '_' or '-'")]
    InvalidSystemId(String),
    #[error("system id {0:?} given twice")]
    DuplicateSystem(String),
}

/// A mock Redfish BMC, being configured. Start it with [`MockRedfish::start`].
#[derive(Debug, Clone)]
pub struct MockRedfish {
    profile: Profile,
    systems: Vec<SystemSpec>,
    username: String,
    password: String,
    delay: Duration,
    tls: bool,
    tls_material: Option<TlsMaterial>,
    listen: SocketAddr,
    reset_response: Option<ResetResponse>,
    service_uuid: Option<String>,
    certificate: CertKind,
    extra_accounts: Vec<Account>,
    session_login: SessionLogin,
    privilege_status: u16,
}

impl Default for MockRedfish {
    fn default() -> Self {
        Self {
            profile: Profile::default(),
            systems: Vec::new(),
            username: DEFAULT_USERNAME.to_owned(),
            password: DEFAULT_PASSWORD.to_owned(),
            delay: Duration::ZERO,
            tls: false,
            tls_material: None,
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            reset_response: None,
            service_uuid: None,
            certificate: CertKind::PrivateCa,
            extra_accounts: Vec::new(),
            session_login: SessionLogin::Open,
            privilege_status: 401,
        }
    }
}

impl MockRedfish {
    /// OpenBMC profile, its default systems, `admin`/`password`, no delay, plain
    /// HTTP on `127.0.0.1:0`.
    pub fn builder() -> Self {
        Self::default()
    }

    pub fn profile(mut self, profile: Profile) -> Self {
        self.profile = profile;
        self
    }

    /// Adds a system. Once any is added, the profile's default systems are not served.
    pub fn system(mut self, system: SystemSpec) -> Self {
        self.systems.push(system);
        self
    }

    /// Adds several systems (see [`MockRedfish::system`]).
    pub fn systems(mut self, systems: impl IntoIterator<Item = SystemSpec>) -> Self {
        self.systems.extend(systems);
        self
    }

    /// The only user name and password the BMC accepts.
    pub fn credentials(mut self, username: impl Into<String>, password: impl Into<String>) -> Self {
        self.username = username.into();
        self.password = password.into();
        self
    }

    /// How long `PoweringOff`/`PoweringOn` last after a Reset (default 0: immediate).
    pub fn transition_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Serve HTTPS with a freshly generated CA and leaf (see [`MockRedfishHandle::ca_pem`]).
    pub fn tls(mut self, on: bool) -> Self {
        self.tls = on;
        self
    }

    /// Serve HTTPS presenting a certificate of this kind (implies `tls(true)`): a
    /// private CA's leaf, or a self-signed `CA:TRUE` one as real BMCs ship (see
    /// [`CertKind`]).
    pub fn certificate(mut self, kind: CertKind) -> Self {
        self.tls = true;
        self.certificate = kind;
        self
    }

    /// Another account (the main one, from [`Self::credentials`], is Administrator).
    pub fn account(
        mut self,
        name: impl Into<String>,
        password: impl Into<String>,
        role: Role,
    ) -> Self {
        self.extra_accounts.push(Account {
            name: name.into(),
            password: password.into(),
            role,
        });
        self
    }

    /// How the SessionService lets clients log in (default: as the specification says).
    pub fn session_login(mut self, login: SessionLogin) -> Self {
        self.session_login = login;
        self
    }

    /// The status a read-only user's write is refused with: 401 (default, as seen in
    /// the field) or 403 (as the specification says).
    pub fn privilege_error_status(mut self, status: u16) -> Self {
        self.privilege_status = status;
        self
    }

    /// Serve HTTPS with this material instead of generating it (implies `tls(true)`).
    pub fn tls_material(mut self, material: TlsMaterial) -> Self {
        self.tls = true;
        self.tls_material = Some(material);
        self
    }

    /// Listen here instead of `127.0.0.1:0`.
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// Answer Resets this way instead of the profile's way.
    pub fn reset_response(mut self, response: ResetResponse) -> Self {
        self.reset_response = Some(response);
        self
    }

    /// The service root's `UUID` (default: random).
    pub fn service_uuid(mut self, uuid: impl Into<String>) -> Self {
        self.service_uuid = Some(uuid.into());
        self
    }

    fn system_states(&self) -> Result<Vec<SystemState>, StartError> {
        let specs = if self.systems.is_empty() {
            self.profile.default_systems()
        } else {
            self.systems.clone()
        };
        let mut states: Vec<SystemState> = Vec::with_capacity(specs.len());
        for spec in specs {
            let valid = !spec.id.is_empty()
                && spec
                    .id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
            if !valid {
                return Err(StartError::InvalidSystemId(spec.id));
            }
            if states.iter().any(|s| s.id == spec.id) {
                return Err(StartError::DuplicateSystem(spec.id));
            }
            let reset_types = spec.reset_types.clone().unwrap_or_else(|| {
                self.profile
                    .default_reset_types()
                    .into_iter()
                    .map(str::to_owned)
                    .collect()
            });
            states.push(SystemState::new(
                spec.id.clone(),
                spec.name
                    .clone()
                    .unwrap_or_else(|| self.profile.system_name(&spec.id)),
                spec.uuid
                    .clone()
                    .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
                reset_types,
                spec.power,
            ));
        }
        Ok(states)
    }

    /// Binds, starts serving in the background, and returns the handle.
    pub async fn start(self) -> Result<MockRedfishHandle, StartError> {
        let systems = self.system_states()?;
        let bind_error = |source| StartError::Bind {
            addr: self.listen,
            source,
        };
        let listener = std::net::TcpListener::bind(self.listen).map_err(bind_error)?;
        listener.set_nonblocking(true).map_err(bind_error)?;
        let addr = listener.local_addr().map_err(bind_error)?;

        let material = match (&self.tls_material, self.tls) {
            (Some(m), _) => Some(m.clone()),
            (None, true) => Some(generate_material_kind(self.certificate, addr.ip())?),
            (None, false) => None,
        };
        let base_url = base_url(addr, material.is_some());
        let mut accounts = vec![Account {
            name: self.username.clone(),
            password: self.password.clone(),
            role: Role::Administrator,
        }];
        accounts.extend(self.extra_accounts.iter().cloned());
        let config = Config {
            profile: self.profile,
            username: self.username.clone(),
            password: self.password.clone(),
            accounts,
            session_login: self.session_login,
            privilege_status: self.privilege_status,
            delay: self.delay,
            service_uuid: self
                .service_uuid
                .clone()
                .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
            reset_response: self
                .reset_response
                .unwrap_or_else(|| self.profile.reset_response()),
            base_url: base_url.clone(),
        };
        let shared = Arc::new(Shared::new(config, systems));
        let app = admin::router()
            .fallback(service::handle)
            .with_state(shared.clone());
        let tls = material
            .as_ref()
            .map(TlsMaterial::server_config)
            .transpose()?;
        let (server, task) = crate::serve::spawn(listener, app, tls).map_err(bind_error)?;
        tracing::info!(%base_url, profile = %self.profile, "mock Redfish BMC started");
        Ok(MockRedfishHandle {
            shared,
            addr,
            base_url,
            ca_pem: material.as_ref().map(|m| m.ca_pem().to_owned()),
            certificate_pem: material.map(|m| m.cert_pem().to_owned()),
            server,
            task: Some(task),
        })
    }
}

/// A running mock BMC. Dropping it stops the server.
#[derive(Debug)]
pub struct MockRedfishHandle {
    shared: Arc<Shared>,
    addr: SocketAddr,
    base_url: String,
    ca_pem: Option<String>,
    certificate_pem: Option<String>,
    server: axum_server::Handle<SocketAddr>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl MockRedfishHandle {
    /// `http://127.0.0.1:PORT` or `https://localhost:PORT`, no trailing slash; the
    /// service root is `{base_url}/redfish/v1`.
    pub fn base_url(&self) -> String {
        self.base_url.clone()
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The CA certificate (PEM) clients must trust; `None` for plain HTTP. For a
    /// self-signed certificate, that certificate.
    pub fn ca_pem(&self) -> Option<String> {
        self.ca_pem.clone()
    }

    /// The certificate the server presents (PEM); `None` for plain HTTP.
    pub fn certificate_pem(&self) -> Option<String> {
        self.certificate_pem.clone()
    }

    pub fn profile(&self) -> Profile {
        self.shared.config.profile
    }

    /// The accepted user name.
    pub fn username(&self) -> &str {
        &self.shared.config.username
    }

    /// The accepted password.
    pub fn password(&self) -> &str {
        &self.shared.config.password
    }

    /// The URI path of a system as this profile writes it (iLO: trailing slash).
    pub fn system_path(&self, system_id: &str) -> String {
        self.profile().uri(&super::payloads::system_path(system_id))
    }

    /// Every system, with its real state.
    pub fn systems(&self) -> Vec<SystemInfo> {
        self.shared.systems()
    }

    /// "Pull the plug" / "restore power": sets the state at once, cancelling any
    /// transition in progress.
    ///
    /// # Panics
    /// If there is no such system (a mistake in the test); see [`Self::try_set_power`].
    pub fn set_power(&self, system_id: &str, power: MockPower) {
        if let Err(e) = self.try_set_power(system_id, power) {
            let known: Vec<String> = self.systems().into_iter().map(|s| s.id).collect();
            panic!("set_power: {e}; this mock serves {known:?}");
        }
    }

    /// [`Self::set_power`] without the panic.
    pub fn try_set_power(&self, system_id: &str, power: MockPower) -> Result<(), UnknownSystem> {
        self.shared.set_power(system_id, power).map(|_| ())
    }

    /// Cuts (`fed: false`) or restores the machine's power feed while its BMC keeps
    /// answering (a failed PSU or PDU outlet, the BMC on standby power): cut, the
    /// machine is Off at once and a reset that would power it on (On, ForceOn,
    /// restarts, power cycles) is accepted and does nothing, as on such a machine;
    /// restored, it stays off until powered on.
    ///
    /// # Panics
    /// If there is no such system (a mistake in the test).
    pub fn set_power_feed(&self, system_id: &str, fed: bool) {
        if let Err(e) = self.shared.set_power_feed(system_id, fed) {
            let known: Vec<String> = self.systems().into_iter().map(|s| s.id).collect();
            panic!("set_power_feed: {e}; this mock serves {known:?}");
        }
    }

    /// The system reports `uuid` from now on: what a client sees when the address it
    /// was given now reaches another machine (a re-cabled or re-addressed BMC) or the
    /// machine's mainboard was replaced.
    ///
    /// # Panics
    /// If there is no such system (a mistake in the test).
    pub fn set_uuid(&self, system_id: &str, uuid: &str) {
        if let Err(e) = self.shared.set_uuid(system_id, uuid) {
            let known: Vec<String> = self.systems().into_iter().map(|s| s.id).collect();
            panic!("set_uuid: {e}; this mock serves {known:?}");
        }
    }

    /// The system's real state now (`None` if there is no such system).
    pub fn power(&self, system_id: &str) -> Option<MockPower> {
        self.shared.power(system_id)
    }

    /// Injects a fault into `/redfish` requests (never `/admin`).
    pub fn inject(&self, fault: Fault) {
        self.shared.inject(fault);
    }

    /// Removes every fault; hanging requests are then answered.
    pub fn clear_faults(&self) {
        self.shared.clear_faults();
    }

    /// The faults in force (counts are what is left).
    pub fn faults(&self) -> Vec<Fault> {
        self.shared.faults()
    }

    /// Every Reset received, accepted or refused: `(system id, ResetType)`.
    pub fn reset_log(&self) -> Vec<(String, String)> {
        self.shared
            .resets()
            .into_iter()
            .map(|r| (r.system, r.reset_type))
            .collect()
    }

    /// [`Self::reset_log`] as records.
    pub fn resets(&self) -> Vec<ResetRecord> {
        self.shared.resets()
    }

    /// [`Self::reset_log`] with the moment each Reset was received.
    pub fn timed_resets(&self) -> Vec<TimedReset> {
        self.shared.timed_resets()
    }

    /// Every `/redfish` request received, oldest first.
    pub fn request_log(&self) -> Vec<RequestRecord> {
        self.shared.requests()
    }

    /// [`Self::request_log`] with when each request arrived and was answered.
    pub fn timed_request_log(&self) -> Vec<TimedRequest> {
        self.shared.timed_requests()
    }

    /// Empties the reset and request logs.
    pub fn clear_logs(&self) {
        self.shared.clear_logs();
    }

    pub fn active_sessions(&self) -> usize {
        self.shared.active_sessions()
    }

    /// TCP connections open to the mock now (HTTP keep-alive: a client's pooled
    /// connections count until it closes them).
    pub fn open_connections(&self) -> usize {
        self.server.connection_count()
    }

    /// Ends every session: the next request with an old token gets 401.
    pub fn expire_sessions(&self) {
        self.shared.expire_sessions();
    }

    /// Stops the server (open connections are closed) and waits for it.
    pub async fn shutdown(mut self) {
        self.server.shutdown();
        if let Some(task) = self.task.take() {
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!("mock Redfish server ended with an error: {e}"),
                Err(e) => tracing::warn!("mock Redfish server task failed: {e}"),
            }
        }
    }
}

impl Drop for MockRedfishHandle {
    fn drop(&mut self) {
        self.server.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv6Addr;

    #[test]
    fn base_urls() {
        let v4 = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8000);
        let v6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 8000);
        let any = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 8000);
        assert_eq!(base_url(v4, false), "http://127.0.0.1:8000");
        assert_eq!(base_url(v6, false), "http://[::1]:8000");
        assert_eq!(base_url(any, false), "http://127.0.0.1:8000");
        assert_eq!(base_url(v4, true), "https://localhost:8000");
        assert_eq!(base_url(v6, true), "https://localhost:8000");
    }

    #[test]
    fn rejects_bad_and_duplicate_ids() {
        let bad = MockRedfish::builder().system(SystemSpec::new("a/b"));
        assert!(matches!(
            bad.system_states(),
            Err(StartError::InvalidSystemId(_))
        ));
        let dup = MockRedfish::builder()
            .system(SystemSpec::new("x"))
            .system(SystemSpec::new("x"));
        assert!(matches!(
            dup.system_states(),
            Err(StartError::DuplicateSystem(_))
        ));
    }
}
