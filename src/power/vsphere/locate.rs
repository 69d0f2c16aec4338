//! Which VM: by BIOS UUID (`SearchIndex.FindAllByUuid`, or `FindByUuid`, with
//! `vmSearch` true and `instanceUuid` false: `config.uuid`, the UUID the guest reads from SMBIOS and the
//! kubelet reports as the Node's systemUUID), by instance UUID (the same calls with
//! `instanceUuid` true: `config.instanceUuid`, vCenter's own id of the VM), by managed
//! object id, or by inventory path (`SearchIndex.FindByInventoryPath`). A UUID search
//! may be limited to one datacenter (the calls' `datacenter` argument).
//!
//! A BIOS UUID is tried as written, then with its first three fields byte-swapped:
//! older guests and VM hardware versions report the SMBIOS UUID in the other byte
//! order than vSphere's `config.uuid` (the rule [`crate::identity`] applies too).
//! Finding the VM proves nothing about whose it is: the identity check compares the
//! found VM's `config.uuid` with the Node's systemUUID.

use uuid::Uuid;

/// How the inventory names a VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VmSelector {
    /// The Node's systemUUID, once the cluster reports it.
    NodeUuid,
    /// `bios_uuid`: this BIOS UUID.
    BiosUuid(String),
    /// `instance_uuid`: this instance UUID (`config.instanceUuid`).
    InstanceUuid(String),
    /// `moid`: this managed object id (`vm-42`).
    Moid(String),
    /// `vm_path`: this inventory path (`DC0/vm/k8s/worker-1`).
    Path(String),
}

impl std::fmt::Display for VmSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VmSelector::NodeUuid => f.write_str("the VM with the Node's systemUUID"),
            VmSelector::BiosUuid(u) => write!(f, "bios_uuid {u}"),
            VmSelector::InstanceUuid(u) => write!(f, "instance_uuid {u}"),
            VmSelector::Moid(m) => write!(f, "moid {m}"),
            VmSelector::Path(p) => write!(f, "vm_path {p}"),
        }
    }
}

/// The UUIDs to look a BIOS UUID up by, in order: as written (normalised, lower
/// case with hyphens), then with its first three fields byte-swapped (when that
/// differs). `None` when `raw` is not a UUID.
pub fn lookup_forms(raw: &str) -> Option<Vec<String>> {
    let parsed = Uuid::parse_str(raw.trim()).ok()?;
    let swapped = Uuid::from_bytes_le(*parsed.as_bytes());
    let mut forms = vec![parsed.hyphenated().to_string()];
    if swapped != parsed {
        forms.push(swapped.hyphenated().to_string());
    }
    Some(forms)
}

/// An inventory path as `FindByInventoryPath` takes it: no leading or trailing
/// slash, no empty parts.
pub fn normalise_path(path: &str) -> String {
    path.split('/')
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_uuid_is_looked_up_as_written_then_fields_swapped() {
        let forms = lookup_forms("{4213E0F1-2A3B-4C5D-8E9F-A0B1C2D3E4F5}").unwrap();
        assert_eq!(
            forms,
            vec![
                "4213e0f1-2a3b-4c5d-8e9f-a0b1c2d3e4f5".to_string(),
                "f1e01342-3b2a-5d4c-8e9f-a0b1c2d3e4f5".to_string()
            ]
        );
        assert!(lookup_forms("not-a-uuid").is_none());
        let symmetric = lookup_forms("11111111-2222-3333-4444-555555555555").unwrap();
        assert_eq!(symmetric.len(), 1);
    }

    #[test]
    fn paths_lose_their_outer_and_double_slashes() {
        assert_eq!(
            normalise_path("/DC0/vm//k8s/worker-1/"),
            "DC0/vm/k8s/worker-1"
        );
    }
}
