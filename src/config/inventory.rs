//! `inventory.toml`: from text to the resolved [`Inventory`].
//!
//! The file has three tables: `[defaults]`, `[groups.<name>]` and `[nodes.<name>]`.
//! Every level is read and every node resolved even after a problem was found, so one
//! run reports every broken node; the inventory is returned only if nothing was wrong.

use std::collections::BTreeMap;

use toml::de::{DeTable, DeValue};

use super::diagnostic::{Diagnostics, Source, Span, Subject};
use super::fields::{Entry, closest, unknown_key};
use super::layer::Layer;
use super::machines::{self, Machine};
use super::model::{Inventory, SecuritySettings};
use super::node_name;
use super::paths::BaseDir;
use super::policy::ClusterPolicy;
use super::resolve::{self, Chain, Ctx};
use super::{document, fields};

const TOP_KEYS: &[&str] = &["defaults", "groups", "nodes"];

const ADD_NODE_HELP: &str = "add a table per Kubernetes node to the inventory, e.g.\n\
     [nodes.worker-1]\n\
     endpoint = \"https://worker-1-bmc.mgmt.example.com\"";

/// The inventory's levels, as written.
struct Levels {
    defaults: Layer,
    groups: BTreeMap<String, Layer>,
    /// In file order.
    nodes: Vec<(String, Layer)>,
    /// Where `nodes` is, if present.
    nodes_span: Option<Span>,
}

/// What `nodefence.toml` says about reading the inventory.
#[derive(Clone, Copy)]
pub(crate) struct Settings<'a> {
    pub security: &'a SecuritySettings,
    pub policy: &'a ClusterPolicy,
    pub confirm: crate::power::confirm::ConfirmPolicy,
    /// BareMetalHosts are a source too (`[metal3] hosts`): the file may hold no node.
    pub allow_empty: bool,
}

/// Reads, resolves and validates the inventory in `src`.
pub(crate) fn load(
    src: &Source,
    base: &BaseDir,
    settings: &Settings<'_>,
    env: &dyn Fn(&str) -> Option<String>,
    diags: &mut Diagnostics,
) -> Option<Inventory> {
    let Settings {
        security,
        policy,
        confirm,
        allow_empty,
    } = *settings;
    let table = document::parse(src, diags)?;
    let levels = read_levels(src, &table, base, diags);
    // With BareMetalHosts as a source, the file may hold only the overrides: none.
    if levels.nodes.is_empty() && !allow_empty {
        diags.error(
            src,
            levels.nodes_span.as_ref(),
            &Subject::File,
            "the inventory has no nodes",
            Some(ADD_NODE_HELP.into()),
        );
    }
    for (name, layer) in &levels.nodes {
        if let Some(problem) = node_name::problem(name) {
            let help = match node_name::suggestion(name) {
                Some(s) => format!("did you mean [nodes.{s}]? The key must equal the Node's name"),
                None => "the key must equal the Kubernetes Node's name (kubectl get nodes)".into(),
            };
            let message = format!("\"{name}\" is not a valid Kubernetes node name: it {problem}");
            diags.error(src, Some(&layer.span), &layer.subject, message, Some(help));
        }
    }

    let mut ctx = Ctx::new(src, env, security, policy, confirm, diags);
    for layer in levels.groups.values().chain([&levels.defaults]) {
        if let Some(driver) = &layer.driver {
            resolve::check_applicable(&mut ctx, layer, driver.value, None);
        }
    }
    let mut nodes = BTreeMap::new();
    let mut placed = Vec::new();
    for (name, layer) in &levels.nodes {
        // A misread name or group (already reported) would only cause misleading errors.
        if layer.stray_table || layer.invalid.contains(&"group") {
            continue;
        }
        let group = match &layer.group {
            None => None,
            Some(g) => match levels.groups.get(&g.value) {
                Some(group) => Some(group),
                None => {
                    missing_group(&mut ctx, layer, g, &levels.groups);
                    continue;
                }
            },
        };
        let chain = Chain {
            node: layer,
            group,
            defaults: &levels.defaults,
        };
        if let Some(target) = resolve::node(&mut ctx, name, &chain) {
            nodes.insert(name.clone(), target);
        }
        placed.extend(Machine::of_levels(&chain, name, &layer.span));
    }
    warn_insecure(&mut ctx, &levels);
    warn_unused_groups(&mut ctx, &levels);

    machines::check(src, &placed, diags);
    (!diags.has_errors()).then_some(Inventory { nodes })
}

fn read_levels(
    src: &Source,
    table: &DeTable<'_>,
    base: &BaseDir,
    diags: &mut Diagnostics,
) -> Levels {
    let mut levels = Levels {
        defaults: Layer::empty(Subject::Defaults, 0..0),
        groups: BTreeMap::new(),
        nodes: Vec::new(),
        nodes_span: None,
    };
    for entry in Entry::all(table) {
        let result = match entry.name {
            "defaults" => entry.table().map(|t| {
                levels.defaults =
                    Layer::parse(Subject::Defaults, entry.value.span(), t, base, src, diags);
            }),
            "groups" => entry.table().map(|t| {
                for (name, value) in named_tables(src, t, "group", diags) {
                    let subject = Subject::Group(name.clone());
                    let layer = Layer::parse(subject, value.0, value.1, base, src, diags);
                    levels.groups.insert(name, layer);
                }
            }),
            "nodes" => entry.table().map(|t| {
                levels.nodes_span = Some(entry.key.clone());
                for (name, value) in named_tables(src, t, "node", diags) {
                    let subject = Subject::Node(name.clone());
                    let layer = Layer::parse(subject, value.0, value.1, base, src, diags);
                    levels.nodes.push((name, layer));
                }
            }),
            other => Err(unknown_key(
                other,
                &entry.key,
                TOP_KEYS,
                "at the top of the inventory",
            )),
        };
        if let Err(p) = result {
            diags.error(src, Some(&p.span), &Subject::File, p.message, p.help);
        }
    }
    levels.nodes.sort_by_key(|(_, l)| l.span.start);
    levels
}

/// The sub-tables of `[groups]` or `[nodes]`; anything else is reported.
fn named_tables<'t, 'i>(
    src: &Source,
    table: &'t DeTable<'i>,
    what: &str,
    diags: &mut Diagnostics,
) -> Vec<(String, (Span, &'t DeTable<'i>))> {
    let mut out = Vec::new();
    for entry in Entry::all(table) {
        let name = entry.name.to_string();
        match entry.value.get_ref() {
            DeValue::Table(t) => out.push((name, (entry.value.span(), t))),
            other => {
                let subject = if what == "node" {
                    Subject::Node(name.clone())
                } else {
                    Subject::Group(name.clone())
                };
                diags.error(
                    src,
                    Some(&entry.key),
                    &subject,
                    format!("a {what} must be a table, found {}", other.type_str()),
                    Some(format!(
                        "write it as a table: [{what}s.{name}] followed by its settings, one per line"
                    )),
                );
            }
        }
    }
    out
}

fn missing_group(
    ctx: &mut Ctx<'_>,
    layer: &Layer,
    g: &fields::Val<String>,
    groups: &BTreeMap<String, Layer>,
) {
    let names: Vec<&str> = groups.keys().map(String::as_str).collect();
    let help = match closest(&g.value, &names) {
        _ if names.is_empty() => format!("no groups are defined; add [groups.{}]", g.value),
        Some(c) => format!("did you mean \"{c}\"? Defined groups: {}", names.join(", ")),
        None => format!("defined groups: {}", names.join(", ")),
    };
    ctx.error(
        layer,
        &g.span,
        format!("group \"{}\" does not exist", g.value),
        Some(help),
    );
}

/// One warning per `insecure = true` in use, with the number of nodes it affects.
fn warn_insecure(ctx: &mut Ctx<'_>, levels: &Levels) {
    let uses = std::mem::take(&mut ctx.insecure);
    for (subject, span, count) in uses.into_values() {
        let layer = levels
            .nodes
            .iter()
            .map(|(_, l)| l)
            .chain(levels.groups.values())
            .chain([&levels.defaults])
            .find(|l| l.subject == subject);
        if let Some(layer) = layer {
            let nodes = if count == 1 {
                "1 node".into()
            } else {
                format!("{count} nodes")
            };
            ctx.warn(
                layer,
                &span,
                format!(
                    "`insecure = true`: BMC TLS certificates are not verified ({nodes}); anyone \
                     on the management network could impersonate the BMC. Prefer ca_file"
                ),
            );
        }
    }
}

fn warn_unused_groups(ctx: &mut Ctx<'_>, levels: &Levels) {
    for (name, group) in &levels.groups {
        let used = levels
            .nodes
            .iter()
            .any(|(_, n)| n.group.as_ref().is_some_and(|g| &g.value == name));
        if !used {
            ctx.warn(group, &group.span, "no node uses this group");
        }
    }
}
