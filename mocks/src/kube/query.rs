//! Query parameters of list, watch, write and delete requests, and list pagination.
//!
//! Parameters are parsed once, strictly where the real server is strict (a bad
//! `limit`, boolean or `continue` token is a 400) and leniently where it is
//! lenient (unknown parameters, `pretty`, `fieldManager`, list `resourceVersion`).
//!
//! Pagination: a `continue` token is opaque to clients (base64url of
//! `{"v":"meta.k8s.io/v1","rv":N,"start":"<ns>/<name>\u0000"}`, the shape the real
//! server uses). The next page lists the objects *as they are now* whose key sorts
//! after `start`; it is not a snapshot at `rv` (the real server reads etcd at that
//! revision), so objects changed between pages show their newest state and one
//! created behind the cursor is missed. Every page reports the first page's
//! `resourceVersion`, so a watcher starting from it replays anything it missed.
//! Tokens never expire (no 410 for an old `continue`).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use super::resources::ResourceType;
use super::selector::{FieldSelector, LabelSelector};
use super::store::StoreError;

/// The query of a request, parsed.
#[derive(Debug, Clone, Default)]
pub struct Query {
    pub label_selector: LabelSelector,
    pub field_selector: FieldSelector,
    pub limit: Option<u64>,
    pub continue_token: Option<String>,
    pub watch: bool,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    pub timeout_seconds: Option<u64>,
    pub allow_watch_bookmarks: bool,
    /// `None` when absent: its default depends on `resourceVersion`.
    pub send_initial_events: Option<bool>,
    /// `includeObject` of Table requests: None, Metadata (default) or Object.
    pub include_object: Option<String>,
    pub grace_period_seconds: Option<i64>,
    pub propagation_policy: Option<String>,
    pub dry_run: bool,
    /// `fieldValidation` of writes: Ignore, Warn or Strict (only custom resources,
    /// which have a schema here, honour it).
    pub field_validation: Option<String>,
}

impl Query {
    /// Parses the raw query string (`None`: no query) for a request on `rt`.
    pub fn parse(raw: Option<&str>, rt: Option<ResourceType>) -> Result<Self, StoreError> {
        let mut q = Query::default();
        let pairs: Vec<(String, String)> = match raw {
            Some(raw) => serde_urlencoded_pairs(raw)?,
            None => Vec::new(),
        };
        for (k, v) in pairs {
            match k.as_str() {
                "labelSelector" => q.label_selector = LabelSelector::parse(&v)?,
                "fieldSelector" => {
                    if let Some(rt) = rt {
                        q.field_selector = FieldSelector::parse(&v, rt)?;
                    }
                }
                "limit" => {
                    let n: i64 = v.parse().map_err(|_| bad_param("limit", &v))?;
                    q.limit = (n > 0).then_some(n as u64);
                }
                "continue" if !v.is_empty() => q.continue_token = Some(v),
                "watch" => q.watch = parse_bool("watch", &v)?,
                "resourceVersion" if !v.is_empty() => q.resource_version = Some(v),
                "resourceVersionMatch" if !v.is_empty() => q.resource_version_match = Some(v),
                "timeoutSeconds" => {
                    q.timeout_seconds =
                        Some(v.parse().map_err(|_| bad_param("timeoutSeconds", &v))?)
                }
                "allowWatchBookmarks" => {
                    q.allow_watch_bookmarks = parse_bool("allowWatchBookmarks", &v)?
                }
                "sendInitialEvents" => {
                    q.send_initial_events = Some(parse_bool("sendInitialEvents", &v)?)
                }
                "includeObject" => q.include_object = Some(v),
                "gracePeriodSeconds" => {
                    q.grace_period_seconds =
                        Some(v.parse().map_err(|_| bad_param("gracePeriodSeconds", &v))?)
                }
                "propagationPolicy" => q.propagation_policy = Some(v),
                "dryRun" => q.dry_run = !v.is_empty(),
                "fieldValidation" if !v.is_empty() => q.field_validation = Some(v),
                _ => {}
            }
        }
        if let Some(m) = &q.resource_version_match {
            if !matches!(m.as_str(), "NotOlderThan" | "Exact") {
                return Err(StoreError::BadRequest(format!(
                    "resourceVersionMatch: Unsupported value: {m:?}: supported values: \"Exact\", \"NotOlderThan\""
                )));
            }
            if q.resource_version.is_none() && q.send_initial_events != Some(true) {
                return Err(StoreError::BadRequest(
                    "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided".into(),
                ));
            }
        }
        if q.send_initial_events.is_some() && !q.watch {
            return Err(StoreError::Invalid(
                "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list".into(),
            ));
        }
        Ok(q)
    }

    /// `resourceVersion` as a number, when it is one (and not "0").
    pub fn resource_version_number(&self) -> Result<Option<u64>, StoreError> {
        match self.resource_version.as_deref() {
            None | Some("0") => Ok(None),
            Some(rv) => rv
                .parse()
                .map(Some)
                .map_err(|_| StoreError::BadRequest(format!("invalid resource version: {rv:?}"))),
        }
    }
}

/// `application/x-www-form-urlencoded` pairs; empty segments (kube-rs sends `?&a=b`)
/// are skipped.
fn serde_urlencoded_pairs(raw: &str) -> Result<Vec<(String, String)>, StoreError> {
    let mut out = Vec::new();
    for seg in raw.split('&').filter(|s| !s.is_empty()) {
        let (k, v) = seg.split_once('=').unwrap_or((seg, ""));
        out.push((percent_decode(k)?, percent_decode(v)?));
    }
    Ok(out)
}

fn percent_decode(s: &str) -> Result<String, StoreError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = s
                    .get(i + 1..i + 3)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| {
                        StoreError::BadRequest(format!("invalid URL escape in query: {s:?}"))
                    })?;
                out.push(hex);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| StoreError::BadRequest(format!("query is not UTF-8: {s:?}")))
}

/// Go's `strconv.ParseBool`, as the apiserver's query decoder uses.
fn parse_bool(name: &str, v: &str) -> Result<bool, StoreError> {
    match v {
        "" | "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(bad_param(name, v)),
    }
}

fn bad_param(name: &str, v: &str) -> StoreError {
    StoreError::BadRequest(format!("invalid value {v:?} for query parameter {name:?}"))
}

/// Where a paginated list resumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// The first page's resourceVersion.
    pub resource_version: u64,
    /// The key (`namespace/name`, or `name`) of the last item returned.
    pub start_after: String,
}

impl Cursor {
    /// The opaque token for this cursor.
    pub fn encode(&self) -> String {
        let body = json!({
            "v": "meta.k8s.io/v1",
            "rv": self.resource_version,
            "start": format!("{}\u{0}", self.start_after),
        });
        URL_SAFE_NO_PAD.encode(body.to_string())
    }

    /// Reads a token from a `continue` parameter (400 when it is not one of ours).
    pub fn decode(token: &str) -> Result<Self, StoreError> {
        let invalid =
            |why: &str| StoreError::BadRequest(format!("continue key is not valid: {why}"));
        let bytes = URL_SAFE_NO_PAD
            .decode(token.trim_end_matches('='))
            .map_err(|_| invalid("not base64"))?;
        let v: Value = serde_json::from_slice(&bytes).map_err(|_| invalid("not JSON"))?;
        if v["v"] != "meta.k8s.io/v1" {
            return Err(invalid(
                "incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
            ));
        }
        let resource_version = v["rv"].as_u64().ok_or_else(|| invalid("no rv"))?;
        let start = v["start"].as_str().ok_or_else(|| invalid("no start"))?;
        Ok(Self {
            resource_version,
            start_after: start.trim_end_matches('\u{0}').to_owned(),
        })
    }
}

/// The sort key of an object in a list: `namespace/name` or `name`, matching the
/// store's order (namespace, then name).
pub fn object_key(object: &Value) -> String {
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
    {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_owned(),
    }
}

/// One page of a list.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    pub items: Vec<Value>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
    /// Set on a partial page when no selector is used, as the real server does.
    pub remaining_item_count: Option<u64>,
}

/// Filters `objects` (sorted by key, listed at `current_rv`) by the query's
/// selectors and cuts the page `limit`/`continue` ask for.
///
/// Only the page's objects are copied: a list of 5,000 kubelet-sized Nodes in pages
/// of 100 copies 100 a request, as the real server's watch cache serves it, not
/// 5,000 (which made each page take half a second and a paginated list outlive the
/// watch history behind it).
pub fn paginate<'a>(
    rt: ResourceType,
    objects: impl IntoIterator<Item = &'a Value>,
    current_rv: u64,
    q: &Query,
) -> Result<Page, StoreError> {
    let cursor = q
        .continue_token
        .as_deref()
        .map(Cursor::decode)
        .transpose()?;
    let resource_version = cursor.as_ref().map_or(current_rv, |c| c.resource_version);
    let mut matching = objects.into_iter().filter(|o| {
        cursor
            .as_ref()
            .is_none_or(|c| key_after(&object_key(o), &c.start_after))
            && q.label_selector.matches(o)
            && q.field_selector.matches(rt, o)
    });
    let Some(limit) = q.limit else {
        return Ok(Page {
            items: matching.cloned().collect(),
            resource_version,
            continue_token: None,
            remaining_item_count: None,
        });
    };
    let items: Vec<Value> = matching.by_ref().take(limit as usize).cloned().collect();
    let rest = matching.count() as u64;
    let continue_token = match items.last() {
        Some(last) if rest > 0 => Some(
            Cursor {
                resource_version,
                start_after: object_key(last),
            }
            .encode(),
        ),
        _ => None,
    };
    let unfiltered = q.label_selector.is_empty() && q.field_selector.is_empty();
    Ok(Page {
        items,
        resource_version,
        remaining_item_count: (continue_token.is_some() && unfiltered).then_some(rest),
        continue_token,
    })
}

/// Whether `key` sorts after `start` in the store's (namespace, name) order.
fn key_after(key: &str, start: &str) -> bool {
    let split = |k: &str| -> (String, String) {
        match k.split_once('/') {
            Some((ns, name)) => (ns.to_owned(), name.to_owned()),
            None => (String::new(), k.to_owned()),
        }
    };
    split(key) > split(start)
}

#[cfg(test)]
mod tests {
    use super::super::resources::{NODES, PODS};
    use super::*;

    fn nodes(n: usize) -> Vec<Value> {
        (0..n)
            .map(|i| json!({"metadata": {"name": format!("n{i}"), "labels": {"even": (i % 2 == 0).to_string()}}}))
            .collect()
    }

    #[test]
    fn cursor_round_trips_and_garbage_is_400() {
        let c = Cursor {
            resource_version: 42,
            start_after: "default/web-0".into(),
        };
        assert_eq!(Cursor::decode(&c.encode()).unwrap(), c);
        assert_eq!(Cursor::decode("!!!").unwrap_err().code(), 400);
        assert_eq!(
            Cursor::decode(&URL_SAFE_NO_PAD.encode("{}"))
                .unwrap_err()
                .code(),
            400
        );
    }

    #[test]
    fn pages_cover_everything_once_and_keep_the_first_version() {
        let mut q = Query::parse(Some("limit=2"), Some(NODES)).unwrap();
        let mut seen = Vec::new();
        let mut rv_now = 10;
        loop {
            let page = paginate(NODES, &nodes(5), rv_now, &q).unwrap();
            assert_eq!(page.resource_version, 10);
            seen.extend(page.items.iter().map(object_key));
            match page.continue_token {
                Some(t) => {
                    assert!(page.remaining_item_count.is_some());
                    q.continue_token = Some(t);
                }
                None => break,
            }
            rv_now += 1;
        }
        assert_eq!(seen, ["n0", "n1", "n2", "n3", "n4"]);
    }

    #[test]
    fn limit_counts_matching_items() {
        let q = Query::parse(Some("limit=2&labelSelector=even%3Dtrue"), Some(NODES)).unwrap();
        let page = paginate(NODES, &nodes(6), 1, &q).unwrap();
        let names: Vec<String> = page.items.iter().map(object_key).collect();
        assert_eq!(names, ["n0", "n2"]);
        assert!(page.continue_token.is_some());
        assert_eq!(page.remaining_item_count, None, "not with a selector");
    }

    #[test]
    fn query_parsing() {
        let q = Query::parse(
            Some("&watch=1&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0&fieldSelector=spec.nodeName%3Dw%2D1&timeoutSeconds=5"),
            Some(PODS),
        )
        .unwrap();
        assert!(q.watch && q.allow_watch_bookmarks);
        assert_eq!(q.send_initial_events, Some(true));
        assert_eq!(q.timeout_seconds, Some(5));
        assert_eq!(
            q.field_selector.required_value("spec.nodeName"),
            Some("w-1")
        );
        assert_eq!(q.resource_version_number().unwrap(), None);
        assert_eq!(Query::parse(Some("limit=x"), None).unwrap_err().code(), 400);
        assert_eq!(
            Query::parse(Some("watch=maybe"), None).unwrap_err().code(),
            400
        );
        assert_eq!(
            Query::parse(Some("resourceVersionMatch=Exact"), None)
                .unwrap_err()
                .code(),
            400
        );
    }

    #[test]
    fn namespaced_keys_sort_by_namespace_then_name() {
        assert!(key_after("b/a", "a/z"));
        assert!(!key_after("a/a", "a/b"));
        assert!(key_after("a/b", "a/a"));
    }
}
