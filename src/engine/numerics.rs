//! The engine's numerics: the storage type of what it stores between units.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A storage type: values are rounded to it where the engine stores them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum Storage {
    F32,
    Bf16,
    F16,
}

impl Storage {
    pub const ALL: [Storage; 3] = [Storage::F32, Storage::Bf16, Storage::F16];

    /// `x` rounded to this type (round to nearest even), back in f32. At f32 it is `x`, inlined
    /// into every caller: the engine keeps every value it computes through here.
    #[inline(always)]
    pub fn round(self, x: f32) -> f32 {
        match self {
            Storage::F32 => x,
            reduced => reduced.round_reduced(x),
        }
    }

    /// [`Storage::round`] to a type narrower than f32.
    #[inline(never)]
    fn round_reduced(self, x: f32) -> f32 {
        match self {
            Storage::F32 => x,
            Storage::Bf16 => half::bf16::from_f32(x).to_f32(),
            Storage::F16 => half::f16::from_f32(x).to_f32(),
        }
    }

    /// The unit roundoff `u = 2^−p` of the type (half an ulp at 1).
    pub fn unit_roundoff(self) -> f64 {
        match self {
            Storage::F32 => 2f64.powi(-24),
            Storage::Bf16 => 2f64.powi(-8),
            Storage::F16 => 2f64.powi(-11),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Storage::F32 => "f32",
            Storage::Bf16 => "bf16",
            Storage::F16 => "f16",
        }
    }

    /// The type named `name` (`f32`, `bf16`, `f16`).
    pub fn parse(name: &str) -> Option<Storage> {
        Storage::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// The engine's numerics: where it stores activations (every buffer a unit writes, and the conv
/// windows), the KV cache, and the recurrent delta-rule state. Units compute in f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Numerics {
    pub activations: Storage,
    pub kv_cache: Storage,
    pub recurrent_state: Storage,
}

impl Numerics {
    /// Everything stored in f32.
    pub const F32: Numerics =
        Numerics { activations: Storage::F32, kv_cache: Storage::F32, recurrent_state: Storage::F32 };

    /// Activations and KV cache in bf16, the recurrent state in f32: how bf16 checkpoints run.
    pub const BF16: Numerics =
        Numerics { activations: Storage::Bf16, kv_cache: Storage::Bf16, recurrent_state: Storage::F32 };

    /// Parses `act[/kv[/state]]`, e.g. `f32`, `bf16`, `bf16/bf16/f32`; a missing kv type is the
    /// activations' and a missing state type is f32.
    pub fn parse(text: &str) -> Option<Numerics> {
        let parts: Vec<&str> = text.split('/').collect();
        let act = Storage::parse(parts.first()?)?;
        let kv = parts.get(1).map_or(Some(act), |s| Storage::parse(s))?;
        let state = parts.get(2).map_or(Some(Storage::F32), |s| Storage::parse(s))?;
        (parts.len() <= 3).then_some(Numerics { activations: act, kv_cache: kv, recurrent_state: state })
    }
}

impl Default for Numerics {
    fn default() -> Numerics {
        Numerics::F32
    }
}

impl fmt::Display for Numerics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.activations.name(), self.kv_cache.name(), self.recurrent_state.name())
    }
}

impl fmt::Display for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
