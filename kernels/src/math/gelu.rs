//! GELU in its two forms, written once over [`Simd`].
//!
//! - erf form: `gelu(x) = x·Φ(x)`, `Φ` the standard normal distribution function;
//! - tanh form: `gelu_tanh(x) = ½x·(1 + tanh(√(2/π)·(x + 0.044715x³))) = x·σ(v)` with
//!   `v = √(8/π)·(x + 0.044715x³)` (the identity `1 + tanh(z) = 2σ(2z)`).
//!
//! # Algorithm
//!
//! **erf form.** With `a = |x|`, the lower tail `Φ(−a) = e^(−a²/2)·G(a)`, where `G(a) =
//! Φ(−a)·e^(a²/2)` falls smoothly from ½ to `≈ 1/(a√(2π))`; then `gelu(x) = x·Φ(−a)` for
//! `x < 0` and `x·(1 − Φ(−a))` for `x ≥ 0`. Computing the tail, not `½(1 + erf(x/√2))`, keeps
//! the relative precision of the negative half, where `1 + erf` would cancel (PyTorch's f32
//! GELU loses every digit below `x ≈ −5` that way).
//! - `G(a) = t·P(s)` with `t = 3/(3 + a)` and `P` a degree-10 minimax polynomial (relative
//!   error 0.43·2⁻²⁴ with f32 coefficients over `a ≤ 14`, beyond which `|gelu|` is below
//!   2⁻¹²⁶; fit by `scripts/fit_gelu_poly.py`) in `s = (17t − 10)/7 ∈ [−1, 1]`, where its
//!   coefficients fall fast and Horner's rounding stays small. Both `t` and `s` come from one
//!   division: `t = 21/(21 + 7a)`, `s = (21 − 10a)/(21 + 7a)`.
//! - `e^(−a²/2)` is computed from `a² = w + w_l` split exactly by an FMA, as
//!   `exp(−w/2)·(1 − w_l/2)`: the rounding of `a²` alone would cost `a²/2` ulp (50 ulp at
//!   `x = −10`).
//!
//! **tanh form.** `x·σ(v)` with the crate's sigmoid; `v = x·(c₁ + c₂x²)` is rounded in f32, and
//! `σ`'s relative sensitivity to its argument is `1 − σ(v) ≤ 1`, so the error grows by about
//! `3|v|` ulp where `v` is large and negative (the tail, where the result is tiny). Carrying `v`
//! in two floats would take about twenty more operations a vector.
//!
//! # Bounds
//!
//! Against the form's own formula in f64 (`reference::gelu`, `reference::gelu_tanh`):
//! `gelu` within 6 ulp, `gelu_tanh` within `4 + 3|v|` ulp; below 2⁻¹²⁶ in magnitude, within
//! 2⁻¹²⁶ absolute (the products round into the subnormals). Checked on a dense sample of all
//! floats on every ISA (`tests/gelu.rs`). Special values: NaN gives NaN, `+∞` gives `+∞`,
//! `−∞` gives `−0` (the limit).

use super::activation::sigmoid;
use super::exp::exp;
use super::Map;
use crate::element::Element;
use crate::simd::Simd;

/// `P(s)`, highest degree first: `G(a) = t·P(s)` (see the module docs).
const TAIL: [f32; 11] = [
    2.601_684_6e-6,
    -2.040_115_8e-6,
    -2.657_350_3e-5,
    4.929_92e-5,
    2.118_397e-4,
    -6.689_370_5e-4,
    -2.445_999_3e-3,
    7.047_019e-3,
    5.713_153e-2,
    1.632_421_2e-1,
    2.754_591_4e-1,
];

/// `Φ(−a)` for `a ≥ 0` as the two factors `(e^(−a²/2), G(a))` (NaN for NaN): the product of a
/// subnormal `e` with `G < ½` would lose the bits that `gelu`'s final product by `x` needs back.
#[inline(always)]
pub(crate) fn normal_tail<S: Simd>(s: S, a: S::V) -> (S::V, S::V) {
    // Past 15, `e^(−a²/2)` rounds to +0 and so does the tail; the clamp keeps `a²` finite
    // (`w_l` would be NaN at ∞).
    let a = s.min(a, s.splat(15.0));
    let w = s.mul(a, a);
    // `a² = w + w_l` exactly.
    let w_l = s.mul_add(a, a, s.sub(s.splat(0.0), w));
    let half = s.splat(-0.5);
    let e = exp(s, s.mul(w, half));
    // `e^(−(w + w_l)/2) = e^(−w/2)·(1 − w_l/2)` to first order (`|w_l| ≤ u·w`).
    let e = s.mul_add(e, s.mul(w_l, half), e);
    let d = s.div(s.splat(1.0), s.mul_add(a, s.splat(7.0), s.splat(21.0)));
    let arg = s.mul(s.mul_add(a, s.splat(-10.0), s.splat(21.0)), d);
    let mut p = s.splat(TAIL[0]);
    for &c in &TAIL[1..] {
        p = s.mul_add(p, arg, s.splat(c));
    }
    // `t = 21·d`.
    (e, s.mul(s.mul(d, s.splat(21.0)), p))
}

/// `gelu(x) = x·Φ(x)`.
#[inline(always)]
pub(crate) fn gelu<S: Simd>(s: S, x: S::V) -> S::V {
    let zero = s.splat(0.0);
    // `max(x, −x) = |x|`, NaN for NaN (x86's max returns the second operand, also NaN).
    let (e, g) = normal_tail(s, s.max(x, s.sub(zero, x)));
    let negative = s.lt(x, zero);
    // `x·g` first: near the underflow, `e·g` alone would be subnormal where `x·e·g` is not.
    let below = s.mul(s.mul(x, g), e);
    let above = s.mul(x, s.sub(s.splat(1.0), s.mul(e, g)));
    let y = s.select(negative, below, above);
    // `−∞·Φ(−∞) = −∞·0`: the limit is −0.
    s.select(s.eq(x, s.splat(f32::NEG_INFINITY)), s.splat(-0.0), y)
}

/// `Φ(y)`, the standard normal distribution function: the tail `e·g` for `y < 0` (within the
/// 6 ulp of `gelu`'s negative half, which rounds once more), `1 − e·g` otherwise (the tail is
/// at most ½, so its error is at most 3 ulp of the result, plus the subtraction's rounding):
/// within 8 ulp, or 2⁻¹²⁶ absolute below 2⁻¹²⁶. `Φ(−∞) = 0`, `Φ(∞) = 1`, NaN for NaN.
#[inline(always)]
pub(crate) fn normal_cdf<S: Simd>(s: S, y: S::V) -> S::V {
    let zero = s.splat(0.0);
    let (e, g) = normal_tail(s, s.max(y, s.sub(zero, y)));
    let tail = s.mul(e, g);
    s.select(s.lt(y, zero), tail, s.sub(s.splat(1.0), tail))
}

/// `√(8/π)` and `0.044715·√(8/π)`: `v = x·(C1 + C3·x²)`.
const C1: f32 = 1.595_769;
const C3: f32 = 0.071_354_82;

/// `gelu_tanh(x) = x·σ(√(8/π)·(x + 0.044715x³))`.
#[inline(always)]
pub(crate) fn gelu_tanh<S: Simd>(s: S, x: S::V) -> S::V {
    let v = s.mul(x, s.mul_add(s.mul(x, x), s.splat(C3), s.splat(C1)));
    let y = s.mul(x, sigmoid(s, v));
    s.select(s.eq(x, s.splat(f32::NEG_INFINITY)), s.splat(-0.0), y)
}

/// [`gelu`] and [`gelu_tanh`] as [`Map`]s.
#[derive(Clone, Copy)]
pub(crate) struct Gelu;
#[derive(Clone, Copy)]
pub(crate) struct GeluTanh;

impl<S: Simd> Map<S> for Gelu {
    #[inline(always)]
    fn apply(self, s: S, x: S::V) -> S::V {
        gelu(s, x)
    }
}

impl<S: Simd> Map<S> for GeluTanh {
    #[inline(always)]
    fn apply(self, s: S, x: S::V) -> S::V {
        gelu_tanh(s, x)
    }
}

impl super::Elementwise for Gelu {
    #[inline(always)]
    unsafe fn row<S: Simd, A: Element, B: Element>(self, s: S, src: *const A, dst: *mut B, n: usize) {
        // SAFETY: forwarded from the caller.
        unsafe { super::map_row(s, src, dst, n, self) }
    }
}

impl super::Elementwise for GeluTanh {
    #[inline(always)]
    unsafe fn row<S: Simd, A: Element, B: Element>(self, s: S, src: *const A, dst: *mut B, n: usize) {
        // SAFETY: forwarded from the caller.
        unsafe { super::map_row(s, src, dst, n, self) }
    }
}
