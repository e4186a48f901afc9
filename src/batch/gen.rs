//! Generated schedules and batch mutations, drawn from bytes, each with the outcome it must have;
//! and the case-file form of a batched case (`tests/corpus_batch/*.case`).
//!
//! A schedule is drawn event by event from a [`Draw`]: admissions into free slots (reusing freed
//! ones), decodes of any subset of the live sequences (partial batches), finishes, forks into free
//! slots and rollbacks within the snapshots kept; now and then a rollback one past them, which the
//! pool must refuse by name. A mutation is one of the engine bugs the real engines shipped
//! ([`MutationKind`]), applied to the lowered plan (or the pool) at a drawn site. The outcome a
//! mutated case must have is decided before anything runs: the plan's validation refuses it by
//! name, or the symbolic run of [`super::shadow`] proves it harmless here or names the sequence and
//! step where a sequence first reads a state that is not its own; the interpreters must then
//! agree, or disagree at exactly that sequence and step.
//!
//! `check --batch` runs covering schedules ([`check_cases`], [`draw_covering`]): each holds every
//! [`EventKind`] its pool allows, in the form in which a slot bug shows, whatever the seed.

use std::fmt;
use std::str::FromStr;

use super::check::{BatchVerdict, check_lowered};
use super::plan::{Lowered, SlotOp, lower_schedule};
use super::prove::{SlotVerdict, prove_slots};
use super::schedule::{Event, Schedule, ScheduleParseError, Seq};
use super::shadow::{Finding, follow};
use super::{BatchProgram, StateIndex};
use crate::check::CheckError;
use crate::engine::program::Program;
use crate::r#gen::draw::Draw;
use crate::ir::Graph;
use crate::model::Checkpoint;

/// The KV positions per slot of a generated pool: more than any drawn history reaches.
pub const CAPACITY: usize = 64;

/// The longest prompt a generated prefill runs: it crosses a chunk boundary
/// ([`super::plan::PREFILL_CHUNK`]).
const LONGEST_PROMPT: usize = 6;

/// The kinds of batch mutation, each modelled on a real engine bug (docs/SOUNDNESS.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MutationKind {
    /// A row's slot index off by one (club-3090 #896/#920: a slot decoded on another's state).
    SlotOffByOne,
    /// The reset of a reused slot skipped (llama.cpp #29092: state carried across requests).
    ResetSkipped,
    /// A row reads a slot that was freed (a stale row→slot table).
    ReadFreedSlot,
    /// A fork shares the parent's storage instead of copying it (vLLM #43559).
    ForkShares,
    /// A fork claims the slot without copying the state (modular #6681: prefix caching skipped
    /// the tokens without rebuilding the recurrent state).
    ForkSkipsCopy,
    /// A rollback restores the wrong snapshot (vLLM #43559: stale state under speculation).
    RollbackWrongSnapshot,
    /// Padding rows write a slot's state (vLLM PR #28202: batch ≠ number of decodes).
    PaddingWrites,
    /// The conv windows indexed by batch row instead of slot (vLLM-Kunlun PR #252).
    ConvByRow,
    /// An admission claims a slot that is still live (ik_llama.cpp #1932).
    ClaimLiveSlot,
}

/// Every mutation kind.
pub const KINDS: [MutationKind; 9] = [
    MutationKind::SlotOffByOne,
    MutationKind::ResetSkipped,
    MutationKind::ReadFreedSlot,
    MutationKind::ForkShares,
    MutationKind::ForkSkipsCopy,
    MutationKind::RollbackWrongSnapshot,
    MutationKind::PaddingWrites,
    MutationKind::ConvByRow,
    MutationKind::ClaimLiveSlot,
];

impl MutationKind {
    /// The kind's name in case files.
    pub fn name(self) -> &'static str {
        match self {
            MutationKind::SlotOffByOne => "slot-off-by-one",
            MutationKind::ResetSkipped => "reset-skipped",
            MutationKind::ReadFreedSlot => "read-freed-slot",
            MutationKind::ForkShares => "fork-shares",
            MutationKind::ForkSkipsCopy => "fork-skips-copy",
            MutationKind::RollbackWrongSnapshot => "rollback-wrong-snapshot",
            MutationKind::PaddingWrites => "padding-writes",
            MutationKind::ConvByRow => "conv-by-row",
            MutationKind::ClaimLiveSlot => "claim-live-slot",
        }
    }
}

/// A batch mutation at its site: `op` indexes the lowered plan's operations, `row` a step's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// Row `row` of step `op` reads slot `(slot + 1) mod slots`.
    SlotOffByOne { op: usize, row: usize },
    /// The `Zero` at `op` is dropped.
    ResetSkipped { op: usize },
    /// Row `row` of step `op` reads the freed slot `slot`.
    ReadFreedSlot { op: usize, row: usize, slot: usize },
    /// The `Copy` at `op` becomes a `Share`.
    ForkShares { op: usize },
    /// The `Copy` at `op` is dropped.
    ForkSkipsCopy { op: usize },
    /// The `Restore` at `op` goes back `back` steps.
    RollbackWrongSnapshot { op: usize, back: usize },
    /// The padding row `row` of step `op` runs on slot `slot`.
    PaddingWrites { op: usize, row: usize, slot: usize },
    /// The pool indexes conv windows by row.
    ConvByRow,
    /// The `Claim` at `op` claims slot `slot`.
    ClaimLiveSlot { op: usize, slot: usize },
}

impl Mutation {
    pub fn kind(&self) -> MutationKind {
        match self {
            Mutation::SlotOffByOne { .. } => MutationKind::SlotOffByOne,
            Mutation::ResetSkipped { .. } => MutationKind::ResetSkipped,
            Mutation::ReadFreedSlot { .. } => MutationKind::ReadFreedSlot,
            Mutation::ForkShares { .. } => MutationKind::ForkShares,
            Mutation::ForkSkipsCopy { .. } => MutationKind::ForkSkipsCopy,
            Mutation::RollbackWrongSnapshot { .. } => MutationKind::RollbackWrongSnapshot,
            Mutation::PaddingWrites { .. } => MutationKind::PaddingWrites,
            Mutation::ConvByRow => MutationKind::ConvByRow,
            Mutation::ClaimLiveSlot { .. } => MutationKind::ClaimLiveSlot,
        }
    }

    /// Applies the mutation to a lowered plan and its pool; `false` (and nothing changed) when the
    /// site is not the operation the mutation needs.
    pub fn apply(&self, pool: &mut BatchProgram, lowered: &mut Lowered) -> bool {
        let ops = &mut lowered.plan.ops;
        let slots = pool.slots;
        fn row_of(ops: &mut [SlotOp], op: usize, row: usize) -> Option<&mut Option<usize>> {
            match ops.get_mut(op) {
                Some(SlotOp::Step { rows }) => rows.get_mut(row).map(|r| &mut r.slot),
                _ => None,
            }
        }
        match *self {
            Mutation::SlotOffByOne { op, row } => match row_of(ops, op, row) {
                Some(Some(s)) => *s = (*s + 1) % slots,
                _ => return false,
            },
            Mutation::ReadFreedSlot { op, row, slot } | Mutation::PaddingWrites { op, row, slot } => {
                let want_pad = matches!(self, Mutation::PaddingWrites { .. });
                match row_of(ops, op, row) {
                    Some(s) if s.is_none() == want_pad => *s = Some(slot),
                    _ => return false,
                }
            }
            Mutation::ResetSkipped { op } => match ops.get(op) {
                Some(SlotOp::Zero { .. }) => {
                    ops.remove(op);
                }
                _ => return false,
            },
            Mutation::ForkSkipsCopy { op } => match ops.get(op) {
                Some(SlotOp::Copy { .. }) => {
                    ops.remove(op);
                }
                _ => return false,
            },
            Mutation::ForkShares { op } => match ops.get_mut(op) {
                Some(o @ SlotOp::Copy { .. }) => {
                    let SlotOp::Copy { from, to } = *o else { return false };
                    *o = SlotOp::Share { from, to };
                }
                _ => return false,
            },
            Mutation::RollbackWrongSnapshot { op, back } => match ops.get_mut(op) {
                Some(SlotOp::Restore { back: b, .. }) => *b = back,
                _ => return false,
            },
            Mutation::ClaimLiveSlot { op, slot } => match ops.get_mut(op) {
                Some(SlotOp::Claim { slot: s }) => *s = slot,
                _ => return false,
            },
            Mutation::ConvByRow => {
                if pool.conv_index == StateIndex::Row {
                    return false;
                }
                pool.conv_index = StateIndex::Row;
            }
        }
        true
    }
}

impl fmt::Display for Mutation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.kind().name();
        match *self {
            Mutation::SlotOffByOne { op, row } => write!(f, "{name} op={op} row={row}"),
            Mutation::ResetSkipped { op } | Mutation::ForkShares { op } | Mutation::ForkSkipsCopy { op } => {
                write!(f, "{name} op={op}")
            }
            Mutation::ReadFreedSlot { op, row, slot } | Mutation::PaddingWrites { op, row, slot } => {
                write!(f, "{name} op={op} row={row} slot={slot}")
            }
            Mutation::RollbackWrongSnapshot { op, back } => write!(f, "{name} op={op} back={back}"),
            Mutation::ConvByRow => write!(f, "{name}"),
            Mutation::ClaimLiveSlot { op, slot } => write!(f, "{name} op={op} slot={slot}"),
        }
    }
}

/// Why a line of a batched case file does not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CaseFileError {
    #[error("line {line}: {why}")]
    Line { line: usize, why: String },
    #[error("the case has no `{0}` line")]
    Missing(&'static str),
    #[error("{0}")]
    Schedule(#[from] ScheduleParseError),
}

/// Reads `key=value` words into the values of `keys`, in order.
fn fields(words: &[&str], keys: &[&str]) -> Result<Vec<usize>, String> {
    if words.len() != keys.len() {
        return Err(format!("expected {} after the name, found `{}`", keys.join("= "), words.join(" ")));
    }
    keys.iter()
        .zip(words)
        .map(|(k, w)| {
            w.strip_prefix(k)
                .and_then(|v| v.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("expected {k}=<n>, found `{w}`"))
        })
        .collect()
}

impl FromStr for Mutation {
    type Err = String;

    fn from_str(text: &str) -> Result<Mutation, String> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let (name, rest) = words.split_first().ok_or("an empty mutation")?;
        let kind = KINDS.into_iter().find(|k| k.name() == *name).ok_or_else(|| format!("no mutation `{name}`"))?;
        Ok(match kind {
            MutationKind::SlotOffByOne => {
                let v = fields(rest, &["op", "row"])?;
                Mutation::SlotOffByOne { op: v[0], row: v[1] }
            }
            MutationKind::ResetSkipped => Mutation::ResetSkipped { op: fields(rest, &["op"])?[0] },
            MutationKind::ForkShares => Mutation::ForkShares { op: fields(rest, &["op"])?[0] },
            MutationKind::ForkSkipsCopy => Mutation::ForkSkipsCopy { op: fields(rest, &["op"])?[0] },
            MutationKind::ReadFreedSlot => {
                let v = fields(rest, &["op", "row", "slot"])?;
                Mutation::ReadFreedSlot { op: v[0], row: v[1], slot: v[2] }
            }
            MutationKind::PaddingWrites => {
                let v = fields(rest, &["op", "row", "slot"])?;
                Mutation::PaddingWrites { op: v[0], row: v[1], slot: v[2] }
            }
            MutationKind::RollbackWrongSnapshot => {
                let v = fields(rest, &["op", "back"])?;
                Mutation::RollbackWrongSnapshot { op: v[0], back: v[1] }
            }
            MutationKind::ConvByRow => {
                fields(rest, &[])?;
                Mutation::ConvByRow
            }
            MutationKind::ClaimLiveSlot => {
                let v = fields(rest, &["op", "slot"])?;
                Mutation::ClaimLiveSlot { op: v[0], slot: v[1] }
            }
        })
    }
}

/// The outcome a batched case must have, and the outcome it had.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchOutcome {
    /// Refused by name (a [`super::BatchError`]'s name).
    Refused(&'static str),
    /// Every sequence computes what it computes alone.
    Agree,
    /// The first disagreement: the sequence and the step.
    Disagree { seq: Seq, step: usize },
    /// The reference was not finite.
    Inconclusive,
}

impl fmt::Display for BatchOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BatchOutcome::Refused(name) => write!(f, "refused {name}"),
            BatchOutcome::Agree => write!(f, "agree"),
            BatchOutcome::Disagree { seq, step } => write!(f, "disagree {seq} step {step}"),
            BatchOutcome::Inconclusive => write!(f, "inconclusive"),
        }
    }
}

impl BatchOutcome {
    /// The outcome a verdict reports.
    pub fn of(verdict: &BatchVerdict) -> BatchOutcome {
        match verdict {
            BatchVerdict::Agree { .. } => BatchOutcome::Agree,
            BatchVerdict::Refused(e) => BatchOutcome::Refused(e.name()),
            BatchVerdict::Disagree(w) => BatchOutcome::Disagree { seq: w.seq, step: w.step },
            BatchVerdict::Inconclusive { .. } => BatchOutcome::Inconclusive,
        }
    }
}

/// The outcome a (possibly mutated) lowered case must have, decided without running it: the
/// plan's validation, then the symbolic run.
pub fn expected(pool: &BatchProgram, lowered: &Lowered) -> BatchOutcome {
    if let Err(e) = lowered.plan.validate(pool) {
        return BatchOutcome::Refused(e.name());
    }
    match follow(pool, lowered) {
        Finding::Proved => BatchOutcome::Agree,
        Finding::Refuted { seq, step } => BatchOutcome::Disagree { seq, step },
    }
}

/// A generated batched case: the pool's shape, a schedule, the refusal the generator meant the
/// schedule to have (a rollback past the snapshots), and a mutation (none for a clean case).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchCase {
    pub slots: usize,
    pub max_batch: usize,
    pub snapshots: usize,
    pub schedule: Schedule,
    pub refusal: Option<&'static str>,
    pub mutation: Option<Mutation>,
}

/// A live sequence while drawing.
struct Drawn {
    seq: Seq,
    slot: usize,
    kept: usize,
}

/// Draws a pool shape and a schedule of `4..=14` events on tokens below `vocab`.
pub(crate) fn draw_schedule(d: &mut Draw, vocab: usize) -> BatchCase {
    let slots = d.range(2, 4);
    let max_batch = d.range(1, slots);
    let snapshots = d.range(1, 3);
    draw_events(d, slots, max_batch, snapshots, vocab)
}

/// Draws a schedule of `4..=14` events on a pool of the given shape, on tokens below `vocab`.
pub(crate) fn draw_events(d: &mut Draw, slots: usize, max_batch: usize, snapshots: usize, vocab: usize) -> BatchCase {
    let slots = slots.max(1);
    let max_batch = max_batch.clamp(1, slots);
    let mut live: Vec<Drawn> = Vec::new();
    let mut next = 0u32;
    let mut events = Vec::new();
    let mut refusal = None;
    let vocab = vocab.clamp(1, u32::MAX as usize);
    for _ in 0..d.range(4, 14) {
        let free: Vec<usize> = (0..slots).filter(|s| live.iter().all(|l| l.slot != *s)).collect();
        match d.below(8) {
            // Admit (also whenever nothing is live).
            c if live.is_empty() || (c < 2 && !free.is_empty()) => {
                let Some(&slot) = (!free.is_empty()).then(|| d.pick(&free)) else { continue };
                live.push(Drawn { seq: Seq(next), slot, kept: 0 });
                events.push(Event::Admit { seq: Seq(next), slot });
                next += 1;
            }
            2..=4 if d.chance(64) => {
                let i = d.below(live.len());
                live[i].kept = 0;
                let tokens = (0..d.range(1, LONGEST_PROMPT)).map(|_| d.below(vocab) as u32).collect();
                events.push(Event::Prefill { seq: live[i].seq, tokens });
            }
            2..=4 => {
                let mut order: Vec<usize> = (0..live.len()).collect();
                for i in (1..order.len()).rev() {
                    order.swap(i, d.below(i + 1));
                }
                let n = d.range(1, max_batch.min(live.len()));
                let rows = order[..n]
                    .iter()
                    .map(|&i| {
                        live[i].kept = (live[i].kept + 1).min(snapshots);
                        (live[i].seq, d.below(vocab) as u32)
                    })
                    .collect();
                events.push(Event::Decode { rows });
            }
            5 => {
                let i = d.below(live.len());
                events.push(Event::Finish { seq: live.remove(i).seq });
            }
            6 if !free.is_empty() => {
                let src = &live[d.below(live.len())];
                let slot = *d.pick(&free);
                let child = Drawn { seq: Seq(next), slot, kept: src.kept };
                events.push(Event::Fork { src: src.seq, new: child.seq, slot });
                live.push(child);
                next += 1;
            }
            _ => {
                let i = d.below(live.len());
                let l = &mut live[i];
                if d.chance(12) {
                    events.push(Event::Rollback { seq: l.seq, n: l.kept + 1 });
                    refusal = Some("rollback-beyond-snapshots");
                    break;
                }
                if l.kept > 0 {
                    let n = d.range(1, l.kept);
                    l.kept -= n;
                    events.push(Event::Rollback { seq: l.seq, n });
                }
            }
        }
    }
    BatchCase { slots, max_batch, snapshots, schedule: Schedule { events }, refusal, mutation: None }
}

/// The kinds of event a schedule of `check --batch` holds, each counted only in the form in which
/// a slot bug shows ([`kinds_of`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    /// A sequence admitted.
    Admit,
    /// A decode step.
    Decode,
    /// A sequence finished.
    Finish,
    /// An admission into a slot a finished sequence left holding another state than the start
    /// state, the new sequence then decoding: a reset skipped on reuse shows.
    Reuse,
    /// A fork of a sequence that has decoded and whose state no other slot holds, the child then
    /// decoding before it is rolled back or finished: a copy of any other slot shows.
    Fork,
    /// A rollback, the sequence then decoding: the restored state is read.
    Rollback,
    /// A decode of fewer rows than the pool's batch, padded.
    Partial,
    /// A prompt run as a prefill, the sequence then decoding: after an admission, a fork, a
    /// rollback or decode steps, as drawn.
    Prefill,
}

/// Every event kind, in the order the command line names them.
pub const EVENT_KINDS: [EventKind; 8] = [
    EventKind::Admit,
    EventKind::Decode,
    EventKind::Finish,
    EventKind::Reuse,
    EventKind::Fork,
    EventKind::Rollback,
    EventKind::Partial,
    EventKind::Prefill,
];

impl EventKind {
    /// The kind's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Admit => "admit",
            EventKind::Decode => "decode",
            EventKind::Finish => "finish",
            EventKind::Reuse => "reuse of a freed slot",
            EventKind::Fork => "fork",
            EventKind::Rollback => "rollback",
            EventKind::Partial => "a partial batch",
            EventKind::Prefill => "a prefill",
        }
    }

    /// Whether a pool of `slots` slots, batches of `max_batch` rows and `snapshots` snapshots can
    /// hold the kind: a fork needs a second slot, a partial batch a batch of two, a rollback a
    /// snapshot.
    pub fn possible(self, slots: usize, max_batch: usize, snapshots: usize) -> bool {
        match self {
            EventKind::Fork => slots >= 2,
            EventKind::Partial => max_batch >= 2,
            EventKind::Rollback => snapshots >= 1,
            _ => true,
        }
    }
}

/// A live sequence of a [`Follow`]: its slot, its history, the snapshots its slot holds.
struct Followed {
    seq: Seq,
    slot: usize,
    history: Vec<u32>,
    kept: usize,
}

/// A schedule followed event by event: the live sequences, the history whose state each slot's
/// storage holds (empty for the start state; a pool starts zeroed), which slots a sequence has
/// left, and the kinds that have occurred. A kind that needs a later decode (reuse, fork,
/// rollback) waits for it as a pending kind of its sequence, lost if the sequence is finished or
/// rolled back first.
struct Follow {
    max_batch: usize,
    snapshots: usize,
    live: Vec<Followed>,
    storage: std::collections::BTreeMap<usize, Vec<u32>>,
    freed: std::collections::BTreeSet<usize>,
    pending: Vec<(Seq, EventKind)>,
    kinds: std::collections::BTreeSet<EventKind>,
    events: Vec<Event>,
    next: u32,
}

impl Follow {
    fn new(max_batch: usize, snapshots: usize) -> Follow {
        Follow {
            max_batch,
            snapshots,
            live: vec![],
            storage: Default::default(),
            freed: Default::default(),
            pending: vec![],
            kinds: Default::default(),
            events: vec![],
            next: 0,
        }
    }

    fn at(&self, seq: Seq) -> Option<usize> {
        self.live.iter().position(|l| l.seq == seq)
    }

    /// Follows one event; an event the schedule could not hold (a sequence not live) changes
    /// nothing but is kept.
    fn apply(&mut self, e: Event) {
        match &e {
            Event::Admit { seq, slot } => {
                self.kinds.insert(EventKind::Admit);
                if self.freed.contains(slot) && self.storage.get(slot).is_some_and(|h| !h.is_empty()) {
                    self.pending.push((*seq, EventKind::Reuse));
                }
                self.storage.insert(*slot, vec![]);
                self.live.push(Followed { seq: *seq, slot: *slot, history: vec![], kept: 0 });
            }
            Event::Decode { rows } => {
                self.kinds.insert(EventKind::Decode);
                if rows.len() < self.max_batch {
                    self.kinds.insert(EventKind::Partial);
                }
                for &(seq, token) in rows {
                    let Some(i) = self.at(seq) else { continue };
                    for (_, k) in self.pending.iter().filter(|p| p.0 == seq) {
                        self.kinds.insert(*k);
                    }
                    self.pending.retain(|p| p.0 != seq);
                    let l = &mut self.live[i];
                    l.history.push(token);
                    l.kept = (l.kept + 1).min(self.snapshots);
                    self.storage.insert(l.slot, l.history.clone());
                }
            }
            Event::Finish { seq } => {
                self.kinds.insert(EventKind::Finish);
                self.pending.retain(|p| p.0 != *seq);
                if let Some(i) = self.at(*seq) {
                    self.freed.insert(self.live.remove(i).slot);
                }
            }
            Event::Fork { src, new, slot } => {
                if let Some(i) = self.at(*src) {
                    let (from, history, kept) = (self.live[i].slot, self.live[i].history.clone(), self.live[i].kept);
                    let alone = self.storage.iter().all(|(s, h)| *s == from || *h != history);
                    if !history.is_empty() && alone {
                        self.pending.push((*new, EventKind::Fork));
                    }
                    self.storage.insert(*slot, history.clone());
                    self.live.push(Followed { seq: *new, slot: *slot, history, kept });
                }
            }
            Event::Prefill { seq, tokens } => {
                self.kinds.insert(EventKind::Prefill);
                if let Some(i) = self.at(*seq) {
                    for (_, k) in self.pending.iter().filter(|p| p.0 == *seq) {
                        self.kinds.insert(*k);
                    }
                    self.pending.retain(|p| p.0 != *seq);
                    let l = &mut self.live[i];
                    l.history.extend(tokens);
                    l.kept = 0;
                    self.storage.insert(l.slot, l.history.clone());
                }
            }
            Event::Rollback { seq, n } => {
                self.pending.retain(|p| p.0 != *seq);
                if let Some(i) = self.at(*seq) {
                    self.pending.push((*seq, EventKind::Rollback));
                    let l = &mut self.live[i];
                    l.history.truncate(l.history.len().saturating_sub(*n));
                    l.kept = l.kept.saturating_sub(*n);
                    self.storage.insert(l.slot, l.history.clone());
                }
            }
        }
        self.events.push(e);
    }
}

/// The kinds of event `schedule` holds on a pool of batches of `max_batch` rows, each only in the
/// form in which a slot bug shows ([`EventKind`]: a reuse of a slot left holding a state, a fork of
/// a state no other slot holds, a rollback, each followed by a decode of the sequence).
pub fn kinds_of(schedule: &Schedule, max_batch: usize) -> std::collections::BTreeSet<EventKind> {
    let mut f = Follow::new(max_batch, usize::MAX);
    for e in &schedule.events {
        f.apply(e.clone());
    }
    f.kinds
}

/// How many schedules `check --batch` runs per model, on the seeds `seed`, `seed + 1`, ….
pub const CHECK_SCHEDULES: u64 = 3;

/// The snapshots of `check --batch`'s pools.
pub const CHECK_SNAPSHOTS: usize = 2;

/// The schedules `check --batch n` runs per model from `seed`: one covering schedule
/// ([`draw_covering`]) on each of [`CHECK_SCHEDULES`] seeds from `seed`, on a pool of `n` slots,
/// batches of up to `n` rows and [`CHECK_SNAPSHOTS`] snapshots, over tokens below `vocab`; each
/// with its seed.
pub fn check_cases(seed: u64, n: usize, vocab: usize) -> Vec<(u64, BatchCase)> {
    (0..CHECK_SCHEDULES)
        .map(|k| {
            let s = seed.wrapping_add(k);
            let bytes = crate::r#gen::draw::seeded_bytes(s, 1024);
            (s, draw_covering(&mut Draw::new(&bytes), n, n, CHECK_SNAPSHOTS, vocab))
        })
        .collect()
}

/// Draws a schedule that holds every event kind the pool's shape allows ([`EventKind::possible`],
/// as [`kinds_of`] counts them), random in its tokens, its sequences, its slots and its order:
/// sequences admitted into a drawn number of slots and a few events drawn as [`draw_events`]
/// draws them, then each kind still missing, in a drawn order, by a short recipe that always makes
/// it (a sequence that has decoded finished and its slot admitted into and decoded; a sequence
/// decoded until no other slot holds its state, forked into a free slot and the child decoded; a
/// sequence decoded, rolled back and decoded). Every schedule it draws is one the pool runs: no
/// rollback past the snapshots, no history past [`CAPACITY`].
pub fn draw_covering(d: &mut Draw, slots: usize, max_batch: usize, snapshots: usize, vocab: usize) -> BatchCase {
    let slots = slots.max(1);
    let max_batch = max_batch.clamp(1, slots);
    let vocab = vocab.clamp(1, u32::MAX as usize);
    let mut c = Covering { f: Follow::new(max_batch, snapshots), slots, vocab, prefill_next: false };
    for _ in 0..d.range(1, slots) {
        c.admit(d, None);
    }
    for _ in 0..d.below(4) {
        c.random_event(d);
    }
    let mut missing: Vec<EventKind> =
        EVENT_KINDS.into_iter().filter(|k| k.possible(slots, max_batch, snapshots)).collect();
    for i in (1..missing.len()).rev() {
        missing.swap(i, d.below(i + 1));
    }
    for kind in missing {
        if !c.f.kinds.contains(&kind) {
            c.make(d, kind);
        }
    }
    let schedule = Schedule { events: c.f.events };
    BatchCase { slots, max_batch, snapshots, schedule, refusal: None, mutation: None }
}

/// A covering schedule while it is drawn.
struct Covering {
    f: Follow,
    slots: usize,
    vocab: usize,
    /// Whether the next [`Covering::decode`] runs its first sequence's prompt as a prefill instead.
    prefill_next: bool,
}

impl Covering {
    fn free(&self) -> Vec<usize> {
        (0..self.slots).filter(|s| self.f.live.iter().all(|l| l.slot != *s)).collect()
    }

    fn token(&self, d: &mut Draw) -> u32 {
        d.below(self.vocab) as u32
    }

    /// Admits a new sequence into `slot`, or a drawn free one (finishing a drawn live sequence
    /// when none is free).
    fn admit(&mut self, d: &mut Draw, slot: Option<usize>) -> Seq {
        let slot = slot.unwrap_or_else(|| {
            if self.free().is_empty() {
                let i = d.below(self.f.live.len());
                self.f.apply(Event::Finish { seq: self.f.live[i].seq });
            }
            *d.pick(&self.free())
        });
        let seq = Seq(self.f.next);
        self.f.next += 1;
        self.f.apply(Event::Admit { seq, slot });
        seq
    }

    /// A drawn live sequence, admitting one when none is live.
    fn some_live(&mut self, d: &mut Draw) -> Seq {
        if self.f.live.is_empty() {
            return self.admit(d, None);
        }
        self.f.live[d.below(self.f.live.len())].seq
    }

    /// One decode step: the sequences of `must` with drawn tokens, plus a drawn number of other
    /// live sequences, in a drawn order.
    fn decode(&mut self, d: &mut Draw, must: &[Seq]) {
        let mut others: Vec<Seq> = self.f.live.iter().map(|l| l.seq).filter(|s| !must.contains(s)).collect();
        for i in (1..others.len()).rev() {
            others.swap(i, d.below(i + 1));
        }
        let extra = d.below(self.f.max_batch.saturating_sub(must.len()).min(others.len()) + 1);
        let mut seqs: Vec<Seq> = must.iter().copied().chain(others.into_iter().take(extra)).collect();
        for i in (1..seqs.len()).rev() {
            seqs.swap(i, d.below(i + 1));
        }
        let rows = seqs.into_iter().map(|s| (s, self.token(d))).collect();
        self.f.apply(Event::Decode { rows });
    }

    /// One event drawn as [`draw_events`] draws them, within the snapshots.
    fn random_event(&mut self, d: &mut Draw) {
        let free = self.free();
        match d.below(8) {
            c if self.f.live.is_empty() || (c < 2 && !free.is_empty()) => {
                self.admit(d, None);
            }
            2..=4 => {
                let s = self.some_live(d);
                self.decode(d, &[s]);
            }
            5 => {
                let s = self.some_live(d);
                self.f.apply(Event::Finish { seq: s });
            }
            6 if !free.is_empty() => {
                let src = self.some_live(d);
                let (new, slot) = (Seq(self.f.next), *d.pick(&free));
                self.f.next += 1;
                self.f.apply(Event::Fork { src, new, slot });
            }
            _ => {
                let i = d.below(self.f.live.len());
                let (seq, kept) = (self.f.live[i].seq, self.f.live[i].kept);
                if kept > 0 {
                    let n = d.range(1, kept);
                    self.f.apply(Event::Rollback { seq, n });
                }
            }
        }
    }

    /// A drawn live sequence that has decoded (decoding one when none has).
    fn decoded(&mut self, d: &mut Draw) -> Seq {
        let have: Vec<Seq> = self.f.live.iter().filter(|l| !l.history.is_empty()).map(|l| l.seq).collect();
        if !have.is_empty() {
            return *d.pick(&have);
        }
        let s = self.some_live(d);
        self.decode(d, &[s]);
        s
    }

    /// The decode that reads what a kind made (`seq`'s state after a reuse, a fork or a
    /// rollback); when a prefill is to occur there, `seq`'s drawn prompt as a prefill first.
    fn read(&mut self, d: &mut Draw, seq: Seq) {
        if std::mem::take(&mut self.prefill_next) {
            let tokens = (0..d.range(1, LONGEST_PROMPT)).map(|_| self.token(d)).collect();
            self.f.apply(Event::Prefill { seq, tokens });
        }
        self.decode(d, &[seq]);
    }

    /// Makes `kind` occur, in a few events.
    fn make(&mut self, d: &mut Draw, kind: EventKind) {
        match kind {
            EventKind::Admit => {
                self.admit(d, None);
            }
            EventKind::Decode => {
                let s = self.some_live(d);
                self.decode(d, &[s]);
            }
            EventKind::Finish => {
                let s = self.some_live(d);
                self.f.apply(Event::Finish { seq: s });
            }
            EventKind::Partial => {
                let s = self.some_live(d);
                let n = d.range(1, (self.f.max_batch - 1).min(self.f.live.len()));
                let mut seqs: Vec<Seq> = self.f.live.iter().map(|l| l.seq).filter(|x| *x != s).collect();
                for i in (1..seqs.len()).rev() {
                    seqs.swap(i, d.below(i + 1));
                }
                seqs.truncate(n - 1);
                seqs.insert(d.below(seqs.len() + 1), s);
                let rows = seqs.into_iter().map(|s| (s, self.token(d))).collect();
                self.f.apply(Event::Decode { rows });
            }
            EventKind::Reuse => {
                let old = self.decoded(d);
                let slot = self.f.live[self.f.at(old).unwrap_or(0)].slot;
                self.f.apply(Event::Finish { seq: old });
                let new = self.admit(d, Some(slot));
                self.read(d, new);
            }
            EventKind::Fork => {
                let src = self.decoded(d);
                if self.free().is_empty() {
                    let others: Vec<Seq> = self.f.live.iter().map(|l| l.seq).filter(|s| *s != src).collect();
                    self.f.apply(Event::Finish { seq: *d.pick(&others) });
                }
                // Decoded on until no other slot's storage holds its state: each step lengthens
                // its history and changes no other slot's, so this ends (at once with a token no
                // other slot holds after this history, when there is one).
                loop {
                    let i = self.f.at(src).unwrap_or(0);
                    let (from, history) = (self.f.live[i].slot, self.f.live[i].history.clone());
                    let held = |h: &[u32]| self.f.storage.iter().any(|(s, x)| *s != from && x == h);
                    if !held(&history) {
                        break;
                    }
                    let with = |t: u32| [history.as_slice(), &[t]].concat();
                    let drawn = self.token(d);
                    let token = match held(&with(drawn)) {
                        true => (0..self.vocab as u32).find(|t| !held(&with(*t))).unwrap_or(drawn),
                        false => drawn,
                    };
                    self.f.apply(Event::Decode { rows: vec![(src, token)] });
                }
                let (new, slot) = (Seq(self.f.next), *d.pick(&self.free()));
                self.f.next += 1;
                self.f.apply(Event::Fork { src, new, slot });
                self.read(d, new);
            }
            EventKind::Prefill => {
                // A prompt where a slot bug shows: after an admission (a prompt admitted), a fork
                // or a rollback, each then decoding; or on a sequence as it stands.
                let after = [EventKind::Reuse, EventKind::Fork, EventKind::Rollback, EventKind::Admit];
                let kind = *d.pick(&after);
                self.prefill_next = true;
                match kind {
                    EventKind::Fork if self.slots < 2 => {
                        let s = self.some_live(d);
                        self.read(d, s);
                    }
                    EventKind::Rollback if self.f.snapshots == 0 => {
                        let s = self.some_live(d);
                        self.read(d, s);
                    }
                    EventKind::Admit => {
                        let s = self.admit(d, None);
                        self.read(d, s);
                    }
                    other => self.make(d, other),
                }
                self.prefill_next = false;
            }
            EventKind::Rollback => {
                let kept: Vec<Seq> = self.f.live.iter().filter(|l| l.kept > 0).map(|l| l.seq).collect();
                let s = if kept.is_empty() {
                    let s = self.some_live(d);
                    self.decode(d, &[s]);
                    s
                } else {
                    *d.pick(&kept)
                };
                let kept = self.f.live[self.f.at(s).unwrap_or(0)].kept;
                self.f.apply(Event::Rollback { seq: s, n: d.range(1, kept) });
                self.read(d, s);
            }
        }
    }
}

/// The sites of `kind` in a lowered plan on `pool` (empty when the plan has none).
pub(crate) fn sites(kind: MutationKind, pool: &BatchProgram, lowered: &Lowered) -> Vec<Mutation> {
    let ops = &lowered.plan.ops;
    let mut out = Vec::new();
    // Which slots are live, freed, and how often claimed, before each op.
    let mut live = vec![false; pool.slots];
    let mut freed = vec![false; pool.slots];
    let mut claims = vec![0usize; pool.slots];
    for (op, o) in ops.iter().enumerate() {
        match (kind, o) {
            (MutationKind::SlotOffByOne, SlotOp::Step { rows }) if pool.slots > 1 => out.extend(
                rows.iter()
                    .enumerate()
                    .filter(|r| r.1.slot.is_some())
                    .map(|(row, _)| Mutation::SlotOffByOne { op, row }),
            ),
            (MutationKind::ReadFreedSlot, SlotOp::Step { rows }) => {
                for (row, _) in rows.iter().enumerate().filter(|r| r.1.slot.is_some()) {
                    out.extend((0..pool.slots).filter(|&s| freed[s] && !live[s]).map(|slot| Mutation::ReadFreedSlot {
                        op,
                        row,
                        slot,
                    }));
                }
            }
            (MutationKind::PaddingWrites, SlotOp::Step { rows }) => {
                for (row, _) in rows.iter().enumerate().filter(|r| r.1.slot.is_none()) {
                    out.extend((0..pool.slots).map(|slot| Mutation::PaddingWrites { op, row, slot }));
                }
            }
            (MutationKind::ResetSkipped, SlotOp::Zero { slot }) if claims[*slot] > 1 => {
                out.push(Mutation::ResetSkipped { op })
            }
            (MutationKind::ForkShares, SlotOp::Copy { .. }) => out.push(Mutation::ForkShares { op }),
            (MutationKind::ForkSkipsCopy, SlotOp::Copy { .. }) => out.push(Mutation::ForkSkipsCopy { op }),
            (MutationKind::RollbackWrongSnapshot, SlotOp::Restore { back, .. }) => {
                out.push(Mutation::RollbackWrongSnapshot { op, back: back + 1 });
                if *back > 1 {
                    out.push(Mutation::RollbackWrongSnapshot { op, back: back - 1 });
                }
            }
            (MutationKind::ClaimLiveSlot, SlotOp::Claim { .. }) => {
                out.extend((0..pool.slots).filter(|&s| live[s]).map(|slot| Mutation::ClaimLiveSlot { op, slot }));
            }
            _ => {}
        }
        match *o {
            SlotOp::Claim { slot } => {
                live[slot] = true;
                claims[slot] += 1;
            }
            SlotOp::Free { slot } => {
                live[slot] = false;
                freed[slot] = true;
            }
            _ => {}
        }
    }
    if kind == MutationKind::ConvByRow && pool.has_conv() && pool.conv_index == StateIndex::Slot {
        out.push(Mutation::ConvByRow);
    }
    out
}

/// Draws a generated case: a schedule, then (when the first byte says so and the schedule has a
/// site for it) one mutation of a drawn kind at a drawn site.
pub fn draw_case(bytes: &[u8], program: &Program) -> BatchCase {
    let mut d = Draw::new(bytes);
    let mutate = d.below(4) != 0;
    let kind = *d.pick(&KINDS);
    let pick = d.u64();
    let mut case = draw_schedule(&mut d, program.vocab);
    if !mutate || case.refusal.is_some() {
        return case;
    }
    let Ok(pool) = pool_of(&case, program) else { return case };
    let Ok(lowered) = lower_schedule(&case.schedule, &pool) else { return case };
    let s = sites(kind, &pool, &lowered);
    if !s.is_empty() {
        case.mutation = Some(s[(pick % s.len() as u64) as usize]);
    }
    case
}

/// The pool of a case over `program`.
pub(crate) fn pool_of(case: &BatchCase, program: &Program) -> Result<BatchProgram, super::BatchError> {
    BatchProgram::new(program.clone(), case.slots, case.max_batch, case.snapshots, CAPACITY)
}

/// Why a case could not be judged at all.
#[derive(Debug, thiserror::Error)]
pub enum JudgeError {
    #[error("the pool: {0}")]
    Pool(#[from] super::BatchError),
    #[error("mutation {0} names no operation of its kind")]
    NoSite(String),
    #[error("{0}")]
    Check(#[from] CheckError),
}

/// A judged case: the outcome it must have, the one the check gave (with its verdict), and the
/// slot induction's verdict ([`super::prove::prove_slots`]; `None` when the schedule or the plan
/// is refused, so there is nothing to prove).
#[derive(Clone, Debug)]
pub struct Judged {
    pub expected: BatchOutcome,
    pub actual: BatchOutcome,
    pub verdict: BatchVerdict,
    pub proof: Option<SlotVerdict>,
}

/// Judges a case: its expected outcome (the generator's refusal, else validation and the symbolic
/// run of the mutated plan), the slot induction's proof of the valid plan, and the batched check's.
pub fn judge(
    graph: &Graph,
    program: &Program,
    checkpoint: &Checkpoint,
    case: &BatchCase,
) -> Result<Judged, JudgeError> {
    let mut pool = pool_of(case, program)?;
    let mut lowered = match lower_schedule(&case.schedule, &pool) {
        Ok(l) => l,
        Err(e) => {
            let verdict = BatchVerdict::Refused(e);
            let expected = case.refusal.map_or(BatchOutcome::Agree, BatchOutcome::Refused);
            return Ok(Judged { expected, actual: BatchOutcome::of(&verdict), verdict, proof: None });
        }
    };
    if let Some(m) = case.mutation
        && !m.apply(&mut pool, &mut lowered)
    {
        return Err(JudgeError::NoSite(m.to_string()));
    }
    let expected = match case.refusal {
        Some(name) => BatchOutcome::Refused(name),
        None => expected(&pool, &lowered),
    };
    let proof = lowered.plan.validate(&pool).is_ok().then(|| prove_slots(&pool, &lowered));
    let verdict = check_lowered(graph, &pool, checkpoint, &lowered)?;
    Ok(Judged { expected, actual: BatchOutcome::of(&verdict), verdict, proof })
}

/// A batched case file (`tests/corpus_batch/*.case`): `#` comments (what the case caught, in
/// prose), then `preset <name>`, `pool slots=<n> batch=<n> snapshots=<n>`, an optional
/// `mutation <kind> <site>`, `expect <outcome>` (as [`BatchOutcome`] prints), and `schedule` followed by
/// the schedule's text form to the end of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaseFile {
    pub preset: String,
    pub slots: usize,
    pub max_batch: usize,
    pub snapshots: usize,
    pub mutation: Option<Mutation>,
    pub expect: String,
    pub schedule: Schedule,
}

impl CaseFile {
    /// The case to judge (its refusal, if any, is what `expect` says).
    pub fn case(&self) -> BatchCase {
        BatchCase {
            slots: self.slots,
            max_batch: self.max_batch,
            snapshots: self.snapshots,
            schedule: self.schedule.clone(),
            refusal: None,
            mutation: self.mutation,
        }
    }
}

impl FromStr for CaseFile {
    type Err = CaseFileError;

    fn from_str(text: &str) -> Result<CaseFile, CaseFileError> {
        let (mut preset, mut pool, mut mutation, mut expect) = (None, None, None, None);
        let lines: Vec<&str> = text.lines().collect();
        let mut body = None;
        for (i, line) in lines.iter().enumerate() {
            let bad = |why: String| CaseFileError::Line { line: i + 1, why };
            let content = line.split('#').next().unwrap_or("").trim();
            let Some((key, rest)) = content.split_once(' ').or((!content.is_empty()).then_some((content, ""))) else {
                continue;
            };
            match key {
                "preset" => preset = Some(rest.trim().to_string()),
                "pool" => {
                    let words: Vec<&str> = rest.split_whitespace().collect();
                    pool = Some(fields(&words, &["slots", "batch", "snapshots"]).map_err(bad)?);
                }
                "mutation" => mutation = Some(rest.parse::<Mutation>().map_err(bad)?),
                "expect" => expect = Some(rest.trim().to_string()),
                "schedule" => {
                    body = Some(i + 1);
                    break;
                }
                other => return Err(bad(format!("unknown line `{other}`"))),
            }
        }
        let body = body.ok_or(CaseFileError::Missing("schedule"))?;
        let schedule: Schedule = lines[body..].join("\n").parse().map_err(|e: ScheduleParseError| {
            CaseFileError::Schedule(ScheduleParseError { line: e.line + body, kind: e.kind })
        })?;
        let pool = pool.ok_or(CaseFileError::Missing("pool"))?;
        Ok(CaseFile {
            preset: preset.ok_or(CaseFileError::Missing("preset"))?,
            slots: pool[0],
            max_batch: pool[1],
            snapshots: pool[2],
            mutation,
            expect: expect.ok_or(CaseFileError::Missing("expect"))?,
            schedule,
        })
    }
}
