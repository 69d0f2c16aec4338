//! Fixture files: the systems a `mock-redfish` process serves, written in TOML.
//!
//! CI scripts describe a rack once (ids, initial power, UUIDs, odd ResetType lists)
//! and start the mock with `--fixture FILE`:
//!
//! ```toml
//! [[systems]]
//! id = "node-1"
//! power = "On"                 # optional; default from --initial-power
//! uuid = "3a2c0f5e-..."        # optional; default random
//! name = "rack 3 slot 1"       # optional
//! reset_types = ["On", "GracefulShutdown"]   # optional; default from the profile
//! ```
//!
//! `[[system]]` is accepted as a synonym of `[[systems]]`.

use std::path::Path;

use serde::Deserialize;

use super::model::{MockPower, SystemSpec};

/// A parsed fixture file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fixture {
    #[serde(default, alias = "system")]
    pub systems: Vec<FixtureSystem>,
}

/// One `[[systems]]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixtureSystem {
    pub id: String,
    pub name: Option<String>,
    pub power: Option<MockPower>,
    pub uuid: Option<String>,
    pub reset_types: Option<Vec<String>>,
}

/// Why a fixture could not be used.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    #[error("reading fixture {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("parsing fixture: {0}")]
    Parse(#[from] toml::de::Error),
    #[error("the fixture lists no systems")]
    Empty,
}

impl Fixture {
    /// Parses fixture TOML.
    pub fn from_toml_str(text: &str) -> Result<Self, FixtureError> {
        let fixture: Fixture = toml::from_str(text)?;
        if fixture.systems.is_empty() {
            return Err(FixtureError::Empty);
        }
        Ok(fixture)
    }

    /// Reads and parses a fixture file.
    pub fn load(path: &Path) -> Result<Self, FixtureError> {
        let text = std::fs::read_to_string(path).map_err(|source| FixtureError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml_str(&text)
    }

    /// The systems to serve; those without `power` start in `default_power`.
    pub fn into_specs(self, default_power: MockPower) -> Vec<SystemSpec> {
        self.systems
            .into_iter()
            .map(|s| {
                let mut spec = SystemSpec::new(s.id).power(s.power.unwrap_or(default_power));
                if let Some(name) = s.name {
                    spec = spec.name(name);
                }
                if let Some(uuid) = s.uuid {
                    spec = spec.uuid(uuid);
                }
                if let Some(types) = s.reset_types {
                    spec = spec.reset_types(types);
                }
                spec
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_systems_with_defaults() {
        let text = r#"
            [[systems]]
            id = "node-1"
            power = "off"
            uuid = "u-1"
            reset_types = ["On", "GracefulShutdown"]

            [[systems]]
            id = "node-2"
        "#;
        let specs = Fixture::from_toml_str(text)
            .map(|f| f.into_specs(MockPower::On))
            .unwrap_or_default();
        assert_eq!(
            specs,
            vec![
                SystemSpec::new("node-1")
                    .power(MockPower::Off)
                    .uuid("u-1")
                    .reset_types(["On", "GracefulShutdown"]),
                SystemSpec::new("node-2"),
            ]
        );
    }

    #[test]
    fn rejects_typos_and_empty_fixtures() {
        assert!(Fixture::from_toml_str("[[systems]]\nid = \"a\"\npowr = \"On\"\n").is_err());
        assert!(matches!(
            Fixture::from_toml_str(""),
            Err(FixtureError::Empty)
        ));
        assert!(Fixture::from_toml_str("[[system]]\nid = \"a\"\n").is_ok());
    }
}
