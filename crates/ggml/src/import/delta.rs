//! The delta rule as llama.cpp composes it from primitive ops (`build_delta_net_autoregressive`,
//! when its fused `GATED_DELTA_NET` is off), read as one IR `delta_rule`.
//!
//! Per value head `h`, with the state `S [dk, dv]` stored `k` fastest (ggml `[dk, dv, H]`):
//!
//! | step | ggml | the part it makes |
//! |---|---|---|
//! | decay | `MUL(S, EXP(g))`, `g` broadcast over the head | `D = e^g S` |
//! | read | `MUL(D, k)`, `k [dk, 1, H]` broadcast over `dv`; `SUM_ROWS` | `Dᵀk [1, dv, H]` |
//! | error | `SUB(v, (Dᵀk)ᵀ)`; `MUL(·, β)` | `δ = β(v − Dᵀk) [dv, 1, H]` |
//! | write | `MUL(k repeated over dv, δᵀ)`; `ADD(D, ·)` | `S' = D + k ⊗ δ` |
//! | output | `MUL(S', q)`; `SUM_ROWS` | `o = S'ᵀq [1, dv, H]` |
//!
//! Each part's elements are symbols (`Elem::Part`) that the layout ops move like any element; each
//! step checks that its operands are exactly the parts and values it expects, element by element,
//! at the positions its broadcast puts them, or the node is refused. At the output the IR
//! `delta_rule(S, q, k, v, g, β)` is written, and the new state's symbols resolve to its first
//! result. The queries and keys may be repeated to the value heads (`REPEAT`, tiled): the head map
//! is read off the repetition.

use ir::{HeadMap, OpKind, TensorId};

use super::store::Elem;
use super::{Importer, index_space, sizes};
use crate::graph::Tensor;

/// A part of the composition.
#[derive(Clone, Debug)]
pub(super) enum Part {
    /// `e^g S`, `[dk, dv, H]`: the state (as `[H, dk, dv]`) and `g` (`[H]`).
    Decayed { s: TensorId, g: TensorId },
    /// `D ⊙ k` before its sum over `dk`.
    Read { d: usize, k: Vec<Elem> },
    /// `Dᵀk`, `(j, h)`.
    Recalled { d: usize, k: Vec<Elem> },
    /// `v − Dᵀk`, `(j, h)`.
    Error { d: usize, k: Vec<Elem>, v: TensorId },
    /// `δ = β(v − Dᵀk)`, `(j, h)`.
    Delta { d: usize, k: Vec<Elem>, v: TensorId, beta: TensorId },
    /// `k ⊗ δ`, `(i, j, h)`.
    Outer { delta: usize },
    /// `S' = D + k ⊗ δ`, `(i, j, h)`.
    State { delta: usize },
    /// `S' ⊙ q` before its sum over `dk`.
    Query { state: usize, q: Vec<Elem> },
}

/// The sizes of one composition: key dim, value dim, value heads.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Dims {
    dk: usize,
    dv: usize,
    h: usize,
}

impl Dims {
    /// The index of `(i, j, h)` in a `[dk, dv, H]` part.
    fn cube(self, i: usize, j: usize, h: usize) -> usize {
        (h * self.dv + j) * self.dk + i
    }
}

/// Reads `MUL`, `ADD`, `SUB` or `SUM_ROWS` node `n` as a step of the composition, when its
/// operands are one; `None` when they are not (the node is then another op's).
pub(super) fn step(im: &mut Importer<'_>, n: &Tensor) -> Result<Option<()>, String> {
    let row = n.row_name();
    if row == "SUM_ROWS" {
        return sum_rows(im, n).map(Some);
    }
    let (a, b) = (im.src(n, 0)?, im.src(n, 1)?);
    let (ea, eb) = (im.read(a)?, im.read(b)?);
    let has_part = |e: &[Elem]| e.iter().any(|x| matches!(x, Elem::Part(..)));
    let [n0, n1, n2, n3] = sizes(a)?;
    let nb = sizes(b)?;
    if n3 != 1 || nb[3] != 1 || nb.contains(&0) {
        return Ok(None);
    }
    // `b` at each position of `a`, repeated as ggml broadcasts it.
    let at = |i: [usize; 4]| eb[((i[2] % nb[2]) * nb[1] + i[1] % nb[1]) * nb[0] + i[0] % nb[0]];
    let pos: Vec<[usize; 4]> = index_space(&[n0, n1, n2, 1]).collect();
    let bb: Vec<Elem> = pos.iter().map(|&i| at(i)).collect();
    let made = match (row.as_str(), has_part(&ea), has_part(&bb)) {
        ("MUL", false, false) => decay(im, a, &ea, &bb, [n0, n1, n2])?,
        ("MUL", true, false) => part_times_values(im, &ea, &bb, [n0, n1, n2])?,
        ("MUL", false, true) => outer(im, &ea, &bb, [n0, n1, n2])?,
        ("SUB", false, true) => error(im, &ea, &bb, [n0, n1, n2])?,
        ("ADD", true, true) => new_state(im, &ea, &bb, [n0, n1, n2])?,
        _ => None,
    };
    let Some((part, elems)) = made else { return Ok(None) };
    im.parts.push(part);
    im.fresh(n, elems).map(Some)
}

/// The elements of part `p` at `count` indices.
fn part_elems(p: usize, count: usize) -> Vec<Elem> {
    (0..count).map(|i| Elem::Part(p, i)).collect()
}

/// The dims of the composition part `p` belongs to.
fn dims_of(im: &Importer<'_>, p: usize) -> Option<Dims> {
    match im.parts.get(p)? {
        Part::Decayed { s, .. } => match im.builder.ty(*s).shape()? {
            &[h, dk, dv] => Some(Dims { dk, dv, h }),
            _ => None,
        },
        Part::Read { d, .. } | Part::Recalled { d, .. } | Part::Error { d, .. } | Part::Delta { d, .. } => {
            dims_of(im, *d)
        }
        Part::Outer { delta } | Part::State { delta } => dims_of(im, *delta),
        Part::Query { state, .. } => dims_of(im, *state),
    }
}

/// Whether `e` is part `p`'s elements in order (`e[x] = Part(p, x)`).
fn is_part(e: &[Elem], p: usize) -> bool {
    e.iter().enumerate().all(|(x, &v)| v == Elem::Part(p, x))
}

/// The part `e` is, in order, if it is one.
fn which_part(e: &[Elem]) -> Option<usize> {
    match e.first()? {
        Elem::Part(p, 0) if is_part(e, *p) => Some(*p),
        _ => None,
    }
}

/// `MUL(S, EXP(g))`: a state `[dk, dv, H]` of values times, per head, `e^g`.
fn decay(
    im: &mut Importer<'_>,
    a: &Tensor,
    ea: &[Elem],
    bb: &[Elem],
    [dk, dv, h]: [usize; 3],
) -> Result<Option<(Part, Vec<Elem>)>, String> {
    let Some(Elem::Ir(e, _)) = bb.first().copied() else { return Ok(None) };
    let Some((OpKind::Act(ir::Act::Exp), g)) = im.produced.get(&e).cloned() else { return Ok(None) };
    let per_head = (0..h).all(|hh| (0..dk * dv).all(|x| bb[hh * dk * dv + x] == Elem::Ir(e, hh)));
    if dk != dv || !per_head || a.ne[3] != 1 {
        return Ok(None);
    }
    let d = Dims { dk, dv, h };
    let mut list = Vec::with_capacity(ea.len());
    for hh in 0..h {
        for i in 0..dk {
            for j in 0..dv {
                list.push(ea[d.cube(i, j, hh)]);
            }
        }
    }
    let s = im.materialise(&list, &[h, dk, dv])?;
    let g = follow::reshaped(im, g[0], &[h])?;
    let p = im.parts.len();
    Ok(Some((Part::Decayed { s, g }, part_elems(p, ea.len()))))
}

/// `MUL(part, values)`: the decayed state by `k` (the read), `δ` by `β`, or the new state by `q`.
fn part_times_values(
    im: &mut Importer<'_>,
    ea: &[Elem],
    bb: &[Elem],
    [n0, n1, n2]: [usize; 3],
) -> Result<Option<(Part, Vec<Elem>)>, String> {
    let Some(p) = which_part(ea) else { return Ok(None) };
    let Some(d) = dims_of(im, p) else { return Ok(None) };
    let next = im.parts.len();
    match im.parts[p].clone() {
        Part::Decayed { .. } | Part::State { .. } if [n0, n1, n2] == [d.dk, d.dv, d.h] => {
            // the vector per head, broadcast over `dv`: `(i, j, h) ↦ x[h, i]`
            let x: Vec<Elem> =
                (0..d.h).flat_map(|hh| (0..d.dk).map(move |i| (hh, i))).map(|(hh, i)| bb[d.cube(i, 0, hh)]).collect();
            let same =
                (0..d.h).all(|hh| (0..d.dv).all(|j| (0..d.dk).all(|i| bb[d.cube(i, j, hh)] == x[hh * d.dk + i])));
            if !same {
                return Ok(None);
            }
            let part = match im.parts[p] {
                Part::Decayed { .. } => Part::Read { d: p, k: x },
                _ => Part::Query { state: p, q: x },
            };
            Ok(Some((part, part_elems(next, ea.len()))))
        }
        Part::Error { d: dp, k, v } if [n0, n1, n2] == [d.dv, 1, d.h] => {
            // β per head: `(j, 0, h) ↦ β[h]`
            let Some(Elem::Ir(beta, _)) = bb.first().copied() else { return Ok(None) };
            if !(0..d.h).all(|hh| (0..d.dv).all(|j| bb[hh * d.dv + j] == Elem::Ir(beta, hh))) {
                return Ok(None);
            }
            let beta = follow::reshaped(im, beta, &[d.h])?;
            Ok(Some((Part::Delta { d: dp, k, v, beta }, part_elems(next, ea.len()))))
        }
        _ => Ok(None),
    }
}

/// `MUL(k repeated over dv, δᵀ)`: the outer product `k ⊗ δ`.
fn outer(
    im: &mut Importer<'_>,
    ea: &[Elem],
    bb: &[Elem],
    [n0, n1, n2]: [usize; 3],
) -> Result<Option<(Part, Vec<Elem>)>, String> {
    let Some(Elem::Part(p, _)) = bb.first().copied() else { return Ok(None) };
    let (Some(d), Some(Part::Delta { k, .. })) = (dims_of(im, p), im.parts.get(p).cloned()) else { return Ok(None) };
    if [n0, n1, n2] != [d.dk, d.dv, d.h] {
        return Ok(None);
    }
    let fits = (0..d.h).all(|hh| {
        (0..d.dv).all(|j| {
            (0..d.dk).all(|i| {
                ea[d.cube(i, j, hh)] == k[hh * d.dk + i] && bb[d.cube(i, j, hh)] == Elem::Part(p, hh * d.dv + j)
            })
        })
    });
    if !fits {
        return Err("an outer product of other than the keys read and the delta".into());
    }
    let next = im.parts.len();
    Ok(Some((Part::Outer { delta: p }, part_elems(next, ea.len()))))
}

/// `SUB(v, (Dᵀk)ᵀ)`: the error of the values recalled.
fn error(
    im: &mut Importer<'_>,
    ea: &[Elem],
    bb: &[Elem],
    [n0, n1, n2]: [usize; 3],
) -> Result<Option<(Part, Vec<Elem>)>, String> {
    let Some(Elem::Part(p, _)) = bb.first().copied() else { return Ok(None) };
    let (Some(d), Some(Part::Recalled { d: dp, k })) = (dims_of(im, p), im.parts.get(p).cloned()) else {
        return Ok(None);
    };
    if [n0, n1, n2] != [d.dv, 1, d.h] || !is_part(bb, p) {
        return Ok(None);
    }
    let v = im.materialise(ea, &[d.h, d.dv])?;
    let next = im.parts.len();
    Ok(Some((Part::Error { d: dp, k, v }, part_elems(next, ea.len()))))
}

/// `ADD(D, k ⊗ δ)`: the new state.
fn new_state(
    im: &mut Importer<'_>,
    ea: &[Elem],
    bb: &[Elem],
    _: [usize; 3],
) -> Result<Option<(Part, Vec<Elem>)>, String> {
    let (Some(x), Some(y)) = (which_part(ea), which_part(bb)) else { return Ok(None) };
    let (decayed, outer) = match (im.parts.get(x), im.parts.get(y)) {
        (Some(Part::Decayed { .. }), Some(Part::Outer { .. })) => (x, y),
        (Some(Part::Outer { .. }), Some(Part::Decayed { .. })) => (y, x),
        _ => return Ok(None),
    };
    let Part::Outer { delta } = im.parts[outer] else { return Ok(None) };
    let Part::Delta { d, .. } = im.parts[delta] else { return Ok(None) };
    if d != decayed {
        return Err("a new state of another state's decay and delta".into());
    }
    let next = im.parts.len();
    Ok(Some((Part::State { delta }, part_elems(next, ea.len()))))
}

/// `SUM_ROWS` of the read (the values recalled) or of the query product (the output, where the
/// IR `delta_rule` is written).
fn sum_rows(im: &mut Importer<'_>, n: &Tensor) -> Result<(), String> {
    let a = im.src(n, 0)?;
    let ea = im.read(a)?;
    let p = which_part(&ea).ok_or("a sum of rows of other than the delta rule's products")?;
    let d = dims_of(im, p).ok_or("a part of no dims")?;
    let next = im.parts.len();
    match im.parts[p].clone() {
        Part::Read { d: dp, k } => {
            im.parts.push(Part::Recalled { d: dp, k });
            im.fresh(n, part_elems(next, d.dv * d.h))
        }
        Part::Query { state, q } => {
            let Part::State { delta } = im.parts[state] else { return Err("a query of other than a new state".into()) };
            let Part::Delta { d: dp, k, v, beta } = im.parts[delta].clone() else { return Err("no delta".into()) };
            let Part::Decayed { s, g } = im.parts[dp] else { return Err("no decay".into()) };
            let (kt, hk) = heads(im, &k, d)?;
            let (qt, hq) = heads(im, &q, d)?;
            let (kt, qt) = if hk == hq {
                (kt, qt)
            } else {
                // One of the two repeats its heads further: read both at the value heads.
                (im.materialise(&k, &[d.h, d.dk])?, im.materialise(&q, &[d.h, d.dk])?)
            };
            let (s_next, o) = im.emit2(OpKind::DeltaRule { head_map: HeadMap::Tiled }, &[s, qt, kt, v, g, beta])?;
            im.resolved.insert(state, s_next);
            im.fresh(n, (0..d.h * d.dv).map(|x| Elem::Ir(o, x)).collect())
        }
        _ => Err("a sum of rows of other than the delta rule's products".into()),
    }
}

/// The keys or queries `x` (`[H, dk]`, one row per value head) as their own heads: the fewest
/// rows `hk` that, repeated in turn (tiled), give every row; materialised as `[hk, dk]`.
fn heads(im: &mut Importer<'_>, x: &[Elem], d: Dims) -> Result<(TensorId, usize), String> {
    let hk = (1..=d.h)
        .filter(|hk| d.h.is_multiple_of(*hk))
        .find(|&hk| (0..d.h).all(|hh| (0..d.dk).all(|i| x[hh * d.dk + i] == x[(hh % hk) * d.dk + i])))
        .unwrap_or(d.h);
    let t = im.materialise(&x[..hk * d.dk], &[hk, d.dk])?;
    Ok((t, hk))
}

/// The IR value a part's element resolves to, once the delta rule is written: element `(i, j, h)`
/// of the new state is `S'[h, i, j]`.
pub(super) fn resolve(im: &Importer<'_>, e: Elem) -> Elem {
    let Elem::Part(p, x) = e else { return e };
    match (im.resolved.get(&p), dims_of(im, p)) {
        (Some(&s), Some(d)) => {
            let (i, j, hh) = (x % d.dk, (x / d.dk) % d.dv, x / (d.dk * d.dv));
            Elem::Ir(s, (hh * d.dk + i) * d.dv + j)
        }
        _ => e,
    }
}
