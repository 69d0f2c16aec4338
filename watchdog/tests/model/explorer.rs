//! A breadth-first explorer of a finite model: every state reachable from the initial
//! ones, each once, until no step leads anywhere new; the shortest path to the first
//! state that breaks a property. It keeps only a fingerprint of each state seen (128
//! bits: two states taken for one would cut the search short, so the chance of it,
//! about n² / 2¹²⁹ for n states, is nil) and the step that led there (transitions are
//! deterministic: a path is replayed to show it), so tens of millions of states fit.
//! Small on purpose, no dependency.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hash, Hasher};

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
    let init = model.init();
    let mut seen: HashSet<u128, BuildHasherDefault<PassThrough>> = HashSet::default();
    // For each state, its parent's index and the step from it (None: initial, its
    // index in `init` kept as the parent).
    let mut tree: Vec<(u32, Option<M::Step>)> = Vec::new();
    let mut frontier: Vec<(u32, M::State)> = Vec::new();
    for (i, s) in init.iter().enumerate() {
        if seen.insert(fingerprint(s)) {
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
                if !seen.insert(fingerprint(&s)) {
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

/// A state's fingerprint: two lanes of a multiply-and-fold hash (as wyhash and
/// foldhash mix), each word of the state folded into both with different keys, and
/// both finished with a full avalanche. Several times faster than SipHash over the
/// many small fields a state writes.
pub fn fingerprint<T: Hash>(value: &T) -> u128 {
    let mut h = Fingerprint::default();
    value.hash(&mut h);
    h.finish128()
}

/// The hasher of [`fingerprint`] (also a fast 64-bit hasher: [`Hasher::finish`]).
#[derive(Clone, Copy)]
pub struct Fingerprint {
    a: u64,
    b: u64,
}

const K: [u64; 4] = [
    0x243f_6a88_85a3_08d3,
    0x1319_8a2e_0370_7344,
    0xa409_3822_299f_31d0,
    0x082e_fa98_ec4e_6c89,
];

impl Default for Fingerprint {
    fn default() -> Self {
        Self { a: K[2], b: K[3] }
    }
}

fn fold(x: u64, y: u64) -> u64 {
    let m = u128::from(x) * u128::from(y);
    (m as u64) ^ ((m >> 64) as u64)
}

/// A full avalanche of 64 bits (MurmurHash3's finalizer).
fn avalanche(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

impl Fingerprint {
    fn word(&mut self, w: u64) {
        self.a = fold(self.a ^ w, K[0]).wrapping_add(w.rotate_left(29));
        self.b = fold(self.b ^ w.rotate_left(32), K[1]) ^ w;
    }

    fn finish128(&self) -> u128 {
        (u128::from(avalanche(self.a ^ self.b.rotate_left(17))) << 64)
            | u128::from(avalanche(self.b.wrapping_add(self.a)))
    }
}

impl Hasher for Fingerprint {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0; 8];
            w.copy_from_slice(c);
            self.word(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        let mut w = [0; 8];
        w[..rest.len()].copy_from_slice(rest);
        // The length, so that trailing zeros count.
        self.word(u64::from_le_bytes(w) ^ ((bytes.len() as u64) << 56));
    }
    fn write_u8(&mut self, i: u8) {
        self.word(u64::from(i));
    }
    fn write_u16(&mut self, i: u16) {
        self.word(u64::from(i));
    }
    fn write_u32(&mut self, i: u32) {
        self.word(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.word(i);
    }
    fn write_u128(&mut self, i: u128) {
        self.word(i as u64);
        self.word((i >> 64) as u64);
    }
    fn write_usize(&mut self, i: usize) {
        self.word(i as u64);
    }
    fn finish(&self) -> u64 {
        self.finish128() as u64
    }
}

/// The seen set's hasher: its keys are fingerprints already, taken as they are.
#[derive(Default)]
pub struct PassThrough(u64);

impl Hasher for PassThrough {
    fn write(&mut self, _: &[u8]) {
        unreachable!("only fingerprints are hashed")
    }
    fn write_u128(&mut self, i: u128) {
        self.0 = i as u64;
    }
    fn finish(&self) -> u64 {
        self.0
    }
}
