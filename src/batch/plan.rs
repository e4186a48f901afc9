//! The slot plan: what the engine runs for a schedule, in slot operations, and its validation.
//!
//! [`lower_schedule`] is the engine's scheduler: it checks a schedule against the pool (refusing by
//! name a sequence admitted twice, a slot taken while live, a step over the batch, a rollback past
//! the snapshots the slot keeps) and writes one or two [`SlotOp`]s per event. It also writes the
//! [`Trace`]: what each row of each step means for its sequence (the token history it continues),
//! which is what the reference runs. A plan can be written by hand or mutated; the trace stays the
//! schedule's meaning, so a plan that drifts from it is judged against what the schedule asked.

use serde::{Deserialize, Serialize};

use super::schedule::{Event, Schedule, Seq};
use super::{BatchError, BatchProgram};

/// One row of a step: the slot whose state it reads and writes, or `None` for padding (which the
/// engine runs on a scratch state no sequence reads), and the token it feeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    pub slot: Option<usize>,
    pub token: u32,
}

/// A slot operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SlotOp {
    /// The slot becomes live, with storage of its own (whatever it holds).
    Claim { slot: usize },
    /// The slot's state becomes the start state; its snapshots are dropped.
    Zero { slot: usize },
    /// `to`'s state and snapshots become copies of `from`'s.
    Copy { from: usize, to: usize },
    /// `to` becomes another name of `from`'s storage (what a fork must not do to recurrent state).
    Share { from: usize, to: usize },
    /// The slot is no longer live; its storage is left as it is.
    Free { slot: usize },
    /// The slot's state becomes its `back`-th snapshot, newest first; the newer ones are dropped.
    Restore { slot: usize, back: usize },
    /// One step of the batch, row by row: each row's state is snapshotted, then stepped on its token.
    Step { rows: Vec<Row> },
    /// The slot's state runs `tokens` as one prefill in chunks of `chunk` (`Prefill::chunked`),
    /// alone; its snapshots are dropped (a chunked prefill keeps no state per token).
    Prefill { slot: usize, tokens: Vec<u32>, chunk: usize },
}

/// The chunk the scheduler runs a prefill in: small, so that the prompts of generated schedules
/// cross chunk boundaries.
pub const PREFILL_CHUNK: usize = 4;

/// The operations the engine runs, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotPlan {
    pub ops: Vec<SlotOp>,
}

/// One row of a step as the schedule means it: its sequence, the history it continues, its token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceRow {
    pub seq: Seq,
    pub before: Vec<u32>,
    pub token: u32,
}

/// A schedule's meaning per sequence: the rows of every step, and the sequences live at the end
/// with their slots and histories (in sequence order).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    pub steps: Vec<Vec<TraceRow>>,
    pub live: Vec<(Seq, usize, Vec<u32>)>,
}

/// A schedule lowered: the plan the engine runs and the trace the reference runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lowered {
    pub plan: SlotPlan,
    pub trace: Trace,
}

/// A live sequence while lowering: its slot, its history, the snapshots its slot holds.
struct Live {
    slot: usize,
    history: Vec<u32>,
    kept: usize,
}

/// Lowers `schedule` onto `pool`: admit is claim + zero, fork is claim + copy, finish is free,
/// rollback is restore, a prefill is a prefill of the slot in chunks of [`PREFILL_CHUNK`] (a step
/// of the trace whose one row is the prompt's last token), and a decode is a step whose rows name their sequences' slots, padded to
/// the batch with padding rows of token 0.
pub fn lower_schedule(schedule: &Schedule, pool: &BatchProgram) -> Result<Lowered, BatchError> {
    pool.validate()?;
    let mut live: std::collections::BTreeMap<Seq, Live> = Default::default();
    let mut seen = std::collections::BTreeSet::new();
    let mut holder: Vec<Option<Seq>> = vec![None; pool.slots];
    let (mut ops, mut trace) = (Vec::new(), Trace::default());
    for (event, e) in schedule.events.iter().enumerate() {
        let free_slot = |slot: usize, holder: &[Option<Seq>]| match holder.get(slot) {
            None => Err(BatchError::SlotOutOfRange { event, slot, slots: pool.slots }),
            Some(Some(h)) => Err(BatchError::SlotInUse { event, slot, holder: *h }),
            Some(None) => Ok(()),
        };
        let not_live = |seq: Seq| BatchError::SeqNotLive { event, seq };
        match e {
            Event::Admit { seq, slot } => {
                free_slot(*slot, &holder)?;
                if !seen.insert(*seq) {
                    return Err(BatchError::SeqAdmittedTwice { event, seq: *seq });
                }
                holder[*slot] = Some(*seq);
                live.insert(*seq, Live { slot: *slot, history: Vec::new(), kept: 0 });
                ops.extend([SlotOp::Claim { slot: *slot }, SlotOp::Zero { slot: *slot }]);
            }
            Event::Fork { src, new, slot } => {
                let s = live.get(src).ok_or(not_live(*src))?;
                free_slot(*slot, &holder)?;
                if !seen.insert(*new) {
                    return Err(BatchError::SeqAdmittedTwice { event, seq: *new });
                }
                let child = Live { slot: *slot, history: s.history.clone(), kept: s.kept };
                ops.extend([SlotOp::Claim { slot: *slot }, SlotOp::Copy { from: s.slot, to: *slot }]);
                holder[*slot] = Some(*new);
                live.insert(*new, child);
            }
            Event::Finish { seq } => {
                let s = live.remove(seq).ok_or(not_live(*seq))?;
                holder[s.slot] = None;
                ops.push(SlotOp::Free { slot: s.slot });
            }
            Event::Rollback { seq, n } => {
                let s = live.get_mut(seq).ok_or(not_live(*seq))?;
                if *n == 0 {
                    return Err(BatchError::EmptyRollback { event, seq: *seq });
                }
                if *n > s.kept {
                    return Err(BatchError::RollbackBeyondSnapshots { event, seq: *seq, n: *n, kept: s.kept });
                }
                s.kept -= n;
                s.history.truncate(s.history.len() - n);
                ops.push(SlotOp::Restore { slot: s.slot, back: *n });
            }
            Event::Prefill { seq, tokens } => {
                let s = live.get_mut(seq).ok_or(not_live(*seq))?;
                let Some((&last, first)) = tokens.split_last() else {
                    return Err(BatchError::EmptyPrefill { event, seq: *seq });
                };
                let position = s.history.len() + tokens.len() - 1;
                if position >= pool.capacity {
                    return Err(BatchError::CapacityExceeded { event, seq: *seq, position, capacity: pool.capacity });
                }
                s.history.extend(first);
                trace.steps.push(vec![TraceRow { seq: *seq, before: s.history.clone(), token: last }]);
                s.history.push(last);
                s.kept = 0;
                ops.push(SlotOp::Prefill { slot: s.slot, tokens: tokens.clone(), chunk: PREFILL_CHUNK });
            }
            Event::Decode { rows } => {
                if rows.len() > pool.max_batch {
                    return Err(BatchError::BatchTooLarge { event, rows: rows.len(), max_batch: pool.max_batch });
                }
                let mut step = Vec::with_capacity(pool.max_batch);
                let mut meant = Vec::with_capacity(rows.len());
                for (i, &(seq, token)) in rows.iter().enumerate() {
                    if rows[..i].iter().any(|r| r.0 == seq) {
                        return Err(BatchError::SeqTwiceInStep { event, seq });
                    }
                    let s = live.get_mut(&seq).ok_or(not_live(seq))?;
                    if s.history.len() >= pool.capacity {
                        let position = s.history.len();
                        return Err(BatchError::CapacityExceeded { event, seq, position, capacity: pool.capacity });
                    }
                    meant.push(TraceRow { seq, before: s.history.clone(), token });
                    s.history.push(token);
                    s.kept = (s.kept + 1).min(pool.snapshots);
                    step.push(Row { slot: Some(s.slot), token });
                }
                step.resize(pool.max_batch, Row { slot: None, token: 0 });
                ops.push(SlotOp::Step { rows: step });
                trace.steps.push(meant);
            }
        }
    }
    trace.live = live.into_iter().map(|(seq, s)| (seq, s.slot, s.history)).collect();
    Ok(Lowered { plan: SlotPlan { ops }, trace })
}

/// What validation knows of a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Life {
    Unclaimed,
    Live { kept: usize },
    Freed,
}

impl SlotPlan {
    /// The number of steps and prefills (each a step of the trace).
    pub fn steps(&self) -> usize {
        self.ops.iter().filter(|o| matches!(o, SlotOp::Step { .. } | SlotOp::Prefill { .. })).count()
    }

    /// Checks what can be checked of a plan without running it: every slot in the pool; a claim
    /// only of a slot that is not live; every other operation, and every row, only on a live slot;
    /// no slot twice in a step, no step over the batch; a restore by at least one step and at most
    /// the snapshots the slot has taken since it was zeroed or copied (capped at the pool's).
    ///
    /// It tracks which slots are live, not what they hold: what a slot holds is [`super::shadow`]'s
    /// business and the check's.
    pub fn validate(&self, pool: &BatchProgram) -> Result<(), BatchError> {
        pool.validate()?;
        let mut life = vec![Life::Unclaimed; pool.slots];
        for (op, o) in self.ops.iter().enumerate() {
            let range = |slot: usize| {
                if slot < pool.slots {
                    Ok(slot)
                } else {
                    Err(BatchError::PlanSlotOutOfRange { op, slot, slots: pool.slots })
                }
            };
            let kept = |life: &[Life], slot: usize| match life[slot] {
                Life::Live { kept } => Ok(kept),
                _ => Err(BatchError::OpOnDeadSlot { op, slot }),
            };
            match o {
                SlotOp::Claim { slot } => {
                    if let Life::Live { .. } = life[range(*slot)?] {
                        return Err(BatchError::ClaimOfLiveSlot { op, slot: *slot });
                    }
                    life[*slot] = Life::Live { kept: 0 };
                }
                SlotOp::Zero { slot } => {
                    kept(&life, range(*slot)?)?;
                    life[*slot] = Life::Live { kept: 0 };
                }
                SlotOp::Copy { from, to } | SlotOp::Share { from, to } => {
                    let k = kept(&life, range(*from)?)?;
                    kept(&life, range(*to)?)?;
                    life[*to] = Life::Live { kept: k };
                }
                SlotOp::Free { slot } => {
                    kept(&life, range(*slot)?)?;
                    life[*slot] = Life::Freed;
                }
                SlotOp::Prefill { slot, tokens, chunk } => {
                    match life[range(*slot)?] {
                        Life::Unclaimed => return Err(BatchError::ReadsUnclaimedSlot { op, row: 0, slot: *slot }),
                        Life::Freed => return Err(BatchError::ReadsFreedSlot { op, row: 0, slot: *slot }),
                        Life::Live { .. } => {}
                    }
                    if tokens.is_empty() || *chunk == 0 || *chunk > crate::engine::program::prefill::MAX_CHUNK {
                        return Err(BatchError::PlanPrefill { op, tokens: tokens.len(), chunk: *chunk });
                    }
                    life[*slot] = Life::Live { kept: 0 };
                }
                SlotOp::Restore { slot, back } => {
                    let k = kept(&life, range(*slot)?)?;
                    if *back == 0 || *back > k {
                        return Err(BatchError::RestoreBeyondSnapshots { op, slot: *slot, back: *back, kept: k });
                    }
                    life[*slot] = Life::Live { kept: k - back };
                }
                SlotOp::Step { rows } => {
                    if rows.len() > pool.max_batch {
                        return Err(BatchError::PlanBatchTooLarge { op, rows: rows.len(), max_batch: pool.max_batch });
                    }
                    for (row, r) in rows.iter().enumerate() {
                        let Some(slot) = r.slot else { continue };
                        match life[range(slot)?] {
                            Life::Unclaimed => return Err(BatchError::ReadsUnclaimedSlot { op, row, slot }),
                            Life::Freed => return Err(BatchError::ReadsFreedSlot { op, row, slot }),
                            Life::Live { .. } => {}
                        }
                        if rows[..row].iter().any(|p| p.slot == Some(slot)) {
                            return Err(BatchError::SlotTwiceInStep { op, slot });
                        }
                    }
                    for r in rows {
                        if let Some(Life::Live { kept }) = r.slot.map(|s| &mut life[s]) {
                            *kept = (*kept + 1).min(pool.snapshots);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

impl std::fmt::Display for SlotOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SlotOp::Claim { slot } => write!(f, "claim @{slot}"),
            SlotOp::Zero { slot } => write!(f, "zero @{slot}"),
            SlotOp::Copy { from, to } => write!(f, "copy @{from} -> @{to}"),
            SlotOp::Share { from, to } => write!(f, "share @{from} -> @{to}"),
            SlotOp::Free { slot } => write!(f, "free @{slot}"),
            SlotOp::Restore { slot, back } => write!(f, "restore @{slot} {back}"),
            SlotOp::Prefill { slot, tokens, chunk } => {
                let tokens: Vec<String> = tokens.iter().map(u32::to_string).collect();
                write!(f, "prefill @{slot} {} (chunks of {chunk})", tokens.join(","))
            }
            SlotOp::Step { rows } => {
                write!(f, "step")?;
                for r in rows {
                    match r.slot {
                        Some(s) => write!(f, " @{s}={}", r.token)?,
                        None => write!(f, " pad={}", r.token)?,
                    }
                }
                Ok(())
            }
        }
    }
}

impl std::fmt::Display for SlotPlan {
    /// One operation a line, numbered as mutation sites name them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, op) in self.ops.iter().enumerate() {
            writeln!(f, "{i:>3}  {op}")?;
        }
        Ok(())
    }
}
