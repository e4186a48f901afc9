//! The lemmas: the finite, named set of equalities the prover may use, each a rewrite to a
//! canonical form that the term builder applies when it builds a node.
//!
//! Each lemma is an equality of real-valued tensor functions, stated here in words and tested by a
//! property test that evaluates both sides on random tensors of random shapes
//! (`tests/prove.rs`, with [`super::eval`]). Nothing else is assumed of the symbols: two terms are
//! equal when they normalise to the same node.

use std::fmt;

/// A named lemma of the prover.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lemma {
    /// `rows(s..e, W·x) = W[rows s..e]·x`: rows of a matvec are the matvec of the rows.
    RowsOfMatVec,
    /// `head_half(d, h, W·x) = W[head_half d h]·x`: one half of each head of a matvec is the matvec
    /// of those rows.
    HeadHalfOfMatVec,
    /// `slice(s..e, concat(a₁, …, aₙ)) = aᵢ` when `s..e` is exactly the range of `aᵢ`.
    SliceOfConcat,
    /// `slice(0..n, x) = x` for `x` of last axis `n`.
    WholeSlice,
    /// `concat(…, W[rows a..b]·x, W[rows b..c]·x, …) = concat(…, W[rows a..c]·x, …)`, and a concat
    /// of one operand is that operand: adjacent row ranges of one matvec merge.
    ConcatOfRows,
    /// `a + b = b + a`: operands are put in a canonical order.
    AddCommutes,
    /// `a ⊙ b = b ⊙ a` (same shapes): operands are put in a canonical order.
    MulCommutes,
    /// `append_col(drop_first_col(X), x) = conv_shift(X, x)`: the engine's window of `K−1`
    /// columns with the current input appended is the graph's shifted `[C, K]` window.
    ConvWindow,
    /// `delta_rule_vk(transpose(S), q, k, v, g, β) = (transpose(S'), o)` where
    /// `(S', o) = delta_rule(S, q, k, v, g, β)` with the tiled head map: the engine's `[dv][dk]`
    /// delta rule is the graph's `[dk][dv]` one in the transposed orientation.
    DeltaOrientation,
    /// `kv_write(prealloc(C), pos, x) = prealloc(kv_append(C, x))` for a cache `C` holding `pos`
    /// positions (a cache as it enters the step: the correspondence's fill invariant).
    KvAppendAtFill,
    /// `attend_prefix(q, prealloc(K), prealloc(V), pos) = attention(q, K, V)` with the grouped head
    /// map, for caches holding `pos + 1` positions (a cache as it enters the step, appended once).
    AttendFilledPrefix,
    /// A head map whose source heads are one, or as many as the heads, is both the grouped and the
    /// tiled map: it is written as grouped.
    TrivialHeadMap,
    /// `W[rows 0..R] = W` for a matrix of `R` rows (the prover knows the row counts of the HF
    /// tensors the transformers link reads).
    WholeRows,
    /// `slice(0..d of 2d, W·x) = W[head_half d 0]·x`, and `slice(d..2d of 2d, W·x)` half 1: the
    /// halves of each `2d`-row head of a matvec are the matvecs of the head halves.
    SliceOfHeads,
    /// `concat(rope(θ, r, hd=r)(slice(0..r of hd, x)), slice(r..hd of hd, x)) = rope(θ, r, hd)(x)`:
    /// a rotary embedding of the first `r` dims of each row leaves the rest as they are.
    PartialRotary,
    /// `f(broadcast(x)) = broadcast(f(x))` for an elementwise `f` (`scale`, `offset`, an
    /// activation) or a row-wise one over rows of `x`'s length (`l2_norm`).
    BroadcastCommutes,
    /// `delta_rule(hk = hv)(S, broadcast(q), broadcast(k), v, g, β) = delta_rule(hk = 1)(S, q, k, v,
    /// g, β)`: every value head reading the one key head's copy reads the one key head.
    OneKeyHead,
    /// `permute[p, s](W)·x = permute[p, s/c](W·x)` for `W` of `c` columns and `s` a multiple of
    /// `c`: permuted rows of a matrix give its product's entries permuted.
    PermuteThroughMatVec,
    /// `permute[p](W)·permute[q](x) = W·x` when `p` permutes each row's column blocks as `q`
    /// permutes `x`'s: the out-projection of tiled heads undoes their order.
    PermuteCancels,
    /// `f(permute(x)) = permute(f(x))` for an elementwise `f` (and `f(permute(a), permute(b))` with
    /// one permutation), and for a row-wise one whose rows the blocks keep whole (`rms_norm`,
    /// `l2_norm`).
    PermuteCommutes,
    /// A concat of parts some of which are permuted is the concat of the parts, permuted.
    PermuteThroughConcat,
    /// `slice(s..e, permute(x)) = permute(slice(s..e, x))` when the permutation maps `s..e` onto
    /// itself.
    PermuteThroughSlice,
    /// `conv_shift(permute(S), permute(x))` and `depthwise_conv(permute(X), permute(W))` with one
    /// channel permutation are the permuted shift and conv: both work per channel.
    PermuteThroughConv,
    /// `delta_rule(tiled)(P·S, q, k, P·v, P·g, P·β) = P·delta_rule(grouped)(S, q, k, v, g, β)` for
    /// `P` the grouped→tiled head permutation: the tiled rule on the tiled heads is the grouped
    /// rule on the grouped ones.
    TiledDeltaRule,
    /// `f(concat(x, …, x)) = concat(f(x), …, f(x))` for an elementwise `f` or a row-wise one over
    /// rows of one copy (`l2_norm`): transformers normalises the repeated query heads.
    RepeatCommutes,
    /// `delta_rule(hk = hv)(S, repeat_r(q), repeat_r(k), …) = delta_rule(hk = hv/r)(S, q, k, …)`
    /// with `repeat_r` each head repeated `r` times in turn (`repeat_interleave`): the grouped
    /// head map.
    RepeatHeads,
    /// `scale[1](x) = x`.
    ScaleByOne,
    /// `delta_rule(S, scale[s](q), k, v, g, β) = (S', scale[s](o))` where `(S', o) =
    /// delta_rule(S, q, k, v, g, β)`: the output `o = S'ᵀq` is linear in `q` and the new state does
    /// not read it (llama.cpp scales the output, transformers the query).
    DeltaQueryScale,
}

impl Lemma {
    /// Every lemma, in the order the docs list them.
    pub const ALL: [Lemma; 28] = [
        Lemma::RowsOfMatVec,
        Lemma::HeadHalfOfMatVec,
        Lemma::SliceOfConcat,
        Lemma::WholeSlice,
        Lemma::ConcatOfRows,
        Lemma::AddCommutes,
        Lemma::MulCommutes,
        Lemma::ConvWindow,
        Lemma::DeltaOrientation,
        Lemma::KvAppendAtFill,
        Lemma::AttendFilledPrefix,
        Lemma::TrivialHeadMap,
        Lemma::WholeRows,
        Lemma::SliceOfHeads,
        Lemma::PartialRotary,
        Lemma::BroadcastCommutes,
        Lemma::OneKeyHead,
        Lemma::PermuteThroughMatVec,
        Lemma::PermuteCancels,
        Lemma::PermuteCommutes,
        Lemma::PermuteThroughConcat,
        Lemma::PermuteThroughSlice,
        Lemma::PermuteThroughConv,
        Lemma::TiledDeltaRule,
        Lemma::RepeatCommutes,
        Lemma::RepeatHeads,
        Lemma::ScaleByOne,
        Lemma::DeltaQueryScale,
    ];

    /// The lemma's name, as proofs print it.
    pub fn name(self) -> &'static str {
        match self {
            Lemma::RowsOfMatVec => "rows-of-matvec",
            Lemma::HeadHalfOfMatVec => "head-half-of-matvec",
            Lemma::SliceOfConcat => "slice-of-concat",
            Lemma::WholeSlice => "whole-slice",
            Lemma::ConcatOfRows => "concat-of-rows",
            Lemma::AddCommutes => "add-commutes",
            Lemma::MulCommutes => "mul-commutes",
            Lemma::ConvWindow => "conv-window",
            Lemma::DeltaOrientation => "delta-orientation",
            Lemma::KvAppendAtFill => "kv-append-at-fill",
            Lemma::AttendFilledPrefix => "attend-filled-prefix",
            Lemma::TrivialHeadMap => "trivial-head-map",
            Lemma::WholeRows => "whole-rows",
            Lemma::SliceOfHeads => "slice-of-heads",
            Lemma::PartialRotary => "partial-rotary",
            Lemma::BroadcastCommutes => "broadcast-commutes",
            Lemma::OneKeyHead => "one-key-head",
            Lemma::PermuteThroughMatVec => "permute-through-matvec",
            Lemma::PermuteCancels => "permute-cancels",
            Lemma::PermuteCommutes => "permute-commutes",
            Lemma::PermuteThroughConcat => "permute-through-concat",
            Lemma::PermuteThroughSlice => "permute-through-slice",
            Lemma::PermuteThroughConv => "permute-through-conv",
            Lemma::TiledDeltaRule => "tiled-delta-rule",
            Lemma::RepeatCommutes => "repeat-commutes",
            Lemma::RepeatHeads => "repeat-heads",
            Lemma::ScaleByOne => "scale-by-one",
            Lemma::DeltaQueryScale => "delta-query-scale",
        }
    }
}

impl fmt::Display for Lemma {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
