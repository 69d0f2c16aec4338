//! The controller-runtime plumbing both stand-ins run on: informers that turn a
//! kube-rs watch into create/update/delete notifications (as client-go's shared
//! informers hand them to event handlers), a work queue with `AddAfter` and the
//! per-item exponential failure backoff (client-go's `workqueue`, controller-runtime's
//! default rate limiter: 5 ms doubling up to 1000 s), and a discovery cache mapping
//! kinds named in specs (`apiVersion` + `kind`) to API resources.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt::Debug;
use std::hash::Hash;
use std::time::Duration;

use futures::StreamExt as _;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::common::split_api_version;

/// controller-runtime's default per-item backoff after a failed reconcile.
const BACKOFF_BASE: Duration = Duration::from_millis(5);
const BACKOFF_MAX: Duration = Duration::from_secs(1000);

/// What an informer saw happen to one object.
#[derive(Debug, Clone)]
pub(crate) enum Change<K> {
    Added(K),
    Updated { old: K, new: K },
    Deleted(K),
}

/// Watches `api` until the task is aborted, sending each change through `wrap`.
/// Relists after a broken watch are diffed against what was seen before, so a
/// restart yields updates and deletes, not a burst of adds; an update that does not
/// change the `resourceVersion` is dropped.
pub(crate) fn spawn_informer<K, T, F>(
    tasks: &mut JoinSet<()>,
    api: Api<K>,
    what: String,
    tx: UnboundedSender<T>,
    wrap: F,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    T: Send + 'static,
    F: Fn(Change<K>) -> T + Send + 'static,
{
    spawn_informer_with(tasks, api, watcher::Config::default(), what, tx, wrap);
}

/// [`spawn_informer`] with a watcher configuration (a label selector: the objects a
/// controller's cache is restricted to).
pub(crate) fn spawn_informer_with<K, T, F>(
    tasks: &mut JoinSet<()>,
    api: Api<K>,
    config: watcher::Config,
    what: String,
    tx: UnboundedSender<T>,
    wrap: F,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    T: Send + 'static,
    F: Fn(Change<K>) -> T + Send + 'static,
{
    tasks.spawn(async move {
        let mut known: BTreeMap<(String, String), K> = BTreeMap::new();
        let mut relisted: HashSet<(String, String)> = HashSet::new();
        let mut stream = std::pin::pin!(watcher::watcher(api, config).default_backoff());
        let key = |o: &K| (o.namespace().unwrap_or_default(), o.name_any());
        let apply = |o: K, known: &mut BTreeMap<(String, String), K>| -> Option<Change<K>> {
            match known.insert(key(&o), o.clone()) {
                None => Some(Change::Added(o)),
                Some(old) if old.resource_version() == o.resource_version() => None,
                Some(old) => Some(Change::Updated { old, new: o }),
            }
        };
        while let Some(event) = stream.next().await {
            let changes: Vec<Change<K>> = match event {
                Err(e) => {
                    tracing::debug!(%what, error = %e, "watch failed; retrying with backoff");
                    continue;
                }
                Ok(Event::Init) => {
                    relisted.clear();
                    continue;
                }
                Ok(Event::InitApply(o)) => {
                    relisted.insert(key(&o));
                    apply(o, &mut known).into_iter().collect()
                }
                Ok(Event::InitDone) => {
                    let gone: Vec<_> = known
                        .keys()
                        .filter(|k| !relisted.contains(*k))
                        .cloned()
                        .collect();
                    gone.into_iter()
                        .filter_map(|k| known.remove(&k))
                        .map(Change::Deleted)
                        .collect()
                }
                Ok(Event::Apply(o)) => apply(o, &mut known).into_iter().collect(),
                Ok(Event::Delete(o)) => {
                    known.remove(&key(&o));
                    vec![Change::Deleted(o)]
                }
            };
            for c in changes {
                if tx.send(wrap(c)).is_err() {
                    return;
                }
            }
        }
    });
}

/// Reconcile requests: due now, due later (`AddAfter`, the earliest time wins), and
/// the failure count of each for the exponential backoff.
#[derive(Debug)]
pub(crate) struct WorkQueue<K> {
    ready: VecDeque<K>,
    queued: HashSet<K>,
    later: HashMap<K, Instant>,
    failures: HashMap<K, u32>,
}

impl<K: Clone + Eq + Hash> WorkQueue<K> {
    pub(crate) fn new() -> Self {
        Self {
            ready: VecDeque::new(),
            queued: HashSet::new(),
            later: HashMap::new(),
            failures: HashMap::new(),
        }
    }

    /// Queues `k` now (once, however often it is added before it is processed).
    pub(crate) fn add(&mut self, k: K) {
        if self.queued.insert(k.clone()) {
            self.ready.push_back(k);
        }
    }

    /// Queues `k` after `d`; an earlier pending time for `k` wins.
    pub(crate) fn add_after(&mut self, k: K, d: Duration) {
        if d.is_zero() {
            self.add(k);
            return;
        }
        let at = Instant::now() + d;
        self.later
            .entry(k)
            .and_modify(|t| *t = (*t).min(at))
            .or_insert(at);
    }

    /// The backoff for one more failure of `k` (the failure is counted).
    pub(crate) fn next_backoff(&mut self, k: &K) -> Duration {
        let n = self.failures.entry(k.clone()).or_insert(0);
        let delay = BACKOFF_BASE
            .checked_mul(2u32.saturating_pow(*n))
            .unwrap_or(BACKOFF_MAX)
            .min(BACKOFF_MAX);
        *n = n.saturating_add(1);
        delay
    }

    /// Forgets the failures of `k` (after a successful reconcile).
    pub(crate) fn forget(&mut self, k: &K) {
        self.failures.remove(k);
    }

    /// The next request due now, if any.
    pub(crate) fn pop(&mut self) -> Option<K> {
        let now = Instant::now();
        let due: Vec<K> = self
            .later
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for k in due {
            self.later.remove(&k);
            self.add(k);
        }
        let k = self.ready.pop_front()?;
        self.queued.remove(&k);
        Some(k)
    }

    /// When the earliest delayed request is due.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.later.values().min().copied()
    }
}

/// A kind named by `apiVersion` and `kind` in a spec, resolved through discovery.
#[derive(Debug, Clone)]
pub(crate) struct Kind {
    pub(crate) resource: ApiResource,
    pub(crate) namespaced: bool,
}

impl Kind {
    /// An API for objects of this kind: in `namespace`, or across all namespaces
    /// (and for cluster-scoped kinds) when `None`.
    pub(crate) fn api(&self, client: &kube::Client, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) if self.namespaced => Api::namespaced_with(client.clone(), ns, &self.resource),
            _ => Api::all_with(client.clone(), &self.resource),
        }
    }
}

/// Discovery results by `apiVersion` and kind; failures are not cached (the CRD may
/// be created later).
#[derive(Debug, Default)]
pub(crate) struct Kinds {
    known: HashMap<(String, String), Kind>,
}

/// A kind the API server does not serve (controller-runtime's `NoKindMatchError`).
#[derive(Debug, thiserror::Error)]
#[error("no matches for kind {kind:?} in version {api_version:?}: {source}")]
pub(crate) struct NoKindMatch {
    pub(crate) api_version: String,
    pub(crate) kind: String,
    #[source]
    pub(crate) source: kube::Error,
}

impl Kinds {
    pub(crate) async fn resolve(
        &mut self,
        client: &kube::Client,
        api_version: &str,
        kind: &str,
    ) -> Result<Kind, NoKindMatch> {
        let key = (api_version.to_owned(), kind.to_owned());
        if let Some(k) = self.known.get(&key) {
            return Ok(k.clone());
        }
        let (group, version) = split_api_version(api_version);
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (resource, caps) =
            kube::discovery::pinned_kind(client, &gvk)
                .await
                .map_err(|source| NoKindMatch {
                    api_version: api_version.to_owned(),
                    kind: kind.to_owned(),
                    source,
                })?;
        let k = Kind {
            resource,
            namespaced: caps.scope == Scope::Namespaced,
        };
        self.known.insert(key, k.clone());
        Ok(k)
    }
}

/// Whether a kube-rs error is the API server's 404.
pub(crate) fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Aborts the controller task when dropped.
#[derive(Debug)]
pub(crate) struct TaskGuard(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Sleeps until `at`, or forever when there is nothing to wait for.
pub(crate) async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_dedups_keeps_the_earliest_delay_and_backs_off() {
        let mut q = WorkQueue::new();
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!((q.pop(), q.pop(), q.pop()), (Some("a"), Some("b"), None));
        let before = Instant::now();
        q.add_after("c", Duration::from_secs(10));
        q.add_after("c", Duration::from_secs(5));
        q.add_after("c", Duration::from_secs(20));
        assert_eq!(q.pop(), None);
        let due = q.next_due().unwrap_or(before);
        assert!(due >= before + Duration::from_secs(5) && due < before + Duration::from_secs(10));
        q.add_after("c", Duration::from_millis(1));
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!((q.pop(), q.next_due()), (Some("c"), None));
        let delays: Vec<Duration> = (0..4).map(|_| q.next_backoff(&"d")).collect();
        assert_eq!(delays, [5, 10, 20, 40].map(Duration::from_millis).to_vec());
        q.forget(&"d");
        assert_eq!(q.next_backoff(&"d"), Duration::from_millis(5));
        for _ in 0..40 {
            q.next_backoff(&"e");
        }
        assert_eq!(q.next_backoff(&"e"), BACKOFF_MAX);
    }
}
