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
//!
//! Every kernel accepts its tensors as `f32`, [`half::f16`] or [`half::bf16`] (an [`Element`]):
//! widened exactly on load with the ISA's conversion instructions, computed in f32 exactly as
//! for f32 tensors, each output rounded once on store; the bound of a half-typed output is the
//! f32 bound above plus that one rounding. Masks, carried scores, norm parameters and
//! statistics and the GAU weights stay f32. See [`Element`].
//!
//! Rows are row-major with the last axis contiguous. Outputs never alias inputs except in the
//! `_inplace` variants. All kernels may be called from many threads at once.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod attention;
mod dispatch;
mod element;
mod error;
pub mod gau;
mod gemm;
mod isa;
mod math;
pub mod norm;
mod simd;
pub mod softmax;
mod stores;

pub use attention::{AdditiveMask, AttentionOptions, AttentionShape, AttentionWorkspace, CarriedScores, MaskShape};
pub use dispatch::Kernels;
pub use element::Element;
pub use error::Error;
pub use gau::{
    GauAttention, GauOptions, GauShape, GauWeights, GauWorkspace, Normalizer, PackedGauWeights, Rope, ScoreScale,
};
/// The `half` crate, whose [`f16`](half::f16) and [`bf16`](half::bf16) are the half storage
/// types every kernel accepts.
pub use half;
pub use isa::{available_isas, best_isa, Isa};
pub use norm::{
    add_layer_norm, add_layer_norm_inplace, add_layer_norm_with_stats, add_rms_norm, add_rms_norm_inplace, batch_norm,
    batch_norm_inplace, batch_norm_train, batch_norm_train_with_stats, layer_norm, layer_norm_inplace,
    layer_norm_with_stats, rms_norm, rms_norm_inplace, BatchNormOptions, LayerNormOptions, Residual, RmsNormOptions,
    RowStats,
};
pub use softmax::{MaskedRows, SoftmaxOptions};
pub use stores::{last_level_cache, level2_cache, Stores};

/// Runs `f` with the kernels of [`Kernels::detected`].
fn with_detected<T>(f: impl FnOnce(Kernels) -> Result<T, Error>) -> Result<T, Error> {
    f(Kernels::detected()?)
}

/// Runs a row map of the table on `x` into `out`.
fn map<A, B>(f: unsafe fn(*const A, *mut B, usize), x: &[A], out: &mut [B]) -> Result<(), Error> {
    if out.len() != x.len() {
        return Err(Error::shape("out", format!("length {} (as x)", x.len()), out.len()));
    }
    // SAFETY: `f` comes from the table of a checked ISA; both slices hold `x.len()` elements.
    unsafe { f(x.as_ptr(), out.as_mut_ptr(), x.len()) };
    Ok(())
}

/// Runs a row map of the table on `x` in place.
fn map_inplace<E>(f: unsafe fn(*const E, *mut E, usize), x: &mut [E]) {
    // SAFETY: as `map`; source and destination are the same slice.
    unsafe { f(x.as_ptr(), x.as_mut_ptr(), x.len()) };
}

impl Kernels {
    /// `out[i] = eˣⁱ`. See [`exp()`].
    pub fn exp<E: Element>(&self, x: &[E], out: &mut [E]) -> Result<(), Error> {
        map(self.entries::<E>().exp, x, out)
    }

    /// `x[i] = eˣⁱ`, in place.
    pub fn exp_inplace<E: Element>(&self, x: &mut [E]) -> Result<(), Error> {
        map_inplace(self.entries::<E>().exp, x);
        Ok(())
    }

    /// `out[i] = σ(xᵢ)`. See [`sigmoid()`].
    pub fn sigmoid<E: Element>(&self, x: &[E], out: &mut [E]) -> Result<(), Error> {
        map(self.entries::<E>().sigmoid, x, out)
    }

    /// `x[i] = σ(xᵢ)`, in place.
    pub fn sigmoid_inplace<E: Element>(&self, x: &mut [E]) -> Result<(), Error> {
        map_inplace(self.entries::<E>().sigmoid, x);
        Ok(())
    }

    /// `out[i] = swish(xᵢ)`. See [`swish()`].
    pub fn swish<E: Element>(&self, x: &[E], out: &mut [E]) -> Result<(), Error> {
        map(self.entries::<E>().swish, x, out)
    }

    /// `x[i] = swish(xᵢ)`, in place.
    pub fn swish_inplace<E: Element>(&self, x: &mut [E]) -> Result<(), Error> {
        map_inplace(self.entries::<E>().swish, x);
        Ok(())
    }

    /// `out[i] = xᵢ` widened exactly to f32. See [`widen()`].
    pub fn widen<E: Element>(&self, x: &[E], out: &mut [f32]) -> Result<(), Error> {
        map(self.entries::<E>().widen, x, out)
    }

    /// `out[i] = xᵢ` rounded to `E`. See [`narrow()`].
    pub fn narrow<E: Element>(&self, x: &[f32], out: &mut [E]) -> Result<(), Error> {
        map(self.entries::<E>().narrow, x, out)
    }
}

/// `out[i] = xᵢ` as f32: the exact widening of a storage type (see [`Element`]), with the
/// ISA's conversion instructions. A copy for `E = f32`.
///
/// # Errors
/// [`Error::Shape`] naming `out` when its length differs from `x`'s.
pub fn widen<E: Element>(x: &[E], out: &mut [f32]) -> Result<(), Error> {
    with_detected(|k| k.widen(x, out))
}

/// `out[i] = xᵢ` rounded to nearest even in `E` (±∞ beyond its range, gradual underflow,
/// NaN stays NaN), with the ISA's conversion instructions. A copy for `E = f32`.
///
/// # Errors
/// [`Error::Shape`] naming `out` when its length differs from `x`'s.
pub fn narrow<E: Element>(x: &[f32], out: &mut [E]) -> Result<(), Error> {
    with_detected(|k| k.narrow(x, out))
}

/// `out[i] = eˣⁱ` for every element (of any [`Element`] type: a half-typed result is the f32
/// one rounded once).
///
/// Error ≤ 1 ulp against `exp` computed in f64 and rounded to f32, for normal and subnormal
/// results alike (checked over all 2³² inputs on every ISA). Overflow (`x > 88.72`) gives +∞,
/// underflow (`x < −103.97`) +0 after gradual underflow; `exp(NaN) = NaN`, `exp(±∞) = +∞, +0`.
///
/// # Errors
/// [`Error::Shape`] naming `out` when its length differs from `x`'s.
pub fn exp<E: Element>(x: &[E], out: &mut [E]) -> Result<(), Error> {
    with_detected(|k| k.exp(x, out))
}

/// [`exp()`] in place.
pub fn exp_inplace<E: Element>(x: &mut [E]) -> Result<(), Error> {
    with_detected(|k| k.exp_inplace(x))
}

/// `out[i] = σ(xᵢ) = 1/(1 + e^−xᵢ)` for every element.
///
/// Error ≤ 3 ulp (relative `≤ 6u`), and ≤ 2⁻¹²⁶ absolute where `σ(x) < 2⁻¹²⁶`
/// (`x < −87.3`, flushed towards 0); `σ(NaN) = NaN`, `σ(+∞) = 1`, `σ(−∞) = 0`.
///
/// # Errors
/// [`Error::Shape`] naming `out` when its length differs from `x`'s.
pub fn sigmoid<E: Element>(x: &[E], out: &mut [E]) -> Result<(), Error> {
    with_detected(|k| k.sigmoid(x, out))
}

/// [`sigmoid()`] in place.
pub fn sigmoid_inplace<E: Element>(x: &mut [E]) -> Result<(), Error> {
    with_detected(|k| k.sigmoid_inplace(x))
}

/// `out[i] = swish(xᵢ) = xᵢ·σ(xᵢ)` (also called SiLU) for every element.
///
/// Error ≤ 3 ulp, and ≤ 2⁻¹²⁶ absolute where `|swish(x)| < 2⁻¹²⁶`; `swish(NaN) = NaN`,
/// `swish(+∞) = +∞`, `swish(−∞) = −0` (the limit).
///
/// # Errors
/// [`Error::Shape`] naming `out` when its length differs from `x`'s.
pub fn swish<E: Element>(x: &[E], out: &mut [E]) -> Result<(), Error> {
    with_detected(|k| k.swish(x, out))
}

/// [`swish()`] in place.
pub fn swish_inplace<E: Element>(x: &mut [E]) -> Result<(), Error> {
    with_detected(|k| k.swish_inplace(x))
}

/// Softmax of each row of the row-major `[rows, n]` matrix `x`, into `out`.
///
/// `z_j = fl(scale·x_j + mask_j)` (an f32 score, rounded once), `y_j = exp(z_j − m) /
/// Σ_k exp(z_k − m)` with `m = max z`. A −∞ mask entry masks its position whatever `x` holds
/// there; a fully masked row follows [`SoftmaxOptions::masked_rows`] (0 by default); a NaN or
/// +∞ among the unmasked scores makes the row NaN. `n = 0` (with empty `x`) is a no-op.
///
/// Error bound (u = 2⁻²⁴, `ŷ` the exact softmax of the f32 scores `z`):
/// `|y_j − ŷ_j| ≤ (24 + |z_j − m|)·u·ŷ_j + 2⁻¹²⁶`. Details in the [module docs](mod@softmax).
///
/// # Errors
/// [`Error::Shape`] if `x.len()` is not a multiple of `n`, `out.len() ≠ x.len()`, or the mask
/// length is not `n`; [`Error::Param`] if `scale` is not finite.
///
/// ```
/// let x = [1.0, 2.0, 3.0, 0.0, 0.0, 0.0];
/// let mut y = [0.0; 6];
/// kernels::softmax(&x, &mut y, 3, &Default::default())?;
/// assert!((y[3] - 1.0 / 3.0).abs() < 1e-7);
/// # Ok::<(), kernels::Error>(())
/// ```
pub fn softmax<E: Element>(x: &[E], out: &mut [E], n: usize, opts: &SoftmaxOptions) -> Result<(), Error> {
    with_detected(|k| k.softmax(x, out, n, opts))
}

/// [`softmax()`] in place.
pub fn softmax_inplace<E: Element>(x: &mut [E], n: usize, opts: &SoftmaxOptions) -> Result<(), Error> {
    with_detected(|k| k.softmax_inplace(x, n, opts))
}

/// Log-softmax of each row of the row-major `[rows, n]` matrix `x`, into `out`.
///
/// `y_j = (z_j − m) − ln Σ_k exp(z_k − m)`, with `z`, the mask and the policies as in
/// [`softmax()`] (a fully masked row gives −∞ under [`MaskedRows::Zero`]).
///
/// Error bound (notation of [`softmax()`], `d̂` the exact sum):
/// `|y_j − ŷ_j| ≤ (24 + |z_j − m| + |ln d̂| + |ŷ_j|)·u`; infinite and NaN results match
/// exactly.
///
/// # Errors
/// As [`softmax()`].
pub fn log_softmax<E: Element>(x: &[E], out: &mut [E], n: usize, opts: &SoftmaxOptions) -> Result<(), Error> {
    with_detected(|k| k.log_softmax(x, out, n, opts))
}

/// [`log_softmax()`] in place.
pub fn log_softmax_inplace<E: Element>(x: &mut [E], n: usize, opts: &SoftmaxOptions) -> Result<(), Error> {
    with_detected(|k| k.log_softmax_inplace(x, n, opts))
}

/// Scaled-dot-product attention with an additive mask and RealFormer residual scores:
/// `S = scale·Q·Kᵀ + P`, `Z = S/(ℓ+1) + M` (−∞ where masked), `O = softmax(Z)·V`, with `S` (or
/// `Z`) written to `scores` when given. Allocates a fresh workspace; keep an
/// [`AttentionWorkspace`] and call [`Kernels::attention`] to avoid that.
///
/// Shapes, options, policies, storage types (`q`, `k`, `v`, `out` in any [`Element`]; the
/// mask and scores in f32) and the error bound are in the [module docs](mod@attention).
///
/// # Errors
/// [`Error::Shape`] naming the first argument whose length does not match `shape` (or a
/// `shape` field that is inconsistent); [`Error::Param`] for a non-finite scale or a key length
/// beyond `kv_len`.
///
/// ```
/// use kernels::{AttentionOptions, AttentionShape};
///
/// // One head, two queries, three keys of dimension 2; the second query sees only 2 keys.
/// let shape = AttentionShape::self_attention(1, 1, 2, 2);
/// let shape = AttentionShape { kv_len: 3, ..shape };
/// let (q, k, v) = (vec![1.0f32; 4], vec![0.5; 6], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
/// let mut out = vec![0.0; 4];
/// let mut scores = vec![0.0; 6]; // S, for the next layer
/// let opts = AttentionOptions { causal: true, ..Default::default() };
/// kernels::attention(&shape, &q, &k, &v, &mut out, Some(&mut scores), &opts)?;
/// // Bottom-right causal: query 0 sees keys 0..2, query 1 all 3, with equal scores.
/// assert!((out[0] - 2.0).abs() < 1e-6 && (out[2] - 3.0).abs() < 1e-6);
/// # Ok::<(), kernels::Error>(())
/// ```
pub fn attention<E: Element>(
    shape: &AttentionShape,
    q: &[E],
    k: &[E],
    v: &[E],
    out: &mut [E],
    scores: Option<&mut [f32]>,
    opts: &AttentionOptions,
) -> Result<(), Error> {
    with_detected(|kern| {
        kern.attention(
            shape,
            q,
            k,
            v,
            out,
            scores,
            opts,
            &mut AttentionWorkspace::for_shape(shape),
        )
    })
}

/// The gated attention unit: `[U|V|Z] = swish(X·W_in + b)`, `Q, K` per-dimension affine maps
/// of `Z`, `A = relu²(c·Q·Kᵀ + B)/l` (masked), `O = (U ⊙ A·V)·W_o + b_o`, fused. Allocates a
/// fresh workspace; keep a [`GauWorkspace`] and call [`Kernels::gau`] to avoid that.
///
/// Shapes, options, storage types (`x` and `out` in any [`Element`]; the weights in f32) and
/// the error bound are in the [module docs](mod@gau).
///
/// # Errors
/// [`Error::Shape`] naming the first argument whose length does not match `shape` (or a zero
/// width, or an odd `qk_dim` with RoPE); [`Error::Param`] for a non-finite scale, a
/// normalizer that is not finite and positive, or a key length beyond `seq_len`.
pub fn gau<E: Element>(
    shape: &GauShape,
    x: &[E],
    weights: &GauWeights,
    opts: &GauOptions,
    out: &mut [E],
) -> Result<(), Error> {
    with_detected(|k| k.gau(shape, x, weights, opts, out, &mut GauWorkspace::new()))
}
