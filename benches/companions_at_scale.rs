//! The companions' heartbeat at fleet scale (issue 36, item 6): what hearing
//! `COMPANIONS` companions (default 5,000) beating every `INTERVAL_MS` (default 500: 2
//! Hz, 10,000 datagrams a second) costs the leader.
//!
//! The daemon runs as its own process (`nodefence run --companion-listen`) against
//! fake-kube, which reviews the companions' projected tokens (each bound to its node,
//! audience `nodefence-companion`) as the API server does. It idles for `BASELINE_S`
//! (default 20 s: its CPU and RSS before any companion), then the companions say
//! hello (HTTPS, `HELLO_CONCURRENCY` at once, default 32) and beat, each its own
//! session and sealed beats, spread evenly over the interval, from a few UDP sockets
//! of this process; every acknowledgement is opened and checked. After `WARMUP_S`
//! (default 10 s) it samples the daemon's CPU time and RSS every 5 s over `MEASURE_S`
//! (default 60 s).
//!
//! Targets (issue 36): the leader's CPU ≤ 5 % of one core over the window, its RSS
//! ≤ 20 MiB above the baseline, and ≥ 99.9 % of the beats acknowledged; and a stricter
//! check of this bench's own, the CPU ≤ 5 % in its worst 10 s too. Each is printed
//! when missed and kept in the JSON (`checks`).
//!
//! Then the floor (`FLOOR=0`: skipped): the daemon stopped, this bench run again as a
//! bare answerer on the daemon's port ([`floor`]: the daemon's own loop and system
//! calls, answering every beat with as many bytes as an acknowledgement, nothing
//! else), measured over the same window as the beats go on. What the floor costs any
//! program on this machine; what the daemon costs above it is the daemon's own.
//! `cargo bench --bench companions_at_scale`; exits 1 when a target is missed. Results
//! as JSON (`companions_at_scale.json`). Linux only (`/proc`).
//!
//! `REMOTE=1` (root, `ip`, `ethtool`, `taskset`, Linux ≥ 5.12, 2 cores or more): the
//! companions' sockets are made in a network namespace of their own, joined to the
//! daemon's by a veth pair, the daemon pinned to core 0 and this process to core 1.
//! On the loopback the kernel delivers each acknowledgement into this process's
//! socket inside the daemon's `sendmmsg` (softirq run as it sends): the companions'
//! machines' work, billed to the daemon. Here the namespace's end of the pair queues
//! what the daemon sends (veth's NAPI mode) and a kernel thread of its own, on core 1,
//! delivers it, as another machine's NIC and kernel would; the daemon's bill is its
//! own system calls down to the queue. Both numbers are worth having: the loopback's
//! is everything on one machine, this one is the daemon's share on a cluster.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use nodefence::heartbeat::hello;
use nodefence::watchdog::feeding::Reaching;
use nodefence::watchdog::session::CompanionEnd;
use nodefence::watchdog::wire::{self, DeviceName, Key, WatchdogState};
use nodefence_mocks::kube::resources::NAMESPACES;
use nodefence_mocks::kube::{BoundToken, FakeKube};
use nodefence_mocks::tls::TlsMaterial;
use serde_json::json;
use tokio::net::UdpSocket;

mod common;
use common::env_or;
use common::remote::{REMOTE_DAEMON, Remote, tool};

const NAMESPACE: &str = "kube-system";
/// UDP sockets the companions share (the listener answers each beat where it came from).
const SOCKETS: usize = 16;

/// `(utime + stime)` of `pid` in seconds, and its RSS in MiB.
fn sample(pid: u32) -> (f64, f64) {
    let (cpu, rss, _) = common::process_usage(pid);
    (cpu, rss)
}

fn free_port() -> u16 {
    loop {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = tcp.local_addr().unwrap().port();
        if std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// One companion's session: its end of the seal.
struct Companion {
    end: CompanionEnd,
}

/// Set in the floor's process (this bench run again): the address it answers on.
const FLOOR_LISTEN: &str = "COMPANIONS_AT_SCALE_FLOOR_LISTEN";
/// Set in the floor's process: how long its answers are (the daemon's
/// acknowledgements' length).
const FLOOR_ANSWER_LEN: &str = "COMPANIONS_AT_SCALE_FLOOR_ANSWER_LEN";

fn main() {
    if let Ok(listen) = std::env::var(FLOOR_LISTEN) {
        floor(&listen);
        return;
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(bench());
}

/// The floor: the daemon's beats' loop (`heartbeat::batch::serve`, the same system
/// calls, batches and coalescing) answering every datagram with as many bytes as an
/// acknowledgement, and nothing else: no table, no seal, no session. What it costs is
/// what any answerer of these datagrams costs on this machine; the daemon's cost
/// above it is its own.
fn floor(listen: &str) {
    let answer = vec![0u8; env_or(FLOOR_ANSWER_LEN, 64)];
    let socket = std::net::UdpSocket::bind(listen).expect("the floor's socket");
    let never = std::sync::atomic::AtomicBool::new(false);
    nodefence::heartbeat::batch::serve(
        &socket,
        nodefence::heartbeat::COALESCE,
        &never,
        |received, answers| {
            for (_, from) in received.iter() {
                answers.push(&answer, from);
            }
        },
    )
    .expect("the floor's loop");
}

/// A command running `program`, pinned to core 0 (`taskset`) when `pinned` (`REMOTE=1`:
/// the daemon's core, and the floor's in its place).
fn on_core_0(program: impl AsRef<std::ffi::OsStr>, pinned: bool) -> tokio::process::Command {
    if pinned {
        let mut c = tokio::process::Command::new("taskset");
        c.args(["-c", "0"]).arg(program);
        c
    } else {
        tokio::process::Command::new(program)
    }
}

/// CPU and RSS of `pid` every 5 s over `measure`: `(seconds from the start, CPU
/// seconds, RSS MiB)`.
async fn samples_over(pid: u32, measure: Duration) -> Vec<(f64, f64, f64)> {
    let mut samples = Vec::new();
    let t0 = Instant::now();
    let end = t0 + measure;
    let every = Duration::from_secs(5);
    let mut next = t0;
    while next <= end {
        tokio::time::sleep_until(next.into()).await;
        let (cpu, rss) = sample(pid);
        samples.push((t0.elapsed().as_secs_f64(), cpu, rss));
        next += every;
    }
    samples
}

/// The CPU over the samples, in % of a core, and its worst 10 s (% and when it
/// began).
fn cpu_of(samples: &[(f64, f64, f64)]) -> (f64, (f64, f64)) {
    let first = samples.first().copied().unwrap();
    let last = samples.last().copied().unwrap();
    let cpu_pct = (last.1 - first.1) / (last.0 - first.0) * 100.0;
    let worst_10s = samples
        .windows(3)
        .map(|w| ((w[2].1 - w[0].1) / (w[2].0 - w[0].0) * 100.0, w[0].0))
        .fold((0.0f64, 0.0f64), |a, b| if b.0 > a.0 { b } else { a });
    (cpu_pct, worst_10s)
}

async fn bench() {
    let count: usize = env_or("COMPANIONS", 5000);
    let interval = Duration::from_millis(env_or("INTERVAL_MS", 500));
    let baseline = Duration::from_secs(env_or("BASELINE_S", 20));
    let warmup = Duration::from_secs(env_or("WARMUP_S", 10));
    let measure = Duration::from_secs(env_or("MEASURE_S", 60));
    let hello_concurrency: usize = env_or("HELLO_CONCURRENCY", 32);
    nodefence::tls::install_crypto_provider();

    // The companions' ServiceAccount with its grant (deploy/components/companion: get
    // nodes), which the daemon checks at start-up with a SubjectAccessReview.
    let grant = vec![
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": "nodefence-companion"},
               "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "nodefence-companion"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": "nodefence-companion"},
               "subjects": [{"kind": "ServiceAccount", "name": "nodefence-companion",
                             "namespace": NAMESPACE}]}),
    ];
    let kube = FakeKube::builder()
        .identity(
            "companion-api-token",
            format!("system:serviceaccount:{NAMESPACE}:nodefence-companion"),
            nodefence_mocks::kube::authz::Policy::for_service_account(
                &grant,
                NAMESPACE,
                "nodefence-companion",
            ),
        )
        .start()
        .await
        .expect("fake-kube");
    let _ = kube.store().create(
        NAMESPACES,
        None,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
    );
    let user = format!("system:serviceaccount:{NAMESPACE}:nodefence-companion");
    for i in 1..=count {
        kube.issue_token(BoundToken {
            token: format!("token-{i}"),
            user: user.clone(),
            audiences: vec![hello::AUDIENCE.into()],
            pod: Some((format!("nodefence-companion-{i}"), format!("pod-uid-{i}"))),
            node: Some((format!("worker-{i}"), format!("node-uid-{i}"))),
        });
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let tls = TlsMaterial::generate_for(&["127.0.0.1", "localhost"]).expect("TLS material");
    std::fs::write(dir.path().join("tls.crt"), tls.cert_pem()).unwrap();
    std::fs::write(dir.path().join("tls.key"), tls.key_pem()).unwrap();
    // One inventory entry whose Node does not exist and no BMC monitor: what is
    // measured is the heartbeat alone.
    std::fs::write(
        dir.path().join("inventory.toml"),
        "[nodes.worker-0]\ndriver = \"redfish\"\nendpoint = \"https://127.0.0.1:9\"\n\
         username = \"fence\"\npassword_file = \"bmc-password\"\n",
    )
    .unwrap();
    common::write_secret(&dir.path().join("bmc-password"), "unused");
    std::fs::write(
        dir.path().join("nodefence.toml"),
        "inventory = \"inventory.toml\"\n[power]\nmonitor_interval = \"0s\"\n",
    )
    .unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    kube.write_kubeconfig(&kubeconfig).unwrap();
    let port = free_port();
    let remote = (env_or("REMOTE", 0) == 1).then(Remote::set_up);
    if remote.is_some() {
        // The companions (this process) on core 1, the daemon on core 0.
        tool(&[
            "taskset",
            "-a",
            "-p",
            "-c",
            "1",
            &std::process::id().to_string(),
        ]);
    }
    // Hellos over the loopback; beats from the companions' namespace when remote.
    let (listen, beats_to): (SocketAddr, SocketAddr) = match remote {
        Some(_) => (
            format!("0.0.0.0:{port}").parse().unwrap(),
            format!("{REMOTE_DAEMON}:{port}").parse().unwrap(),
        ),
        None => {
            let local: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
            (local, local)
        }
    };
    let exe =
        std::env::var_os("NODEFENCE_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_nodefence").into());
    let mut daemon = on_core_0(exe, remote.is_some())
        .arg("--config")
        .arg(dir.path().join("nodefence.toml"))
        .args(["run", "--kubeconfig"])
        .arg(&kubeconfig)
        .args([
            "--namespace",
            NAMESPACE,
            "--identity",
            "companions-bench",
            "--health-listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .arg(format!(
            "--metrics-cert-file={}",
            dir.path().join("tls.crt").display()
        ))
        .arg(format!(
            "--metrics-key-file={}",
            dir.path().join("tls.key").display()
        ))
        .arg(format!("--companion-listen={listen}"))
        .arg(format!("--heartbeat-interval={}ms", interval.as_millis()))
        .arg(format!(
            "--heartbeat-timeout={}ms",
            interval.as_millis() * 4
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
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
        "companions at scale: {count} companions beating every {} ms ({} datagrams/s) to \
         the leader{}",
        interval.as_millis(),
        (count as u128 * 1000) / interval.as_millis().max(1),
        if remote.is_some() {
            " (REMOTE: the companions in a namespace of their own on core 1, the daemon on core 0)"
        } else {
            ""
        }
    );

    // The baseline: the daemon leading, no companion.
    let http = {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_pemfile_certs(tls.ca_pem()) {
            roots.add(cert).unwrap();
        }
        let config = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        reqwest::Client::builder()
            .use_preconfigured_tls(config)
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap()
    };
    let url = format!("https://localhost:{port}{}", hello::PATH);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if http.post(&url).send().await.is_ok() {
            break;
        }
        if let Ok(Some(status)) = daemon.try_wait() {
            panic!("the daemon exited: {status}");
        }
        assert!(Instant::now() < deadline, "the listener never answered");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (cpu_a, rss_before) = sample(pid);
    let t_a = Instant::now();
    tokio::time::sleep(baseline).await;
    let (cpu_b, rss_baseline) = sample(pid);
    let baseline_cpu = (cpu_b - cpu_a) / t_a.elapsed().as_secs_f64() * 100.0;
    println!(
        "baseline (no companion, {} s): CPU {baseline_cpu:.2} % of a core, RSS {rss_baseline:.1} MiB",
        baseline.as_secs()
    );
    let _ = rss_before;

    // Hellos.
    let hello_started = Instant::now();
    let sessions: Arc<Mutex<HashMap<u64, Companion>>> = Arc::new(Mutex::new(HashMap::new()));
    let gate = Arc::new(tokio::sync::Semaphore::new(hello_concurrency));
    let mut hellos = Vec::new();
    for i in 1..=count {
        let http = http.clone();
        let url = url.clone();
        let gate = gate.clone();
        hellos.push(tokio::spawn(async move {
            let _permit = gate.acquire().await.unwrap();
            for _ in 0..5 {
                let Ok(answer) = http
                    .post(&url)
                    .bearer_auth(format!("token-{i}"))
                    .send()
                    .await
                else {
                    continue;
                };
                if let Ok(session) = answer.json::<hello::Session>().await {
                    return Some(session);
                }
            }
            None
        }));
    }
    for h in hellos {
        let session = h.await.unwrap().expect("a hello answered");
        let id: u64 = session.session.parse().unwrap();
        let key: [u8; 32] = base64::engine::general_purpose::STANDARD
            .decode(&session.key)
            .unwrap()
            .try_into()
            .unwrap();
        sessions.lock().unwrap().insert(
            id,
            Companion {
                end: CompanionEnd::new(Key(key), id, Duration::from_secs(2)),
            },
        );
    }
    let hellos_s = hello_started.elapsed().as_secs_f64();
    println!("{count} hellos (TokenReviews) in {hellos_s:.1}s");

    // Beats, spread over the interval, and every acknowledgement opened.
    let origin = Instant::now();
    let sent = Arc::new(AtomicU64::new(0));
    let acknowledged = Arc::new(AtomicU64::new(0));
    // Every datagram back, opened or not (the floor's answers are not), and the last
    // acknowledgement's length (the floor answers with as many bytes).
    let answered = Arc::new(AtomicU64::new(0));
    let ack_len = Arc::new(AtomicUsize::new(0));
    let mut sockets = Vec::new();
    for _ in 0..SOCKETS {
        let s = match &remote {
            Some(r) => UdpSocket::from_std(r.socket()).unwrap(),
            None => UdpSocket::bind("127.0.0.1:0").await.unwrap(),
        };
        s.connect(beats_to).await.unwrap();
        sockets.push(Arc::new(s));
    }
    for s in &sockets {
        let s = s.clone();
        let sessions = sessions.clone();
        let acknowledged = acknowledged.clone();
        let answered = answered.clone();
        let ack_len = ack_len.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; wire::MAX_DATAGRAM + 1];
            loop {
                let Ok(len) = s.recv(&mut buf).await else {
                    continue;
                };
                answered.fetch_add(1, Ordering::Relaxed);
                let Some(id) = wire::session_of(&buf[..len]) else {
                    continue;
                };
                let now = origin.elapsed();
                let mut all = sessions.lock().unwrap();
                if let Some(c) = all.get_mut(&id)
                    && c.end.acknowledged(&buf[..len], now).is_ok_and(|a| a.leader)
                {
                    acknowledged.fetch_add(1, Ordering::Relaxed);
                    ack_len.store(len, Ordering::Relaxed);
                }
            }
        });
    }
    let ids: Vec<u64> = sessions.lock().unwrap().keys().copied().collect();
    {
        let sessions = sessions.clone();
        let sent = sent.clone();
        let sockets = sockets.clone();
        tokio::spawn(async move {
            // One tick a millisecond, each sending its share of the interval's beats.
            let ticks = u64::try_from(interval.as_millis()).unwrap().max(1);
            let mut tick = tokio::time::interval(Duration::from_millis(1));
            let mut n: u64 = 0;
            loop {
                tick.tick().await;
                let slot = n % ticks;
                n += 1;
                let batch: Vec<(usize, Vec<u8>)> = {
                    let mut all = sessions.lock().unwrap();
                    let now = origin.elapsed();
                    ids.iter()
                        .enumerate()
                        .filter(|(i, _)| (*i as u64) % ticks == slot)
                        .filter_map(|(i, id)| {
                            let c = all.get_mut(id)?;
                            let beat = c.end.beat(
                                now,
                                Reaching::default(),
                                WatchdogState::Armed {
                                    granted: Duration::from_secs(10),
                                    device: DeviceName::new("iTCO_wdt"),
                                },
                            );
                            Some((i % SOCKETS, beat))
                        })
                        .collect()
                };
                for (s, beat) in batch {
                    if sockets[s].send(&beat).await.is_ok() {
                        sent.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
    }
    tokio::time::sleep(warmup).await;

    let sent0 = sent.load(Ordering::Relaxed);
    let acked0 = acknowledged.load(Ordering::Relaxed);
    let samples = samples_over(pid, measure).await;
    let sent_n = sent.load(Ordering::Relaxed) - sent0;
    let acked_n = acknowledged.load(Ordering::Relaxed) - acked0;
    let (cpu_pct, worst_10s) = cpu_of(&samples);
    let last = samples.last().copied().unwrap();
    let rss_mib = last.2;
    let rss_more = rss_mib - rss_baseline;
    let acked_ratio = if sent_n == 0 {
        0.0
    } else {
        acked_n as f64 / sent_n as f64
    };
    println!(
        "over {} s: {sent_n} beats sent, {acked_n} acknowledged ({:.3} %)",
        measure.as_secs(),
        acked_ratio * 100.0
    );
    println!(
        "leader CPU {cpu_pct:.2} % of a core (worst 10 s {:.2} % at {:.0} s; baseline \
         {baseline_cpu:.2} %), RSS {rss_mib:.1} MiB ({rss_more:+.1} MiB over the baseline)",
        worst_10s.0, worst_10s.1
    );
    // The floor (`FLOOR=0`: not measured): the daemon stopped, the same loop with
    // nothing behind it answers on its port, pinned as it was, the companions beating
    // on.
    let _ = daemon.kill().await;
    let _ = daemon.wait().await;
    let floor = if env_or("FLOOR", 1) == 1 {
        let answer_len = ack_len.load(Ordering::Relaxed);
        let me = std::env::current_exe().expect("this bench's path");
        let mut responder = on_core_0(me, remote.is_some())
            .env(FLOOR_LISTEN, listen.to_string())
            .env(FLOOR_ANSWER_LEN, answer_len.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the floor's process");
        let floor_pid = responder.id().expect("pid");
        tokio::time::sleep(warmup).await;
        let (sent0, answered0) = (
            sent.load(Ordering::Relaxed),
            answered.load(Ordering::Relaxed),
        );
        let samples = samples_over(floor_pid, measure).await;
        let sent_n = sent.load(Ordering::Relaxed) - sent0;
        let answered_n = answered.load(Ordering::Relaxed) - answered0;
        let _ = responder.kill().await;
        let (floor_pct, floor_worst) = cpu_of(&samples);
        println!(
            "floor (the same loop answering {answer_len} bytes a datagram, nothing behind \
             it): CPU {floor_pct:.2} % of a core (worst 10 s {:.2} %), {answered_n} of \
             {sent_n} answered; the daemon's own share above it {:.2} points",
            floor_worst.0,
            cpu_pct - floor_pct
        );
        json!({
            "answer_bytes": answer_len,
            "cpu_pct": round3(floor_pct),
            "worst_10s": {"start_s": round3(floor_worst.1), "cpu_pct": round3(floor_worst.0)},
            "beats_sent": sent_n,
            "beats_answered": answered_n,
            "daemon_above_floor_points": round3(cpu_pct - floor_pct),
        })
    } else {
        serde_json::Value::Null
    };
    // Each check, and what it read when it missed: issue 36's targets (the CPU over the
    // window, the RSS, the acknowledgements) and the stricter one this bench adds (the
    // CPU in every 10 s too, issue 35's rule for the fleet).
    let checks = [
        (
            "cpu_window",
            cpu_pct <= 5.0,
            format!("CPU {cpu_pct:.2} % of a core over the window (≤ 5 %)"),
        ),
        (
            "cpu_every_10s",
            worst_10s.0 <= 5.0,
            format!(
                "CPU {:.2} % in its worst 10 s (≤ 5 % in every 10 s)",
                worst_10s.0
            ),
        ),
        (
            "rss",
            rss_more <= 20.0,
            format!("RSS +{rss_more:.1} MiB over the baseline (≤ +20 MiB)"),
        ),
        (
            "acknowledged",
            acked_ratio >= 0.999,
            format!("{:.3} % acknowledged (≥ 99.9 %)", acked_ratio * 100.0),
        ),
    ];
    let met = checks.iter().all(|(_, ok, _)| *ok);
    common::results::write(
        "companions_at_scale",
        json!({
            "companions": count,
            "interval_ms": interval.as_millis() as u64,
            "baseline_s": baseline.as_secs(),
            "warmup_s": warmup.as_secs(),
            "measure_s": measure.as_secs(),
            "remote": remote.is_some(),
        }),
        json!({
            "baseline": {"cpu_pct": round3(baseline_cpu), "rss_mib": round3(rss_baseline)},
            "hellos_s": round3(hellos_s),
            "cpu_pct": round3(cpu_pct),
            "worst_10s": {"start_s": round3(worst_10s.1), "cpu_pct": round3(worst_10s.0)},
            "rss_mib": round3(rss_mib),
            "rss_more_mib": round3(rss_more),
            "beats_sent": sent_n,
            "beats_acknowledged": acked_n,
            "samples": samples
                .iter()
                .map(|(t, c, r)| json!({"t_s": round3(*t), "cpu_s": round3(*c), "rss_mib": round3(*r)}))
                .collect::<Vec<_>>(),
            "floor": floor,
            "checks": checks
                .iter()
                .map(|(name, ok, _)| (name.to_string(), json!(ok)))
                .collect::<serde_json::Map<_, _>>(),
            "met": met,
        }),
    );
    drop(remote);
    if !met {
        let missed: Vec<&str> = checks
            .iter()
            .filter(|(_, ok, _)| !ok)
            .map(|(_, _, what)| what.as_str())
            .collect();
        println!("TARGET MISSED: {}", missed.join("; "));
        std::process::exit(1);
    }
}

/// The certificates of a PEM bundle.
fn rustls_pemfile_certs(pem: &str) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject as _;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes())
        .filter_map(Result::ok)
        .collect()
}
