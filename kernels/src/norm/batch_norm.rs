//! BatchNorm over `[N, C, S]` (S: the spatial positions, flattened; 1 for `[N, C]`):
//! inference with running statistics, and training with batch statistics.
//!
//! # Layout of the work
//!
//! A channel's values are `N` segments of `S` contiguous floats, `C·S` apart. When segments
//! are long (`S ≥ 4·ACC·LANES`), each one goes through the row machinery of LayerNorm (the
//! chunked two-pass sweep, merged per segment in f64) and is normalized with per-channel
//! constants broadcast. When they are short (down to `S = 1`, where a channel is a column of an
//! `[N, C]` matrix), the lanes run across the positions instead: a block of `ACC·LANES`
//! consecutive positions is swept down the `N` rows with one Welford recurrence per position
//! (shifted by the first row's value), each position's moments go to f64 after every chunk
//! of [`STEPS`] rows, and the positions of a channel, which all count `N` values, are summed
//! from the first one's mean (no division per position, as Chan's pairwise merge needs). Channels
//! are processed in groups whose positions form one contiguous run of at most
//! `4·ACC·LANES` floats per row, so that the normalize sweep of a group follows its statistics
//! while the group is still in cache.
//!
//! Inference needs no statistics: each channel's constants are folded once, and the tensor is
//! swept in address order, a block of channels at a time, each segment with its constants in
//! registers.

use std::ops::Range;

use super::call::{check_eps, check_len, check_opt, mut_ptr_of, ptr_of, RowStats};
use super::sources::{for_each_vector, load_n, store_n, Plain};
use super::stats::{moments, rstd_of, Affine, Idle, Moments, ACC, MAX_LANES, RECIP, STEPS};
use crate::dispatch::Kernels;
use crate::element::{in_place, Element, PerElement, Typed};
use crate::error::Error;
use crate::parallel::{within, Split, GRAIN_ELEMENTS};
use crate::simd::Simd;

/// Options of [`batch_norm`](crate::batch_norm()) and
/// [`batch_norm_train`](crate::batch_norm_train()).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchNormOptions<'a> {
    /// The per-channel gain `γ`, length `C`; absent means 1.
    pub gamma: Option<&'a [f32]>,
    /// The per-channel bias `β`, length `C`; absent means 0.
    pub beta: Option<&'a [f32]>,
    /// Added to the variance; must be finite and > 0. Default `1e-5`.
    pub eps: f32,
    /// Training only: the weight `m` of the batch statistics in the running averages,
    /// `r ← (1 − m)·r + m·stat`; in `[0, 1]`. Default 0.1.
    pub momentum: f32,
}

impl Default for BatchNormOptions<'_> {
    fn default() -> Self {
        BatchNormOptions {
            gamma: None,
            beta: None,
            eps: 1e-5,
            momentum: 0.1,
        }
    }
}

/// A validated BatchNorm call, in raw form.
#[derive(Clone, Copy)]
pub(crate) struct BatchNormCall<E> {
    pub x: *const E,
    pub y: *mut E,
    /// `[N, C, S]`.
    pub shape: [usize; 3],
    pub gamma: *const f32,
    pub beta: *const f32,
    pub eps: f32,
    /// Read in inference, updated in training.
    pub running_mean: *mut f32,
    pub running_var: *mut f32,
    pub train: bool,
    pub momentum: f32,
    /// Training outputs per channel (batch mean, rstd); null for none.
    pub mean: *mut f32,
    pub rstd: *mut f32,
    /// The channels this call (or part of a call) normalizes, `channels.0..channels.1`.
    pub channels: (usize, usize),
}

impl<E: Element> Split for BatchNormCall<E> {
    fn units(&self) -> usize {
        self.channels.1 - self.channels.0
    }

    fn grain(&self) -> usize {
        let [n, _, sp] = self.shape;
        GRAIN_ELEMENTS.div_ceil((n * sp).max(1))
    }

    unsafe fn part(&self, channels: Range<usize>, _: usize) -> Self {
        BatchNormCall {
            channels: within(self.channels, channels),
            ..*self
        }
    }
}

/// The arguments of a BatchNorm call before validation.
struct BatchArgs<'a, 's, E> {
    x: (*const E, usize),
    y: (*mut E, usize),
    shape: [usize; 3],
    running: (*mut f32, usize, *mut f32, usize),
    opts: BatchNormOptions<'a>,
    train: bool,
    stats: RowStats<'s>,
}

impl Kernels {
    fn batch_norm_call<E: Element>(&self, a: BatchArgs<E>) -> Result<(), Error> {
        let [n, c, sp] = a.shape;
        let len = n
            .checked_mul(c)
            .and_then(|v| v.checked_mul(sp))
            .ok_or_else(|| Error::shape("shape", "N·C·S within usize", format!("{:?}", a.shape)))?;
        check_len("x", a.x.1, len, "N·C·S")?;
        check_len("out", a.y.1, len, "as x")?;
        check_len("running_mean", a.running.1, c, "C")?;
        check_len("running_var", a.running.3, c, "C")?;
        check_opt("gamma", a.opts.gamma, c, "C")?;
        check_opt("beta", a.opts.beta, c, "C")?;
        check_eps(a.opts.eps)?;
        let RowStats { mean, rstd } = a.stats;
        check_opt("mean", mean.as_deref(), c, "C")?;
        check_opt("rstd", rstd.as_deref(), c, "C")?;
        if a.train {
            let m = a.opts.momentum;
            if !(0.0..=1.0).contains(&m) {
                return Err(Error::param("momentum", "a number in [0, 1]", m));
            }
            if c > 0 && n * sp < 2 {
                return Err(Error::shape(
                    "shape",
                    "at least 2 values per channel (N·S ≥ 2) in training mode",
                    format!("{:?}", a.shape),
                ));
            }
        }
        let call = BatchNormCall {
            x: a.x.0,
            y: a.y.0,
            shape: a.shape,
            gamma: ptr_of(a.opts.gamma),
            beta: ptr_of(a.opts.beta),
            eps: a.opts.eps,
            running_mean: a.running.0,
            running_var: a.running.2,
            train: a.train,
            momentum: a.opts.momentum,
            mean: mut_ptr_of(mean),
            rstd: mut_ptr_of(rstd),
            channels: (0, c),
        };
        if len > 0 {
            // SAFETY: the table belongs to an ISA this CPU was checked for; every pointer covers
            // what `BatchNormCall` says, as checked above; `y` equals `x` or is disjoint from it.
            unsafe { self.run_batch_norm(E::typed(call)) }
        }
        Ok(())
    }

    /// BatchNorm in inference mode, from the running statistics. See
    /// [`batch_norm`](crate::batch_norm()).
    pub fn batch_norm<E: Element>(
        &self,
        x: &[E],
        out: &mut [E],
        shape: [usize; 3],
        running_mean: &[f32],
        running_var: &[f32],
        opts: &BatchNormOptions,
    ) -> Result<(), Error> {
        self.batch_norm_call(BatchArgs {
            x: (x.as_ptr(), x.len()),
            y: (out.as_mut_ptr(), out.len()),
            shape,
            running: (
                running_mean.as_ptr() as *mut f32,
                running_mean.len(),
                running_var.as_ptr() as *mut f32,
                running_var.len(),
            ),
            opts: *opts,
            train: false,
            stats: RowStats::default(),
        })
    }

    /// [`batch_norm`](Self::batch_norm) in place.
    pub fn batch_norm_inplace<E: Element>(
        &self,
        x: &mut [E],
        shape: [usize; 3],
        running_mean: &[f32],
        running_var: &[f32],
        opts: &BatchNormOptions,
    ) -> Result<(), Error> {
        let (src, dst, len) = in_place(x);
        self.batch_norm_call(BatchArgs {
            x: (src, len),
            y: (dst, len),
            shape,
            running: (
                running_mean.as_ptr() as *mut f32,
                running_mean.len(),
                running_var.as_ptr() as *mut f32,
                running_var.len(),
            ),
            opts: *opts,
            train: false,
            stats: RowStats::default(),
        })
    }

    /// BatchNorm in training mode: batch statistics, running averages updated. See
    /// [`batch_norm_train`](crate::batch_norm_train()).
    pub fn batch_norm_train<E: Element>(
        &self,
        x: &[E],
        out: &mut [E],
        shape: [usize; 3],
        running_mean: &mut [f32],
        running_var: &mut [f32],
        opts: &BatchNormOptions,
    ) -> Result<(), Error> {
        self.batch_norm_train_with_stats(x, out, shape, running_mean, running_var, opts, RowStats::default())
    }

    /// [`batch_norm_train`](Self::batch_norm_train) with the batch mean and rstd of each
    /// channel (what a backward pass needs).
    #[allow(clippy::too_many_arguments)]
    pub fn batch_norm_train_with_stats<E: Element>(
        &self,
        x: &[E],
        out: &mut [E],
        shape: [usize; 3],
        running_mean: &mut [f32],
        running_var: &mut [f32],
        opts: &BatchNormOptions,
        stats: RowStats,
    ) -> Result<(), Error> {
        self.batch_norm_call(BatchArgs {
            x: (x.as_ptr(), x.len()),
            y: (out.as_mut_ptr(), out.len()),
            shape,
            running: (
                running_mean.as_mut_ptr(),
                running_mean.len(),
                running_var.as_mut_ptr(),
                running_var.len(),
            ),
            opts: *opts,
            train: true,
            stats,
        })
    }
}

/// The BatchNorm calls of every storage type.
struct BatchNorm;

impl PerElement for BatchNorm {
    type Of<E: Element> = BatchNormCall<E>;
}

impl Kernels {
    /// Runs a validated call. Not generic: the kernel is compiled in this crate (see
    /// [`Typed`]).
    ///
    /// # Safety
    /// As [`BatchNormCall`].
    unsafe fn run_batch_norm(&self, call: Typed<BatchNorm>) {
        // SAFETY: forwarded.
        unsafe { call.run_split(self) }
    }
}

impl<E: Element> crate::dispatch::Op for BatchNormCall<E> {
    type Output = ();

    #[inline(always)]
    unsafe fn eval<S: Simd>(self, s: S) {
        // SAFETY: the call's contract.
        unsafe { batch_norm_call(s, &self) }
    }
}

/// Entry of the generic body.
///
/// # Safety
/// `call` is validated: `x`, `y` cover `N·C·S` elements (equal if they overlap), the
/// per-channel pointers cover `C` floats or are null where optional.
#[inline(always)]
unsafe fn batch_norm_call<S: Simd, E: Element>(s: S, call: &BatchNormCall<E>) {
    // SAFETY: forwarded from the caller.
    unsafe {
        if call.train {
            train(s, call)
        } else {
            inference(s, call)
        }
    }
}

/// `γ_c` and `β_c`, 1 and 0 where absent.
///
/// # Safety
/// `c < C`.
#[inline(always)]
unsafe fn affine_of<E>(call: &BatchNormCall<E>, c: usize) -> (f32, f32) {
    // SAFETY: `c < C` and the pointers cover `C` floats when not null.
    unsafe {
        let g = if call.gamma.is_null() { 1.0 } else { *call.gamma.add(c) };
        let b = if call.beta.is_null() { 0.0 } else { *call.beta.add(c) };
        (g, b)
    }
}

/// The folded constants of channel `c` in inference: `s_c = f32(γ_c/√(v_c + ε))`,
/// `b_c = f32(β_c − μ_c·s_c)` (in f64, from the rounded `s_c`).
///
/// # Safety
/// `c < C`.
#[inline(always)]
unsafe fn fold<E>(call: &BatchNormCall<E>, c: usize) -> (f32, f32) {
    // SAFETY: `c < C`; the running statistics cover `C` floats.
    unsafe {
        let (g, b) = affine_of(call, c);
        let mean = *call.running_mean.add(c) as f64;
        let scale = (g as f64 / (*call.running_var.add(c) as f64 + call.eps as f64).sqrt()) as f32;
        (scale, (b as f64 - mean * scale as f64) as f32)
    }
}

/// Inference: `y = fma(x, s_c, b_c)`.
///
/// The channels go a block at a time, their constants folded once, and each block is swept
/// batch-major: for each `i` the block's segments lie next to each other, so the tensor is
/// read and written in address order (channel-major order would jump by `C·S` after every
/// segment, and the hardware prefetchers lose the stream at each jump).
///
/// # Safety
/// As [`batch_norm_call`].
#[inline(always)]
unsafe fn inference<S: Simd, E: Element>(s: S, call: &BatchNormCall<E>) {
    let [n, c, sp] = call.shape;
    let (first, end) = call.channels;
    let mut folded = [(0.0f32, 0.0f32); FOLD_BLOCK];
    let mut c0 = first;
    while c0 < end {
        let c1 = (c0 + FOLD_BLOCK).min(end);
        for ch in c0..c1 {
            // SAFETY: `ch < C`.
            folded[ch - c0] = unsafe { fold(call, ch) };
        }
        for i in 0..n {
            for ch in c0..c1 {
                let (scale, shift) = folded[ch - c0];
                let off = (i * c + ch) * sp;
                // SAFETY: segment `(i, ch)` is `x[(i·C + ch)·S ..][..S]`, inside `N·C·S`, and
                // `y` is `x` or disjoint from it.
                unsafe { affine_segment(s, call.x.add(off), call.y.add(off), sp, s.splat(scale), s.splat(shift)) };
            }
        }
        c0 = c1;
    }
}

/// Inference: channels whose constants are folded at a time, on the stack.
const FOLD_BLOCK: usize = 256;

/// `y_j = fma(x_j, scale, shift)` for `j < len`.
///
/// A segment of at least one vector whose length is not a multiple of the vector ends with a
/// whole vector that overlaps the one before it: computed before anything is stored (so that
/// an in-place call reads it unchanged) and stored last. Only segments shorter than a vector
/// take a partial store, which costs several times a whole one on AVX2. (A segment of whole
/// vectors goes in order: loading its last vector first measured 10–20% slower beyond L2.)
///
/// # Safety
/// `x` covers `len` elements, `y` as many writable ones, equal to `x` if they overlap.
#[inline(always)]
unsafe fn affine_segment<S: Simd, E: Element>(s: S, x: *const E, y: *mut E, len: usize, scale: S::V, shift: S::V) {
    let lanes = S::LANES;
    // SAFETY: every access covers `j..j + m ≤ len`.
    unsafe {
        if len < lanes || len.is_multiple_of(lanes) {
            for_each_vector!(lanes, len, |j, m| {
                store_n(s, y, j, m, s.mul_add(load_n(s, x, j, m), scale, shift));
            });
            return;
        }
        let last = len - lanes;
        let tail = s.mul_add(E::load(s, x.add(last)), scale, shift);
        // Whole vectors from 0 up to the one that reaches `last` or past it (`≤ len`).
        for_each_vector!(lanes, last.div_ceil(lanes) * lanes, |j, m| {
            store_n(s, y, j, m, s.mul_add(load_n(s, x, j, m), scale, shift));
        });
        E::store(s, y.add(last), tail);
    }
}

/// How a channel is normalized once its statistics are known.
#[derive(Clone, Copy)]
enum Channel {
    /// The vector sweep with these constants and `(γ, β)`.
    Fast(Affine, f32, f32),
    /// A channel whose f32 statistics overflowed: normalized in f64 with `(μ, rstd, γ, β)`.
    Wide(f64, f64, f32, f32),
    /// A channel holding a NaN or ±∞: all NaN.
    Nan,
}

/// Training: batch statistics per channel, running averages, normalization.
///
/// # Safety
/// As [`batch_norm_call`].
#[inline(always)]
unsafe fn train<S: Simd, E: Element>(s: S, call: &BatchNormCall<E>) {
    let [n, c, sp] = call.shape;
    let block = ACC * S::LANES;
    let run = 4 * block;
    // SAFETY (everything below): segment `(i, ch)` is `x[(i·C + ch)·S ..][..S]`, inside
    // `N·C·S`; the channel indices are `< C`.
    let (first, end) = call.channels;
    if sp >= run {
        for ch in first..end {
            let k = unsafe { (*call.x.add(ch * sp)).to_f32() };
            let mut mo = Moments::default();
            for i in 0..n {
                let src: Plain<E> = Plain {
                    x: unsafe { call.x.add((i * c + ch) * sp) },
                    ahead: [std::ptr::null(); 2],
                };
                let m = unsafe { moments(s, &src, sp, k, &Idle) };
                mo.merge(m.n, m.mean, m.m2);
            }
            mo.mean += k as f64;
            let how = unsafe { finish(call, ch, mo) };
            for i in 0..n {
                let off = (i * c + ch) * sp;
                unsafe { normalize_run(s, how, call.x.add(off), call.y.add(off), sp, None) };
            }
        }
        return;
    }
    // Short segments: groups of channels forming one run of at most `run` positions per row.
    let per = if sp <= block { block / sp } else { 1 };
    let mut consts = Consts::new();
    let mut hows = [Channel::Nan; ACC * MAX_LANES];
    let mut c0 = first;
    while c0 < end {
        let c1 = (c0 + per).min(end);
        let (q0, len) = (c0 * sp, (c1 - c0) * sp);
        let mut chan = [Positions::default(); ACC * MAX_LANES];
        let mut pos = [Moments::default(); ACC * MAX_LANES];
        let mut b = 0;
        while b < len {
            let width = block.min(len - b);
            pos[..width].fill(Moments::default());
            unsafe { column_moments(s, call.x.add(q0 + b), c * sp, n, width, &mut pos) };
            for (p, m) in pos[..width].iter().enumerate() {
                chan[(b + p) / sp].add(m.mean, m.m2);
            }
            b += width;
        }
        for ch in c0..c1 {
            hows[ch - c0] = unsafe { finish(call, ch, chan[ch - c0].moments(n as f64)) };
            consts.set((ch - c0) * sp, sp, hows[ch - c0]);
        }
        for i in 0..n {
            let off = i * c * sp + q0;
            unsafe { normalize_run(s, Channel::Nan, call.x.add(off), call.y.add(off), len, Some(&consts)) };
        }
        for ch in c0..c1 {
            if let how @ Channel::Wide(..) = hows[ch - c0] {
                for i in 0..n {
                    let off = (i * c + ch) * sp;
                    unsafe { normalize_run(s, how, call.x.add(off), call.y.add(off), sp, None) };
                }
            }
        }
        c0 = c1;
    }
}

/// The moments of a channel from those of its positions, which all count the same `N` values:
/// `μ = mean_p μ_p` and `M2 = Σ_p M2_p + N·Σ_p (μ_p − μ)²`. The sums are taken in f64 from the
/// first position's mean, in one pass with no division per position (Chan's pairwise merge
/// divides at every position, one long chain of dependent steps per channel).
#[derive(Clone, Copy, Default)]
struct Positions {
    count: f64,
    shift: f64,
    sum: f64,
    squares: f64,
    m2: f64,
}

impl Positions {
    /// Adds a position of mean `mean` and sum of squared deviations `m2`.
    #[inline(always)]
    fn add(&mut self, mean: f64, m2: f64) {
        if self.count == 0.0 {
            self.shift = mean;
        }
        let d = mean - self.shift;
        self.count += 1.0;
        self.sum += d;
        self.squares += d * d;
        self.m2 += m2;
    }

    /// The channel's moments, each position counting `n` values. A NaN or ±∞ value leaves a
    /// non-finite mean or `M2`, which [`finish`] sends to its f64 recount.
    #[inline(always)]
    fn moments(&self, n: f64) -> Moments {
        let d = self.sum / self.count;
        // `Σd² − (Σd)²/P ≥ 0`, but may round below it; a NaN stays.
        let spread = self.squares - self.sum * d;
        Moments {
            n: n * self.count,
            mean: self.shift + d,
            m2: self.m2 + n * if spread < 0.0 { 0.0 } else { spread },
        }
    }
}

/// The normalize constants of a run of positions, one entry per position.
struct Consts {
    mean_hi: [f32; 4 * ACC * MAX_LANES],
    rstd: [f32; 4 * ACC * MAX_LANES],
    shift: [f32; 4 * ACC * MAX_LANES],
    gamma: [f32; 4 * ACC * MAX_LANES],
    beta: [f32; 4 * ACC * MAX_LANES],
}

impl Consts {
    fn new() -> Self {
        let zero = [0.0; 4 * ACC * MAX_LANES];
        Consts {
            mean_hi: zero,
            rstd: zero,
            shift: zero,
            gamma: zero,
            beta: zero,
        }
    }

    /// Positions `at..at + len` belong to a channel normalized as `how`. A channel left to the
    /// f64 path gets NaN constants here (a NaN channel stays so; a wide one is redone).
    fn set(&mut self, at: usize, len: usize, how: Channel) {
        let (a, g, b) = match how {
            Channel::Fast(a, g, b) => (a, g, b),
            Channel::Wide(..) | Channel::Nan => (Affine::new(f64::NAN, f64::NAN), f32::NAN, f32::NAN),
        };
        let r = at..at + len;
        self.mean_hi[r.clone()].fill(a.mean_hi);
        self.rstd[r.clone()].fill(a.rstd);
        self.shift[r.clone()].fill(a.shift);
        self.gamma[r.clone()].fill(g);
        self.beta[r].fill(b);
    }
}

/// Normalizes a run of `len` elements (from `x`, never from `y`): with the per-position
/// constants of `consts` if given, else as the single channel `how` says.
///
/// # Safety
/// `x` covers `len` elements, `y` as many writable ones (equal to `x` if they overlap);
/// `consts` covers `len` positions.
#[inline(always)]
unsafe fn normalize_run<S: Simd, E: Element>(
    s: S,
    how: Channel,
    x: *const E,
    y: *mut E,
    len: usize,
    consts: Option<&Consts>,
) {
    // SAFETY: `j + m ≤ len` for every operand; `x[j]` is read before `y[j]` is written.
    unsafe {
        if let Some(k) = consts {
            let (mh, r, sh) = (k.mean_hi.as_ptr(), k.rstd.as_ptr(), k.shift.as_ptr());
            let (g, b) = (k.gamma.as_ptr(), k.beta.as_ptr());
            for_each_vector!(S::LANES, len, |j, m| {
                let v = s.sub(load_n(s, x, j, m), load_n(s, mh, j, m));
                let v = s.mul_add(v, load_n(s, r, j, m), load_n(s, sh, j, m));
                store_n(s, y, j, m, s.mul_add(v, load_n(s, g, j, m), load_n(s, b, j, m)));
            });
            return;
        }
        match how {
            Channel::Fast(a, g, b) => {
                let (mh, r, sh) = (s.splat(a.mean_hi), s.splat(a.rstd), s.splat(a.shift));
                let (g, b) = (s.splat(g), s.splat(b));
                for_each_vector!(S::LANES, len, |j, m| {
                    let v = s.mul_add(s.sub(load_n(s, x, j, m), mh), r, sh);
                    store_n(s, y, j, m, s.mul_add(v, g, b));
                });
            }
            Channel::Wide(mean, rstd, g, b) => {
                for j in 0..len {
                    let v = ((*x.add(j)).to_f32() as f64 - mean) * rstd * g as f64 + b as f64;
                    *y.add(j) = E::from_f32(v as f32);
                }
            }
            Channel::Nan => std::slice::from_raw_parts_mut(y, len).fill(E::from_f32(f32::NAN)),
        }
    }
}

/// Adds to `out[p]` the moments (absolute, in f64) of the columns `x[.., p]`, `p < width`, of
/// a matrix of `rows` rows `stride` apart, `width ≤ ACC·LANES`: one Welford recurrence per lane
/// down the rows, shifted by the first row, flushed to f64 every [`STEPS`] rows.
///
/// # Safety
/// `x + r·stride .. + width` is readable for `r < rows`; `rows ≥ 1`.
#[inline(always)]
unsafe fn column_moments<S: Simd, E: Element>(
    s: S,
    x: *const E,
    stride: usize,
    rows: usize,
    width: usize,
    out: &mut [Moments],
) {
    let lanes = S::LANES;
    let nv = width.div_ceil(lanes);
    let zero = s.splat(0.0);
    let mut k = [zero; ACC];
    for (j, kj) in k.iter_mut().enumerate().take(nv) {
        *kj = unsafe { column(s, x, stride, width, 0, j) };
    }
    let mut kb = [0.0f32; ACC * MAX_LANES];
    let (mut mb, mut m2b) = ([0.0f32; ACC * MAX_LANES], [0.0f32; ACC * MAX_LANES]);
    // SAFETY (the spills): `j·LANES + LANES ≤ ACC·LANES ≤ ACC·MAX_LANES`.
    for (j, &kj) in k.iter().enumerate().take(nv) {
        unsafe { s.store(kb.as_mut_ptr().add(j * lanes), kj) };
    }
    let mut r = 0;
    while r < rows {
        let steps = (rows - r).min(STEPS);
        let mut m = [zero; ACC];
        let mut m2 = [zero; ACC];
        for j in 0..nv {
            m[j] = s.sub(unsafe { column(s, x, stride, width, r, j) }, k[j]);
        }
        for (t, &rk) in RECIP[2..=steps].iter().enumerate() {
            let rk = s.splat(rk);
            for j in 0..nv {
                let z = s.sub(unsafe { column(s, x, stride, width, r + 1 + t, j) }, k[j]);
                let delta = s.sub(z, m[j]);
                m[j] = s.mul_add(delta, rk, m[j]);
                m2[j] = s.mul_add(delta, s.sub(z, m[j]), m2[j]);
            }
        }
        for j in 0..nv {
            unsafe {
                s.store(mb.as_mut_ptr().add(j * lanes), m[j]);
                s.store(m2b.as_mut_ptr().add(j * lanes), m2[j]);
            }
        }
        // Every position has seen the same `r` rows: one weight serves all their merges.
        let n = steps as f64;
        let w = n / (r as f64 + n);
        for p in 0..width {
            let m2 = if steps > 1 { m2b[p] as f64 } else { 0.0 };
            out[p].merge_weighted(n, kb[p] as f64 + mb[p] as f64, m2, w);
        }
        r += steps;
    }
}

/// Vector `j` of row `r` of the columns of [`column_moments`].
///
/// # Safety
/// As [`column_moments`], with `r < rows` and `j·LANES < width`.
#[inline(always)]
unsafe fn column<S: Simd, E: Element>(s: S, x: *const E, stride: usize, width: usize, r: usize, j: usize) -> S::V {
    let lanes = S::LANES;
    // SAFETY: the vector covers `j·LANES .. min((j + 1)·LANES, width)` of row `r`.
    unsafe { load_n(s, x.add(r * stride), j * lanes, lanes.min(width - j * lanes)) }
}

/// Channel `ch` from its moments (absolute mean): statistics recomputed in f64 if the f32 ones
/// are not finite, running averages updated, batch mean and rstd written, and how to
/// normalize it.
///
/// # Safety
/// `ch < C`.
unsafe fn finish<E: Element>(call: &BatchNormCall<E>, ch: usize, mo: Moments) -> Channel {
    let [n, c, sp] = call.shape;
    let count = (n * sp) as f64;
    // SAFETY: `ch < C`; the pointers cover `C` floats when not null; the f64 path reads the
    // channel's segments, inside `N·C·S`.
    unsafe {
        let (stats, wide) = if mo.fits_f32() {
            (Some(mo), false)
        } else {
            let at = |i: usize, j: usize| (*call.x.add((i * c + ch) * sp + j)).to_f32() as f64;
            let all = || (0..n).flat_map(move |i| (0..sp).map(move |j| at(i, j)));
            let stats = all().all(f64::is_finite).then(|| {
                let mean = all().sum::<f64>() / count;
                let m2 = all().map(|v| (v - mean) * (v - mean)).sum();
                Moments { n: count, mean, m2 }
            });
            (stats, true)
        };
        let (mean, var) = stats.map_or((f64::NAN, f64::NAN), |m| (m.mean, m.m2 / count));
        let rstd = rstd_of(var, call.eps);
        let m = call.momentum as f64;
        let (rm, rv) = (call.running_mean.add(ch), call.running_var.add(ch));
        *rm = ((1.0 - m) * *rm as f64 + m * mean) as f32;
        *rv = ((1.0 - m) * *rv as f64 + m * var * count / (count - 1.0)) as f32;
        if !call.mean.is_null() {
            *call.mean.add(ch) = mean as f32;
        }
        if !call.rstd.is_null() {
            *call.rstd.add(ch) = rstd as f32;
        }
        let (g, b) = affine_of(call, ch);
        match (stats, wide) {
            (None, _) => Channel::Nan,
            (Some(_), false) => Channel::Fast(Affine::new(mean, rstd), g, b),
            (Some(_), true) => Channel::Wide(mean, rstd, g, b),
        }
    }
}
