//! The normalization family: LayerNorm, Add & LayerNorm (Post-LN, Pre-LN, DeepNorm), RMSNorm,
//! Add & RMSNorm, and BatchNorm (inference and training).
//!
//! LayerNorm and RMSNorm normalize each row of a row-major `[rows, d]` matrix; BatchNorm each
//! channel of `[N, C, S]`. `x`, `r`, `y` and the `h` output are any [`Element`], widened
//! exactly as loaded; everything is computed in f32 (f64 where noted) as for f32 and each output
//! is rounded once to `E` as stored, so a half output's bound is the f32 bound plus that
//! rounding. The parameters (`γ`, `β`, gain, bias, `α`, `ε`, running and per-row statistics)
//! are f32. Files, each using only those before it: `call.rs` (a validated call),
//! `sources.rs` (what a row's sweeps read and write), `stats.rs` (the statistics core),
//! `rows.rs` (the walks over the rows), `layer_norm.rs` and `rms_norm.rs` (the row ops),
//! `api.rs` (validation, plan, choice of instance), `batch_norm.rs`, `add_norm.rs` (the
//! named-operand builder).
//!
//! # Algorithm
//!
//! A row `h` is read once from memory for its statistics, then swept once more from cache to
//! write `y`. The statistics go by chunks of 16 steps of four vectors, shifted by the row's
//! first value `K = h₀` (a good guess of the mean, so sums stay accurate on rows far from 0):
//!
//! ```text
//! plain rows:  two passes over the chunk in L1: mean_c = Σ(h − K)/n, then
//!              M_c = Σ(h − c)² − n·(K + mean_c − c)²,  c = f32(K + mean_c)
//! add forms:   a per-lane Welford recurrence m_k = m + (z − m)/k, M_k = M + (z − m)(z − m_k)
//! ```
//!
//! merged into f64 moments by Chan's formula; `E[x²] − E[x]²` is never formed. Then in f64
//! `μ`, `rstd = 1/√(σ² + ε)`, and `y = ((h − μ_hi)·rstd − μ_lo·rstd)·γ + β` with two FMAs
//! (`μ_hi = f32(μ)`: `h − μ_hi` is exact near `μ`, so `10⁷ + N(0, 1)` still normalizes). RMSNorm
//! sums `h²` the same chunked way; `y = h·rstd·g`. Why each choice:
//!
//! - Two passes over L1 for plain rows: independent adds instead of one dependent chain per
//!   accumulator, with the same single read from memory. The add forms keep Welford: their
//!   first pass builds `h = α·x + (r + b)`, which a second pass would have to load again or
//!   rebuild. So `layer_norm(h)` and `add_layer_norm` are both within the bound, not bit-equal.
//! - The normalize sweep of row `r − 1` runs behind the statistics of row `r`, in spans
//!   between the chunks' passes: reading one row overlaps writing the other, and the chain that
//!   ends a row's statistics overlaps independent work.
//! - Short rows (a few vectors) go by groups of rows, their reductions in vectors across rows;
//!   LayerNorm's rows of 4096 values or more, in calls of at most 1 MiB, by columns on
//!   AVX-512 (on AVX2 the row loop is faster there); LayerNorm's short f32 add rows by groups
//!   whose first pass builds `h`, RMSNorm's by blocks that build `h` for many rows before
//!   their statistics.
//! - Calls beyond the last-level cache stream `y` (and `h`) around the caches and prefetch the
//!   next row. `api.rs` decides both from the shape, the storage type and the machine's caches.
//! - The add forms store the f32 `h` (to the `h` output or to `y` as scratch) for the
//!   normalize sweep to read back; a half type, or a streamed `y`, rebuilds it instead.
//!
//! No choice changes a value: a row's bits depend on its values and the call's form only.
//!
//! # Error bound
//!
//! With `u = 2⁻²⁴`, per row `R = max |h_j − μ|`, `Z = max |h_j − h₀|` (`Z ≤ 2R`):
//!
//! ```text
//! E_μ = (4R + 12Z)·u + 2⁻¹⁴⁰                              mean
//! E_v = (20σ² + 9R² + 27R·Z)·u + 2⁻¹⁴⁰·(1 + R)             variance
//! e   = E_v/(σ² + ε),  ε_r = e/2 + e² + 2u                 rstd, relative (e ≤ 1/2)
//! |y_j − ŷ_j| ≤ |γ_j|·rstd·E_μ + |ŷ_j − β_j|·(ε_r + 3u) + u·|ŷ_j| + 2⁻¹⁴⁸·(1 + |γ_j|)
//! ```
//!
//! To first order, per chunk (`n ≤ 16` values per lane): the shift rounds each value by `uZ`;
//! in-order lane sums add at most `8.44uZ` per value and the tree of accumulators `2uZ`; a
//! deviation's rounding moves its square by `4uRZ + 2u·t²`, the sum of squares rounds `(n + 4)u`
//! of `σ²`. A Welford step is first-order sensitive to its running mean: a rounding perturbs
//! the value added by `≤ 4uR + k·u·Z`, which moves `M2` by `≤ 8.7uR² + 18.75uRZ` per value,
//! hence the `9R² + 27RZ`. The sweep rounds `h − μ_hi`, the first FMA and `rstd` (`3u` on
//! `ŷ − β`) and the second FMA (`u·|ŷ|`); `2⁻¹⁴⁰` terms cover subnormal results. RMSNorm
//! (`ms = mean(h²)`): `e = (10u·ms + 2⁻¹⁴⁹)/(ms + ε)`, `|y_j − ŷ_j| ≤ |ŷ_j|·(ε_r + 2u) +
//! 2⁻¹⁴⁸·(1 + |g_j|)`, about `9u` relative. These are worst cases; measured errors are a few
//! `u·|ŷ|` (`kernels/tests/norm.rs` prints the worst ratio to the bound).
//!
//! # Special values
//!
//! A row (a BatchNorm training channel) holding a NaN or ±∞ gives NaN for all its outputs
//! (`y`, mean, rstd). Rows whose spread overflows the f32 statistics (beyond about 10¹⁷) are
//! detected and recomputed two-pass in f64: exact to the f32 rounding.

mod add_norm;
mod api;
mod batch_norm;
mod call;
mod layer_norm;
mod rms_norm;
mod rows;
mod sources;
mod stats;

pub use add_norm::AddNorm;
pub use batch_norm::BatchNormOptions;
pub use call::{Residual, RowStats};
pub use layer_norm::LayerNormOptions;
pub use rms_norm::RmsNormOptions;

use crate::{Element, Error};

/// LayerNorm of each row of the row-major `[rows, d]` matrix `x`, into `out`:
///
/// ```text
/// μ = mean(x),  σ² = mean((x − μ)²)  (biased),  rstd = 1/√(σ² + ε)
/// y_j = (x_j − μ)·rstd·γ_j + β_j
/// ```
///
/// The statistics take one read of the row from memory (two passes over each chunk of it in
/// L1, see the [module docs](self)), the normalization one more sweep. A constant row gives
/// `y = β` exactly.
///
/// Error bound (`u = 2⁻²⁴`; per row: `R = max |x_j − μ|`, `Z = max |x_j − x₀|`; derived in the
/// [module docs](self)):
///
/// ```text
/// |y_j − ŷ_j| ≤ |γ_j|·rstd·E_μ + |ŷ_j − β_j|·(ε_r + 3u) + u·|ŷ_j| + 2⁻¹⁴⁸·(1 + |γ_j|)
/// E_μ = (4R + 12Z)·u + 2⁻¹⁴⁰,   E_v = (20σ² + 9R² + 27R·Z)·u + 2⁻¹⁴⁰·(1 + R)
/// ε_r = e/2 + e² + 2u,  e = E_v/(σ² + ε)
/// ```
///
/// On ordinary rows (`R, Z` a few σ) that is several hundred `u` relative to `|ŷ − β|`; the
/// measured error is a few `u`. On hard rows (`[40000, 40001, 40002,
/// 40003]`, a constant row, `10⁷ + N(0, 1)` at `d = 4096`, rows mixing ±10³⁰) the measured
/// error is below `10⁻⁵·max(|ŷ_j|, 1)` with `γ = 1, β = 0`, which the tests assert.
///
/// NaN policy: a row holding a NaN or ±∞ becomes NaN. Rows whose spread overflows the f32
/// statistics (beyond about 10¹⁷) are computed in f64, exactly rounded in practice.
///
/// # Errors
/// [`Error::Shape`] if `x.len()` is not a multiple of `d`, or `out`, `gamma`, `beta` have the
/// wrong length (each named); [`Error::Param`] naming `eps` unless `ε` is finite and > 0.
///
/// ```
/// use kernels::LayerNormOptions;
///
/// let x = [1.0, 2.0, 3.0, 4.0, 10.0, 10.0, 10.0, 10.0];
/// let (gamma, beta) = ([1.0; 4], [0.5; 4]);
/// let mut y = [0.0; 8];
/// let opts = LayerNormOptions { gamma: Some(&gamma), beta: Some(&beta), ..Default::default() };
/// kernels::layer_norm(&x, &mut y, 4, &opts)?;
/// assert!((y[0] - (0.5 - 1.5 / (1.25f32 + 1e-5).sqrt())).abs() < 1e-6);
/// assert_eq!(&y[4..], &[0.5; 4]); // a constant row gives β
/// # Ok::<(), kernels::Error>(())
/// ```
pub fn layer_norm<E: Element>(x: &[E], out: &mut [E], d: usize, opts: &LayerNormOptions) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| k.layer_norm(x, out, d, opts))
}

/// [`layer_norm()`] in place.
pub fn layer_norm_inplace<E: Element>(x: &mut [E], d: usize, opts: &LayerNormOptions) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| k.layer_norm_inplace(x, d, opts))
}

/// [`layer_norm()`], also writing each row's mean `μ` and `rstd` (rounded to f32) to the
/// slices of `stats` that are present (length `rows` each).
///
/// Their bounds (notation of [`layer_norm()`]): `|μ_out − μ| ≤ E_μ + u·|μ|`,
/// `|rstd_out − rstd| ≤ ε_r·rstd + 2⁻¹⁴⁹`. NaN rows give NaN.
///
/// # Errors
/// As [`layer_norm()`], and [`Error::Shape`] naming `mean` or `rstd` when not of length `rows`.
pub fn layer_norm_with_stats<E: Element>(
    x: &[E],
    out: &mut [E],
    d: usize,
    opts: &LayerNormOptions,
    stats: RowStats,
) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| k.layer_norm_with_stats(x, out, d, opts, stats))
}

/// Add & LayerNorm, fused: for each row of the `[rows, d]` matrices `x` and `r`,
///
/// ```text
/// h = α·x + (r + b)        (f32: r + b rounded, then one FMA; without b, one FMA)
/// y = LayerNorm(h)         (γ, β, ε of `opts`)
/// ```
///
/// `h` is built and its statistics gathered in the same sweep; `h` is written to `h` when
/// given (the Pre-LN residual stream), else (f32) it only passes through `out`. `residual`
/// holds `α` (1 by default; DeepNorm's `(2N)^¼`) and the optional bias `b` (length `d`). For
/// f16/bf16 tensors, `h` is formed in f32 from the widened `x`, `r` and the f32 `b`; `y` comes
/// from that f32 `h`, and the `h` output is it rounded once (see the
/// [storage types](self#storage-types)).
///
/// Error bound: `y` is within the bound of [`layer_norm()`] of the exact LayerNorm of the f32
/// `h` (which is exactly the rounded value above: `reference::residual` reproduces it bit for
/// bit), plus one rounding for a half `y`. NaN policy as [`layer_norm()`], on `h` (an `h` that overflows to ±∞ makes its row NaN).
///
/// # Errors
/// [`Error::Shape`] naming `x`, `r`, `out`, `h`, `bias`, `gamma` or `beta` on a length mismatch;
/// [`Error::Param`] naming `eps` or `alpha` (which must be finite).
///
/// Post-LN ("Add & Norm" after each sublayer, the original Transformer and BERT),
/// `x_{l+1} = LN(x_l + f(x_l))`:
///
/// ```
/// use kernels::{LayerNormOptions, Residual};
///
/// let d = 4;
/// let x = vec![0.5f32; 2 * d]; // the block input, [rows, d]
/// let fx: Vec<f32> = (0..2 * d).map(|i| i as f32).collect(); // f(x): attention or FFN output
/// let mut next = vec![0.0; 2 * d];
/// kernels::add_layer_norm(&x, &fx, &mut next, None, d, &Residual::default(), &LayerNormOptions::default())?;
/// // `next` = LN(x + f(x)) is the input of the next block.
/// assert!((next[0] + 1.3416).abs() < 1e-3);
/// # Ok::<(), kernels::Error>(())
/// ```
///
/// Pre-LN (GPT-2, most LLMs), `x_{l+1} = x_l + f(LN(x_l))`: the residual stream goes on
/// unnormalized and each sublayer reads its LN. Fusing the residual add of one sublayer with
/// the LN in front of the next writes both in one pass:
///
/// ```
/// use kernels::{LayerNormOptions, Residual};
///
/// let d = 4;
/// let mut stream = vec![1.0f32; d]; // the residual stream x_l
/// let fx = vec![0.0, 1.0, 2.0, 3.0]; // f(LN(x_{l-1})), the previous sublayer's output
/// let mut ln = vec![0.0; d];
/// // stream ← stream + f(…) (that is, h), ln = LN(stream): the next sublayer's input.
/// kernels::add_layer_norm_inplace(&mut stream, &fx, &mut ln, d, &Residual::default(), &LayerNormOptions::default())?;
/// assert_eq!(stream, [1.0, 2.0, 3.0, 4.0]);
/// // The same, keeping the input: h goes to its own slice.
/// let mut h = vec![0.0; d];
/// kernels::add_layer_norm(&[1.0; 4], &fx, &mut ln, Some(&mut h), d, &Residual::default(), &LayerNormOptions::default())?;
/// assert_eq!(h, stream);
/// // DeepNorm: x_{l+1} = LN(α·x_l + f(x_l)).
/// let deep = Residual { alpha: (2.0f32 * 12.0).powf(0.25), ..Default::default() };
/// kernels::add_layer_norm(&[1.0; 4], &fx, &mut ln, None, d, &deep, &LayerNormOptions::default())?;
/// # Ok::<(), kernels::Error>(())
/// ```
pub fn add_layer_norm<E: Element>(
    x: &[E],
    r: &[E],
    out: &mut [E],
    h: Option<&mut [E]>,
    d: usize,
    residual: &Residual,
    opts: &LayerNormOptions,
) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| k.add_layer_norm(x, r, out, h, d, residual, opts))
}

/// [`add_layer_norm()`] with the residual stream updated in place: `x ← h = α·x + (r + b)`,
/// `out = LayerNorm(h)`.
pub fn add_layer_norm_inplace<E: Element>(
    x: &mut [E],
    r: &[E],
    out: &mut [E],
    d: usize,
    residual: &Residual,
    opts: &LayerNormOptions,
) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| k.add_layer_norm_inplace(x, r, out, d, residual, opts))
}

/// [`add_layer_norm()`], also writing the per-row mean and rstd of `h` (see
/// [`layer_norm_with_stats()`]).
#[allow(clippy::too_many_arguments)]
pub fn add_layer_norm_with_stats<E: Element>(
    x: &[E],
    r: &[E],
    out: &mut [E],
    h: Option<&mut [E]>,
    d: usize,
    residual: &Residual,
    opts: &LayerNormOptions,
    stats: RowStats,
) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| k.add_layer_norm_with_stats(x, r, out, h, d, residual, opts, stats))
}

/// RMSNorm of each row of the row-major `[rows, d]` matrix `x`, into `out`:
///
/// ```text
/// ms = mean(x²),  y_j = x_j/√(ms + ε)·g_j        (g optional: 1)
/// ```
///
/// One read for `Σx²` (chunked, reduced in f64), one sweep for `y`.
///
/// Error bound (`u = 2⁻²⁴`, derived in the [module docs](self)):
/// `|y_j − ŷ_j| ≤ |ŷ_j|·(ε_r + 2u) + 2⁻¹⁴⁸·(1 + |g_j|)` with `ε_r = e/2 + e² + 2u`,
/// `e = (10u·ms + 2⁻¹⁴⁹)/(ms + ε)`: about `9u` relative.
///
/// NaN policy: a row holding a NaN or ±∞ becomes NaN; rows whose `Σx²` overflows f32 are
/// computed in f64.
///
/// # Errors
/// [`Error::Shape`] naming `x`, `out` or `gain` on a length mismatch; [`Error::Param`] naming
/// `eps` unless it is finite and > 0.
///
/// ```
/// let x = [3.0, -4.0];
/// let mut y = [0.0; 2];
/// kernels::rms_norm(&x, &mut y, 2, &Default::default())?;
/// let rms = (12.5f32 + 1e-6).sqrt();
/// assert!((y[0] - 3.0 / rms).abs() < 1e-6 && (y[1] + 4.0 / rms).abs() < 1e-6);
/// # Ok::<(), kernels::Error>(())
/// ```
pub fn rms_norm<E: Element>(x: &[E], out: &mut [E], d: usize, opts: &RmsNormOptions) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| k.rms_norm(x, out, d, opts))
}

/// [`rms_norm()`] in place.
pub fn rms_norm_inplace<E: Element>(x: &mut [E], d: usize, opts: &RmsNormOptions) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| k.rms_norm_inplace(x, d, opts))
}

/// Add & RMSNorm, fused: `h = α·x + (r + b)` (as in [`add_layer_norm()`]), `y = RMSNorm(h)`,
/// `h` written to `h` when given. GAU-α's block is `rms_norm(x + O)` without gain:
/// `add_rms_norm(x, o, out, None, d, &Residual::default(), &RmsNormOptions::default())`.
///
/// Error bound: that of [`rms_norm()`] on the f32 `h`. NaN policy as [`rms_norm()`], on `h`.
///
/// # Errors
/// As [`add_layer_norm()`], with `gain` for `gamma`.
pub fn add_rms_norm<E: Element>(
    x: &[E],
    r: &[E],
    out: &mut [E],
    h: Option<&mut [E]>,
    d: usize,
    residual: &Residual,
    opts: &RmsNormOptions,
) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| k.add_rms_norm(x, r, out, h, d, residual, opts))
}

/// [`add_rms_norm()`] with the residual stream updated in place: `x ← h`.
pub fn add_rms_norm_inplace<E: Element>(
    x: &mut [E],
    r: &[E],
    out: &mut [E],
    d: usize,
    residual: &Residual,
    opts: &RmsNormOptions,
) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| k.add_rms_norm_inplace(x, r, out, d, residual, opts))
}

/// BatchNorm in inference mode over `x` of shape `shape = [N, C, S]` (row-major; `S` the
/// spatial positions flattened, 1 for `[N, C]`), with the running statistics `μ_c, v_c`:
///
/// ```text
/// y = (x − μ_c)/√(v_c + ε)·γ_c + β_c,  computed folded:  y = fma(x, s_c, b_c),
/// s_c = f32(γ_c/√(v_c + ε)),  b_c = f32(β_c − μ_c·s_c)   (per channel, in f64)
/// ```
///
/// Error bound (`u = 2⁻²⁴`, `s_c`, `b_c` exact): `|y − ŷ| ≤ u·(|x − μ_c|·|s_c| + |b_c| + |ŷ|) +
/// 2⁻⁴⁰·(|μ_c·s_c| + |b_c| + |ŷ|) + 2⁻¹⁴⁸ + |x − μ_c|·2⁻¹⁵⁰` (the rounding of `s_c`, of `b_c`
/// and of the FMA; the second term covers the second-order and f64 roundings, the last an `s_c`
/// rounded into the subnormals). Elementwise: a NaN `x` gives NaN,
/// ±∞ gives ±∞ (NaN if `s_c = 0`); a negative or NaN `v_c` makes its channel NaN; the fold
/// requires `|μ_c·s_c|` below the f32 range.
///
/// # Errors
/// [`Error::Shape`] naming `shape` (if `N·C·S` overflows), `x`, `out`, `running_mean`,
/// `running_var`, `gamma` or `beta`; [`Error::Param`] naming `eps`.
///
/// ```
/// use kernels::BatchNormOptions;
///
/// // N = 2, C = 2, S = 1.
/// let x = [1.0, 10.0, 3.0, 30.0];
/// let mut y = [0.0; 4];
/// kernels::batch_norm(&x, &mut y, [2, 2, 1], &[2.0, 20.0], &[1.0, 100.0], &BatchNormOptions::default())?;
/// assert!((y[0] + 1.0).abs() < 1e-4 && (y[3] - 1.0).abs() < 1e-4);
/// # Ok::<(), kernels::Error>(())
/// ```
pub fn batch_norm<E: Element>(
    x: &[E],
    out: &mut [E],
    shape: [usize; 3],
    running_mean: &[f32],
    running_var: &[f32],
    opts: &BatchNormOptions,
) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| k.batch_norm(x, out, shape, running_mean, running_var, opts))
}

/// [`batch_norm()`] in place.
pub fn batch_norm_inplace<E: Element>(
    x: &mut [E],
    shape: [usize; 3],
    running_mean: &[f32],
    running_var: &[f32],
    opts: &BatchNormOptions,
) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| k.batch_norm_inplace(x, shape, running_mean, running_var, opts))
}

/// BatchNorm in training mode over `x` of shape `[N, C, S]`: the statistics of each channel
/// over its `N·S` values, in a single read from memory (see the [module docs](self)), then
///
/// ```text
/// y = (x − μ_c)·rstd_c·γ_c + β_c,        rstd_c = 1/√(σ²_c + ε)   (σ² biased)
/// running_mean_c ← (1 − m)·running_mean_c + m·μ_c
/// running_var_c  ← (1 − m)·running_var_c  + m·σ²_c·N·S/(N·S − 1)   (unbiased, as PyTorch)
/// ```
///
/// with the momentum `m` of `opts` (0.1 by default).
///
/// Error bound: that of [`layer_norm()`] per channel (`d = N·S`), with `Z = 2R` (the shifts are
/// per position when `S` is short); the running averages are within `m·E_μ + u·|r|` and
/// `m·E_v·N·S/(N·S − 1) + u·|r|` (+ 2⁻¹⁴⁹) of the update with exact statistics.
///
/// NaN policy: a channel holding a NaN or ±∞ gives NaN for its `y`, its statistics and its
/// running averages.
///
/// # Errors
/// As [`batch_norm()`], and [`Error::Shape`] naming `shape` if a channel has fewer than 2
/// values (`N·S < 2`, the unbiased variance is undefined); [`Error::Param`] naming `momentum`
/// unless it is in `[0, 1]`.
///
/// ```
/// use kernels::BatchNormOptions;
///
/// let x = [1.0, 10.0, 3.0, 30.0]; // [N = 2, C = 2, S = 1]
/// let mut y = [0.0; 4];
/// let (mut mean, mut var) = ([0.0; 2], [1.0; 2]);
/// kernels::batch_norm_train(&x, &mut y, [2, 2, 1], &mut mean, &mut var, &BatchNormOptions::default())?;
/// assert!((y[0] + 1.0).abs() < 1e-4 && (y[1] + 1.0).abs() < 1e-4);
/// assert!((mean[1] - 2.0).abs() < 1e-6 && (var[0] - (0.9 + 0.1 * 2.0)).abs() < 1e-6);
/// # Ok::<(), kernels::Error>(())
/// ```
pub fn batch_norm_train<E: Element>(
    x: &[E],
    out: &mut [E],
    shape: [usize; 3],
    running_mean: &mut [f32],
    running_var: &mut [f32],
    opts: &BatchNormOptions,
) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| k.batch_norm_train(x, out, shape, running_mean, running_var, opts))
}

/// [`batch_norm_train()`], also writing each channel's batch mean and rstd (rounded to f32;
/// what a backward pass keeps) to the slices of `stats` that are present (length `C` each).
///
/// # Errors
/// As [`batch_norm_train()`], and [`Error::Shape`] naming `mean` or `rstd` when not of length
/// `C`.
pub fn batch_norm_train_with_stats<E: Element>(
    x: &[E],
    out: &mut [E],
    shape: [usize; 3],
    running_mean: &mut [f32],
    running_var: &mut [f32],
    opts: &BatchNormOptions,
    stats: RowStats,
) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| {
        k.batch_norm_train_with_stats(x, out, shape, running_mean, running_var, opts, stats)
    })
}
