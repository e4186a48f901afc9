//! The engine: its shim, its program, the lowering of a step graph into it, and its interpreter.

pub mod lower;
pub mod numerics;
pub mod program;
pub mod shim;

pub use numerics::{Numerics, Storage};
pub use program::{Block, BlockKind, Buf, Command, Program, StateRef};
