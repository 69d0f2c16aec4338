#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::config::IpmiPrivilege;

fn bmh(name: &str, address: &str, extra: serde_json::Value) -> BareMetalHost {
    let mut v = serde_json::json!({
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "metadata": {"name": name, "namespace": "metal3", "uid": format!("uid-{name}")},
        "spec": {
            "online": true,
            "bmc": {"address": address, "credentialsName": format!("{name}-bmc-secret")},
        },
        "status": {"poweredOn": true, "provisioning": {"state": "provisioned"}, "operationalStatus": "OK"},
    });
    merge_json(&mut v, &extra);
    serde_json::from_value(v).unwrap()
}

/// An RFC 7386 merge patch: `null` removes, objects merge, the rest replaces.
fn merge_json(target: &mut serde_json::Value, patch: &serde_json::Value) {
    match (target, patch) {
        (serde_json::Value::Object(t), serde_json::Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_json(t.entry(k.clone()).or_insert(serde_json::Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

fn node(name: &str, host: &str) -> NodeFacts {
    NodeFacts {
        name: name.into(),
        provider_id: Some(format!("metal3://metal3/{host}/m3m-{host}")),
        annotation: None,
    }
}

fn settings() -> Metal3Settings {
    Metal3Settings {
        hosts: true,
        namespaces: vec!["metal3".into()],
        ..Metal3Settings::default()
    }
}

fn one(host: BareMetalHost, settings: &Metal3Settings) -> Discovery {
    let name = host.metadata.name.clone().unwrap();
    entries(
        settings,
        &[host],
        &[node("worker-1", &name)],
        &Chain::default(),
    )
}

#[test]
fn a_host_of_each_scheme_becomes_an_entry_with_its_secret_pending() {
    let cases = [
        (
            "redfish://bmc-1/redfish/v1/Systems/1",
            "redfish https://bmc-1/ 1",
        ),
        (
            "redfish+http://10.0.0.5:8000/redfish/v1/Systems/abc",
            "redfish http://10.0.0.5:8000/ abc",
        ),
        (
            "redfish-virtualmedia+https://bmc-1/redfish/v1/Systems/1",
            "redfish https://bmc-1/ 1",
        ),
        (
            "redfish-uefihttp://bmc-1/redfish/v1/Systems/1",
            "redfish https://bmc-1/ 1",
        ),
        (
            "idrac-redfish://idrac-1/redfish/v1/Systems/System.Embedded.1",
            "redfish https://idrac-1/ System.Embedded.1",
        ),
        (
            "idrac-virtualmedia://idrac-1/redfish/v1/Systems/System.Embedded.1",
            "redfish https://idrac-1/ System.Embedded.1",
        ),
        (
            "ilo5-redfish://ilo-1/redfish/v1/Systems/1",
            "redfish https://ilo-1/ 1",
        ),
        (
            "ilo5-virtualmedia://ilo-1/redfish/v1/Systems/1",
            "redfish https://ilo-1/ 1",
        ),
        ("ipmi://10.0.9.21:6230", "ipmi 10.0.9.21:6230 administrator"),
        (
            "libvirt://192.168.122.1:6233",
            "ipmi 192.168.122.1:6233 administrator",
        ),
        ("10.0.9.22", "ipmi 10.0.9.22:623 administrator"),
        (
            "ipmi://10.0.9.23?privilegelevel=OPERATOR",
            "ipmi 10.0.9.23:623 operator",
        ),
    ];
    for (address, want) in cases {
        let d = one(bmh("host-1", address, serde_json::json!({})), &settings());
        assert!(d.problems.is_empty(), "{address}: {:?}", d.problems);
        let [entry] = d.entries.as_slice() else {
            panic!("{address}: {:?}", d.entries)
        };
        let got = match &entry.power {
            PowerSource::Redfish(t) => format!(
                "redfish {} {}",
                t.endpoint,
                t.system_id.as_deref().unwrap_or("-")
            ),
            PowerSource::Ipmi(t) => format!(
                "ipmi {}:{} {}",
                t.address,
                t.port,
                match t.privilege {
                    IpmiPrivilege::Operator => "operator",
                    IpmiPrivilege::Administrator => "administrator",
                }
            ),
            other => panic!("{other:?}"),
        };
        assert_eq!(got, want, "{address}");
        assert_eq!(entry.name, "worker-1");
        assert_eq!(entry.origin.to_string(), "BareMetalHost metal3/host-1");
        assert_eq!(entry.metal3_host, Some(HostRef::new("metal3", "host-1")));
        let credential = entry.credential().unwrap();
        let SecretSource::SecretPending(r) = &credential.source else {
            panic!("{:?}", credential.source)
        };
        assert_eq!(r.namespace.as_deref(), Some("metal3"));
        assert_eq!(r.name, "host-1-bmc-secret");
        assert_eq!(r.password_key, "password");
        assert_eq!(r.username_key.as_deref(), Some("username"));
        assert!(r.written_at.contains("BareMetalHost metal3/host-1"));
        assert_eq!(d.managed["worker-1"], HostRef::new("metal3", "host-1"));
    }
}

#[test]
fn unusable_hosts_are_problems_naming_host_and_fix() {
    let d = one(
        bmh("host-1", "idrac://idrac-1", serde_json::json!({})),
        &settings(),
    );
    assert!(d.entries.is_empty());
    assert!(
        d.problems[0].contains("metal3/host-1") && d.problems[0].contains("idrac-redfish://"),
        "{:?}",
        d.problems
    );
    // Still managed by Metal3: an inventory entry for it must power it through Metal3.
    assert!(d.managed.contains_key("worker-1"));
    let d = one(
        bmh(
            "host-1",
            "redfish://bmc/",
            serde_json::json!({"spec": {"bmc": {"credentialsName": ""}}}),
        ),
        &settings(),
    );
    assert!(
        d.problems[0].contains("credentialsName"),
        "{:?}",
        d.problems
    );
    let d = one(
        bmh("host-1", "", serde_json::json!({"spec": {"bmc": null}})),
        &settings(),
    );
    assert!(d.problems[0].contains("no spec.bmc"), "{:?}", d.problems);
}

#[test]
fn disable_certificate_verification_needs_the_opt_in_and_is_warned() {
    let host = || {
        bmh(
            "host-1",
            "redfish://bmc-1/redfish/v1/Systems/1",
            serde_json::json!({"spec": {"bmc": {"disableCertificateVerification": true}}}),
        )
    };
    let d = one(host(), &settings());
    assert!(d.entries.is_empty());
    assert!(d.problems[0].contains("allow_insecure"), "{:?}", d.problems);
    let mut allowed = settings();
    allowed.allow_insecure = true;
    let d = one(host(), &allowed);
    let PowerSource::Redfish(t) = &d.entries[0].power else {
        panic!()
    };
    assert!(t.tls.insecure);
    assert!(d.warnings[0].contains("not verified"), "{:?}", d.warnings);
    // Over plain http there is no certificate to skip.
    let d = one(
        bmh(
            "host-1",
            "redfish+http://bmc-1/redfish/v1/Systems/1",
            serde_json::json!({"spec": {"bmc": {"disableCertificateVerification": true}}}),
        ),
        &settings(),
    );
    assert!(d.problems.is_empty(), "{:?}", d.problems);
}

#[test]
fn detached_and_power_off_disabled_hosts_are_said() {
    let d = one(
        bmh(
            "host-1",
            "ipmi://10.0.0.1",
            serde_json::json!({"metadata": {"annotations": {"baremetalhost.metal3.io/detached": ""}}}),
        ),
        &settings(),
    );
    assert_eq!(d.entries[0].metal3_host, None, "Ironic does not manage it");
    assert!(d.managed.is_empty());
    assert!(d.warnings[0].contains("detached"), "{:?}", d.warnings);
    let d = one(
        bmh(
            "host-1",
            "ipmi://10.0.0.1",
            serde_json::json!({"spec": {"disablePowerOff": true}}),
        ),
        &settings(),
    );
    assert!(
        d.warnings[0].contains("disablePowerOff"),
        "{:?}",
        d.warnings
    );
}

#[test]
fn the_consumer_ref_chain_finds_the_node() {
    let host = bmh(
        "host-1",
        "ipmi://10.0.0.1",
        serde_json::json!({"spec": {"consumerRef": {
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "kind": "Metal3Machine", "name": "m3m-1", "namespace": "metal3"
        }}}),
    );
    let mut chain = Chain::default();
    chain
        .machine_of
        .insert(("metal3".into(), "m3m-1".into()), "machine-1".into());
    chain
        .node_of
        .insert(("metal3".into(), "machine-1".into()), "worker-7".into());
    let nodes = [NodeFacts {
        name: "worker-7".into(),
        ..NodeFacts::default()
    }];
    let d = entries(&settings(), &[host], &nodes, &chain);
    assert_eq!(d.entries[0].name, "worker-7");
    assert_eq!(d.matched["worker-7"].1, MatchedBy::ConsumerRef);
}

#[test]
fn the_inventory_file_wins_but_power_still_goes_through_metal3() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("nodefence.toml"),
        "inventory = \"inventory.toml\"\n[security]\nallow_inline_passwords = true\n\
         [metal3]\nhosts = true\nnamespaces = [\"metal3\"]\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("inventory.toml"),
        "[nodes.worker-1]\ndriver = \"ipmi\"\naddress = \"10.0.0.9\"\nusername = \"u\"\npassword = \"p\"\n",
    )
    .unwrap();
    let mut config = crate::config::load(&dir.path().join("nodefence.toml")).unwrap();
    let hosts = [
        bmh("host-1", "redfish://bmc-1/", serde_json::json!({})),
        bmh("host-2", "redfish://bmc-2/", serde_json::json!({})),
    ];
    let d = entries(
        &settings(),
        &hosts,
        &[node("worker-1", "host-1"), node("worker-2", "host-2")],
        &Chain::default(),
    );
    let merged = merge(&mut config, &d);
    assert_eq!(merged.added, ["worker-2"]);
    assert_eq!(merged.overridden, ["worker-1"]);
    let w1 = &config.inventory.nodes["worker-1"];
    assert!(matches!(w1.power, PowerSource::Ipmi(_)), "the file's entry");
    assert!(
        w1.origin.to_string().ends_with("inventory.toml:1"),
        "{}",
        w1.origin
    );
    assert_eq!(w1.metal3_host, Some(HostRef::new("metal3", "host-1")));
    let w2 = &config.inventory.nodes["worker-2"];
    assert_eq!(w2.origin.to_string(), "BareMetalHost metal3/host-2");
}

#[test]
fn the_fingerprint_follows_entries_and_matches_not_status() {
    let hosts = |address: &str, powered_on: bool| {
        vec![bmh(
            "worker-1",
            address,
            serde_json::json!({"status": {"poweredOn": powered_on}}),
        )]
    };
    let nodes = [node("worker-1", "worker-1")];
    let run = |hosts: &[BareMetalHost], nodes: &[NodeFacts]| {
        fingerprint(&entries(&settings(), hosts, nodes, &Chain::default()))
    };
    let base = run(&hosts("redfish://bmc-1/redfish/v1/Systems/1", true), &nodes);
    assert_eq!(
        base,
        run(
            &hosts("redfish://bmc-1/redfish/v1/Systems/1", false),
            &nodes
        ),
        "a status change is no change"
    );
    assert_ne!(
        base,
        run(&hosts("redfish://bmc-2/redfish/v1/Systems/1", true), &nodes),
        "another BMC"
    );
    assert_ne!(
        base,
        run(&hosts("redfish://bmc-1/redfish/v1/Systems/1", true), &[]),
        "the Node gone"
    );
    assert_ne!(base, run(&[], &nodes), "the host gone");
}

#[test]
fn a_rotated_secret_recorded_by_metal3_changes_the_fingerprint() {
    let host = |tried: serde_json::Value| {
        vec![bmh(
            "worker-1",
            "redfish://bmc-1/redfish/v1/Systems/1",
            serde_json::json!({"status": {"triedCredentials": tried}}),
        )]
    };
    let tried = |name: &str, namespace: &str, version: &str| {
        serde_json::json!({
            "credentials": {"name": name, "namespace": namespace},
            "credentialsVersion": version
        })
    };
    let nodes = [node("worker-1", "worker-1")];
    let run = |hosts: &[BareMetalHost]| {
        let discovery = entries(&settings(), hosts, &nodes, &Chain::default());
        (
            fingerprint(&discovery),
            discovery.credentials_versions.get("worker-1").cloned(),
        )
    };
    let (before, version) = run(&host(tried("worker-1-bmc-secret", "metal3", "879")));
    assert_eq!(version.as_deref(), Some("879"));
    let (rotated, version) = run(&host(tried("worker-1-bmc-secret", "metal3", "912")));
    assert_eq!(version.as_deref(), Some("912"));
    assert_ne!(before, rotated, "the Secret's new version is a change");
    // Another Secret's version (the host's spec names worker-1-bmc-secret) proves
    // nothing about this one; nor does a status without it.
    for other in [
        tried("old-secret", "metal3", "912"),
        tried("worker-1-bmc-secret", "elsewhere", "912"),
        tried("worker-1-bmc-secret", "metal3", ""),
        serde_json::json!({}),
    ] {
        assert_eq!(run(&host(other.clone())).1, None, "{other}");
    }
}
