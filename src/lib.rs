//! stepcheck: turns the decode step of a hybrid Gated-DeltaNet/attention model into an inference
//! engine's program, and checks that the program computes what the step graph says.
//!
//! The floors below this crate are crates of their own, so Cargo keeps the rules between them
//! (docs/ARCHITECTURE.md): `ir`; `formats` (checkpoints, names, bindings, the shared scalar
//! functions); `fuse`; `model`; `program` (the Commands); `lower` (the shim and `lower_graph`, never
//! `model`); `engine` (the engine's interpreter, never `ir` or the reference); `interp` (the
//! reference); `prove` (never either interpreter or the lowering). This crate holds the check, the
//! generators and oracle, batched decode and the command line, and re-exports the floors under the
//! paths the seed names (`crate::model::author::decode_step`, `crate::model::bind`,
//! `crate::engine::shim::EngineShim`, `crate::engine::program`, `crate::engine::lower`).

#![forbid(unsafe_code)]

pub use stepcheck_aten as aten;
pub use stepcheck_formats::scalar;
pub use stepcheck_fuse as fuse;
pub use stepcheck_ggml as ggml;
pub use stepcheck_interp as interp;
pub use stepcheck_ir as ir;
pub use stepcheck_model as model;
#[cfg(any(test, feature = "planted"))]
pub use stepcheck_planted as planted;
pub use stepcheck_prove as prove;

/// The formats crate's readers, under the name this crate gives them.
pub mod formats {
    pub use stepcheck_formats::{checkpoint, convention, finite, gguf, quants};
}

/// The engine: its program (`program`, `numerics`), the shim and the lowering that write it, and
/// its interpreter (`run`), each a crate of its own.
pub mod engine {
    pub use stepcheck_engine as run;
    pub use stepcheck_engine::{EngineRunner, EngineState, RunError};
    pub use stepcheck_lower::shim;
    pub use stepcheck_program::numerics;
    pub use stepcheck_program::{Block, BlockKind, Buf, Command, KquantInputs, Numerics, Program, StateRef, Storage};

    /// The program's types: the Commands, blocks, buffers and states.
    pub mod program {
        pub use stepcheck_program::*;
    }

    /// `lower_graph` and `LowerError`.
    pub mod lower {
        pub use stepcheck_lower::*;
    }
}

pub mod admission;
pub mod batch;
pub mod check;
pub mod cli;
pub mod r#gen;
pub mod limits;
pub mod prefill;
pub mod source;
