//! A companion's hello: it proves which node it runs on with its projected
//! ServiceAccount token (audience [`AUDIENCE`]), over TLS to a certificate it
//! trusts, and gets a session (an id and a key) for its beats to this replica, and
//! what it needs for its peers: the peer key their questions are sealed under, this
//! replica's authority key, and a credential, signed with it, that binds the
//! companion's own public key (sent in the hello) to the node its token proved
//! ([`nodefence_watchdog::wire::Credential`]). Its peers count its answers by that
//! node, once each.
//!
//! The token is reviewed by the API server (TokenReview, asking for [`AUDIENCE`]
//! alone); it is accepted only when the review authenticates it for that audience,
//! names the companion's ServiceAccount, and binds it to exactly one node
//! (`authentication.kubernetes.io/node-name`, Kubernetes 1.30+): the node a session
//! beats for is the token's, never one the companion names, so a companion can speak
//! for its own node alone. The token is never logged or echoed.
//!
//! **What is stored where**: a replica keeps its peer key and its authority's private
//! key in its memory alone, made at its start (a restarted replica gives new ones, and
//! a companion drops the old ones at its next hello to it); the credentials it issued
//! it does not keep. A companion keeps what each replica gave it, and its own private
//! key, in its state file ([`crate::companion::state`]), for a successor after a
//! crash.

use base64::Engine as _;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, TokenReviewStatus};
use kube::Api;
use kube::api::PostParams;
use nodefence_watchdog::wire::PublicKey;
use serde::{Deserialize, Serialize};

/// The audience of the companion's projected token.
pub const AUDIENCE: &str = "nodefence-companion";
/// The review's key for the pod's node.
pub const NODE_NAME: &str = "authentication.kubernetes.io/node-name";
/// The hello's path.
pub const PATH: &str = "/companion/v1/session";

/// What a companion says of itself in its hello (a JSON body; a companion older than
/// this nodefence sends none, and names no boot).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    /// Its machine's boot ID (`/proc/sys/kernel/random/boot_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// Its machine is a virtual one.
    #[serde(default)]
    pub virtual_machine: bool,
    /// Its own public key (Ed25519, base64), which its answers to its peers are signed
    /// with: the replica issues a credential for it ([`Session::credential`]). A
    /// companion older than the credentials sends none, and its answers count nowhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
}

/// A public key as a hello carries it: 32 bytes, base64.
pub fn encode_key(key: &PublicKey) -> String {
    base64::engine::general_purpose::STANDARD.encode(key.0)
}

/// The public key `encoded` is, if it is 32 bytes of base64.
pub fn decode_key(encoded: &str) -> Option<PublicKey> {
    base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()
        .and_then(|k| <[u8; 32]>::try_from(k).ok())
        .map(PublicKey)
}

/// The longest hello body read.
pub const MAX_REQUEST: usize = 4096;

impl Request {
    /// The body as sent: empty (an older companion) is no boot, anything else must be
    /// this JSON, at most [`MAX_REQUEST`] bytes; why not, escaped and cut short.
    pub fn parse(body: &[u8]) -> Result<Self, String> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self::default());
        }
        if body.len() > MAX_REQUEST {
            return Err(format!("the hello's body is over {MAX_REQUEST} bytes"));
        }
        let said: Self = serde_json::from_slice(body).map_err(|e| {
            format!(
                "the hello's body is not a companion's: {}",
                crate::untrusted::text(&e.to_string(), 200)
            )
        })?;
        if said
            .public_key
            .as_deref()
            .is_some_and(|k| decode_key(k).is_none())
        {
            return Err("the hello's public key is not 32 bytes of base64".into());
        }
        Ok(said)
    }

    /// The companion's public key, if it sent one (well-formed: [`Self::parse`]).
    pub fn public_key(&self) -> Option<PublicKey> {
        self.public_key.as_deref().and_then(decode_key)
    }
}

/// What a hello gets back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// The node the token is bound to.
    pub node: String,
    /// The session id (a string: JSON numbers lose precision beyond 2^53).
    pub session: String,
    /// The key, base64.
    pub key: String,
    /// Where beats go: this replica's UDP port.
    pub heartbeat_port: u16,
    pub heartbeat_interval_ms: u64,
    pub isolation_timeout_ms: u64,
    /// The key the companions' peer questions are sealed under, base64: this
    /// replica's, made at its start and given to every companion that says hello to it
    /// (so to every companion, which all beat to every replica). The replica keeps it in
    /// memory alone; a companion in its state file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_key: Option<String>,
    /// This replica's authority key (Ed25519, public, base64), made at its start: a
    /// peer's answer counts only under a credential it (or another replica) signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authority_key: Option<String>,
    /// The credential this replica issued the companion's public key, for the node the
    /// token is bound to, base64 ([`nodefence_watchdog::wire::Credential`]): none when
    /// the hello sent no key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
}

/// Why a token was refused (said to the companion; never the token).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the API server did not authenticate the token{0}")]
    NotAuthenticated(String),
    #[error("the token is not for audience {AUDIENCE} (it was reviewed for [{0}])")]
    Audience(String),
    #[error("the token is {0}'s, not the companion's ServiceAccount {1}")]
    User(String, String),
    #[error(
        "the token is bound to no single node ({0} values of {NODE_NAME}): a companion's \
         token must be a projected one of its pod (Kubernetes 1.30+)"
    )]
    Node(usize),
    #[error("the token could not be reviewed: {0}")]
    Review(String),
}

/// How many of a refused token's audiences a refusal names.
const SHOWN_AUDIENCES: usize = 3;

/// The node a reviewed token speaks for, or why it speaks for none. What a refusal
/// says of the review (its error, audiences, user) is escaped and cut short: it fits
/// an Event's note.
pub fn bind(status: &TokenReviewStatus, companion_user: &str) -> Result<String, Refusal> {
    if status.authenticated != Some(true) {
        let why = status
            .error
            .as_deref()
            .map(|e| format!(": {}", crate::untrusted::text(e, 200)))
            .unwrap_or_default();
        return Err(Refusal::NotAuthenticated(why));
    }
    let audiences = status.audiences.as_deref().unwrap_or_default();
    if !audiences.iter().any(|a| a == AUDIENCE) {
        // Said to the companion and logged: the first few, each cut short.
        let mut shown: Vec<String> = audiences
            .iter()
            .take(SHOWN_AUDIENCES)
            .map(|a| format!("\"{}\"", crate::untrusted::text(a, 40)))
            .collect();
        if audiences.len() > SHOWN_AUDIENCES {
            shown.push(format!("{} more", audiences.len() - SHOWN_AUDIENCES));
        }
        return Err(Refusal::Audience(shown.join(", ")));
    }
    let user = status.user.clone().unwrap_or_default();
    let name = user.username.unwrap_or_default();
    if name != companion_user {
        return Err(Refusal::User(
            crate::untrusted::text(&name, 120),
            companion_user.to_string(),
        ));
    }
    let nodes = user
        .extra
        .as_ref()
        .and_then(|e| e.get(NODE_NAME))
        .cloned()
        .unwrap_or_default();
    match nodes.as_slice() {
        [node] if !node.trim().is_empty() => Ok(node.clone()),
        other => Err(Refusal::Node(other.len())),
    }
}

/// Reviews `token` for [`AUDIENCE`] through the API server.
pub async fn review(client: &kube::Client, token: &str) -> Result<TokenReviewStatus, Refusal> {
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_owned()),
            audiences: Some(vec![AUDIENCE.to_owned()]),
        },
        ..Default::default()
    };
    Api::<TokenReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .map_err(|e| Refusal::Review(e.to_string()))?
        .status
        .ok_or_else(|| Refusal::Review("the API server answered without a status".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::authentication::v1::UserInfo;
    use std::collections::BTreeMap;

    const SA: &str = "system:serviceaccount:nodefence:nodefence-companion";

    fn status(audiences: &[&str], user: &str, nodes: &[&str]) -> TokenReviewStatus {
        let mut extra = BTreeMap::new();
        extra.insert(
            NODE_NAME.to_string(),
            nodes.iter().map(|n| n.to_string()).collect(),
        );
        TokenReviewStatus {
            authenticated: Some(true),
            audiences: Some(audiences.iter().map(|a| a.to_string()).collect()),
            error: None,
            user: Some(UserInfo {
                username: Some(user.into()),
                extra: Some(extra),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn only_the_companions_token_for_its_audience_and_one_node_binds() {
        assert_eq!(
            bind(&status(&[AUDIENCE], SA, &["worker-1"]), SA),
            Ok("worker-1".into())
        );
        assert!(matches!(
            bind(
                &status(&["https://kubernetes.default.svc"], SA, &["worker-1"]),
                SA
            ),
            Err(Refusal::Audience(_))
        ));
        assert!(matches!(
            bind(
                &status(&[AUDIENCE], "system:serviceaccount:default:default", &["w"]),
                SA
            ),
            Err(Refusal::User(..))
        ));
        assert_eq!(
            bind(&status(&[AUDIENCE], SA, &[]), SA),
            Err(Refusal::Node(0))
        );
        assert_eq!(
            bind(&status(&[AUDIENCE], SA, &["a", "b"]), SA),
            Err(Refusal::Node(2))
        );
        let mut no = status(&[AUDIENCE], SA, &["worker-1"]);
        no.authenticated = Some(false);
        no.error = Some("token expired\n".into());
        let e = bind(&no, SA).unwrap_err().to_string();
        assert!(
            e.contains("did not authenticate") && !e.contains('\n'),
            "{e}"
        );
    }

    #[test]
    fn a_hello_body_is_a_companions_or_none_and_anything_else_is_refused() {
        assert_eq!(
            Request::parse(b""),
            Ok(Request::default()),
            "an older companion"
        );
        let r = Request::parse(br#"{"bootId": "b-1", "virtualMachine": true}"#).unwrap();
        assert_eq!(
            (r.boot_id.as_deref(), r.virtual_machine),
            (Some("b-1"), true)
        );
        let e = Request::parse(b"{\"bootId\": 7}\r\nX").unwrap_err();
        assert!(e.contains("not a companion's") && !e.contains('\n'), "{e}");
        assert!(Request::parse(&vec![b'x'; MAX_REQUEST + 1]).is_err());
        // Its public key: 32 bytes of base64, or the hello is refused.
        let key = PublicKey([9; 32]);
        let r = Request::parse(
            format!(
                r#"{{"bootId": "b-1", "publicKey": "{}"}}"#,
                encode_key(&key)
            )
            .as_bytes(),
        )
        .unwrap();
        assert_eq!(r.public_key(), Some(key));
        assert_eq!(
            Request::parse(br#"{"bootId": "b-1"}"#)
                .unwrap()
                .public_key(),
            None
        );
        let e = Request::parse(br#"{"publicKey": "c2hvcnQ="}"#).unwrap_err();
        assert!(e.contains("public key"), "{e}");
    }

    /// A companion or a replica older than the credentials: each reads the other's
    /// JSON (the fields they do not know are absent, or ignored).
    #[test]
    fn a_session_without_credentials_still_reads() {
        let old = r#"{"node":"worker-1","session":"7","key":"a2V5","heartbeat_port":9440,
            "heartbeat_interval_ms":500,"isolation_timeout_ms":2000,"peer_key":"a2V5"}"#;
        let s: Session = serde_json::from_str(old).unwrap();
        assert_eq!((s.authority_key, s.credential), (None, None));
    }

    #[test]
    fn a_refusal_names_a_few_audiences_escaped_and_cut_and_fits_an_event_note() {
        let long = "a".repeat(5_000);
        let forged = "api\r\nFAKE: worker-1 bound";
        let many = [forged, long.as_str(), "b", "c", "d"];
        let e = bind(&status(&many, SA, &["worker-1"]), SA)
            .unwrap_err()
            .to_string();
        assert!(e.contains(r"api\r\nFAKE"), "{e}");
        assert!(!e.contains('\n') && !e.contains('\r'), "{e}");
        assert!(e.contains("\"b\", 2 more"), "{e}");
        assert!(!e.contains(&"a".repeat(41)), "{e}");
        assert!(
            e.len() <= crate::untrusted::EVENT_NOTE_BYTES,
            "{} bytes",
            e.len()
        );
    }
}
