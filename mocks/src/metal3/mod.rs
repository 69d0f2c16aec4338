//! A stand-in for Metal3's baremetal-operator (BMO) and Ironic, acting through the
//! API server (fake-kube) and the mock Redfish BMC, and minimal CRDs for the objects
//! they and nodefence read: [`bmh_crd`] (`metal3.io/v1alpha1` BareMetalHost) and
//! [`metal3_machine_crd`] (`infrastructure.cluster.x-k8s.io/v1beta2` Metal3Machine,
//! the link of the consumerRef chain BareMetalHost → Metal3Machine → Machine → Node;
//! the Machine CRD is [`crate::remediation::mhc::machine_crd`]).
//!
//! [`Metal3StandIn::spawn`] runs both against one namespace (BMO's `WATCH_NAMESPACE`)
//! with a kube-rs client, in the controller-runtime mould of
//! [`crate::remediation`]: an informer on BareMetalHosts, a work queue, reconciles
//! that read and write through the API (status through the `status` subresource,
//! annotations with an update carrying the `resourceVersion`, as controller-runtime's
//! `r.Update` does).
//!
//! Followed from baremetal-operator (`internal/controller/metal3.io/
//! {baremetalhost_controller.go, host_state_machine.go}`,
//! `pkg/provisioner/ironic/ironic.go`, `config/base/crds/bases/
//! metal3.io_baremetalhosts.yaml`) and Ironic's conductor (`manager.py`
//! `_sync_power_states`, `utils.node_power_action`, its `[conductor]` options):
//!
//! - **Watch** (`SetupWithManager`, `updateEventHandler`): every host create and
//!   delete; an update only when `metadata.generation` changed (a spec change) or the
//!   annotations or finalizers did. A status write wakes nothing. Each reconcile asks
//!   to come back after a delay (steady state 60 s, [`Timing::reconcile`]).
//! - **Paused** (`baremetalhost.metal3.io/paused`): nothing at all is done.
//! - **Secrets** (`pkg/secretutils`, `Owns(&corev1.Secret{}, MatchEveryOwner)`):
//!   the Secret a host names is claimed when it is read (`AcquireSecret`): labelled
//!   `environment.metal3.io=baremetal` and given an owner reference to the host.
//!   Secrets are watched with that label only (BMO's cache sees no others), and a
//!   change to one reconciles every host that owns it.
//! - **Provisioning states** (`host_state_machine.go`): no status → `registering`
//!   when `spec.bmc.address` is set, else `unmanaged` (operational status
//!   `discovered`). Registering reads the Secret `spec.bmc.credentialsName` (keys
//!   `username`, `password`; missing ones are a `registration error`), records it
//!   and its `resourceVersion` as `status.triedCredentials` when they changed, enrols
//!   the host in Ironic, which reads the BMC's power state (a failure is a
//!   `registration error`), records `status.goodCredentials`, `status.provisioning.ID` and
//!   `poweredOn`, then goes to `externally provisioned` (`spec.externallyProvisioned`)
//!   or `inspecting` → `preparing` → `available`; from `available`, a host with
//!   `spec.image.url` goes through `provisioning` to `provisioned`. Changed
//!   credentials (another Secret, or its `resourceVersion`) register again.
//! - **Power** (`manageHostPower`, in `available`, `provisioned` and `externally
//!   provisioned`): Ironic's recorded power state is copied into `status.poweredOn`
//!   when they differ (that write is a reconcile of its own); a suffixless
//!   `reboot.metal3.io` is removed once the host is off (a one-shot reboot); the host
//!   is wanted on when `spec.online`, off while a reboot annotation is set
//!   (`reboot.metal3.io` or `reboot.metal3.io/{key}`; outside `provisioned` and
//!   `externally provisioned` only one with `"force": true`), hard when any asks
//!   `{"mode":"hard"}` (or after an error); otherwise soft. Ironic is asked for
//!   `power on`, `power off` (Redfish `ForceOff`) or `soft power off`
//!   (`GracefulShutdown`); while its power action runs BMO checks back every
//!   `shortRetryDelay` (3 s, [`Timing::short_retry`]). A failed action is a `power
//!   management error` (`errorType`, `operationalStatus: error`, `errorCount`).
//! - **Detached** (`baremetalhost.metal3.io/detached`) in `available`,
//!   `provisioned` or `externally provisioned`: the host is removed from Ironic
//!   (nothing syncs or powers it) and `operationalStatus` is `detached`; once the
//!   annotation is gone it is `OK` again and enrolled anew.
//! - **Ironic** keeps each node's power state in its database, set when it powers the
//!   node (`node_power_action`: the command, then wait up to
//!   `power_state_change_timeout` for the BMC to report it), and runs the power-state
//!   sync every `sync_power_state_interval` (60 s): nodes with an action under way are
//!   skipped; a node whose BMC disagrees with the database is powered back to the
//!   database's state while `force_power_state_during_sync` (true); after more than
//!   `power_state_sync_max_retries` (3) failures in a row its state is taken from the
//!   BMC and it goes into maintenance. Ironic's power interface is Redfish: every
//!   Redfish scheme of Metal3 (`redfish`, `redfish-virtualmedia`, `redfish-uefihttp`,
//!   `idrac-redfish`, `idrac-virtualmedia`, `ilo5-redfish`, `ilo5-virtualmedia`, each
//!   with `+http`/`+https`); HTTPS is verified unless
//!   `disableCertificateVerification` (against [`Metal3StandIn::spawn_trusting`]).
//!
//! Left out: inspection, cleaning, deployment and their ramdisk (the states pass at
//! once; a provisioned host is powered on as a deploy would leave it), the finalizer
//! and the deletion flow (a deleted host is simply forgotten by Ironic), Events,
//! conditions, HardwareData and the firmware and servicing resources, the status
//! annotation, the IPMI and vendor (WS-Man, iLO 4) power interfaces (such a host gets
//! a `registration error`), and the admission webhook.

mod operator;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;
use kube::core::NamespaceResourceScope;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub use operator::{IronicNode, Metal3StandIn};

use crate::remediation::common;

/// Metal3's API group and the BareMetalHost version.
pub const GROUP: &str = "metal3.io";
pub const VERSION: &str = "v1alpha1";
pub const API_VERSION: &str = "metal3.io/v1alpha1";

/// Cluster API Provider Metal3's group and the Metal3Machine version served (CAPM3's
/// storage version; its deprecated `v1beta1` is not served here).
pub const CAPM3_GROUP: &str = "infrastructure.cluster.x-k8s.io";
pub const CAPM3_VERSION: &str = "v1beta2";
pub const CAPM3_API_VERSION: &str = "infrastructure.cluster.x-k8s.io/v1beta2";

/// Metal3's reboot annotation prefix.
pub const REBOOT_ANNOTATION: &str = "reboot.metal3.io";
/// Metal3's pause annotation.
pub const PAUSED_ANNOTATION: &str = "baremetalhost.metal3.io/paused";
/// Metal3's detached annotation.
pub const DETACHED_ANNOTATION: &str = "baremetalhost.metal3.io/detached";

/// `status.provisioning.state` values (`ProvisioningState`).
pub mod state {
    pub const NONE: &str = "";
    pub const UNMANAGED: &str = "unmanaged";
    pub const REGISTERING: &str = "registering";
    pub const INSPECTING: &str = "inspecting";
    pub const PREPARING: &str = "preparing";
    pub const AVAILABLE: &str = "available";
    pub const READY: &str = "ready";
    pub const PROVISIONING: &str = "provisioning";
    pub const PROVISIONED: &str = "provisioned";
    pub const EXTERNALLY_PROVISIONED: &str = "externally provisioned";
}

/// `status.errorType` values used here.
pub const REGISTRATION_ERROR: &str = "registration error";
pub const POWER_MANAGEMENT_ERROR: &str = "power management error";

/// How often the operator and Ironic act. The defaults are the real ones; tests
/// scale them down.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// BMO's steady-state requeue (`actionContinue{60 s}` in `manageHostPower`).
    pub reconcile: Duration,
    /// BMO's `shortRetryDelay` (3 s): checking back on a power action under way.
    pub short_retry: Duration,
    /// Ironic's `[conductor] sync_power_state_interval` (60 s).
    pub sync_power_state_interval: Duration,
    /// Ironic's `[conductor] force_power_state_during_sync` (true).
    pub force_power_state_during_sync: bool,
    /// Ironic's `[conductor] power_state_sync_max_retries` (3).
    pub power_state_sync_max_retries: u32,
    /// Ironic's `[conductor] power_state_change_timeout` (60 s).
    pub power_state_change_timeout: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            reconcile: Duration::from_secs(60),
            short_retry: Duration::from_secs(3),
            sync_power_state_interval: Duration::from_secs(60),
            force_power_state_during_sync: true,
            power_state_sync_max_retries: 3,
            power_state_change_timeout: Duration::from_secs(60),
        }
    }
}

impl Timing {
    /// Every duration divided by `speed` (a world running `speed` times faster).
    pub fn scaled(self, speed: f64) -> Self {
        Self {
            reconcile: self.reconcile.div_f64(speed),
            short_retry: self.short_retry.div_f64(speed),
            sync_power_state_interval: self.sync_power_state_interval.div_f64(speed),
            power_state_change_timeout: self.power_state_change_timeout.div_f64(speed),
            ..self
        }
    }
}

// ---------------------------------------------------------------------------------
// The objects

macro_rules! namespaced_resource {
    ($t:ty, $kind:literal, $plural:literal, $group:expr, $version:expr) => {
        impl Resource for $t {
            type DynamicType = ();
            type Scope = NamespaceResourceScope;

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                $group.into()
            }
            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                $version.into()
            }
            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// A BareMetalHost: the fields the stand-in and nodefence use (the CRD keeps them).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BareMetalHost {
    #[serde(rename = "apiVersion", default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: HostSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<HostStatus>,
}

namespaced_resource!(
    BareMetalHost,
    "BareMetalHost",
    "baremetalhosts",
    GROUP,
    VERSION
);

/// `spec` (`BareMetalHostSpec`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bmc: Option<BmcDetails>,
    #[serde(default)]
    pub online: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_ref: Option<ObjectReference>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub externally_provisioned: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_power_off: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<Image>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_mac_address: Option<String>,
}

/// `spec.bmc`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BmcDetails {
    pub address: String,
    pub credentials_name: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_certificate_verification: bool,
}

/// `spec.image` / `status.provisioning.image`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Image {
    pub url: String,
}

/// `status` (`BareMetalHostStatus`; the CRD's required fields always written).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostStatus {
    #[serde(default)]
    pub operational_status: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error_type: String,
    #[serde(default)]
    pub error_message: String,
    #[serde(default)]
    pub error_count: i64,
    #[serde(default)]
    pub powered_on: bool,
    #[serde(default)]
    pub provisioning: ProvisionStatus,
    #[serde(default)]
    pub provisioning_fail_count: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub good_credentials: Option<CredentialsStatus>,
    /// The Secret (and its `resourceVersion`) last tried, set as soon as a changed
    /// Secret is seen, before it is validated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tried_credentials: Option<CredentialsStatus>,
}

/// `status.provisioning`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProvisionStatus {
    /// The Ironic node's UUID.
    #[serde(rename = "ID", default)]
    pub id: String,
    #[serde(default)]
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<Image>,
}

/// `status.goodCredentials` and `status.triedCredentials` (`CredentialsStatus`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CredentialsStatus {
    pub credentials: SecretReference,
    #[serde(default)]
    pub credentials_version: String,
}

/// A Secret by namespace and name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SecretReference {
    pub name: String,
    pub namespace: String,
}

impl BareMetalHost {
    /// A host in `namespace` whose BMC is `address`, credentials in Secret
    /// `credentials_name`, `online: true`.
    pub fn new(namespace: &str, name: &str, address: &str, credentials_name: &str) -> Self {
        Self {
            api_version: API_VERSION.into(),
            kind: "BareMetalHost".into(),
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: HostSpec {
                bmc: Some(BmcDetails {
                    address: address.into(),
                    credentials_name: credentials_name.into(),
                    disable_certificate_verification: false,
                }),
                online: true,
                ..HostSpec::default()
            },
            status: None,
        }
    }

    /// `spec.externallyProvisioned: true` (BMO goes straight to `externally
    /// provisioned`).
    pub fn externally_provisioned(mut self) -> Self {
        self.spec.externally_provisioned = true;
        self
    }

    /// `spec.image.url` (BMO provisions the host).
    pub fn image(mut self, url: &str) -> Self {
        self.spec.image = Some(Image { url: url.into() });
        self
    }

    /// `spec.consumerRef` to a Metal3Machine (as CAPM3's `setHostConsumerRef`).
    pub fn consumer(mut self, m3m: &Metal3Machine) -> Self {
        self.spec.consumer_ref = Some(ObjectReference {
            api_version: Some(CAPM3_API_VERSION.into()),
            kind: Some("Metal3Machine".into()),
            namespace: m3m.metadata.namespace.clone(),
            name: m3m.metadata.name.clone(),
            ..ObjectReference::default()
        });
        self
    }

    pub fn disable_certificate_verification(mut self) -> Self {
        if let Some(bmc) = &mut self.spec.bmc {
            bmc.disable_certificate_verification = true;
        }
        self
    }

    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.metadata
            .annotations
            .get_or_insert_default()
            .insert(key.into(), value.into());
        self
    }

    pub fn annotations(&self) -> BTreeMap<String, String> {
        self.metadata.annotations.clone().unwrap_or_default()
    }

    /// `status.provisioning.state` ("" before the first reconcile).
    pub fn state(&self) -> &str {
        self.status
            .as_ref()
            .map_or("", |s| s.provisioning.state.as_str())
    }

    /// `status.poweredOn`, `None` without a status.
    pub fn powered_on(&self) -> Option<bool> {
        self.status.as_ref().map(|s| s.powered_on)
    }
}

/// A Metal3Machine (`infrastructure.cluster.x-k8s.io/v1beta2`): its owner Machine
/// and `spec.providerID`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Metal3Machine {
    #[serde(rename = "apiVersion", default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Metal3MachineSpec,
}

namespaced_resource!(
    Metal3Machine,
    "Metal3Machine",
    "metal3machines",
    CAPM3_GROUP,
    CAPM3_VERSION
);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metal3MachineSpec {
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<Image>,
}

impl Metal3Machine {
    /// A Metal3Machine owned by Machine `machine` (a v1beta2 Machine, as CAPI's
    /// Machine controller sets the owner reference), labelled with its cluster.
    pub fn new(
        namespace: &str,
        name: &str,
        cluster: &str,
        machine: &str,
        machine_uid: &str,
    ) -> Self {
        Self {
            api_version: CAPM3_API_VERSION.into(),
            kind: "Metal3Machine".into(),
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                labels: Some(BTreeMap::from([(
                    crate::remediation::mhc::CLUSTER_NAME_LABEL.to_owned(),
                    cluster.to_owned(),
                )])),
                owner_references: Some(vec![OwnerReference {
                    api_version: crate::remediation::mhc::API_VERSION.into(),
                    kind: "Machine".into(),
                    name: machine.into(),
                    uid: machine_uid.into(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                ..ObjectMeta::default()
            },
            spec: Metal3MachineSpec::default(),
        }
    }
}

/// A BMC credentials Secret as Metal3 reads it (keys `username`, `password`).
pub fn bmc_secret(namespace: &str, name: &str, username: &str, password: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([
            ("username".into(), ByteString(username.as_bytes().to_vec())),
            ("password".into(), ByteString(password.as_bytes().to_vec())),
        ])),
        type_: Some("Opaque".into()),
        ..Secret::default()
    }
}

// ---------------------------------------------------------------------------------
// The CRDs

/// A minimal BareMetalHost CRD (`baremetalhosts.metal3.io`, `v1alpha1`): Metal3's
/// names (short names `bmh`, `bmhost`), printer columns and status subresource; the
/// schema declares the fields used here with Metal3's types, enums and required
/// fields, and keeps every other field of `spec` and `status` unvalidated.
pub fn bmh_crd() -> CustomResourceDefinition {
    let string = json!({"type": "string"});
    let object_ref = json!({
        "type": "object",
        "x-kubernetes-map-type": "atomic",
        "properties": {
            "apiVersion": string, "fieldPath": string, "kind": string, "name": string,
            "namespace": string, "resourceVersion": string, "uid": string,
        },
    });
    let image = json!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "required": ["url"],
        "properties": {"url": string},
    });
    let spec = json!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "required": ["online"],
        "properties": {
            "bmc": {
                "type": "object",
                "required": ["address", "credentialsName"],
                "properties": {
                    "address": string,
                    "credentialsName": string,
                    "disableCertificateVerification": {"type": "boolean"},
                },
            },
            "bootMACAddress": {"type": "string", "pattern": "[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}"},
            "consumerRef": object_ref,
            "disablePowerOff": {"type": "boolean"},
            "externallyProvisioned": {"type": "boolean"},
            "image": image,
            "online": {"type": "boolean"},
        },
    });
    let status = json!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "required": ["errorCount", "errorMessage", "operationalStatus", "poweredOn",
                     "provisioning", "provisioningFailCount"],
        "properties": {
            "errorCount": {"type": "integer"},
            "errorMessage": string,
            "errorType": {"type": "string", "enum": [
                "provisioned registration error", "registration error", "inspection error",
                "preparation error", "provisioning error", "power management error",
                "servicing error"]},
            "goodCredentials": {
                "type": "object",
                "properties": {
                    "credentials": {"type": "object", "x-kubernetes-map-type": "atomic",
                                    "properties": {"name": string, "namespace": string}},
                    "credentialsVersion": string,
                },
            },
            "operationalStatus": {"type": "string", "enum":
                ["", "OK", "discovered", "error", "delayed", "detached", "servicing"]},
            "poweredOn": {"type": "boolean"},
            "provisioning": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
                "required": ["ID", "state"],
                "properties": {"ID": string, "state": string, "image": image},
            },
            "provisioningFailCount": {"type": "integer"},
        },
    });
    let columns = json!([
        {"description": "Operational status", "jsonPath": ".status.operationalStatus",
         "name": "Status", "priority": 1, "type": "string"},
        {"description": "Provisioning status", "jsonPath": ".status.provisioning.state",
         "name": "State", "type": "string"},
        {"description": "Consumer using this host", "jsonPath": ".spec.consumerRef.name",
         "name": "Consumer", "type": "string"},
        {"description": "Address of management controller", "jsonPath": ".spec.bmc.address",
         "name": "BMC", "priority": 1, "type": "string"},
        {"description": "Whether the host is online or not", "jsonPath": ".spec.online",
         "name": "Online", "type": "string"},
        {"description": "Type of the most recent error", "jsonPath": ".status.errorType",
         "name": "Error", "type": "string"},
        {"description": "Time duration since creation of BaremetalHost",
         "jsonPath": ".metadata.creationTimestamp", "name": "Age", "type": "date"},
    ]);
    crd(
        GROUP,
        VERSION,
        json!({
            "kind": "BareMetalHost", "listKind": "BareMetalHostList",
            "plural": "baremetalhosts", "shortNames": ["bmh", "bmhost"],
            "singular": "baremetalhost",
        }),
        spec,
        status,
        columns,
    )
}

/// A minimal Metal3Machine CRD (`metal3machines.infrastructure.cluster.x-k8s.io`,
/// `v1beta2` only): CAPM3's names, printer columns and status subresource;
/// `spec.providerID` and `spec.image` declared, the rest unvalidated.
pub fn metal3_machine_crd() -> CustomResourceDefinition {
    let spec = json!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "properties": {
            "providerID": {"type": "string"},
            "image": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                      "properties": {"url": {"type": "string"}}},
        },
    });
    let status = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    let columns = json!([
        {"description": "Time duration since creation of Metal3Machine",
         "jsonPath": ".metadata.creationTimestamp", "name": "Age", "type": "date"},
        {"description": "Provider ID", "jsonPath": ".spec.providerID", "name": "ProviderID",
         "type": "string"},
        {"description": "Metal3Machine is provisioned",
         "jsonPath": ".status.initialization.provisioned", "name": "Provisioned",
         "type": "string"},
        {"description": "Cluster to which this M3Machine belongs",
         "jsonPath": ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name", "name": "Cluster",
         "type": "string"},
    ]);
    let mut names = json!({
        "kind": "Metal3Machine", "listKind": "Metal3MachineList", "plural": "metal3machines",
        "shortNames": ["m3m", "m3machine", "m3machines", "metal3m", "metal3machine"],
        "singular": "metal3machine",
    });
    names["categories"] = json!(["cluster-api"]);
    crd(CAPM3_GROUP, CAPM3_VERSION, names, spec, status, columns)
}

fn crd(
    group: &str,
    version: &str,
    names: Value,
    spec: Value,
    status: Value,
    columns: Value,
) -> CustomResourceDefinition {
    let plural = names["plural"].as_str().unwrap_or_default().to_owned();
    common::from_json(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "names": names,
            "scope": "Namespaced",
            "versions": [{
                "name": version,
                "served": true,
                "storage": true,
                "additionalPrinterColumns": columns,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec,
                        "status": status,
                    },
                }},
                "subresources": {"status": {}},
            }],
        },
    }))
}

/// The Redfish power interface Ironic uses for a Metal3 BMC address: the system's URL
/// and whether it is HTTPS; `Err`: why the stand-in's Ironic cannot drive it.
pub(crate) fn redfish_system(address: &str) -> Result<(String, Option<String>), String> {
    const SCHEMES: [&str; 7] = [
        "redfish",
        "redfish-virtualmedia",
        "redfish-uefihttp",
        "idrac-redfish",
        "idrac-virtualmedia",
        "ilo5-redfish",
        "ilo5-virtualmedia",
    ];
    let (scheme, rest) = address
        .split_once("://")
        .ok_or_else(|| format!("unknown BMC type for address {address}"))?;
    let (base, transport) = scheme.split_once('+').unwrap_or((scheme, "https"));
    if !SCHEMES.contains(&base) {
        return Err(format!(
            "the stand-in's Ironic has no power interface for {scheme}:// (Redfish only)"
        ));
    }
    let transport = match transport {
        "http" => "http",
        "https" => "https",
        other => return Err(format!("unknown BMC transport {other} in {address}")),
    };
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], Some(&rest[i..])),
        None => (rest, None),
    };
    let path = path.filter(|p| !p.trim_matches('/').is_empty());
    Ok((format!("{transport}://{host}"), path.map(str::to_owned)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_crds_are_metal3s_names_and_columns() {
        let bmh = bmh_crd();
        assert_eq!(
            bmh.metadata.name.as_deref(),
            Some("baremetalhosts.metal3.io")
        );
        assert_eq!(
            bmh.spec.names.short_names.as_deref(),
            Some(&["bmh".to_string(), "bmhost".to_string()][..])
        );
        let v = &bmh.spec.versions[0];
        let cols: Vec<&str> = v
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(
            cols,
            [
                "Status", "State", "Consumer", "BMC", "Online", "Error", "Age"
            ]
        );
        assert!(v.subresources.as_ref().unwrap().status.is_some());
        let m3m = metal3_machine_crd();
        assert_eq!(
            m3m.metadata.name.as_deref(),
            Some("metal3machines.infrastructure.cluster.x-k8s.io")
        );
        assert_eq!(m3m.spec.versions[0].name, "v1beta2");
    }

    #[test]
    fn redfish_addresses_as_ironic_reads_them() {
        assert_eq!(
            redfish_system("redfish+http://127.0.0.1:8000/redfish/v1/Systems/1").unwrap(),
            (
                "http://127.0.0.1:8000".into(),
                Some("/redfish/v1/Systems/1".into())
            )
        );
        assert_eq!(
            redfish_system("idrac-redfish://10.0.0.1").unwrap(),
            ("https://10.0.0.1".into(), None)
        );
        assert!(redfish_system("ipmi://10.0.0.1").is_err());
        assert!(redfish_system("redfish+ftp://x/y").is_err());
    }
}
