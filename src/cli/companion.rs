//! `nodefence companion`: the per-node agent of hardware-watchdog fencing, deployed
//! as a DaemonSet ([`crate::companion`]). Stops on SIGTERM (a rolling update): it
//! tells nodefence its watchdog no longer counts, then disarms it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::exit;
use crate::companion::{self, Options, Status, WatchdogChoice};

#[derive(Debug, clap::Args)]
pub struct CompanionArgs {
    /// nodefence's companion listener, `https://host:port`.
    #[arg(long, env = "NODEFENCE_COMPANION_URL", value_name = "URL")]
    pub nodefence: url::Url,
    /// PEM bundle of the CA that signed nodefence's certificate.
    #[arg(long, value_name = "FILE", conflicts_with = "tls_fingerprint")]
    pub ca_file: Option<PathBuf>,
    /// Trust exactly nodefence's certificate with this SHA-256 ("sha256:AB:CD:...").
    #[arg(long, value_name = "PIN")]
    pub tls_fingerprint: Option<crate::tls::CertFingerprint>,
    /// The projected ServiceAccount token (audience `nodefence-companion`).
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/var/run/secrets/nodefence-companion/token"
    )]
    pub token_file: PathBuf,
    /// The node's hardware watchdog.
    #[arg(long, value_name = "PATH", default_value = "/dev/watchdog")]
    pub watchdog_device: PathBuf,
    /// The watchdog timeout to ask for (the driver's granted one is what counts).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = super::duration_arg)]
    pub watchdog_timeout: Duration,
    /// Accept softdog, a kernel timer that a hung kernel never fires.
    #[arg(long)]
    pub allow_softdog: bool,
    /// Beat without arming any watchdog (nothing then rests on one).
    #[arg(long)]
    pub no_watchdog: bool,
}

pub async fn run(args: &CompanionArgs) -> u8 {
    let watchdog = if args.no_watchdog {
        WatchdogChoice::None
    } else {
        WatchdogChoice::Device {
            path: args.watchdog_device.clone(),
            timeout: args.watchdog_timeout,
            allow_softdog: args.allow_softdog,
        }
    };
    let options = Options {
        nodefence: args.nodefence.clone(),
        tls: crate::config::TlsSettings {
            ca_file: args.ca_file.clone(),
            insecure: false,
            fingerprint: args.tls_fingerprint,
        },
        token_file: args.token_file.clone(),
        watchdog,
        replicas: None,
    };
    let status = Arc::new(Mutex::new(Status::default()));
    match companion::run(options, status, super::run::shutdown_signal()).await {
        Ok(_) => exit::OK,
        Err(e) => {
            eprintln!("error: {e:#}");
            exit::FAILED
        }
    }
}
