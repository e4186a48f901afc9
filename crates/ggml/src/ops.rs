//! The ggml ops the importer reads: one row per op (a `UNARY` or `GLU` per kind), with its meaning
//! as `ggml.h` and `ggml.c` define it and its shape rule.
//!
//! A rule checks a node's sizes (`ne`), and for a view its strides and extent, against its sources,
//! as the op's constructor in `ggml.c` computes them. [`check_shapes`] runs every node's rule: a
//! node with no row, or sizes its rule does not give, is a [`GraphError`] naming it.

use super::error::GraphError;
use super::graph::{DIMS, Recording, Tensor, node_error};

/// A shape rule: `Ok` when `node`'s sizes are those its op gives for `src` (its sources, in ggml's
/// order) and `view` (the storage it is a view of, if any).
type Rule = fn(node: &Tensor, src: &[&Tensor], view: Option<&Tensor>) -> Result<(), String>;

/// One op the importer reads.
pub struct Row {
    /// The op (`MUL_MAT`), or `UNARY:KIND` / `GLU:KIND`.
    pub op: &'static str,
    pub meaning: &'static str,
    rule: Rule,
}

const fn row(op: &'static str, meaning: &'static str, rule: Rule) -> Row {
    Row { op, meaning, rule }
}

/// The rows.
pub const ROWS: &[Row] = &[
    row("GET_ROWS", "rows `b` (i32 ids) of `a`: `[a.ne0, b.ne0, b.ne1, b.ne2]`", |n, s, _| {
        let [a, b] = two(s)?;
        same(n, [a.ne[0], b.ne[0], b.ne[1], b.ne[2]])
    }),
    row("RMS_NORM", "`a · rsqrt(mean(a², row) + ε)` per row of `ne0`, ε the f32 of op param 0", |n, s, _| {
        let [a] = one(s)?;
        let eps = n.param_f32(0).ok_or("no eps")?;
        if !(eps.is_finite() && eps > 0.0) {
            return Err(format!("eps {eps}"));
        }
        same(n, a.ne)
    }),
    row("MUL", "`a ⊙ b`, `b` repeated to `a`'s sizes", elementwise),
    row("ADD", "`a + b`, `b` repeated to `a`'s sizes", elementwise),
    row("SUB", "`a − b`, `b` repeated to `a`'s sizes", elementwise),
    row("SCALE", "`s · a + b`, `s` and `b` the f32s of op params 0 and 1", |n, s, _| same(n, one(s)?[0].ne)),
    row("UNARY:SILU", "`x · σ(x)`", unary),
    row("UNARY:SIGMOID", "`σ(x)`", unary),
    row("UNARY:SOFTPLUS", "`log(1 + eˣ)`", unary),
    row("UNARY:EXP", "`eˣ`", unary),
    row("GLU:SWIGLU", "`silu(a) ⊙ b` (or of the halves of `a` alone, swapped by op param 1)", |n, s, _| match s {
        [a, b] if a.ne == b.ne => same(n, a.ne),
        [a] if a.ne[0] % 2 == 0 => same(n, [a.ne[0] / 2, a.ne[1], a.ne[2], a.ne[3]]),
        _ => Err("operands of other sizes".into()),
    }),
    row(
        "MUL_MAT",
        "`aᵀ·b` per batch: `a [k, m]`, `b [k, n]`, result `[m, n]`, `a`'s batches broadcast",
        |n, s, _| {
            let [a, b] = two(s)?;
            let fits = a.ne[0] == b.ne[0] && divides(a.ne[2], b.ne[2]) && divides(a.ne[3], b.ne[3]);
            if !fits {
                return Err(format!("a {:?} and b {:?} do not multiply", a.ne, b.ne));
            }
            same(n, [a.ne[1], b.ne[1], b.ne[2], b.ne[3]])
        },
    ),
    row("RESHAPE", "`a`, contiguous, under other sizes: a view of its storage where `a` starts", |n, s, v| {
        let [a] = one(s)?;
        if n.numel() != a.numel() || !contiguous(a)? {
            return Err(format!("{:?} from {:?}, contiguous {}", n.ne, a.ne, contiguous(a)?));
        }
        let start = if a.view_src.is_some() { a.view_offs } else { 0 };
        if !contiguous(n)? || n.view_offs != start {
            return Err(format!(
                "strides {:?} at byte {}, not {:?}'s contiguous values from byte {start}",
                n.nb, n.view_offs, n.ne
            ));
        }
        within(n, v)
    }),
    row("VIEW", "`ne` values of the storage at byte offset `view_offs` with strides `nb`", |n, _, v| within(n, v)),
    row("PERMUTE", "`a` with dim `i` moved to dim `axes[i]` (op params 0 to 3): a view", |n, s, v| {
        let [a] = one(s)?;
        let axes: Vec<usize> = n.op_params.iter().take(DIMS).map(|&x| usize::try_from(x).unwrap_or(DIMS)).collect();
        let mut seen = [false; DIMS];
        for &x in &axes {
            *seen.get_mut(x).ok_or("an axis past 3")? = true;
        }
        if axes.len() != DIMS || seen.contains(&false) {
            return Err(format!("axes {axes:?} are not a permutation"));
        }
        if (0..DIMS).any(|i| n.ne[axes[i]] != a.ne[i] || n.nb[axes[i]] != a.nb[i]) {
            return Err(format!("{:?}/{:?} is not {:?}/{:?} permuted by {axes:?}", n.ne, n.nb, a.ne, a.nb));
        }
        within(n, v)
    }),
    row("TRANSPOSE", "`a` with dims 0 and 1 swapped: a view", |n, s, v| {
        let [a] = one(s)?;
        let swapped = n.ne == [a.ne[1], a.ne[0], a.ne[2], a.ne[3]] && n.nb == [a.nb[1], a.nb[0], a.nb[2], a.nb[3]];
        if !swapped {
            return Err(format!("{:?} is not {:?} transposed", n.ne, a.ne));
        }
        within(n, v)
    }),
    row("CONT", "`a`'s values, contiguous, under the node's sizes", |n, s, _| {
        let [a] = one(s)?;
        if n.numel() != a.numel() {
            return Err(format!("{:?} holds other than {:?}'s values", n.ne, a.ne));
        }
        Ok(())
    }),
    row("CPY", "`a`'s values written into `b` (converted to `b`'s type); the result is `b`", |n, s, _| {
        let [a, b] = two(s)?;
        if a.numel() != b.numel() {
            return Err(format!("{:?} into {:?}", a.ne, b.ne));
        }
        same(n, b.ne)
    }),
    row("CONCAT", "`a` then `b` along dim op param 0", |n, s, _| {
        let [a, b] = two(s)?;
        let d =
            usize::try_from(*n.op_params.first().ok_or("no dim")?).ok().filter(|&d| d < DIMS).ok_or("a dim past 3")?;
        let mut ne = a.ne;
        ne[d] = a.ne[d].checked_add(b.ne[d]).ok_or("overflow")?;
        if (0..DIMS).any(|i| i != d && a.ne[i] != b.ne[i]) {
            return Err(format!("{:?} and {:?} differ off dim {d}", a.ne, b.ne));
        }
        same(n, ne)
    }),
    row(
        "SSM_CONV",
        "per channel, `Σⱼ c[j] · x[t + j]` over windows of `c.ne0` columns of `x [K−1+T, C, S]`",
        |n, s, _| {
            let [x, c] = two(s)?;
            if x.ne[1] != c.ne[1] || x.ne[0] < c.ne[0] {
                return Err(format!("x {:?}, kernel {:?}", x.ne, c.ne));
            }
            same(n, [c.ne[1], (x.ne[0] - c.ne[0]).checked_add(1).ok_or("overflow")?, x.ne[2], 1])
        },
    ),
    row("ROPE", "`a` rotated by the positions `b` (mode, dims and base in op params)", |n, s, _| match s {
        [a, _, ..] => same(n, a.ne),
        _ => Err("fewer than two operands".into()),
    }),
    row(
        "SET_ROWS",
        "rows `b` written into `a` (source 2) at the rows the ids `c` name; the result is `a`",
        |n, s, v| {
            let [b, c, a] = s else { return Err("not three operands".into()) };
            let fits = a.ne[0] == b.ne[0] && a.ne[2] == b.ne[2] && a.ne[3] == b.ne[3] && b.ne[1] == c.ne[0];
            if !fits {
                return Err(format!("rows {:?} at {:?} into {:?}", b.ne, c.ne, a.ne));
            }
            same(n, a.ne)?;
            within(n, v)
        },
    ),
    row("SUM_ROWS", "the sum of each row: `[1, ne1, ne2, ne3]`", |n, s, _| {
        let [a] = one(s)?;
        same(n, [1, a.ne[1], a.ne[2], a.ne[3]])
    }),
    row("REPEAT", "`a` tiled to the node's sizes, each a multiple of `a`'s", |n, s, _| match s {
        [a, ..] if (0..DIMS).all(|i| divides(a.ne[i], n.ne[i])) => Ok(()),
        _ => Err("sizes that are not multiples of the operand's".into()),
    }),
    row("SOFT_MAX", "`softmax(s · a + mask)` per row, `s` the f32 of op param 0", |n, s, _| match s {
        [a] => same(n, a.ne),
        [a, m, ..] if m.ne[0] == a.ne[0] && m.ne[1] >= a.ne[1] => same(n, a.ne),
        _ => Err("a mask that does not cover the scores".into()),
    }),
    row(
        "FLASH_ATTN_EXT",
        "`softmax(s · q·kᵀ + mask)·v` per head, fused: `[v.ne0, q.ne2, q.ne1, q.ne3]`",
        |n, s, _| match s {
            [q, k, v, ..] if k.ne[0] == q.ne[0] && v.ne[1] == k.ne[1] => same(n, [v.ne[0], q.ne[2], q.ne[1], q.ne[3]]),
            _ => Err("q, k and v that do not fit".into()),
        },
    ),
    row(
        "GATED_DELTA_NET",
        "the gated delta rule over `v [S_v, H, T, B]` from `state [S_v, S_v, H, B]`: the outputs `[S_v·H, T·B]` then the `K` states (op param 0)",
        |n, s, _| {
            let [_, _, v, _, _, state] = s else { return Err("not six operands".into()) };
            let k = i64::from(*n.op_params.first().ok_or("no state count")?);
            let [sv, h, t, b] = v.ne;
            if state.ne != [sv, sv, h, b] || k < 1 {
                return Err(format!("state {:?} for v {:?}, {k} states", state.ne, v.ne));
            }
            let rows =
                t.checked_mul(b).and_then(|o| o.checked_add(k.checked_mul(sv)?.checked_mul(b)?)).ok_or("overflow")?;
            same(n, [sv.checked_mul(h).ok_or("overflow")?, rows, 1, 1])
        },
    ),
];

fn one<'a>(s: &[&'a Tensor]) -> Result<[&'a Tensor; 1], String> {
    match s {
        [a] => Ok([a]),
        _ => Err(format!("{} operands, not one", s.len())),
    }
}

fn two<'a>(s: &[&'a Tensor]) -> Result<[&'a Tensor; 2], String> {
    match s {
        [a, b, ..] => Ok([a, b]),
        _ => Err(format!("{} operands, not two", s.len())),
    }
}

fn divides(a: i64, b: i64) -> bool {
    a > 0 && b % a == 0
}

fn same(n: &Tensor, ne: [i64; DIMS]) -> Result<(), String> {
    if n.ne == ne { Ok(()) } else { Err(format!("sizes {:?}, its rule gives {ne:?}", n.ne)) }
}

fn unary(n: &Tensor, s: &[&Tensor], _: Option<&Tensor>) -> Result<(), String> {
    same(n, one(s)?[0].ne)
}

fn elementwise(n: &Tensor, s: &[&Tensor], _: Option<&Tensor>) -> Result<(), String> {
    let [a, b] = two(s)?;
    if !(0..DIMS).all(|i| divides(b.ne[i], a.ne[i]) || (a.ne[i] == 0 && b.ne[i] <= 1)) {
        return Err(format!("{:?} does not repeat to {:?}", b.ne, a.ne));
    }
    same(n, a.ne)
}

/// The bytes of `blocks` values of type `ty`, and how many values a block holds.
fn block(ty: &str) -> Result<(u64, i64), String> {
    Ok(match ty {
        "f32" | "i32" => (4, 1),
        "f16" | "bf16" => (2, 1),
        "i64" => (8, 1),
        "q8_0" => (34, 32),
        "q4_0" => (18, 32),
        "q4_K" => (144, 256),
        "q5_K" => (176, 256),
        "q6_K" => (210, 256),
        other => return Err(format!("type {other}, which this reader does not know")),
    })
}

/// Whether `t`'s strides are the contiguous ones of its type and sizes (a dim of one size may
/// have any stride).
fn contiguous(t: &Tensor) -> Result<bool, String> {
    let (bytes, per) = block(&t.ty)?;
    if t.ne[0] % per != 0 {
        return Ok(false);
    }
    let mut ok = t.nb[0] == bytes;
    let mut stride = ((t.ne[0] / per) as u64).saturating_mul(bytes);
    for d in 1..DIMS {
        ok &= t.ne[d] <= 1 || t.nb[d] == stride;
        stride = stride.saturating_mul(t.ne[d].max(1) as u64);
    }
    Ok(ok)
}

/// Checks that view `n`'s bytes lie within the storage `v` it is a view of.
fn within(n: &Tensor, v: Option<&Tensor>) -> Result<(), String> {
    let v = v.ok_or("a view of no storage")?;
    let (bytes, per) = block(&v.ty)?;
    let size = ((v.numel().ok_or("overflow")? / per) as u64).checked_mul(bytes).ok_or("overflow")?;
    if n.ne.contains(&0) {
        return Ok(());
    }
    let (nbytes, nper) = block(&n.ty)?;
    let first_row = ((n.ne[0] / nper).max(1) as u64).checked_mul(nbytes).ok_or("overflow")?;
    let last = (1..DIMS).try_fold(n.view_offs.checked_add(first_row), |end, d| {
        Some(end?.checked_add((n.ne[d] as u64 - 1).checked_mul(n.nb[d])?))
    });
    match last.flatten() {
        Some(end) if end <= size => Ok(()),
        _ => Err(format!("bytes up to {last:?} of a storage of {size}")),
    }
}

/// The row of op `name` (`UNARY:SILU`, `MUL_MAT`, …).
pub fn row_of(name: &str) -> Option<&'static Row> {
    ROWS.iter().find(|r| r.op == name)
}

/// Runs every node's rule.
pub fn check_shapes(rec: &Recording) -> Result<(), GraphError> {
    for n in &rec.nodes {
        let row = row_of(&n.row_name()).ok_or_else(|| GraphError::NoRow {
            id: n.id.clone(),
            name: n.name.clone(),
            op: n.row_name(),
        })?;
        let src: Vec<&Tensor> = n.src.iter().flatten().filter_map(|id| rec.get(id)).collect();
        let view = n.view_src.as_ref().and_then(|id| rec.get(id));
        (row.rule)(n, &src, view).map_err(|why| node_error(n, why))?;
    }
    Ok(())
}
