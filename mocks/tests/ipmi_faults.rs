//! Every `Fault` of the mock IPMI BMC, observed from the console side over real
//! UDP: lost incoming datagrams, slow and dropped replies, an impostor RAKP 2, a
//! lying power state, ignored Chassis Controls, injected completion codes, an
//! unanswered Get Channel Cipher Suites, and garbled replies.
//!
//! "No reply" is never asserted by waiting: the test waits (bounded) for the counter
//! that records the drop, then checks that the next datagram it receives is the
//! answer to a later request, so a stray reply would be caught.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::ipmi_common;

use std::time::Duration;

use ipmi_common::{
    Console, Login, Refused, SUITES, admin_session, bmc, counted, eventually, login, ops,
};
use nodefence_ipmi_proto::Error as ProtoError;
use nodefence_ipmi_proto::command as cmd;
use nodefence_ipmi_proto::message::NETFN_CHASSIS;
use nodefence_ipmi_proto::rmcp::{self, PayloadType, V2Header};
use nodefence_mocks::ipmi::{ChassisControl, CipherSuite, Fault, Garble, Power, Privilege};
use tokio::time::Instant;

#[tokio::test]
async fn incoming_loss_faults() {
    let bmc = bmc().await;
    let c = Console::to(bmc.addr()).await;
    let caps = |seq| cmd::get_channel_auth_capabilities(seq, Privilege::Administrator);
    let v15 = |seq| rmcp::encode_v15(0, 0, &caps(seq).encode().unwrap()).unwrap();
    bmc.set_fault(Fault::DropIncoming { count: 2 });
    c.send(&v15(1)).await;
    c.send(&v15(2)).await;
    counted(&bmc, "two dropped datagrams", |c| c.dropped.injected, 2).await;
    assert_eq!(c.ask_v15(&caps(3)).await.seq, 3);
    bmc.set_fault(Fault::Loss { percent: 100 });
    c.send(&v15(4)).await;
    counted(&bmc, "a lost datagram", |c| c.dropped.injected, 3).await;
    assert_eq!(bmc.faults(), [Fault::Loss { percent: 100 }]);
    bmc.clear_faults();
    assert_eq!(c.ask_v15(&caps(5)).await.seq, 5);
    let seqs: Vec<u8> = bmc.request_log().iter().map(|r| r.rq_seq).collect();
    assert_eq!(seqs, [3, 5], "dropped datagrams were never processed");
}

#[tokio::test]
async fn slow_and_dropped_replies() {
    let bmc = bmc().await;
    let mut s = admin_session(&bmc, CipherSuite::Suite3).await;
    let slow = Duration::from_millis(300);
    bmc.set_fault(Fault::Slow(slow));
    let t0 = Instant::now();
    assert!(s.status().await.power_on);
    assert!(t0.elapsed() >= slow);
    bmc.clear_faults();
    bmc.set_fault(Fault::DropReplies { count: None });
    let req = s.request(NETFN_CHASSIS, cmd::CMD_CHASSIS_CONTROL, &[0]);
    s.send(&req).await;
    s.send(&req).await;
    counted(&bmc, "two dropped replies", |c| c.replies_dropped, 2).await;
    assert_eq!(ops(&bmc).len(), 2);
    bmc.clear_faults();
    assert!(!s.status().await.power_on);
    // Only the replies to one command.
    bmc.set_fault(Fault::DropRepliesTo {
        net_fn: NETFN_CHASSIS,
        cmd: cmd::CMD_CHASSIS_CONTROL,
        count: None,
    });
    let req = s.request(NETFN_CHASSIS, cmd::CMD_CHASSIS_CONTROL, &[1]);
    s.send(&req).await;
    counted(&bmc, "the dropped control reply", |c| c.replies_dropped, 3).await;
    assert_eq!(bmc.power(), Power::On);
    assert!(s.status().await.power_on, "other replies still arrive");
}

#[tokio::test]
async fn impostor_rakp2_fails_the_console_check() {
    let bmc = bmc().await;
    bmc.set_fault(Fault::ImpostorRakp2);
    for suite in SUITES {
        let got = login(&bmc, Login::admin(suite)).await.err();
        assert_eq!(got, Some(Refused::Rakp2Mismatch));
    }
    bmc.clear_faults();
    assert!(login(&bmc, Login::admin(CipherSuite::Suite3)).await.is_ok());
}

#[tokio::test]
async fn lying_state_and_ignored_control() {
    let bmc = bmc().await;
    let mut s = admin_session(&bmc, CipherSuite::Suite17).await;
    bmc.set_fault(Fault::LyingPowerState);
    assert!(!s.status().await.power_on, "says off");
    assert_eq!(bmc.power(), Power::On, "is on");
    bmc.clear_faults();
    bmc.set_fault(Fault::IgnoreChassisControl);
    assert_eq!(
        s.control(ChassisControl::PowerDown).await,
        0,
        "acknowledged"
    );
    assert_eq!(bmc.power(), Power::On, "and ignored");
    assert!(bmc.control_log().is_empty());
    let last = bmc.request_log().pop().unwrap();
    assert_eq!(
        (last.cmd, last.completion_code),
        (cmd::CMD_CHASSIS_CONTROL, Some(0))
    );
}

#[tokio::test]
async fn injected_completion_codes() {
    let bmc = bmc().await;
    let mut s = admin_session(&bmc, CipherSuite::Suite3).await;
    bmc.set_fault(Fault::CompletionCode {
        net_fn: NETFN_CHASSIS,
        cmd: cmd::CMD_GET_CHASSIS_STATUS,
        code: cmd::CC_NODE_BUSY,
        count: Some(1),
    });
    bmc.set_fault(Fault::CompletionCode {
        net_fn: NETFN_CHASSIS,
        cmd: cmd::CMD_CHASSIS_CONTROL,
        code: 0xD5,
        count: None,
    });
    let busy = s
        .call(NETFN_CHASSIS, cmd::CMD_GET_CHASSIS_STATUS, &[])
        .await;
    assert_eq!(busy, (cmd::CC_NODE_BUSY, vec![]));
    assert!(s.status().await.power_on, "only once");
    for _ in 0..2 {
        assert_eq!(s.control(ChassisControl::PowerDown).await, 0xD5);
    }
    assert_eq!(bmc.power(), Power::On);
    assert!(bmc.control_log().is_empty());
    assert_eq!(bmc.faults().len(), 1);
}

#[tokio::test]
async fn unanswered_cipher_suites() {
    let bmc = bmc().await;
    bmc.set_fault(Fault::NoCipherSuitesReply);
    let c = Console::to(bmc.addr()).await;
    let req = cmd::get_channel_cipher_suites(7, 0);
    let t = PayloadType::IpmiMessage;
    let bytes = rmcp::encode_v2_plain(&V2Header::pre_session(t), &req.encode().unwrap());
    c.send(&bytes.unwrap()).await;
    eventually("the logged request", || bmc.request_log().len() == 1).await;
    assert_eq!(bmc.request_log()[0].completion_code, None);
    let caps = cmd::get_channel_auth_capabilities(8, Privilege::Administrator);
    assert_eq!(
        c.ask_v15(&caps).await.seq,
        8,
        "the next datagram answers this"
    );
}

#[tokio::test]
async fn garbled_replies() {
    let bmc = bmc().await;
    let mut s = admin_session(&bmc, CipherSuite::Suite17).await;
    for (garble, check) in [
        (Garble::RandomBytes, None),
        (Garble::Truncated, None),
        (Garble::BadAuthCode, Some(ProtoError::BadAuthCode)),
    ] {
        bmc.set_fault(Fault::GarbledReplies(garble));
        let req = s.request(NETFN_CHASSIS, cmd::CMD_CHASSIS_CONTROL, &[1]);
        s.send(&req).await;
        let got = s.open(&s.console.recv().await);
        assert!(got.is_err(), "{garble:?} reply opened: {got:?}");
        if let Some(want) = check {
            assert_eq!(got.err(), Some(want));
        }
    }
    assert_eq!(ops(&bmc).len(), 3, "the commands still ran");
    bmc.clear_faults();
    assert!(s.status().await.power_on);
}
