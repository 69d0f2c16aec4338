//! What real BMCs do that the lab forgets, as the mock does it: read-only accounts,
//! services that want Basic on the login or refuse sessions, redirected service roots
//! and trailing slashes, hostile strings, the certificates BMCs ship, and the
//! User-Agent in the request log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Auth, basic, client, get, post, reset};
use nodefence_mocks::redfish::{
    BASIC_REQUIRED_MESSAGE, Fault, HOSTILE, MockPower, MockRedfish, Role, SessionLogin, SystemSpec,
};
use nodefence_mocks::tls::CertKind;
use serde_json::json;

const SESSIONS: &str = "/redfish/v1/SessionService/Sessions";

#[tokio::test]
async fn a_read_only_user_reads_but_its_reset_is_refused_and_not_performed() {
    for status in [401, 403] {
        let bmc = MockRedfish::builder()
            .system(SystemSpec::new("1").power(MockPower::On))
            .account("viewer", "view-pw", Role::ReadOnly)
            .privilege_error_status(status)
            .start()
            .await
            .unwrap();
        let c = client(&bmc);
        let ro = Auth::Basic("viewer", "view-pw");
        assert_eq!(get(&c, &bmc, &bmc.system_path("1"), ro).await.status, 200);
        let login = post(
            &c,
            &bmc,
            SESSIONS,
            Auth::None,
            json!({"UserName": "viewer", "Password": "view-pw"}),
        )
        .await;
        assert_eq!(login.status, 201, "a read-only user may log in");
        let token = login.header("x-auth-token").unwrap();
        let target = "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset";
        for auth in [ro, Auth::Token(&token)] {
            let refused = post(&c, &bmc, target, auth, json!({"ResetType": "ForceOff"})).await;
            assert_eq!(refused.status, status);
            assert!(
                refused.message_id().ends_with(".InsufficientPrivilege"),
                "{}",
                refused.text
            );
        }
        assert_eq!(bmc.power("1"), Some(MockPower::On));
        assert!(bmc.reset_log().is_empty());
        // The administrator still can.
        assert_eq!(reset(&c, &bmc, "1", "ForceOff").await.status, 204);
    }
}

#[tokio::test]
async fn session_login_modes() {
    let body = || json!({"UserName": "admin", "Password": "password"});
    let bmc = MockRedfish::builder()
        .session_login(SessionLogin::BasicRequired)
        .start()
        .await
        .unwrap();
    let c = client(&bmc);
    let without = post(&c, &bmc, SESSIONS, Auth::None, body()).await;
    assert_eq!(without.status, 401);
    assert_eq!(without.json()["error"]["message"], BASIC_REQUIRED_MESSAGE);
    let with = post(&c, &bmc, SESSIONS, basic(&bmc), body()).await;
    assert_eq!(with.status, 201);
    assert!(with.header("x-auth-token").is_some());

    let bmc = MockRedfish::builder()
        .session_login(SessionLogin::Refused)
        .start()
        .await
        .unwrap();
    let c = client(&bmc);
    let service = get(&c, &bmc, "/redfish/v1/SessionService", basic(&bmc)).await;
    assert_eq!(service.json()["ServiceEnabled"], false);
    for auth in [Auth::None, basic(&bmc)] {
        assert_eq!(post(&c, &bmc, SESSIONS, auth, body()).await.status, 401);
    }
    assert_eq!(
        get(&c, &bmc, "/redfish/v1/Systems", basic(&bmc))
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn redirect_faults_answer_what_web_servers_do() {
    let bmc = MockRedfish::builder().start().await.unwrap();
    let c = client(&bmc);
    bmc.inject(Fault::RedirectServiceRoot {
        status: 308,
        location: "/redfish/v1/".into(),
    });
    let root = get(&c, &bmc, "/redfish/v1", Auth::None).await;
    assert_eq!(root.status, 308);
    assert_eq!(root.header("location").as_deref(), Some("/redfish/v1/"));
    assert_eq!(get(&c, &bmc, "/redfish/v1/", Auth::None).await.status, 200);
    bmc.clear_faults();

    bmc.inject(Fault::TrailingSlashRedirect { status: 307 });
    let systems = get(&c, &bmc, "/redfish/v1/Systems", basic(&bmc)).await;
    assert_eq!(systems.status, 307);
    assert_eq!(
        systems.header("location").as_deref(),
        Some("/redfish/v1/Systems/")
    );
    assert_eq!(
        get(&c, &bmc, "/redfish/v1/Systems/", basic(&bmc))
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn hostile_strings_reach_every_printable_field_and_no_id() {
    let bmc = MockRedfish::builder()
        .system(SystemSpec::new("1").power(MockPower::On))
        .start()
        .await
        .unwrap();
    let c = client(&bmc);
    bmc.inject(Fault::HostileStrings);
    let system = get(&c, &bmc, &bmc.system_path("1"), basic(&bmc))
        .await
        .json();
    for field in [
        "PowerState",
        "UUID",
        "Name",
        "Manufacturer",
        "Model",
        "SerialNumber",
    ] {
        assert_eq!(system[field], HOSTILE, "{field}");
    }
    assert_eq!(system["Id"], "1");
    let error = get(&c, &bmc, "/redfish/v1/Nope", basic(&bmc)).await;
    assert_eq!(error.status, 404);
    assert!(
        error.json()["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with(HOSTILE)
    );
}

#[tokio::test]
async fn the_request_log_keeps_the_user_agent() {
    let bmc = MockRedfish::builder().start().await.unwrap();
    let c = common::client_with(&bmc, |b| b.user_agent("probe/1.0"));
    get(&c, &bmc, "/redfish/v1", Auth::None).await;
    assert_eq!(
        bmc.request_log()[0].user_agent.as_deref(),
        Some("probe/1.0")
    );
}

#[tokio::test]
async fn self_signed_kinds_present_the_certificate_they_hand_out() {
    for kind in [
        CertKind::SelfSigned,
        CertKind::SelfSignedDefaultName,
        CertKind::Expired,
    ] {
        let bmc = MockRedfish::builder()
            .certificate(kind)
            .start()
            .await
            .unwrap();
        assert!(bmc.base_url().starts_with("https://"));
        let presented = bmc.certificate_pem().unwrap();
        assert_eq!(
            bmc.ca_pem().as_deref(),
            Some(presented.as_str()),
            "{kind:?}"
        );
    }
    // The private-CA kind hands out its CA, not the certificate it presents.
    let bmc = MockRedfish::builder().tls(true).start().await.unwrap();
    assert_ne!(bmc.ca_pem(), bmc.certificate_pem());
}
