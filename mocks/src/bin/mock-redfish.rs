//! `mock-redfish`: the mock Redfish BMC as a process, for CI scripts and manual tests.
//!
//! Shell-driven tests (and third-party fence agents) need a BMC on a port, not a
//! library. This binary starts one, prints exactly one line to stdout once it accepts
//! connections (`mock-redfish listening on https://localhost:PORT`) so a script can
//! wait for it, writes the CA for clients to trust if asked, and runs until SIGINT or
//! SIGTERM. Steer it with the `/admin` HTTP API. Logs go to stderr (`RUST_LOG`).

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Parser;
use nodefence_mocks::redfish::{
    DEFAULT_PASSWORD, DEFAULT_USERNAME, Fixture, MockPower, MockRedfish, Profile, ResetResponse,
    Role, SessionLogin, SystemSpec,
};
use nodefence_mocks::tls::CertKind;

/// A mock Redfish BMC (OpenBMC, iDRAC, iLO, multi-system or minimal flavour) with an
/// /admin API to change power, inject faults and read what clients did.
#[derive(Debug, Parser)]
#[command(name = "mock-redfish", version)]
struct Args {
    /// Address to listen on; port 0 picks a free port (printed when ready).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,

    /// Serve HTTPS with a CA and leaf certificate generated at start.
    #[arg(long)]
    tls: bool,

    /// Serve HTTPS presenting this kind of certificate: private-ca (a leaf signed by
    /// a generated CA), self-signed (one CA:TRUE certificate naming localhost, as most
    /// BMCs ship), self-signed-default-name (naming only a vendor default host) or
    /// expired. Implies --tls.
    #[arg(long, value_name = "KIND", value_parser = parse_cert_kind)]
    tls_cert: Option<CertKind>,

    /// Write the generated CA certificate (PEM) here, for clients to trust (for a
    /// self-signed kind: the certificate itself).
    #[arg(long, value_name = "PATH")]
    ca_out: Option<PathBuf>,

    /// Write the certificate the server presents (PEM) here.
    #[arg(long, value_name = "PATH")]
    cert_out: Option<PathBuf>,

    /// How session login behaves: open (as the specification says), basic-required
    /// (the login POST needs HTTP Basic too) or refused (ServiceEnabled false, every
    /// login 401; Basic works elsewhere).
    #[arg(long, default_value = "open", value_parser = parse_session_login)]
    session_login: SessionLogin,

    /// Also accept this user, with the same password, in the ReadOnly role (it can
    /// read everything and Reset nothing).
    #[arg(long, value_name = "NAME")]
    readonly_user: Option<String>,

    /// The status a read-only user's write is refused with (401, as seen in the
    /// field, or 403, as the specification says).
    #[arg(long, default_value_t = 401, value_parser = clap::value_parser!(u16).range(401..=403))]
    privilege_error_status: u16,

    /// Which BMC to imitate: openbmc, idrac, ilo, multi-system or minimal.
    #[arg(long, default_value = "openbmc", value_parser = parse_profile)]
    profile: Profile,

    /// Serve N systems with the profile's ids (System.Embedded.1.., Blade1.., ...).
    #[arg(long, value_name = "N", conflicts_with_all = ["system", "fixture"])]
    systems: Option<usize>,

    /// Serve a system with this id (repeatable).
    #[arg(long = "system", value_name = "ID", conflicts_with = "fixture")]
    system: Vec<String>,

    /// TOML file listing the systems ([[systems]] id, power, uuid, name, reset_types).
    #[arg(long, value_name = "FILE.toml")]
    fixture: Option<PathBuf>,

    /// The only user name accepted.
    #[arg(long, env = "MOCK_REDFISH_USERNAME", default_value = DEFAULT_USERNAME)]
    username: String,

    /// The only password accepted (default "password"); prefer --password-file.
    #[arg(
        long,
        env = "MOCK_REDFISH_PASSWORD",
        hide_env_values = true,
        conflicts_with = "password_file"
    )]
    password: Option<String>,

    /// Read the password from this file (one trailing newline is ignored).
    #[arg(long, value_name = "PATH")]
    password_file: Option<PathBuf>,

    /// How long PoweringOff/PoweringOn last after a Reset, e.g. 2s, 500ms.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    transition_delay: Duration,

    /// Initial power of systems that do not set their own: on or off.
    #[arg(long, default_value = "on", value_parser = parse_power)]
    initial_power: MockPower,

    /// Answer Resets with no-content (204), ok-with-body (200) or accepted-task (202)
    /// instead of the profile's way.
    #[arg(long, value_parser = parse_reset_response)]
    reset_response: Option<ResetResponse>,
}

fn parse_profile(s: &str) -> Result<Profile, String> {
    s.parse()
        .map_err(|e: nodefence_mocks::redfish::ParseProfileError| e.to_string())
}

fn parse_power(s: &str) -> Result<MockPower, String> {
    s.parse()
        .map_err(|e: nodefence_mocks::redfish::ParsePowerError| e.to_string())
}

fn parse_reset_response(s: &str) -> Result<ResetResponse, String> {
    s.parse()
}

fn parse_cert_kind(s: &str) -> Result<CertKind, String> {
    s.parse()
}

fn parse_session_login(s: &str) -> Result<SessionLogin, String> {
    s.parse()
}

fn systems(args: &Args) -> anyhow::Result<Vec<SystemSpec>> {
    let power = args.initial_power;
    if let Some(path) = &args.fixture {
        let fixture = Fixture::load(path)?;
        return Ok(fixture.into_specs(power));
    }
    if !args.system.is_empty() {
        return Ok(args
            .system
            .iter()
            .map(|id| SystemSpec::new(id.clone()).power(power))
            .collect());
    }
    let n = match args.systems {
        Some(0) => bail!("--systems must be at least 1"),
        Some(n) => n,
        None => args.profile.default_systems().len(),
    };
    Ok(args
        .profile
        .system_ids(n)
        .into_iter()
        .map(|id| SystemSpec::new(id).power(power))
        .collect())
}

fn password(args: &Args) -> anyhow::Result<String> {
    if let Some(path) = &args.password_file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading password file {}", path.display()))?;
        let text = text.strip_suffix('\n').unwrap_or(&text);
        let text = text.strip_suffix('\r').unwrap_or(text);
        if text.is_empty() {
            bail!("password file {} is empty", path.display());
        }
        return Ok(text.to_owned());
    }
    Ok(args
        .password
        .clone()
        .unwrap_or_else(|| DEFAULT_PASSWORD.to_owned()))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let signals =
        nodefence_mocks::serve::shutdown_signals().context("installing the signal handlers")?;
    if args.tls_cert.is_none() && !args.tls && (args.ca_out.is_some() || args.cert_out.is_some()) {
        bail!("--ca-out and --cert-out need --tls or --tls-cert");
    }
    let password = password(&args)?;
    let mut builder = MockRedfish::builder()
        .profile(args.profile)
        .systems(systems(&args)?)
        .credentials(args.username.clone(), password.clone())
        .transition_delay(args.transition_delay)
        .tls(args.tls)
        .session_login(args.session_login)
        .privilege_error_status(args.privilege_error_status)
        .listen(args.listen);
    if let Some(kind) = args.tls_cert {
        builder = builder.certificate(kind);
    }
    if let Some(user) = &args.readonly_user {
        builder = builder.account(user.clone(), password, Role::ReadOnly);
    }
    if let Some(response) = args.reset_response {
        builder = builder.reset_response(response);
    }
    let bmc = builder.start().await.context("starting the mock BMC")?;

    if let (Some(path), Some(ca)) = (&args.ca_out, bmc.ca_pem()) {
        std::fs::write(path, ca).with_context(|| format!("writing CA to {}", path.display()))?;
    }
    if let (Some(path), Some(cert)) = (&args.cert_out, bmc.certificate_pem()) {
        std::fs::write(path, cert)
            .with_context(|| format!("writing the certificate to {}", path.display()))?;
    }
    let systems: Vec<String> = bmc.systems().into_iter().map(|s| s.id).collect();
    tracing::info!(profile = %args.profile, ?systems, user = %args.username, "ready");

    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "mock-redfish listening on {}", bmc.base_url())?;
    stdout.flush()?;
    drop(stdout);

    let signal = signals.await;
    tracing::info!("{signal} received, stopping");
    bmc.shutdown().await;
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    nodefence_mocks::serve::init_binary();
    let args = Args::parse();
    match run(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mock-redfish: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
