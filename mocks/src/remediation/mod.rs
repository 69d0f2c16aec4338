//! Stand-ins for the health checkers that hand unhealthy nodes to a remediator.
//!
//! nodefence can be named as the remediator of two health checkers, and its tests
//! need both running against [fake-kube](crate::kube) the way they run in a cluster:
//! - [`nhc`]: the medik8s NodeHealthCheck operator (`remediation.medik8s.io/v1alpha1`
//!   `NodeHealthCheck`), which creates a remediation CR per unhealthy Node from a
//!   `*Template` object, escalates through several templates and deletes the CRs
//!   once the Node is healthy again.
//! - [`mhc`]: Cluster API's MachineHealthCheck controller (`cluster.x-k8s.io/v1beta2`),
//!   which creates an "external remediation request" per unhealthy Machine from
//!   `spec.remediation.templateRef` and deletes it once the Machine's Node is healthy.
//!
//! Both are controllers in the controller-runtime mould: they act only through the
//! API server with a kube-rs [`Client`](kube::Client) (list, get, create, patch,
//! delete), are woken by watches, and come back after the durations they wait for
//! (`RequeueAfter`). Their names, fields, annotations, conditions and timing follow
//! the real components' docs and source, not what is convenient to test; each module
//! says which files it follows and what it leaves out. Their clock is
//! `nodefence_clock::now` and their timers tokio's, so they follow a virtualized
//! simulation clock as everything else does.
//!
//! Each module also provides minimal CRDs for the objects it reads (the real CRDs
//! carry full validation; these keep the fields the stand-ins use and a status
//! subresource), typed objects with small builders, and [`install_crds`] to apply
//! CRDs and wait until the API server serves them. [`remediator_crds`] makes a
//! `<Kind>Template`/`<Kind>` pair for a test remediator of one's own.
//!
//! ```no_run
//! # async fn demo(client: kube::Client) -> anyhow::Result<()> {
//! use std::time::Duration;
//! use kube::api::{Api, PostParams};
//! use nodefence_mocks::remediation::{install_crds, remediator_crds, nhc};
//!
//! install_crds(&client, [nhc::nhc_crd()]).await?;
//! install_crds(&client, remediator_crds("test.example.com", "v1alpha1", "TestRemediation")).await?;
//! let _controller = nhc::NodeHealthCheckController::spawn(client.clone());
//! let check = nhc::NodeHealthCheck::new("workers")
//!     .select_labels([("role", "worker")])
//!     .unhealthy_condition("Ready", "False", Duration::from_secs(2))
//!     .min_healthy(nhc::percent(51))
//!     .remediation_template(nhc::template_ref(
//!         "test.example.com/v1alpha1",
//!         "TestRemediationTemplate",
//!         "default",
//!         "test-template",
//!     ));
//! Api::<nhc::NodeHealthCheck>::all(client).create(&PostParams::default(), &check).await?;
//! # Ok(()) }
//! ```

pub(crate) mod common;
pub mod mhc;
pub mod nhc;
pub(crate) mod runtime;

use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::core::GroupVersionKind;
use serde_json::json;

/// How long [`install_crds`] waits for the API server to serve a new CRD.
const CRD_SERVED_WITHIN: Duration = Duration::from_secs(20);

/// Creates (or replaces) `crds` and waits until the API server serves each kind, as
/// a client would wait for a CRD's `Established` condition.
pub async fn install_crds(
    client: &kube::Client,
    crds: impl IntoIterator<Item = CustomResourceDefinition>,
) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut kinds = Vec::new();
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        match api.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let mut replacement = crd.clone();
                let current = api
                    .get(&name)
                    .await
                    .with_context(|| format!("reading CRD {name}"))?;
                replacement.metadata.resource_version = current.metadata.resource_version;
                api.replace(&name, &PostParams::default(), &replacement)
                    .await
                    .with_context(|| format!("replacing CRD {name}"))?;
            }
            Err(e) => return Err(e).with_context(|| format!("creating CRD {name}")),
        }
        for version in crd.spec.versions.iter().filter(|v| v.served) {
            kinds.push(GroupVersionKind::gvk(
                &crd.spec.group,
                &version.name,
                &crd.spec.names.kind,
            ));
        }
    }
    let deadline = tokio::time::Instant::now() + CRD_SERVED_WITHIN;
    for gvk in kinds {
        loop {
            match kube::discovery::pinned_kind(client, &gvk).await {
                Ok(_) => break,
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    return Err(e).with_context(|| {
                        format!("{}/{} {} is not served", gvk.group, gvk.version, gvk.kind)
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
    Ok(())
}

/// CRDs for a remediator of one's own, in the shape NHC and CAPI expect: a
/// namespaced `<kind>Template` whose `spec.template.spec` is free-form, and a
/// namespaced `<kind>` with a free-form `spec`, `status.conditions` and a status
/// subresource (where a remediator reports `Succeeded`, `Processing`,
/// `PermanentNodeDeletionExpected`).
pub fn remediator_crds(group: &str, version: &str, kind: &str) -> [CustomResourceDefinition; 2] {
    let free = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    let template_kind = format!("{kind}Template");
    let template_schema = json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "template": {
                        "type": "object",
                        "properties": {
                            "metadata": free.clone(),
                            "spec": free.clone(),
                        },
                    },
                },
            },
        },
    });
    let cr_schema = json!({
        "type": "object",
        "properties": {
            "spec": free.clone(),
            "status": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
                "properties": {"conditions": common::conditions_schema()},
            },
        },
    });
    [
        namespaced_crd(group, version, &template_kind, template_schema, false),
        namespaced_crd(group, version, kind, cr_schema, true),
    ]
}

/// A namespaced CRD with one served and stored version.
fn namespaced_crd(
    group: &str,
    version: &str,
    kind: &str,
    schema: serde_json::Value,
    status_subresource: bool,
) -> CustomResourceDefinition {
    let plural = format!("{}s", kind.to_ascii_lowercase());
    let mut version_doc = json!({
        "name": version,
        "served": true,
        "storage": true,
        "schema": {"openAPIV3Schema": schema},
    });
    if status_subresource {
        version_doc["subresources"] = json!({"status": {}});
    }
    let names = json!({
        "kind": kind,
        "listKind": format!("{kind}List"),
        "plural": plural,
        "singular": kind.to_ascii_lowercase(),
    });
    common::from_json(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "names": names,
            "scope": "Namespaced",
            "versions": [version_doc],
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remediator_crds_name_the_template_and_the_cr() {
        let [template, cr] = remediator_crds("test.example.com", "v1alpha1", "TestRemediation");
        assert_eq!(
            template.metadata.name.as_deref(),
            Some("testremediationtemplates.test.example.com")
        );
        assert_eq!(template.spec.names.kind, "TestRemediationTemplate");
        assert!(template.spec.versions[0].subresources.is_none());
        assert_eq!(cr.spec.names.kind, "TestRemediation");
        assert_eq!(cr.spec.scope, "Namespaced");
        assert!(
            cr.spec.versions[0]
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
    }
}
