#![allow(clippy::unwrap_used, clippy::expect_used)]

use secrecy::ExposeSecret;

use super::*;
use crate::config::model::{
    AgentConfig, Credential, Inventory, IpmiPrivilege, IpmiTarget, NodeTarget, PowerSettings,
    RedfishAuth, RedfishTarget, SecuritySettings, Timeouts, TlsSettings,
};
use crate::engine::Policy;
use crate::power::confirm::ConfirmPolicy;

const PW: &str = "unit-secret-pw-4d2a";

fn pending(name: &str, key: &str, username_key: Option<&str>) -> Credential {
    Credential {
        username: if username_key.is_some() {
            String::new()
        } else {
            "fence".into()
        },
        password: SecretString::from(String::new()),
        source: SecretSource::SecretPending(SecretRef {
            namespace: None,
            name: name.into(),
            password_key: key.into(),
            username_key: username_key.map(str::to_string),
            written_at: "inventory.toml:3:19".into(),
        }),
    }
}

fn redfish(name: &str, credential: Credential) -> NodeTarget {
    NodeTarget {
        fallback: Vec::new(),
        origin: Default::default(),
        metal3_host: None,
        name: name.into(),
        group: None,
        power: PowerSource::Redfish(RedfishTarget {
            endpoint: "https://bmc".parse().unwrap(),
            system_id: None,
            credential,
            auth: RedfishAuth::Auto,
            tls: TlsSettings::default(),
            timeouts: Timeouts::default(),
        }),
        policy: Policy::default(),
    }
}

fn ipmi(name: &str, credential: Credential) -> NodeTarget {
    NodeTarget {
        fallback: Vec::new(),
        origin: Default::default(),
        metal3_host: None,
        name: name.into(),
        group: None,
        power: PowerSource::Ipmi(IpmiTarget {
            address: "10.0.0.1".into(),
            port: 623,
            credential,
            cipher_suite: None,
            privilege: IpmiPrivilege::default(),
            kg: None,
            timeouts: Timeouts::default(),
        }),
        policy: Policy::default(),
    }
}

fn config(nodes: Vec<NodeTarget>) -> Config {
    Config {
        agent: AgentConfig {
            inventory: "inventory.toml".into(),
            power: PowerSettings {
                confirm: ConfirmPolicy::default(),
                max_concurrent_requests: 1,
                monitor_interval: std::time::Duration::ZERO,
            },
            security: SecuritySettings::default(),
            remediation: Default::default(),
            policy: Policy::default(),
            metal3: Default::default(),
        },
        inventory: Inventory {
            nodes: nodes.into_iter().map(|n| (n.name.clone(), n)).collect(),
        },
        config_path: "nodefence.toml".into(),
        inventory_path: "inventory.toml".into(),
        warnings: Vec::new(),
    }
}

fn data(pairs: &[(&str, &[u8])]) -> BTreeMap<String, ByteString> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
        .collect()
}

fn fetched(entries: Vec<(&str, Fetched)>) -> BTreeMap<(String, String), Fetched> {
    entries
        .into_iter()
        .map(|(name, f)| (("nodefence".to_string(), name.to_string()), f))
        .collect()
}

#[test]
fn values_are_filled_and_the_source_names_the_namespace() {
    let mut c = config(vec![
        redfish("a", pending("bmc", "password", None)),
        redfish("b", pending("bmc", "pw2", Some("user"))),
    ]);
    let pw2 = format!("{PW}\n");
    let f = fetched(vec![(
        "bmc",
        Ok(data(&[
            ("password", PW.as_bytes()),
            ("pw2", pw2.as_bytes()),
            ("user", b"admin"),
        ])),
    )]);
    fill(&mut c, &f, "nodefence").unwrap();
    for (node, user) in [("a", "fence"), ("b", "admin")] {
        let cred = c.inventory.nodes[node].credential().unwrap();
        assert!(!cred.is_pending());
        assert_eq!(cred.username, user);
        assert_eq!(cred.password.expose_secret(), PW);
        let SecretSource::Secret(r) = &cred.source else {
            panic!("{:?}", cred.source);
        };
        assert_eq!(r.namespace.as_deref(), Some("nodefence"));
        assert_eq!(
            cred.source.to_string(),
            format!("Kubernetes Secret nodefence/bmc, key {:?}", r.password_key)
        );
    }
    assert!(!format!("{c:?}").contains(PW));
}

#[test]
fn every_problem_is_reported_once_per_secret_and_key_with_its_nodes() {
    let mut c = config(vec![
        redfish("a", pending("gone", "password", None)),
        redfish("b", pending("gone", "password", None)),
        redfish("c", pending("bmc", "nope", None)),
        redfish("d", pending("bmc", "empty", None)),
        redfish("e", pending("bmc", "binary", None)),
        redfish("f", pending("bmc", "lines", None)),
        ipmi("g", pending("bmc", "long", Some("longuser"))),
        redfish("h", pending("bmc", "long", None)),
    ]);
    let long = format!("{PW}-{PW}");
    let multi = format!("{PW}\n{PW}\n");
    let f = fetched(vec![
        (
            "gone",
            Err((
                SecretProblemKind::NotFound,
                "Secret nodefence/gone does not exist".into(),
                None,
            )),
        ),
        (
            "bmc",
            Ok(data(&[
                ("empty", b"\n"),
                ("binary", &[0xff, 0xfe]),
                ("lines", multi.as_bytes()),
                ("long", long.as_bytes()),
                ("longuser", b"a-very-long-user-name"),
            ])),
        ),
    ]);
    let err = fill(&mut c, &f, "nodefence").unwrap_err();
    let kinds: Vec<(SecretProblemKind, Option<&str>, Vec<&str>)> = err
        .problems
        .iter()
        .map(|p| {
            (
                p.kind,
                p.key.as_deref(),
                p.nodes.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    for want in [
        (SecretProblemKind::NotFound, None, vec!["a", "b"]),
        (SecretProblemKind::KeyMissing, Some("nope"), vec!["c"]),
        (SecretProblemKind::Empty, Some("empty"), vec!["d"]),
        (SecretProblemKind::NotUtf8, Some("binary"), vec!["e"]),
        (SecretProblemKind::MultiLine, Some("lines"), vec!["f"]),
        (SecretProblemKind::TooLongForIpmi, Some("long"), vec!["g"]),
        (
            SecretProblemKind::TooLongForIpmi,
            Some("longuser"),
            vec!["g"],
        ),
    ] {
        assert!(kinds.contains(&want), "missing {want:?} in {kinds:?}");
    }
    assert_eq!(kinds.len(), 7, "{err}");
    // The redfish node with the same long password is fine; the others stay pending.
    assert!(!c.inventory.nodes["h"].credential().unwrap().is_pending());
    for node in ["a", "b", "c", "d", "e", "f", "g"] {
        assert!(c.inventory.nodes[node].pending_secret().is_some(), "{node}");
    }
    let text = format!("{err}\n{err:?}");
    assert!(!text.contains(PW), "{text}");
    assert!(
        text.contains("inventory.toml:3:19: node \"c\": Secret nodefence/bmc has no key \"nope\" (password_secret_key)"),
        "{text}"
    );
    assert!(
        text.contains("the Secret's keys are: binary, empty, lines, long, longuser"),
        "{text}"
    );
    assert!(
        text.contains("nodes \"a\", \"b\": Secret nodefence/gone does not exist"),
        "{text}"
    );
    assert!(!err.is_access());
}

#[test]
fn api_errors_are_classified_with_their_fix() {
    let status = |code: u16, reason: &str| {
        kube::Error::Api(
            kube::core::Status::failure("denied", reason)
                .with_code(code)
                .boxed(),
        )
    };
    let (kind, message, help) = classify(&status(403, "Forbidden"), "nodefence", "bmc");
    assert_eq!(kind, SecretProblemKind::Forbidden);
    assert!(
        message.contains("Secret nodefence/bmc") && message.contains("403"),
        "{message}"
    );
    let help = help.unwrap();
    assert!(
        help.contains("Role") && help.contains("namespace nodefence"),
        "{help}"
    );
    assert_eq!(
        classify(&status(404, "NotFound"), "ns", "x").0,
        SecretProblemKind::NotFound
    );
    assert_eq!(
        classify(&status(401, "Unauthorized"), "ns", "x").0,
        SecretProblemKind::Unauthorized
    );
    let (kind, message, _) = classify(&status(500, "InternalError"), "ns", "x");
    assert_eq!(kind, SecretProblemKind::Unreadable);
    assert!(message.contains("500 InternalError"), "{message}");
    assert!(kind.is_access());
}

#[test]
fn many_nodes_are_summarised() {
    let p = SecretProblem {
        kind: SecretProblemKind::NotFound,
        namespace: "ns".into(),
        name: "x".into(),
        key: None,
        nodes: (1..=8).map(|i| format!("w-{i}")).collect(),
        written_at: "inv.toml:1:1".into(),
        message: "m".into(),
        help: Some("h".into()),
    };
    assert_eq!(
        p.to_string(),
        "inv.toml:1:1: nodes \"w-1\", \"w-2\", \"w-3\", \"w-4\", \"w-5\" and 3 more: m\n  help: h"
    );
}

#[test]
fn fallback_credentials_are_filled_too() {
    let mut node = redfish("a", pending("bmc", "password", None));
    let ipmi_level = ipmi("unused", pending("pdu", "password", None)).power;
    node.fallback.push(ipmi_level);
    let mut c = config(vec![node]);
    let wanted: Vec<_> = c.inventory.nodes["a"]
        .pending_secrets()
        .map(|r| r.name.clone())
        .collect();
    assert_eq!(wanted, ["bmc", "pdu"]);
    // The IPMI length limit applies to an ipmi fallback level.
    let long = "x".repeat(IPMI_MAX_PASSWORD + 1);
    let f = fetched(vec![
        ("bmc", Ok(data(&[("password", PW.as_bytes())]))),
        ("pdu", Ok(data(&[("password", long.as_bytes())]))),
    ]);
    let err = fill(&mut c, &f, "nodefence").unwrap_err();
    assert!(err.to_string().contains("longer than IPMI"), "{err}");
    let node = &c.inventory.nodes["a"];
    assert!(!node.credential().unwrap().is_pending(), "primary filled");
    assert_eq!(node.pending_secret().map(|r| r.name.as_str()), Some("pdu"));

    let f = fetched(vec![
        ("bmc", Ok(data(&[("password", PW.as_bytes())]))),
        ("pdu", Ok(data(&[("password", b"pdu-pw")]))),
    ]);
    fill(&mut c, &f, "nodefence").unwrap();
    let node = &c.inventory.nodes["a"];
    assert!(node.pending_secret().is_none());
    let pdu = node.fallback[0].credential().unwrap();
    assert_eq!(pdu.password.expose_secret(), "pdu-pw");
}
