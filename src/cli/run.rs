//! `nodefence run`: the daemon (see [`crate::daemon`]). Stops on SIGTERM or Ctrl-C,
//! releasing its leader Lease so another replica takes over at once.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::exit;
use crate::cluster::leader::LeaderTimings;
use crate::daemon::{self, DaemonOptions, MetricsEndpoint};
use crate::telemetry::certificate::CertificateSource;

/// --health-listen's default.
const HEALTH: &str = "0.0.0.0:8081";
/// --metrics-listen's default.
const METRICS: &str = "0.0.0.0:8443";

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Read everything and decide everything, log what would be done; send no power
    /// command and write nothing to the cluster.
    #[arg(long)]
    pub dry_run: bool,
    /// Address of /healthz and /readyz (plain HTTP, no authentication: the kubelet's
    /// probes).
    #[arg(long, default_value = HEALTH, value_name = "ADDR")]
    pub health_listen: SocketAddr,
    /// Address of /metrics: HTTPS, and only for bearer tokens the API server
    /// authenticates (TokenReview) and authorizes for `get` on `/metrics`
    /// (SubjectAccessReview; the ClusterRole nodefence-metrics-reader grants it).
    #[arg(long, default_value = METRICS, value_name = "ADDR")]
    pub metrics_listen: SocketAddr,
    /// Removed (it served the probes and /metrics on one address, plain HTTP).
    /// Accepted for one release as --health-listen, with a warning.
    #[arg(
        long,
        hide = true,
        value_name = "ADDR",
        conflicts_with = "health_listen"
    )]
    pub listen: Option<SocketAddr>,
    /// `false`: serve /metrics in plain HTTP to anyone (a daemon run by hand).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub metrics_secure: bool,
    /// PEM certificate (chain) for /metrics, read again when it changes (e.g. a
    /// cert-manager Secret mounted); without it, a self-signed one is made at start.
    #[arg(long, requires = "metrics_key_file", value_name = "FILE")]
    pub metrics_cert_file: Option<PathBuf>,
    /// The private key of --metrics-cert-file (PEM).
    #[arg(long, requires = "metrics_cert_file", value_name = "FILE")]
    pub metrics_key_file: Option<PathBuf>,
    #[command(flatten)]
    pub cluster: super::cluster_args::ClusterArgs,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "nodefence")]
    pub lease_name: String,
    /// This replica's identity in the Lease (default: $POD_NAME, else the host name, plus a random suffix).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// How long a Lease not renewed keeps the standby away: after a leader crashes
    /// (no Lease released, as on a SIGTERM), the standby leads this long after the
    /// last renewal it saw. kube-controller-manager's flag and default. Shorter fails
    /// over sooner (6s/4s/1s: about 7 s), at the cost of a leader stepping down on
    /// shorter API-server trouble; either way no two replicas act at once.
    #[arg(long, default_value = "15s", value_parser = super::duration_arg, value_name = "DURATION")]
    pub leader_elect_lease_duration: std::time::Duration,
    /// The leader stops acting (no power command, no release, no acknowledgement as
    /// the leader) when no renewal succeeded for this long; less than
    /// --leader-elect-lease-duration.
    #[arg(long, default_value = "10s", value_parser = super::duration_arg, value_name = "DURATION")]
    pub leader_elect_renew_deadline: std::time::Duration,
    /// The pause between attempts to renew or to acquire the Lease.
    #[arg(long, default_value = "2s", value_parser = super::duration_arg, value_name = "DURATION")]
    pub leader_elect_retry_period: std::time::Duration,
    /// How often the configuration files are checked for changes and a changed,
    /// valid version applied without a restart (SIGHUP checks at once); "0s": never.
    #[arg(long, default_value = "10s", value_parser = super::duration_arg, value_name = "DURATION")]
    pub config_check_interval: std::time::Duration,
    /// Hear the companions (`nodefence companion`, the DaemonSet of
    /// deploy/components/companion) on this address: HTTPS hellos (TCP) and beats
    /// (UDP), one port, with /metrics' certificate (self-signed without one). A node
    /// whose companion falls silent for --heartbeat-timeout is suspect at once.
    #[arg(long, value_name = "ADDR")]
    pub companion_listen: Option<SocketAddr>,
    /// The companions' ServiceAccount, in this namespace: only its tokens may say hello.
    #[arg(long, default_value = "nodefence-companion", value_name = "NAME")]
    pub companion_service_account: String,
    /// How often companions beat.
    #[arg(long, default_value = "500ms", value_parser = super::duration_arg, value_name = "DURATION")]
    pub heartbeat_interval: std::time::Duration,
    /// A companion that was beating and is silent this long makes its node suspect
    /// (its machine's power is read; a release still needs it Off). At least two
    /// --heartbeat-interval.
    #[arg(long, default_value = "2s", value_parser = super::duration_arg, value_name = "DURATION")]
    pub heartbeat_timeout: std::time::Duration,
}

impl RunArgs {
    /// The probes' address: --health-listen, or the removed --listen (an old
    /// Deployment's probes still point at its port, so they keep working).
    pub fn health_listen(&self) -> SocketAddr {
        self.listen.unwrap_or(self.health_listen)
    }

    /// What to say when the removed --listen is given.
    pub fn removed_flag_warning(&self) -> Option<String> {
        self.listen.map(|addr| {
            format!(
                "--listen is deprecated and will be removed in the next release: it served \
                 /healthz, /readyz and /metrics on one address. Its two replacements: \
                 --health-listen (the probes, plain HTTP; default {HEALTH}) and \
                 --metrics-listen (/metrics over HTTPS for authorized tokens; default \
                 {METRICS}). This run serves the probes on {addr} (as --health-listen={addr}) \
                 and /metrics on {}",
                self.metrics_listen
            )
        })
    }

    /// The leader election's timings, from `--leader-elect-*`, checked as client-go
    /// checks its own: the lease longer than the renew deadline, the renew deadline
    /// longer than 1.2 retry periods (the retry's jitter), and room for the clocks.
    pub fn leader_timings(&self) -> Result<LeaderTimings, String> {
        let timings = LeaderTimings {
            lease_duration: self.leader_elect_lease_duration,
            renew_deadline: self.leader_elect_renew_deadline,
            retry_period: self.leader_elect_retry_period,
        };
        let show = |d: std::time::Duration| humantime::format_duration(d).to_string();
        if timings.retry_period < std::time::Duration::from_millis(100) {
            return Err(format!(
                "--leader-elect-retry-period ({}) must be at least 100ms",
                show(timings.retry_period)
            ));
        }
        if timings.renew_deadline <= timings.retry_period.mul_f64(1.2) {
            return Err(format!(
                "--leader-elect-renew-deadline ({}) must be more than 1.2 --leader-elect-retry-period ({}): a renewal must have time to be tried again",
                show(timings.renew_deadline),
                show(timings.retry_period)
            ));
        }
        // The leader stops at its renew deadline on its own clock, the standby starts
        // at the lease's end on its own: 2 % of the lease covers the clocks' rates.
        if timings.lease_duration.mul_f64(0.98) <= timings.renew_deadline {
            return Err(format!(
                "--leader-elect-lease-duration ({}) must be more than --leader-elect-renew-deadline ({}) by at least 2 %: the leader must have stopped acting before a standby may lead",
                show(timings.lease_duration),
                show(timings.renew_deadline)
            ));
        }
        Ok(timings)
    }

    /// The companions' listener, from `--companion-*` and `--heartbeat-*`.
    pub fn companions(
        &self,
        metrics: &MetricsEndpoint,
    ) -> Result<Option<daemon::CompanionSource>, String> {
        let Some(listen) = self.companion_listen else {
            return Ok(None);
        };
        if self.heartbeat_interval < std::time::Duration::from_millis(50) {
            return Err("--heartbeat-interval must be at least 50ms".into());
        }
        if self.heartbeat_timeout < self.heartbeat_interval * 2 {
            return Err(format!(
                "--heartbeat-timeout ({}) must be at least two --heartbeat-interval ({}): one lost datagram must not make a node suspect",
                humantime::format_duration(self.heartbeat_timeout),
                humantime::format_duration(self.heartbeat_interval)
            ));
        }
        Ok(Some(daemon::CompanionSource::Listen(
            daemon::CompanionListener {
                listen,
                service_account: self.companion_service_account.clone(),
                certificate: metrics
                    .secure
                    .clone()
                    .unwrap_or(CertificateSource::SelfSigned),
                heartbeat_interval: self.heartbeat_interval,
                heartbeat_timeout: self.heartbeat_timeout,
            },
        )))
    }

    /// How /metrics is served, from `--metrics-*`.
    pub fn metrics_endpoint(&self) -> Result<MetricsEndpoint, String> {
        let certificate = match (&self.metrics_cert_file, &self.metrics_key_file) {
            (Some(cert), Some(key)) => Some(CertificateSource::Files {
                cert: cert.clone(),
                key: key.clone(),
            }),
            _ => None,
        };
        if !self.metrics_secure {
            if certificate.is_some() {
                return Err(
                    "--metrics-cert-file is for HTTPS: drop it, or --metrics-secure=false".into(),
                );
            }
            return Ok(MetricsEndpoint::plain(self.metrics_listen));
        }
        Ok(MetricsEndpoint {
            listen: self.metrics_listen,
            secure: Some(certificate.unwrap_or(CertificateSource::SelfSigned)),
        })
    }
}

pub async fn run(config_path: &Path, args: &RunArgs) -> u8 {
    if let Some(warning) = args.removed_flag_warning() {
        tracing::warn!("{warning}");
    }
    let metrics = match args.metrics_endpoint() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::USAGE;
        }
    };
    let leader_timings = match args.leader_timings() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::USAGE;
        }
    };
    let companions = match args.companions(&metrics) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::USAGE;
        }
    };
    let config = match super::load_config(config_path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let client = match args.cluster.client().await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: cannot configure the Kubernetes client: {e:#}");
            return exit::FAILED;
        }
    };
    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let options = DaemonOptions {
        drivers: Default::default(),
        dry_run: args.dry_run,
        health_listen: args.health_listen(),
        metrics,
        lease_namespace: args.cluster.namespace.clone(),
        lease_name: args.lease_name.clone(),
        identity,
        leader_timings,
        config_check: (!args.config_check_interval.is_zero()).then_some(args.config_check_interval),
        companions,
    };
    match daemon::run(config, client, options, shutdown_signal()).await {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("error: {e:#}");
            exit::FAILED
        }
    }
}

fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "nodefence".into());
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}", &suffix[..8])
}

/// Resolves on SIGTERM or Ctrl-C.
pub(super) async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(
            tokio::signal::unix::SignalKind::terminate(),
        ) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch SIGTERM; only Ctrl-C stops the daemon");
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn endpoint(args: &[&str]) -> Result<MetricsEndpoint, String> {
        let argv = std::iter::once("run").chain(args.iter().copied());
        Cli::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .run
            .metrics_endpoint()
    }

    fn parse(args: &[&str]) -> Result<RunArgs, String> {
        let argv = std::iter::once("run").chain(args.iter().copied());
        Cli::try_parse_from(argv)
            .map(|c| c.run)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_removed_listen_flag_is_accepted_as_health_listen_with_a_warning() {
        let old = parse(&["--listen=0.0.0.0:9464"]).unwrap();
        assert_eq!(old.health_listen(), "0.0.0.0:9464".parse().unwrap());
        assert_eq!(old.metrics_listen, METRICS.parse().unwrap());
        let warning = old.removed_flag_warning().unwrap();
        for says in [
            "--listen is deprecated",
            "--health-listen",
            "--metrics-listen",
            "probes on 0.0.0.0:9464",
            "/metrics on 0.0.0.0:8443",
        ] {
            assert!(warning.contains(says), "{says}: {warning}");
        }
        let new = parse(&["--health-listen=127.0.0.1:8081"]).unwrap();
        assert_eq!(new.health_listen(), "127.0.0.1:8081".parse().unwrap());
        assert_eq!(new.removed_flag_warning(), None);
        // Not both: which one would the probes be on?
        let e = parse(&["--listen=0.0.0.0:9464", "--health-listen=0.0.0.0:8081"])
            .err()
            .unwrap();
        assert!(e.contains("--health-listen"), "{e}");
        // Hidden from help: it is not to be used any more.
        let help = <Cli as clap::CommandFactory>::command()
            .render_help()
            .to_string();
        assert!(!help.contains("--listen "), "{help}");
    }

    #[test]
    fn the_leader_election_timings_default_to_client_gos_and_are_checked() {
        let stock = parse(&[]).unwrap().leader_timings().unwrap();
        assert_eq!(stock, LeaderTimings::default());
        let short = parse(&[
            "--leader-elect-lease-duration=6s",
            "--leader-elect-renew-deadline=4s",
            "--leader-elect-retry-period=1s",
        ])
        .unwrap()
        .leader_timings()
        .unwrap();
        assert_eq!(short, LeaderTimings::SHIPPED);
        // The leader must stop acting before a standby may lead.
        for (args, says) in [
            (
                &["--leader-elect-lease-duration=10s"][..],
                "must be more than --leader-elect-renew-deadline (10s)",
            ),
            (
                &[
                    "--leader-elect-lease-duration=10s",
                    "--leader-elect-renew-deadline=9900ms",
                ][..],
                "by at least 2 %",
            ),
            (
                &["--leader-elect-renew-deadline=2s"][..],
                "more than 1.2 --leader-elect-retry-period (2s)",
            ),
            (&["--leader-elect-retry-period=50ms"][..], "at least 100ms"),
        ] {
            let e = parse(args).unwrap().leader_timings().unwrap_err();
            assert!(e.contains(says), "{args:?}: {e}");
        }
    }

    #[test]
    fn the_companions_listener_is_off_unless_asked_and_its_timing_checked() {
        let metrics = MetricsEndpoint::secure(METRICS.parse().unwrap());
        assert!(parse(&[]).unwrap().companions(&metrics).unwrap().is_none());
        let Some(daemon::CompanionSource::Listen(on)) = parse(&["--companion-listen=0.0.0.0:9440"])
            .unwrap()
            .companions(&metrics)
            .unwrap()
        else {
            panic!("a listener");
        };
        assert_eq!(on.listen, "0.0.0.0:9440".parse().unwrap());
        assert_eq!(on.service_account, "nodefence-companion");
        assert_eq!(
            (on.heartbeat_interval, on.heartbeat_timeout),
            (
                crate::heartbeat::DEFAULT_HEARTBEAT_INTERVAL,
                crate::heartbeat::DEFAULT_HEARTBEAT_TIMEOUT
            )
        );
        assert_eq!(on.certificate, CertificateSource::SelfSigned);
        let e = parse(&[
            "--companion-listen=0.0.0.0:9440",
            "--heartbeat-interval=1s",
            "--heartbeat-timeout=1500ms",
        ])
        .unwrap()
        .companions(&metrics)
        .unwrap_err();
        assert!(e.contains("two --heartbeat-interval"), "{e}");
        let e = parse(&[
            "--companion-listen=0.0.0.0:9440",
            "--heartbeat-interval=10ms",
        ])
        .unwrap()
        .companions(&metrics)
        .unwrap_err();
        assert!(e.contains("at least 50ms"), "{e}");
    }

    #[test]
    fn metrics_are_guarded_unless_asked_otherwise() {
        let default = endpoint(&[]).unwrap();
        assert_eq!(default.listen, "0.0.0.0:8443".parse().unwrap());
        assert_eq!(default.secure, Some(CertificateSource::SelfSigned));

        let files = endpoint(&["--metrics-cert-file=/c.pem", "--metrics-key-file=/k.pem"]).unwrap();
        assert_eq!(
            files.secure,
            Some(CertificateSource::Files {
                cert: "/c.pem".into(),
                key: "/k.pem".into()
            })
        );
        // One file without the other is refused by the parser.
        let e = endpoint(&["--metrics-cert-file=/c.pem"]).unwrap_err();
        assert!(e.contains("--metrics-key-file"), "{e}");

        let plain = endpoint(&["--metrics-secure=false"]).unwrap();
        assert_eq!(plain.secure, None);
        let e = endpoint(&[
            "--metrics-secure=false",
            "--metrics-cert-file=/c.pem",
            "--metrics-key-file=/k.pem",
        ])
        .unwrap_err();
        assert!(e.contains("--metrics-secure=false"), "{e}");
    }
}
