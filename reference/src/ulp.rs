//! Measuring errors of f32 results against f64 oracles.

/// Distance between two f32 values in units in the last place: the number of representable
/// f32 values from `a` to `b` (0 if equal, including `+0` vs `−0`). `u64::MAX` when exactly
/// one is NaN; 0 when both are.
pub fn ulp_distance(a: f32, b: f32) -> u64 {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => return 0,
        (true, false) | (false, true) => return u64::MAX,
        _ => {}
    }
    // Map the bit patterns onto a line that is monotonic in value: negative floats are
    // mirrored below zero, and both zeros land on 0.
    fn ordinal(x: f32) -> i64 {
        let bits = x.to_bits() as i64;
        if bits & 0x8000_0000 != 0 {
            -(bits & 0x7fff_ffff)
        } else {
            bits
        }
    }
    ordinal(a).abs_diff(ordinal(b))
}

/// Error of the f32 result `got` against the exact value `exact`, in ulps of `exact` rounded
/// to f32 (the distance of `got` from the correctly rounded result).
pub fn ulp_error(got: f32, exact: f64) -> u64 {
    ulp_distance(got, exact as f32)
}

/// `a·b + c` rounded once to f32 (round to nearest, ties to even), as an f32 FMA computes it;
/// ±∞ beyond the f32 range. Kernels compute scores such as `scale·x + mask` this way, and the
/// oracle needs the very same f32 value.
///
/// Rounding the f64 result to f32 would round twice, which for an FMA can land on the wrong
/// neighbour at a tie; this rounds once: `a·b` is exact in f64, the sum is split exactly into
/// `s + e` (Knuth's TwoSum), and `e` breaks the ties that `s` alone would get wrong.
pub fn fma_f32(a: f32, b: f32, c: f32) -> f32 {
    let p = a as f64 * b as f64;
    let c = c as f64;
    let s = p + c;
    if !s.is_finite() {
        return s as f32;
    }
    let bb = s - p;
    let e = (p - (s - bb)) + (c - bb);
    let r = s as f32;
    if e == 0.0 || !r.is_finite() {
        return r;
    }
    let other = if (r as f64) < s { r.next_up() } else { r.next_down() };
    if (s - r as f64).abs() == (other as f64 - s).abs() {
        // `s` is exactly halfway between two f32s: the true value `s + e` lies on `e`'s side.
        if (other as f64 - s).signum() == e.signum() {
            return other;
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulp_distance_counts_representable_values() {
        assert_eq!(ulp_distance(1.0, 1.0), 0);
        assert_eq!(ulp_distance(0.0, -0.0), 0);
        assert_eq!(ulp_distance(1.0, f32::from_bits(1.0f32.to_bits() + 3)), 3);
        assert_eq!(ulp_distance(-f32::from_bits(1), f32::from_bits(1)), 2);
        assert_eq!(ulp_distance(f32::MAX, f32::INFINITY), 1);
        assert_eq!(ulp_distance(f32::NAN, 1.0), u64::MAX);
        assert_eq!(ulp_distance(f32::NAN, f32::NAN), 0);
    }

    #[test]
    fn fma_f32_rounds_once() {
        assert_eq!(fma_f32(3.0e38, 2.0, 0.0), f32::INFINITY);
        assert_eq!(fma_f32(-3.0e38, 2.0, 1.0), f32::NEG_INFINITY);
        // (1 + 2⁻²³) + (1 + 2⁻²³)·2⁻²⁴(1 − 2⁻²³) = 1 + 2⁻²³ + 2⁻²⁴ − 2⁻⁷⁰: just below the tie
        // between 1 + 2⁻²³ and 1 + 2⁻²², so it rounds down. Through f64 the −2⁻⁷⁰ is lost, the
        // tie goes to the even neighbour, and the result is 1 + 2⁻²²: wrong.
        let odd = 1.0 + f32::EPSILON;
        let below_half_ulp = f32::EPSILON / 2.0 * (1.0 - f32::EPSILON);
        assert_eq!(fma_f32(odd, below_half_ulp, odd), odd);
        assert_eq!(odd.mul_add(below_half_ulp, odd), odd);
        // `f32::mul_add` is a true fused multiply-add (hardware or libm): the same single
        // rounding. Random triples, and triples built to sit at or next to f32 ties.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for i in 0..200_000 {
            let bits = next();
            let a = f32::from_bits(bits as u32 & 0xbfff_ffff); // |a| < 2
            let b = f32::from_bits((bits >> 32) as u32 & 0xbfff_ffff);
            let c = match i % 3 {
                0 => f32::from_bits(next() as u32 & 0xbfff_ffff),
                // c cancels a·b's leading part, leaving a tail at the tie position.
                1 => -(a * b),
                _ => -(a * b) + f32::from_bits(next() as u32 & 0x807f_ffff),
            };
            if a.is_finite() && b.is_finite() && c.is_finite() {
                assert_eq!(
                    fma_f32(a, b, c).to_bits(),
                    a.mul_add(b, c).to_bits(),
                    "{a:e}·{b:e} + {c:e}"
                );
            }
        }
    }
}
