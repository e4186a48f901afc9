//! The prefill's proof: a prefill computes, for every token of its prompt, what the program's
//! step computes on the state the tokens before it left, by induction over the tokens of each
//! chunk, then over the chunks.
//!
//! The prover ([`crate::prove::prove`]) shows one step of the program is the graph's step, for any
//! state that corresponds to the graph's. This module shows the prefill runs that step, token by
//! token, on the right state. Every piece of state is named by a term of
//! [`crate::prove::slots::SlotTerms`] (built from what the program's Commands read and write, state
//! by state), the tokens by distinct symbols, so that what holds of the terms holds of every prompt.
//! The prefill has the meaning docs/PROGRAM.md gives it: a chunk's conv windows enter as it says
//! (carried, or the start state's), its tokens step in order, each reading the state the token
//! before it left, the state after the chunk is that after its kept token (the conv windows and
//! delta states; the caches and the position move with every token), and token `i`'s attention
//! reads the chunk's first `seen[i]` tokens besides every earlier position.
//!
//! The claim, at every token: it runs once, reads, state by state, exactly the term its own
//! history makes (the tokens before it, stepped one by one from the state the prefill starts
//! from), and its attention sees exactly the chunk's tokens up to itself (`i + 1`: one more shows a
//! later token, one fewer hides its own key or an earlier one's, a definite difference wherever
//! the program attends); and after the last chunk the state is the whole prompt's. It is checked
//! from the start state and from a state two steps in, so that a chunk's entry is judged where the
//! windows hold something. Nothing here runs an interpreter.

use std::fmt;

use crate::engine::program::prefill::{Entry, Prefill};
use crate::engine::program::{Program, StateLayout};
use crate::prove::slots::{Difference, SlotTerm, SlotTerms};

/// The decode steps before the prompt in the second of the two starting states.
pub const STEPS_BEFORE: usize = 2;

/// Where a prefill's token reads (or the prompt ends with) another state than its own history's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefillMismatch {
    /// The decode steps before the prompt (0 or [`STEPS_BEFORE`]).
    pub before: usize,
    /// The prompt's token (its index), `None` for the state after the prompt.
    pub token: Option<usize>,
    /// The chunk running it.
    pub chunk: Option<usize>,
    /// The state, or `logits`, or `attention`.
    pub state: String,
    /// The layer it belongs to.
    pub layer: Option<usize>,
    pub why: String,
}

impl fmt::Display for PrefillMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.token, self.chunk) {
            (Some(t), Some(c)) => write!(f, "token {t} (chunk {c})")?,
            (Some(t), None) => write!(f, "token {t}")?,
            _ => write!(f, "after the prompt")?,
        }
        match self.layer {
            Some(l) => write!(f, ", layer {l}, {}", self.state)?,
            None => write!(f, ", {}", self.state)?,
        }
        write!(f, ": {}", self.why)?;
        if self.before > 0 {
            write!(f, " (after {} decode steps)", self.before)?;
        }
        Ok(())
    }
}

/// The verdict of the prefill's induction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrefillVerdict {
    /// Every token read its own history's state, and the prompt ended with the whole prompt's.
    Proved { tokens: usize, chunks: usize, terms: usize },
    /// A definite difference.
    Refuted { at: Box<PrefillMismatch> },
    /// Only undecided differences (the first), or the program's step has no shape to follow.
    Inconclusive { why: String, at: Option<Box<PrefillMismatch>> },
}

impl PrefillVerdict {
    /// `proved`, `refuted` or `inconclusive`.
    pub fn word(&self) -> &'static str {
        match self {
            PrefillVerdict::Proved { .. } => "proved",
            PrefillVerdict::Refuted { .. } => "refuted",
            PrefillVerdict::Inconclusive { .. } => "inconclusive",
        }
    }

    pub fn is_proved(&self) -> bool {
        matches!(self, PrefillVerdict::Proved { .. })
    }

    /// The refutation's place.
    pub fn refuted_at(&self) -> Option<&PrefillMismatch> {
        match self {
            PrefillVerdict::Refuted { at } => Some(at),
            _ => None,
        }
    }
}

impl fmt::Display for PrefillVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrefillVerdict::Proved { tokens, chunks, terms } => write!(
                f,
                "proved: each of {tokens} tokens in {chunks} chunks reads its own history's state ({terms} terms)"
            ),
            PrefillVerdict::Refuted { at } => write!(f, "refuted: {at}"),
            PrefillVerdict::Inconclusive { at: Some(at), .. } => write!(f, "inconclusive: {at}"),
            PrefillVerdict::Inconclusive { why, at: None } => write!(f, "inconclusive: {why}"),
        }
    }
}

/// The induction's bookkeeping: the terms, each history's state (memoised by its length: every
/// history is a prefix of one), the first undecided difference.
struct Induction<'p> {
    program: &'p Program,
    terms: SlotTerms,
    /// The symbols fed: the steps before, then the prompt.
    fed: Vec<u32>,
    /// `alone[n]`: the state after the first `n` symbols, and the logits of the `n`-th.
    alone: Vec<(Vec<SlotTerm>, Option<SlotTerm>)>,
    undecided: Option<PrefillMismatch>,
}

impl Induction<'_> {
    /// The state after the first `n` symbols fed.
    fn alone(&mut self, n: usize) -> (Vec<SlotTerm>, Option<SlotTerm>) {
        while self.alone.len() <= n {
            let k = self.alone.len() - 1;
            let (logits, after) = self.terms.step(&self.alone[k].0, self.fed[k]);
            self.alone.push((after, Some(logits)));
        }
        self.alone[n].clone()
    }

    /// Compares `got` with `want`: `Some` at a definite difference, recording the first undecided.
    fn compare(
        &mut self,
        got: SlotTerm,
        want: SlotTerm,
        at: impl FnOnce(String) -> PrefillMismatch,
    ) -> Option<PrefillVerdict> {
        match self.terms.differ(got, want)? {
            Difference::Definite(why) => Some(PrefillVerdict::Refuted { at: Box::new(at(why)) }),
            Difference::Undecided(why) => {
                if self.undecided.is_none() {
                    self.undecided = Some(at(why));
                }
                None
            }
        }
    }

    /// The name and layer of state `i`.
    fn state(&self, i: usize) -> (String, Option<usize>) {
        let s = &self.program.states[i];
        (s.name.clone(), s.layer)
    }
}

/// Proves `prefill` (possibly mutated) computes, on `program`, every prompt token's step on its
/// own history's state: from the start state, and after [`STEPS_BEFORE`] decode steps. A prefill
/// that cannot run ([`Prefill::validate`]) is inconclusive: the engine refuses it.
pub fn prove_prefill(program: &Program, prefill: &Prefill) -> PrefillVerdict {
    if let Err(e) = prefill.validate() {
        return PrefillVerdict::Inconclusive { why: format!("the prefill cannot run: {e}"), at: None };
    }
    let mut terms = 0;
    for before in [0, STEPS_BEFORE] {
        match prove_from(program, prefill, before) {
            PrefillVerdict::Proved { terms: t, .. } => terms += t,
            other => return other,
        }
    }
    PrefillVerdict::Proved { tokens: prefill.tokens, chunks: prefill.chunks.len(), terms }
}

/// The induction after `before` decode steps.
fn prove_from(program: &Program, prefill: &Prefill, before: usize) -> PrefillVerdict {
    let terms = match SlotTerms::new(program) {
        Ok(t) => t,
        Err(why) => return PrefillVerdict::Inconclusive { why: format!("the step's shape: {why}"), at: None },
    };
    // Distinct symbols: the steps before are fed `u32::MAX - k`, prompt token `t` is `t`.
    let fed: Vec<u32> = (0..before).map(|k| u32::MAX - k as u32).chain((0..prefill.tokens).map(|t| t as u32)).collect();
    let mut ind = Induction { program, terms, fed, alone: vec![], undecided: None };
    let start = ind.terms.start();
    ind.alone.push((start, None));
    match induct(&mut ind, prefill, before) {
        Some(v) => v,
        None => match ind.undecided {
            Some(at) => PrefillVerdict::Inconclusive { why: at.why.clone(), at: Some(Box::new(at)) },
            None => {
                PrefillVerdict::Proved { tokens: prefill.tokens, chunks: prefill.chunks.len(), terms: ind.terms.len() }
            }
        },
    }
}

/// The induction over the chunks and their tokens: `Some` at a definite difference.
fn induct(ind: &mut Induction<'_>, prefill: &Prefill, before: usize) -> Option<PrefillVerdict> {
    let program = ind.program;
    let is = |i: usize, f: fn(&StateLayout) -> bool| f(&program.states[i].layout);
    let conv = |l: &StateLayout| matches!(l, StateLayout::ConvWindow { .. });
    let recurrent = |l: &StateLayout| matches!(l, StateLayout::ConvWindow { .. } | StateLayout::DeltaState { .. });
    let caches: Vec<usize> = (0..program.states.len())
        .filter(|&i| matches!(program.states[i].layout, StateLayout::KvCache { .. }))
        .collect();
    let mut state = ind.alone(before).0;
    let mut ran = vec![false; prefill.tokens];
    let mismatch = |token: Option<usize>,
                    chunk: Option<usize>,
                    (state, layer): (String, Option<usize>),
                    why: String| { PrefillMismatch { before, token, chunk, state, layer, why } };
    for (c, chunk) in prefill.chunks.iter().enumerate() {
        if chunk.windows == Entry::Start {
            let start = ind.terms.start();
            for i in (0..state.len()).filter(|&i| is(i, conv)) {
                state[i] = start[i];
            }
        }
        let mut kept = None;
        for i in 0..chunk.len {
            let t = chunk.first + i;
            if std::mem::replace(&mut ran[t], true) {
                return Some(PrefillVerdict::Refuted {
                    at: Box::new(mismatch(
                        Some(t),
                        Some(c),
                        ("logits".into(), None),
                        "the token runs a second time".into(),
                    )),
                });
            }
            let (own, _) = ind.alone(before + t);
            for s in 0..state.len() {
                let name = ind.state(s);
                let at = |why| mismatch(Some(t), Some(c), name, why);
                if let Some(v) = ind.compare(state[s], own[s], at) {
                    return Some(v);
                }
            }
            if chunk.seen[i] != i + 1
                && let Some(&cache) = caches.first()
            {
                let (seen, own) = (chunk.seen[i], i + 1);
                let why = if seen > own {
                    format!("its attention sees the chunk's first {seen} tokens, token {} after it among them", t + 1)
                } else {
                    format!(
                        "its attention sees the chunk's first {seen} tokens, its own step's {own}: a key it reads is hidden"
                    )
                };
                return Some(PrefillVerdict::Refuted {
                    at: Box::new(mismatch(Some(t), Some(c), ind.state(cache), why)),
                });
            }
            let (_, after) = ind.terms.step(&state, ind.fed[before + t]);
            state = after;
            if i == chunk.keep {
                kept = Some(state.clone());
            }
        }
        if let Some(kept) = kept {
            for i in (0..state.len()).filter(|&i| is(i, recurrent)) {
                state[i] = kept[i];
            }
        }
    }
    if let Some(t) = ran.iter().position(|r| !r) {
        return Some(PrefillVerdict::Refuted {
            at: Box::new(mismatch(
                Some(t),
                None,
                ("logits".into(), None),
                "the token never runs: no chunk holds it".into(),
            )),
        });
    }
    let (own, _) = ind.alone(before + prefill.tokens);
    for s in 0..state.len() {
        let name = ind.state(s);
        if let Some(v) = ind.compare(state[s], own[s], |why| mismatch(None, None, name, why)) {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{lower::lower_graph, program::Numerics, shim::EngineShim};
    use crate::model::{author::decode_step, presets};
    use crate::prefill::Mutation;

    fn program(preset: &str) -> Program {
        let spec = presets::preset(preset).expect("a preset");
        lower_graph(&EngineShim::default().prepare(&decode_step(&spec).expect("a graph")), Numerics::F32)
            .expect("a program")
    }

    #[test]
    fn a_chunked_prefill_is_proved_at_every_length_and_chunk() {
        let p = program("tiny");
        for tokens in [1, 2, 3, 4, 5, 8, 9, 13] {
            for chunk in [1, 2, 4, 16] {
                let prefill = Prefill::chunked(tokens, chunk).expect("a prefill");
                let v = prove_prefill(&p, &prefill);
                assert!(v.is_proved(), "{tokens} tokens in chunks of {chunk}: {v}");
            }
        }
    }

    #[test]
    fn each_mutation_is_refuted_at_its_token_and_layer() {
        let p = program("tiny");
        let prefill = Prefill::chunked(10, 4).expect("a prefill");
        for m in Mutation::ALL {
            let mutated = m.apply(&prefill).expect("a place for it");
            let v = prove_prefill(&p, &mutated);
            let at = v.refuted_at().unwrap_or_else(|| panic!("{}: {v}", m.name()));
            let (token, layered) = match m {
                Mutation::MaskOffByOne => (Some(0), true),
                Mutation::WindowNotCarried => (Some(4), true),
                Mutation::KeptFromWrongToken => (Some(4), true),
                Mutation::PartialBlockDropped => (Some(8), false),
            };
            assert_eq!(at.token, token, "{}: {v}", m.name());
            assert_eq!(at.layer.is_some(), layered, "{}: {v}", m.name());
        }
    }
}
