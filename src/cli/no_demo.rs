//! `nodefence demo` in a build without the `demo` feature (the image: no simulated
//! cluster, no mock BMCs in it). The subcommand stays, so that `--help` and a runbook's
//! `nodefence demo` meet an explanation rather than "unrecognized subcommand": it says
//! where the demo is and exits 2 (usage error). Compiled into the default build's unit
//! tests too, so that they check it.

use super::exit;

/// The subcommand's line in `--help`.
pub const ABOUT: &str = "Not in this build (built without the `demo` feature); \
`cargo run --release -- demo` in a source checkout runs it.";

/// What `nodefence demo` prints on standard error.
pub const MESSAGE: &str = "\
error: this nodefence build has no demo: it was built without the `demo` feature, as
the container image is (the demo's simulated cluster and mock BMCs stay out of it).
To run the demo, from a source checkout of nodefence:
  cargo run --release -- demo
or build a binary that has it:
  cargo build --release -p nodefence --features demo";

/// Whatever follows `demo` is accepted (and ignored): `nodefence demo --speed 10` gets
/// the same answer as `nodefence demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    #[arg(hide = true, trailing_var_arg = true, allow_hyphen_values = true)]
    ignored: Vec<String>,
}

/// Prints [`MESSAGE`]; the usage-error exit code.
pub async fn run(_args: &DemoArgs) -> u8 {
    eprintln!("{MESSAGE}");
    exit::USAGE
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }

    #[derive(Debug, clap::Subcommand)]
    enum Command {
        #[command(about = ABOUT)]
        Demo(DemoArgs),
    }

    #[tokio::test]
    async fn demo_without_the_feature_says_where_it_is_and_exits_2() {
        for argv in [
            &["nodefence", "demo"][..],
            &["nodefence", "demo", "--speed", "10", "--scenario", "nhc"],
        ] {
            let Cli {
                command: Command::Demo(args),
            } = Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
            assert_eq!(run(&args).await, 2, "{argv:?}");
        }
        assert_eq!(exit::USAGE, 2);
        for needed in [
            "no demo",
            "`demo` feature",
            "cargo run --release -- demo",
            "--features demo",
        ] {
            assert!(
                MESSAGE.contains(needed),
                "{needed:?} missing from:\n{MESSAGE}"
            );
        }
        assert!(ABOUT.contains("cargo run --release -- demo"), "{ABOUT}");
    }
}
