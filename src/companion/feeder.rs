//! The feeding of the watchdog, on a thread of its own that waits on nothing but the
//! clock: every [`FEED_EVERY`] it reads the feeding rule's state (under a lock held
//! for a few reads of memory), arms the watchdog when feeding is first allowed, and
//! writes one feed while the rule allows. No name lookup, hello, API read, peer round
//! or log line is on this path: those run in their own tasks and only update the
//! shared state, and what this thread has to say goes to [`tell`] through a channel
//! that never blocks it (a full channel drops the line).
//!
//! **A stall between deciding and feeding.** The leader's wait allows the scheduling
//! allowance (500 ms) between the companion's decision and its feed reaching the
//! device. Each feed is timed on the companion's clock ([`super::clock`], which
//! counts a suspend): one that completed later than the allowance after its decision
//! (a companion starved of CPU, stopped, stuck on a page fault, a write blocked on a
//! busy BMC) means the answers it rested on are no longer trusted
//! ([`Feeding::stalled`](nodefence_watchdog::feeding::Feeding::stalled)): feeding goes
//! on only on answers to requests sent after it, and the machine is reset rather than
//! kept on an old answer. To make a stall unlikely, the thread runs under `SCHED_RR`
//! at the highest priority and the process's memory is locked as it is touched
//! (`mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT)`), as SBD does, where the pod
//! may ([`Options::realtime`](super::Options::realtime)); where it may not, it says so
//! and feeds at normal priority. No companion-side check helps a guest its hypervisor
//! pauses: its virtual watchdog pauses with it (the operator guide, "Watchdog
//! fencing").
//!
//! **Armed only where something rests on it.** The watchdog is armed once feeding is
//! allowed and the leader says the node's policy has the watchdog level on (its
//! acknowledgements' `arm`), or at once when a predecessor of this process armed it
//! (the kept state says so: it may be counting, and is fed by the rule before the
//! policy is heard). When the policy turns the level off, the beats say "disarming"
//! and the watchdog is disarmed once every replica acknowledged one (as a clean
//! stop); a driver that may not stop (`nowayout` set, or not known) is kept and fed by
//! its rule until the next reboot, and says so.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nodefence_watchdog::device::{self, Watchdog};
use nodefence_watchdog::feeding::Basis;
use nodefence_watchdog::wire::{self, WatchdogState};

use super::shared::Shared;
use super::{MAX_WATCHDOG_TIMEOUT, WatchdogChoice};

/// How often the companion decides whether to feed.
pub const FEED_EVERY: Duration = Duration::from_millis(100);

/// How the feeding thread runs.
pub(super) struct Settings {
    /// No state directory: nothing says whether a predecessor's watchdog is counting,
    /// so the watchdog is armed on the first basis (it must be fed within W).
    pub arm_on_any_basis: bool,
    /// The longest a feed may take after its decision ([`Timing::scheduling_allowance`]).
    ///
    /// [`Timing::scheduling_allowance`]: nodefence_watchdog::timing::Timing::scheduling_allowance
    pub allowance: Duration,
    /// Real-time priority and locked memory (the CLI; not in tests, which share a
    /// process).
    pub realtime: bool,
}

/// What the feeding thread tells, for [`tell`] to log.
#[derive(Debug)]
pub(super) enum Event {
    Disarming,
    Disarmed,
    KeptArmed(String),
    NotArmedByPolicy,
    Realtime(Result<i32, String>),
    MemoryLocked(Result<(), String>),
    Armed {
        device: String,
        granted: Duration,
    },
    NoDevice(String),
    Refused {
        device: String,
        refusal: String,
    },
    ArmFailed(String),
    UnarmedUntilHello,
    Basis {
        was: Option<Basis>,
        now: Option<Basis>,
    },
    FeedFailed(String),
    Stalled {
        took: Duration,
    },
}

/// The feeding thread, running: stopped (and its watchdog handed back) by
/// [`Feeder::stop`]; dropped, it stops too, and its watchdog is closed without the
/// magic character (a killed companion: an armed watchdog goes on counting).
pub(super) struct Feeder {
    stop: StopOnDrop,
    done: tokio::sync::oneshot::Receiver<Option<Box<dyn Watchdog>>>,
}

struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Feeder {
    /// Starts the thread: it arms `choice` when feeding is first allowed.
    pub fn start(
        shared: Arc<Shared>,
        choice: WatchdogChoice,
        settings: Settings,
        events: tokio::sync::mpsc::Sender<Event>,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let (done_tx, done) = tokio::sync::oneshot::channel();
        let stopping = stop.clone();
        std::thread::Builder::new()
            .name("nodefence-feed".into())
            .spawn(move || {
                let watchdog = feed(&shared, choice, &settings, &events, &stopping);
                // Nobody waiting (dropped): the watchdog is dropped here, closed
                // without the magic character.
                let _ = done_tx.send(watchdog);
            })?;
        Ok(Self {
            stop: StopOnDrop(stop),
            done,
        })
    }

    /// Stops feeding and hands back the watchdog, still armed (`None`: never armed).
    pub async fn stop(self) -> Option<Box<dyn Watchdog>> {
        self.stop.0.store(true, Ordering::SeqCst);
        self.done.await.ok().flatten()
    }
}

/// The thread's loop (see the module documentation).
fn feed(
    shared: &Shared,
    choice: WatchdogChoice,
    settings: &Settings,
    events: &tokio::sync::mpsc::Sender<Event>,
    stop: &AtomicBool,
) -> Option<Box<dyn Watchdog>> {
    let say = |event| {
        // Never waits: a full channel loses the line, not a feed.
        let _ = events.try_send(event);
    };
    if settings.realtime {
        say(Event::MemoryLocked(lock_memory()));
        say(Event::Realtime(
            device::feed_at_realtime_priority().map_err(|e| e.to_string()),
        ));
    }
    let mut unarmed = Some(choice);
    let mut watchdog: Option<Box<dyn Watchdog>> = None;
    let mut last_basis: Option<Basis> = None;
    let mut told_why_unarmed = false;
    let mut told_policy = false;
    let mut kept_told = false;
    let mut next = std::time::Instant::now();
    while !stop.load(Ordering::SeqCst) {
        let basis = shared.feeding().may_feed(shared.now());
        // Without a state directory a predecessor's watchdog may be counting: armed on
        // the first basis, until the policy is heard.
        let policy = shared.arm_wanted();
        let wanted = policy == Some(true)
            || shared.armed_before.load(Ordering::SeqCst)
            || (settings.arm_on_any_basis && policy.is_none());
        let arming = may_arm(
            basis,
            settings.arm_on_any_basis,
            shared.can_hold_every_basis(),
        );
        if arming
            && wanted
            && watchdog.is_none()
            && let Some(choice) = unarmed.take()
        {
            // Recorded before the device is opened: a successor of a crash in between
            // must feed it.
            shared.armed_before.store(true, Ordering::SeqCst);
            shared.keep();
            unarmed = choice.reopenable();
            watchdog = arm(choice, shared, &say);
            if watchdog.is_none() {
                // None asked, or none usable (said why): not tried again.
                unarmed = None;
                shared.armed_before.store(false, Ordering::SeqCst);
                shared.keep();
            }
        } else if basis.is_some() && !arming && !told_why_unarmed {
            told_why_unarmed = true;
            say(Event::UnarmedUntilHello);
        } else if arming && !wanted && watchdog.is_none() && !told_policy {
            told_policy = true;
            say(Event::NotArmedByPolicy);
        }
        if watchdog.is_some() {
            told_policy = false;
            disarm_by_policy(shared, &mut watchdog, &mut kept_told, &say);
        }
        // Decided again after an arming (opening a device takes its time): the feed
        // is timed from this decision.
        let decided = shared.now();
        let basis = shared.feeding().may_feed(decided);
        if basis.is_some()
            && let Some(w) = watchdog.as_mut()
        {
            let fed = w.feed();
            let done = shared.now();
            if let Err(e) = fed {
                say(Event::FeedFailed(e.to_string()));
            }
            let took = done.saturating_sub(decided);
            if took > settings.allowance {
                shared.feeding().stalled(done);
                shared.status().stalls += 1;
                say(Event::Stalled { took });
            }
        }
        if basis != last_basis {
            say(Event::Basis {
                was: last_basis,
                now: basis,
            });
            last_basis = basis;
        }
        {
            let mut st = shared.status();
            st.feeding = basis.is_some();
            st.basis = basis;
        }
        next += FEED_EVERY;
        let now = std::time::Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            // Behind (a stall): the next decision at once, and the pace from there.
            next = now;
        }
    }
    watchdog
}

/// The node's policy turned the watchdog level off (the leader's `arm`): the beats say
/// "disarming" and, once every replica acknowledged one, the watchdog is disarmed
/// with the magic close. Turned on again meanwhile, it counts again. A driver that may
/// not stop is kept, fed by its rule (a disarm that fails to stop it would reset the
/// machine at its timeout).
fn disarm_by_policy(
    shared: &Shared,
    watchdog: &mut Option<Box<dyn Watchdog>>,
    kept_told: &mut bool,
    say: &impl Fn(Event),
) {
    let Some(w) = watchdog.as_ref() else { return };
    let state = shared.watchdog();
    let off = shared.arm_wanted() == Some(false);
    match state {
        WatchdogState::Armed { granted, device } if off => {
            if w.nowayout() != Some(false) {
                if !*kept_told {
                    *kept_told = true;
                    say(Event::KeptArmed(match w.nowayout() {
                        Some(_) => "the driver runs nowayout".into(),
                        None => "the kernel does not say whether the driver runs nowayout".into(),
                    }));
                }
                return;
            }
            *shared.disarming.lock().unwrap_or_else(|e| e.into_inner()) =
                Some((shared.now(), Default::default()));
            shared.set_watchdog(WatchdogState::Disarming { granted, device });
            shared.status().disarming = true;
            say(Event::Disarming);
        }
        WatchdogState::Disarming { granted, device } if !off => {
            *shared.disarming.lock().unwrap_or_else(|e| e.into_inner()) = None;
            shared.set_watchdog(WatchdogState::Armed { granted, device });
            shared.status().disarming = false;
        }
        WatchdogState::Disarming { .. } if shared.every_replica_told_disarming() => {
            let Some(w) = watchdog.take() else { return };
            match w.disarm() {
                Ok(_) => {
                    shared.set_watchdog(WatchdogState::None);
                    shared.armed_before.store(false, Ordering::SeqCst);
                    shared.keep();
                    *shared.disarming.lock().unwrap_or_else(|e| e.into_inner()) = None;
                    let mut st = shared.status();
                    st.armed = None;
                    st.disarming = false;
                    drop(st);
                    say(Event::Disarmed);
                }
                Err(e) => say(Event::FeedFailed(format!("cannot disarm: {e}"))),
            }
        }
        _ => {
            if !off {
                *kept_told = false;
            }
        }
    }
}

/// `mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT)`: every page the process
/// touches stays in memory (no page fault to swap on the feeding path), and nothing is
/// faulted in ahead (the pod's memory is what it uses).
#[cfg(target_os = "linux")]
fn lock_memory() -> Result<(), String> {
    use rustix::mm::MlockAllFlags;
    rustix::mm::mlockall(MlockAllFlags::CURRENT | MlockAllFlags::FUTURE | MlockAllFlags::ONFAULT)
        .map_err(|e| e.to_string())
}

#[cfg(not(target_os = "linux"))]
fn lock_memory() -> Result<(), String> {
    Err("no mlockall on this system".into())
}

/// Whether the watchdog may be armed now: feeding is allowed on `basis`, and every
/// basis of the rule can be held (`every_basis`: a replica told the cluster's size and
/// gave a peer key and its authority key, with which peers' answers are asked and
/// checked), unless `on_any_basis` (no state directory: a predecessor's
/// watchdog may be counting, and must be fed within W).
pub(super) fn may_arm(basis: Option<Basis>, on_any_basis: bool, every_basis: bool) -> bool {
    basis.is_some() && (on_any_basis || every_basis)
}

/// Arms the watchdog asked for, now that feeding is first allowed; tells the beats and
/// the status. `None`: no watchdog (none asked, or none usable).
fn arm(choice: WatchdogChoice, shared: &Shared, say: &impl Fn(Event)) -> Option<Box<dyn Watchdog>> {
    let armed = match choice {
        WatchdogChoice::None => return None,
        WatchdogChoice::Given(w) => {
            let granted = w.granted();
            usable(w, granted, false, "(given)", say)?
        }
        WatchdogChoice::Device {
            path,
            timeout,
            allow_softdog,
        } => open_device(&path, timeout, allow_softdog, say)?,
    };
    let granted = armed.granted();
    shared.set_watchdog(WatchdogState::Armed {
        granted,
        device: wire::DeviceName::new(&armed.info().identity),
    });
    shared.status().armed = Some((armed.info().identity.clone(), granted));
    say(Event::Armed {
        device: armed.info().identity.clone(),
        granted,
    });
    Some(armed)
}

/// The device, if the rule can count on it ([`device::check`]); otherwise disarmed
/// (it was opened, so its timer runs) and refused, saying why.
fn usable(
    w: Box<dyn Watchdog>,
    wanted: Duration,
    allow_softdog: bool,
    path: &str,
    say: &impl Fn(Event),
) -> Option<Box<dyn Watchdog>> {
    match device::check(
        w.info(),
        w.nowayout(),
        wanted,
        w.granted(),
        MAX_WATCHDOG_TIMEOUT,
        allow_softdog,
    ) {
        Ok(()) => Some(w),
        Err(refusal) => {
            // A driver without magic close stops at this close; one that cannot be
            // stopped (nowayout) was accepted above, so nothing here runs on.
            let _ = w.disarm();
            say(Event::Refused {
                device: path.to_string(),
                refusal: refusal.to_string(),
            });
            None
        }
    }
}

#[cfg(target_os = "linux")]
fn open_device(
    path: &std::path::Path,
    timeout: Duration,
    allow_softdog: bool,
    say: &impl Fn(Event),
) -> Option<Box<dyn Watchdog>> {
    match device::LinuxWatchdog::open(path, timeout) {
        Ok(w) => usable(
            Box::new(w),
            timeout,
            allow_softdog,
            &path.display().to_string(),
            say,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            say(Event::NoDevice(format!("{}: {e}", path.display())));
            None
        }
        Err(e) => {
            say(Event::ArmFailed(format!("{}: {e}", path.display())));
            None
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn open_device(
    path: &std::path::Path,
    _timeout: Duration,
    _allow_softdog: bool,
    say: &impl Fn(Event),
) -> Option<Box<dyn Watchdog>> {
    say(Event::NoDevice(format!(
        "{}: no watchdog support on this system",
        path.display()
    )));
    None
}

/// Logs what the feeding thread tells, off its path; ends when the thread does.
pub(super) async fn tell(
    mut events: tokio::sync::mpsc::Receiver<Event>,
    shared: Arc<Shared>,
    isolation: Duration,
) {
    while let Some(event) = events.recv().await {
        match event {
            Event::MemoryLocked(Ok(())) => {
                tracing::info!("the companion's memory is locked as it is touched (mlockall)");
            }
            Event::MemoryLocked(Err(e)) => tracing::warn!(
                error = %e,
                "cannot lock the companion's memory (mlockall: CAP_IPC_LOCK): a page fault \
                 to swap may delay a feed"
            ),
            Event::Realtime(Ok(priority)) => tracing::info!(
                priority,
                "the watchdog is fed from a thread at real-time priority (SCHED_RR)"
            ),
            Event::Realtime(Err(e)) => tracing::warn!(
                error = %e,
                "cannot feed the watchdog at real-time priority (SCHED_RR: CAP_SYS_NICE, or \
                 the cgroup's real-time budget): a starved CPU may delay a feed past the \
                 allowance, and the machine is then reset rather than fed on an old answer"
            ),
            Event::Armed { device, granted } => tracing::info!(
                %device,
                granted_s = granted.as_secs_f64(),
                "feeding allowed: the watchdog is armed"
            ),
            Event::NoDevice(why) => {
                tracing::warn!(%why, "no watchdog: beating without one");
            }
            Event::ArmFailed(why) => {
                tracing::error!(%why, "cannot arm the watchdog: beating without one");
            }
            Event::Refused { device, refusal } => {
                tracing::warn!(%device, %refusal, "watchdog refused: beating without one");
            }
            Event::UnarmedUntilHello => tracing::warn!(
                "feeding allowed, but the watchdog stays unarmed until a replica of \
                 nodefence acknowledges a beat (the cluster's size and a peer key: without \
                 them an outage of the whole control plane would reset this machine)"
            ),
            Event::FeedFailed(e) => tracing::error!(error = %e, "cannot feed the watchdog"),
            Event::Stalled { took } => tracing::error!(
                took_ms = took.as_millis() as u64,
                "a feed of the watchdog completed later than the scheduling allowance after \
                 its decision (the companion was stalled): the answers it rested on are no \
                 longer trusted, and it is fed again only on fresh ones"
            ),
            Event::Basis { was, now } => tell_basis(was, now, &shared, isolation),
            Event::NotArmedByPolicy => tracing::info!(
                "feeding allowed, and the watchdog stays unarmed: the node's policy does not \
                 have the watchdog level on (nothing would rest on it)"
            ),
            Event::Disarming => tracing::warn!(
                "the node's policy turned the watchdog level off: disarming the watchdog once \
                 every replica of nodefence acknowledged that it no longer counts"
            ),
            Event::Disarmed => tracing::info!(
                "every replica acknowledged: the watchdog is disarmed (the node's policy has \
                 the watchdog level off)"
            ),
            Event::KeptArmed(why) => tracing::warn!(
                %why,
                "the node's policy turned the watchdog level off, but the watchdog cannot be \
                 stopped for sure: it stays armed and fed by its rule until the next reboot"
            ),
        }
    }
}

/// Logs a change of what the feeding rests on (once per change).
fn tell_basis(was: Option<Basis>, now: Option<Basis>, shared: &Shared, isolation: Duration) {
    match (was, now) {
        (_, Some(Basis::ApiServer)) => tracing::warn!(
            silent_for_at_least = %humantime::format_duration(isolation / 2),
            "the leader does not acknowledge the beats: feeding on the API server's answer \
             (the Node carries no fencing mark for this boot)"
        ),
        (Some(Basis::ApiServer), Some(Basis::Leader)) => {
            tracing::info!("the leader acknowledges the beats again: feeding on its answer");
        }
        (_, Some(b)) => tracing::info!(basis = b.as_str(), "feeding the watchdog"),
        (Some(_), None) if shared.feeding().marked() => {}
        (Some(_), None) => tracing::warn!(
            "neither the leader nor the API server answers: the watchdog is no longer fed \
             (an armed one resets this machine at its timeout unless one answers first)"
        ),
        (None, None) => {}
    }
}
