//! The Redfish driver against the mock BMC, through real HTTP(S) on loopback: every
//! vendor profile, auth mode and fault. The rule under test: a fault is an error,
//! never "off", and no power command is sent that was not needed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::{driver, policy, target};
use nodefence::power::confirm::{ActionError, execute};
use nodefence::power::{PowerAction, PowerErrorKind, PowerState};
use nodefence_mocks::redfish::{AuthKind, Fault, MockPower, MockRedfish, Profile, SystemSpec};

async fn mock(profile: Profile, power: MockPower) -> nodefence_mocks::redfish::MockRedfishHandle {
    let id = match profile {
        Profile::OpenBmc => "system",
        Profile::Idrac => "System.Embedded.1",
        _ => "1",
    };
    MockRedfish::builder()
        .profile(profile)
        .system(SystemSpec::new(id).power(power))
        .credentials(common::USER, common::PASSWORD)
        .transition_delay(Duration::from_millis(100))
        .start()
        .await
        .expect("mock starts")
}

fn resets(m: &nodefence_mocks::redfish::MockRedfishHandle) -> Vec<String> {
    m.reset_log().into_iter().map(|(_, t)| t).collect()
}

#[tokio::test]
async fn every_profile_powers_off_with_force_off_and_confirms() {
    for profile in [
        Profile::OpenBmc,
        Profile::Idrac,
        Profile::Ilo,
        Profile::Minimal,
    ] {
        let m = mock(profile, MockPower::On).await;
        let t = target(&m, None);
        let d = driver(&t.target);
        assert_eq!(
            d.status().await.unwrap().state,
            PowerState::On,
            "{profile:?}"
        );
        let out = execute(d.as_ref(), PowerAction::Off, &policy())
            .await
            .unwrap_or_else(|e| panic!("{profile:?}: {e}"));
        assert_eq!(out.commands_sent, vec![PowerAction::Off], "{profile:?}");
        assert_eq!(resets(&m), vec!["ForceOff".to_string()], "{profile:?}");
        let sys = m.reset_log()[0].0.clone();
        assert_eq!(m.power(&sys), Some(MockPower::Off), "{profile:?}");
        assert_eq!(out.off.map(|c| c.readings.len()), Some(3));
        d.close().await;
        m.shutdown().await;
    }
}

#[tokio::test]
async fn power_on_and_observed_reboot() {
    let m = mock(Profile::OpenBmc, MockPower::Off).await;
    let t = target(&m, None);
    let d = driver(&t.target);
    execute(d.as_ref(), PowerAction::On, &policy())
        .await
        .unwrap();
    assert_eq!(m.power("system"), Some(MockPower::On));
    let out = execute(d.as_ref(), PowerAction::Reboot, &policy())
        .await
        .unwrap();
    assert_eq!(out.commands_sent, vec![PowerAction::Off, PowerAction::On]);
    assert_eq!(resets(&m), vec!["On", "ForceOff", "On"]);
    m.shutdown().await;
}

#[tokio::test]
async fn one_shot_reboot_uses_what_the_system_offers() {
    let m = mock(Profile::Idrac, MockPower::On).await;
    let t = target(&m, None);
    let d = driver(&t.target);
    d.reboot().await.unwrap();
    assert_eq!(resets(&m), vec!["ForceRestart"]);
    m.shutdown().await;
}

#[tokio::test]
async fn already_off_is_fenced_without_any_command() {
    let m = mock(Profile::OpenBmc, MockPower::Off).await;
    m.inject(Fault::RejectResetWhenOff);
    let t = target(&m, None);
    let d = driver(&t.target);
    let out = execute(d.as_ref(), PowerAction::Off, &policy())
        .await
        .unwrap();
    assert!(out.commands_sent.is_empty());
    assert!(
        m.reset_log().is_empty(),
        "no Reset may be sent to an Off machine"
    );
    m.shutdown().await;
}

#[tokio::test]
async fn task_monitor_is_followed_and_state_read_back() {
    let m = mock(Profile::Ilo, MockPower::On).await;
    let t = target(&m, None);
    let d = driver(&t.target);
    d.power_off().await.unwrap();
    let monitor_polls = m
        .request_log()
        .iter()
        .filter(|r| r.method == "GET" && r.path.contains("Task"))
        .count();
    assert!(monitor_polls >= 1, "the 202 task monitor was not followed");
    m.shutdown().await;
}

#[tokio::test]
async fn several_systems_need_a_system_id_and_it_is_respected() {
    let m = MockRedfish::builder()
        .profile(Profile::MultiSystem)
        .system(SystemSpec::new("Blade1").power(MockPower::On))
        .system(SystemSpec::new("Blade2").power(MockPower::On))
        .credentials(common::USER, common::PASSWORD)
        .start()
        .await
        .unwrap();
    let t = target(&m, None);
    let err = driver(&t.target).status().await.expect_err("ambiguous");
    assert_eq!(err.kind, PowerErrorKind::Unsupported);
    assert!(
        err.message.contains("Blade1") && err.message.contains("Blade2"),
        "{err}"
    );

    let t = target(&m, Some("Blade2"));
    let d = driver(&t.target);
    execute(d.as_ref(), PowerAction::Off, &policy())
        .await
        .unwrap();
    assert_eq!(m.power("Blade2"), Some(MockPower::Off));
    assert_eq!(
        m.power("Blade1"),
        Some(MockPower::On),
        "the other blade must be untouched"
    );

    let t = target(&m, Some("Blade9"));
    assert!(driver(&t.target).status().await.is_err());
    m.shutdown().await;
}

#[tokio::test]
async fn no_acceptable_reset_type_is_a_clear_error_and_nothing_is_sent() {
    let m = MockRedfish::builder()
        .profile(Profile::OpenBmc)
        .system(
            SystemSpec::new("system")
                .power(MockPower::On)
                .reset_types(["On", "GracefulShutdown"]),
        )
        .credentials(common::USER, common::PASSWORD)
        .start()
        .await
        .unwrap();
    let t = target(&m, None);
    let err = driver(&t.target)
        .power_off()
        .await
        .expect_err("no ForceOff");
    assert_eq!(err.kind, PowerErrorKind::Unsupported);
    assert!(
        err.message.contains("ForceOff") && err.message.contains("GracefulShutdown"),
        "{err}"
    );
    assert!(m.reset_log().is_empty());
    m.shutdown().await;
}

#[tokio::test]
async fn sessions_are_reused_renewed_and_closed() {
    let m = mock(Profile::OpenBmc, MockPower::On).await;
    let t = target(&m, None);
    let d = driver(&t.target);
    for _ in 0..3 {
        d.status().await.unwrap();
    }
    assert_eq!(m.active_sessions(), 1, "one session for many requests");
    let log = m.request_log();
    assert!(log.iter().any(|r| r.auth == AuthKind::Session));
    assert!(
        !log.iter().any(|r| r.auth == AuthKind::Basic),
        "sessions work: no Basic"
    );
    let session_posts = log
        .iter()
        .filter(|r| r.method == "POST" && r.path.contains("Sessions"))
        .count();
    assert_eq!(session_posts, 1);

    m.expire_sessions();
    assert_eq!(
        d.status().await.unwrap().state,
        PowerState::On,
        "re-login after 401"
    );
    d.close().await;
    assert_eq!(m.active_sessions(), 0, "close deletes the session");
    m.shutdown().await;
}

/// Readings that prove Off (1 s apart) reuse one pooled connection, and an idle one is
/// closed within twice `POOL_IDLE_TIMEOUT` (the pool's reaper runs at that interval):
/// what keeps a monitor pass over thousands of BMCs from holding a TLS connection
/// (about 35 KB of the daemon's memory) per BMC. The session outlives the connection.
#[tokio::test]
async fn readings_a_second_apart_share_a_connection_and_an_idle_one_is_closed() {
    use nodefence::power::registry::POOL_IDLE_TIMEOUT;
    let m = mock(Profile::OpenBmc, MockPower::Off).await;
    let t = target(&m, None);
    let d = driver(&t.target);
    for i in 0..3 {
        assert_eq!(d.status().await.unwrap().state, PowerState::Off);
        assert_eq!(
            m.open_connections(),
            1,
            "reading {i}: one connection (a new one per reading would leave the last one pooled too)"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let deadline = std::time::Instant::now() + POOL_IDLE_TIMEOUT * 2 + Duration::from_secs(5);
    while m.open_connections() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "an idle connection is still open {:?} after the last reading",
            POOL_IDLE_TIMEOUT * 2 + Duration::from_secs(5)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(d.status().await.unwrap().state, PowerState::Off);
    assert_eq!(
        m.active_sessions(),
        1,
        "the session is kept across connections"
    );
    let logins = m
        .request_log()
        .iter()
        .filter(|r| r.method == "POST" && r.path.contains("Sessions"))
        .count();
    assert_eq!(logins, 1);
    d.close().await;
    m.shutdown().await;
}

#[tokio::test]
async fn basic_auth_when_the_service_has_no_sessions() {
    let m = mock(Profile::Minimal, MockPower::On).await;
    let t = target(&m, None);
    let d = driver(&t.target);
    d.status().await.unwrap();
    assert!(m.request_log().iter().any(|r| r.auth == AuthKind::Basic));
    m.shutdown().await;
}

#[tokio::test]
async fn https_requires_a_trusted_certificate() {
    let m = MockRedfish::builder()
        .profile(Profile::OpenBmc)
        .system(SystemSpec::new("system").power(MockPower::Off))
        .credentials(common::USER, common::PASSWORD)
        .tls(true)
        .start()
        .await
        .unwrap();
    assert!(m.base_url().starts_with("https://"));
    let trusted = target(&m, None);
    assert_eq!(
        driver(&trusted.target).status().await.unwrap().state,
        PowerState::Off
    );

    let mut untrusted = target(&m, None).target;
    untrusted.tls.ca_file = None;
    let err = driver(&untrusted).status().await.expect_err("unknown CA");
    assert_eq!(err.kind, PowerErrorKind::Tls);
    assert!(err.message.contains("unknown issuer"), "{err}");
    assert!(err.message.contains("set ca_file"), "{err}");

    let mut insecure = untrusted.clone();
    insecure.tls.insecure = true;
    assert_eq!(
        driver(&insecure).status().await.unwrap().state,
        PowerState::Off
    );
    m.shutdown().await;
}

#[tokio::test]
async fn wrong_credentials_are_an_auth_error_that_names_no_password() {
    let m = mock(Profile::OpenBmc, MockPower::Off).await;
    m.inject(Fault::RejectCredentials);
    let t = target(&m, None);
    let err = driver(&t.target).status().await.expect_err("rejected");
    assert_eq!(err.kind, PowerErrorKind::Auth);
    assert!(!err.to_string().contains(common::PASSWORD));
    m.shutdown().await;
}

#[tokio::test]
async fn transient_500s_are_retried_but_persistent_ones_fail() {
    let m = mock(Profile::OpenBmc, MockPower::On).await;
    let t = target(&m, None);
    let d = driver(&t.target);
    d.status().await.unwrap();
    m.inject(Fault::Fail500 { count: 2 });
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    m.inject(Fault::Fail500 { count: 100 });
    let err = d.status().await.expect_err("persistent 500");
    assert_eq!(err.kind, PowerErrorKind::Unreachable);
    assert!(err.message.contains("500"), "{err}");
    m.shutdown().await;
}

#[tokio::test]
async fn dropped_connections_are_retried() {
    let m = mock(Profile::OpenBmc, MockPower::On).await;
    let t = target(&m, None);
    let d = driver(&t.target);
    m.inject(Fault::DropConnection { count: 2 });
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    m.shutdown().await;
}

#[tokio::test]
async fn a_hanging_bmc_is_unreachable_within_the_deadline() {
    let m = mock(Profile::OpenBmc, MockPower::Off).await;
    m.inject(Fault::Hang);
    let mut t = target(&m, None);
    t.target.timeouts.request = Duration::from_millis(300);
    t.target.timeouts.operation = Duration::from_secs(2);
    let started = std::time::Instant::now();
    let err = driver(&t.target).status().await.expect_err("hang");
    assert_eq!(err.kind, PowerErrorKind::Unreachable);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the operation deadline bounds it"
    );
    m.shutdown().await;
}

#[tokio::test]
async fn garbage_replies_are_protocol_errors_never_off() {
    let garbage = [
        (Fault::HtmlLoginPage, PowerErrorKind::Protocol, "HTML"),
        (
            Fault::WrongContentType,
            PowerErrorKind::Protocol,
            "non-JSON",
        ),
        (
            Fault::MalformedJson,
            PowerErrorKind::Protocol,
            "malformed JSON",
        ),
        (Fault::RedirectLoop, PowerErrorKind::Protocol, "redirect"),
        (
            Fault::OversizedBody {
                bytes: 2 * 1024 * 1024,
            },
            PowerErrorKind::Protocol,
            "larger than",
        ),
        // A 503 error page is the service being down, retried, then unreachable.
        (
            Fault::HtmlErrorPage,
            PowerErrorKind::Unreachable,
            "HTML error page",
        ),
    ];
    for (fault, kind, words) in garbage {
        let m = mock(Profile::OpenBmc, MockPower::Off).await;
        m.inject(fault.clone());
        let t = target(&m, None);
        let err = driver(&t.target).status().await.expect_err("garbage");
        assert_eq!(err.kind, kind, "{fault:?}: {err}");
        assert!(err.message.contains(words), "{fault:?}: {err}");
        m.shutdown().await;
    }
}

#[tokio::test]
async fn absent_or_unknown_power_state_is_not_off() {
    for fault in [
        Fault::PowerStateAbsent,
        Fault::PowerStateValue("Standby".into()),
    ] {
        let m = mock(Profile::OpenBmc, MockPower::Off).await;
        m.inject(fault.clone());
        let t = target(&m, None);
        let d = driver(&t.target);
        let state = d.status().await.unwrap().state;
        assert!(
            matches!(state, PowerState::Unknown(_)),
            "{fault:?}: {state}"
        );
        let err =
            nodefence::power::confirm::confirm_state(d.as_ref(), PowerState::Off, &policy()).await;
        assert!(err.is_err(), "{fault:?} must never confirm off");
        m.shutdown().await;
    }
}

#[tokio::test]
async fn a_bmc_that_lies_after_force_off_is_not_confirmed() {
    let m = mock(Profile::OpenBmc, MockPower::On).await;
    m.inject(Fault::LieOnAfterOff);
    let t = target(&m, None);
    let err = execute(driver(&t.target).as_ref(), PowerAction::Off, &policy())
        .await
        .expect_err("still On");
    assert!(
        matches!(err, ActionError::NotConfirmed(ref n) if n.last_state == Some(PowerState::On)),
        "{err}"
    );
    m.shutdown().await;
}

#[tokio::test]
async fn a_flapping_bmc_is_not_confirmed() {
    let m = mock(Profile::OpenBmc, MockPower::On).await;
    m.inject(Fault::Flap);
    let t = target(&m, None);
    let err = execute(driver(&t.target).as_ref(), PowerAction::Off, &policy())
        .await
        .expect_err("flapping");
    assert!(matches!(err, ActionError::NotConfirmed(_)), "{err}");
    m.shutdown().await;
}

#[tokio::test]
async fn pulling_the_plug_is_seen_as_off() {
    let m = mock(Profile::Idrac, MockPower::On).await;
    let t = target(&m, None);
    let d = driver(&t.target);
    m.set_power("System.Embedded.1", MockPower::Off);
    let c = nodefence::power::confirm::confirm_state(d.as_ref(), PowerState::Off, &policy()).await;
    assert!(c.is_ok());
    assert!(m.reset_log().is_empty());
    m.shutdown().await;
}
