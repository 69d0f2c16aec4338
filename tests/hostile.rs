//! A BMC that answers with terminal control sequences in every string it sends
//! (`ESC[2J`, `\r\n` forging a log line "FAKE: worker-1 confirmed Off", a right-to-left
//! override, an 8-bit CSI) must not reach the operator's terminal, the logs or the
//! Events as anything but visible, inert text. The real binary: `status` (table and
//! JSON) and `fence` with their logs, and `nodefence run` against fake-kube, whose
//! Events and logs are read back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::cli_common::{nodefence, unproven_fence, write_agent_config, write_secret};
use common::world::*;
use nodefence::untrusted::is_unsafe;
use nodefence_mocks::redfish::{Fault, MockPower, MockRedfish, SystemSpec};
use serde_json::Value;

const PASSWORD: &str = "hostile-Pw-1";
/// What the hostile text looks like once escaped: visible, inert.
const ESCAPED: &str = "\\u{1b}[2J";

/// Every line of `text` is free of control, bidirectional and separator characters
/// (line breaks only end lines), and none is a forged one.
fn assert_inert(what: &str, text: &str) {
    for line in text.lines() {
        assert!(
            !line.chars().any(is_unsafe),
            "{what}: a raw control character in {line:?}"
        );
        assert!(
            !line.trim_start().starts_with("FAKE:"),
            "{what}: a forged line {line:?}"
        );
    }
}

fn write_config(dir: &Path, endpoint: &str) -> std::path::PathBuf {
    write_secret(&dir.join("bmc-password"), PASSWORD);
    let config = write_agent_config(dir, 2, "50ms", "2s");
    std::fs::write(
        dir.join("inventory.toml"),
        format!(
            "[nodes.worker-1]\ndriver = \"redfish\"\nendpoint = \"{endpoint}\"\nusername = \"fence\"\n\
             password_file = \"bmc-password\"\nrequest_timeout = \"1s\"\noperation_timeout = \"3s\"\nretries = 1\n"
        ),
    )
    .unwrap();
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_fence_show_hostile_strings_inert_in_tables_json_and_logs() {
    let m = MockRedfish::builder()
        .system(SystemSpec::new("1").power(MockPower::On))
        .credentials("fence", PASSWORD)
        .start()
        .await
        .unwrap();
    m.inject(Fault::HostileStrings);
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &m.base_url());

    // Hostile values in a 200 answer: the PowerState (vendor value) and the UUID.
    let table = nodefence(&config, &["status", "--log-level", "debug"]).await;
    let stdout = String::from_utf8_lossy(&table.stdout).to_string();
    let stderr = String::from_utf8_lossy(&table.stderr).to_string();
    assert!(
        stdout.contains(ESCAPED),
        "the BMC's text is shown, escaped:\n{stdout}"
    );
    assert_inert("status table", &stdout);
    assert_inert("status logs", &stderr);

    let json = nodefence(&config, &["status", "-o", "json"]).await;
    let raw = String::from_utf8_lossy(&json.stdout).to_string();
    assert!(!raw.chars().any(|c| is_unsafe(c) && c != '\n'), "{raw:?}");
    let rows: Value = serde_json::from_str(&raw).unwrap();
    let power = rows[0]["power"].as_str().unwrap();
    assert!(
        power.contains(ESCAPED) && !power.chars().any(is_unsafe),
        "{power:?}"
    );

    // Hostile error bodies (every request fails with one): the ERROR column, the
    // command's own message and the logs.
    m.inject(Fault::Fail500 { count: 10_000 });
    let failed = nodefence(&config, &["status", "--log-level", "debug"]).await;
    assert_eq!(failed.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&failed.stdout).to_string();
    assert!(stdout.contains(ESCAPED), "{stdout}");
    assert_inert("status table (errors)", &stdout);
    assert_inert(
        "status logs (errors)",
        &String::from_utf8_lossy(&failed.stderr),
    );
    let fence = nodefence(
        &config,
        &unproven_fence("worker-1", "off", &["--log-level", "debug"]),
    )
    .await;
    assert_eq!(fence.status.code(), Some(1));
    assert_inert("fence output", &String::from_utf8_lossy(&fence.stdout));
    assert_inert("fence logs", &String::from_utf8_lossy(&fence.stderr));
    assert_eq!(m.power("1"), Some(MockPower::On));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemons_events_and_logs_show_hostile_strings_inert() {
    let w = WorldBuilder::new()
        .no_workloads()
        .replicas(&[])
        .start()
        .await;
    w.bmc.inject(Fault::HostileStrings);
    w.bmc.inject(Fault::Fail500 { count: 1_000_000 });
    let kubeconfig = w._dir.path().join("kubeconfig");
    w.kube.write_kubeconfig(&kubeconfig).unwrap();
    let mut daemon = tokio::process::Command::new(env!("CARGO_BIN_EXE_nodefence"))
        .arg("--config")
        .arg(w._dir.path().join("nodefence.toml"))
        .args(["--log-level", "debug", "run"])
        .args([
            "--health-listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "--namespace",
            LEADER_LEASE_NAMESPACE,
            "--identity",
            "hostile-test",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // The BMC monitor's first pass reads every BMC at start: each fails with the
    // hostile error body, and says so on the Node.
    let failed = w
        .expect_event_where("BmcCheckFailed", |e| {
            e["note"].as_str().unwrap_or_default().contains(ESCAPED)
        })
        .await;
    assert!(!failed.is_empty());
    let _ = daemon.start_kill();
    let out = daemon.wait_with_output().await.unwrap();
    for event in w.events() {
        for field in ["note", "reason", "action"] {
            let text = event[field].as_str().unwrap_or_default();
            assert!(
                !text.chars().any(is_unsafe),
                "Event {field} with a raw control character: {text:?}"
            );
        }
    }
    let logs = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        logs.contains(ESCAPED),
        "the logs show the BMC's text, escaped"
    );
    assert_inert("daemon logs", &logs);
    assert_inert("daemon stdout", &String::from_utf8_lossy(&out.stdout));
    tokio::time::sleep(Duration::ZERO).await;
    w.stop().await;
}
