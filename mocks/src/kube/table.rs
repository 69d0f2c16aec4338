//! Server-side printing: `meta.k8s.io` Tables, as `kubectl get` (without `-o`)
//! asks for them.
//!
//! kubectl prints whatever columns the server sends, so the columns are the real
//! printers' for the types nodefence operators look at while fencing: nodes (is it
//! `NotReady`, `SchedulingDisabled`?), pods (`Terminating` forever on a dead node)
//! and volume attachments (still `true` on the dead node?), plus events, claims
//! and volumes for `kubectl get events,pvc,pv`. Namespaces and leases get their
//! short real tables, CRDs the default convertor's `NAME`/`CREATED AT`, everything
//! else `NAME`/`AGE`. Custom resources get their version's
//! `additionalPrinterColumns` after `NAME` (or `AGE`, when it declares none), as the
//! apiextensions-apiserver's table convertor (see [`super::crd::cells`]). Priority-1 columns
//! are what `-o wide` adds. Each row carries the object as `PartialObjectMetadata`
//! by default (`includeObject=Metadata`), which kubectl needs for `-A` and
//! `--show-labels`.

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use super::crd::{self, CustomVersion};
use super::printers::{cells, columns};
use super::resources::ResourceType;

/// `duration.HumanDuration` of the time since `created`.
pub(crate) fn age(created: Option<&str>, now: SystemTime) -> String {
    let Some(t) = created.and_then(|c| humantime::parse_rfc3339_weak(c).ok()) else {
        return "<unknown>".to_owned();
    };
    match now.duration_since(t) {
        Ok(d) => human_duration(d),
        Err(e) if e.duration() > Duration::from_secs(1) => "<invalid>".to_owned(),
        Err(_) => "0s".to_owned(),
    }
}

/// Kubernetes' short human duration ("45s", "3m20s", "5h", "12d", "2y30d").
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    let (m, h, days) = (s / 60, s / 3600, s / 86_400);
    let with = |major: u64, unit: &str, minor: u64, unit2: &str| {
        if minor == 0 {
            format!("{major}{unit}")
        } else {
            format!("{major}{unit}{minor}{unit2}")
        }
    };
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        with(m, "m", s % 60, "s")
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        with(h, "h", m % 60, "m")
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        with(days, "d", h % 24, "h")
    } else if h < 24 * 365 * 2 {
        format!("{days}d")
    } else if h < 24 * 365 * 8 {
        with(days / 365, "y", days % 365, "d")
    } else {
        format!("{}y", days / 365)
    }
}

/// The row's `object` for an `includeObject` policy (`None`, `Metadata`, `Object`).
fn row_object(o: &Value, include: &str) -> Option<Value> {
    match include {
        "None" => None,
        "Object" => Some(o.clone()),
        _ => Some(partial_metadata(o)),
    }
}

/// An object reduced to `PartialObjectMetadata`.
pub fn partial_metadata(o: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": o.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// A Table of `objects`; `headers: false` omits the column definitions (watch
/// events after the first). `list_meta` is the list's `metadata`. `custom` is the
/// CRD version serving `rt`, for a custom resource.
pub fn table(
    rt: ResourceType,
    custom: Option<&CustomVersion>,
    version: &str,
    objects: &[Value],
    list_meta: Value,
    include: Option<&str>,
    headers: bool,
) -> Value {
    let now = nodefence_clock::now();
    let include = include.unwrap_or("Metadata");
    let definitions: Vec<Value> = if !headers {
        Vec::new()
    } else if let Some(cv) = custom {
        crd::column_definitions(cv)
    } else {
        columns(rt)
            .iter()
            .map(|(name, ty, priority)| {
                let mut d = json!({"name": name, "type": ty, "format": "", "description": name, "priority": priority});
                if *name == "Name" {
                    d["format"] = json!("name");
                }
                d
            })
            .collect()
    };
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let row_cells = match custom {
                Some(cv) => crd::cells(cv, o, now),
                None => cells(rt, o, now),
            };
            let mut row = json!({"cells": row_cells});
            if let Some(obj) = row_object(o, include) {
                row["object"] = obj;
            }
            row
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": format!("meta.k8s.io/{version}"),
        "metadata": list_meta,
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::super::resources::{
        CORE_EVENTS, NODES, PERSISTENT_VOLUME_CLAIMS, PODS, VOLUME_ATTACHMENTS,
    };
    use super::*;

    #[test]
    fn human_durations() {
        let d = |s| human_duration(Duration::from_secs(s));
        assert_eq!(d(5), "5s");
        assert_eq!(d(119), "119s");
        assert_eq!(d(200), "3m20s");
        assert_eq!(d(600), "10m");
        assert_eq!(d(3 * 3600 + 60), "3h1m");
        assert_eq!(d(20 * 3600), "20h");
        assert_eq!(d(3 * 86_400 + 7200), "3d2h");
        assert_eq!(d(40 * 86_400), "40d");
        assert_eq!(d(3 * 365 * 86_400 + 86_400), "3y1d");
    }

    #[test]
    fn node_pod_and_attachment_rows() {
        let node = json!({"metadata": {"name": "w1", "labels": {"node-role.kubernetes.io/worker": ""}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown"}], "nodeInfo": {"kubeletVersion": "v1.33.4"}}});
        let t = table(NODES, None, "v1", &[node], json!({}), None, true);
        assert_eq!(t["rows"][0]["cells"][1], "NotReady,SchedulingDisabled");
        assert_eq!(t["rows"][0]["cells"][2], "worker");
        assert_eq!(t["rows"][0]["cells"][4], "v1.33.4");
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(t["columnDefinitions"][0]["format"], "name");

        let pod = json!({"metadata": {"name": "web-0", "deletionTimestamp": "2030-01-01T00:00:00Z"},
            "spec": {"nodeName": "w1", "containers": [{"name": "c"}]},
            "status": {"phase": "Running", "containerStatuses": [{"ready": true, "restartCount": 2}]}});
        let t = table(PODS, None, "v1", &[pod], json!({}), Some("None"), false);
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[1], "1/1");
        assert_eq!(cells[2], "Terminating");
        assert_eq!(cells[3], "2");
        assert_eq!(cells[6], "w1");
        assert!(t["rows"][0].get("object").is_none());
        assert_eq!(t["columnDefinitions"], json!([]));

        let va = json!({"metadata": {"name": "csi-1"}, "spec": {"attacher": "x.csi", "nodeName": "w1",
            "source": {"persistentVolumeName": "pv-1"}}, "status": {"attached": true}});
        let t = table(VOLUME_ATTACHMENTS, None, "v1", &[va], json!({}), None, true);
        assert_eq!(
            t["rows"][0]["cells"],
            json!(["csi-1", "x.csi", "pv-1", "w1", true, "<unknown>"])
        );

        let ev = json!({"metadata": {"name": "e"}, "type": "Warning", "reason": "NodeNotReady",
            "involvedObject": {"kind": "Node", "name": "w1"}, "message": "Node is not ready"});
        let t = table(CORE_EVENTS, None, "v1", &[ev], json!({}), None, true);
        assert_eq!(
            t["rows"][0]["cells"].as_array().unwrap()[1..],
            [
                json!("Warning"),
                json!("NodeNotReady"),
                json!("node/w1"),
                json!("Node is not ready")
            ]
        );
        let pvc = json!({"metadata": {"name": "data-web-0"},
            "spec": {"volumeName": "pv-1", "storageClassName": "csi"},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"]}});
        let t = table(
            PERSISTENT_VOLUME_CLAIMS,
            None,
            "v1",
            &[pvc],
            json!({}),
            None,
            true,
        );
        assert_eq!(
            t["rows"][0]["cells"].as_array().unwrap()[..6],
            ["data-web-0", "Bound", "pv-1", "1Gi", "RWO", "csi"].map(|s| json!(s))
        );
    }
}
