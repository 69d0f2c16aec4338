//! A breadth-first explorer of a finite model: every state reachable from the initial
//! ones, each once, until no step leads anywhere new; the shortest path to the first
//! state that breaks a property. It keeps only a fingerprint of each state seen and
//! the step that led there (transitions are deterministic: a path is replayed to show
//! it), so tens of millions of states fit. Small on purpose, no dependency.

use std::collections::HashSet;
use std::hash::{BuildHasher, Hash};

/// A model: its initial states, the steps possible from a state, what a step does,
/// and the properties every reachable state must keep.
pub trait Model {
    type State: Clone + Eq + Hash;
    type Step: Clone + std::fmt::Display;
    fn init(&self) -> Vec<Self::State>;
    fn steps(&self, state: &Self::State, out: &mut Vec<Self::Step>);
    fn apply(&self, state: &Self::State, step: &Self::Step) -> Self::State;
    /// `Err(property)` when `state` breaks one.
    fn check(&self, state: &Self::State) -> Result<(), String>;
    /// A line about a state, for a counterexample's path.
    fn describe(&self, _state: &Self::State) -> String {
        String::new()
    }
    /// States counted as examples of the interesting outcome (a model that never
    /// reaches one is vacuous).
    fn example(&self, _state: &Self::State) -> bool {
        false
    }
}

/// What a search found.
#[derive(Debug)]
pub struct Report {
    pub states: usize,
    pub examples: usize,
    pub depth: usize,
    /// The property broken and the steps from an initial state to the state that
    /// broke it.
    pub violation: Option<(String, Vec<String>)>,
}

/// Explores every state reachable from `model.init()`, stopping at the first
/// violation (breadth first: one of the shortest). Panics beyond `limit` states.
pub fn explore<M: Model>(model: &M, limit: usize) -> Report {
    let hasher = std::hash::RandomState::new();
    let init = model.init();
    let mut seen: HashSet<u64> = HashSet::new();
    // For each state, its parent's index and the step from it (None: initial, its
    // index in `init` kept as the parent).
    let mut tree: Vec<(u32, Option<M::Step>)> = Vec::new();
    let mut frontier: Vec<(u32, M::State)> = Vec::new();
    for (i, s) in init.iter().enumerate() {
        if seen.insert(hasher.hash_one(s)) {
            frontier.push((tree.len() as u32, s.clone()));
            tree.push((i as u32, None));
        }
    }
    let mut examples = 0;
    let mut depth = 0;
    let mut steps = Vec::new();
    while !frontier.is_empty() {
        let mut next = Vec::new();
        for (i, state) in frontier {
            if let Err(property) = model.check(&state) {
                return Report {
                    states: tree.len(),
                    examples,
                    depth,
                    violation: Some((property, replay(model, &init, &tree, i))),
                };
            }
            if model.example(&state) {
                examples += 1;
            }
            steps.clear();
            model.steps(&state, &mut steps);
            for step in &steps {
                let s = model.apply(&state, step);
                if !seen.insert(hasher.hash_one(&s)) {
                    continue;
                }
                assert!(
                    tree.len() < limit,
                    "more than {limit} states: the model is larger than intended"
                );
                next.push((tree.len() as u32, s));
                tree.push((i, Some(step.clone())));
            }
        }
        frontier = next;
        depth += 1;
        if std::env::var_os("NODEFENCE_MODEL_PROGRESS").is_some() {
            eprintln!(
                "depth {depth}: {} states, frontier {}",
                tree.len(),
                frontier.len()
            );
        }
    }
    Report {
        states: tree.len(),
        examples,
        depth,
        violation: None,
    }
}

/// The steps to state `i`, each with what it led to.
fn replay<M: Model>(
    model: &M,
    init: &[M::State],
    tree: &[(u32, Option<M::Step>)],
    mut i: u32,
) -> Vec<String> {
    let mut path = Vec::new();
    while let (parent, Some(step)) = &tree[i as usize] {
        path.push(step.clone());
        i = *parent;
    }
    path.reverse();
    let mut state = init[tree[i as usize].0 as usize].clone();
    let mut out = vec!["start".to_string()];
    for step in path {
        state = model.apply(&state, &step);
        out.push(format!("{step} → {}", model.describe(&state)));
    }
    out
}
