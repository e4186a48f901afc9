//! The shared fusion table: the fused symbols, what each means, and the patterns that introduce them.

#![forbid(unsafe_code)]

pub mod meaning;
pub mod rewrite;
pub mod table;

pub use meaning::{Slot, Step, meaning};
pub use table::{Entry, Symbol, TABLE, Uses, merged_views_precondition};
