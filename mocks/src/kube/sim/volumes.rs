//! From a pod's claim to the CSI volume behind it: PersistentVolumeClaim (bound,
//! `spec.volumeName`) → PersistentVolume (`spec.csi.driver`, `volumeHandle`,
//! `accessModes`). The kubelet and the attach/detach controller both need it, as
//! the real `util.CreateVolumeSpec` + the CSI plugin's `GetVolumeName` do.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::super::resources::{PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES};
use super::super::store::Store;
use super::names::unique_volume_name;
use super::objects::At;
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

/// Claims and volumes read once per pass (shared snapshots of the store, indexed).
pub struct VolumeIndex {
    claim_list: Arc<[Value]>,
    volume_list: Arc<[Value]>,
    /// `namespace/name` → position in `claim_list`.
    claims: HashMap<String, usize>,
    /// name → position in `volume_list`.
    volumes: HashMap<String, usize>,
}

impl VolumeIndex {
    pub fn load(store: &Store) -> Self {
        let claim_list = store.snapshot(PERSISTENT_VOLUME_CLAIMS);
        let volume_list = store.snapshot(PERSISTENT_VOLUMES);
        let claims = claim_list
            .iter()
            .enumerate()
            .map(|(i, c)| (objects::key(c), i))
            .collect();
        let volumes = volume_list
            .iter()
            .enumerate()
            .map(|(i, v)| (objects::name(v).to_string(), i))
            .collect();
        Self {
            claim_list,
            volume_list,
            claims,
            volumes,
        }
    }

    /// The claim `namespace/name`, if it exists.
    pub fn claim(&self, namespace: &str, claim: &str) -> Option<&Value> {
        let i = *self.claims.get(&format!("{namespace}/{claim}"))?;
        self.claim_list.get(i)
    }

    /// The CSI volume a claim is bound to (`None` while unbound, missing, or not CSI).
    pub fn resolve(&self, namespace: &str, claim: &str) -> Option<CsiVolume> {
        let pvc = self.claim(namespace, claim)?;
        let pv_name = str_at(pvc, "/spec/volumeName").filter(|n| !n.is_empty())?;
        let pv = self.volume_list.get(*self.volumes.get(pv_name)?)?;
        let driver = str_at(pv, "/spec/csi/driver")?;
        let handle = str_at(pv, "/spec/csi/volumeHandle")?;
        let multi_attach = pv
            .at("/spec/accessModes")
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
