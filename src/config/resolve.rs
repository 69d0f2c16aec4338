//! Inheritance: turning a node, its group and `[defaults]` into one [`NodeTarget`].
//!
//! Every field is taken from the most specific level that sets it: node, then group,
//! then defaults. The three password fields are one setting, so a node's
//! `password_env` replaces a group's `password_file` entirely. Fence agent `options`
//! are merged key by key with the same precedence.
//!
//! A field that does not apply to a node's driver is an error where it was written
//! with that driver in view (on the node itself, or on a level that also sets
//! `driver`); inherited from a level that names no driver it is simply not used, so
//! `[defaults]` can hold settings for several kinds of nodes.
//!
//! A problem with an inherited value is reported where the value is written, once,
//! not once per node that inherits it.
//!
//! The node's fencing policy is resolved the same way, key by key: the node's
//! `policy` table, its group's, then `[policy]` (see [`super::policy`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use secrecy::SecretString;

use super::diagnostic::{Diagnostics, Source, Span, Subject};
use super::fields::{Problem, Val};
use super::layer::{Driver, Layer, drivers_of};
use super::model::{NodeTarget, PowerSource, SecuritySettings, Timeouts};
use super::policy::ClusterPolicy;
use super::targets;
use crate::power::confirm::ConfirmPolicy;

/// The levels one node inherits from, most specific first.
pub(crate) struct Chain<'a> {
    pub node: &'a Layer,
    pub group: Option<&'a Layer>,
    pub defaults: &'a Layer,
}

/// A value and the level it came from.
pub(crate) struct Picked<'a, T> {
    pub val: &'a Val<T>,
    pub layer: &'a Layer,
}

impl<T> Clone for Picked<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Picked<'_, T> {}

impl<'a> Chain<'a> {
    /// The levels, most specific first.
    pub fn levels(&self) -> impl Iterator<Item = &'a Layer> + use<'a> {
        [Some(self.node), self.group, Some(self.defaults)]
            .into_iter()
            .flatten()
    }

    /// True when some level wrote `field` with an invalid value (already reported).
    pub fn invalid(&self, fields: &[&str]) -> bool {
        self.levels()
            .any(|l| l.invalid.iter().any(|f| fields.contains(f)))
    }

    /// The most specific value of a field.
    pub fn pick<T>(&self, field: fn(&Layer) -> &Option<Val<T>>) -> Option<Picked<'a, T>> {
        self.levels()
            .find_map(|layer| field(layer).as_ref().map(|val| Picked { val, layer }))
    }
}

/// Shared state of one inventory resolution.
pub(crate) struct Ctx<'a> {
    pub src: &'a Source,
    pub env: &'a dyn Fn(&str) -> Option<String>,
    pub security: &'a SecuritySettings,
    /// `[policy]`, which group and node policies override.
    pub policy: &'a ClusterPolicy,
    /// `[power]` confirmation, which a fencing topology's timeouts must fit in.
    pub confirm: ConfirmPolicy,
    pub diags: &'a mut Diagnostics,
    /// Passwords by the span of their definition: each is read (and reported) once.
    pub secrets: HashMap<usize, Option<SecretString>>,
    /// Checked files (ca_file, agent) by the span of their definition.
    pub files: HashMap<usize, bool>,
    /// Password files already warned about.
    pub warned_files: HashSet<std::path::PathBuf>,
    /// `insecure = true` definitions in use: key span start → (subject, span, nodes).
    pub insecure: BTreeMap<usize, (Subject, Span, usize)>,
}

impl<'a> Ctx<'a> {
    pub fn new(
        src: &'a Source,
        env: &'a dyn Fn(&str) -> Option<String>,
        security: &'a SecuritySettings,
        policy: &'a ClusterPolicy,
        confirm: ConfirmPolicy,
        diags: &'a mut Diagnostics,
    ) -> Self {
        Self {
            src,
            env,
            security,
            policy,
            confirm,
            diags,
            secrets: HashMap::new(),
            files: HashMap::new(),
            warned_files: HashSet::new(),
            insecure: BTreeMap::new(),
        }
    }

    /// Reports an error at `span`, on behalf of `layer`.
    pub fn error(
        &mut self,
        layer: &Layer,
        span: &Span,
        message: impl Into<String>,
        help: Option<String>,
    ) {
        self.diags
            .error(self.src, Some(span), &layer.subject, message, help);
    }

    /// Reports a [`Problem`] on behalf of `layer`.
    pub fn problem(&mut self, layer: &Layer, p: Problem) {
        self.error(layer, &p.span, p.message, p.help);
    }

    /// Records a warning at `span`, on behalf of `layer` (duplicates collapse).
    pub fn warn(&mut self, layer: &Layer, span: &Span, message: impl Into<String>) {
        self.diags
            .warn(self.src, Some(span), &layer.subject, message);
    }
}

/// How specific a level is: node 2, group 1, defaults 0.
pub(crate) fn rank(layer: &Layer) -> u8 {
    match layer.subject {
        Subject::Node(_) | Subject::Fallback(..) => 2,
        Subject::Group(_) => 1,
        _ => 0,
    }
}

/// " (from group \"x\")" when `layer` is not `here`, for messages about inherited values.
pub(crate) fn from_where(layer: &Layer, here: &Layer) -> String {
    if std::ptr::eq(layer, here) {
        return String::new();
    }
    match &layer.subject {
        Subject::Group(g) => format!(", from group \"{g}\""),
        Subject::Defaults => ", from [defaults]".into(),
        Subject::Node(n) => format!(", from node \"{n}\""),
        Subject::Fallback(_, n) => format!(", from fallback {n}"),
        Subject::File => String::new(),
    }
}

/// Reports every field of `layer` that does not apply to `driver`.
/// `driver_from` names the level the driver came from when it is not `layer`.
pub(crate) fn check_applicable(
    ctx: &mut Ctx<'_>,
    layer: &Layer,
    driver: Driver,
    driver_from: Option<&Layer>,
) {
    for (field, span) in &layer.keys {
        let drivers = drivers_of(field);
        if drivers.is_empty() || drivers.contains(&driver) {
            continue;
        }
        let origin = driver_from
            .map(|l| from_where(l, layer))
            .unwrap_or_default();
        let used_by: Vec<&str> = drivers.iter().map(|d| d.name()).collect();
        ctx.error(
            layer,
            span,
            format!(
                "`{field}` does not apply to driver \"{}\"{origin}",
                driver.name()
            ),
            Some(format!(
                "`{field}` is used by: {}; remove it here",
                used_by.join(", ")
            )),
        );
    }
}

/// Resolves one node. Every problem is reported; None if there was any.
pub(crate) fn node(ctx: &mut Ctx<'_>, name: &str, chain: &Chain<'_>) -> Option<NodeTarget> {
    let before = ctx.diags.error_count();
    let primary = power_source(ctx, name, chain);
    let fallback = super::fallback::resolve(ctx, name, chain);
    let (power, driver) = primary?;
    let fallback = fallback?;
    if ctx.diags.error_count() > before {
        return None;
    }
    super::fallback::check_timeouts(ctx, chain, &power, &fallback);
    let policy = ctx.policy.for_node(
        chain.node.policy.as_ref().map(|p| &p.value),
        chain
            .group
            .and_then(|g| g.policy.as_ref())
            .map(|p| &p.value),
        driver,
    );
    if policy.require_identity && driver == Driver::Exec {
        ctx.warn(
            chain.node,
            &chain.node.span,
            "require_identity is true, but driver \"exec\" cannot report which machine it \
             controls: this node's machine will never be powered off or its volumes released \
             automatically (set require_identity = false in the node's or its group's policy)",
        );
    }
    Some(NodeTarget {
        name: name.to_string(),
        origin: super::model::Origin::Inventory {
            file: ctx.src.display.clone(),
            line: ctx.src.line_of(chain.node.span.start),
        },
        metal3_host: None,
        group: chain.group.and_then(|g| match &g.subject {
            Subject::Group(n) => Some(n.clone()),
            _ => None,
        }),
        power,
        fallback,
        policy,
    })
}

/// Resolves the power source of `chain` (a node's own settings, or one fallback
/// entry alone) and its driver. Every problem is reported; None if there was any.
pub(crate) fn power_source(
    ctx: &mut Ctx<'_>,
    name: &str,
    chain: &Chain<'_>,
) -> Option<(PowerSource, Driver)> {
    let Some(driver) = chain.pick(|l| &l.driver) else {
        if chain.invalid(&["driver"]) {
            return None;
        }
        let help = if matches!(chain.node.subject, Subject::Fallback(..)) {
            "every fallback entry names its own driver, e.g. { driver = \"exec\", agent = ... }"
        } else {
            "set driver = \"redfish\" (or \"ipmi\", \"aws\", \"vsphere\", \"kubevirt\", \"exec\") on \
             the node, its group or in [defaults]"
        };
        ctx.error(
            chain.node,
            &chain.node.span,
            "no `driver` is set",
            Some(help.into()),
        );
        return None;
    };
    let before = ctx.diags.error_count();
    let from = (!std::ptr::eq(driver.layer, chain.node)).then_some(driver.layer);
    check_applicable(ctx, chain.node, driver.val.value, from);
    let timeouts = timeouts(ctx, chain);
    let power = match driver.val.value {
        Driver::Redfish => targets::redfish(ctx, name, chain, timeouts),
        Driver::Ipmi => targets::ipmi(ctx, name, chain, timeouts),
        Driver::Aws => targets::aws(ctx, name, chain, timeouts),
        Driver::Exec => targets::exec(ctx, name, chain, timeouts),
        Driver::Vsphere => targets::vsphere(ctx, name, chain, timeouts),
        Driver::Kubevirt => targets::kubevirt(ctx, name, chain, timeouts),
    };
    if ctx.diags.error_count() > before {
        return None;
    }
    Some((power?, driver.val.value))
}

/// Effective timeouts. Only explicitly written values can conflict: an unset one
/// takes its built-in default moved into the range its written neighbours allow
/// (`request_timeout = "3s"` alone gives a 3s connect timeout, not an error about
/// the 5s default).
fn timeouts(ctx: &mut Ctx<'_>, chain: &Chain<'_>) -> Timeouts {
    let d = Timeouts::default();
    let connect = chain.pick(|l| &l.connect_timeout);
    let request = chain.pick(|l| &l.request_timeout);
    let operation = chain.pick(|l| &l.operation_timeout);
    let retries = chain.pick(|l| &l.retries);
    let set = |p: Option<Picked<'_, Duration>>| p.map(|p| p.val.value);
    let request_v = set(request).unwrap_or_else(|| {
        let low = set(connect).unwrap_or(Duration::ZERO);
        let high = set(operation).unwrap_or(Duration::MAX).max(low);
        d.request.clamp(low, high)
    });
    let out = Timeouts {
        connect: set(connect).unwrap_or(d.connect.min(request_v)),
        request: request_v,
        operation: set(operation).unwrap_or(d.operation.max(request_v)),
        retries: retries.map_or(d.retries, |p| p.val.value),
    };
    let pairs = if request.is_some() {
        vec![
            (("connect_timeout", connect), ("request_timeout", request)),
            (
                ("request_timeout", request),
                ("operation_timeout", operation),
            ),
        ]
    } else {
        vec![(
            ("connect_timeout", connect),
            ("operation_timeout", operation),
        )]
    };
    for ((short_name, short), (long_name, long)) in pairs {
        let (Some(short), Some(long)) = (short, long) else {
            continue;
        };
        if short.val.value <= long.val.value {
            continue;
        }
        // Report where the more specific of the two is written.
        let at = if rank(short.layer) > rank(long.layer) {
            short
        } else {
            long
        };
        let show = |p: Picked<'_, Duration>| {
            let origin = from_where(p.layer, at.layer);
            format!("{}{origin}", humantime::format_duration(p.val.value))
        };
        ctx.error(
            at.layer,
            &at.val.key,
            format!(
                "{short_name} ({}) is longer than {long_name} ({})",
                show(short),
                show(long)
            ),
            Some(
                "a request includes its connect and an operation its requests: keep \
                 connect_timeout <= request_timeout <= operation_timeout"
                    .into(),
            ),
        );
    }
    out
}

/// Records a use of `insecure = true` (warned once per definition, with a node count).
pub(crate) fn note_insecure(ctx: &mut Ctx<'_>, picked: Picked<'_, bool>) {
    let entry = ctx
        .insecure
        .entry(picked.val.key.start)
        .or_insert_with(|| (picked.layer.subject.clone(), picked.val.key.clone(), 0));
    entry.2 += 1;
}
