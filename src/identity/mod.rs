//! The identity cross-check: proof that a node's power source controls the node's own
//! machine, so a mis-mapped inventory (node A's entry pointing at machine B's BMC) can
//! never lead to releasing A's volumes. Pure: no I/O; callers bring both sides.
//!
//! # What is compared
//!
//! - **The cluster's side** ([`NodeIdentity`]): `status.nodeInfo.systemUUID` (the SMBIOS
//!   UUID the kubelet read from the machine) and `spec.providerID`.
//! - **The power source's side** ([`MachineIdentity`]): the Redfish
//!   `ComputerSystem.UUID`, the IPMI system GUID, or a cloud instance id.
//!
//! # The rules
//!
//! A check ends in [`IdentityCheck::Match`], [`IdentityCheck::Mismatch`] or
//! [`IdentityCheck::Unknown`]. Only a match proves anything; unknown proves nothing
//! (it is not a mismatch either).
//!
//! 1. UUIDs are parsed first: case, hyphens, braces and a `urn:uuid:` prefix do not
//!    matter (`4C4C4544-...`, `{4c4c4544...}` and `4c4c4544...` are the same UUID).
//!    A value on either side that does not parse is **unknown**, and the message says
//!    which side.
//! 2. Two UUIDs **match** in exactly three ways, and nothing looser (no other byte
//!    permutation, no prefix or partial match):
//!    - [`Equivalence::Exact`]: the same 16 bytes;
//!    - [`Equivalence::FieldsSwapped`]: the first three fields (4, 2 and 2 bytes) are
//!      byte-swapped and the last 8 bytes are equal; SMBIOS 2.6+ stores those fields
//!      little-endian and firmware and tools disagree on whether to swap them back;
//!    - [`Equivalence::Reversed`]: all 16 bytes reversed, as some IPMI
//!      `Get System GUID` replies are.
//!
//!    Any other pair of valid UUIDs is a **mismatch**.
//! 3. Firmware placeholders ([`PLACEHOLDER_UUIDS`]: the nil UUID, all-`FF`, and the
//!    AMI/Supermicro default `03000200-0400-0500-0006-000700080009`) ship on many
//!    machines and prove nothing: on either side, in any of the accepted byte orders,
//!    the result is **unknown**, even when both sides report the same placeholder.
//! 4. A node without a `systemUUID` is **unknown** ("node reports no systemUUID").
//! 5. Instance ids (EC2) are compared with the last path segment of the node's
//!    `providerID` when it starts with `aws://` (`aws:///us-east-1a/i-0abc...`):
//!    exact, case-sensitive equality matches, anything else is a mismatch. A node with
//!    no providerID, or a non-AWS one, is **unknown**.
//! 6. A power source that cannot report an identity
//!    ([`MachineIdentity::Unavailable`]) is **unknown**, with its reason.

use std::fmt;

use k8s_openapi::api::core::v1::Node;
use uuid::Uuid;

/// UUIDs that firmware ships on many machines; they identify nothing. Matched in every
/// accepted byte order.
pub const PLACEHOLDER_UUIDS: [&str; 3] = [
    // nil: "not set" in SMBIOS.
    "00000000-0000-0000-0000-000000000000",
    // all ones: "not present, not settable" in SMBIOS.
    "ffffffff-ffff-ffff-ffff-ffffffffffff",
    // The AMI BIOS default left in place by many Supermicro and white-box boards.
    "03000200-0400-0500-0006-000700080009",
];

/// The longest raw value quoted in a message (a BMC can send anything).
const MAX_QUOTED: usize = 64;

/// What the cluster says about a node's machine.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct NodeIdentity {
    /// `status.nodeInfo.systemUUID`; `None` when absent or empty.
    pub system_uuid: Option<String>,
    /// `spec.providerID`; `None` when absent or empty.
    pub provider_id: Option<String>,
}

impl NodeIdentity {
    /// The identity a Node object records. Empty strings count as absent.
    pub fn from_node(node: &Node) -> Self {
        let non_empty = |s: Option<&String>| {
            s.map(|v| v.trim())
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        Self {
            system_uuid: non_empty(
                node.status
                    .as_ref()
                    .and_then(|s| s.node_info.as_ref())
                    .map(|i| &i.system_uuid),
            ),
            provider_id: non_empty(node.spec.as_ref().and_then(|s| s.provider_id.as_ref())),
        }
    }
}

/// What an out-of-band source says about the machine it controls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MachineIdentity {
    /// The machine's SMBIOS UUID, as reported (not normalised).
    Uuid(String),
    /// A cloud instance id (`i-0abc...`).
    InstanceId(String),
    /// The source cannot tell; why, for operators.
    Unavailable(String),
}

impl fmt::Display for MachineIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MachineIdentity::Uuid(u) => write!(f, "uuid {}", quoted(u)),
            MachineIdentity::InstanceId(i) => write!(f, "instance {}", quoted(i)),
            MachineIdentity::Unavailable(why) => write!(f, "unavailable ({why})"),
        }
    }
}

/// How two identities were found to be the same machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Equivalence {
    /// The same 16 bytes.
    Exact,
    /// The first three fields' byte order differs (SMBIOS 2.6+ little-endian vs
    /// big-endian); the last 8 bytes are equal.
    FieldsSwapped,
    /// All 16 bytes reversed, as some IPMI Get System GUID replies are.
    Reversed,
    /// The same cloud instance id.
    InstanceId,
}

impl Equivalence {
    /// A stable name for JSON output: `exact`, `fields-swapped`, `reversed`, `instance-id`.
    pub fn as_str(self) -> &'static str {
        match self {
            Equivalence::Exact => "exact",
            Equivalence::FieldsSwapped => "fields-swapped",
            Equivalence::Reversed => "reversed",
            Equivalence::InstanceId => "instance-id",
        }
    }

    fn explain(self) -> &'static str {
        match self {
            Equivalence::Exact => "the power source reports the node's systemUUID",
            Equivalence::FieldsSwapped => {
                "the power source reports the node's systemUUID with its first three fields byte-swapped (SMBIOS byte order; same machine)"
            }
            Equivalence::Reversed => {
                "the power source reports the node's systemUUID with all 16 bytes reversed (IPMI GUID byte order; same machine)"
            }
            Equivalence::InstanceId => {
                "the power source controls the instance named by the node's providerID"
            }
        }
    }
}

/// The result of comparing a node's identity with its power source's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityCheck {
    /// The power source controls the node's own machine.
    Match(Equivalence),
    /// The power source controls another machine. Both values as reported.
    Mismatch { node: String, machine: String },
    /// Nothing could be proven either way; why, for operators.
    Unknown(String),
}

impl IdentityCheck {
    /// True only for a positive match.
    pub fn is_match(&self) -> bool {
        matches!(self, IdentityCheck::Match(_))
    }

    /// True only for a proven mismatch.
    pub fn is_mismatch(&self) -> bool {
        matches!(self, IdentityCheck::Mismatch { .. })
    }

    /// `match`, `mismatch` or `unknown` (metric label, JSON field).
    pub fn label(&self) -> &'static str {
        match self {
            IdentityCheck::Match(_) => "match",
            IdentityCheck::Mismatch { .. } => "mismatch",
            IdentityCheck::Unknown(_) => "unknown",
        }
    }

    /// One sentence for an operator.
    pub fn describe(&self) -> String {
        match self {
            IdentityCheck::Match(e) => format!("identity confirmed: {}", e.explain()),
            IdentityCheck::Mismatch { node, machine } => format!(
                "identity mismatch: the node reports {} but its power source controls machine {}; \
                 the node's inventory entry (endpoint, system_id) most likely points at another \
                 machine: fix it",
                quoted(node),
                quoted(machine)
            ),
            IdentityCheck::Unknown(why) => format!("identity not verified: {why}"),
        }
    }
}

impl fmt::Display for IdentityCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// Compares what the cluster says about a node with what its power source says about
/// the machine it controls, by the rules in the [module documentation](self).
pub fn check(node: &NodeIdentity, machine: &MachineIdentity) -> IdentityCheck {
    match machine {
        MachineIdentity::Unavailable(why) => IdentityCheck::Unknown(why.clone()),
        MachineIdentity::InstanceId(id) => check_instance(node, id),
        MachineIdentity::Uuid(raw) => check_uuid(node, raw),
    }
}

fn check_uuid(node: &NodeIdentity, machine_raw: &str) -> IdentityCheck {
    let Some(node_raw) = node.system_uuid.as_deref().filter(|s| !s.trim().is_empty()) else {
        return IdentityCheck::Unknown("node reports no systemUUID".into());
    };
    let Some(node_uuid) = parse(node_raw) else {
        return IdentityCheck::Unknown(format!(
            "the node's systemUUID {} is not a UUID",
            quoted(node_raw)
        ));
    };
    let Some(machine_uuid) = parse(machine_raw) else {
        return IdentityCheck::Unknown(format!(
            "the power source's UUID {} is not a UUID",
            quoted(machine_raw)
        ));
    };
    if let Some(p) = placeholder(&node_uuid) {
        return IdentityCheck::Unknown(format!(
            "the node's systemUUID {} is the firmware placeholder {p}, shared by many machines; it proves nothing",
            quoted(node_raw)
        ));
    }
    if let Some(p) = placeholder(&machine_uuid) {
        return IdentityCheck::Unknown(format!(
            "the power source's UUID {} is the firmware placeholder {p}, shared by many machines; it proves nothing",
            quoted(machine_raw)
        ));
    }
    match equivalence(&node_uuid, &machine_uuid) {
        Some(e) => IdentityCheck::Match(e),
        None => IdentityCheck::Mismatch {
            node: node_raw.trim().to_string(),
            machine: machine_raw.trim().to_string(),
        },
    }
}

fn check_instance(node: &NodeIdentity, id: &str) -> IdentityCheck {
    if id.is_empty() {
        return IdentityCheck::Unknown("the power source reported an empty instance id".into());
    }
    let Some(provider_id) = node.provider_id.as_deref().filter(|s| !s.is_empty()) else {
        return IdentityCheck::Unknown("node reports no providerID".into());
    };
    let Some(path) = provider_id.strip_prefix("aws://") else {
        return IdentityCheck::Unknown(format!(
            "the node's providerID {} is not an AWS one (aws:///<zone>/<instance-id>); an instance id cannot be compared with it",
            quoted(provider_id)
        ));
    };
    let Some(segment) = path.rsplit('/').next().filter(|s| !s.is_empty()) else {
        return IdentityCheck::Unknown(format!(
            "the node's providerID {} names no instance",
            quoted(provider_id)
        ));
    };
    if segment == id {
        IdentityCheck::Match(Equivalence::InstanceId)
    } else {
        IdentityCheck::Mismatch {
            node: segment.to_string(),
            machine: id.to_string(),
        }
    }
}

fn parse(raw: &str) -> Option<Uuid> {
    Uuid::parse_str(raw.trim()).ok()
}

/// How `machine` is `node` in one of the accepted byte orders, if it is.
fn equivalence(node: &Uuid, machine: &Uuid) -> Option<Equivalence> {
    if node == machine {
        return Some(Equivalence::Exact);
    }
    if Uuid::from_bytes_le(*node.as_bytes()) == *machine {
        return Some(Equivalence::FieldsSwapped);
    }
    let mut reversed = *node.as_bytes();
    reversed.reverse();
    if reversed == *machine.as_bytes() {
        return Some(Equivalence::Reversed);
    }
    None
}

/// The placeholder `u` is (in any accepted byte order), if any.
fn placeholder(u: &Uuid) -> Option<&'static str> {
    PLACEHOLDER_UUIDS.into_iter().find(|p| {
        Uuid::parse_str(p)
            .ok()
            .is_some_and(|p| equivalence(&p, u).is_some())
    })
}

/// `"value"`, shortened when a source sent something long.
fn quoted(raw: &str) -> String {
    format!("\"{}\"", crate::untrusted::text(raw.trim(), MAX_QUOTED))
}

#[cfg(test)]
mod tests;
