//! "Nodes" on a real network: network namespaces joined by a bridge of the host,
//! each with the `/etc/resolv.conf` a kubelet writes for a pod, and a real DNS server
//! (dnsmasq) standing in for the cluster's.
//!
//! - [`Lab`]: one namespace per node (`ip netns add`), each joined to a bridge of the
//!   host by a veth pair; the host holds the control plane's address
//!   ([`Lab::control_plane`], where the test binds what plays nodefence and the API
//!   server) and the DNS server's ([`Lab::dns`]). Names are unique per process and
//!   test; everything is deleted when it is dropped, also when the test fails.
//! - [`Dnsmasq`]: the cluster's DNS for `cluster.local` (and nothing else: other names
//!   in it get NXDOMAIN, no upstream), made silent with SIGSTOP, as a dead CoreDNS is
//!   (queries time out), and killed when dropped.
//!
//! Needs root (`CAP_NET_ADMIN`, `CAP_SYS_ADMIN`), iproute2's `ip` and dnsmasq
//! (Debian `dnsmasq-base`): [`tools`] skips the test without them, or fails it under
//! `NODEFENCE_REQUIRE_PEERS=1`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nodefence_mocks::peers::{on_path, skip};

/// The search list and options a kubelet writes into a pod's resolv.conf (the pod in
/// namespace `nodefence`, `ClusterFirst`).
pub const POD_SEARCH: [&str; 3] = [
    "nodefence.svc.cluster.local",
    "svc.cluster.local",
    "cluster.local",
];
pub const POD_OPTIONS: &str = "ndots:5";

/// The programs a lab needs.
pub struct Tools {
    pub ip: PathBuf,
    pub dnsmasq: PathBuf,
}

/// `ip` and `dnsmasq`, and root; or `None` after the test is reported skipped (a
/// failure under `NODEFENCE_REQUIRE_PEERS=1`).
pub fn tools() -> Option<Tools> {
    let ip = on_path("ip").or_else(|| skip("ip (iproute2)", "apt-get install iproute2"))?;
    let dnsmasq = on_path("dnsmasq").or_else(|| skip("dnsmasq", "apt-get install dnsmasq-base"))?;
    if !effective_root() {
        return skip(
            "root (network namespaces: CAP_NET_ADMIN, CAP_SYS_ADMIN)",
            "run the tests as root, as .ci/run does",
        );
    }
    Some(Tools { ip, dnsmasq })
}

/// Whether this process runs as root (`/proc/self/status`: the effective uid).
fn effective_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
            .unwrap_or(false)
    })
}

/// Runs `program args`; its stderr on failure.
fn run(program: &Path, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{} {}: {e}", program.display(), args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} {}: {}: {}",
            program.display(),
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// One node: its namespace and its address.
#[derive(Debug, Clone)]
pub struct NodeNs {
    pub netns: String,
    pub addr: Ipv4Addr,
}

/// Namespaces on a bridge of the host (see the module's documentation).
pub struct Lab {
    ip: PathBuf,
    bridge: String,
    /// The /24 of the bridge: `.1` the control plane, `.2` the DNS server, `.10 +
    /// i` node `i`.
    net: [u8; 3],
    pub nodes: Vec<NodeNs>,
    /// Created so far (deleted when dropped).
    made_netns: Vec<String>,
    made_bridge: bool,
    made_resolv: Vec<PathBuf>,
}

/// Labs made by this process (their names and subnets differ).
static LABS: AtomicU32 = AtomicU32::new(0);

impl Lab {
    /// `nodes` namespaces, each with a pod's resolv.conf naming the lab's DNS server.
    /// `Err`: what could not be made (what was made is deleted).
    pub fn create(tools: &Tools, nodes: usize) -> Result<Self, String> {
        assert!((1..=200).contains(&nodes));
        let serial = std::process::id()
            .wrapping_mul(8)
            .wrapping_add(LABS.fetch_add(1, Ordering::Relaxed));
        // At most 15 bytes ("nfd" + 10 digits + "b"), unique per process and lab.
        let tag = format!("nfd{serial}");
        let net = free_subnet(&tools.ip, serial)?;
        let mut lab = Lab {
            ip: tools.ip.clone(),
            bridge: format!("{tag}b"),
            net,
            nodes: Vec::new(),
            made_netns: Vec::new(),
            made_bridge: false,
            made_resolv: Vec::new(),
        };
        lab.ip(&["link", "add", &lab.bridge.clone(), "type", "bridge"])?;
        lab.made_bridge = true;
        let bridge = lab.bridge.clone();
        lab.ip(&["addr", "add", &format!("{}/24", lab.dns()), "dev", &bridge])?;
        lab.ip(&[
            "addr",
            "add",
            &format!("{}/32", lab.control_plane()),
            "dev",
            &bridge,
        ])?;
        lab.ip(&["link", "set", &bridge, "up"])?;
        for i in 0..nodes {
            let netns = format!("{tag}n{i}");
            let veth = format!("{tag}v{i}");
            let addr = lab.host(10 + u8::try_from(i).unwrap());
            // A namespace of this name left by a killed run of the same pid.
            let _ = run(&lab.ip, &["netns", "del", &netns]);
            lab.ip(&["netns", "add", &netns])?;
            lab.made_netns.push(netns.clone());
            lab.ip(&[
                "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &netns,
            ])?;
            lab.ip(&["link", "set", &veth, "master", &bridge, "up"])?;
            lab.ip(&[
                "-n",
                &netns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                "eth0",
            ])?;
            lab.ip(&["-n", &netns, "link", "set", "eth0", "up"])?;
            lab.ip(&["-n", &netns, "link", "set", "lo", "up"])?;
            // `ip netns exec` bind-mounts /etc/netns/<name>/* over /etc for what it runs.
            let dir = Path::new("/etc/netns").join(&netns);
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            lab.made_resolv.push(dir.clone());
            std::fs::write(
                dir.join("resolv.conf"),
                format!(
                    "search {}\nnameserver {}\noptions {POD_OPTIONS}\n",
                    POD_SEARCH.join(" "),
                    lab.dns()
                ),
            )
            .map_err(|e| format!("{}: {e}", dir.display()))?;
            lab.nodes.push(NodeNs { netns, addr });
        }
        Ok(lab)
    }

    fn host(&self, last: u8) -> Ipv4Addr {
        Ipv4Addr::new(self.net[0], self.net[1], self.net[2], last)
    }

    /// The control plane's address (on the host): nodefence's replica, the API server.
    pub fn control_plane(&self) -> Ipv4Addr {
        self.host(1)
    }

    /// The cluster DNS's address (on the host).
    pub fn dns(&self) -> Ipv4Addr {
        self.host(2)
    }

    fn ip(&self, args: &[&str]) -> Result<(), String> {
        run(&self.ip, args)
    }

    /// A command run inside node `i`'s namespace (`ip netns exec`: its resolv.conf
    /// over /etc/resolv.conf).
    pub fn command_in(&self, i: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(&self.ip);
        c.args(["netns", "exec", &self.nodes[i].netns]).arg(program);
        c
    }

    /// The control plane goes dark, as its machines do: its address leaves the host,
    /// and what the nodes send it is dropped without an answer (then, once their
    /// neighbour entries expire, the host is unreachable). Every connection to it
    /// stalls; nothing already bound there is stopped.
    pub fn cut_control_plane(&self) {
        let cp = format!("{}/32", self.control_plane());
        self.ip(&["addr", "del", &cp, "dev", &self.bridge])
            .unwrap_or_else(|e| panic!("cutting the control plane: {e}"));
    }

    /// The control plane's address back.
    pub fn restore_control_plane(&self) {
        let cp = format!("{}/32", self.control_plane());
        self.ip(&["addr", "add", &cp, "dev", &self.bridge])
            .unwrap_or_else(|e| panic!("restoring the control plane: {e}"));
    }
}

/// A /24 in 10.128.0.0/9 that no address or route of the host is in, chosen from
/// `serial` (concurrent runs pick different ones).
fn free_subnet(ip: &Path, serial: u32) -> Result<[u8; 3], String> {
    let out = Command::new(ip)
        .args(["-o", "-4", "route", "show", "table", "all"])
        .output()
        .map_err(|e| format!("ip route: {e}"))?;
    let addrs = Command::new(ip)
        .args(["-o", "-4", "addr", "show"])
        .output()
        .map_err(|e| format!("ip addr: {e}"))?;
    let used = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&addrs.stdout)
    );
    for k in 0..512u32 {
        let n = serial.wrapping_add(k.wrapping_mul(7919)) % (120 * 256);
        let net = [10, 130 + u8::try_from(n / 256).unwrap(), (n % 256) as u8];
        let prefix = format!("{}.{}.{}.", net[0], net[1], net[2]);
        if !used
            .split_whitespace()
            .any(|word| word.starts_with(&prefix))
        {
            return Ok(net);
        }
    }
    Err("no free /24 in 10.130.0.0-10.249.255.255".into())
}

impl Drop for Lab {
    fn drop(&mut self) {
        // A namespace goes once its last process has exited; its veth pair with it.
        for netns in &self.made_netns {
            if let Err(e) = run(&self.ip, &["netns", "del", netns]) {
                eprintln!("cleaning up: {e}");
            }
        }
        if self.made_bridge
            && let Err(e) = run(&self.ip, &["link", "del", &self.bridge])
        {
            eprintln!("cleaning up: {e}");
        }
        for dir in &self.made_resolv {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A real dnsmasq serving `cluster.local` (see the module's documentation).
pub struct Dnsmasq {
    child: Child,
    log: PathBuf,
    stopped: bool,
}

impl Dnsmasq {
    /// Serves `records` (each fully qualified name with its addresses: several for a
    /// headless Service) on `listen:53`, authoritative for `cluster.local` (any other
    /// name in it: NXDOMAIN), with no upstream and no /etc/hosts; logs every query to
    /// `log`.
    pub fn start(
        tools: &Tools,
        listen: Ipv4Addr,
        records: &[(&str, Vec<Ipv4Addr>)],
        log: &Path,
    ) -> Self {
        let mut args = vec![
            "--keep-in-foreground".to_string(),
            "--conf-file=/dev/null".into(),
            "--no-resolv".into(),
            "--no-hosts".into(),
            "--local=/cluster.local/".into(),
            format!("--listen-address={listen}"),
            "--bind-interfaces".into(),
            "--port=53".into(),
            "--user=root".into(),
            "--pid-file=".into(),
            "--log-queries".into(),
            format!("--log-facility={}", log.display()),
        ];
        for (name, addrs) in records {
            for a in addrs {
                args.push(format!("--host-record={name},{a}"));
            }
        }
        let child = Command::new(&tools.dnsmasq)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", tools.dnsmasq.display()));
        let mut d = Dnsmasq {
            child,
            log: log.to_path_buf(),
            stopped: false,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !d.log().contains("started, version") {
            if let Ok(Some(status)) = d.child.try_wait() {
                panic!("dnsmasq exited at its start ({status}): {}", d.log());
            }
            assert!(
                Instant::now() < deadline,
                "dnsmasq not started within 10 s: {}",
                d.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    /// What it logged (every query, with the address it came from).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap_or_else(|e| panic!("kill {signal}: {e}"));
        assert!(status.success(), "kill {signal} dnsmasq: {status}");
    }

    /// Silent from now on (SIGSTOP): it reads nothing, answers nothing, and no port is
    /// closed, so every query times out, as with a dead CoreDNS.
    pub fn silence(&mut self) {
        self.signal("-STOP");
        self.stopped = true;
    }

    /// Answers again (SIGCONT).
    pub fn resume(&mut self) {
        self.signal("-CONT");
        self.stopped = false;
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        if self.stopped {
            let _ = Command::new("kill")
                .args(["-CONT", &self.child.id().to_string()])
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
