//! Every integration test of the `nodefence` crate but the simulation and the demo,
//! in one test binary: one link instead of one per file, and the tests of all files
//! run side by side (they mostly wait on cluster time, so `cargo xtask test` runs more
//! threads than cores). Each `tests/<name>.rs` is the module `<name>`:
//! `cargo test --test integration <name>::` runs one file's tests.
//!
//! A new file in `tests/` must be added below; [`every_test_file_is_a_module`] fails
//! until it is (cargo builds only the targets listed in `Cargo.toml`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

// Shared helpers (`common` also holds `cli_common`, `deploy_common` and `moto`).
mod aws_common;
mod common;
mod ipmi_common;
mod peers;

use common::{cli_common, deploy_common, moto};

mod aws_cli;
mod aws_driver;
mod aws_fencing;
mod cli;
mod companion_api;
mod companion_arming;
mod companion_dns;
mod companion_evidence;
mod companion_feeding;
mod companion_peers;
mod companion_run;
mod companion_terms;
mod config_examples;
mod deploy_companion;
mod deploy_manifests;
mod docs_links;
mod events;
mod exec_driver;
mod exec_fencing;
mod fast_path;
mod ha;
mod heartbeat;
mod hostile;
mod identity;
mod ipmi_driver;
mod ipmi_driver_faults;
mod ipmi_fencing;
mod ipmi_peers;
mod kubevirt_driver;
mod kubevirt_fencing;
mod kubevirt_peers;
mod leader;
mod metal3;
mod metal3_run;
mod metrics_access;
mod monitor;
mod prometheus;
mod rbac;
mod reboot;
mod redfish_driver;
mod redfish_field;
mod release;
mod reload;
mod remediation;
mod returned;
mod run;
mod secrets;
mod telemetry;
mod tls_cli;
mod tls_daemon;
mod topology;
mod topology_monitor;
mod user_agent;
mod vsphere_driver;
mod vsphere_fencing;
mod vsphere_peers;

/// The test files of `tests/` that are their own test targets (`Cargo.toml`).
const OWN_TARGETS: [&str; 3] = ["integration.rs", "simulation.rs", "demo.rs"];

#[test]
fn every_test_file_is_a_module() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let missing = nodefence_mocks::test_layout::undeclared_test_modules(
        &dir,
        include_str!("integration.rs"),
        &OWN_TARGETS,
    )
    .unwrap();
    assert!(
        missing.is_empty(),
        "{missing:?} in {} would never run: add `mod <name>;` to tests/integration.rs",
        dir.display()
    );
}
