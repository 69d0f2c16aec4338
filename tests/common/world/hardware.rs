//! The machines behind a [`World`]'s nodes and how nodefence reaches them.
//!
//! Every node has a system on the shared mock Redfish BMC. A node's [`Method`]s (its
//! fencing levels, primary first) decide what else it gets: its own mock IPMI BMC
//! (reached natively or through Debian's `fence_ipmilan`), an EC2 instance in the
//! world's moto server (its Node carries the instance's providerID), a VM on the
//! world's mock vCenter (its BIOS UUID the Node's systemUUID, byte-swapped as older
//! guests report it), or a Redfish
//! BMC that accepts connections and never answers (a hung BMC). The machine is
//! powered when every power path its methods use says so (a PDU outlet switched off
//! stops the machine whatever its BMC thinks), and its kubelet follows that.
//!
//! Peers (moto, `fence_ipmilan`) missing: [`Hardware::start`] returns `None` after the
//! usual "skipped" line, or fails under `NODEFENCE_REQUIRE_PEERS=1`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use nodefence::config::{AwsTarget, Timeouts, TlsSettings};
use nodefence::power::aws::AwsDriver;
use nodefence::power::{PowerDriver, PowerState};
use nodefence_mocks::ipmi::{MockIpmi, MockIpmiHandle, Power, Privilege};
use nodefence_mocks::machines::PowerProbe;
use nodefence_mocks::redfish::{MockPower, MockRedfishHandle};
use nodefence_mocks::vsphere::{MockVsphere, MockVsphereHandle, VmPower, VmSpec};
use tokio::task::JoinHandle;

use super::NodeSetup;
use crate::common::moto::{self, Moto};
use crate::common::{PASSWORD, USER};

/// The region and zone of the world's EC2 instances.
pub const AWS_REGION: &str = "us-east-1";
pub const AWS_ZONE: &str = "us-east-1a";
/// The profile of the daemon's `aws-credentials` file.
pub const AWS_PROFILE: &str = "nodefence";

/// One way nodefence reaches a node's machine (one fencing level).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// The machine's system on the shared mock Redfish BMC.
    Redfish,
    /// A Redfish BMC that accepts connections and never answers.
    HungRedfish,
    /// The machine's own mock IPMI BMC (`driver = "ipmi"`).
    Ipmi,
    /// The same IPMI BMC through the real `fence_ipmilan` (`driver = "exec"`).
    FenceIpmilan,
    /// An EC2 instance in the world's moto server (`driver = "aws"`; the instance
    /// comes from the Node's providerID).
    Aws,
    /// A VM on the world's mock vCenter (`driver = "vsphere"`; the VM is found by the
    /// Node's systemUUID).
    Vsphere,
    /// A KubeVirt VirtualMachine named after the node in the world's infrastructure
    /// cluster (`driver = "kubevirt"`), `runStrategy: Always` (KubeVirt restarts it
    /// after a lost host), its firmware UUID the Node's systemUUID.
    Kubevirt,
    /// The same with `runStrategy: Manual`: a VM whose host is lost stays down.
    KubevirtManual,
}

impl NodeSetup {
    fn uses(&self, m: impl Fn(Method) -> bool) -> bool {
        self.methods.iter().any(|x| m(*x))
    }

    pub(super) fn has_ipmi(&self) -> bool {
        self.uses(|m| matches!(m, Method::Ipmi | Method::FenceIpmilan))
    }

    pub(super) fn has_aws(&self) -> bool {
        self.uses(|m| m == Method::Aws)
    }

    pub(super) fn has_vsphere(&self) -> bool {
        self.uses(|m| m == Method::Vsphere)
    }

    pub(super) fn has_kubevirt(&self) -> bool {
        self.uses(|m| matches!(m, Method::Kubevirt | Method::KubevirtManual))
    }

    /// Whether the machine's power is the shared Redfish BMC system's.
    pub(super) fn powered_by_redfish(&self) -> bool {
        self.uses(|m| m == Method::Redfish)
            || !(self.has_ipmi() || self.has_aws() || self.has_vsphere() || self.has_kubevirt())
    }
}

/// Everything besides the shared Redfish BMC.
pub struct Hardware {
    /// The nodes' own IPMI BMCs, by node name.
    pub ipmi: BTreeMap<String, Arc<MockIpmiHandle>>,
    /// The moto server, when a node is on EC2.
    pub moto: Option<Moto>,
    /// node → EC2 instance id.
    pub instances: BTreeMap<String, String>,
    /// The mock vCenter, when a node is a VM.
    pub vsphere: Option<MockVsphereHandle>,
    /// node → the VM's managed object id.
    pub vms: BTreeMap<String, String>,
    /// The KubeVirt infrastructure cluster, when a node is a KubeVirt VM (named after
    /// the node, in [`crate::common::kubevirt::VM_NAMESPACE`]).
    pub kubevirt: Option<crate::common::kubevirt::Infra>,
    /// node → the instance's power as last read (0 unknown, 1 on, 2 off).
    aws_power: BTreeMap<String, Arc<AtomicU8>>,
    pollers: Vec<JoinHandle<()>>,
    /// Accepts connections into its backlog and never reads them.
    hung: Option<std::net::TcpListener>,
    fence_ipmilan: Option<PathBuf>,
}

impl Hardware {
    pub async fn start(nodes: &[NodeSetup], transition_delay: Duration) -> Option<Hardware> {
        let fence_ipmilan = if nodes.iter().any(|n| n.uses(|m| m == Method::FenceIpmilan)) {
            Some(crate::common::cli_common::fence_agent("fence_ipmilan")?)
        } else {
            None
        };
        let moto = if nodes.iter().any(NodeSetup::has_aws) {
            Some(moto::start().await?)
        } else {
            None
        };
        let hung = nodes
            .iter()
            .any(|n| n.uses(|m| m == Method::HungRedfish))
            .then(|| std::net::TcpListener::bind("127.0.0.1:0").unwrap());
        let vm_nodes: Vec<&NodeSetup> = nodes.iter().filter(|n| n.has_vsphere()).collect();
        let mut vms = BTreeMap::new();
        let vsphere = if vm_nodes.is_empty() {
            None
        } else {
            let mut builder = MockVsphere::builder()
                .credentials(USER, PASSWORD)
                .task_delay(transition_delay);
            for (i, n) in vm_nodes.iter().enumerate() {
                let moid = format!("vm-{}", 101 + i);
                let uuid = n.bmc_uuid.as_ref().or(n.uuid.as_ref()).map(|u| {
                    // config.uuid with the first three fields swapped against the
                    // systemUUID, as older guests report it.
                    let parsed = uuid::Uuid::parse_str(u).unwrap();
                    uuid::Uuid::from_bytes_le(*parsed.as_bytes()).to_string()
                });
                let mut spec = VmSpec::new(n.name.clone()).moid(moid.clone()).folder("k8s");
                if let Some(uuid) = uuid {
                    spec = spec.bios_uuid(uuid);
                }
                if n.power == MockPower::Off {
                    spec = spec.power(VmPower::PoweredOff);
                }
                builder = builder.vm(spec);
                vms.insert(n.name.clone(), moid);
            }
            Some(builder.start().await.unwrap())
        };
        let kubevirt = kubevirt_infra(nodes).await;
        let mut hw = Hardware {
            ipmi: BTreeMap::new(),
            vsphere,
            vms,
            kubevirt,
            moto,
            instances: BTreeMap::new(),
            aws_power: BTreeMap::new(),
            pollers: Vec::new(),
            hung,
            fence_ipmilan,
        };
        for n in nodes.iter().filter(|n| n.has_ipmi()) {
            let mut guid = n
                .bmc_uuid
                .as_ref()
                .or(n.uuid.as_ref())
                .map_or([0x5A; 16], |u| {
                    *uuid::Uuid::parse_str(u).unwrap().as_bytes()
                });
            guid.reverse();
            let handle = MockIpmi::builder()
                .name(n.name.clone())
                .user(USER, PASSWORD, Privilege::Administrator)
                .guid(guid)
                .power(if n.power == MockPower::Off {
                    Power::Off
                } else {
                    Power::On
                })
                .transition_delay(transition_delay)
                .start()
                .await
                .unwrap();
            hw.ipmi.insert(n.name.clone(), Arc::new(handle));
        }
        if let Some(moto) = &hw.moto {
            for n in nodes.iter().filter(|n| n.has_aws()) {
                let id = moto.run(AWS_REGION, "Name", &n.name, 1).await.remove(0);
                if n.power == MockPower::Off {
                    moto.stop(AWS_REGION, &id).await;
                }
                let state = Arc::new(AtomicU8::new(if n.power == MockPower::Off { 2 } else { 1 }));
                hw.pollers
                    .push(poll_instance(&moto.endpoint, &id, state.clone()));
                hw.aws_power.insert(n.name.clone(), state);
                hw.instances.insert(n.name.clone(), id);
            }
        }
        Some(hw)
    }

    /// The Node's `spec.providerID`, for a node on EC2.
    pub fn provider_id(&self, node: &str) -> Option<String> {
        self.instances
            .get(node)
            .map(|id| format!("aws:///{AWS_ZONE}/{id}"))
    }

    /// Whether the machine is powered, by every power path its methods use (`None`:
    /// not known yet).
    pub fn powered(&self, bmc: &MockRedfishHandle, n: &NodeSetup) -> Option<bool> {
        let mut on = true;
        if n.powered_by_redfish() {
            on &= bmc.power(&n.system_id)? != MockPower::Off;
        }
        if let Some(ipmi) = self.ipmi.get(&n.name) {
            on &= ipmi.power().is_on();
        }
        if let (Some(vc), Some(moid)) = (&self.vsphere, self.vms.get(&n.name)) {
            on &= vc.power(moid)? == VmPower::PoweredOn;
        }
        if let (Some(infra), true) = (&self.kubevirt, n.has_kubevirt()) {
            on &= infra.running(&n.name);
        }
        if let Some(state) = self.aws_power.get(&n.name) {
            match state.load(Ordering::SeqCst) {
                1 => {}
                2 => on = false,
                _ => return None,
            }
        }
        Some(on)
    }

    /// The kubelet link's probe for `n`.
    pub fn probe(self: &Arc<Self>, bmc: &Arc<MockRedfishHandle>, n: &NodeSetup) -> PowerProbe {
        let (hw, bmc, n) = (self.clone(), bmc.clone(), n.clone());
        Arc::new(move || hw.powered(&bmc, &n))
    }

    /// `n`'s inventory entry (without its `[nodes.x]` header): the primary's keys, then
    /// the fallback levels. Every level is written out in full (fallback entries
    /// inherit nothing).
    pub fn inventory_entry(&self, bmc: &MockRedfishHandle, n: &NodeSetup) -> String {
        let mut levels = n.methods.iter().map(|m| self.level(bmc, n, *m));
        let mut out = String::new();
        if let Some(primary) = levels.next() {
            for (k, v) in &primary {
                out.push_str(&format!("{k} = {v}\n"));
            }
        }
        let fallback: Vec<String> = levels
            .map(|level| {
                let keys: Vec<String> = level.iter().map(|(k, v)| format!("{k} = {v}")).collect();
                format!("  {{ {} }},\n", keys.join(", "))
            })
            .collect();
        if !fallback.is_empty() {
            out.push_str(&format!("fallback = [\n{}]\n", fallback.concat()));
        }
        out
    }

    fn level(&self, bmc: &MockRedfishHandle, n: &NodeSetup, m: Method) -> Vec<(String, String)> {
        let q = |s: &str| format!("\"{s}\"");
        let credentials = || {
            vec![
                ("username".to_string(), q(USER)),
                ("password_file".to_string(), q("bmc-password")),
            ]
        };
        let mut keys: Vec<(String, String)> = match m {
            Method::Redfish | Method::HungRedfish => {
                let endpoint = match (m, &self.hung) {
                    (Method::HungRedfish, Some(l)) => {
                        format!("http://{}", l.local_addr().unwrap())
                    }
                    _ => bmc.base_url(),
                };
                let mut k = vec![
                    ("driver".into(), q("redfish")),
                    ("endpoint".into(), q(&endpoint)),
                    ("system_id".into(), q(&n.system_id)),
                ];
                k.extend(credentials());
                k
            }
            Method::Ipmi => {
                let mut k = vec![
                    ("driver".into(), q("ipmi")),
                    ("address".into(), q("127.0.0.1")),
                    ("port".into(), self.ipmi[&n.name].port().to_string()),
                ];
                k.extend(credentials());
                k
            }
            Method::FenceIpmilan => {
                let agent = self.fence_ipmilan.as_deref().unwrap_or(Path::new("/"));
                let mut k = vec![
                    ("driver".into(), q("exec")),
                    ("agent".into(), q(&agent.display().to_string())),
                    (
                        "options".into(),
                        format!(
                            "{{ ip = \"127.0.0.1\", ipport = \"{}\", lanplus = \"1\", cipher = \"17\" }}",
                            self.ipmi[&n.name].port()
                        ),
                    ),
                ];
                k.extend(credentials());
                k
            }
            Method::Vsphere => {
                let endpoint = self
                    .vsphere
                    .as_ref()
                    .map_or("https://127.0.0.1:1".into(), MockVsphereHandle::base_url);
                let mut k = vec![
                    ("driver".into(), q("vsphere")),
                    ("endpoint".into(), q(&endpoint)),
                    ("ca_file".into(), q("vsphere-ca.pem")),
                ];
                k.extend(credentials());
                k
            }
            Method::Kubevirt | Method::KubevirtManual => vec![
                ("driver".into(), q("kubevirt")),
                ("kubeconfig".into(), q("kubevirt.kubeconfig")),
                ("namespace".into(), q(crate::common::kubevirt::VM_NAMESPACE)),
            ],
            Method::Aws => {
                let endpoint = self
                    .moto
                    .as_ref()
                    .map_or("http://127.0.0.1:1/".into(), |m| m.endpoint.to_string());
                vec![
                    ("driver".into(), q("aws")),
                    ("endpoint".into(), q(&endpoint)),
                    ("credentials_file".into(), q("aws-credentials")),
                    ("profile".into(), q(AWS_PROFILE)),
                ]
            }
        };
        // A hung level is given up quickly; a fence agent forks ipmitool per action.
        let (request, operation) = match m {
            Method::HungRedfish => ("1s", "2s"),
            Method::FenceIpmilan => ("10s", "20s"),
            _ => ("1s", "3s"),
        };
        keys.extend([
            ("connect_timeout".into(), q("1s")),
            ("request_timeout".into(), q(request)),
            ("operation_timeout".into(), q(operation)),
            ("retries".into(), "1".into()),
        ]);
        keys
    }

    /// Writes the shared credentials file the AWS levels name, and the mock
    /// vCenter's CA.
    pub fn write_files(&self, dir: &Path) {
        if let Some(vc) = &self.vsphere {
            std::fs::write(dir.join("vsphere-ca.pem"), vc.ca_pem()).unwrap();
        }
        if let Some(infra) = &self.kubevirt {
            std::fs::copy(infra.fencer_kubeconfig(), dir.join("kubevirt.kubeconfig")).unwrap();
        }
        crate::common::cli_common::write_secret(
            &dir.join("aws-credentials"),
            &format!(
                "[{AWS_PROFILE}]\naws_access_key_id = AKIDNODEFENCEWORLD\n\
                 aws_secret_access_key = world-secret-not-checked-by-moto\n"
            ),
        );
    }

    pub fn stop(&self) {
        for p in &self.pollers {
            p.abort();
        }
    }
}

/// Reads the instance's state every 100 ms into `state` (the machine's "real" power,
/// for the kubelet link: the daemon has its own driver and its own reads).
fn poll_instance(endpoint: &url::Url, id: &str, state: Arc<AtomicU8>) -> JoinHandle<()> {
    let target = AwsTarget {
        instance_id: Some(id.to_string()),
        instance_tag: None,
        region: Some(AWS_REGION.into()),
        endpoint: Some(endpoint.clone()),
        tls: TlsSettings::default(),
        profile: None,
        credentials_file: None,
        timeouts: Timeouts {
            connect: Duration::from_secs(2),
            request: Duration::from_secs(5),
            operation: Duration::from_secs(10),
            retries: 1,
        },
    };
    let driver = AwsDriver::with_keys(
        &target,
        reqwest::Client::new(),
        Arc::new(tokio::sync::Semaphore::new(2)),
        "AKIDWORLDPROBE",
        &secrecy::SecretString::from("probe-secret"),
        None,
    );
    tokio::spawn(async move {
        loop {
            if let Ok(r) = driver.status().await {
                match r.state {
                    PowerState::On => state.store(1, Ordering::SeqCst),
                    PowerState::Off => state.store(2, Ordering::SeqCst),
                    _ => {}
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// The infrastructure cluster of the world's KubeVirt nodes, each VM running (or,
/// for a node that starts Off, Halted), named after its node, its firmware UUID the
/// node's (or the one its miswired entry expects).
async fn kubevirt_infra(nodes: &[NodeSetup]) -> Option<crate::common::kubevirt::Infra> {
    use crate::common::kubevirt::{Infra, VM_NAMESPACE, fast_timing};
    use nodefence_mocks::kubevirt::{RunStrategy, VmBuilder};
    let vm_nodes: Vec<&NodeSetup> = nodes.iter().filter(|n| n.has_kubevirt()).collect();
    if vm_nodes.is_empty() {
        return None;
    }
    let infra = Infra::start(fast_timing()).await;
    for n in &vm_nodes {
        let manual = n.uses(|m| m == Method::KubevirtManual);
        let strategy = match (n.power == MockPower::Off, manual) {
            (true, _) => RunStrategy::Halted,
            (false, true) => RunStrategy::Manual,
            (false, false) => RunStrategy::Always,
        };
        let mut vm = VmBuilder::new(VM_NAMESPACE, &n.name).run_strategy(strategy);
        if let Some(uuid) = n.bmc_uuid.as_ref().or(n.uuid.as_ref()) {
            vm = vm.firmware_uuid(uuid);
        }
        infra.create(vm).await;
        if strategy == RunStrategy::Manual {
            let request = http::Request::put(format!(
                "/apis/subresources.kubevirt.io/v1/namespaces/{VM_NAMESPACE}/virtualmachines/{}/start",
                n.name
            ))
            .header("content-type", "application/json")
            .body(b"{}".to_vec())
            .unwrap();
            infra.client.request_text(request).await.unwrap();
        }
    }
    for n in vm_nodes.iter().filter(|n| n.power != MockPower::Off) {
        infra.wait_running(&n.name).await;
    }
    Some(infra)
}
