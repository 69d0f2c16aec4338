//! Kubernetes node names.
//!
//! An inventory key that can never equal a Node's name is a node that can never be
//! fenced, discovered only when it fails. Kubernetes node names are RFC 1123 DNS
//! subdomains: lowercase letters, digits, `-` and `.`, at most 253 characters, each
//! dot-separated label starting and ending with a letter or digit. The usual mistake
//! is case (`Worker-1`), so the message offers the lowercase name.

/// Kubernetes' limit for a DNS subdomain name.
const MAX_LEN: usize = 253;

/// Why `name` is not a valid node name (None if it is).
pub(crate) fn problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("is empty".into());
    }
    if name.len() > MAX_LEN {
        return Some(format!(
            "is {} characters long; at most {MAX_LEN} are allowed",
            name.len()
        ));
    }
    if name.chars().any(|c| c.is_ascii_uppercase()) {
        return Some("contains uppercase letters; Kubernetes node names are lowercase".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '.'))
    {
        return Some(format!(
            "contains {c:?}; only lowercase letters, digits, '-' and '.' are allowed"
        ));
    }
    let bad_label = name
        .split('.')
        .any(|label| label.is_empty() || label.starts_with('-') || label.ends_with('-'));
    if bad_label {
        return Some("must start and end with a letter or digit, also around each '.'".into());
    }
    None
}

/// A likely intended name for an invalid one (lowercased, `_` and spaces as `-`).
pub(crate) fn suggestion(name: &str) -> Option<String> {
    let fixed: String = name
        .trim()
        .chars()
        .map(|c| match c {
            '_' | ' ' => '-',
            c => c.to_ascii_lowercase(),
        })
        .collect();
    (fixed != name && problem(&fixed).is_none()).then_some(fixed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_names() {
        for name in [
            "worker-1",
            "db-1.example.com",
            "a",
            "0",
            "ip-10-0-1-2.ec2.internal",
        ] {
            assert_eq!(problem(name), None, "{name}");
        }
    }

    #[test]
    fn invalid_names_say_why_and_suggest_a_fix() {
        assert!(problem("Worker-1").is_some_and(|p| p.contains("uppercase")));
        assert_eq!(suggestion("Worker-1").as_deref(), Some("worker-1"));
        assert_eq!(suggestion("worker_1").as_deref(), Some("worker-1"));
        assert!(problem("-worker").is_some());
        assert!(problem("worker..1").is_some());
        assert!(problem("worker-").is_some());
        assert!(problem(&"a".repeat(254)).is_some_and(|p| p.contains("253")));
        assert_eq!(suggestion("-x-"), None);
    }
}
