//! The blocks the engine has units for, as templates: each op as the engine reads it.

use super::pattern::Operand::{Global, Position, State, Token, Var, Weight};
use super::pattern::ViewPat::{Half, Rows, Whole};
use super::pattern::{Pat, Template};
use formats::names::{self, layer as n};
use ir::StateKind;

const fn pat(
    what: &'static str,
    kind: &'static str,
    ins: &'static [super::pattern::Operand],
    outs: &'static [&'static str],
) -> Pat {
    Pat { what, kind, ins, outs }
}

/// The embedding: a row of the table.
pub(crate) const EMBEDDING: Template = Template {
    pats: &[pat("the embedding", "embed", &[Global(&[names::TOKEN_EMBD]), Token], &["h"])],
    writes: &[],
    exports: &["h"],
};

/// A layer's pre-mixer norm.
pub(crate) const MIXER_NORM: Template = Template {
    pats: &[pat("the mixer norm", "rms_norm", &[Var("h"), Weight(n::ATTN_NORM, Whole)], &["x"])],
    writes: &[],
    exports: &["x"],
};

/// A Gated-DeltaNet block, from the norm's output to the output projection.
pub(crate) const DELTA_NET: Template = Template {
    pats: &[
        pat(
            "the query/key/value projection",
            "merged_qkv",
            &[Var("x"), Weight(n::ATTN_QKV, Rows(0)), Weight(n::ATTN_QKV, Rows(1)), Weight(n::ATTN_QKV, Rows(2))],
            &["q0", "k0", "v0"],
        ),
        pat("the output gate projection", "matvec", &[Weight(n::ATTN_GATE, Whole), Var("x")], &["z"]),
        pat("the beta projection", "matvec", &[Weight(n::SSM_BETA, Whole), Var("x")], &["b"]),
        pat("the alpha projection", "matvec", &[Weight(n::SSM_ALPHA, Whole), Var("x")], &["a"]),
        pat("the conv input", "concat", &[Var("q0"), Var("k0"), Var("v0")], &["qkv"]),
        pat("the conv window shift", "conv_shift", &[State(StateKind::Conv), Var("qkv")], &["window"]),
        pat("the conv", "conv_bias_silu", &[Var("window"), Weight(n::SSM_CONV1D, Whole)], &["c"]),
        pat("the query channels", "slice", &[Var("c")], &["qc"]),
        pat("the key channels", "slice", &[Var("c")], &["kc"]),
        pat("the value channels", "slice", &[Var("c")], &["vc"]),
        pat("the query heads", "reshape", &[Var("qc")], &["q"]),
        pat("the key heads", "reshape", &[Var("kc")], &["k"]),
        pat("the value heads", "reshape", &[Var("vc")], &["v"]),
        pat(
            "the gates",
            "gdn_gating",
            &[Var("b"), Var("a"), Weight(n::SSM_A, Whole), Weight(n::SSM_DT_BIAS, Whole)],
            &["beta", "g"],
        ),
        pat("the query l2 norm", "l2_norm", &[Var("q")], &["qn"]),
        pat("the query scale", "scale", &[Var("qn")], &["qs"]),
        pat("the key l2 norm", "l2_norm", &[Var("k")], &["kn"]),
        pat(
            "the delta rule",
            "delta_rule",
            &[State(StateKind::Recurrent), Var("qs"), Var("kn"), Var("v"), Var("g"), Var("beta")],
            &["state", "o"],
        ),
        pat("the gated norm's norm", "rms_norm", &[Var("o"), Weight(n::SSM_NORM, Whole)], &["on"]),
        pat("the output gate's heads", "reshape", &[Var("z")], &["zh"]),
        pat("the gated norm's gate", "glu_act_mul", &[Var("zh"), Var("on")], &["og"]),
        pat("the flattened output", "reshape", &[Var("og")], &["of"]),
        pat("the output projection", "matvec", &[Weight(n::SSM_OUT, Whole), Var("of")], &["y"]),
    ],
    writes: &[(StateKind::Conv, "window"), (StateKind::Recurrent, "state")],
    exports: &["y"],
};

// The ops of the attention blocks, from the norm's output to the output projection.
const Q_AND_GATE: Pat = pat(
    "the query and output gate projection",
    "merged_qkv",
    &[Var("x"), Weight(n::ATTN_Q, Half(0)), Weight(n::ATTN_Q, Half(1))],
    &["q0", "gate"],
);
const Q_PROJ: Pat = pat("the query projection", "matvec", &[Weight(n::ATTN_Q, Whole), Var("x")], &["q0"]);
const K_PROJ: Pat = pat("the key projection", "matvec", &[Weight(n::ATTN_K, Whole), Var("x")], &["k0"]);
const V_PROJ: Pat = pat("the value projection", "matvec", &[Weight(n::ATTN_V, Whole), Var("x")], &["v0"]);
const Q_HEADS: Pat = pat("the query heads", "reshape", &[Var("q0")], &["q"]);
const K_HEADS: Pat = pat("the key heads", "reshape", &[Var("k0")], &["k"]);
const V_HEADS: Pat = pat("the value heads", "reshape", &[Var("v0")], &["v"]);
const Q_NORM: Pat = pat("the query norm", "rms_norm", &[Var("q"), Weight(n::ATTN_Q_NORM, Whole)], &["qn"]);
const K_NORM: Pat = pat("the key norm", "rms_norm", &[Var("k"), Weight(n::ATTN_K_NORM, Whole)], &["kn"]);
const Q_ROPE_NORMED: Pat = pat("the query RoPE", "rope", &[Var("qn"), Position], &["qr"]);
const K_ROPE_NORMED: Pat = pat("the key RoPE", "rope", &[Var("kn"), Position], &["kr"]);
const Q_ROPE: Pat = pat("the query RoPE", "rope", &[Var("q"), Position], &["qr"]);
const K_ROPE: Pat = pat("the key RoPE", "rope", &[Var("k"), Position], &["kr"]);
const K_APPEND: Pat = pat("the key cache append", "kv_append", &[State(StateKind::KeyCache), Var("kr")], &["kcache"]);
const V_APPEND: Pat =
    pat("the value cache append", "kv_append", &[State(StateKind::ValueCache), Var("v")], &["vcache"]);
const ATTEND: Pat = pat("the attention", "attention", &[Var("qr"), Var("kcache"), Var("vcache")], &["o"]);
const FLAT: Pat = pat("the flattened output", "reshape", &[Var("o")], &["of"]);
const GATE: Pat = pat("the output gate", "glu_act_mul", &[Var("gate"), Var("of")], &["og"]);
const OUT_GATED: Pat = pat("the output projection", "matvec", &[Weight(n::ATTN_OUTPUT, Whole), Var("og")], &["y"]);
const OUT: Pat = pat("the output projection", "matvec", &[Weight(n::ATTN_OUTPUT, Whole), Var("of")], &["y"]);
const CACHE_WRITES: &[(StateKind, &str)] = &[(StateKind::KeyCache, "kcache"), (StateKind::ValueCache, "vcache")];

/// An attention block with a per-head sigmoid output gate (its queries and gate read as the two
/// halves of each head of `attn_q`) and per-head q/k norms: Qwen3.5's.
pub(crate) const ATTENTION_GATED_QK_NORM: Template = Template {
    pats: &[
        Q_AND_GATE,
        K_PROJ,
        V_PROJ,
        Q_HEADS,
        K_HEADS,
        V_HEADS,
        Q_NORM,
        K_NORM,
        Q_ROPE_NORMED,
        K_ROPE_NORMED,
        K_APPEND,
        V_APPEND,
        ATTEND,
        FLAT,
        GATE,
        OUT_GATED,
    ],
    writes: CACHE_WRITES,
    exports: &["y"],
};

/// An attention block with the output gate and without q/k norms.
pub(crate) const ATTENTION_GATED: Template = Template {
    pats: &[
        Q_AND_GATE, K_PROJ, V_PROJ, Q_HEADS, K_HEADS, V_HEADS, Q_ROPE, K_ROPE, K_APPEND, V_APPEND, ATTEND, FLAT, GATE,
        OUT_GATED,
    ],
    writes: CACHE_WRITES,
    exports: &["y"],
};

/// An attention block without the output gate, with per-head q/k norms: Qwen3's.
pub(crate) const ATTENTION_QK_NORM: Template = Template {
    pats: &[
        Q_PROJ,
        K_PROJ,
        V_PROJ,
        Q_HEADS,
        K_HEADS,
        V_HEADS,
        Q_NORM,
        K_NORM,
        Q_ROPE_NORMED,
        K_ROPE_NORMED,
        K_APPEND,
        V_APPEND,
        ATTEND,
        FLAT,
        OUT,
    ],
    writes: CACHE_WRITES,
    exports: &["y"],
};

/// An attention block without the output gate and without q/k norms: Llama's.
pub(crate) const ATTENTION_PLAIN: Template = Template {
    pats: &[Q_PROJ, K_PROJ, V_PROJ, Q_HEADS, K_HEADS, V_HEADS, Q_ROPE, K_ROPE, K_APPEND, V_APPEND, ATTEND, FLAT, OUT],
    writes: CACHE_WRITES,
    exports: &["y"],
};

/// The attention block of a gate and a q/k-norm switch.
pub fn attention(gated: bool, qk_norm: bool) -> &'static Template {
    match (gated, qk_norm) {
        (true, true) => &ATTENTION_GATED_QK_NORM,
        (true, false) => &ATTENTION_GATED,
        (false, true) => &ATTENTION_QK_NORM,
        (false, false) => &ATTENTION_PLAIN,
    }
}

/// A residual add: the residual plus what the block before it wrote.
pub(crate) const MIXER_ADD: Template = Template {
    pats: &[pat("the mixer's residual add", "add", &[Var("h"), Var("y")], &["h1"])],
    writes: &[],
    exports: &["h1"],
};

/// A layer's pre-FFN norm.
pub const FFN_NORM: Template = Template {
    pats: &[pat("the FFN norm", "rms_norm", &[Var("h"), Weight(n::FFN_NORM, Whole)], &["x"])],
    writes: &[],
    exports: &["x"],
};

/// The SwiGLU FFN.
pub const FFN: Template = Template {
    pats: &[
        pat("the FFN gate projection", "matvec", &[Weight(n::FFN_GATE, Whole), Var("x")], &["g"]),
        pat("the FFN up projection", "matvec", &[Weight(n::FFN_UP, Whole), Var("x")], &["u"]),
        pat("the SwiGLU product", "glu_act_mul", &[Var("g"), Var("u")], &["m"]),
        pat("the FFN down projection", "matvec", &[Weight(n::FFN_DOWN, Whole), Var("m")], &["y"]),
    ],
    writes: &[],
    exports: &["y"],
};

/// The FFN's residual add.
pub(crate) const FFN_ADD: Template = Template {
    pats: &[pat("the FFN's residual add", "add", &[Var("h"), Var("y")], &["h1"])],
    writes: &[],
    exports: &["h1"],
};

/// The step's advance.
pub(crate) const ADVANCE: Template = Template {
    pats: &[pat("the advance", "advance", &[Position], &["next"])],
    writes: &[(StateKind::Position, "next")],
    exports: &[],
};

/// The final norm.
pub(crate) const FINAL_NORM: Template = Template {
    pats: &[pat("the final norm", "rms_norm", &[Var("h"), Global(&[names::OUTPUT_NORM])], &["x"])],
    writes: &[],
    exports: &["x"],
};

/// The head: the output matrix, or the embedding table when tied.
pub const HEAD: Template = Template {
    pats: &[pat("the head", "matvec", &[Global(&[names::OUTPUT, names::TOKEN_EMBD]), Var("x")], &["logits"])],
    writes: &[],
    exports: &["logits"],
};

/// Every block template, for the tests of their tables.
#[cfg(test)]
const ALL: [(&str, &Template); 14] = [
    ("EMBEDDING", &EMBEDDING),
    ("MIXER_NORM", &MIXER_NORM),
    ("DELTA_NET", &DELTA_NET),
    ("ATTENTION_GATED_QK_NORM", &ATTENTION_GATED_QK_NORM),
    ("ATTENTION_GATED", &ATTENTION_GATED),
    ("ATTENTION_QK_NORM", &ATTENTION_QK_NORM),
    ("ATTENTION_PLAIN", &ATTENTION_PLAIN),
    ("MIXER_ADD", &MIXER_ADD),
    ("FFN_NORM", &FFN_NORM),
    ("FFN", &FFN),
    ("FFN_ADD", &FFN_ADD),
    ("ADVANCE", &ADVANCE),
    ("FINAL_NORM", &FINAL_NORM),
    ("HEAD", &HEAD),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The matcher binds a pattern's outputs without looking: each name a template writes must be
    /// new where it is written, never one an earlier pattern read or wrote.
    #[test]
    fn every_name_a_template_writes_is_new_where_it_is_written() {
        for (name, t) in ALL {
            let mut seen: Vec<&str> = vec![];
            for p in t.pats {
                for out in p.outs {
                    assert!(!seen.contains(out), "{name}: {} writes %{out}, already bound", p.what);
                }
                seen.extend(p.ins.iter().filter_map(|o| match o {
                    Var(v) => Some(*v),
                    _ => None,
                }));
                seen.extend(p.outs.iter().copied());
            }
        }
    }
}
