//! Inheritance, precedence, `{node}` substitution and the resolved values.

use std::time::Duration;

use secrecy::ExposeSecret;

use super::*;
use crate::config::{PowerSource, RedfishAuth, SecretSource, Timeouts};

const RACKS: &str = r#"
[defaults]
driver = "redfish"
username = "fence"
password_file = "secrets/bmc-password"
request_timeout = "20s"

[groups.rack-a]
endpoint = "https://{node}-bmc.mgmt.example.com"
password_env = "RACK_A_BMC_PASSWORD"
ca_file = "ca.pem"
connect_timeout = "3s"

[nodes.worker-1]
group = "rack-a"

[nodes.worker-2]
group = "rack-a"
system_id = "System.Embedded.1"
username = "admin"
password_file = "secrets/bmc-password"
request_timeout = "15s"
auth = "basic"

[nodes.db-1]
driver = "ipmi"
address = "10.0.9.21"
cipher_suite = 17
"#;

fn redfish(config: &Config, node: &str) -> crate::config::RedfishTarget {
    match &config.inventory.nodes[node].power {
        PowerSource::Redfish(r) => r.clone(),
        other => panic!("{node} is {}", other.driver_name()),
    }
}

#[test]
fn node_beats_group_beats_defaults() {
    let config = Fixture::new().ok(RACKS);
    assert_eq!(config.inventory.nodes.len(), 3);

    let w1 = redfish(&config, "worker-1");
    assert_eq!(
        w1.endpoint.as_str(),
        "https://worker-1-bmc.mgmt.example.com/"
    );
    assert_eq!(w1.credential.username, "fence");
    assert_eq!(w1.credential.password.expose_secret(), ENV_PASSWORD);
    assert_eq!(
        w1.credential.source,
        SecretSource::Env("RACK_A_BMC_PASSWORD".into())
    );
    assert_eq!(w1.system_id, None);
    assert_eq!(w1.auth, RedfishAuth::Auto);
    assert!(
        w1.tls
            .ca_file
            .as_ref()
            .is_some_and(|p| p.is_absolute() && p.ends_with("ca.pem"))
    );
    assert!(!w1.tls.insecure);
    assert_eq!(w1.timeouts.connect, Duration::from_secs(3));
    assert_eq!(w1.timeouts.request, Duration::from_secs(20));
    assert_eq!(w1.timeouts.operation, Timeouts::default().operation);
    assert_eq!(
        config.inventory.nodes["worker-1"].group.as_deref(),
        Some("rack-a")
    );

    let w2 = redfish(&config, "worker-2");
    assert_eq!(
        w2.endpoint.host_str(),
        Some("worker-2-bmc.mgmt.example.com")
    );
    assert_eq!(w2.system_id.as_deref(), Some("System.Embedded.1"));
    assert_eq!(w2.credential.username, "admin");
    assert_eq!(w2.auth, RedfishAuth::Basic);
    assert_eq!(w2.timeouts.request, Duration::from_secs(15));
}

#[test]
fn a_nodes_password_source_replaces_the_inherited_one_entirely() {
    let config = Fixture::new().ok(RACKS);
    let w2 = redfish(&config, "worker-2");
    // The group says password_env, the node password_file: the file wins, and the
    // group's environment variable plays no part.
    assert_eq!(w2.credential.password.expose_secret(), FILE_PASSWORD);
    match &w2.credential.source {
        SecretSource::File(p) => assert!(p.is_absolute() && p.ends_with("secrets/bmc-password")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn ipmi_defaults_and_ignored_inherited_fields() {
    let config = Fixture::new().ok(RACKS);
    let PowerSource::Ipmi(db) = &config.inventory.nodes["db-1"].power else {
        panic!("db-1 is ipmi");
    };
    assert_eq!(db.address, "10.0.9.21");
    assert_eq!(db.port, 623);
    assert_eq!(db.cipher_suite, Some(17));
    assert_eq!(db.credential.username, "fence");
    assert_eq!(db.credential.password.expose_secret(), FILE_PASSWORD);
    // request_timeout from [defaults], which names redfish, still applies: timeouts
    // apply to every driver.
    assert_eq!(db.timeouts.request, Duration::from_secs(20));
}

#[test]
fn fields_inherited_from_a_level_without_driver_are_ignored_when_they_do_not_apply() {
    let config = Fixture::new().ok(r#"
[defaults]
username = "fence"
password_file = "secrets/bmc-password"
cipher_suite = 3
ca_file = "ca.pem"

[nodes.a]
driver = "redfish"
endpoint = "https://a-bmc"

[nodes.b]
driver = "ipmi"
address = "b-ipmi"

[nodes.c]
driver = "aws"
"#);
    let PowerSource::Ipmi(b) = &config.inventory.nodes["b"].power else {
        panic!()
    };
    assert_eq!(b.cipher_suite, Some(3));
    assert!(redfish(&config, "a").tls.ca_file.is_some());
    assert!(matches!(
        config.inventory.nodes["c"].power,
        PowerSource::Aws(_)
    ));
}

#[test]
fn node_placeholder_works_in_endpoint_address_and_options() {
    let f = Fixture::new();
    f.write("fence_test", "#!/bin/sh\n");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(f.path("fence_test"), fs::Permissions::from_mode(0o755)).unwrap();
    }
    let config = f.ok(r#"
[groups.ipmi]
driver = "ipmi"
address = "{node}-ipmi.mgmt"
username = "u"
password_env = "RACK_A_BMC_PASSWORD"

[groups.pdu]
driver = "exec"
agent = "fence_test"
options = { ip = "pdu-1", plug = "{node}" }

[nodes.n-1]
group = "ipmi"
[nodes.n-2]
group = "pdu"
options = { plug = "7", "power-wait" = "3" }
[nodes.n-3]
group = "pdu"
"#);
    let PowerSource::Ipmi(n1) = &config.inventory.nodes["n-1"].power else {
        panic!()
    };
    assert_eq!(n1.address, "n-1-ipmi.mgmt");
    let PowerSource::Exec(n2) = &config.inventory.nodes["n-2"].power else {
        panic!()
    };
    assert!(n2.agent.is_absolute() && n2.agent.ends_with("fence_test"));
    let opts: Vec<_> = n2.options.iter().map(|(k, v)| format!("{k}={v}")).collect();
    assert_eq!(opts, ["ip=pdu-1", "plug=7", "power-wait=3"]);
    assert!(n2.credential.is_none());
    let PowerSource::Exec(n3) = &config.inventory.nodes["n-3"].power else {
        panic!()
    };
    assert_eq!(n3.options["plug"], "n-3");
}

#[test]
fn aws_needs_nothing_and_takes_what_is_given() {
    let config = Fixture::new().ok(
        "[nodes.\"ip-10-0-1-2.ec2.internal\"]\ndriver = \"aws\"\n\
         [nodes.b]\ndriver = \"aws\"\nregion = \"eu-central-1\"\ninstance_id = \"i-0123456789abcdef0\"\n\
         endpoint = \"https://ec2.eu-central-1.amazonaws.com\"\n",
    );
    let PowerSource::Aws(a) = &config.inventory.nodes["ip-10-0-1-2.ec2.internal"].power else {
        panic!()
    };
    assert!(a.instance_id.is_none() && a.region.is_none() && a.endpoint.is_none());
    let PowerSource::Aws(b) = &config.inventory.nodes["b"].power else {
        panic!()
    };
    assert_eq!(b.region.as_deref(), Some("eu-central-1"));
    assert_eq!(b.instance_id.as_deref(), Some("i-0123456789abcdef0"));
    assert!(b.endpoint.is_some());
}

#[test]
fn agent_settings_and_paths_are_resolved() {
    let f = Fixture::new();
    f.agent(
        "inventory = \"inv/inventory.toml\"\n[power]\nconfirm_readings = 5\n\
         confirm_interval = \"0s\"\nconfirm_timeout = \"30s\"\nmax_concurrent_requests = 4\n\
         [security]\nallow_inline_passwords = true\n",
    );
    // Relative paths in the inventory are relative to the inventory's directory.
    f.secret("inv/pw", "inline-dir-pw\n");
    f.write(
        "inv/inventory.toml",
        "[nodes.a]\ndriver = \"redfish\"\nendpoint = \"https://a\"\nusername = \"u\"\npassword_file = \"pw\"\n",
    );
    let config = load_with_env(&f.path("nodefence.toml"), &|_| None).expect("loads");
    assert_eq!(config.agent.power.confirm.readings, 5);
    assert_eq!(config.agent.power.confirm.interval, Duration::ZERO);
    assert_eq!(config.agent.power.confirm.timeout, Duration::from_secs(30));
    assert_eq!(config.agent.power.max_concurrent_requests, 4);
    assert!(config.agent.security.allow_inline_passwords);
    assert_eq!(config.inventory_path, f.path("inv/inventory.toml"));
    assert_eq!(config.agent.inventory, config.inventory_path);
    assert_eq!(config.config_path, f.path("nodefence.toml"));
    assert_eq!(
        redfish(&config, "a").credential.password.expose_secret(),
        "inline-dir-pw"
    );
}

#[test]
fn agent_defaults_when_only_inventory_is_given() {
    let config = Fixture::new().ok(&format!("{DEFAULTS}[nodes.a]\nendpoint = \"https://a\"\n"));
    let policy = crate::power::confirm::ConfirmPolicy::default();
    assert_eq!(config.agent.power.confirm, policy);
    assert_eq!(config.agent.power.max_concurrent_requests, 16);
    assert!(!config.agent.security.allow_inline_passwords);
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
}

#[test]
fn aws_profile_credentials_file_and_ca_file() {
    let f = Fixture::new();
    f.secret(
        "aws/credentials",
        "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = s1\n\
         [fencer]\naws_access_key_id = AKIDFENCER\naws_secret_access_key = s2\n",
    );
    let config = f.ok(
        "[groups.cloud]\ndriver = \"aws\"\nendpoint = \"https://ec2.private.example\"\n\
         ca_file = \"ca.pem\"\ncredentials_file = \"aws/credentials\"\nprofile = \"fencer\"\n\
         [nodes.a]\ngroup = \"cloud\"\n[nodes.b]\ndriver = \"aws\"\nprofile = \"other-account\"\n",
    );
    let PowerSource::Aws(a) = &config.inventory.nodes["a"].power else {
        panic!()
    };
    assert_eq!(a.profile.as_deref(), Some("fencer"));
    assert_eq!(
        a.credentials_file.as_deref(),
        Some(f.path("aws/credentials").as_path())
    );
    assert_eq!(a.tls.ca_file.as_deref(), Some(f.path("ca.pem").as_path()));
    let PowerSource::Aws(b) = &config.inventory.nodes["b"].power else {
        panic!()
    };
    // A profile alone is looked up in the default shared files, when credentials load.
    assert_eq!(b.profile.as_deref(), Some("other-account"));
    assert!(b.credentials_file.is_none() && b.tls.ca_file.is_none());
}

#[test]
fn aws_credentials_file_problems_are_found_at_load() {
    let f = Fixture::new();
    f.secret(
        "aws/credentials",
        "[fencer]\naws_access_key_id = AKIDFENCER\naws_secret_access_key = TOPSECRETKEY\n",
    );
    let errors = f.errors(
        "[nodes.a]\ndriver = \"aws\"\ncredentials_file = \"aws/missing\"\n\
         [nodes.b]\ndriver = \"aws\"\ncredentials_file = \"aws/credentials\"\nprofile = \"nope\"\n\
         [nodes.c]\ndriver = \"aws\"\ncredentials_file = \"aws/credentials\"\n\
         [nodes.d]\ndriver = \"aws\"\ncredentials_file = \"aws/credentials\"\nprofile = \"fencer\"\n\
         ca_file = \"ca.pem\"\ninsecure = true\n",
    );
    let text: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    let all = text.join("\n");
    assert!(!all.contains("TOPSECRETKEY"), "{all}");
    assert!(
        text.iter()
            .any(|t| t.contains("node \"a\"") && t.contains("does not exist")),
        "{all}"
    );
    assert!(
        text.iter()
            .any(|t| t.contains("node \"b\"") && t.contains("no [nope] profile")),
        "{all}"
    );
    assert!(
        text.iter()
            .any(|t| t.contains("node \"c\"") && t.contains("no [default] profile")),
        "{all}"
    );
    assert!(
        text.iter()
            .any(|t| t.contains("node \"d\"") && t.contains("contradict")),
        "{all}"
    );
    assert_eq!(errors.len(), 4, "{all}");
}
