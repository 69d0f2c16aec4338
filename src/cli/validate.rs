//! `nodefence validate`: load everything, print every problem and warning, exit 0 or 3.

use std::path::Path;

use super::exit;

pub fn run(config_path: &Path) -> u8 {
    match crate::config::load(config_path) {
        Ok(config) => {
            for warning in &config.warnings {
                eprintln!("warning: {warning}");
            }
            let mut drivers = std::collections::BTreeMap::<&str, usize>::new();
            for node in config.inventory.nodes.values() {
                *drivers.entry(node.power.driver_name()).or_default() += 1;
            }
            let summary: Vec<String> = drivers.iter().map(|(d, n)| format!("{n} {d}")).collect();
            println!(
                "{}: OK ({} nodes: {}; inventory {})",
                config_path.display(),
                config.inventory.nodes.len(),
                summary.join(", "),
                config.inventory_path.display()
            );
            exit::OK
        }
        Err(errors) => {
            eprintln!("{errors}");
            eprintln!(
                "{}: {} problem(s) found; nothing was changed",
                config_path.display(),
                errors.0.len()
            );
            exit::CONFIG
        }
    }
}
