//! Every injected fault, observed from the client side over real HTTP, and the
//! guarantee that faults never touch the admin API.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::{
    Auth, basic, client, client_with, eventually, get, post, reported_power, reset, try_send, url,
};
use nodefence_mocks::redfish::{Fault, MockPower, MockRedfish, MockRedfishHandle, Profile};
use reqwest::Method;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn start() -> MockRedfishHandle {
    MockRedfish::builder().start().await.unwrap()
}

#[tokio::test]
async fn fail500_answers_n_errors_then_recovers() {
    let bmc = start().await;
    let c = client(&bmc);
    bmc.inject(Fault::Fail500 { count: 2 });
    for _ in 0..2 {
        let r = get(&c, &bmc, "/redfish/v1", Auth::None).await;
        assert_eq!(r.status, 500);
        assert!(
            r.json()["error"]["code"]
                .as_str()
                .unwrap()
                .starts_with("Base.")
        );
        assert!(r.message_id().ends_with(".InternalError"));
    }
    assert_eq!(get(&c, &bmc, "/redfish/v1", Auth::None).await.status, 200);
    assert!(bmc.faults().is_empty(), "the count is used up");
}

#[tokio::test]
async fn hang_never_answers_until_cleared() {
    let bmc = start().await;
    bmc.inject(Fault::Hang);
    let impatient = client_with(&bmc, |b| b.timeout(Duration::from_millis(300)));
    let err = try_send(
        &impatient,
        Method::GET,
        &url(&bmc, "/redfish/v1"),
        Auth::None,
        None,
    )
    .await
    .expect_err("a hung BMC never answers");
    assert!(err.is_timeout(), "{err:?}");

    // A patient request is answered as soon as the fault is cleared.
    let c = client(&bmc);
    let target = url(&bmc, "/redfish/v1/Systems");
    let auth_user = bmc.username().to_owned();
    let auth_pass = bmc.password().to_owned();
    let waiting = tokio::spawn(async move {
        try_send(
            &c,
            Method::GET,
            &target,
            Auth::Basic(&auth_user, &auth_pass),
            None,
        )
        .await
    });
    eventually(
        "the second request is hanging",
        Duration::from_secs(5),
        async || {
            bmc.request_log()
                .iter()
                .any(|r| r.path == "/redfish/v1/Systems" && r.status.is_none())
        },
    )
    .await;
    assert!(!waiting.is_finished());
    bmc.clear_faults();
    let answered = waiting.await.unwrap().unwrap();
    assert_eq!(answered.status, 200);
}

#[tokio::test]
async fn drop_connection_sends_no_bytes() {
    let bmc = start().await;
    bmc.inject(Fault::DropConnection { count: 2 });

    let mut raw = tokio::net::TcpStream::connect(bmc.addr()).await.unwrap();
    raw.write_all(b"GET /redfish/v1 HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut received = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), raw.read_to_end(&mut received)).await;
    assert!(read.is_ok(), "the connection is closed, not left open");
    assert!(
        received.is_empty(),
        "no HTTP response at all: {:?}",
        String::from_utf8_lossy(&received)
    );

    let c = client(&bmc);
    let err = try_send(&c, Method::GET, &url(&bmc, "/redfish/v1"), Auth::None, None)
        .await
        .expect_err("the client sees a broken connection");
    assert!(!err.is_timeout(), "{err:?}");
    assert_eq!(
        get(&c, &bmc, "/redfish/v1", Auth::None).await.status,
        200,
        "count used up"
    );
    let statuses: Vec<Option<u16>> = bmc.request_log().iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![None, None, Some(200)]);
}

#[tokio::test]
async fn drop_connection_over_tls() {
    let bmc = MockRedfish::builder().tls(true).start().await.unwrap();
    bmc.inject(Fault::DropConnection { count: 1 });
    let c = client(&bmc);
    let err = try_send(&c, Method::GET, &url(&bmc, "/redfish/v1"), Auth::None, None).await;
    assert!(err.is_err(), "{err:?}");
    assert_eq!(get(&c, &bmc, "/redfish/v1", Auth::None).await.status, 200);
}

#[tokio::test]
async fn reject_credentials_refuses_every_kind_of_auth() {
    let bmc = start().await;
    let c = client(&bmc);
    let creds = json!({ "UserName": bmc.username(), "Password": bmc.password() });
    let login = post(
        &c,
        &bmc,
        "/redfish/v1/SessionService/Sessions",
        Auth::None,
        creds.clone(),
    )
    .await;
    let token = login.header("x-auth-token").unwrap();

    bmc.inject(Fault::RejectCredentials);
    assert_eq!(
        get(&c, &bmc, "/redfish/v1/Systems", basic(&bmc))
            .await
            .status,
        401
    );
    assert_eq!(
        get(&c, &bmc, "/redfish/v1/Systems", Auth::Token(&token))
            .await
            .status,
        401
    );
    let relogin = post(
        &c,
        &bmc,
        "/redfish/v1/SessionService/Sessions",
        Auth::None,
        creds,
    )
    .await;
    assert_eq!(relogin.status, 401);
    assert_eq!(
        get(&c, &bmc, "/redfish/v1", Auth::None).await.status,
        200,
        "root stays public"
    );

    bmc.clear_faults();
    assert_eq!(
        get(&c, &bmc, "/redfish/v1/Systems", basic(&bmc))
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn lie_on_after_off_accepts_and_ignores_force_off() {
    for profile in [Profile::OpenBmc, Profile::Ilo] {
        let bmc = MockRedfish::builder()
            .profile(profile)
            .start()
            .await
            .unwrap();
        let id = bmc.systems()[0].id.clone();
        let c = client(&bmc);
        bmc.inject(Fault::LieOnAfterOff);
        let answer = reset(&c, &bmc, &id, "ForceOff").await;
        assert!(
            matches!(answer.status, 202 | 204),
            "accepted: {}",
            answer.status
        );
        assert_eq!(reported_power(&c, &bmc, &id).await.as_deref(), Some("On"));
        assert_eq!(
            bmc.power(&id),
            Some(MockPower::On),
            "the mock's truth agrees"
        );
        assert_eq!(bmc.reset_log(), vec![(id.clone(), "ForceOff".to_owned())]);
        if profile == Profile::Ilo {
            let monitor = answer.header("location").unwrap();
            let task = get(&c, &bmc, &monitor, basic(&bmc)).await;
            assert_eq!(task.status, 200);
            assert_eq!(task.json()["TaskState"], "Completed", "the task lies too");
        }
    }
}

#[tokio::test]
async fn flap_alternates_after_power_off() {
    let bmc = start().await;
    let c = client(&bmc);
    bmc.inject(Fault::Flap);
    assert_eq!(
        reported_power(&c, &bmc, "system").await.as_deref(),
        Some("On"),
        "no flap while on"
    );
    assert_eq!(reset(&c, &bmc, "system", "ForceOff").await.status, 204);
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(reported_power(&c, &bmc, "system").await.unwrap());
    }
    assert_eq!(seen, ["Off", "On", "Off", "On"]);
    assert_eq!(bmc.power("system"), Some(MockPower::Off));
}

#[tokio::test]
async fn html_pages_instead_of_json() {
    let bmc = start().await;
    let c = client(&bmc);
    bmc.inject(Fault::HtmlErrorPage);
    let r = get(&c, &bmc, "/redfish/v1/Systems/system", basic(&bmc)).await;
    assert_eq!(r.status, 503);
    assert!(r.header("content-type").unwrap().starts_with("text/html"));
    assert!(r.text.starts_with("<!DOCTYPE html>"));
    bmc.clear_faults();

    bmc.inject(Fault::HtmlLoginPage);
    let r = get(&c, &bmc, "/redfish/v1/Systems/system", basic(&bmc)).await;
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/html"));
    assert!(serde_json::from_str::<serde_json::Value>(&r.text).is_err());
}

#[tokio::test]
async fn wrong_content_type_keeps_the_json() {
    let bmc = start().await;
    let c = client(&bmc);
    bmc.inject(Fault::WrongContentType);
    let r = get(&c, &bmc, "/redfish/v1/Systems/system", basic(&bmc)).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(r.json()["PowerState"], "On");
}

#[tokio::test]
async fn malformed_json_is_truncated() {
    let bmc = start().await;
    let c = client(&bmc);
    bmc.inject(Fault::MalformedJson);
    let r = get(&c, &bmc, "/redfish/v1/Systems/system", basic(&bmc)).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/json; charset=utf-8")
    );
    assert!(r.text.starts_with('{'));
    assert!(serde_json::from_str::<serde_json::Value>(&r.text).is_err());
}

#[tokio::test]
async fn redirect_loop_points_at_itself() {
    let bmc = start().await;
    bmc.inject(Fault::RedirectLoop);
    let c = client(&bmc);
    let r = get(&c, &bmc, "/redfish/v1/Systems", basic(&bmc)).await;
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location").as_deref(), Some("/redfish/v1/Systems"));
    let follower = client_with(&bmc, |b| b.redirect(reqwest::redirect::Policy::limited(5)));
    let err = try_send(
        &follower,
        Method::GET,
        &url(&bmc, "/redfish/v1"),
        Auth::None,
        None,
    )
    .await
    .expect_err("a redirect loop never ends");
    assert!(err.is_redirect(), "{err:?}");
}

#[tokio::test]
async fn slow_delays_every_answer() {
    let bmc = start().await;
    let c = client(&bmc);
    let delay = Duration::from_millis(300);
    bmc.inject(Fault::Slow(delay));
    let started = std::time::Instant::now();
    assert_eq!(get(&c, &bmc, "/redfish/v1", Auth::None).await.status, 200);
    assert!(started.elapsed() >= delay, "{:?}", started.elapsed());
}

#[tokio::test]
async fn power_state_absent_or_unknown() {
    let bmc = start().await;
    let c = client(&bmc);
    bmc.inject(Fault::PowerStateAbsent);
    let system = get(&c, &bmc, "/redfish/v1/Systems/system", basic(&bmc))
        .await
        .json();
    assert!(system.get("PowerState").is_none(), "{system}");
    assert_eq!(system["Id"], "system", "the rest of the resource is intact");

    bmc.inject(Fault::PowerStateValue("Standby".into()));
    assert_eq!(
        reported_power(&c, &bmc, "system").await.as_deref(),
        Some("Standby")
    );
    assert_eq!(bmc.power("system"), Some(MockPower::On));
    bmc.clear_faults();
    assert_eq!(
        reported_power(&c, &bmc, "system").await.as_deref(),
        Some("On")
    );
}

#[tokio::test]
async fn reject_reset_when_off() {
    let bmc = start().await;
    let c = client(&bmc);
    bmc.inject(Fault::RejectResetWhenOff);
    assert_eq!(
        reset(&c, &bmc, "system", "ForceOff").await.status,
        204,
        "allowed while on"
    );
    let refused = reset(&c, &bmc, "system", "ForceOff").await;
    assert_eq!(refused.status, 400);
    assert!(refused.message_id().ends_with(".OperationNotAllowed"));
    assert_eq!(
        reset(&c, &bmc, "system", "On").await.status,
        204,
        "On is fine while off"
    );
    assert_eq!(bmc.power("system"), Some(MockPower::On));
    assert_eq!(bmc.reset_log().len(), 3);
}

#[tokio::test]
async fn oversized_body_is_still_json() {
    let bmc = start().await;
    let c = client(&bmc);
    bmc.inject(Fault::OversizedBody { bytes: 2 << 20 });
    let r = get(&c, &bmc, "/redfish/v1/Systems/system", basic(&bmc)).await;
    assert!(r.text.len() >= 2 << 20, "{}", r.text.len());
    assert_eq!(r.json()["PowerState"], "On");
}

#[tokio::test]
async fn faults_combine_and_clear() {
    let bmc = start().await;
    bmc.inject(Fault::Flap);
    bmc.inject(Fault::Slow(Duration::from_millis(1)));
    bmc.inject(Fault::Fail500 { count: 1 });
    assert_eq!(
        bmc.faults(),
        vec![
            Fault::Fail500 { count: 1 },
            Fault::Flap,
            Fault::Slow(Duration::from_millis(1))
        ]
    );
    bmc.clear_faults();
    assert!(bmc.faults().is_empty());
}

#[tokio::test]
async fn faults_never_touch_the_admin_api() {
    let bmc = start().await;
    let c = client_with(&bmc, |b| b.timeout(Duration::from_secs(2)));
    for fault in [
        Fault::Hang,
        Fault::Fail500 { count: 10 },
        Fault::DropConnection { count: 10 },
        Fault::RedirectLoop,
        Fault::HtmlErrorPage,
        Fault::MalformedJson,
    ] {
        bmc.inject(fault.clone());
        let r = get(&c, &bmc, "/admin/systems", Auth::None).await;
        assert_eq!(r.status, 200, "{fault:?}");
        assert_eq!(r.json()[0]["id"], "system", "{fault:?}");
        let off = post(
            &c,
            &bmc,
            "/admin/systems/system/power",
            Auth::None,
            json!({ "state": "Off" }),
        )
        .await;
        assert_eq!(off.status, 200, "{fault:?}");
        bmc.clear_faults();
    }
    assert!(
        bmc.request_log().is_empty(),
        "admin requests are not Redfish requests"
    );
}
