//! `stepcheck prove`: the proof that a model's program computes what its step graph computes, for
//! every checkpoint and every step, printed per output with the lemmas it used; with `--against`,
//! first that transformers' own step computes what the step graph computes, and with
//! `--against-llama-graph` that llama.cpp's own step does; `--json` prints the same as one JSON
//! object.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant;

use serde_json::{Value, json};

use super::CliError;
use super::against::{Against, against, against_llama};
use super::args::ProveArgs;
use super::plural::plural;
use crate::engine::{lower::lower_graph, shim::EngineShim};
use crate::model::author::decode_step;
use crate::model::spec::ModelSpec;
use crate::prove::{Lemma, ProofVerdict, prove};

/// Authors, fuses and lowers the model, then proves the program (and, with `--against`, first
/// transformers' step against the authored graph); exit 0 when every link is proved, 1 when one is
/// refuted or inconclusive (or the lowering refuses, or transformers' graph cannot be followed).
///
/// `--json` prints one object: `model`, `layers`, `numerics` and `verdict` (`proved`, `refuted`,
/// `inconclusive` or `refused`), then what the text carries for that verdict: `proof` (each
/// output's stage, name, size and lemmas; the lemmas in all, the term nodes, the commands and the
/// roundings), `refutation` (the stage and output, why, the path to the difference, both sides,
/// the witness and the reads out of order), `why`, or `refusal` and `message`.
pub(crate) fn prove_cmd(a: ProveArgs) -> Result<ExitCode, CliError> {
    let mut spec = a.model.source()?.spec()?;
    if let Some(n) = a.layers {
        spec.layers = ModelSpec::every_nth_attention(n, a.interval);
    }
    let mut head = json!({ "model": spec.name, "layers": spec.layers.len(), "numerics": a.numerics.to_string() });
    let authored = decode_step(&spec)?;
    let mut links = vec![];
    if let Some(path) = &a.against {
        links.push(("transformers", "transformers' step", "ATen", against(path, &spec, &authored)?));
    }
    if let Some(path) = &a.against_llama_graph {
        links.push(("llama_cpp", "llama.cpp's step", "ggml", against_llama(path, &spec, &authored)?));
    }
    let links_proved = links.iter().all(|(.., l)| l.outcome.as_ref().is_ok_and(ProofVerdict::is_proved));
    for (key, title, kind, l) in &links {
        if a.json {
            head[*key] = link_json(l);
        } else {
            outln!("{title} ({} {kind} nodes, imported as {} ops)", l.nodes, l.ops);
            match &l.outcome {
                Ok(v) => outln!("{v}"),
                Err(why) => outln!("not imported: {why}"),
            }
        }
        errln!(
            "{} link: import {:.1} ms, proof {:.1} ms",
            key.replace('_', "."),
            l.import.as_secs_f64() * 1e3,
            l.proof.as_secs_f64() * 1e3
        );
    }
    let fused = EngineShim::default().prepare(&authored);
    let program = match lower_graph(&fused, a.numerics) {
        Ok(p) => p,
        Err(e) if a.json => {
            head["verdict"] = "refused".into();
            head["refusal"] = e.name().into();
            head["message"] = e.to_string().into();
            outln!("{head}");
            return Ok(ExitCode::from(1));
        }
        Err(e) => {
            outln!("refused: {} — {e}", e.name());
            return Ok(ExitCode::from(1));
        }
    };
    let start = Instant::now();
    let verdict = prove(&authored, &fused, &program);
    let took = start.elapsed();
    if a.json {
        head["verdict"] = verdict.word().into();
        if let (Value::Object(head), Value::Object(more)) = (&mut head, verdict_json(&verdict)) {
            head.extend(more);
        }
        outln!("{head}");
    } else {
        outln!("{} ({}, numerics {})", spec.name, plural(spec.layers.len(), "layer"), a.numerics);
        outln!("{verdict}");
    }
    errln!("proof took {:.1} ms", took.as_secs_f64() * 1e3);
    Ok(if verdict.is_proved() && links_proved { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// A link from another framework's step as a JSON object: its verdict word and fields, or `not imported` and why,
/// with the import's and the proof's milliseconds.
fn link_json(l: &Against) -> Value {
    let mut out = match &l.outcome {
        Ok(v) => {
            let mut o = verdict_json(v);
            o["verdict"] = v.word().into();
            o
        }
        Err(why) => json!({ "verdict": "not imported", "why": why }),
    };
    out["nodes"] = l.nodes.into();
    out["ops"] = l.ops.into();
    out["import_ms"] = (l.import.as_secs_f64() * 1e3).into();
    out["proof_ms"] = (l.proof.as_secs_f64() * 1e3).into();
    out
}

/// What the verdict's text carries, as the fields of a JSON object.
fn verdict_json(verdict: &ProofVerdict) -> Value {
    let lemmas = |l: &BTreeMap<Lemma, usize>| -> Value { l.iter().map(|(l, n)| (l.to_string(), json!(n))).collect() };
    match verdict {
        ProofVerdict::Proved(p) => {
            let outputs: Vec<Value> = (p.outputs.iter())
                .map(|o| json!({ "stage": o.stage.to_string(), "output": o.output, "size": o.size, "lemmas": lemmas(&o.lemmas) }))
                .collect();
            let roundings: Vec<Value> = (p.roundings.iter())
                .map(|((place, storage), n)| json!({ "place": place.name(), "storage": storage, "count": n }))
                .collect();
            json!({ "proof": {
                "outputs": outputs,
                "lemmas": lemmas(&p.lemmas),
                "nodes": p.nodes,
                "commands": p.commands,
                "roundings": roundings,
            }})
        }
        ProofVerdict::Refuted(r) => json!({ "refutation": {
            "stage": r.stage.to_string(),
            "output": r.output,
            "why": r.why,
            "path": r.path,
            "graph": r.left,
            "program": r.right,
            "witness": r.witness,
            "out_of_order": r.order,
        }}),
        ProofVerdict::Inconclusive { why } => json!({ "why": why }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prove::{Link, Refutation};

    #[test]
    fn a_refutation_and_a_reason_keep_in_json_what_their_text_says() {
        let r = Refutation {
            stage: Link::FusedProgram,
            output: "logits".into(),
            why: "another tensor".into(),
            left: "blk.0.ffn_up".into(),
            right: "blk.0.ffn_gate".into(),
            path: vec!["matvec".into()],
            witness: Some("logits[3]: 1 against 2".into()),
            order: vec![],
        };
        let v = verdict_json(&ProofVerdict::Refuted(Box::new(r)));
        let want = json!({ "refutation": {
            "stage": "fused ≡ program", "output": "logits", "why": "another tensor", "path": ["matvec"],
            "graph": "blk.0.ffn_up", "program": "blk.0.ffn_gate", "witness": "logits[3]: 1 against 2",
            "out_of_order": [],
        }});
        assert_eq!(v, want);
        let v = verdict_json(&ProofVerdict::Inconclusive { why: "the node limit".into() });
        assert_eq!(v, json!({ "why": "the node limit" }));
    }
}
