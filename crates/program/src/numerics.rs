//! The engine's numerics: the storage type of what it stores between units.

use std::fmt;

use serde::{Deserialize, Serialize};

use formats::gguf::GgmlType;

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

/// How a matvec over k-quant weights reads its input vector.
///
/// [`KquantInputs::Q8K`] is llama.cpp's choice for k-quants, made a rule of the program: the
/// input is quantized to Q8_K blocks and dotted with the weights' integers exactly. A vector is
/// cut into blocks of 256 values; a block `x` whose values are all finite, with `a = max |x|`, is
/// held as `d · q`: `q = round_half_even(x · (127 / a))` (integers within ±127) and `d = a / 127`
/// (all zeros when `a = 0`); a block with a value that is not finite is not a number (every `q`
/// dotted with it is NaN). The matrices it applies to are those stored as Q4_K, Q5_K or Q6_K (the
/// k-quants of Q4_K_M and Q5_K_M files); every other matvec reads its input as it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum KquantInputs {
    /// The input as it is (in f32).
    #[default]
    F32,
    /// The input quantized to Q8_K blocks, as above.
    Q8K,
}

impl KquantInputs {
    pub const ALL: [KquantInputs; 2] = [KquantInputs::F32, KquantInputs::Q8K];

    /// Whether a matvec over a matrix stored as `ty` reads its input quantized to Q8_K: under
    /// [`KquantInputs::Q8K`], for Q4_K, Q5_K and Q6_K.
    pub fn quantizes(self, ty: GgmlType) -> bool {
        self == KquantInputs::Q8K && matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K)
    }

    pub fn name(self) -> &'static str {
        match self {
            KquantInputs::F32 => "f32",
            KquantInputs::Q8K => "q8_k",
        }
    }
}

/// The engine's numerics: where it stores activations (every buffer a unit writes, and the conv
/// windows), the KV cache, and the recurrent delta-rule state, and how a matvec over k-quant
/// weights reads its input. Units compute in f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Numerics {
    pub activations: Storage,
    pub kv_cache: Storage,
    pub recurrent_state: Storage,
    /// Absent from a program written before the field existed: [`KquantInputs::F32`].
    #[serde(default)]
    pub kquant_inputs: KquantInputs,
}

impl Numerics {
    /// Everything stored in f32.
    pub const F32: Numerics = Numerics {
        activations: Storage::F32,
        kv_cache: Storage::F32,
        recurrent_state: Storage::F32,
        kquant_inputs: KquantInputs::F32,
    };

    /// Activations and KV cache in bf16, the recurrent state in f32: how bf16 checkpoints run.
    pub const BF16: Numerics = Numerics { activations: Storage::Bf16, kv_cache: Storage::Bf16, ..Numerics::F32 };

    /// These numerics with k-quant matvecs reading their inputs as `inputs` says.
    pub fn with_kquant_inputs(self, inputs: KquantInputs) -> Numerics {
        Numerics { kquant_inputs: inputs, ..self }
    }

    /// Parses `act[/kv[/state[/kquant-inputs]]]`, e.g. `f32`, `bf16`, `bf16/bf16/f32`,
    /// `f32/f32/f32/q8_k`; a missing kv type is the activations', a missing state type is f32 and
    /// missing k-quant inputs are f32.
    pub fn parse(text: &str) -> Option<Numerics> {
        let parts: Vec<&str> = text.split('/').collect();
        let act = Storage::parse(parts.first()?)?;
        let kv = parts.get(1).map_or(Some(act), |s| Storage::parse(s))?;
        let state = parts.get(2).map_or(Some(Storage::F32), |s| Storage::parse(s))?;
        let inputs = match parts.get(3) {
            None => KquantInputs::F32,
            Some(s) => *KquantInputs::ALL.iter().find(|i| i.name() == *s)?,
        };
        (parts.len() <= 4).then_some(Numerics {
            activations: act,
            kv_cache: kv,
            recurrent_state: state,
            kquant_inputs: inputs,
        })
    }
}

impl Default for Numerics {
    fn default() -> Numerics {
        Numerics::F32
    }
}

impl fmt::Display for Numerics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.activations.name(), self.kv_cache.name(), self.recurrent_state.name())?;
        match self.kquant_inputs {
            KquantInputs::F32 => Ok(()),
            inputs => write!(f, "/{}", inputs.name()),
        }
    }
}

impl fmt::Display for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
