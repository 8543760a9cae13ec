//! The documented error bounds of the `kernels` crate, as checks of a result against the
//! oracle. Tests and fuzz targets use them; so can anyone testing a kernel of their own to the
//! same contract.

// `!(error <= bound)` is deliberate throughout: unlike `error > bound`, it also fails when
// the error is NaN (a NaN result where the exact one is finite).
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use std::fmt;

use crate::attention::{attention, AttentionOptions, AttentionShape};
use crate::element::{accepts, exact_fraction, fraction, matches_exactly, widen, Bound, Element};
use crate::gau::{gau, GauParams, GauShape};
use crate::softmax::{log_softmax, scores, softmax, MaskedRows};

/// The unit roundoff of f32, `2⁻²⁴`.
pub const U: f64 = 1.0 / (1u64 << 24) as f64;

/// An element whose value breaks the bound.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    /// Flat index of the element.
    pub index: usize,
    /// The value the kernel produced, widened to f32 (exact for f16 and bf16).
    pub got: f32,
    /// The oracle's value.
    pub exact: f64,
    /// The largest error the bound allows there for an f32 result (NaN where only an exact
    /// match, or a bound in ulps, applies). A result stored in f16 or bf16 gets this bound
    /// plus one rounding to its type.
    pub bound: f64,
    /// The storage type of the result ([`Element::NAME`]): `"f32"`, `"f16"` or `"bf16"`.
    pub ty: &'static str,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "element {}: got {:e} ({}), exact {:e}, error {:e} > bound {:e}",
            self.index,
            self.got,
            self.ty,
            self.exact,
            (self.got as f64 - self.exact).abs(),
            self.bound
        )?;
        if self.ty != "f32" {
            write!(f, " plus one rounding to {}", self.ty)?;
        }
        Ok(())
    }
}

impl Mismatch {
    /// The mismatch of `got` (stored in `E`) at `index`.
    pub(crate) fn new<E: Element>(index: usize, got: E, exact: f64, bound: f64) -> Self {
        Mismatch {
            index,
            got: got.to_f32(),
            exact,
            bound,
            ty: E::NAME,
        }
    }
}

/// `Ok` if `got` equals `exact` rounded to f32 and then to `E` (bit for bit; NaN matches any
/// NaN, ±0 match each other): the rule where the exact value is not a finite f32 (NaN, or
/// beyond the f32 range and so rounding to ±∞), and for masked entries.
pub(crate) fn exact_match<E: Element>(index: usize, got: E, exact: f64) -> Result<(), Mismatch> {
    if matches_exactly(got, exact as f32) {
        Ok(())
    } else {
        Err(Mismatch::new(index, got, exact, f64::NAN))
    }
}

/// What a check does with each element it meets: a check walks its output once, stating the
/// rule of each element, and the judge decides. [`FirstMismatch`] stops at the first element
/// outside its bound (the `check_*` functions); [`Worst`] keeps the largest error as a
/// fraction of the bound (the [`crate::fraction`] functions). One walk per kernel, so the two
/// can never state a bound differently.
pub(crate) trait Judge {
    /// `got` must be within `bound` of `exact` (plus one rounding to `E`).
    fn within<E: Element>(&mut self, index: usize, got: E, exact: f64, bound: Bound) -> Result<(), Mismatch>;
    /// `got` must equal `exact` rounded to f32 and then to `E` ([`exact_match`]).
    fn exact<E: Element>(&mut self, index: usize, got: E, exact: f64) -> Result<(), Mismatch>;
    /// Either rule holds: `got` within `a` or within `b` of `exact`.
    fn within_either<E: Element>(
        &mut self,
        index: usize,
        got: E,
        exact: f64,
        a: Bound,
        b: Bound,
    ) -> Result<(), Mismatch>;
}

/// The judge of the `check_*` functions: the first element outside its bound is the error.
pub(crate) struct FirstMismatch;

impl Judge for FirstMismatch {
    fn within<E: Element>(&mut self, index: usize, got: E, exact: f64, bound: Bound) -> Result<(), Mismatch> {
        if accepts(got, exact, bound) {
            Ok(())
        } else {
            Err(Mismatch::new(index, got, exact, bound.abs_or_nan()))
        }
    }

    fn exact<E: Element>(&mut self, index: usize, got: E, exact: f64) -> Result<(), Mismatch> {
        exact_match(index, got, exact)
    }

    fn within_either<E: Element>(
        &mut self,
        index: usize,
        got: E,
        exact: f64,
        a: Bound,
        b: Bound,
    ) -> Result<(), Mismatch> {
        if accepts(got, exact, a) || accepts(got, exact, b) {
            Ok(())
        } else {
            Err(Mismatch::new(index, got, exact, f64::NAN))
        }
    }
}

/// The judge of the [`crate::fraction`] functions: every element is seen, the largest error
/// as a fraction of its bound kept (∞ for a failed exact match).
#[derive(Debug, Default)]
pub(crate) struct Worst(pub f64);

impl Judge for Worst {
    fn within<E: Element>(&mut self, _: usize, got: E, exact: f64, bound: Bound) -> Result<(), Mismatch> {
        self.0 = self.0.max(fraction(got, exact, bound));
        Ok(())
    }

    fn exact<E: Element>(&mut self, _: usize, got: E, exact: f64) -> Result<(), Mismatch> {
        self.0 = self.0.max(exact_fraction(got, exact as f32));
        Ok(())
    }

    fn within_either<E: Element>(&mut self, _: usize, got: E, exact: f64, a: Bound, b: Bound) -> Result<(), Mismatch> {
        self.0 = self.0.max(fraction(got, exact, a).min(fraction(got, exact, b)));
        Ok(())
    }
}

/// Checks the output of `kernels::softmax` (or `log_softmax` if `log`) on the `[rows, n]`
/// input `x` against the documented bound:
///
/// ```text
/// softmax:      |y_j − ŷ_j| ≤ (24 + |z_j − m|)·u·ŷ_j + 2⁻¹²⁶
/// log-softmax:  |y_j − ŷ_j| ≤ (24 + |z_j − m| + |ln d̂| + |ŷ_j|)·u
/// ```
///
/// where `z` are the f32 scores `fl(scale·x + mask)` and `ŷ` the exact result on them (see
/// [`crate::scores`]). NaN rows, masked entries and results beyond the f32 range must match
/// exactly.
///
/// `x` and `got` are in the storage type `E` of the kernel's input and output (`x` is widened
/// exactly); `mask` is f32. For f16 and bf16, `got` must be the rounding of an f32 within the
/// bound (see [`crate::Element`]), and the exact matches are against the f32 value rounded to
/// `E`.
pub fn check_softmax<E: Element>(
    x: &[E],
    n: usize,
    scale: f32,
    mask: Option<&[f32]>,
    policy: MaskedRows,
    log: bool,
    got: &[E],
) -> Result<(), Mismatch> {
    walk_softmax(x, n, scale, mask, policy, log, got, &mut FirstMismatch)
}

/// The walk of [`check_softmax`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn walk_softmax<E: Element>(
    x: &[E],
    n: usize,
    scale: f32,
    mask: Option<&[f32]>,
    policy: MaskedRows,
    log: bool,
    got: &[E],
    judge: &mut impl Judge,
) -> Result<(), Mismatch> {
    assert_eq!(got.len(), x.len(), "`got` must have the length of `x`");
    if n == 0 {
        return Ok(());
    }
    let x = &widen(x)[..];
    let exact = if log {
        log_softmax(x, n, scale, mask, policy)
    } else {
        softmax(x, n, scale, mask, policy)
    };
    for (r, row) in x.chunks(n).enumerate() {
        let z = scores(row, scale, mask);
        let m = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let d: f64 = z.iter().map(|&v| (v - m).exp()).sum();
        for (j, &zj) in z.iter().enumerate() {
            let index = r * n + j;
            let (y, e) = (got[index], exact[index]);
            if e.is_nan() || (e as f32).is_infinite() || zj == f64::NEG_INFINITY {
                judge.exact(index, y, e)?;
                continue;
            }
            let bound = if log {
                (24.0 + (zj - m).abs() + d.ln().abs() + e.abs()) * U
            } else {
                (24.0 + (zj - m).abs()) * U * e + f32::MIN_POSITIVE as f64
            };
            // Fails on a NaN result where the exact one is finite.
            judge.within(index, y, e, Bound::Abs(bound))?;
        }
    }
    Ok(())
}

/// Checks `kernels::exp`: every element within 1 ulp of `exp` in f64 rounded to f32, NaN for
/// NaN.
///
/// `x` and `got` are in the storage type `E`. For f16 and bf16, `got` must lie in
/// `[E(c⁻), E(c⁺)]` where `c⁻`, `c⁺` are `exp` rounded to f32 and stepped 1 ulp down and up:
/// the rounding to `E` of an f32 result within 1 ulp.
pub fn check_exp<E: Element>(x: &[E], got: &[E]) -> Result<(), Mismatch> {
    walk_exp(x, got, &mut FirstMismatch)
}

/// The walk of [`check_exp`].
pub(crate) fn walk_exp<E: Element>(x: &[E], got: &[E], judge: &mut impl Judge) -> Result<(), Mismatch> {
    assert_eq!(got.len(), x.len(), "`got` must have the length of `x`");
    for (index, (&v, &y)) in x.iter().zip(got).enumerate() {
        judge.within(index, y, v.to_f64().exp(), Bound::Ulps(1))?;
    }
    Ok(())
}

/// Half the spacing of the f32 subnormals, 2⁻¹⁵⁰: the absolute rounding error of an f32
/// operation whose result is subnormal.
const SUBNORMAL_HALF_ULP: f64 = f32::MIN_POSITIVE as f64 / (1u64 << 24) as f64;

/// Checks `kernels::sigmoid` (or `swish` if `swish`): every element within 3 ulp of the f64
/// value rounded to f32, or within 2⁻¹²⁶ where the exact magnitude is below 2⁻¹²⁶; NaN for
/// NaN.
///
/// `x` and `got` are in the storage type `E`. For f16 and bf16, `got` must be the rounding to
/// `E` of an f32 that one of the two rules accepts: `[E(c⁻), E(c⁺)]` with `c∓` the exact value
/// rounded to f32 and stepped 3 ulp down and up, or (where `|ŷ| < 2⁻¹²⁶`) the rounded ends of
/// `[ŷ − 2⁻¹²⁶, ŷ + 2⁻¹²⁶]`.
pub fn check_activation<E: Element>(x: &[E], swish: bool, got: &[E]) -> Result<(), Mismatch> {
    walk_activation(x, swish, got, &mut FirstMismatch)
}

/// The walk of [`check_activation`].
pub(crate) fn walk_activation<E: Element>(
    x: &[E],
    swish: bool,
    got: &[E],
    judge: &mut impl Judge,
) -> Result<(), Mismatch> {
    assert_eq!(got.len(), x.len(), "`got` must have the length of `x`");
    let x = &widen(x)[..];
    let exact = if swish { crate::swish(x) } else { crate::sigmoid(x) };
    for (index, (&y, &e)) in got.iter().zip(&exact).enumerate() {
        if e.abs() < f32::MIN_POSITIVE as f64 {
            judge.within_either(index, y, e, Bound::Ulps(3), Bound::Abs(f32::MIN_POSITIVE as f64))?;
        } else {
            judge.within(index, y, e, Bound::Ulps(3))?;
        }
    }
    Ok(())
}

/// Scores above this magnitude may overflow f32 inside a kernel; the bounds exclude them.
const OVERFLOW_GUARD: f64 = 1e37;

/// Checks the output (and the scores output, if given) of `kernels::attention` against the
/// documented bound. With `u = 2⁻²⁴`, `A_ij = |scale|·Σ_d |Q_id·K_jd| + |P_ij|`, `σ = 1/(ℓ+1)`,
/// `λ = max(1, |scale|)` and `E_i = max_j (Dk + 4)·(u·σ·A_ij + λ·2⁻¹⁵⁰) + 2u·|Ẑ_ij|` over the
/// unmasked keys of row `i`:
///
/// ```text
/// |S_ij − Ŝ_ij| ≤ (Dk + 2)·(u·A_ij + λ·2⁻¹⁵⁰)               (scores output, CarriedScores::Raw)
/// |Z_ij − Ẑ_ij| ≤ (Dk + 4)·(u·σ·A_ij + λ·2⁻¹⁵⁰) + 2u·|Ẑ_ij|  (CarriedScores::Masked; −∞ where masked)
/// |O_id − Ô_id| ≤ Σ_j ŵ_ij·|V_jd|·((1 + expm1(2E_i))·(1 + (|Ẑ_ij − m̂_i| + 3Lk + 16)·u) − 1)
///                 + Lk·2⁻¹²⁶·max_j |V_jd| + (3Lk + 16)·2⁻¹⁵⁰
/// ```
///
/// NaN and fully masked rows must match exactly. Where ±∞ in V makes the exact output ±∞,
/// the kernel gives the same infinity or NaN; where a masked key within the valid length
/// holds ±∞ or NaN in V, the column may be NaN (a multiplying kernel meets it as `0·∞`).
/// Rows with a score, or an unscaled dot product `Σ_d |Q_id·K_jd|`, of magnitude ≥ 10³⁷, and
/// output columns with `Lk·max_j |V_jd| ≥ 10³⁷`, are not checked: the f32 computation may
/// overflow there (the scores, or the unnormalized sum `Σ p·V`), which the bound excludes.
///
/// `q`, `k`, `v` and `out` are in the storage type `E` of the kernel's tensors (the inputs are
/// widened exactly); the options (mask, previous scores `P`) and the `scores` output are f32.
/// For f16 and bf16, each element of `out` must be the rounding to `E` of an f32 within the
/// bound (see [`crate::Element`]); exact matches are against the f32 value rounded to `E`.
pub fn check_attention<E: Element>(
    shape: &AttentionShape,
    q: &[E],
    k: &[E],
    v: &[E],
    opts: &AttentionOptions,
    out: &[E],
    scores: Option<&[f32]>,
) -> Result<(), Mismatch> {
    walk_attention(shape, q, k, v, opts, out, scores, &mut FirstMismatch)
}

/// The walk of [`check_attention`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn walk_attention<E: Element>(
    shape: &AttentionShape,
    q: &[E],
    k: &[E],
    v: &[E],
    opts: &AttentionOptions,
    out: &[E],
    scores: Option<&[f32]>,
    judge: &mut impl Judge,
) -> Result<(), Mismatch> {
    let v = &widen(v)[..];
    let res = attention(shape, &widen(q), &widen(k), v, opts);
    let AttentionShape {
        batch,
        heads,
        kv_heads,
        q_len,
        kv_len,
        head_dim,
        value_dim,
    } = *shape;
    assert_eq!(out.len(), res.out.len(), "`out` must have the length of the output");
    let group = heads / kv_heads;
    let dk = head_dim as f64;
    let lk = kv_len as f64;
    let sigma = res.mean_factor;
    // λ·2⁻¹⁵⁰: the dot product is accumulated unscaled, so its roundings in the subnormal range
    // reach the score multiplied by the scale (a fuzz find: a subnormal score with a scale of
    // ~10³ erred by 500 subnormal steps, beyond a bound of `(Dk + 2)·2⁻¹⁵⁰`).
    let scale = opts.scale.map_or(1.0 / dk.sqrt(), |s| s as f64);
    let tiny = scale.abs().max(1.0) * SUBNORMAL_HALF_ULP;
    for b in 0..batch {
        let valid = opts.key_lengths.map_or(kv_len, |l| l[b].min(kv_len));
        for h in 0..heads {
            let hk = h / group;
            let vrow = |j: usize| &v[((b * kv_heads + hk) * kv_len + j) * value_dim..][..value_dim];
            for i in 0..q_len {
                let row = ((b * heads + h) * q_len + i) * kv_len;
                let unmasked = |j: &usize| res.masked_scores[row + j] != f64::NEG_INFINITY;
                // The dot product is accumulated before it is scaled: it must not overflow
                // either, whatever the scale.
                let guarded = (0..kv_len).any(|j| {
                    res.magnitude[row + j] >= OVERFLOW_GUARD
                        || res.dot_magnitude[row + j] >= OVERFLOW_GUARD
                        || res.masked_scores[row + j].abs() >= OVERFLOW_GUARD && unmasked(&j)
                });
                if guarded {
                    continue;
                }
                if let Some(scores) = scores {
                    for j in 0..kv_len {
                        let (got, exact, a) = (scores[row + j], res.scores[row + j], res.magnitude[row + j]);
                        if !exact.is_finite() {
                            judge.exact(row + j, got, exact)?;
                            continue;
                        }
                        // Each rounding whose result is subnormal errs by up to 2⁻¹⁵⁰ absolute,
                        // and those of the dot product are then multiplied by the scale.
                        let bound = if opts.carry_masked {
                            (dk + 4.0) * U * sigma * a + 2.0 * U * exact.abs() + (dk + 4.0) * tiny
                        } else {
                            (dk + 2.0) * U * a + (dk + 2.0) * tiny
                        };
                        judge.within(row + j, got, exact, Bound::Abs(bound))?;
                    }
                }
                let e = (0..kv_len)
                    .filter(unmasked)
                    .map(|j| {
                        (dk + 4.0) * (U * sigma * res.magnitude[row + j] + tiny)
                            + 2.0 * U * res.masked_scores[row + j].abs()
                    })
                    .fold(0.0, f64::max);
                let m = (0..kv_len)
                    .filter(unmasked)
                    .map(|j| res.masked_scores[row + j])
                    .fold(f64::NEG_INFINITY, f64::max);
                // ln d̂, for the weights that underflow f64 (below).
                let ln_d = (0..kv_len)
                    .filter(unmasked)
                    .map(|j| (res.masked_scores[row + j] - m).exp())
                    .sum::<f64>()
                    .ln();
                let orow = ((b * heads + h) * q_len + i) * value_dim;
                for d in 0..value_dim {
                    let (got, exact) = (out[orow + d], res.out[orow + d]);
                    if got.to_f32().is_nan() && !exact.is_nan() {
                        // A non-finite V meets a weight of 0 (masked, or underflowed) as NaN:
                        // allowed where the exact output is infinite, or where a masked key
                        // within the valid length holds a non-finite V in this column.
                        let masked_non_finite = (0..valid)
                            .any(|j| res.masked_scores[row + j] == f64::NEG_INFINITY && !vrow(j)[d].is_finite());
                        if exact.is_infinite() || masked_non_finite {
                            continue;
                        }
                    }
                    if !exact.is_finite() || m == f64::NEG_INFINITY {
                        judge.exact(orow + d, got, exact)?;
                        continue;
                    }
                    let mut bound = 0.0;
                    let mut vmax = 0.0f64;
                    for j in 0..valid {
                        let vj = (vrow(j)[d] as f64).abs();
                        vmax = vmax.max(vj);
                        let w = res.weights[row + j];
                        let z = res.masked_scores[row + j];
                        if vj > 0.0 && z != f64::NEG_INFINITY {
                            let grow = 1.0 + ((z - m).abs() + 3.0 * lk + 16.0) * U;
                            if w > 0.0 {
                                let rel = (1.0 + (2.0 * e).exp_m1()) * grow - 1.0;
                                // `vj·rel` first: `w·vj` may underflow to 0 where `rel` is ∞
                                // (0·∞ = NaN; a fuzz find).
                                bound += w * (vj * rel);
                            } else {
                                // ŵ underflows f64, but a score error E can still give the key
                                // a weight up to ŵ·e^{2E}: evaluated in the log domain (a fuzz
                                // find, with scores near 10²⁰ and E near 10¹⁵).
                                bound += vj * (z - m - ln_d + 2.0 * e).exp() * grow;
                            }
                        }
                    }
                    if vmax * lk >= OVERFLOW_GUARD {
                        // The unnormalized sum Σ p·V may overflow f32; the bound excludes it.
                        continue;
                    }
                    // Flushed weights, and roundings in the subnormal range (≤ 2⁻¹⁵⁰ each).
                    bound += lk * f32::MIN_POSITIVE as f64 * vmax + (3.0 * lk + 16.0) * SUBNORMAL_HALF_ULP;
                    judge.within(orow + d, got, exact, Bound::Abs(bound))?;
                }
            }
        }
    }
    Ok(())
}

/// Checks the output of `kernels::gau` against the oracle's running error bound
/// ([`crate::gau`]): `|O − Ô| ≤ bound` on every element; NaN where the oracle is NaN.
///
/// `x` and `out` are in the storage type `E` (`x` is widened exactly); every weight, γ, β
/// and bias in `params` is f32. For f16 and bf16, each element of `out` must be the rounding
/// to `E` of an f32 within the bound (see [`crate::Element`]).
pub fn check_gau<E: Element>(shape: &GauShape, x: &[E], params: &GauParams, out: &[E]) -> Result<(), Mismatch> {
    walk_gau(shape, x, params, out, &mut FirstMismatch)
}

/// The walk of [`check_gau`].
pub(crate) fn walk_gau<E: Element>(
    shape: &GauShape,
    x: &[E],
    params: &GauParams,
    out: &[E],
    judge: &mut impl Judge,
) -> Result<(), Mismatch> {
    let res = gau(shape, &widen(x), params);
    assert_eq!(out.len(), res.out.len(), "`out` must have the length of the output");
    for (index, ((&got, &exact), &bound)) in out.iter().zip(&res.out).zip(&res.bound).enumerate() {
        if !exact.is_finite() || !bound.is_finite() {
            if exact.is_nan() {
                judge.exact(index, got, exact)?;
            }
            continue;
        }
        judge.within(index, got, exact, Bound::Abs(bound))?;
    }
    Ok(())
}
