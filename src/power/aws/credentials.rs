//! AWS credentials and the default region, from the standard places.
//!
//! Credentials come from aws-config's default chain, in its order: environment
//! (`AWS_ACCESS_KEY_ID`, ...), the shared `credentials`/`config` files and their
//! profiles (`AWS_PROFILE`, `credential_process`, assumed roles), web identity
//! (`AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN`: IRSA), the container endpoint (EKS
//! Pod Identity, ECS) and the EC2 instance metadata service. Its HTTP calls go through
//! the project's reqwest ([`super::http_client`]). SSO profiles are not built in (they
//! need two more SDK crates): use `credential_process = aws configure export-credentials`.
//!
//! An inventory entry may name a `profile` and/or a `credentials_file` (a shared
//! credentials file, e.g. a mounted Secret): then only that profile is used (its keys,
//! `role_arn` + `source_profile`, `credential_process`, web identity...), never the
//! environment or the instance metadata, so machines in several accounts can be
//! fenced by one daemon.
//!
//! The chain is process-wide (one per signing region and profile choice, for STS) and its answer is cached
//! until five minutes before it expires (ten minutes for keys without expiry, so
//! rotated files are picked up). Failures are not cached. The chain runs with logging
//! off ([`provide_quietly`]): the SDK's runtime traces replies that carry keys.
//!
//! The default region, when the inventory and the Node's providerID give none, is
//! `AWS_REGION`/`AWS_DEFAULT_REGION`, then the profile's `region`; never the instance
//! metadata service (nodefence does not run on the machines it fences).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use aws_config::Region;
use aws_config::default_provider::credentials::DefaultCredentialsChain;
use aws_config::environment::region::EnvironmentVariableRegionProvider;
use aws_config::meta::region::RegionProviderChain;
use aws_config::profile::ProfileFileCredentialsProvider;
use aws_config::profile::ProfileFileRegionProvider;
use aws_config::provider_config::ProviderConfig;
use aws_credential_types::Credentials;
use aws_credential_types::provider::ProvideCredentials;
use aws_credential_types::provider::error::CredentialsError;
use aws_runtime::env_config::file::{EnvConfigFileKind, EnvConfigFiles};
use aws_smithy_types::error::display::DisplayErrorContext;
use secrecy::{ExposeSecret, SecretString};
use tokio::sync::OnceCell;
use tracing::instrument::WithSubscriber;
use tracing::subscriber::NoSubscriber;

use super::http_client::ReqwestHttpClient;
use crate::power::PowerError;

/// Refresh expiring credentials this long before they expire.
const EXPIRY_MARGIN: Duration = Duration::from_secs(300);
/// Re-read credentials without expiry this often.
const STATIC_TTL: Duration = Duration::from_secs(600);

/// Which profile a driver's credentials come from (the inventory's `profile` and
/// `credentials_file`); both unset means the whole default chain.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ProfileChoice {
    pub profile: Option<String>,
    /// A shared credentials file used instead of the default `~/.aws` files.
    pub credentials_file: Option<PathBuf>,
}

impl ProfileChoice {
    fn is_default(&self) -> bool {
        self.profile.is_none() && self.credentials_file.is_none()
    }
}

/// Where a driver's credentials come from.
#[derive(Clone)]
pub enum CredentialSource {
    /// The standard chain, or one profile of it (shared by every driver of the
    /// process with the same choice).
    Chain(ProfileChoice),
    /// Fixed keys (tests, tools): never refreshed.
    Fixed(Credentials),
}

impl std::fmt::Debug for CredentialSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CredentialSource::Chain(choice) => write!(f, "Chain({choice:?})"),
            CredentialSource::Fixed(c) => write!(f, "Fixed({})", c.access_key_id()),
        }
    }
}

impl CredentialSource {
    /// Fixed keys; the secret and the session token stay secret (Debug redacts them).
    pub fn fixed(
        access_key_id: &str,
        secret_access_key: &SecretString,
        session_token: Option<&SecretString>,
    ) -> Self {
        CredentialSource::Fixed(Credentials::new(
            access_key_id,
            secret_access_key.expose_secret(),
            session_token.map(|t| t.expose_secret().to_string()),
            None,
            "nodefence-fixed",
        ))
    }

    /// Credentials to sign a request to `region` with.
    pub async fn get(&self, region: &str) -> Result<Credentials, PowerError> {
        match self {
            CredentialSource::Fixed(c) => Ok(c.clone()),
            CredentialSource::Chain(choice) => chain(region, choice).get().await,
        }
    }

    /// Forgets cached credentials (EC2 said they expired).
    pub fn invalidate(&self, region: &str) {
        if let CredentialSource::Chain(choice) = self {
            chain(region, choice).forget();
        }
    }
}

/// The provider a chain asks.
enum Provider {
    Default(DefaultCredentialsChain),
    Profile(ProfileFileCredentialsProvider),
}

/// One chain and its cached answer.
struct CachedChain {
    region: String,
    choice: ProfileChoice,
    provider: OnceCell<Provider>,
    cached: Mutex<Option<(Credentials, SystemTime)>>,
}

type ChainKey = (String, ProfileChoice);

fn chain(region: &str, choice: &ProfileChoice) -> Arc<CachedChain> {
    static CHAINS: OnceLock<Mutex<HashMap<ChainKey, Arc<CachedChain>>>> = OnceLock::new();
    let chains = CHAINS.get_or_init(Mutex::default);
    let mut chains = chains.lock().unwrap_or_else(|e| e.into_inner());
    chains
        .entry((region.to_string(), choice.clone()))
        .or_insert_with(|| {
            Arc::new(CachedChain {
                region: region.to_string(),
                choice: choice.clone(),
                provider: OnceCell::new(),
                cached: Mutex::new(None),
            })
        })
        .clone()
}

/// The reqwest client of the credential providers.
fn provider_http_client() -> Result<reqwest::Client, PowerError> {
    static CLIENT: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .user_agent(concat!("nodefence/", env!("CARGO_PKG_VERSION")))
                .redirect(reqwest::redirect::Policy::none())
                .connect_timeout(Duration::from_secs(5))
                .build()
                .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|e| {
            PowerError::config(format!(
                "cannot build the HTTP client for AWS credentials: {e}"
            ))
        })
}

impl CachedChain {
    async fn get(&self) -> Result<Credentials, PowerError> {
        if let Some((creds, refresh_at)) = self
            .cached
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            && SystemTime::now() < refresh_at
        {
            return Ok(creds);
        }
        let provider = self
            .provider
            .get_or_try_init(|| async {
                let http = ReqwestHttpClient::new(provider_http_client()?);
                let region = Region::new(self.region.clone());
                let conf = ProviderConfig::without_region()
                    .with_http_client(http)
                    .with_region(Some(region.clone()));
                if self.choice.is_default() {
                    let chain = DefaultCredentialsChain::builder()
                        .region(region)
                        .configure(conf)
                        .build()
                        .with_subscriber(NoSubscriber::default())
                        .await;
                    return Ok::<_, PowerError>(Provider::Default(chain));
                }
                let mut profile = ProfileFileCredentialsProvider::builder().configure(&conf);
                if let Some(file) = &self.choice.credentials_file {
                    profile = profile.profile_files(
                        EnvConfigFiles::builder()
                            .with_file(EnvConfigFileKind::Credentials, file)
                            .build(),
                    );
                }
                if let Some(name) = &self.choice.profile {
                    profile = profile.profile_name(name);
                }
                Ok(Provider::Profile(profile.build()))
            })
            .await?;
        let answer = match provider {
            Provider::Default(chain) => provide_quietly(chain).await,
            Provider::Profile(profile) => provide_quietly(profile).await,
        };
        let creds = answer.map_err(|e| credentials_error(&e, &self.choice))?;
        let refresh_at = match creds.expiry() {
            Some(expiry) => expiry.checked_sub(EXPIRY_MARGIN).unwrap_or(expiry),
            None => SystemTime::now() + STATIC_TTL,
        };
        *self.cached.lock().unwrap_or_else(|e| e.into_inner()) = Some((creds.clone(), refresh_at));
        Ok(creds)
    }

    fn forget(&self) {
        *self.cached.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// Asks `provider` with logging off. The SDK's runtime traces whole requests and
/// replies (an STS or IMDS reply carries the secret key; an STS request the web
/// identity token), so no log filter may ever reach them. What went wrong is in the
/// error, with its causes.
pub async fn provide_quietly(
    provider: &impl ProvideCredentials,
) -> Result<Credentials, CredentialsError> {
    provider
        .provide_credentials()
        .with_subscriber(NoSubscriber::default())
        .await
}

/// A credential-chain failure, by kind. Provider errors name the provider and what
/// failed, never a key.
pub fn credentials_error(e: &CredentialsError, choice: &ProfileChoice) -> PowerError {
    let detail = DisplayErrorContext(e).to_string();
    let from = match (&choice.profile, &choice.credentials_file) {
        (None, None) => String::new(),
        (profile, file) => format!(
            " (profile \"{}\" of {})",
            profile.as_deref().unwrap_or("default"),
            file.as_ref().map_or_else(
                || "the default shared files".to_string(),
                |f| f.display().to_string()
            )
        ),
    };
    match e {
        CredentialsError::CredentialsNotLoaded(_) if choice.is_default() => {
            PowerError::config(format!(
                "no AWS credentials found ({detail}); give nodefence AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, \
             a profile in the shared credentials file (AWS_PROFILE, or `profile`/`credentials_file` \
             in the inventory), or a role through IRSA (AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE) \
             or EKS Pod Identity"
            ))
        }
        CredentialsError::CredentialsNotLoaded(_) => PowerError::config(format!(
            "no AWS credentials in the configured profile{from}: {detail}; check the inventory's \
             `profile` and `credentials_file`"
        )),
        CredentialsError::InvalidConfiguration(_) => PowerError::config(format!(
            "the AWS credential configuration{from} is invalid: {detail}"
        )),
        CredentialsError::ProviderError(_) => PowerError::auth(format!(
            "the AWS credential provider{from} refused: {detail}"
        )),
        _ => PowerError::unreachable(format!("cannot load AWS credentials{from}: {detail}")),
    }
}

/// The region from `AWS_REGION`/`AWS_DEFAULT_REGION` or the profile; read once.
pub async fn default_region() -> Option<String> {
    static REGION: OnceCell<Option<String>> = OnceCell::const_new();
    REGION
        .get_or_init(|| async {
            let chain = RegionProviderChain::first_try(EnvironmentVariableRegionProvider::new())
                .or_else(ProfileFileRegionProvider::new());
            chain.region().await.map(|r| r.to_string())
        })
        .await
        .clone()
}
