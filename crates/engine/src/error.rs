//! Why the engine interpreter refuses a program or a step.

use program::numerics::Storage;

/// Why [`super::EngineRunner::new`] refuses a program, or [`super::EngineRunner::step`] a step.
///
/// `command` names where a command sits: `block B (layer L kind) command C (unit)`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RunError {
    #[error("{command}: the checkpoint has no tensor {tensor}")]
    MissingWeight { command: String, tensor: String },
    #[error("{command}: {tensor} has shape {found:?}, expected {expected:?}")]
    WeightShape { command: String, tensor: String, expected: Vec<usize>, found: Vec<usize> },
    #[error("{tensor} (shape {shape:?}) cannot be read as its stored type: {why}")]
    WeightData { tensor: String, shape: Vec<usize>, why: String },
    #[error("{command}: buffer %{buffer} has length {found}, expected {expected}")]
    BufferLength { command: String, buffer: String, expected: usize, found: usize },
    #[error("{command}: no buffer {index} (the program has {count})")]
    NoSuchBuffer { command: String, index: usize, count: usize },
    #[error("{command}: no state {index} (the program has {count})")]
    NoSuchState { command: String, index: usize, count: usize },
    #[error("{command}: state %{state} is {found}, expected {expected}")]
    StateLayout { command: String, state: String, expected: String, found: String },
    #[error("state %{state} is stored as {found:?}, but the program's numerics store it as {expected:?}")]
    StateStorage { state: String, expected: Storage, found: Storage },
    #[error("state %{state} is used by no command")]
    UnusedState { state: String },
    #[error("the program has {count} position states, and needs exactly one")]
    Position { count: usize },
    #[error("{command}: {why}")]
    BadParameter { command: String, why: String },
    #[error("{command}: reads buffer %{buffer} before any command writes it")]
    ReadBeforeWrite { command: String, buffer: String },
    #[error("{command}: writes buffer %{buffer}, which an earlier command (or itself) already writes")]
    WrittenTwice { command: String, buffer: String },
    #[error("buffer %{buffer} is written by no command")]
    NeverWritten { buffer: String },
    #[error("the logits buffer %{buffer} has length {found}, but the vocabulary is {vocab}")]
    LogitsLength { buffer: String, found: usize, vocab: usize },
    #[error("{what} needs {values} values, more than this machine can allocate")]
    Allocation { what: String, values: String },
    #[error("token {token} is out of range: the vocabulary is {vocab}")]
    TokenOutOfRange { token: u32, vocab: usize },
    #[error("position {position} is beyond the KV caches' capacity of {capacity} positions")]
    CapacityExceeded { position: usize, capacity: usize },
    #[error("a state swapped into the runner has another program's layout")]
    ForeignState,
    #[error("the prefill: {0}")]
    Prefill(#[from] program::prefill::PrefillError),
}
