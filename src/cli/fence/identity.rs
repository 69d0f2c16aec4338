//! `fence`'s identity check: a power command typed by hand reaches only a machine
//! proven to be the node's own, by the check the daemon runs before each of its
//! commands ([`crate::identity::check`]), on the reading the command is decided on.
//!
//! - **Match**: the command is sent.
//! - **Mismatch** (the entry reaches another machine): refused, always. No flag
//!   overrides it: the message names both machines and the fix is the inventory's.
//! - **Unknown** (no cluster access, no such Node, a source that cannot tell which
//!   machine it controls): refused unless `--skip-identity-check`, the flag that names
//!   what it skips, for a machine whose Node is gone or never joined.

use crate::cli::cluster_args::NodeLookup;
use crate::identity::{self, IdentityCheck, MachineIdentity};
use crate::power::{PowerAction, PowerError};

/// The flag that lets an unproven (never a mismatched) machine be powered.
pub(super) const SKIP_FLAG: &str = "--skip-identity-check";

/// The check of `node`'s Node (`lookup`) against the machine its entry reaches.
pub(super) fn check(
    node: &str,
    lookup: &NodeLookup,
    machine: &Result<MachineIdentity, PowerError>,
) -> IdentityCheck {
    let ours = match lookup {
        NodeLookup::Found(identity) => identity,
        NodeLookup::Absent => {
            return IdentityCheck::Unknown(format!(
                "Node {node} does not exist in the cluster (its machine never joined, or the \
                 Node was deleted)"
            ));
        }
        NodeLookup::NoAccess(why) => return IdentityCheck::Unknown(why.clone()),
    };
    match machine {
        Ok(m) => identity::check(ours, m),
        Err(e) => IdentityCheck::Unknown(format!("the machine's identity could not be read ({e})")),
    }
}

/// What `fence` does with a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Decision {
    /// Proven: the node's own machine.
    Proven,
    /// Not proven, and the operator skipped the proof by name.
    Skipped,
    /// Not sent: the operator's message (what was found, why, and what to do).
    Refused(String),
}

/// Whether `action` may reach the machine `endpoint` names, given `check` and whether
/// the operator passed [`SKIP_FLAG`].
pub(super) fn decide(
    node: &str,
    action: PowerAction,
    endpoint: &str,
    check: &IdentityCheck,
    machine: &Result<MachineIdentity, PowerError>,
    lookup: &NodeLookup,
    skip: bool,
) -> Decision {
    match check {
        IdentityCheck::Match(_) => Decision::Proven,
        IdentityCheck::Unknown(_) if skip => Decision::Skipped,
        IdentityCheck::Mismatch {
            node: theirs,
            machine: reached,
        } => {
            let (reaches, reports) = match machine {
                Ok(MachineIdentity::InstanceId(_)) => (
                    format!("instance {}", quoted(reached)),
                    format!("the instance {} (spec.providerID)", quoted(theirs)),
                ),
                _ => (
                    format!("machine UUID {}", quoted(reached)),
                    format!("systemUUID {}", quoted(theirs)),
                ),
            };
            Decision::Refused(format!(
                "refusing to power {action} node {node}: its inventory entry reaches another \
                 machine\n  the entry ({endpoint}) reaches {reaches}\n  Node {node} reports \
                 {reaches_node}\n  help: fix node {node}'s inventory entry (endpoint, system_id, \
                 instance, VM) so that it names the node's own machine; a mismatch has no \
                 override ({SKIP_FLAG} covers only an identity that cannot be read)",
                reaches_node = reports,
            ))
        }
        IdentityCheck::Unknown(why) => {
            let help = match (lookup, machine) {
                (NodeLookup::NoAccess(_), _) => format!(
                    "give cluster access (--kubeconfig PATH, or $KUBECONFIG / ~/.kube/config as \
                     kubectl uses) so the machine can be compared with Node {node}'s \
                     systemUUID; or, for a machine whose Node is gone or never joined, pass \
                     {SKIP_FLAG}"
                ),
                (NodeLookup::Absent, _) => format!(
                    "check the node name; if the machine's Node is gone or it never joined, \
                     pass {SKIP_FLAG} to power it without this proof"
                ),
                _ => format!(
                    "the power source cannot tell which machine it controls; once you have \
                     made sure by other means that {endpoint} is node {node}'s machine, pass \
                     {SKIP_FLAG}"
                ),
            };
            Decision::Refused(format!(
                "refusing to power {action} node {node}: the machine its inventory entry \
                 reaches ({endpoint}) is not proven to be the node's own: {why}\n  help: {help}"
            ))
        }
    }
}

/// One line for the confirmation prompt and the result.
pub(super) fn verdict_line(check: &IdentityCheck, decision: &Decision) -> String {
    match decision {
        Decision::Skipped => format!(
            "identity NOT verified ({SKIP_FLAG}): {}",
            match check {
                IdentityCheck::Unknown(why) => why.as_str(),
                _ => "",
            }
        ),
        _ => check.describe(),
    }
}

fn quoted(raw: &str) -> String {
    format!("\"{}\"", crate::untrusted::text(raw.trim(), 64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::NodeIdentity;

    const U1: &str = "4c4c4544-0031-3510-8052-b2c04f503131";
    const U2: &str = "4c4c4544-0032-3510-8052-b2c04f503132";

    fn found(uuid: &str) -> NodeLookup {
        NodeLookup::Found(NodeIdentity {
            system_uuid: Some(uuid.into()),
            provider_id: None,
        })
    }

    fn run(
        lookup: &NodeLookup,
        machine: Result<MachineIdentity, PowerError>,
        skip: bool,
    ) -> (IdentityCheck, Decision) {
        let c = check("node-2", lookup, &machine);
        let d = decide(
            "node-2",
            PowerAction::Off,
            "redfish https://bmc/ system Blade3",
            &c,
            &machine,
            lookup,
            skip,
        );
        (c, d)
    }

    #[test]
    fn a_match_is_proven_with_or_without_the_flag() {
        for skip in [false, true] {
            let (c, d) = run(&found(U1), Ok(MachineIdentity::Uuid(U1.into())), skip);
            assert!(c.is_match());
            assert_eq!(d, Decision::Proven);
        }
    }

    #[test]
    fn a_mismatch_is_refused_even_with_the_flag_and_names_both_machines() {
        for skip in [false, true] {
            let (c, d) = run(&found(U1), Ok(MachineIdentity::Uuid(U2.into())), skip);
            assert!(c.is_mismatch());
            let Decision::Refused(m) = d else {
                panic!("refused: {d:?}")
            };
            assert!(m.contains(&format!("reaches machine UUID \"{U2}\"")), "{m}");
            assert!(m.contains(&format!("reports systemUUID \"{U1}\"")), "{m}");
            assert!(m.contains("has no override"), "{m}");
        }
    }

    #[test]
    fn an_instance_mismatch_names_both_instances() {
        let lookup = NodeLookup::Found(NodeIdentity {
            system_uuid: None,
            provider_id: Some("aws:///eu-west-3a/i-0aaa".into()),
        });
        let (_, d) = run(
            &lookup,
            Ok(MachineIdentity::InstanceId("i-0bbb".into())),
            false,
        );
        let Decision::Refused(m) = d else {
            panic!("refused: {d:?}")
        };
        assert!(m.contains("reaches instance \"i-0bbb\""), "{m}");
        assert!(
            m.contains("the instance \"i-0aaa\" (spec.providerID)"),
            "{m}"
        );
    }

    #[test]
    fn every_unknown_is_refused_without_the_flag_and_allowed_with_it() {
        let cases = [
            (
                NodeLookup::NoAccess("no cluster access (x)".into()),
                Ok(MachineIdentity::Uuid(U1.into())),
                "--kubeconfig",
            ),
            (
                NodeLookup::Absent,
                Ok(MachineIdentity::Uuid(U1.into())),
                "does not exist in the cluster",
            ),
            (
                found(U1),
                Ok(MachineIdentity::Unavailable(
                    "driver exec cannot tell".into(),
                )),
                "cannot tell which machine",
            ),
            (
                found(U1),
                Err(PowerError::protocol("no UUID field")),
                "could not be read",
            ),
            (
                found("00000000-0000-0000-0000-000000000000"),
                Ok(MachineIdentity::Uuid(U1.into())),
                "placeholder",
            ),
        ];
        for (lookup, machine, says) in cases {
            let (c, d) = run(&lookup, machine.clone(), false);
            assert_eq!(c.label(), "unknown", "{c:?}");
            let Decision::Refused(m) = &d else {
                panic!("refused: {d:?}")
            };
            assert!(m.contains(says), "{m}");
            assert!(m.contains(SKIP_FLAG), "{m}");
            assert!(m.contains("is not proven to be the node's own"), "{m}");
            let (c, d) = run(&lookup, machine, true);
            assert_eq!(d, Decision::Skipped);
            assert!(
                verdict_line(&c, &d).starts_with("identity NOT verified (--skip-identity-check)")
            );
        }
    }
}
