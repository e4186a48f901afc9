//! stepcheck: turns the decode step of a hybrid Gated-DeltaNet/attention model into an inference
//! engine's program, and checks that the program computes what the step graph says.

pub mod admission;
pub mod batch;
pub mod check;
pub mod cli;
pub mod engine;
pub mod formats;
pub mod fuse;
pub mod r#gen;
pub mod interp;
pub mod ir;
pub mod limits;
pub mod model;
#[cfg(any(test, feature = "planted"))]
pub mod planted;
pub mod prove;
pub mod scalar;
pub mod source;
