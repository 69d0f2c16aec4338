//! Cross-check of the KubeVirt stand-in and the driver with Debian's ClusterLabs
//! `fence_kubevirt` (package `fence-agents`, through `python3-kubernetes` and
//! `python3-openshift`'s DynamicClient): the reference agent reads the VMI (and the VM
//! when there is none) with its own client, and switches the VM with virt-api's
//! `start`/`stop`. It must read what nodefence's driver reads, and its commands must
//! land on the VM the driver reads. Where they differ, the difference is the agent's
//! known trap, asserted as such: a VMI in `Failed` is "unknown" (a failure) to the
//! agent and Off to the driver.
//!
//! Without the agent or its Python modules the tests print a "skipped" line, unless
//! `NODEFENCE_REQUIRE_PEERS=1` (CI), which makes their absence a failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::kubevirt::{Infra, VM_NAMESPACE, fast_timing};
use common::policy;
use nodefence::power::confirm::execute;
use nodefence::power::{PowerAction, PowerDriver, PowerState};
use nodefence_mocks::kubevirt::{Faults, RunStrategy, VmBuilder};
use tokio::process::Command;

const UUID_1: &str = "6f4c1a52-9d0e-4b8a-a1c3-5e7f90b1c2d3";

/// The agent, when it and its Python modules are installed; else `None` after the
/// skip line.
fn agent() -> Option<PathBuf> {
    nodefence_mocks::peers::fence_kubevirt()
}

#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    /// Shown in failure messages (through Debug).
    #[allow(dead_code)]
    stderr: String,
}

/// `fence_kubevirt -o ACTION` for VM `vm`, with the fencer's kubeconfig.
async fn fence(agent: &Path, kubeconfig: &Path, vm: &str, action: &str) -> Run {
    let mut cmd = Command::new(agent);
    cmd.args([
        "--kubeconfig",
        &kubeconfig.display().to_string(),
        "--namespace",
        VM_NAMESPACE,
        "--plug",
        vm,
        "--action",
        action,
        // The agent waits for the state; our stand-in is fast.
        "--power-wait",
        "0",
        "--power-timeout",
        "30",
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .kill_on_drop(true);
    for var in nodefence_mocks::PROXY_VARIABLES {
        cmd.env_remove(var);
    }
    let out = tokio::time::timeout(Duration::from_secs(90), cmd.output())
        .await
        .expect("fence_kubevirt finished in time")
        .expect("fence_kubevirt ran");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The agent's reading: "ON", "OFF", or its failure.
fn agent_state(run: &Run) -> Result<&'static str, String> {
    match run.code {
        Some(0) if run.stdout.contains("Status: ON") => Ok("ON"),
        Some(2) if run.stdout.contains("Status: OFF") => Ok("OFF"),
        _ => Err(format!("{run:?}")),
    }
}

async fn wait_driver(d: &dyn PowerDriver, want: PowerState) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let state = d.status().await.unwrap().state;
        if state == want {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{state} != {want}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_and_the_driver_read_the_same_state() {
    let Some(agent) = agent() else { return };
    let infra = Infra::start(fast_timing()).await;
    let kubeconfig = infra.fencer_kubeconfig();
    infra.running_vm("w1", RunStrategy::Always, UUID_1).await;
    let d = infra.driver(&kubeconfig, "w1");
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    let run = fence(&agent, &kubeconfig, "w1", "status").await;
    assert_eq!(agent_state(&run), Ok("ON"));

    // Stopped by the driver: no VMI, the VM Stopped.
    execute(d.as_ref(), PowerAction::Off, &policy())
        .await
        .unwrap();
    let run = fence(&agent, &kubeconfig, "w1", "status").await;
    assert_eq!(agent_state(&run), Ok("OFF"));
    assert_eq!(d.status().await.unwrap().state, PowerState::Off);

    // Started again by the driver.
    execute(d.as_ref(), PowerAction::On, &policy())
        .await
        .unwrap();
    infra.wait_running("w1").await;
    let run = fence(&agent, &kubeconfig, "w1", "status").await;
    assert_eq!(agent_state(&run), Ok("ON"));

    // A VM that does not exist: both fail, neither says off.
    let run = fence(&agent, &kubeconfig, "nope", "status").await;
    assert!(agent_state(&run).is_err(), "{run:?}");
    assert!(infra.driver(&kubeconfig, "nope").status().await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_commands_land_on_the_vm_the_driver_reads() {
    let Some(agent) = agent() else { return };
    let infra = Infra::start(fast_timing()).await;
    let kubeconfig = infra.fencer_kubeconfig();
    // A short grace period: the agent's stop is graceful.
    infra
        .create(
            VmBuilder::new(VM_NAMESPACE, "w1")
                .run_strategy(RunStrategy::Always)
                .firmware_uuid(UUID_1)
                .termination_grace_period(5),
        )
        .await;
    infra
        .create(
            VmBuilder::new(VM_NAMESPACE, "w2")
                .run_strategy(RunStrategy::Always)
                .firmware_uuid(UUID_1),
        )
        .await;
    infra.wait_running("w1").await;
    infra.wait_running("w2").await;
    let d = infra.driver(&kubeconfig, "w1");

    let run = fence(&agent, &kubeconfig, "w1", "off").await;
    assert_eq!(run.code, Some(0), "{run:?}");
    wait_driver(d.as_ref(), PowerState::Off).await;
    // virt-api's stop under Always: KubeVirt sets Halted itself.
    assert_eq!(infra.run_strategy("w1").await, "Halted");
    assert!(infra.running("w2"), "only w1");

    let run = fence(&agent, &kubeconfig, "w1", "on").await;
    assert_eq!(run.code, Some(0), "{run:?}");
    wait_driver(d.as_ref(), PowerState::On).await;
    assert_eq!(infra.run_strategy("w1").await, "Always");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_vmi_is_off_to_the_driver_and_a_failure_to_the_agent() {
    let Some(agent) = agent() else { return };
    let infra = Infra::start(fast_timing()).await;
    infra.kv.set_faults(Faults {
        failed_vmi_stuck: true,
        ..Faults::default()
    });
    let kubeconfig = infra.fencer_kubeconfig();
    infra.running_vm("w1", RunStrategy::Always, UUID_1).await;
    assert!(infra.kv.lose_host(VM_NAMESPACE, "w1"));
    let d = infra.driver(&kubeconfig, "w1");
    wait_driver(d.as_ref(), PowerState::Off).await;
    assert_eq!(infra.vmi("w1").await.unwrap()["status"]["phase"], "Failed");
    // The agent's trap: a Failed VMI is "unknown", and its status fails.
    let run = fence(&agent, &kubeconfig, "w1", "status").await;
    assert!(agent_state(&run).is_err(), "{run:?}");
}
