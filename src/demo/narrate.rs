//! The words: what each simulation event, nodefence Event and BMC change means, in
//! one short plain line. Durations in the words are cluster time (the documented
//! defaults), whatever the demo's speed.

use std::time::{Duration, SystemTime};

use nodefence_mocks::kube::sim::{SimEvent, SimEventKind};
use nodefence_mocks::redfish::MockPower;
use serde_json::Value;

use super::timeline::{Actor, Fact, Mark, Step};

/// The settings the words quote, in cluster time.
#[derive(Debug, Clone)]
pub struct Wording {
    pub lease_stale_after: Option<Duration>,
    pub unhealthy_after: Duration,
    pub recovered_after: Duration,
    /// The node lifecycle controller's grace period before NotReady.
    pub grace_period: Duration,
    /// How long pods tolerate the `unreachable` taint.
    pub toleration: Duration,
}

/// `25s`, `1m`, `5m 30s`.
pub fn span(d: Duration) -> String {
    humantime::format_duration(Duration::from_secs(d.as_secs().max(1))).to_string()
}

/// `default/db-0` → `db-0`.
fn short_pod(pod: Option<&str>) -> String {
    pod.map_or("the pod", |p| p.rsplit('/').next().unwrap_or(p))
        .to_string()
}

/// The text inside the last `(...)` of a message.
fn last_parenthesised(message: &str) -> Option<&str> {
    let open = message.rfind('(')?;
    let close = message[open..].find(')')? + open;
    Some(&message[open + 1..close])
}

fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let cut: String = text.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

/// An error without its parenthesised details, up to its first "timed out":
/// `unreachable: GET /redfish/v1/Systems/Blade1 timed out`.
fn plain_error(error: &str) -> String {
    let mut out = String::new();
    let mut depth = 0usize;
    for c in error.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    let out = out.split_whitespace().collect::<Vec<_>>().join(" ");
    match out.find("timed out") {
        Some(i) => out[..i + "timed out".len()].to_string(),
        None => out,
    }
}

/// A simulation event as a step, or `None` for the ones the story leaves out
/// (routine volume mounts, scheduled evictions...).
pub fn sim_step(ev: &SimEvent, w: &Wording) -> Option<Step> {
    use SimEventKind as K;
    let node = ev.node.as_deref().unwrap_or("");
    let pod = short_pod(ev.pod.as_deref());
    let msg = ev.message.as_str();
    let short_taint = || {
        msg.split_whitespace()
            .last()
            .unwrap_or("")
            .trim_start_matches("node.kubernetes.io/")
            .to_string()
    };
    let (actor, text, warning, repeats) = match ev.kind {
        K::KubeletStopped => (
            Actor::Kubelet,
            "silent: no more Lease renewals or status updates".to_string(),
            false,
            false,
        ),
        K::KubeletStarted => (
            Actor::Kubelet,
            "running again: renews its Lease, posts its status".to_string(),
            false,
            false,
        ),
        K::NodeNotReady => (
            Actor::ControlPlane,
            format!(
                "node NotReady: no status from its kubelet for {}",
                span(w.grace_period)
            ),
            false,
            false,
        ),
        K::NodeReady => (Actor::Kubelet, "node Ready again".to_string(), false, false),
        K::NodeTainted if msg.ends_with(":NoExecute") => (
            Actor::ControlPlane,
            format!(
                "taint {} (pods tolerate it for {}, then get evicted)",
                short_taint(),
                span(w.toleration)
            ),
            false,
            false,
        ),
        K::NodeUntainted if msg.ends_with(":NoExecute") => (
            Actor::ControlPlane,
            format!("taint {} removed", short_taint()),
            false,
            false,
        ),
        K::PodEvicted if !msg.contains("already Terminating") => (
            Actor::ControlPlane,
            format!("{pod} evicted: Terminating, until its kubelet confirms"),
            false,
            true,
        ),
        K::PodForceDeleted => (
            Actor::ControlPlane,
            if msg.contains("out-of-service") {
                format!("{pod} force-deleted (PodGC: the node is out of service)")
            } else {
                format!("{pod} force-deleted (PodGC: {msg})")
            },
            false,
            false,
        ),
        K::PodTerminated => (Actor::Kubelet, format!("{pod} terminated"), false, false),
        K::PodDeleted => (
            Actor::ControlPlane,
            format!("{pod} deleted by its StatefulSet"),
            false,
            false,
        ),
        K::PodCreated => (
            Actor::ControlPlane,
            format!("StatefulSet creates a new {pod}"),
            false,
            false,
        ),
        K::PodScheduled => (
            Actor::ControlPlane,
            format!("{pod} scheduled to {node}"),
            false,
            false,
        ),
        K::PodUnschedulable => (
            Actor::ControlPlane,
            format!("{pod} cannot be scheduled: {}", truncate(msg, 70)),
            true,
            true,
        ),
        K::MultiAttachError => (
            Actor::ControlPlane,
            format!(
                "Multi-Attach error: {pod}'s volume is still attached to {}",
                last_parenthesised(msg)
                    .map(|s| s.trim_start_matches("attached to "))
                    .unwrap_or("another node")
            ),
            true,
            true,
        ),
        K::VolumeDetached => (
            Actor::ControlPlane,
            match last_parenthesised(msg) {
                Some(how) if how.contains("out-of-service") => {
                    "volume detached (forced: the node is out of service)".to_string()
                }
                Some(how) => format!("volume detached ({how})"),
                None => "volume detached".to_string(),
            },
            false,
            false,
        ),
        K::VolumeAttached => (
            Actor::ControlPlane,
            format!("volume attached for {pod}"),
            false,
            false,
        ),
        K::AttachFailed => (Actor::ControlPlane, truncate(msg, 90), true, true),
        K::FailedMount => (
            Actor::Kubelet,
            format!("{pod}: volume not attached yet (FailedMount, retrying)"),
            true,
            true,
        ),
        K::PodRunning => (Actor::Kubelet, format!("{pod} Running"), false, false),
        K::NodeDeleted => (
            Actor::ControlPlane,
            "Node object deleted".to_string(),
            false,
            false,
        ),
        K::NodeRegistered => (
            Actor::Kubelet,
            "Node object registered again".to_string(),
            false,
            false,
        ),
        _ => return None,
    };
    let fact = Fact::Sim {
        kind: ev.kind,
        pod: ev.pod.clone(),
    };
    let step = Step::new(ev.at, node, actor, fact, text).warning(warning);
    Some(if repeats {
        step.once(format!("{:?}|{}", ev.kind, pod))
    } else {
        step
    })
}

/// The Events with which nodefence opens an incident on a node: its wait before a
/// ForceOff (`unhealthy_after`) counts from the first of them or from NotReady,
/// whichever came first (`engine::decide`).
pub const INCIDENT_OPENERS: [&str; 3] = ["NodeSuspect", "NodeUnhealthy", "RemediationRequested"];

/// What `unhealthy_after` counts from, in words, for the Event that opened the
/// incident: the engine counts from when it opened the incident (after a stale Lease
/// or NotReady), or from NotReady if that came first, which it cannot after a
/// NodeUnhealthy (opened on NotReady) and, in the demo, does not after a NodeSuspect
/// (the Lease goes stale well before the grace period ends).
fn counted_from(opener: &Step) -> &'static str {
    if opener.is_nodefence("NodeUnhealthy") {
        "it turned NotReady"
    } else if opener.is_nodefence("RemediationRequested") {
        "the request came"
    } else {
        "nodefence found its Lease stale"
    }
}

/// An `events.k8s.io/v1` Event nodefence wrote, as a step at `at`; `opener` is the
/// Event that opened the node's incident (see [`INCIDENT_OPENERS`]), which the waits
/// before a ForceOff count from.
pub fn nodefence_step(
    event: &Value,
    at: SystemTime,
    w: &Wording,
    opener: Option<&Step>,
) -> Option<Step> {
    let reason = event.get("reason").and_then(Value::as_str)?;
    let node = event
        .pointer("/regarding/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let note = event.get("note").and_then(Value::as_str).unwrap_or("");
    let warning = event.get("type").and_then(Value::as_str) == Some("Warning");
    let lease = w.lease_stale_after.map_or("a while".to_string(), span);
    let unhealthy = span(w.unhealthy_after);
    let mut marks = Vec::new();
    let text = match reason {
        "NodeSuspect" if note.starts_with("its companion stopped beating") => format!(
            "its companion fell silent (no beat for {}): suspect; asks the BMC for the power state",
            span(crate::heartbeat::DEFAULT_HEARTBEAT_TIMEOUT)
        ),
        "NodeSuspect" => {
            format!("Lease not renewed for {lease}: suspect; asks the BMC for the power state")
        }
        "NodeUnhealthy" => "node NotReady: asks the BMC for the power state".to_string(),
        "MachineStillOn" => match opener {
            // The engine's deadline: the incident's start + unhealthy_after.
            Some(o) => {
                marks = vec![
                    Mark {
                        at: o.at,
                        offset: w.unhealthy_after,
                    },
                    Mark {
                        at: o.at,
                        offset: Duration::ZERO,
                    },
                ];
                format!(
                    "BMC says On: it may only be cut off; ForceOff at {{@0}}, {unhealthy} after {} ({{@1}}), unless the node recovers",
                    counted_from(o)
                )
            }
            None => format!(
                "BMC says On: it may only be cut off; ForceOff {unhealthy} after nodefence found the node unhealthy, unless it recovers"
            ),
        },
        "RemediationRequested" => format!(
            "{} asks for it to be fenced: asks the BMC for the power state",
            requester(note).unwrap_or("a remediation request")
        ),
        "PoweringOff" => {
            let attempt = note
                .split("(attempt ")
                .nth(1)
                .and_then(|s| s.split(')').next())
                .filter(|a| *a != "1")
                .map(|a| format!(" (attempt {a})"))
                .unwrap_or_default();
            match requester(note) {
                // The requester already waited: no unhealthy_after of nodefence's own.
                Some(by) => format!(
                    "still On, and {by} asks: sends ForceOff now, without waiting for its own {unhealthy}{attempt}"
                ),
                None => match opener {
                    Some(o) => {
                        marks = vec![Mark {
                            at: o.at,
                            offset: Duration::ZERO,
                        }];
                        format!(
                            "still On {unhealthy} or more after {} ({{@0}}): sends ForceOff{attempt}",
                            counted_from(o)
                        )
                    }
                    None => format!(
                        "still On {unhealthy} or more after nodefence found the node unhealthy: sends ForceOff{attempt}"
                    ),
                },
            }
        }
        "ConfirmedOff" => {
            let readings = note
                .split('(')
                .nth(1)
                .and_then(|s| s.split_whitespace().next())
                .unwrap_or("several");
            format!("machine confirmed Off ({readings} readings); adding the out-of-service taint")
        }
        "Released" if note.contains("rests on its hardware watchdog") => {
            "out-of-service taint added, on the watchdog's proof (not an Off reading): pods may \
             be force-deleted, volumes detached"
                .to_string()
        }
        "Released" => {
            "out-of-service taint added: pods may be force-deleted, volumes detached".to_string()
        }
        "WatchdogFencing" if note.starts_with("no power method of the machine can be read") => {
            "no power method can be read: marks the node for fencing by its own hardware \
             watchdog (its companion, if alive, stops feeding it)"
                .to_string()
        }
        "WatchdogFencing" => match watchdog_wait(note) {
            Some((until, why)) => {
                marks = vec![Mark {
                    at: until,
                    offset: Duration::ZERO,
                }];
                format!("mark written: the machine is certainly reset (or off) by {{@0}}: {why}")
            }
            None => truncate(note, 110),
        },
        "ResetByWatchdog" => match note.split_once("not read Off: ") {
            Some((_, proof)) => format!(
                "proven reset by its own watchdog, not read Off: {}",
                proof
                    .replace(" after it;", ";")
                    .replace(", so none of its peers", ": none of its peers")
            ),
            None => truncate(note, 110),
        },
        "PodsForceDeleted" => {
            let pods = note
                .split(": ")
                .nth(1)
                .and_then(|s| s.split_whitespace().next())
                .unwrap_or("its");
            format!("force-deletes {pods} pod(s) itself: PodGC would not yet")
        }
        "TaintRemoved" => format!(
            "node Ready again for {}: out-of-service taint removed",
            span(w.recovered_after)
        ),
        "PowerQueryFailed" => {
            let why = note
                .split_once("cannot be read (")
                .and_then(|(_, rest)| rest.rsplit_once("); nothing"))
                .map_or(note, |(why, _)| why);
            format!(
                "power state unreadable ({}): nothing is released",
                truncate(&plain_error(why), 90)
            )
        }
        "FenceBlocked" if note.starts_with("the power state is ") => {
            let state = note
                .trim_start_matches("the power state is ")
                .split(':')
                .next()
                .unwrap_or("unknown");
            format!("reads {state}: neither On nor Off, nothing released; reads again")
        }
        _ => truncate(note, 110),
    };
    let fact = Fact::Nodefence {
        reason: reason.to_string(),
    };
    Some(
        Step::new(at, node, Actor::Nodefence, fact, text)
            .warning(warning)
            .marks(marks),
    )
}

/// The moment and the arithmetic of a note saying "... proven reset by its watchdog
/// no sooner than <RFC 3339> (<the wait> after the mark)".
fn watchdog_wait(note: &str) -> Option<(SystemTime, String)> {
    let (_, rest) = note.split_once("no sooner than ")?;
    let (time, why) = rest.split_once(" (")?;
    let until = humantime::parse_rfc3339_weak(time).ok()?;
    Some((until, why.strip_suffix(')').unwrap_or(why).to_string()))
}

/// The request named in a note saying "... NodeFenceRemediation ns/name asks for it
/// to be fenced ...".
fn requester(note: &str) -> Option<&str> {
    let end = note.find(" asks for it to be fenced")?;
    let start = note[..end].rfind("NodeFenceRemediation ")?;
    Some(&note[start..end])
}

/// A request just created: by NodeHealthCheck (`by_nhc`) once the node's `Ready`
/// condition had been `ready` for `not_ready_for` since the node turned NotReady,
/// past the NodeHealthCheck's `duration` (all cluster time).
pub fn request_created(
    name: &str,
    by_nhc: bool,
    ready: Option<&str>,
    not_ready_for: Option<Duration>,
    duration: Option<Duration>,
) -> String {
    if !by_nhc {
        return format!("NodeFenceRemediation {name} created");
    }
    let held = match (ready, not_ready_for) {
        (Some(status), Some(d)) => format!("Ready {status} for {} since NotReady", span(d)),
        (Some(status), None) => format!("Ready {status}"),
        _ => "node unhealthy".to_string(),
    };
    let limit = duration.map_or(String::new(), |d| format!(" (its duration: {})", span(d)));
    format!("{held}{limit}: creates NodeFenceRemediation {name}")
}

/// NodeHealthCheck (or someone) deleted a request; `held` when nodefence's finalizer
/// keeps it while the out-of-service taint is on.
pub fn request_deleting(by_nhc: bool, held: bool) -> String {
    let who = if by_nhc {
        "node healthy again: deletes the request"
    } else {
        "the request is deleted"
    };
    if held {
        format!("{who}; nodefence's finalizer keeps it until the out-of-service taint is removed")
    } else {
        who.to_string()
    }
}

/// Conditions of a request that changed, as `(type, status, reason)`:
/// `request: Processing=True (PoweringOff), Succeeded=Unknown`. A reason common to
/// all is said once, at the end.
pub fn request_conditions(changed: &[(String, String, String)]) -> String {
    // A reason both share is said once: after Processing while Succeeded is still
    // Unknown (the reason is Processing's), else after Succeeded.
    let shared = changed.len() > 1 && changed.windows(2).all(|w| w[0].2 == w[1].2);
    let pending = changed
        .iter()
        .any(|(t, s, _)| t == "Succeeded" && s == "Unknown");
    let parts: Vec<String> = changed
        .iter()
        .map(|(t, s, r)| {
            let says = !shared || (pending == (t == "Processing"));
            if says {
                format!("{t}={s} ({r})")
            } else {
                format!("{t}={s}")
            }
        })
        .collect();
    let mut text = format!("request: {}", parts.join(", "));
    let gloss = changed
        .iter()
        .find_map(|(t, s, r)| match (t.as_str(), s.as_str(), r.as_str()) {
            ("Succeeded", "True", _) => Some("NodeHealthCheck's request is served"),
            ("Processing", "True", "PoweringOff") => Some("ForceOff under way"),
            ("Processing", "True", "ConfirmingOff") => Some("counting Off readings"),
            ("Processing", "True", "Releasing") => Some("adding the out-of-service taint"),
            ("Processing", "True", "MachineOn") => Some("the machine reads On"),
            ("Processing", "True", "PowerStateUndetermined") => Some("neither On nor Off yet"),
            ("Processing", "True", "Starting") => Some("reading the machine's power"),
            _ => None,
        });
    if let Some(g) = gloss {
        text.push_str(&format!(": {g}"));
    }
    text
}

/// A Reset the BMC received.
pub fn reset_text(reset_type: &str) -> String {
    match reset_type {
        "ForceOff" => "ForceOff received: power cut".to_string(),
        "On" | "ForceOn" => format!("{reset_type} received: powering on"),
        "PowerOffVM_Task" => "PowerOffVM_Task received: powering the VM off (hard)".to_string(),
        "PowerOnVM_Task" => "PowerOnVM_Task received: VM powering on".to_string(),
        other => format!("{other} received"),
    }
}

/// A power state the machine reached, when worth a line.
pub fn power_text(power: MockPower) -> Option<String> {
    match power {
        MockPower::Off => Some("machine is Off".to_string()),
        MockPower::On => Some("machine is On".to_string()),
        _ => None,
    }
}

/// A power state a VM reached, when worth a line.
pub fn vm_power_text(power: nodefence_mocks::vsphere::VmPower) -> Option<String> {
    use nodefence_mocks::vsphere::VmPower;
    match power {
        VmPower::PoweredOff => Some("VM is poweredOff".to_string()),
        VmPower::PoweredOn => Some("VM is poweredOn".to_string()),
        VmPower::Suspended => Some("VM is suspended".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn wording() -> Wording {
        Wording {
            lease_stale_after: Some(Duration::from_secs(25)),
            unhealthy_after: Duration::from_secs(60),
            recovered_after: Duration::from_secs(30),
            grace_period: Duration::from_secs(50),
            toleration: Duration::from_secs(300),
        }
    }

    #[test]
    fn nodefence_events_read_plainly() {
        let ev = json!({"reason": "ConfirmedOff", "type": "Normal", "regarding": {"name": "worker-2"},
            "note": "the machine is confirmed Off (3 consecutive readings since its last sign of life); adding the out-of-service taint"});
        let step = nodefence_step(&ev, crate::clock::now(), &wording(), None).unwrap();
        assert_eq!(step.node, "worker-2");
        assert_eq!(
            step.text,
            "machine confirmed Off (3 readings); adding the out-of-service taint"
        );
        let ev = json!({"reason": "PowerQueryFailed", "type": "Warning", "regarding": {"name": "worker-1"},
            "note": "the power state cannot be read (timed out (after 1s)); nothing is released"});
        let step = nodefence_step(&ev, crate::clock::now(), &wording(), None).unwrap();
        assert!(step.warning);
        assert_eq!(
            step.text,
            "power state unreadable (timed out): nothing is released"
        );
        assert_eq!(
            plain_error("unreachable: GET /x timed out (request_timeout 1s): operation timed out"),
            "unreachable: GET /x timed out"
        );
        let ev = json!({"reason": "PoweringOff", "type": "Warning", "regarding": {"name": "w"},
            "note": "... forcing power off (attempt 2)"});
        let step = nodefence_step(&ev, crate::clock::now(), &wording(), None).unwrap();
        assert!(
            step.text.ends_with("sends ForceOff (attempt 2)"),
            "{}",
            step.text
        );
    }

    #[test]
    fn the_watchdog_level_reads_plainly_with_its_arithmetic() {
        let event = |reason: &str, note: &str| json!({"reason": reason, "type": "Normal", "regarding": {"name": "worker-1"}, "note": note});
        let t0 = crate::clock::now();
        let step = |reason: &str, note: &str| {
            nodefence_step(&event(reason, note), t0, &wording(), None).unwrap()
        };
        let silent = step(
            "NodeSuspect",
            "its companion stopped beating (last sign of life 2025-01-01T00:00:00Z); checking the machine's power through its out-of-band controller",
        );
        assert_eq!(
            silent.text,
            "its companion fell silent (no beat for 2s): suspect; asks the BMC for the power state"
        );
        let lease = step(
            "NodeSuspect",
            "its kubelet stopped renewing its Lease (last sign of life ...)",
        );
        assert!(
            lease.text.starts_with("Lease not renewed for 25s"),
            "{}",
            lease.text
        );
        let marking = step(
            "WatchdogFencing",
            "no power method of the machine can be read: marking the node for fencing by its own hardware watchdog (its companion stops feeding it)",
        );
        assert!(
            marking
                .text
                .starts_with("no power method can be read: marks the node")
        );
        let wait = crate::watchdog::timing::Timing::default().wait(Duration::from_secs(10));
        let until = t0 + Duration::from_millis(15_300);
        let waiting = step(
            "WatchdogFencing",
            &format!(
                "the node is marked for fencing; its machine is proven reset by its watchdog no sooner than {} ({wait} after the mark)",
                humantime::format_rfc3339_millis(until)
            ),
        );
        assert_eq!(
            waiting.text_since(t0, 1.0),
            "mark written: the machine is certainly reset (or off) by +15.3s: isolation 2s + watchdog 10s + drift margin 242.5ms (1.0 %) + allowance 500ms = 12.7425s after the mark"
        );
        let reset = step(
            "ResetByWatchdog",
            &format!(
                "the machine was reset by its hardware watchdog (hardware watchdog, 10s granted), not read Off: the mark was 12.8s ago, at least {wait} after it; 2 of 3 companions heard throughout, so none of its peers could have kept it fed"
            ),
        );
        assert_eq!(
            reset.text,
            "proven reset by its own watchdog, not read Off: the mark was 12.8s ago, at least isolation 2s + watchdog 10s + drift margin 242.5ms (1.0 %) + allowance 500ms = 12.7425s; 2 of 3 companions heard throughout: none of its peers could have kept it fed"
        );
        let released = step(
            "Released",
            "out-of-service taint added: ...; this release rests on its hardware watchdog, not on an Off reading: the machine was reset ...",
        );
        assert!(
            released
                .text
                .contains("on the watchdog's proof (not an Off reading)")
        );
    }

    #[test]
    fn the_wait_before_a_force_off_is_counted_from_the_incident() {
        let t0 = crate::clock::now();
        let suspect = json!({"reason": "NodeSuspect", "type": "Warning", "regarding": {"name": "w"},
            "note": "its kubelet stopped renewing its Lease (last sign of life ...)"});
        let opener =
            nodefence_step(&suspect, t0 + Duration::from_secs(2), &wording(), None).unwrap();
        let on = json!({"reason": "MachineStillOn", "type": "Warning", "regarding": {"name": "w"},
            "note": "the machine is On; it will be powered off at ... unless the node recovers"});
        let step =
            nodefence_step(&on, t0 + Duration::from_secs(9), &wording(), Some(&opener)).unwrap();
        // Shown at speed 6: the opener at +12.0s, the deadline a minute later.
        assert_eq!(
            step.text_since(t0, 6.0),
            "BMC says On: it may only be cut off; ForceOff at +72.0s, 1m after nodefence found its Lease stale (+12.0s), unless the node recovers"
        );
        let off = json!({"reason": "PoweringOff", "type": "Warning", "regarding": {"name": "w"},
            "note": "the machine is still On and the node has been unhealthy since ...: forcing power off (attempt 1)"});
        let step = nodefence_step(
            &off,
            t0 + Duration::from_secs(12),
            &wording(),
            Some(&opener),
        )
        .unwrap();
        assert_eq!(
            step.text_since(t0, 6.0),
            "still On 1m or more after nodefence found its Lease stale (+12.0s): sends ForceOff"
        );
    }

    #[test]
    fn requests_read_plainly() {
        let ev = json!({"reason": "PoweringOff", "type": "Warning", "regarding": {"name": "w"},
            "note": "the machine is still On and NodeFenceRemediation nodefence/w asks for it to be fenced: forcing power off (attempt 1)"});
        let step = nodefence_step(&ev, crate::clock::now(), &wording(), None).unwrap();
        assert_eq!(
            step.text,
            "still On, and NodeFenceRemediation nodefence/w asks: sends ForceOff now, without waiting for its own 1m"
        );
        assert_eq!(
            request_created(
                "nodefence/w",
                true,
                Some("Unknown"),
                Some(Duration::from_secs(66)),
                Some(Duration::from_secs(60))
            ),
            "Ready Unknown for 1m 6s since NotReady (its duration: 1m): creates NodeFenceRemediation nodefence/w"
        );
        let changed = |v: &[(&str, &str, &str)]| -> Vec<(String, String, String)> {
            v.iter()
                .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
                .collect()
        };
        assert_eq!(
            request_conditions(&changed(&[
                ("Processing", "False", "Released"),
                ("Succeeded", "True", "Released")
            ])),
            "request: Processing=False, Succeeded=True (Released): NodeHealthCheck's request is served"
        );
        assert_eq!(
            request_conditions(&changed(&[("Processing", "True", "ConfirmingOff")])),
            "request: Processing=True (ConfirmingOff): counting Off readings"
        );
        assert_eq!(
            request_conditions(&changed(&[
                ("Processing", "True", "PoweringOff"),
                ("Succeeded", "Unknown", "PoweringOff")
            ])),
            "request: Processing=True (PoweringOff), Succeeded=Unknown: ForceOff under way"
        );
    }

    #[test]
    fn simulation_events_read_plainly() {
        let ev = SimEvent {
            at: crate::clock::now(),
            kind: SimEventKind::MultiAttachError,
            node: Some("worker-3".into()),
            pod: Some("default/db-0".into()),
            message: "Multi-Attach error for volume \"pv\" Volume is already exclusively attached (attached to worker-1)".into(),
        };
        let step = sim_step(&ev, &wording()).unwrap();
        assert_eq!(
            step.text,
            "Multi-Attach error: db-0's volume is still attached to worker-1"
        );
        assert!(step.once.is_some());
        let ev = SimEvent {
            kind: SimEventKind::VolumeMounted,
            ..ev
        };
        assert!(sim_step(&ev, &wording()).is_none());
    }
}
