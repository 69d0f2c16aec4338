//! `REMOTE=1` of `companions_at_scale`: the companions' end of the network in a
//! network namespace of its own, joined to the daemon's by a veth pair whose far end
//! queues what the daemon sends (veth's NAPI mode) for a kernel thread pinned to
//! core 1, as another machine's NIC and kernel would take it. Linux ≥ 5.12, root,
//! iproute2, `ethtool`, util-linux's `taskset`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;

/// `REMOTE=1`: the companions' end of the network in a namespace of its own (removed
/// when dropped).
pub struct Remote {
    ns: String,
}

/// The daemon's end of the veth pair, and the companions'.
pub const REMOTE_DAEMON: &str = "10.213.0.1";
pub const REMOTE_COMPANIONS: &str = "10.213.0.2";

fn ip(args: &[&str]) {
    let mut all = vec!["ip"];
    all.extend_from_slice(args);
    tool(&all);
}

impl Remote {
    pub fn set_up() -> Self {
        let id = std::process::id() % 100_000;
        let ns = format!("nfbench{id}");
        let (here, there) = (format!("nfb{id}a"), format!("nfb{id}b"));
        ip(&["netns", "add", &ns]);
        let remote = Self { ns };
        let ns = remote.ns.as_str();
        ip(&[
            "link", "add", &here, "type", "veth", "peer", "name", &there, "netns", ns,
        ]);
        ip(&["addr", "add", &format!("{REMOTE_DAEMON}/30"), "dev", &here]);
        ip(&["link", "set", &here, "up"]);
        let inside = |args: &[&str]| {
            let mut all = vec!["netns", "exec", ns, "ip"];
            all.extend_from_slice(args);
            ip(&all);
        };
        inside(&[
            "addr",
            "add",
            &format!("{REMOTE_COMPANIONS}/30"),
            "dev",
            &there,
        ]);
        inside(&["link", "set", &there, "up"]);
        // The acknowledgements reach the namespace as they reach another machine:
        // queued on its end of the pair and taken from that queue by a kernel thread of
        // its own on core 1, not delivered inside the daemon's system call. veth queues
        // (its NAPI mode) when the receiving end has GRO on and the sending end no TSO
        // (a UDP datagram is then eligible); `threaded` gives that queue its thread.
        tool(&["ethtool", "-K", &here, "tso", "off"]);
        tool(&[
            "ip", "netns", "exec", ns, "ethtool", "-K", &there, "gro", "on",
        ]);
        tool(&[
            "ip",
            "netns",
            "exec",
            ns,
            "sh",
            "-c",
            &format!("echo 1 > /sys/class/net/{there}/threaded"),
        ]);
        let napi = napi_threads(&there);
        assert!(
            !napi.is_empty(),
            "no NAPI thread for {there}: veth's threaded NAPI needs Linux 5.12 or later"
        );
        for pid in napi {
            tool(&["taskset", "-p", "-c", "1", &pid.to_string()]);
        }
        remote
    }

    /// A UDP socket of the companions' namespace (made on a thread that joins it).
    pub fn socket(&self) -> std::net::UdpSocket {
        let path = format!("/var/run/netns/{}", self.ns);
        std::thread::spawn(move || {
            let ns = std::fs::File::open(&path).expect("the namespace");
            nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            let s = std::net::UdpSocket::bind((REMOTE_COMPANIONS, 0)).expect("bind");
            s.set_nonblocking(true).expect("non-blocking");
            s
        })
        .join()
        .expect("the namespace's thread")
    }
}

/// Runs a tool of the host (`ip`, `ethtool`, `taskset`); panics with what failed.
pub fn tool(args: &[&str]) {
    let status = std::process::Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::null())
        .status()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (REMOTE=1 needs iproute2, ethtool, util-linux)",
                args[0]
            )
        });
    assert!(status.success(), "{}: {status}", args.join(" "));
}

/// The kernel threads polling `device`'s queues (`napi/DEVICE-ID`, cut to 15 bytes).
pub fn napi_threads(device: &str) -> Vec<u32> {
    let prefix: String = format!("napi/{device}").chars().take(15).collect();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim_end().starts_with(&prefix))
        })
        .collect()
}

impl Drop for Remote {
    fn drop(&mut self) {
        // The veth pair goes with the namespace.
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.ns])
            .status();
    }
}
