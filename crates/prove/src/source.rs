//! The transformers link: transformers' own decode step, imported into the IR (`aten::import`),
//! proved equal to the authored graph for every checkpoint and every step.
//!
//! The two graphs read different checkpoints: the imported one the HF tensors, the authored one
//! the GGUF tensors the converter makes of them. The checkpoint convention
//! ([`formats::convention`]) states each GGUF tensor as an equation over the HF tensor it comes
//! from (`attn_norm = 1 + input_layernorm`, `ssm_a = −exp(A_log)`, the rest the same values); the
//! authored graph's constants are built as those terms over the HF leaves, so both graphs are terms
//! over one set of leaves, and the proof is the prover's: the same normal form, output by output.
//! The states are the same leaves on both sides, and equal outputs prove every step by induction.
//!
//! **Tiled value heads.** Where the converter tiles a model's value heads (several key heads, each
//! shared by several value heads), a GGUF tensor of value heads is a block permutation of the HF
//! one (`permute.rs`: `permute[P]`, `P` the grouped→tiled order), and so is the authored graph's
//! conv window (its value channels) and delta state (its heads): the authored graph's constants
//! and incoming states are those permutations of the HF leaves, and each outgoing state is compared
//! with transformers' under the same permutation (a layout map, as the engine's are). The lemmas
//! move the permutation through the matvecs, the concat, the conv, the activations, the norms and
//! the delta rule (`tiled-delta-rule`), and cancel it at the out-projection's permuted columns.
//!
//! **Stated, not proved:** transformers' rotary frequencies are the archive's `inv_freq` buffer,
//! computed in f32 (`1/θ^(2i/d)`); the authored graph states the real `θ^(−2i/d)`. The link reads
//! an imported `rope_freqs` as `rope(θ)` of the convention's θ when every frequency is within
//! [`FREQ_ULPS`] f32 ulps of the real one, and says so in the proof with the largest distance
//! found; a frequency farther off keeps its `rope_freqs`, and the proof refutes it. Scalar
//! constants are compared at f32 on both sides.

use std::cell::OnceCell;

use formats::convention::{Convention, Rule};
use ir::{Binding, Graph, OpKind};

use super::permute;
use super::term::{Dag, Real, Sym};
use super::{Link, OutputProof, Proof, ProofVerdict, Prover, graph_terms, missing, state_name};

/// The most f32 ulps a transformers rotary frequency may be from the real `θ^(−2i/d)`:
/// transformers computes it in f32 (`base ** (arange / d)`, then its reciprocal), and the
/// committed exports are within 4.
pub const FREQ_ULPS: f64 = 8.0;

/// Proves that `imported` (transformers' step, its ops labelled by `labels`, one per op) computes
/// what `authored` computes, through `convention`.
pub fn prove_source(imported: &Graph, labels: &[String], authored: &Graph, convention: &Convention) -> ProofVerdict {
    let (imported, stated) = rope_by_theta(imported, convention.rope_theta);
    let side = Side {
        link: Link::SourceAuthored,
        name: "transformers",
        at_f32: "every scalar constant of both graphs (an eps, a scale, an offset) is read at f32, the precision both compute in: \
                 transformers multiplies an f32 tensor by a Python float rounded to f32",
    };
    prove_link(&side, &imported, labels, authored, convention, stated)
}

/// The graph a link proves against the authored one: which link it is, what its side is called in
/// a refutation, and why its scalar constants are read at f32.
pub(crate) struct Side {
    pub link: Link,
    pub name: &'static str,
    pub at_f32: &'static str,
}

/// Proves that `imported` (its ops labelled by `labels`) computes what `authored` computes, its
/// leaves read through `convention`; `stated` is what the caller has already taken as given.
pub(crate) fn prove_link(
    side: &Side,
    imported: &Graph,
    labels: &[String],
    authored: &Graph,
    convention: &Convention,
    mut stated: Vec<String>,
) -> ProofVerdict {
    let link = side.link;
    let (mut imported, authored) = (at_f32(imported), at_f32(authored));
    for c in &mut imported.consts {
        c.binding.tensor = convention.resolve(&c.binding.tensor).to_string();
    }
    let authored = &authored;
    stated.push(side.at_f32.into());
    let mut prover = Prover {
        dag: Dag::default(),
        outputs: vec![],
        graphs: [&imported, &imported],
        envs: OnceCell::new(),
        reads: vec![],
    };
    for c in &imported.consts {
        if let Some(&[rows, cols]) = imported.ty(c.tensor).shape() {
            prover.dag.rows.insert(c.binding.tensor.clone(), rows);
            prover.dag.cols.insert(c.binding.tensor.clone(), cols);
        } else if let Some(&[rows, _, _]) = imported.ty(c.tensor).shape() {
            prover.dag.rows.insert(c.binding.tensor.clone(), rows);
        }
    }
    let hf = graph_terms::graph_terms(&mut prover.dag, &imported);
    let hf = match hf {
        Ok(t) => t,
        Err(e) => return ProofVerdict::Inconclusive { why: format!("the imported graph: {e}") },
    };
    let shapes: std::collections::HashMap<&Binding, Vec<usize>> =
        authored.consts.iter().map(|c| (&c.binding, authored.ty(c.tensor).shape().unwrap_or(&[]).to_vec())).collect();
    let tiling = Tiling::of(convention);
    let gguf = graph_terms::graph_terms_with(
        &mut prover.dag,
        authored,
        &mut |dag, b| {
            let eq = convention.of(&b.tensor).ok_or_else(|| format!("{}: no equation of the convention", b.tensor))?;
            let shape = shapes.get(b).cloned().unwrap_or_default();
            equation_term(dag, eq, b.view, &shape, tiling.as_ref())
        },
        &mut |dag, kind, layer| {
            let leaf = graph_terms::state_leaf(dag, kind, layer);
            match tiling.as_ref().and_then(|t| t.of_state(kind, authored, layer)) {
                Some((perm, size)) => dag.permute(&perm, size, leaf),
                None => leaf,
            }
        },
    );
    let gguf = match gguf {
        Ok(t) => t,
        Err(e) => return ProofVerdict::Inconclusive { why: format!("the authored graph: {e}") },
    };
    let name_of = |dag: &Dag, id, terms: &graph_terms::GraphTerms, label: &dyn Fn(usize) -> String| {
        let at = terms
            .ops
            .iter()
            .position(|outs| outs.contains(&id))
            .or_else(|| terms.ops.iter().position(|outs| outs.iter().any(|&o| dag.node(o).args.contains(&id))));
        at.map(label)
    };
    let label = |i: usize| labels.get(i).cloned().unwrap_or_else(|| format!("op {i}"));
    let authored_label = |i: usize| format!("%{}", authored.name_of(authored.ops[i].outputs[0]));
    let compare = |prover: &mut Prover, output: &str, a, b| -> Option<ProofVerdict> {
        let verdict = prover.equal(link, output, a, b)?;
        let ProofVerdict::Refuted(mut r) = verdict else { return Some(verdict) };
        let diff = super::first_difference(&prover.dag, a, b);
        let left = name_of(&prover.dag, diff.left, &hf, &label);
        let right = name_of(&prover.dag, diff.right, &gguf, &authored_label);
        if let Some(l) = left {
            r.why.push_str(&format!("; {}: {l}", side.name));
        }
        if let Some(rt) = right {
            r.why.push_str(&format!("; authored: {rt}"));
        }
        Some(ProofVerdict::Refuted(r))
    };
    if let Some(v) = compare(&mut prover, "logits", hf.logits, gguf.logits) {
        return v;
    }
    for s in &gguf.states {
        let name = state_name(s.kind, s.layer);
        let Some(t) = hf.states.iter().find(|t| t.kind == s.kind && t.layer == s.layer) else {
            return missing(link, &name, &format!("{}' step has no such state", side.name));
        };
        if t.ty != s.ty {
            return missing(link, &name, &format!("{}' state is {}, the authored {}", side.name, t.ty, s.ty));
        }
        let want = match tiling.as_ref().and_then(|tl| tl.of_state(s.kind, authored, s.layer)) {
            Some((perm, size)) => prover.dag.permute(&perm, size, t.out),
            None => t.out,
        };
        if let Some(v) = compare(&mut prover, &name, want, s.out) {
            return v;
        }
    }
    if let Some(t) = hf.states.iter().find(|t| !gguf.states.iter().any(|s| s.kind == t.kind && s.layer == t.layer)) {
        return missing(link, &state_name(t.kind, t.layer), "the authored graph has no such state");
    }
    let mut lemmas = std::collections::BTreeMap::new();
    for (l, _) in &prover.dag.fired {
        *lemmas.entry(*l).or_default() += 1;
    }
    let outputs: Vec<OutputProof> = prover.outputs;
    ProofVerdict::Proved(Proof {
        outputs,
        lemmas,
        nodes: prover.dag.len(),
        commands: 0,
        roundings: Default::default(),
        numerics: "reals".into(),
        stated,
    })
}

/// The term of the GGUF constant `eq.gguf` seen through `view` (of `shape`): the equation's rule
/// over the HF leaf `eq.source` seen through the same view, its value heads permuted when `tiling`
/// moves them. The loader's reading of the same rule is `model::hf::transform::apply`; a test holds
/// the two to each other on random values.
pub fn equation_term(
    dag: &mut Dag,
    eq: &formats::convention::Equation,
    view: ir::View,
    shape: &[usize],
    tiling: Option<&Tiling>,
) -> Result<super::term::Id, String> {
    let leaf = dag.leaf(Sym::Weight(Binding { tensor: eq.source.clone(), view }));
    let value = match eq.rule {
        Rule::Norm => dag.mk(Sym::Offset(Real::new(1.0)), &[leaf]),
        Rule::Decay => {
            let e = dag.mk(Sym::Act(ir::Act::Exp), &[leaf]);
            dag.mk(Sym::Scale(Real::new(-1.0)), &[e])
        }
        Rule::Copy | Rule::Conv | Rule::QkvValueRows | Rule::ValueRows | Rule::ValueColumns => leaf,
    };
    match tiling {
        Some(t) if eq.rule.moves_heads() => {
            let (perm, size) = t.of_tensor(eq.rule, view, shape).ok_or_else(|| {
                format!("{}{view}: its value heads' tiling does not fit its shape {shape:?}", eq.gguf)
            })?;
            Ok(dag.permute(&perm, size, value))
        }
        _ => Ok(value),
    }
}

/// `graph` with every scalar attribute rounded to f32 (the frequencies of a `rope_freqs` and a
/// rotary base excepted: [`rope_by_theta`] reads those).
fn at_f32(graph: &Graph) -> Graph {
    let r = |x: &mut f64| *x = f64::from(*x as f32);
    let mut out = graph.clone();
    for op in &mut out.ops {
        match &mut op.kind {
            OpKind::Scale { factor } => r(factor),
            OpKind::Offset { value } => r(value),
            OpKind::Clamp { min, max } => {
                r(min);
                r(max);
            }
            OpKind::RmsNorm { eps } | OpKind::LayerNorm { eps } | OpKind::L2Norm { eps } => r(eps),
            OpKind::Attention { scale, .. } => r(scale),
            OpKind::RopeFreqs { scale, .. } => r(scale),
            _ => {}
        }
    }
    out
}

/// `graph` with each `rope_freqs` whose frequencies are `θ^(−2i/d)` within [`FREQ_ULPS`] f32 ulps
/// written as `rope(θ)`, and what that states.
fn rope_by_theta(graph: &Graph, theta: f64) -> (Graph, Vec<String>) {
    let mut out = graph.clone();
    let (mut read, mut worst) = (0, 0f64);
    for op in &mut out.ops {
        let OpKind::RopeFreqs { inv_freq, scale, style } = &op.kind else { continue };
        let dims = 2 * inv_freq.len();
        let ulps: Option<Vec<f64>> = inv_freq
            .iter()
            .enumerate()
            .map(|(i, &f)| {
                let real = theta.powf(-((2 * i) as f64) / dims as f64);
                let ulp = f64::from(f32::EPSILON) * real.abs().max(f64::MIN_POSITIVE);
                let d = (f - real).abs() / ulp;
                (d <= FREQ_ULPS).then_some(d)
            })
            .collect();
        if let (Some(ulps), true) = (ulps, *scale == 1.0 && dims > 0) {
            worst = ulps.into_iter().fold(worst, f64::max);
            read += 1;
            op.kind = OpKind::Rope { theta, rotary_dims: dims, style: *style };
        }
    }
    let stated = match read {
        0 => vec![],
        n => vec![format!(
            "{n} rotary embeddings' frequencies are transformers' f32 buffer, read as θ = {theta}'s: the farthest \
             is {worst:.1} f32 ulps from the real θ^(−2i/d) (at most {FREQ_ULPS} accepted)"
        )],
    };
    (out, stated)
}

/// The grouped→tiled value-head permutation of a model whose tiling moves heads: how each GGUF
/// tensor and each state holds the HF one.
pub struct Tiling {
    key_heads: usize,
    value_heads: usize,
    key_dim: usize,
    value_dim: usize,
    heads: Vec<u32>,
}

impl Tiling {
    /// The tiling of `convention`'s model, when it moves any head.
    pub fn of(convention: &Convention) -> Option<Tiling> {
        let [key_heads, value_heads, key_dim, value_dim] = convention.delta_heads;
        convention.tiling_moves.then(|| Tiling {
            key_heads,
            value_heads,
            key_dim,
            value_dim,
            heads: permute::tiled_heads(key_heads, value_heads),
        })
    }

    /// The permutation, over single channels, of the q, k and v channels `[2·Hk·dk | Hv·dv]`.
    fn channels(&self) -> Option<Vec<u32>> {
        let v = permute::expand(&self.heads, self.value_dim, 1)?;
        let qk = 2 * self.key_heads * self.key_dim;
        Some(permute::concat(&[qk, v.len()], &[None, Some(v)]))
    }

    /// How the GGUF tensor of `rule`, seen through `view` as `shape`, holds its HF tensor: a
    /// permutation over blocks of a size.
    fn of_tensor(&self, rule: Rule, view: ir::View, shape: &[usize]) -> Option<(Vec<u32>, usize)> {
        let hv = self.value_heads;
        let cols = shape.get(1).copied().unwrap_or(1);
        match (rule, view) {
            (Rule::QkvValueRows, ir::View::Rows { start, end }) => {
                Some((permute::restrict(&self.channels()?, start, end)?, cols))
            }
            (Rule::QkvValueRows, ir::View::Whole) => Some((self.channels()?, cols)),
            (Rule::ValueRows, ir::View::Whole) => {
                let rows = shape.first().copied()?;
                rows.is_multiple_of(hv).then(|| permute::expand(&self.heads, rows / hv, 1)).flatten().map(|p| (p, cols))
            }
            (Rule::Decay, ir::View::Whole) => Some((self.heads.clone(), 1)),
            (Rule::Conv, ir::View::Whole) => Some((self.channels()?, cols)),
            (Rule::ValueColumns, ir::View::Whole) => {
                let rows = shape.first().copied()?;
                let blocks = (0..rows).flat_map(|r| self.heads.iter().map(move |&h| (r * hv) as u32 + h)).collect();
                (cols == hv * self.value_dim).then_some((blocks, self.value_dim))
            }
            _ => None,
        }
    }

    /// How the authored graph's state of `kind` and `layer` holds transformers' state.
    fn of_state(&self, kind: ir::StateKind, authored: &Graph, layer: Option<usize>) -> Option<(Vec<u32>, usize)> {
        match kind {
            ir::StateKind::Conv => {
                let s = authored.states.iter().find(|s| s.kind == kind && s.layer == layer)?;
                let taps = *authored.ty(s.read).shape()?.last()?;
                Some((self.channels()?, taps))
            }
            ir::StateKind::Recurrent => Some((self.heads.clone(), self.key_dim * self.value_dim)),
            _ => None,
        }
    }
}
