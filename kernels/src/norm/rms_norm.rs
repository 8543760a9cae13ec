//! RMSNorm's options and its row op: the mean square of a row, its scaling sweep.

use super::call::NormCall;
use super::rows::RowOp;
use super::sources::{load_n, write_span, Output, Source, Values};
use super::stats::{rstd_of, sum_squares, Pending};
use crate::simd::Simd;
use crate::Element;

/// Options of [`rms_norm`](crate::rms_norm()) and [`add_rms_norm`](crate::add_rms_norm()).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RmsNormOptions<'a> {
    /// The gain `g`, length `d`; absent means 1 (GAU-α uses none; the call then allocates a row
    /// of ones, `4·d` bytes, so that one compiled kernel serves both forms).
    pub gain: Option<&'a [f32]>,
    /// Added to the mean square; must be finite and > 0. Default `1e-6`.
    pub eps: f32,
}

impl Default for RmsNormOptions<'_> {
    fn default() -> Self {
        RmsNormOptions { gain: None, eps: 1e-6 }
    }
}

/// RMSNorm of one row (the gain present: see `api::norm_rows`).
pub(crate) struct Rms;

impl RowOp for Rms {
    /// `rstd`, NaN where the row needs the f64 path.
    type Stats = f64;
    type Sweep<S: Simd, E: Element, V: Values<S>> = Scale<S, E, V>;

    #[inline(always)]
    unsafe fn stats<S: Simd, E: Element, R: Source<S>, P: Pending<S>>(
        s: S,
        call: &NormCall<E>,
        src: &R,
        pending: &P,
    ) -> f64 {
        // SAFETY: the row holds `d ≥ 1` values.
        let sum = unsafe { sum_squares(s, src, call.d, pending) };
        if sum.is_finite() {
            rstd_of(sum * (1.0 / call.d as f64), call.eps)
        } else {
            f64::NAN
        }
    }

    #[inline(always)]
    fn sweep<S: Simd, E: Element, V: Values<S>>(
        s: S,
        call: &NormCall<E>,
        rstd: f64,
        h: V,
        y: *mut E,
    ) -> Option<Scale<S, E, V>> {
        (!rstd.is_nan()).then(|| Scale {
            h,
            y,
            gain: call.gamma,
            rstd: s.splat(rstd as f32),
            stream: call.stream,
            d: call.d,
        })
    }

    unsafe fn wide<S: Simd, E: Element, V: Values<S>>(call: NormCall<E>, h: V, y: *mut E) -> (f32, f32) {
        // SAFETY: forwarded; `finish` runs after the last read of `h`.
        unsafe {
            let out = rms_row_f64::<S, E, V>(&h, y, call.d, call.gamma, call.eps);
            h.finish(call.d);
            out
        }
    }

    #[inline(always)]
    fn outputs(rstd: f64) -> (f32, f32) {
        (f32::NAN, rstd as f32)
    }
}

/// The normalize sweep of one row of RMSNorm: `y = h·rstd·g` (`g` always present here; an
/// absent gain is a row of ones, see `api::norm_rows`).
pub(crate) struct Scale<S: Simd, E, V> {
    h: V,
    y: *mut E,
    gain: *const f32,
    rstd: S::V,
    /// Whether `y` is written with streaming stores.
    stream: bool,
    d: usize,
}

impl<S: Simd, E: Element, V: Values<S>> Pending<S> for Scale<S, E, V> {
    #[inline(always)]
    unsafe fn run(&self, s: S, i: usize, n: usize) {
        // SAFETY: forwarded; `y` covers the row.
        unsafe {
            self.h.write_h(s, self.d, i, n);
            write_span(s, self, self.y, self.d, i, n, self.stream)
        }
    }
}

impl<S: Simd, E: Element, V: Values<S>> Output<S> for Scale<S, E, V> {
    #[inline(always)]
    unsafe fn get(&self, s: S, i: usize, n: usize) -> S::V {
        // SAFETY: `i + n ≤ d` for every operand; `h[i..]` is read before `y[i..]` is written.
        unsafe { s.mul(s.mul(self.h.get(s, i, n), self.rstd), load_n(s, self.gain, i, n)) }
    }
}

/// RMSNorm of a row in f64: the fallback for rows whose f32 sum of squares overflows, and for
/// rows holding a NaN or ±∞ (which become NaN).
///
/// # Safety
/// `h` gives `d` values, `y` covers `d` writable elements (equal to where `h` reads if they
/// overlap); `gain` covers `d`.
unsafe fn rms_row_f64<S: Simd, E: Element, V: Values<S>>(
    h: &V,
    y: *mut E,
    d: usize,
    gain: *const f32,
    eps: f32,
) -> (f32, f32) {
    // SAFETY: `j < d` for every operand; `h` is read in full before `y` is written, but for
    // the last sweep, which reads `h_j` before writing `y_j`.
    unsafe {
        let at = |j: usize| h.at(j) as f64;
        if (0..d).any(|j| !at(j).is_finite()) {
            std::slice::from_raw_parts_mut(y, d).fill(E::from_f32(f32::NAN));
            return (f32::NAN, f32::NAN);
        }
        let rstd = rstd_of((0..d).map(|j| at(j) * at(j)).sum::<f64>() / d as f64, eps);
        for j in 0..d {
            *y.add(j) = E::from_f32((at(j) * rstd * *gain.add(j) as f64) as f32);
        }
        (f32::NAN, rstd as f32)
    }
}
