//! The vSphere driver against the mock vCenter/ESXi, through real HTTPS and SOAP on
//! loopback: status, off, on, cycle, identity (both UUID byte orders), every error
//! kind named, sessions that expire, tasks that fail or take too long, and VMs that
//! are renamed, moved, removed or lose power behind the driver's back. The rule under
//! test: only `poweredOff` of the right VM is Off; a fault is an error, never Off.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{fast_timeouts, policy};
use nodefence::config::{
    Credential, NodeTarget, PowerSource, SecretSource, Timeouts, TlsSettings, VsphereTarget,
};
use nodefence::identity::{self, Equivalence, IdentityCheck, MachineIdentity, NodeIdentity};
use nodefence::power::confirm::execute;
use nodefence::power::registry::DriverFactory;
use nodefence::power::vsphere::locate::VmSelector;
use nodefence::power::{PowerAction, PowerDriver, PowerErrorKind, PowerState};
use nodefence_mocks::vsphere::{Fault, MockVsphere, MockVsphereHandle, Product, VmPower, VmSpec};

const USER: &str = "fence@vsphere.local";
const PASSWORD: &str = "s3cr3t-Pa55";
/// worker-1's BIOS UUID as vSphere's config.uuid has it.
const UUID_1: &str = "4213e0f1-2a3b-4c5d-8e9f-a0b1c2d3e4f5";
/// The same UUID with its first three fields byte-swapped, as some guests report it.
const UUID_1_SWAPPED: &str = "f1e01342-3b2a-5d4c-8e9f-a0b1c2d3e4f5";
const UUID_2: &str = "42137a9c-55aa-4e21-9c1d-112233445566";

async fn vcenter(power: VmPower) -> MockVsphereHandle {
    MockVsphere::builder()
        .credentials(USER, PASSWORD)
        .task_delay(Duration::from_millis(150))
        .vm(VmSpec::new("worker-1")
            .moid("vm-42")
            .bios_uuid(UUID_1)
            .folder("k8s/workers")
            .power(power))
        .vm(VmSpec::new("worker-2")
            .moid("vm-43")
            .bios_uuid(UUID_2)
            .folder("k8s/workers"))
        .start()
        .await
        .expect("mock vSphere starts")
}

struct Setup {
    target: VsphereTarget,
    _dir: tempfile::TempDir,
}

fn setup(mock: &MockVsphereHandle, vm: VmSelector) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, mock.ca_pem()).unwrap();
    Setup {
        target: VsphereTarget {
            endpoint: mock.base_url().parse().unwrap(),
            vm,
            datacenter: None,
            credential: Credential {
                username: USER.into(),
                password: PASSWORD.to_string().into(),
                source: SecretSource::Inline,
            },
            tls: TlsSettings {
                ca_file: Some(ca),
                ..TlsSettings::default()
            },
            timeouts: fast_timeouts(),
        },
        _dir: dir,
    }
}

fn driver(target: &VsphereTarget) -> Arc<dyn PowerDriver> {
    nodefence::tls::install_crypto_provider();
    DriverFactory::new(8)
        .driver(&NodeTarget {
            fallback: Vec::new(),
            origin: Default::default(),
            metal3_host: None,
            name: "worker-1".into(),
            group: None,
            power: PowerSource::Vsphere(target.clone()),
            policy: Default::default(),
        })
        .unwrap()
}

fn node(system_uuid: &str) -> NodeIdentity {
    NodeIdentity {
        system_uuid: Some(system_uuid.into()),
        provider_id: Some(format!("vsphere://{system_uuid}")),
    }
}

#[tokio::test]
async fn status_off_on_and_cycle_through_tasks_read_back() {
    let m = vcenter(VmPower::PoweredOn).await;
    let s = setup(&m, VmSelector::Moid("vm-42".into()));
    let d = driver(&s.target);
    assert_eq!(d.driver_name(), "vsphere");
    assert_eq!(d.status().await.unwrap().state, PowerState::On);

    let off = execute(d.as_ref(), PowerAction::Off, &policy())
        .await
        .unwrap();
    assert_eq!(off.commands_sent, vec![PowerAction::Off]);
    assert_eq!(off.off.map(|c| c.readings.len()), Some(3));
    assert_eq!(m.power("vm-42"), Some(VmPower::PoweredOff));
    assert_eq!(m.power("vm-43"), Some(VmPower::PoweredOn), "only our VM");

    let on = execute(d.as_ref(), PowerAction::On, &policy())
        .await
        .unwrap();
    assert_eq!(on.commands_sent, vec![PowerAction::On]);
    assert_eq!(m.power("vm-42"), Some(VmPower::PoweredOn));

    let cycle = execute(d.as_ref(), PowerAction::Reboot, &policy())
        .await
        .unwrap();
    assert_eq!(cycle.commands_sent, vec![PowerAction::Off, PowerAction::On]);
    assert_eq!(
        m.power_calls(),
        vec![
            ("PowerOffVM_Task".to_string(), "vm-42".to_string()),
            ("PowerOnVM_Task".to_string(), "vm-42".to_string()),
            ("PowerOffVM_Task".to_string(), "vm-42".to_string()),
            ("PowerOnVM_Task".to_string(), "vm-42".to_string()),
        ]
    );
    // One session for all of it, and SOAPAction names the server's API version
    // once it is known.
    assert_eq!(m.methods().iter().filter(|c| *c == "Login").count(), 1);
    let calls = m.calls();
    assert_eq!(calls[0].method, "RetrieveServiceContent");
    assert_eq!(calls[0].soap_action, "urn:vim25/6.0");
    assert!(
        calls[1..]
            .iter()
            .all(|c| c.soap_action == "urn:vim25/8.0.2.0"),
        "{calls:?}"
    );
    d.close().await;
    assert_eq!(m.session_count(), 0, "close logs out");
    m.shutdown().await;
}

#[tokio::test]
async fn already_off_sends_nothing_and_suspended_is_never_off() {
    let m = vcenter(VmPower::PoweredOff).await;
    let s = setup(&m, VmSelector::Moid("vm-42".into()));
    let d = driver(&s.target);
    let out = execute(d.as_ref(), PowerAction::Off, &policy())
        .await
        .unwrap();
    assert!(out.commands_sent.is_empty());
    assert!(m.power_calls().is_empty());
    m.set_power("vm-42", VmPower::Suspended);
    let state = d.status().await.unwrap().state;
    assert_eq!(state, PowerState::Paused);
    assert!(!state.is_off());
    m.shutdown().await;
}

#[tokio::test]
async fn power_lost_out_of_band_reads_off() {
    let m = vcenter(VmPower::PoweredOn).await;
    let s = setup(&m, VmSelector::BiosUuid(UUID_1.into()));
    let d = driver(&s.target);
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    m.set_power("vm-42", VmPower::PoweredOff);
    assert_eq!(d.status().await.unwrap().state, PowerState::Off);
    m.shutdown().await;
}

#[tokio::test]
async fn the_nodes_system_uuid_finds_the_vm_in_either_byte_order() {
    for (system_uuid, want) in [
        (UUID_1, Equivalence::Exact),
        (UUID_1_SWAPPED, Equivalence::FieldsSwapped),
    ] {
        let m = vcenter(VmPower::PoweredOn).await;
        let s = setup(&m, VmSelector::NodeUuid);
        let d = driver(&s.target);
        let early = d.status().await.unwrap_err();
        assert_eq!(early.kind, PowerErrorKind::Config, "{early}");
        assert!(early.message.contains("systemUUID"), "{early}");

        d.node_identity(&node(system_uuid));
        let (identity, reading) = d.read_with_identity().await;
        assert_eq!(reading.unwrap().state, PowerState::On);
        let identity = identity.unwrap();
        assert_eq!(identity, MachineIdentity::Uuid(UUID_1.into()));
        assert_eq!(
            identity::check(&node(system_uuid), &identity),
            IdentityCheck::Match(want),
            "{system_uuid}"
        );
        execute(d.as_ref(), PowerAction::Off, &policy())
            .await
            .unwrap();
        assert_eq!(m.power("vm-42"), Some(VmPower::PoweredOff), "{system_uuid}");
        assert_eq!(m.power("vm-43"), Some(VmPower::PoweredOn));
        m.shutdown().await;
    }
}

#[tokio::test]
async fn a_vm_found_by_path_that_is_not_the_nodes_machine_is_a_mismatch() {
    let m = vcenter(VmPower::PoweredOn).await;
    // worker-1's entry points at worker-2's path: a mis-mapped inventory.
    let s = setup(&m, VmSelector::Path("/DC0/vm/k8s/workers/worker-2".into()));
    let d = driver(&s.target);
    let (identity, reading) = d.read_with_identity().await;
    assert_eq!(reading.unwrap().state, PowerState::On);
    let check = identity::check(&node(UUID_1), &identity.unwrap());
    assert!(check.is_mismatch(), "{check}");
    m.shutdown().await;
}

#[tokio::test]
async fn a_renamed_or_moved_vm_is_still_found_by_uuid_and_a_stale_path_is_an_error() {
    let m = vcenter(VmPower::PoweredOn).await;
    m.rename("vm-42", "worker-1-old");
    m.move_to("vm-42", "k8s/retired");
    let s = setup(&m, VmSelector::BiosUuid(UUID_1.into()));
    let d = driver(&s.target);
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    assert_eq!(
        d.machine_identity().await.unwrap(),
        MachineIdentity::Uuid(UUID_1.into())
    );

    let by_path = setup(&m, VmSelector::Path("DC0/vm/k8s/workers/worker-1".into()));
    let e = driver(&by_path.target).status().await.unwrap_err();
    assert_eq!(e.kind, PowerErrorKind::Config, "{e}");
    assert!(e.message.contains("no VM at inventory path"), "{e}");
    let moved = setup(
        &m,
        VmSelector::Path("DC0/vm/k8s/retired/worker-1-old".into()),
    );
    assert_eq!(
        driver(&moved.target).status().await.unwrap().state,
        PowerState::On
    );
    m.shutdown().await;
}

#[tokio::test]
async fn a_removed_vm_or_unknown_uuid_is_an_error_never_off() {
    let m = vcenter(VmPower::PoweredOn).await;
    let s = setup(&m, VmSelector::BiosUuid(UUID_1.into()));
    let d = driver(&s.target);
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    m.remove("vm-42");
    let e = d.status().await.unwrap_err();
    assert_eq!(e.kind, PowerErrorKind::Config, "{e}");
    assert!(e.message.contains("no VM"), "{e}");

    let unknown = setup(&m, VmSelector::Moid("vm-99".into()));
    let e = driver(&unknown.target).status().await.unwrap_err();
    assert_eq!(e.kind, PowerErrorKind::Config, "{e}");
    assert!(
        e.message
            .contains("never counts a VM it cannot find as off"),
        "{e}"
    );
    m.shutdown().await;
}

#[tokio::test]
async fn an_expired_session_is_logged_in_again() {
    let m = vcenter(VmPower::PoweredOn).await;
    let s = setup(&m, VmSelector::Moid("vm-42".into()));
    let d = driver(&s.target);
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    m.expire_sessions();
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    let calls = m.calls();
    let logins = calls.iter().filter(|c| c.method == "Login").count();
    assert_eq!(logins, 2, "{calls:?}");
    assert!(
        calls
            .iter()
            .any(|c| c.method == "RetrievePropertiesEx" && !c.authenticated),
        "the expired session was refused once: {calls:?}"
    );
    m.shutdown().await;
}

#[tokio::test]
async fn wrong_password_is_auth_and_never_echoes_it() {
    let m = vcenter(VmPower::PoweredOn).await;
    let mut s = setup(&m, VmSelector::Moid("vm-42".into()));
    s.target.credential.password = "wrong-Pa55word".to_string().into();
    let e = driver(&s.target).status().await.unwrap_err();
    assert_eq!(e.kind, PowerErrorKind::Auth, "{e}");
    assert!(e.message.contains("InvalidLogin"), "{e}");
    assert!(!e.message.contains("wrong-Pa55word"), "{e}");
    m.shutdown().await;
}

#[tokio::test]
async fn a_failing_task_is_named_and_the_vm_stays_on() {
    let m = vcenter(VmPower::PoweredOn).await;
    let s = setup(&m, VmSelector::Moid("vm-42".into()));
    let d = driver(&s.target);
    m.inject(Fault::FailNextTask("GenericVmConfigFault".into()));
    let e = d.power_off().await.unwrap_err();
    assert_eq!(e.kind, PowerErrorKind::Protocol, "{e}");
    assert!(e.message.contains("GenericVmConfigFault"), "{e}");
    assert!(e.message.contains("ended in error"), "{e}");
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    m.shutdown().await;
}

#[tokio::test]
async fn a_task_still_running_at_the_deadline_is_an_error() {
    let m = vcenter(VmPower::PoweredOn).await;
    let mut s = setup(&m, VmSelector::Moid("vm-42".into()));
    s.target.timeouts = Timeouts {
        operation: Duration::from_secs(2),
        ..fast_timeouts()
    };
    let d = driver(&s.target);
    m.inject(Fault::SlowTasks(Duration::from_secs(60)));
    let e = d.power_off().await.unwrap_err();
    assert_eq!(e.kind, PowerErrorKind::Unreachable, "{e}");
    assert!(e.message.contains("at the operation deadline"), "{e}");
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    m.shutdown().await;
}

#[tokio::test]
async fn a_user_without_the_power_privilege_is_named() {
    let m = vcenter(VmPower::PoweredOn).await;
    let s = setup(&m, VmSelector::Moid("vm-42".into()));
    m.inject(Fault::NoPowerPrivilege);
    let e = driver(&s.target).power_off().await.unwrap_err();
    assert_eq!(e.kind, PowerErrorKind::Privilege, "{e}");
    assert!(
        e.message.contains("VirtualMachine.Interact.PowerOff"),
        "{e}"
    );
    m.shutdown().await;
}

#[tokio::test]
async fn unreachable_and_unavailable_endpoints_are_unreachable() {
    let m = vcenter(VmPower::PoweredOn).await;
    let s = setup(&m, VmSelector::Moid("vm-42".into()));
    m.inject(Fault::Unavailable);
    let e = driver(&s.target).status().await.unwrap_err();
    assert_eq!(e.kind, PowerErrorKind::Unreachable, "{e}");
    assert!(e.message.contains("503"), "{e}");

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let mut gone = setup(&m, VmSelector::Moid("vm-42".into()));
    gone.target.endpoint = format!("https://localhost:{port}").parse().unwrap();
    gone.target.timeouts.retries = 1;
    let e = driver(&gone.target).status().await.unwrap_err();
    assert_eq!(e.kind, PowerErrorKind::Unreachable, "{e}");
    m.shutdown().await;
}

#[tokio::test]
async fn an_untrusted_certificate_is_tls() {
    let m = vcenter(VmPower::PoweredOn).await;
    let mut s = setup(&m, VmSelector::Moid("vm-42".into()));
    let other = tempfile::tempdir().unwrap();
    let foreign = other.path().join("other-ca.pem");
    std::fs::write(
        &foreign,
        nodefence_mocks::tls::TlsMaterial::generate()
            .unwrap()
            .ca_pem(),
    )
    .unwrap();
    s.target.tls.ca_file = Some(foreign);
    let e = driver(&s.target).status().await.unwrap_err();
    assert_eq!(e.kind, PowerErrorKind::Tls, "{e}");
    assert!(m.calls().is_empty(), "nothing was sent");
    m.shutdown().await;
}

#[tokio::test]
async fn a_standalone_esxi_host_is_driven_by_its_own_object_ids() {
    let m = MockVsphere::builder()
        .product(Product::Esxi)
        .credentials(USER, PASSWORD)
        .vm(VmSpec::new("worker-1").bios_uuid(UUID_1))
        .start()
        .await
        .unwrap();
    let s = setup(&m, VmSelector::Path("ha-datacenter/vm/worker-1".into()));
    let d = driver(&s.target);
    execute(d.as_ref(), PowerAction::Off, &policy())
        .await
        .unwrap();
    assert_eq!(m.power("1"), Some(VmPower::PoweredOff));
    let calls = m.calls();
    assert!(
        calls
            .iter()
            .any(|c| c.method == "Login" && c.this == "ha-sessionmgr"),
        "{calls:?}"
    );
    assert!(
        calls
            .iter()
            .any(|c| c.method == "RetrievePropertiesEx" && c.this == "ha-property-collector"),
        "{calls:?}"
    );
    m.shutdown().await;
}

#[tokio::test]
async fn a_clone_that_kept_the_bios_uuid_is_refused_not_guessed() {
    // A clone whose UUID was kept, in the other byte order.
    let m = vcenter_with_clone(UUID_1_SWAPPED, VmPower::PoweredOn).await;
    the_clone_is_refused(&m, "FindAllByUuid", "").await;
    m.shutdown().await;
}

/// worker-1 (vm-42, `UUID_1`) and worker-1-clone (vm-77), whose BIOS UUID was kept as
/// `clone_uuid`; both `power`.
async fn vcenter_with_clone(clone_uuid: &str, power: VmPower) -> MockVsphereHandle {
    MockVsphere::builder()
        .credentials(USER, PASSWORD)
        .vm(VmSpec::new("worker-1")
            .moid("vm-42")
            .bios_uuid(UUID_1)
            .power(power))
        .vm(VmSpec::new("worker-1-clone")
            .moid("vm-77")
            .bios_uuid(clone_uuid)
            .power(power))
        .start()
        .await
        .unwrap()
}

/// The driver, finding worker-1 by the Node's systemUUID (with `search`), refuses
/// both VMs: a config error naming both, and no power call.
async fn the_clone_is_refused(m: &MockVsphereHandle, search: &str, case: &str) {
    let s = setup(m, VmSelector::NodeUuid);
    let d = driver(&s.target);
    d.node_identity(&node(UUID_1));
    let e = d.status().await.unwrap_err();
    assert_eq!(e.kind, PowerErrorKind::Config, "{case}: {e}");
    assert!(
        e.message.contains("vm-42") && e.message.contains("vm-77"),
        "{case}: {e}"
    );
    assert!(d.power_off().await.is_err());
    assert!(m.power_calls().is_empty());
    assert!(m.methods().iter().any(|c| c == search));
}

/// The fault a server before vSphere 6.5 answers `FindAllByUuid` with, as the
/// driver sees it: `InvalidRequest`, "Unable to resolve WSDL method name".
#[tokio::test]
async fn before_6_5_find_by_uuid_finds_the_vm_in_either_byte_order() {
    for (system_uuid, want) in [
        (UUID_1, Equivalence::Exact),
        (UUID_1_SWAPPED, Equivalence::FieldsSwapped),
    ] {
        let m = vcenter(VmPower::PoweredOff).await;
        m.inject(Fault::NoFindAllByUuid);
        let s = setup(&m, VmSelector::NodeUuid);
        let d = driver(&s.target);
        d.node_identity(&node(system_uuid));
        let (identity, reading) = d.read_with_identity().await;
        assert_eq!(reading.unwrap().state, PowerState::Off, "{system_uuid}");
        let identity = identity.unwrap();
        assert_eq!(identity, MachineIdentity::Uuid(UUID_1.into()));
        assert_eq!(
            identity::check(&node(system_uuid), &identity),
            IdentityCheck::Match(want),
            "{system_uuid}"
        );
        assert!(d.endpoint().contains("vm-42"), "{}", d.endpoint());
        let methods = m.methods();
        assert!(methods.iter().any(|c| c == "FindAllByUuid"), "{methods:?}");
        assert!(methods.iter().any(|c| c == "FindByUuid"), "{methods:?}");
        // The clone check read every VM, and the view was let go.
        assert!(
            methods.iter().any(|c| c == "CreateContainerView"),
            "{methods:?}"
        );
        assert!(methods.iter().any(|c| c == "DestroyView"), "{methods:?}");
        m.shutdown().await;
    }
}

#[tokio::test]
async fn before_6_5_a_clone_that_kept_the_bios_uuid_is_still_refused() {
    // Exactly the same UUID (FindByUuid names only the first), then the other byte
    // order (FindByUuid of each order names a different VM).
    for clone_uuid in [UUID_1, UUID_1_SWAPPED] {
        let m = vcenter_with_clone(clone_uuid, VmPower::PoweredOff).await;
        m.inject(Fault::NoFindAllByUuid);
        the_clone_is_refused(&m, "FindByUuid", clone_uuid).await;
        m.shutdown().await;
    }
}

#[tokio::test]
async fn before_6_5_an_unknown_uuid_is_an_error_never_off() {
    let m = vcenter(VmPower::PoweredOff).await;
    m.inject(Fault::NoFindAllByUuid);
    let s = setup(&m, VmSelector::NodeUuid);
    let d = driver(&s.target);
    d.node_identity(&node("00000000-1111-2222-3333-444444444444"));
    let e = d.status().await.unwrap_err();
    assert_eq!(e.kind, PowerErrorKind::Config, "{e}");
    assert!(e.message.contains("no VM"), "{e}");
    m.shutdown().await;
}

/// worker-1's instance UUID (vCenter's own id), which worker-2 has as its BIOS UUID:
/// only a search with `instanceUuid` true finds worker-1 by it.
const INSTANCE_1: &str = "50123456-89ab-cdef-0123-456789abcdef";

#[tokio::test]
async fn instance_uuid_finds_the_vm_and_its_identity_is_still_its_bios_uuid() {
    let m = MockVsphere::builder()
        .credentials(USER, PASSWORD)
        .vm(VmSpec::new("worker-1")
            .moid("vm-42")
            .bios_uuid(UUID_1)
            .instance_uuid(INSTANCE_1))
        .vm(VmSpec::new("worker-2").moid("vm-43").bios_uuid(INSTANCE_1))
        .start()
        .await
        .unwrap();
    let s = setup(&m, VmSelector::InstanceUuid(INSTANCE_1.into()));
    let d = driver(&s.target);
    let (identity, reading) = d.read_with_identity().await;
    assert_eq!(reading.unwrap().state, PowerState::On);
    let identity = identity.unwrap();
    assert_eq!(
        identity,
        MachineIdentity::Uuid(UUID_1.into()),
        "config.uuid"
    );
    assert_eq!(
        identity::check(&node(UUID_1), &identity),
        IdentityCheck::Match(Equivalence::Exact)
    );
    assert!(
        matches!(
            identity::check(&node(INSTANCE_1), &identity),
            IdentityCheck::Mismatch { .. }
        ),
        "the instance UUID is not the machine's identity"
    );
    assert!(d.endpoint().contains("instance_uuid"), "{}", d.endpoint());
    execute(d.as_ref(), PowerAction::Off, &policy())
        .await
        .unwrap();
    assert_eq!(m.power("vm-42"), Some(VmPower::PoweredOff));
    assert_eq!(
        m.power("vm-43"),
        Some(VmPower::PoweredOn),
        "not the VM whose BIOS UUID it is"
    );

    // An instance UUID no VM has is an error, never Off.
    let s = setup(&m, VmSelector::InstanceUuid(UUID_2.into()));
    let e = driver(&s.target).status().await.unwrap_err();
    assert_eq!(e.kind, PowerErrorKind::Config, "{e}");
    assert!(e.message.contains("instance UUID"), "{e}");
    m.shutdown().await;
}

/// One BIOS UUID in two datacenters (a VM copied to another site kept it).
async fn two_sites() -> MockVsphereHandle {
    MockVsphere::builder()
        .credentials(USER, PASSWORD)
        .vm(VmSpec::new("worker-1")
            .moid("vm-42")
            .bios_uuid(UUID_1)
            .power(VmPower::PoweredOff))
        .vm(VmSpec::new("worker-1")
            .moid("vm-77")
            .bios_uuid(UUID_1)
            .datacenter("DC1"))
        .start()
        .await
        .unwrap()
}

#[tokio::test]
async fn datacenter_limits_the_uuid_search_to_one_site() {
    let m = two_sites().await;
    // Unscoped, the two VMs cannot be told apart.
    let s = setup(&m, VmSelector::NodeUuid);
    let d = driver(&s.target);
    d.node_identity(&node(UUID_1));
    let e = d.status().await.unwrap_err();
    assert_eq!(e.kind, PowerErrorKind::Config, "{e}");
    assert!(
        e.message.contains("vm-42") && e.message.contains("vm-77"),
        "{e}"
    );

    for (dc, vm, state) in [
        ("DC0", "vm-42", PowerState::Off),
        ("/DC1/", "vm-77", PowerState::On),
    ] {
        let mut s = setup(&m, VmSelector::NodeUuid);
        s.target.datacenter = Some(dc.into());
        let d = driver(&s.target);
        d.node_identity(&node(UUID_1));
        assert_eq!(d.status().await.unwrap().state, state, "{dc}");
        assert!(d.endpoint().contains(vm), "{dc}: {}", d.endpoint());
        // The Datacenter is found once, by its inventory path.
        d.status().await.unwrap();
    }
    let paths = m
        .methods()
        .iter()
        .filter(|c| *c == "FindByInventoryPath")
        .count();
    assert_eq!(paths, 2, "one datacenter lookup per driver");
    // Only DC1's VM is powered off.
    let mut s = setup(&m, VmSelector::BiosUuid(UUID_1.into()));
    s.target.datacenter = Some("DC1".into());
    execute(driver(&s.target).as_ref(), PowerAction::Off, &policy())
        .await
        .unwrap();
    assert_eq!(
        m.power_calls(),
        vec![("PowerOffVM_Task".to_string(), "vm-77".to_string())]
    );
    m.shutdown().await;
}

#[tokio::test]
async fn a_datacenter_that_is_not_there_is_an_error_never_off() {
    let m = two_sites().await;
    for dc in ["DC9", "DC0/vm/k8s"] {
        let mut s = setup(&m, VmSelector::NodeUuid);
        s.target.datacenter = Some(dc.into());
        let d = driver(&s.target);
        d.node_identity(&node(UUID_1));
        let e = d.status().await.unwrap_err();
        assert_eq!(e.kind, PowerErrorKind::Config, "{dc}: {e}");
        assert!(e.message.contains("datacenter"), "{dc}: {e}");
        assert!(d.power_off().await.is_err());
    }
    assert!(m.power_calls().is_empty());
    m.shutdown().await;
}

#[tokio::test]
async fn before_6_5_the_datacenter_still_limits_the_search() {
    let m = two_sites().await;
    m.inject(Fault::NoFindAllByUuid);
    for (dc, vm) in [("DC0", "vm-42"), ("DC1", "vm-77")] {
        let mut s = setup(&m, VmSelector::NodeUuid);
        s.target.datacenter = Some(dc.into());
        let d = driver(&s.target);
        d.node_identity(&node(UUID_1));
        d.status().await.unwrap();
        assert!(d.endpoint().contains(vm), "{dc}: {}", d.endpoint());
    }
    // Unscoped, the scan sees both.
    let s = setup(&m, VmSelector::NodeUuid);
    let d = driver(&s.target);
    d.node_identity(&node(UUID_1));
    let e = d.status().await.unwrap_err();
    assert!(
        e.message.contains("vm-42") && e.message.contains("vm-77"),
        "{e}"
    );
    m.shutdown().await;
}

#[tokio::test]
async fn every_vm_behind_one_vcenter_shares_one_login_logged_out_by_the_last() {
    let m = vcenter(VmPower::PoweredOn).await;
    let one = setup(&m, VmSelector::Moid("vm-42".into()));
    let mut two = setup(&m, VmSelector::Moid("vm-43".into()));
    // One group's settings: the same CA file.
    two.target.tls = one.target.tls.clone();
    nodefence::tls::install_crypto_provider();
    let factory = DriverFactory::new(8);
    let node = |name: &str, target: &VsphereTarget| NodeTarget {
        fallback: Vec::new(),
        origin: Default::default(),
        metal3_host: None,
        name: name.into(),
        group: None,
        power: PowerSource::Vsphere(target.clone()),
        policy: Default::default(),
    };
    let d1 = factory.driver(&node("worker-1", &one.target)).unwrap();
    let d2 = factory.driver(&node("worker-2", &two.target)).unwrap();
    // Another password for the same user is another session (a rotated Secret).
    let mut other = two.target.clone();
    other.credential.password = "not-the-password".to_string().into();
    let d3 = factory.driver(&node("worker-3", &other)).unwrap();
    assert_eq!(d1.status().await.unwrap().state, PowerState::On);
    assert_eq!(d2.status().await.unwrap().state, PowerState::On);
    assert_eq!(d3.status().await.unwrap_err().kind, PowerErrorKind::Auth);
    let count = |what: &str| m.methods().iter().filter(|c| *c == what).count();
    assert_eq!(
        count("Login"),
        2,
        "one shared, one refused: {:?}",
        m.methods()
    );
    d1.close().await;
    d1.close().await; // closing twice detaches once
    assert_eq!(count("Logout"), 0, "worker-2 still uses the session");
    assert_eq!(d2.status().await.unwrap().state, PowerState::On);
    d2.close().await;
    assert_eq!(count("Logout"), 1);
    assert_eq!(count("Login"), 2);
}

/// `nodefence fence` by hand when worker-1's entry names another node's VM (`moid`
/// vm-43, worker-2's): the VM's config.uuid is not Node worker-1's systemUUID, so no
/// power operation is called on it, whatever the action.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_refuses_an_entry_naming_another_nodes_vm() {
    let mock = vcenter(VmPower::PoweredOn).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.pem"), mock.ca_pem()).unwrap();
    crate::cli_common::write_secret(&dir.path().join("vc-password"), PASSWORD);
    let config = crate::cli_common::write_agent_config(dir.path(), 2, "100ms", "10s");
    std::fs::write(
        dir.path().join("inventory.toml"),
        format!(
            "[nodes.worker-1]\ndriver = \"vsphere\"\nendpoint = \"{}\"\nusername = \"{USER}\"\n\
             password_file = \"vc-password\"\nca_file = \"ca.pem\"\nmoid = \"vm-43\"\n",
            mock.base_url()
        ),
    )
    .unwrap();
    let (kube, kubeconfig) =
        crate::cli_common::cluster_with_nodes(dir.path(), &[("worker-1", UUID_1, None)]).await;
    crate::cli_common::assert_fence_refuses_a_mismatch(
        &config,
        "worker-1",
        &kubeconfig,
        UUID_2,
        UUID_1,
        &[],
    )
    .await;
    assert!(mock.power_calls().is_empty(), "{:?}", mock.power_calls());
    assert_eq!(mock.power("vm-43"), Some(VmPower::PoweredOn));
    kube.shutdown().await;
    mock.shutdown().await;
}
