//! The BMC identity cross-check end to end: the Redfish driver's `machine_identity()`
//! against the mock BMC over HTTP (present, absent, byte-swapped; cached after a
//! reading), `identity::check` on what it returns, and `nodefence status --cluster`
//! (the real binary, the mock BMC and fake-kube) showing and failing on a mismatch.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::cli_common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cli_common::{nodefence, text, write_secret};
use nodefence::config::{
    Credential, NodeTarget, PowerSource, RedfishAuth, RedfishTarget, SecretSource, Timeouts,
    TlsSettings,
};
use nodefence::identity::{Equivalence, IdentityCheck, MachineIdentity, NodeIdentity, check};
use nodefence::power::PowerDriver;
use nodefence::power::registry::DriverFactory;
use nodefence_mocks::kube::FakeKube;
use nodefence_mocks::kube::resources::NODES;
use nodefence_mocks::redfish::{MockPower, MockRedfish, MockRedfishHandle, Profile, SystemSpec};
use serde_json::{Value, json};

const PASSWORD: &str = "identity-Pw-7";
const U1: &str = "4C4C4544-0031-3510-8052-B2C04F503131";
/// U1 with its first three fields byte-swapped (SMBIOS little-endian fields).
const U1_SWAPPED: &str = "44454c4c-3100-1035-8052-b2c04f503131";
const U2: &str = "4c4c4544-0032-3510-8052-b2c04f503132";
const OTHER: &str = "4c4c4544-0099-3510-8052-b2c04f503199";

/// One BMC serving Blade1 (U1), Blade2 (U1 byte-swapped), Blade3 (empty UUID) and
/// Blade4 (U2).
async fn chassis() -> MockRedfishHandle {
    MockRedfish::builder()
        .profile(Profile::MultiSystem)
        .system(SystemSpec::new("Blade1").uuid(U1))
        .system(SystemSpec::new("Blade2").uuid(U1_SWAPPED))
        .system(SystemSpec::new("Blade3").uuid(""))
        .system(SystemSpec::new("Blade4").uuid(U2))
        .credentials("fence", PASSWORD)
        .start()
        .await
        .expect("mock starts")
}

fn driver(mock: &MockRedfishHandle, system: &str) -> Arc<dyn PowerDriver> {
    nodefence::tls::install_crypto_provider();
    DriverFactory::new(4)
        .driver(&NodeTarget {
            fallback: Vec::new(),
            origin: Default::default(),
            metal3_host: None,
            name: "worker-1".into(),
            group: None,
            power: PowerSource::Redfish(RedfishTarget {
                endpoint: mock.base_url().parse().unwrap(),
                system_id: Some(system.into()),
                credential: Credential {
                    username: "fence".into(),
                    password: PASSWORD.to_string().into(),
                    source: SecretSource::Inline,
                },
                auth: RedfishAuth::Auto,
                tls: TlsSettings::default(),
                timeouts: Timeouts {
                    operation: Duration::from_secs(4),
                    retries: 0,
                    ..Timeouts::default()
                },
            }),
            policy: Default::default(),
        })
        .unwrap()
}

fn node(uuid: &str) -> NodeIdentity {
    NodeIdentity {
        system_uuid: Some(uuid.into()),
        provider_id: None,
    }
}

/// GETs of a ComputerSystem the mock answered.
fn system_gets(mock: &MockRedfishHandle) -> usize {
    mock.request_log()
        .iter()
        .filter(|r| r.method == "GET" && r.path.starts_with("/redfish/v1/Systems/Blade"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redfish_reports_the_computer_system_uuid_as_served() {
    let mock = chassis().await;
    let d = driver(&mock, "Blade1");
    // First call without any reading: discovery and one GET.
    let got = d.machine_identity().await.unwrap();
    assert_eq!(got, MachineIdentity::Uuid(U1.into()));
    assert!(system_gets(&mock) >= 1);
    assert_eq!(
        check(&node(&U1.to_lowercase()), &got),
        IdentityCheck::Match(Equivalence::Exact)
    );
    assert_eq!(
        check(&node(OTHER), &got),
        IdentityCheck::Mismatch {
            node: OTHER.into(),
            machine: U1.into()
        }
    );
    d.close().await;
    mock.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_byte_swapped_uuid_is_the_same_machine() {
    let mock = chassis().await;
    let got = driver(&mock, "Blade2").machine_identity().await.unwrap();
    assert_eq!(got, MachineIdentity::Uuid(U1_SWAPPED.into()));
    assert_eq!(
        check(&node(U1), &got),
        IdentityCheck::Match(Equivalence::FieldsSwapped)
    );
    // ...but not another machine's UUID swapped.
    assert!(check(&node(U2), &got).is_mismatch());
    mock.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absent_uuid_is_unavailable_and_proves_nothing() {
    let mock = chassis().await;
    let got = driver(&mock, "Blade3").machine_identity().await.unwrap();
    assert_eq!(
        got,
        MachineIdentity::Unavailable("the BMC's ComputerSystem has no UUID".into())
    );
    let result = check(&node(U1), &got);
    assert_eq!(
        result,
        IdentityCheck::Unknown("the BMC's ComputerSystem has no UUID".into())
    );
    assert_eq!(result.label(), "unknown");
    assert!(!result.is_match());
    mock.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_identity_comes_from_the_last_reading_without_another_request() {
    let mock = chassis().await;
    let d = driver(&mock, "Blade4");
    d.status().await.unwrap();
    let after_reading = mock.request_log().len();
    for _ in 0..3 {
        assert_eq!(
            d.machine_identity().await.unwrap(),
            MachineIdentity::Uuid(U2.into())
        );
    }
    assert_eq!(
        mock.request_log().len(),
        after_reading,
        "machine_identity() after a reading sends nothing"
    );
    mock.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_bmc_is_an_error_not_an_identity() {
    let mock = chassis().await;
    let d = driver(&mock, "Blade1");
    mock.inject(nodefence_mocks::redfish::Fault::RejectCredentials);
    let err = d.machine_identity().await.expect_err("the BMC refuses us");
    assert_eq!(err.kind, nodefence::power::PowerErrorKind::Auth);
    assert!(!err.to_string().contains(PASSWORD), "{err}");
    mock.shutdown().await;
}

// ---------------------------------------------------------------- nodefence status

fn write_config(dir: &Path, mock: &MockRedfishHandle) -> PathBuf {
    write_secret(&dir.join("bmc-password"), PASSWORD);
    std::fs::write(
        dir.join("nodefence.toml"),
        "inventory = \"inventory.toml\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("inventory.toml"),
        format!(
            "[defaults]\ndriver = \"redfish\"\nendpoint = \"{}\"\nusername = \"fence\"\n\
             password_file = \"bmc-password\"\noperation_timeout = \"4s\"\nretries = 0\n\n\
             [nodes.worker-1]\nsystem_id = \"Blade1\"\n[nodes.worker-2]\nsystem_id = \"Blade2\"\n\
             [nodes.worker-3]\nsystem_id = \"Blade3\"\n[nodes.worker-4]\nsystem_id = \"Blade4\"\n",
            mock.base_url()
        ),
    )
    .unwrap();
    dir.join("nodefence.toml")
}

fn node_object(name: &str, uuid: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name},
        "status": {"nodeInfo": {
            "systemUUID": uuid, "machineID": "", "bootID": "", "kernelVersion": "",
            "osImage": "", "containerRuntimeVersion": "", "kubeletVersion": "v1.33.0",
            "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"
        }}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_with_cluster_access_shows_identity_and_fails_on_a_mismatch() {
    let mock = chassis().await;
    let kube = FakeKube::builder().start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &mock);
    let kubeconfig = dir.path().join("kubeconfig");
    kube.write_kubeconfig(&kubeconfig).unwrap();
    let kubeconfig = kubeconfig.to_string_lossy().to_string();
    // worker-4's Node is another machine than the one its inventory entry points at.
    for (name, uuid) in [
        ("worker-1", U1),
        ("worker-2", U1),
        ("worker-3", U1),
        ("worker-4", OTHER),
    ] {
        kube.store()
            .create(NODES, None, node_object(name, uuid))
            .unwrap();
    }

    // Without cluster access: the machine identity, no IDENTITY column, exit 0.
    let out = nodefence(&config, &["status"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(table.lines().next().unwrap().contains("MACHINE"), "{table}");
    assert!(!table.contains("IDENTITY"), "{table}");
    assert!(table.contains(U1), "{table}");

    // With it: JSON carries each result, a mismatch is exit 1.
    let out = nodefence(
        &config,
        &[
            "status",
            "--cluster",
            "--kubeconfig",
            &kubeconfig,
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    let result = |node: &str| -> (String, String) {
        let row = rows
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["node"] == node)
            .unwrap();
        (
            row["identity"]["result"]
                .as_str()
                .unwrap_or("?")
                .to_string(),
            row["identity"]["message"]
                .as_str()
                .unwrap_or("")
                .to_string(),
        )
    };
    assert_eq!(result("worker-1").0, "match");
    assert_eq!(result("worker-2").0, "match", "byte-swapped UUID");
    assert_eq!(result("worker-3").0, "unknown");
    let (r4, message) = result("worker-4");
    assert_eq!(r4, "mismatch");
    assert!(message.contains(OTHER) && message.contains(U2), "{message}");
    assert_eq!(rows[0]["machine"]["kind"], "uuid");
    assert_eq!(rows[0]["machine"]["value"], U1);
    assert_eq!(rows[2]["machine"]["kind"], "unavailable");

    // The table: an IDENTITY column and the explanation under it.
    let out = nodefence(&config, &["status", "--kubeconfig", &kubeconfig]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    let line = |node: &str| {
        table
            .lines()
            .find(|l| l.starts_with(node) && l.contains("redfish"))
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        table.lines().next().unwrap().contains("IDENTITY"),
        "{table}"
    );
    assert!(line("worker-1").contains(" match"), "{table}");
    assert!(line("worker-4").contains(" mismatch"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("worker-4: identity mismatch") && l.contains(OTHER)),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("worker-3: identity not verified")),
        "{table}"
    );
    assert!(!text(&out).contains(PASSWORD));

    // Only the matching nodes: exit 0.
    let out = nodefence(
        &config,
        &[
            "status",
            "worker-1",
            "worker-2",
            "--cluster",
            "--kubeconfig",
            &kubeconfig,
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(mock.reset_log().is_empty(), "status never sends a command");
    kube.shutdown().await;
    mock.shutdown().await;
}

// ---------------------------------------------------------------- nodefence fence

/// The JSON report `fence -o json` printed.
fn report(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("fence prints JSON ({e}): {}", text(out)))
}

/// `nodefence fence` checks the machine it would power against the Node first, on the
/// same reading, as the daemon does: worker-4's entry reaches Blade4 (U2) while Node
/// worker-4 reports OTHER, so nothing is sent to Blade4, whatever the action or flag;
/// an identity that cannot be proven (no cluster access, no Node, a BMC with no UUID)
/// is refused unless `--skip-identity-check`; a proven machine is powered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_by_hand_powers_only_a_machine_proven_to_be_the_nodes_own() {
    let mock = chassis().await;
    let kube = FakeKube::builder().start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &mock);
    let kubeconfig_path = dir.path().join("kubeconfig");
    kube.write_kubeconfig(&kubeconfig_path).unwrap();
    let kubeconfig = kubeconfig_path.to_string_lossy().to_string();
    // worker-2 has no Node (never joined, or deleted).
    for (name, uuid) in [("worker-1", U1), ("worker-3", U1), ("worker-4", OTHER)] {
        kube.store()
            .create(NODES, None, node_object(name, uuid))
            .unwrap();
    }
    let fence = |node: &'static str, action: &'static str, more: &'static [&'static str]| {
        let mut args = vec!["fence", node, "--action", action, "--yes", "-o", "json"];
        args.extend_from_slice(more);
        args
    };
    let with_cluster = ["--kubeconfig", kubeconfig.as_str()];

    // The mis-mapped entry: refused for every action, with or without the flag.
    cli_common::assert_fence_refuses_a_mismatch(&config, "worker-4", &kubeconfig, U2, OTHER, &[])
        .await;
    assert!(mock.reset_log().is_empty(), "nothing reached Blade4");
    assert_eq!(mock.power("Blade4"), Some(MockPower::On));

    // Unproven: a BMC without a UUID, a node without a Node, no cluster access.
    let mut no_uuid = fence("worker-3", "off", &[]);
    no_uuid.extend_from_slice(&with_cluster);
    let mut no_node = fence("worker-2", "off", &[]);
    no_node.extend_from_slice(&with_cluster);
    let no_access = fence("worker-1", "off", &[]);
    for (args, says) in [
        (&no_uuid, "has no UUID"),
        (&no_node, "Node worker-2 does not exist in the cluster"),
        (&no_access, "no cluster access"),
    ] {
        let out = nodefence(&config, args).await;
        assert_eq!(out.status.code(), Some(5), "{args:?}: {}", text(&out));
        let r = report(&out);
        assert_eq!(r["identity"]["result"], "unknown", "{r}");
        assert!(
            r["identity"]["message"].as_str().unwrap().contains(says),
            "{r}"
        );
        assert!(
            text(&out).contains("--skip-identity-check"),
            "{}",
            text(&out)
        );
    }
    let out = nodefence(&config, &no_access).await;
    assert!(text(&out).contains("--kubeconfig"), "{}", text(&out));
    assert!(mock.reset_log().is_empty(), "nothing sent while unproven");
    assert!(!text(&out).contains(PASSWORD));

    // Skipped by name: the unproven machine is powered, and the report says so.
    let out = nodefence(
        &config,
        &fence("worker-3", "off", &["--skip-identity-check"]),
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let r = report(&out);
    assert_eq!(r["confirmed"], true, "{r}");
    assert_eq!(r["identity_check_skipped"], true, "{r}");
    assert_eq!(r["identity"]["result"], "unknown", "{r}");
    assert_eq!(
        mock.reset_log(),
        vec![("Blade3".to_string(), "ForceOff".to_string())]
    );

    // Proven, with cluster access found as kubectl finds it ($KUBECONFIG).
    let out = cli_common::nodefence_env(
        &config,
        &fence("worker-1", "off", &[]),
        &[("KUBECONFIG", kubeconfig.as_str())],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let r = report(&out);
    assert_eq!(r["confirmed"], true, "{r}");
    assert_eq!(r["refused"], false, "{r}");
    assert_eq!(r["identity"]["result"], "match", "{r}");
    assert_eq!(r["identity"]["equivalence"], "exact", "{r}");
    assert_eq!(r["identity_check_skipped"], false, "{r}");
    assert_eq!(mock.power("Blade1"), Some(MockPower::Off));
    assert_eq!(mock.power("Blade4"), Some(MockPower::On), "never touched");
    assert_eq!(mock.reset_log().len(), 2);

    // The human output names the verdict too.
    let out = nodefence(
        &config,
        &[
            "fence",
            "worker-1",
            "--action",
            "on",
            "--yes",
            "--kubeconfig",
            &kubeconfig,
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("identity confirmed: the power source reports the node's systemUUID"),
        "{}",
        text(&out)
    );
    kube.shutdown().await;
    mock.shutdown().await;
}

/// The confirmation prompt (on a terminal: `script` gives `nodefence` one) shows the
/// identity verdict before the operator types the node name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_confirmation_prompt_shows_the_identity_verdict() {
    use tokio::io::AsyncWriteExt;

    let mock = chassis().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &mock);
    let (kube, kubeconfig) =
        cli_common::cluster_with_nodes(dir.path(), &[("worker-1", U1, None)]).await;
    let command = format!(
        "{} --config {} fence worker-1 --action off --kubeconfig {kubeconfig}",
        env!("CARGO_BIN_EXE_nodefence"),
        config.display()
    );
    let mut child = tokio::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("KUBECONFIG", cli_common::NO_KUBECONFIG)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("script (util-linux) runs");
    // Kept open until the command ends: `script` stops at the end of its input.
    let mut answer = child.stdin.take().unwrap();
    answer.write_all(b"worker-1\n").await.unwrap();
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("finishes")
        .unwrap();
    drop(answer);
    let shown = text(&out);
    let prompt = shown
        .find("Power off node worker-1")
        .unwrap_or_else(|| panic!("a prompt: {shown}"));
    let typed = shown.find("Type the node name").unwrap();
    let verdict = shown
        .find("identity confirmed: the power source reports the node's systemUUID")
        .unwrap_or_else(|| panic!("the verdict: {shown}"));
    assert!(prompt < verdict && verdict < typed, "{shown}");
    assert!(shown.contains("worker-1: confirmed Off"), "{shown}");
    assert_eq!(mock.power("Blade1"), Some(MockPower::Off));
    kube.shutdown().await;
    mock.shutdown().await;
}
