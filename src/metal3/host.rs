//! The BareMetalHost fields nodefence uses, and the annotations it knows.
//!
//! Only what nodefence reads (the BMC's address and credentials Secret, `online`,
//! `consumerRef`, `disablePowerOff`, `status.poweredOn`, the provisioning and
//! operational state, the credentials Metal3 last tried) and writes (its reboot annotation) is declared; everything
//! else of the object is left alone (a merge patch of one annotation never
//! replaces the rest). Field names are Metal3's (`apis/metal3.io/v1alpha1`).

use std::fmt;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Metal3's API group.
pub const GROUP: &str = "metal3.io";
/// The BareMetalHost version nodefence reads.
pub const VERSION: &str = "v1alpha1";

/// The reboot annotation prefix: `reboot.metal3.io` (a one-shot reboot: the
/// operator removes it once the host is off and powers it on again) or
/// `reboot.metal3.io/{key}` (the host is kept off until the annotation is removed).
pub const REBOOT_ANNOTATION_PREFIX: &str = "reboot.metal3.io";

/// nodefence's own reboot annotation: suffixed, so Metal3 keeps the host powered off
/// until nodefence removes it.
pub const NODEFENCE_REBOOT_ANNOTATION: &str = "reboot.metal3.io/nodefence";

/// Its value: a hard power off (Ironic's `power off`, not an ACPI soft power off a
/// hung OS may ignore).
pub const HARD_REBOOT_VALUE: &str = r#"{"mode":"hard"}"#;

/// Metal3's pause annotation: the operator does nothing to the host while it is set.
pub const PAUSED_ANNOTATION: &str = "baremetalhost.metal3.io/paused";

/// Metal3's detached annotation: the host is removed from Ironic, which then manages
/// neither its power nor its power-state sync.
pub const DETACHED_ANNOTATION: &str = "baremetalhost.metal3.io/detached";

/// How to reach the host's BMC (`spec.bmc`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BmcDetails {
    /// The BMC's URL; its scheme names the driver (see [`super::address`]).
    #[serde(default)]
    pub address: String,
    /// The Secret, in the host's namespace, with keys `username` and `password`.
    #[serde(default)]
    pub credentials_name: String,
    /// Skip the BMC's certificate verification (honoured only where nodefence's
    /// `[metal3] allow_insecure` opts in).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_certificate_verification: bool,
}

/// The part of a BareMetalHost's spec nodefence reads.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "metal3.io",
    version = "v1alpha1",
    kind = "BareMetalHost",
    namespaced,
    status = "BareMetalHostStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct BareMetalHostSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bmc: Option<BmcDetails>,
    /// Whether Metal3 keeps the host powered on.
    #[serde(default)]
    pub online: bool,
    /// What uses the host: a Metal3Machine under Cluster API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_ref: Option<ObjectReference>,
    /// Metal3 reboots instead of powering off: such a host is never off.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_power_off: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub externally_provisioned: bool,
}

/// `status.provisioning`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ProvisionStatus {
    /// `provisioned`, `externally provisioned`, `available`, ...
    #[serde(default)]
    pub state: String,
}

/// The part of a BareMetalHost's status nodefence reads.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BareMetalHostStatus {
    /// The power state as Metal3 last read it from Ironic.
    #[serde(default)]
    pub powered_on: bool,
    #[serde(default)]
    pub provisioning: ProvisionStatus,
    /// `OK`, `discovered`, `error`, `detached`, `servicing`.
    #[serde(default)]
    pub operational_status: String,
    #[serde(default)]
    pub error_message: String,
    /// The credentials Secret and its `resourceVersion` Metal3 last tried: updated
    /// as soon as Metal3 sees the Secret change (it owns and watches it), before it
    /// validates them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tried_credentials: Option<CredentialsStatus>,
}

/// `status.triedCredentials` (Metal3's `CredentialsStatus`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialsStatus {
    /// The Secret: `name` and `namespace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<SecretReference>,
    /// Its `metadata.resourceVersion` when Metal3 read it.
    #[serde(default)]
    pub credentials_version: String,
}

/// A Secret by name and namespace (`corev1.SecretReference`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct SecretReference {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
}

/// A BareMetalHost by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostRef {
    pub namespace: String,
    pub name: String,
}

impl HostRef {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The reference of a BareMetalHost object (`None` without a name or namespace).
    pub fn of(host: &BareMetalHost) -> Option<Self> {
        Some(Self::new(
            host.metadata.namespace.clone()?,
            host.metadata.name.clone()?,
        ))
    }
}

impl fmt::Display for HostRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl BareMetalHost {
    fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    }

    /// True while Metal3 is paused for this host (it acts on no annotation).
    pub fn paused(&self) -> bool {
        self.annotation(PAUSED_ANNOTATION).is_some()
    }

    /// True when the host is detached from Ironic (annotation or status).
    pub fn detached(&self) -> bool {
        self.annotation(DETACHED_ANNOTATION).is_some()
            || self
                .status
                .as_ref()
                .is_some_and(|s| s.operational_status == "detached")
    }

    /// nodefence's reboot annotation is set.
    pub fn held_off_by_nodefence(&self) -> bool {
        self.annotation(NODEFENCE_REBOOT_ANNOTATION).is_some()
    }

    /// `status.poweredOn`, `None` before Metal3 wrote a status.
    pub fn powered_on(&self) -> Option<bool> {
        self.status.as_ref().map(|s| s.powered_on)
    }

    /// The `resourceVersion` of the host's credentials Secret as Metal3 last saw it
    /// (`status.triedCredentials`, when it names the Secret `spec.bmc` names), or
    /// `None` before Metal3 read it. A rotated password changes it: Metal3 owns the
    /// Secret and records its new version when it changes.
    pub fn credentials_version(&self) -> Option<&str> {
        let tried = self.status.as_ref()?.tried_credentials.as_ref()?;
        let secret = tried.credentials.as_ref()?;
        let wanted = &self.spec.bmc.as_ref()?.credentials_name;
        let namespace = self.metadata.namespace.as_deref().unwrap_or_default();
        (secret.name == *wanted
            && secret.namespace == namespace
            && !tried.credentials_version.is_empty())
        .then_some(tried.credentials_version.as_str())
    }
}
