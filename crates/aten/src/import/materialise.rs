//! Materialisation: the elements a compute op reads, as one IR tensor of the shape it needs.
//!
//! The elements name which IR value sits at each index. The rules, each exact, are tried in turn
//! on the rows of the shape (its last axis):
//!
//! | the elements are | the IR ops |
//! |---|---|
//! | an IR tensor's values in order | the tensor (a `reshape` when its shape differs) |
//! | per row, runs of values of IR tensors, the same runs in every row | one piece per run, joined by `concat` |
//! | a run that is columns `c..c+L` of rows `m` apart, row after row | `slice(c, c+L)` of the tensor's values as `[rows, m]` (after a `slice` of its flat values when they are not all its rows) |
//! | a run whose rows repeat each source row `g` times in turn | `concat` of `g` copies, `reshape`d (`repeat_interleave`) |
//! | a run that is the same values in every row | `broadcast` |
//! | a conv window's newest `K−1` columns and then a vector | `conv_shift` of the window and the vector |
//!
//! Anything else (a transposed matrix, values from numbers or the position alone) is refused with
//! what the elements are, and the node that needed them is named by the caller.

use ir::{OpKind, StateKind, TensorId, Ty};

use super::Importer;
use super::elem::Elem;
use super::strided::Strided;

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

impl Importer<'_> {
    /// The elements of `v` as an IR tensor of `shape`.
    pub(super) fn materialise(&mut self, v: &Strided<Elem>, shape: &[usize]) -> Result<TensorId, String> {
        if let Some(Elem::Ir(t, _)) = v.made_whole()
            && self.numel(t) == Some(v.numel())
            && v.numel() == shape.iter().product::<usize>()
        {
            return self.reshaped(t, shape);
        }
        let values = v.values();
        if values.len() != shape.iter().product::<usize>() || values.is_empty() {
            return Err(format!("{} values cannot be a tensor of shape {shape:?}", values.len()));
        }
        let ids: Vec<(TensorId, usize)> = values.iter().map(|e| e.ir()).collect::<Option<_>>().ok_or_else(|| {
            format!(
                "its values are computed from numbers or the position alone ({:?}, …), which no IR op holds",
                values[0]
            )
        })?;
        let key = (ids.clone(), shape.to_vec());
        if let Some(&t) = self.memo.get(&key) {
            return Ok(t);
        }
        let t = self.decompose(&ids, shape)?;
        self.memo.insert(key, t);
        Ok(t)
    }

    fn decompose(&mut self, ids: &[(TensorId, usize)], shape: &[usize]) -> Result<TensorId, String> {
        let whole = ids[0].0;
        if self.numel(whole) == Some(ids.len()) && ids.iter().enumerate().all(|(i, &(t, j))| t == whole && i == j) {
            return self.reshaped(whole, shape);
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
            && let Ok(t) = self.rows(ids, len)
        {
            return self.reshaped(t, shape);
        }
        let t = self.rows(ids, n)?;
        self.reshaped(t, shape)
    }

    /// The values as `[len / n, n]`, one piece per run of a row.
    fn rows(&mut self, ids: &[(TensorId, usize)], n: usize) -> Result<TensorId, String> {
        let rows = ids.len() / n;
        let row_runs: Vec<Vec<Run>> = ids.chunks(n).map(runs).collect();
        let first = &row_runs[0];
        let same = row_runs.iter().all(|r| {
            r.len() == first.len() && r.iter().zip(first).all(|(a, b)| a.tensor == b.tensor && a.len == b.len)
        });
        if !same {
            return Err("its rows are not the same runs of IR tensors' values (a transposed or gathered view)".into());
        }
        let mut pieces = vec![];
        for (k, run) in first.iter().enumerate() {
            let starts: Vec<usize> = row_runs.iter().map(|r| r[k].start).collect();
            pieces.push(self.piece(run.tensor, run.len, &starts)?);
        }
        if let Some(t) = self.conv_shift(&pieces, rows, n)? {
            return Ok(t);
        }
        let mut made = vec![];
        for p in &pieces {
            made.push(self.emit_piece(*p, rows)?);
        }
        if made.len() == 1 { Ok(made[0]) } else { self.emit(OpKind::Concat, &made) }
    }

    /// The piece whose rows start at `starts`: rows `stride` apart in `tensor`, each repeated
    /// `group` times in turn.
    fn piece(&self, tensor: TensorId, len: usize, starts: &[usize]) -> Result<Piece, String> {
        let numel = self.numel(tensor).ok_or("a run of a tensor that is not an array")?;
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

    fn emit_piece(&mut self, p: Piece, rows: usize) -> Result<TensorId, String> {
        let sources = rows / p.group;
        let numel = self.numel(p.tensor).unwrap_or(0);
        let block = if p.from == 0 && sources * p.width == numel {
            p.tensor
        } else {
            let flat = self.reshaped(p.tensor, &[numel])?;
            self.emit(OpKind::Slice { start: p.from, end: p.from + sources * p.width }, &[flat])?
        };
        let base = self.reshaped(block, &[sources, p.width])?;
        let cols = if p.col == 0 && p.len == p.width {
            base
        } else {
            self.emit(OpKind::Slice { start: p.col, end: p.col + p.len }, &[base])?
        };
        if p.group == 1 {
            return Ok(cols);
        }
        if sources == 1 {
            let vector = self.reshaped(cols, &[p.len])?;
            return self.emit(OpKind::Broadcast { rows }, &[vector]);
        }
        let copies = vec![cols; p.group];
        let joined = self.emit(OpKind::Concat, &copies)?;
        self.reshaped(joined, &[rows, p.len])
    }

    /// `conv_shift(S, x)` when the pieces are a conv state's newest `K−1` columns and then one
    /// value per channel of `x`.
    fn conv_shift(&mut self, pieces: &[Piece], rows: usize, n: usize) -> Result<Option<TensorId>, String> {
        let [window, new] = pieces else { return Ok(None) };
        let is_conv_state = self.state_kind(window.tensor) == Some(StateKind::Conv);
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
            && self.numel(new.tensor) == Some(rows);
        if !fits {
            return Ok(None);
        }
        let x = self.reshaped(new.tensor, &[rows])?;
        self.emit(OpKind::ConvShift, &[window.tensor, x]).map(Some)
    }

    /// `t` as shape `shape`: itself, or a `reshape`.
    pub(super) fn reshaped(&mut self, t: TensorId, shape: &[usize]) -> Result<TensorId, String> {
        if self.builder.ty(t) == &Ty::tensor(shape) {
            return Ok(t);
        }
        self.emit(OpKind::Reshape { shape: shape.to_vec() }, &[t])
    }

    /// The number of values of IR tensor `t`, if it is an array.
    pub(super) fn numel(&self, t: TensorId) -> Option<usize> {
        self.builder.ty(t).numel()
    }
}
