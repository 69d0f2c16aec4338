//! `fleet_steady_state.svg`: the daemon's RSS and CPU at fleet scale
//! (`benches/fleet_steady_state.rs`), sampled from when it leads through the measured
//! window (`WARMUP_S=20 MEASURE_S=450`: more than a whole BMC monitor cycle), against
//! the targets (RSS ≤ 50 MiB; CPU ≤ 5 % of one core over the window and in every 10 s
//! of it, the worst 10 s marked).

use serde::Deserialize;

use super::input::BenchFile;
use super::svg::{self, Area, Font, Linear, Scale, Stroke, Svg, colour, tick_label};

pub const BENCH: &str = "fleet_steady_state";
const COMMAND: &str = "WARMUP_S=20 MEASURE_S=450 cargo bench --bench fleet_steady_state";

#[derive(Debug, Clone, Deserialize)]
pub struct Settings {
    pub nodes: u64,
    /// `per-node` (one HTTPS BMC per node) or `shared`.
    pub bmcs: String,
    pub sample_s: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Results {
    pub targets: Targets,
    pub samples: Vec<Sample>,
    pub window: Window,
    /// The worst 10 s of the window (required: the CPU target holds for every 10 s).
    pub worst_10s: Worst,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Targets {
    pub rss_mib: f64,
    pub cpu_percent: f64,
}

/// The daemon at one moment: seconds since it leads, its CPU time so far (user +
/// system, seconds) and its RSS.
#[derive(Debug, Clone, Deserialize)]
pub struct Sample {
    pub t_s: f64,
    pub cpu_s: f64,
    pub rss_mib: f64,
}

/// The measured window (seconds since the daemon leads) and its figures.
#[derive(Debug, Clone, Deserialize)]
pub struct Window {
    pub start_s: f64,
    pub end_s: f64,
    pub cpu_percent: f64,
    pub rss_mib: f64,
}

/// The worst 10 s window: between two samples 10 s apart, within the measured window.
#[derive(Debug, Clone, Deserialize)]
pub struct Worst {
    pub start_s: f64,
    pub end_s: f64,
    pub cpu_percent: f64,
}

/// The length of the worst window the bench reports.
const WORST_S: f64 = 10.0;

pub type File = BenchFile<Settings, Results>;

/// Checks what the chart relies on: at least two samples, time going forward, CPU
/// time never going back; and that the worst 10 s window is what the samples say:
/// two of them about 10 s apart inside the measured window, its CPU theirs, and no
/// other pair as far apart there worse.
fn check(file: &File) -> anyhow::Result<()> {
    let samples = &file.results.samples;
    if samples.len() < 2 {
        return Err(file.error(
            "results.samples",
            format!("{} samples, at least 2 are needed", samples.len()),
        ));
    }
    for (i, pair) in samples.windows(2).enumerate() {
        if pair[1].t_s <= pair[0].t_s {
            return Err(file.error(
                &format!("results.samples[{}].t_s", i + 1),
                "not after the sample before it",
            ));
        }
        if pair[1].cpu_s < pair[0].cpu_s {
            return Err(file.error(
                &format!("results.samples[{}].cpu_s", i + 1),
                "less than the sample before it (CPU time only grows)",
            ));
        }
    }
    check_worst(file)
}

fn check_worst(file: &File) -> anyhow::Result<()> {
    let r = &file.results;
    let (samples, worst) = (&r.samples, &r.worst_10s);
    let index_of = |t_s: f64, field: &str| {
        samples
            .iter()
            .position(|s| s.t_s == t_s)
            .ok_or_else(|| file.error(field, format!("{t_s} is not the time of a sample")))
    };
    let from = index_of(worst.start_s, "results.worst_10s.start_s")?;
    let to = index_of(worst.end_s, "results.worst_10s.end_s")?;
    let span = worst.end_s - worst.start_s;
    if to <= from || (span - WORST_S).abs() > 1.0 {
        return Err(file.error(
            "results.worst_10s",
            format!(
                "from {} s to {} s is not a {WORST_S} s window",
                worst.start_s, worst.end_s
            ),
        ));
    }
    // The first sample of the measured window may be taken a moment before its start
    // is read: half a sampling interval of slack at either end.
    let slack = file.settings.sample_s as f64 / 2.0;
    let measured = |t_s: f64| t_s >= r.window.start_s - slack && t_s <= r.window.end_s + slack;
    if !measured(worst.start_s) || !measured(worst.end_s) {
        return Err(file.error(
            "results.worst_10s",
            format!(
                "{}–{} s is not inside the measured window ({}–{} s)",
                worst.start_s, worst.end_s, r.window.start_s, r.window.end_s
            ),
        ));
    }
    let cpu = cpu_between(&samples[from], &samples[to]);
    if (cpu - worst.cpu_percent).abs() > 0.01 {
        return Err(file.error(
            "results.worst_10s.cpu_percent",
            format!(
                "{} %, but the samples at its start and end say {cpu:.3} %",
                worst.cpu_percent
            ),
        ));
    }
    let gap = to - from;
    let inside: Vec<&Sample> = samples.iter().filter(|s| measured(s.t_s)).collect();
    if let Some(w) = inside
        .windows(gap + 1)
        .find(|w| cpu_between(w[0], w[gap]) > worst.cpu_percent + 0.01)
    {
        return Err(file.error(
            "results.worst_10s.cpu_percent",
            format!(
                "{} %, but {}–{} s took {:.3} %",
                worst.cpu_percent,
                w[0].t_s,
                w[gap].t_s,
                cpu_between(w[0], w[gap])
            ),
        ));
    }
    Ok(())
}

/// CPU in % of one core from sample `a` to sample `b`.
fn cpu_between(a: &Sample, b: &Sample) -> f64 {
    (b.cpu_s - a.cpu_s) / (b.t_s - a.t_s) * 100.0
}

/// CPU in % of one core between each sample and the one before: (end time, %).
fn cpu_per_interval(samples: &[Sample]) -> Vec<(f64, f64, f64)> {
    samples
        .windows(2)
        .map(|p| (p[0].t_s, p[1].t_s, cpu_between(&p[0], &p[1])))
        .collect()
}

const WIDTH: f64 = 780.0;
const LEFT: f64 = 80.0;
/// The right margin holds the labels of the horizontal lines.
const RIGHT: f64 = 150.0;

/// The chart.
pub fn render(file: &File) -> anyhow::Result<String> {
    check(file)?;
    let r = &file.results;
    let samples = &r.samples;
    let cpu = cpu_per_interval(samples);
    let end = samples.iter().map(|s| s.t_s).fold(r.window.end_s, f64::max);
    let x = Linear::from_zero(end, (LEFT, WIDTH - RIGHT), 10);

    let rss_area = Area {
        left: LEFT,
        top: 96.0,
        right: WIDTH - RIGHT,
        bottom: 296.0,
    };
    let cpu_area = Area {
        top: 350.0,
        bottom: 510.0,
        ..rss_area
    };
    let notes = "The BMC monitor starts a pass over every BMC every interval (5 min), its \
                 reads spread evenly over it: that is where the CPU goes beside following the \
                 Leases' renewals through the watches. The CPU target holds for the window's \
                 average and for every 10 s of it: the worst 10 s (two samples 10 s apart, \
                 sliding over the window) is marked in red. Each bar is one sampling \
                 interval (bars of the start-up above the scale have their values written).";
    let footnote = file.footnote(COMMAND);
    let note_lines = (svg::wrap(notes, 118).len() + svg::wrap(&footnote, 118).len()) as f64;
    let height = cpu_area.bottom + 48.0 + note_lines * 15.0 + 20.0;

    let title = format!(
        "nodefence run at {} nodes: RSS and CPU over a monitor cycle",
        tick_label(file.settings.nodes as f64)
    );
    let mut doc = Svg::new(WIDTH, height, &title);
    doc.text((16.0, 26.0), &title, Font::new(17.0).bold());
    let bmcs = if file.settings.bmcs == "shared" {
        "one shared mock BMC".to_string()
    } else {
        format!(
            "{} mock HTTPS BMCs, one per node",
            tick_label(file.settings.nodes as f64)
        )
    };
    doc.text(
        (16.0, 46.0),
        &format!(
            "against fake-kube (Leases renewed every 10 s) and {bmcs}; sampled every {} s",
            file.settings.sample_s
        ),
        Font::new(12.0).fill(colour::GREY),
    );

    // The measured window, shaded in both panels.
    let (w0, w1) = (x.at(r.window.start_s), x.at(r.window.end_s));
    for area in [rss_area, cpu_area] {
        doc.rect(
            w0,
            area.top,
            w1 - w0,
            area.bottom - area.top,
            colour::SHADE,
            Some("window"),
        );
    }
    doc.text(
        (w0 + 4.0, rss_area.top - 8.0),
        &format!(
            "measured window ({:.0} s): CPU {:.1} % of one core on average, RSS {:.1} MiB at its end",
            r.window.end_s - r.window.start_s,
            r.window.cpu_percent,
            r.window.rss_mib
        ),
        Font::new(11.0),
    );

    // RSS.
    let rss_max = samples
        .iter()
        .map(|s| s.rss_mib)
        .fold(r.targets.rss_mib, f64::max);
    let rss_y = Linear::from_zero(rss_max * 1.1, (rss_area.bottom, rss_area.top), 5);
    svg::y_axis(&mut doc, rss_area, &rss_y, "RSS (MiB)");
    svg::x_axis(&mut doc, rss_area, &x, "");
    let rss_target = rss_y.at(r.targets.rss_mib);
    doc.line(
        (rss_area.left, rss_target),
        (rss_area.right, rss_target),
        Stroke::dashed(colour::RED, 1.5),
        Some("target"),
    );
    let rss_end = rss_y.at(r.window.rss_mib);
    svg::margin_labels(
        &mut doc,
        rss_area.right + 8.0,
        &[
            (
                rss_target,
                format!("target ≤ {} MiB", tick_label(r.targets.rss_mib)),
                colour::RED,
            ),
            (
                rss_end,
                format!("at the end {:.1} MiB", r.window.rss_mib),
                colour::BLUE,
            ),
        ],
    );
    let points: Vec<(f64, f64)> = samples
        .iter()
        .map(|s| (x.at(s.t_s), rss_y.at(s.rss_mib)))
        .collect();
    doc.polyline(&points, Stroke::solid(colour::BLUE, 1.5), None);
    for point in &points {
        doc.dot(*point, 2.5, colour::BLUE, false, "sample rss");
    }

    // CPU. The scale fits the measured window; the start-up before it (listing
    // every Node, the first TLS handshakes) may go off the top, its value written.
    let cpu_max = cpu
        .iter()
        .filter(|c| c.0 >= r.window.start_s)
        .map(|c| c.2)
        .fold(
            r.targets
                .cpu_percent
                .max(r.window.cpu_percent)
                .max(r.worst_10s.cpu_percent),
            f64::max,
        );
    let cpu_y = Linear::from_zero(cpu_max * 1.25, (cpu_area.bottom, cpu_area.top), 4);
    let cpu_top = cpu_y.domain.1;
    svg::y_axis(&mut doc, cpu_area, &cpu_y, "CPU (% of one core)");
    svg::x_axis(
        &mut doc,
        cpu_area,
        &x,
        "seconds since the daemon took the leader Lease (s)",
    );
    // The worst 10 s, behind the bars: a band from its first sample to its last.
    let (b0, b1) = (x.at(r.worst_10s.start_s), x.at(r.worst_10s.end_s));
    doc.rect(
        b0,
        cpu_area.top,
        b1 - b0,
        cpu_area.bottom - cpu_area.top,
        colour::WORST,
        Some("worst"),
    );
    let worst = cpu_y.at(r.worst_10s.cpu_percent);
    doc.text(
        (b0, cpu_area.top - 4.0),
        &format!(
            "worst 10 s: {}–{} s",
            tick_label(r.worst_10s.start_s.round()),
            tick_label(r.worst_10s.end_s.round())
        ),
        Font::new(10.0).fill(colour::RED),
    );
    // Bars above the scale: their values, once, right of the last of them.
    let mut clipped: Vec<String> = Vec::new();
    let mut clipped_end = cpu_area.left;
    for &(from, to, percent) in &cpu {
        let (x0, x1) = (x.at(from), x.at(to));
        let top = cpu_y.at(percent.min(cpu_top));
        doc.rect(
            x0 + 0.5,
            top,
            (x1 - x0 - 1.0).max(0.5),
            cpu_area.bottom - top,
            colour::ORANGE,
            Some("sample cpu"),
        );
        if percent > cpu_top {
            clipped.push(format!("{percent:.0} %"));
            clipped_end = x1;
        }
    }
    if !clipped.is_empty() {
        doc.text(
            (clipped_end + 4.0, cpu_area.top + 10.0),
            &format!("← {} (off the scale)", clipped.join(", ")),
            Font::new(10.0).fill(colour::ORANGE),
        );
    }
    // Over the bars: the worst 10 s's level across its band.
    doc.line(
        (b0, worst),
        (b1, worst),
        Stroke::solid(colour::RED, 2.0),
        Some("worst level"),
    );
    let cpu_target = cpu_y.at(r.targets.cpu_percent);
    doc.line(
        (cpu_area.left, cpu_target),
        (cpu_area.right, cpu_target),
        Stroke::dashed(colour::RED, 1.5),
        Some("target"),
    );
    let average = cpu_y.at(r.window.cpu_percent);
    doc.line(
        (w0, average),
        (w1, average),
        Stroke::solid(colour::TEXT, 1.5),
        Some("average"),
    );
    svg::margin_labels(
        &mut doc,
        cpu_area.right + 8.0,
        &[
            (
                cpu_target,
                format!(
                    "target ≤ {} % (any 10 s)",
                    tick_label(r.targets.cpu_percent)
                ),
                colour::RED,
            ),
            (
                average,
                format!("window average {:.1} %", r.window.cpu_percent),
                colour::TEXT,
            ),
            (
                worst,
                format!("worst 10 s {:.1} %", r.worst_10s.cpu_percent),
                colour::RED,
            ),
        ],
    );

    svg::notes_and_footnote(&mut doc, cpu_area.bottom + 54.0, notes, &footnote, 118);
    Ok(doc.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_per_interval_is_cpu_time_over_wall_time() {
        let s = |t_s, cpu_s| Sample {
            t_s,
            cpu_s,
            rss_mib: 40.0,
        };
        let cpu = cpu_per_interval(&[s(0.0, 1.0), s(5.0, 1.5), s(10.0, 1.5)]);
        assert_eq!(cpu, vec![(0.0, 5.0, 10.0), (5.0, 10.0, 0.0)]);
    }
}
