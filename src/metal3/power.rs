//! Power through Metal3, not around it.
//!
//! On a host Metal3 manages, Ironic owns the power state: its conductor syncs every
//! node's power with what its database says (`[conductor] sync_power_state_interval`,
//! 60 s by default, with `force_power_state_during_sync` on by default) and Metal3
//! keeps a host with `spec.online: true` on. A ForceOff sent to the BMC behind their
//! back is undone within a minute, while nodefence may already be releasing the
//! node's volumes. So [`Metal3Driver`], behind the one [`PowerDriver`] trait:
//!
//! - powers off by asking Metal3: the annotation `reboot.metal3.io/nodefence` with
//!   `{"mode":"hard"}` (suffixed: Metal3 keeps the host off until it is removed; hard:
//!   Ironic's `power off`, not a soft power off a hung OS may ignore);
//! - powers on by removing it (Metal3 then powers the host on if `spec.online`);
//! - proves Off with its own direct BMC readings (the node's Redfish or IPMI driver)
//!   *and* the host's `status.poweredOn`: Off only when both say off. A disagreement
//!   (or a host that cannot be read while the BMC says Off) is Unknown, never Off;
//! - proves identity as before: the BMC's UUID against the Node's `systemUUID`.
//!
//! A host Metal3 cannot power off is refused with the reason: paused (Metal3 acts on
//! nothing), `spec.disablePowerOff` (it would reboot instead). A host detached from
//! Ironic since the entry was made is powered directly (nothing syncs it).

use std::sync::Arc;

use async_trait::async_trait;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};

use super::host::{BareMetalHost, HARD_REBOOT_VALUE, HostRef, NODEFENCE_REBOOT_ANNOTATION};
use crate::identity::{MachineIdentity, NodeIdentity};
use crate::power::{PowerDriver, PowerError, PowerErrorKind, PowerReading, PowerState};

/// Reading and annotating BareMetalHosts.
#[async_trait]
pub trait HostApi: Send + Sync {
    /// The host as it is now.
    async fn get(&self, host: &HostRef) -> Result<BareMetalHost, PowerError>;
    /// Sets (`Some`) or removes (`None`) one annotation, leaving the rest alone.
    async fn annotate(
        &self,
        host: &HostRef,
        key: &str,
        value: Option<&str>,
    ) -> Result<(), PowerError>;
}

/// [`HostApi`] through the Kubernetes API.
#[derive(Clone)]
pub struct KubeHosts {
    client: Client,
}

impl KubeHosts {
    pub fn new(client: Client) -> Self {
        Self { client }
    }

    fn api(&self, host: &HostRef) -> Api<BareMetalHost> {
        Api::namespaced(self.client.clone(), &host.namespace)
    }
}

/// A failed call about `host`, as a power error naming the host and the fix.
fn api_error(host: &HostRef, verb: &str, e: &kube::Error) -> PowerError {
    match e {
        kube::Error::Api(s) if s.code == 404 => PowerError::config(format!(
            "BareMetalHost {host} does not exist (any more): its node's entry came from it; \
             nodefence re-reads the hosts on its next reload"
        )),
        kube::Error::Api(s) if s.code == 403 => PowerError::privilege(format!(
            "may not {verb} BareMetalHost {host} (403): grant it with the Kustomize component \
             deploy/components/metal3 in namespace {}",
            host.namespace
        )),
        other => PowerError::unreachable(format!(
            "cannot {verb} BareMetalHost {host}: {}",
            crate::untrusted::field(&other.to_string())
        )),
    }
}

#[async_trait]
impl HostApi for KubeHosts {
    async fn get(&self, host: &HostRef) -> Result<BareMetalHost, PowerError> {
        self.api(host)
            .get(&host.name)
            .await
            .map_err(|e| api_error(host, "read", &e))
    }

    async fn annotate(
        &self,
        host: &HostRef,
        key: &str,
        value: Option<&str>,
    ) -> Result<(), PowerError> {
        let patch = serde_json::json!({"metadata": {"annotations": {key: value}}});
        self.api(host)
            .patch(&host.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(|e| api_error(host, "patch", &e))
    }
}

/// A machine whose power Metal3 manages (see the module documentation).
pub struct Metal3Driver {
    bmc: Arc<dyn PowerDriver>,
    host: HostRef,
    api: Arc<dyn HostApi>,
}

impl Metal3Driver {
    /// `bmc` reads the machine directly (the node's own driver); `api` reaches its
    /// BareMetalHost `host`.
    pub fn new(bmc: Arc<dyn PowerDriver>, host: HostRef, api: Arc<dyn HostApi>) -> Self {
        Self { bmc, host, api }
    }

    /// The host, refused when Metal3 cannot power it off now; `Ok(None)`: detached
    /// (power it directly).
    async fn powerable(&self) -> Result<Option<BareMetalHost>, PowerError> {
        let host = self.api.get(&self.host).await?;
        if host.detached() {
            return Ok(None);
        }
        if host.paused() {
            return Err(PowerError::unsupported(format!(
                "BareMetalHost {} is paused (baremetalhost.metal3.io/paused): Metal3 acts on \
                 nothing, and a direct power-off would be undone by Ironic's power sync; \
                 nodefence retries once it is unpaused",
                self.host
            )));
        }
        if host.spec.disable_power_off {
            return Err(PowerError::unsupported(format!(
                "BareMetalHost {} has spec.disablePowerOff: Metal3 reboots it instead of \
                 powering it off, so it can never be proven Off (clear disablePowerOff to let \
                 nodefence fence it)",
                self.host
            )));
        }
        Ok(Some(host))
    }
}

/// The machine's state from a direct BMC reading and its BareMetalHost: the host's
/// `status.poweredOn` must agree with the BMC for Off (and for On); a disagreement,
/// or a host that cannot be read when the BMC says Off, is Unknown.
pub fn combine(
    host_ref: &HostRef,
    bmc: Result<PowerReading, PowerError>,
    host: Result<BareMetalHost, PowerError>,
) -> Result<PowerReading, PowerError> {
    let mut reading = bmc?;
    let powered_on = match &host {
        Ok(h) => h.powered_on(),
        Err(_) => None,
    };
    let disagreement = match (&reading.state, powered_on) {
        (PowerState::Off, Some(false)) | (PowerState::On, Some(true)) => None,
        (PowerState::Off, Some(true)) => Some(format!(
            "the BMC says Off but BareMetalHost {host_ref} says status.poweredOn: true"
        )),
        (PowerState::On, Some(false)) => Some(format!(
            "the BMC says On but BareMetalHost {host_ref} says status.poweredOn: false"
        )),
        (PowerState::Off, None) => Some(match &host {
            Err(e) => format!("the BMC says Off but BareMetalHost {host_ref} cannot be read ({e})"),
            Ok(_) => format!("the BMC says Off but BareMetalHost {host_ref} has no status yet"),
        }),
        // On with an unreadable host, and every transitional state: the BMC's word.
        _ => None,
    };
    if let Some(why) = disagreement {
        reading.state = PowerState::Unknown(why);
    }
    Ok(reading)
}

#[async_trait]
impl PowerDriver for Metal3Driver {
    fn driver_name(&self) -> &'static str {
        "metal3"
    }

    fn endpoint(&self) -> String {
        format!(
            "BareMetalHost {} ({} {})",
            self.host,
            self.bmc.driver_name(),
            self.bmc.endpoint()
        )
    }

    async fn status(&self) -> Result<PowerReading, PowerError> {
        let (bmc, host) = tokio::join!(self.bmc.status(), self.api.get(&self.host));
        combine(&self.host, bmc, host)
    }

    async fn power_off(&self) -> Result<(), PowerError> {
        if self.powerable().await?.is_none() {
            tracing::info!(host = %self.host, "BareMetalHost detached from Ironic: powering off directly");
            return self.bmc.power_off().await;
        }
        tracing::info!(
            host = %self.host,
            annotation = NODEFENCE_REBOOT_ANNOTATION,
            "asking Metal3 to power the host off (hard) and keep it off"
        );
        self.api
            .annotate(
                &self.host,
                NODEFENCE_REBOOT_ANNOTATION,
                Some(HARD_REBOOT_VALUE),
            )
            .await
    }

    async fn power_on(&self) -> Result<(), PowerError> {
        let host = self.api.get(&self.host).await?;
        if host.detached() {
            return self.bmc.power_on().await;
        }
        tracing::info!(
            host = %self.host,
            annotation = NODEFENCE_REBOOT_ANNOTATION,
            "removing nodefence's reboot annotation: Metal3 powers the host on (spec.online)"
        );
        if host.held_off_by_nodefence() {
            self.api
                .annotate(&self.host, NODEFENCE_REBOOT_ANNOTATION, None)
                .await?;
        }
        if !host.spec.online {
            return Err(PowerError::unsupported(format!(
                "BareMetalHost {} has spec.online: false: Metal3 keeps it off (set online: true \
                 to have it powered on)",
                self.host
            )));
        }
        Ok(())
    }

    async fn reboot(&self) -> Result<(), PowerError> {
        Err(PowerError::new(
            PowerErrorKind::Unsupported,
            "power through Metal3 has no one-shot reboot: it is done as off, confirm Off, on, \
             confirm On",
        ))
    }

    async fn machine_identity(&self) -> Result<MachineIdentity, PowerError> {
        self.bmc.machine_identity().await
    }

    fn node_identity(&self, node: &NodeIdentity) {
        self.bmc.node_identity(node);
    }

    async fn close(&self) {
        self.bmc.close().await;
    }
}

#[cfg(test)]
mod tests;
