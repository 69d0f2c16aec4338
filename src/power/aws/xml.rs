//! Reading EC2's Query API answers (XML).
//!
//! Only what the driver needs is read: each instance's id, state name and zone from
//! `DescribeInstances`, and `Code`/`Message` from an error reply. A reply is trusted
//! only when its root element is the one the action answers with and the instance
//! list is present: a proxy's HTML page, an empty body or a truncated document is a
//! protocol error, never an empty (and so "instance gone") list.

use quick_xml::events::Event;
use serde::Deserialize;

/// Why a reply could not be read: a message for a protocol error.
pub type XmlError = String;

/// One instance as `DescribeInstances` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceInfo {
    pub id: String,
    /// `instanceState.name` (`running`, `stopped`, ...); empty when absent.
    pub state: String,
}

/// A `DescribeInstances` page.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribePage {
    pub instances: Vec<InstanceInfo>,
    pub next_token: Option<String>,
}

/// An EC2 error reply.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApiError {
    pub code: String,
    pub message: String,
}

#[derive(Deserialize)]
struct ItemList<T> {
    #[serde(rename = "item", default = "Vec::new")]
    items: Vec<T>,
}

#[derive(Deserialize)]
struct DescribeInstancesResponse {
    #[serde(rename = "reservationSet")]
    reservation_set: Option<ItemList<Reservation>>,
    #[serde(rename = "nextToken")]
    next_token: Option<String>,
}

#[derive(Deserialize)]
struct Reservation {
    #[serde(rename = "instancesSet")]
    instances_set: Option<ItemList<Instance>>,
}

#[derive(Deserialize)]
struct Instance {
    #[serde(rename = "instanceId")]
    instance_id: Option<String>,
    #[serde(rename = "instanceState")]
    instance_state: Option<InstanceState>,
}

#[derive(Deserialize)]
struct InstanceState {
    name: Option<String>,
}

#[derive(Deserialize)]
struct StateChangeResponse {
    #[serde(rename = "instancesSet")]
    instances_set: Option<ItemList<StateChange>>,
}

#[derive(Deserialize)]
struct StateChange {
    #[serde(rename = "instanceId")]
    instance_id: Option<String>,
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(rename = "Code")]
    code: Option<String>,
    #[serde(rename = "Message")]
    message: Option<String>,
}

#[derive(Deserialize)]
struct ErrorList {
    #[serde(rename = "Error", default = "Vec::new")]
    errors: Vec<ErrorBody>,
}

/// `<Response><Errors><Error>` (EC2) or `<ErrorResponse><Error>` (STS-style).
#[derive(Deserialize)]
struct ErrorReply {
    #[serde(rename = "Errors")]
    errors: Option<ErrorList>,
    #[serde(rename = "Error")]
    error: Option<ErrorBody>,
}

/// The local name of the document's root element.
pub fn root_name(xml: &str) -> Result<String, XmlError> {
    let mut reader = quick_xml::Reader::from_str(xml);
    loop {
        match reader.read_event() {
            Ok(Event::Start(e) | Event::Empty(e)) => {
                return Ok(String::from_utf8_lossy(e.local_name().as_ref()).into_owned());
            }
            Ok(Event::Eof) => return Err("the reply holds no XML element".into()),
            Ok(Event::Text(t)) if !t.iter().all(u8::is_ascii_whitespace) => {
                return Err("the reply is not XML (text before the first element)".into());
            }
            Ok(_) => {}
            Err(e) => return Err(format!("malformed XML: {e}")),
        }
    }
}

fn expect_root(xml: &str, want: &str) -> Result<(), XmlError> {
    let root = root_name(xml)?;
    if root != want {
        return Err(format!(
            "expected a <{want}> document, got <{}>",
            clip(&root)
        ));
    }
    Ok(())
}

/// Parses a `DescribeInstancesResponse`. An absent `reservationSet` is an error: EC2
/// always sends it (empty when nothing matched).
pub fn describe_instances(xml: &str) -> Result<DescribePage, XmlError> {
    expect_root(xml, "DescribeInstancesResponse")?;
    let reply: DescribeInstancesResponse =
        quick_xml::de::from_str(xml).map_err(|e| format!("malformed XML: {e}"))?;
    let Some(reservations) = reply.reservation_set else {
        return Err("the DescribeInstancesResponse has no reservationSet".into());
    };
    let mut instances = Vec::new();
    for reservation in reservations.items {
        for instance in reservation
            .instances_set
            .map(|s| s.items)
            .unwrap_or_default()
        {
            let Some(id) = instance.instance_id.filter(|i| !i.trim().is_empty()) else {
                return Err("an instance in the reply has no instanceId".into());
            };
            instances.push(InstanceInfo {
                id: id.trim().to_string(),
                state: instance
                    .instance_state
                    .and_then(|s| s.name)
                    .map(|n| n.trim().to_string())
                    .unwrap_or_default(),
            });
        }
    }
    Ok(DescribePage {
        instances,
        next_token: reply.next_token.filter(|t| !t.trim().is_empty()),
    })
}

/// Checks a `StopInstancesResponse`/`StartInstancesResponse` (`root`) names `id`.
pub fn state_change(xml: &str, root: &str, id: &str) -> Result<(), XmlError> {
    expect_root(xml, root)?;
    let reply: StateChangeResponse =
        quick_xml::de::from_str(xml).map_err(|e| format!("malformed XML: {e}"))?;
    let listed = reply
        .instances_set
        .map(|s| s.items)
        .unwrap_or_default()
        .into_iter()
        .any(|c| c.instance_id.as_deref().map(str::trim) == Some(id));
    if listed {
        Ok(())
    } else {
        Err(format!("the {root} does not list instance {id}"))
    }
}

/// Reads an error reply's first `Code` and `Message`; `None` when the body is not an
/// EC2/STS error document.
pub fn api_error(xml: &str) -> Option<ApiError> {
    let root = root_name(xml).ok()?;
    if root != "Response" && root != "ErrorResponse" {
        return None;
    }
    let reply: ErrorReply = quick_xml::de::from_str(xml).ok()?;
    let first = reply
        .errors
        .and_then(|l| l.errors.into_iter().next())
        .or(reply.error)?;
    Some(ApiError {
        code: clip(first.code.as_deref().unwrap_or("").trim()),
        message: clip(first.message.as_deref().unwrap_or("").trim()),
    })
}

/// At most 200 characters of something the server sent, for a message.
pub fn clip(s: &str) -> String {
    const MAX: usize = 200;
    match s.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}...", &s[..at]),
        None => s.to_string(),
    }
}
