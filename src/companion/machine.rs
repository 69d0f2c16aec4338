//! What the companion's beats say of its machine besides its boot: whether it is a
//! virtual machine. A hypervisor that pauses a guest (a live migration's last step,
//! a snapshot, an overcommitted host, an operator's `virsh suspend`) pauses its
//! virtual watchdog with it, and no check inside the guest can tell: the leader's
//! wait would end while the guest sleeps, and the guest resume with its volumes
//! released. The leader refuses the watchdog level for such a machine unless the
//! operator opted its node in (the operator guide, "Watchdog fencing").
//!
//! Detected as `systemd-detect-virt` does for virtual machines: the CPU's
//! `hypervisor` flag (x86), `/sys/hypervisor/type` (Xen), and the firmware's vendor
//! and product (`/sys/class/dmi/id`).

use std::path::Path;

/// What the companion says of its machine.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum MachineKind {
    /// Found out at start ([`detect`]).
    #[default]
    Detect,
    /// Bare metal, as the operator or a test says.
    Physical,
    /// A virtual machine, and how it was found out.
    Virtual(String),
}

impl MachineKind {
    /// Whether it is a virtual machine, and how that was found out.
    pub fn resolve(&self) -> Option<String> {
        match self {
            MachineKind::Detect => detect(Path::new("/")),
            MachineKind::Physical => None,
            MachineKind::Virtual(how) => Some(how.clone()),
        }
    }
}

/// Firmware vendors and products of virtual machines.
const VIRTUAL_FIRMWARE: &[&str] = &[
    "qemu",
    "kvm",
    "vmware",
    "virtualbox",
    "innotek",
    "xen",
    "bochs",
    "parallels",
    "bhyve",
    "amazon ec2",
    "google compute engine",
    "openstack",
    "kubevirt",
    "microsoft corporation virtual machine",
];

/// Whether the machine whose filesystem is at `root` is a virtual one: how that shows,
/// or `None`.
pub fn detect(root: &Path) -> Option<String> {
    let read = |path: &str| std::fs::read_to_string(root.join(path)).ok();
    if let Some(cpuinfo) = read("proc/cpuinfo")
        && cpuinfo
            .lines()
            .filter(|l| l.starts_with("flags"))
            .any(|l| l.split_whitespace().any(|f| f == "hypervisor"))
    {
        return Some("the CPU's hypervisor flag (/proc/cpuinfo)".into());
    }
    if let Some(kind) = read("sys/hypervisor/type").filter(|t| !t.trim().is_empty()) {
        return Some(format!("/sys/hypervisor/type says {}", kind.trim()));
    }
    let firmware: Vec<String> = ["sys_vendor", "product_name", "board_vendor"]
        .iter()
        .filter_map(|f| read(&format!("sys/class/dmi/id/{f}")))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    let joined = firmware.join(" ").to_ascii_lowercase();
    VIRTUAL_FIRMWARE
        .iter()
        .any(|known| joined.contains(known))
        .then(|| {
            format!(
                "its firmware says \"{}\" (/sys/class/dmi/id)",
                firmware.join(" ")
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap_or(dir.path()))
                .unwrap_or_else(|e| panic!("{e}"));
            std::fs::write(path, text).unwrap_or_else(|e| panic!("{e}"));
        }
        dir
    }

    #[test]
    fn a_virtual_machine_shows_in_its_cpu_flags_or_its_firmware() {
        let kvm = root(&[(
            "proc/cpuinfo",
            "processor\t: 0\nflags\t\t: fpu vme de pse tsc msr hypervisor lahf_lm\n",
        )]);
        assert!(detect(kvm.path()).is_some_and(|how| how.contains("hypervisor flag")));
        let vmware = root(&[
            ("proc/cpuinfo", "flags\t\t: fpu vme\n"),
            ("sys/class/dmi/id/sys_vendor", "VMware, Inc.\n"),
            ("sys/class/dmi/id/product_name", "VMware7,1\n"),
        ]);
        assert!(detect(vmware.path()).is_some_and(|how| how.contains("VMware, Inc.")));
        let xen = root(&[("sys/hypervisor/type", "xen\n")]);
        assert!(detect(xen.path()).is_some_and(|how| how.contains("xen")));
        let metal = root(&[
            ("proc/cpuinfo", "flags\t\t: fpu vme de pse tsc msr\n"),
            ("sys/class/dmi/id/sys_vendor", "Dell Inc.\n"),
            ("sys/class/dmi/id/product_name", "PowerEdge R650\n"),
        ]);
        assert_eq!(detect(metal.path()), None);
        assert_eq!(
            detect(&metal.path().join("absent")),
            None,
            "nothing readable"
        );
    }
}
