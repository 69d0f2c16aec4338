//! Who may read `/metrics`: each scrape's bearer token is authenticated by the API
//! server (a TokenReview) and the user it names authorized for `get` on the
//! non-resource URL `/metrics` (a SubjectAccessReview), as controller-runtime's
//! metrics filter and kube-rbac-proxy do. The ClusterRole `nodefence-metrics-reader`
//! (deploy/rbac.yaml) grants it; bind Prometheus' ServiceAccount to it.
//!
//! - No token, or a token the API server does not know: `401`; a user without the
//!   grant: `403`, naming the user and the ClusterRole to bind; the API server not
//!   answering: `503` (never a guess either way).
//! - Verdicts are cached by the token's SHA-256 (the token itself is not kept), as
//!   the API server caches its webhooks: allowed for 2 min, forbidden for 30 s,
//!   unauthenticated for 10 s; at most [`CACHE_ENTRIES`] tokens. Prometheus scraping
//!   every 15 s costs two reviews every 2 minutes.
//! - At most [`CONCURRENT_REVIEWS`] reviews are in flight, each bounded by
//!   [`REVIEW_TIMEOUT`]: a client trying random tokens cannot flood the API server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// The path and verb a scraper must be granted (`nonResourceURLs: ["/metrics"]`,
/// `verbs: ["get"]`).
pub const METRICS_PATH: &str = "/metrics";
const METRICS_VERB: &str = "get";

/// The ClusterRole that grants it, named in refusals.
pub const READER_CLUSTER_ROLE: &str = "nodefence-metrics-reader";

const ALLOWED_TTL: Duration = Duration::from_secs(120);
const FORBIDDEN_TTL: Duration = Duration::from_secs(30);
const UNAUTHENTICATED_TTL: Duration = Duration::from_secs(10);

/// How many tokens' verdicts are remembered.
pub const CACHE_ENTRIES: usize = 256;
/// How many reviews may be in flight at once.
pub const CONCURRENT_REVIEWS: usize = 4;
/// How long one review may take.
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);

/// Who a token belongs to, as the API server's TokenReview says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: Option<String>,
    pub groups: Vec<String>,
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

/// What a scrape gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allowed {
        user: String,
    },
    /// No bearer token at all.
    NoToken,
    /// The API server does not know the token (or it expired).
    Unauthenticated,
    /// The user may not `get /metrics`.
    Forbidden {
        user: String,
    },
    /// The API server did not answer; nothing is decided (not cached).
    Unavailable {
        error: String,
    },
}

impl Verdict {
    /// The `reason` label of `nodefence_metrics_scrapes_refused_total`, or `None`
    /// when the scrape is allowed.
    pub fn refusal_reason(&self) -> Option<&'static str> {
        match self {
            Verdict::Allowed { .. } => None,
            Verdict::NoToken | Verdict::Unauthenticated => Some("unauthenticated"),
            Verdict::Forbidden { .. } => Some("forbidden"),
            Verdict::Unavailable { .. } => Some("review_failed"),
        }
    }
}

/// The two questions asked of the API server; [`KubeReviewer`] asks the real one.
#[async_trait]
pub trait Reviewer: Send + Sync {
    /// The token's user, or `None` when it is not authenticated.
    async fn authenticate(&self, token: &str) -> Result<Option<User>, String>;
    /// Whether `user` may `verb` the non-resource URL `path`.
    async fn authorize(&self, user: &User, path: &str, verb: &str) -> Result<bool, String>;
}

/// Reviews through the API server nodefence talks to (RBAC: `create` on
/// `tokenreviews` and `subjectaccessreviews`, in the base).
pub struct KubeReviewer {
    client: kube::Client,
}

impl KubeReviewer {
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

#[async_trait]
impl Reviewer for KubeReviewer {
    async fn authenticate(&self, token: &str) -> Result<Option<User>, String> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: None,
            },
            ..Default::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| format!("TokenReview: {e}"))?;
        let Some(status) = answer.status else {
            return Err("TokenReview: the API server answered without a status".into());
        };
        if status.authenticated != Some(true) {
            return Ok(None);
        }
        let UserInfo {
            username,
            uid,
            groups,
            extra,
        } = status.user.unwrap_or_default();
        let Some(name) = username.filter(|n| !n.is_empty()) else {
            return Err("TokenReview: authenticated, but no user name".into());
        };
        Ok(Some(User {
            name,
            uid,
            groups: groups.unwrap_or_default(),
            extra: extra.unwrap_or_default(),
        }))
    }

    async fn authorize(&self, user: &User, path: &str, verb: &str) -> Result<bool, String> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: user.uid.clone(),
                groups: Some(user.groups.clone()),
                extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_owned()),
                    verb: Some(verb.to_owned()),
                }),
                resource_attributes: None,
            },
            ..Default::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| format!("SubjectAccessReview: {e}"))?;
        match answer.status {
            Some(status) => Ok(status.allowed && status.denied != Some(true)),
            None => Err("SubjectAccessReview: the API server answered without a status".into()),
        }
    }
}

struct Cached {
    verdict: Verdict,
    until: Instant,
}

/// Decides each scrape, with a cache and a bound on reviews in flight.
pub struct ScrapeAccess {
    reviewer: Arc<dyn Reviewer>,
    cache: Mutex<HashMap<[u8; 32], Cached>>,
    in_flight: Semaphore,
}

impl ScrapeAccess {
    pub fn new(reviewer: Arc<dyn Reviewer>) -> Self {
        Self {
            reviewer,
            cache: Mutex::new(HashMap::new()),
            in_flight: Semaphore::new(CONCURRENT_REVIEWS),
        }
    }

    /// The verdict on a request whose `Authorization` header is `authorization`.
    pub async fn check(&self, authorization: Option<&str>) -> Verdict {
        let Some(token) = bearer_token(authorization) else {
            return Verdict::NoToken;
        };
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(verdict) = self.cached(&key) {
            return verdict;
        }
        let Ok(_permit) = self.in_flight.acquire().await else {
            return Verdict::Unavailable {
                error: "shutting down".into(),
            };
        };
        // Another scrape with this token may have been decided while this one waited.
        if let Some(verdict) = self.cached(&key) {
            return verdict;
        }
        let verdict = match tokio::time::timeout(REVIEW_TIMEOUT, self.review(token)).await {
            Ok(verdict) => verdict,
            Err(_) => Verdict::Unavailable {
                error: format!("the API server did not answer within {REVIEW_TIMEOUT:?}"),
            },
        };
        let ttl = match verdict {
            Verdict::Allowed { .. } => Some(ALLOWED_TTL),
            Verdict::Forbidden { .. } => Some(FORBIDDEN_TTL),
            Verdict::Unauthenticated => Some(UNAUTHENTICATED_TTL),
            Verdict::NoToken | Verdict::Unavailable { .. } => None,
        };
        if let Some(ttl) = ttl {
            self.remember(key, verdict.clone(), ttl);
        }
        verdict
    }

    async fn review(&self, token: &str) -> Verdict {
        let user = match self.reviewer.authenticate(token).await {
            Ok(Some(user)) => user,
            Ok(None) => return Verdict::Unauthenticated,
            Err(error) => return Verdict::Unavailable { error },
        };
        match self
            .reviewer
            .authorize(&user, METRICS_PATH, METRICS_VERB)
            .await
        {
            Ok(true) => Verdict::Allowed { user: user.name },
            Ok(false) => Verdict::Forbidden { user: user.name },
            Err(error) => Verdict::Unavailable { error },
        }
    }

    fn cached(&self, key: &[u8; 32]) -> Option<Verdict> {
        let cache = lock(&self.cache);
        cache
            .get(key)
            .filter(|c| c.until > Instant::now())
            .map(|c| c.verdict.clone())
    }

    fn remember(&self, key: [u8; 32], verdict: Verdict, ttl: Duration) {
        let now = Instant::now();
        let mut cache = lock(&self.cache);
        if cache.len() >= CACHE_ENTRIES && !cache.contains_key(&key) {
            cache.retain(|_, c| c.until > now);
            if cache.len() >= CACHE_ENTRIES
                && let Some(soonest) = cache.iter().min_by_key(|(_, c)| c.until).map(|(k, _)| *k)
            {
                cache.remove(&soonest);
            }
        }
        cache.insert(
            key,
            Cached {
                verdict,
                until: now + ttl,
            },
        );
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The token of an `Authorization: Bearer TOKEN` header (scheme case-insensitive).
fn bearer_token(header: Option<&str>) -> Option<&str> {
    let (scheme, token) = header?.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Knows two tokens: "reader" (granted) and "other" (not); counts the reviews.
    #[derive(Default)]
    struct Fake {
        authentications: AtomicUsize,
        authorizations: AtomicUsize,
        failing: std::sync::atomic::AtomicBool,
    }

    #[async_trait]
    impl Reviewer for Fake {
        async fn authenticate(&self, token: &str) -> Result<Option<User>, String> {
            self.authentications.fetch_add(1, Ordering::SeqCst);
            if self.failing.load(Ordering::SeqCst) {
                return Err("connection refused".into());
            }
            Ok(matches!(token, "reader" | "other").then(|| User {
                name: format!("system:serviceaccount:monitoring:{token}"),
                uid: None,
                groups: vec!["system:authenticated".into()],
                extra: Default::default(),
            }))
        }
        async fn authorize(&self, user: &User, path: &str, verb: &str) -> Result<bool, String> {
            self.authorizations.fetch_add(1, Ordering::SeqCst);
            assert_eq!((path, verb), ("/metrics", "get"));
            Ok(user.name.ends_with(":reader"))
        }
    }

    fn access() -> (Arc<Fake>, ScrapeAccess) {
        let fake = Arc::new(Fake::default());
        (fake.clone(), ScrapeAccess::new(fake))
    }

    #[test]
    fn only_a_bearer_header_with_a_token_carries_one() {
        assert_eq!(bearer_token(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer_token(Some("Basic abc")), None);
        assert_eq!(bearer_token(Some("Bearer ")), None);
        assert_eq!(bearer_token(Some("Bearer")), None);
        assert_eq!(bearer_token(None), None);
    }

    #[tokio::test]
    async fn each_kind_of_caller_gets_its_verdict() {
        let (fake, access) = access();
        assert_eq!(access.check(None).await, Verdict::NoToken);
        assert_eq!(fake.authentications.load(Ordering::SeqCst), 0);
        assert_eq!(
            access.check(Some("Bearer nobody")).await,
            Verdict::Unauthenticated
        );
        assert_eq!(
            access.check(Some("Bearer other")).await,
            Verdict::Forbidden {
                user: "system:serviceaccount:monitoring:other".into()
            }
        );
        assert_eq!(
            access.check(Some("Bearer reader")).await,
            Verdict::Allowed {
                user: "system:serviceaccount:monitoring:reader".into()
            }
        );
        assert_eq!(fake.authorizations.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn verdicts_are_cached_for_their_time_and_failures_not_at_all() {
        let (fake, access) = access();
        let reviews = || fake.authentications.load(Ordering::SeqCst);
        for _ in 0..3 {
            assert!(matches!(
                access.check(Some("Bearer reader")).await,
                Verdict::Allowed { .. }
            ));
        }
        assert_eq!(reviews(), 1);
        tokio::time::advance(ALLOWED_TTL).await;
        access.check(Some("Bearer reader")).await;
        assert_eq!(reviews(), 2);

        access.check(Some("Bearer other")).await;
        access.check(Some("Bearer other")).await;
        assert_eq!(reviews(), 3);
        tokio::time::advance(FORBIDDEN_TTL).await;
        access.check(Some("Bearer other")).await;
        assert_eq!(reviews(), 4);

        fake.failing.store(true, Ordering::SeqCst);
        for _ in 0..2 {
            assert!(matches!(
                access.check(Some("Bearer new")).await,
                Verdict::Unavailable { .. }
            ));
        }
        assert_eq!(reviews(), 6, "a failed review is asked again, not cached");
    }

    #[tokio::test]
    async fn the_cache_stays_bounded_under_random_tokens() {
        let (_, access) = access();
        for i in 0..(CACHE_ENTRIES * 3) {
            access.check(Some(&format!("Bearer random-{i}"))).await;
        }
        assert!(lock(&access.cache).len() <= CACHE_ENTRIES);
        // A granted token is still served from the cache after the flood.
        access.check(Some("Bearer reader")).await;
        assert!(lock(&access.cache).len() <= CACHE_ENTRIES);
    }

    #[test]
    fn refusals_are_labelled_from_a_small_set() {
        assert_eq!(Verdict::Allowed { user: "u".into() }.refusal_reason(), None);
        assert_eq!(Verdict::NoToken.refusal_reason(), Some("unauthenticated"));
        assert_eq!(
            Verdict::Forbidden { user: "u".into() }.refusal_reason(),
            Some("forbidden")
        );
        assert_eq!(
            Verdict::Unavailable { error: "e".into() }.refusal_reason(),
            Some("review_failed")
        );
    }
}
