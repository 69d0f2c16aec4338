//! Authentication: HTTP Basic credentials and Redfish sessions (`X-Auth-Token`).
//!
//! Clients log in once through the SessionService and then send the token, or send
//! Basic credentials on every request; a fencing client must handle both, notice
//! when a token has expired (401) and log in again. The store here hands out tokens,
//! revokes them on DELETE, and can expire all of them at once to exercise re-login.

use std::collections::HashMap;
use std::time::SystemTime;

use axum::http::HeaderMap;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::profile::Profile;

/// Which kind of credentials a request presented (not whether they were valid).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AuthKind {
    None,
    Basic,
    Session,
}

/// What a request carried, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Presented {
    None,
    Basic {
        user: String,
        password: String,
    },
    /// An `Authorization: Basic` header that is not valid base64 `user:password`.
    BadBasic,
    Token(String),
}

impl Presented {
    /// Reads the credentials from the headers; a session token wins over Basic.
    pub(crate) fn from_headers(headers: &HeaderMap) -> Self {
        if let Some(token) = headers.get("x-auth-token").and_then(|v| v.to_str().ok()) {
            return Presented::Token(token.trim().to_owned());
        }
        let Some(auth) = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        else {
            return Presented::None;
        };
        let Some((scheme, rest)) = auth.trim().split_once(' ') else {
            return Presented::BadBasic;
        };
        if !scheme.eq_ignore_ascii_case("basic") {
            return Presented::BadBasic;
        }
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest.trim())
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok());
        match decoded.as_deref().and_then(|s| s.split_once(':')) {
            Some((user, password)) => Presented::Basic {
                user: user.to_owned(),
                password: password.to_owned(),
            },
            None => Presented::BadBasic,
        }
    }

    pub(crate) fn kind(&self) -> AuthKind {
        match self {
            Presented::None => AuthKind::None,
            Presented::Basic { .. } | Presented::BadBasic => AuthKind::Basic,
            Presented::Token(_) => AuthKind::Session,
        }
    }
}

/// One logged-in session.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub(crate) id: String,
    pub(crate) token: String,
    pub(crate) user: String,
    pub(crate) created: SystemTime,
}

/// Live sessions, by token.
#[derive(Debug, Default)]
pub(crate) struct SessionStore {
    by_token: HashMap<String, Session>,
    created: u64,
}

impl SessionStore {
    /// Opens a session in the profile's id and token style.
    pub(crate) fn create(&mut self, user: &str, profile: Profile) -> Session {
        self.created += 1;
        let random = uuid::Uuid::new_v4().simple().to_string();
        let id = match profile {
            // iDRAC numbers its sessions.
            Profile::Idrac => (self.created + 1).to_string(),
            // iLO: user name followed by hex.
            Profile::Ilo => format!("{user}{}", &random[..16]),
            // bmcweb: 10 random alphanumerics.
            _ => random[..10].to_owned(),
        };
        let session = Session {
            id,
            token: uuid::Uuid::new_v4().simple().to_string(),
            user: user.to_owned(),
            created: nodefence_clock::now(),
        };
        self.by_token.insert(session.token.clone(), session.clone());
        session
    }

    pub(crate) fn by_token(&self, token: &str) -> Option<&Session> {
        self.by_token.get(token)
    }

    pub(crate) fn by_id(&self, id: &str) -> Option<&Session> {
        self.by_token.values().find(|s| s.id == id)
    }

    /// Ends the session with this id; false if there was none.
    pub(crate) fn delete(&mut self, id: &str) -> bool {
        let before = self.by_token.len();
        self.by_token.retain(|_, s| s.id != id);
        before != self.by_token.len()
    }

    /// Ends every session (as a BMC does on timeout or reboot); returns how many.
    pub(crate) fn expire_all(&mut self) -> usize {
        let n = self.by_token.len();
        self.by_token.clear();
        n
    }

    pub(crate) fn len(&self) -> usize {
        self.by_token.len()
    }

    /// Session ids, oldest first.
    pub(crate) fn ids(&self) -> Vec<String> {
        let mut sessions: Vec<&Session> = self.by_token.values().collect();
        sessions.sort_by_key(|s| s.created);
        sessions.into_iter().map(|s| s.id.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(name: &'static str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(value) {
            h.insert(name, v);
        }
        h
    }

    #[test]
    fn parses_basic_and_token() {
        let basic = headers("authorization", "Basic YWRtaW46czNjcjp0"); // admin:s3cr:t
        assert_eq!(
            Presented::from_headers(&basic),
            Presented::Basic {
                user: "admin".into(),
                password: "s3cr:t".into()
            }
        );
        assert_eq!(
            Presented::from_headers(&headers("authorization", "Basic !!!")),
            Presented::BadBasic
        );
        assert_eq!(
            Presented::from_headers(&headers("X-Auth-Token", "abc")),
            Presented::Token("abc".into())
        );
        assert_eq!(
            Presented::from_headers(&HeaderMap::new()).kind(),
            AuthKind::None
        );
    }

    #[test]
    fn sessions_come_and_go() {
        let mut store = SessionStore::default();
        let a = store.create("admin", Profile::OpenBmc);
        let b = store.create("admin", Profile::Idrac);
        assert_eq!(store.len(), 2);
        assert_ne!(a.token, b.token);
        assert!(store.by_token(&a.token).is_some());
        assert!(store.delete(&a.id));
        assert!(!store.delete(&a.id));
        assert_eq!(store.expire_all(), 1);
        assert!(store.by_token(&b.token).is_none());
    }
}
