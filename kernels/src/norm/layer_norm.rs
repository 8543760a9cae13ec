//! LayerNorm's options and its row op: the statistics of a row, its normalize sweep.

use super::call::NormCall;
use super::rows::RowOp;
use super::sources::{load_n, write_span, Output, RowSource, Source, Values};
use super::stats::{
    fits_f32, group_m2_of, group_row_dev, group_row_sum, moments, moments_f64, rstd_of, Affine, GroupMeans, Pending,
    GROUP,
};

use crate::element::Element;
use crate::simd::Simd;

/// Options of [`layer_norm`](crate::layer_norm()) and
/// [`add_layer_norm`](crate::add_layer_norm()): the affine parameters and ε.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerNormOptions<'a> {
    /// The gain `γ`, length `d`; absent means 1 (the call then allocates a row of ones, `4·d`
    /// bytes, so that one compiled kernel serves every combination of parameters).
    pub gamma: Option<&'a [f32]>,
    /// The bias `β`, length `d`; absent means 0 (a row of −0 the call allocates, as for `γ`).
    pub beta: Option<&'a [f32]>,
    /// Added to the variance; must be finite and > 0. Default `1e-5` (PyTorch's).
    pub eps: f32,
}

impl Default for LayerNormOptions<'_> {
    fn default() -> Self {
        LayerNormOptions {
            gamma: None,
            beta: None,
            eps: 1e-5,
        }
    }
}
/// LayerNorm of one row (`γ` and `β` present: see `api::norm_rows`).
pub(crate) struct Layer;

impl Layer {
    /// A row's normalize constants from the `mean` (about `k`) and `m2` of its moments, NaN
    /// where it takes the f64 path. Without branches, so that the groups' loop over it runs
    /// in vectors (see `group_stats`).
    #[inline(always)]
    fn of<E>(call: &NormCall<E>, k: f32, mean: f64, m2: f64) -> Affine {
        let a = Affine::new(k as f64 + mean, rstd_of(m2 * (1.0 / call.d as f64), call.eps));
        if fits_f32(mean, m2) {
            a
        } else {
            Affine::NAN
        }
    }
}

impl RowOp for Layer {
    /// The normalize constants, NaN where the row needs the f64 path (a NaN or ±∞ in it, or
    /// an f32 overflow of its statistics).
    type Stats = Affine;
    type Sweep<S: Simd, E: Element, V: Values<S>> = Normalize<S, E, V>;
    const GROUPS: bool = true;

    #[inline(always)]
    unsafe fn stats<S: Simd, E: Element, R: Source<S>, P: Pending<S>>(
        s: S,
        call: &NormCall<E>,
        src: &R,
        pending: &P,
    ) -> Affine {
        // SAFETY: the row holds `d ≥ 1` values.
        unsafe {
            let k = src.first();
            let mo = moments(s, src, call.d, k, pending);
            Self::of(call, k, mo.mean, mo.m2)
        }
    }

    #[inline(always)]
    unsafe fn group_sum<S: Simd, E: Element, R: RowSource<S, E>, const B: usize, const FULL: bool>(
        s: S,
        call: &NormCall<E>,
        row: usize,
        k: f32,
    ) -> S::V {
        // SAFETY: forwarded.
        unsafe { group_row_sum::<S, E, R, B, FULL>(s, call, row, k) }
    }

    #[inline(always)]
    unsafe fn group_dev<S: Simd, E: Element, const B: usize, const FULL: bool>(
        s: S,
        call: &NormCall<E>,
        again: *const E,
        row: usize,
        k: f32,
        mean: (f64, f32),
    ) -> S::V {
        unsafe { group_row_dev::<S, E, B, FULL>(s, again, call.d, row, k, mean) }
    }

    #[inline(always)]
    unsafe fn group_stats<S: Simd, E: Element, R: RowSource<S, E>>(
        s: S,
        call: &NormCall<E>,
        r0: usize,
        n: usize,
        k: &[f32; GROUP],
        means: &GroupMeans,
        devs: &[S::V; GROUP],
    ) -> [Affine; GROUP] {
        let _ = (r0, n);
        let m2 = group_m2_of(s, call.d, devs, means);
        let mean = &means.mean;
        let (mut mean_hi, mut rstd, mut shift) = ([0.0; GROUP], [0.0; GROUP], [0.0; GROUP]);
        for j in 0..GROUP {
            let a = Self::of(call, k[j], mean[j], m2[j]);
            (mean_hi[j], rstd[j], shift[j]) = (a.mean_hi, a.rstd, a.shift);
        }
        std::array::from_fn(|j| Affine {
            mean_hi: mean_hi[j],
            rstd: rstd[j],
            shift: shift[j],
        })
    }

    #[inline(always)]
    fn sweep<S: Simd, E: Element, V: Values<S>>(
        s: S,
        call: &NormCall<E>,
        a: Affine,
        h: V,
        y: *mut E,
    ) -> Option<Normalize<S, E, V>> {
        (!a.mean_hi.is_nan()).then(|| Normalize::new(s, call, h, y, a))
    }

    unsafe fn wide<S: Simd, E: Element, V: Values<S>>(call: NormCall<E>, h: V, y: *mut E) -> (f32, f32) {
        let d = call.d;
        // SAFETY: the row holds `d` values at `h` and `y`; `h` is read in full before `y` is
        // written, except by `normalize_f64`, which reads `h_j` before writing `y_j`.
        unsafe {
            let out = match moments_f64(|j| h.at(j), d) {
                Some(mo) => {
                    let rstd = rstd_of(mo.m2 / d as f64, call.eps);
                    normalize_f64::<S, E, V>(&h, y, d, call.gamma, call.beta, mo.mean, rstd);
                    (mo.mean as f32, rstd as f32)
                }
                None => {
                    std::slice::from_raw_parts_mut(y, d).fill(E::from_f32(f32::NAN));
                    (f32::NAN, f32::NAN)
                }
            };
            h.finish(d);
            out
        }
    }

    #[inline(always)]
    fn outputs(a: Affine) -> (f32, f32) {
        (a.mean_hi, a.rstd)
    }
}

/// The normalize sweep of one row: `y = fma(fma(h − μ_hi, rstd, shift), γ, β)`, computed as
/// `fma(fma(μ_hi − h, −rstd, shift), γ, β)`, the same bits (a rounded difference changes sign
/// with its operands, and so does a product with both of its factors). In that order the load
/// of `h` is the subtraction's memory operand on x86: one instruction a vector fewer.
/// `γ` and `β` are always present here (an absent one is a row of its neutral value, see
/// `api::norm_rows`).
pub(crate) struct Normalize<S: Simd, E, V> {
    h: V,
    y: *mut E,
    gamma: *const f32,
    beta: *const f32,
    mean_hi: S::V,
    /// `−rstd`.
    neg_rstd: S::V,
    shift: S::V,
    /// Whether `y` is written with streaming stores.
    stream: bool,
    d: usize,
}

impl<S: Simd, E: Element, V: Values<S>> Normalize<S, E, V> {
    #[inline(always)]
    fn new(s: S, call: &NormCall<E>, h: V, y: *mut E, a: Affine) -> Self {
        Normalize {
            h,
            y,
            gamma: call.gamma,
            beta: call.beta,
            mean_hi: s.splat(a.mean_hi),
            neg_rstd: s.splat(-a.rstd),
            shift: s.splat(a.shift),
            stream: call.stream,
            d: call.d,
        }
    }
}

impl<S: Simd, E: Element, V: Values<S>> Pending<S> for Normalize<S, E, V> {
    #[inline(always)]
    unsafe fn run(&self, s: S, i: usize, n: usize) {
        // SAFETY: forwarded; `y` covers the row.
        unsafe {
            self.h.write_h(s, self.d, i, n);
            write_span(s, self, self.y, self.d, i, n, self.stream)
        }
    }
}

impl<S: Simd, E: Element, V: Values<S>> Output<S> for Normalize<S, E, V> {
    #[inline(always)]
    unsafe fn get(&self, s: S, i: usize, n: usize) -> S::V {
        // SAFETY: `i + n ≤ d` for every operand; `h[i..]` is read before `y[i..]` is written.
        unsafe {
            let v = s.mul_add(s.sub(self.mean_hi, self.h.get(s, i, n)), self.neg_rstd, self.shift);
            s.mul_add(v, load_n(s, self.gamma, i, n), load_n(s, self.beta, i, n))
        }
    }
}

/// The normalize sweep in f64, for the rows the f32 statistics cannot handle.
///
/// # Safety
/// `h` gives `d` values, `y` covers `d` writable elements (equal to where `h` reads if they
/// overlap); `gamma`, `beta` cover `d`.
unsafe fn normalize_f64<S: Simd, E: Element, V: Values<S>>(
    h: &V,
    y: *mut E,
    d: usize,
    gamma: *const f32,
    beta: *const f32,
    mean: f64,
    rstd: f64,
) {
    for j in 0..d {
        // SAFETY: `j < d` for every operand; `h[j]` is read before `y[j]` is written.
        unsafe {
            let v = (h.at(j) as f64 - mean) * rstd * *gamma.add(j) as f64 + *beta.add(j) as f64;
            *y.add(j) = E::from_f32(v as f32);
        }
    }
}
