//! Starting the simulation and driving it: add machines and workloads, cut and
//! restore a kubelet (the "power loss"), read the timeline, stop everything.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use super::super::resources::{LEASES, NODES};
use super::super::store::{Store, StoreError};
use super::clock::{Clock, Shutdown};
use super::config::{NODE_LEASE_NAMESPACE, SimConfig};
use super::context::Ctx;
use super::events::Recorder;
use super::kubelet::{Kubelet, registered_events, starting_event};
use super::machine::{Machine, lease_object};
use super::objects;
use super::specs::{NodeSpec, WorkloadSpec};
use super::timeline::{SimEvent, SimEventKind, Timeline};
use super::workload::Workloads;
use super::{
    attach_detach, external_attacher, garbage_collector, node_lifecycle, pod_gc, scheduler,
    taint_eviction, workload,
};

/// Entry point of the simulated control plane.
pub struct Simulation;

impl Simulation {
    /// Starts the enabled controllers on `store`, as tasks on the current tokio
    /// runtime. Nodes and workloads are added through the returned handle.
    ///
    /// # Panics
    ///
    /// When called outside a tokio runtime.
    pub fn start(store: Store, config: SimConfig) -> SimHandle {
        let (stop, stop_rx) = watch::channel(false);
        let ctx = Ctx {
            recorder: Recorder::new(store.clone()),
            store,
            clock: Clock::new(config.speed),
            config: Arc::new(config),
            timeline: Timeline::default(),
            shutdown: Shutdown::new(stop_rx),
        };
        let runtime = tokio::runtime::Handle::current();
        let workloads = Workloads::default();
        let cfg = ctx.config.clone();
        let mut tasks: Vec<JoinHandle<()>> = Vec::new();
        if cfg.node_lifecycle {
            tasks.push(runtime.spawn(node_lifecycle::run(ctx.clone())));
            tasks.push(runtime.spawn(garbage_collector::run(ctx.clone())));
        }
        if cfg.taint_eviction {
            tasks.push(runtime.spawn(taint_eviction::run(ctx.clone())));
        }
        if cfg.pod_gc {
            tasks.push(runtime.spawn(pod_gc::run(ctx.clone())));
        }
        if cfg.attach_detach {
            tasks.push(runtime.spawn(attach_detach::run(ctx.clone())));
            tasks.push(runtime.spawn(external_attacher::run(ctx.clone())));
        }
        if cfg.workloads {
            tasks.push(runtime.spawn(workload::run(ctx.clone(), workloads.clone())));
        }
        if cfg.scheduler {
            tasks.push(runtime.spawn(scheduler::run(ctx.clone())));
        }
        SimHandle {
            ctx,
            runtime,
            stop,
            tasks: Mutex::new(tasks),
            kubelets: Mutex::new(BTreeMap::new()),
            partitions: Mutex::new(BTreeMap::new()),
            workloads,
            next_index: AtomicU32::new(1),
        }
    }
}

/// A running simulation.
pub struct SimHandle {
    ctx: Ctx,
    runtime: tokio::runtime::Handle,
    stop: watch::Sender<bool>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    kubelets: Mutex<BTreeMap<String, watch::Sender<bool>>>,
    /// Each kubelet's network cut ([`SimHandle::set_partitioned`]).
    partitions: Mutex<BTreeMap<String, Arc<AtomicBool>>>,
    workloads: Workloads,
    next_index: AtomicU32,
}

impl SimHandle {
    /// Adds a machine: creates its Node (Ready) and Lease now, and starts its
    /// kubelet. Adding a name twice does nothing.
    pub fn add_node(&self, spec: NodeSpec) {
        let name = spec.name().to_string();
        let mut kubelets = self.kubelets.lock().unwrap_or_else(|p| p.into_inner());
        if kubelets.contains_key(&name) {
            tracing::warn!("node {name} was already added");
            return;
        }
        let index = self.next_index.fetch_add(1, Ordering::Relaxed);
        let machine = Machine::new(spec, index);
        let boot_id = machine.boot_id(1);
        let ctx = &self.ctx;
        starting_event(ctx, &name);
        match ctx.store.create(NODES, None, machine.node_object(&boot_id)) {
            Ok(_) => {
                registered_events(ctx, &name);
                ctx.record(
                    SimEventKind::NodeAdded,
                    Some(&name),
                    None,
                    format!("node {name} added (Ready)"),
                );
            }
            Err(StoreError::AlreadyExists { .. }) => {}
            Err(e) => tracing::warn!("creating node {name}: {e}"),
        }
        ctx.ensure_namespace(NODE_LEASE_NAMESPACE);
        let node_uid = ctx
            .get(NODES, None, &name)
            .map(|n| objects::uid(&n).to_string());
        match ctx.store.create(
            LEASES,
            Some(NODE_LEASE_NAMESPACE),
            lease_object(&name, node_uid.as_deref()),
        ) {
            Ok(_) | Err(StoreError::AlreadyExists { .. }) => {}
            Err(e) => tracing::warn!("creating lease of {name}: {e}"),
        }
        let (tx, rx) = watch::channel(true);
        kubelets.insert(name.clone(), tx);
        drop(kubelets);
        let cut = Arc::new(AtomicBool::new(false));
        self.partitions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.clone(), cut.clone());
        let kubelet = Kubelet::new(ctx.clone(), machine, boot_id, rx).with_cut(cut);
        let task = self.runtime.spawn(kubelet.run());
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(task);
        ctx.record(
            SimEventKind::KubeletStarted,
            Some(&name),
            None,
            "kubelet started",
        );
    }

    /// `false`: the node's kubelet goes silent (power loss or network cut: no Lease
    /// renewal, no status, no pod work). `true`: it comes back as after a reboot
    /// (re-registers its Node if it was deleted, posts Ready, resumes).
    pub fn set_kubelet(&self, node: &str, running: bool) {
        let kubelets = self.kubelets.lock().unwrap_or_else(|p| p.into_inner());
        let Some(tx) = kubelets.get(node) else {
            tracing::warn!("set_kubelet: unknown node {node}");
            return;
        };
        if *tx.borrow() == running {
            return;
        }
        // Record first: the kubelet may act on the change at once.
        if running {
            self.ctx.record(
                SimEventKind::KubeletStarted,
                Some(node),
                None,
                "kubelet back (machine rebooted or network restored)",
            );
        } else {
            self.ctx.record(
                SimEventKind::KubeletStopped,
                Some(node),
                None,
                "kubelet silent (power loss or network cut)",
            );
        }
        let _ = tx.send(running);
    }

    /// `true`: the node's network is cut while its machine runs: its kubelet keeps its
    /// boot, its pods and its containers, and reaches no API server (no Lease renewal,
    /// no status, no pod work). `false`: the partition heals: the same boot resumes
    /// (its Lease at once, its status at the next check: Ready, against what the node
    /// lifecycle controller wrote meanwhile). [`SimHandle::set_kubelet`] is a reboot.
    pub fn set_partitioned(&self, node: &str, cut: bool) {
        let partitions = self.partitions.lock().unwrap_or_else(|p| p.into_inner());
        let Some(flag) = partitions.get(node) else {
            tracing::warn!("set_partitioned: unknown node {node}");
            return;
        };
        if flag.swap(cut, Ordering::SeqCst) == cut {
            return;
        }
        let (kind, what) = if cut {
            (
                SimEventKind::KubeletStopped,
                "network cut: the kubelet reaches no API server (the machine runs)",
            )
        } else {
            (
                SimEventKind::KubeletStarted,
                "network restored: the same boot's kubelet is back",
            )
        };
        self.ctx.record(kind, Some(node), None, what);
    }

    /// Whether the node's kubelet runs (`None` for an unknown node).
    pub fn kubelet_running(&self, node: &str) -> Option<bool> {
        self.kubelets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(node)
            .map(|tx| *tx.borrow())
    }

    /// Adds a StatefulSet-like workload (claims provisioned, pods created and
    /// scheduled by the simulated controllers).
    pub fn add_stateful_workload(&self, spec: WorkloadSpec) {
        self.workloads.add(spec);
    }

    /// Everything the simulated control plane did so far, in order.
    pub fn timeline(&self) -> Vec<SimEvent> {
        self.ctx.timeline.snapshot()
    }

    /// Timeline events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<SimEvent> {
        self.ctx.timeline.subscribe()
    }

    /// The store the simulation acts on.
    pub fn store(&self) -> &Store {
        &self.ctx.store
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &SimConfig {
        &self.ctx.config
    }

    /// Stops every task and waits for them (at most a few seconds).
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let tasks: Vec<JoinHandle<()>> =
            std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|p| p.into_inner()));
        for task in tasks {
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(5), task)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        // Dropping the handle without `shutdown` still stops the controllers.
        let _ = self.stop.send(true);
    }
}
