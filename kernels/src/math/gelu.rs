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
//! `x ≤ 0` and `x − x·Φ(−a)` for `x > 0`. Computing the tail, not `½(1 + erf(x/√2))`, keeps
//! the relative precision of the negative half, where `1 + erf` would cancel (PyTorch's f32
//! GELU loses every digit below `x ≈ −5` that way).
//! - `x` is first clamped to `±13.25`: past it `e^(−a²/2) < 0.65·2⁻¹²⁶` flushes to +0, and
//!   `|x·Φ(x)|` for `x < −13.25` is below 2⁻¹²⁷, so the negative half rounds to −0 there, and
//!   the positive half is `x` (also for `+∞`, and `−∞` needs no special case).
//! - `G(a) = d·Q(s)` with `d = 1/(a + 3)`, `s = 7.359375·d − 1.453125 ∈ [−1, 1]` (both constants
//!   exact in f32) and `Q` a degree-10 minimax polynomial (relative error 0.28·2⁻²⁴ with its f32
//!   coefficients; fit by `scripts/fit_gelu_poly.py`). In `d` the function is smooth over the
//!   whole range, so one division replaces a table of intervals, and `s` costs one FMA.
//! - `e^(−a²/2)` is computed from `−a²/2 = h + h_l` split exactly by an FMA, `h_l` added to the
//!   reduced argument of the exponential: the rounding of `a²` alone would cost `a²/2` ulp (50
//!   ulp at `x = −10`).
//!
//! **tanh form.** `x·σ(v)` with the crate's sigmoid; `v = x·(c₁ + c₂x²)` is rounded in f32, and
//! `σ`'s relative sensitivity to its argument is `1 − σ(v) ≤ 1`, so the error grows by about
//! `3|v|` ulp where `v` is large and negative (the tail, where the result is tiny). Carrying `v`
//! in two floats would take about twenty more operations a vector.
//!
//! **Rows.** Both forms are long chains of dependent operations, so the public rows compute
//! two vectors in lockstep ([`Lockstep`](crate::simd::lockstep::Lockstep)): the core then has
//! independent work beside each step. The values are those of one vector at a time.
//!
//! # Bounds
//!
//! Against the form's own formula in f64 (`reference::gelu`, `reference::gelu_tanh`):
//! `gelu` within 6 ulp, `gelu_tanh` within `4 + 3|v|` ulp; below 2⁻¹²⁶ in magnitude, within
//! 2⁻¹²⁶ absolute (the products round into the subnormals). Checked on a dense sample of all
//! floats on every ISA (`tests/gelu.rs`). Special values: NaN gives NaN, `+∞` gives `+∞`,
//! `−∞` gives `−0` (the limit).

use super::activation::sigmoid;
use super::exp::exp_nonpositive_sum;
use super::Map;
use crate::element::Element;
use crate::simd::Simd;

/// `Q(s)`, highest degree first: `G(a) = d·Q(s)` (see the module docs).
const TAIL: [f32; 11] = [
    7.0393307e-6,
    -4.8670845e-6,
    -7.399134e-5,
    0.0001318539,
    0.0006078119,
    -0.0018717677,
    -0.007144111,
    0.020225624,
    0.16859856,
    0.48822755,
    0.8312963,
];

/// `s = ALPHA·d + BETA` maps `d = 1/(a + 3)`, `a ∈ [0, CLAMP]`, onto `[−1, 1]`.
const ALPHA: f32 = 7.359_375;
const BETA: f32 = -1.453_125;

/// Where `|x|` is clamped (module docs): `−CLAMP²/2 ≥ −88`, the domain of
/// [`exp_nonpositive_sum`].
const CLAMP: f32 = 13.25;

/// `|x|` clamped to `CLAMP`, NaN for NaN, and `x` clamped likewise.
#[inline(always)]
fn clamped<S: Simd>(s: S, x: S::V) -> (S::V, S::V) {
    // `x` is the first operand of `max`/`min`, so a NaN survives.
    let x = s.min(s.max(x, s.splat(-CLAMP)), s.splat(CLAMP));
    (s.max(x, s.sub(s.splat(0.0), x)), x)
}

/// `Φ(−a)` for `a ∈ [0, CLAMP]` as the two factors `(e^(−a²/2), G(a))` (NaN for NaN): `gelu`
/// multiplies `x` by `G` first, so that near the underflow the product keeps the bits that `e·G`
/// alone would round away.
#[inline(always)]
pub(crate) fn normal_tail<S: Simd>(s: S, a: S::V) -> (S::V, S::V) {
    // `−a²/2 = h + h_l` exactly (`−a/2` is exact).
    let na = s.mul(a, s.splat(-0.5));
    let h = s.mul(na, a);
    let h_l = s.mul_add(na, a, s.mul(h, s.splat(-1.0)));
    let e = exp_nonpositive_sum(s, h, h_l);
    let d = s.div(s.splat(1.0), s.add(a, s.splat(3.0)));
    let arg = s.mul_add(d, s.splat(ALPHA), s.splat(BETA));
    let mut q = s.splat(TAIL[0]);
    for &c in &TAIL[1..] {
        q = s.mul_add(q, arg, s.splat(c));
    }
    (e, s.mul(d, q))
}

/// `gelu(x) = x·Φ(x)`.
#[inline(always)]
pub(crate) fn gelu<S: Simd>(s: S, x: S::V) -> S::V {
    let (a, xc) = clamped(s, x);
    let (e, g) = normal_tail(s, a);
    // `x·Φ(−a)`: `x·g` first, see `normal_tail`.
    let below = s.mul(s.mul(xc, g), e);
    // `x > 0`: `x − x·Φ(−x)`, with `x·Φ(−x) ≤ x/2`, so no digit cancels; `x` unclamped, so
    // that `+∞` stays. `x ≤ 0` (`−0`, NaN too): `x·Φ(x)`.
    s.select(s.lt(s.splat(0.0), x), s.sub(x, below), below)
}

/// `Φ(y)`, the standard normal distribution function: the tail `e·g` for `y < 0` (within the
/// 6 ulp of `gelu`'s negative half, which rounds once more), `1 − e·g` otherwise (the tail is
/// at most ½, so its error is at most 3 ulp of the result, plus the subtraction's rounding):
/// within 8 ulp, or 2⁻¹²⁶ absolute below 2⁻¹²⁶. `Φ(−∞) = 0`, `Φ(∞) = 1`, NaN for NaN.
#[inline(always)]
pub(crate) fn normal_cdf<S: Simd>(s: S, y: S::V) -> S::V {
    let (e, g) = normal_tail(s, clamped(s, y).0);
    let tail = s.mul(e, g);
    s.select(s.lt(y, s.splat(0.0)), tail, s.sub(s.splat(1.0), tail))
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

/// Vectors a GELU row computes in lockstep ([`super::map_row_lockstep`]): its chains (the
/// division, the polynomial, the exponential) are long enough that two independent vectors
/// step by step keep more of the core's ports busy. Two measured faster than one and than four
/// on AVX2, whose sixteen registers four of them overflow.
const LOCKSTEP: usize = 2;

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
        unsafe { super::map_row_lockstep::<S, A, B, LOCKSTEP>(s, src, dst, n, self) }
    }
}

impl super::Elementwise for GeluTanh {
    #[inline(always)]
    unsafe fn row<S: Simd, A: Element, B: Element>(self, s: S, src: *const A, dst: *mut B, n: usize) {
        // SAFETY: forwarded from the caller.
        unsafe { super::map_row_lockstep::<S, A, B, LOCKSTEP>(s, src, dst, n, self) }
    }
}
