//! The shared fusion table: the fused symbols, what each means, and the patterns that introduce them.

pub mod meaning;

pub use meaning::{Slot, Step, meaning};
