//! The `exec` driver end to end: the real ClusterLabs agents (`fence_redfish`,
//! `fence_ipmilan` from Debian `fence-agents`) against the mock Redfish and IPMI BMCs,
//! fake agents (shell scripts in a tempdir) for what real agents do only when broken,
//! and the `nodefence` binary with an `exec` inventory. The rule under test: an
//! error, a timeout or an unclear answer is an error, never Off, and the password
//! travels only on the agent's standard input.
//!
//! Without the agents the real-agent tests print a "skipped" line, unless
//! `NODEFENCE_REQUIRE_PEERS=1` (CI), which makes their absence a failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::cli_common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cli_common::{fence_agent as agent, nodefence, text, write_agent_config, write_secret};
use nodefence::config::{Credential, ExecTarget, NodeTarget, PowerSource, SecretSource, Timeouts};
use nodefence::power::confirm::{ConfirmPolicy, confirm_state, execute};
use nodefence::power::registry::DriverFactory;
use nodefence::power::{PowerAction, PowerDriver, PowerErrorKind, PowerState};
use nodefence_mocks::ipmi::{ChassisControl, CipherSuite, MockIpmi, Power};
use nodefence_mocks::redfish::{Fault, MockPower, MockRedfish, MockRedfishHandle, Profile};

const USER: &str = "fencer";
const PASSWORD: &str = "pa ss=w0rd$1";

fn target(agent: &Path, options: &[(&str, String)], password: &str, op: Duration) -> ExecTarget {
    ExecTarget {
        agent: agent.to_path_buf(),
        options: options
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        credential: Some(Credential {
            username: USER.into(),
            password: password.to_string().into(),
            source: SecretSource::Inline,
        }),
        timeouts: Timeouts {
            operation: op,
            ..Timeouts::default()
        },
    }
}

/// Built the way nodefence builds it: through the registry.
fn driver(target: ExecTarget) -> Arc<dyn PowerDriver> {
    DriverFactory::new(4)
        .driver(&NodeTarget {
            fallback: Vec::new(),
            origin: Default::default(),
            metal3_host: None,
            name: "edge-1".into(),
            group: None,
            power: PowerSource::Exec(target),
            policy: Default::default(),
        })
        .unwrap()
}

fn policy() -> ConfirmPolicy {
    ConfirmPolicy {
        readings: 2,
        interval: Duration::from_millis(50),
        timeout: Duration::from_secs(20),
    }
}

async fn redfish_bmc() -> MockRedfishHandle {
    MockRedfish::builder()
        .profile(Profile::OpenBmc)
        .credentials(USER, PASSWORD)
        .transition_delay(Duration::from_millis(300))
        .tls(true)
        .start()
        .await
        .unwrap()
}

/// fence_redfish only speaks HTTPS; the agent's environment is clean (no
/// REQUESTS_CA_BUNDLE), so the mock's certificate is accepted with `ssl_insecure`.
fn redfish_options(bmc: &MockRedfishHandle) -> Vec<(&'static str, String)> {
    vec![
        ("ip", "127.0.0.1".into()),
        ("ipport", bmc.addr().port().to_string()),
        ("ssl_insecure", "1".into()),
    ]
}

fn redfish_driver(
    agent: &Path,
    bmc: &MockRedfishHandle,
    pw: &str,
    secs: u64,
) -> Arc<dyn PowerDriver> {
    let options = redfish_options(bmc);
    driver(target(agent, &options, pw, Duration::from_secs(secs)))
}

fn resets(bmc: &MockRedfishHandle) -> Vec<String> {
    bmc.reset_log().into_iter().map(|(_, t)| t).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_redfish_reads_switches_and_confirms() {
    let Some(agent) = agent("fence_redfish") else {
        return;
    };
    let bmc = redfish_bmc().await;
    let d = redfish_driver(&agent, &bmc, PASSWORD, 30);
    let port = bmc.addr().port();
    assert_eq!(
        d.endpoint(),
        format!("fence_redfish ip=127.0.0.1 ipport={port}")
    );
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    assert!(bmc.reset_log().is_empty(), "status sends no Reset");

    let out = execute(d.as_ref(), PowerAction::Off, &policy())
        .await
        .unwrap();
    assert_eq!(out.commands_sent, vec![PowerAction::Off]);
    assert_eq!(resets(&bmc), ["ForceOff"]);
    assert_eq!(bmc.power("system"), Some(MockPower::Off));
    let proof = confirm_state(d.as_ref(), PowerState::Off, &policy())
        .await
        .unwrap();
    assert_eq!(proof.readings.len(), 2);

    let out = execute(d.as_ref(), PowerAction::On, &policy())
        .await
        .unwrap();
    assert_eq!(out.commands_sent, vec![PowerAction::On]);
    assert_eq!(resets(&bmc), ["ForceOff", "On"]);
    // The agent's `on` returns during PoweringOn (fence_redfish calls anything but
    // "Off" on); the BMC ends On.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(bmc.power("system"), Some(MockPower::On));
    bmc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_redfish_failures_are_errors_never_off() {
    let Some(agent) = agent("fence_redfish") else {
        return;
    };
    let bmc = redfish_bmc().await;
    bmc.set_power("system", MockPower::Off);
    let wrong = "Wr0ng-pass";
    let d = redfish_driver(&agent, &bmc, wrong, 30);
    let e = d.status().await.unwrap_err();
    // The service root needs no login; the Systems collection's 401 crashes the agent.
    assert!(
        e.message
            .contains("traceback ending in KeyError: 'Members'"),
        "{e}"
    );
    assert!(!e.message.contains(wrong), "{e}");
    assert!(d.power_off().await.is_err());
    assert!(
        bmc.reset_log().is_empty(),
        "no command passed a refused login"
    );

    // Verified TLS: the mock's CA is not trusted (the environment is clean).
    let mut options = redfish_options(&bmc);
    options[2] = ("ssl_secure", "1".into());
    bmc.clear_logs();
    let e = driver(target(&agent, &options, PASSWORD, Duration::from_secs(30)))
        .status()
        .await
        .unwrap_err();
    assert_eq!(e.kind, PowerErrorKind::Unreachable, "{e}");
    assert!(bmc.request_log().is_empty(), "nothing passed the handshake");

    // A BMC that never answers: fence_redfish has no timeout of its own.
    bmc.inject(Fault::Hang);
    let d = redfish_driver(&agent, &bmc, PASSWORD, 3);
    let started = Instant::now();
    let e = d.status().await.unwrap_err();
    assert_eq!(e.kind, PowerErrorKind::Unreachable, "{e}");
    assert!(e.message.contains("did not finish in 3s"), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    bmc.clear_faults();
    bmc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_ipmilan_switches_with_suites_17_and_3() {
    let Some(agent) = agent("fence_ipmilan") else {
        return;
    };
    // Each BMC offers only the suite under test, so the `cipher` option must work.
    for (suite, only) in [("17", CipherSuite::Suite17), ("3", CipherSuite::Suite3)] {
        let bmc = MockIpmi::builder().suites([only]).start().await.unwrap();
        let options = |password: &str| {
            let options = vec![
                ("ip", "127.0.0.1".to_string()),
                ("ipport", bmc.port().to_string()),
                ("lanplus", "1".into()),
                ("cipher", suite.into()),
                ("privlvl", "operator".into()),
                ("username", "admin".into()),
            ];
            target(&agent, &options, password, Duration::from_secs(30))
        };
        let d = driver(options("password"));
        let on = d.status().await.unwrap();
        assert_eq!(on.state, PowerState::On, "suite {suite}");
        let out = execute(d.as_ref(), PowerAction::Off, &policy())
            .await
            .unwrap();
        assert_eq!(out.commands_sent, vec![PowerAction::Off]);
        let ops: Vec<_> = bmc.control_log().iter().map(|c| c.op).collect();
        assert_eq!(ops, [ChassisControl::PowerDown], "suite {suite}");
        assert_eq!(bmc.power(), Power::Off);
        assert_eq!(d.status().await.unwrap().state, PowerState::Off);

        let e = driver(options("wrong")).status().await.unwrap_err();
        assert!(e.message.contains("plug status"), "suite {suite}: {e}");

        execute(d.as_ref(), PowerAction::On, &policy())
            .await
            .unwrap();
        assert_eq!(bmc.power(), Power::On, "suite {suite}");
        assert_eq!(bmc.control_log().len(), 2);
        bmc.shutdown().await;
    }
}

/// A fake agent: `body` after a shebang, executable, in `dir`.
fn fake(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn fake_driver(agent: &Path, op: Duration) -> Arc<dyn PowerDriver> {
    driver(target(agent, &[("ip", "10.9.9.9".into())], PASSWORD, op))
}

/// True while `pid` exists and is not a zombie.
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|s| !s.trim_start().starts_with('Z'))
    })
}

#[tokio::test]
async fn fake_agent_gets_options_on_stdin_only_and_a_clean_environment() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let agent = fake(
        dir.path(),
        "fence_fake",
        &format!(
            "echo \"$#\" > {d}/argc\ncat /proc/$$/cmdline | tr '\\0' ' ' > {d}/cmdline\n\
             cat > {d}/stdin\nenv > {d}/env\necho 'Status: OFF'\nexit 2"
        ),
    );
    let reading = fake_driver(&agent, Duration::from_secs(10))
        .status()
        .await
        .unwrap();
    assert_eq!(reading.state, PowerState::Off);
    let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
    assert_eq!(read("argc").trim(), "0", "no arguments");
    assert!(!read("cmdline").contains(PASSWORD));
    assert_eq!(
        read("stdin"),
        format!("action=status\nip=10.9.9.9\nusername={USER}\npassword={PASSWORD}\n")
    );
    let mut env: Vec<String> = read("env").lines().map(str::to_string).collect();
    env.sort();
    // dash exports PWD itself.
    assert_eq!(
        env,
        ["LANG=C", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "PWD=/"]
    );
}

#[tokio::test]
async fn exit_codes_are_read_strictly() {
    let dir = tempfile::tempdir().unwrap();
    let op = Duration::from_secs(10);
    let status = |name: &str, body: &str| {
        let agent = fake(dir.path(), name, &format!("cat >/dev/null\n{body}"));
        async move { fake_driver(&agent, op).status().await }
    };
    assert_eq!(status("on", "exit 0").await.unwrap().state, PowerState::On);
    assert_eq!(
        status("off", "echo 'Status: OFF'; exit 2")
            .await
            .unwrap()
            .state,
        PowerState::Off
    );
    for (name, body) in [
        ("bare2", "exit 2"),
        ("contradicts", "echo 'Status: ON'; exit 2"),
        ("one", "echo 'Status: OFF'; exit 1"),
        ("other", "echo 'Status: OFF'; exit 7"),
        ("syntax", "if then fi"),
        ("signal", "echo 'Status: OFF'; kill -9 $$"),
    ] {
        let e = status(name, body).await.unwrap_err();
        assert_ne!(e.kind, PowerErrorKind::Config, "{name}: {e}");
    }

    // The password the agent echoes is redacted; the excerpt keeps the agent's words.
    let echo = "while IFS= read -r l; do case \"$l\" in password=*) pw=\"${l#password=}\";; esac; done\n\
                echo \"2026-01-01 10:00:00,000 ERROR: Failed: login with '$pw' refused\" >&2; exit 1";
    let agent = fake(dir.path(), "echo", echo);
    let e = fake_driver(&agent, op).power_off().await.unwrap_err();
    assert_eq!(
        e.message,
        "fence agent echo (action off) exited with 1: ERROR: Failed: login with '<redacted>' refused"
    );
    let missing = dir.path().join("missing");
    let e = driver(target(&missing, &[], PASSWORD, op))
        .status()
        .await
        .unwrap_err();
    assert_eq!(e.kind, PowerErrorKind::Config, "{e}");
}

#[tokio::test]
async fn a_hanging_agent_and_its_children_are_killed_at_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let agent = fake(
        dir.path(),
        "hang",
        &format!("cat >/dev/null\necho $$ > {d}/pid\nsleep 1000 &\necho $! > {d}/child\nwait"),
    );
    let started = Instant::now();
    let e = fake_driver(&agent, Duration::from_secs(1))
        .status()
        .await
        .unwrap_err();
    assert_eq!(e.kind, PowerErrorKind::Unreachable);
    assert!(e.message.contains("did not finish in 1s"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(4));
    let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
    // SIGKILL is delivered at once but the kernel tears a process down a moment
    // later (a loaded machine): wait for that, boundedly.
    let gone = |f: &str| {
        let pid = read(f);
        (0..200).any(|_| {
            let dead = !alive(&pid);
            if !dead {
                std::thread::sleep(Duration::from_millis(10));
            }
            dead
        })
    };
    assert!(gone("pid"), "the agent is gone");
    assert!(gone("child"), "so is the process it started");

    // A caller that gives up first (drops the call) leaves nothing running either.
    std::fs::remove_file(dir.path().join("pid")).unwrap();
    let d = fake_driver(&agent, Duration::from_secs(30));
    let gave_up = tokio::time::timeout(Duration::from_millis(500), d.status()).await;
    assert!(gave_up.is_err());
    let pid = read("pid");
    for _ in 0..100 {
        if !alive(&pid) && !alive(&read("child")) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the abandoned agent or its child still runs");
}

#[tokio::test]
async fn huge_output_is_capped_and_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let flood = "cat >/dev/null\nhead -c 20000000 /dev/zero | tr '\\0' 'x'";
    let agent = fake(
        dir.path(),
        "flood",
        &format!("{flood}\necho\necho 'Status: OFF'\nexit 2"),
    );
    let e = fake_driver(&agent, Duration::from_secs(20))
        .status()
        .await
        .unwrap_err();
    assert_eq!(e.kind, PowerErrorKind::Protocol, "{e}");
    let agent = fake(dir.path(), "flood_err", &format!("{flood} >&2\nexit 1"));
    let e = fake_driver(&agent, Duration::from_secs(20))
        .power_off()
        .await
        .unwrap_err();
    assert!(e.message.len() < 500, "{}", e.message.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_run_at_a_time_per_machine() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let agent = fake(
        dir.path(),
        "slow",
        &format!(
            "cat >/dev/null\n[ -e {d}/busy ] && echo overlap >> {d}/log\ntouch {d}/busy\n\
             sleep 0.3\nrm {d}/busy\necho run >> {d}/log\nexit 0"
        ),
    );
    let drv = fake_driver(&agent, Duration::from_secs(10));
    let (a, b, c) = tokio::join!(drv.status(), drv.power_on(), drv.status());
    assert!(a.is_ok() && b.is_ok() && c.is_ok());
    let log = std::fs::read_to_string(dir.path().join("log")).unwrap();
    assert_eq!(log, "run\nrun\nrun\n");
}

/// `nodefence.toml` and an inventory whose node edge-1 is fenced by `agent`
/// (`fence_redfish`) against `bmc`; returns the path of `nodefence.toml`.
fn edge_through_fence_redfish(
    dir: &std::path::Path,
    agent: &std::path::Path,
    bmc: &nodefence_mocks::redfish::MockRedfishHandle,
) -> std::path::PathBuf {
    write_secret(&dir.join("bmc-password"), PASSWORD);
    let config = write_agent_config(dir, 2, "50ms", "20s");
    std::fs::write(
        dir.join("inventory.toml"),
        format!(
            "[nodes.edge-1]\ndriver = \"exec\"\nagent = \"{}\"\n\
             options = {{ ip = \"127.0.0.1\", ipport = \"{}\", ssl_insecure = \"1\" }}\n\
             username = \"{USER}\"\npassword_file = \"bmc-password\"\noperation_timeout = \"30s\"\n",
            agent.display(),
            bmc.addr().port()
        ),
    )
    .unwrap();
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_fences_through_fence_redfish() {
    let Some(agent) = agent("fence_redfish") else {
        return;
    };
    let bmc = redfish_bmc().await;
    let dir = tempfile::tempdir().unwrap();
    let config = edge_through_fence_redfish(dir.path(), &agent, &bmc);

    let out = nodefence(&config, &["status"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    let row = table.lines().find(|l| l.starts_with("edge-1")).unwrap();
    assert!(row.contains(" On ") && row.contains("exec"), "{table}");

    let out = nodefence(
        &config,
        &[
            "fence",
            "--skip-identity-check",
            "edge-1",
            "--action",
            "off",
            "--yes",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("edge-1: confirmed Off"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains(PASSWORD));
    assert_eq!(bmc.power("system"), Some(MockPower::Off));
    assert_eq!(resets(&bmc), ["ForceOff"]);

    let out = nodefence(&config, &["status", "edge-1", "-o", "json"]).await;
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows[0]["power"], "Off", "{}", text(&out));
    assert_eq!(rows[0]["driver"], "exec");
    bmc.shutdown().await;
}

/// A fence agent cannot tell which machine it switches, so `nodefence fence` by hand
/// cannot prove the machine is the node's own: refused even with cluster access and
/// the node's Node present (the agent is only asked for the status), until the
/// operator skips the proof by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_refuses_an_unproven_agent_until_the_check_is_skipped_by_name() {
    let Some(agent) = agent("fence_redfish") else {
        return;
    };
    let bmc = redfish_bmc().await;
    let dir = tempfile::tempdir().unwrap();
    let config = edge_through_fence_redfish(dir.path(), &agent, &bmc);
    let (kube, kubeconfig) = crate::cli_common::cluster_with_nodes(
        dir.path(),
        &[("edge-1", "4c4c4544-0031-3510-8052-b2c04f503131", None)],
    )
    .await;
    crate::cli_common::assert_fence_refuses_an_unproven_machine(
        &config,
        "edge-1",
        &kubeconfig,
        "driver exec cannot report the machine's identity",
    )
    .await;
    assert!(resets(&bmc).is_empty(), "the agent sent no off");
    assert_eq!(bmc.power("system"), Some(MockPower::On));

    let out = nodefence(
        &config,
        &[
            "fence",
            "edge-1",
            "--action",
            "off",
            "--yes",
            "--kubeconfig",
            &kubeconfig,
            "--skip-identity-check",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("identity NOT verified (--skip-identity-check)"),
        "{}",
        text(&out)
    );
    assert_eq!(resets(&bmc), ["ForceOff"]);
    kube.shutdown().await;
    bmc.shutdown().await;
}
