//! A small element tree read from a SOAP request with quick-xml: local names only
//! (the vSphere API puts everything in `urn:vim25`), attributes by local name
//! (`xsi:type` is `type`), text with entities resolved.

use quick_xml::events::Event;

/// One element of a request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Element {
    pub name: String,
    pub attributes: Vec<(String, String)>,
    pub children: Vec<Element>,
    pub text: String,
}

impl Element {
    /// The first child called `name`.
    pub fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    /// Every child called `name`.
    pub fn children_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> {
        self.children.iter().filter(move |c| c.name == name)
    }

    /// The trimmed text of the first child called `name`.
    pub fn child_text(&self, name: &str) -> Option<&str> {
        self.child(name).map(|c| c.text.trim())
    }

    /// The value of the attribute with local name `name`.
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

fn local(name: &[u8]) -> String {
    let full = String::from_utf8_lossy(name);
    match full.rsplit_once(':') {
        Some((_, l)) => l.to_string(),
        None => full.into_owned(),
    }
}

fn open(start: &quick_xml::events::BytesStart<'_>) -> Result<Element, String> {
    let mut element = Element {
        name: local(start.name().as_ref()),
        ..Element::default()
    };
    for attribute in start.attributes() {
        let attribute = attribute.map_err(|e| format!("bad attribute: {e}"))?;
        let value = attribute
            .normalized_value(quick_xml::XmlVersion::default())
            .map_err(|e| format!("bad attribute value: {e}"))?;
        element
            .attributes
            .push((local(attribute.key.as_ref()), value.into_owned()));
    }
    Ok(element)
}

/// Parses a whole document into its root element.
pub fn parse(xml: &str) -> Result<Element, String> {
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut stack: Vec<Element> = Vec::new();
    loop {
        match reader.read_event() {
            Ok(Event::Start(start)) => stack.push(open(&start)?),
            Ok(Event::Empty(start)) => {
                let element = open(&start)?;
                match stack.last_mut() {
                    Some(parent) => parent.children.push(element),
                    None => return Ok(element),
                }
            }
            Ok(Event::End(_)) => {
                let Some(done) = stack.pop() else {
                    return Err("unbalanced end tag".into());
                };
                match stack.last_mut() {
                    Some(parent) => parent.children.push(done),
                    None => return Ok(done),
                }
            }
            Ok(Event::Text(text)) => {
                if let Some(current) = stack.last_mut() {
                    let decoded = text.decode().map_err(|e| format!("bad text: {e}"))?;
                    current.text.push_str(&decoded);
                }
            }
            Ok(Event::CData(data)) => {
                if let Some(current) = stack.last_mut() {
                    current
                        .text
                        .push_str(&String::from_utf8_lossy(data.as_ref()));
                }
            }
            Ok(Event::GeneralRef(reference)) => {
                let resolved = match reference.resolve_char_ref() {
                    Ok(Some(c)) => c.to_string(),
                    _ => match &*reference {
                        b"amp" => "&".into(),
                        b"lt" => "<".into(),
                        b"gt" => ">".into(),
                        b"quot" => "\"".into(),
                        b"apos" => "'".into(),
                        other => {
                            return Err(format!(
                                "unknown entity &{};",
                                String::from_utf8_lossy(other)
                            ));
                        }
                    },
                };
                if let Some(current) = stack.last_mut() {
                    current.text.push_str(&resolved);
                }
            }
            Ok(Event::Eof) => return Err("the document ends before its root element closes".into()),
            Ok(_) => {}
            Err(e) => return Err(format!("malformed XML: {e}")),
        }
    }
}

/// `s` with the five XML special characters escaped, for text and attribute values.
pub fn escape(s: &str) -> String {
    quick_xml::escape::escape(s).into_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn reads_local_names_attributes_and_entities() {
        let doc = r#"<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"><soapenv:Body><Login xmlns="urn:vim25"><_this type="SessionManager">SessionManager</_this><userName>a&amp;b</userName><password>&#65;&lt;</password></Login></soapenv:Body></soapenv:Envelope>"#;
        let root = parse(doc).unwrap();
        assert_eq!(root.name, "Envelope");
        let login = &root.child("Body").unwrap().children[0];
        assert_eq!(login.name, "Login");
        assert_eq!(
            login.child("_this").unwrap().attribute("type"),
            Some("SessionManager")
        );
        assert_eq!(login.child_text("userName"), Some("a&b"));
        assert_eq!(login.child_text("password"), Some("A<"));
        assert!(parse("<a><b></a>").is_err());
        assert!(parse("<a>").is_err());
    }
}
