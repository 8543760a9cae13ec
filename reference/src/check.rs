//! The documented error bounds of the `kernels` crate, as checks of a result against the
//! oracle. Tests and fuzz targets use them; so can anyone testing a kernel of their own to the
//! same contract.

use std::fmt;

use crate::softmax::{log_softmax, scores, softmax, MaskedRows};

/// The unit roundoff of f32, `2⁻²⁴`.
pub const U: f64 = 1.0 / (1u64 << 24) as f64;

/// An element whose value breaks the bound.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    /// Flat index of the element.
    pub index: usize,
    /// The value the kernel produced.
    pub got: f32,
    /// The oracle's value.
    pub exact: f64,
    /// The largest error the bound allows there (NaN where only an exact match is allowed).
    pub bound: f64,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "element {}: got {:e}, exact {:e}, error {:e} > bound {:e}",
            self.index,
            self.got,
            self.exact,
            (self.got as f64 - self.exact).abs(),
            self.bound
        )
    }
}

/// `Ok` if `got` equals `exact` where the exact value is not a finite f32 (NaN, or beyond the
/// f32 range and so rounding to ±∞), or where `exact_only` holds.
fn exact_match(index: usize, got: f32, exact: f64) -> Result<(), Mismatch> {
    let want = exact as f32;
    if got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()) || (got == 0.0 && want == 0.0) {
        Ok(())
    } else {
        Err(Mismatch {
            index,
            got,
            exact,
            bound: f64::NAN,
        })
    }
}

/// Checks the output of `kernels::softmax` (or `log_softmax` if `log`) on the `[rows, n]`
/// input `x` against the documented bound:
///
/// ```text
/// softmax:      |y_j − ŷ_j| ≤ (24 + |z_j − m|)·u·ŷ_j + 2⁻¹²⁶
/// log-softmax:  |y_j − ŷ_j| ≤ (24 + |z_j − m| + |ln d̂| + |ŷ_j|)·u
/// ```
///
/// where `z` are the f32 scores `fl(scale·x + mask)` and `ŷ` the exact result on them (see
/// [`crate::scores`]). NaN rows, masked entries and results beyond the f32 range must match
/// exactly.
pub fn check_softmax(
    x: &[f32],
    n: usize,
    scale: f32,
    mask: Option<&[f32]>,
    policy: MaskedRows,
    log: bool,
    got: &[f32],
) -> Result<(), Mismatch> {
    assert_eq!(got.len(), x.len(), "`got` must have the length of `x`");
    if n == 0 {
        return Ok(());
    }
    let exact = if log {
        log_softmax(x, n, scale, mask, policy)
    } else {
        softmax(x, n, scale, mask, policy)
    };
    for (r, row) in x.chunks(n).enumerate() {
        let z = scores(row, scale, mask);
        let m = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let d: f64 = z.iter().map(|&v| (v - m).exp()).sum();
        for j in 0..n {
            let index = r * n + j;
            let (y, e) = (got[index], exact[index]);
            if e.is_nan() || (e as f32).is_infinite() || z[j] == f64::NEG_INFINITY {
                exact_match(index, y, e)?;
                continue;
            }
            let bound = if log {
                (24.0 + (z[j] - m).abs() + d.ln().abs() + e.abs()) * U
            } else {
                (24.0 + (z[j] - m).abs()) * U * e + f32::MIN_POSITIVE as f64
            };
            // `!(err <= bound)` also catches a NaN result where the exact one is finite.
            if !((y as f64 - e).abs() <= bound) {
                return Err(Mismatch {
                    index,
                    got: y,
                    exact: e,
                    bound,
                });
            }
        }
    }
    Ok(())
}

/// Checks `kernels::exp`: every element within 1 ulp of `exp` in f64 rounded to f32, NaN for
/// NaN.
pub fn check_exp(x: &[f32], got: &[f32]) -> Result<(), Mismatch> {
    assert_eq!(got.len(), x.len(), "`got` must have the length of `x`");
    for (index, (&v, &y)) in x.iter().zip(got).enumerate() {
        let exact = (v as f64).exp();
        if crate::ulp_error(y, exact) > 1 {
            return Err(Mismatch {
                index,
                got: y,
                exact,
                bound: f64::NAN,
            });
        }
    }
    Ok(())
}
