//! 6-layer stacks of each encoder block with random weights ([`Encoder`] in each [`Block`] form,
//! and [`GauAlpha`]) against their f64 stacks from `reference` ([`forward_f64`], [`gau_alpha_f64`]),
//! on padded batches of varied lengths, on every ISA.
//!
//! # The bound
//!
//! `max|Δ| ≤ L·c·u·s` over every output, with `L` the layers, `u = 2⁻²⁴`, `s = max|γ|` (a
//! layer norm's output is `γ·ẑ + β` with `ẑ` of unit variance: `s` scales its error), and
//! `c = λ·(Σ_linear ρ·K + (Dk + 4) + (3·Lk + 16) + 2·LN)`, derived from the kernels' bounds:
//!
//! - A linear layer's documented bound is `(K + 1)·u·A`, `A = Σ_k |x_k·w_k| + |b|`: every one
//!   of the `K + 1` roundings of the f32 sum at its worst. Rounding errors that are
//!   independent and unbiased add up as a random walk instead (Higham and Mary, "A new
//!   approach to probabilistic rounding error analysis", 2019): `λ·√(K + 1)·u·A` with
//!   probability at least `1 − 2(K + 1)·exp(−λ²/2)`; `λ = 8` makes that certain in practice.
//!   The layer norm that follows divides the error by the row's deviation `σ`; for weights
//!   uniform in `±1/√K` and inputs of unit variance, `A/σ = ρ·√K` with
//!   `ρ = E|x|·E|w| / √(E x²·E w²) = √(2/π)·(√3/2) = 0.69`. Per linear layer: `λ·ρ·K·u`
//!   relative to the layer norm's input, `ρ·K` in `c`.
//! - Attention's bound is `(Dk + 4)·u·A` for the scores (moving each weight by
//!   `exp(2·error)`), plus `(3·Lk + 16)·u` for the softmax and the weighted sum of `V`: the
//!   two further terms, at their worst (they are small beside the linear layers').
//! - Each layer norm: 2 (its own few ulps, relative to `|γ·ẑ|`).
//!
//! Errors carried in from the layer below enter the next layer norm scaled by `γ/σ ≈ 1`, so
//! the layers add up: the factor `L`. The f64 stack rounds its operands to f32 between
//! operations (see `forward_f64`), one `u` each, within the same terms.
//! The test prints the worst `max|Δ| / bound` per ISA.
//!
//! # The GAU-α bound
//!
//! The GAU-α stack (`x = RMSNorm(x + GAU(x))`) takes its unit's bound from
//! `reference::gau`, which follows the kernel's f32 algorithm step by step and bounds every
//! rounding at its worst: `B_l`, the largest bound of any element of layer `l`'s unit output
//! for that layer's input. The RMS norm divides an error in its input `h = x + GAU(x)` by the
//! row's RMS and multiplies it by the gain, and adds its own few ulps (4, relative to its
//! largest output `s`), so layer `l` adds `g·(B_l + u·max|h|)/rms_l + 4·u·s`, with `g = max|gain|`
//! and `rms_l` the smallest RMS of a row of `h`. Errors carried in from the layer below are
//! taken to pass through the layer scaled by about 1, as in the other stacks.

use examples::{
    forward_f64, gau_alpha_f64, Block, Encoder, EncoderConfig, GauAlpha, GauAlphaConfig, GauAlphaWeights, GauScratch,
    LayerWeights, Scratch,
};
use kernels::{available_isas, Kernels};

/// A small deterministic generator (SplitMix64): the test needs no `rand`.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `n` values uniform in `[lo, hi)`.
    fn uniform(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f32> {
        (0..n).map(|_| (lo + (hi - lo) * self.next()) as f32).collect()
    }
}

fn random_layer(rng: &mut Rng, c: &EncoderConfig) -> LayerWeights {
    let (h, f) = (c.hidden, c.intermediate);
    let mut linear = |out: usize, inp: usize| {
        let r = 1.0 / (inp as f64).sqrt();
        (rng.uniform(out * inp, -r, r), rng.uniform(out, -r, r))
    };
    let (qkv, qkv_bias) = linear(3 * h, h);
    let (out, out_bias) = linear(h, h);
    let (up, up_bias) = linear(f, h);
    let (down, down_bias) = linear(h, f);
    let mut norm = || (rng.uniform(h, 0.5, 1.5), rng.uniform(h, -0.5, 0.5));
    let (ln1, ln2) = (norm(), norm());
    LayerWeights {
        qkv,
        qkv_bias,
        out,
        out_bias,
        ln1,
        up,
        up_bias,
        down,
        down_bias,
        ln2,
    }
}

/// `c` of the module docs.
fn bound_constant(c: &EncoderConfig, max_len: usize, layers: usize) -> f64 {
    const LAMBDA: f64 = 8.0;
    const RHO: f64 = 0.69;
    let (h, f) = (c.hidden as f64, c.intermediate as f64);
    // QKV, output projection, FFN up (K = hidden), FFN down (K = intermediate).
    let linear = RHO * (3.0 * h + f);
    let mut attention = (c.head_dim() + 4) as f64 + (3 * max_len + 16) as f64;
    if c.block == Block::RealFormer {
        // The scores' errors add up from layer to layer: (L + 1)/2 on average.
        attention *= (layers + 1) as f64 / 2.0;
    }
    LAMBDA * (linear + attention + 2.0 * 2.0)
}

/// Runs the stack of `block` on every ISA against the f64 stack; returns the worst ratio.
fn stack_matches_f64(block: Block) {
    let config = EncoderConfig {
        block,
        hidden: 96,
        heads: 3,
        intermediate: 384,
        eps: 1e-12,
    };
    let n_layers = 6;
    let mut rng = Rng(0x5EED);
    let layers: Vec<_> = (0..n_layers).map(|_| random_layer(&mut rng, &config)).collect();
    let gamma = layers
        .iter()
        .flat_map(|w| w.ln1.0.iter().chain(&w.ln2.0))
        .fold(0.0f64, |m, &g| m.max(g.abs() as f64));
    // Sequence lengths per batch: one alone, then padded batches (the longest sets L).
    let batches: [&[usize]; 4] = [&[9], &[13, 1, 8], &[2, 17, 16, 5], &[33, 4]];
    let u = f32::EPSILON as f64 / 2.0; // 2⁻²⁴
    for isa in available_isas() {
        let encoder = Encoder::new(Kernels::for_isa(isa).unwrap(), config, &layers).unwrap();
        let mut scratch = Scratch::default();
        let mut worst: f64 = 0.0;
        let mut worst_abs: f64 = 0.0;
        for lengths in batches {
            let (b, l) = (lengths.len(), *lengths.iter().max().unwrap());
            let mut x = rng.uniform(b * l * config.hidden, -1.7, 1.7);
            let padding: Vec<f32> = (0..b * l)
                .map(|i| if i % l < lengths[i / l] { 0.0 } else { f32::NEG_INFINITY })
                .collect();
            let want = forward_f64(&config, &layers, &x, b, l, &padding);
            encoder.forward(&mut x, b, l, &padding, &mut scratch).unwrap();
            // Pre-LN never normalizes the residual stream: its own magnitude is the scale.
            let s = match block {
                Block::PreLn => want.iter().fold(gamma, |m, &v| m.max(v.abs())),
                _ => gamma,
            };
            let bound = n_layers as f64 * bound_constant(&config, l, n_layers) * u * s;
            // Every row, padded ones included: a padded query still attends to its sequence's
            // tokens, in both stacks.
            for (i, (&got, &want)) in x.iter().zip(&want).enumerate() {
                let err = (got as f64 - want).abs();
                assert!(
                    err <= bound,
                    "{block:?}, {isa:?}, lengths {lengths:?}: output {i} is {got}, f64 {want}: |Δ| = {err:e} > {bound:e}"
                );
                worst = worst.max(err / bound);
                worst_abs = worst_abs.max(err);
            }
        }
        eprintln!("{block:?}, {isa:?}: worst max|Δ| {worst_abs:.3e}, worst |Δ|/bound {worst:.2e}");
    }
}

#[test]
fn post_ln_stack_matches_f64_on_every_isa() {
    stack_matches_f64(Block::PostLn);
}

#[test]
fn pre_ln_stack_matches_f64_on_every_isa() {
    stack_matches_f64(Block::PreLn);
}

#[test]
fn realformer_stack_matches_f64_on_every_isa() {
    stack_matches_f64(Block::RealFormer);
}

fn random_gau_layer(rng: &mut Rng, c: &GauAlphaConfig) -> GauAlphaWeights {
    let (d, e, s) = (c.hidden, c.expand, c.qk_dim);
    let (r_in, r_out) = (1.0 / (d as f64).sqrt(), 1.0 / (e as f64).sqrt());
    GauAlphaWeights {
        w_in: rng.uniform(d * (2 * e + s), -r_in, r_in),
        b_in: rng.uniform(2 * e + s, -r_in, r_in),
        qk_affine: [
            rng.uniform(s, 0.5, 1.5),
            rng.uniform(s, -0.5, 0.5),
            rng.uniform(s, 0.5, 1.5),
            rng.uniform(s, -0.5, 0.5),
        ],
        w_out: rng.uniform(e * d, -r_out, r_out),
        b_out: rng.uniform(d, -r_out, r_out),
        gain: rng.uniform(d, 0.5, 1.5),
    }
}

#[test]
fn gau_alpha_stack_matches_f64_on_every_isa() {
    let config = GauAlphaConfig {
        hidden: 64,
        expand: 128,
        qk_dim: 32,
        eps: 1e-12,
    };
    let mut rng = Rng(0x6A0A);
    let layers: Vec<_> = (0..6).map(|_| random_gau_layer(&mut rng, &config)).collect();
    let gain = layers
        .iter()
        .flat_map(|w| &w.gain)
        .fold(0.0f64, |m, &g| m.max(g.abs() as f64));
    let batches: [&[usize]; 4] = [&[9], &[13, 1, 8], &[2, 17, 16, 5], &[33, 4]];
    let u = f32::EPSILON as f64 / 2.0;
    let inputs: Vec<_> = batches
        .iter()
        .map(|lengths| {
            let (b, l) = (lengths.len(), *lengths.iter().max().unwrap());
            rng.uniform(b * l * config.hidden, -1.7, 1.7)
        })
        .collect();
    for isa in available_isas() {
        let stack = GauAlpha::new(Kernels::for_isa(isa).unwrap(), config, &layers).unwrap();
        let mut scratch = GauScratch::default();
        let (mut worst, mut worst_abs) = (0.0f64, 0.0f64);
        for (lengths, x) in batches.iter().zip(&inputs) {
            let (b, l) = (lengths.len(), *lengths.iter().max().unwrap());
            let (want, per_layer) = gau_alpha_f64(&config, &layers, x, b, l, lengths);
            let s = want.iter().fold(0.0f64, |m, &v| m.max(v.abs()));
            let bound: f64 = per_layer
                .iter()
                .map(|&(unit, rms, h_max)| gain * (unit + u * h_max) / rms + 4.0 * u * s)
                .sum();
            let mut got = x.clone();
            stack.forward(&mut got, b, l, lengths, &mut scratch).unwrap();
            for (i, (&got, &want)) in got.iter().zip(&want).enumerate() {
                let err = (got as f64 - want).abs();
                assert!(
                    err <= bound,
                    "GAU-α, {isa:?}, lengths {lengths:?}: output {i} is {got}, f64 {want}: |Δ| = {err:e} > {bound:e}"
                );
                worst = worst.max(err / bound);
                worst_abs = worst_abs.max(err);
            }
        }
        eprintln!("GauAlpha, {isa:?}: worst max|Δ| {worst_abs:.3e}, worst |Δ|/bound {worst:.2e}");
    }
}
