//! Batched decode with state slots: the single-sequence program run for many sequences at once.
//!
//! This is a stage after `lower_graph`. The step graph stays one sequence's step and the program
//! stays its lowering; a [`BatchProgram`] adds the slot pool the engine keeps every piece of that
//! program's state in (`slots` copies of each conv window, delta state, KV cache and position), the
//! largest batch a step runs (`max_batch` rows), how many snapshots per slot the engine keeps for
//! rollback, and how each kind of state is addressed. A [`schedule::Schedule`] is what the engine's
//! scheduler drives (admit, decode, finish, fork, roll back); [`plan::lower_schedule`] writes the
//! slot operations the engine runs for it ([`plan::SlotPlan`]: claims, resets, copies, restores and
//! steps whose rows each name a slot), and [`plan::SlotPlan::validate`] refuses by name what no
//! engine may do (a row on a freed slot, a claim of a live one, a rollback past the snapshots).
//!
//! Three judges: [`prove`] proves a plan (the prover's one-sequence step, then the induction over
//! the plan's operations, per slot and per state: every row reads its own sequence's state);
//! [`shadow`] follows, for every slot, which computation its state holds in the engine
//! interpreter's exact order of effects (its pool starting zeroed), which predicts the interpreters'
//! outcome; and [`check`] runs the plan on the engine interpreter ([`run`]) and each sequence alone
//! on the reference interpreter.

pub mod check;
pub mod r#gen;
pub mod plan;
pub mod prove;
pub mod run;
pub mod schedule;
pub mod shadow;
pub mod table;

use serde::{Deserialize, Serialize};

use crate::engine::program::{Program, StateLayout, StateRef};
use schedule::Seq;

/// How a kind of state is addressed in a step: by the slot of the row's sequence (what every
/// correct engine does), or by the row's index in the batch (correct only when every sequence
/// happens to sit in the slot of its row number).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StateIndex {
    Slot,
    Row,
}

/// The single-sequence program and the slot pool the engine runs it on.
///
/// Slot `s` holds a full copy of the program's states: the state `StateRef(i)` of slot `s` is named
/// `name@s` (`blk.1.conv_state@2`). A slot also keeps up to `snapshots` earlier copies of its state,
/// the newest first, taken before each step of the slot; a rollback of `n ≤ snapshots` restores
/// the `n`-th. Rows of a step are numbered `0..max_batch`; row `r` reads the slot the step's
/// row→slot table gives it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchProgram {
    pub program: Program,
    /// The number of slots in the pool.
    pub slots: usize,
    /// The most rows a step runs; a step of fewer rows is padded to this many.
    pub max_batch: usize,
    /// How many snapshots of its state each slot keeps for rollback.
    pub snapshots: usize,
    /// The KV caches' positions per slot: the longest history a sequence may reach.
    pub capacity: usize,
    /// How the conv windows are addressed; every other state is addressed by slot.
    pub conv_index: StateIndex,
}

impl BatchProgram {
    /// A batched program over `program`, its conv windows addressed by slot, after checking the pool.
    pub fn new(
        program: Program,
        slots: usize,
        max_batch: usize,
        snapshots: usize,
        capacity: usize,
    ) -> Result<BatchProgram, BatchError> {
        let b = BatchProgram { program, slots, max_batch, snapshots, capacity, conv_index: StateIndex::Slot };
        b.validate()?;
        Ok(b)
    }

    /// Checks the pool: at least one slot, a batch of at least one row and no more rows than slots
    /// (every row needs a slot of its own), room for at least one position.
    pub fn validate(&self) -> Result<(), BatchError> {
        if self.slots == 0 {
            return Err(BatchError::NoSlots);
        }
        if self.max_batch == 0 || self.max_batch > self.slots {
            return Err(BatchError::BatchSize { max_batch: self.max_batch, slots: self.slots });
        }
        if self.capacity == 0 {
            return Err(BatchError::NoCapacity);
        }
        Ok(())
    }

    /// The name of state `state` of slot `slot`: the program's name of it, `@`, the slot.
    pub fn slot_state_name(&self, state: StateRef, slot: usize) -> Option<String> {
        self.program.states.get(state.0).map(|s| format!("{}@{slot}", s.name))
    }

    /// Whether the program keeps any conv window.
    pub(crate) fn has_conv(&self) -> bool {
        self.program.states.iter().any(|s| matches!(s.layout, StateLayout::ConvWindow { .. }))
    }
}

/// Why a pool, a schedule on it, or a slot plan is refused. `event` counts a schedule's events from
/// 0; `op` counts a plan's operations from 0.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("the pool has no slots")]
    NoSlots,
    #[error("a batch of {max_batch} rows on a pool of {slots} slots (it needs 1 ≤ rows ≤ slots)")]
    BatchSize { max_batch: usize, slots: usize },
    #[error("the KV caches have no room for a position")]
    NoCapacity,
    #[error("event {event}: {seq} is already admitted")]
    SeqAdmittedTwice { event: usize, seq: Seq },
    #[error("event {event}: slot {slot} holds {holder}, which is still live")]
    SlotInUse { event: usize, slot: usize, holder: Seq },
    #[error("event {event}: slot {slot} is outside the pool of {slots}")]
    SlotOutOfRange { event: usize, slot: usize, slots: usize },
    #[error("event {event}: {seq} is not live")]
    SeqNotLive { event: usize, seq: Seq },
    #[error("event {event}: {seq} has two rows in one step")]
    SeqTwiceInStep { event: usize, seq: Seq },
    #[error("event {event}: a step of {rows} rows, more than the batch of {max_batch}")]
    BatchTooLarge { event: usize, rows: usize, max_batch: usize },
    #[error("event {event}: a rollback of {seq} by 0 steps")]
    EmptyRollback { event: usize, seq: Seq },
    #[error("event {event}: a rollback of {seq} by {n} steps, but its slot keeps {kept} snapshots")]
    RollbackBeyondSnapshots { event: usize, seq: Seq, n: usize, kept: usize },
    #[error("event {event}: a prefill of {seq} with no tokens")]
    EmptyPrefill { event: usize, seq: Seq },
    #[error("op {op}: a prefill of {tokens} tokens in chunks of {chunk} (it needs a token and a chunk of 1 to 4096)")]
    PlanPrefill { op: usize, tokens: usize, chunk: usize },
    #[error("event {event}: {seq} would reach position {position}, beyond the capacity of {capacity}")]
    CapacityExceeded { event: usize, seq: Seq, position: usize, capacity: usize },
    #[error("op {op}: slot {slot} is outside the pool of {slots}")]
    PlanSlotOutOfRange { op: usize, slot: usize, slots: usize },
    #[error("op {op}: claims slot {slot}, which is live (a live state buffer reused)")]
    ClaimOfLiveSlot { op: usize, slot: usize },
    #[error("op {op}: touches slot {slot}, which is not live")]
    OpOnDeadSlot { op: usize, slot: usize },
    #[error("op {op}: row {row} reads slot {slot}, which was freed")]
    ReadsFreedSlot { op: usize, row: usize, slot: usize },
    #[error("op {op}: row {row} reads slot {slot}, which was never claimed")]
    ReadsUnclaimedSlot { op: usize, row: usize, slot: usize },
    #[error("op {op}: slot {slot} has two rows in one step")]
    SlotTwiceInStep { op: usize, slot: usize },
    #[error("op {op}: a step of {rows} rows, more than the batch of {max_batch}")]
    PlanBatchTooLarge { op: usize, rows: usize, max_batch: usize },
    #[error("op {op}: restores slot {slot} by {back} steps, but it keeps {kept} snapshots")]
    RestoreBeyondSnapshots { op: usize, slot: usize, back: usize, kept: usize },
}

impl BatchError {
    /// The error's name in case files: its variant, in kebab case.
    pub fn name(&self) -> &'static str {
        match self {
            BatchError::NoSlots => "no-slots",
            BatchError::BatchSize { .. } => "batch-size",
            BatchError::NoCapacity => "no-capacity",
            BatchError::SeqAdmittedTwice { .. } => "seq-admitted-twice",
            BatchError::SlotInUse { .. } => "slot-in-use",
            BatchError::SlotOutOfRange { .. } => "slot-out-of-range",
            BatchError::SeqNotLive { .. } => "seq-not-live",
            BatchError::SeqTwiceInStep { .. } => "seq-twice-in-step",
            BatchError::BatchTooLarge { .. } => "batch-too-large",
            BatchError::EmptyRollback { .. } => "empty-rollback",
            BatchError::RollbackBeyondSnapshots { .. } => "rollback-beyond-snapshots",
            BatchError::CapacityExceeded { .. } => "capacity-exceeded",
            BatchError::EmptyPrefill { .. } => "empty-prefill",
            BatchError::PlanPrefill { .. } => "plan-prefill",
            BatchError::PlanSlotOutOfRange { .. } => "plan-slot-out-of-range",
            BatchError::ClaimOfLiveSlot { .. } => "claim-of-live-slot",
            BatchError::OpOnDeadSlot { .. } => "op-on-dead-slot",
            BatchError::ReadsFreedSlot { .. } => "reads-freed-slot",
            BatchError::ReadsUnclaimedSlot { .. } => "reads-unclaimed-slot",
            BatchError::SlotTwiceInStep { .. } => "slot-twice-in-step",
            BatchError::PlanBatchTooLarge { .. } => "plan-batch-too-large",
            BatchError::RestoreBeyondSnapshots { .. } => "restore-beyond-snapshots",
        }
    }
}
