//! Scenario 5, NodeHealthCheck asks, nodefence proves: the medik8s NodeHealthCheck
//! operator (its stand-in) decides that a node is unhealthy and hands it to nodefence
//! with a `NodeFenceRemediation`, as the operator guide's "With NodeHealthCheck" sets
//! it up. nodefence answers requests (`[remediation] requests = true`) and its own
//! `unhealthy_after` is ten minutes, so the machine is powered off because the request
//! asked, not on nodefence's clock; the release still waits for the Off proof.
//!
//! The network of db-0's node is cut (the machine stays On). NodeHealthCheck sees
//! `Ready=Unknown` for its duration and creates `nodefence/<node>`; nodefence sends
//! ForceOff at once, confirms Off, releases the node (taint), db-0 runs elsewhere, and
//! the request reports `Succeeded=True`. The node comes back (power and network);
//! NodeHealthCheck deletes the request, and nodefence's finalizer holds it until its
//! taint is removed.
//!
//! The NodeHealthCheck's durations are divided by the demo's speed, as nodefence's
//! are; the stand-in's own clockwork is NHC's, in real time: it counts from a
//! `lastTransitionTime` cut to the second and looks again one second after the
//! duration. So the request comes up to two real seconds after the duration, which
//! the narration shows as it is, in cluster time ("Ready Unknown for 1m 4s since
//! NotReady (its duration: 1m)"), more at higher speeds.

use std::time::Duration;

use nodefence_mocks::kube::sim::SimEventKind;
use nodefence_mocks::redfish::MockPower;
use nodefence_mocks::remediation::nhc::{self, NodeHealthCheck};

use super::{Carry, Ctx, Outcome, RequestOutcome, db_node, make_whole, secs};
use crate::demo::cluster::{NHC_NAME, REMEDIATION_NAMESPACE, REMEDIATION_TEMPLATE};
use crate::demo::narrate::span;
use crate::demo::timeline::{Fact, RequestChange, Step};

/// How far apart (cluster time) two watches may report the request gone and the taint
/// removed, in the wrong order, without that being the wrong order of the writes.
const GONE_ORDER_SLACK: Duration = Duration::from_secs(5);

/// How long `Ready` must be False or Unknown before NodeHealthCheck asks (cluster
/// time). The operator guide's example says 300s (NHC's default); a minute keeps the
/// demo short and is still far below nodefence's own `unhealthy_after` here.
pub const NHC_DURATION: Duration = Duration::from_secs(60);

/// The NodeHealthCheck as the operator guide configures it (workers only,
/// `minHealthy: 51%`, `Ready` False or Unknown for [`NHC_DURATION`], the template
/// `nodefence/nodefence`), its durations divided by the demo's `speed` as every
/// other timing is.
pub fn node_health_check(speed: f64) -> NodeHealthCheck {
    let duration = NHC_DURATION.div_f64(speed);
    NodeHealthCheck::new(NHC_NAME)
        .min_healthy(nhc::percent(51))
        .select_expression("node-role.kubernetes.io/control-plane", "DoesNotExist", &[])
        .unhealthy_condition("Ready", "False", duration)
        .unhealthy_condition("Ready", "Unknown", duration)
        .remediation_template(nhc::template_ref(
            "remediation.nodefence.io/v1alpha1",
            "NodeFenceRemediationTemplate",
            REMEDIATION_NAMESPACE,
            REMEDIATION_TEMPLATE,
        ))
}

pub async fn run(ctx: &Ctx<'_>, out: &mut Outcome, carry: &mut Carry) -> Result<(), String> {
    make_whole(ctx).await?;
    ctx.world
        .create_node_health_check(node_health_check(ctx.world.speed))
        .await
        .map_err(|e| format!("{e:#}"))?;
    let result = play(ctx, out).await;
    ctx.world.delete_node_health_check().await;
    carry.fenced = None;
    result
}

async fn play(ctx: &Ctx<'_>, out: &mut Outcome) -> Result<(), String> {
    let world = ctx.world;
    let w = world.wording();
    let victim = db_node(world)?;
    let request_name = format!("{REMEDIATION_NAMESPACE}/{victim}");
    out.node = Some(victim.clone());
    ctx.intro(&[
        "NodeHealthCheck (NHC) decides when a node is unhealthy and hands it to a remediator, here"
            .to_string(),
        format!(
            "nodefence (template {REMEDIATION_NAMESPACE}/{REMEDIATION_TEMPLATE}). NodeHealthCheck {NHC_NAME}, as the operator"
        ),
        format!(
            "guide has it: workers only, minHealthy 51%, Ready False or Unknown for {} (the guide: 300s).",
            span(NHC_DURATION)
        ),
        format!(
            "nodefence answers requests ([remediation] requests = true); its own unhealthy_after is {},",
            span(w.unhealthy_after)
        ),
        format!(
            "so here only the request can have a machine powered off. db-0 runs on {victim}. Its network"
        ),
        "is cut; the machine stays On.".to_string(),
    ]);
    let mark = world.reset_mark();
    let t0 = crate::clock::now();
    ctx.story.begin(t0);
    ctx.story.you(
        &victim,
        "cuts the network: kubelet unreachable, machine still On",
    );
    world.set_network(&victim, false);

    let at = |s: &Step| ctx.elapsed(t0, s.at);
    let is_request = |s: &Step, change: &dyn Fn(&RequestChange) -> bool| match &s.fact {
        Fact::Request { name, change: c } => *name == request_name && change(c),
        _ => false,
    };
    let soon = w.grace_period + NHC_DURATION + Duration::from_secs(120);
    let created = ctx
        .wait_step(
            &format!("NodeFenceRemediation {request_name} from NodeHealthCheck"),
            soon,
            t0,
            |s| is_request(s, &|c| *c == RequestChange::Created),
        )
        .await?;
    let forced = ctx
        .wait_step("ForceOff at the BMC", Duration::from_secs(60), t0, |s| {
            s.node == victim
                && matches!(&s.fact, Fact::Reset { reset_type } if reset_type == "ForceOff")
        })
        .await?;
    if forced.at < created.at {
        return Err(format!(
            "ForceOff at +{} came before the request (+{})",
            secs(at(&forced)),
            secs(at(&created))
        ));
    }
    let released = ctx
        .wait_step(
            "out-of-service taint from nodefence",
            Duration::from_secs(120),
            t0,
            |s| s.node == victim && s.is_nodefence("Released"),
        )
        .await?;
    out.released_after = Some(at(&released));
    ctx.wait(
        "db-0 Running on another node",
        Duration::from_secs(600),
        || world.db_running_on().is_some_and(|n| n != victim),
    )
    .await?;
    let now_on = db_node(world)?;
    out.running_after = ctx
        .pod_running_elsewhere(t0, &victim)
        .or_else(|| Some(ctx.elapsed(t0, crate::clock::now())));
    let succeeded = ctx
        .wait_step(
            "Succeeded=True on the request",
            Duration::from_secs(60),
            t0,
            |s| {
                is_request(s, &|_| true)
                    && s.request_condition(crate::remediation::condition::SUCCEEDED, "True")
            },
        )
        .await?;

    // The node comes back, as the other scenarios restore one: power, and network.
    let back = ctx.story.you(
        &victim,
        "restores power (BMC: On) and reconnects the network",
    );
    world
        .set_power(&victim, MockPower::On)
        .map_err(|e| e.to_string())?;
    world.set_network(&victim, true);
    let ready = ctx
        .wait_step("Ready node", Duration::from_secs(120), back, |s| {
            s.node == victim && s.is_sim(SimEventKind::NodeReady)
        })
        .await?;
    let deleted = ctx
        .wait_step(
            "deletion of the request by NodeHealthCheck",
            Duration::from_secs(120),
            t0,
            |s| {
                is_request(s, &|c| {
                    matches!(c, RequestChange::Deleting | RequestChange::Gone)
                })
            },
        )
        .await?;
    let untainted = ctx
        .wait_step(
            "taint removal by nodefence",
            w.recovered_after + Duration::from_secs(120),
            back,
            |s| s.node == victim && s.is_nodefence("TaintRemoved"),
        )
        .await?;
    out.untainted_after = Some(at(&untainted));
    let gone = ctx
        .wait_step("the request gone", Duration::from_secs(60), t0, |s| {
            is_request(s, &|c| *c == RequestChange::Gone)
        })
        .await?;
    let untaint = ctx
        .wait("node without the taint", Duration::from_secs(60), || {
            !world.out_of_service(&victim)
        })
        .await;
    out.taint_left = Some(world.out_of_service(&victim));
    untaint?;
    out.power_commands = world.resets_since(mark);
    out.request = Some(RequestOutcome {
        name: request_name.clone(),
        created_after: Some(at(&created)),
        conditions: ctx
            .story
            .all(t0, |s| {
                is_request(s, &|c| matches!(c, RequestChange::Conditions(_)))
            })
            .iter()
            .filter_map(|s| match &s.fact {
                Fact::Request {
                    change: RequestChange::Conditions(cs),
                    ..
                } => Some(
                    cs.iter()
                        .map(|(t, st, r)| format!("{t}={st} ({r})"))
                        .collect::<Vec<_>>()
                        .join(", "),
                ),
                _ => None,
            })
            .collect(),
        succeeded_after: Some(at(&succeeded)),
        deleted_after: Some(at(&deleted)),
        gone_after: Some(at(&gone)),
    });

    let expected = vec![(victim.clone(), "ForceOff".to_string())];
    if out.power_commands != expected {
        return Err(format!(
            "expected exactly one ForceOff to {victim}, the BMC received {:?}",
            out.power_commands
        ));
    }
    if deleted.at < released.at {
        return Err("NodeHealthCheck deleted the request before the node was released".into());
    }
    // Two watches (the request's, the Node's) report these: a few hundred milliseconds
    // of delivery order apart is not an order of the writes (nodefence removes its
    // finalizer only after it has seen its taint gone). The wrong order this guards
    // against (the finalizer let go with the taint still on) is the node's 30 s
    // `recovered_after` or more apart.
    if gone.at + GONE_ORDER_SLACK < untainted.at {
        return Err("the request was gone before nodefence removed its taint".into());
    }
    if world
        .request_exists(&victim)
        .await
        .map_err(|e| format!("{e:#}"))?
    {
        return Err(format!("{request_name} is still there"));
    }
    let not_ready = ctx
        .story
        .last(created.at, |s| {
            s.node == victim && s.is_sim(SimEventKind::NodeNotReady)
        })
        .map(|s| at(&s));
    out.summary = format!(
        "NodeHealthCheck asked at +{} (NotReady at +{}, past its {}); nodefence forced {victim} off at +{} \
         (its own unhealthy_after: {}), confirmed Off, released at +{}; db-0 Running on {now_on} at +{}; \
         Succeeded=True at +{}. Back at +{} (Ready at +{}): NHC deleted the request at +{}, held by \
         nodefence's finalizer until its taint was removed at +{} (gone at +{}).",
        secs(at(&created)),
        not_ready.map_or_else(|| "?".to_string(), secs),
        span(NHC_DURATION),
        secs(at(&forced)),
        span(w.unhealthy_after),
        secs(at(&released)),
        secs(out.running_after.unwrap_or_default()),
        secs(at(&succeeded)),
        secs(ctx.elapsed(t0, back)),
        secs(at(&ready)),
        secs(at(&deleted)),
        secs(at(&untainted)),
        secs(at(&gone)),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_health_check_is_the_guides_scaled() {
        let check = node_health_check(10.0);
        let spec = &check.spec;
        assert_eq!(spec.min_healthy, Some(nhc::percent(51)));
        let conditions = spec.unhealthy_conditions.as_ref().unwrap();
        let pairs: Vec<(&str, &str, &str)> = conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str(), c.duration.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [("Ready", "False", "6s"), ("Ready", "Unknown", "6s")],
            "one minute of cluster time at 10x"
        );
        let template = spec.remediation_template.as_ref().unwrap();
        assert_eq!(template.namespace.as_deref(), Some("nodefence"));
        assert_eq!(
            template.kind.as_deref(),
            Some("NodeFenceRemediationTemplate")
        );
        let selector = spec.selector.match_expressions.as_ref().unwrap();
        assert_eq!(selector[0].operator, "DoesNotExist");
    }
}
