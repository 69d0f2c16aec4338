//! Allowed but risky settings: warned about once, where they are written.

use super::*;

fn group_of(n: usize, group: &str) -> String {
    (0..n)
        .map(|i| format!("[nodes.{group}-{i}]\ngroup = \"{group}\"\n"))
        .collect()
}

#[test]
fn insecure_is_warned_once_per_group_with_its_node_count() {
    let inv = format!(
        "{DEFAULTS}[groups.lab]\nendpoint = \"https://{{node}}-bmc\"\ninsecure = true\n{}\
         [nodes.solo]\nendpoint = \"https://solo-bmc\"\ninsecure = true\n",
        group_of(30, "lab")
    );
    let config = Fixture::new().ok(&inv);
    assert_eq!(config.inventory.nodes.len(), 31);
    assert!(matches!(
        &config.inventory.nodes["lab-7"].power,
        crate::config::PowerSource::Redfish(r) if r.tls.insecure
    ));
    let insecure: Vec<_> = config
        .warnings
        .iter()
        .filter(|w| w.contains("insecure"))
        .collect();
    assert_eq!(insecure.len(), 2, "{insecure:?}");
    assert!(
        insecure[0].contains(":7:1: group \"lab\": `insecure = true`"),
        "{}",
        insecure[0]
    );
    assert!(insecure[0].contains("(30 nodes)"), "{}", insecure[0]);
    assert!(insecure[1].contains("node \"solo\"") && insecure[1].contains("(1 node)"));
}

#[test]
fn plain_http_is_warned_once_per_definition() {
    let inv = format!(
        "{DEFAULTS}[groups.old]\nendpoint = \"http://{{node}}-bmc\"\n{}",
        group_of(5, "old")
    );
    let config = Fixture::new().ok(&inv);
    assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
    assert!(config.warnings[0].contains(":6:12: group \"old\": `endpoint` uses http://"));
}

#[cfg(unix)]
#[test]
fn a_world_readable_password_file_is_warned_once() {
    use std::os::unix::fs::PermissionsExt;
    let f = Fixture::new();
    fs::set_permissions(
        f.path("secrets/bmc-password"),
        fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let inv = format!(
        "{DEFAULTS}[groups.a]\npassword_file = \"secrets/bmc-password\"\nendpoint = \"https://{{node}}\"\n{}{}",
        group_of(3, "a"),
        "[nodes.x]\nendpoint = \"https://x\"\n"
    );
    let config = f.ok(&inv);
    assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
    assert!(config.warnings[0].contains("readable by every user (mode 0644)"));
    assert!(config.warnings[0].contains("chmod 600"));
}

#[test]
fn an_unused_group_is_warned_about() {
    let config = Fixture::new().ok(&format!(
        "{DEFAULTS}[groups.spare]\n[nodes.a]\nendpoint = \"https://a\"\n"
    ));
    assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
    assert!(config.warnings[0].contains("group \"spare\": no node uses this group"));
}

#[test]
fn one_bmc_with_and_without_system_id_is_a_warning() {
    let config = Fixture::new().ok(&format!(
        "{DEFAULTS}[nodes.a]\nendpoint = \"https://chassis\"\n\
         [nodes.b]\nendpoint = \"https://chassis\"\nsystem_id = \"Blade2\"\n"
    ));
    assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
    assert!(config.warnings[0].contains("node \"b\": uses the same BMC host as node \"a\""));
    assert!(config.warnings[0].contains("system_id"));
}
