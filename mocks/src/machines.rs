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

/// Whether a machine draws power right now (`None`: the BMC does not know it).
pub type PowerProbe = Arc<dyn Fn() -> Option<bool> + Send + Sync>;

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
    let probes = machines
        .into_iter()
        .map(|m| {
            let bmc = bmc.clone();
            let probe: PowerProbe =
                Arc::new(move || bmc.power(&m.system_id).map(|p| p != MockPower::Off));
            (m.node, probe)
        })
        .collect();
    link_probes(sim, probes, period)
}

/// [`link`] for any BMC: each node's kubelet runs while its probe says powered.
pub fn link_probes(
    sim: Arc<SimHandle>,
    machines: Vec<(String, PowerProbe)>,
    period: Duration,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut last: Vec<Option<bool>> = vec![None; machines.len()];
        loop {
            for ((node, probe), seen) in machines.iter().zip(last.iter_mut()) {
                let powered = probe().unwrap_or(false);
                if *seen != Some(powered) {
                    // Only edges: a network cut (kubelet stopped, power on) is left alone.
                    sim.set_kubelet(node, powered);
                    *seen = Some(powered);
                }
            }
            tokio::time::sleep(period).await;
        }
    })
}
