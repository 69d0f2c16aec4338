//! `nodefence status` and `nodefence fence` (the real binary) finding an EC2 instance
//! through the Node's `spec.providerID` when the inventory names no instance and no
//! region: moto (EC2 emulated; set up through boto3) as the cloud, fake-kube as the
//! cluster. Without cluster access the node is an error that says how to name the
//! instance, never On or Off.
//!
//! Without moto the test prints "skipped" and passes, unless
//! `NODEFENCE_REQUIRE_PEERS=1` (CI); see `peers/moto.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::cli_common;
use crate::moto;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use cli_common::{text, write_agent_config};
use nodefence_mocks::kube::FakeKube;
use nodefence_mocks::kube::resources::NODES;
use serde_json::{Value, json};

const NODE: &str = "ip-10-0-3-17.ec2.internal";
/// Not a default region anywhere: finding the instance proves the region came from
/// the providerID's zone.
const REGION: &str = "eu-west-3";

/// Runs `nodefence --config <config> <args>` in a clean environment: test AWS keys,
/// no AWS region, profile or config files, and no cluster access but what `args`
/// give (`HOME` is `home`, `KUBECONFIG` a file that does not exist).
async fn nodefence(config: &Path, home: &Path, args: &[&str]) -> Output {
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_nodefence"))
        .arg("--config")
        .arg(config)
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("KUBECONFIG", home.join("no-such-kubeconfig"))
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("nodefence finishes within 60 s")
        .expect("nodefence runs")
}

/// `nodefence.toml` and an inventory whose one node names only the endpoint.
fn write_config(dir: &Path, endpoint: &url::Url) -> PathBuf {
    let config = write_agent_config(dir, 2, "100ms", "30s");
    std::fs::write(
        dir.join("inventory.toml"),
        format!("[nodes.\"{NODE}\"]\ndriver = \"aws\"\nendpoint = \"{endpoint}\"\n"),
    )
    .unwrap();
    config
}

fn node_object(provider_id: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NODE},
        "spec": {"providerID": provider_id},
        "status": {"nodeInfo": {
            "systemUUID": "ec2a1b2c-0000-4000-8000-000000000001", "machineID": "",
            "bootID": "", "kernelVersion": "", "osImage": "", "containerRuntimeVersion": "",
            "kubeletVersion": "v1.33.0", "kubeProxyVersion": "", "operatingSystem": "linux",
            "architecture": "amd64"
        }}
    })
}

/// The JSON row of [`NODE`] in `status -o json` output.
fn row(out: &Output) -> Value {
    let rows: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("status prints JSON ({e}): {}", text(out)));
    rows.as_array()
        .unwrap()
        .iter()
        .find(|r| r["node"] == NODE)
        .unwrap_or_else(|| panic!("a row for {NODE}: {}", text(out)))
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_fence_find_the_instance_through_the_provider_id() {
    let Some(moto) = moto::start().await else {
        return;
    };
    let id = moto.run(REGION, "Name", NODE, 1).await.remove(0);
    let kube = FakeKube::builder().start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &moto.endpoint);
    let kubeconfig = dir.path().join("kubeconfig");
    kube.write_kubeconfig(&kubeconfig).unwrap();
    let kubeconfig = kubeconfig.to_string_lossy().to_string();
    kube.store()
        .create(NODES, None, node_object(&format!("aws:///{REGION}a/{id}")))
        .unwrap();

    // Without cluster access: an error saying how to name the instance.
    let out = nodefence(&config, home.path(), &["status", "-o", "json"]).await;
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    let r = row(&out);
    assert!(r["power"].is_null(), "never a power state: {r}");
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("set instance_id or instance_tag") && message.contains("spec.providerID"),
        "{r}"
    );
    let out = nodefence(&config, home.path(), &["status"]).await;
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    let line = table
        .lines()
        .find(|l| l.starts_with(NODE))
        .unwrap_or_else(|| panic!("a line for {NODE}: {}", text(&out)));
    assert!(!line.contains(" On") && !line.contains(" Off"), "{table}");

    // With it: On, the machine is the instance, the identity matches.
    let out = nodefence(
        &config,
        home.path(),
        &["status", "--kubeconfig", &kubeconfig, "-o", "json"],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let r = row(&out);
    assert_eq!(r["power"], "On", "{r}");
    assert!(r["error"].is_null(), "{r}");
    assert_eq!(r["machine"]["kind"], "instance-id", "{r}");
    assert_eq!(r["machine"]["value"], id.as_str(), "{r}");
    assert_eq!(r["identity"]["result"], "match", "{r}");

    let out = nodefence(
        &config,
        home.path(),
        &["status", "--kubeconfig", &kubeconfig],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    let header = table.lines().next().unwrap_or_default();
    assert!(
        header.contains("MACHINE") && header.contains("IDENTITY"),
        "{table}"
    );
    let line = table.lines().find(|l| l.starts_with(NODE)).unwrap();
    assert!(
        line.contains(" On") && line.contains(&id) && line.contains(" match"),
        "{table}"
    );

    // Fence it: confirmed Off, and EC2 says stopped.
    let out = nodefence(
        &config,
        home.path(),
        &[
            "fence",
            NODE,
            "--action",
            "off",
            "--yes",
            "--kubeconfig",
            &kubeconfig,
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("fence prints JSON ({e}): {}", text(&out)));
    assert_eq!(report["confirmed"], true, "{report}");
    assert_eq!(report["initial_power"], "On", "{report}");
    assert_eq!(report["final_power"], "Off", "{report}");
    assert_eq!(report["commands_sent"], json!(["off"]), "{report}");
    assert_eq!(report["identity"]["result"], "match", "{report}");
    assert_eq!(report["identity"]["equivalence"], "instance-id", "{report}");
    assert_eq!(moto.state(REGION, &id).await, "stopped");

    // Without cluster access fence refuses, and sends nothing.
    let out = nodefence(
        &config,
        home.path(),
        &["fence", NODE, "--action", "on", "--yes"],
    )
    .await;
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("no cluster access") && text(&out).contains("names no machine itself"),
        "{}",
        text(&out)
    );
    assert_eq!(moto.state(REGION, &id).await, "stopped");

    kube.shutdown().await;
}

/// `nodefence fence` by hand when the entry names another node's instance
/// (`instance_id`): the Node's providerID names ours, so nothing is stopped or started,
/// whatever the action; the other instance keeps running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_refuses_an_entry_naming_another_nodes_instance() {
    let Some(moto) = moto::start().await else {
        return;
    };
    let ours = moto.run(REGION, "Name", NODE, 1).await.remove(0);
    let theirs = moto
        .run(REGION, "Name", "ip-10-0-3-99.ec2.internal", 1)
        .await
        .remove(0);
    let dir = tempfile::tempdir().unwrap();
    let config = write_agent_config(dir.path(), 2, "100ms", "30s");
    std::fs::write(
        dir.path().join("inventory.toml"),
        format!(
            "[nodes.\"{NODE}\"]\ndriver = \"aws\"\nendpoint = \"{}\"\nregion = \"{REGION}\"\n\
             instance_id = \"{theirs}\"\n",
            moto.endpoint
        ),
    )
    .unwrap();
    let provider_id = format!("aws:///{REGION}a/{ours}");
    let (kube, kubeconfig) = cli_common::cluster_with_nodes(
        dir.path(),
        &[(
            NODE,
            "ec2a1b2c-0000-4000-8000-000000000001",
            Some(&provider_id),
        )],
    )
    .await;
    let env = [
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_CONFIG_FILE", "/dev/null"),
        ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ];
    cli_common::assert_fence_refuses_a_mismatch(&config, NODE, &kubeconfig, &theirs, &ours, &env)
        .await;
    assert_eq!(moto.state(REGION, &theirs).await, "running");
    assert_eq!(moto.state(REGION, &ours).await, "running");
    kube.shutdown().await;
}
