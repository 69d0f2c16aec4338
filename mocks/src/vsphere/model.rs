//! The virtual machines a mock vSphere serves, in the API's own terms: a managed
//! object id (`vm-42` on vCenter), `name`, `config.uuid` (the BIOS/SMBIOS UUID the
//! guest reads, which a Kubernetes Node reports as its systemUUID),
//! `config.instanceUuid` (vCenter's own id), the folder it sits in (inventory path
//! `/<datacenter>/vm/<folder...>`), and `runtime.powerState`.

use std::fmt;

/// `VirtualMachinePowerState` of the vSphere API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmPower {
    PoweredOn,
    PoweredOff,
    Suspended,
}

impl VmPower {
    /// The enum value on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            VmPower::PoweredOn => "poweredOn",
            VmPower::PoweredOff => "poweredOff",
            VmPower::Suspended => "suspended",
        }
    }

    /// Words for a fault message, as vCenter writes them ("Powered off").
    pub fn described(self) -> &'static str {
        match self {
            VmPower::PoweredOn => "Powered on",
            VmPower::PoweredOff => "Powered off",
            VmPower::Suspended => "Suspended",
        }
    }
}

impl fmt::Display for VmPower {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for VmPower {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "poweredOn" | "on" => Ok(VmPower::PoweredOn),
            "poweredOff" | "off" => Ok(VmPower::PoweredOff),
            "suspended" => Ok(VmPower::Suspended),
            other => Err(format!(
                "unknown power state {other:?} (poweredOn, poweredOff or suspended)"
            )),
        }
    }
}

/// One virtual machine to serve. Unset ids are generated at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmSpec {
    pub name: String,
    /// Managed object id; default `vm-<n>` (vCenter) or `<n>` (ESXi), in order.
    pub moid: Option<String>,
    /// `config.uuid`; default random.
    pub bios_uuid: Option<String>,
    /// `config.instanceUuid`; default random.
    pub instance_uuid: Option<String>,
    /// Folders under the datacenter's `vm` folder (`["k8s", "workers"]`).
    pub folders: Vec<String>,
    pub power: VmPower,
    /// The datacenter it is in; default the mock's (`DC0`).
    pub datacenter: Option<String>,
}

impl VmSpec {
    /// A powered-on VM called `name` in the datacenter's `vm` folder.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            moid: None,
            bios_uuid: None,
            instance_uuid: None,
            folders: Vec::new(),
            power: VmPower::PoweredOn,
            datacenter: None,
        }
    }

    /// Puts it in another datacenter than the mock's first (vCenter only: a second
    /// datacenter is `datacenter-3`, and so on).
    pub fn datacenter(mut self, name: impl Into<String>) -> Self {
        self.datacenter = Some(name.into());
        self
    }

    pub fn moid(mut self, moid: impl Into<String>) -> Self {
        self.moid = Some(moid.into());
        self
    }

    pub fn bios_uuid(mut self, uuid: impl Into<String>) -> Self {
        self.bios_uuid = Some(uuid.into());
        self
    }

    pub fn instance_uuid(mut self, uuid: impl Into<String>) -> Self {
        self.instance_uuid = Some(uuid.into());
        self
    }

    /// The folder path under `vm`, `/`-separated (`"k8s/workers"`).
    pub fn folder(mut self, path: &str) -> Self {
        self.folders = split_path(path);
        self
    }

    pub fn power(mut self, power: VmPower) -> Self {
        self.power = power;
        self
    }
}

/// A path's non-empty `/`-separated parts (leading and trailing slashes ignored, as
/// `SearchIndex.FindByInventoryPath` ignores them).
pub fn split_path(path: &str) -> Vec<String> {
    path.split('/')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// A served VM, as the mock holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmState {
    pub moid: String,
    pub name: String,
    pub bios_uuid: String,
    pub instance_uuid: String,
    pub folders: Vec<String>,
    pub power: VmPower,
    /// The datacenter's name.
    pub datacenter: String,
}

impl VmState {
    /// The VM for the admin API.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "moid": self.moid,
            "name": self.name,
            "bios_uuid": self.bios_uuid,
            "instance_uuid": self.instance_uuid,
            "folder": self.folders.join("/"),
            "datacenter": self.datacenter,
            "power": self.power.as_str(),
        })
    }

    /// `<datacenter>/vm/<folders>/<name>`, without a leading slash.
    pub fn inventory_path(&self) -> String {
        let mut parts = vec![self.datacenter.clone(), "vm".to_string()];
        parts.extend(self.folders.iter().cloned());
        parts.push(self.name.clone());
        parts.join("/")
    }
}

/// Which product the mock answers as: the managed object ids and `about` differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Product {
    /// vCenter Server (`apiType` VirtualCenter, `vm-NN` ids, `group-d1` root).
    #[default]
    VCenter,
    /// A standalone ESXi host (`apiType` HostAgent, `ha-*` ids, numeric VM ids,
    /// one datacenter `ha-datacenter`).
    Esxi,
}

impl Product {
    pub fn root_folder(self) -> &'static str {
        match self {
            Product::VCenter => "group-d1",
            Product::Esxi => "ha-folder-root",
        }
    }
    pub fn property_collector(self) -> &'static str {
        match self {
            Product::VCenter => "propertyCollector",
            Product::Esxi => "ha-property-collector",
        }
    }
    pub fn session_manager(self) -> &'static str {
        match self {
            Product::VCenter => "SessionManager",
            Product::Esxi => "ha-sessionmgr",
        }
    }
    pub fn view_manager(self) -> &'static str {
        "ViewManager"
    }
    pub fn search_index(self) -> &'static str {
        match self {
            Product::VCenter => "SearchIndex",
            Product::Esxi => "ha-searchindex",
        }
    }
    pub fn api_type(self) -> &'static str {
        match self {
            Product::VCenter => "VirtualCenter",
            Product::Esxi => "HostAgent",
        }
    }
    pub fn full_name(self) -> &'static str {
        match self {
            Product::VCenter => "VMware vCenter Server 8.0.2 build-22385739",
            Product::Esxi => "VMware ESXi 8.0.2 build-22380479",
        }
    }
    /// The datacenter name in inventory paths.
    pub fn default_datacenter(self) -> &'static str {
        match self {
            Product::VCenter => "DC0",
            Product::Esxi => "ha-datacenter",
        }
    }
    /// The managed object id of the `n`th datacenter (from 1).
    pub fn datacenter_moid(self, n: usize) -> String {
        match self {
            Product::VCenter => format!("datacenter-{}", n + 1),
            Product::Esxi => "ha-datacenter".to_string(),
        }
    }

    /// The managed object id of the `n`th VM (from 1).
    pub fn vm_moid(self, n: usize) -> String {
        match self {
            Product::VCenter => format!("vm-{}", 40 + n),
            Product::Esxi => n.to_string(),
        }
    }
}

/// The API version the mock reports (`about.apiVersion`).
pub const API_VERSION: &str = "8.0.2.0";
