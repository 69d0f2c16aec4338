//! The topology driver against small fake levels, on paused time.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use super::*;
use crate::power::PowerAction;
use crate::power::confirm::{ConfirmPolicy, execute};

/// A level with scripted answers: `status` answers `state`; a successful
/// `power_off` changes the state to `after_off` (if any).
struct Fake {
    name: &'static str,
    state: Mutex<Result<PowerState, PowerError>>,
    off: Result<(), PowerError>,
    after_off: Option<PowerState>,
    identity: Result<MachineIdentity, PowerError>,
    commands: Mutex<Vec<PowerAction>>,
    /// How long `status` takes before it answers.
    delay: Duration,
}

impl Fake {
    fn new(name: &'static str, state: Result<PowerState, PowerError>) -> Self {
        Self {
            name,
            state: Mutex::new(state),
            off: Ok(()),
            after_off: Some(PowerState::Off),
            identity: Ok(MachineIdentity::Unavailable("fake".into())),
            commands: Mutex::new(Vec::new()),
            delay: Duration::ZERO,
        }
    }
    fn slow(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
    /// Accepts power off but the machine stays as it is (a lying BMC).
    fn ignoring_off(mut self) -> Self {
        self.after_off = None;
        self
    }
    fn failing_off(mut self, e: PowerError) -> Self {
        self.off = Err(e);
        self
    }
    fn with_identity(mut self, id: Result<MachineIdentity, PowerError>) -> Self {
        self.identity = id;
        self
    }
    fn commands(&self) -> Vec<PowerAction> {
        self.commands.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

#[async_trait]
impl PowerDriver for Fake {
    fn driver_name(&self) -> &'static str {
        self.name
    }
    fn endpoint(&self) -> String {
        format!("{}-host", self.name)
    }
    async fn status(&self) -> Result<PowerReading, PowerError> {
        tokio::time::sleep(self.delay).await;
        let state = self
            .state
            .lock()
            .map_err(|_| PowerError::protocol("poisoned"))?
            .clone()?;
        Ok(PowerReading {
            state,
            at: SystemTime::now(),
            latency: Duration::from_millis(1),
        })
    }
    async fn power_off(&self) -> Result<(), PowerError> {
        if let Ok(mut c) = self.commands.lock() {
            c.push(PowerAction::Off);
        }
        self.off.clone()?;
        if let (Some(next), Ok(mut state)) = (&self.after_off, self.state.lock()) {
            *state = Ok(next.clone());
        }
        Ok(())
    }
    async fn power_on(&self) -> Result<(), PowerError> {
        if let Ok(mut c) = self.commands.lock() {
            c.push(PowerAction::On);
        }
        Ok(())
    }
    async fn reboot(&self) -> Result<(), PowerError> {
        Err(PowerError::unsupported("fake"))
    }
    async fn machine_identity(&self) -> Result<MachineIdentity, PowerError> {
        self.identity.clone()
    }
}

fn policy() -> ConfirmPolicy {
    ConfirmPolicy {
        readings: 2,
        interval: Duration::from_secs(1),
        timeout: Duration::from_secs(10),
    }
}

fn topology(levels: &[&Arc<Fake>]) -> TopologyDriver {
    let levels = levels
        .iter()
        .map(|l| Arc::clone(l) as Arc<dyn PowerDriver>)
        .collect();
    TopologyDriver::new(levels, policy()).expect("levels")
}

#[test]
fn empty_topology_is_refused_and_names_read_from_levels() {
    assert!(TopologyDriver::new(Vec::new(), policy()).is_none());
    let a = Arc::new(Fake::new("redfish", Ok(PowerState::On)));
    let b = Arc::new(Fake::new("exec", Ok(PowerState::On)));
    let t = topology(&[&a, &b]);
    assert_eq!(t.driver_name(), "redfish");
    assert_eq!(t.endpoint(), "redfish redfish-host → exec exec-host");
}

#[tokio::test(start_paused = true)]
async fn status_comes_from_the_first_certain_level() {
    let a = Arc::new(Fake::new("a", Ok(PowerState::Unknown("?".into()))));
    let b = Arc::new(Fake::new("b", Err(PowerError::unreachable("down"))));
    let c = Arc::new(Fake::new("c", Ok(PowerState::Off)));
    let d = Arc::new(Fake::new("d", Ok(PowerState::On)));
    let t = topology(&[&a, &b, &c, &d]);
    assert_eq!(t.status().await.expect("status").state, PowerState::Off);

    // Only an uncertain answer: it is returned as is, never made into Off.
    let t = topology(&[&b, &a]);
    let state = t.status().await.expect("status").state;
    assert_eq!(state, PowerState::Unknown("?".into()));
}

#[tokio::test(start_paused = true)]
async fn status_errors_skip_to_the_next_level_and_all_errors_are_named() {
    let a = Arc::new(Fake::new("a", Err(PowerError::auth("bad password"))));
    let b = Arc::new(Fake::new("b", Ok(PowerState::On)));
    assert_eq!(
        topology(&[&a, &b]).status().await.expect("ok").state,
        PowerState::On
    );

    let c = Arc::new(Fake::new("c", Err(PowerError::unreachable("timed out"))));
    let err = topology(&[&a, &c])
        .status()
        .await
        .expect_err("no level answers");
    assert_eq!(err.kind, PowerErrorKind::Auth);
    assert!(
        err.message
            .contains("level 1 (a a-host): auth: bad password"),
        "{err}"
    );
    assert!(
        err.message
            .contains("level 2 (c c-host): unreachable: timed out"),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn unconfirmed_off_moves_to_the_next_level() {
    // Level 1 accepts the command but keeps reporting On; level 2 really cuts power.
    let a = Arc::new(Fake::new("bmc", Ok(PowerState::On)).ignoring_off());
    let b = Arc::new(Fake::new("pdu", Ok(PowerState::On)));
    let t = topology(&[&a, &b]);
    t.power_off().await.expect("level 2 confirms off");
    assert_eq!(a.commands(), vec![PowerAction::Off]);
    assert_eq!(b.commands(), vec![PowerAction::Off]);

    // Through the confirm loop: level 1 still answers On with certainty, so that is
    // the topology's status: a level that says On keeps the machine "on" for the
    // caller. Never a false Off.
    let outcome = execute(&t, PowerAction::Off, &policy()).await;
    assert!(
        outcome.is_err(),
        "a contradicting level 1 must not be confirmed off"
    );
}

#[tokio::test(start_paused = true)]
async fn confirm_loop_with_a_dead_primary_is_confirmed_by_the_fallback() {
    let a = Arc::new(
        Fake::new("bmc", Err(PowerError::unreachable("hung")))
            .failing_off(PowerError::unreachable("hung")),
    );
    let b = Arc::new(Fake::new("pdu", Ok(PowerState::On)));
    let t = topology(&[&a, &b]);
    let outcome = execute(&t, PowerAction::Off, &policy())
        .await
        .expect("confirmed off through level 2");
    assert_eq!(outcome.off.map(|c| c.state), Some(PowerState::Off));
    assert_eq!(b.commands(), vec![PowerAction::Off]);
}

#[tokio::test(start_paused = true)]
async fn off_failing_everywhere_names_each_level() {
    let a = Arc::new(Fake::new("bmc", Ok(PowerState::On)).failing_off(PowerError::auth("denied")));
    let b = Arc::new(Fake::new("pdu", Ok(PowerState::On)).ignoring_off());
    let err = topology(&[&a, &b])
        .power_off()
        .await
        .expect_err("nothing confirms");
    assert!(
        err.message.contains("level 1 (bmc bmc-host): auth: denied"),
        "{err}"
    );
    assert!(err.message.contains("level 2 (pdu pdu-host)"), "{err}");
    assert!(err.message.contains("could not confirm Off"), "{err}");
    assert_eq!(b.commands(), vec![PowerAction::Off]);
}

#[tokio::test(start_paused = true)]
async fn power_on_uses_the_first_level_that_accepts_and_reboot_is_refused() {
    let a = Arc::new(Fake::new("bmc", Ok(PowerState::Off)));
    let b = Arc::new(Fake::new("pdu", Ok(PowerState::Off)));
    let t = topology(&[&a, &b]);
    t.power_on().await.expect("on");
    assert_eq!(a.commands(), vec![PowerAction::On]);
    assert!(b.commands().is_empty());
    let err = t.reboot().await.expect_err("unsupported");
    assert_eq!(err.kind, PowerErrorKind::Unsupported);
}

#[tokio::test(start_paused = true)]
async fn identity_comes_from_the_first_level_that_can_tell() {
    let pdu = Arc::new(Fake::new("exec", Ok(PowerState::On)));
    let bmc = Arc::new(
        Fake::new("ipmi", Ok(PowerState::On))
            .with_identity(Ok(MachineIdentity::Uuid("4c4c4544-0042".into()))),
    );
    let t = topology(&[&pdu, &bmc]);
    assert_eq!(
        t.machine_identity().await.expect("identity"),
        MachineIdentity::Uuid("4c4c4544-0042".into())
    );
    // Nobody can tell: the first level's answer.
    let t = topology(&[&pdu, &pdu]);
    assert!(matches!(
        t.machine_identity().await,
        Ok(MachineIdentity::Unavailable(_))
    ));
}

/// A dead primary BMC and a PDU that reads Off: the Off is real, but nobody proves
/// whose machine it is, so the identity check stays unknown (and `require_identity`,
/// on by default for a BMC primary, blocks the release).
#[tokio::test(start_paused = true)]
async fn a_dead_primary_leaves_the_identity_unproven_even_when_a_fallback_reads_off() {
    let bmc = Arc::new(
        Fake::new("redfish", Err(PowerError::unreachable("down")))
            .with_identity(Err(PowerError::unreachable("down"))),
    );
    let pdu = Arc::new(Fake::new("exec", Ok(PowerState::Off)));
    let t = topology(&[&bmc, &pdu]);
    assert_eq!(t.status().await.expect("status").state, PowerState::Off);
    let identity = t.machine_identity().await;
    assert!(identity.is_err(), "{identity:?}");
    let node = crate::identity::NodeIdentity {
        system_uuid: Some("4c4c4544-0042-3510-8052-b2c04f503131".into()),
        provider_id: None,
    };
    let machine = identity.unwrap_or_else(|e| MachineIdentity::Unavailable(e.message));
    assert!(matches!(
        crate::identity::check(&node, &machine),
        crate::identity::IdentityCheck::Unknown(_)
    ));
}

/// The identity that goes with a reading is the deciding level's: a BMC that proved
/// its machine (and remembers it) does not vouch for the PDU level that reads Off
/// while the BMC is down; a native fallback that can tell proves its own reading.
#[tokio::test(start_paused = true)]
async fn a_reading_comes_with_the_identity_of_the_level_that_decided_it() {
    let uuid = || MachineIdentity::Uuid("4c4c4544-0042".into());
    // The BMC is down but remembers what it proved; the PDU reads Off.
    let bmc = Arc::new(
        Fake::new("redfish", Err(PowerError::unreachable("down"))).with_identity(Ok(uuid())),
    );
    let pdu = Arc::new(Fake::new("exec", Ok(PowerState::Off)));
    let t = topology(&[&bmc, &pdu]);
    assert_eq!(t.machine_identity().await.expect("identity"), uuid());
    let (identity, reading) = t.read_with_identity().await;
    assert_eq!(reading.expect("reading").state, PowerState::Off);
    match identity {
        Ok(MachineIdentity::Unavailable(why)) => {
            assert!(why.contains("level 2 (exec exec-host)"), "{why}");
            assert!(why.contains("does not vouch"), "{why}");
        }
        other => panic!("the PDU's reading was vouched for: {other:?}"),
    }
    // A fallback that can tell proves its own reading.
    let ipmi = Arc::new(
        Fake::new("ipmi", Ok(PowerState::Off))
            .with_identity(Ok(MachineIdentity::Uuid("4c4c4544-0099".into()))),
    );
    let t = topology(&[&bmc, &ipmi]);
    let (identity, _) = t.read_with_identity().await;
    assert_eq!(
        identity.expect("identity"),
        MachineIdentity::Uuid("4c4c4544-0099".into())
    );
    // The primary answering: its own identity, as before.
    let healthy = Arc::new(Fake::new("redfish", Ok(PowerState::On)).with_identity(Ok(uuid())));
    let t = topology(&[&healthy, &pdu]);
    let (identity, reading) = t.read_with_identity().await;
    assert_eq!(identity.expect("identity"), uuid());
    assert_eq!(reading.expect("reading").state, PowerState::On);
    // No level certain: no Off to vouch for, and no level asked twice.
    let dead = Arc::new(Fake::new("exec", Err(PowerError::unreachable("gone"))));
    let t = topology(&[&bmc, &dead]);
    let (identity, reading) = t.read_with_identity().await;
    assert!(reading.is_err());
    let not_asked = identity.expect_err("not asked");
    assert!(not_asked.message.contains("not asked"), "{not_asked}");
}

/// A reading's latency is the whole call's: a primary that times out before a
/// fallback answers shows in the power-query latency metric and in `status` output.
#[tokio::test(start_paused = true)]
async fn a_readings_latency_includes_the_levels_that_failed_before_it() {
    let hung = Arc::new(
        Fake::new("redfish", Err(PowerError::unreachable("timed out")))
            .slow(Duration::from_secs(2)),
    );
    let ipmi = Arc::new(Fake::new("ipmi", Ok(PowerState::On)));
    let t = topology(&[&hung, &ipmi]);
    let reading = t.status().await.expect("status");
    assert!(
        reading.latency >= Duration::from_secs(2),
        "{:?}",
        reading.latency
    );
    let (_, reading) = t.read_with_identity().await;
    let latency = reading.expect("reading").latency;
    assert!(latency >= Duration::from_secs(2), "{latency:?}");
}

/// The BMC monitor reads every level once and derives the node's answer with
/// `overall`: it must be what `status` answers, whatever the mix of levels.
#[tokio::test(start_paused = true)]
async fn overall_from_every_reading_is_what_status_answers() {
    let answers = [
        Ok(PowerState::On),
        Ok(PowerState::Off),
        Ok(PowerState::PoweringOff),
        Ok(PowerState::Unknown("?".into())),
        Err(PowerError::unreachable("down")),
        Err(PowerError::auth("denied")),
    ];
    let mut checked = 0;
    for a in &answers {
        for b in &answers {
            for c in &answers {
                let levels: Vec<Arc<Fake>> = [("a", a), ("b", b), ("c", c)]
                    .into_iter()
                    .map(|(n, s)| Arc::new(Fake::new(n, s.clone())))
                    .collect();
                let t = topology(&levels.iter().collect::<Vec<_>>());
                let dyn_levels = PowerDriver::levels(&t);
                assert_eq!(dyn_levels.len(), 3);
                let mut readings = Vec::new();
                for l in dyn_levels {
                    readings.push(l.status().await);
                }
                let from_all = overall(dyn_levels, readings).map(|r| r.state);
                let lazy = t.status().await.map(|r| r.state);
                assert_eq!(from_all, lazy, "levels {a:?} {b:?} {c:?}");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 216);
    // A plain driver has no levels.
    let plain = Fake::new("redfish", Ok(PowerState::On));
    assert!(PowerDriver::levels(&plain).is_empty());
}
