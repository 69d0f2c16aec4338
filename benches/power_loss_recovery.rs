//! Power loss → replacement pod Running elsewhere, at time scale 1 (real seconds).
//!
//! Runs `nodefence demo --speed 1 --scenario power-loss --output json` (the real
//! daemon against fake-kube's simulated control plane, kubelets renewing their Leases
//! every 10 s, node-monitor-grace-period 50 s, a StatefulSet with one RWO volume, a
//! mock Redfish BMC) several times and reports, in cluster seconds after the plug was
//! pulled, when the node was released and when `db-0` ran again on another node with
//! its volume attached.
//!
//! Two phases decide most of the time, and on a real cluster both are random:
//! - where the plug is pulled in the failed node's 10 s Lease renewal cycle
//!   (nodefence reads the BMC at the first missed renewal);
//! - where the replacement node's kubelet is in its own 10 s status cycle: it mounts
//!   the volume only after it has reported it in `status.volumesInUse`, which it
//!   computes every 10 s (`--status-after-lease`, offset from the Lease renewals).
//!
//! Run `i` of `n` pulls the plug `10 s × i / n` after a renewal and puts the status
//! loops `10 s × vdc(i)` after the renewals (van der Corput: 0, 5, 2.5, 7.5, 1.25,
//! ...), so the `n` runs cover both phases evenly and the median estimates the
//! median over a real cluster's random phases. A last run takes the worst corner:
//! the plug pulled right after a renewal (latest release) and the replacement's status
//! computed right at the release, just before the new pod is bound (a whole status
//! cycle to wait). Targets on default settings (issue 16): median ≤ 15 s, worst ≤ 18 s.
//!
//! Then the partition: `--scenario network-cut` (kubelet cut off, machine On): the
//! ForceOff waits for NotReady and `unhealthy_after` (60 s) counted from the first
//! missed renewal; target: db-0 Running ≤ `unhealthy_after` + 20 s after that missed
//! renewal, i.e. ≤ 92 s after the cut when it comes right after a renewal.
//!
//! The floors: what kubelet and Lease timing alone impose, for an ideal agent that
//! releases at the very moment a missed renewal can be known (10.4 s after the last
//! renewal: the 10 s interval and the kubelet's 4 % jitter) and a control plane that
//! adds nothing but the CSI detach and attach (1 s each) and the container start
//! (1 s): `(10.4 s − plug) + max(wait for the replacement's next status tick, 2 s) +
//! 1 s` ([`floor`]). Its worst (plug right after a renewal, a status tick just
//! missed) is 21.4 s, above the 18 s target: no agent that waits for the Lease meets
//! that target on these defaults. Each run's floor (at its phases) and the floors'
//! median and worst over random phases go into the JSON.
//!
//! `cargo bench --bench power_loss_recovery` (runs: `NODEFENCE_BENCH_RUNS`, default 8,
//! about 40 s each, plus the worst corner; `NODEFENCE_BENCH_PARTITION_RUNS`, default 1, about 2 min). Exits 1
//! when a target is missed. Writes every run, the targets, the floors and the
//! network cut's steps as JSON (`common::results`: `power_loss_recovery.json`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use serde_json::{Value, json};

mod common;

const MEDIAN_TARGET: f64 = 15.0;
const WORST_TARGET: f64 = 18.0;
const RENEW_EVERY: f64 = 10.0;
/// The kubelet's `nodeStatusUpdateFrequency`.
const STATUS_EVERY: f64 = 10.0;
/// First missed renewal (12 s after the last one) + unhealthy_after (60 s) + 20 s.
const PARTITION_TARGET: f64 = 92.0;
/// The earliest a missed renewal can be known after the last one: the renewal
/// interval and the kubelet's 4 % jitter.
const MISSED_RENEWAL_KNOWN: f64 = RENEW_EVERY * 1.04;
/// The CSI detach from the dead node and the attach to the replacement (1 s each).
const DETACH_AND_ATTACH: f64 = 2.0;
/// The replacement's container start once its volume is mounted.
const CONTAINER_START: f64 = 1.0;

/// The floor for a run whose plug is pulled `plug` after a renewal and whose
/// replacement computes its status `status` after the renewals: an ideal agent
/// releases at the first moment the missed renewal can be known, the replacement
/// reports the volume at its next status tick (mounting needs that and the attach),
/// then starts the container. Seconds after the plug.
fn floor(plug: f64, status: f64) -> f64 {
    let release = MISSED_RENEWAL_KNOWN - plug;
    let next_status_tick = (status - MISSED_RENEWAL_KNOWN).rem_euclid(STATUS_EVERY);
    release + next_status_tick.max(DETACH_AND_ATTACH) + CONTAINER_START
}

/// The floor's median and worst over every phase of the plug and of the status loop
/// (a 200 × 200 grid over the two 10 s cycles).
fn floors_over_random_phases() -> (f64, f64) {
    const STEPS: usize = 200;
    let mut all: Vec<f64> = (0..STEPS)
        .flat_map(|p| {
            (0..STEPS).map(move |s| {
                floor(
                    RENEW_EVERY * p as f64 / STEPS as f64,
                    STATUS_EVERY * s as f64 / STEPS as f64,
                )
            })
        })
        .collect();
    all.sort_by(f64::total_cmp);
    (all[all.len() / 2], all[all.len() - 1])
}

/// Runs one demo scenario at time scale 1; its JSON outcome.
fn demo(scenario: &str, extra: &[&str]) -> Value {
    let exe = env!("CARGO_BIN_EXE_nodefence");
    let out = Command::new(exe)
        .args([
            "demo",
            "--speed",
            "1",
            "--scenario",
            scenario,
            "--output",
            "json",
            "--no-color",
        ])
        .args(extra)
        .output()
        .expect("run nodefence demo");
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "demo output is not JSON ({e}); exit {:?}; stderr:\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let outcome = summary["scenarios"][0].clone();
    assert_eq!(outcome["ok"], true, "{scenario}: {outcome}");
    outcome
}

/// The van der Corput sequence in base 2: 0, 1/2, 1/4, 3/4, 1/8, ...
fn van_der_corput(mut i: usize) -> f64 {
    let (mut value, mut unit) = (0.0, 0.5);
    while i > 0 {
        if i & 1 == 1 {
            value += unit;
        }
        i >>= 1;
        unit /= 2.0;
    }
    value
}

fn round_tenth(seconds: f64) -> f64 {
    (seconds * 10.0).round() / 10.0
}

fn millis(seconds: f64) -> String {
    format!("{}ms", (seconds * 1000.0).round() as u64)
}

/// One power-loss run: the plug pulled `plug` after a renewal, the status loops
/// `status` after the renewals; (released, db-0 Running elsewhere) in seconds.
fn power_loss(plug: f64, status: f64) -> (f64, f64) {
    let scenario = demo(
        "power-loss",
        &[
            "--pull-after-renewal",
            &millis(plug),
            "--status-after-lease",
            &millis(status),
        ],
    );
    let rel = scenario["released_after_s"].as_f64().expect("released");
    let pod = scenario["pod_running_after_s"]
        .as_f64()
        .expect("pod running");
    println!(
        "plug pulled {plug:.1}s after a renewal, status computed {status:.2}s after: \
         released +{rel:.1}s, db-0 Running elsewhere +{pod:.1}s"
    );
    (rel, pod)
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is configurable by arguments.
    let runs: usize = std::env::var("NODEFENCE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8)
        .max(1);
    let mut released = Vec::new();
    let mut running = Vec::new();
    let mut latest_release = 0.0f64;
    let mut json_runs = Vec::new();
    for run in 0..runs {
        let plug = RENEW_EVERY * run as f64 / runs as f64;
        let status = STATUS_EVERY * van_der_corput(run);
        let (rel, pod) = power_loss(plug, status);
        if run == 0 {
            latest_release = rel;
        }
        released.push(rel);
        running.push(pod);
        json_runs.push(json!({
            "plug_after_renewal_s": plug,
            "status_after_renewal_s": status,
            "released_s": rel,
            "pod_running_s": pod,
            "floor_s": round_tenth(floor(plug, status)),
            "worst_corner": false,
        }));
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        if v.len() % 2 == 1 {
            v[v.len() / 2]
        } else {
            (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
        }
    };
    let (rel, pod) = (med(&mut released), med(&mut running));
    let (best, sampled_worst) = (running[0], running[running.len() - 1]);
    // The worst corner: the plug right after a renewal, and the replacement's status
    // computed at the release (the plug is pulled at a renewal, so the release comes
    // `latest_release` after one), just before the new pod exists.
    let corner_status = latest_release.rem_euclid(STATUS_EVERY);
    let (corner_released, corner) = power_loss(0.0, corner_status);
    let worst = sampled_worst.max(corner);
    let (median_floor, worst_floor) = floors_over_random_phases();
    json_runs.push(json!({
        "plug_after_renewal_s": 0.0,
        "status_after_renewal_s": corner_status,
        "released_s": corner_released,
        "pod_running_s": corner,
        // The ideal agent's own worst corner: a status tick just missed.
        "floor_s": round_tenth(worst_floor),
        "worst_corner": true,
    }));
    println!(
        "power loss → released: median {rel:.1}s, latest {latest_release:.1}s; → replacement pod \
         Running with its volume: median {pod:.1}s, best {best:.1}s, worst {sampled_worst:.1}s \
         ({runs} runs across both phases), worst corner {corner:.1}s; targets: median ≤ \
         {MEDIAN_TARGET:.0}s, worst ≤ {WORST_TARGET:.0}s"
    );
    let partition_runs: usize = std::env::var("NODEFENCE_BENCH_PARTITION_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let mut partition_worst = 0.0f64;
    let mut json_partitions = Vec::new();
    for run in 0..partition_runs {
        let scenario = demo("network-cut", &[]);
        let rel = scenario["released_after_s"].as_f64().expect("released");
        let pod = scenario["pod_running_after_s"]
            .as_f64()
            .expect("pod running");
        println!(
            "partition run {run}: network cut, machine On: forced off, released +{rel:.1}s, \
             db-0 Running elsewhere +{pod:.1}s (target ≤ {PARTITION_TARGET:.0}s)"
        );
        partition_worst = partition_worst.max(pod);
        json_partitions.push(json!({
            "released_s": rel,
            "pod_running_s": pod,
            "steps": scenario["steps"],
        }));
    }
    common::results::write(
        "power_loss_recovery",
        json!({"runs": runs, "partition_runs": partition_runs, "speed": 1}),
        json!({
            "targets": {
                "median_s": MEDIAN_TARGET,
                "worst_s": WORST_TARGET,
                "partition_s": PARTITION_TARGET,
            },
            "floors": {
                "median_s": round_tenth(median_floor),
                "worst_s": round_tenth(worst_floor),
                "model": "released 10.4 s after the last renewal (interval + 4 % jitter), \
                          then the replacement's next status tick (at least the 2 s of \
                          detach and attach), then 1 s of container start",
            },
            "power_loss": json_runs,
            "network_cut": json_partitions,
        }),
    );
    if pod > MEDIAN_TARGET || worst > WORST_TARGET || partition_worst > PARTITION_TARGET {
        eprintln!("MISSED a target");
        std::process::exit(1);
    }
}
