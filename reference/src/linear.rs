//! A fully connected layer in f64, `Y = act(X·W + b) + R`, and the check of `kernels::linear`.

use crate::check::{FirstMismatch, Judge, Mismatch, U};
use crate::element::{widen, Bound, Element};

/// The activation of a layer (the same set as `kernels::Activation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Activation {
    /// `z`.
    #[default]
    Identity,
    /// `max(z, 0)`, NaN for NaN.
    Relu,
    /// `z·Φ(z)`.
    Gelu,
    /// `z·σ(√(8/π)·(z + 0.044715z³))`.
    GeluTanh,
    /// `z·σ(z)`.
    Swish,
}

impl Activation {
    /// The activation of `z` in f64.
    pub fn apply(self, z: f64) -> f64 {
        match self {
            Activation::Identity => z,
            Activation::Relu => {
                if z.is_nan() {
                    z
                } else {
                    z.max(0.0)
                }
            }
            // The f32 argument of the kernels' f64 forms is exact here only for f32 `z`; the
            // formulas themselves are the same.
            Activation::Gelu if z == f64::NEG_INFINITY => -0.0,
            Activation::Gelu => z * libm::erfc(-z * std::f64::consts::FRAC_1_SQRT_2) / 2.0,
            Activation::GeluTanh | Activation::Swish if z == f64::NEG_INFINITY => -0.0,
            Activation::GeluTanh => z / (1.0 + (-tanh_arg(z)).exp()),
            Activation::Swish => z / (1.0 + (-z).exp()),
        }
    }

    /// An upper bound of `|act′|` over the reals: how far an error of `z` moves the result.
    pub fn max_slope(self) -> f64 {
        match self {
            Activation::Identity | Activation::Relu => 1.0,
            // `gelu′(z) = Φ(z) + z·φ(z)`, largest at `z = √2`: 1.1289; the tanh form's, 1.1297.
            Activation::Gelu | Activation::GeluTanh => 1.13,
            // `swish′` peaks at 1.0998.
            Activation::Swish => 1.1,
        }
    }

    /// The kernels' own bound for the activation of an f32 `z`, in ulps of the result.
    pub fn ulps(self, z: f64) -> u64 {
        match self {
            Activation::Identity | Activation::Relu => 0,
            Activation::Gelu => 6,
            Activation::GeluTanh => 4 + (3.0 * tanh_arg(z).abs()).ceil().min(1e12) as u64,
            Activation::Swish => 3,
        }
    }
}

/// `√(8/π)·(z + 0.044715z³)`.
fn tanh_arg(z: f64) -> f64 {
    (8.0 / std::f64::consts::PI).sqrt() * (z + 0.044715 * z * z * z)
}

/// The exact result of a layer and, per output, what its bound is made of.
#[derive(Debug, Clone)]
pub struct LinearResult {
    /// `Y[M, N]`.
    pub y: Vec<f64>,
    /// `z = X·W + b`, `[M, N]`.
    pub z: Vec<f64>,
    /// `Σ_k |x_k·w_kn| + |b_n|`, `[M, N]`: the magnitude the product is computed from.
    pub magnitude: Vec<f64>,
}

/// `Y = act(X·W + b) + R` in f64: `x[M, K]`, `w[K, N]` (the weights as the kernel multiplies
/// by them: for bf16-packed weights, their bf16 rounding), `bias[N]`, `residual[M, N]`.
pub fn linear(
    x: &[f32],
    w: &[f32],
    (k, n): (usize, usize),
    bias: Option<&[f32]>,
    activation: Activation,
    residual: Option<&[f32]>,
) -> LinearResult {
    assert!(k > 0 && x.len().is_multiple_of(k) && w.len() == k * n, "shapes");
    let m = x.len() / k;
    let mut out = LinearResult {
        y: vec![0.0; m * n],
        z: vec![0.0; m * n],
        magnitude: vec![0.0; m * n],
    };
    for i in 0..m {
        for j in 0..n {
            let b = bias.map_or(0.0, |b| b[j] as f64);
            let (mut z, mut mag) = (b, b.abs());
            for kk in 0..k {
                let t = x[i * k + kk] as f64 * w[kk * n + j] as f64;
                z += t;
                mag += t.abs();
            }
            let at = i * n + j;
            out.z[at] = z;
            out.magnitude[at] = mag;
            out.y[at] = activation.apply(z) + residual.map_or(0.0, |r| r[at] as f64);
        }
    }
    out
}

/// Magnitudes above this may overflow f32 inside the kernel; the bound excludes them.
const OVERFLOW_GUARD: f64 = 1e37;

/// The spacing of the f32 values at magnitude `v` (2⁻¹⁴⁹ among the subnormals).
fn ulp_at(v: f64) -> f64 {
    let v = v.abs().max(f32::MIN_POSITIVE as f64);
    2f64.powi(v.log2().floor() as i32 - 23)
}

/// Checks `kernels::linear` against the documented bound. With `u = 2⁻²⁴`, `ẑ = X·W + b` and
/// `A = Σ_k |x_k·w_kn| + |b_n|` per output:
///
/// ```text
/// |z − ẑ| ≤ E_z = (K + 1)·(u·A + 2⁻¹⁴⁹)
/// |Y − Ŷ| ≤ L·E_z + k(ẑ)·ulp(|act(ẑ)| + L·E_z) + [R] u·(|Ŷ| + L·E_z + …) + 2⁻¹⁴⁹
/// ```
///
/// with `L` the activation's largest slope ([`Activation::max_slope`]) and `k(ẑ)` its own bound
/// in ulps ([`Activation::ulps`]; for an activation whose result is below 2⁻¹²⁶, 2⁻¹²⁶
/// absolute instead). A NaN or infinite `Ŷ` must be matched exactly (NaN for NaN), except that
/// an infinite `ẑ` may come out NaN where its finite terms reach `10³⁷` (an f32 partial sum
/// of them may overflow to the other infinity); outputs with `A ≥ 10³⁷` are not checked (the
/// f32 sums may overflow). A result of `±∞` where `Ŷ` is finite is accepted where the bound
/// reaches past `f32::MAX` plus half an ulp (a residual can carry a finite sum there). `x`, `residual` and `got` are
/// in the storage type `E` (a half output: the bound plus one rounding to `E`); `w` `[K, N]`
/// and `bias` are f32, `w` as the kernel multiplies by it.
#[allow(clippy::too_many_arguments)]
pub fn check_linear<E: Element>(
    x: &[E],
    w: &[f32],
    (k, n): (usize, usize),
    bias: Option<&[f32]>,
    activation: Activation,
    residual: Option<&[E]>,
    got: &[E],
) -> Result<(), Mismatch> {
    walk_linear(x, w, (k, n), bias, activation, residual, got, &mut FirstMismatch)
}

/// The walk of [`check_linear`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn walk_linear<E: Element>(
    x: &[E],
    w: &[f32],
    (k, n): (usize, usize),
    bias: Option<&[f32]>,
    activation: Activation,
    residual: Option<&[E]>,
    got: &[E],
    judge: &mut impl Judge,
) -> Result<(), Mismatch> {
    let r = residual.map(widen);
    let exact = linear(&widen(x), w, (k, n), bias, activation, r.as_deref());
    assert_eq!(got.len(), exact.y.len(), "`got` must have M·N elements");
    let tiny = f32::MIN_POSITIVE as f64;
    let sub = tiny / (1u64 << 23) as f64;
    for (index, &y) in got.iter().enumerate() {
        let (want, z, mag) = (exact.y[index], exact.z[index], exact.magnitude[index]);
        if !z.is_finite() {
            // NaN or ±∞ among the inputs: the f32 sums meet them too. Where the finite terms
            // reach the overflow guard, an f32 partial sum of them may overflow to the other
            // infinity, and `∞ − ∞` makes the f32 formula's value NaN: accepted there.
            let (i, j) = (index / n, index % n);
            let finite: f64 = (0..k)
                .map(|kk| x[i * k + kk].to_f64() * w[kk * n + j] as f64)
                .filter(|t| t.is_finite())
                .map(f64::abs)
                .sum::<f64>()
                + bias.map_or(0.0, |b| (b[j] as f64).abs());
            if z.is_infinite() && y.to_f64().is_nan() && finite >= OVERFLOW_GUARD {
                continue;
            }
            judge.exact(index, y, want)?;
            continue;
        }
        if mag >= OVERFLOW_GUARD {
            continue;
        }
        if !want.is_finite() {
            judge.exact(index, y, want)?;
            continue;
        }
        let slope = activation.max_slope();
        let ez = (k + 1) as f64 * (U * mag + sub);
        let act = activation.apply(z).abs() + slope * ez;
        let own = if act < tiny && activation != Activation::Identity && activation != Activation::Relu {
            tiny
        } else {
            activation.ulps(z) as f64 * ulp_at(act)
        };
        let mut bound = slope * ez + own + sub;
        if let Some(r) = &r {
            bound += U * (act + own + (r[index] as f64).abs()) + sub;
        }
        judge.within(index, y, want, Bound::Abs(bound))?;
    }
    Ok(())
}
