use super::*;

const NODE: &str = "4c4c4544-0031-3510-8052-b2c04f503132";
/// NODE with its first three fields byte-swapped.
const NODE_SWAPPED: &str = "44454c4c-3100-1035-8052-b2c04f503132";
/// NODE with all 16 bytes reversed.
const NODE_REVERSED: &str = "3231504f-c0b2-5280-1035-310044454c4c";

fn node(uuid: &str) -> NodeIdentity {
    NodeIdentity {
        system_uuid: Some(uuid.into()),
        provider_id: None,
    }
}

fn bmc(uuid: &str) -> MachineIdentity {
    MachineIdentity::Uuid(uuid.into())
}

#[test]
fn identical_uuids_match_whatever_the_spelling() {
    for spelling in [
        NODE,
        "4C4C4544-0031-3510-8052-B2C04F503132",
        "{4C4C4544-0031-3510-8052-B2C04F503132}",
        "4c4c4544003135108052b2c04f503132",
        "urn:uuid:4c4c4544-0031-3510-8052-b2c04f503132",
        " 4c4c4544-0031-3510-8052-b2c04f503132\n",
    ] {
        let got = check(&node(NODE), &bmc(spelling));
        assert_eq!(got, IdentityCheck::Match(Equivalence::Exact), "{spelling}");
        assert!(got.is_match());
        assert_eq!(got.label(), "match");
    }
}

#[test]
fn a_different_uuid_is_a_mismatch_naming_both() {
    let other = "4c4c4544-0032-3510-8052-b2c04f503132";
    let got = check(&node(NODE), &bmc(other));
    assert_eq!(
        got,
        IdentityCheck::Mismatch {
            node: NODE.into(),
            machine: other.into()
        }
    );
    assert!(!got.is_match());
    assert!(got.is_mismatch());
    assert_eq!(got.label(), "mismatch");
    let text = got.describe();
    assert!(text.contains(NODE) && text.contains(other), "{text}");
    assert!(text.contains("inventory"), "{text}");
}

#[test]
fn first_three_fields_swapped_match_in_both_directions() {
    assert_eq!(
        check(&node(NODE), &bmc(NODE_SWAPPED)),
        IdentityCheck::Match(Equivalence::FieldsSwapped)
    );
    assert_eq!(
        check(&node(NODE_SWAPPED), &bmc(NODE)),
        IdentityCheck::Match(Equivalence::FieldsSwapped)
    );
    assert_eq!(
        Uuid::parse_str(NODE_SWAPPED).ok().map(|u| u.to_bytes_le()),
        Uuid::parse_str(NODE).ok().map(|u| *u.as_bytes())
    );
}

#[test]
fn all_bytes_reversed_match() {
    assert_eq!(
        check(&node(NODE), &bmc(NODE_REVERSED)),
        IdentityCheck::Match(Equivalence::Reversed)
    );
    assert_eq!(
        check(&node(NODE_REVERSED), &bmc(NODE)),
        IdentityCheck::Match(Equivalence::Reversed)
    );
}

#[test]
fn only_the_three_orders_are_accepted() {
    let n = Uuid::parse_str(NODE).ok().map(|u| *u.as_bytes());
    let Some(n) = n else {
        panic!("test UUID parses")
    };
    // Swapping only the first field, or reversing only the last 8 bytes, or
    // swapping then reversing: all byte orders nobody uses.
    let mut first_only = n;
    first_only[0..4].reverse();
    let mut tail_reversed = n;
    tail_reversed[8..16].reverse();
    let mut swapped_then_reversed = Uuid::from_bytes_le(n).into_bytes();
    swapped_then_reversed.reverse();
    for bytes in [first_only, tail_reversed, swapped_then_reversed] {
        let other = Uuid::from_bytes(bytes).to_string();
        assert!(
            check(&node(NODE), &bmc(&other)).is_mismatch(),
            "{other} must not match {NODE}"
        );
    }
    // A prefix is not a match.
    assert!(!check(&node(NODE), &bmc("4c4c4544-0031-3510")).is_match());
}

#[test]
fn one_differing_byte_is_a_mismatch_in_every_byte_order() {
    let Ok(base) = Uuid::parse_str(NODE) else {
        panic!("test UUID parses")
    };
    let base = *base.as_bytes();
    for i in 0..16 {
        let mut changed = base;
        changed[i] ^= 0x01;
        let mut rev = changed;
        rev.reverse();
        let orders = [
            Uuid::from_bytes(changed),
            Uuid::from_bytes_le(changed),
            Uuid::from_bytes(rev),
        ];
        for machine in orders {
            let got = check(&node(NODE), &bmc(&machine.to_string()));
            assert!(
                got.is_mismatch(),
                "byte {i} changed, machine {machine}: {got:?}"
            );
        }
    }
}

#[test]
fn a_node_without_system_uuid_is_unknown() {
    for n in [NodeIdentity::default(), node(""), node("  ")] {
        assert_eq!(
            check(&n, &bmc(NODE)),
            IdentityCheck::Unknown("node reports no systemUUID".into())
        );
    }
    assert_eq!(
        check(&NodeIdentity::default(), &bmc(NODE)).label(),
        "unknown"
    );
}

#[test]
fn placeholders_prove_nothing_on_either_side_in_any_order() {
    let ami = "03000200-0400-0500-0006-000700080009";
    let Ok(ami_uuid) = Uuid::parse_str(ami) else {
        panic!("placeholder parses")
    };
    let mut ami_reversed = *ami_uuid.as_bytes();
    ami_reversed.reverse();
    let spellings = [
        "00000000-0000-0000-0000-000000000000".to_string(),
        "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF".to_string(),
        ami.to_string(),
        Uuid::from_bytes_le(*ami_uuid.as_bytes()).to_string(),
        Uuid::from_bytes(ami_reversed).to_string(),
    ];
    for p in &spellings {
        let as_machine = check(&node(NODE), &bmc(p));
        let as_node = check(&node(p), &bmc(NODE));
        let both = check(&node(p), &bmc(p));
        for (side, got) in [("machine", as_machine), ("node", as_node), ("both", both)] {
            let IdentityCheck::Unknown(why) = &got else {
                panic!("{p} on {side}: {got:?}")
            };
            assert!(why.contains("placeholder"), "{why}");
        }
    }
    let IdentityCheck::Unknown(why) = check(&node(NODE), &bmc(ami)) else {
        panic!("unknown")
    };
    assert!(why.contains("power source"), "names the side: {why}");
}

#[test]
fn unparseable_values_are_unknown_naming_the_side() {
    let IdentityCheck::Unknown(why) = check(&node("not-a-uuid"), &bmc(NODE)) else {
        panic!("unknown")
    };
    assert!(why.contains("node") && why.contains("not-a-uuid"), "{why}");
    let IdentityCheck::Unknown(why) = check(&node(NODE), &bmc("4c4c4544-zzzz")) else {
        panic!("unknown")
    };
    assert!(
        why.contains("power source") && why.contains("4c4c4544-zzzz"),
        "{why}"
    );
    // A hostile value is quoted shortened.
    let long = "x".repeat(10_000);
    let IdentityCheck::Unknown(why) = check(&node(NODE), &bmc(&long)) else {
        panic!("unknown")
    };
    assert!(why.len() < 300, "{}", why.len());
}

#[test]
fn unavailable_is_unknown_with_its_reason() {
    let why = "the BMC's ComputerSystem has no UUID";
    assert_eq!(
        check(&node(NODE), &MachineIdentity::Unavailable(why.into())),
        IdentityCheck::Unknown(why.into())
    );
}

#[test]
fn instance_ids_match_the_aws_provider_id_exactly() {
    let n = NodeIdentity {
        system_uuid: Some(NODE.into()),
        provider_id: Some("aws:///us-east-1a/i-0123456789abcdef0".into()),
    };
    let id = |s: &str| MachineIdentity::InstanceId(s.into());
    assert_eq!(
        check(&n, &id("i-0123456789abcdef0")),
        IdentityCheck::Match(Equivalence::InstanceId)
    );
    assert_eq!(
        check(&n, &id("i-0123456789abcdef1")),
        IdentityCheck::Mismatch {
            node: "i-0123456789abcdef0".into(),
            machine: "i-0123456789abcdef1".into()
        }
    );
    for not_exact in [
        "I-0123456789ABCDEF0",
        "i-0123456789abcdef",
        "0123456789abcdef0",
    ] {
        assert!(check(&n, &id(not_exact)).is_mismatch(), "{not_exact}");
    }
    assert_eq!(check(&n, &id("")).label(), "unknown");
    let no_provider = NodeIdentity {
        provider_id: None,
        ..n.clone()
    };
    assert_eq!(
        check(&no_provider, &id("i-0123456789abcdef0")),
        IdentityCheck::Unknown("node reports no providerID".into())
    );
    for other in [
        "gce://project/zone/i-0123456789abcdef0",
        "aws:///us-east-1a/",
    ] {
        let n = NodeIdentity {
            provider_id: Some(other.into()),
            ..n.clone()
        };
        assert_eq!(
            check(&n, &id("i-0123456789abcdef0")).label(),
            "unknown",
            "{other}"
        );
    }
}

#[test]
fn node_identity_from_a_node_object() {
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "worker-1"},
        "spec": {"providerID": "aws:///us-east-1a/i-1"},
        "status": {"nodeInfo": {
            "systemUUID": NODE, "machineID": "", "bootID": "", "kernelVersion": "",
            "osImage": "", "containerRuntimeVersion": "", "kubeletVersion": "",
            "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"
        }}
    }))
    .unwrap_or_default();
    assert_eq!(
        NodeIdentity::from_node(&node),
        NodeIdentity {
            system_uuid: Some(NODE.into()),
            provider_id: Some("aws:///us-east-1a/i-1".into())
        }
    );
    let mut empty = node.clone();
    if let Some(info) = empty.status.as_mut().and_then(|s| s.node_info.as_mut()) {
        info.system_uuid = String::new();
    }
    assert_eq!(NodeIdentity::from_node(&empty).system_uuid, None);
    assert_eq!(
        NodeIdentity::from_node(&Node::default()),
        NodeIdentity::default()
    );
}

mod properties {
    use super::super::*;
    use proptest::prelude::*;

    fn node(u: &str) -> NodeIdentity {
        NodeIdentity {
            system_uuid: Some(u.to_string()),
            provider_id: None,
        }
    }

    fn uuid_check(a: &str, b: &str) -> IdentityCheck {
        check(&node(a), &MachineIdentity::Uuid(b.to_string()))
    }

    /// The forms firmware reports one machine's SMBIOS UUID in.
    fn forms(u: Uuid) -> [Uuid; 3] {
        let mut reversed = *u.as_bytes();
        reversed.reverse();
        [
            u,
            Uuid::from_bytes_le(*u.as_bytes()),
            Uuid::from_bytes(reversed),
        ]
    }

    fn real_uuid() -> impl Strategy<Value = Uuid> {
        any::<[u8; 16]>()
            .prop_map(Uuid::from_bytes)
            .prop_filter("not a firmware placeholder", |u| placeholder(u).is_none())
    }

    proptest! {
        /// A machine reported in any accepted byte order, in either case, with
        /// surrounding white space, is the node's machine; the check is symmetric.
        #[test]
        fn every_accepted_byte_order_matches(u in real_uuid(), which in 0usize..3, upper: bool) {
            let reported = forms(u)[which];
            let shown = if upper {
                format!(" {} ", reported.hyphenated().to_string().to_uppercase())
            } else {
                reported.to_string()
            };
            prop_assert!(uuid_check(&u.to_string(), &shown).is_match());
            prop_assert!(uuid_check(&shown, &u.to_string()).is_match());
        }

        /// Two UUIDs that are not one another in any accepted order never match: a
        /// mismatch, never "unknown" (which a permissive policy would let through).
        #[test]
        fn different_machines_are_a_mismatch(u in real_uuid(), v in real_uuid()) {
            prop_assume!(!forms(u).contains(&v));
            prop_assert!(uuid_check(&u.to_string(), &v.to_string()).is_mismatch());
            prop_assert!(uuid_check(&v.to_string(), &u.to_string()).is_mismatch());
        }

        /// Whatever two strings are compared, the verdict is the same both ways, and
        /// a placeholder or a non-UUID never matches anything.
        #[test]
        fn the_check_is_symmetric_for_any_strings(a in "\\PC{0,40}", b in "\\PC{0,40}") {
            let ab = uuid_check(&a, &b);
            let ba = uuid_check(&b, &a);
            prop_assert_eq!(ab.is_match(), ba.is_match());
            prop_assert_eq!(ab.is_mismatch(), ba.is_mismatch());
            if Uuid::parse_str(a.trim()).is_err() {
                prop_assert!(!ab.is_match());
            }
        }

        /// Any placeholder, in any order, proves nothing against any machine.
        #[test]
        fn placeholders_prove_nothing(which in 0usize..PLACEHOLDER_UUIDS.len(), order in 0usize..3, v in real_uuid()) {
            let p = Uuid::parse_str(PLACEHOLDER_UUIDS[which]).unwrap_or_default();
            let shown = forms(p)[order].to_string();
            prop_assert!(!uuid_check(&shown, &v.to_string()).is_match());
            prop_assert!(!uuid_check(&shown, &shown).is_match());
        }
    }
}
