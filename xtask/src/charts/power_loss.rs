//! `power_loss_recovery.svg`: power loss → replacement pod Running, one row per run
//! of `benches/power_loss_recovery.rs`, against the targets (median ≤ 15 s, worst ≤
//! 18 s) and the floors (what Lease and kubelet timing alone impose, each run's at its
//! phases and the median and worst over random phases).
//!
//! Also the types of `power_loss_recovery.json`, which the partition timeline
//! ([`super::partition`]) reads too.

use serde::Deserialize;

use super::input::BenchFile;
use super::svg::{
    self, Anchor, Area, Font, Linear, ReferenceLine, Scale, Stroke, Svg, colour, seconds,
};

pub const BENCH: &str = "power_loss_recovery";

#[derive(Debug, Clone, Deserialize)]
pub struct Settings {
    /// Runs across the two phases (the worst corner comes on top).
    pub runs: u64,
    pub partition_runs: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Results {
    pub targets: Targets,
    pub floors: Floors,
    pub power_loss: Vec<Run>,
    pub network_cut: Vec<Partition>,
}

/// Targets, seconds after the plug (the cut).
#[derive(Debug, Clone, Deserialize)]
pub struct Targets {
    pub median_s: f64,
    pub worst_s: f64,
    pub partition_s: f64,
}

/// What an ideal agent would give, over random phases.
#[derive(Debug, Clone, Deserialize)]
pub struct Floors {
    pub median_s: f64,
    pub worst_s: f64,
}

/// One power-loss run, seconds after the plug was pulled.
#[derive(Debug, Clone, Deserialize)]
pub struct Run {
    pub plug_after_renewal_s: f64,
    pub status_after_renewal_s: f64,
    pub released_s: f64,
    pub pod_running_s: f64,
    /// The floor at this run's phases.
    pub floor_s: f64,
    /// The run that takes the worst corner (not one of the evenly spread runs).
    pub worst_corner: bool,
}

/// One network-cut run, seconds after the cut.
#[derive(Debug, Clone, Deserialize)]
pub struct Partition {
    pub released_s: f64,
    pub pod_running_s: f64,
    /// The demo's story of the scenario (`nodefence demo --output json`).
    pub steps: Vec<Step>,
}

/// A step of the demo's story (the chart reads when, where and what; `actor` and
/// `text` are there for people).
#[derive(Debug, Clone, Deserialize)]
pub struct Step {
    pub at_s: f64,
    pub node: String,
    pub what: String,
}

pub type File = BenchFile<Settings, Results>;

/// The reproducing command, for the footnote.
pub const COMMAND: &str = "cargo bench --bench power_loss_recovery";

/// The median as the bench computes it (the evenly spread runs, not the corner).
fn median(values: &mut [f64]) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// Checks what the chart relies on.
fn check(file: &File) -> anyhow::Result<()> {
    let runs = &file.results.power_loss;
    if runs.is_empty() {
        return Err(file.error("results.power_loss", "no runs"));
    }
    for (i, run) in runs.iter().enumerate() {
        for (field, value) in [
            ("released_s", run.released_s),
            ("pod_running_s", run.pod_running_s),
            ("floor_s", run.floor_s),
        ] {
            if !(0.0..=3600.0).contains(&value) {
                return Err(file.error(
                    &format!("results.power_loss[{i}].{field}"),
                    format!("{value} is not a time after the plug (0 to 3600 s)"),
                ));
            }
        }
    }
    Ok(())
}

const WIDTH: f64 = 780.0;
const LEFT: f64 = 170.0;
const RIGHT: f64 = 40.0;
const ROW: f64 = 20.0;

/// The chart.
pub fn render(file: &File) -> anyhow::Result<String> {
    check(file)?;
    let results = &file.results;
    let mut runs: Vec<&Run> = results.power_loss.iter().collect();
    runs.sort_by(|a, b| {
        a.pod_running_s
            .total_cmp(&b.pod_running_s)
            .then(a.worst_corner.cmp(&b.worst_corner))
    });
    let spread: Vec<&Run> = runs.iter().copied().filter(|r| !r.worst_corner).collect();
    let measured_median = median(&mut spread.iter().map(|r| r.pod_running_s).collect::<Vec<_>>());

    let top_of_everything = runs
        .iter()
        .flat_map(|r| [r.pod_running_s, r.floor_s])
        .chain([
            results.targets.worst_s,
            results.floors.worst_s,
            results.targets.median_s,
        ])
        .fold(0.0, f64::max);
    let x = Linear::from_zero(top_of_everything * 1.04, (LEFT, WIDTH - RIGHT), 8);

    let mut lines = vec![
        ReferenceLine {
            x: x.at(results.targets.median_s),
            label: format!("target: median ≤ {}", seconds(results.targets.median_s)),
            stroke: Stroke::dashed(colour::GREEN, 1.5),
            class: "target",
        },
        ReferenceLine {
            x: x.at(results.targets.worst_s),
            label: format!("target: worst ≤ {}", seconds(results.targets.worst_s)),
            stroke: Stroke::dashed(colour::RED, 1.5),
            class: "target",
        },
        ReferenceLine {
            x: x.at(results.floors.median_s),
            label: format!("floor: median {}", seconds(results.floors.median_s)),
            stroke: Stroke::dotted(colour::GREY, 1.5),
            class: "floor-line",
        },
        ReferenceLine {
            x: x.at(results.floors.worst_s),
            label: format!("floor: worst {}", seconds(results.floors.worst_s)),
            stroke: Stroke::dotted(colour::GREY, 1.5),
            class: "floor-line",
        },
    ];
    if let Some(m) = measured_median {
        lines.push(ReferenceLine {
            x: x.at(m),
            label: format!("measured median {}", seconds(m)),
            stroke: Stroke::solid(colour::ORANGE, 1.0),
            class: "median",
        });
    }

    let header = 76.0;
    let bounds = (LEFT - 40.0, WIDTH - 8.0);
    let label_rows = svg::label_rows(&lines, bounds) as f64;
    let area_top = header + label_rows * svg::LABEL_ROW + 8.0;
    let area = Area {
        left: LEFT,
        top: area_top,
        right: WIDTH - RIGHT,
        bottom: area_top + runs.len() as f64 * ROW + 6.0,
    };
    let notes = format!(
        "Each row is one run, the plug pulled at its phase of the node's 10 s Lease cycle \
         and the replacement's status loop at its own (the row's label, seconds after a renewal); the runs \
         spread both phases evenly, and the last one takes the worst corner. A floor is \
         what an agent would get if it released at the first moment a missed renewal can \
         be known (10.4 s after the last one) and the control plane added only the \
         detach, attach and container start: no agent that waits for the Lease gets \
         below it. {} runs spread over the phases, plus the worst corner.",
        file.settings.runs
    );
    let footnote = file.footnote(COMMAND);
    let note_lines = (svg::wrap(&notes, 118).len() + svg::wrap(&footnote, 118).len()) as f64;
    let height = area.bottom + 48.0 + note_lines * 15.0 + 20.0;

    let title = "Power loss → db-0 Running on another node, with its volume";
    let mut doc = Svg::new(WIDTH, height, title);
    doc.text((16.0, 26.0), title, Font::new(17.0).bold());
    doc.text(
        (16.0, 46.0),
        "seconds after the plug was pulled (cluster time, time scale 1), one row per run, \
         fastest first",
        Font::new(12.0).fill(colour::GREY),
    );
    key(&mut doc, 16.0, 66.0);

    svg::x_axis(&mut doc, area, &x, "seconds after the plug was pulled (s)");
    svg::reference_lines(&mut doc, area, &lines, bounds);

    for (i, run) in runs.iter().enumerate() {
        let y = area.top + 6.0 + ROW * (i as f64 + 0.5);
        let label = if run.worst_corner {
            "worst corner".to_string()
        } else {
            format!(
                "plug {} s · status {} s",
                svg::short_number(run.plug_after_renewal_s),
                svg::short_number(run.status_after_renewal_s)
            )
        };
        doc.text(
            (LEFT - 10.0, y + 4.0),
            &label,
            Font::new(11.0).anchor(Anchor::End),
        );
        let (released, running) = (x.at(run.released_s), x.at(run.pod_running_s));
        doc.line(
            (x.at(0.0), y),
            (released, y),
            Stroke::solid(colour::LIGHT_GREY, 2.0),
            None,
        );
        doc.line(
            (released, y),
            (running, y),
            Stroke::solid("#f0b48c", 3.0),
            None,
        );
        let floor = x.at(run.floor_s);
        doc.line(
            (floor, y - 7.0),
            (floor, y + 7.0),
            Stroke::solid(colour::TEXT, 1.5),
            Some("floor"),
        );
        doc.dot((released, y), 4.0, colour::BLUE, false, "sample released");
        doc.dot((running, y), 4.5, colour::ORANGE, false, "sample running");
    }

    svg::notes_and_footnote(&mut doc, area.bottom + 54.0, &notes, &footnote, 118);
    Ok(doc.finish())
}

/// The key under the subtitle: what a blue dot, an orange dot and a black tick are.
fn key(doc: &mut Svg, x: f64, y: f64) {
    let font = Font::new(12.0);
    doc.dot((x + 4.0, y - 4.0), 4.0, colour::BLUE, false, "key");
    doc.text((x + 12.0, y), "released (out-of-service taint)", font);
    let x = x + 210.0;
    doc.dot((x + 4.0, y - 4.0), 4.5, colour::ORANGE, false, "key");
    doc.text((x + 12.0, y), "db-0 Running elsewhere", font);
    let x = x + 170.0;
    doc.line(
        (x + 4.0, y - 11.0),
        (x + 4.0, y + 3.0),
        Stroke::solid(colour::TEXT, 1.5),
        None,
    );
    doc.text((x + 12.0, y), "the run's floor (at its phases)", font);
}
