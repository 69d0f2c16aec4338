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
use nodefence::controller::monitor::check_all;
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
        check_all(&drivers, &mut failing, &metrics, Some(&recorder), 4).await,
        0
    );
    assert!(reasons().is_empty(), "healthy BMCs raise no Events");
    assert_eq!(failing_gauge(&metrics, "worker-1"), Some(0.0));

    bmc.inject(Fault::RejectCredentials);
    assert_eq!(
        check_all(&drivers, &mut failing, &metrics, Some(&recorder), 4).await,
        2
    );
    assert_eq!(
        check_all(&drivers, &mut failing, &metrics, Some(&recorder), 4).await,
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
        check_all(&drivers, &mut failing, &metrics, Some(&recorder), 4).await,
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
