//! Content negotiation: which representation of a response the client asked for in
//! its `Accept` header.
//!
//! Clients ask for more than "JSON": kubectl's `get` wants a server-side
//! `meta.k8s.io` Table (`as=Table;v=v1;g=meta.k8s.io`), its discovery wants the
//! aggregated `apidiscovery.k8s.io/v2` document, and kube-rs metadata watchers want
//! `PartialObjectMetadata`. Entries are considered in the client's order and the
//! first one this server can produce wins, falling back like the real server does.
//! Protobuf and YAML are never produced: a client accepting nothing else gets 406.

/// A representation the server can produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Representation {
    /// The object(s) as stored.
    Object,
    /// `meta.k8s.io` Table, in this version (`v1` or `v1beta1`).
    Table(&'static str),
    /// `meta.k8s.io/v1` `PartialObjectMetadata` / `PartialObjectMetadataList`.
    Metadata,
    /// `apidiscovery.k8s.io/v2` `APIGroupDiscoveryList` (discovery endpoints only).
    DiscoveryV2,
}

/// The Content-Type of an aggregated discovery answer.
pub const DISCOVERY_V2_CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// One `Accept` entry: media type and its parameters.
struct Entry<'a> {
    media: String,
    params: Vec<(String, &'a str)>,
}

impl Entry<'_> {
    fn param(&self, name: &str) -> Option<&str> {
        self.params.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
    }
}

fn entries(accept: &str) -> Vec<Entry<'_>> {
    accept
        .split(',')
        .filter_map(|raw| {
            let mut parts = raw.split(';');
            let media = parts.next()?.trim().to_ascii_lowercase();
            if media.is_empty() {
                return None;
            }
            let params = parts
                .filter_map(|p| {
                    let (k, v) = p.split_once('=')?;
                    Some((k.trim().to_ascii_lowercase(), v.trim().trim_matches('"')))
                })
                .collect();
            Some(Entry { media, params })
        })
        .collect()
}

fn is_json(media: &str) -> bool {
    matches!(media, "application/json" | "application/*" | "*/*")
}

/// The representation for a resource request (get, list, watch): `None` means 406.
/// `discovery` enables the aggregated discovery document.
pub fn choose(accept: Option<&str>, discovery: bool) -> Option<Representation> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Some(Representation::Object);
    };
    for e in entries(accept) {
        if !is_json(&e.media) {
            continue;
        }
        match (e.param("as"), e.param("g"), e.param("v")) {
            (None, _, _) => return Some(Representation::Object),
            (Some("Table"), Some("meta.k8s.io"), Some("v1")) if !discovery => {
                return Some(Representation::Table("v1"));
            }
            (Some("Table"), Some("meta.k8s.io"), Some("v1beta1")) if !discovery => {
                return Some(Representation::Table("v1beta1"));
            }
            (
                Some("PartialObjectMetadata" | "PartialObjectMetadataList"),
                Some("meta.k8s.io"),
                Some("v1"),
            ) if !discovery => return Some(Representation::Metadata),
            (Some("APIGroupDiscoveryList"), Some("apidiscovery.k8s.io"), Some("v2"))
                if discovery =>
            {
                return Some(Representation::DiscoveryV2);
            }
            _ => continue,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_and_kube_rs_accept_headers() {
        let table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(
            choose(Some(table), false),
            Some(Representation::Table("v1"))
        );
        let disco = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(choose(Some(disco), true), Some(Representation::DiscoveryV2));
        assert_eq!(choose(Some(disco), false), Some(Representation::Object));
        assert_eq!(
            choose(
                Some(
                    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
                ),
                true
            ),
            Some(Representation::Object),
            "only v2 is served aggregated"
        );
        assert_eq!(
            choose(
                Some("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"),
                false
            ),
            Some(Representation::Metadata)
        );
        assert_eq!(choose(None, false), Some(Representation::Object));
        assert_eq!(choose(Some("*/*"), false), Some(Representation::Object));
        assert_eq!(
            choose(
                Some("application/vnd.kubernetes.protobuf, application/json"),
                false
            ),
            Some(Representation::Object)
        );
        assert_eq!(
            choose(Some("application/vnd.kubernetes.protobuf"), false),
            None
        );
    }
}
