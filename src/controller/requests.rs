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
use crate::remediation::writer::RequestWriter;

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
            RequestCompletion::Finalizer { key, result } => {
                if let Some(w) = self.writes.get_mut(&key) {
                    w.finalizer_in_flight = false;
                    if let Err(e) = result {
                        tracing::warn!(request = %key, error = %e, "cannot change the request's finalizer; trying again");
                        w.retry_at = Some(retry_at);
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
            // Status: final once nodefence reported it Succeeded.
            if !request.reported_succeeded() && !w.status_in_flight {
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
            // The finalizer is held exactly while nodefence's taint is on the node.
            if !nodes_synced || w.finalizer_in_flight {
                continue;
            }
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
                let writer = writer.clone();
                let tx = tx.clone();
                let (request, key) = (request.clone(), key.clone());
                spawn(Box::pin(async move {
                    let result = writer
                        .finalizer(&request, hold)
                        .await
                        .map_err(|e| crate::untrusted::field(&e.to_string()));
                    let _ = tx.send(RequestCompletion::Finalizer { key, result });
                }));
            }
        }
    }

    /// The earliest retry, so the loop wakes for it.
    pub fn next_retry(&self) -> Option<Instant> {
        let machines = self.machines.values().filter_map(|m| match m {
            MachineNode::Unknown { retry_at, .. } => Some(*retry_at),
            _ => None,
        });
        let writes = self.writes.values().filter_map(|w| w.retry_at);
        machines.chain(writes).min()
    }
}
