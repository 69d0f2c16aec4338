//! Metal3: BareMetalHosts as an inventory source, and power through Metal3.
//!
//! A Metal3 cluster already keeps every BMC's address and credentials in its
//! `BareMetalHost` objects (`metal3.io/v1alpha1`): `spec.bmc.address`,
//! `spec.bmc.credentialsName` (a Secret with `username` and `password`) and
//! `spec.bmc.disableCertificateVerification`. This module reads them instead of
//! asking the operator to type them again:
//!
//! - [`host`]: the few BareMetalHost fields nodefence reads and writes, and the
//!   annotations it knows (Metal3's own names).
//! - [`address`]: a BMC address as Metal3 accepts it (`redfish://`, `idrac-redfish://`,
//!   `ipmi://`, a bare host, ...) turned into nodefence's Redfish endpoint and system
//!   Id or IPMI address and port; the schemes nodefence cannot drive are refused with
//!   the reason and what to use instead.
//! - [`mapping`]: which Node runs on which BareMetalHost: an annotation on the Node,
//!   the Node's `spec.providerID` as Cluster API Provider Metal3 sets it, or the
//!   chain BareMetalHost `spec.consumerRef` → Metal3Machine → its owner Machine →
//!   `status.nodeRef`.
//! - [`inventory`]: the entries those hosts give, merged with the inventory file's
//!   (the file wins), their credentials read from the host's Secret.
//! - [`power`]: the driver of a machine Metal3 manages: power off and on asked of
//!   Metal3 (the `reboot.metal3.io/nodefence` annotation in hard mode), Off proven by
//!   the BMC's own readings and the host's `status.poweredOn` together.
//!
//! The identity proof does not change: the BMC's own UUID against the Node's
//! `systemUUID` ([`crate::identity`]). Where a BareMetalHost says the BMC is proves
//! nothing about which machine answers there.

pub mod address;
pub mod host;
pub mod inventory;
pub mod mapping;
pub mod power;

pub use host::{BareMetalHost, BareMetalHostSpec, BareMetalHostStatus, HostRef};
