//! What the inventory names on disk: password files, CA bundles, fence agents, AWS
//! credentials files.
//!
//! Each is checked when the config is loaded, not when a node first has to be
//! fenced: a missing CA file discovered at 3 a.m. during an outage is a fencing
//! failure. Messages name the path as the operator wrote it (relative to the current
//! directory when the config path was), and never the content of a password file.

use std::fs;
use std::io::{self, Read};

use secrecy::SecretString;

use super::paths::FilePath;

/// A password file larger than this is surely the wrong file.
const MAX_PASSWORD_FILE: u64 = 4096;
/// A CA bundle larger than this is surely the wrong file.
const MAX_CA_FILE: u64 = 16 * 1024 * 1024;

/// Why a file cannot be used: message and fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileProblem {
    pub message: String,
    pub help: Option<String>,
}

fn problem(message: String, help: &str) -> FileProblem {
    FileProblem {
        message,
        help: (!help.is_empty()).then(|| help.to_string()),
    }
}

/// Opens `path` for reading, with messages for the usual failures.
fn open(
    what: &str,
    path: &FilePath,
    missing_help: &str,
    max: u64,
) -> Result<fs::File, FileProblem> {
    let shown = path.display.display();
    let failed = |e: io::Error| match e.kind() {
        io::ErrorKind::NotFound => problem(format!("{what} {shown} does not exist"), missing_help),
        io::ErrorKind::PermissionDenied => problem(
            format!("{what} {shown} cannot be read: permission denied"),
            "make it readable by the user nodefence runs as",
        ),
        _ => problem(format!("{what} {shown} cannot be read: {e}"), ""),
    };
    let meta = fs::metadata(&path.abs).map_err(failed)?;
    if meta.is_dir() {
        return Err(problem(
            format!("{what} {shown} is a directory, not a file"),
            missing_help,
        ));
    }
    if meta.len() > max {
        return Err(problem(
            format!(
                "{what} {shown} is {} bytes, far too large; is it the right file?",
                meta.len()
            ),
            "",
        ));
    }
    fs::File::open(&path.abs).map_err(failed)
}

/// A password read from a file, and whether others can read the file.
pub(crate) struct PasswordFile {
    pub password: SecretString,
    /// The file's permission bits when it is readable by every user (unix only).
    pub world_readable: Option<u32>,
}

/// Reads a password file: one line, one trailing newline (LF or CRLF) dropped.
pub(crate) fn read_password(path: &FilePath) -> Result<PasswordFile, FileProblem> {
    read_secret_line(
        path,
        "password_file",
        "the BMC password",
        "create it with the BMC password on one line, or use password_env",
    )
}

/// Reads a one-line secret file (`key` names the setting, `what` the secret).
pub(crate) fn read_secret_line(
    path: &FilePath,
    key: &str,
    what: &str,
    missing_help: &str,
) -> Result<PasswordFile, FileProblem> {
    let shown = path.display.display();
    let mut file = open(key, path, missing_help, MAX_PASSWORD_FILE)?;
    let mut text = String::new();
    if let Err(e) = file.read_to_string(&mut text) {
        let message = if e.kind() == io::ErrorKind::InvalidData {
            format!("{key} {shown} is not UTF-8 text")
        } else {
            format!("{key} {shown} cannot be read: {e}")
        };
        return Err(problem(message, ""));
    }
    let password = text
        .strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(&text);
    if password.is_empty() {
        return Err(problem(
            format!("{key} {shown} is empty"),
            &format!("write {what} into it, on one line"),
        ));
    }
    if password.contains(['\n', '\r']) {
        return Err(problem(
            format!("{key} {shown} has more than one line"),
            &format!("put only {what} in it, on one line (one trailing newline is fine)"),
        ));
    }
    Ok(PasswordFile {
        password: SecretString::from(password.to_string()),
        world_readable: world_readable(&file),
    })
}

#[cfg(unix)]
fn world_readable(file: &fs::File) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    let mode = file.metadata().ok()?.permissions().mode() & 0o7777;
    (mode & 0o004 != 0).then_some(mode)
}

#[cfg(not(unix))]
fn world_readable(_file: &fs::File) -> Option<u32> {
    None
}

/// Checks that a CA bundle exists and holds at least one PEM certificate.
pub(crate) fn check_ca_file(path: &FilePath) -> Result<(), FileProblem> {
    let shown = path.display.display();
    let mut file = open(
        "ca_file",
        path,
        "point it at the PEM file of the CA that signed the BMC certificates",
        MAX_CA_FILE,
    )?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| problem(format!("ca_file {shown} cannot be read: {e}"), ""))?;
    let marker = b"-----BEGIN CERTIFICATE-----";
    if bytes.windows(marker.len()).any(|w| w == marker) {
        Ok(())
    } else {
        Err(problem(
            format!("ca_file {shown} contains no PEM certificate"),
            "it must hold one or more \"-----BEGIN CERTIFICATE-----\" blocks (convert DER with \
             `openssl x509 -inform der -in ca.der -out ca.pem`)",
        ))
    }
}

/// A shared credentials file larger than this is surely the wrong file.
const MAX_CREDENTIALS_FILE: u64 = 1024 * 1024;

/// Checks that an AWS shared credentials file can be read and has the profile
/// (`[name]`, `default` when none is named). Never shows the file's content.
pub(crate) fn check_credentials_file(
    path: &FilePath,
    profile: Option<&str>,
) -> Result<(), FileProblem> {
    let shown = path.display.display();
    let mut file = open(
        "credentials_file",
        path,
        "point it at an AWS shared credentials file ([profile] sections with \
         aws_access_key_id and aws_secret_access_key), e.g. a mounted Secret",
        MAX_CREDENTIALS_FILE,
    )?;
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(|e| {
        problem(
            format!("credentials_file {shown} cannot be read as text: {e}"),
            "",
        )
    })?;
    let wanted = profile.unwrap_or("default");
    let has = text.lines().any(|line| {
        line.trim()
            .strip_prefix('[')
            .and_then(|l| l.strip_suffix(']'))
            .is_some_and(|name| name.trim() == wanted)
    });
    if has {
        Ok(())
    } else {
        Err(problem(
            format!("credentials_file {shown} has no [{wanted}] profile"),
            &match profile {
                Some(_) => "correct `profile`, or add that section to the file".to_string(),
                None => {
                    "name the profile to use with `profile`, or add a [default] section".to_string()
                }
            },
        ))
    }
}

/// Checks that a fence agent exists and is an executable file.
pub(crate) fn check_agent(path: &FilePath, written: &str) -> Result<(), FileProblem> {
    let shown = path.display.display();
    let missing_help = if written.contains('/') {
        "install the fence agent or correct the path".to_string()
    } else {
        format!(
            "a relative `agent` is relative to the inventory's directory, not searched in $PATH; \
             give the full path, e.g. agent = \"/usr/sbin/{written}\""
        )
    };
    let meta = match fs::metadata(&path.abs) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(problem(
                format!("agent {shown} does not exist"),
                &missing_help,
            ));
        }
        Err(e) => return Err(problem(format!("agent {shown} cannot be used: {e}"), "")),
    };
    if !meta.is_file() {
        return Err(problem(
            format!("agent {shown} is not a file"),
            &missing_help,
        ));
    }
    if !is_executable(&meta) {
        return Err(problem(
            format!("agent {shown} is not executable"),
            "chmod +x it (it is run as a ClusterLabs fence agent)",
        ));
    }
    Ok(())
}

#[cfg(unix)]
fn is_executable(meta: &fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o111 != 0
}

#[cfg(not(unix))]
fn is_executable(_meta: &fs::Metadata) -> bool {
    true
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use secrecy::ExposeSecret;

    use super::*;

    fn at(dir: &tempfile::TempDir, name: &str, content: &[u8]) -> FilePath {
        let abs = dir.path().join(name);
        fs::write(&abs, content).unwrap();
        FilePath {
            display: name.into(),
            abs,
        }
    }

    #[test]
    fn password_files_lose_one_trailing_newline_only() {
        let dir = tempfile::tempdir().unwrap();
        for (content, want) in [
            ("pw\n", "pw"),
            ("pw\r\n", "pw"),
            ("pw", "pw"),
            (" pw ", " pw "),
        ] {
            let p = read_password(&at(&dir, "f", content.as_bytes())).expect(content);
            assert_eq!(p.password.expose_secret(), want);
        }
        let err = read_password(&at(&dir, "f", b"\n")).err().unwrap();
        assert_eq!(err.message, "password_file f is empty");
        let err = read_password(&at(&dir, "f", b"secret-one\nsecret-two\n"))
            .err()
            .unwrap();
        assert!(err.message.ends_with("has more than one line"));
        assert!(!format!("{err:?}").contains("secret-"));
        let err = read_password(&at(&dir, "f", &[0xff, 0xfe])).err().unwrap();
        assert!(err.message.ends_with("is not UTF-8 text"));
    }

    #[cfg(unix)]
    #[test]
    fn world_readable_password_files_are_noticed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = at(&dir, "pw", b"x\n");
        fs::set_permissions(&f.abs, fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(read_password(&f).unwrap().world_readable, Some(0o644));
        fs::set_permissions(&f.abs, fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_password(&f).unwrap().world_readable, None);
    }

    #[test]
    fn ca_files_need_a_pem_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let ok = at(
            &dir,
            "ca.pem",
            b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        );
        check_ca_file(&ok).unwrap();
        let bad = at(&dir, "ca.der", &[0x30, 0x82, 0x01]);
        assert!(
            check_ca_file(&bad)
                .unwrap_err()
                .message
                .contains("no PEM certificate")
        );
        let missing = FilePath {
            display: "nope.pem".into(),
            abs: dir.path().join("nope.pem"),
        };
        assert_eq!(
            check_ca_file(&missing).unwrap_err().message,
            "ca_file nope.pem does not exist"
        );
    }

    #[cfg(unix)]
    #[test]
    fn agents_must_be_executable_files() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = at(&dir, "fence_x", b"#!/bin/sh\n");
        assert!(
            check_agent(&f, "fence_x")
                .unwrap_err()
                .message
                .contains("not executable")
        );
        fs::set_permissions(&f.abs, fs::Permissions::from_mode(0o755)).unwrap();
        check_agent(&f, "fence_x").unwrap();
        let missing = FilePath {
            display: "fence_y".into(),
            abs: dir.path().join("fence_y"),
        };
        let err = check_agent(&missing, "fence_y").unwrap_err();
        assert!(err.help.unwrap().contains("/usr/sbin/fence_y"));
    }
}

/// A kubeconfig larger than this is surely the wrong file.
const MAX_KUBECONFIG: u64 = 4 * 1024 * 1024;

/// What a kubeconfig's chosen context says, once checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KubeconfigContext {
    /// The context's default namespace, if it names one.
    pub namespace: Option<String>,
}

/// Checks that a kubeconfig parses and has the context (`context`, else its
/// `current-context`) with a cluster that names a server. Never shows the file's
/// content: a YAML error can quote a token, so only the fact is reported.
pub(crate) fn check_kubeconfig(
    path: &FilePath,
    context: Option<&str>,
) -> Result<KubeconfigContext, FileProblem> {
    let shown = path.display.display();
    let mut file = open(
        "kubeconfig",
        path,
        "point it at the infrastructure cluster's kubeconfig, e.g. the mounted Secret of \
         deploy/components/kubevirt",
        MAX_KUBECONFIG,
    )?;
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(|e| {
        problem(
            format!("kubeconfig {shown} cannot be read as text: {e}"),
            "",
        )
    })?;
    let config = kube::config::Kubeconfig::from_yaml(&text).map_err(|_| {
        problem(
            format!("kubeconfig {shown} is not a valid kubeconfig"),
            "check it with `kubectl --kubeconfig <file> config view` (its error is not shown \
             here: it can quote a token)",
        )
    })?;
    let wanted = match context.or(config.current_context.as_deref()) {
        Some(name) => name,
        None => {
            return Err(problem(
                format!("kubeconfig {shown} has no current-context"),
                "name the context with `kubeconfig_context`, or set current-context in the file",
            ));
        }
    };
    let Some(ctx) = config
        .contexts
        .iter()
        .find(|c| c.name == wanted)
        .and_then(|c| c.context.as_ref())
    else {
        let names: Vec<&str> = config.contexts.iter().map(|c| c.name.as_str()).collect();
        return Err(problem(
            format!("kubeconfig {shown} has no context \"{wanted}\""),
            &format!(
                "its contexts: {}; correct `kubeconfig_context`",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ),
        ));
    };
    let server = config
        .clusters
        .iter()
        .find(|c| c.name == ctx.cluster)
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.server.as_deref());
    if server.is_none_or(str::is_empty) {
        return Err(problem(
            format!(
                "kubeconfig {shown}: context \"{wanted}\" names cluster \"{}\", which has no server",
                ctx.cluster
            ),
            "the cluster entry needs `server: https://<api-server>:6443`",
        ));
    }
    Ok(KubeconfigContext {
        namespace: ctx.namespace.clone().filter(|n| !n.is_empty()),
    })
}
