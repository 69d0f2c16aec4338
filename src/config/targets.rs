//! Building each driver's target from a node's inherited settings.
//!
//! One function per driver: what it requires (redfish: endpoint and credentials;
//! ipmi: address and credentials; aws: nothing, the instance comes from the Node's
//! providerID; exec: an executable agent), its defaults, and the checks that only
//! make sense for it.

use std::collections::BTreeMap;

use super::credentials::credential;
use super::endpoint::{check_address, parse_endpoint, substitute};
use super::files::{self, FileProblem};
use super::layer::Driver;
use super::model::{
    AwsTarget, ExecTarget, IpmiPrivilege, IpmiTarget, KubevirtTarget, PowerSource, RedfishTarget,
    Timeouts, TlsSettings, VsphereTarget,
};
use super::paths::FilePath;
use super::resolve::{Chain, Ctx, Picked, from_where, note_insecure, rank};
use crate::power::vsphere::locate::VmSelector;

/// The standard IPMI-over-LAN (RMCP+) port.
pub(crate) const IPMI_PORT: u16 = 623;

/// The key in `ctx.files` of a file setting checked together with another setting
/// (an AWS profile, a kubeconfig context): one check per written setting and that
/// value. Keys of the others are their spans' starts; these are kept out of that range.
fn file_key(span_start: usize, with: impl std::hash::Hash) -> usize {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    (span_start, with).hash(&mut h);
    (h.finish() as usize) | (1 << (usize::BITS - 1))
}

/// Reports a file setting's check at the setting, the first time `key` is seen only (a
/// group's file serves many nodes, and says so once), and remembers its outcome.
fn report_file_check<T>(
    ctx: &mut Ctx<'_>,
    key: usize,
    picked: &Picked<'_, FilePath>,
    result: &Result<T, FileProblem>,
) -> bool {
    if ctx.files.insert(key, result.is_ok()).is_none()
        && let Err(e) = result
    {
        ctx.error(
            picked.layer,
            &picked.val.span,
            e.message.clone(),
            e.help.clone(),
        );
    }
    result.is_ok()
}

/// Runs a file setting's check the first time `key` is seen; later nodes reuse its
/// outcome ([`report_file_check`]).
fn check_file_once(
    ctx: &mut Ctx<'_>,
    key: usize,
    picked: &Picked<'_, FilePath>,
    check: impl FnOnce() -> Result<(), FileProblem>,
) -> bool {
    match ctx.files.get(&key) {
        Some(ok) => *ok,
        None => report_file_check(ctx, key, picked, &check()),
    }
}

fn missing(ctx: &mut Ctx<'_>, chain: &Chain<'_>, driver: Driver, field: &str, example: &str) {
    if chain.invalid(&[field]) {
        return;
    }
    let place = if matches!(chain.node.subject, super::diagnostic::Subject::Fallback(..)) {
        "in this fallback entry"
    } else {
        "on the node, its group or in [defaults]"
    };
    ctx.error(
        chain.node,
        &chain.node.span,
        format!("driver \"{}\" needs `{field}`", driver.name()),
        Some(format!("set it {place}, e.g. {field} = {example}")),
    );
}

/// The node's endpoint, `{node}` substituted and checked.
fn endpoint(ctx: &mut Ctx<'_>, name: &str, picked: Picked<'_, String>) -> Option<url::Url> {
    let text = substitute(&picked.val.value, name);
    match parse_endpoint(&text, &picked.val.span) {
        Ok(url) => {
            if url.scheme() == "http" {
                ctx.warn(
                    picked.layer,
                    &picked.val.span,
                    "`endpoint` uses http://: credentials and power commands cross the \
                     network unencrypted; use https://",
                );
            }
            Some(url)
        }
        Err(p) => {
            ctx.problem(picked.layer, p);
            None
        }
    }
}

pub(crate) fn redfish(
    ctx: &mut Ctx<'_>,
    name: &str,
    chain: &Chain<'_>,
    timeouts: Timeouts,
) -> Option<PowerSource> {
    let endpoint = match chain.pick(|l| &l.endpoint) {
        Some(p) => endpoint(ctx, name, p),
        None => {
            let example = "\"https://{node}-bmc.mgmt.example.com\"";
            missing(ctx, chain, Driver::Redfish, "endpoint", example);
            None
        }
    };
    let credential = credential(ctx, chain, Driver::Redfish, true);
    let tls = tls(ctx, chain);
    Some(PowerSource::Redfish(RedfishTarget {
        endpoint: endpoint?,
        system_id: chain.pick(|l| &l.system_id).map(|p| p.val.value.clone()),
        credential: credential.ok()??,
        auth: chain
            .pick(|l| &l.auth)
            .map(|p| p.val.value)
            .unwrap_or_default(),
        tls: tls?,
        timeouts,
    }))
}

/// The trust setting of one BMC: `ca_file`, `tls_fingerprint` or `insecure`.
/// `insecure` contradicts both others. Between a CA file and a pin, the more
/// specific level's applies (a group's CA, one node's BMC pinned), as password
/// sources do; both at the same level is an error.
fn tls(ctx: &mut Ctx<'_>, chain: &Chain<'_>) -> Option<TlsSettings> {
    let mut ca = chain.pick(|l| &l.ca_file);
    let pin = chain.pick(|l| &l.tls_fingerprint);
    let insecure = chain.pick(|l| &l.insecure).filter(|p| p.val.value);
    if let (Some(pin), Some(insecure)) = (pin, insecure) {
        let at = if rank(insecure.layer) >= rank(pin.layer) {
            insecure.layer
        } else {
            pin.layer
        };
        let (span, other) = if std::ptr::eq(at, insecure.layer) {
            (&insecure.val.key, pin.layer)
        } else {
            (&pin.val.key, insecure.layer)
        };
        ctx.error(
            at,
            span,
            format!(
                "`insecure = true` and `tls_fingerprint` contradict each other (both in effect{})",
                from_where(other, at)
            ),
            Some("a pin trusts exactly one certificate; insecure trusts any. Keep the pin".into()),
        );
        return None;
    }
    if let (Some(c), Some(p)) = (ca, pin) {
        if rank(c.layer) == rank(p.layer) {
            ctx.error(
                p.layer,
                &p.val.key,
                "`ca_file` and `tls_fingerprint` at the same level: a BMC has one trust setting"
                    .to_string(),
                Some(
                    "keep the pin for a BMC with its own certificate, or ca_file for BMCs whose                      certificates your CA signed"
                        .into(),
                ),
            );
            return None;
        }
        if rank(p.layer) > rank(c.layer) {
            ca = None;
        }
    }
    let pin = pin.filter(|p| ca.is_none_or(|c| rank(p.layer) > rank(c.layer)));
    if let (Some(ca), Some(insecure)) = (ca, insecure) {
        let (at, other) = if rank(insecure.layer) >= rank(ca.layer) {
            (insecure.layer, ca.layer)
        } else {
            (ca.layer, insecure.layer)
        };
        let span = if std::ptr::eq(at, insecure.layer) {
            &insecure.val.key
        } else {
            &ca.val.key
        };
        ctx.error(
            at,
            span,
            format!(
                "`insecure = true` and `ca_file` contradict each other (both in effect{})",
                from_where(other, at)
            ),
            Some(
                "ca_file verifies BMC certificates against your CA; insecure skips verification. \
                 Keep one (a more specific level may set insecure = false)"
                    .into(),
            ),
        );
        return None;
    }
    if let Some(insecure) = insecure {
        note_insecure(ctx, insecure);
    }
    let ca_file = match ca {
        None => None,
        Some(ca) => {
            if !check_file_once(ctx, ca.val.span.start, &ca, || {
                files::check_ca_file(&ca.val.value)
            }) {
                return None;
            }
            Some(ca.val.value.abs.clone())
        }
    };
    Some(TlsSettings {
        ca_file,
        insecure: insecure.is_some(),
        fingerprint: pin.map(|p| p.val.value),
    })
}

pub(crate) fn ipmi(
    ctx: &mut Ctx<'_>,
    name: &str,
    chain: &Chain<'_>,
    timeouts: Timeouts,
) -> Option<PowerSource> {
    let address = match chain.pick(|l| &l.address) {
        Some(p) => {
            let text = substitute(&p.val.value, name);
            match check_address(&text, &p.val.span) {
                Ok(()) => Some(text),
                Err(problem) => {
                    ctx.problem(p.layer, problem);
                    None
                }
            }
        }
        None => {
            missing(ctx, chain, Driver::Ipmi, "address", "\"10.0.9.21\"");
            None
        }
    };
    let credential = credential(ctx, chain, Driver::Ipmi, true);
    let kg = super::ipmi_key::ipmi_key(ctx, chain);
    Some(PowerSource::Ipmi(IpmiTarget {
        address: address?,
        port: chain.pick(|l| &l.port).map_or(IPMI_PORT, |p| p.val.value),
        credential: credential.ok()??,
        cipher_suite: chain.pick(|l| &l.cipher_suite).map(|p| p.val.value),
        privilege: chain
            .pick(|l| &l.privilege)
            .map_or(IpmiPrivilege::default(), |p| p.val.value),
        kg: kg.ok()?,
        timeouts,
    }))
}

pub(crate) fn aws(
    ctx: &mut Ctx<'_>,
    name: &str,
    chain: &Chain<'_>,
    timeouts: Timeouts,
) -> Option<PowerSource> {
    let endpoint = match chain.pick(|l| &l.endpoint) {
        Some(p) => Some(endpoint(ctx, name, p)?),
        None => None,
    };
    let tls = tls(ctx, chain);
    let profile = chain.pick(|l| &l.profile).map(|p| p.val.value.clone());
    let credentials_file = match chain.pick(|l| &l.credentials_file) {
        None => None,
        Some(p) => {
            let key = file_key(p.val.span.start, &profile);
            let ok = check_file_once(ctx, key, &p, || {
                files::check_credentials_file(&p.val.value, profile.as_deref())
            });
            Some(ok.then(|| p.val.value.abs.clone())?)
        }
    };
    Some(PowerSource::Aws(AwsTarget {
        instance_id: chain.pick(|l| &l.instance_id).map(|p| p.val.value.clone()),
        instance_tag: chain
            .pick(|l| &l.instance_tag)
            .map(|p| (p.val.value.0.clone(), substitute(&p.val.value.1, name))),
        region: chain.pick(|l| &l.region).map(|p| p.val.value.clone()),
        endpoint,
        tls: tls?,
        profile,
        credentials_file,
        timeouts,
    }))
}

pub(crate) fn exec(
    ctx: &mut Ctx<'_>,
    name: &str,
    chain: &Chain<'_>,
    timeouts: Timeouts,
) -> Option<PowerSource> {
    let agent = match chain.pick(|l| &l.agent) {
        Some(p) => {
            let written = ctx.src.text.get(p.val.span.clone()).unwrap_or("");
            let written = written.trim_matches(['"', '\'']).to_string();
            let ok = check_file_once(ctx, p.val.span.start, &p, || {
                files::check_agent(&p.val.value, &written)
            });
            ok.then(|| p.val.value.abs.clone())
        }
        None => {
            missing(
                ctx,
                chain,
                Driver::Exec,
                "agent",
                "\"/usr/sbin/fence_ipmilan\"",
            );
            None
        }
    };
    // Options merge key by key: defaults, then group, then node.
    let mut options = BTreeMap::new();
    for layer in chain.levels().collect::<Vec<_>>().into_iter().rev() {
        if let Some(opts) = &layer.options {
            for (key, value) in &opts.value {
                options.insert(key.clone(), substitute(&value.value, name));
            }
        }
    }
    let credential = credential(ctx, chain, Driver::Exec, false);
    Some(PowerSource::Exec(ExecTarget {
        agent: agent?,
        options,
        credential: credential.ok()?,
        timeouts,
    }))
}

/// A vSphere VM: `endpoint` and credentials required; at most one of `bios_uuid`,
/// `instance_uuid`, `moid` and `vm_path` (none: the Node's systemUUID finds the VM);
/// `datacenter` only with a UUID search (`moid` and `vm_path` need none).
pub(crate) fn vsphere(
    ctx: &mut Ctx<'_>,
    name: &str,
    chain: &Chain<'_>,
    timeouts: Timeouts,
) -> Option<PowerSource> {
    let endpoint = match chain.pick(|l| &l.endpoint) {
        Some(p) => endpoint(ctx, name, p),
        None => {
            missing(
                ctx,
                chain,
                Driver::Vsphere,
                "endpoint",
                "\"https://vcenter.example.com\"",
            );
            None
        }
    };
    let uuid = chain.pick(|l| &l.bios_uuid);
    let instance = chain.pick(|l| &l.instance_uuid);
    let moid = chain.pick(|l| &l.moid);
    let path = chain.pick(|l| &l.vm_path);
    let datacenter = chain.pick(|l| &l.datacenter);
    let written: Vec<(&str, &super::layer::Layer, &super::diagnostic::Span)> = [
        uuid.map(|p| ("bios_uuid", p.layer, &p.val.key)),
        instance.map(|p| ("instance_uuid", p.layer, &p.val.key)),
        moid.map(|p| ("moid", p.layer, &p.val.key)),
        path.map(|p| ("vm_path", p.layer, &p.val.key)),
    ]
    .into_iter()
    .flatten()
    .collect();
    if let [first, second, ..] = written.as_slice() {
        let (at, other) = if rank(second.1) >= rank(first.1) {
            (second, first)
        } else {
            (first, second)
        };
        ctx.error(
            at.1,
            at.2,
            format!(
                "`{}` and `{}` both name the VM (both in effect{}): a node has one VM",
                other.0,
                at.0,
                from_where(other.1, at.1)
            ),
            Some(
                "keep one: bios_uuid (found wherever the VM is), instance_uuid, moid, or vm_path; \
                 or none, to find the VM by the Node's systemUUID"
                    .into(),
            ),
        );
        return None;
    }
    if let (Some(dc), Some(other)) = (datacenter, written.first())
        && matches!(other.0, "moid" | "vm_path")
    {
        ctx.error(
            dc.layer,
            &dc.val.key,
            format!(
                "`datacenter` limits a UUID search, and `{}` names the VM without one{}",
                other.0,
                from_where(other.1, dc.layer)
            ),
            Some(
                "remove datacenter (a vm_path starts with its datacenter; a moid is unique \
                 on its vCenter), or name the VM by bios_uuid or instance_uuid"
                    .into(),
            ),
        );
        return None;
    }

    let vm = match (uuid, instance, moid, path) {
        (Some(u), _, _, _) => VmSelector::BiosUuid(u.val.value.clone()),
        (_, Some(i), _, _) => VmSelector::InstanceUuid(i.val.value.clone()),
        (_, _, Some(m), _) => VmSelector::Moid(m.val.value.clone()),
        (_, _, _, Some(p)) => VmSelector::Path(substitute(&p.val.value, name)),
        _ => VmSelector::NodeUuid,
    };
    let credential = credential(ctx, chain, Driver::Vsphere, true);
    let tls = tls(ctx, chain);
    Some(PowerSource::Vsphere(VsphereTarget {
        endpoint: endpoint?,
        vm,
        datacenter: datacenter.map(|d| d.val.value.clone()),
        credential: credential.ok()??,
        tls: tls?,
        timeouts,
    }))
}

/// A KubeVirt VirtualMachine: `kubeconfig` required and checked (parses, has the
/// context, the context's cluster names a server); `namespace` else the context's
/// else `default`; `vm` else the node's name.
pub(crate) fn kubevirt(
    ctx: &mut Ctx<'_>,
    name: &str,
    chain: &Chain<'_>,
    timeouts: Timeouts,
) -> Option<PowerSource> {
    let context = chain
        .pick(|l| &l.kubeconfig_context)
        .map(|p| p.val.value.clone());
    let Some(p) = chain.pick(|l| &l.kubeconfig) else {
        missing(
            ctx,
            chain,
            Driver::Kubevirt,
            "kubeconfig",
            "\"/etc/nodefence/kubevirt/kubeconfig\"",
        );
        return None;
    };
    // Read for every node (its namespace is the default), reported once.
    let checked = files::check_kubeconfig(&p.val.value, context.as_deref());
    let key = file_key(p.val.span.start, (&context, "kubeconfig"));
    report_file_check(ctx, key, &p, &checked);
    let kubeconfig_context = checked.ok()?;
    let namespace = chain
        .pick(|l| &l.namespace)
        .map(|p| p.val.value.clone())
        .or(kubeconfig_context.namespace)
        .unwrap_or_else(|| "default".to_string());
    let vm = chain
        .pick(|l| &l.vm)
        .map_or_else(|| name.to_string(), |p| substitute(&p.val.value, name));
    Some(PowerSource::Kubevirt(KubevirtTarget {
        kubeconfig: p.val.value.abs.clone(),
        context,
        namespace,
        vm,
        timeouts,
    }))
}
