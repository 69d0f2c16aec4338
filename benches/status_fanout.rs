//! How long `status` takes across a fleet, cold (discovery + session login) and warm
//! (session and connection reused), with bounded concurrency, against the mock BMC
//! over loopback HTTP with an injected per-request BMC latency.
//!
//! Run: `cargo bench --bench status_fanout` (NODES, CONCURRENCY, BMC_LATENCY_MS
//! environment variables change the shape).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use nodefence::config::{
    Credential, NodeTarget, PowerSource, RedfishAuth, RedfishTarget, SecretSource, Timeouts,
    TlsSettings,
};
use nodefence::power::PowerDriver;
use nodefence::power::registry::DriverFactory;
use nodefence_mocks::redfish::{Fault, MockPower, MockRedfish, Profile, SystemSpec};

mod common;
use common::{env_or, pct};

async fn pass(drivers: &[Arc<dyn PowerDriver>], concurrency: usize) -> (Duration, Vec<Duration>) {
    let started = Instant::now();
    let mut latencies: Vec<Duration> = futures::stream::iter(drivers.iter().cloned())
        .map(|d| async move { d.status().await.expect("status").latency })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    latencies.sort();
    (started.elapsed(), latencies)
}

#[tokio::main]
async fn main() {
    nodefence::tls::install_crypto_provider();
    let nodes = env_or("NODES", 200);
    let concurrency = env_or("CONCURRENCY", 16);
    let latency_ms = env_or("BMC_LATENCY_MS", 20) as u64;
    let mock = MockRedfish::builder()
        .profile(Profile::MultiSystem)
        .systems((1..=nodes).map(|i| SystemSpec::new(format!("Blade{i}")).power(MockPower::On)))
        .credentials("fence", "bench")
        .start()
        .await
        .expect("mock");
    mock.inject(Fault::Slow(Duration::from_millis(latency_ms)));
    let factory = DriverFactory::new(concurrency);
    let drivers: Vec<Arc<dyn PowerDriver>> = (1..=nodes)
        .map(|i| {
            factory
                .driver(&NodeTarget {
                    fallback: Vec::new(),
                    origin: Default::default(),
                    metal3_host: None,
                    name: format!("worker-{i}"),
                    group: None,
                    power: PowerSource::Redfish(RedfishTarget {
                        endpoint: mock.base_url().parse().unwrap(),
                        system_id: Some(format!("Blade{i}")),
                        credential: Credential {
                            username: "fence".into(),
                            password: "bench".to_string().into(),
                            source: SecretSource::Inline,
                        },
                        auth: RedfishAuth::Auto,
                        tls: TlsSettings::default(),
                        timeouts: Timeouts {
                            operation: Duration::from_secs(300),
                            ..Timeouts::default()
                        },
                    }),
                    policy: Default::default(),
                })
                .unwrap()
        })
        .collect();
    println!(
        "status fan-out: {nodes} nodes, concurrency {concurrency}, BMC latency {latency_ms} ms per request"
    );
    for label in ["cold", "warm", "warm"] {
        mock.clear_logs();
        let (total, lat) = pass(&drivers, concurrency).await;
        let requests = mock.request_log().len();
        println!(
            "  {label}: {:>7.1} ms total, per node p50 {:>6.1} ms p99 {:>6.1} ms, {:.1} HTTP requests per node",
            total.as_secs_f64() * 1e3,
            pct(&lat, 0.5).as_secs_f64() * 1e3,
            pct(&lat, 0.99).as_secs_f64() * 1e3,
            requests as f64 / nodes as f64
        );
    }
    for d in &drivers {
        d.close().await;
    }
    mock.shutdown().await;
}
