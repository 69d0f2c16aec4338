//! What a release on a watchdog may rest on, end to end (nodefence's listener, the
//! real `companion::run`): only beats of the boot the Node reports now, from the
//! companion that was still beating when the node was last seen alive, of a session
//! that reported the watchdog itself, and of a machine that is no virtual one unless
//! the operator opted it in (issue 52, items 3 and 7).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use nodefence::cluster::leader::Leadership;
use nodefence::companion::WatchdogChoice;
use nodefence::companion::machine::MachineKind;
use nodefence::engine::WatchdogContext;
use nodefence::heartbeat::hello;
use nodefence::watchdog::device::RecordingWatchdog;
use nodefence::watchdog::release::Verdict;

use crate::heartbeat::{eventually, options, spawn, world};

const BOOT: &str = "0c5a3b1e-6f1d-4b7e-9a2c-1d3e5f7a9b0c";
const NEXT_BOOT: &str = "7d1f2a9c-3b4e-4c5d-8e6f-0a1b2c3d4e5f";

fn context(boot: &str) -> WatchdogContext {
    WatchdogContext {
        boot_id: Some(boot.into()),
        on_virtual_machine: None,
    }
}

fn refusal(verdict: Verdict) -> String {
    match verdict {
        Verdict::Refuse(why) => why,
        other => panic!("not refused: {other:?}"),
    }
}

/// A companion that crashed, its watchdog reset the machine, the machine booted again
/// with no companion (a crash loop, a node selector change): months later the node is
/// partitioned. The Node reports the new boot; the last beats were of the old one:
/// nothing is released on them. Nor on a new session's before it reported a watchdog
/// of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watchdog_of_another_boot_or_of_an_earlier_session_proves_nothing() {
    let (kube, hb, pin) = world("worker-1", hello::AUDIENCE, Leadership::always()).await;
    hb.began_leading();
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "token-worker-1\n").unwrap();
    let dog = RecordingWatchdog::new("iTCO_wdt", Duration::from_secs(10), false);
    let (status, _stop, run) = spawn(options(&hb, pin, &token, dog.clone()));
    eventually("armed", || status.lock().unwrap().armed.is_some()).await;
    eventually("its beats say so", || hb.armed("worker-1").is_some()).await;
    // Its hello and its beats name its boot.
    let boot = nodefence::watchdog::wire::BootId::of(BOOT);
    let said = hb.with_table(|t| t.companion("worker-1").map(|c| (c.hello_boot, c.boot)));
    assert_eq!(said, Some((Some(boot), Some(boot))));
    hb.mark("worker-1");
    hb.mark_written("worker-1");
    // This boot's, beating when the kubelet last renewed: the rule applies (and waits).
    assert!(hb.watchdog_usable("worker-1", &context(BOOT)).is_ok());
    assert!(matches!(
        hb.watchdog_verdict("worker-1", &context(BOOT)),
        Verdict::Wait { .. }
    ));
    // The companion crashes: its last beats stand in the table.
    run.abort();
    let _ = run.await;
    // The machine booted again since (the Node says so): not this boot's watchdog.
    let why = refusal(hb.watchdog_verdict("worker-1", &context(NEXT_BOOT)));
    assert!(
        why.contains("not this boot's") && why.contains(NEXT_BOOT),
        "{why}"
    );
    // The same boot: its watchdog still counts (a crash closes without the magic
    // character), whenever the companion fell silent.
    assert!(matches!(
        hb.watchdog_verdict("worker-1", &context(BOOT)),
        Verdict::Wait { .. }
    ));
    // No boot on the Node: nothing to compare with.
    let mut no_boot = context(BOOT);
    no_boot.boot_id = None;
    assert!(refusal(hb.watchdog_verdict("worker-1", &no_boot)).contains("no boot ID"));
    // A successor without a watchdog says hello: the new session inherits nothing.
    let mut successor = options(&hb, pin, &token, dog);
    successor.watchdog = WatchdogChoice::None;
    let (status, stop, run) = spawn(successor);
    eventually("the successor beats", || {
        status.lock().unwrap().acknowledged >= 2
    })
    .await;
    let why = hb.watchdog_usable("worker-1", &context(BOOT)).unwrap_err();
    assert!(why.contains("no hardware watchdog"), "{why}");
    let _ = stop.send(());
    run.await.unwrap().unwrap();
    kube.shutdown().await;
}

/// A virtual machine's watchdog pauses with it: the level refuses it, saying how to
/// opt the node in, unless the policy does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_virtual_machines_watchdog_counts_only_where_the_operator_opted_it_in() {
    let (kube, hb, pin) = world("worker-1", hello::AUDIENCE, Leadership::always()).await;
    hb.began_leading();
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "token-worker-1\n").unwrap();
    let dog = RecordingWatchdog::new("i6300esb", Duration::from_secs(10), false);
    let mut opts = options(&hb, pin, &token, dog);
    opts.machine = MachineKind::Virtual("the CPU's hypervisor flag".into());
    let (status, stop, run) = spawn(opts);
    eventually("armed", || status.lock().unwrap().armed.is_some()).await;
    eventually("its beats say so", || hb.armed("worker-1").is_some()).await;
    let why = hb.watchdog_usable("worker-1", &context(BOOT)).unwrap_err();
    assert!(
        why.contains("virtual machine") && why.contains("watchdog_fencing_on_vm"),
        "{why}"
    );
    let mut opted_in = context(BOOT);
    opted_in.on_virtual_machine = Some("KubeVirt without live migration".into());
    assert!(hb.watchdog_usable("worker-1", &opted_in).is_ok());
    let _ = stop.send(());
    run.await.unwrap().unwrap();
    kube.shutdown().await;
}
