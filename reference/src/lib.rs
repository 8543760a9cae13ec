//! The oracle of the `kernels` crate: the same operations, computed naively in f64.
//!
//! Every function here is written straight from the formula: f64 arithmetic, two-pass
//! statistics, materialized intermediates, no `unsafe`, no SIMD, no cleverness. It is slow on
//! purpose and obviously correct, so that property tests (the `kernels` crate's, and yours for
//! your own kernels) can compare a fast f32 implementation with it under a stated error bound.
//!
//! Inputs are the f32 values a kernel sees; outputs are f64, so that the bound can be measured
//! against the exact result rather than against another rounding. Semantics, including the
//! policies for masked rows and non-finite values, are those documented in `kernels`.
//!
//! Half-precision storage: a kernel's data tensors may be f16 or bf16 ([`half::f16`],
//! [`half::bf16`]) as well as f32; the [`Element`] trait names the three. A kernel widens such
//! inputs to f32 exactly, computes in f32, and rounds each output once to its storage type
//! (to nearest, ties to even). The oracle works on the widened values ([`widen`]), and every
//! `check_*` function takes its data tensors in the storage type `E` (each documents which
//! arguments are `E` and which stay f32: masks, weights, γ, β, statistics). The bound for a
//! half output is the f32 bound plus one rounding to the output type: with `B` the f32 bound
//! at an element, the result `y` is accepted iff `E(ŷ − B) ≤ y ≤ E(ŷ + B)` (compared as
//! numbers, ±∞ included), where `E(·)` rounds the f32 end of the interval (the smallest f32
//! `≥ ŷ − B`, the largest `≤ ŷ + B`) to `E`. As the rounding is monotone, that is exactly "`y`
//! is the rounding to `E` of some f32 the f32 check accepts"; in particular a finite f32
//! result beyond the range of f16 (`|y| > 65504`) is accepted as ±∞. Bounds in ulps (exp,
//! sigmoid, swish) become the bracket of the f32 results `k` ulps either side, rounded to `E`;
//! exact matches (NaN rows, masked entries, results beyond the f32 range) are against the f32
//! value rounded to `E`. For f32 the checks are exactly the f32 contract.
//!
//! Each check has a twin in [`fraction`] that returns how close the result comes to the
//! bound (the worst error as a fraction of it: at most 1 exactly where the check passes), for
//! reports that show accuracy alike for every kernel.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod attention;
mod check;
mod element;
pub mod fraction;
mod gau;
mod gelu;
mod linear;
mod norm;
mod softmax;
mod ulp;

pub use attention::{attention, AttentionOptions, AttentionResult, AttentionShape, MaskShape};
pub use check::{check_activation, check_attention, check_exp, check_gau, check_softmax, Mismatch, U};
pub use element::{widen, Element};
pub use gau::{gau, Attention, GauParams, GauResult, GauShape, Normalizer, Rope, RopePairs, ScoreScale};
pub use gelu::{check_gelu, check_gelu_tanh, gelu, gelu_tanh, gelu_tanh_arg};
pub use half::{bf16, f16};
pub use linear::{check_linear, linear, Activation, LinearResult};
pub use norm::{
    add_layer_norm, add_rms_norm, batch_norm, batch_norm_train, check_batch_norm, check_batch_norm_train,
    check_layer_norm, check_rms_norm, layer_norm, layer_norm_row_bounds, residual, rms_norm, BatchNormTrainOutputs,
    BatchNormTrained, NormMismatch, Normalized, RmsNormalized,
};
pub use softmax::{log_softmax, scores, softmax, MaskedRows};
pub use ulp::{fma_f32, ulp_distance, ulp_error};

/// `eˣ` of each element, in f64.
pub fn exp(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| (v as f64).exp()).collect()
}

/// `σ(x) = 1/(1 + e⁻ˣ)` of each element, in f64.
pub fn sigmoid(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| 1.0 / (1.0 + (-(v as f64)).exp())).collect()
}

/// `swish(x) = x·σ(x)` of each element, in f64, with the limit `swish(−∞) = −0`.
pub fn swish(x: &[f32]) -> Vec<f64> {
    x.iter()
        .map(|&v| {
            if v == f32::NEG_INFINITY {
                -0.0
            } else {
                v as f64 / (1.0 + (-(v as f64)).exp())
            }
        })
        .collect()
}
