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
