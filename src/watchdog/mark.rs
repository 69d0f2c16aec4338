//! The fencing mark: the Node annotation with which the leader tells a node's
//! companion to stop feeding its hardware watchdog (the poison pill).
//!
//! `nodefence.io/fencing-mark: "<RFC 3339 time> boot <bootID>"`. The leader writes it
//! when the watchdog level fences the node, naming the boot the Node reported
//! (`status.nodeInfo.bootID`, which the kubelet reads from
//! `/proc/sys/kernel/random/boot_id`): the mark is for that boot only. A machine reset
//! by its watchdog boots with a new ID, so its next companion, reading the same Node
//! before the leader has removed the mark, is not told to stop, and no machine is
//! reset twice for one mark. A mark without a boot ID, or one nodefence cannot parse,
//! applies to every boot: an unreadable poison pill is still a poison pill.
//!
//! The leader also carries the mark in its acknowledgements (the heartbeat); the
//! annotation is what the API server answers a companion that reads its own Node
//! (the feeding rule's second basis) and what a new leader finds.

use std::time::SystemTime;

/// The annotation.
pub const FENCING_MARK_ANNOTATION: &str = "nodefence.io/fencing-mark";

/// One fencing mark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// When the leader wrote it (its wall clock, to the second; for people).
    pub at: Option<SystemTime>,
    /// The boot it is for; `None`: every boot.
    pub boot_id: Option<String>,
}

impl Mark {
    /// The annotation's value.
    pub fn value(at: SystemTime, boot_id: &str) -> String {
        format!(
            "{} boot {}",
            humantime::format_rfc3339_seconds(at),
            boot_id.trim()
        )
    }

    /// Reads an annotation's value. Never fails: what cannot be read applies to
    /// every boot.
    pub fn parse(value: &str) -> Mark {
        let mut parts = value.split_whitespace();
        let at = parts
            .next()
            .and_then(|t| humantime::parse_rfc3339_weak(t).ok());
        let boot_id = match (parts.next(), parts.next(), parts.next()) {
            (Some("boot"), Some(id), None) if !id.is_empty() => Some(id.to_string()),
            _ => None,
        };
        Mark { at, boot_id }
    }

    /// Whether the mark tells the companion of a machine running `boot_id` to stop.
    pub fn applies_to(&self, boot_id: &str) -> bool {
        match &self.boot_id {
            Some(marked) => marked.eq_ignore_ascii_case(boot_id.trim()),
            None => true,
        }
    }
}

/// The node's mark, if its annotations carry one.
pub fn of_node(node: &k8s_openapi::api::core::v1::Node) -> Option<Mark> {
    of_metadata(&node.metadata)
}

/// The mark in a Node's metadata (a metadata-only read of it, as the companion does).
pub fn of_metadata(
    metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<Mark> {
    metadata
        .annotations
        .as_ref()?
        .get(FENCING_MARK_ANNOTATION)
        .map(|v| Mark::parse(v))
}

/// The boot the Node reports (`status.nodeInfo.bootID`), if any.
pub fn boot_id_of(node: &k8s_openapi::api::core::v1::Node) -> Option<&str> {
    node.status
        .as_ref()?
        .node_info
        .as_ref()
        .map(|i| i.boot_id.trim())
        .filter(|b| !b.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_mark_is_for_the_boot_it_names_and_round_trips() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        let value = Mark::value(at, " 3f2a-b00t ");
        assert_eq!(value, "2026-11-18T11:06:40Z boot 3f2a-b00t");
        let mark = Mark::parse(&value);
        assert_eq!(mark.at, Some(at));
        assert_eq!(mark.boot_id.as_deref(), Some("3f2a-b00t"));
        assert!(mark.applies_to("3F2A-B00T\n"));
        assert!(!mark.applies_to("another-boot"));
    }

    #[test]
    fn an_unreadable_mark_applies_to_every_boot() {
        for value in [
            "",
            "yes",
            "2026-11-19T05:46:40Z",
            "2026-11-19T05:46:40Z boot",
            "x boot a b",
        ] {
            let mark = Mark::parse(value);
            assert_eq!(mark.boot_id, None, "{value:?}");
            assert!(mark.applies_to("any"), "{value:?}");
        }
    }
}
