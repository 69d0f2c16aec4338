//! Two nodes, one machine: the classic fencing disaster.
//!
//! If node A's entry points at node B's BMC (a copy-pasted address, a group endpoint
//! without `{node}`), fencing A powers off B, a healthy node, while A keeps running
//! and writing to the volumes being handed over. Nodes are keyed by the machine they
//! resolve to and any collision is an error naming both nodes.
//!
//! Same machine means: the same Redfish endpoint host and port with the same
//! `system_id` (or both without one), the same IPMI address and port, the same EC2
//! instance id or `instance_tag`, or the same fence agent (by file name) with the same
//! options that select the device and outlet: `ip` (or `ipaddr`), `ipport`, `plug` (or
//! `port`), `switch`, `systems_uri`, `uuid`, `domain`; the `fence_ipmilan` family
//! (`fence_idrac`, `fence_ilo4`, …) by its BMC, as an ipmi entry. An agent whose options name
//! neither an `ip` nor a `plug` cannot be compared. Weaker coincidences (one BMC, one
//! node with a `system_id` and one without; a Redfish and an IPMI node on the same
//! host) may be legitimate, e.g. emulators serving many VMs, so they are warnings.
//!
//! Every power method counts: a node's own settings and each of its `fallback`
//! entries (a fencing topology). Two nodes whose fallbacks reach the same PDU outlet
//! are the same disaster as two nodes on one BMC: fencing one switches the other's
//! machine off, and the Off it confirms is the wrong machine's. A node whose fallback
//! reaches the same machine as its own primary (or another of its fallbacks) is only
//! warned about: nothing is mis-wired, but that level adds no independent path.

use std::collections::BTreeMap;

use super::diagnostic::{Diagnostics, Source, Span, Subject};
use super::endpoint::{check_address, parse_endpoint, substitute};
use super::layer::{Driver, Layer};
use super::resolve::Chain;
use super::targets::IPMI_PORT;

/// Fence agent options that select the device and the outlet (or machine) it
/// switches, compared with `_` as `-` and in lower case, each with the name it is
/// compared under (fencing.py's aliases: `ipaddr` is `ip`, `port` is `plug`).
const EXEC_SELECTORS: &[(&str, &str)] = &[
    ("ip", "ip"),
    ("ipaddr", "ip"),
    ("ipport", "ipport"),
    ("plug", "plug"),
    ("port", "plug"),
    ("switch", "switch"),
    ("systems-uri", "systems-uri"),
    ("uuid", "uuid"),
    ("domain", "domain"),
];

/// Fence agents that are `fence_ipmilan` under another name (fence-agents installs
/// them as links to it): an entry for one reaches an IPMI BMC, at `ip`:`ipport`.
const IPMILAN_AGENTS: &[&str] = &[
    "fence_ipmilan",
    "fence_ipmilanplus",
    "fence_idrac",
    "fence_ilo3",
    "fence_ilo4",
    "fence_ilo5",
    "fence_imm",
];

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
    /// A vSphere VM named explicitly: the endpoint's host and port, and how the VM is
    /// named (`bios_uuid` lower-cased, `instance_uuid`, each with its `datacenter`,
    /// `moid`, or `vm_path`, `{node}` substituted).
    Vsphere {
        host: String,
        port: u16,
        vm: String,
    },
    /// A KubeVirt VirtualMachine: the kubeconfig file as written, the namespace as
    /// written (`None`: the kubeconfig's), and the VM's name (`{node}` substituted).
    Kubevirt {
        kubeconfig: String,
        namespace: Option<String>,
        vm: String,
    },
    /// An EC2 instance found by a tag: key, value (`{node}` substituted).
    AwsTag(String, String),
    /// A fence agent (its file name) and the options that select its target, by
    /// their compared name (see [`EXEC_SELECTORS`]).
    Exec {
        agent: String,
        selectors: BTreeMap<&'static str, String>,
    },
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
            Driver::Aws => match chain.pick(|l| &l.instance_id) {
                Some(id) => Some(Machine::Aws(id.val.value.clone())),
                None => chain.pick(|l| &l.instance_tag).map(|p| {
                    let (key, value) = &p.val.value;
                    Machine::AwsTag(key.clone(), substitute(value, node))
                }),
            },
            Driver::Vsphere => {
                let endpoint = chain.pick(|l| &l.endpoint)?;
                let url = parse_endpoint(&substitute(&endpoint.val.value, node), &dummy).ok()?;
                let scope = chain
                    .pick(|l| &l.datacenter)
                    .map_or(String::new(), |d| format!(" in datacenter {}", d.val.value));
                let vm = if let Some(u) = chain.pick(|l| &l.bios_uuid) {
                    format!("bios_uuid {}{scope}", u.val.value.to_ascii_lowercase())
                } else if let Some(i) = chain.pick(|l| &l.instance_uuid) {
                    format!("instance_uuid {}{scope}", i.val.value)
                } else if let Some(m) = chain.pick(|l| &l.moid) {
                    format!("moid {}", m.val.value)
                } else {
                    let p = chain.pick(|l| &l.vm_path)?;
                    format!("vm_path {}", substitute(&p.val.value, node))
                };
                Some(Machine::Vsphere {
                    host: url.host_str()?.to_ascii_lowercase(),
                    port: url.port_or_known_default()?,
                    vm,
                })
            }
            Driver::Kubevirt => Some(Machine::Kubevirt {
                kubeconfig: chain
                    .pick(|l| &l.kubeconfig)?
                    .val
                    .value
                    .abs
                    .display()
                    .to_string(),
                namespace: chain.pick(|l| &l.namespace).map(|p| p.val.value.clone()),
                vm: chain
                    .pick(|l| &l.vm)
                    .map_or_else(|| node.to_string(), |p| substitute(&p.val.value, node)),
            }),
            Driver::Exec => {
                let agent = chain.pick(|l| &l.agent)?;
                let agent = agent
                    .val
                    .value
                    .abs
                    .file_name()?
                    .to_string_lossy()
                    .into_owned();
                // Options merge key by key, as the target's: defaults, group, node.
                let mut selectors = BTreeMap::new();
                let levels: Vec<&Layer> = chain.levels().collect();
                for layer in levels.into_iter().rev() {
                    let Some(options) = &layer.options else {
                        continue;
                    };
                    for (key, value) in &options.value {
                        let key = key.to_ascii_lowercase().replace('_', "-");
                        if let Some((_, name)) = EXEC_SELECTORS.iter().find(|(k, _)| *k == key) {
                            let mut value = substitute(&value.value, node);
                            if *name == "ip" {
                                value = bmc_host(&value);
                            }
                            selectors.insert(*name, value);
                        }
                    }
                }
                // The fence_ipmilan family speaks IPMI to the BMC at ip:ipport: the
                // same machine as a native ipmi entry for that BMC.
                if IPMILAN_AGENTS.contains(&agent.as_str())
                    && let Some(host) = selectors.get("ip")
                {
                    let port = match selectors.get("ipport") {
                        Some(p) => p.parse().ok()?,
                        None => IPMI_PORT,
                    };
                    return Some(Machine::Ipmi {
                        host: host.clone(),
                        port,
                    });
                }
                (selectors.contains_key("ip") || selectors.contains_key("plug"))
                    .then_some(Machine::Exec { agent, selectors })
            }
        }
    }

    /// Every power method of node `name`, in order: its own settings (level 0), then
    /// each `fallback` entry (level n), the node's or else its group's. An entry is
    /// read alone, as it is resolved (it inherits nothing).
    pub fn of_levels(chain: &Chain<'_>, name: &str, node_span: &Span) -> Vec<Placed> {
        let mut placed: Vec<Placed> = Self::of(chain, name)
            .map(|machine| Placed {
                name: name.to_string(),
                level: 0,
                span: node_span.clone(),
                written_in: None,
                machine,
            })
            .into_iter()
            .collect();
        let written = [Some(chain.node), chain.group]
            .into_iter()
            .flatten()
            .find(|l| l.fallback.is_some());
        let Some(owner) = written else {
            return placed;
        };
        let group = match &owner.subject {
            Subject::Group(g) => Some(g.clone()),
            _ => None,
        };
        let nothing = Layer::empty(Subject::Defaults, 0..0);
        let entries = owner.fallback.as_ref().map_or(&[][..], |f| &f.value[..]);
        for (i, entry) in entries.iter().enumerate() {
            if entry.stray_table {
                continue;
            }
            let entry_chain = Chain {
                node: entry,
                group: None,
                defaults: &nothing,
            };
            if let Some(machine) = Self::of(&entry_chain, name) {
                placed.push(Placed {
                    name: name.to_string(),
                    level: i + 1,
                    span: entry.span.clone(),
                    written_in: group.clone(),
                    machine,
                });
            }
        }
        placed
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
            Machine::Vsphere { host, port, vm } => format!("vSphere {host}:{port}, {vm}"),
            Machine::Kubevirt {
                kubeconfig,
                namespace,
                vm,
            } => match namespace {
                Some(ns) => format!("KubeVirt VirtualMachine {ns}/{vm} (kubeconfig {kubeconfig})"),
                None => format!("KubeVirt VirtualMachine {vm} (kubeconfig {kubeconfig})"),
            },
            Machine::AwsTag(key, value) => format!("the EC2 instance tagged {key}={value}"),
            Machine::Exec { agent, selectors } => {
                let options: Vec<String> =
                    selectors.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!("fence agent {agent} with {}", options.join(" "))
            }
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

/// One power method of a node, where it is written, and its machine.
pub(crate) struct Placed {
    /// The node.
    pub name: String,
    /// 0: the node's own settings; n: its fallback n.
    pub level: usize,
    /// The node's table (level 0) or the fallback entry.
    pub span: Span,
    /// The group a fallback entry is written in, when the node inherits it.
    pub written_in: Option<String>,
    pub machine: Machine,
}

impl Placed {
    /// What messages about this method are reported for: the node, or its fallback.
    fn subject(&self) -> Subject {
        let node = Subject::Node(self.name.clone());
        match self.level {
            0 => node,
            n => Subject::Fallback(Box::new(node), n),
        }
    }

    /// " (line 7)", or " (from group \"rack\", line 3)" for an inherited fallback.
    fn place(&self, src: &Source) -> String {
        let line = src.line_of(self.span.start);
        match (self.level, &self.written_in) {
            (1.., Some(g)) => format!(" (from group \"{g}\", line {line})"),
            _ => format!(" (line {line})"),
        }
    }

    /// "" for a node's own settings, "'s fallback n" for a fallback: what follows
    /// `node "x"` in a message.
    fn theirs(&self) -> String {
        match self.level {
            0 => String::new(),
            n => format!("'s fallback {n}"),
        }
    }

    /// "primary method" or "fallback n".
    fn which(&self) -> String {
        match self.level {
            0 => "primary method".into(),
            n => format!("fallback {n}"),
        }
    }
}

/// Reports nodes that resolve to the same machine (errors), a node that reaches one
/// machine through two of its own methods (a warning) and nodes that share a BMC
/// (warnings). `nodes` holds every power method of every node, in file order.
pub(crate) fn check(src: &Source, nodes: &[Placed], diags: &mut Diagnostics) {
    let mut seen: BTreeMap<&Machine, &Placed> = BTreeMap::new();
    let mut hosts: BTreeMap<String, Vec<(&Placed, &Machine)>> = BTreeMap::new();
    for placed in nodes {
        let (name, machine) = (&placed.name, &placed.machine);
        if let Some(first) = seen.get(machine) {
            if first.name == *name {
                diags.warn(
                    src,
                    Some(&placed.span),
                    &placed.subject(),
                    format!(
                        "reaches the same machine as this node's {}{}: {}; it adds no \
                         independent way to power the machine off (point it at another \
                         device, e.g. the machine's PDU outlet, or remove it)",
                        first.which(),
                        first.place(src),
                        machine.describe()
                    ),
                );
                continue;
            }
            let help = if placed.level == 0 && first.level == 0 {
                "each node must point at its own machine, or fencing one powers off the \
                 other. Check both entries; if they inherit the endpoint or address from a \
                 group, it needs {node}; nodes behind one multi-system BMC need distinct \
                 system_id values"
            } else {
                "each power method, fallbacks included, must reach its own node's machine: \
                 fencing one node through this one would switch the other's machine off and \
                 confirm Off for the wrong machine, while the node itself keeps running. Check \
                 both entries; a fallback written in a group needs {node} in what selects the \
                 machine (plug = \"{node}\", an address), or set `fallback` on each node"
            };
            diags.error(
                src,
                Some(&placed.span),
                &placed.subject(),
                format!(
                    "resolves to the same machine as node \"{}\"{}{}: {}",
                    first.name,
                    first.theirs(),
                    first.place(src),
                    machine.describe()
                ),
                Some(help.into()),
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
            Machine::Aws(_)
            | Machine::AwsTag(..)
            | Machine::Exec { .. }
            | Machine::Vsphere { .. }
            | Machine::Kubevirt { .. } => {}
        }
    }
    for users in hosts.values() {
        shared_bmc_warnings(src, users, diags);
    }
}

/// Why two methods of different nodes on one BMC host may reach one machine, if
/// they may.
fn shared_why(a: &Machine, b: &Machine) -> Option<&'static str> {
    match (a, b) {
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
        ) if p1 == p2 && (s1.is_none() || s2.is_none()) => Some(
            "one of them has no system_id, so it may control the other's system; set \
             system_id on both",
        ),
        (Machine::Redfish { .. }, Machine::Ipmi { .. })
        | (Machine::Ipmi { .. }, Machine::Redfish { .. }) => Some(
            "one through Redfish and one through IPMI; unless this host serves several \
             machines (an emulator), they are the same machine",
        ),
        _ => None,
    }
}

/// One warning per method on a BMC host that an earlier method of another node may
/// share. Methods of the same node are not compared (a Redfish primary and an IPMI
/// fallback on one BMC reach the node's own machine twice).
fn shared_bmc_warnings(src: &Source, users: &[(&Placed, &Machine)], diags: &mut Diagnostics) {
    for (i, (placed, machine)) in users.iter().enumerate() {
        let earlier = users[..i].iter().find_map(|(first, first_m)| {
            (first.name != placed.name)
                .then(|| shared_why(first_m, machine).map(|why| (first, why)))
                .flatten()
        });
        let Some((first, why)) = earlier else {
            continue;
        };
        diags.warn(
            src,
            Some(&placed.span),
            &placed.subject(),
            format!(
                "uses the same BMC host as node \"{}\"{}{}: {why}",
                first.name,
                first.theirs(),
                first.place(src)
            ),
        );
    }
}
