//! Times steps of the reference interpreter on Qwen3.5-0.8B with a random checkpoint (needs ~3 GB
//! of memory): `cargo run --release --example interp_08b [preset] [steps]`.

use std::time::Instant;

use stepcheck::interp::Runner;
use stepcheck::model::{author::decode_step, presets, random::random_checkpoint};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "qwen3.5-0.8b".into());
    let steps: u32 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(3);
    let spec = presets::preset(&name).ok_or_else(|| format!("no preset {name}"))?;
    let graph = decode_step(&spec)?;
    let start = Instant::now();
    let checkpoint = random_checkpoint(&spec, 0);
    println!("{name}: random checkpoint of {} values in {:.2?}", checkpoint.numel(), start.elapsed());
    let mut runner = Runner::new(&graph, &checkpoint)?;
    for (i, token) in (0..steps).map(|i| (i, 1 + 7 * i)) {
        let start = Instant::now();
        let logits = runner.step(token)?;
        let (best, _) =
            logits.iter().enumerate().fold((0, f64::NEG_INFINITY), |b, (j, &v)| if v > b.1 { (j, v) } else { b });
        println!("step {i} (token {token}): {:.2?}, argmax {best}, logits[0] {:.6}", start.elapsed(), logits[0]);
    }
    Ok(())
}
