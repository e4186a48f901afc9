//! The slot half of the proof: which computation every slot's state holds, followed symbolically.
//!
//! A state is named by the computation that made it, not by its values: the start state is `0`,
//! and a row that feeds token `t` to a state read as `(conv, rest)` makes the terms
//! `conv(conv, rest, t)` and `rest(conv, rest, t)` (hash-consed, so two states are the same term
//! exactly when the same steps made them). The conv windows are followed apart from the rest of
//! the state because an engine may address them apart (`StateIndex::Row`).
//!
//! A plan is correct for its trace when every row that belongs to a sequence reads the term the
//! sequence's history makes from the start state, and every sequence live at the end holds it: by
//! induction over the steps, each slot's state is then the state of its sequence run alone, so the
//! batch computes what the single-sequence program computes, and (once the prover has shown the
//! program computes the graph's step) what the graph computes. The first row (or end state) that
//! reads another term is where the interpreters must find the disagreement; the two terms are
//! different computations, which on a checkpoint of random weights give different values.
//!
//! The symbolic run takes exactly the engine's order of effects (rows in order, a snapshot of the
//! row's slot before its step, padding on a scratch state), so it predicts the engine interpreter's
//! state, not an idealised engine's.

use std::collections::{HashMap, VecDeque};

use super::plan::{Lowered, SlotOp};
use super::schedule::Seq;
use super::{BatchProgram, StateIndex};

/// A slot's state as terms: its conv windows' and the rest's.
type Pair = (u32, u32);

/// What the symbolic run finds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finding {
    /// Every row reads, and every live sequence ends with, its own sequence's state.
    Proved,
    /// The first place a sequence reads or ends with another state: the step (the number of steps
    /// for the end state) and the sequence.
    Refuted { seq: Seq, step: usize },
}

/// The hash-consed terms.
#[derive(Default)]
struct Terms {
    ids: HashMap<(bool, u32, u32, u32), u32>,
    has_conv: bool,
}

impl Terms {
    fn intern(&mut self, conv: bool, p: Pair, token: u32) -> u32 {
        let next = self.ids.len() as u32 + 1;
        *self.ids.entry((conv, p.0, p.1, token)).or_insert(next)
    }

    /// The state after feeding `token` to `p`. A program without conv windows keeps them `0`.
    fn step(&mut self, p: Pair, token: u32) -> Pair {
        let conv = if self.has_conv { self.intern(true, p, token) } else { 0 };
        (conv, self.intern(false, p, token))
    }

    /// The state a history makes from the start state.
    fn of(&mut self, history: &[u32]) -> Pair {
        history.iter().fold((0, 0), |p, &t| self.step(p, t))
    }
}

/// A storage of the pool: its state and snapshots (newest first).
#[derive(Clone, Default)]
struct Storage {
    state: Pair,
    snaps: VecDeque<Pair>,
}

/// Runs `lowered.plan` on `pool` symbolically and compares each row with `lowered.trace`. The plan
/// must be valid ([`super::plan::SlotPlan::validate`]).
pub fn follow(pool: &BatchProgram, lowered: &Lowered) -> Finding {
    let mut terms = Terms { has_conv: pool.has_conv(), ..Terms::default() };
    let mut store = vec![Storage::default(); pool.slots];
    let mut storage_of: Vec<usize> = (0..pool.slots).collect();
    let mut step = 0;
    for op in &lowered.plan.ops {
        match *op {
            SlotOp::Claim { slot } => storage_of[slot] = slot,
            SlotOp::Zero { slot } => store[storage_of[slot]] = Storage::default(),
            SlotOp::Copy { from, to } => store[storage_of[to]] = store[storage_of[from]].clone(),
            SlotOp::Share { from, to } => storage_of[to] = storage_of[from],
            SlotOp::Free { .. } => {}
            SlotOp::Restore { slot, back } => {
                let s = &mut store[storage_of[slot]];
                let back = back.min(s.snaps.len());
                if back > 0 {
                    s.state = s.snaps[back - 1];
                    s.snaps.drain(..back);
                }
            }
            SlotOp::Prefill { slot, ref tokens, .. } => {
                // A prefill runs alone on its slot's storage, every state of it, token after token
                // (its own correctness is `prefill::prove`'s); its one row is its last token's.
                let at = storage_of[slot];
                let read = store[at].state;
                if let Some(m) = lowered.trace.steps.get(step).and_then(|m| m.first()) {
                    let before = m.before.len().saturating_sub(tokens.len().saturating_sub(1));
                    if read != terms.of(&m.before[..before]) {
                        return Finding::Refuted { seq: m.seq, step };
                    }
                }
                let s = &mut store[at];
                s.state = tokens.iter().fold(read, |p, &t| terms.step(p, t));
                s.snaps.clear();
                step += 1;
            }
            SlotOp::Step { ref rows } => {
                let meant = lowered.trace.steps.get(step);
                for (r, row) in rows.iter().enumerate() {
                    let mut scratch = Storage::default();
                    let conv_at = match pool.conv_index {
                        StateIndex::Slot => row.slot.map(|s| storage_of[s]),
                        StateIndex::Row => Some(storage_of[r]),
                    };
                    let at = row.slot.map(|s| storage_of[s]);
                    let read_conv = conv_at.map_or(0, |i| store[i].state.0);
                    let slot_state = at.map_or(&mut scratch, |i| &mut store[i]);
                    let read = (read_conv, slot_state.state.1);
                    if let Some(m) = meant.and_then(|m| m.get(r))
                        && read != terms.of(&m.before)
                    {
                        return Finding::Refuted { seq: m.seq, step };
                    }
                    let slot_state = at.map_or(&mut scratch, |i| &mut store[i]);
                    slot_state.snaps.push_front(slot_state.state);
                    slot_state.snaps.truncate(pool.snapshots);
                    let next = terms.step(read, row.token);
                    slot_state.state.1 = next.1;
                    match conv_at {
                        Some(i) => store[i].state.0 = next.0,
                        None => scratch.state.0 = next.0,
                    }
                }
                step += 1;
            }
        }
    }
    for (seq, slot, history) in &lowered.trace.live {
        if store[storage_of[*slot]].state != terms.of(history) {
            return Finding::Refuted { seq: *seq, step };
        }
    }
    Finding::Proved
}
