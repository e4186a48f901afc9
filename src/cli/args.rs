//! The command line's arguments.

use std::path::PathBuf;

use clap::{Args, Parser};

use crate::engine::Numerics;
use crate::limits::{self, Budget, MAX_STEPS, MemoryError, Need};
use crate::model::random::Weights;
use crate::source::{ModelSource, SourceError};

/// The exit statuses, as every `--help` ends with them.
const EXIT: &str = "Exit status: 0 the answer is yes (it agrees, it is accepted, nothing changed); 1 the answer \
                    is no (a disagreement, an inconclusive check, a refusal, a changed case); 2 nothing could be \
                    judged (an unreadable or invalid input, a size over its limit, not enough memory, a bad flag). \
                    A closed stdout ends any command quietly with 0.";
const EXIT_GRAPH: &str = "Exit status: 0 the graph is printed; 2 the model could not be read or authored.";
const EXIT_LOWER: &str = "Exit status: 0 the program is printed; 1 the engine refuses the graph (the refusal is \
                          printed); 2 the model could not be read or authored.";
const EXIT_RUN: &str = "Exit status: 0 the prompt and every generated token ran; 2 the model could not be read, does not fit in memory \
                        (--max-gib), or a step failed.";
const EXIT_BENCH: &str = "Exit status: 0 every run ran; 2 the model could not be read, does not fit in memory \
                          (--max-gib), or a run failed.";
const EXIT_CHECK: &str = "Exit status: 0 every model judged agrees (a preset of the default list too large for the \
                          memory is not run: its row and the summary say so, only its proof is checked, and it is \
                          not counted as agreeing); 1 some model disagrees, is inconclusive or is refused by the \
                          engine, or a proof (with --batch, a schedule's) is not proved; 2 some model could not be \
                          checked (unreadable, invalid, or a model you named skipped for its size), or none was \
                          run. Every model gets its row either way.";
const EXIT_VERDICT: &str = "Exit status: 0 accepted; 1 refused; 2 not judged (unreadable or invalid input; \
                            with --json a JSON object with `\"error\": \"NotJudged\"` and a `message`).";
const EXIT_CORPUS: &str = "Exit status: 0 every case has its stated outcome (import: the case is no failure); 1 \
                           some case changed or fails; 2 the folder or artifact could not be read.";
const EXIT_CORPUS_IMPORT: &str = "Exit status: 0 the case is no failure; 1 the case is a failure (its case file \
                                  is printed, or written to --out, all the same); 2 the artifact could not be read or \
                                  the case file not written.";
const EXIT_CORPUS_REVIEW: &str = "Exit status: 0 every case has its stated outcome; 1 some case changed or fails; 2 \
                                  the folder could not be read.";
const EXIT_PROVE: &str = "Exit status: 0 proved; 1 refuted, inconclusive, or the engine refuses the graph (the \
                          refusal is printed); 2 the model could not be read or authored, or a bad flag.";
const EXIT_EXPLAIN: &str = "Exit status: 0 the case has its stated outcome; 1 it fails or its outcome changed; 2 \
                            the case file could not be read.";

/// Turns the decode step of a Gated-DeltaNet/attention model into an engine's program, and checks
/// that the program computes what the step graph says.
#[derive(Parser, Debug)]
#[command(name = "stepcheck", version, after_help = EXIT)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Subcommand,
}

/// A subcommand of the CLI (`stepcheck <subcommand>`): not to be confused with an engine
/// program's `Command`.
#[derive(clap::Subcommand, Debug)]
pub enum Subcommand {
    /// Print the step graph the author writes for a model (`--fused`: as the engine's shim leaves it).
    #[command(after_help = EXIT_GRAPH)]
    Graph(GraphArgs),
    /// Print the engine's program for a model, or why it is refused.
    #[command(after_help = EXIT_LOWER)]
    Lower(LowerArgs),
    /// Decode tokens one by one and print the logits of every step.
    #[command(after_help = EXIT_RUN)]
    Run(RunArgs),
    /// Author, fuse, lower and compare both interpreters; one line per model (default: every preset).
    #[command(after_help = EXIT_CHECK)]
    Check(CheckArgs),
    /// Whether the engine runs a model (config.json, model folder or .gguf), and every construct it
    /// has no unit for.
    #[command(after_help = EXIT_VERDICT)]
    Verdict(VerdictArgs),
    /// The regression corpus: import a fuzz artifact as a case file, or review what changed.
    #[command(after_help = EXIT_CORPUS)]
    Corpus(CorpusArgs),
    /// Explain a case file: its spec, authored and lowered graphs, program or refusal, and verdict.
    #[command(after_help = EXIT_EXPLAIN)]
    Explain(ExplainArgs),
    /// Time the engine's prompt processing and text generation, as llama-bench does (pp512, tg128).
    #[command(after_help = EXIT_BENCH)]
    Bench(BenchArgs),
    /// Prove that a model's program computes what its step graph computes, for every checkpoint
    /// and every step: per output, the lemmas used, or where the normal forms differ.
    #[command(after_help = EXIT_PROVE)]
    Prove(ProveArgs),
}

#[derive(Args, Debug)]
pub struct CorpusArgs {
    #[command(subcommand)]
    pub command: CorpusSubcommand,
}

/// A subcommand of `stepcheck corpus`.
#[derive(clap::Subcommand, Debug)]
pub enum CorpusSubcommand {
    /// Turn a fuzz artifact (libFuzzer's input bytes) into a case file with its current outcome.
    #[command(after_help = EXIT_CORPUS_IMPORT)]
    Import {
        /// The artifact.
        artifact: PathBuf,
        /// Where to write the case file (default: stdout).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Re-run every case file and show those whose outcome changed; exit 1 if any did.
    #[command(after_help = EXIT_CORPUS_REVIEW)]
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
    /// The reference interpreter: it runs the step graph, in f64.
    Reference,
    /// The engine's interpreter: it runs the engine's program, at the numerics.
    Engine,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Hugging Face model folders or `.gguf` files.
    pub models: Vec<PathBuf>,
    /// Built-in presets (repeatable); with no model and no preset, every preset.
    #[arg(long)]
    pub preset: Vec<String>,
    /// The seed of the presets' random weights, and with --batch the first schedule's.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// How many tokens to decode (2 to 4096).
    #[arg(long, default_value_t = 4, value_parser = parse_steps)]
    pub steps: usize,
    /// The stored type of the presets' random matrices: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1,
    /// q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs (norms and biases stay f32). A checkpoint
    /// over 1 GiB is written to a GGUF file in the temp dir and mapped. Not with model paths: a
    /// file's weights are stored as they are.
    #[arg(long, default_value = "f32", value_parser = parse_weights, conflicts_with = "models")]
    pub weights: Weights,
    /// Storage types `act[/kv[/state[/kquant-inputs]]]`, e.g. `bf16`, `f32/f32/f32/q8_k`.
    #[arg(long, default_value = "f32", value_parser = parse_numerics)]
    pub numerics: Numerics,
    /// The memory the check may use, in GiB (default: what the machine has: MemAvailable, the
    /// cgroup's limit, `ulimit -v`); a model that needs more is skipped, with what it needs.
    #[arg(long, value_parser = parse_gib, allow_hyphen_values = true)]
    pub max_gib: Option<f64>,
    /// Print one JSON object: `{"models":[{model, verdict, refusal, commands, proof, structure,
    /// max_rel, widest, steps, seconds, detail}, …], "summary":{…}}`; with `--batch`, each model
    /// also has its `schedules`, and the object a `batch` with the pool and the schedules' tally.
    #[arg(long)]
    pub json: bool,
    /// Print the legend under the table (what each verdict and column means); it is printed
    /// anyway when stdout is a terminal. Not with `--json`.
    #[arg(long, conflicts_with = "json")]
    pub legend: bool,
    /// Check batched decode instead: per model, three schedules generated from the seeds `--seed`,
    /// `--seed`+1 and `--seed`+2 on a pool of N slots and batches of up to N rows, each holding
    /// every event kind the pool allows (admit, decode, finish, reuse of a freed slot, fork,
    /// rollback, a partial batch, a prefill), judged by validation, the proof, the symbolic slot run and the
    /// interpreters; a row per model, each schedule's line under it. N is 1 to 64.
    #[arg(long, value_name = "N", value_parser = parse_batch)]
    pub batch: Option<usize>,
    /// Also prove transformers' own step (the `.pt2` `torch.export.save` wrote, or its
    /// `model.json` with a `buffers.json` beside it) equal to the one model's authored graph: a
    /// `transformers` column, and a verdict other than `proved` fails the check.
    #[arg(long, value_name = "GRAPH", conflicts_with = "batch")]
    pub against: Option<PathBuf>,
    /// Also prove llama.cpp's own step (a recording of its compute graph for this GGUF, as
    /// `reference/record_llama_graph.py` writes it) equal to the one model's authored graph: a
    /// `llama.cpp` column, and a verdict other than `proved` fails the check.
    #[arg(long, value_name = "GRAPH", conflicts_with = "batch")]
    pub against_llama_graph: Option<PathBuf>,
    /// Also run a prompt of `T` tokens as the engine's prefill (in chunks of `--chunk`), between two
    /// decode steps on each side: prove it and compare it with the reference's steps (a `prefill`
    /// column).
    #[arg(long, value_name = "T", value_parser = parse_prefill, conflicts_with = "batch")]
    pub prefill: Option<usize>,
    /// The prefill's chunk for `--prefill` (default 16: a prompt of 64 crosses three boundaries).
    #[arg(long, default_value_t = 16, value_parser = parse_chunk, requires = "prefill")]
    pub chunk: usize,
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
        self.source_as(Weights::default())
    }

    /// The source, a preset's matrices stored as `weights`.
    pub(crate) fn source_as(&self, weights: Weights) -> Result<ModelSource, SourceError> {
        match (&self.model, &self.preset) {
            (_, Some(name)) => Ok(ModelSource::preset_as(name, self.seed, weights)),
            (Some(path), None) => ModelSource::from_path(path),
            (None, None) => Err(SourceError::NoSuchPreset { name: String::new() }),
        }
    }
}

#[derive(Args, Debug)]
#[command(override_usage = "stepcheck graph [OPTIONS] <MODEL | --preset NAME>")]
pub struct GraphArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Print the graph as the engine's shim leaves it.
    #[arg(long)]
    pub fused: bool,
    /// Print one JSON object `{"model":…,"fused":…,"tensors":…,"ops":…,"text":…}`: the graph's
    /// name, whether it is fused, its counts of tensors and ops, and its text form.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
#[command(override_usage = "stepcheck lower [OPTIONS] <MODEL | --preset NAME>")]
pub struct LowerArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Storage types `act[/kv[/state[/kquant-inputs]]]`, e.g. `f32`, `bf16`, `bf16/bf16/f32`, `f32/f32/f32/q8_k` (k-quant matvecs reading their inputs quantized to Q8_K).
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
    /// Storage types `act[/kv[/state[/kquant-inputs]]]`, e.g. `bf16`, `f32/f32/f32/q8_k`.
    #[arg(long, default_value = "f32", value_parser = parse_numerics)]
    pub numerics: Numerics,
    /// Give the model this many layers, 1 to 1024 (attention every `--interval`-th), e.g. to time a
    /// deep spec.
    #[arg(long, value_parser = parse_layers)]
    pub layers: Option<usize>,
    /// With `--layers`: every how many layers one is attention (1 to 1024).
    #[arg(long, default_value_t = 4, value_parser = parse_interval, requires = "layers")]
    pub interval: usize,
    /// Also prove transformers' own step equal to the authored graph: the `.pt2` archive
    /// `torch.export.save` wrote for this model's decode step (or its `model.json`, gzipped or
    /// not, with a `buffers.json` beside it), as `reference/export_step.py` exports it.
    #[arg(long, value_name = "GRAPH", conflicts_with = "layers")]
    pub against: Option<PathBuf>,
    /// Also prove llama.cpp's own step equal to the authored graph: the JSON recording of its
    /// compute graph for one decode step of this GGUF, as `reference/record_llama_graph.py` writes
    /// it through llama.cpp's eval callback.
    #[arg(long, value_name = "GRAPH", conflicts_with = "layers")]
    pub against_llama_graph: Option<PathBuf>,
    /// Print one JSON object `{"model":…,"layers":…,"numerics":…,"verdict":…}` with, as the
    /// verdict is `proved`, `refuted`, `inconclusive` or `refused`, the outputs and lemmas, the
    /// difference, the reason, or the refusal; with `--against`, a `transformers` object of the
    /// same fields for that link, and with `--against-llama-graph` a `llama_cpp` one.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
#[command(override_usage = "stepcheck run [OPTIONS] --tokens <TOKENS> <MODEL | --preset NAME>")]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The tokens to decode, separated by commas and/or spaces (`3,1,4` or `"3, 1, 4"`; at most
    /// 4096).
    #[arg(long, required = true, value_parser = parse_tokens)]
    pub tokens: Tokens,
    /// How many tokens to generate greedily after the prompt (each the argmax of the logits
    /// before it).
    #[arg(short = 'n', long = "generate", default_value_t = 0, value_parser = parse_generate)]
    pub generate: usize,
    /// The engine's prefill chunk: how many prompt tokens each pass over the weights takes.
    #[arg(long, default_value_t = DEFAULT_CHUNK, value_parser = parse_chunk)]
    pub chunk: usize,
    /// Print one JSON object `{"tokens":[…],"logits":[[…],…],"generated":[…],…}`: every prompt
    /// token's logits.
    #[arg(long)]
    pub json: bool,
    /// Which interpreter runs the model.
    #[arg(long, value_enum, default_value = "engine")]
    pub interp: Interp,
    /// The stored type of a preset's random matrices (see `check --weights`); not with a model path.
    #[arg(long, default_value = "f32", value_parser = parse_weights, conflicts_with = "model")]
    pub weights: Weights,
    /// The engine's storage types `act[/kv[/state[/kquant-inputs]]]`, e.g. `bf16`, `f32/f32/f32/q8_k`.
    #[arg(long, default_value = "f32", value_parser = parse_numerics)]
    pub numerics: Numerics,
    /// The memory the run may use, in GiB (default: what the machine has: MemAvailable, the
    /// cgroup's limit, `ulimit -v`); a model that needs more is refused, with what it needs.
    #[arg(long, value_parser = parse_gib, allow_hyphen_values = true)]
    pub max_gib: Option<f64>,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The prompt's length: pp`P` runs a prompt of `P` tokens as one prefill (0: no pp test).
    #[arg(short = 'p', long = "n-prompt", default_value_t = 512, value_parser = parse_generate)]
    pub prompt: usize,
    /// The tokens generated: tg`N` decodes `N` tokens one step at a time (0: no tg test).
    #[arg(short = 'n', long = "n-gen", default_value_t = 128, value_parser = parse_generate)]
    pub generate: usize,
    /// The timed runs of each test, after one warm-up run.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5, value_parser = parse_repetitions)]
    pub repetitions: usize,
    /// The threads the engine's matrix products use (default: the machine's).
    #[arg(short = 't', long, value_parser = parse_threads)]
    pub threads: Option<usize>,
    /// The engine's prefill chunk: how many prompt tokens each pass over the weights takes.
    #[arg(long, default_value_t = DEFAULT_CHUNK, value_parser = parse_chunk)]
    pub chunk: usize,
    /// The stored type of a preset's random matrices (see `check --weights`); not with a model path.
    #[arg(long, default_value = "f32", value_parser = parse_weights, conflicts_with = "model")]
    pub weights: Weights,
    /// The engine's storage types `act[/kv[/state[/kquant-inputs]]]`, e.g. `bf16`, `f32/f32/f32/q8_k`.
    #[arg(long, default_value = "f32", value_parser = parse_numerics)]
    pub numerics: Numerics,
    /// The memory the run may use, in GiB (default: what the machine has).
    #[arg(long, value_parser = parse_gib, allow_hyphen_values = true)]
    pub max_gib: Option<f64>,
    /// Print one JSON object in llama-bench's names: `{"model":…,"tests":[{"test":"pp512",
    /// "avg_ts":…,"stddev_ts":…,"samples_ts":[…]},…]}`.
    #[arg(long)]
    pub json: bool,
}

/// Reads `-r`: 1 to 1000 timed runs.
pub(crate) fn parse_repetitions(s: &str) -> Result<usize, String> {
    limits::parse_positive("`-r`", s, 1000)
}

/// Reads `--threads`: 1 to 256.
pub(crate) fn parse_threads(s: &str) -> Result<usize, String> {
    limits::parse_positive("`--threads`", s, 256)
}

/// A list of tokens, as `--tokens` reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tokens(pub Vec<u32>);

#[derive(Args, Debug)]
pub struct VerdictArgs {
    /// A `config.json`, a Hugging Face model folder (its `config.json` is read) or a `.gguf` file.
    pub model: PathBuf,
    /// Print one JSON object `{"accepted":…,"error":…,"reasons":[…]}`; when the model cannot be
    /// judged, `{"accepted":null,"error":"NotJudged","reasons":[],"message":…}`.
    #[arg(long)]
    pub json: bool,
    /// The engine's storage types `act[/kv[/state[/kquant-inputs]]]`, e.g. `bf16`, `f32/f32/f32/q8_k`.
    #[arg(long, default_value = "f32", value_parser = parse_numerics)]
    pub numerics: Numerics,
}

/// The default prefill chunk of `run` and `bench`: 64 prompt tokens a pass over the weights
/// (docs/PERFORMANCE.md, "Prompt processing", has the figures it was chosen by).
pub const DEFAULT_CHUNK: usize = 64;

/// Reads `--prefill`: a prompt of 1 to [`MAX_STEPS`] tokens (with the four decode steps around it).
pub(crate) fn parse_prefill(s: &str) -> Result<usize, String> {
    limits::parse_positive("`--prefill`", s, MAX_STEPS - 4)
}

/// Reads `-n`: how many tokens to generate, at most [`MAX_STEPS`].
pub(crate) fn parse_generate(s: &str) -> Result<usize, String> {
    limits::parse_count("`-n`", s, MAX_STEPS)
}

/// Reads `--chunk`: 1 to [`MAX_CHUNK`](crate::engine::program::prefill::MAX_CHUNK) tokens.
pub(crate) fn parse_chunk(s: &str) -> Result<usize, String> {
    limits::parse_positive("`--chunk`", s, crate::engine::program::prefill::MAX_CHUNK)
}

/// Reads `--steps`: a count of at least the steps a verdict needs and at most [`MAX_STEPS`].
pub(crate) fn parse_steps(s: &str) -> Result<usize, String> {
    let steps = limits::parse_count("`--steps`", s, MAX_STEPS)?;
    let least = crate::check::MIN_STEPS;
    if steps < least {
        return Err(format!(
            "`--steps` is {steps}; a verdict needs at least {least} (state read once written, RoPE away from position 0)"
        ));
    }
    Ok(steps)
}

/// Reads `--batch`: 1 to [`limits::MAX_BATCH`] slots.
pub(crate) fn parse_batch(s: &str) -> Result<usize, String> {
    limits::parse_positive("`--batch`", s, limits::MAX_BATCH)
}

/// Reads `--layers`: 1 to [`limits::MAX_FLAG_LAYERS`].
pub(crate) fn parse_layers(s: &str) -> Result<usize, String> {
    limits::parse_positive("`--layers`", s, limits::MAX_FLAG_LAYERS)
}

/// Reads `--interval`: 1 to [`limits::MAX_FLAG_LAYERS`].
pub(crate) fn parse_interval(s: &str) -> Result<usize, String> {
    limits::parse_positive("`--interval`", s, limits::MAX_FLAG_LAYERS)
}

/// Reads `--tokens`: token ids separated by commas, spaces or both, at most [`MAX_STEPS`] of them.
pub(crate) fn parse_tokens(s: &str) -> Result<Tokens, String> {
    let words: Vec<&str> = s.split(|c: char| c == ',' || c.is_whitespace()).filter(|w| !w.is_empty()).collect();
    limits::at_most("`--tokens` (its count)", words.len() as u128, MAX_STEPS as u128).map_err(|e| e.to_string())?;
    if words.is_empty() {
        return Err("no token: give at least one, e.g. `--tokens 3,1,4`".into());
    }
    let ids =
        words.iter().map(|w| w.parse::<u32>().map_err(|_| format!("{w:?} is not a token id (0 to {})", u32::MAX)));
    Ok(Tokens(ids.collect::<Result<_, _>>()?))
}

/// Reads `--weights`: a ggml type a random checkpoint can be made in, by ggml's name in any case.
pub(crate) fn parse_weights(s: &str) -> Result<Weights, String> {
    Weights::parse(s)
        .ok_or_else(|| format!("{s:?} is not a weight type; the types are {}", Weights::names().join(", ")))
}

/// Reads `--max-gib` (see [`limits::parse_gib`]).
pub(crate) fn parse_gib(s: &str) -> Result<f64, String> {
    limits::parse_gib(s)
}

/// The size checks of a parsed command line, without running it: for a preset, whether the memory
/// it needs fits what `--max-gib` allows (flags themselves are checked while they are parsed). It
/// reads no file and allocates nothing from a size; the `cli_args` fuzz target calls it.
pub fn check_sizes(cli: &Cli) -> Result<(), MemoryError> {
    // `run` and `check` hold one checkpoint, in its weights' stored types.
    let fits = |preset: &str, steps: usize, weights: Weights, max_gib: Option<f64>| match (
        crate::model::presets::preset(preset),
        max_gib,
    ) {
        (Some(spec), Some(g)) => Budget::new(Some(g))
            .map_or(Ok(()), |b| b.admit(preset, &Need::of(&spec, steps, weights.checkpoint_bytes(&spec)))),
        _ => Ok(()),
    };
    match &cli.command {
        Subcommand::Run(a) => {
            a.model.preset.as_deref().map_or(Ok(()), |p| fits(p, a.tokens.0.len() + a.generate, a.weights, a.max_gib))
        }
        Subcommand::Check(a) => {
            let steps = a.steps.max(a.prefill.map_or(0, |t| t + 4));
            a.preset.iter().try_for_each(|p| fits(p, steps, a.weights, a.max_gib))
        }
        Subcommand::Bench(a) => {
            a.model.preset.as_deref().map_or(Ok(()), |p| fits(p, a.prompt.max(a.generate), a.weights, a.max_gib))
        }
        _ => Ok(()),
    }
}

pub(crate) fn parse_numerics(s: &str) -> Result<Numerics, String> {
    Numerics::parse(s).ok_or_else(|| {
        format!("{s:?} is not act[/kv[/state[/kquant-inputs]]] of f32, bf16, f16 (kquant-inputs: f32 or q8_k)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_read_with_commas_or_spaces_and_counted_against_their_limit() {
        assert_eq!(parse_tokens("3,1,4"), Ok(Tokens(vec![3, 1, 4])));
        assert_eq!(parse_tokens(" 3, 1 4 ,"), Ok(Tokens(vec![3, 1, 4])));
        assert!(parse_tokens("").is_err() && parse_tokens("1,-2").is_err() && parse_tokens("4294967296").is_err());
        let e = parse_tokens(&"1,".repeat(MAX_STEPS + 1)).expect_err("too many");
        assert_eq!(e, format!("`--tokens` (its count) is {}, the limit is {MAX_STEPS}", MAX_STEPS + 1));
    }

    #[test]
    fn check_sizes_refuses_a_preset_over_max_gib_without_running_it() {
        let cli = |args: &[&str]| Cli::try_parse_from(["stepcheck"].iter().chain(args)).expect("parses");
        let e = check_sizes(&cli(&["run", "--preset", "qwen3.5-9b-style", "--tokens", "1", "--max-gib", "4"]));
        assert!(e.is_err_and(|e| e.to_string().starts_with("qwen3.5-9b-style needs about 33.")));
        assert!(check_sizes(&cli(&["check", "--preset", "tiny", "--max-gib", "1"])).is_ok());
        assert!(check_sizes(&cli(&["check", "--preset", "small", "--max-gib", "0.001"])).is_err());
    }
}
