//! Accounts, roles and how a service lets clients log in: the differences between
//! real BMCs that decide whether a client's credentials "work".
//!
//! - Roles: Redfish's `Administrator`, `Operator` and `ReadOnly`. A `ReadOnly` user
//!   reads everything (it has `Login`) but may not change anything: a Reset needs
//!   `ConfigureComponents`. Real services refuse it with the Base registry's
//!   `InsufficientPrivilege`, some with 403 as the specification says, some with 401
//!   (what was seen in the field), so the status is configurable.
//! - Session login ([`SessionLogin`]): the specification's way (credentials in the
//!   body, no `Authorization`), a service that also demands HTTP Basic on that POST,
//!   and one whose SessionService is disabled (`ServiceEnabled: false`) and refuses
//!   every login with 401 while Basic works everywhere else (proxmox-redfish's
//!   "Basic Authentication required but no valid Authorization header provided").

use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A Redfish role (`AccountService/Roles`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Role {
    Administrator,
    Operator,
    ReadOnly,
}

impl Role {
    /// May change state (`ConfigureComponents`): a Reset, a PATCH.
    pub fn may_configure(self) -> bool {
        !matches!(self, Role::ReadOnly)
    }
}

/// One user the mock accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub password: String,
    pub role: Role,
}

/// How `POST SessionService/Sessions` behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SessionLogin {
    /// As the specification says: the body's UserName/Password, no `Authorization`.
    #[default]
    Open,
    /// The login POST must also carry valid HTTP Basic credentials.
    BasicRequired,
    /// `ServiceEnabled: false`: every login refused with 401; Basic works elsewhere.
    Refused,
}

impl FromStr for SessionLogin {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "open" => Ok(SessionLogin::Open),
            "basic-required" => Ok(SessionLogin::BasicRequired),
            "refused" => Ok(SessionLogin::Refused),
            _ => Err(format!(
                "unknown session login {s:?} (expected open, basic-required or refused)"
            )),
        }
    }
}

/// The message such services send when a login lacks HTTP Basic.
pub const BASIC_REQUIRED_MESSAGE: &str =
    "Basic Authentication required but no valid Authorization header provided";

/// The role of the account with these credentials, if any.
pub(crate) fn role_of(accounts: &[Account], user: &str, password: &str) -> Option<Role> {
    accounts
        .iter()
        .find(|a| a.name == user && a.password == password)
        .map(|a| a.role)
}

/// The role of the account named `user` (for a session's owner).
pub(crate) fn role_named(accounts: &[Account], user: &str) -> Option<Role> {
    accounts.iter().find(|a| a.name == user).map(|a| a.role)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_pick_the_account_and_its_role() {
        let accounts = vec![
            Account {
                name: "admin".into(),
                password: "pw".into(),
                role: Role::Administrator,
            },
            Account {
                name: "ro".into(),
                password: "pw".into(),
                role: Role::ReadOnly,
            },
        ];
        assert_eq!(role_of(&accounts, "ro", "pw"), Some(Role::ReadOnly));
        assert_eq!(role_of(&accounts, "ro", "nope"), None);
        assert_eq!(role_named(&accounts, "admin"), Some(Role::Administrator));
        assert!(!Role::ReadOnly.may_configure());
        assert!(Role::Operator.may_configure());
        assert_eq!("refused".parse(), Ok(SessionLogin::Refused));
        assert!("x".parse::<SessionLogin>().is_err());
    }
}
