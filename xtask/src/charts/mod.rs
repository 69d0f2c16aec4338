//! `cargo xtask charts [--from DIR] [--out DIR] [--require-all]`: the benches' JSON
//! results (`benches/common/results.rs`) as SVG charts for `docs/benchmarks.md`.
//!
//! One SVG per chart, from whichever results are in `--from` (default
//! `$CARGO_TARGET_DIR/bench-results`, else `target/bench-results`) into `--out`
//! (default `docs/charts`):
//!
//! | results | charts |
//! |---|---|
//! | `power_loss_recovery.json` | `power_loss_recovery.svg` ([`power_loss`]), `partition_timeline.svg` ([`partition`]) |
//! | `fleet_steady_state.json` | `fleet_steady_state.svg` ([`fleet`]) |
//! | `status_vs_fence_agents.json` | `status_vs_fence_agents.svg` ([`status_agents`]) |
//!
//! A missing results file is skipped with a line saying so (`--require-all`: an
//! error, as in CI, which renders `xtask/fixtures/bench-results`); a malformed one,
//! or one of another schema, is an error naming the file and the field ([`input`]).
//! The SVG is written by hand ([`svg`]): the same JSON gives the same bytes.

mod fleet;
mod input;
mod partition;
mod power_loss;
mod status_agents;
mod svg;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where the benches' JSON results are [default: $CARGO_TARGET_DIR/bench-results,
    /// else target/bench-results]
    #[arg(long, value_name = "DIR")]
    pub from: Option<PathBuf>,
    /// Where the SVG charts go [default: docs/charts]
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Fail when a bench's results are missing instead of skipping its charts (CI)
    #[arg(long)]
    pub require_all: bool,
}

/// Charts as (file name, SVG).
type Charts = Vec<(&'static str, String)>;

/// A bench whose results make charts.
struct Bench {
    name: &'static str,
    /// Reads its results file; its charts.
    render: fn(&Path) -> anyhow::Result<Charts>,
}

const BENCHES: [Bench; 3] = [
    Bench {
        name: power_loss::BENCH,
        render: power_loss_charts,
    },
    Bench {
        name: fleet::BENCH,
        render: fleet_charts,
    },
    Bench {
        name: status_agents::BENCH,
        render: status_agents_charts,
    },
];

fn power_loss_charts(path: &Path) -> anyhow::Result<Charts> {
    let file: power_loss::File = input::read(path, power_loss::BENCH)?;
    Ok(vec![
        ("power_loss_recovery.svg", power_loss::render(&file)?),
        ("partition_timeline.svg", partition::render(&file)?),
    ])
}

fn fleet_charts(path: &Path) -> anyhow::Result<Charts> {
    let file: fleet::File = input::read(path, fleet::BENCH)?;
    Ok(vec![("fleet_steady_state.svg", fleet::render(&file)?)])
}

fn status_agents_charts(path: &Path) -> anyhow::Result<Charts> {
    let file: status_agents::File = input::read(path, status_agents::BENCH)?;
    Ok(vec![(
        "status_vs_fence_agents.svg",
        status_agents::render(&file)?,
    )])
}

/// What became of one bench's results.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Its charts were written.
    Rendered { from: PathBuf, charts: Vec<PathBuf> },
    /// No results file.
    Skipped {
        bench: &'static str,
        missing: PathBuf,
    },
}

/// The checkout's root (xtask's parent).
fn workspace_root() -> PathBuf {
    let xtask = Path::new(env!("CARGO_MANIFEST_DIR"));
    xtask.parent().unwrap_or(xtask).to_path_buf()
}

/// Renders every bench's charts from the results in `from` into `out`.
pub fn render_dir(from: &Path, out: &Path, require_all: bool) -> anyhow::Result<Vec<Outcome>> {
    let path_of = |bench: &Bench| from.join(format!("{}.json", bench.name));
    if require_all {
        let missing: Vec<String> = BENCHES
            .iter()
            .map(path_of)
            .filter(|p| !p.is_file())
            .map(|p| p.display().to_string())
            .collect();
        if !missing.is_empty() {
            bail!(
                "--require-all: no results file {} (run the bench, see docs/benchmarks.md)",
                missing.join(", ")
            );
        }
    }
    let mut outcomes = Vec::new();
    for bench in &BENCHES {
        let path = path_of(bench);
        if !path.is_file() {
            outcomes.push(Outcome::Skipped {
                bench: bench.name,
                missing: path,
            });
            continue;
        }
        let charts = (bench.render)(&path)?;
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        let mut written = Vec::new();
        for (name, svg) in charts {
            let target = out.join(name);
            std::fs::write(&target, svg)
                .with_context(|| format!("writing {}", target.display()))?;
            written.push(target);
        }
        outcomes.push(Outcome::Rendered {
            from: path,
            charts: written,
        });
    }
    if !outcomes
        .iter()
        .any(|o| matches!(o, Outcome::Rendered { .. }))
    {
        bail!(
            "no bench results in {}: run a bench first (docs/benchmarks.md, \"Charts\")",
            from.display()
        );
    }
    Ok(outcomes)
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let from = args.from.unwrap_or_else(|| {
        std::env::var_os("CARGO_TARGET_DIR")
            .map_or_else(|| workspace_root().join("target"), PathBuf::from)
            .join("bench-results")
    });
    let out = args
        .out
        .unwrap_or_else(|| workspace_root().join("docs").join("charts"));
    for outcome in render_dir(&from, &out, args.require_all)? {
        match outcome {
            Outcome::Rendered { from, charts } => {
                for chart in charts {
                    println!("rendered {} from {}", chart.display(), from.display());
                }
            }
            Outcome::Skipped { bench, missing } => println!(
                "skipped {bench}: no {} (run `cargo bench --bench {bench}`)",
                missing.display()
            ),
        }
    }
    Ok(ExitCode::SUCCESS)
}
