//! BatchNorm over `[N, C, S]` (`S` the spatial positions, flattened; 1 for `[N, C]`):
//! inference with running statistics, training with batch statistics.
//!
//! A channel's values are `N` segments of `S` contiguous values, `C·S` apart. Training reads
//! long segments (at least four chunk steps) as LayerNorm reads rows. Short ones (down to
//! `S = 1`, a column of `[N, C]`) go with the lanes across positions: a run of whole
//! channels of at most `ACC·LANES` positions per row is read down the rows in chunks of
//! [`STEPS`] rows, two-pass per position, and the positions of a channel merged in f64; the
//! normalize sweep of a group of channels follows its statistics while the group is in cache.

use super::rows::{check_eps, check_len, check_opt, mut_ptr_of, ptr_of, RowStats};
use super::source::{for_each_vector, load_n, store_n, Plain};
use super::stats::{moments, rstd_of, Affine, Idle, Moments, Trail, ACC, STEPS};
use crate::dispatch::Kernels;
use crate::element::{Element, PerElement, Typed};
use crate::error::Error;
use crate::simd::{Simd, MAX_LANES};

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
}

/// `running_mean` and `running_var` with their lengths: written in training only.
type Running = [(*mut f32, usize); 2];

/// The running statistics of an inference call, never written.
fn read_only(mean: &[f32], var: &[f32]) -> Running {
    [
        (mean.as_ptr().cast_mut(), mean.len()),
        (var.as_ptr().cast_mut(), var.len()),
    ]
}

impl Kernels {
    /// Validates (every argument before anything is written) and runs a BatchNorm call;
    /// training where `train` holds the per-channel outputs.
    fn batch_norm_call<E: Element>(
        &self,
        (x, y): ((*const E, usize), (*mut E, usize)),
        shape: [usize; 3],
        running: Running,
        opts: &BatchNormOptions,
        train: Option<RowStats>,
    ) -> Result<(), Error> {
        let [n, c, sp] = shape;
        let len = n
            .checked_mul(c)
            .and_then(|v| v.checked_mul(sp))
            .ok_or_else(|| Error::shape("shape", "N·C·S within usize", format!("{shape:?}")))?;
        check_len("x", x.1, len, "N·C·S")?;
        check_len("out", y.1, len, "as x")?;
        check_len("running_mean", running[0].1, c, "C")?;
        check_len("running_var", running[1].1, c, "C")?;
        check_opt("gamma", opts.gamma, c, "C")?;
        check_opt("beta", opts.beta, c, "C")?;
        check_eps(opts.eps)?;
        let is_train = train.is_some();
        let RowStats { mean, rstd } = train.unwrap_or_default();
        check_opt("mean", mean.as_deref(), c, "C")?;
        check_opt("rstd", rstd.as_deref(), c, "C")?;
        if is_train {
            let m = opts.momentum;
            if !(0.0..=1.0).contains(&m) {
                return Err(Error::param("momentum", "a number in [0, 1]", m));
            }
            if c > 0 && n * sp < 2 {
                let what = "at least 2 values per channel (N·S ≥ 2) in training mode";
                return Err(Error::shape("shape", what, format!("{shape:?}")));
            }
        }
        let call = BatchNormCall {
            x: x.0,
            y: y.0,
            shape,
            gamma: ptr_of(opts.gamma),
            beta: ptr_of(opts.beta),
            eps: opts.eps,
            running_mean: running[0].0,
            running_var: running[1].0,
            train: is_train,
            momentum: opts.momentum,
            mean: mut_ptr_of(mean),
            rstd: mut_ptr_of(rstd),
        };
        if len > 0 {
            // SAFETY: every pointer covers what `BatchNormCall` says, as checked above; `y`
            // equals `x` or is disjoint from it.
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
        let xy = ((x.as_ptr(), x.len()), (out.as_mut_ptr(), out.len()));
        self.batch_norm_call(xy, shape, read_only(running_mean, running_var), opts, None)
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
        let xy = ((x.as_ptr(), x.len()), (x.as_mut_ptr(), x.len()));
        self.batch_norm_call(xy, shape, read_only(running_mean, running_var), opts, None)
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
        let xy = ((x.as_ptr(), x.len()), (out.as_mut_ptr(), out.len()));
        let running = [running_mean, running_var].map(|r| (r.as_mut_ptr(), r.len()));
        self.batch_norm_call(xy, shape, running, opts, Some(stats))
    }
}

/// Positions per run of [`inference`]: a multiple of every vector width.
const INFERENCE_RUN: usize = 1024;

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
        unsafe { call.run(self) }
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

/// Inference: `y = fma(x, s_c, b_c)`, over runs of [`INFERENCE_RUN`] positions of each row
/// of `C·S` values, the constants expanded per position (a run spans many channels where
/// `S` is short, part of one where it is long).
///
/// # Safety
/// As [`batch_norm_call`].
#[inline(always)]
unsafe fn inference<S: Simd, E: Element>(s: S, call: &BatchNormCall<E>) {
    let [n, c, sp] = call.shape;
    let width = c * sp;
    let mut scale = [0.0f32; INFERENCE_RUN];
    let mut shift = [0.0f32; INFERENCE_RUN];
    let mut q0 = 0;
    while q0 < width {
        let len = INFERENCE_RUN.min(width - q0);
        let mut q = q0;
        while q < q0 + len {
            let ch = q / sp;
            let end = ((ch + 1) * sp).min(q0 + len);
            // SAFETY: `ch < C`.
            let (sc, sh) = unsafe { fold(call, ch) };
            scale[q - q0..end - q0].fill(sc);
            shift[q - q0..end - q0].fill(sh);
            q = end;
        }
        let (sp_, bp) = (scale.as_ptr(), shift.as_ptr());
        for i in 0..n {
            // SAFETY: row `i` holds `width` values from `i·width`; `j + m ≤ len`.
            let (x, y) = unsafe { (call.x.add(i * width + q0), call.y.add(i * width + q0)) };
            for_each_vector!(S::LANES, len, |j, m| {
                unsafe {
                    let v = s.mul_add(load_n(s, x, j, m), load_n(s, sp_, j, m), load_n(s, bp, j, m));
                    store_n(s, y, j, m, v);
                }
            });
        }
        q0 += len;
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
    if sp >= run {
        for ch in 0..c {
            let k = unsafe { (*call.x.add(ch * sp)).to_f32() };
            let mut mo = Moments::default();
            for i in 0..n {
                let x = unsafe { call.x.add((i * c + ch) * sp) };
                let src = Plain { x, ahead: x };
                mo.merge(unsafe { moments::<S, _, _, false>(s, &src, sp, k, &mut Trail::new(&Idle, sp)) });
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
    let mut c0 = 0;
    while c0 < c {
        let c1 = (c0 + per).min(c);
        let (q0, len) = (c0 * sp, (c1 - c0) * sp);
        let mut chan = [Moments::default(); ACC * MAX_LANES];
        let mut pos = [Moments::default(); ACC * MAX_LANES];
        let mut b = 0;
        while b < len {
            let width = block.min(len - b);
            pos[..width].fill(Moments::default());
            unsafe { column_moments(s, call.x.add(q0 + b), c * sp, n, width, &mut pos) };
            for (p, m) in pos[..width].iter().enumerate() {
                chan[(b + p) / sp].merge(*m);
            }
            b += width;
        }
        for ch in c0..c1 {
            hows[ch - c0] = unsafe { finish(call, ch, chan[ch - c0]) };
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
/// a matrix of `rows ≥ 1` rows `stride` apart, `width ≤ ACC·LANES`: per lane, shifted by the
/// first row, chunks of [`STEPS`] rows two-pass (`Σz`, then `Σ(z − c)²` about `c`, the chunk's
/// f32 mean), each chunk merged in f64 as [`moments`] merges a row's.
///
/// # Safety
/// `x + r·stride .. + width` is readable for `r < rows`.
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
    // SAFETY (every `column`): row `r < rows`, vector `j < nv`.
    let mut k = [zero; ACC];
    for (j, k) in k.iter_mut().enumerate().take(nv) {
        *k = unsafe { column(s, x, stride, width, 0, j) };
    }
    // Per position: the shift, then each chunk's sum, centre and sum of squares.
    let mut spill = [[0.0f32; ACC * MAX_LANES]; 4];
    let mut r = 0;
    while r < rows {
        let steps = (rows - r).min(STEPS);
        let mut sum = [zero; ACC];
        for t in r..r + steps {
            for j in 0..nv {
                sum[j] = s.add(sum[j], s.sub(unsafe { column(s, x, stride, width, t, j) }, k[j]));
            }
        }
        let inv = s.splat(1.0 / steps as f32);
        let mut sq = [zero; ACC];
        for t in r..r + steps {
            for j in 0..nv {
                let z = s.sub(unsafe { column(s, x, stride, width, t, j) }, k[j]);
                let dev = s.sub(z, s.mul(sum[j], inv));
                sq[j] = s.mul_add(dev, dev, sq[j]);
            }
        }
        for j in 0..nv {
            let c = s.mul(sum[j], inv);
            for (v, p) in [k[j], sum[j], c, sq[j]].into_iter().zip(spill.iter_mut()) {
                // SAFETY: `j·LANES + LANES ≤ ACC·LANES ≤ ACC·MAX_LANES`.
                unsafe { s.store(p.as_mut_ptr().add(j * lanes), v) };
            }
        }
        let n = steps as f64;
        for (p, o) in out[..width].iter_mut().enumerate() {
            let [k, sum, c, sq] = [0, 1, 2, 3].map(|q| spill[q][p] as f64);
            let mean = sum / n;
            o.merge(Moments {
                n,
                mean: k + mean,
                m2: sq - n * (mean - c) * (mean - c),
            });
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
