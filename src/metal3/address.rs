//! A BareMetalHost's `spec.bmc.address`, as Metal3 reads it, turned into what
//! nodefence's drivers need.
//!
//! Metal3's scheme names the Ironic driver; nodefence needs only the protocol:
//!
//! | scheme (each also `+http` / `+https` where Metal3 accepts it) | nodefence |
//! | --- | --- |
//! | `redfish`, `redfish-virtualmedia`, `redfish-uefihttp`, `idrac-redfish`, `idrac-virtualmedia`, `ilo5-redfish`, `ilo5-virtualmedia` | Redfish: `https://host[:port]` (`http://` with `+http`), the system Id from the path `/redfish/v1/Systems/<Id>` |
//! | `ipmi`, `libvirt` (VirtualBMC), or no scheme at all (`host`, `host:port`) | IPMI: host and port (623 by default), `?privilegelevel=` |
//! | `idrac`, `ilo4`, `ilo4-virtualmedia`, `ilo5`, `irmc`, `ibmc` | refused: vendor protocols (WS-Man, RIBCL, SCCI) nodefence does not speak |
//!
//! As Metal3 does, a bare `host` or `host:port` is IPMI, and `scheme:rest` without
//! `//` is read as `scheme://rest`. Unlike Metal3, a Redfish path that is not a
//! system's (`/redfish/v1/Systems/<Id>`, or none) is refused: nodefence finds the
//! system by its Id in the service's Systems collection and never guesses.
//!
//! An address with `user:password@` is refused and never repeated in a message.

use std::net::{IpAddr, SocketAddr};

use url::Url;

use super::host::HostRef;
use crate::config::IpmiPrivilege;

/// The standard IPMI-over-LAN port, Metal3's default too.
pub const IPMI_PORT: u16 = 623;

/// Metal3 schemes that speak Redfish (each also with `+http` and `+https`).
pub const REDFISH_SCHEMES: &[&str] = &[
    "redfish",
    "redfish-virtualmedia",
    "redfish-uefihttp",
    "idrac-redfish",
    "idrac-virtualmedia",
    "ilo5-redfish",
    "ilo5-virtualmedia",
];

/// Metal3 schemes that speak IPMI (no `+http` forms).
pub const IPMI_SCHEMES: &[&str] = &["ipmi", "libvirt"];

/// Schemes of vendor drivers nodefence cannot drive: why, and what to use.
const VENDOR_SCHEMES: &[(&str, &str, &str)] = &[
    (
        "idrac",
        "Dell iDRAC over WS-Man",
        "idrac-redfish:// (or idrac-virtualmedia://)",
    ),
    (
        "ilo4",
        "HPE iLO 4 over RIBCL (proliantutils)",
        "ipmi:// (iLO 4 has no usable Redfish)",
    ),
    (
        "ilo4-virtualmedia",
        "HPE iLO 4 over RIBCL (proliantutils)",
        "ipmi:// (iLO 4 has no usable Redfish)",
    ),
    (
        "ilo5",
        "HPE iLO 5 over RIBCL (proliantutils)",
        "ilo5-redfish:// (or ilo5-virtualmedia://)",
    ),
    (
        "irmc",
        "Fujitsu iRMC over SCCI",
        "redfish:// or ipmi:// to the same iRMC",
    ),
    ("ibmc", "Huawei iBMC's own API", "redfish://"),
];

/// How nodefence reaches a BMC named by a BareMetalHost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BmcAccess {
    Redfish {
        /// Scheme, host and port only; nodefence adds `/redfish/v1`.
        endpoint: Url,
        /// The ComputerSystem's Id (last segment of `/redfish/v1/Systems/<Id>`).
        system_id: Option<String>,
    },
    Ipmi {
        address: String,
        port: u16,
        privilege: IpmiPrivilege,
    },
}

/// A BareMetalHost's BMC address, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BmcAddress {
    /// Metal3's scheme as written (`idrac-virtualmedia+https`, `ipmi`, ...): which
    /// Ironic driver Metal3 uses.
    pub scheme: String,
    pub access: BmcAccess,
}

/// An address nodefence cannot use: which host, what is wrong, what to do. Never
/// holds the address when it carries credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("BareMetalHost {host}: spec.bmc.address {message}\n  help: {help}")]
pub struct AddressError {
    pub host: HostRef,
    pub message: String,
    pub help: String,
}

/// Reads `address` of BareMetalHost `host`.
pub fn parse(host: &HostRef, address: &str) -> Result<BmcAddress, AddressError> {
    let fail = |message: String, help: &str| AddressError {
        host: host.clone(),
        message,
        help: help.to_string(),
    };
    let address = address.trim();
    if address.is_empty() {
        return Err(fail(
            "is empty".into(),
            "set spec.bmc.address on the BareMetalHost, e.g. redfish://bmc-1/redfish/v1/Systems/1, \
             or write a node for it in the inventory",
        ));
    }
    if has_userinfo(address) {
        return Err(fail(
            "holds a user name or password (user:password@host)".into(),
            "remove it from the address: Metal3 takes the credentials from the Secret named by \
             spec.bmc.credentialsName",
        ));
    }
    let (scheme, rest) = split_scheme(address).map_err(|why| {
        fail(
            format!("{address:?} {why}"),
            "write it as Metal3 documents, e.g. redfish://bmc-1/redfish/v1/Systems/1 or ipmi://10.0.9.21:623",
        )
    })?;
    let scheme = scheme.to_ascii_lowercase();
    let (base, transport) = match scheme.split_once('+') {
        Some((base, t)) => (base, Some(t)),
        None => (scheme.as_str(), None),
    };
    if let Some((_, what, instead)) = VENDOR_SCHEMES.iter().find(|(s, ..)| *s == base) {
        return Err(fail(
            format!(
                "{address:?} uses {base}://, {what}: nodefence drives only Redfish and IPMI BMCs"
            ),
            &format!(
                "switch the BareMetalHost to {instead} (current Metal3 no longer accepts \
                 {base}:// either), or write this node in the inventory with driver = \"ipmi\" \
                 or an exec fence agent for it"
            ),
        ));
    }
    let url = Url::parse(&format!("{scheme}://{rest}")).map_err(|e| {
        fail(
            format!("{address:?} is not a valid URL: {e}"),
            "write it as Metal3 documents, e.g. redfish://bmc-1/redfish/v1/Systems/1",
        )
    })?;
    let host_name = url.host_str().unwrap_or_default();
    if host_name.is_empty() {
        return Err(fail(
            format!("{address:?} has no host"),
            "name the BMC's host name or IP address",
        ));
    }
    if !valid_host(host_name) {
        return Err(fail(
            format!("{address:?}: {host_name:?} is not a valid host name or IP address"),
            "Metal3 refuses it too; correct the host",
        ));
    }
    if REDFISH_SCHEMES.contains(&base) {
        let http = match transport {
            None | Some("https") => "https",
            Some("http") => "http",
            Some(other) => {
                return Err(fail(
                    format!("{address:?}: {base}+{other} is not a scheme Metal3 accepts"),
                    &format!("use {base}://, {base}+https:// or {base}+http://"),
                ));
            }
        };
        if url.query().is_some() || url.fragment().is_some() {
            return Err(fail(
                format!("{address:?} has a query or fragment, which a Redfish address does not"),
                "remove the ?... or #... part",
            ));
        }
        let system_id = system_id(url.path()).map_err(|why| {
            fail(
                format!("{address:?}: {why}"),
                "name the system as Metal3 documents it, .../redfish/v1/Systems/<Id> (or no \
                 path when the BMC serves one system)",
            )
        })?;
        let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
        let endpoint = Url::parse(&format!("{http}://{host_name}{port}")).map_err(|e| {
            fail(
                format!("{address:?}: cannot form the endpoint: {e}"),
                "correct the host and port",
            )
        })?;
        return Ok(BmcAddress {
            scheme,
            access: BmcAccess::Redfish {
                endpoint,
                system_id,
            },
        });
    }
    if IPMI_SCHEMES.contains(&base) {
        if transport.is_some() {
            return Err(fail(
                format!("{address:?}: {scheme}:// is not a scheme Metal3 accepts"),
                &format!("use {base}://host[:port]"),
            ));
        }
        let path = url.path().trim_matches('/');
        if !path.is_empty() {
            return Err(fail(
                format!("{address:?} has a path, which an IPMI address does not"),
                "write ipmi://host[:port]",
            ));
        }
        let privilege = privilege(&url).map_err(|level| {
            fail(
                format!(
                    "{address:?} asks for IPMI privilege level {level:?}, which cannot control \
                     power"
                ),
                "use privilegelevel=OPERATOR or ADMINISTRATOR (the default)",
            )
        })?;
        return Ok(BmcAddress {
            scheme,
            access: BmcAccess::Ipmi {
                address: host_name
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_string(),
                port: url.port().unwrap_or(IPMI_PORT),
                privilege,
            },
        });
    }
    let mut known: Vec<&str> = REDFISH_SCHEMES.to_vec();
    known.extend(IPMI_SCHEMES);
    Err(fail(
        format!("{address:?}: unknown BMC scheme {scheme:?}"),
        &format!(
            "Metal3 (and nodefence) accept {} (Redfish ones also with +http or +https); or \
             write this node in the inventory",
            known.join(", ")
        ),
    ))
}

/// True when the authority has `user@` or `user:password@`.
fn has_userinfo(address: &str) -> bool {
    let rest = address.split_once("://").map_or(address, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    authority.contains('@')
}

/// Scheme and the rest, as Metal3 reads an address: `scheme://rest`, `scheme:rest`
/// (read as `scheme://rest`), or no scheme (IPMI) for `host`, `host:port`, an IP
/// address or `[v6]:port`.
fn split_scheme(address: &str) -> Result<(&str, &str), &'static str> {
    if let Some((scheme, rest)) = address.split_once("://") {
        return if is_scheme(scheme) {
            Ok((scheme, rest))
        } else {
            Err("does not start with a valid scheme")
        };
    }
    let bare = address.trim_start_matches('[').trim_end_matches(']');
    if address.parse::<SocketAddr>().is_ok() || bare.parse::<IpAddr>().is_ok() {
        return Ok(("ipmi", address));
    }
    match address.split_once(':') {
        // `scheme:rest` as Go's URL parser reads it (a host name followed by a port
        // reads as a scheme too, which Metal3 then refuses as an unknown type).
        Some((scheme, rest)) if is_scheme(scheme) => Ok((scheme, rest.trim_start_matches('/'))),
        Some(_) => Err("is neither a URL nor host:port"),
        None => Ok(("ipmi", address)),
    }
}

/// A URL scheme: a letter, then letters, digits, `+`, `-`, `.`.
fn is_scheme(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// A DNS name (labels of letters, digits and inner `-`) or an IP address, as Metal3
/// checks it.
fn valid_host(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if bare.parse::<IpAddr>().is_ok() {
        return true;
    }
    host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

/// The system Id of a Redfish path: none for no path or `/redfish/v1`, the last
/// segment of `/redfish/v1/Systems/<Id>`; anything else is refused.
fn system_id(path: &str) -> Result<Option<String>, String> {
    let trimmed = path.trim_matches('/');
    if trimmed.is_empty() || trimmed.eq_ignore_ascii_case("redfish/v1") {
        return Ok(None);
    }
    let id = trimmed
        .strip_prefix("redfish/v1/Systems/")
        .filter(|id| !id.is_empty() && !id.contains('/'));
    match id {
        Some(id) => {
            Ok(Some(percent_decode(id).ok_or_else(|| {
                format!("the system Id in {path:?} is not UTF-8")
            })?))
        }
        None => Err(format!(
            "the path {path:?} is not a Redfish system (/redfish/v1/Systems/<Id>)"
        )),
    }
}

/// `%xx` decoded (a system Id may be percent-encoded in a URL).
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = s.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// `?privilegelevel=` of an IPMI address (Metal3's default: ADMINISTRATOR); Err is a
/// level that cannot control power.
fn privilege(url: &Url) -> Result<IpmiPrivilege, String> {
    let level = url
        .query_pairs()
        .find(|(k, _)| k == "privilegelevel")
        .map(|(_, v)| v.into_owned());
    match level.as_deref().map(str::to_ascii_uppercase).as_deref() {
        None | Some("ADMINISTRATOR") => Ok(IpmiPrivilege::Administrator),
        Some("OPERATOR") => Ok(IpmiPrivilege::Operator),
        Some(_) => Err(level.unwrap_or_default()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn host() -> HostRef {
        HostRef::new("metal3", "worker-1")
    }

    fn ok(address: &str) -> BmcAddress {
        parse(&host(), address).unwrap_or_else(|e| panic!("{address}: {e}"))
    }

    fn err(address: &str) -> AddressError {
        parse(&host(), address).expect_err(address)
    }

    fn redfish(address: &str) -> (String, Option<String>) {
        match ok(address).access {
            BmcAccess::Redfish {
                endpoint,
                system_id,
            } => (
                endpoint.as_str().trim_end_matches('/').to_string(),
                system_id,
            ),
            other => panic!("{address}: {other:?}"),
        }
    }

    fn ipmi(address: &str) -> (String, u16, IpmiPrivilege) {
        match ok(address).access {
            BmcAccess::Ipmi {
                address,
                port,
                privilege,
            } => (address, port, privilege),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_redfish_scheme_maps_to_an_endpoint_and_a_system_id() {
        for scheme in REDFISH_SCHEMES {
            for (suffix, http) in [("", "https"), ("+https", "https"), ("+http", "http")] {
                let address = format!("{scheme}{suffix}://bmc-1.mgmt:8443/redfish/v1/Systems/1");
                assert_eq!(
                    redfish(&address),
                    (format!("{http}://bmc-1.mgmt:8443"), Some("1".into())),
                    "{address}"
                );
                assert_eq!(ok(&address).scheme, format!("{scheme}{suffix}"));
            }
        }
    }

    #[test]
    fn redfish_paths_name_the_system_or_nothing() {
        assert_eq!(
            redfish("idrac-virtualmedia://10.0.9.21/redfish/v1/Systems/System.Embedded.1"),
            ("https://10.0.9.21".into(), Some("System.Embedded.1".into()))
        );
        // sushy-tools, as in Metal3's dev environment: the system is a libvirt UUID.
        assert_eq!(
            redfish(
                "redfish+http://192.168.111.1:8000/redfish/v1/Systems/27082f3d-3c1f-4a12-8d84-aa4ee25a36f4"
            ),
            (
                "http://192.168.111.1:8000".into(),
                Some("27082f3d-3c1f-4a12-8d84-aa4ee25a36f4".into())
            )
        );
        assert_eq!(
            redfish("ilo5-redfish://ilo-7/"),
            ("https://ilo-7".into(), None)
        );
        assert_eq!(
            redfish("redfish://bmc/redfish/v1"),
            ("https://bmc".into(), None)
        );
        assert_eq!(
            redfish("redfish://[fd00::21]/redfish/v1/Systems/Self/"),
            ("https://[fd00::21]".into(), Some("Self".into()))
        );
        assert_eq!(
            redfish("redfish://bmc/redfish/v1/Systems/Blade%201"),
            ("https://bmc".into(), Some("Blade 1".into()))
        );
        let e = err("redfish://bmc/custom/path");
        assert!(e.message.contains("not a Redfish system"), "{e}");
        assert!(e.help.contains("/redfish/v1/Systems/<Id>"), "{e}");
        let e = err("redfish://bmc/redfish/v1/Systems/1/Bios");
        assert!(e.message.contains("not a Redfish system"), "{e}");
        assert!(
            err("redfish://bmc/redfish/v1/Systems/1?x=1")
                .message
                .contains("query")
        );
        assert!(
            err("redfish+ftp://bmc/")
                .message
                .contains("not a scheme Metal3 accepts")
        );
    }

    #[test]
    fn ipmi_addresses_with_and_without_a_scheme() {
        use IpmiPrivilege::{Administrator, Operator};
        assert_eq!(
            ipmi("ipmi://10.0.9.21"),
            ("10.0.9.21".into(), 623, Administrator)
        );
        assert_eq!(
            ipmi("ipmi://10.0.9.21:6230"),
            ("10.0.9.21".into(), 6230, Administrator)
        );
        assert_eq!(
            ipmi("libvirt://192.168.122.1:6233"),
            ("192.168.122.1".into(), 6233, Administrator)
        );
        assert_eq!(
            ipmi("ipmi://bmc-3.mgmt"),
            ("bmc-3.mgmt".into(), 623, Administrator)
        );
        assert_eq!(
            ipmi("ipmi://[fd00::21]:624"),
            ("fd00::21".into(), 624, Administrator)
        );
        assert_eq!(
            ipmi("ipmi://10.0.9.21?privilegelevel=OPERATOR"),
            ("10.0.9.21".into(), 623, Operator)
        );
        // No scheme: Metal3 reads IPMI.
        assert_eq!(ipmi("10.0.9.21"), ("10.0.9.21".into(), 623, Administrator));
        assert_eq!(
            ipmi("10.0.9.21:6231"),
            ("10.0.9.21".into(), 6231, Administrator)
        );
        assert_eq!(ipmi("bmc-3"), ("bmc-3".into(), 623, Administrator));
        assert_eq!(
            ipmi("[fd00::21]:625"),
            ("fd00::21".into(), 625, Administrator)
        );
        // `scheme:rest`, as Go's URL parser reads it.
        assert_eq!(
            ipmi("ipmi:10.0.9.21"),
            ("10.0.9.21".into(), 623, Administrator)
        );
        assert_eq!(ok("ipmi:10.0.9.21").scheme, "ipmi");
        let e = err("ipmi://10.0.9.21?privilegelevel=USER");
        assert!(
            e.message.contains("\"USER\"") && e.help.contains("OPERATOR"),
            "{e}"
        );
        assert!(err("ipmi://10.0.9.21/x").message.contains("path"));
        assert!(
            err("ipmi+https://10.0.9.21")
                .message
                .contains("not a scheme")
        );
    }

    #[test]
    fn vendor_protocols_are_refused_with_what_to_use_instead() {
        for (scheme, instead) in [
            ("idrac", "idrac-redfish://"),
            ("ilo4", "ipmi://"),
            ("ilo4-virtualmedia", "ipmi://"),
            ("ilo5", "ilo5-redfish://"),
            ("irmc", "redfish://"),
            ("ibmc", "redfish://"),
        ] {
            let e = err(&format!("{scheme}://bmc-1"));
            assert!(
                e.message.contains("nodefence drives only Redfish and IPMI"),
                "{scheme}: {e}"
            );
            assert!(e.help.contains(instead), "{scheme}: {e}");
            assert_eq!(e.host, host());
        }
        // With a transport too.
        assert!(err("idrac+https://bmc-1").message.contains("WS-Man"));
    }

    #[test]
    fn bad_addresses_name_the_host_and_the_fix() {
        let e = err("");
        assert!(
            e.to_string()
                .starts_with("BareMetalHost metal3/worker-1: spec.bmc.address is empty")
        );
        let e = err("fancy://bmc");
        assert!(e.message.contains("unknown BMC scheme \"fancy\""), "{e}");
        assert!(
            e.help.contains("idrac-redfish") && e.help.contains("ipmi"),
            "{e}"
        );
        // A host name with a port reads as a scheme, as in Metal3 (which refuses it).
        assert!(
            err("bmc.example.com:623")
                .message
                .contains("unknown BMC scheme")
        );
        assert!(
            err("redfish://bad_host/")
                .message
                .contains("not a valid host")
        );
        assert!(
            err("redfish:///redfish/v1/Systems/1")
                .message
                .contains("no host")
        );
        assert!(err("1bad://x").message.contains("valid scheme"));
    }

    #[test]
    fn credentials_in_an_address_are_refused_and_never_repeated() {
        for address in [
            "redfish://root:calvin-Secret@bmc/redfish/v1/Systems/1",
            "ipmi://admin:calvin-Secret@10.0.0.1",
            "root:calvin-Secret@10.0.0.1",
        ] {
            let e = err(address);
            let text = e.to_string();
            assert!(!text.contains("calvin"), "{text}");
            assert!(text.contains("user name or password"), "{text}");
            assert!(e.help.contains("credentialsName"), "{text}");
        }
    }
}
