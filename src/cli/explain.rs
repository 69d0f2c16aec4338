//! `nodefence explain NODE`: what nodefence sees about one node and what it would do,
//! from live sources: the Node and its kubelet Lease, the inventory entry, one fresh
//! power reading, the pause switch, the remediation requests naming the node (with
//! `[remediation] requests = true`) and nodefence's recent Events on the node. The
//! entry's source is shown: the inventory file and line, or the BareMetalHost it was
//! built from (`[metal3] hosts = true`: the hosts are read as `run` reads them).
//!
//! It reads only. The decision shown is the policy applied to what was just read; the
//! running daemon may be further along (its Events, listed last, say where).
//!
//! A node with `fallback` methods (a fencing topology) has every level listed, in the
//! order they are tried (`Level 1` is the primary), with its driver and endpoint or
//! agent, never a secret.

use std::path::Path;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;

use super::cluster_args::ClusterArgs;
use super::exit;
use crate::cluster::access::{Need, unreadable};
use crate::cluster::facts::{
    LAST_RELEASE_ANNOTATION, TAINTED_ANNOTATION, node_facts, parse_last_release,
};
use crate::cluster::pause;
use crate::engine::{Exclusion, Health, OnPoweredOn, Policy};
use crate::power::PowerState;
use crate::power::registry::DriverFactory;

#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The Kubernetes node name.
    pub node: String,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

pub async fn run(config_path: &Path, args: &ExplainArgs) -> u8 {
    let mut config = match super::load_config(config_path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    // With `[metal3] hosts = true`, the BareMetalHosts' entries (the file's win); a
    // host that cannot be read is said, and the file's entries are used alone.
    let metal3 = super::cluster_args::read_metal3_hosts(&mut config, &args.cluster).await;
    // A BMC password kept in a Secret (only this node's is read).
    if let Err(code) = super::cluster_args::read_secrets(
        &mut config,
        &args.cluster,
        std::slice::from_ref(&args.node),
    )
    .await
    {
        return code;
    }
    let client = match args.cluster.client().await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: cannot configure the Kubernetes client: {e:#}");
            return exit::FAILED;
        }
    };
    let name = &args.node;
    let node = match Api::<Node>::all(client.clone()).get_opt(name).await {
        Ok(Some(n)) => n,
        Ok(None) => {
            eprintln!("error: Node {name} does not exist in the cluster");
            return exit::USAGE;
        }
        Err(e) => {
            let need = Need::read("get", "", "nodes", None);
            eprintln!("error: cannot read Node {name}: {}", unreadable(&e, &need));
            return exit::FAILED;
        }
    };
    // Each other source is optional: what cannot be read is said, with the
    // permission it needs, and the rest is still shown.
    let (lease, lease_problem) = match Api::<Lease>::namespaced(client.clone(), "kube-node-lease")
        .get_opt(name)
        .await
    {
        Ok(lease) => (lease, None),
        Err(e) => {
            let need = Need::read(
                "get",
                "coordination.k8s.io",
                "leases",
                Some("kube-node-lease"),
            );
            (None, Some(unreadable(&e, &need)))
        }
    };
    let target = config.inventory.nodes.get(name);
    let mut facts = node_facts(&node, lease.as_ref(), target.is_some());
    let requests = if config.agent.remediation.requests {
        Some(requests_for(client.clone(), name).await)
    } else {
        None
    };
    if let Some(Ok(requests)) = &requests {
        facts.request = crate::remediation::request::merged(requests).map(Box::new);
    }
    let policy = target.map_or(&config.agent.policy, |t| &t.policy);
    let now = crate::clock::now();
    let mut identity = None;
    let mut lines: Vec<(String, String)> = Vec::new();

    lines.push((
        "Node".to_string(),
        format!(
            "{name} (uid {})",
            node.metadata.uid.as_deref().unwrap_or("?")
        ),
    ));
    let power_line;
    let mut power_state = None;
    let mut power_error = None;
    match target {
        None => {
            lines.push((
                "Inventory".to_string(),
                "not in the inventory: nodefence never touches this node".into(),
            ));
            power_line = "-".to_string();
        }
        Some(t) => {
            lines.push(("Source".to_string(), source_line(t)));
            let mut factory = DriverFactory::new(1);
            if let Ok(Some(client)) = &metal3 {
                factory = factory.with_metal3(client.clone());
            }
            let driver = factory.driver(t);
            lines.extend(inventory_lines(t, driver.as_ref().err()));
            match driver {
                Ok(driver) => {
                    // As the daemon reads it: the identity goes with the reading (a
                    // fencing topology: the level that answered).
                    let (machine, reading) = driver.read_with_identity().await;
                    let check = match machine {
                        Ok(machine) => crate::identity::check(&facts.identity, &machine),
                        Err(e) => crate::identity::IdentityCheck::Unknown(format!(
                            "the machine's identity cannot be read: {e}"
                        )),
                    };
                    lines.push(("Identity".to_string(), check.describe()));
                    identity = Some(check);
                    power_line = match reading {
                        Ok(r) => {
                            power_state = Some(r.state.clone());
                            format!("{} (read in {} ms)", r.state, r.latency.as_millis())
                        }
                        Err(e) => {
                            power_error = Some(e.to_string());
                            format!("cannot be read: {e}")
                        }
                    };
                    driver.close().await;
                }
                Err(_) => {
                    power_line = "-".to_string();
                }
            }
        }
    }
    let exclusion = exclusion(&facts, policy);
    lines.push((
        "Excluded".to_string(),
        exclusion.map_or_else(|| "no".into(), |e| e.as_str().to_string()),
    ));
    lines.push((
        "Ready".to_string(),
        match facts.readiness {
            crate::engine::Readiness::Ready => "True".into(),
            crate::engine::Readiness::NotReady { since } => {
                format!("False/Unknown since {}", ago(now, since))
            }
        },
    ));
    lines.push((
        "Kubelet Lease".to_string(),
        match (&lease_problem, facts.lease_renewed) {
            (Some(why), _) => format!("cannot be read: {why}"),
            (None, renewed) => match renewed {
                Some(t) => {
                    let stale = facts
                        .lease_stale_after(policy.lease_stale_after)
                        .is_some_and(|after| now.duration_since(t).unwrap_or_default() >= after);
                    format!(
                        "renewed {}{}",
                        ago(now, t),
                        if stale { " (STALE)" } else { "" }
                    )
                }
                None => "none".into(),
            },
        },
    ));
    let taints: Vec<String> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| {
            format!(
                "{}{}:{}",
                t.key,
                t.value.map(|v| format!("={v}")).unwrap_or_default(),
                t.effect
            )
        })
        .collect();
    lines.push((
        "Taints".to_string(),
        if taints.is_empty() {
            "none".into()
        } else {
            taints.join(", ")
        },
    ));
    if let Some(added) = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TAINTED_ANNOTATION))
    {
        lines.push((
            "Released".to_string(),
            format!("out-of-service taint added by nodefence at {added}"),
        ));
    } else if let Some((added, removed)) = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(LAST_RELEASE_ANNOTATION))
        .and_then(|v| parse_last_release(v))
    {
        lines.push((
            "Last release".to_string(),
            last_release_line(added, removed, crate::clock::now()),
        ));
    }
    let mark = crate::watchdog::mark::of_node(&node);
    let marked_now = mark.as_ref().is_some_and(|m| {
        crate::watchdog::mark::boot_id_of(&node).is_none_or(|boot| m.applies_to(boot))
    });
    lines.push((
        "Watchdog level".to_string(),
        if policy.watchdog_fencing {
            "on (watchdog_fencing): when no power method can be read at all, the node is marked and released once its own hardware watchdog has certainly reset it".into()
        } else {
            "off (watchdog_fencing = false)".into()
        },
    ));
    lines.push((
        "Companion".to_string(),
        companion_line(&client, args, name).await,
    ));
    if let Some(mark) = &mark {
        let boot = crate::watchdog::mark::boot_id_of(&node);
        let whose = match (&mark.boot_id, boot) {
            (Some(marked), Some(now_boot)) if mark.applies_to(now_boot) => {
                format!("for this boot ({marked}): its companion stops feeding its watchdog")
            }
            (Some(marked), _) => {
                format!("for an earlier boot ({marked}): void, the machine was reset since")
            }
            (None, _) => "for every boot (unreadable): its companion stops feeding".into(),
        };
        lines.push((
            "Fencing mark".to_string(),
            format!(
                "{}{whose}",
                mark.at
                    .map(|t| format!("written {}, ", ago(now, t)))
                    .unwrap_or_default()
            ),
        ));
    }
    let paused = match pause::get(client.clone(), &args.cluster.namespace).await {
        Ok(p) => {
            lines.push(("Pause".to_string(), p.describe()));
            p.paused
        }
        Err(e) => {
            let need = Need::read("get", "", "configmaps", Some(&args.cluster.namespace));
            lines.push((
                "Pause".to_string(),
                format!("cannot be read: {}", unreadable(&e, &need)),
            ));
            false
        }
    };
    match &requests {
        None => {}
        Some(Err(why)) => lines.push(("Remediation".to_string(), format!("cannot be read: {why}"))),
        Some(Ok(requests)) if requests.is_empty() => {
            lines.push((
                "Remediation".to_string(),
                "no request names this node".into(),
            ));
        }
        Some(Ok(requests)) => {
            for request in requests {
                lines.push(("Remediation".to_string(), describe_request(request, now)));
            }
        }
    }
    lines.push(("Power now".to_string(), power_line));
    let health = facts.health(now, policy.lease_stale_after);
    lines.push((
        "Decision".to_string(),
        decide(
            &facts,
            health,
            exclusion,
            (
                power_state.as_ref(),
                power_error.as_deref(),
                identity.as_ref(),
            ),
            (paused, marked_now),
            policy,
            now,
        ),
    ));

    let width = lines.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    for (k, v) in &lines {
        println!("{:<width$} {}", format!("{k}:"), crate::untrusted::line(v));
    }
    print_events(client, name, now).await;
    exit::OK
}

/// Where the node's entry came from (the inventory file and line, or the
/// BareMetalHost it was built from), and whose power it is when Metal3 manages it.
fn source_line(t: &crate::config::NodeTarget) -> String {
    use crate::config::Origin;
    let from = match &t.origin {
        Origin::Inventory { .. } => format!("inventory file {}", t.origin),
        Origin::BareMetalHost(_) => t.origin.to_string(),
        Origin::Given => "given by the caller".to_string(),
    };
    match &t.metal3_host {
        Some(host) => format!(
            "{from}; power through Metal3 (BareMetalHost {host}: nodefence's reboot \
             annotation, Off only when the BMC and status.poweredOn agree)"
        ),
        None => from,
    }
}

/// The node's inventory entry: its power method (`Inventory`), or for a fencing
/// topology a summary and one `Level n` line per method, in the order they are
/// tried. `driver_error`: why no driver could be built from the entry, if so.
fn inventory_lines(
    t: &crate::config::NodeTarget,
    driver_error: Option<&crate::power::PowerError>,
) -> Vec<(String, String)> {
    let unusable = driver_error
        .map(|e| format!(" (no usable driver: {e})"))
        .unwrap_or_default();
    if t.fallback.is_empty() {
        let method = super::validate::describe_source(&t.power);
        return vec![("Inventory".into(), format!("{method}{unusable}"))];
    }
    let mut lines = vec![(
        "Inventory".to_string(),
        format!(
            "fencing topology: {} power methods, tried in order until one confirms Off{unusable}",
            t.fallback.len() + 1
        ),
    )];
    for (i, source) in t.sources().enumerate() {
        let role = if i == 0 { " (primary)" } else { "" };
        lines.push((
            format!("Level {}", i + 1),
            format!("{}{role}", super::validate::describe_source(source)),
        ));
    }
    lines
}

fn exclusion(facts: &crate::engine::NodeFacts, policy: &Policy) -> Option<Exclusion> {
    crate::engine::NodeState::new(facts.clone(), crate::clock::now()).exclusion(policy)
}

fn decide(
    facts: &crate::engine::NodeFacts,
    health: Health,
    exclusion: Option<Exclusion>,
    (power, power_error, identity): (
        Option<&PowerState>,
        Option<&str>,
        Option<&crate::identity::IdentityCheck>,
    ),
    (paused, marked): (bool, bool),
    policy: &Policy,
    now: SystemTime,
) -> String {
    if let Some(e) = exclusion {
        return format!("nothing: {}", e.as_str());
    }
    if facts.our_taint {
        return released_decision(facts, policy);
    }
    if marked {
        return "marked for fencing by its watchdog: its companion stops feeding its hardware watchdog, which resets the machine; the leader releases the node once the wait after the mark has passed with a majority of the companions heard throughout (its Events say when), resting on the watchdog, not on an Off reading".into();
    }
    let Some(since) = health.since() else {
        return "nothing: the node is healthy".into();
    };
    if paused {
        return "nothing while fencing is paused (`nodefence resume`)".into();
    }
    // The root cause first: a BMC that cannot be read also leaves the identity
    // unproven, but the identity is not what to fix.
    if let Some(e) = power_error
        && policy.watchdog_fencing
    {
        return format!(
            "the watchdog level: no power method can be read ({e}); the node is marked for fencing (when its companion reports an armed hardware watchdog, {}) and released once the wait after the mark has passed (isolation_timeout + the watchdog's timeout + the drift margin + the allowance) with a majority of the companions heard throughout; the release rests on the watchdog, not on an Off reading",
            if facts.companion_silent.is_some() || facts.live_request().is_some() {
                "now".to_string()
            } else {
                format!(
                    "once the node has been NotReady for {} (unhealthy_after)",
                    humantime::format_duration(policy.unhealthy_after)
                )
            }
        );
    }
    if let Some(e) = power_error {
        return format!(
            "nothing: the BMC cannot be read ({e}); until it answers, the machine is neither proven Off nor proven to be this node's, and nothing is powered off or released (the daemon keeps trying, with backoff)"
        );
    }
    match identity {
        Some(check) if check.is_mismatch() => {
            return "nothing: the inventory maps this node to another machine's BMC; fix the inventory".into();
        }
        Some(check) if !check.is_match() && policy.require_identity => {
            return "nothing: the BMC is not proven to be this node's (require_identity = true)"
                .into();
        }
        _ => {}
    }
    let readings = policy.confirm_readings;
    if let Some(request) = facts.request_timed_out()
        && matches!(power, Some(PowerState::On | PowerState::Paused))
    {
        return format!(
            "no power command: {} timed out (its requester moved on); a machine proven Off is still released",
            request.by
        );
    }
    if let Some(request) = facts.live_request()
        && matches!(power, Some(PowerState::On | PowerState::Paused))
    {
        if policy.on_powered_on == OnPoweredOn::Wait {
            return "alert only: the machine is On and on_powered_on = \"wait\"".into();
        }
        return format!(
            "power off (ForceOff) now, as {} asks, unless storm protection or rate limits hold it; then confirm Off and release",
            request.by
        );
    }
    match (power, health) {
        (Some(PowerState::Off), _) => format!(
            "release after {readings} consecutive Off readings newer than the last sign of life ({})",
            ago(now, since)
        ),
        (Some(PowerState::On | PowerState::Paused), Health::LeaseStale { .. }) => {
            "wait: the machine is On and only the Lease is stale (never powered off on that alone)"
                .into()
        }
        (Some(PowerState::On | PowerState::Paused), Health::CompanionSilent { .. }) => {
            "wait: the machine is On and only its companion is silent (never powered off on that alone)"
                .into()
        }
        (
            Some(PowerState::On | PowerState::Paused),
            Health::NotReady {
                not_ready_since, ..
            },
        ) => {
            if policy.on_powered_on == OnPoweredOn::Wait {
                return "alert only: the machine is On and on_powered_on = \"wait\"".into();
            }
            let at = not_ready_since + policy.unhealthy_after;
            if now >= at {
                "power off (ForceOff) now unless storm protection or rate limits hold it, then confirm Off and release".into()
            } else {
                format!(
                    "power off in {} (unhealthy_after), then confirm Off and release",
                    humantime::format_duration(Duration::from_secs(
                        at.duration_since(now).unwrap_or_default().as_secs()
                    ))
                )
            }
        }
        (Some(other), _) => format!("nothing yet: the power state {other} is neither On nor Off"),
        (None, _) => "nothing: the power state is unknown".into(),
    }
}

/// The requests naming `node`: by name or annotation, or (Cluster API) as nodefence
/// resolved and reported them (`status.nodeName`).
/// The node's companion as the leader last published it (`nodefence status
/// --cluster` shows the same): beating, silent or stopped, its watchdog's driver and
/// granted timeout, marked.
async fn companion_line(client: &kube::Client, args: &ExplainArgs, node: &str) -> String {
    let store = crate::cluster::records::RecordStore::new(
        client.clone(),
        &args.cluster.namespace,
        crate::cluster::leader::Leadership::never(),
    );
    match store.load_companions().await {
        Ok(Some(all)) => match all.iter().find(|c| c.node == node) {
            Some(c) => format!("{} (as the leader last published it)", c.describe()),
            None => "none heard: no companion beats for this node (is the DaemonSet's pod running, and can it say hello to nodefence?)".into(),
        },
        Ok(None) => "none published (nodefence runs without --companion-listen, or no companion has beaten yet)".into(),
        Err(e) => format!(
            "cannot read the ConfigMap {}/{}: {e}",
            args.cluster.namespace,
            crate::cluster::records::STATE_CONFIGMAP
        ),
    }
}

async fn requests_for(
    client: kube::Client,
    node: &str,
) -> Result<Vec<crate::remediation::KeptRequest>, String> {
    use crate::remediation::{KeptRequest, NodeFenceRemediation, RequestTarget};
    let api: Api<NodeFenceRemediation> = Api::all(client);
    let list = api.list(&ListParams::default()).await.map_err(|e| {
        let need = Need::read(
            "list",
            crate::remediation::types::GROUP,
            "nodefenceremediations",
            None,
        );
        unreadable(&e, &need)
    })?;
    Ok(list
        .items
        .iter()
        .filter_map(KeptRequest::new)
        .filter(|r| match &r.target {
            RequestTarget::Node(n) => n == node,
            RequestTarget::Machine { .. } => r.status_node.as_deref() == Some(node),
        })
        .collect())
}

/// One request and its conditions, on one line.
fn describe_request(request: &crate::remediation::KeptRequest, now: SystemTime) -> String {
    use crate::remediation::condition::{PROCESSING, SUCCEEDED};
    let mut out = format!(
        "{}, created {}",
        request.describe(),
        ago(now, request.created)
    );
    if let Some(at) = &request.timed_out {
        out.push_str(&format!("; TIMED OUT at {at} (no power command any more)"));
    }
    if request.deleting {
        out.push_str("; being deleted");
    }
    for kind in [SUCCEEDED, PROCESSING] {
        match request.condition(kind) {
            Some(c) => out.push_str(&format!(
                "; {kind}={} {}: {}",
                c.status,
                c.reason,
                crate::untrusted::field(&c.message)
            )),
            None => out.push_str(&format!("; {kind} not reported yet")),
        }
    }
    out
}

fn ago(now: SystemTime, t: SystemTime) -> String {
    let d = now.duration_since(t).unwrap_or_default();
    format!(
        "{} ({} ago)",
        humantime::format_rfc3339_seconds(t),
        humantime::format_duration(Duration::from_secs(d.as_secs()))
    )
}

async fn print_events(client: kube::Client, node: &str, now: SystemTime) {
    let events: Api<Event> = Api::all(client);
    let list = match events.list(&ListParams::default()).await {
        Ok(list) => list,
        Err(e) => {
            let need = Need::read("list", "events.k8s.io", "events", None);
            println!("Events:         cannot be read: {}", unreadable(&e, &need));
            return;
        }
    };
    let mut mine: Vec<&Event> = list
        .items
        .iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node))
        .filter(|e| e.reporting_controller.as_deref() == Some("nodefence"))
        .collect();
    mine.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    if mine.is_empty() {
        println!("Events:         none from nodefence");
        return;
    }
    println!("Events (nodefence, oldest first):");
    for e in mine.iter().rev().take(15).rev() {
        let when = e
            .event_time
            .as_ref()
            .map(|t| ago(now, SystemTime::from(t.0)))
            .unwrap_or_default();
        println!(
            "  {when}  {:<7} {:<24} {}",
            e.type_.as_deref().unwrap_or(""),
            crate::untrusted::field(e.reason.as_deref().unwrap_or("")),
            crate::untrusted::line(e.note.as_deref().unwrap_or(""))
        );
    }
}

/// `explain`'s account of the release recorded as ended at `removed`: whether a
/// request made before that end is taken as served by it (not when the end lies in
/// the future beyond the replicas' clock tolerance).
fn last_release_line(added: Option<SystemTime>, removed: SystemTime, now: SystemTime) -> String {
    let added = added.map_or_else(
        || "?".to_string(),
        |a| humantime::format_rfc3339_seconds(a).to_string(),
    );
    let believed = crate::engine::release_end_believed(removed, now);
    format!(
        "{added} to {} (out-of-service taint added and removed by nodefence; {})",
        humantime::format_rfc3339_seconds(removed),
        if believed {
            "a remediation request made before its end was served by it"
        } else {
            "its end is in the future, beyond the replicas' clock tolerance: not believed, it serves no request"
        }
    )
}

/// The decision for a node nodefence released: what its return says, or will say,
/// about the proof ([`crate::engine::returned`]).
fn released_decision(facts: &crate::engine::NodeFacts, policy: &Policy) -> String {
    use crate::engine::returned::PROOF_CHECKED_ANNOTATION;
    if let Some(who) = facts.proof_checked() {
        return format!(
            "released; checked by an operator ({who}): the taint is removed once the node has been Ready for recovered_after"
        );
    }
    if facts.proof_contradicted() {
        return format!(
            "FALSE RELEASE: the node came back with the boot its release ended ({}), so its machine never went down; the taint stays and no power command is sent to it until someone checks the application's data and the power source and annotates the Node {PROOF_CHECKED_ANNOTATION}=\"<who, why>\"",
            facts.boot_id.as_deref().unwrap_or("unknown")
        );
    }
    match facts.released_boot() {
        Some(ended) => match ended.boot.as_deref().filter(|b| !b.trim().is_empty()) {
            Some(boot) => format!(
                "released on {} (the boot it ended: {boot}); the taint is removed once the node is back with another boot and has been Ready for recovered_after; back with the same one, the release was false and the taint stays",
                ended.proof.describe()
            ),
            None if policy.unfence_without_boot_id => "released; the node reports no boot ID, so its return cannot show that the machine went down; unfence_without_boot_id: the taint is removed once it has been Ready for recovered_after".into(),
            None => format!(
                "released; the node reports no boot ID, so its return cannot show that the machine went down: the taint stays until someone checks it ({PROOF_CHECKED_ANNOTATION}) or unfence_without_boot_id is set"
            ),
        },
        None => "already released (by a version that kept no boot); the taint is removed once the node has been Ready for recovered_after".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_released_node_says_what_its_return_must_show_and_a_false_release_reads_like_an_incident() {
        use crate::engine::returned::{EndedBoot, ProofKind};
        let mut facts = crate::engine::NodeFacts::ready("db-1", std::time::SystemTime::UNIX_EPOCH);
        facts.our_taint = true;
        facts.boot_id = Some("b00t-1".into());
        let policy = Policy::default();
        assert!(released_decision(&facts, &policy).contains("kept no boot"));
        facts.returned_mut().released_boot = Some(EndedBoot {
            since: std::time::SystemTime::UNIX_EPOCH,
            boot: Some("b00t-1".into()),
            proof: ProofKind::OffReadings,
        });
        let d = released_decision(&facts, &policy);
        assert!(d.contains("b00t-1") && d.contains("another boot"), "{d}");
        facts.returned_mut().proof_contradicted = true;
        let d = released_decision(&facts, &policy);
        assert!(
            d.starts_with("FALSE RELEASE") && d.contains("nodefence.io/proof-checked"),
            "{d}"
        );
        facts.returned_mut().proof_checked = Some("alice".into());
        assert!(released_decision(&facts, &policy).contains("checked by an operator (alice)"));
    }
    use crate::config::{
        Credential, ExecTarget, NodeTarget, PowerSource, RedfishAuth, RedfishTarget, SecretSource,
        Timeouts, TlsSettings,
    };

    fn credential(user: &str, password: &str) -> Credential {
        Credential {
            username: user.into(),
            password: password.to_string().into(),
            source: SecretSource::Inline,
        }
    }

    fn node(fallback: Vec<PowerSource>) -> NodeTarget {
        NodeTarget {
            name: "db-1".into(),
            origin: Default::default(),
            metal3_host: None,
            group: None,
            power: PowerSource::Redfish(RedfishTarget {
                endpoint: "https://db-1-bmc".parse().unwrap(),
                system_id: Some("1".into()),
                credential: credential("fence", "rf-Secret-1"),
                auth: RedfishAuth::Auto,
                tls: TlsSettings::default(),
                timeouts: Timeouts::default(),
            }),
            fallback,
            policy: Default::default(),
        }
    }

    #[test]
    fn every_level_of_a_topology_is_listed_in_order_without_secrets() {
        let pdu = PowerSource::Exec(ExecTarget {
            agent: "/usr/sbin/fence_apc".into(),
            options: [("ip", "pdu-1"), ("plug", "7"), ("community", "c-Secret-2")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            credential: Some(credential("apc", "pdu-Secret-3")),
            timeouts: Timeouts::default(),
        });
        let lines = inventory_lines(&node(vec![pdu]), None);
        let expected = [
            (
                "Inventory",
                "fencing topology: 2 power methods, tried in order until one confirms Off",
            ),
            ("Level 1", "redfish https://db-1-bmc (system 1) (primary)"),
            ("Level 2", "exec /usr/sbin/fence_apc ip=pdu-1 plug=7"),
        ];
        let got: Vec<(&str, &str)> = lines
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(got, expected);
        assert!(!format!("{lines:?}").contains("Secret"), "{lines:?}");

        // One method: the Inventory line alone, as before; a driver that cannot be
        // built says why on it.
        let err = crate::power::PowerError::config("no password yet");
        let lines = inventory_lines(&node(Vec::new()), Some(&err));
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(lines[0].0, "Inventory");
        assert_eq!(
            lines[0].1,
            "redfish https://db-1-bmc (system 1) (no usable driver: config: no password yet)"
        );
    }

    #[test]
    fn a_last_release_ending_far_in_the_future_is_said_not_to_be_believed() {
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let added = now - Duration::from_secs(300);
        let ended = now - Duration::from_secs(60);
        let line = last_release_line(Some(added), ended, now);
        assert!(
            line.starts_with("2027-01-15T07:55:00Z to 2027-01-15T07:59:00Z"),
            "{line}"
        );
        assert!(line.contains("was served by it"), "{line}");
        assert!(last_release_line(None, ended, now).starts_with("? to "));
        let far = now + crate::engine::LAST_RELEASE_CLOCK_TOLERANCE + Duration::from_secs(1);
        let line = last_release_line(Some(added), far, now);
        assert!(
            line.contains("not believed") && !line.contains("was served"),
            "{line}"
        );
    }
}
