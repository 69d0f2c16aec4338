//! `GET /sdk/vimService.wsdl`: a WSDL for the operations this mock serves, so that
//! SOAP clients that build their calls from the WSDL (suds, as Debian's
//! `fence_vmware_soap` uses it) can talk to the mock. Names, element order and types
//! follow the vSphere API's own `vim.wsdl`/`vim-types.xsd` (namespace `urn:vim25`,
//! document/literal, `ManagedObjectReference` as a string with a `type` attribute,
//! `TraversalSpec` extending `SelectionSpec`), reduced to this subset.

/// The operations described, with their request fields (already XSD).
const OPERATIONS: &[(&str, &str, &str)] = &[
    ("RetrieveServiceContent", "", "vim25:ServiceContent"),
    (
        "Login",
        r#"<xsd:element name="userName" type="xsd:string"/><xsd:element name="password" type="xsd:string"/><xsd:element name="locale" type="xsd:string" minOccurs="0"/>"#,
        "vim25:UserSession",
    ),
    ("Logout", "", ""),
    (
        "CreateContainerView",
        r#"<xsd:element name="container" type="vim25:ManagedObjectReference"/><xsd:element name="type" type="xsd:string" minOccurs="0" maxOccurs="unbounded"/><xsd:element name="recursive" type="xsd:boolean"/>"#,
        "vim25:ManagedObjectReference",
    ),
    (
        "RetrievePropertiesEx",
        r#"<xsd:element name="specSet" type="vim25:PropertyFilterSpec" maxOccurs="unbounded"/><xsd:element name="options" type="vim25:RetrieveOptions" minOccurs="0"/>"#,
        "vim25:RetrieveResult",
    ),
    (
        "FindByUuid",
        r#"<xsd:element name="datacenter" type="vim25:ManagedObjectReference" minOccurs="0"/><xsd:element name="uuid" type="xsd:string"/><xsd:element name="vmSearch" type="xsd:boolean"/><xsd:element name="instanceUuid" type="xsd:boolean" minOccurs="0"/>"#,
        "vim25:ManagedObjectReference",
    ),
    (
        "FindByInventoryPath",
        r#"<xsd:element name="inventoryPath" type="xsd:string"/>"#,
        "vim25:ManagedObjectReference",
    ),
    ("PowerOffVM_Task", "", "vim25:ManagedObjectReference"),
    (
        "PowerOnVM_Task",
        r#"<xsd:element name="host" type="vim25:ManagedObjectReference" minOccurs="0"/>"#,
        "vim25:ManagedObjectReference",
    ),
];

const TYPES: &str = r#"
<xsd:complexType name="ManagedObjectReference"><xsd:simpleContent><xsd:extension base="xsd:string"><xsd:attribute name="type" type="xsd:string"/></xsd:extension></xsd:simpleContent></xsd:complexType>
<xsd:complexType name="AboutInfo"><xsd:sequence>
 <xsd:element name="name" type="xsd:string" minOccurs="0"/><xsd:element name="fullName" type="xsd:string" minOccurs="0"/><xsd:element name="vendor" type="xsd:string" minOccurs="0"/><xsd:element name="version" type="xsd:string" minOccurs="0"/><xsd:element name="osType" type="xsd:string" minOccurs="0"/><xsd:element name="apiType" type="xsd:string" minOccurs="0"/><xsd:element name="apiVersion" type="xsd:string" minOccurs="0"/>
</xsd:sequence></xsd:complexType>
<xsd:complexType name="ServiceContent"><xsd:sequence>
 <xsd:element name="rootFolder" type="vim25:ManagedObjectReference"/><xsd:element name="propertyCollector" type="vim25:ManagedObjectReference"/><xsd:element name="viewManager" type="vim25:ManagedObjectReference" minOccurs="0"/><xsd:element name="about" type="vim25:AboutInfo"/><xsd:element name="sessionManager" type="vim25:ManagedObjectReference" minOccurs="0"/><xsd:element name="searchIndex" type="vim25:ManagedObjectReference" minOccurs="0"/>
</xsd:sequence></xsd:complexType>
<xsd:complexType name="UserSession"><xsd:sequence>
 <xsd:element name="key" type="xsd:string"/><xsd:element name="userName" type="xsd:string"/><xsd:element name="fullName" type="xsd:string"/><xsd:element name="loginTime" type="xsd:string"/><xsd:element name="lastActiveTime" type="xsd:string"/><xsd:element name="locale" type="xsd:string"/><xsd:element name="messageLocale" type="xsd:string"/><xsd:element name="extensionSession" type="xsd:boolean" minOccurs="0"/>
</xsd:sequence></xsd:complexType>
<xsd:complexType name="SelectionSpec"><xsd:sequence><xsd:element name="name" type="xsd:string" minOccurs="0"/></xsd:sequence></xsd:complexType>
<xsd:complexType name="TraversalSpec"><xsd:complexContent><xsd:extension base="vim25:SelectionSpec"><xsd:sequence>
 <xsd:element name="type" type="xsd:string"/><xsd:element name="path" type="xsd:string"/><xsd:element name="skip" type="xsd:boolean" minOccurs="0"/><xsd:element name="selectSet" type="vim25:SelectionSpec" minOccurs="0" maxOccurs="unbounded"/>
</xsd:sequence></xsd:extension></xsd:complexContent></xsd:complexType>
<xsd:complexType name="ObjectSpec"><xsd:sequence>
 <xsd:element name="obj" type="vim25:ManagedObjectReference"/><xsd:element name="skip" type="xsd:boolean" minOccurs="0"/><xsd:element name="selectSet" type="vim25:SelectionSpec" minOccurs="0" maxOccurs="unbounded"/>
</xsd:sequence></xsd:complexType>
<xsd:complexType name="PropertySpec"><xsd:sequence>
 <xsd:element name="type" type="xsd:string"/><xsd:element name="all" type="xsd:boolean" minOccurs="0"/><xsd:element name="pathSet" type="xsd:string" minOccurs="0" maxOccurs="unbounded"/>
</xsd:sequence></xsd:complexType>
<xsd:complexType name="PropertyFilterSpec"><xsd:sequence>
 <xsd:element name="propSet" type="vim25:PropertySpec" maxOccurs="unbounded"/><xsd:element name="objectSet" type="vim25:ObjectSpec" maxOccurs="unbounded"/><xsd:element name="reportMissingObjectsInResults" type="xsd:boolean" minOccurs="0"/>
</xsd:sequence></xsd:complexType>
<xsd:complexType name="RetrieveOptions"><xsd:sequence><xsd:element name="maxObjects" type="xsd:int" minOccurs="0"/></xsd:sequence></xsd:complexType>
<xsd:complexType name="DynamicProperty"><xsd:sequence><xsd:element name="name" type="xsd:string"/><xsd:element name="val" type="xsd:anyType"/></xsd:sequence></xsd:complexType>
<xsd:complexType name="ObjectContent"><xsd:sequence>
 <xsd:element name="obj" type="vim25:ManagedObjectReference"/><xsd:element name="propSet" type="vim25:DynamicProperty" minOccurs="0" maxOccurs="unbounded"/>
</xsd:sequence></xsd:complexType>
<xsd:complexType name="RetrieveResult"><xsd:sequence>
 <xsd:element name="token" type="xsd:string" minOccurs="0"/><xsd:element name="objects" type="vim25:ObjectContent" maxOccurs="unbounded"/>
</xsd:sequence></xsd:complexType>
<xsd:simpleType name="VirtualMachinePowerState"><xsd:restriction base="xsd:string"><xsd:enumeration value="poweredOff"/><xsd:enumeration value="poweredOn"/><xsd:enumeration value="suspended"/></xsd:restriction></xsd:simpleType>
<xsd:simpleType name="TaskInfoState"><xsd:restriction base="xsd:string"><xsd:enumeration value="queued"/><xsd:enumeration value="running"/><xsd:enumeration value="success"/><xsd:enumeration value="error"/></xsd:restriction></xsd:simpleType>
"#;

/// The WSDL document.
pub fn document() -> String {
    let mut elements = String::new();
    let mut messages = String::new();
    let mut port_ops = String::new();
    let mut binding_ops = String::new();
    for (op, fields, returns) in OPERATIONS {
        let returnval = if returns.is_empty() {
            String::new()
        } else {
            format!(r#"<xsd:element name="returnval" type="{returns}" minOccurs="0"/>"#)
        };
        elements.push_str(&format!(
            r#"<xsd:complexType name="{op}RequestType"><xsd:sequence><xsd:element name="_this" type="vim25:ManagedObjectReference"/>{fields}</xsd:sequence></xsd:complexType>
<xsd:element name="{op}" type="vim25:{op}RequestType"/>
<xsd:element name="{op}Response"><xsd:complexType><xsd:sequence>{returnval}</xsd:sequence></xsd:complexType></xsd:element>
"#
        ));
        messages.push_str(&format!(
            r#"<message name="{op}RequestMsg"><part name="parameters" element="vim25:{op}"/></message>
<message name="{op}ResponseMsg"><part name="parameters" element="vim25:{op}Response"/></message>
"#
        ));
        port_ops.push_str(&format!(
            r#"<operation name="{op}"><input message="vim25:{op}RequestMsg"/><output message="vim25:{op}ResponseMsg"/></operation>
"#
        ));
        binding_ops.push_str(&format!(
            r#"<operation name="{op}"><soap:operation soapAction="urn:vim25/8.0.2.0"/><input><soap:body use="literal"/></input><output><soap:body use="literal"/></output></operation>
"#
        ));
    }
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions targetNamespace="urn:vim25" xmlns="http://schemas.xmlsoap.org/wsdl/" xmlns:soap="http://schemas.xmlsoap.org/wsdl/soap/" xmlns:vim25="urn:vim25" xmlns:xsd="http://www.w3.org/2001/XMLSchema">
<types><xsd:schema targetNamespace="urn:vim25" xmlns="urn:vim25" elementFormDefault="qualified">
{TYPES}
{elements}
</xsd:schema></types>
{messages}
<portType name="VimPortType">
{port_ops}</portType>
<binding name="VimBinding" type="vim25:VimPortType"><soap:binding style="document" transport="http://schemas.xmlsoap.org/soap/http"/>
{binding_ops}</binding>
<service name="VimService"><port binding="vim25:VimBinding" name="VimPort"><soap:address location="https://localhost/sdk"/></port></service>
</definitions>
"#
    )
}
