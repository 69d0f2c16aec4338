//! Unit tests of the AWS driver's pure parts: state mapping, providerID and region
//! parsing, reply parsing, error classification, signing, instance choice.

use std::time::{Duration, UNIX_EPOCH};

use aws_credential_types::Credentials;
use reqwest::StatusCode;

use super::api::{self, judge};
use super::locate::{ProviderId, default_endpoint, parse_provider_id, region_of_zone};
use super::resolve::{pick_region, pick_tagged};
use super::xml::{self, ApiError, InstanceInfo};
use super::*;
use crate::power::PowerErrorKind;

#[test]
fn only_stopped_and_terminated_are_off() {
    let cases = [
        ("running", PowerState::On),
        ("stopped", PowerState::Off),
        ("terminated", PowerState::Off),
        ("pending", PowerState::PoweringOn),
        ("stopping", PowerState::PoweringOff),
        ("shutting-down", PowerState::PoweringOff),
        ("", PowerState::Unknown(String::new())),
        ("Stopped", PowerState::Unknown("Stopped".into())),
        ("hibernated", PowerState::Unknown("hibernated".into())),
    ];
    for (raw, want) in cases {
        assert_eq!(map_state(raw), want, "{raw:?}");
    }
}

#[test]
fn provider_ids() {
    let p = parse_provider_id("aws:///eu-central-1a/i-0abc123def4567890").unwrap();
    assert_eq!(p.zone.as_deref(), Some("eu-central-1a"));
    assert_eq!(p.instance_id, "i-0abc123def4567890");
    let p = parse_provider_id("aws://us-east-1b/i-0abc").unwrap();
    assert_eq!(p.zone.as_deref(), Some("us-east-1b"));
    let p = parse_provider_id("aws:///i-0abc").unwrap();
    assert_eq!(p.zone, None);
    for bad in [
        "gce://project/zone/name",
        "aws:///us-east-1a/fargate-ip-10-0-0-1.ec2.internal",
        "aws:///us-east-1a/",
        "aws:///a/b/i-0abc",
        "i-0abc",
        "aws:///us-east-1a/i-xyz",
    ] {
        let err = parse_provider_id(bad).unwrap_err();
        assert!(err.contains(bad.trim()), "{bad}: {err}");
    }
}

#[test]
fn zones_to_regions() {
    let cases = [
        ("eu-central-1a", Some("eu-central-1")),
        ("us-east-1f", Some("us-east-1")),
        ("us-gov-west-1b", Some("us-gov-west-1")),
        ("cn-north-1a", Some("cn-north-1")),
        ("us-west-2-lax-1a", Some("us-west-2")),
        ("us-east-1-wl1-bos-wlz-1", Some("us-east-1")),
        ("ap-southeast-2c", Some("ap-southeast-2")),
        ("1a", None),
        ("nonsense", None),
        ("EU-CENTRAL-1A", None),
        ("", None),
    ];
    for (zone, want) in cases {
        assert_eq!(region_of_zone(zone).as_deref(), want, "{zone}");
    }
}

#[test]
fn endpoints_per_partition() {
    assert_eq!(
        default_endpoint("eu-central-1").unwrap().as_str(),
        "https://ec2.eu-central-1.amazonaws.com/"
    );
    assert_eq!(
        default_endpoint("cn-north-1").unwrap().as_str(),
        "https://ec2.cn-north-1.amazonaws.com.cn/"
    );
    assert!(default_endpoint("evil.com/x").is_err());
    assert!(default_endpoint("").is_err());
}

#[test]
fn region_order_configured_then_zone_then_chain() {
    let p = ProviderId {
        zone: Some("eu-central-1a".into()),
        instance_id: "i-1".into(),
    };
    let chain = || Some("us-east-1".to_string());
    assert_eq!(
        pick_region(Some("eu-west-1"), Some(&p), chain()).unwrap(),
        "eu-west-1"
    );
    assert_eq!(
        pick_region(None, Some(&p), chain()).unwrap(),
        "eu-central-1"
    );
    assert_eq!(pick_region(None, None, chain()).unwrap(), "us-east-1");
    let no_zone = ProviderId {
        zone: None,
        instance_id: "i-1".into(),
    };
    assert_eq!(
        pick_region(None, Some(&no_zone), chain()).unwrap(),
        "us-east-1"
    );
    let err = pick_region(None, None, None).unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Config);
    assert!(err.message.contains("AWS_REGION"), "{err}");
    let err = pick_region(Some("eu central"), None, None).unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Config);
}

const DESCRIBE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <requestId>8f7724cf-496f-496e-8fe3-example</requestId>
  <reservationSet>
    <item>
      <reservationId>r-1234567890abcdef0</reservationId>
      <instancesSet>
        <item>
          <instanceId>i-1234567890abcdef0</instanceId>
          <instanceState><code>16</code><name>running</name></instanceState>
          <placement><availabilityZone>eu-central-1a</availabilityZone></placement>
          <tagSet><item><key>Name</key><value>node-1</value></item></tagSet>
          <networkInterfaceSet><item><groupSet><item><groupId>sg-1</groupId></item></groupSet></item></networkInterfaceSet>
        </item>
        <item>
          <instanceId>i-0000000000000000b</instanceId>
          <instanceState><code>64</code><name>stopping</name></instanceState>
        </item>
      </instancesSet>
    </item>
    <item>
      <reservationId>r-2</reservationId>
      <instancesSet>
        <item><instanceId>i-0000000000000000c</instanceId></item>
      </instancesSet>
    </item>
  </reservationSet>
  <nextToken>abc</nextToken>
</DescribeInstancesResponse>"#;

#[test]
fn describe_instances_is_read() {
    let page = xml::describe_instances(DESCRIBE).unwrap();
    let got: Vec<(&str, &str)> = page
        .instances
        .iter()
        .map(|i| (i.id.as_str(), i.state.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("i-1234567890abcdef0", "running"),
            ("i-0000000000000000b", "stopping"),
            ("i-0000000000000000c", ""),
        ]
    );
    assert_eq!(page.next_token.as_deref(), Some("abc"));
    let empty = r#"<?xml version="1.0" encoding="utf-8"?>
<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15"><reservationSet/><requestId>x</requestId></DescribeInstancesResponse>"#;
    let page = xml::describe_instances(empty).unwrap();
    assert!(page.instances.is_empty());
    assert_eq!(page.next_token, None);
}

#[test]
fn untrustworthy_replies_are_errors_never_an_empty_list() {
    let truncated = &DESCRIBE[..DESCRIBE.len() / 2];
    for bad in [
        "",
        "   ",
        "not xml at all",
        "<html><body>Gateway Timeout</body></html>",
        "<DescribeInstancesResponse><requestId>x</requestId></DescribeInstancesResponse>",
        "<DescribeInstancesResponse><reservationSet><item>",
        truncated,
        "<StopInstancesResponse><instancesSet/></StopInstancesResponse>",
        "<DescribeInstancesResponse><reservationSet><item><instancesSet><item><instanceState><name>stopped</name></instanceState></item></instancesSet></item></reservationSet></DescribeInstancesResponse>",
    ] {
        assert!(xml::describe_instances(bad).is_err(), "accepted {bad:?}");
    }
}

#[test]
fn state_change_replies_must_name_the_instance() {
    let stop = r#"<StopInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><instancesSet><item><instanceId>i-1</instanceId><currentState><code>64</code><name>stopping</name></currentState></item></instancesSet></StopInstancesResponse>"#;
    assert!(xml::state_change(stop, "StopInstancesResponse", "i-1").is_ok());
    assert!(xml::state_change(stop, "StopInstancesResponse", "i-2").is_err());
    assert!(xml::state_change(stop, "StartInstancesResponse", "i-1").is_err());
    assert!(xml::state_change("<html/>", "StopInstancesResponse", "i-1").is_err());
}

#[test]
fn error_replies_are_read() {
    let ec2 = r#"<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>InvalidInstanceID.NotFound</Code><Message>The instance ID 'i-1' does not exist</Message></Error></Errors><RequestID>ea966190</RequestID></Response>"#;
    assert_eq!(
        xml::api_error(ec2),
        Some(ApiError {
            code: "InvalidInstanceID.NotFound".into(),
            message: "The instance ID 'i-1' does not exist".into()
        })
    );
    let sts = r#"<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type><Code>InvalidClientTokenId</Code><Message>bad</Message></Error></ErrorResponse>"#;
    assert_eq!(
        xml::api_error(sts).map(|e| e.code),
        Some("InvalidClientTokenId".into())
    );
    assert_eq!(xml::api_error("<html>503</html>"), None);
    assert_eq!(xml::api_error(""), None);
}

fn code(c: &str) -> Option<ApiError> {
    Some(ApiError {
        code: c.into(),
        message: "m".into(),
    })
}

#[test]
fn failures_are_classified() {
    let bad = StatusCode::BAD_REQUEST;
    let cases: [(StatusCode, Option<ApiError>, PowerErrorKind, bool); 14] = [
        (
            StatusCode::SERVICE_UNAVAILABLE,
            code("RequestLimitExceeded"),
            PowerErrorKind::Unreachable,
            true,
        ),
        (bad, code("Throttling"), PowerErrorKind::Unreachable, true),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            None,
            PowerErrorKind::Unreachable,
            true,
        ),
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            code("InternalError"),
            PowerErrorKind::Unreachable,
            true,
        ),
        (
            StatusCode::UNAUTHORIZED,
            code("AuthFailure"),
            PowerErrorKind::Auth,
            false,
        ),
        (
            StatusCode::FORBIDDEN,
            code("UnauthorizedOperation"),
            PowerErrorKind::Auth,
            false,
        ),
        (
            StatusCode::FORBIDDEN,
            code("InvalidClientTokenId"),
            PowerErrorKind::Auth,
            false,
        ),
        (
            StatusCode::FORBIDDEN,
            code("SignatureDoesNotMatch"),
            PowerErrorKind::Auth,
            false,
        ),
        (bad, code("ExpiredToken"), PowerErrorKind::Auth, true),
        (StatusCode::FORBIDDEN, None, PowerErrorKind::Auth, false),
        (
            bad,
            code("InvalidInstanceID.NotFound"),
            PowerErrorKind::Protocol,
            false,
        ),
        (
            bad,
            code("InvalidInstanceID.Malformed"),
            PowerErrorKind::Config,
            false,
        ),
        (
            bad,
            code("IncorrectInstanceState"),
            PowerErrorKind::Unsupported,
            false,
        ),
        (StatusCode::NOT_FOUND, None, PowerErrorKind::Protocol, false),
    ];
    for (status, api, kind, retry) in cases {
        let c = api.as_ref().map(|a| a.code.clone());
        let f = judge(status, api, "DescribeInstances at x");
        assert_eq!(f.error.kind, kind, "{status} {c:?}: {}", f.error);
        assert_eq!(
            format!("{f:?}").contains("retry: true"),
            retry,
            "{status} {c:?}"
        );
        assert_eq!(f.code, c);
        assert!(
            f.error.message.contains("DescribeInstances at x"),
            "{}",
            f.error
        );
    }
}

#[test]
fn signing_never_puts_the_secret_in_a_header() {
    let secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    let creds = Credentials::new(
        "AKIDEXAMPLE",
        secret,
        Some("SESSION-TOKEN".into()),
        None,
        "t",
    );
    let url = url::Url::parse("http://127.0.0.1:5000/").unwrap();
    let time = UNIX_EPOCH + Duration::from_secs(1_440_938_160);
    let headers = api::signed_headers(
        &url,
        "us-east-1",
        "Action=DescribeInstances",
        creds.into(),
        time,
    )
    .unwrap();
    let get = |n: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.clone())
    };
    let auth = get("authorization").unwrap();
    assert!(
        auth.starts_with(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/ec2/aws4_request"
        ),
        "{auth}"
    );
    assert!(
        auth.contains("SignedHeaders=content-type;host;x-amz-date"),
        "{auth}"
    );
    assert_eq!(get("x-amz-date").as_deref(), Some("20150830T123600Z"));
    assert_eq!(
        get("x-amz-security-token").as_deref(),
        Some("SESSION-TOKEN")
    );
    assert!(headers.iter().all(|(_, v)| !v.contains(secret)));
}

#[test]
fn a_tag_must_name_exactly_one_live_instance() {
    let i = |id: &str, state: &str| InstanceInfo {
        id: id.into(),
        state: state.into(),
    };
    let found = [i("i-1", "terminated"), i("i-2", "running")];
    assert_eq!(pick_tagged("Name", "n", "r", &found).unwrap().id, "i-2");
    let err = pick_tagged("Name", "n", "r", &[]).unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Config);
    assert!(err.message.contains("Name=n"), "{err}");
    let err = pick_tagged("Name", "n", "r", &found[..1]).unwrap_err();
    assert!(
        err.message
            .contains("only terminated ones: i-1 (terminated)"),
        "{err}"
    );
    let two = [
        i("i-1", "running"),
        i("i-2", "stopped"),
        i("i-3", "terminated"),
    ];
    let err = pick_tagged("Name", "n", "r", &two).unwrap_err();
    assert!(
        err.message.contains("2 instances") && err.message.contains("i-1 (running), i-2 (stopped)"),
        "{err}"
    );
}

#[test]
fn signing_logs_nothing_even_at_trace() {
    #[derive(Clone, Default)]
    struct Buf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    let creds = Credentials::new(
        "AKID",
        "the-secret",
        Some("the-session-token".into()),
        None,
        "t",
    );
    let url = url::Url::parse("https://ec2.eu-central-1.amazonaws.com/").unwrap();
    tracing::subscriber::with_default(subscriber, || {
        tracing::trace!("before");
        api::signed_headers(&url, "eu-central-1", "Action=X", creds.into(), UNIX_EPOCH).unwrap();
    });
    let logged = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    assert!(logged.contains("before"), "the capture works: {logged}");
    assert!(
        !logged.contains("the-session-token") && !logged.contains("the-secret"),
        "{logged}"
    );
}
