//! `cargo xtask`: the project's own commands (the alias is in `.cargo/config.toml`).
//!
//! - `cargo xtask test [ARGS]`: the README's test command, `cargo test --workspace`
//!   with a summary of what was skipped and why at the end ([`test_run`]).
//! - `cargo xtask charts`: the benchmarks' JSON results as SVG charts ([`charts`]).

mod charts;
mod test_run;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "nodefence's project commands")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs `cargo test --workspace` (extra arguments passed on) and ends with the
    /// list of skipped tests, each with its missing peer and how to install it.
    Test(test_run::Args),
    /// Renders the benchmarks' JSON results as SVG charts.
    Charts(charts::Args),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Test(args) => test_run::run(args),
        Command::Charts(args) => charts::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
