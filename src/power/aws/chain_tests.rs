//! The credential chain's HTTP path: aws-config's IMDSv2 provider through
//! [`ReqwestHttpClient`] against a loopback stand-in, and how chain failures are told.

use std::sync::{Arc, Mutex};

use aws_config::imds;
use aws_config::imds::credentials::ImdsCredentialsProvider;
use aws_config::provider_config::ProviderConfig;
use aws_credential_types::provider::error::CredentialsError;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use super::credentials::{credentials_error, provide_quietly};
use super::http_client::ReqwestHttpClient;
use crate::power::PowerErrorKind;

const TOKEN: &str = "imds-session-token";

/// A log sink for a test subscriber.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Capture {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Capture {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
const ROLE: &str = "nodefence-role";

/// A minimal IMDSv2: a session token, then the role's credentials for that token only.
async fn imds_stand_in(
    seen: axum::extract::State<Arc<Mutex<Vec<String>>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    seen.lock()
        .unwrap()
        .push(format!("{method} {}", uri.path()));
    let token_ok = headers
        .get("x-aws-ec2-metadata-token")
        .is_some_and(|t| t == TOKEN);
    match (method, uri.path()) {
        (Method::PUT, "/latest/api/token") => {
            ([("x-aws-ec2-metadata-token-ttl-seconds", "21600")], TOKEN).into_response()
        }
        (_, _) if !token_ok => StatusCode::UNAUTHORIZED.into_response(),
        (Method::GET, "/latest/meta-data/iam/security-credentials/") => ROLE.into_response(),
        (Method::GET, p) if p == format!("/latest/meta-data/iam/security-credentials/{ROLE}") => {
            serde_json::json!({
                "Code": "Success",
                "LastUpdated": "2026-01-01T00:00:00Z",
                "Type": "AWS-HMAC",
                "AccessKeyId": "ASIAIMDSTEST",
                "SecretAccessKey": "imds-secret",
                "Token": "imds-token",
                "Expiration": "2099-01-01T00:00:00Z"
            })
            .to_string()
            .into_response()
        }
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

#[tokio::test]
async fn the_chain_reaches_imds_through_reqwest() {
    crate::tls::install_crypto_provider();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let app = axum::Router::new()
        .fallback(imds_stand_in)
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let conf = ProviderConfig::without_region()
        .with_http_client(ReqwestHttpClient::new(reqwest::Client::new()));
    let client = imds::Client::builder()
        .endpoint(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .configure(&conf)
        .build();
    let provider = ImdsCredentialsProvider::builder()
        .imds_client(client)
        .configure(&conf)
        .build();
    // Everything at TRACE is captured while the chain runs: no key may be in it.
    let logs = Capture::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    let guard = tracing::subscriber::set_default(subscriber);
    tracing::trace!("capture works");
    let creds = provide_quietly(&provider).await.unwrap();
    drop(guard);
    let logged = logs.text();
    assert!(logged.contains("capture works"), "{logged}");
    for secret in ["imds-secret", "imds-token", TOKEN] {
        assert!(!logged.contains(secret), "{secret} logged: {logged}");
    }
    assert_eq!(creds.access_key_id(), "ASIAIMDSTEST");
    assert_eq!(creds.secret_access_key(), "imds-secret");
    assert_eq!(creds.session_token(), Some("imds-token"));
    assert!(creds.expiry().is_some());
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.first().map(String::as_str),
        Some("PUT /latest/api/token"),
        "{seen:?}"
    );
    assert!(seen.iter().any(|s| s.ends_with(ROLE)), "{seen:?}");
}

#[test]
fn chain_failures_are_told_by_kind() {
    let cases = [
        (
            CredentialsError::not_loaded("no env"),
            PowerErrorKind::Config,
        ),
        (
            CredentialsError::invalid_configuration("bad profile"),
            PowerErrorKind::Config,
        ),
        (
            CredentialsError::provider_error("AccessDenied"),
            PowerErrorKind::Auth,
        ),
        (
            CredentialsError::provider_timed_out(std::time::Duration::from_secs(5)),
            PowerErrorKind::Unreachable,
        ),
        (
            CredentialsError::unhandled("boom"),
            PowerErrorKind::Unreachable,
        ),
    ];
    for (e, kind) in cases {
        let got = credentials_error(&e, &Default::default());
        assert_eq!(got.kind, kind, "{got}");
    }
    let got = credentials_error(&CredentialsError::not_loaded("no env"), &Default::default());
    assert!(got.message.contains("AWS_ACCESS_KEY_ID"), "{got}");
}

#[tokio::test]
async fn a_named_profile_of_a_credentials_file_is_used_alone() {
    use super::credentials::{CredentialSource, ProfileChoice};
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("credentials");
    std::fs::write(
        &file,
        "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = default-secret\n\
         [fencing]\naws_access_key_id = AKIDFENCING\naws_secret_access_key = fencing-SECRET-x\n",
    )
    .unwrap();
    let source = |profile: &str| {
        CredentialSource::Chain(ProfileChoice {
            profile: Some(profile.into()),
            credentials_file: Some(file.clone()),
        })
    };
    let creds = source("fencing").get("eu-west-1").await.unwrap();
    assert_eq!(creds.access_key_id(), "AKIDFENCING");
    assert_eq!(creds.secret_access_key(), "fencing-SECRET-x");
    // The environment is not asked: a missing profile is an error naming it.
    let err = source("absent").get("eu-west-1").await.unwrap_err();
    assert_eq!(err.kind, PowerErrorKind::Config, "{err}");
    assert!(err.message.contains("profile \"absent\""), "{err}");
    assert!(!err.message.contains("SECRET"), "{err}");
}
