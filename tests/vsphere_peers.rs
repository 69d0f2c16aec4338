//! Cross-check of the mock vCenter with Debian's ClusterLabs `fence_vmware_soap`
//! (package `fence-agents`, SOAP through `python3-suds`): the reference agent builds
//! its calls from the mock's WSDL, finds the VM through a ContainerView, reads
//! `summary.runtime.powerState`, and switches it with `PowerOffVM_Task`; it must read
//! what nodefence's driver reads, and its commands must land on the same VM.
//!
//! Without the agent or suds the tests print a "skipped" line, unless
//! `NODEFENCE_REQUIRE_PEERS=1` (CI), which makes their absence a failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use nodefence::config::{
    Credential, NodeTarget, PowerSource, SecretSource, TlsSettings, VsphereTarget,
};
use nodefence::power::registry::DriverFactory;
use nodefence::power::vsphere::locate::VmSelector;
use nodefence::power::{PowerDriver, PowerState};
use nodefence_mocks::vsphere::{MockVsphere, MockVsphereHandle, VmPower, VmSpec};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

const USER: &str = "fence@vsphere.local";
const PASSWORD: &str = "pa ss=word";
const UUID_1: &str = "4213e0f1-2a3b-4c5d-8e9f-a0b1c2d3e4f5";

/// The agent, when it and suds are installed; else `None` after the skip line.
fn agent() -> Option<PathBuf> {
    let agent = common::cli_common::fence_agent("fence_vmware_soap")?;
    let suds = std::process::Command::new("/usr/bin/python3")
        .args(["-c", "import suds"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !suds {
        let required = std::env::var("NODEFENCE_REQUIRE_PEERS").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "python3-suds missing but NODEFENCE_REQUIRE_PEERS=1"
        );
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "skipped: python3-suds not installed (apt-get install python3-suds)"
        );
        return None;
    }
    Some(agent)
}

#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    /// Shown in failure messages (through Debug).
    #[allow(dead_code)]
    stderr: String,
}

async fn fence(agent: &Path, vc: &MockVsphereHandle, ca: &Path, action: &str) -> Run {
    let mut cmd = Command::new(agent);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // requests (the SOAP calls) and urllib (suds fetching the WSDL) trust the
        // mock's CA only.
        .env("REQUESTS_CA_BUNDLE", ca)
        .env("SSL_CERT_FILE", ca)
        .kill_on_drop(true);
    for var in nodefence_mocks::PROXY_VARIABLES {
        cmd.env_remove(var);
    }
    let mut child = cmd.spawn().expect("spawning fence_vmware_soap");
    let options = [
        ("ip", "localhost".to_string()),
        ("ipport", vc.addr().port().to_string()),
        ("username", USER.into()),
        ("password", PASSWORD.into()),
        ("ssl", "1".into()),
        ("plug", "worker-1".into()),
        ("action", action.into()),
    ];
    let text: String = options.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(text.as_bytes()).await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(90), child.wait_with_output())
        .await
        .expect("fence_vmware_soap finished in time")
        .expect("fence_vmware_soap ran");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

async fn vcenter() -> MockVsphereHandle {
    MockVsphere::builder()
        .credentials(USER, PASSWORD)
        .vm(VmSpec::new("worker-1")
            .moid("vm-42")
            .bios_uuid(UUID_1)
            .folder("k8s"))
        .vm(VmSpec::new("worker-2").moid("vm-43").folder("k8s"))
        .start()
        .await
        .expect("mock vSphere starts")
}

fn driver(vc: &MockVsphereHandle, ca: &Path) -> Arc<dyn PowerDriver> {
    nodefence::tls::install_crypto_provider();
    let target = VsphereTarget {
        endpoint: vc.base_url().parse().unwrap(),
        vm: VmSelector::BiosUuid(UUID_1.into()),
        datacenter: None,
        credential: Credential {
            username: USER.into(),
            password: PASSWORD.to_string().into(),
            source: SecretSource::Inline,
        },
        tls: TlsSettings {
            ca_file: Some(ca.to_path_buf()),
            ..TlsSettings::default()
        },
        timeouts: common::fast_timeouts(),
    };
    DriverFactory::new(4)
        .driver(&NodeTarget {
            fallback: Vec::new(),
            origin: Default::default(),
            metal3_host: None,
            name: "worker-1".into(),
            group: None,
            power: PowerSource::Vsphere(target),
            policy: Default::default(),
        })
        .unwrap()
}

#[tokio::test]
async fn the_agent_and_the_driver_read_the_same_power_state() {
    let Some(agent) = agent() else { return };
    let vc = vcenter().await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, vc.ca_pem()).unwrap();
    let d = driver(&vc, &ca);

    let on = fence(&agent, &vc, &ca, "status").await;
    assert_eq!(
        on.code,
        Some(0),
        "status of a powered-on VM exits 0: {on:?}"
    );
    assert!(on.stdout.contains("Status: ON"), "{on:?}");
    assert_eq!(d.status().await.unwrap().state, PowerState::On);

    vc.set_power("vm-42", VmPower::PoweredOff);
    let off = fence(&agent, &vc, &ca, "status").await;
    assert_eq!(
        off.code,
        Some(2),
        "status of a powered-off VM exits 2: {off:?}"
    );
    assert!(off.stdout.contains("Status: OFF"), "{off:?}");
    assert_eq!(d.status().await.unwrap().state, PowerState::Off);
    assert!(vc.power_calls().is_empty(), "status sends no command");
    vc.shutdown().await;
}

#[tokio::test]
async fn the_agents_off_lands_on_the_vm_the_driver_reads() {
    let Some(agent) = agent() else { return };
    let vc = vcenter().await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, vc.ca_pem()).unwrap();
    let d = driver(&vc, &ca);

    let off = fence(&agent, &vc, &ca, "off").await;
    assert_eq!(off.code, Some(0), "{off:?}");
    assert_eq!(
        vc.power_calls(),
        vec![("PowerOffVM_Task".to_string(), "vm-42".to_string())]
    );
    assert_eq!(d.status().await.unwrap().state, PowerState::Off);
    assert_eq!(vc.power("vm-43"), Some(VmPower::PoweredOn), "only worker-1");
    let on = fence(&agent, &vc, &ca, "on").await;
    assert_eq!(on.code, Some(0), "{on:?}");
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    vc.shutdown().await;
}
