//! The `mock-redfish` binary as CI scripts use it: flags, the ready line on stdout,
//! the CA file, fixtures, the admin API, and a clean stop on SIGTERM/SIGINT.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nodefence_mocks::child_log::ChildLog;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_mock-redfish");

/// A running `mock-redfish`, the URL it printed, and its log (its stderr).
struct Running {
    child: Child,
    base_url: String,
    log: ChildLog,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// Starts the binary and waits (bounded) for its ready line.
async fn spawn(args: &[&str]) -> Running {
    let mut command = Command::new(BIN);
    command.args(args);
    let started = crate::mock_binary::start(command, "mock-redfish").await;
    Running {
        child: started.child,
        base_url: started.url,
        log: started.log,
    }
}

/// How a stopped `mock-redfish` exited, and its log.
struct Stopped {
    code: Option<i32>,
    log: std::path::PathBuf,
}

/// Sends `signal` to the child (by its pid) and returns its exit code.
async fn stop(mut running: Running, signal: &str) -> Stopped {
    let pid = running.child.id().expect("still running").to_string();
    let status = std::process::Command::new("kill")
        .args([signal, &pid])
        .status()
        .expect("running kill");
    assert!(status.success());
    let exit = tokio::time::timeout(Duration::from_secs(10), running.child.wait())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "mock-redfish did not stop within 10 s; its log: {}",
                running.log
            )
        })
        .expect("waiting for mock-redfish");
    let log = running.log.path().to_path_buf();
    Stopped {
        code: exit.code(),
        log,
    }
}

fn client(ca_file: Option<&Path>) -> reqwest::Client {
    nodefence_mocks::tls::install_crypto_provider();
    let mut b = reqwest::Client::builder().timeout(Duration::from_secs(10));
    if let Some(path) = ca_file {
        let pem = std::fs::read(path).expect("CA file written by --ca-out");
        b = b.tls_certs_only([reqwest::Certificate::from_pem(&pem).unwrap()]);
    }
    b.build().unwrap()
}

async fn get_json(c: &reqwest::Client, url: &str, auth: Option<(&str, &str)>) -> (u16, Value) {
    let mut req = c.get(url);
    if let Some((u, p)) = auth {
        req = req.basic_auth(u, Some(p));
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn tls_idrac_with_password_file_and_delay() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    let pw = dir.path().join("password");
    std::fs::write(&pw, "calvin\n").unwrap();
    let running = spawn(&[
        "--tls",
        "--ca-out",
        ca.to_str().unwrap(),
        "--profile",
        "idrac",
        "--systems",
        "2",
        "--username",
        "root",
        "--password-file",
        pw.to_str().unwrap(),
        "--transition-delay",
        "2s",
        "--initial-power",
        "off",
    ])
    .await;
    let base = running.base_url.clone();
    assert!(base.starts_with("https://localhost:"), "{base}");
    let c = client(Some(&ca));

    let (status, systems) = get_json(
        &c,
        &format!("{base}/redfish/v1/Systems"),
        Some(("root", "calvin")),
    )
    .await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = systems["Members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["@odata.id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "/redfish/v1/Systems/System.Embedded.1",
            "/redfish/v1/Systems/System.Embedded.2"
        ]
    );
    let (status, _) = get_json(
        &c,
        &format!("{base}/redfish/v1/Systems"),
        Some(("root", "calvin\n")),
    )
    .await;
    assert_eq!(
        status, 401,
        "the trailing newline of the file is not part of the password"
    );

    let (_, system) = get_json(
        &c,
        &format!("{base}/redfish/v1/Systems/System.Embedded.2"),
        Some(("root", "calvin")),
    )
    .await;
    assert_eq!(system["PowerState"], "Off");
    let on = c
        .post(format!(
            "{base}/redfish/v1/Systems/System.Embedded.2/Actions/ComputerSystem.Reset"
        ))
        .basic_auth("root", Some("calvin"))
        .json(&json!({ "ResetType": "On" }))
        .send()
        .await
        .unwrap();
    assert_eq!(on.status(), 200, "iDRAC answers 200 with a body");
    let (_, now) = get_json(&c, &format!("{base}/admin/systems/System.Embedded.2"), None).await;
    assert_eq!(now["power"], "PoweringOn", "the delay is in force");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (_, now) = get_json(&c, &format!("{base}/admin/systems/System.Embedded.2"), None).await;
        if now["power"] == "On" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never reached On: {now}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, resets) = get_json(&c, &format!("{base}/admin/resets"), None).await;
    assert_eq!(
        resets,
        json!([{ "system": "System.Embedded.2", "reset_type": "On" }])
    );

    let port = base.rsplit(':').next().unwrap().to_owned();
    let stopped = stop(running, "-TERM").await;
    assert_eq!(
        stopped.code,
        Some(0),
        "SIGTERM is a clean stop; its log: {}",
        stopped.log.display()
    );
    let gone = tokio::net::TcpStream::connect(format!("127.0.0.1:{port}")).await;
    assert!(gone.is_err(), "the port is closed after stop");
}

#[tokio::test]
async fn fixture_file_defines_the_systems() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = dir.path().join("rack.toml");
    std::fs::write(
        &fixture,
        r#"
[[systems]]
id = "node-1"
uuid = "11111111-2222-3333-4444-555555555555"
reset_types = ["On", "GracefulShutdown"]

[[systems]]
id = "node-2"
power = "Off"
"#,
    )
    .unwrap();
    let running = spawn(&[
        "--profile",
        "multi-system",
        "--fixture",
        fixture.to_str().unwrap(),
        "--password",
        "pw",
    ])
    .await;
    let base = running.base_url.clone();
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");
    let c = client(None);
    let (_, systems) = get_json(&c, &format!("{base}/admin/systems"), None).await;
    assert_eq!(
        systems,
        json!([
            {
                "id": "node-1", "name": "node-1", "uuid": "11111111-2222-3333-4444-555555555555",
                "power": "On", "reset_types": ["On", "GracefulShutdown"]
            },
            {
                "id": "node-2", "name": "node-2", "uuid": systems[1]["uuid"],
                "power": "Off", "reset_types": systems[1]["reset_types"]
            }
        ])
    );
    let refused = c
        .post(format!(
            "{base}/redfish/v1/Systems/node-1/Actions/ComputerSystem.Reset"
        ))
        .basic_auth("admin", Some("pw"))
        .json(&json!({ "ResetType": "ForceOff" }))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400, "ForceOff is not in node-1's list");
    let stopped = stop(running, "-INT").await;
    assert_eq!(
        stopped.code,
        Some(0),
        "SIGINT is a clean stop; its log: {}",
        stopped.log.display()
    );
}

#[tokio::test]
async fn repeated_system_flags_and_fault_injection() {
    let running = spawn(&[
        "--system",
        "alpha",
        "--system",
        "beta",
        "--listen",
        "127.0.0.1:0",
    ])
    .await;
    let base = running.base_url.clone();
    let c = client(None);
    let (_, systems) = get_json(
        &c,
        &format!("{base}/redfish/v1/Systems"),
        Some(("admin", "password")),
    )
    .await;
    assert_eq!(systems["Members@odata.count"], 2);
    let injected = c
        .post(format!("{base}/admin/faults"))
        .json(&json!({ "fail500": { "count": 1 } }))
        .send()
        .await
        .unwrap();
    assert_eq!(injected.status(), 200);
    let (status, _) = get_json(&c, &format!("{base}/redfish/v1"), None).await;
    assert_eq!(status, 500);
    let (status, _) = get_json(&c, &format!("{base}/redfish/v1"), None).await;
    assert_eq!(status, 200);
    let stopped = stop(running, "-TERM").await;
    assert_eq!(stopped.code, Some(0), "its log: {}", stopped.log.display());
}

async fn fails_with(args: &[&str], needle: &str) {
    let out = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(!out.status.success(), "{args:?} must fail");
    assert!(
        out.stdout.is_empty(),
        "no ready line: {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(needle), "{args:?}: {stderr}");
}

#[tokio::test]
async fn bad_flags_fail_without_a_ready_line() {
    fails_with(&["--systems", "0"], "--systems must be at least 1").await;
    fails_with(&["--profile", "supermicro"], "unknown profile").await;
    fails_with(&["--ca-out", "/tmp/x.pem"], "--tls").await;
    fails_with(&["--initial-power", "standby"], "unknown power state").await;
    fails_with(&["--transition-delay", "soon"], "transition-delay").await;
    fails_with(&["--fixture", "/nonexistent/rack.toml"], "reading fixture").await;
    fails_with(
        &["--password-file", "/nonexistent/pw"],
        "reading password file",
    )
    .await;
    fails_with(&["--system", "a/b"], "invalid system id").await;
}
