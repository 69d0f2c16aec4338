//! Shared helpers for the IPMI driver tests (`ipmi_driver.rs`, `ipmi_driver_faults.rs`):
//! a mock IPMI BMC on loopback UDP, an [`IpmiTarget`] aimed at it with short
//! deadlines, the driver built the way nodefence builds it ([`DriverFactory`]), a
//! config directory on disk for `nodefence::config::load` and the CLI, and readers
//! of the mock's logs.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nodefence::config::{
    Credential, IpmiKey, IpmiPrivilege, IpmiTarget, NodeTarget, PowerSource, SecretSource, Timeouts,
};
use nodefence::power::confirm::ConfirmPolicy;
use nodefence::power::registry::DriverFactory;
use nodefence::power::{PowerDriver, PowerError};
use nodefence_mocks::ipmi::{ChassisControl, MockIpmi, MockIpmiHandle, Privilege, RequestRecord};

use crate::cli_common::{write_agent_config, write_secret};

pub const USER: &str = "fencer";
/// At most 20 bytes (IPMI's limit).
pub const PASSWORD: &str = "Pw-9f3kQz-77xy";
/// The BMC key K_g, as text (at most 20 bytes).
pub const KG: &str = "Kg-Secret-4d2x!";
/// The system GUID the mocks send, in wire order.
pub const GUID: [u8; 16] = [
    0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff,
];
/// [`GUID`] as nodefence formats it (wire order, 8-4-4-4-12).
pub const GUID_TEXT: &str = "00112233-4455-6677-8899-aabbccddeeff";

/// IPMI network functions and commands, for reading the mock's request log.
pub const NETFN_CHASSIS: u8 = 0x00;
pub const NETFN_APP: u8 = 0x06;
pub const CMD_CHASSIS_STATUS: u8 = 0x01;
pub const CMD_CHASSIS_CONTROL: u8 = 0x02;
pub const CMD_AUTH_CAPABILITIES: u8 = 0x38;
pub const CMD_SET_SESSION_PRIVILEGE: u8 = 0x3B;
pub const CMD_CLOSE_SESSION: u8 = 0x3C;
pub const CMD_CIPHER_SUITES: u8 = 0x54;

/// Short deadlines: 500 ms per request (resent every 250 ms), 3 s per operation.
pub fn timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_millis(500),
        request: Duration::from_millis(500),
        operation: Duration::from_secs(3),
        retries: 3,
    }
}

/// A BMC with [`USER`] / [`PASSWORD`] (ADMINISTRATOR), suites 3 and 17, [`GUID`],
/// power on; tests add what they need before `start`.
pub fn bmc() -> MockIpmi {
    MockIpmi::builder()
        .user(USER, PASSWORD, Privilege::Administrator)
        .guid(GUID)
}

pub async fn start(builder: MockIpmi) -> MockIpmiHandle {
    builder.start().await.expect("mock IPMI BMC starts")
}

/// A target for `bmc`: [`USER`] / [`PASSWORD`], suite unset, ADMINISTRATOR, no K_g.
pub fn target(bmc: &MockIpmiHandle) -> IpmiTarget {
    IpmiTarget {
        address: "127.0.0.1".into(),
        port: bmc.port(),
        credential: Credential {
            username: USER.into(),
            password: PASSWORD.to_string().into(),
            source: SecretSource::Inline,
        },
        cipher_suite: None,
        privilege: IpmiPrivilege::Administrator,
        kg: None,
        timeouts: timeouts(),
    }
}

pub fn with_kg(mut t: IpmiTarget, kg: &str) -> IpmiTarget {
    t.kg = Some(IpmiKey::new(kg.as_bytes().to_vec()));
    t
}

pub fn with_user(mut t: IpmiTarget, user: &str, password: &str) -> IpmiTarget {
    t.credential.username = user.into();
    t.credential.password = password.to_string().into();
    t
}

pub fn node(t: &IpmiTarget) -> NodeTarget {
    NodeTarget {
        fallback: Vec::new(),
        origin: Default::default(),
        metal3_host: None,
        name: "db-1".into(),
        group: None,
        power: PowerSource::Ipmi(t.clone()),
        policy: Default::default(),
    }
}

/// The driver nodefence builds for `t`, or why it cannot.
pub fn try_driver(t: &IpmiTarget) -> Result<Arc<dyn PowerDriver>, PowerError> {
    DriverFactory::new(8).driver(&node(t))
}

pub fn driver(t: &IpmiTarget) -> Arc<dyn PowerDriver> {
    try_driver(t).expect("the factory builds an IPMI driver")
}

/// Two consecutive readings 50 ms apart, within 2 s.
pub fn policy() -> ConfirmPolicy {
    ConfirmPolicy {
        readings: 2,
        interval: Duration::from_millis(50),
        timeout: Duration::from_secs(2),
    }
}

/// For states that must *not* be confirmed: gives up after 600 ms.
pub fn short_policy() -> ConfirmPolicy {
    ConfirmPolicy {
        timeout: Duration::from_millis(600),
        ..policy()
    }
}

/// The Chassis Controls the BMC executed, oldest first.
pub fn controls(bmc: &MockIpmiHandle) -> Vec<ChassisControl> {
    bmc.control_log().into_iter().map(|c| c.op).collect()
}

/// The cipher suite of every session that completed the handshake, oldest first.
pub fn session_suites(bmc: &MockIpmiHandle) -> Vec<u8> {
    bmc.session_log().iter().map(|s| s.suite.id()).collect()
}

/// The requests for (net_fn, cmd) the BMC received, oldest first.
pub fn requests(bmc: &MockIpmiHandle, net_fn: u8, cmd: u8) -> Vec<RequestRecord> {
    bmc.request_log()
        .into_iter()
        .filter(|r| r.net_fn == net_fn && r.cmd == cmd)
        .collect()
}

/// Polls `cond` every 20 ms until it holds; panics after `limit`.
pub async fn wait_until<F, Fut>(what: &str, limit: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let give_up = tokio::time::Instant::now() + limit;
    loop {
        if cond().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Panics if `text` contains any of `secrets`, as text or as a Debug byte list.
pub fn assert_no_secret(text: &str, secrets: &[&str]) {
    for secret in secrets {
        assert!(!text.contains(secret), "a secret leaked into: {text}");
        let bytes = format!("{:?}", secret.as_bytes());
        let inner = bytes.trim_start_matches('[').trim_end_matches(']');
        assert!(
            !text.contains(inner),
            "a secret's bytes leaked into: {text}"
        );
        let hex: String = secret.bytes().map(|b| format!("{b:02x}")).collect();
        assert!(!text.contains(&hex), "a secret's hex leaked into: {text}");
    }
}

/// Writes `nodefence.toml`, `inventory.toml` (one node, `db-1`, driver ipmi, aimed at
/// `port` with the short deadlines), `bmc-password` and, with `kg`, `bmc-kg` (text or
/// `0x` hex, referenced by `kg_file`). `extra` is appended to the node's table.
/// Returns the path of `nodefence.toml`.
pub fn write_config(dir: &Path, port: u16, kg: Option<&str>, extra: &str) -> PathBuf {
    write_secret(&dir.join("bmc-password"), PASSWORD);
    let mut node = String::from("[nodes.db-1]\n");
    if let Some(kg) = kg {
        write_secret(&dir.join("bmc-kg"), kg);
        node.push_str("kg_file = \"bmc-kg\"\n");
    }
    node.push_str(extra);
    let config = write_agent_config(dir, 2, "50ms", "3s");
    std::fs::write(
        dir.join("inventory.toml"),
        format!(
            "[defaults]\ndriver = \"ipmi\"\naddress = \"127.0.0.1\"\nport = {port}\n\
             username = \"{USER}\"\npassword_file = \"bmc-password\"\n\
             connect_timeout = \"500ms\"\nrequest_timeout = \"500ms\"\n\
             operation_timeout = \"3s\"\nretries = 3\n\n{node}"
        ),
    )
    .unwrap();
    config
}
