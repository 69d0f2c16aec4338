//! BareMetalHost changes, heard as they happen.
//!
//! With `[metal3] hosts = true` the inventory depends on the BareMetalHosts: their
//! BMC, their annotations, whether they are detached, and the version of their
//! credentials Secret as Metal3 last recorded it (`status.triedCredentials`: Metal3
//! owns each host's Secret, watches it, and records its new `resourceVersion` as soon
//! as it changes). [`HostWatch`] watches the hosts of `[metal3] namespaces` and wakes
//! the reloader when one of those changes, or a host appears or goes, so that a
//! rotated BMC password is read within a second or two of Metal3 seeing it, without a
//! grant on Secrets beyond the `get` nodefence already has (a watch of the Secrets
//! themselves would need `list` and `watch` on every Secret of the namespace: RBAC
//! cannot narrow those by label or by a name chosen later).
//!
//! A status-only change (Metal3 copying Ironic's power state into `poweredOn`) wakes
//! nothing. The wake-up only asks for a re-read: the reloader then lists the hosts
//! again and compares the result with the running one's
//! ([`crate::metal3::inventory::fingerprint`]), as its periodic resync does, which
//! stays as the backstop (a watch that cannot work is said once and retried with
//! kube's backoff).

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{DefaultHasher, Hash as _, Hasher as _};
use std::sync::Arc;

use futures::StreamExt as _;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt as _};
use tokio::sync::Notify;
use tokio_util::task::AbortOnDropHandle;

use crate::metal3::BareMetalHost;

/// The BareMetalHosts of some namespaces, watched.
pub struct HostWatch {
    namespaces: Vec<String>,
    wake: Arc<Notify>,
    _task: AbortOnDropHandle<()>,
}

impl HostWatch {
    /// Starts watching the hosts of `namespaces`.
    pub fn start(client: &Client, namespaces: &[String]) -> Self {
        let wake = Arc::new(Notify::new());
        let task = tokio::spawn(watch(client.clone(), namespaces.to_vec(), wake.clone()));
        Self {
            namespaces: namespaces.to_vec(),
            wake,
            _task: AbortOnDropHandle::new(task),
        }
    }

    /// The namespaces watched.
    pub fn namespaces(&self) -> &[String] {
        &self.namespaces
    }

    /// Waits until a host changed in a way the inventory depends on.
    pub async fn changed(&self) {
        self.wake.notified().await;
    }
}

/// What of a host the inventory depends on, hashed: its spec (by its generation), its
/// annotations, whether it is detached, and its credentials Secret's version as
/// Metal3 recorded it.
pub fn relevant(host: &BareMetalHost) -> u64 {
    let mut hasher = DefaultHasher::new();
    host.metadata.generation.hash(&mut hasher);
    host.metadata.annotations.hash(&mut hasher);
    host.metadata.deletion_timestamp.is_some().hash(&mut hasher);
    host.detached().hash(&mut hasher);
    host.credentials_version().hash(&mut hasher);
    hasher.finish()
}

/// What the watch has seen of one namespace's hosts (name → [`relevant`]).
#[derive(Debug, Default)]
pub(crate) struct Seen {
    hosts: BTreeMap<String, u64>,
    /// The names of a listing under way (a first list, or a re-list after a broken
    /// watch).
    listing: Option<BTreeSet<String>>,
    /// Whether a first listing completed: before that, nothing is a change.
    listed: bool,
}

impl Seen {
    /// One watch event; true when it is a change the inventory depends on.
    pub(crate) fn observe(&mut self, event: Event<BareMetalHost>) -> bool {
        match event {
            Event::Init => {
                self.listing = Some(BTreeSet::new());
                false
            }
            Event::InitApply(host) => {
                let name = host.name_any();
                if let Some(listing) = self.listing.as_mut() {
                    listing.insert(name.clone());
                }
                let now = relevant(&host);
                self.hosts.insert(name, now) != Some(now) && self.listed
            }
            Event::InitDone => {
                let listed = self.listing.take().unwrap_or_default();
                let before = self.hosts.len();
                self.hosts.retain(|name, _| listed.contains(name));
                let gone = self.hosts.len() != before;
                let first = !self.listed;
                self.listed = true;
                gone && !first
            }
            Event::Apply(host) => {
                let now = relevant(&host);
                self.hosts.insert(host.name_any(), now) != Some(now)
            }
            Event::Delete(host) => self.hosts.remove(&host.name_any()).is_some(),
        }
    }
}

async fn watch(client: Client, namespaces: Vec<String>, wake: Arc<Notify>) {
    let streams = namespaces.into_iter().map(|ns| {
        let api: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
        watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .map(move |event| (ns.clone(), event))
            .boxed()
    });
    let mut events = futures::stream::select_all(streams);
    let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
    let mut failing: BTreeMap<String, bool> = BTreeMap::new();
    while let Some((ns, event)) = events.next().await {
        let event = match event {
            Ok(event) => {
                if failing.insert(ns.clone(), false) == Some(true) {
                    tracing::info!(namespace = %ns, "watching the BareMetalHosts again");
                }
                event
            }
            Err(e) => {
                if failing.insert(ns.clone(), true) != Some(true) {
                    tracing::warn!(
                        namespace = %ns,
                        error = %e,
                        "cannot watch the BareMetalHosts (retried with backoff): their \
                         changes, a rotated BMC password among them, are picked up at the \
                         next [metal3] resync_interval instead"
                    );
                }
                continue;
            }
        };
        if seen.entry(ns).or_default().observe(event) {
            wake.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn host(name: &str, generation: i64, version: &str, powered_on: bool) -> BareMetalHost {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
            "metadata": {"name": name, "namespace": "metal3", "generation": generation},
            "spec": {"online": true, "bmc": {"address": "redfish://bmc/redfish/v1/Systems/1",
                     "credentialsName": format!("{name}-bmc")}},
            "status": {"poweredOn": powered_on, "triedCredentials": {
                "credentials": {"name": format!("{name}-bmc"), "namespace": "metal3"},
                "credentialsVersion": version}}
        }))
        .unwrap()
    }

    fn listed(hosts: &[BareMetalHost]) -> Seen {
        let mut seen = Seen::default();
        assert!(!seen.observe(Event::Init));
        for h in hosts {
            assert!(!seen.observe(Event::InitApply(h.clone())), "the first list");
        }
        assert!(!seen.observe(Event::InitDone));
        seen
    }

    #[test]
    fn a_rotated_secret_a_spec_change_and_hosts_coming_and_going_are_changes() {
        let mut seen = listed(&[host("a", 1, "100", true), host("b", 1, "200", true)]);
        assert!(
            !seen.observe(Event::Apply(host("a", 1, "100", false))),
            "poweredOn only"
        );
        assert!(
            seen.observe(Event::Apply(host("a", 1, "101", false))),
            "Secret rotated"
        );
        assert!(!seen.observe(Event::Apply(host("a", 1, "101", true))));
        assert!(
            seen.observe(Event::Apply(host("a", 2, "101", true))),
            "spec changed"
        );
        assert!(
            seen.observe(Event::Apply(host("c", 1, "300", true))),
            "a new host"
        );
        assert!(
            seen.observe(Event::Delete(host("c", 1, "300", true))),
            "gone"
        );
        let mut annotated = host("b", 1, "200", true);
        annotated
            .annotations_mut()
            .insert("baremetalhost.metal3.io/detached".into(), String::new());
        assert!(seen.observe(Event::Apply(annotated)), "detached");
    }

    #[test]
    fn a_relist_after_a_broken_watch_reports_only_what_changed() {
        let mut seen = listed(&[host("a", 1, "100", true), host("b", 1, "200", true)]);
        assert!(!seen.observe(Event::Init));
        assert!(!seen.observe(Event::InitApply(host("a", 1, "100", false))));
        assert!(
            seen.observe(Event::InitApply(host("b", 1, "201", true))),
            "rotated meanwhile"
        );
        assert!(!seen.observe(Event::InitDone), "nothing gone");
        assert!(!seen.observe(Event::Init));
        assert!(!seen.observe(Event::InitApply(host("a", 1, "100", true))));
        assert!(
            seen.observe(Event::InitDone),
            "b went while the watch was down"
        );
    }
}
