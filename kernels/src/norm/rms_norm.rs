//! RMSNorm and the fused Add & RMSNorm.

use super::rows::{run, Calls, NormArgs, NormCall, Residual, RowOp, RowStats};
use super::source::{load_n, Source};
use super::stats::{block_squares, rstd_of, sum_squares, Pending, Trail};
use crate::dispatch::Kernels;
use crate::element::{Element, Typed};
use crate::error::Error;
use crate::simd::Simd;

/// Options of [`rms_norm`](crate::rms_norm()) and [`add_rms_norm`](crate::add_rms_norm()).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RmsNormOptions<'a> {
    /// The gain `g`, length `d`; absent means 1 (GAU-α uses none).
    pub gain: Option<&'a [f32]>,
    /// Added to the mean square; must be finite and > 0. Default `1e-6`.
    pub eps: f32,
}

impl Default for RmsNormOptions<'_> {
    fn default() -> Self {
        RmsNormOptions { gain: None, eps: 1e-6 }
    }
}

impl Kernels {
    /// Validates and runs an RMSNorm call of any form.
    fn rms_norm_call<E: Element>(
        &self,
        x: (*const E, usize),
        y: (*mut E, usize),
        add: Option<(&[E], Residual)>,
        h: Option<(*mut E, usize)>,
        d: usize,
        opts: &RmsNormOptions,
    ) -> Result<(), Error> {
        let args = NormArgs {
            x,
            y,
            add,
            h,
            d,
            gamma: ("gain", opts.gain),
            beta: None,
            eps: opts.eps,
            stats: RowStats::default(),
        };
        let call = self.norm_call(args)?;
        // SAFETY: validated; the slices behind the pointers are borrowed by the caller.
        unsafe { self.run_rms_norm(E::typed(call)) };
        Ok(())
    }

    /// Runs a validated call. Not generic: the kernel is compiled in this crate (see
    /// [`Typed`]).
    ///
    /// # Safety
    /// As [`run`].
    unsafe fn run_rms_norm(&self, call: Typed<Calls>) {
        /// The instance of the gain the call asks for.
        unsafe fn with<E: Element>(k: &Kernels, c: &NormCall<E>) {
            // SAFETY: forwarded.
            unsafe {
                if c.gamma.is_null() {
                    run::<E, Rms<false>>(k, c)
                } else {
                    run::<E, Rms<true>>(k, c)
                }
            }
        }
        // SAFETY: forwarded.
        unsafe {
            match call {
                Typed::F32(c) => with(self, &c),
                Typed::F16(c) => with(self, &c),
                Typed::Bf16(c) => with(self, &c),
            }
        }
    }

    /// RMSNorm of each row of `x` (`[rows, d]`) into `out`. See [`rms_norm`](crate::rms_norm()).
    pub fn rms_norm<E: Element>(&self, x: &[E], out: &mut [E], d: usize, opts: &RmsNormOptions) -> Result<(), Error> {
        self.rms_norm_call(
            (x.as_ptr(), x.len()),
            (out.as_mut_ptr(), out.len()),
            None,
            None,
            d,
            opts,
        )
    }

    /// RMSNorm of each row of `x` (`[rows, d]`), in place.
    pub fn rms_norm_inplace<E: Element>(&self, x: &mut [E], d: usize, opts: &RmsNormOptions) -> Result<(), Error> {
        let (p, len) = (x.as_mut_ptr(), x.len());
        self.rms_norm_call((p, len), (p, len), None, None, d, opts)
    }

    /// `h = α·x + (r + b)`, `out = RMSNorm(h)`, `h` written to `h` if given. See
    /// [`add_rms_norm`](crate::add_rms_norm()).
    #[allow(clippy::too_many_arguments)]
    pub fn add_rms_norm<E: Element>(
        &self,
        x: &[E],
        r: &[E],
        out: &mut [E],
        h: Option<&mut [E]>,
        d: usize,
        residual: &Residual,
        opts: &RmsNormOptions,
    ) -> Result<(), Error> {
        let y = (out.as_mut_ptr(), out.len());
        let h = h.map(|h| (h.as_mut_ptr(), h.len()));
        self.rms_norm_call((x.as_ptr(), x.len()), y, Some((r, *residual)), h, d, opts)
    }

    /// [`add_rms_norm`](Self::add_rms_norm) with the residual stream updated in place:
    /// `x ← α·x + (r + b)`, `out = RMSNorm(x)`.
    pub fn add_rms_norm_inplace<E: Element>(
        &self,
        x: &mut [E],
        r: &[E],
        out: &mut [E],
        d: usize,
        residual: &Residual,
        opts: &RmsNormOptions,
    ) -> Result<(), Error> {
        let (p, len) = (x.as_mut_ptr(), x.len());
        let y = (out.as_mut_ptr(), out.len());
        self.rms_norm_call((p, len), y, Some((r, *residual)), Some((p, len)), d, opts)
    }
}

/// RMSNorm of one row, with or without the gain.
pub(crate) struct Rms<const GAIN: bool>;

impl<const GAIN: bool> Rms<GAIN> {
    /// `rstd` of a row whose `Σh²` is `sum`, or NaN.
    #[inline(always)]
    fn rstd<E>(call: &NormCall<E>, sum: f64) -> f64 {
        let rstd = rstd_of(sum * (1.0 / call.d as f64), call.eps);
        if sum.is_finite() {
            rstd
        } else {
            f64::NAN
        }
    }
}

impl<const GAIN: bool> RowOp for Rms<GAIN> {
    /// `rstd`.
    type Stats = f64;
    type Consts<S: Simd> = S::V;
    const TWO_PASS: bool = false;

    #[inline(always)]
    unsafe fn stats<S: Simd, E: Element, R: Source<S>, P: Pending<S>, const PREFETCH: bool>(
        s: S,
        call: &NormCall<E>,
        src: &R,
        pending: &P,
    ) -> f64 {
        let d = call.d;
        // SAFETY: the row holds `d` values.
        Self::rstd(call, unsafe {
            sum_squares::<S, R, P, PREFETCH>(s, src, d, &mut Trail::new(pending, d))
        })
    }

    #[inline(always)]
    unsafe fn first<S: Simd, R: Source<S>, const B: usize, const FULL: bool>(s: S, src: &R, d: usize, _: f32) -> S::V {
        // SAFETY: forwarded.
        unsafe { block_squares::<S, R, B, FULL>(s, src, 0, d) }
    }

    #[inline(always)]
    unsafe fn second<S: Simd, R: Source<S>, const B: usize, const FULL: bool>(
        s: S,
        _: &R,
        _: usize,
        _: f32,
        _: f32,
    ) -> S::V {
        s.splat(0.0)
    }

    #[inline(always)]
    fn short_stats<E>(call: &NormCall<E>, _: f32, first: f32, _: f32) -> f64 {
        Self::rstd(call, first as f64)
    }

    #[inline(always)]
    fn fast(rstd: &f64) -> bool {
        !rstd.is_nan()
    }

    #[inline(always)]
    fn consts<S: Simd>(s: S, rstd: f64) -> S::V {
        s.splat(rstd as f32)
    }

    /// `y = h·rstd·g`.
    #[inline(always)]
    unsafe fn y<S: Simd, E>(s: S, call: &NormCall<E>, rstd: &S::V, h: S::V, i: usize, n: usize) -> S::V {
        let v = s.mul(h, *rstd);
        if GAIN {
            // SAFETY: `i + n ≤ d`, the length of the gain.
            s.mul(v, unsafe { load_n(s, call.gamma, i, n) })
        } else {
            v
        }
    }

    /// In f64: the path of rows whose `Σh²` overflows f32, and of non-finite rows (NaN).
    unsafe fn wide<S: Simd, E: Element, R: Source<S>>(call: &NormCall<E>, src: &R, y: *mut E) -> (f32, f32) {
        let d = call.d;
        // SAFETY: `j < d` for every operand; `h` is read in full before `y` is written, but in
        // the last loop, which reads `h_j` before writing `y_j`.
        unsafe {
            let at = |j: usize| src.at(j) as f64;
            let out = if (0..d).all(|j| at(j).is_finite()) {
                let rstd = rstd_of((0..d).map(|j| at(j) * at(j)).sum::<f64>() / d as f64, call.eps);
                for j in 0..d {
                    let g = if GAIN { *call.gamma.add(j) as f64 } else { 1.0 };
                    *y.add(j) = E::from_f32((at(j) * rstd * g) as f32);
                }
                (f32::NAN, rstd as f32)
            } else {
                std::slice::from_raw_parts_mut(y, d).fill(E::from_f32(f32::NAN));
                (f32::NAN, f32::NAN)
            };
            src.finish(d);
            out
        }
    }

    #[inline(always)]
    fn outputs(rstd: f64) -> (f32, f32) {
        (f32::NAN, rstd as f32)
    }
}
