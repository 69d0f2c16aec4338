//! Where a BMC is: `{node}` substitution, endpoint URLs and IPMI addresses.
//!
//! An endpoint is the base URL of a BMC. It must be unambiguous and must not carry
//! secrets: a URL with `user:password@` would put the password into logs and process
//! listings, so it is refused (and the refusal never repeats the URL). nodefence adds
//! `/redfish/v1` itself, so an endpoint has no path. `{node}` lets one group line serve
//! many nodes; it is replaced by the node name before the URL is parsed.

use std::net::IpAddr;

use url::Url;

use super::diagnostic::Span;
use super::fields::Problem;

/// The one placeholder: replaced by the Kubernetes node name.
pub(crate) const NODE_PLACEHOLDER: &str = "{node}";

/// Stand-in node name used to check a template where it is written.
const SAMPLE_NODE: &str = "node-1";

/// Checks that `value` has no placeholder other than `{node}`.
pub(crate) fn check_placeholders(field: &str, value: &str, span: &Span) -> Result<(), Problem> {
    let mut rest = value;
    while let Some(open) = rest.find('{') {
        let after = rest.get(open..).unwrap_or("");
        if after.starts_with(NODE_PLACEHOLDER) {
            rest = after.get(NODE_PLACEHOLDER.len()..).unwrap_or("");
            continue;
        }
        let shown: String = after
            .chars()
            .take_while(|c| *c != '}')
            .take(20)
            .chain(Some('}'))
            .collect();
        return Err(Problem::new(
            span,
            format!("unknown placeholder `{shown}` in `{field}`"),
            Some("the only placeholder is {node}, replaced by the node name".into()),
        ));
    }
    Ok(())
}

/// Replaces every `{node}` in `value` with `node`.
pub(crate) fn substitute(value: &str, node: &str) -> String {
    value.replace(NODE_PLACEHOLDER, node)
}

/// Checks an endpoint template where it is written (with a stand-in node name).
pub(crate) fn check_endpoint_template(value: &str, span: &Span) -> Result<(), Problem> {
    check_placeholders("endpoint", value, span)?;
    parse_endpoint(&substitute(value, SAMPLE_NODE), span).map(|_| ())
}

/// Parses and checks an endpoint whose placeholders are already substituted.
pub(crate) fn parse_endpoint(text: &str, span: &Span) -> Result<Url, Problem> {
    let example = Some("e.g. endpoint = \"https://bmc-1.mgmt.example.com\"".to_string());
    let url = match Url::parse(text.trim()) {
        Ok(url) => url,
        Err(url::ParseError::RelativeUrlWithoutBase) => {
            return Err(Problem::new(
                span,
                "`endpoint` must be a URL starting with https:// (or http://)",
                example,
            ));
        }
        // url's messages are fixed phrases ("invalid port number"), never the input.
        Err(e) => {
            return Err(Problem::new(
                span,
                format!("`endpoint` is not a valid URL: {e}"),
                example,
            ));
        }
    };
    if !url.username().is_empty() || url.password().is_some() {
        return Err(Problem::new(
            span,
            "`endpoint` must not contain a user name or password",
            Some(
                "remove the `user:password@` part; put the user in `username` and the password \
                 in a file named by `password_file` (or an environment variable named by \
                 `password_env`)"
                    .into(),
            ),
        ));
    }
    if !matches!(url.scheme(), "https" | "http") {
        return Err(Problem::new(
            span,
            "`endpoint` must start with https:// or http://",
            example,
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(Problem::new(span, "`endpoint` has no host", example));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(Problem::new(
            span,
            "`endpoint` must not have a query (?...) or fragment (#...)",
            Some("give only scheme, host and optionally port".into()),
        ));
    }
    let path = url.path().trim_end_matches('/');
    if path.eq_ignore_ascii_case("/redfish/v1") || path.eq_ignore_ascii_case("/redfish") {
        return Err(Problem::new(
            span,
            "`endpoint` must not include /redfish/v1: nodefence adds it itself",
            Some("give the BMC's base URL, e.g. https://bmc-1.mgmt.example.com".into()),
        ));
    }
    if !path.is_empty() {
        return Err(Problem::new(
            span,
            "`endpoint` must have no path, only scheme, host and optionally port",
            example,
        ));
    }
    Ok(url)
}

/// Checks an IPMI address template where it is written.
pub(crate) fn check_address_template(value: &str, span: &Span) -> Result<(), Problem> {
    check_placeholders("address", value, span)?;
    check_address(&substitute(value, SAMPLE_NODE), span)
}

/// Checks an IPMI address (host name or IP, no scheme, no port).
pub(crate) fn check_address(text: &str, span: &Span) -> Result<(), Problem> {
    let example = Some("e.g. address = \"10.0.9.21\" or \"db-1-ipmi.mgmt.example.com\"".into());
    if text.contains("://") {
        return Err(Problem::new(
            span,
            "`address` is a host name or IP address, not a URL",
            example,
        ));
    }
    let bare = text.trim_start_matches('[').trim_end_matches(']');
    if bare.parse::<IpAddr>().is_ok() {
        return Ok(());
    }
    if text.contains(':') {
        return Err(Problem::new(
            span,
            "`address` must not contain a port",
            Some("set the port with `port = 623`".into()),
        ));
    }
    let valid = !text.is_empty()
        && text.len() <= 253
        && text.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        });
    if valid {
        Ok(())
    } else {
        Err(Problem::new(
            span,
            "`address` is not a valid host name or IP address",
            example,
        ))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn endpoint_err(text: &str) -> String {
        parse_endpoint(text, &(0..1)).expect_err(text).message
    }

    #[test]
    fn node_placeholder_is_substituted_before_parsing() {
        let tpl = "https://{node}-bmc.mgmt.example.com";
        check_endpoint_template(tpl, &(0..1)).expect("valid template");
        let url = parse_endpoint(&substitute(tpl, "worker-1"), &(0..1)).expect("valid");
        assert_eq!(url.host_str(), Some("worker-1-bmc.mgmt.example.com"));
        let e = check_endpoint_template("https://{name}.example.com", &(0..1)).expect_err("bad");
        assert!(e.message.contains("{name}"), "{}", e.message);
    }

    #[test]
    fn userinfo_is_refused_without_echoing_it() {
        for url in [
            "https://root:calvin@bmc",
            "https://root@bmc",
            "root:calvin@bmc",
        ] {
            let msg = endpoint_err(url);
            assert!(!msg.contains("calvin"), "{msg}");
        }
        assert!(endpoint_err("https://root:calvin@bmc").contains("user name or password"));
    }

    #[test]
    fn endpoint_shape_errors() {
        assert!(endpoint_err("bmc-1.example.com").contains("starting with https://"));
        assert!(endpoint_err("ftp://bmc").contains("https:// or http://"));
        assert!(endpoint_err("https://bmc/redfish/v1").contains("adds it itself"));
        assert!(endpoint_err("https://bmc/redfish/v1/").contains("adds it itself"));
        assert!(endpoint_err("https://bmc/ui").contains("no path"));
        assert!(endpoint_err("https://bmc?x=1").contains("query"));
        assert!(endpoint_err("https://bmc:99999").contains("invalid port"));
        assert!(parse_endpoint("https://bmc:8443/", &(0..1)).is_ok());
        assert!(parse_endpoint("http://10.0.0.1", &(0..1)).is_ok());
    }

    #[test]
    fn addresses() {
        for ok in [
            "10.0.9.21",
            "fd00::21",
            "[fd00::21]",
            "db-1-ipmi.mgmt",
            "{node}-ipmi",
        ] {
            check_address_template(ok, &(0..1)).expect(ok);
        }
        let msg = |a: &str| check_address(a, &(0..1)).expect_err(a).message;
        assert!(msg("https://10.0.0.1").contains("not a URL"));
        assert!(msg("10.0.0.1:623").contains("port"));
        assert!(msg("bad host").contains("not a valid"));
    }
}
