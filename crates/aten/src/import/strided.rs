//! `Strided`: a tensor of any element type as torch lays one out — a view of a shared storage by
//! sizes, strides and an offset — with ATen's layout ops on it.
//!
//! The importer follows every layout op element by element: its elements are references to IR
//! tensors' values and expressions in the position, so a `view`, `transpose`, `select`, `slice`,
//! `expand`, `cat` or a `copy_` through a view is read exactly, strides included, and what reaches
//! a compute op is the list of which value sits at each index. The rules are torch's: a view shares
//! its source's storage and a `copy_` writes through it; `reshape` is a view where `view` would be
//! one and a copy otherwise.

use std::cell::RefCell;
use std::rc::Rc;

/// The values a storage holds: listed, or made from their index (`len` values, value `i` being
/// `nth(base, i)`: an IR tensor's values in order, without listing them until one is written).
#[derive(Clone, Debug)]
enum Store<T> {
    Listed(Vec<T>),
    Made { len: usize, base: T, nth: fn(&T, usize) -> T },
}

impl<T: Clone> Store<T> {
    fn get(&self, i: usize) -> T {
        match self {
            Store::Listed(v) => v[i].clone(),
            Store::Made { base, nth, .. } => nth(base, i),
        }
    }

    fn len(&self) -> usize {
        match self {
            Store::Listed(v) => v.len(),
            Store::Made { len, .. } => *len,
        }
    }

    /// The values listed, so that one can be written.
    fn listed(&mut self) -> &mut Vec<T> {
        if let Store::Made { len, base, nth } = self {
            let values = (0..*len).map(|i| nth(base, i)).collect();
            *self = Store::Listed(values);
        }
        match self {
            Store::Listed(v) => v,
            Store::Made { .. } => unreachable!("listed above"),
        }
    }
}

/// A strided view of a shared storage of `T`.
#[derive(Clone, Debug)]
pub struct Strided<T> {
    storage: Rc<RefCell<Store<T>>>,
    pub sizes: Vec<usize>,
    strides: Vec<usize>,
    offset: usize,
}

/// The row-major strides of `sizes`.
fn contiguous(sizes: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; sizes.len()];
    for d in (0..sizes.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * sizes[d + 1];
    }
    strides
}

/// `d` (negative from the end) as an index into `rank` dims (`extra` more for a new dim).
pub fn dim(d: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    let at = if d < 0 { d + r } else { d };
    if (0..r).contains(&at) { Ok(at as usize) } else { Err(format!("dim {d} of a tensor of {rank} dims")) }
}

impl<T: Clone> Strided<T> {
    /// A contiguous tensor of `sizes` holding `values` row-major.
    pub fn new(sizes: Vec<usize>, values: Vec<T>) -> Strided<T> {
        let strides = contiguous(&sizes);
        Strided { storage: Rc::new(RefCell::new(Store::Listed(values))), sizes, strides, offset: 0 }
    }

    /// A contiguous tensor of `sizes` whose value `i` (row-major) is `nth(&base, i)`, made when
    /// read rather than listed.
    pub fn made(sizes: Vec<usize>, base: T, nth: fn(&T, usize) -> T) -> Strided<T> {
        let strides = contiguous(&sizes);
        let len = sizes.iter().product();
        Strided { storage: Rc::new(RefCell::new(Store::Made { len, base, nth })), sizes, strides, offset: 0 }
    }

    /// Whether the view is all of its storage, in order.
    fn whole(&self) -> bool {
        self.offset == 0 && self.strides == contiguous(&self.sizes) && self.numel() == self.storage.borrow().len()
    }

    /// The base of a made storage this view is all of, in order: an IR tensor's values, unlisted.
    pub fn made_whole(&self) -> Option<T> {
        match &*self.storage.borrow() {
            Store::Made { base, .. } if self.whole() => Some(base.clone()),
            _ => None,
        }
    }

    /// Whether any element satisfies `f`, visited in row-major order (stopping at the first).
    pub fn any(&self, f: impl Fn(&T) -> bool) -> bool {
        let s = self.storage.borrow();
        self.indices().into_iter().any(|i| f(&s.get(i)))
    }

    pub fn numel(&self) -> usize {
        self.sizes.iter().product()
    }

    /// The storage index of each element, row-major: the offset moves by one stride per step of
    /// the last dim, and back when a dim wraps.
    fn indices(&self) -> Vec<usize> {
        let n = self.numel();
        let mut out = Vec::with_capacity(n);
        let mut at = vec![0usize; self.sizes.len()];
        let mut position = self.offset;
        for _ in 0..n {
            out.push(position);
            for d in (0..at.len()).rev() {
                at[d] += 1;
                position += self.strides[d];
                if at[d] < self.sizes[d] {
                    break;
                }
                position -= self.strides[d] * self.sizes[d];
                at[d] = 0;
            }
        }
        out
    }

    /// The elements, row-major.
    pub fn values(&self) -> Vec<T> {
        let s = self.storage.borrow();
        self.indices().into_iter().map(|i| s.get(i)).collect()
    }

    fn view(&self, sizes: Vec<usize>, strides: Vec<usize>, offset: usize) -> Strided<T> {
        Strided { storage: Rc::clone(&self.storage), sizes, strides, offset }
    }

    /// A new contiguous tensor of the same elements (`clone`); a made storage seen whole stays
    /// made.
    pub fn copy(&self) -> Strided<T> {
        if let Store::Made { len, base, nth } = &*self.storage.borrow()
            && self.whole()
        {
            let store = Store::Made { len: *len, base: base.clone(), nth: *nth };
            let (sizes, strides) = (self.sizes.clone(), self.strides.clone());
            return Strided { storage: Rc::new(RefCell::new(store)), sizes, strides, offset: 0 };
        }
        Strided::new(self.sizes.clone(), self.values())
    }

    /// `self` broadcast to `sizes`: stride 0 on new leading dims and on dims of size 1.
    pub fn broadcast_to(&self, sizes: &[usize]) -> Result<Strided<T>, String> {
        let lead = sizes.len().checked_sub(self.sizes.len()).ok_or("broadcast to fewer dims")?;
        let mut strides = vec![0; lead];
        for (i, (&have, &st)) in self.sizes.iter().zip(&self.strides).enumerate() {
            strides.push(match (have == sizes[lead + i], have) {
                (true, _) => st,
                (false, 1) => 0,
                _ => return Err(format!("{:?} does not broadcast to {sizes:?}", self.sizes)),
            });
        }
        Ok(self.view(sizes.to_vec(), strides, self.offset))
    }

    /// `view(sizes)`: the same elements under new sizes, when the strides allow it without a copy.
    pub fn view_as(&self, sizes: &[usize]) -> Result<Strided<T>, String> {
        let strides = view_strides(self, sizes)
            .ok_or_else(|| format!("{:?} with strides {:?} cannot be viewed as {sizes:?}", self.sizes, self.strides))?;
        let offset = self.indices().first().copied().unwrap_or(self.offset);
        Ok(self.view(sizes.to_vec(), strides, offset))
    }

    /// `reshape(sizes)`: a view when one exists, a contiguous copy otherwise.
    pub fn reshape(&self, sizes: &[usize]) -> Result<Strided<T>, String> {
        if self.numel() != sizes.iter().product::<usize>() {
            return Err(format!("{:?} cannot be reshaped to {sizes:?}", self.sizes));
        }
        self.view_as(sizes).or_else(|_| Ok(Strided::new(sizes.to_vec(), self.values())))
    }

    /// `transpose(a, b)`.
    pub fn transpose(&self, a: usize, b: usize) -> Strided<T> {
        let (mut sizes, mut strides) = (self.sizes.clone(), self.strides.clone());
        sizes.swap(a, b);
        strides.swap(a, b);
        self.view(sizes, strides, self.offset)
    }

    /// `unsqueeze(d)`, `d` in `0..=rank`.
    pub fn unsqueeze(&self, d: usize) -> Strided<T> {
        let (mut sizes, mut strides) = (self.sizes.clone(), self.strides.clone());
        let stride = if d < sizes.len() { sizes[d] * strides[d] } else { 1 };
        sizes.insert(d, 1);
        strides.insert(d, stride);
        self.view(sizes, strides, self.offset)
    }

    /// `squeeze(d)`: dim `d` dropped when it is 1, `self` otherwise.
    pub fn squeeze(&self, d: usize) -> Strided<T> {
        if self.sizes[d] != 1 {
            return self.clone();
        }
        let (mut sizes, mut strides) = (self.sizes.clone(), self.strides.clone());
        sizes.remove(d);
        strides.remove(d);
        self.view(sizes, strides, self.offset)
    }

    /// `select(d, i)`.
    pub fn select(&self, d: usize, i: usize) -> Result<Strided<T>, String> {
        if i >= self.sizes[d] {
            return Err(format!("index {i} of dim {d} of size {}", self.sizes[d]));
        }
        let (mut sizes, mut strides) = (self.sizes.clone(), self.strides.clone());
        let offset = self.offset + i * strides[d];
        sizes.remove(d);
        strides.remove(d);
        Ok(self.view(sizes, strides, offset))
    }

    /// `slice(d, start, end, step)` with `start..end` already clamped to the dim.
    pub fn slice(&self, d: usize, start: usize, end: usize, step: usize) -> Strided<T> {
        let (mut sizes, mut strides) = (self.sizes.clone(), self.strides.clone());
        let offset = self.offset + start * strides[d];
        sizes[d] = end.saturating_sub(start).div_ceil(step);
        strides[d] *= step;
        self.view(sizes, strides, offset)
    }

    /// `copy_(src)`: writes `src`, broadcast to `self`'s sizes, into `self`'s elements.
    pub fn write(&self, src: &Strided<T>) -> Result<(), String> {
        // All of a storage overwritten by all of a made one, in order: it becomes that one.
        if self.whole() && src.sizes == self.sizes && src.whole() && !Rc::ptr_eq(&self.storage, &src.storage) {
            let made = match &*src.storage.borrow() {
                Store::Made { len, base, nth } => Some(Store::Made { len: *len, base: base.clone(), nth: *nth }),
                Store::Listed(_) => None,
            };
            if let Some(store) = made {
                *self.storage.borrow_mut() = store;
                return Ok(());
            }
        }
        let values = src.broadcast_to(&self.sizes)?.values();
        let indices = self.indices();
        let mut storage = self.storage.borrow_mut();
        let listed = storage.listed();
        for (i, v) in indices.into_iter().zip(values) {
            listed[i] = v;
        }
        Ok(())
    }
}

/// `cat(tensors, d)`: a new contiguous tensor.
pub fn cat<T: Clone>(tensors: &[Strided<T>], d: usize) -> Result<Strided<T>, String> {
    let first = tensors.first().ok_or("cat of no tensors")?;
    let mut sizes = first.sizes.clone();
    sizes[d] = 0;
    for t in tensors {
        let same =
            t.sizes.len() == sizes.len() && t.sizes.iter().zip(&sizes).enumerate().all(|(i, (a, b))| i == d || a == b);
        if !same {
            return Err(format!("cat of {:?} and {:?} along dim {d}", first.sizes, t.sizes));
        }
        sizes[d] += t.sizes[d];
    }
    let outer: usize = sizes[..d].iter().product();
    let parts: Vec<Vec<T>> = tensors.iter().map(Strided::values).collect();
    let mut values = Vec::with_capacity(sizes.iter().product());
    for o in 0..outer {
        for (t, p) in tensors.iter().zip(&parts) {
            let run = t.sizes[d..].iter().product::<usize>();
            values.extend_from_slice(&p[o * run..(o + 1) * run]);
        }
    }
    Ok(Strided::new(sizes, values))
}

/// The strides under which `sizes` views the same storage positions, in the same order, as
/// `old`'s elements, when there are some. A view exists exactly when the storage position is an
/// affine function of the new multi-index: the strides are then forced by one step along each
/// dim, and every element is checked against them.
fn view_strides<T: Clone>(old: &Strided<T>, sizes: &[usize]) -> Option<Vec<usize>> {
    let at = old.indices();
    if at.len() != sizes.iter().product::<usize>() {
        return None;
    }
    let unit = contiguous(sizes);
    let base = at.first().copied().unwrap_or(old.offset);
    let mut strides = Vec::with_capacity(sizes.len());
    for (d, &n) in sizes.iter().enumerate() {
        strides.push(if n > 1 { at[unit[d]].checked_sub(base)? } else { unit[d] });
    }
    let mut index = vec![0usize; sizes.len()];
    for &position in &at {
        if base + index.iter().zip(&strides).map(|(i, s)| i * s).sum::<usize>() != position {
            return None;
        }
        for d in (0..index.len()).rev() {
            index[d] += 1;
            if index[d] < sizes[d] {
                break;
            }
            index[d] = 0;
        }
    }
    Some(strides)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iota(sizes: &[usize]) -> Strided<usize> {
        Strided::new(sizes.to_vec(), (0..sizes.iter().product()).collect())
    }

    #[test]
    fn a_transposed_view_reads_columns_and_a_copy_through_a_slice_writes_the_source() {
        let t = iota(&[2, 3]);
        assert_eq!(t.transpose(0, 1).values(), [0, 3, 1, 4, 2, 5]);
        let every_other = t.slice(1, 0, 3, 2);
        assert_eq!(every_other.values(), [0, 2, 3, 5]);
        every_other.write(&Strided::new(vec![1], vec![9])).expect("broadcast");
        assert_eq!(t.values(), [9, 1, 9, 9, 4, 9]);
    }

    #[test]
    fn a_transposed_view_is_not_viewable_flat_but_reshapes_by_a_copy() {
        let t = iota(&[2, 3]).transpose(0, 1);
        assert!(t.view_as(&[6]).is_err());
        assert_eq!(t.reshape(&[6]).expect("a copy").values(), [0, 3, 1, 4, 2, 5]);
    }

    #[test]
    fn an_expanded_head_axis_repeats_each_head_in_turn() {
        // repeat_kv: [kv, s, d] → unsqueeze(1) → expand [kv, 2, s, d] → reshape [2kv, s, d].
        let t = iota(&[2, 1, 2]).unsqueeze(1).broadcast_to(&[2, 2, 1, 2]).expect("expand");
        assert_eq!(t.reshape(&[4, 1, 2]).expect("reshape").values(), [0, 1, 0, 1, 2, 3, 2, 3]);
    }

    #[test]
    fn cat_joins_along_the_dim_and_select_drops_it() {
        let a = iota(&[2, 1]);
        let b = Strided::new(vec![2, 2], vec![7, 8, 9, 10]);
        let c = cat(&[a, b], 1).expect("cat");
        assert_eq!(c.values(), [0, 7, 8, 1, 9, 10]);
        assert_eq!(c.select(1, 2).expect("select").values(), [8, 10]);
    }
}
