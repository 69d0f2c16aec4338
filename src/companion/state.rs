//! What a companion must keep across a crash of its own process: its node, the
//! timing the replicas gave, the largest cluster size an acknowledgement told it, the
//! peer keys, and whether it armed the watchdog (`--state-dir`, a memory-backed
//! emptyDir of its pod). A successor whose predecessor armed it feeds it by its rule
//! before it hears the node's policy; one whose predecessor never armed it waits for
//! the leader to say the policy wants it.
//!
//! A companion that crashes leaves an armed watchdog counting (closed without the
//! magic character). Its successor must feed it within W, and during an outage of the
//! whole control plane it can do so only on its peers' answers (the feeding rule's
//! third basis), for which it needs the cluster's size and the peer keys: without them
//! a crash during the outage reset a machine doing its work (simulation seeds 176 and
//! 243, invariant 11). With them the successor starts where its predecessor stood,
//! before any hello: the same size (a majority of at least what the leader can prove it
//! was told) and the same keys. A fresh feeding state is no looser than the one lost.
//!
//! The file lives only as long as the pod: a clean stop (which disarms) removes it, a
//! new pod starts without it (nothing armed), the node's reboot empties the tmpfs.
//! Written whole to a temporary file and renamed, mode 0600 (it holds the peer keys).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::watchdog::wire::Key;

/// The file's name in `--state-dir`.
pub const STATE_FILE: &str = "companion-state.json";

/// The state kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    pub node: String,
    pub isolation_timeout: Duration,
    pub heartbeat_interval: Duration,
    pub cluster: u16,
    pub peer_keys: BTreeMap<SocketAddr, Key>,
    /// The watchdog was armed (written before the device is opened).
    pub armed: bool,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct OnDisk {
    node: String,
    isolation_timeout_ms: u64,
    heartbeat_interval_ms: u64,
    cluster: u16,
    /// Replica address → base64 key.
    peer_keys: BTreeMap<SocketAddr, String>,
    /// Absent in a state an earlier companion kept: it armed on the first basis.
    #[serde(default = "armed_by_default")]
    armed: bool,
}

/// What a state kept before the watchdog's arming was recorded says: its
/// predecessor armed on the first basis, so the watchdog may well be counting.
fn armed_by_default() -> bool {
    true
}

/// Why the kept state could not be read or written (its path; never a key).
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a companion state ({why}); ignored")]
    Malformed { path: PathBuf, why: String },
}

/// The state file of `dir`.
pub fn path_in(dir: &Path) -> PathBuf {
    dir.join(STATE_FILE)
}

/// The kept state, `Ok(None)` when there is none.
pub fn load(dir: &Path) -> Result<Option<Kept>, StateError> {
    let path = path_in(dir);
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(StateError::Io { path, source }),
    };
    let malformed = |why: String| StateError::Malformed {
        path: path.clone(),
        why,
    };
    let disk: OnDisk = serde_json::from_slice(&text).map_err(|e| malformed(e.to_string()))?;
    if disk.node.is_empty() || disk.isolation_timeout_ms == 0 || disk.heartbeat_interval_ms == 0 {
        return Err(malformed("no node or no timing".into()));
    }
    let mut peer_keys = BTreeMap::new();
    for (addr, encoded) in disk.peer_keys {
        let key = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()
            .and_then(|k| <[u8; 32]>::try_from(k).ok())
            .ok_or_else(|| malformed(format!("the peer key of {addr} is not 32 bytes")))?;
        peer_keys.insert(addr, Key(key));
    }
    Ok(Some(Kept {
        node: disk.node,
        isolation_timeout: Duration::from_millis(disk.isolation_timeout_ms),
        heartbeat_interval: Duration::from_millis(disk.heartbeat_interval_ms),
        cluster: disk.cluster,
        peer_keys,
        armed: disk.armed,
    }))
}

/// Writes `kept` whole (a temporary file renamed over the last one).
pub fn save(dir: &Path, kept: &Kept) -> Result<(), StateError> {
    let path = path_in(dir);
    let disk = OnDisk {
        node: kept.node.clone(),
        isolation_timeout_ms: u64::try_from(kept.isolation_timeout.as_millis()).unwrap_or(u64::MAX),
        heartbeat_interval_ms: u64::try_from(kept.heartbeat_interval.as_millis())
            .unwrap_or(u64::MAX),
        cluster: kept.cluster,
        peer_keys: kept
            .peer_keys
            .iter()
            .map(|(a, k)| (*a, base64::engine::general_purpose::STANDARD.encode(k.0)))
            .collect(),
        armed: kept.armed,
    };
    let bytes = serde_json::to_vec(&disk).map_err(|e| StateError::Malformed {
        path: path.clone(),
        why: e.to_string(),
    })?;
    let temporary = dir.join(format!(".{STATE_FILE}.tmp"));
    let io = |source| StateError::Io {
        path: path.clone(),
        source,
    };
    write_private(&temporary, &bytes).map_err(io)?;
    std::fs::rename(&temporary, &path).map_err(io)
}

/// Removes the kept state (a clean stop); none is fine.
pub fn remove(dir: &Path) -> Result<(), StateError> {
    let path = path_in(dir);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(StateError::Io { path, source }),
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn kept() -> Kept {
        Kept {
            node: "worker-1".into(),
            isolation_timeout: Duration::from_secs(2),
            heartbeat_interval: Duration::from_millis(500),
            cluster: 5,
            peer_keys: [
                ("10.0.0.1:9440".parse().unwrap(), Key([7; 32])),
                ("10.0.0.2:9440".parse().unwrap(), Key([9; 32])),
            ]
            .into_iter()
            .collect(),
            armed: true,
        }
    }

    #[test]
    fn the_state_round_trips_privately_and_a_clean_stop_removes_it() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path()).unwrap(), None, "nothing kept yet");
        save(dir.path(), &kept()).unwrap();
        assert_eq!(load(dir.path()).unwrap(), Some(kept()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(path_in(dir.path()))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "it holds the peer keys");
        }
        let mut grown = kept();
        grown.cluster = 6;
        save(dir.path(), &grown).unwrap();
        assert_eq!(load(dir.path()).unwrap().unwrap().cluster, 6);
        remove(dir.path()).unwrap();
        assert_eq!(load(dir.path()).unwrap(), None);
        remove(dir.path()).unwrap();
    }

    #[test]
    fn a_malformed_state_is_refused_naming_the_file_and_no_key() {
        let dir = tempfile::tempdir().unwrap();
        save(dir.path(), &kept()).unwrap();
        let path = path_in(dir.path());
        let text = std::fs::read_to_string(&path).unwrap();
        let short = text.replacen(
            &base64::engine::general_purpose::STANDARD.encode([7u8; 32]),
            "c2hvcnQ=",
            1,
        );
        std::fs::write(&path, short).unwrap();
        let e = load(dir.path()).unwrap_err().to_string();
        assert!(e.contains(STATE_FILE) && e.contains("10.0.0.1:9440"), "{e}");
        assert!(!e.contains("c2hvcnQ="), "{e}");
        std::fs::write(&path, "{}").unwrap();
        assert!(load(dir.path()).is_err());
        std::fs::write(&path, "garbage").unwrap();
        assert!(load(dir.path()).is_err());
    }
}
