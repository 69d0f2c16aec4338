//! The layout of a crate's integration tests: every `tests/<name>.rs` is a module of
//! one test binary (`tests/integration.rs`), so a file nobody declared there is never
//! built and its tests never run. Both crates' `integration` binaries check it.

use std::path::Path;

/// The `.rs` files directly in `tests_dir` that neither have a `mod <name>;` line in
/// `root_source` (the binary's root file) nor are in `own_targets` (files that are
/// test targets themselves, the root among them). Sorted.
pub fn undeclared_test_modules(
    tests_dir: &Path,
    root_source: &str,
    own_targets: &[&str],
) -> std::io::Result<Vec<String>> {
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(tests_dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".rs") else {
            continue;
        };
        let declared = root_source
            .lines()
            .any(|l| l.trim() == format!("mod {stem};"));
        if !declared && !own_targets.contains(&name.as_str()) {
            missing.push(name);
        }
    }
    missing.sort();
    Ok(missing)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_without_its_mod_line_is_named() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["integration.rs", "run.rs", "new.rs", "notes.md"] {
            std::fs::write(dir.path().join(f), "").unwrap();
        }
        std::fs::create_dir(dir.path().join("common")).unwrap();
        let root = "//! root\nmod common;\nmod run;\n// mod new;\n";
        let missing = undeclared_test_modules(dir.path(), root, &["integration.rs"]).unwrap();
        assert_eq!(missing, ["new.rs"]);
        let all = "mod run;\nmod new;\n";
        assert!(
            undeclared_test_modules(dir.path(), all, &["integration.rs"])
                .unwrap()
                .is_empty()
        );
    }
}
