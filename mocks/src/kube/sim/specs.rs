//! What a test or the demo asks the simulation to run: machines ([`NodeSpec`]) and
//! stateful applications ([`WorkloadSpec`]), as builders with stock defaults.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

/// CSI driver of the simulated storage.
pub const DEFAULT_DRIVER: &str = "csi.fake.nodefence.io";
/// StorageClass name of the simulated storage.
pub const DEFAULT_STORAGE_CLASS: &str = "fake-csi";
/// kubelet version reported by simulated nodes.
pub const DEFAULT_KUBELET_VERSION: &str = "v1.33.1";

/// One machine with a kubelet.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSpec {
    pub(crate) name: String,
    pub(crate) system_uuid: Option<String>,
    pub(crate) control_plane: bool,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) internal_ip: Option<String>,
    pub(crate) kubelet_version: String,
    pub(crate) zone: Option<String>,
    pub(crate) provider_id: Option<String>,
    pub(crate) status_after_lease: Duration,
    pub(crate) clock_behind: Duration,
}

impl NodeSpec {
    /// A worker node named `name` (also its hostname).
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            system_uuid: None,
            control_plane: false,
            labels: BTreeMap::new(),
            internal_ip: None,
            kubelet_version: DEFAULT_KUBELET_VERSION.to_string(),
            zone: None,
            provider_id: None,
            status_after_lease: Duration::ZERO,
            clock_behind: Duration::ZERO,
        }
    }

    /// `status.nodeInfo.systemUUID` (the SMBIOS UUID the BMC also reports); random
    /// when not given.
    pub fn system_uuid(mut self, uuid: impl Into<String>) -> Self {
        self.system_uuid = Some(uuid.into());
        self
    }

    /// `spec.providerID` (`aws:///us-east-1a/i-0123...`), as a cloud provider sets it.
    pub fn provider_id(mut self, id: impl Into<String>) -> Self {
        self.provider_id = Some(id.into());
        self
    }

    /// A kubeadm control-plane node: label `node-role.kubernetes.io/control-plane`
    /// and taint `node-role.kubernetes.io/control-plane:NoSchedule`.
    pub fn control_plane(mut self, yes: bool) -> Self {
        self.control_plane = yes;
        self
    }

    /// Extra labels.
    pub fn labels<I, K, V>(mut self, labels: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        self.labels
            .extend(labels.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// The InternalIP address (10.0.0.x by order of addition when not given).
    pub fn internal_ip(mut self, ip: impl Into<String>) -> Self {
        self.internal_ip = Some(ip.into());
        self
    }

    /// `status.nodeInfo.kubeletVersion`.
    pub fn kubelet_version(mut self, version: impl Into<String>) -> Self {
        self.kubelet_version = version.into();
        self
    }

    /// `topology.kubernetes.io/zone` (zones matter to the node lifecycle
    /// controller's disruption modes).
    pub fn zone(mut self, zone: impl Into<String>) -> Self {
        self.zone = Some(zone.into());
        self
    }

    /// The kubelet computes its node status this long after each Lease renewal
    /// (simulated time, within one `node_status_update_frequency`) instead of
    /// together with it. A kubelet starts both loops at once, but each waits its
    /// period plus up to 4 % jitter, so on a node that has run for a while they have
    /// drifted apart, and nodes started at different times are out of phase with each
    /// other: how long a replacement pod waits for `volumesInUse` depends on it. Only
    /// the first boot is offset; a reboot restarts both loops together.
    pub fn status_after_lease(mut self, offset: Duration) -> Self {
        self.status_after_lease = offset;
        self
    }

    /// The machine's clock runs this far behind the control plane's (no NTP): its
    /// kubelet writes Lease `renewTime`s and status heartbeats that look that much
    /// older than they are.
    pub fn clock_behind(mut self, behind: Duration) -> Self {
        self.clock_behind = behind;
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

/// A StatefulSet-like application: replicas `<name>-0..N-1`, each with its own
/// ReadWriteOnce claim `data-<name>-<i>` on a CSI volume.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadSpec {
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) replicas: u32,
    pub(crate) image: String,
    pub(crate) driver: String,
    pub(crate) storage_class: String,
    pub(crate) storage: String,
    pub(crate) grace_seconds: i64,
    pub(crate) tolerations: Option<Vec<Value>>,
    pub(crate) node_selector: BTreeMap<String, String>,
}

impl WorkloadSpec {
    /// One replica of `name` in `namespace`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            replicas: 1,
            image: "docker.io/library/postgres:16.4".to_string(),
            driver: DEFAULT_DRIVER.to_string(),
            storage_class: DEFAULT_STORAGE_CLASS.to_string(),
            storage: "1Gi".to_string(),
            grace_seconds: 30,
            tolerations: None,
            node_selector: BTreeMap::new(),
        }
    }

    pub fn replicas(mut self, replicas: u32) -> Self {
        self.replicas = replicas;
        self
    }

    pub fn image(mut self, image: impl Into<String>) -> Self {
        self.image = image.into();
        self
    }

    /// CSI driver (and VolumeAttachment `attacher`) of the claims' volumes.
    pub fn driver(mut self, driver: impl Into<String>) -> Self {
        self.driver = driver.into();
        self
    }

    pub fn storage_class(mut self, class: impl Into<String>) -> Self {
        self.storage_class = class.into();
        self
    }

    /// Requested size of each claim, e.g. "10Gi".
    pub fn storage(mut self, size: impl Into<String>) -> Self {
        self.storage = size.into();
        self
    }

    /// `terminationGracePeriodSeconds` of the pods (30).
    pub fn termination_grace_period(mut self, seconds: i64) -> Self {
        self.grace_seconds = seconds;
        self
    }

    /// The pods' own tolerations (the admission plugin still adds the default
    /// `not-ready`/`unreachable` ones unless these cover them).
    pub fn tolerations(mut self, tolerations: Vec<Value>) -> Self {
        self.tolerations = Some(tolerations);
        self
    }

    /// `spec.nodeSelector` of the pods.
    pub fn node_selector<I, K, V>(mut self, selector: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        self.node_selector
            .extend(selector.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name of replica `i`.
    pub fn pod_name(&self, i: u32) -> String {
        format!("{}-{i}", self.name)
    }

    /// The claim of replica `i`.
    pub fn claim_name(&self, i: u32) -> String {
        format!("data-{}-{i}", self.name)
    }
}
