//! The command line's arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::engine::Numerics;
use crate::source::{ModelSource, SourceError};

/// Turns the decode step of a Gated-DeltaNet/attention model into an engine's program, and checks
/// that the program computes what the step graph says.
#[derive(Parser, Debug)]
#[command(name = "stepcheck", version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the step graph the author writes for a model (`--fused`: as the engine's shim leaves it).
    Graph(GraphArgs),
    /// Print the engine's program for a model, or why it is refused.
    Lower(LowerArgs),
    /// Decode tokens one by one and print the logits of every step.
    Run(RunArgs),
    /// Author, fuse, lower and compare both interpreters; one line per model (default: every preset).
    Check(CheckArgs),
    /// Whether the engine runs a model (config.json, model folder or .gguf), and every construct it
    /// has no unit for.
    Verdict(VerdictArgs),
    /// The regression corpus: import a fuzz artifact as a case file, or review what changed.
    Corpus(CorpusArgs),
    /// Explain a case file: its spec, authored and lowered graphs, program or refusal, and verdict.
    Explain(ExplainArgs),
    /// Prove that a model's program computes what its step graph computes, for every checkpoint
    /// and every step: per output, the lemmas used, or where the normal forms differ.
    Prove(ProveArgs),
}

#[derive(Args, Debug)]
pub struct CorpusArgs {
    #[command(subcommand)]
    pub command: CorpusCommand,
}

#[derive(Subcommand, Debug)]
pub enum CorpusCommand {
    /// Turn a fuzz artifact (libFuzzer's input bytes) into a case file with its current outcome.
    Import {
        /// The artifact.
        artifact: PathBuf,
        /// Where to write the case file (default: stdout).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Re-run every case file and show those whose outcome changed; exit 1 if any did.
    Review {
        /// The corpus folder.
        #[arg(default_value = "tests/corpus")]
        dir: PathBuf,
    },
}

#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// A case file (`tests/corpus/*.case`).
    pub case: PathBuf,
}

/// Which interpreter runs a model.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interp {
    /// `ir::interp`: the step graph, in f64.
    Reference,
    /// `engine::run`: the engine's program, at the numerics.
    Engine,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Hugging Face model folders or `.gguf` files.
    pub models: Vec<PathBuf>,
    /// Built-in presets (repeatable); with no model and no preset, every preset.
    #[arg(long)]
    pub preset: Vec<String>,
    /// The seed of the presets' random weights.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// How many tokens to decode.
    #[arg(long, default_value_t = 4)]
    pub steps: usize,
    /// Storage types `act[/kv[/state]]`.
    #[arg(long, default_value = "f32", value_parser = parse_numerics)]
    pub numerics: Numerics,
    /// The largest random checkpoint to make, in GiB; larger presets are skipped.
    #[arg(long, default_value_t = 8.0)]
    pub max_gib: f64,
}

/// Which model: a Hugging Face folder or a `.gguf` file, or a preset with seeded random weights.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// A Hugging Face model folder or a `.gguf` file.
    #[arg(required_unless_present = "preset", conflicts_with = "preset")]
    pub model: Option<PathBuf>,
    /// A built-in preset (random weights): tiny, tiny-tied, small, qwen3.5-0.8b, qwen3.5-9b-style.
    #[arg(long)]
    pub preset: Option<String>,
    /// The seed of a preset's random weights.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

impl ModelArgs {
    pub fn source(&self) -> Result<ModelSource, SourceError> {
        match (&self.model, &self.preset) {
            (_, Some(name)) => Ok(ModelSource::preset(name, self.seed)),
            (Some(path), None) => ModelSource::from_path(path),
            (None, None) => Err(SourceError::NoSuchPreset { name: String::new() }),
        }
    }
}

#[derive(Args, Debug)]
pub struct GraphArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Print the graph as the engine's shim leaves it.
    #[arg(long)]
    pub fused: bool,
}

#[derive(Args, Debug)]
pub struct LowerArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Storage types `act[/kv[/state]]`, e.g. `f32`, `bf16`, `bf16/bf16/f32`.
    #[arg(long, default_value = "f32", value_parser = parse_numerics)]
    pub numerics: Numerics,
    /// Print the program as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ProveArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Storage types `act[/kv[/state]]`.
    #[arg(long, default_value = "f32", value_parser = parse_numerics)]
    pub numerics: Numerics,
    /// Give the model this many layers (attention every `--interval`-th), e.g. to time a deep spec.
    #[arg(long)]
    pub layers: Option<usize>,
    /// With `--layers`: every how many layers one is attention.
    #[arg(long, default_value_t = 4)]
    pub interval: usize,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The tokens to decode, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    pub tokens: Vec<u32>,
    /// Print one JSON object `{"tokens":[…],"logits":[[…],…]}`.
    #[arg(long)]
    pub json: bool,
    /// Which interpreter runs the model.
    #[arg(long, value_enum, default_value = "engine")]
    pub interp: Interp,
    /// The engine's storage types `act[/kv[/state]]`.
    #[arg(long, default_value = "f32", value_parser = parse_numerics)]
    pub numerics: Numerics,
}

#[derive(Args, Debug)]
pub struct VerdictArgs {
    /// A `config.json`, a Hugging Face model folder (its `config.json` is read) or a `.gguf` file.
    pub model: PathBuf,
    /// Print one JSON object `{"accepted":…,"error":…,"reasons":[…]}`.
    #[arg(long)]
    pub json: bool,
    /// The engine's storage types `act[/kv[/state]]`.
    #[arg(long, default_value = "f32", value_parser = parse_numerics)]
    pub numerics: Numerics,
}

pub fn parse_numerics(s: &str) -> Result<Numerics, String> {
    Numerics::parse(s).ok_or_else(|| format!("{s:?} is not act[/kv[/state]] of f32, bf16, f16"))
}
