//! What tests of the deploy manifests share: the RBAC objects the manifests grant,
//! and the real kubectl they are checked with.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The RBAC objects of `deploy/rbac.yaml` and of these components
/// (`deploy/components/<name>/rbac.yaml`).
pub fn deploy_rbac(components: &[&str]) -> Vec<Value> {
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let mut files = vec![deploy.join("rbac.yaml")];
    files.extend(
        components
            .iter()
            .map(|c| deploy.join("components").join(c).join("rbac.yaml")),
    );
    files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f)
                .unwrap_or_else(|e| panic!("reading {}: {e}", f.display()));
            serde_saphyr::from_multiple::<Value>(&text)
                .unwrap_or_else(|e| panic!("parsing {}: {e}", f.display()))
        })
        .filter(|d| !d.is_null())
        .collect()
}

/// The companions' RBAC (`deploy/components/companion/companion.yaml`: its ClusterRole
/// and ClusterRoleBinding), with the ServiceAccount bound in `namespace` instead of
/// the shipped `nodefence`.
pub fn companion_rbac(namespace: &str) -> Vec<Value> {
    let file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/components/companion/companion.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap_or_else(|e| panic!("parsing {}: {e}", file.display()))
        .into_iter()
        .filter(|d| {
            matches!(
                d["kind"].as_str(),
                Some("ClusterRole" | "ClusterRoleBinding" | "Role" | "RoleBinding")
            )
        })
        .map(|mut d| {
            if let Some(subjects) = d["subjects"].as_array_mut() {
                for s in subjects {
                    s["namespace"] = Value::String(namespace.to_string());
                }
            }
            d
        })
        .collect()
}

/// kubectl (`NODEFENCE_KUBECTL`, else the venv CI installs, else `PATH`), or `None`
/// after the test is reported skipped; a failure under `NODEFENCE_REQUIRE_PEERS=1`.
pub fn kubectl() -> Option<PathBuf> {
    nodefence_mocks::peers::kubectl()
}
