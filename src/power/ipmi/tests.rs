//! The driver against the scriptable fake BMC ([`super::fake`]): the happy path, and
//! every way a BMC or the network can misbehave ending in an error, never in Off.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use nodefence_ipmi_proto::command::{
    CMD_CHASSIS_CONTROL, CMD_GET_SYSTEM_GUID, CMD_SET_SESSION_PRIVILEGE,
};
use nodefence_ipmi_proto::crypto::CipherSuite;
use nodefence_ipmi_proto::message::{NETFN_APP, NETFN_CHASSIS};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::fake::{Behaviour, FakeBmc};
use super::*;
use crate::config::{Credential, IpmiKey, IpmiPrivilege, IpmiTarget, SecretSource, Timeouts};
use crate::power::PowerErrorKind;

fn timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(1),
        request: Duration::from_secs(1),
        operation: Duration::from_secs(3),
        retries: 3,
    }
}

fn target(port: u16, password: &str) -> IpmiTarget {
    IpmiTarget {
        address: "127.0.0.1".into(),
        port,
        credential: Credential {
            username: "fence".into(),
            password: password.to_string().into(),
            source: SecretSource::Inline,
        },
        cipher_suite: None,
        privilege: IpmiPrivilege::Administrator,
        kg: None,
        timeouts: timeouts(),
    }
}

fn driver(t: &IpmiTarget) -> IpmiDriver {
    IpmiDriver::new(t, Arc::new(Semaphore::new(4))).unwrap()
}

async fn start(b: Behaviour) -> (FakeBmc, IpmiDriver) {
    let password = b.password;
    let bmc = FakeBmc::start(b).await;
    let d = driver(&target(bmc.addr.port(), password));
    (bmc, d)
}

/// Waits (at most 2 s) for the fake to have processed `n` Close Sessions: those sent
/// without waiting for a reply may still be in flight when a call returns.
async fn closes(bmc: &FakeBmc, n: u32) -> u32 {
    for _ in 0..200 {
        if bmc.record().closes >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    bmc.record().closes
}

#[tokio::test]
async fn reads_switches_and_identifies_in_one_reused_session() {
    let (bmc, d) = start(Behaviour::default()).await;
    assert_eq!(d.driver_name(), "ipmi");
    assert_eq!(
        d.endpoint(),
        format!("ipmi://127.0.0.1:{}", bmc.addr.port())
    );
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    d.power_off().await.unwrap();
    assert_eq!(d.status().await.unwrap().state, PowerState::Off);
    d.power_on().await.unwrap();
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    let id = d.machine_identity().await.unwrap();
    // Wire order, unchanged.
    assert_eq!(
        id,
        MachineIdentity::Uuid("10325476-98ba-dcfe-0123-456789abcdef".into())
    );
    d.machine_identity().await.unwrap();
    assert_eq!(d.session_cipher_suite().await, Some(17));
    let seen = bmc.record();
    assert_eq!(seen.opens, [17], "one session for everything");
    assert_eq!(
        seen.distinct(NETFN_APP, CMD_GET_SYSTEM_GUID),
        1,
        "GUID cached"
    );
    assert_eq!(seen.distinct(NETFN_CHASSIS, CMD_CHASSIS_CONTROL), 2);
    d.close().await;
    assert_eq!(bmc.record().closes, 1);
    assert_eq!(d.session_cipher_suite().await, None);
}

#[tokio::test]
async fn forged_replies_are_discarded_and_never_read_as_off() {
    let (bmc, d) = start(Behaviour {
        forge: true,
        ..Behaviour::default()
    })
    .await;
    for _ in 0..3 {
        assert_eq!(d.status().await.unwrap().state, PowerState::On);
    }
    assert!(
        d.discarded_datagrams().await >= 3 * 13,
        "{}",
        d.discarded_datagrams().await
    );
    assert_eq!(
        bmc.record().opens.len(),
        1,
        "forgeries do not break the session"
    );
}

#[tokio::test]
async fn only_forged_replies_end_unreachable_within_the_deadline() {
    let (_bmc, d) = start(Behaviour {
        forge_only: true,
        ..Behaviour::default()
    })
    .await;
    let started = Instant::now();
    let err = d.status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Unreachable, "{err}");
    assert!(err.message.contains("no answer"), "{err}");
    assert!(started.elapsed() < timeouts().operation + Duration::from_secs(1));
}

#[tokio::test]
async fn a_silent_bmc_is_unreachable_within_the_request_timeout() {
    let (_bmc, d) = start(Behaviour {
        silent: true,
        ..Behaviour::default()
    })
    .await;
    let started = Instant::now();
    let err = d.status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Unreachable, "{err}");
    // Resent every 250 ms for 1 s: 4 sends (fewer on a very slow machine).
    assert!(err.message.contains(" attempts"), "{err}");
    assert!(err.message.contains("ipmi://127.0.0.1:"), "{err}");
    assert!(started.elapsed() < timeouts().request + Duration::from_secs(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_garbage_does_not_stretch_the_deadline() {
    let flooder = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let port = flooder.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        let mut buf = [0u8; 512];
        let (_, peer) = flooder.recv_from(&mut buf).await.unwrap();
        loop {
            let _ = flooder.send_to(b"\x06\x00\xff\x07 garbage", peer).await;
        }
    });
    let started = Instant::now();
    let err = driver(&target(port, "x")).status().await.unwrap_err();
    task.abort();
    assert_eq!(err.kind, PowerErrorKind::Unreachable, "{err}");
    assert!(err.message.contains("discarded"), "{err}");
    assert!(started.elapsed() < timeouts().request + Duration::from_secs(2));
}

#[tokio::test]
async fn nothing_listening_is_unreachable_and_says_so() {
    let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = probe.local_addr().unwrap().port();
    drop(probe);
    let d = driver(&target(port, "x"));
    let err = d.status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Unreachable, "{err}");
    assert!(err.message.contains("ICMP port unreachable"), "{err}");
}

#[tokio::test]
async fn power_cycle_is_sent_once_and_power_down_is_retried_in_a_new_session() {
    let (bmc, d) = start(Behaviour {
        ignore: vec![(NETFN_CHASSIS, CMD_CHASSIS_CONTROL)],
        ..Behaviour::default()
    })
    .await;
    d.status().await.unwrap();
    let err = d.reboot().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Unreachable, "{err}");
    assert!(err.message.contains("sent once"), "{err}");
    let seen = bmc.record();
    assert_eq!(seen.count(NETFN_CHASSIS, CMD_CHASSIS_CONTROL), 1);
    assert_eq!(
        closes(&bmc, 1).await,
        1,
        "the session given up on is closed"
    );
    assert_eq!(
        seen.opens.len(),
        1,
        "no new session for a non-idempotent command"
    );

    d.status().await.unwrap();
    assert_eq!(
        bmc.record().opens.len(),
        2,
        "the silent session was dropped"
    );
    let err = d.power_off().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Unreachable, "{err}");
    let seen = bmc.record();
    assert_eq!(seen.opens.len(), 3, "one new session after no answer");
    assert!(
        seen.count(NETFN_CHASSIS, CMD_CHASSIS_CONTROL) > 3,
        "power down is resent"
    );
    assert_eq!(
        seen.distinct(NETFN_CHASSIS, CMD_CHASSIS_CONTROL),
        3,
        "the power cycle, then power down in two sessions"
    );
}

#[tokio::test]
async fn a_session_the_bmc_forgot_is_replaced_once() {
    let (bmc, d) = start(Behaviour::default()).await;
    d.status().await.unwrap();
    bmc.forget_session();
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    assert_eq!(bmc.record().opens.len(), 2);
}

#[tokio::test]
async fn an_idle_session_is_closed_and_replaced() {
    let (bmc, d) = start(Behaviour::default()).await;
    d.status().await.unwrap();
    {
        let mut state = d.inner.state.lock().await;
        let session = state.session.as_mut().unwrap();
        session.last_used = Instant::now()
            .checked_sub(IDLE_LIMIT + Duration::from_secs(1))
            .unwrap();
    }
    d.status().await.unwrap();
    assert_eq!(bmc.record().opens.len(), 2);
    assert_eq!(closes(&bmc, 1).await, 1);
}

#[tokio::test]
async fn a_set_up_that_loses_a_message_starts_over_once() {
    let (bmc, d) = start(Behaviour {
        swallow_rakp3: 1,
        ..Behaviour::default()
    })
    .await;
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    assert_eq!(bmc.record().opens, [17, 17]);
    bmc.set(|b| b.swallow_rakp3 = 100);
    d.close().await;
    let err = d.status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Unreachable, "{err}");
    assert!(err.message.contains("RAKP 3"), "{err}");
    assert_eq!(bmc.record().opens, [17, 17, 17, 17], "one start-over only");
}

#[tokio::test]
async fn sessions_whose_set_up_fails_are_closed_so_the_bmc_keeps_free_slots() {
    let (bmc, d) = start(Behaviour {
        ignore: vec![(NETFN_APP, CMD_SET_SESSION_PRIVILEGE)],
        ..Behaviour::default()
    })
    .await;
    let err = d.status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Unreachable, "{err}");
    assert!(err.message.contains("Set Session Privilege Level"), "{err}");
    assert_eq!(bmc.record().opens.len(), 2, "started over once");
    assert_eq!(closes(&bmc, 2).await, 2, "both sessions closed");
    bmc.set(|b| {
        b.privilege_cc = 0x81;
        b.ignore.clear();
    });
    d.status().await.unwrap_err();
    assert_eq!(closes(&bmc, 3).await, 3);
}

#[tokio::test]
async fn a_wrong_password_is_an_auth_error_that_does_not_show_it() {
    let bmc = FakeBmc::start(Behaviour::default()).await;
    let d = driver(&target(bmc.addr.port(), "Wr0ng-Secret"));
    let err = d.status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Auth, "{err}");
    assert!(err.message.contains("wrong user name or password"), "{err}");
    assert!(!err.to_string().contains("Wr0ng-Secret"));
    assert!(!format!("{d:?}").contains("Wr0ng-Secret"));
}

#[tokio::test]
async fn an_unknown_user_is_an_auth_error() {
    let bmc = FakeBmc::start(Behaviour {
        user: "someone",
        ..Behaviour::default()
    })
    .await;
    let d = driver(&target(bmc.addr.port(), "fake-Pass-1"));
    let err = d.status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Auth, "{err}");
    assert!(err.message.contains("\"fence\""), "{err}");
}

#[tokio::test]
async fn a_refused_suite_17_falls_back_to_3_and_3_is_proposed_first_next_time() {
    let (bmc, d) = start(Behaviour {
        suites: vec![CipherSuite::Suite3],
        short_refusal: true,
        ..Behaviour::default()
    })
    .await;
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    assert_eq!(d.session_cipher_suite().await, Some(3));
    d.close().await;
    d.status().await.unwrap();
    assert_eq!(bmc.record().opens, [17, 3, 3]);
}

#[tokio::test]
async fn a_bmc_that_picks_suite_3_itself_is_accepted_only_when_3_is_allowed() {
    let (bmc, d) = start(Behaviour {
        choose: Some(CipherSuite::Suite3),
        ..Behaviour::default()
    })
    .await;
    d.status().await.unwrap();
    assert_eq!(d.session_cipher_suite().await, Some(3));
    let mut t = target(bmc.addr.port(), "fake-Pass-1");
    t.cipher_suite = Some(17);
    let err = driver(&t).status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Unsupported, "{err}");
    assert!(err.message.contains("suite 3"), "{err}");
}

#[tokio::test]
async fn a_configured_suite_the_bmc_refuses_is_unsupported() {
    let bmc = FakeBmc::start(Behaviour {
        suites: vec![CipherSuite::Suite3],
        ..Behaviour::default()
    })
    .await;
    let mut t = target(bmc.addr.port(), "fake-Pass-1");
    t.cipher_suite = Some(17);
    let err = driver(&t).status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Unsupported, "{err}");
    assert!(err.message.contains("17 (status 0x11)"), "{err}");
    assert_eq!(bmc.record().opens, [17]);
}

#[tokio::test]
async fn bmc_keys_must_be_configured_and_equal() {
    let kg = b"bmc-key-0123456789ab".to_vec();
    let bmc = FakeBmc::start(Behaviour {
        kg: Some(kg.clone()),
        kg_flag: true,
        ..Behaviour::default()
    })
    .await;
    let mut t = target(bmc.addr.port(), "fake-Pass-1");
    let err = driver(&t).status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Auth, "{err}");
    assert!(err.message.contains("K_g"), "{err}");
    t.kg = Some(IpmiKey::new(b"another-key".to_vec()));
    let err = driver(&t).status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Auth, "{err}");
    assert!(
        err.message.contains("RAKP 4") && err.message.contains("K_g"),
        "{err}"
    );
    t.kg = Some(IpmiKey::new(kg));
    assert_eq!(driver(&t).status().await.unwrap().state, PowerState::On);
}

#[tokio::test]
async fn a_refused_privilege_is_an_auth_error_naming_it() {
    let (_bmc, d) = start(Behaviour {
        privilege_cc: 0x81,
        ..Behaviour::default()
    })
    .await;
    let err = d.status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Auth, "{err}");
    assert!(err.message.contains("ADMINISTRATOR"), "{err}");
}

#[tokio::test]
async fn chassis_control_completion_codes_are_judged() {
    let (bmc, d) = start(Behaviour {
        control_cc: 0xD4,
        ..Behaviour::default()
    })
    .await;
    let err = d.power_off().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Auth, "{err}");
    assert!(err.message.contains("OPERATOR"), "{err}");
    bmc.set(|b| b.control_cc = 0xD5);
    let err = d.power_off().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Unsupported, "{err}");
    bmc.set(|b| b.control_cc = 0xC0);
    let err = d.power_off().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Protocol, "{err}");
    assert!(err.message.contains("node busy"), "{err}");
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
}

#[test]
fn retransmit_interval_has_a_floor_and_a_ceiling() {
    let mut t = timeouts();
    assert_eq!(retransmit_interval(&t), Duration::from_millis(250));
    t.request = Duration::from_secs(2);
    assert_eq!(retransmit_interval(&t), Duration::from_millis(500));
    t.request = Duration::from_secs(10);
    assert_eq!(retransmit_interval(&t), Duration::from_secs(1));
    t.retries = 0;
    assert_eq!(retransmit_interval(&t), Duration::from_secs(1));
}

#[test]
fn guids_are_formatted_in_wire_order_and_placeholders_kept() {
    let mut guid = [0u8; 16];
    guid[0] = 0xAB;
    guid[15] = 0x01;
    assert_eq!(format_guid(guid), "ab000000-0000-0000-0000-000000000001");
    assert_eq!(
        format_guid([0xFF; 16]),
        "ffffffff-ffff-ffff-ffff-ffffffffffff"
    );
}

#[test]
fn bad_configuration_is_a_config_error() {
    let mut t = target(623, &"p".repeat(21));
    let err = IpmiDriver::new(&t, Arc::new(Semaphore::new(1))).unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Config);
    assert!(!err.message.contains(&"p".repeat(21)));
    t = target(623, "ok");
    t.cipher_suite = Some(2);
    let err = IpmiDriver::new(&t, Arc::new(Semaphore::new(1))).unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Config);
    t.cipher_suite = None;
    t.address = "fd00::1".into();
    assert_eq!(driver(&t).endpoint(), "ipmi://[fd00::1]:623");
}
