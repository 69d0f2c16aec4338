//! The taint eviction controller (`taint-eviction-controller`, split out of the node
//! lifecycle controller in 1.29), ported from `pkg/controller/tainteviction`.
//!
//! When a Node's NoExecute taints change, or a pod is bound/its tolerations change,
//! each pod on the node is checked: a NoExecute taint no toleration matches means
//! deletion now; otherwise the smallest `tolerationSeconds` of the tolerations used
//! schedules it (measured from when the controller saw the taint, not `timeAdded`);
//! a toleration without seconds means never. The deletion is the controller's
//! ordinary `Delete` (the pod's own grace period), after adding the condition
//! `DisruptionTarget` (`DeletionByTaintManager`): on a dead node the pod therefore
//! becomes `Terminating` and stays so. Events: `TaintManagerEviction` "Marking for
//! deletion Pod ns/name" and, when a scheduled eviction is dropped (taint gone, pod
//! gone), "Cancelling deletion of Pod ns/name".
//!
//! `node.kubernetes.io/out-of-service` is tolerated by no default toleration, so
//! adding it deletes every pod on the node at once (already-Terminating ones are
//! deleted again, which changes nothing but the event).

use std::collections::HashMap;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::super::deletion::{DeleteOptions, Preconditions};
use super::super::resources::{NODES, PODS};
use super::super::store::StoreError;
use super::clock::Wake;
use super::context::Ctx;
use super::events::{EventType, ObjectRef, Source};
use super::objects::At;
use super::objects::{self, set_condition};
use super::taints::{self, Taint, Tolerated, matching, min_toleration};
use super::timeline::SimEventKind;

const COMPONENT: &str = "taint-eviction-controller";

/// A pod's place in the eviction queue.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Work {
    Scheduled {
        created: Instant,
        fire: Instant,
    },
    /// Fired: kept so the same eviction is not queued twice.
    Done,
}

struct PodSeen {
    uid: String,
    node: String,
    tolerations: Option<Value>,
}

struct TaintEviction {
    ctx: Ctx,
    tainted: HashMap<String, Vec<Taint>>,
    pods: HashMap<String, PodSeen>,
    work: HashMap<String, Work>,
}

/// Runs the controller until shutdown.
pub async fn run(mut ctx: Ctx) {
    let mut wake = Wake::new(&ctx.store, &[NODES, PODS]);
    let mut tc = TaintEviction {
        ctx: ctx.clone(),
        tainted: HashMap::new(),
        pods: HashMap::new(),
        work: HashMap::new(),
    };
    loop {
        tc.pass();
        let next_fire = tc
            .work
            .values()
            .filter_map(|w| match w {
                Work::Scheduled { fire, .. } => Some(*fire),
                Work::Done => None,
            })
            .min();
        let sleep = next_fire.map_or(std::time::Duration::from_secs(3600), |f| ctx.clock.until(f));
        if !ctx.pause(Some(&mut wake), sleep).await {
            return;
        }
    }
}

impl TaintEviction {
    fn pass(&mut self) {
        let nodes = self.ctx.list(NODES);
        let pods = self.ctx.list(PODS);
        let now = Instant::now();
        // Node updates first, as the real workers prioritise them.
        let mut current: HashMap<String, Vec<Taint>> = HashMap::new();
        for node in nodes.iter() {
            let t = taints::no_execute(node);
            if !t.is_empty() {
                current.insert(objects::name(node).to_string(), t);
            }
        }
        let mut changed_nodes: Vec<String> = current
            .iter()
            .filter(|(n, t)| self.tainted.get(*n) != Some(*t))
            .map(|(n, _)| n.clone())
            .collect();
        changed_nodes.extend(
            self.tainted
                .keys()
                .filter(|n| !current.contains_key(*n))
                .cloned(),
        );
        self.tainted = current;
        for node in &changed_nodes {
            let taints = self.tainted.get(node).cloned().unwrap_or_default();
            for pod in pods.iter().filter(|p| objects::pod_node(p) == Some(node)) {
                if taints.is_empty() {
                    self.cancel(&objects::key(pod));
                } else {
                    self.process(pod, &taints, now);
                }
            }
        }
        // Pod updates: new pods, new binding, new tolerations, or gone.
        let mut seen = HashMap::new();
        for pod in pods.iter() {
            let key = objects::key(pod);
            let node = objects::pod_node(pod).unwrap_or_default().to_string();
            let tolerations = pod.at("/spec/tolerations").cloned();
            let uid = objects::uid(pod).to_string();
            let changed = match self.pods.get(&key) {
                None => true,
                Some(s) if s.uid != uid => {
                    self.cancel(&key);
                    true
                }
                Some(s) => s.node != node || s.tolerations != tolerations,
            };
            if changed
                && !node.is_empty()
                && let Some(taints) = self.tainted.get(&node).cloned()
            {
                self.process(pod, &taints, now);
            }
            seen.insert(
                key,
                PodSeen {
                    uid,
                    node,
                    tolerations,
                },
            );
        }
        let gone: Vec<String> = self
            .pods
            .keys()
            .filter(|k| !seen.contains_key(*k))
            .cloned()
            .collect();
        for key in gone {
            self.cancel(&key);
            self.work.remove(&key);
        }
        self.pods = seen;
        // Fire due evictions.
        let due: Vec<String> = self
            .work
            .iter()
            .filter(|(_, w)| matches!(w, Work::Scheduled { fire, .. } if *fire <= Instant::now()))
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            self.work.insert(key.clone(), Work::Done);
            self.evict(&key);
        }
    }

    /// `processPodOnNode`.
    fn process(&mut self, pod: &Value, taints: &[Taint], now: Instant) {
        let key = objects::key(pod);
        let (all, used) = matching(taints, &taints::tolerations(pod));
        if !all {
            self.cancel(&key);
            self.add_work(&key, now, now);
            return;
        }
        let min = match min_toleration(&used) {
            Tolerated::Forever => {
                self.cancel(&key);
                return;
            }
            Tolerated::For(d) => d,
        };
        let mut created = now;
        let trigger = self.ctx.clock.after(min);
        if let Some(Work::Scheduled { created: c, .. }) = self.work.get(&key).copied() {
            created = c;
            // The eviction already scheduled fires first: keep it.
            if c.checked_add(self.ctx.clock.real(min))
                .is_none_or(|fire| fire < trigger)
            {
                return;
            }
            self.cancel(&key);
        }
        if !min.is_zero() && !self.work.contains_key(&key) {
            self.ctx.record(
                SimEventKind::PodEvictionScheduled,
                objects::pod_node(pod),
                Some(&key),
                format!(
                    "NoExecute taint tolerated for {}s: eviction scheduled",
                    min.as_secs()
                ),
            );
        }
        self.add_work(&key, created, trigger);
    }

    /// `AddWork`: ignored when the pod already has (or had) work.
    fn add_work(&mut self, key: &str, created: Instant, fire: Instant) {
        self.work
            .entry(key.to_string())
            .or_insert(Work::Scheduled { created, fire });
    }

    /// `cancelWorkWithEvent`: forgets the pod's work, with an event if it was still
    /// scheduled.
    fn cancel(&mut self, key: &str) {
        if let Some(Work::Scheduled { .. }) = self.work.remove(key) {
            let (ns, name) = key.split_once('/').unwrap_or(("", key));
            let about = ObjectRef::named("Pod", "v1", ns, name);
            let msg = format!("Cancelling deletion of Pod {key}");
            self.ctx.event(
                &about,
                &Source::controller(COMPONENT),
                EventType::Normal,
                "TaintManagerEviction",
                &msg,
            );
            self.ctx.record(
                SimEventKind::PodEvictionCancelled,
                None,
                Some(key),
                "scheduled eviction cancelled",
            );
        }
    }

    /// `deletePodHandler`: event, DisruptionTarget condition, ordinary delete.
    fn evict(&self, key: &str) {
        let (ns, name) = key.split_once('/').unwrap_or(("", key));
        let about = ObjectRef::named("Pod", "v1", ns, name);
        let msg = format!("Marking for deletion Pod {key}");
        self.ctx.event(
            &about,
            &Source::controller(COMPONENT),
            EventType::Normal,
            "TaintManagerEviction",
            &msg,
        );
        let Some(uid) = self.pods.get(key).map(|s| s.uid.clone()) else {
            return;
        };
        let at = nodefence_clock::now();
        let marked = self.ctx.store.modify(PODS, Some(ns), name, |p| {
            if objects::uid(p) != uid {
                return Err(StoreError::Conflict {
                    plural: "pods".into(),
                    name: name.to_string(),
                });
            }
            set_condition(
                p,
                json!({"type": "DisruptionTarget", "status": "True",
                    "reason": "DeletionByTaintManager",
                    "message": "Taint manager: deleting due to NoExecute taint"}),
            );
            Ok(())
        });
        let Ok(pod) = marked else { return };
        let node = objects::pod_node(&pod).map(str::to_string);
        let message = if objects::is_terminating(&pod) {
            "evicted by NoExecute taint: deleted again (already Terminating, no change)"
        } else {
            "evicted by NoExecute taint: deleted (Terminating until its kubelet confirms)"
        };
        let opts = DeleteOptions {
            preconditions: Some(Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteOptions::default()
        };
        match self.ctx.delete(PODS, Some(ns), name, &opts) {
            Ok(Some(_)) => self.ctx.record_at(
                at,
                SimEventKind::PodEvicted,
                node.as_deref(),
                Some(key),
                message,
            ),
            Ok(None) => {}
            Err(e) => tracing::debug!("taint eviction of {key}: {e}"),
        }
    }
}
