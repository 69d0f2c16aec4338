//! Where the steps come from: three background tasks feeding the [`Story`].
//!
//! - the simulated control plane's timeline ([`SimHandle::subscribe`]);
//! - the `events.k8s.io/v1` Events nodefence writes, read from fake-kube's store as they
//!   are written (a repeated Event is a new `series.count` on the same object);
//! - the BMC: Resets received and power states reached, polled every
//!   [`BMC_POLL`]. Power changes the demo makes itself are announced by the demo
//!   ("you") and not again by this feed: see [`PowerLedger`]; when the workers are
//!   VMs, the mock vCenter instead: power tasks called and power states reached
//!   ([`vcenter`], every [`VCENTER_POLL`]);
//! - the remediation requests (`NodeFenceRemediation`), read from fake-kube's store
//!   as they are written: created (by NodeHealthCheck), their `Processing` and
//!   `Succeeded` conditions as nodefence changes them, their deletion asked for and
//!   done ([`requests`]).
//!
//! [`SimHandle::subscribe`]: nodefence_mocks::kube::sim::SimHandle::subscribe

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use nodefence_mocks::kube::resources::EVENTS_V1;
use nodefence_mocks::kube::sim::{SimEvent, SimEventKind};
use nodefence_mocks::kube::store::{EventType, Store, StoreEvent};
use nodefence_mocks::machines::Machine;
use nodefence_mocks::redfish::{MockPower, MockRedfishHandle, UnknownSystem};
use nodefence_mocks::vsphere::{MockVsphereHandle, VmPower};
use serde_json::Value;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::task::JoinHandle;

use super::narrate::{self, Wording};
use super::timeline::{Actor, Fact, RequestChange, Step, Story};

/// How often the BMC is looked at.
pub const BMC_POLL: Duration = Duration::from_millis(5);

/// How often the mock vCenter is looked at (it lists every call it answered).
pub const VCENTER_POLL: Duration = Duration::from_millis(20);

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
            let node = event
                .pointer("/regarding/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            // Recorded by this task before, in the order nodefence wrote them.
            let opener = story.last(at + OPENER_SLACK, |s| {
                s.node == node && narrate::INCIDENT_OPENERS.iter().any(|r| s.is_nodefence(r))
            });
            if let Some(step) = narrate::nodefence_step(event, at, &wording, opener.as_ref()) {
                story.record(step);
            }
        }
    })
}

/// An Event that opens an incident is written in the same decision as the
/// `MachineStillOn` or `PoweringOff` it explains, but may be stamped a little later.
const OPENER_SLACK: Duration = Duration::from_millis(50);

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

    /// Sets a VM's power out of band (its host lost power) as the person running the
    /// demo, without a vCenter line. `false`: no such VM.
    pub fn set_vm(&self, vcenter: &MockVsphereHandle, moid: &str, power: MockPower) -> bool {
        let mut known = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let Some(vm_power) = vm_power(power) else {
            return false;
        };
        if !vcenter.set_power(moid, vm_power) {
            return false;
        }
        known.insert(moid.to_string(), mock_power(vm_power));
        true
    }
}

/// A VM's `runtime.powerState` in the demo's terms: a suspended VM is Paused.
pub fn mock_power(power: VmPower) -> MockPower {
    match power {
        VmPower::PoweredOn => MockPower::On,
        VmPower::PoweredOff => MockPower::Off,
        VmPower::Suspended => MockPower::Paused,
    }
}

/// The VM power state a person can set (`None` for transitional states, which a VM
/// does not have).
fn vm_power(power: MockPower) -> Option<VmPower> {
    match power {
        MockPower::On => Some(VmPower::PoweredOn),
        MockPower::Off => Some(VmPower::PoweredOff),
        MockPower::Paused => Some(VmPower::Suspended),
        MockPower::PoweringOn | MockPower::PoweringOff => None,
    }
}

/// Watches the mock vCenter: power tasks called (`PowerOffVM_Task`...) and the power
/// states its VMs reached. `machines` map managed object ids to nodes.
pub fn vcenter(
    vcenter: Arc<MockVsphereHandle>,
    machines: Vec<Machine>,
    ledger: PowerLedger,
    story: Story,
) -> JoinHandle<()> {
    let node_of = move |moid: &str| {
        machines
            .iter()
            .find(|m| m.system_id == moid)
            .map_or_else(|| moid.to_string(), |m| m.node.clone())
    };
    tokio::spawn(async move {
        let mut calls_told = vcenter.power_calls().len();
        {
            let mut known = ledger.0.lock().unwrap_or_else(|p| p.into_inner());
            for vm in vcenter.vms() {
                known.insert(vm.moid, mock_power(vm.power));
            }
        }
        loop {
            let now = crate::clock::now();
            let calls = vcenter.power_calls();
            for (method, moid) in calls.iter().skip(calls_told) {
                let fact = Fact::Reset {
                    reset_type: method.clone(),
                };
                let text = narrate::reset_text(method);
                story.record(Step::new(now, &node_of(moid), Actor::Vcenter, fact, text));
            }
            calls_told = calls.len();
            {
                let mut known = ledger.0.lock().unwrap_or_else(|p| p.into_inner());
                for vm in vcenter.vms() {
                    let power = mock_power(vm.power);
                    if known.get(&vm.moid) == Some(&power) {
                        continue;
                    }
                    known.insert(vm.moid.clone(), power);
                    if let Some(text) = narrate::vm_power_text(vm.power) {
                        let node = node_of(&vm.moid);
                        story.record(Step::new(
                            now,
                            &node,
                            Actor::Vcenter,
                            Fact::Power(power),
                            text,
                        ));
                    }
                }
            }
            tokio::time::sleep(VCENTER_POLL).await;
        }
    })
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

/// Relays what happens to the remediation requests. `speed` turns the real time a
/// node has been NotReady into cluster time; the NodeHealthCheck objects written
/// (also read from the store) give the durations the words quote.
pub fn requests(store: &Store, story: Story, speed: f64) -> JoinHandle<()> {
    let writes = store.subscribe_from(store.resource_version());
    let store = store.clone();
    tokio::spawn(async move {
        let mut writes = match writes {
            Ok((_, rx)) => rx,
            Err(e) => {
                tracing::warn!("demo: the remediation requests cannot be followed: {e}");
                return;
            }
        };
        let mut feed = RequestFeed::new(speed);
        loop {
            let write = match writes.recv().await {
                Ok(w) => w,
                Err(RecvError::Lagged(n)) => {
                    tracing::warn!("demo: {n} store writes were skipped");
                    continue;
                }
                Err(RecvError::Closed) => break,
            };
            // When the write was made, not when this task got to it: nodefence may
            // already have answered a request by then, and its Events carry their time.
            let now = write.at;
            let ready = |node: &str| node_ready(&store, node);
            let not_ready_since = |node: &str| {
                story
                    .last(now, |s| {
                        s.node == node && s.is_sim(SimEventKind::NodeNotReady)
                    })
                    .map(|s| s.at)
            };
            for step in feed.steps(&write, now, ready, not_ready_since) {
                story.record(step);
            }
        }
    })
}

/// The requests' story from the store's writes: what was told of each request, and
/// the NodeHealthChecks' unhealthy conditions (for the durations the words quote).
struct RequestFeed {
    speed: f64,
    /// `namespace/name` -> what was told.
    seen: BTreeMap<String, Seen>,
    /// NodeHealthCheck name -> its unhealthy conditions `(type, status, duration)`,
    /// durations in cluster time.
    checks: BTreeMap<String, Vec<(String, String, Duration)>>,
}

impl RequestFeed {
    fn new(speed: f64) -> Self {
        Self {
            speed,
            seen: BTreeMap::new(),
            checks: BTreeMap::new(),
        }
    }

    /// The steps one write makes, at `now`. `ready` reads a node's `Ready` status,
    /// `not_ready_since` tells when it last turned NotReady.
    fn steps(
        &mut self,
        write: &StoreEvent,
        now: SystemTime,
        ready: impl Fn(&str) -> Option<String>,
        not_ready_since: impl Fn(&str) -> Option<SystemTime>,
    ) -> Vec<Step> {
        let rt = write.resource;
        if rt.group == nodefence_mocks::remediation::nhc::GROUP && rt.plural == "nodehealthchecks" {
            if let Some(name) = name(&write.object) {
                if write.event == EventType::Deleted {
                    self.checks.remove(name);
                } else {
                    let conditions = unhealthy_conditions(&write.object, self.speed);
                    self.checks.insert(name.to_string(), conditions);
                }
            }
            return Vec::new();
        }
        if rt.group != crate::remediation::types::GROUP || rt.plural != "nodefenceremediations" {
            return Vec::new();
        }
        let request = &write.object;
        let key = format!(
            "{}/{}",
            write.namespace().unwrap_or_default(),
            name(request).unwrap_or_default()
        );
        let node = request_node(request);
        let owner = nhc_owner(request);
        // Who creates and deletes it: its NodeHealthCheck, else a person.
        let requester = if owner.is_some() {
            Actor::Nhc
        } else {
            Actor::You
        };
        let step = |actor, change, text| {
            let fact = Fact::Request {
                name: key.clone(),
                change,
            };
            Step::new(now, &node, actor, fact, text)
        };
        let before = self.seen.remove(&key);
        let mut out = Vec::new();
        if write.event == EventType::Deleted {
            // Deleted while held: the finalizer, nodefence's, was the last one.
            out.push(if before.as_ref().is_some_and(|b| b.deleting) {
                step(
                    Actor::Nodefence,
                    RequestChange::Gone,
                    "nodefence's taint is gone: it removes its finalizer, and the request with it"
                        .to_string(),
                )
            } else {
                step(requester, RequestChange::Gone, format!("{key} deleted"))
            });
            return out;
        }
        let now_seen = Seen {
            conditions: conditions(request),
            deleting: request.pointer("/metadata/deletionTimestamp").is_some(),
        };
        match &before {
            None => {
                let ready = ready(&node);
                let not_ready_for = not_ready_since(&node)
                    .and_then(|at| now.duration_since(at).ok())
                    .map(|d| d.mul_f64(self.speed));
                let duration = owner.as_deref().and_then(|o| {
                    let status = ready.as_deref()?;
                    self.checks
                        .get(o)?
                        .iter()
                        .find(|(t, s, _)| t == "Ready" && s == status)
                        .map(|(_, _, d)| *d)
                });
                let text = narrate::request_created(
                    &key,
                    owner.is_some(),
                    ready.as_deref(),
                    not_ready_for,
                    duration,
                );
                out.push(step(requester, RequestChange::Created, text));
            }
            Some(b) if !b.deleting && now_seen.deleting => {
                let held = request
                    .pointer("/metadata/finalizers")
                    .and_then(Value::as_array)
                    .is_some_and(|fs| {
                        fs.iter()
                            .any(|f| f.as_str() == Some(crate::remediation::TAINT_FINALIZER))
                    });
                let text = narrate::request_deleting(owner.is_some(), held);
                out.push(step(requester, RequestChange::Deleting, text));
            }
            Some(_) => {}
        }
        let old = before.map(|b| b.conditions).unwrap_or_default();
        let changed: Vec<(String, String, String)> = now_seen
            .conditions
            .iter()
            .filter(|(t, v)| old.get(*t) != Some(v))
            .map(|(t, (s, r))| (t.clone(), s.clone(), r.clone()))
            .collect();
        if !changed.is_empty() {
            let text = narrate::request_conditions(&changed);
            out.push(step(
                Actor::Nodefence,
                RequestChange::Conditions(changed),
                text,
            ));
        }
        self.seen.insert(key, now_seen);
        out
    }
}

/// What was last told of a request.
struct Seen {
    /// The conditions told: type -> (status, reason).
    conditions: BTreeMap<String, (String, String)>,
    deleting: bool,
}

/// The `Processing` and `Succeeded` conditions of a request (in that order: by name).
fn conditions(request: &Value) -> BTreeMap<String, (String, String)> {
    let mut out = BTreeMap::new();
    for c in request
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let field = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default();
        let type_ = field("type");
        if type_ == crate::remediation::condition::PROCESSING
            || type_ == crate::remediation::condition::SUCCEEDED
        {
            out.insert(
                type_.to_string(),
                (field("status").to_string(), field("reason").to_string()),
            );
        }
    }
    out
}

/// The node a request names: nodefence's `status.nodeName`, NodeHealthCheck's
/// annotation, else the request's own name.
fn request_node(request: &Value) -> String {
    request
        .pointer("/status/nodeName")
        .or_else(|| {
            request
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(crate::remediation::NODE_NAME_ANNOTATION))
        })
        .or_else(|| request.pointer("/metadata/name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The NodeHealthCheck that owns a request, if one does.
fn nhc_owner(request: &Value) -> Option<String> {
    request
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|o| {
            o.get("kind").and_then(Value::as_str) == Some(nodefence_mocks::remediation::nhc::KIND)
        })
        .and_then(|o| o.get("name").and_then(Value::as_str))
        .map(str::to_string)
}

/// A NodeHealthCheck's `spec.unhealthyConditions`, their durations in cluster time.
fn unhealthy_conditions(check: &Value, speed: f64) -> Vec<(String, String, Duration)> {
    check
        .pointer("/spec/unhealthyConditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let field = |k: &str| c.get(k).and_then(Value::as_str);
            let duration = humantime::parse_duration(field("duration")?).ok()?;
            Some((
                field("type")?.to_string(),
                field("status")?.to_string(),
                duration.mul_f64(speed),
            ))
        })
        .collect()
}

/// The status of the node's `Ready` condition (`True`, `False`, `Unknown`).
fn node_ready(store: &Store, node: &str) -> Option<String> {
    let n = store
        .get(nodefence_mocks::kube::resources::NODES, None, node)
        .ok()?;
    n.pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        .and_then(|c| c.get("status").and_then(Value::as_str))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodefence_mocks::kube::resources::ResourceType;
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

    fn write(rt: ResourceType, event: EventType, object: Value) -> StoreEvent {
        StoreEvent {
            resource_version: 1,
            resource: rt,
            event,
            object,
            at: crate::clock::now(),
        }
    }

    fn resource(group: &'static str, plural: &'static str, kind: &'static str) -> ResourceType {
        ResourceType {
            group,
            version: "v1alpha1",
            plural,
            singular: kind,
            kind,
            namespaced: plural == "nodefenceremediations",
            short_names: &[],
            verbs: &[],
            custom: None,
        }
    }

    #[test]
    fn a_request_is_told_created_worked_on_deleted_and_gone() {
        let requests = resource(
            "remediation.nodefence.io",
            "nodefenceremediations",
            "NodeFenceRemediation",
        );
        let checks = resource(
            "remediation.medik8s.io",
            "nodehealthchecks",
            "NodeHealthCheck",
        );
        let mut feed = RequestFeed::new(10.0);
        let t0 = crate::clock::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let ready = |_: &str| Some("Unknown".to_string());
        let not_ready_since = |_: &str| Some(t0);
        let check = json!({"metadata": {"name": "workers"}, "spec": {"unhealthyConditions": [
            {"type": "Ready", "status": "Unknown", "duration": "6s"}]}});
        assert!(
            feed.steps(
                &write(checks, EventType::Added, check),
                t0,
                ready,
                not_ready_since
            )
            .is_empty()
        );
        let meta = json!({"name": "w2", "namespace": "nodefence",
            "ownerReferences": [{"kind": "NodeHealthCheck", "name": "workers"}],
            "annotations": {"remediation.medik8s.io/node-name": "w2"}});
        let mut request = json!({"metadata": meta});
        let steps = feed.steps(
            &write(requests, EventType::Added, request.clone()),
            at(7),
            ready,
            not_ready_since,
        );
        assert_eq!(steps.len(), 1);
        assert_eq!(steps[0].node, "w2");
        assert_eq!(steps[0].actor, Actor::Nhc);
        assert_eq!(steps[0].request(), Some(&RequestChange::Created));
        assert_eq!(
            steps[0].text,
            "Ready Unknown for 1m 10s since NotReady (its duration: 1m): creates NodeFenceRemediation nodefence/w2"
        );
        let status = |p: (&str, &str), s: (&str, &str)| {
            json!({"nodeName": "w2", "conditions": [
                {"type": "Processing", "status": p.0, "reason": p.1},
                {"type": "Succeeded", "status": s.0, "reason": s.1},
                {"type": "PermanentNodeDeletionExpected", "status": "False", "reason": "OutOfServiceTaintRelease"}]})
        };
        request["status"] = status(("True", "PoweringOff"), ("Unknown", "PoweringOff"));
        let steps = feed.steps(
            &write(requests, EventType::Modified, request.clone()),
            at(8),
            ready,
            not_ready_since,
        );
        assert_eq!(steps.len(), 1);
        assert!(steps[0].request_condition("Processing", "True"));
        assert_eq!(steps[0].actor, Actor::Nodefence);
        // The same conditions again (another message): nothing new to tell.
        let steps = feed.steps(
            &write(requests, EventType::Modified, request.clone()),
            at(8),
            ready,
            not_ready_since,
        );
        assert!(steps.is_empty());
        request["status"] = status(("False", "Released"), ("True", "Released"));
        request["metadata"]["finalizers"] =
            json!(["remediation.nodefence.io/out-of-service-taint"]);
        let steps = feed.steps(
            &write(requests, EventType::Modified, request.clone()),
            at(9),
            ready,
            not_ready_since,
        );
        assert!(steps[0].request_condition("Succeeded", "True"));
        request["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let steps = feed.steps(
            &write(requests, EventType::Modified, request.clone()),
            at(10),
            ready,
            not_ready_since,
        );
        assert_eq!(steps.len(), 1);
        assert_eq!(steps[0].request(), Some(&RequestChange::Deleting));
        assert!(
            steps[0].text.contains("finalizer keeps it"),
            "{}",
            steps[0].text
        );
        let steps = feed.steps(
            &write(requests, EventType::Deleted, request),
            at(11),
            ready,
            not_ready_since,
        );
        assert_eq!(steps[0].request(), Some(&RequestChange::Gone));
        assert_eq!(steps[0].actor, Actor::Nodefence);
    }
}
