//! all-MiniLM-L6-v2 on every ISA against float64 sentence-transformers
//! (`examples/data/minilm-golden.json`, made by `scripts/golden_embeddings.py`): the token ids
//! must be the same, and each embedding within `1 − cos ≤ 1e-9` and `max|Δ| ≤ 2e-6`. The whole
//! first four as one padded batch, split over 3 threads, give the sequential batch's bits.
//!
//! Needs the checkpoint: `KERNELS_MINILM_DIR=$(scripts/fetch-minilm.sh)`; without it the test
//! says why and passes.

use std::path::PathBuf;

use examples::{Model, Scratch};
use kernels::{available_isas, Kernels, Parallelism};
use serde_json::Value;

const MAX_ONE_MINUS_COS: f64 = 1e-9;
const MAX_ABS: f64 = 2e-6;

#[test]
fn minilm_matches_sentence_transformers_on_every_isa() {
    let dir = match std::env::var_os("KERNELS_MINILM_DIR").map(PathBuf::from) {
        Some(dir) if dir.join("model.safetensors").is_file() => dir,
        Some(dir) => {
            eprintln!(
                "skipped: KERNELS_MINILM_DIR={} holds no model.safetensors",
                dir.display()
            );
            return;
        }
        None => {
            eprintln!("skipped: KERNELS_MINILM_DIR is not set (see scripts/fetch-minilm.sh)");
            return;
        }
    };
    let golden_path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/minilm-golden.json");
    let golden: Value = serde_json::from_str(&std::fs::read_to_string(golden_path).unwrap()).unwrap();
    let sentences = golden["sentences"].as_array().unwrap();
    for isa in available_isas() {
        let model = Model::load(&dir, Kernels::for_isa(isa).unwrap()).unwrap();
        let mut scratch = Scratch::default();
        let (mut worst_cos, mut worst_abs) = (0.0f64, 0.0f64);
        for s in sentences {
            let text = s["text"].as_str().unwrap();
            let want_ids: Vec<u32> = s["tokens"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect();
            let want: Vec<f64> = s["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect();
            let ids = model.tokenize(text).unwrap();
            assert_eq!(ids, want_ids, "token ids of {text:?}");
            let got = model.embed_ids(&[ids], &mut scratch).unwrap().remove(0);
            assert_eq!(got.len(), want.len());
            let dot: f64 = got.iter().zip(&want).map(|(&g, &w)| g as f64 * w).sum();
            let norm = |v: &mut dyn Iterator<Item = f64>| v.map(|x| x * x).sum::<f64>().sqrt();
            let cos = dot / (norm(&mut got.iter().map(|&g| g as f64)) * norm(&mut want.iter().copied()));
            let abs = got
                .iter()
                .zip(&want)
                .map(|(&g, &w)| (g as f64 - w).abs())
                .fold(0.0, f64::max);
            assert!(
                1.0 - cos <= MAX_ONE_MINUS_COS && abs <= MAX_ABS,
                "{isa:?}, {text:?}: 1 − cos = {:.3e}, max|Δ| = {abs:.3e}",
                1.0 - cos
            );
            worst_cos = worst_cos.max(1.0 - cos);
            worst_abs = worst_abs.max(abs);
        }
        eprintln!(
            "{isa:?}: {} sentences, worst 1 − cos {worst_cos:.3e}, worst max|Δ| {worst_abs:.3e}",
            sentences.len()
        );
        let batch: Vec<Vec<u32>> = sentences[..4]
            .iter()
            .map(|s| model.tokenize(s["text"].as_str().unwrap()).unwrap())
            .collect();
        let threads = Kernels::for_isa(isa).unwrap().with_parallelism(Parallelism::Rayon(3));
        let split = Model::load(&dir, threads).unwrap();
        let bits = |v: Vec<Vec<f32>>| -> Vec<u32> { v.iter().flatten().map(|x| x.to_bits()).collect() };
        assert_eq!(
            bits(model.embed_ids(&batch, &mut scratch).unwrap()),
            bits(split.embed_ids(&batch, &mut Scratch::default()).unwrap()),
            "{isa:?}: the batch on 3 threads"
        );
    }
}
