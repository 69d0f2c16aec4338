//! Watches: kube-rs watchers (list+watch and streaming lists) seeing every change
//! and recovering from a 410, and the raw stream's semantics (resume, selectors
//! turning into ADDED/DELETED, bookmarks, timeouts, shutdown).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::kube_common;

use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube_common::{Lines, client, node, open_watch, pod, start};
use nodefence_mocks::kube::FakeKube;
use nodefence_mocks::kube::resources::NODES;
use nodefence_mocks::kube::store::Store;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::timeout;

/// What a watcher reported, simplified.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Init,
    InitApply(String),
    InitDone,
    Apply(String, Option<String>),
    Delete(String),
    Error(u16),
}

/// Runs a watcher in the background, forwarding what it reports.
fn spawn_watcher(api: Api<Node>, config: watcher::Config) -> mpsc::UnboundedReceiver<Seen> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut stream = watcher::watcher(api, config).boxed();
        while let Some(item) = stream.next().await {
            let seen = match item {
                Ok(Event::Init) => Seen::Init,
                Ok(Event::InitApply(n)) => Seen::InitApply(n.name_any()),
                Ok(Event::InitDone) => Seen::InitDone,
                Ok(Event::Apply(n)) => {
                    let label = n.labels().get("step").cloned();
                    Seen::Apply(n.name_any(), label)
                }
                Ok(Event::Delete(n)) => Seen::Delete(n.name_any()),
                Err(watcher::Error::WatchError(s)) => Seen::Error(s.code),
                Err(_) => Seen::Error(0),
            };
            if tx.send(seen).is_err() {
                return;
            }
        }
    });
    rx
}

/// Waits (bounded) until the watcher reports `want`, returning what came before.
async fn expect(rx: &mut mpsc::UnboundedReceiver<Seen>, want: Seen) -> Vec<Seen> {
    let mut before = Vec::new();
    loop {
        let got = timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("waiting for {want:?}; saw {before:?}"))
            .expect("watcher running");
        if got == want {
            return before;
        }
        before.push(got);
    }
}

async fn watcher_sees_every_change(config: watcher::Config) {
    let kube = start(true).await;
    let nodes: Api<Node> = Api::all(client(&kube).await);
    nodes
        .create(&PostParams::default(), &node("early", json!({})))
        .await
        .unwrap();
    let mut rx = spawn_watcher(nodes.clone(), config);
    expect(&mut rx, Seen::Init).await;
    expect(&mut rx, Seen::InitApply("early".into())).await;
    expect(&mut rx, Seen::InitDone).await;
    nodes
        .create(
            &PostParams::default(),
            &node("worker-1", json!({"step": "1"})),
        )
        .await
        .unwrap();
    expect(&mut rx, Seen::Apply("worker-1".into(), Some("1".into()))).await;
    nodes
        .patch(
            "worker-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"step": "2"}}})),
        )
        .await
        .unwrap();
    expect(&mut rx, Seen::Apply("worker-1".into(), Some("2".into()))).await;
    nodes
        .delete("worker-1", &DeleteParams::default())
        .await
        .unwrap();
    expect(&mut rx, Seen::Delete("worker-1".into())).await;
}

#[tokio::test]
async fn list_watch_watcher_sees_added_modified_deleted() {
    watcher_sees_every_change(watcher::Config::default()).await;
}

#[tokio::test]
async fn streaming_list_watcher_sees_added_modified_deleted() {
    watcher_sees_every_change(watcher::Config::default().streaming_lists()).await;
}

#[tokio::test]
async fn watcher_relists_after_410() {
    kube_common::provider();
    let kube = FakeKube::builder()
        .store(Store::new(5))
        .start()
        .await
        .unwrap();
    let c = client(&kube).await;
    let nodes: Api<Node> = Api::all(c.clone());
    nodes
        .create(&PostParams::default(), &node("early", json!({})))
        .await
        .unwrap();
    // Each watch lasts a second, then the watcher resumes from its last version.
    let mut rx = spawn_watcher(nodes.clone(), watcher::Config::default().timeout(1));
    expect(&mut rx, Seen::InitDone).await;
    // Writes to another type push the watcher's version out of the history.
    let leases: Api<Lease> = Api::namespaced(c, "default");
    for i in 0..10 {
        let l: Lease =
            serde_json::from_value(json!({"metadata": {"name": format!("l{i}")}})).unwrap();
        leases.create(&PostParams::default(), &l).await.unwrap();
    }
    expect(&mut rx, Seen::Error(410)).await;
    // ... and it re-lists from scratch.
    expect(&mut rx, Seen::InitApply("early".into())).await;
    expect(&mut rx, Seen::InitDone).await;
    nodes
        .create(&PostParams::default(), &node("late", json!({})))
        .await
        .unwrap();
    expect(&mut rx, Seen::Apply("late".into(), None)).await;
}

#[tokio::test]
async fn raw_resume_from_history_and_expired_versions() {
    kube_common::provider();
    let store = Store::new(3);
    let kube = FakeKube::builder()
        .store(store.clone())
        .start()
        .await
        .unwrap();
    let at = store.resource_version();
    for n in ["a", "b"] {
        store
            .create(NODES, None, json!({"metadata": {"name": n}}))
            .unwrap();
    }
    let mut w = Lines::new(
        open_watch(
            &kube,
            &format!("/api/v1/nodes?watch=true&resourceVersion={at}"),
        )
        .await,
    );
    assert_eq!(w.next_pair().await, Some(("ADDED".into(), "a".into())));
    assert_eq!(w.next_pair().await, Some(("ADDED".into(), "b".into())));
    for n in ["c", "d", "e"] {
        store
            .create(NODES, None, json!({"metadata": {"name": n}}))
            .unwrap();
    }
    assert_eq!(w.next_pair().await, Some(("ADDED".into(), "c".into())));
    let mut old = Lines::new(
        open_watch(
            &kube,
            &format!("/api/v1/nodes?watch=1&resourceVersion={at}"),
        )
        .await,
    );
    let e = old.next_event().await.unwrap();
    assert_eq!(e["type"], "ERROR");
    assert_eq!(
        (e["object"]["code"].as_u64(), e["object"]["reason"].as_str()),
        (Some(410), Some("Expired"))
    );
    assert!(
        old.next_event().await.is_none(),
        "the stream ends after the error"
    );
}

#[tokio::test]
async fn selector_transitions_become_added_and_deleted() {
    let kube = start(false).await;
    let pods: Api<Pod> = Api::namespaced(client(&kube).await, "default");
    pods.create(
        &PostParams::default(),
        &pod("web-0", Some("w1"), json!({"app": "web"})),
    )
    .await
    .unwrap();
    pods.create(
        &PostParams::default(),
        &pod("db-0", Some("w1"), json!({"app": "db"})),
    )
    .await
    .unwrap();
    let start_rv = kube.store().resource_version();
    let mut w = Lines::new(
        open_watch(
            &kube,
            "/api/v1/namespaces/default/pods?watch=true&labelSelector=app%3Dweb",
        )
        .await,
    );
    assert_eq!(w.next_pair().await, Some(("ADDED".into(), "web-0".into())));
    let relabel = |app: &str| Patch::Merge(json!({"metadata": {"labels": {"app": app}}}));
    let pp = PatchParams::default();
    pods.patch("web-0", &pp, &relabel("gone")).await.unwrap();
    let e = w.next_event().await.unwrap();
    assert_eq!(e["type"], "DELETED");
    assert_eq!(
        e["object"]["metadata"]["labels"]["app"], "web",
        "last matching state"
    );
    pods.patch("db-0", &pp, &relabel("web")).await.unwrap();
    assert_eq!(w.next_pair().await, Some(("ADDED".into(), "db-0".into())));
    pods.patch("db-0", &pp, &relabel("web")).await.unwrap();
    pods.delete("db-0", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    assert_eq!(w.next_pair().await, Some(("DELETED".into(), "db-0".into())));

    // Resuming from before the changes rebuilds what matched back then.
    let mut again = Lines::new(open_watch(&kube, &format!(
        "/api/v1/namespaces/default/pods?watch=true&labelSelector=app%3Dweb&resourceVersion={start_rv}"
    )).await);
    assert_eq!(
        again.next_pair().await,
        Some(("DELETED".into(), "web-0".into()))
    );
    assert_eq!(
        again.next_pair().await,
        Some(("ADDED".into(), "db-0".into()))
    );
    assert_eq!(
        again.next_pair().await,
        Some(("DELETED".into(), "db-0".into()))
    );
}

#[tokio::test]
async fn initial_events_end_bookmark_and_periodic_bookmarks() {
    kube_common::provider();
    let kube = FakeKube::builder()
        .bookmark_interval(Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    kube.store()
        .create(NODES, None, json!({"metadata": {"name": "a"}}))
        .unwrap();
    let mut w = Lines::new(open_watch(&kube, "/api/v1/nodes?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&resourceVersion=").await);
    assert_eq!(w.next_pair().await, Some(("ADDED".into(), "a".into())));
    let end = w.next_event().await.unwrap();
    assert_eq!(end["type"], "BOOKMARK");
    assert_eq!(end["object"]["kind"], "Node");
    assert_eq!(
        end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    kube.store()
        .create(NODES, None, json!({"metadata": {"name": "b"}}))
        .unwrap();
    assert_eq!(w.next_pair().await, Some(("ADDED".into(), "b".into())));
    let rv_b = kube.store().resource_version();
    let bm = w.next_event().await.unwrap();
    assert_eq!(bm["type"], "BOOKMARK");
    let bm_rv: u64 = bm["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(bm_rv >= rv_b);
    // sendInitialEvents without NotOlderThan is refused before streaming.
    let (code, body) = kube_common::get_json(
        &kube,
        "/api/v1/nodes?watch=true&sendInitialEvents=true&allowWatchBookmarks=true",
        None,
    )
    .await;
    assert_eq!((code, body["reason"].as_str()), (422, Some("Invalid")));
}

#[tokio::test]
async fn watches_end_on_timeout_and_on_shutdown() {
    let kube = start(true).await;
    let mut short =
        Lines::new(open_watch(&kube, "/api/v1/nodes?watch=true&timeoutSeconds=1").await);
    assert!(
        short.next_event().await.is_none(),
        "no nodes, then the end after 1 s"
    );
    let mut long = Lines::new(open_watch(&kube, "/api/v1/namespaces?watch=true").await);
    for _ in 0..4 {
        assert_eq!(
            long.next_pair().await.map(|p| p.0).as_deref(),
            Some("ADDED")
        );
    }
    timeout(Duration::from_secs(5), kube.shutdown())
        .await
        .expect("shutdown is prompt");
    let ended = timeout(Duration::from_secs(5), async {
        loop {
            match long.resp.chunk().await {
                Ok(Some(_)) => continue,
                _ => return,
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the watch ended with the server");
}

#[tokio::test]
async fn a_watcher_that_falls_behind_is_ended_not_panicked() {
    let kube = start(false).await;
    let store = kube.store();
    // Opened, then not read while far more writes happen than the broadcast keeps.
    let mut w = Lines::new(open_watch(&kube, "/api/v1/nodes?watch=true").await);
    let total = 10_000;
    for i in 0..total {
        store
            .create(NODES, None, json!({"metadata": {"name": format!("n{i}")}}))
            .unwrap();
    }
    let mut seen = 0;
    while let Some(e) = w.next_event().await {
        assert_eq!(e["type"], "ADDED");
        seen += 1;
        if seen == total {
            break;
        }
    }
    assert!(
        seen < total,
        "the stream ended early instead of delivering everything"
    );
    // The server is fine, and a new watch (the client's resume) works.
    let (code, _) = kube_common::get_json(&kube, "/api/v1/nodes?limit=1", None).await;
    assert_eq!(code, 200);
    let mut again =
        Lines::new(open_watch(&kube, "/api/v1/nodes?watch=true&resourceVersion=0").await);
    assert_eq!(
        again.next_pair().await.map(|p| p.0).as_deref(),
        Some("ADDED")
    );
}
