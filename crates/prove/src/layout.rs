//! The engine's state layouts as maps from the graph's state, stated once.
//!
//! The correspondence the induction keeps: before a step, each piece of the engine's state is the
//! layout map of the graph's. Conv: the engine keeps the newest `K−1` columns of the graph's
//! `[C, K]` window (column 0, the oldest, is dropped by the next shift and never read). Delta: the
//! engine's `[Hv][dv][dk]` is the graph's `[Hv, dk, dv]` transposed per head. KV caches: the
//! engine's `[heads][capacity][dim]` holds the graph's cache of `pos` positions in its first `pos`
//! rows per head (the fill invariant: a cache entering the step holds exactly `pos` positions).
//! The position is the same integer. Both sides start at zero (the caches empty), where the maps
//! hold: a zero window, a zero state transposed, an empty cache.
//!
//! [`engine_index`] is the same map on indices, for any comparison of two states' values (the
//! prover's evaluator uses it; the numeric check can).

use ir::{StateKind, Ty};
use program::StateLayout;

/// Why a graph state and an engine state cannot correspond.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("the graph's {kind} state {graph} cannot be the engine's {engine}")]
pub(crate) struct LayoutMismatch {
    pub kind: &'static str,
    pub graph: String,
    pub engine: String,
}

/// The layout map from the graph's state of `kind` and type `ty` to the engine's `layout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LayoutMap {
    /// The same value.
    Identity,
    /// `[C, K] → [C, K−1]`: engine `[c][j]` is graph `[c, j+1]`.
    DropOldest { channels: usize, taps: usize },
    /// `[Hv, dk, dv] → [Hv][dv][dk]`: engine `[h][j][i]` is graph `[h, i, j]`.
    Transpose { value_heads: usize, key_dim: usize, value_dim: usize },
    /// A cache of `p` positions `→ [heads][capacity][dim]`: engine `[h][p][i]` is graph head `h`,
    /// position `p`, dim `i`, for `p <` the fill; the rest is not read.
    Prealloc { heads: usize, dim: usize },
}

/// The map between a graph state and an engine state, or why their shapes cannot correspond.
pub(crate) fn layout_map(kind: StateKind, ty: &Ty, layout: &StateLayout) -> Result<LayoutMap, LayoutMismatch> {
    let mismatch = || LayoutMismatch { kind: kind.name(), graph: ty.to_string(), engine: format!("{layout:?}") };
    match (kind, ty, layout) {
        (StateKind::Position, Ty::Position, StateLayout::Position) => Ok(LayoutMap::Identity),
        (StateKind::Conv, Ty::Tensor(s), &StateLayout::ConvWindow { channels, taps })
            if s.as_slice() == [channels, taps] && taps >= 1 =>
        {
            Ok(LayoutMap::DropOldest { channels, taps })
        }
        (StateKind::Recurrent, Ty::Tensor(s), &StateLayout::DeltaState { value_heads, key_dim, value_dim })
            if s.as_slice() == [value_heads, key_dim, value_dim] =>
        {
            Ok(LayoutMap::Transpose { value_heads, key_dim, value_dim })
        }
        (
            StateKind::KeyCache | StateKind::ValueCache,
            &Ty::Cache { heads, dim },
            &StateLayout::KvCache { heads: h, dim: d },
        ) if heads == h && dim == d => Ok(LayoutMap::Prealloc { heads, dim }),
        _ => Err(mismatch()),
    }
}

/// The engine's flat index of the graph's value at `graph` (its multi-index), under `map`; for a
/// cache, `capacity` is the engine's preallocated length and `graph` is `[head, position, dim]`.
/// `None` where the graph's value has no place in the engine's (a conv window's oldest column).
pub(crate) fn engine_index(map: LayoutMap, graph: &[usize], capacity: usize) -> Option<usize> {
    match (map, graph) {
        (LayoutMap::Identity, &[i]) => Some(i),
        (LayoutMap::DropOldest { taps, .. }, &[c, j]) => (j >= 1).then(|| c * (taps - 1) + j - 1),
        (LayoutMap::Transpose { key_dim, value_dim, .. }, &[h, i, j]) => Some((h * value_dim + j) * key_dim + i),
        (LayoutMap::Prealloc { dim, .. }, &[h, p, i]) => (p < capacity).then(|| (h * capacity + p) * dim + i),
        _ => None,
    }
}
