//! Finding the driver's instance (id, tag or providerID), its region, and reading its
//! state with `DescribeInstances`, under the rules of the module docs ([`super`]).

use tokio::time::Instant;

use super::locate::{ProviderId, is_region_name, region_of_zone};
use super::xml::{self, InstanceInfo};
use super::{AwsDriver, credentials, is_not_found, map_state};
use crate::power::{PowerError, PowerState};

/// At most this many `DescribeInstances` pages for one tag lookup.
const MAX_PAGES: usize = 20;

/// How the driver names its instance.
pub(super) enum Which {
    Id(String),
    Tag(String, String),
}

/// What `DescribeInstances` says about one instance.
enum Look {
    /// Listed, not terminated: its state name.
    Live(String),
    /// Terminated, or no longer listed after having been seen: it can never run again.
    Gone,
}

/// The region: configured, else the providerID's zone, else `chain` (environment or
/// profile), else a config error.
pub fn pick_region(
    configured: Option<&str>,
    provider: Option<&ProviderId>,
    chain: Option<String>,
) -> Result<String, PowerError> {
    let checked = |region: String, from: &str| {
        if is_region_name(&region) {
            Ok(region)
        } else {
            Err(PowerError::config(format!(
                "{region:?} ({from}) is not an AWS region name"
            )))
        }
    };
    if let Some(region) = configured {
        return checked(region.to_string(), "region of the node");
    }
    if let Some(region) = provider
        .and_then(|p| p.zone.as_deref())
        .and_then(region_of_zone)
    {
        return Ok(region);
    }
    match chain {
        Some(region) => checked(region, "AWS_REGION, AWS_DEFAULT_REGION or the AWS profile"),
        None => Err(PowerError::config(
            "no AWS region: set region for the node in the inventory, let nodefence read the \
             Node's spec.providerID (aws:///<zone>/<instance-id>), or set AWS_REGION",
        )),
    }
}

/// The one not-terminated instance among `found`, or an error listing them.
pub fn pick_tagged<'a>(
    key: &str,
    value: &str,
    region: &str,
    found: &'a [InstanceInfo],
) -> Result<&'a InstanceInfo, PowerError> {
    let live: Vec<&InstanceInfo> = found.iter().filter(|i| i.state != "terminated").collect();
    let listing = |list: &[&InstanceInfo]| {
        list.iter()
            .map(|i| {
                format!(
                    "{} ({})",
                    i.id,
                    if i.state.is_empty() { "?" } else { &i.state }
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    match live.as_slice() {
        [one] => Ok(one),
        [] => {
            let dead: Vec<&InstanceInfo> = found.iter().collect();
            Err(PowerError::config(format!(
                "no live instance in region {region} carries the tag {key}={value}{}; tag the \
                 node's instance or set instance_id",
                if dead.is_empty() {
                    String::new()
                } else {
                    format!(" (only terminated ones: {})", listing(&dead))
                }
            )))
        }
        many => Err(PowerError::config(format!(
            "{} instances in region {region} carry the tag {key}={value}: {}; the tag must name \
             exactly one instance: fix the tags or set instance_id",
            many.len(),
            listing(many)
        ))),
    }
}

impl AwsDriver {
    pub(super) fn which(&self) -> Result<Which, PowerError> {
        if let Some(id) = &self.instance_id {
            return Ok(Which::Id(id.clone()));
        }
        if let Some((key, value)) = &self.instance_tag {
            return Ok(Which::Tag(key.clone(), value.clone()));
        }
        match self.provider_id() {
            Some(Ok(p)) => Ok(Which::Id(p.instance_id)),
            Some(Err(why)) => Err(PowerError::config(format!(
                "{why}; set instance_id or instance_tag for the node in the inventory"
            ))),
            None => Err(PowerError::config(
                "which EC2 instance is not known yet: set instance_id or instance_tag for the \
                 node in the inventory, or let nodefence read the Node's spec.providerID \
                 (aws:///<zone>/<instance-id>) from the cluster, as `nodefence run` does",
            )),
        }
    }

    pub(super) async fn region(&self) -> Result<String, PowerError> {
        let provider = self.provider_id().and_then(Result::ok);
        let from_zone = provider
            .as_ref()
            .and_then(|p| p.zone.as_deref())
            .and_then(region_of_zone);
        let chain = if self.region.is_none() && from_zone.is_none() {
            credentials::default_region().await
        } else {
            None
        };
        pick_region(self.region.as_deref(), provider.as_ref(), chain)
    }

    pub(super) async fn read_state(&self, deadline: Instant) -> Result<PowerState, PowerError> {
        let which = self.which()?;
        let region = self.region().await?;
        match which {
            Which::Id(id) => Ok(match self.look(&region, &id, deadline).await? {
                Look::Live(state) => map_state(&state),
                Look::Gone => PowerState::Off,
            }),
            Which::Tag(key, value) => self.state_by_tag(&region, &key, &value, deadline).await,
        }
    }

    /// The instance a command goes to (a tag is looked up once).
    pub(super) async fn command_target(
        &self,
        region: &str,
        deadline: Instant,
    ) -> Result<String, PowerError> {
        match self.which()? {
            Which::Id(id) => Ok(id),
            Which::Tag(key, value) => {
                if let Some(id) = self.cached_tagged() {
                    return Ok(id);
                }
                let found = self.lookup_tag(region, &key, &value, deadline).await?;
                let one = pick_tagged(&key, &value, region, &found)?;
                self.set_tagged(&one.id);
                Ok(one.id.clone())
            }
        }
    }

    fn cached_tagged(&self) -> Option<String> {
        self.tagged
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn set_tagged(&self, id: &str) {
        *self.tagged.lock().unwrap_or_else(|e| e.into_inner()) = Some(id.to_string());
    }

    async fn state_by_tag(
        &self,
        region: &str,
        key: &str,
        value: &str,
        deadline: Instant,
    ) -> Result<PowerState, PowerError> {
        let previous = self.cached_tagged();
        if let Some(id) = &previous {
            match self.look(region, id, deadline).await? {
                Look::Live(state) => return Ok(map_state(&state)),
                Look::Gone => {
                    tracing::debug!(instance = %id, %region, tag = %format!("{key}={value}"), "the tagged instance is gone; looking the tag up again");
                }
            }
        }
        let found = self.lookup_tag(region, key, value, deadline).await?;
        match (pick_tagged(key, value, region, &found), &previous) {
            (Ok(one), _) => {
                if previous.as_deref().is_some_and(|p| p != one.id) {
                    tracing::info!(old = ?previous, new = %one.id, tag = %format!("{key}={value}"), "the tag now names another instance (the old one is gone)");
                }
                self.set_tagged(&one.id);
                Ok(map_state(&one.state))
            }
            // The instance the tag named is gone and no other carries the tag: what ran
            // the node cannot run again.
            (Err(_), Some(_)) if found.iter().all(|i| i.state == "terminated") => {
                Ok(PowerState::Off)
            }
            (Err(e), _) => Err(e),
        }
    }

    /// `DescribeInstances` for one id.
    async fn look(&self, region: &str, id: &str, deadline: Instant) -> Result<Look, PowerError> {
        let params = [("InstanceId.1", id)];
        match self
            .api
            .call(region, "DescribeInstances", &params, deadline)
            .await
        {
            Ok(body) => {
                let page = xml::describe_instances(&body)
                    .map_err(|e| PowerError::protocol(format!("DescribeInstances {id}: {e}")))?;
                self.remember_seen(region, page.instances.iter().map(|i| i.id.as_str()));
                match page.instances.into_iter().find(|i| i.id == id) {
                    Some(i) if i.state == "terminated" => {
                        tracing::debug!(
                            instance = id,
                            region,
                            "the instance is terminated: it cannot write any more"
                        );
                        Ok(Look::Gone)
                    }
                    Some(i) => Ok(Look::Live(i.state)),
                    None => {
                        let why = PowerError::protocol("DescribeInstances did not list it");
                        self.not_found(region, id, why)?;
                        Ok(Look::Gone)
                    }
                }
            }
            Err(f) if is_not_found(&f) => {
                self.not_found(region, id, f.into_error())?;
                Ok(Look::Gone)
            }
            Err(f) => Err(f.into_error()),
        }
    }

    /// Every instance carrying the tag (all pages), terminated ones included.
    async fn lookup_tag(
        &self,
        region: &str,
        key: &str,
        value: &str,
        deadline: Instant,
    ) -> Result<Vec<InstanceInfo>, PowerError> {
        let filter = format!("tag:{key}");
        let mut token: Option<String> = None;
        let mut all = Vec::new();
        for _ in 0..MAX_PAGES {
            let mut params = vec![
                ("Filter.1.Name", filter.as_str()),
                ("Filter.1.Value.1", value),
            ];
            if let Some(t) = &token {
                params.push(("NextToken", t.as_str()));
            }
            let body = self
                .api
                .call(region, "DescribeInstances", &params, deadline)
                .await
                .map_err(|f| f.into_error())?;
            let page = xml::describe_instances(&body).map_err(|e| {
                PowerError::protocol(format!("DescribeInstances (tag {key}={value}): {e}"))
            })?;
            self.remember_seen(region, page.instances.iter().map(|i| i.id.as_str()));
            all.extend(page.instances);
            match page.next_token {
                Some(next) => token = Some(next),
                None => return Ok(all),
            }
        }
        Err(PowerError::protocol(format!(
            "DescribeInstances (tag {key}={value}) still had more after {MAX_PAGES} pages"
        )))
    }
}
