//! BMC credentials kept in Kubernetes Secrets (`password_secret`), read through the API.
//!
//! Loading the inventory cannot read them (there is no cluster yet, and `validate`
//! must work offline), so the loader leaves such a credential *pending*
//! ([`SecretSource::SecretPending`]). [`resolve_secrets`] is called once cluster
//! access exists (`nodefence run` at start-up; `status` and `fence` when a node they
//! act on needs it) and fills every pending credential in place:
//!
//! - each distinct Secret is read once (500 nodes sharing one Secret: one GET);
//! - the password is the value of `password_secret_key` (default `password`), and
//!   with `username_secret_key` the username is read from the same Secret; one
//!   trailing newline is dropped (as `kubectl create secret --from-file` keeps it),
//!   exactly as for `password_file`;
//! - every problem is reported at once, one entry per Secret (and key) naming the
//!   nodes it affects and where the reference is written: Secret not found, key
//!   missing, not UTF-8, empty, more than one line, over the IPMI v2.0 limits for ipmi
//!   nodes, 403 (with the RBAC to add) or any other API failure.
//!
//! Values never appear in a message or in `Debug` output: a filled password is a
//! `SecretString`, problems name the Secret, the key and the nodes only. A credential
//! whose Secret could not be used stays pending, and a pending credential is never
//! given to a driver ([`crate::power::registry::DriverFactory`] refuses it).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use secrecy::SecretString;

use super::credentials::{IPMI_MAX_PASSWORD, IPMI_MAX_USERNAME};
use super::model::{Config, NodeTarget, PowerSource, SecretRef, SecretSource};

/// At most this many Secrets are read at once.
const CONCURRENT_READS: usize = 8;

/// At most this many node names are listed in one problem.
const NODES_SHOWN: usize = 5;

/// What is wrong with a Secret, or with one of its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SecretProblemKind {
    /// The Secret does not exist (404).
    NotFound,
    /// nodefence may not read it (403): RBAC.
    Forbidden,
    /// The API server rejected the client's credentials (401).
    Unauthorized,
    /// Any other failure to read it (API server unreachable, 5xx, ...).
    Unreadable,
    /// The key is not in the Secret's data.
    KeyMissing,
    /// The value is not UTF-8 text.
    NotUtf8,
    /// The value is empty.
    Empty,
    /// The value has more than one line.
    MultiLine,
    /// The value is longer than IPMI v2.0 allows (the node uses driver "ipmi").
    TooLongForIpmi,
}

impl SecretProblemKind {
    /// True when the cluster could not be asked (as opposed to a Secret that was read
    /// and is wrong): worth retrying, not an inventory mistake.
    pub fn is_access(self) -> bool {
        matches!(
            self,
            SecretProblemKind::Forbidden
                | SecretProblemKind::Unauthorized
                | SecretProblemKind::Unreadable
        )
    }
}

/// One problem with one Secret (or one of its keys), and every node it affects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretProblem {
    pub kind: SecretProblemKind,
    /// The Secret's namespace (nodefence's own for a bare name).
    pub namespace: String,
    /// The Secret's name.
    pub name: String,
    /// The key concerned; `None` when the Secret itself could not be read.
    pub key: Option<String>,
    /// The nodes whose credential is affected, sorted.
    pub nodes: Vec<String>,
    /// Where `password_secret` is written (`file:line:column`; the first place when
    /// several name the same Secret).
    pub written_at: String,
    /// What is wrong. Never contains a value.
    pub message: String,
    /// How to fix it.
    pub help: Option<String>,
}

impl fmt::Display for SecretProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.written_at.is_empty() {
            write!(f, "{}: ", self.written_at)?;
        }
        let quoted: Vec<String> = self
            .nodes
            .iter()
            .take(NODES_SHOWN)
            .map(|n| format!("\"{n}\""))
            .collect();
        match self.nodes.len() {
            0 => {}
            1 => write!(f, "node {}: ", quoted.join(""))?,
            n if n <= NODES_SHOWN => write!(f, "nodes {}: ", quoted.join(", "))?,
            n => write!(
                f,
                "nodes {} and {} more: ",
                quoted.join(", "),
                n - NODES_SHOWN
            )?,
        }
        f.write_str(&self.message)?;
        if let Some(help) = &self.help {
            write!(f, "\n  help: {help}")?;
        }
        Ok(())
    }
}

/// Every problem found while reading the inventory's Secrets. The credentials
/// concerned stay pending; all others were filled in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SecretResolveError {
    pub problems: Vec<SecretProblem>,
}

impl SecretResolveError {
    /// True when some Secret could not be read at all (RBAC, credentials, network), as
    /// opposed to Secrets that were read but hold the wrong thing.
    pub fn is_access(&self) -> bool {
        self.problems.iter().any(|p| p.kind.is_access())
    }
}

impl fmt::Display for SecretResolveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

/// The Secrets credentials were read from: each by namespace and name, with a digest
/// of its data as read. The daemon watches them ([`crate::daemon`]'s reloader) and
/// reads the configuration again when one no longer holds what was read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecretsRead(BTreeMap<(String, String), DataDigest>);

impl SecretsRead {
    /// The digest of what was read from `namespace/name`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<DataDigest> {
        self.0
            .get(&(namespace.to_string(), name.to_string()))
            .copied()
    }

    /// Every Secret read, `(namespace, name)`, sorted.
    pub fn iter(&self) -> impl Iterator<Item = (&(String, String), &DataDigest)> {
        self.0.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Only the Secrets `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(&str, &str) -> bool) {
        self.0.retain(|(ns, name), _| keep(ns, name));
    }

    /// Records `namespace/name` as read with `digest`.
    pub fn insert(&mut self, namespace: &str, name: &str, digest: DataDigest) {
        self.0
            .insert((namespace.to_string(), name.to_string()), digest);
    }
}

/// SHA-256 of a Secret's data: every key and value, in key order, each
/// length-prefixed. Compared, never shown (`Debug` prints no bytes).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct DataDigest([u8; 32]);

impl DataDigest {
    pub fn of(data: &BTreeMap<String, ByteString>) -> Self {
        use sha2::{Digest as _, Sha256};
        let mut hash = Sha256::new();
        for (key, value) in data {
            hash.update((key.len() as u64).to_le_bytes());
            hash.update(key.as_bytes());
            hash.update((value.0.len() as u64).to_le_bytes());
            hash.update(&value.0);
        }
        DataDigest(hash.finalize().into())
    }
}

impl fmt::Debug for DataDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DataDigest(..)")
    }
}

/// A Secret's data, or why it could not be read (kind, message, help).
type Fetched = Result<BTreeMap<String, ByteString>, (SecretProblemKind, String, Option<String>)>;

/// Reads every Kubernetes Secret the inventory's pending credentials name (each once)
/// and fills those credentials in. `namespace` is nodefence's own namespace, where a
/// bare `password_secret = "<name>"` is looked up. Without pending credentials nothing
/// is read. On error every problem is listed; the credentials it concerns stay
/// pending, all others are filled. Returns what each Secret held ([`SecretsRead`]).
pub async fn resolve_secrets(
    config: &mut Config,
    client: &Client,
    namespace: &str,
) -> Result<SecretsRead, SecretResolveError> {
    let wanted: BTreeSet<(String, String)> = config
        .inventory
        .nodes
        .values()
        .flat_map(|t| t.pending_secrets())
        .map(|r| (namespace_of(r, namespace), r.name.clone()))
        .collect();
    if wanted.is_empty() {
        return Ok(SecretsRead::default());
    }
    let fetched: BTreeMap<(String, String), Fetched> = futures::stream::iter(wanted)
        .map(|(ns, name)| async move {
            let result = fetch(client, &ns, &name).await;
            ((ns, name), result)
        })
        .buffer_unordered(CONCURRENT_READS)
        .collect()
        .await;
    fill(config, &fetched, namespace)?;
    let mut read = SecretsRead::default();
    for ((ns, name), data) in &fetched {
        if let Ok(data) = data {
            read.insert(ns, name, DataDigest::of(data));
        }
    }
    Ok(read)
}

fn namespace_of(r: &SecretRef, default: &str) -> String {
    r.namespace.clone().unwrap_or_else(|| default.to_string())
}

/// One GET of one Secret.
async fn fetch(client: &Client, namespace: &str, name: &str) -> Fetched {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    match api.get(name).await {
        Ok(secret) => Ok(secret.data.unwrap_or_default()),
        Err(e) => Err(classify(&e, namespace, name)),
    }
}

/// Why a Secret could not be read, as kind, message and help. kube's errors carry no
/// Secret data (a failed GET returns none).
fn classify(
    e: &kube::Error,
    namespace: &str,
    name: &str,
) -> (SecretProblemKind, String, Option<String>) {
    let secret = format!("Secret {namespace}/{name}");
    match e {
        kube::Error::Api(status) if status.code == 404 => (
            SecretProblemKind::NotFound,
            format!("{secret} does not exist (password_secret)"),
            Some(format!(
                "create it, e.g. kubectl -n {namespace} create secret generic {name} \
                 --from-file=password=./bmc-password, or correct password_secret (a bare name \
                 is looked up in nodefence's own namespace; write \"<namespace>/<name>\" for \
                 another)"
            )),
        ),
        kube::Error::Api(status) if status.code == 403 => (
            SecretProblemKind::Forbidden,
            format!("{secret} may not be read: the API server answered 403 Forbidden"),
            Some(format!(
                "grant `get` on this Secret to nodefence's service account with a Role and \
                 RoleBinding in namespace {namespace} (deploy/rbac.yaml: the nodefence-secrets \
                 Role, which lists the Secrets it may read under resourceNames); `status` and \
                 `fence` read it with your own kubeconfig's permissions"
            )),
        ),
        kube::Error::Api(status) if status.code == 401 => (
            SecretProblemKind::Unauthorized,
            format!(
                "{secret} cannot be read: the API server rejected the client's credentials (401 Unauthorized)"
            ),
            Some("check the kubeconfig (--kubeconfig) or the service account token".into()),
        ),
        kube::Error::Api(status) => (
            SecretProblemKind::Unreadable,
            format!(
                "{secret} cannot be read: the API server answered {} {}",
                status.code, status.reason
            ),
            None,
        ),
        other => (
            SecretProblemKind::Unreadable,
            format!("{secret} cannot be read: {other}"),
            Some("check that the Kubernetes API server is reachable (--kubeconfig)".into()),
        ),
    }
}

/// Collects problems, one per (kind, Secret, key), with the nodes each affects.
#[derive(Default)]
struct Problems(BTreeMap<(SecretProblemKind, String, String, Option<String>), SecretProblem>);

impl Problems {
    fn add(
        &mut self,
        kind: SecretProblemKind,
        namespace: &str,
        r: &SecretRef,
        key: Option<&str>,
        node: &str,
        message: impl FnOnce() -> (String, Option<String>),
    ) {
        let id = (
            kind,
            namespace.to_string(),
            r.name.clone(),
            key.map(str::to_string),
        );
        let entry = self.0.entry(id).or_insert_with(|| {
            let (message, help) = message();
            SecretProblem {
                kind,
                namespace: namespace.to_string(),
                name: r.name.clone(),
                key: key.map(str::to_string),
                nodes: Vec::new(),
                written_at: r.written_at.clone(),
                message,
                help,
            }
        });
        entry.nodes.push(node.to_string());
    }
}

/// Fills every pending credential whose Secret was read and holds usable values.
fn fill(
    config: &mut Config,
    fetched: &BTreeMap<(String, String), Fetched>,
    default_ns: &str,
) -> Result<(), SecretResolveError> {
    let mut problems = Problems::default();
    // Every power method of every node: its own, then its fallback entries.
    let sources = config
        .inventory
        .nodes
        .iter_mut()
        .flat_map(|(node, target)| {
            let NodeTarget {
                power, fallback, ..
            } = target;
            std::iter::once(power)
                .chain(fallback.iter_mut())
                .map(move |source| (node, source))
        });
    for (node, source) in sources {
        let ipmi = matches!(source, PowerSource::Ipmi(_));
        let Some(credential) = source.credential_mut() else {
            continue;
        };
        let SecretSource::SecretPending(r) = &credential.source else {
            continue;
        };
        let ns = namespace_of(r, default_ns);
        let data = match fetched.get(&(ns.clone(), r.name.clone())) {
            Some(Ok(data)) => data,
            Some(Err((kind, message, help))) => {
                problems.add(*kind, &ns, r, None, node, || {
                    (message.clone(), help.clone())
                });
                continue;
            }
            // Every pending Secret was fetched; should that ever fail, say so rather
            // than leave a credential pending without a word.
            None => {
                problems.add(SecretProblemKind::Unreadable, &ns, r, None, node, || {
                    (
                        format!("internal: Secret {ns}/{} was not read", r.name),
                        None,
                    )
                });
                continue;
            }
        };
        let secret = format!("Secret {ns}/{}", r.name);
        let mut read = |key: &str, setting: &str, limit: Option<(usize, &str)>| match value(
            data, key,
        ) {
            Ok(v) => match limit {
                Some((max, what)) if ipmi && v.len() > max => {
                    problems.add(SecretProblemKind::TooLongForIpmi, &ns, r, Some(key), node, || {
                            (
                                format!(
                                    "the {what} in key \"{key}\" ({setting}) of {secret} is longer than \
                                     IPMI v2.0 allows ({max} bytes; used by an ipmi node)"
                                ),
                                Some(format!(
                                    "set a {what} of at most {max} bytes on the BMC and in the Secret, \
                                     or use another Secret for the ipmi nodes"
                                )),
                            )
                        });
                    None
                }
                _ => Some(v),
            },
            Err(kind) => {
                problems.add(kind, &ns, r, Some(key), node, || {
                    value_problem(kind, data, &secret, key, setting)
                });
                None
            }
        };
        let password = read(
            &r.password_key,
            "password_secret_key",
            Some((IPMI_MAX_PASSWORD, "password")),
        );
        let username = match &r.username_key {
            Some(key) => read(
                key,
                "username_secret_key",
                Some((IPMI_MAX_USERNAME, "username")),
            )
            .map(Some),
            None => Some(None),
        };
        let (Some(password), Some(username)) = (password, username) else {
            continue;
        };
        let mut resolved = r.clone();
        resolved.namespace = Some(ns);
        if let Some(username) = username {
            credential.username = username;
        }
        credential.password = SecretString::from(password);
        credential.source = SecretSource::Secret(resolved);
    }
    let mut problems: Vec<SecretProblem> = problems.0.into_values().collect();
    if problems.is_empty() {
        return Ok(());
    }
    problems.sort_by(|a, b| (&a.written_at, &a.nodes).cmp(&(&b.written_at, &b.nodes)));
    Err(SecretResolveError { problems })
}

/// One key's value as one line of text (one trailing newline dropped).
fn value(data: &BTreeMap<String, ByteString>, key: &str) -> Result<String, SecretProblemKind> {
    let bytes = data.get(key).ok_or(SecretProblemKind::KeyMissing)?;
    let text = std::str::from_utf8(&bytes.0).map_err(|_| SecretProblemKind::NotUtf8)?;
    let text = text
        .strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(text);
    if text.is_empty() {
        return Err(SecretProblemKind::Empty);
    }
    if text.contains(['\n', '\r']) {
        return Err(SecretProblemKind::MultiLine);
    }
    Ok(text.to_string())
}

/// Message and help for a value that cannot be used. Names keys, never values.
fn value_problem(
    kind: SecretProblemKind,
    data: &BTreeMap<String, ByteString>,
    secret: &str,
    key: &str,
    setting: &str,
) -> (String, Option<String>) {
    let at = format!("key \"{key}\" ({setting}) of {secret}");
    match kind {
        SecretProblemKind::KeyMissing => {
            let keys: Vec<&str> = data.keys().map(String::as_str).collect();
            let help = if keys.is_empty() {
                "the Secret has no data; add the key to it".to_string()
            } else {
                format!(
                    "the Secret's keys are: {}; set {setting} to the one that holds the value, \
                     or add \"{key}\" to the Secret",
                    keys.join(", ")
                )
            };
            (
                format!("{secret} has no key \"{key}\" ({setting})"),
                Some(help),
            )
        }
        SecretProblemKind::NotUtf8 => (
            format!("{at} is not UTF-8 text"),
            Some("store the value as text (kubectl create secret generic --from-literal or --from-file)".into()),
        ),
        SecretProblemKind::Empty => (
            format!("{at} is empty"),
            Some("store the BMC credential in it".into()),
        ),
        SecretProblemKind::MultiLine => (
            format!("{at} has more than one line"),
            Some("put only the value in it, on one line (one trailing newline is fine)".into()),
        ),
        _ => (format!("{at} cannot be used"), None),
    }
}

#[cfg(test)]
mod tests;
