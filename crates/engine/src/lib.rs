//! The engine interpreter: runs a [`Program`] the way the engine's units would.
//!
//! It is the engine's semantics, independent of the reference: it reads the checkpoint's tensors
//! by name, its matrices in place in their stored types ([`kernels::Matrix`]), and shares only
//! [`formats::scalar`] with the reference interpreter. It keeps the engine's own
//! state layouts (a conv window of `K − 1` inputs, the delta state as `[dv][dk]` per head,
//! preallocated `[heads][capacity][dim]` KV caches), computes in f32 with f32 accumulation, and
//! rounds to the program's storage types where the engine stores: every buffer a unit writes, the
//! conv windows, the KV caches and the delta states.
//!
//! The same units run over f64 ([`EngineRunner::with_arithmetic`], [`Real`]) with each stored
//! value kept exactly or moved by a model of its rounding ([`Rounding`]): the check's way of
//! judging the program's structure apart from its numerics, with no second copy of the math.

pub mod batched;
mod dot;
mod error;
pub mod kernels;
mod plan;
#[cfg(test)]
mod planted_runs;
pub mod prefill;
mod real;
mod state;
#[cfg(test)]
mod test_programs;
mod units;

use std::mem;

pub use batched::BatchRow;
pub use error::RunError;
pub use real::{Keep, Real, Rounding};
pub use state::{EngineState, StateData, StateValue};

use formats::checkpoint::Checkpoint;
use plan::{Plan, Unit};
use program::{Buf, Program, StateRef};
use state::{Slot, Store};
use units::DeltaInputs;

/// A program ready to run on a checkpoint it borrows: its units resolved, its buffers and state
/// allocated. Each [`EngineRunner::step`] runs one decode step.
pub struct EngineRunner<'c, R = f32> {
    units: Vec<Unit<'c, R>>,
    buffers: Vec<Vec<R>>,
    storages: Vec<Keep>,
    store: Store<R>,
    logits: usize,
    vocab: usize,
    capacity: usize,
    attends: bool,
    threads: usize,
    /// The scratch of [`EngineRunner::step_batch`] (empty until a batched step runs).
    batch: batched::BatchScratch,
    /// The copies of `units` the further threads of a batched step run its per-row units with
    /// (made at the first batched step that splits its rows).
    spare_units: Vec<Vec<Unit<'c, R>>>,
    /// The fewest state values, over all of a batched step's rows, for which its per-row units
    /// are split among the threads ([`EngineRunner::with_rows_split_from`]).
    split_rows_from: usize,
    /// The per-token buffers of a prefill's chunk (empty until a prefill runs).
    prefill_rows: Vec<Vec<Vec<R>>>,
    /// Per unit, whether its Command writes the logits (the head, in a lowered program).
    writes_logits: Vec<bool>,
    /// Whether every token of a prefill's chunk must keep its logits: a Command reads them, or one
    /// that carries state writes them.
    logits_every_row: bool,
}

/// The machine's available parallelism, asked once per process: asking reads the cgroup files,
/// which costs more than a small program's whole step (the fuzz target builds a runner per input).
fn machine_threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

impl<'c> EngineRunner<'c, f32> {
    /// A runner for `program` on `checkpoint`, with KV caches of `capacity` positions: the engine,
    /// in f32 with the program's storage types. It checks every index, length and state layout of
    /// the program and every weight it names (present, of the shape its command needs), so that a
    /// step cannot fail on the program's account.
    pub fn new(program: &Program, checkpoint: &'c Checkpoint, capacity: usize) -> Result<Self, RunError> {
        EngineRunner::with_arithmetic(program, checkpoint, capacity, Rounding::Stored)
    }
}

impl<'c, R: Real> EngineRunner<'c, R> {
    /// A runner as [`EngineRunner::new`] that computes in `R` and treats every stored value as
    /// `rounding` says.
    pub fn with_arithmetic(
        program: &Program,
        checkpoint: &'c Checkpoint,
        capacity: usize,
        rounding: Rounding,
    ) -> Result<Self, RunError> {
        let plan = Plan::new(program, checkpoint, capacity, rounding)?;
        let threads = machine_threads();
        // The units are the program's Commands, one each, in order.
        let commands = || program.blocks.iter().flat_map(|b| &b.commands);
        let logits = program.logits;
        let writes_logits = commands().map(|c| c.writes().contains(&logits)).collect();
        let logits_every_row =
            commands().any(|c| c.reads().contains(&logits) || c.writes().contains(&logits) && !c.states().is_empty());
        Ok(EngineRunner {
            units: plan.units,
            buffers: plan.buffers,
            storages: plan.storages,
            store: plan.store,
            logits: plan.logits,
            vocab: program.vocab,
            capacity,
            attends: plan.attends,
            threads,
            batch: batched::BatchScratch::default(),
            spare_units: vec![],
            split_rows_from: batched::PARALLEL_STATE_VALUES,
            prefill_rows: vec![],
            writes_logits,
            logits_every_row,
        })
    }

    /// Splits a batched step's per-row units among the threads once its rows' states hold at least
    /// `values` values together (0: always, where there are two rows and two threads). The
    /// default pays for waking a thread; the split changes no value (`tests/batch.rs` runs both).
    pub fn with_rows_split_from(mut self, values: usize) -> Self {
        self.split_rows_from = values;
        self
    }

    /// Runs large matvecs on up to `threads` threads (at least one); the default is the machine's
    /// available parallelism.
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }

    /// Runs one decode step on `token` and returns the logits. A token outside the vocabulary, or a
    /// step at a position the KV caches have no room for, is refused before any state changes.
    pub fn step(&mut self, token: u32) -> Result<Vec<R>, RunError> {
        self.step_observed(token, &mut ())
    }

    /// [`EngineRunner::step`], showing `observer` the engine before and after each of its
    /// Commands ([`StepObserver`]).
    pub fn step_observed(&mut self, token: u32, observer: &mut impl StepObserver<R>) -> Result<Vec<R>, RunError> {
        self.step_attending(token, None, observer)
    }

    /// [`EngineRunner::step_observed`] with each attention reading cache positions `0..=extent`
    /// (`None`: `0..=position`, the step's own): a token of a prefill's chunk, whose mask says how
    /// far it reads. The caller has checked that the caches have room for `extent`.
    fn step_attending(
        &mut self,
        token: u32,
        extent: Option<usize>,
        observer: &mut impl StepObserver<R>,
    ) -> Result<Vec<R>, RunError> {
        let t = token as usize;
        if t >= self.vocab {
            return Err(RunError::TokenOutOfRange { token, vocab: self.vocab });
        }
        check_room(self.attends, self.store.position, self.capacity)?;
        for command in 0..self.units.len() {
            // Only a program that advances before it attends can get here without room; its step
            // stops at that unit.
            if let Unit::Attention(_) = self.units[command] {
                check_room(self.attends, self.store.position, self.capacity)?;
            }
            let capacity = self.capacity;
            let before =
                StepView { buffers: &self.buffers, store: &self.store, token: t, capacity, intermediate: None };
            observer.before(command, &before);
            match (&mut self.units[command], extent) {
                (Unit::Attention(a), Some(extent)) => {
                    let pos = self.store.position;
                    append_kv(a, &self.buffers, &mut self.store, pos);
                    read_kv(a, &mut self.buffers, &self.storages, &self.store, pos, extent);
                }
                (unit, _) => run(unit, &mut self.buffers, &self.storages, &mut self.store, t, self.threads),
            }
            let unit = &self.units[command];
            let intermediate = match unit {
                Unit::SwiGlu { hidden, .. } => Some(hidden.as_slice()),
                _ => None,
            };
            observer.after(
                command,
                &StepView { buffers: &self.buffers, store: &self.store, token: t, capacity, intermediate },
            );
        }
        Ok(self.buffers[self.logits].clone())
    }

    /// The carried state, in the engine's layouts.
    pub fn state(&self) -> EngineState<R> {
        self.store.snapshot()
    }

    /// The position of the next token.
    pub fn position(&self) -> usize {
        self.store.position
    }

    /// The values buffer `b` holds after the last step (zeros before the first).
    pub fn buffer(&self, b: Buf) -> Option<&[R]> {
        self.buffers.get(b.0).map(Vec::as_slice)
    }
}

/// The slot accessors a batched engine uses, in any arithmetic: the engine's own f32, and the
/// arithmetics the check runs the same batch in.
impl<R: Real> EngineRunner<'_, R> {
    /// The start state of this runner's program: position 0, zero conv windows and delta states,
    /// empty KV caches. It is what a batched engine resets a slot to.
    pub fn fresh_state(&self) -> RunnerState<R> {
        RunnerState(self.store.zeroed())
    }

    /// Swaps the carried state with `state`, so that the next step continues from `state` and
    /// `state` holds what the runner carried. A state of another program's layout is refused and
    /// nothing changes.
    pub fn swap_state(&mut self, state: &mut RunnerState<R>) -> Result<(), RunError> {
        if !self.store.same_layout(&state.0) {
            return Err(RunError::ForeignState);
        }
        mem::swap(&mut self.store, &mut state.0);
        Ok(())
    }

    /// Swaps only the conv windows of the carried state with those of `state` (a batched engine
    /// that addresses conv windows apart from the rest of a slot's state). A state of another
    /// program's layout is refused and nothing changes.
    pub fn swap_conv_windows(&mut self, state: &mut RunnerState<R>) -> Result<(), RunError> {
        if !self.store.same_layout(&state.0) {
            return Err(RunError::ForeignState);
        }
        mem::swap(&mut self.store.conv, &mut state.0.conv);
        Ok(())
    }
}

/// A runner's whole carried state, opaque: what a batched engine keeps per slot and swaps into
/// the runner (with [`EngineRunner::swap_state`]) for the row that uses the slot. Its values are
/// in the runner's arithmetic `R` (the engine's f32 by default).
#[derive(Debug)]
pub struct RunnerState<R = f32>(Store<R>);

impl<R: Real> Clone for RunnerState<R> {
    fn clone(&self) -> Self {
        RunnerState(self.0.clone())
    }

    /// A copy of `source` into this state's own buffers where the layouts agree.
    fn clone_from(&mut self, source: &Self) {
        self.0.copy_from(&source.0);
    }
}

impl<R: Real> RunnerState<R> {
    /// The state in the engine's layouts, as plain data.
    pub fn snapshot(&self) -> EngineState<R> {
        self.0.snapshot()
    }

    /// The position of the next token.
    pub fn position(&self) -> usize {
        self.0.position
    }

    /// The number of values the state holds (conv windows, delta states and KV caches).
    pub fn len(&self) -> usize {
        self.0.values()
    }

    /// Whether the state holds no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a step shows of the engine around each Command it runs (the program's Commands in order,
/// blocks flattened): the check's way of judging each Command on the very values it read and
/// wrote. A step without an observer runs with `()`, which sees nothing and costs nothing.
pub trait StepObserver<R> {
    /// Before Command `command` runs.
    fn before(&mut self, command: usize, view: &StepView<'_, R>);
    /// After Command `command` ran.
    fn after(&mut self, command: usize, view: &StepView<'_, R>);
}

impl<R> StepObserver<R> for () {
    #[inline(always)]
    fn before(&mut self, _: usize, _: &StepView<'_, R>) {}
    #[inline(always)]
    fn after(&mut self, _: usize, _: &StepView<'_, R>) {}
}

/// The engine's buffers and carried state as a step leaves them at one moment, read-only.
pub struct StepView<'a, R> {
    buffers: &'a [Vec<R>],
    store: &'a Store<R>,
    token: usize,
    capacity: usize,
    intermediate: Option<&'a [R]>,
}

impl<'a, R> StepView<'a, R> {
    /// The values buffer `b` holds.
    pub fn buffer(&self, b: Buf) -> Option<&'a [R]> {
        self.buffers.get(b.0).map(Vec::as_slice)
    }

    /// The values state `s` holds, in the engine's layout (a KV cache's whole capacity); `None`
    /// for the position (see [`StepView::position`]) or an index out of range.
    pub fn state(&self, s: StateRef) -> Option<&'a [R]> {
        let store = self.store;
        match store.order.get(s.0)?.2 {
            Slot::Position => None,
            Slot::Conv(i) => Some(&store.conv[i].values),
            Slot::Delta(i) => Some(&store.delta[i].values),
            Slot::Kv(i) => Some(&store.kv[i].values),
        }
    }

    /// The position of the next token.
    pub fn position(&self) -> usize {
        self.store.position
    }

    /// The token the step decodes.
    pub fn token(&self) -> usize {
        self.token
    }

    /// The positions each KV cache has room for.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// After a `SwiGlu` Command, the values it computed between its two halves and stores nowhere:
    /// the gated intermediate `silu(gate · x) ⊙ (up · x)` the `down` matvec read, in f32.
    pub fn intermediate(&self) -> Option<&'a [R]> {
        self.intermediate
    }
}

/// A program that attends needs a free cache position for the current one.
fn check_room(attends: bool, position: usize, capacity: usize) -> Result<(), RunError> {
    if attends && position >= capacity { Err(RunError::CapacityExceeded { position, capacity }) } else { Ok(()) }
}

/// Runs `f` on buffer `o` taken out of `bufs` (so that `f` may read the others), then rounds it to
/// its storage and puts it back.
fn write<R: Real>(bufs: &mut [Vec<R>], storages: &[Keep], o: usize, f: impl FnOnce(&[Vec<R>], &mut [R])) {
    let mut out = mem::take(&mut bufs[o]);
    f(bufs, &mut out);
    units::store(storages[o], &mut out);
    bufs[o] = out;
}

/// Writes `values` to the buffers `outs`, consecutive ranges in order, each rounded to its storage.
fn scatter<R: Real>(bufs: &mut [Vec<R>], storages: &[Keep], outs: &[usize], values: &[R]) {
    let mut at = 0;
    for &o in outs {
        let n = bufs[o].len();
        bufs[o].copy_from_slice(&values[at..at + n]);
        units::store(storages[o], &mut bufs[o]);
        at += n;
    }
}

/// The attention unit's first half at `pos`: its key and value RoPE'd (the key) and appended to
/// the caches at `pos`.
fn append_kv<R: Real>(a: &mut plan::AttentionUnit<R>, bufs: &[Vec<R>], store: &mut Store<R>, pos: usize) {
    units::rope_table(a.theta, 2 * a.cos.len(), pos, &mut a.cos, &mut a.sin);
    let rope = (a.cos.as_slice(), a.sin.as_slice());
    units::attention_append(
        &a.shape,
        &bufs[a.k],
        a.k_norm.as_deref(),
        rope,
        pos,
        &mut store.kv[a.k_cache],
        &mut a.head,
    );
    units::attention_append(&a.shape, &bufs[a.v], None, (&[], &[]), pos, &mut store.kv[a.v_cache], &mut a.head);
}

/// The attention unit's second half: the query RoPE'd at `pos`, attending over cache positions
/// `0..=extent` (`extent` is `pos` in a step), into its output buffer.
fn read_kv<R: Real>(
    a: &mut plan::AttentionUnit<R>,
    bufs: &mut [Vec<R>],
    st: &[Keep],
    store: &Store<R>,
    pos: usize,
    extent: usize,
) {
    units::rope_table(a.theta, 2 * a.cos.len(), pos, &mut a.cos, &mut a.sin);
    let rope = (a.cos.as_slice(), a.sin.as_slice());
    let (kc, vc) = (&store.kv[a.k_cache], &store.kv[a.v_cache]);
    write(bufs, st, a.out, |b, o| {
        units::attention_read(
            &a.shape,
            &b[a.q],
            a.q_norm.as_deref(),
            rope,
            extent,
            kc,
            vc,
            &mut a.head,
            &mut a.scores,
            o,
        );
    });
}

/// Runs one unit. The plan guarantees every index and length it uses.
fn run<R: Real>(
    unit: &mut Unit<'_, R>,
    bufs: &mut [Vec<R>],
    st: &[Keep],
    store: &mut Store<R>,
    token: usize,
    threads: usize,
) {
    match unit {
        Unit::Embed { table, row, out } => write(bufs, st, *out, |_, o| units::embed(table, token, row, o)),
        Unit::RmsNorm { x, weight, eps, out } => write(bufs, st, *out, |b, o| units::rms_norm(&b[*x], weight, *eps, o)),
        Unit::MatVec { weight, x, out } => write(bufs, st, *out, |b, o| units::mat_vec(weight, &b[*x], o, threads)),
        Unit::MergedRows { weight, x, outs, rows } => {
            units::merged_rows(weight, &bufs[*x], rows, threads);
            scatter(bufs, st, outs, rows);
        }
        Unit::MergedHeadHalves { weight, head_dim, x, first, second, rows } => {
            let (mut f, mut s) = (mem::take(&mut bufs[*first]), mem::take(&mut bufs[*second]));
            units::merged_head_halves(weight, *head_dim, &bufs[*x], rows, &mut f, &mut s, threads);
            units::store(st[*first], &mut f);
            units::store(st[*second], &mut s);
            (bufs[*first], bufs[*second]) = (f, s);
        }
        Unit::Conv { ins, window, weight, bias, outs, x, y } => {
            let mut at = 0;
            for &i in ins.iter() {
                let n = bufs[i].len();
                x[at..at + n].copy_from_slice(&bufs[i]);
                at += n;
            }
            units::conv(x, &mut store.conv[*window], weight, bias.as_deref(), y);
            scatter(bufs, st, outs, y);
        }
        Unit::Gates { b, a, decay, dt_bias, beta, g } => {
            let (mut be, mut ge) = (mem::take(&mut bufs[*beta]), mem::take(&mut bufs[*g]));
            units::gates(&bufs[*b], &bufs[*a], decay, dt_bias, &mut be, &mut ge);
            units::store(st[*beta], &mut be);
            units::store(st[*g], &mut ge);
            (bufs[*beta], bufs[*g]) = (be, ge);
        }
        Unit::DeltaRule { state, q, k, v, g, beta, out, key_heads, qn, kn } => {
            let state = &mut store.delta[*state];
            write(bufs, st, *out, |b, o| {
                let inputs =
                    DeltaInputs { q: &b[*q], k: &b[*k], v: &b[*v], g: &b[*g], beta: &b[*beta], key_heads: *key_heads };
                units::delta_rule(&inputs, state, qn, kn, o);
            });
        }
        Unit::GatedNorm { x, z, weight, eps, dim, out } => {
            write(bufs, st, *out, |b, o| units::gated_norm(&b[*x], &b[*z], weight, *eps, *dim, o));
        }
        Unit::Attention(a) => {
            let pos = store.position;
            append_kv(a, bufs, store, pos);
            read_kv(a, bufs, st, store, pos, pos);
        }
        Unit::SigmoidGate { x, gate, out } => write(bufs, st, *out, |b, o| units::sigmoid_gate(&b[*x], &b[*gate], o)),
        Unit::SwiGlu { x, gate, up, down, out, hidden, up_x } => {
            write(bufs, st, *out, |b, o| units::swiglu(&b[*x], gate, up, down, hidden, up_x, o, threads));
        }
        Unit::Add { residual, x, out } => write(bufs, st, *out, |b, o| units::add(&b[*residual], &b[*x], o)),
        Unit::Advance => store.position += 1,
    }
}
