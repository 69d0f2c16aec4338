//! nodefence's Events against fake-kube over HTTP: a notice repeated in one series
//! (a block and its reminders) updates one Event, its count, last time and note (the
//! latest message); a different message with the same reason is an Event of its own,
//! never folded into the first and lost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::core::v1::ObjectReference;
use nodefence::cluster::events::{Event, EventType, Recorder};
use nodefence_mocks::kube::FakeKube;
use nodefence_mocks::kube::resources::EVENTS_V1;
use serde_json::Value;

fn warning(note: &str) -> Event {
    Event {
        type_: EventType::Warning,
        reason: "FenceBlocked".into(),
        note: Some(note.into()),
        action: "Fencing".into(),
        secondary: None,
    }
}

fn events(kube: &nodefence_mocks::kube::FakeKubeHandle) -> Vec<Value> {
    let mut list = kube.store().list(EVENTS_V1, None).0;
    list.sort_by_key(|e| e["eventTime"].as_str().unwrap_or_default().to_string());
    list
}

#[tokio::test]
async fn a_series_updates_one_event_and_other_messages_keep_their_own() {
    let kube = FakeKube::builder().start().await.unwrap();
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&kube.kubeconfig_yaml()).unwrap();
    let client = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap(),
    )
    .unwrap();
    let recorder = Recorder::new(client, "nodefence", "nodefence-test");
    let node = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some("worker-1".into()),
        uid: Some("uid-worker-1".into()),
        ..Default::default()
    };

    let storm = "storm protection: too many nodes unhealthy at once";
    recorder
        .publish_in(&warning(storm), Some("storm"), &node)
        .await
        .unwrap();
    recorder
        .publish_in(
            &warning("fencing is paused cluster-wide"),
            Some("paused"),
            &node,
        )
        .await
        .unwrap();
    let later = format!("{storm} (still so after 2m)");
    recorder
        .publish_in(&warning(&later), Some("storm"), &node)
        .await
        .unwrap();

    let list = events(&kube);
    assert_eq!(list.len(), 2, "{list:#?}");
    let storm_event = list
        .iter()
        .find(|e| e["note"].as_str().unwrap_or_default().starts_with("storm"))
        .expect("the storm series");
    assert_eq!(storm_event["note"], later.as_str(), "the latest message");
    assert_eq!(storm_event["series"]["count"], 2);
    assert!(storm_event["series"]["lastObservedTime"].is_string());
    assert_eq!(storm_event["type"], "Warning");
    assert_eq!(storm_event["reportingController"], "nodefence");
    assert_eq!(storm_event["reportingInstance"], "nodefence-test");
    assert_eq!(storm_event["regarding"]["name"], "worker-1");
    let paused = list
        .iter()
        .find(|e| e["note"] == "fencing is paused cluster-wide")
        .expect("the pause is not folded into the storm");
    assert!(paused["series"].is_null(), "{paused}");

    // Without a series name: the same message repeated is one Event, another message
    // with the same reason is another.
    for _ in 0..3 {
        recorder
            .publish(&warning("the power state is PoweringOff"), &node)
            .await
            .unwrap();
    }
    recorder
        .publish(&warning("the power state is PoweringOn"), &node)
        .await
        .unwrap();
    let list = events(&kube);
    assert_eq!(list.len(), 4, "{list:#?}");
    let repeated = list
        .iter()
        .find(|e| e["note"] == "the power state is PoweringOff")
        .unwrap();
    assert_eq!(repeated["series"]["count"], 3);

    // An Event deleted meanwhile (expired, or removed by hand): the series starts over.
    let name = storm_event["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let ns = storm_event["metadata"]["namespace"]
        .as_str()
        .unwrap()
        .to_string();
    kube.store()
        .delete(EVENTS_V1, Some(&ns), &name, None)
        .unwrap();
    recorder
        .publish_in(&warning(&later), Some("storm"), &node)
        .await
        .unwrap();
    let list = events(&kube);
    assert_eq!(list.len(), 4, "{list:#?}");
    assert!(
        list.iter()
            .any(|e| e["note"] == later.as_str() && e["series"].is_null()),
        "{list:#?}"
    );
}
