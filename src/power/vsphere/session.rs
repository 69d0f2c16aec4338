//! One vSphere endpoint over HTTPS: the SOAP round trip, the session, retries,
//! deadlines and caps.
//!
//! - `RetrieveServiceContent` on `ServiceInstance` once (no session needed): the
//!   managed object ids of the SessionManager, SearchIndex and PropertyCollector
//!   (they differ between vCenter and ESXi) and `about.apiVersion`, which every later
//!   call names in its `SOAPAction: urn:vim25/<version>` header.
//! - `SessionManager.Login` once; the `vmware_soap_session` cookie it sets is sent
//!   with every call after it and kept secret. A `NotAuthenticated` fault (the
//!   session expired or vCenter restarted) logs in again and repeats the call once.
//! - Connect errors, timeouts and non-SOAP 5xx answers (a load balancer's page) are
//!   retried with exponential backoff, at most `retries` times and never past the
//!   operation deadline; a refused TLS certificate is reported once.
//! - Bodies are capped at [`MAX_BODY_BYTES`].

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, COOKIE, SET_COOKIE};
use secrecy::{ExposeSecret, SecretString};
use tokio::sync::{Mutex, Semaphore};
use tokio::time::Instant;
use url::Url;

use super::soap::{self, Answer, Element, MoRef};
use crate::config::{Credential, Timeouts};
use crate::power::{PowerError, PowerErrorKind};

/// Largest reply read.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// The session cookie vCenter and ESXi set on Login.
pub const SESSION_COOKIE: &str = "vmware_soap_session";
/// The version named before the endpoint's own is known: every vCenter and ESXi
/// since 6.0 answers it.
const FIRST_VERSION: &str = "6.0";

/// The ids the ServiceInstance hands out.
#[derive(Debug, Clone)]
pub struct ServiceContent {
    pub session_manager: MoRef,
    pub search_index: MoRef,
    pub property_collector: MoRef,
    /// `rootFolder` and `viewManager` (a VM scan's container view; `None` when the
    /// server names none).
    pub root_folder: Option<MoRef>,
    pub view_manager: Option<MoRef>,
    /// `about.apiVersion` (`8.0.2.0`).
    pub api_version: String,
    /// `about.apiType`: `VirtualCenter` or `HostAgent` (a standalone ESXi host).
    pub api_type: String,
}

/// Why a call failed: a fault the server sent, or anything else.
#[derive(Debug, Clone)]
pub enum CallError {
    Fault(soap::Fault),
    Other(PowerError),
}

impl CallError {
    /// As a [`PowerError`], the fault named by its type.
    pub fn into_error(self, what: &str) -> PowerError {
        match self {
            CallError::Other(e) => PowerError::new(e.kind, format!("{what}: {}", e.message)),
            CallError::Fault(f) => fault_error(what, &f),
        }
    }

    pub fn fault_type(&self) -> Option<&str> {
        match self {
            CallError::Fault(f) => Some(f.fault_type.as_str()),
            CallError::Other(_) => None,
        }
    }

    /// Whether the server does not have `method` at all (a method of a later vSphere
    /// release): `MethodNotFound` (govmomi's simulator), or what vCenter and ESXi
    /// answer, an `InvalidRequest` fault whose `faultstring` says "Unable to resolve
    /// WSDL method name `<method>`". Any other `InvalidRequest` is not this.
    pub fn is_unknown_method(&self, method: &str) -> bool {
        match self {
            CallError::Fault(f) => {
                f.fault_type == "MethodNotFound"
                    || (f.fault_type == "InvalidRequest"
                        && f.message
                            .strip_prefix("Unable to resolve WSDL method name ")
                            .and_then(|rest| rest.split_whitespace().next())
                            == Some(method))
            }
            CallError::Other(_) => false,
        }
    }
}

/// A fault as a [`PowerError`] of the kind it means.
pub fn fault_error(what: &str, f: &soap::Fault) -> PowerError {
    let kind = match f.fault_type.as_str() {
        "InvalidLogin" | "NotAuthenticated" => PowerErrorKind::Auth,
        "NoPermission" => PowerErrorKind::Privilege,
        _ => PowerErrorKind::Protocol,
    };
    let help = match f.fault_type.as_str() {
        "InvalidLogin" => "; check the username and password of this vSphere entry",
        "NoPermission" => {
            "; the vSphere user needs System.View, System.Read and VirtualMachine.Interact.PowerOff/PowerOn on the VM (docs/drivers.md)"
        }
        _ => "",
    };
    PowerError::new(
        kind,
        format!(
            "{what}: vSphere fault {}: {}{help}",
            f.fault_type, f.message
        ),
    )
}

#[derive(Default)]
struct SessionState {
    content: Option<ServiceContent>,
    cookie: Option<SecretString>,
}

/// One vSphere endpoint and user: one login, shared by every VM driver built for
/// them ([`crate::power::registry`]), logged out when the last of them closes.
pub struct Session {
    client: reqwest::Client,
    sdk: Url,
    credential: Credential,
    timeouts: Timeouts,
    limiter: Arc<Semaphore>,
    state: Mutex<SessionState>,
    /// Drivers using this session and not closed yet ([`Session::attach`]).
    users: std::sync::atomic::AtomicUsize,
}

/// One attempt's failure; `retry` when trying again may help.
struct Attempt {
    error: CallError,
    retry: bool,
}

impl Session {
    /// `endpoint` is the server's base URL; SOAP goes to `<endpoint>/sdk`.
    pub fn new(
        client: reqwest::Client,
        endpoint: &Url,
        credential: Credential,
        timeouts: Timeouts,
        limiter: Arc<Semaphore>,
    ) -> Result<Self, PowerError> {
        let mut sdk = endpoint.clone();
        if !sdk.path().ends_with("/sdk") {
            let path = format!("{}/sdk", sdk.path().trim_end_matches('/'));
            sdk.set_path(&path);
        }
        Ok(Self {
            client,
            sdk,
            credential,
            timeouts,
            limiter,
            state: Mutex::new(SessionState::default()),
            users: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// Whether this session serves `endpoint` as `credential` with these settings
    /// (the same password too: a changed Secret is a new session).
    pub fn serves(&self, endpoint: &Url, credential: &Credential, timeouts: &Timeouts) -> bool {
        use secrecy::ExposeSecret as _;
        let mut sdk = endpoint.clone();
        if !sdk.path().ends_with("/sdk") {
            let path = format!("{}/sdk", sdk.path().trim_end_matches('/'));
            sdk.set_path(&path);
        }
        self.sdk == sdk
            && self.timeouts == *timeouts
            && self.credential.username == credential.username
            && self.credential.password.expose_secret() == credential.password.expose_secret()
    }

    /// One more driver uses this session.
    pub fn attach(&self) {
        self.users.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// A driver is done with it: the last one logs out.
    pub async fn detach(&self) {
        let before = self
            .users
            .fetch_update(
                std::sync::atomic::Ordering::SeqCst,
                std::sync::atomic::Ordering::SeqCst,
                |n| n.checked_sub(1),
            )
            .unwrap_or(0);
        if before <= 1 {
            self.logout().await;
        }
    }

    /// The SOAP URL.
    pub fn sdk(&self) -> &Url {
        &self.sdk
    }

    /// A deadline for one whole operation, from now.
    pub fn deadline(&self) -> Instant {
        Instant::now() + self.timeouts.operation
    }

    /// The service content, read once.
    pub async fn content(&self, deadline: Instant) -> Result<ServiceContent, PowerError> {
        let mut state = self.state.lock().await;
        self.content_locked(&mut state, deadline).await
    }

    async fn content_locked(
        &self,
        state: &mut SessionState,
        deadline: Instant,
    ) -> Result<ServiceContent, PowerError> {
        if let Some(c) = &state.content {
            return Ok(c.clone());
        }
        let body = soap::request(
            "RetrieveServiceContent",
            &MoRef::new("ServiceInstance", "ServiceInstance"),
            "",
        );
        let reply = self
            .send_with_retries(
                "RetrieveServiceContent",
                &body,
                FIRST_VERSION,
                None,
                deadline,
            )
            .await
            .map_err(|e| e.into_error("RetrieveServiceContent"))?;
        let content = read_content(&reply).map_err(|m| {
            PowerError::protocol(format!(
                "RetrieveServiceContent: {m}; is {} a vSphere endpoint?",
                self.sdk
            ))
        })?;
        state.content = Some(content.clone());
        Ok(content)
    }

    /// Calls `operation` on `this` with the session, logging in first when there is
    /// none and once more when the server says the session is gone.
    pub async fn call(
        &self,
        operation: &str,
        this: &MoRef,
        params: &str,
        deadline: Instant,
    ) -> Result<Element, CallError> {
        let body = soap::request(operation, this, params);
        let mut relogged = false;
        loop {
            let (version, cookie) = {
                let mut state = self.state.lock().await;
                let content = self
                    .content_locked(&mut state, deadline)
                    .await
                    .map_err(CallError::Other)?;
                if state.cookie.is_none() {
                    state.cookie = Some(
                        self.login(&content, deadline)
                            .await
                            .map_err(CallError::Other)?,
                    );
                }
                (content.api_version.clone(), state.cookie.clone())
            };
            match self
                .send_with_retries(operation, &body, &version, cookie.as_ref(), deadline)
                .await
            {
                Err(CallError::Fault(f)) if f.fault_type == "NotAuthenticated" && !relogged => {
                    tracing::debug!(sdk = %self.sdk, operation, "vSphere session expired; logging in again");
                    relogged = true;
                    let mut state = self.state.lock().await;
                    // Another caller may have logged in already with a new cookie.
                    let same = match (&state.cookie, &cookie) {
                        (Some(a), Some(b)) => a.expose_secret() == b.expose_secret(),
                        _ => true,
                    };
                    if same {
                        state.cookie = None;
                    }
                }
                other => return other,
            }
        }
    }

    async fn login(
        &self,
        content: &ServiceContent,
        deadline: Instant,
    ) -> Result<SecretString, PowerError> {
        let params = format!(
            "{}{}",
            soap::field("userName", &self.credential.username),
            soap::field("password", self.credential.password.expose_secret())
        );
        let body = soap::request("Login", &content.session_manager, &params);
        let mut cookie = None;
        self.send_with_retries_capture(
            "Login",
            &body,
            &content.api_version,
            None,
            deadline,
            &mut cookie,
        )
        .await
        .map_err(|e| e.into_error(&format!("Login as {:?}", self.credential.username)))?;
        tracing::debug!(sdk = %self.sdk, "vSphere session opened");
        cookie.ok_or_else(|| {
            PowerError::protocol(format!(
                "Login: the reply set no {SESSION_COOKIE} cookie; is {} a vSphere endpoint?",
                self.sdk
            ))
        })
    }

    /// Logs out, if logged in. Best effort, short deadline.
    pub async fn logout(&self) {
        let (content, cookie) = {
            let mut state = self.state.lock().await;
            (state.content.clone(), state.cookie.take())
        };
        if let (Some(content), Some(cookie)) = (content, cookie) {
            let deadline = Instant::now() + self.timeouts.request.min(Duration::from_secs(5));
            let body = soap::request("Logout", &content.session_manager, "");
            let _ = self
                .send_once(
                    "Logout",
                    &body,
                    &content.api_version,
                    Some(&cookie),
                    deadline,
                    &mut None,
                )
                .await;
        }
    }

    async fn send_with_retries(
        &self,
        operation: &str,
        body: &str,
        version: &str,
        cookie: Option<&SecretString>,
        deadline: Instant,
    ) -> Result<Element, CallError> {
        self.send_with_retries_capture(operation, body, version, cookie, deadline, &mut None)
            .await
    }

    async fn send_with_retries_capture(
        &self,
        operation: &str,
        body: &str,
        version: &str,
        cookie: Option<&SecretString>,
        deadline: Instant,
        set_cookie: &mut Option<SecretString>,
    ) -> Result<Element, CallError> {
        let mut pause = Duration::from_millis(200);
        let mut attempt = 0;
        loop {
            match self
                .send_once(operation, body, version, cookie, deadline, set_cookie)
                .await
            {
                Ok(reply) => return Ok(reply),
                Err(a)
                    if a.retry
                        && attempt < self.timeouts.retries
                        && Instant::now() + pause < deadline =>
                {
                    attempt += 1;
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(5));
                }
                Err(a) => return Err(a.error),
            }
        }
    }

    async fn send_once(
        &self,
        operation: &str,
        body: &str,
        version: &str,
        cookie: Option<&SecretString>,
        deadline: Instant,
        set_cookie: &mut Option<SecretString>,
    ) -> Result<Element, Attempt> {
        let other = |e: PowerError, retry: bool| Attempt {
            error: CallError::Other(e),
            retry,
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(other(
                PowerError::unreachable(format!("{operation}: operation deadline reached")),
                false,
            ));
        }
        let _permit = self.limiter.acquire().await.map_err(|_| {
            other(
                PowerError::config("internal: request limiter closed"),
                false,
            )
        })?;
        let mut request = self
            .client
            .post(self.sdk.clone())
            .timeout(self.timeouts.request.min(remaining))
            .header(CONTENT_TYPE, "text/xml; charset=utf-8")
            .header("SOAPAction", format!("urn:vim25/{version}"))
            .body(body.to_string());
        if let Some(c) = cookie {
            request = request.header(COOKIE, format!("{SESSION_COOKIE}={}", c.expose_secret()));
        }
        let mut response = match request.send().await {
            Ok(r) => r,
            Err(e) => {
                let error = self.send_error(&e, operation);
                let retry = error.kind != PowerErrorKind::Tls;
                return Err(other(error, retry));
            }
        };
        let status = response.status();
        if let Some(value) = response
            .headers()
            .get_all(SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(session_cookie)
        {
            *set_cookie = Some(SecretString::from(value));
        }
        let mut bytes = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if bytes.len() + chunk.len() > MAX_BODY_BYTES {
                        return Err(other(
                            PowerError::protocol(format!(
                                "{operation}: reply larger than {MAX_BODY_BYTES} bytes"
                            )),
                            false,
                        ));
                    }
                    bytes.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) => return Err(other(self.send_error(&e, operation), true)),
            }
        }
        let text = String::from_utf8_lossy(&bytes);
        match soap::answer(&text, operation) {
            Ok(Answer::Response(r)) if status.is_success() => Ok(r),
            Ok(Answer::Fault(f)) => Err(Attempt {
                error: CallError::Fault(f),
                retry: false,
            }),
            Ok(Answer::Response(_)) => Err(other(
                PowerError::protocol(format!("{operation}: HTTP {status} with a success body")),
                false,
            )),
            Err(why) if status.is_server_error() => Err(other(
                PowerError::unreachable(format!(
                    "{operation}: HTTP {status} from {} and no SOAP reply ({why})",
                    self.sdk
                )),
                true,
            )),
            Err(why) => Err(other(
                PowerError::protocol(format!(
                    "{operation}: HTTP {status} from {}: not a vSphere SOAP reply ({why})",
                    self.sdk
                )),
                false,
            )),
        }
    }

    fn send_error(&self, e: &reqwest::Error, operation: &str) -> PowerError {
        if let Some(failure) = crate::tls::refusal_in(e) {
            return PowerError::tls(failure.message());
        }
        let chain = crate::power::error_sources(e);
        let what = if e.is_timeout() {
            format!(
                "{operation} timed out (request_timeout {})",
                humantime::format_duration(self.timeouts.request)
            )
        } else if e.is_connect() {
            format!("{operation}: cannot connect to {}", self.sdk)
        } else {
            format!("{operation}: connection to {} failed", self.sdk)
        };
        PowerError::unreachable(format!("{what}{chain}"))
    }
}

/// The value of a `vmware_soap_session` Set-Cookie header, quotes kept (vCenter
/// expects them back as sent).
fn session_cookie(header: &str) -> Option<String> {
    let first = header.split(';').next()?.trim();
    let (name, value) = first.split_once('=')?;
    (name.trim() == SESSION_COOKIE && !value.trim().is_empty()).then(|| value.trim().to_string())
}

fn read_content(reply: &Element) -> Result<ServiceContent, String> {
    let Some(content) = reply.child("returnval") else {
        return Err("the reply has no returnval".into());
    };
    let moref = |name: &str| {
        content
            .child(name)
            .and_then(MoRef::from_element)
            .ok_or_else(|| format!("the service content has no {name}"))
    };
    let about = content.child("about");
    Ok(ServiceContent {
        session_manager: moref("sessionManager")?,
        search_index: moref("searchIndex")?,
        property_collector: moref("propertyCollector")?,
        root_folder: content.child("rootFolder").and_then(MoRef::from_element),
        view_manager: content.child("viewManager").and_then(MoRef::from_element),
        api_version: about
            .and_then(|a| a.child_text("apiVersion"))
            .filter(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '.'))
            .unwrap_or(FIRST_VERSION)
            .to_string(),
        api_type: about
            .and_then(|a| a.child_text("apiType"))
            .unwrap_or("")
            .to_string(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_method_the_server_does_not_have_is_told_from_other_invalid_requests() {
        let fault = |fault_type: &str, message: &str| {
            CallError::Fault(soap::Fault {
                fault_type: fault_type.into(),
                message: message.into(),
            })
        };
        let old = fault(
            "InvalidRequest",
            "Unable to resolve WSDL method name FindAllByUuid for namespace name urn:vim25\n\nwhile parsing SOAP body",
        );
        assert!(old.is_unknown_method("FindAllByUuid"));
        assert!(!old.is_unknown_method("FindByUuid"));
        assert!(fault("MethodNotFound", "").is_unknown_method("FindAllByUuid"));
        assert!(!fault("InvalidRequest", "bad argument").is_unknown_method("FindAllByUuid"));
        assert!(!fault("InvalidArgument", "").is_unknown_method("FindAllByUuid"));
        assert!(!CallError::Other(PowerError::protocol("x")).is_unknown_method("FindAllByUuid"));
    }

    #[test]
    fn the_session_cookie_is_read_with_its_quotes() {
        assert_eq!(
            session_cookie(r#"vmware_soap_session="52a1-77"; Path=/; HttpOnly; Secure;"#),
            Some("\"52a1-77\"".into())
        );
        assert_eq!(session_cookie("other=1; Path=/"), None);
        assert_eq!(session_cookie("vmware_soap_session=; Path=/"), None);
    }

    #[test]
    fn service_content_names_the_endpoints_own_objects() {
        let reply = soap::parse(
            r#"<RetrieveServiceContentResponse><returnval><rootFolder type="Folder">ha-folder-root</rootFolder><propertyCollector type="PropertyCollector">ha-property-collector</propertyCollector><about><apiType>HostAgent</apiType><apiVersion>7.0.3.0</apiVersion></about><sessionManager type="SessionManager">ha-sessionmgr</sessionManager><searchIndex type="SearchIndex">ha-searchindex</searchIndex></returnval></RetrieveServiceContentResponse>"#,
        )
        .unwrap();
        let c = read_content(&reply).unwrap();
        assert_eq!(
            c.session_manager,
            MoRef::new("SessionManager", "ha-sessionmgr")
        );
        assert_eq!(c.search_index.id, "ha-searchindex");
        assert_eq!(c.property_collector.id, "ha-property-collector");
        assert_eq!(c.api_version, "7.0.3.0");
        assert_eq!(c.api_type, "HostAgent");
        let odd = soap::parse(
            r#"<R><returnval><about><apiVersion>7"/&gt;</apiVersion></about></returnval></R>"#,
        )
        .unwrap();
        assert!(read_content(&odd).is_err(), "no morefs");
    }
}
