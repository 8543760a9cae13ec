//! Sigmoid and swish (SiLU), written once over [`Simd`] on top of [`exp`](super::exp).
//!
//! `σ(x) = 1/(1 + e⁻ˣ)` and `swish(x) = x·σ(x)`, computed from `t = e^−|x|` (which cannot
//! overflow) as `σ = (x < 0 ? t : 1)/(1 + t)` and `swish = (x < 0 ? x·t : x)/(1 + t)`, with
//! `t` carried scaled by 2⁶⁴ (exactly) so that it keeps full precision where the results are
//! normal: one `exp` (≤ 1 ulp), one add, one division and (swish, x < 0) one product, each
//! rounding once. The documented bound, 3 ulp, is checked on a dense sample of all floats (every 251st
//! bit pattern) for every ISA; below 2⁻¹²⁶ the results may lose precision gradually (`t` is
//! subnormal) and are bounded by 2⁻¹²⁶ absolute.
//!
//! Special values: `σ(NaN) = swish(NaN) = NaN`, `σ(+∞) = 1`, `σ(−∞) = 0`, `swish(+∞) = +∞`,
//! `swish(−∞) = −0` (the limit; `−∞/∞` would be NaN).

use super::exp::exp_scaled;
use crate::element::Element;
use crate::simd::Simd;

/// The power of two that keeps `e^−|x|` normal wherever `swish(x)` is.
const SCALE: f32 = 64.0;

/// `(t·2⁶⁴, 1 + t)` with `t = e^−|x|`, and the lanes where `x < 0`. `t ≤ 1` never overflows,
/// and scaled by 2⁶⁴ it stays normal (full precision) where `σ` or `swish` are normal.
#[inline(always)]
fn parts<S: Simd>(s: S, x: S::V) -> (S::V, S::V, S::M) {
    // `min(x, −x) = −|x|`, NaN-preserving because `x` is the first operand.
    let t_scaled = exp_scaled(s, s.min(x, s.sub(s.splat(0.0), x)), SCALE);
    let t = s.mul(t_scaled, s.splat(SCALE.exp2().recip()));
    (t_scaled, s.add(s.splat(1.0), t), s.lt(x, s.splat(0.0)))
}

/// `σ(x) = 1/(1 + e⁻ˣ) = (x < 0 ? t : 1)/(1 + t)`.
#[inline(always)]
pub(crate) fn sigmoid<S: Simd>(s: S, x: S::V) -> S::V {
    let (t_scaled, one_plus_t, negative) = parts(s, x);
    let unscale = s.splat(SCALE.exp2().recip());
    // Dividing before unscaling: the one rounding into the subnormals comes last.
    let y = s.div(s.select(negative, t_scaled, s.splat(SCALE.exp2())), one_plus_t);
    s.mul(y, unscale)
}

/// `swish(x) = x·σ(x) = (x < 0 ? x·t : x)/(1 + t)`, with `swish(−∞) = −0`.
#[inline(always)]
pub(crate) fn swish<S: Simd>(s: S, x: S::V) -> S::V {
    let (t_scaled, one_plus_t, negative) = parts(s, x);
    // One division for both signs: the numerator and the unscaling factor are selected
    // (`x < 0`: `x·t·2⁶⁴` then `·2⁻⁶⁴`; otherwise `x` then `·1`, exact), the same roundings
    // as dividing each sign's numerator apart.
    let numerator = s.select(negative, s.mul(x, t_scaled), x);
    let unscale = s.select(negative, s.splat(SCALE.exp2().recip()), s.splat(1.0));
    let y = s.mul(s.div(numerator, one_plus_t), unscale);
    s.select(s.eq(x, s.splat(f32::NEG_INFINITY)), s.splat(-0.0), y)
}

/// [`sigmoid`] and [`swish`] as [`super::Map`]s.
#[derive(Clone, Copy)]
pub(crate) struct Sigmoid;
#[derive(Clone, Copy)]
pub(crate) struct Swish;

impl<S: Simd> super::Map<S> for Sigmoid {
    #[inline(always)]
    fn apply(self, s: S, x: S::V) -> S::V {
        sigmoid(s, x)
    }
}

impl<S: Simd> super::Map<S> for Swish {
    #[inline(always)]
    fn apply(self, s: S, x: S::V) -> S::V {
        swish(s, x)
    }
}

impl super::Elementwise for Sigmoid {
    #[inline(always)]
    unsafe fn row<S: Simd, A: Element, B: Element>(self, s: S, src: *const A, dst: *mut B, n: usize) {
        // SAFETY: forwarded from the caller.
        unsafe { super::map_row(s, src, dst, n, self) }
    }
}

impl super::Elementwise for Swish {
    #[inline(always)]
    unsafe fn row<S: Simd, A: Element, B: Element>(self, s: S, src: *const A, dst: *mut B, n: usize) {
        // SAFETY: forwarded from the caller.
        unsafe { super::map_row(s, src, dst, n, self) }
    }
}
