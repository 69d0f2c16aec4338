//! Fixture files: the BMCs a `mock-ipmi` process serves, written in TOML.
//!
//! Each `[[bmc]]` is one BMC on its own UDP port; anything it leaves out comes from
//! the command-line flags (the "base" builder):
//!
//! ```toml
//! [[bmc]]
//! name = "node-1"
//! listen = "127.0.0.1:0"            # optional; default 127.0.0.1:0
//! power = "off"                     # optional
//! guid = "00112233445566778899aabbccddeeff"   # optional; wire order
//! kg_hex = "0102..."                # optional
//! suites = [17]                     # optional
//! transition_delay = "2s"           # optional
//! session_timeout = "60s"           # optional
//! max_sessions = 4                  # optional
//!
//! [[bmc.user]]                      # optional; replaces the flag's user
//! name = "fencer"
//! password_file = "fencer.pw"       # or password = "..."; relative to the fixture
//! privilege = "operator"            # optional; default administrator
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nodefence_ipmi_proto::command::Privilege;
use serde::Deserialize;

use super::model::{Power, UserSpec, parse_guid, parse_hex, parse_privilege, parse_suite};
use super::server::MockIpmi;

/// A parsed fixture file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fixture {
    #[serde(default, alias = "bmcs")]
    pub bmc: Vec<FixtureBmc>,
    /// Where relative `password_file` paths are resolved (the fixture's directory).
    #[serde(skip)]
    pub base_dir: Option<PathBuf>,
}

/// One `[[bmc]]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixtureBmc {
    pub name: String,
    pub listen: Option<SocketAddr>,
    pub power: Option<Power>,
    pub guid: Option<String>,
    pub kg_hex: Option<String>,
    pub suites: Option<Vec<u8>>,
    pub transition_delay: Option<String>,
    pub session_timeout: Option<String>,
    pub max_sessions: Option<usize>,
    #[serde(default, alias = "users")]
    pub user: Vec<FixtureUser>,
}

/// One `[[bmc.user]]` table. `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixtureUser {
    pub name: String,
    pub password: Option<String>,
    pub password_file: Option<PathBuf>,
    pub privilege: Option<String>,
}

impl std::fmt::Debug for FixtureUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FixtureUser")
            .field("name", &self.name)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("password_file", &self.password_file)
            .field("privilege", &self.privilege)
            .finish()
    }
}

/// Why a fixture could not be used.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("parsing fixture: {0}")]
    Parse(#[from] toml::de::Error),
    #[error("the fixture lists no BMCs")]
    Empty,
    #[error("BMC name {0:?} given twice")]
    DuplicateName(String),
    #[error("BMC {bmc:?}: {reason}")]
    Invalid { bmc: String, reason: String },
}

/// Reads a password file: its content minus one trailing newline; empty is an error.
pub fn read_password_file(path: &Path) -> Result<String, FixtureError> {
    let read_error = |source| FixtureError::Read {
        path: path.display().to_string(),
        source,
    };
    let text = std::fs::read_to_string(path).map_err(read_error)?;
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    if text.is_empty() {
        return Err(read_error(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "the password file is empty",
        )));
    }
    Ok(text.to_owned())
}

impl Fixture {
    /// Parses fixture TOML.
    pub fn from_toml_str(text: &str) -> Result<Self, FixtureError> {
        let fixture: Fixture = toml::from_str(text)?;
        if fixture.bmc.is_empty() {
            return Err(FixtureError::Empty);
        }
        for (i, b) in fixture.bmc.iter().enumerate() {
            if fixture.bmc.iter().take(i).any(|o| o.name == b.name) {
                return Err(FixtureError::DuplicateName(b.name.clone()));
            }
        }
        Ok(fixture)
    }

    /// Reads and parses a fixture file.
    pub fn load(path: &Path) -> Result<Self, FixtureError> {
        let text = std::fs::read_to_string(path).map_err(|source| FixtureError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let mut fixture = Self::from_toml_str(&text)?;
        fixture.base_dir = path.parent().map(Path::to_path_buf);
        Ok(fixture)
    }

    /// One builder per BMC: `base` (the flags) with the fixture's settings on top.
    pub fn builders(&self, base: &MockIpmi) -> Result<Vec<MockIpmi>, FixtureError> {
        self.bmc
            .iter()
            .map(|b| {
                b.apply(base.clone(), self.base_dir.as_deref())
                    .map_err(|reason| FixtureError::Invalid {
                        bmc: b.name.clone(),
                        reason,
                    })
            })
            .collect()
    }
}

fn duration(what: &str, s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{what} {s:?}: {e}"))
}

impl FixtureBmc {
    fn apply(&self, mut b: MockIpmi, base_dir: Option<&Path>) -> Result<MockIpmi, String> {
        b = b.name(self.name.clone());
        if let Some(addr) = self.listen {
            b = b.listen(addr);
        }
        if let Some(p) = self.power {
            b = b.power(p);
        }
        if let Some(g) = &self.guid {
            b = b.guid(parse_guid(g).map_err(|e| e.to_string())?);
        }
        if let Some(k) = &self.kg_hex {
            b = b.kg(parse_hex(k).map_err(|e| e.to_string())?);
        }
        if let Some(ids) = &self.suites {
            let suites = ids
                .iter()
                .map(|id| parse_suite(&id.to_string()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            b = b.suites(suites);
        }
        if let Some(d) = &self.transition_delay {
            b = b.transition_delay(duration("transition_delay", d)?);
        }
        if let Some(d) = &self.session_timeout {
            b = b.session_timeout(duration("session_timeout", d)?);
        }
        if let Some(n) = self.max_sessions {
            b = b.max_sessions(n);
        }
        if !self.user.is_empty() {
            let users = self
                .user
                .iter()
                .map(|u| u.spec(base_dir))
                .collect::<Result<Vec<_>, _>>()?;
            b = b.users(users);
        }
        Ok(b)
    }
}

impl FixtureUser {
    fn spec(&self, base_dir: Option<&Path>) -> Result<UserSpec, String> {
        let password = match (&self.password, &self.password_file) {
            (Some(p), None) => p.clone(),
            (None, Some(file)) => {
                let path = match base_dir {
                    Some(dir) if file.is_relative() => dir.join(file),
                    _ => file.clone(),
                };
                read_password_file(&path).map_err(|e| e.to_string())?
            }
            _ => {
                return Err(format!(
                    "user {:?}: give exactly one of password and password_file",
                    self.name
                ));
            }
        };
        let privilege = match &self.privilege {
            Some(p) => parse_privilege(p).map_err(|e| e.to_string())?,
            None => Privilege::Administrator,
        };
        Ok(UserSpec::new(self.name.clone(), password, privilege))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bmcs_and_users() {
        let text = r#"
            [[bmc]]
            name = "node-1"
            power = "off"
            suites = [17]
            transition_delay = "2s"
            [[bmc.user]]
            name = "fencer"
            password = "pw"
            privilege = "operator"

            [[bmc]]
            name = "node-2"
        "#;
        let fixture = Fixture::from_toml_str(text);
        let builders = fixture
            .as_ref()
            .ok()
            .and_then(|f| f.builders(&MockIpmi::builder()).ok())
            .unwrap_or_default();
        assert_eq!(builders.len(), 2);
        let bad_suite = "[[bmc]]\nname = \"a\"\nsuites = [1]\n";
        let f = Fixture::from_toml_str(bad_suite);
        assert!(matches!(
            f.as_ref().map(|f| f.builders(&MockIpmi::builder())),
            Ok(Err(FixtureError::Invalid { .. }))
        ));
        let no_password = "[[bmc]]\nname = \"a\"\n[[bmc.user]]\nname = \"u\"\n";
        let f = Fixture::from_toml_str(no_password);
        assert!(matches!(
            f.as_ref().map(|f| f.builders(&MockIpmi::builder())),
            Ok(Err(FixtureError::Invalid { .. }))
        ));
    }

    #[test]
    fn rejects_typos_duplicates_and_empty_fixtures() {
        assert!(Fixture::from_toml_str("[[bmc]]\nname = \"a\"\npowr = \"on\"\n").is_err());
        assert!(matches!(
            Fixture::from_toml_str("[[bmc]]\nname = \"a\"\n[[bmc]]\nname = \"a\"\n"),
            Err(FixtureError::DuplicateName(_))
        ));
        assert!(matches!(
            Fixture::from_toml_str(""),
            Err(FixtureError::Empty)
        ));
    }
}
