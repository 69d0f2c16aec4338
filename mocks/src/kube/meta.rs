//! Server-side object metadata helpers: the `metadata` map, uids, generated name
//! suffixes and the apiserver's timestamp formats (`metav1.Time`, `metav1.MicroTime`).

use serde_json::{Map, Value};

/// `metadata` as a mutable map, created if missing or not an object.
pub fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.is_object() {
        *object = Value::Object(Map::new());
    }
    let Value::Object(map) = object else {
        unreachable!("made an object above")
    };
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    match meta {
        Value::Object(m) => m,
        _ => unreachable!("made an object above"),
    }
}

/// RFC 3339 UTC with seconds, as `metav1.Time` is serialised.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(nodefence_clock::now()).to_string()
}

/// RFC 3339 UTC with microseconds, as `metav1.MicroTime` is serialised.
pub fn now_rfc3339_micros() -> String {
    humantime::format_rfc3339_micros(nodefence_clock::now()).to_string()
}

pub(crate) fn uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

pub(crate) fn short_suffix(n: u64) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut x = n.wrapping_mul(2_654_435_761) ^ 0x5bd1_e995;
    (0..5)
        .map(|_| {
            let c = ALPHABET[(x % ALPHABET.len() as u64) as usize] as char;
            x /= ALPHABET.len() as u64;
            c
        })
        .collect()
}
