//! Remediation requests in the control loop: which requests stand for which node
//! (what the engine's facts carry), the Machines of Cluster API requests, and the
//! status and finalizer each request should have, written when they differ from what
//! the object says.
//!
//! Everything here is bookkeeping around [`crate::remediation`]: the decisions stay
//! the engine's, and nothing here can release anything.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kube::runtime::watcher::Event as WatchEvent;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::engine::{Engine, Request};
use crate::remediation::NodeFenceRemediation;
use crate::remediation::report::{Wanted, conditions_to_write, wanted_status};
use crate::remediation::request::{KeptRequest, RequestTarget, merged};
use crate::remediation::writer::{RequestWriter, WriteError};

/// A write or read that failed is not tried again before this.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// The answer of a task started here.
#[derive(Debug)]
pub enum RequestCompletion {
    Status {
        key: String,
        result: Result<(), String>,
    },
    Finalizer {
        key: String,
        result: Result<(), String>,
        /// The request changed after the version the change was decided on (409):
        /// decided again on that change's watch event, without waiting.
        conflict: bool,
    },
    Machine {
        machine: String,
        result: Result<Option<String>, String>,
    },
}

/// What is known of a Cluster API Machine's node.
#[derive(Debug, Clone)]
enum MachineNode {
    Reading,
    Node(String),
    /// No `status.nodeRef` yet, or the read failed: read again at `retry_at`.
    Unknown {
        why: String,
        retry_at: Instant,
    },
}

#[derive(Debug, Default)]
struct Writes {
    status_in_flight: bool,
    /// The status last written (or being written), until the object changes.
    status_sent: Option<Wanted>,
    finalizer_in_flight: bool,
    /// The request's version the last finalizer change was decided on.
    finalizer_decided_on: Option<String>,
    /// That change failed with 409: the request is newer than that version, and the
    /// change is decided again once its watch brings the newer one, or, if none comes
    /// (a 409 for a version that did not change, a watch that lags), at this time on
    /// the version kept (seed 205726: a request deleted under injected 409s kept its
    /// finalizer for good).
    finalizer_conflict: Option<Instant>,
    retry_at: Option<Instant>,
}

/// How the bookkeeping starts its reads and writes: on the term's task tracker,
/// answering on the loop's channel.
pub struct Spawner<'a> {
    pub spawn: &'a dyn Fn(futures::future::BoxFuture<'static, ()>),
    pub tx: &'a mpsc::UnboundedSender<RequestCompletion>,
}

/// The requests of one leadership term.
#[derive(Debug, Default)]
pub struct Requests {
    kept: BTreeMap<String, KeptRequest>,
    /// Node → keys of the requests naming it.
    by_node: BTreeMap<String, BTreeSet<String>>,
    machines: BTreeMap<String, MachineNode>,
    writes: BTreeMap<String, Writes>,
    /// Keys seen during a re-list (watch restart).
    relist: Option<BTreeSet<String>>,
    pub synced: bool,
}

impl Requests {
    /// The request the engine follows for `node`.
    pub fn request_for(&self, node: &str) -> Option<Request> {
        let keys = self.by_node.get(node)?;
        merged(keys.iter().filter_map(|k| self.kept.get(k)))
    }

    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// The node `request` names: `Err` says why it is not known (yet).
    pub fn node_of(&self, request: &KeptRequest) -> Result<String, String> {
        match &request.target {
            RequestTarget::Node(name) => Ok(name.clone()),
            RequestTarget::Machine {
                namespace, name, ..
            } => match self.machines.get(&format!("{namespace}/{name}")) {
                Some(MachineNode::Node(node)) => Ok(node.clone()),
                Some(MachineNode::Unknown { why, .. }) => Err(why.clone()),
                Some(MachineNode::Reading) | None => Err(format!(
                    "reading Cluster API Machine {namespace}/{name} for its node (status.nodeRef)"
                )),
            },
        }
    }

    /// Rebuilds the node index; returns every node named before or after.
    fn reindex(&mut self) -> BTreeSet<String> {
        let mut affected: BTreeSet<String> = self.by_node.keys().cloned().collect();
        let mut by_node: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (key, request) in &self.kept {
            if let Ok(node) = self.node_of(request) {
                by_node.entry(node).or_default().insert(key.clone());
            }
        }
        affected.extend(by_node.keys().cloned());
        self.by_node = by_node;
        affected
    }

    /// A watch event; returns the nodes whose request may have changed.
    pub fn event(&mut self, ev: WatchEvent<NodeFenceRemediation>) -> BTreeSet<String> {
        match ev {
            WatchEvent::Init => {
                self.relist = Some(BTreeSet::new());
                return BTreeSet::new();
            }
            WatchEvent::InitApply(object) | WatchEvent::Apply(object) => {
                let Some(kept) = KeptRequest::new(&object) else {
                    return BTreeSet::new();
                };
                let key = kept.key();
                if let Some(relist) = &mut self.relist {
                    relist.insert(key.clone());
                }
                if !self.kept.contains_key(&key) {
                    tracing::info!(
                        request = %kept.describe(),
                        target = ?kept.target,
                        "remediation request received"
                    );
                }
                // The object changed: what it says is compared afresh.
                if let Some(w) = self.writes.get_mut(&key)
                    && !w.status_in_flight
                {
                    w.status_sent = None;
                }
                self.kept.insert(key, kept);
            }
            WatchEvent::Delete(object) => {
                if let Some(kept) = KeptRequest::new(&object) {
                    tracing::info!(request = %kept.describe(), "remediation request deleted");
                    self.kept.remove(&kept.key());
                    self.writes.remove(&kept.key());
                }
            }
            WatchEvent::InitDone => {
                if let Some(relist) = self.relist.take() {
                    self.kept.retain(|k, _| relist.contains(k));
                    self.writes.retain(|k, _| relist.contains(k));
                }
                self.synced = true;
            }
        }
        self.reindex()
    }

    /// A task's answer; returns the nodes whose request may have changed.
    pub fn complete(&mut self, c: RequestCompletion) -> BTreeSet<String> {
        let retry_at = Instant::now() + RETRY_AFTER;
        match c {
            RequestCompletion::Status { key, result } => {
                if let Some(w) = self.writes.get_mut(&key) {
                    w.status_in_flight = false;
                    if let Err(e) = result {
                        tracing::warn!(request = %key, error = %e, "cannot write the request's status; trying again");
                        w.status_sent = None;
                        w.retry_at = Some(retry_at);
                    }
                }
                BTreeSet::new()
            }
            RequestCompletion::Finalizer {
                key,
                result,
                conflict,
            } => {
                if let Some(w) = self.writes.get_mut(&key) {
                    w.finalizer_in_flight = false;
                    match result {
                        Ok(()) => {}
                        // The newer version is (or will be) kept from the watch; the
                        // next tick decides on it. Waiting RETRY_AFTER here would
                        // leave the request without its finalizer meanwhile, free
                        // to be deleted before the taint is removed.
                        Err(e) if conflict => {
                            tracing::info!(
                                request = %key,
                                error = %e,
                                "the request changed while its finalizer was being changed; deciding again on its newer version"
                            );
                            w.finalizer_conflict = Some(retry_at);
                        }
                        Err(e) => {
                            tracing::warn!(request = %key, error = %e, "cannot change the request's finalizer; trying again");
                            w.retry_at = Some(retry_at);
                        }
                    }
                }
                BTreeSet::new()
            }
            RequestCompletion::Machine { machine, result } => {
                let found = match result {
                    Ok(Some(node)) => MachineNode::Node(node),
                    Ok(None) => MachineNode::Unknown {
                        why: format!(
                            "Cluster API Machine {machine} has no node yet (status.nodeRef)"
                        ),
                        retry_at,
                    },
                    Err(e) => MachineNode::Unknown {
                        why: format!("cannot read Cluster API Machine {machine}: {e}"),
                        retry_at,
                    },
                };
                self.machines.insert(machine, found);
                self.reindex()
            }
        }
    }

    /// Starts what the requests need now: Machine reads, status writes, finalizer
    /// changes. `our_taint(node)`: whether the Node carries nodefence's taint (`None`:
    /// no such Node). Writes only when `write` (the leader, not a dry run).
    pub fn tick(
        &mut self,
        engine: &Engine,
        our_taint: impl Fn(&str) -> Option<bool>,
        nodes_synced: bool,
        writer: &RequestWriter,
        write: bool,
        tasks: &Spawner<'_>,
    ) {
        let (spawn, tx) = (tasks.spawn, tasks.tx);
        let now = Instant::now();
        // Machines first: a request's node must be known to say anything about it.
        let wanted: BTreeSet<(String, String, String)> = self
            .kept
            .values()
            .filter_map(|r| match &r.target {
                RequestTarget::Machine {
                    namespace,
                    name,
                    api_version,
                } => Some((namespace.clone(), name.clone(), api_version.clone())),
                RequestTarget::Node(_) => None,
            })
            .collect();
        self.machines
            .retain(|k, _| wanted.iter().any(|(ns, n, _)| *k == format!("{ns}/{n}")));
        for (namespace, name, api_version) in wanted {
            let key = format!("{namespace}/{name}");
            let due = match self.machines.get(&key) {
                None => true,
                Some(MachineNode::Unknown { retry_at, .. }) => *retry_at <= now,
                Some(_) => false,
            };
            if !due {
                continue;
            }
            self.machines.insert(key.clone(), MachineNode::Reading);
            let writer = writer.clone();
            let tx = tx.clone();
            spawn(Box::pin(async move {
                let result = writer
                    .machine_node(&namespace, &name, &api_version)
                    .await
                    .map_err(|e| crate::untrusted::field(&e.to_string()));
                let _ = tx.send(RequestCompletion::Machine {
                    machine: key,
                    result,
                });
            }));
        }
        if !write {
            return;
        }
        let wall = crate::clock::now();
        let nodes: BTreeMap<String, Result<String, String>> = self
            .kept
            .iter()
            .map(|(k, r)| (k.clone(), self.node_of(r)))
            .collect();
        for (key, request) in &self.kept {
            let w = self.writes.entry(key.clone()).or_default();
            if w.retry_at.is_some_and(|t| t > now) {
                continue;
            }
            w.retry_at = None;
            let Some(node) = nodes.get(key).cloned() else {
                continue;
            };
            // The finalizer is held exactly while nodefence's taint is on the node.
            // First: the request must not be gone before the taint is. Its patch
            // carries the version it was decided on, so not while a status write is
            // under way (that write would make it fail with 409); after a 409, on
            // the newer version the watch brings (at once, not after RETRY_AFTER).
            if w.finalizer_conflict.is_some_and(|until| {
                w.finalizer_decided_on != request.resource_version || until <= now
            }) {
                w.finalizer_conflict = None;
            }
            if nodes_synced
                && !w.finalizer_in_flight
                && !w.status_in_flight
                && w.finalizer_conflict.is_none()
            {
                let tainted = node.as_deref().ok().and_then(&our_taint);
                let hold = tainted == Some(true);
                let change = if hold && !request.finalizer && !request.deleting {
                    Some(true)
                } else if !hold && request.finalizer && node.is_ok() {
                    Some(false)
                } else {
                    None
                };
                if let Some(hold) = change {
                    w.finalizer_in_flight = true;
                    w.finalizer_decided_on = request.resource_version.clone();
                    let writer = writer.clone();
                    let tx = tx.clone();
                    let (request, key) = (request.clone(), key.clone());
                    spawn(Box::pin(async move {
                        let result = writer.finalizer(&request, hold).await;
                        let conflict = matches!(
                            &result,
                            Err(WriteError::Api(kube::Error::Api(s))) if s.code == 409
                        );
                        let result = result.map_err(|e| crate::untrusted::field(&e.to_string()));
                        let _ = tx.send(RequestCompletion::Finalizer {
                            key,
                            result,
                            conflict,
                        });
                    }));
                }
            }
            // Status: final once nodefence reported it Succeeded. Not while the
            // finalizer changes (see above).
            if !request.reported_succeeded() && !w.status_in_flight && !w.finalizer_in_flight {
                let policy = node
                    .as_deref()
                    .map_or_else(|_| engine.policy(), |n| engine.policy_for(n));
                let state = node.as_deref().ok().and_then(|n| engine.node(n));
                let served = engine.request_served(&request.uid);
                let status = wanted_status(
                    request,
                    node.as_deref().map_err(String::as_str),
                    state,
                    served,
                    policy,
                );
                if w.status_sent.as_ref() != Some(&status)
                    && let Some(conditions) = conditions_to_write(&status, request, wall)
                {
                    w.status_in_flight = true;
                    w.status_sent = Some(status.clone());
                    let writer = writer.clone();
                    let tx = tx.clone();
                    let (namespace, name, key) =
                        (request.namespace.clone(), request.name.clone(), key.clone());
                    spawn(Box::pin(async move {
                        let result = writer
                            .status(&namespace, &name, status.node_name.as_deref(), &conditions)
                            .await
                            .map_err(|e| crate::untrusted::field(&e.to_string()));
                        let _ = tx.send(RequestCompletion::Status { key, result });
                    }));
                }
            }
        }
    }

    /// The earliest retry, so the loop wakes for it.
    pub fn next_retry(&self) -> Option<Instant> {
        let machines = self.machines.values().filter_map(|m| match m {
            MachineNode::Unknown { retry_at, .. } => Some(*retry_at),
            _ => None,
        });
        let writes = self
            .writes
            .values()
            .flat_map(|w| [w.retry_at, w.finalizer_conflict])
            .flatten();
        machines.chain(writes).min()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;
    use crate::cluster::leader::Leadership;
    use crate::engine::Policy;

    const KEY: &str = "nodefence/w1";

    fn request(version: &str) -> WatchEvent<NodeFenceRemediation> {
        let object: NodeFenceRemediation = serde_json::from_value(serde_json::json!({
            "apiVersion": "remediation.nodefence.io/v1alpha1",
            "kind": "NodeFenceRemediation",
            "metadata": {"name": "w1", "namespace": "nodefence", "uid": "u1",
                "resourceVersion": version},
            "spec": {},
        }))
        .unwrap();
        WatchEvent::Apply(object)
    }

    /// Ticks with the node tainted by nodefence; returns how many writes started.
    fn tick(requests: &mut Requests, engine: &Engine, writer: &RequestWriter) -> usize {
        let started = RefCell::new(0);
        let spawn = |_task| *started.borrow_mut() += 1;
        let (tx, _rx) = mpsc::unbounded_channel();
        requests.tick(
            engine,
            |_| Some(true),
            true,
            writer,
            true,
            &Spawner {
                spawn: &spawn,
                tx: &tx,
            },
        );
        started.into_inner()
    }

    fn writes(requests: &Requests) -> &Writes {
        &requests.writes[KEY]
    }

    #[tokio::test]
    async fn the_finalizer_goes_first_and_a_conflict_is_decided_again_on_the_next_version() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let writer = RequestWriter::new(
            crate::cluster::client(config).unwrap(),
            Leadership::always(),
        );
        let engine = Engine::new(Policy::default());
        let mut requests = Requests::default();
        requests.event(request("1"));

        // The finalizer and a status are both due: the finalizer alone starts, as a
        // status write would change the version its patch carries.
        assert_eq!(tick(&mut requests, &engine, &writer), 1);
        assert!(writes(&requests).finalizer_in_flight);
        assert!(!writes(&requests).status_in_flight);
        assert_eq!(tick(&mut requests, &engine, &writer), 0, "one at a time");

        // 409: no RETRY_AFTER, but nothing more on the version it failed on...
        requests.complete(RequestCompletion::Finalizer {
            key: KEY.into(),
            result: Err("the object has been modified".into()),
            conflict: true,
        });
        assert_eq!(writes(&requests).retry_at, None);
        assert_eq!(tick(&mut requests, &engine, &writer), 1, "the status");
        assert!(writes(&requests).status_in_flight);
        requests.complete(RequestCompletion::Status {
            key: KEY.into(),
            result: Ok(()),
        });
        assert_eq!(tick(&mut requests, &engine, &writer), 0, "same version");
        // ...and at once on the newer one the watch brings.
        requests.event(request("2"));
        assert_eq!(tick(&mut requests, &engine, &writer), 1);
        assert!(writes(&requests).finalizer_in_flight);

        // Any other failure waits RETRY_AFTER.
        requests.complete(RequestCompletion::Finalizer {
            key: KEY.into(),
            result: Err("connection refused".into()),
            conflict: false,
        });
        assert!(writes(&requests).retry_at.is_some());
        assert_eq!(tick(&mut requests, &engine, &writer), 0);
    }

    /// Seed 205726: a 409 for a version that never changes after it (an API server
    /// that refuses a write for its own reasons, a watch that lags) must not leave the
    /// change undecided for good: it is decided again on the version kept, after
    /// RETRY_AFTER, and the loop is woken for it.
    #[tokio::test(start_paused = true)]
    async fn a_conflict_no_newer_version_follows_is_decided_again_after_a_while() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let writer = RequestWriter::new(
            crate::cluster::client(config).unwrap(),
            Leadership::always(),
        );
        let engine = Engine::new(Policy::default());
        let mut requests = Requests::default();
        requests.event(request("1"));
        assert_eq!(tick(&mut requests, &engine, &writer), 1);
        requests.complete(RequestCompletion::Finalizer {
            key: KEY.into(),
            result: Err("the object has been modified".into()),
            conflict: true,
        });
        let due = requests.next_retry().unwrap_or_else(|| panic!("a wake-up"));
        assert!(due <= Instant::now() + RETRY_AFTER, "{due:?}");
        // The status goes meanwhile; the finalizer waits.
        assert_eq!(tick(&mut requests, &engine, &writer), 1);
        requests.complete(RequestCompletion::Status {
            key: KEY.into(),
            result: Ok(()),
        });
        assert!(!writes(&requests).finalizer_in_flight);
        tokio::time::advance(RETRY_AFTER).await;
        assert_eq!(tick(&mut requests, &engine, &writer), 1);
        assert!(
            writes(&requests).finalizer_in_flight,
            "decided again on version 1"
        );
    }
}
