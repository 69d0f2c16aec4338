//! How long `status` takes across a fleet of IPMI BMCs, cold (session set-up) and warm
//! (session reused), and what 5% packet loss costs, with bounded concurrency, against
//! one mock IPMI BMC per node (its own UDP socket on 127.0.0.1) with an injected
//! per-reply latency ([`Fault::Slow`], which delays every reply, handshake replies
//! included).
//!
//! The inventory (`driver = "ipmi"`, one node per BMC, default timeouts) is written to a
//! temporary directory and read with `nodefence::config::load`; drivers come from
//! `DriverFactory`, and each pass calls `status()` on every driver with at most
//! CONCURRENCY in flight, as the `status_fanout` bench does. Passes, in order:
//!
//! - **cold**: Get Channel Authentication Capabilities, Open Session, RAKP 1/2, RAKP 3/4,
//!   Set Session Privilege Level, Get Chassis Status: 6 exchanges per node;
//! - **warm** (twice): the kept session, one Get Chassis Status per node;
//! - **lossy**: warm again with `Fault::Loss { percent: 5 }` on every BMC (each request
//!   datagram the BMC receives is dropped with 5% probability; replies are not lost):
//!   a lost request is resent after the retransmit interval, which shows in p99.
//!
//! "UDP exchanges per node" is counted on the BMC side: the commands in each mock's
//! `request_log()` (Get Channel Authentication Capabilities and everything in a
//! session), plus 3 per session the mocks' `counters()` saw completed (Open Session,
//! RAKP 1, RAKP 3, which are not in the request log), plus the request datagrams the
//! injected loss dropped. It counts requests sent, so a retransmission counts again.
//!
//! Run: `cargo bench --bench ipmi_status_fanout`. Environment variables change the
//! shape: NODES (default 200), CONCURRENCY (16), BMC_LATENCY_MS (20), SUITE (cipher
//! suite, 17 or 3; default 17).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use nodefence::config::PowerSource;
use nodefence::power::PowerDriver;
use nodefence::power::ipmi::retransmit_interval;
use nodefence::power::registry::DriverFactory;
use nodefence_ipmi_proto::command::{
    CMD_GET_CHANNEL_AUTH_CAPABILITIES, CMD_GET_CHASSIS_STATUS, CMD_SET_SESSION_PRIVILEGE,
};
use nodefence_ipmi_proto::message::{NETFN_APP, NETFN_CHASSIS};
use nodefence_mocks::ipmi::{
    CipherSuite, Counters, Fault, MockIpmi, MockIpmiHandle, Privilege, RequestRecord,
};

mod common;
use common::{env_or, ms, pct};

const USER: &str = "fence";
const PASSWORD: &str = "bench-password";

/// One `status()` per driver, at most `concurrency` at a time: for each driver (in
/// order), when its call started and the latency the reading reports.
async fn pass(
    drivers: &[Arc<dyn PowerDriver>],
    concurrency: usize,
) -> (Duration, Vec<(Instant, Duration)>) {
    let started = Instant::now();
    let mut results: Vec<(usize, Instant, Duration)> =
        futures::stream::iter(drivers.iter().cloned().enumerate())
            .map(|(i, d)| async move {
                let at = Instant::now();
                (i, at, d.status().await.expect("status").latency)
            })
            .buffer_unordered(concurrency)
            .collect()
            .await;
    let total = started.elapsed();
    results.sort_by_key(|r| r.0);
    (
        total,
        results.into_iter().map(|(_, at, l)| (at, l)).collect(),
    )
}

/// The sum of every BMC's counters (only the fields this bench reads).
fn sum_counters(bmcs: &[MockIpmiHandle]) -> (u64, u64) {
    bmcs.iter()
        .map(MockIpmiHandle::counters)
        .fold((0, 0), |(opened, lost), c: Counters| {
            (opened + c.sessions_opened, lost + c.dropped.injected)
        })
}

fn first(log: &[RequestRecord], net_fn: u8, cmd: u8) -> Option<std::time::Instant> {
    log.iter()
        .find(|r| r.net_fn == net_fn && r.cmd == cmd)
        .map(|r| r.at.into_std())
}

/// Medians, over the nodes, of the steps of a cold status as the BMC saw them.
fn cold_breakdown(bmcs: &[MockIpmiHandle], runs: &[(Instant, Duration)]) -> Option<String> {
    let mut steps: [Vec<Duration>; 5] = Default::default();
    for (bmc, &(start, latency)) in bmcs.iter().zip(runs) {
        let log = bmc.request_log();
        let caps = first(&log, NETFN_APP, CMD_GET_CHANNEL_AUTH_CAPABILITIES)?;
        let rakp3 = bmc.session_log().first()?.established.into_std();
        let privilege = first(&log, NETFN_APP, CMD_SET_SESSION_PRIVILEGE)?;
        let status = first(&log, NETFN_CHASSIS, CMD_GET_CHASSIS_STATUS)?;
        let points = [start, caps, rakp3, privilege, status, start + latency];
        for (i, w) in points.windows(2).enumerate() {
            steps[i].push(w[1].saturating_duration_since(w[0]));
        }
    }
    let med: Vec<f64> = steps
        .iter_mut()
        .map(|s| {
            s.sort();
            ms(pct(s, 0.5))
        })
        .collect();
    Some(format!(
        "  cold, per node (medians, BMC-side timestamps): {:.1} ms until Get Channel Auth \
         Capabilities arrives, {:.1} ms more until RAKP 3 arrives (capabilities reply, Open \
         Session, RAKP 1/2), {:.1} ms until Set Session Privilege (RAKP 4 reply), {:.1} ms \
         until Get Chassis Status (privilege reply), {:.1} ms for its reply",
        med[0], med[1], med[2], med[3], med[4]
    ))
}

#[tokio::main]
async fn main() {
    let nodes = env_or("NODES", 200).max(1);
    let concurrency = env_or("CONCURRENCY", 16);
    let latency_ms = env_or("BMC_LATENCY_MS", 20) as u64;
    let suite = env_or("SUITE", 17) as u8;
    let offered = CipherSuite::from_id(suite).expect("SUITE must be 3 or 17");

    let mut bmcs = Vec::with_capacity(nodes);
    for i in 1..=nodes {
        let bmc = MockIpmi::builder()
            .name(format!("worker-{i}"))
            .user(USER, PASSWORD, Privilege::Administrator)
            .suites([offered])
            .start()
            .await
            .expect("mock IPMI BMC");
        bmc.set_fault(Fault::Slow(Duration::from_millis(latency_ms)));
        bmcs.push(bmc);
    }

    let dir = tempfile::tempdir().unwrap();
    let password_file = dir.path().join("bmc-password");
    std::fs::write(&password_file, PASSWORD).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&password_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    std::fs::write(
        dir.path().join("nodefence.toml"),
        "inventory = \"inventory.toml\"\n",
    )
    .unwrap();
    let mut inventory = format!(
        "[defaults]\ndriver = \"ipmi\"\naddress = \"127.0.0.1\"\nusername = \"{USER}\"\n\
         password_file = \"bmc-password\"\ncipher_suite = {suite}\n"
    );
    for (i, bmc) in bmcs.iter().enumerate() {
        inventory.push_str(&format!(
            "[nodes.worker-{}]\nport = {}\n",
            i + 1,
            bmc.port()
        ));
    }
    std::fs::write(dir.path().join("inventory.toml"), inventory).unwrap();
    let config = nodefence::config::load(&dir.path().join("nodefence.toml"))
        .unwrap_or_else(|e| panic!("inventory: {e}"));

    let factory = DriverFactory::new(concurrency);
    let drivers: Vec<Arc<dyn PowerDriver>> = (1..=nodes)
        .map(|i| {
            factory
                .driver(&config.inventory.nodes[&format!("worker-{i}")])
                .unwrap()
        })
        .collect();

    let retransmit = match &config.inventory.nodes["worker-1"].power {
        PowerSource::Ipmi(target) => retransmit_interval(&target.timeouts),
        other => panic!("worker-1 is not an IPMI node: {other:?}"),
    };
    println!(
        "ipmi status fan-out: {nodes} nodes (one mock BMC each), concurrency {concurrency}, \
         BMC latency {latency_ms} ms per reply, cipher suite {suite}, retransmit every {} ms",
        ms(retransmit)
    );
    println!(
        "  (UDP exchanges = requests the BMCs logged + 3 per completed handshake + requests lost to injected loss)"
    );
    for label in ["cold", "warm", "warm", "lossy"] {
        if label == "lossy" {
            for bmc in &bmcs {
                bmc.set_fault(Fault::Loss { percent: 5 });
            }
        }
        for bmc in &bmcs {
            bmc.clear_logs();
        }
        let (opened_before, lost_before) = sum_counters(&bmcs);
        let (total, runs) = pass(&drivers, concurrency).await;
        let (opened_after, lost_after) = sum_counters(&bmcs);
        let logged: usize = bmcs.iter().map(|b| b.request_log().len()).sum();
        let opened = opened_after - opened_before;
        let lost = lost_after - lost_before;
        let exchanges = logged as u64 + 3 * opened + lost;
        let mut lat: Vec<Duration> = runs.iter().map(|r| r.1).collect();
        lat.sort();
        println!(
            "  {label:>5}: {:>7.1} ms total, per node p50 {:>6.1} ms p99 {:>7.1} ms, {:.2} UDP \
             exchanges per node ({logged} logged commands, {opened} handshakes, {lost} lost)",
            ms(total),
            ms(pct(&lat, 0.5)),
            ms(pct(&lat, 0.99)),
            exchanges as f64 / nodes as f64
        );
        if label == "cold"
            && let Some(line) = cold_breakdown(&bmcs, &runs)
        {
            println!("{line}");
        }
    }
    for bmc in &bmcs {
        bmc.clear_faults();
    }
    for d in &drivers {
        d.close().await;
    }
    for bmc in bmcs {
        bmc.shutdown().await;
    }
}
