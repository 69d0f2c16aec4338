//! BMC credentials: where the password comes from, reading it, and its limits.
//!
//! A password comes from a file (`password_file`, e.g. a mounted Kubernetes Secret),
//! an environment variable (`password_env`), a Kubernetes Secret read through the API
//! (`password_secret`), or, only when `[security] allow_inline_passwords = true`, the
//! inventory itself. Each local source is read once, where it is written, even if 500
//! nodes inherit it. The password is held in a `SecretString` from the moment it is
//! read; no message names its value or its length beyond what a limit needs.
//!
//! A `password_secret` cannot be read without cluster access: the credential is left
//! pending ([`SecretSource::SecretPending`]) with the Secret's name and keys, and
//! [`super::resolve_secrets`] reads it (with the IPMI limits checked there). With
//! `username_secret_key` the username comes from the same Secret; `username` and
//! `username_secret_key` are one setting, the more specific level's wins.

use secrecy::{ExposeSecret, SecretString};

use super::files;
use super::layer::{Driver, PasswordRef, SecretName};
use super::model::{Credential, SecretRef, SecretSource};
use super::resolve::{Chain, Ctx, Picked, rank};

/// IPMI v2.0 limits (user name 16 bytes, password 20 bytes).
pub(crate) const IPMI_MAX_USERNAME: usize = 16;
pub(crate) const IPMI_MAX_PASSWORD: usize = 20;

/// The key of a Secret read when `password_secret_key` is not set.
pub(crate) const DEFAULT_PASSWORD_KEY: &str = "password";

/// The node's credential. `required` for redfish and ipmi; for exec a credential
/// exists only when a password source is set. Err when a problem was reported.
pub(crate) fn credential(
    ctx: &mut Ctx<'_>,
    chain: &Chain<'_>,
    driver: Driver,
    required: bool,
) -> Result<Option<Credential>, ()> {
    let password = chain.pick(|l| &l.password);
    if !required && password.is_none() {
        return Ok(None);
    }
    let from_secret = password.and_then(|p| match &p.val.value {
        PasswordRef::Secret(name) => Some(name),
        _ => None,
    });
    let mut ok = secret_keys_apply(ctx, chain, from_secret.is_some());
    let username = chain.pick(|l| &l.username);
    // `username` and `username_secret_key` are one setting: the more specific wins.
    let username_key = chain
        .pick(|l| &l.username_secret_key)
        .filter(|_| from_secret.is_some())
        .filter(|k| username.is_none_or(|u| rank(k.layer) > rank(u.layer)));
    let username = username.filter(|_| username_key.is_none());
    let node = chain.node;
    let where_ = "on the node, its group or in [defaults]";
    if username.is_none()
        && username_key.is_none()
        && !chain.invalid(&["username", "username_secret_key"])
    {
        let secret_hint = if from_secret.is_some() {
            " (or username_secret_key, to read it from the password's Secret)"
        } else {
            ""
        };
        ctx.error(
            node,
            &node.span,
            format!("no `username` for driver \"{}\"", driver.name()),
            Some(format!("set username = \"...\"{secret_hint} {where_}")),
        );
    }
    if password.is_none() && !chain.invalid(super::layer::PASSWORD_FIELDS) {
        ctx.error(
            node,
            &node.span,
            format!("no password for driver \"{}\"", driver.name()),
            Some(format!(
                "set password_file (a file holding the password), password_env (an \
                 environment variable) or password_secret (a Kubernetes Secret) {where_}"
            )),
        );
    }
    let Some(password) = password else {
        return Err(());
    };
    if username.is_none() && username_key.is_none() {
        return Err(());
    }
    if let Some(name) = from_secret {
        if driver == Driver::Ipmi
            && let Some(username) = username
        {
            ok &= ipmi_limits(ctx, Some(username), password, None);
        }
        if !ok {
            return Err(());
        }
        let reference = secret_ref(ctx, chain, password, name, username_key);
        return Ok(Some(Credential {
            username: username.map(|u| u.val.value.clone()).unwrap_or_default(),
            password: SecretString::from(String::new()),
            source: SecretSource::SecretPending(reference),
        }));
    }
    let Some(username) = username else {
        return Err(());
    };
    let secret = secret(ctx, password);
    ok &= secret.is_some();
    if driver == Driver::Ipmi {
        ok &= ipmi_limits(ctx, Some(username), password, secret.as_ref());
    }
    match (secret, local_source(&password.val.value)) {
        (Some(secret), Some(source)) if ok => Ok(Some(Credential {
            username: username.val.value.clone(),
            password: secret,
            source,
        })),
        _ => Err(()),
    }
}

/// Where a password read at load time came from (None for a Secret, never read here).
fn local_source(r: &PasswordRef) -> Option<SecretSource> {
    match r {
        PasswordRef::Inline(_) => Some(SecretSource::Inline),
        PasswordRef::File(p) => Some(SecretSource::File(p.abs.clone())),
        PasswordRef::Env(v) => Some(SecretSource::Env(v.clone())),
        PasswordRef::Secret(_) => None,
    }
}

/// The Secret reference of a `password_secret` credential.
fn secret_ref(
    ctx: &Ctx<'_>,
    chain: &Chain<'_>,
    password: Picked<'_, PasswordRef>,
    name: &SecretName,
    username_key: Option<Picked<'_, String>>,
) -> SecretRef {
    let (line, column) = ctx.src.locate(password.val.span.start);
    SecretRef {
        namespace: name.namespace.clone(),
        name: name.name.clone(),
        password_key: chain
            .pick(|l| &l.password_secret_key)
            .map_or_else(|| DEFAULT_PASSWORD_KEY.to_string(), |k| k.val.value.clone()),
        username_key: username_key.map(|k| k.val.value.clone()),
        written_at: format!("{}:{line}:{column}", ctx.src.display.display()),
    }
}

/// `password_secret_key` and `username_secret_key` written on the node itself belong
/// to a `password_secret`; inherited ones a node does not use are ignored (like
/// fields of another driver). False when a problem was reported.
fn secret_keys_apply(ctx: &mut Ctx<'_>, chain: &Chain<'_>, from_secret: bool) -> bool {
    let node = chain.node;
    // A source on the node itself was already compared with its keys when read.
    if from_secret || node.password.is_some() {
        return true;
    }
    let mut ok = true;
    for (field, val) in [
        ("password_secret_key", &node.password_secret_key),
        ("username_secret_key", &node.username_secret_key),
    ] {
        if let Some(v) = val {
            ok = false;
            ctx.error(
                node,
                &v.key,
                format!(
                    "`{field}` applies only to password_secret, but this node's password \
                     does not come from a Kubernetes Secret"
                ),
                Some(format!(
                    "remove {field}, or set password_secret = \"<namespace>/<name>\" on the node"
                )),
            );
        }
    }
    ok
}

fn ipmi_limits(
    ctx: &mut Ctx<'_>,
    username: Option<Picked<'_, String>>,
    password: Picked<'_, PasswordRef>,
    secret: Option<&SecretString>,
) -> bool {
    let mut ok = true;
    let len = username.map_or(0, |u| u.val.value.len());
    if let Some(username) = username
        && len > IPMI_MAX_USERNAME
    {
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
            PasswordRef::Secret(_) => "password_secret".into(),
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
        PasswordRef::Secret(_) => {
            // `credential` leaves a Secret pending and never reads it here.
            ctx.error(
                layer,
                &val.key,
                "internal: password_secret cannot be read while loading the file",
                None,
            );
            None
        }
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
