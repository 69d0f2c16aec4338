//! The command line: one module per subcommand, this file only parses and dispatches.
//!
//! Exit codes are part of the interface (scripts and runbooks test them):
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success: config valid, every queried node answered, or the action is confirmed |
//! | 1 | failure: a node could not be queried, or the action was not confirmed |
//! | 2 | usage error: bad flags, or a node that is not in the inventory |
//! | 3 | the configuration is invalid (every problem is printed) |
//! | 4 | aborted: the confirmation prompt was declined or could not be shown |
//! | 5 | refused: `fence` was not sent, the machine is not proven to be the node's own |

mod cluster_args;
mod companion;
#[cfg(feature = "demo")]
mod demo;
mod explain;
mod fence;
mod logging;
// `nodefence demo` in a build without the `demo` feature (the image): it says where
// the demo is. The default build's unit tests check it too.
#[cfg(any(test, not(feature = "demo")))]
mod no_demo;
#[cfg(not(feature = "demo"))]
use no_demo as demo;
mod pause;
mod run;
mod status;
mod table;
mod tls_fingerprint;
mod validate;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

pub use logging::LogFormat;

/// A duration flag ("10s", "2m"), bounded like every duration in the configuration so
/// that no timer built from it can overflow.
fn duration_arg(raw: &str) -> Result<std::time::Duration, String> {
    let d = humantime::parse_duration(raw.trim()).map_err(|e| format!("{raw:?}: {e}"))?;
    if d > crate::config::MAX_DURATION {
        return Err(format!(
            "{raw:?} is above the longest duration nodefence accepts ({})",
            crate::config::max_duration_text()
        ));
    }
    Ok(d)
}

/// Exit codes, see the module documentation.
pub mod exit {
    pub const OK: u8 = 0;
    pub const FAILED: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const CONFIG: u8 = 3;
    pub const ABORTED: u8 = 4;
    pub const REFUSED: u8 = 5;
}

const ABOUT: &str = "Fences dead Kubernetes nodes through their BMC and releases their volumes, \
only once the machine is confirmed powered off.";

const AFTER_HELP: &str = "\
Exit codes: 0 success, 1 failure (query failed or action not confirmed), 2 usage error, \
3 invalid configuration, 4 aborted at the confirmation prompt, 5 refused: the machine a \
fence command would reach is not proven to be the node's own.

Examples:
  nodefence validate --config /etc/nodefence/nodefence.toml
  nodefence status                      # every inventory node, queried concurrently
  nodefence status worker-1 -o json
  nodefence fence worker-1 --action off # checks the machine is the node's own, asks first
  nodefence tls-fingerprint worker-1    # the certificate its BMC presents, to pin it";

#[derive(Debug, Parser)]
#[command(name = "nodefence", version, about = ABOUT, after_help = AFTER_HELP)]
pub struct Cli {
    /// Agent configuration file; it names the inventory.
    #[arg(
        long,
        short = 'c',
        global = true,
        env = "NODEFENCE_CONFIG",
        default_value = "/etc/nodefence/nodefence.toml"
    )]
    pub config: PathBuf,

    /// Log filter, e.g. "info" or "nodefence=debug" (logs go to standard error).
    #[arg(long, global = true, env = "NODEFENCE_LOG", default_value = "warn")]
    pub log_level: String,

    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check the configuration and inventory; print every problem at once.
    Validate(validate::ValidateArgs),
    /// Ask each node's out-of-band controller for its power state.
    Status(status::StatusArgs),
    /// Power a node off, on, or through an observed off-on cycle, and confirm it.
    Fence(fence::FenceArgs),
    /// The daemon: watch nodes, confirm dead machines are off, release their volumes.
    Run(run::RunArgs),
    /// The whole story on this machine: a simulated cluster, a mock BMC, the real daemon.
    #[cfg_attr(not(feature = "demo"), command(about = no_demo::ABOUT, long_about = None))]
    Demo(demo::DemoArgs),
    /// Stop all fencing cluster-wide (planned maintenance, upgrades); `--show` to read.
    Pause(pause::PauseArgs),
    /// Undo `nodefence pause`.
    Resume(pause::ResumeArgs),
    /// What nodefence sees about one node and what it would do now.
    Explain(explain::ExplainArgs),
    /// The per-node agent of hardware-watchdog fencing (a DaemonSet): arms the node's
    /// watchdog and feeds it only while nodefence says it may.
    Companion(companion::CompanionArgs),
    /// Show the TLS certificate a node's BMC (or a URL) presents and the inventory
    /// line that trusts exactly it.
    TlsFingerprint(tls_fingerprint::TlsFingerprintArgs),
}

/// Output format of `status` and `fence`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
}

/// The daemon's runtime workers: one. At 5,000 nodes it reads 500 Lease renewals a
/// second and 17 BMCs a second, at about 5 % of a core: a second worker only adds
/// wake-ups of one worker by the other (a context switch each, half the daemon's CPU
/// with two; the default is one worker per core, 64 on a large node). Nothing the
/// daemon runs blocks a worker: file reads of the configuration's reload are
/// `spawn_blocking`, and a slow BMC or API server is awaited, not waited for. Fleet
/// bench, 60 s inside the monitor's first pass: 4,400 context switches in 20 s with
/// one worker, 10,700 with two (and 29,600 with the daemon on `block_on`'s thread).
pub const DAEMON_WORKER_THREADS: usize = 1;

/// Runs the parsed command line and returns the process exit code.
pub fn run(cli: Cli) -> ExitCode {
    let writer = if matches!(cli.command, Command::Companion(_)) {
        logging::Writer::NonBlocking
    } else {
        logging::Writer::Blocking
    };
    let _log_writer = logging::init(&cli.log_level, cli.log_format, writer);
    let runtime = match runtime_for(&cli.command) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::FAILED);
        }
    };
    let Cli {
        config, command, ..
    } = cli;
    // The daemon runs on the runtime's workers (see `on_a_worker`); the one-shot
    // commands, on this thread.
    let code = match command {
        Command::Run(args) => {
            runtime.block_on(on_a_worker(async move { run::run(&config, &args).await }))
        }
        command => runtime.block_on(one_shot(&config, &command)),
    };
    ExitCode::from(code)
}

/// Runs a command other than `run`.
async fn one_shot(config: &std::path::Path, command: &Command) -> u8 {
    match command {
        Command::Validate(args) => validate::run_with(config, args).await,
        Command::Status(args) => status::run(config, args).await,
        Command::Fence(args) => fence::run(config, args).await,
        Command::Run(args) => run::run(config, args).await,
        Command::Demo(args) => demo::run(args).await,
        Command::Pause(args) => pause::pause(args).await,
        Command::Resume(args) => pause::resume(args).await,
        Command::Explain(args) => explain::run(config, args).await,
        Command::TlsFingerprint(args) => tls_fingerprint::run(config, args).await,
        Command::Companion(args) => companion::run(args).await,
    }
}

/// The async runtime `command` runs on: [`DAEMON_WORKER_THREADS`] workers for the
/// daemon, one a core for the one-shot commands (a `status` of every node, concurrent).
fn runtime_for(command: &Command) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if matches!(command, Command::Run(_)) {
        builder.worker_threads(DAEMON_WORKER_THREADS);
    }
    builder.enable_all().build()
}

/// Runs `task` as a task of the runtime's worker threads and waits for its exit code.
///
/// `block_on` polls its future on the calling thread, which is not one of the
/// runtime's workers: every wake-up of it (each watch event the daemon reads: 500
/// Lease renewals a second at 5,000 nodes) is a futex wake of that thread from the
/// worker that read the socket, and a context switch both ways. Spawned, the daemon's
/// loop runs on the worker that woke it (tokio's LIFO slot). A panic of the task is
/// resumed here, as if it had run on this thread.
async fn on_a_worker<F>(task: F) -> u8
where
    F: std::future::Future<Output = u8> + Send + 'static,
{
    match tokio::spawn(task).await {
        Ok(code) => code,
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            // Cancelled: only when the runtime shuts down, which it does not here.
            Err(_) => exit::FAILED,
        },
    }
}

/// Loads the configuration for commands that need it, printing errors like `validate`.
fn load_config(path: &std::path::Path) -> Result<crate::config::Config, u8> {
    match crate::config::load(path) {
        Ok(config) => {
            for warning in &config.warnings {
                tracing::warn!("{warning}");
            }
            Ok(config)
        }
        Err(errors) => {
            eprintln!("{errors}");
            eprintln!("configuration invalid: run `nodefence validate` for the full report");
            Err(exit::CONFIG)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        let cli = Cli::try_parse_from(["nodefence", "run"]).unwrap();
        runtime_for(&cli.command).unwrap()
    }

    #[test]
    fn the_daemon_has_one_worker() {
        assert_eq!(runtime().metrics().num_workers(), DAEMON_WORKER_THREADS);
        assert_eq!(DAEMON_WORKER_THREADS, 1);
    }

    #[test]
    fn the_daemon_runs_on_a_worker_not_on_the_thread_that_waits_for_it() {
        let caller = std::thread::current().id();
        let code = runtime().block_on(on_a_worker(async move {
            // Not the thread in `block_on`: every wake-up of the loop would be a
            // cross-thread one.
            if std::thread::current().id() == caller {
                99
            } else {
                exit::OK
            }
        }));
        assert_eq!(code, exit::OK);
    }

    #[test]
    fn a_panic_of_the_daemon_reaches_the_caller() {
        let rt = runtime();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt.block_on(on_a_worker(async { panic!("the daemon's own panic") }))
        }));
        let payload = caught.unwrap_err();
        assert_eq!(
            payload.downcast_ref::<&str>(),
            Some(&"the daemon's own panic")
        );
    }
}
