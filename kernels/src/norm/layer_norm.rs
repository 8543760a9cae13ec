//! LayerNorm and the fused Add & LayerNorm.

use super::rows::{run, Calls, NormArgs, NormCall, Residual, RowOp, RowStats};
use super::source::{load_n, Source};
use super::stats::{
    block_dev, block_m2, block_sum, centre, moments, moments_f64, rstd_of, Affine, Moments, Pending, Trail,
};
use crate::dispatch::Kernels;
use crate::element::{Element, Typed};
use crate::error::Error;
use crate::simd::Simd;

/// Options of [`layer_norm`](crate::layer_norm()) and
/// [`add_layer_norm`](crate::add_layer_norm()): the affine parameters and ε.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerNormOptions<'a> {
    /// The gain `γ`, length `d`; absent means 1 (and saves its loads and multiplications).
    pub gamma: Option<&'a [f32]>,
    /// The bias `β`, length `d`; absent means 0.
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

impl Kernels {
    /// Validates and runs a LayerNorm call of any form.
    #[allow(clippy::too_many_arguments)]
    fn layer_norm_call<E: Element>(
        &self,
        x: (*const E, usize),
        y: (*mut E, usize),
        add: Option<(&[E], Residual)>,
        h: Option<(*mut E, usize)>,
        d: usize,
        opts: &LayerNormOptions,
        stats: RowStats,
    ) -> Result<(), Error> {
        let args = NormArgs {
            x,
            y,
            add,
            h,
            d,
            gamma: ("gamma", opts.gamma),
            beta: opts.beta,
            eps: opts.eps,
            stats,
        };
        let call = self.norm_call(args)?;
        // SAFETY: validated; the slices behind the pointers are borrowed by the caller.
        unsafe { self.run_layer_norm(E::typed(call)) };
        Ok(())
    }

    /// Runs a validated call. Not generic: the kernel is compiled in this crate (see
    /// [`Typed`]).
    ///
    /// # Safety
    /// As [`run`].
    unsafe fn run_layer_norm(&self, call: Typed<Calls>) {
        /// The instance of `γ`, `β` the call asks for.
        unsafe fn with<E: Element>(k: &Kernels, c: &NormCall<E>) {
            // SAFETY: forwarded.
            unsafe {
                match (!c.gamma.is_null(), !c.beta.is_null()) {
                    (false, false) => run::<E, Layer<false, false>>(k, c),
                    (false, true) => run::<E, Layer<false, true>>(k, c),
                    (true, false) => run::<E, Layer<true, false>>(k, c),
                    (true, true) => run::<E, Layer<true, true>>(k, c),
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

    /// LayerNorm of each row of `x` (`[rows, d]`) into `out`. See
    /// [`layer_norm`](crate::layer_norm()).
    pub fn layer_norm<E: Element>(
        &self,
        x: &[E],
        out: &mut [E],
        d: usize,
        opts: &LayerNormOptions,
    ) -> Result<(), Error> {
        self.layer_norm_with_stats(x, out, d, opts, RowStats::default())
    }

    /// LayerNorm of each row of `x` (`[rows, d]`), in place.
    pub fn layer_norm_inplace<E: Element>(&self, x: &mut [E], d: usize, opts: &LayerNormOptions) -> Result<(), Error> {
        let (p, len) = (x.as_mut_ptr(), x.len());
        self.layer_norm_call((p, len), (p, len), None, None, d, opts, RowStats::default())
    }

    /// LayerNorm of each row of `x` into `out`, with the per-row mean and rstd. See
    /// [`layer_norm`](crate::layer_norm()).
    pub fn layer_norm_with_stats<E: Element>(
        &self,
        x: &[E],
        out: &mut [E],
        d: usize,
        opts: &LayerNormOptions,
        stats: RowStats,
    ) -> Result<(), Error> {
        let y = (out.as_mut_ptr(), out.len());
        self.layer_norm_call((x.as_ptr(), x.len()), y, None, None, d, opts, stats)
    }

    /// `h = α·x + (r + b)`, `out = LayerNorm(h)`, `h` written to `h` if given. See
    /// [`add_layer_norm`](crate::add_layer_norm()).
    #[allow(clippy::too_many_arguments)]
    pub fn add_layer_norm<E: Element>(
        &self,
        x: &[E],
        r: &[E],
        out: &mut [E],
        h: Option<&mut [E]>,
        d: usize,
        residual: &Residual,
        opts: &LayerNormOptions,
    ) -> Result<(), Error> {
        self.add_layer_norm_with_stats(x, r, out, h, d, residual, opts, RowStats::default())
    }

    /// [`add_layer_norm`](Self::add_layer_norm) with the residual stream updated in place:
    /// `x ← α·x + (r + b)` (that is, `h`), `out = LayerNorm(x)`.
    pub fn add_layer_norm_inplace<E: Element>(
        &self,
        x: &mut [E],
        r: &[E],
        out: &mut [E],
        d: usize,
        residual: &Residual,
        opts: &LayerNormOptions,
    ) -> Result<(), Error> {
        let (p, len) = (x.as_mut_ptr(), x.len());
        let y = (out.as_mut_ptr(), out.len());
        let add = Some((r, *residual));
        self.layer_norm_call((p, len), y, add, Some((p, len)), d, opts, RowStats::default())
    }

    /// [`add_layer_norm`](Self::add_layer_norm) with the per-row mean and rstd of `h`.
    #[allow(clippy::too_many_arguments)]
    pub fn add_layer_norm_with_stats<E: Element>(
        &self,
        x: &[E],
        r: &[E],
        out: &mut [E],
        h: Option<&mut [E]>,
        d: usize,
        residual: &Residual,
        opts: &LayerNormOptions,
        stats: RowStats,
    ) -> Result<(), Error> {
        let y = (out.as_mut_ptr(), out.len());
        let h = h.map(|h| (h.as_mut_ptr(), h.len()));
        self.layer_norm_call((x.as_ptr(), x.len()), y, Some((r, *residual)), h, d, opts, stats)
    }
}

/// LayerNorm of one row, with or without `γ`, `β`.
pub(crate) struct Layer<const GAMMA: bool, const BETA: bool>;

impl<const GAMMA: bool, const BETA: bool> Layer<GAMMA, BETA> {
    /// The constants of a row of mean `k + mean` and sum of squared deviations `m2`, or NaN.
    #[inline(always)]
    fn affine<E>(call: &NormCall<E>, k: f32, mean: f64, m2: f64) -> Affine {
        let mo = Moments { n: 0.0, mean, m2 };
        let a = Affine::new(k as f64 + mean, rstd_of(m2 * (1.0 / call.d as f64), call.eps));
        if mo.fits_f32() {
            a
        } else {
            Affine::NAN
        }
    }
}

impl<const GAMMA: bool, const BETA: bool> RowOp for Layer<GAMMA, BETA> {
    type Stats = Affine;
    /// `μ_hi`, `−rstd`, `shift`.
    type Consts<S: Simd> = [S::V; 3];
    const TWO_PASS: bool = true;

    #[inline(always)]
    unsafe fn stats<S: Simd, E: Element, R: Source<S>, P: Pending<S>, const PREFETCH: bool>(
        s: S,
        call: &NormCall<E>,
        src: &R,
        pending: &P,
    ) -> Affine {
        let d = call.d;
        // SAFETY: the row holds `d` values, none stored yet.
        let k = unsafe { src.first() };
        let mo = unsafe { moments::<S, R, P, PREFETCH>(s, src, d, k, &mut Trail::new(pending, d)) };
        Self::affine(call, k, mo.mean, mo.m2)
    }

    #[inline(always)]
    unsafe fn first<S: Simd, R: Source<S>, const B: usize, const FULL: bool>(s: S, src: &R, d: usize, k: f32) -> S::V {
        // SAFETY: forwarded.
        unsafe { block_sum::<S, R, B, FULL>(s, src, 0, d, k) }
    }

    #[inline(always)]
    unsafe fn second<S: Simd, R: Source<S>, const B: usize, const FULL: bool>(
        s: S,
        src: &R,
        d: usize,
        k: f32,
        first: f32,
    ) -> S::V {
        // SAFETY: forwarded.
        unsafe { block_dev::<S, R, B, FULL>(s, src, 0, d, centre(k, first, d).1) }
    }

    #[inline(always)]
    fn short_stats<E>(call: &NormCall<E>, k: f32, first: f32, second: f32) -> Affine {
        let (mean, c) = centre(k, first, call.d);
        Self::affine(call, k, mean, block_m2(second, call.d, k, mean, c))
    }

    #[inline(always)]
    fn fast(a: &Affine) -> bool {
        !a.mean_hi.is_nan()
    }

    #[inline(always)]
    fn consts<S: Simd>(s: S, a: Affine) -> [S::V; 3] {
        [s.splat(a.mean_hi), s.splat(-a.rstd), s.splat(a.shift)]
    }

    /// `y = fma(fma(h − μ_hi, rstd, shift), γ, β)`, computed as `fma(fma(μ_hi − h, −rstd,
    /// shift), γ, β)`: the same bits (a rounded difference changes sign with its operands),
    /// and on x86 the load of `h` is the subtraction's memory operand.
    #[inline(always)]
    unsafe fn y<S: Simd, E>(s: S, call: &NormCall<E>, c: &[S::V; 3], h: S::V, i: usize, n: usize) -> S::V {
        let v = s.mul_add(s.sub(c[0], h), c[1], c[2]);
        // SAFETY: `i + n ≤ d`, the length of `γ` and `β` when present.
        unsafe {
            match (GAMMA, BETA) {
                (true, true) => s.mul_add(v, load_n(s, call.gamma, i, n), load_n(s, call.beta, i, n)),
                (true, false) => s.mul(v, load_n(s, call.gamma, i, n)),
                (false, true) => s.add(v, load_n(s, call.beta, i, n)),
                (false, false) => v,
            }
        }
    }

    unsafe fn wide<S: Simd, E: Element, R: Source<S>>(call: &NormCall<E>, src: &R, y: *mut E) -> (f32, f32) {
        let d = call.d;
        // SAFETY: the row holds `d` values at `src` and `y`; each `h_j` is read before `y_j`
        // is written.
        unsafe {
            let out = match moments_f64(|j| src.at(j), d) {
                Some(mo) => {
                    let rstd = rstd_of(mo.m2 / d as f64, call.eps);
                    for j in 0..d {
                        let mut v = (src.at(j) as f64 - mo.mean) * rstd;
                        if GAMMA {
                            v *= *call.gamma.add(j) as f64;
                        }
                        if BETA {
                            v += *call.beta.add(j) as f64;
                        }
                        *y.add(j) = E::from_f32(v as f32);
                    }
                    (mo.mean as f32, rstd as f32)
                }
                None => {
                    std::slice::from_raw_parts_mut(y, d).fill(E::from_f32(f32::NAN));
                    (f32::NAN, f32::NAN)
                }
            };
            src.finish(d);
            out
        }
    }

    #[inline(always)]
    fn outputs(a: Affine) -> (f32, f32) {
        (a.mean_hi, a.rstd)
    }
}
