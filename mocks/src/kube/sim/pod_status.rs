//! The pod status a kubelet reports: phase, the five conditions
//! (PodReadyToStartContainers, Initialized, Ready, ContainersReady, plus the
//! scheduler's PodScheduled and others kept), container statuses (waiting
//! `ContainerCreating`, running, terminated `Completed`), IPs, QoS class. Only
//! these fields are written; conditions set by controllers (`DisruptionTarget`)
//! stay.

use serde_json::{Value, json};

use super::super::store::now_rfc3339;
use super::kubelet_pods::PodWork;
use super::objects::At;
use super::objects::{self, set_condition};

/// Which container state to report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    Creating,
    Running,
    Terminated,
}

/// The status a kubelet reports for a pod in `report` state.
pub fn apply_pod_status(p: &mut Value, work: &PodWork, host_ip: &str, report: Report) {
    let now = now_rfc3339();
    let containers: Vec<(String, String)> = p
        .at("/spec/containers")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default();
                    (s("name").to_string(), s("image").to_string())
                })
                .collect()
        })
        .unwrap_or_default();
    let names: Vec<&str> = containers.iter().map(|(n, _)| n.as_str()).collect();
    let unready = format!("containers with unready status: [{}]", names.join(" "));
    let (phase, ready, sandbox) = match report {
        Report::Creating => ("Pending", false, false),
        Report::Running => ("Running", true, true),
        Report::Terminated => ("Succeeded", false, false),
    };
    let tf = |b: bool| if b { "True" } else { "False" };
    set_condition(
        p,
        json!({"type": "PodReadyToStartContainers", "status": tf(sandbox)}),
    );
    set_condition(p, json!({"type": "Initialized", "status": "True"}));
    for kind in ["Ready", "ContainersReady"] {
        let cond = match report {
            Report::Running => json!({"type": kind, "status": "True"}),
            Report::Creating => json!({"type": kind, "status": "False",
                "reason": "ContainersNotReady", "message": unready}),
            Report::Terminated => {
                json!({"type": kind, "status": "False", "reason": "PodCompleted"})
            }
        };
        set_condition(p, cond);
    }
    let statuses: Vec<Value> = containers
        .iter()
        .map(|(name, image)| {
            let mut cs = json!({
                "name": name, "image": image, "imageID": "", "ready": ready,
                "restartCount": work.restarts, "started": ready, "lastState": {},
            });
            match report {
                Report::Creating => {
                    cs["state"] = json!({"waiting": {"reason": "ContainerCreating"}});
                }
                Report::Running => {
                    cs["state"] = json!({"running": {"startedAt": work.started_at}});
                }
                Report::Terminated => {
                    cs["state"] = json!({"terminated": {"exitCode": 0, "reason": "Completed",
                        "startedAt": work.started_at, "finishedAt": now,
                        "containerID": format!("containerd://{}", work.container_id)}});
                }
            }
            if report != Report::Creating {
                cs["containerID"] = json!(format!("containerd://{}", work.container_id));
                cs["imageID"] = json!(format!("{image}@sha256:{}", "0".repeat(64)));
            }
            cs
        })
        .collect();
    let status = objects::obj_mut(p, &["status"]);
    status.insert("phase".into(), json!(phase));
    status.insert("hostIP".into(), json!(host_ip));
    status.insert("hostIPs".into(), json!([{"ip": host_ip}]));
    status.insert("qosClass".into(), json!("BestEffort"));
    status.entry("startTime").or_insert_with(|| json!(now));
    if report == Report::Creating {
        status.remove("podIP");
        status.remove("podIPs");
    } else {
        status.insert("podIP".into(), json!(work.ip));
        status.insert("podIPs".into(), json!([{"ip": work.ip}]));
    }
    status.insert("containerStatuses".into(), json!(statuses));
}
