//! What a companion must keep across a crash of its own process: its node, the
//! timing the replicas gave, the largest cluster size an acknowledgement told it,
//! the newest leader's term it took, what each replica gave it for its peers, its own
//! private key, and whether it armed the watchdog (`--state-dir`, a memory-backed
//! emptyDir of its pod). A successor
//! whose predecessor armed it feeds it by its rule before it hears the node's policy;
//! one whose predecessor never armed it waits for the leader to say the policy wants
//! it.
//!
//! A companion that crashes leaves an armed watchdog counting (closed without the
//! magic character). Its successor must feed it within W, and during an outage of the
//! whole control plane it can do so only on its peers' answers (the feeding rule's
//! third basis), for which it needs the cluster's size, the peer keys and the
//! replicas' authority keys: without them a crash during the outage reset a machine
//! doing its work (simulation seeds 176 and 243, invariant 11). With them the
//! successor starts where its predecessor stood, before any hello: the same size (a
//! majority of at least what the leader can prove it was told), the same keys, and,
//! answering its peers for its node, the same credentials and the key they bind. A
//! fresh feeding state is no looser than the one lost.
//!
//! **What is stored here** (`companion-state.json`, mode 0600, written whole to a
//! temporary file and renamed), each replica's by its address:
//! - the peer key it gave (the peers' questions are sealed under it; every companion
//!   holds the same ones);
//! - its authority's public key (an answer counts only under a credential one of them
//!   signed) and the credential it issued this companion's key, for this node;
//! - the newest leader's term an acknowledgement it took was of (a successor refuses
//!   an older leader's: one that still believes it leads, reached by this node alone);
//! - this companion's private key (Ed25519, `signingKey`: its 32-byte seed). With it,
//!   and a credential, whoever reads the file can answer the peers as this node, and as
//!   no other: each node's key is its own, and a credential binds it to one node.
//!
//! The file lives only as long as the pod: a clean stop (which disarms) removes it, a
//! new pod starts without it (nothing armed, a new key), the node's reboot empties the
//! tmpfs. A state an earlier companion kept (peer keys only) is read: a key is made,
//! and the credentials come with the next hellos.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::watchdog::wire::{Credential, Key, PublicKey, SigningKey};

/// The file's name in `--state-dir`.
pub const STATE_FILE: &str = "companion-state.json";

/// What one replica gave at the last hello to it, for the peers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaKeys {
    /// The key the peers' questions are sealed under.
    pub peer: Key,
    /// Its authority's public key (`None`: a replica older than the credentials).
    pub authority: Option<PublicKey>,
    /// The credential it issued this companion's key, for its node.
    pub credential: Option<Credential>,
}

/// The state kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    pub node: String,
    pub isolation_timeout: Duration,
    pub heartbeat_interval: Duration,
    pub cluster: u16,
    /// By the replica's address.
    pub replicas: BTreeMap<SocketAddr, ReplicaKeys>,
    /// This companion's private key (`None` in a state an earlier companion kept).
    pub signing_key: Option<SigningKey>,
    /// The watchdog was armed (written before the device is opened).
    pub armed: bool,
    /// The newest leader's term an acknowledgement it took was of: its successor
    /// refuses an older one (an old leader still believing it leads, reached alone).
    pub term_seen: u64,
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
    /// Replica address → base64 public key of its authority (absent in an earlier
    /// state, as the two below).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    authority_keys: BTreeMap<SocketAddr, String>,
    /// Replica address → base64 credential it issued.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    credentials: BTreeMap<SocketAddr, String>,
    /// This companion's private key: its seed, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    signing_key: Option<String>,
    /// Absent in a state an earlier companion kept: it armed on the first basis.
    #[serde(default = "armed_by_default")]
    armed: bool,
    /// Absent in a state an earlier companion kept: no term taken.
    #[serde(default, skip_serializing_if = "is_zero")]
    term_seen: u64,
}

fn is_zero(term: &u64) -> bool {
    *term == 0
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
    let decode = |encoded: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()
    };
    let bytes32 = |encoded: &str| decode(encoded).and_then(|k| <[u8; 32]>::try_from(k).ok());
    let signing_key = match &disk.signing_key {
        Some(encoded) => Some(SigningKey::from_seed(bytes32(encoded).ok_or_else(
            || malformed("the companion's private key is not 32 bytes".into()),
        )?)),
        None => None,
    };
    let mut replicas = BTreeMap::new();
    for (addr, encoded) in &disk.peer_keys {
        let key = bytes32(encoded)
            .ok_or_else(|| malformed(format!("the peer key of {addr} is not 32 bytes")))?;
        let authority = match disk.authority_keys.get(addr) {
            Some(encoded) => Some(PublicKey(bytes32(encoded).ok_or_else(|| {
                malformed(format!("the authority key of {addr} is not 32 bytes"))
            })?)),
            None => None,
        };
        let credential = match (disk.credentials.get(addr), authority, &signing_key) {
            (None, ..) => None,
            (Some(encoded), Some(authority), Some(own)) => {
                let credential = decode(encoded)
                    .and_then(|c| Credential::open(&c, &[authority]).ok())
                    .filter(|c| c.node() == disk.node && c.subject == own.public())
                    .ok_or_else(|| {
                        malformed(format!(
                            "the credential of {addr} is not its authority's for this node's key"
                        ))
                    })?;
                Some(credential)
            }
            (Some(_), ..) => {
                return Err(malformed(format!(
                    "a credential of {addr} without its authority or the companion's key"
                )));
            }
        };
        replicas.insert(
            *addr,
            ReplicaKeys {
                peer: Key(key),
                authority,
                credential,
            },
        );
    }
    if let Some(addr) = disk
        .authority_keys
        .keys()
        .chain(disk.credentials.keys())
        .find(|a| !disk.peer_keys.contains_key(a))
    {
        return Err(malformed(format!("keys of {addr} without its peer key")));
    }
    Ok(Some(Kept {
        node: disk.node,
        isolation_timeout: Duration::from_millis(disk.isolation_timeout_ms),
        heartbeat_interval: Duration::from_millis(disk.heartbeat_interval_ms),
        cluster: disk.cluster,
        replicas,
        signing_key,
        armed: disk.armed,
        term_seen: disk.term_seen,
    }))
}

/// Writes `kept` whole (a temporary file renamed over the last one).
pub fn save(dir: &Path, kept: &Kept) -> Result<(), StateError> {
    let path = path_in(dir);
    let b64 = base64::engine::general_purpose::STANDARD;
    let disk = OnDisk {
        node: kept.node.clone(),
        isolation_timeout_ms: u64::try_from(kept.isolation_timeout.as_millis()).unwrap_or(u64::MAX),
        heartbeat_interval_ms: u64::try_from(kept.heartbeat_interval.as_millis())
            .unwrap_or(u64::MAX),
        cluster: kept.cluster,
        peer_keys: kept
            .replicas
            .iter()
            .map(|(a, r)| (*a, b64.encode(r.peer.0)))
            .collect(),
        authority_keys: kept
            .replicas
            .iter()
            .filter_map(|(a, r)| Some((*a, b64.encode(r.authority?.0))))
            .collect(),
        credentials: kept
            .replicas
            .iter()
            .filter_map(|(a, r)| Some((*a, b64.encode(r.credential.as_ref()?.to_bytes()))))
            .collect(),
        signing_key: kept.signing_key.as_ref().map(|k| b64.encode(k.seed())),
        armed: kept.armed,
        term_seen: kept.term_seen,
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
    use crate::watchdog::wire;

    fn kept() -> Kept {
        let own = SigningKey::from_seed([3; 32]);
        let authority = SigningKey::from_seed([1; 32]);
        let credential = Credential::issue(
            &authority,
            own.public(),
            "worker-1",
            wire::BootId::of("boot-1"),
            4,
        );
        Kept {
            node: "worker-1".into(),
            isolation_timeout: Duration::from_secs(2),
            heartbeat_interval: Duration::from_millis(500),
            cluster: 5,
            replicas: [
                (
                    "10.0.0.1:9440".parse().unwrap(),
                    ReplicaKeys {
                        peer: Key([7; 32]),
                        authority: Some(authority.public()),
                        credential,
                    },
                ),
                (
                    // A replica older than the credentials.
                    "10.0.0.2:9440".parse().unwrap(),
                    ReplicaKeys {
                        peer: Key([9; 32]),
                        authority: None,
                        credential: None,
                    },
                ),
            ]
            .into_iter()
            .collect(),
            signing_key: Some(own),
            armed: true,
            term_seen: 4,
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
            assert_eq!(mode & 0o777, 0o600, "it holds the node's private key");
        }
        let mut grown = kept();
        grown.cluster = 6;
        save(dir.path(), &grown).unwrap();
        assert_eq!(load(dir.path()).unwrap().unwrap().cluster, 6);
        remove(dir.path()).unwrap();
        assert_eq!(load(dir.path()).unwrap(), None);
        remove(dir.path()).unwrap();
    }

    /// An earlier companion kept the peer keys alone: read, with no key of its own
    /// (its successor makes one) and no credential.
    #[test]
    fn a_state_an_earlier_companion_kept_is_read() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            path_in(dir.path()),
            r#"{"node":"worker-1","isolationTimeoutMs":2000,"heartbeatIntervalMs":500,
                "cluster":3,"peerKeys":{"10.0.0.1:9440":"BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc="}}"#,
        )
        .unwrap();
        let kept = load(dir.path()).unwrap().unwrap();
        assert_eq!(kept.signing_key, None);
        assert_eq!(
            kept.replicas.values().cloned().collect::<Vec<_>>(),
            vec![ReplicaKeys {
                peer: Key([7; 32]),
                authority: None,
                credential: None
            }]
        );
    }

    /// A credential kept must be its authority's, for this node and this companion's
    /// key: anything else is not a state this companion wrote.
    #[test]
    fn a_kept_credential_for_another_node_or_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut other_key = kept();
        other_key.signing_key = Some(SigningKey::from_seed([4; 32]));
        save(dir.path(), &other_key).unwrap();
        let e = load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("credential of 10.0.0.1:9440"), "{e}");
        let mut other_node = kept();
        other_node.node = "worker-2".into();
        save(dir.path(), &other_node).unwrap();
        assert!(load(dir.path()).is_err());
        let mut no_key = kept();
        no_key.signing_key = None;
        save(dir.path(), &no_key).unwrap();
        assert!(load(dir.path()).is_err());
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
