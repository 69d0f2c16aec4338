//! The faults a seed plays, drawn from its generator.

use std::time::Duration;

use super::api::ApiMode;
use super::machine::{Bmc, Rng};
use super::world::{CHAOS, WORKERS};

/// A fault the schedule plays.
#[derive(Debug, Clone)]
pub enum Fault {
    PowerLoss(usize),
    NetworkCut(usize),
    Hang(usize),
    /// Power back (if off), network back, hang over: the machine comes back.
    Restore(usize),
    Bmc(usize, Bmc, Duration),
    Api(usize, ApiMode, Duration),
    Crash(usize, Duration),
    /// Most nodes cut at once (a partition on the control-plane side).
    Storm(Duration),
    Pause(Duration),
    OptOut(usize, Duration),
    /// From now on, a BMC of this machine reports On for this long after a power-off.
    ReportLag(usize, Duration),
    /// The replica that sends the next power-off dies right after sending it (scripted
    /// scenarios: the moment a new term must remember the command).
    CrashOnNextPowerOff,
    /// The replica that begins the next release (its taint or Node deletion) dies
    /// right after that write, before it can record the release.
    CrashOnNextRelease,
    /// Someone (an operator, a health checker other than NodeHealthCheck) asks for
    /// this node to be remediated: a `NodeFenceRemediation` named `name` with the node
    /// in its annotation, marked timed out after `timeout` (as NodeHealthCheck's
    /// escalation does) if given, deleted after `span`.
    Request {
        node: usize,
        name: String,
        timeout: Option<Duration>,
        span: Duration,
    },
    /// The request `name` times out (`remediation.medik8s.io/nhc-timed-out`).
    RequestTimesOut(String),
    /// The request `name` is deleted (its node is healthy, or the asker gave up).
    RequestDeleted(String),
    /// Companion seeds (`sim::companion`): this machine's beats and acknowledgements
    /// are lost on the way to and from nodefence (both replicas) for a while.
    CompanionLink(usize, Duration),
    /// Its companion's reads of its Node get no answer for a while.
    CompanionApi(usize, Duration),
    /// Its companion neither reaches its peers nor is reached by them for a while.
    CompanionPeers(usize, Duration),
    /// The machine and its BMC lose power together (a rack feed): every BMC request
    /// times out while it lasts; both come back at its end, or, with `None`, not
    /// before the faults are over (then the node must be released by its watchdog).
    RackPower(usize, Option<Duration>),
    /// The machine's uplink fails (its top-of-rack switch loses the control plane):
    /// its kubelet and its companion lose the control plane, its companion still
    /// reaches its peers.
    Uplink(usize, Duration),
    /// The whole control plane out for the companions: neither replica nor the API
    /// server answers them for a while (the peers still do).
    ControlPlaneOut(Duration),
    /// The companion is killed (no last word; its armed watchdog keeps counting) and
    /// started again after this.
    CompanionCrash(usize, Duration),
    /// A rolling update of the companion: it beats "stopping", disarms its watchdog once
    /// every replica acknowledged that (else leaves it running, its state kept),
    /// and its successor starts after this.
    CompanionRestart(usize, Duration),
    /// The cluster's DNS stops answering this companion for a while: it cannot learn a
    /// replica's new address (a replica started anew), but keeps beating to those it
    /// knows (issue 52, item 1: nothing on the feeding path waits on a lookup).
    CompanionDns(usize, Duration),
    /// The companion's process is stopped (SIGSTOP, a starved CPU) for a while: no
    /// beat, no feed, no answer; its watchdog may reset the machine, as it should.
    CompanionPaused(usize, Duration),
    /// The companion of this machine's next boot crash-loops: it does not start for
    /// this long after the machine comes back (`None`: not before the faults are over).
    CompanionCrashLoop(usize, Option<Duration>),
}

pub fn schedule(rng: &mut Rng) -> Vec<(Duration, Fault)> {
    let n = 8 + rng.below(12);
    let mut out = Vec::new();
    for _ in 0..n {
        let at = Duration::from_secs(20 + rng.below(CHAOS.as_secs() - 60));
        let node = rng.below(WORKERS as u64) as usize;
        let span = Duration::from_secs(10 + rng.below(120));
        let fault = match rng.below(15) {
            0 | 1 => Fault::PowerLoss(node),
            2 => Fault::NetworkCut(node),
            3 => Fault::Hang(node),
            4 => Fault::Restore(node),
            5 | 6 | 12 => {
                let bmc = match rng.below(7) {
                    0 => Bmc::Timeout,
                    1 => Bmc::ServerError,
                    2 => Bmc::AuthRefused,
                    3 => Bmc::Lies,
                    4 => Bmc::Flapping,
                    5 => Bmc::OtherMachine(node + 1 + rng.below(WORKERS as u64 - 1) as usize),
                    _ => Bmc::LosesReplies,
                };
                // Half the BMC faults strike a node that fails at the same time: the
                // moment the fault matters.
                if rng.below(2) == 1 {
                    let cut = if rng.below(2) == 1 {
                        Fault::NetworkCut(node)
                    } else {
                        Fault::PowerLoss(node)
                    };
                    out.push((at, cut));
                }
                Fault::Bmc(node, bmc, span + Duration::from_secs(rng.below(120)))
            }
            7 | 8 => {
                let mode = match rng.below(5) {
                    0 => ApiMode::Errors500,
                    1 => ApiMode::Conflicts,
                    2 => ApiMode::TooMany,
                    3 => ApiMode::Slow(Duration::from_millis(200 + rng.below(3000))),
                    _ => ApiMode::Cut,
                };
                Fault::Api(rng.below(2) as usize, mode, span)
            }
            9 => Fault::Crash(rng.below(2) as usize, Duration::from_secs(rng.below(60))),
            10 | 11 => match rng.below(3) {
                0 => Fault::Storm(span),
                1 => Fault::Pause(span),
                _ => Fault::OptOut(node, span),
            },
            _ => Fault::PowerLoss(node),
        };
        out.push((at, fault));
    }
    out.sort_by_key(|(at, _)| *at);
    out
}

/// Issue 52's faults for the companions' seeds, from a generator of their own (every
/// fault drawn before stays where it was): a silent DNS, a stopped companion, a
/// companion that crash-loops after its machine's next boot.
pub fn companion_faults_52(seed: u64) -> Vec<(Duration, Fault)> {
    let mut rng = Rng::new(seed ^ 0x4953_5355_4535_3200);
    let mut out = Vec::new();
    for _ in 0..rng.below(4) {
        let at = Duration::from_secs(20 + rng.below(CHAOS.as_secs() - 60));
        let node = rng.below(WORKERS as u64) as usize;
        let span = Duration::from_millis(500 + rng.below(60_000));
        let fault = match rng.below(3) {
            0 => Fault::CompanionDns(node, span),
            1 => Fault::CompanionPaused(node, Duration::from_millis(200 + rng.below(15_000))),
            _ => Fault::CompanionCrashLoop(
                node,
                (rng.below(2) == 1).then(|| Duration::from_secs(10 + rng.below(200))),
            ),
        };
        out.push((at, fault));
    }
    out
}

/// Watch drops, drawn from a generator of their own so that adding them left every
/// other fault of a seed where it was (a regression seed still plays its scenario).
pub fn watch_drops(seed: u64) -> Vec<(Duration, Fault)> {
    let mut rng = Rng::new(seed ^ 0x5741_5443_4845_5321);
    let mut out: Vec<(Duration, Fault)> = (0..rng.below(4))
        .map(|_| {
            let at = Duration::from_secs(20 + rng.below(CHAOS.as_secs() - 60));
            let span = Duration::from_secs(1 + rng.below(30));
            (
                at,
                Fault::Api(rng.below(2) as usize, ApiMode::DropWatches, span),
            )
        })
        .collect();
    out.sort_by_key(|(at, _)| *at);
    out
}

/// The BMCs that go on reporting On for a while after a power-off command (per
/// machine: the lag, if any), from a generator of their own like [`watch_drops`].
pub fn report_lags(seed: u64) -> Vec<Option<Duration>> {
    let mut rng = Rng::new(seed ^ 0x534C_4F57_5245_5054);
    (0..WORKERS)
        .map(|_| (rng.below(3) == 0).then(|| Duration::from_secs(5 + rng.below(36))))
        .collect()
}

/// How far behind each machine's clock runs (no NTP on it), from a generator of its
/// own like [`watch_drops`]: about one machine in eight, by 1–30 s. Its kubelet writes
/// renewTimes and heartbeats that look that much older: its Lease must not look
/// missed, nor an Off reading taken before its last renewal count.
pub fn clock_skews(seed: u64) -> Vec<Duration> {
    let mut rng = Rng::new(seed ^ 0x434C_4F43_4B53_4B57);
    (0..WORKERS)
        .map(|_| match rng.below(8) {
            0 => Duration::from_secs(1 + rng.below(30)),
            _ => Duration::ZERO,
        })
        .collect()
}

/// How a seed's cluster asks nodefence for remediation, from a generator of its own
/// like [`watch_drops`]: `None` (no requests, `[remediation]` off: the seed plays as
/// it did before requests existed) for half the seeds.
#[derive(Debug, Clone)]
pub struct RemediationPlan {
    /// NodeHealthCheck runs beside nodefence (its stand-in,
    /// `nodefence_mocks::remediation::nhc`), naming nodefence's template.
    pub nhc: Option<NhcPlan>,
    /// Requests made by hand, and the replica crashes that strike while one stands.
    pub faults: Vec<(Duration, Fault)>,
}

/// How the NodeHealthCheck of a seed is set.
#[derive(Debug, Clone, Copy)]
pub struct NhcPlan {
    /// How long Ready must be False or Unknown (NodeHealthCheck's default is 300 s).
    pub unhealthy_for: Duration,
    /// nodefence is the first step of an escalation that moves on after this.
    pub escalate_after: Option<Duration>,
}

pub fn remediation(seed: u64) -> Option<RemediationPlan> {
    let mut rng = Rng::new(seed ^ 0x5245_4d45_4449_4154);
    if rng.below(2) == 0 {
        return None;
    }
    let nhc = (rng.below(3) != 0).then(|| NhcPlan {
        unhealthy_for: Duration::from_secs(rng.below(4) * 60 + rng.below(60)),
        escalate_after: (rng.below(2) == 1).then(|| Duration::from_secs(10 + rng.below(170))),
    });
    let mut faults = Vec::new();
    for k in 0..rng.below(4) {
        let at = Duration::from_secs(20 + rng.below(CHAOS.as_secs() - 60));
        let node = rng.below(WORKERS as u64) as usize;
        let span = Duration::from_secs(5 + rng.below(240));
        let timeout = (rng.below(3) == 0).then(|| Duration::from_secs(rng.below(span.as_secs())));
        faults.push((
            at,
            Fault::Request {
                node,
                name: format!("by-hand-{}", k + 1),
                timeout,
                span,
            },
        ));
        // A leader change while the request is being served: either replica (the
        // leader half the time).
        if rng.below(2) == 1 {
            faults.push((
                at + Duration::from_secs(rng.below(30)),
                Fault::Crash(rng.below(2) as usize, Duration::from_secs(rng.below(40))),
            ));
        }
    }
    Some(RemediationPlan { nhc, faults })
}

/// The companions' faults (`sim::companion`), from a generator of their own like
/// [`watch_drops`]: each path on its own (node↔nodefence, node↔API server,
/// node↔peers), the machine dead with its BMC, the whole control plane out for the
/// companions (now and then with a BMC failing on a running node at the same time:
/// the watchdog level then marks a node that feeds on its peers), companion crashes
/// and rolling restarts.
pub fn companion_faults(seed: u64) -> Vec<(Duration, Fault)> {
    let mut rng = Rng::new(seed ^ 0x434f_4d50_414e_494f);
    let mut out = Vec::new();
    for _ in 0..2 + rng.below(8) {
        let at = Duration::from_secs(20 + rng.below(CHAOS.as_secs() - 60));
        let node = rng.below(WORKERS as u64) as usize;
        let span = Duration::from_millis(500 + rng.below(40_000));
        let fault = match rng.below(10) {
            0 => Fault::CompanionLink(node, span),
            1 => Fault::CompanionApi(node, span),
            2 => Fault::CompanionPeers(node, span),
            3 | 4 => Fault::RackPower(
                node,
                (rng.below(3) != 0).then(|| Duration::from_secs(20 + rng.below(280))),
            ),
            5 => {
                if rng.below(2) == 1 {
                    let bmc = if rng.below(2) == 1 {
                        Bmc::Timeout
                    } else {
                        Bmc::ServerError
                    };
                    let other = rng.below(WORKERS as u64) as usize;
                    out.push((at, Fault::Bmc(other, bmc, span + Duration::from_secs(60))));
                    // Its node cut from the control plane by its uplink: NotReady,
                    // its BMC unreadable, marked while it feeds on its peers.
                    if rng.below(2) == 1 {
                        out.push((at, Fault::Uplink(other, span + Duration::from_secs(90))));
                    }
                }
                Fault::ControlPlaneOut(span + Duration::from_secs(rng.below(60)))
            }
            6 => {
                // Node↔nodefence and node↔API server together: the node alone is
                // cut from the control plane, its peers reach it.
                out.push((at, Fault::CompanionApi(node, span)));
                Fault::CompanionLink(node, span)
            }
            7 => Fault::CompanionCrash(node, Duration::from_millis(500 + rng.below(15_000))),
            _ => Fault::CompanionRestart(node, Duration::from_millis(500 + rng.below(20_000))),
        };
        out.push((at, fault));
    }
    out.sort_by_key(|(at, _)| *at);
    out
}
