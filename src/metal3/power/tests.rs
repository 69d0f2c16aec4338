#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Mutex;
use std::time::Duration;

use super::*;

/// A BareMetalHost kept in memory.
struct Hosts {
    host: Mutex<BareMetalHost>,
    fail_reads: Mutex<bool>,
}

impl Hosts {
    fn new(extra: serde_json::Value) -> Arc<Self> {
        let mut v = serde_json::json!({
            "metadata": {"name": "worker-1", "namespace": "metal3", "annotations": {}},
            "spec": {"online": true, "bmc": {"address": "redfish://bmc/", "credentialsName": "s"}},
            "status": {"poweredOn": true},
        });
        if let (Some(v), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
            for (k, e) in extra {
                if let (Some(dst), Some(src)) =
                    (v.get_mut(k).and_then(|d| d.as_object_mut()), e.as_object())
                {
                    for (k2, e2) in src {
                        dst.insert(k2.clone(), e2.clone());
                    }
                }
            }
        }
        Arc::new(Self {
            host: Mutex::new(serde_json::from_value(v).unwrap()),
            fail_reads: Mutex::new(false),
        })
    }

    fn annotations(&self) -> std::collections::BTreeMap<String, String> {
        self.host
            .lock()
            .unwrap()
            .metadata
            .annotations
            .clone()
            .unwrap_or_default()
    }

    fn set_powered_on(&self, on: bool) {
        self.host
            .lock()
            .unwrap()
            .status
            .as_mut()
            .unwrap()
            .powered_on = on;
    }
}

#[async_trait]
impl HostApi for Hosts {
    async fn get(&self, host: &HostRef) -> Result<BareMetalHost, PowerError> {
        if *self.fail_reads.lock().unwrap() {
            return Err(PowerError::unreachable(format!("cannot read {host}")));
        }
        Ok(self.host.lock().unwrap().clone())
    }

    async fn annotate(
        &self,
        _host: &HostRef,
        key: &str,
        value: Option<&str>,
    ) -> Result<(), PowerError> {
        let mut h = self.host.lock().unwrap();
        let a = h.metadata.annotations.get_or_insert_with(Default::default);
        match value {
            Some(v) => a.insert(key.into(), v.into()),
            None => a.remove(key),
        };
        Ok(())
    }
}

/// A BMC whose state the test sets, counting direct commands.
#[derive(Default)]
struct Bmc {
    state: Mutex<Option<PowerState>>,
    commands: Mutex<Vec<&'static str>>,
}

impl Bmc {
    fn new(state: PowerState) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(Some(state)),
            commands: Mutex::default(),
        })
    }

    fn set(&self, state: PowerState) {
        *self.state.lock().unwrap() = Some(state);
    }
}

#[async_trait]
impl PowerDriver for Bmc {
    fn driver_name(&self) -> &'static str {
        "redfish"
    }
    fn endpoint(&self) -> String {
        "https://bmc".into()
    }
    async fn status(&self) -> Result<PowerReading, PowerError> {
        match self.state.lock().unwrap().clone() {
            Some(state) => Ok(PowerReading {
                state,
                at: std::time::SystemTime::now(),
                latency: Duration::from_millis(1),
            }),
            None => Err(PowerError::unreachable("bmc down")),
        }
    }
    async fn power_off(&self) -> Result<(), PowerError> {
        self.commands.lock().unwrap().push("off");
        Ok(())
    }
    async fn power_on(&self) -> Result<(), PowerError> {
        self.commands.lock().unwrap().push("on");
        Ok(())
    }
    async fn reboot(&self) -> Result<(), PowerError> {
        Ok(())
    }
    async fn machine_identity(&self) -> Result<MachineIdentity, PowerError> {
        Ok(MachineIdentity::Uuid("4c4c4544-0031".into()))
    }
}

fn href() -> HostRef {
    HostRef::new("metal3", "worker-1")
}

fn driver(bmc: &Arc<Bmc>, hosts: &Arc<Hosts>) -> Metal3Driver {
    Metal3Driver::new(bmc.clone(), href(), hosts.clone())
}

#[tokio::test]
async fn off_only_when_the_bmc_and_the_host_both_say_off() {
    let bmc = Bmc::new(PowerState::On);
    let hosts = Hosts::new(serde_json::json!({}));
    let d = driver(&bmc, &hosts);
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    // The BMC says Off first (Metal3 has not seen it yet): not Off.
    bmc.set(PowerState::Off);
    let state = d.status().await.unwrap().state;
    assert!(!state.is_off());
    assert!(
        state.to_string().contains("status.poweredOn: true"),
        "{state}"
    );
    hosts.set_powered_on(false);
    assert_eq!(d.status().await.unwrap().state, PowerState::Off);
    // The host says off, the BMC On (Ironic's sync about to act): Unknown, not On.
    bmc.set(PowerState::On);
    let state = d.status().await.unwrap().state;
    assert!(matches!(state, PowerState::Unknown(_)), "{state}");
    // An unreadable host never lets an Off through.
    bmc.set(PowerState::Off);
    *hosts.fail_reads.lock().unwrap() = true;
    let state = d.status().await.unwrap().state;
    assert!(state.to_string().contains("cannot be read"), "{state}");
    // Transitions are the BMC's; a BMC failure is the failure.
    bmc.set(PowerState::PoweringOff);
    assert_eq!(d.status().await.unwrap().state, PowerState::PoweringOff);
    *bmc.state.lock().unwrap() = None;
    assert_eq!(
        d.status().await.unwrap_err().kind,
        PowerErrorKind::Unreachable
    );
    // The identity is the BMC's.
    assert_eq!(
        d.machine_identity().await.unwrap(),
        MachineIdentity::Uuid("4c4c4544-0031".into())
    );
    assert_eq!(d.driver_name(), "metal3");
    assert_eq!(
        d.endpoint(),
        "BareMetalHost metal3/worker-1 (redfish https://bmc)"
    );
}

#[tokio::test]
async fn power_off_and_on_are_asked_of_metal3_never_sent_to_the_bmc() {
    let bmc = Bmc::new(PowerState::On);
    let hosts = Hosts::new(serde_json::json!({}));
    let d = driver(&bmc, &hosts);
    d.power_off().await.unwrap();
    assert_eq!(
        hosts
            .annotations()
            .get("reboot.metal3.io/nodefence")
            .map(String::as_str),
        Some(r#"{"mode":"hard"}"#)
    );
    d.power_on().await.unwrap();
    assert!(
        !hosts
            .annotations()
            .contains_key("reboot.metal3.io/nodefence")
    );
    assert!(
        bmc.commands.lock().unwrap().is_empty(),
        "nothing behind Metal3's back"
    );
    assert_eq!(
        d.reboot().await.unwrap_err().kind,
        PowerErrorKind::Unsupported
    );
}

#[tokio::test]
async fn hosts_metal3_cannot_power_off_are_refused_with_the_reason() {
    let bmc = Bmc::new(PowerState::On);
    let paused = Hosts::new(serde_json::json!({
        "metadata": {"annotations": {"baremetalhost.metal3.io/paused": "x"}}
    }));
    let e = driver(&bmc, &paused).power_off().await.unwrap_err();
    assert!(e.message.contains("paused"), "{e}");
    assert!(paused.annotations().len() == 1, "nothing asked");
    let no_off = Hosts::new(serde_json::json!({"spec": {"disablePowerOff": true}}));
    let e = driver(&bmc, &no_off).power_off().await.unwrap_err();
    assert!(e.message.contains("disablePowerOff"), "{e}");
    assert!(bmc.commands.lock().unwrap().is_empty());
    // online: false: the hold is released, but Metal3 keeps the host off: said.
    let offline = Hosts::new(serde_json::json!({"spec": {"online": false}}));
    let d = driver(&bmc, &offline);
    d.power_off().await.unwrap();
    let e = d.power_on().await.unwrap_err();
    assert!(e.message.contains("online: false"), "{e}");
    assert!(offline.annotations().is_empty());
}

#[tokio::test]
async fn a_detached_host_is_powered_directly() {
    let bmc = Bmc::new(PowerState::On);
    let hosts = Hosts::new(serde_json::json!({
        "metadata": {"annotations": {"baremetalhost.metal3.io/detached": ""}}
    }));
    let d = driver(&bmc, &hosts);
    d.power_off().await.unwrap();
    d.power_on().await.unwrap();
    assert_eq!(*bmc.commands.lock().unwrap(), ["off", "on"]);
    assert_eq!(hosts.annotations().len(), 1, "no reboot annotation");
}
