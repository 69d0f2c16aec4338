//! Noticing that the configuration changed on disk, for a reload without a restart.
//!
//! In Kubernetes the files are a ConfigMap (and Secrets) mounted as volumes: the
//! kubelet replaces them atomically (a `..data` symlink swap) up to a minute after
//! the object changed. Watching inode events through those symlinks is fragile, and
//! a minute of latency is already built in, so the files are simply read and hashed
//! every few seconds (a few kilobytes), and `SIGHUP` asks for a check at once, as
//! operators expect of a daemon.
//!
//! What is watched: `nodefence.toml`, the inventory, and every file the loaded
//! configuration reads (password files, CA files, AWS credentials files): a rotated
//! BMC password is a reload too. A version is tried once: an invalid one is reported
//! once, not every few seconds, and tried again only when the files change again.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use super::{Config, PowerSource, SecretSource};

/// The contents of the watched files, hashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// This version with something besides the files (the BareMetalHosts read).
    pub fn with(&self, extra: u64) -> Fingerprint {
        let mut hash = Sha256::new();
        hash.update(self.0);
        hash.update(extra.to_le_bytes());
        Fingerprint(hash.finalize().into())
    }

    /// A short hex prefix, for logs and Events.
    pub fn short(&self) -> String {
        self.0[..6].iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Every file `config` was read from or reads at run time.
pub fn files_of(config: &Config) -> BTreeSet<PathBuf> {
    let mut files = BTreeSet::from([config.config_path.clone(), config.inventory_path.clone()]);
    for node in config.inventory.nodes.values() {
        for source in node.sources() {
            if let Some(c) = source.credential()
                && let SecretSource::File(p) = &c.source
            {
                files.insert(p.clone());
            }
            match source {
                PowerSource::Redfish(t) => files.extend(t.tls.ca_file.clone()),
                PowerSource::Vsphere(t) => files.extend(t.tls.ca_file.clone()),
                PowerSource::Aws(t) => {
                    files.extend(t.tls.ca_file.clone());
                    files.extend(t.credentials_file.clone());
                }
                PowerSource::Kubevirt(t) => {
                    files.insert(t.kubeconfig.clone());
                }
                PowerSource::Ipmi(_) | PowerSource::Exec(_) => {}
            }
        }
    }
    files
}

/// Hashes the files' paths and contents (a missing file hashes as missing).
pub fn fingerprint(files: &BTreeSet<PathBuf>) -> Fingerprint {
    let mut hash = Sha256::new();
    for path in files {
        hash.update(path.as_os_str().as_encoded_bytes());
        hash.update([0]);
        match std::fs::read(path) {
            Ok(bytes) => {
                hash.update((bytes.len() as u64).to_le_bytes());
                hash.update(&bytes);
            }
            Err(_) => hash.update(b"\xffmissing"),
        }
    }
    Fingerprint(hash.finalize().into())
}

/// Which version is running and which was last tried.
#[derive(Debug, Clone)]
pub struct ConfigWatch {
    config_path: PathBuf,
    /// The files of the running configuration.
    files: BTreeSet<PathBuf>,
    running: Fingerprint,
    /// The last version tried (applied or refused).
    tried: Fingerprint,
}

impl ConfigWatch {
    /// Watches the files of `config`, the version running now.
    pub fn new(config: &Config) -> Self {
        let files = files_of(config);
        let running = fingerprint(&files);
        Self {
            config_path: config.config_path.clone(),
            files,
            running,
            tried: running,
        }
    }

    /// The `nodefence.toml` to load a new version from.
    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// The fingerprint of the running version.
    pub fn running(&self) -> Fingerprint {
        self.running
    }

    /// A version not tried yet, if the files changed since the last one tried.
    pub fn changed(&self) -> Option<Fingerprint> {
        let now = fingerprint(&self.files);
        (now != self.tried).then_some(now)
    }

    /// Records that `version` was tried and refused: it is not tried again.
    pub fn refused(&mut self, version: Fingerprint) {
        self.tried = version;
    }

    /// Records that `config` is now running: its files are watched from now on (a
    /// new password file, a new CA file), as they are now. (A change in the moment
    /// between the load and this call is taken as part of the version applied; the
    /// kubelet swaps a mounted ConfigMap atomically, so that moment does not split
    /// one update.)
    pub fn applied(&mut self, config: &Config) {
        self.config_path = config.config_path.clone();
        self.files = files_of(config);
        self.running = fingerprint(&self.files);
        self.tried = self.running;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_with_the_hosts_read_differs_by_what_was_read() {
        let files = fingerprint(&BTreeSet::new());
        assert_eq!(files.with(1), files.with(1));
        assert_ne!(files.with(1), files.with(2));
        assert_ne!(files.with(1), files);
    }

    #[test]
    fn a_change_is_seen_once_and_a_refused_version_is_not_retried() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.toml");
        let b = dir.path().join("b.pem");
        std::fs::write(&a, "one").unwrap();
        let files = BTreeSet::from([a.clone(), b.clone()]);
        let first = fingerprint(&files);
        assert_eq!(first, fingerprint(&files), "stable");
        std::fs::write(&b, "appeared").unwrap();
        let second = fingerprint(&files);
        assert_ne!(first, second, "a file that appears is a change");
        std::fs::write(&a, "two").unwrap();
        assert_ne!(second, fingerprint(&files), "new content is a change");

        let mut watch = ConfigWatch {
            config_path: a.clone(),
            files: files.clone(),
            running: first,
            tried: first,
        };
        let new = watch.changed().expect("changed");
        watch.refused(new);
        assert_eq!(
            watch.changed(),
            None,
            "a refused version is not tried again"
        );
        assert_eq!(watch.running(), first, "the running version is kept");
        std::fs::write(&a, "three").unwrap();
        assert!(watch.changed().is_some(), "a further change is tried");
        assert_eq!(new.short().len(), 12);
    }
}
