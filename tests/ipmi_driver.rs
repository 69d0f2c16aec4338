//! The IPMI driver against the project's mock IPMI BMC over real UDP on loopback: the
//! cipher suites (17, 3, and 17-then-3 when unset), proof of off / on / reboot through
//! `confirm::execute`, the BMC key K_g, session privileges, session reuse and close,
//! secrets, the inventory loader, and the `nodefence` binary end to end. Drivers are
//! built as nodefence builds them, by `DriverFactory` from an `IpmiTarget`.
//!
//! The rule under test: an answer the driver cannot trust is an error, never Off, and
//! no Chassis Control is sent that was not asked for. Faults are in
//! `ipmi_driver_faults.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::cli_common;
use crate::ipmi_common;

use std::sync::Arc;
use std::time::Duration;

use cli_common::{nodefence_within, text};
use ipmi_common::*;
use nodefence::config::{IpmiPrivilege, PowerSource};
use nodefence::power::confirm::execute;
use nodefence::power::ipmi::IpmiDriver;
use nodefence::power::{PowerAction, PowerDriver, PowerError, PowerErrorKind, PowerState};
use nodefence_mocks::ipmi::{
    ChassisControl, CipherSuite, Fault, MockIpmiHandle, Power, Privilege, SessionEnd,
};
use tokio::sync::Semaphore;

async fn state(d: &dyn PowerDriver) -> PowerState {
    d.status().await.expect("status").state
}

/// Reads, powers off and on through `d`; one session serves it all.
async fn read_and_switch(bmc: &MockIpmiHandle, d: &dyn PowerDriver, suite: u8) {
    assert_eq!(state(d).await, PowerState::On);
    d.power_off().await.unwrap();
    assert_eq!(bmc.power(), Power::Off);
    assert_eq!(controls(bmc), [ChassisControl::PowerDown]);
    assert_eq!(state(d).await, PowerState::Off);
    d.power_on().await.unwrap();
    assert_eq!(bmc.power(), Power::On);
    assert_eq!(state(d).await, PowerState::On);
    assert_eq!(
        controls(bmc),
        [ChassisControl::PowerDown, ChassisControl::PowerUp]
    );
    assert_eq!(session_suites(bmc), [suite], "one session, suite {suite}");
    // Both controls ran in that session, raised to ADMINISTRATOR.
    for r in requests(bmc, NETFN_CHASSIS, CMD_CHASSIS_CONTROL) {
        assert_eq!(r.privilege, Some(Privilege::Administrator));
        assert_eq!(r.completion_code, Some(0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_cipher_suite_reads_and_switches_power() {
    // (configured, offered by the BMC, expected)
    let cases = [
        (
            Some(17),
            vec![CipherSuite::Suite3, CipherSuite::Suite17],
            17,
        ),
        (Some(3), vec![CipherSuite::Suite3, CipherSuite::Suite17], 3),
        (Some(3), vec![CipherSuite::Suite3], 3),
        // Unset: 17 is proposed first, although the BMC lists 3 first.
        (None, vec![CipherSuite::Suite3, CipherSuite::Suite17], 17),
    ];
    for (configured, offered, want) in cases {
        let bmc = start(bmc().suites(offered)).await;
        let mut t = target(&bmc);
        t.cipher_suite = configured;
        let d = driver(&t);
        assert_eq!(d.driver_name(), "ipmi");
        assert_eq!(d.endpoint(), format!("ipmi://127.0.0.1:{}", bmc.port()));
        read_and_switch(&bmc, d.as_ref(), want).await;
        assert_eq!(bmc.counters().handshakes_refused, 0, "{configured:?}");
        d.close().await;
        bmc.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_on_and_reboot_are_proven_by_readings_for_both_suites() {
    let delay = Duration::from_millis(150);
    for suite in [17, 3] {
        let bmc = start(bmc().transition_delay(delay)).await;
        let mut t = target(&bmc);
        t.cipher_suite = Some(suite);
        let d = driver(&t);

        let out = execute(d.as_ref(), PowerAction::Off, &policy())
            .await
            .unwrap();
        assert_eq!(out.initial.state, PowerState::On);
        assert_eq!(out.commands_sent, [PowerAction::Off]);
        assert_eq!(out.off.map(|c| c.readings.len()), Some(2));
        assert_eq!(bmc.power(), Power::Off);
        assert_eq!(controls(&bmc), [ChassisControl::PowerDown]);

        // Already off: proven without a command.
        let out = execute(d.as_ref(), PowerAction::Off, &policy())
            .await
            .unwrap();
        assert!(out.commands_sent.is_empty());
        assert_eq!(controls(&bmc).len(), 1);

        let out = execute(d.as_ref(), PowerAction::On, &policy())
            .await
            .unwrap();
        assert_eq!(out.commands_sent, [PowerAction::On]);
        assert_eq!(bmc.power(), Power::On);

        // Reboot = power down, confirm Off, power up, confirm On; never a power cycle.
        bmc.clear_logs();
        let out = execute(d.as_ref(), PowerAction::Reboot, &policy())
            .await
            .unwrap();
        assert_eq!(out.commands_sent, [PowerAction::Off, PowerAction::On]);
        assert!(out.off.is_some() && out.on.is_some());
        let log = bmc.control_log();
        let ops: Vec<_> = log.iter().map(|c| c.op).collect();
        assert_eq!(ops, [ChassisControl::PowerDown, ChassisControl::PowerUp]);
        // Power up waited until Off had landed and been read twice.
        assert!(log[1].at - log[0].at >= delay, "{log:?}");
        let readings_between = bmc
            .request_log()
            .iter()
            .filter(|r| (r.net_fn, r.cmd) == (NETFN_CHASSIS, CMD_CHASSIS_STATUS))
            .filter(|r| r.at > log[0].at && r.at < log[1].at)
            .count();
        assert!(readings_between >= 2, "{readings_between} readings");
        assert_eq!(bmc.power(), Power::On);
        assert_eq!(session_suites(&bmc), [suite]);
        d.close().await;
        bmc.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bmc_key_is_required_and_must_match() {
    for suite in [17, 3] {
        let bmc = start(bmc().kg(KG.as_bytes())).await;
        let mut t = target(&bmc);
        t.cipher_suite = Some(suite);

        // The BMC announces a K_g and none is configured: no session is attempted.
        let err = driver(&t).status().await.unwrap_err();
        assert_eq!(err.kind, PowerErrorKind::Auth, "{err}");
        assert!(err.message.contains("K_g"), "{err}");
        assert_eq!(bmc.counters().sessions_opened, 0);

        // A wrong key: RAKP 2 still verifies (it is keyed by the password), RAKP 4 not.
        let err = driver(&with_kg(t.clone(), "not-the-key"))
            .status()
            .await
            .unwrap_err();
        assert_eq!(err.kind, PowerErrorKind::Auth, "{err}");
        assert!(
            err.message.contains("K_g") && err.message.contains("RAKP 4"),
            "{err}"
        );
        assert!(requests(&bmc, NETFN_CHASSIS, CMD_CHASSIS_STATUS).is_empty());
        // The BMC verified RAKP 3, so it holds that session; the driver cannot close
        // it (its keys are wrong) and it lasts until the BMC's session timeout. No
        // console can avoid this: K_g is proven only in RAKP 4.
        assert_eq!(bmc.active_sessions(), 1);

        // The right key.
        bmc.expire_sessions();
        bmc.clear_logs();
        let d = driver(&with_kg(t, KG));
        read_and_switch(&bmc, d.as_ref(), suite).await;
        d.close().await;
        bmc.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn privileges_operator_suffices_and_user_is_refused() {
    let bmc = start(bmc().user("oper", "oper-pass-1", Privilege::Operator).user(
        "viewer",
        "viewer-pass-1",
        Privilege::User,
    ))
    .await;
    let oper = with_user(target(&bmc), "oper", "oper-pass-1");

    // An OPERATOR user asking for ADMINISTRATOR (the default) is refused in RAKP 2.
    let err = driver(&oper).status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Auth, "{err}");
    assert!(err.message.contains("ADMINISTRATOR"), "{err}");

    // With privilege = "operator" it powers off, at OPERATOR.
    let mut t = oper.clone();
    t.privilege = IpmiPrivilege::Operator;
    let d = driver(&t);
    d.power_off().await.unwrap();
    assert_eq!(bmc.power(), Power::Off);
    assert_eq!(controls(&bmc), [ChassisControl::PowerDown]);
    assert_eq!(bmc.control_log()[0].username, "oper");
    let control = requests(&bmc, NETFN_CHASSIS, CMD_CHASSIS_CONTROL);
    assert_eq!(control[0].privilege, Some(Privilege::Operator));
    assert_eq!(bmc.session_log()[0].max_privilege, Privilege::Operator);
    d.close().await;

    // A USER-only account cannot get an OPERATOR session: the driver asks for the
    // configured privilege in RAKP 1, so even status is refused (a fencing account
    // that cannot power off is a configuration error, not a reader).
    bmc.set_power(Power::On);
    bmc.clear_logs();
    let mut t = with_user(target(&bmc), "viewer", "viewer-pass-1");
    t.privilege = IpmiPrivilege::Operator;
    let d = driver(&t);
    let err = d.status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Auth, "{err}");
    assert!(err.message.contains("OPERATOR"), "{err}");
    let err = d.power_off().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Auth, "{err}");
    assert!(err.message.contains("OPERATOR"), "{err}");
    assert!(bmc.control_log().is_empty(), "nothing may be executed");
    assert!(requests(&bmc, NETFN_CHASSIS, CMD_CHASSIS_CONTROL).is_empty());
    assert_eq!(bmc.power(), Power::On);
    bmc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_set_session_privilege_is_an_auth_error_naming_the_privilege() {
    let bmc = start(bmc()).await;
    bmc.set_fault(Fault::CompletionCode {
        net_fn: NETFN_APP,
        cmd: CMD_SET_SESSION_PRIVILEGE,
        code: 0x81,
        count: None,
    });
    let d = driver(&target(&bmc));
    let err = d.status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Auth, "{err}");
    assert!(
        err.message.contains("ADMINISTRATOR") && err.message.contains("0x81"),
        "{err}"
    );
    let err = d.power_off().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Auth, "{err}");
    assert!(bmc.control_log().is_empty());
    assert!(requests(&bmc, NETFN_CHASSIS, CMD_CHASSIS_CONTROL).is_empty());
    // The half-made sessions were closed, not left to time out.
    wait_until("sessions closed", Duration::from_secs(2), || async {
        bmc.active_sessions() == 0
    })
    .await;
    assert_eq!(
        bmc.counters().sessions_closed,
        bmc.counters().sessions_opened
    );
    bmc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_session_serves_many_calls_and_close_ends_it() {
    let bmc = start(bmc()).await;
    let d = driver(&target(&bmc));
    for _ in 0..10 {
        assert_eq!(state(d.as_ref()).await, PowerState::On);
    }
    let c = bmc.counters();
    assert_eq!(c.sessions_opened, 1, "{c:?}");
    assert_eq!(c.active_sessions, 1);
    assert_eq!(requests(&bmc, NETFN_CHASSIS, CMD_CHASSIS_STATUS).len(), 10);
    assert_eq!(requests(&bmc, NETFN_APP, CMD_AUTH_CAPABILITIES).len(), 1);

    d.close().await;
    let c = bmc.counters();
    assert_eq!((c.sessions_closed, c.active_sessions), (1, 0), "{c:?}");
    assert!(matches!(
        bmc.session_log()[0].ended,
        Some((_, SessionEnd::Closed))
    ));

    // After close the driver sets up a new session when asked again.
    assert_eq!(state(d.as_ref()).await, PowerState::On);
    assert_eq!(bmc.counters().sessions_opened, 2);

    // The BMC forgets the session (reboot, admin): the next request goes unanswered,
    // and the driver sets up a new session and reads the real state, never Off.
    assert_eq!(bmc.expire_sessions(), 1);
    assert_eq!(state(d.as_ref()).await, PowerState::On);
    let c = bmc.counters();
    assert_eq!(c.sessions_opened, 3, "{c:?}");
    assert!(c.dropped.unknown_session >= 1, "{c:?}");
    // And a command in a dead session is re-sent in a new one, executed once.
    bmc.expire_sessions();
    d.power_off().await.unwrap();
    assert_eq!(controls(&bmc), [ChassisControl::PowerDown]);
    assert_eq!(bmc.counters().sessions_opened, 4);
    d.close().await;
    assert_eq!(bmc.active_sessions(), 0);
    bmc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inventory_loader_builds_a_working_driver() {
    let bmc = start(
        bmc()
            .user("oper", PASSWORD, Privilege::Operator)
            .kg(KG.as_bytes())
            .suites([CipherSuite::Suite3]),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    // K_g as 0x-hex in kg_file, suite 3, OPERATOR, another user for this node.
    let hex_kg: String = KG.bytes().map(|b| format!("{b:02x}")).collect();
    let config = write_config(
        dir.path(),
        bmc.port(),
        Some(&format!("0x{hex_kg}")),
        "cipher_suite = 3\nprivilege = \"operator\"\nusername = \"oper\"\n",
    );
    let loaded = nodefence::config::load(&config).unwrap();
    let node = &loaded.inventory.nodes["db-1"];
    let PowerSource::Ipmi(t) = &node.power else {
        panic!("not an IPMI target: {node:?}");
    };
    assert_eq!(
        (t.cipher_suite, t.privilege),
        (Some(3), IpmiPrivilege::Operator)
    );
    assert_eq!(t.timeouts.request, Duration::from_millis(500));
    assert_no_secret(&format!("{loaded:?}"), &[PASSWORD, KG]);
    let d = nodefence::power::registry::DriverFactory::new(4)
        .driver(node)
        .unwrap();
    d.power_off().await.unwrap();
    assert_eq!(controls(&bmc), [ChassisControl::PowerDown]);
    assert_eq!(session_suites(&bmc), [3]);
    d.close().await;

    // kg_env, as text, looked up through the loader's environment.
    std::fs::write(
        dir.path().join("inventory.toml"),
        std::fs::read_to_string(dir.path().join("inventory.toml"))
            .unwrap()
            .replace("kg_file = \"bmc-kg\"", "kg_env = \"TEST_IPMI_KG\""),
    )
    .unwrap();
    let env = |name: &str| (name == "TEST_IPMI_KG").then(|| KG.to_string());
    let loaded = nodefence::config::load_with_env(&config, &env).unwrap();
    let d = nodefence::power::registry::DriverFactory::new(4)
        .driver(&loaded.inventory.nodes["db-1"])
        .unwrap();
    d.power_on().await.unwrap();
    assert_eq!(bmc.power(), Power::On);
    d.close().await;
    bmc.shutdown().await;
}

/// Every error message and Debug output on the way: never a password or K_g.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_error_or_debug_output_contains_a_secret() {
    const WRONG_PASSWORD: &str = "Wr0ng-Pass-Secret";
    const WRONG_KG: &str = "Wr0ng-Kg-Secret";
    let secrets = [PASSWORD, KG, WRONG_PASSWORD, WRONG_KG];
    let bmc = start(bmc().kg(KG.as_bytes())).await;
    let good = with_kg(target(&bmc), KG);
    let mut errors: Vec<PowerError> = Vec::new();
    let mut fail = |e: Result<(), PowerError>| errors.push(e.unwrap_err());

    let wrong_password = with_user(good.clone(), USER, WRONG_PASSWORD);
    fail(driver(&wrong_password).power_off().await);
    fail(driver(&target(&bmc)).power_off().await); // K_g missing
    fail(driver(&with_kg(good.clone(), WRONG_KG)).power_off().await);
    fail(
        driver(&with_user(good.clone(), "nobody", PASSWORD))
            .power_off()
            .await,
    );
    let mut suite3 = good.clone();
    suite3.cipher_suite = Some(3);
    bmc.set_fault(Fault::RefuseSuite { suite: 3 });
    fail(driver(&suite3).power_off().await);
    bmc.clear_faults();
    bmc.set_fault(Fault::ImpostorRakp2);
    fail(driver(&good).power_off().await);
    bmc.clear_faults();
    bmc.set_fault(Fault::Loss { percent: 100 });
    fail(driver(&good).power_off().await);
    bmc.clear_faults();
    // Over IPMI's 20 bytes: refused when the driver is built.
    let long = with_user(good.clone(), USER, &format!("{PASSWORD}{WRONG_PASSWORD}"));
    let long_error = try_driver(&long).map(|_| ()).unwrap_err();
    assert_eq!(long_error.kind, PowerErrorKind::Config, "{long_error}");
    assert_no_secret(
        &long_error.to_string(),
        &[&format!("{PASSWORD}{WRONG_PASSWORD}")],
    );
    errors.push(long_error);

    let kinds: Vec<_> = errors.iter().map(|e| e.kind).collect();
    use PowerErrorKind::*;
    assert_eq!(
        kinds,
        [
            Auth,
            Auth,
            Auth,
            Auth,
            Unsupported,
            Auth,
            Unreachable,
            Config
        ]
    );
    for e in &errors {
        assert_no_secret(&format!("{e} {e:?}"), &secrets);
    }
    assert!(bmc.control_log().is_empty());

    let direct = IpmiDriver::new(&good, Arc::new(Semaphore::new(1))).unwrap();
    direct.status().await.unwrap();
    let shown = format!("{direct:?} {good:?} {:?}", node(&good));
    assert!(shown.contains(USER), "{shown}");
    assert_no_secret(&shown, &secrets);
    direct.close().await;
    bmc.shutdown().await;
}

/// How long one `nodefence` run may take before the test fails.
const CLI_LIMIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_status_and_fence_off_with_suite_17_and_a_bmc_key() {
    let bmc = start(bmc().kg(KG.as_bytes()).suites([CipherSuite::Suite17])).await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), bmc.port(), Some(KG), "");

    let out = nodefence_within(&config, &["status", "-o", "json"], CLI_LIMIT).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows[0]["node"], "db-1");
    assert_eq!(rows[0]["driver"], "ipmi");
    assert_eq!(
        rows[0]["endpoint"],
        format!("ipmi://127.0.0.1:{}", bmc.port())
    );
    assert_eq!(rows[0]["power"], "On");
    assert!(rows[0]["error"].is_null(), "{rows}");
    assert_eq!(rows[0]["machine"]["kind"], "uuid", "{rows}");
    assert_eq!(rows[0]["machine"]["value"], GUID_TEXT, "{rows}");
    assert!(bmc.control_log().is_empty(), "status sends no command");
    assert_eq!(bmc.active_sessions(), 0, "the CLI closes its session");

    let out = nodefence_within(
        &config,
        &[
            "fence",
            "--skip-identity-check",
            "db-1",
            "--action",
            "off",
            "--yes",
            "-o",
            "json",
        ],
        CLI_LIMIT,
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["confirmed"], true, "{report}");
    assert_eq!(report["initial_power"], "On", "{report}");
    assert_eq!(report["final_power"], "Off", "{report}");
    assert_eq!(
        report["commands_sent"],
        serde_json::json!(["off"]),
        "{report}"
    );
    assert_eq!(controls(&bmc), [ChassisControl::PowerDown]);
    assert_eq!(bmc.power(), Power::Off);
    assert_no_secret(&text(&out), &[PASSWORD, KG]);

    let out = nodefence_within(&config, &["status", "-o", "json"], CLI_LIMIT).await;
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows[0]["power"], "Off", "{}", text(&out));
    assert!(session_suites(&bmc).iter().all(|&s| s == 17));
    assert_eq!(bmc.active_sessions(), 0);

    // Without the key: an auth error naming K_g, exit 1, no power reported.
    let config = write_config(dir.path(), bmc.port(), None, "");
    let out = nodefence_within(&config, &["status", "-o", "json"], CLI_LIMIT).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(rows[0]["power"].is_null(), "{rows}");
    assert_eq!(rows[0]["error"]["kind"], "auth", "{rows}");
    assert!(
        rows[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("K_g"),
        "{rows}"
    );
    assert_no_secret(&text(&out), &[PASSWORD, KG]);
    assert_eq!(controls(&bmc), [ChassisControl::PowerDown]);
    bmc.shutdown().await;
}

/// `nodefence fence` by hand through IPMI: the BMC's system GUID is not Node db-1's
/// systemUUID (the entry's address is another machine's BMC), so no Chassis Control
/// is sent, whatever the action; a Node whose systemUUID is the GUID is proven.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_fence_refuses_a_bmc_of_another_machine() {
    const OTHER: &str = "4c4c4544-0042-3510-8052-b2c04f503142";
    let bmc = start(bmc()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), bmc.port(), None, "");
    let (kube, kubeconfig) =
        cli_common::cluster_with_nodes(dir.path(), &[("db-1", OTHER, None)]).await;
    cli_common::assert_fence_refuses_a_mismatch(
        &config,
        "db-1",
        &kubeconfig,
        GUID_TEXT,
        OTHER,
        &[],
    )
    .await;
    assert!(
        controls(&bmc).is_empty(),
        "no Chassis Control reached the BMC"
    );
    assert_eq!(bmc.power(), Power::On);
    kube.shutdown().await;

    // The same BMC, the Node of its own machine: proven, and powered off.
    let (kube, kubeconfig) =
        cli_common::cluster_with_nodes(dir.path(), &[("db-1", GUID_TEXT, None)]).await;
    let out = nodefence_within(
        &config,
        &[
            "fence",
            "db-1",
            "--action",
            "off",
            "--yes",
            "-o",
            "json",
            "--kubeconfig",
            &kubeconfig,
        ],
        CLI_LIMIT,
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["identity"]["result"], "match", "{report}");
    assert_eq!(controls(&bmc), [ChassisControl::PowerDown]);
    kube.shutdown().await;
}
