//! `Case`: one input of the oracle — a step (a spec to author, or a graph), the engine's shim, its
//! numerics, at most one mutation, and the checkpoint seed and step count of the check.

use super::draw::{Draw, splitmix};
use super::mutation::{Basis, Mutation};
use super::outcome::Expected;
use super::spec::{constructs, spec, spec_outcome};
use crate::engine::shim::EngineShim;
use crate::engine::{Numerics, Storage};
use crate::fuse::Symbol;
use crate::ir::Graph;
use crate::model::ModelSpec;
use crate::model::author::decode_step;

/// The step a case lowers.
#[derive(Clone, Debug)]
pub enum Input {
    /// The step `decode_step` writes for this spec.
    Spec(ModelSpec),
    /// This graph, as written (a corpus file's `graph`), with the spec whose seeded random
    /// checkpoint it runs on when it is accepted.
    Graph { graph: Graph, spec: Option<ModelSpec> },
}

/// One input of the oracle.
#[derive(Clone, Debug)]
pub struct Case {
    pub input: Input,
    /// The fusion symbol the engine's shim is without, if any.
    pub without: Option<Symbol>,
    pub numerics: Numerics,
    pub mutation: Option<Mutation>,
    /// The seed of the random checkpoint and of the tokens.
    pub seed: u64,
    /// How many tokens the check decodes.
    pub steps: usize,
}

/// A case as drawn from bytes, with the step its spec was authored into while drawing it (a
/// mutation is drawn on that step), so that judging the case does not author the spec again.
#[derive(Clone, Debug)]
pub struct Drawn {
    pub case: Case,
    /// `decode_step` of the case's spec, when the draw made it.
    pub authored: Option<Graph>,
    /// That step as the engine's default shim leaves it, when the draw made it (to draw a mutation
    /// made after the shim).
    pub fused: Option<Graph>,
}

/// How many tokens a case decodes unless it says otherwise: enough for a conv window to fill
/// and a cache to hold several positions.
pub const STEPS: usize = 4;

impl Case {
    /// The case `data` draws, or `None` for empty data. Each byte is one choice (see
    /// [`super::draw::Draw`]): the family of the case, the spec, then the family's choices, the
    /// numerics and the seed. Out of sixteen cases: ten are specs the engine accepts, one carries
    /// constructs it refuses (sometimes with a shim without a symbol), one a shim without a symbol
    /// or a recurrent state below f32 (half each), and four a mutation of a spec it accepts.
    /// Accepted cases are the ones proved and compared, so the mix gives them well over half of
    /// the cases: libFuzzer's corpus fills with refusals, which reach more distinct code, and the
    /// share it runs falls from there. A sweep of a few thousand still meets every mutation kind,
    /// construct and refusal (`tests/soundness.rs`).
    pub fn from_bytes(data: &[u8]) -> Option<Case> {
        Case::draw(data).map(|d| d.case)
    }

    /// The case `data` draws, as [`Case::from_bytes`], with the step its spec was authored into
    /// when drawing its mutation needed one.
    pub fn draw(data: &[u8]) -> Option<Drawn> {
        if data.is_empty() {
            return None;
        }
        let mut d = Draw::new(data);
        let (mut authored, mut fused) = (None, None);
        let family = d.below(16);
        let mut spec = spec(&mut d);
        let mut case = Case {
            input: Input::Spec(spec.clone()),
            without: None,
            numerics: Numerics::F32,
            mutation: None,
            seed: 0,
            steps: STEPS,
        };
        match family {
            0..=9 => case.numerics = numerics(&mut d),
            10 => {
                spec.constructs = constructs(&mut d, &mut spec);
                if d.below(4) == 0 {
                    case.without = Some(*d.pick(&Symbol::ALL));
                }
                case.numerics = numerics(&mut d);
                case.input = Input::Spec(spec);
            }
            11 => match d.below(2) {
                0 => {
                    case.without = Some(*d.pick(&Symbol::ALL));
                    case.numerics = numerics(&mut d);
                }
                _ => case.numerics = reduced_state(&mut d),
            },
            _ => {
                let step = decode_step(&spec).ok()?;
                let basis = Basis::new(&spec, &step);
                case.mutation = Some(Mutation::draw(&mut d, &basis));
                fused = basis.into_fused();
                case.numerics = numerics(&mut d);
                authored = Some(step);
            }
        }
        case.seed = d.u64();
        Some(Drawn { case, authored, fused })
    }

    /// The spec of the case: the one it authors, or the one whose checkpoint its graph runs on.
    pub fn spec(&self) -> Option<&ModelSpec> {
        match &self.input {
            Input::Spec(s) => Some(s),
            Input::Graph { spec, .. } => spec.as_ref(),
        }
    }

    /// The engine's shim of the case.
    pub fn shim(&self) -> EngineShim {
        match self.without {
            Some(s) => EngineShim::default().without(s),
            None => EngineShim::default(),
        }
    }

    /// The tokens the check decodes: `steps` of them below the vocab, drawn from the seed.
    pub fn tokens(&self) -> Vec<u32> {
        let vocab = self.spec().map_or(1, |s| s.vocab.max(1)) as u64;
        (0..self.steps as u64).map(|i| (splitmix(self.seed ^ i.wrapping_mul(0x9E37_79B9)) % vocab) as u32).collect()
    }

    /// The outcomes the case allows, or `None` when it says nothing about them: a graph given as
    /// is, or a mutation on a step already refused for another reason (see
    /// [`Mutation::expected_on`]).
    pub fn expected(&self) -> Option<Expected> {
        let Input::Spec(spec) = &self.input else { return None };
        let base = spec_outcome(spec, self.without, self.numerics);
        match &self.mutation {
            None => Some(Expected::exactly(&base)),
            Some(m) => m.expected_on(&base),
        }
    }
}

/// Storage types with a recurrent state below f32, which the engine refuses before any block.
fn reduced_state(d: &mut Draw) -> Numerics {
    Numerics {
        activations: *d.pick(&[Storage::F32, Storage::Bf16, Storage::F16]),
        kv_cache: *d.pick(&[Storage::F32, Storage::Bf16]),
        recurrent_state: *d.pick(&[Storage::Bf16, Storage::F16]),
        ..Numerics::F32
    }
}

/// Storage types: f32 mostly, bf16 or f16 activations, a bf16 or f16 KV cache; the recurrent
/// state always f32 (a reduced one is [`reduced_state`]'s).
fn numerics(d: &mut Draw) -> Numerics {
    match d.below(8) {
        0..=4 => Numerics::F32,
        5 => Numerics::BF16,
        6 => Numerics {
            activations: Storage::F16,
            kv_cache: *d.pick(&[Storage::F16, Storage::F32, Storage::Bf16]),
            ..Numerics::F32
        },
        _ => Numerics { kv_cache: Storage::Bf16, ..Numerics::F32 },
    }
}

#[cfg(feature = "arbitrary")]
impl<'a> arbitrary::Arbitrary<'a> for Case {
    /// A case from a length-prefixed run of bytes: [`Case::from_bytes`], the one generator.
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Case> {
        let n = u.arbitrary_len::<u8>()?;
        Case::from_bytes(u.bytes(n)?).ok_or(arbitrary::Error::IncorrectFormat)
    }

    /// A case from all the bytes left: [`Case::from_bytes`].
    fn arbitrary_take_rest(u: arbitrary::Unstructured<'a>) -> arbitrary::Result<Case> {
        Case::from_bytes(u.take_rest()).ok_or(arbitrary::Error::IncorrectFormat)
    }
}

#[cfg(test)]
mod tests {
    use super::Case;

    /// Bytes that draw cases of several families.
    fn samples() -> Vec<Vec<u8>> {
        (0u8..32).map(|i| (0..96u8).map(|k| k.wrapping_mul(37).wrapping_add(i.wrapping_mul(101))).collect()).collect()
    }

    #[test]
    fn empty_bytes_make_no_case_and_any_other_bytes_make_one() {
        assert!(Case::from_bytes(&[]).is_none());
        for b in samples() {
            assert!(Case::from_bytes(&b).is_some());
        }
        assert!(Case::from_bytes(&[0]).is_some_and(|c| c.mutation.is_none() && c.steps == super::STEPS));
    }

    #[cfg(feature = "arbitrary")]
    #[test]
    fn arbitrary_draws_the_same_cases_as_from_bytes() {
        use arbitrary::{Arbitrary, Unstructured};
        for b in samples() {
            let a = Case::arbitrary_take_rest(Unstructured::new(&b)).ok();
            let f = Case::from_bytes(&b);
            assert!(a.is_some(), "no case from {b:?}");
            assert_eq!(format!("{a:?}"), format!("{f:?}"));
        }
    }
}
