//! The materialisation rules of the crate's table, over an [`Emitter`] that writes the IR ops.

use ir::{OpKind, StateKind, TensorId, Ty};

/// A list of IR values and the shape they are read as: the key of an emitter's memo.
pub type Listed = (Vec<(TensorId, usize)>, Vec<usize>);

/// What materialisation needs of an importer: the IR types it has written, a way to write one
/// more op, which tensors are the start-of-step reads of a state, and a memo of what it has
/// already materialised (so one list of values is one IR tensor).
pub trait Emitter {
    /// The type of IR tensor `t`.
    fn ty(&self, t: TensorId) -> &Ty;
    /// Writes op `kind` on `inputs`, one output, named after the node being read.
    fn emit(&mut self, kind: OpKind, inputs: &[TensorId]) -> Result<TensorId, String>;
    /// The kind of the state `t` is the start-of-step read of, if it is one.
    fn state_kind(&self, t: TensorId) -> Option<StateKind>;
    /// The IR tensor already written for a list of values and a shape.
    fn memo(&mut self) -> &mut foldhash::HashMap<Listed, TensorId>;
}

/// The values `ids` (row-major) as an IR tensor of `shape`, by the crate's rules.
pub fn materialise<E: Emitter>(e: &mut E, ids: &[(TensorId, usize)], shape: &[usize]) -> Result<TensorId, String> {
    if ids.len() != shape.iter().product::<usize>() || ids.is_empty() {
        return Err(format!("{} values cannot be a tensor of shape {shape:?}", ids.len()));
    }
    let key = (ids.to_vec(), shape.to_vec());
    if let Some(&t) = e.memo().get(&key) {
        return Ok(t);
    }
    let t = decompose(e, ids, shape)?;
    e.memo().insert(key, t);
    Ok(t)
}

/// A run of one row: `len` values of `tensor` from `start`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Run {
    tensor: TensorId,
    start: usize,
    len: usize,
}

/// The maximal runs of consecutive values of one tensor in `row`.
fn runs(row: &[(TensorId, usize)]) -> Vec<Run> {
    let mut out: Vec<Run> = vec![];
    for &(t, i) in row {
        match out.last_mut() {
            Some(r) if r.tensor == t && r.start + r.len == i => r.len += 1,
            _ => out.push(Run { tensor: t, start: i, len: 1 }),
        }
    }
    out
}

/// One piece of a row decomposition: values `from .. from + sources·width` of `tensor` as
/// `[sources, width]` (`sources = rows / group`), columns `col..col + len`, each row repeated
/// `group` times.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Piece {
    tensor: TensorId,
    from: usize,
    width: usize,
    col: usize,
    len: usize,
    group: usize,
}

fn decompose<E: Emitter>(e: &mut E, ids: &[(TensorId, usize)], shape: &[usize]) -> Result<TensorId, String> {
    let whole = ids[0].0;
    if numel(e, whole) == Some(ids.len()) && ids.iter().enumerate().all(|(i, &(t, j))| t == whole && i == j) {
        return reshaped(e, whole, shape);
    }
    let n = *shape.last().ok_or("a shape of no dims")?;
    // Runs shorter than a row, all of one tensor and one length that divides the row (a
    // query projection's gate halves, head after head), are first read as rows of their own
    // length: one slice rather than a concat of one slice per head.
    let all = runs(ids);
    let len = all[0].len;
    let one_kind = all.len() > 1 && all.iter().all(|r| r.tensor == all[0].tensor && r.len == len);
    if one_kind
        && n.is_multiple_of(len)
        && let Ok(t) = rows(e, ids, len)
    {
        return reshaped(e, t, shape);
    }
    let t = rows(e, ids, n)?;
    reshaped(e, t, shape)
}

/// The values as `[len / n, n]`, one piece per run of a row.
fn rows<E: Emitter>(e: &mut E, ids: &[(TensorId, usize)], n: usize) -> Result<TensorId, String> {
    let rows = ids.len() / n;
    let row_runs: Vec<Vec<Run>> = ids.chunks(n).map(runs).collect();
    let first = &row_runs[0];
    let same = row_runs
        .iter()
        .all(|r| r.len() == first.len() && r.iter().zip(first).all(|(a, b)| a.tensor == b.tensor && a.len == b.len));
    if !same {
        return Err("its rows are not the same runs of IR tensors' values (a transposed or gathered view)".into());
    }
    let mut pieces = vec![];
    for (k, run) in first.iter().enumerate() {
        let starts: Vec<usize> = row_runs.iter().map(|r| r[k].start).collect();
        pieces.push(piece(e, run.tensor, run.len, &starts)?);
    }
    if let Some(t) = conv_shift(e, &pieces, rows, n)? {
        return Ok(t);
    }
    let mut made = vec![];
    for p in &pieces {
        made.push(emit_piece(e, *p, rows)?);
    }
    if made.len() == 1 { Ok(made[0]) } else { e.emit(OpKind::Concat, &made) }
}

/// The piece whose rows start at `starts`: rows `stride` apart in `tensor`, each repeated
/// `group` times in turn.
fn piece<E: Emitter>(e: &E, tensor: TensorId, len: usize, starts: &[usize]) -> Result<Piece, String> {
    let numel = numel(e, tensor).ok_or("a run of a tensor that is not an array")?;
    let group = starts.iter().take_while(|&&s| s == starts[0]).count();
    let rows = starts.len();
    let sources = rows / group;
    let first = starts[0];
    let stride = if sources > 1 { starts[group].saturating_sub(first) } else { len };
    let regular = rows.is_multiple_of(group)
        && stride >= len
        && starts.iter().enumerate().all(|(r, &s)| s == first + (r / group) * stride);
    if !regular {
        return Err(format!(
            "runs of {len} values starting at {:?} are not rows of a tensor taken in turn",
            &starts[..starts.len().min(4)]
        ));
    }
    // Columns `col..col + len` of rows `stride` wide, starting `col` before the first run:
    // the tensor's own rows when they fit, otherwise the first offset that keeps the block
    // inside the tensor.
    let fits = |col: usize| col <= first && first - col + sources * stride <= numel;
    let aligned = first % stride.max(1);
    let col = if aligned + len <= stride && fits(aligned) {
        aligned
    } else {
        (0..=stride - len).find(|&c| fits(c)).ok_or("rows that run past the end of their tensor")?
    };
    Ok(Piece { tensor, from: first - col, width: stride, col, len, group })
}

fn emit_piece<E: Emitter>(e: &mut E, p: Piece, rows: usize) -> Result<TensorId, String> {
    let sources = rows / p.group;
    let numel = numel(e, p.tensor).unwrap_or(0);
    let block = if p.from == 0 && sources * p.width == numel {
        p.tensor
    } else {
        let flat = reshaped(e, p.tensor, &[numel])?;
        e.emit(OpKind::Slice { start: p.from, end: p.from + sources * p.width }, &[flat])?
    };
    let base = reshaped(e, block, &[sources, p.width])?;
    let cols = if p.col == 0 && p.len == p.width {
        base
    } else {
        e.emit(OpKind::Slice { start: p.col, end: p.col + p.len }, &[base])?
    };
    if p.group == 1 {
        return Ok(cols);
    }
    if sources == 1 {
        let vector = reshaped(e, cols, &[p.len])?;
        return e.emit(OpKind::Broadcast { rows }, &[vector]);
    }
    let copies = vec![cols; p.group];
    let joined = e.emit(OpKind::Concat, &copies)?;
    reshaped(e, joined, &[rows, p.len])
}

/// `conv_shift(S, x)` when the pieces are a conv state's newest `K−1` columns and then one
/// value per channel of `x`.
fn conv_shift<E: Emitter>(e: &mut E, pieces: &[Piece], rows: usize, n: usize) -> Result<Option<TensorId>, String> {
    let [window, new] = pieces else { return Ok(None) };
    let is_conv_state = e.state_kind(window.tensor) == Some(StateKind::Conv);
    let fits = is_conv_state
        && window.group == 1
        && window.from == 0
        && window.width == n
        && window.col == 1
        && window.len + 1 == n
        && new.group == 1
        && new.len == 1
        && new.width == 1
        && new.from == 0
        && numel(e, new.tensor) == Some(rows);
    if !fits {
        return Ok(None);
    }
    let x = reshaped(e, new.tensor, &[rows])?;
    e.emit(OpKind::ConvShift, &[window.tensor, x]).map(Some)
}

/// `t` as shape `shape`: itself, or a `reshape`.
pub fn reshaped<E: Emitter>(e: &mut E, t: TensorId, shape: &[usize]) -> Result<TensorId, String> {
    if e.ty(t) == &Ty::tensor(shape) {
        return Ok(t);
    }
    e.emit(OpKind::Reshape { shape: shape.to_vec() }, &[t])
}

/// The number of values of IR tensor `t`, if it is an array.
fn numel<E: Emitter>(e: &E, t: TensorId) -> Option<usize> {
    e.ty(t).numel()
}
