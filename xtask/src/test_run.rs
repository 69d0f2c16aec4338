//! `cargo xtask test`: to be written.

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Passed on to `cargo test --workspace`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub cargo_args: Vec<String>,
}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("cargo xtask test: not written yet")
}
