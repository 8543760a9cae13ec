//! Vectorized `exp`, written once over [`Simd`].
//!
//! # Algorithm
//!
//! Cody–Waite range reduction `x = n·ln 2 + r` with `n = round(x·log₂e)` and
//! `|r| ≤ ln2/2`, then `exp(x) = 2ⁿ·p(r)` with `p` a degree-6 minimax polynomial.
//!
//! - Rounding: one FMA adds `x·log₂e` to a shifter constant (`1.5·2²³ + 127`) whose sum
//!   rounds to an integer, and one subtraction takes `n` back, exactly; the sum's low bits
//!   are also `2ⁿ`'s exponent field, which [`exp_nonpositive`] shifts into place.
//! - Reduction: `r = x − n·LN2_HI` is exact when computed with one FMA (`LN2_HI` is `ln 2`
//!   rounded to f32, `n·LN2_HI` is a multiple of 2⁻²⁴ and `|r| < 2⁻¹·ln 2` fits 24 bits);
//!   the second step `r −= n·LN2_LO` rounds once, a relative error ≤ 2⁻²⁴ on `r`.
//! - Polynomial: relative error 1.9·10⁻⁹ with exact coefficients, 0.29·2⁻²⁴ after rounding
//!   them to f32 (fit by `scripts/fit_exp_poly.py 6`, a Remez exchange on relative error);
//!   Horner with FMA adds ≲ 0.6 ulp of rounding.
//! - Scaling by `2ⁿ`: [`Simd::ldexp`] (one `vscalefps` on AVX-512, two exact power-of-two
//!   products elsewhere), so results underflow gradually and overflow to +∞ correctly.
//!
//! Bound: ≤ 1 ulp against `exp` in f64 rounded to f32, normal and subnormal results alike;
//! `tests/exp_exhaustive.rs` checks it on all 2³² inputs for every ISA (measured: 1 ulp on
//! scalar, AVX2 and AVX-512, the worst case near x = 6.6·10⁻⁷).
//!
//! # Special values
//!
//! `exp(NaN) = NaN`, `exp(+∞) = +∞`, `exp(−∞) = +0`; `x > 88.72` overflows to +∞ and
//! `x < −103.97` underflows to +0, as the correctly rounded function does.
//!
//! [`exp_nonpositive`] is the cheaper form softmax uses on `x ≤ 0`: no upper clamp and a
//! one-instruction `2ⁿ`, at the price of flushing results below 2⁻¹²⁶ (the smallest normal
//! f32, reached near `x = −87.3`) to +0. Its error is the same for normal results: it shares
//! `exp`'s reduction and polynomial, and its scaling by `2ⁿ` is exact there.

use crate::element::Element;
use crate::simd::Simd;

/// `ln 2` rounded to f32 (0x3f317218).
const LN2_HI: f32 = std::f32::consts::LN_2;
/// `ln 2 − LN2_HI`, rounded to f32.
const LN2_LO: f32 = -1.904_654_3e-9;

/// Coefficients of `p(r) ≈ exp(r)` on `[−ln2/2, ln2/2]`, constant term first: minimax in
/// relative error, from `scripts/fit_exp_poly.py 6` (rounded to f32 there).
const P: [f32; 7] = [
    1.0,
    1.0,
    0.499_999_9,
    0.166_664_2,
    0.041_668_225,
    0.008_374_816,
    0.001_383_684_6,
];

/// `p(r)` by Horner's rule with FMA.
#[inline(always)]
fn poly<S: Simd>(s: S, r: S::V) -> S::V {
    let mut p = s.splat(P[6]);
    for &c in P[..6].iter().rev() {
        p = s.mul_add(p, r, s.splat(c));
    }
    p
}

/// `1.5·2²³ + 127`: added to `x·log₂e` (`|x·log₂e| < 2²¹`), it lands the sum in
/// `[2²³, 2²⁴)`, where f32 values are the integers, so the sum rounds `x·log₂e` to an integer
/// `n` and its low mantissa bits hold `n + 127`, the biased exponent of `2ⁿ`.
const SHIFTER: f32 = 12_582_912.0 + 127.0;

/// `(t, n, r)` with `x = n·ln 2 + r`: `n = round(x·log₂e)` (rounded once, from the exact
/// product), `t = n + SHIFTER` (for [`Simd::pow2_of_shifted`]), `|r| ≤ ln2/2` to within
/// rounding.
#[inline(always)]
fn reduce<S: Simd>(s: S, x: S::V) -> (S::V, S::V, S::V) {
    let t = s.mul_add(x, s.splat(std::f32::consts::LOG2_E), s.splat(SHIFTER));
    // Exact: `t` and `SHIFTER` are integers below 2²⁴.
    let n = s.sub(t, s.splat(SHIFTER));
    let r = s.mul_add(n, s.splat(-LN2_HI), x);
    let r = s.mul_add(n, s.splat(-LN2_LO), r);
    (t, n, r)
}

/// `eˣ` on every lane; see the module docs for the bound and special values.
#[inline(always)]
pub(crate) fn exp<S: Simd>(s: S, x: S::V) -> S::V {
    exp_scaled(s, x, 0.0)
}

/// `eˣ·2ᵏ` for an integral `k ∈ [−98, 98]`, with the rounding of `exp` (the scaling moves the
/// exponent only): a result that `exp` would give as a subnormal keeps full precision here.
#[inline(always)]
pub(crate) fn exp_scaled<S: Simd>(s: S, x: S::V, k: f32) -> S::V {
    // Clamp so that n + k ∈ [−150, 254] stays in `ldexp`'s range: below the lower end `eˣ·2ᵏ`
    // rounds to 0, above 89 `eˣ` alone overflows. `x` is the first operand of `max`/`min`, so a
    // NaN survives.
    let lowest = -104.0 - k * std::f32::consts::LN_2;
    let x = s.min(s.max(x, s.splat(lowest)), s.splat(89.0));
    let (_, n, r) = reduce(s, x);
    s.ldexp(poly(s, r), s.add(n, s.splat(k)))
}

/// `eˣ` for `x ≤ 0` (or −∞, or NaN), flushing results below 2⁻¹²⁶ to +0.
#[inline(always)]
pub(crate) fn exp_nonpositive<S: Simd>(s: S, x: S::V) -> S::V {
    // Below −88, n reaches −127 and `2ⁿ` is the +0 that the flush needs.
    let x = s.max(x, s.splat(-88.0));
    let (t, _, r) = reduce(s, x);
    s.mul(poly(s, r), s.pow2_of_shifted(t))
}

/// `e^(x + x_lo)` for `x ∈ [−88, 0]` (or NaN) and `|x_lo| ≤ 2⁻²³·|x|`, a value carried in two
/// floats; results below 2⁻¹²⁶ flush to +0 as in [`exp_nonpositive`]. `x_lo` joins the reduced
/// argument, where it is not lost to the rounding of `x`: the error is `exp`'s.
#[inline(always)]
pub(crate) fn exp_nonpositive_sum<S: Simd>(s: S, x: S::V, x_lo: S::V) -> S::V {
    let (t, _, r) = reduce(s, x);
    s.mul(poly(s, s.add(r, x_lo)), s.pow2_of_shifted(t))
}

/// [`exp`] as a [`super::Map`].
#[derive(Clone, Copy)]
pub(crate) struct Exp;

impl<S: Simd> super::Map<S> for Exp {
    #[inline(always)]
    fn apply(self, s: S, x: S::V) -> S::V {
        exp(s, x)
    }
}

impl super::Elementwise for Exp {
    #[inline(always)]
    unsafe fn row<S: Simd, A: Element, B: Element>(self, s: S, src: *const A, dst: *mut B, n: usize) {
        // SAFETY: forwarded from the caller.
        unsafe { super::map_row(s, src, dst, n, self) }
    }
}
