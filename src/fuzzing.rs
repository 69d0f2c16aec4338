//! Entry points for the fuzz targets in `fuzz/` (`cargo fuzz`): each takes bytes the
//! way nodefence meets them from outside (a configuration file, a BMC's reply, a fence
//! agent's output, a Kubernetes object) and must return: an error is fine, a panic or
//! a hang is a bug. They go through the same functions the daemon uses. Not a stable
//! API; hidden from the documentation.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use serde_json::Value;

use crate::identity::{self, MachineIdentity, NodeIdentity};
use crate::power::PowerAction;
use crate::power::redfish::{model, redirect, reset};

mod heartbeat;
pub use heartbeat::{Tally, heartbeat_datagrams, token_review};

/// Loads `nodefence.toml` and `inventory.toml` from these bytes with the real loader.
/// A configuration that loads must also build every node's driver and the daemon's
/// permission list: what `validate` accepts, `run` must be able to start with.
pub fn config(agent: &[u8], inventory: &[u8]) {
    // One private directory per process, rewritten for each input.
    let dir = std::env::temp_dir().join(format!("nodefence-fuzz-{}", std::process::id()));
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let agent_path = dir.join("nodefence.toml");
    if std::fs::write(&agent_path, agent).is_err()
        || std::fs::write(dir.join("inventory.toml"), inventory).is_err()
    {
        return;
    }
    let Ok(config) = crate::config::load_with_env(&agent_path, &|_| None) else {
        return;
    };
    let factory =
        crate::power::registry::DriverFactory::new(config.agent.power.max_concurrent_requests)
            .with_confirm(config.agent.power.confirm);
    for target in config.inventory.nodes.values() {
        // An error is an answer (e.g. a fence agent that is not installed here).
        let _ = factory.driver(target);
        // Every timer built from the policy must fit an Instant.
        let p = &target.policy;
        for d in [
            p.unhealthy_after,
            p.release_off_after,
            p.power_off_retry_after,
            p.remind_every,
            p.release_timeout,
            p.recovered_after,
            p.max_query_backoff,
            p.confirm_interval * p.confirm_readings,
        ] {
            assert!(
                std::time::Instant::now().checked_add(d * 4).is_some(),
                "{d:?} overflows a timer"
            );
        }
    }
    let _ = crate::cluster::access::needed(&config, "nodefence", "nodefence", false);
    let _ = crate::cluster::access::components(&config);
    let _ = crate::cluster::access::secrets(&config);
}

/// A Redfish reply body, read as every kind of resource nodefence reads.
pub fn redfish_body(bytes: &[u8]) {
    let Ok(body) = serde_json::from_slice::<Value>(bytes) else {
        return;
    };
    let _ = model::error_message(&body);
    let _ = model::is_insufficient_privilege(&body);
    let _ = crate::power::redfish::map_power_state(body.get("PowerState"));
    let _ = serde_json::from_value::<model::ServiceRoot>(body.clone());
    let _ = serde_json::from_value::<model::Collection>(body.clone());
    let _ = serde_json::from_value::<model::Task>(body.clone());
    if let Ok(info) = serde_json::from_value::<model::ActionInfo>(body.clone()) {
        for p in info.parameters {
            if let Some(values) = p.allowable_values {
                for action in [PowerAction::Off, PowerAction::On, PowerAction::Reboot] {
                    let _ = reset::choose(action, &reset::Advertised::List(values.clone()));
                }
            }
        }
    }
    if let Ok(system) = serde_json::from_value::<model::ComputerSystem>(body) {
        let _ = crate::power::redfish::map_power_state(system.power_state.as_ref());
        if let Some(Value::String(uuid)) = system.uuid {
            uuid_pair(&uuid, "4C4C4544-0042-3510-8053-B7C04F333231");
        }
        if let Some(values) = system
            .actions
            .and_then(|a| a.reset)
            .and_then(|r| r.allowable_values)
        {
            for action in [PowerAction::Off, PowerAction::On, PowerAction::Reboot] {
                let _ = reset::choose(action, &reset::Advertised::List(values.clone()));
            }
        }
    }
}

/// A redirect's `Location` header, followed (or refused) from a BMC's service root.
pub fn redfish_location(bytes: &[u8]) {
    let Ok(location) = std::str::from_utf8(bytes) else {
        return;
    };
    let Ok(base) = url::Url::parse("https://bmc.example:8443/redfish/v1/") else {
        return;
    };
    for status in [301u16, 302, 303, 307, 308] {
        let Ok(status) = reqwest::StatusCode::from_u16(status) else {
            continue;
        };
        if let Ok(next) =
            redirect::next_hop(&base, &base, &reqwest::Method::GET, status, Some(location))
        {
            assert_eq!(next.origin(), base.origin(), "a redirect left the BMC");
            let _ = redirect::path_of(&next);
        }
    }
}

/// An EC2 Query API reply.
pub fn ec2_xml(bytes: &[u8]) {
    let Ok(xml) = std::str::from_utf8(bytes) else {
        return;
    };
    let _ = crate::power::aws::xml::root_name(xml);
    let _ = crate::power::aws::xml::describe_instances(xml);
    let _ = crate::power::aws::xml::state_change(xml, "StopInstancesResponse", "i-0abc");
    let _ = crate::power::aws::xml::api_error(xml);
    let _ = crate::power::aws::xml::clip(xml);
}

/// What a fence agent printed (stdout, then stderr after the first NUL), judged for
/// `status` and for a command, with a password to redact.
pub fn fence_agent_output(bytes: &[u8], exit_code: i32) {
    crate::power::exec::judge_for_fuzzing(bytes, exit_code);
}

/// A Node and a Lease (the same bytes read as each) turned into the engine's facts,
/// judged for health, and the Node's identity checked against machine identities.
pub fn kubernetes_objects(bytes: &[u8]) {
    let node = serde_json::from_slice::<Node>(bytes).ok();
    let lease = serde_json::from_slice::<Lease>(bytes).ok();
    let Some(node) = node else {
        return;
    };
    let facts = crate::cluster::facts::node_facts(&node, lease.as_ref(), true);
    let now = crate::clock::now();
    let _ = facts.health(now, Some(crate::engine::LeaseStaleAfter::MissedRenewal));
    let _ = facts.health(
        now,
        Some(crate::engine::LeaseStaleAfter::Fixed(Duration::from_secs(
            25,
        ))),
    );
    let _ = facts.health(now, None);
    let ident = NodeIdentity::from_node(&node);
    for machine in [
        MachineIdentity::Uuid("4c4c4544-0042-3510-8053-b7c04f333231".into()),
        MachineIdentity::InstanceId("i-0123456789abcdef0".into()),
        MachineIdentity::Unavailable(String::new()),
    ] {
        let _ = identity::check(&ident, &machine);
    }
}

/// Two UUID strings as a node and a BMC report them, compared both ways: the check
/// is symmetric in what it decides.
pub fn uuid_pair(a: &str, b: &str) {
    let node = |u: &str| NodeIdentity {
        system_uuid: Some(u.to_string()),
        ..NodeIdentity::default()
    };
    let ab = identity::check(&node(a), &MachineIdentity::Uuid(b.to_string()));
    let ba = identity::check(&node(b), &MachineIdentity::Uuid(a.to_string()));
    assert_eq!(ab.is_match(), ba.is_match(), "{a:?} vs {b:?}");
    assert_eq!(ab.is_mismatch(), ba.is_mismatch(), "{a:?} vs {b:?}");
}
