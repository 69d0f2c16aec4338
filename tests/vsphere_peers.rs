//! Cross-check of the mock vCenter with Debian's ClusterLabs `fence_vmware_soap`
//! (package `fence-agents`, SOAP through `python3-suds`): the reference agent builds
//! its calls from the mock's WSDL, finds the VM through a ContainerView, reads
//! `summary.runtime.powerState`, and switches it with `PowerOffVM_Task`; it must read
//! what nodefence's driver reads, and its commands must land on the same VM.
//!
//! And with `fence_vmware_rest` (the same package, through `python3-pycurl`), over the
//! vSphere Automation REST API (`/rest`) of the same mock: a session with HTTP Basic,
//! `GET /rest/vcenter/vm?filter.names=<plug>`, `POST .../power/stop|start`. It reads
//! the VM nodefence's driver reads over SOAP and switches only that one, while it
//! picks VMs by name alone: of two VMs with the Node's name it takes the first vCenter
//! lists, where the driver (by the Node's systemUUID) finds the right one.
//!
//! Without an agent or its Python library the tests print a "skipped" line, unless
//! `NODEFENCE_REQUIRE_PEERS=1` (CI), which makes their absence a failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

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

/// Runs a ClusterLabs agent with `options` on stdin (as fenced does) and `ca` trusted
/// through each of `ca_variables`, proxies unset, and waits for it.
async fn run_agent(
    agent: &Path,
    ca_variables: &[&str],
    ca: &Path,
    options: &[(&str, String)],
) -> Run {
    let name = agent.display();
    let mut cmd = Command::new(agent);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for var in ca_variables {
        cmd.env(var, ca);
    }
    for var in nodefence_mocks::PROXY_VARIABLES {
        cmd.env_remove(var);
    }
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {name}: {e}"));
    let text: String = options.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(text.as_bytes()).await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(90), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{name} did not finish within 90 s"))
        .unwrap_or_else(|e| panic!("{name} did not run: {e}"));
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

async fn fence(agent: &Path, vc: &MockVsphereHandle, ca: &Path, action: &str) -> Run {
    let options = [
        ("ip", "localhost".to_string()),
        ("ipport", vc.addr().port().to_string()),
        ("username", USER.into()),
        ("password", PASSWORD.into()),
        ("ssl", "1".into()),
        ("plug", "worker-1".into()),
        ("action", action.into()),
    ];
    // requests (the SOAP calls) and urllib (suds fetching the WSDL) trust the mock's
    // CA only.
    run_agent(
        agent,
        &["REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"],
        ca,
        &options,
    )
    .await
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

/// How `fence_vmware_rest` is told to use TLS.
#[derive(Debug, Clone, Copy)]
enum RestTls {
    /// `ssl_insecure=1`: HTTPS without verifying the certificate. Debian's pycurl
    /// (libcurl with GnuTLS) reads neither `CURL_CA_BUNDLE` nor `SSL_CERT_FILE` (those
    /// are the `curl` tool's and OpenSSL's), and the agent has no CA option: a private
    /// CA can only be trusted through the system store.
    Insecure,
    /// `ssl_secure=1`, with both variables pointing at the mock's CA regardless.
    Secure,
}

async fn fence_rest(
    agent: &Path,
    vc: &MockVsphereHandle,
    ca: &Path,
    tls: RestTls,
    password: &str,
    action: &str,
) -> Run {
    let tls = match tls {
        RestTls::Insecure => ("ssl_insecure", "1"),
        RestTls::Secure => ("ssl_secure", "1"),
    };
    let options = [
        ("ip", "localhost".to_string()),
        ("ipport", vc.addr().port().to_string()),
        ("username", USER.into()),
        ("password", password.into()),
        (tls.0, tls.1.into()),
        ("plug", "worker-1".into()),
        ("action", action.into()),
    ];
    // Set although pycurl (GnuTLS) reads neither: see `RestTls`.
    run_agent(agent, &["CURL_CA_BUNDLE", "SSL_CERT_FILE"], ca, &options).await
}

const REST_STOP: &str = "POST /rest/vcenter/vm/{vm}/power/stop";
const REST_START: &str = "POST /rest/vcenter/vm/{vm}/power/start";

fn ca_file(vc: &MockVsphereHandle, dir: &tempfile::TempDir) -> PathBuf {
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, vc.ca_pem()).unwrap();
    ca
}

/// What the REST agent's checks start from: the agent (else `None` after the skip
/// line), the usual vCenter, and its CA in a file.
struct RestCheck {
    agent: PathBuf,
    vc: MockVsphereHandle,
    _dir: tempfile::TempDir,
    ca: PathBuf,
}

async fn rest_check() -> Option<RestCheck> {
    let agent = nodefence_mocks::peers::fence_vmware_rest()?;
    let vc = vcenter().await;
    let dir = tempfile::tempdir().unwrap();
    let ca = ca_file(&vc, &dir);
    Some(RestCheck {
        agent,
        vc,
        _dir: dir,
        ca,
    })
}

#[tokio::test]
async fn the_rest_agent_and_the_driver_read_the_same_power_state() {
    let Some(RestCheck {
        agent,
        vc,
        _dir,
        ca,
    }) = rest_check().await
    else {
        return;
    };
    let d = driver(&vc, &ca);

    let on = fence_rest(&agent, &vc, &ca, RestTls::Insecure, PASSWORD, "status").await;
    assert_eq!(
        on.code,
        Some(0),
        "status of a powered-on VM exits 0: {on:?}"
    );
    assert!(on.stdout.contains("Status: ON"), "{on:?}");
    assert_eq!(d.status().await.unwrap().state, PowerState::On);

    // Off through SOAP (nodefence's driver), read through REST.
    d.power_off().await.unwrap();
    let off = fence_rest(&agent, &vc, &ca, RestTls::Insecure, PASSWORD, "status").await;
    assert_eq!(
        off.code,
        Some(2),
        "status of a powered-off VM exits 2: {off:?}"
    );
    assert!(off.stdout.contains("Status: OFF"), "{off:?}");
    assert_eq!(d.status().await.unwrap().state, PowerState::Off);

    // The agent maps SUSPENDED to off; the driver never calls a suspended VM Off.
    vc.set_power("vm-42", VmPower::Suspended);
    let suspended = fence_rest(&agent, &vc, &ca, RestTls::Insecure, PASSWORD, "status").await;
    assert_eq!(suspended.code, Some(2), "{suspended:?}");
    assert!(suspended.stdout.contains("Status: OFF"), "{suspended:?}");
    assert_eq!(d.status().await.unwrap().state, PowerState::Paused);

    assert_eq!(
        vc.power_calls(),
        vec![("PowerOffVM_Task".to_string(), "vm-42".to_string())],
        "status sends no command (only the driver's off)"
    );
    let rest: Vec<String> = vc
        .methods()
        .into_iter()
        .filter(|m| m.contains("/rest/"))
        .collect();
    assert_eq!(
        rest.iter().filter(|m| *m == "GET /rest/vcenter/vm").count(),
        3,
        "{rest:?}"
    );
    assert_eq!(
        rest.iter()
            .filter(|m| *m == "DELETE /rest/com/vmware/cis/session")
            .count(),
        3,
        "the agent ends its session each time: {rest:?}"
    );
    vc.shutdown().await;
}

#[tokio::test]
async fn the_rest_agents_off_and_on_land_on_the_vm_the_driver_reads() {
    let Some(RestCheck {
        agent,
        vc,
        _dir,
        ca,
    }) = rest_check().await
    else {
        return;
    };
    let d = driver(&vc, &ca);

    let off = fence_rest(&agent, &vc, &ca, RestTls::Insecure, PASSWORD, "off").await;
    assert_eq!(off.code, Some(0), "{off:?}");
    assert_eq!(
        vc.power_calls(),
        vec![(REST_STOP.to_string(), "vm-42".to_string())]
    );
    assert_eq!(d.status().await.unwrap().state, PowerState::Off);
    assert_eq!(vc.power("vm-43"), Some(VmPower::PoweredOn), "only worker-1");

    let on = fence_rest(&agent, &vc, &ca, RestTls::Insecure, PASSWORD, "on").await;
    assert_eq!(on.code, Some(0), "{on:?}");
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    assert_eq!(
        vc.power_calls(),
        vec![
            (REST_STOP.to_string(), "vm-42".to_string()),
            (REST_START.to_string(), "vm-42".to_string()),
        ]
    );
    assert_eq!(vc.power("vm-43"), Some(VmPower::PoweredOn), "only worker-1");
    let count = |method: &str| vc.methods().iter().filter(|m| *m == method).count();
    assert_eq!(
        count("DELETE /rest/com/vmware/cis/session"),
        count("POST /rest/com/vmware/cis/session"),
        "every REST session deleted"
    );
    vc.shutdown().await;
}

/// Two VMs named `worker-1` in different folders (a retired copy left in `old`,
/// listed first): the agent takes the first `filter.names` answers, the driver the
/// one with the Node's systemUUID.
#[tokio::test]
async fn the_rest_agent_picks_a_vm_by_name_and_the_driver_by_uuid() {
    let Some(agent) = nodefence_mocks::peers::fence_vmware_rest() else {
        return;
    };
    let vc = MockVsphere::builder()
        .credentials(USER, PASSWORD)
        .vm(VmSpec::new("worker-1")
            .moid("vm-7")
            .folder("old")
            .power(VmPower::PoweredOff))
        .vm(VmSpec::new("worker-1")
            .moid("vm-42")
            .bios_uuid(UUID_1)
            .folder("k8s"))
        .start()
        .await
        .expect("mock vSphere starts");
    let dir = tempfile::tempdir().unwrap();
    let ca = ca_file(&vc, &dir);
    let d = driver(&vc, &ca);

    // The agent reads the retired copy: Off, while the Node's VM runs.
    let status = fence_rest(&agent, &vc, &ca, RestTls::Insecure, PASSWORD, "status").await;
    assert_eq!(status.code, Some(2), "{status:?}");
    assert!(status.stdout.contains("Status: OFF"), "{status:?}");
    assert_eq!(d.status().await.unwrap().state, PowerState::On);

    // Its off then succeeds without a command: the Node's VM keeps running.
    let off = fence_rest(&agent, &vc, &ca, RestTls::Insecure, PASSWORD, "off").await;
    assert_eq!(off.code, Some(0), "the agent reports success: {off:?}");
    assert!(vc.power_calls().is_empty(), "{:?}", vc.power_calls());
    assert_eq!(vc.power("vm-42"), Some(VmPower::PoweredOn));
    assert_eq!(d.status().await.unwrap().state, PowerState::On);

    // With the copy running, the agent switches the copy, never the Node's VM.
    vc.set_power("vm-7", VmPower::PoweredOn);
    let off = fence_rest(&agent, &vc, &ca, RestTls::Insecure, PASSWORD, "off").await;
    assert_eq!(off.code, Some(0), "{off:?}");
    assert_eq!(
        vc.power_calls(),
        vec![(REST_STOP.to_string(), "vm-7".to_string())]
    );
    assert_eq!(vc.power("vm-7"), Some(VmPower::PoweredOff));
    assert_eq!(vc.power("vm-42"), Some(VmPower::PoweredOn));

    // The driver, by UUID, switches the right one.
    d.power_off().await.unwrap();
    assert_eq!(vc.power("vm-42"), Some(VmPower::PoweredOff));
    assert_eq!(
        vc.power_calls().last(),
        Some(&("PowerOffVM_Task".to_string(), "vm-42".to_string()))
    );
    vc.shutdown().await;
}

#[tokio::test]
async fn the_rest_agent_fails_on_a_bad_password_and_an_untrusted_certificate() {
    let Some(RestCheck {
        agent,
        vc,
        _dir,
        ca,
    }) = rest_check().await
    else {
        return;
    };

    let denied = fence_rest(&agent, &vc, &ca, RestTls::Insecure, "wrong", "status").await;
    assert_eq!(denied.code, Some(1), "{denied:?}");
    assert!(
        denied.stderr.contains("Unable to connect/login"),
        "{denied:?}"
    );
    assert_eq!(
        vc.methods(),
        vec!["POST /rest/com/vmware/cis/session".to_string()],
        "the 401 ends it"
    );

    // ssl_secure verifies the certificate against the system store only: the
    // variables naming the mock's CA are not read, the handshake fails, and no
    // request reaches the mock.
    let untrusted = fence_rest(&agent, &vc, &ca, RestTls::Secure, PASSWORD, "status").await;
    assert_eq!(untrusted.code, Some(1), "{untrusted:?}");
    assert_eq!(vc.methods().len(), 1, "{:?}", vc.methods());
    assert_eq!(vc.power("vm-42"), Some(VmPower::PoweredOn));
    vc.shutdown().await;
}
