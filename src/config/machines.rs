//! Two nodes, one machine: the classic fencing disaster.
//!
//! If node A's entry points at node B's BMC (a copy-pasted address, a group endpoint
//! without `{node}`), fencing A powers off B, a healthy node, while A keeps running
//! and writing to the volumes being handed over. Nodes are keyed by the machine they
//! resolve to and any collision is an error naming both nodes.
//!
//! Same machine means: the same Redfish endpoint host and port with the same
//! `system_id` (or both without one), the same IPMI address and port, or the same EC2
//! instance id. Weaker coincidences (one BMC, one node with a `system_id` and one
//! without; a Redfish and an IPMI node on the same host) may be legitimate, e.g.
//! emulators serving many VMs, so they are warnings.

use std::collections::BTreeMap;

use super::diagnostic::{Diagnostics, Source, Span, Subject};
use super::endpoint::{check_address, parse_endpoint, substitute};
use super::layer::Driver;
use super::resolve::Chain;
use super::targets::IPMI_PORT;

/// What identifies one machine.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Machine {
    Redfish {
        host: String,
        port: u16,
        system_id: Option<String>,
    },
    Ipmi {
        host: String,
        port: u16,
    },
    Aws(String),
}

impl Machine {
    /// The machine a node's settings point at, computed from its levels directly (not
    /// from the resolved target), so that a node with another problem, say a missing
    /// password, is still compared with the others. Invalid values (already reported)
    /// give None.
    pub fn of(chain: &Chain<'_>, node: &str) -> Option<Self> {
        let dummy = 0..0;
        match chain.pick(|l| &l.driver)?.val.value {
            Driver::Redfish => {
                let endpoint = chain.pick(|l| &l.endpoint)?;
                let url = parse_endpoint(&substitute(&endpoint.val.value, node), &dummy).ok()?;
                Some(Machine::Redfish {
                    host: url.host_str()?.to_ascii_lowercase(),
                    port: url.port_or_known_default()?,
                    system_id: chain.pick(|l| &l.system_id).map(|p| p.val.value.clone()),
                })
            }
            Driver::Ipmi => {
                let address = chain.pick(|l| &l.address)?;
                let address = substitute(&address.val.value, node);
                check_address(&address, &dummy).ok()?;
                Some(Machine::Ipmi {
                    host: bmc_host(&address),
                    port: chain.pick(|l| &l.port).map_or(IPMI_PORT, |p| p.val.value),
                })
            }
            Driver::Aws => chain
                .pick(|l| &l.instance_id)
                .map(|p| Machine::Aws(p.val.value.clone())),
            Driver::Exec => None,
        }
    }

    fn describe(&self) -> String {
        match self {
            Machine::Redfish {
                host,
                port,
                system_id: Some(id),
            } => {
                format!("Redfish BMC {host}:{port}, system_id \"{id}\"")
            }
            Machine::Redfish {
                host,
                port,
                system_id: None,
            } => {
                format!("Redfish BMC {host}:{port}, no system_id")
            }
            Machine::Ipmi { host, port } => format!("IPMI BMC {host}:{port}"),
            Machine::Aws(id) => format!("EC2 instance {id}"),
        }
    }
}

/// An address as a comparable host name (brackets and case removed).
fn bmc_host(address: &str) -> String {
    address
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

/// A node, where it is written, and its machine.
pub(crate) struct Placed {
    pub name: String,
    pub span: Span,
    pub machine: Machine,
}

/// Reports nodes that resolve to the same machine (errors) or share a BMC (warnings).
pub(crate) fn check(src: &Source, nodes: &[Placed], diags: &mut Diagnostics) {
    let mut seen: BTreeMap<&Machine, &Placed> = BTreeMap::new();
    let mut hosts: BTreeMap<String, Vec<(&Placed, &Machine)>> = BTreeMap::new();
    for placed in nodes {
        let (name, machine) = (&placed.name, &placed.machine);
        if let Some(first) = seen.get(machine) {
            let first_line = src.line_of(first.span.start);
            diags.error(
                src,
                Some(&placed.span),
                &Subject::Node(name.clone()),
                format!(
                    "resolves to the same machine as node \"{}\" (line {first_line}): {}",
                    first.name,
                    machine.describe()
                ),
                Some(
                    "each node must point at its own machine, or fencing one powers off the \
                     other. Check both entries; if they inherit the endpoint or address from a \
                     group, it needs {node}; nodes behind one multi-system BMC need distinct \
                     system_id values"
                        .into(),
                ),
            );
            continue;
        }
        seen.insert(machine, placed);
        match machine {
            Machine::Redfish { host, .. } | Machine::Ipmi { host, .. } => {
                hosts
                    .entry(host.clone())
                    .or_default()
                    .push((placed, machine));
            }
            Machine::Aws(_) => {}
        }
    }
    for users in hosts.values() {
        shared_bmc_warnings(src, users, diags);
    }
}

fn shared_bmc_warnings(src: &Source, users: &[(&Placed, &Machine)], diags: &mut Diagnostics) {
    let Some(((first, first_m), rest)) = users.split_first() else {
        return;
    };
    for (placed, machine) in rest {
        let why = match (first_m, machine) {
            (
                Machine::Redfish {
                    port: p1,
                    system_id: s1,
                    ..
                },
                Machine::Redfish {
                    port: p2,
                    system_id: s2,
                    ..
                },
            ) if p1 == p2 && (s1.is_none() || s2.is_none()) => {
                "one of them has no system_id, so it may control the other's system; set \
                 system_id on both"
            }
            (Machine::Redfish { .. }, Machine::Ipmi { .. })
            | (Machine::Ipmi { .. }, Machine::Redfish { .. }) => {
                "one through Redfish and one through IPMI; unless this host serves several \
                 machines (an emulator), they are the same machine"
            }
            _ => continue,
        };
        diags.warn(
            src,
            Some(&placed.span),
            &Subject::Node(placed.name.clone()),
            format!(
                "uses the same BMC host as node \"{}\" (line {}): {why}",
                first.name,
                src.line_of(first.span.start)
            ),
        );
    }
}
