//! BMC credentials: where the password comes from, reading it, and its limits.
//!
//! A password comes from a file (`password_file`, the recommended way: a mounted
//! Kubernetes Secret), an environment variable (`password_env`), or, only when
//! `[security] allow_inline_passwords = true`, the inventory itself. Each source is
//! read once, where it is written, even if 500 nodes inherit it. The password is held
//! in a `SecretString` from the moment it is read; no message names its value or its
//! length beyond what a limit needs.

use secrecy::{ExposeSecret, SecretString};

use super::files;
use super::layer::{Driver, PasswordRef};
use super::model::{Credential, SecretSource};
use super::resolve::{Chain, Ctx, Picked};

/// IPMI v2.0 limits (user name 16 bytes, password 20 bytes).
const IPMI_MAX_USERNAME: usize = 16;
const IPMI_MAX_PASSWORD: usize = 20;

/// The node's credential. `required` for redfish and ipmi; for exec a credential
/// exists only when a password source is set. Err when a problem was reported.
pub(crate) fn credential(
    ctx: &mut Ctx<'_>,
    chain: &Chain<'_>,
    driver: Driver,
    required: bool,
) -> Result<Option<Credential>, ()> {
    let password = chain.pick(|l| &l.password);
    let username = chain.pick(|l| &l.username);
    if !required && password.is_none() {
        return Ok(None);
    }
    let node = chain.node;
    let where_ = "on the node, its group or in [defaults]";
    if username.is_none() && !chain.invalid(&["username"]) {
        ctx.error(
            node,
            &node.span,
            format!("no `username` for driver \"{}\"", driver.name()),
            Some(format!("set username = \"...\" {where_}")),
        );
    }
    if password.is_none() && !chain.invalid(&["password", "password_file", "password_env"]) {
        ctx.error(
            node,
            &node.span,
            format!("no password for driver \"{}\"", driver.name()),
            Some(format!(
                "set password_file (a file holding the password) or password_env (an \
                 environment variable) {where_}"
            )),
        );
    }
    let (Some(username), Some(password)) = (username, password) else {
        return Err(());
    };
    let secret = secret(ctx, password);
    let mut ok = secret.is_some();
    if driver == Driver::Ipmi {
        ok &= ipmi_limits(ctx, username, password, secret.as_ref());
    }
    match secret {
        Some(secret) if ok => Ok(Some(Credential {
            username: username.val.value.clone(),
            password: secret,
            source: source(&password.val.value),
        })),
        _ => Err(()),
    }
}

fn source(r: &PasswordRef) -> SecretSource {
    match r {
        PasswordRef::Inline(_) => SecretSource::Inline,
        PasswordRef::File(p) => SecretSource::File(p.abs.clone()),
        PasswordRef::Env(v) => SecretSource::Env(v.clone()),
    }
}

fn ipmi_limits(
    ctx: &mut Ctx<'_>,
    username: Picked<'_, String>,
    password: Picked<'_, PasswordRef>,
    secret: Option<&SecretString>,
) -> bool {
    let mut ok = true;
    let len = username.val.value.len();
    if len > IPMI_MAX_USERNAME {
        ok = false;
        ctx.error(
            username.layer,
            &username.val.span,
            format!("`username` is {len} bytes, but IPMI v2.0 allows at most {IPMI_MAX_USERNAME} (used by an ipmi node)"),
            Some("create a shorter BMC user for IPMI, and set it on the ipmi nodes or their group".into()),
        );
    }
    let len = secret.map_or(0, |s| s.expose_secret().len());
    if len > IPMI_MAX_PASSWORD {
        ok = false;
        let from = match &password.val.value {
            PasswordRef::File(p) => format!("password_file {}", p.display.display()),
            PasswordRef::Env(v) => format!("environment variable {v}"),
            PasswordRef::Inline(_) => "the inline `password`".into(),
        };
        ctx.error(
            password.layer,
            &password.val.span,
            format!("the password from {from} is longer than IPMI v2.0 allows ({IPMI_MAX_PASSWORD} bytes; used by an ipmi node)"),
            Some("set a password of at most 20 bytes on the BMC for IPMI, or use redfish".into()),
        );
    }
    ok
}

/// Reads a password source once; reports its problem once.
fn secret(ctx: &mut Ctx<'_>, picked: Picked<'_, PasswordRef>) -> Option<SecretString> {
    let id = picked.val.span.start;
    if let Some(known) = ctx.secrets.get(&id) {
        return known.clone();
    }
    let value = read(ctx, picked);
    ctx.secrets.insert(id, value.clone());
    value
}

fn read(ctx: &mut Ctx<'_>, picked: Picked<'_, PasswordRef>) -> Option<SecretString> {
    let (layer, val) = (picked.layer, picked.val);
    match &val.value {
        PasswordRef::Inline(secret) if ctx.security.allow_inline_passwords => {
            ctx.warn(
                layer,
                &val.key,
                "inline `password`: the BMC password is stored in the inventory in clear text; \
                 prefer password_file or password_env",
            );
            Some(secret.clone())
        }
        PasswordRef::Inline(_) => {
            ctx.error(
                layer,
                &val.key,
                "inline `password` is refused",
                Some(
                    "put the password in a file and set password_file (or in an environment \
                     variable and set password_env); to accept inline passwords anyway set \
                     [security] allow_inline_passwords = true in nodefence.toml"
                        .into(),
                ),
            );
            None
        }
        PasswordRef::File(path) => match files::read_password(path) {
            Ok(read) => {
                let first_time = ctx.warned_files.insert(path.abs.clone());
                if let (Some(mode), true) = (read.world_readable, first_time) {
                    ctx.warn(
                        layer,
                        &val.span,
                        format!(
                            "password_file {} is readable by every user (mode {mode:04o}); \
                             restrict it with chmod 600",
                            path.display.display()
                        ),
                    );
                }
                Some(read.password)
            }
            Err(p) => {
                ctx.error(layer, &val.span, p.message, p.help);
                None
            }
        },
        PasswordRef::Env(name) => {
            let raw = (ctx.env)(name);
            let value = raw.as_deref().unwrap_or_default();
            let value = value
                .strip_suffix("\r\n")
                .or_else(|| value.strip_suffix('\n'))
                .unwrap_or(value);
            let problem = if raw.is_none() {
                Some(format!(
                    "environment variable {name} (password_env) is not set"
                ))
            } else if value.is_empty() {
                Some(format!(
                    "environment variable {name} (password_env) is empty"
                ))
            } else if value.contains(['\n', '\r']) {
                Some(format!(
                    "environment variable {name} (password_env) has more than one line"
                ))
            } else {
                None
            };
            match problem {
                None => Some(SecretString::from(value.to_string())),
                Some(message) => {
                    ctx.error(
                        layer,
                        &val.span,
                        message,
                        Some(format!(
                            "set {name} to the BMC password in nodefence's environment (e.g. \
                             from a Kubernetes Secret with env.valueFrom.secretKeyRef), or use \
                             password_file"
                        )),
                    );
                    None
                }
            }
        }
    }
}
