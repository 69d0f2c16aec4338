//! Logging in to a Redfish service the way real ones want it, and telling a refused
//! password from a refused action.
//!
//! `auth = "auto"` (the default) tries a Redfish session first (one login, a token
//! reused for every request), as the specification prefers:
//! 1. `POST SessionService/Sessions` with the user name and password in the body and
//!    no `Authorization` header, as the specification says;
//! 2. refused with 401/403: the same POST with HTTP Basic as well (some services want
//!    Basic on the login itself);
//! 3. still refused (or the service has no sessions: 404/405/501, or no
//!    SessionService at all): plain HTTP Basic on every request, remembered for this
//!    BMC. A 5xx at login decides nothing: it is retried.
//!
//! A refused login alone never blames the password (many services that refuse
//! sessions accept Basic with the same credentials). The credentials are reported as
//! rejected only when Basic with them is refused too; the next call then starts from
//! step 1 again, so a corrected password is picked up.
//!
//! Once a BMC accepted the credentials (a session created, or any request answered),
//! a 401/403 on a power command is a missing privilege, not a bad password: a
//! read-only user can read the power state but not Reset, and the message names the
//! Redfish privilege (`ConfigureComponents`) and role (Operator) to grant.

use reqwest::{Method, StatusCode};
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use tokio::time::Instant;

use super::model;
use super::reply::Reply;
use super::transport::{AttemptError, AuthHeader, Transport};
use crate::config::RedfishAuth;
use crate::power::PowerError;

const DEFAULT_SESSIONS: &str = "/redfish/v1/SessionService/Sessions";

/// How requests to this BMC authenticate, once decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) enum Scheme {
    /// Not tried yet (or the last attempt proved nothing).
    #[default]
    Undecided,
    /// Redfish sessions; `basic_on_login`: the login POST needs HTTP Basic too.
    Sessions { basic_on_login: bool },
    /// HTTP Basic on every request; `because` says why sessions are not used (for
    /// the message if Basic is refused as well).
    Basic { because: String },
}

/// Per-BMC authentication state.
#[derive(Debug, Default)]
pub(super) struct AuthState {
    pub(super) scheme: Scheme,
    pub(super) token: Option<SecretString>,
    pub(super) session_uri: Option<String>,
    /// The BMC accepted these credentials at least once (a session was created or an
    /// authenticated request answered 2xx): a later 401/403 is about privilege.
    pub(super) accepted: bool,
}

impl Transport {
    /// The credentials to send, logging in first if sessions are in use and none is open.
    pub(super) async fn auth_header(&self, deadline: Instant) -> Result<AuthHeader, AttemptError> {
        let mut state = self.auth.lock().await;
        if self.mode == RedfishAuth::Basic || matches!(state.scheme, Scheme::Basic { .. }) {
            return Ok(AuthHeader::Basic);
        }
        if let Some(token) = &state.token {
            return Ok(AuthHeader::Token(token.clone()));
        }
        let root = self
            .service_root(deadline)
            .await
            .map_err(AttemptError::transient)?;
        let sessions = root
            .links
            .sessions
            .as_ref()
            .map(|l| l.odata_id.clone())
            .or_else(|| {
                root.session_service
                    .as_ref()
                    .map(|_| DEFAULT_SESSIONS.to_string())
            });
        let Some(sessions) = sessions else {
            if self.mode == RedfishAuth::Session {
                return Err(AttemptError::fatal(PowerError::unsupported(
                    "the BMC advertises no SessionService but auth = \"session\" was configured; use auth = \"auto\" or \"basic\"",
                )));
            }
            state.scheme = Scheme::Basic {
                because: "the BMC advertises no SessionService".into(),
            };
            return Ok(AuthHeader::Basic);
        };
        let basic_first = matches!(
            state.scheme,
            Scheme::Sessions {
                basic_on_login: true
            }
        );
        let mut reply = match self.login(&sessions, basic_first, deadline).await {
            Ok(reply) => reply,
            // A login that cannot be made at all (a redirect that would turn the POST
            // into a GET, a reply that is not Redfish): in auto mode, plain Basic.
            // Transient failures are retried as they are.
            Err(e) if !e.retry && self.mode == RedfishAuth::Auto => {
                tracing::info!(endpoint = %self.base(), error = %e.error, "cannot log in to a Redfish session; using HTTP Basic");
                state.scheme = Scheme::Basic {
                    because: format!("the session login failed ({})", e.error.message),
                };
                return Ok(AuthHeader::Basic);
            }
            Err(e) => return Err(e),
        };
        let mut basic_on_login = basic_first;
        if matches!(
            reply.status,
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN
        ) && !basic_first
        {
            tracing::debug!(endpoint = %self.base(), status = %reply.status, "session login refused; trying it with HTTP Basic");
            reply = self.login(&sessions, true, deadline).await?;
            basic_on_login = true;
        }
        if reply.status.is_success() {
            let Some(token) = reply.auth_token.clone() else {
                return Err(AttemptError::fatal(PowerError::protocol(format!(
                    "POST {sessions} created a session but returned no X-Auth-Token header"
                ))));
            };
            state.session_uri = reply.location.clone().or_else(|| {
                reply
                    .body
                    .as_ref()
                    .and_then(|b| b.get("@odata.id"))
                    .and_then(Value::as_str)
                    .map(str::to_string)
            });
            state.scheme = Scheme::Sessions { basic_on_login };
            state.token = Some(token.clone());
            state.accepted = true;
            return Ok(AuthHeader::Token(token));
        }
        if reply.status.is_server_error() {
            return Err(self.judge(reply, &Method::POST, &sessions).map_or_else(
                |e| e,
                |_| AttemptError::transient(PowerError::unreachable("session login failed")),
            ));
        }
        let refusal = format!(
            "POST {sessions} answered HTTP {}{}",
            reply.status,
            detail(&reply)
        );
        if self.mode == RedfishAuth::Session {
            return Err(AttemptError::fatal(PowerError::auth(format!(
                "the BMC refused a session login for user {:?} ({refusal}); with auth = \"session\" \
                 nodefence does not try HTTP Basic: check the password source {}, or set \
                 auth = \"auto\"",
                self.credential.username, self.credential.source
            ))));
        }
        tracing::info!(endpoint = %self.base(), "the BMC refused a Redfish session login ({refusal}); using HTTP Basic");
        state.scheme = Scheme::Basic {
            because: format!("the session login was refused too ({refusal})"),
        };
        Ok(AuthHeader::Basic)
    }

    /// One login POST; with `basic`, HTTP Basic on it as well as the body.
    async fn login(
        &self,
        sessions: &str,
        basic: bool,
        deadline: Instant,
    ) -> Result<Reply, AttemptError> {
        let body = serde_json::json!({
            "UserName": self.credential.username,
            "Password": self.credential.password.expose_secret(),
        });
        let auth = if basic {
            AuthHeader::Basic
        } else {
            AuthHeader::None
        };
        self.raw(Method::POST, sessions, Some(&body), &auth, deadline)
            .await
    }

    /// Notes that the BMC answered an authenticated request.
    pub(super) async fn accepted(&self) {
        let mut state = self.auth.lock().await;
        state.accepted = true;
    }

    /// The error for a 401/403 to an authenticated request: a missing privilege when
    /// these credentials are proven good (the BMC says so, a session was just created
    /// with them, or a read with them still succeeds), else rejected credentials,
    /// naming every way they were tried.
    pub(super) async fn refused(
        &self,
        reply: &Reply,
        method: &Method,
        path: &str,
        sent: &AuthHeader,
        deadline: Instant,
    ) -> AttemptError {
        let what = format!(
            "{method} {path} answered HTTP {}{}",
            reply.status,
            detail(reply)
        );
        let says_privilege = reply
            .body
            .as_ref()
            .is_some_and(model::is_insufficient_privilege);
        let accepted = self.auth.lock().await.accepted;
        let proven = says_privilege
            || match sent {
                // A session was created with these credentials moments ago.
                AuthHeader::Token(_) => accepted,
                // Basic: they worked before; do they still (a changed password)?
                AuthHeader::Basic => accepted && self.basic_still_accepted(deadline).await,
                AuthHeader::None => false,
            };
        if proven || (reply.status == StatusCode::FORBIDDEN && accepted) {
            let doing = if *method == Method::GET {
                "read this resource (it needs at least the ReadOnly role)"
            } else {
                "control power: grant it the Redfish ConfigureComponents privilege (the \
                 Operator or Administrator role)"
            };
            return AttemptError::fatal(PowerError::privilege(format!(
                "{what}; user {:?} can log in to this BMC but lacks the privilege to {doing}",
                self.credential.username,
            )));
        }
        let mut state = self.auth.lock().await;
        let how = match (&state.scheme, sent) {
            (Scheme::Basic { because }, AuthHeader::Basic) => {
                format!(" with HTTP Basic, and {because}")
            }
            (_, AuthHeader::Basic) => " with HTTP Basic".to_string(),
            (_, AuthHeader::Token(_)) => " (a new session's token was refused)".to_string(),
            (_, AuthHeader::None) => String::new(),
        };
        // Start over next time: sessions may work once the password is corrected.
        if self.mode == RedfishAuth::Auto {
            state.scheme = Scheme::Undecided;
        }
        state.token = None;
        state.accepted = false;
        AttemptError::fatal(PowerError::auth(format!(
            "{what}; the BMC rejected the credentials of user {:?}{how} (check the password \
             source {})",
            self.credential.username, self.credential.source
        )))
    }

    /// One authenticated read of the Systems collection with HTTP Basic: do the
    /// credentials still work?
    async fn basic_still_accepted(&self, deadline: Instant) -> bool {
        let systems = match self.service_root(deadline).await {
            Ok(root) => root
                .systems
                .as_ref()
                .map_or_else(|| "/redfish/v1/Systems".to_string(), |l| l.odata_id.clone()),
            Err(_) => return false,
        };
        self.raw(Method::GET, &systems, None, &AuthHeader::Basic, deadline)
            .await
            .is_ok_and(|r| r.status.is_success())
    }

    /// Forgets a session token the BMC rejected, deleting the session if it still
    /// exists (best effort: BMCs have few session slots).
    pub(super) async fn drop_session(&self, deadline: Instant) {
        let (token, uri) = {
            let mut state = self.auth.lock().await;
            (state.token.take(), state.session_uri.take())
        };
        if let (Some(token), Some(uri)) = (token, uri) {
            let _ = self
                .raw(
                    Method::DELETE,
                    &uri,
                    None,
                    &AuthHeader::Token(token),
                    deadline,
                )
                .await;
        }
    }

    /// True once sessions are in use (for the re-login on a rejected token).
    pub(super) async fn uses_sessions(&self) -> bool {
        matches!(self.auth.lock().await.scheme, Scheme::Sessions { .. })
    }
}

/// ` (the BMC's message)`, escaped, or a note about an HTML page, or nothing.
pub(super) fn detail(reply: &Reply) -> String {
    match reply.body.as_ref().and_then(model::error_message) {
        Some(m) => format!(" ({})", m.trim_end_matches('.')),
        None if reply.content_type.contains("html") => " (an HTML error page)".to_string(),
        None => String::new(),
    }
}
