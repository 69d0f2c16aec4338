//! The companions of `rack-power` and of `power-loss --companions`: the real
//! `nodefence companion` ([`crate::companion::run`]) on every node, the control plane's
//! too (the DaemonSet tolerates every taint: the cluster's size, which a peer majority
//! is counted of, is every Node), in this process, each with a simulated hardware watchdog that tells the truth. With a
//! standby replica, each companion beats to both replicas' listeners.
//!
//! Each companion says hello to nodefence's listener with its node's projected token
//! (issued by fake-kube, bound to the node), over TLS to the listener's certificate
//! (it trusts the private CA the world made), beats over UDP, feeds its watchdog while
//! its rule allows, and reads its own Node when the leader falls silent, as the
//! DaemonSet's companions do.
//!
//! The watchdog is a [`RecordingWatchdog`] granting [`WATCHDOG_TIMEOUT`], and a timer
//! of the demo's own does what the hardware would: once it has not been fed for its
//! timeout, it resets a machine that is powered (the machine switched off and on
//! through the mock BMC: its kubelet restarts with a new boot ID; its companion dies
//! with the old boot), and can do nothing for a machine without power, which is off
//! anyway. Either way the story says so, as a `watchdog` step: the ground truth the
//! release rule's arithmetic stands for.
//!
//! A companion killed with its machine says nothing more; one stopped cleanly (the end
//! of the scenario) says "stopping" and disarms its watchdog, which then never fires.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use nodefence_mocks::redfish::MockPower;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::cluster::{CONTROL_PLANE, MachineSwitch, WORKERS, World};
use super::narrate::span;
use super::timeline::{Actor, Fact, Step, Story};
use crate::companion::{self, Options, Status, WatchdogChoice};
use crate::watchdog::device::{RecordingWatchdog, Watchdog as _};

/// The timeout each simulated watchdog grants (W): the operator guide's example, so
/// the wait is its worked 12.74 s.
pub const WATCHDOG_TIMEOUT: Duration = Duration::from_secs(10);
/// The identity the simulated watchdogs report (the beats name it).
const WATCHDOG_IDENTITY: &str = "demo_wdt";
/// How often a simulated watchdog's timer looks at its last feed.
const TIMER_TICK: Duration = Duration::from_millis(50);
/// How long a watchdog reset keeps a machine off.
const RESET_OFF: Duration = Duration::from_secs(1);

/// One node's companion, running.
struct Member {
    status: Arc<Mutex<Status>>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
    /// The simulated watchdog's timer (it ends once the watchdog is disarmed or ran
    /// out); none on the control plane's node, which has no machine switch here and
    /// whose companion is never stopped before the end.
    timer: Option<JoinHandle<()>>,
}

/// The companions of every node.
pub struct Fleet {
    members: BTreeMap<String, Member>,
    /// The nodes whose watchdog reset a powered machine.
    fired: Arc<Mutex<Vec<String>>>,
    /// Each companion's count of acknowledgements when its watchdog was first seen
    /// armed (see [`Fleet::all_armed`]).
    armed_at: Mutex<BTreeMap<String, u64>>,
}

impl Fleet {
    /// Starts a companion on every node; nodefence must run with its listener.
    pub async fn start(world: &World, story: &Story) -> anyhow::Result<Fleet> {
        let url = world
            .companion_listener()
            .context("nodefence runs without its companion listener")?;
        let fired: Arc<Mutex<Vec<String>>> = Arc::default();
        let mut members = BTreeMap::new();
        for node in std::iter::once(CONTROL_PLANE).chain(WORKERS) {
            let dog = RecordingWatchdog::new(WATCHDOG_IDENTITY, WATCHDOG_TIMEOUT, false);
            let options = Options {
                nodefence: url.clone(),
                tls: crate::config::TlsSettings {
                    ca_file: Some(world.companion_ca()),
                    ..Default::default()
                },
                token_file: world.companion_token(node)?,
                watchdog: WatchdogChoice::Given(Box::new(dog.clone())),
                replicas: world.companion_replicas(),
                api: Some(companion::api::ApiAccess {
                    client: world.companion_client().await?,
                }),
                peers: None,
                state_dir: None,
                resolver: Default::default(),
                realtime: false,
                boot_id: world
                    .boot_id(node)
                    .with_context(|| format!("{node} reports no boot ID"))?,
                // The demo's machines are bare metal.
                machine: companion::machine::MachineKind::Physical,
            };
            let status = Arc::new(Mutex::new(Status::default()));
            let (stop, stopped) = oneshot::channel::<()>();
            let running = status.clone();
            let task = tokio::spawn(async move {
                if let Err(e) = companion::run(options, running, async move {
                    let _ = stopped.await;
                })
                .await
                {
                    tracing::warn!("demo: a companion ended with an error: {e:#}");
                }
            });
            let timer = if node == CONTROL_PLANE {
                None
            } else {
                Some(tokio::spawn(watchdog_timer(
                    node.to_string(),
                    dog,
                    world.machine(node)?,
                    task.abort_handle(),
                    story.clone(),
                    fired.clone(),
                )))
            };
            members.insert(
                node.to_string(),
                Member {
                    status,
                    stop: Some(stop),
                    task,
                    timer,
                },
            );
        }
        Ok(Fleet {
            members,
            fired,
            armed_at: Mutex::default(),
        })
    }

    /// Whether every companion beats and, where the leader says its node's policy has
    /// the watchdog level on, feeds its armed watchdog and nodefence knows it is armed:
    /// two beats acknowledged since it was armed (the beats say so from the first sent
    /// after it, and nodefence marks nothing without it). Where the level is off (the
    /// control-plane node, or no `watchdog_fencing`), nothing is armed.
    pub fn all_armed(&self) -> bool {
        let mut armed_at = lock(&self.armed_at);
        self.members.iter().all(|(node, m)| {
            let s = lock(&m.status);
            match s.arm_wanted {
                None => false,
                Some(false) => s.armed.is_none() && s.acknowledged >= 2,
                Some(true) => {
                    if s.armed.is_none() || !s.feeding {
                        return false;
                    }
                    let since = *armed_at.entry(node.clone()).or_insert(s.acknowledged);
                    s.acknowledged >= since + 2
                }
            }
        })
    }

    /// Kills `node`'s companion with its machine: no last word.
    pub fn kill(&self, node: &str) {
        if let Some(m) = self.members.get(node) {
            m.task.abort();
        }
    }

    /// The nodes whose watchdog reset a powered machine.
    pub fn fired(&self) -> Vec<String> {
        lock(&self.fired).clone()
    }

    /// Stops every companion still running cleanly (each disarms its watchdog).
    pub async fn stop(self) {
        for (node, mut m) in self.members {
            if let Some(stop) = m.stop.take() {
                let _ = stop.send(());
            }
            if tokio::time::timeout(Duration::from_secs(5), &mut m.task)
                .await
                .is_err()
            {
                tracing::warn!("demo: {node}'s companion did not stop within 5s; aborted");
                m.task.abort();
            }
            if let Some(timer) = m.timer {
                timer.abort();
                let _ = timer.await;
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The hardware's side of a simulated watchdog: once armed (first fed) and not fed
/// for its timeout, it resets the machine if powered, else tells that it cannot.
async fn watchdog_timer(
    node: String,
    dog: RecordingWatchdog,
    machine: MachineSwitch,
    companion: tokio::task::AbortHandle,
    story: Story,
    fired: Arc<Mutex<Vec<String>>>,
) {
    let granted = dog.granted();
    let timeout = span(granted);
    loop {
        tokio::time::sleep(TIMER_TICK).await;
        let seen = dog.recorded();
        if seen.disarmed {
            return;
        }
        let Some(last) = seen.last_feed else { continue };
        let unfed = last.elapsed();
        if unfed < granted {
            continue;
        }
        // When it ran out, on the story's clock.
        let at = crate::clock::now()
            .checked_sub(unfed - granted)
            .unwrap_or_else(crate::clock::now);
        if machine.power() == Some(MockPower::On) {
            story.record(Step::new(
                at,
                &node,
                Actor::Watchdog,
                Fact::Watchdog { fired: true },
                format!(
                    "not fed for {timeout}: fires, resets the machine (its companion dies with it)"
                ),
            ));
            lock(&fired).push(node.clone());
            companion.abort();
            if let Err(e) = machine.set(MockPower::Off) {
                tracing::warn!("demo: the watchdog of {node} could not reset it: {e:#}");
                return;
            }
            tokio::time::sleep(RESET_OFF).await;
            if let Err(e) = machine.set(MockPower::On) {
                tracing::warn!("demo: the watchdog of {node} could not power it on: {e:#}");
            }
        } else {
            story.record(Step::new(
                at,
                &node,
                Actor::Watchdog,
                Fact::Watchdog { fired: false },
                format!(
                    "not fed for {timeout}: a running machine would be reset now; this one has no \
                     power, so it is off anyway"
                ),
            ));
        }
        return;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::style::Style;
    use nodefence_mocks::redfish::{MockRedfish, Profile, SystemSpec};

    /// A machine of a mock BMC, its simulated watchdog (granting 300 ms, fed once) and
    /// its timer, with a stand-in for its companion.
    async fn armed(
        power: MockPower,
    ) -> (
        Arc<nodefence_mocks::redfish::MockRedfishHandle>,
        Story,
        Arc<Mutex<Vec<String>>>,
        JoinHandle<()>,
        JoinHandle<()>,
    ) {
        let bmc = Arc::new(
            MockRedfish::builder()
                .profile(Profile::MultiSystem)
                .system(SystemSpec::new("Blade1").power(power))
                .start()
                .await
                .unwrap(),
        );
        let (story, _printer) = Story::start(Box::new(std::io::sink()), Style::new(false), 1.0);
        let mut dog = RecordingWatchdog::new(WATCHDOG_IDENTITY, Duration::from_millis(300), false);
        dog.feed().unwrap();
        let companion = tokio::spawn(std::future::pending::<()>());
        let fired: Arc<Mutex<Vec<String>>> = Arc::default();
        let timer = tokio::spawn(watchdog_timer(
            "worker-1".into(),
            dog,
            MachineSwitch::new(bmc.clone(), Default::default(), "Blade1"),
            companion.abort_handle(),
            story.clone(),
            fired.clone(),
        ));
        (bmc, story, fired, companion, timer)
    }

    #[tokio::test]
    async fn an_unfed_watchdog_resets_a_running_machine_and_its_companion_dies() {
        let (bmc, story, fired, companion, timer) = armed(MockPower::On).await;
        timer.await.unwrap();
        assert_eq!(*lock(&fired), ["worker-1"]);
        assert!(
            companion.await.unwrap_err().is_cancelled(),
            "it died with the boot"
        );
        assert_eq!(
            bmc.power("Blade1"),
            Some(MockPower::On),
            "off, then on again"
        );
        let told = story.all(std::time::SystemTime::UNIX_EPOCH, |_| true);
        assert_eq!(told.len(), 1, "{told:?}");
        assert_eq!(told[0].fact, Fact::Watchdog { fired: true });
        assert!(
            told[0].text.contains("fires, resets the machine"),
            "{}",
            told[0].text
        );
    }

    #[tokio::test]
    async fn an_unpowered_watchdog_resets_nothing_and_says_so() {
        let (bmc, story, fired, _companion, timer) = armed(MockPower::Off).await;
        timer.await.unwrap();
        assert!(lock(&fired).is_empty());
        assert_eq!(bmc.power("Blade1"), Some(MockPower::Off));
        let told = story.all(std::time::SystemTime::UNIX_EPOCH, |_| true);
        assert_eq!(told[0].fact, Fact::Watchdog { fired: false });
        assert!(
            told[0].text.contains("this one has no power"),
            "{}",
            told[0].text
        );
    }

    #[test]
    fn the_simulated_watchdog_grants_the_guides_timeout() {
        let dog = RecordingWatchdog::new(WATCHDOG_IDENTITY, WATCHDOG_TIMEOUT, false);
        assert_eq!(dog.granted(), Duration::from_secs(10));
        assert_ne!(
            dog.info().identity,
            crate::watchdog::device::SOFTDOG_IDENTITY,
            "the companion refuses softdog"
        );
    }
}
