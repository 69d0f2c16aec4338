//! Which HTTP redirects a Redfish client may follow.
//!
//! The specification allows both `/redfish/v1` and `/redfish/v1/`, and real services
//! redirect one to the other (`301`/`308` with `Location: /redfish/v1/`); web servers in
//! front of BMCs add trailing slashes everywhere. Following those is needed. Following
//! any redirect is not: the request carries credentials, so a redirect is followed
//! only when it stays on the endpoint's own scheme, host and port, at most
//! [`MAX_REDIRECTS`] times. A method never changes on the way: `307`/`308` keep the
//! method and body by definition, while `301`/`302`/`303` turn a POST into a GET in
//! every HTTP client, which for a Reset would silently drop the command, so those are
//! followed for GET only.

use reqwest::{Method, StatusCode};
use url::Url;

use crate::power::PowerError;

/// Redirects followed for one request, at most.
pub const MAX_REDIRECTS: usize = 5;

/// The URL to send the request to next, or why the redirect is refused.
pub fn next_hop(
    base: &Url,
    current: &Url,
    method: &Method,
    status: StatusCode,
    location: Option<&str>,
) -> Result<Url, PowerError> {
    let shown = path_of(current);
    let Some(location) = location else {
        return Err(PowerError::protocol(format!(
            "{method} {shown} answered HTTP {status} without a Location header"
        )));
    };
    let target = current.join(location).map_err(|e| {
        PowerError::protocol(format!(
            "{method} {shown} answered HTTP {status} to an unusable Location {:?}: {e}",
            crate::untrusted::field(location)
        ))
    })?;
    if target.origin() != base.origin() {
        return Err(PowerError::protocol(format!(
            "{method} {shown} answered HTTP {status}, a redirect to {}, another origin than the \
             endpoint {}; nodefence follows redirects only on the endpoint's own scheme, host and \
             port (credentials must not leave the BMC): if that is really the BMC, set the \
             endpoint to it",
            crate::untrusted::field(target.origin().ascii_serialization().as_str()),
            base.origin().ascii_serialization()
        )));
    }
    let keeps_method = matches!(
        status,
        StatusCode::TEMPORARY_REDIRECT | StatusCode::PERMANENT_REDIRECT
    );
    let get_only = matches!(
        status,
        StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND | StatusCode::SEE_OTHER
    );
    if !keeps_method && !get_only {
        return Err(PowerError::protocol(format!(
            "{method} {shown} answered HTTP {status}, which is not a redirect to follow"
        )));
    }
    if get_only && *method != Method::GET {
        return Err(PowerError::protocol(format!(
            "{method} {shown} answered HTTP {status} to {}; only 307 and 308 keep a {method}'s \
             body, and nodefence will not turn it into a GET (a power command would be lost)",
            path_of(&target)
        )));
    }
    Ok(target)
}

/// True for the redirects a client may remember for the next requests.
pub fn is_permanent(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::MOVED_PERMANENTLY | StatusCode::PERMANENT_REDIRECT
    )
}

/// The path and query of a URL, for messages and the permanent-redirect memory.
pub fn path_of(url: &Url) -> String {
    match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn same_origin_redirects_are_followed_with_their_method() {
        let base = url("https://10.0.0.5");
        let root = url("https://10.0.0.5/redfish/v1");
        for status in [301, 302, 303, 307, 308] {
            let status = StatusCode::from_u16(status).unwrap();
            let next = next_hop(&base, &root, &Method::GET, status, Some("/redfish/v1/")).unwrap();
            assert_eq!(next.as_str(), "https://10.0.0.5/redfish/v1/");
        }
        let reset = url("https://10.0.0.5/redfish/v1/Systems/1/Actions/ComputerSystem.Reset");
        for status in [307, 308] {
            let status = StatusCode::from_u16(status).unwrap();
            let next = next_hop(
                &base,
                &reset,
                &Method::POST,
                status,
                Some("ComputerSystem.Reset/"),
            )
            .unwrap();
            assert_eq!(
                next.path(),
                "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset/"
            );
        }
        // An absolute Location naming the same origin is the same origin.
        let next = next_hop(
            &base,
            &root,
            &Method::GET,
            StatusCode::PERMANENT_REDIRECT,
            Some("https://10.0.0.5:443/redfish/v1/"),
        )
        .unwrap();
        assert_eq!(next.path(), "/redfish/v1/");
    }

    #[test]
    fn other_origins_and_method_changes_are_refused() {
        let base = url("https://10.0.0.5:8443");
        let root = url("https://10.0.0.5:8443/redfish/v1");
        for elsewhere in [
            "https://evil.example/redfish/v1/",
            "http://10.0.0.5:8443/redfish/v1/",
            "https://10.0.0.5/redfish/v1/",
            "//10.0.0.6:8443/redfish/v1/",
        ] {
            let e = next_hop(
                &base,
                &root,
                &Method::GET,
                StatusCode::MOVED_PERMANENTLY,
                Some(elsewhere),
            )
            .unwrap_err();
            assert!(e.message.contains("another origin"), "{elsewhere}: {e}");
            assert!(e.message.contains("https://10.0.0.5:8443"), "{e}");
        }
        for status in [301, 302, 303] {
            let e = next_hop(
                &base,
                &root,
                &Method::POST,
                StatusCode::from_u16(status).unwrap(),
                Some("/x"),
            )
            .unwrap_err();
            assert!(e.message.contains("only 307 and 308"), "{e}");
        }
        let e = next_hop(&base, &root, &Method::GET, StatusCode::FOUND, None).unwrap_err();
        assert!(e.message.contains("without a Location"), "{e}");
        let e = next_hop(
            &base,
            &root,
            &Method::GET,
            StatusCode::MULTIPLE_CHOICES,
            Some("/x"),
        )
        .unwrap_err();
        assert!(e.message.contains("not a redirect to follow"), "{e}");
    }
}
