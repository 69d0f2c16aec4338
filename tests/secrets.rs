//! BMC passwords kept in Kubernetes Secrets (`password_secret`), against the fake
//! API server and the mock BMC: the loader leaves them pending (no driver can be built
//! from one), `resolve_secrets` reads each distinct Secret once and the Redfish driver
//! then logs in with the Secret's password; every problem is reported at once, naming
//! node, Secret and key, never the value; the daemon and `fence` read them too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use nodefence::config::{Config, SecretProblemKind, SecretSource, load_with_env, resolve_secrets};
use nodefence::power::registry::DriverFactory;
use nodefence::power::{PowerErrorKind, PowerState};
use nodefence_mocks::kube::{FakeKube, FakeKubeHandle};
use nodefence_mocks::redfish::{MockPower, MockRedfish, MockRedfishHandle, Profile, SystemSpec};
use secrecy::ExposeSecret;

const USER: &str = "fence";
/// The BMC's password, kept only in the Secret.
const PASSWORD: &str = "k8s-secret-pw-6f1c";
const NS: &str = "nodefence";

async fn kube() -> (FakeKubeHandle, Client) {
    nodefence::tls::install_crypto_provider();
    let kube = FakeKube::builder().start().await.expect("fake-kube starts");
    let kubeconfig = Kubeconfig::from_yaml(&kube.kubeconfig_yaml()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    let client = Client::try_from(config).unwrap();
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": NS}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    (kube, client)
}

async fn bmc() -> MockRedfishHandle {
    MockRedfish::builder()
        .profile(Profile::MultiSystem)
        .systems((1..=4).map(|i| SystemSpec::new(format!("Blade{i}")).power(MockPower::On)))
        .credentials(USER, PASSWORD)
        .start()
        .await
        .unwrap()
}

async fn create_secret(client: &Client, ns: &str, name: &str, data: &[(&str, &str)]) {
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..ObjectMeta::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// `nodefence.toml` (fast confirmation) and `inventory.toml` in a temporary directory.
fn write_config(dir: &Path, inventory: &str) -> PathBuf {
    std::fs::write(
        dir.join("nodefence.toml"),
        "inventory = \"inventory.toml\"\n[power]\nconfirm_readings = 2\n\
         confirm_interval = \"50ms\"\nconfirm_timeout = \"10s\"\n",
    )
    .unwrap();
    std::fs::write(dir.join("inventory.toml"), inventory).unwrap();
    dir.join("nodefence.toml")
}

fn load(path: &Path) -> Config {
    load_with_env(path, &|_| None).unwrap_or_else(|e| panic!("{e}"))
}

/// A node on the mock BMC's `Blade<i>`, with extra settings.
fn node(name: &str, blade: usize, extra: &str) -> String {
    format!("[nodes.{name}]\nsystem_id = \"Blade{blade}\"\n{extra}\n")
}

fn defaults(bmc: &MockRedfishHandle) -> String {
    format!(
        "[defaults]\ndriver = \"redfish\"\nendpoint = \"{}\"\nusername = \"{USER}\"\n\
         connect_timeout = \"2s\"\nrequest_timeout = \"2s\"\noperation_timeout = \"6s\"\n",
        bmc.base_url()
    )
}

/// GETs of Secrets the fake API server received: (path, status).
fn secret_gets(kube: &FakeKubeHandle) -> Vec<(String, u16)> {
    kube.request_log()
        .into_iter()
        .filter(|(method, path, _)| method == "GET" && path.contains("/secrets/"))
        .map(|(_, path, status)| (path, status))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_created_after_loading_is_read_once_and_the_driver_logs_in_with_it() {
    let (kube, client) = kube().await;
    let bmc = bmc().await;
    let dir = tempfile::tempdir().unwrap();
    let inventory = format!(
        "{}password_secret = \"bmc-credentials\"\n{}{}",
        defaults(&bmc),
        node("worker-1", 1, ""),
        node("worker-2", 2, ""),
    );
    let mut config = load(&write_config(dir.path(), &inventory));

    // Loaded without cluster access: pending, and no driver can be built from it.
    let factory = DriverFactory::new(4);
    for target in config.inventory.nodes.values() {
        assert!(target.credential().unwrap().is_pending());
        let err = factory.driver(target).err().expect("refused while pending");
        assert_eq!(err.kind, PowerErrorKind::Config);
        for part in [
            format!("node {}", target.name),
            "Secret bmc-credentials".to_string(),
            "cluster access".to_string(),
        ] {
            assert!(
                err.message.contains(&part),
                "{part:?} not in {}",
                err.message
            );
        }
    }
    assert!(bmc.request_log().is_empty(), "nothing was sent to the BMC");

    // The Secret appears after the file was loaded: it is read when resolving.
    create_secret(
        &client,
        NS,
        "bmc-credentials",
        &[("password", &format!("{PASSWORD}\n"))],
    )
    .await;
    kube.clear_request_log();
    resolve_secrets(&mut config, &client, NS).await.unwrap();
    assert_eq!(
        secret_gets(&kube),
        [(
            "/api/v1/namespaces/nodefence/secrets/bmc-credentials".to_string(),
            200
        )],
        "two nodes, one Secret: one GET"
    );

    for target in config.inventory.nodes.values() {
        let credential = target.credential().unwrap();
        assert!(!credential.is_pending());
        assert_eq!(credential.username, USER);
        assert_eq!(
            credential.password.expose_secret(),
            PASSWORD,
            "one trailing newline dropped"
        );
        assert_eq!(
            credential.source.to_string(),
            "Kubernetes Secret nodefence/bmc-credentials, key \"password\""
        );
        let driver = factory.driver(target).unwrap();
        let reading = driver
            .status()
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", target.name));
        assert_eq!(reading.state, PowerState::On);
        driver.close().await;
    }
    assert!(!format!("{config:?}").contains(PASSWORD));
    // Resolving again reads nothing: there is nothing pending.
    kube.clear_request_log();
    resolve_secrets(&mut config, &client, NS).await.unwrap();
    assert!(secret_gets(&kube).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_really_comes_from_the_secret_and_the_username_may_too() {
    let (_kube, client) = kube().await;
    let bmc = bmc().await;
    create_secret(&client, NS, "right", &[("pw", PASSWORD), ("user", USER)]).await;
    create_secret(
        &client,
        "default",
        "wrong",
        &[("password", "not-the-password")],
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let inventory = format!(
        "{}{}{}",
        defaults(&bmc).replace(&format!("username = \"{USER}\"\n"), ""),
        node(
            "good",
            1,
            "password_secret = \"nodefence/right\"\npassword_secret_key = \"pw\"\n\
             username_secret_key = \"user\""
        ),
        node(
            "bad",
            2,
            "password_secret = \"default/wrong\"\nusername = \"fence\""
        ),
    );
    let mut config = load(&write_config(dir.path(), &inventory));
    resolve_secrets(&mut config, &client, NS).await.unwrap();
    let factory = DriverFactory::new(4);
    let good = &config.inventory.nodes["good"];
    assert_eq!(good.credential().unwrap().username, USER);
    let driver = factory.driver(good).unwrap();
    assert_eq!(driver.status().await.unwrap().state, PowerState::On);
    let bad = factory.driver(&config.inventory.nodes["bad"]).unwrap();
    let err = bad
        .status()
        .await
        .expect_err("the BMC rejects another password");
    assert_eq!(err.kind, PowerErrorKind::Auth);
    assert!(
        err.message.contains("Secret default/wrong"),
        "{}",
        err.message
    );
    assert!(!err.message.contains("not-the-password"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_problem_names_node_secret_and_key_and_never_the_value() {
    let (kube, client) = kube().await;
    let bmc = bmc().await;
    create_secret(
        &client,
        NS,
        "bmc-credentials",
        &[("password", PASSWORD), ("other", PASSWORD)],
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let inventory = format!(
        "{}{}{}{}{}",
        defaults(&bmc),
        node("missing", 1, "password_secret = \"no-such-secret\""),
        node(
            "nokey",
            2,
            "password_secret = \"nodefence/bmc-credentials\"\npassword_secret_key = \"bmc-password\""
        ),
        // The Secret exists, but in nodefence's namespace, not in `default`.
        node(
            "elsewhere",
            3,
            "password_secret = \"default/bmc-credentials\""
        ),
        node("fine", 4, "password_secret = \"bmc-credentials\""),
    );
    let mut config = load(&write_config(dir.path(), &inventory));
    kube.clear_request_log();
    let err = resolve_secrets(&mut config, &client, NS)
        .await
        .expect_err("three nodes cannot get their password");

    // One GET per distinct Secret: "fine" and "nokey" share one.
    let mut gets = secret_gets(&kube);
    gets.sort();
    assert_eq!(
        gets,
        [
            (
                "/api/v1/namespaces/default/secrets/bmc-credentials".to_string(),
                404
            ),
            (
                "/api/v1/namespaces/nodefence/secrets/bmc-credentials".to_string(),
                200
            ),
            (
                "/api/v1/namespaces/nodefence/secrets/no-such-secret".to_string(),
                404
            ),
        ]
    );

    assert_eq!(err.problems.len(), 3, "{err}");
    let by_node = |n: &str| {
        err.problems
            .iter()
            .find(|p| p.nodes == [n.to_string()])
            .unwrap_or_else(|| panic!("no problem for {n}: {err}"))
    };
    let missing = by_node("missing");
    assert_eq!(missing.kind, SecretProblemKind::NotFound);
    assert_eq!(
        (missing.namespace.as_str(), missing.name.as_str()),
        (NS, "no-such-secret")
    );
    let nokey = by_node("nokey");
    assert_eq!(nokey.kind, SecretProblemKind::KeyMissing);
    assert_eq!(nokey.key.as_deref(), Some("bmc-password"));
    assert!(
        nokey.help.as_deref().unwrap().contains("other, password"),
        "{nokey}"
    );
    let elsewhere = by_node("elsewhere");
    assert_eq!(elsewhere.kind, SecretProblemKind::NotFound);
    assert_eq!(elsewhere.namespace, "default");
    assert!(!err.is_access());

    let text = err.to_string();
    for expected in [
        "node \"missing\": Secret nodefence/no-such-secret does not exist",
        "node \"nokey\": Secret nodefence/bmc-credentials has no key \"bmc-password\" (password_secret_key)",
        "node \"elsewhere\": Secret default/bmc-credentials does not exist",
        "inventory.toml:",
        "help: create it, e.g. kubectl -n nodefence create secret generic no-such-secret",
    ] {
        assert!(text.contains(expected), "{expected:?} not in:\n{text}");
    }
    let everything = format!("{err}\n{err:?}\n{config:?}");
    assert!(
        !everything.contains(PASSWORD),
        "the password leaked:\n{everything}"
    );

    // The others are filled; the broken ones stay pending and get no driver.
    assert!(
        !config.inventory.nodes["fine"]
            .credential()
            .unwrap()
            .is_pending()
    );
    assert!(matches!(
        config.inventory.nodes["fine"].credential().unwrap().source,
        SecretSource::Secret(_)
    ));
    let factory = DriverFactory::new(4);
    for n in ["missing", "nokey", "elsewhere"] {
        assert!(config.inventory.nodes[n].pending_secret().is_some());
        assert!(factory.driver(&config.inventory.nodes[n]).is_err());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_refuses_to_start_on_a_missing_secret() {
    let (_kube, client) = kube().await;
    let bmc = bmc().await;
    let dir = tempfile::tempdir().unwrap();
    let inventory = format!(
        "{}password_secret = \"absent\"\n{}",
        defaults(&bmc),
        node("worker-1", 1, "")
    );
    let config = load(&write_config(dir.path(), &inventory));
    let options = nodefence::daemon::DaemonOptions {
        dry_run: true,
        config_check: None,
        companions: None,
        ..daemon_options()
    };
    let result = tokio::time::timeout(
        Duration::from_secs(20),
        nodefence::daemon::run(config, client, options, std::future::pending()),
    )
    .await
    .expect("returns at once");
    let err = format!("{:#}", result.expect_err("refuses to start"));
    assert!(err.contains("refusing to start"), "{err}");
    assert!(
        err.contains("node \"worker-1\": Secret nodefence/absent does not exist"),
        "{err}"
    );
    assert!(bmc.request_log().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_reads_the_secret_through_the_kubeconfig_and_refuses_without_one() {
    let (kube, client) = kube().await;
    let bmc = bmc().await;
    create_secret(&client, NS, "bmc-credentials", &[("password", PASSWORD)]).await;
    let dir = tempfile::tempdir().unwrap();
    let inventory = format!(
        "{}password_secret = \"bmc-credentials\"\n{}{}",
        defaults(&bmc),
        node("worker-1", 1, ""),
        // Another node whose Secret is broken must not stop fencing worker-1.
        node("worker-2", 2, "password_secret = \"broken\""),
    );
    let config_path = write_config(dir.path(), &inventory);
    let kubeconfig = dir.path().join("kubeconfig");
    kube.write_kubeconfig(&kubeconfig).unwrap();
    // worker-1's Node, whose systemUUID its machine must prove before the command.
    let blade1 = bmc
        .systems()
        .into_iter()
        .find(|s| s.id == "Blade1")
        .unwrap();
    kube.store()
        .create(
            nodefence_mocks::kube::resources::NODES,
            None,
            crate::cli_common::node_object("worker-1", &blade1.uuid, None),
        )
        .unwrap();

    let run = |args: Vec<String>| {
        let home = dir.path().to_path_buf();
        async move {
            tokio::process::Command::new(env!("CARGO_BIN_EXE_nodefence"))
                .args(args)
                .env("HOME", &home)
                .env("KUBECONFIG", home.join("no-kubeconfig"))
                .env_remove("KUBERNETES_SERVICE_HOST")
                .env_remove("POD_NAMESPACE")
                .env_remove("NODEFENCE_CONFIG")
                .output()
                .await
                .unwrap()
        }
    };
    let base = vec![
        "--config".to_string(),
        config_path.display().to_string(),
        "fence".into(),
        "worker-1".into(),
        "--action".into(),
        "off".into(),
        "--yes".into(),
    ];

    // No cluster access: refused before anything is sent to the BMC.
    let out = run(base.clone()).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("node worker-1 is in a Kubernetes Secret"),
        "{stderr}"
    );
    assert!(stderr.contains("--kubeconfig"), "{stderr}");
    assert_eq!(bmc.power("Blade1"), Some(MockPower::On));

    let mut with_cluster = base.clone();
    with_cluster.extend([
        "--kubeconfig".to_string(),
        kubeconfig.display().to_string(),
        "--namespace".into(),
        NS.into(),
    ]);
    let out = run(with_cluster).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("worker-1: confirmed Off"), "{stdout}");
    assert!(stdout.contains("identity confirmed"), "{stdout}");
    assert_eq!(bmc.power("Blade1"), Some(MockPower::Off));
    assert_eq!(bmc.power("Blade2"), Some(MockPower::On));
    assert!(!stdout.contains(PASSWORD) && !stderr.contains(PASSWORD));
    // worker-2's broken Secret was not even read.
    assert!(
        secret_gets(&kube)
            .iter()
            .all(|(path, _)| !path.ends_with("/broken")),
        "{:?}",
        secret_gets(&kube)
    );
}

/// The daemon's options for these tests: elected (so it publishes Events), its
/// configuration checked every 200 ms.
fn daemon_options() -> nodefence::daemon::DaemonOptions {
    nodefence::daemon::DaemonOptions {
        drivers: Default::default(),
        dry_run: false,
        health_listen: "127.0.0.1:0".parse().unwrap(),
        metrics: nodefence::daemon::MetricsEndpoint::plain("127.0.0.1:0".parse().unwrap()),
        lease_namespace: NS.into(),
        lease_name: "nodefence".into(),
        identity: "test".into(),
        leader_timings: nodefence::cluster::leader::LeaderTimings::default(),
        config_check: Some(Duration::from_millis(200)),
        companions: None,
    }
}

/// The notes of the Events with `reason`, oldest first.
fn notes(kube: &FakeKubeHandle, reason: &str) -> Vec<String> {
    let (events, _) = kube
        .store()
        .list(nodefence_mocks::kube::resources::EVENTS_V1, None);
    events
        .iter()
        .filter(|e| e["reason"] == reason)
        .map(|e| e["note"].as_str().unwrap_or_default().to_string())
        .collect()
}

async fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let end = tokio::time::Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(
            tokio::time::Instant::now() < end,
            "timed out after 30 s waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn patch_secret(client: &Client, patch: serde_json::Value) {
    Api::<Secret>::namespaced(client.clone(), NS)
        .patch(
            "bmc",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
}

fn data(password: &str) -> serde_json::Value {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(password);
    serde_json::json!({ "data": { "password": encoded } })
}

/// The statuses the BMC answered since its log was last cleared.
fn bmc_statuses(bmc: &MockRedfishHandle) -> Vec<u16> {
    bmc.request_log().iter().filter_map(|r| r.status).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_rotated_in_its_secret_is_used_without_a_restart() {
    let (kube, client) = kube().await;
    let bmc = bmc().await;
    create_secret(&client, NS, "bmc", &[("password", PASSWORD)]).await;
    let dir = tempfile::tempdir().unwrap();
    let inventory = format!(
        "{}password_secret = \"bmc\"\n{}",
        defaults(&bmc),
        node("worker-1", 1, "")
    );
    let path = write_config(dir.path(), &inventory);
    // The BMC monitor logs in every 200 ms: each request shows which password the
    // driver holds (the BMC answers 401 to any other).
    let toml = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{toml}monitor_interval = \"200ms\"\n")).unwrap();
    let daemon = tokio::spawn(nodefence::daemon::run(
        load(&path),
        client.clone(),
        daemon_options(),
        std::future::pending(),
    ));
    wait_for(
        "the BMC monitor logged in with the Secret's password",
        || bmc_statuses(&bmc).contains(&200),
    )
    .await;
    assert!(
        !bmc_statuses(&bmc).contains(&401),
        "{:?}",
        bmc_statuses(&bmc)
    );
    // Watched by name, as the component's Role (resourceNames) allows: a list and a
    // watch, both with the name's field selector, never one of every Secret.
    wait_for("a watch of Secret bmc by name", || {
        kube.request_log().iter().any(|(method, path, _)| {
            method == "GET"
                && path.starts_with("/api/v1/namespaces/nodefence/secrets?")
                && path.contains("watch=true")
        })
    })
    .await;
    let secret_lists: Vec<String> = kube
        .request_log()
        .into_iter()
        .filter(|(method, path, _)| {
            method == "GET" && path.starts_with("/api/v1/namespaces/nodefence/secrets?")
        })
        .map(|(_, path, _)| path)
        .collect();
    assert!(
        secret_lists
            .iter()
            .all(|p| p.contains("fieldSelector=metadata.name%3Dbmc")),
        "{secret_lists:?}"
    );

    // Rotated in the Secret (and, say, not yet on the BMC): applied, said with the
    // Secret's name, and the driver now presents the new password.
    patch_secret(&client, data("rotated-pw-2")).await;
    wait_for("ConfigReloaded after the rotation", || {
        !notes(&kube, "ConfigReloaded").is_empty()
    })
    .await;
    let reloaded = notes(&kube, "ConfigReloaded");
    assert!(
        reloaded[0].contains("Secret nodefence/bmc changed") && !reloaded[0].contains("rotated-pw"),
        "{reloaded:?}"
    );
    bmc.clear_logs();
    wait_for("the monitor presenting the rotated password (401)", || {
        bmc_statuses(&bmc).contains(&401)
    })
    .await;

    // A label is not data: nothing is read again.
    patch_secret(
        &client,
        serde_json::json!({ "metadata": { "labels": { "team": "infra" } } }),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(notes(&kube, "ConfigReloaded").len(), 1);

    // Rotated back: applied again, and the driver logs in again.
    patch_secret(&client, data(PASSWORD)).await;
    wait_for("a second ConfigReloaded", || {
        notes(&kube, "ConfigReloaded").len() == 2
    })
    .await;
    bmc.clear_logs();
    wait_for("the monitor logged in again", || {
        bmc_statuses(&bmc).contains(&200)
    })
    .await;

    // A value the loader refuses (two lines): refused whole, said once, the running
    // credentials kept.
    patch_secret(&client, data("one\ntwo")).await;
    wait_for("ConfigRejected", || {
        !notes(&kube, "ConfigRejected").is_empty()
    })
    .await;
    let rejected = notes(&kube, "ConfigRejected");
    assert!(rejected[0].contains("nodefence/bmc"), "{rejected:?}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        notes(&kube, "ConfigRejected").len(),
        1,
        "the same state is refused once"
    );
    assert_eq!(notes(&kube, "ConfigReloaded").len(), 2);
    bmc.clear_logs();
    wait_for("the monitor still logging in", || {
        bmc_statuses(&bmc).contains(&200)
    })
    .await;
    assert!(
        !bmc_statuses(&bmc).contains(&401),
        "{:?}",
        bmc_statuses(&bmc)
    );
    daemon.abort();
}
