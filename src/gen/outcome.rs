//! Where a refusal is, what a lowering did, and what it is allowed to do.
//!
//! A [`Place`] is a block of the step and its layer, in the engine's reading order; an [`Outcome`]
//! is what `lower_graph` did with a case (accepted, or refused with a `LowerError` variant at a
//! place); an [`Expected`] is the set of outcomes a case allows. Each has a one-line text form that
//! reads back, which the corpus files and the review commands print.

use std::fmt;
use std::str::FromStr;

use crate::engine::lower::LowerError;
use crate::engine::program::BlockKind;

/// A block of the step and its layer (`None` outside the layers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Place {
    pub block: BlockKind,
    pub layer: Option<usize>,
}

/// Every block kind, in the order the engine reads a layer's blocks (the mixers share a rank).
const BLOCKS: [BlockKind; 11] = [
    BlockKind::Embedding,
    BlockKind::MixerNorm,
    BlockKind::DeltaNet,
    BlockKind::Attention,
    BlockKind::MixerAdd,
    BlockKind::FfnNorm,
    BlockKind::Ffn,
    BlockKind::FfnAdd,
    BlockKind::Advance,
    BlockKind::FinalNorm,
    BlockKind::Head,
];

/// A block kind's name in the text form: its Rust name.
fn block_name(b: BlockKind) -> &'static str {
    match b {
        BlockKind::Embedding => "Embedding",
        BlockKind::MixerNorm => "MixerNorm",
        BlockKind::DeltaNet => "DeltaNet",
        BlockKind::Attention => "Attention",
        BlockKind::MixerAdd => "MixerAdd",
        BlockKind::FfnNorm => "FfnNorm",
        BlockKind::Ffn => "Ffn",
        BlockKind::FfnAdd => "FfnAdd",
        BlockKind::Advance => "Advance",
        BlockKind::FinalNorm => "FinalNorm",
        BlockKind::Head => "Head",
    }
}

impl Place {
    pub fn new(block: BlockKind, layer: Option<usize>) -> Place {
        Place { block, layer }
    }

    /// Layer `l`'s block `block`.
    pub fn layer(block: BlockKind, l: usize) -> Place {
        Place { block, layer: Some(l) }
    }

    /// A block outside the layers.
    pub fn step(block: BlockKind) -> Place {
        Place { block, layer: None }
    }

    /// The place's rank in the engine's reading order: the embedding; per layer its norm, mixer,
    /// add, FFN norm, FFN and add; then the advance, the final norm and the head.
    pub fn rank(&self) -> (usize, usize) {
        let within = |b: BlockKind| match b {
            BlockKind::MixerNorm => 0,
            BlockKind::DeltaNet | BlockKind::Attention => 1,
            BlockKind::MixerAdd => 2,
            BlockKind::FfnNorm => 3,
            BlockKind::Ffn => 4,
            BlockKind::FfnAdd => 5,
            BlockKind::Embedding => 0,
            BlockKind::Advance => 0,
            BlockKind::FinalNorm => 1,
            BlockKind::Head => 2,
        };
        match (self.block, self.layer) {
            (BlockKind::Embedding, _) => (0, 0),
            (BlockKind::Advance | BlockKind::FinalNorm | BlockKind::Head, _) => (usize::MAX, within(self.block)),
            (b, Some(l)) => (1 + l, within(b)),
            (b, None) => (usize::MAX - 1, within(b)),
        }
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(block_name(self.block))?;
        match self.layer {
            Some(l) => write!(f, " layer {l}"),
            None => Ok(()),
        }
    }
}

impl FromStr for Place {
    type Err = String;

    /// Reads `DeltaNet layer 1` or `Embedding`.
    fn from_str(s: &str) -> Result<Place, String> {
        let words: Vec<&str> = s.split_whitespace().collect();
        let block = |w: &str| {
            BLOCKS.into_iter().find(|&b| block_name(b) == w).ok_or_else(|| format!("{w:?} is not a block kind"))
        };
        match words.as_slice() {
            [b] => Ok(Place::step(block(b)?)),
            [b, "layer", l] => {
                Ok(Place::layer(block(b)?, l.parse().map_err(|_| format!("{l:?} is not a layer number"))?))
            }
            _ => Err(format!("{s:?} is not a place like 'DeltaNet layer 1' or 'Embedding'")),
        }
    }
}

/// What `lower_graph` did with a case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The graph was lowered to a program.
    Accepted,
    /// The graph was refused with this `LowerError` variant, at this place when the error names one.
    Refused { variant: String, at: Option<Place> },
}

impl Outcome {
    /// The outcome of a lowering.
    pub fn of<T>(lowered: &Result<T, LowerError>) -> Outcome {
        match lowered {
            Ok(_) => Outcome::Accepted,
            Err(e) => Outcome::refused(e),
        }
    }

    /// The refusal `e`: its variant and place.
    pub fn refused(e: &LowerError) -> Outcome {
        Outcome::Refused { variant: e.name().to_string(), at: e.site().map(|s| Place::new(s.block, s.layer)) }
    }

    /// A refusal with `variant` at `at`.
    pub fn at(variant: &str, at: Place) -> Outcome {
        Outcome::Refused { variant: variant.into(), at: Some(at) }
    }

    /// A refusal with `variant`, which names no place.
    pub fn nowhere(variant: &str) -> Outcome {
        Outcome::Refused { variant: variant.into(), at: None }
    }

    /// The refusal's variant, or `None` when accepted.
    pub fn variant(&self) -> Option<&str> {
        match self {
            Outcome::Accepted => None,
            Outcome::Refused { variant, .. } => Some(variant),
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Accepted => f.write_str("accepted"),
            Outcome::Refused { variant, at: Some(p) } => write!(f, "refused {variant} at {p}"),
            Outcome::Refused { variant, at: None } => write!(f, "refused {variant}"),
        }
    }
}

impl FromStr for Outcome {
    type Err = String;

    /// Reads `accepted`, `refused InvalidGraph` or `refused WrongBinding at DeltaNet layer 1`.
    fn from_str(s: &str) -> Result<Outcome, String> {
        let s = s.trim();
        if s == "accepted" {
            return Ok(Outcome::Accepted);
        }
        let Some(rest) = s.strip_prefix("refused ") else {
            return Err(format!("{s:?} is neither 'accepted' nor 'refused VARIANT [at PLACE]'"));
        };
        match rest.split_once(" at ") {
            Some((variant, place)) => Ok(Outcome::at(variant.trim(), place.parse()?)),
            None if !rest.trim().is_empty() && !rest.contains(' ') => Ok(Outcome::nowhere(rest.trim())),
            None => Err(format!("{rest:?} is not a LowerError variant")),
        }
    }
}

/// Where an allowed refusal may be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Span {
    /// The error names no place.
    Nowhere,
    /// Exactly this place.
    At(Place),
    /// Any place from the first to the second, in reading order, both included.
    Within(Place, Place),
}

impl Span {
    fn admits(&self, at: Option<Place>) -> bool {
        match (self, at) {
            (Span::Nowhere, None) => true,
            (Span::At(p), Some(q)) => *p == q,
            (Span::Within(a, b), Some(q)) => a.rank() <= q.rank() && q.rank() <= b.rank(),
            _ => false,
        }
    }
}

/// An outcome a case allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Allowed {
    /// Accepted, and then the interpreters must agree.
    Accepted,
    /// Refused with one of these variants, in this span.
    Refused { variants: Vec<&'static str>, span: Span },
}

/// The outcomes a case allows: one when the case determines it, several when it may legitimately
/// land in more than one (each mutation documents why).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expected {
    pub allowed: Vec<Allowed>,
}

impl Expected {
    /// Accepted, and the interpreters agree.
    pub fn accepted() -> Expected {
        Expected { allowed: vec![Allowed::Accepted] }
    }

    /// Refused with `variant` at `at`.
    pub fn at(variant: &'static str, at: Place) -> Expected {
        Expected::one_of(&[variant], Span::At(at))
    }

    /// Refused with `variant`, which names no place.
    pub fn nowhere(variant: &'static str) -> Expected {
        Expected::one_of(&[variant], Span::Nowhere)
    }

    /// Refused with one of `variants` in `span`.
    pub(crate) fn one_of(variants: &[&'static str], span: Span) -> Expected {
        Expected { allowed: vec![Allowed::Refused { variants: variants.to_vec(), span }] }
    }

    /// Exactly `outcome`.
    pub fn exactly(outcome: &Outcome) -> Expected {
        match outcome {
            Outcome::Accepted => Expected::accepted(),
            Outcome::Refused { variant, at } => {
                let span = at.map_or(Span::Nowhere, Span::At);
                // Variants are the closed set `LowerError::name` returns; an unknown name admits nothing.
                let v = VARIANTS.iter().copied().find(|v| v == variant).unwrap_or("?");
                Expected::one_of(&[v], span)
            }
        }
    }

    /// These outcomes or those of `other`.
    pub fn or(mut self, other: Expected) -> Expected {
        self.allowed.extend(other.allowed);
        self
    }

    /// Whether `outcome` is one of the allowed ones.
    pub fn admits(&self, outcome: &Outcome) -> bool {
        self.allowed.iter().any(|a| match (a, outcome) {
            (Allowed::Accepted, Outcome::Accepted) => true,
            (Allowed::Refused { variants, span }, Outcome::Refused { variant, at }) => {
                variants.contains(&variant.as_str()) && span.admits(*at)
            }
            _ => false,
        })
    }
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, a) in self.allowed.iter().enumerate() {
            if i > 0 {
                f.write_str(" or ")?;
            }
            match a {
                Allowed::Accepted => f.write_str("accepted")?,
                Allowed::Refused { variants, span } => {
                    write!(f, "refused {}", variants.join("|"))?;
                    match span {
                        Span::Nowhere => {}
                        Span::At(p) => write!(f, " at {p}")?,
                        Span::Within(a, b) => write!(f, " within {a} ..= {b}")?,
                    }
                }
            }
        }
        Ok(())
    }
}

/// Every `LowerError` variant's name, as `LowerError::name` spells it.
pub const VARIANTS: [&str; 27] = [
    "InvalidGraph",
    "RecurrentStateBelowF32",
    "WrongOp",
    "AmbiguousOp",
    "WrongTensor",
    "WrongBinding",
    "WrongAttribute",
    "WrongArity",
    "MissingState",
    "WrongStateWrite",
    "StrayRead",
    "UnreadOp",
    "UnknownMixer",
    "Unfused",
    "NotFusable",
    "MergedNotContiguous",
    "NormAfterMixer",
    "NotSwiGlu",
    "Experts",
    "LatentAttention",
    "AttentionSinks",
    "SlidingWindow",
    "ScaledEmbedding",
    "InterleavedRope",
    "AttentionScale",
    "ScaledRope",
    "AttentionBias",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_read_back() {
        for o in [
            Outcome::Accepted,
            Outcome::nowhere("InvalidGraph"),
            Outcome::at("WrongBinding", Place::layer(BlockKind::DeltaNet, 1)),
            Outcome::at("ScaledEmbedding", Place::step(BlockKind::Embedding)),
        ] {
            assert_eq!(o.to_string().parse::<Outcome>(), Ok(o.clone()), "{o}");
        }
        assert!("refused".parse::<Outcome>().is_err());
        assert!("refused X at Nowhere".parse::<Outcome>().is_err());
    }

    #[test]
    fn reading_order_is_embedding_layers_advance_final_norm_head() {
        use BlockKind::*;
        let order = [
            Place::step(Embedding),
            Place::layer(MixerNorm, 0),
            Place::layer(DeltaNet, 0),
            Place::layer(MixerAdd, 0),
            Place::layer(FfnNorm, 0),
            Place::layer(Ffn, 0),
            Place::layer(FfnAdd, 0),
            Place::layer(MixerNorm, 1),
            Place::layer(Attention, 1),
            Place::step(Advance),
            Place::step(FinalNorm),
            Place::step(Head),
        ];
        for w in order.windows(2) {
            assert!(w[0].rank() < w[1].rank(), "{} before {}", w[0], w[1]);
        }
    }

    #[test]
    fn a_span_admits_the_places_between_its_ends() {
        use BlockKind::*;
        let e = Expected::one_of(&["WrongOp"], Span::Within(Place::layer(MixerNorm, 1), Place::layer(Ffn, 1)));
        assert!(e.admits(&Outcome::at("WrongOp", Place::layer(Attention, 1))));
        assert!(!e.admits(&Outcome::at("WrongOp", Place::layer(FfnAdd, 1))));
        assert!(!e.admits(&Outcome::at("WrongTensor", Place::layer(Ffn, 1))));
        assert!(!e.admits(&Outcome::Accepted));
    }
}
