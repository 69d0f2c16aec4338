//! Fencing topology end to end: a node whose primary method is the mock Redfish BMC
//! and whose `fallback` is the real `fence_ipmilan` agent (Debian `fence-agents`,
//! through `driver = "exec"`) against the mock IPMI BMC. The inventory is loaded
//! from files and the driver built by the registry, as nodefence does. The rule
//! under test: a hung primary does not stop fencing (the fallback powers the machine
//! off and Off is confirmed), and a healthy primary does the job alone.
//!
//! Without `fence_ipmilan` the tests print a "skipped" line, unless
//! `NODEFENCE_REQUIRE_PEERS=1` (CI), which makes its absence a failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::cli_common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use cli_common::{fence_agent as agent, nodefence, text, write_agent_config, write_secret};
use nodefence::power::PowerAction;
use nodefence::power::PowerState;
use nodefence::power::confirm::execute;
use nodefence::power::registry::DriverFactory;
use nodefence_mocks::ipmi::{ChassisControl, MockIpmi, MockIpmiHandle, Power};
use nodefence_mocks::redfish::{Fault, MockPower, MockRedfish, MockRedfishHandle, SystemSpec};

const USER: &str = "fencer";
const PASSWORD: &str = "rf-pw-5b1c";
const IPMI_USER: &str = "admin";
const IPMI_PASSWORD: &str = "password";
/// The SMBIOS UUID of db-1's machine, as its BMC (level 1) reports it.
const DB1_UUID: &str = "4c4c4544-0044-3110-8042-b4c04f444231";

/// Both peers, and a config directory whose inventory has node `db-1`: Redfish
/// first (short timeouts, so a hung BMC is given up quickly), then fence_ipmilan.
struct Setup {
    dir: tempfile::TempDir,
    config: PathBuf,
    bmc: MockRedfishHandle,
    ipmi: MockIpmiHandle,
}

async fn setup(agent: &Path) -> Setup {
    nodefence::tls::install_crypto_provider();
    let bmc = MockRedfish::builder()
        .system(
            SystemSpec::new("system")
                .uuid(DB1_UUID)
                .power(MockPower::On),
        )
        .credentials(USER, PASSWORD)
        .transition_delay(Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    let ipmi = MockIpmi::builder().start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = write_agent_config(dir.path(), 2, "100ms", "30s");
    write_secret(&dir.path().join("bmc-password"), PASSWORD);
    write_secret(&dir.path().join("ipmi-password"), IPMI_PASSWORD);
    let inventory = format!(
        "[nodes.db-1]\n\
         driver = \"redfish\"\n\
         endpoint = \"http://127.0.0.1:{rf}\"\n\
         username = \"{USER}\"\n\
         password_file = \"bmc-password\"\n\
         connect_timeout = \"1s\"\n\
         request_timeout = \"1s\"\n\
         operation_timeout = \"1s\"\n\
         retries = 0\n\
         fallback = [\n\
         \x20 {{ driver = \"exec\", agent = \"{agent}\", options = {{ ip = \"127.0.0.1\", \
         ipport = \"{port}\", lanplus = \"1\", cipher = \"17\", privlvl = \"operator\" }}, \
         username = \"{IPMI_USER}\", password_file = \"ipmi-password\", \
         operation_timeout = \"30s\" }},\n\
         ]\n",
        rf = bmc.addr().port(),
        agent = agent.display(),
        port = ipmi.port(),
    );
    std::fs::write(dir.path().join("inventory.toml"), inventory).unwrap();
    Setup {
        dir,
        config,
        bmc,
        ipmi,
    }
}

fn ipmi_ops(ipmi: &MockIpmiHandle) -> Vec<ChassisControl> {
    ipmi.control_log().iter().map(|c| c.op).collect()
}

fn resets(bmc: &MockRedfishHandle) -> Vec<String> {
    bmc.reset_log().into_iter().map(|(_, t)| t).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_bmc_is_fenced_through_the_pdu_level() {
    let Some(agent) = agent("fence_ipmilan") else {
        return;
    };
    let s = setup(&agent).await;
    let config = nodefence::config::load(&s.config).unwrap();
    let node = &config.inventory.nodes["db-1"];
    assert_eq!(node.fallback.len(), 1);
    let policy = config.agent.power.confirm;
    let driver = DriverFactory::new(4)
        .with_confirm(policy)
        .driver(node)
        .unwrap();
    assert_eq!(driver.driver_name(), "redfish");
    assert!(
        driver.endpoint().contains(" → exec "),
        "{}",
        driver.endpoint()
    );

    s.bmc.inject(Fault::Hang);
    // Status: level 1 times out, level 2 answers.
    assert_eq!(driver.status().await.unwrap().state, PowerState::On);
    let out = execute(driver.as_ref(), PowerAction::Off, &policy)
        .await
        .unwrap();
    assert_eq!(out.commands_sent, vec![PowerAction::Off]);
    assert_eq!(out.off.map(|c| c.state), Some(PowerState::Off));
    assert_eq!(ipmi_ops(&s.ipmi), [ChassisControl::PowerDown]);
    assert_eq!(s.ipmi.power(), Power::Off);
    assert!(resets(&s.bmc).is_empty(), "the hung BMC took no command");
    driver.close().await;
    s.bmc.shutdown().await;
    s.ipmi.shutdown().await;
    drop(s.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_bmc_does_the_job_and_the_pdu_is_untouched() {
    let Some(agent) = agent("fence_ipmilan") else {
        return;
    };
    let s = setup(&agent).await;
    let config = nodefence::config::load(&s.config).unwrap();
    let policy = config.agent.power.confirm;
    let driver = DriverFactory::new(4)
        .with_confirm(policy)
        .driver(&config.inventory.nodes["db-1"])
        .unwrap();
    let out = execute(driver.as_ref(), PowerAction::Off, &policy)
        .await
        .unwrap();
    assert_eq!(out.off.map(|c| c.state), Some(PowerState::Off));
    assert_eq!(resets(&s.bmc), ["ForceOff"]);
    assert_eq!(s.bmc.power("system"), Some(MockPower::Off));
    assert!(ipmi_ops(&s.ipmi).is_empty(), "level 2 sent no command");
    assert_eq!(s.ipmi.power(), Power::On);
    driver.close().await;
    s.bmc.shutdown().await;
    s.ipmi.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_status_and_fence_use_the_topology() {
    let Some(agent) = agent("fence_ipmilan") else {
        return;
    };
    let s = setup(&agent).await;
    s.bmc.inject(Fault::Hang);

    let out = nodefence(&s.config, &["status", "db-1", "-o", "json"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows[0]["power"], "On", "{}", text(&out));
    assert_eq!(rows[0]["driver"], "redfish");

    let out = nodefence(
        &s.config,
        &[
            "fence",
            "--skip-identity-check",
            "db-1",
            "--action",
            "off",
            "--yes",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("db-1: confirmed Off"), "{}", text(&out));
    assert!(!text(&out).contains(PASSWORD));
    assert_eq!(ipmi_ops(&s.ipmi), [ChassisControl::PowerDown]);
    assert_eq!(s.ipmi.power(), Power::Off);

    let out = nodefence(&s.config, &["status", "db-1", "-o", "json"]).await;
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows[0]["power"], "Off", "{}", text(&out));
    s.bmc.shutdown().await;
    s.ipmi.shutdown().await;
}

/// `nodefence fence` by hand in a topology: the command goes to the level whose
/// reading was checked against the Node (the BMC, level 1), never to a fallback that
/// cannot prove which machine it switches. A BMC that accepts ForceOff and stays On
/// is not confirmed, and the PDU level is left alone; only with
/// `--skip-identity-check` does the command go through every level, as the daemon's
/// does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_fence_stays_on_the_level_whose_identity_was_checked() {
    let Some(agent) = agent("fence_ipmilan") else {
        return;
    };
    let s = setup(&agent).await;
    let config = write_agent_config(s.dir.path(), 2, "100ms", "3s");
    let (kube, kubeconfig) =
        cli_common::cluster_with_nodes(s.dir.path(), &[("db-1", DB1_UUID, None)]).await;
    s.bmc.inject(Fault::LieOnAfterOff);
    let fence = |more: &'static [&'static str]| {
        let mut args = vec!["fence", "db-1", "--action", "off", "--yes", "-o", "json"];
        args.extend_from_slice(&["--kubeconfig", &kubeconfig]);
        args.extend_from_slice(more);
        args
    };
    let out = nodefence(&config, &fence(&[])).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["identity"]["result"], "match", "{report}");
    assert_eq!(report["error_kind"], "not_confirmed", "{report}");
    assert!(text(&out).contains("via redfish"), "{}", text(&out));
    assert_eq!(resets(&s.bmc), ["ForceOff"]);
    assert!(
        ipmi_ops(&s.ipmi).is_empty(),
        "the unproven level sent nothing"
    );
    assert_eq!(s.ipmi.power(), Power::On);

    // Every level: the PDU powers the machine off (the lying BMC, read first, still
    // says On, so nothing is confirmed).
    let out = nodefence(&config, &fence(&["--skip-identity-check"])).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(ipmi_ops(&s.ipmi), [ChassisControl::PowerDown]);
    kube.shutdown().await;
    s.bmc.shutdown().await;
    s.ipmi.shutdown().await;
}

/// `validate` and `explain` list every level of the topology in order (driver and
/// endpoint or agent), never a password. Needs no fence agent: the fallback is a
/// stand-in script that is never run (the BMC answers first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_and_explain_list_every_level_in_order() {
    use nodefence_mocks::kube::FakeKube;
    use nodefence_mocks::kube::resources::NODES;

    nodefence::tls::install_crypto_provider();
    let bmc = MockRedfish::builder()
        .credentials(USER, PASSWORD)
        .start()
        .await
        .unwrap();
    let kube = FakeKube::builder().start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = write_agent_config(dir.path(), 2, "100ms", "30s");
    write_secret(&dir.path().join("bmc-password"), PASSWORD);
    write_secret(&dir.path().join("pdu-password"), "pdu-Secret-77");
    let agent = dir.path().join("fence_stand_in");
    std::fs::write(&agent, "#!/bin/sh\nexit 1\n").unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let inventory = format!(
        "[nodes.db-1]\n\
         driver = \"redfish\"\n\
         endpoint = \"http://127.0.0.1:{rf}\"\n\
         username = \"{USER}\"\n\
         password_file = \"bmc-password\"\n\
         operation_timeout = \"5s\"\n\
         fallback = [\n\
         \x20 {{ driver = \"exec\", agent = \"fence_stand_in\", options = {{ ip = \"pdu-1\", \
         plug = \"7\", community = \"private-77\" }}, username = \"apc\", \
         password_file = \"pdu-password\", operation_timeout = \"5s\" }},\n\
         \x20 {{ driver = \"ipmi\", address = \"10.0.9.21\", port = 6230, username = \"admin\", \
         password_file = \"pdu-password\" }},\n\
         ]\n",
        rf = bmc.addr().port(),
    );
    std::fs::write(dir.path().join("inventory.toml"), inventory).unwrap();
    let rf_url = format!("http://127.0.0.1:{}", bmc.addr().port());
    let pdu = format!("exec {} ip=pdu-1 plug=7", agent.display());

    let out = nodefence(&config, &["validate"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        stdout.contains("1 nodes: 1 redfish; fallback methods: 1 exec, 1 ipmi;"),
        "{stdout}"
    );
    let expected =
        format!("node \"db-1\": 1. redfish {rf_url} → 2. {pdu} → 3. ipmi 10.0.9.21:6230\n");
    assert!(stdout.contains(&expected), "{expected:?} not in:\n{stdout}");

    kube.store()
        .create(
            NODES,
            None,
            serde_json::json!({
                "apiVersion": "v1", "kind": "Node", "metadata": {"name": "db-1"},
            }),
        )
        .unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    kube.write_kubeconfig(&kubeconfig).unwrap();
    let kubeconfig = kubeconfig.display().to_string();
    let out = nodefence(
        &config,
        &[
            "explain",
            "db-1",
            "--namespace",
            "nodefence",
            "--kubeconfig",
            &kubeconfig,
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let lines: Vec<&str> = stdout.lines().collect();
    let at = |key: &str| -> usize {
        lines
            .iter()
            .position(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("no {key:?} line in:\n{stdout}"))
    };
    let (inv, l1, l2, l3) = (
        at("Inventory:"),
        at("Level 1:"),
        at("Level 2:"),
        at("Level 3:"),
    );
    assert!(inv < l1 && l1 < l2 && l2 < l3, "{stdout}");
    assert!(
        lines[inv].contains("3 power methods, tried in order"),
        "{stdout}"
    );
    assert!(
        lines[l1].ends_with(&format!("redfish {rf_url} (primary)")),
        "{stdout}"
    );
    assert!(lines[l2].ends_with(&pdu), "{stdout}");
    assert!(lines[l3].ends_with("ipmi 10.0.9.21:6230"), "{stdout}");
    assert!(lines[at("Power now:")].contains("On (read in"), "{stdout}");
    let all = text(&out);
    for secret in [PASSWORD, "pdu-Secret-77", "private-77"] {
        assert!(!all.contains(secret), "{secret} in:\n{all}");
    }
    bmc.shutdown().await;
    kube.shutdown().await;
}
