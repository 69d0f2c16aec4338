//! `nodefence companion`: the per-node agent of hardware-watchdog fencing, deployed
//! as a DaemonSet ([`crate::companion`]). Stops on SIGTERM (a rolling update): it
//! tells nodefence its watchdog no longer counts, then disarms it. It reads its own
//! Node from the API server when the leader is silent (the in-cluster ServiceAccount,
//! or `--kubeconfig`), and refuses to start without that access or the boot ID.

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
    /// Arm this hardware watchdog (e.g. /dev/watchdog), once feeding is first allowed.
    /// Without `--peers`, an outage of the whole control plane longer than the
    /// isolation timeout plus the watchdog's timeout resets the machine.
    #[arg(long, value_name = "PATH")]
    pub watchdog_device: Option<PathBuf>,
    /// The watchdog timeout to ask for (the driver's granted one is what counts).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = super::duration_arg)]
    pub watchdog_timeout: Duration,
    /// Accept softdog, a kernel timer that a hung kernel never fires.
    #[arg(long, requires = "watchdog_device")]
    pub allow_softdog: bool,
    /// kubeconfig for reading this node's Node when the leader is silent (default: the
    /// in-cluster ServiceAccount, then $KUBECONFIG or ~/.kube/config).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// This machine's boot ID: a fencing mark for another boot is void.
    #[arg(long, value_name = "FILE", default_value = crate::companion::api::BOOT_ID_FILE)]
    pub boot_id_file: PathBuf,
    /// The other companions, asked when neither the leader nor the API server
    /// answers (the feeding rule's third basis): `host:port` (the headless Service
    /// nodefence-companion-peers) or `ip:port,ip:port,...`.
    #[arg(long, value_name = "PEERS")]
    pub peers: Option<crate::companion::peers::PeerSource>,
    /// Where this companion hears its peers (UDP).
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:9441")]
    pub peer_listen: std::net::SocketAddr,
    /// A directory that outlives the process but not the pod (an emptyDir, medium
    /// Memory): the node, the cluster's size, the replicas' peer and authority keys,
    /// this companion's credentials and its private key are kept there (mode 0600), so
    /// a companion restarted after a crash feeds its still-armed watchdog on its peers'
    /// answers, and answers them, even while the whole control plane is out.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<std::path::PathBuf>,
}

pub async fn run(args: &CompanionArgs) -> u8 {
    let watchdog = match &args.watchdog_device {
        None => WatchdogChoice::None,
        Some(path) => {
            if args.peers.is_none() {
                tracing::warn!(
                    device = %path.display(),
                    "a watchdog to arm without --peers: only the leader's and the API server's \
                     answers feed it, so an outage of the whole control plane longer than 2s \
                     plus its timeout resets this machine"
                );
            }
            WatchdogChoice::Device {
                path: path.clone(),
                timeout: args.watchdog_timeout,
                allow_softdog: args.allow_softdog,
            }
        }
    };
    let boot_id = match crate::companion::api::read_boot_id(&args.boot_id_file) {
        Ok(id) => id,
        Err(e) => {
            eprintln!(
                "error: cannot read this machine's boot ID from {}: {e} (a fencing mark is for \
                 one boot: without it none can be told apart)",
                args.boot_id_file.display()
            );
            return exit::FAILED;
        }
    };
    let client = match super::cluster_args::client(args.kubeconfig.as_deref()).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "error: no access to the API server, which the companion reads its Node from \
                 when the leader is silent: {e:#}\n  help: in a pod, mount the ServiceAccount \
                 token (deploy/components/companion does); elsewhere, pass --kubeconfig"
            );
            return exit::FAILED;
        }
    };
    let peers = match &args.peers {
        None => None,
        Some(source) => {
            let options = crate::companion::peers::PeerOptions {
                listen: args.peer_listen,
                peers: source.clone(),
            };
            match crate::companion::peers::bind(&options).await {
                Ok(socket) => Some((socket, source.clone())),
                Err(e) => {
                    eprintln!(
                        "error: cannot hear the peers on {} (--peer-listen): {e}",
                        args.peer_listen
                    );
                    return exit::FAILED;
                }
            }
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
        api: Some(crate::companion::api::ApiAccess { client }),
        peers,
        state_dir: args.state_dir.clone(),
        resolver: crate::companion::Resolver::system(),
        realtime: true,
        boot_id,
        machine: crate::companion::machine::MachineKind::Detect,
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
