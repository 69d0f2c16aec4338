//! The AWS EC2 driver over real HTTP on loopback: against moto (EC2 emulated; set up
//! through boto3) for the state machine, instance resolution and regions, and against
//! a scripted stand-in (`aws_common::FakeEc2`) for what moto cannot do: throttle,
//! refuse credentials, answer garbage, forget an instance. The rule under test: any
//! doubt is an error, never Off; and the secret key is never shown.
//!
//! Without moto the moto tests print "skipped" and pass, unless
//! `NODEFENCE_REQUIRE_PEERS=1` (CI); see `peers/moto.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::aws_common;
use crate::moto;

use aws_common::{
    ACCESS_KEY, SECRET_KEY, SESSION_TOKEN, described, driver, error, ok, stopping, target,
};
use nodefence::identity::{self, IdentityCheck, MachineIdentity, NodeIdentity};
use nodefence::power::confirm::{ConfirmPolicy, execute};
use nodefence::power::{PowerAction, PowerDriver, PowerErrorKind, PowerState};

fn quick_policy() -> ConfirmPolicy {
    ConfirmPolicy {
        readings: 2,
        interval: std::time::Duration::from_millis(50),
        timeout: std::time::Duration::from_secs(20),
    }
}

fn node(provider_id: &str) -> NodeIdentity {
    NodeIdentity {
        system_uuid: None,
        provider_id: Some(provider_id.to_string()),
    }
}

// ---------------------------------------------------------------------------------
// moto

#[tokio::test]
async fn fencing_stops_the_instance_and_power_on_starts_it() {
    let Some(moto) = moto::start().await else {
        return;
    };
    let region = "eu-central-1";
    let id = moto.run(region, "Name", "fence-me", 1).await.remove(0);
    let mut t = target(&moto.endpoint, Some(region));
    t.instance_id = Some(id.clone());
    let d = driver(&t);
    assert_eq!(d.status().await.unwrap().state, PowerState::On);

    let outcome = execute(&d, PowerAction::Off, &quick_policy())
        .await
        .unwrap();
    assert_eq!(outcome.commands_sent, vec![PowerAction::Off]);
    assert_eq!(outcome.off.unwrap().state, PowerState::Off);
    assert_eq!(moto.state(region, &id).await, "stopped");

    // Already off: no second command.
    let again = execute(&d, PowerAction::Off, &quick_policy())
        .await
        .unwrap();
    assert!(again.commands_sent.is_empty());

    let on = execute(&d, PowerAction::On, &quick_policy()).await.unwrap();
    assert_eq!(on.commands_sent, vec![PowerAction::On]);
    assert_eq!(moto.state(region, &id).await, "running");
    assert_eq!(
        d.machine_identity().await.unwrap(),
        MachineIdentity::InstanceId(id)
    );
    assert!(
        d.reboot()
            .await
            .is_err_and(|e| e.kind == PowerErrorKind::Unsupported)
    );
}

#[tokio::test]
async fn a_terminated_instance_is_off_and_an_unknown_id_is_an_error() {
    let Some(moto) = moto::start().await else {
        return;
    };
    let region = "us-east-1";
    let id = moto.run(region, "Name", "doomed", 1).await.remove(0);
    moto.terminate(region, &[&id]).await;
    let mut t = target(&moto.endpoint, Some(region));
    t.instance_id = Some(id.clone());
    assert_eq!(driver(&t).status().await.unwrap().state, PowerState::Off);

    // An id this account/region never had: a config error, not a dead machine.
    t.instance_id = Some("i-0123456789abcdef0".into());
    let err = driver(&t).status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Config, "{err}");
    assert!(
        err.message.contains("i-0123456789abcdef0") && err.message.contains(region),
        "{err}"
    );

    // The right id in the wrong region: the same.
    let mut t = target(&moto.endpoint, Some("eu-west-1"));
    t.instance_id = Some(id);
    let err = driver(&t).status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Config, "{err}");
}

#[tokio::test]
async fn a_tag_names_exactly_one_instance_and_follows_its_replacement() {
    let Some(moto) = moto::start().await else {
        return;
    };
    let region = "eu-west-1";
    let first = moto
        .run(region, "nodefence/node", "worker-1", 1)
        .await
        .remove(0);
    let mut t = target(&moto.endpoint, Some(region));
    t.instance_tag = Some(("nodefence/node".into(), "worker-1".into()));
    let d = driver(&t);
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    assert_eq!(
        d.machine_identity().await.unwrap(),
        MachineIdentity::InstanceId(first.clone())
    );
    d.power_off().await.unwrap();
    assert_eq!(d.status().await.unwrap().state, PowerState::Off);
    assert_eq!(moto.state(region, &first).await, "stopped");

    // Replaced: the old instance terminated, a new one carries the tag.
    moto.terminate(region, &[&first]).await;
    let second = moto
        .run(region, "nodefence/node", "worker-1", 1)
        .await
        .remove(0);
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    assert_eq!(
        d.machine_identity().await.unwrap(),
        MachineIdentity::InstanceId(second.clone())
    );
    // Gone with no replacement: what ran the node cannot run again.
    moto.terminate(region, &[&second]).await;
    assert_eq!(d.status().await.unwrap().state, PowerState::Off);

    // No instance carries the tag: an error, not Off.
    t.instance_tag = Some(("nodefence/node".into(), "nobody".into()));
    let err = driver(&t).status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Config, "{err}");
    assert!(err.message.contains("nodefence/node=nobody"), "{err}");
    // Only terminated ones: the same, and they are listed.
    t.instance_tag = Some(("nodefence/node".into(), "worker-1".into()));
    let err = driver(&t).status().await.unwrap_err();
    assert!(
        err.message.contains(&first) && err.message.contains("terminated"),
        "{err}"
    );

    // Two carry it: ambiguous, both listed, and no command is sent.
    let two = moto.run(region, "nodefence/node", "worker-2", 2).await;
    t.instance_tag = Some(("nodefence/node".into(), "worker-2".into()));
    let d = driver(&t);
    let err = d.status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Config, "{err}");
    assert!(
        err.message.contains(&two[0]) && err.message.contains(&two[1]),
        "{err}"
    );
    assert!(d.power_off().await.is_err());
    for id in &two {
        assert_eq!(moto.state(region, id).await, "running");
    }
}

#[tokio::test]
async fn the_provider_id_names_the_instance_and_its_region() {
    let Some(moto) = moto::start().await else {
        return;
    };
    let region = "eu-west-3";
    let id = moto
        .run(region, "Name", "by-provider-id", 1)
        .await
        .remove(0);
    // No instance_id, no tag, no region: everything comes from the Node.
    let d = driver(&target(&moto.endpoint, None));
    let err = d.status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Config);
    assert!(err.message.contains("providerID"), "{err}");
    assert!(matches!(
        d.machine_identity().await.unwrap(),
        MachineIdentity::Unavailable(_)
    ));

    let provider_id = format!("aws:///{region}c/{id}");
    d.node_identity(&node(&provider_id));
    // Found in eu-west-3 only: the region came from the zone.
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    let machine = d.machine_identity().await.unwrap();
    assert_eq!(machine, MachineIdentity::InstanceId(id.clone()));
    assert!(matches!(
        identity::check(&node(&provider_id), &machine),
        IdentityCheck::Match { .. }
    ));
    assert!(d.endpoint().contains(&id), "{}", d.endpoint());

    // A non-AWS providerID is explained, never guessed around.
    d.node_identity(&node("gce://project/zone/vm"));
    let err = d.status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Config);
    assert!(err.message.contains("gce://"), "{err}");
}

// ---------------------------------------------------------------------------------
// The scripted stand-in

const ID: &str = "i-0aaaabbbbccccdddd";

async fn fake(
    script: Vec<aws_common::Answer>,
) -> (aws_common::FakeEc2, nodefence::power::aws::AwsDriver) {
    let ec2 = aws_common::FakeEc2::start(script).await;
    let mut t = target(&ec2.endpoint, Some("eu-central-1"));
    t.instance_id = Some(ID.into());
    let d = driver(&t);
    (ec2, d)
}

#[tokio::test]
async fn throttling_is_retried_with_backoff() {
    let throttled = error(503, "RequestLimitExceeded", "Request limit exceeded.");
    let (ec2, d) = fake(vec![
        throttled.clone(),
        throttled,
        described(&[(ID, "running")]),
    ])
    .await;
    let started = std::time::Instant::now();
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    assert_eq!(ec2.received().len(), 3);
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(150),
        "backed off"
    );

    // Throttled past `retries` (3): an error naming the throttling, never a state.
    let (ec2, d) = fake(vec![error(400, "Throttling", "Rate exceeded")]).await;
    let err = d.status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Unreachable, "{err}");
    assert!(err.message.contains("Throttling"), "{err}");
    assert_eq!(ec2.received().len(), 4, "first attempt + 3 retries");
}

#[tokio::test]
async fn refused_credentials_are_auth_errors_and_not_retried() {
    for (status, code) in [
        (401, "AuthFailure"),
        (403, "UnauthorizedOperation"),
        (403, "InvalidClientTokenId"),
        (403, "SignatureDoesNotMatch"),
    ] {
        let (ec2, d) = fake(vec![error(status, code, "refused")]).await;
        let err = d.status().await.unwrap_err();
        assert_eq!(err.kind, PowerErrorKind::Auth, "{code}: {err}");
        assert!(err.message.contains(code), "{err}");
        assert_eq!(ec2.received().len(), 1, "{code} retried");
    }
}

#[tokio::test]
async fn garbage_is_a_protocol_error_never_off() {
    let head = "<?xml version=\"1.0\"?><DescribeInstancesResponse><reservationSet><item>";
    for body in [
        "",
        head,
        "<html><body>502 Bad Gateway</body></html>",
        "<DescribeInstancesResponse><requestId>r</requestId></DescribeInstancesResponse>",
        "{\"Reservations\": []}",
    ] {
        let (_ec2, d) = fake(vec![ok(body)]).await;
        let err = d.status().await.unwrap_err();
        assert_eq!(err.kind, PowerErrorKind::Protocol, "{body:?}: {err}");
    }
    // A well-formed reply without the instance, for an id never seen: not Off.
    let (_ec2, d) = fake(vec![described(&[])]).await;
    let err = d.status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Config, "{err}");
    // Unknown states are Unknown; transitional ones never Off.
    for (state, want) in [
        ("stopping", PowerState::PoweringOff),
        ("shutting-down", PowerState::PoweringOff),
        ("pending", PowerState::PoweringOn),
        ("mystery", PowerState::Unknown("mystery".into())),
    ] {
        let (_ec2, d) = fake(vec![described(&[(ID, state)])]).await;
        assert_eq!(d.status().await.unwrap().state, want, "{state}");
    }
}

#[tokio::test]
async fn an_instance_seen_then_gone_is_off() {
    let not_found = error(400, "InvalidInstanceID.NotFound", "does not exist");
    let (ec2, d) = fake(vec![described(&[(ID, "shutting-down")])]).await;
    assert_eq!(d.status().await.unwrap().state, PowerState::PoweringOff);
    ec2.script(vec![not_found.clone()]);
    assert_eq!(d.status().await.unwrap().state, PowerState::Off);
    // Absent from a well-formed reply: the same.
    ec2.script(vec![described(&[])]);
    assert_eq!(d.status().await.unwrap().state, PowerState::Off);
    // A fresh driver never saw it: an error.
    let (_ec2, fresh) = fake(vec![not_found]).await;
    let err = fresh.status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Config, "{err}");
    assert!(err.message.contains("never counts an instance"), "{err}");
}

#[tokio::test]
async fn power_off_is_a_forced_stop_signed_without_the_secret() {
    let (ec2, d) = fake(vec![stopping(ID)]).await;
    d.power_off().await.unwrap();
    let sent = ec2.received();
    assert_eq!(sent.len(), 1);
    let body = &sent[0].body;
    for part in [
        "Action=StopInstances",
        &format!("InstanceId.1={ID}"),
        "Force=true",
    ] {
        assert!(
            body.split('&').any(|p| p == part),
            "{part} missing in {body}"
        );
    }
    let auth = sent[0].headers["authorization"].to_str().unwrap();
    assert!(
        auth.starts_with(&format!("AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/"))
            && auth.contains("/eu-central-1/ec2/aws4_request"),
        "{auth}"
    );
    assert_eq!(sent[0].headers["x-amz-security-token"], SESSION_TOKEN);
    for (name, value) in &sent[0].headers {
        assert!(
            !value.to_str().unwrap_or("").contains(SECRET_KEY),
            "secret in {name}"
        );
    }
    assert!(!body.contains(SECRET_KEY));

    // A reply that does not name the instance proves nothing.
    ec2.script(vec![stopping("i-0somethingelse")]);
    let err = d.power_off().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Protocol, "{err}");
}

#[tokio::test]
async fn the_secret_is_in_no_error_and_no_debug_output() {
    let mut shown = Vec::new();
    for answer in [
        error(
            401,
            "AuthFailure",
            "AWS was not able to validate the provided access credentials",
        ),
        error(
            403,
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match",
        ),
        ok("<html>"),
        error(400, "InvalidInstanceID.NotFound", "nope"),
    ] {
        let (_ec2, d) = fake(vec![answer]).await;
        let err = d.status().await.unwrap_err();
        shown.push(format!("{err} {err:?}"));
        shown.push(format!("{d:?}"));
        shown.push(d.endpoint());
    }
    // Nothing listening: the connect error too.
    let mut t = target(
        &url::Url::parse("http://127.0.0.1:9/").unwrap(),
        Some("eu-central-1"),
    );
    t.instance_id = Some(ID.into());
    t.timeouts.retries = 0;
    let err = driver(&t).status().await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Unreachable, "{err}");
    shown.push(format!("{err:?}"));
    for text in shown {
        assert!(!text.contains(SECRET_KEY), "secret shown: {text}");
        assert!(!text.contains(SESSION_TOKEN), "session token shown: {text}");
    }
}

// ---------------------------------------------------------------------------------
// the inventory's AWS settings, through the registry

/// Writes an inventory for node `cloud-1` against `endpoint`, with credentials from a
/// profile of a credentials file, and `extra` lines; loads it; builds the driver as
/// `nodefence run` does.
fn from_inventory(
    dir: &std::path::Path,
    endpoint: &url::Url,
    extra: &str,
) -> std::sync::Arc<dyn PowerDriver> {
    std::fs::write(
        dir.join("nodefence.toml"),
        "inventory = \"inventory.toml\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("credentials"),
        format!(
            "[default]\naws_access_key_id = AKIDWRONGPROFILE\naws_secret_access_key = x\n\
             [fencing]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("inventory.toml"),
        format!(
            "[nodes.cloud-1]\ndriver = \"aws\"\nendpoint = \"{endpoint}\"\nregion = \"eu-west-1\"\n\
             instance_id = \"i-0aaaaaaaaaaaaaaaa\"\ncredentials_file = \"credentials\"\n\
             profile = \"fencing\"\nconnect_timeout = \"2s\"\nrequest_timeout = \"5s\"\n\
             operation_timeout = \"10s\"\nretries = 0\n{extra}"
        ),
    )
    .unwrap();
    let config = nodefence::config::load(&dir.join("nodefence.toml")).unwrap();
    nodefence::power::registry::DriverFactory::new(4)
        .driver(&config.inventory.nodes["cloud-1"])
        .unwrap()
}

#[tokio::test]
async fn a_private_ca_endpoint_is_trusted_only_through_ca_file_and_the_profile_signs() {
    nodefence::tls::install_crypto_provider();
    let tls = nodefence_mocks::tls::TlsMaterial::generate_for(&["localhost"]).unwrap();
    let ec2 = aws_common::FakeEc2::start_tls(
        vec![described(&[("i-0aaaaaaaaaaaaaaaa", "running")])],
        &tls,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.pem"), tls.ca_pem()).unwrap();

    // Without the CA, the certificate is refused: an error, and nothing was sent.
    let err = from_inventory(dir.path(), &ec2.endpoint, "")
        .status()
        .await
        .unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Tls, "{err}");
    assert!(err.message.contains("unknown issuer"), "{err}");
    assert!(ec2.received().is_empty());

    // With it: answered, and signed with the named profile's keys (not [default]).
    let d = from_inventory(dir.path(), &ec2.endpoint, "ca_file = \"ca.pem\"\n");
    assert_eq!(d.status().await.unwrap().state, PowerState::On);
    let received = ec2.received();
    let auth = received[0].headers["authorization"].to_str().unwrap();
    assert!(
        auth.contains(&format!("Credential={ACCESS_KEY}/")),
        "{auth}"
    );
    assert!(!auth.contains(SECRET_KEY));
}
