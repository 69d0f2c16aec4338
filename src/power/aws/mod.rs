//! The AWS EC2 power driver (`driver = "aws"`).
//!
//! # Which instance
//! `instance_id` when set; else the one instance carrying `instance_tag` (found with
//! `DescribeInstances` and a `tag:KEY` filter: exactly one not-terminated match, else
//! an error listing what was found; the id is remembered and the tag looked up again
//! when that instance is terminated or gone, since a replaced machine has a new id);
//! else the Node's `spec.providerID` (`aws:///<zone>/<id>`), which arrives through
//! [`PowerDriver::node_identity`]. Until one is known, every call is a config error
//! that says how to provide it.
//!
//! # Which region
//! `region` when set; else the zone of the providerID without its letter
//! (`eu-central-1a` → `eu-central-1`); else `AWS_REGION`/`AWS_DEFAULT_REGION`/the
//! profile's; else a config error.
//!
//! # Power state
//! `running` is On, `stopped` Off, `pending` PoweringOn, `stopping`/`shutting-down`
//! PoweringOff, anything else Unknown. A `terminated` instance is Off: it can never
//! run (or write) again.
//!
//! **The one rule for a missing instance:** Off needs proof that the instance existed
//! here and can no longer run. An instance EC2 no longer lists (`InvalidInstanceID
//! .NotFound`, or absent from the reply) is Off only when this driver saw it listed
//! before, in the same region, since EC2 stops listing terminated instances after
//! about an hour. An id never seen is far more likely a wrong id, region, account or
//! endpoint than a dead machine, so it is a config error; a live machine behind a typo
//! must never count as off.
//!
//! # Commands
//! Off is `StopInstances` with `Force=true` (no guest shutdown: a hung OS would delay
//! it); on is `StartInstances`. `reboot()` is unsupported: `RebootInstances` asks the
//! guest first and its off phase cannot be observed; nodefence reboots by stop,
//! confirm off, start, confirm on ([`crate::power::confirm::execute`]), and fencing
//! never reboots.
//!
//! The machine's identity is [`MachineIdentity::InstanceId`] of the resolved instance.

pub mod api;
pub mod credentials;
pub mod http_client;
pub mod locate;
mod resolve;
pub mod xml;

#[cfg(test)]
mod chain_tests;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, RwLock};

use async_trait::async_trait;
use secrecy::SecretString;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use self::api::Ec2;
use self::credentials::{CredentialSource, ProfileChoice};
use self::locate::ProviderId;
use crate::config::AwsTarget;
use crate::identity::{MachineIdentity, NodeIdentity};
use crate::power::{PowerDriver, PowerError, PowerReading, PowerState};

/// The EC2 state name → [`PowerState`]. `terminated` is Off (see the module docs);
/// transitional states never are.
pub fn map_state(name: &str) -> PowerState {
    match name {
        "running" => PowerState::On,
        "stopped" | "terminated" => PowerState::Off,
        "pending" => PowerState::PoweringOn,
        "stopping" | "shutting-down" => PowerState::PoweringOff,
        other => PowerState::Unknown(crate::untrusted::field(other)),
    }
}

/// One EC2 instance.
pub struct AwsDriver {
    api: Ec2,
    instance_id: Option<String>,
    instance_tag: Option<(String, String)>,
    region: Option<String>,
    /// From [`PowerDriver::node_identity`]: the parsed providerID, or why it is unusable.
    node: RwLock<Option<Result<ProviderId, String>>>,
    /// The instance `instance_tag` resolved to.
    tagged: Mutex<Option<String>>,
    /// `(region, id)` of every instance a reply has listed: proof it existed there.
    seen: Mutex<HashSet<(String, String)>>,
}

impl std::fmt::Debug for AwsDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsDriver")
            .field("instance_id", &self.instance_id)
            .field("instance_tag", &self.instance_tag)
            .field("region", &self.region)
            .field(
                "endpoint",
                &self.api.endpoint_override().map(|u| u.as_str()),
            )
            .field("node", &self.node.read().ok().map(|n| n.clone()))
            .finish_non_exhaustive()
    }
}

impl AwsDriver {
    /// A driver that signs with the standard credential chain. `client` is a shared
    /// reqwest client; `limiter` bounds requests in flight across all sources.
    pub fn new(target: &AwsTarget, client: reqwest::Client, limiter: Arc<Semaphore>) -> Self {
        let choice = ProfileChoice {
            profile: target.profile.clone(),
            credentials_file: target.credentials_file.clone(),
        };
        Self::with_credentials(target, client, limiter, CredentialSource::Chain(choice))
    }

    /// A driver that signs with fixed keys (tests and tools; the process environment
    /// is not read for credentials).
    pub fn with_keys(
        target: &AwsTarget,
        client: reqwest::Client,
        limiter: Arc<Semaphore>,
        access_key_id: &str,
        secret_access_key: &SecretString,
        session_token: Option<&SecretString>,
    ) -> Self {
        let source = CredentialSource::fixed(access_key_id, secret_access_key, session_token);
        Self::with_credentials(target, client, limiter, source)
    }

    fn with_credentials(
        target: &AwsTarget,
        client: reqwest::Client,
        limiter: Arc<Semaphore>,
        credentials: CredentialSource,
    ) -> Self {
        let non_empty = |s: &Option<String>| {
            s.as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        Self {
            api: Ec2::new(
                client,
                target.endpoint.clone(),
                credentials,
                target.timeouts,
                limiter,
            ),
            instance_id: non_empty(&target.instance_id),
            instance_tag: target.instance_tag.clone(),
            region: non_empty(&target.region),
            node: RwLock::new(None),
            tagged: Mutex::new(None),
            seen: Mutex::new(HashSet::new()),
        }
    }

    /// The instance id the driver controls now, if it is known without I/O.
    pub fn known_instance_id(&self) -> Option<String> {
        if let Some(id) = &self.instance_id {
            return Some(id.clone());
        }
        if self.instance_tag.is_some() {
            return self
                .tagged
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
        }
        self.provider_id()
            .and_then(Result::ok)
            .map(|p| p.instance_id)
    }

    fn provider_id(&self) -> Option<Result<ProviderId, String>> {
        self.node.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn remember_seen<'a>(&self, region: &str, ids: impl Iterator<Item = &'a str>) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        for id in ids {
            seen.insert((region.to_string(), id.to_string()));
        }
    }

    fn was_seen(&self, region: &str, id: &str) -> bool {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&(region.to_string(), id.to_string()))
    }

    async fn command(
        &self,
        action: &'static str,
        extra: &[(&str, &str)],
    ) -> Result<(), PowerError> {
        let deadline = self.api.deadline();
        self.which()?;
        let region = self.region().await?;
        let id = self.command_target(&region, deadline).await?;
        let mut params = vec![("InstanceId.1", id.as_str())];
        params.extend_from_slice(extra);
        tracing::info!(instance = %id, %region, action, "sending EC2 power command");
        match self.api.call(&region, action, &params, deadline).await {
            Ok(body) => xml::state_change(&body, &format!("{action}Response"), &id)
                .map_err(|e| PowerError::protocol(format!("{action} {id}: {e}"))),
            Err(f) if is_not_found(&f) => {
                self.not_found(&region, &id, f.into_error())?;
                if action == "StopInstances" {
                    // Gone for good: nothing left to stop; the readings say Off.
                    Ok(())
                } else {
                    Err(PowerError::unsupported(format!(
                        "{action} {id}: the instance was terminated and cannot be started again"
                    )))
                }
            }
            Err(f) => Err(f.into_error()),
        }
    }

    /// `Ok(())` when `id` was seen before (it is gone: Off); a config error otherwise.
    fn not_found(&self, region: &str, id: &str, error: PowerError) -> Result<(), PowerError> {
        if self.was_seen(region, id) {
            tracing::debug!(
                instance = id,
                region,
                "EC2 no longer lists an instance it listed before: it was terminated and cannot write any more"
            );
            return Ok(());
        }
        Err(PowerError::config(format!(
            "instance {id} does not exist in region {region} for these credentials ({}); check \
             the instance id, the region and the AWS account. nodefence never counts an instance \
             it has not seen as off: if it was terminated more than about an hour ago, EC2 no \
             longer lists it; confirm that in the console and release the node by hand",
            error.message
        )))
    }
}

fn is_not_found(f: &api::Failure) -> bool {
    f.code.as_deref() == Some("InvalidInstanceID.NotFound")
}

#[async_trait]
impl PowerDriver for AwsDriver {
    fn driver_name(&self) -> &'static str {
        "aws"
    }

    fn endpoint(&self) -> String {
        let mut out = match &self.api.endpoint_override() {
            Some(url) => format!("ec2 {}", url.as_str().trim_end_matches('/')),
            None => "ec2".to_string(),
        };
        if let Some(region) = &self.region {
            out.push_str(&format!(" {region}"));
        }
        match (&self.instance_id, &self.instance_tag) {
            (Some(id), _) => out.push_str(&format!(" (instance {id})")),
            (None, Some((k, v))) => out.push_str(&format!(" (tag {k}={v})")),
            (None, None) => match self.known_instance_id() {
                Some(id) => out.push_str(&format!(" (instance {id}, from the Node's providerID)")),
                None => out.push_str(" (instance from the Node's providerID)"),
            },
        }
        out
    }

    async fn status(&self) -> Result<PowerReading, PowerError> {
        let started = Instant::now();
        let state = self.read_state(self.api.deadline()).await?;
        Ok(PowerReading {
            state,
            at: crate::clock::now(),
            latency: started.elapsed(),
        })
    }

    async fn power_off(&self) -> Result<(), PowerError> {
        self.command("StopInstances", &[("Force", "true")]).await
    }

    async fn power_on(&self) -> Result<(), PowerError> {
        self.command("StartInstances", &[]).await
    }

    async fn reboot(&self) -> Result<(), PowerError> {
        Err(PowerError::unsupported(
            "the aws driver does not send RebootInstances (a guest-level reboot whose off phase \
             cannot be observed); nodefence reboots an instance by stopping it, confirming it is \
             off, and starting it",
        ))
    }

    async fn machine_identity(&self) -> Result<MachineIdentity, PowerError> {
        if let Some(id) = self.known_instance_id() {
            return Ok(MachineIdentity::InstanceId(id));
        }
        match self.which() {
            Err(e) => Ok(MachineIdentity::Unavailable(e.message)),
            Ok(_) => {
                let deadline = self.api.deadline();
                let region = self.region().await?;
                let id = self.command_target(&region, deadline).await?;
                Ok(MachineIdentity::InstanceId(id))
            }
        }
    }

    fn node_identity(&self, node: &NodeIdentity) {
        let parsed = node.provider_id.as_deref().map(locate::parse_provider_id);
        *self.node.write().unwrap_or_else(|e| e.into_inner()) = parsed;
    }
}
