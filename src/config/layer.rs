//! One level of the inventory: `[defaults]`, a `[groups.<name>]` or a `[nodes.<name>]`.
//!
//! All three levels accept the same fields (only a node may name a `group`; only a
//! group or a node may carry a `policy` table, see [`super::policy`]), so one
//! [`Layer`] type reads them all. Reading checks what a value means on its own: its
//! type, its range, the shape of an endpoint or address, that at most one password
//! source is given. What depends on the other levels (the effective driver, required
//! fields, timeouts ordering) or on the machine (files, environment) is checked when a
//! node is resolved, see [`super::resolve`].

use std::collections::BTreeMap;
use std::time::Duration;

use secrecy::SecretString;
use toml::de::DeTable;

use super::diagnostic::{Diagnostics, Source, Span, Subject};
use super::endpoint::{check_address_template, check_endpoint_template};
use super::fields::{Entry, Problem, Val, unknown_key};
use super::model::{IpmiPrivilege, RedfishAuth};
use super::paths::{BaseDir, FilePath};
use super::policy::{self, PolicyDraft, Scope};
use super::values::{
    auth, bios_uuid, check_env_name, cipher_suite, datacenter, driver, instance_id, instance_tag,
    instance_uuid, ipmi_privilege, kube_namespace, kube_vm_name, moid, narrow, options, region,
    secret_key, secret_name, system_id, tls_fingerprint, vm_path,
};

/// A power driver, as named by `driver = "..."`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Driver {
    Redfish,
    Ipmi,
    Aws,
    Exec,
    Vsphere,
    Kubevirt,
}

impl Driver {
    const ALL: [Driver; 6] = [
        Driver::Redfish,
        Driver::Ipmi,
        Driver::Aws,
        Driver::Exec,
        Driver::Vsphere,
        Driver::Kubevirt,
    ];
    pub(crate) const NAMES: [&'static str; 6] =
        ["redfish", "ipmi", "aws", "exec", "vsphere", "kubevirt"];

    pub fn name(self) -> &'static str {
        match self {
            Driver::Redfish => "redfish",
            Driver::Ipmi => "ipmi",
            Driver::Aws => "aws",
            Driver::Exec => "exec",
            Driver::Vsphere => "vsphere",
            Driver::Kubevirt => "kubevirt",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.name() == s)
    }
}

const ALL: &[Driver] = &Driver::ALL;
const CREDENTIALED: &[Driver] = &[Driver::Redfish, Driver::Ipmi, Driver::Exec, Driver::Vsphere];
/// The drivers that speak HTTPS to an endpoint of their own and verify it.
const TLS: &[Driver] = &[Driver::Redfish, Driver::Aws, Driver::Vsphere];

/// Every field of a level, and the drivers it applies to.
const FIELDS: &[(&str, &[Driver])] = &[
    ("driver", ALL),
    ("endpoint", TLS),
    ("system_id", &[Driver::Redfish]),
    ("auth", &[Driver::Redfish]),
    ("address", &[Driver::Ipmi]),
    ("port", &[Driver::Ipmi]),
    ("cipher_suite", &[Driver::Ipmi]),
    ("privilege", &[Driver::Ipmi]),
    ("kg_file", &[Driver::Ipmi]),
    ("kg_env", &[Driver::Ipmi]),
    ("instance_id", &[Driver::Aws]),
    ("instance_tag", &[Driver::Aws]),
    ("region", &[Driver::Aws]),
    ("profile", &[Driver::Aws]),
    ("credentials_file", &[Driver::Aws]),
    ("bios_uuid", &[Driver::Vsphere]),
    ("moid", &[Driver::Vsphere]),
    ("vm_path", &[Driver::Vsphere]),
    ("instance_uuid", &[Driver::Vsphere]),
    ("datacenter", &[Driver::Vsphere]),
    ("kubeconfig", &[Driver::Kubevirt]),
    ("kubeconfig_context", &[Driver::Kubevirt]),
    ("namespace", &[Driver::Kubevirt]),
    ("vm", &[Driver::Kubevirt]),
    ("agent", &[Driver::Exec]),
    ("options", &[Driver::Exec]),
    ("username", CREDENTIALED),
    ("password", CREDENTIALED),
    ("password_file", CREDENTIALED),
    ("password_env", CREDENTIALED),
    ("password_secret", CREDENTIALED),
    ("password_secret_key", CREDENTIALED),
    ("username_secret_key", CREDENTIALED),
    ("ca_file", TLS),
    ("insecure", TLS),
    ("tls_fingerprint", TLS),
    ("connect_timeout", ALL),
    ("request_timeout", ALL),
    ("operation_timeout", ALL),
    ("retries", ALL),
    ("policy", ALL),
];

/// The settings that name where the password comes from: one per level.
pub(crate) const PASSWORD_FIELDS: &[&str] = &[
    "password",
    "password_file",
    "password_env",
    "password_secret",
];

/// The drivers `field` applies to (empty for `group` and unknown keys).
pub(crate) fn drivers_of(field: &str) -> &'static [Driver] {
    FIELDS
        .iter()
        .find(|(name, _)| *name == field)
        .map_or(&[], |(_, d)| d)
}

/// Where a password comes from, as written (read later, only if used).
#[derive(Debug, Clone)]
pub(crate) enum PasswordRef {
    Inline(SecretString),
    File(FilePath),
    Env(String),
    /// `password_secret`: read with cluster access, see [`super::secrets`].
    Secret(SecretName),
}

impl PasswordRef {
    pub fn key(&self) -> &'static str {
        match self {
            PasswordRef::Inline(_) => "password",
            PasswordRef::File(_) => "password_file",
            PasswordRef::Env(_) => "password_env",
            PasswordRef::Secret(_) => "password_secret",
        }
    }
}

/// Where a non-password secret (the IPMI BMC key) comes from, as written.
#[derive(Debug, Clone)]
pub(crate) enum KeyRef {
    File(FilePath),
    Env(String),
}

/// A Kubernetes Secret as written: `"<namespace>/<name>"` or a bare `"<name>"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SecretName {
    pub namespace: Option<String>,
    pub name: String,
}

/// One level of settings, as written.
#[derive(Debug)]
pub(crate) struct Layer {
    /// Whose settings these are (for messages).
    pub subject: Subject,
    /// The table's header (or key) span.
    pub span: Span,
    pub driver: Option<Val<Driver>>,
    pub endpoint: Option<Val<String>>,
    pub system_id: Option<Val<String>>,
    pub auth: Option<Val<RedfishAuth>>,
    pub address: Option<Val<String>>,
    pub port: Option<Val<u16>>,
    pub cipher_suite: Option<Val<u8>>,
    pub privilege: Option<Val<IpmiPrivilege>>,
    /// `kg_file` / `kg_env`: where the IPMI BMC key comes from (one setting).
    pub kg: Option<Val<KeyRef>>,
    pub instance_id: Option<Val<String>>,
    pub instance_tag: Option<Val<(String, String)>>,
    pub region: Option<Val<String>>,
    pub profile: Option<Val<String>>,
    pub credentials_file: Option<Val<FilePath>>,
    /// `bios_uuid`: the vSphere VM's BIOS UUID (`config.uuid`).
    pub bios_uuid: Option<Val<String>>,
    /// `moid`: the vSphere VM's managed object id.
    pub moid: Option<Val<String>>,
    /// `vm_path`: the vSphere VM's inventory path (`{node}` allowed).
    pub vm_path: Option<Val<String>>,
    /// `instance_uuid`: the vSphere VM's instance UUID (`config.instanceUuid`).
    pub instance_uuid: Option<Val<String>>,
    /// `datacenter`: the vSphere datacenter a UUID search is limited to.
    pub datacenter: Option<Val<String>>,
    /// `kubeconfig`: the KubeVirt infrastructure cluster's kubeconfig file.
    pub kubeconfig: Option<Val<FilePath>>,
    /// `kubeconfig_context`: the context to use (else its `current-context`).
    pub kubeconfig_context: Option<Val<String>>,
    /// `namespace`: the VirtualMachine's namespace in the infrastructure cluster.
    pub namespace: Option<Val<String>>,
    /// `vm`: the VirtualMachine's name (`{node}` allowed; default the node's name).
    pub vm: Option<Val<String>>,
    pub agent: Option<Val<FilePath>>,
    pub options: Option<Val<BTreeMap<String, Val<String>>>>,
    pub username: Option<Val<String>>,
    pub password: Option<Val<PasswordRef>>,
    /// `password_secret_key`: the Secret's key holding the password.
    pub password_secret_key: Option<Val<String>>,
    /// `username_secret_key`: the Secret's key holding the username (one setting
    /// with `username`).
    pub username_secret_key: Option<Val<String>>,
    pub ca_file: Option<Val<FilePath>>,
    pub insecure: Option<Val<bool>>,
    /// `tls_fingerprint`: the one certificate trusted for this BMC.
    pub tls_fingerprint: Option<Val<crate::tls::CertFingerprint>>,
    pub connect_timeout: Option<Val<Duration>>,
    pub request_timeout: Option<Val<Duration>>,
    pub operation_timeout: Option<Val<Duration>>,
    pub retries: Option<Val<u32>>,
    /// Policy overrides (groups and nodes only).
    pub policy: Option<Val<PolicyDraft>>,
    /// Only on nodes.
    pub group: Option<Val<String>>,
    /// `fallback`: further power methods, in order (nodes and groups only; see
    /// [`super::fallback`]).
    pub fallback: Option<Val<Vec<Layer>>>,
    /// Every known key written at this level with a valid value, with its key span.
    pub keys: Vec<(&'static str, Span)>,
    /// Known keys written at this level whose value was reported as invalid: a
    /// "missing field" error for them would only repeat the problem.
    pub invalid: Vec<&'static str>,
    /// A sub-table that is not a field: almost always a node name with dots written
    /// unquoted (`[nodes.ip-10-0-1-2.ec2.internal]`). The level is not resolved.
    pub stray_table: bool,
}

impl Layer {
    pub fn empty(subject: Subject, span: Span) -> Self {
        Self {
            subject,
            span,
            driver: None,
            endpoint: None,
            system_id: None,
            auth: None,
            address: None,
            port: None,
            cipher_suite: None,
            privilege: None,
            kg: None,
            instance_id: None,
            instance_tag: None,
            region: None,
            profile: None,
            credentials_file: None,
            bios_uuid: None,
            moid: None,
            vm_path: None,
            instance_uuid: None,
            datacenter: None,
            kubeconfig: None,
            kubeconfig_context: None,
            namespace: None,
            vm: None,
            agent: None,
            options: None,
            username: None,
            password: None,
            password_secret_key: None,
            username_secret_key: None,
            ca_file: None,
            insecure: None,
            tls_fingerprint: None,
            connect_timeout: None,
            request_timeout: None,
            operation_timeout: None,
            retries: None,
            policy: None,
            group: None,
            fallback: None,
            keys: Vec::new(),
            invalid: Vec::new(),
            stray_table: false,
        }
    }

    /// Reads one level's table; every problem is reported, the good fields are kept.
    pub fn parse(
        subject: Subject,
        span: Span,
        table: &DeTable<'_>,
        base: &BaseDir,
        src: &Source,
        diags: &mut Diagnostics,
    ) -> Self {
        let mut layer = Self::empty(subject, span);
        let mut problems = Vec::new();
        for entry in Entry::all(table) {
            if super::fallback::handles(&layer.subject, entry.name) {
                super::fallback::read(&mut layer, &entry, base, src, diags, &mut problems);
                continue;
            }
            if let Err(p) = layer.read(&entry, base, &mut problems) {
                problems.push(p);
            }
        }
        layer.check_secret_keys(&mut problems);
        for p in problems {
            diags.error(src, Some(&p.span), &layer.subject, p.message, p.help);
        }
        layer
    }

    fn place(&self) -> &'static str {
        match self.subject {
            Subject::Node(_) => "in a node",
            Subject::Group(_) => "in a group",
            Subject::Fallback(..) => "in a fallback entry",
            _ => "in [defaults]",
        }
    }

    fn read(
        &mut self,
        e: &Entry<'_, '_>,
        base: &BaseDir,
        more: &mut Vec<Problem>,
    ) -> Result<(), Problem> {
        let is_node = matches!(self.subject, Subject::Node(_));
        let Some(field) = FIELDS
            .iter()
            .map(|(name, _)| *name)
            .chain(is_node.then_some("group"))
            .find(|name| *name == e.name)
        else {
            return Err(self.unknown(e));
        };
        let before = more.len();
        let result = self.read_field(field, e, base, more);
        let result = match result {
            Ok(()) if more.len() > before => Err(()),
            Ok(()) => Ok(()),
            Err(p) => {
                more.push(p);
                Err(())
            }
        };
        match result {
            Ok(()) => self.keys.push((field, e.key.clone())),
            Err(()) => self.invalid.push(field),
        }
        Ok(())
    }

    fn read_field(
        &mut self,
        field: &str,
        e: &Entry<'_, '_>,
        base: &BaseDir,
        more: &mut Vec<Problem>,
    ) -> Result<(), Problem> {
        match field {
            "driver" => self.driver = Some(driver(e)?),
            "endpoint" => {
                let v = e.non_empty_string()?;
                check_endpoint_template(&v.value, &v.span)?;
                self.endpoint = Some(v);
            }
            "system_id" => self.system_id = Some(system_id(e)?),
            "auth" => self.auth = Some(auth(e)?),
            "address" => {
                let v = e.non_empty_string()?;
                check_address_template(v.value.trim(), &v.span)?;
                self.address = Some(v.with(v.value.trim().to_string()));
            }
            "port" => self.port = Some(narrow(e.integer(1, 65535, 623)?)),
            "cipher_suite" => self.cipher_suite = Some(cipher_suite(e)?),
            "privilege" => self.privilege = Some(ipmi_privilege(e)?),
            "kg_file" | "kg_env" => self.kg(e, base)?,
            "instance_id" => self.instance_id = Some(instance_id(e)?),
            "instance_tag" => self.instance_tag = Some(instance_tag(e)?),
            "region" => self.region = Some(region(e)?),
            "profile" => self.profile = Some(e.non_empty_string()?),
            "credentials_file" => {
                let v = e.non_empty_string()?;
                self.credentials_file = Some(v.with(base.join(&v.value)));
            }
            "bios_uuid" => self.bios_uuid = Some(bios_uuid(e)?),
            "moid" => self.moid = Some(moid(e)?),
            "vm_path" => self.vm_path = Some(vm_path(e)?),
            "instance_uuid" => self.instance_uuid = Some(instance_uuid(e)?),
            "datacenter" => self.datacenter = Some(datacenter(e)?),
            "kubeconfig" => {
                let v = e.non_empty_string()?;
                self.kubeconfig = Some(v.with(base.join(&v.value)));
            }
            "kubeconfig_context" => self.kubeconfig_context = Some(e.non_empty_string()?),
            "namespace" => self.namespace = Some(kube_namespace(e)?),
            "vm" => self.vm = Some(kube_vm_name(e)?),
            "agent" => {
                let v = e.non_empty_string()?;
                self.agent = Some(v.with(base.join(&v.value)));
            }
            "options" => self.options = Some(options(e)?),
            "username" => self.username = Some(e.non_empty_string()?),
            "password" | "password_file" | "password_env" | "password_secret" => {
                self.password(e, base)?;
            }
            "password_secret_key" => self.password_secret_key = Some(secret_key(e)?),
            "username_secret_key" => self.username_secret_key = Some(secret_key(e)?),
            "policy" => self.policy(e, more)?,
            "ca_file" => {
                let v = e.non_empty_string()?;
                self.ca_file = Some(v.with(base.join(&v.value)));
            }
            "insecure" => self.insecure = Some(e.bool()?),
            "tls_fingerprint" => self.tls_fingerprint = Some(tls_fingerprint(e)?),
            "connect_timeout" => self.connect_timeout = Some(e.duration(false)?),
            "request_timeout" => self.request_timeout = Some(e.duration(false)?),
            "operation_timeout" => self.operation_timeout = Some(e.duration(false)?),
            "retries" => self.retries = Some(narrow(e.integer(0, 10, 3)?)),
            _ => self.group = Some(e.non_empty_string()?),
        }
        Ok(())
    }

    fn unknown(&mut self, e: &Entry<'_, '_>) -> Problem {
        if let (Subject::Node(name), Some(rest)) = (&self.subject, dotted_rest(e)) {
            self.stray_table = true;
            return Problem::new(
                &e.key,
                format!(
                    "unknown key `{}` in a node: is \"{name}.{rest}\" one node name?",
                    e.name
                ),
                Some(format!(
                    "a node name containing dots must be quoted: [nodes.\"{name}.{rest}\"]"
                )),
            );
        }
        if e.name == "group" {
            return Problem::new(
                &e.key,
                format!("`group` can only be set on a node, not {}", self.place()),
                Some("groups do not nest; set `group = \"...\"` on each node instead".into()),
            );
        }
        let mut allowed: Vec<&str> = FIELDS.iter().map(|(n, _)| *n).collect();
        if matches!(self.subject, Subject::Node(_)) {
            allowed.insert(0, "group");
        }
        unknown_key(e.name, &e.key, &allowed, self.place())
    }

    /// `password`, `password_file` and `password_env` are one setting: one per level.
    fn password(&mut self, e: &Entry<'_, '_>, base: &BaseDir) -> Result<(), Problem> {
        let value = match e.name {
            // Never `non_empty_string` for the secret itself: its messages are generic,
            // but an inline password deserves its own, value-free, wording.
            "password" => {
                let v = e.string()?;
                if v.value.is_empty() {
                    return Err(Problem::new(&v.span, "`password` is empty", None));
                }
                v.with(PasswordRef::Inline(SecretString::from(v.value.clone())))
            }
            "password_file" => {
                let v = e.non_empty_string()?;
                v.with(PasswordRef::File(base.join(&v.value)))
            }
            "password_secret" => {
                let v = secret_name(e)?;
                v.with(PasswordRef::Secret(v.value.clone()))
            }
            _ => {
                let v = e.non_empty_string()?;
                check_env_name(&v)?;
                v.with(PasswordRef::Env(v.value.clone()))
            }
        };
        if let Some(first) = &self.password {
            return Err(Problem::new(
                &e.key,
                format!(
                    "`{}` and `{}` are both set; they are one setting",
                    first.value.key(),
                    e.name
                ),
                Some(
                    "give the password one way per level: password_file, password_env, \
                     password_secret or (if allowed) password"
                        .into(),
                ),
            ));
        }
        self.password = Some(value);
        Ok(())
    }
}

impl Layer {
    /// `kg_file` and `kg_env` are one setting: one per level.
    fn kg(&mut self, e: &Entry<'_, '_>, base: &BaseDir) -> Result<(), Problem> {
        let v = e.non_empty_string()?;
        let value = if e.name == "kg_file" {
            v.with(KeyRef::File(base.join(&v.value)))
        } else {
            check_env_name(&v)?;
            v.with(KeyRef::Env(v.value.clone()))
        };
        if self.kg.is_some() {
            return Err(Problem::new(
                &e.key,
                "`kg_file` and `kg_env` are both set; they are one setting",
                Some("give the BMC key one way per level".into()),
            ));
        }
        self.kg = Some(value);
        Ok(())
    }

    /// `policy = { ... }` / `[groups.<name>.policy]` / `[nodes.<name>.policy]`.
    fn policy(&mut self, e: &Entry<'_, '_>, more: &mut Vec<Problem>) -> Result<(), Problem> {
        let scope = match self.subject {
            Subject::Node(_) => Scope::Node,
            Subject::Group(_) => Scope::Group,
            _ => {
                return Err(Problem::new(
                    &e.key,
                    "`policy` cannot be set in [defaults]",
                    Some(
                        "the defaults of every node's policy are [policy] in nodefence.toml; \
                         override keys per group or node with a `policy` table there"
                            .into(),
                    ),
                ));
            }
        };
        let table = e.table()?;
        let draft = policy::parse(table, scope, &mut |p| more.push(p));
        self.policy = Some(Val::new(draft, e.key.clone(), e.value.span()));
        Ok(())
    }

    /// Same-level consistency of the Secret keys: they belong to `password_secret`,
    /// and `username_secret_key` and `username` are one setting.
    fn check_secret_keys(&self, problems: &mut Vec<Problem>) {
        let source = self.password.as_ref().map(|p| &p.value);
        if !matches!(source, None | Some(PasswordRef::Secret(_))) {
            let other = source.map_or("", PasswordRef::key);
            for (field, val) in [
                ("password_secret_key", &self.password_secret_key),
                ("username_secret_key", &self.username_secret_key),
            ] {
                if let Some(v) = val {
                    problems.push(Problem::new(
                        &v.key,
                        format!(
                            "`{field}` applies only to password_secret, but this level takes \
                             the password from `{other}`"
                        ),
                        Some(format!(
                            "remove {field}, or replace {other} with password_secret = \
                             \"<namespace>/<name>\""
                        )),
                    ));
                }
            }
        }
        if let (Some(_), Some(key)) = (&self.username, &self.username_secret_key) {
            problems.push(Problem::new(
                &key.key,
                "`username` and `username_secret_key` are both set; they are one setting",
                Some(
                    "keep username (written here) or username_secret_key (read from the \
                     password's Secret)"
                        .into(),
                ),
            ));
        }
    }
}

/// For a stray sub-table `ec2 = { internal = { ... } }`: "ec2.internal".
fn dotted_rest(e: &Entry<'_, '_>) -> Option<String> {
    let mut table = e.value.get_ref().as_table()?;
    let mut path = vec![e.name.to_string()];
    loop {
        let mut subtables = table.iter().filter(|(_, v)| v.get_ref().is_table());
        match (subtables.next(), subtables.next(), table.len()) {
            (Some((k, v)), None, 1) => {
                path.push(k.get_ref().to_string());
                table = v.get_ref().as_table()?;
            }
            _ => return Some(path.join(".")),
        }
    }
}
