//! nodefence's configuration for the demo, made the way an operator makes it: a
//! `nodefence.toml`, an inventory and a BMC password file in a private temporary
//! directory, read by the real loader ([`crate::config::load`]). Then every timing of
//! the policy is divided by the demo's speed, after the loader, whose checks are
//! meant for real clusters (e.g. `lease_stale_after` of at least 15 s). The same
//! directory keeps the companion listener's certificate and the companions' tokens
//! ([`Files::add`]).
//!
//! Timings that guard against a slow machine rather than model the cluster (HTTP
//! timeouts, leader election) keep a floor, so a fast demo on a busy 2-core machine
//! does not time out where a real cluster would not.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, anyhow};
use nodefence_mocks::kube::sim::SimConfig;
use nodefence_mocks::machines::Machine;

use super::narrate::Wording;
use crate::cluster::leader::LeaderTimings;
use crate::config::Config;
use crate::engine::LeaseStaleAfter;
use crate::power::confirm::ConfirmPolicy;

/// Consecutive Off readings that prove a machine is off.
pub const CONFIRM_READINGS: u32 = 3;

/// nodefence's own `unhealthy_after` as NodeHealthCheck's remediator (cluster time):
/// far longer than the NodeHealthCheck's duration, so that in the `nhc` scenario only
/// the request can have the machine powered off.
pub const REMEDIATOR_UNHEALTHY_AFTER: Duration = Duration::from_secs(600);

/// How nodefence is configured for a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// The documented defaults: nodefence detects failures on its own.
    Stock,
    /// NodeHealthCheck's remediator: `[remediation] requests = true`, and an
    /// `unhealthy_after` of [`REMEDIATOR_UNHEALTHY_AFTER`].
    Remediator,
    /// The watchdog level: `watchdog_fencing = true` in `[policy]`, and the
    /// companions' listener on (`run --companion-listen`): `rack-power`'s second act.
    Watchdog,
    /// The stock settings with the companions' listener on and no watchdog level:
    /// `power-loss --companions` (a silent companion makes its node suspect; the
    /// release still needs the machine read Off).
    Companions,
}

impl Profile {
    /// What it sets, in words: `[remediation] requests = true, unhealthy_after 10m`.
    pub fn describe(self, w: &Wording) -> String {
        match self {
            Profile::Stock => format!(
                "its stock settings (requests off, unhealthy_after {})",
                super::narrate::span(w.unhealthy_after)
            ),
            Profile::Remediator => format!(
                "[remediation] requests = true and unhealthy_after {}",
                super::narrate::span(w.unhealthy_after)
            ),
            Profile::Watchdog => {
                "the companions' listener (--companion-listen) and watchdog_fencing = true"
                    .to_string()
            }
            Profile::Companions => {
                "its stock settings and the companions' listener (--companion-listen)".to_string()
            }
        }
    }

    /// Whether the daemon runs its companions' listener.
    pub fn listens(self) -> bool {
        matches!(self, Profile::Watchdog | Profile::Companions)
    }

    fn file(self) -> &'static str {
        match self {
            Profile::Stock => "nodefence.toml",
            Profile::Remediator => "nodefence-remediator.toml",
            Profile::Watchdog => "nodefence-watchdog.toml",
            Profile::Companions => "nodefence-companions.toml",
        }
    }
}

/// What the files are made from.
pub struct DemoConfig {
    speed: f64,
    bmc_url: String,
    password: String,
    machines: Vec<Machine>,
    /// When the workers are VMs: the mock vCenter's URL and CA certificate (PEM).
    vcenter: Option<(String, String)>,
    /// The leader Lease's duration, when the demo was given one.
    leader_lease: Option<Duration>,
}

impl DemoConfig {
    pub fn new(speed: f64, bmc_url: &str, password: &str, machines: &[Machine]) -> Self {
        Self {
            speed,
            bmc_url: bmc_url.to_string(),
            password: password.to_string(),
            machines: machines.to_vec(),
            vcenter: None,
            leader_lease: None,
        }
    }

    /// The leader Lease lasts `lease` (unscaled), the renew deadline and retry period
    /// in proportion: 2/3 and 1/6 of it (6 s: 4 s and 1 s).
    pub fn with_leader_lease(mut self, lease: Option<Duration>) -> Self {
        self.leader_lease = lease;
        self
    }

    /// The workers are VMs on the vCenter at `url` (whose CA is `ca_pem`), each found
    /// by its Node's systemUUID (`driver = "vsphere"`, no VM named in the inventory).
    pub fn on_vcenter(mut self, url: &str, ca_pem: &str) -> Self {
        self.vcenter = Some((url.to_string(), ca_pem.to_string()));
        self
    }

    /// `cluster` at the demo's speed, but never below `floor`.
    fn scaled(&self, cluster: Duration, floor: Duration) -> Duration {
        cluster.div_f64(self.speed).max(floor)
    }

    /// client-go's leader-election defaults, scaled.
    pub fn leader_timings(&self) -> LeaderTimings {
        if let Some(lease) = self.leader_lease {
            return LeaderTimings {
                lease_duration: lease,
                renew_deadline: lease * 2 / 3,
                retry_period: lease / 6,
            };
        }
        let stock = LeaderTimings::default();
        LeaderTimings {
            lease_duration: self.scaled(stock.lease_duration, Duration::from_secs(3)),
            renew_deadline: self.scaled(stock.renew_deadline, Duration::from_secs(2)),
            retry_period: self.scaled(stock.retry_period, Duration::from_millis(200)),
        }
    }

    fn agent_toml(&self, profile: Profile) -> String {
        let mut out = format!(
            "inventory = \"inventory.toml\"\n\n[power]\nconfirm_readings = {CONFIRM_READINGS}\n\
             confirm_interval = \"{}\"\nconfirm_timeout = \"{}\"\n",
            ms(self.scaled(ConfirmPolicy::default().interval, Duration::from_millis(20))),
            ms(self.scaled(Duration::from_secs(120), Duration::from_secs(5))),
        );
        if profile == Profile::Remediator {
            // Cluster time, as an operator writes it; scaled after the loader.
            out.push_str(&format!(
                "\n[policy]\nunhealthy_after = \"{}\"\n\n[remediation]\nrequests = true\n",
                humantime::format_duration(REMEDIATOR_UNHEALTHY_AFTER)
            ));
        }
        if profile == Profile::Watchdog {
            out.push_str("\n[policy]\nwatchdog_fencing = true\n");
        }
        out
    }

    fn inventory_toml(&self) -> String {
        let (driver, endpoint, tls) = match &self.vcenter {
            Some((url, _)) => (
                "vsphere",
                url.as_str(),
                format!("ca_file = \"{VCENTER_CA}\"\n"),
            ),
            None => ("redfish", self.bmc_url.as_str(), String::new()),
        };
        let mut out = format!(
            "[defaults]\ndriver = \"{driver}\"\nendpoint = \"{endpoint}\"\nusername = \"fence\"\n\
             password_file = \"bmc-password\"\n{tls}connect_timeout = \"{}\"\nrequest_timeout = \"{}\"\n\
             operation_timeout = \"{}\"\nretries = 1\n",
            ms(self.scaled(Duration::from_secs(5), Duration::from_secs(1))),
            ms(self.scaled(Duration::from_secs(10), Duration::from_secs(1))),
            ms(self.scaled(Duration::from_secs(60), Duration::from_secs(3))),
        );
        for m in &self.machines {
            if self.vcenter.is_some() {
                // Nothing names the VM: the Node's systemUUID finds it.
                out.push_str(&format!("\n[nodes.{}]\n", m.node));
            } else {
                out.push_str(&format!(
                    "\n[nodes.{}]\nsystem_id = \"{}\"\n",
                    m.node, m.system_id
                ));
            }
        }
        out
    }
}

/// The mock vCenter's CA certificate, next to the inventory.
const VCENTER_CA: &str = "vcenter-ca.pem";

fn ms(d: Duration) -> String {
    format!("{}ms", d.as_millis().max(1))
}

/// The private directory holding the files; removed when dropped.
pub struct Files {
    dir: PathBuf,
}

impl Files {
    pub fn write(demo: &DemoConfig) -> anyhow::Result<Files> {
        let dir =
            std::env::temp_dir().join(format!("nodefence-demo-{}", uuid::Uuid::new_v4().simple()));
        create_private_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let files = Files { dir };
        write_private(&files.dir.join("bmc-password"), &demo.password)?;
        for profile in [
            Profile::Stock,
            Profile::Remediator,
            Profile::Watchdog,
            Profile::Companions,
        ] {
            write_private(&files.dir.join(profile.file()), &demo.agent_toml(profile))?;
        }
        write_private(&files.dir.join("inventory.toml"), &demo.inventory_toml())?;
        if let Some((_, ca_pem)) = &demo.vcenter {
            write_private(&files.dir.join(VCENTER_CA), ca_pem)?;
        }
        Ok(files)
    }

    pub fn agent(&self, profile: Profile) -> PathBuf {
        self.dir.join(profile.file())
    }

    /// Writes one more private file, `name`, in the directory; returns its path.
    pub fn add(&self, name: &str, content: &str) -> anyhow::Result<PathBuf> {
        let path = self.dir.join(name);
        write_private(&path, content)?;
        Ok(path)
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().mode(0o700).create(dir)
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir(dir)
}

fn write_private(path: &Path, content: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(content.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// Loads the files with the real loader, then scales the policy. Returns the config
/// and the words' settings (cluster time, before scaling).
pub fn load(
    files: &Files,
    demo: &DemoConfig,
    sim: &SimConfig,
    profile: Profile,
) -> anyhow::Result<(Config, Wording)> {
    let mut config = crate::config::load(&files.agent(profile))
        .map_err(|errors| anyhow!("the demo's own configuration is invalid:\n{errors}"))?;
    for warning in &config.warnings {
        tracing::warn!("demo configuration: {warning}");
    }
    let policy = &config.agent.policy;
    let wording = Wording {
        lease_stale_after: policy
            .lease_stale_after
            .map(|l| l.for_lease(Some(sim_lease_duration()))),
        unhealthy_after: policy.unhealthy_after,
        recovered_after: policy.recovered_after,
        grace_period: sim.node_monitor_grace_period,
        toleration: Duration::from_secs(sim.default_toleration_seconds),
    };
    // The cluster's policy and every node's own (resolved from it), alike.
    scale_policy(&mut config.agent.policy, demo.speed);
    for target in config.inventory.nodes.values_mut() {
        scale_policy(&mut target.policy, demo.speed);
    }
    Ok((config, wording))
}

/// The `leaseDurationSeconds` of the simulated kubelets' Leases.
fn sim_lease_duration() -> Duration {
    Duration::from_secs(nodefence_mocks::kube::sim::LEASE_DURATION_SECONDS.unsigned_abs())
}

/// Divides the policy's cluster timings by `speed` (the confirmation interval is the
/// demo's own, already short).
fn scale_policy(policy: &mut crate::engine::Policy, speed: f64) {
    let scale = |d: Duration| d.div_f64(speed);
    // The simulated kubelets write the real leaseDurationSeconds (40) but renew every
    // 10 s / speed: a derived threshold is scaled like the fixed ones, except at speed 1
    // (the recovery bench), where it is derived from each Lease as on a cluster.
    if speed != 1.0 {
        policy.lease_stale_after = policy
            .lease_stale_after
            .map(|l| LeaseStaleAfter::Fixed(scale(l.for_lease(Some(sim_lease_duration())))));
    }
    policy.unhealthy_after = scale(policy.unhealthy_after);
    policy.recovered_after = scale(policy.recovered_after);
    policy.on_poll_interval = scale(policy.on_poll_interval);
    policy.release_off_after = scale(policy.release_off_after);
    policy.power_off_retry_after = scale(policy.power_off_retry_after);
    policy.remind_every = scale(policy.remind_every);
    policy.min_power_off_interval = scale(policy.min_power_off_interval);
    policy.release_timeout = scale(policy.release_timeout);
    policy.max_query_backoff = scale(policy.max_query_backoff).max(policy.confirm_interval);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loader_accepts_the_demo_files_and_the_policy_is_scaled() {
        let machines = vec![Machine::new("Blade1", "worker-1")];
        let demo = DemoConfig::new(10.0, "http://127.0.0.1:9", "pw", &machines);
        let files = Files::write(&demo).unwrap();
        let (config, wording) = load(&files, &demo, &SimConfig::default(), Profile::Stock).unwrap();
        let p = &config.agent.policy;
        assert_eq!(p.unhealthy_after, wording.unhealthy_after / 10);
        assert_eq!(
            &config.inventory.nodes["worker-1"].policy, p,
            "each node's policy is scaled too"
        );
        assert_eq!(p.confirm_interval, Duration::from_millis(50));
        assert_eq!(p.confirm_readings, CONFIRM_READINGS);
        assert_eq!(wording.grace_period, Duration::from_secs(50));
        assert!(config.inventory.nodes.contains_key("worker-1"));
        assert!(!config.agent.remediation.requests);
        let (remediator, words) =
            load(&files, &demo, &SimConfig::default(), Profile::Remediator).unwrap();
        assert!(remediator.agent.remediation.requests);
        assert_eq!(words.unhealthy_after, REMEDIATOR_UNHEALTHY_AFTER);
        assert_eq!(
            remediator.inventory.nodes["worker-1"]
                .policy
                .unhealthy_after,
            REMEDIATOR_UNHEALTHY_AFTER / 10
        );
        assert!(!p.watchdog_fencing);
        let (watchdog, _) = load(&files, &demo, &SimConfig::default(), Profile::Watchdog).unwrap();
        assert!(watchdog.agent.policy.watchdog_fencing);
        assert!(watchdog.inventory.nodes["worker-1"].policy.watchdog_fencing);
        assert!(!watchdog.agent.remediation.requests);
        let (companions, _) =
            load(&files, &demo, &SimConfig::default(), Profile::Companions).unwrap();
        assert!(
            !companions.agent.policy.watchdog_fencing,
            "no watchdog level"
        );
        assert!(Profile::Companions.listens() && !Profile::Stock.listens());
        let extra = files.add("extra.pem", "x").unwrap();
        assert_eq!(std::fs::read_to_string(&extra).unwrap(), "x");
        let dir = files.dir.clone();
        drop(files);
        assert!(!dir.exists(), "the temporary files are removed");
        assert_eq!(
            demo.leader_timings().retry_period,
            Duration::from_millis(200)
        );
    }

    #[test]
    fn on_vcenter_the_workers_are_vms_found_by_their_node_uuid() {
        use crate::config::PowerSource;
        use crate::power::vsphere::locate::VmSelector;
        let machines = vec![Machine::new("vm-41", "worker-1")];
        let demo = DemoConfig::new(10.0, "http://127.0.0.1:9", "pw", &machines)
            .on_vcenter("https://127.0.0.1:9443", "-----BEGIN CERTIFICATE-----\n");
        let files = Files::write(&demo).unwrap();
        assert!(files.dir.join(VCENTER_CA).is_file());
        let (config, _) = load(&files, &demo, &SimConfig::default(), Profile::Stock).unwrap();
        let node = &config.inventory.nodes["worker-1"];
        let PowerSource::Vsphere(target) = &node.power else {
            panic!("a vsphere node, got {:?}", node.power)
        };
        assert_eq!(target.vm, VmSelector::NodeUuid);
        assert_eq!(target.endpoint.as_str(), "https://127.0.0.1:9443/");
        assert!(
            target
                .tls
                .ca_file
                .as_ref()
                .is_some_and(|p| p.ends_with(VCENTER_CA))
        );
        assert!(node.needs_node_identity());
    }
}
