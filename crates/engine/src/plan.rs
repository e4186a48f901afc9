//! The plan: a program checked against a checkpoint and resolved into units over indices the step
//! can use without a further check.
//!
//! Every buffer is written by exactly one command, before any command reads it; every index names a
//! buffer or state of the program; every length, weight shape and state layout is the one its
//! command needs. Matrices are borrowed from the checkpoint in their stored types, as
//! [`Matrix`] views read in place; the small vectors (norm weights, biases, decays, conv weights)
//! are dequantized once, here, to f32.

use super::error::RunError;
use super::kernels::Matrix;
use super::real::{Keep, Real, Rounding};
use super::state::{ConvWindow, DeltaState, KvCache, Slot, Store};
use super::units::AttentionShape;
use formats::checkpoint::{Checkpoint, Tensor};
use program::numerics::KquantInputs;
use program::{Buf, Command, Program, StateLayout, StateRef};

/// A command resolved: buffer indices, typed state indices, borrowed weights and its scratch.
#[derive(Clone)]
pub(super) enum Unit<'c, R> {
    Embed {
        table: Matrix<'c>,
        /// Scratch: the token's row, dequantized.
        row: Vec<f32>,
        out: usize,
    },
    RmsNorm {
        x: usize,
        weight: Vec<f32>,
        eps: R,
        out: usize,
    },
    MatVec {
        weight: Matrix<'c>,
        x: usize,
        out: usize,
    },
    MergedRows {
        weight: Matrix<'c>,
        x: usize,
        outs: Vec<usize>,
        rows: Vec<R>,
    },
    MergedHeadHalves {
        weight: Matrix<'c>,
        head_dim: usize,
        x: usize,
        first: usize,
        second: usize,
        rows: Vec<R>,
    },
    Conv {
        ins: Vec<usize>,
        window: usize,
        weight: Vec<f32>,
        bias: Option<Vec<f32>>,
        outs: Vec<usize>,
        x: Vec<R>,
        y: Vec<R>,
    },
    Gates {
        b: usize,
        a: usize,
        decay: Vec<f32>,
        dt_bias: Vec<f32>,
        beta: usize,
        g: usize,
    },
    DeltaRule {
        state: usize,
        q: usize,
        k: usize,
        v: usize,
        g: usize,
        beta: usize,
        out: usize,
        key_heads: usize,
        qn: Vec<R>,
        kn: Vec<R>,
    },
    GatedNorm {
        x: usize,
        z: usize,
        weight: Vec<f32>,
        eps: R,
        dim: usize,
        out: usize,
    },
    Attention(Box<AttentionUnit<R>>),
    SigmoidGate {
        x: usize,
        gate: usize,
        out: usize,
    },
    SwiGlu {
        x: usize,
        gate: Matrix<'c>,
        up: Matrix<'c>,
        down: Matrix<'c>,
        out: usize,
        hidden: Vec<R>,
        up_x: Vec<R>,
    },
    Add {
        residual: usize,
        x: usize,
        out: usize,
    },
    Advance,
}

/// The attention unit resolved.
#[derive(Clone)]
pub(super) struct AttentionUnit<R> {
    pub q: usize,
    pub k: usize,
    pub v: usize,
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub theta: f64,
    pub shape: AttentionShape<R>,
    pub k_cache: usize,
    pub v_cache: usize,
    pub out: usize,
    pub cos: Vec<R>,
    pub sin: Vec<R>,
    pub head: Vec<R>,
    pub scores: Vec<R>,
}

/// A program resolved against a checkpoint.
pub(super) struct Plan<'c, R> {
    pub units: Vec<Unit<'c, R>>,
    pub buffers: Vec<Vec<R>>,
    pub storages: Vec<Keep>,
    pub store: Store<R>,
    pub logits: usize,
    pub attends: bool,
}

/// Where command `c` of block `b` sits, as errors name it.
fn site(program: &Program, b: usize, c: usize, command: &Command) -> String {
    let block = &program.blocks[b];
    let layer = block.layer.map_or(String::new(), |l| format!("layer {l} "));
    format!("block {b} ({layer}{}) command {c} ({})", block.kind.name(), command.unit())
}

/// A vector of `n` zeros (`None`: a size that overflowed), or an allocation error naming `what`.
fn zeros<R: Real>(what: &str, n: Option<usize>) -> Result<Vec<R>, RunError> {
    let too_big = |values: String| RunError::Allocation { what: what.to_string(), values };
    let n = n.ok_or_else(|| too_big("more than usize::MAX".into()))?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| too_big(n.to_string()))?;
    v.resize(n, R::default());
    Ok(v)
}

fn product(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// The checks of one command, in order: what it reads, then what it writes.
struct Check<'p, 'c> {
    program: &'p Program,
    checkpoint: &'c Checkpoint,
    slots: &'p [Slot],
    written: Vec<bool>,
    used: Vec<bool>,
    /// The block and command being checked, named in its errors ([`site`]) only when one is made.
    at: (usize, usize),
    /// How a k-quant matrix reads its input in this run: the numerics' rule where stored values
    /// are rounded ([`Rounding::Stored`]), as it is otherwise (the structure's exact run keeps every
    /// value as computed).
    inputs: KquantInputs,
}

impl<'p, 'c> Check<'p, 'c> {
    /// Where the command being checked sits, as its errors name it.
    fn site(&self) -> String {
        let (b, c) = self.at;
        match self.program.blocks.get(b).and_then(|block| block.commands.get(c)) {
            Some(command) => site(self.program, b, c, command),
            None => format!("block {b} command {c}"),
        }
    }

    fn index(&self, b: Buf) -> Result<usize, RunError> {
        let count = self.program.buffers.len();
        if b.0 < count { Ok(b.0) } else { Err(RunError::NoSuchBuffer { command: self.site(), index: b.0, count }) }
    }

    fn name(&self, i: usize) -> String {
        self.program.buffers[i].name.clone()
    }

    fn len(&self, i: usize) -> usize {
        self.program.buffers[i].len
    }

    fn has_len(&self, i: usize, expected: usize) -> Result<usize, RunError> {
        let found = self.len(i);
        if found == expected {
            Ok(i)
        } else {
            Err(RunError::BufferLength { command: self.site(), buffer: self.name(i), expected, found })
        }
    }

    /// A buffer the command reads: one an earlier command wrote.
    fn read(&self, b: Buf) -> Result<usize, RunError> {
        let i = self.index(b)?;
        if self.written[i] {
            Ok(i)
        } else {
            Err(RunError::ReadBeforeWrite { command: self.site(), buffer: self.name(i) })
        }
    }

    /// A buffer the command reads, of length `len`.
    fn read_len(&self, b: Buf, len: usize) -> Result<usize, RunError> {
        let i = self.read(b)?;
        self.has_len(i, len)
    }

    /// A buffer the command writes: one no command wrote before.
    fn write(&mut self, b: Buf) -> Result<usize, RunError> {
        let i = self.index(b)?;
        if self.written[i] {
            return Err(RunError::WrittenTwice { command: self.site(), buffer: self.name(i) });
        }
        self.written[i] = true;
        Ok(i)
    }

    /// A buffer the command writes, of length `len`.
    fn write_len(&mut self, b: Buf, len: usize) -> Result<usize, RunError> {
        let i = self.write(b)?;
        self.has_len(i, len)
    }

    /// The tensor `name`, whose bytes are the values of its shape in its stored type.
    fn tensor(&self, name: &str) -> Result<&'c Tensor, RunError> {
        let t = self
            .checkpoint
            .get(name)
            .ok_or_else(|| RunError::MissingWeight { command: self.site(), tensor: name.to_string() })?;
        t.rows().map_err(|e| self.data_error(t, name, e.to_string()))?;
        Ok(t)
    }

    fn data_error(&self, t: &Tensor, name: &str, why: String) -> RunError {
        RunError::WeightData { tensor: name.to_string(), shape: t.shape.clone(), why }
    }

    /// The vector (or small tensor) `name`, of shape `expected`, dequantized to f32.
    fn weight(&self, name: &str, expected: &[usize]) -> Result<Vec<f32>, RunError> {
        let t = self.tensor(name)?;
        if t.shape != expected {
            return Err(self.shape_error(name, expected, &t.shape));
        }
        t.to_f32().map_err(|e| self.data_error(t, name, e.to_string()))
    }

    /// The `[rows, cols]` tensor `t` (named `name`) as a matrix read in place.
    fn as_matrix(&self, t: &'c Tensor, name: &str, rows: usize, cols: usize) -> Result<Matrix<'c>, RunError> {
        Matrix::new(t.ty(), t.bytes(), rows, cols)
            .map(|m| m.with_inputs(self.inputs))
            .map_err(|e| self.data_error(t, name, e.to_string()))
    }

    /// The matrix `name` of `cols` columns: its rows, and the matrix in place.
    fn matrix(&self, name: &str, cols: usize) -> Result<(usize, Matrix<'c>), RunError> {
        let t = self.tensor(name)?;
        match t.shape[..] {
            [rows, c] if c == cols => Ok((rows, self.as_matrix(t, name, rows, cols)?)),
            _ => Err(self.shape_error(name, &[t.shape.first().copied().unwrap_or(0), cols], &t.shape)),
        }
    }

    /// The matrix `name` of shape `[rows, cols]`, in place.
    fn weight_matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Matrix<'c>, RunError> {
        let t = self.tensor(name)?;
        if t.shape != [rows, cols] {
            return Err(self.shape_error(name, &[rows, cols], &t.shape));
        }
        self.as_matrix(t, name, rows, cols)
    }

    fn shape_error(&self, name: &str, expected: &[usize], found: &[usize]) -> RunError {
        RunError::WeightShape {
            command: self.site(),
            tensor: name.to_string(),
            expected: expected.to_vec(),
            found: found.to_vec(),
        }
    }

    fn bad(&self, why: impl Into<String>) -> RunError {
        RunError::BadParameter { command: self.site(), why: why.into() }
    }

    /// The state `r` and its typed place.
    fn state(&mut self, r: StateRef) -> Result<(Slot, &'p StateLayout, String), RunError> {
        let count = self.program.states.len();
        let s = self.program.states.get(r.0).ok_or_else(|| RunError::NoSuchState {
            command: self.site(),
            index: r.0,
            count,
        })?;
        self.used[r.0] = true;
        Ok((self.slots[r.0], &s.layout, s.name.clone()))
    }

    fn layout_error(&self, state: String, expected: String, found: &StateLayout) -> RunError {
        RunError::StateLayout { command: self.site(), state, expected, found: found.describe() }
    }

    /// The vector `name` of `dim` values, when a name is given.
    fn vector(&self, name: &Option<String>, dim: usize) -> Result<Option<Vec<f32>>, RunError> {
        name.as_deref().map(|n| self.weight(n, &[dim])).transpose()
    }
}

impl<'c, R: Real> Plan<'c, R> {
    /// Checks `program` against `checkpoint` and resolves it, with KV caches of `capacity` positions
    /// and every stored value treated as `rounding` says.
    pub fn new(
        program: &Program,
        checkpoint: &'c Checkpoint,
        capacity: usize,
        rounding: Rounding,
    ) -> Result<Plan<'c, R>, RunError> {
        let mut counts = [0usize; 3];
        let slots: Vec<Slot> = program
            .states
            .iter()
            .map(|s| {
                let (kind, make): (usize, fn(usize) -> Slot) = match s.layout {
                    StateLayout::Position => return Slot::Position,
                    StateLayout::ConvWindow { .. } => (0, Slot::Conv),
                    StateLayout::DeltaState { .. } => (1, Slot::Delta),
                    StateLayout::KvCache { .. } => (2, Slot::Kv),
                };
                counts[kind] += 1;
                make(counts[kind] - 1)
            })
            .collect();
        let positions: Vec<usize> = (0..slots.len()).filter(|&i| slots[i] == Slot::Position).collect();
        if positions.len() > 1 {
            return Err(RunError::Position { count: positions.len() });
        }
        let mut check = Check {
            program,
            checkpoint,
            slots: &slots,
            written: vec![false; program.buffers.len()],
            used: vec![false; program.states.len()],
            at: (0, 0),
            inputs: match rounding {
                Rounding::Stored => program.numerics.kquant_inputs,
                Rounding::Exact => KquantInputs::F32,
            },
        };
        let mut units = vec![];
        let mut attends = false;
        for (b, block) in program.blocks.iter().enumerate() {
            for (c, command) in block.commands.iter().enumerate() {
                check.at = (b, c);
                if matches!(command, Command::Attention { .. } | Command::Advance { .. }) {
                    let Some(&p) = positions.first() else { return Err(RunError::Position { count: 0 }) };
                    check.used[p] = true;
                    attends |= matches!(command, Command::Attention { .. });
                }
                let unit = resolve(&mut check, command, program, capacity)?;
                units.push(unit);
            }
        }
        let Check { written, used, .. } = check;
        if let Some(i) = written.iter().position(|w| !w) {
            return Err(RunError::NeverWritten { buffer: program.buffers[i].name.clone() });
        }
        if let Some(i) = used.iter().position(|u| !u) {
            return Err(RunError::UnusedState { state: program.states[i].name.clone() });
        }
        let logits = program.logits.0;
        let Some(lb) = program.buffers.get(logits) else {
            return Err(RunError::NoSuchBuffer {
                command: "the logits".into(),
                index: logits,
                count: program.buffers.len(),
            });
        };
        if lb.len != program.vocab {
            return Err(RunError::LogitsLength { buffer: lb.name.clone(), found: lb.len, vocab: program.vocab });
        }
        let store = allocate(program, capacity, rounding)?;
        let buffers = program.buffers.iter().map(|b| zeros(&b.name, Some(b.len))).collect::<Result<_, _>>()?;
        let storages = program.buffers.iter().map(|b| Keep { storage: b.storage, rounding }).collect();
        Ok(Plan { units, buffers, storages, store, logits, attends })
    }
}

/// The store of `program`'s states, zeroed, after checking that each is kept in the storage the
/// program's numerics give its kind.
fn allocate<R: Real>(program: &Program, capacity: usize, rounding: Rounding) -> Result<Store<R>, RunError> {
    let n = program.numerics;
    let mut store = Store::empty();
    for s in &program.states {
        let expected = match s.layout {
            StateLayout::Position => s.storage,
            StateLayout::ConvWindow { .. } => n.activations,
            StateLayout::DeltaState { .. } => n.recurrent_state,
            StateLayout::KvCache { .. } => n.kv_cache,
        };
        if s.storage != expected {
            return Err(RunError::StateStorage { state: s.name.clone(), expected, found: s.storage });
        }
        let slot = match s.layout {
            StateLayout::Position => Slot::Position,
            StateLayout::ConvWindow { channels, taps } => {
                let values = zeros(&s.name, channels.checked_mul(taps.saturating_sub(1)))?;
                store.conv.push(ConvWindow { channels, taps, keep: Keep { storage: s.storage, rounding }, values });
                Slot::Conv(store.conv.len() - 1)
            }
            StateLayout::DeltaState { value_heads, key_dim, value_dim } => {
                let values = zeros(&s.name, product(&[value_heads, value_dim, key_dim]))?;
                store.delta.push(DeltaState {
                    value_heads,
                    key_dim,
                    value_dim,
                    keep: Keep { storage: s.storage, rounding },
                    values,
                });
                Slot::Delta(store.delta.len() - 1)
            }
            StateLayout::KvCache { heads, dim } => {
                let values = zeros(&s.name, product(&[heads, capacity, dim]))?;
                let storage = s.storage;
                // The planted bug: the engine (its stored values rounded) keeps its KV caches in the
                // activations' type, not the program's.
                #[cfg(any(test, feature = "planted"))]
                let planted = planted::is(planted::Bug::EngineKvCacheInActivations);
                #[cfg(any(test, feature = "planted"))]
                let storage = if planted && rounding == Rounding::Stored { n.activations } else { storage };
                store.kv.push(KvCache { heads, dim, capacity, filled: 0, keep: Keep { storage, rounding }, values });
                Slot::Kv(store.kv.len() - 1)
            }
        };
        store.order.push((s.name.clone(), s.layer, slot));
    }
    Ok(store)
}

/// Resolves one command: its buffers read (written before), its weights (present, of the shapes it
/// needs), its state (of the layout it needs), its buffers written (once, of the lengths it writes).
fn resolve<'c, R: Real>(
    ck: &mut Check<'_, 'c>,
    command: &Command,
    program: &Program,
    capacity: usize,
) -> Result<Unit<'c, R>, RunError> {
    Ok(match command {
        Command::Embed { table, out } => {
            let out = ck.write(*out)?;
            let t = ck.tensor(table)?;
            match t.shape[..] {
                [rows, cols] if rows == program.vocab => {
                    let matrix = ck.as_matrix(t, table, rows, cols)?;
                    Unit::Embed {
                        table: matrix,
                        row: zeros("the embedding row", Some(cols))?,
                        out: ck.has_len(out, cols)?,
                    }
                }
                _ => return Err(ck.shape_error(table, &[program.vocab, ck.len(out)], &t.shape)),
            }
        }
        Command::RmsNorm { x, weight, eps, out } => {
            let x = ck.read(*x)?;
            let n = ck.len(x);
            let weight = ck.weight(weight, &[n])?;
            Unit::RmsNorm { x, weight, eps: R::of(*eps), out: ck.write_len(*out, n)? }
        }
        Command::MatVec { weight, x, out } => {
            let x = ck.read(*x)?;
            let out = ck.write(*out)?;
            let t = ck.tensor(weight)?;
            match t.shape[..] {
                [rows, cols] if cols == ck.len(x) => {
                    let matrix = ck.as_matrix(t, weight, rows, cols)?;
                    Unit::MatVec { weight: matrix, x, out: ck.has_len(out, rows)? }
                }
                _ => return Err(ck.shape_error(weight, &[ck.len(out), ck.len(x)], &t.shape)),
            }
        }
        Command::MergedRows { weight, x, outs } => {
            let x = ck.read(*x)?;
            let outs = outs.iter().map(|&o| ck.write(o)).collect::<Result<Vec<_>, _>>()?;
            let total = outs.iter().try_fold(0usize, |acc, &o| acc.checked_add(ck.len(o)));
            let total = total.ok_or_else(|| ck.bad("the outputs' lengths overflow"))?;
            let (rows, w) = ck.matrix(weight, ck.len(x))?;
            if rows < total {
                return Err(ck.shape_error(weight, &[total, ck.len(x)], &[rows, ck.len(x)]));
            }
            Unit::MergedRows { weight: w, x, outs, rows: zeros("merged rows", Some(total))? }
        }
        Command::MergedHeadHalves { weight, head_dim, x, first, second } => {
            let x = ck.read(*x)?;
            let pair = head_dim.checked_mul(2).filter(|&p| p > 0);
            let pair = pair.ok_or_else(|| ck.bad(format!("head_dim {head_dim}: needs 1 ≤ 2·head_dim ≤ usize::MAX")))?;
            let (rows, w) = ck.matrix(weight, ck.len(x))?;
            if !rows.is_multiple_of(pair) {
                let expected = rows.checked_next_multiple_of(pair).unwrap_or(pair);
                return Err(ck.shape_error(weight, &[expected, ck.len(x)], &[rows, ck.len(x)]));
            }
            let first = ck.write_len(*first, rows / 2)?;
            let second = ck.write_len(*second, rows / 2)?;
            Unit::MergedHeadHalves {
                weight: w,
                head_dim: *head_dim,
                x,
                first,
                second,
                rows: zeros("head rows", Some(rows))?,
            }
        }
        Command::Conv { ins, window, weight, bias, outs } => {
            let ins = ins.iter().map(|&b| ck.read(b)).collect::<Result<Vec<_>, _>>()?;
            let lens: Vec<usize> = ins.iter().map(|&i| ck.len(i)).collect();
            let total = lens.iter().try_fold(0usize, |acc, &n| acc.checked_add(n));
            let channels = total.ok_or_else(|| ck.bad("the inputs' lengths overflow"))?;
            let (slot, layout, name) = ck.state(*window)?;
            let (Slot::Conv(w_index), &StateLayout::ConvWindow { channels: c, taps }) = (slot, layout) else {
                return Err(ck.layout_error(name, format!("a conv window of {channels} channels"), layout));
            };
            if c != channels || taps == 0 {
                return Err(ck.layout_error(name, format!("conv_window[{channels}][taps − 1], taps ≥ 1"), layout));
            }
            let weight = ck.weight(weight, &[channels, taps])?;
            let bias = ck.vector(bias, channels)?;
            if outs.len() != ins.len() {
                return Err(ck.bad(format!(
                    "{} inputs but {} outputs: the outputs split the channels as the inputs do",
                    ins.len(),
                    outs.len()
                )));
            }
            let outs = outs.iter().zip(&lens).map(|(&o, &n)| ck.write_len(o, n)).collect::<Result<Vec<_>, _>>()?;
            Unit::Conv {
                ins,
                window: w_index,
                weight,
                bias,
                outs,
                x: zeros("conv channels", Some(channels))?,
                y: zeros("conv channels", Some(channels))?,
            }
        }
        Command::Gates { b, a, decay, dt_bias, beta, g } => {
            let b = ck.read(*b)?;
            let n = ck.len(b);
            let a = ck.read_len(*a, n)?;
            let decay = ck.weight(decay, &[n])?;
            let dt_bias = ck.weight(dt_bias, &[n])?;
            Unit::Gates { b, a, decay, dt_bias, beta: ck.write_len(*beta, n)?, g: ck.write_len(*g, n)? }
        }
        Command::DeltaRule { state, q, k, v, g, beta, out, key_heads } => {
            let (slot, layout, name) = ck.state(*state)?;
            let (Slot::Delta(s_index), &StateLayout::DeltaState { value_heads, key_dim, value_dim }) = (slot, layout)
            else {
                return Err(ck.layout_error(name, "a delta state".into(), layout));
            };
            if *key_heads == 0 || key_dim == 0 || value_dim == 0 {
                return Err(ck.bad("key_heads, key_dim and value_dim must be at least 1"));
            }
            let size = |a: usize, b: usize| a.checked_mul(b).ok_or_else(|| ck.bad("the sizes overflow"));
            let (qk, vd) = (size(*key_heads, key_dim)?, size(value_heads, value_dim)?);
            let q = ck.read_len(*q, qk)?;
            let k = ck.read_len(*k, qk)?;
            let v = ck.read_len(*v, vd)?;
            let g = ck.read_len(*g, value_heads)?;
            let beta = ck.read_len(*beta, value_heads)?;
            let out = ck.write_len(*out, vd)?;
            let (qn, kn) = (zeros("normed queries", Some(qk))?, zeros("normed keys", Some(qk))?);
            Unit::DeltaRule { state: s_index, q, k, v, g, beta, out, key_heads: *key_heads, qn, kn }
        }
        Command::GatedNorm { x, z, weight, eps, dim, out } => {
            let x = ck.read(*x)?;
            let n = ck.len(x);
            if *dim == 0 || !n.is_multiple_of(*dim) {
                return Err(ck.bad(format!("dim {dim} does not divide the length {n}")));
            }
            let z = ck.read_len(*z, n)?;
            let weight = ck.weight(weight, &[*dim])?;
            Unit::GatedNorm { x, z, weight, eps: R::of(*eps), dim: *dim, out: ck.write_len(*out, n)? }
        }
        Command::Attention {
            q,
            k,
            v,
            q_norm,
            k_norm,
            eps,
            rope,
            heads,
            kv_heads,
            head_dim,
            scale,
            k_cache,
            v_cache,
            out,
        } => {
            let (heads, kv_heads, hd) = (*heads, *kv_heads, *head_dim);
            if hd == 0 || kv_heads == 0 || heads < kv_heads || !heads.is_multiple_of(kv_heads) {
                return Err(ck.bad(format!(
                    "{heads} query heads, {kv_heads} KV heads of {hd}: needs a head_dim ≥ 1 and the KV heads dividing the query heads"
                )));
            }
            if !rope.dims.is_multiple_of(2) || rope.dims > hd {
                return Err(
                    ck.bad(format!("RoPE on {} dims of a head of {hd}: needs an even count ≤ head_dim", rope.dims))
                );
            }
            let size = |a: usize| a.checked_mul(hd).ok_or_else(|| ck.bad("the sizes overflow"));
            let (qd, kvd) = (size(heads)?, size(kv_heads)?);
            let q = ck.read_len(*q, qd)?;
            let k = ck.read_len(*k, kvd)?;
            let v = ck.read_len(*v, kvd)?;
            let q_norm = ck.vector(q_norm, hd)?;
            let k_norm = ck.vector(k_norm, hd)?;
            let mut cache = |r: StateRef| -> Result<usize, RunError> {
                let (slot, layout, name) = ck.state(r)?;
                match (slot, layout) {
                    (Slot::Kv(i), &StateLayout::KvCache { heads: h, dim }) if h == kv_heads && dim == hd => Ok(i),
                    _ => Err(ck.layout_error(name, format!("kv_cache[{kv_heads}][capacity][{hd}]"), layout)),
                }
            };
            let (k_cache, v_cache) = (cache(*k_cache)?, cache(*v_cache)?);
            if k_cache == v_cache {
                return Err(ck.bad("the key and value caches are the same state"));
            }
            let out = ck.write_len(*out, qd)?;
            Unit::Attention(Box::new(AttentionUnit {
                q,
                k,
                v,
                q_norm,
                k_norm,
                theta: rope.theta,
                shape: AttentionShape { heads, kv_heads, head_dim: hd, eps: R::of(*eps), scale: R::of(*scale) },
                k_cache,
                v_cache,
                out,
                cos: vec![R::default(); rope.dims / 2],
                sin: vec![R::default(); rope.dims / 2],
                head: vec![R::default(); hd],
                scores: zeros("attention scores", Some(capacity))?,
            }))
        }
        Command::SigmoidGate { x, gate, out } => {
            let x = ck.read(*x)?;
            let n = ck.len(x);
            Unit::SigmoidGate { x, gate: ck.read_len(*gate, n)?, out: ck.write_len(*out, n)? }
        }
        Command::SwiGlu { x, gate, up, down, out } => {
            let x = ck.read(*x)?;
            let h = ck.len(x);
            let (i, gate_w) = ck.matrix(gate, h)?;
            let up = ck.weight_matrix(up, i, h)?;
            let down = ck.weight_matrix(down, h, i)?;
            let out = ck.write_len(*out, h)?;
            Unit::SwiGlu {
                x,
                gate: gate_w,
                up,
                down,
                out,
                hidden: zeros("FFN intermediate", Some(i))?,
                up_x: zeros("FFN intermediate", Some(i))?,
            }
        }
        Command::Add { residual, x, out } => {
            let residual = ck.read(*residual)?;
            let n = ck.len(residual);
            Unit::Add { residual, x: ck.read_len(*x, n)?, out: ck.write_len(*out, n)? }
        }
        Command::Advance { position } => {
            let (slot, layout, name) = ck.state(*position)?;
            if slot != Slot::Position {
                return Err(ck.layout_error(name, "the position".into(), layout));
            }
            Unit::Advance
        }
    })
}

#[cfg(test)]
mod tests {
    use super::super::planted_runs::{Result, runs, values_of};
    use crate::StateValue;
    use planted::Bug;

    /// The values of every KV cache of a state.
    fn kv(v: &StateValue) -> Option<&Vec<f32>> {
        match v {
            StateValue::KvCache { values, .. } => Some(values),
            _ => None,
        }
    }

    #[test]
    fn the_planted_kv_cache_in_the_activations_type_rounds_the_engines_caches_to_it() -> Result<()> {
        // Activations in bf16, the KV cache in f32: the planted engine's caches hold bf16 values
        // and its logits move; the exact run (nothing stored rounded) is the clean one.
        let (clean, clean_exact) = runs("bf16/f32/f32", None)?;
        let (planted, planted_exact) = runs("bf16/f32/f32", Some(Bug::EngineKvCacheInActivations))?;
        let bf16 = |v: &f32| half::bf16::from_f32(*v).to_f32() == *v;
        let (clean_kv, planted_kv) = (values_of(&clean.1, kv), values_of(&planted.1, kv));
        assert!(!planted_kv.is_empty() && planted_kv.iter().all(bf16), "the planted caches are bf16");
        assert!(!clean_kv.iter().all(bf16), "the clean caches are f32");
        assert_ne!(clean.0, planted.0, "the logits");
        assert_eq!(clean_exact, planted_exact, "the exact run");
        // Where the program keeps its caches in the activations' type, the plant changes nothing.
        assert_eq!(runs("bf16", None)?.0, runs("bf16", Some(Bug::EngineKvCacheInActivations))?.0);
        Ok(())
    }
}
