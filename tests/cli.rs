//! `nodefence validate`, `status` and `fence` end to end: the real binary, a real
//! config on disk, and the mock Redfish BMC over HTTP on loopback. Assertions are on
//! the BMC's state and on exit codes, not only on text.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::cli_common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use cli_common::{nodefence, text, unproven_fence, write_agent_config, write_secret};
use nodefence_mocks::redfish::{
    Fault, MockPower, MockRedfish, MockRedfishHandle, Profile, SystemSpec,
};

const PASSWORD: &str = "cli-Secret-42";

/// A chassis with three blades, one per node; worker-3 starts Off.
async fn chassis() -> MockRedfishHandle {
    MockRedfish::builder()
        .profile(Profile::MultiSystem)
        .system(SystemSpec::new("Blade1").power(MockPower::On))
        .system(SystemSpec::new("Blade2").power(MockPower::On))
        .system(SystemSpec::new("Blade3").power(MockPower::Off))
        .credentials("fence", PASSWORD)
        .transition_delay(Duration::from_millis(100))
        .start()
        .await
        .expect("mock starts")
}

/// Writes nodefence.toml, inventory.toml and the password file for `mock`.
fn write_config(dir: &Path, mock: &MockRedfishHandle) -> PathBuf {
    write_secret(&dir.join("bmc-password"), PASSWORD);
    let config = write_agent_config(dir, 2, "50ms", "5s");
    std::fs::write(
        dir.join("inventory.toml"),
        format!(
            "[defaults]\ndriver = \"redfish\"\nendpoint = \"{}\"\nusername = \"fence\"\npassword_file = \"bmc-password\"\n\
             connect_timeout = \"1s\"\nrequest_timeout = \"1s\"\noperation_timeout = \"4s\"\nretries = 1\n\n\
             [nodes.worker-1]\nsystem_id = \"Blade1\"\n[nodes.worker-2]\nsystem_id = \"Blade2\"\n[nodes.worker-3]\nsystem_id = \"Blade3\"\n",
            mock.base_url()
        ),
    )
    .unwrap();
    config
}

/// A chassis and a config that points at it.
async fn setup() -> (MockRedfishHandle, tempfile::TempDir, PathBuf) {
    let mock = chassis().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &mock);
    (mock, dir, config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reports_every_node_as_a_table_and_as_json() {
    let (mock, _dir, config) = setup().await;

    let out = nodefence(&config, &["status"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    let line = |node: &str| {
        table
            .lines()
            .find(|l| l.starts_with(node))
            .unwrap_or_default()
            .to_string()
    };
    assert!(table.starts_with("NODE"), "{table}");
    assert!(line("worker-1").contains(" On "), "{table}");
    assert!(line("worker-3").contains(" Off "), "{table}");
    assert!(line("worker-2").contains("Blade2"), "{table}");

    let out = nodefence(&config, &["status", "worker-3", "-o", "json"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.as_array().map(Vec::len), Some(1));
    assert_eq!(rows[0]["node"], "worker-3");
    assert_eq!(rows[0]["power"], "Off");
    assert_eq!(rows[0]["driver"], "redfish");
    assert!(rows[0]["error"].is_null());
    assert!(mock.reset_log().is_empty(), "status never sends a command");
    mock.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_fails_with_exit_1_and_no_secret_when_a_bmc_rejects_us() {
    let (mock, _dir, config) = setup().await;
    mock.inject(Fault::RejectCredentials);
    let out = nodefence(&config, &["status", "worker-1", "-o", "json"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows[0]["error"]["kind"], "auth");
    assert!(
        rows[0]["power"].is_null(),
        "no state is reported on failure"
    );
    assert!(
        !text(&out).contains(PASSWORD),
        "the password leaked: {}",
        text(&out)
    );
    mock.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_node_is_a_usage_error() {
    let (mock, _dir, config) = setup().await;
    let out = nodefence(&config, &["status", "worker-9"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("worker-9") && text(&out).contains("worker-1"),
        "{}",
        text(&out)
    );
    let out = nodefence(&config, &unproven_fence("worker-9", "off", &[])).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(mock.reset_log().is_empty());
    mock.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_off_powers_the_machine_off_and_confirms_it() {
    let (mock, _dir, config) = setup().await;
    let out = nodefence(&config, &unproven_fence("worker-2", "off", &[])).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("worker-2: confirmed Off"),
        "{}",
        text(&out)
    );
    assert_eq!(mock.power("Blade2"), Some(MockPower::Off));
    assert_eq!(
        mock.power("Blade1"),
        Some(MockPower::On),
        "only the named node's machine"
    );
    assert_eq!(
        mock.reset_log(),
        vec![("Blade2".to_string(), "ForceOff".to_string())]
    );

    let out = nodefence(&config, &unproven_fence("worker-2", "on", &["-o", "json"])).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["confirmed"], true);
    assert_eq!(report["final_power"], "On");
    assert_eq!(mock.power("Blade2"), Some(MockPower::On));
    mock.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_of_an_off_machine_sends_nothing() {
    let (mock, _dir, config) = setup().await;
    let out = nodefence(&config, &unproven_fence("worker-3", "off", &[])).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("already"), "{}", text(&out));
    assert!(mock.reset_log().is_empty());
    mock.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_without_yes_and_without_a_terminal_does_nothing() {
    let (mock, _dir, config) = setup().await;
    let out = nodefence(
        &config,
        &[
            "fence",
            "--skip-identity-check",
            "worker-1",
            "--action",
            "off",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    assert!(text(&out).contains("--yes"), "{}", text(&out));
    assert!(mock.reset_log().is_empty());
    assert_eq!(mock.power("Blade1"), Some(MockPower::On));
    mock.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_against_a_lying_bmc_is_not_confirmed() {
    let (mock, _dir, config) = setup().await;
    mock.inject(Fault::LieOnAfterOff);
    let out = nodefence(&config, &unproven_fence("worker-1", "off", &["-o", "json"])).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["confirmed"], false);
    assert_eq!(report["error_kind"], "not_confirmed");
    assert_eq!(report["final_power"], "On");
    mock.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_against_an_unreachable_bmc_fails_cleanly() {
    let (mock, _dir, config) = setup().await;
    mock.shutdown().await;
    let out = nodefence(&config, &unproven_fence("worker-1", "off", &["-o", "json"])).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["error_kind"], "unreachable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_accepts_the_walkthrough_config_and_rejects_a_broken_one() {
    let walkthrough = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/local/nodefence.toml");
    let out = nodefence(&walkthrough, &["validate"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("4 nodes"),
        "{}",
        text(&out)
    );

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("nodefence.toml"),
        "inventory = \"inventory.toml\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("inventory.toml"),
        "[nodes.worker-1]\ndriver = \"redfish\"\nendpoint = \"https://bmc1\"\nusername = \"u\"\npassword_file = \"missing\"\n\n\
         [nodes.Worker-2]\ndriver = \"redfish\"\nendpoint = \"ftp://bmc2\"\nusername = \"u\"\npassword_env = \"NOPE_NOT_SET_42\"\n",
    )
    .unwrap();
    let out = nodefence(&dir.path().join("nodefence.toml"), &["validate"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let report = text(&out);
    for expected in [
        "inventory.toml:5:",
        "missing",
        "Worker-2",
        "`endpoint` must start with https://",
        "NOPE_NOT_SET_42",
    ] {
        assert!(
            report.contains(expected),
            "expected {expected:?} in:\n{report}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_resume_write_the_switch_in_the_cluster() {
    nodefence::tls::install_crypto_provider();
    let kube = nodefence_mocks::kube::FakeKube::builder()
        .tls(true)
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    kube.write_kubeconfig(&kubeconfig).unwrap();
    let run = |args: Vec<&str>| {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_nodefence"));
        cmd.args(&args)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--namespace", "kube-system"])
            .env_remove("POD_NAMESPACE")
            .stdin(std::process::Stdio::null());
        async move { cmd.output().await.unwrap() }
    };
    let paused = |kube: &nodefence_mocks::kube::FakeKubeHandle| {
        kube.store()
            .get(
                nodefence_mocks::kube::resources::CONFIG_MAPS,
                Some("kube-system"),
                "nodefence-pause",
            )
            .ok()
            .and_then(|cm| {
                cm.pointer("/data/paused")
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_string)
            })
    };
    let out = run(vec!["pause", "--reason", "kernel upgrade"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("PAUSED"),
        "{}",
        text(&out)
    );
    assert_eq!(paused(&kube).as_deref(), Some("true"));
    let out = run(vec!["pause", "--show"]).await;
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("kernel upgrade"),
        "{}",
        text(&out)
    );
    let out = run(vec!["resume"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(paused(&kube).as_deref(), Some("false"));
    kube.shutdown().await;
}

/// The two inputs a new user found that passed `validate` and then failed later (a
/// panic in `fence`, an error only at `status`): both are refused by `validate`,
/// `status` and `fence` alike, with the file, line and field, and nothing panics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_that_once_passed_validate_are_refused_by_every_command() {
    let (mock, dir, config) = setup().await;
    let agent = std::fs::read_to_string(&config).unwrap();
    let agent = agent.replace(
        "confirm_timeout = \"5s\"",
        "confirm_timeout = \"200000000000000d\"",
    );
    assert!(agent.contains("200000000000000d"), "{agent}");
    std::fs::write(&config, agent).unwrap();
    for args in [
        &["validate"][..],
        &["status", "worker-1"],
        &[
            "fence",
            "--skip-identity-check",
            "worker-1",
            "--action",
            "off",
            "--yes",
        ],
    ] {
        let out = nodefence(&config, args).await;
        let report = text(&out);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {report}");
        assert!(report.contains("nodefence.toml:"), "{report}");
        assert!(report.contains("`confirm_timeout` is"), "{report}");
        assert!(!report.contains("panicked"), "{report}");
    }

    let config = write_config(dir.path(), &mock);
    let inventory = dir.path().join("inventory.toml");
    let mut text_in = std::fs::read_to_string(&inventory).unwrap();
    text_in.push_str(
        "[nodes.worker-4]\ndriver = \"exec\"\nagent = \"/bin/true\"\noptions = { ip = \"pdu-1\", plug = \"4\\nreboot\" }\n",
    );
    std::fs::write(&inventory, text_in).unwrap();
    for args in [&["validate"][..], &["status", "worker-1"]] {
        let out = nodefence(&config, args).await;
        let report = text(&out);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {report}");
        assert!(report.contains("inventory.toml:"), "{report}");
        assert!(report.contains("worker-4"), "{report}");
        assert!(report.contains("`plug` holds a line break"), "{report}");
    }
    assert!(mock.resets().is_empty(), "no power command was sent");
}
