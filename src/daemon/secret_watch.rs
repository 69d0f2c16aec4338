//! Rotated BMC passwords, picked up without a restart.
//!
//! The Secrets the running configuration read its credentials from
//! (`password_secret` in the inventory; not those BareMetalHosts name) are watched,
//! each by name: a list and a watch with `fieldSelector=metadata.name=<name>`, which
//! a Role's `resourceNames` can grant (`deploy/components/secret-credentials`). When
//! a Secret's data is no longer what was read (a rotated password, a Secret deleted
//! or re-created with other data), [`SecretWatch::changed`] wakes the reloader, which
//! reads the whole configuration again and checks it as a start-up does: applied, or
//! refused with the running one kept ([`super::reload`]).
//!
//! Only data counts: an edited label or annotation changes nothing. A watch that
//! fails (the API server away, RBAC) is retried with kube's backoff and said once in
//! the log until it works again; meanwhile the running credentials stay in use.

use std::collections::BTreeMap;
use std::hash::{Hash as _, Hasher as _};
use std::sync::{Arc, Mutex};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio::sync::Notify;
use tokio_util::task::AbortOnDropHandle;

use crate::config::{DataDigest, SecretsRead};

/// `(namespace, name)` of a Secret.
type SecretName = (String, String);

/// The Secrets of the running configuration, watched.
pub struct SecretWatch {
    seen: Arc<Mutex<Observed>>,
    wake: Arc<Notify>,
    _task: AbortOnDropHandle<()>,
}

impl SecretWatch {
    /// Starts watching every Secret of `read`; `None` when there is none.
    pub fn start(client: &Client, read: SecretsRead) -> Option<Self> {
        if read.is_empty() {
            return None;
        }
        let names: Vec<SecretName> = read.iter().map(|(n, _)| n.clone()).collect();
        let seen = Arc::new(Mutex::new(Observed::new(read)));
        let wake = Arc::new(Notify::new());
        let task = tokio::spawn(watch(client.clone(), names, seen.clone(), wake.clone()));
        Some(Self {
            seen,
            wake,
            _task: AbortOnDropHandle::new(task),
        })
    }

    /// Waits until a Secret may differ from what was read (then see [`Self::differing`]).
    pub async fn changed(&self) {
        self.wake.notified().await;
    }

    /// The Secrets whose data differs now from what was read, `namespace/name`.
    pub fn differing(&self) -> Vec<String> {
        self.lock().differing()
    }

    /// A hash of what every Secret holds now: the same Secrets' state, the same value
    /// (a refused state is not tried again until a Secret changes again).
    pub fn state(&self) -> u64 {
        self.lock().state()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Observed> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One watch per Secret, merged; every event updates `seen`, and a difference from
/// what was read wakes the reloader.
async fn watch(
    client: Client,
    names: Vec<SecretName>,
    seen: Arc<Mutex<Observed>>,
    wake: Arc<Notify>,
) {
    let streams = names.into_iter().map(|(ns, name)| {
        let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let key = (ns, name);
        watcher::watcher(api, config)
            .default_backoff()
            .map(move |event| (key.clone(), event))
            .boxed()
    });
    let mut events = futures::stream::select_all(streams);
    let mut failing: BTreeMap<SecretName, bool> = BTreeMap::new();
    while let Some((key, event)) = events.next().await {
        let event = match event {
            Ok(event) => {
                if failing.insert(key.clone(), false) == Some(true) {
                    tracing::info!(secret = %format!("{}/{}", key.0, key.1), "watching the Secret again");
                }
                event
            }
            Err(e) => {
                if failing.insert(key.clone(), true) != Some(true) {
                    tracing::warn!(
                        secret = %format!("{}/{}", key.0, key.1),
                        error = %e,
                        "cannot watch the Secret (retried with backoff): a rotated password \
                         in it is not picked up until this works again or the configuration \
                         is reloaded"
                    );
                }
                continue;
            }
        };
        let differs = {
            let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
            match event {
                Event::Init => seen.listing(&key),
                Event::InitApply(secret) | Event::Apply(secret) => {
                    seen.observe(&key, Some(digest(&secret)))
                }
                Event::Delete(_) => seen.observe(&key, None),
                Event::InitDone => seen.listed(&key),
            }
        };
        if differs {
            wake.notify_one();
        }
    }
}

fn digest(secret: &Secret) -> DataDigest {
    DataDigest::of(&secret.data.clone().unwrap_or_default())
}

/// What was read, and what each Secret holds now (`None`: absent; not in the map:
/// nothing heard yet).
#[derive(Debug)]
struct Observed {
    read: SecretsRead,
    now: BTreeMap<SecretName, Option<DataDigest>>,
    /// Secrets being listed again (a watch's start or restart) and not seen yet in
    /// that listing: absent if it ends without them.
    listing: BTreeMap<SecretName, bool>,
}

impl Observed {
    fn new(read: SecretsRead) -> Self {
        Self {
            read,
            now: BTreeMap::new(),
            listing: BTreeMap::new(),
        }
    }

    fn read(&self, key: &SecretName) -> Option<DataDigest> {
        self.read.get(&key.0, &key.1)
    }

    /// Records what `key` holds now; true when that differs from what was read.
    fn observe(&mut self, key: &SecretName, now: Option<DataDigest>) -> bool {
        if let Some(seen) = self.listing.get_mut(key) {
            *seen = true;
        }
        self.now.insert(key.clone(), now);
        now != self.read(key)
    }

    /// A listing of `key` begins.
    fn listing(&mut self, key: &SecretName) -> bool {
        self.listing.insert(key.clone(), false);
        false
    }

    /// A listing of `key` ended: a Secret it did not return is absent.
    fn listed(&mut self, key: &SecretName) -> bool {
        match self.listing.remove(key) {
            Some(false) => self.observe(key, None),
            _ => false,
        }
    }

    fn differing(&self) -> Vec<String> {
        self.now
            .iter()
            .filter(|(key, now)| **now != self.read(key))
            .map(|((ns, name), _)| format!("{ns}/{name}"))
            .collect()
    }

    fn state(&self) -> u64 {
        let mut hasher = std::hash::DefaultHasher::new();
        for (key, now) in &self.now {
            key.hash(&mut hasher);
            now.hash(&mut hasher);
        }
        hasher.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn data(password: &str) -> DataDigest {
        DataDigest::of(&BTreeMap::from([(
            "password".to_string(),
            ByteString(password.as_bytes().to_vec()),
        )]))
    }

    fn key(name: &str) -> SecretName {
        ("nodefence".to_string(), name.to_string())
    }

    fn observed() -> Observed {
        let mut read = SecretsRead::default();
        read.insert("nodefence", "bmc-a", data("old-a"));
        read.insert("nodefence", "bmc-b", data("old-b"));
        Observed::new(read)
    }

    #[test]
    fn what_was_read_is_no_change_and_a_rotated_password_is() {
        let mut o = observed();
        assert!(!o.listing(&key("bmc-a")));
        assert!(!o.observe(&key("bmc-a"), Some(data("old-a"))));
        assert!(!o.listed(&key("bmc-a")));
        assert!(o.differing().is_empty());
        let before = o.state();

        assert!(o.observe(&key("bmc-a"), Some(data("new-a"))));
        assert_eq!(o.differing(), ["nodefence/bmc-a"]);
        assert_ne!(o.state(), before);
        // Rotated back: nothing differs any more.
        assert!(!o.observe(&key("bmc-a"), Some(data("old-a"))));
        assert!(o.differing().is_empty());
        assert_eq!(o.state(), before);
    }

    #[test]
    fn a_secret_deleted_or_missing_from_a_listing_differs() {
        let mut o = observed();
        assert!(o.observe(&key("bmc-b"), None), "deleted");
        assert_eq!(o.differing(), ["nodefence/bmc-b"]);

        let mut o = observed();
        o.listing(&key("bmc-a"));
        assert!(o.listed(&key("bmc-a")), "listed without it");
        assert_eq!(o.differing(), ["nodefence/bmc-a"]);
        // Re-created with the data that was read: no difference.
        assert!(!o.observe(&key("bmc-a"), Some(data("old-a"))));
        assert!(o.differing().is_empty());
    }

    #[test]
    fn the_digest_covers_keys_and_values_and_hides_them() {
        let a = |k: &str, v: &str| {
            DataDigest::of(&BTreeMap::from([(k.to_string(), ByteString(v.into()))]))
        };
        assert_eq!(a("password", "x"), a("password", "x"));
        assert_ne!(a("password", "x"), a("password", "y"));
        assert_ne!(a("password", "x"), a("passwordx", ""));
        assert_eq!(format!("{:?}", a("password", "hunter2")), "DataDigest(..)");
    }
}
