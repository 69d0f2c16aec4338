//! The running stand-in: virt-controller and virt-handler for one namespace, the
//! handle tests steer it with ([`KubevirtStandIn`]).
//!
//! In the mould of [`crate::metal3::Metal3StandIn`]: a kube-rs client, watches on
//! VirtualMachines and VirtualMachineInstances that wake one worker, which lists both
//! and reconciles every VMI ([`super::handler`]) and then every VM
//! ([`super::controller`]) through the API; it also wakes at the next timed step
//! (a phase change, the end of a grace period) and every [`Timing::resync`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt as _;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::runtime::watcher;
use serde_json::Value;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::controller::{self, Cluster};
use super::handler::{self, Domain};
use super::{Faults, GROUP, Timing, VERSION, is_deleting, phase, vmi_phase};
use crate::remediation::runtime::TaskGuard;

struct Inner {
    namespace: String,
    cluster: Cluster,
    timing: Timing,
    state: Mutex<State>,
    wake: Notify,
}

#[derive(Default)]
struct State {
    faults: Faults,
    /// virt-handler's domains, by VMI name.
    domains: HashMap<String, Domain>,
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// KubeVirt's controllers for one namespace; they stop when this is dropped.
pub struct KubevirtStandIn {
    inner: Arc<Inner>,
    _tasks: Vec<TaskGuard>,
}

impl std::fmt::Debug for KubevirtStandIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubevirtStandIn").finish_non_exhaustive()
    }
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, kind), plural)
}

impl KubevirtStandIn {
    /// Starts virt-controller and virt-handler for the VMs and VMIs of `namespace`
    /// (the CRDs must be installed: [`super::crds()`]).
    pub fn spawn(client: kube::Client, namespace: &str, timing: Timing) -> Self {
        let cluster = Cluster {
            vms: Api::namespaced_with(
                client.clone(),
                namespace,
                &resource("VirtualMachine", "virtualmachines"),
            ),
            vmis: Api::namespaced_with(
                client,
                namespace,
                &resource("VirtualMachineInstance", "virtualmachineinstances"),
            ),
        };
        let inner = Arc::new(Inner {
            namespace: namespace.to_owned(),
            cluster,
            timing,
            state: Mutex::new(State::default()),
            wake: Notify::new(),
        });
        let watch = |api: Api<DynamicObject>| {
            let inner = inner.clone();
            TaskGuard(tokio::spawn(async move {
                let mut events = std::pin::pin!(watcher(api, watcher::Config::default()));
                while let Some(event) = events.next().await {
                    if event.is_err() {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    inner.wake.notify_one();
                }
            }))
        };
        let tasks = vec![
            watch(inner.cluster.vms.clone()),
            watch(inner.cluster.vmis.clone()),
            TaskGuard(tokio::spawn(run(inner.clone()))),
        ];
        Self {
            inner,
            _tasks: tasks,
        }
    }

    /// Sets the failure modes (see [`Faults`]).
    pub fn set_faults(&self, faults: Faults) {
        self.inner.state().faults = faults;
        self.inner.wake.notify_one();
    }

    /// The failure modes in force.
    pub fn faults(&self) -> Faults {
        self.inner.state().faults
    }

    /// Whether the domain (qemu) of VM `vm`'s VMI runs: `Some(true)` while its VMI is
    /// `Running`, also while being deleted within its grace period; `Some(false)` when
    /// the VMI exists but its domain does not run; `None` without a VMI.
    /// `namespace` must be the stand-in's.
    pub fn domain_running(&self, namespace: &str, vm: &str) -> Option<bool> {
        if namespace != self.inner.namespace {
            return None;
        }
        self.inner.state().domains.get(vm).map(|d| d.running)
    }

    /// The infrastructure node under VM `vm`'s VMI dies: its domain stops at once
    /// and the VMI is `Failed` after [`Timing::host_lost_to_failed`] (KubeVirt's
    /// node controller); then the run strategy decides (Always and RerunOnFailure
    /// start a new VMI, Manual and Halted leave it). `false` without a VMI.
    pub fn lose_host(&self, namespace: &str, vm: &str) -> bool {
        if namespace != self.inner.namespace {
            return false;
        }
        let mut state = self.inner.state();
        let Some(domain) = state.domains.get_mut(vm) else {
            return false;
        };
        domain.running = false;
        domain.host_lost = Some(Instant::now());
        drop(state);
        self.inner.wake.notify_one();
        true
    }

    /// Stops both controllers.
    pub async fn shutdown(self) {
        drop(self);
        tokio::task::yield_now().await;
    }
}

async fn run(inner: Arc<Inner>) {
    loop {
        let next = match round(&inner).await {
            Ok(next) => next,
            Err(e) => {
                tracing::debug!("kubevirt stand-in round: {e:#}");
                Some(Instant::now() + Duration::from_millis(50))
            }
        };
        let resync = Instant::now() + inner.timing.resync;
        let at = next.map_or(resync, |n| n.min(resync));
        tokio::select! {
            () = inner.wake.notified() => {}
            () = tokio::time::sleep_until(at) => {}
        }
        // A slow controller: whatever woke it, it acts only this much later.
        let delay = inner.timing.controller_delay + inner.state().faults.controller_delay;
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
    }
}

fn name(obj: &Value) -> String {
    obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// One pass over every VMI, then every VM; when to come back.
async fn round(inner: &Inner) -> anyhow::Result<Option<Instant>> {
    let c = &inner.cluster;
    let vms: Vec<Value> = c
        .vms
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()?;
    let vmis: Vec<Value> = c
        .vmis
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()?;
    let now = Instant::now();
    let mut next: Option<Instant> = None;
    let mut current: HashMap<String, Value> = HashMap::new();
    let faults = inner.state().faults;
    for vmi in vmis {
        let vmi_name = name(&vmi);
        let uid = vmi["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let vm = vms.iter().find(|vm| name(vm) == vmi_name);
        let step = {
            let mut state = inner.state();
            let domain = state
                .domains
                .entry(vmi_name.clone())
                .or_insert_with(|| Domain::new(&uid, now));
            if domain.uid != uid {
                *domain = Domain::new(&uid, now);
            }
            handler::step(&vmi, vm, domain, &inner.timing, faults, now)
        };
        if let Some(n) = step.next {
            next = Some(next.map_or(n, |m| m.min(n)));
        }
        let vmi = match step.write {
            Some(new) => {
                let obj: DynamicObject = serde_json::from_value(new)?;
                match c
                    .vmis
                    .replace(&vmi_name, &PostParams::default(), &obj)
                    .await
                {
                    Ok(written) => serde_json::to_value(written)?,
                    Err(kube::Error::Api(s)) if s.code == 404 => continue,
                    Err(e) => {
                        tracing::debug!("writing VMI {vmi_name}: {e}");
                        next = Some(now);
                        vmi
                    }
                }
            }
            None => vmi,
        };
        current.insert(vmi_name, vmi);
    }
    {
        let mut state = inner.state();
        state.domains.retain(|n, _| current.contains_key(n));
        for (n, vmi) in &current {
            if let Some(d) = state.domains.get_mut(n) {
                let deleting_in_grace = is_deleting(vmi) && vmi_phase(vmi) == phase::RUNNING;
                d.running = d.host_lost.is_none()
                    && (vmi_phase(vmi) == phase::RUNNING || deleting_in_grace)
                    && d.running;
            }
        }
    }
    for vm in &vms {
        let vmi = current.get(&name(vm));
        if let Err(e) = controller::reconcile(c, vm, vmi).await {
            tracing::debug!("reconciling VM {}: {e:#}", name(vm));
            next = Some(now + Duration::from_millis(20));
        }
    }
    Ok(next)
}
