//! The BMC monitor over a fencing topology, against fake-kube: every level of a node
//! with `fallback` is checked on its own (each read once per pass), a dead fallback or
//! a dead primary behind a working fallback is reported (Event + per-level gauge) once,
//! its recovery too, and `BmcCheckFailed` keeps meaning "no level can read the node".
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use nodefence::controller::executor::Executor;
use nodefence::controller::monitor::{MonitorState, check_all};
use nodefence::power::confirm::ConfirmPolicy;
use nodefence::power::registry::NodeDrivers;
use nodefence::power::topology::TopologyDriver;
use nodefence::power::{PowerDriver, PowerError, PowerReading, PowerState};
use nodefence::telemetry::{Metrics, parse_samples};
use nodefence_mocks::kube::FakeKube;
use nodefence_mocks::kube::resources::EVENTS_V1;
use serde_json::Value;

/// One power method with a scripted answer; counts its status reads.
struct Level {
    name: &'static str,
    endpoint: &'static str,
    answer: Mutex<Result<PowerState, PowerError>>,
    reads: AtomicUsize,
}

impl Level {
    fn new(name: &'static str, endpoint: &'static str) -> Arc<Self> {
        Arc::new(Self {
            name,
            endpoint,
            answer: Mutex::new(Ok(PowerState::On)),
            reads: AtomicUsize::new(0),
        })
    }
    fn answer(&self, a: Result<PowerState, PowerError>) {
        *self.answer.lock().unwrap() = a;
    }
    fn reads(&self) -> usize {
        self.reads.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl PowerDriver for Level {
    fn driver_name(&self) -> &'static str {
        self.name
    }
    fn endpoint(&self) -> String {
        self.endpoint.to_string()
    }
    async fn status(&self) -> Result<PowerReading, PowerError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        let state = self.answer.lock().unwrap().clone()?;
        Ok(PowerReading {
            state,
            at: SystemTime::now(),
            latency: Duration::from_millis(1),
        })
    }
    async fn power_off(&self) -> Result<(), PowerError> {
        Err(PowerError::unsupported("the monitor never sends commands"))
    }
    async fn power_on(&self) -> Result<(), PowerError> {
        Err(PowerError::unsupported("the monitor never sends commands"))
    }
    async fn reboot(&self) -> Result<(), PowerError> {
        Err(PowerError::unsupported("the monitor never sends commands"))
    }
}

fn topology(levels: &[&Arc<Level>]) -> Arc<dyn PowerDriver> {
    let levels = levels
        .iter()
        .map(|l| Arc::clone(l) as Arc<dyn PowerDriver>)
        .collect();
    Arc::new(TopologyDriver::new(levels, ConfirmPolicy::default()).unwrap())
}

struct World {
    kube: nodefence_mocks::kube::FakeKubeHandle,
    recorder: nodefence::cluster::events::Recorder,
    metrics: Metrics,
    failing: BTreeMap<String, String>,
    state: MonitorState,
    identities: tokio::sync::watch::Receiver<nodefence::controller::monitor::NodeIdentities>,
    _tx: tokio::sync::watch::Sender<nodefence::controller::monitor::NodeIdentities>,
}

impl World {
    async fn new() -> Self {
        let kube = FakeKube::builder().start().await.unwrap();
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&kube.kubeconfig_yaml()).unwrap();
        let client = kube::Client::try_from(
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .unwrap(),
        )
        .unwrap();
        let (tx, identities) = tokio::sync::watch::channel(BTreeMap::new());
        Self {
            kube,
            recorder: Executor::recorder(client, "test"),
            metrics: Metrics::new(),
            failing: BTreeMap::new(),
            state: MonitorState::default(),
            identities,
            _tx: tx,
        }
    }

    /// One monitor pass; how many nodes failed the (overall) power check.
    async fn pass(&mut self, drivers: &NodeDrivers) -> usize {
        check_all(
            drivers,
            &mut self.failing,
            &self.identities,
            &mut self.state,
            &self.metrics,
            Some(&self.recorder),
            4,
        )
        .await
    }

    /// Every Event so far, as (reason, type, note), oldest first.
    fn events(&self) -> Vec<(String, String, String)> {
        let (events, _) = self.kube.store().list(EVENTS_V1, None);
        let field = |e: &Value, k: &str| e[k].as_str().unwrap_or_default().to_string();
        events
            .iter()
            .map(|e| (field(e, "reason"), field(e, "type"), field(e, "note")))
            .collect()
    }

    fn count(&self, reason: &str) -> usize {
        self.events().iter().filter(|(r, _, _)| r == reason).count()
    }

    /// `nodefence_power_level_failures` of `node`: (level, driver, value), by level.
    fn level_gauge(&self, node: &str) -> Vec<(String, String, f64)> {
        let mut out: Vec<_> = parse_samples(&self.metrics.encode())
            .unwrap()
            .into_iter()
            .filter(|s| s.name == "nodefence_power_level_failures" && s.label("node") == node)
            .map(|s| {
                (
                    s.label("level").to_string(),
                    s.label("driver").to_string(),
                    s.value,
                )
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    fn bmc_gauge(&self, node: &str) -> Option<f64> {
        parse_samples(&self.metrics.encode())
            .unwrap()
            .into_iter()
            .find(|s| s.name == "nodefence_bmc_monitor_failures" && s.label("node") == node)
            .map(|s| s.value)
    }
}

fn gauge(levels: &[(&str, &str, f64)]) -> Vec<(String, String, f64)> {
    levels
        .iter()
        .map(|(l, d, v)| (l.to_string(), d.to_string(), *v))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_fallback_is_reported_once_and_its_recovery_too() {
    let mut w = World::new().await;
    let bmc = Level::new("redfish", "https://db-1-bmc/");
    let pdu = Level::new("exec", "fence_apc ip=pdu-1 plug=7");
    let single = Level::new("ipmi", "10.0.0.9:623");
    let mut drivers = NodeDrivers::new();
    drivers.insert("db-1".into(), Ok(topology(&[&bmc, &pdu])));
    drivers.insert("db-2".into(), Ok(single.clone() as Arc<dyn PowerDriver>));

    assert_eq!(w.pass(&drivers).await, 0);
    assert!(w.events().is_empty(), "{:?}", w.events());
    assert_eq!(
        w.level_gauge("db-1"),
        gauge(&[("1", "redfish", 0.0), ("2", "exec", 0.0)])
    );
    assert!(
        w.level_gauge("db-2").is_empty(),
        "one method: no level series"
    );
    // Each level read once per pass, the primary included (not once for the level
    // check and again for the node's own status).
    assert_eq!((bmc.reads(), pdu.reads(), single.reads()), (1, 1, 1));

    // The PDU dies behind a working BMC: the node is still fenceable, the level is not.
    pdu.answer(Err(PowerError::unreachable(
        "connection refused by pdu-1:23",
    )));
    for _ in 0..2 {
        assert_eq!(w.pass(&drivers).await, 0, "the node itself still answers");
    }
    assert_eq!((bmc.reads(), pdu.reads()), (3, 3));
    assert_eq!(w.count("PowerLevelFailed"), 1, "{:?}", w.events());
    assert_eq!(w.count("BmcCheckFailed"), 0, "level 1 still reads the node");
    let (_, type_, note) = w
        .events()
        .into_iter()
        .find(|(r, _, _)| r == "PowerLevelFailed")
        .unwrap();
    assert_eq!(type_, "Warning");
    for part in [
        "level 2",
        "exec fence_apc ip=pdu-1 plug=7",
        "unreachable: connection refused by pdu-1:23",
        "through level 1",
    ] {
        assert!(note.contains(part), "{part:?} not in {note}");
    }
    assert_eq!(
        w.level_gauge("db-1"),
        gauge(&[("1", "redfish", 0.0), ("2", "exec", 1.0)])
    );
    assert_eq!(w.bmc_gauge("db-1"), Some(0.0));
    assert_eq!(w.state.failing_levels("db-1"), [2]);

    pdu.answer(Ok(PowerState::On));
    assert_eq!(w.pass(&drivers).await, 0);
    assert_eq!(w.pass(&drivers).await, 0);
    assert_eq!(w.count("PowerLevelRecovered"), 1, "{:?}", w.events());
    let (_, type_, note) = w
        .events()
        .into_iter()
        .find(|(r, _, _)| r == "PowerLevelRecovered")
        .unwrap();
    assert_eq!(type_, "Normal");
    assert!(note.contains("level 2") && note.contains("exec"), "{note}");
    assert_eq!(
        w.level_gauge("db-1"),
        gauge(&[("1", "redfish", 0.0), ("2", "exec", 0.0)])
    );
    assert!(w.state.failing_levels("db-1").is_empty());
    assert_eq!(w.count("BmcCheckFailed") + w.count("BmcCheckRecovered"), 0);
    w.kube.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_primary_behind_a_working_fallback_and_then_no_level_at_all() {
    let mut w = World::new().await;
    let bmc = Level::new("ipmi", "10.0.9.21:623");
    let pdu = Level::new("exec", "fence_apc ip=pdu-1 plug=7");
    let mut drivers = NodeDrivers::new();
    drivers.insert("db-1".into(), Ok(topology(&[&bmc, &pdu])));

    bmc.answer(Err(PowerError::auth("the BMC refused user \"fence\"")));
    assert_eq!(w.pass(&drivers).await, 0, "the fallback reads the node");
    assert_eq!((bmc.reads(), pdu.reads()), (1, 1));
    assert_eq!(w.count("PowerLevelFailed"), 1, "{:?}", w.events());
    assert_eq!(w.count("BmcCheckFailed"), 0);
    let note = &w.events()[0].2;
    assert!(
        note.contains("level 1") && note.contains("ipmi 10.0.9.21:623"),
        "{note}"
    );
    assert!(note.contains("auth: the BMC refused"), "{note}");
    assert_eq!(
        w.level_gauge("db-1"),
        gauge(&[("1", "ipmi", 1.0), ("2", "exec", 0.0)])
    );

    // Now the PDU goes too: no level reads the node, which is BmcCheckFailed (once),
    // and one more PowerLevelFailed for level 2 (level 1's is not repeated).
    pdu.answer(Err(PowerError::unreachable("timed out")));
    assert_eq!(w.pass(&drivers).await, 1);
    assert_eq!(w.pass(&drivers).await, 1);
    assert_eq!((bmc.reads(), pdu.reads()), (3, 3));
    assert_eq!(w.count("BmcCheckFailed"), 1, "{:?}", w.events());
    assert_eq!(w.count("PowerLevelFailed"), 2, "{:?}", w.events());
    let failed = w
        .events()
        .into_iter()
        .find(|(r, _, _)| r == "BmcCheckFailed")
        .unwrap()
        .2;
    assert!(
        failed.contains("level 1") && failed.contains("level 2"),
        "the node's failure names every level: {failed}"
    );
    let level2 = w
        .events()
        .into_iter()
        .filter(|(r, _, _)| r == "PowerLevelFailed")
        .nth(1)
        .unwrap()
        .2;
    assert!(level2.contains("no level of this node"), "{level2}");
    assert_eq!(w.bmc_gauge("db-1"), Some(1.0));
    assert_eq!(
        w.level_gauge("db-1"),
        gauge(&[("1", "ipmi", 1.0), ("2", "exec", 1.0)])
    );

    // An uncertain answer is an answer: the level passes, the node reads again.
    pdu.answer(Ok(PowerState::PoweringOff));
    assert_eq!(w.pass(&drivers).await, 0);
    assert_eq!(w.count("BmcCheckRecovered"), 1);
    assert_eq!(w.count("PowerLevelRecovered"), 1);
    assert_eq!(w.state.failing_levels("db-1"), [1]);
    assert_eq!(
        w.level_gauge("db-1"),
        gauge(&[("1", "ipmi", 1.0), ("2", "exec", 0.0)])
    );
    w.kube.shutdown().await;
}
