//! A mock vSphere endpoint (vCenter Server or a standalone ESXi host) speaking the
//! vSphere Web Services API (SOAP, `urn:vim25`) over HTTPS at `/sdk`: the subset a
//! power fencing client uses (see the `service` module), with the names, shapes and
//! faults of the real API (govmomi's `vim25/methods` and `vim25/types`, its `vcsim`
//! simulator, and the vSphere Web Services API reference), and the failures seen in
//! the field ([`Fault`], plus session expiry, VMs renamed, moved, removed, and power
//! lost out of band through the handle, or the `/admin` HTTP API for scripts and
//! the `mock-vsphere` binary). The same server answers the vSphere Automation REST
//! API's `/rest` flavour on the same VMs (the `rest` module: sessions, the VM list,
//! power stop and start), as `fence_vmware_rest` uses it.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use nodefence_mocks::vsphere::{MockVsphere, VmPower, VmSpec};
//!
//! let vc = MockVsphere::builder()
//!     .vm(VmSpec::new("worker-1").folder("k8s").moid("vm-42").power(VmPower::PoweredOn))
//!     .start()
//!     .await?;
//! // point the client at vc.base_url() (SOAP at /sdk), trusting vc.ca_pem() ...
//! assert_eq!(vc.power("vm-42"), Some(VmPower::PoweredOn));
//! vc.shutdown().await;
//! # Ok(()) }
//! ```

mod admin;
mod faults;
mod model;
mod rest;
mod server;
mod service;
mod soap;
mod state;
mod wsdl;
mod xml;

pub use admin::AdminFault;
pub use faults::Fault;
pub use model::{API_VERSION, Product, VmPower, VmSpec, VmState};
pub use rest::REST_SESSION_HEADER;
pub use server::{DEFAULT_PASSWORD, DEFAULT_USERNAME, MockVsphere, MockVsphereHandle, StartError};
pub use service::SESSION_COOKIE;
pub use state::{CallRecord, PowerOp, TaskFault, TaskInfoState};
