//! Loading `nodefence.toml` and the inventory it names.
//!
//! The inventory maps each Kubernetes node to its machine's power control. A wrong
//! entry does not fail loudly: it powers off the wrong machine, or the right machine
//! never, while volumes are handed over. So the loader is strict, and says exactly
//! what is wrong:
//!
//! - Unknown keys, wrong types and bad values are errors, each with file, line,
//!   column, the node (or group) it belongs to, and a `help:` with the fix.
//! - Every problem is reported in one run, for every node, not just the first.
//! - Everything a node needs is checked at load time: required fields per driver,
//!   password files and environment variables, CA files, fence agents, timeouts, and
//!   that no two nodes resolve to the same machine.
//! - Secrets never appear in a message, a warning or `Debug` output.
//!
//! [`load`] returns the resolved [`Config`] ([`model`]): defaults and groups merged
//! into each node, the fencing policy resolved per node (`[policy]`, then the group's
//! and the node's `policy` overrides, key by key), credentials read, paths absolute
//! (relative paths are relative to the file that names them, as given: a Kubernetes
//! ConfigMap mount's symlinks are not followed to a versioned directory).
//! Allowed-but-risky settings become [`Config::warnings`]; the loader prints nothing.
//!
//! Passwords kept in Kubernetes Secrets (`password_secret`) need cluster access: the
//! loader checks the reference and leaves the credential pending; [`resolve_secrets`]
//! reads them once a client exists.
//!
//! The files are read key by key from `toml`'s spanned tree rather than through serde
//! (see `fields` for why). Layout: `agent` (`nodefence.toml`), `inventory`
//! (the inventory file) with `layer` (one level as written), `resolve`
//! (inheritance), `policy` (`[policy]` and its overrides), `values` (single-value
//! checks), `targets` (per driver), `credentials`, `endpoint`, `files`,
//! `node_name` and `machines`; `diagnostic` holds the error type; `secrets`
//! reads Kubernetes Secrets.

mod agent;
mod credentials;
mod diagnostic;
mod document;
mod endpoint;
mod fallback;
mod fields;
mod files;
mod inventory;
mod ipmi_key;
mod layer;
mod machines;
pub mod model;
mod node_name;
mod paths;
mod policy;
mod resolve;
mod secrets;
mod targets;
mod values;
pub mod watch;

#[cfg(test)]
mod tests;

use std::io;
use std::path::Path;

pub use diagnostic::{ConfigError, ConfigErrors};
pub use fields::{MAX_DURATION, max_duration_text};
pub use model::*;
pub use secrets::{
    DataDigest, SecretProblem, SecretProblemKind, SecretResolveError, SecretsRead, resolve_secrets,
};

use diagnostic::{Diagnostics, Source, Subject};
use paths::BaseDir;

/// Loads `nodefence.toml` at `config_path` and the inventory it names, reading
/// `password_env` variables from the process environment.
pub fn load(config_path: &Path) -> Result<Config, ConfigErrors> {
    load_with_env(config_path, &|name| std::env::var(name).ok())
}

/// [`load`], with environment variables looked up through `env` (for tests, and for
/// callers that keep their environment elsewhere).
pub fn load_with_env(
    config_path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigErrors> {
    let mut diags = Diagnostics::default();
    let fail = |diags: Diagnostics| match diags.finish(&[config_path]) {
        Err(errors) => errors,
        Ok(_) => unexplained(config_path),
    };
    let config_file = match paths::FilePath::given(config_path) {
        Ok(p) => p,
        Err(e) => {
            diags.file_error(config_path, format!("cannot resolve the path: {e}"), None);
            return Err(fail(diags));
        }
    };
    let text = match read_text(config_path) {
        Ok(text) => text,
        Err((message, help)) => {
            diags.file_error(config_path, message, help);
            return Err(fail(diags));
        }
    };
    let src = Source::new(config_path.to_path_buf(), text);
    let base = BaseDir::of(&config_file);
    let Some(table) = document::parse(&src, &mut diags) else {
        return Err(fail(diags));
    };
    let draft = agent::parse(&src, &table, &base, &mut diags);
    let mut metal3 = draft.metal3.clone();
    // BareMetalHost entries get `[policy]` over the defaults of a BMC driver.
    metal3.policy = draft.policy.for_node(None, None, layer::Driver::Redfish);
    let Some((inventory_path, inventory_span)) = draft.inventory.clone() else {
        if !draft.metal3.hosts {
            return Err(fail(diags));
        }
        // BareMetalHosts alone: no inventory file.
        let warnings = diags.finish(&[config_path])?;
        return Ok(Config {
            agent: AgentConfig {
                inventory: config_file.abs.clone(),
                power: draft.power,
                security: draft.security,
                remediation: draft.remediation,
                policy: draft.policy.global(),
                metal3,
            },
            inventory: Inventory::default(),
            config_path: config_file.abs.clone(),
            inventory_path: config_file.abs,
            warnings,
        });
    };

    let inventory = match read_text(&inventory_path.abs) {
        Ok(text) => {
            let inv_src = Source::new(inventory_path.display.clone(), text);
            let inv_base = BaseDir::of(&inventory_path);
            let settings = inventory::Settings {
                security: &draft.security,
                policy: &draft.policy,
                confirm: draft.power.confirm,
                allow_empty: draft.metal3.hosts,
            };
            inventory::load(&inv_src, &inv_base, &settings, env, &mut diags)
        }
        Err((message, help)) => {
            let message = format!("inventory {}: {message}", inventory_path.display.display());
            let help = help.or_else(|| {
                Some(
                    "fix `inventory` (relative to nodefence.toml's directory) or create the file"
                        .into(),
                )
            });
            diags.error(&src, Some(&inventory_span), &Subject::File, message, help);
            None
        }
    };

    let files = [config_path, inventory_path.display.as_path()];
    let warnings = diags.finish(&files)?;
    let Some(inventory) = inventory else {
        return Err(unexplained(&inventory_path.display));
    };
    Ok(Config {
        agent: AgentConfig {
            inventory: inventory_path.abs.clone(),
            power: draft.power,
            security: draft.security,
            remediation: draft.remediation,
            policy: draft.policy.global(),
            metal3,
        },
        inventory,
        config_path: config_file.abs,
        inventory_path: inventory_path.abs,
        warnings,
    })
}

/// Never expected: every failure records its reason. Still never an empty report.
fn unexplained(file: &Path) -> ConfigErrors {
    ConfigErrors(vec![ConfigError {
        file: file.to_path_buf(),
        line: None,
        column: None,
        node: None,
        message: "could not be loaded (no specific problem was recorded)".into(),
        help: None,
    }])
}

/// Reads a whole config file as UTF-8; Err is a message and help.
fn read_text(path: &Path) -> Result<String, (String, Option<String>)> {
    std::fs::read_to_string(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => ("file does not exist".to_string(), None),
        io::ErrorKind::PermissionDenied => (
            "cannot be read: permission denied".to_string(),
            Some("make it readable by the user nodefence runs as".into()),
        ),
        io::ErrorKind::InvalidData => ("is not UTF-8 text".to_string(), None),
        io::ErrorKind::IsADirectory => ("is a directory, not a file".to_string(), None),
        _ => (format!("cannot be read: {e}"), None),
    })
}
