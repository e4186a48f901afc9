//! The transformers link: transformers' own decode step, imported into the IR (`aten::import`),
//! proved equal to the authored graph for every checkpoint and every step.
//!
//! The two graphs read different checkpoints: the imported one the HF tensors, the authored one
//! the GGUF tensors the converter makes of them. The checkpoint convention
//! ([`formats::convention`]) states each GGUF tensor as an equation over the HF tensor it comes
//! from (`attn_norm = 1 + input_layernorm`, `ssm_a = −exp(A_log)`, the rest the same values); the
//! authored graph's constants are built as those terms over the HF leaves, so both graphs are terms
//! over one set of leaves, and the proof is the prover's: the same normal form, output by output.
//! The states are the same leaves on both sides (the import keeps transformers' layouts, which are
//! the authored graph's for these models), so equal outputs prove every step by induction.
//!
//! **Stated, not proved:** transformers' rotary frequencies are the archive's `inv_freq` buffer,
//! computed in f32 (`1/θ^(2i/d)`); the authored graph states the real `θ^(−2i/d)`. The link reads
//! an imported `rope_freqs` as `rope(θ)` of the convention's θ when every frequency is within
//! [`FREQ_ULPS`] f32 ulps of the real one, and says so in the proof with the largest distance
//! found; a frequency farther off keeps its `rope_freqs`, and the proof refutes it.
//!
//! **Not yet:** a model whose value heads the converter tiles (several key heads, each shared by
//! several value heads) needs the head permutation as an equation and its lemmas through the
//! delta rule, the conv and the projections; such a model is inconclusive, by name.

use std::cell::OnceCell;

use formats::convention::{Convention, Rule};
use ir::{Binding, Graph, OpKind};

use super::term::{Dag, Real, Sym};
use super::{Link, OutputProof, Proof, ProofVerdict, Prover, graph_terms, missing, state_name};

/// The most f32 ulps a transformers rotary frequency may be from the real `θ^(−2i/d)`:
/// transformers computes it in f32 (`base ** (arange / d)`, then its reciprocal), and the
/// committed exports are within 4.
pub const FREQ_ULPS: f64 = 8.0;

/// Proves that `imported` (transformers' step, its ops labelled by `labels`, one per op) computes
/// what `authored` computes, through `convention`.
pub fn prove_source(imported: &Graph, labels: &[String], authored: &Graph, convention: &Convention) -> ProofVerdict {
    if convention.tiling_moves {
        return ProofVerdict::Inconclusive {
            why: format!(
                "{}: the converter tiles this model's value heads (several key heads, each shared by several value \
                 heads), and the head permutation is not yet an equation of the prover",
                Link::SourceAuthored
            ),
        };
    }
    let (imported, mut stated) = rope_by_theta(imported, convention.rope_theta);
    let (mut imported, authored) = (at_f32(&imported), at_f32(authored));
    for c in &mut imported.consts {
        c.binding.tensor = convention.resolve(&c.binding.tensor).to_string();
    }
    let authored = &authored;
    stated.push(
        "every scalar constant of both graphs (an eps, a scale, an offset) is read at f32, the precision both compute in: \
         transformers multiplies an f32 tensor by a Python float rounded to f32"
            .into(),
    );
    let mut prover = Prover {
        dag: Dag::default(),
        outputs: vec![],
        graphs: [&imported, &imported],
        envs: OnceCell::new(),
        reads: vec![],
    };
    for c in &imported.consts {
        if let Some(&[rows, _, ..]) = imported.ty(c.tensor).shape() {
            prover.dag.rows.insert(c.binding.tensor.clone(), rows);
        }
    }
    let hf = graph_terms::graph_terms(&mut prover.dag, &imported);
    let hf = match hf {
        Ok(t) => t,
        Err(e) => return ProofVerdict::Inconclusive { why: format!("the imported graph: {e}") },
    };
    let gguf = graph_terms::graph_terms_with(&mut prover.dag, authored, &mut |dag, b| {
        let eq = convention.of(&b.tensor).ok_or_else(|| format!("{}: no equation of the convention", b.tensor))?;
        let leaf = dag.leaf(Sym::Weight(Binding { tensor: eq.source.clone(), view: b.view }));
        Ok(match eq.rule {
            Rule::Norm => dag.mk(Sym::Offset(Real::new(1.0)), &[leaf]),
            Rule::Decay => {
                let e = dag.mk(Sym::Act(ir::Act::Exp), &[leaf]);
                dag.mk(Sym::Scale(Real::new(-1.0)), &[e])
            }
            Rule::Copy | Rule::Conv | Rule::QkvValueRows | Rule::ValueRows | Rule::ValueColumns => leaf,
        })
    });
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
        let verdict = prover.equal(Link::SourceAuthored, output, a, b)?;
        let ProofVerdict::Refuted(mut r) = verdict else { return Some(verdict) };
        let diff = super::first_difference(&prover.dag, a, b);
        let left = name_of(&prover.dag, diff.left, &hf, &label);
        let right = name_of(&prover.dag, diff.right, &gguf, &authored_label);
        if let Some(l) = left {
            r.why.push_str(&format!("; transformers: {l}"));
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
            return missing(Link::SourceAuthored, &name, "transformers' step has no such state");
        };
        if t.ty != s.ty {
            return missing(
                Link::SourceAuthored,
                &name,
                &format!("transformers' state is {}, the authored {}", t.ty, s.ty),
            );
        }
        if let Some(v) = compare(&mut prover, &name, t.out, s.out) {
            return v;
        }
    }
    if let Some(t) = hf.states.iter().find(|t| !gguf.states.iter().any(|s| s.kind == t.kind && s.layer == t.layer)) {
        return missing(Link::SourceAuthored, &state_name(t.kind, t.layer), "the authored graph has no such state");
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
