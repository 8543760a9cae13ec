//! Softmax and log-softmax over the rows of a row-major `[rows, n]` matrix.
//!
//! # Semantics
//!
//! For each row `x` (and the optional additive `mask`, one row of length `n` broadcast over
//! all rows):
//!
//! ```text
//! z_j = fl(scale·x_j + mask_j)  the f32 score, rounded once (one FMA); −∞ wherever
//!                               mask_j = −∞, whatever x_j is
//! m   = max_j z_j
//! d   = Σ_j exp(z_j − m)
//! softmax_j     = exp(z_j − m) / d
//! log_softmax_j = (z_j − m) − ln d
//! ```
//!
//! - A fully masked row (every `z_j = −∞`) follows [`MaskedRows`]: by default softmax gives 0
//!   and log-softmax −∞ for the whole row; `MaskedRows::Nan` gives NaN.
//! - A NaN or +∞ in any unmasked `z_j` makes the whole row NaN (a score that overflows f32 is
//!   ±∞ like any f32 result).
//! - `n = 0` is a no-op.
//!
//! The scores are f32 by definition: the rounding of `scale·x + mask` is part of the
//! semantics, not of the error (with `|x| ≈ 10³⁶`, a mask of −10²⁷ is below half an ulp and
//! does not change the score). With `scale = 1` and no mask, `z = x` exactly.
//!
//! # Storage types
//!
//! `x` and `y` may be `f32`, `f16` or `bf16` (an [`Element`]); the mask is f32. A half-typed
//! row is widened exactly, computed as the f32 row is, and each output rounded once: the
//! result is bit for bit the f32 kernel's on the widened input, rounded to the type, and its
//! bound is the one below plus that rounding (`reference::check_softmax` with `E = f16, bf16`).
//! An f16 log-softmax below −65504 is −∞.
//!
//! # Error bound
//!
//! With `u = 2⁻²⁴`, `z` the f32 scores and `ŷ`, `d̂` the exact results on them (the f64
//! oracle, `reference::check_softmax`):
//!
//! ```text
//! softmax:      |y_j − ŷ_j| ≤ (24 + |z_j − m|)·u·ŷ_j + 2⁻¹²⁶
//! log-softmax:  |y_j − ŷ_j| ≤ (24 + |z_j − m| + |ln d̂| + |ŷ_j|)·u
//! ```
//!
//! The terms: `z − m` is rounded once (`|z − m|·u`, carried into `exp` as a relative error);
//! `exp` is within 1 ulp (≤ 2u relative); the sum is taken in chunks of at most 8 terms per
//! lane and accumulator, reduced as a tree (≤ 13u relative) and the chunk sums added in f64;
//! `1/d` and the product round once each; 24 leaves room for second-order terms. Results
//! below 2⁻¹²⁶ may be flushed to zero (the absolute term). Non-finite results (−∞ of masked
//! entries in log-softmax, NaN rows, values beyond the f32 range) match the oracle exactly.
//!
//! # Algorithm
//!
//! Three sweeps over a row, which stays in L1 or L2 between them: the max; `exp(z − m)`
//! stored (softmax only) and summed; the scaling by `1/d` (softmax) or the subtraction of
//! `m + ln d` (log-softmax, recomputing `z` rather than storing it). For f32 rows, `exp(z − m)`
//! is stored in `y` itself; for f16/bf16 rows it goes to an f32 stack buffer (rows of up to
//! 8192 elements) so that `y` is rounded only once, and longer rows recompute it in the third
//! sweep (the same bits, so every path gives the same result). Only the first read of
//! `x` and the last write of `y` reach memory for rows that fit in cache, and for rows of 512
//! floats or more the second sweep prefetches the next row's `x` and `y`, so that their
//! memory traffic overlaps this row's arithmetic. The second sweep computes four vectors'
//! exponentials in lockstep (a step of each in turn), so that their chains overlap. For f32
//! softmax rows longer than 256, the third sweep (a load, a product and a store per vector,
//! bound by the stores) runs inside the next row's second sweep (bound by the arithmetic), a
//! step of each in turn: the same operations on each element, so the same bits, with the two
//! overlapped.
//!
//! Rows of at most 256 values go in groups of up to 16 rows (2048 values): each sweep runs
//! over every row of the group before the next one starts, and leaves one vector per row
//! whose lanes the group then reduces together (the maxima after sweep 1, the sums after
//! sweep 2), several rows' lanes to each instruction. A short row's sweeps are one chain of
//! dependent steps (the maximum's horizontal reduction feeds its exponentials, the sum's
//! reduction and reciprocal feed its products), longer than its arithmetic: a group's rows
//! are independent, so the core overlaps their chains, and reduced together they share the
//! shuffles of the horizontal reductions. Every row is reduced by the same tree whatever its
//! place in the group, so the bits do not depend on the grouping (or on threads). Rows
//! shorter than one step of the second sweep (`4·LANES` values: 64 floats on AVX-512) take a
//! leaner form of the group that carries only each row's vector of maxima and vector of sums:
//! they are a few vectors each, and the general form's per-row state measured as a large part
//! of their time.
//!
//! NaN propagation does not rely on the max: x86's `maxps` drops a NaN, but a NaN `z_j` still
//! makes its `exp(z_j − m)` NaN, hence `d` NaN, hence the whole row NaN. The one case the sum
//! cannot see is a row whose only unmasked entries are NaN (the max is then −∞); the
//! fully-masked branch checks for it.

use std::mem::{size_of, MaybeUninit};
use std::ops::Range;

use crate::dispatch::{with_detected, Kernels, Op};
use crate::element::{in_place, Element, PerElement, Typed};
use crate::error::Error;
use crate::math::exp::exp_nonpositive;
use crate::parallel::{Split, GRAIN_ELEMENTS};
use crate::simd::lockstep::Lockstep;
use crate::simd::Simd;

/// What a row with every entry masked (−∞) becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MaskedRows {
    /// Softmax gives a row of 0 and log-softmax a row of −∞ (the probabilities of an empty
    /// set). The default: attention over a fully padded query yields a zero output.
    #[default]
    Zero,
    /// The row becomes NaN, as `exp(−∞ − (−∞))` would make it.
    Nan,
}

/// Options of [`softmax`](crate::softmax()) and [`log_softmax`](crate::log_softmax()).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SoftmaxOptions<'a> {
    /// Multiplies `x` before the mask is added; must be finite. Default 1.
    pub scale: f32,
    /// An additive mask of length `n`, broadcast over the rows; −∞ masks an entry out.
    pub mask: Option<&'a [f32]>,
    /// The policy for rows with every entry masked.
    pub masked_rows: MaskedRows,
}

impl Default for SoftmaxOptions<'_> {
    fn default() -> Self {
        SoftmaxOptions {
            scale: 1.0,
            mask: None,
            masked_rows: MaskedRows::Zero,
        }
    }
}

/// A validated call: `src` and `dst` cover `rows·n` elements (equal if they overlap), `mask`
/// is null or covers `n`.
#[derive(Clone, Copy)]
struct SoftmaxCall<E> {
    src: *const E,
    dst: *mut E,
    rows: usize,
    n: usize,
    scale: f32,
    /// Null when there is no mask.
    mask: *const f32,
    masked_rows: MaskedRows,
    log: bool,
}

/// Checks the arguments shared by every softmax entry point; returns the number of rows.
fn validate(len: usize, out_len: Option<usize>, n: usize, opts: &SoftmaxOptions) -> Result<usize, Error> {
    if let Some(out_len) = out_len {
        if out_len != len {
            return Err(Error::shape("out", format!("length {len} (as x)"), out_len));
        }
    }
    if let Some(mask) = opts.mask {
        if mask.len() != n {
            return Err(Error::shape("mask", format!("length {n} (n)"), mask.len()));
        }
    }
    if !opts.scale.is_finite() {
        return Err(Error::param("scale", "a finite number", opts.scale));
    }
    match n {
        0 if len == 0 => Ok(0),
        0 => Err(Error::shape("n", format!("a row length dividing x.len() = {len}"), "0")),
        _ if !len.is_multiple_of(n) => Err(Error::shape(
            "x",
            format!("a length that is a multiple of n = {n}"),
            len,
        )),
        _ => Ok(len / n),
    }
}

impl Kernels {
    fn softmax_call<E: Element>(
        &self,
        src: *const E,
        dst: *mut E,
        rows: usize,
        n: usize,
        opts: &SoftmaxOptions,
        log: bool,
    ) {
        let call = SoftmaxCall {
            src,
            dst,
            rows,
            n,
            scale: opts.scale,
            mask: opts.mask.map_or(std::ptr::null(), |m| m.as_ptr()),
            masked_rows: opts.masked_rows,
            log,
        };
        if rows > 0 {
            // SAFETY: the pointers cover `rows·n` elements (and `n` of mask), as `validate`
            // checked, and `dst` is `src` or an exclusive borrow.
            unsafe { self.run_softmax(E::typed(call)) }
        }
    }

    /// Runs a validated call. Not generic: the kernel is compiled in this crate (see
    /// [`Typed`]).
    ///
    /// # Safety
    /// As [`SoftmaxCall`].
    unsafe fn run_softmax(&self, call: Typed<Softmax>) {
        // SAFETY: forwarded.
        unsafe { call.run_split(self) }
    }

    /// Softmax of each row of `x` (`[rows, n]`) into `out`. See [`softmax`](crate::softmax()).
    pub fn softmax<E: Element>(&self, x: &[E], out: &mut [E], n: usize, opts: &SoftmaxOptions) -> Result<(), Error> {
        let rows = validate(x.len(), Some(out.len()), n, opts)?;
        self.softmax_call(x.as_ptr(), out.as_mut_ptr(), rows, n, opts, false);
        Ok(())
    }

    /// Softmax of each row of `x` (`[rows, n]`), in place.
    pub fn softmax_inplace<E: Element>(&self, x: &mut [E], n: usize, opts: &SoftmaxOptions) -> Result<(), Error> {
        let rows = validate(x.len(), None, n, opts)?;
        let (src, dst, _) = in_place(x);
        self.softmax_call(src, dst, rows, n, opts, false);
        Ok(())
    }

    /// Log-softmax of each row of `x` (`[rows, n]`) into `out`. See
    /// [`log_softmax`](crate::log_softmax()).
    pub fn log_softmax<E: Element>(
        &self,
        x: &[E],
        out: &mut [E],
        n: usize,
        opts: &SoftmaxOptions,
    ) -> Result<(), Error> {
        let rows = validate(x.len(), Some(out.len()), n, opts)?;
        self.softmax_call(x.as_ptr(), out.as_mut_ptr(), rows, n, opts, true);
        Ok(())
    }

    /// Log-softmax of each row of `x` (`[rows, n]`), in place.
    pub fn log_softmax_inplace<E: Element>(&self, x: &mut [E], n: usize, opts: &SoftmaxOptions) -> Result<(), Error> {
        let rows = validate(x.len(), None, n, opts)?;
        let (src, dst, _) = in_place(x);
        self.softmax_call(src, dst, rows, n, opts, true);
        Ok(())
    }
}

/// Softmax of each row of the row-major `[rows, n]` matrix `x`, into `out`.
///
/// `z_j = fl(scale·x_j + mask_j)` (an f32 score, rounded once), `y_j = exp(z_j − m) /
/// Σ_k exp(z_k − m)` with `m = max z`. A −∞ mask entry masks its position whatever `x` holds
/// there; a fully masked row follows [`SoftmaxOptions::masked_rows`] (0 by default); a NaN or
/// +∞ among the unmasked scores makes the row NaN. `n = 0` (with empty `x`) is a no-op.
///
/// Error bound (u = 2⁻²⁴, `ŷ` the exact softmax of the f32 scores `z`):
/// `|y_j − ŷ_j| ≤ (24 + |z_j − m|)·u·ŷ_j + 2⁻¹²⁶`. Details in the [module docs](mod@crate::softmax).
///
/// # Errors
/// [`Error::Shape`] if `x.len()` is not a multiple of `n`, `out.len() ≠ x.len()`, or the mask
/// length is not `n`; [`Error::Param`] if `scale` is not finite.
///
/// ```
/// let x = [1.0, 2.0, 3.0, 0.0, 0.0, 0.0];
/// let mut y = [0.0; 6];
/// kernels::softmax(&x, &mut y, 3, &Default::default())?;
/// assert!((y[3] - 1.0 / 3.0).abs() < 1e-7);
/// # Ok::<(), kernels::Error>(())
/// ```
pub fn softmax<E: Element>(x: &[E], out: &mut [E], n: usize, opts: &SoftmaxOptions) -> Result<(), Error> {
    with_detected(|k| k.softmax(x, out, n, opts))
}

/// [`softmax()`] in place.
pub fn softmax_inplace<E: Element>(x: &mut [E], n: usize, opts: &SoftmaxOptions) -> Result<(), Error> {
    with_detected(|k| k.softmax_inplace(x, n, opts))
}

/// Log-softmax of each row of the row-major `[rows, n]` matrix `x`, into `out`.
///
/// `y_j = (z_j − m) − ln Σ_k exp(z_k − m)`, with `z`, the mask and the policies as in
/// [`softmax()`] (a fully masked row gives −∞ under [`MaskedRows::Zero`]).
///
/// Error bound (notation of [`softmax()`], `d̂` the exact sum):
/// `|y_j − ŷ_j| ≤ (24 + |z_j − m| + |ln d̂| + |ŷ_j|)·u`; infinite and NaN results match
/// exactly.
///
/// # Errors
/// As [`softmax()`].
pub fn log_softmax<E: Element>(x: &[E], out: &mut [E], n: usize, opts: &SoftmaxOptions) -> Result<(), Error> {
    with_detected(|k| k.log_softmax(x, out, n, opts))
}

/// [`log_softmax()`] in place.
pub fn log_softmax_inplace<E: Element>(x: &mut [E], n: usize, opts: &SoftmaxOptions) -> Result<(), Error> {
    with_detected(|k| k.log_softmax_inplace(x, n, opts))
}

/// The softmax calls of every storage type.
struct Softmax;

impl PerElement for Softmax {
    type Of<E: Element> = SoftmaxCall<E>;
}

impl<E: Element> Split for SoftmaxCall<E> {
    fn units(&self) -> usize {
        self.rows
    }

    fn grain(&self) -> usize {
        GRAIN_ELEMENTS.div_ceil(self.n)
    }

    unsafe fn part(&self, rows: Range<usize>, _: usize) -> Self {
        SoftmaxCall {
            src: self.src.wrapping_add(rows.start * self.n),
            dst: self.dst.wrapping_add(rows.start * self.n),
            rows: rows.len(),
            ..*self
        }
    }
}

impl<E: Element> Op for SoftmaxCall<E> {
    type Output = ();

    #[inline(always)]
    unsafe fn eval<S: Simd>(self, s: S) {
        // SAFETY: the call's contract.
        unsafe { softmax_rows(s, &self) }
    }
}

/// Entry of the generic body: picks the instance for the options, then runs every row.
///
/// # Safety
/// As [`SoftmaxCall`].
#[inline(always)]
unsafe fn softmax_rows<S: Simd, E: Element>(s: S, call: &SoftmaxCall<E>) {
    let masked = !call.mask.is_null();
    let scaled = call.scale != 1.0;
    // SAFETY: forwarded from the caller.
    unsafe {
        match (masked, scaled, call.log) {
            (false, false, false) => rows::<S, E, false, false, false>(s, call),
            (false, false, true) => rows::<S, E, false, false, true>(s, call),
            (false, true, false) => rows::<S, E, false, true, false>(s, call),
            (false, true, true) => rows::<S, E, false, true, true>(s, call),
            (true, false, false) => rows::<S, E, true, false, false>(s, call),
            (true, false, true) => rows::<S, E, true, false, true>(s, call),
            (true, true, false) => rows::<S, E, true, true, false>(s, call),
            (true, true, true) => rows::<S, E, true, true, true>(s, call),
        }
    }
}

/// Rows of half-typed softmax at most this long keep `exp(z − m)` in an f32 stack buffer
/// (32 KiB, within L1) between the second and third sweeps; longer ones recompute it.
const SCRATCH: usize = 8192;

/// Rows at most this long go in groups (see [`grouped_rows`]).
const GROUP_MAX_LEN: usize = 256;
/// The most rows in a group, and the most elements: a group's `x` and `y` (or its f32
/// exponentials) stay in L1 from one sweep to the next.
const GROUP_ROWS: usize = 16;
const GROUP_ELEMENTS: usize = 2048;

#[inline(always)]
unsafe fn rows<S: Simd, E: Element, const MASK: bool, const SCALE: bool, const LOG: bool>(s: S, call: &SoftmaxCall<E>) {
    let n = call.n;
    let mut scratch = MaybeUninit::<[f32; SCRATCH]>::uninit();
    // Where sweep 2 keeps `exp(z − m)`: `y` itself for f32, the stack buffer for a half type
    // when the row fits, nowhere (recomputed) otherwise.
    let buffer: *mut f32 = if n <= SCRATCH {
        scratch.as_mut_ptr().cast()
    } else {
        std::ptr::null_mut()
    };
    if n <= GROUP_MAX_LEN {
        // SAFETY: forwarded; `buffer` holds `SCRATCH ≥ GROUP_ELEMENTS` floats.
        unsafe { grouped_rows::<S, E, MASK, SCALE, LOG>(s, call, buffer) };
        return;
    }
    // An f32 softmax row's sweep 3 runs inside the next row's sweep 2 (module docs): `behind`
    // is the row still to scale.
    let pipelined = E::IS_F32 && !LOG;
    let mut behind = Behind::none(s);
    for r in 0..call.rows {
        // The next row's lines, fetched during this row's compute-bound sweep, so that memory
        // traffic overlaps the arithmetic instead of following it. Short rows are left to the
        // hardware prefetchers.
        let ahead = if r + 1 < call.rows && n >= PREFETCH_MIN_LEN {
            [
                call.src.wrapping_add((r + 1) * n).cast::<u8>(),
                call.dst.wrapping_add((r + 1) * n).cast_const().cast::<u8>(),
            ]
        } else {
            [std::ptr::null(); 2]
        };
        // SAFETY: row `r` lies inside the `rows·n` elements the caller vouched for.
        unsafe {
            let z = scores::<S, E, MASK, SCALE>(s, call, r);
            let y = call.dst.add(r * n);
            let exps = if E::IS_F32 { y.cast() } else { buffer };
            let m = row_max(s, &z, n);
            if m == f32::NEG_INFINITY {
                masked_row(s, &z, y, n, call.masked_rows, LOG);
                continue;
            }
            if !pipelined {
                let total = row_exps::<S, E, MASK, SCALE, LOG>(s, &z, exps, n, m, ahead, Behind::none(s));
                row_normalize::<S, E, MASK, SCALE, LOG>(s, &z, y, exps, n, m, row_factor::<LOG>(total));
                continue;
            }
            // `behind`'s whole steps were scaled with this row's; its tail follows.
            let total = row_exps::<S, E, MASK, SCALE, LOG>(s, &z, exps, n, m, ahead, behind);
            behind.finish(s, n - n % (4 * S::LANES), n);
            behind = Behind {
                y: exps,
                inv: s.splat(row_factor::<LOG>(total)),
            };
        }
    }
    // SAFETY: `behind` is null or a row of this call whose exponentials sweep 2 stored.
    unsafe { behind.finish(s, 0, n) };
}

/// An f32 softmax row whose exponentials are stored and whose sweep 3 (`y = e·inv`) is still
/// to run; null `y` for none.
#[derive(Clone, Copy)]
struct Behind<S: Simd> {
    y: *mut f32,
    inv: S::V,
}

impl<S: Simd> Behind<S> {
    #[inline(always)]
    fn none(s: S) -> Self {
        Behind {
            y: std::ptr::null_mut(),
            inv: s.splat(0.0),
        }
    }

    /// Sweep 3 of the row's `y[from..n]` (nothing for none).
    ///
    /// # Safety
    /// `y` is null or covers `n ≥ from` floats.
    #[inline(always)]
    unsafe fn finish(&self, s: S, from: usize, n: usize) {
        if !self.y.is_null() {
            let inv = self.inv;
            // SAFETY: `y[from..n]` lies in the row.
            unsafe {
                crate::math::map_row(
                    s,
                    self.y.add(from).cast_const(),
                    self.y.add(from),
                    n - from,
                    |s: S, e: S::V| s.mul(e, inv),
                )
            };
        }
    }
}

/// Short rows, a group at a time: each sweep runs over every row of the group before the next
/// sweep starts, and the group's maxima and sums are reduced together (module docs). Every
/// row gets the same steps and the same reduction tree in any place of a group, so the bits
/// do not depend on how rows fall into groups (or threads).
///
/// # Safety
/// As [`SoftmaxCall`]; `n ≤ GROUP_MAX_LEN`; `buffer` holds `SCRATCH` writable floats.
#[inline(always)]
unsafe fn grouped_rows<S: Simd, E: Element, const MASK: bool, const SCALE: bool, const LOG: bool>(
    s: S,
    call: &SoftmaxCall<E>,
    buffer: *mut f32,
) {
    let n = call.n;
    if n < 4 * S::LANES {
        // SAFETY: forwarded.
        unsafe { short_rows::<S, E, MASK, SCALE, LOG>(s, call, buffer) };
        return;
    }
    let group = (GROUP_ELEMENTS / n).clamp(1, GROUP_ROWS);
    let mut first = 0;
    while first < call.rows {
        let count = group.min(call.rows - first);
        // Sweep 2 of each row fetches the same row of the next group, so that the next group's
        // memory traffic overlaps this group's arithmetic.
        let next = first + count;
        let ahead = |j: usize| {
            if next + j < call.rows {
                [
                    call.src.wrapping_add((next + j) * n).cast::<u8>(),
                    call.dst.wrapping_add((next + j) * n).cast_const().cast::<u8>(),
                ]
            } else {
                [std::ptr::null(); 2]
            }
        };
        let main = n - n % (4 * S::LANES);
        // The first chunk of sweep 2; rows longer than one chunk (only on ISAs of fewer than
        // 8 lanes) add their further chunks' sums row by row, in `more`.
        let first_chunk = main.min(chunk_len::<S>());
        // Each sweep leaves one vector per row and reduces the group's vectors together, the
        // lanes of several rows to each instruction; a missing row's vectors (−∞, +0) are
        // reduced and ignored.
        let mut steps = [s.splat(0.0); GROUP_ROWS];
        let mut more = [0.0f64; GROUP_ROWS];
        let mut tails = [s.splat(0.0); GROUP_ROWS];
        let mut sums = [[0.0f32; GROUP_ROWS]; 2];
        // SAFETY: rows `first..first + count` lie inside the call, and `count·n ≤ GROUP_ELEMENTS`.
        unsafe {
            let exps = |j: usize| group_exps(call, buffer, first + j, j);
            let m = group_maxima::<S, E, MASK, SCALE>(s, call, first, count);
            for j in 0..count {
                let z = scores::<S, E, MASK, SCALE>(s, call, first + j);
                if m[j] == f32::NEG_INFINITY {
                    masked_row(s, &z, call.dst.add((first + j) * n), n, call.masked_rows, LOG);
                    continue;
                }
                if main > 0 {
                    steps[j] = exps_steps::<S, E, MASK, SCALE, LOG>(
                        s,
                        &z,
                        exps(j),
                        0..first_chunk,
                        m[j],
                        ahead(j),
                        Behind::none(s),
                    );
                    more[j] = exps_chunks::<S, E, MASK, SCALE, LOG>(
                        s,
                        &z,
                        exps(j),
                        first_chunk..main,
                        m[j],
                        ahead(j),
                        Behind::none(s),
                    );
                }
                if main < n {
                    tails[j] = exps_tail::<S, E, MASK, SCALE, LOG>(s, &z, exps(j), main, n, m[j]);
                }
            }
            // (A sum of +0 terms adds +0 to the total: skipped, the same bits.)
            if main > 0 {
                s.reduce_add_16(&steps, &mut sums[0]);
            }
            if main < n {
                s.reduce_add_16(&tails, &mut sums[1]);
            }
            // The rows' factors first, in a loop of independent steps (a division or a
            // logarithm each), rather than each at the head of its row's sweep. (Those of
            // missing and masked rows are unused.)
            let mut factors = [0.0f32; GROUP_ROWS];
            for (j, f) in factors.iter_mut().enumerate() {
                *f = row_factor::<LOG>(sums[0][j] as f64 + more[j] + sums[1][j] as f64);
            }
            for j in 0..count {
                if m[j] != f32::NEG_INFINITY {
                    let z = scores::<S, E, MASK, SCALE>(s, call, first + j);
                    let y = call.dst.add((first + j) * n);
                    row_normalize::<S, E, MASK, SCALE, LOG>(s, &z, y, exps(j), n, m[j], factors[j]);
                }
            }
        }
        first += count;
    }
}

/// [`grouped_rows`] for rows shorter than one step of sweep 2 (`n < 4·LANES`): each row's
/// sweeps are a few vectors, and the group carries only what such rows need (a vector of
/// maxima and one of sums per row): on such rows it measured well ahead of the general form,
/// whose per-row state cost more than their arithmetic.
///
/// # Safety
/// As [`grouped_rows`]; `n < 4·LANES`.
#[inline(always)]
unsafe fn short_rows<S: Simd, E: Element, const MASK: bool, const SCALE: bool, const LOG: bool>(
    s: S,
    call: &SoftmaxCall<E>,
    buffer: *mut f32,
) {
    let n = call.n;
    let mut first = 0;
    while first < call.rows {
        let count = GROUP_ROWS.min(call.rows - first);
        let mut tails = [s.splat(0.0); GROUP_ROWS];
        let mut sums = [0.0f32; GROUP_ROWS];
        let mut factors = [0.0f32; GROUP_ROWS];
        // SAFETY: rows `first..first + count` lie inside the call, and `count·n < 16·4·LANES ≤
        // GROUP_ELEMENTS`.
        unsafe {
            let exps = |j: usize| group_exps(call, buffer, first + j, j);
            let m = group_maxima::<S, E, MASK, SCALE>(s, call, first, count);
            for (j, tail) in tails.iter_mut().enumerate().take(count) {
                if m[j] != f32::NEG_INFINITY {
                    let z = scores::<S, E, MASK, SCALE>(s, call, first + j);
                    *tail = exps_tail::<S, E, MASK, SCALE, LOG>(s, &z, exps(j), 0, n, m[j]);
                }
            }
            s.reduce_add_16(&tails, &mut sums);
            for (f, &sum) in factors.iter_mut().zip(&sums) {
                *f = row_factor::<LOG>(sum as f64);
            }
            for j in 0..count {
                let z = scores::<S, E, MASK, SCALE>(s, call, first + j);
                let y = call.dst.add((first + j) * n);
                if m[j] == f32::NEG_INFINITY {
                    masked_row(s, &z, y, n, call.masked_rows, LOG);
                } else {
                    row_normalize::<S, E, MASK, SCALE, LOG>(s, &z, y, exps(j), n, m[j], factors[j]);
                }
            }
        }
        first += count;
    }
}

/// Sweep 1 of the group of rows `first..first + count` (`count ≤ GROUP_ROWS`): each row leaves
/// a vector whose lanes the group reduces together, several rows' lanes to each instruction.
/// The maxima past `count` are −∞ (from the missing rows' vectors, reduced and ignored).
///
/// # Safety
/// Rows `first..first + count` lie inside the call.
#[inline(always)]
unsafe fn group_maxima<S: Simd, E: Element, const MASK: bool, const SCALE: bool>(
    s: S,
    call: &SoftmaxCall<E>,
    first: usize,
    count: usize,
) -> [f32; GROUP_ROWS] {
    let mut lanes = [s.splat(f32::NEG_INFINITY); GROUP_ROWS];
    for (j, lanes) in lanes.iter_mut().enumerate().take(count) {
        // SAFETY: row `first + j` lies inside the call.
        *lanes = unsafe { row_max_lanes(s, &scores::<S, E, MASK, SCALE>(s, call, first + j), call.n) };
    }
    let mut m = [0.0f32; GROUP_ROWS];
    s.reduce_max_16(&lanes, &mut m);
    m
}

/// Where sweep 2 of row `r`, row `j` of its group, keeps its f32 exponentials: `y` itself for
/// f32, `buffer[j·n..]` for a half type.
///
/// # Safety
/// Row `r` lies inside the call; for a half type, `buffer` holds `SCRATCH ≥ GROUP_ELEMENTS`
/// floats and `(j + 1)·n ≤ GROUP_ELEMENTS`.
#[inline(always)]
unsafe fn group_exps<E: Element>(call: &SoftmaxCall<E>, buffer: *mut f32, r: usize, j: usize) -> *mut f32 {
    // SAFETY: row `r` of `y`, or row `j` of the group in the buffer.
    unsafe {
        if E::IS_F32 {
            call.dst.add(r * call.n).cast::<f32>()
        } else {
            buffer.add(j * call.n)
        }
    }
}

/// The scores of row `r` of a call.
///
/// # Safety
/// `r < call.rows`.
#[inline(always)]
unsafe fn scores<S: Simd, E: Element, const MASK: bool, const SCALE: bool>(
    s: S,
    call: &SoftmaxCall<E>,
    r: usize,
) -> Scores<S, E, MASK, SCALE> {
    Scores {
        // SAFETY: row `r` lies inside the call.
        x: unsafe { call.src.add(r * call.n) },
        mask: call.mask,
        scale: s.splat(call.scale),
    }
}

/// The scores `z` of one row, computed from `x` (and the mask) on the fly.
struct Scores<S: Simd, E, const MASK: bool, const SCALE: bool> {
    x: *const E,
    mask: *const f32,
    scale: S::V,
}

impl<S: Simd, E: Element, const MASK: bool, const SCALE: bool> Scores<S, E, MASK, SCALE> {
    #[inline(always)]
    fn combine(&self, s: S, x: S::V, mask: S::V) -> S::V {
        let neg_inf = s.splat(f32::NEG_INFINITY);
        match (MASK, SCALE) {
            (false, false) => x,
            (false, true) => s.mul(x, self.scale),
            (true, scaled) => {
                let z = if scaled {
                    s.mul_add(x, self.scale, mask)
                } else {
                    s.add(x, mask)
                };
                // A −∞ mask wins over a NaN or +∞ score.
                s.select(s.eq(mask, neg_inf), neg_inf, z)
            }
        }
    }

    /// `z[i..i + LANES]`.
    ///
    /// # Safety
    /// `i + LANES ≤ n`.
    #[inline(always)]
    unsafe fn full(&self, s: S, i: usize) -> S::V {
        // SAFETY: in bounds by the caller's promise.
        unsafe {
            let mask = if MASK { s.load(self.mask.add(i)) } else { s.splat(0.0) };
            self.combine(s, E::load(s, self.x.add(i)), mask)
        }
    }

    /// `z[i..i + len]` for `len < LANES`, −∞ in the other lanes.
    ///
    /// # Safety
    /// `i + len ≤ n`.
    #[inline(always)]
    unsafe fn partial(&self, s: S, i: usize, len: usize) -> S::V {
        // SAFETY: in bounds by the caller's promise; partial accesses stop at `len`.
        unsafe {
            let mask = if MASK {
                s.load_partial(self.mask.add(i), len, 0.0)
            } else {
                s.splat(0.0)
            };
            let z = self.combine(s, E::load_partial(s, self.x.add(i), len, 0.0), mask);
            s.select(s.first_lanes(len), z, s.splat(f32::NEG_INFINITY))
        }
    }
}

/// Rows at least this long prefetch the next row (as the norms do; shorter rows are covered by
/// the hardware prefetchers).
const PREFETCH_MIN_LEN: usize = 512;

/// Terms each lane of each accumulator adds before the chunk is reduced: bounds the rounding
/// error of the sum by `(8 − 1) + 2 + log₂ LANES` roundings, whatever `n` is.
const CHUNK_STEPS: usize = 8;

/// The values of one chunk: `CHUNK_STEPS` steps of four vectors.
#[inline(always)]
fn chunk_len<S: Simd>() -> usize {
    CHUNK_STEPS * 4 * S::LANES
}

/// Sweep 1 of a row: `m = max z`. (The partial and single vectors go to separate
/// accumulators.)
///
/// # Safety
/// `z` covers `n ≥ 1` elements.
#[inline(always)]
unsafe fn row_max<S: Simd, E: Element, const MASK: bool, const SCALE: bool>(
    s: S,
    z: &Scores<S, E, MASK, SCALE>,
    n: usize,
) -> f32 {
    // SAFETY: forwarded.
    s.reduce_max(unsafe { row_max_lanes(s, z, n) })
}

/// Sweep 1 of a row up to its last step: a vector whose lanes' maximum is `max z`.
///
/// # Safety
/// As [`row_max`].
#[inline(always)]
unsafe fn row_max_lanes<S: Simd, E: Element, const MASK: bool, const SCALE: bool>(
    s: S,
    z: &Scores<S, E, MASK, SCALE>,
    n: usize,
) -> S::V {
    let lanes = S::LANES;
    let main = n - n % (4 * lanes);
    let mut acc = [s.splat(f32::NEG_INFINITY); 4];
    let mut i = 0;
    // SAFETY: every `full(i)` has `i + LANES ≤ n`, the `partial(i, len)` has `i + len = n`.
    while i < main {
        for (k, a) in acc.iter_mut().enumerate() {
            *a = s.max(*a, unsafe { z.full(s, i + k * lanes) });
        }
        i += 4 * lanes;
    }
    while i + lanes <= n {
        acc[0] = s.max(acc[0], unsafe { z.full(s, i) });
        i += lanes;
    }
    if i < n {
        acc[1] = s.max(acc[1], unsafe { z.partial(s, i, n - i) });
    }
    s.max(s.max(acc[0], acc[1]), s.max(acc[2], acc[3]))
}

/// Sweep 2 of a row whose maximum `m` is finite: `e_j = exp(z_j − m)`, stored in `exps` for
/// softmax (unless `exps` is null), summed in bounded chunks; returns the sum. Prefetches the
/// lines of `ahead` (null entries are skipped) and runs sweep 3 of `behind`'s whole steps as it
/// goes.
///
/// # Safety
/// `z` covers `n` elements; `exps` is null or covers `n` writable floats, and is `y` itself or
/// disjoint from `z`; `behind` is none or a row of `n` floats disjoint from both.
#[inline(always)]
unsafe fn row_exps<S: Simd, E: Element, const MASK: bool, const SCALE: bool, const LOG: bool>(
    s: S,
    z: &Scores<S, E, MASK, SCALE>,
    exps: *mut f32,
    n: usize,
    m: f32,
    ahead: [*const u8; 2],
    behind: Behind<S>,
) -> f64 {
    let main = n - n % (4 * S::LANES);
    // SAFETY: forwarded; both ranges lie in `0..n`. (A tail that holds no term would add +0:
    // skipped, the same bits.)
    unsafe {
        let mut total = exps_chunks::<S, E, MASK, SCALE, LOG>(s, z, exps, 0..main, m, ahead, behind);
        if main < n {
            total += s.reduce_add(exps_tail::<S, E, MASK, SCALE, LOG>(s, z, exps, main, n, m)) as f64;
        }
        total
    }
}

/// Sweep 2 (as [`row_exps`]) over `range`, whole steps of `4·LANES` values, in chunks of at
/// most `CHUNK_STEPS` steps: returns the sum of the chunks' sums, in f64 (+0 if `range` is
/// empty).
///
/// # Safety
/// As [`row_exps`]; `range` lies in `0..n` and holds a multiple of `4·LANES` values.
#[inline(always)]
unsafe fn exps_chunks<S: Simd, E: Element, const MASK: bool, const SCALE: bool, const LOG: bool>(
    s: S,
    z: &Scores<S, E, MASK, SCALE>,
    exps: *mut f32,
    range: Range<usize>,
    m: f32,
    ahead: [*const u8; 2],
    behind: Behind<S>,
) -> f64 {
    let mut total = 0.0f64;
    let mut i = range.start;
    while i < range.end {
        let end = range.end.min(i + chunk_len::<S>());
        // SAFETY: forwarded; `i..end` lies in `range`.
        total +=
            s.reduce_add(unsafe { exps_steps::<S, E, MASK, SCALE, LOG>(s, z, exps, i..end, m, ahead, behind) }) as f64;
        i = end;
    }
    total
}

/// Part of sweep 2 (as [`row_exps`]) over `range`, whole steps of `4·LANES` values and at
/// most `CHUNK_STEPS` of them: returns the vector of the four accumulators' sums (a tree).
///
/// # Safety
/// As [`row_exps`]; `range` lies in `0..n` and holds a multiple of `4·LANES` values.
#[inline(always)]
unsafe fn exps_steps<S: Simd, E: Element, const MASK: bool, const SCALE: bool, const LOG: bool>(
    s: S,
    z: &Scores<S, E, MASK, SCALE>,
    exps: *mut f32,
    range: Range<usize>,
    m: f32,
    ahead: [*const u8; 2],
    behind: Behind<S>,
) -> S::V {
    let keep = !LOG && !exps.is_null();
    let lanes = S::LANES;
    let mv = s.splat(m);
    let mut acc = [s.splat(0.0); 4];
    let mut i = range.start;
    // SAFETY: as `row_max`; `exps` is written at the indices read.
    while i < range.end {
        for p in ahead.into_iter().filter(|p| !p.is_null()) {
            // One hint per 64-byte line of the 4 vectors this step covers.
            for line in (0..4 * lanes).step_by(64 / size_of::<E>()) {
                s.prefetch(p.wrapping_add((i + line) * size_of::<E>()).cast());
            }
        }
        // The step's four exponentials in lockstep: one alone is a chain of a dozen dependent
        // operations, and four side by side keep the core's ports busier (the same bits).
        let l = Lockstep::<S, 4>(s);
        let mut x = l.splat(0.0);
        for (k, x) in x.iter_mut().enumerate() {
            *x = s.sub(unsafe { z.full(s, i + k * lanes) }, mv);
        }
        for (k, (a, e)) in acc.iter_mut().zip(exp_nonpositive(l, x)).enumerate() {
            if keep {
                unsafe { s.store(exps.add(i + k * lanes), e) };
            }
            *a = s.add(*a, e);
        }
        if !behind.y.is_null() {
            for k in 0..4 {
                // SAFETY: `behind` covers `n` floats, and `i + 4·LANES ≤ n`.
                unsafe {
                    let p = behind.y.add(i + k * lanes);
                    s.store(p, s.mul(s.load(p), behind.inv));
                }
            }
        }
        i += 4 * lanes;
    }
    tree_sum(s, &acc)
}

/// The end of sweep 2 (as [`row_exps`]) from `i`, where at most three full vectors and one
/// partial remain: summed in order in one accumulator (at most four terms per lane), which
/// keeps a short row's state in one register.
///
/// # Safety
/// As [`row_exps`]; `n − i < 4·LANES`.
#[inline(always)]
unsafe fn exps_tail<S: Simd, E: Element, const MASK: bool, const SCALE: bool, const LOG: bool>(
    s: S,
    z: &Scores<S, E, MASK, SCALE>,
    exps: *mut f32,
    mut i: usize,
    n: usize,
    m: f32,
) -> S::V {
    let keep = !LOG && !exps.is_null();
    let lanes = S::LANES;
    let mv = s.splat(m);
    let mut acc = s.splat(0.0);
    // SAFETY: as `row_max`; `exps` is written at the indices read.
    while i + lanes <= n {
        let e = exp_nonpositive(s, s.sub(unsafe { z.full(s, i) }, mv));
        if keep {
            unsafe { s.store(exps.add(i), e) };
        }
        acc = s.add(acc, e);
        i += lanes;
    }
    if i < n {
        let e = exp_nonpositive(s, s.sub(unsafe { z.partial(s, i, n - i) }, mv));
        if keep {
            unsafe { s.store_partial(exps.add(i), n - i, e) };
        }
        acc = s.add(acc, e);
    }
    acc
}

/// What sweep 3 applies for a row whose exponentials sum to `total`: `1/total` for softmax,
/// `ln total` for log-softmax, computed in f64 and rounded once.
#[inline(always)]
fn row_factor<const LOG: bool>(total: f64) -> f32 {
    if LOG {
        total.ln() as f32
    } else {
        (1.0 / total) as f32
    }
}

/// Sweep 3 of a row: `y = exps·factor` with `factor = 1/d` (recomputing the exponentials where
/// `exps` is null), or `(z − m) − factor` with `factor = ln d` for log-softmax ([`row_factor`]).
///
/// # Safety
/// As [`row_exps`], whose `exps` and results these are; `y` covers `n` writable elements,
/// equal to `z.x` if they overlap.
#[inline(always)]
unsafe fn row_normalize<S: Simd, E: Element, const MASK: bool, const SCALE: bool, const LOG: bool>(
    s: S,
    z: &Scores<S, E, MASK, SCALE>,
    y: *mut E,
    exps: *mut f32,
    n: usize,
    m: f32,
    factor: f32,
) {
    let lanes = S::LANES;
    let mv = s.splat(m);
    if LOG {
        let ln_d = s.splat(factor);
        // SAFETY: as `row_max`; `x` was not written (log-softmax stores nothing in sweep 2).
        let mut i = 0;
        while i + lanes <= n {
            unsafe { E::store(s, y.add(i), s.sub(s.sub(z.full(s, i), mv), ln_d)) };
            i += lanes;
        }
        if i < n {
            unsafe { E::store_partial(s, y.add(i), n - i, s.sub(s.sub(z.partial(s, i, n - i), mv), ln_d)) };
        }
    } else {
        let inv = s.splat(factor);
        if exps.is_null() {
            // SAFETY: as the caller's.
            unsafe { recompute(s, z, y, n, mv, inv) };
        } else {
            // SAFETY: `exps` holds the `n` values of sweep 2 (it is `y` itself for f32).
            unsafe { crate::math::map_row(s, exps.cast_const(), y, n, |s: S, e: S::V| s.mul(e, inv)) };
        }
    }
}

/// Sweep 3 without stored exponentials: `y = exp(z − m)·inv`, the same bits as sweep 2's.
///
/// # Safety
/// As [`row`].
#[inline(always)]
unsafe fn recompute<S: Simd, E: Element, const MASK: bool, const SCALE: bool>(
    s: S,
    z: &Scores<S, E, MASK, SCALE>,
    y: *mut E,
    n: usize,
    mv: S::V,
    inv: S::V,
) {
    let lanes = S::LANES;
    let mut i = 0;
    // SAFETY: full accesses have `i + LANES ≤ n`, the partial one `i + len = n`.
    while i + lanes <= n {
        unsafe { E::store(s, y.add(i), s.mul(exp_nonpositive(s, s.sub(z.full(s, i), mv)), inv)) };
        i += lanes;
    }
    if i < n {
        let e = exp_nonpositive(s, s.sub(unsafe { z.partial(s, i, n - i) }, mv));
        unsafe { E::store_partial(s, y.add(i), n - i, s.mul(e, inv)) };
    }
}

/// The accumulators added as a balanced tree.
#[inline(always)]
fn tree_sum<S: Simd>(s: S, acc: &[S::V; 4]) -> S::V {
    s.add(s.add(acc[0], acc[1]), s.add(acc[2], acc[3]))
}

/// A row whose max is −∞: every unmasked entry is −∞ or NaN. NaN entries make the row NaN;
/// otherwise the row is fully masked and the policy decides.
///
/// # Safety
/// As [`row`].
#[inline(always)]
unsafe fn masked_row<S: Simd, E: Element, const MASK: bool, const SCALE: bool>(
    s: S,
    z: &Scores<S, E, MASK, SCALE>,
    y: *mut E,
    n: usize,
    policy: MaskedRows,
    log: bool,
) {
    let lanes = S::LANES;
    let mut nan = false;
    let mut i = 0;
    // SAFETY: `i + LANES ≤ n` for full loads, `i + len = n` for the partial one.
    while i + lanes <= n {
        nan |= s.any(s.is_nan(unsafe { z.full(s, i) }));
        i += lanes;
    }
    if i < n {
        nan |= s.any(s.is_nan(unsafe { z.partial(s, i, n - i) }));
    }
    let fill = match (nan, policy, log) {
        (true, _, _) | (false, MaskedRows::Nan, _) => f32::NAN,
        (false, MaskedRows::Zero, false) => 0.0,
        (false, MaskedRows::Zero, true) => f32::NEG_INFINITY,
    };
    // SAFETY: `y` covers `n` writable elements.
    unsafe { std::slice::from_raw_parts_mut(y, n).fill(E::from_f32(fill)) };
}
