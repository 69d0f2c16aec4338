//! Fleet scale at steady state (issue 16, goal 4): what `nodefence run` costs while
//! nothing fails.
//!
//! The daemon runs as its own process against fake-kube holding `NODES` Nodes (default
//! 5,000), each with a kubelet Lease renewed every 10 s (`NODES / 10` writes a second,
//! spread evenly, as kubelets do), and a mock HTTPS Redfish BMC per node (identities
//! matching; `BMCS=shared`: one chassis manager serving every node's system). After
//! `WARMUP_S` (default 60 s: start-up lists, the BMC monitor's first pass over every
//! node) it samples the daemon's CPU time and RSS from
//! `/proc` over `MEASURE_S` (default 60 s), and counts the API requests it made then
//! (watches carry the renewals: a steady state makes almost none).
//!
//! Then a rack of `RACK` nodes (default 50; 0 skips it) loses power at once: their
//! BMCs read Off and their kubelets stop renewing, at one moment (so each node is at
//! its own point of its 10 s renewal cycle, as in a real rack). The bench reports when
//! each of them carries the out-of-service taint (first, median, last; after the plug
//! and after the node's own last renewal), within the configured concurrency
//! (`max_concurrent_requests`, default 16; `CONCURRENCY` sets it), and the daemon's RSS
//! and CPU while it works.
//!
//! Targets: RSS ≤ 50 MiB and CPU ≤ 5 % of one core, over the window and in every
//! 10 s of it. `cargo bench --bench fleet_steady_state`; exits 1 when a target is
//! missed or a rack node is not released within 60 s. The daemon's CPU time and RSS
//! are sampled every `SAMPLE_S` (default 5 s; it must divide 10 s) from when it leads
//! to the end of the window; the worst 10 s window is the worst CPU between two
//! samples 10 s apart, sliding one sample at a time over the measured window (printed
//! with its start). The samples, the window's figures, the worst 10 s and the rack's
//! release times are written as JSON (`common::results`: `fleet_steady_state.json`);
//! `WARMUP_S=20 MEASURE_S=450` covers more than a whole monitor cycle (a pass over
//! every BMC starts every 5 min, spread over the interval). Linux only (`/proc`). The image ships the `dist` build (fat LTO), whose
//! code keeps about 2.5 MiB less resident than `--release`'s: measure it with
//! `cargo build --profile dist -p nodefence --bin nodefence` and
//! `NODEFENCE_BIN=target/dist/nodefence`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use nodefence_mocks::kube::FakeKube;
use nodefence_mocks::kube::meta::{now_rfc3339, now_rfc3339_micros};
use nodefence_mocks::kube::resources::{LEASES, NAMESPACES, NODES};
use nodefence_mocks::kube::store::Store;
use nodefence_mocks::redfish::{MockPower, MockRedfish, Profile, SystemSpec};
use nodefence_mocks::tls::TlsMaterial;
use serde_json::{Value, json};

mod common;
use common::{env_or, process_usage};

/// The daemon's CPU time and RSS every `every` from when it leads.
struct Sampler {
    pid: u32,
    leading: Instant,
    every: Duration,
    next: u32,
    samples: Vec<Sample>,
}

/// The daemon at one moment: seconds since it leads, its CPU time so far (user +
/// system, seconds), its RSS (MiB).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Sample {
    t_s: f64,
    cpu_s: f64,
    rss_mib: f64,
}

/// The length of the windows whose CPU must each stay within the target.
const WORST_WINDOW_S: u64 = 10;

/// The worst `span` of consecutive samples (from `samples[i]` to `samples[i + span]`,
/// sliding one sample at a time): its start and end (`t_s`) and its CPU in % of one
/// core. `None` when there are not `span + 1` samples.
fn worst_window(samples: &[Sample], span: usize) -> Option<(f64, f64, f64)> {
    samples
        .windows(span + 1)
        .map(|w| {
            let (first, last) = (w[0], w[span]);
            let percent = (last.cpu_s - first.cpu_s) / (last.t_s - first.t_s) * 100.0;
            (first.t_s, last.t_s, percent)
        })
        .max_by(|a, b| a.2.total_cmp(&b.2))
}

impl Sampler {
    /// Samples at each due time up to `until`, then waits until `until`.
    async fn run_until(&mut self, until: Instant) {
        loop {
            let due = self.leading + self.every * self.next;
            if due > until {
                tokio::time::sleep_until(until.into()).await;
                return;
            }
            tokio::time::sleep_until(due.into()).await;
            let (cpu, rss, _) = process_usage(self.pid);
            // Rounded as written: the worst window is computed from what the JSON holds.
            self.samples.push(Sample {
                t_s: round3(self.leading.elapsed().as_secs_f64()),
                cpu_s: round3(cpu),
                rss_mib: round3(rss),
            });
            self.next += 1;
        }
    }
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

const RSS_TARGET_MIB: f64 = 50.0;
const CPU_TARGET_PERCENT: f64 = 5.0;
const LEASE_NAMESPACE: &str = "kube-node-lease";
const RENEW_EVERY: Duration = Duration::from_secs(10);

fn uuid(i: u64) -> String {
    format!("{i:08x}-0000-4000-8000-{i:012x}")
}

/// A Node as a kubelet writes it: five conditions, addresses, capacity, the images on
/// the node (40 here; kubelet reports up to 50), annotations of the CSI and CNI
/// plugins. About 9 KB of JSON, as on a real worker.
fn node(i: u64) -> Value {
    let now = now_rfc3339();
    let name = format!("worker-{i}");
    let condition = |t: &str, status: &str, reason: &str| {
        json!({"type": t, "status": status, "reason": reason,
               "message": format!("kubelet reports {t} {status}"),
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    let images: Vec<Value> = (0..40)
        .map(|k| {
            json!({"names": [format!("registry.example.com/platform/service-{k}@sha256:{:064x}", i * 100 + k),
                             format!("registry.example.com/platform/service-{k}:v1.{k}.{i}")],
                   "sizeBytes": 50_000_000 + k * 1_000_003})
        })
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                       "beta.kubernetes.io/arch": "amd64",
                       "topology.kubernetes.io/zone": format!("rack-{}", i / 40)},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                            "csi.volume.kubernetes.io/nodeid": format!("{{\"rbd.csi.ceph.com\":\"{name}\"}}"),
                            "projectcalico.org/IPv4Address": format!("10.{}.{}.{}/16", i / 65536, (i / 256) % 256, i % 256)},
        },
        "spec": {"podCIDR": format!("10.244.{}.0/24", i % 256)},
        "status": {
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID"),
                condition("Ready", "True", "KubeletReady"),
            ],
            "addresses": [{"type": "InternalIP", "address": format!("10.0.{}.{}", i / 256, i % 256)},
                          {"type": "Hostname", "address": name}],
            "capacity": {"cpu": "64", "ephemeral-storage": "960173592Ki", "hugepages-2Mi": "0",
                         "memory": "527988912Ki", "pods": "110"},
            "allocatable": {"cpu": "63", "ephemeral-storage": "884894868258", "hugepages-2Mi": "0",
                            "memory": "527886512Ki", "pods": "110"},
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "images": images,
            "nodeInfo": {
                "systemUUID": uuid(i), "machineID": format!("{i:032x}"),
                "bootID": uuid(i + 1_000_000), "kubeletVersion": "v1.33.0",
                "kubeProxyVersion": "", "kernelVersion": "6.1.0", "osImage": "Debian GNU/Linux 12",
                "containerRuntimeVersion": "containerd://1.7.0", "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    })
}

fn lease(i: u64) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": format!("worker-{i}"), "namespace": LEASE_NAMESPACE},
        "spec": {
            "holderIdentity": format!("worker-{i}"),
            "leaseDurationSeconds": 40,
            "renewTime": now_rfc3339_micros(),
        },
    })
}

/// Renews every Lease once per `RENEW_EVERY`, spread evenly (ticks of 100 ms), but
/// those of nodes `1..=dead` (their machines lost power).
async fn kubelets(store: Store, nodes: u64, dead: Arc<AtomicU64>) {
    let ticks = RENEW_EVERY.as_millis() as u64 / 100;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut k = 0u64;
    loop {
        tick.tick().await;
        let slot = k % ticks;
        let dead = dead.load(Ordering::SeqCst);
        for i in (dead + 1..=nodes).filter(|i| i % ticks == slot) {
            let _ = store.modify(LEASES, Some(LEASE_NAMESPACE), &format!("worker-{i}"), |l| {
                l["spec"]["renewTime"] = json!(now_rfc3339_micros());
                Ok(())
            });
        }
        k += 1;
    }
}

#[tokio::main]
async fn main() {
    let nodes = env_or("NODES", 5000);
    let warmup = Duration::from_secs(env_or("WARMUP_S", 60));
    let measure = Duration::from_secs(env_or("MEASURE_S", 60));
    // Every 10 s window of the measured one is measured from two samples, not
    // estimated: the samples fall on multiples of SAMPLE_S, which must divide 10 s.
    let every = env_or("SAMPLE_S", 5u64);
    assert!(
        every >= 1 && WORST_WINDOW_S.is_multiple_of(every),
        "SAMPLE_S={every}: it must divide {WORST_WINDOW_S} (1, 2, 5 or 10), so that each \
         {WORST_WINDOW_S} s window starts and ends on a sample"
    );
    assert!(
        measure.as_secs() >= WORST_WINDOW_S,
        "MEASURE_S={}: at least {WORST_WINDOW_S} s (the worst {WORST_WINDOW_S} s window)",
        measure.as_secs()
    );
    let started = Instant::now();
    // BMCS=per-node (default): one HTTPS BMC per node, as in a rack of servers (iDRAC
    // profile, one system each, a certificate from one private CA). BMCS=shared: one
    // chassis manager serving every node's system over HTTP (each driver then reads
    // a collection of NODES members).
    let shared = std::env::var("BMCS").is_ok_and(|v| v == "shared");
    let tls = TlsMaterial::generate().expect("TLS material");
    let mut bmcs = Vec::new();
    if shared {
        bmcs.push(
            MockRedfish::builder()
                .profile(Profile::MultiSystem)
                .systems((1..=nodes).map(|i| {
                    SystemSpec::new(format!("Blade{i}"))
                        .power(MockPower::On)
                        .uuid(uuid(i))
                }))
                .credentials("fence", "bench-password")
                .start()
                .await
                .expect("mock BMC"),
        );
    } else {
        for i in 1..=nodes {
            bmcs.push(
                MockRedfish::builder()
                    .profile(Profile::Idrac)
                    .system(
                        SystemSpec::new("System.Embedded.1")
                            .power(MockPower::On)
                            .uuid(uuid(i)),
                    )
                    .credentials("fence", "bench-password")
                    .tls(true)
                    .tls_material(tls.clone())
                    .start()
                    .await
                    .expect("mock BMC"),
            );
        }
    }
    let kube = FakeKube::builder().start().await.expect("fake-kube");
    let store = kube.store();
    for ns in ["kube-system", LEASE_NAMESPACE] {
        let _ = store.create(
            NAMESPACES,
            None,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        );
    }
    for i in 1..=nodes {
        store.create(NODES, None, node(i)).expect("node");
        store
            .create(LEASES, Some(LEASE_NAMESPACE), lease(i))
            .expect("lease");
    }
    let dead = Arc::new(AtomicU64::new(0));
    tokio::spawn(kubelets(store.clone(), nodes, dead.clone()));

    let dir = tempfile::tempdir().expect("temp dir");
    let password = dir.path().join("bmc-password");
    std::fs::write(&password, "bench-password").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&password, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let concurrency = env_or("CONCURRENCY", 16);
    std::fs::write(
        dir.path().join("nodefence.toml"),
        format!(
            "inventory = \"inventory.toml\"\n[power]\nmax_concurrent_requests = {concurrency}\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("bmc-ca.pem"), tls.ca_pem()).unwrap();
    let mut inventory = "[defaults]\ndriver = \"redfish\"\nusername = \"fence\"\n\
         password_file = \"bmc-password\"\n"
        .to_string();
    if shared {
        inventory.push_str(&format!("endpoint = \"{}\"\n", bmcs[0].base_url()));
    } else {
        inventory.push_str("ca_file = \"bmc-ca.pem\"\n");
    }
    for i in 1..=nodes {
        if shared {
            inventory.push_str(&format!("[nodes.worker-{i}]\nsystem_id = \"Blade{i}\"\n"));
        } else {
            let url = bmcs[usize::try_from(i - 1).unwrap()].base_url();
            inventory.push_str(&format!("[nodes.worker-{i}]\nendpoint = \"{url}\"\n"));
        }
    }
    std::fs::write(dir.path().join("inventory.toml"), inventory).unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    kube.write_kubeconfig(&kubeconfig).unwrap();

    // NODEFENCE_BIN: another build of the daemon (to compare two commits).
    let exe =
        std::env::var_os("NODEFENCE_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_nodefence").into());
    let mut daemon = tokio::process::Command::new(exe)
        .arg("--config")
        .arg(dir.path().join("nodefence.toml"))
        .args(["run", "--listen", "127.0.0.1:0", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(["--namespace", "kube-system", "--identity", "fleet-bench"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        // DAEMON_LOG=FILE: the daemon's log, to see what it did.
        .stderr(
            std::env::var_os("DAEMON_LOG")
                .and_then(|p| std::fs::File::create(p).ok())
                .map_or_else(Stdio::null, Stdio::from),
        )
        .kill_on_drop(true)
        .spawn()
        .expect("nodefence run");
    let pid = daemon.id().expect("pid");
    println!(
        "fleet steady state: {nodes} Nodes, their Leases renewed every 10 s ({} writes/s), \
         {}; set up in {:.1}s",
        nodes / 10,
        if shared {
            format!("one mock BMC with {nodes} systems (BMCS=shared)")
        } else {
            format!("{nodes} mock HTTPS BMCs, one per node")
        },
        started.elapsed().as_secs_f64()
    );
    let leads = || {
        store
            .get(LEASES, Some("kube-system"), "nodefence")
            .ok()
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
            .is_some_and(|h| h == "fleet-bench")
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    while !leads() {
        if Instant::now() > deadline {
            panic!("the daemon did not take the leader Lease within 2 minutes");
        }
        if let Ok(Some(status)) = daemon.try_wait() {
            panic!("the daemon exited: {status}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let leading = Instant::now();
    let mut sampler = Sampler {
        pid,
        leading,
        every: Duration::from_secs(every),
        next: 0,
        samples: Vec::new(),
    };
    sampler.run_until(leading + warmup).await;
    let (cpu0, _, _) = process_usage(pid);
    let requests0 = kube.requests().len();
    let t0 = Instant::now();
    sampler.run_until(t0 + measure).await;
    let (cpu1, rss, peak) = process_usage(pid);
    let elapsed = t0.elapsed().as_secs_f64();
    let window: Vec<_> = kube.requests().into_iter().skip(requests0).collect();
    let requests = window.len();
    let mut by_kind: std::collections::BTreeMap<String, usize> = Default::default();
    for r in &window {
        let path = r.path_and_query.split('?').next().unwrap_or_default();
        // `/api/v1/nodes/worker-17` → `PATCH /api/v1/nodes/*`.
        let shape: Vec<&str> = path
            .split('/')
            .map(|seg| if seg.starts_with("worker-") { "*" } else { seg })
            .collect();
        *by_kind
            .entry(format!("{} {}", r.method, shape.join("/")))
            .or_default() += 1;
    }
    let cpu = (cpu1 - cpu0) / elapsed * 100.0;
    println!(
        "  leader {:.1}s after start; measured {elapsed:.0}s after a {}s warm-up",
        leading.duration_since(started).as_secs_f64(),
        warmup.as_secs()
    );
    println!(
        "  CPU {cpu:.2} % of one core (target ≤ {CPU_TARGET_PERCENT:.0} %), RSS {rss:.1} MiB \
         (peak {peak:.1} MiB; target ≤ {RSS_TARGET_MIB:.0} MiB), {requests} API requests \
         ({:.2}/s)",
        requests as f64 / elapsed
    );
    // The worst 10 s of the window: from the first sample at or after its start
    // (samples fall on multiples of SAMPLE_S since the daemon leads) to the last.
    let first = usize::try_from(warmup.as_secs().div_ceil(every)).unwrap();
    let span = usize::try_from(WORST_WINDOW_S / every).unwrap();
    let (worst_start, worst_end, worst) =
        worst_window(sampler.samples.get(first..).unwrap_or_default(), span)
            .expect("a measured window of at least 10 s holds a 10 s window");
    println!(
        "  worst {WORST_WINDOW_S} s: CPU {worst:.2} % of one core (target ≤ \
         {CPU_TARGET_PERCENT:.0} % in every {WORST_WINDOW_S} s), {worst_start:.1}–{worst_end:.1} s \
         after the daemon took the lead"
    );
    let mut kinds: Vec<_> = by_kind.into_iter().collect();
    kinds.sort_by_key(|k| std::cmp::Reverse(k.1));
    for (kind, n) in kinds.iter().take(5) {
        println!("    {n:>6}  {kind}");
    }
    let window = json!({
        "start_s": round3(t0.duration_since(leading).as_secs_f64()),
        "end_s": round3(t0.duration_since(leading).as_secs_f64() + elapsed),
        "cpu_percent": round3(cpu),
        "rss_mib": round3(rss),
        "peak_rss_mib": round3(peak),
        "api_requests": requests,
    });
    let rack = env_or("RACK", 50).min(nodes);
    let (rack_ok, rack_json) = if rack == 0 {
        (true, Value::Null)
    } else {
        let system = |i: u64| {
            if shared {
                (&bmcs[0], format!("Blade{i}"))
            } else {
                (
                    &bmcs[usize::try_from(i - 1).unwrap()],
                    "System.Embedded.1".to_string(),
                )
            }
        };
        rack_loses_power(&store, pid, rack, concurrency, &dead, |i| {
            let (bmc, id) = system(i);
            bmc.set_power(&id, MockPower::Off);
        })
        .await
    };
    let _ = daemon.start_kill();
    let _ = daemon.wait().await;
    common::results::write(
        "fleet_steady_state",
        json!({
            "nodes": nodes,
            "bmcs": if shared { "shared" } else { "per-node" },
            "warmup_s": warmup.as_secs(),
            "measure_s": measure.as_secs(),
            "sample_s": sampler.every.as_secs(),
            "concurrency": concurrency,
            "binary": std::env::var("NODEFENCE_BIN").ok(),
        }),
        json!({
            "targets": {"rss_mib": RSS_TARGET_MIB, "cpu_percent": CPU_TARGET_PERCENT},
            "samples": sampler.samples.iter().map(|s| json!({
                "t_s": s.t_s, "cpu_s": s.cpu_s, "rss_mib": s.rss_mib,
            })).collect::<Vec<_>>(),
            "window": window,
            "worst_10s": {
                "start_s": worst_start,
                "end_s": worst_end,
                "cpu_percent": round3(worst),
            },
            "rack": rack_json,
        }),
    );
    if cpu > CPU_TARGET_PERCENT || worst > CPU_TARGET_PERCENT || rss > RSS_TARGET_MIB || !rack_ok {
        eprintln!("MISSED a target");
        std::process::exit(1);
    }
}

/// Nodes `1..=rack` lose power at one moment; waits (at most 60 s) until each carries
/// the out-of-service taint and prints when. False if one was not released in time;
/// the release times and the daemon's cost as JSON.
async fn rack_loses_power(
    store: &Store,
    pid: u32,
    rack: u64,
    concurrency: u64,
    dead: &AtomicU64,
    pull_plug: impl Fn(u64),
) -> (bool, Value) {
    let name = |i: u64| format!("worker-{i}");
    let (cpu0, _, _) = process_usage(pid);
    dead.store(rack, Ordering::SeqCst);
    let pulled = Instant::now();
    let pulled_wall = SystemTime::now();
    for i in 1..=rack {
        pull_plug(i);
    }
    // Each node's last renewal (the kubelets' task has stopped renewing them).
    let last_renewal = |i: u64| -> Option<SystemTime> {
        let lease = store.get(LEASES, Some(LEASE_NAMESPACE), &name(i)).ok()?;
        humantime::parse_rfc3339_weak(lease["spec"]["renewTime"].as_str()?).ok()
    };
    let renewed: Vec<Option<SystemTime>> = (1..=rack).map(last_renewal).collect();
    let tainted = |i: u64| {
        store.get(NODES, None, &name(i)).ok().is_some_and(|n| {
            n["spec"]["taints"].as_array().is_some_and(|ts| {
                ts.iter()
                    .any(|t| t["key"] == "node.kubernetes.io/out-of-service")
            })
        })
    };
    let mut released: Vec<Option<Duration>> = vec![None; usize::try_from(rack).unwrap()];
    let mut peak_rss = 0.0f64;
    while released.iter().any(Option::is_none) && pulled.elapsed() < Duration::from_secs(60) {
        for (k, slot) in released.iter_mut().enumerate() {
            if slot.is_none() && tainted(k as u64 + 1) {
                *slot = Some(pulled.elapsed());
            }
        }
        peak_rss = peak_rss.max(process_usage(pid).1);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = pulled.elapsed().as_secs_f64();
    let (cpu1, rss, _) = process_usage(pid);
    let missing = released.iter().filter(|r| r.is_none()).count();
    let mut after_plug: Vec<f64> = released
        .iter()
        .flatten()
        .map(Duration::as_secs_f64)
        .collect();
    after_plug.sort_by(f64::total_cmp);
    // After each node's own last renewal: what its Lease lets nodefence see.
    let mut after_renewal: Vec<f64> = released
        .iter()
        .zip(&renewed)
        .filter_map(|(r, renewal)| {
            let renewal = (*renewal)?;
            let since = pulled_wall.duration_since(renewal).unwrap_or_default();
            Some((r.as_ref()?.as_secs_f64()) + since.as_secs_f64())
        })
        .collect();
    after_renewal.sort_by(f64::total_cmp);
    let q = |v: &[f64], p: f64| {
        v.get(((v.len().max(1) - 1) as f64 * p).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    println!(
        "rack: {rack} nodes lose power at once (max_concurrent_requests {concurrency}): \
         released (tainted) {}/{rack} within {took:.1}s",
        rack as usize - missing
    );
    println!(
        "  after the plug:          first {:.1}s, median {:.1}s, last {:.1}s",
        q(&after_plug, 0.0),
        q(&after_plug, 0.5),
        q(&after_plug, 1.0)
    );
    println!(
        "  after its last renewal:  first {:.1}s, median {:.1}s, last {:.1}s",
        q(&after_renewal, 0.0),
        q(&after_renewal, 0.5),
        q(&after_renewal, 1.0)
    );
    println!(
        "  daemon while releasing: CPU {:.1} % of one core, RSS {rss:.1} MiB (peak seen {peak_rss:.1} MiB)",
        (cpu1 - cpu0) / took * 100.0
    );
    let rounded = |v: &[f64]| v.iter().copied().map(round3).collect::<Vec<f64>>();
    let json = json!({
        "nodes": rack,
        "released_after_plug_s": rounded(&after_plug),
        "released_after_renewal_s": rounded(&after_renewal),
        "missing": missing,
        "cpu_percent": round3((cpu1 - cpu0) / took * 100.0),
        "rss_mib": round3(rss),
        "peak_rss_mib": round3(peak_rss),
    });
    (missing == 0, json)
}
