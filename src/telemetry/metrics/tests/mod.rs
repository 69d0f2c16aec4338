//! Unit tests of the metrics: every family, its labels and values, parsed back.
//!
//! The helpers that parse the exposition are here; tests by theme: [`families`] (every
//! family, its type and starting values, the text format), [`counters`] (counters and
//! histograms, and their bounded label values), [`gauges`] (gauges set from the
//! engine, the BMCs, the power levels and the configuration).

mod counters;
mod families;
mod gauges;

use std::collections::BTreeMap;

use super::*;
use crate::telemetry::exposition::{Sample, parse_samples};

/// The samples of `m.encode()`, parsed.
fn samples(m: &Metrics) -> Vec<Sample> {
    parse_samples(&m.encode()).unwrap()
}

/// Every sample named `name`, as (labels, value).
fn series(m: &Metrics, name: &str) -> Vec<(Vec<(String, String)>, f64)> {
    samples(m)
        .into_iter()
        .filter(|s| s.name == name)
        .map(|s| (s.labels.into_iter().collect(), s.value))
        .collect()
}

/// The value of the one sample with exactly these labels.
fn value(m: &Metrics, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let want: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect::<BTreeMap<_, _>>()
        .into_iter()
        .collect();
    let found: Vec<f64> = series(m, name)
        .into_iter()
        .filter(|(l, _)| *l == want)
        .map(|(_, v)| v)
        .collect();
    assert!(
        found.len() <= 1,
        "{name}{labels:?} appears {} times",
        found.len()
    );
    found.first().copied()
}

fn types(m: &Metrics) -> Vec<(String, String)> {
    m.encode()
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect()
}
