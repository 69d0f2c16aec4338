//! Each vendor profile, discovered and driven like a client would: service root →
//! Systems → ComputerSystem → allowable ResetTypes → Reset → state read back, over
//! plain HTTP and over HTTPS trusting only the generated CA.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::{Auth, basic, client, eventually, get, post, reported_power, reset, url};
use nodefence_mocks::redfish::{MockPower, MockRedfish, MockRedfishHandle, Profile, SystemSpec};
use serde_json::{Value, json};

/// The allowable ResetType values, wherever the profile publishes them.
async fn allowable(
    c: &reqwest::Client,
    bmc: &MockRedfishHandle,
    system: &Value,
) -> Option<Vec<String>> {
    let action = &system["Actions"]["#ComputerSystem.Reset"];
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .expect("allowable values are an array")
            .iter()
            .map(|s| s.as_str().expect("string").to_owned())
            .collect()
    };
    if let Some(inline) = action.get("ResetType@Redfish.AllowableValues") {
        return Some(strings(inline));
    }
    let info_uri = action.get("@Redfish.ActionInfo")?.as_str()?;
    let info = get(c, bmc, info_uri, basic(bmc)).await;
    assert_eq!(info.status, 200, "{}", info.text);
    let info = info.json();
    assert!(
        info["@odata.type"]
            .as_str()
            .unwrap()
            .starts_with("#ActionInfo.")
    );
    let param = info["Parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["Name"] == "ResetType")
        .expect("ResetType parameter");
    Some(strings(&param["AllowableValues"]))
}

/// Follows a Reset answer to completion; iLO-style 202 is polled through its monitor.
async fn finish_reset(
    c: &reqwest::Client,
    bmc: &MockRedfishHandle,
    profile: Profile,
    answer: common::Resp,
) {
    match profile {
        Profile::OpenBmc | Profile::MultiSystem | Profile::Minimal => {
            assert_eq!(answer.status, 204, "{}", answer.text);
            assert!(answer.text.is_empty());
        }
        Profile::Idrac => {
            assert_eq!(answer.status, 200, "{}", answer.text);
            let id = &answer.json()["@Message.ExtendedInfo"][0]["MessageId"];
            assert!(id.as_str().unwrap().ends_with(".Success"), "{id}");
        }
        Profile::Ilo => {
            assert_eq!(answer.status, 202, "{}", answer.text);
            let monitor = answer
                .header("location")
                .expect("202 carries a task monitor");
            assert!(
                monitor.starts_with(&bmc.base_url()),
                "iLO sends absolute URLs: {monitor}"
            );
            let mut last = None;
            eventually("task completes", Duration::from_secs(5), async || {
                let r = get(c, bmc, &monitor, basic(bmc)).await;
                let done = r.status == 200;
                last = Some(r);
                done
            })
            .await;
            let task = last.unwrap().json();
            assert_eq!(task["TaskState"], "Completed");
            assert_eq!(task["PercentComplete"], 100);
        }
    }
}

async fn discover_and_cycle(profile: Profile, tls: bool) {
    let bmc = MockRedfish::builder()
        .profile(profile)
        .credentials("operator", "s3cret")
        .tls(tls)
        .start()
        .await
        .expect("mock starts");
    let scheme = if tls {
        "https://localhost:"
    } else {
        "http://127.0.0.1:"
    };
    assert!(bmc.base_url().starts_with(scheme), "{}", bmc.base_url());
    assert_eq!(bmc.ca_pem().is_some(), tls);
    let c = client(&bmc);
    let auth = Auth::Basic("operator", "s3cret");

    let root = get(&c, &bmc, "/redfish/v1", Auth::None).await;
    assert_eq!(root.status, 200);
    assert_eq!(root.header("odata-version").as_deref(), Some("4.0"));
    assert_eq!(
        root.header("content-type").as_deref(),
        Some("application/json; charset=utf-8")
    );
    let root = root.json();
    assert!(
        root["@odata.type"]
            .as_str()
            .unwrap()
            .starts_with("#ServiceRoot.v1_")
    );
    assert!(root["UUID"].is_string() && root["RedfishVersion"].is_string());
    assert_eq!(
        root["Links"]["Sessions"].is_object(),
        profile != Profile::Minimal
    );

    let systems_uri = root["Systems"]["@odata.id"].as_str().unwrap();
    let systems = get(&c, &bmc, systems_uri, auth).await.json();
    let members = systems["Members"].as_array().unwrap().clone();
    assert_eq!(systems["Members@odata.count"], members.len());
    assert_eq!(members.len(), bmc.systems().len());

    let system_uri = members[0]["@odata.id"].as_str().unwrap().to_owned();
    assert_eq!(system_uri.ends_with('/'), profile == Profile::Ilo);
    let system = get(&c, &bmc, &system_uri, auth).await.json();
    let id = system["Id"].as_str().unwrap().to_owned();
    let expected_id = match profile {
        Profile::OpenBmc => "system",
        Profile::Idrac => "System.Embedded.1",
        Profile::Ilo | Profile::Minimal => "1",
        Profile::MultiSystem => "Blade1",
    };
    assert_eq!(id, expected_id);
    assert_eq!(system["PowerState"], "On");
    assert!(system["UUID"].is_string());

    let allowed = allowable(&c, &bmc, &system).await;
    match profile {
        Profile::Minimal => assert_eq!(allowed, None, "minimal publishes no allowable values"),
        _ => assert!(allowed.unwrap().contains(&"ForceOff".to_owned())),
    }
    let target = system["Actions"]["#ComputerSystem.Reset"]["target"]
        .as_str()
        .unwrap()
        .to_owned();

    let off = post(&c, &bmc, &target, auth, json!({ "ResetType": "ForceOff" })).await;
    finish_reset(&c, &bmc, profile, off).await;
    let now = get(&c, &bmc, &system_uri, auth).await.json();
    assert_eq!(now["PowerState"], "Off");
    assert_eq!(bmc.power(&id), Some(MockPower::Off));

    let on = post(&c, &bmc, &target, auth, json!({ "ResetType": "On" })).await;
    finish_reset(&c, &bmc, profile, on).await;
    assert_eq!(
        get(&c, &bmc, &system_uri, auth).await.json()["PowerState"],
        "On"
    );
    assert_eq!(bmc.power(&id), Some(MockPower::On));
    assert_eq!(
        bmc.reset_log(),
        vec![(id.clone(), "ForceOff".to_owned()), (id, "On".to_owned())]
    );
    bmc.shutdown().await;
}

#[tokio::test]
async fn openbmc_http() {
    discover_and_cycle(Profile::OpenBmc, false).await;
}
#[tokio::test]
async fn openbmc_https() {
    discover_and_cycle(Profile::OpenBmc, true).await;
}
#[tokio::test]
async fn idrac_http() {
    discover_and_cycle(Profile::Idrac, false).await;
}
#[tokio::test]
async fn idrac_https() {
    discover_and_cycle(Profile::Idrac, true).await;
}
#[tokio::test]
async fn ilo_http() {
    discover_and_cycle(Profile::Ilo, false).await;
}
#[tokio::test]
async fn ilo_https() {
    discover_and_cycle(Profile::Ilo, true).await;
}
#[tokio::test]
async fn multi_system_http() {
    discover_and_cycle(Profile::MultiSystem, false).await;
}
#[tokio::test]
async fn multi_system_https() {
    discover_and_cycle(Profile::MultiSystem, true).await;
}
#[tokio::test]
async fn minimal_http() {
    discover_and_cycle(Profile::Minimal, false).await;
}
#[tokio::test]
async fn minimal_https() {
    discover_and_cycle(Profile::Minimal, true).await;
}

#[tokio::test]
async fn profile_reset_type_lists() {
    let cases = [
        (
            Profile::OpenBmc,
            vec![
                "On",
                "ForceOff",
                "ForceOn",
                "ForceRestart",
                "GracefulRestart",
                "GracefulShutdown",
                "PowerCycle",
            ],
        ),
        (
            Profile::Idrac,
            vec![
                "On",
                "ForceOff",
                "ForceRestart",
                "GracefulShutdown",
                "PushPowerButton",
                "Nmi",
                "PowerCycle",
            ],
        ),
    ];
    for (profile, want) in cases {
        let bmc = MockRedfish::builder()
            .profile(profile)
            .start()
            .await
            .unwrap();
        let c = client(&bmc);
        let id = bmc.systems()[0].id.clone();
        let system = get(&c, &bmc, &bmc.system_path(&id), basic(&bmc))
            .await
            .json();
        assert_eq!(
            allowable(&c, &bmc, &system).await.unwrap(),
            want,
            "{profile}"
        );
    }
}

#[tokio::test]
async fn versions_document_and_trailing_slashes() {
    let bmc = MockRedfish::builder().start().await.unwrap();
    let c = client(&bmc);
    for path in ["/redfish", "/redfish/"] {
        let r = get(&c, &bmc, path, Auth::None).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.json(), json!({ "v1": "/redfish/v1/" }));
    }
    let a = get(&c, &bmc, "/redfish/v1", Auth::None).await.json();
    let b = get(&c, &bmc, "/redfish/v1/", Auth::None).await.json();
    assert_eq!(a, b);
    let s1 = get(&c, &bmc, "/redfish/v1/Systems/system/", basic(&bmc)).await;
    assert_eq!(s1.status, 200);
    assert_eq!(s1.json()["Id"], "system");
}

#[tokio::test]
async fn multi_system_resets_only_the_chosen_blade() {
    let bmc = MockRedfish::builder()
        .profile(Profile::MultiSystem)
        .system(SystemSpec::new("Blade1"))
        .system(SystemSpec::new("Blade2").uuid("4c4c4544-0000-0000-0000-000000000002"))
        .system(SystemSpec::new("Blade3").power(MockPower::Off))
        .start()
        .await
        .unwrap();
    let c = client(&bmc);
    let systems = get(&c, &bmc, "/redfish/v1/Systems", basic(&bmc))
        .await
        .json();
    assert_eq!(systems["Members@odata.count"], 3);
    let blade2 = get(&c, &bmc, "/redfish/v1/Systems/Blade2", basic(&bmc))
        .await
        .json();
    assert_eq!(blade2["UUID"], "4c4c4544-0000-0000-0000-000000000002");
    assert_eq!(reset(&c, &bmc, "Blade2", "ForceOff").await.status, 204);
    assert_eq!(bmc.power("Blade1"), Some(MockPower::On));
    assert_eq!(bmc.power("Blade2"), Some(MockPower::Off));
    assert_eq!(bmc.power("Blade3"), Some(MockPower::Off));
    assert_eq!(
        reported_power(&c, &bmc, "Blade1").await.as_deref(),
        Some("On")
    );
    assert_eq!(
        reported_power(&c, &bmc, "Blade2").await.as_deref(),
        Some("Off")
    );
}

#[tokio::test]
async fn unknown_resources_and_methods() {
    let bmc = MockRedfish::builder().start().await.unwrap();
    let c = client(&bmc);
    let missing = get(&c, &bmc, "/redfish/v1/Systems/nope", basic(&bmc)).await;
    assert_eq!(missing.status, 404);
    assert!(missing.json()["error"]["@Message.ExtendedInfo"].is_array());
    assert_eq!(reset(&c, &bmc, "nope", "ForceOff").await.status, 404);
    assert!(bmc.reset_log().is_empty());
    let anonymous = get(&c, &bmc, "/redfish/v1/Nowhere", Auth::None).await;
    assert_eq!(anonymous.status, 401, "auth is checked before routing");
    let patch = common::send(
        &c,
        reqwest::Method::PATCH,
        &url(&bmc, "/redfish/v1/Systems/system"),
        basic(&bmc),
        Some(json!({})),
    )
    .await;
    assert_eq!(patch.status, 405);
    assert_eq!(patch.header("allow").as_deref(), Some("GET"));
    let get_action = get(
        &c,
        &bmc,
        "/redfish/v1/Systems/system/Actions/ComputerSystem.Reset",
        basic(&bmc),
    )
    .await;
    assert_eq!(get_action.status, 405);
}

#[tokio::test]
async fn minimal_has_no_session_service() {
    let bmc = MockRedfish::builder()
        .profile(Profile::Minimal)
        .start()
        .await
        .unwrap();
    let c = client(&bmc);
    let root = get(&c, &bmc, "/redfish/v1", Auth::None).await.json();
    assert!(root.get("SessionService").is_none());
    assert!(root["Links"].get("Sessions").is_none());
    let login = post(
        &c,
        &bmc,
        "/redfish/v1/SessionService/Sessions",
        Auth::None,
        json!({ "UserName": "admin", "Password": "password" }),
    )
    .await;
    assert_eq!(login.status, 404);
    assert_eq!(
        get(&c, &bmc, "/redfish/v1/SessionService", basic(&bmc))
            .await
            .status,
        404
    );
    assert_eq!(bmc.active_sessions(), 0);
    // Basic still works, and unpublished reset types are still enforced.
    assert_eq!(reported_power(&c, &bmc, "1").await.as_deref(), Some("On"));
    assert_eq!(reset(&c, &bmc, "1", "Bogus").await.status, 400);
}

#[tokio::test]
async fn https_requires_the_generated_ca() {
    let bmc = MockRedfish::builder().tls(true).start().await.unwrap();
    // A client trusting another CA must refuse the connection.
    let other = nodefence_mocks::tls::TlsMaterial::generate().unwrap();
    common::provider();
    let stranger = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(other.ca_pem().as_bytes()).unwrap()])
        .build()
        .unwrap();
    let err = stranger
        .get(format!("{}/redfish/v1", bmc.base_url()))
        .send()
        .await
        .expect_err("an untrusted certificate must be refused");
    assert!(err.is_connect(), "{err:?}");
    assert!(bmc.request_log().is_empty(), "no request got through");

    // The generated CA verifies the leaf by name and by IP address.
    let c = client(&bmc);
    let by_ip = format!("https://127.0.0.1:{}/redfish/v1", bmc.addr().port());
    let r = common::send(&c, reqwest::Method::GET, &by_ip, Auth::None, None).await;
    assert_eq!(r.status, 200);
    assert_eq!(get(&c, &bmc, "/redfish/v1", Auth::None).await.status, 200);
}

#[tokio::test]
async fn shutdown_closes_the_port() {
    let bmc = MockRedfish::builder().start().await.unwrap();
    let addr = bmc.addr();
    bmc.shutdown().await;
    let refused = tokio::net::TcpStream::connect(addr).await;
    assert!(refused.is_err(), "nothing listens after shutdown");
}
