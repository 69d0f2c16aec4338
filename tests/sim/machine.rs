//! Ground truth and the driver-level fault layer.
//!
//! Each simulated machine has a real power state, a network link and a kubelet; the
//! simulated control plane hears from its kubelet only while it is powered, booted,
//! linked and not hung. nodefence reads and commands it through [`SimDriver`], a
//! [`PowerDriver`] whose BMC can time out, answer 5xx, refuse credentials, lie once
//! (Off while On), flap, answer for another machine, or lose the reply to a command
//! it carried out. Every power command is checked against the rules on the spot.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use nodefence::identity::MachineIdentity;
use nodefence::power::{PowerDriver, PowerError, PowerReading, PowerState};
use tokio::time::Instant;

use nodefence_mocks::kube::store::Store;

use super::requests::SeenRequest;

/// What a BMC does when asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bmc {
    Healthy,
    /// Every request hangs until the client's timeout.
    Timeout,
    /// 503 Service Unavailable.
    ServerError,
    /// 401: the credentials are refused.
    AuthRefused,
    /// Every third reading says Off whatever the truth ("Off, then On"), the others
    /// tell the truth.
    Lies,
    /// Every other request fails.
    Flapping,
    /// Answers (and acts) for machine `n`, not this one (a swapped cable or address).
    OtherMachine(usize),
    /// Carries out power commands but the reply is lost.
    LosesReplies,
}

/// One machine, as it really is.
#[derive(Debug, Clone)]
pub struct Machine {
    pub node: String,
    pub uuid: String,
    pub on: bool,
    /// A power transition under way: (when it completes, power afterwards).
    pub transition: Option<(Instant, bool)>,
    /// When the kubelet is up again after power on (booting until then).
    pub booted_at: Option<Instant>,
    pub network: bool,
    pub hung: bool,
    pub bmc: Bmc,
    /// Readings answered, for the lying BMC's rhythm.
    pub answered: u64,
    /// Its BMC keeps reporting On until a power-off completes (many do; others report
    /// PoweringOff meanwhile).
    pub lags: bool,
    /// Its BMC goes on reporting On for this long after a power-off command, whatever
    /// the machine does (iDRAC and iLO take seconds to reflect a ForceOff).
    pub report_lag: Option<Duration>,
    /// Until when its BMC reports On because of `report_lag`.
    pub stale_on_until: Option<Instant>,
    /// When the machine last stopped being able to run pods (power, network, hang).
    pub failed_at: Option<SystemTime>,
    /// When its power last went off (settled), while off.
    pub off_since: Option<SystemTime>,
    /// When its power last came on.
    pub on_since: Option<SystemTime>,
    /// Its power was off at some moment since it failed: the incarnation that failed
    /// (its OS, its pods) is dead, whatever the machine does afterwards.
    pub off_after_failure: bool,
    /// Newest truthful Off reading of this machine handed to nodefence.
    pub last_off_reading: Option<SystemTime>,
    /// Power-off commands that reached this machine in its current incident.
    pub offs_this_incident: u32,
    /// nodefence powered it off, and it has not been on since (for the
    /// power-on-after-fence check: a machine that came back on by any means and lost
    /// power later is a new failure, not one nodefence left off; seed 7791).
    pub fenced_by_us: bool,
    /// Incidents so far (one more each time it stops serving).
    pub incident: u64,
    /// When its hardware watchdog last reset it (companion seeds).
    pub watchdog_reset_at: Option<SystemTime>,
}

impl Machine {
    pub fn new(node: &str, uuid: &str) -> Self {
        Self {
            node: node.into(),
            uuid: uuid.into(),
            on: true,
            transition: None,
            booted_at: None,
            network: true,
            hung: false,
            bmc: Bmc::Healthy,
            answered: 0,
            lags: false,
            report_lag: None,
            stale_on_until: None,
            failed_at: None,
            off_since: None,
            on_since: None,
            off_after_failure: false,
            last_off_reading: None,
            offs_this_incident: 0,
            fenced_by_us: false,
            incident: 0,
            watchdog_reset_at: None,
        }
    }

    /// The kubelet is running and can reach the API server.
    pub fn kubelet_up(&self, now: Instant) -> bool {
        self.on && self.network && !self.hung && self.booted_at.is_none_or(|b| now >= b)
    }

    pub fn state(&self) -> PowerState {
        match self.transition {
            Some((_, false)) if self.lags => PowerState::On,
            Some((_, true)) => PowerState::PoweringOn,
            Some((_, false)) => PowerState::PoweringOff,
            None if self.on => PowerState::On,
            None => PowerState::Off,
        }
    }

    /// The machine's power is settled off.
    pub fn really_off(&self) -> bool {
        !self.on && self.transition.is_none()
    }

    /// It stopped serving (if it was serving): the incident starts now.
    pub fn fail(&mut self, at: SystemTime) {
        if self.failed_at.is_none() {
            self.failed_at = Some(at);
            self.offs_this_incident = 0;
            self.incident += 1;
        }
    }
}

/// Why a power-off for this node must not be sent now, if it must not.
pub type Gate = dyn Fn(&str) -> Option<String> + Send + Sync;

/// Everything the simulation knows for sure, shared by the drivers and the checks.
#[derive(Default)]
pub struct Truth {
    pub machines: Mutex<Vec<Machine>>,
    pub violations: Mutex<Vec<String>>,
    /// Refuses power-offs while set (the check's view of pause/opt-out/storm/identity).
    pub gate: Mutex<Option<Arc<Gate>>>,
    /// Since when an operator has had fencing paused (set before the switch is written).
    pub paused_since: Mutex<Option<Instant>>,
    /// The replica that sends the next power-off dies once it is sent.
    pub crash_on_power_off: AtomicBool,
    /// The replica that begins the next release dies once that write is done.
    pub crash_on_release: AtomicBool,
    pub counters: Mutex<Counters>,
    /// The schedule's own generator, for the faults decided per request.
    pub rng: Mutex<Rng>,
    /// Remediation requests as last seen in the store, by uid.
    pub requests: Mutex<BTreeMap<String, SeenRequest>>,
    /// The API server's store, to read the requests from.
    pub store: Mutex<Option<Store>>,
}

impl Truth {
    /// Why nothing may be powered or released now: fencing has been paused for a
    /// second (the time nodefence is given to hear of it).
    pub fn pause_refusal(&self) -> Option<String> {
        self.pause_refusal_after(Duration::ZERO)
    }

    /// [`Truth::pause_refusal`] for a replica whose requests take `latency` more.
    pub fn pause_refusal_after(&self, latency: Duration) -> Option<String> {
        lock(&self.paused_since)
            .is_some_and(|since| {
                Instant::now().duration_since(since) >= Duration::from_secs(1) + latency
            })
            .then(|| "fencing is paused".to_string())
    }
}

/// A small deterministic generator (xorshift64*), so that a seed replays exactly.
#[derive(Debug, Default)]
pub struct Rng(pub u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// What a schedule exercised.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    pub readings: u64,
    pub power_offs: u64,
    pub power_ons: u64,
    pub releases: u64,
    pub writes_checked: u64,
    /// Faults the schedule played.
    pub faults: u64,
    /// Requests answered 409/429/500 by the API fault layer.
    pub api_errors: u64,
    /// Open watch streams ended by the API fault layer.
    pub watches_ended: u64,
    /// Replicas killed right after a power-off or a release began (scripted faults).
    pub scripted_crashes: u64,
    /// Remediation requests seen, and those a release served.
    pub requests: u64,
    pub requests_served: u64,
    /// Companion seeds: beats that reached a replica, watchdogs that fired, and
    /// releases of a node marked for fencing (resting on its watchdog).
    pub beats: u64,
    pub watchdog_resets: u64,
    pub watchdog_releases: u64,
    /// Machines dead with their BMC through invariant 6's wait, released on their
    /// watchdog, and the longest it took after the faults ended (ms).
    pub watchdog_liveness: u64,
    pub watchdog_liveness_max_ms: u64,
}

impl Truth {
    /// A fair coin from the schedule's generator.
    pub fn coin(&self) -> bool {
        lock(&self.rng).below(2) == 1
    }

    pub fn violation(&self, what: String) {
        lock(&self.violations).push(what);
    }

    pub fn with<R>(&self, f: impl FnOnce(&mut Vec<Machine>) -> R) -> R {
        f(&mut lock(&self.machines))
    }

    pub fn count(&self, f: impl FnOnce(&mut Counters)) {
        f(&mut lock(&self.counters));
    }

    /// Starts a power transition on machine `i` (a no-op when already there).
    fn command(&self, i: usize, on: bool, delay: Duration) {
        self.with(|ms| {
            let m = &mut ms[i];
            if m.on == on && m.transition.is_none() {
                return;
            }
            m.transition = Some((Instant::now() + delay, on));
        });
    }

    /// Completes transitions that are due; returns nothing, changes the machines.
    pub fn settle(&self, wall: SystemTime, boot: Duration) {
        let now = Instant::now();
        self.with(|ms| {
            for m in ms.iter_mut() {
                if let Some((at, on)) = m.transition
                    && now >= at
                {
                    m.transition = None;
                    m.on = on;
                    if on {
                        m.fenced_by_us = false;
                        m.on_since = Some(wall);
                        m.off_since = None;
                        m.booted_at = Some(now + boot);
                    } else {
                        m.off_since = Some(wall);
                        m.fail(wall);
                        m.off_after_failure = true;
                    }
                }
            }
        });
    }
}

pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One replica incarnation's driver for machine `index`. A crashed incarnation's
/// drivers do nothing (`alive` false): a dead process sends no command.
pub struct SimDriver {
    pub truth: Arc<Truth>,
    pub index: usize,
    pub alive: Arc<AtomicBool>,
    pub transition: Duration,
    pub request_timeout: Duration,
}

impl SimDriver {
    fn dead(&self) -> Option<PowerError> {
        (!self.alive.load(Ordering::SeqCst))
            .then(|| PowerError::unreachable("the process that sent this has crashed"))
    }

    /// The BMC's mode and the machine it really talks to.
    fn route(&self) -> (Bmc, usize) {
        self.truth.with(|ms| {
            let bmc = ms[self.index].bmc;
            let target = match bmc {
                Bmc::OtherMachine(n) => n % ms.len(),
                _ => self.index,
            };
            (bmc, target)
        })
    }

    /// The failure this mode answers with, if any (after its delay).
    async fn fault(&self, bmc: Bmc) -> Option<PowerError> {
        tokio::time::sleep(Duration::from_millis(40)).await;
        if let Some(e) = self.dead() {
            return Some(e);
        }
        match bmc {
            Bmc::Timeout => {
                tokio::time::sleep(self.request_timeout).await;
                Some(PowerError::unreachable("operation timed out"))
            }
            Bmc::ServerError => Some(PowerError::protocol("503 Service Unavailable")),
            Bmc::AuthRefused => Some(PowerError::auth("401 Unauthorized: check the credentials")),
            Bmc::Flapping if self.truth.coin() => {
                Some(PowerError::unreachable("connection reset by peer"))
            }
            _ => None,
        }
    }

    async fn power(&self, on: bool) -> Result<(), PowerError> {
        let (bmc, target) = self.route();
        if let Some(e) = self.fault(bmc).await {
            return Err(e);
        }
        let me = self.truth.with(|ms| ms[self.index].node.clone());
        if !on {
            // The rules for sending a power-off at all (pause, opt-out, storm,
            // identity under require_identity), checked by the simulation.
            let gate = lock(&self.truth.gate).clone();
            if let Some(why) = gate.and_then(|g| g(&me)) {
                self.truth.violation(format!(
                    "invariant 2 (no power-off when it must not be sent): power-off for {me}: {why}"
                ));
            }
            if let Some(why) = self.truth.request_refusal(&me, false) {
                self.truth.violation(format!("{why}: power-off for {me}"));
            }
            if target != self.index {
                self.truth.violation(format!(
                    "invariant 2: power-off for {me} reached another machine (index {target}) through a BMC that answers for it"
                ));
            }
            let duplicate = self.truth.with(|ms| {
                let m = &mut ms[target];
                m.offs_this_incident += 1;
                m.fenced_by_us = true;
                let going_off = m.transition.is_some_and(|(_, on)| !on);
                let state = if going_off {
                    "still powering off after the last one"
                } else {
                    "already off"
                };
                (m.offs_this_incident > 1 && (m.really_off() || going_off)).then_some(state)
            });
            if let Some(state) = duplicate {
                self.truth.violation(format!(
                    "invariant 4 (one power command per incident): a second power-off for {me}, whose machine was {state}"
                ));
            }
            self.truth.count(|c| c.power_offs += 1);
            self.truth.with(|ms| {
                let m = &mut ms[target];
                if let Some(lag) = m.report_lag {
                    m.stale_on_until = Some(Instant::now() + lag);
                }
            });
            if self.truth.crash_on_power_off.swap(false, Ordering::SeqCst) {
                // Its process is gone: no request of it reaches anything any more
                // (the replica is started again when the faults are healed).
                self.alive.store(false, Ordering::SeqCst);
                self.truth.count(|c| c.scripted_crashes += 1);
            }
        } else {
            if let Some(why) = self.truth.pause_refusal() {
                self.truth.violation(format!(
                    "invariant 2 (nothing powered while paused): power-on for {me}: {why}"
                ));
            }
            if let Some(why) = self.truth.request_refusal(&me, true) {
                self.truth.violation(format!("{why}: power-on for {me}"));
            }
            self.truth.with(|ms| {
                ms[target].fenced_by_us = false;
                ms[target].stale_on_until = None;
            });
            self.truth.count(|c| c.power_ons += 1);
        }
        self.truth.command(target, on, self.transition);
        if bmc == Bmc::LosesReplies {
            return Err(PowerError::unreachable(
                "connection reset by peer (reply lost)",
            ));
        }
        Ok(())
    }
}

#[async_trait]
impl PowerDriver for SimDriver {
    fn driver_name(&self) -> &'static str {
        "redfish"
    }

    fn endpoint(&self) -> String {
        format!("sim://machine-{}", self.index)
    }

    async fn status(&self) -> Result<PowerReading, PowerError> {
        let (bmc, target) = self.route();
        if let Some(e) = self.fault(bmc).await {
            return Err(e);
        }
        let at = nodefence::clock::now();
        let state = self.truth.with(|ms| {
            let m = &mut ms[target];
            let truth = m.state();
            m.answered += 1;
            if m.stale_on_until.is_some_and(|until| Instant::now() < until) {
                return PowerState::On;
            }
            if bmc == Bmc::Lies && m.answered % 3 == 0 {
                return PowerState::Off;
            }
            if truth == PowerState::Off && target == self.index {
                m.last_off_reading = Some(at);
            }
            truth
        });
        self.truth.count(|c| c.readings += 1);
        Ok(PowerReading {
            state,
            at,
            latency: Duration::from_millis(40),
        })
    }

    async fn power_off(&self) -> Result<(), PowerError> {
        self.power(false).await
    }

    async fn power_on(&self) -> Result<(), PowerError> {
        self.power(true).await
    }

    async fn reboot(&self) -> Result<(), PowerError> {
        Err(PowerError::unsupported("the simulation never reboots"))
    }

    async fn machine_identity(&self) -> Result<MachineIdentity, PowerError> {
        let (bmc, target) = self.route();
        if let Some(e) = self.dead() {
            return Err(e);
        }
        if matches!(bmc, Bmc::Timeout | Bmc::ServerError | Bmc::AuthRefused) {
            return Err(PowerError::unreachable("identity not read"));
        }
        Ok(MachineIdentity::Uuid(
            self.truth.with(|ms| ms[target].uuid.clone()),
        ))
    }
}
