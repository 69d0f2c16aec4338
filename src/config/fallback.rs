//! `fallback`: the further power methods of a node (its fencing topology).
//!
//! A node or a group may list, in order, further ways to reach a machine's power:
//! `fallback = [{ driver = "exec", agent = "/usr/sbin/fence_apc", ... }]`. Each entry
//! is written like a node's own settings, with its own `driver`, and is resolved on
//! its own: it inherits nothing from the node, its group or `[defaults]` (a PDU agent
//! has nothing to share with a BMC). `{node}` is substituted as everywhere else.
//!
//! A node's `fallback` replaces its group's entirely (no merging; an empty array on a
//! node removes the group's). `fallback` cannot be set in `[defaults]`, and an entry
//! cannot carry `group`, `policy` or `fallback` of its own.

use toml::de::DeValue;

use super::diagnostic::{Diagnostics, Source, Subject};
use super::fields::{Entry, Problem, Val};
use super::layer::Layer;
use super::model::PowerSource;
use super::paths::BaseDir;
use super::resolve::{self, Chain, Ctx};

const EXAMPLE: &str = "fallback = [{ driver = \"exec\", agent = \"/usr/sbin/fence_apc\", \
                       options = { ip = \"pdu-1\", plug = \"7\" } }]";

/// True when `key` written at `subject` is read here rather than as a plain field.
pub(crate) fn handles(subject: &Subject, key: &str) -> bool {
    key == "fallback" || (matches!(subject, Subject::Fallback(..)) && key == "policy")
}

/// Reads a `fallback` array (or refuses `fallback`/`policy` where they cannot be).
/// Problems with the key itself go to `problems` (reported for `layer`); problems
/// inside an entry are reported for that entry.
pub(crate) fn read(
    layer: &mut Layer,
    e: &Entry<'_, '_>,
    base: &BaseDir,
    src: &Source,
    diags: &mut Diagnostics,
    problems: &mut Vec<Problem>,
) {
    match &layer.subject {
        Subject::Fallback(..) => {
            let help = if e.name == "policy" {
                "a policy belongs to the node (or its group), not to one of its power methods"
            } else {
                "fallbacks do not nest: list every method, in order, in the node's one \
                 `fallback` array"
            };
            problems.push(Problem::new(
                &e.key,
                format!("`{}` cannot be set inside a fallback entry", e.name),
                Some(help.into()),
            ));
            layer.invalid.push(if e.name == "policy" {
                "policy"
            } else {
                "fallback"
            });
            return;
        }
        Subject::Node(_) | Subject::Group(_) => {}
        Subject::Defaults | Subject::File => {
            problems.push(Problem::new(
                &e.key,
                "`fallback` cannot be set in [defaults]",
                Some(
                    "a fencing topology names specific devices (a PDU and its plug): set \
                     `fallback` on a node or a group"
                        .into(),
                ),
            ));
            layer.invalid.push("fallback");
            return;
        }
    }
    let DeValue::Array(items) = e.value.get_ref() else {
        problems.push(Problem::new(
            &e.value.span(),
            format!(
                "`fallback` must be an array of tables, found {}",
                e.value.get_ref().type_str()
            ),
            Some(format!("write it like {EXAMPLE}")),
        ));
        layer.invalid.push("fallback");
        return;
    };
    let mut entries = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let n = i + 1;
        let DeValue::Table(table) = item.get_ref() else {
            problems.push(Problem::new(
                &item.span(),
                format!(
                    "fallback {n} must be a table, found {}",
                    item.get_ref().type_str()
                ),
                Some(format!("write each method as an inline table: {EXAMPLE}")),
            ));
            continue;
        };
        let subject = Subject::Fallback(Box::new(layer.subject.clone()), n);
        entries.push(Layer::parse(subject, item.span(), table, base, src, diags));
    }
    if entries.len() != items.len() {
        layer.invalid.push("fallback");
    }
    layer.fallback = Some(Val::new(entries, e.key.clone(), e.value.span()));
    layer.keys.push(("fallback", e.key.clone()));
}

/// The node's fallback methods, in order: the node's `fallback`, else its group's,
/// else none. None if an entry could not be resolved (every problem is reported).
pub(crate) fn resolve(
    ctx: &mut Ctx<'_>,
    name: &str,
    chain: &Chain<'_>,
) -> Option<Vec<PowerSource>> {
    let written = [Some(chain.node), chain.group]
        .into_iter()
        .flatten()
        .find_map(|l| l.fallback.as_ref());
    let Some(written) = written else {
        return Some(Vec::new());
    };
    // An entry inherits nothing: its chain is the entry alone.
    let nothing = Layer::empty(Subject::Defaults, 0..0);
    let mut sources = Vec::new();
    let mut ok = true;
    for entry in &written.value {
        if entry.stray_table {
            ok = false;
            continue;
        }
        let entry_chain = Chain {
            node: entry,
            group: None,
            defaults: &nothing,
        };
        match resolve::power_source(ctx, name, &entry_chain) {
            Some((source, _)) => sources.push(source),
            None => ok = false,
        }
    }
    ok.then_some(sources)
}

/// Warns when a hung power method would keep a fallback's Off from being confirmed:
/// the topology reads status level by level, so while an earlier method hangs every
/// reading waits its `operation_timeout` first, and `confirm_readings` such readings
/// must fit in `confirm_timeout`.
pub(crate) fn check_timeouts(
    ctx: &mut Ctx<'_>,
    chain: &Chain<'_>,
    primary: &PowerSource,
    fallback: &[PowerSource],
) {
    if fallback.is_empty() {
        return;
    }
    let confirm = ctx.confirm;
    let readings = confirm.readings.max(1);
    // Every level but the last may be the one hanging in front of the answer.
    let ahead: std::time::Duration = std::iter::once(primary)
        .chain(fallback)
        .take(fallback.len())
        .map(|s| s.timeouts().operation)
        .sum();
    let needed = ahead * readings + confirm.interval * (readings - 1);
    if needed <= confirm.timeout {
        return;
    }
    let show = |d: std::time::Duration| humantime::format_duration(d).to_string();
    ctx.warn(
        chain.node,
        &chain.node.span,
        format!(
            "with `fallback`, while an earlier power method hangs every status reading first \
             waits its operation_timeout: {readings} confirmation readings x {} exceed \
             confirm_timeout ({}), so a machine powered off by the last fallback could not be \
             confirmed Off; shorten the earlier methods' operation_timeout or raise \
             confirm_timeout in nodefence.toml",
            show(ahead),
            show(confirm.timeout)
        ),
    );
}
