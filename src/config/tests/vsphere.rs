//! `driver = "vsphere"`: what it requires, how the VM is named, and the errors, each
//! at its file:line and naming the field, never quoting a password.

use super::*;
use crate::config::PowerSource;
use crate::power::vsphere::locate::VmSelector;

fn vsphere_node(extra: &[&str]) -> String {
    let mut l = vec![
        "[nodes.vm-1]",                               // 1
        "driver = \"vsphere\"",                       // 2
        "endpoint = \"https://vcenter.example.com\"", // 3
        "username = \"fence@vsphere.local\"",         // 4
        "password_file = \"secrets/bmc-password\"",   // 5
        "ca_file = \"ca.pem\"",                       // 6
    ];
    l.extend_from_slice(extra);
    lines(&l)
}

fn selector(config: &Config) -> VmSelector {
    match &config.inventory.nodes["vm-1"].power {
        PowerSource::Vsphere(t) => t.vm.clone(),
        other => panic!("a vsphere node, got {other:?}"),
    }
}

#[test]
fn the_vm_is_named_by_the_node_uuid_or_one_setting() {
    let f = Fixture::new();
    let config = f.ok(&vsphere_node(&[]));
    assert_eq!(selector(&config), VmSelector::NodeUuid);
    let node = &config.inventory.nodes["vm-1"];
    assert!(node.needs_node_identity());
    assert!(
        node.policy.require_identity,
        "identity is required by default"
    );
    let PowerSource::Vsphere(t) = &node.power else {
        panic!("vsphere")
    };
    assert_eq!(t.endpoint.as_str(), "https://vcenter.example.com/");
    assert_eq!(t.credential.username, "fence@vsphere.local");
    assert!(
        t.tls
            .ca_file
            .as_ref()
            .is_some_and(|p| p.ends_with("ca.pem"))
    );

    let uuid = "4213E0F1-2A3B-4C5D-8E9F-A0B1C2D3E4F5";
    let config = f.ok(&vsphere_node(&[&format!("bios_uuid = \"{uuid}\"")]));
    assert_eq!(selector(&config), VmSelector::BiosUuid(uuid.into()));
    assert!(!config.inventory.nodes["vm-1"].needs_node_identity());
    let config = f.ok(&vsphere_node(&["moid = \"vm-42\""]));
    assert_eq!(selector(&config), VmSelector::Moid("vm-42".into()));
    let config = f.ok(&vsphere_node(&["vm_path = \"DC0/vm/k8s/{node}\""]));
    assert_eq!(
        selector(&config),
        VmSelector::Path("DC0/vm/k8s/vm-1".into())
    );
}

#[test]
fn bad_vm_names_are_errors_at_their_line() {
    let f = Fixture::new();
    let errs = f.errors(&vsphere_node(&["bios_uuid = \"worker-1\""]));
    assert_at(
        find(&errs, "not a VM's BIOS UUID"),
        Some("vm-1"),
        7,
        "bios_uuid",
    );
    let errs = f.errors(&vsphere_node(&[
        "bios_uuid = \"00000000-0000-0000-0000-000000000000\"",
    ]));
    assert_at(
        find(&errs, "not a VM's BIOS UUID"),
        Some("vm-1"),
        7,
        "bios_uuid",
    );
    let errs = f.errors(&vsphere_node(&["moid = \"worker 1\""]));
    assert_at(
        find(&errs, "not a managed object id"),
        Some("vm-1"),
        7,
        "moid",
    );
    let errs = f.errors(&vsphere_node(&["vm_path = \"worker-1\""]));
    let e = find(&errs, "not a VM's inventory path");
    assert_at(e, Some("vm-1"), 7, "vm_path");
    assert!(
        e.help
            .as_deref()
            .is_some_and(|h| h.contains("<datacenter>/vm/")),
        "{e}"
    );
}

#[test]
fn two_ways_of_naming_the_vm_contradict() {
    let errs = Fixture::new().errors(&vsphere_node(&[
        "moid = \"vm-42\"",          // 7
        "vm_path = \"DC0/vm/vm-1\"", // 8
    ]));
    let e = find(&errs, "both name the VM");
    assert_at(e, Some("vm-1"), 8, "moid");
    assert!(e.message.contains("vm_path"), "{e}");
}

#[test]
fn endpoint_and_credentials_are_required_and_other_drivers_fields_refused() {
    let f = Fixture::new();
    let errs = f.errors(&lines(&[
        "[nodes.vm-1]",         // 1
        "driver = \"vsphere\"", // 2
        "username = \"fence\"", // 3
        "password = \"hunter2-Pa55\"",
    ]));
    assert_at(find(&errs, "needs `endpoint`"), Some("vm-1"), 1, "endpoint");
    for e in &errs {
        assert!(!e.to_string().contains("hunter2-Pa55"), "{e}");
    }
    let errs = f.errors(&vsphere_node(&["system_id = \"1\""]));
    let e = find(&errs, "system_id");
    assert_eq!(e.line, Some(7), "{e}");
    let errs = f.errors(&lines(&[
        "[nodes.r-1]",
        "driver = \"redfish\"",
        "endpoint = \"https://r-1-bmc\"",
        "username = \"fence\"",
        "password_file = \"secrets/bmc-password\"",
        "moid = \"vm-42\"", // 6
    ]));
    let e = find(&errs, "moid");
    assert_eq!(e.line, Some(6), "{e}");
}

fn datacenter(config: &Config) -> Option<String> {
    match &config.inventory.nodes["vm-1"].power {
        PowerSource::Vsphere(t) => t.datacenter.clone(),
        other => panic!("a vsphere node, got {other:?}"),
    }
}

#[test]
fn instance_uuid_names_the_vm_and_datacenter_scopes_a_uuid_search() {
    let f = Fixture::new();
    let config = f.ok(&vsphere_node(&[
        "instance_uuid = \"50123456-89AB-CDEF-0123-456789ABCDEF\"",
    ]));
    assert_eq!(
        selector(&config),
        VmSelector::InstanceUuid("50123456-89ab-cdef-0123-456789abcdef".into())
    );
    assert_eq!(datacenter(&config), None);
    let node = &config.inventory.nodes["vm-1"];
    assert!(!node.needs_node_identity(), "the VM is named");
    assert!(
        node.policy.require_identity,
        "its identity is still checked"
    );

    // With the Node's systemUUID, bios_uuid or instance_uuid.
    let config = f.ok(&vsphere_node(&["datacenter = \"/DC0/\""]));
    assert_eq!(selector(&config), VmSelector::NodeUuid);
    assert_eq!(datacenter(&config).as_deref(), Some("DC0"));
    let config = f.ok(&vsphere_node(&[
        "datacenter = \"Europe/DC0\"",
        "bios_uuid = \"4213e0f1-2a3b-4c5d-8e9f-a0b1c2d3e4f5\"",
    ]));
    assert_eq!(datacenter(&config).as_deref(), Some("Europe/DC0"));
    let config = f.ok(&vsphere_node(&[
        "datacenter = \"DC0\"",
        "instance_uuid = \"50123456-89ab-cdef-0123-456789abcdef\"",
    ]));
    assert_eq!(datacenter(&config).as_deref(), Some("DC0"));
}

#[test]
fn instance_uuid_and_datacenter_errors_are_at_their_line() {
    let f = Fixture::new();
    let errs = f.errors(&vsphere_node(&["instance_uuid = \"vm-42\""]));
    assert_at(
        find(&errs, "not a VM's instance UUID"),
        Some("vm-1"),
        7,
        "instance_uuid",
    );
    let errs = f.errors(&vsphere_node(&["datacenter = \"DC0/vm/k8s\""]));
    assert_at(
        find(&errs, "not a datacenter's inventory path"),
        Some("vm-1"),
        7,
        "datacenter",
    );
    let errs = f.errors(&vsphere_node(&["datacenter = \"\""]));
    assert!(errs.iter().any(|e| e.line == Some(7)), "{errs:?}");

    // instance_uuid is one more way of naming the VM: exclusive with the others.
    for other in [
        "bios_uuid = \"4213e0f1-2a3b-4c5d-8e9f-a0b1c2d3e4f5\"",
        "moid = \"vm-42\"",
        "vm_path = \"DC0/vm/vm-1\"",
    ] {
        let errs = f.errors(&vsphere_node(&[
            other,                                                      // 7
            "instance_uuid = \"50123456-89ab-cdef-0123-456789abcdef\"", // 8
        ]));
        let e = find(&errs, "both name the VM");
        let key = other.split(' ').next().unwrap_or_default();
        assert!(matches!(e.line, Some(7 | 8)), "{other}: {e}");
        assert!(
            e.message.contains("instance_uuid") && e.message.contains(key),
            "{other}: {e}"
        );
    }

    // A datacenter limits a UUID search: with moid or vm_path it is a mistake.
    for other in ["moid = \"vm-42\"", "vm_path = \"DC0/vm/vm-1\""] {
        let errs = f.errors(&vsphere_node(&[
            other,                  // 7
            "datacenter = \"DC0\"", // 8
        ]));
        let e = find(&errs, "limits a UUID search");
        assert_at(e, Some("vm-1"), 8, "datacenter");
    }

    // Only for vsphere.
    let errs = f.errors(&lines(&[
        "[nodes.r-1]",
        "driver = \"redfish\"",
        "endpoint = \"https://r-1-bmc\"",
        "username = \"fence\"",
        "password_file = \"secrets/bmc-password\"",
        "datacenter = \"DC0\"", // 6
    ]));
    let e = find(&errs, "datacenter");
    assert_eq!(e.line, Some(6), "{e}");
}
