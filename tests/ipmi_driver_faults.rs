//! The IPMI driver against the mock IPMI BMC's injected faults, over real UDP on
//! loopback: lost datagrams and replies, slowness, an impostor, a lying or ignoring
//! BMC, error completion codes, a refused cipher suite, an unanswered Get Channel
//! Cipher Suites and garbled replies. Drivers are built by `DriverFactory`.
//!
//! The rule under test: every fault ends in a proven state or an error, never in an Off
//! that is not true (the one exception, a BMC that reports Off for a machine that is
//! on, is undetectable in IPMI and documented below); no Chassis Control runs that
//! was not asked for; and the BMC's few session slots do not leak.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::ipmi_common;

use std::time::{Duration, Instant};

use ipmi_common::*;
use nodefence::power::confirm::{ActionError, confirm_state, execute};
use nodefence::power::{PowerAction, PowerDriver, PowerErrorKind, PowerState};
use nodefence_mocks::ipmi::{ChassisControl, CipherSuite, Fault, Garble, Power};

/// Margin over the operation deadline for an operation that gives up.
const MARGIN: Duration = Duration::from_millis(1000);

fn power_down_reply() -> Fault {
    Fault::DropRepliesTo {
        net_fn: NETFN_CHASSIS,
        cmd: CMD_CHASSIS_CONTROL,
        count: Some(1),
    }
}

async fn on(d: &dyn PowerDriver) {
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_percent_loss_is_survived_by_retransmission() {
    let bmc = start(bmc()).await;
    bmc.set_fault(Fault::Loss { percent: 30 });
    let mut t = target(&bmc);
    // Six sends per request (every 250 ms for 1.5 s): a request is lost 0.3^6 = 0.07%.
    t.timeouts.request = Duration::from_millis(1500);
    t.timeouts.retries = 5;
    t.timeouts.operation = Duration::from_secs(6);
    let d = driver(&t);
    for i in 0.. {
        on(d.as_ref()).await;
        if i >= 5 && bmc.counters().dropped.injected > 0 {
            break;
        }
        assert!(i < 40, "30% loss never dropped anything");
    }
    d.power_off().await.unwrap();
    assert_eq!(bmc.power(), Power::Off);
    // A resent power down may run again; nothing else runs.
    let ops = controls(&bmc);
    assert!(
        !ops.is_empty() && ops.iter().all(|&o| o == ChassisControl::PowerDown),
        "{ops:?}"
    );
    d.close().await;
    bmc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fewer_drops_than_sends_are_survived_in_set_up_and_in_session() {
    let bmc = start(bmc()).await;
    let mut t = target(&bmc);
    t.timeouts.request = Duration::from_secs(1); // four sends, 250 ms apart
    let d = driver(&t);
    bmc.set_fault(Fault::DropIncoming { count: 3 });
    on(d.as_ref()).await;
    assert_eq!(bmc.counters().dropped.injected, 3);
    bmc.set_fault(Fault::DropIncoming { count: 3 });
    on(d.as_ref()).await;
    let c = bmc.counters();
    assert_eq!((c.dropped.injected, c.sessions_opened), (6, 1), "{c:?}");
    d.close().await;
    bmc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn total_loss_is_unreachable_within_the_deadline_never_off() {
    let bmc = start(bmc()).await;
    let t = target(&bmc);
    let limit = t.timeouts.operation + MARGIN;
    let d = driver(&t);
    on(d.as_ref()).await; // a session is kept
    bmc.set_fault(Fault::Loss { percent: 100 });
    for attempt in 0..2 {
        let started = Instant::now();
        let err = d.status().await.unwrap_err();
        assert!(started.elapsed() < limit, "{:?}", started.elapsed());
        assert_eq!(err.kind, PowerErrorKind::Unreachable, "{attempt}: {err}");
        assert!(err.message.contains("no answer"), "{err}");
    }
    let started = Instant::now();
    let err = d.power_off().await.unwrap_err();
    assert!(started.elapsed() < limit);
    assert_eq!(err.kind, PowerErrorKind::Unreachable, "{err}");
    // Confirmation gets errors, never Off.
    let not = confirm_state(d.as_ref(), PowerState::Off, &short_policy())
        .await
        .unwrap_err();
    assert_eq!(not.last_state, None, "{not}");
    assert!(bmc.counters().dropped.injected > 0);
    assert!(bmc.control_log().is_empty());
    assert_eq!(bmc.power(), Power::On);
    // The link comes back: so does the driver.
    bmc.clear_faults();
    on(d.as_ref()).await;
    d.close().await;
    bmc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_power_down_reply_is_resent_and_runs_twice_harmlessly() {
    let bmc = start(bmc()).await;
    let d = driver(&target(&bmc));
    on(d.as_ref()).await;
    bmc.set_fault(power_down_reply());
    d.power_off().await.unwrap();
    // Power down is idempotent (a second one on an off machine does nothing), so the
    // driver resends it when the reply is lost: the BMC executed it twice.
    assert_eq!(
        controls(&bmc),
        [ChassisControl::PowerDown, ChassisControl::PowerDown]
    );
    let sent = requests(&bmc, NETFN_CHASSIS, CMD_CHASSIS_CONTROL);
    assert_eq!(sent.len(), 2);
    assert_eq!(
        sent[0].rq_seq, sent[1].rq_seq,
        "a retransmission, same rqSeq"
    );
    assert_eq!(sent[0].session_id, sent[1].session_id);
    assert_eq!(bmc.counters().replies_dropped, 1);
    assert_eq!(bmc.power(), Power::Off);
    let proof = confirm_state(d.as_ref(), PowerState::Off, &policy()).await;
    assert!(proof.is_ok(), "{proof:?}");

    // A power cycle is never resent: its lost reply is an error, and it ran once.
    bmc.set_power(Power::On);
    bmc.clear_logs();
    bmc.set_fault(power_down_reply());
    let err = d.reboot().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Unreachable, "{err}");
    assert!(err.message.contains("not repeated"), "{err}");
    assert_eq!(controls(&bmc), [ChassisControl::PowerCycle]);
    assert_eq!(requests(&bmc, NETFN_CHASSIS, CMD_CHASSIS_CONTROL).len(), 1);
    d.close().await;
    bmc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_bmc_works_below_the_request_timeout_and_is_unreachable_above() {
    let bmc = start(bmc()).await;
    let t = target(&bmc); // request timeout 500 ms
    bmc.set_fault(Fault::Slow(Duration::from_millis(200)));
    let d = driver(&t);
    on(d.as_ref()).await; // session set-up included
    d.power_off().await.unwrap();
    assert_eq!(bmc.power(), Power::Off);

    bmc.set_fault(Fault::Slow(Duration::from_millis(800)));
    for d in [d.clone(), driver(&t)] {
        let started = Instant::now();
        let err = d.status().await.unwrap_err();
        assert!(started.elapsed() < t.timeouts.operation + MARGIN);
        assert_eq!(err.kind, PowerErrorKind::Unreachable, "{err}");
    }
    // Fast again: late replies are discarded and the real state is read.
    bmc.clear_faults();
    assert_eq!(d.status().await.unwrap().state, PowerState::Off);
    assert_eq!(controls(&bmc), [ChassisControl::PowerDown]);
    d.close().await;
    bmc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_impostor_bmc_is_an_auth_error_and_gets_no_command() {
    let bmc = start(bmc().max_sessions(2)).await;
    bmc.set_fault(Fault::ImpostorRakp2);
    let d = driver(&target(&bmc));
    // More attempts than session slots: each refused session is freed at once (the
    // driver answers the bad RAKP 2 with a RAKP 3 error).
    for _ in 0..3 {
        let err = d.status().await.unwrap_err();
        assert_eq!(err.kind, PowerErrorKind::Auth, "{err}");
        assert!(err.message.contains("wrong user name or password"), "{err}");
    }
    let err = d.power_off().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Auth, "{err}");
    assert_eq!(bmc.counters().sessions_opened, 0);
    assert!(bmc.control_log().is_empty());
    assert!(requests(&bmc, NETFN_CHASSIS, CMD_CHASSIS_CONTROL).is_empty());
    assert_eq!(bmc.power(), Power::On);
    bmc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lying_power_state_never_proves_a_power_off() {
    let bmc = start(bmc()).await;
    let d = driver(&target(&bmc));
    on(d.as_ref()).await;
    bmc.set_fault(Fault::LyingPowerState);
    d.power_off().await.unwrap();
    // Off, reported On: Off is not confirmed.
    assert_eq!(bmc.power(), Power::Off);
    let not = confirm_state(d.as_ref(), PowerState::Off, &short_policy())
        .await
        .unwrap_err();
    assert_eq!(not.last_state, Some(PowerState::On), "{not}");

    // The reverse lie, On reported Off, is the one IPMI cannot detect: Get Chassis
    // Status is authenticated, but nothing in the protocol proves the power bit
    // true. The driver reports what the BMC says; nodefence's defences are outside
    // the driver (the machine identity cross-check and the node's signs of life
    // before a release).
    bmc.set_power(Power::On);
    bmc.clear_logs();
    assert_eq!(d.status().await.unwrap().state, PowerState::Off);
    let out = execute(d.as_ref(), PowerAction::Off, &policy())
        .await
        .unwrap();
    assert!(
        out.commands_sent.is_empty(),
        "it reads Off: nothing is sent"
    );
    assert!(bmc.control_log().is_empty());
    assert_eq!(bmc.power(), Power::On);
    d.close().await;
    bmc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ignored_chassis_control_is_acknowledged_but_not_confirmed() {
    let bmc = start(bmc()).await;
    bmc.set_fault(Fault::IgnoreChassisControl);
    let d = driver(&target(&bmc));
    d.power_off().await.unwrap(); // completion code 0 ...
    let not = confirm_state(d.as_ref(), PowerState::Off, &short_policy())
        .await
        .unwrap_err();
    assert_eq!(not.last_state, Some(PowerState::On), "{not}"); // ... and still on
    let err = execute(d.as_ref(), PowerAction::Off, &short_policy()).await;
    assert!(matches!(err, Err(ActionError::NotConfirmed(_))), "{err:?}");
    assert_eq!(bmc.power(), Power::On);
    assert!(bmc.control_log().is_empty());
    let sent = requests(&bmc, NETFN_CHASSIS, CMD_CHASSIS_CONTROL);
    assert_eq!(sent.len(), 2);
    assert!(sent.iter().all(|r| r.completion_code == Some(0)));
    d.close().await;
    bmc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_completion_codes_are_errors_never_off() {
    let bmc = start(bmc()).await;
    let d = driver(&target(&bmc));
    bmc.set_fault(Fault::CompletionCode {
        net_fn: NETFN_CHASSIS,
        cmd: CMD_CHASSIS_STATUS,
        code: 0xC0,
        count: None,
    });
    let err = d.status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Protocol, "{err}");
    assert!(err.message.contains("node busy"), "{err}");
    let not = confirm_state(d.as_ref(), PowerState::Off, &short_policy())
        .await
        .unwrap_err();
    assert_eq!(not.last_state, None, "{not}");
    // One busy answer: the next reading works.
    bmc.set_fault(Fault::CompletionCode {
        net_fn: NETFN_CHASSIS,
        cmd: CMD_CHASSIS_STATUS,
        code: 0xC0,
        count: Some(1),
    });
    assert!(d.status().await.is_err());
    on(d.as_ref()).await;

    // Insufficient privilege for Chassis Control: an auth error, nothing executed.
    bmc.set_fault(Fault::CompletionCode {
        net_fn: NETFN_CHASSIS,
        cmd: CMD_CHASSIS_CONTROL,
        code: 0xD4,
        count: None,
    });
    let err = d.power_off().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Auth, "{err}");
    assert!(err.message.contains("OPERATOR"), "{err}");
    assert!(bmc.control_log().is_empty());
    assert_eq!(bmc.power(), Power::On);
    d.close().await;
    bmc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_suite_17_falls_back_to_3_unless_17_is_configured() {
    let bmc = start(bmc()).await;
    bmc.set_fault(Fault::RefuseSuite { suite: 17 });
    let d = driver(&target(&bmc));
    on(d.as_ref()).await;
    d.power_off().await.unwrap();
    assert_eq!(session_suites(&bmc), [3]);
    assert_eq!(bmc.counters().handshakes_refused, 1);
    assert_eq!(controls(&bmc), [ChassisControl::PowerDown]);
    d.close().await;

    let mut t = target(&bmc);
    t.cipher_suite = Some(17);
    let err = driver(&t).status().await.unwrap_err();
    assert!(
        matches!(
            err.kind,
            PowerErrorKind::Unsupported | PowerErrorKind::Protocol
        ),
        "{err}"
    );
    assert!(err.message.contains("refused cipher suite 17"), "{err}");
    assert_eq!(bmc.counters().sessions_opened, 1, "no suite-3 session");
    bmc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_get_channel_cipher_suites_does_not_matter() {
    let bmc = start(bmc().suites([CipherSuite::Suite17])).await;
    bmc.set_fault(Fault::NoCipherSuitesReply);
    let d = driver(&target(&bmc));
    on(d.as_ref()).await;
    d.power_off().await.unwrap();
    assert_eq!(controls(&bmc), [ChassisControl::PowerDown]);
    assert_eq!(session_suites(&bmc), [17]);
    // The driver never asks: it proposes suites in Open Session.
    assert!(requests(&bmc, NETFN_APP, CMD_CIPHER_SUITES).is_empty());
    d.close().await;
    bmc.shutdown().await;
}

/// Garbled replies fail every call, in a kept session and in new ones, and every
/// session given up on is closed.
async fn garbled(how: Garble) {
    let bmc = start(bmc()).await;
    let d = driver(&target(&bmc));
    on(d.as_ref()).await;
    bmc.set_fault(Fault::GarbledReplies(how));
    for attempt in 0..3 {
        let result = d.status().await;
        let err = result.expect_err("a garbled reply is never a reading");
        assert!(
            !err.message.contains("session slots"),
            "{how:?} {attempt}: {err}"
        );
        let active = bmc.active_sessions();
        assert!(
            active <= 2,
            "{how:?} {attempt}: {active} sessions left open"
        );
        // The last Close Session is sent without waiting for its reply.
        wait_until(
            "abandoned sessions closed",
            Duration::from_secs(1),
            || async { bmc.active_sessions() == 0 },
        )
        .await;
    }
    let c = bmc.counters();
    // The kept session, then two set-ups (the second a start-over) per call.
    assert_eq!(c.sessions_opened, 7, "{how:?}: {c:?}");
    assert_eq!(c.sessions_closed, c.sessions_opened, "{how:?}: {c:?}");
    assert!(bmc.control_log().is_empty());
    // (The confirm loop cancels its last reading at its deadline, which leaks a
    // session: see `a_call_cancelled_during_session_set_up_does_not_leak_the_session`.)
    let not = confirm_state(d.as_ref(), PowerState::Off, &short_policy())
        .await
        .unwrap_err();
    assert_eq!(not.last_state, None, "{how:?}: {not}");
    bmc.clear_faults();
    on(d.as_ref()).await;
    d.close().await;
    bmc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbled_random_bytes_are_errors_and_sessions_do_not_leak() {
    garbled(Garble::RandomBytes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbled_truncated_replies_are_errors_and_sessions_do_not_leak() {
    garbled(Garble::Truncated).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbled_auth_codes_are_errors_and_sessions_do_not_leak() {
    garbled(Garble::BadAuthCode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cancelled_during_session_set_up_does_not_leak_the_session() {
    let bmc = start(bmc()).await;
    // The BMC establishes the session (RAKP 3 verified) but the privilege reply is lost.
    bmc.set_fault(Fault::DropRepliesTo {
        net_fn: NETFN_APP,
        cmd: CMD_SET_SESSION_PRIVILEGE,
        count: None,
    });
    let d = driver(&target(&bmc));
    {
        let call = d.status();
        tokio::pin!(call);
        tokio::select! {
            r = &mut call => panic!("the call ended before it could be cancelled: {r:?}"),
            () = wait_until("session established", Duration::from_secs(2), || async {
                bmc.counters().sessions_opened == 1
            }) => {}
        }
        // `call` is dropped here, as `confirm_state`'s `timeout` drops a late reading.
    }
    bmc.clear_faults();
    on(d.as_ref()).await;
    d.close().await;
    wait_until("every session closed", Duration::from_secs(2), || async {
        bmc.active_sessions() == 0
    })
    .await;
    bmc.shutdown().await;
}
