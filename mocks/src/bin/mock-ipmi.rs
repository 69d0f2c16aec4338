//! `mock-ipmi`: mock IPMI v2.0 (RMCP+) BMCs as a process, for CI scripts, ipmitool and
//! manual tests.
//!
//! Starts one BMC (`--listen`), several (`--bmc NAME=ADDR`, repeatable) or those of a
//! TOML fixture (`--fixture`), each on its own UDP port, and prints exactly one line
//! per BMC once it is ready: `mock-ipmi NAME listening on udp://127.0.0.1:PORT`. With
//! `--admin ADDR` it also serves the admin HTTP API (power, faults, logs; see
//! `nodefence_mocks::ipmi::admin_router`) and prints one more line first:
//! `mock-ipmi admin on http://127.0.0.1:PORT`. Runs until SIGINT or SIGTERM. Logs go
//! to stderr (`RUST_LOG`); passwords and keys are never logged.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Parser;
use nodefence_mocks::ipmi::{
    CipherSuite, DEFAULT_MAX_SESSIONS, DEFAULT_PASSWORD, DEFAULT_USERNAME, Fixture, MockIpmi,
    MockIpmiHandle, Power, Privilege, admin_router, parse_guid, parse_hex, parse_privilege,
    parse_suite, read_password_file,
};

/// Mock IPMI v2.0 BMCs (RMCP+, cipher suites 3 and 17) with an optional admin HTTP API
/// to change power, inject faults and read what clients did.
#[derive(Debug, Parser)]
#[command(name = "mock-ipmi", version)]
struct Args {
    /// UDP address of the single BMC (named "bmc"); port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0", conflicts_with_all = ["bmc", "fixture"])]
    listen: SocketAddr,

    /// A BMC named NAME on ADDR (repeatable), e.g. --bmc node-1=127.0.0.1:0.
    #[arg(long, value_name = "NAME=ADDR", value_parser = parse_bmc, conflicts_with = "fixture")]
    bmc: Vec<(String, SocketAddr)>,

    /// TOML file listing the BMCs (`[[bmc]]` name, listen, power, guid, users, ...).
    #[arg(long, value_name = "FILE.toml")]
    fixture: Option<PathBuf>,

    /// The user name the BMCs accept (unless a fixture gives users).
    #[arg(long, env = "MOCK_IPMI_USERNAME", default_value = DEFAULT_USERNAME)]
    username: String,

    /// That user's password (default "password"); prefer --password-file.
    #[arg(
        long,
        env = "MOCK_IPMI_PASSWORD",
        hide_env_values = true,
        conflicts_with = "password_file"
    )]
    password: Option<String>,

    /// Read the password from this file (one trailing newline is ignored).
    #[arg(long, value_name = "PATH")]
    password_file: Option<PathBuf>,

    /// That user's maximum privilege: administrator, operator, user or callback.
    #[arg(long, default_value = "administrator", value_parser = parse_privilege)]
    privilege: Privilege,

    /// The BMC key K_g, in hex (at most 20 bytes).
    #[arg(long, value_name = "HEX")]
    kg_hex: Option<String>,

    /// Cipher suites offered, in order.
    #[arg(long, value_delimiter = ',', default_value = "3,17", value_parser = parse_suite)]
    suites: Vec<CipherSuite>,

    /// Initial power: on or off.
    #[arg(long, default_value = "on")]
    power: Power,

    /// System GUID in wire order, 32 hex digits (default: random); one BMC only.
    #[arg(long, value_name = "HEX", value_parser = parse_guid)]
    guid: Option<[u8; 16]>,

    /// How long a Chassis Control takes to change the power, e.g. 2s, 500ms.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    transition_delay: Duration,

    /// Session inactivity timeout.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    session_timeout: Duration,

    /// Sessions (established or half-open) per BMC before Open Session is refused.
    #[arg(long, default_value_t = DEFAULT_MAX_SESSIONS)]
    max_sessions: usize,

    /// Serve the admin HTTP API here (e.g. 127.0.0.1:0).
    #[arg(long, value_name = "ADDR")]
    admin: Option<SocketAddr>,
}

fn parse_bmc(s: &str) -> Result<(String, SocketAddr), String> {
    let (name, addr) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected NAME=ADDR"))?;
    if name.is_empty() {
        return Err(format!("{s:?}: empty BMC name"));
    }
    let addr = addr
        .parse()
        .map_err(|e| format!("{s:?}: bad address: {e}"))?;
    Ok((name.to_owned(), addr))
}

fn password(args: &Args) -> anyhow::Result<String> {
    if let Some(path) = &args.password_file {
        return Ok(read_password_file(path)?);
    }
    Ok(args
        .password
        .clone()
        .unwrap_or_else(|| DEFAULT_PASSWORD.to_owned()))
}

/// The builders for every BMC to start.
fn builders(args: &Args) -> anyhow::Result<Vec<MockIpmi>> {
    let mut base = MockIpmi::builder()
        .user(args.username.clone(), password(args)?, args.privilege)
        .suites(args.suites.clone())
        .power(args.power)
        .transition_delay(args.transition_delay)
        .session_timeout(args.session_timeout)
        .max_sessions(args.max_sessions);
    if let Some(kg) = &args.kg_hex {
        base = base.kg(parse_hex(kg).context("--kg-hex")?);
    }
    if let Some(path) = &args.fixture {
        let fixture = Fixture::load(path)?;
        if args.guid.is_some() {
            bail!("--guid applies to one BMC; set guid in the fixture instead");
        }
        return Ok(fixture.builders(&base)?);
    }
    let bmcs = if args.bmc.is_empty() {
        vec![("bmc".to_owned(), args.listen)]
    } else {
        args.bmc.clone()
    };
    if let Some(guid) = args.guid {
        if bmcs.len() > 1 {
            bail!("--guid applies to one BMC; use a fixture to give several BMCs GUIDs");
        }
        base = base.guid(guid);
    }
    for (i, (name, _)) in bmcs.iter().enumerate() {
        if bmcs.iter().take(i).any(|(n, _)| n == name) {
            bail!("BMC name {name:?} given twice");
        }
    }
    Ok(bmcs
        .into_iter()
        .map(|(name, addr)| base.clone().name(name).listen(addr))
        .collect())
}

async fn run(args: Args) -> anyhow::Result<()> {
    let signals =
        nodefence_mocks::serve::shutdown_signals().context("installing the signal handlers")?;
    let mut bmcs: Vec<MockIpmiHandle> = Vec::new();
    for builder in builders(&args)? {
        bmcs.push(builder.start().await.context("starting a mock BMC")?);
    }
    let admin = match args.admin {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding the admin API on {addr}"))?;
            let bound = listener.local_addr()?;
            let app = admin_router(&bmcs);
            let task = tokio::spawn(async move { axum::serve(listener, app).await });
            Some((bound, task))
        }
        None => None,
    };

    let mut stdout = std::io::stdout().lock();
    if let Some((addr, _)) = &admin {
        writeln!(stdout, "mock-ipmi admin on http://{addr}")?;
    }
    for bmc in &bmcs {
        writeln!(
            stdout,
            "mock-ipmi {} listening on udp://{}",
            bmc.name(),
            bmc.addr()
        )?;
    }
    stdout.flush()?;
    drop(stdout);
    tracing::info!(user = %args.username, bmcs = bmcs.len(), "ready");

    let signal = signals.await;
    tracing::info!("{signal} received, stopping");
    if let Some((_, task)) = admin {
        task.abort();
    }
    for bmc in bmcs {
        bmc.shutdown().await;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    nodefence_mocks::serve::init_binary();
    let args = Args::parse();
    match run(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mock-ipmi: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
