//! The storage types of the kernels' tensors (f32, f16, bf16), and the acceptance rule that
//! turns an f32 error bound into one for a result stored in a narrower type.

use half::{bf16, f16};

mod sealed {
    /// Keeps [`super::Element`] closed to the three storage types, and carries what the
    /// acceptance rule needs to tell f32 (whose rule must stay exactly what it was) apart,
    /// and the format's precision for [`super::fraction`].
    pub trait Sealed {
        const IS_F32: bool;
        /// Significand bits, the implicit one included.
        const DIGITS: i32;
        /// The exponent of the smallest normal number.
        const MIN_EXP: i32;
    }
    impl Sealed for f32 {
        const IS_F32: bool = true;
        const DIGITS: i32 = 24;
        const MIN_EXP: i32 = -126;
    }
    impl Sealed for half::f16 {
        const IS_F32: bool = false;
        const DIGITS: i32 = 11;
        const MIN_EXP: i32 = -14;
    }
    impl Sealed for half::bf16 {
        const IS_F32: bool = false;
        const DIGITS: i32 = 8;
        const MIN_EXP: i32 = -126;
    }
}

/// A storage type of the kernels' tensors: `f32`, [`half::f16`] or [`half::bf16`] (sealed).
///
/// A kernel widens its inputs to f32 exactly, computes in f32, and rounds each output once to
/// the storage type (round to nearest, ties to even; NaN stays NaN; ±∞ beyond the type's
/// range). The checks compare like with like: the f32 bound, then that one rounding.
pub trait Element: sealed::Sealed + Copy + Send + Sync + PartialEq + std::fmt::Debug + 'static {
    /// The type's name: `"f32"`, `"f16"` or `"bf16"`.
    const NAME: &'static str;
    /// The value as an f32, exactly (every f16 and bf16 is an f32).
    fn to_f32(self) -> f32;
    /// The value as an f64, exactly.
    fn to_f64(self) -> f64;
    /// `x` rounded to the type, to nearest with ties to even (`half`'s `from_f32`; NaN stays
    /// NaN, ±∞ beyond the range); the identity for f32. This is the rounding a kernel applies
    /// to each output.
    fn from_f32(x: f32) -> Self;
    /// `x` rounded to the type: `x as f32` for f32, `half`'s `from_f64` for f16 and bf16.
    ///
    /// Note: `half` 2.7's `from_f64` rounds from the top 32 bits of the f64 only, so a value
    /// a hair above a tie of the narrow type may round as if it were the tie. The checks do
    /// not use it for bounds; they round the f32 ends of the accepted interval with
    /// [`Element::from_f32`], which is exact.
    fn from_f64(x: f64) -> Self;
}

impl Element for f32 {
    const NAME: &'static str = "f32";
    #[inline]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline]
    fn from_f32(x: f32) -> Self {
        x
    }
    #[inline]
    fn from_f64(x: f64) -> Self {
        x as f32
    }
}

impl Element for f16 {
    const NAME: &'static str = "f16";
    #[inline]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[inline]
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    #[inline]
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
    #[inline]
    fn from_f64(x: f64) -> Self {
        f16::from_f64(x)
    }
}

impl Element for bf16 {
    const NAME: &'static str = "bf16";
    #[inline]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    #[inline]
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
    #[inline]
    fn from_f32(x: f32) -> Self {
        bf16::from_f32(x)
    }
    #[inline]
    fn from_f64(x: f64) -> Self {
        bf16::from_f64(x)
    }
}

/// The elements of `x` widened to f32, exactly: the values a kernel computes with.
pub fn widen<E: Element>(x: &[E]) -> Vec<f32> {
    x.iter().map(|&v| v.to_f32()).collect()
}

/// The position of `x` on a line that is monotonic in value: negative floats mirrored below
/// zero, both zeros on 0, ±∞ at the ends (±0x7f80_0000). As in [`crate::ulp_distance`].
fn ordinal(x: f32) -> i64 {
    let bits = x.to_bits() as i64;
    if bits & 0x8000_0000 != 0 {
        -(bits & 0x7fff_ffff)
    } else {
        bits
    }
}

/// The f32 at ordinal `o` (`|o| ≤ 0x7f80_0000`); `+0` at 0.
fn from_ordinal(o: i64) -> f32 {
    if o >= 0 {
        f32::from_bits(o as u32)
    } else {
        -f32::from_bits((-o) as u32)
    }
}

/// The smallest f32 `≥ x` (`−∞` for `x = −∞`, NaN for NaN).
fn f32_at_or_above(x: f64) -> f32 {
    let t = x as f32;
    if (t as f64) < x {
        t.next_up()
    } else {
        t
    }
}

/// The largest f32 `≤ x` (`+∞` for `x = +∞`, NaN for NaN).
fn f32_at_or_below(x: f64) -> f32 {
    let t = x as f32;
    if (t as f64) > x {
        t.next_down()
    } else {
        t
    }
}

/// `lo ≤ got ≤ hi` after rounding the f32 ends `lo`, `hi` to `E`, compared as f64 (false if
/// anything is NaN, or if `lo > hi`: no f32 is accepted). By monotonicity of the rounding,
/// these are exactly the `E` values that are the rounding of some f32 in `[lo, hi]`.
fn in_rounded_bracket<E: Element>(got: E, lo: f32, hi: f32) -> bool {
    let y = got.to_f64();
    lo <= hi && E::from_f32(lo).to_f64() <= y && y <= E::from_f32(hi).to_f64()
}

/// A bound of the accuracy contract on one element, as an f32 result would have to meet it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Bound {
    /// `|y − ŷ| ≤ B` (fails if anything is NaN).
    Abs(f64),
    /// Within `k` ulps of `ŷ` rounded to f32 ([`crate::ulp_error`]): NaN matches NaN only;
    /// `±∞` is one ulp beyond `±f32::MAX`.
    Ulps(u64),
}

impl Bound {
    /// `B` of [`Bound::Abs`]; NaN for a bound in ulps (as a [`crate::Mismatch`] states it).
    pub(crate) fn abs_or_nan(self) -> f64 {
        match self {
            Bound::Abs(b) => b,
            Bound::Ulps(_) => f64::NAN,
        }
    }
}

/// The acceptance rule of every check: is `got`, stored in `E`, within `bound` of `exact`?
///
/// For f32 this is the f32 rule itself, unchanged. For f16 and bf16 it is that rule plus one
/// rounding to `E`: `got` is accepted iff it is the rounding (to nearest even) of some f32 the
/// f32 rule accepts, i.e. iff `E(lo) ≤ got ≤ E(hi)` where `lo`, `hi` are the smallest and
/// largest accepted f32 values (for [`Bound::Abs`], the f32 ends of `[ŷ − B, ŷ + B]`; for
/// [`Bound::Ulps`], `ŷ` rounded to f32 and stepped `k` ulps down and up, through zero and up to
/// ±∞). A finite f32 result beyond the range of `E` (|y| > 65504 for f16) rounds to ±∞, which
/// the bracket accepts. Where `[ŷ − B, ŷ + B]` holds no f32 at all, nothing is accepted, as for
/// f32. An f32 `±∞` under [`Bound::Abs`] stands for the reals that round to it (those beyond
/// `f32::MAX` plus half an ulp): it is accepted where `[ŷ − B, ŷ + B]` reaches them, as an f32
/// sum whose exact value lies there rounds to `±∞`.
pub(crate) fn accepts<E: Element>(got: E, exact: f64, bound: Bound) -> bool {
    match bound {
        Bound::Abs(b) if E::IS_F32 => {
            let y = got.to_f64();
            // For `±∞`, the real nearest `ŷ` among those that round to it.
            let near = if y.is_infinite() {
                let (lo, hi) = rounding_interval::<E>(y);
                exact.clamp(lo, hi)
            } else {
                y
            };
            (near - exact).abs() <= b
        }
        Bound::Ulps(k) if E::IS_F32 => crate::ulp_error(got.to_f32(), exact) <= k,
        Bound::Ulps(_) if exact.is_nan() => got.to_f32().is_nan(),
        _ => {
            let (lo, hi) = f32_bracket(exact, bound);
            in_rounded_bracket(got, lo, hi)
        }
    }
}

/// Where the rounding to f32 goes to `±∞`: `f32::MAX` plus half an ulp, `(2 − 2⁻²⁴)·2¹²⁷`.
const F32_OVERFLOW: f64 = f32::MAX as f64 + (1u128 << 103) as f64;

/// The smallest and largest f32 results `bound` accepts at `exact` (NaN ends where `exact` is
/// NaN under [`Bound::Abs`]): for [`Bound::Abs`] the f32 ends of `[ŷ − B, ŷ + B]`; for
/// [`Bound::Ulps`], `ŷ` rounded to f32 and stepped `k` ulps down and up, through zero and up
/// to ±∞.
fn f32_bracket(exact: f64, bound: Bound) -> (f32, f32) {
    match bound {
        // An f32 `±∞` stands for every real past `±F32_OVERFLOW` (what rounds to it), as in
        // the f32 rule of `accepts`: it is accepted where the bound reaches that far.
        Bound::Abs(b) => (
            if exact - b <= -F32_OVERFLOW {
                f32::NEG_INFINITY
            } else {
                f32_at_or_above(exact - b)
            },
            if exact + b >= F32_OVERFLOW {
                f32::INFINITY
            } else {
                f32_at_or_below(exact + b)
            },
        ),
        Bound::Ulps(k) => {
            let o = ordinal(exact as f32);
            let k = k.min(1 << 40) as i64;
            let inf = ordinal(f32::INFINITY);
            (from_ordinal((o - k).max(-inf)), from_ordinal((o + k).min(inf)))
        }
    }
}

/// `d/b` for an error `d` and an allowance `b`, both ≥ 0: 0 where `d = 0`, +∞ where `d > 0 = b`
/// or either is NaN, 0 where `b = ∞ > d`.
fn ratio(d: f64, b: f64) -> f64 {
    if d.is_nan() || b.is_nan() {
        f64::INFINITY
    } else if d == 0.0 || (b.is_infinite() && d < b) {
        0.0
    } else {
        d / b
    }
}

/// The real values that round to `y` in `E`: `[y, y]` for a finite f32 (whose rule compares
/// `y` itself), else the midpoints between `y` and its neighbours in `E` (ties to even decided
/// by [`fraction`]'s clamp), `[MAX + half a step, ∞]` for `+∞` (f32 included).
fn rounding_interval<E: Element>(y: f64) -> (f64, f64) {
    if E::IS_F32 && y.is_finite() {
        return (y, y);
    }
    // The spacing of E's values in the binade of |v| (that of the subnormals below it).
    let spacing = |v: f64| {
        let exponent = if v == 0.0 {
            E::MIN_EXP
        } else {
            (((v.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(E::MIN_EXP)
        };
        2f64.powi(exponent - (E::DIGITS - 1))
    };
    let a = y.abs();
    let (below, above) = if a.is_infinite() {
        let max = E::from_f32(f32::MAX).to_f64();
        let max = if max.is_infinite() { f32::MAX as f64 } else { max };
        (max + spacing(max) / 2.0, f64::INFINITY)
    } else {
        let up = spacing(a);
        // At a power of two the values below are twice as dense (unless subnormal).
        let dense = a == 2f64.powi(a.log2().round() as i32) && up > spacing(0.0);
        let down = if dense { up / 2.0 } else { up };
        (a - down / 2.0, a + up / 2.0)
    };
    if y.is_sign_negative() {
        (-above, -below)
    } else {
        (below, above)
    }
}

/// The error of `got`, stored in `E`, as a fraction of the bound it is held to at `exact`:
/// the smallest error an f32 result rounding to `got` would have had (for f32, `got`'s own
/// error), divided by the f32 bound (`B`, or `k` ulps). The one rounding to `E` that the
/// contract adds for f16 and bf16 is thereby free: a result that is `ŷ` correctly rounded to
/// `E` reads 0, however far the rounding moved it (a value that underflows f16 included).
/// 0 for an exact result, +∞ for a NaN against a number.
///
/// It is at most 1 exactly where [`accepts`] holds: the ratio is clamped to that verdict, so
/// that a report built on it and a test built on `accepts` never disagree at an edge.
pub(crate) fn fraction<E: Element>(got: E, exact: f64, bound: Bound) -> f64 {
    let y = got.to_f64();
    let raw = if y.is_nan() || exact.is_nan() {
        if y.is_nan() && exact.is_nan() {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        // The point of the values rounding to `got` nearest to the exact value.
        let (lo, hi) = rounding_interval::<E>(y);
        let near = exact.clamp(lo, hi);
        match bound {
            Bound::Abs(b) => ratio((near - exact).abs(), b),
            Bound::Ulps(k) => ratio(crate::ulp_error(near as f32, exact) as f64, k as f64),
        }
    };
    if accepts(got, exact, bound) {
        raw.min(1.0)
    } else {
        raw.max(1.0f64.next_up())
    }
}

/// The fraction of [`fraction`] for a rule of exact equality ([`matches_exactly`]): 0 where
/// `got` matches, +∞ where it does not.
pub(crate) fn exact_fraction<E: Element>(got: E, want: f32) -> f64 {
    if matches_exactly(got, want) {
        0.0
    } else {
        f64::INFINITY
    }
}

/// Whether `got` equals `want` (an f32 value) rounded to `E`: bit for bit, except that any NaN
/// matches any NaN and `+0` matches `−0`. For f32, `got == want` in that sense.
pub(crate) fn matches_exactly<E: Element>(got: E, want: f32) -> bool {
    let (got, want) = (got.to_f32(), E::from_f32(want).to_f32());
    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()) || (got == 0.0 && want == 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_round_trip() {
        for x in [
            0.0,
            1.0,
            -1.0,
            f32::MAX,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::from_bits(1),
            -f32::MIN_POSITIVE,
        ] {
            assert_eq!(from_ordinal(ordinal(x)).to_bits(), x.to_bits());
        }
        assert_eq!(from_ordinal(ordinal(-0.0)).to_bits(), 0.0f32.to_bits());
    }

    #[test]
    fn f32_ends() {
        let third = 1.0f64 / 3.0;
        assert!((f32_at_or_above(third) as f64) >= third && (f32_at_or_below(third) as f64) <= third);
        assert_eq!(f32_at_or_above(third), f32_at_or_below(third).next_up());
        assert_eq!(f32_at_or_above(1.0), 1.0);
        assert_eq!(f32_at_or_below(1e300), f32::MAX);
        assert_eq!(f32_at_or_above(-1e300), -f32::MAX);
        assert_eq!(f32_at_or_below(f64::INFINITY), f32::INFINITY);
        assert!(f32_at_or_below(f64::NAN).is_nan());
    }

    #[test]
    fn half_infinity_where_the_f32_bound_reaches_overflow() {
        // A residual add past the f32 range: the f32 result is +∞, so is its rounding to E,
        // and the rule for E accepts what the rule for f32 accepts.
        let (exact, b) = (3.465_366_051_108_989e38, 6.879_727_339_467_788e31);
        assert!(accepts(f32::INFINITY, exact, Bound::Abs(b)));
        assert!(accepts(bf16::INFINITY, exact, Bound::Abs(b)));
        assert!(accepts(f16::INFINITY, exact, Bound::Abs(b)));
        assert!(accepts(bf16::NEG_INFINITY, -exact, Bound::Abs(b)));
        assert!(!accepts(bf16::NEG_INFINITY, exact, Bound::Abs(b)));
        assert!(!accepts(bf16::MAX, exact, Bound::Abs(b)));
        // Within the bound of the threshold, +∞ is accepted by both rules; beyond it, f32
        // refuses it, and bf16 still takes it as the rounding of a finite f32 near f32::MAX.
        let near = F32_OVERFLOW - b / 2.0;
        assert!(accepts(f32::INFINITY, near, Bound::Abs(b)));
        assert!(accepts(bf16::INFINITY, near, Bound::Abs(b)));
        let below = F32_OVERFLOW - 2.0 * b;
        assert!(!accepts(f32::INFINITY, below, Bound::Abs(b)));
        assert!(accepts(bf16::INFINITY, below, Bound::Abs(b)));
        assert!(!accepts(bf16::INFINITY, 3.0e38, Bound::Abs(b)));
    }

    #[test]
    fn ulp_bracket_crosses_zero() {
        // ŷ = 0: the 2-ulp f32 interval is [−2·2⁻¹⁴⁹, 2·2⁻¹⁴⁹], all of which round to ±0.
        assert!(accepts(f16::from_f32(-0.0), 0.0, Bound::Ulps(2)));
        assert!(accepts(bf16::ZERO, 0.0, Bound::Ulps(2)));
        assert!(!accepts(bf16::from_bits(1), 0.0, Bound::Ulps(2)));
        // The same rule for f32 is ulp_error.
        assert!(accepts(f32::from_bits(0x8000_0002), 0.0, Bound::Ulps(2)));
        assert!(!accepts(f32::from_bits(3), 0.0, Bound::Ulps(2)));
    }

    /// The E values that are the rounding of some f32 in `[lo, hi]`, by enumeration.
    fn roundings<E: Element>(lo: f32, hi: f32) -> Vec<f64> {
        let mut out: Vec<f64> = vec![];
        let mut r = lo;
        while r <= hi {
            let v = E::from_f32(r).to_f64();
            if out.last() != Some(&v) {
                out.push(v);
            }
            r = r.next_up();
        }
        out
    }

    /// Checks `accepts` against enumeration on E values around `exact`.
    fn brute<E: Element>(exact: f64, bound: Bound, lo: f32, hi: f32, to_bits: fn(E) -> u16, from_bits: fn(u16) -> E) {
        let want = roundings::<E>(lo, hi);
        let centre = to_bits(E::from_f64(exact));
        for bits in centre.saturating_sub(12)..=centre.saturating_add(12) {
            let y = from_bits(bits);
            if y.to_f32().is_nan() {
                continue;
            }
            let brute = want.contains(&y.to_f64());
            assert_eq!(
                accepts(y, exact, bound),
                brute,
                "{} {exact:e} {bound:?} {:e}",
                E::NAME,
                y.to_f64()
            );
        }
    }

    #[test]
    fn brackets_are_the_roundings_of_accepted_f32_values() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for i in 0..3000 {
            // Values near ties of f16 and bf16 (1 + odd multiples of 2⁻¹¹, 2⁻⁸), and random ones.
            let base = match i % 3 {
                0 => 1.0 + (2 * (next() % 512) + 1) as f64 / 2048.0,
                1 => 1.0 + (2 * (next() % 64) + 1) as f64 / 256.0,
                _ => 1.0 + (next() % (1 << 30)) as f64 / (1u64 << 30) as f64,
            };
            let exact = base + ((next() % 64) as f64 - 32.0) * 2f64.powi(-30);
            let exact = if next() % 2 == 0 { exact } else { -exact };
            let b = (next() % 300) as f64 * 2f64.powi(-26);
            let (lo, hi) = (f32_at_or_above(exact - b), f32_at_or_below(exact + b));
            brute::<f16>(exact, Bound::Abs(b), lo, hi, f16::to_bits, f16::from_bits);
            brute::<bf16>(exact, Bound::Abs(b), lo, hi, bf16::to_bits, bf16::from_bits);
            let k = next() % 40;
            let c = exact as f32;
            let (lo, hi) = (from_ordinal(ordinal(c) - k as i64), from_ordinal(ordinal(c) + k as i64));
            brute::<f16>(exact, Bound::Ulps(k), lo, hi, f16::to_bits, f16::from_bits);
            brute::<bf16>(exact, Bound::Ulps(k), lo, hi, bf16::to_bits, bf16::from_bits);
        }
    }

    /// An f32 `±∞` under an absolute bound stands for the reals beyond `MAX + 2¹⁰³` (half an
    /// ulp), which round to it: accepted exactly where the bound reaches them, with the fraction
    /// agreeing.
    #[test]
    fn f32_infinities_stand_for_the_values_that_round_to_them() {
        let threshold = 2f64.powi(128) - 2f64.powi(103);
        for sign in [1.0, -1.0] {
            let inf = (sign * f64::INFINITY) as f32;
            // Beyond the threshold: `∞` is the correctly rounded value, even with no slack.
            for exact in [threshold * 1.000001, threshold + 2f64.powi(80), 1e300] {
                assert!(accepts(inf, sign * exact, Bound::Abs(0.0)), "{exact:e}");
                assert!(!accepts(-inf, sign * exact, Bound::Abs(1e38)), "{exact:e}");
                assert_eq!(fraction(inf, sign * exact, Bound::Abs(1.0)), 0.0);
            }
            // Below it: accepted where the bound reaches the threshold, not short of it.
            let exact = threshold - 2f64.powi(100);
            assert!(accepts(inf, sign * exact, Bound::Abs(2f64.powi(100))));
            assert!(!accepts(inf, sign * exact, Bound::Abs(2f64.powi(99))));
            assert_eq!(fraction(inf, sign * exact, Bound::Abs(2f64.powi(101))), 0.5);
            assert!(fraction(inf, sign * exact, Bound::Abs(2f64.powi(99))) > 1.0);
            // A finite exact value far from the range, and NaN, never accept an infinity.
            assert!(!accepts(inf, sign * 1.0, Bound::Abs(1e30)));
            assert!(!accepts(inf, f64::NAN, Bound::Abs(f64::INFINITY)));
        }
        // NaN results are still refused under any bound.
        assert!(!accepts(f32::NAN, 1.0, Bound::Abs(f64::INFINITY)));
    }

    #[test]
    fn fractions_agree_with_acceptance() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20000 {
            let exact =
                (1.0 + (next() % (1 << 30)) as f64 / (1u64 << 30) as f64) * 2f64.powi((next() % 40) as i32 - 20);
            let b = (next() % 300) as f64 * 2f64.powi(-26) * exact;
            let k = next() % 6;
            let step = ((next() % 64) as f64 - 32.0) * 2f64.powi(-12) * exact;
            let y = (exact + step) as f32;
            for bound in [Bound::Abs(b), Bound::Ulps(k)] {
                let (a32, f32_) = (accepts(y, exact, bound), fraction(y, exact, bound));
                assert_eq!(a32, f32_ <= 1.0, "f32 {y:e} {exact:e} {bound:?} {f32_}");
                let h = f16::from_f32(y);
                assert_eq!(
                    accepts(h, exact, bound),
                    fraction(h, exact, bound) <= 1.0,
                    "f16 {exact:e} {bound:?}"
                );
                let h = bf16::from_f32(y);
                assert_eq!(
                    accepts(h, exact, bound),
                    fraction(h, exact, bound) <= 1.0,
                    "bf16 {exact:e} {bound:?}"
                );
            }
        }
    }

    #[test]
    fn fractions_measure_the_error_against_the_bound() {
        assert_eq!(fraction(1.5f32, 1.0, Bound::Abs(2.0)), 0.25);
        assert_eq!(fraction(1.0f32, 1.0, Bound::Abs(0.0)), 0.0);
        assert_eq!(fraction(1.5f32, 1.0, Bound::Abs(0.0)), f64::INFINITY);
        assert_eq!(fraction(f32::from_bits(1.0f32.to_bits() + 2), 1.0, Bound::Ulps(4)), 0.5);
        assert_eq!(fraction(f32::NAN, 1.0, Bound::Ulps(4)), f64::INFINITY);
        assert_eq!(fraction(f32::NAN, f64::NAN, Bound::Ulps(4)), 0.0);
        // A value that underflows f16 to 0 is within a tiny f32 bound plus the one rounding:
        // its fraction is that of the rounding's half step, not a relative error of 1.
        let tiny = 1e-9;
        assert!(accepts(f16::ZERO, tiny, Bound::Abs(tiny * 1e-6)));
        assert!(fraction(f16::ZERO, tiny, Bound::Abs(tiny * 1e-6)) < 1e-3);
        assert_eq!(exact_fraction(f16::ONE, 1.0), 0.0);
        assert_eq!(exact_fraction(f16::ONE, 2.0), f64::INFINITY);
    }

    #[test]
    fn nan_is_never_within_a_bound() {
        assert!(!accepts(f16::NAN, 1.0, Bound::Abs(1.0)));
        assert!(!accepts(f16::ONE, 1.0, Bound::Abs(f64::NAN)));
        assert!(!accepts(bf16::NAN, 1.0, Bound::Ulps(3)));
        assert!(accepts(bf16::NAN, f64::NAN, Bound::Ulps(3)));
        assert!(!accepts(bf16::ONE, f64::NAN, Bound::Ulps(3)));
        // An unbounded error accepts anything but NaN, as for f32.
        assert!(accepts(f16::INFINITY, 1.0, Bound::Abs(f64::INFINITY)));
        assert!(accepts(f32::INFINITY, 1.0, Bound::Abs(f64::INFINITY)));
    }
}
