//! The kubelet of one simulated machine: registration, the node Lease heartbeat and
//! the node status, as kubelet 1.33 does them. Pod work is in [`kubelet_pods`].
//!
//! - Lease `kube-node-lease/<node>` (`holderIdentity`, `leaseDurationSeconds: 40`,
//!   `renewTime` MicroTime, owned by the Node) renewed every `lease_renew_interval`.
//!   This is the heartbeat the node lifecycle controller watches.
//! - Node status computed every `node_status_update_frequency` (10s) and posted only
//!   when it changed (e.g. `volumesInUse` after an unmount, Ready after a restart) or
//!   every `node_status_interval` (5m); conditions MemoryPressure, DiskPressure,
//!   PIDPressure=False and Ready=True/KubeletReady, other conditions and fields (the
//!   attach/detach controller's `volumesAttached`, taints, labels) left alone. On the
//!   first boot, the status loop runs `NodeSpec::status_after_lease` after the Lease
//!   loop (a reboot restarts both together).
//! - A stopped kubelet (`set_kubelet(.., false)`: power loss or a network cut) does
//!   nothing at all. Starting it again is a reboot: new boot ID (`Rebooted` event),
//!   mounts and containers gone, the Node re-created if it was deleted (registration
//!   happens at every kubelet start), status posted at once. A network cut
//!   (`set_partitioned`) keeps the boot: the kubelet does nothing until it heals,
//!   then resumes where it was.
//!
//! [`kubelet_pods`]: super::kubelet_pods

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use super::super::resources::{LEASES, NODES, PODS, VOLUME_ATTACHMENTS};
use super::super::store::StoreError;
use super::clock::Wake;
use super::config::{KUBELET_SYNC, LEASE_DURATION_SECONDS, NODE_LEASE_NAMESPACE};
use super::context::Ctx;
use super::events::{EventType, ObjectRef, Source};
use super::kubelet_pods::PodWork;
use super::machine::{Machine, lease_object};
use super::objects;
use super::objects::At;
use super::timeline::SimEventKind;

/// The kubelet's "Starting kubelet." event.
pub fn starting_event(ctx: &Ctx, node: &str) {
    ctx.event(
        &ObjectRef::node(node, node),
        &Source::kubelet(node),
        EventType::Normal,
        "Starting",
        "Starting kubelet.",
    );
}

/// The events a kubelet records when its Node object is created.
pub fn registered_events(ctx: &Ctx, node: &str) {
    let node_ref = ObjectRef::node(node, node);
    let src = Source::kubelet(node);
    for what in [
        "NodeHasSufficientMemory",
        "NodeHasNoDiskPressure",
        "NodeHasSufficientPID",
        "NodeReady",
    ] {
        ctx.event(
            &node_ref,
            &src,
            EventType::Normal,
            what,
            &format!("Node {node} status is now: {what}"),
        );
    }
}

/// One running kubelet.
pub struct Kubelet {
    pub(super) ctx: Ctx,
    pub(super) machine: Machine,
    running: watch::Receiver<bool>,
    pub(super) boot_id: String,
    last_lease: Option<Instant>,
    last_status_check: Option<Instant>,
    last_status_post: Option<Instant>,
    pub(super) pods: HashMap<String, PodWork>,
    pub(super) mounted: BTreeSet<String>,
    /// Volumes the last node status (as stored) lists in `volumesInUse`: the
    /// kubelet mounts nothing before the attach/detach controller can see that it
    /// may (`MarkVolumesAsReportedInUse`).
    pub(super) reported_in_use: BTreeSet<String>,
    pub(super) next_pod_ip: u32,
    /// Its network is cut ([`super::SimHandle::set_partitioned`]): it does nothing
    /// until it heals, and keeps its boot.
    cut: Arc<AtomicBool>,
    /// Boots so far (its first, at [`Kubelet::new`], is 1).
    boots: u64,
}

impl Kubelet {
    pub fn new(
        ctx: Ctx,
        machine: Machine,
        boot_id: String,
        running: watch::Receiver<bool>,
    ) -> Self {
        Self {
            ctx,
            machine,
            running,
            boot_id,
            last_lease: None,
            last_status_check: None,
            last_status_post: None,
            pods: HashMap::new(),
            mounted: BTreeSet::new(),
            reported_in_use: BTreeSet::new(),
            next_pod_ip: 2,
            cut: Arc::new(AtomicBool::new(false)),
            boots: 1,
        }
    }

    /// The switch of its network cut.
    pub fn with_cut(mut self, cut: Arc<AtomicBool>) -> Self {
        self.cut = cut;
        self
    }

    pub fn name(&self) -> &str {
        self.machine.name()
    }

    /// Runs until the simulation stops.
    pub async fn run(mut self) {
        let mut wake = Wake::new(&self.ctx.store, &[PODS, NODES, VOLUME_ATTACHMENTS]);
        let mut booted_once = false;
        loop {
            if !*self.running.borrow_and_update() {
                let mut shutdown = self.ctx.shutdown.clone();
                tokio::select! {
                    _ = shutdown.wait() => return,
                    changed = self.running.changed() => if changed.is_err() { return },
                }
                continue;
            }
            self.start(booted_once);
            booted_once = true;
            // Until the switch moves: any change (even off and on again before this
            // task noticed) ends this boot.
            loop {
                self.sync();
                let sleep = self.next_sleep();
                let mut shutdown = self.ctx.shutdown.clone();
                let real = self.ctx.clock.tick(sleep);
                let switched = tokio::select! {
                    changed = self.running.changed() => match changed {
                        Ok(()) => true,
                        Err(_) => return,
                    },
                    go_on = super::clock::pause(&mut shutdown, Some(&mut wake), real) => {
                        if !go_on {
                            return;
                        }
                        false
                    }
                };
                if switched {
                    break;
                }
            }
        }
    }

    /// A (re)boot: fresh machine state, registration, status, lease.
    fn start(&mut self, reboot: bool) {
        if reboot {
            self.boots += 1;
            self.boot_id = self.machine.boot_id(self.boots);
        }
        self.pods.clear();
        self.mounted.clear();
        self.reported_in_use.clear();
        self.last_lease = None;
        self.last_status_check = None;
        self.last_status_post = None;
        if reboot {
            starting_event(&self.ctx, self.name());
        }
        self.register();
        self.post_status(true);
        self.renew_lease();
        if !reboot {
            self.offset_status_loop();
        }
    }

    /// Moves the status loop `status_after_lease` after the Lease loop (see
    /// [`NodeSpec::status_after_lease`](super::NodeSpec::status_after_lease)): the
    /// next status check comes that long from now, not a whole period.
    fn offset_status_loop(&mut self) {
        let every = self.ctx.config.node_status_update_frequency;
        let offset = self.machine.spec.status_after_lease;
        if offset.is_zero() || offset >= every {
            return;
        }
        let already = self.ctx.clock.real(every - offset);
        if let Some(t) = Instant::now().checked_sub(already) {
            self.last_status_check = Some(t);
        }
    }

    /// Registers the Node: creates it when missing, otherwise reconciles the
    /// annotation and labels the kubelet owns.
    fn register(&mut self) {
        let name = self.name().to_string();
        let store = &self.ctx.store;
        match store.get(NODES, None, &name) {
            Err(StoreError::NotFound { .. }) => {
                match store.create(NODES, None, self.machine.node_object(&self.boot_id)) {
                    Ok(_) => {
                        self.ctx.record(
                            SimEventKind::NodeRegistered,
                            Some(&name),
                            None,
                            "kubelet registered its Node object again",
                        );
                        registered_events(&self.ctx, &name);
                    }
                    Err(e) => tracing::warn!("kubelet {name}: registering: {e}"),
                }
            }
            Ok(_) => {
                let _ = store.modify(NODES, None, &name, |n| {
                    objects::obj_mut(n, &["metadata", "annotations"]).insert(
                        "volumes.kubernetes.io/controller-managed-attach-detach".into(),
                        json!("true"),
                    );
                    let labels = objects::obj_mut(n, &["metadata", "labels"]);
                    labels.insert("kubernetes.io/hostname".into(), json!(name));
                    labels.insert("kubernetes.io/os".into(), json!("linux"));
                    labels.insert("kubernetes.io/arch".into(), json!("amd64"));
                    Ok(())
                });
            }
            Err(e) => tracing::warn!("kubelet {name}: reading its Node: {e}"),
        }
    }

    /// One pass: lease, pods, status, whichever are due.
    fn sync(&mut self) {
        if self.cut.load(Ordering::SeqCst) {
            return;
        }
        let cfg = self.ctx.config.clone();
        let clock = self.ctx.clock;
        let due = |last: Option<Instant>, every| last.is_none_or(|t| clock.since(t) >= every);
        if due(self.last_lease, cfg.lease_renew_interval) {
            self.renew_lease();
        }
        let node = self.ctx.get(NODES, None, self.name());
        self.sync_pods(node.as_ref());
        if due(self.last_status_check, cfg.node_status_update_frequency) {
            let report = due(self.last_status_post, cfg.node_status_interval);
            self.post_status(report);
        }
    }

    /// Simulated time until something is due.
    fn next_sleep(&self) -> std::time::Duration {
        let cfg = &self.ctx.config;
        let left = |last: Option<Instant>, every: std::time::Duration| {
            last.map_or(std::time::Duration::ZERO, |t| {
                every.saturating_sub(self.ctx.clock.since(t))
            })
        };
        left(self.last_lease, cfg.lease_renew_interval)
            .min(left(
                self.last_status_check,
                cfg.node_status_update_frequency,
            ))
            .min(KUBELET_SYNC)
    }

    /// Renews (or re-creates) the node Lease.
    fn renew_lease(&mut self) {
        self.last_lease = Some(Instant::now());
        let name = self.name().to_string();
        let renew_time = self.clock(humantime::format_rfc3339_micros);
        let node_uid = self
            .ctx
            .get(NODES, None, &name)
            .map(|n| objects::uid(&n).to_string());
        let renewed = self
            .ctx
            .store
            .modify(LEASES, Some(NODE_LEASE_NAMESPACE), &name, |l| {
                let spec = objects::obj_mut(l, &["spec"]);
                spec.insert("holderIdentity".into(), json!(name));
                spec.insert("leaseDurationSeconds".into(), json!(LEASE_DURATION_SECONDS));
                spec.insert("renewTime".into(), json!(renew_time));
                let owned = l
                    .at("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .is_some_and(|o| !o.is_empty());
                if let (false, Some(uid)) = (owned, &node_uid) {
                    objects::obj_mut(l, &["metadata"]).insert(
                        "ownerReferences".into(),
                        json!([{"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}]),
                    );
                }
                Ok(())
            });
        if let Err(StoreError::NotFound { .. }) = renewed {
            self.ctx.ensure_namespace(NODE_LEASE_NAMESPACE);
            let lease = lease_object(&name, node_uid.as_deref());
            if let Err(e) = self
                .ctx
                .store
                .create(LEASES, Some(NODE_LEASE_NAMESPACE), lease)
            {
                tracing::debug!("kubelet {name}: creating lease: {e}");
            }
        }
    }

    /// Posts the node status if it changed, or if `report` (the report interval
    /// passed, or the kubelet just started).
    fn post_status(&mut self, report: bool) {
        self.last_status_check = Some(Instant::now());
        let heartbeat = self.clock(humantime::format_rfc3339_seconds);
        let name = self.name().to_string();
        let in_use = self.volumes_in_use();
        let mut was_ready: Option<bool> = None;
        let mut old_boot: Option<String> = None;
        let mut posted = false;
        let result = self.ctx.store.modify(NODES, None, &name, |node| {
            let before = node.clone();
            self.machine.apply_status(node, &self.boot_id, &in_use, "");
            if *node == before && !report {
                return Ok(());
            }
            self.machine
                .apply_status(node, &self.boot_id, &in_use, &heartbeat);
            was_ready = objects::condition_status(&before, "Ready").map(|s| s == "True");
            old_boot = objects::str_at(&before, "/status/nodeInfo/bootID").map(str::to_string);
            posted = true;
            Ok(())
        });
        match result {
            Ok(node) => {
                self.reported_in_use = node
                    .at("/status/volumesInUse")
                    .and_then(Value::as_array)
                    .map(|l| {
                        l.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default();
            }
            Err(e) => {
                // A kubelet whose Node was deleted keeps failing until it restarts.
                tracing::debug!("kubelet {name}: posting node status: {e}");
                return;
            }
        }
        if !posted {
            return;
        }
        self.last_status_post = Some(Instant::now());
        let node_ref = ObjectRef::node(&name, &name);
        let src = Source::kubelet(&name);
        if old_boot.is_some_and(|b| !b.is_empty() && b != self.boot_id) {
            self.ctx.event(
                &node_ref,
                &src,
                EventType::Warning,
                "Rebooted",
                &format!("Node {name} has been rebooted, boot id: {}", self.boot_id),
            );
        }
        if was_ready != Some(true) {
            self.ctx.event(
                &node_ref,
                &src,
                EventType::Normal,
                "NodeReady",
                &format!("Node {name} status is now: NodeReady"),
            );
            if was_ready == Some(false) {
                self.ctx.record(
                    SimEventKind::NodeReady,
                    Some(&name),
                    None,
                    "kubelet posted Ready=True again",
                );
            }
        }
    }

    /// The machine's time (`NodeSpec::clock_behind`), formatted by `format`.
    fn clock<F: std::fmt::Display>(&self, format: impl Fn(std::time::SystemTime) -> F) -> String {
        let now = nodefence_clock::now();
        format(
            now.checked_sub(self.machine.spec.clock_behind)
                .unwrap_or(now),
        )
        .to_string()
    }

    /// `volumesInUse`: volumes of the pods the kubelet runs or prepares, plus the
    /// ones still mounted, sorted.
    pub(super) fn volumes_in_use(&self) -> Vec<String> {
        let mut all: BTreeSet<String> = self.mounted.clone();
        for work in self.pods.values() {
            all.extend(work.volumes.iter().cloned());
        }
        all.into_iter().collect()
    }
}
