//! The API server as each replica incarnation reaches it: fake-kube served in
//! process (no socket, tokio's paused time), behind a fault layer that can cut the
//! replica off (ending its open watches too), slow it down, answer 409/429/500, or
//! drop its watches (ended streams, `410 Gone` on a new one), and that checks every write
//! nodefence makes before it reaches the store: a release (taint, Node, pod or
//! VolumeAttachment deletion) only while the node's own machine is really off with an
//! Off reading newer than its failure (invariant 1; a node the watchdog level
//! marked: off or reset by its watchdog since its failure), and any write only from
//! the replica holding the leader Lease (invariant 3); a taint removed only from a
//! Node back with another boot than its release ended, and a release reported
//! contradicted only while it reports that boot (invariant 12).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::body::Body as AxumBody;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use nodefence_mocks::kube::resources::{LEASES, NODES, PODS, VOLUME_ATTACHMENTS};
use nodefence_mocks::kube::store::Store;
use serde_json::{Value, json};
use tower::ServiceExt;

use super::machine::{Truth, lock};

pub const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

/// How the API server answers one replica incarnation right now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ApiMode {
    Normal,
    /// Half the requests get 500.
    Errors500,
    /// Half the writes get 409 Conflict.
    Conflicts,
    /// Half the requests get 429 with Retry-After.
    TooMany,
    /// Every request takes this long.
    Slow(Duration),
    /// Nothing gets through (a partition between this replica and the API server);
    /// open watches end.
    Cut,
    /// Open watches end and half the new ones get `410 Gone` (their resourceVersion
    /// compacted away, as after an API server restart or an etcd compaction): the
    /// client must list again and must not miss what changed meanwhile.
    DropWatches,
    /// Every list and watch of the kubelet Leases gets 500 (the rest works): an API
    /// server whose storage answers for one resource and not another. Played only by
    /// scripted scenarios.
    LeaseListsFail,
}

/// One incarnation's side of the wire.
pub struct ApiSide {
    pub identity: String,
    pub alive: Arc<AtomicBool>,
    /// Watched by open watch streams, which end on `Cut` and `DropWatches`.
    pub mode: tokio::sync::watch::Sender<ApiMode>,
}

impl ApiSide {
    /// Resolves once this side's open watches must end.
    async fn watches_end(&self) {
        let mut rx = self.mode.subscribe();
        let _ = rx
            .wait_for(|m| matches!(m, ApiMode::Cut | ApiMode::DropWatches))
            .await;
    }
}

/// Where the leader Lease is.
pub const LEADER: (&str, &str) = ("nodefence", "nodefence");

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A kube client for `side`, through the fault layer, to `router`.
pub fn client(
    router: axum::Router,
    token: String,
    store: Store,
    side: Arc<ApiSide>,
    truth: Arc<Truth>,
) -> kube::Client {
    let service = tower::service_fn(move |req: Request<kube::client::Body>| {
        let router = router.clone();
        let token = token.clone();
        let store = store.clone();
        let side = side.clone();
        let truth = truth.clone();
        async move {
            let (mut parts, body) = req.into_parts();
            parts.headers.insert(
                http::header::AUTHORIZATION,
                http::HeaderValue::from_str(&format!("Bearer {token}"))?,
            );
            let body = body.collect().await?.to_bytes();
            let mode = *side.mode.borrow();
            let watch = parts
                .uri
                .query()
                .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
            if !side.alive.load(Ordering::SeqCst) || mode == ApiMode::Cut {
                return Err::<Response<AxumBody>, BoxError>(Box::new(std::io::Error::new(
                    std::io::ErrorKind::ConnectionRefused,
                    "connection refused (simulated partition)",
                )));
            }
            if let ApiMode::Slow(d) = mode {
                tokio::time::sleep(d).await;
                if !side.alive.load(Ordering::SeqCst) {
                    return Err(Box::new(std::io::Error::other("the process crashed")));
                }
            }
            let write = parts.method != http::Method::GET;
            let lease_collection = !write
                && parts.uri.path().trim_end_matches('/').ends_with("/leases")
                && !parts
                    .uri
                    .path()
                    .contains(&format!("/namespaces/{}/", LEADER.0));
            let injected = match mode {
                ApiMode::LeaseListsFail if lease_collection => {
                    Some(StatusCode::INTERNAL_SERVER_ERROR)
                }
                ApiMode::Errors500 if truth.coin() => Some(StatusCode::INTERNAL_SERVER_ERROR),
                ApiMode::Conflicts if write && truth.coin() => Some(StatusCode::CONFLICT),
                ApiMode::TooMany if truth.coin() => Some(StatusCode::TOO_MANY_REQUESTS),
                ApiMode::DropWatches if watch && truth.coin() => Some(StatusCode::GONE),
                _ => None,
            };
            if let Some(code) = injected {
                truth.count(|c| c.api_errors += 1);
                return Ok(status(code));
            }
            let begins_release = if write {
                check_write(&parts, &body, &store, &side, &truth)
            } else {
                None
            };
            let req = Request::from_parts(parts, AxumBody::from(body));
            let resp = router
                .oneshot(req)
                .await
                .map_err(|e| -> BoxError { match e {} })?;
            if let Some(node) = begins_release.as_deref()
                && resp.status().is_success()
            {
                truth.release_written(node);
            }
            if begins_release.is_some()
                && resp.status().is_success()
                && truth.crash_on_release.swap(false, Ordering::SeqCst)
            {
                // Its process is gone right after the write (Fault::CrashOnNextRelease).
                side.alive.store(false, Ordering::SeqCst);
                truth.count(|c| c.scripted_crashes += 1);
            }
            if !watch {
                return Ok(resp);
            }
            // An open watch ends when this side is cut off or its watches are dropped.
            let (parts, body) = resp.into_parts();
            let end = async move {
                side.watches_end().await;
                truth.count(|c| c.watches_ended += 1);
            };
            let stream = futures::StreamExt::take_until(body.into_data_stream(), Box::pin(end));
            Ok(Response::from_parts(parts, AxumBody::from_stream(stream)))
        }
    });
    kube::Client::new(service, "default")
}

fn status(code: StatusCode) -> Response<AxumBody> {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": format!("simulated {}", code.as_u16()),
        "reason": match code.as_u16() { 409 => "Conflict", 410 => "Expired", 429 => "TooManyRequests", _ => "InternalError" },
        "code": code.as_u16(),
    });
    let mut resp = Response::new(AxumBody::from(body.to_string()));
    *resp.status_mut() = code;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    if code == StatusCode::TOO_MANY_REQUESTS {
        resp.headers_mut().insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static("1"),
        );
    }
    resp
}

/// Invariants 1 and 3 on one write, before it reaches the store; the node whose
/// release the write begins (a taint added, a Node deleted), if it does.
fn check_write(
    parts: &http::request::Parts,
    body: &[u8],
    store: &Store,
    side: &ApiSide,
    truth: &Truth,
) -> Option<String> {
    let path = parts.uri.path();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    // The leader election's own Lease writes and Events are not the cluster's state;
    // access reviews are questions.
    let ours = path.starts_with(&format!(
        "/apis/coordination.k8s.io/v1/namespaces/{}/leases",
        LEADER.0
    ));
    if ours
        || path.contains("/events")
        || path.contains("selfsubjectaccessreviews")
        || path.contains("/namespaces/nodefence/")
            && parts.method == http::Method::POST
            && path.ends_with("/namespaces")
    {
        return None;
    }
    truth.count(|c| c.writes_checked += 1);
    let holder = store
        .get(LEASES, Some(LEADER.0), LEADER.1)
        .ok()
        .and_then(|l| {
            l.pointer("/spec/holderIdentity")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
    if holder.as_deref() != Some(side.identity.as_str()) {
        truth.violation(format!(
            "invariant 3 (one writer): {} {path} from {} while the Lease is held by {holder:?}",
            parts.method, side.identity
        ));
    }
    if let ("PATCH" | "PUT", ["api", "v1", "nodes", name]) =
        (parts.method.as_str(), segments.as_slice())
        && let Some(why) = return_check_refusal(store, name, body)
    {
        truth.violation(format!("invariant 12 (the check on return): {name}: {why}"));
    }
    let released = match (parts.method.as_str(), segments.as_slice()) {
        ("PATCH" | "PUT", ["api", "v1", "nodes", name]) => {
            let adds = String::from_utf8_lossy(body).contains(OUT_OF_SERVICE)
                && !store.get(NODES, None, name).is_ok_and(|n| tainted(&n));
            adds.then(|| (name.to_string(), "out-of-service taint"))
        }
        ("DELETE", ["api", "v1", "nodes", name]) => Some((name.to_string(), "Node deletion")),
        ("DELETE", ["api", "v1", "namespaces", ns, "pods", pod]) => {
            // A delete whose uid precondition names another pod is refused (409):
            // it deletes nothing (seed 3815: a StatefulSet pod re-created under the
            // same name on another node).
            let current = store.get(PODS, Some(ns), pod).ok();
            let wanted = serde_json::from_slice::<Value>(body).ok().and_then(|b| {
                b.pointer("/preconditions/uid")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            });
            let same = match (&wanted, &current) {
                (Some(uid), Some(p)) => {
                    p.pointer("/metadata/uid").and_then(Value::as_str) == Some(uid)
                }
                _ => true,
            };
            if same {
                node_of(current.ok_or(())).map(|n| (n, "pod deletion"))
            } else {
                None
            }
        }
        ("DELETE", ["apis", "storage.k8s.io", "v1", "volumeattachments", va]) => {
            node_of(store.get(VOLUME_ATTACHMENTS, None, va))
                .map(|n| (n, "VolumeAttachment deletion"))
        }
        _ => None,
    };
    let (node, what) = released?;
    truth.count(|c| c.releases += 1);
    if matches!(what, "out-of-service taint" | "Node deletion") && fencing_marked(store, &node) {
        truth.count(|c| c.watchdog_releases += 1);
    }
    if let Some(why) = release_refusal(truth, &node) {
        truth.violation(format!(
            "invariant 1 (the one rule): {what} for {node}: {why}"
        ));
    }
    // A release begins with its taint or Node deletion; the pod and attachment
    // deletions that follow belong to it (seed 1503: a release begun before the
    // pause deleted its pods 3 s into it, through a slow API server).
    let begins = matches!(what, "out-of-service taint" | "Node deletion");
    // The switch is read right before a release begins; through a slow API server
    // that read and the write each take the delay (seed 4623).
    let latency = match *side.mode.borrow() {
        ApiMode::Slow(d) => d * 3,
        _ => Duration::ZERO,
    };
    if let Some(why) = truth.pause_refusal_after(latency).filter(|_| begins) {
        truth.violation(format!(
            "invariant 2 (no release begun while paused): {what} for {node}: {why}"
        ));
    }
    begins.then_some(node)
}

/// Why a write to Node `name` breaks the check on return, if it does: it removes
/// nodefence's taint while the Node reports the boot the release ended (no operator
/// checked it), or records a contradiction while it reports another boot (the
/// machine did go down). The Node as stored is the kubelet's last post: a boot it
/// has not posted yet is not taken for one.
fn return_check_refusal(store: &Store, name: &str, body: &[u8]) -> Option<String> {
    use nodefence::cluster::facts::{
        PROOF_CHECKED_ANNOTATION, PROOF_CONTRADICTED_ANNOTATION, RELEASED_BOOT_ANNOTATION,
        TAINTED_ANNOTATION,
    };
    let patch: Value = serde_json::from_slice(body).ok()?;
    let written = patch.pointer("/metadata/annotations")?;
    let node = store.get(NODES, None, name).ok()?;
    let annotation = |key: &str| {
        node.pointer("/metadata/annotations")
            .and_then(|a| a.get(key))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let ended = annotation(RELEASED_BOOT_ANNOTATION)
        .and_then(|v| nodefence::engine::returned::EndedBoot::parse(&v))
        .and_then(|e| e.boot)?;
    let now_boot = node
        .pointer("/status/nodeInfo/bootID")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let same = now_boot.eq_ignore_ascii_case(&ended);
    let removes_taint = annotation(TAINTED_ANNOTATION).is_some()
        && written.get(TAINTED_ANNOTATION).is_some_and(Value::is_null);
    if removes_taint && same && annotation(PROOF_CHECKED_ANNOTATION).is_none() {
        return Some(format!(
            "the taint removed while the Node reports boot {ended}, the boot its release ended"
        ));
    }
    let contradicts = written
        .get(PROOF_CONTRADICTED_ANNOTATION)
        .is_some_and(Value::is_string);
    if contradicts && !same {
        return Some(format!(
            "reported contradicted while the Node reports boot {now_boot}, not {ended}, the boot its release ended: the machine did go down"
        ));
    }
    None
}

/// The node a pod or VolumeAttachment names (`spec.nodeName`).
fn node_of<E>(object: Result<Value, E>) -> Option<String> {
    object
        .ok()?
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

pub fn tainted(node: &Value) -> bool {
    node.pointer("/spec/taints")
        .and_then(Value::as_array)
        .is_some_and(|ts| ts.iter().any(|t| t["key"] == OUT_OF_SERVICE))
}

/// The Node carries nodefence's fencing mark (the watchdog level fenced it).
fn fencing_marked(store: &Store, node: &str) -> bool {
    store.get(NODES, None, node).is_ok_and(|n| {
        n.pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .is_some_and(|a| a.contains_key(nodefence::watchdog::mark::FENCING_MARK_ANNOTATION))
    })
}

/// Why releasing `node` now would break the one rule, judged from the truth. A node
/// the watchdog level marked (companion seeds) may rest on its watchdog instead of
/// an Off reading: then its machine must have been off, or reset by its watchdog,
/// since its failure (the incarnation that failed is dead either way).
pub fn release_refusal(truth: &Truth, node: &str) -> Option<String> {
    let store = lock(&truth.store).clone();
    let marked = store.is_some_and(|s| fencing_marked(&s, node));
    truth.with(|ms| {
        let Some(m) = ms.iter().find(|m| m.node == node) else {
            return Some("no such machine".into());
        };
        // What the rule protects is the incarnation that failed: it is dead once the
        // machine has been off since the failure, whatever it does afterwards (a
        // machine switched on again boots anew; the taint keeps pods off it, and its
        // kubelet's first renewal makes the releaser refuse).
        if !m.off_after_failure {
            return Some(format!(
                "its machine has not been off since it failed (it is {:?})",
                m.state()
            ));
        }
        let Some(failed) = m.failed_at else {
            return Some("its machine never failed".into());
        };
        if marked {
            // Off since the failure (above): lost power, switched off, or reset by
            // its watchdog (`watchdog_reset_at`), and not running pods since.
            return None;
        }
        match m.last_off_reading {
            Some(r) if r > failed => None,
            other => Some(format!(
                "no Off reading of its own machine newer than its failure at {failed:?} (newest: {other:?})"
            )),
        }
    })
}
