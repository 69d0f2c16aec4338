//! The operator's reconciler (BMO's `Reconcile`, its state machine and
//! `manageHostPower`) and Ironic (its node records, power actions and power-state
//! sync). See the module documentation of [`super`] for what each follows.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::{
    BareMetalHost, CredentialsStatus, DETACHED_ANNOTATION, HostStatus, PAUSED_ANNOTATION,
    POWER_MANAGEMENT_ERROR, REBOOT_ANNOTATION, REGISTRATION_ERROR, SecretReference, Timing,
    redfish_system, state,
};
use crate::remediation::runtime::{
    Change, TaskGuard, WorkQueue, sleep_until, spawn_informer, spawn_informer_with,
};

/// The label BMO puts on every Secret it uses (`secretutils.LabelEnvironmentName`
/// and `LabelEnvironmentValue`); its Secret cache, and so its watch, sees only those.
pub const SECRET_LABEL: (&str, &str) = ("environment.metal3.io", "baremetal");

/// What the operator's informers report.
enum Watched {
    Host(Box<Change<BareMetalHost>>),
    /// A Secret it claimed changed: the hosts that own it, to reconcile
    /// (`Owns(&corev1.Secret{}, builder.MatchEveryOwner)`).
    SecretOwners(Vec<String>),
}

/// A power state Ironic is asked to reach (`target_power_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    On,
    Off,
    SoftOff,
    /// `disablePowerOff` hosts are rebooted instead of powered off.
    Reboot,
}

impl Target {
    fn reset_type(self) -> &'static str {
        match self {
            Target::On => "On",
            Target::Off => "ForceOff",
            Target::SoftOff => "GracefulShutdown",
            Target::Reboot => "ForceRestart",
        }
    }

    /// The power state the action ends in.
    fn ends_on(self) -> bool {
        matches!(self, Target::On | Target::Reboot)
    }
}

/// Ironic's record of one node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IronicNode {
    pub uuid: String,
    /// `power_state`: `Some(true)` power on, `Some(false)` power off, `None` unknown.
    pub power_state: Option<bool>,
    /// `target_power_state`: an action under way.
    pub target_power_state: Option<Target>,
    pub maintenance: bool,
    /// `last_error` of the last power action.
    pub last_error: Option<String>,
    /// Failed syncs in a row.
    pub sync_failures: u32,
    /// Power actions Ironic took because of the sync (it changed the hardware).
    pub sync_actions: u32,
}

/// How Ironic reaches a node's BMC (its `driver_info`).
#[derive(Clone)]
struct Bmc {
    /// The BMC's base URL and the system's path (`None`: the only system there).
    base: String,
    system_path: Option<String>,
    username: String,
    password: String,
    http: reqwest::Client,
    /// What it was built from, to notice a change.
    address: String,
    insecure: bool,
}

struct Enrolled {
    record: IronicNode,
    bmc: Bmc,
}

/// The running stand-in: the operator and Ironic's sync; both stop when it is dropped.
pub struct Metal3StandIn {
    ironic: Arc<Ironic>,
    _operator: TaskGuard,
    _sync: TaskGuard,
}

impl Metal3StandIn {
    /// Starts the operator for the BareMetalHosts of `namespace`, and Ironic.
    pub fn spawn(client: kube::Client, namespace: &str, timing: Timing) -> Self {
        Self::spawn_trusting(client, namespace, timing, None)
    }

    /// [`Self::spawn`], Ironic trusting `ca_pem` for HTTPS BMCs (besides the system's
    /// roots).
    pub fn spawn_trusting(
        client: kube::Client,
        namespace: &str,
        timing: Timing,
        ca_pem: Option<String>,
    ) -> Self {
        // reqwest's rustls needs a process-wide provider; the mocks use ring.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let ironic = Arc::new(Ironic {
            nodes: Mutex::new(BTreeMap::new()),
            timing,
            ca: ca_pem.and_then(|p| reqwest::Certificate::from_pem(p.as_bytes()).ok()),
        });
        let operator = Operator {
            hosts: Api::namespaced(client.clone(), namespace),
            raw: Api::namespaced_with(
                client.clone(),
                namespace,
                &ApiResource::erase::<BareMetalHost>(&()),
            ),
            secrets: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            timing,
            ironic: ironic.clone(),
        };
        let sync = {
            let ironic = ironic.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(timing.sync_power_state_interval);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    ironic.sync_power_states().await;
                }
            })
        };
        Self {
            ironic,
            _operator: TaskGuard(tokio::spawn(operator.run())),
            _sync: TaskGuard(sync),
        }
    }

    /// Ironic's record of a host's node, if it is enrolled.
    pub fn node(&self, namespace: &str, name: &str) -> Option<IronicNode> {
        self.ironic
            .lock()
            .get(&key(namespace, name))
            .map(|n| n.record.clone())
    }

    /// Stops both loops.
    pub async fn shutdown(self) {
        drop(self);
        tokio::task::yield_now().await;
    }
}

/// Ironic's node name for a host (`ironicNodeName`: namespace~name).
fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}~{name}")
}

// ---------------------------------------------------------------------------------
// Ironic

struct Ironic {
    nodes: Mutex<BTreeMap<String, Enrolled>>,
    timing: Timing,
    ca: Option<reqwest::Certificate>,
}

impl Ironic {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Enrolled>> {
        self.nodes.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn node(&self, key: &str) -> Option<IronicNode> {
        self.lock().get(key).map(|n| n.record.clone())
    }

    fn change(&self, key: &str, f: impl FnOnce(&mut IronicNode)) {
        if let Some(n) = self.lock().get_mut(key) {
            f(&mut n.record);
        }
    }

    fn forget(&self, key: &str) {
        self.lock().remove(key);
    }

    /// Whether `key` is enrolled with this BMC address and these credentials.
    fn enrolled_as(&self, key: &str, address: &str, username: &str, password: &str) -> bool {
        self.lock().get(key).is_some_and(|n| {
            n.bmc.address == address && n.bmc.username == username && n.bmc.password == password
        })
    }

    /// Enrols (or updates) a node: its power interface validated by reading the BMC's
    /// power state, which becomes the node's. Returns the node's UUID.
    async fn enroll(
        &self,
        key: &str,
        address: &str,
        insecure: bool,
        username: &str,
        password: &str,
    ) -> Result<String, String> {
        let (base, system_path) = redfish_system(address)?;
        let mut http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .no_proxy();
        if insecure {
            http = http.tls_danger_accept_invalid_certs(true);
        } else if let Some(ca) = &self.ca {
            http = http.add_root_certificate(ca.clone());
        }
        let http = http
            .build()
            .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
        let bmc = Bmc {
            base,
            system_path,
            username: username.to_owned(),
            password: password.to_owned(),
            http,
            address: address.to_owned(),
            insecure,
        };
        let power = read(&bmc)
            .await
            .map_err(|e| format!("Failed to get power state for node: {e}"))?;
        let mut nodes = self.lock();
        let uuid = match nodes.get_mut(key) {
            Some(n) => {
                n.bmc = bmc;
                n.record.uuid.clone()
            }
            None => {
                let uuid = uuid::Uuid::new_v4().to_string();
                nodes.insert(
                    key.to_owned(),
                    Enrolled {
                        record: IronicNode {
                            uuid: uuid.clone(),
                            power_state: power,
                            ..IronicNode::default()
                        },
                        bmc,
                    },
                );
                uuid
            }
        };
        Ok(uuid)
    }

    /// `node_power_action`, asynchronously as the conductor does it: the target is
    /// set at once; the command, the wait for the BMC and the record follow.
    fn power(self: &Arc<Self>, key: &str, target: Target) {
        let bmc = {
            let mut nodes = self.lock();
            let Some(n) = nodes.get_mut(key) else {
                return;
            };
            n.record.target_power_state = Some(target);
            n.record.last_error = None;
            n.bmc.clone()
        };
        let (ironic, key) = (self.clone(), key.to_owned());
        tokio::spawn(async move {
            let outcome = match reset(&bmc, target.reset_type()).await {
                Err(e) => Err(format!(
                    "Failed to set power state to {}: {e}",
                    target.reset_type()
                )),
                Ok(()) => {
                    let end =
                        tokio::time::Instant::now() + ironic.timing.power_state_change_timeout;
                    loop {
                        if let Ok(Some(on)) = read(&bmc).await
                            && on == target.ends_on()
                        {
                            break Ok(());
                        }
                        if tokio::time::Instant::now() >= end {
                            break Err(format!(
                                "Timed out waiting for a power state change to {}",
                                if target.ends_on() {
                                    "power on"
                                } else {
                                    "power off"
                                }
                            ));
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            };
            ironic.change(&key, |n| {
                n.target_power_state = None;
                match outcome {
                    Ok(()) => n.power_state = Some(target.ends_on()),
                    Err(e) => n.last_error = Some(e),
                }
            });
        });
    }

    /// The conductor's `_sync_power_states`, for every node.
    async fn sync_power_states(&self) {
        let nodes: Vec<(String, IronicNode, Bmc)> = self
            .lock()
            .iter()
            .map(|(k, n)| (k.clone(), n.record.clone(), n.bmc.clone()))
            .collect();
        for (key, node, bmc) in nodes {
            // A node in maintenance, or locked by an action under way, is skipped.
            if node.maintenance || node.target_power_state.is_some() {
                continue;
            }
            let actual = match read(&bmc).await {
                Ok(Some(actual)) => actual,
                Ok(None) => continue,
                Err(_) => {
                    self.sync_failed(&key);
                    continue;
                }
            };
            match node.power_state {
                None => self.change(&key, |n| n.power_state = Some(actual)),
                Some(recorded) if recorded == actual => {
                    self.change(&key, |n| n.sync_failures = 0);
                }
                Some(recorded) => {
                    if node.sync_failures >= self.timing.power_state_sync_max_retries {
                        self.change(&key, |n| {
                            n.power_state = Some(actual);
                            n.maintenance = true;
                            n.sync_failures += 1;
                        });
                    } else if self.timing.force_power_state_during_sync {
                        self.change(&key, |n| {
                            n.sync_failures += 1;
                            n.sync_actions += 1;
                        });
                        let to = if recorded { "On" } else { "ForceOff" };
                        let _ = reset(&bmc, to).await;
                    } else {
                        self.change(&key, |n| n.power_state = Some(actual));
                    }
                }
            }
        }
    }

    /// The BMC could not be read: after more than the retries, maintenance.
    fn sync_failed(&self, key: &str) {
        let max = self.timing.power_state_sync_max_retries;
        self.change(key, |n| {
            n.sync_failures += 1;
            if n.sync_failures > max {
                n.maintenance = true;
            }
        });
    }
}

async fn system_url(bmc: &Bmc) -> Result<String, String> {
    if let Some(path) = &bmc.system_path {
        return Ok(format!("{}{}", bmc.base, path));
    }
    // No system in the address: the BMC's only one (sushy's default system).
    let systems: Value = get(bmc, &format!("{}/redfish/v1/Systems", bmc.base)).await?;
    let members = systems["Members"].as_array().cloned().unwrap_or_default();
    match members.as_slice() {
        [one] => one["@odata.id"]
            .as_str()
            .map(|p| format!("{}{}", bmc.base, p))
            .ok_or_else(|| "a system without @odata.id".to_string()),
        _ => Err(format!(
            "{} systems at {}: the address must name one",
            members.len(),
            bmc.base
        )),
    }
}

async fn get(bmc: &Bmc, url: &str) -> Result<Value, String> {
    bmc.http
        .get(url)
        .basic_auth(&bmc.username, Some(&bmc.password))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())
}

/// The BMC's power state: `Some(true)` On, `Some(false)` Off, `None` in between.
async fn read(bmc: &Bmc) -> Result<Option<bool>, String> {
    let system = get(bmc, &system_url(bmc).await?).await?;
    Ok(match system.get("PowerState").and_then(Value::as_str) {
        Some("On") => Some(true),
        Some("Off") => Some(false),
        _ => None,
    })
}

async fn reset(bmc: &Bmc, reset_type: &str) -> Result<(), String> {
    let url = format!("{}/Actions/ComputerSystem.Reset", system_url(bmc).await?);
    bmc.http
        .post(url)
        .basic_auth(&bmc.username, Some(&bmc.password))
        .json(&json!({ "ResetType": reset_type }))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

// ---------------------------------------------------------------------------------
// The operator

struct Operator {
    hosts: Api<BareMetalHost>,
    /// The same objects untyped, for updates that keep every field.
    raw: Api<DynamicObject>,
    secrets: Api<Secret>,
    namespace: String,
    timing: Timing,
    ironic: Arc<Ironic>,
}

/// What one pass decided (BMO's `actionResult`).
enum Step {
    /// The status changed: save it and come back at once (`actionUpdate`).
    Update,
    /// Come back after this long (`actionContinue`); the status may have changed.
    Continue(Duration),
    /// Nothing more to do until something changes.
    Done,
}

impl Operator {
    async fn run(self) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut informers = JoinSet::new();
        spawn_informer(
            &mut informers,
            self.hosts.clone(),
            format!("BareMetalHosts in {}", self.namespace),
            tx.clone(),
            |c| Watched::Host(Box::new(c)),
        );
        spawn_informer_with(
            &mut informers,
            self.secrets.clone(),
            kube::runtime::watcher::Config::default()
                .labels(&format!("{}={}", SECRET_LABEL.0, SECRET_LABEL.1)),
            format!("Secrets in {}", self.namespace),
            tx,
            |c| Watched::SecretOwners(owning_hosts(&c)),
        );
        let mut queue: WorkQueue<String> = WorkQueue::new();
        loop {
            while let Some(name) = queue.pop() {
                match self.reconcile(&name).await {
                    Ok(after) => {
                        queue.forget(&name);
                        if let Some(d) = after {
                            queue.add_after(name, d);
                        }
                    }
                    Err(e) => {
                        tracing::debug!(host = %name, error = %format!("{e:#}"), "BareMetalHost reconcile failed");
                        let d = queue.next_backoff(&name);
                        queue.add_after(name, d);
                    }
                }
            }
            tokio::select! {
                change = rx.recv() => match change {
                    Some(Watched::Host(c)) => {
                        if let Some(name) = wakes(c.as_ref()) {
                            queue.add(name);
                        }
                    }
                    Some(Watched::SecretOwners(hosts)) => {
                        for name in hosts {
                            queue.add(name);
                        }
                    }
                    None => return,
                },
                () = sleep_until(queue.next_due()) => {}
            }
        }
    }

    /// One `Reconcile`: when to come back.
    async fn reconcile(&self, name: &str) -> anyhow::Result<Option<Duration>> {
        let k = key(&self.namespace, name);
        let Some(host) = self.hosts.get_opt(name).await? else {
            self.ironic.forget(&k);
            return Ok(None);
        };
        if host.annotations().contains_key(PAUSED_ANNOTATION) {
            return Ok(None);
        }
        let before = host.status.clone();
        let mut status = before.clone().unwrap_or_default();
        let step = self.state_machine(&host, &k, &mut status).await?;
        if before.as_ref() != Some(&status) {
            // saveHostStatus: `r.Status().Update`, the whole status replaced, with the
            // resourceVersion read (a conflict fails the reconcile, which is retried).
            let mut saved = host.clone();
            saved.status = Some(status);
            self.hosts
                .replace_status(name, &PostParams::default(), &saved)
                .await
                .with_context(|| format!("failed to save host status of {name}"))?;
        }
        Ok(match step {
            Step::Update => Some(Duration::ZERO),
            Step::Continue(d) => Some(d),
            Step::Done => None,
        })
    }

    /// `hostStateMachine.ReconcileState`.
    async fn state_machine(
        &self,
        host: &BareMetalHost,
        k: &str,
        status: &mut HostStatus,
    ) -> anyhow::Result<Step> {
        let current = status.provisioning.state.clone();
        let has_bmc = host
            .spec
            .bmc
            .as_ref()
            .is_some_and(|b| !b.address.is_empty());
        // handleNone / handleUnmanaged.
        if current == state::NONE || current == state::UNMANAGED {
            if has_bmc {
                status.provisioning.state = state::REGISTERING.into();
            } else {
                status.provisioning.state = state::UNMANAGED.into();
                status.operational_status = "discovered".into();
                return Ok(Step::Done);
            }
            return Ok(Step::Update);
        }
        // checkDetachedHost.
        let steady = [
            state::PROVISIONED,
            state::EXTERNALLY_PROVISIONED,
            state::READY,
            state::AVAILABLE,
        ]
        .contains(&current.as_str());
        if host.annotations().contains_key(DETACHED_ANNOTATION) && steady {
            if status.operational_status != "detached" {
                self.ironic.forget(k);
                status.operational_status = "detached".into();
                return Ok(Step::Update);
            }
            return Ok(Step::Done);
        }
        if status.operational_status == "detached" {
            status.operational_status = if status.error_type.is_empty() {
                "OK".into()
            } else {
                "error".into()
            };
            return Ok(Step::Update);
        }
        // ensureRegistered.
        if let Some(step) = self.ensure_registered(host, k, status).await? {
            return Ok(step);
        }
        let next = |status: &mut HostStatus, to: &str| {
            status.provisioning.state = to.into();
            status.error_count = 0;
            Ok(Step::Update)
        };
        match current.as_str() {
            state::REGISTERING => {
                if host.spec.externally_provisioned {
                    next(status, state::EXTERNALLY_PROVISIONED)
                } else {
                    next(status, state::INSPECTING)
                }
            }
            // No inspection ramdisk, no cleaning: both pass at once.
            state::INSPECTING => next(status, state::PREPARING),
            state::PREPARING => next(status, state::AVAILABLE),
            state::AVAILABLE | state::READY => {
                if host.spec.externally_provisioned {
                    return next(status, state::EXTERNALLY_PROVISIONED);
                }
                if host.spec.image.as_ref().is_some_and(|i| !i.url.is_empty()) {
                    return next(status, state::PROVISIONING);
                }
                self.manage_power(host, k, status).await
            }
            state::PROVISIONING => Ok(self.provision(host, k, status)),
            state::EXTERNALLY_PROVISIONED if !host.spec.externally_provisioned => {
                status.provisioning.image = host.spec.image.clone();
                next(status, state::PROVISIONED)
            }
            state::PROVISIONED | state::EXTERNALLY_PROVISIONED => {
                self.manage_power(host, k, status).await
            }
            _ => Ok(Step::Done),
        }
    }

    /// `ensureRegistered` with `buildAndValidateBMCCredentials` and `registerHost`:
    /// `Some(step)` when registration is what this pass did (or failed at).
    async fn ensure_registered(
        &self,
        host: &BareMetalHost,
        k: &str,
        status: &mut HostStatus,
    ) -> anyhow::Result<Option<Step>> {
        let Some(bmc) = host.spec.bmc.as_ref() else {
            return Ok(None);
        };
        let creds = match self.credentials(host, &bmc.credentials_name).await? {
            Ok(c) => c,
            Err(why) => {
                registration_failed(status, &why);
                return Ok(Some(Step::Continue(self.timing.reconcile)));
            }
        };
        let (username, password, version) = creds;
        let good = CredentialsStatus {
            credentials: SecretReference {
                name: bmc.credentials_name.clone(),
                namespace: self.namespace.clone(),
            },
            credentials_version: version,
        };
        // registerHost: "new credentials detected" as soon as the Secret (or its
        // resourceVersion) differs from the last tried, before they are validated.
        if status.tried_credentials.as_ref() != Some(&good) {
            status.tried_credentials = Some(good.clone());
        }
        let registered = status.error_type != REGISTRATION_ERROR
            && status.good_credentials.as_ref() == Some(&good)
            && self
                .ironic
                .enrolled_as(k, &bmc.address, &username, &password);
        if registered {
            // The insecure flag is part of the driver info too.
            if self
                .ironic
                .lock()
                .get(k)
                .is_some_and(|n| n.bmc.insecure == bmc.disable_certificate_verification)
            {
                return Ok(None);
            }
        }
        match self
            .ironic
            .enroll(
                k,
                &bmc.address,
                bmc.disable_certificate_verification,
                &username,
                &password,
            )
            .await
        {
            Err(why) => {
                registration_failed(status, &why);
                Ok(Some(Step::Continue(self.timing.reconcile)))
            }
            Ok(uuid) => {
                status.provisioning.id = uuid;
                status.good_credentials = Some(good);
                if status.error_type == REGISTRATION_ERROR {
                    clear_error(status);
                }
                if status.operational_status.is_empty() {
                    status.operational_status = "OK".into();
                }
                // The first power state read at enrolment.
                if let Some(on) = self.ironic.node(k).and_then(|n| n.power_state) {
                    status.powered_on = on;
                }
                Ok(Some(Step::Update))
            }
        }
    }

    /// The credentials Secret, claimed for `host` (`AcquireSecret`): username,
    /// password and its resourceVersion; the inner `Err` is BMO's message for a host
    /// that cannot be registered.
    async fn credentials(
        &self,
        host: &BareMetalHost,
        name: &str,
    ) -> anyhow::Result<Result<(String, String, String), String>> {
        if name.is_empty() {
            return Ok(Err("Missing BMC connection detail 'Credentials'".into()));
        }
        let Some(secret) = self.secrets.get_opt(name).await? else {
            return Ok(Err(format!("BMC credentials secret {name} not found")));
        };
        let secret = self.claim(host, secret).await?;
        let field = |k: &str| {
            secret
                .data
                .as_ref()
                .and_then(|d| d.get(k))
                .map(|b| String::from_utf8_lossy(&b.0).trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let (Some(username), Some(password)) = (field("username"), field("password")) else {
            return Ok(Err(format!(
                "Missing BMC connection detail 'username' or 'password' in secret {name}"
            )));
        };
        Ok(Ok((
            username,
            password,
            secret.resource_version().unwrap_or_default(),
        )))
    }

    /// `claimSecret`: the environment label and an owner reference to the host (not
    /// as its controller), written with an update carrying the resourceVersion read,
    /// when either is missing. The finalizer BMO adds once a host is past
    /// registration is left out (with the deletion flow).
    async fn claim(&self, host: &BareMetalHost, mut secret: Secret) -> anyhow::Result<Secret> {
        let labelled =
            secret.labels().get(SECRET_LABEL.0).map(String::as_str) == Some(SECRET_LABEL.1);
        let uid = host.metadata.uid.clone().unwrap_or_default();
        let owned = secret.owner_references().iter().any(|r| r.uid == uid);
        if labelled && owned {
            return Ok(secret);
        }
        secret
            .labels_mut()
            .insert(SECRET_LABEL.0.into(), SECRET_LABEL.1.into());
        if !owned {
            secret.owner_references_mut().push(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    api_version: super::API_VERSION.into(),
                    kind: "BareMetalHost".into(),
                    name: host.name_any(),
                    uid,
                    ..Default::default()
                },
            );
        }
        let name = secret.name_any();
        self.secrets
            .replace(&name, &PostParams::default(), &secret)
            .await
            .with_context(|| format!("failed to update secret {name}"))
    }

    /// `actionProvisioning`, its deploy abbreviated: the host ends powered on.
    fn provision(&self, host: &BareMetalHost, k: &str, status: &mut HostStatus) -> Step {
        let Some(node) = self.ironic.node(k) else {
            return Step::Continue(self.timing.short_retry);
        };
        if node.power_state != Some(true) {
            if node.target_power_state.is_none() {
                self.ironic.power(k, Target::On);
            }
            return Step::Continue(self.timing.short_retry);
        }
        status.provisioning.image = host.spec.image.clone();
        status.provisioning.state = state::PROVISIONED.into();
        status.powered_on = true;
        status.error_count = 0;
        status.provisioning_fail_count = 0;
        Step::Update
    }

    /// `manageHostPower`.
    async fn manage_power(
        &self,
        host: &BareMetalHost,
        k: &str,
        status: &mut HostStatus,
    ) -> anyhow::Result<Step> {
        let Some(node) = self.ironic.node(k) else {
            return Ok(Step::Continue(self.timing.short_retry));
        };
        // UpdateHardwareState: Ironic's record into status.poweredOn.
        if let Some(on) = node.power_state
            && on != status.powered_on
        {
            status.powered_on = on;
            if status.operational_status == "error" && status.error_type == POWER_MANAGEMENT_ERROR {
                clear_error(status);
            }
            return Ok(Step::Update);
        }
        let annotations = host.annotations();
        let provisioned = [state::PROVISIONED, state::EXTERNALLY_PROVISIONED]
            .contains(&status.provisioning.state.as_str());
        // A one-shot reboot is over once the host is off.
        if !status.powered_on && annotations.contains_key(REBOOT_ANNOTATION) {
            self.remove_annotation(host, REBOOT_ANNOTATION).await?;
            return Ok(Step::Continue(Duration::ZERO));
        }
        let (reboot, mut hard) = reboot_annotations(&annotations, !provisioned);
        let desired = host.spec.online && !reboot;
        if status.powered_on == desired {
            return Ok(Step::Continue(self.timing.reconcile));
        }
        let force = status.error_type == POWER_MANAGEMENT_ERROR;
        let target = if desired {
            if node.power_state == Some(true) {
                None
            } else if node.target_power_state == Some(Target::On) {
                return Ok(Step::Continue(self.timing.short_retry));
            } else if let (Some(e), false) = (&node.last_error, force) {
                return Ok(power_failed(
                    status,
                    &format!("PowerOn operation failed: {e}"),
                    self.timing,
                ));
            } else {
                Some(Target::On)
            }
        } else {
            if status.error_count > 0 {
                hard = true;
            }
            if node.power_state == Some(false) {
                None
            } else if matches!(node.target_power_state, Some(Target::Off | Target::SoftOff)) {
                return Ok(Step::Continue(self.timing.short_retry));
            } else if let (Some(e), false, None) =
                (&node.last_error, force, node.target_power_state)
            {
                return Ok(power_failed(status, e, self.timing));
            } else if host.spec.disable_power_off {
                Some(Target::Reboot)
            } else if hard || force {
                Some(Target::Off)
            } else {
                Some(Target::SoftOff)
            }
        };
        match target {
            Some(t) => {
                self.ironic.power(k, t);
                if host.spec.disable_power_off
                    && t == Target::Reboot
                    && annotations.contains_key(REBOOT_ANNOTATION)
                {
                    self.remove_annotation(host, REBOOT_ANNOTATION).await?;
                }
                if status.error_type == POWER_MANAGEMENT_ERROR {
                    clear_error(status);
                }
                Ok(Step::Continue(Duration::ZERO))
            }
            None => {
                // The provisioner had nothing to do.
                status.powered_on = host.spec.online;
                status.error_count = 0;
                Ok(Step::Continue(self.timing.reconcile))
            }
        }
    }

    /// `r.Update(host)` without one annotation: a full update carrying the
    /// `resourceVersion` read (a conflict fails the reconcile, which is retried).
    async fn remove_annotation(
        &self,
        host: &BareMetalHost,
        annotation: &str,
    ) -> anyhow::Result<()> {
        let name = host.name_any();
        let mut raw = self.raw.get(&name).await?;
        if raw.meta().resource_version != host.metadata.resource_version {
            anyhow::bail!("host {name} changed since it was read");
        }
        if let Some(a) = raw.metadata.annotations.as_mut() {
            a.remove(annotation);
        }
        self.raw
            .replace(&name, &PostParams::default(), &raw)
            .await
            .with_context(|| format!("failed to remove reboot annotation from host {name}"))?;
        Ok(())
    }
}

/// BMO's update predicate: creates and deletes, and updates that change the
/// generation, the annotations or the finalizers.
fn wakes(change: &Change<BareMetalHost>) -> Option<String> {
    match change {
        Change::Added(h) | Change::Deleted(h) => Some(h.name_any()),
        Change::Updated { old, new } => {
            let relevant = old.metadata.generation != new.metadata.generation
                || old.metadata.annotations != new.metadata.annotations
                || old.metadata.finalizers != new.metadata.finalizers;
            relevant.then(|| new.name_any())
        }
    }
}

/// The hosts that own a changed Secret (`MatchEveryOwner`: every owner reference of
/// kind BareMetalHost, not only a controller).
fn owning_hosts(change: &Change<Secret>) -> Vec<String> {
    let secret = match change {
        Change::Added(s) | Change::Deleted(s) => s,
        Change::Updated { new, .. } => new,
    };
    secret
        .owner_references()
        .iter()
        .filter(|r| r.kind == "BareMetalHost" && r.api_version.starts_with("metal3.io/"))
        .map(|r| r.name.clone())
        .collect()
}

/// `hasRebootAnnotation`: whether a reboot annotation asks for the host off, and
/// whether any asks for hard mode. Without `{"force": true}` an annotation counts
/// only when `expect_force` is false.
fn reboot_annotations(annotations: &BTreeMap<String, String>, expect_force: bool) -> (bool, bool) {
    let mut reboot = false;
    let mut hard = false;
    for (key, value) in annotations {
        let is_reboot = key == REBOOT_ANNOTATION
            || key
                .strip_prefix(REBOOT_ANNOTATION)
                .is_some_and(|rest| rest.starts_with('/'));
        if !is_reboot {
            continue;
        }
        // No value, or one that is not JSON, is a soft reboot without force.
        let args: Value = serde_json::from_str(value).unwrap_or(Value::Null);
        let force = args.get("force").and_then(Value::as_bool).unwrap_or(false);
        if expect_force && !force {
            continue;
        }
        reboot = true;
        hard |= args.get("mode").and_then(Value::as_str) == Some("hard");
    }
    (reboot, hard)
}

fn clear_error(status: &mut HostStatus) {
    status.error_type.clear();
    status.error_message.clear();
    status.operational_status = "OK".into();
}

fn registration_failed(status: &mut HostStatus, why: &str) {
    status.error_type = REGISTRATION_ERROR.into();
    status.error_message = why.into();
    status.operational_status = "error".into();
    status.error_count += 1;
}

/// `recordActionFailure` with a power management error.
fn power_failed(status: &mut HostStatus, why: &str, timing: Timing) -> Step {
    status.error_type = POWER_MANAGEMENT_ERROR.into();
    status.error_message = why.into();
    status.operational_status = "error".into();
    status.error_count += 1;
    Step::Continue(timing.short_retry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reboot_annotations_as_bmo_reads_them() {
        let a = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(reboot_annotations(&a(&[]), false), (false, false));
        assert_eq!(
            reboot_annotations(&a(&[("reboot.metal3.io/x", r#"{"mode":"hard"}"#)]), false),
            (true, true)
        );
        assert_eq!(
            reboot_annotations(&a(&[("reboot.metal3.io", "")]), false),
            (true, false)
        );
        assert_eq!(
            reboot_annotations(&a(&[("reboot.metal3.io/x", r#"{"mode":"hard"}"#)]), true),
            (false, false),
            "not provisioned: force needed"
        );
        assert_eq!(
            reboot_annotations(
                &a(&[("reboot.metal3.io", r#"{"mode":"hard","force":true}"#)]),
                true
            ),
            (true, true)
        );
        assert_eq!(
            reboot_annotations(&a(&[("reboot.metal3.iox", "")]), false),
            (false, false)
        );
    }
}
