//! Fused SIMD kernels for transformer layers, chosen at run time for the CPU.
//!
//! Every kernel is written once over a thin vector layer and compiled for AVX-512, AVX2+FMA,
//! NEON and portable scalar code; the best path the CPU supports is picked on first use
//! (override it with `KERNELS_ISA=scalar|avx2|avx512|neon`, or pick one per call site with
//! [`Kernels::for_isa`]). The API is safe: slices with explicit shapes, every shape and
//! parameter checked, an [`Error`] naming the argument otherwise.
//!
//! Every kernel is property-tested on every ISA against the f64 oracle of the `reference`
//! crate, under the error bound its documentation states.
//!
//! | kernel | formula | error bound (u = 2⁻²⁴) |
//! |---|---|---|
//! | [`exp()`] | `y = eˣ` | ≤ 1 ulp (exhaustively checked over all 2³² inputs) |
//! | [`sigmoid()`], [`swish()`] | `σ(x) = 1/(1 + e⁻ˣ)`, `swish(x) = x·σ(x)` | ≤ 3 ulp, `2⁻¹²⁶` absolute below it |
//! | [`softmax()`] | `y_j = exp(z_j − m)/Σ exp(z − m)`, `z = fl(scale·x + mask)` | `(24 + \|z_j − m\|)·u` relative, `+ 2⁻¹²⁶` |
//! | [`log_softmax()`] | `y_j = z_j − m − ln Σ exp(z − m)` | `(24 + \|z_j − m\| + \|ln d\| + \|y_j\|)·u` absolute |
//! | [`layer_norm()`] | `y = (x − μ)·rstd·γ + β`, `rstd = 1/√(σ² + ε)`; statistics in one read (two passes per chunk in L1) | `\|γ\|·rstd·E_μ + \|y − β\|·(ε_r + 3u) + u·\|y\|`, see [`norm`]; measured a few `u` |
//! | [`add_layer_norm()`] | `h = α·x + (r + b)`, `y = LN(h)`: Post-LN, Pre-LN, DeepNorm; `h` out optional | that of `layer_norm` on the f32 `h` |
//! | [`rms_norm()`], [`add_rms_norm()`] | `y = h/√(mean(h²) + ε)·g` (`h` as above) | ≈ `9u` relative |
//! | [`batch_norm()`] | `y = x·s_c + b_c`, running statistics folded per channel | `u·(\|x − μ_c\|·\|s_c\| + \|b_c\| + \|y\|)` |
//! | [`batch_norm_train()`] | batch statistics per channel (one pass), running averages updated | that of `layer_norm` per channel |
//! | [`gelu()`], [`gelu_tanh()`] | `x·Φ(x)`, `x·σ(1.5957691·(x + 0.044715x³))` | ≤ 6 ulp; `(4 + 3\|v\|)` ulp, see [`gelu`](fn@gelu) |
//! | [`Kernels::linear`] | `Y = act(X·W + b) + R`, weights packed once (f32 or bf16) | `K·u·Σ\|x·w\|` plus the activation's, see [`linear`](mod@linear) |
//! | [`attention()`] | `O = softmax(scale·Q·Kᵀ + P + M)·V`, strided views, RealFormer scores | see [`attention`](mod@attention) |
//! | [`gau()`] | gated attention unit, swish gates, fused | see [`gau`](mod@gau) |
//!
//! Every kernel accepts its tensors as `f32`, [`half::f16`] or [`half::bf16`] (an [`Element`]):
//! widened exactly on load with the ISA's conversion instructions, computed in f32 exactly as
//! for f32 tensors, each output rounded once on store; the bound of a half-typed output is the
//! f32 bound above plus that one rounding. Masks, carried scores, norm parameters and
//! statistics and the GAU weights stay f32. See [`Element`].
//!
//! Rows are row-major with the last axis contiguous. Outputs never alias inputs except in the
//! `_inplace` variants. All kernels may be called from many threads at once, and each call
//! can itself be split over the threads of a rayon pool ([`Kernels::with_parallelism`]) with
//! results that are the same bits for every thread count.
//!
//! # One encoder layer
//!
//! A BERT-style Post-LN layer, `h = LN(x + Attn(x))`, `y = LN(h + FFN(h))`, with only this
//! crate: one fused QKV projection read in place by attention, which writes its output
//! straight into `[B, L, H·D]`; a key-padding mask; the FFN's GELU and the second residual
//! fused into the linear layers.
//!
//! ```
//! use kernels::*;
//!
//! let (b, l, heads, dim, ffn) = (2, 5, 4, 8, 64);
//! let hidden = heads * dim;
//! let k = Kernels::best();
//! let weights = |rows: usize, cols: usize, seed: usize| -> Vec<f32> {
//!     (0..rows * cols).map(|i| (((i * 7 + seed) % 13) as f32 - 6.0) * 0.02).collect()
//! };
//! let pack = |inp, out, seed| {
//!     let w = weights(out, inp, seed); // nn.Linear: [out, in]
//!     let layer = LinearWeights {
//!         weights: &w,
//!         layout: WeightLayout::OutIn,
//!         in_features: inp,
//!         out_features: out,
//!         bias: None,
//!     };
//!     k.pack_linear(&layer, WeightType::F32)
//! };
//! let (qkv_w, o_w) = (pack(hidden, 3 * hidden, 1)?, pack(hidden, hidden, 2)?);
//! let (up_w, down_w) = (pack(hidden, ffn, 3)?, pack(ffn, hidden, 4)?);
//! let ln = LayerNormOptions { eps: 1e-12, ..Default::default() };
//!
//! let x = weights(b * l, hidden, 5); // [B, L, hidden]
//! // The second sentence has 3 tokens and 2 of padding.
//! let padding: Vec<f32> = (0..b * l).map(|i| if i >= l + 3 { f32::NEG_INFINITY } else { 0.0 }).collect();
//!
//! let mut qkv = vec![0.0f32; b * l * 3 * hidden];
//! k.linear(&x, &qkv_w, &mut qkv, &LinearOptions::default())?;
//! let mut ctx = vec![0.0f32; b * l * hidden];
//! let block = |i| Layout::tokens_first(l, 3 * hidden, i * hidden, dim);
//! let options = AttentionOptions::default().mask(&padding, MaskShape::KeyPadding);
//! let args = AttentionArgs {
//!     shape: AttentionShape::self_attention(b, heads, l, dim),
//!     q: &qkv, q_layout: block(0),
//!     k: &qkv, k_layout: block(1),
//!     v: &qkv, v_layout: block(2),
//!     out: &mut ctx, out_layout: Layout::tokens_first(l, hidden, 0, dim),
//!     scores: None,
//!     options,
//! };
//! k.attention_args(args, &mut AttentionWorkspace::new())?;
//!
//! let mut attn = vec![0.0f32; b * l * hidden];
//! k.linear(&ctx, &o_w, &mut attn, &LinearOptions::default().residual(&x))?;
//! let mut h = vec![0.0f32; b * l * hidden];
//! k.layer_norm(&attn, &mut h, hidden, &ln)?; // h = LN(x + Attn(x))
//! let mut up = vec![0.0f32; b * l * ffn];
//! k.linear(&h, &up_w, &mut up, &LinearOptions::default().activation(Activation::Gelu))?;
//! let mut y = vec![0.0f32; b * l * hidden];
//! k.linear(&up, &down_w, &mut y, &LinearOptions::default().residual(&h))?;
//! k.layer_norm_inplace(&mut y, hidden, &ln)?; // y = LN(h + FFN(h))
//! assert!(y.iter().all(|v| v.is_finite()));
//! # Ok::<(), kernels::Error>(())
//! ```

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod aligned;
pub mod attention;
mod dispatch;
mod element;
mod elementwise;
mod error;
pub mod gau;
mod gemm;
mod isa;
pub mod linear;
mod math;
pub mod norm;
mod parallel;
mod parallelism;
mod simd;
pub mod softmax;
mod stores;

pub use attention::{
    attention, AdditiveMask, AttentionArgs, AttentionOptions, AttentionPlan, AttentionShape, AttentionWorkspace,
    CarriedScores, Layout, MaskShape,
};
pub use dispatch::Kernels;
pub use element::Element;
pub use elementwise::{
    exp, exp_inplace, gelu, gelu_inplace, gelu_tanh, gelu_tanh_inplace, narrow, sigmoid, sigmoid_inplace, swish,
    swish_inplace, widen,
};
pub use error::Error;
pub use gau::{
    gau, GauAttention, GauOptions, GauShape, GauWeights, GauWorkspace, Normalizer, PackedGauWeights, Rope, RopePairs,
    ScoreScale,
};
/// The `half` crate, whose [`f16`](half::f16) and [`bf16`](half::bf16) are the half storage
/// types every kernel accepts.
pub use half;
pub use isa::{available_isas, best_isa, Isa};
pub use linear::{
    linear, pack_linear, Activation, LinearOptions, LinearWeights, PackedLinear, WeightLayout, WeightType,
};
pub use norm::{
    add_layer_norm, add_layer_norm_inplace, add_layer_norm_with_stats, add_rms_norm, add_rms_norm_inplace, batch_norm,
    batch_norm_inplace, batch_norm_train, batch_norm_train_with_stats, layer_norm, layer_norm_inplace,
    layer_norm_with_stats, rms_norm, rms_norm_inplace, AddNorm, BatchNormOptions, LayerNormOptions, Residual,
    RmsNormOptions, RowStats,
};
pub use parallelism::Parallelism;
pub use softmax::{log_softmax, log_softmax_inplace, softmax, softmax_inplace, MaskedRows, SoftmaxOptions};
pub use stores::{last_level_cache, level2_cache, Caches, Stores};
