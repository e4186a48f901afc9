//! The KV cache and attention: `SET_ROWS` of the step's keys and values into their caches, and
//! `MUL_MAT`, `SOFT_MAX`, `MUL_MAT` over the cache views, read as the IR's `kv_append` and one
//! `attention`.
//!
//! A cache holds a row of `heads · head_dim` values per cell, laid out either cell by cell (cell
//! `c`, value `i` at `c · row + i`: llama.cpp's keys) or value by value (at `i · cells + c`: its
//! transposed values). Which one is read off the step's own write, which must put the row at cell
//! `p`, the step's position. Every read of a cell `c ≤ p` is then checked element by element: cell
//! `p` holds the values just written, and a cell before it the cache's own element at that cell
//! and value in the same layout (what the earlier steps wrote). Cells after `p` must be masked:
//! the mask input must hold `0` at cells `0..=p` and `−∞` after.

use ir::{HeadMap, OpKind, TensorId};

use super::compute::result;
use super::store::Elem;
use super::{Importer, Pending, index_space, sizes};
use crate::graph::Tensor;

/// One KV cache.
#[derive(Clone, Debug)]
pub(super) struct Cache {
    /// The IR state read at the start of the step.
    read: TensorId,
    /// The IR tensor holding it now.
    now: TensorId,
    /// Values per cell, and cells.
    row: usize,
    cells: usize,
    /// The step's write: its values (in the row's order) and their layout.
    written: Option<(Vec<Elem>, Layout)>,
}

/// How a cache lays out its cells.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Layout {
    /// Cell `c`, value `i` at `c · row + i`.
    ByCell,
    /// At `i · cells + c`.
    ByValue,
}

impl Cache {
    pub(super) fn new(read: TensorId, row: usize, cells: usize) -> Cache {
        Cache { read, now: read, row, cells, written: None }
    }

    fn offset(&self, layout: Layout, cell: usize, i: usize) -> usize {
        match layout {
            Layout::ByCell => cell * self.row + i,
            Layout::ByValue => i * self.cells + cell,
        }
    }
}

/// Scores of queries against a key cache, held until their softmax and the values.
#[derive(Clone, Debug)]
pub(super) struct Scores {
    q: TensorId,
    key: usize,
    /// The key cache's type: llama.cpp rounds the queries to it for the scores' product.
    key_ty: String,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
}

/// The cache a storage holds, by the state leaf it belongs to.
fn cache_by_root(im: &Importer<'_>, t: &Tensor) -> Option<usize> {
    let root = t.view_src.as_ref().unwrap_or(&t.id);
    let slot = im.states.iter().find(|s| &s.leaf == root)?;
    im.caches.iter().position(|c| c.read == slot.read)
}

/// `SET_ROWS(b, ids, a)`: row `i` of `b` written as row `ids[i]` of `a`. Into a KV cache, the
/// step's append, at cell `p`.
pub(super) fn set_rows(im: &mut Importer<'_>, n: &Tensor) -> Result<(), String> {
    let (b, ids, a) = (im.src(n, 0)?, im.src(n, 1)?, im.src(n, 2)?);
    let cache = cache_by_root(im, n).ok_or("rows written into a storage that is not a KV cache")?;
    if im.caches[cache].written.is_some() {
        return Err("a second write into the cache in one step".into());
    }
    if b.ty != "f32" {
        return Err(format!("rows of {}, not f32", b.ty));
    }
    if a.ty != "f32" {
        im.numerics.push(format!("kv={} ({} `{}`)", a.ty, n.id, n.name));
    }
    let index = im.input_values(ids)?;
    let values = im.read(b)?;
    let [width, count, _, _] = sizes(b)?;
    if index.len() != count || b.ne[2] != 1 || b.ne[3] != 1 {
        return Err(format!("{count} rows at {} indices", index.len()));
    }
    // The offsets each value of `b` lands at: row `ids[i]` of the node's view.
    let root = n.view_src.clone().ok_or("a SET_ROWS that is not a view of its destination")?;
    let bytes = im.stores[&root].bytes;
    let mut offsets = Vec::with_capacity(values.len());
    for i in index_space(&sizes(b)?) {
        let row = index[i[1]];
        if row < 0.0 || row.fract() != 0.0 {
            return Err(format!("a row index {row}"));
        }
        let at = |x: u64| usize::try_from(x).ok();
        let byte = (|| {
            at(n.view_offs)?
                .checked_add(i[0].checked_mul(at(n.nb[0])?)?)?
                .checked_add((row as usize).checked_mul(at(n.nb[1])?)?)
        })()
        .ok_or("a row past memory")?;
        if !byte.is_multiple_of(bytes) {
            return Err(format!("byte {byte}, not a whole element"));
        }
        offsets.push(byte / bytes);
    }
    let c = im.caches[cache].clone();
    if values.len() != c.row || width * count != c.row {
        return Err(format!("{} values written into a cache of rows of {}", values.len(), c.row));
    }
    let p = usize::try_from(im.rec.position).map_err(|_| "a position past memory")?;
    let layout = [Layout::ByCell, Layout::ByValue]
        .into_iter()
        .find(|&l| offsets.iter().enumerate().all(|(i, &o)| o == c.offset(l, p, i)))
        .ok_or_else(|| {
            format!(
                "its values land at {:?}…, not at cell {p} (the step's position) of the cache in either layout",
                &offsets[..offsets.len().min(4)]
            )
        })?;
    let heads = c.row / im.head_dim(c.read)?;
    let x = im.materialise(&values, &[heads, c.row / heads])?;
    let now = im.emit(OpKind::KvAppend, &[c.now, x])?;
    if a.ty != "f32" {
        im.rounds(1, &a.ty);
    }
    let c = &mut im.caches[cache];
    c.now = now;
    c.written = Some((values.clone(), layout));
    let store = im.stores.get_mut(&root).ok_or("no storage")?;
    for (&o, &e) in offsets.iter().zip(&values) {
        *store.elems.get_mut(o).ok_or("a write past the cache")? = e;
    }
    im.writer.insert(root, im.at);
    Ok(())
}

/// Checks that `t`, whose logical element `logical(cell, i)` is value `i` of cell `cell`, reads
/// cache `cache` as the step left it, at every cell up to the position (of `cells`).
fn check_read(
    im: &mut Importer<'_>,
    t: &Tensor,
    cache: usize,
    logical: impl Fn(usize, usize) -> usize,
    cells: usize,
) -> Result<(), String> {
    let elems = im.read(t)?;
    let c = im.caches[cache].clone();
    let (written, layout) = c.written.clone().ok_or("a read of the cache before the step writes it")?;
    let p = usize::try_from(im.rec.position).map_err(|_| "a position past memory")?;
    if p >= cells {
        return Err(format!("position {p} past the {cells} cells read"));
    }
    for cell in 0..=p {
        for (i, &new) in written.iter().enumerate() {
            let got = elems.get(logical(cell, i)).copied().ok_or("a view smaller than the cache")?;
            let want = if cell == p { new } else { Elem::Cell { cache, offset: c.offset(layout, cell, i) } };
            if got != want {
                return Err(format!(
                    "it reads {got:?} as value {i} of cell {cell}, where the cache holds {want:?} (a view that does not read the cache as it was written)"
                ));
            }
        }
    }
    Ok(())
}

/// `MUL_MAT` over a cache view: the scores (keys times queries) or the output (values times the
/// softmax). `None` when `a` is not a cache view.
pub(super) fn mul_mat(im: &mut Importer<'_>, n: &Tensor, a: &Tensor, b: &Tensor) -> Result<Option<()>, String> {
    let Some(cache) = cache_by_root(im, a) else { return Ok(None) };
    let [a0, a1, a2, _] = sizes(a)?;
    if a0 == 0
        || a1 == 0
        || a2 == 0
        || a0.checked_mul(a1).and_then(|x| x.checked_mul(a2)).is_none_or(|x| x > super::MAX_ELEMS)
    {
        return Err(format!("a cache view of {:?}", a.ne));
    }
    if let Some(Pending::Probs(s, scale)) = im.pending.get(&b.id).cloned() {
        // values: a [cells, head_dim, kv_heads] times probs [cells, 1, heads]
        let row = im.caches[cache].row;
        if a2 != s.kv_heads || a1 != s.head_dim || a1 * a2 != row {
            return Err(format!("a value view {:?} for {} KV heads of {}", a.ne, s.kv_heads, s.head_dim));
        }
        check_read(im, a, cache, |cell, i| ((i / a1) * a1 + i % a1) * a0 + cell, a0)?;
        let (k, v) = (im.caches[s.key].now, im.caches[cache].now);
        let y = im.emit(
            OpKind::Attention { scale: f64::from(scale), window: None, head_map: HeadMap::Grouped },
            &[s.q, k, v],
        )?;
        if s.key_ty != "f32" {
            im.rounds(0, &s.key_ty);
        }
        if a.ty != "f32" {
            im.numerics.push(format!(
                "attn={} ({} `{}`: the softmax weights, for the product with {} values)",
                a.ty, n.id, n.name, a.ty
            ));
        }
        return result(im, n, y).map(Some);
    }
    // keys: a [head_dim, cells, kv_heads] times q [head_dim, 1, heads]
    let [b0, b1, b2, _] = sizes(b)?;
    let row = im.caches[cache].row;
    if b0 != a0 || b1 != 1 || a2 == 0 || b2 % a2 != 0 || a0 * a2 != row {
        return Err(format!("scores of {:?} against a key view {:?}", b.ne, a.ne));
    }
    check_read(im, a, cache, |cell, i| ((i / a0) * a1 + cell) * a0 + i % a0, a1)?;
    let qe = im.read(b)?;
    let q = im.materialise(&qe, &[b2, b0])?;
    if a.ty != "f32" {
        im.numerics
            .push(format!("act={} ({} `{}`: the queries, for the product with {} keys)", a.ty, n.id, n.name, a.ty));
    }
    let key_ty = a.ty.clone();
    im.pending
        .insert(n.id.clone(), Pending::Scores(Scores { q, key: cache, key_ty, heads: b2, kv_heads: a2, head_dim: a0 }));
    Ok(Some(()))
}

/// `SOFT_MAX(scores, mask)` with its scale: the mask must hide exactly the cells after the
/// position.
pub(super) fn softmax(im: &mut Importer<'_>, n: &Tensor) -> Result<(), String> {
    let x = im.src(n, 0)?;
    let Some(Pending::Scores(s)) = im.pending.get(&x.id).cloned() else {
        return Err("a softmax of other than attention scores, which the importer does not read".into());
    };
    let scale = n.param_f32(0).ok_or("no scale")?;
    if n.param_f32(1).unwrap_or(0.0) != 0.0 || n.src.get(2).is_some_and(Option::is_some) {
        return Err("ALiBi or attention sinks, which the step does not have".into());
    }
    if x.ne[1] != 1 || x.ne[2] as usize != s.heads {
        return Err(format!("scores {:?}", x.ne));
    }
    let mask = im.src(n, 1)?;
    causal(im, mask, x.ne[0] as usize)?;
    im.pending.insert(n.id.clone(), Pending::Probs(s, scale));
    Ok(())
}

/// `FLASH_ATTN_EXT(q, k, v, mask)`: the fused attention, `q [hd, 1, heads]` over the cache views
/// `k`, `v` `[hd, cells, kv_heads]` (values not transposed), scores scaled by op param 0, the mask
/// hiding the cells after the position; the result `[hd, heads, 1]`. With an F16 cache, llama.cpp's
/// CPU kernel rounds `q` to f16 for the dot products and sums the weighted values in f16: two more
/// roundings, named.
pub(super) fn flash(im: &mut Importer<'_>, n: &Tensor) -> Result<(), String> {
    let (q, k, v) = (im.src(n, 0)?, im.src(n, 1)?, im.src(n, 2)?);
    let scale = n.param_f32(0).ok_or("no scale")?;
    if n.param_f32(1).unwrap_or(0.0) != 0.0
        || n.param_f32(2).unwrap_or(0.0) != 0.0
        || n.src.get(4).is_some_and(Option::is_some)
    {
        return Err("ALiBi, a logit softcap or attention sinks, which the step does not have".into());
    }
    let (kc, vc) = (
        cache_by_root(im, k).ok_or("keys that are not a KV cache view")?,
        cache_by_root(im, v).ok_or("values that are not a KV cache view")?,
    );
    let [hd, cells, kv_heads, _] = sizes(k)?;
    let [qd, tokens, heads, _] = sizes(q)?;
    let fits = qd == hd && tokens == 1 && v.ne == k.ne && kv_heads > 0 && heads % kv_heads == 0 && cells > 0;
    let row = im.caches[kc].row;
    if !fits || hd.checked_mul(kv_heads) != Some(row) || im.caches[vc].row != row {
        return Err(format!("q {:?} against k {:?}, v {:?}", q.ne, k.ne, v.ne));
    }
    let by_cell = move |cell: usize, i: usize| ((i / hd) * cells + cell) * hd + i % hd;
    check_read(im, k, kc, by_cell, cells)?;
    check_read(im, v, vc, by_cell, cells)?;
    causal(im, im.src(n, 3)?, cells)?;
    if k.ty != "f32" {
        im.numerics.push(format!(
            "act={} ({} `{}`: the queries, for the dot products with {} keys)",
            k.ty, n.id, n.name, k.ty
        ));
        im.numerics.push(format!("attn={} ({} `{}`: the weighted values summed in {})", v.ty, n.id, n.name, v.ty));
    }
    let qe = im.read(q)?;
    let qt = im.materialise(&qe, &[heads, hd])?;
    let (kt, vt) = (im.caches[kc].now, im.caches[vc].now);
    let y = im
        .emit(OpKind::Attention { scale: f64::from(scale), window: None, head_map: HeadMap::Grouped }, &[qt, kt, vt])?;
    if k.ty != "f32" {
        im.rounds(0, &k.ty);
    }
    result(im, n, y)
}

/// Checks that `mask` shows cells `0..=p` of `cells` and hides the rest.
fn causal(im: &Importer<'_>, mask: &Tensor, cells: usize) -> Result<(), String> {
    let values = im.input_values(mask)?;
    let p = usize::try_from(im.rec.position).map_err(|_| "a position past memory")?;
    for c in 0..cells {
        let want = if c <= p { 0.0 } else { f64::NEG_INFINITY };
        if values.get(c).copied() != Some(want) {
            return Err(format!(
                "mask {} holds {:?} at cell {c}, at position {p}: the step attends to cells 0..={p} only",
                mask.name,
                values.get(c)
            ));
        }
    }
    Ok(())
}

/// The IR tensor cache `read` holds at the end of the step: the step's append.
pub(super) fn cache_write(im: &mut Importer<'_>, read: TensorId) -> Result<TensorId, String> {
    let c = im.caches.iter().find(|c| c.read == read).ok_or("not a cache")?;
    if c.written.is_none() {
        return Err("the step does not write the cache".into());
    }
    Ok(c.now)
}

impl Importer<'_> {
    /// The head dim of KV cache state `read`.
    fn head_dim(&self, read: TensorId) -> Result<usize, String> {
        match self.builder.ty(read) {
            ir::Ty::Cache { dim, .. } => Ok(*dim),
            other => Err(format!("a cache of {other}")),
        }
    }
}
