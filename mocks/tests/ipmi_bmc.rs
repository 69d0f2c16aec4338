//! The mock IPMI BMC over real UDP, driven by the console in `ipmi_common`: the
//! RMCP+ handshake with cipher suites 3 and 17 (and K_g), every refusal status,
//! users and privileges, the session packet checks, retransmission, transitions,
//! session timeout and expiry, and the ASF presence ping.
//!
//! "No reply" is never asserted by waiting: the test waits (bounded) for the counter
//! that records the drop, then checks that the next datagram it receives is the
//! answer to a later request, so a stray reply would be caught.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::ipmi_common;

use std::time::Duration;

use ipmi_common::{
    Console, GUID, Login, Refused, SUITES, admin_session, bmc, counted, eventually, login, ops,
};
use nodefence_ipmi_proto::command::{self as cmd, ChannelAuthCapabilities};
use nodefence_ipmi_proto::message::{NETFN_APP, NETFN_CHASSIS};
use nodefence_ipmi_proto::rakp::{OpenSessionRequest, OpenSessionResponse};
use nodefence_ipmi_proto::rmcp::{self, PayloadType, V2Header};
use nodefence_mocks::ipmi::{
    ChassisControl, CipherSuite, Fault, MockIpmi, Power, Privilege, SessionEnd, status,
};
use tokio::time::Instant;

#[tokio::test]
async fn handshake_and_commands_with_both_suites() {
    for suite in SUITES {
        let bmc = bmc().await;
        let c = Console::to(bmc.addr()).await;
        let caps = c
            .ask_v15(&cmd::get_channel_auth_capabilities(
                0,
                Privilege::Administrator,
            ))
            .await;
        let (cc, data) = cmd::split_completion(&caps.data).unwrap();
        assert_eq!(cc, cmd::CC_OK);
        let caps = ChannelAuthCapabilities::decode(data).unwrap();
        assert!(caps.ipmi_v2 && !caps.kg_set && caps.non_null_users);
        // Cipher suites: v2.0 framing (ipmitool's) and v1.5 framing both work.
        for reply in [
            c.ask_v2(&cmd::get_channel_cipher_suites(1, 0)).await,
            c.ask_v15(&cmd::get_channel_cipher_suites(2, 0)).await,
        ] {
            let (cc, data) = cmd::split_completion(&reply.data).unwrap();
            assert_eq!(cc, cmd::CC_OK);
            let (_, records) = cmd::decode_cipher_suites_chunk(data).unwrap();
            assert_eq!(cmd::parse_cipher_suite_records(records).unwrap(), [3, 17]);
        }

        let mut s = login(&bmc, Login::admin(suite)).await.unwrap();
        assert_eq!(s.guid, GUID, "RAKP 2 carries the system GUID");
        // Sessions start at USER: status works, control does not.
        assert!(s.status().await.power_on);
        let denied = s.control(ChassisControl::PowerDown).await;
        assert_eq!(denied, cmd::CC_INSUFFICIENT_PRIVILEGE);
        let (cc, level) = s
            .call(NETFN_APP, cmd::CMD_SET_SESSION_PRIVILEGE, &[4])
            .await;
        assert_eq!((cc, level), (cmd::CC_OK, vec![4]));
        let (cc, guid) = s.call(NETFN_APP, cmd::CMD_GET_SYSTEM_GUID, &[]).await;
        assert_eq!((cc, cmd::decode_system_guid(&guid).unwrap()), (0, GUID));
        assert_eq!(s.call(NETFN_APP, cmd::CMD_GET_DEVICE_ID, &[]).await.0, 0);
        assert_eq!(
            s.call(NETFN_APP, 0x99, &[]).await.0,
            cmd::CC_INVALID_COMMAND
        );

        assert_eq!(s.control(ChassisControl::PowerDown).await, cmd::CC_OK);
        assert!(!s.status().await.power_on);
        assert_eq!(bmc.power(), Power::Off);
        assert_eq!(s.control(ChassisControl::PowerUp).await, cmd::CC_OK);
        assert_eq!(bmc.power(), Power::On);
        let log = bmc.control_log();
        assert_eq!(
            ops(&bmc),
            [ChassisControl::PowerDown, ChassisControl::PowerUp]
        );
        assert!(
            log.iter()
                .all(|c| c.session_id == s.bmc_id && c.username == "admin")
        );
        let controls: Vec<_> = bmc
            .request_log()
            .into_iter()
            .filter(|r| (r.net_fn, r.cmd) == (NETFN_CHASSIS, cmd::CMD_CHASSIS_CONTROL))
            .map(|r| (r.privilege, r.completion_code))
            .collect();
        assert_eq!(
            controls,
            [
                (Some(Privilege::User), Some(cmd::CC_INSUFFICIENT_PRIVILEGE)),
                (Some(Privilege::Administrator), Some(0)),
                (Some(Privilege::Administrator), Some(0)),
            ]
        );
        let pre: Vec<_> = bmc
            .request_log()
            .into_iter()
            .filter(|r| r.session_id.is_none())
            .map(|r| r.cmd)
            .collect();
        assert_eq!(pre, [0x38, 0x54, 0x54]);
        let sessions = bmc.session_log();
        assert_eq!(sessions.len(), 1);
        assert_eq!(
            (sessions[0].suite, sessions[0].max_privilege),
            (suite, Privilege::Administrator)
        );

        assert_eq!(s.close().await, cmd::CC_OK);
        let c = bmc.counters();
        assert_eq!((c.sessions_opened, c.sessions_closed), (1, 1));
        assert_eq!(c.active_sessions, 0);
        assert_eq!(
            bmc.session_log()[0].ended.map(|e| e.1),
            Some(SessionEnd::Closed)
        );
        let req = s.request(NETFN_CHASSIS, cmd::CMD_GET_CHASSIS_STATUS, &[]);
        s.send(&req).await;
        counted(
            &bmc,
            "a packet for the closed session",
            |c| c.dropped.unknown_session,
            1,
        )
        .await;
        bmc.shutdown().await;
    }
}

#[tokio::test]
async fn kg_is_announced_and_keys_the_session() {
    let kg: &[u8] = b"\x11bmc-key-of-20-bytes";
    // A console that fails at RAKP 4 leaves an established session on the BMC.
    let bmc = MockIpmi::builder()
        .kg(kg)
        .max_sessions(8)
        .start()
        .await
        .unwrap();
    let c = Console::to(bmc.addr()).await;
    let caps = c
        .ask_v15(&cmd::get_channel_auth_capabilities(
            0,
            Privilege::Administrator,
        ))
        .await;
    let caps = ChannelAuthCapabilities::decode(&caps.data[1..]).unwrap();
    assert!(caps.kg_set);
    for suite in SUITES {
        let mut s = login(
            &bmc,
            Login {
                kg: Some(kg),
                ..Login::admin(suite)
            },
        )
        .await
        .unwrap();
        assert!(s.status().await.power_on);
        let without = login(&bmc, Login::admin(suite)).await.err();
        assert_eq!(without, Some(Refused::Rakp4Mismatch));
        let wrong = Login {
            kg: Some(b"another key"),
            ..Login::admin(suite)
        };
        assert_eq!(login(&bmc, wrong).await.err(), Some(Refused::Rakp4Mismatch));
        assert_eq!(s.close().await, 0);
    }
}

#[tokio::test]
async fn open_session_refusals() {
    let only17 = MockIpmi::builder()
        .suites([CipherSuite::Suite17])
        .max_sessions(2)
        .start()
        .await
        .unwrap();
    let no_match = login(&only17, Login::admin(CipherSuite::Suite3))
        .await
        .err();
    assert_eq!(no_match, Some(Refused::Open(status::NO_CIPHER_SUITE_MATCH)));
    only17.set_fault(Fault::RefuseSuite { suite: 17 });
    let refused = login(&only17, Login::admin(CipherSuite::Suite17))
        .await
        .err();
    assert_eq!(refused, Some(Refused::Open(status::NO_CIPHER_SUITE_MATCH)));
    only17.clear_faults();
    // A malformed proposal (bad algorithm payload header) is an illegal parameter.
    let c = Console::to(only17.addr()).await;
    let mut bad = OpenSessionRequest {
        tag: 9,
        max_privilege: 0,
        console_session_id: 77,
        algorithms: CipherSuite::Suite17.algorithms(),
    }
    .encode();
    bad[11] = 4;
    let t = PayloadType::OpenSessionRequest;
    let body = c.ask(t, &bad, PayloadType::OpenSessionResponse).await;
    let resp = OpenSessionResponse::decode(&body).unwrap();
    assert_eq!(
        (resp.tag, resp.status, resp.console_session_id),
        (9, 0x12, 77)
    );

    // The session limit counts sessions; closing one frees a slot.
    let mut a = login(&only17, Login::admin(CipherSuite::Suite17))
        .await
        .unwrap();
    let _b = login(&only17, Login::admin(CipherSuite::Suite17))
        .await
        .unwrap();
    let full = login(&only17, Login::admin(CipherSuite::Suite17))
        .await
        .err();
    assert_eq!(full, Some(Refused::Open(status::INSUFFICIENT_RESOURCES)));
    assert_eq!(a.close().await, 0);
    assert!(
        login(&only17, Login::admin(CipherSuite::Suite17))
            .await
            .is_ok()
    );
    let c = only17.counters();
    assert_eq!((c.sessions_opened, c.handshakes_refused), (3, 4));
    assert_eq!(c.active_sessions, 2);
}

#[tokio::test]
async fn rakp_refusals() {
    let bmc = MockIpmi::builder()
        .user("admin", "password", Privilege::Administrator)
        .user("op", "op-pass", Privilege::Operator)
        .max_sessions(16)
        .start()
        .await
        .unwrap();
    for suite in SUITES {
        let bmc = &bmc;
        let refused = |l| async move { login(bmc, l).await.err() };
        let unknown = Login::new("nobody", "password", suite);
        assert_eq!(
            refused(unknown).await,
            Some(Refused::Rakp2(status::UNAUTHORIZED_NAME))
        );
        let op = Login::new("op", "op-pass", suite);
        // Name-only lookup, privilege above the user's limit.
        let too_high = refused(op.role(0x14)).await;
        assert_eq!(too_high, Some(Refused::Rakp2(status::UNAUTHORIZED_ROLE)));
        // Name + privilege lookup: no entry "op" allowed ADMINISTRATOR.
        let no_entry = refused(op.role(0x04)).await;
        assert_eq!(no_entry, Some(Refused::Rakp2(status::UNAUTHORIZED_NAME)));
        assert!(login(bmc, op.role(0x03)).await.is_ok());
        assert_eq!(
            refused(op.role(0x10)).await,
            Some(Refused::Rakp2(status::INVALID_ROLE))
        );
        // Open Session asked for USER at most; RAKP 1 asks for more.
        let capped = Login {
            open_privilege: 2,
            ..op.role(0x13)
        };
        assert_eq!(
            refused(capped).await,
            Some(Refused::Rakp2(status::UNAUTHORIZED_ROLE))
        );
        // Wrong password: the console catches RAKP 2 ...
        let wrong = Login::new("admin", "wrong", suite);
        assert_eq!(refused(wrong).await, Some(Refused::Rakp2Mismatch));
        // ... and the BMC catches RAKP 3.
        let bad3 = Login {
            rakp3_password: Some("wrong"),
            ..Login::admin(suite)
        };
        let bad3 = refused(bad3).await;
        assert_eq!(
            bad3,
            Some(Refused::Rakp4(status::INVALID_INTEGRITY_CHECK_VALUE))
        );
    }
    let c = bmc.counters();
    assert_eq!((c.sessions_opened, c.active_sessions), (2, 2));
    assert_eq!(c.handshakes_refused, 12);
}

#[tokio::test]
async fn privileges_limit_commands() {
    let bmc = MockIpmi::builder()
        .user("viewer", "v", Privilege::User)
        .user("op", "o", Privilege::Operator)
        .start()
        .await
        .unwrap();
    let mut viewer = login(
        &bmc,
        Login::new("viewer", "v", CipherSuite::Suite17).role(0x12),
    )
    .await
    .unwrap();
    assert!(viewer.status().await.power_on);
    let denied = viewer.control(ChassisControl::PowerDown).await;
    assert_eq!(denied, cmd::CC_INSUFFICIENT_PRIVILEGE);
    assert_eq!(viewer.set_privilege(Privilege::Operator).await, 0x81);
    assert_eq!(bmc.power(), Power::On);
    assert!(bmc.control_log().is_empty());

    let mut op = login(&bmc, Login::new("op", "o", CipherSuite::Suite3).role(0x13))
        .await
        .unwrap();
    let (cc, level) = op
        .call(NETFN_APP, cmd::CMD_SET_SESSION_PRIVILEGE, &[0])
        .await;
    assert_eq!(
        (cc, level),
        (0, vec![Privilege::User as u8]),
        "0 reads the level"
    );
    assert_eq!(op.set_privilege(Privilege::Administrator).await, 0x81);
    assert_eq!(op.set_privilege(Privilege::Operator).await, 0);
    assert_eq!(op.control(ChassisControl::PowerDown).await, 0);
    assert_eq!(bmc.power(), Power::Off);
    // Cycle, reset and soft shutdown make no sense while off.
    let off = op.control(ChassisControl::PowerCycle).await;
    assert_eq!(off, cmd::CC_NOT_IN_PRESENT_STATE);
    // One session may not close another unless it is ADMINISTRATOR.
    let other = viewer.bmc_id.to_le_bytes();
    assert_eq!(
        op.call(NETFN_APP, cmd::CMD_CLOSE_SESSION, &other).await.0,
        0x87
    );
    assert_eq!(ops(&bmc), [ChassisControl::PowerDown]);
    assert_eq!(bmc.control_log()[0].username, "op");
}

#[tokio::test]
async fn session_packets_are_checked_and_dropped_silently() {
    let bmc = bmc().await;
    let mut s = admin_session(&bmc, CipherSuite::Suite17).await;
    // A bad AuthCode.
    let req = s.request(NETFN_CHASSIS, cmd::CMD_GET_CHASSIS_STATUS, &[]);
    let mut forged = s.seal(&req);
    *forged.last_mut().unwrap() ^= 1;
    s.console.send(&forged).await;
    counted(&bmc, "bad AuthCode", |c| c.dropped.bad_auth_code, 1).await;
    // A replay, and a number far ahead of the window.
    let req = s.request(NETFN_CHASSIS, cmd::CMD_GET_CHASSIS_STATUS, &[]);
    let packet = s.seal(&req);
    s.console.send(&packet).await;
    s.reply_to(&req).await;
    s.console.send(&packet).await;
    counted(&bmc, "replay", |c| c.dropped.out_of_sequence, 1).await;
    let ahead = s.seal_as(&req, s.bmc_id, 1000);
    s.console.send(&ahead).await;
    counted(&bmc, "far ahead", |c| c.dropped.out_of_sequence, 2).await;
    // Another session id, and a plain packet with a session id.
    let stranger = s.seal_as(&req, s.bmc_id ^ 0x8000_0000, 99);
    s.console.send(&stranger).await;
    counted(&bmc, "unknown session", |c| c.dropped.unknown_session, 1).await;
    let header = V2Header {
        session_id: s.bmc_id,
        session_seq: 50,
        ..V2Header::pre_session(PayloadType::IpmiMessage)
    };
    let plain = rmcp::encode_v2_plain(&header, &req.encode().unwrap()).unwrap();
    s.console.send(&plain).await;
    counted(&bmc, "unprotected packet", |c| c.dropped.malformed, 1).await;
    // None of them got an answer: the next datagram answers the next request. Late
    // numbers inside the window are still accepted.
    let req = s.request(NETFN_CHASSIS, cmd::CMD_GET_CHASSIS_STATUS, &[]);
    // 2 went to the forged packet, which never counted.
    let late = s.seal_as(&req, s.bmc_id, 2);
    s.console.send(&late).await;
    s.reply_to(&req).await;
    assert_eq!(bmc.counters().active_sessions, 1);
}

#[tokio::test]
async fn retransmitted_request_is_answered_and_executed_again() {
    let bmc = bmc().await;
    let mut s = admin_session(&bmc, CipherSuite::Suite3).await;
    bmc.set_fault(Fault::DropReplies { count: Some(1) });
    let req = s.request(NETFN_CHASSIS, cmd::CMD_CHASSIS_CONTROL, &[0]);
    s.send(&req).await;
    counted(&bmc, "the dropped reply", |c| c.replies_dropped, 1).await;
    assert_eq!(
        bmc.power(),
        Power::Off,
        "the command ran although its reply was lost"
    );
    // Same rqSeq, new session sequence number.
    s.send(&req).await;
    let resp = s.reply_to(&req).await;
    assert_eq!(resp.data, [0]);
    assert_eq!(
        ops(&bmc),
        [ChassisControl::PowerDown, ChassisControl::PowerDown]
    );
    let seqs: Vec<u8> = bmc
        .request_log()
        .iter()
        .filter(|r| r.cmd == cmd::CMD_CHASSIS_CONTROL)
        .map(|r| r.rq_seq)
        .collect();
    assert_eq!(seqs, [req.seq, req.seq]);
    assert!(bmc.faults().is_empty());
}

#[tokio::test]
async fn transition_delay_keeps_the_old_state_until_it_lands() {
    let delay = Duration::from_millis(300);
    let bmc = MockIpmi::builder()
        .transition_delay(delay)
        .start()
        .await
        .unwrap();
    let mut s = admin_session(&bmc, CipherSuite::Suite17).await;
    let t0 = Instant::now();
    assert_eq!(s.control(ChassisControl::PowerDown).await, 0);
    assert!(
        s.status().await.power_on,
        "IPMI reports the old state meanwhile"
    );
    assert_eq!(bmc.power(), Power::On);
    let deadline = t0 + Duration::from_secs(3);
    while s.status().await.power_on {
        assert!(Instant::now() < deadline, "power never went off");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(t0.elapsed() >= delay);
    assert_eq!(bmc.power(), Power::Off);
    let at = bmc.control_log()[0].at;
    assert!(at >= t0 && at < t0 + delay);
    // An admin flip is immediate and cancels a pending transition.
    assert_eq!(s.control(ChassisControl::PowerUp).await, 0);
    bmc.set_power(Power::Off);
    tokio::time::sleep(delay + Duration::from_millis(50)).await;
    assert_eq!(bmc.power(), Power::Off);
    assert!(!s.status().await.power_on);
}

#[tokio::test]
async fn sessions_time_out_and_expire() {
    let bmc = MockIpmi::builder()
        .session_timeout(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let mut s = admin_session(&bmc, CipherSuite::Suite3).await;
    eventually("the idle session to time out", || {
        bmc.active_sessions() == 0
    })
    .await;
    let ended = bmc.session_log()[0].ended.map(|e| e.1);
    assert_eq!(ended, Some(SessionEnd::TimedOut));
    let req = s.request(NETFN_CHASSIS, cmd::CMD_GET_CHASSIS_STATUS, &[]);
    s.send(&req).await;
    counted(
        &bmc,
        "a packet after the timeout",
        |c| c.dropped.unknown_session,
        1,
    )
    .await;

    let mut s = admin_session(&bmc, CipherSuite::Suite17).await;
    assert_eq!(bmc.expire_sessions(), 1);
    let req = s.request(NETFN_CHASSIS, cmd::CMD_GET_CHASSIS_STATUS, &[]);
    s.send(&req).await;
    counted(
        &bmc,
        "a packet after expiry",
        |c| c.dropped.unknown_session,
        2,
    )
    .await;
    assert_eq!(bmc.counters().sessions_expired, 2);
}

#[tokio::test]
async fn asf_presence_ping() {
    let bmc = bmc().await;
    let c = Console::to(bmc.addr()).await;
    c.send(&[6, 0, 0xFF, 6, 0, 0, 0x11, 0xBE, 0x80, 0x2A, 0, 0])
        .await;
    let pong = c.recv().await;
    assert_eq!(pong.len(), 28);
    assert_eq!(
        &pong[..12],
        &[6, 0, 0xFF, 6, 0, 0, 0x11, 0xBE, 0x40, 0x2A, 0, 0x10]
    );
    assert_eq!(pong[20], 0x81, "IPMI supported");
}
