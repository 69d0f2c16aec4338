//! What one `status` reading costs through the drivers that are not a native BMC
//! protocol, against real peers on loopback:
//!
//! 1. **exec**: the real Debian `fence_ipmilan` (`driver = "exec"`: a Python process,
//!    which runs `ipmitool`, per reading) against NODES_EXEC mock IPMI BMCs (one
//!    [`MockIpmi`] per node, its own UDP socket), with at most CONCURRENCY in flight,
//!    next to the native `driver = "ipmi"` driver on the same BMCs (a cold pass, which
//!    opens the sessions, and a warm pass, which reuses them). The CPU column is the
//!    user + system time of this process's reaped children (the agents and their
//!    `ipmitool`s) from `/proc/self/stat`, divided by the readings; "sessions" are
//!    the RMCP+ sessions the BMCs saw completed, per reading.
//! 2. **aws**: NODES_AWS EC2 instances in a moto server (created through boto3 in one
//!    RunInstances call), `driver = "aws"` with `instance_id`, `region`, the moto
//!    `endpoint` and a shared `credentials_file` + `profile`: a cold pass (credentials
//!    read from the profile file, connections opened) and two warm passes, one
//!    DescribeInstances per reading.
//! 3. **topology**: a node whose primary is a Redfish BMC that accepts connections
//!    and never answers (a bound, never-accepted `TcpListener`; operation_timeout 2 s,
//!    request_timeout 1 s, connect_timeout 1 s; retries 0, and again with retries 3)
//!    with a native ipmi `fallback` on a mock IPMI BMC, against the same ipmi method
//!    alone: 5 sequential readings each. What the dead primary adds to every reading
//!    (its request_timeout per attempt, at most its operation_timeout) is why the loader
//!    warns when confirm_readings × the earlier levels' operation_timeout exceeds
//!    confirm_timeout; the section loads a second config with confirm_timeout 5 s and
//!    prints that warning.
//!
//! Inventories are written to temporary directories and read with
//! `nodefence::config::load`; drivers come from `DriverFactory`. Every time shown is
//! the wall-clock time of the `status()` call; a topology reading's own `latency` is
//! shown beside it (it must be the whole call's, hung levels included). A section whose peer is
//! missing (`fence_ipmilan` not in /usr/sbin, /sbin or /usr/local/sbin; no moto
//! server at `NODEFENCE_MOTO_SERVER` or `~/.cache/nodefence/moto-venv/bin/moto_server`)
//! is skipped with the reason.
//!
//! Run: `cargo bench --bench agent_cloud_status`. Environment variables change the
//! shape: NODES_EXEC (default 16), NODES_AWS (50), CONCURRENCY (in flight; default 8
//! for exec, 16 for aws).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/peers/moto.rs"]
#[allow(dead_code)]
mod moto;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use nodefence::config::Config;
use nodefence::power::registry::DriverFactory;
use nodefence::power::{PowerDriver, PowerReading};
use nodefence_mocks::ipmi::{MockIpmi, MockIpmiHandle, Privilege};

mod common;
use common::{env_or, find_agent, ms, pct, write_secret};

const USER: &str = "fence";
const PASSWORD: &str = "bench-password";
const AWS_REGION: &str = "us-east-1";
const AWS_PROFILE: &str = "nodefence";

/// One `status()` per driver, at most `concurrency` at a time: the pass's total time
/// and each call's wall-clock time, sorted.
async fn pass(drivers: &[Arc<dyn PowerDriver>], concurrency: usize) -> (Duration, Vec<Duration>) {
    let started = Instant::now();
    let mut latencies: Vec<Duration> = futures::stream::iter(drivers.iter().cloned())
        .map(|d| async move {
            let at = Instant::now();
            d.status().await.expect("status");
            at.elapsed()
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    latencies.sort();
    (started.elapsed(), latencies)
}

/// `status()` on `driver` `n` times, one after the other: each call's wall-clock time
/// and the reading.
async fn sequential(driver: &dyn PowerDriver, n: usize) -> Vec<(Duration, PowerReading)> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let at = Instant::now();
        let reading = driver.status().await.expect("status");
        out.push((at.elapsed(), reading));
    }
    out
}

/// User + system CPU time of this process's reaped children (fields 16 and 17 of
/// `/proc/self/stat`, in clock ticks of 10 ms); None off Linux.
fn children_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): field n is fields[n - 3].
    let cutime: u64 = fields.get(13)?.parse().ok()?;
    let cstime: u64 = fields.get(14)?.parse().ok()?;
    Some(Duration::from_millis((cutime + cstime) * 10))
}

fn sessions_opened(bmcs: &[MockIpmiHandle]) -> u64 {
    bmcs.iter().map(|b| b.counters().sessions_opened).sum()
}

/// Writes `nodefence.toml` (`inventory = "inventory.toml"` and `extra`) and the
/// inventory into `dir`, and loads them.
fn load(dir: &Path, extra: &str, inventory: &str) -> Config {
    std::fs::write(
        dir.join("nodefence.toml"),
        format!("inventory = \"inventory.toml\"\n{extra}"),
    )
    .unwrap();
    std::fs::write(dir.join("inventory.toml"), inventory).unwrap();
    nodefence::config::load(&dir.join("nodefence.toml"))
        .unwrap_or_else(|e| panic!("inventory: {e}"))
}

fn drivers(
    factory: &DriverFactory,
    config: &Config,
    names: &[String],
) -> Vec<Arc<dyn PowerDriver>> {
    names
        .iter()
        .map(|n| factory.driver(&config.inventory.nodes[n]).unwrap())
        .collect()
}

async fn ipmi_bmcs(n: usize) -> Vec<MockIpmiHandle> {
    let mut bmcs = Vec::with_capacity(n);
    for i in 1..=n {
        bmcs.push(
            MockIpmi::builder()
                .name(format!("worker-{i}"))
                .user(USER, PASSWORD, Privilege::Administrator)
                .start()
                .await
                .expect("mock IPMI BMC"),
        );
    }
    bmcs
}

fn row(label: &str, total: Duration, lat: &[Duration], extra: &str) {
    println!(
        "  {label:<28} {:>8.1} ms total, per call p50 {:>7.1} ms p99 {:>7.1} ms{extra}",
        ms(total),
        ms(pct(lat, 0.5)),
        ms(pct(lat, 0.99)),
    );
}

async fn exec_section(nodes: usize, concurrency: usize) {
    let Some(agent) = find_agent("fence_ipmilan") else {
        println!(
            "exec: skipped: fence_ipmilan not installed in /usr/sbin, /sbin or /usr/local/sbin \
             (apt-get install fence-agents)"
        );
        return;
    };
    let bmcs = ipmi_bmcs(nodes).await;
    let dir = tempfile::tempdir().unwrap();
    let defaults = format!(
        "[defaults]\nusername = \"{USER}\"\npassword_file = \"bmc-password\"\n\
         connect_timeout = \"1s\"\nrequest_timeout = \"10s\"\noperation_timeout = \"20s\"\n"
    );
    // The agent and the native driver reach the same BMCs: two inventories (one may
    // not name a machine twice).
    let (mut exec_inventory, mut ipmi_inventory) = (defaults.clone(), defaults);
    for (i, bmc) in bmcs.iter().enumerate() {
        let port = bmc.port();
        exec_inventory.push_str(&format!(
            "[nodes.exec-{i}]\ndriver = \"exec\"\nagent = \"{}\"\n\
             options = {{ ip = \"127.0.0.1\", ipport = \"{port}\", lanplus = \"1\", cipher = \"17\" }}\n",
            agent.display()
        ));
        ipmi_inventory.push_str(&format!(
            "[nodes.ipmi-{i}]\ndriver = \"ipmi\"\naddress = \"127.0.0.1\"\nport = {port}\n\
             cipher_suite = 17\n"
        ));
    }
    let exec_config = load_in(dir.path(), "exec", "", &exec_inventory);
    let ipmi_config = load_in(dir.path(), "ipmi", "", &ipmi_inventory);
    let factory = DriverFactory::new(concurrency);
    let names =
        |prefix: &str| -> Vec<String> { (0..nodes).map(|i| format!("{prefix}-{i}")).collect() };
    let exec = drivers(&factory, &exec_config, &names("exec"));
    let native = drivers(&factory, &ipmi_config, &names("ipmi"));

    println!(
        "exec: status of {nodes} mock IPMI BMCs through {} (lanplus, cipher suite 17) vs the \
         native ipmi driver, concurrency {concurrency}",
        agent.display()
    );
    let extra = |readings: usize, cpu: Option<Duration>, sessions: u64| {
        let cpu = cpu.map_or(String::new(), |c| {
            format!(", child CPU {:.1} ms/reading", ms(c) / readings as f64)
        });
        format!(
            "{cpu}, {:.2} sessions/reading",
            sessions as f64 / readings as f64
        )
    };

    // One agent at a time first: the cost of a reading without contention.
    let alone = exec.len().min(4);
    let (cpu0, s0) = (children_cpu(), sessions_opened(&bmcs));
    let (total, lat) = pass(&exec[..alone], 1).await;
    let (cpu1, s1) = (children_cpu(), sessions_opened(&bmcs));
    row(
        &format!("fence_ipmilan, 1 in flight ({alone})"),
        total,
        &lat,
        &extra(alone, cpu1.zip(cpu0).map(|(a, b)| a - b), s1 - s0),
    );
    let (total, lat) = pass(&exec, concurrency).await;
    let (cpu2, s2) = (children_cpu(), sessions_opened(&bmcs));
    row(
        "fence_ipmilan, one pass",
        total,
        &lat,
        &extra(nodes, cpu2.zip(cpu1).map(|(a, b)| a - b), s2 - s1),
    );
    let mut before = s2;
    for label in ["native ipmi, cold", "native ipmi, warm"] {
        let (total, lat) = pass(&native, concurrency).await;
        let after = sessions_opened(&bmcs);
        row(label, total, &lat, &extra(nodes, None, after - before));
        before = after;
    }

    for d in exec.iter().chain(&native) {
        d.close().await;
    }
    for bmc in bmcs {
        bmc.shutdown().await;
    }
}

async fn aws_section(nodes: usize, concurrency: usize) {
    // moto::start prints "skipped: ..." on stderr when moto is missing.
    let Some(moto) = moto::start().await else {
        println!(
            "aws: skipped: no moto server (NODEFENCE_MOTO_SERVER or \
             ~/.cache/nodefence/moto-venv/bin/moto_server)"
        );
        return;
    };
    let created = Instant::now();
    let ids = moto
        .run(AWS_REGION, "Name", "bench", u32::try_from(nodes).unwrap())
        .await;
    assert_eq!(ids.len(), nodes, "moto created {} instances", ids.len());
    let created = created.elapsed();

    let dir = tempfile::tempdir().unwrap();
    write_secret(
        &dir.path().join("aws-credentials"),
        &format!(
            "[{AWS_PROFILE}]\naws_access_key_id = AKIDNODEFENCEBENCH\n\
             aws_secret_access_key = bench-secret-not-checked-by-moto\n"
        ),
    );
    let mut inventory = format!(
        "[defaults]\ndriver = \"aws\"\nendpoint = \"{}\"\nregion = \"{AWS_REGION}\"\n\
         credentials_file = \"aws-credentials\"\nprofile = \"{AWS_PROFILE}\"\n",
        moto.endpoint
    );
    for (i, id) in ids.iter().enumerate() {
        inventory.push_str(&format!("[nodes.vm-{i}]\ninstance_id = \"{id}\"\n"));
    }
    let config = load(dir.path(), "", &inventory);
    let factory = DriverFactory::new(concurrency);
    let names: Vec<String> = (0..nodes).map(|i| format!("vm-{i}")).collect();
    let drivers = drivers(&factory, &config, &names);

    println!(
        "aws: status of {nodes} EC2 instances in moto {} ({} at {}, RunInstances of {nodes} \
         took {:.0} ms through boto3), concurrency {concurrency}, one DescribeInstances per reading",
        nodefence_mocks::peers::MOTO_VERSION,
        AWS_REGION,
        moto.endpoint,
        ms(created)
    );
    for label in ["cold (profile file, connect)", "warm", "warm"] {
        let (total, lat) = pass(&drivers, concurrency).await;
        row(label, total, &lat, "");
    }
    // One at a time: what one DescribeInstances costs moto when it is not queued.
    let alone = drivers.len().min(10);
    let (total, lat) = pass(&drivers[..alone], 1).await;
    row(&format!("warm, 1 in flight ({alone})"), total, &lat, "");
    for d in &drivers {
        d.close().await;
    }
    drop(moto);
}

/// A node whose primary is the Redfish BMC at `hung_port` (never answers) with
/// `retries`, and the ipmi method `ipmi` as its fallback.
fn topology_inventory(hung_port: u16, retries: u32, ipmi: &str) -> String {
    format!(
        "[nodes.edge-1]\n\
         driver = \"redfish\"\n\
         endpoint = \"http://127.0.0.1:{hung_port}\"\n\
         username = \"{USER}\"\n\
         password_file = \"bmc-password\"\n\
         connect_timeout = \"1s\"\n\
         request_timeout = \"1s\"\n\
         operation_timeout = \"2s\"\n\
         retries = {retries}\n\
         fallback = [ {{ {ipmi} }} ]\n"
    )
}

/// `inventory` loaded from a subdirectory `name` of `dir` (one inventory may not have
/// two nodes whose methods reach one machine, so each variant has its own).
fn load_in(dir: &Path, name: &str, extra: &str, inventory: &str) -> Config {
    let sub = dir.join(name);
    std::fs::create_dir_all(&sub).unwrap();
    write_secret(&sub.join("bmc-password"), PASSWORD);
    load(&sub, extra, inventory)
}

async fn topology_section() {
    const CALLS: usize = 5;
    let hung = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hung_port = hung.local_addr().unwrap().port();
    let bmcs = ipmi_bmcs(1).await;
    let dir = tempfile::tempdir().unwrap();
    let ipmi = format!(
        "driver = \"ipmi\", address = \"127.0.0.1\", port = {}, username = \"{USER}\", \
         password_file = \"bmc-password\"",
        bmcs[0].port()
    );
    let factory = DriverFactory::new(4);
    let alone = load_in(
        dir.path(),
        "alone",
        "",
        &format!("[nodes.edge-1]\n{}\n", ipmi.replace(", ", "\n")),
    );
    let mut variants = vec![(
        "ipmi alone".to_string(),
        factory.driver(&alone.inventory.nodes["edge-1"]).unwrap(),
    )];
    for retries in [0, 3] {
        let config = load_in(
            dir.path(),
            &format!("retries-{retries}"),
            "",
            &topology_inventory(hung_port, retries, &ipmi),
        );
        let driver = DriverFactory::new(4)
            .with_confirm(config.agent.power.confirm)
            .driver(&config.inventory.nodes["edge-1"])
            .unwrap();
        variants.push((format!("hung redfish (retries {retries}) → ipmi"), driver));
    }

    println!(
        "topology: {CALLS} sequential status calls; primary redfish at 127.0.0.1:{hung_port} \
         (accepts, never answers; operation_timeout 2s, request_timeout 1s, connect_timeout 1s) \
         → fallback native ipmi on a mock BMC"
    );
    for (label, driver) in &variants {
        let runs = sequential(driver.as_ref(), CALLS).await;
        let mut wall: Vec<Duration> = runs.iter().map(|r| r.0).collect();
        let own: Vec<String> = runs
            .iter()
            .map(|r| format!("{:.1}", ms(r.1.latency)))
            .collect();
        let first = wall[0];
        wall.sort();
        println!(
            "  {label:<34} p50 {:>7.1} ms, max {:>7.1} ms (first {:>7.1} ms); the readings' own \
             latency: [{}] ms",
            ms(pct(&wall, 0.5)),
            ms(wall[wall.len() - 1]),
            ms(first),
            own.join(", ")
        );
    }
    // The same node under a confirm_timeout the dead primary does not fit in.
    let warned = load_in(
        dir.path(),
        "warned",
        "[power]\nconfirm_readings = 3\nconfirm_interval = \"1s\"\nconfirm_timeout = \"5s\"\n",
        &topology_inventory(hung_port, 0, &ipmi),
    );
    let fallback_warnings: Vec<&String> = warned
        .warnings
        .iter()
        .filter(|w| w.contains("confirm_timeout"))
        .collect();
    for w in &fallback_warnings {
        println!("  with confirm_timeout 5s the loader warns: {w}");
    }
    if fallback_warnings.is_empty() {
        println!("  with confirm_timeout 5s the loader gave no confirm_timeout warning");
    }

    for (_, driver) in &variants {
        driver.close().await;
    }
    for bmc in bmcs {
        bmc.shutdown().await;
    }
    drop(hung);
}

#[tokio::main]
async fn main() {
    nodefence::tls::install_crypto_provider();
    let concurrency = std::env::var("CONCURRENCY")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .map(|c| c.max(1));
    let nodes_exec = env_or("NODES_EXEC", 16).max(1);
    let nodes_aws = env_or("NODES_AWS", 50).max(1);

    exec_section(nodes_exec, concurrency.unwrap_or(8)).await;
    println!();
    aws_section(nodes_aws, concurrency.unwrap_or(16)).await;
    println!();
    topology_section().await;
}
