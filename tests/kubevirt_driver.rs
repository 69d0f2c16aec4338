//! The KubeVirt driver against the KubeVirt stand-in (fake-kube over HTTPS, virt-api's
//! subresources behind the aggregated-API hook, virt-controller's run strategies),
//! as nodefence's ServiceAccount with exactly the Role `deploy/kubevirt-infra` ships:
//! status, off, on, cycle under each run strategy; a stop that sticks where a bare
//! forced stop is undone; a lost host; a VMI stuck in Failed; identity from the
//! firmware UUID; every error kind named and never Off.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::kubevirt::{FENCER, Infra, VM_NAMESPACE, fast_timing};
use common::policy;
use nodefence::identity::MachineIdentity;
use nodefence::power::confirm::{ActionError, execute};
use nodefence::power::kubevirt::model::SAVED_RUN_STRATEGY;
use nodefence::power::{PowerAction, PowerDriver, PowerErrorKind, PowerState};
use nodefence_mocks::kubevirt::{Faults, RunStrategy, VmBuilder, legacy_firmware_uuid};
use serde_json::{Value, json};

const UUID_1: &str = "6f4c1a52-9d0e-4b8a-a1c3-5e7f90b1c2d3";

fn annotation(vm: &Value) -> Option<String> {
    vm["metadata"]["annotations"][SAVED_RUN_STRATEGY]
        .as_str()
        .map(str::to_string)
}

/// Reads `vm` for `d`, asserting it stays Off (and its domain down) throughout.
async fn stays_off(infra: &Infra, d: &dyn PowerDriver, vm: &str, d_for: Duration) {
    let until = tokio::time::Instant::now() + d_for;
    while tokio::time::Instant::now() < until {
        assert_eq!(d.status().await.unwrap().state, PowerState::Off, "{vm}");
        assert!(!infra.running(vm), "{vm} runs again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_sticks_and_on_restores_the_run_strategy_under_each() {
    let infra = Infra::start(fast_timing()).await;
    let kubeconfig = infra.fencer_kubeconfig();
    for strategy in [
        RunStrategy::Always,
        RunStrategy::RerunOnFailure,
        RunStrategy::Manual,
    ] {
        let name = format!("w-{}", strategy.as_str().to_ascii_lowercase());
        // The default grace period: 180 s (18 s here), far longer than a forced stop.
        infra
            .create(
                VmBuilder::new(VM_NAMESPACE, &name)
                    .run_strategy(strategy)
                    .firmware_uuid(UUID_1),
            )
            .await;
        let d = infra.driver(&kubeconfig, &name);
        assert_eq!(d.driver_name(), "kubevirt");
        if strategy == RunStrategy::Manual {
            // A Manual VM starts only on request: power-on is that request.
            let on = execute(d.as_ref(), PowerAction::On, &policy())
                .await
                .unwrap();
            assert_eq!(on.commands_sent, vec![PowerAction::On]);
        }
        infra.wait_running(&name).await;
        assert_eq!(d.status().await.unwrap().state, PowerState::On, "{name}");
        assert_eq!(
            d.machine_identity().await.unwrap(),
            MachineIdentity::Uuid(UUID_1.into())
        );

        let started = tokio::time::Instant::now();
        let off = execute(d.as_ref(), PowerAction::Off, &policy())
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(off.commands_sent, vec![PowerAction::Off]);
        assert!(
            started.elapsed() < Duration::from_secs(9),
            "{name}: a forced stop, not the 18 s grace period: {:?}",
            started.elapsed()
        );
        let vm = infra.vm(&name).await;
        assert_eq!(vm["spec"]["runStrategy"], "Halted", "{name}");
        assert_eq!(annotation(&vm).as_deref(), Some(strategy.as_str()));
        assert_eq!(vm["status"]["printableStatus"], "Stopped");
        // KubeVirt does not undo it.
        stays_off(&infra, d.as_ref(), &name, Duration::from_secs(2)).await;

        let on = execute(d.as_ref(), PowerAction::On, &policy())
            .await
            .unwrap();
        assert_eq!(on.commands_sent, vec![PowerAction::On]);
        infra.wait_running(&name).await;
        let vm = infra.vm(&name).await;
        assert_eq!(vm["spec"]["runStrategy"], strategy.as_str(), "{name}");
        assert_eq!(annotation(&vm), None, "{name}: the record is dropped");

        let cycle = execute(d.as_ref(), PowerAction::Reboot, &policy())
            .await
            .unwrap();
        assert_eq!(cycle.commands_sent, vec![PowerAction::Off, PowerAction::On]);
        infra.wait_running(&name).await;
        assert_eq!(infra.run_strategy(&name).await, strategy.as_str());
    }
    // Exactly the shipped Role, never refused (a 404 is a VMI that is not there),
    // and only these writes.
    let requests = infra.kube.requests();
    let mine: Vec<_> = requests
        .iter()
        .filter(|r| r.user.as_deref().is_some_and(|u| u.ends_with(FENCER)))
        .collect();
    assert!(!mine.is_empty());
    let refused: Vec<_> = mine
        .iter()
        .filter(|r| r.status >= 400)
        .filter(|r| !(r.status == 404 && r.path_and_query.contains("/virtualmachineinstances/")))
        .collect();
    assert!(refused.is_empty(), "{refused:?}");
    for (method, path) in infra.writes_by(FENCER) {
        let path = path.split('?').next().unwrap_or_default().to_string();
        let ok = (method == "PATCH"
            && path.contains("/apis/kubevirt.io/v1/namespaces/guests/virtualmachines/"))
            || (method == "PUT"
                && path.contains(
                    "/apis/subresources.kubevirt.io/v1/namespaces/guests/virtualmachines/",
                )
                && (path.ends_with("/stop") || path.ends_with("/start")));
        assert!(ok, "{method} {path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_forced_stop_is_undone_under_rerun_on_failure_and_the_drivers_is_not() {
    let infra = Infra::start(fast_timing()).await;
    infra.kv.set_faults(Faults {
        forced_kill_fails: true,
        ..Faults::default()
    });
    for name in ["bare", "driven"] {
        infra
            .create(
                VmBuilder::new(VM_NAMESPACE, name)
                    .run_strategy(RunStrategy::RerunOnFailure)
                    .firmware_uuid(UUID_1),
            )
            .await;
        infra.wait_running(name).await;
    }
    // What a client that only asks virt-api for a forced stop gets: the VMI is
    // killed, ends Failed, and KubeVirt starts the VM again.
    let first_uid = infra.vmi("bare").await.unwrap()["metadata"]["uid"].clone();
    let request = http::Request::put(format!(
        "/apis/subresources.kubevirt.io/v1/namespaces/{VM_NAMESPACE}/virtualmachines/bare/stop"
    ))
    .header("content-type", "application/json")
    .body(serde_json::to_vec(&json!({"gracePeriod": 0})).unwrap())
    .unwrap();
    infra.client.request_text(request).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let vmi = infra.vmi("bare").await;
        let restarted = vmi.as_ref().is_some_and(|v| {
            v["metadata"]["uid"] != first_uid && v["status"]["phase"] == "Running"
        });
        if restarted {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "KubeVirt should have restarted the VM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(infra.run_strategy("bare").await, "RerunOnFailure");

    // The driver holds it Halted first: nothing starts it again.
    let d = infra.driver(&infra.fencer_kubeconfig(), "driven");
    execute(d.as_ref(), PowerAction::Off, &policy())
        .await
        .unwrap();
    stays_off(&infra, d.as_ref(), "driven", Duration::from_secs(3)).await;
    assert_eq!(infra.run_strategy("driven").await, "Halted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_host_reads_off_without_a_command_and_a_stuck_failed_vmi_too() {
    let infra = Infra::start(fast_timing()).await;
    let kubeconfig = infra.fencer_kubeconfig();
    infra
        .create(
            VmBuilder::new(VM_NAMESPACE, "manual")
                .run_strategy(RunStrategy::Manual)
                .firmware_uuid(UUID_1),
        )
        .await;
    let d = infra.driver(&kubeconfig, "manual");
    execute(d.as_ref(), PowerAction::On, &policy())
        .await
        .unwrap();
    infra.wait_running("manual").await;
    infra.kube.clear_request_log();
    assert!(infra.kv.lose_host(VM_NAMESPACE, "manual"));
    // The domain is gone at once, but until KubeVirt says so it is not Off.
    assert_ne!(d.status().await.unwrap().state, PowerState::Off);
    let off = execute(d.as_ref(), PowerAction::Off, &policy()).await;
    // Either it read Off at once (no command) or the command met a final VMI.
    let off = off.unwrap();
    let vmi = infra.vmi("manual").await;
    assert!(
        vmi.is_none() || vmi.as_ref().unwrap()["status"]["phase"] == "Failed",
        "{vmi:?}"
    );
    assert!(off.off.is_some());
    assert_eq!(
        d.machine_identity().await.unwrap(),
        MachineIdentity::Uuid(UUID_1.into()),
        "the firmware UUID of the VMI (or the template) whose reading it is"
    );

    // A host lost under Always, whose Failed VMI never finishes deleting: KubeVirt
    // cannot start it again, says Stopped, and the driver reads Off.
    infra.kv.set_faults(Faults {
        failed_vmi_stuck: true,
        ..Faults::default()
    });
    infra.running_vm("stuck", RunStrategy::Always, UUID_1).await;
    let d = infra.driver(&kubeconfig, "stuck");
    infra.kube.clear_request_log();
    assert!(infra.kv.lose_host(VM_NAMESPACE, "stuck"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while d.status().await.unwrap().state != PowerState::Off {
        assert!(tokio::time::Instant::now() < deadline, "never Off");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        infra.vmi("stuck").await.unwrap()["status"]["phase"],
        "Failed"
    );
    assert_eq!(infra.printable_status("stuck").await, "Stopped");
    let off = execute(d.as_ref(), PowerAction::Off, &policy())
        .await
        .unwrap();
    assert!(off.commands_sent.is_empty(), "already off: no command");
    assert!(
        infra.writes_by(FENCER).is_empty(),
        "{:?}",
        infra.writes_by(FENCER)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_is_the_firmware_uuid_kubevirt_persists() {
    let infra = Infra::start(fast_timing()).await;
    // No firmware UUID written: KubeVirt's firmware controller persists the legacy
    // one (UUIDv5 of the name) into the template, and every VMI gets it.
    infra
        .create(VmBuilder::new(VM_NAMESPACE, "plain").run_strategy(RunStrategy::Always))
        .await;
    infra.wait_running("plain").await;
    let d = infra.driver(&infra.fencer_kubeconfig(), "plain");
    d.status().await.unwrap();
    assert_eq!(
        d.machine_identity().await.unwrap(),
        MachineIdentity::Uuid(legacy_firmware_uuid("plain"))
    );
    // Off: no VMI left, the template's UUID answers.
    execute(d.as_ref(), PowerAction::Off, &policy())
        .await
        .unwrap();
    assert!(infra.vmi("plain").await.is_none());
    d.status().await.unwrap();
    assert_eq!(
        d.machine_identity().await.unwrap(),
        MachineIdentity::Uuid(legacy_firmware_uuid("plain"))
    );
}

fn kind_of(e: &ActionError) -> PowerErrorKind {
    match e {
        ActionError::Query(e) | ActionError::Command { error: e, .. } => e.kind,
        other => panic!("not a query or command error: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failure_is_named_and_never_off() {
    let get_only = vec![
        json!({"kind": "Role", "metadata": {"name": "reader", "namespace": VM_NAMESPACE}, "rules": [
            {"apiGroups": ["kubevirt.io"], "resources": ["virtualmachines", "virtualmachineinstances"],
             "verbs": ["get"]}]}),
        json!({"kind": "RoleBinding", "metadata": {"name": "reader", "namespace": VM_NAMESPACE},
               "roleRef": {"kind": "Role", "name": "reader"},
               "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": VM_NAMESPACE}]}),
    ];
    let infra = Infra::start_with(fast_timing(), &[("reader-token", "reader", get_only)]).await;
    infra.running_vm("w1", RunStrategy::Always, UUID_1).await;
    let fencer = infra.fencer_kubeconfig();

    // A VM that does not exist: a configuration error, never Off.
    let e = infra.driver(&fencer, "nope").status().await.unwrap_err();
    assert_eq!(e.kind, PowerErrorKind::Config, "{e}");
    assert!(
        e.message.contains("guests/nope") && e.message.contains("does not exist"),
        "{e}"
    );

    // May read, may not patch: a privilege error naming the Role to bind.
    let reader = infra.driver(&infra.kubeconfig_for("reader-token"), "w1");
    assert_eq!(reader.status().await.unwrap().state, PowerState::On);
    let e = execute(reader.as_ref(), PowerAction::Off, &policy())
        .await
        .unwrap_err();
    assert_eq!(kind_of(&e), PowerErrorKind::Privilege, "{e}");
    assert!(e.to_string().contains("deploy/kubevirt-infra"), "{e}");
    assert_eq!(infra.run_strategy("w1").await, "Always", "nothing changed");

    // A token the infrastructure cluster does not know.
    let stranger = infra.driver(&infra.kubeconfig_for("forged-token"), "w1");
    let e = stranger.status().await.unwrap_err();
    assert_eq!(e.kind, PowerErrorKind::Auth, "{e}");
    assert!(!e.message.contains("forged-token"), "{e}");

    // virt-api down (its APIService has no ready endpoint): unreachable.
    infra.api.set_down(true);
    let d = infra.driver(&fencer, "w1");
    let e = execute(d.as_ref(), PowerAction::Off, &policy())
        .await
        .unwrap_err();
    assert_eq!(kind_of(&e), PowerErrorKind::Unreachable, "{e}");
    infra.api.set_down(false);
    // (The VM was set Halted before the stop failed: KubeVirt stops it gracefully.)

    // An API server whose certificate the kubeconfig's CA did not sign.
    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let text = std::fs::read_to_string(&fencer).unwrap();
    let ca_line = text
        .lines()
        .find(|l| l.contains("certificate-authority-data"))
        .unwrap()
        .to_string();
    use base64::Engine as _;
    let forged = text.replace(
        &ca_line,
        &format!(
            "    certificate-authority-data: \"{}\"",
            base64::engine::general_purpose::STANDARD.encode(other.cert.pem())
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wrong-ca.kubeconfig");
    std::fs::write(&path, forged).unwrap();
    let e = infra.driver(&path, "w1").status().await.unwrap_err();
    assert_eq!(e.kind, PowerErrorKind::Tls, "{e}");

    // Nobody listening.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let base = infra.kube.base_url();
    let gone = text.replace(&base, &format!("https://127.0.0.1:{port}"));
    let path = dir.path().join("gone.kubeconfig");
    std::fs::write(&path, gone).unwrap();
    let e = infra.driver(&path, "w1").status().await.unwrap_err();
    assert_eq!(e.kind, PowerErrorKind::Unreachable, "{e}");
}

/// `nodefence fence` by hand when guest node worker-a's entry names another node's
/// VirtualMachine (vm-b): its VMI's firmware UUID is not Node worker-a's systemUUID,
/// so nodefence writes nothing to the infrastructure cluster, whatever the action;
/// vm-b keeps running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_refuses_an_entry_naming_another_nodes_vm() {
    const UUID_B: &str = "0a7d3e11-5b2c-4f6e-9d8a-7c1b2e3f4a5b";
    let infra = Infra::start(fast_timing()).await;
    infra.running_vm("vm-a", RunStrategy::Always, UUID_1).await;
    infra.running_vm("vm-b", RunStrategy::Always, UUID_B).await;
    let dir = tempfile::tempdir().unwrap();
    let config = crate::cli_common::write_agent_config(dir.path(), 2, "100ms", "10s");
    std::fs::write(
        dir.path().join("inventory.toml"),
        format!(
            "[nodes.worker-a]\ndriver = \"kubevirt\"\nkubeconfig = \"{}\"\nnamespace = \
             \"{VM_NAMESPACE}\"\nvm = \"vm-b\"\n",
            infra.fencer_kubeconfig().display()
        ),
    )
    .unwrap();
    // The guest cluster: its own API server, where worker-a's Node lives.
    let (guest, kubeconfig) =
        crate::cli_common::cluster_with_nodes(dir.path(), &[("worker-a", UUID_1, None)]).await;
    crate::cli_common::assert_fence_refuses_a_mismatch(
        &config,
        "worker-a",
        &kubeconfig,
        UUID_B,
        UUID_1,
        &[],
    )
    .await;
    assert_eq!(infra.writes_by(FENCER), vec![], "nothing written");
    assert!(infra.running("vm-b"));
    assert_eq!(infra.run_strategy("vm-b").await, "Always");
    guest.shutdown().await;
}
