//! Builds a [`PowerDriver`] for each inventory node.
//!
//! HTTP clients are shared between BMCs with the same TLS profile, so connections and
//! TLS sessions are pooled per host and a 500-node inventory does not build 500 TLS
//! stacks. One semaphore bounds the requests in flight towards all BMCs together.
//!
//! This is the one place drivers are built from the inventory, so it is where a
//! credential whose Kubernetes Secret has not been read yet is turned away.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;

use super::aws::AwsDriver;
use super::confirm::ConfirmPolicy;
use super::exec::ExecDriver;
use super::ipmi::IpmiDriver;
use super::kubevirt::KubevirtDriver;
use super::kubevirt::api::{InfraClient, InfraProfile};
use super::redfish::RedfishDriver;
use super::topology::TopologyDriver;
use super::vsphere::VsphereDriver;
use super::{PowerDriver, PowerError};
use crate::config::{NodeTarget, PowerSource, TlsSettings};
use crate::metal3::power::{KubeHosts, Metal3Driver};

/// Each inventory node's driver, or why it has none (kept so the reason can be shown).
pub type NodeDrivers = std::collections::BTreeMap<String, Result<Arc<dyn PowerDriver>, PowerError>>;

/// Key of a shared HTTP client.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ClientProfile {
    tls: TlsSettings,
    connect_timeout: Duration,
}

/// Makes drivers; keeps the shared clients and the concurrency bound.
pub struct DriverFactory {
    limiter: Arc<Semaphore>,
    clients: Mutex<HashMap<ClientProfile, reqwest::Client>>,
    /// vSphere sessions, one per endpoint and user: one login for every VM behind it.
    vsphere: Mutex<Vec<(TlsSettings, Arc<super::vsphere::session::Session>)>>,
    /// KubeVirt infrastructure clusters' clients, one per kubeconfig and context.
    infra: Mutex<HashMap<InfraProfile, Arc<InfraClient>>>,
    /// How a fencing topology's levels prove their power off.
    confirm: ConfirmPolicy,
    /// Cluster access for machines whose power Metal3 manages
    /// ([`NodeTarget::metal3_host`]).
    metal3: Option<kube::Client>,
}

impl DriverFactory {
    /// `max_concurrent_requests`: requests in flight towards all BMCs together.
    pub fn new(max_concurrent_requests: usize) -> Self {
        Self {
            limiter: Arc::new(Semaphore::new(max_concurrent_requests.max(1))),
            clients: Mutex::new(HashMap::new()),
            vsphere: Mutex::new(Vec::new()),
            infra: Mutex::new(HashMap::new()),
            confirm: ConfirmPolicy::default(),
            metal3: None,
        }
    }

    /// Power through Metal3 for the nodes whose BareMetalHost Metal3 manages, with
    /// this client.
    pub fn with_metal3(mut self, client: kube::Client) -> Self {
        self.metal3 = Some(client);
        self
    }

    /// How each level of a fencing topology (a node with `fallback`) proves its power
    /// off before the next level is tried: `[power.confirm]` of `nodefence.toml`.
    pub fn with_confirm(mut self, confirm: ConfirmPolicy) -> Self {
        self.confirm = confirm;
        self
    }

    /// A driver for `node`, or an error that names what is missing. A credential
    /// still waiting for its Kubernetes Secret is refused: no BMC is ever sent an
    /// empty password.
    pub fn driver(&self, node: &NodeTarget) -> Result<Arc<dyn PowerDriver>, PowerError> {
        if let Some(secret) = node.pending_secret() {
            return Err(PowerError::config(format!(
                "node {}: the BMC password is in {secret}, which has not been read: that \
                 needs cluster access (`nodefence run` reads it at start-up; `status` and \
                 `fence` read it through --kubeconfig and --namespace), and nodefence must \
                 be allowed to get it",
                node.name
            )));
        }
        let direct = self.direct(node)?;
        let Some(host) = &node.metal3_host else {
            return Ok(direct);
        };
        // Metal3 manages this machine's power: a direct power-off would be undone by
        // Ironic's power sync.
        let Some(client) = &self.metal3 else {
            return Err(PowerError::config(format!(
                "node {}: its power is managed by Metal3 (BareMetalHost {host}), which needs                  cluster access (`nodefence run` has it; `status` and `fence` use                  --kubeconfig); a direct power-off would be undone by Ironic's power sync",
                node.name
            )));
        };
        Ok(Arc::new(Metal3Driver::new(
            direct,
            host.clone(),
            Arc::new(KubeHosts::new(client.clone())),
        )))
    }

    /// The node's own power methods: its driver, or a fencing topology.
    fn direct(&self, node: &NodeTarget) -> Result<Arc<dyn PowerDriver>, PowerError> {
        if node.fallback.is_empty() {
            return self.source_driver(&node.name, &node.power);
        }
        let levels = node
            .sources()
            .enumerate()
            .map(|(i, source)| {
                self.source_driver(&node.name, source).map_err(|e| {
                    let which = if i == 0 {
                        "primary method".to_string()
                    } else {
                        format!("fallback {i}")
                    };
                    PowerError::new(e.kind, format!("{which}: {}", e.message))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        TopologyDriver::new(levels, self.confirm)
            .map(|t| Arc::new(t) as Arc<dyn PowerDriver>)
            .ok_or_else(|| PowerError::config(format!("node {}: no power method", node.name)))
    }

    /// The driver of one power method of node `name` (its own or a fallback entry).
    fn source_driver(
        &self,
        name: &str,
        source: &PowerSource,
    ) -> Result<Arc<dyn PowerDriver>, PowerError> {
        match source {
            PowerSource::Redfish(target) => {
                let client = self.client(&ClientProfile {
                    tls: target.tls.clone(),
                    connect_timeout: target.timeouts.connect,
                })?;
                Ok(Arc::new(RedfishDriver::new(
                    target,
                    client,
                    self.limiter.clone(),
                )))
            }
            PowerSource::Ipmi(target) => {
                let driver = IpmiDriver::new(target, self.limiter.clone())
                    .map_err(|e| PowerError::new(e.kind, format!("node {name}: {}", e.message)))?;
                Ok(Arc::new(driver))
            }
            PowerSource::Exec(target) => {
                let driver = ExecDriver::new(target, self.limiter.clone())
                    .map_err(|e| PowerError::new(e.kind, format!("node {name}: {}", e.message)))?;
                Ok(Arc::new(driver))
            }
            PowerSource::Aws(target) => {
                // AWS itself has public certificates; an `endpoint` override may not.
                let client = self.client(&ClientProfile {
                    tls: target.tls.clone(),
                    connect_timeout: target.timeouts.connect,
                })?;
                Ok(Arc::new(AwsDriver::new(
                    target,
                    client,
                    self.limiter.clone(),
                )))
            }
            PowerSource::Vsphere(target) => {
                let client = self.client(&ClientProfile {
                    tls: target.tls.clone(),
                    connect_timeout: target.timeouts.connect,
                })?;
                let mut sessions = self
                    .vsphere
                    .lock()
                    .map_err(|_| PowerError::config("internal: session cache poisoned"))?;
                let session = match sessions.iter().find(|(tls, s)| {
                    *tls == target.tls
                        && s.serves(&target.endpoint, &target.credential, &target.timeouts)
                }) {
                    Some((_, s)) => s.clone(),
                    None => {
                        let session = Arc::new(
                            super::vsphere::session::Session::new(
                                client,
                                &target.endpoint,
                                target.credential.clone(),
                                target.timeouts,
                                self.limiter.clone(),
                            )
                            .map_err(|e| {
                                PowerError::new(e.kind, format!("node {name}: {}", e.message))
                            })?,
                        );
                        sessions.push((target.tls.clone(), session.clone()));
                        session
                    }
                };
                Ok(Arc::new(VsphereDriver::with_session(target, session)))
            }
            PowerSource::Kubevirt(target) => {
                let profile = InfraProfile {
                    kubeconfig: target.kubeconfig.clone(),
                    context: target.context.clone(),
                    timeouts: target.timeouts,
                };
                let infra = {
                    let mut infra = self
                        .infra
                        .lock()
                        .map_err(|_| PowerError::config("internal: client cache poisoned"))?;
                    infra
                        .entry(profile.clone())
                        .or_insert_with(|| {
                            Arc::new(InfraClient::new(profile, self.limiter.clone()))
                        })
                        .clone()
                };
                Ok(Arc::new(KubevirtDriver::new(target, infra)))
            }
        }
    }

    fn client(&self, profile: &ClientProfile) -> Result<reqwest::Client, PowerError> {
        let mut clients = self
            .clients
            .lock()
            .map_err(|_| PowerError::config("internal: HTTP client cache poisoned"))?;
        if let Some(client) = clients.get(profile) {
            return Ok(client.clone());
        }
        let client = build_client(profile)?;
        clients.insert(profile.clone(), client.clone());
        Ok(client)
    }
}

/// How long an idle connection to a BMC is kept for the next request (the pool's
/// reaper runs at this interval, so one lives up to twice as long).
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(2);

fn build_client(profile: &ClientProfile) -> Result<reqwest::Client, PowerError> {
    let builder = reqwest::Client::builder()
        .user_agent(crate::cluster::USER_AGENT)
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(profile.connect_timeout)
        // Long enough to keep a connection between the readings that prove Off (1 s
        // apart), short enough that a BMC monitor pass over thousands of BMCs (every
        // 5 min by default: it never reuses a connection) does not hold one open TLS
        // connection per BMC: about 35 KB each, 220 MiB of the daemon's memory at
        // 5,000 nodes with 60 s, 12 MiB with 10 s, about 3 MiB with 2 s (the pass
        // opens 33 a second). Readings 5 s apart (a machine still On) open a new
        // connection; the Redfish session is kept.
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .pool_max_idle_per_host(2)
        .tcp_keepalive(Duration::from_secs(30));
    // nodefence's own verifier (src/tls): a BMC's self-signed certificate can be
    // trusted as itself, pins work, and a refusal says which check failed.
    let tls = crate::tls::client_config(&profile.tls).map_err(|e| PowerError::config(e.0))?;
    builder
        .use_preconfigured_tls(tls)
        .build()
        .map_err(|e| PowerError::config(format!("cannot build the HTTP client: {e}")))
}
