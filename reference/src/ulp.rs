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

/// An exact score as the f32 quantity a kernel works with: rounded to f32, so that a value
/// beyond the f32 range becomes ±∞ (kernels compute scores such as `scale·x + mask` in f32;
/// where that overflows, the oracle must see the same infinity, not a large finite number).
/// The value itself stays unrounded when it is within range.
pub fn f32_score(z: f64) -> f64 {
    if (z as f32).is_infinite() {
        z.signum() * f64::INFINITY
    } else {
        z
    }
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
    fn f32_score_overflows_like_f32() {
        assert_eq!(f32_score(1e39), f64::INFINITY);
        assert_eq!(f32_score(-1e39), f64::NEG_INFINITY);
        assert_eq!(f32_score(3.0e38), 3.0e38);
    }
}
