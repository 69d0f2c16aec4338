//! The KubeVirt power driver (`driver = "kubevirt"`): a guest cluster's node that is
//! a VirtualMachine in an infrastructure cluster (OpenShift Virtualization,
//! Harvester, Cluster API's KubeVirt provider), reached with that cluster's own
//! kubeconfig ([`api`]).
//!
//! # Power state
//! Read from the VirtualMachineInstance (its phase; gone is gone) and the
//! VirtualMachine (`status.printableStatus`, written by virt-controller): Off only
//! when the VMI is gone or final *and* the VM is `Stopped` ([`model::power_state`]).
//! A VM that does not exist is an error, never Off.
//!
//! # Off
//! A forced stop KubeVirt will not undo ([`model`]): the VM is set `Halted`
//! (recording its run strategy in `nodefence.io/run-strategy`, a compare-and-swap on
//! its `resourceVersion`), then virt-api's `stop` subresource is asked with
//! `gracePeriod: 0`, which cuts the VMI's `terminationGracePeriodSeconds` to 0: the
//! domain is destroyed, not shut down. A 409 from `stop` (the VMI already final, or
//! already forced) leaves the readings to decide.
//!
//! # On
//! Restores the recorded run strategy (`Always` when none was recorded, as `virtctl
//! start` does for a Halted VM); a `Manual` VM also gets a `start` request.
//!
//! # Identity
//! [`MachineIdentity::Uuid`] of the VMI's `spec.domain.firmware.uuid` (the SMBIOS
//! system UUID the guest reads and its kubelet reports as the Node's systemUUID);
//! with no VMI, the VM template's, which KubeVirt persists so that every VMI of the
//! VM gets it. A VM with neither cannot tell.
//!
//! # What the proof rests on
//! KubeVirt marks a VMI `Failed` when its virt-launcher pod is gone, including when
//! the infrastructure cluster evicted the pods of a node it lost. That is only a
//! proof if the infrastructure cluster fences its own nodes (nodefence, or
//! NodeHealthCheck with a remediator, on the infrastructure cluster): the operator
//! guide says so.

pub mod api;
pub mod model;

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use async_trait::async_trait;
use serde_json::json;
use tokio::time::Instant;

use self::api::{CallError, InfraClient};
use self::model::{VmView, VmiView, halt_patch, power_state, start_plan};
use crate::config::KubevirtTarget;
use crate::identity::MachineIdentity;
use crate::power::{PowerDriver, PowerError, PowerReading};

/// How often a compare-and-swap of the VM is tried before giving up (each loses only
/// to another writer of the same VM).
const PATCH_ATTEMPTS: u32 = 3;

/// One VirtualMachine in one infrastructure cluster.
pub struct KubevirtDriver {
    infra: Arc<InfraClient>,
    namespace: String,
    vm: String,
    /// The identity of the latest reading.
    identity: Mutex<Option<MachineIdentity>>,
}

impl std::fmt::Debug for KubevirtDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubevirtDriver")
            .field("infra", &self.infra)
            .field("namespace", &self.namespace)
            .field("vm", &self.vm)
            .finish_non_exhaustive()
    }
}

/// Both objects, read once.
struct Observed {
    vm: VmView,
    vmi: Option<VmiView>,
}

impl KubevirtDriver {
    /// `infra` is shared by every VM behind the same kubeconfig and context.
    pub fn new(target: &KubevirtTarget, infra: Arc<InfraClient>) -> Self {
        Self {
            infra,
            namespace: target.namespace.clone(),
            vm: target.vm.clone(),
            identity: Mutex::new(None),
        }
    }

    fn subject(&self) -> String {
        format!("VirtualMachine {}/{}", self.namespace, self.vm)
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.infra.profile().timeouts.operation
    }

    /// The VMI first, then the VM: a printableStatus read after the VMI is at least
    /// as new as it.
    async fn observe(&self) -> Result<Observed, PowerError> {
        let vmi = self
            .infra
            .get("virtualmachineinstances", &self.namespace, &self.vm)
            .await?
            .map(|v| VmiView::from_json(&v));
        let Some(vm) = self
            .infra
            .get("virtualmachines", &self.namespace, &self.vm)
            .await?
        else {
            return Err(PowerError::config(format!(
                "{} does not exist in the infrastructure cluster: correct `vm` or \
                 `namespace` (a VM that cannot be found is never taken as off)",
                self.subject()
            )));
        };
        let vm = VmView::from_json(&vm)
            .map_err(|e| PowerError::protocol(format!("{}: {e}", self.subject())))?;
        Ok(Observed { vm, vmi })
    }

    fn remember_identity(&self, seen: &Observed) {
        let uuid = seen
            .vmi
            .as_ref()
            .and_then(|vmi| vmi.firmware_uuid.clone())
            .or_else(|| seen.vm.template_uuid.clone());
        let identity = match uuid {
            Some(u) => MachineIdentity::Uuid(u),
            None => MachineIdentity::Unavailable(format!(
                "{} has no firmware UUID (neither its VMI nor its template sets \
                 spec.domain.firmware.uuid)",
                self.subject()
            )),
        };
        *self.identity.lock().unwrap_or_else(|e| e.into_inner()) = Some(identity);
    }

    /// Runs `op` within the operation deadline.
    async fn bounded<T>(
        &self,
        what: &str,
        op: impl std::future::Future<Output = Result<T, PowerError>>,
    ) -> Result<T, PowerError> {
        let budget = self.infra.profile().timeouts.operation;
        tokio::time::timeout_at(self.deadline(), op)
            .await
            .map_err(|_| {
                PowerError::unreachable(format!(
                    "{} {what}: not done within the operation timeout ({})",
                    self.subject(),
                    humantime::format_duration(budget)
                ))
            })?
    }

    /// Holds the VM Halted: a compare-and-swap, read again when another writer won.
    async fn halt(&self) -> Result<Option<VmiView>, PowerError> {
        for _ in 0..PATCH_ATTEMPTS {
            let seen = self.observe().await?;
            let Some(patch) = halt_patch(&seen.vm) else {
                return Ok(seen.vmi);
            };
            match self.infra.patch_vm(&self.namespace, &self.vm, &patch).await {
                Ok(_) => {
                    tracing::info!(
                        vm = %self.subject(),
                        was = seen.vm.run_strategy.as_str(),
                        "KubeVirt VM set to runStrategy Halted"
                    );
                    return Ok(seen.vmi);
                }
                Err(CallError::Conflict(m)) => {
                    tracing::debug!(vm = %self.subject(), conflict = %m, "VM changed; reading it again");
                }
                Err(e) => return Err(e.into_power()),
            }
        }
        Err(PowerError::unreachable(format!(
            "{}: another writer changed the VM {PATCH_ATTEMPTS} times while nodefence was \
             setting runStrategy Halted",
            self.subject()
        )))
    }

    async fn stop_now(&self) -> Result<(), PowerError> {
        let vmi = self.halt().await?;
        if vmi.as_ref().is_none_or(VmiView::is_final) {
            // Nothing runs; Halted keeps it so.
            return Ok(());
        }
        match self
            .infra
            .vm_subresource(
                "stop",
                &self.namespace,
                &self.vm,
                &json!({ "gracePeriod": 0 }),
            )
            .await
        {
            Ok(()) => Ok(()),
            // Already final, or already forced: the readings decide.
            Err(CallError::Conflict(m)) => {
                tracing::debug!(vm = %self.subject(), answer = %m, "stop: conflict");
                Ok(())
            }
            Err(e) => Err(e.into_power()),
        }
    }

    async fn start_now(&self) -> Result<(), PowerError> {
        for _ in 0..PATCH_ATTEMPTS {
            let seen = self.observe().await?;
            let plan = start_plan(&seen.vm);
            if let Some(patch) = &plan.patch {
                match self.infra.patch_vm(&self.namespace, &self.vm, patch).await {
                    Ok(_) => {}
                    Err(CallError::Conflict(_)) => continue,
                    Err(e) => return Err(e.into_power()),
                }
            }
            let running = seen.vmi.as_ref().is_some_and(|v| !v.is_final());
            if plan.start_request && !running {
                match self
                    .infra
                    .vm_subresource("start", &self.namespace, &self.vm, &json!({}))
                    .await
                {
                    // "VM is already running": the readings decide.
                    Ok(()) | Err(CallError::Conflict(_)) => {}
                    Err(e) => return Err(e.into_power()),
                }
            }
            return Ok(());
        }
        Err(PowerError::unreachable(format!(
            "{}: another writer changed the VM {PATCH_ATTEMPTS} times while nodefence was \
             restoring its run strategy",
            self.subject()
        )))
    }
}

#[async_trait]
impl PowerDriver for KubevirtDriver {
    fn driver_name(&self) -> &'static str {
        "kubevirt"
    }

    fn endpoint(&self) -> String {
        let profile = self.infra.profile();
        match &profile.context {
            Some(c) => format!(
                "{} ({}, context {c})",
                self.subject(),
                profile.kubeconfig.display()
            ),
            None => format!("{} ({})", self.subject(), profile.kubeconfig.display()),
        }
    }

    async fn status(&self) -> Result<PowerReading, PowerError> {
        let started = Instant::now();
        let seen = self.bounded("status", self.observe()).await?;
        let state = power_state(&seen.vm, seen.vmi.as_ref());
        self.remember_identity(&seen);
        Ok(PowerReading {
            state,
            at: SystemTime::now(),
            latency: started.elapsed(),
        })
    }

    async fn power_off(&self) -> Result<(), PowerError> {
        self.bounded("power off", self.stop_now()).await
    }

    async fn power_on(&self) -> Result<(), PowerError> {
        self.bounded("power on", self.start_now()).await
    }

    async fn reboot(&self) -> Result<(), PowerError> {
        Err(PowerError::unsupported(
            "the kubevirt driver does not reboot in one step: nodefence reboots by off, \
             confirm off, on",
        ))
    }

    async fn machine_identity(&self) -> Result<MachineIdentity, PowerError> {
        let known = self
            .identity
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match known {
            Some(identity) => Ok(identity),
            None => {
                let seen = self.bounded("identity", self.observe()).await?;
                self.remember_identity(&seen);
                Ok(self
                    .identity
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone()
                    .unwrap_or_else(|| MachineIdentity::Unavailable("not read".into())))
            }
        }
    }
}
