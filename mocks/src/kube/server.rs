//! Starting and stopping a fake API server, and the handle tests steer it with.
//!
//! [`FakeKube`] is the builder (TLS, token, shared store, listen address);
//! [`FakeKube::start`] binds (port 0 by default, so tests run in parallel), creates
//! the namespaces every cluster has, serves in the background, and returns a
//! [`FakeKubeHandle`] that knows the URL, the CA and the token, writes kubeconfigs,
//! exposes the [`Store`] (for the simulation and for assertions) and records every
//! request. Dropping the handle stops the server; [`FakeKubeHandle::shutdown`] also
//! ends every watch and waits.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use serde_json::json;
use tokio::sync::watch as signal;
use tokio::task::JoinHandle;

use super::admin::{self, AdminHook};
use super::aggregated::{self, AggregatedApi};
use super::crd;
use super::kubeconfig;
use super::resources::NAMESPACES;
use super::routes;
use super::store::Store;
use super::strategy;
use super::watch::WatchContext;
use crate::tls::{TlsError, TlsMaterial, base_url, generate_material};

/// The namespaces a new cluster has.
pub const SYSTEM_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-node-lease", "kube-public"];

/// How many requests the log keeps (the oldest are dropped beyond this).
pub const REQUEST_LOG_LIMIT: usize = 100_000;

/// How often watches with `allowWatchBookmarks=true` get a BOOKMARK by default.
pub const DEFAULT_BOOKMARK_INTERVAL: Duration = Duration::from_secs(10);

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("TLS setup: {0}")]
    Tls(#[from] TlsError),
}

/// One request as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    pub method: String,
    pub path_and_query: String,
    pub status: u16,
    /// The restricted identity that sent it (see [`FakeKube::identity`]), or `None`
    /// for the main token (and unauthenticated requests).
    pub user: Option<String>,
}

/// A second bearer token whose requests are authorized by RBAC, as a
/// ServiceAccount's would be.
#[derive(Debug, Clone)]
pub struct Identity {
    pub token: String,
    /// The user name the API server would report (`system:serviceaccount:NS:NAME`).
    pub user: String,
    pub policy: super::authz::Policy,
}

/// A projected ServiceAccount token bound to a pod and its node, with its audiences:
/// what the kubelet mounts from a `serviceAccountToken` volume source. A TokenReview
/// reports it as the real API server does (`status.audiences`, the pod and node in
/// `status.user.extra`); it is not accepted on the API itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundToken {
    pub token: String,
    /// `system:serviceaccount:NS:NAME`.
    pub user: String,
    pub audiences: Vec<String>,
    /// The pod it is bound to: name, uid.
    pub pod: Option<(String, String)>,
    /// The pod's node: name, uid (`ServiceAccountTokenPodNodeInfo`, on from 1.30).
    pub node: Option<(String, String)>,
}

/// The API server's own audience, which a TokenReview asking for none is checked
/// against.
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// State shared by every request handler.
pub(crate) struct Shared {
    pub store: Store,
    pub token: String,
    /// `host:port`, for `/api`'s `serverAddressByClientCIDRs`.
    pub server_address: String,
    pub watch: WatchContext,
    pub admin: Option<Arc<dyn AdminHook>>,
    /// Restricted identities, by token.
    pub identities: Vec<Identity>,
    /// Bound tokens issued so far ([`FakeKubeHandle::issue_token`]).
    pub bound: Mutex<Vec<BoundToken>>,
    /// The custom resource types of the store's CRDs.
    crds: crd::Cache,
    /// Group-versions served by other programs behind the aggregator.
    pub aggregated: Vec<aggregated::Registration>,
    log: Mutex<Vec<RequestRecord>>,
}

impl Shared {
    /// The restricted identity a token belongs to.
    pub fn identity(&self, token: &str) -> Option<&Identity> {
        self.identities.iter().find(|i| i.token == token)
    }

    /// The custom resource types served now (rebuilt only after a CRD write).
    pub fn registry(&self) -> Arc<crd::Registry> {
        self.crds.get(&self.store)
    }

    pub fn log_request(&self, method: &str, path_and_query: &str, status: u16, user: Option<&str>) {
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        if log.len() >= REQUEST_LOG_LIMIT {
            log.drain(..REQUEST_LOG_LIMIT / 10);
        }
        log.push(RequestRecord {
            method: method.to_owned(),
            path_and_query: path_and_query.to_owned(),
            status,
            user: user.map(str::to_owned),
        });
    }

    pub fn requests(&self) -> Vec<RequestRecord> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn clear_requests(&self) {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

/// A fake API server, being configured. Start it with [`FakeKube::start`].
#[derive(Clone)]
pub struct FakeKube {
    tls: bool,
    tls_material: Option<TlsMaterial>,
    token: Option<String>,
    store: Option<Store>,
    listen: SocketAddr,
    bookmark_interval: Duration,
    admin: Option<Arc<dyn AdminHook>>,
    identities: Vec<Identity>,
    aggregated: Vec<aggregated::Registration>,
}

impl Default for FakeKube {
    fn default() -> Self {
        Self {
            tls: false,
            tls_material: None,
            token: None,
            store: None,
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            bookmark_interval: DEFAULT_BOOKMARK_INTERVAL,
            admin: None,
            identities: Vec::new(),
            aggregated: Vec::new(),
        }
    }
}

impl std::fmt::Debug for FakeKube {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeKube")
            .field("tls", &self.tls)
            .field("listen", &self.listen)
            .field("shared_store", &self.store.is_some())
            .finish_non_exhaustive()
    }
}

impl FakeKube {
    /// Plain HTTP on `127.0.0.1:0`, a random token, a new store.
    pub fn builder() -> Self {
        Self::default()
    }

    /// Serve HTTPS with a freshly generated CA and leaf (see [`FakeKubeHandle::ca_pem`]).
    pub fn tls(mut self, on: bool) -> Self {
        self.tls = on;
        self
    }

    /// Serve HTTPS with this material instead of generating it (implies `tls(true)`).
    pub fn tls_material(mut self, material: TlsMaterial) -> Self {
        self.tls = true;
        self.tls_material = Some(material);
        self
    }

    /// The bearer token every request (but `/version` and health checks) must carry.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Serve this store (shared with a simulation or a test) instead of a new one.
    pub fn store(mut self, store: Store) -> Self {
        self.store = Some(store);
        self
    }

    /// Listen here instead of `127.0.0.1:0`.
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// How often watches asking for bookmarks get one (default 10 s).
    pub fn bookmark_interval(mut self, every: Duration) -> Self {
        self.bookmark_interval = every.max(Duration::from_millis(10));
        self
    }

    /// Also accept `token`, for a user authorized by `policy` alone: its requests get
    /// `403 Forbidden` (in the real server's words) for anything the policy does not
    /// allow, and its SelfSubjectAccessReviews are answered from the policy.
    pub fn identity(
        mut self,
        token: impl Into<String>,
        user: impl Into<String>,
        policy: super::authz::Policy,
    ) -> Self {
        self.identities.push(Identity {
            token: token.into(),
            user: user.into(),
            policy,
        });
        self
    }

    /// Serve `/admin/...` with this hook (the simulation's controls).
    pub fn admin(mut self, hook: Arc<dyn AdminHook>) -> Self {
        self.admin = Some(hook);
        self
    }

    /// Serves `/apis/{group}/{version}` with `api`, as kube-apiserver's aggregator
    /// serves an APIService (KubeVirt's `subresources.kubevirt.io/v1` is virt-api):
    /// requests are authenticated, logged and authorized (RBAC from the path, as for
    /// any resource) here, then answered by `api`; discovery lists the group. A
    /// group-version registered twice is served by the first.
    pub fn aggregated_api(
        mut self,
        group: impl Into<String>,
        version: impl Into<String>,
        api: Arc<dyn AggregatedApi>,
    ) -> Self {
        self.aggregated.push(aggregated::Registration {
            group: group.into(),
            version: version.into(),
            api,
        });
        self
    }

    /// Binds, creates the system namespaces, serves in the background.
    pub async fn start(self) -> Result<FakeKubeHandle, StartError> {
        let bind_error = |source| StartError::Bind {
            addr: self.listen,
            source,
        };
        let listener = std::net::TcpListener::bind(self.listen).map_err(bind_error)?;
        listener.set_nonblocking(true).map_err(bind_error)?;
        let addr = listener.local_addr().map_err(bind_error)?;
        let material = match (&self.tls_material, self.tls) {
            (Some(m), _) => Some(m.clone()),
            (None, true) => Some(generate_material(addr.ip())?),
            (None, false) => None,
        };
        let base_url = base_url(addr, material.is_some());
        let (shared, app, shutdown_tx) = self.serve(addr.to_string());
        let tls = material
            .as_ref()
            .map(TlsMaterial::server_config)
            .transpose()?;
        let (server, task) = crate::serve::spawn(listener, app, tls).map_err(bind_error)?;
        tracing::info!(%base_url, "fake-kube started");
        Ok(FakeKubeHandle {
            shared,
            addr,
            base_url,
            ca_pem: material.map(|m| m.ca_pem().to_owned()),
            server,
            shutdown_tx,
            task: Some(task),
        })
    }
}

impl FakeKube {
    /// The server's state (a new store unless one was given, with the system
    /// namespaces), its routes, and the switch that ends every watch.
    fn serve(&self, server_address: String) -> (Arc<Shared>, Router, signal::Sender<bool>) {
        let store = self.store.clone().unwrap_or_default();
        create_system_namespaces(&store);
        let token = self
            .token
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
        let (shutdown_tx, shutdown_rx) = signal::channel(false);
        let shared = Arc::new(Shared {
            store: store.clone(),
            token,
            server_address,
            watch: WatchContext {
                store,
                shutdown: shutdown_rx,
                bookmark_interval: self.bookmark_interval,
            },
            admin: self.admin.clone(),
            identities: self.identities.clone(),
            bound: Mutex::new(Vec::new()),
            crds: crd::Cache::default(),
            aggregated: self.aggregated.clone(),
            log: Mutex::new(Vec::new()),
        });
        let router = Router::new()
            .merge(admin::router())
            .fallback(routes::handle)
            .with_state(shared.clone());
        (shared, router, shutdown_tx)
    }

    /// Serves in this process without a socket: a [`Router`] (a tower `Service`) that a
    /// `kube::Client` can be built on directly. The whole-system simulation uses it so
    /// that the daemon, the API server and its simulated kubelets share one thread and
    /// tokio's paused time. Requests must still carry `Authorization: Bearer <token>`.
    pub fn in_process(self) -> InProcessKube {
        let (shared, router, shutdown_tx) = self.serve("in-process".to_string());
        InProcessKube {
            shared,
            router,
            shutdown_tx,
        }
    }
}

/// A fake API server served in this process (see [`FakeKube::in_process`]). Dropping
/// it ends every watch.
pub struct InProcessKube {
    shared: Arc<Shared>,
    router: Router,
    shutdown_tx: signal::Sender<bool>,
}

impl std::fmt::Debug for InProcessKube {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcessKube").finish_non_exhaustive()
    }
}

impl InProcessKube {
    /// The server, as a tower `Service` (cheap to clone).
    pub fn router(&self) -> Router {
        self.router.clone()
    }

    /// The bearer token requests must carry.
    pub fn token(&self) -> String {
        self.shared.token.clone()
    }

    /// The objects it serves.
    pub fn store(&self) -> Store {
        self.shared.store.clone()
    }

    /// Every request served so far.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.requests()
    }
}

impl Drop for InProcessKube {
    fn drop(&mut self) {
        let _ = self.shutdown_tx.send(true);
    }
}

fn create_system_namespaces(store: &Store) {
    for name in SYSTEM_NAMESPACES {
        if store.get(NAMESPACES, None, name).is_ok() {
            continue;
        }
        let mut ns = json!({"metadata": {"name": name}});
        strategy::prepare_for_create(NAMESPACES, &mut ns);
        if let Err(e) = store.create(NAMESPACES, None, ns) {
            tracing::debug!("namespace {name}: {e}");
        }
    }
}

/// A running fake API server. Dropping it stops the server.
pub struct FakeKubeHandle {
    shared: Arc<Shared>,
    addr: SocketAddr,
    base_url: String,
    ca_pem: Option<String>,
    server: axum_server::Handle<SocketAddr>,
    shutdown_tx: signal::Sender<bool>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl std::fmt::Debug for FakeKubeHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeKubeHandle")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl FakeKubeHandle {
    /// Issues a bound token (a kubelet projecting one into a pod, or rotating it): a
    /// TokenReview then answers for it; one with the same token is replaced.
    pub fn issue_token(&self, token: BoundToken) {
        let mut bound = self.shared.bound.lock().unwrap_or_else(|p| p.into_inner());
        bound.retain(|b| b.token != token.token);
        bound.push(token);
    }

    /// Revokes a bound token (its pod deleted): a TokenReview no longer authenticates it.
    pub fn revoke_token(&self, token: &str) {
        let mut bound = self.shared.bound.lock().unwrap_or_else(|p| p.into_inner());
        bound.retain(|b| b.token != token);
    }

    /// `http://127.0.0.1:PORT` or `https://localhost:PORT`, no trailing slash.
    pub fn base_url(&self) -> String {
        self.base_url.clone()
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The bearer token clients must present.
    pub fn token(&self) -> String {
        self.shared.token.clone()
    }

    /// The CA certificate (PEM) clients must trust; `None` for plain HTTP.
    pub fn ca_pem(&self) -> Option<String> {
        self.ca_pem.clone()
    }

    /// The store behind the server (shared: writes show up in the API at once).
    pub fn store(&self) -> Store {
        self.shared.store.clone()
    }

    /// A kubeconfig for this server (context `fake-kube`, namespace `default`).
    pub fn kubeconfig_yaml(&self) -> String {
        kubeconfig::render(&self.base_url, self.ca_pem.as_deref(), &self.shared.token)
    }

    /// A kubeconfig presenting a restricted identity's token instead.
    pub fn kubeconfig_yaml_for(&self, token: &str) -> String {
        kubeconfig::render(&self.base_url, self.ca_pem.as_deref(), token)
    }

    /// Writes [`Self::kubeconfig_yaml`] to `path` (mode 0600: it holds the token).
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)?;
        file.write_all(self.kubeconfig_yaml().as_bytes())
    }

    /// Every request received (the last [`REQUEST_LOG_LIMIT`]), oldest first:
    /// (method, path and query, status). `/admin` requests are not included.
    pub fn request_log(&self) -> Vec<(String, String, u16)> {
        // (The user of each request is in [`Self::requests`].)
        self.shared
            .requests()
            .into_iter()
            .map(|r| (r.method, r.path_and_query, r.status))
            .collect()
    }

    /// [`Self::request_log`] as records.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.requests()
    }

    /// Empties the request log.
    pub fn clear_request_log(&self) {
        self.shared.clear_requests();
    }

    /// Ends every watch, stops the server (open connections are closed) and waits.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown_tx.send(true);
        self.server.graceful_shutdown(Some(Duration::from_secs(2)));
        if let Some(task) = self.task.take() {
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!("fake-kube ended with an error: {e}"),
                Err(e) => tracing::warn!("fake-kube task failed: {e}"),
            }
        }
    }
}

impl Drop for FakeKubeHandle {
    fn drop(&mut self) {
        let _ = self.shutdown_tx.send(true);
        self.server.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls() {
        let v4 = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 6443);
        assert_eq!(base_url(v4, false), "http://127.0.0.1:6443");
        assert_eq!(base_url(v4, true), "https://localhost:6443");
    }

    #[test]
    fn system_namespaces_are_created_once() {
        let store = Store::default();
        create_system_namespaces(&store);
        let rv = store.resource_version();
        create_system_namespaces(&store);
        assert_eq!(store.resource_version(), rv);
        assert_eq!(store.list(NAMESPACES, None).0.len(), 4);
    }
}
