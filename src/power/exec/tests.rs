//! Unit tests: the stdin format, option and credential checks, the endpoint, the
//! reading of exit codes and output, and redaction. Real agent runs are in
//! `tests/exec_driver.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use secrecy::ExposeSecret;
use tokio::sync::Semaphore;

use super::process::{Captured, Finished};
use super::verdict::{self, Redactor};
use super::*;
use crate::config::{Credential, SecretSource, Timeouts};
use crate::power::{PowerErrorKind, PowerState};

const PASSWORD: &str = "pa ss=w'rd";

fn target(options: &[(&str, &str)], password: Option<&str>) -> ExecTarget {
    ExecTarget {
        agent: PathBuf::from("/usr/sbin/fence_test"),
        options: options
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
        credential: password.map(|p| Credential {
            username: "fencer".into(),
            password: p.to_string().into(),
            source: SecretSource::Inline,
        }),
        timeouts: Timeouts::default(),
    }
}

fn driver(t: &ExecTarget) -> Result<ExecDriver, PowerError> {
    ExecDriver::new(t, Arc::new(Semaphore::new(1)))
}

fn input(d: &ExecDriver, action: &str) -> String {
    String::from_utf8(d.input(action).expose_secret().to_vec()).unwrap()
}

fn finished(code: i32, stdout: &str, stderr: &str) -> Finished {
    Finished {
        status: ExitStatus::from_raw(code << 8),
        stdout: Captured {
            bytes: stdout.as_bytes().to_vec(),
            incomplete: false,
        },
        stderr: Captured {
            bytes: stderr.as_bytes().to_vec(),
            incomplete: false,
        },
        stdin_error: None,
        elapsed: Duration::ZERO,
    }
}

#[test]
fn stdin_holds_action_options_then_credentials() {
    let d = driver(&target(
        &[("ip", "10.0.0.5"), ("ssl_insecure", "1")],
        Some(PASSWORD),
    ))
    .unwrap();
    assert_eq!(
        input(&d, "status"),
        format!(
            "action=status\nip=10.0.0.5\nssl_insecure=1\nusername=fencer\npassword={PASSWORD}\n"
        )
    );
    // The options' own user wins; no password without a credential.
    let d = driver(&target(&[("login", "apc")], None)).unwrap();
    assert_eq!(input(&d, "off"), "action=off\nlogin=apc\n");
}

#[test]
fn options_and_passwords_that_cannot_pass_intact_are_refused() {
    for (key, value) in [
        ("action", "off"),
        ("Password", "x"),
        ("passwd_script", "/bin/x"),
        ("ip\nx", "1"),
        ("", "1"),
        ("ip", "10.0.0.5\naction=reboot"),
    ] {
        let e = driver(&target(&[(key, value)], None)).err().unwrap();
        assert_eq!(e.kind, PowerErrorKind::Config, "{key:?}={value:?}");
    }
    for bad in ["secret\naction=reboot", " secret", "secret ", "\"secret\""] {
        let e = driver(&target(&[], Some(bad))).err().unwrap();
        assert_eq!(e.kind, PowerErrorKind::Config);
        assert!(!e.message.contains("secret"), "{e}");
        assert!(e.message.contains("inline"), "names the source: {e}");
    }
}

#[test]
fn endpoint_names_the_agent_and_where_it_points() {
    let d = driver(&target(
        &[("plug", "7"), ("ip", "pdu-1"), ("community", "private")],
        Some(PASSWORD),
    ))
    .unwrap();
    assert_eq!(d.endpoint(), "fence_test ip=pdu-1 plug=7");
    assert_eq!(d.driver_name(), "exec");
}

#[test]
fn status_exit_codes_need_the_agents_words_for_off() {
    let r = Redactor::new(None);
    let read =
        |code, out: &str, err: &str| verdict::status("fence_x", &finished(code, out, err), &r);
    assert_eq!(read(0, "Status: ON\n", "").unwrap(), PowerState::On);
    assert_eq!(read(0, "", "").unwrap(), PowerState::On);
    assert_eq!(read(2, "Status: OFF\n", "").unwrap(), PowerState::Off);
    assert_eq!(read(2, "status: off\n", "").unwrap(), PowerState::Off);
    for (code, out) in [
        (2, ""),
        (2, "Status: ON\n"),
        (2, "Status: OFF\nStatus: ON\n"),
        (0, "Status: OFF\n"),
        (1, "Status: OFF\n"),
        (3, ""),
        (127, ""),
    ] {
        let e = read(code, out, "").unwrap_err();
        assert_ne!(e.kind, PowerErrorKind::Config, "{code} {out:?}");
    }
    let mut cut = finished(2, "Status: OFF\n", "");
    cut.stdout.incomplete = true;
    assert!(verdict::status("fence_x", &cut, &r).is_err());
    let killed = Finished {
        status: ExitStatus::from_raw(9),
        ..finished(0, "Status: OFF\n", "")
    };
    assert!(verdict::status("fence_x", &killed, &r).is_err());
    let mut no_input = finished(2, "Status: OFF\n", "");
    no_input.stdin_error = Some(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
    assert!(verdict::status("fence_x", &no_input, &r).is_err());
}

#[test]
fn errors_quote_the_agent_without_the_password() {
    let r = Redactor::new(Some(PASSWORD));
    let stderr = format!(
        "/usr/sbin/fence_ipmilan:5: DeprecationWarning: 'pipes' is deprecated\n  from pipes import quote\n\
         2026-11-22 20:50:58,766 ERROR: Failed: login with {PASSWORD} and pa%20ss%3Dw%27rd refused\n\n\
         2026-11-22 20:50:58,767 ERROR: Please use '-h' for usage\n"
    );
    let e = verdict::status("fence_x", &finished(1, "", &stderr), &r).unwrap_err();
    assert_eq!(
        e.message,
        "fence agent fence_x (action status) exited with 1: ERROR: Failed: login with <redacted> and <redacted> refused"
    );
    let e = verdict::command(
        "fence_x",
        "off",
        &finished(1, "", "Connection refused\n"),
        &r,
    )
    .unwrap_err();
    assert_eq!(e.kind, PowerErrorKind::Unreachable);
    assert!(
        verdict::command(
            "fence_x",
            "off",
            &finished(0, "Success: Powered OFF", ""),
            &r
        )
        .is_ok()
    );
    let e = verdict::command(
        "fence_x",
        "on",
        &finished(1, "", "HTTP 401 Unauthorized"),
        &r,
    )
    .unwrap_err();
    assert_eq!(e.kind, PowerErrorKind::Auth);
    let e = verdict::command("fence_x", "on", &finished(1, "", ""), &r).unwrap_err();
    assert!(e.message.ends_with("exited with 1: no output"), "{e}");
}

#[test]
fn a_password_cut_by_the_cap_does_not_leak_its_beginning() {
    let r = Redactor::new(Some("topsecret"));
    let cut = Captured {
        bytes: b"first line\nthe password is tops".to_vec(),
        incomplete: true,
    };
    assert_eq!(verdict::text(&cut, &r), "first line");
}

#[test]
fn long_excerpts_are_shortened() {
    let r = Redactor::new(None);
    let long = "x".repeat(2000);
    let e = verdict::command("fence_x", "off", &finished(1, &long, ""), &r).unwrap_err();
    assert!(e.message.len() < 400, "{}", e.message.len());
    assert!(e.message.ends_with('…'));
}

#[test]
fn a_python_crash_is_named_by_its_exception() {
    let r = Redactor::new(None);
    let stderr = "Traceback (most recent call last):\n  File \"/usr/sbin/fence_redfish\", line 100\n    for member in data[u'Members']:\nKeyError: 'Members'\n";
    let e = verdict::status("fence_redfish", &finished(1, "", stderr), &r).unwrap_err();
    assert!(
        e.message
            .ends_with("exited with 1: Python traceback ending in KeyError: 'Members'"),
        "{e}"
    );
}
