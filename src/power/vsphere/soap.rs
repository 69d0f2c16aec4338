//! vSphere Web Services (SOAP 1.1, `urn:vim25`) messages: requests written, replies
//! read. No I/O.
//!
//! A request is one operation in a `soapenv:Envelope` body, its `_this` a managed
//! object reference (`<_this type="VirtualMachine">vm-42</_this>`), every value
//! escaped. A reply is trusted only when it is a SOAP envelope whose body holds
//! `<Operation>Response` (the operation asked) or a `soapenv:Fault`; a fault's type
//! is the `xsi:type` of the element inside `detail` (`NotAuthenticated`,
//! `InvalidLogin`, `NoPermission`, `ManagedObjectNotFound`, ...), as govmomi reads
//! it. Anything else (an HTML page, a truncated document) is a protocol error.

use quick_xml::events::{BytesStart, Event};

/// A reply element: local names only, attributes by local name (`xsi:type` is
/// `type`), text with entities resolved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Element {
    pub name: String,
    pub attributes: Vec<(String, String)>,
    pub children: Vec<Element>,
    pub text: String,
}

impl Element {
    pub fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    pub fn children_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> {
        self.children.iter().filter(move |c| c.name == name)
    }

    /// The trimmed text of the first child called `name`.
    pub fn child_text(&self, name: &str) -> Option<&str> {
        self.child(name).map(|c| c.text.trim())
    }

    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A managed object reference: its type and id (`VirtualMachine`, `vm-42`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MoRef {
    pub kind: String,
    pub id: String,
}

impl MoRef {
    pub fn new(kind: &str, id: &str) -> Self {
        Self {
            kind: kind.to_string(),
            id: id.to_string(),
        }
    }

    /// Reads `<x type="T">id</x>`; `None` when the type or id is missing.
    pub fn from_element(e: &Element) -> Option<Self> {
        let kind = e.attribute("type")?.trim();
        let id = e.text.trim();
        (!kind.is_empty() && !id.is_empty()).then(|| Self::new(kind, id))
    }

    /// `<name type="T">id</name>`.
    pub fn to_xml(&self, name: &str) -> String {
        format!(
            r#"<{name} type="{}">{}</{name}>"#,
            escape(&self.kind),
            escape(&self.id)
        )
    }
}

impl std::fmt::Display for MoRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.kind, self.id)
    }
}

/// A SOAP fault from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// The vSphere fault type (`NotAuthenticated`); empty when the fault had no detail.
    pub fault_type: String,
    /// `faultstring`.
    pub message: String,
}

/// What a reply said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// `<Operation>Response`.
    Response(Element),
    Fault(Fault),
}

/// `s` with the XML special characters escaped.
pub fn escape(s: &str) -> String {
    quick_xml::escape::escape(s).into_owned()
}

/// The envelope for one operation: `<op xmlns="urn:vim25">` + `_this` + `params`
/// (already XML, escaped by the caller).
pub fn request(operation: &str, this: &MoRef, params: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?><soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"><soapenv:Body><{operation} xmlns="urn:vim25">{}{params}</{operation}></soapenv:Body></soapenv:Envelope>"#,
        this.to_xml("_this")
    )
}

/// `<name>value</name>`, escaped.
pub fn field(name: &str, value: &str) -> String {
    format!("<{name}>{}</{name}>", escape(value))
}

/// Reads a reply to `operation`.
pub fn answer(body: &str, operation: &str) -> Result<Answer, String> {
    let root = parse(body)?;
    if root.name != "Envelope" {
        return Err(format!(
            "expected a SOAP envelope, got <{}>",
            clip(&root.name)
        ));
    }
    let Some(soap_body) = root.child("Body") else {
        return Err("the SOAP envelope has no Body".into());
    };
    let Some(first) = soap_body.children.first() else {
        return Err("the SOAP body is empty".into());
    };
    if first.name == "Fault" {
        let detail = first.child("detail").and_then(|d| d.children.first());
        let fault_type = detail
            .map(|d| {
                d.attribute("type")
                    .map(|t| t.rsplit(':').next().unwrap_or(t).to_string())
                    .unwrap_or_else(|| d.name.trim_end_matches("Fault").to_string())
            })
            .unwrap_or_default();
        return Ok(Answer::Fault(Fault {
            fault_type: clip(fault_type.trim()),
            message: clip(first.child_text("faultstring").unwrap_or("")),
        }));
    }
    let wanted = format!("{operation}Response");
    if first.name != wanted {
        return Err(format!("expected <{wanted}>, got <{}>", clip(&first.name)));
    }
    Ok(Answer::Response(first.clone()))
}

fn local(name: &[u8]) -> String {
    let full = String::from_utf8_lossy(name);
    match full.rsplit_once(':') {
        Some((_, l)) => l.to_string(),
        None => full.into_owned(),
    }
}

fn open(start: &BytesStart<'_>) -> Result<Element, String> {
    let mut element = Element {
        name: local(start.name().as_ref()),
        ..Element::default()
    };
    for attribute in start.attributes() {
        let attribute = attribute.map_err(|e| format!("malformed XML attribute: {e}"))?;
        let value = attribute
            .normalized_value(quick_xml::XmlVersion::default())
            .map_err(|e| format!("malformed XML attribute value: {e}"))?;
        element
            .attributes
            .push((local(attribute.key.as_ref()), value.into_owned()));
    }
    Ok(element)
}

/// The deepest nesting read: vSphere replies for this subset are about 8 deep.
const MAX_DEPTH: usize = 64;

/// Parses a document into its root element.
pub fn parse(xml: &str) -> Result<Element, String> {
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut stack: Vec<Element> = Vec::new();
    loop {
        let event = reader
            .read_event()
            .map_err(|e| format!("malformed XML: {e}"))?;
        match event {
            Event::Start(start) => {
                if stack.len() >= MAX_DEPTH {
                    return Err("the XML nests too deep".into());
                }
                stack.push(open(&start)?);
            }
            Event::Empty(start) => {
                let element = open(&start)?;
                match stack.last_mut() {
                    Some(parent) => parent.children.push(element),
                    None => return Ok(element),
                }
            }
            Event::End(_) => {
                let Some(done) = stack.pop() else {
                    return Err("malformed XML: unbalanced end tag".into());
                };
                match stack.last_mut() {
                    Some(parent) => parent.children.push(done),
                    None => return Ok(done),
                }
            }
            Event::Text(text) => match stack.last_mut() {
                Some(current) => {
                    let decoded = text
                        .decode()
                        .map_err(|e| format!("malformed XML text: {e}"))?;
                    current.text.push_str(&decoded);
                }
                None if !text.iter().all(u8::is_ascii_whitespace) => {
                    return Err("the reply is not XML (text before the first element)".into());
                }
                None => {}
            },
            Event::CData(data) => {
                if let Some(current) = stack.last_mut() {
                    current
                        .text
                        .push_str(&String::from_utf8_lossy(data.as_ref()));
                }
            }
            Event::GeneralRef(reference) => {
                let resolved = match reference.resolve_char_ref() {
                    Ok(Some(c)) => c.to_string(),
                    _ => match &*reference {
                        b"amp" => "&".into(),
                        b"lt" => "<".into(),
                        b"gt" => ">".into(),
                        b"quot" => "\"".into(),
                        b"apos" => "'".into(),
                        _ => return Err("malformed XML: unknown entity".into()),
                    },
                };
                if let Some(current) = stack.last_mut() {
                    current.text.push_str(&resolved);
                }
            }
            Event::Eof => {
                return Err(if stack.is_empty() {
                    "the reply holds no XML element".into()
                } else {
                    "the XML reply is truncated".into()
                });
            }
            _ => {}
        }
    }
}

/// At most 200 characters of something the server sent.
pub fn clip(s: &str) -> String {
    const MAX: usize = 200;
    match s.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}...", &s[..at]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    const ENVELOPE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<soapenv:Envelope xmlns:soapenc="http://schemas.xmlsoap.org/soap/encoding/" xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"><soapenv:Body>"#;

    fn wrap(inner: &str) -> String {
        format!("{ENVELOPE}{inner}</soapenv:Body></soapenv:Envelope>")
    }

    #[test]
    fn a_request_escapes_every_value() {
        let xml = request(
            "Login",
            &MoRef::new("SessionManager", "SessionManager"),
            &format!("{}{}", field("userName", "a<b"), field("password", "p&\"'")),
        );
        assert!(xml.contains(
            r#"<Login xmlns="urn:vim25"><_this type="SessionManager">SessionManager</_this>"#
        ));
        assert!(xml.contains("<userName>a&lt;b</userName>"), "{xml}");
        assert!(
            xml.contains("<password>p&amp;&quot;&apos;</password>"),
            "{xml}"
        );
        let parsed = parse(&xml).unwrap();
        let login = &parsed.child("Body").unwrap().children[0];
        assert_eq!(login.child_text("password"), Some("p&\"'"));
    }

    #[test]
    fn a_response_is_read_only_for_the_operation_asked() {
        let body = wrap(
            r#"<FindByUuidResponse xmlns="urn:vim25"><returnval type="VirtualMachine">vm-42</returnval></FindByUuidResponse>"#,
        );
        let Answer::Response(r) = answer(&body, "FindByUuid").unwrap() else {
            panic!("a response")
        };
        assert_eq!(
            MoRef::from_element(r.child("returnval").unwrap()),
            Some(MoRef::new("VirtualMachine", "vm-42"))
        );
        assert!(answer(&body, "FindByInventoryPath").is_err());
        let empty = wrap(r#"<FindByUuidResponse xmlns="urn:vim25"></FindByUuidResponse>"#);
        let Answer::Response(r) = answer(&empty, "FindByUuid").unwrap() else {
            panic!("a response")
        };
        assert!(r.child("returnval").is_none());
    }

    #[test]
    fn faults_are_named_by_their_detail_type() {
        let body = wrap(
            r#"<soapenv:Fault><faultcode>ServerFaultCode</faultcode><faultstring>The session is not authenticated.</faultstring><detail><NotAuthenticatedFault xmlns="urn:vim25" xsi:type="NotAuthenticated"><object type="Folder">group-d1</object><privilegeId>System.View</privilegeId></NotAuthenticatedFault></detail></soapenv:Fault>"#,
        );
        assert_eq!(
            answer(&body, "RetrievePropertiesEx").unwrap(),
            Answer::Fault(Fault {
                fault_type: "NotAuthenticated".into(),
                message: "The session is not authenticated.".into()
            })
        );
        let no_type = wrap(
            r#"<soapenv:Fault><faultcode>ServerFaultCode</faultcode><faultstring>bad</faultstring><detail><InvalidLoginFault xmlns="urn:vim25"/></detail></soapenv:Fault>"#,
        );
        let Answer::Fault(f) = answer(&no_type, "Login").unwrap() else {
            panic!("a fault")
        };
        assert_eq!(f.fault_type, "InvalidLogin");
    }

    #[test]
    fn html_truncated_and_foreign_documents_are_refused() {
        for body in [
            "<html><body>503</body></html>",
            "Service Unavailable",
            "",
            &wrap("<LoginResponse xmlns=\"urn:vim25\">")[..200],
            &ENVELOPE.replace("soapenv:Body>", "x>"),
        ] {
            assert!(answer(body, "Login").is_err(), "{body}");
        }
    }
}
