//! Reading an OpenMetrics/Prometheus text exposition back into samples: for tests
//! and tools that check nodefence's own `/metrics`.

use std::collections::BTreeMap;

/// One sample line of an exposition.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Full sample name, suffix included (`nodefence_releases_total`,
    /// `nodefence_power_query_duration_seconds_bucket`).
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

impl Sample {
    /// The label's value, or `""` when absent.
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).map_or("", String::as_str)
    }
}

/// Parses the samples of an OpenMetrics (or Prometheus) text exposition, skipping
/// comments; for tests and tools that read nodefence's own `/metrics`.
pub fn parse_samples(text: &str) -> Result<Vec<Sample>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        out.push(parse_line(line).map_err(|e| format!("line {}: {e}: {line:?}", i + 1))?);
    }
    Ok(out)
}

fn parse_line(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ']).ok_or("no value")?;
    let name = line[..name_end].to_string();
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(body) = rest.strip_prefix('{') {
        let mut chars = body.char_indices();
        'labels: loop {
            let mut key = String::new();
            loop {
                match chars.next().ok_or("unterminated labels")? {
                    (i, '}') if key.is_empty() => {
                        rest = &body[i + 1..];
                        break 'labels;
                    }
                    (_, '=') => break,
                    (_, c) => key.push(c),
                }
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                return Err(format!("value of label {key} not quoted"));
            }
            let mut value = String::new();
            loop {
                match chars.next().ok_or("unterminated label value")?.1 {
                    '"' => break,
                    '\\' => match chars.next().ok_or("dangling escape")?.1 {
                        'n' => value.push('\n'),
                        c => value.push(c),
                    },
                    c => value.push(c),
                }
            }
            labels.insert(key, value);
            match chars.next() {
                Some((_, ',')) => {}
                Some((i, '}')) => {
                    rest = &body[i + 1..];
                    break;
                }
                _ => return Err("expected ',' or '}' after a label".into()),
            }
        }
    }
    let value = rest
        .split_whitespace()
        .next()
        .ok_or("no value")?
        .parse::<f64>()
        .map_err(|e| e.to_string())?;
    Ok(Sample {
        name,
        labels,
        value,
    })
}
