//! The resolved, validated configuration: what the rest of nodefence consumes.
//!
//! Nothing here is raw TOML: groups and defaults are already merged into each node,
//! credential references are already read, paths are absolute. Building these types
//! is the job of the loader ([`super::load`]); every other module only reads them.
//!
//! One exception: a password kept in a Kubernetes Secret (`password_secret`) cannot be
//! read without cluster access, so the loader leaves it *pending*
//! ([`SecretSource::SecretPending`], [`Credential::is_pending`]) and
//! [`super::resolve_secrets`] fills it in. No driver is ever built from a pending
//! credential ([`crate::power::registry::DriverFactory`] refuses it).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use secrecy::SecretString;
use url::Url;

use crate::power::confirm::ConfirmPolicy;

/// Everything `nodefence` needs to run, loaded from `nodefence.toml` and the inventory
/// it names.
#[derive(Debug, Clone)]
pub struct Config {
    pub agent: AgentConfig,
    pub inventory: Inventory,
    /// The agent config file this was loaded from.
    pub config_path: PathBuf,
    /// The inventory file this was loaded from.
    pub inventory_path: PathBuf,
    /// Things that are allowed but deserve an operator's eye (inline passwords,
    /// `insecure = true`). Logged once at start, printed by `validate`.
    pub warnings: Vec<String>,
}

/// Agent-wide settings (`nodefence.toml`).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    /// Absolute path of the inventory file (relative paths are resolved against the
    /// directory of `nodefence.toml`).
    pub inventory: PathBuf,
    pub power: PowerSettings,
    pub security: SecuritySettings,
    /// `[remediation]`: requests from the cluster's remediation machinery.
    pub remediation: RemediationSettings,
    /// `[policy]`: when machines are powered off and nodes released (`nodefence run`).
    pub policy: crate::engine::Policy,
    /// `[metal3]`: BareMetalHosts as an inventory source.
    pub metal3: Metal3Settings,
}

/// `[metal3]` in `nodefence.toml`: entries built from Metal3 BareMetalHosts
/// ([`crate::metal3`]), merged with the inventory's (an inventory entry wins).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Metal3Settings {
    /// Read BareMetalHosts (with cluster access: `run`, `status`, `validate --cluster`).
    pub hosts: bool,
    /// The namespaces whose BareMetalHosts are read (required with `hosts`: which
    /// machines nodefence may power off is written down, never guessed).
    pub namespaces: Vec<String>,
    /// Honour a host's `spec.bmc.disableCertificateVerification` (warned, as
    /// `insecure` is); without it such a host gets no entry.
    pub allow_insecure: bool,
    /// The CA bundle that signed the BMC certificates of BareMetalHost entries
    /// (absolute); the system's trust store without it.
    pub ca_file: Option<PathBuf>,
    /// The fencing policy of BareMetalHost entries: `[policy]` over the defaults of a
    /// BMC driver (an inventory entry for the node sets its own).
    pub policy: crate::engine::Policy,
    /// How often the running daemon lists the hosts again (with its configuration
    /// check; `None`: [`DEFAULT_METAL3_RESYNC`], zero: never): a host added, removed or
    /// changed, or a Node matched to one, is a reload like a changed file.
    pub resync_interval: Option<std::time::Duration>,
}

/// `[metal3] resync_interval` when not written.
pub const DEFAULT_METAL3_RESYNC: std::time::Duration = std::time::Duration::from_secs(60);

impl Metal3Settings {
    /// The resync period, `None` when the hosts are read only at start-up and on a
    /// reload caused by the files.
    pub fn resync(&self) -> Option<std::time::Duration> {
        if !self.hosts {
            return None;
        }
        Some(self.resync_interval.unwrap_or(DEFAULT_METAL3_RESYNC)).filter(|d| !d.is_zero())
    }
}

/// `[remediation]` in `nodefence.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RemediationSettings {
    /// Watch `NodeFenceRemediation` requests (NodeHealthCheck, Cluster API's
    /// MachineHealthCheck) and report on them; needs the `remediation` component.
    pub requests: bool,
}

/// `[power]` in `nodefence.toml`.
#[derive(Debug, Clone, PartialEq)]
pub struct PowerSettings {
    /// How "confirmed off/on" is proven after a command (and for an already-off machine).
    pub confirm: ConfirmPolicy,
    /// At most this many BMC requests in flight at once, across all nodes.
    pub max_concurrent_requests: usize,
    /// `nodefence run` checks every BMC this often (reachable, credentials work), so a
    /// broken one is found before it is needed. Zero disables the check.
    pub monitor_interval: std::time::Duration,
}

/// `[security]` in `nodefence.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SecuritySettings {
    /// Inline `password = "..."` in the inventory is refused unless this is true.
    pub allow_inline_passwords: bool,
}

/// Kubernetes node name → how to reach its machine's power control.
#[derive(Debug, Clone, Default)]
pub struct Inventory {
    pub nodes: BTreeMap<String, NodeTarget>,
}

/// Where an entry of the inventory came from (shown by `validate` and `status`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Origin {
    /// Made by code, not read from anywhere (tests, the demo).
    #[default]
    Given,
    /// Written in the inventory file, its table at this line.
    Inventory { file: PathBuf, line: usize },
    /// Built from this Metal3 BareMetalHost.
    BareMetalHost(crate::metal3::HostRef),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Given => f.write_str("-"),
            Origin::Inventory { file, line } => write!(f, "{}:{line}", file.display()),
            Origin::BareMetalHost(h) => write!(f, "BareMetalHost {h}"),
        }
    }
}

/// One inventory node, with defaults and its group already applied.
#[derive(Debug, Clone)]
pub struct NodeTarget {
    /// The Kubernetes node name.
    pub name: String,
    /// Where this entry came from.
    pub origin: Origin,
    /// The Metal3 BareMetalHost that manages this machine's power, when one does:
    /// power commands are then asked of Metal3 (Ironic would undo a direct power-off),
    /// and the Off proof also needs the host's `status.poweredOn`
    /// ([`crate::metal3::power`]).
    pub metal3_host: Option<crate::metal3::HostRef>,
    /// The group it inherited from, if any (for display).
    pub group: Option<String>,
    pub power: PowerSource,
    /// Further power methods, tried in order after `power` (the `fallback` key: a
    /// fencing topology, as Pacemaker's fencing levels). Empty: `power` alone.
    pub fallback: Vec<PowerSource>,
    /// This node's fencing policy, fully resolved: its own `policy`, its group's,
    /// `[policy]`, then the defaults (key by key). Cluster-wide keys (storm
    /// protection, rate limits, the release mechanism) are always `[policy]`'s.
    pub policy: crate::engine::Policy,
}

impl NodeTarget {
    /// The node's BMC credential, if its driver uses one.
    pub fn credential(&self) -> Option<&Credential> {
        self.power.credential()
    }

    /// The node's power methods in order: `power`, then each `fallback` entry.
    pub fn sources(&self) -> impl Iterator<Item = &PowerSource> {
        std::iter::once(&self.power).chain(&self.fallback)
    }

    /// The Kubernetes Secret this node's credentials (its own or a fallback's) still
    /// wait for, if any: the first one.
    pub fn pending_secret(&self) -> Option<&SecretRef> {
        self.pending_secrets().next()
    }

    /// Whether one of the node's power methods finds its machine only through the
    /// Node (see [`PowerSource::needs_node_identity`]).
    pub fn needs_node_identity(&self) -> bool {
        self.sources().any(PowerSource::needs_node_identity)
    }

    /// Every Kubernetes Secret this node's credentials still wait for, in order.
    pub fn pending_secrets(&self) -> impl Iterator<Item = &SecretRef> {
        self.sources()
            .filter_map(|s| match &s.credential()?.source {
                SecretSource::SecretPending(r) => Some(r),
                _ => None,
            })
    }
}

/// The out-of-band power source of one node.
#[derive(Debug, Clone)]
pub enum PowerSource {
    Redfish(RedfishTarget),
    Ipmi(IpmiTarget),
    Aws(AwsTarget),
    Exec(ExecTarget),
    Vsphere(VsphereTarget),
    Kubevirt(KubevirtTarget),
}

impl PowerSource {
    /// The credential of a driver that uses one (aws has none; exec may have none).
    pub fn credential(&self) -> Option<&Credential> {
        match self {
            PowerSource::Redfish(t) => Some(&t.credential),
            PowerSource::Ipmi(t) => Some(&t.credential),
            PowerSource::Exec(t) => t.credential.as_ref(),
            PowerSource::Vsphere(t) => Some(&t.credential),
            PowerSource::Aws(_) | PowerSource::Kubevirt(_) => None,
        }
    }

    /// [`Self::credential`], to fill in.
    pub fn credential_mut(&mut self) -> Option<&mut Credential> {
        match self {
            PowerSource::Redfish(t) => Some(&mut t.credential),
            PowerSource::Ipmi(t) => Some(&mut t.credential),
            PowerSource::Exec(t) => t.credential.as_mut(),
            PowerSource::Vsphere(t) => Some(&mut t.credential),
            PowerSource::Aws(_) | PowerSource::Kubevirt(_) => None,
        }
    }

    /// Whether the machine can only be found through the Node (an EC2 instance with
    /// neither `instance_id` nor `instance_tag`: its providerID names it; a vSphere VM
    /// with neither `bios_uuid`, `moid` nor `vm_path`: its systemUUID names it).
    pub fn needs_node_identity(&self) -> bool {
        match self {
            PowerSource::Aws(t) => t.instance_id.is_none() && t.instance_tag.is_none(),
            PowerSource::Vsphere(t) => t.vm == crate::power::vsphere::locate::VmSelector::NodeUuid,
            _ => false,
        }
    }

    /// The deadlines for talking to this source.
    pub fn timeouts(&self) -> &Timeouts {
        match self {
            PowerSource::Redfish(t) => &t.timeouts,
            PowerSource::Ipmi(t) => &t.timeouts,
            PowerSource::Aws(t) => &t.timeouts,
            PowerSource::Exec(t) => &t.timeouts,
            PowerSource::Vsphere(t) => &t.timeouts,
            PowerSource::Kubevirt(t) => &t.timeouts,
        }
    }

    pub fn driver_name(&self) -> &'static str {
        match self {
            PowerSource::Redfish(_) => "redfish",
            PowerSource::Ipmi(_) => "ipmi",
            PowerSource::Aws(_) => "aws",
            PowerSource::Exec(_) => "exec",
            PowerSource::Vsphere(_) => "vsphere",
            PowerSource::Kubevirt(_) => "kubevirt",
        }
    }
}

/// How a Redfish client authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RedfishAuth {
    /// Try a Redfish session; fall back to HTTP Basic if the service has no usable
    /// SessionService.
    #[default]
    Auto,
    Session,
    Basic,
}

/// A Redfish BMC.
#[derive(Debug, Clone)]
pub struct RedfishTarget {
    /// Base URL of the BMC, scheme http or https, no credentials, no query. The service
    /// root is `<endpoint>/redfish/v1`.
    pub endpoint: Url,
    /// Which ComputerSystem to control (its `Id` or last path segment); required when
    /// the BMC serves more than one.
    pub system_id: Option<String>,
    pub credential: Credential,
    pub auth: RedfishAuth,
    pub tls: TlsSettings,
    pub timeouts: Timeouts,
}

/// An IPMI v2.0 (RMCP+) BMC.
#[derive(Debug, Clone)]
pub struct IpmiTarget {
    /// Host name or IP address of the BMC.
    pub address: String,
    pub port: u16,
    pub credential: Credential,
    /// The cipher suite to use (3 or 17). `None`: 17, then 3 if the BMC refuses 17.
    pub cipher_suite: Option<u8>,
    /// The session privilege to ask for (power control needs OPERATOR or above).
    pub privilege: IpmiPrivilege,
    /// The BMC key K_g (at most 20 bytes), when the BMC has one set.
    pub kg: Option<IpmiKey>,
    pub timeouts: Timeouts,
}

/// The IPMI session privilege level nodefence asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IpmiPrivilege {
    /// OPERATOR: enough for Chassis Control; the least a fencing user needs.
    Operator,
    /// ADMINISTRATOR (the default, as ipmitool's).
    #[default]
    Administrator,
}

impl IpmiPrivilege {
    /// The name used in the inventory and by ipmitool.
    pub fn as_str(self) -> &'static str {
        match self {
            IpmiPrivilege::Operator => "operator",
            IpmiPrivilege::Administrator => "administrator",
        }
    }
}

/// An IPMI BMC key (K_g): raw key bytes, never shown.
#[derive(Clone)]
pub struct IpmiKey(secrecy::SecretSlice<u8>);

impl IpmiKey {
    pub fn new(bytes: Vec<u8>) -> Self {
        Self(bytes.into())
    }

    /// The key bytes (at most 20; checked by the loader).
    pub fn expose(&self) -> &[u8] {
        use secrecy::ExposeSecret;
        self.0.expose_secret()
    }
}

impl fmt::Debug for IpmiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IpmiKey(<redacted>)")
    }
}

/// An AWS EC2 instance. Which one: `instance_id`, else the instance carrying
/// `instance_tag`, else the Node's `spec.providerID` (`aws:///<zone>/<id>`).
#[derive(Debug, Clone)]
pub struct AwsTarget {
    pub instance_id: Option<String>,
    /// Look the instance up by this tag (key, value), `{node}` already substituted.
    pub instance_tag: Option<(String, String)>,
    pub region: Option<String>,
    pub endpoint: Option<Url>,
    /// TLS verification of `endpoint` (a private CA for an EC2-compatible cloud).
    pub tls: TlsSettings,
    /// The shared-file profile to take credentials from (only it: not the
    /// environment, not instance metadata).
    pub profile: Option<String>,
    /// A shared credentials file read instead of `~/.aws/credentials`.
    pub credentials_file: Option<PathBuf>,
    pub timeouts: Timeouts,
}

/// A VM on vCenter Server or a standalone ESXi host (vSphere Web Services API).
#[derive(Debug, Clone)]
pub struct VsphereTarget {
    /// Base URL of vCenter or the ESXi host (`https://vcenter.example.com`); SOAP goes
    /// to `<endpoint>/sdk`.
    pub endpoint: Url,
    /// Which VM: `bios_uuid`, `instance_uuid`, `moid`, `vm_path`, or the Node's
    /// systemUUID.
    pub vm: crate::power::vsphere::locate::VmSelector,
    /// `datacenter`: the inventory path of the datacenter a UUID search is limited
    /// to (`None`: every datacenter).
    pub datacenter: Option<String>,
    pub credential: Credential,
    pub tls: TlsSettings,
    pub timeouts: Timeouts,
}

/// A KubeVirt VirtualMachine in an infrastructure cluster (a guest cluster's node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubevirtTarget {
    /// The infrastructure cluster's kubeconfig (a mounted Secret).
    pub kubeconfig: PathBuf,
    /// The kubeconfig's context to use; `None`: its `current-context`.
    pub context: Option<String>,
    /// The VirtualMachine's namespace (`namespace`, else the context's, else
    /// `default`, as kubectl does).
    pub namespace: String,
    /// The VirtualMachine's name (`vm`, `{node}` replaced; default the node's name).
    pub vm: String,
    pub timeouts: Timeouts,
}

/// An external ClusterLabs-style fence agent, run with its options on standard input.
#[derive(Debug, Clone)]
pub struct ExecTarget {
    pub agent: PathBuf,
    pub options: BTreeMap<String, String>,
    pub credential: Option<Credential>,
    pub timeouts: Timeouts,
}

/// TLS verification for one BMC or group.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct TlsSettings {
    /// A PEM bundle of the private CA(s) that signed the BMC certificates; when set,
    /// only these are trusted.
    pub ca_file: Option<PathBuf>,
    /// Skip certificate verification. Must be written per BMC or group; warned once.
    pub insecure: bool,
    /// Trust exactly the certificate with this SHA-256 (`tls_fingerprint`), whatever
    /// its names and dates; replaces `ca_file`.
    pub fingerprint: Option<crate::tls::CertFingerprint>,
}

/// Deadlines for talking to one power source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Timeouts {
    /// TCP (and TLS) connect.
    pub connect: Duration,
    /// One request, connect included.
    pub request: Duration,
    /// One whole operation (a status query or a command), retries included.
    pub operation: Duration,
    /// Retries after the first attempt, for connect errors, timeouts and 5xx.
    pub retries: u32,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(5),
            request: Duration::from_secs(10),
            operation: Duration::from_secs(60),
            retries: 3,
        }
    }
}

/// Where a password came from; shown instead of the password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    File(PathBuf),
    Env(String),
    Inline,
    /// A key of a Kubernetes Secret, read by [`super::resolve_secrets`].
    Secret(SecretRef),
    /// A key of a Kubernetes Secret not read yet (that needs cluster access): the
    /// credential has no password (and, with `username_secret_key`, no username).
    SecretPending(SecretRef),
}

impl fmt::Display for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretSource::File(p) => write!(f, "file {}", p.display()),
            SecretSource::Env(v) => write!(f, "environment variable {v}"),
            SecretSource::Inline => f.write_str("inline (inventory)"),
            SecretSource::Secret(r) => write!(f, "{r}"),
            SecretSource::SecretPending(r) => write!(f, "{r} (not read yet)"),
        }
    }
}

/// `password_secret`: which Kubernetes Secret, and which of its keys, hold a
/// credential. Holds names only, never a value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SecretRef {
    /// The Secret's namespace; `None` until read when written as a bare name
    /// (nodefence's own namespace, `--namespace`/`POD_NAMESPACE`).
    pub namespace: Option<String>,
    /// The Secret's name.
    pub name: String,
    /// The key holding the password (`password_secret_key`, default "password").
    pub password_key: String,
    /// The key holding the username (`username_secret_key`), when it comes from the
    /// Secret too.
    pub username_key: Option<String>,
    /// Where `password_secret` is written (`file:line:column`), for messages.
    pub written_at: String,
}

impl SecretRef {
    /// `namespace/name`, or `name (in nodefence's namespace)` for a bare name.
    pub fn qualified_name(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => format!("{} (in nodefence's namespace)", self.name),
        }
    }
}

impl fmt::Display for SecretRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Kubernetes Secret {}, key {:?}",
            self.qualified_name(),
            self.password_key
        )
    }
}

/// A username and a password that never prints (`SecretString`'s `Debug` is redacted).
#[derive(Debug, Clone)]
pub struct Credential {
    pub username: String,
    pub password: SecretString,
    pub source: SecretSource,
}

impl Credential {
    /// True while the password waits in an unread Kubernetes Secret: such a
    /// credential must never reach a BMC.
    pub fn is_pending(&self) -> bool {
        matches!(self.source, SecretSource::SecretPending(_))
    }
}
