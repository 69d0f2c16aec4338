//! The heartbeat's watchdog evidence against a companion not upgraded yet: its version 2
//! beats are read and answered, and nothing is ever released on its watchdog.

use std::time::Duration;

use nodefence_watchdog::timing::Timing;
use nodefence_watchdog::wire::{self, Beat, DeviceName, Key, WatchdogState};

use super::*;

#[test]
fn a_version_2_companion_is_answered_but_nothing_rests_on_its_watchdog() {
    let (hb, _silent) = new_heartbeat(
        Timing::default(),
        Duration::from_secs(2),
        SocketAddr::from(([127, 0, 0, 1], 0)),
    );
    hb.began_leading();
    let (session, key) = hb
        .open_session("worker-1")
        .unwrap_or_else(|e| panic!("{e}"));
    let beat = Beat {
        session,
        seq: 1,
        sent: Duration::from_secs(5),
        echo: None,
        held_for: Duration::ZERO,
        valid_for: Duration::ZERO,
        watchdog: WatchdogState::Armed {
            granted: Duration::from_secs(10),
            device: DeviceName::new("iTCO_wdt"),
        },
        version: wire::VERSION_2,
        boot: None,
        term_seen: 0,
        virtual_machine: false,
    };
    let leadership = Leadership::always();
    let ack = hb
        .answer(&beat.seal(&Key(key.0)), Some(1), &leadership)
        .unwrap_or_else(|e| panic!("{e:?}"));
    let opened = wire::Ack::open(&ack, &key).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(opened.version, wire::VERSION_2, "answered in its layout");
    assert!(opened.leader);
    assert!(hb.armed("worker-1").is_some(), "its watchdog is reported");
    let why = hb
        .watchdog_usable(
            "worker-1",
            &WatchdogContext {
                boot_id: Some("0c5a3b1e-6f1d-4b7e-9a2c-1d3e5f7a9b0c".into()),
                on_virtual_machine: None,
            },
        )
        .unwrap_err();
    assert!(
        why.contains("name no boot") && why.contains("upgrade the companions"),
        "{why}"
    );
}

/// The model's search with a reboot and an old leader: the machine reset during the
/// incident and booted again, and the new boot's companion (fed by a replica that
/// still believed it led) beats its watchdog armed. The Node reports that boot, the
/// beats name it, yet the wait was counted from an acknowledgement the boot before
/// took: nothing rests on the new boot's watchdog.
#[test]
fn a_watchdog_of_a_boot_begun_after_the_last_acknowledgement_proves_nothing() {
    let (hb, _silent) = new_heartbeat(
        Timing::default(),
        Duration::from_secs(2),
        SocketAddr::from(([127, 0, 0, 1], 0)),
    );
    hb.began_leading();
    let leadership = Leadership::always();
    let (boot_a, boot_b) = (
        "0c5a3b1e-6f1d-4b7e-9a2c-1d3e5f7a9b0c",
        "7d2e9f40-1b3c-4a5d-8e6f-0a1b2c3d4e5f",
    );
    let beat_of = |session, boot: &str| Beat {
        session,
        seq: 1,
        sent: Duration::from_secs(5),
        echo: None,
        held_for: Duration::ZERO,
        valid_for: Duration::ZERO,
        watchdog: WatchdogState::Armed {
            granted: Duration::from_secs(10),
            device: DeviceName::new("iTCO_wdt"),
        },
        version: wire::VERSION,
        boot: Some(wire::BootId::of(boot)),
        term_seen: 0,
        virtual_machine: false,
    };
    let context = |boot: &str| WatchdogContext {
        boot_id: Some(boot.into()),
        on_virtual_machine: None,
    };
    // Boot A's companion is acknowledged without the mark.
    let (session, key) = hb
        .open_session("worker-1")
        .unwrap_or_else(|e| panic!("{e}"));
    hb.answer(&beat_of(session, boot_a).seal(&key), Some(1), &leadership)
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert!(hb.watchdog_usable("worker-1", &context(boot_a)).is_ok());
    // Marked; the machine reboots; boot B's companion says hello and beats armed.
    hb.set_marked("worker-1", true);
    let (session, key) = hb
        .open_session("worker-1")
        .unwrap_or_else(|e| panic!("{e}"));
    hb.answer(&beat_of(session, boot_b).seal(&key), Some(1), &leadership)
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert!(hb.armed("worker-1").is_some(), "its watchdog is reported");
    let why = hb
        .watchdog_usable("worker-1", &context(boot_b))
        .unwrap_err();
    assert!(why.contains("rebooted during this incident"), "{why}");
    // Once the leader acknowledges boot B without the mark (the mark lifted), its
    // watchdog counts again.
    hb.set_marked("worker-1", false);
    let mut next = beat_of(session, boot_b);
    next.seq = 2;
    hb.answer(&next.seal(&key), Some(1), &leadership)
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert!(hb.watchdog_usable("worker-1", &context(boot_b)).is_ok());
}
