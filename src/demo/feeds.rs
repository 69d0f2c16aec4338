//! Where the steps come from: three background tasks feeding the [`Story`].
//!
//! - the simulated control plane's timeline ([`SimHandle::subscribe`]);
//! - the `events.k8s.io/v1` Events nodefence writes, read from fake-kube's store as they
//!   are written (a repeated Event is a new `series.count` on the same object);
//! - the BMC: Resets received and power states reached, polled every
//!   [`BMC_POLL`]. Power changes the demo makes itself are announced by the demo
//!   ("you") and not again by this feed: see [`PowerLedger`].
//!
//! [`SimHandle::subscribe`]: nodefence_mocks::kube::sim::SimHandle::subscribe

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use nodefence_mocks::kube::resources::EVENTS_V1;
use nodefence_mocks::kube::sim::SimEvent;
use nodefence_mocks::kube::store::{EventType, Store};
use nodefence_mocks::machines::Machine;
use nodefence_mocks::redfish::{MockPower, MockRedfishHandle, UnknownSystem};
use serde_json::Value;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::task::JoinHandle;

use super::narrate::{self, Wording};
use super::timeline::{Actor, Fact, Step, Story};

/// How often the BMC is looked at.
pub const BMC_POLL: Duration = Duration::from_millis(5);

/// Relays the simulation's timeline.
pub fn simulation(
    mut events: broadcast::Receiver<SimEvent>,
    story: Story,
    wording: Wording,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            match events.recv().await {
                Ok(ev) => {
                    if let Some(step) = narrate::sim_step(&ev, &wording) {
                        story.record(step);
                    }
                }
                Err(RecvError::Lagged(n)) => {
                    tracing::warn!("demo: {n} simulation events were not narrated");
                }
                Err(RecvError::Closed) => break,
            }
        }
    })
}

/// Relays the Events nodefence writes (its decisions, with its reasons).
pub fn nodefence_events(store: &Store, story: Story, wording: Wording) -> JoinHandle<()> {
    let (existing, _, mut writes) = store.list_and_subscribe(EVENTS_V1, None);
    tokio::spawn(async move {
        // Event name → the series count already told.
        let mut told: BTreeMap<String, i64> = existing
            .iter()
            .filter_map(|e| Some((name(e)?.to_string(), series_count(e))))
            .collect();
        loop {
            let write = match writes.recv().await {
                Ok(w) => w,
                Err(RecvError::Lagged(n)) => {
                    tracing::warn!("demo: {n} store writes were skipped");
                    continue;
                }
                Err(RecvError::Closed) => break,
            };
            if write.resource != EVENTS_V1 || write.event == EventType::Deleted {
                continue;
            }
            let event = &write.object;
            if event.get("reportingController").and_then(Value::as_str) != Some("nodefence") {
                continue;
            }
            let Some(name) = name(event) else { continue };
            let count = series_count(event);
            if told.get(name).is_some_and(|c| *c >= count) {
                continue;
            }
            told.insert(name.to_string(), count);
            let at = event_time(event).unwrap_or_else(SystemTime::now);
            if let Some(step) = narrate::nodefence_step(event, at, &wording) {
                story.record(step);
            }
        }
    })
}

fn name(event: &Value) -> Option<&str> {
    event.pointer("/metadata/name").and_then(Value::as_str)
}

fn series_count(event: &Value) -> i64 {
    event
        .pointer("/series/count")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

/// When it happened: the last observation of a series, else the event time.
fn event_time(event: &Value) -> Option<SystemTime> {
    let raw = event
        .pointer("/series/lastObservedTime")
        .or_else(|| event.get("eventTime"))
        .and_then(Value::as_str)?;
    humantime::parse_rfc3339_weak(raw).ok()
}

/// The power states the BMC feed has already accounted for, per system, shared with
/// the demo's own power switch so that a change it announces is not told twice.
#[derive(Clone, Default)]
pub struct PowerLedger(Arc<Mutex<BTreeMap<String, MockPower>>>);

impl PowerLedger {
    /// Sets a system's power as the person running the demo, without a BMC line.
    pub fn set(
        &self,
        bmc: &MockRedfishHandle,
        system: &str,
        power: MockPower,
    ) -> Result<(), UnknownSystem> {
        let mut known = self.0.lock().unwrap_or_else(|p| p.into_inner());
        bmc.try_set_power(system, power)?;
        known.insert(system.to_string(), power);
        Ok(())
    }
}

/// Watches the BMC: Resets received and the power states reached.
pub fn bmc(
    bmc: Arc<MockRedfishHandle>,
    machines: Vec<Machine>,
    ledger: PowerLedger,
    story: Story,
) -> JoinHandle<()> {
    let node_of = move |system: &str| {
        machines
            .iter()
            .find(|m| m.system_id == system)
            .map_or_else(|| system.to_string(), |m| m.node.clone())
    };
    tokio::spawn(async move {
        let mut resets_told = bmc.resets().len();
        {
            let mut known = ledger.0.lock().unwrap_or_else(|p| p.into_inner());
            for s in bmc.systems() {
                known.insert(s.id, s.power);
            }
        }
        loop {
            let now = crate::clock::now();
            let resets = bmc.resets();
            for r in resets.iter().skip(resets_told) {
                let fact = Fact::Reset {
                    reset_type: r.reset_type.clone(),
                };
                let text = narrate::reset_text(&r.reset_type);
                story.record(Step::new(now, &node_of(&r.system), Actor::Bmc, fact, text));
            }
            resets_told = resets.len();
            {
                let mut known = ledger.0.lock().unwrap_or_else(|p| p.into_inner());
                for s in bmc.systems() {
                    if known.get(&s.id) == Some(&s.power) {
                        continue;
                    }
                    known.insert(s.id.clone(), s.power);
                    if let Some(text) = narrate::power_text(s.power) {
                        let node = node_of(&s.id);
                        let fact = Fact::Power(s.power);
                        story.record(Step::new(now, &node, Actor::Bmc, fact, text));
                    }
                }
            }
            tokio::time::sleep(BMC_POLL).await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn event_times() {
        let t = event_time(&json!({"eventTime": "2026-01-02T03:04:05.123456Z"})).unwrap();
        assert_eq!(
            humantime::format_rfc3339_millis(t).to_string(),
            "2026-01-02T03:04:05.123Z"
        );
        let s = event_time(&json!({"eventTime": "2026-01-02T03:04:05.123456Z",
            "series": {"count": 2, "lastObservedTime": "2026-01-02T03:05:00.000000Z"}}))
        .unwrap();
        assert!(s > t);
    }
}
