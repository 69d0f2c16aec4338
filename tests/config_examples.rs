//! The example configs in `config/` load, and mean what their comments say.
//!
//! They are what operators copy, so they must never rot. The example password file is
//! `config/secrets/bmc-password`; git keeps no file modes (except +x), so in a fresh
//! clone it is usually world-readable (0644 under umask 022) and the loader warns about
//! it. Loading in place therefore tolerates exactly that warning; a copy with mode 0600
//! must load with no warning at all.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nodefence::config::{Config, PowerSource, RedfishAuth, SecretSource, load_with_env};
use secrecy::ExposeSecret;

const FILES: &[&str] = &[
    "nodefence.toml",
    "inventory.toml",
    "rack-a-ca.pem",
    "infra.kubeconfig",
    "secrets/bmc-password",
];

fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config")
}

/// The environment the example expects.
fn env(name: &str) -> Option<String> {
    (name == "RACK_A_BMC_PASSWORD").then(|| "rack-a-example-password".to_string())
}

fn load(dir: &Path) -> Config {
    match load_with_env(&dir.join("nodefence.toml"), &env) {
        Ok(config) => config,
        Err(errors) => panic!("the example config must load:\n{errors}"),
    }
}

fn assert_resolved_values(config: &Config) {
    let power = &config.agent.power;
    assert_eq!(power.confirm.readings, 3);
    assert_eq!(power.confirm.interval, Duration::from_millis(500));
    assert_eq!(power.confirm.timeout, Duration::from_secs(120));
    assert_eq!(power.max_concurrent_requests, 16);
    assert!(!config.agent.security.allow_inline_passwords);
    // The example's [policy] spells out every default: it must stay true to the code.
    assert_eq!(config.agent.policy, nodefence::engine::Policy::default());
    assert!(config.inventory_path.is_absolute());
    assert!(config.inventory_path.ends_with("config/inventory.toml"));

    let nodes = &config.inventory.nodes;
    let names: Vec<&str> = nodes.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "db-1",
            "guest-worker-1",
            "ip-10-0-3-17.eu-central-1.compute.internal",
            "lab-1",
            "vm-worker-1",
            "worker-1",
            "worker-2"
        ]
    );

    let worker1 = &nodes["worker-1"];
    assert_eq!(worker1.group.as_deref(), Some("rack-a"));
    assert_eq!(worker1.power.driver_name(), "redfish");
    let PowerSource::Redfish(w1) = &worker1.power else {
        panic!("worker-1 is a redfish node");
    };
    assert_eq!(
        w1.endpoint.as_str(),
        "https://worker-1-bmc.mgmt.example.com/"
    );
    assert_eq!(w1.system_id, None);
    assert_eq!(w1.auth, RedfishAuth::Auto);
    assert_eq!(w1.credential.username, "fence");
    assert_eq!(
        w1.credential.source,
        SecretSource::Env("RACK_A_BMC_PASSWORD".into())
    );
    assert_eq!(
        w1.credential.password.expose_secret(),
        "rack-a-example-password"
    );
    let ca = w1.tls.ca_file.as_ref().expect("rack-a has a CA");
    assert!(ca.is_absolute() && ca.ends_with("config/rack-a-ca.pem"));
    assert!(!w1.tls.insecure);
    assert_eq!(w1.timeouts.connect, Duration::from_secs(5));
    assert_eq!(w1.timeouts.request, Duration::from_secs(10));
    assert_eq!(w1.timeouts.operation, Duration::from_secs(60));
    assert_eq!(w1.timeouts.retries, 3);

    let PowerSource::Redfish(w2) = &nodes["worker-2"].power else {
        panic!("worker-2 is a redfish node");
    };
    assert_eq!(
        w2.endpoint.host_str(),
        Some("worker-2-bmc.mgmt.example.com")
    );
    assert_eq!(w2.system_id.as_deref(), Some("System.Embedded.1"));

    // The BMC with its factory certificate: pinned, no CA file, never insecure.
    let PowerSource::Redfish(lab) = &nodes["lab-1"].power else {
        panic!("lab-1 is a redfish node");
    };
    assert_eq!(
        lab.tls.fingerprint.map(|f| f.to_string()).as_deref(),
        Some(
            "sha256:3A:7B:00:FF:10:20:30:40:50:60:70:80:90:A0:B0:C0:D0:E0:F0:01:02:03:04:05:06:07:08:09:0A:0B:0C:0D"
        )
    );
    assert!(lab.tls.ca_file.is_none() && !lab.tls.insecure);

    let PowerSource::Ipmi(db) = &nodes["db-1"].power else {
        panic!("db-1 is an ipmi node");
    };
    assert_eq!((db.address.as_str(), db.port), ("10.0.9.21", 623));
    assert_eq!(db.cipher_suite, Some(17));
    assert_eq!(db.credential.password.expose_secret(), "change-me");
    assert!(
        matches!(&db.credential.source, SecretSource::File(p) if p.ends_with("config/secrets/bmc-password"))
    );

    let PowerSource::Aws(aws) = &nodes["ip-10-0-3-17.eu-central-1.compute.internal"].power else {
        panic!("the EC2 node is an aws node");
    };
    assert_eq!(aws.region.as_deref(), Some("eu-central-1"));
    assert_eq!(aws.instance_id, None);

    let PowerSource::Vsphere(vm) = &nodes["vm-worker-1"].power else {
        panic!("vm-worker-1 is a vsphere node");
    };
    assert_eq!(vm.endpoint.as_str(), "https://vcenter.mgmt.example.com/");
    assert_eq!(
        vm.vm,
        nodefence::power::vsphere::locate::VmSelector::NodeUuid
    );
    assert_eq!(vm.credential.username, "nodefence@vsphere.local");
    assert!(
        vm.tls
            .ca_file
            .as_ref()
            .is_some_and(|c| c.ends_with("config/rack-a-ca.pem"))
    );
    assert!(nodes["vm-worker-1"].needs_node_identity());
    assert!(nodes["vm-worker-1"].policy.require_identity);

    let PowerSource::Kubevirt(guest) = &nodes["guest-worker-1"].power else {
        panic!("guest-worker-1 is a kubevirt node");
    };
    assert!(guest.kubeconfig.ends_with("config/infra.kubeconfig"));
    assert_eq!(
        (
            guest.namespace.as_str(),
            guest.vm.as_str(),
            guest.context.as_deref()
        ),
        ("guests", "guest-worker-1", None)
    );
    assert!(nodes["guest-worker-1"].policy.require_identity);

    assert_policies(config);
}

/// `[groups.rack-a.policy]` overrides one key for rack A; everything else, and every
/// other node, follows `[policy]`.
fn assert_policies(config: &Config) {
    let global = &config.agent.policy;
    let mut rack_a = global.clone();
    rack_a.unhealthy_after = Duration::from_secs(120);
    for (name, node) in &config.inventory.nodes {
        let expected = if node.group.as_deref() == Some("rack-a") {
            &rack_a
        } else {
            global
        };
        assert_eq!(&node.policy, expected, "{name}");
        // redfish, ipmi and aws can report which machine they control.
        assert!(node.policy.require_identity, "{name}");
    }
    assert_eq!(
        config.inventory.nodes["worker-1"].policy.unhealthy_after,
        Duration::from_secs(120)
    );
    assert_eq!(global.unhealthy_after, Duration::from_secs(60));
}

#[test]
fn examples_load_in_place() {
    let config = load(&example_dir());
    assert_resolved_values(&config);
    // A fresh clone may leave the example secret world-readable: that warning only.
    for warning in &config.warnings {
        assert!(
            warning.contains("secrets/bmc-password is readable by every user"),
            "unexpected warning: {warning}"
        );
    }
}

#[test]
fn examples_load_without_warnings_when_the_secret_is_private() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("config");
    for file in FILES {
        let to = dir.join(file);
        fs::create_dir_all(to.parent().unwrap()).unwrap();
        fs::copy(example_dir().join(file), &to).unwrap();
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let secret = dir.join("secrets/bmc-password");
        fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    }
    let config = load(&dir);
    assert_resolved_values(&config);
    assert_eq!(config.warnings, Vec::<String>::new());
}

#[test]
fn examples_need_the_documented_environment_variable() {
    let errors = load_with_env(&example_dir().join("nodefence.toml"), &|_| None)
        .expect_err("RACK_A_BMC_PASSWORD is required");
    assert_eq!(errors.len(), 1, "{errors}");
    let text = errors.to_string();
    assert!(
        text.contains(
            "group \"rack-a\": environment variable RACK_A_BMC_PASSWORD (password_env) is not set"
        ),
        "{text}"
    );
}
