//! Reading a config by its family's row: the layers, the sizes, RoPE, the FFN, the window, and the
//! constructs its rules find.

use serde_json::Value;

use super::construct::{Construct, Part, RopeKind};
use super::families::{COMMON, FAMILIES, Family, FfnForm, Layers, Routing, Rule, Then, When, Window};
use super::fields::{Fields, Source, describe};
use super::{ConfigError, ConfigReading, MAX_LAYERS, MAX_SIZE, Unsupported};
use crate::author::rope::yarn_attention_factor;
use crate::spec::{
    self, AttentionSpec, Constructs, DeltaNetSpec, Experts, Ffn, LatentAttention, LayerRope, Mixer, ModelSpec,
    RopeScaling, SlidingWindow,
};
use ir::RopeStyle;

/// The names a size goes by across families, the usual one first.
const HIDDEN: &[&str] = &["hidden_size", "n_embd"];
const LAYER_COUNT: &[&str] = &["num_hidden_layers", "n_layer"];
const HEADS: &[&str] = &["num_attention_heads", "n_head"];
const KV_HEADS: &[&str] = &["num_key_value_heads", "num_kv_heads"];
// A mixture of experts without a dense FFN (Qwen3.5-MoE) sizes its experts only.
const INTERMEDIATE: &[&str] = &["intermediate_size", "n_inner", "ffn_hidden_size", "moe_intermediate_size"];
const EPS: &[&str] = &["rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_epsilon", "norm_eps"];
const EXPERTS: &[&str] = &["num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"];
const TOP_K: &[&str] = &["num_experts_per_tok", "moe_top_k", "num_experts_per_token"];

/// The mixer of a config's layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    DeltaNet,
    Attention { sliding: bool },
    Mamba,
    Mamba2,
}

pub fn read(text: &str, name: &str) -> Result<ConfigReading, ConfigError> {
    let root = parse(text)?;
    let root = Fields::object(&root, "", "(the config)")?;
    let model_type = root.required("model_type", Fields::str_of, "a string")?;
    let (family, src) = family_of(&root, model_type)?;
    read_family(family, &src, name)
}

pub fn family(text: &str) -> Result<&'static str, ConfigError> {
    let root = parse(text)?;
    let root = Fields::object(&root, "", "(the config)")?;
    let model_type = root.required("model_type", Fields::str_of, "a string")?;
    Ok(family_of(&root, model_type)?.0.model_type)
}

/// The JSON tree of a config, read as Python's `json` module reads it (transformers writes and
/// reads configs with it): besides JSON, the bare words `NaN`, `Infinity` and `-Infinity` are
/// numbers (e.g. `"time_step_limit": [0.0, Infinity]`). Each is held as a string marked by a
/// leading NUL ([`NON_FINITE`]) that [`Fields::number`] reads as the number; nothing else is
/// changed.
fn parse(text: &str) -> Result<Value, ConfigError> {
    let rewritten = python_json(text);
    serde_json::from_str(&rewritten).map_err(|e| ConfigError::Json(json_error(text, &e)))
}

/// The marked string each of Python's non-finite numbers is held as, and its value.
pub(crate) const NON_FINITE: [(&str, &str, f64); 3] = [
    ("-Infinity", "\\u0000-Infinity", f64::NEG_INFINITY),
    ("Infinity", "\\u0000Infinity", f64::INFINITY),
    ("NaN", "\\u0000NaN", f64::NAN),
];

/// `text` with every `NaN`, `Infinity` and `-Infinity` outside a string replaced by its marked
/// string; the text is borrowed when it has none.
fn python_json(text: &str) -> std::borrow::Cow<'_, str> {
    let bytes = text.as_bytes();
    let (mut out, mut copied, mut i, mut in_string) = (String::new(), 0, 0, false);
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match b {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
        } else if b == b'"' {
            in_string = true;
        } else if let Some((word, marked, _)) = NON_FINITE.iter().find(|(w, ..)| bytes[i..].starts_with(w.as_bytes())) {
            out.push_str(&text[copied..i]);
            out.push('"');
            out.push_str(marked);
            out.push('"');
            i += word.len();
            copied = i;
            continue;
        }
        i += 1;
    }
    if copied == 0 {
        return std::borrow::Cow::Borrowed(text);
    }
    out.push_str(&text[copied..]);
    std::borrow::Cow::Owned(out)
}

/// serde_json's error, with the text of the line it points at.
fn json_error(text: &str, e: &serde_json::Error) -> String {
    let line = text.lines().nth(e.line().saturating_sub(1)).unwrap_or_default().trim();
    let shown: String = line.chars().take(60).collect();
    if shown.is_empty() { e.to_string() } else { format!("{e} (the line reads `{shown}`)") }
}

/// The row of `model_type`, and the config it reads: the text config, inside its wrapper or bare.
fn family_of<'a>(root: &Fields<'a>, model_type: &str) -> Result<(&'static Family, Source<'a>), ConfigError> {
    for family in FAMILIES {
        if family.wrappers.contains(&model_type) {
            let inner = root.required("text_config", Some, "an object")?;
            let text = Fields::object(inner, "text_config.", "text_config")?;
            if let Some(inner_type) = text.optional("model_type", Fields::str_of, "a string")?
                && inner_type != family.model_type
            {
                return Err(ConfigError::UnsupportedFamily { model_type: inner_type.to_string() });
            }
            return Ok((family, Source { text, wrapper: Some(root.clone()) }));
        }
        if model_type == family.model_type {
            return Ok((family, Source { text: root.clone(), wrapper: None }));
        }
    }
    Err(ConfigError::UnsupportedFamily { model_type: model_type.to_string() })
}

fn read_family(family: &'static Family, src: &Source, name: &str) -> Result<ConfigReading, ConfigError> {
    let c = &src.text;
    let (mut kinds, layers_field) = layer_kinds(family.layers, c)?;
    let mut unsupported = Unsupporteds::default();
    for (kind, construct) in [(Kind::Mamba, Construct::MambaMixer), (Kind::Mamba2, Construct::Mamba2Mixer)] {
        if kinds.contains(&kind) {
            unsupported.add(construct, layers_field.clone(), &kinds);
        }
    }
    let mut fired = vec![];
    for rule in COMMON.iter().chain(family.rules) {
        if let Some(field) = holds(rule, c)? {
            match rule.then {
                Then::Unsupported(construct) => unsupported.add(construct, field, &kinds),
                then => fired.push((then, field)),
            }
        }
    }
    let window = window(family.window, c, &mut kinds)?;
    // Every layer is in the spec: a layer whose mixer a spec cannot state (Mamba) gets an
    // attention block standing in for it, so that its norms, FFN and residual adds are read and
    // judged like any other layer's; what the graph says of the stand-in itself is not the model's.
    let spec_layers: Vec<usize> = (0..kinds.len()).collect();
    let stand_in: Vec<usize> = (0..kinds.len()).filter(|&i| matches!(kinds[i], Kind::Mamba | Kind::Mamba2)).collect();
    let mut spec = sizes(family, src, &kinds, &spec_layers, name)?;
    let rope = rope(c, family)?;
    for (kind, field) in rope.unstated.iter().cloned() {
        unsupported.add(Construct::ScaledRope(kind), field, &kinds);
    }
    spec.attention.rope_theta = rope.full.theta;
    spec.constructs.rope_scaling = rope.full.scaling.clone();
    spec.constructs.sliding_rope = rope.sliding.clone();
    // transformers' int(head_dim · partial_rotary_factor): truncation, on a factor in [0, 1].
    spec.attention.rotary_dims = (spec.attention.head_dim as f64 * rope.partial_rotary_factor) as usize;
    let bias = match family.bias.key {
        Some(k) => c.bool(k)?.unwrap_or(family.bias.default),
        None => family.bias.default,
    };
    (spec.constructs.qkv_bias, spec.constructs.output_bias) = (bias, bias && family.bias.output);
    let (ffn, activation) = ffn(family.ffn, c)?;
    spec.constructs.ffn = ffn;
    if let Some(field) = activation {
        unsupported.add(Construct::Activation, field, &kinds);
    }
    for (then, field) in fired {
        apply(then, &field, c, &rope, &mut spec)?;
    }
    if let Some(experts) = &mut spec.constructs.experts {
        let expert_layer = expert_layers(c)?;
        experts.dense_layers =
            (spec_layers.iter().enumerate()).filter(|(_, l)| !expert_layer(**l)).map(|(i, _)| i).collect();
    }
    if let Some(size) = window {
        let sliding = (spec_layers.iter().enumerate())
            .filter(|(_, l)| kinds[**l] == Kind::Attention { sliding: true })
            .map(|(i, _)| i)
            .collect::<Vec<_>>();
        if !sliding.is_empty() {
            spec.constructs.sliding_window = Some(SlidingWindow { window: size, layers: sliding });
        }
    }
    spec.validate()?;
    Ok(ConfigReading { family: family.model_type, spec, layers: spec_layers, stand_in, unsupported: unsupported.0 })
}

/// The constructs a spec cannot state, each once, with the first layer it applies to.
#[derive(Default)]
struct Unsupporteds(Vec<Unsupported>);

impl Unsupporteds {
    fn add(&mut self, construct: Construct, field: String, kinds: &[Kind]) {
        if self.0.iter().any(|u| u.construct == construct) {
            return;
        }
        let first = |f: fn(&Kind) -> bool| kinds.iter().position(f).or(Some(0));
        let layer = match construct.part() {
            Part::Embedding | Part::Head => None,
            Part::Attention => first(|k| matches!(k, Kind::Attention { .. })),
            Part::Mixer => first(|k| matches!(k, Kind::Mamba | Kind::Mamba2)),
            Part::Norms | Part::ResidualAdd | Part::Ffn => Some(0),
        };
        self.0.push(Unsupported { construct, field, layer });
    }
}

/// The field a rule read when its condition holds on `c`.
fn holds(rule: &Rule, c: &Fields) -> Result<Option<String>, ConfigError> {
    let key = rule.when.field();
    let on = match rule.when {
        When::Always => true,
        When::Flag(k, default) => c.bool(k)?.unwrap_or(default),
        When::Positive(keys) => {
            for k in keys {
                if c.number(k)?.is_some_and(|n| n > 0.0) {
                    return Ok(Some(c.name(k)));
                }
            }
            false
        }
        When::Set(k, default) => {
            if c.holds(k) {
                c.get(k).is_some()
            } else {
                default
            }
        }
        When::NotOne(k) => c.number(k)?.is_some_and(|n| n != 1.0),
        When::Not(k, v) => c.str(k)? != Some(v),
    };
    Ok(on.then(|| c.name(key)))
}

/// Applies a rule's construct, read from `field`, to the spec.
fn apply(then: Then, field: &str, c: &Fields, rope: &Rope, spec: &mut ModelSpec) -> Result<(), ConfigError> {
    let key = field.rsplit('.').next().unwrap_or(field);
    let k = &mut spec.constructs;
    match then {
        Then::Experts => k.experts = Some(experts(c, spec.intermediate)?),
        Then::Routing(routing) => {
            if let Some(e) = &mut k.experts {
                route(routing, c, e)?;
            }
        }
        Then::LatentAttention => {
            let l = latent(c)?;
            // Latent attention's heads are its own: queries and keys of `nope + rope` dims, RoPE on
            // the last `rope`, scores scaled by 1/√(nope + rope), by YaRN's mscale² when it has one.
            let a = &mut spec.attention;
            (a.head_dim, a.rotary_dims, a.kv_heads) = (l.nope_dim + l.rope_dim, l.rope_dim, a.heads);
            let mut scale = 1.0 / (a.head_dim as f64).sqrt();
            if let (Some(RopeScaling::Yarn { factor, .. }), Some(all)) = (&rope.full.scaling, rope.mscale_all_dim) {
                let m = if *factor <= 1.0 { 1.0 } else { 0.1 * all * factor.ln() + 1.0 };
                scale *= m * m;
            }
            k.attention_scale = Some(scale);
            k.latent_attention = Some(l);
        }
        Then::Sinks => k.attention_sinks = true,
        Then::EmbeddingSqrtHidden => {
            let dtype = c.str_any(&["dtype", "torch_dtype"])?.map(|(_, d)| d);
            k.embedding_scale = Some(sqrt_in_dtype(spec.hidden, dtype));
        }
        Then::SlidingRope(default) => {
            if rope.sliding.is_none() {
                let theta = c.number("rope_local_base_freq")?.unwrap_or(default);
                k.sliding_rope = Some(LayerRope { theta, scaling: None });
            }
        }
        Then::EmbeddingByField => k.embedding_scale = c.number(key)?,
        Then::PostNorm(p) => k.post_norm = p,
        Then::ClampedSwiGlu => {
            let alpha = c.number("swiglu_alpha")?.unwrap_or(1.702);
            let limit = c.number("swiglu_limit")?.unwrap_or(7.0);
            k.ffn = Ffn::ClampedSwiGlu { alpha, limit };
        }
        Then::ScaleInvSqrt(default) => {
            let v = c.number("query_pre_attn_scalar")?.unwrap_or(default);
            if !(v > 0.0 && v.is_finite()) {
                return Err(bad_value(c.name("query_pre_attn_scalar"), "a positive number", v.to_string()));
            }
            k.attention_scale = Some(1.0 / v.sqrt());
        }
        Then::ScaleByField => k.attention_scale = c.number(key)?,
        Then::InterleavedRope => spec.attention.rope_style = RopeStyle::Interleaved,
        Then::NoRope => spec.attention.rotary_dims = 0,
        Then::Unsupported(_) => {}
    }
    Ok(())
}

/// The spec's sizes; its constructs are filled in after.
fn sizes(
    family: &Family,
    src: &Source,
    kinds: &[Kind],
    spec_layers: &[usize],
    name: &str,
) -> Result<ModelSpec, ConfigError> {
    let c = &src.text;
    let size = |key: &str| c.size(key, MAX_SIZE);
    let hidden = c.size_of_any(HIDDEN, MAX_SIZE)?;
    let intermediate = match (c.size_any(INTERMEDIATE, MAX_SIZE)?, family.ffn) {
        (Some(i), _) => i,
        // GPT-2's `n_inner: null` and Falcon's absent `ffn_hidden_size`: four times the width.
        (None, FfnForm::Plain { .. } | FfnForm::None) => 4 * hidden,
        (None, FfnForm::Gated { .. }) => c.size_of_any(INTERMEDIATE, MAX_SIZE)?,
    };
    let vocab = size("vocab_size")?;
    // A model without an attention layer (every mixer Mamba) needs no head count: its stand-in
    // blocks take one head of the whole width where the config gives none.
    let attends = kinds.iter().any(|k| matches!(k, Kind::Attention { .. } | Kind::DeltaNet));
    let heads = match c.size_any(HEADS, MAX_SIZE)? {
        Some(h) => h,
        None if !attends => 1,
        None => c.size_of_any(HEADS, MAX_SIZE)?,
    };
    let kv_heads = c.size_any(KV_HEADS, MAX_SIZE)?.unwrap_or(heads);
    let hybrid = family.layers == Layers::DeltaNetHybrid;
    let head_dim = match c.size_any(&["head_dim"], MAX_SIZE)? {
        Some(0) => return Err(bad_value(c.name("head_dim"), "a head size of at least 1", "0".into())),
        Some(d) => d,
        None if hybrid => size("head_dim")?,
        None => hidden.checked_div(heads).unwrap_or(0),
    };
    let delta_net = if hybrid {
        DeltaNetSpec {
            key_heads: size("linear_num_key_heads")?,
            value_heads: size("linear_num_value_heads")?,
            key_dim: size("linear_key_head_dim")?,
            value_dim: size("linear_value_head_dim")?,
            conv_kernel: size("linear_conv_kernel_dim")?,
        }
    } else {
        DeltaNetSpec { key_heads: 0, value_heads: 0, key_dim: 0, value_dim: 0, conv_kernel: 0 }
    };
    let wrapper_tie = match &src.wrapper {
        Some(w) => w.bool("tie_word_embeddings")?,
        None => None,
    };
    let tied_embeddings = match wrapper_tie {
        Some(t) => t,
        None => c.bool("tie_word_embeddings")?.unwrap_or(family.tied),
    };
    let layers =
        spec_layers.iter().map(|&l| if kinds[l] == Kind::DeltaNet { Mixer::DeltaNet } else { Mixer::Attention });
    Ok(ModelSpec {
        name: name.to_string(),
        hidden,
        intermediate,
        vocab,
        layers: layers.collect(),
        rms_eps: c.number_any(EPS)?.unwrap_or(family.eps),
        tied_embeddings,
        attention: AttentionSpec {
            heads,
            kv_heads,
            head_dim,
            rotary_dims: head_dim,
            rope_theta: 10_000.0,
            rope_style: RopeStyle::Neox,
            output_gate: family.attention.output_gate,
            qk_norm: family.attention.qk_norm,
        },
        delta_net,
        constructs: Constructs::default(),
    })
}

fn bad_value(field: String, expected: &str, found: String) -> ConfigError {
    ConfigError::BadValue { field, expected: expected.to_string(), found }
}

/// The mixer of each layer, and the field that named them: `layer_types` when present (legacy
/// `mamba`/`attention` read as transformers remaps them), else the family's default pattern.
fn layer_kinds(layers: Layers, c: &Fields) -> Result<(Vec<Kind>, String), ConfigError> {
    let count = c.size_of_any(LAYER_COUNT, MAX_LAYERS)?;
    if count == 0 {
        let key = LAYER_COUNT.iter().find(|k| c.get(k).is_some()).unwrap_or(&LAYER_COUNT[0]);
        return Err(bad_value(c.name(key), "at least 1 layer", "0".into()));
    }
    let Some(types) = c.optional("layer_types", Value::as_array, "an array of strings")? else {
        let kinds = match layers {
            Layers::DeltaNetHybrid => {
                let interval = c.size_or("full_attention_interval", MAX_LAYERS, 4)?;
                if interval == 0 {
                    return Err(bad_value(c.name("full_attention_interval"), "a positive integer", "0".into()));
                }
                let attention = |i: usize| (i + 1).is_multiple_of(interval);
                (0..count)
                    .map(|i| if attention(i) { Kind::Attention { sliding: false } } else { Kind::DeltaNet })
                    .collect()
            }
            Layers::MambaPeriod => {
                let period = c.size_or("attn_layer_period", MAX_LAYERS, 8)?;
                let offset = c.size_or("attn_layer_offset", MAX_LAYERS, 4)?;
                if period == 0 {
                    return Err(bad_value(c.name("attn_layer_period"), "a positive integer", "0".into()));
                }
                let attention = |i: usize| i % period == offset;
                (0..count)
                    .map(|i| if attention(i) { Kind::Attention { sliding: false } } else { Kind::Mamba })
                    .collect()
            }
            Layers::Attention => vec![Kind::Attention { sliding: false }; count],
            Layers::Mamba => vec![Kind::Mamba; count],
            Layers::Mamba2Hybrid | Layers::Mamba2 => vec![Kind::Mamba2; count],
        };
        return Ok((kinds, c.name("model_type")));
    };
    let field = c.name("layer_types");
    if types.len() != count {
        return Err(bad_value(
            field,
            &format!("{count} entries (num_hidden_layers)"),
            format!("{} entries", types.len()),
        ));
    }
    let (linear, expected) = match layers {
        Layers::DeltaNetHybrid => (Some(Kind::DeltaNet), "\"linear_attention\" or \"full_attention\""),
        Layers::Mamba | Layers::MambaPeriod => (Some(Kind::Mamba), "a mamba or attention layer type"),
        Layers::Mamba2Hybrid | Layers::Mamba2 => (Some(Kind::Mamba2), "a mamba or attention layer type"),
        Layers::Attention => (None, "\"full_attention\" or \"sliding_attention\""),
    };
    let kinds = types
        .iter()
        .enumerate()
        .map(|(i, t)| match (t.as_str(), linear) {
            (Some("linear_attention" | "mamba"), Some(k)) => Ok(k),
            (Some("full_attention" | "attention"), _) => Ok(Kind::Attention { sliding: false }),
            (Some("sliding_attention" | "chunked_attention"), _) if layers != Layers::DeltaNetHybrid => {
                Ok(Kind::Attention { sliding: true })
            }
            _ => Err(bad_value(format!("{field}[{i}]"), expected, describe(t))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((kinds, field))
}

/// Marks the sliding attention layers by the family's encoding (a `layer_types` list already has),
/// and returns the window; a window of at least `max_position_embeddings` positions is full
/// attention.
fn window(encoding: Window, c: &Fields, kinds: &mut [Kind]) -> Result<Option<usize>, ConfigError> {
    let field = c.size_any(&["sliding_window"], usize::MAX)?;
    let mut default = None;
    if c.get("layer_types").is_none() {
        let slides: Box<dyn Fn(usize) -> bool> = match encoding {
            Window::None => Box::new(|_| false),
            Window::Field => Box::new(move |_| field.is_some()),
            Window::UseFlag => {
                let on = c.bool("use_sliding_window")?.unwrap_or(false) && field.is_some();
                let from = c.size_or("max_window_layers", MAX_LAYERS, 28)?;
                Box::new(move |i| on && i >= from)
            }
            Window::Pattern { keys, every, default: size } => {
                let n = c.size_any(keys, MAX_LAYERS)?.unwrap_or(every);
                if n == 0 {
                    return Err(bad_value(
                        c.name(keys.first().unwrap_or(&"sliding_window_pattern")),
                        "a positive integer",
                        "0".into(),
                    ));
                }
                // An explicit null window is none; an absent one is the class default.
                let on = field.is_some() || !c.holds("sliding_window");
                default = Some(size);
                Box::new(move |i| on && (i + 1) % n != 0)
            }
        };
        for (i, k) in kinds.iter_mut().enumerate() {
            if let Kind::Attention { sliding } = k {
                *sliding = slides(i);
            }
        }
    } else if let Window::Pattern { default: size, .. } = encoding {
        default = Some(size);
    }
    if !kinds.contains(&Kind::Attention { sliding: true }) {
        return Ok(None);
    }
    let size = field.or(default).ok_or_else(|| ConfigError::Missing { field: c.name("sliding_window") })?;
    let context = c.size_any(&["max_position_embeddings", "n_positions"], usize::MAX)?;
    if context.is_some_and(|n| size >= n) {
        for k in kinds.iter_mut() {
            if let Kind::Attention { sliding } = k {
                *sliding = false;
            }
        }
        return Ok(None);
    }
    if size == 0 {
        return Err(bad_value(c.name("sliding_window"), "a positive integer", "0".into()));
    }
    Ok(Some(size))
}

/// The RoPE a config asks for.
struct Rope {
    partial_rotary_factor: f64,
    /// The attention layers' RoPE (the full-attention layers', when it differs by layer type).
    full: LayerRope,
    /// The sliding layers' RoPE, when the config gives one per layer type.
    sliding: Option<LayerRope>,
    /// The scalings a spec cannot state, with the field naming each.
    unstated: Vec<(RopeKind, String)>,
    /// YaRN's `mscale_all_dim`, which latent attention's score scale reads.
    mscale_all_dim: Option<f64>,
}

/// The RoPE parameters, with transformers' precedence: a non-null legacy `rope_scaling` replaces
/// `rope_parameters`; a value inside that object and one at the top level must agree; an object
/// keyed by layer type gives the full-attention layers' RoPE and the sliding layers'. Without
/// either object, the family's class default, whose values the top level's override.
fn rope(c: &Fields, family: &Family) -> Result<Rope, ConfigError> {
    let key = if c.get("rope_scaling").is_some() { "rope_scaling" } else { "rope_parameters" };
    let class_default: Option<Value> = family.attention.rope.and_then(|j| serde_json::from_str(j).ok());
    let (params, from_class) = match (c.get(key), &class_default) {
        (Some(v), _) => (Some(Fields::object(v, &format!("{}.", c.name(key)), &c.name(key))?), false),
        (None, Some(v)) => (Some(Fields::object(v, "", "(the class's RoPE)")?), true),
        (None, None) => (None, false),
    };
    let by_type = |k: &String| matches!(k.as_str(), "full_attention" | "linear_attention" | "sliding_attention");
    let (full, sliding) = match params {
        Some(p) if p.keys().next().is_some() && p.keys().all(by_type) && p.get("full_attention").is_some() => {
            let entry = |t: &str| -> Result<Option<Fields>, ConfigError> {
                match p.get(t) {
                    Some(v) => Fields::object(v, &p.name(&format!("{t}.")), &p.name(t)).map(Some),
                    None => Ok(None),
                }
            };
            (entry("full_attention")?, entry("sliding_attention")?)
        }
        p => (p, None),
    };
    let mut unstated = vec![];
    let theta = match (full.as_ref(), from_class) {
        (Some(p), true) => c.number("rope_theta")?.or(p.number("rope_theta")?),
        (p, false) => agreed(c, p, "rope_theta")?.map(|(_, t)| t),
        (None, true) => None,
    };
    let full_rope = layer_rope(c, full.as_ref(), theta.unwrap_or(10_000.0), &mut unstated)?;
    let sliding = match &sliding {
        Some(p) => Some(layer_rope(c, Some(p), p.number("rope_theta")?.unwrap_or(10_000.0), &mut unstated)?),
        None => None,
    };
    let (field, partial_rotary_factor) = match (full.as_ref(), from_class) {
        (p, false) => agreed(c, p, "partial_rotary_factor")?,
        (_, true) => c.number("partial_rotary_factor")?.map(|f| (c.name("partial_rotary_factor"), f)),
    }
    .unwrap_or((String::new(), family.attention.partial_rotary));
    if !(0.0..=1.0).contains(&partial_rotary_factor) {
        return Err(bad_value(field, "a fraction in [0, 1]", partial_rotary_factor.to_string()));
    }
    let mscale_all_dim = match full.as_ref() {
        Some(p) => p.number("mscale_all_dim")?.filter(|m| *m != 0.0),
        None => None,
    };
    Ok(Rope { partial_rotary_factor, full: full_rope, sliding, unstated, mscale_all_dim })
}

/// One kind of layer's RoPE: θ, and the scaling its `rope_type` (or legacy `type`) names in `p`:
/// plain for `default` and `mrope` (whose sections are plain RoPE for text-only positions),
/// linear and YaRN as a spec states them, others pushed to `unstated`.
fn layer_rope(
    c: &Fields,
    p: Option<&Fields>,
    theta: f64,
    unstated: &mut Vec<(RopeKind, String)>,
) -> Result<LayerRope, ConfigError> {
    if !(theta > 0.0 && theta.is_finite()) {
        return Err(bad_value(c.name("rope_theta"), "a positive number", theta.to_string()));
    }
    let Some(p) = p else { return Ok(LayerRope { theta, scaling: None }) };
    let (field, rope_type) = match p.str("rope_type")? {
        Some(t) => (p.name("rope_type"), t),
        None => (p.name("type"), p.str("type")?.unwrap_or("default")),
    };
    let factor = || p.number("factor")?.ok_or_else(|| ConfigError::Missing { field: p.name("factor") });
    let scaling = match rope_type {
        "default" | "mrope" => None,
        "linear" => Some(RopeScaling::Linear { factor: factor()? }),
        "yarn" => {
            let factor = factor()?;
            let attention_factor = match p.number("attention_factor")? {
                Some(a) => a,
                None => yarn_attention_factor(factor, p.number("mscale")?, p.number("mscale_all_dim")?),
            };
            let original = match p.size_any(&["original_max_position_embeddings"], MAX_SIZE)? {
                Some(n) => n,
                None => c.size_of_any(&["original_max_position_embeddings", "max_position_embeddings"], MAX_SIZE)?,
            };
            Some(RopeScaling::Yarn {
                factor,
                original_context: original,
                beta_fast: p.number("beta_fast")?.filter(|b| *b != 0.0).unwrap_or(32.0),
                beta_slow: p.number("beta_slow")?.filter(|b| *b != 0.0).unwrap_or(1.0),
                truncate: p.bool("truncate")?.unwrap_or(true),
                attention_factor,
            })
        }
        "dynamic" | "longrope" | "su" | "llama3" => {
            let kind = match rope_type {
                "dynamic" => RopeKind::Dynamic,
                "llama3" => RopeKind::Llama3,
                _ => RopeKind::LongRope,
            };
            unstated.push((kind, field));
            None
        }
        other => return Err(ConfigError::UnsupportedRope { field, rope_type: other.to_string() }),
    };
    Ok(LayerRope { theta, scaling })
}

/// Number `key` and the field it came from: the RoPE object's, else the top level's; when both
/// hold it they must agree.
fn agreed(c: &Fields, params: Option<&Fields>, key: &str) -> Result<Option<(String, f64)>, ConfigError> {
    let inner = match params {
        Some(p) => p.number(key)?.map(|v| (p.name(key), v)),
        None => None,
    };
    let top = c.number(key)?.map(|v| (c.name(key), v));
    match (inner, top) {
        (Some((field, a)), Some((top_field, b))) if a != b => {
            Err(bad_value(field, &format!("the value of `{top_field}` ({b})"), a.to_string()))
        }
        (inner, top) => Ok(inner.or(top)),
    }
}

/// The FFN of a family's form and its config's activation, and the activation's field when the
/// step graph has no op for it (the FFN is then a stand-in of the family's shape, never accepted:
/// the config is refused for the activation).
fn ffn(form: FfnForm, c: &Fields) -> Result<(Ffn, Option<String>), ConfigError> {
    let (keys, default, gated) = match form {
        FfnForm::Gated { keys, default } => (keys, default, true),
        FfnForm::Plain { keys, default } => (keys, default, false),
        FfnForm::None => return Ok((Ffn::SwiGlu, None)),
    };
    let (field, act) = c.str_any(keys)?.unwrap_or_else(|| (c.name(keys.first().unwrap_or(&"hidden_act")), default));
    let tanh_gelu = matches!(act, "gelu_pytorch_tanh" | "gelu_new" | "gelu_fast");
    let known = match (gated, act) {
        (true, "silu" | "swish") => Some(Ffn::SwiGlu),
        (true, _) if tanh_gelu => Some(Ffn::GeGlu),
        (false, _) if tanh_gelu => Some(Ffn::GeluMlp { tanh: true }),
        (false, "gelu") => Some(Ffn::GeluMlp { tanh: false }),
        (false, "relu2") => Some(Ffn::Relu2Mlp),
        _ => None,
    };
    Ok(match known {
        Some(f) => (f, None),
        None if gated => (Ffn::SwiGlu, Some(field)),
        None => (Ffn::GeluMlp { tanh: false }, Some(field)),
    })
}

/// How a family's experts route, beyond a softmax router and a gated shared expert.
fn route(routing: Routing, c: &Fields, e: &mut Experts) -> Result<(), ConfigError> {
    let scale = || -> Result<Option<f64>, ConfigError> { Ok(c.number("routed_scaling_factor")?.filter(|&f| f != 1.0)) };
    match routing {
        Routing::TopKSoftmaxBiased => {
            (e.routing, e.router_bias, e.expert_bias) = (spec::Routing::TopKSoftmax, true, true);
        }
        Routing::SigmoidGroupLimited => {
            e.routing = spec::Routing::SigmoidGroupLimited {
                groups: c.size_or("n_group", MAX_SIZE, 8)?,
                keep_groups: c.size_or("topk_group", MAX_SIZE, 4)?,
            };
            (e.shared_gate, e.weight_scale) = (false, scale()?);
        }
        Routing::SoftmaxUngatedShared => (e.shared_gate, e.weight_scale) = (false, scale()?),
    }
    Ok(())
}

/// Which of a config's layers hold the experts: all but DeepSeek's first `first_k_dense_replace`,
/// Qwen-MoE's `mlp_only_layers` and those off its `decoder_sparse_step`, and Jamba's off its
/// `expert_layer_period` from `expert_layer_offset`.
fn expert_layers(c: &Fields) -> Result<impl Fn(usize) -> bool + use<>, ConfigError> {
    let dense_first = c.size_or("first_k_dense_replace", MAX_LAYERS, 0)?;
    let only_mlp: Vec<usize> = match c.optional("mlp_only_layers", Value::as_array, "an array of layer indexes")? {
        Some(a) => a.iter().filter_map(Value::as_u64).map(|l| l as usize).collect(),
        None => vec![],
    };
    let step = c.size_or("decoder_sparse_step", MAX_LAYERS, 1)?.max(1);
    let period = c.size_or("expert_layer_period", MAX_LAYERS, 1)?.max(1);
    let offset = c.size_or("expert_layer_offset", MAX_LAYERS, 0)?;
    Ok(move |l: usize| {
        l >= dense_first && !only_mlp.contains(&l) && (l + 1).is_multiple_of(step) && l % period == offset % period
    })
}

/// √hidden as Gemma's embedding scales by it: computed in f32 and cast to the config's dtype.
fn sqrt_in_dtype(hidden: usize, dtype: Option<&str>) -> f64 {
    let scale = (hidden as f64).sqrt() as f32;
    match dtype {
        Some("bfloat16") => f64::from(half::bf16::from_f32(scale)),
        Some("float16") => f64::from(half::f16::from_f32(scale)),
        _ => f64::from(scale),
    }
}

/// A mixture of experts: the count under any of its names, top-k (default 1), the experts'
/// intermediate size (default the FFN's), `norm_topk_prob` (default true) and a shared expert of
/// `shared_expert_intermediate_size`, or `n_shared_experts` experts' width.
fn experts(c: &Fields, intermediate: usize) -> Result<Experts, ConfigError> {
    let count = c.size_any(EXPERTS, MAX_SIZE)?.unwrap_or(0);
    let top_k = c.size_any(TOP_K, MAX_SIZE)?.unwrap_or(1);
    let expert = c.size_any(&["moe_intermediate_size"], MAX_SIZE)?.unwrap_or(intermediate);
    let shared = match c.size_any(&["shared_expert_intermediate_size"], MAX_SIZE)? {
        Some(s) if s > 0 => Some(s),
        _ => c.size_any(&["n_shared_experts"], MAX_SIZE)?.filter(|&n| n > 0).map(|n| n * expert),
    };
    let mut experts = Experts::new(count, top_k, expert);
    experts.renormalize = c.bool("norm_topk_prob")?.unwrap_or(true);
    experts.shared_intermediate = shared;
    Ok(experts)
}

/// Latent attention: `q_lora_rank` (null: a direct query projection), `kv_lora_rank`, and the
/// per-head dims (DeepSeek's class defaults 128, 64, 128).
fn latent(c: &Fields) -> Result<LatentAttention, ConfigError> {
    Ok(LatentAttention {
        q_rank: c.size_any(&["q_lora_rank"], MAX_SIZE)?,
        kv_rank: c.size("kv_lora_rank", MAX_SIZE)?,
        nope_dim: c.size_or("qk_nope_head_dim", MAX_SIZE, 128)?,
        rope_dim: c.size_or("qk_rope_head_dim", MAX_SIZE, 64)?,
        value_dim: c.size_or("v_head_dim", MAX_SIZE, 128)?,
    })
}
