//! The Redfish driver against what real BMCs present (issue 13), through real HTTPS on
//! loopback and the mock BMC given each behaviour: a self-signed `CA:TRUE`
//! certificate trusted through `ca_file` or a pin (never `insecure`), certificates
//! that must be refused and say why, once; redirected service roots; services that
//! want Basic on the login or refuse sessions; read-only users; and nodefence's
//! User-Agent on every request.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{driver, policy, target};
use nodefence::config::{RedfishAuth, TlsSettings};
use nodefence::power::confirm::{ActionError, execute};
use nodefence::power::{PowerAction, PowerErrorKind, PowerState};
use nodefence::tls::inspect::CertSummary;
use nodefence::tls::{CertFingerprint, RefusalKind};
use nodefence_mocks::redfish::{
    AuthKind, Fault, MockPower, MockRedfish, MockRedfishHandle, Role, SessionLogin, SystemSpec,
};
use nodefence_mocks::tls::{CertKind, DEFAULT_BMC_NAME};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

async fn bmc(kind: CertKind) -> MockRedfishHandle {
    MockRedfish::builder()
        .system(SystemSpec::new("1").power(MockPower::On))
        .credentials(common::USER, common::PASSWORD)
        .certificate(kind)
        .start()
        .await
        .unwrap()
}

fn der_of(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .as_ref()
        .to_vec()
}

fn pin_of(m: &MockRedfishHandle) -> CertFingerprint {
    CertFingerprint::of(&der_of(&m.certificate_pem().unwrap()))
}

/// A TCP relay in front of `m` that counts the connections it accepts (each TLS
/// handshake the client attempts), reached as `https://localhost:PORT`.
async fn counted(m: &MockRedfishHandle) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let (seen, backend) = (count.clone(), m.addr());
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(backend).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (format!("https://localhost:{port}"), count)
}

#[tokio::test]
async fn a_self_signed_ca_certificate_is_trusted_as_itself_through_ca_file_or_a_pin() {
    let m = bmc(CertKind::SelfSigned).await;
    let summary = CertSummary::parse(&der_of(&m.certificate_pem().unwrap())).unwrap();
    assert!(
        summary.is_ca && summary.self_issued,
        "the mock ships what BMCs ship"
    );

    // ca_file = exactly the certificate the BMC presents (`target` writes ca_pem,
    // which for a self-signed BMC is that certificate).
    let by_file = target(&m, None);
    assert!(by_file.target.tls.ca_file.is_some() && !by_file.target.tls.insecure);
    let d = driver(&by_file.target);
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    let out = execute(d.as_ref(), PowerAction::Off, &policy())
        .await
        .unwrap();
    assert_eq!(out.commands_sent, vec![PowerAction::Off]);
    assert_eq!(m.power("1"), Some(MockPower::Off));

    // A pin: no CA file at all.
    let mut pinned = target(&m, None).target;
    pinned.tls = TlsSettings {
        fingerprint: Some(pin_of(&m)),
        ..TlsSettings::default()
    };
    let d = driver(&pinned);
    assert_eq!(d.status().await.unwrap().state, PowerState::Off);
    m.set_power("1", MockPower::On);
    execute(d.as_ref(), PowerAction::Off, &policy())
        .await
        .unwrap();
    assert_eq!(m.power("1"), Some(MockPower::Off));
}

#[tokio::test]
async fn another_certificate_is_refused_under_both_once_and_said_why() {
    let real = bmc(CertKind::SelfSigned).await;
    let impostor = bmc(CertKind::SelfSigned).await;
    let (endpoint, connections) = counted(&impostor).await;

    // ca_file holds the real BMC's certificate; the impostor presents its own.
    let mut by_file = target(&real, None);
    by_file.target.endpoint = endpoint.parse().unwrap();
    let err = driver(&by_file.target).status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Tls, "{err}");
    assert!(err.message.contains("self-signed certificate"), "{err}");
    assert!(
        err.message.contains(&pin_of(&impostor).to_string()),
        "{err}"
    );
    assert!(err.message.contains("set ca_file"), "{err}");
    assert_eq!(
        connections.load(Ordering::SeqCst),
        1,
        "a refused certificate is not retried (retries = 3 for errors that may pass)"
    );

    let mut pinned = by_file.target.clone();
    pinned.tls = TlsSettings {
        fingerprint: Some(pin_of(&real)),
        ..TlsSettings::default()
    };
    let err = driver(&pinned).status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Tls);
    assert!(
        err.message.contains("does not match tls_fingerprint"),
        "{err}"
    );
    assert!(
        err.message.contains(&pin_of(&impostor).to_string()),
        "the message shows what was presented: {err}"
    );
    assert_eq!(connections.load(Ordering::SeqCst), 2);
    assert!(impostor.request_log().is_empty(), "nothing was ever sent");
    assert_eq!(impostor.power("1"), Some(MockPower::On));
}

#[tokio::test]
async fn a_default_name_needs_a_pin_and_expired_or_unknown_certificates_say_what_to_set() {
    let m = bmc(CertKind::SelfSignedDefaultName).await;
    let err = driver(&target(&m, None).target).status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Tls);
    assert!(err.message.contains("not valid for that name"), "{err}");
    assert!(
        err.message.contains(DEFAULT_BMC_NAME),
        "names what it carries: {err}"
    );
    assert!(err.message.contains("tls_fingerprint"), "{err}");
    let mut pinned = target(&m, None).target;
    pinned.tls = TlsSettings {
        fingerprint: Some(pin_of(&m)),
        ..TlsSettings::default()
    };
    assert_eq!(
        driver(&pinned).status().await.unwrap().state,
        PowerState::On
    );

    let old = bmc(CertKind::Expired).await;
    let err = driver(&target(&old, None).target)
        .status()
        .await
        .unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Tls);
    assert!(err.message.contains("expired on 2020-01-01"), "{err}");
    let mut pinned = target(&old, None).target;
    pinned.tls = TlsSettings {
        fingerprint: Some(pin_of(&old)),
        ..TlsSettings::default()
    };
    assert_eq!(
        driver(&pinned).status().await.unwrap().state,
        PowerState::On
    );

    // No trust setting at all: the system trust store does not know it.
    let mut system = target(&m, None).target;
    system.tls = TlsSettings::default();
    let err = driver(&system).status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Tls);
    assert!(err.message.contains("the system trust store"), "{err}");

    // What the refusal kinds are, for the verifier itself.
    let verifier = nodefence::tls::verifier(&TlsSettings {
        fingerprint: Some(pin_of(&old)),
        ..TlsSettings::default()
    })
    .unwrap();
    let other = der_of(&m.certificate_pem().unwrap());
    let refusal = verifier
        .check_presented(
            &CertificateDer::from(other),
            &[],
            &"localhost".try_into().unwrap(),
            rustls::pki_types::UnixTime::now(),
        )
        .unwrap_err();
    assert_eq!(refusal.kind, RefusalKind::PinMismatch);
}

#[tokio::test]
async fn redirects_on_the_bmcs_own_origin_are_followed_and_others_refused() {
    let m = MockRedfish::builder()
        .system(SystemSpec::new("1").power(MockPower::On))
        .credentials(common::USER, common::PASSWORD)
        .start()
        .await
        .unwrap();
    m.inject(Fault::RedirectServiceRoot {
        status: 308,
        location: "/redfish/v1/".into(),
    });
    let t = target(&m, None);
    let d = driver(&t.target);
    assert_eq!(d.status().await.unwrap().state, PowerState::On);

    // Every path redirected to its slashed form, the Reset POST included (307 keeps it).
    m.clear_faults();
    m.inject(Fault::TrailingSlashRedirect { status: 307 });
    let d = driver(&t.target);
    execute(d.as_ref(), PowerAction::Off, &policy())
        .await
        .unwrap();
    assert_eq!(m.power("1"), Some(MockPower::Off));
    assert_eq!(m.reset_log().len(), 1);

    // A 301 on the Reset POST would turn it into a GET: refused, nothing powered.
    m.set_power("1", MockPower::On);
    m.clear_logs();
    m.clear_faults();
    m.inject(Fault::TrailingSlashRedirect { status: 301 });
    let d = driver(&t.target);
    assert_eq!(
        d.status().await.unwrap().state,
        PowerState::On,
        "GETs follow a 301"
    );
    let err = d.power_off().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Protocol);
    assert!(err.message.contains("only 307 and 308"), "{err}");
    assert!(m.reset_log().is_empty());
    assert_eq!(m.power("1"), Some(MockPower::On));

    // Another origin: refused, named, and no credentials sent there.
    let elsewhere = MockRedfish::builder().start().await.unwrap();
    m.clear_faults();
    m.inject(Fault::RedirectServiceRoot {
        status: 308,
        location: format!("{}/redfish/v1/", elsewhere.base_url()),
    });
    let err = driver(&t.target).status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Protocol);
    assert!(err.message.contains("another origin"), "{err}");
    assert!(err.message.contains(&elsewhere.base_url()), "{err}");
    assert!(elsewhere.request_log().is_empty());

    // A loop still ends, with a bounded number of hops.
    m.clear_faults();
    m.inject(Fault::RedirectLoop);
    let err = driver(&t.target).status().await.unwrap_err();
    assert!(err.message.contains("redirect"), "{err}");
}

#[tokio::test]
async fn a_service_that_wants_basic_on_login_gets_it_and_one_that_refuses_sessions_gets_basic() {
    let m = MockRedfish::builder()
        .system(SystemSpec::new("1").power(MockPower::On))
        .credentials(common::USER, common::PASSWORD)
        .session_login(SessionLogin::BasicRequired)
        .start()
        .await
        .unwrap();
    let d = driver(&target(&m, None).target);
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    let auth: Vec<AuthKind> = m
        .request_log()
        .iter()
        .filter(|r| r.path.starts_with("/redfish/v1/Systems"))
        .map(|r| r.auth)
        .collect();
    assert!(
        auth.iter().all(|a| *a == AuthKind::Session),
        "a session, obtained with Basic on the login: {auth:?}"
    );
    assert_eq!(m.active_sessions(), 1);

    let m = MockRedfish::builder()
        .system(SystemSpec::new("1").power(MockPower::On))
        .credentials(common::USER, common::PASSWORD)
        .session_login(SessionLogin::Refused)
        .start()
        .await
        .unwrap();
    let d = driver(&target(&m, None).target);
    execute(d.as_ref(), PowerAction::Off, &policy())
        .await
        .unwrap();
    assert_eq!(m.power("1"), Some(MockPower::Off));
    let logins = m
        .request_log()
        .iter()
        .filter(|r| r.method == "POST" && r.path.contains("Sessions"))
        .count();
    assert_eq!(
        logins, 2,
        "tried once plain, once with Basic, then remembered"
    );

    // Wrong password on such a service: the credentials are blamed, naming both ways.
    let mut wrong = target(&m, None).target;
    wrong.credential.password = "nope".to_string().into();
    let err = driver(&wrong).status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Auth);
    assert!(err.message.contains("with HTTP Basic"), "{err}");
    assert!(
        err.message.contains("session login was refused too"),
        "{err}"
    );
    assert!(!err.message.contains("nope"));

    // auth = "session" does not fall back.
    let mut forced = target(&m, None).target;
    forced.auth = RedfishAuth::Session;
    let err = driver(&forced).status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Auth);
    assert!(err.message.contains("auth = \"auto\""), "{err}");
}

#[tokio::test]
async fn a_read_only_user_is_told_it_lacks_the_privilege_and_nothing_is_claimed() {
    for (status, login) in [
        (401, SessionLogin::Open),
        (403, SessionLogin::Open),
        (401, SessionLogin::Refused),
    ] {
        let m = MockRedfish::builder()
            .system(SystemSpec::new("1").power(MockPower::On))
            .account("viewer", common::PASSWORD, Role::ReadOnly)
            .privilege_error_status(status)
            .session_login(login)
            .start()
            .await
            .unwrap();
        let mut t = target(&m, None).target;
        t.credential.username = "viewer".into();
        let d = driver(&t);
        assert_eq!(d.status().await.unwrap().state, PowerState::On);
        let err = execute(d.as_ref(), PowerAction::Off, &policy())
            .await
            .unwrap_err();
        let ActionError::Command { error: e, .. } = &err else {
            panic!("{status} {login:?}: {err}");
        };
        assert_eq!(e.kind, PowerErrorKind::Privilege, "{status} {login:?}: {e}");
        assert!(e.message.contains("ConfigureComponents"), "{e}");
        assert!(e.message.contains("Operator"), "{e}");
        assert!(!e.message.contains("rejected the credentials"), "{e}");
        assert_eq!(m.power("1"), Some(MockPower::On));
        assert!(m.reset_log().is_empty());
    }
}

#[tokio::test]
async fn every_request_names_nodefence() {
    let m = bmc(CertKind::SelfSigned).await;
    let d = driver(&target(&m, None).target);
    execute(d.as_ref(), PowerAction::Off, &policy())
        .await
        .unwrap();
    let agents: Vec<Option<String>> = m.request_log().into_iter().map(|r| r.user_agent).collect();
    assert!(agents.len() > 3);
    let ours = concat!("nodefence/", env!("CARGO_PKG_VERSION"));
    assert!(
        agents.iter().all(|a| a.as_deref() == Some(ours)),
        "{agents:?}"
    );
    tokio::time::sleep(Duration::ZERO).await;
}
