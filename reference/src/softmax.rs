//! Softmax and log-softmax over rows, two-pass in f64.

use crate::fma_f32;

/// What a row with every entry masked (−∞) becomes (the same policy as `kernels::MaskedRows`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MaskedRows {
    /// Softmax 0, log-softmax −∞.
    #[default]
    Zero,
    /// NaN.
    Nan,
}

/// The scores of one row as the f32 values the kernels work with: `z_j = fl(scale·x_j + mask_j)`
/// rounded once (see [`fma_f32`]; ±∞ beyond the f32 range), and −∞ wherever the mask is −∞
/// whatever `x_j` is. Everything after the scores is exact (f64).
pub fn scores(x: &[f32], scale: f32, mask: Option<&[f32]>) -> Vec<f64> {
    x.iter()
        .enumerate()
        .map(|(j, &v)| match mask.map(|m| m[j]) {
            Some(m) if m == f32::NEG_INFINITY => f64::NEG_INFINITY,
            Some(m) => fma_f32(scale, v, m) as f64,
            None => fma_f32(scale, v, 0.0) as f64,
        })
        .collect()
}

/// The scores of one row and their max; `None` for the max means the row is NaN (a NaN or
/// +∞ among the unmasked scores).
fn scores_and_max(x: &[f32], scale: f32, mask: Option<&[f32]>) -> (Vec<f64>, Option<f64>) {
    let z = scores(x, scale, mask);
    if z.iter().any(|v| v.is_nan() || *v == f64::INFINITY) {
        return (z, None);
    }
    let m = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (z, Some(m))
}

/// Applies `f(z_row, m, d)` to every row, or fills the row per the special-row policies.
fn rows(
    x: &[f32],
    n: usize,
    scale: f32,
    mask: Option<&[f32]>,
    policy: MaskedRows,
    masked_fill: f64,
    f: impl Fn(f64, f64, f64) -> f64,
) -> Vec<f64> {
    if n == 0 {
        return Vec::new();
    }
    assert_eq!(x.len() % n, 0, "x.len() must be a multiple of n");
    if let Some(m) = mask {
        assert_eq!(m.len(), n, "mask must have length n");
    }
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(n) {
        let (z, m) = scores_and_max(row, scale, mask);
        match m {
            None => out.extend(std::iter::repeat_n(f64::NAN, n)),
            Some(m) if m == f64::NEG_INFINITY => {
                let fill = if policy == MaskedRows::Zero {
                    masked_fill
                } else {
                    f64::NAN
                };
                out.extend(std::iter::repeat_n(fill, n));
            }
            Some(m) => {
                let d: f64 = z.iter().map(|&v| (v - m).exp()).sum();
                out.extend(z.iter().map(|&v| f(v, m, d)));
            }
        }
    }
    out
}

/// Softmax of each row of the `[rows, n]` matrix `x`: `y_j = exp(z_j − m) / Σ exp(z − m)`
/// with the f32 scores `z = fl(scale·x + mask)` of [`scores`] (−∞ where the mask is −∞,
/// whatever `x` is), `m = max z`.
///
/// A row whose unmasked scores include NaN or +∞ is NaN; a fully masked row follows `policy`.
///
/// # Panics
/// If `x.len()` is not a multiple of `n` or the mask's length is not `n`.
pub fn softmax(x: &[f32], n: usize, scale: f32, mask: Option<&[f32]>, policy: MaskedRows) -> Vec<f64> {
    rows(x, n, scale, mask, policy, 0.0, |z, m, d| (z - m).exp() / d)
}

/// Log-softmax of each row: `y_j = (z_j − m) − ln Σ exp(z − m)`; see [`softmax`]. A fully
/// masked row is −∞ under [`MaskedRows::Zero`].
///
/// # Panics
/// As [`softmax`].
pub fn log_softmax(x: &[f32], n: usize, scale: f32, mask: Option<&[f32]>, policy: MaskedRows) -> Vec<f64> {
    rows(x, n, scale, mask, policy, f64::NEG_INFINITY, |z, m, d| (z - m) - d.ln())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_of_equal_values_is_uniform() {
        let y = softmax(&[5.0; 4], 4, 1.0, None, MaskedRows::Zero);
        assert!(y.iter().all(|&v| v == 0.25));
    }

    #[test]
    fn masked_entries_are_zero_and_nan_under_a_mask_does_not_matter() {
        let mask = [0.0, f32::NEG_INFINITY, 0.0];
        let y = softmax(&[1.0, f32::NAN, 1.0], 3, 1.0, Some(&mask), MaskedRows::Zero);
        assert_eq!(y, vec![0.5, 0.0, 0.5]);
    }

    #[test]
    fn special_rows() {
        let inf = f32::INFINITY;
        assert!(softmax(&[1.0, inf], 2, 1.0, None, MaskedRows::Zero)
            .iter()
            .all(|v| v.is_nan()));
        assert_eq!(softmax(&[-inf, -inf], 2, 1.0, None, MaskedRows::Zero), vec![0.0, 0.0]);
        assert!(softmax(&[-inf, -inf], 2, 1.0, None, MaskedRows::Nan)
            .iter()
            .all(|v| v.is_nan()));
        assert_eq!(
            log_softmax(&[-inf, -inf], 2, 1.0, None, MaskedRows::Zero),
            vec![-f64::INFINITY; 2]
        );
    }

    #[test]
    fn log_softmax_is_log_of_softmax() {
        let x = [0.5, -1.0, 3.0, 2.0];
        let y = softmax(&x, 4, 0.7, None, MaskedRows::Zero);
        let l = log_softmax(&x, 4, 0.7, None, MaskedRows::Zero);
        for (a, b) in y.iter().zip(&l) {
            assert!((a.ln() - b).abs() < 1e-14);
        }
    }
}
