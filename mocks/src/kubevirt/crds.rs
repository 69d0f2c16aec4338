//! The `kubevirt.io/v1` VirtualMachine and VirtualMachineInstance CRDs and builders
//! for test VMs.
//!
//! Follows KubeVirt's `pkg/virt-operator/resource/generate/components/crds.go`
//! (`NewVirtualMachineCrd`, `NewVirtualMachineInstanceCrd`: names, short names,
//! category `all`, printer columns; the VM has the status subresource, the VMI none,
//! so virt-handler writes a VMI's status with plain updates) and
//! `staging/src/kubevirt.io/api/core/v1/{types.go,defaults.go}` (the fields the
//! builders set; `terminationGracePeriodSeconds` defaults to 180 for a VMI). The
//! schemas declare the fields the stand-in reads and preserve the rest.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

use super::{API_VERSION, GROUP, RunStrategy, VERSION};
use crate::remediation::common;

/// KubeVirt's default `terminationGracePeriodSeconds` of a VMI (`defaults.go`).
pub const DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS: i64 = 180;

fn crd(names: Value, columns: Value, status_subresource: bool) -> CustomResourceDefinition {
    let plural = names["plural"].as_str().unwrap_or_default().to_owned();
    let preserved = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    let mut version = json!({
        "name": VERSION,
        "served": true,
        "storage": true,
        "additionalPrinterColumns": columns,
        "schema": {"openAPIV3Schema": {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": preserved,
                "status": preserved,
            },
        }},
    });
    if status_subresource {
        version["subresources"] = json!({"status": {}});
    }
    common::from_json(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "names": names,
            "scope": "Namespaced",
            "versions": [version],
        },
    }))
}

/// `virtualmachines.kubevirt.io`: short names `vm`, `vms`; columns Age, Status
/// (`.status.printableStatus`), Ready; the status subresource.
pub fn vm_crd() -> CustomResourceDefinition {
    crd(
        json!({
            "kind": "VirtualMachine", "listKind": "VirtualMachineList",
            "plural": "virtualmachines", "singular": "virtualmachine",
            "shortNames": ["vm", "vms"], "categories": ["all"],
        }),
        json!([
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            {"name": "Status", "description": "Human Readable Status", "type": "string",
             "jsonPath": ".status.printableStatus"},
            {"name": "Ready", "type": "string",
             "jsonPath": ".status.conditions[?(@.type=='Ready')].status"},
        ]),
        true,
    )
}

/// `virtualmachineinstances.kubevirt.io`: short names `vmi`, `vmis`; columns Age,
/// Phase, IP, NodeName, Ready, Live-Migratable and Paused (priority 1); no status
/// subresource (as KubeVirt's).
pub fn vmi_crd() -> CustomResourceDefinition {
    crd(
        json!({
            "kind": "VirtualMachineInstance", "listKind": "VirtualMachineInstanceList",
            "plural": "virtualmachineinstances", "singular": "virtualmachineinstance",
            "shortNames": ["vmi", "vmis"], "categories": ["all"],
        }),
        json!([
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "IP", "type": "string", "jsonPath": ".status.interfaces[0].ipAddress"},
            {"name": "NodeName", "type": "string", "jsonPath": ".status.nodeName"},
            {"name": "Ready", "type": "string",
             "jsonPath": ".status.conditions[?(@.type=='Ready')].status"},
            {"name": "Live-Migratable", "type": "string", "priority": 1,
             "jsonPath": ".status.conditions[?(@.type=='LiveMigratable')].status"},
            {"name": "Paused", "type": "string", "priority": 1,
             "jsonPath": ".status.conditions[?(@.type=='Paused')].status"},
        ]),
        false,
    )
}

/// Both CRDs, for [`crate::remediation::install_crds`].
pub fn crds() -> [CustomResourceDefinition; 2] {
    [vm_crd(), vmi_crd()]
}

/// How a test VM says whether it should run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Power {
    /// `spec.runStrategy`.
    Strategy(RunStrategy),
    /// The deprecated `spec.running`.
    Running(bool),
}

/// A VirtualMachine to create, for tests.
#[derive(Debug, Clone)]
pub struct VmBuilder {
    name: String,
    namespace: String,
    power: Power,
    firmware_uuid: Option<String>,
    grace_period: i64,
}

impl VmBuilder {
    /// `name` in `namespace`, `runStrategy: Always`, no firmware UUID (the
    /// controller persists one), grace period 180 s.
    pub fn new(namespace: &str, name: &str) -> Self {
        Self {
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            power: Power::Strategy(RunStrategy::Always),
            firmware_uuid: None,
            grace_period: DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS,
        }
    }

    pub fn run_strategy(mut self, strategy: RunStrategy) -> Self {
        self.power = Power::Strategy(strategy);
        self
    }

    /// The deprecated `spec.running` instead of a run strategy.
    pub fn running(mut self, running: bool) -> Self {
        self.power = Power::Running(running);
        self
    }

    /// `spec.template.spec.domain.firmware.uuid`.
    pub fn firmware_uuid(mut self, uuid: &str) -> Self {
        self.firmware_uuid = Some(uuid.to_owned());
        self
    }

    /// `spec.template.spec.terminationGracePeriodSeconds`.
    pub fn termination_grace_period(mut self, seconds: i64) -> Self {
        self.grace_period = seconds;
        self
    }

    /// The object, as JSON.
    pub fn build(&self) -> Value {
        let mut domain = json!({
            "devices": {},
            "resources": {"requests": {"memory": "128Mi"}},
        });
        if let Some(uuid) = &self.firmware_uuid {
            domain["firmware"] = json!({"uuid": uuid});
        }
        let mut spec = json!({
            "template": {
                "metadata": {"labels": {"kubevirt.io/vm": self.name}},
                "spec": {
                    "domain": domain,
                    "terminationGracePeriodSeconds": self.grace_period,
                },
            },
        });
        match self.power {
            Power::Strategy(s) => spec["runStrategy"] = json!(s.as_str()),
            Power::Running(r) => spec["running"] = json!(r),
        }
        json!({
            "apiVersion": API_VERSION,
            "kind": "VirtualMachine",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": spec,
        })
    }
}
