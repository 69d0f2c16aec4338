//! Starting a mock vSphere, and the handle tests steer it with: change a VM's power
//! behind the client's back (power loss), rename or move a VM, expire every session,
//! inject faults, and read what the client called.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::routing::post;
use tokio::task::JoinHandle;

use super::faults::Fault;
use super::model::{Product, VmPower, VmSpec, VmState, split_path};
use super::service;
use super::state::{CallRecord, Config, Shared};
use crate::tls::{TlsError, base_url, generate_material};

/// Credentials used when [`MockVsphere::credentials`] is not called.
pub const DEFAULT_USERNAME: &str = "administrator@vsphere.local";
/// See [`DEFAULT_USERNAME`].
pub const DEFAULT_PASSWORD: &str = "password";

/// Why a mock could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("TLS setup: {0}")]
    Tls(#[from] TlsError),
    #[error("managed object id {0:?} given twice")]
    DuplicateMoid(String),
}

/// A mock vSphere endpoint, being configured.
#[derive(Debug, Clone)]
pub struct MockVsphere {
    product: Product,
    datacenter: Option<String>,
    vms: Vec<VmSpec>,
    username: String,
    password: String,
    task_delay: Duration,
    listen: SocketAddr,
}

impl Default for MockVsphere {
    fn default() -> Self {
        Self {
            product: Product::default(),
            datacenter: None,
            vms: Vec::new(),
            username: DEFAULT_USERNAME.to_owned(),
            password: DEFAULT_PASSWORD.to_owned(),
            task_delay: Duration::ZERO,
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
        }
    }
}

impl MockVsphere {
    /// vCenter, no VMs, the default credentials, immediate tasks, HTTPS on
    /// `127.0.0.1:0`.
    pub fn builder() -> Self {
        Self::default()
    }

    pub fn product(mut self, product: Product) -> Self {
        self.product = product;
        self
    }

    /// The datacenter name in inventory paths (default `DC0`, or `ha-datacenter`
    /// for ESXi).
    pub fn datacenter(mut self, name: impl Into<String>) -> Self {
        self.datacenter = Some(name.into());
        self
    }

    pub fn vm(mut self, vm: VmSpec) -> Self {
        self.vms.push(vm);
        self
    }

    pub fn credentials(mut self, username: impl Into<String>, password: impl Into<String>) -> Self {
        self.username = username.into();
        self.password = password.into();
        self
    }

    /// How long a power task takes (queued, then running) before it ends.
    pub fn task_delay(mut self, delay: Duration) -> Self {
        self.task_delay = delay;
        self
    }

    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    fn default_datacenter(&self) -> String {
        self.datacenter
            .clone()
            .unwrap_or_else(|| self.product.default_datacenter().to_string())
    }

    fn vm_states(&self) -> Result<Vec<VmState>, StartError> {
        let mut out: Vec<VmState> = Vec::new();
        for (i, spec) in self.vms.iter().enumerate() {
            let moid = spec
                .moid
                .clone()
                .unwrap_or_else(|| self.product.vm_moid(i + 1));
            if out.iter().any(|v| v.moid == moid) {
                return Err(StartError::DuplicateMoid(moid));
            }
            out.push(VmState {
                moid,
                name: spec.name.clone(),
                bios_uuid: spec
                    .bios_uuid
                    .clone()
                    .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
                instance_uuid: spec
                    .instance_uuid
                    .clone()
                    .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
                folders: spec.folders.clone(),
                power: spec.power,
                datacenter: spec
                    .datacenter
                    .clone()
                    .unwrap_or_else(|| self.default_datacenter()),
            });
        }
        Ok(out)
    }

    /// Binds, serves HTTPS (a fresh private CA's leaf for the loopback names) at
    /// `/sdk` (and `/rest`) in the background, and returns the handle.
    pub async fn start(self) -> Result<MockVsphereHandle, StartError> {
        let vms = self.vm_states()?;
        let bind_error = |source| StartError::Bind {
            addr: self.listen,
            source,
        };
        let listener = std::net::TcpListener::bind(self.listen).map_err(bind_error)?;
        listener.set_nonblocking(true).map_err(bind_error)?;
        let addr = listener.local_addr().map_err(bind_error)?;
        let material = generate_material(addr.ip())?;
        let base_url = base_url(addr, true);
        let config = Config {
            product: self.product,
            datacenters: {
                let mut names = vec![self.default_datacenter()];
                for vm in &vms {
                    if !names.contains(&vm.datacenter) {
                        names.push(vm.datacenter.clone());
                    }
                }
                names
            },
            username: self.username.clone(),
            password: self.password.clone(),
            task_delay: self.task_delay,
        };
        let shared = Shared::new(config, vms);
        let app = super::admin::router()
            .merge(super::rest::router())
            .route("/sdk", post(service::handle))
            .route(
                "/sdk/vimService.wsdl",
                axum::routing::get(|| async {
                    (
                        [(axum::http::header::CONTENT_TYPE, "text/xml; charset=utf-8")],
                        super::wsdl::document(),
                    )
                }),
            )
            .with_state(shared.clone());
        let (server, task) = crate::serve::spawn(listener, app, Some(material.server_config()?))
            .map_err(bind_error)?;
        tracing::info!(%base_url, "mock vSphere started");
        Ok(MockVsphereHandle {
            shared,
            addr,
            base_url,
            ca_pem: material.ca_pem().to_owned(),
            server,
            task: Some(task),
        })
    }
}

/// A running mock vSphere. Dropping it stops the server.
#[derive(Debug)]
pub struct MockVsphereHandle {
    shared: Arc<Shared>,
    addr: SocketAddr,
    base_url: String,
    ca_pem: String,
    server: axum_server::Handle<SocketAddr>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl MockVsphereHandle {
    /// `https://localhost:PORT`; the SOAP endpoint is `{base_url}/sdk`.
    pub fn base_url(&self) -> String {
        self.base_url.clone()
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The CA certificate (PEM) clients must trust.
    pub fn ca_pem(&self) -> String {
        self.ca_pem.clone()
    }

    /// The VM with this managed object id, as it is now.
    pub fn vm(&self, moid: &str) -> Option<VmState> {
        self.shared.lock().vm(moid).cloned()
    }

    /// Every VM, as they are now.
    pub fn vms(&self) -> Vec<VmState> {
        self.shared.lock().vms.clone()
    }

    /// A VM's `runtime.powerState` now.
    pub fn power(&self, moid: &str) -> Option<VmPower> {
        self.vm(moid).map(|v| v.power)
    }

    /// Changes a VM's power out of band (its host lost power, someone used the UI).
    pub fn set_power(&self, moid: &str, power: VmPower) -> bool {
        self.shared
            .lock()
            .vm_mut(moid)
            .map(|v| v.power = power)
            .is_some()
    }

    /// Renames a VM (its UUIDs and moid stay).
    pub fn rename(&self, moid: &str, name: &str) -> bool {
        self.shared
            .lock()
            .vm_mut(moid)
            .map(|v| v.name = name.to_string())
            .is_some()
    }

    /// Moves a VM to another folder under `vm` (`"k8s/old"`).
    pub fn move_to(&self, moid: &str, folder: &str) -> bool {
        self.shared
            .lock()
            .vm_mut(moid)
            .map(|v| v.folders = split_path(folder))
            .is_some()
    }

    /// Removes a VM from the inventory (its moid is then unknown).
    pub fn remove(&self, moid: &str) -> bool {
        let mut inner = self.shared.lock();
        let before = inner.vms.len();
        inner.vms.retain(|v| v.moid != moid);
        inner.vms.len() != before
    }

    /// Ends every session, as vCenter does after its idle timeout or a restart.
    pub fn expire_sessions(&self) {
        self.shared.lock().sessions.clear();
    }

    /// How many sessions are logged in.
    pub fn session_count(&self) -> usize {
        self.shared.lock().sessions.len()
    }

    pub fn inject(&self, fault: Fault) {
        self.shared.lock().faults.apply(fault);
    }

    pub fn clear_faults(&self) {
        self.shared.lock().faults = Default::default();
    }

    /// Every call answered so far: SOAP (the operation's name) and REST (the
    /// request line with `{vm}` for the VM, which is then `this`).
    pub fn calls(&self) -> Vec<CallRecord> {
        self.shared.lock().calls.clone()
    }

    /// The operation names of the calls so far, in order.
    pub fn methods(&self) -> Vec<String> {
        self.calls().into_iter().map(|c| c.method).collect()
    }

    /// The power operations called so far and on which VM: SOAP's
    /// (`PowerOffVM_Task`, ...) and REST's (`POST /rest/vcenter/vm/{vm}/power/stop`,
    /// `.../start`), in order.
    pub fn power_calls(&self) -> Vec<(String, String)> {
        self.calls()
            .into_iter()
            .filter(|c| {
                c.method.ends_with("VM_Task")
                    || (c.method.starts_with("POST /rest/") && c.method.contains("/power/"))
            })
            .map(|c| (c.method, c.this))
            .collect()
    }

    /// Stops the server and waits for it.
    pub async fn shutdown(mut self) {
        self.server.shutdown();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for MockVsphereHandle {
    fn drop(&mut self) {
        self.server.shutdown();
    }
}
