//! `partition_timeline.svg`: the network cut of `benches/power_loss_recovery.rs`
//! (kubelet cut off, machine On), its first run step by step: the cut, the Lease going
//! stale, NotReady, the ForceOff, Off, the release, the volume moving and the
//! replacement Running, against
//! the target (≤ 92 s after the cut). The steps are the demo's own
//! (`nodefence demo --output json`, `steps`); the release and the replacement's start
//! are the bench's figures.

use super::power_loss::{COMMAND, File, Partition, Step};
use super::svg::{
    self, Anchor, Area, Font, Linear, ReferenceLine, Scale, Stroke, Svg, colour, seconds,
};

/// A step worth a row: its label and how to recognise it (`victim`: the node cut).
struct Milestone {
    label: &'static str,
    colour: &'static str,
    is: fn(&Step, &str) -> bool,
}

const MILESTONES: [Milestone; 7] = [
    Milestone {
        label: "nodefence: Lease stale, incident opened",
        colour: colour::BLUE,
        is: |s, victim| {
            s.node == victim && matches!(s.what.as_str(), "NodeSuspect" | "NodeUnhealthy")
        },
    },
    Milestone {
        label: "control plane: node NotReady",
        colour: colour::GREY,
        is: |s, victim| s.node == victim && s.what == "NodeNotReady",
    },
    Milestone {
        label: "BMC: ForceOff received",
        colour: colour::PURPLE,
        is: |s, victim| s.node == victim && s.what == "ForceOff",
    },
    Milestone {
        label: "BMC: machine Off",
        colour: colour::PURPLE,
        is: |s, victim| s.node == victim && s.what == "PowerOff",
    },
    Milestone {
        label: "nodefence: Off confirmed",
        colour: colour::BLUE,
        is: |s, victim| s.node == victim && s.what == "ConfirmedOff",
    },
    Milestone {
        label: "control plane: volume detached (forced)",
        colour: colour::GREY,
        is: |s, victim| s.node == victim && s.what == "VolumeDetached",
    },
    Milestone {
        label: "control plane: volume attached elsewhere",
        colour: colour::GREY,
        is: |s, victim| s.node != victim && s.what == "VolumeAttached",
    },
];

/// One row: label, seconds after the cut, colour.
struct Row {
    label: String,
    at: f64,
    colour: &'static str,
}

fn rows(file: &File, run: &Partition) -> anyhow::Result<Vec<Row>> {
    let cut = run.steps.iter().find(|s| s.what == "You").ok_or_else(|| {
        file.error(
            "results.network_cut[0].steps",
            "no step `what: \"You\"` (the cut)",
        )
    })?;
    let victim = cut.node.as_str();
    let mut rows = vec![Row {
        label: format!("you: network of {victim} cut (machine On)"),
        at: cut.at_s,
        colour: colour::GREEN,
    }];
    for m in &MILESTONES {
        if let Some(step) = run.steps.iter().find(|s| (m.is)(s, victim)) {
            rows.push(Row {
                label: m.label.to_string(),
                at: step.at_s,
                colour: m.colour,
            });
        }
    }
    rows.push(Row {
        label: "nodefence: released (out-of-service taint)".to_string(),
        at: run.released_s,
        colour: colour::BLUE,
    });
    rows.push(Row {
        label: "db-0 Running on another node".to_string(),
        at: run.pod_running_s,
        colour: colour::ORANGE,
    });
    rows.sort_by(|a, b| a.at.total_cmp(&b.at));
    Ok(rows)
}

const WIDTH: f64 = 780.0;
const LEFT: f64 = 290.0;
const RIGHT: f64 = 50.0;
const ROW: f64 = 24.0;

/// The chart.
pub fn render(file: &File) -> anyhow::Result<String> {
    let results = &file.results;
    let run = results
        .network_cut
        .first()
        .ok_or_else(|| file.error("results.network_cut", "no network-cut run"))?;
    let rows = rows(file, run)?;
    let last = rows.iter().map(|r| r.at).fold(0.0, f64::max);
    let x = Linear::from_zero(
        last.max(results.targets.partition_s) * 1.05,
        (LEFT, WIDTH - RIGHT),
        10,
    );
    let lines = [ReferenceLine {
        x: x.at(results.targets.partition_s),
        label: format!(
            "target: db-0 Running ≤ {}",
            seconds(results.targets.partition_s)
        ),
        stroke: Stroke::dashed(colour::RED, 1.5),
        class: "target",
    }];
    let header = 56.0;
    let bounds = (LEFT, WIDTH - 8.0);
    let area_top = header + svg::label_rows(&lines, bounds) as f64 * svg::LABEL_ROW + 8.0;
    let area = Area {
        left: LEFT,
        top: area_top,
        right: WIDTH - RIGHT,
        bottom: area_top + rows.len() as f64 * ROW + 6.0,
    };
    let opened = rows
        .iter()
        .find(|r| r.label == MILESTONES[0].label)
        .map(|r| r.at);
    let forced = rows
        .iter()
        .find(|r| r.label == MILESTONES[2].label)
        .map(|r| r.at);
    let notes = format!(
        "nodefence reads the BMC once the Lease is stale and finds the machine On: it waits \
         (the cut may be short) for unhealthy_after from the incident's start, and never \
         before NotReady, then powers it off, proves Off and releases.{} Run 1 of {}; \
         times are the demo's (nodefence demo --scenario network-cut --output json).",
        match (opened, forced) {
            (Some(o), Some(f)) => format!(
                " Here the ForceOff came {} after the incident opened.",
                seconds(f - o)
            ),
            _ => String::new(),
        },
        file.settings.partition_runs
    );
    let footnote = file.footnote(COMMAND);
    let note_lines = (svg::wrap(&notes, 118).len() + svg::wrap(&footnote, 118).len()) as f64;
    let height = area.bottom + 48.0 + note_lines * 15.0 + 20.0;

    let title = "Network cut, machine On → db-0 Running elsewhere: one run, step by step";
    let mut doc = Svg::new(WIDTH, height, title);
    doc.text((16.0, 26.0), title, Font::new(17.0).bold());
    doc.text(
        (16.0, 46.0),
        "seconds after the network was cut (cluster time, time scale 1)",
        Font::new(12.0).fill(colour::GREY),
    );
    svg::x_axis(&mut doc, area, &x, "seconds after the cut (s)");
    svg::reference_lines(&mut doc, area, &lines, bounds);

    let mut previous: Option<(f64, f64)> = None;
    for (i, row) in rows.iter().enumerate() {
        let y = area.top + 6.0 + ROW * (i as f64 + 0.5);
        let at = (x.at(row.at), y);
        doc.text(
            (LEFT - 10.0, y + 4.0),
            &row.label,
            Font::new(12.0).anchor(Anchor::End),
        );
        if let Some(from) = previous {
            // Down from the step before, then along this row: clear of the labels.
            doc.polyline(
                &[from, (from.0, at.1), at],
                Stroke::dotted(colour::GREY, 1.0),
                None,
            );
        }
        doc.dot(at, 5.0, row.colour, false, "sample event");
        doc.text(
            (at.0 + 9.0, y + 4.0),
            &format!("+{}", seconds(row.at)),
            Font::new(11.0),
        );
        previous = Some(at);
    }
    if let (Some(o), Some(f)) = (opened, forced) {
        // The wait before the ForceOff, under the axis' first row of labels.
        let y = area.top + 2.0;
        let (x0, x1) = (x.at(o), x.at(f));
        doc.line((x0, y), (x1, y), Stroke::solid(colour::PURPLE, 1.0), None);
        for end in [x0, x1] {
            doc.line(
                (end, y - 3.0),
                (end, y + 3.0),
                Stroke::solid(colour::PURPLE, 1.0),
                None,
            );
        }
        doc.text(
            ((x0 + x1) / 2.0, y - 4.0),
            &format!("waits {} (unhealthy_after)", seconds(f - o)),
            Font::new(10.0).anchor(Anchor::Middle).fill(colour::PURPLE),
        );
    }

    svg::notes_and_footnote(&mut doc, area.bottom + 54.0, &notes, &footnote, 118);
    Ok(doc.finish())
}
