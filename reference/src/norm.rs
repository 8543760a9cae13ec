//! The normalization family, two-pass in f64: LayerNorm, RMSNorm (with the residual add of
//! their fused forms) and BatchNorm; and the checks of the bounds `kernels` documents for them.
//!
//! Semantics, as in `kernels`: rows are `[rows, d]` row-major; a row (a channel for BatchNorm
//! training) holding a NaN or ±∞ gives NaN for every output of it. The residual `h = α·x +
//! (r + b)` of the fused forms is an f32 quantity by definition (`r + b` rounded, then one
//! FMA), reproduced bit for bit by [`residual`]; the norms are then exact on those f32 values.

use crate::check::{FirstMismatch, Judge, Mismatch, U};
use crate::element::{widen, Bound, Element};
use crate::fma_f32;

/// The outputs of [`layer_norm`]: per element `y`, per row the statistics.
#[derive(Debug, Clone, PartialEq)]
pub struct Normalized {
    /// `y = (h − μ)·rstd·γ + β`.
    pub y: Vec<f64>,
    /// `μ` per row.
    pub mean: Vec<f64>,
    /// The biased variance `σ²` per row.
    pub var: Vec<f64>,
    /// `rstd = 1/√(σ² + ε)` per row.
    pub rstd: Vec<f64>,
}

/// The outputs of [`rms_norm`].
#[derive(Debug, Clone, PartialEq)]
pub struct RmsNormalized {
    /// `y = h·rstd·g`.
    pub y: Vec<f64>,
    /// `mean(h²)` per row.
    pub mean_square: Vec<f64>,
    /// `rstd = 1/√(mean(h²) + ε)` per row.
    pub rstd: Vec<f64>,
}

/// The residual stream of the fused forms, `h = fl(α·x + fl(r + b))` (one FMA after one
/// rounded addition; without a bias, `fl(α·x + r)`), exactly as `kernels` computes it.
/// `bias` has length `d` and is shared by all rows.
///
/// # Panics
/// If `x` and `r` differ in length, or `bias` is not of length `d` dividing `x.len()`.
pub fn residual(x: &[f32], r: &[f32], bias: Option<&[f32]>, alpha: f32, d: usize) -> Vec<f32> {
    assert_eq!(x.len(), r.len(), "x and r must have the same length");
    if let Some(b) = bias {
        assert!(
            b.len() == d && (d == 0 || x.len().is_multiple_of(d)),
            "bias must have length d"
        );
    }
    x.iter()
        .zip(r)
        .enumerate()
        .map(|(j, (&x, &r))| fma_f32(alpha, x, bias.map_or(r, |b| r + b[j % d])))
        .collect()
}

/// Splits `x` into rows of `d` (none if `d = 0`).
fn rows(x: &[f32], d: usize) -> std::slice::Chunks<'_, f32> {
    assert!(d > 0 || x.is_empty(), "d = 0 needs an empty x");
    assert!(x.len().is_multiple_of(d.max(1)), "x.len() must be a multiple of d");
    x.chunks(d.max(1))
}

/// Mean and biased variance of finite values, two-pass; `None` if one is NaN or ±∞.
fn mean_var(v: impl Iterator<Item = f64> + Clone) -> Option<(f64, f64)> {
    let mut n = 0.0;
    let mut sum = 0.0;
    for x in v.clone() {
        if !x.is_finite() {
            return None;
        }
        n += 1.0;
        sum += x;
    }
    let mean = sum / n;
    Some((mean, v.map(|x| (x - mean) * (x - mean)).sum::<f64>() / n))
}

/// `γ_j`, `β_j` (1 and 0 where absent).
fn affine(gamma: Option<&[f32]>, beta: Option<&[f32]>, j: usize) -> (f64, f64) {
    (gamma.map_or(1.0, |g| g[j] as f64), beta.map_or(0.0, |b| b[j] as f64))
}

/// LayerNorm of each row of the `[rows, d]` matrix `h`: `μ = mean(h)`, `σ² = mean((h − μ)²)`,
/// `rstd = 1/√(σ² + ε)`, `y = (h − μ)·rstd·γ + β` (γ = 1, β = 0 where absent). A row holding a
/// NaN or ±∞ is NaN throughout.
///
/// # Panics
/// If `h.len()` is not a multiple of `d`, or `gamma`, `beta` are not of length `d`.
pub fn layer_norm(h: &[f32], d: usize, gamma: Option<&[f32]>, beta: Option<&[f32]>, eps: f32) -> Normalized {
    assert!(gamma.is_none_or(|g| g.len() == d) && beta.is_none_or(|b| b.len() == d));
    let mut out = Normalized {
        y: Vec::with_capacity(h.len()),
        mean: vec![],
        var: vec![],
        rstd: vec![],
    };
    for row in rows(h, d) {
        let (mean, var) = mean_var(row.iter().map(|&v| v as f64)).unwrap_or((f64::NAN, f64::NAN));
        let rstd = 1.0 / (var + eps as f64).sqrt();
        out.y.extend(row.iter().enumerate().map(|(j, &v)| {
            let (g, b) = affine(gamma, beta, j);
            (v as f64 - mean) * rstd * g + b
        }));
        out.mean.push(mean);
        out.var.push(var);
        out.rstd.push(rstd);
    }
    out
}

/// Add & LayerNorm: `h = `[`residual`]`(x, r, bias, α)`, then [`layer_norm`] of `h`. Returns
/// `h` and the normalization.
#[allow(clippy::too_many_arguments)]
pub fn add_layer_norm(
    x: &[f32],
    r: &[f32],
    bias: Option<&[f32]>,
    alpha: f32,
    d: usize,
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    eps: f32,
) -> (Vec<f32>, Normalized) {
    let h = residual(x, r, bias, alpha, d);
    let n = layer_norm(&h, d, gamma, beta, eps);
    (h, n)
}

/// RMSNorm of each row of `h`: `y = h/√(mean(h²) + ε)·g` (g = 1 where absent). A row holding a
/// NaN or ±∞ is NaN throughout.
///
/// # Panics
/// If `h.len()` is not a multiple of `d`, or `gain` is not of length `d`.
pub fn rms_norm(h: &[f32], d: usize, gain: Option<&[f32]>, eps: f32) -> RmsNormalized {
    assert!(gain.is_none_or(|g| g.len() == d));
    let mut out = RmsNormalized {
        y: Vec::with_capacity(h.len()),
        mean_square: vec![],
        rstd: vec![],
    };
    for row in rows(h, d) {
        let finite = row.iter().all(|v| v.is_finite());
        let ms = if finite {
            row.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / d as f64
        } else {
            f64::NAN
        };
        let rstd = 1.0 / (ms + eps as f64).sqrt();
        out.y.extend(
            row.iter()
                .enumerate()
                .map(|(j, &v)| v as f64 * rstd * affine(gain, None, j).0),
        );
        out.mean_square.push(ms);
        out.rstd.push(rstd);
    }
    out
}

/// Add & RMSNorm: `h = `[`residual`]`(x, r, bias, α)`, then [`rms_norm`] of `h`.
pub fn add_rms_norm(
    x: &[f32],
    r: &[f32],
    bias: Option<&[f32]>,
    alpha: f32,
    d: usize,
    gain: Option<&[f32]>,
    eps: f32,
) -> (Vec<f32>, RmsNormalized) {
    let h = residual(x, r, bias, alpha, d);
    let n = rms_norm(&h, d, gain, eps);
    (h, n)
}

/// The values of channel `c` of `x` of shape `[N, C, S]`.
fn channel(x: &[f32], [n, c, s]: [usize; 3], ch: usize) -> impl Iterator<Item = f64> + Clone + '_ {
    (0..n).flat_map(move |i| x[(i * c + ch) * s..][..s].iter().map(|&v| v as f64))
}

/// BatchNorm in inference mode over `x` of shape `[N, C, S]`:
/// `y = (x − μ_c)/√(v_c + ε)·γ_c + β_c`, elementwise (unfolded).
///
/// # Panics
/// If the lengths do not match the shape.
pub fn batch_norm(
    x: &[f32],
    shape: [usize; 3],
    running_mean: &[f32],
    running_var: &[f32],
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    eps: f32,
) -> Vec<f64> {
    let [n, c, s] = shape;
    assert_eq!(x.len(), n * c * s);
    assert!(running_mean.len() == c && running_var.len() == c);
    x.iter()
        .enumerate()
        .map(|(j, &v)| {
            let ch = j / s % c;
            let (g, b) = affine(gamma, beta, ch);
            (v as f64 - running_mean[ch] as f64) / (running_var[ch] as f64 + eps as f64).sqrt() * g + b
        })
        .collect()
}

/// The outputs of [`batch_norm_train`].
#[derive(Debug, Clone, PartialEq)]
pub struct BatchNormTrained {
    /// `y = (x − μ_c)·rstd_c·γ_c + β_c`.
    pub y: Vec<f64>,
    /// The batch mean `μ_c` of each channel.
    pub mean: Vec<f64>,
    /// The biased batch variance `σ²_c`.
    pub var: Vec<f64>,
    /// `rstd_c = 1/√(σ²_c + ε)`.
    pub rstd: Vec<f64>,
    /// `(1 − m)·running_mean + m·μ_c`.
    pub running_mean: Vec<f64>,
    /// `(1 − m)·running_var + m·σ²_c·N·S/(N·S − 1)`.
    pub running_var: Vec<f64>,
}

/// BatchNorm in training mode over `x` of shape `[N, C, S]`: batch statistics of each channel
/// over its `N·S` values (two-pass), normalization with them, and the running averages
/// updated with momentum `m` (the unbiased variance goes into the running variance). A channel
/// holding a NaN or ±∞ is NaN throughout, running averages included.
///
/// # Panics
/// If the lengths do not match the shape.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_train(
    x: &[f32],
    shape: [usize; 3],
    running_mean: &[f32],
    running_var: &[f32],
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    eps: f32,
    momentum: f32,
) -> BatchNormTrained {
    let [n, c, s] = shape;
    assert_eq!(x.len(), n * c * s);
    assert!(running_mean.len() == c && running_var.len() == c);
    let count = (n * s) as f64;
    let m = momentum as f64;
    let mut out = BatchNormTrained {
        y: vec![0.0; x.len()],
        mean: vec![],
        var: vec![],
        rstd: vec![],
        running_mean: vec![],
        running_var: vec![],
    };
    for ch in 0..c {
        let (mean, var) = mean_var(channel(x, shape, ch)).unwrap_or((f64::NAN, f64::NAN));
        let rstd = 1.0 / (var + eps as f64).sqrt();
        let (g, b) = affine(gamma, beta, ch);
        for i in 0..n {
            for j in 0..s {
                let at = (i * c + ch) * s + j;
                out.y[at] = (x[at] as f64 - mean) * rstd * g + b;
            }
        }
        out.mean.push(mean);
        out.var.push(var);
        out.rstd.push(rstd);
        out.running_mean.push((1.0 - m) * running_mean[ch] as f64 + m * mean);
        out.running_var
            .push((1.0 - m) * running_var[ch] as f64 + m * var * count / (count - 1.0));
    }
    out
}

// ---------------------------------------------------------------------------------------
// The documented bounds, as checks.

/// Where a bound does not hold: which output, and the element.
#[derive(Debug, Clone, PartialEq)]
pub struct NormMismatch {
    /// The output: `y`, `mean`, `rstd`, `running_mean` or `running_var`.
    pub output: &'static str,
    /// The element and the numbers.
    pub at: Mismatch,
}

impl std::fmt::Display for NormMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.output, self.at)
    }
}

/// `Err` unless `|got − exact| ≤ bound` (for f16 and bf16: unless `got` is the rounding of an
/// f32 within it, see [`crate::Element`]); where the exact value is not a finite f32, `got`
/// must equal it rounded to f32 and then to `E` (NaN for NaN). The judge decides (see
/// [`Judge`]).
fn within<E: Element>(
    judge: &mut impl Judge,
    output: &'static str,
    index: usize,
    got: E,
    exact: f64,
    bound: f64,
) -> Result<(), NormMismatch> {
    if exact.is_nan() || (exact as f32).is_infinite() {
        judge.exact(index, got, exact)
    } else {
        // Fails if anything is NaN.
        judge.within(index, got, exact, Bound::Abs(bound))
    }
    .map_err(|at| NormMismatch { output, at })
}

/// `|got − exact|/bound`, for the worst-ratio reports.
fn ratio<E: Element>(got: E, exact: f64, bound: f64) -> f64 {
    (got.to_f64() - exact).abs() / bound
}

/// The bounds of one row (or channel) of the LayerNorm family: `(E_μ, E_v, ε_r)`.
///
/// `u = 2⁻²⁴`, `R = max |h_j − μ|`, `Z` the distance of the values from the kernel's shift
/// (`max |h_j − h₀|` for LayerNorm, `2R` for BatchNorm):
///
/// ```text
/// E_μ = (4R + 12Z)·u + 2⁻¹⁴⁰
/// E_v = (20σ² + 9R² + 27R·Z)·u + 2⁻¹⁴⁰·(1 + R)
/// ε_r = e/2 + e² + 2u,  e = E_v/(σ² + ε)   (∞ if e > 1/2)
/// ```
pub fn layer_norm_row_bounds(values: &[f32], mean: f64, var: f64, z: Option<f64>, eps: f32) -> (f64, f64, f64) {
    let r = values.iter().map(|&v| (v as f64 - mean).abs()).fold(0.0, f64::max);
    let z = z.unwrap_or(2.0 * r);
    let e_mu = (4.0 * r + 12.0 * z) * U + TINY;
    let e_v = (20.0 * var + 9.0 * r * r + 27.0 * r * z) * U + TINY * (1.0 + r);
    let e = e_v / (var + eps as f64);
    let eps_r = if e <= 0.5 {
        e / 2.0 + e * e + 2.0 * U
    } else {
        f64::INFINITY
    };
    (e_mu, e_v, eps_r)
}

/// `2⁻¹⁴⁰`: the allowance for roundings into the subnormals.
const TINY: f64 = 1.0 / (1u128 << 70) as f64 / (1u128 << 70) as f64;

/// `2⁻¹⁴⁸` and `2⁻¹⁴⁹`.
const SUB2: f64 = TINY / 256.0;
const SUB1: f64 = SUB2 / 2.0;

/// The bound on one element of a normalized row, `y = (h − μ)·rstd·γ + β`:
/// `|γ|·rstd·E_μ + |ŷ − β|·(ε_r + 3u) + u·|ŷ| + 2⁻¹⁴⁸·(1 + |γ|)`.
fn element_bound(exact: f64, g: f64, b: f64, rstd: f64, e_mu: f64, eps_r: f64) -> f64 {
    g.abs() * rstd * e_mu + times(exact - b, eps_r + 3.0 * U) + U * exact.abs() + SUB2 * (1.0 + g.abs())
}

/// `|a|·r`, with `0·∞ = 0`: an element exactly at β gets no error from an unbounded `ε_r`
/// (found by fuzzing: the product was NaN and failed every comparison).
fn times(a: f64, r: f64) -> f64 {
    if a == 0.0 {
        0.0
    } else {
        a.abs() * r
    }
}

/// Checks the output `y` (and the per-row `mean`, `rstd` if given) of `kernels::layer_norm`
/// on the f32 rows `h` (`x`, or the `h` of the fused add) against the documented bound (see
/// [`layer_norm_row_bounds`]):
///
/// ```text
/// |y_j − ŷ_j| ≤ |γ_j|·rstd·E_μ + |ŷ_j − β_j|·(ε_r + 3u) + u·|ŷ_j| + 2⁻¹⁴⁸·(1 + |γ_j|)
/// |μ_out − μ| ≤ E_μ + u·|μ|,   |rstd_out − rstd| ≤ ε_r·rstd + 2⁻¹⁴⁹
/// ```
///
/// NaN rows must be NaN. Returns the largest ratio of error to bound seen on `y`.
///
/// Types: `h` is the tensor the kernel normalizes, in its own type `H` (widened exactly): for
/// `layer_norm`, the input `x` in its storage type; for `add_layer_norm`, the f32 residual
/// `h` that [`residual`] computes from the widened `x`, `r`, `bias` (the kernel takes its
/// statistics from that f32 `h`, not from `h` rounded to the storage type). `y` is the output
/// in its storage type `E`: for f16 and bf16 each element must be the rounding to `E` of an
/// f32 within the bound, and the ratio returned compares with the f32 bound alone (so it may
/// exceed 1 by that rounding). `gamma`, `beta` and the per-row `mean`, `rstd` are f32.
#[allow(clippy::too_many_arguments)]
pub fn check_layer_norm<H: Element, E: Element>(
    h: &[H],
    d: usize,
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    eps: f32,
    y: &[E],
    mean: Option<&[f32]>,
    rstd: Option<&[f32]>,
) -> Result<f64, NormMismatch> {
    walk_layer_norm(h, d, gamma, beta, eps, y, mean, rstd, &mut FirstMismatch)
}

/// The walk of [`check_layer_norm`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn walk_layer_norm<H: Element, E: Element>(
    h: &[H],
    d: usize,
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    eps: f32,
    y: &[E],
    mean: Option<&[f32]>,
    rstd: Option<&[f32]>,
    judge: &mut impl Judge,
) -> Result<f64, NormMismatch> {
    assert_eq!(y.len(), h.len(), "`y` must have the length of `h`");
    let h = &widen(h)[..];
    let exact = layer_norm(h, d, gamma, beta, eps);
    let mut worst = 0.0f64;
    for (i, row) in rows(h, d).enumerate() {
        let (mu, var, rs) = (exact.mean[i], exact.var[i], exact.rstd[i]);
        let z = row
            .iter()
            .map(|&v| (v as f64 - row[0] as f64).abs())
            .fold(0.0, f64::max);
        let (e_mu, _, eps_r) = if mu.is_nan() {
            (f64::NAN, f64::NAN, f64::NAN)
        } else {
            layer_norm_row_bounds(row, mu, var, Some(z), eps)
        };
        for j in 0..d {
            let at = i * d + j;
            let (g, b) = affine(gamma, beta, j);
            let bound = element_bound(exact.y[at], g, b, rs, e_mu, eps_r);
            within(judge, "y", at, y[at], exact.y[at], bound)?;
            if bound > 0.0 && (exact.y[at] as f32).is_finite() {
                worst = worst.max(ratio(y[at], exact.y[at], bound));
            }
        }
        if let Some(m) = mean {
            within(judge, "mean", i, m[i], mu, e_mu + U * mu.abs())?;
        }
        if let Some(r) = rstd {
            within(judge, "rstd", i, r[i], rs, eps_r * rs + SUB1)?;
        }
    }
    Ok(worst)
}

/// Checks the output `y` of `kernels::rms_norm` on the f32 rows `h` against the documented
/// bound (`ms = mean(h²)`):
///
/// ```text
/// |y_j − ŷ_j| ≤ |ŷ_j|·(ε_r + 2u) + 2⁻¹⁴⁸·(1 + |g_j|),   ε_r = e/2 + e² + 2u,
/// e = (10u·ms + 2⁻¹⁴⁹)/(ms + ε)
/// ```
///
/// NaN rows must be NaN. Returns the largest ratio of error to bound.
///
/// Types as in [`check_layer_norm`]: `h` is the input `x` of `rms_norm` in its storage type,
/// or the f32 residual of `add_rms_norm` ([`residual`]); `y` is in the output's storage type
/// `E` (one more rounding allowed for f16 and bf16); `gain` is f32.
pub fn check_rms_norm<H: Element, E: Element>(
    h: &[H],
    d: usize,
    gain: Option<&[f32]>,
    eps: f32,
    y: &[E],
) -> Result<f64, NormMismatch> {
    walk_rms_norm(h, d, gain, eps, y, &mut FirstMismatch)
}

/// The walk of [`check_rms_norm`].
pub(crate) fn walk_rms_norm<H: Element, E: Element>(
    h: &[H],
    d: usize,
    gain: Option<&[f32]>,
    eps: f32,
    y: &[E],
    judge: &mut impl Judge,
) -> Result<f64, NormMismatch> {
    assert_eq!(y.len(), h.len(), "`y` must have the length of `h`");
    let h = &widen(h)[..];
    let exact = rms_norm(h, d, gain, eps);
    let mut worst = 0.0f64;
    for i in 0..exact.rstd.len() {
        let ms = exact.mean_square[i];
        let e = (10.0 * U * ms + SUB1) / (ms + eps as f64);
        let eps_r = if e <= 0.5 {
            e / 2.0 + e * e + 2.0 * U
        } else {
            f64::INFINITY
        };
        for j in 0..d {
            let at = i * d + j;
            let g = affine(gain, None, j).0;
            let bound = times(exact.y[at], eps_r + 2.0 * U) + SUB2 * (1.0 + g.abs());
            within(judge, "y", at, y[at], exact.y[at], bound)?;
            if bound > 0.0 && (exact.y[at] as f32).is_finite() {
                worst = worst.max(ratio(y[at], exact.y[at], bound));
            }
        }
    }
    Ok(worst)
}

/// Checks the output `y` of `kernels::batch_norm` (inference) against the documented bound,
/// with `s_c = γ_c/√(v_c + ε)` and `b_c = β_c − μ_c·s_c` exact:
///
/// ```text
/// |y − ŷ| ≤ u·(|x − μ_c|·|s_c| + |b_c| + |ŷ|) + 2⁻⁴⁰·(|μ_c·s_c| + |b_c| + |ŷ|) + 2⁻¹⁴⁸
/// ```
///
/// `x` and `y` are in the storage type `E` (`x` widened exactly; for f16 and bf16 each `y` must
/// be the rounding to `E` of an f32 within the bound, and the ratio returned compares with the
/// f32 bound alone); the running statistics, `gamma` and `beta` are f32.
#[allow(clippy::too_many_arguments)]
pub fn check_batch_norm<E: Element>(
    x: &[E],
    shape: [usize; 3],
    running_mean: &[f32],
    running_var: &[f32],
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    eps: f32,
    y: &[E],
) -> Result<f64, NormMismatch> {
    walk_batch_norm(
        x,
        shape,
        running_mean,
        running_var,
        gamma,
        beta,
        eps,
        y,
        &mut FirstMismatch,
    )
}

/// The walk of [`check_batch_norm`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn walk_batch_norm<E: Element>(
    x: &[E],
    shape: [usize; 3],
    running_mean: &[f32],
    running_var: &[f32],
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    eps: f32,
    y: &[E],
    judge: &mut impl Judge,
) -> Result<f64, NormMismatch> {
    let [_, c, s] = shape;
    let x = &widen(x)[..];
    let exact = batch_norm(x, shape, running_mean, running_var, gamma, beta, eps);
    let mut worst = 0.0f64;
    for (at, (&v, &e)) in x.iter().zip(&exact).enumerate() {
        let ch = at / s % c;
        let (g, b) = affine(gamma, beta, ch);
        let mu = running_mean[ch] as f64;
        let sc = g / (running_var[ch] as f64 + eps as f64).sqrt();
        let sh = b - mu * sc;
        // The last term: `s_c` rounded into the subnormals errs by up to 2⁻¹⁵⁰ absolute, which
        // `y = x·s_c + (β − μ·s_c)` carries as `(x − μ)·Δs` (found by fuzzing).
        let bound = U * ((v as f64 - mu).abs() * sc.abs() + sh.abs() + e.abs())
            + (1.0 / (1u64 << 40) as f64) * ((mu * sc).abs() + sh.abs() + e.abs())
            + SUB2
            + (v as f64 - mu).abs() * f32::MIN_POSITIVE as f64 * U;
        within(judge, "y", at, y[at], e, bound)?;
        if bound > 0.0 && (e as f32).is_finite() {
            worst = worst.max(ratio(y[at], e, bound));
        }
    }
    Ok(worst)
}

/// The results of `kernels::batch_norm_train_with_stats` to check: `y` in the storage type
/// `E` of the kernel's data tensors, the statistics in f32.
#[derive(Debug, Clone, Copy)]
pub struct BatchNormTrainOutputs<'a, E: Element = f32> {
    /// `y`.
    pub y: &'a [E],
    /// The running mean after the call.
    pub running_mean: &'a [f32],
    /// The running variance after the call.
    pub running_var: &'a [f32],
    /// The batch means written, if asked for.
    pub mean: Option<&'a [f32]>,
    /// The batch rstd written, if asked for.
    pub rstd: Option<&'a [f32]>,
}

/// Checks `kernels::batch_norm_train` against the documented bound: per channel, that of
/// [`check_layer_norm`] with `Z = 2R` over the channel's `N·S` values; the running averages
/// within `m·E_μ + u·|r| + 2⁻⁵⁰·((1 − m)·|r_old| + m·|μ|) + 2⁻¹⁴⁹` (mean) and
/// `m·E_v·N·S/(N·S − 1) + u·|r| + 2⁻⁵⁰·((1 − m)·|r_old| + m·|σ²_unbiased|) + 2⁻¹⁴⁹` (variance)
/// of the update with the exact statistics (`r` the exact new value; the `2⁻⁵⁰` term covers the
/// f64 arithmetic of the update). `running_mean`, `running_var` are the values before the
/// call. NaN channels must be NaN throughout.
///
/// `x` and `got.y` are in the storage type `E` (`x` widened exactly; for f16 and bf16 each `y`
/// must be the rounding to `E` of an f32 within the bound, and the ratio returned compares with
/// the f32 bound alone); the running statistics, `gamma`, `beta` and the statistics in `got`
/// are f32.
#[allow(clippy::too_many_arguments)]
pub fn check_batch_norm_train<E: Element>(
    x: &[E],
    shape: [usize; 3],
    running_mean: &[f32],
    running_var: &[f32],
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    eps: f32,
    momentum: f32,
    got: BatchNormTrainOutputs<E>,
) -> Result<f64, NormMismatch> {
    walk_batch_norm_train(
        x,
        shape,
        running_mean,
        running_var,
        gamma,
        beta,
        eps,
        momentum,
        got,
        &mut FirstMismatch,
    )
}

/// The walk of [`check_batch_norm_train`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn walk_batch_norm_train<E: Element>(
    x: &[E],
    shape: [usize; 3],
    running_mean: &[f32],
    running_var: &[f32],
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    eps: f32,
    momentum: f32,
    got: BatchNormTrainOutputs<E>,
    judge: &mut impl Judge,
) -> Result<f64, NormMismatch> {
    let [n, c, s] = shape;
    let x = &widen(x)[..];
    let exact = batch_norm_train(x, shape, running_mean, running_var, gamma, beta, eps, momentum);
    let m = momentum as f64;
    let count = (n * s) as f64;
    let f64_slack = 1.0 / (1u64 << 50) as f64;
    let mut worst = 0.0f64;
    for ch in 0..c {
        let values: Vec<f32> = (0..n).flat_map(|i| x[(i * c + ch) * s..][..s].to_vec()).collect();
        let (mu, var, rs) = (exact.mean[ch], exact.var[ch], exact.rstd[ch]);
        let (e_mu, e_v, eps_r) = if mu.is_nan() {
            (f64::NAN, f64::NAN, f64::NAN)
        } else {
            layer_norm_row_bounds(&values, mu, var, None, eps)
        };
        let (g, b) = affine(gamma, beta, ch);
        for i in 0..n {
            for j in 0..s {
                let at = (i * c + ch) * s + j;
                let bound = element_bound(exact.y[at], g, b, rs, e_mu, eps_r);
                within(judge, "y", at, got.y[at], exact.y[at], bound)?;
                if bound > 0.0 && (exact.y[at] as f32).is_finite() {
                    worst = worst.max(ratio(got.y[at], exact.y[at], bound));
                }
            }
        }
        if let Some(mean) = got.mean {
            within(judge, "mean", ch, mean[ch], mu, e_mu + U * mu.abs())?;
        }
        if let Some(r) = got.rstd {
            within(judge, "rstd", ch, r[ch], rs, eps_r * rs + SUB1)?;
        }
        let rm = exact.running_mean[ch];
        let old = (1.0 - m) * (running_mean[ch] as f64).abs();
        let bound = m * e_mu + U * rm.abs() + f64_slack * (old + m * mu.abs()) + SUB1;
        within(judge, "running_mean", ch, got.running_mean[ch], rm, bound)?;
        let rv = exact.running_var[ch];
        let old = (1.0 - m) * (running_var[ch] as f64).abs();
        let unbiased = var * count / (count - 1.0);
        let bound = m * e_v * count / (count - 1.0) + U * rv.abs() + f64_slack * (old + m * unbiased) + SUB1;
        within(judge, "running_var", ch, got.running_var[ch], rv, bound)?;
    }
    Ok(worst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_norm_of_a_known_row() {
        let n = layer_norm(&[1.0, 2.0, 3.0, 4.0], 4, None, Some(&[1.0; 4]), 0.0);
        assert_eq!(n.mean, vec![2.5]);
        assert_eq!(n.var, vec![1.25]);
        let r = 1.0 / 1.25f64.sqrt();
        assert_eq!(n.y, vec![1.0 - 1.5 * r, 1.0 - 0.5 * r, 1.0 + 0.5 * r, 1.0 + 1.5 * r]);
    }

    #[test]
    fn non_finite_rows_are_nan() {
        let n = layer_norm(&[1.0, f32::INFINITY, 0.0, 1.0], 2, None, None, 1e-5);
        assert!(n.y[..2].iter().all(|v| v.is_nan()) && n.mean[0].is_nan());
        assert!(n.y[2..].iter().all(|v| v.is_finite()));
        let n = rms_norm(&[f32::NAN, 1.0], 2, None, 1e-5);
        assert!(n.y.iter().all(|v| v.is_nan()));
    }

    #[test]
    fn residual_rounds_once_after_the_bias() {
        // 1 + 2⁻²⁴ rounds to 1 in f32; α·x + (r + b) with r + b = 1 exactly.
        let h = residual(&[2.0f32.powi(-24)], &[0.5], Some(&[0.5]), 1.0, 1);
        assert_eq!(h, vec![1.0]);
        let h = residual(&[3.0], &[1.0], None, 0.5, 1);
        assert_eq!(h, vec![2.5]);
    }

    #[test]
    fn batch_norm_train_updates_running_averages() {
        let t = batch_norm_train(
            &[1.0, 10.0, 3.0, 30.0],
            [2, 2, 1],
            &[0.0, 0.0],
            &[1.0, 1.0],
            None,
            None,
            0.0,
            0.5,
        );
        assert_eq!(t.mean, vec![2.0, 20.0]);
        assert_eq!(t.var, vec![1.0, 100.0]);
        assert_eq!(t.running_mean, vec![1.0, 10.0]);
        assert_eq!(t.running_var, vec![0.5 + 0.5 * 2.0, 0.5 + 0.5 * 200.0]);
        assert_eq!(t.y, vec![-1.0, -1.0, 1.0, 1.0]);
    }
}
