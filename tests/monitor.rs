//! The BMC monitor against the mock BMC and fake-kube: a broken BMC is reported once
//! (Event + metric), not at every pass, and its recovery is reported too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use nodefence::config::{
    Credential, NodeTarget, PowerSource, RedfishAuth, RedfishTarget, SecretSource, Timeouts,
    TlsSettings,
};
use nodefence::controller::executor::Executor;
use nodefence::controller::monitor::{MonitorState, check_all};
use nodefence::power::registry::{DriverFactory, NodeDrivers};
use nodefence::telemetry::{Metrics, parse_samples};
use nodefence_mocks::kube::FakeKube;
use nodefence_mocks::kube::resources::EVENTS_V1;
use nodefence_mocks::redfish::{Fault, MockPower, MockRedfish, Profile, SystemSpec};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_and_recoveries_are_reported_once_each() {
    nodefence::tls::install_crypto_provider();
    let kube = FakeKube::builder().start().await.unwrap();
    let bmc = MockRedfish::builder()
        .profile(Profile::MultiSystem)
        .systems((1..=2).map(|i| SystemSpec::new(format!("Blade{i}")).power(MockPower::On)))
        .credentials("fence", "pw")
        .start()
        .await
        .unwrap();
    let factory = DriverFactory::new(4);
    let mut drivers = NodeDrivers::new();
    for i in 1..=2 {
        let node = NodeTarget {
            fallback: Vec::new(),
            origin: Default::default(),
            metal3_host: None,
            name: format!("worker-{i}"),
            group: None,
            power: PowerSource::Redfish(RedfishTarget {
                endpoint: bmc.base_url().parse().unwrap(),
                system_id: Some(format!("Blade{i}")),
                credential: Credential {
                    username: "fence".into(),
                    password: "pw".to_string().into(),
                    source: SecretSource::Inline,
                },
                auth: RedfishAuth::Auto,
                tls: TlsSettings::default(),
                timeouts: Timeouts {
                    operation: Duration::from_secs(3),
                    retries: 0,
                    ..Timeouts::default()
                },
            }),
            policy: Default::default(),
        };
        drivers.insert(node.name.clone(), factory.driver(&node));
    }
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&kube.kubeconfig_yaml()).unwrap();
    let client = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap(),
    )
    .unwrap();
    let recorder = Executor::recorder(client, "test");
    let metrics = Metrics::new();
    let mut failing = BTreeMap::new();
    let (_tx, identities) = tokio::sync::watch::channel(BTreeMap::new());
    let mut identity = MonitorState::default();
    let reasons = || -> Vec<String> {
        let (events, _) = kube.store().list(EVENTS_V1, None);
        events
            .iter()
            .filter_map(|e| e["reason"].as_str().map(str::to_string))
            .collect()
    };
    let failing_gauge = |m: &Metrics, node: &str| -> Option<f64> {
        parse_samples(&m.encode())
            .expect("valid exposition")
            .into_iter()
            .find(|s| {
                s.name == "nodefence_bmc_monitor_failures"
                    && s.labels.get("node").map(String::as_str) == Some(node)
            })
            .map(|s| s.value)
    };

    assert_eq!(
        check_all(
            &drivers,
            &mut failing,
            &identities,
            &mut identity,
            &metrics,
            Some(&recorder),
            4
        )
        .await,
        0
    );
    assert!(reasons().is_empty(), "healthy BMCs raise no Events");
    assert_eq!(failing_gauge(&metrics, "worker-1"), Some(0.0));

    bmc.inject(Fault::RejectCredentials);
    assert_eq!(
        check_all(
            &drivers,
            &mut failing,
            &identities,
            &mut identity,
            &metrics,
            Some(&recorder),
            4
        )
        .await,
        2
    );
    assert_eq!(
        check_all(
            &drivers,
            &mut failing,
            &identities,
            &mut identity,
            &metrics,
            Some(&recorder),
            4
        )
        .await,
        2
    );
    let r = reasons();
    assert_eq!(
        r.iter().filter(|x| *x == "BmcCheckFailed").count(),
        2,
        "once per node, not per pass: {r:?}"
    );
    assert_eq!(failing_gauge(&metrics, "worker-2"), Some(1.0));
    let (events, _) = kube.store().list(EVENTS_V1, None);
    let note = events[0]["note"].as_str().unwrap_or_default().to_string();
    assert!(note.contains("auth") && !note.contains("pw\""), "{note}");
    assert_eq!(events[0]["type"], Value::from("Warning"));

    bmc.clear_faults();
    assert_eq!(
        check_all(
            &drivers,
            &mut failing,
            &identities,
            &mut identity,
            &metrics,
            Some(&recorder),
            4
        )
        .await,
        0
    );
    assert_eq!(
        reasons()
            .iter()
            .filter(|x| *x == "BmcCheckRecovered")
            .count(),
        2
    );
    assert_eq!(failing_gauge(&metrics, "worker-1"), Some(0.0));
    assert!(bmc.reset_log().is_empty(), "the monitor only reads");
    kube.shutdown().await;
}

/// The identity cross-check through real HTTP: each node's BMC UUID against the
/// Node's systemUUID, Events and `nodefence_bmc_identity` on transitions only.
mod identity {
    use super::*;
    use nodefence::controller::monitor::{MonitorState, recheck_identities};
    use nodefence::identity::{Equivalence, IdentityCheck, NodeIdentity};
    use tokio::sync::watch;

    const U1: &str = "4c4c4544-0031-3510-8052-b2c04f503131";
    const U2: &str = "4c4c4544-0032-3510-8052-b2c04f503132";
    /// Another machine's UUID: what worker-2's Node says while its entry is wrong.
    const U2_NODE: &str = "4c4c4544-0099-3510-8052-b2c04f503199";
    const U3: &str = "4c4c4544-0033-3510-8052-b2c04f503133";
    /// U3 with its first three fields byte-swapped, as some BMCs report it.
    const U3_SWAPPED: &str = "44454c4c-3300-1035-8052-b2c04f503133";
    const U4: &str = "4c4c4544-0034-3510-8052-b2c04f503134";
    const U5: &str = "4c4c4544-0035-3510-8052-b2c04f503135";

    fn node_target(bmc: &nodefence_mocks::redfish::MockRedfishHandle, i: usize) -> NodeTarget {
        NodeTarget {
            fallback: Vec::new(),
            origin: Default::default(),
            metal3_host: None,
            name: format!("worker-{i}"),
            group: None,
            power: PowerSource::Redfish(RedfishTarget {
                endpoint: bmc.base_url().parse().unwrap(),
                system_id: Some(format!("Blade{i}")),
                credential: Credential {
                    username: "fence".into(),
                    password: "pw".to_string().into(),
                    source: SecretSource::Inline,
                },
                auth: RedfishAuth::Auto,
                tls: TlsSettings::default(),
                timeouts: Timeouts {
                    operation: Duration::from_secs(3),
                    retries: 0,
                    ..Timeouts::default()
                },
            }),
            policy: Default::default(),
        }
    }

    fn uuid_of(uuid: &str) -> NodeIdentity {
        NodeIdentity {
            system_uuid: Some(uuid.into()),
            provider_id: None,
        }
    }

    fn gauge(m: &Metrics, node: &str, result: &str) -> Option<f64> {
        parse_samples(&m.encode())
            .expect("valid exposition")
            .into_iter()
            .find(|s| {
                s.name == "nodefence_bmc_identity"
                    && s.labels.get("node").map(String::as_str) == Some(node)
                    && s.labels.get("result").map(String::as_str) == Some(result)
            })
            .map(|s| s.value)
    }

    /// (node, reason, type, note) of every Event, oldest first.
    fn events(
        kube: &nodefence_mocks::kube::FakeKubeHandle,
    ) -> Vec<(String, String, String, String)> {
        let (events, _) = kube.store().list(EVENTS_V1, None);
        events
            .iter()
            .map(|e| {
                let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
                (
                    s(&e["regarding"]["name"]),
                    s(&e["reason"]),
                    s(&e["type"]),
                    s(&e["note"]),
                )
            })
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn identity_match_mismatch_swapped_and_absent_through_the_bmc() {
        nodefence::tls::install_crypto_provider();
        let kube = FakeKube::builder().start().await.unwrap();
        let bmc = MockRedfish::builder()
            .profile(Profile::MultiSystem)
            .system(SystemSpec::new("Blade1").uuid(U1))
            .system(SystemSpec::new("Blade2").uuid(U2))
            .system(SystemSpec::new("Blade3").uuid(U3_SWAPPED))
            .system(SystemSpec::new("Blade4").uuid(U4))
            // The BMC reports an empty UUID (the mock always serves the property).
            .system(SystemSpec::new("Blade5").uuid(""))
            .credentials("fence", "pw")
            .start()
            .await
            .unwrap();
        let factory = DriverFactory::new(4);
        let mut drivers = NodeDrivers::new();
        for i in 1..=5 {
            let node = node_target(&bmc, i);
            drivers.insert(node.name.clone(), factory.driver(&node));
        }
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&kube.kubeconfig_yaml()).unwrap();
        let client = kube::Client::try_from(
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .unwrap(),
        )
        .unwrap();
        let recorder = Executor::recorder(client, "test");
        let metrics = Metrics::new();
        let mut failing = BTreeMap::new();
        let mut state = MonitorState::default();
        let cluster: BTreeMap<String, NodeIdentity> = [
            ("worker-1", uuid_of(U1)),
            ("worker-2", uuid_of(U2_NODE)),
            ("worker-3", uuid_of(U3)),
            ("worker-4", NodeIdentity::default()),
            ("worker-5", uuid_of(U5)),
        ]
        .into_iter()
        .map(|(n, id)| (n.to_string(), id))
        .collect();
        let (tx, identities) = watch::channel(cluster.clone());

        for _ in 0..2 {
            let failed = check_all(
                &drivers,
                &mut failing,
                &identities,
                &mut state,
                &metrics,
                Some(&recorder),
                4,
            )
            .await;
            assert_eq!(failed, 0, "every BMC answers");
        }

        assert_eq!(
            state.result("worker-1"),
            Some(&IdentityCheck::Match(Equivalence::Exact))
        );
        assert_eq!(
            state.result("worker-2"),
            Some(&IdentityCheck::Mismatch {
                node: U2_NODE.into(),
                machine: U2.into()
            })
        );
        assert_eq!(
            state.result("worker-3"),
            Some(&IdentityCheck::Match(Equivalence::FieldsSwapped)),
            "a byte-swapped UUID is the same machine"
        );
        assert_eq!(
            state.result("worker-4"),
            Some(&IdentityCheck::Unknown("node reports no systemUUID".into()))
        );
        assert_eq!(
            state.result("worker-5"),
            Some(&IdentityCheck::Unknown(
                "the BMC's ComputerSystem has no UUID".into()
            ))
        );

        // Metrics: 1 on the current result, 0 on the others.
        assert_eq!(gauge(&metrics, "worker-1", "match"), Some(1.0));
        assert_eq!(gauge(&metrics, "worker-1", "mismatch"), Some(0.0));
        assert_eq!(gauge(&metrics, "worker-2", "mismatch"), Some(1.0));
        assert_eq!(gauge(&metrics, "worker-2", "match"), Some(0.0));
        assert_eq!(gauge(&metrics, "worker-3", "match"), Some(1.0));
        assert_eq!(gauge(&metrics, "worker-4", "unknown"), Some(1.0));
        assert_eq!(gauge(&metrics, "worker-5", "unknown"), Some(1.0));

        // Events: one per transition, not one per pass.
        let seen = events(&kube);
        let mismatches: Vec<_> = seen
            .iter()
            .filter(|(_, r, _, _)| r == "IdentityMismatch")
            .collect();
        assert_eq!(mismatches.len(), 1, "{seen:#?}");
        let (node, _, type_, note) = mismatches[0];
        assert_eq!(node, "worker-2");
        assert_eq!(type_, "Warning");
        assert!(note.contains(U2_NODE) && note.contains(U2), "{note}");
        assert!(
            note.contains("blocked") && note.contains("inventory"),
            "{note}"
        );
        let mut unknown: Vec<&str> = seen
            .iter()
            .filter(|(_, r, _, _)| r == "IdentityUnknown")
            .map(|(n, _, t, _)| {
                assert_eq!(t, "Normal");
                n.as_str()
            })
            .collect();
        unknown.sort();
        assert_eq!(unknown, ["worker-4", "worker-5"], "{seen:#?}");
        assert!(
            !seen
                .iter()
                .any(|(n, _, _, _)| n == "worker-1" || n == "worker-3"),
            "matching nodes are quiet: {seen:#?}"
        );

        // The inventory is fixed (here: the Node's identity is corrected): the change is
        // re-checked at once from what the driver remembers, without a BMC request.
        let requests_before = bmc.request_log().len();
        let mut fixed = cluster;
        fixed.insert("worker-2".into(), uuid_of(U2));
        tx.send(fixed).unwrap();
        let checked = recheck_identities(
            &drivers,
            &failing,
            &identities,
            &mut state,
            &metrics,
            Some(&recorder),
            4,
        )
        .await;
        assert_eq!(checked, 1, "only the node whose identity changed");
        assert_eq!(bmc.request_log().len(), requests_before);
        assert_eq!(
            state.result("worker-2"),
            Some(&IdentityCheck::Match(Equivalence::Exact))
        );
        assert_eq!(gauge(&metrics, "worker-2", "mismatch"), Some(0.0));
        assert_eq!(gauge(&metrics, "worker-2", "match"), Some(1.0));
        let seen = events(&kube);
        assert!(
            seen.iter()
                .any(|(n, r, t, _)| n == "worker-2" && r == "IdentityMatch" && t == "Normal"),
            "{seen:#?}"
        );
        assert!(bmc.reset_log().is_empty(), "the monitor only reads");
        kube.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn nodes_the_cluster_has_not_described_are_not_judged() {
        nodefence::tls::install_crypto_provider();
        let bmc = MockRedfish::builder()
            .profile(Profile::MultiSystem)
            .system(SystemSpec::new("Blade1").uuid(U1))
            .credentials("fence", "pw")
            .start()
            .await
            .unwrap();
        let factory = DriverFactory::new(4);
        let mut drivers = NodeDrivers::new();
        let node = node_target(&bmc, 1);
        drivers.insert(node.name.clone(), factory.driver(&node));
        let metrics = Metrics::new();
        let mut failing = BTreeMap::new();
        let mut state = MonitorState::default();
        let (_tx, identities) = watch::channel(BTreeMap::new());
        check_all(
            &drivers,
            &mut failing,
            &identities,
            &mut state,
            &metrics,
            None,
            4,
        )
        .await;
        assert_eq!(state.result("worker-1"), None);
        assert_eq!(gauge(&metrics, "worker-1", "unknown"), None);
        assert_eq!(gauge(&metrics, "worker-1", "match"), None);
    }
}
