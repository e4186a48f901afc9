//! The ops of the step graph: their kinds, attributes and shape rules.
//!
//! Primitive ops are the author's vocabulary; fused ops (`merged_qkv`, `conv_bias_silu`, `gdn_gating`,
//! `glu_act_mul`) are ops of the same IR whose meaning the shared fusion table (`fuse`) defines
//! as a composition of primitive ops. Every kind has a shape rule: given the types it reads, the types
//! it writes, or why it cannot read them.

use smallvec::smallvec;

use super::ty::{Shape, Ty, Types};

/// An op of the step graph: a kind, the tensors it reads and the tensors it writes.
#[derive(Clone, Debug, PartialEq)]
pub struct Op {
    pub kind: OpKind,
    pub inputs: Vec<TensorId>,
    pub outputs: Vec<TensorId>,
}

/// The index of a tensor in its graph's tensor table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub usize);

/// An elementwise activation function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum Act {
    Sigmoid,
    Silu,
    Softplus,
    Exp,
    Tanh,
    Relu,
    /// The exact GELU, `x·Φ(x)`.
    Gelu,
    /// The tanh approximation of GELU (`gelu_pytorch_tanh`, `gelu_new`).
    GeluTanh,
}

/// How the heads of one operand are shared by the heads of another when their counts differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum HeadMap {
    /// Head `h` of `n` uses source head `h / (n / m)`: consecutive heads share a source head
    /// (transformers' `repeat_interleave` and `repeat_kv`).
    Grouped,
    /// Head `h` uses source head `h % m` (llama.cpp's tiled value-head order of qwen35).
    Tiled,
}

/// Which dims of a head RoPE pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum RopeStyle {
    /// Dim `i` pairs with dim `i + rotary_dims/2` (NeoX, `rotate_half`).
    Neox,
    /// Dim `2i` pairs with dim `2i+1` (GPT-J, DeepSeek's `rope_interleave`).
    Interleaved,
}

/// The kind of an op, with its attributes.
#[derive(Clone, Debug, PartialEq)]
pub enum OpKind {
    /// `(table [V, H], token) → [H]`: row `token` of the table.
    Embed,
    /// `(w [O, I], x [I]) → [O]`: `w · x`.
    MatVec,
    /// `(a, b) → a + b`, same shapes.
    Add,
    /// `(a, b) → a · b` elementwise; `b` may also be a `[1]` scalar that scales all of `a`.
    Mul,
    /// `x → factor · x`.
    Scale { factor: f64 },
    /// `x → x + value`.
    Offset { value: f64 },
    /// `x → act(x)` elementwise.
    Act(Act),
    /// `x → min(max(x, min), max)` elementwise.
    Clamp { min: f64, max: f64 },
    /// `(x [.., n], w [n]) → x · rsqrt(mean(x²) + eps) · w` over the last axis.
    RmsNorm { eps: f64 },
    /// `(x [.., n], w [n], b [n]) → (x − mean) · rsqrt(var + eps) · w + b` over the last axis.
    LayerNorm { eps: f64 },
    /// `x [.., n] → x · rsqrt(Σx² + eps)` over the last axis.
    L2Norm { eps: f64 },
    /// `x [.., n] → softmax(x)` over the last axis.
    Softmax,
    /// `(a [.., n₁], b [.., n₂], …) → [.., Σnᵢ]`: concatenation along the last axis.
    Concat,
    /// `x [.., n] → x[.., start..end]` along the last axis.
    Slice { start: usize, end: usize },
    /// `x → x` with another shape of the same number of values.
    Reshape { shape: Vec<usize> },
    /// `x [n] → [rows, n]`: the same vector in every row.
    Broadcast { rows: usize },
    /// `(X [C, K], x [C]) → [C, K]`: drop the oldest column, append `x` as the newest.
    ConvShift,
    /// `(X [C, K], w [C, K]) → [C]`: `Σⱼ w[c, j] · X[c, j]` per channel.
    DepthwiseConv,
    /// `(S [Hv, dk, dv], q [Hk, dk], k [Hk, dk], v [Hv, dv], g [Hv], β [Hv]) → (S', o [Hv, dv])`:
    /// per value head `h` with key head `m(h)`, `S ← e^g S; S ← S + k ⊗ β(v − Sᵀk); o = Sᵀq`.
    DeltaRule { head_map: HeadMap },
    /// `(x [n, hd], position) → [n, hd]`: rotary embedding of the first `rotary_dims` dims of each row.
    Rope { theta: f64, rotary_dims: usize, style: RopeStyle },
    /// `(x [n, hd], position) → [n, hd]`: rotary embedding of the first `2·inv_freq.len()` dims of each
    /// row, pair `i` turning by `position · inv_freq[i]`, the turned dims multiplied by `scale`. The
    /// frequencies are given, not derived from a θ: scaled RoPE (linear, YaRN, …) is this op with the
    /// frequencies and attention factor its scheme computes.
    RopeFreqs { inv_freq: Vec<f64>, scale: f64, style: RopeStyle },
    /// `(cache [h, d], x [h, d]) → cache'`: the cache with `x` appended at the current position.
    KvAppend,
    /// `(q [nH, dq], K cache [nKV, dq], V cache [nKV, dv] [, sinks [nH]]) → [nH, dv]`: softmax
    /// attention of each query head over the positions of its KV head (`head_map`), scores scaled by
    /// `scale`; only the newest `window` positions when set; a sink logit per head joins the softmax
    /// and is dropped when the fourth operand is present.
    Attention { scale: f64, window: Option<usize>, head_map: HeadMap },
    /// `(p [E] [, values [E]]) → [E]`: at the `k` largest entries of `p`, the entry of `p` (or of
    /// `values`, when given) divided by their sum when `renormalize`; the others zero.
    TopK { k: usize, renormalize: bool },
    /// `x [E] → [E]`: the `E` entries as `groups` contiguous groups, each scored by the sum of its
    /// `top` largest entries; the entries of the `keep` best groups pass, the others become −∞
    /// (DeepSeek-V3's group-limited routing).
    GroupLimit { groups: usize, keep: usize, top: usize },
    /// `x [n] → [1]`: entry `index`.
    Pick { index: usize },
    /// `position → position + 1`: the step's advance.
    Advance,
    /// A fused symbol of the shared table.
    Fused(Fused),
}

/// A fused symbol of the shared fusion table; `fuse` defines what each one means.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fused {
    /// `(x, w₁, …, wₙ) → (w₁·x, …, wₙ·x)`: the projections of one checkpoint matrix as one matvec.
    MergedQkv,
    /// `(X [C, K], w [C, K] [, bias [C]]) → silu(conv(X, w) + bias)`: a convolution with its SiLU.
    ConvBiasSilu,
    /// `(b, a, ssm_a, dt_bias) → (sigmoid(b), ssm_a · softplus(a + dt_bias))`: the gates of a delta rule.
    GdnGating,
    /// `(gate, value) → act(gate) · value`: an activated gate times a value.
    GluActMul { act: Act },
}

/// Why an op cannot read the types it is given.
pub type ShapeError = String;

impl OpKind {
    /// The types this op writes when it reads `ins`, or why it cannot read them.
    pub fn infer(&self, ins: &[&Ty]) -> Result<Types, ShapeError> {
        use OpKind::*;
        let one = |t: Ty| Ok(smallvec![t]);
        match self {
            Embed => {
                arity(ins, 2)?;
                let [_, h] = mat(ins[0])?;
                is(ins[1], &Ty::Token)?;
                one(Ty::tensor(&[h]))
            }
            MatVec => {
                arity(ins, 2)?;
                let [o, i] = mat(ins[0])?;
                vec_of(ins[1], i)?;
                one(Ty::tensor(&[o]))
            }
            Add => {
                arity(ins, 2)?;
                same(ins[0], ins[1])?;
                one(arr(ins[0])?.into())
            }
            Mul => {
                arity(ins, 2)?;
                let a = arr(ins[0])?;
                if arr(ins[1])? != [1] {
                    same(ins[0], ins[1])?;
                }
                one(a.into())
            }
            Scale { .. } | Offset { .. } | Act(_) | Clamp { .. } | Softmax => {
                arity(ins, 1)?;
                one(arr(ins[0])?.into())
            }
            L2Norm { .. } => {
                arity(ins, 1)?;
                last(ins[0])?;
                one(ins[0].clone())
            }
            RmsNorm { .. } => {
                arity(ins, 2)?;
                vec_of(ins[1], last(ins[0])?)?;
                one(ins[0].clone())
            }
            LayerNorm { .. } => {
                arity(ins, 3)?;
                let n = last(ins[0])?;
                vec_of(ins[1], n)?;
                vec_of(ins[2], n)?;
                one(ins[0].clone())
            }
            Concat => {
                if ins.len() < 2 {
                    return Err(format!("concat reads at least 2 tensors, not {}", ins.len()));
                }
                let lead = &arr(ins[0])?[..arr(ins[0])?.len().saturating_sub(1)];
                let mut n = 0;
                for t in ins {
                    let s = arr(t)?;
                    if s.is_empty() || &s[..s.len() - 1] != lead {
                        return Err(format!("concat of {} and {t}: leading dims differ", ins[0]));
                    }
                    n += s[s.len() - 1];
                }
                let mut s = Shape::from_slice(lead);
                s.push(n);
                one(Ty::Tensor(s))
            }
            Slice { start, end } => {
                arity(ins, 1)?;
                let n = last(ins[0])?;
                if start >= end || *end > n {
                    return Err(format!("slice {start}..{end} of a last axis of {n}"));
                }
                let mut s = Shape::from_slice(arr(ins[0])?);
                *s.last_mut().ok_or("empty shape")? = end - start;
                one(Ty::Tensor(s))
            }
            Reshape { shape } => {
                arity(ins, 1)?;
                let n: usize = arr(ins[0])?.iter().product();
                if shape.iter().product::<usize>() != n {
                    return Err(format!("reshape of {} to {}", ins[0], Ty::tensor(shape)));
                }
                one(Ty::tensor(shape))
            }
            Broadcast { rows } => {
                arity(ins, 1)?;
                let [n] = vec1(ins[0])?;
                one(Ty::tensor(&[*rows, n]))
            }
            ConvShift => {
                arity(ins, 2)?;
                let [c, _] = mat(ins[0])?;
                vec_of(ins[1], c)?;
                one(ins[0].clone())
            }
            DepthwiseConv => {
                arity(ins, 2)?;
                let [c, _] = mat(ins[0])?;
                same(ins[0], ins[1])?;
                one(Ty::tensor(&[c]))
            }
            DeltaRule { .. } => {
                arity(ins, 6)?;
                let [hv, dk, dv] = arr3(ins[0])?;
                let [hk, dk2] = mat(ins[1])?;
                if dk2 != dk || hk == 0 || hv % hk != 0 {
                    return Err(format!("delta rule: state {} with queries {}", ins[0], ins[1]));
                }
                same(ins[1], ins[2])?;
                is(ins[3], &Ty::tensor(&[hv, dv]))?;
                vec_of(ins[4], hv)?;
                vec_of(ins[5], hv)?;
                Ok(smallvec![ins[0].clone(), Ty::tensor(&[hv, dv])])
            }
            Rope { rotary_dims, .. } => {
                arity(ins, 2)?;
                let [_, hd] = mat(ins[0])?;
                is(ins[1], &Ty::Position)?;
                if *rotary_dims > hd || rotary_dims % 2 != 0 {
                    return Err(format!("rope of {rotary_dims} dims on heads of {hd}"));
                }
                one(ins[0].clone())
            }
            RopeFreqs { inv_freq, .. } => {
                arity(ins, 2)?;
                let [_, hd] = mat(ins[0])?;
                is(ins[1], &Ty::Position)?;
                if inv_freq.len() > hd / 2 {
                    return Err(format!("rope of {} pairs on heads of {hd}", inv_freq.len()));
                }
                one(ins[0].clone())
            }
            KvAppend => {
                arity(ins, 2)?;
                let Ty::Cache { heads, dim } = ins[0] else {
                    return Err(format!("kv_append appends to a cache, not {}", ins[0]));
                };
                is(ins[1], &Ty::tensor(&[*heads, *dim]))?;
                one(ins[0].clone())
            }
            Attention { .. } => {
                if !(3..=4).contains(&ins.len()) {
                    return Err(format!("attention reads 3 or 4 tensors, not {}", ins.len()));
                }
                let [nh, dq] = mat(ins[0])?;
                let (Ty::Cache { heads: kh, dim: kd }, Ty::Cache { heads: vh, dim: vd }) = (ins[1], ins[2]) else {
                    return Err(format!("attention reads caches, not {} and {}", ins[1], ins[2]));
                };
                if *kd != dq || kh != vh || *kh == 0 || nh % kh != 0 {
                    return Err(format!("attention of {} over {} and {}", ins[0], ins[1], ins[2]));
                }
                if let Some(s) = ins.get(3) {
                    vec_of(s, nh)?;
                }
                one(Ty::tensor(&[nh, *vd]))
            }
            TopK { k, .. } => {
                if !(1..=2).contains(&ins.len()) {
                    return Err(format!("top_k reads 1 or 2 tensors, not {}", ins.len()));
                }
                let [e] = vec1(ins[0])?;
                if let Some(values) = ins.get(1) {
                    vec_of(values, e)?;
                }
                if *k == 0 || *k > e {
                    return Err(format!("top-{k} of {e}"));
                }
                one(ins[0].clone())
            }
            GroupLimit { groups, keep, top } => {
                arity(ins, 1)?;
                let [e] = vec1(ins[0])?;
                let fits = *groups > 0
                    && e.is_multiple_of(*groups)
                    && (1..=*groups).contains(keep)
                    && (1..=e / groups).contains(top);
                if !fits {
                    return Err(format!("the best {keep} of {groups} groups by their top {top} of {e} entries"));
                }
                one(ins[0].clone())
            }
            Pick { index } => {
                arity(ins, 1)?;
                let [n] = vec1(ins[0])?;
                if *index >= n {
                    return Err(format!("pick {index} of {n}"));
                }
                one(Ty::tensor(&[1]))
            }
            Advance => {
                arity(ins, 1)?;
                is(ins[0], &Ty::Position)?;
                one(Ty::Position)
            }
            Fused(f) => f.infer(ins),
        }
    }

    /// The op's name in the text form.
    pub fn name(&self) -> &'static str {
        use OpKind::*;
        match self {
            Embed => "embed",
            MatVec => "matvec",
            Add => "add",
            Mul => "mul",
            Scale { .. } => "scale",
            Offset { .. } => "offset",
            Act(a) => a.name(),
            Clamp { .. } => "clamp",
            RmsNorm { .. } => "rms_norm",
            LayerNorm { .. } => "layer_norm",
            L2Norm { .. } => "l2_norm",
            Softmax => "softmax",
            Concat => "concat",
            Slice { .. } => "slice",
            Reshape { .. } => "reshape",
            Broadcast { .. } => "broadcast",
            ConvShift => "conv_shift",
            DepthwiseConv => "depthwise_conv",
            DeltaRule { .. } => "delta_rule",
            Rope { .. } => "rope",
            RopeFreqs { .. } => "rope_freqs",
            KvAppend => "kv_append",
            Attention { .. } => "attention",
            TopK { .. } => "top_k",
            GroupLimit { .. } => "group_limit",
            Pick { .. } => "pick",
            Advance => "advance",
            Fused(f) => f.name(),
        }
    }
}

impl Fused {
    /// The symbol's name, as the shared table spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Fused::MergedQkv => "merged_qkv",
            Fused::ConvBiasSilu => "conv_bias_silu",
            Fused::GdnGating => "gdn_gating",
            Fused::GluActMul { .. } => "glu_act_mul",
        }
    }

    fn infer(&self, ins: &[&Ty]) -> Result<Types, ShapeError> {
        match self {
            Fused::MergedQkv => {
                if ins.len() < 3 {
                    return Err(format!("merged_qkv reads x and at least 2 matrices, not {}", ins.len()));
                }
                let [i] = vec1(ins[0])?;
                ins[1..]
                    .iter()
                    .map(|w| {
                        let [o, wi] = mat(w)?;
                        if wi != i {
                            return Err(format!("merged_qkv of {w} with x {}", ins[0]));
                        }
                        Ok(Ty::tensor(&[o]))
                    })
                    .collect()
            }
            Fused::ConvBiasSilu => {
                if !(2..=3).contains(&ins.len()) {
                    return Err(format!("conv_bias_silu reads 2 or 3 tensors, not {}", ins.len()));
                }
                let [c, _] = mat(ins[0])?;
                same(ins[0], ins[1])?;
                if let Some(b) = ins.get(2) {
                    vec_of(b, c)?;
                }
                Ok(smallvec![Ty::tensor(&[c])])
            }
            Fused::GdnGating => {
                arity(ins, 4)?;
                let [n] = vec1(ins[0])?;
                for t in &ins[1..] {
                    vec_of(t, n)?;
                }
                Ok(smallvec![ins[0].clone(), ins[0].clone()])
            }
            Fused::GluActMul { .. } => {
                arity(ins, 2)?;
                same(ins[0], ins[1])?;
                Ok(smallvec![ins[1].clone()])
            }
        }
    }
}

impl Act {
    /// Every activation, in the order the text form lists them.
    pub const ALL: [Act; 8] =
        [Act::Sigmoid, Act::Silu, Act::Softplus, Act::Exp, Act::Tanh, Act::Relu, Act::Gelu, Act::GeluTanh];

    /// The activation's name in the text form.
    pub fn name(&self) -> &'static str {
        match self {
            Act::Sigmoid => "sigmoid",
            Act::Silu => "silu",
            Act::Softplus => "softplus",
            Act::Exp => "exp",
            Act::Tanh => "tanh",
            Act::Relu => "relu",
            Act::Gelu => "gelu",
            Act::GeluTanh => "gelu_tanh",
        }
    }
}

impl HeadMap {
    /// The source head of head `h` when `n` heads share `m` source heads (`m` divides `n`).
    pub fn source(&self, h: usize, n: usize, m: usize) -> usize {
        match self {
            HeadMap::Grouped => h / (n / m),
            HeadMap::Tiled => h % m,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            HeadMap::Grouped => "grouped",
            HeadMap::Tiled => "tiled",
        }
    }
}

impl RopeStyle {
    pub fn name(&self) -> &'static str {
        match self {
            RopeStyle::Neox => "neox",
            RopeStyle::Interleaved => "interleaved",
        }
    }
}

fn arity(ins: &[&Ty], n: usize) -> Result<(), ShapeError> {
    if ins.len() == n { Ok(()) } else { Err(format!("reads {n} tensors, not {}", ins.len())) }
}

fn arr(t: &Ty) -> Result<&[usize], ShapeError> {
    t.shape().ok_or_else(|| format!("expected an array, found {t}"))
}

fn vec1(t: &Ty) -> Result<[usize; 1], ShapeError> {
    <[usize; 1]>::try_from(arr(t)?).map_err(|_| format!("expected a vector, found {t}"))
}

fn mat(t: &Ty) -> Result<[usize; 2], ShapeError> {
    <[usize; 2]>::try_from(arr(t)?).map_err(|_| format!("expected a matrix, found {t}"))
}

fn arr3(t: &Ty) -> Result<[usize; 3], ShapeError> {
    <[usize; 3]>::try_from(arr(t)?).map_err(|_| format!("expected a 3-d array, found {t}"))
}

fn last(t: &Ty) -> Result<usize, ShapeError> {
    arr(t)?.last().copied().ok_or_else(|| format!("expected a non-scalar array, found {t}"))
}

/// That `t` is the vector `[n]`: [`is`] of it, without a type made to compare with.
fn vec_of(t: &Ty, n: usize) -> Result<(), ShapeError> {
    if t.shape() == Some(&[n]) { Ok(()) } else { Err(format!("expected [{n}], found {t}")) }
}

fn is(t: &Ty, want: &Ty) -> Result<(), ShapeError> {
    if t == want { Ok(()) } else { Err(format!("expected {want}, found {t}")) }
}

fn same(a: &Ty, b: &Ty) -> Result<(), ShapeError> {
    if a == b { Ok(()) } else { Err(format!("{a} and {b} differ")) }
}

impl From<&[usize]> for Ty {
    fn from(s: &[usize]) -> Ty {
        Ty::tensor(s)
    }
}
