//! Block permutations: the tiled value-head order of the GGUF convention as a term.
//!
//! `permute[perm, size](x)`: block `i` of the result (`size` values) is block `perm[i]` of `x`. A
//! permutation is kept in one canonical form ([`canonical`]): its blocks as large as they can be,
//! and none at all when it is the identity, so that two equal permutations are one symbol.

use super::lemma::Lemma;
use super::term::{Dag, Id, Sym};
use formats::bind::Binding;
use ir::HeadMap;

/// The grouped→tiled permutation of `value_heads` heads over `key_heads`: tiled head `t = j·Hk + g`
/// holds grouped head `g·r + j` (`r = value_heads / key_heads`), as `formats::convention` tiles them.
pub fn tiled_heads(key_heads: usize, value_heads: usize) -> Vec<u32> {
    let r = value_heads / key_heads.max(1);
    (0..value_heads)
        .map(|t| {
            let (j, g) = (t / key_heads.max(1), t % key_heads.max(1));
            (g * r + j) as u32
        })
        .collect()
}

/// Whether `perm` moves nothing.
pub fn is_identity(perm: &[u32]) -> bool {
    perm.iter().enumerate().all(|(i, &p)| p as usize == i)
}

/// `perm` over blocks of `size` as blocks of `unit` (`unit` divides `size`).
pub fn expand(perm: &[u32], size: usize, unit: usize) -> Option<Vec<u32>> {
    if unit == 0 || !size.is_multiple_of(unit) {
        return None;
    }
    let k = size / unit;
    Some(perm.iter().flat_map(|&p| (0..k).map(move |m| (p as usize * k + m) as u32)).collect())
}

/// The canonical form of `perm` over blocks of `size`: the largest blocks it moves whole.
pub fn canonical(perm: &[u32], size: usize) -> (Vec<u32>, usize) {
    let n = perm.len();
    for k in (2..=n).rev() {
        if !n.is_multiple_of(k) {
            continue;
        }
        let whole = (0..n).step_by(k).all(|b| {
            let first = perm[b] as usize;
            first.is_multiple_of(k) && (0..k).all(|m| perm[b + m] as usize == first + m)
        });
        if whole {
            return ((0..n).step_by(k).map(|b| perm[b] / k as u32).collect(), size * k);
        }
    }
    (perm.to_vec(), size)
}

/// `perm` (over single values) restricted to `start..end`, when it maps that range onto itself:
/// the permutation of the slice, counted from `start`.
pub fn restrict(perm: &[u32], start: usize, end: usize) -> Option<Vec<u32>> {
    let part = perm.get(start..end)?;
    part.iter().map(|&p| (p as usize).checked_sub(start).filter(|&q| q < end - start).map(|q| q as u32)).collect()
}

/// The permutation (over single values) of a concatenation whose `i`-th part of `lens[i]` values is
/// permuted by `parts[i]` (over single values; `None`: not moved).
pub fn concat(lens: &[usize], parts: &[Option<Vec<u32>>]) -> Vec<u32> {
    let mut out = vec![];
    let mut at = 0u32;
    for (len, part) in lens.iter().zip(parts) {
        match part {
            Some(p) => out.extend(p.iter().map(|&q| q + at)),
            None => out.extend(at..at + *len as u32),
        }
        at += *len as u32;
    }
    out
}

/// Applies `perm` over blocks of `size` to `x`.
pub fn apply<T: Copy>(perm: &[u32], size: usize, x: &[T]) -> Option<Vec<T>> {
    if perm.len() * size != x.len() {
        return None;
    }
    Some(perm.iter().flat_map(|&p| x[p as usize * size..(p as usize + 1) * size].iter().copied()).collect())
}

impl Dag {
    /// `x` permuted by `perm` over blocks of `size`, in canonical form (itself when the
    /// permutation moves nothing).
    pub fn permute(&mut self, perm: &[u32], size: usize, x: Id) -> Id {
        let (p, s) = canonical(perm, size);
        if is_identity(&p) {
            return x;
        }
        self.raw(Sym::Permute { perm: p.into(), size: s }, &[x])
    }

    /// `(perm, size, x)` when `id` is `permute[perm, size](x)`.
    fn permuted(&self, id: Id) -> Option<(Vec<u32>, usize, Id)> {
        let n = self.node(id);
        match &n.sym {
            Sym::Permute { perm, size } => Some((perm.to_vec(), *size, n.args[0])),
            _ => None,
        }
    }

    /// The permutation of `id` over blocks of `unit` and its operand: the identity and `id` when it
    /// is not permuted, over `len` values.
    fn at_unit(&self, id: Id, unit: usize, len: usize) -> Option<(Vec<u32>, Id)> {
        match self.permuted(id) {
            Some((p, s, x)) => Some((expand(&p, s, unit)?, x)),
            None => Some(((0..(len / unit.max(1)) as u32).collect(), id)),
        }
    }

    /// `y` when `id` is `concat[rows, [m; r]](y, …, y)`: each row of `y` repeated `r` times.
    fn repeated(&self, id: Id) -> Option<(usize, usize, usize, Id)> {
        let n = self.node(id);
        let Sym::Concat { rows, lens } = &n.sym else { return None };
        let (&first, m) = (n.args.first()?, *lens.first()?);
        let same = n.args.len() > 1 && n.args.iter().all(|&a| a == first) && lens.iter().all(|&l| l == m);
        same.then_some((*rows, m, n.args.len(), first))
    }

    /// The normal form of `sym` over `args` by the permutation and repetition lemmas, when one of
    /// them applies.
    pub(crate) fn permutation_rules(&mut self, sym: &Sym, args: &[Id]) -> Option<Id> {
        match (sym, args) {
            (Sym::MatVec, &[w, x]) => {
                let (p, s, w0) = self.permuted(w)?;
                let Sym::Weight(Binding { tensor, .. }) = &self.node(w0).sym else { return None };
                let c = *self.cols.get(tensor)?;
                if s.is_multiple_of(c) {
                    let inner = self.mk(Sym::MatVec, &[w0, x]);
                    let id = self.permute(&p, s / c, inner);
                    return Some(self.fire(Lemma::PermuteThroughMatVec, id));
                }
                // Column blocks permuted within each row, against the vector permuted alike.
                let (q, t, x0) = self.permuted(x)?;
                let unit = gcd(s, t);
                let (pw, qx) = (expand(&p, s, unit)?, expand(&q, t, unit)?);
                let per_row = c / unit;
                let undone = per_row == qx.len()
                    && pw.len().is_multiple_of(per_row)
                    && pw
                        .chunks(per_row)
                        .enumerate()
                        .all(|(r, row)| row.iter().zip(&qx).all(|(&a, &b)| a as usize == r * per_row + b as usize));
                if !undone {
                    return None;
                }
                let id = self.mk(Sym::MatVec, &[w0, x0]);
                Some(self.fire(Lemma::PermuteCancels, id))
            }
            (Sym::Act(_) | Sym::Scale(_) | Sym::Offset(_), &[x]) => {
                if let Some((p, s, x0)) = self.permuted(x) {
                    let inner = self.mk(sym.clone(), &[x0]);
                    let id = self.permute(&p, s, inner);
                    return Some(self.fire(Lemma::PermuteCommutes, id));
                }
                let (rows, m, r, y) = self.repeated(x)?;
                let inner = self.mk(sym.clone(), &[y]);
                let id = self.mk(Sym::Concat { rows, lens: vec![m; r] }, &vec![inner; r]);
                Some(self.fire(Lemma::RepeatCommutes, id))
            }
            (&Sym::L2Norm { n, .. }, &[x]) => {
                if let Some((p, s, x0)) = self.permuted(x)
                    && s.is_multiple_of(n)
                {
                    let inner = self.mk(sym.clone(), &[x0]);
                    let id = self.permute(&p, s, inner);
                    return Some(self.fire(Lemma::PermuteCommutes, id));
                }
                let (rows, m, r, y) = self.repeated(x)?;
                if m != n {
                    return None;
                }
                let inner = self.mk(sym.clone(), &[y]);
                let id = self.mk(Sym::Concat { rows, lens: vec![m; r] }, &vec![inner; r]);
                Some(self.fire(Lemma::RepeatCommutes, id))
            }
            (&Sym::RmsNorm { n, .. }, &[x, w]) => {
                let (p, s, x0) = self.permuted(x)?;
                if !s.is_multiple_of(n) || self.permuted(w).is_some() {
                    return None;
                }
                let inner = self.mk(sym.clone(), &[x0, w]);
                let id = self.permute(&p, s, inner);
                Some(self.fire(Lemma::PermuteCommutes, id))
            }
            (Sym::Add | Sym::Mul, &[a, b]) => {
                let ((p, s, a0), (q, t, b0)) = (self.permuted(a)?, self.permuted(b)?);
                if p != q || s != t {
                    return None;
                }
                let inner = self.mk(sym.clone(), &[a0, b0]);
                let id = self.permute(&p, s, inner);
                Some(self.fire(Lemma::PermuteCommutes, id))
            }
            (Sym::Concat { rows: 1, lens }, parts) if parts.iter().any(|&x| self.permuted(x).is_some()) => {
                let mut perms = vec![];
                let mut inner = vec![];
                for &x in parts {
                    match self.permuted(x) {
                        Some((p, s, x0)) => {
                            perms.push(Some(expand(&p, s, 1)?));
                            inner.push(x0);
                        }
                        None => {
                            perms.push(None);
                            inner.push(x);
                        }
                    }
                }
                let joined = self.mk(sym.clone(), &inner);
                let id = self.permute(&concat(lens, &perms), 1, joined);
                Some(self.fire(Lemma::PermuteThroughConcat, id))
            }
            (&Sym::Slice { start, end, n }, &[x]) => {
                let (p, s, x0) = self.permuted(x)?;
                let p1 = expand(&p, s, 1)?;
                if p1.len() != n {
                    return None;
                }
                let q = restrict(&p1, start, end)?;
                let inner = self.mk(sym.clone(), &[x0]);
                let id = self.permute(&q, 1, inner);
                Some(self.fire(Lemma::PermuteThroughSlice, id))
            }
            (&Sym::ConvShift { c, k }, &[big_s, x]) => {
                let (ps, s0) = self.at_unit(big_s, k, c * k)?;
                let (px, x0) = self.at_unit(x, 1, c)?;
                if ps != px || is_identity(&ps) {
                    return None;
                }
                let inner = self.mk(sym.clone(), &[s0, x0]);
                let id = self.permute(&ps, k, inner);
                Some(self.fire(Lemma::PermuteThroughConv, id))
            }
            (&Sym::DepthwiseConv { c, k }, &[big_x, w]) => {
                let (px, x0) = self.at_unit(big_x, k, c * k)?;
                let (pw, w0) = self.at_unit(w, k, c * k)?;
                if px != pw || is_identity(&px) {
                    return None;
                }
                let inner = self.mk(sym.clone(), &[x0, w0]);
                let id = self.permute(&px, 1, inner);
                Some(self.fire(Lemma::PermuteThroughConv, id))
            }
            (&Sym::Proj(i), &[t]) => {
                let rule = self.node(t).clone();
                let Sym::DeltaRule { hv, hk, dk, dv, map: HeadMap::Tiled } = rule.sym else { return None };
                let [st, q, k, v, g, b] = rule.args[..] else { return None };
                let heads = tiled_heads(hk, hv);
                let (ps, s0) = self.at_unit(st, dk * dv, hv * dk * dv)?;
                let (pv, v0) = self.at_unit(v, dv, hv * dv)?;
                let (pg, g0) = self.at_unit(g, 1, hv)?;
                let (pb, b0) = self.at_unit(b, 1, hv)?;
                if [&ps, &pv, &pg, &pb].iter().any(|p| **p != heads) {
                    return None;
                }
                let grouped =
                    self.mk(Sym::DeltaRule { hv, hk, dk, dv, map: HeadMap::Grouped }, &[s0, q, k, v0, g0, b0]);
                let part = self.mk(Sym::Proj(i), &[grouped]);
                let id = self.permute(&heads, if i == 0 { dk * dv } else { dv }, part);
                Some(self.fire(Lemma::TiledDeltaRule, id))
            }
            (&Sym::DeltaRule { hv, hk, dk, dv, map: HeadMap::Grouped }, [st, q, k, rest @ ..]) if hk == hv => {
                let ((qrows, qm, r, q0), (krows, km, r2, k0)) = (self.repeated(*q)?, self.repeated(*k)?);
                if qm != dk || km != dk || r != r2 || qrows != krows || qrows * r != hv {
                    return None;
                }
                let ins = [&[*st, q0, k0][..], rest].concat();
                let id = self.mk(Sym::DeltaRule { hv, hk: qrows, dk, dv, map: HeadMap::Grouped }, &ins);
                Some(self.fire(Lemma::RepeatHeads, id))
            }
            _ => None,
        }
    }
}

/// The greatest common divisor.
fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_key_heads_of_four_value_heads_swap_the_middle_two() {
        assert_eq!(tiled_heads(2, 4), [0, 2, 1, 3]);
        assert_eq!(tiled_heads(2, 6), [0, 3, 1, 4, 2, 5]);
        assert!(is_identity(&tiled_heads(4, 4)) && is_identity(&tiled_heads(1, 4)));
    }

    #[test]
    fn the_canonical_form_merges_blocks_moved_whole() {
        let fine = expand(&[1, 0], 6, 2).expect("divides");
        assert_eq!(fine, [3, 4, 5, 0, 1, 2]);
        assert_eq!(canonical(&fine, 2), (vec![1, 0], 6));
        assert_eq!(canonical(&[0, 1, 2, 3], 5), (vec![0], 20));
        assert_eq!(canonical(&[0, 2, 1, 3], 1), (vec![0, 2, 1, 3], 1));
    }

    #[test]
    fn a_slice_keeps_its_permutation_only_when_mapped_onto_itself() {
        let p = concat(&[2, 4], &[None, Some(vec![1, 0, 3, 2])]);
        assert_eq!(p, [0, 1, 3, 2, 5, 4]);
        assert_eq!(restrict(&p, 2, 6), Some(vec![1, 0, 3, 2]));
        assert_eq!(restrict(&p, 0, 2), Some(vec![0, 1]));
        assert_eq!(restrict(&p, 1, 3), None);
        assert_eq!(apply(&[1, 0], 2, &[1, 2, 3, 4]), Some(vec![3, 4, 1, 2]));
    }
}
