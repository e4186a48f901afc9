//! The llama.cpp link: llama.cpp's own compute graph for the decode step, recorded through its
//! eval callback and imported into the IR (`ggml::import`), proved to compute what the authored
//! graph computes — the first engine outside this project checked by the prover.
//!
//! Both graphs read the same GGUF leaves by their names (llama.cpp's file is the authored graph's
//! checkpoint), so the link's convention is the identity; its states are the authored graph's
//! after the importer's layout maps (llama.cpp's conv state is the window's newest `K−1` columns,
//! its delta state each head transposed, its KV cells the positions). The proof is the source
//! link's ([`super::source`]) over reals: the normal forms of the logits and of every state at the
//! end of the step are equal, by the same induction over steps.
//!
//! **Where llama.cpp rounds.** llama.cpp's graph stores its KV cache in the cache's type (an F16
//! cache rounds every key and value it writes) and, for quantized weights, rounds each matrix
//! product's column to the weights' dot type (`q8_0`, `q8_K`) before the dot products. The IR's
//! values carry neither; the importer names each such place with its node, and the proof states
//! them as the numerics llama.cpp runs at (`act=q8_0 kv=f16 state=f32`) rather than failing: the
//! equality is of the real-valued functions, and how far the roundings move llama.cpp's values is
//! the numeric check's.

use formats::convention::{Convention, Equation, Rule};
use ir::Graph;

use super::source::{Side, prove_link};
use super::{Link, ProofVerdict};

/// Proves that `imported` (llama.cpp's step, its ops labelled by `labels`, one per op) computes
/// what `authored` computes; `roundings` are the places the importer found llama.cpp rounding
/// (`kv=f16 (node …)`, `act=q8_0 (node …)`).
pub fn prove_engine(imported: &Graph, labels: &[String], authored: &Graph, roundings: &[String]) -> ProofVerdict {
    let mut names: Vec<&str> =
        authored.consts.iter().chain(&imported.consts).map(|c| c.binding.tensor.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let identity = Convention {
        equations: names
            .into_iter()
            .map(|n| Equation { gguf: n.to_string(), source: n.to_string(), rule: Rule::Copy })
            .collect(),
        tiling_moves: false,
        delta_heads: [0; 4],
        aliases: vec![],
        rope_theta: 0.0,
    };
    let side = Side {
        link: Link::EngineAuthored,
        name: "llama.cpp",
        at_f32: "every scalar constant of both graphs (an eps, a scale) is read at f32: llama.cpp's are f32 op params \
                 and f32 constants of its kernels (the delta rule's 1/√S_v)",
    };
    let numerics = numerics(roundings);
    let mut stated = vec![];
    if !roundings.is_empty() {
        stated.push(format!(
            "llama.cpp runs at numerics {numerics}: it rounds at {} places the real-valued proof does not see ({}{})",
            roundings.len(),
            roundings.iter().take(3).cloned().collect::<Vec<_>>().join(", "),
            if roundings.len() > 3 { ", …" } else { "" }
        ));
    }
    match prove_link(&side, imported, labels, authored, &identity, stated) {
        ProofVerdict::Proved(mut p) => {
            p.numerics = numerics;
            ProofVerdict::Proved(p)
        }
        other => other,
    }
}

/// The numerics the roundings name: the type products round their column to, the KV cache's, the
/// type a fused attention sums its values in (when it does not in f32), the state's (llama.cpp's
/// recurrent states are f32).
pub fn numerics(roundings: &[String]) -> String {
    let of = |key: &str| {
        roundings
            .iter()
            .find_map(|r| r.strip_prefix(key).and_then(|t| t.split(' ').next()))
            .unwrap_or("f32")
            .to_string()
    };
    let attn = roundings.iter().any(|r| r.starts_with("attn=")).then(|| format!(" attn={}", of("attn=")));
    format!("act={} kv={}{} state=f32", of("act="), of("kv="), attn.unwrap_or_default())
}
