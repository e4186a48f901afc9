//! The one rule for sizes: every size read from an input (a case file, a spec, a flag) is checked
//! against a limit stated here before anything is allocated from it, and the error names the field,
//! the value and the limit. The memory a command needs is estimated from the spec before a weight is
//! made or read, and compared with what the machine has (`MemAvailable`, the cgroup's limit, the
//! address-space limit), unless `--max-gib` says otherwise.
//!
//! The limits are far above any model or case stepcheck checks, and low enough that nothing
//! allocated from a value under them can exhaust a machine by itself.

use std::fmt;

use crate::model::ModelSpec;
use crate::model::config::{MAX_LAYERS, MAX_SIZE};
use crate::model::layout::layout;
use crate::model::spec::Mixer;

/// The most tokens a command or a case decodes: the KV cache is allocated for all of them, and a
/// step's attention reads every position before it, so the work grows with the square of the
/// steps. At 4096, `check --preset tiny --steps 4096` takes about 40 s and `run --preset tiny` of
/// 4096 tokens about 6 s (docs/SOUNDNESS.md, "Bad inputs"); at 65536 they took about 3 hours and
/// 10 minutes.
pub const MAX_STEPS: usize = 1 << 12;
/// The most values a case file's random checkpoint may hold (512 MiB of f32): a corpus case is a
/// small model, and the oracle runs two interpreters and a perturbed copy of it.
pub const MAX_CASE_VALUES: u128 = 1 << 27;
/// The largest case file read, in bytes. The corpus's files are a few KiB.
pub(crate) const MAX_CASE_FILE_BYTES: u64 = 4 << 20;
pub use crate::model::hf::MAX_CONFIG_BYTES;
/// The most memory `--max-gib` may grant, in GiB (1 PiB): any more is a typo.
pub(crate) const MAX_GIB: f64 = 1024.0 * 1024.0;
/// The most slots `check --batch` pools: its memory grows with the slots times their snapshots and
/// states. 64 slots of the `small` preset take about 20 s and 1.8 GB; 256 took 213 s and 7.3 GB.
pub const MAX_BATCH: usize = 64;
/// The most layers `prove --layers` gives a spec: the proof's time grows faster than its layers.
/// 1024 layers of the 0.8B preset prove in about 2.5 s; 4096 took over 90 s.
pub const MAX_FLAG_LAYERS: usize = 1024;

/// The text of the file at `path`, refused unread (naming the file, its size and the limit) when
/// it holds more than `limit` bytes.
pub(crate) fn read_text(path: &std::path::Path, limit: u64) -> Result<String, String> {
    crate::model::hf::read_bounded(path, limit).map_err(|e| e.to_string())
}

/// A size above its limit: which field or flag, the value found and the limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} is {value}, the limit is {limit}")]
pub struct SizeError {
    /// The field (``field `steps` ``) or the flag (`` `--steps` ``).
    pub what: String,
    pub value: u128,
    pub limit: u128,
}

/// Checks `value` of field or flag `what` is at most `limit`.
pub(crate) fn at_most(what: &str, value: u128, limit: u128) -> Result<(), SizeError> {
    if value <= limit { Ok(()) } else { Err(SizeError { what: what.to_string(), value, limit }) }
}

/// Reads a count (a decimal integer, surrounding spaces allowed) of at most `limit`; `what` names
/// it in the error.
pub(crate) fn parse_count(what: &str, text: &str, limit: usize) -> Result<usize, String> {
    let t = text.trim();
    let n: u128 = t.parse().map_err(|_| format!("{what}: {t:?} is not a non-negative integer"))?;
    at_most(what, n, limit as u128).map_err(|e| e.to_string())?;
    Ok(n as usize)
}

/// Reads a count as [`parse_count`] does that must also be at least 1: a flag where 0 would mean
/// nothing (no slots, no layers, attention every 0th layer).
pub(crate) fn parse_positive(what: &str, text: &str, limit: usize) -> Result<usize, String> {
    match parse_count(what, text, limit)? {
        0 => Err(format!("{what} is 0, it must be at least 1")),
        n => Ok(n),
    }
}

/// Checks every size of `spec` against its limit before anything is authored or allocated from
/// it: each width, head count and head size at most [`MAX_SIZE`], at most [`MAX_LAYERS`] layers,
/// and a checkpoint of at most `max_values` values. `spec.` prefixes each field's name.
pub fn check_spec(spec: &ModelSpec, max_values: u128) -> Result<(), SizeError> {
    let (a, d) = (&spec.attention, &spec.delta_net);
    let size = MAX_SIZE as u128;
    let mut fields: Vec<(&str, usize)> = vec![
        ("hidden", spec.hidden),
        ("intermediate", spec.intermediate),
        ("vocab", spec.vocab),
        ("attention.heads", a.heads),
        ("attention.kv_heads", a.kv_heads),
        ("attention.head_dim", a.head_dim),
        ("attention.rotary_dims", a.rotary_dims),
        ("delta_net.key_heads", d.key_heads),
        ("delta_net.value_heads", d.value_heads),
        ("delta_net.key_dim", d.key_dim),
        ("delta_net.value_dim", d.value_dim),
        ("delta_net.conv_kernel", d.conv_kernel),
    ];
    let k = &spec.constructs;
    if let Some(e) = &k.experts {
        fields.extend([
            ("experts.count", e.count),
            ("experts.top_k", e.top_k),
            ("experts.intermediate", e.intermediate),
        ]);
        fields.extend(e.shared_intermediate.map(|s| ("experts.shared_intermediate", s)));
        fields.push(("experts.dense_layers", e.dense_layers.len()));
    }
    if let Some(l) = &k.latent_attention {
        fields.extend([
            ("latent_attention.kv_rank", l.kv_rank),
            ("latent_attention.nope_dim", l.nope_dim),
            ("latent_attention.rope_dim", l.rope_dim),
            ("latent_attention.value_dim", l.value_dim),
        ]);
        fields.extend(l.q_rank.map(|q| ("latent_attention.q_rank", q)));
    }
    if let Some(w) = &k.sliding_window {
        fields.extend([("sliding_window.window", w.window), ("sliding_window.layers", w.layers.len())]);
    }
    at_most("field `layers` (its length)", spec.layers.len() as u128, MAX_LAYERS as u128)?;
    for (name, value) in fields {
        let limit = if name.ends_with("layers") { MAX_LAYERS as u128 } else { size };
        at_most(&format!("field `{name}`"), value as u128, limit)?;
    }
    at_most("the checkpoint (values, all tensors)", checkpoint_values(spec), max_values)
}

/// Checks every tensor type a graph declares holds at most `max_values` values, and every cache
/// at most that many over `steps` positions, naming the tensor: the reference interpreter
/// allocates each state from its type.
pub(crate) fn check_graph(graph: &crate::ir::Graph, steps: usize, max_values: u128) -> Result<(), SizeError> {
    for t in &graph.tensors {
        let values = match &t.ty {
            crate::ir::Ty::Tensor(shape) => shape.iter().fold(1u128, |n, &d| n.saturating_mul(d as u128)),
            crate::ir::Ty::Cache { heads, dim } => {
                (*heads as u128).saturating_mul(*dim as u128).saturating_mul(steps as u128)
            }
            _ => 0,
        };
        at_most(&format!("tensor `%{}` (values)", t.name), values, max_values)?;
    }
    Ok(())
}

/// How many values `spec`'s checkpoint holds, counted without overflow. Call it on a spec whose
/// sizes [`check_spec`] bounds (the layout it counts is one entry per tensor).
pub(crate) fn checkpoint_values(spec: &ModelSpec) -> u128 {
    layout(spec).iter().map(|t| t.shape.iter().fold(1u128, |n, &d| n.saturating_mul(d as u128))).sum()
}

/// The memory a command needs, estimated from the spec and the checkpoint's stored size alone: the
/// checkpoint's bytes in their stored types (what a mapped file brings into memory as it is read,
/// or what an owned checkpoint holds; both interpreters read it in place) and what the
/// interpreters keep for `steps` tokens (KV caches, recurrent and conv state, logits), with a
/// margin for the program and activations.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Need {
    pub checkpoint: u128,
    pub run: u128,
}

impl Need {
    /// The estimate for running `spec` over `steps` tokens on a checkpoint stored in
    /// `checkpoint` bytes (for f32 weights, 4 per value of [`checkpoint_values`]).
    pub fn of(spec: &ModelSpec, steps: usize, checkpoint: u128) -> Need {
        let (a, d) = (&spec.attention, &spec.delta_net);
        let steps = steps.max(1) as u128;
        let count = |m: Mixer| spec.layers.iter().filter(|&&l| l == m).count() as u128;
        // Both interpreters: the engine in f32 (4 bytes), the reference in f64 (8 bytes).
        let both = 12u128;
        let kv = count(Mixer::Attention) * 2 * (a.kv_heads as u128) * (a.head_dim as u128) * steps * both;
        let delta = count(Mixer::DeltaNet)
            * ((d.value_heads as u128) * (d.key_dim as u128) * (d.value_dim as u128)
                + spec.conv_channels() as u128 * d.conv_kernel as u128)
            * both;
        let logits = spec.vocab as u128 * steps * 16;
        let widest = [spec.hidden, spec.intermediate, spec.vocab, spec.conv_channels(), a.heads * a.head_dim * 2]
            .into_iter()
            .max()
            .unwrap_or(0) as u128;
        let run = kv + delta + logits + widest * 8 * 64 + (32 << 20);
        Need { checkpoint, run }
    }

    /// This estimate with the engine's prefill in chunks of `chunk` tokens: each token of a chunk
    /// its own activation buffers (at most 8 of the widest a layer, f32: the 0.8B program's come to
    /// 3.6) and its logits.
    pub fn with_prefill(mut self, spec: &ModelSpec, chunk: usize) -> Need {
        let a = &spec.attention;
        let widest = [spec.hidden, spec.intermediate, spec.conv_channels(), a.heads * a.head_dim * 2]
            .into_iter()
            .max()
            .unwrap_or(0) as u128;
        let per_token = spec.layers.len() as u128 * 8 * widest * 4 + spec.vocab as u128 * 4;
        self.run += chunk as u128 * per_token;
        self
    }

    /// The whole estimate, in bytes.
    pub fn bytes(&self) -> u128 {
        self.checkpoint + self.run
    }
}

/// How much memory a command may use, and who says so.
#[derive(Clone, Debug, PartialEq)]
pub struct Budget {
    pub bytes: u128,
    /// Where the figure comes from: `--max-gib`, `MemAvailable`, the cgroup's limit or the
    /// address-space limit.
    pub from: String,
}

impl Budget {
    /// The budget `--max-gib` sets, or else what the machine has (`None` when it says nothing).
    pub fn new(max_gib: Option<f64>) -> Option<Budget> {
        match max_gib {
            Some(g) => Some(Budget { bytes: (g * GIB) as u128, from: format!("--max-gib {g}") }),
            None => machine(),
        }
    }

    /// Refuses `need` when it does not fit; `what` names the model.
    pub fn admit(&self, what: &str, need: &Need) -> Result<(), MemoryError> {
        if need.bytes() <= self.bytes {
            Ok(())
        } else {
            Err(MemoryError { what: what.to_string(), need: *need, budget: self.clone() })
        }
    }
}

const GIB: f64 = (1u64 << 30) as f64;

fn gib(bytes: u128) -> f64 {
    bytes as f64 / GIB
}

/// A command that needs more memory than it may use.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct MemoryError {
    pub what: String,
    pub need: Need,
    pub budget: Budget,
}

impl fmt::Display for MemoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} needs about {:.1} GiB ({:.1} GiB of weights, {:.2} GiB to run), more than the {:.1} GiB {} allows; \
             --max-gib overrides the limit",
            self.what,
            gib(self.need.bytes()),
            gib(self.need.checkpoint),
            gib(self.need.run),
            gib(self.budget.bytes),
            self.budget.from
        )
    }
}

/// Reads `--max-gib`: a finite number of GiB above 0 and at most [`MAX_GIB`] (`NaN`, infinities,
/// 0 and negatives are refused, so no value turns the guard off).
pub(crate) fn parse_gib(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let g: f64 = t.parse().map_err(|_| format!("{t:?} is not a number of GiB"))?;
    if !(g.is_finite() && g > 0.0 && g <= MAX_GIB) {
        return Err(format!("`--max-gib` is {t}, it must be a finite number of GiB above 0 and at most {MAX_GIB}"));
    }
    Ok(g)
}

/// What the machine lets this process use: the least of `MemAvailable` (/proc/meminfo), the
/// cgroup's limit less its usage, and the address-space limit (`ulimit -v`) less the address space
/// in use. `None` where none of them can be read (not Linux).
pub fn machine() -> Option<Budget> {
    let mut best: Option<Budget> = None;
    let mut offer = |bytes: Option<u128>, from: &str| {
        if let Some(bytes) = bytes
            && best.as_ref().is_none_or(|b| bytes < b.bytes)
        {
            best = Some(Budget { bytes, from: from.to_string() });
        }
    };
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    offer(kib_field(&meminfo, "MemAvailable:"), "the machine's available memory (MemAvailable)");
    offer(cgroup_room(), "the cgroup's memory limit");
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if let Some(limit) = address_space_limit(&limits) {
        let used = kib_field(&status, "VmSize:").unwrap_or(0);
        offer(Some(limit.saturating_sub(used)), "the address-space limit (ulimit -v)");
    }
    best
}

/// A `NAME:  N kB` line's value, in bytes.
fn kib_field(text: &str, name: &str) -> Option<u128> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    let n: u128 = line[name.len()..].split_whitespace().next()?.parse().ok()?;
    Some(n * 1024)
}

/// The soft `Max address space` of /proc/self/limits, when it is not unlimited.
fn address_space_limit(limits: &str) -> Option<u128> {
    let line = limits.lines().find(|l| l.starts_with("Max address space"))?;
    line["Max address space".len()..].split_whitespace().next()?.parse().ok()
}

/// The room left under this process's cgroup v2 `memory.max` (or v1 `memory.limit_in_bytes`).
fn cgroup_room() -> Option<u128> {
    let read = |p: &str| std::fs::read_to_string(p).ok().and_then(|s| s.trim().parse::<u128>().ok());
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    if let Some(path) = cgroup.lines().find_map(|l| l.strip_prefix("0::")) {
        let dir = format!("/sys/fs/cgroup{}", path.trim_end_matches('/'));
        if let Some(max) = read(&format!("{dir}/memory.max")) {
            return Some(max.saturating_sub(read(&format!("{dir}/memory.current")).unwrap_or(0)));
        }
    }
    let max = read("/sys/fs/cgroup/memory/memory.limit_in_bytes")?;
    // v1 writes a huge number for "no limit".
    (max < 1 << 60).then(|| max.saturating_sub(read("/sys/fs/cgroup/memory/memory.usage_in_bytes").unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_read_with_their_limit_named() {
        assert_eq!(parse_count("`--steps`", " 12 ", MAX_STEPS), Ok(12));
        assert_eq!(
            parse_count("`--steps`", "1000000000000", MAX_STEPS),
            Err("`--steps` is 1000000000000, the limit is 4096".into())
        );
        assert!(parse_count("`--steps`", "-1", MAX_STEPS).is_err());
        assert!(parse_count("`--steps`", "99999999999999999999999999999999999999999", MAX_STEPS).is_err());
    }

    #[test]
    fn max_gib_refuses_every_value_that_would_turn_the_guard_off() {
        for bad in ["NaN", "nan", "inf", "-inf", "Infinity", "0", "-1", "1e300", "x", ""] {
            assert!(parse_gib(bad).is_err(), "{bad} accepted");
        }
        assert_eq!(parse_gib("0.5"), Ok(0.5));
    }

    #[test]
    fn proc_files_are_read_as_the_kernel_writes_them() {
        assert_eq!(kib_field("MemTotal: 10 kB\nMemAvailable:    2048 kB\n", "MemAvailable:"), Some(2048 * 1024));
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max address space         2097152000           unlimited            bytes\n";
        assert_eq!(address_space_limit(limits), Some(2_097_152_000));
        assert_eq!(address_space_limit("Max address space         unlimited            unlimited  bytes"), None);
    }

    #[test]
    fn the_checkpoint_is_needed_in_its_stored_types() {
        use crate::formats::gguf::GgmlType;
        use crate::model::random::Weights;
        let spec = crate::model::presets::preset("qwen3.5-9b-style").expect("9b");
        let need = |ty: GgmlType| Need::of(&spec, 4, Weights(ty).checkpoint_bytes(&spec)).checkpoint as f64;
        let f32 = need(GgmlType::F32);
        assert_eq!(f32, (checkpoint_values(&spec) * 4) as f64, "f32: four bytes a value");
        // bf16 matrices and f32 norms: just over half; Q8_0 (34 bytes per 32 values): just over a quarter.
        assert!((0.5..0.51).contains(&(need(GgmlType::BF16) / f32)), "{}", need(GgmlType::BF16) / f32);
        assert!((0.265..0.27).contains(&(need(GgmlType::Q8_0) / f32)), "{}", need(GgmlType::Q8_0) / f32);
    }

    #[test]
    fn a_spec_over_a_limit_is_refused_by_field() {
        let mut spec = crate::model::presets::preset("tiny").expect("tiny");
        assert_eq!(check_spec(&spec, MAX_CASE_VALUES), Ok(()));
        spec.vocab = 1_000_000_000;
        let e = check_spec(&spec, MAX_CASE_VALUES).expect_err("too large");
        assert_eq!(e.to_string(), format!("field `vocab` is 1000000000, the limit is {MAX_SIZE}"));
        spec.vocab = 1 << 20;
        spec.hidden = 1 << 20;
        let e = check_spec(&spec, MAX_CASE_VALUES).expect_err("too large");
        assert!(e.what.starts_with("the checkpoint"), "{e}");
    }
}
