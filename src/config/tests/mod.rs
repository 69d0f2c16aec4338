//! Scenario tests of the loader: whole files in a temporary directory, loaded through
//! the public API, with the environment given as a closure.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agent_file;
mod checks;
mod errors;
mod fallback;
mod kubevirt;
mod policy;
mod resolution;
mod secret_refs;
mod secrets;
mod vsphere;
mod warnings;

use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;

use super::{Config, ConfigError, ConfigErrors, load_with_env};

/// The password in the fixture's `secrets/bmc-password`.
pub(super) const FILE_PASSWORD: &str = "file-pw-71d3";
/// The password in the fixture's `RACK_A_BMC_PASSWORD`.
pub(super) const ENV_PASSWORD: &str = "env-pw-9c2e";

pub(super) const PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n";

/// A directory with `nodefence.toml`, a password file and a CA file.
pub(super) struct Fixture {
    pub dir: tempfile::TempDir,
    env: HashMap<String, String>,
}

impl Fixture {
    pub fn new() -> Self {
        let f = Self {
            dir: tempfile::tempdir().unwrap(),
            env: HashMap::from([("RACK_A_BMC_PASSWORD".into(), ENV_PASSWORD.into())]),
        };
        f.agent("inventory = \"inventory.toml\"\n");
        f.secret("secrets/bmc-password", &format!("{FILE_PASSWORD}\n"));
        f.write("ca.pem", PEM);
        f
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn write(&self, name: &str, content: &str) {
        let path = self.path(name);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }

    /// Writes a file readable only by its owner.
    pub fn secret(&self, name: &str, content: &str) {
        self.write(name, content);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(self.path(name), fs::Permissions::from_mode(0o600)).unwrap();
        }
    }

    pub fn agent(&self, text: &str) {
        self.write("nodefence.toml", text);
    }

    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.insert(name.into(), value.into());
        self
    }

    pub fn load(&self, inventory: &str) -> Result<Config, ConfigErrors> {
        self.write("inventory.toml", inventory);
        let env = |name: &str| self.env.get(name).cloned();
        load_with_env(&self.path("nodefence.toml"), &env)
    }

    pub fn ok(&self, inventory: &str) -> Config {
        match self.load(inventory) {
            Ok(c) => c,
            Err(e) => panic!("expected the inventory to load:\n{e}"),
        }
    }

    pub fn errors(&self, inventory: &str) -> Vec<ConfigError> {
        let errs = self.load(inventory).expect_err("expected errors");
        assert!(!errs.is_empty());
        errs.0
    }
}

/// A valid redfish node header block using the fixture's files.
pub(super) const DEFAULTS: &str = "[defaults]\n\
    driver = \"redfish\"\n\
    username = \"fence\"\n\
    password_file = \"secrets/bmc-password\"\n";

/// The one error whose message contains `needle`, with a readable failure.
pub(super) fn find<'e>(errors: &'e [ConfigError], needle: &str) -> &'e ConfigError {
    let found: Vec<_> = errors
        .iter()
        .filter(|e| e.message.contains(needle))
        .collect();
    match found.as_slice() {
        [one] => one,
        _ => panic!(
            "expected exactly one error containing {needle:?}, got:\n{}",
            ConfigErrors(errors.to_vec())
        ),
    }
}

/// Asserts node, line and that the message names `field`.
pub(super) fn assert_at(e: &ConfigError, node: Option<&str>, line: usize, field: &str) {
    assert_eq!(e.node.as_deref(), node, "{e}");
    assert_eq!(e.line, Some(line), "{e}");
    assert!(e.column.is_some(), "{e}");
    assert!(
        e.message.contains(field),
        "message should name {field:?}: {e}"
    );
}

/// Joins lines so that line numbers in assertions are index + 1.
pub(super) fn lines(l: &[&str]) -> String {
    l.iter().map(|s| format!("{s}\n")).collect()
}

/// A valid redfish node body, after `[nodes.<name>]`.
pub(super) const NODE_OK: [&str; 4] = [
    "driver = \"redfish\"",
    "username = \"fence\"",
    "password_file = \"secrets/bmc-password\"",
    "endpoint = \"https://{node}-bmc\"",
];

pub(super) fn node(name: &str, extra: &[&str]) -> Vec<String> {
    let mut v = vec![format!("[nodes.{name}]")];
    v.extend(NODE_OK.iter().map(|s| s.to_string()));
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

pub(super) fn doc(parts: &[Vec<String>]) -> String {
    parts.iter().flatten().map(|s| format!("{s}\n")).collect()
}
