//! Admission: whether the engine runs a model, and when it does not, everything it would take.
//!
//! A model is admitted when its config holds no construct a spec cannot state and its step graph,
//! authored and fused, lowers to a program. Otherwise its reasons are every construct the engine
//! has no unit for, in the order the step reads them: those of the graph
//! ([`refusals_in_order`]) and those of the config ([`Unsupported`]), each at its layer as the
//! config numbers them. The first reason is the refusal: what `lower_graph` names when the config
//! states everything, else the first in reading order.

use std::fmt;

use crate::engine::lower::{LowerError, Site, lower_graph, refusals_in_order};
use crate::engine::numerics::Numerics;
use crate::engine::program::{BlockKind, Program};
use crate::engine::shim::EngineShim;
use crate::model::author::decode_step;
use crate::model::config::{ConfigError, Part, Unsupported, read_config_json};
use crate::model::spec::{ModelSpec, SpecError};

/// Why a model stands refused: a construct of its step graph or one of its config.
#[derive(Clone, Debug, PartialEq)]
pub enum Reason {
    /// A construct of the step graph the lowering refuses by name, at its place.
    Graph(LowerError),
    /// A construct of the config that a spec cannot state.
    Config { family: String, unsupported: Unsupported },
}

impl Reason {
    /// The name of the `LowerError` variant or of the config's `Construct`.
    pub fn name(&self) -> &'static str {
        match self {
            Reason::Graph(e) => e.name(),
            Reason::Config { unsupported, .. } => unsupported.construct.name(),
        }
    }

    /// Where the reason sits in reading order: before the step (numerics), the embedding, a layer's
    /// block, the step's end.
    fn rank(&self) -> (u8, usize, u8) {
        match self {
            Reason::Graph(e) => match e.site() {
                None => (0, 0, 0),
                Some(s) => block_rank(s.block, s.layer),
            },
            Reason::Config { unsupported: u, .. } => block_rank(config_block(u.construct.part()), u.layer),
        }
    }
}

/// The block a config's construct would sit in (a mixer the spec cannot state: where attention
/// would).
fn config_block(part: Part) -> BlockKind {
    match part {
        Part::Embedding => BlockKind::Embedding,
        Part::Norms => BlockKind::MixerNorm,
        Part::Mixer | Part::Attention => BlockKind::Attention,
        Part::ResidualAdd => BlockKind::MixerAdd,
        Part::Ffn => BlockKind::Ffn,
        Part::Head => BlockKind::Head,
    }
}

fn block_rank(block: BlockKind, layer: Option<usize>) -> (u8, usize, u8) {
    let l = layer.unwrap_or(0);
    match block {
        BlockKind::Embedding => (1, 0, 0),
        BlockKind::MixerNorm => (2, l, 0),
        BlockKind::DeltaNet | BlockKind::Attention => (2, l, 1),
        BlockKind::MixerAdd => (2, l, 2),
        BlockKind::FfnNorm => (2, l, 3),
        BlockKind::Ffn => (2, l, 4),
        BlockKind::FfnAdd => (2, l, 5),
        BlockKind::Advance => (3, 0, 0),
        BlockKind::FinalNorm => (3, 0, 1),
        BlockKind::Head => (3, 0, 2),
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Graph(e) => write!(f, "{e}"),
            Reason::Config { family, unsupported: u } => {
                let block = config_block(u.construct.part());
                let layer = u.layer.filter(|_| !matches!(block, BlockKind::Embedding | BlockKind::Head));
                match (u.construct.part(), layer) {
                    (Part::Mixer, Some(l)) => write!(f, "layer {l}'s mixer")?,
                    _ => write!(f, "{}", Site { block, layer, op: None })?,
                }
                write!(f, ": {family} has {} (`{}`): a model spec cannot state it", u.construct, u.field)
            }
        }
    }
}

/// The size of an admitted model's program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProgramSize {
    pub blocks: usize,
    pub commands: usize,
    pub buffers: usize,
    pub states: usize,
}

impl ProgramSize {
    pub fn of(p: &Program) -> ProgramSize {
        ProgramSize {
            blocks: p.blocks.len(),
            commands: p.blocks.iter().map(|b| b.commands.len()).sum(),
            buffers: p.buffers.len(),
            states: p.states.len(),
        }
    }
}

/// The engine's verdict on a model.
#[derive(Clone, Debug, PartialEq)]
pub struct Admission {
    /// The size of the program, when the engine runs the model.
    pub program: Option<ProgramSize>,
    /// Every reason it does not, in reading order; empty iff the model is admitted.
    pub reasons: Vec<Reason>,
}

impl Admission {
    pub fn accepted(&self) -> bool {
        self.reasons.is_empty()
    }

    /// The refusal: the first reason.
    pub fn refusal(&self) -> Option<&Reason> {
        self.reasons.first()
    }

    /// The reasons' names, each once, in the order they first occur.
    pub fn names(&self) -> Vec<&'static str> {
        let mut names = vec![];
        for r in &self.reasons {
            if !names.contains(&r.name()) {
                names.push(r.name());
            }
        }
        names
    }
}

/// Why a model could not be judged at all.
#[derive(Debug, thiserror::Error)]
pub enum AdmitError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("the authored step is not a graph the lowering reads ({0}): a bug of the author or the lowering")]
    Malformed(LowerError),
}

/// The verdict on the model a `config.json` text describes, at `numerics`.
pub fn admit_config_json(text: &str, name: &str, numerics: Numerics) -> Result<Admission, AdmitError> {
    let reading = read_config_json(text, name)?;
    let config = reading
        .unsupported
        .into_iter()
        .map(|unsupported| Reason::Config { family: reading.family.to_string(), unsupported })
        .collect();
    admit(&reading.spec, &reading.layers, &reading.stand_in, config, numerics)
}

/// The verdict on `spec`, at `numerics`.
pub(crate) fn admit_spec(spec: &ModelSpec, numerics: Numerics) -> Result<Admission, AdmitError> {
    let layers: Vec<usize> = (0..spec.layers.len()).collect();
    admit(spec, &layers, &[], vec![], numerics)
}

/// The verdict on `spec`, whose layer `i` is the config's layer `layers[i]`, with the config's own
/// reasons `config`. The mixer blocks of layers `stand_in` stand in for mixers the config's
/// reasons name: what the graph says of them is dropped.
fn admit(
    spec: &ModelSpec,
    layers: &[usize],
    stand_in: &[usize],
    config: Vec<Reason>,
    numerics: Numerics,
) -> Result<Admission, AdmitError> {
    let graph = EngineShim::default().prepare(&decode_step(spec)?);
    let (program, refused) = match lower_graph(&graph, numerics) {
        Ok(p) => (Some(p), None),
        Err(e) if e.is_refused_construct() || matches!(e, LowerError::RecurrentStateBelowF32 { .. }) => (None, Some(e)),
        Err(e) => return Err(AdmitError::Malformed(e)),
    };
    let mut found = refusals_in_order(&graph, numerics);
    // The scan begins with the lowering's refusal; should it ever miss it, the refusal still stands.
    if let Some(e) = refused
        && found.is_empty()
    {
        found.push(e);
    }
    let of_stand_in = |e: &LowerError| {
        e.site().is_some_and(|s| {
            matches!(s.block, BlockKind::Attention | BlockKind::DeltaNet)
                && s.layer.is_some_and(|l| stand_in.contains(&l))
        })
    };
    let mut reasons: Vec<Reason> = found.into_iter().filter(|e| !of_stand_in(e)).map(Reason::Graph).collect();
    for r in &mut reasons {
        if let Reason::Graph(e) = r
            && let Some(site) = e.site_mut()
        {
            site.layer = site.layer.map(|l| layers.get(l).copied().unwrap_or(l));
        }
    }
    reasons.extend(config);
    reasons.sort_by_key(Reason::rank);
    let program = program.filter(|_| reasons.is_empty()).map(|p| ProgramSize::of(&p));
    Ok(Admission { program, reasons })
}
