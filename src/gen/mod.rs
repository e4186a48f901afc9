//! Generated cases and the oracle that judges them: what the property tests, the fuzz target and
//! the regression corpus share.
//!
//! One generator: a [`Case`] is drawn from a stream of bytes ([`Case::from_bytes`]), so proptest
//! (a vector of bytes) and `cargo fuzz` (libFuzzer's input, through `arbitrary` behind the
//! `arbitrary` feature) drive the same choices. A case is a spec (every layer pattern, head ratio
//! and size the engine accepts, and the constructs it refuses), the engine's shim with or without
//! one fusion symbol, the engine's numerics, and at most one [`Mutation`] of the step graph, each
//! with the outcome it must have. [`oracle::judge`] runs a case and checks that an accepted
//! program computes what its graph says and that a refused graph names the right error.
//! [`file`] is the text form of a case, the regression corpus's format.

pub mod case;
pub mod draw;
pub mod file;
pub mod mutation;
pub mod oracle;
pub mod outcome;
pub mod roles;
pub mod spec;
pub mod stats;

pub use case::{Case, Input};
pub use mutation::{Mutation, Stage, StatePart};
pub use outcome::{Expected, Outcome, Place};
