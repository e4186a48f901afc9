//! The per-slot proof: a slot plan computes, for every sequence of its schedule, what the program
//! computes for that sequence alone, by induction over the plan's operations.
//!
//! The prover ([`crate::prove::prove`]) shows one step of the program is the graph's step, for any
//! state that corresponds to the graph's. This module extends that induction to a slot pool. Every
//! piece of every slot's state is named by a term of [`crate::prove::slots::SlotTerms`], built from
//! what the program's Commands read and write, state by state. The operations have the meaning
//! docs/PROGRAM.md gives them: a claim gives the slot its own storage (holding whatever it held: an
//! unknown term before the plan), a zero makes it the start state, a copy copies state and snapshots,
//! a share makes the slot another name of the source's storage, a free leaves the storage, a restore
//! by `n` takes the `n`-th snapshot, and a step runs its rows in order, each reading each state
//! where the pool addresses it (its slot's storage; a conv window by row when the pool indexes it
//! so; a padding row on a scratch start state), snapshotting its slot's storage, and writing each
//! state back where it read it.
//!
//! The claim, checked at every row and at the end: each row of a sequence reads, state by state,
//! exactly the term its history makes from the start state (its sequence's state after its own
//! previous step: admit is the start state, a fork its source's, a rollback by `n` the state `n`
//! steps back), and its logits are the term of its history and token; each sequence live at the
//! end holds its history's term. Padding rows and writes into other slots need no rule of their
//! own: what they change is caught where a sequence reads it. When every check holds, by induction
//! over the operations every sequence's state is its state alone, so with a proved program every
//! sequence computes what the graph computes alone.
//!
//! The verdict is three-valued: proved; refuted at the first *definite* difference (the sequence,
//! step, row, slot and state, and why: another token, the start state against a stepped one);
//! inconclusive when the only differences are undecided (a slot read without ever being zeroed or
//! copied holds whatever its storage held, which may be the start state). Nothing here runs an
//! interpreter: neither [`super::run`] nor the reference.

use std::collections::{HashMap, VecDeque};
use std::fmt;

use super::plan::{Lowered, SlotOp};
use super::schedule::Seq;
use super::{BatchProgram, StateIndex};
use crate::engine::program::StateLayout;
use crate::ir::Graph;
use crate::prove::slots::{Difference, SlotTerm, SlotTerms};
use crate::prove::{ProofVerdict, prove};

/// Where a sequence reads (or ends with) a state other than its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotMismatch {
    pub seq: Seq,
    /// The step (0-based); the number of steps for the end state.
    pub step: usize,
    /// The row, `None` for the end state.
    pub row: Option<usize>,
    /// The slot the sequence sits in.
    pub slot: usize,
    /// The state read (`name@slot`, the slot it was read from), or `logits`.
    pub state: String,
    /// How it differs from the sequence's own.
    pub why: String,
}

impl fmt::Display for SlotMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.row {
            Some(r) => write!(
                f,
                "{} at step {} (row {r}, slot @{}) reads {}: {}",
                self.seq, self.step, self.slot, self.state, self.why
            ),
            None => write!(f, "{} ends (slot @{}) with {}: {}", self.seq, self.slot, self.state, self.why),
        }
    }
}

/// The verdict of the slot induction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotVerdict {
    /// Every row reads, and every live sequence ends with, its own sequence's state.
    Proved { rows: usize, ends: usize, terms: usize },
    /// A definite difference. `undecided_before` says an undecided one came first.
    Refuted { at: Box<SlotMismatch>, undecided_before: bool },
    /// Only undecided differences (the first one), or the program's step has no shape to follow.
    Inconclusive { why: String, at: Option<Box<SlotMismatch>> },
}

impl SlotVerdict {
    /// `proved`, `refuted` or `inconclusive`.
    pub fn word(&self) -> &'static str {
        match self {
            SlotVerdict::Proved { .. } => "proved",
            SlotVerdict::Refuted { .. } => "refuted",
            SlotVerdict::Inconclusive { .. } => "inconclusive",
        }
    }

    /// The sequence and step of a refutation.
    pub fn refuted_at(&self) -> Option<(Seq, usize)> {
        match self {
            SlotVerdict::Refuted { at, .. } => Some((at.seq, at.step)),
            _ => None,
        }
    }
}

impl fmt::Display for SlotVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SlotVerdict::Proved { rows, ends, terms } => {
                write!(f, "proved: {rows} rows and {ends} end states read their own sequence's state ({terms} terms)")
            }
            SlotVerdict::Refuted { at, undecided_before } => {
                write!(f, "refuted: {at}")?;
                if *undecided_before {
                    write!(f, " (after an undecided difference)")?;
                }
                Ok(())
            }
            SlotVerdict::Inconclusive { at: Some(at), .. } => write!(f, "inconclusive: {at}"),
            SlotVerdict::Inconclusive { why, at: None } => write!(f, "inconclusive: {why}"),
        }
    }
}

/// A storage of the pool: its state and snapshots (newest first), a term per state.
#[derive(Clone)]
struct Storage {
    state: Vec<SlotTerm>,
    snaps: VecDeque<Vec<SlotTerm>>,
}

/// The induction's bookkeeping: the terms, each history's state (memoised), the first undecided
/// difference.
struct Induction<'p> {
    pool: &'p BatchProgram,
    terms: SlotTerms,
    /// A history's state, and the logits of its last step.
    alone: HashMap<Vec<u32>, (Vec<SlotTerm>, Option<SlotTerm>)>,
    undecided: Option<(SlotMismatch, String)>,
}

impl Induction<'_> {
    /// The state `history` makes from the start state, and the logits of its last token.
    fn alone(&mut self, history: &[u32]) -> (Vec<SlotTerm>, Option<SlotTerm>) {
        let mut known = history.len();
        while known > 0 && !self.alone.contains_key(&history[..known]) {
            known -= 1;
        }
        if known == 0 && !self.alone.contains_key(&history[..0]) {
            let start = self.terms.start();
            self.alone.insert(Vec::new(), (start, None));
        }
        for n in known..history.len() {
            let before = self.alone[&history[..n]].0.clone();
            let (logits, after) = self.terms.step(&before, history[n]);
            self.alone.insert(history[..=n].to_vec(), (after, Some(logits)));
        }
        self.alone[history].clone()
    }

    /// Compares `got` with `want`: `Some` on a definite difference (the verdict), recording the
    /// first undecided one.
    fn compare(
        &mut self,
        got: SlotTerm,
        want: SlotTerm,
        at: impl FnOnce(String) -> SlotMismatch,
    ) -> Option<SlotVerdict> {
        match self.terms.differ(got, want)? {
            Difference::Definite(why) => {
                Some(SlotVerdict::Refuted { at: Box::new(at(why)), undecided_before: self.undecided.is_some() })
            }
            Difference::Undecided(why) => {
                if self.undecided.is_none() {
                    self.undecided = Some((at(why.clone()), why));
                }
                None
            }
        }
    }
}

/// Proves the slot induction for `lowered` (its plan possibly mutated; its trace the schedule's
/// meaning) on `pool`. The plan should be valid ([`super::plan::SlotPlan::validate`]); an
/// operation on a slot outside the pool is inconclusive.
pub(crate) fn prove_slots(pool: &BatchProgram, lowered: &Lowered) -> SlotVerdict {
    let terms = match SlotTerms::new(&pool.program) {
        Ok(t) => t,
        Err(why) => return SlotVerdict::Inconclusive { why: format!("the step's shape: {why}"), at: None },
    };
    let mut ind = Induction { pool, terms, alone: HashMap::new(), undecided: None };
    match induct(&mut ind, lowered) {
        Ok(Some(v)) => v,
        Ok(None) => match ind.undecided {
            Some((at, why)) => SlotVerdict::Inconclusive { why, at: Some(Box::new(at)) },
            None => {
                let rows = lowered.trace.steps.iter().map(Vec::len).sum();
                SlotVerdict::Proved { rows, ends: lowered.trace.live.len(), terms: ind.terms.len() }
            }
        },
        Err(why) => SlotVerdict::Inconclusive { why, at: None },
    }
}

/// The induction over the plan's operations: `Ok(Some)` at a definite difference, `Ok(None)` when
/// the plan ends with none, `Err` when an operation has no meaning on the pool.
fn induct(ind: &mut Induction<'_>, lowered: &Lowered) -> Result<Option<SlotVerdict>, String> {
    let pool = ind.pool;
    let n = pool.program.states.len();
    let by_row: Vec<bool> = pool
        .program
        .states
        .iter()
        .map(|s| pool.conv_index == StateIndex::Row && matches!(s.layout, StateLayout::ConvWindow { .. }))
        .collect();
    let mut store: Vec<Storage> =
        (0..pool.slots).map(|k| Storage { state: ind.terms.held(k), snaps: VecDeque::new() }).collect();
    let mut storage_of: Vec<usize> = (0..pool.slots).collect();
    let outside = |op: usize, slot: usize| format!("op {op}: slot {slot} is outside the pool of {}", pool.slots);
    let mut step = 0;
    for (op, o) in lowered.plan.ops.iter().enumerate() {
        let of = |slot: usize| storage_of.get(slot).copied().ok_or_else(|| outside(op, slot));
        match *o {
            SlotOp::Claim { slot } => {
                of(slot)?;
                storage_of[slot] = slot;
            }
            SlotOp::Zero { slot } => {
                let k = of(slot)?;
                store[k] = Storage { state: ind.terms.start(), snaps: VecDeque::new() };
            }
            SlotOp::Copy { from, to } => {
                let (f, t) = (of(from)?, of(to)?);
                store[t] = store[f].clone();
            }
            SlotOp::Share { from, to } => {
                let f = of(from)?;
                of(to)?;
                storage_of[to] = f;
            }
            SlotOp::Free { slot } => {
                of(slot)?;
            }
            SlotOp::Restore { slot, back } => {
                // Past the snapshots the storage holds (only storage two slots share can be: each
                // slot's restores are validated against its own), the oldest held; none, no change.
                let s = &mut store[of(slot)?];
                let back = back.min(s.snaps.len());
                if back > 0 {
                    s.state = s.snaps[back - 1].clone();
                    s.snaps.drain(..back);
                }
            }
            SlotOp::Prefill { slot, ref tokens, .. } => {
                // The prefill on its slot's storage, every state of it, as its tokens' steps one
                // after another (that it computes them is `prefill::prove`'s induction); its one
                // row, the last token's, is checked as a step's row is: its state read at the
                // prefill's start and its logits at the end.
                let k = of(slot)?;
                let meant = lowered.trace.steps.get(step).and_then(|m| m.first());
                let mut read = store[k].state.clone();
                if let Some(m) = meant {
                    let before = m.before.len().saturating_sub(tokens.len().saturating_sub(1));
                    let (want, _) = ind.alone(&m.before[..before]);
                    for i in 0..n {
                        let state = format!("{}@{k}", pool.program.states[i].name);
                        let at = |why| SlotMismatch { seq: m.seq, step, row: Some(0), slot, state, why };
                        if let Some(v) = ind.compare(read[i], want[i], at) {
                            return Ok(Some(v));
                        }
                    }
                }
                let mut logits = None;
                for &t in tokens {
                    let (l, outs) = ind.terms.step(&read, t);
                    (logits, read) = (Some(l), outs);
                }
                if let (Some(m), Some(got)) = (meant, logits) {
                    let mut with = m.before.clone();
                    with.push(m.token);
                    if let Some(w) = ind.alone(&with).1 {
                        let at =
                            |why| SlotMismatch { seq: m.seq, step, row: Some(0), slot, state: "logits".into(), why };
                        if let Some(v) = ind.compare(got, w, at) {
                            return Ok(Some(v));
                        }
                    }
                }
                let s = &mut store[k];
                s.state = read;
                s.snaps.clear();
                step += 1;
            }
            SlotOp::Step { ref rows } => {
                let meant = lowered.trace.steps.get(step);
                for (r, row) in rows.iter().enumerate() {
                    let at = row.slot.map(of).transpose()?;
                    let conv_at = storage_of.get(r).copied();
                    let addr: Vec<Option<usize>> =
                        (0..n).map(|i| if by_row[i] { conv_at.or(at) } else { at }).collect();
                    let scratch = ind.terms.start();
                    let read: Vec<SlotTerm> =
                        (0..n).map(|i| addr[i].map_or(scratch[i], |k| store[k].state[i])).collect();
                    let (logits, outs) = ind.terms.step(&read, row.token);
                    if let Some(m) = meant.and_then(|m| m.get(r)) {
                        let (want, _) = ind.alone(&m.before);
                        let mut with = m.before.clone();
                        with.push(m.token);
                        let want_logits = ind.alone(&with).1;
                        let slot = row.slot.unwrap_or(usize::MAX);
                        for i in 0..n {
                            let state = match addr[i] {
                                Some(k) => format!("{}@{k}", pool.program.states[i].name),
                                None => format!("{} of a scratch state", pool.program.states[i].name),
                            };
                            let at = |why| SlotMismatch { seq: m.seq, step, row: Some(r), slot, state, why };
                            if let Some(v) = ind.compare(read[i], want[i], at) {
                                return Ok(Some(v));
                            }
                        }
                        if let Some(w) = want_logits {
                            let at = |why| SlotMismatch {
                                seq: m.seq,
                                step,
                                row: Some(r),
                                slot,
                                state: "logits".into(),
                                why,
                            };
                            if let Some(v) = ind.compare(logits, w, at) {
                                return Ok(Some(v));
                            }
                        }
                    }
                    if let Some(k) = at {
                        let s = &mut store[k];
                        s.snaps.push_front(s.state.clone());
                        s.snaps.truncate(pool.snapshots);
                    }
                    for i in 0..n {
                        if let Some(k) = addr[i] {
                            store[k].state[i] = outs[i];
                        }
                    }
                }
                step += 1;
            }
        }
    }
    for (seq, slot, history) in &lowered.trace.live {
        let k = *storage_of.get(*slot).ok_or_else(|| format!("the end: slot {slot} is outside the pool"))?;
        let (want, _) = ind.alone(history);
        for (i, &w) in want.iter().enumerate() {
            let got = store[k].state[i];
            let state = format!("{}@{k}", pool.program.states[i].name);
            let at = |why| SlotMismatch { seq: *seq, step, row: None, slot: *slot, state, why };
            if let Some(v) = ind.compare(got, w, at) {
                return Ok(Some(v));
            }
        }
    }
    Ok(None)
}

/// The batch's proof: the one-sequence step (authored ≡ fused ≡ program, for every state and
/// step) and the slot induction over the plan. Proved only when both are.
#[derive(Clone, Debug)]
pub(crate) struct BatchProof {
    pub step: ProofVerdict,
    pub slots: SlotVerdict,
}

impl BatchProof {
    /// `proved` when both halves are, `refuted` when either is, else `inconclusive`.
    pub fn word(&self) -> &'static str {
        match (self.step.word(), self.slots.word()) {
            ("proved", "proved") => "proved",
            ("refuted", _) | (_, "refuted") => "refuted",
            _ => "inconclusive",
        }
    }
}

impl fmt::Display for BatchProof {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let step = match &self.step {
            ProofVerdict::Proved(p) => format!("proved ({} outputs over {} commands)", p.outputs.len(), p.commands),
            other => other.to_string(),
        };
        write!(f, "{}: one step {step}; slots {}", self.word(), self.slots)
    }
}

/// Proves a lowered schedule on `pool`: the program's step against `authored` and `fused`, then the
/// slot induction.
pub(crate) fn prove_batch(authored: &Graph, fused: &Graph, pool: &BatchProgram, lowered: &Lowered) -> BatchProof {
    BatchProof { step: prove(authored, fused, &pool.program), slots: prove_slots(pool, lowered) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::plan::lower_schedule;
    use crate::engine::{Numerics, lower::lower_graph, shim::EngineShim};
    use crate::model::{author::decode_step, presets};

    fn pool(slots: usize, batch: usize, snapshots: usize) -> BatchProgram {
        let spec = presets::preset("tiny").expect("the tiny preset");
        let graph = EngineShim::default().prepare(&decode_step(&spec).expect("a graph"));
        let program = lower_graph(&graph, Numerics::F32).expect("a program");
        BatchProgram::new(program, slots, batch, snapshots, 16).expect("a pool")
    }

    fn lowered(pool: &BatchProgram, schedule: &str) -> Lowered {
        lower_schedule(&schedule.parse().expect("a schedule"), pool).expect("a valid schedule")
    }

    #[test]
    fn a_clean_schedule_is_proved() {
        let p = pool(2, 2, 2);
        let l = lowered(&p, "admit s0 @0\ndecode s0=3\nfork s0 -> s1 @1\ndecode s1=4 s0=5\nrollback s1 1\ndecode s1=9");
        let v = prove_slots(&p, &l);
        assert!(matches!(v, SlotVerdict::Proved { rows: 4, ends: 2, .. }), "{v}");
    }

    #[test]
    fn a_rollback_to_the_wrong_snapshot_is_refuted_at_its_sequence_step_and_slot() {
        let p = pool(2, 1, 3);
        let mut l = lowered(&p, "admit s0 @1\ndecode s0=3\ndecode s0=4\ndecode s0=5\nrollback s0 1\ndecode s0=6");
        let Some(SlotOp::Restore { back, .. }) = l.plan.ops.iter_mut().find(|o| matches!(o, SlotOp::Restore { .. }))
        else {
            panic!("no restore")
        };
        *back = 2;
        match prove_slots(&p, &l) {
            SlotVerdict::Refuted { at, undecided_before: false } => {
                assert_eq!((at.seq, at.step, at.row, at.slot), (Seq(0), 3, Some(0), 1), "{at}");
            }
            v => panic!("expected a refutation, got {v}"),
        }
    }

    #[test]
    fn prefills_admitted_after_a_fork_and_after_a_rollback_are_proved() {
        let p = pool(2, 2, 2);
        let schedule = "admit s0 @0\nprefill s0 3,1,4,1,5\ndecode s0=9\nfork s0 -> s1 @1\nprefill s1 2,6\n\
                        decode s1=5 s0=3\nrollback s0 1\nprefill s0 5,8,9,7,9,3\ndecode s0=2 s1=3";
        let l = lowered(&p, schedule);
        let v = prove_slots(&p, &l);
        assert!(matches!(v, SlotVerdict::Proved { rows: 8, ends: 2, .. }), "{v}");
    }

    #[test]
    fn a_prefill_into_another_slot_is_refuted_at_its_sequence_and_step() {
        let p = pool(2, 2, 2);
        let mut l = lowered(&p, "admit s0 @0\nadmit s1 @1\ndecode s0=1 s1=2\nprefill s1 7,7,7\ndecode s1=4");
        let Some(SlotOp::Prefill { slot, .. }) = l.plan.ops.iter_mut().find(|o| matches!(o, SlotOp::Prefill { .. }))
        else {
            panic!("no prefill")
        };
        *slot = 0;
        match prove_slots(&p, &l) {
            SlotVerdict::Refuted { at, .. } => assert_eq!((at.seq, at.step), (Seq(1), 1), "{at}"),
            v => panic!("expected a refutation, got {v}"),
        }
    }

    #[test]
    fn a_slot_never_zeroed_is_undecided_not_refuted() {
        let p = pool(2, 1, 1);
        let mut l = lowered(&p, "admit s0 @1\ndecode s0=3");
        l.plan.ops.retain(|o| !matches!(o, SlotOp::Zero { .. }));
        let v = prove_slots(&p, &l);
        assert!(matches!(v, SlotVerdict::Inconclusive { at: Some(_), .. }), "{v}");
    }
}
