//! The checkpoint convention read two ways agrees: for every tensor of a model, every rule of the
//! one table (`formats::convention::Rule`, `model::hf::names`) read as the prover's term over the
//! HF tensor (`prove::source::equation_term`) evaluates, on random HF values, to what the loader
//! computes from them (`model::hf::transform::apply`), value heads tiled or not, whole and through
//! the views the authored graph reads.

use stepcheck::ir::View;
use stepcheck::model::hf::names::convention;
use stepcheck::model::hf::transform::apply;
use stepcheck::model::layout::layout;
use stepcheck::model::presets::tiny;
use stepcheck::prove::eval::{Env, Rng, eval};
use stepcheck::prove::source::{Tiling, equation_term};
use stepcheck::prove::term::Dag;

/// The term of `eq` through `view`, evaluated with the HF tensor holding `values`.
fn term_value(
    eq: &stepcheck::formats::convention::Equation,
    view: View,
    shape: &[usize],
    source: (&[usize], &[f64]),
    tiling: Option<&Tiling>,
) -> Vec<f64> {
    let mut dag = Dag::new();
    let id = equation_term(&mut dag, eq, view, shape, tiling).unwrap_or_else(|e| panic!("{}: {e}", eq.gguf));
    let mut env = Env::default();
    env.tensors.insert(eq.source.clone(), (source.0.to_vec(), source.1.to_vec()));
    eval(&dag, id, &env).and_then(|v| v.data().map(<[f64]>::to_vec)).unwrap_or_else(|e| panic!("{}: {e}", eq.gguf))
}

#[test]
fn every_rule_as_a_term_evaluates_to_what_the_loader_computes() {
    let mut checked = 0;
    for (key_heads, value_heads) in [(2, 4), (2, 6), (3, 6), (1, 4), (4, 4)] {
        let mut spec = tiny();
        spec.delta_net.key_heads = key_heads;
        spec.delta_net.value_heads = value_heads;
        spec.validate().expect("a valid spec");
        let conv = convention(&spec).expect("the convention");
        let tiling = Tiling::of(&conv);
        assert_eq!(tiling.is_some(), key_heads > 1 && key_heads != value_heads);
        let mut rng = Rng(key_heads as u64 * 31 + value_heads as u64);
        for t in layout(&spec) {
            let eq = conv.of(&t.name).expect("an equation per tensor");
            let source_shape = eq.rule.source_shape(&t.shape);
            let values = rng.fill(source_shape.iter().product());
            let f32s: Vec<f32> = values.iter().map(|&v| v as f32).collect();
            let values: Vec<f64> = f32s.iter().map(|&v| f64::from(v)).collect();
            let want: Vec<f64> = apply(eq.rule, f32s, &t.shape, &spec.delta_net).into_iter().map(f64::from).collect();
            let got = term_value(eq, View::Whole, &t.shape, (&source_shape, &values), tiling.as_ref());
            let close = |g: &[f64], w: &[f64]| {
                g.len() == w.len() && g.iter().zip(w).all(|(a, b)| (a - b).abs() <= 1e-6 * b.abs().max(1.0))
            };
            assert!(close(&got, &want), "{} ({:?}, {key_heads}/{value_heads} heads)", t.name, eq.rule);
            // The q, k and v rows of the merged projection, as the authored graph reads them.
            if t.shape.len() == 2 && t.name.ends_with("attn_qkv.weight") {
                let cols = t.shape[1];
                let qk = spec.delta_net.key_heads * spec.delta_net.key_dim;
                for (start, end) in [(0, qk), (qk, 2 * qk), (2 * qk, t.shape[0])] {
                    let view = View::Rows { start, end };
                    let got = term_value(eq, view, &[end - start, cols], (&source_shape, &values), tiling.as_ref());
                    assert!(close(&got, &want[start * cols..end * cols]), "{} rows {start}..{end}", t.name);
                }
            }
            checked += 1;
        }
    }
    assert!(checked > 100, "{checked}");
}
