//! Where an instance is: the Node's providerID, the region of an availability zone,
//! and the EC2 endpoint of a region. Pure functions, no I/O.

use url::Url;

/// An EC2 instance as a Node's `spec.providerID` names it (`aws:///<zone>/<id>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderId {
    /// The availability zone (`eu-central-1a`), when the providerID has one.
    pub zone: Option<String>,
    pub instance_id: String,
}

/// Parses `aws:///<zone>/<instance-id>` (also `aws://<zone>/<id>` and `aws:///<id>`).
/// Anything else, including a non-EC2 AWS id (Fargate), is an error saying why.
pub fn parse_provider_id(raw: &str) -> Result<ProviderId, String> {
    let raw = raw.trim();
    let Some(rest) = raw.strip_prefix("aws://") else {
        return Err(format!(
            "the Node's providerID {raw:?} is not an AWS one (aws:///<zone>/<instance-id>)"
        ));
    };
    let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
    let (zone, id) = match parts.as_slice() {
        [id] => (None, *id),
        [zone, id] => (Some((*zone).to_string()), *id),
        _ => {
            return Err(format!(
                "the Node's providerID {raw:?} is not of the form aws:///<zone>/<instance-id>"
            ));
        }
    };
    if !is_instance_id(id) {
        return Err(format!(
            "the Node's providerID {raw:?} does not name an EC2 instance (i-...)"
        ));
    }
    Ok(ProviderId {
        zone,
        instance_id: id.to_string(),
    })
}

/// `i-` followed by hex digits, as EC2 instance ids are.
pub fn is_instance_id(id: &str) -> bool {
    id.strip_prefix("i-")
        .is_some_and(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The region of an availability zone: `eu-central-1a` → `eu-central-1`,
/// `us-gov-west-1b` → `us-gov-west-1`, and for Local and Wavelength Zones
/// (`us-west-2-lax-1a`, `us-east-1-wl1-bos-wlz-1`) their parent region `us-west-2`,
/// `us-east-1`. The region ends at the first dash-separated part that starts with a
/// digit, which keeps its digits only.
pub fn region_of_zone(zone: &str) -> Option<String> {
    let mut region = Vec::new();
    for part in zone.trim().split('-') {
        if part.starts_with(|c: char| c.is_ascii_digit()) {
            let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
            if region.is_empty() {
                return None;
            }
            region.push(digits);
            let region = region.join("-");
            return is_region_name(&region).then_some(region);
        }
        if part.is_empty() {
            return None;
        }
        region.push(part.to_string());
    }
    None
}

/// Lower-case letters, digits and dashes only: safe to put in a host name.
pub fn is_region_name(region: &str) -> bool {
    !region.is_empty()
        && region.len() <= 40
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !region.starts_with('-')
        && !region.ends_with('-')
}

/// The public EC2 endpoint of `region` (China regions live under `amazonaws.com.cn`).
pub fn default_endpoint(region: &str) -> Result<Url, String> {
    if !is_region_name(region) {
        return Err(format!("{region:?} is not an AWS region name"));
    }
    let domain = if region.starts_with("cn-") {
        "amazonaws.com.cn"
    } else {
        "amazonaws.com"
    };
    Url::parse(&format!("https://ec2.{region}.{domain}/"))
        .map_err(|e| format!("cannot build the EC2 endpoint for region {region:?}: {e}"))
}

/// The `Host` header value for `url` (with the port when it is not the default).
pub fn host_header(url: &Url) -> Option<String> {
    let host = url.host_str()?;
    Some(match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    })
}
