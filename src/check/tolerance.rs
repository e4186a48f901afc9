//! How far the engine's exact run may be from the reference: one place, with the reasoning.
//!
//! A tensor is compared as a whole: a value agrees when `|a − b| ≤ tol · scale`, where
//! `scale = max(1, max |b|)` over the tensor it is judged against, so that a logit near zero is
//! judged on the tensor's scale, not its own. Every comparison judges its *worst* value: the
//! witness of a disagreement is the value furthest out of tolerance, never the first.
//!
//! The check splits what it judges in two, so that no tolerance has to cover both a wrong program
//! and the rounding of a right one:
//!
//! 1. **Structure** ([`EXACT`]). The engine's own units run over f64 with every stored value kept
//!    exactly ([`crate::engine::run::Rounding::Exact`]) and are compared with the reference, which
//!    computes in f64 from the same f32 weights. The two differ only in the order of f64
//!    operations: about `n·2⁻⁵³` per dot product of `n` terms, amplified by the graph's
//!    conditioning. The generated tiny heads that amplify one f32 ulp by 10³ (a gated norm over two
//!    values) amplify one f64 ulp by as much, about 10⁻¹³ of the scale; `EXACT` = 10⁻⁹ sits four
//!    orders above that and five below the smallest error of a wrong program the gate has seen
//!    (an eps fixed at 10⁻⁵ instead of 10⁻⁶ under a norm of unit mean square moves it by 5·10⁻⁶).
//!    Nothing excuses a structural disagreement: it is a wrong program, whatever the conditioning.
//! 2. **Every Command where it runs** (`check::command`), with no tolerance of this kind: each
//!    value the engine's f32 run stores is judged against its Command's meaning on the inputs the
//!    engine read, within a bound derived from the Command's arithmetic (`check::bound`), so the
//!    graph's conditioning never enters and no size of error is excused.
//!
//! Measured (docs/SOUNDNESS.md): the structure within 2.7e-13 over the corpus and presets.

/// The tolerance of the structural comparison: the engine's units over f64, every stored value
/// kept exactly, against the reference; relative to the scale of each compared tensor.
pub const EXACT: f64 = 1e-9;
