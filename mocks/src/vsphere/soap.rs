//! SOAP 1.1 replies as a vSphere endpoint writes them: the envelope with the
//! `xsd`/`xsi` namespaces, a `<Method>Response xmlns="urn:vim25">` body, and faults
//! as `soapenv:Fault` (`faultcode` ServerFaultCode, `faultstring`, and a `detail`
//! holding `<TypeFault xsi:type="Type">`), sent with HTTP 500, as govmomi's vcsim
//! and real vCenter do.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::xml::escape;

const ENVELOPE_OPEN: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<soapenv:Envelope xmlns:soapenc="http://schemas.xmlsoap.org/soap/encoding/" xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"><soapenv:Body>"#;
const ENVELOPE_CLOSE: &str = "</soapenv:Body></soapenv:Envelope>";

fn xml_response(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/xml; charset=utf-8"),
    );
    response
}

/// `<method>Response>` holding `inner` (already XML), HTTP 200.
pub fn reply(method: &str, inner: &str) -> Response {
    xml_response(
        StatusCode::OK,
        format!(
            r#"{ENVELOPE_OPEN}<{method}Response xmlns="urn:vim25">{inner}</{method}Response>{ENVELOPE_CLOSE}"#
        ),
    )
}

/// A managed object reference element: `<name type="Type">id</name>`.
pub fn moref(name: &str, kind: &str, id: &str) -> String {
    format!(r#"<{name} type="{}">{}</{name}>"#, escape(kind), escape(id))
}

/// A `soapenv:Fault` of `fault_type` (`NotAuthenticated`, `InvalidLogin`, ...) with
/// `fields` (already XML) inside its detail element, HTTP 500.
pub fn fault(fault_type: &str, message: &str, fields: &str) -> Response {
    xml_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!(
            r#"{ENVELOPE_OPEN}<soapenv:Fault><faultcode>ServerFaultCode</faultcode><faultstring>{}</faultstring><detail><{fault_type}Fault xmlns="urn:vim25" xsi:type="{fault_type}">{fields}</{fault_type}Fault></detail></soapenv:Fault>{ENVELOPE_CLOSE}"#,
            escape(message)
        ),
    )
}

/// What vSphere answers for a method its WSDL does not have (a method of a later
/// release): `InvalidRequest`, the method named only in the `faultstring`.
pub fn unresolved_method(method: &str) -> Response {
    fault(
        "InvalidRequest",
        &format!(
            "Unable to resolve WSDL method name {method} for namespace name urn:vim25\n\n\
             while parsing SOAP body\nat line 1, column 271\n\nwhile parsing SOAP envelope\n\
             at line 1, column 38\n\nwhile parsing HTTP request before method was determined\n\
             at line 1, column 0"
        ),
        "",
    )
}

/// A client error vSphere reports as a plain SOAP fault without detail (a body that
/// is not a SOAP request).
pub fn client_fault(message: &str) -> Response {
    xml_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!(
            r#"{ENVELOPE_OPEN}<soapenv:Fault><faultcode>ClientFaultCode</faultcode><faultstring>{}</faultstring></soapenv:Fault>{ENVELOPE_CLOSE}"#,
            escape(message)
        ),
    )
}

/// `NotAuthenticated` for a call without a live session.
pub fn not_authenticated(root_folder: &str) -> Response {
    fault(
        "NotAuthenticated",
        "The session is not authenticated.",
        &format!(
            "{}<privilegeId>System.View</privilegeId>",
            moref("object", "Folder", root_folder)
        ),
    )
}

/// `ManagedObjectNotFound` for a reference to an object that does not exist.
pub fn managed_object_not_found(kind: &str, id: &str) -> Response {
    fault(
        "ManagedObjectNotFound",
        &format!(
            "The object 'vim.{kind}:{id}' has already been deleted or has not been completely created"
        ),
        &moref("obj", kind, id),
    )
}

/// The page a load balancer answers with when the vCenter behind it is down.
pub fn unavailable() -> Response {
    let mut response = (
        StatusCode::SERVICE_UNAVAILABLE,
        "<html><body><h1>503 Service Unavailable</h1></body></html>",
    )
        .into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html"));
    response
}
