//! Helpers of `tests/aws_driver.rs`: building drivers with test keys, and a tiny EC2
//! stand-in (axum on loopback) that answers from a script and records what it was
//! sent, for what moto cannot do (throttle, refuse, answer garbage, forget).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use nodefence::config::{AwsTarget, Timeouts};
use nodefence::power::aws::AwsDriver;
use nodefence_mocks::tls::TlsMaterial;
use secrecy::SecretString;
use tokio::sync::Semaphore;
use url::Url;

pub const ACCESS_KEY: &str = "AKIDNODEFENCETEST";
/// Must never appear in an error, a log line or a header.
pub const SECRET_KEY: &str = "nodefence-test-SECRET-do-not-leak/0123456789";
pub const SESSION_TOKEN: &str = "nodefence-test-session-token";

pub fn timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(2),
        request: Duration::from_secs(5),
        operation: Duration::from_secs(20),
        retries: 3,
    }
}

pub fn target(endpoint: &Url, region: Option<&str>) -> AwsTarget {
    AwsTarget {
        instance_id: None,
        instance_tag: None,
        region: region.map(str::to_string),
        endpoint: Some(endpoint.clone()),
        tls: Default::default(),
        profile: None,
        credentials_file: None,
        timeouts: timeouts(),
    }
}

/// A driver that signs with the test keys (the process environment is not read).
pub fn driver(target: &AwsTarget) -> AwsDriver {
    nodefence::tls::install_crypto_provider();
    AwsDriver::with_keys(
        target,
        reqwest::Client::new(),
        Arc::new(Semaphore::new(8)),
        ACCESS_KEY,
        &SecretString::from(SECRET_KEY),
        Some(&SecretString::from(SESSION_TOKEN)),
    )
}

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

pub fn ok(body: &str) -> Answer {
    Answer {
        status: 200,
        body: body.to_string(),
    }
}

pub fn error(status: u16, code: &str, message: &str) -> Answer {
    Answer {
        status,
        body: format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code>\
             <Message>{message}</Message></Error></Errors><RequestID>req-1</RequestID></Response>"
        ),
    }
}

/// A `DescribeInstancesResponse` listing `(id, state)`.
pub fn described(instances: &[(&str, &str)]) -> Answer {
    let items: String = instances
        .iter()
        .map(|(id, state)| {
            format!(
                "<item><instanceId>{id}</instanceId><instanceState><code>0</code>\
                 <name>{state}</name></instanceState></item>"
            )
        })
        .collect();
    let set = if instances.is_empty() {
        "<reservationSet/>".to_string()
    } else {
        format!(
            "<reservationSet><item><instancesSet>{items}</instancesSet></item></reservationSet>"
        )
    };
    ok(&format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<DescribeInstancesResponse \
         xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>r</requestId>{set}\
         </DescribeInstancesResponse>"
    ))
}

pub fn stopping(id: &str) -> Answer {
    ok(&format!(
        "<StopInstancesResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><instancesSet>\
         <item><instanceId>{id}</instanceId><currentState><code>64</code><name>stopping</name>\
         </currentState></item></instancesSet></StopInstancesResponse>"
    ))
}

/// One request the stand-in received.
#[derive(Debug, Clone)]
pub struct Received {
    pub headers: HeaderMap,
    pub body: String,
}

#[derive(Default)]
struct Inner {
    script: Mutex<VecDeque<Answer>>,
    received: Mutex<Vec<Received>>,
}

/// The EC2 stand-in: answers from its script (the last answer repeats).
pub struct FakeEc2 {
    inner: Arc<Inner>,
    pub endpoint: Url,
    _server: nodefence_mocks::serve::Running,
}

impl FakeEc2 {
    pub async fn start(script: Vec<Answer>) -> FakeEc2 {
        Self::serve(script, None)
    }

    /// Over HTTPS at `https://localhost:PORT/`, its certificate signed by `tls`'s CA
    /// (an EC2-compatible cloud behind a private CA).
    pub async fn start_tls(script: Vec<Answer>, tls: &TlsMaterial) -> FakeEc2 {
        Self::serve(script, Some(tls.server_config().unwrap()))
    }

    fn serve(script: Vec<Answer>, tls: Option<rustls::ServerConfig>) -> FakeEc2 {
        let inner = Arc::new(Inner {
            script: Mutex::new(script.into()),
            received: Mutex::default(),
        });
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(inner.clone());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let scheme = if tls.is_some() {
            "https://localhost"
        } else {
            "http://127.0.0.1"
        };
        let (handle, task) = nodefence_mocks::serve::spawn(listener, app, tls).unwrap();
        FakeEc2 {
            inner,
            endpoint: Url::parse(&format!("{scheme}:{port}/")).unwrap(),
            _server: (handle, task),
        }
    }

    /// Replaces what is left of the script.
    pub fn script(&self, script: Vec<Answer>) {
        *self.inner.script.lock().unwrap() = script.into();
    }

    pub fn received(&self) -> Vec<Received> {
        self.inner.received.lock().unwrap().clone()
    }
}

async fn answer(
    State(inner): State<Arc<Inner>>,
    headers: HeaderMap,
    body: String,
) -> (StatusCode, [(header::HeaderName, &'static str); 1], String) {
    inner
        .received
        .lock()
        .unwrap()
        .push(Received { headers, body });
    let next = {
        let mut script = inner.script.lock().unwrap();
        if script.len() > 1 {
            script.pop_front()
        } else {
            script.front().cloned()
        }
    };
    let next = next.unwrap_or_else(|| error(500, "InternalError", "script is empty"));
    (
        StatusCode::from_u16(next.status).unwrap(),
        [(header::CONTENT_TYPE, "text/xml;charset=UTF-8")],
        next.body,
    )
}
