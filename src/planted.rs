//! Deliberate bugs, planted only in unit tests, that show the check catches a fault in either
//! interpreter: each interpreter asks here at the one place its bug would sit.

use std::cell::Cell;

/// A bug one of the interpreters can be made to have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bug {
    /// The engine's delta rule reads key head `h / (Hv/Hk)` (grouped) for value head `h`, where the
    /// checkpoint's value heads are tiled (`h mod Hk`): the GGUF loader bug of prior-art.md.
    EngineGroupedValueHeads,
    /// The reference's attention reads KV head `h mod nKV` for query head `h` instead of
    /// `h / (nH/nKV)`.
    ReferenceTiledKvHeads,
    /// The engine's gated norm uses eps 1e-5 whatever the program says (issue 8: excused as
    /// ill-conditioned while the worst logit was 0.84 of the scale off).
    EngineGatedNormEpsFixed,
    /// The engine's l2 norm adds its eps outside the square root (`x / (‖x‖ + ε)`).
    EngineL2EpsOutsideSqrt,
    /// The engine's RoPE rotates the wrong way (every angle negated): the identity at position 0.
    EngineRopeBackwards,
    /// The engine rounds what it stores in f16 as bf16: a bug that shows only at reduced storage.
    EngineF16AsBf16,
    /// The engine quantizes a k-quant matvec's input to Q8_K rounding toward zero, not to nearest.
    EngineQ8kTowardZero,
    /// The engine's k-quant matvecs read their input as it is where the numerics say Q8_K.
    EngineQ8kIgnored,
}

thread_local! {
    static PLANTED: Cell<Option<Bug>> = const { Cell::new(None) };
}

/// Whether `bug` is planted on this thread.
pub fn is(bug: Bug) -> bool {
    PLANTED.with(|p| p.get() == Some(bug))
}

/// Runs `f` with `bug` planted on this thread.
pub fn with<T>(bug: Bug, f: impl FnOnce() -> T) -> T {
    PLANTED.with(|p| p.set(Some(bug)));
    let out = f();
    PLANTED.with(|p| p.set(None));
    out
}
