//! Interoperability with the real `ipmitool` (lanplus interface, Debian package
//! `ipmitool`): if the reference client can open sessions with cipher suites 3 and
//! 17, with and without K_g, read and switch power, and is refused exactly where a
//! real BMC refuses it, the mock (and the `nodefence-ipmi-proto` crypto it shares
//! with nodefence's driver) is faithful. ipmitool -C 17 is the independent check of
//! the suite-17 key derivation.
//!
//! Every assertion is also made on the mock's own state (real power, control log,
//! session log, counters), not only on ipmitool's output. The password goes through
//! `IPMI_PASSWORD` with `-E`, never on a command line. Without ipmitool these tests
//! print a "skipped" line, unless `NODEFENCE_REQUIRE_PEERS=1`, which makes its
//! absence a failure (CI).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nodefence_mocks::ipmi::{
    ChassisControl, CipherSuite, Fault, MockIpmi, MockIpmiHandle, Power, Privilege, SessionEnd, hex,
};
use tokio::process::Command;

/// ipmitool, or `None` after the test is reported skipped.
fn ipmitool() -> Option<PathBuf> {
    nodefence_mocks::peers::ipmitool()
}

/// What one ipmitool run did.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn ok(&self) -> bool {
        self.code == Some(0)
    }
}

/// How ipmitool logs in.
#[derive(Debug, Clone, Copy)]
struct As<'a> {
    user: &'a str,
    password: &'a str,
    /// `-C`; `None` lets ipmitool pick the best suite the BMC lists.
    suite: Option<CipherSuite>,
    /// `-L`.
    privilege: Option<&'a str>,
    /// `-y`.
    kg_hex: Option<&'a str>,
}

impl<'a> As<'a> {
    fn admin(suite: CipherSuite) -> Self {
        Self {
            user: "admin",
            password: "password",
            suite: Some(suite),
            privilege: None,
            kg_hex: None,
        }
    }
}

/// Runs `ipmitool -I lanplus ... <command>` against `bmc`.
async fn ipmi(tool: &Path, bmc: &MockIpmiHandle, who: As<'_>, command: &[&str]) -> Run {
    let mut cmd = Command::new(tool);
    cmd.args(["-I", "lanplus", "-H", "127.0.0.1", "-p"])
        .arg(bmc.port().to_string())
        .args(["-U", who.user, "-E", "-N", "1", "-R", "2"])
        .env("IPMI_PASSWORD", who.password)
        .env_remove("IPMI_KGKEY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(s) = who.suite {
        cmd.args(["-C", &s.id().to_string()]);
    }
    if let Some(p) = who.privilege {
        cmd.args(["-L", p]);
    }
    if let Some(kg) = who.kg_hex {
        cmd.args(["-y", kg]);
    }
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.args(command).output())
        .await
        .expect("ipmitool finished in time")
        .expect("ipmitool ran");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

async fn status(tool: &Path, bmc: &MockIpmiHandle, who: As<'_>) -> String {
    let run = ipmi(tool, bmc, who, &["chassis", "power", "status"]).await;
    assert!(run.ok(), "{run:?}");
    run.stdout.trim().to_owned()
}

fn ops(bmc: &MockIpmiHandle) -> Vec<ChassisControl> {
    bmc.control_log().iter().map(|c| c.op).collect()
}

/// Every session ipmitool opened used `suite` and was closed by it, and the BMC
/// dropped nothing: ipmitool's AuthCodes, pads and sequence numbers all verified.
fn assert_clean_sessions(bmc: &MockIpmiHandle, suite: CipherSuite) {
    let sessions = bmc.session_log();
    assert!(!sessions.is_empty());
    for s in &sessions {
        assert_eq!(s.suite, suite, "{s:?}");
        assert_eq!(s.ended.map(|e| e.1), Some(SessionEnd::Closed), "{s:?}");
    }
    let c = bmc.counters();
    assert_eq!(c.active_sessions, 0);
    assert_eq!(c.dropped, Default::default(), "{c:?}");
}

async fn off_and_on(suite: CipherSuite) {
    let Some(tool) = ipmitool() else { return };
    let bmc = MockIpmi::builder().start().await.unwrap();
    let who = As::admin(suite);
    assert_eq!(status(&tool, &bmc, who).await, "Chassis Power is on");

    let off = ipmi(&tool, &bmc, who, &["chassis", "power", "off"]).await;
    assert!(off.ok(), "{off:?}");
    assert!(off.stdout.contains("Down/Off"), "{off:?}");
    assert_eq!(bmc.power(), Power::Off);
    assert_eq!(ops(&bmc), [ChassisControl::PowerDown]);
    assert_eq!(status(&tool, &bmc, who).await, "Chassis Power is off");

    let on = ipmi(&tool, &bmc, who, &["chassis", "power", "on"]).await;
    assert!(on.ok(), "{on:?}");
    assert!(on.stdout.contains("Up/On"), "{on:?}");
    assert_eq!(bmc.power(), Power::On);
    assert_eq!(status(&tool, &bmc, who).await, "Chassis Power is on");

    assert_eq!(
        ops(&bmc),
        [ChassisControl::PowerDown, ChassisControl::PowerUp]
    );
    let controls: Vec<_> = bmc
        .request_log()
        .into_iter()
        .filter(|r| (r.net_fn, r.cmd) == (0x00, 0x02))
        .map(|r| (r.privilege, r.completion_code))
        .collect();
    let at_admin = (Some(Privilege::Administrator), Some(0));
    assert_eq!(controls, [at_admin, at_admin]);
    assert_eq!(bmc.session_log().len(), 5);
    assert_clean_sessions(&bmc, suite);
}

#[tokio::test]
async fn suite_3_status_off_on() {
    off_and_on(CipherSuite::Suite3).await;
}

#[tokio::test]
async fn suite_17_status_off_on() {
    off_and_on(CipherSuite::Suite17).await;
}

#[tokio::test]
async fn kg_with_both_suites() {
    let Some(tool) = ipmitool() else { return };
    // ipmitool uses K_g only if its first byte is non-zero.
    let kg = b"\x42nodefence-bmc-key!!";
    let bmc = MockIpmi::builder().kg(*kg).start().await.unwrap();
    let kg_hex = hex(kg);
    for suite in [CipherSuite::Suite3, CipherSuite::Suite17] {
        bmc.set_power(Power::On);
        let who = As {
            kg_hex: Some(&kg_hex),
            ..As::admin(suite)
        };
        assert_eq!(status(&tool, &bmc, who).await, "Chassis Power is on");
        let off = ipmi(&tool, &bmc, who, &["chassis", "power", "off"]).await;
        assert!(off.ok(), "{off:?}");
        assert_eq!(bmc.power(), Power::Off);
    }
    assert_eq!(ops(&bmc), [ChassisControl::PowerDown; 2]);
    let suites: Vec<u8> = bmc.session_log().iter().map(|s| s.suite.id()).collect();
    assert_eq!(suites, [3, 3, 17, 17]);

    bmc.set_power(Power::On);
    let opened = bmc.counters().sessions_opened;
    let wrong_hex = hex(b"\x42another-key");
    for kg_hex in [None, Some(wrong_hex.as_str())] {
        let who = As {
            kg_hex,
            ..As::admin(CipherSuite::Suite17)
        };
        let run = ipmi(&tool, &bmc, who, &["chassis", "power", "off"]).await;
        // ipmitool 1.8.19 exits 0 when -y is given and the session fails, so only
        // its message and the BMC's state tell.
        assert!(kg_hex.is_some() || !run.ok(), "{run:?}");
        assert!(run.stderr.contains("Unable to establish"), "{run:?}");
        assert!(!run.stdout.contains("Down/Off"), "{run:?}");
    }
    assert_eq!(bmc.power(), Power::On);
    assert_eq!(ops(&bmc).len(), 2, "no Chassis Control got through");
    // The BMC completed RAKP 4; ipmitool refused its integrity check value and never
    // sent a command.
    assert_eq!(bmc.counters().sessions_opened, opened + 2);
}

#[tokio::test]
async fn wrong_password_fails() {
    let Some(tool) = ipmitool() else { return };
    let bmc = MockIpmi::builder().start().await.unwrap();
    for suite in [CipherSuite::Suite3, CipherSuite::Suite17] {
        let who = As {
            password: "not-the-password",
            ..As::admin(suite)
        };
        let run = ipmi(&tool, &bmc, who, &["chassis", "power", "off"]).await;
        assert!(!run.ok(), "{run:?}");
        assert!(run.stderr.contains("Unable to establish"), "{run:?}");
    }
    assert_eq!(bmc.power(), Power::On);
    assert!(bmc.control_log().is_empty());
    assert_eq!(bmc.counters().sessions_opened, 0);
}

#[tokio::test]
async fn operator_user_can_power_off() {
    let Some(tool) = ipmitool() else { return };
    let bmc = MockIpmi::builder()
        .user("fencer", "fence-pw", Privilege::Operator)
        .start()
        .await
        .unwrap();
    let fencer = As {
        user: "fencer",
        password: "fence-pw",
        suite: Some(CipherSuite::Suite17),
        privilege: Some("OPERATOR"),
        kg_hex: None,
    };
    let off = ipmi(&tool, &bmc, fencer, &["chassis", "power", "off"]).await;
    assert!(off.ok(), "{off:?}");
    assert_eq!(bmc.power(), Power::Off);
    let log = bmc.control_log();
    assert_eq!(log.len(), 1);
    assert_eq!(
        (log[0].op, log[0].username.as_str()),
        (ChassisControl::PowerDown, "fencer")
    );
    let set_privilege = bmc.request_log().into_iter().find(|r| r.cmd == 0x3B);
    assert_eq!(set_privilege.map(|r| r.data), Some(vec![3]));
    assert_eq!(bmc.session_log()[0].max_privilege, Privilege::Operator);

    // Without -L, ipmitool asks for ADMINISTRATOR, which this user does not have.
    let admin = As {
        privilege: None,
        ..fencer
    };
    let run = ipmi(&tool, &bmc, admin, &["chassis", "power", "on"]).await;
    assert!(!run.ok(), "{run:?}");
    assert_eq!(bmc.power(), Power::Off);
    assert_eq!(bmc.counters().handshakes_refused, 1);
}

#[tokio::test]
async fn user_privilege_is_refused_power_control() {
    let Some(tool) = ipmitool() else { return };
    let bmc = MockIpmi::builder()
        .user("viewer", "view-pw", Privilege::User)
        .start()
        .await
        .unwrap();
    let viewer = As {
        user: "viewer",
        password: "view-pw",
        suite: Some(CipherSuite::Suite3),
        privilege: Some("USER"),
        kg_hex: None,
    };
    assert_eq!(status(&tool, &bmc, viewer).await, "Chassis Power is on");
    let off = ipmi(&tool, &bmc, viewer, &["chassis", "power", "off"]).await;
    assert!(!off.ok(), "{off:?}");
    assert!(
        off.stderr.contains("Insufficient privilege level"),
        "{off:?}"
    );
    assert_eq!(bmc.power(), Power::On);
    assert!(bmc.control_log().is_empty());
    let refused = bmc
        .request_log()
        .into_iter()
        .find(|r| r.cmd == 0x02 && r.net_fn == 0);
    let refused = refused.expect("the Chassis Control reached the BMC");
    assert_eq!(
        (refused.privilege, refused.completion_code),
        (Some(Privilege::User), Some(0xD4))
    );
    assert_clean_sessions(&bmc, CipherSuite::Suite3);
}

#[tokio::test]
async fn ipmitool_picks_the_best_listed_suite() {
    let Some(tool) = ipmitool() else { return };
    for (offered, picked) in [
        (
            vec![CipherSuite::Suite3, CipherSuite::Suite17],
            CipherSuite::Suite17,
        ),
        (vec![CipherSuite::Suite3], CipherSuite::Suite3),
    ] {
        let bmc = MockIpmi::builder().suites(offered).start().await.unwrap();
        let who = As {
            suite: None,
            ..As::admin(CipherSuite::Suite3)
        };
        assert_eq!(status(&tool, &bmc, who).await, "Chassis Power is on");
        assert_clean_sessions(&bmc, picked);
        let asked = bmc
            .request_log()
            .into_iter()
            .any(|r| r.cmd == 0x54 && r.session_id.is_none());
        assert!(
            asked,
            "ipmitool read the cipher suite list before the session"
        );
    }
}

#[tokio::test]
async fn unoffered_suite_is_refused_with_no_matching_cipher_suite() {
    let Some(tool) = ipmitool() else { return };
    let bmc = MockIpmi::builder()
        .suites([CipherSuite::Suite17])
        .start()
        .await
        .unwrap();
    let run = ipmi(
        &tool,
        &bmc,
        As::admin(CipherSuite::Suite3),
        &["chassis", "power", "status"],
    )
    .await;
    assert!(!run.ok(), "{run:?}");
    assert!(run.stderr.contains("no matching cipher suite"), "{run:?}");
    assert_eq!(bmc.counters().handshakes_refused, 1);
}

#[tokio::test]
async fn system_guid_bytes_as_sent() {
    let Some(tool) = ipmitool() else { return };
    let guid = *b"\x01\x23\x45\x67\x89\xab\xcd\xef\xfe\xdc\xba\x98\x76\x54\x32\x10";
    let bmc = MockIpmi::builder().guid(guid).start().await.unwrap();
    let run = ipmi(
        &tool,
        &bmc,
        As::admin(CipherSuite::Suite17),
        &["raw", "0x06", "0x37"],
    )
    .await;
    assert!(run.ok(), "{run:?}");
    let got: String = run.stdout.split_whitespace().collect();
    assert_eq!(got, hex(&guid));
}

#[tokio::test]
async fn lost_reply_is_retransmitted_and_executes_twice() {
    let Some(tool) = ipmitool() else { return };
    let bmc = MockIpmi::builder().start().await.unwrap();
    // The reply to the Chassis Control is lost once: ipmitool times out (-N 1) and
    // retransmits it (same rqSeq, next session sequence number); the BMC runs it
    // again and answers.
    bmc.set_fault(Fault::DropRepliesTo {
        net_fn: 0x00,
        cmd: 0x02,
        count: Some(1),
    });
    let off = ipmi(
        &tool,
        &bmc,
        As::admin(CipherSuite::Suite3),
        &["chassis", "power", "off"],
    )
    .await;
    assert!(off.ok(), "{off:?}");
    assert_eq!(bmc.counters().replies_dropped, 1);
    assert_eq!(ops(&bmc), [ChassisControl::PowerDown; 2]);
    let seqs: Vec<u8> = bmc
        .request_log()
        .into_iter()
        .filter(|r| (r.net_fn, r.cmd) == (0x00, 0x02))
        .map(|r| r.rq_seq)
        .collect();
    assert_eq!(seqs.len(), 2);
    assert_eq!(seqs[0], seqs[1], "a retransmission, not a new request");
    assert_clean_sessions(&bmc, CipherSuite::Suite3);
}

#[tokio::test]
async fn node_busy_fails_the_command() {
    let Some(tool) = ipmitool() else { return };
    let bmc = MockIpmi::builder().start().await.unwrap();
    let who = As::admin(CipherSuite::Suite17);
    bmc.set_fault(Fault::CompletionCode {
        net_fn: 0x00,
        cmd: 0x02,
        code: 0xC0,
        count: Some(1),
    });
    let off = ipmi(&tool, &bmc, who, &["chassis", "power", "off"]).await;
    assert!(
        !off.ok(),
        "a node-busy answer is an error for ipmitool: {off:?}"
    );
    assert!(off.stderr.contains("Node busy"), "{off:?}");
    assert_eq!(bmc.power(), Power::On, "not executed");
    assert!(bmc.control_log().is_empty());
    let off = ipmi(&tool, &bmc, who, &["chassis", "power", "off"]).await;
    assert!(off.ok(), "{off:?}");
    assert_eq!(ops(&bmc), [ChassisControl::PowerDown]);
}
