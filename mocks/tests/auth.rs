//! Authentication as clients meet it: Basic on every request, Redfish sessions with
//! `X-Auth-Token`, logout, expiry and re-login, and wrong credentials.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Auth, basic, client, get, post, send, url};
use nodefence_mocks::redfish::{AuthKind, MockRedfish, Profile, RequestRecord};
use reqwest::Method;
use serde_json::json;

const SESSIONS: &str = "/redfish/v1/SessionService/Sessions";

#[tokio::test]
async fn basic_auth_is_checked_on_every_request() {
    let bmc = MockRedfish::builder()
        .credentials("admin", "secret")
        .start()
        .await
        .unwrap();
    let c = client(&bmc);

    let anonymous = get(&c, &bmc, "/redfish/v1/Systems", Auth::None).await;
    assert_eq!(anonymous.status, 401);
    assert_eq!(
        anonymous.header("www-authenticate").as_deref(),
        Some("Basic realm=\"mock-redfish\"")
    );
    assert!(anonymous.json()["error"]["message"].is_string());

    let wrong = get(
        &c,
        &bmc,
        "/redfish/v1/Systems",
        Auth::Basic("admin", "nope"),
    )
    .await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.message_id().ends_with(".ResourceAtUriUnauthorized"));
    let wrong_user = get(
        &c,
        &bmc,
        "/redfish/v1/Systems",
        Auth::Basic("root", "secret"),
    )
    .await;
    assert_eq!(wrong_user.status, 401);

    let right = get(
        &c,
        &bmc,
        "/redfish/v1/Systems",
        Auth::Basic("admin", "secret"),
    )
    .await;
    assert_eq!(right.status, 200);

    // The service root needs no credentials, whatever is presented.
    assert_eq!(
        get(&c, &bmc, "/redfish/v1", Auth::Basic("x", "y"))
            .await
            .status,
        200
    );

    let log = bmc.request_log();
    assert_eq!(
        log[..4],
        [
            RequestRecord {
                method: "GET".into(),
                path: "/redfish/v1/Systems".into(),
                auth: AuthKind::None,
                status: Some(401),
                user_agent: None,
            },
            RequestRecord {
                method: "GET".into(),
                path: "/redfish/v1/Systems".into(),
                auth: AuthKind::Basic,
                status: Some(401),
                user_agent: None,
            },
            RequestRecord {
                method: "GET".into(),
                path: "/redfish/v1/Systems".into(),
                auth: AuthKind::Basic,
                status: Some(401),
                user_agent: None,
            },
            RequestRecord {
                method: "GET".into(),
                path: "/redfish/v1/Systems".into(),
                auth: AuthKind::Basic,
                status: Some(200),
                user_agent: None,
            },
        ]
    );
}

#[tokio::test]
async fn malformed_basic_header_is_refused() {
    let bmc = MockRedfish::builder().start().await.unwrap();
    let c = client(&bmc);
    let r = c
        .get(url(&bmc, "/redfish/v1/Systems"))
        .header("Authorization", "Basic ***not-base64***")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(bmc.request_log()[0].auth, AuthKind::Basic);
}

#[tokio::test]
async fn session_lifecycle() {
    for profile in [
        Profile::OpenBmc,
        Profile::Idrac,
        Profile::Ilo,
        Profile::MultiSystem,
    ] {
        let bmc = MockRedfish::builder()
            .profile(profile)
            .credentials("admin", "secret")
            .start()
            .await
            .unwrap();
        let c = client(&bmc);
        let service = get(&c, &bmc, "/redfish/v1/SessionService", basic(&bmc)).await;
        assert_eq!(service.status, 200);
        assert_eq!(service.json()["ServiceEnabled"], true);

        let login = post(
            &c,
            &bmc,
            SESSIONS,
            Auth::None,
            json!({ "UserName": "admin", "Password": "secret" }),
        )
        .await;
        assert_eq!(login.status, 201, "{profile}: {}", login.text);
        let token = login.header("x-auth-token").expect("X-Auth-Token header");
        let location = login.header("location").expect("Location header");
        let body = login.json();
        let odata_id = body["@odata.id"].as_str().unwrap().to_owned();
        assert!(
            location.ends_with(&odata_id),
            "{profile}: {location} vs {odata_id}"
        );
        if profile == Profile::Ilo {
            assert!(
                location.starts_with(&bmc.base_url()),
                "iLO Location is absolute"
            );
            assert!(odata_id.ends_with('/'));
        } else {
            assert_eq!(location, odata_id);
        }
        assert_eq!(body["UserName"], "admin");
        assert_eq!(bmc.active_sessions(), 1);

        let systems = get(&c, &bmc, "/redfish/v1/Systems", Auth::Token(&token)).await;
        assert_eq!(systems.status, 200);
        assert_eq!(bmc.request_log().last().unwrap().auth, AuthKind::Session);

        let me = get(&c, &bmc, &location, Auth::Token(&token)).await;
        assert_eq!(me.status, 200);
        assert_eq!(me.json()["Id"], body["Id"]);
        let all = get(&c, &bmc, SESSIONS, Auth::Token(&token)).await.json();
        assert_eq!(all["Members@odata.count"], 1);

        let logout = send(
            &c,
            Method::DELETE,
            &url(&bmc, &location),
            Auth::Token(&token),
            None,
        )
        .await;
        assert_eq!(logout.status, 204, "{profile}");
        assert_eq!(bmc.active_sessions(), 0);
        let after = get(&c, &bmc, "/redfish/v1/Systems", Auth::Token(&token)).await;
        assert_eq!(after.status, 401, "a deleted session's token is dead");
        assert!(after.message_id().ends_with(".NoValidSession"));
        let again = send(&c, Method::DELETE, &url(&bmc, &location), basic(&bmc), None).await;
        assert_eq!(again.status, 404);
    }
}

#[tokio::test]
async fn expired_sessions_force_a_new_login() {
    let bmc = MockRedfish::builder().start().await.unwrap();
    let c = client(&bmc);
    let creds = json!({ "UserName": bmc.username(), "Password": bmc.password() });
    let first = post(&c, &bmc, SESSIONS, Auth::None, creds.clone()).await;
    let old = first.header("x-auth-token").unwrap();
    assert_eq!(
        get(&c, &bmc, "/redfish/v1/Systems", Auth::Token(&old))
            .await
            .status,
        200
    );

    bmc.expire_sessions();
    assert_eq!(bmc.active_sessions(), 0);
    assert_eq!(
        get(&c, &bmc, "/redfish/v1/Systems", Auth::Token(&old))
            .await
            .status,
        401
    );

    let second = post(&c, &bmc, SESSIONS, Auth::None, creds).await;
    assert_eq!(second.status, 201);
    let new = second.header("x-auth-token").unwrap();
    assert_ne!(old, new);
    assert_eq!(
        get(&c, &bmc, "/redfish/v1/Systems", Auth::Token(&new))
            .await
            .status,
        200
    );
    assert_eq!(
        get(&c, &bmc, "/redfish/v1/Systems", Auth::Token(&old))
            .await
            .status,
        401
    );
}

#[tokio::test]
async fn login_failures() {
    let bmc = MockRedfish::builder()
        .credentials("admin", "secret")
        .start()
        .await
        .unwrap();
    let c = client(&bmc);
    let wrong = post(
        &c,
        &bmc,
        SESSIONS,
        Auth::None,
        json!({ "UserName": "admin", "Password": "x" }),
    )
    .await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.header("x-auth-token").is_none());
    let missing = post(
        &c,
        &bmc,
        SESSIONS,
        Auth::None,
        json!({ "UserName": "admin" }),
    )
    .await;
    assert_eq!(missing.status, 400);
    assert!(missing.message_id().ends_with(".PropertyMissing"));
    let not_json = send(&c, Method::POST, &url(&bmc, SESSIONS), Auth::None, None).await;
    assert_eq!(not_json.status, 400);
    assert_eq!(bmc.active_sessions(), 0);
    // Listing sessions needs authentication.
    assert_eq!(get(&c, &bmc, SESSIONS, Auth::None).await.status, 401);
    let bogus = get(&c, &bmc, "/redfish/v1/Systems", Auth::Token("forged")).await;
    assert_eq!(bogus.status, 401);
}
