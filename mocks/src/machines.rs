//! Machines: one mock BMC system and one simulated kubelet that live and die together.
//!
//! In a real rack, the BMC's power state and the kubelet are the same machine: pull
//! the plug and the kubelet falls silent; a ForceOff from nodefence does the same; power
//! it on and the kubelet comes back. [`link`] keeps a simulated kubelet running exactly
//! while its BMC system is powered, so tests and `nodefence demo` can cut power (or
//! only the network, by stopping the kubelet with power on) and watch the whole story.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::kube::sim::SimHandle;
use crate::redfish::{MockPower, MockRedfishHandle};

/// One machine: the BMC system id and the Kubernetes node name it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    pub system_id: String,
    pub node: String,
}

impl Machine {
    pub fn new(system_id: impl Into<String>, node: impl Into<String>) -> Self {
        Self {
            system_id: system_id.into(),
            node: node.into(),
        }
    }
}

/// Keeps each machine's kubelet running while its BMC system draws power, checking
/// every `period`. A kubelet stopped by hand while the power is on (a network cut)
/// stays stopped until the power goes off and on again. Abort the returned task
/// before shutting the BMC or the simulation down.
pub fn link(
    bmc: Arc<MockRedfishHandle>,
    sim: Arc<SimHandle>,
    machines: Vec<Machine>,
    period: Duration,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut last: Vec<Option<bool>> = vec![None; machines.len()];
        loop {
            for (m, seen) in machines.iter().zip(last.iter_mut()) {
                let powered = bmc.power(&m.system_id).is_some_and(|p| p != MockPower::Off);
                if *seen != Some(powered) {
                    // Only edges: a network cut (kubelet stopped, power on) is left alone.
                    sim.set_kubelet(&m.node, powered);
                    *seen = Some(powered);
                }
            }
            tokio::time::sleep(period).await;
        }
    })
}
