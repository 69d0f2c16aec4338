//! Companions and hardware watchdogs in the simulation (issue 36): on the seeds of
//! [`plan`] (about half, never a regression seed: those keep the schedules they were
//! recorded with) every machine runs a simulated companion, and the policy has the
//! watchdog level (`watchdog_fencing = true`) on three quarters of them.
//!
//! Each companion uses the real [`CompanionEnd`] and [`Feeding`]: it beats every
//! 500 ms to each live replica incarnation's in-process heartbeat
//! ([`nodefence::heartbeat::InProcess`]: the same table and answer as the UDP
//! listener's), says hello again after ten beats unanswered (a restarted replica lost
//! the session), feeds on the leader's acknowledgements (rule a), reads its own Node's
//! fencing mark through the simulated API server every I/2 while the leader is silent
//! (rule b), and asks its peers (rule c: the other companions' [`Feeding::reach`],
//! in process). Its clock runs at a rate drawn per seed within the drift bound
//! [`Timing`] states (±1 %), and so does its machine's watchdog.
//!
//! The watchdog (W = [`WATCHDOG`] granted) is armed when feeding is first allowed
//! (never, if marked before), and when not fed for W on its own clock it resets its
//! machine (ground truth: the machine reboots, its kubelet comes back with a new boot
//! ID, its pods are gone, its companion dies with the boot). A companion dies with
//! its machine's power and starts again once the machine has booted; a crash leaves
//! an armed watchdog counting; a rolling restart beats "stopping", then disarms once
//! every replica acknowledged it (else it too leaves the watchdog counting).
//!
//! Faults on each path on its own ([`super::schedule::companion_faults`]): beats and
//! acknowledgements lost, the companion's reads unanswered, the peers unreachable,
//! the whole control plane out for the companions; a machine's network cut is all
//! of them at once. Invariant 11, judged at every reset: no control-plane outage
//! resets a machine that was doing its work. A reset of a machine whose companion
//! ran (for an isolation timeout at least) and was not marked (by an acknowledgement, or on the Node for this boot) is a
//! violation unless, at some moment since its last feed less I, the truth had the
//! machine cut off from the leader, from the API server, and from a majority of the
//! cluster (itself and the peers it reaches that reach neither either).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use nodefence::heartbeat::InProcess;
use nodefence::watchdog::feeding::{Feeding, Reach, peers_majority};
use nodefence::watchdog::mark;
use nodefence::watchdog::session::CompanionEnd;
use nodefence::watchdog::timing::Timing;
use nodefence::watchdog::wire::WatchdogState;
use nodefence_mocks::kube::resources::NODES;
use nodefence_mocks::kube::store::Store;
use serde_json::Value;
use tokio::time::Instant;

use super::machine::{Rng, Truth, lock};
use super::world::{BOOT, CONTROL_PLANE, WORKERS, node_name};

/// Companions: one on every worker and one on the control-plane node (the DaemonSet
/// tolerates every taint; the leader counts every Node in the cluster's size).
const MEMBERS: usize = WORKERS + 1;

/// Member `i`'s node: a worker's, or the control-plane node's last.
fn member_name(i: usize) -> String {
    if i < WORKERS {
        node_name(i)
    } else {
        CONTROL_PLANE.to_string()
    }
}

/// The timeout each simulated watchdog grants (W): the wait is then 12.74 s.
pub const WATCHDOG: Duration = Duration::from_secs(10);
/// How often a companion beats (`heartbeat_interval`).
pub const BEAT_EVERY: Duration = Duration::from_millis(500);
/// How often companions and watchdogs are looked at (the real companion decides to
/// feed every 100 ms).
pub const TICK: Duration = Duration::from_millis(100);
/// Beats unanswered after which a companion says hello again (as the real one).
const UNANSWERED: u32 = 10;
/// How often the boot IDs a machine's Node shows are sampled.
const BOOT_SAMPLE: Duration = Duration::from_secs(1);

/// A companion seed's setting, from a generator of its own.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The policy's `watchdog_fencing`.
    pub watchdog_fencing: bool,
    /// Each companion's clock rate, parts per million off (within ±`max_drift_ppm`):
    /// the workers', then the control-plane node's.
    pub clock_ppm: Vec<i64>,
    /// Each worker's watchdog timer's rate, likewise.
    pub watchdog_ppm: Vec<i64>,
    /// Each worker's watchdog driver: magic close, and the kernel's nowayout.
    pub magic_close: Vec<bool>,
    pub nowayout: Vec<bool>,
}

/// `None` for half the seeds (no companions: they play as before), and for every
/// regression seed and scripted scenario (decided by the caller).
pub fn plan(seed: u64) -> Option<Plan> {
    let mut rng = Rng::new(seed ^ 0x5741_5443_4844_4f47);
    if rng.below(2) == 0 {
        return None;
    }
    let bound = Timing::default().max_drift_ppm as i64;
    // The extremes half the time: the slowest clock and watchdog are what the wait
    // must cover.
    let rate = |rng: &mut Rng| match rng.below(4) {
        0 => -bound,
        1 => bound,
        _ => rng.below(2 * bound as u64 + 1) as i64 - bound,
    };
    let watchdog_fencing = rng.below(4) != 0;
    let mut clock_ppm: Vec<i64> = (0..WORKERS).map(|_| rate(&mut rng)).collect();
    let watchdog_ppm = (0..WORKERS).map(|_| rate(&mut rng)).collect();
    // The control-plane node's companion (drawn last: the workers' rates are the
    // ones the seed had before it ran one).
    clock_ppm.push(rate(&mut rng));
    // The drivers, from a generator of their own (the rates above stay the seed's): one
    // in eight without magic close, half of those with nowayout set.
    let mut drivers = Rng::new(seed ^ 0x4d41_4749_4343_4c53);
    let (magic_close, nowayout): (Vec<bool>, Vec<bool>) = (0..WORKERS)
        .map(|_| {
            let magic = drivers.below(8) != 0;
            (magic, !magic && drivers.below(2) == 1)
        })
        .unzip();
    Some(Plan {
        watchdog_fencing,
        clock_ppm,
        watchdog_ppm,
        magic_close,
        nowayout,
    })
}

/// `d` on a clock running `ppm` fast, as it reads after `d` of real time.
fn on_clock(d: Duration, ppm: i64) -> Duration {
    let n = d.as_nanos() as i128 * (1_000_000 + ppm as i128) / 1_000_000;
    Duration::from_nanos(n.max(0) as u64)
}

/// The real time a timer running `ppm` fast takes to count `d`.
fn real_time(d: Duration, ppm: i64) -> Duration {
    let n = d.as_nanos() as i128 * 1_000_000 / (1_000_000 + ppm as i128);
    Duration::from_nanos(n.max(0) as u64)
}

/// One replica incarnation, as the companions reach it.
pub struct ReplicaLink {
    pub handle: InProcess,
    pub alive: Arc<AtomicBool>,
    /// When it started: it heard no beat sent before.
    pub started: Instant,
}

/// A session with one replica slot.
struct Link {
    end: CompanionEnd,
    unanswered: u32,
}

/// A running companion (dies with its machine's boot, or when killed).
struct Companion {
    /// Its monotonic clock's origin (real time).
    origin: Instant,
    /// Told apart from its successor (an API read answered after it died is dropped).
    generation: u64,
    feeding: Feeding,
    links: [Option<Link>; 2],
    next_beat: Instant,
    /// When the latest beat the leader acknowledged without the mark was sent (its
    /// clock), or when it started.
    leader_heard: Duration,
    api_sent: Option<Duration>,
    peers_sent: Option<Duration>,
    /// It armed the watchdog (its beats say so).
    armed: bool,
    /// When it was last seen marked (real time): a mark the leader lifted after the
    /// watchdog's last feed still stopped it (seed 4610's fix lifts marks).
    last_marked: Option<Instant>,
    /// The largest cluster an acknowledgement told it (0: none yet).
    cluster: u16,
    /// The highest leader's term it took: a leader's acknowledgement of an older one
    /// is refused (as the real companion refuses it).
    term_seen: u64,
    /// Each replica slot's incarnation whose address it learned (a lookup of the
    /// replicas' Service): with the cluster's DNS silent it says hello to those only.
    known: [Option<Instant>; 2],
    /// What the latest leader's acknowledgement said of the node's policy: arm.
    arm_wanted: Option<bool>,
}

/// One machine's companion side: its faults, its companion, its watchdog.
struct Member {
    node: String,
    clock_ppm: i64,
    /// Its machine has a hardware watchdog (the control-plane node's has none: its
    /// companion beats and answers its peers, and reports "no watchdog").
    watchdog: bool,
    watchdog_ppm: i64,
    link_cut_until: Option<Instant>,
    api_cut_until: Option<Instant>,
    peers_cut_until: Option<Instant>,
    /// Its uplink is down (the machine's network is cut) but its rack's network
    /// works: the peers still reach it.
    uplink_until: Option<Instant>,
    companion: Option<Companion>,
    /// A companion killed or stopped starts again then (if the machine runs).
    restart_at: Option<Instant>,
    /// The cluster size its companion kept (`--state-dir`, the pod's memory-backed
    /// emptyDir): a successor after a crash starts with it; a clean stop, which
    /// disarms, and a reboot leave nothing.
    kept_cluster: u16,
    /// The hardware watchdog: armed, and when last fed (real time).
    armed: bool,
    last_feed: Option<Instant>,
    /// Last moment the truth had the machine cut off from the control plane and a
    /// majority (invariant 11).
    last_isolated: Option<Instant>,
    /// Last moment the truth had its kernel hung (invariant 11: a watchdog that
    /// resets a machine hung since its last feed did its work).
    last_hung: Option<Instant>,
    /// The cluster's DNS answers its companion no lookup until then.
    dns_until: Option<Instant>,
    /// Its companion's process is stopped until then (no beat, feed or answer), and
    /// the last moment it was (invariant 11: a stopped companion's watchdog did its work).
    paused_until: Option<Instant>,
    last_paused: Option<Instant>,
    /// The companion of its next boot crash-loops for this long (`Some(None)`: for
    /// good); `booted_fresh`: no companion has started in this boot yet.
    crash_loop: Option<Option<Duration>>,
    booted_fresh: bool,
    /// Its watchdog driver's magic close and the kernel's nowayout: a driver without
    /// magic close stops on any close (a killed companion), and the companion refuses
    /// it unless nowayout is set (`device::check`, the real companion's).
    magic_close: bool,
    nowayout: bool,
    /// The boot IDs its Node has shown since the machine last booted (the simulated
    /// kubelet takes a new one at every restart, a network cut's end too).
    boot_ids: BTreeSet<String>,
    /// The last of them sampled: what its companion's beats name (the kernel's boot
    /// ID, which the kubelet reports).
    current_boot: Option<String>,
    /// The IDs of its earlier boots (the Node shows the last one until its kubelet
    /// is back): never taken for this boot's.
    old_boots: BTreeSet<String>,
    boot_sampled: Option<Instant>,
}

impl Member {
    /// The machine boots anew: the IDs seen so far are an earlier boot's.
    fn new_boot(&mut self) {
        let seen = std::mem::take(&mut self.boot_ids);
        self.old_boots.extend(seen);
        self.current_boot = None;
        self.booted_fresh = true;
    }

    /// The companion is killed: a driver without magic close stops at the close.
    fn closed_without_magic(&mut self) {
        if !self.magic_close && !self.nowayout {
            self.armed = false;
            self.last_feed = None;
        }
    }
}

/// Every machine's companion, and how they reach nodefence.
pub struct Fleet {
    /// The seed's setting.
    #[allow(dead_code)] // kept for a debugger's eyes
    pub plan: Plan,
    timing: Timing,
    /// Each replica slot's running incarnation.
    pub replicas: [Option<ReplicaLink>; 2],
    members: Vec<Member>,
    cp_out_until: Option<Instant>,
    /// Machines dead with their BMC until the faults are over, whose incident began
    /// with it (they were serving), and when they were lost.
    pub lasting_rack: BTreeMap<usize, Instant>,
    generations: u64,
}

impl Fleet {
    pub fn new(plan: Plan) -> Self {
        let members = (0..MEMBERS)
            .map(|i| Member {
                node: member_name(i),
                clock_ppm: plan.clock_ppm.get(i).copied().unwrap_or(0),
                watchdog: i < WORKERS,
                watchdog_ppm: plan.watchdog_ppm.get(i).copied().unwrap_or(0),
                link_cut_until: None,
                api_cut_until: None,
                peers_cut_until: None,
                uplink_until: None,
                companion: None,
                restart_at: None,
                kept_cluster: 0,
                armed: false,
                last_feed: None,
                last_isolated: None,
                last_hung: None,
                dns_until: None,
                paused_until: None,
                last_paused: None,
                crash_loop: None,
                booted_fresh: true,
                magic_close: plan.magic_close.get(i).copied().unwrap_or(true),
                nowayout: plan.nowayout.get(i).copied().unwrap_or(false),
                boot_ids: BTreeSet::new(),
                current_boot: None,
                old_boots: BTreeSet::new(),
                boot_sampled: None,
            })
            .collect();
        Self {
            plan,
            timing: Timing::default(),
            replicas: [None, None],
            members,
            cp_out_until: None,
            lasting_rack: BTreeMap::new(),
            generations: 0,
        }
    }

    fn until(slot: &mut Option<Instant>, span: Duration) {
        let end = Instant::now() + span;
        *slot = Some(slot.map_or(end, |u| u.max(end)));
    }

    pub fn cut_link(&mut self, i: usize, span: Duration) {
        Self::until(&mut self.members[i].link_cut_until, span);
    }

    pub fn cut_api(&mut self, i: usize, span: Duration) {
        Self::until(&mut self.members[i].api_cut_until, span);
    }

    pub fn cut_peers(&mut self, i: usize, span: Duration) {
        Self::until(&mut self.members[i].peers_cut_until, span);
    }

    pub fn uplink(&mut self, i: usize, span: Duration) {
        Self::until(&mut self.members[i].uplink_until, span);
    }

    pub fn control_plane_out(&mut self, span: Duration) {
        Self::until(&mut self.cp_out_until, span);
    }

    /// Kills machine `i`'s companion (no last word); its successor starts after `down`.
    pub fn crash(&mut self, i: usize, down: Duration) {
        let m = &mut self.members[i];
        if let Some(c) = m.companion.take() {
            m.kept_cluster = c.cluster;
            m.restart_at = Some(Instant::now() + down);
            m.closed_without_magic();
        }
    }

    /// The cluster's DNS answers machine `i`'s companion nothing for `span`.
    pub fn dns_out(&mut self, i: usize, span: Duration) {
        Self::until(&mut self.members[i].dns_until, span);
    }

    /// Machine `i`'s companion is stopped for `span`.
    pub fn pause(&mut self, i: usize, span: Duration) {
        Self::until(&mut self.members[i].paused_until, span);
    }

    /// The companion of machine `i`'s next boot crash-loops for `span` (`None`: for
    /// good).
    pub fn crash_loop(&mut self, i: usize, span: Option<Duration>) {
        self.members[i].crash_loop = Some(span);
    }

    /// A rolling update: the companion beats "stopping" to every replica it reaches,
    /// disarms its watchdog if every replica took it (as the real one, which waits for
    /// their acknowledgements; a dead one gives none), else leaves it running
    /// with its state kept; its successor starts after `down`. `network`: the
    /// machine's own.
    pub fn restart(&mut self, i: usize, down: Duration, network: bool) {
        let reachable = network && self.link(i);
        let m = &mut self.members[i];
        let Some(mut c) = m.companion.take() else {
            return;
        };
        let now = on_clock(Instant::now() - c.origin, m.clock_ppm);
        let reaching = c.feeding.reaching(now);
        // As the real one: every replica listed must acknowledge, a dead one cannot.
        let mut told = Vec::new();
        for (r, link) in c.links.iter_mut().enumerate() {
            let Some(rep) = self.replicas[r].as_ref() else {
                continue;
            };
            let Some(link) = link.as_mut().filter(|_| rep.alive.load(Ordering::SeqCst)) else {
                told.push(false); // dead, or no session: nothing answers the stop
                continue;
            };
            let last = link.end.beat(now, reaching, WatchdogState::Stopping);
            told.push(reachable && rep.handle.datagram(&last).is_some());
        }
        if nodefence::companion::may_disarm(told) {
            m.armed = false;
            m.last_feed = None;
            m.kept_cluster = 0;
        } else {
            m.kept_cluster = c.cluster;
            m.closed_without_magic();
        }
        m.restart_at = Some(Instant::now() + down);
    }

    /// The faults are over: every path back, every companion killed or stopped
    /// started again at once.
    pub fn heal(&mut self) {
        self.cp_out_until = None;
        for m in &mut self.members {
            m.link_cut_until = None;
            m.api_cut_until = None;
            m.peers_cut_until = None;
            m.uplink_until = None;
            m.restart_at = None;
        }
    }

    fn active(slot: Option<Instant>) -> bool {
        slot.is_some_and(|u| Instant::now() < u)
    }

    /// Machine `i` reaches nodefence's replicas (the machine's network, the path).
    fn link(&self, i: usize) -> bool {
        !Self::active(self.members[i].link_cut_until) && !Self::active(self.cp_out_until)
    }

    fn api(&self, i: usize) -> bool {
        !Self::active(self.members[i].api_cut_until) && !Self::active(self.cp_out_until)
    }

    fn peers(&self, i: usize) -> bool {
        !Self::active(self.members[i].peers_cut_until)
    }

    /// Machine `i` reaches the rack's network (its peers): its network, or its rack's
    /// when only its uplink is down.
    fn lan(&self, i: usize, network: bool) -> bool {
        network || Self::active(self.members[i].uplink_until)
    }

    /// The machines dead with their BMC whose armed watchdog a replica running now
    /// may have heard: one started before the machine was lost. When both replicas
    /// restarted after (seed 1112), none heard it armed, none can prove it reset
    /// (the release rule needs the armed watchdog in its own recent beats), and the
    /// watchdog level rightly refuses.
    ///
    /// Of the running replicas, the leader's table is the one that counts: a standby
    /// that heard the watchdog armed cannot release the node for a leader started
    /// after the loss (seed 201114: replica a heard it, replica b, restarted after the
    /// loss, led through the repair). Only while none leads is any of them taken.
    pub fn rack_dead_heard(&self) -> Vec<usize> {
        let alive: Vec<&ReplicaLink> = self
            .replicas
            .iter()
            .flatten()
            .filter(|r| r.alive.load(Ordering::SeqCst))
            .collect();
        let leading: Vec<&ReplicaLink> = alive
            .iter()
            .copied()
            .filter(|r| r.handle.is_leader())
            .collect();
        let judged = if leading.is_empty() { alive } else { leading };
        self.lasting_rack
            .iter()
            .filter(|(_, lost)| judged.iter().any(|r| r.started < **lost))
            .map(|(i, _)| *i)
            .collect()
    }

    /// Machine `i`'s hardware watchdog is armed now (ground truth).
    pub fn watchdog_armed(&self, i: usize) -> bool {
        self.members.get(i).is_some_and(|m| m.armed)
    }

    fn leader_up(&self) -> bool {
        self.replicas
            .iter()
            .flatten()
            .any(|r| r.alive.load(Ordering::SeqCst) && r.handle.is_leader())
    }
}

/// What a machine looked like at the start of a tick.
#[derive(Clone, Copy)]
struct Seen {
    on: bool,
    going_off: bool,
    hung: bool,
    booted: bool,
    network: bool,
}

/// Runs the companions and watchdogs every [`TICK`] until the runtime ends.
pub async fn drive(fleet: Arc<Mutex<Fleet>>, truth: Arc<Truth>, store: Store, api: kube::Client) {
    let nodes: kube::Api<Node> = kube::Api::all(api);
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let reads = step(&fleet, &truth, &store);
        for (i, generation, sent_at) in reads {
            let node = lock(&fleet).members[i].node.clone();
            let half = Timing::default().isolation_timeout / 2;
            let answer = tokio::time::timeout(half, nodes.get_metadata(&node)).await;
            let marked = match answer {
                Ok(Ok(meta)) => Some(mark::of_metadata(&meta.metadata)),
                _ => None,
            };
            let mut f = lock(&fleet);
            sample_boot(&mut f.members[i], &store, true);
            let m = &mut f.members[i];
            let (ppm, boots) = (m.clock_ppm, m.boot_ids.clone());
            let Some(c) = m.companion.as_mut().filter(|c| c.generation == generation) else {
                continue;
            };
            let Some(found) = marked else { continue };
            let applies = found
                .is_some_and(|mk| mk.boot_id.is_none() || boots.iter().any(|b| mk.applies_to(b)));
            let received = on_clock(Instant::now() - c.origin, ppm);
            c.feeding.api_answered(sent_at, applies, received);
        }
    }
}

/// The Node's boot ID now, if its kubelet registered one.
fn boot_id(store: &Store, node: &str) -> Option<String> {
    store
        .get(NODES, None, node)
        .ok()?
        .pointer("/status/nodeInfo/bootID")
        .and_then(Value::as_str)
        .filter(|b| !b.is_empty())
        .map(str::to_owned)
}

fn sample_boot(m: &mut Member, store: &Store, now_anyway: bool) {
    let now = Instant::now();
    if now_anyway || m.boot_sampled.is_none_or(|t| now >= t + BOOT_SAMPLE) {
        m.boot_sampled = Some(now);
        if let Some(b) = boot_id(store, &m.node).filter(|b| !m.old_boots.contains(b)) {
            m.current_boot = Some(b.clone());
            m.boot_ids.insert(b);
        }
    }
}

/// One tick: watchdogs, companions (beats, feeding, peers); returns the API reads
/// to send (machine, companion generation, sent at on its clock).
fn step(fleet: &Mutex<Fleet>, truth: &Truth, store: &Store) -> Vec<(usize, u64, Duration)> {
    let now = Instant::now();
    let mut seen: Vec<Seen> = truth.with(|ms| {
        ms.iter()
            .map(|m| Seen {
                on: m.on,
                going_off: m.transition.is_some_and(|(_, on)| !on),
                hung: m.hung,
                booted: m.booted_at.is_none_or(|b| now >= b),
                network: m.network,
            })
            .collect()
    });
    // The control-plane node: no fault reaches its machine or its network (the
    // control plane's outage is a path fault, `cp_out_until`).
    seen.push(Seen {
        on: true,
        going_off: false,
        hung: false,
        booted: true,
        network: true,
    });
    let mut f = lock(fleet);
    let f = &mut *f;
    let isolation = f.timing.isolation_timeout;
    let half = isolation / 2;
    let mut reads = Vec::new();
    for i in 0..MEMBERS {
        let s = seen[i];
        if !s.on {
            // Power gone: the companion and the watchdog with it.
            let m = &mut f.members[i];
            m.companion = None;
            m.armed = false;
            m.last_feed = None;
            m.restart_at = None;
            m.kept_cluster = 0;
            m.new_boot();
            continue;
        }
        // On again: a loss it is judged for later is of this boot, not of the one
        // whose armed watchdog was heard (seed 502890: lost with its BMC, powered on
        // again, its companion crash-looping since; lost again, no watchdog of this
        // boot was ever heard, and the leader rightly refused to mark it).
        f.lasting_rack.remove(&i);
        // The hardware watchdog, on its own clock.
        let fires = {
            let m = &f.members[i];
            m.armed
                && m.last_feed
                    .is_some_and(|fed| now >= fed + real_time(WATCHDOG, m.watchdog_ppm))
        };
        if fires {
            reset(f, i, truth, store, s);
            continue;
        }
        if s.hung {
            f.members[i].last_hung = Some(now);
        }
        if s.hung || !s.booted {
            continue; // A hung kernel runs no companion; a booting machine none yet.
        }
        if f.members[i].paused_until.is_some_and(|t| now < t) {
            f.members[i].last_paused = Some(now);
            continue; // Stopped: no beat, no feed, no answer.
        }
        sample_boot(&mut f.members[i], store, false);
        if f.members[i].companion.is_none() {
            let m = &mut f.members[i];
            if m.booted_fresh {
                m.booted_fresh = false;
                if let Some(span) = m.crash_loop.take() {
                    // Far beyond the chaos: not before the faults are over.
                    let span = span.unwrap_or(Duration::from_secs(24 * 3600));
                    m.restart_at = Some(now + span);
                }
            }
            if f.members[i].restart_at.is_some_and(|t| now < t) {
                continue;
            }
            f.generations += 1;
            let generation = f.generations;
            let m = &mut f.members[i];
            m.restart_at = None;
            m.companion = Some(Companion {
                origin: now,
                generation,
                feeding: Feeding::new(&f.timing),
                links: [None, None],
                next_beat: now,
                leader_heard: Duration::ZERO,
                api_sent: None,
                peers_sent: None,
                armed: false,
                last_marked: None,
                cluster: m.kept_cluster,
                term_seen: 0,
                arm_wanted: None,
                known: [None, None],
            });
        }
        let link = s.network && f.link(i);
        let api = s.network && f.api(i);
        let peers_ok = f.lan(i, s.network) && f.peers(i);
        // Beats.
        let ppm = f.members[i].clock_ppm;
        let due = f.members[i]
            .companion
            .as_ref()
            .is_some_and(|c| now >= c.next_beat);
        if due {
            let dns_ok = f.members[i].dns_until.is_none_or(|t| now >= t);
            let replicas = &f.replicas;
            let timing = f.timing;
            let node = f.members[i].node.clone();
            let identity = nodefence::watchdog::session::Identity {
                boot: f.members[i]
                    .current_boot
                    .as_deref()
                    .map(nodefence::watchdog::wire::BootId::of)
                    .unwrap_or_default(),
                virtual_machine: false,
            };
            let c = f.members[i].companion.as_mut().unwrap();
            let cnow = on_clock(now - c.origin, ppm);
            c.next_beat = now + BEAT_EVERY;
            let reaching = c.feeding.reaching(cnow);
            let state = if c.armed {
                WatchdogState::Armed {
                    granted: WATCHDOG,
                    device: nodefence::watchdog::wire::DeviceName::new("sim_wdt"),
                }
            } else {
                WatchdogState::None
            };
            for (r, rep) in replicas.iter().enumerate() {
                let Some(rep) = rep.as_ref().filter(|r| r.alive.load(Ordering::SeqCst)) else {
                    continue;
                };
                let hello = c.links[r]
                    .as_ref()
                    .is_none_or(|l| l.unanswered >= UNANSWERED);
                if hello {
                    if !link {
                        continue;
                    }
                    // A replica's address is looked up by a task of its own; with the
                    // DNS silent, only one already known is said hello to.
                    if dns_ok {
                        c.known[r] = Some(rep.started);
                    } else if c.known[r] != Some(rep.started) {
                        continue;
                    }
                    match rep.handle.open_session(&node) {
                        Some((id, key)) => {
                            c.links[r] = Some(Link {
                                end: CompanionEnd::new(key, id, timing.isolation_timeout),
                                unanswered: 0,
                            });
                        }
                        None => continue,
                    }
                }
                let Some(l) = c.links[r].as_mut() else {
                    continue;
                };
                l.end.set_identity(identity);
                l.end.heard_term(c.term_seen);
                let beat = l.end.beat(cnow, reaching, state);
                l.unanswered += 1;
                if !link {
                    continue;
                }
                truth.count(|k| k.beats += 1);
                let Some(ack) = rep.handle.datagram(&beat) else {
                    continue;
                };
                if let Ok(a) = l.end.acknowledged(&ack, cnow) {
                    l.unanswered = 0;
                    c.cluster = c.cluster.max(a.cluster);
                    // As the real companion: only a leader's, of a term no older than
                    // one taken, tells the rule anything, its mark included.
                    if a.leader && a.term >= c.term_seen {
                        c.term_seen = a.term;
                        c.arm_wanted = Some(a.arm);
                        c.feeding.acknowledged(a.beat_sent, a.marked, cnow);
                        if !a.marked {
                            c.leader_heard = c.leader_heard.max(a.beat_sent);
                        }
                    }
                }
            }
        }
        // Rule b (the API server) and rule c (the peers), while the leader is silent.
        let (cnow, ask_api, ask_peers, generation) = {
            let c = f.members[i].companion.as_mut().unwrap();
            let cnow = on_clock(now - c.origin, ppm);
            let stale_at = c.leader_heard + half;
            let due_from =
                |last: Option<Duration>| last.map_or(stale_at, |s| stale_at.max(s + half));
            let marked = c.feeding.marked();
            let ask_api = !marked && cnow >= due_from(c.api_sent);
            if ask_api {
                c.api_sent = Some(cnow);
            }
            let ask_peers = !marked && cnow >= due_from(c.peers_sent);
            if ask_peers {
                c.peers_sent = Some(cnow);
            }
            (cnow, ask_api, ask_peers, c.generation)
        };
        if ask_api && api {
            reads.push((i, generation, cnow));
        }
        if ask_peers && peers_ok {
            let neither = (0..MEMBERS)
                .filter(|&j| j != i && f.lan(j, seen[j].network) && f.peers(j) && !seen[j].hung)
                .filter(|&j| {
                    let p = &f.members[j];
                    p.companion.as_ref().is_some_and(|c| {
                        c.feeding.reach(on_clock(now - c.origin, p.clock_ppm)) == Reach::Neither
                    })
                })
                .count();
            let c = f.members[i].companion.as_mut().unwrap();
            // The majority of the largest cluster an acknowledgement told it (the
            // real companion asks nobody before one did).
            if c.cluster > 0 {
                c.feeding
                    .peers_answered(cnow, neither, usize::from(c.cluster));
            }
        }
        // Feeding.
        let m = &mut f.members[i];
        let c = m.companion.as_mut().unwrap();
        if c.feeding.marked() {
            c.last_marked = Some(now);
        }
        if m.watchdog && c.feeding.may_feed(cnow).is_some() {
            // Armed only once a replica told the cluster's size (and gave the peer
            // keys, with the hello): every basis can be held (seed 7850). A successor
            // after a crash has it from its predecessor's kept state.
            // And only where the node's policy has the watchdog level on (the leader's
            // acknowledgements say so), unless a predecessor left it armed (it may be
            // counting: fed by the rule before the policy is heard).
            // Never a driver a crash would stop (`device::check`, as the real one).
            if !c.armed
                && c.cluster > 0
                && (c.arm_wanted == Some(true) || m.armed)
                && device_usable(m.magic_close, m.nowayout)
            {
                c.armed = true;
                m.armed = true;
            }
            if m.armed {
                m.last_feed = Some(now);
            }
        }
    }
    // Invariant 11's truth: who is cut off from the control plane and a majority.
    let leader_up = f.leader_up();
    let reaches_cp: Vec<(bool, bool)> = (0..MEMBERS)
        .map(|i| {
            let net = seen[i].network;
            (net && leader_up && f.link(i), net && f.api(i))
        })
        .collect();
    for i in 0..MEMBERS {
        let running = seen[i].on && !seen[i].hung && f.members[i].companion.is_some();
        if !running {
            continue;
        }
        let (leader, api) = reaches_cp[i];
        if leader || api {
            continue;
        }
        let neither = (0..MEMBERS)
            .filter(|&j| j != i)
            .filter(|&j| {
                seen[j].on
                    && !seen[j].hung
                    && f.members[j].companion.is_some()
                    && f.lan(i, seen[i].network)
                    && f.lan(j, seen[j].network)
                    && f.peers(i)
                    && f.peers(j)
                    && !reaches_cp[j].0
                    && !reaches_cp[j].1
            })
            .count();
        if !peers_majority(neither + 1, MEMBERS) {
            f.members[i].last_isolated = Some(now);
        }
    }
    reads
}

/// Whether the real companion's check accepts the simulated driver
/// ([`nodefence::watchdog::device::check`]).
fn device_usable(magic_close: bool, nowayout: bool) -> bool {
    use nodefence::watchdog::device::{self, DeviceInfo};
    let magic = if magic_close {
        device::OPTION_MAGIC_CLOSE
    } else {
        0
    };
    let info = DeviceInfo {
        identity: "sim_wdt".into(),
        options: device::OPTION_SET_TIMEOUT | magic,
        firmware_version: 0,
    };
    device::check(
        &info,
        Some(nowayout),
        WATCHDOG,
        WATCHDOG,
        nodefence::companion::MAX_WATCHDOG_TIMEOUT,
        false,
    )
    .is_ok()
}

/// Machine `i`'s watchdog fires: a running machine is reset (judged first by
/// invariant 11).
fn reset(f: &mut Fleet, i: usize, truth: &Truth, store: &Store, s: Seen) {
    let now = Instant::now();
    let wall = nodefence::clock::now();
    let isolation = f.timing.isolation_timeout;
    let m = &mut f.members[i];
    let last_feed = m.last_feed.unwrap_or(now);
    m.armed = false;
    m.last_feed = None;
    let companion = m.companion.take();
    m.restart_at = None;
    m.kept_cluster = 0;
    truth.count(|c| c.watchdog_resets += 1);
    if s.going_off {
        return; // A power-off under way wins.
    }
    // Marked for this boot: by an acknowledgement, or on the Node.
    let on_node = store
        .get(NODES, None, &m.node)
        .ok()
        .and_then(|n| serde_json::from_value::<Node>(n).ok())
        .and_then(|n| mark::of_node(&n))
        .is_some_and(|mk| mk.boot_id.is_none() || m.boot_ids.iter().any(|b| mk.applies_to(b)));
    let marked = on_node
        || companion
            .as_ref()
            .is_some_and(|c| c.feeding.marked() || c.last_marked.is_some_and(|t| t >= last_feed));
    // A successor that has not run an isolation timeout yet had no fair chance to
    // feed the watchdog its predecessor left counting (a crash, or a stop no replica
    // acknowledged): whether one comes in time is the DaemonSet's part, not the
    // feeding rule's (seed 680: a rolling restart during an outage of the whole
    // control plane, its successor 9.5 s later, 0.5 s before W ran out).
    // Nor a machine hung since its last feed, however briefly: the watchdog did its
    // work (seed 90373: a hang that ended in the very instant the watchdog fired was
    // judged a working machine's reset).
    let ran = companion
        .as_ref()
        .is_some_and(|c| now.saturating_duration_since(c.origin) >= isolation)
        && !s.hung
        && m.last_hung.is_none_or(|t| t < last_feed)
        && m.last_paused.is_none_or(|t| t < last_feed);
    let cut_off = m
        .last_isolated
        .is_some_and(|t| t + isolation + TICK * 5 >= last_feed);
    if ran && !marked && !cut_off {
        truth.violation(format!(
            "invariant 11 (no control-plane outage resets a working machine): {}'s watchdog reset it {:.1}s after its last feed, though it was not marked for this boot and was not cut off from the leader, the API server and a majority since (last cut off: {})",
            m.node,
            (now - last_feed).as_secs_f64(),
            m.last_isolated
                .map_or("never".into(), |t| format!("{:.1}s before its last feed", (last_feed.saturating_duration_since(t)).as_secs_f64()))
        ));
    }
    m.new_boot();
    truth.with(|ms| {
        let machine = &mut ms[i];
        machine.booted_at = Some(now + BOOT);
        machine.hung = false;
        machine.fail(wall);
        machine.off_after_failure = true;
        machine.watchdog_reset_at = Some(wall);
    });
}
