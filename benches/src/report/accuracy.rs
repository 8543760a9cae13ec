//! Errors of a kernel's f32 output against the f64 oracle of the `reference` crate.

/// The worst errors over one output.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Errors {
    /// Max distance in ulps from the oracle rounded to f32 ([`reference::ulp_error`]);
    /// `u64::MAX` where exactly one of the two is NaN.
    pub max_ulp: u64,
    /// Max `|got − exact| / |exact|`; 0 where both are equal (infinities and NaNs included),
    /// +∞ where they differ and `exact` is 0 or not finite.
    pub max_rel: f64,
}

/// The normwise error `max |got − exact| / max |exact|`, a NaN in `got` (or `exact`) as ∞.
pub fn normwise(got: &[f32], exact: &[f64]) -> f64 {
    let scale = exact.iter().fold(0.0f64, |m, &v| m.max(v.abs()));
    let err = got
        .iter()
        .zip(exact)
        .map(|(&g, &x)| (g as f64 - x).abs())
        .fold(0.0, |m: f64, e| if e.is_nan() { f64::INFINITY } else { m.max(e) });
    err / scale
}

/// The worst errors of `got` against `exact`.
///
/// # Panics
/// If the lengths differ.
pub fn errors(got: &[f32], exact: &[f64]) -> Errors {
    assert_eq!(got.len(), exact.len(), "output and oracle lengths differ");
    let mut e = Errors {
        max_ulp: 0,
        max_rel: 0.0,
    };
    for (&g, &x) in got.iter().zip(exact) {
        e.max_ulp = e.max_ulp.max(reference::ulp_error(g, x));
        let g = g as f64;
        let rel = if g == x || (g.is_nan() && x.is_nan()) {
            0.0
        } else if x == 0.0 || !x.is_finite() || !g.is_finite() {
            f64::INFINITY
        } else {
            ((g - x) / x).abs()
        };
        e.max_rel = e.max_rel.max(rel);
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_ulps_and_relative_error() {
        let next = f32::from_bits(1.0f32.to_bits() + 2);
        let e = errors(&[1.0, next, f32::NAN], &[1.0, 1.0, f64::NAN]);
        assert_eq!(e.max_ulp, 2);
        assert!((e.max_rel - 2.0 * f32::EPSILON as f64).abs() < 1e-12);
        let e = errors(&[0.0], &[1e-30]);
        assert_eq!(e.max_rel, 1.0);
        assert_eq!(errors(&[1.0], &[0.0]).max_rel, f64::INFINITY);
    }
}
