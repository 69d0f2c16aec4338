//! The front door: logging, authentication, and mapping a URL to what it names.
//!
//! Every request is logged (for tests asserting that nothing was mutated), then
//! authenticated before its path is even looked at (the real server answers 401,
//! not 404, to an anonymous request for an unknown path; only `/version`,
//! `/healthz`, `/livez` and `/readyz` are public), then routed:
//!
//! | path | meaning |
//! | --- | --- |
//! | `/api`, `/apis`, `/apis/{g}`, `/api/v1`, `/apis/{g}/{v}` | discovery |
//! | `{base}/{plural}` | collection (cluster-scoped, or all namespaces) |
//! | `{base}/namespaces/{ns}/{plural}` | collection in a namespace |
//! | `{base}[/namespaces/{ns}]/{plural}/{name}[/status]` | object, status subresource |
//! | `{base}/watch/...` | the deprecated watch paths, same as `?watch=true` |
//! | `/openapi/v3[/{gv}]` | the OpenAPI index and documents (see [`super::openapi`]) |
//!
//! Custom resource paths are looked up in the CRD [`Registry`] of the moment: a
//! type exists from the response that established its CRD on, and is 404 from the
//! one that finished deleting it. A built-in type wins over a CRD at the same path.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};

use super::authz;
use super::crd::{CustomVersion, Registry};
use super::discovery;
use super::handlers;
use super::negotiate::{self, DISCOVERY_V2_CONTENT_TYPE, Representation};
use super::openapi;
use super::resources::{self, ResourceType};
use super::server::Shared;
use super::status;
use super::strategy::has_status_subresource;

/// What a resource URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub rt: ResourceType,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// `status`; other subresources are not served.
    pub subresource: Option<String>,
    /// Reached through a deprecated `/watch/` path.
    pub legacy_watch: bool,
    /// The CRD version serving `rt`, for a custom resource.
    pub custom: Option<Arc<CustomVersion>>,
}

/// A parsed path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    Version,
    Health,
    CoreVersions,
    Groups,
    Group(String),
    ResourceList {
        group: String,
        version: String,
    },
    /// `/openapi/...`: what follows `openapi/` (`v3`, `v3/apis/g/v`, `v2`).
    OpenApi(String),
    Resource(Box<Target>),
    /// `/apis/{group}` of an aggregated API.
    AggregatedGroup(String),
    /// `/apis/{group}/{version}/...` of an aggregated API: its index in
    /// `Shared::aggregated` and the path segments after the version.
    Aggregated {
        index: usize,
        rest: Vec<String>,
    },
    NotFound,
}

impl Route {
    fn is_public(&self) -> bool {
        matches!(self, Route::Version | Route::Health)
    }
}

/// Maps a URL path to a route.
pub(crate) fn parse(path: &str, reg: &Registry) -> Route {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        ["version"] => Route::Version,
        ["healthz" | "livez" | "readyz", ..] => Route::Health,
        ["openapi", rest @ ..] => Route::OpenApi(rest.join("/")),
        ["api"] => Route::CoreVersions,
        ["apis"] => Route::Groups,
        ["apis", group] if discovery::serves(reg, group, None) => Route::Group((*group).to_owned()),
        ["api", "v1", rest @ ..] => resource_route(reg, "", "v1", rest),
        ["apis", group, version, rest @ ..] if discovery::serves(reg, group, Some(version)) => {
            resource_route(reg, group, version, rest)
        }
        _ => Route::NotFound,
    }
}

/// A path of an aggregated API (see [`super::aggregated`]), else `NotFound`.
fn parse_aggregated(path: &str, apis: &[super::aggregated::Registration]) -> Route {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        ["apis", group] if apis.iter().any(|r| r.group == *group) => {
            Route::AggregatedGroup((*group).to_owned())
        }
        ["apis", group, version, rest @ ..] => {
            match apis
                .iter()
                .position(|r| r.group == *group && r.version == *version)
            {
                Some(index) => Route::Aggregated {
                    index,
                    rest: rest.iter().map(|s| (*s).to_owned()).collect(),
                },
                None => Route::NotFound,
            }
        }
        _ => Route::NotFound,
    }
}

fn resource_route(reg: &Registry, group: &str, version: &str, rest: &[&str]) -> Route {
    let (legacy_watch, rest) = match rest {
        ["watch", tail @ ..] => (true, tail),
        _ => (false, rest),
    };
    if rest.is_empty() {
        if legacy_watch {
            return Route::NotFound;
        }
        return Route::ResourceList {
            group: group.to_owned(),
            version: version.to_owned(),
        };
    }
    let find = |plural: &str| {
        resources::find(group, version, plural)
            .or_else(|| reg.find(group, version, plural).map(|cv| cv.rt))
    };
    let target = |rt: ResourceType, ns: Option<&str>, name: Option<&str>, sub: Option<&str>| {
        Route::Resource(Box::new(Target {
            rt,
            namespace: ns.map(str::to_owned),
            name: name.map(str::to_owned),
            subresource: sub.map(str::to_owned),
            legacy_watch,
            custom: rt.custom.and_then(|_| reg.of(rt).cloned()),
        }))
    };
    match rest {
        // `namespaces/{name}[/status]` is the Namespace object itself.
        ["namespaces", ns, plural, tail @ ..] if *plural != "status" && *plural != "finalize" => {
            let Some(rt) = find(plural).filter(|rt| rt.namespaced) else {
                return Route::NotFound;
            };
            match tail {
                [] => target(rt, Some(ns), None, None),
                [name] => target(rt, Some(ns), Some(name), None),
                [name, sub] => target(rt, Some(ns), Some(name), Some(sub)),
                _ => Route::NotFound,
            }
        }
        [plural, tail @ ..] => {
            let Some(rt) = find(plural) else {
                return Route::NotFound;
            };
            match tail {
                [] => target(rt, None, None, None),
                [name] if !rt.namespaced => target(rt, None, Some(name), None),
                [name, sub] if !rt.namespaced => target(rt, None, Some(name), Some(sub)),
                _ => Route::NotFound,
            }
        }
        [] => Route::NotFound,
    }
}

/// Answers every request.
pub(crate) async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let method = request.method().clone();
    let path_and_query = request.uri().path_and_query().map_or_else(
        || request.uri().path().to_owned(),
        |p| p.as_str().to_owned(),
    );
    let registry = shared.registry();
    let route = match parse(request.uri().path(), &registry) {
        Route::NotFound => parse_aggregated(request.uri().path(), &shared.aggregated),
        route => route,
    };
    tracing::trace!(%method, path = %path_and_query, accept = ?request.headers().get(ACCEPT), content_type = ?request.headers().get(CONTENT_TYPE), "fake-kube request received");
    let caller = caller(&shared, &request);
    let user = match &caller {
        Caller::Restricted(i) => Some(i.user.clone()),
        _ => None,
    };
    let response = match &caller {
        Caller::Anonymous if !route.is_public() => status::unauthorized(),
        Caller::Restricted(identity)
            if matches!(route, Route::Aggregated { .. })
                && authz::attributes(method.as_str(), &path_and_query)
                    .is_some_and(|attrs| !identity.policy.allows(&attrs)) =>
        {
            let attrs = authz::attributes(method.as_str(), &path_and_query);
            match attrs {
                Some(attrs) => status::json_with_type(
                    StatusCode::FORBIDDEN,
                    &authz::forbidden_status(&attrs, &identity.user),
                    "application/json",
                ),
                None => status::path_not_found(),
            }
        }
        _ if matches!(route, Route::Aggregated { .. }) => {
            aggregated(&shared, route, user.clone(), request).await
        }
        Caller::Restricted(identity) if is_access_review(&method, request.uri().path()) => {
            access_review(Some(&identity.policy), request).await
        }
        Caller::Admin if is_access_review(&method, request.uri().path()) => {
            access_review(None, request).await
        }
        Caller::Restricted(identity) => match authz::attributes(method.as_str(), &path_and_query) {
            Some(attrs) if !identity.policy.allows(&attrs) => status::json_with_type(
                StatusCode::FORBIDDEN,
                &authz::forbidden_status(&attrs, &identity.user),
                "application/json",
            ),
            _ => answer_or_review(&shared, &registry, route, request).await,
        },
        _ => answer_or_review(&shared, &registry, route, request).await,
    };
    tracing::debug!(%method, path = %path_and_query, status = response.status().as_u16(), "fake-kube request");
    shared.log_request(
        method.as_str(),
        &path_and_query,
        response.status().as_u16(),
        user.as_deref(),
    );
    response
}

/// Who sent a request.
enum Caller {
    Anonymous,
    /// The main token: everything is allowed.
    Admin,
    /// A restricted identity: RBAC applies.
    Restricted(crate::kube::server::Identity),
}

fn caller(shared: &Shared, request: &Request) -> Caller {
    let Some(value) = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return Caller::Anonymous;
    };
    let mut parts = value.splitn(2, ' ');
    let scheme = parts.next().unwrap_or_default();
    let token = parts.next().unwrap_or_default().trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Caller::Anonymous;
    }
    if token == shared.token {
        return Caller::Admin;
    }
    shared
        .identity(token)
        .map_or(Caller::Anonymous, |i| Caller::Restricted(i.clone()))
}

const ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";

fn is_access_review(method: &Method, path: &str) -> bool {
    *method == Method::POST && path.trim_end_matches('/') == ACCESS_REVIEWS
}

/// `POST .../selfsubjectaccessreviews`: what the caller may do, from its policy.
async fn access_review(policy: Option<&authz::Policy>, request: Request) -> Response {
    let Ok(bytes) = axum::body::to_bytes(request.into_body(), 1 << 20).await else {
        return status::failure(StatusCode::BAD_REQUEST, "BadRequest", "unreadable body");
    };
    let Ok(body) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return status::failure(StatusCode::BAD_REQUEST, "BadRequest", "malformed JSON");
    };
    status::json_with_type(
        StatusCode::CREATED,
        &authz::review(policy, &body),
        "application/json",
    )
}

const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
const SUBJECT_ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// The reviews a server that delegates authentication and authorization to the API
/// server sends (TokenReview, SubjectAccessReview), once the caller has been
/// authorized to create them; everything else as [`answer`] does.
async fn answer_or_review(
    shared: &Arc<Shared>,
    reg: &Registry,
    route: Route,
    request: Request,
) -> Response {
    if request.method() == Method::POST {
        match request.uri().path().trim_end_matches('/') {
            TOKEN_REVIEWS => return delegated_review(shared, request, token_review).await,
            SUBJECT_ACCESS_REVIEWS => {
                return delegated_review(shared, request, subject_access_review).await;
            }
            _ => {}
        }
    }
    answer(shared, reg, route, request).await
}

async fn delegated_review(
    shared: &Shared,
    request: Request,
    review: fn(&Shared, &serde_json::Value) -> serde_json::Value,
) -> Response {
    let Ok(bytes) = axum::body::to_bytes(request.into_body(), 1 << 20).await else {
        return status::failure(StatusCode::BAD_REQUEST, "BadRequest", "unreadable body");
    };
    let Ok(body) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return status::failure(StatusCode::BAD_REQUEST, "BadRequest", "malformed JSON");
    };
    status::json_with_type(
        StatusCode::CREATED,
        &review(shared, &body),
        "application/json",
    )
}

/// The groups the API server gives a user: a ServiceAccount's
/// `system:serviceaccounts[:NS]`, and `system:authenticated` for everyone.
fn groups_of(user: &str) -> Vec<String> {
    let mut groups = Vec::new();
    if let Some(rest) = user.strip_prefix("system:serviceaccount:")
        && let Some((namespace, _)) = rest.split_once(':')
    {
        groups.push("system:serviceaccounts".to_owned());
        groups.push(format!("system:serviceaccounts:{namespace}"));
    }
    groups.push("system:authenticated".to_owned());
    groups
}

/// The main token's user: kubeadm's admin, in `system:masters`.
const ADMIN_USER: &str = "kubernetes-admin";

/// `TokenReview` of a bound token (`pkg/serviceaccount`, `authenticator.Audiences`):
/// authenticated only for the audiences asked (`spec.audiences`, else the API
/// server's own) that the token carries, `status.audiences` their intersection; the
/// pod and its node in `status.user.extra`.
fn bound_token_review(
    token: &super::server::BoundToken,
    body: &serde_json::Value,
) -> serde_json::Value {
    let asked: Vec<String> = body["spec"]["audiences"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .filter(|a: &Vec<String>| !a.is_empty())
        .unwrap_or_else(|| vec![super::server::API_AUDIENCE.to_owned()]);
    let common: Vec<&String> = asked
        .iter()
        .filter(|a| token.audiences.contains(a))
        .collect();
    if common.is_empty() {
        return serde_json::json!({
            "user": {},
            "error": format!(
                "[invalid bearer token, token audiences {:?} is invalid for the target audiences {:?}]",
                token.audiences, asked
            ),
        });
    }
    let mut extra = serde_json::Map::new();
    let mut put = |k: &str, v: &str| {
        extra.insert(
            format!("authentication.kubernetes.io/{k}"),
            serde_json::json!([v]),
        );
    };
    if let Some((name, uid)) = &token.pod {
        put("pod-name", name);
        put("pod-uid", uid);
    }
    if let Some((name, uid)) = &token.node {
        put("node-name", name);
        put("node-uid", uid);
    }
    serde_json::json!({
        "authenticated": true,
        "user": {
            "username": token.user,
            "uid": format!("uid-{}", token.user),
            "groups": groups_of(&token.user),
            "extra": extra,
        },
        "audiences": common,
    })
}

/// `TokenReview`: who a bearer token belongs to: the main token is the admin (in
/// `system:masters`), a restricted identity's is its user, a bound token's its
/// ServiceAccount with its pod and node ([`bound_token_review`]); any other is not
/// authenticated, with the API server's error.
fn token_review(shared: &Shared, body: &serde_json::Value) -> serde_json::Value {
    let token = body["spec"]["token"].as_str().unwrap_or_default();
    let bound = shared
        .bound
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|b| !token.is_empty() && b.token == token)
        .cloned();
    if let Some(bound) = bound {
        return serde_json::json!({
            "kind": "TokenReview",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": { "creationTimestamp": null },
            "spec": body["spec"].clone(),
            "status": bound_token_review(&bound, body),
        });
    }
    let user = if token.is_empty() {
        None
    } else if token == shared.token {
        Some((
            ADMIN_USER.to_owned(),
            vec![
                "system:masters".to_owned(),
                "system:authenticated".to_owned(),
            ],
        ))
    } else {
        shared
            .identity(token)
            .map(|i| (i.user.clone(), groups_of(&i.user)))
    };
    let status = match user {
        Some((username, groups)) => serde_json::json!({
            "authenticated": true,
            "user": { "username": username, "uid": format!("uid-{username}"), "groups": groups },
            "audiences": ["https://kubernetes.default.svc.cluster.local"],
        }),
        None => serde_json::json!({
            "user": {},
            "error": "[invalid bearer token, token lookup failed]",
        }),
    };
    serde_json::json!({
        "kind": "TokenReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": { "creationTimestamp": null },
        "spec": body["spec"].clone(),
        "status": status,
    })
}

/// `SubjectAccessReview`: whether `spec.user` may do what the review asks, from the
/// policy of the restricted identity of that name; `system:masters` may do anything,
/// an unknown user nothing.
fn subject_access_review(shared: &Shared, body: &serde_json::Value) -> serde_json::Value {
    let spec = &body["spec"];
    let user = spec["user"].as_str().unwrap_or_default();
    let masters = spec["groups"]
        .as_array()
        .is_some_and(|g| g.iter().any(|g| g == "system:masters"));
    if masters {
        return authz::review_as("SubjectAccessReview", None, body);
    }
    let nothing = authz::Policy::default();
    let policy = shared
        .identities
        .iter()
        .find(|i| i.user == user)
        .map_or(&nothing, |i| &i.policy);
    authz::review_as("SubjectAccessReview", Some(policy), body)
}

fn header(request: &Request, name: axum::http::HeaderName) -> Option<&str> {
    request.headers().get(name).and_then(|v| v.to_str().ok())
}

async fn answer(shared: &Arc<Shared>, reg: &Registry, route: Route, request: Request) -> Response {
    let method = request.method().clone();
    let accept = header(&request, ACCEPT).map(str::to_owned);
    let is_get = method == Method::GET || method == Method::HEAD;
    match route {
        Route::Health if is_get => text_ok("ok"),
        Route::Version if is_get => status::ok(&discovery::version()),
        Route::OpenApi(path) if is_get => match path.as_str() {
            "v3" => status::ok(&openapi::index(reg)),
            other => match other
                .strip_prefix("v3/")
                .and_then(|p| openapi::document(reg, p))
            {
                Some(doc) => status::ok(&doc),
                None => status::path_not_found(),
            },
        },
        Route::CoreVersions | Route::Groups if is_get => {
            let aggregated =
                negotiate::choose(accept.as_deref(), true) == Some(Representation::DiscoveryV2);
            match (route, aggregated) {
                (Route::CoreVersions, true) => discovery_v2(&discovery::core_aggregated(reg)),
                (Route::CoreVersions, false) => {
                    status::ok(&discovery::core_versions(&shared.server_address))
                }
                (_, true) => {
                    let mut doc = discovery::groups_aggregated(reg);
                    super::aggregated::extend_aggregated(&mut doc, &shared.aggregated);
                    discovery_v2(&doc)
                }
                (_, false) => {
                    let mut doc = discovery::group_list(reg);
                    super::aggregated::extend_group_list(&mut doc, &shared.aggregated);
                    status::ok(&doc)
                }
            }
        }
        Route::Group(g) if is_get => match discovery::group(reg, &g) {
            Some(doc) => status::ok(&doc),
            None => status::path_not_found(),
        },
        Route::ResourceList { group, version } if is_get => {
            status::ok(&discovery::resource_list(reg, &group, &version))
        }
        Route::AggregatedGroup(g) if is_get => {
            match super::aggregated::group(&shared.aggregated, &g) {
                Some(doc) => status::ok(&doc),
                None => status::path_not_found(),
            }
        }
        Route::Resource(target) => resource(shared, *target, request).await,
        Route::NotFound => status::path_not_found(),
        _ => status::method_not_allowed(),
    }
}

/// A request for an aggregated API (authenticated and authorized): its resource
/// list for `GET /apis/{g}/{v}`, else whatever the API answers.
async fn aggregated(
    shared: &Arc<Shared>,
    route: Route,
    user: Option<String>,
    request: Request,
) -> Response {
    let Route::Aggregated { index, rest } = route else {
        return status::path_not_found();
    };
    let Some(reg) = shared.aggregated.get(index) else {
        return status::path_not_found();
    };
    let method = request.method().clone();
    if rest.is_empty() {
        return if method == Method::GET || method == Method::HEAD {
            status::ok(&super::aggregated::resource_list(reg))
        } else {
            status::method_not_allowed()
        };
    }
    let query = request.uri().query().unwrap_or_default().to_owned();
    let Ok(body) = axum::body::to_bytes(request.into_body(), 8 << 20).await else {
        return status::failure(StatusCode::BAD_REQUEST, "BadRequest", "unreadable body");
    };
    let segs: Vec<&str> = rest.iter().map(String::as_str).collect();
    let (namespace, resource, name, subresource) = super::aggregated::request_info(&segs);
    let forwarded = super::aggregated::AggregatedRequest {
        method: method.as_str().to_owned(),
        path: format!("/{}", rest.join("/")),
        query,
        namespace,
        resource,
        name,
        subresource,
        user,
        body: body.to_vec(),
    };
    reg.api.handle(forwarded).await.into_response()
}

fn text_ok(text: &'static str) -> Response {
    let mut r = (StatusCode::OK, Body::from(text)).into_response();
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn discovery_v2(doc: &serde_json::Value) -> Response {
    status::json_with_type(StatusCode::OK, doc, DISCOVERY_V2_CONTENT_TYPE)
}

async fn resource(shared: &Arc<Shared>, target: Target, request: Request) -> Response {
    let method = request.method().clone();
    match target.subresource.as_deref() {
        None => {}
        Some("status") if has_status_subresource(target.rt) => {}
        Some(_) => return status::path_not_found(),
    }
    let collection = target.name.is_none();
    // A namespaced type without a namespace can only be listed or watched.
    let all_namespaces = target.rt.namespaced && target.namespace.is_none();
    let status_sub = target.subresource.is_some();
    match method {
        Method::GET => handlers::get(shared, target, request).await,
        Method::POST if collection && !all_namespaces => {
            handlers::create(shared, target, request).await
        }
        Method::PUT if !collection => handlers::replace(shared, target, request).await,
        Method::PATCH if !collection => handlers::patch(shared, target, request).await,
        Method::DELETE if !collection && !status_sub => {
            handlers::delete(shared, target, request).await
        }
        Method::DELETE if collection && !all_namespaces => {
            handlers::delete_collection(shared, target, request).await
        }
        _ => status::method_not_allowed(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::resources::{LEASES, NAMESPACES, NODES, PODS};
    use super::*;

    fn parse_builtin(path: &str) -> Route {
        parse(path, &Registry::default())
    }

    fn target(route: Route) -> Target {
        match route {
            Route::Resource(t) => *t,
            other => panic!("not a resource: {other:?}"),
        }
    }

    #[test]
    fn paths() {
        assert_eq!(parse_builtin("/version"), Route::Version);
        assert_eq!(parse_builtin("/readyz/ping"), Route::Health);
        assert_eq!(parse_builtin("/apis/batch"), Route::NotFound);
        assert!(matches!(
            parse_builtin("/api/v1"),
            Route::ResourceList { .. }
        ));
        let t = target(parse_builtin("/api/v1/nodes/worker-1/status"));
        assert_eq!(
            (t.rt, t.name.as_deref(), t.subresource.as_deref()),
            (NODES, Some("worker-1"), Some("status"))
        );
        let t = target(parse_builtin("/api/v1/namespaces/default/pods"));
        assert_eq!(
            (t.rt, t.namespace.as_deref(), t.name),
            (PODS, Some("default"), None)
        );
        let t = target(parse_builtin("/api/v1/pods"));
        assert_eq!((t.rt, t.namespace), (PODS, None));
        assert_eq!(
            parse_builtin("/api/v1/pods/x"),
            Route::NotFound,
            "namespaced object needs a namespace"
        );
        let t = target(parse_builtin("/api/v1/namespaces/kube-system"));
        assert_eq!((t.rt, t.name.as_deref()), (NAMESPACES, Some("kube-system")));
        let t = target(parse_builtin("/api/v1/namespaces/kube-system/status"));
        assert_eq!(
            (t.rt, t.subresource.as_deref()),
            (NAMESPACES, Some("status"))
        );
        let t = target(parse_builtin(
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/w1",
        ));
        assert_eq!((t.rt, t.name.as_deref()), (LEASES, Some("w1")));
        let t = target(parse_builtin("/api/v1/watch/nodes"));
        assert!(t.legacy_watch);
        assert_eq!(
            parse_builtin("/api/v1/namespaces/default/nodes"),
            Route::NotFound
        );
        assert_eq!(parse_builtin("/api/v1/widgets"), Route::NotFound);
    }
}
