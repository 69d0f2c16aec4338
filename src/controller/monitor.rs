//! The BMC monitor: every `monitor_interval`, read each inventory node's power state,
//! so a BMC that is unreachable or refuses the credentials is found before a node
//! needs fencing.
//!
//! A failure sets `nodefence_bmc_monitor_failures{node,driver}` to 1 and raises one
//! Warning Event (`BmcCheckFailed`) on the Node; the recovery sets it back to 0 and
//! raises a Normal Event (`BmcCheckRecovered`). Only transitions produce Events. The
//! check is read-only; requests share the drivers' concurrency bound with fencing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};

use crate::power::registry::NodeDrivers;
use crate::power::{PowerDriver, PowerError};
use crate::telemetry::Metrics;

/// One pass over every node. `failing` carries the previous outcomes (node → error
/// text) between passes; returns how many nodes failed this time.
pub async fn check_all(
    drivers: &NodeDrivers,
    failing: &mut BTreeMap<String, String>,
    metrics: &Metrics,
    recorder: Option<&Recorder>,
    concurrency: usize,
) -> usize {
    let permits = Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
    let mut checks = tokio::task::JoinSet::new();
    for (node, driver) in drivers.iter() {
        let entry: Entry = (node.clone(), driver.clone());
        let permits = permits.clone();
        checks.spawn(async move {
            let _permit = permits.acquire_owned().await;
            check_one(entry).await
        });
    }
    let mut results: Vec<Outcome> = Vec::with_capacity(drivers.len());
    while let Some(done) = checks.join_next().await {
        if let Ok(outcome) = done {
            results.push(outcome);
        }
    }
    let mut failed = 0;
    for (node, driver, result) in results {
        metrics.set_bmc_failing(&node, driver, result.is_err());
        let before = failing.get(&node).cloned();
        match (result, before) {
            (Err(e), None) => {
                failed += 1;
                tracing::warn!(node, driver, error = %e, "BMC check failed: this node could not be fenced now");
                publish(recorder, &node, EventType::Warning, "BmcCheckFailed", format!(
                    "the {driver} power source of this node failed its periodic check: {e}; it could not be fenced now"
                ))
                .await;
                failing.insert(node, e);
            }
            (Err(e), Some(_)) => {
                failed += 1;
                failing.insert(node, e);
            }
            (Ok(()), Some(_)) => {
                tracing::info!(node, driver, "BMC check passes again");
                publish(
                    recorder,
                    &node,
                    EventType::Normal,
                    "BmcCheckRecovered",
                    format!("the {driver} power source of this node answers again"),
                )
                .await;
                failing.remove(&node);
            }
            (Ok(()), None) => {}
        }
    }
    failed
}

type Outcome = (String, &'static str, Result<(), String>);

type Entry = (String, Result<Arc<dyn PowerDriver + 'static>, PowerError>);

async fn check_one((node, driver): Entry) -> Outcome {
    match driver {
        Ok(d) => {
            let result = d.status().await.map(|_| ()).map_err(|e| e.to_string());
            (node, d.driver_name(), result)
        }
        Err(e) => (node, "none", Err(e.to_string())),
    }
}

async fn publish(
    recorder: Option<&Recorder>,
    node: &str,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let Some(recorder) = recorder else { return };
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(node.to_string()),
        ..Default::default()
    };
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: "MonitorBmc".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &reference).await {
        tracing::debug!(error = %e, "could not publish a Kubernetes Event");
    }
}

/// Runs passes every `interval` until the task is dropped (aborted with its term).
pub async fn run(
    drivers: Arc<NodeDrivers>,
    interval: Duration,
    metrics: Arc<Metrics>,
    recorder: Option<Recorder>,
    concurrency: usize,
) {
    let mut failing = BTreeMap::new();
    loop {
        check_all(
            &drivers,
            &mut failing,
            &metrics,
            recorder.as_ref(),
            concurrency,
        )
        .await;
        tokio::time::sleep(interval).await;
    }
}
