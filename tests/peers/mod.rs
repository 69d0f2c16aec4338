//! Starting the independent IPMI peers of `tests/ipmi_peers.rs` on loopback:
//! pyghmi's BMC (through `pyghmi_bmc.py` next to this file) and OpenIPMI's `ipmi_sim`
//! (from a generated lan.conf, emu file and `chassis_control` script), plus the
//! config a `nodefence` CLI run needs to reach one. Each is found by
//! `nodefence_mocks::peers`, which skips the test (or fails it under
//! `NODEFENCE_REQUIRE_PEERS=1`) when it is missing.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::cli_common::{write_agent_config, write_secret};

pub const USER: &str = "fence";
pub const PASSWORD: &str = "peer-Pass-42";
/// A GUID with no symmetry, so every byte order is told apart.
pub const GUID: &str = "00112233-4455-6677-8899-aabbccddeeff";

// ---------------------------------------------------------------------------------
// pyghmi

/// A running `tests/peers/pyghmi_bmc.py`; killed on drop (and it exits when its
/// standard input closes).
pub struct Pyghmi {
    _child: Child,
    pub port: u16,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Pyghmi {
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// The power states the BMC switched to ("on"/"off"), repeats of a resent
    /// command folded.
    pub fn power_changes(&self) -> Vec<String> {
        let mut states: Vec<String> = self
            .lines()
            .iter()
            .filter_map(|l| l.strip_prefix("power ").map(str::to_string))
            .collect();
        states.dedup();
        states
    }

    /// How many distinct requests with this netFn and command arrived (resends, which
    /// keep their rqSeq, counted once).
    pub fn requests(&self, netfn: u8, cmd: u8) -> usize {
        let prefix = format!("request {netfn:02x} {cmd:02x} ");
        let mut seqs: Vec<String> = self
            .lines()
            .iter()
            .filter_map(|l| l.strip_prefix(&prefix))
            .filter_map(|rest| rest.split(' ').next().map(str::to_string))
            .collect();
        seqs.sort();
        seqs.dedup();
        seqs.len()
    }
}

/// Starts pyghmi's BMC with the power `on` or `off`, or `None` when pyghmi is missing.
pub async fn pyghmi(power: &str) -> Option<Pyghmi> {
    let python = nodefence_mocks::peers::pyghmi_python()?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/pyghmi_bmc.py");
    let mut child = Command::new(&python)
        .arg(script)
        .args(["--user", USER, "--port", "0", "--address", "127.0.0.1"])
        .args(["--power", power, "--guid", GUID])
        .env("PYGHMI_BMC_PASSWORD", PASSWORD)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("pyghmi BMC starts");
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(Duration::from_secs(20), stdout.next_line())
        .await
        .expect("pyghmi BMC ready within 20 s")
        .unwrap()
        .expect("pyghmi BMC printed its port");
    let port = ready
        .strip_prefix("ready ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("unexpected first line from pyghmi: {ready:?}"));
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = stdout.next_line().await {
            sink.lock().unwrap().push(line);
        }
    });
    Some(Pyghmi {
        _child: child,
        port,
        lines,
    })
}

/// Waits (bounded) until pyghmi has printed `line`.
pub async fn wait_for_line(bmc: &Pyghmi, line: &str) {
    wait_for(bmc, |b| b.lines().iter().any(|l| l == line)).await;
}

/// Waits (bounded) until pyghmi's log satisfies `done`.
pub async fn wait_for(bmc: &Pyghmi, done: impl Fn(&Pyghmi) -> bool) {
    for _ in 0..100 {
        if done(bmc) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("pyghmi's log never got there: {:?}", bmc.lines());
}

/// Writes nodefence.toml, an inventory with one ipmi node `db-1` and its password file.
pub fn write_config(dir: &Path, port: u16) -> PathBuf {
    write_secret(&dir.join("bmc-password"), PASSWORD);
    let config = write_agent_config(dir, 2, "50ms", "10s");
    std::fs::write(
        dir.join("inventory.toml"),
        format!(
            "[defaults]\ndriver = \"ipmi\"\naddress = \"127.0.0.1\"\nport = {port}\nusername = \"{USER}\"\n\
             password_file = \"bmc-password\"\nconnect_timeout = \"2s\"\nrequest_timeout = \"2s\"\n\
             operation_timeout = \"8s\"\nretries = 3\n\n[nodes.db-1]\n"
        ),
    )
    .unwrap();
    config
}

// ---------------------------------------------------------------------------------
// OpenIPMI ipmi_sim

/// A running `ipmi_sim`; killed on drop.
pub struct Sim {
    _child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl Sim {
    /// The power values the chassis_control script was told to set, repeats of a
    /// resent command folded.
    pub fn power_sets(&self) -> Vec<String> {
        let mut sets: Vec<String> = std::fs::read_to_string(self.dir.path().join("log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        sets.dedup();
        sets
    }

    /// The power state the chassis_control script holds ("1" on, "0" off).
    pub fn power_file(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("power"))
            .unwrap_or_default()
            .trim()
            .to_string()
    }
}

/// The chassis_control program: `<script> <mc> get power` prints `power:<0|1>`,
/// `<script> <mc> set power <v>` stores it. Other parameters are accepted and ignored.
pub const CHASSIS_SCRIPT: &str = r#"#!/bin/sh
dir=$(dirname "$0")
shift
op=$1
shift
case $op in
get)
    for p in "$@"; do
        case $p in
        power) echo "power:$(cat "$dir/power")" ;;
        boot) echo "boot:default" ;;
        *) echo "invalid parameter $p"; exit 1 ;;
        esac
    done ;;
set)
    while [ $# -ge 2 ]; do
        case $1 in
        power) echo "$2" > "$dir/power"; echo "power $2" >> "$dir/log" ;;
        *) echo "$1 $2" >> "$dir/log" ;;
        esac
        shift 2
    done ;;
*) exit 1 ;;
esac
"#;

/// Starts `ipmi_sim` with one admin user, the power `on`, GUID [`GUID`]; `None` when
/// it is not installed.
pub async fn ipmi_sim(on: bool) -> Option<Sim> {
    ipmi_sim_with(on, None).await
}

/// [`ipmi_sim`] with a BMC key (K_g). ipmi_sim keeps at most 19 bytes of a quoted
/// key (it truncates a 20-byte one), so give it 19 or fewer, without quotes.
pub async fn ipmi_sim_with(on: bool, kg: Option<&str>) -> Option<Sim> {
    let binary = nodefence_mocks::peers::ipmi_sim()?;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let script = d.join("chassis");
    std::fs::write(&script, CHASSIS_SCRIPT).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    std::fs::write(d.join("power"), if on { "1\n" } else { "0\n" }).unwrap();
    std::fs::create_dir(d.join("state")).unwrap();
    let port = {
        let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let guid_hex: String = GUID.chars().filter(|c| *c != '-').collect();
    let bmc_key = kg.map_or(String::new(), |k| format!("    bmc_key \"{k}\"\n"));
    std::fs::write(
        d.join("lan.conf"),
        format!(
            "name \"nodefence\"\nset_working_mc 0x20\n  startlan 1\n    addr 127.0.0.1 {port}\n    \
             priv_limit admin\n    guid {guid_hex}\n{bmc_key}  endlan\n  chassis_control \"{} 0x20\"\n  \
             user 2 true \"{USER}\" \"{PASSWORD}\" admin 10 md5\n",
            script.display()
        ),
    )
    .unwrap();
    std::fs::write(
        d.join("sim.emu"),
        "mc_setbmc 0x20\nmc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr\nmc_enable 0x20\n",
    )
    .unwrap();
    let child = Command::new(binary)
        .current_dir(d)
        .args(["-c", "lan.conf", "-f", "sim.emu", "-n", "-s", "state"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.join("stderr")).unwrap())
        .kill_on_drop(true)
        .spawn()
        .expect("ipmi_sim starts");
    assert!(
        answers_on_udp(port).await,
        "ipmi_sim did not answer on UDP port {port} within 10 s; its stderr: {}",
        std::fs::read_to_string(d.join("stderr")).unwrap_or_default()
    );
    Some(Sim {
        _child: child,
        port,
        dir,
    })
}

/// Waits (at most 10 s) until something answers Get Channel Authentication
/// Capabilities on `port`.
pub async fn answers_on_udp(port: u16) -> bool {
    use nodefence_ipmi_proto::command::{Privilege, get_channel_auth_capabilities};
    use nodefence_ipmi_proto::rmcp::encode_v15;
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.connect(("127.0.0.1", port)).await.unwrap();
    let request = get_channel_auth_capabilities(1, Privilege::Administrator)
        .encode()
        .unwrap();
    let datagram = encode_v15(0, 0, &request).unwrap();
    let mut buf = [0u8; 512];
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < until {
        let _ = socket.send(&datagram).await;
        match tokio::time::timeout(Duration::from_millis(100), socket.recv(&mut buf)).await {
            Ok(Ok(_)) => return true,
            // Nothing bound yet (ICMP port unreachable): try again shortly.
            Ok(Err(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(_) => {}
        }
    }
    false
}
