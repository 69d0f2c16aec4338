//! The check on return: a released node that comes back tells whether its machine
//! went down.
//!
//! Every release rests on a proof (Off readings, or the watchdog level's arithmetic),
//! and either can be wrong in the field: a BMC whose firmware reads `Off` for a host
//! that runs, a chassis manager answering for the wrong blade, a watchdog that never
//! fires. A machine that was off or reset boots again, with a new
//! `status.nodeInfo.bootID`; one that never went down comes back with the boot it
//! had. So the release keeps the boot it ended ([`EndedBoot`], on the Node with the
//! taint), and the first Node status the kubelet posts after that boot's last sign of
//! life is judged ([`judge`]):
//! - a new boot: the proof is not contradicted (it does not prove the proof held:
//!   something may have rebooted the machine after a false release); the taint is
//!   removed once the node has been Ready for `recovered_after`, counted from then:
//!   never before the new boot is seen (Rook unfences its storage when the taint goes,
//!   and asks for a full power cycle first);
//! - the same boot: a false release happened. The taint stays (it keeps the node's
//!   pods off it), nothing is powered on, and it is said at the level of a pager
//!   (`ProofContradicted`, recorded on the Node so a new leader keeps it) until an
//!   operator who has checked the application's data and the BMC annotates the Node
//!   [`PROOF_CHECKED_ANNOTATION`];
//! - no boot ID (some test kubelets): nothing can be told; the taint stays unless the
//!   node's policy says `unfence_without_boot_id` or an operator checked it.
//!
//! A status posted after the last sign of life, not a Lease renewal: a kubelet
//! renews its Lease before it posts its first status, and until then the Node still
//! shows the old boot (a new boot read as the old one would be a false alarm). The
//! last sign of life and the status's heartbeat are both the kubelet's clock.

use std::time::SystemTime;

use super::facts::{NodeFacts, Readiness};

/// Written on the Node by an operator who has checked a contradicted (or uncheckable)
/// release: the application's data, the BMC's firmware or the watchdog. Its value
/// says who and why (it is repeated in the Event); nodefence then removes the taint
/// and, with it, its own records of the release and of the contradiction.
pub const PROOF_CHECKED_ANNOTATION: &str = "nodefence.io/proof-checked";
/// Written on the Node by nodefence when its return contradicted the proof
/// (`"<RFC 3339 time> proof <off-readings|watchdog> boot <bootID>"`): a new leader
/// keeps the node out.
pub const PROOF_CONTRADICTED_ANNOTATION: &str = "nodefence.io/proof-contradicted";
/// Written on the Node with the out-of-service taint: the boot the release ended
/// (`"<RFC 3339 last sign of life> proof <off-readings|watchdog> boot <bootID>"`, the
/// boot omitted when the Node reported none).
pub const RELEASED_BOOT_ANNOTATION: &str = "nodefence.io/released-boot";

/// What a release rested on (the label of `nodefence_proof_contradicted_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProofKind {
    OffReadings,
    Watchdog,
}

impl ProofKind {
    pub fn label(self) -> &'static str {
        match self {
            ProofKind::OffReadings => "off-readings",
            ProofKind::Watchdog => "watchdog",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "off-readings" => Some(ProofKind::OffReadings),
            "watchdog" => Some(ProofKind::Watchdog),
            _ => None,
        }
    }

    /// The proof in words, for the operator.
    pub fn describe(self) -> &'static str {
        match self {
            ProofKind::OffReadings => "its power source's Off readings",
            ProofKind::Watchdog => {
                "its hardware watchdog's reset (the watchdog level's arithmetic)"
            }
        }
    }
}

/// The boot a release ended, as it is recorded with the taint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndedBoot {
    /// The node's last sign of life before the release (the kubelet's clock): a Node
    /// status posted after it is the kubelet of the boot that came back.
    pub since: SystemTime,
    /// `status.nodeInfo.bootID` when it failed (`None`: it reported none).
    pub boot: Option<String>,
    pub proof: ProofKind,
}

impl EndedBoot {
    /// The [`RELEASED_BOOT_ANNOTATION`] value.
    pub fn value(&self) -> String {
        let mut v = format!(
            "{} proof {}",
            humantime::format_rfc3339_micros(self.since),
            self.proof.label()
        );
        if let Some(boot) = self
            .boot
            .as_deref()
            .map(str::trim)
            .filter(|b| !b.is_empty())
        {
            v.push_str(" boot ");
            v.push_str(boot);
        }
        v
    }

    /// Reads a [`RELEASED_BOOT_ANNOTATION`] value; `None` when it is not one.
    pub fn parse(value: &str) -> Option<Self> {
        let mut words = value.split_whitespace();
        let since = humantime::parse_rfc3339_weak(words.next()?).ok()?;
        let proof = match (words.next(), words.next()) {
            (Some("proof"), Some(kind)) => ProofKind::parse(kind)?,
            _ => return None,
        };
        let boot = match (words.next(), words.next(), words.next()) {
            (None, _, _) => None,
            (Some("boot"), Some(boot), None) => Some(boot.to_string()),
            _ => return None,
        };
        Some(Self { since, boot, proof })
    }
}

/// A [`PROOF_CONTRADICTED_ANNOTATION`] value.
pub fn contradicted_value(at: SystemTime, proof: ProofKind, boot: &str) -> String {
    format!(
        "{} proof {} boot {}",
        humantime::format_rfc3339_seconds(at),
        proof.label(),
        boot.trim()
    )
}

/// What the node's return said about the proof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It booted again: the proof is not contradicted.
    NewBoot { boot: String },
    /// The same boot as when it failed: the machine never went down.
    Contradicted { boot: String, at: SystemTime },
    /// It reported no boot ID, then or now: nothing can be told.
    NoBootId,
    /// Released by a version that kept no boot: nothing can be told.
    Unrecorded,
}

impl Verdict {
    /// Whether the taint may be removed once the node has been Ready for
    /// `recovered_after`.
    pub fn lets_back(&self, without_boot_id: bool, checked: bool) -> bool {
        match self {
            Verdict::NewBoot { .. } | Verdict::Unrecorded => true,
            Verdict::NoBootId => without_boot_id || checked,
            Verdict::Contradicted { .. } => checked,
        }
    }
}

/// The verdict on `facts` for a release that ended `ended` (`None`: kept no boot), or
/// `None` while the kubelet has posted no status since the last sign of life.
pub fn judge(ended: Option<&EndedBoot>, facts: &NodeFacts, now: SystemTime) -> Option<Verdict> {
    let Some(ended) = ended else {
        return Some(Verdict::Unrecorded);
    };
    let posted_since = facts.readiness == Readiness::Ready
        && facts.last_heartbeat.is_some_and(|h| h > ended.since);
    if !posted_since {
        return None;
    }
    let now_boot = facts
        .boot_id
        .as_deref()
        .map(str::trim)
        .filter(|b| !b.is_empty());
    let then_boot = ended
        .boot
        .as_deref()
        .map(str::trim)
        .filter(|b| !b.is_empty());
    Some(match (then_boot, now_boot) {
        (Some(then), Some(now_boot)) if then.eq_ignore_ascii_case(now_boot) => {
            Verdict::Contradicted {
                boot: now_boot.to_string(),
                at: now,
            }
        }
        (Some(_), Some(now_boot)) => Verdict::NewBoot {
            boot: now_boot.to_string(),
        },
        _ => Verdict::NoBootId,
    })
}

/// The `ProofContradicted` message: what the release rested on, both boots, what
/// nodefence does now and what the operator does.
pub fn contradicted_message(ended: &EndedBoot, boot: &str) -> String {
    format!(
        "FALSE RELEASE: the node is back with boot {boot}, the boot it ran when it failed: its machine never went down, yet its volumes were released on {}. \
         Its pods may have run on two machines at once. The out-of-service taint stays, and nodefence sends this node no power command and releases it no more. \
         Check the application's data, then the BMC's firmware (or the watchdog); once checked, annotate the Node {}=\"<who, why>\" to let it back",
        ended.proof.describe(),
        PROOF_CHECKED_ANNOTATION,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + s)
    }

    fn ended(boot: Option<&str>) -> EndedBoot {
        EndedBoot {
            since: t(10),
            boot: boot.map(str::to_string),
            proof: ProofKind::OffReadings,
        }
    }

    /// The Node as the kubelet of `boot` posts it at `heartbeat`.
    fn back(boot: Option<&str>, heartbeat: u64) -> NodeFacts {
        let mut f = NodeFacts::ready("worker-1", t(heartbeat));
        f.last_heartbeat = Some(t(heartbeat));
        f.boot_id = boot.map(str::to_string);
        f
    }

    #[test]
    fn a_new_boot_does_not_contradict_the_proof() {
        let v = judge(
            Some(&ended(Some("boot-a"))),
            &back(Some("boot-b"), 60),
            t(61),
        );
        assert_eq!(
            v,
            Some(Verdict::NewBoot {
                boot: "boot-b".into()
            })
        );
        assert!(v.unwrap().lets_back(false, false));
    }

    #[test]
    fn the_same_boot_contradicts_it_and_keeps_the_node_out_until_checked() {
        let v = judge(
            Some(&ended(Some("boot-a"))),
            &back(Some("BOOT-A "), 60),
            t(61),
        );
        let Some(v @ Verdict::Contradicted { .. }) = v else {
            panic!("{v:?}");
        };
        assert!(
            !v.lets_back(true, false),
            "no opt-in lets a false release back"
        );
        assert!(v.lets_back(false, true), "an operator's check does");
    }

    #[test]
    fn nothing_is_judged_before_the_kubelet_posts_a_status_after_the_failure() {
        // The kubelet of the new boot renewed its Lease; the Node still shows the old
        // boot's status (heartbeat before the last sign of life), or is not Ready.
        assert_eq!(
            judge(
                Some(&ended(Some("boot-a"))),
                &back(Some("boot-a"), 9),
                t(61)
            ),
            None
        );
        assert_eq!(
            judge(
                Some(&ended(Some("boot-a"))),
                &back(Some("boot-a"), 10),
                t(61)
            ),
            None,
            "a heartbeat at the last sign of life is that sign, not a new one"
        );
        let mut not_ready = back(Some("boot-b"), 60);
        not_ready.readiness = Readiness::NotReady { since: t(55) };
        assert_eq!(judge(Some(&ended(Some("boot-a"))), &not_ready, t(61)), None);
    }

    #[test]
    fn without_a_boot_id_nothing_is_told_and_only_an_opt_in_or_a_check_lets_it_back() {
        for (then, now) in [
            (None, Some("boot-b")),
            (Some("boot-a"), None),
            (Some(""), Some("")),
        ] {
            let v = judge(Some(&ended(then)), &back(now, 60), t(61));
            assert_eq!(v, Some(Verdict::NoBootId), "{then:?} → {now:?}");
            let v = v.unwrap();
            assert!(!v.lets_back(false, false));
            assert!(v.lets_back(true, false) && v.lets_back(false, true));
        }
    }

    #[test]
    fn the_recorded_boot_reads_back_and_anything_else_is_no_record() {
        for boot in [Some("3f2a-b00t"), None] {
            let e = EndedBoot {
                since: t(10) + Duration::from_micros(250),
                boot: boot.map(str::to_string),
                proof: ProofKind::Watchdog,
            };
            assert_eq!(
                EndedBoot::parse(&e.value()),
                Some(e.clone()),
                "{}",
                e.value()
            );
        }
        for bad in [
            "",
            "yesterday proof watchdog",
            "2026-12-02T10:00:00Z",
            "2026-12-02T10:00:00Z proof guess",
            "2026-12-02T10:00:00Z proof watchdog boot",
            "2026-12-02T10:00:00Z proof watchdog boot a b",
        ] {
            assert_eq!(EndedBoot::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_release_that_kept_no_boot_is_let_back_as_before() {
        let v = judge(None, &back(Some("boot-a"), 0), t(61));
        assert_eq!(v, Some(Verdict::Unrecorded));
    }

    #[test]
    fn the_message_names_the_proof_the_boot_and_the_way_back() {
        let m = contradicted_message(&ended(Some("boot-a")), "boot-a");
        assert!(m.contains("boot-a") && m.contains("Off readings"), "{m}");
        assert!(m.contains(PROOF_CHECKED_ANNOTATION), "{m}");
    }
}
