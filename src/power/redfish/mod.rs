//! The Redfish power driver.
//!
//! Discovery follows the service, never guesses: the service root names the Systems
//! collection; the system is the one named by `system_id`, or the only member, and
//! otherwise an error lists the members. Power commands go to the Reset action target
//! the system advertises, with a ResetType chosen from what it allows ([`reset`]).
//! A 202 reply is followed through its task monitor. Nothing here claims a command
//! worked: [`crate::power::confirm`] reads the state back.
//!
//! The machine's identity (for [`crate::identity`]) is the ComputerSystem's `UUID`,
//! remembered from every GET of the system (so power readings keep it fresh) and kept
//! with the discovered system: whatever re-discovers the system forgets it.

mod auth;
pub mod model;
pub mod redirect;
pub mod reply;
pub mod reset;
pub mod transport;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use reqwest::StatusCode;
use serde_json::Value;
use tokio::sync::{OnceCell, Semaphore};
use tokio::time::Instant;

use self::model::{ActionInfo, Collection, ComputerSystem, Task};
use self::reply::Reply;
use self::reset::Advertised;
use self::transport::Transport;
use crate::config::RedfishTarget;
use crate::identity::MachineIdentity;
use crate::power::{PowerAction, PowerDriver, PowerError, PowerReading, PowerState};

/// Pause between task-monitor polls when the BMC gives no Retry-After.
const TASK_POLL: Duration = Duration::from_millis(500);

/// One ComputerSystem behind one Redfish service.
pub struct RedfishDriver {
    transport: Transport,
    system_id: Option<String>,
    system: OnceCell<Discovered>,
}

/// The system discovery found, and what the latest GET of it said about its identity.
/// Identity lives here so that a new discovery starts without a stale one.
#[derive(Debug)]
struct Discovered {
    uri: String,
    /// `None` until the system was read once; then its `UUID` (`None`: absent, null
    /// or empty; non-strings as their JSON text, which the identity check rejects).
    uuid: Mutex<Option<Option<String>>>,
}

impl Discovered {
    fn new(uri: String) -> Self {
        Self {
            uri,
            uuid: Mutex::new(None),
        }
    }

    fn remember_uuid(&self, raw: Option<&Value>) {
        let uuid = match raw {
            Some(Value::String(s)) => Some(s.trim().to_string()).filter(|s| !s.is_empty()),
            Some(Value::Null) | None => None,
            Some(other) => Some(other.to_string()),
        };
        *self.uuid.lock().unwrap_or_else(|e| e.into_inner()) = Some(uuid);
    }

    fn known_uuid(&self) -> Option<Option<String>> {
        self.uuid.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl RedfishDriver {
    /// `client` carries the TLS profile (shared between BMCs with the same one);
    /// `limiter` bounds requests in flight across all BMCs.
    pub fn new(target: &RedfishTarget, client: reqwest::Client, limiter: Arc<Semaphore>) -> Self {
        Self {
            transport: Transport::new(
                client,
                target.endpoint.clone(),
                target.credential.clone(),
                target.auth,
                target.timeouts,
                limiter,
            ),
            system_id: target.system_id.clone(),
            system: OnceCell::new(),
        }
    }

    /// The ComputerSystem, discovered once.
    async fn discovered(&self, deadline: Instant) -> Result<&Discovered, PowerError> {
        self.system
            .get_or_try_init(|| async { self.discover_system(deadline).await.map(Discovered::new) })
            .await
    }

    /// The ComputerSystem's URI, discovered once.
    async fn system_uri(&self, deadline: Instant) -> Result<&str, PowerError> {
        Ok(self.discovered(deadline).await?.uri.as_str())
    }

    async fn discover_system(&self, deadline: Instant) -> Result<String, PowerError> {
        let root = self.transport.service_root(deadline).await?;
        let Some(systems) = &root.systems else {
            return Err(PowerError::protocol(
                "the service root has no Systems collection; this Redfish service manages no computer systems",
            ));
        };
        let collection: Collection = self.transport.get_json(&systems.odata_id, deadline).await?;
        let members: Vec<&str> = collection
            .members
            .iter()
            .map(|m| m.odata_id.as_str())
            .collect();
        pick_system(&members, self.system_id.as_deref()).map(str::to_string)
    }

    /// GETs the ComputerSystem, remembering its UUID.
    async fn system(&self, deadline: Instant) -> Result<ComputerSystem, PowerError> {
        let discovered = self.discovered(deadline).await?;
        let system: ComputerSystem = self.transport.get_json(&discovered.uri, deadline).await?;
        discovered.remember_uuid(system.uuid.as_ref());
        Ok(system)
    }

    /// The system's SMBIOS UUID as the BMC reported it in the latest GET of the system
    /// (`None`: absent, null or empty). Network I/O only when the system has not been
    /// read yet (no power reading so far): then discovery and one GET.
    pub async fn system_uuid(&self) -> Result<Option<String>, PowerError> {
        if let Some(known) = self.system.get().and_then(Discovered::known_uuid) {
            return Ok(known);
        }
        self.system(self.transport.deadline()).await?;
        Ok(self.system.get().and_then(Discovered::known_uuid).flatten())
    }

    /// Sends the Reset for `action`; for a reboot without ForceRestart/PowerCycle, sends
    /// ForceOff, waits to read Off, then On.
    async fn reset(&self, action: PowerAction) -> Result<(), PowerError> {
        let deadline = self.transport.deadline();
        let system = self.system(deadline).await?;
        let system_uri = self.system_uri(deadline).await?.to_string();
        let Some(reset) = system.actions.as_ref().and_then(|a| a.reset.as_ref()) else {
            return Err(PowerError::unsupported(format!(
                "{system_uri} advertises no #ComputerSystem.Reset action; this BMC cannot control power over Redfish"
            )));
        };
        let Some(target) = reset.target.clone() else {
            return Err(PowerError::protocol(format!(
                "{system_uri}: #ComputerSystem.Reset has no target URI"
            )));
        };
        let advertised = match (&reset.allowable_values, &reset.action_info) {
            (Some(values), _) => Advertised::List(values.clone()),
            (None, Some(info_uri)) => {
                let info: ActionInfo = self.transport.get_json(info_uri, deadline).await?;
                match info.parameters.into_iter().find(|p| p.name == "ResetType") {
                    Some(p) => p
                        .allowable_values
                        .map_or(Advertised::Nothing, Advertised::List),
                    None => Advertised::Nothing,
                }
            }
            (None, None) => Advertised::Nothing,
        };
        match reset::choose(action, &advertised)? {
            Some(reset_type) => self.post_reset(&target, &reset_type, deadline).await,
            None => {
                self.post_reset(&target, "ForceOff", deadline).await?;
                self.wait_until_off(deadline).await?;
                let on = reset::choose(PowerAction::On, &advertised)?
                    .unwrap_or_else(|| "On".to_string());
                self.post_reset(&target, &on, deadline).await
            }
        }
    }

    async fn post_reset(
        &self,
        target: &str,
        reset_type: &str,
        deadline: Instant,
    ) -> Result<(), PowerError> {
        tracing::info!(endpoint = %self.transport.base(), target, reset_type, "sending Redfish reset");
        let body = serde_json::json!({ "ResetType": reset_type });
        let reply = self
            .transport
            .post(target, &body, deadline)
            .await
            .map_err(|e| {
                PowerError::new(e.kind, format!("ResetType {reset_type}: {}", e.message))
            })?;
        if reply.status == StatusCode::ACCEPTED
            && let Some(monitor) = reply.location.clone()
        {
            return self.follow_task(&monitor, reply, deadline).await;
        }
        Ok(())
    }

    /// Polls a task monitor until it stops answering 202, or the deadline.
    async fn follow_task(
        &self,
        monitor: &str,
        mut reply: Reply,
        deadline: Instant,
    ) -> Result<(), PowerError> {
        loop {
            if reply.status != StatusCode::ACCEPTED {
                return task_result(&reply, monitor);
            }
            let pause = reply
                .retry_after
                .unwrap_or(TASK_POLL)
                .min(Duration::from_secs(5));
            if Instant::now() + pause >= deadline {
                return Err(PowerError::unreachable(format!(
                    "task {monitor} still running at the operation deadline"
                )));
            }
            tokio::time::sleep(pause).await;
            reply = match self.transport.get(monitor, deadline).await {
                Ok(r) => r,
                // Many BMCs delete a finished task monitor; the result is read back
                // from PowerState anyway.
                Err(e) if e.message.contains("HTTP 404") => return Ok(()),
                Err(e) => return Err(e),
            };
        }
    }

    async fn wait_until_off(&self, deadline: Instant) -> Result<(), PowerError> {
        loop {
            if self.read_state(deadline).await? == PowerState::Off {
                return Ok(());
            }
            if Instant::now() + Duration::from_secs(1) >= deadline {
                return Err(PowerError::unreachable(
                    "reboot: the machine did not reach Off before the deadline; not powering it on",
                ));
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    async fn read_state(&self, deadline: Instant) -> Result<PowerState, PowerError> {
        Ok(map_power_state(
            self.system(deadline).await?.power_state.as_ref(),
        ))
    }
}

#[async_trait]
impl PowerDriver for RedfishDriver {
    fn driver_name(&self) -> &'static str {
        "redfish"
    }

    fn endpoint(&self) -> String {
        let base = self
            .transport
            .base()
            .as_str()
            .trim_end_matches('/')
            .to_string();
        match &self.system_id {
            Some(id) => format!("{base} (system {id})"),
            None => base,
        }
    }

    async fn status(&self) -> Result<PowerReading, PowerError> {
        let started = Instant::now();
        let state = self.read_state(self.transport.deadline()).await?;
        Ok(PowerReading {
            state,
            at: crate::clock::now(),
            latency: started.elapsed(),
        })
    }

    async fn power_off(&self) -> Result<(), PowerError> {
        self.reset(PowerAction::Off).await
    }

    async fn power_on(&self) -> Result<(), PowerError> {
        self.reset(PowerAction::On).await
    }

    async fn reboot(&self) -> Result<(), PowerError> {
        self.reset(PowerAction::Reboot).await
    }

    async fn machine_identity(&self) -> Result<MachineIdentity, PowerError> {
        Ok(match self.system_uuid().await? {
            Some(uuid) => MachineIdentity::Uuid(uuid),
            None => MachineIdentity::Unavailable("the BMC's ComputerSystem has no UUID".into()),
        })
    }

    async fn close(&self) {
        self.transport.close().await;
    }
}

/// Picks the system: by id (last path segment), the only member, or an error listing them.
fn pick_system<'a>(members: &[&'a str], wanted: Option<&str>) -> Result<&'a str, PowerError> {
    let listing = || {
        members
            .iter()
            .map(|m| last_segment(m))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match wanted {
        Some(id) => members
            .iter()
            .copied()
            .find(|m| last_segment(m) == id)
            .ok_or_else(|| {
                PowerError::unsupported(format!(
                    "system_id {id:?} is not one of this BMC's systems [{}]",
                    listing()
                ))
            }),
        None => match members {
            [only] => Ok(only),
            [] => Err(PowerError::protocol("the Systems collection is empty")),
            _ => Err(PowerError::unsupported(format!(
                "this BMC manages {} systems [{}]; set system_id for the node to the one that runs it",
                members.len(),
                listing()
            ))),
        },
    }
}

fn last_segment(uri: &str) -> &str {
    uri.trim_end_matches('/').rsplit('/').next().unwrap_or(uri)
}

/// Redfish `PowerState` → [`PowerState`]. Absent, null and unknown strings are Unknown.
pub fn map_power_state(value: Option<&Value>) -> PowerState {
    match value {
        Some(Value::String(s)) => match s.as_str() {
            "On" => PowerState::On,
            "Off" => PowerState::Off,
            "PoweringOn" => PowerState::PoweringOn,
            "PoweringOff" => PowerState::PoweringOff,
            "Paused" => PowerState::Paused,
            other => PowerState::Unknown(crate::untrusted::field(other)),
        },
        Some(Value::Null) | None => PowerState::Unknown(String::new()),
        Some(other) => PowerState::Unknown(crate::untrusted::field(&other.to_string())),
    }
}

/// Interprets a task monitor's final answer.
fn task_result(reply: &Reply, monitor: &str) -> Result<(), PowerError> {
    let Some(body) = &reply.body else {
        return Ok(());
    };
    let Ok(task) = serde_json::from_value::<Task>(body.clone()) else {
        return Ok(());
    };
    match task.task_state.as_deref() {
        Some("Exception" | "Killed" | "Cancelled" | "Interrupted") => {
            let messages: Vec<String> = task
                .messages
                .iter()
                .filter_map(|m| m.get("Message").and_then(Value::as_str).map(str::to_string))
                .collect();
            Err(PowerError::protocol(format!(
                "task {monitor} ended in state {}{}",
                task.task_state.as_deref().unwrap_or("?"),
                if messages.is_empty() {
                    String::new()
                } else {
                    format!(": {}", messages.join("; "))
                }
            )))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_off_maps_to_off() {
        let cases = [
            (Some(Value::String("Off".into())), PowerState::Off),
            (Some(Value::String("On".into())), PowerState::On),
            (
                Some(Value::String("PoweringOff".into())),
                PowerState::PoweringOff,
            ),
            (
                Some(Value::String("PoweringOn".into())),
                PowerState::PoweringOn,
            ),
            (Some(Value::String("Paused".into())), PowerState::Paused),
            (
                Some(Value::String("off".into())),
                PowerState::Unknown("off".into()),
            ),
            (
                Some(Value::String("Standby".into())),
                PowerState::Unknown("Standby".into()),
            ),
            (Some(Value::Null), PowerState::Unknown(String::new())),
            (None, PowerState::Unknown(String::new())),
            (Some(serde_json::json!(0)), PowerState::Unknown("0".into())),
        ];
        for (raw, want) in cases {
            let got = map_power_state(raw.as_ref());
            assert_eq!(got, want, "{raw:?}");
            assert_eq!(got.is_off(), want == PowerState::Off);
        }
    }

    #[test]
    fn odd_uuid_values_never_spoil_a_reading_and_are_remembered_as_sent() {
        let system: ComputerSystem = serde_json::from_value(serde_json::json!({
            "PowerState": "Off", "UUID": 123
        }))
        .expect("a numeric UUID does not fail the ComputerSystem");
        assert_eq!(
            map_power_state(system.power_state.as_ref()),
            PowerState::Off
        );
        let d = Discovered::new("/redfish/v1/Systems/1".into());
        assert_eq!(d.known_uuid(), None, "not read yet");
        d.remember_uuid(system.uuid.as_ref());
        assert_eq!(d.known_uuid(), Some(Some("123".into())));
        for empty in [None, Some(Value::Null), Some(Value::String("  ".into()))] {
            d.remember_uuid(empty.as_ref());
            assert_eq!(d.known_uuid(), Some(None), "{empty:?}");
        }
        d.remember_uuid(Some(&Value::String(
            " 4C4C4544-0031-3510-8052-B2C04F503131 ".into(),
        )));
        assert_eq!(
            d.known_uuid(),
            Some(Some("4C4C4544-0031-3510-8052-B2C04F503131".into()))
        );
    }

    #[test]
    fn system_choice_never_guesses() {
        let one = ["/redfish/v1/Systems/1"];
        assert_eq!(pick_system(&one, None).ok(), Some("/redfish/v1/Systems/1"));
        let many = ["/redfish/v1/Systems/Blade1", "/redfish/v1/Systems/Blade2/"];
        let err = pick_system(&many, None).expect_err("ambiguous");
        assert!(err.message.contains("Blade1, Blade2"), "{err}");
        assert!(err.message.contains("system_id"), "{err}");
        assert_eq!(
            pick_system(&many, Some("Blade2")).ok(),
            Some("/redfish/v1/Systems/Blade2/")
        );
        let err = pick_system(&many, Some("Blade3")).expect_err("missing");
        assert!(
            err.message.contains("Blade3") && err.message.contains("Blade1"),
            "{err}"
        );
        assert!(pick_system(&[], None).is_err());
    }
}
