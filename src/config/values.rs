//! What a single value means, on its own: the checks `Layer` runs as it reads.
//!
//! Each function takes one `key = value` entry and returns the typed value or a
//! [`Problem`] naming the key, what is accepted, and an example. None of them repeats
//! a value that could be a secret.

use std::collections::BTreeMap;

use super::endpoint::check_placeholders;
use super::fields::{Entry, Problem, Val, closest};
use super::layer::{Driver, SecretName};
use super::model::{IpmiPrivilege, RedfishAuth};

/// IPMI v2.0 cipher suites nodefence accepts (both HMAC-SHA1 + AES-CBC-128 or better).
pub(crate) const CIPHER_SUITES: [u8; 2] = [3, 17];

pub(crate) fn narrow<T: TryFrom<i64> + Default>(v: Val<i64>) -> Val<T> {
    v.with(T::try_from(v.value).unwrap_or_default())
}

pub(crate) fn driver(e: &Entry<'_, '_>) -> Result<Val<Driver>, Problem> {
    let v = e.string()?;
    match Driver::parse(&v.value) {
        Some(d) => Ok(v.with(d)),
        None => {
            let hint = closest(&v.value, &Driver::NAMES)
                .map(|c| format!("did you mean \"{c}\"? "))
                .unwrap_or_default();
            Err(Problem::new(
                &v.span,
                format!("unknown driver \"{}\"", v.value),
                Some(format!("{hint}drivers: {}", Driver::NAMES.join(", "))),
            ))
        }
    }
}

pub(crate) fn auth(e: &Entry<'_, '_>) -> Result<Val<RedfishAuth>, Problem> {
    let v = e.string()?;
    let auth = match v.value.as_str() {
        "auto" => RedfishAuth::Auto,
        "session" => RedfishAuth::Session,
        "basic" => RedfishAuth::Basic,
        _ => {
            return Err(Problem::new(
                &v.span,
                "`auth` must be \"auto\", \"session\" or \"basic\"",
                Some("\"auto\" (the default) tries a Redfish session, then HTTP Basic".into()),
            ));
        }
    };
    Ok(v.with(auth))
}

pub(crate) fn cipher_suite(e: &Entry<'_, '_>) -> Result<Val<u8>, Problem> {
    let v = e.integer(0, 255, 17)?;
    if !CIPHER_SUITES.iter().any(|c| i64::from(*c) == v.value) {
        return Err(Problem::new(
            &v.span,
            format!("IPMI cipher suite {} is not supported", v.value),
            Some(
                "nodefence supports cipher suites 3 and 17 (authenticated, integrity-protected \
                 and encrypted); 17 is preferred where the BMC offers it"
                    .into(),
            ),
        ));
    }
    Ok(narrow(v))
}

pub(crate) fn ipmi_privilege(e: &Entry<'_, '_>) -> Result<Val<IpmiPrivilege>, Problem> {
    let v = e.string()?;
    let level = match v.value.to_ascii_lowercase().as_str() {
        "operator" => IpmiPrivilege::Operator,
        "administrator" | "admin" => IpmiPrivilege::Administrator,
        _ => {
            return Err(Problem::new(
                &v.span,
                format!("`privilege` must be \"operator\" or \"administrator\", not {:?}", v.value),
                Some(
                    "power control needs OPERATOR; \"administrator\" is the default, as in ipmitool"
                        .into(),
                ),
            ));
        }
    };
    Ok(v.with(level))
}

pub(crate) fn system_id(e: &Entry<'_, '_>) -> Result<Val<String>, Problem> {
    let v = e.non_empty_string()?;
    if v.value.contains('/') || v.value.chars().any(char::is_whitespace) {
        return Err(Problem::new(
            &v.span,
            "`system_id` must be the system's Id, not a path",
            Some("e.g. system_id = \"System.Embedded.1\" (the last segment of /redfish/v1/Systems/<Id>)".into()),
        ));
    }
    Ok(v)
}

pub(crate) fn instance_id(e: &Entry<'_, '_>) -> Result<Val<String>, Problem> {
    let v = e.non_empty_string()?;
    let hex = v.value.strip_prefix("i-").unwrap_or("");
    let ok = matches!(hex.len(), 8 | 17) && hex.chars().all(|c| c.is_ascii_hexdigit());
    if !ok {
        return Err(Problem::new(
            &v.span,
            "`instance_id` is not an EC2 instance id",
            Some("e.g. instance_id = \"i-0123456789abcdef0\"; or leave it out to use the Node's providerID".into()),
        ));
    }
    Ok(v)
}

/// `instance_tag = { key = "Name", value = "{node}" }`: the EC2 tag to find the
/// instance by.
pub(crate) fn instance_tag(e: &Entry<'_, '_>) -> Result<Val<(String, String)>, Problem> {
    let table = e.table()?;
    let (mut key, mut value) = (None, None);
    for field in Entry::all(table) {
        match field.name {
            "key" => key = Some(field.non_empty_string()?),
            "value" => {
                let v = field.string()?;
                check_placeholders("instance_tag", &v.value, &v.span)?;
                value = Some(v);
            }
            other => {
                return Err(Problem::new(
                    &field.key,
                    format!("unknown key `{other}` in `instance_tag`"),
                    Some("instance_tag = { key = \"Name\", value = \"{node}\" }".into()),
                ));
            }
        }
    }
    match (key, value) {
        (Some(k), Some(v)) => Ok(Val::new((k.value, v.value), e.key.clone(), e.value.span())),
        _ => Err(Problem::new(
            &e.key,
            "`instance_tag` needs both `key` and `value`",
            Some("instance_tag = { key = \"Name\", value = \"{node}\" }".into()),
        )),
    }
}

pub(crate) fn region(e: &Entry<'_, '_>) -> Result<Val<String>, Problem> {
    let v = e.non_empty_string()?;
    let ok = v.value.contains('-')
        && v.value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !ok {
        return Err(Problem::new(
            &v.span,
            "`region` is not an AWS region name",
            Some("e.g. region = \"eu-central-1\"".into()),
        ));
    }
    Ok(v)
}

/// `tls_fingerprint = "sha256:AB:CD:..."`: a BMC's own certificate, pinned.
pub(crate) fn tls_fingerprint(
    e: &Entry<'_, '_>,
) -> Result<Val<crate::tls::CertFingerprint>, Problem> {
    let v = e.non_empty_string()?;
    match v.value.parse::<crate::tls::CertFingerprint>() {
        Ok(fp) => Ok(v.with(fp)),
        Err(err) => Err(Problem::new(
            &v.span,
            format!("`tls_fingerprint`: {}", err.message),
            Some(err.help),
        )),
    }
}

/// Option names that would carry a password in clear text.
const SECRET_OPTIONS: &[&str] = &[
    "password",
    "passwd",
    "pass",
    "password-script",
    "passwd-script",
];

pub(crate) fn options(e: &Entry<'_, '_>) -> Result<Val<BTreeMap<String, Val<String>>>, Problem> {
    let table = e.table()?;
    let mut out = BTreeMap::new();
    for opt in Entry::all(table) {
        let norm = opt.name.to_ascii_lowercase().replace('_', "-");
        if SECRET_OPTIONS.contains(&norm.as_str()) {
            return Err(Problem::new(
                &opt.key,
                format!(
                    "fence agent option `{}` would hold a password in the inventory",
                    opt.name
                ),
                Some(
                    "set password_file or password_env instead; nodefence passes the password \
                     to the agent itself"
                        .into(),
                ),
            ));
        }
        let v = opt.string()?;
        check_placeholders("options", &v.value, &v.span)?;
        if let Some(why) = crate::power::exec::option_problem(opt.name, &v.value) {
            return Err(Problem::new(&v.span, why, None));
        }
        out.insert(opt.name.to_string(), v);
    }
    Ok(Val::new(out, e.key.clone(), e.value.span()))
}

pub(crate) fn check_env_name(v: &Val<String>) -> Result<(), Problem> {
    let name = v.value.as_str();
    let valid = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if valid {
        return Ok(());
    }
    // Never repeat the value: someone may have put the password itself here.
    let help = if name.starts_with('$') {
        "write the variable's name without `$`, e.g. password_env = \"BMC_PASSWORD\""
    } else {
        "give the name of an environment variable (letters, digits, `_`), not the password"
    };
    Err(Problem::new(
        &v.span,
        "`password_env` is not an environment variable name",
        Some(help.into()),
    ))
}

/// Kubernetes' limit for a DNS label (a namespace name).
const MAX_LABEL: usize = 63;
/// Kubernetes' limit for a DNS subdomain (a Secret name) and for a Secret's key.
const MAX_SUBDOMAIN: usize = 253;

/// True for an RFC 1123 label: lowercase letters, digits and `-`, starting and ending
/// with a letter or digit.
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_LABEL
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// True for an RFC 1123 subdomain: labels joined by `.`, at most 253 characters.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= MAX_SUBDOMAIN && s.split('.').all(is_dns_label)
}

/// `password_secret = "<namespace>/<name>"` or `"<name>"` (nodefence's namespace).
/// Never repeats the value: someone may have put the password itself here.
pub(crate) fn secret_name(e: &Entry<'_, '_>) -> Result<Val<SecretName>, Problem> {
    let v = e.non_empty_string()?;
    let text = v.value.trim();
    let (namespace, name) = match text.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, text),
    };
    let help = Some(
        "write the Secret as password_secret = \"<namespace>/<name>\", or a bare \"<name>\" for \
         a Secret in nodefence's own namespace (lowercase letters, digits, '-' and '.')"
            .to_string(),
    );
    if let Some(ns) = namespace
        && !is_dns_label(ns)
    {
        return Err(Problem::new(
            &v.span,
            "`password_secret` does not start with a valid namespace name",
            help,
        ));
    }
    if !is_dns_subdomain(name) {
        return Err(Problem::new(
            &v.span,
            "`password_secret` is not the name of a Kubernetes Secret",
            help,
        ));
    }
    Ok(v.with(SecretName {
        namespace: namespace.map(str::to_string),
        name: name.to_string(),
    }))
}

/// `password_secret_key` / `username_secret_key`: a key of a Secret's `data`.
pub(crate) fn secret_key(e: &Entry<'_, '_>) -> Result<Val<String>, Problem> {
    let v = e.non_empty_string()?;
    let valid = v.value.len() <= MAX_SUBDOMAIN
        && v.value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && v.value != "."
        && v.value != "..";
    if !valid {
        return Err(Problem::new(
            &v.span,
            format!("`{}` is not a valid key of a Kubernetes Secret", e.name),
            Some(
                "Secret keys consist of letters, digits, '-', '_' and '.', e.g. \
                 password_secret_key = \"password\""
                    .into(),
            ),
        ));
    }
    Ok(v)
}

/// `bios_uuid`: a vSphere VM's BIOS UUID (`config.uuid`), in either byte order.
pub(crate) fn bios_uuid(e: &Entry<'_, '_>) -> Result<Val<String>, Problem> {
    let v = e.non_empty_string()?;
    match uuid::Uuid::parse_str(v.value.trim()) {
        Ok(u) if !u.is_nil() && u.as_bytes() != &[0xff; 16] => Ok(v.with(v.value.trim().to_string())),
        _ => Err(Problem::new(
            &v.span,
            "`bios_uuid` is not a VM's BIOS UUID",
            Some(
                "e.g. bios_uuid = \"4213e0f1-2a3b-4c5d-8e9f-a0b1c2d3e4f5\" (the VM's config.uuid, or \
                 the Node's systemUUID in either byte order); or leave it out to use the Node's \
                 systemUUID"
                    .into(),
            ),
        )),
    }
}

/// `instance_uuid`: a vSphere VM's instance UUID (`config.instanceUuid`, vCenter's
/// own id of the VM; the guest never sees it, so it has one byte order).
pub(crate) fn instance_uuid(e: &Entry<'_, '_>) -> Result<Val<String>, Problem> {
    let v = e.non_empty_string()?;
    match uuid::Uuid::parse_str(v.value.trim()) {
        Ok(u) if !u.is_nil() && u.as_bytes() != &[0xff; 16] => {
            Ok(v.with(u.hyphenated().to_string()))
        }
        _ => Err(Problem::new(
            &v.span,
            "`instance_uuid` is not a VM's instance UUID",
            Some(
                "e.g. instance_uuid = \"50123456-89ab-cdef-0123-456789abcdef\" (the VM's \
                 config.instanceUuid, as vCenter shows it); or bios_uuid for the UUID the \
                 guest and the Node report"
                    .into(),
            ),
        )),
    }
}

/// `datacenter`: the inventory path of the vSphere datacenter a UUID search is
/// limited to (`DC0`, or `Folder/DC0` when it sits in a folder).
pub(crate) fn datacenter(e: &Entry<'_, '_>) -> Result<Val<String>, Problem> {
    let v = e.non_empty_string()?;
    let parts: Vec<&str> = v.value.split('/').filter(|p| !p.is_empty()).collect();
    let ok = !parts.is_empty()
        && !parts.contains(&"vm")
        && !v.value.contains('{')
        && v.value.len() <= 400;
    if !ok {
        return Err(Problem::new(
            &v.span,
            "`datacenter` is not a datacenter's inventory path",
            Some(
                "write the datacenter's name, e.g. datacenter = \"DC0\" (or \"Folder/DC0\" when \
                 it sits in a folder), not a VM's path"
                    .into(),
            ),
        ));
    }
    Ok(v.with(parts.join("/")))
}

/// `moid`: a vSphere managed object id (`vm-42` on vCenter, `42` on ESXi).
pub(crate) fn moid(e: &Entry<'_, '_>) -> Result<Val<String>, Problem> {
    let v = e.non_empty_string()?;
    let ok = v.value.len() <= 80
        && v.value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !ok {
        return Err(Problem::new(
            &v.span,
            "`moid` is not a managed object id",
            Some(
                "e.g. moid = \"vm-42\" (vCenter) or \"42\" (ESXi): the VM's id, not its name or \
                 path (use vm_path for that)"
                    .into(),
            ),
        ));
    }
    Ok(v)
}

/// `vm_path`: a vSphere inventory path, `<datacenter>/vm/<folders>/<name>`, `{node}`
/// allowed.
pub(crate) fn vm_path(e: &Entry<'_, '_>) -> Result<Val<String>, Problem> {
    let v = e.non_empty_string()?;
    check_placeholders("vm_path", &v.value, &v.span)?;
    let parts = v.value.split('/').filter(|p| !p.is_empty()).count();
    if parts < 3 || !v.value.contains("/vm/") {
        return Err(Problem::new(
            &v.span,
            "`vm_path` is not a VM's inventory path",
            Some(
                "write <datacenter>/vm/<folders>/<name>, e.g. vm_path = \"DC0/vm/k8s/{node}\""
                    .into(),
            ),
        ));
    }
    Ok(v)
}

/// `namespace` (kubevirt): the VirtualMachine's namespace, an RFC 1123 label.
pub(crate) fn kube_namespace(e: &Entry<'_, '_>) -> Result<Val<String>, Problem> {
    let v = e.non_empty_string()?;
    if !is_dns_label(&v.value) {
        return Err(Problem::new(
            &v.span,
            "`namespace` is not a Kubernetes namespace name",
            Some(
                "the VirtualMachine's namespace in the infrastructure cluster: lowercase \
                 letters, digits and '-', at most 63 characters, e.g. namespace = \"guests\""
                    .into(),
            ),
        ));
    }
    Ok(v)
}

/// `vm` (kubevirt): a VirtualMachine's name (an RFC 1123 subdomain once `{node}` is
/// replaced; a node name is one).
pub(crate) fn kube_vm_name(e: &Entry<'_, '_>) -> Result<Val<String>, Problem> {
    let v = e.non_empty_string()?;
    check_placeholders("vm", &v.value, &v.span)?;
    if !is_dns_subdomain(&v.value.replace("{node}", "node")) {
        return Err(Problem::new(
            &v.span,
            "`vm` is not the name of a KubeVirt VirtualMachine",
            Some(
                "the VirtualMachine's metadata.name: lowercase letters, digits, '-' and '.', \
                 `{node}` for the node's name, e.g. vm = \"{node}\" (the default)"
                    .into(),
            ),
        ));
    }
    Ok(v)
}
