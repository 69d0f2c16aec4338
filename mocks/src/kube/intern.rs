//! Interned strings for the resource types CustomResourceDefinitions add at run time.
//!
//! [`super::resources::ResourceType`] is a small `Copy` value of `&'static str`s: the
//! built-in types are constants, the simulation and the store pass them around by
//! value on every write, and the store keys objects by them. A type served for a
//! CustomResourceDefinition gets its names from a request body instead, so they are
//! leaked here to become `'static` — once per distinct string for the life of the
//! process: the same names from a re-applied or re-read CRD come back from the set
//! instead of being leaked again. What leaks is bounded by the distinct names (and
//! short-name lists) clients ever used, a few hundred bytes per CRD, which a test or
//! a `fake-kube` run never notices; in exchange nothing about the built-in types or
//! their callers had to change.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

fn strings() -> &'static Mutex<HashSet<&'static str>> {
    static SET: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    SET.get_or_init(|| Mutex::new(HashSet::new()))
}

fn lists() -> &'static Mutex<HashSet<&'static [&'static str]>> {
    static SET: OnceLock<Mutex<HashSet<&'static [&'static str]>>> = OnceLock::new();
    SET.get_or_init(|| Mutex::new(HashSet::new()))
}

/// `s` as a `'static` string, leaked the first time it is seen.
pub fn intern(s: &str) -> &'static str {
    let mut set = strings().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(found) = set.get(s) {
        return found;
    }
    let leaked: &'static str = Box::leak(s.to_owned().into_boxed_str());
    set.insert(leaked);
    leaked
}

/// A list of strings as a `'static` slice of interned strings, leaked the first
/// time this exact list is seen.
pub fn intern_list<S: AsRef<str>>(items: &[S]) -> &'static [&'static str] {
    if items.is_empty() {
        return &[];
    }
    let interned: Vec<&'static str> = items.iter().map(|s| intern(s.as_ref())).collect();
    let mut set = lists().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(found) = set.get(interned.as_slice()) {
        return found;
    }
    let leaked: &'static [&'static str] = Box::leak(interned.into_boxed_slice());
    set.insert(leaked);
    leaked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_string_is_leaked_once() {
        let a = intern(&String::from("widgets"));
        let b = intern("widgets");
        assert!(std::ptr::eq(a, b));
        let l1 = intern_list(&["w", "wd"]);
        let l2 = intern_list(&[String::from("w"), String::from("wd")]);
        assert!(std::ptr::eq(l1, l2));
        assert_eq!(l1, ["w", "wd"]);
        assert!(intern_list::<&str>(&[]).is_empty());
    }
}
