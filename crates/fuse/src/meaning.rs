//! What each fused symbol means: a composition of primitive ops over the symbol's operands.
//!
//! This is the one definition of a fused symbol's meaning. `interp` runs a fused op by running
//! its meaning; the fusion patterns rewrite exactly these compositions into the symbol.

use ir::{Act, Fused, OpKind};

/// An operand of a step of a meaning: input `i` or output `i` of the fused op, or a temporary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    In(usize),
    Out(usize),
    Tmp(usize),
}

/// One primitive op of a meaning.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub kind: OpKind,
    pub reads: Vec<Slot>,
    pub writes: Vec<Slot>,
}

fn step(kind: OpKind, reads: &[Slot], writes: &[Slot]) -> Step {
    Step { kind, reads: reads.to_vec(), writes: writes.to_vec() }
}

/// The primitive ops a fused op of kind `f` with `inputs` operands and `outputs` results means, in
/// an order that reads each slot after writing it.
pub fn meaning(f: Fused, inputs: usize, outputs: usize) -> Vec<Step> {
    use Slot::*;
    match f {
        // (x, w₁, …, wₙ) → (w₁·x, …, wₙ·x)
        Fused::MergedQkv => (0..outputs).map(|i| step(OpKind::MatVec, &[In(1 + i), In(0)], &[Out(i)])).collect(),
        // (X, w [, bias]) → silu(conv(X, w) [+ bias])
        Fused::ConvBiasSilu => {
            let mut s = vec![step(OpKind::DepthwiseConv, &[In(0), In(1)], &[Tmp(0)])];
            let pre = if inputs == 3 {
                s.push(step(OpKind::Add, &[Tmp(0), In(2)], &[Tmp(1)]));
                Tmp(1)
            } else {
                Tmp(0)
            };
            s.push(step(OpKind::Act(Act::Silu), &[pre], &[Out(0)]));
            s
        }
        // (b, a, ssm_a, dt_bias) → (sigmoid(b), ssm_a · softplus(a + dt_bias))
        Fused::GdnGating => vec![
            step(OpKind::Act(Act::Sigmoid), &[In(0)], &[Out(0)]),
            step(OpKind::Add, &[In(1), In(3)], &[Tmp(0)]),
            step(OpKind::Act(Act::Softplus), &[Tmp(0)], &[Tmp(1)]),
            step(OpKind::Mul, &[In(2), Tmp(1)], &[Out(1)]),
        ],
        // (gate, value) → act(gate) · value
        Fused::GluActMul { act } => {
            vec![step(OpKind::Act(act), &[In(0)], &[Tmp(0)]), step(OpKind::Mul, &[Tmp(0), In(1)], &[Out(0)])]
        }
    }
}
