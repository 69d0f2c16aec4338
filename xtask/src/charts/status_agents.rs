//! `status_vs_fence_agents.svg`: one `nodefence status` over a fleet of BMCs next to
//! the ClusterLabs agents run one by one over the same BMCs
//! (`benches/status_vs_fence_agents.rs`): the time to read every BMC, and every
//! single reading or call, both on log scales.

use serde::Deserialize;

use super::input::BenchFile;
use super::svg::{self, Anchor, Area, Font, Log10, Scale, Stroke, Svg, colour, tick_label};

pub const BENCH: &str = "status_vs_fence_agents";
const COMMAND: &str = "cargo bench --bench status_vs_fence_agents";

#[derive(Debug, Clone, Deserialize)]
pub struct Settings {
    pub nodes: u64,
    pub concurrency: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Results {
    pub protocols: Vec<Protocol>,
}

/// One protocol's BMCs.
#[derive(Debug, Clone, Deserialize)]
pub struct Protocol {
    /// `redfish`, `ipmi`, `vsphere` (its "BMCs" are the VMs of one vCenter),
    /// `kubevirt` (the VirtualMachines of one infrastructure cluster).
    pub protocol: String,
    /// One cold `nodefence status` over every BMC.
    pub nodefence: Status,
    /// `nodefence status` over the BMCs the agents read, when those were fewer.
    pub nodefence_over_agent_bmcs: Option<Timed>,
    /// The agent (`fence_redfish`...).
    pub agent_tool: String,
    /// Its calls one by one; null when it is not installed.
    pub agent: Option<AgentCalls>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Status {
    pub wall_s: f64,
    pub bmcs: u64,
    /// Each reading's latency as `status -o json` reports it (whole milliseconds).
    pub reading_ms: Vec<f64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Timed {
    pub wall_s: f64,
    pub bmcs: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct AgentCalls {
    pub wall_s: f64,
    /// Each call's wall-clock time, process start included.
    pub call_ms: Vec<f64>,
}

pub type File = BenchFile<Settings, Results>;

fn check(file: &File) -> anyhow::Result<()> {
    let protocols = &file.results.protocols;
    if protocols.is_empty() {
        return Err(file.error("results.protocols", "no protocol"));
    }
    for (i, p) in protocols.iter().enumerate() {
        if p.nodefence.reading_ms.is_empty() {
            return Err(file.error(
                &format!("results.protocols[{i}].nodefence.reading_ms"),
                "no reading",
            ));
        }
        if p.nodefence.wall_s <= 0.0 {
            return Err(file.error(
                &format!("results.protocols[{i}].nodefence.wall_s"),
                "not a duration (> 0)",
            ));
        }
        if let Some(agent) = &p.agent
            && (agent.call_ms.is_empty() || agent.wall_s <= 0.0)
        {
            return Err(file.error(
                &format!("results.protocols[{i}].agent"),
                "no call, or no time",
            ));
        }
    }
    Ok(())
}

/// `redfish` → `Redfish`, `ipmi` → `IPMI`, `vsphere` → `vSphere`, `kubevirt` →
/// `KubeVirt`; anything else as it is.
fn protocol_name(protocol: &str) -> &str {
    match protocol {
        "redfish" => "Redfish",
        "ipmi" => "IPMI",
        "vsphere" => "vSphere",
        "kubevirt" => "KubeVirt",
        other => other,
    }
}

/// A bar of the upper panel.
struct Bar {
    label: String,
    seconds: f64,
    value: String,
    colour: &'static str,
}

/// A row of dots of the lower panel.
struct Strip<'a> {
    label: String,
    millis: &'a [f64],
    colour: &'static str,
    class: &'static str,
}

fn bars(file: &File) -> Vec<Bar> {
    let mut bars = Vec::new();
    for p in &file.results.protocols {
        let name = protocol_name(&p.protocol);
        // The comparison is over the same BMCs: the agents' when they read fewer.
        let (nodefence_s, bmcs) = match (&p.nodefence_over_agent_bmcs, &p.agent) {
            (Some(subset), Some(_)) => (subset.wall_s, subset.bmcs),
            _ => (p.nodefence.wall_s, p.nodefence.bmcs),
        };
        // The title names the fleet; a smaller count is named on its bars.
        let count = if bmcs == file.settings.nodes {
            String::new()
        } else {
            format!(", first {}", tick_label(bmcs as f64))
        };
        bars.push(Bar {
            label: format!("{name}: nodefence status{count}"),
            seconds: nodefence_s,
            value: format!("{} s", short(nodefence_s)),
            colour: colour::BLUE,
        });
        if let Some(agent) = &p.agent {
            bars.push(Bar {
                label: format!("{name}: {} one by one{count}", p.agent_tool),
                seconds: agent.wall_s,
                value: format!(
                    "{} s: {:.0}× as long",
                    short(agent.wall_s),
                    agent.wall_s / nodefence_s
                ),
                colour: colour::ORANGE,
            });
        }
    }
    bars
}

fn strips(file: &File) -> Vec<Strip<'_>> {
    let mut strips = Vec::new();
    for p in &file.results.protocols {
        let name = protocol_name(&p.protocol);
        strips.push(Strip {
            label: format!("{name}: nodefence, each reading"),
            millis: &p.nodefence.reading_ms,
            colour: colour::BLUE,
            class: "sample reading",
        });
        if let Some(agent) = &p.agent {
            strips.push(Strip {
                label: format!("{name}: {}, each call", p.agent_tool),
                millis: &agent.call_ms,
                colour: colour::ORANGE,
                class: "sample call",
            });
        }
    }
    strips
}

/// Seconds to about three significant digits: `1.33`, `231.9`, `0.352`.
fn short(seconds: f64) -> String {
    if seconds >= 10.0 {
        format!("{seconds:.1}")
    } else if seconds >= 1.0 {
        format!("{seconds:.2}")
    } else {
        format!("{seconds:.3}")
    }
}

/// The median of `values` (not empty), nearest rank as the bench prints it.
fn p50(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[((sorted.len() - 1) as f64 * 0.5).round() as usize]
}

/// A dot's offset from its row's centre, −1 to 1: spread evenly by its index (the
/// golden ratio's multiples), the same on every render.
fn jitter(i: usize) -> f64 {
    ((i as f64 * 0.618_033_988_75).fract() - 0.5) * 2.0
}

const WIDTH: f64 = 800.0;
const LEFT: f64 = 325.0;
const RIGHT: f64 = 40.0;
const BAR_ROW: f64 = 26.0;
const STRIP_ROW: f64 = 36.0;

/// The chart.
pub fn render(file: &File) -> anyhow::Result<String> {
    check(file)?;
    let bars = bars(file);
    let strips = strips(file);

    let bar_area = Area {
        left: LEFT,
        top: 84.0,
        right: WIDTH - RIGHT - 120.0,
        bottom: 84.0 + bars.len() as f64 * BAR_ROW + 4.0,
    };
    let strip_top = bar_area.bottom + 96.0;
    let strip_area = Area {
        left: LEFT,
        top: strip_top,
        right: WIDTH - RIGHT,
        bottom: strip_top + strips.len() as f64 * STRIP_ROW + 4.0,
    };
    let notes = format!(
        "One cold nodefence status (its own process: start-up, configuration, TLS \
         handshakes or RMCP+ sessions, {} readings in flight) against the agents run one \
         after the other, as a shell loop would, over mock BMCs (for vSphere, the VMs of one \
         mock vCenter; for KubeVirt, the VMs of one infrastructure cluster's stand-in) on \
         loopback. An agent call pays a Python start-up (and for IPMI an ipmitool process, \
         for vSphere a WSDL parse and a scan of every VM, for KubeVirt a kubeconfig load and \
         API discovery) every time; a reading inside status is one request on a session \
         (for KubeVirt, two: the VMI, then the VM). Readings are whole milliseconds: those \
         under 1 ms sit at the axis' left end.",
        file.settings.concurrency
    );
    let footnote = file.footnote(COMMAND);
    let note_lines = (svg::wrap(&notes, 120).len() + svg::wrap(&footnote, 120).len()) as f64;
    let height = strip_area.bottom + 48.0 + note_lines * 15.0 + 20.0;

    let title = format!(
        "nodefence status vs the fence agents over {} BMCs",
        tick_label(file.settings.nodes as f64)
    );
    let mut doc = Svg::new(WIDTH, height, &title);
    doc.text((16.0, 26.0), &title, Font::new(17.0).bold());
    doc.text(
        (16.0, 46.0),
        "time to read every BMC once, then every single reading; log scales",
        Font::new(12.0).fill(colour::GREY),
    );

    // Time to read every BMC.
    doc.text(
        (16.0, bar_area.top - 12.0),
        &format!(
            "Time to read all {} BMCs once",
            tick_label(file.settings.nodes as f64)
        ),
        Font::new(13.0).bold(),
    );
    let most = bars.iter().map(|b| b.seconds).fold(0.0, f64::max);
    let least = bars.iter().map(|b| b.seconds).fold(f64::INFINITY, f64::min);
    let seconds = Log10::covering(least, most, (bar_area.left, bar_area.right));
    svg::x_axis(&mut doc, bar_area, &seconds, "seconds, log scale (s)");
    for (i, bar) in bars.iter().enumerate() {
        let y = bar_area.top + 4.0 + BAR_ROW * i as f64;
        doc.text(
            (LEFT - 10.0, y + 15.0),
            &bar.label,
            Font::new(12.0).anchor(Anchor::End),
        );
        let end = seconds.at(bar.seconds);
        doc.rect(
            bar_area.left,
            y + 3.0,
            end - bar_area.left,
            BAR_ROW - 8.0,
            bar.colour,
            Some("total"),
        );
        doc.text((end + 6.0, y + 15.0), &bar.value, Font::new(11.0));
    }

    // Every reading and call.
    doc.text(
        (16.0, strip_area.top - 12.0),
        "Each reading (nodefence) and each call (agent)",
        Font::new(13.0).bold(),
    );
    let all = strips.iter().flat_map(|s| s.millis.iter().copied());
    let (lo, hi) = all.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
        (if v > 0.0 { lo.min(v) } else { lo }, hi.max(v))
    });
    let millis = Log10::covering(
        lo.min(1.0),
        hi.max(10.0),
        (strip_area.left, strip_area.right),
    );
    svg::x_axis(
        &mut doc,
        strip_area,
        &millis,
        "milliseconds, log scale (ms)",
    );
    for (i, strip) in strips.iter().enumerate() {
        let centre = strip_area.top + 4.0 + STRIP_ROW * (i as f64 + 0.5);
        doc.text(
            (LEFT - 10.0, centre + 4.0),
            &strip.label,
            Font::new(12.0).anchor(Anchor::End),
        );
        let centres: Vec<(f64, f64)> = strip
            .millis
            .iter()
            .enumerate()
            .map(|(k, &ms)| (millis.at(ms), centre + jitter(k) * (STRIP_ROW / 2.0 - 6.0)))
            .collect();
        doc.dots(&centres, 2.0, strip.colour, strip.class);
        let median = p50(strip.millis);
        let x = millis.at(median);
        doc.line(
            (x, centre - STRIP_ROW / 2.0 + 3.0),
            (x, centre + STRIP_ROW / 2.0 - 3.0),
            Stroke::solid(colour::TEXT, 2.0),
            Some("median"),
        );
        doc.text(
            (x + 4.0, centre - STRIP_ROW / 2.0 + 10.0),
            &format!("p50 {} ms", tick_label(median.round())),
            Font::new(10.0),
        );
    }

    svg::notes_and_footnote(&mut doc, strip_area.bottom + 54.0, &notes, &footnote, 120);
    Ok(doc.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_the_row_and_repeats() {
        for i in 0..1000 {
            assert!((-1.0..=1.0).contains(&jitter(i)));
            assert_eq!(jitter(i), jitter(i));
        }
    }

    #[test]
    fn p50_is_the_nearest_rank_median() {
        assert_eq!(p50(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(p50(&[4.0, 1.0, 3.0, 2.0]), 3.0);
    }
}
