//! Shared helpers for the tests that run the `nodefence` binary against a config
//! directory on disk (`cli.rs`, `identity.rs`, `exec_driver.rs`, `ipmi_driver.rs`
//! through `ipmi_common`, `ipmi_peers.rs` through `peers`): running the binary,
//! reading its output, and writing a 0600 secret file and the agent's
//! `nodefence.toml`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

/// Runs `nodefence --config <config> <args>` with stdin closed and waits for it.
/// No cluster access but what `args` give: `KUBECONFIG` names a file that does not
/// exist and the in-cluster variables are removed, so the developer's own
/// `~/.kube/config` (or a CI pod's service account) is never used.
pub async fn nodefence(config: &Path, args: &[&str]) -> Output {
    nodefence_env(config, args, &[]).await
}

/// [`nodefence`] with these environment variables set (after the defaults, so a
/// `KUBECONFIG` here is the one used).
pub async fn nodefence_env(config: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_nodefence"));
    command
        .arg("--config")
        .arg(config)
        .args(args)
        .env("KUBECONFIG", NO_KUBECONFIG)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT");
    for (key, value) in env {
        command.env(key, value);
    }
    command
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("nodefence runs")
}

/// A kubeconfig path that does not exist: no cluster access.
pub const NO_KUBECONFIG: &str = "/nonexistent/nodefence-tests/kubeconfig";

/// [`nodefence`], failing the test (and killing the process) after `limit`.
pub async fn nodefence_within(config: &Path, args: &[&str], limit: Duration) -> Output {
    tokio::time::timeout(limit, nodefence(config, args))
        .await
        .unwrap_or_else(|_| panic!("nodefence finishes within {limit:?}"))
}

/// Standard output followed by standard error, lossily decoded.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Writes a file holding `content` on one line (a trailing newline is added), mode
/// 0600 on Unix as nodefence requires of secret files.
pub fn write_secret(path: &Path, content: &str) {
    std::fs::write(path, format!("{content}\n")).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

/// Writes `dir/nodefence.toml`: `inventory = "inventory.toml"` and a `[power]`
/// section with the given confirmation settings (durations as TOML strings'
/// contents, e.g. `"50ms"`). Returns its path.
pub fn write_agent_config(
    dir: &Path,
    confirm_readings: u32,
    confirm_interval: &str,
    confirm_timeout: &str,
) -> PathBuf {
    let path = dir.join("nodefence.toml");
    std::fs::write(
        &path,
        format!(
            "inventory = \"inventory.toml\"\n[power]\nconfirm_readings = {confirm_readings}\n\
             confirm_interval = \"{confirm_interval}\"\nconfirm_timeout = \"{confirm_timeout}\"\n"
        ),
    )
    .unwrap();
    path
}

/// The installed ClusterLabs fence agent `name` (Debian `fence-agents`), or `None`
/// after the test is reported skipped; with `NODEFENCE_REQUIRE_PEERS=1` (CI) a
/// missing agent fails the test instead.
pub fn fence_agent(name: &str) -> Option<PathBuf> {
    nodefence_mocks::peers::fence_agent(name)
}

/// A Node object as the kubelet registers it: `systemUUID` and, when given,
/// `spec.providerID`.
pub fn node_object(name: &str, system_uuid: &str, provider_id: Option<&str>) -> serde_json::Value {
    let mut node = serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name},
        "spec": {},
        "status": {"nodeInfo": {
            "systemUUID": system_uuid, "machineID": "", "bootID": "", "kernelVersion": "",
            "osImage": "", "containerRuntimeVersion": "", "kubeletVersion": "v1.33.0",
            "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"
        }}
    });
    if let Some(p) = provider_id {
        node["spec"]["providerID"] = serde_json::json!(p);
    }
    node
}

/// A fake-kube holding these Nodes (name, systemUUID, providerID), and the path of a
/// kubeconfig for it written in `dir`.
pub async fn cluster_with_nodes(
    dir: &Path,
    nodes: &[(&str, &str, Option<&str>)],
) -> (nodefence_mocks::kube::FakeKubeHandle, String) {
    let kube = nodefence_mocks::kube::FakeKube::builder()
        .start()
        .await
        .unwrap();
    for (name, uuid, provider_id) in nodes {
        kube.store()
            .create(
                nodefence_mocks::kube::resources::NODES,
                None,
                node_object(name, uuid, *provider_id),
            )
            .unwrap();
    }
    let path = dir.join("cluster.kubeconfig");
    kube.write_kubeconfig(&path).unwrap();
    (kube, path.to_string_lossy().into_owned())
}

/// `nodefence fence <node>` with cluster access (`kubeconfig`) and `--yes -o json`,
/// for off, on and reboot, with and without `--skip-identity-check`: each is refused
/// with exit 5 before anything is sent, the JSON report carries the mismatch and the
/// machine the entry reached (`reached`), and the message names the machine the entry
/// reaches and the one the Node reports (`reported`). `env` as in [`nodefence_env`].
/// The caller checks that the machine was left alone.
pub async fn assert_fence_refuses_a_mismatch(
    config: &Path,
    node: &str,
    kubeconfig: &str,
    reached: &str,
    reported: &str,
    env: &[(&str, &str)],
) {
    for action in ["off", "on", "reboot"] {
        for skip in [false, true] {
            let mut args = vec![
                "fence",
                node,
                "--action",
                action,
                "--yes",
                "-o",
                "json",
                "--kubeconfig",
                kubeconfig,
            ];
            if skip {
                args.push("--skip-identity-check");
            }
            let out = nodefence_env(config, &args, env).await;
            assert_eq!(out.status.code(), Some(5), "{args:?}: {}", text(&out));
            let r: serde_json::Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("fence prints JSON ({e}): {}", text(&out)));
            assert_eq!(r["refused"], true, "{r}");
            assert_eq!(r["confirmed"], false, "{r}");
            assert_eq!(r["identity"]["result"], "mismatch", "{r}");
            assert_eq!(r["identity_check_skipped"], false, "{r}");
            assert_eq!(r["error_kind"], "identity", "{r}");
            assert!(
                r["commands_sent"].as_array().is_some_and(Vec::is_empty),
                "{r}"
            );
            assert_eq!(r["machine"]["value"], reached, "{r}");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("its inventory entry reaches another machine")
                    && stderr.contains(&format!("\"{reached}\""))
                    && stderr.contains(&format!("Node {node} reports"))
                    && stderr.contains(&format!("\"{reported}\""))
                    && stderr.contains("has no override"),
                "{stderr}"
            );
        }
    }
}

/// `nodefence fence <node> --action off` with cluster access, refused with exit 5
/// because the machine cannot be proven to be the node's own (`says` is in the
/// verdict), and naming `--skip-identity-check`. The caller checks that the machine
/// was left alone.
pub async fn assert_fence_refuses_an_unproven_machine(
    config: &Path,
    node: &str,
    kubeconfig: &str,
    says: &str,
) {
    let args = [
        "fence",
        node,
        "--action",
        "off",
        "--yes",
        "-o",
        "json",
        "--kubeconfig",
        kubeconfig,
    ];
    let out = nodefence(config, &args).await;
    assert_eq!(out.status.code(), Some(5), "{}", text(&out));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("fence prints JSON ({e}): {}", text(&out)));
    assert_eq!(r["refused"], true, "{r}");
    assert_eq!(r["identity"]["result"], "unknown", "{r}");
    let message = r["identity"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(says), "{r}");
    assert!(
        text(&out).contains("--skip-identity-check"),
        "{}",
        text(&out)
    );
}

/// `fence <node> --action <action> --yes --skip-identity-check`, then `more`: for
/// tests of the power path against a machine no Node describes (the identity check
/// has its own tests).
pub fn unproven_fence<'a>(node: &'a str, action: &'a str, more: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "fence",
        "--skip-identity-check",
        node,
        "--action",
        action,
        "--yes",
    ];
    args.extend_from_slice(more);
    args
}
