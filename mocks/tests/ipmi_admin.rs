//! The mock IPMI BMC's admin side: the handle's power and GUID controls seen
//! through IPMI, the admin HTTP API over several BMCs, and the `mock-ipmi` binary
//! (command-line BMCs and a fixture file) driven by the console in `ipmi_common`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::ipmi_common;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use ipmi_common::{GUID, Login, Refused, admin_session, bmc, login, login_at};
use nodefence_ipmi_proto::command as cmd;
use nodefence_ipmi_proto::message::{NETFN_APP, NETFN_CHASSIS};
use nodefence_mocks::child_log::ChildLog;
use nodefence_mocks::ipmi::{
    ChassisControl, CipherSuite, MockIpmi, Power, Privilege, admin_router, status,
};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::timeout;

fn client() -> reqwest::Client {
    nodefence_mocks::tls::install_crypto_provider();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

async fn http(
    client: &reqwest::Client,
    method: &str,
    url: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = client.request(method.parse().unwrap(), url);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn admin_power_and_guid() {
    let bmc = bmc().await;
    let mut s = admin_session(&bmc, CipherSuite::Suite3).await;
    bmc.set_power(Power::Off);
    assert!(!s.status().await.power_on);
    let new = *b"another-guid-123";
    bmc.set_guid(new);
    assert_eq!(bmc.guid(), new);
    let (_, guid) = s.call(NETFN_APP, cmd::CMD_GET_SYSTEM_GUID, &[]).await;
    assert_eq!(guid, new);
    let s2 = login(&bmc, Login::admin(CipherSuite::Suite17))
        .await
        .unwrap();
    assert_eq!(s2.guid, new);
    assert!(
        bmc.control_log().is_empty(),
        "admin flips are not Chassis Controls"
    );
}

#[tokio::test]
async fn admin_http_api() {
    let a = MockIpmi::builder()
        .name("a")
        .guid(GUID)
        .start()
        .await
        .unwrap();
    let b = MockIpmi::builder().name("b").start().await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/admin", listener.local_addr().unwrap());
    let app = admin_router([&a, &b]);
    tokio::spawn(async move { axum::serve(listener, app).await });
    let c = client();

    let (st, list) = http(&c, "GET", &format!("{base}/bmcs"), None).await;
    assert_eq!(st, 200);
    assert_eq!(list[0]["name"], "a");
    assert_eq!(list[0]["guid"], "6e6f646566656e63652d677569642d31");
    assert_eq!(list[1]["addr"], b.addr().to_string());
    let off = Some(json!({"power": "off"}));
    assert_eq!(
        http(&c, "POST", &format!("{base}/b/power"), off).await,
        (200, json!({"power": "off"}))
    );
    assert_eq!(b.power(), Power::Off);
    assert_eq!(a.power(), Power::On);
    assert_eq!(
        http(&c, "GET", &format!("{base}/b/power"), None).await.1,
        json!({"power": "off"})
    );

    let fault = Some(json!({"completion_code": {"net_fn": 0, "cmd": 1, "code": 192}}));
    let (st, faults) = http(&c, "POST", &format!("{base}/a/faults"), fault).await;
    assert_eq!(
        (st, faults[0]["completion_code"]["code"].clone()),
        (200, json!(192))
    );
    let mut s = admin_session(&a, CipherSuite::Suite17).await;
    assert_eq!(s.call(NETFN_CHASSIS, 1, &[]).await.0, 0xC0);
    assert_eq!(
        http(&c, "DELETE", &format!("{base}/a/faults"), None)
            .await
            .0,
        204
    );
    assert!(a.faults().is_empty());
    assert_eq!(s.control(ChassisControl::PowerDown).await, 0);

    let (_, log) = http(&c, "GET", &format!("{base}/a/log"), None).await;
    assert_eq!(log["controls"][0]["op"], "power_down");
    assert_eq!(log["controls"][0]["username"], "admin");
    assert_eq!(log["sessions"][0]["suite"], 17);
    assert!(
        log["requests"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["completion_code"] == 192)
    );
    let (_, counters) = http(&c, "GET", &format!("{base}/a/counters"), None).await;
    assert_eq!(counters["active_sessions"], 1);
    let guid = Some(json!({"guid": "00112233445566778899aabbccddeeff"}));
    assert_eq!(
        http(&c, "POST", &format!("{base}/a/guid"), guid).await.0,
        200
    );
    assert_eq!(a.guid()[15], 0xFF);
    let expired = http(&c, "POST", &format!("{base}/a/sessions/expire"), None).await;
    assert_eq!(expired, (200, json!({"expired": 1})));
    assert_eq!(
        http(&c, "DELETE", &format!("{base}/a/log"), None).await.0,
        204
    );
    assert!(a.control_log().is_empty());

    assert_eq!(
        http(&c, "GET", &format!("{base}/zzz/power"), None).await.0,
        404
    );
    let bad = Some(json!({"power": "sideways"}));
    assert_eq!(
        http(&c, "POST", &format!("{base}/a/power"), bad).await.0,
        400
    );
    let bad = Some(json!("no_such_fault"));
    assert_eq!(
        http(&c, "POST", &format!("{base}/a/faults"), bad).await.0,
        400
    );
}

const BIN: &str = env!("CARGO_BIN_EXE_mock-ipmi");

/// A running `mock-ipmi` and its log (its stderr).
struct Running {
    child: tokio::process::Child,
    log: ChildLog,
}

/// Starts the binary, reads `lines` ready lines, and returns them.
async fn spawn(args: &[&str], lines: usize) -> (Running, Vec<String>) {
    let log = ChildLog::create(env!("CARGO_TARGET_TMPDIR"), "mock-ipmi");
    let mut child = tokio::process::Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log.stdio())
        .kill_on_drop(true)
        .spawn()
        .expect("spawning mock-ipmi");
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut got = Vec::new();
    for _ in 0..lines {
        let line = timeout(Duration::from_secs(20), out.next_line())
            .await
            .unwrap_or_else(|_| {
                panic!("mock-ipmi printed no ready line within 20 s; its log: {log}")
            })
            .unwrap()
            .unwrap_or_else(|| panic!("mock-ipmi exited before it was ready; its log: {log}"));
        got.push(line);
    }
    (Running { child, log }, got)
}

fn udp_addr(line: &str, name: &str) -> SocketAddr {
    let prefix = format!("mock-ipmi {name} listening on udp://");
    line.strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("unexpected line {line:?}"))
        .parse()
        .unwrap()
}

/// Stops the binary with SIGTERM; it must exit 0.
async fn terminate(mut running: Running) {
    let pid = running.child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status();
    assert!(killed.unwrap().success());
    let log = &running.log;
    let exit = timeout(Duration::from_secs(10), running.child.wait())
        .await
        .unwrap_or_else(|_| panic!("mock-ipmi did not stop within 10 s; its log: {log}"))
        .unwrap();
    assert_eq!(
        exit.code(),
        Some(0),
        "SIGTERM is a clean stop; its log: {log}"
    );
}

#[tokio::test]
async fn binary_serves_several_bmcs_and_the_admin_api() {
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("pw");
    std::fs::write(&pw, "fence-pw\n").unwrap();
    let (child, lines) = spawn(
        &[
            "--bmc",
            "n1=127.0.0.1:0",
            "--bmc",
            "n2=127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--username",
            "fencer",
            "--password-file",
            pw.to_str().unwrap(),
            "--privilege",
            "operator",
            "--kg-hex",
            "0x4b4b",
            "--suites",
            "17",
            "--power",
            "off",
        ],
        3,
    )
    .await;
    let admin = lines[0]
        .strip_prefix("mock-ipmi admin on ")
        .unwrap()
        .to_owned();
    let (n1, n2) = (udp_addr(&lines[1], "n1"), udp_addr(&lines[2], "n2"));
    assert_ne!(n1.port(), n2.port());
    let kg: &[u8] = b"KK";
    let fencer = Login {
        kg: Some(kg),
        ..Login::new("fencer", "fence-pw", CipherSuite::Suite17).role(0x13)
    };
    let mut s = login_at(n1, fencer).await.unwrap();
    assert!(!s.status().await.power_on);
    assert_eq!(s.set_privilege(Privilege::Operator).await, 0);
    assert_eq!(s.control(ChassisControl::PowerUp).await, 0);
    let c = client();
    let (_, p) = http(&c, "GET", &format!("{admin}/admin/n1/power"), None).await;
    assert_eq!(p, json!({"power": "on"}));
    let (_, p) = http(&c, "GET", &format!("{admin}/admin/n2/power"), None).await;
    assert_eq!(p, json!({"power": "off"}));
    let suite3 = Login {
        suite: CipherSuite::Suite3,
        ..fencer
    };
    let refused = login_at(n2, suite3).await.err();
    assert_eq!(refused, Some(Refused::Open(status::NO_CIPHER_SUITE_MATCH)));
    terminate(child).await;
}

#[tokio::test]
async fn binary_with_a_fixture() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("op.pw"), "op-secret").unwrap();
    let fixture = dir.path().join("rack.toml");
    std::fs::write(
        &fixture,
        r#"
        [[bmc]]
        name = "rack-1"
        guid = "000102030405060708090a0b0c0d0e0f"
        [[bmc.user]]
        name = "op"
        password_file = "op.pw"
        privilege = "operator"

        [[bmc]]
        name = "rack-2"
        power = "off"
        "#,
    )
    .unwrap();
    let (child, lines) = spawn(&["--fixture", fixture.to_str().unwrap()], 2).await;
    let (r1, r2) = (udp_addr(&lines[0], "rack-1"), udp_addr(&lines[1], "rack-2"));
    let op = Login::new("op", "op-secret", CipherSuite::Suite3).role(0x13);
    let s = login_at(r1, op).await.unwrap();
    assert_eq!(s.guid, std::array::from_fn(|i| i as u8));
    let mut s = login_at(r2, Login::admin(CipherSuite::Suite17))
        .await
        .unwrap();
    assert!(!s.status().await.power_on);
    terminate(child).await;
}
