//! The JSONPath subset CRD printer columns (`additionalPrinterColumns[].jsonPath`)
//! and selectable fields use, evaluated as client-go's `jsonpath` package does for
//! the apiserver's table convertor: the first result is the cell.
//!
//! Supported: fields (`.spec.replicas`), bracketed fields (`.metadata.labels['app']`,
//! `["app"]`), indices (`.spec.items[0]`, `[-1]` from the end), the wildcard `[*]`,
//! and filters comparing a field of each item to a literal:
//! `.status.conditions[?(@.type=="Ready")].status` (`==`, `!=`; string, number,
//! boolean literals). Not supported: slices (`[0:2]`), recursive descent (`..`),
//! unions, `range`/`end` templates and other filter operators; a column using them
//! makes the table fall back to its columns so far, as the apiserver does when
//! client-go cannot parse one.

use serde_json::Value;

/// One step of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Field(String),
    Index(i64),
    All,
    Filter {
        /// Field path inside each item (`@.type` → `["type"]`).
        path: Vec<String>,
        equal: bool,
        literal: Value,
    },
}

/// A parsed path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonPath(Vec<Step>);

/// Why a path cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unrecognized column definition {0:?}")]
pub struct Unsupported(pub String);

impl JsonPath {
    /// A path selecting the root itself.
    pub fn empty() -> Self {
        Self(Vec::new())
    }

    /// Parses `.a.b[0]`-style paths (with or without the template braces `{...}`).
    pub fn parse(text: &str) -> Result<Self, Unsupported> {
        let err = || Unsupported(text.to_owned());
        let inner = text
            .trim()
            .strip_prefix('{')
            .and_then(|t| t.strip_suffix('}'))
            .unwrap_or(text.trim());
        let inner = inner.strip_prefix('$').unwrap_or(inner);
        let chars: Vec<char> = inner.chars().collect();
        let mut steps = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            match chars[i] {
                '.' => {
                    if chars.get(i + 1) == Some(&'.') {
                        return Err(err());
                    }
                    let start = i + 1;
                    let mut end = start;
                    while end < chars.len() && chars[end] != '.' && chars[end] != '[' {
                        end += 1;
                    }
                    let name: String = chars[start..end].iter().collect();
                    if !name.is_empty() {
                        steps.push(Step::Field(name));
                    }
                    i = end;
                }
                '[' => {
                    let close = find_close(&chars, i).ok_or_else(err)?;
                    let body: String = chars[i + 1..close].iter().collect();
                    steps.push(bracket(body.trim()).ok_or_else(err)?);
                    i = close + 1;
                }
                _ => return Err(err()),
            }
        }
        Ok(Self(steps))
    }

    /// Every value the path selects in `root`, in order.
    pub fn find<'a>(&self, root: &'a Value) -> Vec<&'a Value> {
        let mut current = vec![root];
        for step in &self.0 {
            let mut next = Vec::new();
            for v in current {
                match step {
                    Step::Field(name) => {
                        if let Some(x) = v.get(name.as_str()) {
                            next.push(x);
                        }
                    }
                    Step::Index(i) => {
                        if let Some(list) = v.as_array() {
                            let idx = if *i < 0 { list.len() as i64 + i } else { *i };
                            if let Some(x) = usize::try_from(idx).ok().and_then(|i| list.get(i)) {
                                next.push(x);
                            }
                        }
                    }
                    Step::All => match v {
                        Value::Array(list) => next.extend(list.iter()),
                        Value::Object(map) => next.extend(map.values()),
                        _ => {}
                    },
                    Step::Filter {
                        path,
                        equal,
                        literal,
                    } => {
                        if let Some(list) = v.as_array() {
                            next.extend(list.iter().filter(|item| {
                                let got = path.iter().try_fold(*item, |o, k| o.get(k.as_str()));
                                got.is_some_and(|g| same(g, literal) == *equal)
                            }));
                        }
                    }
                }
            }
            current = next;
        }
        current
    }

    /// The first value selected, if any.
    pub fn first<'a>(&self, root: &'a Value) -> Option<&'a Value> {
        self.find(root).into_iter().next()
    }

    /// The path as a field selector label (`.spec.color` → `spec.color`), when it is
    /// made of plain fields only.
    pub fn field_label(&self) -> Option<String> {
        let mut parts = Vec::new();
        for s in &self.0 {
            match s {
                Step::Field(f) => parts.push(f.clone()),
                _ => return None,
            }
        }
        (!parts.is_empty()).then(|| parts.join("."))
    }
}

fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// The `]` closing the bracket opened at `open`, skipping quoted text.
fn find_close(chars: &[char], open: usize) -> Option<usize> {
    let mut quote: Option<char> = None;
    let mut depth = 0;
    for (j, &c) in chars.iter().enumerate().skip(open) {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '[') => depth += 1,
            (None, ']') => {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
    }
    None
}

fn unquote(s: &str) -> Option<&str> {
    s.strip_prefix('\'')
        .and_then(|t| t.strip_suffix('\''))
        .or_else(|| s.strip_prefix('"').and_then(|t| t.strip_suffix('"')))
}

fn bracket(body: &str) -> Option<Step> {
    if body == "*" {
        return Some(Step::All);
    }
    if let Some(name) = unquote(body) {
        return Some(Step::Field(name.to_owned()));
    }
    if let Ok(i) = body.parse::<i64>() {
        return Some(Step::Index(i));
    }
    let filter = body.strip_prefix("?(")?.strip_suffix(')')?.trim();
    let (lhs, rhs, equal) = if let Some((l, r)) = filter.split_once("==") {
        (l, r, true)
    } else if let Some((l, r)) = filter.split_once("!=") {
        (l, r, false)
    } else {
        return None;
    };
    let path: Vec<String> = lhs
        .trim()
        .strip_prefix("@.")?
        .split('.')
        .map(str::to_owned)
        .collect();
    if path.iter().any(String::is_empty) {
        return None;
    }
    let rhs = rhs.trim();
    let literal = match unquote(rhs) {
        Some(s) => Value::String(s.to_owned()),
        None => serde_json::from_str::<Value>(rhs)
            .ok()
            .filter(|v| v.is_number() || v.is_boolean())?,
    };
    Some(Step::Filter {
        path,
        equal,
        literal,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_column_paths_crds_use() {
        let o = json!({"spec": {"replicas": 3, "items": [{"name": "a"}, {"name": "b"}]},
            "metadata": {"labels": {"app.kubernetes.io/name": "web"}},
            "status": {"conditions": [{"type": "Synced", "status": "False"},
                                      {"type": "Ready", "status": "True"}]}});
        let first = |p: &str| JsonPath::parse(p).unwrap().first(&o).cloned();
        assert_eq!(first(".spec.replicas"), Some(json!(3)));
        assert_eq!(first(".spec.items[0].name"), Some(json!("a")));
        assert_eq!(first(".spec.items[-1].name"), Some(json!("b")));
        assert_eq!(first("{.spec.items[*].name}"), Some(json!("a")));
        assert_eq!(
            first(".status.conditions[?(@.type==\"Ready\")].status"),
            Some(json!("True"))
        );
        assert_eq!(
            first(".status.conditions[?(@.type!='Ready')].status"),
            Some(json!("False"))
        );
        assert_eq!(
            first(".metadata.labels['app.kubernetes.io/name']"),
            Some(json!("web"))
        );
        assert_eq!(first(".spec.missing.deeper"), None);
        assert!(JsonPath::parse("..spec").is_err());
        assert!(JsonPath::parse(".spec[0:2]").is_err());
        assert_eq!(
            JsonPath::parse(".spec.color")
                .unwrap()
                .field_label()
                .as_deref(),
            Some("spec.color")
        );
    }
}
