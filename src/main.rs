//! The `nodefence` binary: parse the command line, install the TLS provider, dispatch.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    nodefence::tls::install_crypto_provider();
    nodefence::cli::run(nodefence::cli::Cli::parse())
}
