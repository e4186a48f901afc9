//! The state the engine carries between steps, in its own layouts, and the plain-data snapshot of it
//! a checker maps to the reference's layouts.

use super::real::{Keep, Real};

/// The carried state after the last step, in the engine's layouts, as plain data.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineState<R = f32> {
    /// The position of the next token: the number of steps taken.
    pub position: usize,
    /// One entry per state of the program, in the program's order.
    pub states: Vec<StateData<R>>,
}

/// One piece of carried state: its name and layer in the program, and its values.
#[derive(Clone, Debug, PartialEq)]
pub struct StateData<R = f32> {
    pub name: String,
    pub layer: Option<usize>,
    pub value: StateValue<R>,
}

/// The values of one piece of state, row-major in the engine's layout.
#[derive(Clone, Debug, PartialEq)]
pub enum StateValue<R = f32> {
    /// The position of the next token.
    Position(usize),
    /// `[channels][taps − 1]`: per channel the previous `taps − 1` inputs, oldest first. It equals
    /// the reference's `[C, K]` window without its oldest column.
    ConvWindow { channels: usize, taps: usize, values: Vec<R> },
    /// `[value_heads][value_dim][key_dim]`: per value head the transpose of the reference's
    /// `[key_dim][value_dim]` matrix.
    DeltaState { value_heads: usize, key_dim: usize, value_dim: usize, values: Vec<R> },
    /// `[heads][capacity][dim]`, of which positions `0..filled` of each head are written.
    KvCache { heads: usize, capacity: usize, dim: usize, filled: usize, values: Vec<R> },
}

impl<R: Real> StateValue<R> {
    /// The same state with `f` applied to every value.
    pub fn map<S>(&self, f: impl Fn(R) -> S) -> StateValue<S> {
        let all = |v: &[R]| v.iter().map(|&x| f(x)).collect();
        match self {
            StateValue::Position(p) => StateValue::Position(*p),
            StateValue::ConvWindow { channels, taps, values } => {
                StateValue::ConvWindow { channels: *channels, taps: *taps, values: all(values) }
            }
            StateValue::DeltaState { value_heads, key_dim, value_dim, values } => StateValue::DeltaState {
                value_heads: *value_heads,
                key_dim: *key_dim,
                value_dim: *value_dim,
                values: all(values),
            },
            StateValue::KvCache { heads, capacity, dim, filled, values } => StateValue::KvCache {
                heads: *heads,
                capacity: *capacity,
                dim: *dim,
                filled: *filled,
                values: all(values),
            },
        }
    }

    /// A delta state in the reference's `[value_heads][key_dim][value_dim]` orientation; `None` for
    /// another kind of state, or values that do not fill the dims.
    pub fn delta_key_major(&self) -> Option<Vec<R>> {
        let StateValue::DeltaState { value_heads, key_dim, value_dim, values } = self else { return None };
        if Some(values.len()) != value_heads.checked_mul(*key_dim).and_then(|n| n.checked_mul(*value_dim)) {
            return None;
        }
        let mut out = vec![R::default(); values.len()];
        for h in 0..*value_heads {
            for j in 0..*value_dim {
                for i in 0..*key_dim {
                    let from = (h * value_dim + j) * key_dim + i;
                    let to = (h * key_dim + i) * value_dim + j;
                    out[to] = values[from];
                }
            }
        }
        Some(out)
    }

    /// A KV cache's written positions, `[heads][filled][dim]` (the reference's `[nKV, T, hd]`);
    /// `None` for another kind of state, or values that do not fill the dims.
    pub fn kv_filled(&self) -> Option<Vec<R>> {
        let StateValue::KvCache { heads, capacity, dim, filled, values } = self else { return None };
        if filled > capacity || Some(values.len()) != heads.checked_mul(*capacity).and_then(|n| n.checked_mul(*dim)) {
            return None;
        }
        let mut out = Vec::with_capacity(heads * filled * dim);
        for h in 0..*heads {
            let start = h * capacity * dim;
            out.extend_from_slice(&values[start..start + filled * dim]);
        }
        Some(out)
    }
}

/// A conv unit's window, `[channels][taps − 1]`.
#[derive(Clone, Debug)]
pub(super) struct ConvWindow<R> {
    pub channels: usize,
    pub taps: usize,
    pub keep: Keep,
    pub values: Vec<R>,
}

/// A delta rule's state, `[value_heads][value_dim][key_dim]`.
#[derive(Clone, Debug)]
pub(super) struct DeltaState<R> {
    pub value_heads: usize,
    pub key_dim: usize,
    pub value_dim: usize,
    pub keep: Keep,
    pub values: Vec<R>,
}

/// A preallocated cache, `[heads][capacity][dim]`, written up to `filled`.
#[derive(Clone, Debug)]
pub(super) struct KvCache<R> {
    pub heads: usize,
    pub dim: usize,
    pub capacity: usize,
    pub filled: usize,
    pub keep: Keep,
    pub values: Vec<R>,
}

impl<R: Real> KvCache<R> {
    /// The `dim` values of head `h` at position `p`.
    pub fn at(&self, h: usize, p: usize) -> &[R] {
        let start = (h * self.capacity + p) * self.dim;
        &self.values[start..start + self.dim]
    }

    /// Writes `row`, kept as the cache's storage says, as head `h` at position `p`.
    pub fn put(&mut self, h: usize, p: usize, row: &[R]) {
        let start = (h * self.capacity + p) * self.dim;
        let keep = self.keep;
        for (to, &x) in self.values[start..start + self.dim].iter_mut().zip(row) {
            *to = keep.keep(x);
        }
        self.filled = self.filled.max(p + 1);
    }
}

/// Where a program's state lives in the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Slot {
    Position,
    Conv(usize),
    Delta(usize),
    Kv(usize),
}

/// The carried state, by kind, and the program's order of it.
#[derive(Clone, Debug)]
pub(super) struct Store<R> {
    pub position: usize,
    pub conv: Vec<ConvWindow<R>>,
    pub delta: Vec<DeltaState<R>>,
    pub kv: Vec<KvCache<R>>,
    /// The program's states in order: name, layer, where each lives.
    pub order: Vec<(String, Option<usize>, Slot)>,
}

impl<R: Real> Store<R> {
    /// An empty store at position 0.
    pub fn empty() -> Store<R> {
        Store { position: 0, conv: vec![], delta: vec![], kv: vec![], order: vec![] }
    }

    /// The snapshot of the whole store.
    pub fn snapshot(&self) -> EngineState<R> {
        let states = self
            .order
            .iter()
            .map(|(name, layer, slot)| {
                let value = match *slot {
                    Slot::Position => StateValue::Position(self.position),
                    Slot::Conv(i) => {
                        let c = &self.conv[i];
                        StateValue::ConvWindow { channels: c.channels, taps: c.taps, values: c.values.clone() }
                    }
                    Slot::Delta(i) => {
                        let d = &self.delta[i];
                        StateValue::DeltaState {
                            value_heads: d.value_heads,
                            key_dim: d.key_dim,
                            value_dim: d.value_dim,
                            values: d.values.clone(),
                        }
                    }
                    Slot::Kv(i) => {
                        let c = &self.kv[i];
                        StateValue::KvCache {
                            heads: c.heads,
                            capacity: c.capacity,
                            dim: c.dim,
                            filled: c.filled,
                            values: c.values.clone(),
                        }
                    }
                };
                StateData { name: name.clone(), layer: *layer, value }
            })
            .collect();
        EngineState { position: self.position, states }
    }
}

impl<R: Real> Store<R> {
    /// The same layout at the start state: position 0, zero values, empty caches.
    pub fn zeroed(&self) -> Store<R> {
        let zero = R::from(0.0);
        let mut z = self.clone();
        z.position = 0;
        z.conv.iter_mut().for_each(|c| c.values.fill(zero));
        z.delta.iter_mut().for_each(|d| d.values.fill(zero));
        z.kv.iter_mut().for_each(|c| {
            c.values.fill(zero);
            c.filled = 0;
        });
        z
    }

    /// The number of values the store holds (conv windows, delta states and KV caches).
    pub fn values(&self) -> usize {
        let conv: usize = self.conv.iter().map(|c| c.values.len()).sum();
        let delta: usize = self.delta.iter().map(|d| d.values.len()).sum();
        conv + delta + self.kv.iter().map(|c| c.values.len()).sum::<usize>()
    }

    /// This store made a copy of `other`, into its own buffers where the layouts agree (a
    /// snapshot taken every step then allocates nothing).
    pub(crate) fn copy_from(&mut self, other: &Store<R>) {
        if !self.same_layout(other) {
            *self = other.clone();
            return;
        }
        self.position = other.position;
        for (a, b) in self.conv.iter_mut().zip(&other.conv) {
            a.keep = b.keep;
            a.values.copy_from_slice(&b.values);
        }
        for (a, b) in self.delta.iter_mut().zip(&other.delta) {
            a.keep = b.keep;
            a.values.copy_from_slice(&b.values);
        }
        for (a, b) in self.kv.iter_mut().zip(&other.kv) {
            (a.keep, a.filled) = (b.keep, b.filled);
            a.values.copy_from_slice(&b.values);
        }
    }

    /// Whether `other` has this store's states, in its order, with its dims and storages.
    pub(crate) fn same_layout(&self, other: &Store<R>) -> bool {
        let conv = |a: &ConvWindow<R>, b: &ConvWindow<R>| {
            (a.channels, a.taps, a.keep.storage, a.values.len()) == (b.channels, b.taps, b.keep.storage, b.values.len())
        };
        let delta = |a: &DeltaState<R>, b: &DeltaState<R>| {
            (a.value_heads, a.key_dim, a.value_dim, a.keep.storage, a.values.len())
                == (b.value_heads, b.key_dim, b.value_dim, b.keep.storage, b.values.len())
        };
        let kv = |a: &KvCache<R>, b: &KvCache<R>| {
            (a.heads, a.dim, a.capacity, a.keep.storage, a.values.len())
                == (b.heads, b.dim, b.capacity, b.keep.storage, b.values.len())
        };
        self.order == other.order
            && self.conv.len() == other.conv.len()
            && self.delta.len() == other.delta.len()
            && self.kv.len() == other.kv.len()
            && self.conv.iter().zip(&other.conv).all(|(a, b)| conv(a, b))
            && self.delta.iter().zip(&other.delta).all(|(a, b)| delta(a, b))
            && self.kv.iter().zip(&other.kv).all(|(a, b)| kv(a, b))
    }
}
