//! A moto server (AWS's EC2 emulated, PyPI `moto[server]`) on loopback for
//! `tests/aws_driver.rs`, and EC2 set-up through boto3 (`moto_ec2.py` next to this
//! file), an independent client.
//!
//! The server and boto3's Python are found by `nodefence_mocks::peers::moto`
//! (`NODEFENCE_MOTO_SERVER`, else `~/.cache/nodefence/moto-venv/bin/moto_server`, else
//! `moto_server` on `PATH`). Each test starts its own server on a port the kernel picks
//! (`-p 0`; the port is read from its banner), killed on drop. When moto is missing
//! the test is skipped (`nodefence_mocks::peers::skip`), unless
//! `NODEFENCE_REQUIRE_PEERS=1` (CI).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use url::Url;

/// A running moto server; killed on drop.
pub struct Moto {
    _child: Child,
    pub endpoint: Url,
    python: PathBuf,
}

/// Starts a moto server, or `None` (after printing why) when moto is not installed.
pub async fn start() -> Option<Moto> {
    let nodefence_mocks::peers::Moto { server, python } = nodefence_mocks::peers::moto()?;
    let mut child = Command::new(&server)
        .args(["-H", "127.0.0.1", "-p", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("moto server starts");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let port = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(rest) = line.split("Running on http://127.0.0.1:").nth(1) {
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                return digits.parse::<u16>().ok();
            }
        }
        None
    })
    .await
    .expect("moto server ready within 60 s")
    .expect("moto server printed its port");
    // Keep reading its request log, so a full pipe never blocks the server.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Some(Moto {
        _child: child,
        endpoint: Url::parse(&format!("http://127.0.0.1:{port}/")).unwrap(),
        python,
    })
}

impl Moto {
    async fn ec2(&self, region: &str, args: &[&str]) -> String {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/moto_ec2.py");
        let out = Command::new(&self.python)
            .arg(script)
            .args([self.endpoint.as_str(), region])
            .args(args)
            // Only this child: boto3 must not pick up a developer's AWS set-up.
            .env_remove("AWS_PROFILE")
            .env("AWS_CONFIG_FILE", "/dev/null")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .output()
            .await
            .expect("moto_ec2.py runs");
        assert!(
            out.status.success(),
            "moto_ec2.py {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs `count` instances tagged `key=value` in `region`; their ids.
    pub async fn run(&self, region: &str, key: &str, value: &str, count: u32) -> Vec<String> {
        let tag = format!("{key}={value}");
        let count = count.to_string();
        let out = self.ec2(region, &["run", &tag, &count]).await;
        out.lines().map(str::to_string).collect()
    }

    pub async fn terminate(&self, region: &str, ids: &[&str]) {
        let mut args = vec!["terminate"];
        args.extend_from_slice(ids);
        self.ec2(region, &args).await;
    }

    /// Stops the instance (as its owner would, or a power loss).
    pub async fn stop(&self, region: &str, id: &str) {
        self.ec2(region, &["stop", id]).await;
    }

    /// Starts the instance.
    pub async fn start(&self, region: &str, id: &str) {
        self.ec2(region, &["start", id]).await;
    }

    /// The instance's state name as boto3 reads it.
    pub async fn state(&self, region: &str, id: &str) -> String {
        self.ec2(region, &["state", id]).await.trim().to_string()
    }
}
