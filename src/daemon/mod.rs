//! `nodefence run` as a library function: wires config, drivers, leader election, the
//! control loop and the telemetry endpoint, and runs them until shutdown.
//!
//! Start-up refuses loudly rather than degrading: the API server's version is read
//! first, and a cluster too old for the out-of-service taint (Kubernetes < 1.26) is
//! refused when that is the configured release; a failed version read is an error.
//!
//! A changed configuration on disk is read, checked as at start-up, and applied
//! without a restart ([`reload`]); a version that fails any check is refused whole
//! and the running one kept.

pub mod endpoints;
pub mod host_watch;
pub mod reload;
pub mod secret_watch;

pub use endpoints::MetricsEndpoint;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::{Context, bail};
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use tokio_util::task::AbortOnDropHandle;

use crate::cluster::leader::{LeaderElector, LeaderTimings, Leadership};
use crate::cluster::records::RecordStore;
use crate::cluster::release::Releaser;
use crate::config::Config;
use crate::controller::executor::Executor;
use crate::controller::{Controller, ExecutorParts, TermEnd};
use crate::engine::ReleaseMode;
use crate::power::registry::DriverFactory;
use crate::telemetry::{Health, Metrics};

/// How the daemon runs.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    pub dry_run: bool,
    /// Where `/healthz` and `/readyz` are served (plain HTTP, open).
    pub health_listen: SocketAddr,
    /// Where and how `/metrics` is served.
    pub metrics: MetricsEndpoint,
    /// Namespace and name of the leader-election Lease.
    pub lease_namespace: String,
    pub lease_name: String,
    pub identity: String,
    pub leader_timings: LeaderTimings,
    /// How often the configuration files are checked for changes (`SIGHUP` checks at
    /// once); `None`: never reloaded.
    pub config_check: Option<std::time::Duration>,
    /// Where each node's power driver comes from: the inventory (always, in
    /// `nodefence run`), or the whole-system simulation's fault layer.
    pub drivers: DriverSource,
    /// Where the companions' heartbeat is heard (`--companion-listen`); `None`: off.
    pub companions: Option<CompanionSource>,
}

/// Where the companions' heartbeat comes from.
#[derive(Debug, Clone)]
pub enum CompanionSource {
    /// A listener (`nodefence run --companion-listen`): HTTPS hellos, UDP beats.
    Listen(CompanionListener),
    /// No socket: companions in the same process say hello and beat through this
    /// handle (the whole-system simulation's, in paused time). The table, the marks,
    /// the release rule and the silences are the listener's own
    /// ([`crate::heartbeat::InProcess`]).
    InProcess {
        handle: crate::heartbeat::InProcess,
        heartbeat_timeout: std::time::Duration,
    },
}

impl From<CompanionListener> for CompanionSource {
    fn from(listener: CompanionListener) -> Self {
        CompanionSource::Listen(listener)
    }
}

/// Where and how the companions' heartbeat is heard ([`crate::heartbeat`]).
#[derive(Debug, Clone)]
pub struct CompanionListener {
    /// TCP (HTTPS hellos) and UDP (beats), one port.
    pub listen: SocketAddr,
    /// The companions' ServiceAccount, in the daemon's namespace.
    pub service_account: String,
    /// Its certificate (the companions trust its CA, or pin it).
    pub certificate: crate::telemetry::certificate::CertificateSource,
    pub heartbeat_interval: std::time::Duration,
    pub heartbeat_timeout: std::time::Duration,
}

/// Starts the companions' listener on every replica (the standbys keep the table too).
async fn start_companions(
    listener: &CompanionListener,
    namespace: &str,
    client: &Client,
    leadership: &Leadership,
    metrics: &Arc<Metrics>,
    stop: tokio_util::sync::CancellationToken,
) -> anyhow::Result<(crate::heartbeat::Heartbeat, Option<AbortOnDropHandle<()>>)> {
    let config =
        crate::telemetry::certificate::load(&listener.certificate, "the companions' heartbeat")
            .context("cannot set up TLS for the companions' listener")?;
    let tls = axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(config));
    let follower = endpoints::follow(&listener.certificate, &tls);
    let settings = crate::heartbeat::Settings {
        listen: listener.listen,
        companion_user: format!(
            "system:serviceaccount:{namespace}:{}",
            listener.service_account
        ),
        timing: nodefence_watchdog::timing::Timing::default(),
        heartbeat_interval: listener.heartbeat_interval,
        heartbeat_timeout: listener.heartbeat_timeout,
        metrics: Some(metrics.clone()),
    };
    let heartbeat = crate::heartbeat::start(
        settings,
        client.clone(),
        tls,
        leadership.clone(),
        stop.cancelled_owned(),
    )
    .await
    .with_context(|| format!("cannot listen on {} for the companions", listener.listen))?;
    tracing::info!(address = %heartbeat.addr(), "hearing the companions' heartbeat (HTTPS hellos, UDP beats)");
    Ok((heartbeat, follower))
}

/// Builds a node's power driver.
pub type DriverBuilder = dyn Fn(
        &crate::config::NodeTarget,
    ) -> Result<Arc<dyn crate::power::PowerDriver>, crate::power::PowerError>
    + Send
    + Sync;

/// Where the daemon's power drivers come from.
#[derive(Clone, Default)]
pub enum DriverSource {
    /// Built from the inventory entry (Redfish, IPMI, EC2, fence agent, topology).
    #[default]
    Inventory,
    /// Built by this function: the whole-system simulation puts a driver-level fault
    /// layer over its simulated machines here. Everything else is the real daemon.
    Given(Arc<DriverBuilder>),
}

impl std::fmt::Debug for DriverSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DriverSource::Inventory => "Inventory",
            DriverSource::Given(_) => "Given",
        })
    }
}

/// How often `nodefence run` checks its configuration files for changes.
pub const CONFIG_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// Oldest Kubernetes minor version (1.x) with the out-of-service taint.
pub const MIN_MINOR_FOR_TAINT: u32 = 26;

/// Runs the daemon until `shutdown` resolves. Releases the leader Lease on the way out.
pub async fn run(
    config: Config,
    client: Client,
    options: DaemonOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let Admitted {
        config,
        hosts_fingerprint,
        secrets,
    } = admit(config, &client, &options.lease_namespace)
        .await
        .map_err(|e| e.context("refusing to start"))?;
    check_permissions(&config, &client, &options).await?;
    if let Some(CompanionSource::Listen(listener)) = &options.companions {
        check_companion_access(&client, &options.lease_namespace, listener).await?;
    }

    let metrics = Arc::new(Metrics::new());
    let health = Health::default();
    health.set_alive(true);
    // Every task the daemon starts ends with it, also when `run` is dropped (a test or
    // the demo aborting it): none outlives the process's own future.
    let endpoints = endpoints::Endpoints::start(
        options.health_listen,
        &options.metrics,
        metrics.clone(),
        health.clone(),
        &client,
    )
    .await?;

    let (elector, leadership) = if options.dry_run {
        (None, Leadership::always())
    } else {
        let leases: Api<Lease> = Api::namespaced(client.clone(), &options.lease_namespace);
        let (e, l) = LeaderElector::new(
            leases,
            &options.lease_name,
            &options.identity,
            options.leader_timings,
        );
        (Some(e), l)
    };
    let stopper = elector.as_ref().map(LeaderElector::stopper);
    let election = elector.map(|e| AbortOnDropHandle::new(tokio::spawn(e.run())));
    let companions_stop = tokio_util::sync::CancellationToken::new();
    let _companions_stop_on_drop = companions_stop.clone().drop_guard();
    if options.companions.is_none() {
        let levels: Vec<&str> = config
            .inventory
            .nodes
            .values()
            .filter(|t| t.policy.watchdog_fencing)
            .map(|t| t.name.as_str())
            .collect();
        if !levels.is_empty() || config.agent.policy.watchdog_fencing {
            tracing::warn!(
                nodes = levels.len(),
                "watchdog_fencing is set, but no companion listener runs (--companion-listen): the watchdog level cannot mark or release anything"
            );
        }
    }
    // A dry run decides as if it led, but acknowledges no beat as the leader's: a
    // companion cut from the real leader must not feed its watchdog on a replica
    // that only pretends to lead (issue 52: released 16.7 s later while it ran).
    let acknowledging = if options.dry_run {
        Leadership::never()
    } else {
        leadership.clone()
    };
    let (heartbeat, _companions_certificate) = match &options.companions {
        Some(CompanionSource::InProcess {
            handle,
            heartbeat_timeout,
        }) => {
            let heartbeat = crate::heartbeat::start_in_process(
                nodefence_watchdog::timing::Timing::default(),
                *heartbeat_timeout,
                Some(metrics.clone()),
                acknowledging.clone(),
                handle,
                companions_stop.clone().cancelled_owned(),
            );
            (Some(heartbeat), None)
        }
        Some(CompanionSource::Listen(listener)) => {
            let (heartbeat, follower) = start_companions(
                listener,
                &options.lease_namespace,
                &client,
                &acknowledging,
                &metrics,
                companions_stop.clone(),
            )
            .await?;
            (Some(heartbeat), follower)
        }
        None => (None, None),
    };

    let mut controller = controller_for(
        &config,
        &client,
        &options,
        &leadership,
        &metrics,
        &health,
        heartbeat.clone(),
    );
    let reloader = options.config_check.map(|interval| {
        reload::Reloader::new(
            &config,
            client.clone(),
            &options,
            metrics.clone(),
            controller.executor_template.recorder.clone(),
            controller.executor_template.cluster_ref.clone(),
            leadership.clone(),
        )
        .with_hosts(&config, hosts_fingerprint)
        .with_secrets(secrets)
        .spawn(interval)
    });
    let reload_ready: Option<reload::Ready> = reloader.as_ref().map(|r| r.ready.clone());
    let reload_notify = reloader.as_ref().map_or_else(
        || Arc::new(tokio::sync::Notify::new()),
        |r| r.notify.clone(),
    );
    // The loaded configuration is dropped here: the control loop keeps what it built.
    let mut running = reload::RunningConfig::of(&config);
    drop(config);
    if options.dry_run {
        tracing::warn!("dry-run: nothing will be powered off, on, tainted or deleted");
    }

    let mut shutdown = Box::pin(shutdown);
    let mut waiting = leadership.clone();
    loop {
        metrics.set_leader(leadership.is_leader());
        // A standby is healthy and ready to take over: ready, so rollouts of 2+
        // replicas complete. The leader is ready once its watches have synced.
        health.set_ready(!leadership.is_leader());
        tokio::select! {
            () = &mut shutdown => break,
            () = waiting.wait_until_leader() => {}
            () = reload_notify.notified() => {
                // A standby applies a new configuration at once: it has no term.
                if let Some(ready) = &reload_ready {
                    apply(&mut controller, &mut running, ready, &client, &options, &leadership, &metrics, &health, &heartbeat).await;
                }
                continue;
            }
        }
        metrics.set_leader(true);
        tracing::info!(identity = %options.identity, "leading: watching nodes");
        match controller.run_term(&mut shutdown, &reload_notify).await {
            TermEnd::Shutdown => break,
            TermEnd::LeadershipLost => {
                metrics.set_leader(false);
                // A standby reports no incidents: only the leader's engine is current.
                metrics.observe_engine(&crate::engine::Engine::new(running.agent.policy.clone()));
            }
            TermEnd::Reload => {
                if let Some(ready) = &reload_ready {
                    apply(
                        &mut controller,
                        &mut running,
                        ready,
                        &client,
                        &options,
                        &leadership,
                        &metrics,
                        &health,
                        &heartbeat,
                    )
                    .await;
                }
            }
        }
    }

    tracing::info!("shutting down");
    health.set_ready(false);
    if let Some(stop) = stopper {
        stop.store(true, Ordering::SeqCst);
    }
    if let Some(task) = election {
        let _ = tokio::time::timeout(options.leader_timings.retry_period * 3, task).await;
    }
    if let Some(r) = reloader {
        r.task.abort();
    }
    for d in controller.executor_template.drivers.values().flatten() {
        d.close().await;
    }
    companions_stop.cancel();
    endpoints.stop().await;
    Ok(())
}

/// The checks a configuration passes before it runs, at start-up and on reload: the
/// cluster supports its release mechanism, and the BMC passwords it keeps in
/// Kubernetes Secrets can be read (each Secret once; every problem listed); with
/// `[metal3] hosts`, the BareMetalHosts' entries are added first.
pub(crate) async fn admit(
    mut config: Config,
    client: &Client,
    namespace: &str,
) -> anyhow::Result<Admitted> {
    let policy = &config.agent.policy;
    check_version(
        client,
        std::iter::once(policy).chain(config.inventory.nodes.values().map(|t| &t.policy)),
    )
    .await?;
    let mut hosts_fingerprint = None;
    if config.agent.metal3.hosts {
        let discovery = crate::metal3::inventory::discover(client, &config.agent.metal3)
            .await
            .context("cannot read the Metal3 BareMetalHosts ([metal3] hosts = true)")?;
        hosts_fingerprint = Some(crate::metal3::inventory::fingerprint(&discovery));
        for warning in &discovery.warnings {
            tracing::warn!("{warning}");
        }
        for problem in &discovery.problems {
            tracing::warn!(
                problem = %problem,
                "no inventory entry from Metal3: this node is never fenced unless the inventory file has it"
            );
        }
        let merged = crate::metal3::inventory::merge(&mut config, &discovery);
        tracing::info!(%merged, "inventory entries from Metal3 BareMetalHosts");
    }
    let mut secrets = crate::config::resolve_secrets(&mut config, client, namespace)
        .await
        .context("cannot read the BMC passwords kept in Kubernetes Secrets")?;
    // Watched: the Secrets the inventory names (its Role lists them by name), not
    // those of BareMetalHosts (get only; read again when the hosts are).
    let named: BTreeSet<(String, String)> = crate::cluster::access::secrets(&config)
        .into_iter()
        .map(|s| match s.split_once('/') {
            Some((ns, name)) => (ns.to_string(), name.to_string()),
            None => (namespace.to_string(), s),
        })
        .collect();
    secrets.retain(|ns, name| named.contains(&(ns.to_string(), name.to_string())));
    Ok(Admitted {
        config,
        hosts_fingerprint,
        secrets,
    })
}

/// A configuration that passed [`admit`], and what it was read from besides its files.
pub(crate) struct Admitted {
    pub config: Config,
    /// The fingerprint of the BareMetalHosts read
    /// ([`crate::metal3::inventory::fingerprint`]; `None` without `[metal3] hosts`):
    /// the reloader compares later readings with it.
    pub hosts_fingerprint: Option<u64>,
    /// The Secrets the inventory's credentials were read from: the reloader watches
    /// them ([`secret_watch`]).
    pub secrets: crate::config::SecretsRead,
}

/// Refuses to start when the ServiceAccount lacks a permission the configuration
/// needs (asked with SelfSubjectAccessReview), naming each and where to get it:
/// better than a 403 in the middle of a fence.
async fn check_permissions(
    config: &Config,
    client: &Client,
    options: &DaemonOptions,
) -> anyhow::Result<()> {
    use crate::cluster::access;
    let needs = access::needed(
        config,
        &options.lease_namespace,
        &options.lease_name,
        options.dry_run,
    );
    let denied = access::missing(client, &needs).await.context(
        "cannot check this ServiceAccount's permissions (SelfSubjectAccessReview); refusing to start",
    )?;
    if !denied.is_empty() {
        bail!("refusing to start: {}", access::explain_missing(&denied));
    }
    tracing::info!(
        checked = needs.len(),
        "every permission the configuration needs is granted"
    );
    Ok(())
}

/// With `--companion-listen`, refuses to start when the companions' ServiceAccount
/// may not read their Node (asked with SubjectAccessReview): a companion that cannot
/// would feed on the leader's answer alone, and a failover would reset its machine.
async fn check_companion_access(
    client: &Client,
    namespace: &str,
    listener: &CompanionListener,
) -> anyhow::Result<()> {
    use crate::cluster::access;
    let granted = access::companion_granted(client, namespace, &listener.service_account)
        .await
        .context(
            "cannot check the companions' permission to read their Node (SubjectAccessReview); \
             refusing to start",
        )?;
    if !granted {
        bail!(
            "refusing to start: {}",
            access::explain_companion_missing(namespace, &listener.service_account)
        );
    }
    tracing::info!(
        service_account = %listener.service_account,
        "the companions may read their Node"
    );
    Ok(())
}

/// The control loop for `config`: its drivers (built now), policies and inventory.
fn controller_for(
    config: &Config,
    client: &Client,
    options: &DaemonOptions,
    leadership: &Leadership,
    metrics: &Arc<Metrics>,
    health: &Health,
    companions: Option<crate::heartbeat::Heartbeat>,
) -> Controller {
    let policy = config.agent.policy.clone();
    let node_policies: BTreeMap<String, crate::engine::Policy> = config
        .inventory
        .nodes
        .iter()
        .filter(|(_, target)| target.policy != policy)
        .map(|(name, target)| (name.clone(), target.policy.clone()))
        .collect();
    let mut factory = DriverFactory::new(config.agent.power.max_concurrent_requests)
        .with_confirm(config.agent.power.confirm);
    if config.agent.metal3.hosts {
        factory = factory.with_metal3(client.clone());
    }
    let drivers: BTreeMap<_, _> = config
        .inventory
        .nodes
        .values()
        .map(|t| {
            let driver = match &options.drivers {
                DriverSource::Inventory => factory.driver(t),
                DriverSource::Given(build) => build(t),
            };
            (t.name.clone(), driver)
        })
        .collect();
    for (node, d) in &drivers {
        if let Err(e) = d {
            tracing::warn!(node, error = %e, "no usable power driver: this node can never be fenced");
        }
    }
    Controller {
        client: client.clone(),
        policy,
        node_policies,
        inventory: config
            .inventory
            .nodes
            .keys()
            .cloned()
            .collect::<BTreeSet<_>>(),
        executor_template: ExecutorParts {
            drivers: Arc::new(drivers),
            releaser: Releaser::new(client.clone(), leadership.clone()),
            records: RecordStore::new(client.clone(), &options.lease_namespace, leadership.clone()),
            leadership: leadership.clone(),
            pause: crate::cluster::pause::PauseCheck::new(client.clone(), &options.lease_namespace),
            power_off_hold: Default::default(),
            recorder: (!options.dry_run)
                .then(|| Executor::recorder(client.clone(), &options.identity)),
            cluster_ref: Some(k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some("coordination.k8s.io/v1".into()),
                kind: Some("Lease".into()),
                namespace: Some(options.lease_namespace.clone()),
                name: Some(options.lease_name.clone()),
                ..Default::default()
            }),
            dry_run: options.dry_run,
        },
        requests: config.agent.remediation.requests.then(|| {
            crate::remediation::writer::RequestWriter::new(client.clone(), leadership.clone())
        }),
        metrics: metrics.clone(),
        health: health.clone(),
        control_namespace: options.lease_namespace.clone(),
        monitor_interval: if options.dry_run {
            std::time::Duration::ZERO
        } else {
            config.agent.power.monitor_interval
        },
        monitor_concurrency: config.agent.power.max_concurrent_requests,
        companions,
    }
}

/// Replaces the running configuration with the one the reloader made ready (if it is
/// still there): a new control loop with new drivers; the old drivers' sessions are
/// closed.
#[allow(clippy::too_many_arguments)]
async fn apply(
    controller: &mut Controller,
    running: &mut reload::RunningConfig,
    ready: &reload::Ready,
    client: &Client,
    options: &DaemonOptions,
    leadership: &Leadership,
    metrics: &Arc<Metrics>,
    health: &Health,
    companions: &Option<crate::heartbeat::Heartbeat>,
) {
    let Some(prepared) = ready.take() else {
        return;
    };
    let new = controller_for(
        &prepared.config,
        client,
        options,
        leadership,
        metrics,
        health,
        companions.clone(),
    );
    let old = std::mem::replace(controller, new);
    let mut summary = running.summary(&prepared.config);
    if let Some(cause) = &prepared.cause {
        summary = format!("{cause}; {summary}");
    }
    *running = reload::RunningConfig::of(&prepared.config);
    drop(prepared.config);
    for d in old.executor_template.drivers.values().flatten() {
        d.close().await;
    }
    reload::report_applied(
        controller.executor_template.recorder.as_ref(),
        controller.executor_template.cluster_ref.as_ref(),
        leadership,
        metrics,
        &prepared.version,
        &summary,
    )
    .await;
}

/// Reads the API server version; refuses the taint on clusters that lack it, unless
/// the policy that asks for it also has the forced-deletion fallback.
async fn check_version(
    client: &Client,
    mut policies: impl Iterator<Item = &crate::engine::Policy>,
) -> anyhow::Result<()> {
    let info = client
        .apiserver_version()
        .await
        .context("cannot read the Kubernetes API server version (GET /version); refusing to start rather than guess what the cluster supports")?;
    let major: u32 = info.major.trim_end_matches('+').parse().unwrap_or(0);
    let minor: u32 = info.minor.trim_end_matches('+').parse().unwrap_or(0);
    tracing::info!(version = %info.git_version, "Kubernetes API server");
    if (major, minor) >= (1, MIN_MINOR_FOR_TAINT) {
        return Ok(());
    }
    let taint_users: Vec<&crate::engine::Policy> = policies
        .by_ref()
        .filter(|p| p.release == ReleaseMode::OutOfServiceTaint)
        .collect();
    if taint_users.iter().any(|p| !forced_deletion_fallback(p)) {
        bail!(
            "Kubernetes {} has no out-of-service taint (non-graceful node shutdown needs 1.{MIN_MINOR_FOR_TAINT}+, GA in 1.28); \
             refusing to run with release = \"out-of-service-taint\". Upgrade, set release = \"delete-node\", or use the \
             forced-deletion fallback: force_delete_pods = \"always\" and delete_volume_attachments = true in [policy]",
            info.git_version
        );
    }
    if !taint_users.is_empty() {
        tracing::warn!(
            version = %info.git_version,
            "this Kubernetes has no out-of-service taint: released nodes get the forced-deletion fallback (pods force-deleted, VolumeAttachments deleted)"
        );
    }
    Ok(())
}

/// The forced-deletion fallback for clusters without non-graceful node shutdown: the
/// released node's pods are force-deleted and its VolumeAttachments deleted by
/// nodefence itself.
fn forced_deletion_fallback(policy: &crate::engine::Policy) -> bool {
    policy.force_delete_pods == crate::engine::ForceDeletePods::Always
        && policy.delete_volume_attachments
}
