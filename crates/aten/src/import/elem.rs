//! `Elem`: what one element of a tensor is while the importer follows the graph — a value of an IR
//! tensor, a number, or an expression in the step's position — and the few operations on numbers
//! and positions the importer computes itself.
//!
//! A decode step computes its rotary angles from the position alone (`position · inv_freq`, their
//! cosines and sines, the M-RoPE sections interleaved by writes through strided views). Those
//! tensors are followed element by element as expressions in the position, so the interleave is
//! read exactly; the rotary row then reads the frequencies off the expressions. Arithmetic on them
//! is kept exact: a product is formed only where one factor is the position itself or the number
//! one, never by rounding two numbers together.

use ir::TensorId;

/// One element of a tensor the importer follows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Elem {
    /// Value `index` (row-major) of an IR tensor.
    Ir(TensorId, usize),
    /// A number.
    Num(f64),
    /// An expression in the step's position.
    Pos(PosExpr),
}

/// An expression in the step's position `p`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PosExpr {
    /// `p · f` (the position itself is `Angle(1.0)`).
    Angle(f64),
    /// `cos(p · f)`.
    Cos(f64),
    /// `sin(p · f)`.
    Sin(f64),
}

impl Elem {
    /// The IR value it is, if it is one.
    pub fn ir(self) -> Option<(TensorId, usize)> {
        match self {
            Elem::Ir(t, i) => Some((t, i)),
            _ => None,
        }
    }
}

/// Value `i` of the IR tensor `base` is a value of (the element a made storage of an IR tensor's
/// values holds at `i`).
pub fn nth_value(base: &Elem, i: usize) -> Elem {
    match *base {
        Elem::Ir(t, _) => Elem::Ir(t, i),
        other => other,
    }
}

/// `f(a)` for an elementwise ATen op on a number or a position expression, when it is exact.
pub fn unary(target: &str, a: Elem) -> Option<Elem> {
    use PosExpr::*;
    match (target, a) {
        ("torch.ops.aten.cos.default", Elem::Pos(Angle(f))) => Some(Elem::Pos(Cos(f))),
        ("torch.ops.aten.sin.default", Elem::Pos(Angle(f))) => Some(Elem::Pos(Sin(f))),
        _ => None,
    }
}

/// `a · b` on numbers and position expressions, when it is exact: the position times a number,
/// or anything times the number one.
pub fn product(a: Elem, b: Elem) -> Option<Elem> {
    match (a, b) {
        (Elem::Pos(PosExpr::Angle(one)), Elem::Num(f)) | (Elem::Num(f), Elem::Pos(PosExpr::Angle(one)))
            if one == 1.0 =>
        {
            Some(Elem::Pos(PosExpr::Angle(f)))
        }
        (x, Elem::Num(one)) | (Elem::Num(one), x) if one == 1.0 && !matches!(x, Elem::Ir(..)) => Some(x),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_position_times_a_frequency_is_an_angle_and_its_cosine_is_read_exactly() {
        let p = Elem::Pos(PosExpr::Angle(1.0));
        let angle = product(p, Elem::Num(0.25)).expect("exact");
        assert_eq!(angle, Elem::Pos(PosExpr::Angle(0.25)));
        assert_eq!(unary("torch.ops.aten.cos.default", angle), Some(Elem::Pos(PosExpr::Cos(0.25))));
        assert_eq!(product(Elem::Pos(PosExpr::Cos(0.25)), Elem::Num(1.0)), Some(Elem::Pos(PosExpr::Cos(0.25))));
    }

    #[test]
    fn a_product_that_would_round_is_not_formed() {
        assert_eq!(product(Elem::Pos(PosExpr::Angle(0.5)), Elem::Num(0.3)), None);
        assert_eq!(product(Elem::Num(0.5), Elem::Num(0.3)), None);
        assert_eq!(product(Elem::Pos(PosExpr::Cos(0.25)), Elem::Num(2.0)), None);
    }
}
