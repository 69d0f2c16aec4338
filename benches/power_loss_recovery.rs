//! Power loss → replacement pod Running elsewhere, at time scale 1 (real seconds).
//!
//! Runs `nodefence demo --speed 1 --scenario power-loss --output json` (the real
//! daemon against fake-kube's simulated control plane, kubelets renewing their Leases
//! every 10 s, node-monitor-grace-period 50 s, a StatefulSet with one RWO volume, a
//! mock Redfish BMC) several times and reports, in cluster seconds after the plug was
//! pulled, when the node was released and when `db-0` ran again on another node with
//! its volume attached. The target on default settings is ≤ 30 s.
//!
//! `cargo bench --bench power_loss_recovery` (runs: `NODEFENCE_BENCH_RUNS`, default 3;
//! about a minute each). Exits 1 when the median misses the target.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

const TARGET_SECONDS: f64 = 30.0;

fn main() {
    // `cargo bench` passes `--bench`; nothing else is configurable by arguments.
    let runs: usize = std::env::var("NODEFENCE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    let exe = env!("CARGO_BIN_EXE_nodefence");
    let mut released = Vec::new();
    let mut running = Vec::new();
    for run in 1..=runs {
        let out = Command::new(exe)
            .args([
                "demo",
                "--speed",
                "1",
                "--scenario",
                "power-loss",
                "--output",
                "json",
                "--no-color",
            ])
            .output()
            .expect("run nodefence demo");
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "demo output is not JSON ({e}); exit {:?}; stderr:\n{}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        let scenario = &summary["scenarios"][0];
        assert_eq!(scenario["ok"], true, "run {run}: {scenario}");
        let rel = scenario["released_after_s"].as_f64().expect("released");
        let pod = scenario["pod_running_after_s"]
            .as_f64()
            .expect("pod running");
        println!("run {run}: released +{rel:.1}s, db-0 Running elsewhere +{pod:.1}s");
        released.push(rel);
        running.push(pod);
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (rel, pod) = (med(&mut released), med(&mut running));
    println!(
        "power loss → released: median {rel:.1}s; → replacement pod Running with its volume: median {pod:.1}s (min {:.1}s, max {:.1}s, {runs} runs); target ≤ {TARGET_SECONDS:.0}s",
        running[0],
        running[running.len() - 1]
    );
    if pod > TARGET_SECONDS {
        eprintln!("MISSED the target");
        std::process::exit(1);
    }
}
