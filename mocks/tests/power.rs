//! How Resets change power over time and how they are validated: intermediate
//! states during a transition delay, restarts passing through Off, iLO task monitors
//! that complete only once the state has settled, and refused ResetTypes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::{Auth, basic, client, eventually, get, post, reported_power, reset, url};
use nodefence_mocks::redfish::{MockPower, MockRedfish, Profile, SystemSpec};
use serde_json::json;

#[tokio::test]
async fn reset_validation_errors() {
    let bmc = MockRedfish::builder()
        .system(SystemSpec::new("gentle").reset_types(["On", "GracefulShutdown"]))
        .start()
        .await
        .unwrap();
    let c = client(&bmc);
    let system = get(&c, &bmc, "/redfish/v1/Systems/gentle", basic(&bmc))
        .await
        .json();
    assert_eq!(
        system["Actions"]["#ComputerSystem.Reset"]["ResetType@Redfish.AllowableValues"],
        json!(["On", "GracefulShutdown"]),
        "the override is what is advertised"
    );

    let refused = reset(&c, &bmc, "gentle", "ForceOff").await;
    assert_eq!(refused.status, 400);
    assert!(
        refused
            .message_id()
            .ends_with(".ActionParameterValueNotInList")
    );
    assert!(
        refused.json()["error"]["code"]
            .as_str()
            .unwrap()
            .ends_with(".GeneralError")
    );
    assert_eq!(
        bmc.power("gentle"),
        Some(MockPower::On),
        "a refused Reset changes nothing"
    );

    let target = "/redfish/v1/Systems/gentle/Actions/ComputerSystem.Reset";
    let missing = post(&c, &bmc, target, basic(&bmc), json!({})).await;
    assert_eq!(missing.status, 400);
    assert!(missing.message_id().ends_with(".ActionParameterMissing"));
    let typed = post(&c, &bmc, target, basic(&bmc), json!({ "ResetType": 3 })).await;
    assert_eq!(typed.status, 400);
    assert!(
        typed
            .message_id()
            .ends_with(".ActionParameterValueTypeError")
    );
    let garbage = common::send(
        &c,
        reqwest::Method::POST,
        &url(&bmc, target),
        basic(&bmc),
        None,
    )
    .await;
    assert_eq!(garbage.status, 400);
    assert!(garbage.message_id().ends_with(".MalformedJSON"));

    // Every Reset with a ResetType is logged, refused or not.
    assert_eq!(
        bmc.reset_log(),
        vec![("gentle".to_owned(), "ForceOff".to_owned())]
    );
    assert_eq!(
        reset(&c, &bmc, "gentle", "GracefulShutdown").await.status,
        204
    );
    assert_eq!(bmc.power("gentle"), Some(MockPower::Off));
}

#[tokio::test]
async fn transitions_pass_through_intermediate_states() {
    let delay = Duration::from_millis(1000);
    let bmc = MockRedfish::builder()
        .transition_delay(delay)
        .start()
        .await
        .unwrap();
    let c = client(&bmc);
    assert_eq!(reset(&c, &bmc, "system", "ForceOff").await.status, 204);
    assert_eq!(
        reported_power(&c, &bmc, "system").await.as_deref(),
        Some("PoweringOff")
    );
    assert_eq!(bmc.power("system"), Some(MockPower::PoweringOff));
    eventually("off after the delay", Duration::from_secs(20), async || {
        reported_power(&c, &bmc, "system").await.as_deref() == Some("Off")
    })
    .await;

    assert_eq!(reset(&c, &bmc, "system", "On").await.status, 204);
    assert_eq!(
        reported_power(&c, &bmc, "system").await.as_deref(),
        Some("PoweringOn")
    );
    eventually("on after the delay", Duration::from_secs(20), async || {
        bmc.power("system") == Some(MockPower::On)
    })
    .await;

    // A restart goes through Off and back to On.
    assert_eq!(reset(&c, &bmc, "system", "ForceRestart").await.status, 204);
    let mut seen = Vec::new();
    eventually("restart completes", Duration::from_secs(20), async || {
        let p = reported_power(&c, &bmc, "system").await.unwrap();
        if seen.last() != Some(&p) {
            seen.push(p.clone());
        }
        p == "On" && seen.len() > 1
    })
    .await;
    assert!(
        seen.contains(&"Off".to_owned()),
        "restart passed through Off: {seen:?}"
    );
}

#[tokio::test]
async fn ilo_task_monitor_reports_running_then_completed() {
    let bmc = MockRedfish::builder()
        .profile(Profile::Ilo)
        .transition_delay(Duration::from_millis(1500))
        .start()
        .await
        .unwrap();
    let c = client(&bmc);
    let accepted = reset(&c, &bmc, "1", "ForceOff").await;
    assert_eq!(accepted.status, 202);
    let body = accepted.json();
    assert_eq!(body["TaskState"], "Running");
    let monitor = accepted.header("location").unwrap();
    assert_eq!(
        monitor,
        format!("{}/redfish/v1/TaskService/Tasks/1/Monitor/", bmc.base_url())
    );

    let running = get(&c, &bmc, &monitor, basic(&bmc)).await;
    assert_eq!(running.status, 202, "still running: {}", running.text);
    assert_eq!(running.json()["TaskState"], "Running");
    assert_eq!(bmc.power("1"), Some(MockPower::PoweringOff));

    eventually("task completes", Duration::from_secs(20), async || {
        get(&c, &bmc, &monitor, basic(&bmc)).await.status == 200
    })
    .await;
    assert_eq!(
        bmc.power("1"),
        Some(MockPower::Off),
        "completed only once off"
    );
    let task = get(&c, &bmc, "/redfish/v1/TaskService/Tasks/1", basic(&bmc))
        .await
        .json();
    assert_eq!(task["TaskState"], "Completed");
    assert_eq!(task["@odata.id"], "/redfish/v1/TaskService/Tasks/1/");
    assert!(task["EndTime"].is_string());
    let tasks = get(&c, &bmc, "/redfish/v1/TaskService/Tasks", basic(&bmc))
        .await
        .json();
    assert_eq!(tasks["Members@odata.count"], 1);
    let root = get(&c, &bmc, "/redfish/v1", Auth::None).await.json();
    assert_eq!(root["TaskService"]["@odata.id"], "/redfish/v1/TaskService/");
}
