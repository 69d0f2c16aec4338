//! Interoperability with the real ClusterLabs `fence_redfish` agent (Debian package
//! `fence-agents`): if the reference agent can discover, read and switch our mock
//! like a real BMC, the mock's payloads are faithful enough to test nodefence with.
//!
//! Options go to the agent on stdin as `key=value` lines (the way Pacemaker calls
//! it), so the password never appears on a command line. Without the agent these
//! tests print a "skipped" line, unless `NODEFENCE_REQUIRE_PEERS=1`, which makes
//! its absence a failure (CI).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nodefence_mocks::redfish::{
    AuthKind, Fault, MockPower, MockRedfish, MockRedfishHandle, Profile,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

/// The agent, or `None` after the test is reported skipped.
fn agent() -> Option<PathBuf> {
    nodefence_mocks::peers::fence_agent("fence_redfish")
}

/// What one agent run did.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs the agent with `options` on stdin (and extra environment).
async fn fence(agent: &Path, options: &[(&str, String)], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(agent);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for var in nodefence_mocks::PROXY_VARIABLES {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawning fence_redfish");
    let mut stdin = child.stdin.take().unwrap();
    let text: String = options.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    stdin.write_all(text.as_bytes()).await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(90), child.wait_with_output())
        .await
        .expect("fence_redfish finished in time")
        .expect("fence_redfish ran");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Options for an agent run against `bmc` without certificate verification.
fn insecure(bmc: &MockRedfishHandle, action: &str) -> Vec<(&'static str, String)> {
    vec![
        ("ip", "127.0.0.1".into()),
        ("ipport", bmc.addr().port().to_string()),
        ("username", bmc.username().into()),
        ("password", bmc.password().into()),
        ("ssl_insecure", "1".into()),
        ("action", action.into()),
    ]
}

async fn tls_bmc(profile: Profile) -> MockRedfishHandle {
    MockRedfish::builder()
        .profile(profile)
        .credentials("fencer", "pa ss=word")
        .tls(true)
        .start()
        .await
        .expect("mock starts")
}

#[tokio::test]
async fn status_reports_on_and_off_without_commands() {
    let Some(agent) = agent() else { return };
    let bmc = tls_bmc(Profile::OpenBmc).await;

    let on = fence(&agent, &insecure(&bmc, "status"), &[]).await;
    assert_eq!(on.code, Some(0), "status of an On machine exits 0: {on:?}");
    assert!(on.stdout.contains("Status: ON"), "{on:?}");

    bmc.set_power("system", MockPower::Off);
    let off = fence(&agent, &insecure(&bmc, "status"), &[]).await;
    assert_eq!(
        off.code,
        Some(2),
        "status of an Off machine exits 2: {off:?}"
    );
    assert!(off.stdout.contains("Status: OFF"), "{off:?}");

    assert!(bmc.reset_log().is_empty(), "status sends no Reset");
    let log = bmc.request_log();
    assert!(!log.is_empty());
    assert!(log.iter().all(|r| r.method == "GET"), "{log:?}");
    assert!(
        log.iter()
            .all(|r| r.auth == AuthKind::Basic && r.status == Some(200)),
        "fence_redfish authenticates with Basic on every request: {log:?}"
    );
}

#[tokio::test]
async fn off_and_on_change_the_real_state_through_transitions() {
    let Some(agent) = agent() else { return };
    let bmc = MockRedfish::builder()
        .profile(Profile::Idrac)
        .credentials("root", "calvin")
        .transition_delay(Duration::from_millis(1500))
        .tls(true)
        .start()
        .await
        .unwrap();
    let id = "System.Embedded.1";

    let off = fence(&agent, &insecure(&bmc, "off"), &[]).await;
    assert_eq!(off.code, Some(0), "{off:?}");
    assert!(off.stdout.contains("Success: Powered OFF"), "{off:?}");
    assert_eq!(bmc.power(id), Some(MockPower::Off));
    assert_eq!(
        bmc.reset_log(),
        vec![(id.to_owned(), "ForceOff".to_owned())]
    );
    let system_reads = bmc
        .request_log()
        .iter()
        .filter(|r| r.path == format!("/redfish/v1/Systems/{id}"))
        .count();
    // Status check, Actions lookup and the first poll make 3 reads even without a
    // delay; a 4th only happens if the agent waited through PoweringOff.
    assert!(
        system_reads >= 4,
        "the agent polled through PoweringOff ({system_reads} reads)"
    );

    let again = fence(&agent, &insecure(&bmc, "off"), &[]).await;
    assert_eq!(again.code, Some(0), "{again:?}");
    assert!(again.stdout.contains("Success: Already OFF"), "{again:?}");
    assert_eq!(
        bmc.reset_log().len(),
        1,
        "no second command for an Off machine"
    );

    let on = fence(&agent, &insecure(&bmc, "on"), &[]).await;
    assert_eq!(on.code, Some(0), "{on:?}");
    assert!(on.stdout.contains("Success: Powered ON"), "{on:?}");
    // fence_redfish counts anything but "Off" as on, so it declares success while the
    // machine still reports PoweringOn (for off it waits for an exact "Off").
    let state = bmc.power(id);
    assert!(
        matches!(state, Some(MockPower::PoweringOn | MockPower::On)),
        "{state:?}"
    );
    assert_eq!(
        bmc.reset_log().last(),
        Some(&(id.to_owned(), "On".to_owned()))
    );
}

#[tokio::test]
async fn every_profile_works_with_the_reference_agent() {
    let Some(agent) = agent() else { return };
    for profile in Profile::ALL {
        let bmc = tls_bmc(profile).await;
        // fence_redfish controls the last member of the Systems collection.
        let id = bmc.systems().last().unwrap().id.clone();
        let off = fence(&agent, &insecure(&bmc, "off"), &[]).await;
        assert_eq!(off.code, Some(0), "{profile}: {off:?}");
        assert_eq!(bmc.power(&id), Some(MockPower::Off), "{profile}");
        let status = fence(&agent, &insecure(&bmc, "status"), &[]).await;
        assert_eq!(status.code, Some(2), "{profile}: {status:?}");
        assert_eq!(
            bmc.reset_log(),
            vec![(id, "ForceOff".to_owned())],
            "{profile}"
        );
    }
}

#[tokio::test]
async fn a_lying_bmc_makes_the_agent_fail() {
    let Some(agent) = agent() else { return };
    let bmc = tls_bmc(Profile::OpenBmc).await;
    bmc.inject(Fault::LieOnAfterOff);
    let mut options = insecure(&bmc, "off");
    options.push(("power_timeout", "3".into()));
    let run = fence(&agent, &options, &[]).await;
    assert_ne!(
        run.code,
        Some(0),
        "the agent must not report success: {run:?}"
    );
    assert!(!run.stdout.contains("Success"), "{run:?}");
    assert_eq!(bmc.power("system"), Some(MockPower::On));
    assert!(bmc.reset_log().iter().all(|(_, t)| t == "ForceOff"));
    assert!(!bmc.reset_log().is_empty());
}

#[tokio::test]
async fn verified_tls_and_explicit_system_uri() {
    let Some(agent) = agent() else { return };
    let bmc = tls_bmc(Profile::MultiSystem).await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, bmc.ca_pem().unwrap()).unwrap();
    let ca_env = [("REQUESTS_CA_BUNDLE", ca.to_str().unwrap())];
    let verified = |action: &str, password: &str| {
        vec![
            ("ip", "localhost".to_owned()),
            ("ipport", bmc.addr().port().to_string()),
            ("username", bmc.username().to_owned()),
            ("password", password.to_owned()),
            ("ssl_secure", "1".to_owned()),
            ("systems_uri", "/redfish/v1/Systems/Blade2".to_owned()),
            ("action", action.to_owned()),
        ]
    };

    let off = fence(&agent, &verified("off", bmc.password()), &ca_env).await;
    assert_eq!(
        off.code,
        Some(0),
        "the generated chain verifies in Python/OpenSSL: {off:?}"
    );
    assert_eq!(bmc.power("Blade2"), Some(MockPower::Off));
    for other in ["Blade1", "Blade3", "Blade4"] {
        assert_eq!(bmc.power(other), Some(MockPower::On), "{other} untouched");
    }

    // Without the CA the agent refuses the certificate and sends nothing.
    bmc.clear_logs();
    let untrusted = fence(
        &agent,
        &verified("status", bmc.password()),
        &[("REQUESTS_CA_BUNDLE", "/dev/null")],
    )
    .await;
    assert_ne!(untrusted.code, Some(0), "{untrusted:?}");
    assert_ne!(untrusted.code, Some(2), "{untrusted:?}");
    assert!(
        bmc.request_log().is_empty(),
        "no request passed the TLS handshake"
    );

    // Wrong credentials: the agent fails and no command is sent.
    let denied = fence(&agent, &verified("on", "wrong"), &ca_env).await;
    assert_eq!(denied.code, Some(1), "{denied:?}");
    assert!(denied.stderr.contains("PowerState"), "{denied:?}");
    assert!(bmc.reset_log().is_empty());
    assert!(bmc.request_log().iter().all(|r| r.status == Some(401)));
}

#[tokio::test]
async fn agent_against_the_binary() {
    let Some(agent) = agent() else { return };
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    let log =
        nodefence_mocks::child_log::ChildLog::create(env!("CARGO_TARGET_TMPDIR"), "mock-redfish");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mock-redfish"))
        .args([
            "--tls",
            "--ca-out",
            ca.to_str().unwrap(),
            "--profile",
            "ilo",
            "--transition-delay",
            "500ms",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log.stdio())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .unwrap_or_else(|_| {
            panic!("mock-redfish printed no ready line within 20 s; its log: {log}")
        })
        .unwrap()
        .unwrap_or_else(|| panic!("mock-redfish exited before it was ready; its log: {log}"));
    let base = line
        .strip_prefix("mock-redfish listening on ")
        .unwrap_or_else(|| panic!("unexpected ready line {line:?}; its log: {log}"))
        .to_owned();
    let port = base.rsplit(':').next().unwrap().to_owned();

    let options = [
        ("ip", "localhost".to_owned()),
        ("ipport", port),
        ("username", "admin".to_owned()),
        ("password", "password".to_owned()),
        ("ssl_secure", "1".to_owned()),
        ("action", "off".to_owned()),
    ];
    let run = fence(
        &agent,
        &options,
        &[("REQUESTS_CA_BUNDLE", ca.to_str().unwrap())],
    )
    .await;
    assert_eq!(run.code, Some(0), "{run:?}; mock-redfish's log: {log}");

    nodefence_mocks::tls::install_crypto_provider();
    let pem = std::fs::read(&ca).unwrap();
    let c = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&pem).unwrap()])
        .build()
        .unwrap();
    let system: serde_json::Value = c
        .get(format!("{base}/admin/systems/1"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        system["power"], "Off",
        "the admin API sees what the agent did; mock-redfish's log: {log}"
    );
    let resets: serde_json::Value = c
        .get(format!("{base}/admin/resets"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        resets,
        serde_json::json!([{ "system": "1", "reset_type": "ForceOff" }])
    );
    child.start_kill().unwrap();
    let _ = child.wait().await;
}
