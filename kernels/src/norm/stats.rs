//! The statistics core: a row's mean and sum of squared deviations in one read from memory
//! (chunks of at most [`STEPS`] values per lane, shifted, two passes each from L1, merged in
//! f64 by Chan's formula), its sum of squares, and the f64 fallback.

use super::source::Source;
use crate::simd::{Simd, MAX_LANES};

/// Independent accumulators of a pass: four chains of 3–4 cycles keep two loads a cycle busy.
pub(crate) const ACC: usize = 4;

/// Steps of [`ACC`] vectors per chunk (512 values on AVX2, 1024 on AVX-512): the per-lane
/// rounding error grows with it (the module docs' bound assumes at most 16 values per lane).
pub(crate) const STEPS: usize = 16;

/// Vectors of the longest row held in registers by groups: half of `registers`, so that a
/// row's sums and the constants of the passes fit beside it.
pub(crate) const fn short_vectors(registers: usize) -> usize {
    registers / 2
}

/// Count, mean and sum of squared deviations of a set of values, in f64.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Moments {
    pub n: f64,
    pub mean: f64,
    pub m2: f64,
}

impl Moments {
    /// Adds the set `o` (Chan's pairwise formula).
    #[inline(always)]
    pub(crate) fn merge(&mut self, o: Moments) {
        if self.n == 0.0 {
            *self = o;
            return;
        }
        let total = self.n + o.n;
        let delta = o.mean - self.mean;
        let w = o.n / total;
        self.mean += delta * w;
        self.m2 += o.m2 + delta * delta * self.n * w;
        self.n = total;
    }

    /// The statistics are finite (no NaN or ±∞ reached them, no f32 overflow) and the f32
    /// normalize sweep cannot overflow: every `|h − μ| ≤ √M2 < 10³⁸`.
    #[inline(always)]
    pub(crate) fn fits_f32(&self) -> bool {
        self.mean.is_finite() & (self.m2 < 1e76)
    }
}

/// The work the statistics sweep of a row runs beside it: the normalize sweep of the row
/// before, in spans behind the reads, so that reading one row overlaps writing the other.
pub(crate) trait Pending<S: Simd> {
    /// Normalizes the span `i..i + n` of the row before.
    ///
    /// # Safety
    /// `i + n` is within that row; spans come in order.
    unsafe fn run(&self, s: S, i: usize, n: usize);
}

/// Nothing pending: the first row, or a row before on the f64 path.
pub(crate) struct Idle;

impl<S: Simd> Pending<S> for Idle {
    #[inline(always)]
    unsafe fn run(&self, _: S, _: usize, _: usize) {}
}

/// A [`Pending`] sweep over a row of `d` values, run in order as far as asked.
pub(crate) struct Trail<'a, P> {
    pending: &'a P,
    done: usize,
    d: usize,
}

impl<'a, P> Trail<'a, P> {
    pub(crate) fn new(pending: &'a P, d: usize) -> Self {
        Trail { pending, done: 0, d }
    }

    /// Runs the pending sweep up to `to < d`.
    #[inline(always)]
    fn upto<S: Simd>(&mut self, s: S, to: usize)
    where
        P: Pending<S>,
    {
        if to > self.done && to < self.d {
            // SAFETY: `done < to < d`.
            unsafe { self.pending.run(s, self.done, to - self.done) };
            self.done = to;
        }
    }

    /// Runs the rest of the pending sweep.
    #[inline(always)]
    pub(crate) fn finish<S: Simd>(&mut self, s: S)
    where
        P: Pending<S>,
    {
        if self.done < self.d {
            // SAFETY: `done < d`.
            unsafe { self.pending.run(s, self.done, self.d - self.done) };
            self.done = self.d;
        }
    }
}

/// Mean (relative to the shift `k`) and sum of squared deviations of the `d ≥ ACC·LANES` values of
/// `src`, with `trail` run behind the reads; the next row prefetched where `PREFETCH`.
///
/// # Safety
/// `src` covers `d` values, and the trail's row as many.
#[inline(always)]
pub(crate) unsafe fn moments<S: Simd, R: Source<S>, P: Pending<S>, const PREFETCH: bool>(
    s: S,
    src: &R,
    d: usize,
    k: f32,
    trail: &mut Trail<'_, P>,
) -> Moments {
    let group = ACC * S::LANES;
    let mut total = Moments::default();
    let mut i = 0;
    while d - i >= group {
        let end = i + ((d - i) / group).min(STEPS) * group;
        // SAFETY: the chunk `i..end` lies in `0..d`.
        unsafe { chunk::<S, R, P, PREFETCH>(s, src, i, end, k, trail, &mut total) };
        i = end;
    }
    if i < d {
        // SAFETY: fewer than `ACC` vectors are left.
        unsafe { tail(s, src, i, d, k, &mut total) };
    }
    trail.finish(s);
    total
}

/// Merges the chunk `i..end` (whole steps) into `total`, two-pass: `Σ(k − h)`, then
/// `Σ(c − h)²` from L1 about `c = f32(k + mean)`, the offset of `c` from the mean removed in
/// f64 (`Σ(h − c)² = M2 + n·(mean − c)²`). `k − h` and `c − h` rather than `h − k`: the
/// same magnitudes, and the load is the subtraction's memory operand on x86.
///
/// # Safety
/// `src` covers `i..end`, the trail's row at least `end` values.
#[inline(always)]
unsafe fn chunk<S: Simd, R: Source<S>, P: Pending<S>, const PREFETCH: bool>(
    s: S,
    src: &R,
    i: usize,
    end: usize,
    k: f32,
    trail: &mut Trail<'_, P>,
    total: &mut Moments,
) {
    let lanes = S::LANES;
    let n = end - i;
    let (kv, zero) = (s.splat(k), s.splat(0.0));
    let mut acc = [zero; ACC];
    let mut j = i;
    while j < end {
        for (a, acc) in acc.iter_mut().enumerate() {
            let at = j + a * lanes;
            if PREFETCH && (a * lanes).is_multiple_of(16) {
                src.prefetch(s, at);
            }
            // SAFETY: inside the chunk.
            *acc = s.add(*acc, s.sub(kv, unsafe { src.get(s, at, lanes) }));
        }
        j += ACC * lanes;
    }
    let sum = tree(s, acc);
    let mean = -s.reduce_add_f64(sum) * (1.0 / n as f64);
    let c = k + s.reduce_add(sum) * (-1.0 / n as f32);
    // The row before, up to halfway: independent work beside the reductions.
    trail.upto(s, i + n / 2);
    let cv = s.splat(c);
    let mut acc = [zero; ACC];
    let mut j = i;
    while j < end {
        for (a, acc) in acc.iter_mut().enumerate() {
            // SAFETY: inside the chunk, read by the first pass.
            let t = s.sub(cv, unsafe { src.again(s, j + a * lanes, lanes) });
            *acc = s.mul_add(t, t, *acc);
        }
        j += ACC * lanes;
    }
    trail.upto(s, end);
    let off = mean - (c as f64 - k as f64);
    let m2 = s.reduce_add_f64(tree(s, acc)) - n as f64 * off * off;
    total.merge(Moments { n: n as f64, mean, m2 });
}

/// Merges the `n = d − i < ACC·LANES` values `i..d` into `total`, two-pass from L1 as a
/// short row ([`block_sum`], [`block_dev`]).
///
/// # Safety
/// `src` covers `i..d`, `i < d`.
#[inline(always)]
unsafe fn tail<S: Simd, R: Source<S>>(s: S, src: &R, i: usize, d: usize, k: f32, total: &mut Moments) {
    let n = d - i;
    // SAFETY: forwarded.
    let first = s.reduce_add(unsafe { block_sum::<S, R, ACC, false>(s, src, i, n, k) });
    let (mean, c) = centre(k, first, n);
    let second = s.reduce_add(unsafe { block_dev::<S, R, ACC, false>(s, src, i, n, c) });
    total.merge(Moments {
        n: n as f64,
        mean,
        m2: block_m2(second, n, k, mean, c),
    });
}

/// The tree sum of `k − h` over the `n ≤ B·LANES` values from `i` (zero past them), `FULL`
/// where `n = B·LANES`.
///
/// # Safety
/// `src` covers `i..i + n`.
#[inline(always)]
pub(crate) unsafe fn block_sum<S: Simd, R: Source<S>, const B: usize, const FULL: bool>(
    s: S,
    src: &R,
    i: usize,
    n: usize,
    k: f32,
) -> S::V {
    let lanes = S::LANES;
    let (full, part) = if FULL { (B, 0) } else { (n / lanes, n % lanes) };
    let (kv, zero) = (s.splat(k), s.splat(0.0));
    let mut z = [zero; B];
    for (j, z) in z.iter_mut().enumerate() {
        // SAFETY: vector `j < full` reads `..i + (j + 1)·LANES ≤ i + n`, the partial one `..i + n`.
        if j < full {
            *z = s.sub(kv, unsafe { src.get(s, i + j * lanes, lanes) });
        } else if j == full && part > 0 {
            let v = s.sub(kv, unsafe { src.get(s, i + j * lanes, part) });
            *z = s.select(s.first_lanes(part), v, zero);
        }
    }
    tree(s, z)
}

/// The tree sum of `(c − h)²` over the values of [`block_sum`], read again (zero past them:
/// each deviation is `h − c·w`, `w` 1 on the values and 0 past them, from [`WEIGHTS`]).
///
/// # Safety
/// As [`block_sum`], which has run.
#[inline(always)]
pub(crate) unsafe fn block_dev<S: Simd, R: Source<S>, const B: usize, const FULL: bool>(
    s: S,
    src: &R,
    i: usize,
    n: usize,
    c: f32,
) -> S::V {
    let lanes = S::LANES;
    let (cv, neg, zero) = (s.splat(c), s.splat(-c), s.splat(0.0));
    // Lane `l` of vector `j` weighs `WEIGHTS[W − n + j·LANES + l]`: 1 where `j·LANES + l < n`.
    let w = WEIGHTS[4 * ACC * MAX_LANES - n..].as_ptr();
    let mut t = [zero; B];
    for (j, t) in t.iter_mut().enumerate() {
        let at = j * lanes;
        // SAFETY: as `block_sum`; `j·LANES + LANES ≤ 4·ACC·MAX_LANES` values from `w`.
        unsafe {
            if FULL {
                *t = s.sub(cv, src.again(s, i + at, lanes));
            } else if at < n {
                let h = src.again(s, i + at, lanes.min(n - at));
                *t = s.mul_add(s.load(w.add(at)), neg, h);
            }
        }
    }
    tree_squares(s, t)
}

/// The tree sum of `h²` over the values of [`block_sum`] (zero past them).
///
/// # Safety
/// As [`block_sum`].
#[inline(always)]
pub(crate) unsafe fn block_squares<S: Simd, R: Source<S>, const B: usize, const FULL: bool>(
    s: S,
    src: &R,
    i: usize,
    n: usize,
) -> S::V {
    let lanes = S::LANES;
    let mut v = [s.splat(0.0); B];
    for (j, v) in v.iter_mut().enumerate() {
        let at = j * lanes;
        if FULL || at < n {
            // SAFETY: as `block_sum`; lanes past `n` load as zero.
            *v = unsafe { src.get(s, i + at, if FULL { lanes } else { lanes.min(n - at) }) };
        }
    }
    tree_squares(s, v)
}

/// The mean of `n` values `h` from the lane sum `first` of [`block_sum`], and the centre
/// `c = f32(k + mean)` of [`block_dev`].
#[inline(always)]
pub(crate) fn centre(k: f32, first: f32, n: usize) -> (f64, f32) {
    let mean = -(first as f64) * (1.0 / n as f64);
    (mean, k + mean as f32)
}

/// The sum of squared deviations from the mean of `n` values from the lane sum `second` of
/// [`block_dev`]: `Σ(c − h)² = M2 + n·(mean − (c − k))²`, `c − k` exact in f64.
#[inline(always)]
pub(crate) fn block_m2(second: f32, n: usize, k: f32, mean: f64, c: f32) -> f64 {
    let off = mean - (c as f64 - k as f64);
    second as f64 - n as f64 * off * off
}

/// `4·ACC·MAX_LANES` ones, then as many zeros: the weights of [`block`].
static WEIGHTS: [f32; 8 * ACC * MAX_LANES] = {
    let mut w = [0.0f32; 8 * ACC * MAX_LANES];
    let mut j = 0;
    while j < 4 * ACC * MAX_LANES {
        w[j] = 1.0;
        j += 1;
    }
    w
};

/// The sum of `N` (a power of two) vectors, as a tree.
#[inline(always)]
fn tree<S: Simd, const N: usize>(s: S, mut v: [S::V; N]) -> S::V {
    let mut n = N;
    while n > 1 {
        n /= 2;
        for j in 0..n {
            v[j] = s.add(v[j], v[j + n]);
        }
    }
    v[0]
}

/// The sum of the squares of `N ≥ 2` (a power of two) vectors, as a tree whose first level
/// pairs a product with an FMA.
#[inline(always)]
fn tree_squares<S: Simd, const N: usize>(s: S, mut v: [S::V; N]) -> S::V {
    let mut n = N / 2;
    for j in 0..n {
        v[j] = s.mul_add(v[j], v[j], s.mul(v[j + n], v[j + n]));
    }
    while n > 1 {
        n /= 2;
        for j in 0..n {
            v[j] = s.add(v[j], v[j + n]);
        }
    }
    v[0]
}

/// Steps per chunk of `Σh²`, reduced to f64 after each: bounds the RMSNorm error to 8
/// roundings per lane (module docs).
const SQUARE_STEPS: usize = 8;

/// `Σh²` over the `d ≥ ACC·LANES` values of `src`, with `trail` run behind the reads.
///
/// # Safety
/// As [`moments`].
#[inline(always)]
pub(crate) unsafe fn sum_squares<S: Simd, R: Source<S>, P: Pending<S>, const PREFETCH: bool>(
    s: S,
    src: &R,
    d: usize,
    trail: &mut Trail<'_, P>,
) -> f64 {
    let lanes = S::LANES;
    let group = ACC * lanes;
    let zero = s.splat(0.0);
    let mut total = 0.0;
    let mut i = 0;
    while d - i >= group {
        let end = i + ((d - i) / group).min(SQUARE_STEPS) * group;
        let mut acc = [zero; ACC];
        while i < end {
            for (a, acc) in acc.iter_mut().enumerate() {
                let at = i + a * lanes;
                if PREFETCH && (a * lanes).is_multiple_of(16) {
                    src.prefetch(s, at);
                }
                // SAFETY: `at + LANES ≤ end ≤ d`.
                let v = unsafe { src.get(s, at, lanes) };
                *acc = s.mul_add(v, v, *acc);
            }
            i += group;
        }
        total += s.reduce_add_f64(tree(s, acc));
        trail.upto(s, i);
    }
    if i < d {
        // SAFETY: fewer than `ACC` vectors are left.
        total += s.reduce_add_f64(unsafe { block_squares::<S, R, ACC, false>(s, src, i, d - i) });
    }
    trail.finish(s);
    total
}

/// The two-pass f64 statistics of `d ≥ 1` values `at(j)`, `None` if one is NaN or ±∞: the
/// path of rows whose f32 statistics overflow, and of non-finite rows.
pub(crate) fn moments_f64(at: impl Fn(usize) -> f32, d: usize) -> Option<Moments> {
    let at = |j: usize| at(j) as f64;
    let mut sum = 0.0;
    for j in 0..d {
        if !at(j).is_finite() {
            return None;
        }
        sum += at(j);
    }
    let mean = sum / d as f64;
    let m2 = (0..d).map(|j| (at(j) - mean) * (at(j) - mean)).sum();
    Some(Moments { n: d as f64, mean, m2 })
}

/// A row's normalize constants: `μ_hi = f32(μ)`, `rstd` (f32), and `shift = −(μ − μ_hi)·rstd`
/// rounded once.
#[derive(Clone, Copy, Default)]
pub(crate) struct Affine {
    pub mean_hi: f32,
    pub rstd: f32,
    pub shift: f32,
}

impl Affine {
    /// All NaN: the mark of a row on the f64 path.
    pub(crate) const NAN: Affine = Affine {
        mean_hi: f32::NAN,
        rstd: f32::NAN,
        shift: f32::NAN,
    };

    /// The constants for `mean` and `rstd` (f64).
    #[inline(always)]
    pub(crate) fn new(mean: f64, rstd: f64) -> Affine {
        let mean_hi = mean as f32;
        Affine {
            mean_hi,
            rstd: rstd as f32,
            shift: (-(mean - mean_hi as f64) * rstd) as f32,
        }
    }
}

/// `rstd = 1/√(var + ε)`, in f64.
#[inline(always)]
pub(crate) fn rstd_of(var: f64, eps: f32) -> f64 {
    1.0 / (var + eps as f64).sqrt()
}
