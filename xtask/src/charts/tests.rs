//! The charts rendered from the fixture (`xtask/fixtures/bench-results`, as CI does)
//! and from broken copies of it: every SVG parses as XML, has a mark per sample and
//! its target lines, escapes text taken from JSON, and a bad file is refused with its
//! name and the field.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use quick_xml::events::Event;
use serde_json::Value;

use super::{Outcome, render_dir};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/bench-results")
}

fn fixture_json(bench: &str) -> Value {
    let text = std::fs::read_to_string(fixture().join(format!("{bench}.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// A copy of the fixture in a temporary directory, `bench`'s file changed by `edit`.
fn fixture_with(bench: &str, edit: impl FnOnce(&mut Value)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture()).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
    }
    let mut json = fixture_json(bench);
    edit(&mut json);
    std::fs::write(
        dir.path().join(format!("{bench}.json")),
        serde_json::to_string_pretty(&json).unwrap(),
    )
    .unwrap();
    dir
}

/// An element of a parsed SVG: its name, attributes and text (unescaped).
#[derive(Debug)]
struct Element {
    name: String,
    attributes: BTreeMap<String, String>,
    text: String,
}

impl Element {
    fn number(&self, attribute: &str) -> f64 {
        self.attributes[attribute].parse().unwrap()
    }
}

/// Parses `svg` as XML, failing the test on any error; its elements in order.
fn parse(svg: &str) -> Vec<Element> {
    let mut reader = quick_xml::Reader::from_str(svg);
    let mut elements: Vec<Element> = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    loop {
        let event = reader
            .read_event()
            .unwrap_or_else(|e| panic!("not XML at {}: {e}\n{svg}", reader.buffer_position()));
        let element = |e: &quick_xml::events::BytesStart<'_>| Element {
            name: String::from_utf8(e.name().as_ref().to_vec()).unwrap(),
            attributes: e
                .attributes()
                .map(|a| {
                    let a = a.unwrap();
                    (
                        String::from_utf8(a.key.as_ref().to_vec()).unwrap(),
                        a.normalized_value(quick_xml::XmlVersion::Implicit1_0)
                            .unwrap()
                            .into_owned(),
                    )
                })
                .collect(),
            text: String::new(),
        };
        match event {
            Event::Start(e) => {
                open.push(elements.len());
                elements.push(element(&e));
            }
            Event::Empty(e) => elements.push(element(&e)),
            Event::Text(t) => {
                if let Some(&i) = open.last() {
                    elements[i].text.push_str(&t.decode().unwrap());
                }
            }
            Event::GeneralRef(r) => {
                // `&lt;` and friends come as references of their own.
                if let Some(&i) = open.last() {
                    let name = String::from_utf8(r.to_vec()).unwrap();
                    let c = match name.as_str() {
                        "lt" => '<',
                        "gt" => '>',
                        "amp" => '&',
                        "quot" => '"',
                        "apos" => '\'',
                        other => panic!("unexpected entity &{other};"),
                    };
                    elements[i].text.push(c);
                }
            }
            Event::End(_) => {
                open.pop();
            }
            Event::Eof => break,
            _ => {}
        }
    }
    assert!(open.is_empty(), "unclosed elements");
    elements
}

fn with_class<'a>(elements: &'a [Element], class: &str) -> Vec<&'a Element> {
    elements
        .iter()
        .filter(|e| e.attributes.get("class").is_some_and(|c| c == class))
        .collect()
}

fn texts(elements: &[Element]) -> Vec<&str> {
    elements
        .iter()
        .filter(|e| e.name == "text")
        .map(|e| e.text.as_str())
        .collect()
}

/// Renders `from` into a fresh directory; the SVGs by file name.
fn render(from: &Path) -> BTreeMap<String, String> {
    let out = tempfile::tempdir().unwrap();
    render_dir(from, out.path(), true).unwrap();
    std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            (
                path.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&path).unwrap(),
            )
        })
        .collect()
}

#[test]
fn the_fixture_renders_four_plain_svgs() {
    let out = tempfile::tempdir().unwrap();
    let outcomes = render_dir(&fixture(), out.path(), true).unwrap();
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, Outcome::Rendered { .. })),
        "{outcomes:?}"
    );
    let svgs = render(&fixture());
    assert_eq!(
        svgs.keys().collect::<Vec<_>>(),
        [
            "fleet_steady_state.svg",
            "partition_timeline.svg",
            "power_loss_recovery.svg",
            "status_vs_fence_agents.svg"
        ]
    );
    for (name, svg) in &svgs {
        let elements = parse(svg);
        let root = &elements[0];
        assert_eq!(root.name, "svg", "{name}");
        assert_eq!(root.attributes["xmlns"], "http://www.w3.org/2000/svg");
        assert_eq!(root.attributes["font-family"], "sans-serif");
        assert_eq!(elements[1].name, "title", "{name}: accessible title first");
        // What GitHub's image proxy would refuse or a reader would not have.
        for e in &elements {
            assert!(
                !matches!(
                    e.name.as_str(),
                    "script" | "style" | "foreignObject" | "image" | "a"
                ),
                "{name}: <{}>",
                e.name
            );
            assert!(
                !e.attributes
                    .keys()
                    .any(|k| k.starts_with("on") || k == "href"),
                "{name}: {:?}",
                e.attributes
            );
        }
        // A light background covering the whole picture.
        let background = &elements[2];
        assert_eq!(background.name, "rect");
        assert_eq!(background.attributes["fill"], "#ffffff");
        assert_eq!(background.number("width"), root.number("width"));
        assert_eq!(background.number("height"), root.number("height"));
        // Every axis says its unit.
        assert!(
            texts(&elements)
                .iter()
                .any(|t| t.ends_with("(s)") || t.ends_with("(ms)")),
            "{name}: no axis label with a unit"
        );
    }
}

#[test]
fn rendering_is_deterministic() {
    assert_eq!(render(&fixture()), render(&fixture()));
}

#[test]
fn power_loss_chart_has_a_dot_per_run_and_the_targets_where_they_belong() {
    let json = fixture_json("power_loss_recovery");
    let runs = json["results"]["power_loss"].as_array().unwrap();
    let svg = &render(&fixture())["power_loss_recovery.svg"];
    let elements = parse(svg);
    assert_eq!(with_class(&elements, "sample released").len(), runs.len());
    let running = with_class(&elements, "sample running");
    assert_eq!(running.len(), runs.len());
    assert_eq!(
        with_class(&elements, "floor").len(),
        runs.len(),
        "a floor per run"
    );
    assert_eq!(
        with_class(&elements, "floor-line").len(),
        2,
        "median and worst floors"
    );

    let targets = with_class(&elements, "target");
    assert_eq!(targets.len(), 2);
    let all_texts = texts(&elements);
    for label in [
        "target: median ≤ 15.0 s",
        "target: worst ≤ 18.0 s",
        "floor: worst 21.4 s",
    ] {
        assert!(all_texts.contains(&label), "{label} in {all_texts:?}");
    }
    // The 18 s target line sits between the runs below 18 s and those above.
    let worst_target = targets.iter().map(|t| t.number("x1")).fold(0.0, f64::max);
    let late_runs = runs
        .iter()
        .filter(|r| r["pod_running_s"].as_f64().unwrap() > 18.0)
        .count();
    assert!(
        late_runs > 0 && late_runs < runs.len(),
        "the fixture straddles 18 s"
    );
    let late_dots = running
        .iter()
        .filter(|d| d.number("cx") > worst_target)
        .count();
    assert_eq!(late_dots, late_runs);
}

#[test]
fn partition_timeline_shows_each_step_and_the_target() {
    let svg = &render(&fixture())["partition_timeline.svg"];
    let elements = parse(svg);
    let events = with_class(&elements, "sample event");
    // The cut, the seven milestones the fixture's steps hold, release, db-0 Running.
    assert_eq!(events.len(), 10);
    let xs: Vec<f64> = events.iter().map(|e| e.number("cx")).collect();
    assert!(xs.windows(2).all(|w| w[0] <= w[1]), "in time order: {xs:?}");
    let target = with_class(&elements, "target");
    assert_eq!(target.len(), 1);
    assert!(
        xs.last().unwrap() < &target[0].number("x1"),
        "db-0 Running (79.5 s) before the 92 s target"
    );
    let all_texts = texts(&elements);
    for label in [
        "control plane: node NotReady",
        "BMC: ForceOff received",
        "control plane: volume attached elsewhere",
        "+79.5 s",
        "waits 60.0 s (unhealthy_after)",
    ] {
        assert!(all_texts.contains(&label), "{label} in {all_texts:?}");
    }
}

#[test]
fn fleet_chart_has_a_dot_per_sample_and_a_bar_per_interval() {
    let json = fixture_json("fleet_steady_state");
    let samples = json["results"]["samples"].as_array().unwrap().len();
    let svg = &render(&fixture())["fleet_steady_state.svg"];
    let elements = parse(svg);
    assert_eq!(with_class(&elements, "sample rss").len(), samples);
    assert_eq!(with_class(&elements, "sample cpu").len(), samples - 1);
    assert_eq!(with_class(&elements, "target").len(), 2, "RSS and CPU");
    let all_texts = texts(&elements);
    assert!(all_texts.contains(&"target ≤ 50 MiB"), "{all_texts:?}");
    assert!(all_texts.contains(&"target ≤ 5 % (any 10 s)"));
    // The RSS target line at 50 MiB: the samples above it are those over 50 MiB.
    let samples_over = json["results"]["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["rss_mib"].as_f64().unwrap() > 50.0)
        .count();
    let rss_target = with_class(&elements, "target")[0].number("y1");
    let dots_over = with_class(&elements, "sample rss")
        .iter()
        .filter(|d| d.number("cy") < rss_target)
        .count();
    assert_eq!(dots_over, samples_over);
}

#[test]
fn fleet_chart_marks_the_worst_10_s_over_its_bars() {
    let json = fixture_json("fleet_steady_state");
    let worst = &json["results"]["worst_10s"];
    let (start, end) = (
        worst["start_s"].as_f64().unwrap(),
        worst["end_s"].as_f64().unwrap(),
    );
    let intervals_inside = json["results"]["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| (start..=end).contains(&s["t_s"].as_f64().unwrap()))
        .count()
        - 1;
    let svg = &render(&fixture())["fleet_steady_state.svg"];
    let elements = parse(svg);
    let band = with_class(&elements, "worst");
    assert_eq!(band.len(), 1, "one band");
    let (left, right) = (
        band[0].number("x"),
        band[0].number("x") + band[0].number("width"),
    );
    let bars_inside = with_class(&elements, "sample cpu")
        .iter()
        .filter(|b| b.number("x") >= left && b.number("x") + b.number("width") <= right)
        .count();
    assert_eq!(
        bars_inside, intervals_inside,
        "the band covers its sampling intervals"
    );
    assert_eq!(with_class(&elements, "worst level").len(), 1);
    let label = format!("worst 10 s {:.1} %", worst["cpu_percent"].as_f64().unwrap());
    assert!(texts(&elements).contains(&label.as_str()), "{label}");
}

#[test]
fn the_worst_10_s_must_be_there_and_be_what_the_samples_say() {
    let dir = fixture_with("fleet_steady_state", |j| {
        j["results"].as_object_mut().unwrap().remove("worst_10s");
    });
    let e = error_of(dir.path());
    assert!(
        e.contains("fleet_steady_state.json: field `results`: missing field `worst_10s`"),
        "{e}"
    );

    let dir = fixture_with("fleet_steady_state", |j| {
        let cpu = j["results"]["worst_10s"]["cpu_percent"].as_f64().unwrap();
        j["results"]["worst_10s"]["cpu_percent"] = Value::from(cpu - 1.0);
    });
    let e = error_of(dir.path());
    assert!(
        e.contains("field `results.worst_10s.cpu_percent`")
            && e.contains("the samples at its start and end say"),
        "{e}"
    );

    let dir = fixture_with("fleet_steady_state", |j| {
        let start = j["results"]["worst_10s"]["start_s"].as_f64().unwrap();
        j["results"]["worst_10s"]["start_s"] = Value::from(start + 0.5);
    });
    let e = error_of(dir.path());
    assert!(
        e.contains("field `results.worst_10s.start_s`")
            && e.contains("is not the time of a sample"),
        "{e}"
    );

    // Another 10 s of the window, with its own figure: not the worst.
    let dir = fixture_with("fleet_steady_state", |j| {
        let samples = j["results"]["samples"].as_array().unwrap().clone();
        let worst = j["results"]["worst_10s"].clone();
        let at = |t: &Value| samples.iter().position(|s| s["t_s"] == *t).unwrap();
        let (from, to) = (at(&worst["start_s"]), at(&worst["end_s"]));
        let gap = to - from;
        let window_start = j["results"]["window"]["start_s"].as_f64().unwrap();
        let cpu = |a: &Value, b: &Value| {
            (b["cpu_s"].as_f64().unwrap() - a["cpu_s"].as_f64().unwrap())
                / (b["t_s"].as_f64().unwrap() - a["t_s"].as_f64().unwrap())
                * 100.0
        };
        let other = (0..samples.len() - gap)
            .filter(|&i| samples[i]["t_s"].as_f64().unwrap() >= window_start)
            .min_by(|&a, &b| {
                cpu(&samples[a], &samples[a + gap]).total_cmp(&cpu(&samples[b], &samples[b + gap]))
            })
            .unwrap();
        let (a, b) = (&samples[other], &samples[other + gap]);
        j["results"]["worst_10s"] = serde_json::json!({
            "start_s": a["t_s"], "end_s": b["t_s"],
            "cpu_percent": (cpu(a, b) * 1000.0).round() / 1000.0,
        });
    });
    let e = error_of(dir.path());
    assert!(
        e.contains("field `results.worst_10s.cpu_percent`") && e.contains(" took "),
        "{e}"
    );
}

#[test]
fn status_chart_has_a_dot_per_reading_and_per_call() {
    let json = fixture_json("status_vs_fence_agents");
    let protocols = json["results"]["protocols"].as_array().unwrap();
    let count = |f: &dyn Fn(&Value) -> &Value| -> usize {
        protocols
            .iter()
            .map(|p| f(p).as_array().unwrap().len())
            .sum()
    };
    let readings = count(&|p| &p["nodefence"]["reading_ms"]);
    let calls = count(&|p| &p["agent"]["call_ms"]);
    let svg = &render(&fixture())["status_vs_fence_agents.svg"];
    let elements = parse(svg);
    // Each strip is one path of dots: a zero-length segment per reading or call.
    let dots = |class: &str| -> usize {
        with_class(&elements, class)
            .iter()
            .map(|path| {
                let d = &path.attributes["d"];
                assert_eq!(d.matches('M').count(), d.matches("h0").count(), "{d}");
                d.matches('M').count()
            })
            .sum()
    };
    assert_eq!(dots("sample reading"), readings);
    assert_eq!(dots("sample call"), calls);
    assert_eq!(with_class(&elements, "total").len(), 2 * protocols.len());
    assert_eq!(with_class(&elements, "median").len(), 2 * protocols.len());
}

#[test]
fn text_from_json_is_escaped() {
    let hostile = "<script>alert('x')</script> & \"more\"";
    let dir = fixture_with("status_vs_fence_agents", |j| {
        j["note"] = Value::from(hostile);
        j["results"]["protocols"][0]["agent_tool"] = Value::from("fence_<redfish>");
    });
    let svg = &render(dir.path())["status_vs_fence_agents.svg"];
    assert!(
        !svg.contains("<script>") && !svg.contains("<redfish>"),
        "{svg}"
    );
    assert!(
        svg.contains("&lt;script&gt;alert(&apos;x&apos;)&lt;/script&gt; &amp; &quot;more&quot;")
    );
    let elements = parse(svg);
    let all_texts = texts(&elements);
    assert!(
        all_texts.iter().any(|t| t.contains(hostile)),
        "the note reads as written once unescaped: {all_texts:?}"
    );
    assert!(all_texts.contains(&"Redfish: fence_<redfish>, each call"));
}

/// The error of rendering `dir`.
fn error_of(dir: &Path) -> String {
    let out = tempfile::tempdir().unwrap();
    format!("{:#}", render_dir(dir, out.path(), true).unwrap_err())
}

#[test]
fn a_field_of_the_wrong_type_is_named_with_its_file() {
    let dir = fixture_with("power_loss_recovery", |j| {
        j["results"]["power_loss"][2]["pod_running_s"] = Value::from("late");
    });
    let e = error_of(dir.path());
    assert!(e.contains("power_loss_recovery.json"), "{e}");
    assert!(
        e.contains("field `results.power_loss[2].pod_running_s`: invalid type: string \"late\""),
        "{e}"
    );
}

#[test]
fn a_missing_field_is_named_with_its_file() {
    let dir = fixture_with("fleet_steady_state", |j| {
        j["results"]["samples"][3]
            .as_object_mut()
            .unwrap()
            .remove("rss_mib");
    });
    let e = error_of(dir.path());
    assert!(e.contains("fleet_steady_state.json"), "{e}");
    assert!(
        e.contains("field `results.samples[3]`: missing field `rss_mib`"),
        "{e}"
    );
}

#[test]
fn impossible_values_are_refused_by_field() {
    let dir = fixture_with("fleet_steady_state", |j| {
        j["results"]["samples"][4]["cpu_s"] = Value::from(0.0);
    });
    let e = error_of(dir.path());
    assert!(
        e.contains("fleet_steady_state.json: field `results.samples[4].cpu_s`: less than the sample before it"),
        "{e}"
    );
    let dir = fixture_with("power_loss_recovery", |j| {
        j["results"]["power_loss"] = Value::Array(Vec::new());
    });
    let e = error_of(dir.path());
    assert!(e.contains("field `results.power_loss`: no runs"), "{e}");
}

#[test]
fn another_schema_or_bench_is_refused_as_such() {
    let dir = fixture_with("status_vs_fence_agents", |j| j["schema"] = Value::from(2));
    let e = error_of(dir.path());
    assert!(
        e.contains("status_vs_fence_agents.json: field `schema`: unknown schema 2: this xtask reads schema 1"),
        "{e}"
    );
    let dir = fixture_with("status_vs_fence_agents", |j| {
        j.as_object_mut().unwrap().remove("schema");
    });
    assert!(error_of(dir.path()).contains("field `schema`: missing"));
    let dir = fixture_with("status_vs_fence_agents", |j| {
        j["bench"] = Value::from("status_fanout")
    });
    assert!(
        error_of(dir.path())
            .contains("field `bench`: \"status_fanout\", expected \"status_vs_fence_agents\"")
    );
}

#[test]
fn a_file_that_is_not_json_says_so() {
    let dir = fixture_with("fleet_steady_state", |_| {});
    std::fs::write(
        dir.path().join("fleet_steady_state.json"),
        "{\"schema\": 1,",
    )
    .unwrap();
    let e = error_of(dir.path());
    assert!(e.contains("fleet_steady_state.json: not valid JSON"), "{e}");
}

#[test]
fn a_missing_file_is_skipped_unless_all_are_required() {
    let dir = fixture_with("fleet_steady_state", |_| {});
    std::fs::remove_file(dir.path().join("fleet_steady_state.json")).unwrap();
    let out = tempfile::tempdir().unwrap();
    let outcomes = render_dir(dir.path(), out.path(), false).unwrap();
    assert!(outcomes.contains(&Outcome::Skipped {
        bench: "fleet_steady_state",
        missing: dir.path().join("fleet_steady_state.json"),
    }));
    assert!(out.path().join("power_loss_recovery.svg").is_file());
    assert!(!out.path().join("fleet_steady_state.svg").exists());

    let e = error_of(dir.path());
    assert!(
        e.contains("--require-all") && e.contains("fleet_steady_state.json"),
        "{e}"
    );

    let empty = tempfile::tempdir().unwrap();
    let e = format!(
        "{:#}",
        render_dir(empty.path(), out.path(), false).unwrap_err()
    );
    assert!(e.contains("no bench results in"), "{e}");
}
