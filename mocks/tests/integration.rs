//! Every integration test of the mocks crate, in one test binary: one link instead
//! of one per file, and the tests of all files run side by side. Each
//! `mocks/tests/<name>.rs` is the module `<name>`:
//! `cargo test -p nodefence-mocks --test integration <name>::` runs one file's tests.
//!
//! A new file in `mocks/tests/` must be added below; [`every_test_file_is_a_module`]
//! fails until it is (cargo builds only the targets listed in `mocks/Cargo.toml`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

// Shared helpers.
mod common;
mod ipmi_common;
mod kube_common;
mod mock_binary;

mod admin;
mod auth;
mod binary;
mod faults;
mod fence_redfish;
mod field;
mod ipmi_admin;
mod ipmi_bmc;
mod ipmi_faults;
mod ipmitool;
mod kube_binary;
mod kube_crd;
mod kube_http;
mod kube_rs;
mod kube_sim;
mod kube_watch;
mod kubectl;
mod kubevirt_fence_agent;
mod kubevirt_standin;
mod metal3;
mod mhc;
mod nhc;
mod power;
mod profiles;
mod vsphere_binary;
mod vsphere_rest;

#[test]
fn every_test_file_is_a_module() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let missing = nodefence_mocks::test_layout::undeclared_test_modules(
        &dir,
        include_str!("integration.rs"),
        &["integration.rs"],
    )
    .unwrap();
    assert!(
        missing.is_empty(),
        "{missing:?} in {} would never run: add `mod <name>;` to mocks/tests/integration.rs",
        dir.display()
    );
}
