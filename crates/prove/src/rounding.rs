//! Where the engine rounds: the numerics' rule, stated once.
//!
//! The proof is over real arithmetic, so a rounding is not a symbol that lemmas see: each value the
//! engine stores is rounded to its place's storage type, and the prover checks that every such
//! place is rounded exactly as the numerics say, and nothing else is: every buffer a unit writes to
//! `activations`, a conv window's columns to `activations`, a KV cache's entries to `kv_cache`, a
//! delta state to `recurrent_state`. Values a unit computes between its inputs and outputs stay f32
//! and are not places. At f32 numerics every place is f32: there are no roundings.
//!
//! The input of a matvec is rounded too where the numerics say k-quant matvecs read it quantized
//! to Q8_K ([`KquantInputs::Q8K`]): [`Place::KquantInput`], one per matvec the program runs. The
//! program places nothing there (the engine's matvec unit applies the rule to every Q4_K, Q5_K or Q6_K
//! matrix it reads, a type the checkpoint decides), so there is nothing to misplace: the proof
//! counts those inputs, and the check applies the rule itself at each of them.

use program::StateLayout;
use program::numerics::{KquantInputs, Numerics, Storage};

/// A place the engine stores a value in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Place {
    Buffer,
    ConvWindow,
    KvCache,
    DeltaState,
    Position,
    /// The input vector of a matvec, read quantized to Q8_K where the matrix is a k-quant.
    KquantInput,
}

impl Place {
    /// The place a state of `layout` is.
    pub(crate) fn of_state(layout: &StateLayout) -> Place {
        match layout {
            StateLayout::Position => Place::Position,
            StateLayout::ConvWindow { .. } => Place::ConvWindow,
            StateLayout::DeltaState { .. } => Place::DeltaState,
            StateLayout::KvCache { .. } => Place::KvCache,
        }
    }

    /// The storage `numerics` give this place (`None`: an integer, never rounded).
    pub fn storage(self, numerics: &Numerics) -> Option<Storage> {
        match self {
            Place::Buffer | Place::ConvWindow => Some(numerics.activations),
            Place::KvCache => Some(numerics.kv_cache),
            Place::DeltaState => Some(numerics.recurrent_state),
            Place::Position | Place::KquantInput => None,
        }
    }
}

/// A stored value whose rounding is not the one the numerics give its place.
#[derive(Clone, Debug, PartialEq)]
pub struct Misplaced {
    /// The buffer or state, by name.
    pub what: String,
    pub found: Storage,
    pub expected: Storage,
}

impl Place {
    /// The place's name, as proofs print it.
    pub fn name(self) -> &'static str {
        match self {
            Place::Buffer => "buffer",
            Place::ConvWindow => "conv window",
            Place::KvCache => "kv cache",
            Place::DeltaState => "delta state",
            Place::Position => "position",
            Place::KquantInput => "k-quant matvec input",
        }
    }
}

/// The roundings a proof checked: for each place and the storage below f32 it is rounded to (as
/// the numerics say and the program declares), how many stored values of the program sit there.
/// Empty at f32 numerics, where nothing is rounded.
pub type Roundings = std::collections::BTreeMap<(Place, &'static str), usize>;

/// The name of a storage, for [`Roundings`] keys.
pub(crate) fn storage_name(s: Storage) -> &'static str {
    match s {
        Storage::F32 => "f32",
        Storage::Bf16 => "bf16",
        Storage::F16 => "f16",
    }
}

/// The name of the rounding k-quant matvec inputs get under `inputs`, for [`Roundings`] keys
/// (`None`: the input as it is).
pub(crate) fn kquant_input_name(inputs: KquantInputs) -> Option<&'static str> {
    match inputs {
        KquantInputs::F32 => None,
        KquantInputs::Q8K => Some("q8_k"),
    }
}
