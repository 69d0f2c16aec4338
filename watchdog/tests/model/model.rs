//! The watchdog level as a finite model: a leader, an API server, a target node N and
//! its peers, each companion running nodefence's own feeding rule
//! ([`Feeding`]) and the leader its own release rule ([`decide`], with [`Heard`] fed
//! by the beats).
//!
//! Time moves in ticks of one second of real time; a companion beats, reads its mark
//! and asks its peers once a tick. Each clock (the leader's, each companion's, which
//! also drives its watchdog) runs at 0.9 or 1.1 of real time (the extremes: a rate in
//! between is bounded by them), chosen at the start: the model's ρ is 10 %, the
//! largest the rule accepts, so that drift shows at this granularity. I = 2 s (4 s
//! with [`WatchdogModel::with_long_isolation`], below), W = 3 s, and a scheduling
//! allowance of 500 ms: a feed reaches the device up to 500 ms of its companion's
//! clock after the companion decided it, and the leader's wait includes the
//! allowance. Each tick, the environment may change:
//!
//! - the connectivity in force: everything up; N cut from everything; N cut from the
//!   leader only, or from the API server only, or from both; N and one peer (of five,
//!   also two) cut together from everything else; the leader down; the API server
//!   down; both (a whole control-plane outage);
//! - what becomes of this tick's acknowledgements: delivered at once, a tick later,
//!   or lost;
//! - a peer's companion crashing (its watchdog stays armed);
//!
//! and the leader may take the two halves of fencing N, in either order or together:
//! it stops acknowledging N without the mark, and it writes the mark. With
//! [`WatchdogModel::with_lifts`] it may also give fencing up once (N came back before
//! the release): it acknowledges N without the mark again at once and removes the
//! mark from the API server, and may fence N again later; only its acknowledgement
//! without the mark to a beat sent after N learned of the mark lifts the mark in N's
//! rule ([`Feeding::acknowledged`]). Which of these a search explores, and how many
//! faults a run may have, is its [`Profile`].
//!
//! In the peer-mark profile the leader may also mark one of N's peers, P, once, and
//! lift that mark once, each before the beats of a tick (P learns it at its beat) or
//! after the reads (the leader decides on what it proved up to then), writing and
//! removing it on the API server when it reaches it. P then says "neither" from when
//! it learns its mark until the leader lifts it, as its rule does; the leader, as its
//! table does (`src/heartbeat/table.rs`), ends what it proved of P at the mark, lets
//! no beat of P extend it while the mark stands, starts none before the lift, and
//! never counts P as heard while it is marked. N asks its peers after they have
//! beaten in a tick (so it may hear P's "neither" the moment P learns its mark), and
//! is fenced from the first tick. Its I is 4 s ([`WatchdogModel::with_long_isolation`]):
//! four beats, as the real companion beats four times in its 2 s, so that a beat's
//! proof reaches past the next beat, as it does in a cluster (with I = 2 s, two
//! beats, it barely reaches the next one, and only on the slowest leader's clock).
//!
//! The protocol then runs: acknowledgements due are delivered; every running companion
//! beats the leader (which acknowledges it, and learns from its echo and report how
//! long it held on), reads its mark from the API server, and asks the peers it
//! reaches; the leader's fencing steps come after the reads (the adversarial order)
//! and it releases N the moment its rule allows. A companion feeds its watchdog
//! continuously while its rule holds: its machine is reset W after the last feed
//! reached the device, the allowance after the last moment it could feed, its clock's
//! rate applied, rounded to the later millisecond.
//!
//! A state is kept relative to now ([`Feeding::shifted_back`], [`Heard::shifted_back`])
//! and remembers 8 s back (11 s with I = 4 s; longer than any wait on the slowest
//! leader's clock, so nothing it forgets changes a decision): the model has no
//! horizon, and the search ends when no step leads to a new state. Peers are
//! interchangeable, so a state lists them in a canonical order.
//!
//! Properties, on every reachable state:
//! - **release safety**: when N is released, its machine was already reset;
//! - **outage safety**: in a run whose only faults are the leader, the API server or
//!   both being down, with no crash and no fencing, no machine is reset.

use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::time::Duration;

use nodefence_watchdog::feeding::{Feeding, Reach, Reaching};
use nodefence_watchdog::release::{Armed, Evidence, Heard, Verdict, decide};
use nodefence_watchdog::timing::Timing;

use crate::explorer::Model;

const TICK_MS: u64 = 1_000;
/// How far back a state remembers, with I = 2 s (the wait is 6.61 s).
const MEMORY_MS: u64 = 8_000;
/// Clock rates, as local = real × num / den.
const RATES: [(u64, u64); 2] = [(9, 10), (11, 10)];
const WATCHDOG: Duration = Duration::from_secs(3);
/// The most a feed may take to reach the device after the decision (the companion's
/// clock).
const ALLOWANCE: Duration = Duration::from_millis(500);

/// A deliberate bug in the rules, to show the model catches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    None,
    /// Rule c: one peer saying "neither" is enough.
    PeersWithoutMajority,
    /// The wait counted from the mark alone.
    WaitFromMarkAlone,
    /// The drift margin dropped from the wait (and from what a beat proves).
    NoDriftMargin,
    /// The leader does not ask that a majority of the other companions was heard.
    NoMajorityHeard,
    /// The leader gives fencing up (removing the mark from the API server) but keeps
    /// counting the mark it wrote, and releases on it when it fences again.
    GivenUpMarkKept,
    /// The scheduling allowance dropped from the leader's wait.
    NoAllowance,
    /// What the leader proved of a peer is not ended at the peer's mark (the table
    /// before issue 52; it still proves nothing from a marked peer's beats, and
    /// counts no marked peer).
    HeardNotEndedAtMark,
    /// The feeding rule before issue 52: the hold reported to the leader is kept
    /// across a mark, and after the lift counts from before the mark.
    HoldKeptAcrossMark,
    /// A peer marked now counted as heard: its beats while marked still prove its
    /// hold, and it is counted among those heard (the table before issue 52; what was
    /// proven is still ended at the mark).
    MarkedPeerHeard,
}

/// Which part of the protocol a search explores in full. One search over everything
/// at once is beyond reach (millions of states at the third tick); each basis of the
/// feeding rule is ruled out by its own condition of the release rule, so each is
/// explored with every fault that bears on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// The leader and API server answers (rules a and b) against the wait: every fault
    /// of N's links to the leader and the API server, acknowledgements to N delivered,
    /// late or lost, the two halves of fencing in either order. Peers stay connected
    /// (the leader hears them; they never say "neither").
    ControlPlane,
    /// The peers' answers (rule c) against the majority the leader hears: N cut from
    /// the control plane from the start; every partition of N with some peers, the
    /// leader, the API server or both down, acknowledgements delivered or lost, a
    /// peer's crash.
    Peers,
    /// A control-plane outage with no fencing: the leader, the API server or both
    /// down, acknowledgements delivered, late or lost.
    Outage,
    /// A peer's mark against the majority the leader hears: as the peers profile (no
    /// crash), N fenced from the first tick, and the leader may mark one of N's peers
    /// once and lift that mark once; I = 4 s.
    PeerMarks,
}

/// Who is connected this tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Links {
    AllUp,
    NodeIsolated,
    NodeCutFromLeader,
    NodeCutFromApi,
    /// N cut from the leader and the API server, not from its peers.
    NodeCutFromControlPlane,
    /// N and these peers (a bit set over companion indexes) cut from everything else.
    NodeWith(u8),
    LeaderDown,
    ApiDown,
    ControlPlaneDown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Leader,
    Api,
    Companion(usize),
}

impl Links {
    fn up(self, a: End, b: End) -> bool {
        // Which side of a partition an end is on: 0 the rest, 1 N's.
        let side = |e: End| -> u8 {
            match (self, e) {
                (Links::NodeIsolated | Links::NodeWith(_), End::Companion(0)) => 1,
                (Links::NodeWith(peers), End::Companion(i)) if peers & (1 << i) != 0 => 1,
                _ => 0,
            }
        };
        let down = |e: End| {
            matches!(
                (self, e),
                (Links::LeaderDown | Links::ControlPlaneDown, End::Leader)
                    | (Links::ApiDown | Links::ControlPlaneDown, End::Api)
            )
        };
        let cut = |e: End| match self {
            Links::NodeCutFromLeader => e == End::Leader,
            Links::NodeCutFromApi => e == End::Api,
            Links::NodeCutFromControlPlane => matches!(e, End::Leader | End::Api),
            _ => false,
        };
        let severed = (a == End::Companion(0) && cut(b)) || (b == End::Companion(0) && cut(a));
        !(down(a) || down(b) || side(a) != side(b) || severed)
    }

    /// The faults the outage property allows.
    fn control_plane_only(self) -> bool {
        matches!(
            self,
            Links::AllUp | Links::LeaderDown | Links::ApiDown | Links::ControlPlaneDown
        )
    }

    fn leader_acts(self) -> bool {
        !matches!(self, Links::LeaderDown | Links::ControlPlaneDown)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Delivery {
    Now,
    Later,
    Lost,
}

/// What the environment and the leader do in one tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    links: Links,
    delivery: Delivery,
    crash: Option<usize>,
    stop: bool,
    mark: bool,
    /// The leader gives fencing N up (unmarks it).
    lift: bool,
    /// The leader marks a peer or lifts its mark, and when in the tick.
    peer: Option<(PeerStep, When)>,
}

/// What the leader does of a peer's mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerStep {
    /// Marks this peer.
    Mark(usize),
    /// Lifts the marked peer's mark.
    Lift,
}

/// When in a tick the leader marks a peer or lifts its mark: before the beats (the
/// peer learns it at once) or after the reads (the leader decides on what it proved
/// up to then).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    BeforeTheBeats,
    AfterTheReads,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}, acks {:?}", self.links, self.delivery)?;
        if let Some(c) = self.crash {
            write!(f, ", companion {c} crashes")?;
        }
        if self.stop {
            write!(f, ", leader stops acknowledging N")?;
        }
        if self.mark {
            write!(f, ", leader writes the mark")?;
        }
        if self.lift {
            write!(f, ", leader gives fencing N up")?;
        }
        match self.peer {
            Some((PeerStep::Mark(p), when)) => write!(f, ", leader marks peer {p} {when:?}")?,
            Some((PeerStep::Lift, when)) => write!(f, ", leader lifts the peer's mark {when:?}")?,
            None => {}
        }
        Ok(())
    }
}

/// An acknowledgement on its way (due at the next tick).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Ack {
    /// The companion's clock when it sent the beat answered.
    beat_sent: Duration,
    marked: bool,
    /// The leader's clock when it sent the acknowledgement.
    sent: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Companion {
    rate: u8,
    feeding: Feeding,
    /// The companion process runs.
    running: bool,
    /// Its machine was reset by its watchdog.
    reset: bool,
    /// When its watchdog fires, in real ms after now (never while reset).
    fires_in: u64,
    /// The leader's clock on the last acknowledgement it received.
    echo: Option<Duration>,
    in_flight: Option<Ack>,
    /// What the leader proved of its hold on the control plane.
    heard: Heard,
    /// The leader marks it (a peer): since when (its clock), while it does.
    marked_since: Option<Duration>,
    /// When the leader lifted its mark (its clock).
    lifted_at: Option<Duration>,
    /// The API server holds its mark (a peer's).
    api_marked: bool,
    /// [`Mutation::HoldKeptAcrossMark`]'s feeding rule, replayed around the real one.
    old_hold: OldHold,
}

/// The hold the feeding rule before issue 52 kept across a mark (only with
/// [`Mutation::HoldKeptAcrossMark`]): the real rule ends it when the mark is learned
/// and starts over at the lift; the old one kept it, and a lift while it was still
/// valid joined the new hold to it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
struct OldHold {
    /// The hold when the mark was learned (since, until; the companion's clock).
    frozen: Option<(Duration, Duration)>,
    /// Joined at a lift: (the lift, the old hold's start), while the hold that
    /// started at the lift lasts.
    joined: Option<(Duration, Duration)>,
}

impl Companion {
    /// [`Feeding::acknowledged`]; `old`: replaying the old rule's hold.
    fn acknowledged(&mut self, beat_sent: Duration, marked: bool, now: Duration, old: bool) {
        let was = self.feeding.marked();
        if old && marked && !was {
            self.freeze(now);
        }
        self.feeding.acknowledged(beat_sent, marked, now);
        if old && was && !self.feeding.marked() {
            self.old_hold.joined = self
                .old_hold
                .frozen
                .take()
                .filter(|(_, until)| now < *until)
                .map(|(since, _)| (now, since));
        }
    }

    /// [`Feeding::api_answered`]; `old`: replaying the old rule's hold.
    fn api_answered(&mut self, sent: Duration, marked: bool, now: Duration, old: bool) {
        if old && marked && !self.feeding.marked() {
            self.freeze(now);
        }
        self.feeding.api_answered(sent, marked, now);
    }

    fn freeze(&mut self, now: Duration) {
        let r = self.feeding.reaching(now);
        self.old_hold.frozen =
            (r != Reaching::default()).then(|| (now - r.held_for, now + r.valid_for));
    }

    /// [`Feeding::reaching`], the old rule's joined hold counted.
    fn reaching(&self, now: Duration) -> Reaching {
        let r = self.feeding.reaching(now);
        match self.old_hold.joined {
            Some((lift, since)) if r != Reaching::default() && now - r.held_for == lift => {
                Reaching {
                    held_for: now.saturating_sub(since),
                    ..r
                }
            }
            _ => r,
        }
    }

    /// The old hold without what can no longer matter `now`.
    fn forget_old_hold(&mut self, now: Duration) {
        if self.old_hold.frozen.is_some_and(|(_, until)| until <= now) {
            self.old_hold.frozen = None;
        }
        if self.feeding.reaching(now) == Reaching::default() {
            self.old_hold.joined = None;
        }
    }

    fn shift_old_hold(&mut self, by: Duration) {
        let back = |(a, b): (Duration, Duration)| (a.saturating_sub(by), b.saturating_sub(by));
        self.old_hold.frozen = self.old_hold.frozen.map(back);
        self.old_hold.joined = self.old_hold.joined.map(back);
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    leader_rate: u8,
    /// The connectivity in force (kept until a fault changes it).
    links: Links,
    /// Faults the environment may still inject.
    faults_left: u8,
    /// N first, then its peers in a canonical order.
    companions: Vec<Companion>,
    /// The last acknowledgement without the mark sent to N (leader clock).
    last_ack: Option<Duration>,
    fencing: bool,
    /// When the leader wrote the mark of this attempt (its clock; `None` once it gave
    /// fencing up).
    mark: Option<Duration>,
    /// The API server holds the mark (it stays if the leader could not remove it).
    api_mark: bool,
    /// The leader gave fencing up once.
    lifted: bool,
    /// The leader marked a peer (once), and lifted that mark (once).
    peer_marked: bool,
    peer_lifted: bool,
    released: bool,
    crashed: bool,
    control_plane_only: bool,
    /// The first property broken, with what happened.
    broken: Option<String>,
}

pub struct WatchdogModel {
    nodes: usize,
    profile: Profile,
    /// The fault budget of a run (not in the Outage profile, whose faults are
    /// unbounded): changes of connectivity, late or lost acknowledgements and a
    /// crash, each one fault, at any ticks.
    faults: u8,
    mutation: Mutation,
    timing: Timing,
    /// The leader may give fencing up once.
    lifts: bool,
    /// How far back a state remembers (real ms).
    memory_ms: u64,
}

/// The reading of a clock at `rate` `ms` of real time after its origin.
fn local(rate: u8, ms: u64) -> Duration {
    let (num, den) = RATES[rate as usize];
    Duration::from_nanos(ms * 1_000_000 * num / den)
}

/// The real time (ms after the origin, rounded up) at which a clock at `rate` reads
/// `reading`.
fn real(rate: u8, reading: Duration) -> u64 {
    let (num, den) = RATES[rate as usize];
    (reading.as_nanos() as u64 * den).div_ceil(num * 1_000_000)
}

impl WatchdogModel {
    pub fn new(nodes: usize, profile: Profile, faults: u8, mutation: Mutation) -> Self {
        let model = Self {
            nodes,
            profile,
            faults,
            mutation,
            timing: Timing {
                isolation_timeout: Duration::from_secs(2),
                max_drift_ppm: 100_000,
                scheduling_allowance: ALLOWANCE,
            },
            lifts: false,
            memory_ms: MEMORY_MS,
        };
        match profile {
            Profile::PeerMarks => model.with_long_isolation(),
            _ => model,
        }
    }

    /// The same model with I = 4 s (four beats: a beat's proof reaches past the next
    /// beat on every leader's clock), remembering 11 s back (the wait is 9.06 s).
    pub fn with_long_isolation(self) -> Self {
        Self {
            timing: Timing {
                isolation_timeout: Duration::from_secs(4),
                ..self.timing
            },
            memory_ms: 11_000,
            ..self
        }
    }

    pub fn isolation(&self) -> Duration {
        self.timing.isolation_timeout
    }

    pub fn nodes(&self) -> usize {
        self.nodes
    }

    pub fn profile(&self) -> Profile {
        self.profile
    }

    pub fn mutation(&self) -> Mutation {
        self.mutation
    }

    pub fn lifts(&self) -> bool {
        self.lifts
    }

    /// The same model where the leader may give fencing up once, and fence again.
    pub fn with_lifts(self) -> Self {
        Self {
            lifts: true,
            ..self
        }
    }

    fn leader_timing(&self) -> Timing {
        match self.mutation {
            Mutation::NoDriftMargin => Timing {
                max_drift_ppm: 0,
                ..self.timing
            },
            Mutation::NoAllowance => Timing {
                scheduling_allowance: Duration::ZERO,
                ..self.timing
            },
            _ => self.timing,
        }
    }

    /// A companion's clock now (its reading `memory_ms` after the state's origin).
    fn now(&self, rate: u8) -> Duration {
        local(rate, self.memory_ms)
    }

    /// The order companions beat, read and ask in a tick: N first, or, with peer
    /// marks, last (so it may hear what its peers learned in this tick's beats).
    fn order(&self) -> impl Iterator<Item = usize> {
        let n_last = self.profile == Profile::PeerMarks;
        let first = usize::from(n_last);
        (first..self.nodes).chain(n_last.then_some(0))
    }

    fn links(&self) -> Vec<Links> {
        match self.profile {
            Profile::ControlPlane => vec![
                Links::AllUp,
                Links::NodeIsolated,
                Links::NodeCutFromLeader,
                Links::NodeCutFromApi,
            ],
            Profile::Outage => vec![
                Links::AllUp,
                Links::LeaderDown,
                Links::ApiDown,
                Links::ControlPlaneDown,
            ],
            Profile::Peers | Profile::PeerMarks => {
                let mut all = vec![
                    Links::NodeCutFromControlPlane,
                    Links::NodeIsolated,
                    Links::LeaderDown,
                    Links::ApiDown,
                    Links::ControlPlaneDown,
                ];
                // N with one peer; with five nodes, also with two.
                for i in 1..self.nodes {
                    all.push(Links::NodeWith(1 << i));
                    if self.nodes >= 5 {
                        for j in i + 1..self.nodes {
                            all.push(Links::NodeWith((1 << i) | (1 << j)));
                        }
                    }
                }
                all
            }
        }
    }

    /// The faults a step injects: a change of connectivity, lost acknowledgements, a
    /// crash.
    fn cost(&self, s: &State, step: &Step) -> u8 {
        u8::from(step.links != s.links)
            + u8::from(step.delivery != Delivery::Now)
            + u8::from(step.crash.is_some())
    }

    /// Whether `a` and `b` reach each other this tick.
    fn up(&self, links: Links, a: End, b: End) -> bool {
        let control_plane = |e: End| matches!(e, End::Leader | End::Api);
        let n_to_cp = (a == End::Companion(0) && control_plane(b))
            || (b == End::Companion(0) && control_plane(a));
        let n_cut = matches!(self.profile, Profile::Peers | Profile::PeerMarks);
        links.up(a, b) && !(n_cut && n_to_cp)
    }

    /// Peers in a canonical order (they are interchangeable).
    fn canonical(&self, mut s: State) -> State {
        let h = std::hash::BuildHasherDefault::<std::hash::DefaultHasher>::default();
        s.companions[1..].sort_by_key(|c| h.hash_one(c));
        s
    }
}

impl Model for WatchdogModel {
    type State = State;
    type Step = Step;

    fn init(&self) -> Vec<State> {
        let now = |rate| self.now(rate);
        let mut out = Vec::new();
        for leader_rate in 0..2u8 {
            for node_rate in 0..2u8 {
                for peers_rate in 0..2u8 {
                    let companions = (0..self.nodes)
                        .map(|i| {
                            let rate = if i == 0 { node_rate } else { peers_rate };
                            let mut feeding = Feeding::new(&self.timing);
                            // Just acknowledged, its watchdog just armed.
                            feeding.acknowledged(now(rate), false, now(rate));
                            let fed = real(rate, now(rate) + self.timing.isolation_timeout)
                                - self.memory_ms;
                            Companion {
                                rate,
                                feeding,
                                running: true,
                                reset: false,
                                fires_in: fed + real(rate, ALLOWANCE) + real(rate, WATCHDOG),
                                echo: Some(now(leader_rate)),
                                in_flight: None,
                                heard: Heard::default(),
                                marked_since: None,
                                lifted_at: None,
                                api_marked: false,
                                old_hold: OldHold::default(),
                            }
                        })
                        .collect();
                    // With peer marks, N is fenced from the first tick (it never hears
                    // the control plane: the mark is its only effect).
                    let fenced = self.profile == Profile::PeerMarks;
                    out.push(self.canonical(State {
                        leader_rate,
                        links: match self.profile {
                            Profile::Peers | Profile::PeerMarks => Links::NodeCutFromControlPlane,
                            _ => Links::AllUp,
                        },
                        faults_left: self.faults,
                        companions,
                        last_ack: Some(now(leader_rate)),
                        fencing: fenced,
                        mark: fenced.then(|| now(leader_rate)),
                        api_mark: fenced,
                        lifted: false,
                        peer_marked: false,
                        peer_lifted: false,
                        released: false,
                        crashed: false,
                        // N's cut from the control plane is a partition.
                        control_plane_only: !matches!(
                            self.profile,
                            Profile::Peers | Profile::PeerMarks
                        ),
                        broken: None,
                    }));
                }
            }
        }
        out
    }

    fn steps(&self, s: &State, out: &mut Vec<Step>) {
        if s.released || s.broken.is_some() {
            return;
        }
        let crashes: Vec<Option<usize>> = if s.crashed || self.profile != Profile::Peers {
            vec![None]
        } else {
            std::iter::once(None)
                .chain((1..self.nodes).map(Some))
                .collect()
        };
        let fences: &[(bool, bool)] = match (self.profile, s.fencing, s.mark.is_some()) {
            (Profile::Outage | Profile::PeerMarks, ..) => &[(false, false)],
            // N hears nothing from the control plane: the two halves are one.
            (Profile::Peers, false, false) => &[(false, false), (true, true)],
            (Profile::Peers, ..) => &[(false, false)],
            (_, false, false) => &[(false, false), (true, false), (false, true), (true, true)],
            (_, true, false) => &[(false, false), (false, true)],
            (_, false, true) => &[(false, false), (true, false)],
            (_, true, true) => &[(false, false)],
        };
        // A tick is the isolation timeout: an acknowledgement a tick late buys
        // nothing, as if lost, so "late" is explored where it bears on the rule (N's
        // answers against the wait) and an outage is answers lost.
        let deliveries: &[Delivery] = match self.profile {
            Profile::ControlPlane => &[Delivery::Now, Delivery::Later, Delivery::Lost],
            _ => &[Delivery::Now, Delivery::Lost],
        };
        let lift = self.lifts && !s.lifted && (s.fencing || s.mark.is_some());
        let fences: Vec<(bool, bool, bool)> = fences
            .iter()
            .map(|&(stop, mark)| (stop, mark, false))
            .chain(lift.then_some((false, false, true)))
            .collect();
        // A peer's mark, once, and its lift, once, at either moment of a tick.
        let mut peer_steps = vec![None];
        if self.profile == Profile::PeerMarks {
            let what: Vec<PeerStep> = if !s.peer_marked {
                (1..self.nodes).map(PeerStep::Mark).collect()
            } else if !s.peer_lifted {
                vec![PeerStep::Lift]
            } else {
                vec![]
            };
            for w in what {
                peer_steps.push(Some((w, When::BeforeTheBeats)));
                peer_steps.push(Some((w, When::AfterTheReads)));
            }
        }
        for links in self.links() {
            for &delivery in deliveries {
                for &crash in &crashes {
                    for &(stop, mark, lift) in &fences {
                        for &peer in &peer_steps {
                            // A leader that is down marks nothing.
                            if peer.is_some() && !links.leader_acts() {
                                continue;
                            }
                            let step = Step {
                                links,
                                delivery,
                                crash,
                                stop,
                                mark,
                                lift,
                                peer,
                            };
                            if self.profile == Profile::Outage
                                || self.cost(s, &step) <= s.faults_left
                            {
                                out.push(step);
                            }
                        }
                    }
                }
            }
        }
    }

    fn apply(&self, s: &State, step: &Step) -> State {
        self.canonical(self.tick(s, step))
    }

    fn check(&self, s: &State) -> Result<(), String> {
        s.broken.clone().map_or(Ok(()), Err)
    }

    fn describe(&self, s: &State) -> String {
        let n = &s.companions[0];
        let mut line = format!(
            "N {}, feeds {:?} (fires in {} ms), fencing {}, mark {:?}, released {}",
            if n.reset { "reset" } else { "running" },
            n.feeding.may_feed(self.now(n.rate)),
            n.fires_in,
            s.fencing,
            s.mark,
            s.released
        );
        for (i, c) in s.companions.iter().enumerate().skip(1) {
            if c.marked_since.is_some() || c.lifted_at.is_some() || c.feeding.marked() {
                line.push_str(&format!(
                    "; peer {i}: marked since {:?}, lifted at {:?}, knows it {}, says {:?}, \
                     heard {:?}",
                    c.marked_since,
                    c.lifted_at,
                    c.feeding.marked(),
                    c.feeding.reach(self.now(c.rate)),
                    c.heard.covered()
                ));
            }
        }
        line
    }

    /// A release (with lifts: one after fencing was given up and taken up again; with
    /// peer marks, one after a peer's mark was lifted: so that the search is known to
    /// reach that case).
    fn example(&self, s: &State) -> bool {
        s.released
            && (s.lifted || !self.lifts)
            && (s.peer_lifted || self.profile != Profile::PeerMarks)
    }
}

impl WatchdogModel {
    fn tick(&self, s: &State, step: &Step) -> State {
        let mut s = s.clone();
        if self.profile != Profile::Outage {
            s.faults_left -= self.cost(&s, step);
        }
        s.links = step.links;
        let links = step.links;
        let leader_tick = local(s.leader_rate, TICK_MS);
        let leader_now = self.now(s.leader_rate);
        let old = self.mutation == Mutation::HoldKeptAcrossMark;
        // One tick later: every clock moves on; watchdogs due fire.
        s.last_ack = s.last_ack.map(|t| t.saturating_sub(leader_tick));
        s.mark = s.mark.map(|t| t.saturating_sub(leader_tick));
        for c in &mut s.companions {
            let tick = local(c.rate, TICK_MS);
            c.feeding = c.feeding.shifted_back(tick);
            c.shift_old_hold(tick);
            c.echo = c.echo.map(|t| t.saturating_sub(leader_tick));
            c.heard = c.heard.shifted_back(leader_tick);
            c.marked_since = c.marked_since.map(|t| t.saturating_sub(leader_tick));
            c.lifted_at = c.lifted_at.map(|t| t.saturating_sub(leader_tick));
            if let Some(ack) = &mut c.in_flight {
                ack.beat_sent = ack.beat_sent.saturating_sub(tick);
                ack.sent = ack.sent.saturating_sub(leader_tick);
            }
            if !c.reset {
                c.fires_in = c.fires_in.saturating_sub(TICK_MS);
                if c.fires_in == 0 {
                    c.reset = true;
                    c.running = false;
                }
            }
        }
        s.control_plane_only &= links.control_plane_only();
        if let Some(i) = step.crash {
            s.companions[i].running = false;
            s.crashed = true;
        }
        let leader_acts = links.leader_acts();
        let leader_api = self.up(links, End::Leader, End::Api);
        if leader_acts && let Some((what, When::BeforeTheBeats)) = step.peer {
            self.peer_step(&mut s, what, leader_now, leader_api);
        }
        // Acknowledgements due.
        for i in 0..self.nodes {
            let reachable = self.up(links, End::Leader, End::Companion(i));
            let now = self.now(s.companions[i].rate);
            let c = &mut s.companions[i];
            if let Some(ack) = c.in_flight.take()
                && c.running
                && reachable
            {
                c.acknowledged(ack.beat_sent, ack.marked, now, old);
                c.echo = Some(ack.sent);
            }
        }
        // Beats, reads of the mark, peer rounds.
        let cluster = self.nodes;
        for i in self.order() {
            if !s.companions[i].running {
                continue;
            }
            let now = self.now(s.companions[i].rate);
            if leader_acts && self.up(links, End::Companion(i), End::Leader) {
                let reaching = s.companions[i].reaching(now);
                let timing = self.leader_timing();
                let c = &mut s.companions[i];
                // No beat of a peer marked now proves anything (as the table does), and
                // none proves anything before its lift.
                let counted =
                    c.marked_since.is_none() || self.mutation == Mutation::MarkedPeerHeard;
                if let Some(echo) = c.echo
                    && counted
                {
                    let lifted = c.lifted_at.unwrap_or_default();
                    c.heard
                        .beat_since(&timing, leader_now, echo, reaching, lifted);
                }
                let marked = (i == 0 && s.fencing) || c.marked_since.is_some();
                if i == 0 && !marked {
                    s.last_ack = Some(leader_now);
                }
                // The peers' acknowledgements are the environment's only in the
                // profiles about them.
                let delivery = match self.profile {
                    Profile::ControlPlane if i != 0 => Delivery::Now,
                    _ => step.delivery,
                };
                match delivery {
                    Delivery::Now => {
                        c.acknowledged(now, marked, now, old);
                        c.echo = Some(leader_now);
                    }
                    Delivery::Later => {
                        c.in_flight = Some(Ack {
                            beat_sent: now,
                            marked,
                            sent: leader_now,
                        });
                    }
                    Delivery::Lost => {}
                }
            }
            if self.up(links, End::Companion(i), End::Api) {
                let c = &mut s.companions[i];
                let marked = (i == 0 && s.api_mark) || c.api_marked;
                c.api_answered(now, marked, now, old);
            }
            let neither = (0..self.nodes)
                .filter(|&j| j != i && s.companions[j].running)
                .filter(|&j| self.up(links, End::Companion(i), End::Companion(j)))
                .filter(|&j| {
                    let peer = &s.companions[j];
                    peer.feeding.reach(self.now(peer.rate)) == Reach::Neither
                })
                .count();
            let neither = match self.mutation {
                Mutation::PeersWithoutMajority if neither >= 1 => cluster,
                _ => neither,
            };
            s.companions[i]
                .feeding
                .peers_answered(now, neither, cluster);
        }
        // Feeding, continuously while the rule holds; each feed reaches the device up
        // to the allowance after the companion decided it.
        for c in &mut s.companions {
            if c.reset {
                continue;
            }
            let now = self.now(c.rate);
            let dog = real(c.rate, ALLOWANCE) + real(c.rate, WATCHDOG);
            match c.feeding.feeding_until().filter(|_| c.running) {
                Some(until) if until > now => {
                    let end_in = real(c.rate, until) - self.memory_ms;
                    c.fires_in = c.fires_in.max(end_in + dog);
                }
                Some(_) => {}
                // Stopped (marked, crashed): fed at most until now.
                None => c.fires_in = c.fires_in.min(dog),
            }
            c.feeding.forget_expired(now);
            c.forget_old_hold(now);
        }
        // The leader fences, after the reads.
        if leader_acts && step.stop {
            s.fencing = true;
        }
        if leader_acts && step.mark && leader_api {
            s.mark = Some(leader_now);
            s.api_mark = true;
        }
        // Or gives it up: N is acknowledged without the mark from its next beat on; the
        // mark's removal is a write that may not reach the API server.
        if leader_acts && step.lift {
            s.fencing = false;
            if self.mutation != Mutation::GivenUpMarkKept {
                s.mark = None;
            }
            s.lifted = true;
            if leader_api {
                s.api_mark = false;
            }
        }
        if leader_acts && let Some((what, When::AfterTheReads)) = step.peer {
            self.peer_step(&mut s, what, leader_now, leader_api);
        }
        // And releases N as soon as its rule allows.
        if leader_acts && s.mark.is_some() {
            self.consider_release(&mut s, leader_now);
        }
        if s.broken.is_none()
            && s.control_plane_only
            && !s.crashed
            && !s.fencing
            && s.mark.is_none()
            && !s.lifted
            && let Some(i) = s.companions.iter().position(|c| c.reset)
        {
            s.broken = Some(format!(
                "outage safety: companion {i}'s machine was reset in a run with only \
                 control-plane faults"
            ));
        }
        s
    }

    /// A peer's mark: its acknowledgements carry it from now on, and what the leader
    /// proved of it ends now (as the table does); or its lift: acknowledged without it
    /// from now on. The mark's writing and removal are writes that may not reach the
    /// API server.
    fn peer_step(&self, s: &mut State, what: PeerStep, leader_now: Duration, leader_api: bool) {
        match what {
            PeerStep::Mark(p) => {
                let c = &mut s.companions[p];
                c.marked_since = Some(leader_now);
                if self.mutation != Mutation::HeardNotEndedAtMark {
                    c.heard.end_at(leader_now);
                }
                c.api_marked |= leader_api;
                s.peer_marked = true;
            }
            PeerStep::Lift => {
                if let Some(c) = s.companions.iter_mut().find(|c| c.marked_since.is_some()) {
                    c.marked_since = None;
                    c.lifted_at = Some(leader_now);
                    if leader_api {
                        c.api_marked = false;
                    }
                }
                s.peer_lifted = true;
            }
        }
    }

    fn consider_release(&self, s: &mut State, leader_now: Duration) {
        let evidence = Evidence {
            armed: Some(Armed {
                device: "model".into(),
                granted: WATCHDOG,
            }),
            last_ack: match self.mutation {
                Mutation::WaitFromMarkAlone => None,
                _ => s.last_ack,
            },
            leading_since: Duration::ZERO,
            mark_written: s.mark,
            cluster: self.nodes,
            told: self.nodes,
        };
        let others: Vec<Heard> = match self.mutation {
            // Every other companion taken as heard throughout.
            Mutation::NoMajorityHeard => {
                let mut always = Heard::default();
                always.beat(
                    &self.timing,
                    Duration::ZERO,
                    Duration::from_secs(3600),
                    Reaching {
                        held_for: Duration::ZERO,
                        valid_for: Duration::from_secs(3600),
                    },
                );
                vec![always; self.nodes - 1]
            }
            // A peer marked now may say "neither": left out (as the table does).
            _ => s.companions[1..]
                .iter()
                .filter(|c| c.marked_since.is_none() || self.mutation == Mutation::MarkedPeerHeard)
                .map(|c| c.heard)
                .collect(),
        };
        if let Verdict::Release(_) = decide(&self.leader_timing(), &evidence, &others, leader_now) {
            s.released = true;
            let n = &s.companions[0];
            if !n.reset {
                s.broken = Some(format!(
                    "release safety: N released while its machine runs (its watchdog fires \
                     {} ms later)",
                    n.fires_in
                ));
            }
        }
    }
}
