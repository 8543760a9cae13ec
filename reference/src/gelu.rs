//! GELU in f64, in its two forms, and the checks of `kernels::gelu` and `kernels::gelu_tanh`.

use crate::check::{FirstMismatch, Judge, Mismatch};
use crate::element::{widen, Bound, Element};

/// `gelu(x) = x·Φ(x)` of each element in f64, `Φ(x) = erfc(−x/√2)/2` (the tail computed as
/// such, so the negative half keeps its relative precision), with the limit `gelu(−∞) = −0`.
pub fn gelu(x: &[f32]) -> Vec<f64> {
    x.iter()
        .map(|&v| {
            let v = v as f64;
            if v == f64::NEG_INFINITY {
                -0.0
            } else {
                v * libm::erfc(-v * std::f64::consts::FRAC_1_SQRT_2) / 2.0
            }
        })
        .collect()
}

/// The argument of the tanh form's sigmoid, `v = √(8/π)·(x + 0.044715x³)`, in f64.
pub fn gelu_tanh_arg(x: f32) -> f64 {
    let x = x as f64;
    (8.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)
}

/// `gelu_tanh(x) = ½x·(1 + tanh(√(2/π)·(x + 0.044715x³)))` of each element in f64, computed as
/// `x·σ(v)` (equal, by `1 + tanh(z) = 2σ(2z)`, and without cancellation), with the limit
/// `gelu_tanh(−∞) = −0`.
pub fn gelu_tanh(x: &[f32]) -> Vec<f64> {
    x.iter()
        .map(|&v| {
            if v == f32::NEG_INFINITY {
                -0.0
            } else {
                v as f64 / (1.0 + (-gelu_tanh_arg(v)).exp())
            }
        })
        .collect()
}

/// Checks `kernels::gelu`: every element within 6 ulp of the f64 value rounded to f32, or
/// within 2⁻¹²⁶ where the exact magnitude is below 2⁻¹²⁶; NaN for NaN. `x` and `got` are in the
/// storage type `E` (for f16 and bf16, the bound plus one rounding to `E`).
pub fn check_gelu<E: Element>(x: &[E], got: &[E]) -> Result<(), Mismatch> {
    walk_gelu(x, got, &mut FirstMismatch)
}

/// The walk of [`check_gelu`].
pub(crate) fn walk_gelu<E: Element>(x: &[E], got: &[E], judge: &mut impl Judge) -> Result<(), Mismatch> {
    assert_eq!(got.len(), x.len(), "`got` must have the length of `x`");
    let x = widen(x);
    walk(&gelu(&x), got, |_| 6, judge)
}

/// Checks `kernels::gelu_tanh`: every element within `4 + 3|v|` ulp of the f64 value rounded
/// to f32 (`v` = [`gelu_tanh_arg`]: the f32 rounding of `v` moves `σ(v)` by up to `|v|` times
/// its relative error where `v` is negative), or within 2⁻¹²⁶ where the exact magnitude is below
/// 2⁻¹²⁶; NaN for NaN.
pub fn check_gelu_tanh<E: Element>(x: &[E], got: &[E]) -> Result<(), Mismatch> {
    walk_gelu_tanh(x, got, &mut FirstMismatch)
}

/// The walk of [`check_gelu_tanh`].
pub(crate) fn walk_gelu_tanh<E: Element>(x: &[E], got: &[E], judge: &mut impl Judge) -> Result<(), Mismatch> {
    assert_eq!(got.len(), x.len(), "`got` must have the length of `x`");
    let x = widen(x);
    let ulps = |i: usize| {
        let v = gelu_tanh_arg(x[i]).abs();
        if v.is_finite() {
            4 + (3.0 * v).ceil().min(1e12) as u64
        } else {
            4
        }
    };
    walk(&gelu_tanh(&x), got, ulps, judge)
}

/// Each `got[i]` within `ulps(i)` of `exact[i]`, or 2⁻¹²⁶ absolute below 2⁻¹²⁶.
fn walk<E: Element>(
    exact: &[f64],
    got: &[E],
    ulps: impl Fn(usize) -> u64,
    judge: &mut impl Judge,
) -> Result<(), Mismatch> {
    let tiny = f32::MIN_POSITIVE as f64;
    for (index, (&y, &e)) in got.iter().zip(exact).enumerate() {
        if e.abs() < tiny {
            judge.within_either(index, y, e, Bound::Ulps(ulps(index)), Bound::Abs(tiny))?;
        } else {
            judge.within(index, y, e, Bound::Ulps(ulps(index)))?;
        }
    }
    Ok(())
}
