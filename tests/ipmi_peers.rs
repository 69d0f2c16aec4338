//! nodefence's IPMI driver against independent BMC implementations, on loopback:
//!
//! - **pyghmi**'s BMC server (Python, PyPI `pyghmi`), run by `tests/peers/pyghmi_bmc.py`
//!   with the interpreter from `NODEFENCE_PYGHMI_PYTHON` (default
//!   `~/.cache/nodefence/pyghmi-venv/bin/python`). It speaks cipher suite 3 only and
//!   answers a suite-17 proposal with suite 3; it sends Get System GUID as the UUID's
//!   `bytes_le` (first three fields swapped).
//! - **OpenIPMI's `ipmi_sim`** (Debian `openipmi`), configured from a temporary
//!   lan.conf with a `chassis_control` script keeping the power state in a file. It
//!   refuses suite 17 (RMCP+ status 0x04, in a 2-byte Open Session Response),
//!   sends the lan.conf `guid` bytes as they are written, and with a `bmc_key` keys
//!   the session integrity key with K_g.
//!
//! A missing peer prints a "skipped" line, unless `NODEFENCE_REQUIRE_PEERS=1` (CI),
//! which makes it a failure. Passwords reach the peers through the environment or a
//! file, never a command line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use nodefence::config::{Credential, IpmiKey, IpmiPrivilege, IpmiTarget, SecretSource, Timeouts};
use nodefence::identity::{self, Equivalence, IdentityCheck, MachineIdentity, NodeIdentity};
use nodefence::power::ipmi::IpmiDriver;
use nodefence::power::{PowerDriver, PowerErrorKind, PowerState};
use tokio::sync::Semaphore;

use self::cli_common::{nodefence, text};
use self::peers::{
    GUID, PASSWORD, USER, ipmi_sim, ipmi_sim_with, pyghmi, wait_for, wait_for_line, write_config,
};

use crate::cli_common;
use crate::peers;

fn timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(2),
        request: Duration::from_secs(2),
        operation: Duration::from_secs(8),
        retries: 3,
    }
}

fn target(port: u16, password: &str, cipher_suite: Option<u8>) -> IpmiTarget {
    IpmiTarget {
        address: "127.0.0.1".into(),
        port,
        credential: Credential {
            username: USER.into(),
            password: password.to_string().into(),
            source: SecretSource::Inline,
        },
        cipher_suite,
        privilege: IpmiPrivilege::Administrator,
        kg: None,
        timeouts: timeouts(),
    }
}

fn driver(port: u16, password: &str, cipher_suite: Option<u8>) -> IpmiDriver {
    IpmiDriver::new(
        &target(port, password, cipher_suite),
        Arc::new(Semaphore::new(4)),
    )
    .unwrap()
}

fn node(uuid: &str) -> NodeIdentity {
    NodeIdentity {
        system_uuid: Some(uuid.into()),
        provider_id: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyghmi_reads_switches_and_identifies_the_machine() {
    let Some(bmc) = pyghmi("on").await else {
        return;
    };
    let d = driver(bmc.port, PASSWORD, None);
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    // pyghmi answers the suite-17 proposal with suite 3.
    assert_eq!(d.session_cipher_suite().await, Some(3));

    d.power_off().await.unwrap();
    wait_for_line(&bmc, "power off").await;
    assert_eq!(d.status().await.unwrap().state, PowerState::Off);
    d.power_on().await.unwrap();
    wait_for_line(&bmc, "power on").await;
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    assert_eq!(bmc.power_changes(), ["off", "on"]);

    // pyghmi sends uuid.bytes_le: the first three fields byte-swapped.
    let id = d.machine_identity().await.unwrap();
    assert_eq!(
        id,
        MachineIdentity::Uuid("33221100-5544-7766-8899-aabbccddeeff".into())
    );
    assert_eq!(
        identity::check(&node(GUID), &id),
        IdentityCheck::Match(Equivalence::FieldsSwapped)
    );
    // The GUID is read once per session; one session served all of it. pyghmi's
    // log arrives through a pipe after its reply, so wait for a later request's line
    // (it handles requests in order) before counting.
    d.machine_identity().await.unwrap();
    let statuses = bmc.requests(0x00, 0x01);
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    wait_for(&bmc, |b| b.requests(0x00, 0x01) > statuses).await;
    assert_eq!(bmc.requests(0x06, 0x37), 1, "{:?}", bmc.lines());
    d.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyghmi_only_speaks_suite_3() {
    let Some(bmc) = pyghmi("off").await else {
        return;
    };
    let d = driver(bmc.port, PASSWORD, Some(3));
    assert_eq!(d.status().await.unwrap().state, PowerState::Off);
    assert_eq!(d.session_cipher_suite().await, Some(3));
    d.close().await;
    let err = driver(bmc.port, PASSWORD, Some(17))
        .status()
        .await
        .unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Unsupported, "{err}");
    assert!(err.message.contains("suite 3"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyghmi_refuses_a_wrong_password_as_an_auth_error() {
    let Some(bmc) = pyghmi("on").await else {
        return;
    };
    let wrong = "Not-The-Pass-7";
    let err = driver(bmc.port, wrong, None).status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Auth, "{err}");
    assert!(err.message.contains("password"), "{err}");
    assert!(!err.to_string().contains(wrong), "{err}");
    assert!(!err.to_string().contains(PASSWORD), "{err}");
    assert!(bmc.power_changes().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_status_and_fence_off_through_pyghmi() {
    let Some(bmc) = pyghmi("on").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), bmc.port);

    let out = nodefence(&config, &["status", "-o", "json"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows[0]["node"], "db-1");
    assert_eq!(rows[0]["driver"], "ipmi");
    assert_eq!(
        rows[0]["endpoint"],
        format!("ipmi://127.0.0.1:{}", bmc.port)
    );
    assert_eq!(rows[0]["power"], "On");
    assert!(rows[0]["error"].is_null(), "{rows}");
    assert_eq!(rows[0]["machine"]["kind"], "uuid", "{rows}");

    let out = nodefence(
        &config,
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
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("db-1: confirmed Off"),
        "{}",
        text(&out)
    );
    wait_for_line(&bmc, "power off").await;
    assert_eq!(bmc.power_changes(), ["off"]);
    assert!(!text(&out).contains(PASSWORD));

    let out = nodefence(&config, &["status", "db-1"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains(" Off "), "{}", text(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipmi_sim_refuses_suite_17_so_the_driver_falls_back_to_3() {
    let Some(sim) = ipmi_sim(true).await else {
        return;
    };
    let d = driver(sim.port, PASSWORD, None);
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    assert_eq!(d.session_cipher_suite().await, Some(3));
    d.close().await;
    let err = driver(sim.port, PASSWORD, Some(17))
        .status()
        .await
        .unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Unsupported, "{err}");
    assert!(err.message.contains("refused cipher suite 17"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipmi_sim_reads_and_switches_power() {
    let Some(sim) = ipmi_sim(true).await else {
        return;
    };
    let d = driver(sim.port, PASSWORD, Some(3));
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    d.power_off().await.unwrap();
    assert_eq!(sim.power_file(), "0");
    assert_eq!(d.status().await.unwrap().state, PowerState::Off);
    d.power_on().await.unwrap();
    assert_eq!(sim.power_file(), "1");
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    assert_eq!(sim.power_sets(), ["power 0", "power 1"]);
    d.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipmi_sim_guid_is_reported_in_wire_order() {
    let Some(sim) = ipmi_sim(false).await else {
        return;
    };
    let d = driver(sim.port, PASSWORD, None);
    assert_eq!(d.status().await.unwrap().state, PowerState::Off);
    let id = d.machine_identity().await.unwrap();
    // ipmi_sim sends the lan.conf bytes as written.
    assert_eq!(id, MachineIdentity::Uuid(GUID.into()));
    // ipmitool shows it fully reversed ("IPMI encoding"); that is the same machine.
    assert_eq!(
        identity::check(&node("ffeeddcc-bbaa-9988-7766-554433221100"), &id),
        IdentityCheck::Match(Equivalence::Reversed)
    );
    d.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipmi_sim_refuses_a_wrong_password_as_an_auth_error() {
    let Some(sim) = ipmi_sim(true).await else {
        return;
    };
    let wrong = "Wrong-Pass-0";
    let err = driver(sim.port, wrong, None).status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Auth, "{err}");
    assert!(!err.to_string().contains(wrong), "{err}");
    assert_eq!(sim.power_file(), "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipmi_sim_with_a_bmc_key_needs_the_same_key() {
    // ipmi_sim keeps at most 19 bytes of a quoted key (then a NUL).
    const KG: &str = "kg-0123456789abcde";
    let Some(sim) = ipmi_sim_with(true, Some(KG)).await else {
        return;
    };
    let err = driver(sim.port, PASSWORD, None).status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Auth, "{err}");
    assert!(err.message.contains("K_g"), "{err}");

    let mut t = target(sim.port, PASSWORD, None);
    t.kg = Some(IpmiKey::new(b"another-key".to_vec()));
    let wrong = IpmiDriver::new(&t, Arc::new(Semaphore::new(1))).unwrap();
    let err = wrong.status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Auth, "{err}");
    assert!(err.message.contains("RAKP 4"), "{err}");

    // The SIK is keyed with K_g: the session works only with the BMC's key.
    t.kg = Some(IpmiKey::new(KG.as_bytes().to_vec()));
    let right = IpmiDriver::new(&t, Arc::new(Semaphore::new(1))).unwrap();
    assert_eq!(right.status().await.unwrap().state, PowerState::On);
    right.power_off().await.unwrap();
    assert_eq!(sim.power_file(), "0");
    right.close().await;
}
