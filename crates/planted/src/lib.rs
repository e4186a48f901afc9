//! Deliberate bugs that show the gate catches a fault wherever it sits: in either interpreter, in
//! a kernel, in the lowering, in the prover's meaning of a Command or in the batched engine. Each
//! place asks here, on the thread that runs it, whether its bug is planted.
//!
//! Compiled for the unit tests and, behind the `planted` feature, into a release build, where
//! `STEPCHECK_PLANT=<Bug>` plants one bug on the main thread ([`from_env`]) so that `stepcheck
//! check` and `examples/gen_run.rs` can be watched to fail on it (docs/SOUNDNESS.md, "Planted
//! bugs"). A kernel that runs on the pool's threads asks on the thread that calls it.

#![forbid(unsafe_code)]

use std::cell::Cell;

/// A bug the gate's code under test can be made to have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bug {
    /// The engine's delta rule reads key head `h / (Hv/Hk)` (grouped) for value head `h`, where the
    /// checkpoint's value heads are tiled (`h mod Hk`): a GGUF loader bug seen in
    /// real engines (a loader without the inverse of the converter's tiled value-head order).
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
    /// The engine keeps its KV caches in the activations' storage type, not the numerics' KV cache
    /// type (issue 28: "agree" at `bf16/f32/f32` with percent-level wrong logits).
    EngineKvCacheInActivations,
    /// The engine rounds the delta state to bf16 where the program keeps it in f32 (ollama #15865's
    /// bug, in the engine instead of the program).
    EngineDeltaStateBf16,
    /// The float kernels' SIMD path drops the last value of a row whose length is not a multiple of
    /// its 8 lanes.
    EngineSimdTailDropped,
    /// The Q8_0 kernel scales each block by the previous block's `d`.
    EngineQ8_0NeighbourScale,
    /// The Q4_K kernel scales each block by the previous block's `d` and `dmin`.
    EngineQ4KNeighbourScale,
    /// The Q5_K kernel scales each block by the previous block's `d` and `dmin`.
    EngineQ5KNeighbourScale,
    /// The Q6_K kernel reads each sub-block's scale from its neighbour (sub-block `s` reads `s ^ 1`).
    EngineQ6KNeighbourScale,
    /// The Q4_K and Q5_K kernels scale the minimum by `d` instead of `dmin`.
    EngineKquantMinScaledByD,
    /// The lowering writes the step's advance before the layers.
    LowerAdvanceFirst,
    /// The lowering swaps a sigmoid gate's operands, and the prover's meaning of `SigmoidGate`
    /// swaps them too: a prover written to match a wrong lowering.
    ProverMatchesSwappedGate,
    /// The batched engine leaves a reused slot's state as its last sequence left it: the reset of a
    /// claim is skipped.
    BatchResetSkippedOnReuse,
    /// The batched engine's fork copies the conv windows of another slot than the parent's.
    BatchForkCopiesWrongConv,
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

/// The bug planted on this thread, if any.
pub fn current() -> Option<Bug> {
    PLANTED.with(Cell::get)
}

/// Runs `f` with `bug` (or none) planted on this thread, then plants again what was: how work
/// handed to another thread carries the bug of the thread that handed it (`kernels::threads`).
pub fn carried<T>(bug: Option<Bug>, f: impl FnOnce() -> T) -> T {
    let before = PLANTED.with(|p| p.replace(bug));
    let out = f();
    PLANTED.with(|p| p.set(before));
    out
}

/// Plants on this thread the bug `STEPCHECK_PLANT` names (its `Debug` name), for the rest of the
/// thread's life; returns it, or an error naming an unknown bug. Nothing is planted without the
/// variable.
pub fn from_env() -> Result<Option<Bug>, String> {
    let Ok(name) = std::env::var("STEPCHECK_PLANT") else { return Ok(None) };
    let bug = Bug::ALL.into_iter().find(|b| format!("{b:?}") == name).ok_or_else(|| {
        let known: Vec<String> = Bug::ALL.iter().map(|b| format!("{b:?}")).collect();
        format!("STEPCHECK_PLANT={name}: no such bug (known: {})", known.join(", "))
    })?;
    PLANTED.with(|p| p.set(Some(bug)));
    Ok(Some(bug))
}

impl Bug {
    /// Every bug, in declaration order.
    pub const ALL: [Bug; 20] = [
        Bug::EngineGroupedValueHeads,
        Bug::ReferenceTiledKvHeads,
        Bug::EngineGatedNormEpsFixed,
        Bug::EngineL2EpsOutsideSqrt,
        Bug::EngineRopeBackwards,
        Bug::EngineF16AsBf16,
        Bug::EngineQ8kTowardZero,
        Bug::EngineQ8kIgnored,
        Bug::EngineKvCacheInActivations,
        Bug::EngineDeltaStateBf16,
        Bug::EngineSimdTailDropped,
        Bug::EngineQ8_0NeighbourScale,
        Bug::EngineQ4KNeighbourScale,
        Bug::EngineQ5KNeighbourScale,
        Bug::EngineQ6KNeighbourScale,
        Bug::EngineKquantMinScaledByD,
        Bug::LowerAdvanceFirst,
        Bug::ProverMatchesSwappedGate,
        Bug::BatchResetSkippedOnReuse,
        Bug::BatchForkCopiesWrongConv,
    ];
}
