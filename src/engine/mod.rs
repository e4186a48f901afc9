//! The engine: its shim, its program, the lowering of a step graph into it, and its interpreter.

mod listing;
pub mod lower;
pub mod numerics;
pub mod program;
pub mod run;
pub mod shim;

pub use numerics::{KquantInputs, Numerics, Storage};
pub use program::{Block, BlockKind, Buf, Command, Program, StateRef};
pub use run::{EngineRunner, EngineState, RunError};
