//! From a pod's claim to the CSI volume behind it: PersistentVolumeClaim (bound,
//! `spec.volumeName`) → PersistentVolume (`spec.csi.driver`, `volumeHandle`,
//! `accessModes`). The kubelet and the attach/detach controller both need it, as
//! the real `util.CreateVolumeSpec` + the CSI plugin's `GetVolumeName` do.

use std::collections::HashMap;

use serde_json::Value;

use super::super::resources::{PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES};
use super::super::store::Store;
use super::names::unique_volume_name;
use super::objects::{self, str_at};

/// A CSI volume as the attach/detach machinery sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsiVolume {
    /// PersistentVolume name (what events and `source.persistentVolumeName` show).
    pub pv: String,
    pub driver: String,
    pub handle: String,
    /// `kubernetes.io/csi/<driver>^<handle>`.
    pub unique: String,
    /// `IsMultiAttachAllowed`: the PV allows ReadWriteMany or ReadOnlyMany.
    pub multi_attach: bool,
}

/// Claims and volumes read once per pass.
pub struct VolumeIndex {
    claims: HashMap<String, Value>,
    volumes: HashMap<String, Value>,
}

impl VolumeIndex {
    pub fn load(store: &Store) -> Self {
        let claims = store
            .list(PERSISTENT_VOLUME_CLAIMS, None)
            .0
            .into_iter()
            .map(|c| (objects::key(&c), c))
            .collect();
        let volumes = store
            .list(PERSISTENT_VOLUMES, None)
            .0
            .into_iter()
            .map(|v| (objects::name(&v).to_string(), v))
            .collect();
        Self { claims, volumes }
    }

    /// The claim `namespace/name`, if it exists.
    pub fn claim(&self, namespace: &str, claim: &str) -> Option<&Value> {
        self.claims.get(&format!("{namespace}/{claim}"))
    }

    /// The CSI volume a claim is bound to (`None` while unbound, missing, or not CSI).
    pub fn resolve(&self, namespace: &str, claim: &str) -> Option<CsiVolume> {
        let pvc = self.claim(namespace, claim)?;
        let pv_name = str_at(pvc, "/spec/volumeName").filter(|n| !n.is_empty())?;
        let pv = self.volumes.get(pv_name)?;
        let driver = str_at(pv, "/spec/csi/driver")?;
        let handle = str_at(pv, "/spec/csi/volumeHandle")?;
        let multi_attach = pv
            .pointer("/spec/accessModes")
            .and_then(Value::as_array)
            .is_some_and(|modes| {
                modes
                    .iter()
                    .any(|m| matches!(m.as_str(), Some("ReadWriteMany") | Some("ReadOnlyMany")))
            });
        Some(CsiVolume {
            pv: pv_name.to_string(),
            driver: driver.to_string(),
            handle: handle.to_string(),
            unique: unique_volume_name(driver, handle),
            multi_attach,
        })
    }

    /// Each PVC volume of a pod: `(pod volume name, claim, resolved volume)`.
    pub fn pod_volumes(&self, pod: &Value) -> Vec<(String, String, Option<CsiVolume>)> {
        let ns = objects::namespace(pod);
        objects::pod_claims(pod)
            .into_iter()
            .map(|(vol, claim)| {
                let resolved = self.resolve(ns, &claim);
                (vol, claim, resolved)
            })
            .collect()
    }
}
