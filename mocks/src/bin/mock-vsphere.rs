//! `mock-vsphere`: the mock vCenter (or ESXi host) as a process, for scripts, manual
//! tests and fence agents. Starts one on HTTPS, prints exactly one line to stdout once
//! it accepts connections (`mock-vsphere listening on https://localhost:PORT`),
//! writes the CA for clients to trust if asked, and runs until SIGINT or SIGTERM.
//! Steer it with the `/admin` HTTP API. Logs go to stderr (`RUST_LOG`).

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Parser;
use nodefence_mocks::vsphere::{
    DEFAULT_PASSWORD, DEFAULT_USERNAME, MockVsphere, Product, VmPower, VmSpec,
};

#[derive(Debug, Parser)]
#[command(name = "mock-vsphere", version)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,

    /// Write the CA certificate clients must trust here.
    #[arg(long, value_name = "PATH")]
    ca_out: Option<PathBuf>,

    /// `vcenter` (vm-NN ids) or `esxi` (ha-* ids, numeric VM ids).
    #[arg(long, default_value = "vcenter", value_parser = parse_product)]
    product: Product,

    /// A VM: `NAME` or `NAME=BIOS-UUID`, in the datacenter's `vm` folder (repeat).
    #[arg(long = "vm", value_name = "NAME[=UUID]", required = true)]
    vm: Vec<String>,

    #[arg(long, env = "MOCK_VSPHERE_USERNAME", default_value = DEFAULT_USERNAME)]
    username: String,

    #[arg(long, env = "MOCK_VSPHERE_PASSWORD", hide_env_values = true)]
    password: Option<String>,

    /// How long a power task takes before it ends.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    task_delay: Duration,

    /// Every VM's power at start: poweredOn, poweredOff or suspended.
    #[arg(long, default_value = "poweredOn")]
    initial_power: VmPower,
}

fn parse_product(s: &str) -> Result<Product, String> {
    match s {
        "vcenter" => Ok(Product::VCenter),
        "esxi" => Ok(Product::Esxi),
        other => Err(format!("unknown product {other:?} (vcenter or esxi)")),
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let signals =
        nodefence_mocks::serve::shutdown_signals().context("installing the signal handlers")?;
    let mut builder = MockVsphere::builder()
        .product(args.product)
        .credentials(
            args.username.clone(),
            args.password
                .clone()
                .unwrap_or_else(|| DEFAULT_PASSWORD.to_owned()),
        )
        .task_delay(args.task_delay)
        .listen(args.listen);
    for vm in &args.vm {
        let (name, uuid) = match vm.split_once('=') {
            Some((name, uuid)) => (name, Some(uuid)),
            None => (vm.as_str(), None),
        };
        if name.is_empty() {
            bail!("--vm {vm:?}: the VM needs a name");
        }
        let mut spec = VmSpec::new(name).power(args.initial_power);
        if let Some(uuid) = uuid {
            uuid::Uuid::parse_str(uuid).with_context(|| format!("--vm {vm:?}: not a UUID"))?;
            spec = spec.bios_uuid(uuid);
        }
        builder = builder.vm(spec);
    }
    let vc = builder.start().await.context("starting the mock vSphere")?;
    if let Some(path) = &args.ca_out {
        std::fs::write(path, vc.ca_pem())
            .with_context(|| format!("writing CA to {}", path.display()))?;
    }
    let vms: Vec<String> = vc.vms().into_iter().map(|v| v.moid).collect();
    tracing::info!(?vms, user = %args.username, "ready");
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "mock-vsphere listening on {}", vc.base_url())?;
    stdout.flush()?;
    drop(stdout);

    let signal = signals.await;
    tracing::info!("{signal} received, stopping");
    vc.shutdown().await;
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    nodefence_mocks::serve::init_binary();
    let args = Args::parse();
    match run(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mock-vsphere: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
