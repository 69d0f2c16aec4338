//! The `/admin` API that scripts steer the mock with: systems, power, faults, logs,
//! sessions — each checked against what a Redfish client then observes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::{Auth, basic, client, get, post, reported_power, reset, send, url};
use nodefence_mocks::redfish::{
    Fault, MockPower, MockRedfish, Profile, RequestRecord, ResetRecord, SystemInfo, SystemSpec,
};
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn systems_and_power() {
    let bmc = MockRedfish::builder()
        .profile(Profile::MultiSystem)
        .system(SystemSpec::new("Blade1").uuid("u-1").name("first"))
        .system(SystemSpec::new("Blade2").power(MockPower::Off))
        .tls(true)
        .start()
        .await
        .unwrap();
    let c = client(&bmc);

    let list: Vec<SystemInfo> =
        serde_json::from_str(&get(&c, &bmc, "/admin/systems", Auth::None).await.text).unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0].id, "Blade1");
    assert_eq!(list[0].uuid, "u-1");
    assert_eq!(list[0].name, "first");
    assert_eq!(list[0].power, MockPower::On);
    assert!(list[0].reset_types.contains(&"ForceOff".to_owned()));
    assert_eq!(list[1].power, MockPower::Off);

    let one = get(&c, &bmc, "/admin/systems/Blade2", Auth::None).await;
    assert_eq!(one.json()["power"], "Off");
    assert_eq!(
        get(&c, &bmc, "/admin/systems/Blade9", Auth::None)
            .await
            .status,
        404
    );

    // Pull the plug behind the client's back: the Redfish side reports it.
    let pulled = post(
        &c,
        &bmc,
        "/admin/systems/Blade1/power",
        Auth::None,
        json!({ "state": "Off" }),
    )
    .await;
    assert_eq!(pulled.status, 200);
    assert_eq!(pulled.json()["power"], "Off");
    assert_eq!(bmc.power("Blade1"), Some(MockPower::Off));
    assert_eq!(
        reported_power(&c, &bmc, "Blade1").await.as_deref(),
        Some("Off")
    );
    let lower = post(
        &c,
        &bmc,
        "/admin/systems/Blade1/power",
        Auth::None,
        json!({ "state": "on" }),
    )
    .await;
    assert_eq!(lower.json()["power"], "On", "state is case-insensitive");

    let bad = post(
        &c,
        &bmc,
        "/admin/systems/Blade1/power",
        Auth::None,
        json!({ "state": "Standby" }),
    )
    .await;
    assert_eq!(bad.status, 400);
    assert!(bad.json()["error"].as_str().unwrap().contains("Standby"));
    let unknown = post(
        &c,
        &bmc,
        "/admin/systems/Nope/power",
        Auth::None,
        json!({ "state": "Off" }),
    )
    .await;
    assert_eq!(unknown.status, 404);
    assert!(
        bmc.reset_log().is_empty(),
        "admin power changes are not Resets"
    );
}

#[tokio::test]
async fn set_power_cancels_a_transition() {
    let bmc = MockRedfish::builder()
        .transition_delay(Duration::from_secs(30))
        .start()
        .await
        .unwrap();
    let c = client(&bmc);
    assert_eq!(reset(&c, &bmc, "system", "ForceOff").await.status, 204);
    assert_eq!(bmc.power("system"), Some(MockPower::PoweringOff));
    bmc.set_power("system", MockPower::On);
    assert_eq!(bmc.power("system"), Some(MockPower::On));
    assert!(bmc.try_set_power("ghost", MockPower::Off).is_err());
}

#[tokio::test]
async fn faults_over_http() {
    let bmc = MockRedfish::builder().start().await.unwrap();
    let c = client(&bmc);
    for (shape, fault) in [
        (
            json!({ "fail500": { "count": 2 } }),
            Fault::Fail500 { count: 2 },
        ),
        (json!("flap"), Fault::Flap),
        (
            json!({ "slow": "1ms" }),
            Fault::Slow(Duration::from_millis(1)),
        ),
        (
            json!({ "power_state_value": "Standby" }),
            Fault::PowerStateValue("Standby".into()),
        ),
    ] {
        let r = post(&c, &bmc, "/admin/faults", Auth::None, shape.clone()).await;
        assert_eq!(r.status, 200, "{shape}: {}", r.text);
        let active: Vec<Fault> = serde_json::from_str(&r.text).unwrap();
        assert!(active.contains(&fault), "{shape} -> {active:?}");
    }
    let listed: Vec<Fault> =
        serde_json::from_str(&get(&c, &bmc, "/admin/faults", Auth::None).await.text).unwrap();
    assert_eq!(listed, bmc.faults());
    assert_eq!(listed.len(), 4);

    // The faults act on the Redfish side.
    assert_eq!(get(&c, &bmc, "/redfish/v1", Auth::None).await.status, 500);

    let bad = post(
        &c,
        &bmc,
        "/admin/faults",
        Auth::None,
        json!({ "explode": true }),
    )
    .await;
    assert_eq!(bad.status, 400);
    assert!(bad.json()["error"].is_string());

    let cleared = send(
        &c,
        Method::DELETE,
        &url(&bmc, "/admin/faults"),
        Auth::None,
        None,
    )
    .await;
    assert_eq!(cleared.status, 204);
    assert!(bmc.faults().is_empty());
    assert_eq!(get(&c, &bmc, "/redfish/v1", Auth::None).await.status, 200);
}

#[tokio::test]
async fn logs_and_sessions() {
    let bmc = MockRedfish::builder().start().await.unwrap();
    let c = client(&bmc);
    assert_eq!(reset(&c, &bmc, "system", "ForceOff").await.status, 204);
    let resets: Vec<ResetRecord> =
        serde_json::from_str(&get(&c, &bmc, "/admin/resets", Auth::None).await.text).unwrap();
    assert_eq!(
        resets,
        vec![ResetRecord {
            system: "system".into(),
            reset_type: "ForceOff".into()
        }]
    );
    let requests: Vec<RequestRecord> =
        serde_json::from_str(&get(&c, &bmc, "/admin/requests", Auth::None).await.text).unwrap();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].method, "POST");
    assert_eq!(requests[0].status, Some(204));
    let raw = get(&c, &bmc, "/admin/requests", Auth::None).await.json();
    assert_eq!(raw[0]["auth"], "Basic", "documented JSON spelling");

    let cleared = send(
        &c,
        Method::DELETE,
        &url(&bmc, "/admin/logs"),
        Auth::None,
        None,
    )
    .await;
    assert_eq!(cleared.status, 204);
    assert!(bmc.reset_log().is_empty() && bmc.request_log().is_empty());

    let creds = json!({ "UserName": bmc.username(), "Password": bmc.password() });
    let login = post(
        &c,
        &bmc,
        "/redfish/v1/SessionService/Sessions",
        Auth::None,
        creds,
    )
    .await;
    let token = login.header("x-auth-token").unwrap();
    assert_eq!(
        get(&c, &bmc, "/admin/sessions", Auth::None).await.json(),
        json!({ "active": 1 })
    );
    let expired = post(&c, &bmc, "/admin/sessions/expire", Auth::None, json!({})).await;
    assert_eq!(expired.json(), json!({ "expired": 1 }));
    assert_eq!(
        get(&c, &bmc, "/redfish/v1/Systems", Auth::Token(&token))
            .await
            .status,
        401
    );
    assert_eq!(
        get(&c, &bmc, "/redfish/v1/Systems", basic(&bmc))
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn unknown_paths_outside_redfish() {
    let bmc = MockRedfish::builder().start().await.unwrap();
    let c = client(&bmc);
    let r = get(&c, &bmc, "/", Auth::None).await;
    assert_eq!(r.status, 404);
    assert!(r.json()["error"].is_string());
    assert_eq!(
        get(&c, &bmc, "/admin/nothing", Auth::None).await.status,
        404
    );
    assert!(bmc.request_log().is_empty());
}
