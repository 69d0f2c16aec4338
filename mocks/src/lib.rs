//! Mock servers nodefence is tested against, reachable over real sockets.
//!
//! nodefence must never release a node's volumes on the word of a BMC that lied,
//! hung or garbled its answer, and its drivers must work with the BMCs found in real
//! racks. These mocks reproduce both the vendor differences and the failure modes on
//! loopback, so the drivers (and third-party fence agents, for comparison) can be
//! tested end to end without hardware.
//!
//! - [`redfish`]: a Redfish BMC (OpenBMC, iDRAC, iLO, multi-system, minimal shapes).
//! - [`ipmi`]: an IPMI v2.0 (RMCP+) BMC on UDP (cipher suites 3 and 17, K_g, faults).
//! - [`metal3`]: Metal3's baremetal-operator and Ironic (power actions and power-state
//!   sync), standing in through fake-kube's API and the mock Redfish BMC, with
//!   minimal BareMetalHost and Metal3Machine CRDs.
//! - [`kubevirt`]: KubeVirt (virt-api's `start`/`stop` subresources behind fake-kube's
//!   aggregated-API hook, virt-controller's run strategies, virt-handler's VMI phases and
//!   grace periods) with the VirtualMachine and VirtualMachineInstance CRDs and its
//!   failure modes.
//! - [`tls`]: throwaway CA + leaf certificates for HTTPS mocks.
//! - [`vsphere`]: a vCenter or ESXi host over the vSphere Web Services (SOAP) API.
//! - [`remediation`]: stand-ins for the NodeHealthCheck operator and Cluster API's
//!   MachineHealthCheck, the health checkers that name nodefence as their remediator.
//!
//! For the tests themselves: [`peers`] finds the real peer programs and skips a test
//! visibly when one is missing; [`child_log`] gives a spawned mock binary a log file
//! of its own.

pub mod child_log;
pub mod ipmi;
pub mod kube;
pub mod kubevirt;
pub mod machines;
pub mod metal3;
pub mod peers;
pub mod redfish;
pub mod remediation;
pub mod serve;
pub mod test_layout;
pub mod tls;
pub mod vsphere;

/// The environment variables that would send a peer's HTTP requests (a fence agent's,
/// a CLI's) to a proxy instead of the mock on loopback: remove them from its
/// environment (`Command::env_remove`).
pub const PROXY_VARIABLES: [&str; 6] = [
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
];
