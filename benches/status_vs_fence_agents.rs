//! `nodefence status` over a fleet of BMCs next to the ClusterLabs agents run one by
//! one over the same BMCs (issue 16, goal 4): how much faster is one `nodefence
//! status` than the shell loop an operator would otherwise write?
//!
//! The bench starts NODES mock HTTPS Redfish BMCs (iDRAC profile, one system
//! `System.Embedded.1` each, powered On, certificates from one private CA) and NODES
//! mock IPMI BMCs (RMCP+, cipher suite 17), one mock vCenter serving NODES VMs
//! (powered on), and one KubeVirt infrastructure cluster with NODES VirtualMachines,
//! all Running (fake-kube over HTTPS with the KubeVirt CRDs, virt-api's subresources
//! behind the aggregated-API hook and the virt-controller/virt-handler stand-in: the
//! tests' `tests/common/kubevirt.rs`, included here), all on loopback in this process,
//! and writes one configuration directory per protocol, as the daemon would be
//! configured: `nodefence.toml`, an inventory with one node per BMC or VM (Redfish:
//! `endpoint` and `ca_file`; IPMI: `address`, `port`, `cipher_suite = 17`; vSphere:
//! the vCenter's `endpoint` and `ca_file`, and each VM's `bios_uuid`; KubeVirt: the
//! `kubeconfig` of the ServiceAccount `deploy/kubevirt-infra/rbac.yaml` binds, and
//! the `namespace`, each node's VM by its name) and, but for KubeVirt, the
//! password in a 0600 `password_file`. For each protocol it then times:
//!
//! 1. **nodefence**: the real binary, `nodefence --config DIR/nodefence.toml status
//!    -o json`, as its own process and cold (process start, configuration load, TLS
//!    handshakes or RMCP+ sessions, `max_concurrent_requests` = CONCURRENCY in
//!    flight; its drivers come from one `DriverFactory`, so every KubeVirt VM is read
//!    through the one client of their kubeconfig). Every node must read On in the
//!    JSON, or the bench fails.
//! 2. **agents**: `fence_redfish` (`--ssl-insecure --systems-uri
//!    /redfish/v1/Systems/System.Embedded.1`), `fence_ipmilan` (`--lanplus
//!    --cipher 17`) or `fence_vmware_soap` (`--ssl-insecure --plug <VM name>`; it
//!    fetches the WSDL, logs in, and reads every VM through a container view on each
//!    call, as it does against a real vCenter; needs `python3-suds`) or
//!    `fence_kubevirt` (`--kubeconfig K --namespace NS --plug <VM name>`; it loads the
//!    kubeconfig, discovers the API through `python3-openshift`'s DynamicClient and
//!    reads the VMI on each call; found through `nodefence_mocks::peers`, which checks
//!    that its Python imports `kubernetes` and `openshift`) with `-o status`,
//!    one process per BMC or VM, one after the other, as a shell loop runs them
//!    (options on the command line). Each must exit 0 and print `Status: ON`, or the
//!    bench fails.
//!
//! For vSphere a "BMC" below is a VM: NODES VMs behind one vCenter, the shape of a
//! real VMware cluster (nodefence keeps one session per node's driver). For KubeVirt
//! it is a VirtualMachine: NODES VMs in one namespace of one infrastructure cluster,
//! the shape of a guest cluster on OpenShift Virtualization or Harvester. The
//! stand-in's phases are fast (tens of milliseconds, as in the tests) and its resync
//! slow, so that it sits idle while the Running VMs are read.
//!
//! The ratio is the agents' total over nodefence's, for the same BMCs. Sequential
//! Python agents take minutes over a thousand BMCs: AGENT_NODES=K runs them over the
//! first K only; nodefence is then also timed over those K (`status NODE...`) for a
//! measured ratio, and the agents' total for all NODES is extrapolated from their mean
//! per call (labelled as such). "CPU" is the user + system time of this process's
//! reaped children (`nodefence`, or the agents and their `ipmitool`s) from
//! `/proc/self/stat`; "mocks" is this process's own (the BMCs' side). An agent not
//! installed in /usr/sbin, /sbin or /usr/local/sbin skips its part with the reason.
//!
//! Every reading's latency (nodefence's `latency_ms`), every agent call's wall-clock
//! time and the totals go into the JSON results (`common::results`:
//! `status_vs_fence_agents.json`).
//!
//! Run: `cargo bench --bench status_vs_fence_agents`. Environment: NODES (default
//! 1000), AGENT_NODES (default NODES), CONCURRENCY (nodefence's
//! `max_concurrent_requests`, default 16), PROTOCOLS (which sections, comma-separated:
//! default `redfish,ipmi,vsphere,kubevirt`). Linux only (`/proc`). The BMCs hold two
//! sockets per node in this process (2,000 descriptors for the default 1,000): raise
//! `ulimit -n` above the usual 1,024 first; `nodefence status` itself needs few (at
//! most CONCURRENCY connections open).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

#[path = "../tests/common/kubevirt.rs"]
#[allow(dead_code)]
mod kubevirt;

use nodefence_mocks::ipmi::{MockIpmi, MockIpmiHandle, Privilege};
use nodefence_mocks::kubevirt::{RunStrategy, VmBuilder};
use nodefence_mocks::redfish::{MockPower, MockRedfish, MockRedfishHandle, Profile, SystemSpec};
use nodefence_mocks::tls::TlsMaterial;
use nodefence_mocks::vsphere::{MockVsphere, MockVsphereHandle, VmPower, VmSpec};
use serde_json::{Value, json};
use tokio::process::Command;

mod common;
use common::{env_or, find_agent, ms, pct, write_secret};

const USER: &str = "fence";
const PASSWORD: &str = "bench-password";
const SYSTEM: &str = "System.Embedded.1";
/// Longer than any agent call or status run here can take unless something hangs.
const PROCESS_TIMEOUT: Duration = Duration::from_secs(600);

/// User + system CPU time of this process and of its reaped children (fields 14–17
/// of `/proc/self/stat`, in clock ticks of 10 ms).
fn cpu() -> (Duration, Duration) {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // The command name (field 2) is in parentheses and may hold spaces; `rest` starts
    // at field 3 (state): field n is f[n - 3].
    let rest = stat.rsplit_once(')').expect("comm").1;
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(4)
        .map(|v| v.parse().unwrap())
        .collect();
    let ticks = |t: u64| Duration::from_millis(t * 10);
    (ticks(f[0] + f[1]), ticks(f[2] + f[3]))
}

/// What a timed stretch cost: wall-clock time, children's CPU, this process's CPU.
struct Cost {
    wall: Duration,
    children: Duration,
    mocks: Duration,
}

/// Times `work`; children's CPU counts once they are reaped (awaited) inside it.
async fn measured<T>(work: impl std::future::Future<Output = T>) -> (T, Cost) {
    let ((own0, children0), at) = (cpu(), Instant::now());
    let out = work.await;
    let wall = at.elapsed();
    let (own1, children1) = cpu();
    (
        out,
        Cost {
            wall,
            children: children1 - children0,
            mocks: own1 - own0,
        },
    )
}

/// A command with a clean proxy environment (everything here is on loopback).
fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new(program);
    for var in nodefence_mocks::PROXY_VARIABLES {
        cmd.env_remove(var);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

async fn output(mut cmd: Command, what: &str) -> std::process::Output {
    tokio::time::timeout(PROCESS_TIMEOUT, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {PROCESS_TIMEOUT:?}"))
        .unwrap_or_else(|e| panic!("{what} could not be started: {e}"))
}

/// `dir/nodefence.toml` naming `dir/inventory.toml` (`[defaults]`, with the username
/// and password file when `credentials`, then `nodes`), and the password file; returns
/// the config path.
fn write_config(
    dir: &Path,
    concurrency: usize,
    credentials: bool,
    defaults: &str,
    nodes: &str,
) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let credentials = if credentials {
        write_secret(&dir.join("bmc-password"), PASSWORD);
        format!("username = \"{USER}\"\npassword_file = \"bmc-password\"\n")
    } else {
        String::new()
    };
    std::fs::write(
        dir.join("nodefence.toml"),
        format!(
            "inventory = \"inventory.toml\"\n[power]\nmax_concurrent_requests = {concurrency}\n"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("inventory.toml"),
        format!("[defaults]\n{credentials}{defaults}{nodes}"),
    )
    .unwrap();
    dir.join("nodefence.toml")
}

fn node_name(i: usize) -> String {
    format!("worker-{i}")
}

/// One cold `nodefence status -o json` process (over `names`, or every node when
/// empty); fails unless it exits 0 with every expected node On.
async fn nodefence_status(config: &Path, names: &[String], expected: usize) -> (Cost, Vec<u64>) {
    let mut cmd = command(env!("CARGO_BIN_EXE_nodefence"));
    cmd.arg("--config")
        .arg(config)
        .args(["status", "-o", "json"])
        .args(names);
    let (out, cost) = measured(output(cmd, "nodefence status")).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "nodefence status ({}) printed no JSON: {e}\nstderr: {stderr}",
            out.status
        )
    });
    let not_on: Vec<&serde_json::Value> = rows.iter().filter(|r| r["power"] != "On").collect();
    assert!(
        out.status.success() && rows.len() == expected && not_on.is_empty(),
        "nodefence status ({}): {} rows, {} not On, e.g. {:?}\nstderr: {stderr}",
        out.status,
        rows.len(),
        not_on.len(),
        not_on.first()
    );
    if !stderr.trim().is_empty() {
        println!("  (nodefence status wrote to stderr: {})", stderr.trim());
    }
    let mut latencies: Vec<u64> = rows
        .iter()
        .map(|r| r["latency_ms"].as_u64().expect("latency_ms"))
        .collect();
    latencies.sort_unstable();
    (cost, latencies)
}

/// Runs `agent` with each argument list, one after the other; fails unless each exits
/// 0 and prints `Status: ON`. Each call's wall-clock time, sorted.
async fn agents_one_by_one(agent: &Path, calls: &[Vec<String>]) -> (Cost, Vec<Duration>) {
    let name = agent.file_name().unwrap().to_string_lossy().into_owned();
    let (mut latencies, cost) = measured(async {
        let mut latencies = Vec::with_capacity(calls.len());
        for (i, args) in calls.iter().enumerate() {
            let mut cmd = command(agent);
            cmd.args(args);
            let at = Instant::now();
            let out = output(cmd, &name).await;
            latencies.push(at.elapsed());
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains("Status: ON"),
                "{name} {} ({}): stdout {stdout:?}, stderr {:?}",
                args.join(" ").replace(PASSWORD, "***"),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            if (i + 1) % 100 == 0 {
                eprintln!("  … {name}: {}/{}", i + 1, calls.len());
            }
        }
        latencies
    })
    .await;
    latencies.sort();
    (cost, latencies)
}

/// One protocol's BMCs, configuration and agent command lines.
struct Protocol {
    label: &'static str,
    agent: &'static str,
    /// Where the agent is, if it can run here (else `None`, and why, printed).
    find_agent: fn(&str) -> Option<PathBuf>,
    config: PathBuf,
    /// The agent's arguments for each BMC, in node order.
    agent_args: Vec<Vec<String>>,
}

/// The agents' common options against the BMC listening on `port`.
fn agent_args(port: u16, extra: &[&str]) -> Vec<String> {
    let port = port.to_string();
    let mut args: Vec<String> = [
        "--ip",
        "127.0.0.1",
        "--ipport",
        &port,
        "--username",
        USER,
        "--password",
        PASSWORD,
    ]
    .iter()
    .chain(extra)
    .map(|s| (*s).to_string())
    .collect();
    args.extend(["-o".into(), "status".into()]);
    args
}

fn redfish(dir: &Path, concurrency: usize, bmcs: &[MockRedfishHandle], ca: &str) -> Protocol {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("bmc-ca.pem"), ca).unwrap();
    let mut nodes = String::new();
    for (i, bmc) in bmcs.iter().enumerate() {
        nodes.push_str(&format!(
            "[nodes.{}]\nendpoint = \"{}\"\n",
            node_name(i + 1),
            bmc.base_url()
        ));
    }
    let systems_uri = format!("/redfish/v1/Systems/{SYSTEM}");
    Protocol {
        label: "redfish",
        agent: "fence_redfish",
        find_agent,
        config: write_config(
            dir,
            concurrency,
            true,
            "driver = \"redfish\"\nca_file = \"bmc-ca.pem\"\n",
            &nodes,
        ),
        agent_args: bmcs
            .iter()
            .map(|b| {
                agent_args(
                    b.addr().port(),
                    &["--ssl-insecure", "--systems-uri", &systems_uri],
                )
            })
            .collect(),
    }
}

fn ipmi(dir: &Path, concurrency: usize, bmcs: &[MockIpmiHandle]) -> Protocol {
    let mut nodes = String::new();
    for (i, bmc) in bmcs.iter().enumerate() {
        nodes.push_str(&format!(
            "[nodes.{}]\naddress = \"127.0.0.1\"\nport = {}\n",
            node_name(i + 1),
            bmc.port()
        ));
    }
    Protocol {
        label: "ipmi",
        agent: "fence_ipmilan",
        find_agent,
        config: write_config(
            dir,
            concurrency,
            true,
            "driver = \"ipmi\"\ncipher_suite = 17\n",
            &nodes,
        ),
        agent_args: bmcs
            .iter()
            .map(|b| agent_args(b.port(), &["--lanplus", "--cipher", "17"]))
            .collect(),
    }
}

/// Every VM of the one vCenter: the vCenter's endpoint and CA as defaults, each
/// node's VM by its BIOS UUID (`SearchIndex.FindAllByUuid`); the agent names the VM.
fn vsphere(dir: &Path, concurrency: usize, vc: &MockVsphereHandle) -> Protocol {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("vcenter-ca.pem"), vc.ca_pem()).unwrap();
    let vms = vc.vms();
    let mut nodes = String::new();
    for vm in &vms {
        nodes.push_str(&format!(
            "[nodes.{}]\nbios_uuid = \"{}\"\n",
            vm.name, vm.bios_uuid
        ));
    }
    Protocol {
        label: "vsphere",
        agent: "fence_vmware_soap",
        find_agent,
        config: write_config(
            dir,
            concurrency,
            true,
            &format!(
                "driver = \"vsphere\"\nendpoint = \"{}\"\nca_file = \"vcenter-ca.pem\"\n",
                vc.base_url()
            ),
            &nodes,
        ),
        agent_args: vms
            .iter()
            .map(|vm| agent_args(vc.addr().port(), &["--ssl-insecure", "--plug", &vm.name]))
            .collect(),
    }
}

/// Every VM of the one infrastructure cluster's namespace: the fencer's kubeconfig
/// and the namespace as defaults, each node's VM by the node's name (`vm` unset);
/// the agent gets the same kubeconfig, namespace and name.
fn kubevirt(dir: &Path, concurrency: usize, infra: &kubevirt::Infra, vms: usize) -> Protocol {
    let kubeconfig = infra.fencer_kubeconfig();
    let mut nodes = String::new();
    for i in 1..=vms {
        nodes.push_str(&format!("[nodes.{}]\n", node_name(i)));
    }
    let kubeconfig_arg = kubeconfig.display().to_string();
    Protocol {
        label: "kubevirt",
        agent: "fence_kubevirt",
        find_agent: |_| nodefence_mocks::peers::fence_kubevirt(),
        config: write_config(
            dir,
            concurrency,
            false,
            &format!(
                "driver = \"kubevirt\"\nkubeconfig = \"{kubeconfig_arg}\"\nnamespace = \"{}\"\n",
                kubevirt::VM_NAMESPACE
            ),
            &nodes,
        ),
        agent_args: (1..=vms)
            .map(|i| {
                [
                    "--kubeconfig",
                    &kubeconfig_arg,
                    "--namespace",
                    kubevirt::VM_NAMESPACE,
                    "--plug",
                    &node_name(i),
                    "-o",
                    "status",
                ]
                .iter()
                .map(|s| (*s).to_string())
                .collect()
            })
            .collect(),
    }
}

/// One line of the summary table.
struct Summary {
    protocol: &'static str,
    bmcs: usize,
    nodefence: Duration,
    agents: Option<(Duration, bool)>,
}

fn cpu_note(cost: &Cost, calls: usize) -> String {
    format!(
        "CPU {:.0} ms ({:.1} ms per BMC), mocks {:.0} ms",
        ms(cost.children),
        ms(cost.children) / calls as f64,
        ms(cost.mocks)
    )
}

fn nodefence_row(label: &str, cost: &Cost, bmcs: usize, readings: &[u64]) {
    println!(
        "  {label:<44} {:>10.1} ms total, {:>6.2} ms per BMC; readings p50 {} ms p99 {} ms; {}",
        ms(cost.wall),
        ms(cost.wall) / bmcs as f64,
        readings[readings.len() / 2],
        readings[((readings.len() - 1) as f64 * 0.99).round() as usize],
        cpu_note(cost, bmcs)
    );
}

/// A timed stretch as JSON: wall-clock and CPU seconds.
fn cost_json(cost: &Cost) -> Value {
    json!({
        "wall_s": round_ms(cost.wall.as_secs_f64()),
        "cpu_s": round_ms(cost.children.as_secs_f64()),
    })
}

/// `seconds` rounded to the millisecond.
fn round_ms(seconds: f64) -> f64 {
    (seconds * 1e3).round() / 1e3
}

/// One protocol's part of the JSON results: every reading and every agent call.
fn protocol_json(
    p: &Protocol,
    all: &Cost,
    readings: &[u64],
    subset: Option<(usize, &Cost)>,
    agent: Option<(&Cost, &[Duration])>,
) -> Value {
    let mut nodefence = cost_json(all);
    nodefence["bmcs"] = json!(readings.len());
    nodefence["reading_ms"] = json!(readings);
    let agent = agent.map(|(cost, calls)| {
        let mut agent = cost_json(cost);
        agent["calls"] = json!(calls.len());
        agent["call_ms"] = json!(
            calls
                .iter()
                .map(|d| (ms(*d) * 100.0).round() / 100.0)
                .collect::<Vec<f64>>()
        );
        agent
    });
    json!({
        "protocol": p.label,
        "nodefence": nodefence,
        "nodefence_over_agent_bmcs": subset.map(|(bmcs, cost)| {
            let mut over = cost_json(cost);
            over["bmcs"] = json!(bmcs);
            over
        }),
        "agent": agent,
        "agent_tool": p.agent,
    })
}

async fn section(p: &Protocol, nodes: usize, agent_nodes: usize) -> (Vec<Summary>, Value) {
    println!("{}:", p.label);
    let (all, readings) = nodefence_status(&p.config, &[], nodes).await;
    nodefence_row(
        &format!("nodefence status, {nodes} BMCs (one process)"),
        &all,
        nodes,
        &readings,
    );
    let Some(agent) = (p.find_agent)(p.agent) else {
        println!(
            "  {}: skipped: not installed in /usr/sbin, /sbin or /usr/local/sbin, or its \
             Python modules missing (apt-get install fence-agents; for fence_kubevirt \
             also python3-kubernetes python3-openshift)",
            p.agent
        );
        let summary = vec![Summary {
            protocol: p.label,
            bmcs: nodes,
            nodefence: all.wall,
            agents: None,
        }];
        return (summary, protocol_json(p, &all, &readings, None, None));
    };
    // nodefence over the agents' BMCs only, when that is a subset: a measured ratio.
    let subset = if agent_nodes < nodes {
        let names: Vec<String> = (1..=agent_nodes).map(node_name).collect();
        let (cost, readings) = nodefence_status(&p.config, &names, agent_nodes).await;
        nodefence_row(
            &format!("nodefence status, first {agent_nodes} BMCs (named)"),
            &cost,
            agent_nodes,
            &readings,
        );
        Some(cost)
    } else {
        None
    };

    let (cost, lat) = agents_one_by_one(&agent, &p.agent_args[..agent_nodes]).await;
    println!(
        "  {:<44} {:>10.1} ms total, per call p50 {:.1} ms p99 {:.1} ms; {}",
        format!("{} one by one, {agent_nodes} BMCs", p.agent),
        ms(cost.wall),
        ms(pct(&lat, 0.5)),
        ms(pct(&lat, 0.99)),
        cpu_note(&cost, agent_nodes)
    );
    let json = protocol_json(
        p,
        &all,
        &readings,
        subset.as_ref().map(|c| (agent_nodes, c)),
        Some((&cost, &lat)),
    );
    let mut out = Vec::new();
    if let Some(subset) = subset {
        let ratio = ms(cost.wall) / ms(subset.wall);
        println!(
            "  {:<44} {ratio:>10.1}×",
            format!("ratio, {agent_nodes} BMCs (measured)")
        );
        out.push(Summary {
            protocol: p.label,
            bmcs: agent_nodes,
            nodefence: subset.wall,
            agents: Some((cost.wall, false)),
        });
        let extrapolated = cost.wall.mul_f64(nodes as f64 / agent_nodes as f64);
        println!(
            "  {:<44} {:>10.1} ms total (EXTRAPOLATED: {agent_nodes} calls' mean {:.1} ms × {nodes})",
            format!("{} one by one, {nodes} BMCs", p.agent),
            ms(extrapolated),
            ms(cost.wall) / agent_nodes as f64,
        );
        println!(
            "  {:<44} {:>10.1}× (EXTRAPOLATED)",
            format!("ratio, {nodes} BMCs"),
            ms(extrapolated) / ms(all.wall)
        );
        out.push(Summary {
            protocol: p.label,
            bmcs: nodes,
            nodefence: all.wall,
            agents: Some((extrapolated, true)),
        });
    } else {
        println!(
            "  {:<44} {:>10.1}×",
            format!("ratio, {nodes} BMCs (measured)"),
            ms(cost.wall) / ms(all.wall)
        );
        out.push(Summary {
            protocol: p.label,
            bmcs: nodes,
            nodefence: all.wall,
            agents: Some((cost.wall, false)),
        });
    }
    (out, json)
}

#[tokio::main]
async fn main() {
    nodefence_mocks::tls::install_crypto_provider();
    let nodes = env_or("NODES", 1000).max(1);
    let agent_nodes = env_or("AGENT_NODES", nodes).clamp(1, nodes);
    let concurrency = env_or("CONCURRENCY", 16).max(1);
    let wanted: String = env_or("PROTOCOLS", "redfish,ipmi,vsphere,kubevirt".to_string());
    let wanted: Vec<&str> = wanted.split(',').map(str::trim).collect();
    for w in &wanted {
        assert!(
            ["redfish", "ipmi", "vsphere", "kubevirt"].contains(w),
            "PROTOCOLS: unknown {w:?} (redfish, ipmi, vsphere, kubevirt)"
        );
    }
    let on = |p: &str| wanted.contains(&p);
    // The BMCs of the sections not run are not started.
    let bmcs = |p: &str| if on(p) { nodes } else { 0 };

    let started = Instant::now();
    let tls = TlsMaterial::generate().expect("TLS material");
    let mut redfish_bmcs = Vec::with_capacity(nodes);
    let mut ipmi_bmcs = Vec::with_capacity(nodes);
    for i in 1..=bmcs("redfish") {
        redfish_bmcs.push(
            MockRedfish::builder()
                .profile(Profile::Idrac)
                .system(
                    SystemSpec::new(SYSTEM)
                        .power(MockPower::On)
                        .uuid(format!("{i:08x}-0000-4000-8000-{i:012x}")),
                )
                .credentials(USER, PASSWORD)
                .tls(true)
                .tls_material(tls.clone())
                .start()
                .await
                .expect("mock Redfish BMC"),
        );
    }
    for i in 1..=bmcs("ipmi") {
        ipmi_bmcs.push(
            MockIpmi::builder()
                .name(node_name(i))
                .user(USER, PASSWORD, Privilege::Administrator)
                .start()
                .await
                .expect("mock IPMI BMC"),
        );
    }
    let mut vcenter = MockVsphere::builder().credentials(USER, PASSWORD);
    for i in 1..=bmcs("vsphere") {
        vcenter = vcenter.vm(VmSpec::new(node_name(i))
            .folder("k8s")
            .bios_uuid(format!("4213{i:04x}-0000-4000-8000-{i:012x}"))
            .power(VmPower::PoweredOn));
    }
    let vcenter = vcenter.start().await.expect("mock vCenter");
    // The infrastructure cluster only when its section runs (it is a whole API server).
    let infra = if on("kubevirt") {
        // Phases in tens of milliseconds; a slow resync, so that the stand-in (which
        // lists every VM and VMI on each round) sits idle while they are read.
        let infra = kubevirt::Infra::start(nodefence_mocks::kubevirt::Timing {
            resync: Duration::from_secs(10),
            ..kubevirt::fast_timing()
        })
        .await;
        for i in 1..=nodes {
            infra
                .create(
                    VmBuilder::new(kubevirt::VM_NAMESPACE, &node_name(i))
                        .run_strategy(RunStrategy::Always)
                        .firmware_uuid(&format!("6f4c{i:04x}-0000-4000-8000-{i:012x}")),
                )
                .await;
        }
        for i in 1..=nodes {
            infra.wait_running(&node_name(i)).await;
        }
        Some(infra)
    } else {
        None
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let mut protocols: Vec<Protocol> = [
        redfish(
            &dir.path().join("redfish"),
            concurrency,
            &redfish_bmcs,
            tls.ca_pem(),
        ),
        ipmi(&dir.path().join("ipmi"), concurrency, &ipmi_bmcs),
        vsphere(&dir.path().join("vsphere"), concurrency, &vcenter),
    ]
    .into_iter()
    .filter(|p| on(p.label))
    .collect();
    if let Some(infra) = &infra {
        protocols.push(kubevirt(
            &dir.path().join("kubevirt"),
            concurrency,
            infra,
            nodes,
        ));
    }
    println!(
        "status vs fence agents: {} mock HTTPS Redfish BMCs (iDRAC profile), {} mock IPMI \
         BMCs (cipher suite 17), {} VMs on one mock vCenter and {} KubeVirt VMs (Running) \
         in one infrastructure cluster, on loopback, set up in {:.1} s; \
         nodefence \
         max_concurrent_requests {concurrency}; agents over {}",
        bmcs("redfish"),
        bmcs("ipmi"),
        bmcs("vsphere"),
        bmcs("kubevirt"),
        started.elapsed().as_secs_f64(),
        if agent_nodes < nodes {
            format!("the first {agent_nodes} BMCs (AGENT_NODES)")
        } else {
            format!("all {nodes} BMCs")
        }
    );

    let mut summary = Vec::new();
    let mut json_protocols = Vec::new();
    for p in &protocols {
        println!();
        let (rows, json) = section(p, nodes, agent_nodes).await;
        summary.extend(rows);
        json_protocols.push(json);
    }
    common::results::write(
        "status_vs_fence_agents",
        json!({"nodes": nodes, "agent_nodes": agent_nodes, "concurrency": concurrency}),
        json!({"protocols": json_protocols}),
    );

    println!();
    println!("| protocol | BMCs | nodefence status (one process) | agents one by one | ratio |");
    println!("|---|---|---|---|---|");
    for s in &summary {
        let (agents, ratio) = match s.agents {
            Some((total, extrapolated)) => {
                let mark = if extrapolated { " (extrapolated)" } else { "" };
                (
                    format!(
                        "{:.1} s ({:.0} ms per BMC){mark}",
                        total.as_secs_f64(),
                        ms(total) / s.bmcs as f64
                    ),
                    format!("{:.0}×{mark}", ms(total) / ms(s.nodefence)),
                )
            }
            None => ("skipped".into(), "-".into()),
        };
        println!(
            "| {} | {} | {:.1} ms ({:.2} ms per BMC) | {agents} | {ratio} |",
            s.protocol,
            s.bmcs,
            ms(s.nodefence),
            ms(s.nodefence) / s.bmcs as f64
        );
    }

    for bmc in redfish_bmcs {
        bmc.shutdown().await;
    }
    for bmc in ipmi_bmcs {
        bmc.shutdown().await;
    }
    vcenter.shutdown().await;
    if let Some(infra) = infra {
        infra.kv.shutdown().await;
        infra.kube.shutdown().await;
    }
}
