//! Watches: `?watch=true` streams of `{"type": ..., "object": ...}` lines.
//!
//! nodefence learns that a node died, that its pods are stuck `Terminating` and
//! that its VolumeAttachments are gone through kube-rs watchers, so the stream
//! must behave like the real watch cache in the cases watchers depend on:
//!
//! - `resourceVersion` unset or `"0"`: synthetic `ADDED` for every current object,
//!   then live events (`sendInitialEvents=false` with no version: live only).
//! - `resourceVersion=N`: every later write from the store's history, then live;
//!   a version older than the history gives one `ERROR` event carrying a 410
//!   `Expired` Status and the end of the stream (what makes kube-rs re-list).
//! - `sendInitialEvents=true` (streaming lists; needs `allowWatchBookmarks=true`
//!   and `resourceVersionMatch=NotOlderThan`): `ADDED` for all, then a `BOOKMARK`
//!   annotated `k8s.io/initial-events-end: "true"`.
//! - Selectors: an object that stops matching is sent as `DELETED` (its last
//!   matching state, at the new version), one that starts matching as `ADDED`.
//! - `allowWatchBookmarks=true`: a `BOOKMARK` every bookmark interval, carrying a
//!   version up to which every event has been delivered.
//! - The stream ends on `timeoutSeconds` (default and 0: 30 min), when the client goes
//!   away, when the server shuts down, or when this watcher falls so far behind
//!   that the broadcast dropped events for it (clients then resume or re-list).
//!   A watch of a custom resource also ends when its CRD is deleted (after the
//!   `DELETED` events of its objects), as the real server closes it.
//! - Objects of a custom resource written through another of its versions are sent
//!   with the `apiVersion` watched.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, watch};

use super::crd::CustomVersion;
use super::negotiate::Representation;
use super::query::{Query, object_key};
use super::resources::{CUSTOM_RESOURCE_DEFINITIONS, ResourceType};
use super::store::{EventType, Store, StoreError, StoreEvent};
use super::table;

/// A watch with no `timeoutSeconds` ends after this long (the real server picks
/// 30 to 60 minutes).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

/// What the server shares with every watch.
#[derive(Clone)]
pub struct WatchContext {
    pub store: Store,
    /// Becomes `true` when the server shuts down.
    pub shutdown: watch::Receiver<bool>,
    pub bookmark_interval: Duration,
}

/// One watch request, parsed.
pub struct WatchRequest {
    pub rt: ResourceType,
    pub namespace: Option<String>,
    /// Set for a watch on a single object's path.
    pub name: Option<String>,
    pub query: Query,
    pub representation: Representation,
    /// The CRD version serving `rt`, for a custom resource.
    pub custom: Option<Arc<CustomVersion>>,
}

/// Validates the request and starts streaming; errors here are answered as a
/// plain `Status` response (the stream has not begun).
pub fn start(ctx: &WatchContext, req: WatchRequest) -> Result<Body, StoreError> {
    let q = &req.query;
    if q.send_initial_events == Some(true) {
        if q.resource_version_match.as_deref() != Some("NotOlderThan") {
            return Err(StoreError::Invalid(
                "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan".into(),
            ));
        }
        if !q.allow_watch_bookmarks {
            return Err(StoreError::Invalid(
                "ListOptions.meta.k8s.io \"\" is invalid: allowWatchBookmarks: Required value: allowWatchBookmarks must be set to true when sendInitialEvents is set".into(),
            ));
        }
    }
    let resume_from = q.resource_version_number()?;
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let mut w = Watcher {
        ctx: ctx.clone(),
        known: HashMap::new(),
        first_sent: false,
        last_rv: 0,
        req,
        tx,
    };
    let ns = w.req.namespace.clone();
    let opening = match resume_from {
        Some(rv) => match ctx
            .store
            .subscribe_from_with_state(w.req.rt, ns.as_deref(), rv)
        {
            Ok((state, backlog, events)) => {
                w.last_rv = rv;
                for o in state {
                    if !w.matches(&o) {
                        continue;
                    }
                    w.known.insert(object_key(&o), o);
                }
                Opening::Resume { backlog, events }
            }
            Err(e @ StoreError::Gone { .. }) => Opening::Expired(e),
            Err(e) => return Err(e),
        },
        None => {
            let (items, rv, events) = ctx.store.list_and_subscribe(w.req.rt, ns.as_deref());
            w.last_rv = rv;
            Opening::Fresh { items, rv, events }
        }
    };
    tokio::spawn(w.run(opening));
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|chunk| (Ok::<Bytes, Infallible>(chunk), rx))
    });
    Ok(Body::from_stream(stream))
}

/// How a watch begins.
enum Opening {
    Fresh {
        items: Vec<Value>,
        rv: u64,
        events: broadcast::Receiver<StoreEvent>,
    },
    Resume {
        backlog: Vec<StoreEvent>,
        events: broadcast::Receiver<StoreEvent>,
    },
    Expired(StoreError),
}

struct Watcher {
    ctx: WatchContext,
    req: WatchRequest,
    /// Objects the client currently believes match, by key, as last sent.
    known: HashMap<String, Value>,
    /// Whether a Table with column definitions has been sent.
    first_sent: bool,
    /// Every write up to this version has been looked at.
    last_rv: u64,
    tx: mpsc::Sender<Bytes>,
}

/// The watcher stops (client gone, timeout, shutdown, lag).
struct Stop;

impl Watcher {
    fn matches(&self, o: &Value) -> bool {
        let q = &self.req.query;
        self.req
            .name
            .as_deref()
            .is_none_or(|n| o.pointer("/metadata/name").and_then(Value::as_str) == Some(n))
            && q.label_selector.matches(o)
            && q.field_selector.matches(self.req.rt, o)
    }

    fn in_scope(&self, e: &StoreEvent) -> bool {
        e.resource.same_storage(&self.req.rt)
            && self
                .req
                .namespace
                .as_deref()
                .is_none_or(|ns| e.namespace() == Some(ns))
    }

    async fn run(mut self, opening: Opening) {
        let timeout = self
            .req
            .query
            .timeout_seconds
            .filter(|s| *s > 0)
            .map_or(DEFAULT_TIMEOUT, Duration::from_secs);
        let deadline = tokio::time::Instant::now() + timeout;
        let _ = tokio::time::timeout_at(deadline, self.stream(opening)).await;
    }

    async fn stream(&mut self, opening: Opening) -> Result<(), Stop> {
        let mut events = match opening {
            Opening::Expired(e) => {
                return self.send("ERROR", e.to_status()).await;
            }
            Opening::Fresh { items, rv, events } => {
                let initial = self.req.query.send_initial_events.unwrap_or(true);
                for o in items {
                    if !self.matches(&o) {
                        continue;
                    }
                    self.known.insert(object_key(&o), o.clone());
                    if initial {
                        self.send_object("ADDED", &o).await?;
                    }
                }
                if self.req.query.send_initial_events == Some(true) {
                    self.send_bookmark(rv, true).await?;
                }
                events
            }
            Opening::Resume { backlog, events } => {
                for e in &backlog {
                    self.handle(e).await?;
                }
                events
            }
        };
        let mut shutdown = self.ctx.shutdown.clone();
        let mut ticker = tokio::time::interval(self.ctx.bookmark_interval);
        ticker.tick().await;
        loop {
            if *shutdown.borrow() {
                return Err(Stop);
            }
            tokio::select! {
                _ = shutdown.changed() => return Err(Stop),
                _ = self.tx.closed() => return Err(Stop),
                _ = ticker.tick(), if self.req.query.allow_watch_bookmarks => {
                    let now = self.ctx.store.resource_version();
                    if events.is_empty() {
                        self.last_rv = self.last_rv.max(now);
                    }
                    self.send_bookmark(self.last_rv, false).await?;
                }
                received = events.recv() => match received {
                    Ok(e) => self.handle(&e).await?,
                    // Lagged: events were lost for this watcher; ending the stream
                    // makes the client resume from its last version (or re-list).
                    Err(_) => return Err(Stop),
                },
            }
        }
    }

    /// Turns one store write into what this client should see, if anything.
    async fn handle(&mut self, e: &StoreEvent) -> Result<(), Stop> {
        self.last_rv = self.last_rv.max(e.resource_version);
        if let Some(cv) = &self.req.custom
            && e.event == EventType::Deleted
            && e.resource == CUSTOM_RESOURCE_DEFINITIONS
            && e.object.pointer("/metadata/name").and_then(Value::as_str) == Some(&cv.crd_name)
        {
            return Err(Stop);
        }
        if !self.in_scope(e) {
            return Ok(());
        }
        let key = object_key(&e.object);
        let was_known = self.known.contains_key(&key);
        match e.event {
            EventType::Deleted => {
                if self.known.remove(&key).is_some() {
                    self.send_object("DELETED", &e.object).await?;
                }
            }
            EventType::Added | EventType::Modified => {
                if self.matches(&e.object) {
                    self.known.insert(key, e.object.clone());
                    let kind = if was_known { "MODIFIED" } else { "ADDED" };
                    self.send_object(kind, &e.object).await?;
                } else if let Some(mut last) = self.known.remove(&key) {
                    // Stopped matching: the client sees it go, at this version.
                    if let Some(meta) = last.get_mut("metadata").and_then(Value::as_object_mut) {
                        meta.insert(
                            "resourceVersion".into(),
                            json!(e.resource_version.to_string()),
                        );
                    }
                    self.send_object("DELETED", &last).await?;
                }
            }
        }
        Ok(())
    }

    async fn send_object(&mut self, kind: &str, o: &Value) -> Result<(), Stop> {
        let object = match self.req.representation {
            Representation::Table(version) => {
                let headers = !self.first_sent;
                self.first_sent = true;
                table::table(
                    self.req.rt,
                    self.req.custom.as_deref(),
                    version,
                    std::slice::from_ref(o),
                    json!({"resourceVersion": o.pointer("/metadata/resourceVersion")}),
                    self.req.query.include_object.as_deref(),
                    headers,
                )
            }
            Representation::Metadata => table::partial_metadata(o),
            _ => {
                let mut o = o.clone();
                self.req.rt.convert(&mut o);
                o
            }
        };
        self.send(kind, object).await
    }

    async fn send_bookmark(&mut self, rv: u64, initial_end: bool) -> Result<(), Stop> {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let (kind, api_version) = match self.req.representation {
            Representation::Metadata => (
                "PartialObjectMetadata".to_owned(),
                "meta.k8s.io/v1".to_owned(),
            ),
            _ => (self.req.rt.kind.to_owned(), self.req.rt.api_version()),
        };
        self.send(
            "BOOKMARK",
            json!({"kind": kind, "apiVersion": api_version, "metadata": meta}),
        )
        .await
    }

    async fn send(&mut self, kind: &str, object: Value) -> Result<(), Stop> {
        let mut line = json!({"type": kind, "object": object}).to_string();
        line.push('\n');
        self.tx.send(Bytes::from(line)).await.map_err(|_| Stop)
    }
}
