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
//! - in the outage profile, the cluster's resolver blocking (every name lookup hangs
//!   for the tick): the real companion feeds from a thread that waits on nothing but
//!   the clock and beats the addresses it last resolved, so that nothing of it
//!   changes; [`Mutation::FeedingWaitsOnLookups`] makes no feed then;
//!
//! and every peer's answer arrives twice (a duplicate, or a replay within the round:
//! answers are counted once per node that answered, which a single copy gives the
//! same as two, so the search needs no choice of it; [`Mutation::CountedPerAnswer`]
//! counts each).
//!
//! A companion's successor (a restart of its process, or its first after a reboot)
//! starts with its feeding state empty, holding no term, and answers no peer in its
//! first isolation timeout (`Shared::may_answer_peers`); it holds the cluster's size
//! and the peer keys only from the state its predecessor kept ([`Start::Kept`], the
//! same boot only) or once a hello reaches a replica. Its first beat that reaches the
//! leader comes with a hello: the leader keeps nothing of its predecessor but the
//! last acknowledgement and the mark (`Table::open`), its proof of the hold included.
//! A watchdog armed in a boot goes on counting when its companion dies (a driver with
//! the magic close, as [`device::check`] demands); a watchdog not armed (after a
//! reboot, or a driver refused) is armed at the companion's first decision to feed.
//! The leader's table holds the boot and the watchdog N's last beat named (the model
//! takes a watchdog still counting for one its successor reported armed: the leader
//! may only release sooner), and the Node the boot its kubelet reported when it last
//! reached the API server; the release rule is given the watchdog only if the two
//! boots are the same (`Heartbeat::watchdog_usable`; its other checks, a kubelet that
//! renewed its Lease after the companion fell silent and a virtual machine, only
//! refuse more and are left out).
//!
//! With [`WatchdogModel::with_lifecycle`] N's companion may crash once (a driver
//! without the magic close stops its timer then), and a successor start at once or
//! at any later tick, from the kept state or without, or never (a crash loop); a
//! machine reset boots again, once, a tick later, and its companion may start or
//! not. Both drivers are explored: the one without the magic close is refused, so
//! never armed, and N is never released on it. With [`WatchdogModel::with_old_leader`]
//! a second replica believes it still leads, in the term before the leader's (a VM
//! paused through a failover and resumed, its Lease and the skew of its companions'
//! clocks not looked at: the model holds only the term): N reaches it alone, cut off
//! with it from everything else; it acknowledges N's beats as the leader, without the
//! mark, until a beat names the newer term (then it stands down, `Suspicion`), and N's
//! companion takes a leader's acknowledgement only of a term no older than the one it
//! took (`take_term`). In the peer-restart profile one of N's peers restarts once, at
//! a tick's start or after the peers' turns (having beaten as its predecessor, it
//! answers N as its successor), from the kept state or without.
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
//! - **release safety**: when N is released, its machine was already reset, and has
//!   not booted since into a boot that reached the API server (a boot whose kubelet
//!   never reached it was given no work);
//! - **outage safety**: in a run whose only faults are the leader, the API server or
//!   both being down, the resolver blocking, and restarts from the kept state, with no
//!   other crash and no fencing, no machine is reset.

use std::fmt;
use std::time::Duration;

use nodefence_watchdog::device::{self, DeviceInfo, OPTION_MAGIC_CLOSE, OPTION_SET_TIMEOUT};
use nodefence_watchdog::feeding::{Feeding, Reach, Reaching};
use nodefence_watchdog::release::{Armed, Evidence, Heard, Verdict, anchor, decide};
use nodefence_watchdog::timing::Timing;

use crate::explorer::{Model, fingerprint};

const TICK_MS: u64 = 1_000;
/// The most nodes a model has.
const MAX_NODES: usize = 5;
/// How far back a state remembers, with I = 2 s (the wait is 6.61 s).
const MEMORY_MS: u64 = 8_000;
/// Clock rates, as local = real × num / den.
const RATES: [(u64, u64); 2] = [(9, 10), (11, 10)];
const WATCHDOG: Duration = Duration::from_secs(3);
/// The most a feed may take to reach the device after the decision (the companion's
/// clock).
const ALLOWANCE: Duration = Duration::from_millis(500);

/// A crash, a successor's start, and whether they come after the peers' turns.
type Life = (Option<usize>, Option<(usize, Start)>, bool);

/// A few values on the stack (the steps from a state are listed without allocating).
#[derive(Clone, Copy)]
struct Few<T: Copy + Default, const N: usize> {
    items: [T; N],
    len: usize,
}

impl<T: Copy + Default, const N: usize> Default for Few<T, N> {
    fn default() -> Self {
        Self {
            items: [T::default(); N],
            len: 0,
        }
    }
}

impl<T: Copy + Default, const N: usize> Few<T, N> {
    fn push(&mut self, item: T) {
        self.items[self.len] = item;
        self.len += 1;
    }

    fn extend(&mut self, items: impl IntoIterator<Item = T>) {
        for item in items {
            self.push(item);
        }
    }

    fn as_slice(&self) -> &[T] {
        &self.items[..self.len]
    }
}

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
    /// The companion's feeding waits on a name lookup between two feeds (the feed
    /// loop before issue 52, item 1): while the resolver blocks, no feed.
    FeedingWaitsOnLookups,
    /// A driver without `WDIOF_MAGICCLOSE` accepted ([`device::check`] before issue
    /// 52, item 2): the close of a crashed companion stops its timer.
    NonMagicCloseAccepted,
    /// The leader releases on a watchdog its companion reported armed in a boot other
    /// than the one the Node reports (before issue 52, item 3).
    OtherBootEvidence,
    /// The peers' answers counted, not the nodes that answered (item 4): an answer
    /// that arrives twice counts twice.
    CountedPerAnswer,
    /// Leadership without a term (item 5): a companion takes any replica's
    /// acknowledgement as the leader's, and a replica that believes it leads never
    /// hears of a newer term.
    NoTerm,
    /// A companion's successor answers its peers from its start (not after its first
    /// isolation timeout, `Shared::may_answer_peers`).
    AnswersPeersAtOnce,
    /// A successor ignores the state its predecessor kept (`--state-dir`): no cluster
    /// size, no peer keys until a hello reaches a replica.
    KeptStateIgnored,
    /// A successor started from the kept state takes no term from it (the kept state
    /// before issue 52's term was written to it): an old leader's acknowledgement is
    /// taken again.
    TermNotKept,
    /// The leader releases on a watchdog of a boot that began after its last
    /// acknowledgement without the mark (`Heartbeat::watchdog_usable` before the
    /// model's search with a reboot and an old leader found it).
    AckOfAnotherBoot,
}

impl Mutation {
    pub const ALL: [Mutation; 19] = [
        Mutation::None,
        Mutation::PeersWithoutMajority,
        Mutation::WaitFromMarkAlone,
        Mutation::NoDriftMargin,
        Mutation::NoMajorityHeard,
        Mutation::GivenUpMarkKept,
        Mutation::NoAllowance,
        Mutation::HeardNotEndedAtMark,
        Mutation::HoldKeptAcrossMark,
        Mutation::MarkedPeerHeard,
        Mutation::FeedingWaitsOnLookups,
        Mutation::NonMagicCloseAccepted,
        Mutation::OtherBootEvidence,
        Mutation::CountedPerAnswer,
        Mutation::NoTerm,
        Mutation::AnswersPeersAtOnce,
        Mutation::KeptStateIgnored,
        Mutation::TermNotKept,
        Mutation::AckOfAnotherBoot,
    ];
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
    /// A peer's restart against the majority the leader hears: as the peer-mark
    /// profile without the mark, and one of N's peers may crash and its successor start
    /// at once, with the state its predecessor kept or without; I = 4 s.
    PeerRestarts,
}

impl Profile {
    pub const ALL: [Profile; 5] = [
        Profile::ControlPlane,
        Profile::Peers,
        Profile::Outage,
        Profile::PeerMarks,
        Profile::PeerRestarts,
    ];
}

/// How a companion's successor starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// From the state its predecessor kept in `--state-dir` (the cluster's size, the
    /// peer keys, the watchdog armed), its feeding state empty.
    Kept,
    /// With nothing (a new pod, or after a reboot): no size and no peer keys until a
    /// hello reaches a replica.
    Fresh,
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
    /// N and the old leader cut together from everything else.
    NodeWithOldLeader,
    LeaderDown,
    ApiDown,
    ControlPlaneDown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Leader,
    Api,
    Companion(usize),
    /// A replica that believes it still leads, in an older term.
    OldLeader,
}

impl Links {
    fn up(self, a: End, b: End) -> bool {
        // The old leader reaches N alone, in the partition that holds them both.
        if a == End::OldLeader || b == End::OldLeader {
            return self == Links::NodeWithOldLeader
                && (a == End::Companion(0) || b == End::Companion(0));
        }
        // Which side of a partition an end is on: 0 the rest, 1 N's.
        let side = |e: End| -> u8 {
            match (self, e) {
                (
                    Links::NodeIsolated | Links::NodeWith(_) | Links::NodeWithOldLeader,
                    End::Companion(0),
                ) => 1,
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
    /// A companion that does not run starts (in the same tick as its crash: a
    /// restart).
    start: Option<(usize, Start)>,
    /// The cluster's resolver blocks this tick (every lookup hangs).
    resolver_blocks: bool,
    /// The crash and the start come after the peers' turns in the tick, before N's
    /// (N asks last): the peer beat as its predecessor, and answers N as its
    /// successor.
    late: bool,
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
        if let Some((c, how)) = self.start {
            write!(f, ", companion {c}'s successor starts ({how:?})")?;
        }
        if self.late {
            write!(f, " after the peers' turns")?;
        }
        if self.resolver_blocks {
            write!(f, ", the resolver blocks")?;
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
    /// Its machine's watchdog counts (armed in this boot, by this process or a
    /// predecessor). While it does not, `fires_in` means nothing.
    armed: bool,
    /// Its machine's boot (0, then 1 after a reset).
    boot: u8,
    /// The newest leader's term its process took (the leader's is 2, the old leader's
    /// 1; 0 for a process that took none).
    term: u8,
    /// Its process holds the cluster's size and the peer keys (from the kept state or
    /// a hello): it may ask and answer its peers.
    keys: bool,
    /// Its process answers no peer before this (its clock: its start and its first
    /// isolation timeout).
    quiet_until: Option<Duration>,
    /// Its process started and no hello of it has reached the leader yet.
    hello: bool,
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
    /// The last acknowledgement without the mark sent to N (leader clock), and the
    /// boot the beat it answered named.
    last_ack: Option<Duration>,
    last_ack_boot: Option<u8>,
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
    /// A successor started (or a companion in a new boot).
    restarted: bool,
    control_plane_only: bool,
    /// N's watchdog driver closes on the magic character only (`WDIOF_MAGICCLOSE`).
    magic_close: bool,
    /// What the leader's table holds of N's companion from its last beat: the boot it
    /// named, and whether it reported its watchdog armed (a hello clears both).
    table_boot: Option<u8>,
    table_armed: bool,
    /// The boot the Node reports (its kubelet's, from when it last reached the API
    /// server).
    node_boot: u8,
    /// The old leader heard of a newer term in a beat: it no longer acknowledges as
    /// the leader.
    suspects: bool,
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
    /// N's companion may crash, its successor start with the kept state or without,
    /// or not at all; its machine, reset, boots again (once); its watchdog driver
    /// closes on the magic character only, or not.
    lifecycle: bool,
    /// A second replica believes it still leads, in the term before the leader's.
    old_leader: bool,
    /// In the outage profile, a companion may restart once from its kept state, and
    /// the faults are counted.
    restarts: bool,
    /// In the lifecycle, a successor of the same boot starts from the kept state only
    /// (the container restarted in its pod, the emptyDir kept), never afresh (a new
    /// pod on a machine whose watchdog still counts).
    kept_restarts_only: bool,
    /// [`WatchdogModel::links`], once computed.
    all_links: std::sync::OnceLock<Vec<Links>>,
    /// Whether a driver with or without `WDIOF_MAGICCLOSE` is armed
    /// ([`device::check`], with the kernel's `nowayout` unknown).
    usable: [bool; 2],
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
            lifecycle: false,
            old_leader: false,
            restarts: false,
            kept_restarts_only: false,
            all_links: std::sync::OnceLock::new(),
            usable: [false, true].map(|magic| {
                let info = DeviceInfo {
                    identity: "model".into(),
                    options: OPTION_SET_TIMEOUT | if magic { OPTION_MAGIC_CLOSE } else { 0 },
                    firmware_version: 0,
                };
                device::check(&info, None, WATCHDOG, WATCHDOG, WATCHDOG * 10, false).is_ok()
                    || mutation == Mutation::NonMagicCloseAccepted
            }),
        };
        match profile {
            Profile::PeerMarks | Profile::PeerRestarts => model.with_long_isolation(),
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

    pub fn faults(&self) -> u8 {
        self.faults
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

    /// The same model where N's companion may crash and its machine reboot (see
    /// [`WatchdogModel::lifecycle`]).
    pub fn with_lifecycle(self) -> Self {
        Self {
            lifecycle: true,
            ..self
        }
    }

    pub fn lifecycle(&self) -> bool {
        self.lifecycle
    }

    /// The same model with an old leader (see [`WatchdogModel::old_leader`]).
    pub fn with_old_leader(self) -> Self {
        Self {
            old_leader: true,
            ..self
        }
    }

    pub fn old_leader(&self) -> bool {
        self.old_leader
    }

    /// The outage profile where a companion may restart from its kept state once,
    /// with `faults` changes of connectivity or lost acknowledgements.
    /// A successor of the same boot starts from the kept state only.
    pub fn with_kept_restarts_only(self) -> Self {
        Self {
            kept_restarts_only: true,
            ..self
        }
    }

    pub fn kept_restarts_only(&self) -> bool {
        self.kept_restarts_only
    }

    pub fn with_restarts(self) -> Self {
        Self {
            restarts: true,
            ..self
        }
    }

    pub fn restarts(&self) -> bool {
        self.restarts
    }

    /// The fault budget is counted (in every profile but the outage's, unless with
    /// restarts).
    fn counted(&self) -> bool {
        self.profile != Profile::Outage || self.restarts
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
        let n_last = matches!(self.profile, Profile::PeerMarks | Profile::PeerRestarts);
        let first = usize::from(n_last);
        (first..self.nodes).chain(n_last.then_some(0))
    }

    /// The connectivity a tick may bring (computed once).
    fn links(&self) -> &[Links] {
        self.all_links.get_or_init(|| self.all_links())
    }

    fn all_links(&self) -> Vec<Links> {
        match self.profile {
            Profile::ControlPlane => {
                let mut all = vec![
                    Links::AllUp,
                    Links::NodeIsolated,
                    Links::NodeCutFromLeader,
                    Links::NodeCutFromApi,
                ];
                if self.old_leader {
                    all.push(Links::NodeWithOldLeader);
                }
                all
            }
            Profile::Outage => vec![
                Links::AllUp,
                Links::LeaderDown,
                Links::ApiDown,
                Links::ControlPlaneDown,
            ],
            Profile::Peers | Profile::PeerMarks | Profile::PeerRestarts => {
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
        let n_cut = self.n_cut();
        links.up(a, b) && !(n_cut && n_to_cp)
    }

    /// N is cut from the control plane throughout (the peers' profiles).
    fn n_cut(&self) -> bool {
        matches!(
            self.profile,
            Profile::Peers | Profile::PeerMarks | Profile::PeerRestarts
        )
    }

    /// Peers in a canonical order (they are interchangeable).
    fn canonical(&self, mut s: State) -> State {
        s.companions[1..].sort_by_cached_key(fingerprint);
        s
    }
}

impl Model for WatchdogModel {
    type State = State;
    type Step = Step;

    fn init(&self) -> Vec<State> {
        let now = |rate| self.now(rate);
        let mut out = Vec::new();
        // With its lifecycle, N's driver may close on the magic character only or not.
        let drivers: &[bool] = if self.lifecycle {
            &[true, false]
        } else {
            &[true]
        };
        for &magic_close in drivers {
            for leader_rate in 0..2u8 {
                for node_rate in 0..2u8 {
                    for peers_rate in 0..2u8 {
                        let companions: Vec<Companion> = (0..self.nodes)
                            .map(|i| {
                                let rate = if i == 0 { node_rate } else { peers_rate };
                                let mut feeding = Feeding::new(&self.timing);
                                // Just acknowledged, its watchdog just armed (if its driver
                                // may be).
                                feeding.acknowledged(now(rate), false, now(rate));
                                let fed = real(rate, now(rate) + self.timing.isolation_timeout)
                                    - self.memory_ms;
                                let armed = i != 0 || self.usable[usize::from(magic_close)];
                                Companion {
                                    rate,
                                    feeding,
                                    running: true,
                                    reset: false,
                                    fires_in: if armed {
                                        fed + real(rate, ALLOWANCE) + real(rate, WATCHDOG)
                                    } else {
                                        0
                                    },
                                    echo: Some(now(leader_rate)),
                                    in_flight: None,
                                    heard: Heard::default(),
                                    marked_since: None,
                                    lifted_at: None,
                                    api_marked: false,
                                    old_hold: OldHold::default(),
                                    armed,
                                    boot: 0,
                                    term: 2,
                                    keys: true,
                                    quiet_until: None,
                                    hello: false,
                                }
                            })
                            .collect();
                        // With peer marks or restarts, N is fenced from the first tick (it
                        // never hears the control plane: the mark is its only effect).
                        let fenced =
                            matches!(self.profile, Profile::PeerMarks | Profile::PeerRestarts);
                        let table_armed = companions[0].armed;
                        out.push(self.canonical(State {
                            leader_rate,
                            links: if self.n_cut() {
                                Links::NodeCutFromControlPlane
                            } else {
                                Links::AllUp
                            },
                            faults_left: self.faults,
                            companions,
                            last_ack: Some(now(leader_rate)),
                            last_ack_boot: Some(0),
                            fencing: fenced,
                            mark: fenced.then(|| now(leader_rate)),
                            api_mark: fenced,
                            lifted: false,
                            peer_marked: false,
                            peer_lifted: false,
                            released: false,
                            crashed: false,
                            restarted: false,
                            // N's cut from the control plane is a partition.
                            control_plane_only: !self.n_cut(),
                            magic_close,
                            table_boot: Some(0),
                            table_armed,
                            node_boot: 0,
                            suspects: false,
                            broken: None,
                        }));
                    }
                }
            }
        }
        out
    }

    fn steps(&self, s: &State, out: &mut Vec<Step>) {
        if s.released || s.broken.is_some() {
            return;
        }
        // Crashes, and successors' starts (in the tick of the crash: a restart).
        let mut lives: Few<Life, 20> = Few::default();
        lives.push((None, None, false));
        match self.profile {
            Profile::Peers if !s.crashed => {
                lives.extend((1..self.nodes).map(|i| (Some(i), None, false)));
            }
            // Any companion's restart from its kept state, once: no machine is reset.
            Profile::Outage if self.restarts && !s.restarted => {
                lives.extend((0..self.nodes).map(|i| (Some(i), Some((i, Start::Kept)), false)));
            }
            // A peer's restart, at the tick's start or after the peers' turns.
            Profile::PeerRestarts if !s.restarted => {
                for i in 1..self.nodes {
                    for how in [Start::Kept, Start::Fresh] {
                        for late in [false, true] {
                            lives.push((Some(i), Some((i, how)), late));
                        }
                    }
                }
            }
            Profile::ControlPlane if self.lifecycle => {
                let n = &s.companions[0];
                // Kept state survives a container's restart, not a reboot.
                let starts: &[Start] = if n.boot == 0 && self.kept_restarts_only {
                    &[Start::Kept]
                } else if n.boot == 0 {
                    &[Start::Kept, Start::Fresh]
                } else {
                    &[Start::Fresh]
                };
                if n.running && n.boot == 0 && !s.crashed && !s.restarted {
                    lives.push((Some(0), None, false));
                    lives.extend(starts.iter().map(|&how| (Some(0), Some((0, how)), false)));
                } else if !n.running && !n.reset {
                    lives.extend(starts.iter().map(|&how| (None, Some((0, how)), false)));
                }
            }
            _ => {}
        }
        let resolver: &[bool] = match self.profile {
            Profile::Outage if !self.restarts => &[false, true],
            _ => &[false],
        };
        let fences: &[(bool, bool)] = match (self.profile, s.fencing, s.mark.is_some()) {
            (Profile::Outage | Profile::PeerMarks | Profile::PeerRestarts, ..) => &[(false, false)],
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
        let mut all_fences: Few<(bool, bool, bool), 5> = Few::default();
        all_fences.extend(fences.iter().map(|&(stop, mark)| (stop, mark, false)));
        all_fences.extend(lift.then_some((false, false, true)));
        // A peer's mark, once, and its lift, once, at either moment of a tick.
        let mut peer_steps: Few<Option<(PeerStep, When)>, 9> = Few::default();
        peer_steps.push(None);
        if self.profile == Profile::PeerMarks {
            let mut what: Few<Option<PeerStep>, 4> = Few::default();
            if !s.peer_marked {
                what.extend((1..self.nodes).map(|p| Some(PeerStep::Mark(p))));
            } else if !s.peer_lifted {
                what.push(Some(PeerStep::Lift));
            }
            for w in what.as_slice().iter().flatten().copied() {
                peer_steps.push(Some((w, When::BeforeTheBeats)));
                peer_steps.push(Some((w, When::AfterTheReads)));
            }
        }
        for &links in self.links() {
            for &delivery in deliveries {
                for &(crash, start, late) in lives.as_slice() {
                    for &(stop, mark, lift) in all_fences.as_slice() {
                        for &peer in peer_steps.as_slice() {
                            // A leader that is down marks nothing.
                            if peer.is_some() && !links.leader_acts() {
                                continue;
                            }
                            for &resolver_blocks in resolver {
                                let step = Step {
                                    links,
                                    delivery,
                                    crash,
                                    start,
                                    resolver_blocks,
                                    late,
                                    stop,
                                    mark,
                                    lift,
                                    peer,
                                };
                                if !self.counted() || self.cost(s, &step) <= s.faults_left {
                                    out.push(step);
                                }
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
            if n.reset {
                "reset"
            } else if n.running {
                "running"
            } else {
                "running, its companion not"
            },
            n.feeding.may_feed(self.now(n.rate)),
            n.fires_in,
            s.fencing,
            s.mark,
            s.released
        );
        if self.lifecycle {
            line.push_str(&format!(
                "; N's boot {}, watchdog {}, the Node reports boot {}, the leader holds \
                 boot {:?} armed {}",
                n.boot,
                if n.armed { "armed" } else { "not armed" },
                s.node_boot,
                s.table_boot,
                s.table_armed
            ));
        }
        if self.old_leader {
            line.push_str(&format!(
                "; N took term {}, the old leader {}",
                n.term,
                if s.suspects { "stood down" } else { "leads" }
            ));
        }
        for (i, c) in s.companions.iter().enumerate().skip(1) {
            if c.quiet_until.is_some() || !c.keys || c.hello {
                line.push_str(&format!(
                    "; peer {i}: a successor, quiet until {:?}, keys {}, says {:?}, heard {:?}",
                    c.quiet_until,
                    c.keys,
                    c.feeding.reach(self.now(c.rate)),
                    c.heard.covered()
                ));
            }
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
    /// peer marks, one after a peer's mark was lifted; with restarts or N's
    /// lifecycle, one after a successor started; with an old leader, one after it was
    /// reached: so that the search is known to reach that case).
    fn example(&self, s: &State) -> bool {
        s.released
            && (s.lifted || !self.lifts)
            && (s.peer_lifted || self.profile != Profile::PeerMarks)
            && (s.restarted || !(self.lifecycle || self.profile == Profile::PeerRestarts))
            && (s.suspects || !self.old_leader)
    }
}

impl WatchdogModel {
    fn tick(&self, s: &State, step: &Step) -> State {
        let mut s = s.clone();
        if self.counted() {
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
            c.quiet_until = c
                .quiet_until
                .map(|t| t.saturating_sub(tick))
                .filter(|t| *t > self.now(c.rate));
            // A machine reset a tick ago boots again (once), its watchdog not armed,
            // no companion running yet.
            if c.reset && self.lifecycle && c.boot == 0 {
                c.reset = false;
                c.boot = 1;
                c.armed = false;
                c.fires_in = 0;
                c.feeding = Feeding::new(&self.timing);
                c.echo = None;
                c.term = 0;
                c.keys = false;
                c.hello = false;
            } else if !c.reset && c.armed {
                c.fires_in = c.fires_in.saturating_sub(TICK_MS);
                if c.fires_in == 0 {
                    c.reset = true;
                    c.running = false;
                    c.in_flight = None;
                }
            }
        }
        s.control_plane_only &= links.control_plane_only();
        if !step.late {
            self.crash_and_start(&mut s, step);
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
                c.term = 2;
            }
        }
        // N's kubelet reports its boot when it reaches the API server.
        let n = &s.companions[0];
        if !n.reset && self.up(links, End::Companion(0), End::Api) {
            s.node_boot = n.boot;
        }
        // Beats, reads of the mark, peer rounds.
        let cluster = self.nodes;
        for i in self.order() {
            // A restart after the peers' turns, before N's.
            if i == 0 && step.late {
                self.crash_and_start(&mut s, step);
            }
            if !s.companions[i].running {
                continue;
            }
            let now = self.now(s.companions[i].rate);
            if leader_acts && self.up(links, End::Companion(i), End::Leader) {
                let reaching = s.companions[i].reaching(now);
                let timing = self.leader_timing();
                let c = &mut s.companions[i];
                // A successor's first beat comes with a hello: the leader's table keeps
                // nothing of its predecessor but the last acknowledgement and the mark
                // (`Table::open`), and the hello gives it the cluster's size and keys.
                if c.hello {
                    c.hello = false;
                    c.heard = Heard::default();
                    c.keys = true;
                }
                if i == 0 {
                    s.table_boot = Some(c.boot);
                    s.table_armed = c.armed;
                }
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
                    s.last_ack_boot = Some(c.boot);
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
                        c.term = 2;
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
            // The old leader, if N reaches it: it hears of a newer term in a beat that
            // names one, and acknowledges as the leader (of term 1, without the mark)
            // until it does. The companion takes a leader's acknowledgement of a term
            // no older than the one it took.
            if i == 0 && self.up(links, End::Companion(0), End::OldLeader) {
                let c = &mut s.companions[0];
                if c.term > 1 && self.mutation != Mutation::NoTerm {
                    s.suspects = true;
                }
                if !s.suspects
                    && step.delivery == Delivery::Now
                    && (c.term <= 1 || self.mutation == Mutation::NoTerm)
                {
                    c.acknowledged(now, false, now, old);
                    c.term = c.term.max(1);
                }
            }
            if self.up(links, End::Companion(i), End::Api) {
                let c = &mut s.companions[i];
                let marked = (i == 0 && s.api_mark) || c.api_marked;
                c.api_answered(now, marked, now, old);
            }
            // It asks the peers it reaches, if it holds their keys: each answers (if
            // it holds them too, and is past its first isolation timeout) with what
            // it reaches, and every answer arrives twice (a duplicate, a replay
            // within the round); answers are counted once per node that answered.
            if !s.companions[i].keys {
                continue;
            }
            let mut answers = [(0, Reach::Neither); 2 * MAX_NODES];
            let mut len = 0;
            for (j, peer) in s.companions.iter().enumerate() {
                let peer_now = self.now(peer.rate);
                let quiet = peer.quiet_until.is_some_and(|t| peer_now < t)
                    && self.mutation != Mutation::AnswersPeersAtOnce;
                if j != i
                    && peer.running
                    && peer.keys
                    && !quiet
                    && self.up(links, End::Companion(i), End::Companion(j))
                {
                    let reach = peer.feeding.reach(peer_now);
                    answers[len] = (j, reach);
                    answers[len + 1] = (j, reach);
                    len += 2;
                }
            }
            let neither = self.neither(&answers[..len]);
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
        // A watchdog not armed is armed at the first decision to feed (if its driver
        // may be); with feeding tied to lookups, no feed while the resolver blocks.
        let stuck = step.resolver_blocks && self.mutation == Mutation::FeedingWaitsOnLookups;
        for (i, c) in s.companions.iter_mut().enumerate() {
            if c.reset {
                continue;
            }
            let now = self.now(c.rate);
            let dog = real(c.rate, ALLOWANCE) + real(c.rate, WATCHDOG);
            let usable = i != 0 || self.usable[usize::from(s.magic_close)];
            if !c.armed && c.running && usable && !stuck && c.feeding.may_feed(now).is_some() {
                c.armed = true;
                c.fires_in = dog;
            }
            if !c.armed {
                c.feeding.forget_expired(now);
                c.forget_old_hold(now);
                continue;
            }
            match c.feeding.feeding_until().filter(|_| c.running && !stuck) {
                Some(until) if until > now => {
                    let end_in = real(c.rate, until) - self.memory_ms;
                    c.fires_in = c.fires_in.max(end_in + dog);
                }
                Some(_) => {}
                // Stopped (marked, crashed, stuck): fed at most until now.
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

    /// A companion's crash, and a successor's start (in the same tick: a restart).
    fn crash_and_start(&self, s: &mut State, step: &Step) {
        if let Some(i) = step.crash {
            let c = &mut s.companions[i];
            c.running = false;
            c.in_flight = None;
            // A driver without the magic close stops its timer at any close.
            if i == 0 && !s.magic_close {
                c.armed = false;
            }
            // A restart from the kept state is no fault for outage safety.
            if step.start != Some((i, Start::Kept)) {
                s.crashed = true;
            }
        }
        if let Some((i, how)) = step.start {
            let now = self.now(s.companions[i].rate);
            let c = &mut s.companions[i];
            c.running = true;
            c.feeding = Feeding::new(&self.timing);
            c.echo = None;
            c.in_flight = None;
            c.old_hold = OldHold::default();
            let kept = how == Start::Kept && self.mutation != Mutation::KeptStateIgnored;
            if !kept || self.mutation == Mutation::TermNotKept {
                c.term = 0;
            }
            c.keys = kept;
            c.quiet_until = Some(now + self.timing.isolation_timeout);
            c.hello = true;
            s.restarted = true;
        }
    }

    /// How many nodes of those that `answers` are from said "neither": each node once
    /// (with [`Mutation::CountedPerAnswer`], each answer).
    fn neither(&self, answers: &[(usize, Reach)]) -> usize {
        let neither = answers.iter().filter(|(_, r)| *r == Reach::Neither);
        if self.mutation == Mutation::CountedPerAnswer {
            return neither.count();
        }
        let mut nodes = 0u32;
        for (j, _) in neither {
            nodes |= 1 << j;
        }
        nodes.count_ones() as usize
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
        // The watchdog its companion's last beats reported armed, if they named the boot
        // the Node reports (`Heartbeat::watchdog_usable`).
        // And only if the last acknowledgement without the mark went to that boot's
        // companion: a later boot's, fed by no one the leader knows of (an old leader),
        // proves nothing of the wait counted from it.
        let boot_matches = s.table_boot == Some(s.node_boot);
        let acknowledged_boot = s.last_ack.is_none()
            || s.last_ack_boot == s.table_boot
            || self.mutation == Mutation::AckOfAnotherBoot;
        let usable = s.table_armed
            && acknowledged_boot
            && (boot_matches || self.mutation == Mutation::OtherBootEvidence);
        let last_ack = match self.mutation {
            Mutation::WaitFromMarkAlone => None,
            _ => s.last_ack,
        };
        // What `decide` refuses or waits on before anything else, without its words
        // (a search would spend a tenth of its time writing them): no watchdog, no
        // mark, or before the wait from the anchor ([`anchor`]) ran out.
        let timing = self.leader_timing();
        let Some(mark) = s.mark.filter(|_| usable) else {
            return;
        };
        if leader_now < anchor(last_ack, mark, Duration::ZERO).1 + timing.wait(WATCHDOG).total() {
            return;
        }
        let evidence = Evidence {
            armed: Some(Armed {
                device: "model".into(),
                granted: WATCHDOG,
            }),
            last_ack,
            leading_since: Duration::ZERO,
            mark_written: Some(mark),
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
        if let Verdict::Release(_) = decide(&timing, &evidence, &others, leader_now) {
            s.released = true;
            // Its machine runs a boot its kubelet reported (one that may run its
            // workloads: a boot that never reached the API server was given none).
            let n = &s.companions[0];
            if !n.reset && n.boot == s.node_boot {
                s.broken = Some(format!(
                    "release safety: N released while its machine runs (boot {}, {})",
                    n.boot,
                    if n.armed {
                        format!("its watchdog fires {} ms later", n.fires_in)
                    } else {
                        "its watchdog not counting".into()
                    }
                ));
            }
        }
    }
}
