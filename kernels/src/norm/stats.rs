//! The statistics core of LayerNorm, RMSNorm and BatchNorm: the chunked two-pass moments of
//! a row (or Welford's, for the add forms), their merges in f64, the statistics of groups of
//! short rows, and the trail that runs the previous row's normalize sweep behind them.

use super::call::NormCall;
use super::sources::{Plain, RowSource, Source};
use crate::simd::Simd;
use crate::Element;

/// Independent accumulators of the statistics sweep: a chunk's first pass adds into each
/// (3-cycle chains), its second accumulates squares into each with FMAs (4-cycle chains); a
/// Welford step is a subtract and an FMA deep (8 cycles). Issued at about two
/// vectors a cycle, four chains keep them busy.
pub(crate) const ACC: usize = 4;

/// Steps (of [`ACC`] vectors) per chunk: 512 values on AVX2, 1024 on AVX-512, read twice from
/// L1 when two-pass; Welford steps per lane otherwise (the length of [`RECIP`]). The rounding
/// error of a chunk grows with it (see the module docs); 16 keeps the merges below 15% of the
/// sweep.
pub(crate) const STEPS: usize = 16;

/// `RECIP[k] = 1/k` rounded to f32: the weight of the k-th value of a running mean, and the
/// scale of a chunk's sum (no division in the sweeps).
pub(super) static RECIP: [f32; STEPS + 1] = {
    let mut t = [0.0f32; STEPS + 1];
    let mut k = 1;
    while k <= STEPS {
        t[k] = 1.0 / k as f32;
        k += 1;
    }
    t
};

/// Sums of squares per lane and accumulator before they are reduced: bounds the RMS error by
/// 8 roundings per lane (see the module docs).
const SQUARE_STEPS: usize = 8;

/// Rows at least this long, in calls whose working set is at least the last-level cache (or
/// where its size is unknown), prefetch the inputs of the next row during their statistics
/// sweep, one row ahead of the loads; other calls are left to the hardware prefetchers, which
/// do as well within the cache without the instructions. LayerNorm's rows prefetch into L2
/// ([`Simd::prefetch_l2`]), which leaves L1 to the chunk read twice; RMSNorm's, one pass a
/// chunk, into L1.
pub(crate) const PREFETCH_MIN: usize = 512;

/// Vectors of a row short enough to be held in registers by [`merge_block`], which gathers its
/// statistics two-pass, without chunks: `2·ACC`, 64 values on AVX2, 128 on AVX-512.
pub(crate) const BLOCK: usize = 2 * ACC;

/// Vectors of the longest short rows of LayerNorm ([`is_short`]): `2·BLOCK`, 256 values on
/// AVX-512, 128 on AVX2.
pub(crate) const WIDE: usize = 2 * BLOCK;

/// Floats per cache line: one prefetch per line.
const LINE: usize = 16;

/// The most lanes of any ISA (AVX-512); sizes the stack buffers that spill vectors.
pub(crate) const MAX_LANES: usize = 16;

/// Count, mean and sum of squared deviations of a set of values, in f64.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Moments {
    pub n: f64,
    pub mean: f64,
    pub m2: f64,
}

impl Moments {
    /// Adds a set of `n` values with mean `mean` and sum of squared deviations `m2` (Chan's
    /// pairwise formula).
    #[inline(always)]
    pub fn merge(&mut self, n: f64, mean: f64, m2: f64) {
        if self.n == 0.0 {
            *self = Moments { n, mean, m2 };
            return;
        }
        let total = self.n + n;
        let delta = mean - self.mean;
        let w = n / total;
        self.mean += delta * w;
        self.m2 += m2 + delta * delta * self.n * w;
        self.n = total;
    }

    /// [`merge`](Self::merge) with the weight `w = n/(self.n + n)` given (the same for many
    /// merges of equal counts).
    #[inline(always)]
    pub fn merge_weighted(&mut self, n: f64, mean: f64, m2: f64, w: f64) {
        let delta = mean - self.mean;
        self.mean += delta * w;
        self.m2 += m2 + delta * delta * self.n * w;
        self.n += n;
    }

    /// The statistics are finite (neither a NaN or ±∞ value nor an f32 overflow reached them)
    /// and the f32 normalize sweep cannot overflow: every `|h − μ| ≤ √M2 < 10³⁸`.
    #[inline(always)]
    pub fn fits_f32(&self) -> bool {
        fits_f32(self.mean, self.m2)
    }
}

/// [`Moments::fits_f32`] of a row's `mean` and `m2`.
#[inline(always)]
pub(crate) fn fits_f32(mean: f64, m2: f64) -> bool {
    mean.is_finite() & (m2 < 1e76)
}

/// Work done alongside a statistics sweep: the normalize sweep of the previous row, behind it
/// (in spans of [`TRAIL_SPAN`] values, each ending where the current step begins), so that the
/// reads of one row stream together with the writes of the other (as in a copy) instead of
/// alternating with them row by row. (Behind rather than at the same offset: the previous
/// row's `h` is then never loaded at the offsets where this row's `h` is being stored,
/// 4 KiB-aliased to it in rows of a multiple of 1024 floats.)
pub(crate) trait Pending<S: Simd> {
    /// Normalizes the span `i..i + n` of the previous row.
    ///
    /// # Safety
    /// `i + n` is within the row.
    unsafe fn run(&self, s: S, i: usize, n: usize);
}

/// Nothing pending: the first row, or a previous row that takes the f64 path.
pub(crate) struct Idle;

impl<S: Simd> Pending<S> for Idle {
    #[inline(always)]
    unsafe fn run(&self, _: S, _: usize, _: usize) {}
}

/// Values of the previous row normalized at a time during the statistics sweep of the next:
/// the least [`Trail::upto`] runs. At 128 the AVX2 two-pass chunks (512 values) are four spans
/// long and split in halves as those of AVX-512 are (see `two_pass_chunk`), and rows of 256
/// values run the trail between their passes.
const TRAIL_SPAN: usize = 128;

/// Runs a [`Pending`] sweep in order over a row of `d` values, as far as asked.
struct Trail<'a, P> {
    pending: &'a P,
    done: usize,
    d: usize,
}

impl<'a, P> Trail<'a, P> {
    fn new(pending: &'a P, d: usize) -> Self {
        Trail { pending, done: 0, d }
    }

    /// Runs the pending sweep up to `to` once at least [`TRAIL_SPAN`] values wait and `to < d`
    /// (the rest is for [`Trail::finish`]): each call of the sweep costs a loop setup, so it is
    /// not called per step. The statistics sweeps call it between chunks, and LayerNorm's
    /// two-pass chunks also between their passes and, where a chunk is at least four spans
    /// long, between the halves of each pass (see `two_pass_chunk`); called per step, its test
    /// kept the normalize constants live inside the Welford loop, which then spilled. The add
    /// forms' Welford chunks run it only between chunks.
    #[inline(always)]
    fn upto<S: Simd>(&mut self, s: S, to: usize)
    where
        P: Pending<S>,
    {
        if to < self.d && to >= self.done + TRAIL_SPAN {
            // SAFETY: `done < to < d`.
            unsafe { self.pending.run(s, self.done, to - self.done) };
            self.done = to;
        }
    }

    /// Runs the rest of the pending sweep, up to `d`.
    #[inline(always)]
    fn finish<S: Simd>(&mut self, s: S)
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

/// Mean and sum of squared deviations of `h − k` over a row of `d ≥ 1` values, in chunks of
/// [`STEPS`] steps, two-pass from L1 or by per-lane Welford (see [`Source::TWO_PASS`] and the
/// module docs). The mean is relative to `k`.
/// `pending` runs over the row behind it (see [`Trail::upto`]).
///
/// # Safety
/// `src` covers `d` values, and so does the row of `pending`.
#[inline(always)]
pub(crate) unsafe fn moments<S: Simd, R: Source<S>, P: Pending<S>>(
    s: S,
    src: &R,
    d: usize,
    k: f32,
    pending: &P,
) -> Moments {
    let lanes = S::LANES;
    let group = ACC * lanes;
    let kv = s.splat(k);
    let mut total = Moments::default();
    let mut trail = Trail::new(pending, d);
    if is_short::<S, R>(d) {
        // A short row, held in registers and merged two-pass.
        // SAFETY: `src` covers `0..d`, at most `WIDE` vectors.
        unsafe { merge_short(s, src, 0, d, kv, &mut total) };
        trail.finish(s);
        return total;
    }
    let mut left = d / group;
    let mut i = 0;
    while left > 0 {
        let steps = left.min(STEPS);
        let end = i + steps * group;
        if R::TWO_PASS {
            // SAFETY: the chunk `i..end` is within `0..d`.
            unsafe { two_pass_chunk(s, src, i, end, steps, k, &mut trail, &mut total) };
        } else {
            // SAFETY: as above.
            let (m, m2) = unsafe {
                if src.prefetches() {
                    welford_chunk::<S, R, true>(s, src, i, steps, kv)
                } else {
                    welford_chunk::<S, R, false>(s, src, i, steps, kv)
                }
            };
            // The trail between chunks, not inside them (see `Trail::upto`); before the
            // merge, whose chain of reductions it gives independent work to overlap.
            trail.upto(s, end);
            merge_lanes(s, &m, &m2, steps, &mut total);
        }
        i = end;
        left -= steps;
    }
    if i < d {
        // SAFETY: `src` covers `i..d`, fewer than `ACC` vectors after the chunks. (Over
        // `ACC` vectors directly: `merge_short` would bring its wider blocks into the loop
        // of long rows too.)
        unsafe { merge_block::<S, R, ACC>(s, src, i, d, kv, &mut total) };
    }
    trail.finish(s);
    total
}

/// Merges the values `i..d` of `src` (minus `k`, splat in `kv`; at most [`WIDE`] vectors)
/// into `total` with [`merge_block`], over `ACC` vectors where they fit, else `BLOCK` where
/// they fit, else `WIDE`: over a wider block, a row that fits a narrower one pays for the zero
/// vectors in its sums and trees.
///
/// # Safety
/// `src` covers `i..d`, `i < d ≤ i + WIDE·LANES`.
#[inline(always)]
unsafe fn merge_short<S: Simd, R: Source<S>>(s: S, src: &R, i: usize, d: usize, kv: S::V, total: &mut Moments) {
    // SAFETY: forwarded.
    unsafe {
        match short_block::<S>(d - i).0 {
            ACC => merge_block::<S, R, ACC>(s, src, i, d, kv, total),
            BLOCK => merge_block::<S, R, BLOCK>(s, src, i, d, kv, total),
            _ => merge_block::<S, R, WIDE>(s, src, i, d, kv, total),
        }
    }
}

/// Merges the chunk `i..end` of `steps` steps into `total`, two-pass (see the module docs),
/// running `trail` between the passes.
///
/// # Safety
/// `src` covers `i..end`, and `trail` a row of at least `end` values.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn two_pass_chunk<S: Simd, R: Source<S>, P: Pending<S>>(
    s: S,
    src: &R,
    i: usize,
    end: usize,
    steps: usize,
    k: f32,
    trail: &mut Trail<'_, P>,
    total: &mut Moments,
) {
    // Each pass prefetches half of the next row's lines under the chunk: spread over both,
    // the prefetches keep memory busier than in a burst in the first (module docs, "Row
    // pipeline"). Both compute `k − h` rather than `h − k` (the same value negated, exactly),
    // so that the load of `h` is the subtraction's memory operand on x86.
    //
    // The trail normalizes the previous row once while this sweep reads the row twice: it
    // goes half as far as the passes, between them and, in chunks long enough for two of its
    // spans a pass, between their halves too. The stores of the normalize sweep then come in
    // bursts of a quarter of a chunk rather than of all of it, interleaved with the loads.
    let group = ACC * S::LANES;
    let len = end - i;
    let mid = if len >= 4 * TRAIL_SPAN {
        i + steps / 2 * group
    } else {
        end
    };
    // Where the trail goes between the halves of the passes: a quarter of the chunk each.
    let quarter = (mid - i) / 2;
    let op = Deviations(s.splat(k));
    // SAFETY (both passes): forwarded.
    let sum = unsafe { chunk_pass(s, src, i, mid, end, Lines::Even, &op, trail, i + quarter) };
    let sum = tree(s, sum);
    // The sum is of `k − h`: the chunk's mean of `h − k` is minus its mean. `mc` is the same
    // in f32 (`1/group` is a power of two; `RECIP[steps]` exact when `steps` is one).
    let n = (steps * group) as f64;
    let mean = -s.reduce_add_f64(sum) / n;
    let mc = s.reduce_add(sum) * -RECIP[steps] * (1.0 / group as f32);
    // The trail between the passes: independent work while the sum above goes through its
    // reductions.
    trail.upto(s, i + len / 2);
    // The second pass is centred on `c = f32(k + mc)`, within rounding of the chunk's mean
    // `k + mean`: one subtraction a vector, `c − h`, against two for `(k − h) + mc`. The offset
    // of `c` from the mean is removed below, in f64, where `c − k` is exact.
    let c = k + mc;
    let op = Centred(s.splat(c));
    // SAFETY: forwarded.
    let squares = unsafe { chunk_pass(s, src, i, mid, end, Lines::Odd, &op, trail, i + len / 2 + quarter) };
    trail.upto(s, end);
    let m2 = s.reduce_add_f64(tree(s, squares));
    let off = mean - (c as f64 - k as f64);
    total.merge(n, mean, m2 - n * off * off);
}

/// One pass of [`two_pass_chunk`] over `i..end` with `op`, in two loops split at `mid` (one
/// where `mid = end`), between which `trail` goes on up to `to`.
///
/// # Safety
/// `src` covers `i..end`, `i ≤ mid ≤ end` on multiples of `ACC·LANES` from `i`, and `trail` a
/// row of at least `end` values.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn chunk_pass<S: Simd, R: Source<S>, A: Accumulate<S>, P: Pending<S>>(
    s: S,
    src: &R,
    i: usize,
    mid: usize,
    end: usize,
    lines: Lines,
    op: &A,
    trail: &mut Trail<'_, P>,
    to: usize,
) -> [S::V; ACC] {
    let mut acc = [s.splat(0.0); ACC];
    // SAFETY: forwarded.
    unsafe { accumulate(s, src, i, mid, lines, &mut acc, op) };
    if mid < end {
        trail.upto(s, to);
        // SAFETY: forwarded.
        unsafe { accumulate(s, src, mid, end, lines, &mut acc, op) };
    }
    acc
}

/// What a chunk loop sums: [`Accumulate::step`] folds a vector `v` of the row into an
/// accumulator.
trait Accumulate<S: Simd> {
    /// Whether the loop's prefetches of the next row go to the level-2 cache
    /// ([`Simd::prefetch_l2`]) rather than the level-1 ([`Simd::prefetch`]); see
    /// [`PREFETCH_MIN`].
    const PREFETCH_L2: bool;
    fn step(&self, s: S, acc: S::V, v: S::V) -> S::V;
}

/// `Σ(k − h)`, `k` splat: the first pass of [`two_pass_chunk`].
struct Deviations<V>(V);

impl<S: Simd> Accumulate<S> for Deviations<S::V> {
    const PREFETCH_L2: bool = true;
    #[inline(always)]
    fn step(&self, s: S, acc: S::V, v: S::V) -> S::V {
        s.add(acc, s.sub(self.0, v))
    }
}

/// `Σ(h − c)²`, computed as `Σ(c − h)²` (`c` splat, so that `h` is the memory operand): the
/// second pass of [`two_pass_chunk`].
struct Centred<V>(V);

impl<S: Simd> Accumulate<S> for Centred<S::V> {
    const PREFETCH_L2: bool = true;
    #[inline(always)]
    fn step(&self, s: S, acc: S::V, v: S::V) -> S::V {
        let t = s.sub(self.0, v);
        s.mul_add(t, t, acc)
    }
}

/// `Σh²`: RMSNorm's sweep ([`sum_squares`]).
struct Squared;

impl<S: Simd> Accumulate<S> for Squared {
    const PREFETCH_L2: bool = false;
    #[inline(always)]
    fn step(&self, s: S, acc: S::V, v: S::V) -> S::V {
        s.mul_add(v, v, acc)
    }
}

/// The lines of the next row that a chunk loop prefetches, of those under its chunk.
#[derive(Clone, Copy)]
enum Lines {
    All,
    /// Those at even multiples of [`LINE`] in each group of `ACC` vectors (every line where a
    /// group is one line).
    Even,
    /// The others.
    Odd,
}

impl Lines {
    /// Whether the vector at `off` in a group of `ACC` vectors starts a line taken.
    #[inline(always)]
    fn take(self, off: usize) -> bool {
        match self {
            Lines::All => off.is_multiple_of(LINE),
            Lines::Even => off.is_multiple_of(2 * LINE),
            Lines::Odd => off % (2 * LINE) == LINE,
        }
    }
}

/// Folds the vectors of the chunk `i..end` (a multiple of `ACC·LANES` values) into the
/// [`ACC`] accumulators in turn with `op`, prefetching the next row's `lines` where the
/// source prefetches.
///
/// # Safety
/// `src` covers `i..end`.
#[inline(always)]
unsafe fn accumulate<S: Simd, R: Source<S>, A: Accumulate<S>>(
    s: S,
    src: &R,
    i: usize,
    end: usize,
    lines: Lines,
    acc: &mut [S::V; ACC],
    op: &A,
) {
    // SAFETY: forwarded; each loop prefetches only where the source does.
    unsafe {
        if src.prefetches() {
            accumulate_with::<S, R, A, true>(s, src, i, end, lines, acc, op)
        } else {
            accumulate_with::<S, R, A, false>(s, src, i, end, lines, acc, op)
        }
    }
}

/// [`accumulate`], prefetching where `PREFETCH`.
///
/// # Safety
/// As [`accumulate`]; `PREFETCH` only where `src.prefetches()`.
#[inline(always)]
unsafe fn accumulate_with<S: Simd, R: Source<S>, A: Accumulate<S>, const PREFETCH: bool>(
    s: S,
    src: &R,
    mut i: usize,
    end: usize,
    lines: Lines,
    acc: &mut [S::V; ACC],
    op: &A,
) {
    let lanes = S::LANES;
    while i < end {
        for (a, acc) in acc.iter_mut().enumerate() {
            if PREFETCH && lines.take(a * lanes) {
                src.prefetch(s, i + a * lanes, A::PREFETCH_L2);
            }
            // SAFETY: inside the chunk.
            *acc = op.step(s, *acc, unsafe { src.full(s, i + a * lanes) });
        }
        i += ACC * lanes;
    }
}

/// The per-lane Welford accumulators `(m, M)` of the chunk of `steps ≤ STEPS` steps from `i`
/// (values minus `k`, splat in `kv`), prefetching the next row's into the level-2 cache where
/// `PREFETCH` (the Welford chunks are those of LayerNorm's add forms; see [`PREFETCH_MIN`]).
///
/// # Safety
/// `src` covers `i..i + steps·ACC·LANES`; `PREFETCH` only where `src.prefetches()`.
#[inline(always)]
unsafe fn welford_chunk<S: Simd, R: Source<S>, const PREFETCH: bool>(
    s: S,
    src: &R,
    mut i: usize,
    steps: usize,
    kv: S::V,
) -> ([S::V; ACC], [S::V; ACC]) {
    let lanes = S::LANES;
    let group = ACC * lanes;
    // The first step: m = z, M = 0, exactly.
    let mut m = [kv; ACC];
    for (a, m) in m.iter_mut().enumerate() {
        if PREFETCH && Lines::All.take(a * lanes) {
            src.prefetch(s, i + a * lanes, true);
        }
        // SAFETY (all loads): step `i` reads `i..i + ACC·LANES`, inside the chunk.
        *m = s.sub(unsafe { src.full(s, i + a * lanes) }, kv);
    }
    let mut m2 = [s.splat(0.0); ACC];
    i += group;
    for &rk in &RECIP[2..=steps] {
        let rk = s.splat(rk);
        for a in 0..ACC {
            if PREFETCH && Lines::All.take(a * lanes) {
                src.prefetch(s, i + a * lanes, true);
            }
            let z = s.sub(unsafe { src.full(s, i + a * lanes) }, kv);
            let delta = s.sub(z, m[a]);
            m[a] = s.mul_add(delta, rk, m[a]);
            m2[a] = s.mul_add(delta, s.sub(z, m[a]), m2[a]);
        }
        i += group;
    }
    (m, m2)
}

/// Merges the [`ACC`] Welford accumulators of a chunk of `steps` steps into `total`, by the
/// k-way form of Chan's formula: `M2 = Σ_l M_l + steps·Σ_l (m_l − mean)²`. The two sums share
/// one reduction (`M_l + steps·(m_l − mc)²` per lane), so a chunk costs two: the mean, then that.
///
/// The lanes are centred on `mc`, their mean as an f32 sum: any value near the mean serves,
/// since the offset `mean − mc` is removed below, and its rounding enters `M2` only to second
/// order in `u`. The f32 sum ends sooner than the f64 mean, which the deviations no longer
/// wait for: the chain of reductions, square root and division that ends a row is what short
/// rows wait on.
#[inline(always)]
fn merge_lanes<S: Simd>(s: S, m: &[S::V; ACC], m2: &[S::V; ACC], steps: usize, total: &mut Moments) {
    let lanes = (ACC * S::LANES) as f64;
    let n = steps as f64 * lanes;
    let means = s.add(s.add(m[0], m[1]), s.add(m[2], m[3]));
    let mean = s.reduce_add_f64(means) / lanes;
    let mc = s.reduce_add(means) * (1.0 / lanes as f32);
    let mv = s.splat(mc);
    let t = [s.sub(m[0], mv), s.sub(m[1], mv), s.sub(m[2], mv), s.sub(m[3], mv)];
    let dev = s.add(
        s.mul_add(t[0], t[0], s.mul(t[1], t[1])),
        s.mul_add(t[2], t[2], s.mul(t[3], t[3])),
    );
    let sum = if steps > 1 {
        let within = s.add(s.add(m2[0], m2[1]), s.add(m2[2], m2[3]));
        s.mul_add(dev, s.splat(steps as f32), within)
    } else {
        dev
    };
    // Σ(m_l − mc)² = Σ(m_l − mean)² + lanes·(mean − mc)²: remove the second term.
    let off = mean - mc as f64;
    total.merge(n, mean, s.reduce_add_f64(sum) - n * off * off);
}

/// Merges the values `i..d` of `src` (minus `k`, splat in `kv`; at most `B ≤` [`WIDE`]
/// vectors) into `total`, two-pass from registers: their sum, then the squares of their
/// deviations from `mc`, an f32 mean, as in [`moments`]. Both sums are reduced across the
/// lanes in f32 ([`Simd::reduce_add`]), then widened: [`group_means_of`] and [`group_m2_of`]
/// reduce sixteen rows at a time the same way (in f64 that cost more than the groups' other
/// reductions together: see `rows::by_groups`).
///
/// Only the loads depend on `n = d − i`: the vectors past the end are zero, the sums run as
/// trees over all `B` of them, and the deviations are `z − mc·w` with `w` 1 on the
/// values and 0 past them (from [`WEIGHTS`]), which is `z − mc` rounded once, or exactly 0.
/// (Masking the deviations by branches on `n` instead cost more than the Welford chunk it
/// replaced: LLVM kept the branch conditions in spilled flags.)
///
/// # Safety
/// `src` covers `i..d`, `i < d ≤ i + B·LANES`.
#[inline(always)]
unsafe fn merge_block<S: Simd, R: Source<S>, const B: usize>(
    s: S,
    src: &R,
    i: usize,
    d: usize,
    kv: S::V,
    total: &mut Moments,
) {
    let n = d - i;
    debug_assert!(B.is_power_of_two() && B >= 2 && B <= WIDE && 0 < n && n <= B * S::LANES);
    // SAFETY: forwarded.
    let z = unsafe { load_block::<S, R, B, false>(s, src, i, n, kv) };
    // The lanes reduced in f32, then widened, as `group_means_of` does for sixteen rows.
    let centre = block_mean(s.reduce_add(tree(s, z)) as f64, n);
    let m2 = block_m2(
        s.reduce_add(tree_deviations::<S, B, false>(s, z, n, centre)) as f64,
        n,
        centre,
    );
    total.merge(n as f64, centre.0, m2);
}

/// The mean of a block of `n ≤ WIDE·MAX_LANES` values from the sum of its lanes, and
/// `mc`, the same rounded to f32: [`merge_block`]'s first pass.
#[inline(always)]
fn block_mean(sum: f64, n: usize) -> (f64, f32) {
    // `n ≤ WIDE·MAX_LANES`: exact as u32.
    let mean = sum * (1.0 / n as u32 as f64);
    (mean, mean as f32)
}

/// The squares of the deviations `z − mc` of the `n` values of a block `z` (zero past them),
/// summed as a tree: [`merge_block`]'s second pass, before its reduction. `FULL` where
/// `n = B·LANES`: then every weight is 1, and `z − mc` is the same as `fma(1, −mc, z)`.
#[inline(always)]
fn tree_deviations<S: Simd, const B: usize, const FULL: bool>(
    s: S,
    z: [S::V; B],
    n: usize,
    (_, mc): (f64, f32),
) -> S::V {
    let mut t = z;
    if FULL {
        let m = s.splat(mc);
        for t in t.iter_mut() {
            *t = s.sub(*t, m);
        }
        return tree_squares(s, t);
    }
    let neg = s.splat(-mc);
    // `w` lane `l` of vector `j` is `WEIGHTS[WIDE·MAX_LANES − n + j·LANES + l]`: 1 where
    // `j·LANES + l < n`. Offsets stay within `0..2·WIDE·MAX_LANES`.
    let w = WEIGHTS[WIDE * MAX_LANES - n..].as_ptr();
    for (j, t) in t.iter_mut().enumerate() {
        // SAFETY: `j·LANES + LANES ≤ B·LANES ≤ WIDE·LANES` values from `w`.
        *t = s.mul_add(unsafe { s.load(w.add(j * S::LANES)) }, neg, *t);
    }
    tree_squares(s, t)
}

/// The sum of squared deviations from the mean of a block of `n` values, from the f64 sum of
/// the lanes of [`tree_deviations`] (centred on `mc`): it less `n·(mean − mc)²`.
#[inline(always)]
fn block_m2(dev: f64, n: usize, (mean, mc): (f64, f32)) -> f64 {
    let off = mean - mc as f64;
    dev - n as f64 * off * off
}

/// Rows gathered at once by groups (`rows::by_groups`; as many as
/// [`Simd::reduce_add_16`] reduces).
pub(crate) const GROUP: usize = 16;

/// Whether rows of `d` values read through `R` are short: held in registers by
/// [`merge_block`] (in [`moments`]), and gathered by groups of rows (`rows::by_groups`,
/// with [`group_row_sum`] and [`group_row_dev`]) where the source is plain. Rows of up to
/// [`BLOCK`] vectors are. For a two-pass source (plain LayerNorm) so are rows of up to
/// [`WIDE`] where the ISA has 32 registers, and where it has 16, rows that fill `WIDE`
/// exactly (no weights to hold: a partly filled wide block on 16 registers spills). The
/// Welford sources (the add forms, and the blocks that follow their bits) keep `BLOCK`: wider
/// blocks held too many registers beside their running means.
#[inline(always)]
pub(crate) fn is_short<S: Simd, R: Source<S>>(d: usize) -> bool {
    let lanes = S::LANES;
    d <= BLOCK * lanes || R::TWO_PASS && d <= WIDE * lanes && (S::REGISTERS >= 32 || d == WIDE * lanes)
}

/// The block `(B, FULL)` that [`merge_block`] and the groups hold a short row of `d` values
/// in ([`is_short`]): `B` vectors ([`ACC`], [`BLOCK`] or [`WIDE`], the fewest that hold it),
/// `FULL` where the row fills them exactly.
#[inline(always)]
pub(crate) fn short_block<S: Simd>(d: usize) -> (usize, bool) {
    let b = if d <= ACC * S::LANES {
        ACC
    } else if d <= BLOCK * S::LANES {
        BLOCK
    } else {
        WIDE
    };
    (b, d == b * S::LANES)
}

/// The first pass of a short row of a group: the sum, as a tree of vectors, of the row's
/// values minus `k`, read through `R` (for the f32 add forms: `h` built, stored and summed
/// in one go). Its lanes are reduced with those of the group's other rows by
/// [`group_means_of`]. The same values through the same operations as [`merge_block`]'s
/// first pass, so the same bits.
///
/// # Safety
/// Row `row` lies in `call`, of `d ≤ B·LANES` values (equal where `FULL`).
#[inline(always)]
pub(crate) unsafe fn group_row_sum<S: Simd, E: Element, R: RowSource<S, E>, const B: usize, const FULL: bool>(
    s: S,
    call: &NormCall<E>,
    row: usize,
    k: f32,
) -> S::V {
    let d = call.d;
    // SAFETY: by the caller's promise.
    let (src, _) = unsafe { R::row(s, call, row * d) };
    tree(s, unsafe { load_block::<S, R, B, FULL>(s, &src, 0, d, s.splat(k)) })
}

/// The means of the rows of a group of `d` values from their sums by [`group_row_sum`]
/// (zero past the group's rows): the lanes of the sixteen reduced at once
/// ([`Simd::reduce_add_16`]), then [`block_mean`] of each, as a loop over arrays that the
/// compiler runs in vectors.
#[inline(always)]
pub(crate) fn group_means_of<S: Simd>(s: S, d: usize, sums: &[S::V; GROUP]) -> GroupMeans {
    let mut sum = [0.0; GROUP];
    s.reduce_add_16(sums, &mut sum);
    let (mut mean, mut mc) = ([0.0; GROUP], [0.0; GROUP]);
    for j in 0..GROUP {
        (mean[j], mc[j]) = block_mean(sum[j] as f64, d);
    }
    GroupMeans { mean, mc }
}

/// The second pass of a short row of a group: the squares of its deviations from its mean
/// `(mean, mc)` ([`block_mean`]), summed as a tree of vectors ([`tree_deviations`]), from
/// row `row` of the values at `again` (`x`, or the `h` the first pass stored), read again
/// from L1.
///
/// # Safety
/// Row `row` of `d ≤ B·LANES` values (equal where `FULL`) lies at `again`.
#[inline(always)]
pub(crate) unsafe fn group_row_dev<S: Simd, E: Element, const B: usize, const FULL: bool>(
    s: S,
    again: *const E,
    d: usize,
    row: usize,
    k: f32,
    mean: (f64, f32),
) -> S::V {
    // SAFETY: by the caller's promise.
    let z = unsafe { row_block::<S, E, B, FULL>(s, again, d, row, k) };
    tree_deviations::<S, B, FULL>(s, z, d, mean)
}

/// The sums of squared deviations from the mean of the rows of a group of `d` values, from
/// their trees by [`group_row_dev`] (zero past the group's rows) and their means: reduced
/// and finished as in [`group_means_of`].
#[inline(always)]
pub(crate) fn group_m2_of<S: Simd>(s: S, d: usize, devs: &[S::V; GROUP], means: &GroupMeans) -> [f64; GROUP] {
    let mut sum = [0.0; GROUP];
    s.reduce_add_16(devs, &mut sum);
    let mut m2 = [0.0; GROUP];
    for j in 0..GROUP {
        m2[j] = block_m2(sum[j] as f64, d, (means.mean[j], means.mc[j]));
    }
    m2
}

/// The means of the rows of a group ([`group_means_of`]), row `j`'s in entry `j` of each
/// array (an array each, so that the loops over them run in vectors).
#[derive(Clone, Copy, Default)]
pub(crate) struct GroupMeans {
    /// The means, in f64.
    pub mean: [f64; GROUP],
    /// The same, rounded to f32.
    pub mc: [f32; GROUP],
}

/// Row `j` of the rows of `d ≤ B·LANES` values at `x` (equal where `FULL`), minus `k`, in
/// `B` vectors (zero past the row), as [`load_block`] loads it.
///
/// # Safety
/// Row `j` lies in `x`.
#[inline(always)]
unsafe fn row_block<S: Simd, E: Element, const B: usize, const FULL: bool>(
    s: S,
    x: *const E,
    d: usize,
    j: usize,
    k: f32,
) -> [S::V; B] {
    let src = Plain::<E> {
        // SAFETY: by the caller's promise.
        x: unsafe { x.add(j * d) },
        ahead: [std::ptr::null(); 2],
    };
    // SAFETY: the row holds `d ≤ B·LANES` values.
    unsafe { load_block::<S, Plain<E>, B, FULL>(s, &src, 0, d, s.splat(k)) }
}

/// The values `i..i + n` of `src` minus `kv`, in `B` vectors, zero past them; `FULL` where
/// `n = B·LANES` (the same values, without the tests for a tail).
///
/// # Safety
/// `src` covers `i..i + n`, `n ≤ B·LANES`, equal where `FULL`.
#[inline(always)]
unsafe fn load_block<S: Simd, R: Source<S>, const B: usize, const FULL: bool>(
    s: S,
    src: &R,
    i: usize,
    n: usize,
    kv: S::V,
) -> [S::V; B] {
    debug_assert!(!FULL || n == B * S::LANES);
    let lanes = S::LANES;
    let (full, part) = if FULL { (B, 0) } else { (n / lanes, n % lanes) };
    let zero = s.splat(0.0);
    let mut z = [zero; B];
    // (Loops, not closures: a closure carries no target features, and where LLVM declines
    // to inline it its intrinsics become calls.)
    for (j, z) in z.iter_mut().enumerate() {
        // SAFETY: vector `j < full` reads `i + j·LANES .. + LANES ≤ i + n`, the partial one
        // `..i + n`.
        if j < full {
            *z = s.sub(unsafe { src.full(s, i + j * lanes) }, kv);
        } else if j == full && part > 0 {
            let v = s.sub(unsafe { src.partial(s, i + j * lanes, part) }, kv);
            *z = s.select(s.first_lanes(part), v, zero);
        }
    }
    z
}

/// `WIDE·MAX_LANES` ones, then as many zeros: the weights of [`merge_block`].
static WEIGHTS: [f32; 2 * WIDE * MAX_LANES] = {
    let mut w = [0.0f32; 2 * WIDE * MAX_LANES];
    let mut j = 0;
    while j < WIDE * MAX_LANES {
        w[j] = 1.0;
        j += 1;
    }
    w
};

/// The sum of `N` (a power of two) vectors, as a tree.
#[inline(always)]
fn tree<S: Simd, const N: usize>(s: S, mut v: [S::V; N]) -> S::V {
    tree_of(s, &mut v, N)
}

/// The sum of the first `n` (a power of two) vectors of `v`, as a tree.
#[inline(always)]
fn tree_of<S: Simd>(s: S, v: &mut [S::V], mut n: usize) -> S::V {
    while n > 1 {
        n /= 2;
        for j in 0..n {
            v[j] = s.add(v[j], v[j + n]);
        }
    }
    v[0]
}

/// The sum of the squares of `N` (a power of two) vectors, as a tree whose first level
/// pairs a product with an FMA.
#[inline(always)]
fn tree_squares<S: Simd, const N: usize>(s: S, mut v: [S::V; N]) -> S::V {
    let n = N / 2;
    for j in 0..n {
        v[j] = s.mul_add(v[j], v[j], s.mul(v[j + n], v[j + n]));
    }
    tree_of(s, &mut v, n)
}

/// `Σ h²` over a row of `d` values, in chunks of [`SQUARE_STEPS`] steps reduced in f64;
/// `pending` runs over the same offsets.
///
/// # Safety
/// `src` covers `d` values, and so does the row of `pending`.
#[inline(always)]
pub(crate) unsafe fn sum_squares<S: Simd, R: Source<S>, P: Pending<S>>(s: S, src: &R, d: usize, pending: &P) -> f64 {
    let lanes = S::LANES;
    let group = ACC * lanes;
    let main = d - d % group;
    let mut trail = Trail::new(pending, d);
    if d <= BLOCK * lanes {
        // A short row, held in registers as in `merge_short`: one tree of squares, over `ACC`
        // vectors where it fits (as in `merge_short`). (`x − 0` is `x`, and the compiler drops
        // it.)
        // SAFETY: `src` covers `0..d`, `d ≤ BLOCK·LANES`.
        let squares = unsafe {
            let zero = s.splat(0.0);
            if d <= group {
                tree_squares(s, load_block::<S, R, ACC, false>(s, src, 0, d, zero))
            } else {
                tree_squares(s, load_block::<S, R, BLOCK, false>(s, src, 0, d, zero))
            }
        };
        trail.finish(s);
        return s.reduce_add_f64(squares);
    }
    let mut total = 0.0f64;
    let mut acc = [s.splat(0.0); ACC];
    let mut i = 0;
    // SAFETY (all loads): full loads read `i..i + LANES ≤ d`, the partial one `i..d`.
    while i < main {
        let end = main.min(i + SQUARE_STEPS * group);
        unsafe { accumulate(s, src, i, end, Lines::All, &mut acc, &Squared) };
        i = end;
        total += reduce_sum(s, &mut acc);
        // The trail between chunks, as in `moments`.
        trail.upto(s, i);
    }
    trail.finish(s);
    let mut a = 0;
    while i + lanes <= d {
        let v = unsafe { src.full(s, i) };
        acc[a] = s.mul(v, v);
        a += 1;
        i += lanes;
    }
    if i < d {
        let v = s.select(s.first_lanes(d - i), unsafe { src.partial(s, i, d - i) }, s.splat(0.0));
        acc[a] = s.mul(v, v);
    }
    total + reduce_sum(s, &mut acc)
}

/// Adds the accumulators as a tree (in f32, then the lanes in f64) and zeroes them.
#[inline(always)]
fn reduce_sum<S: Simd>(s: S, acc: &mut [S::V; ACC]) -> f64 {
    let v = s.add(s.add(acc[0], acc[1]), s.add(acc[2], acc[3]));
    *acc = [s.splat(0.0); ACC];
    s.reduce_add_f64(v)
}

/// The constants of the normalize sweep `y = ((h − μ_hi)·rstd − μ_lo·rstd)·γ + β`.
#[derive(Clone, Copy, Default)]
pub(crate) struct Affine {
    /// `f32(μ)`.
    pub mean_hi: f32,
    /// `f32(rstd)`.
    pub rstd: f32,
    /// `−(μ − μ_hi)·rstd`, rounded once.
    pub shift: f32,
}

impl Affine {
    /// All NaN: the mark of a row that takes the f64 path.
    pub const NAN: Affine = Affine {
        mean_hi: f32::NAN,
        rstd: f32::NAN,
        shift: f32::NAN,
    };

    /// The constants for `mean` and `rstd` (f64).
    #[inline(always)]
    pub fn new(mean: f64, rstd: f64) -> Affine {
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

/// The two-pass f64 statistics of a row of `d ≥ 1` values `at(j)`: `None` if the row holds a
/// NaN or ±∞. The fallback for rows whose f32 statistics overflow, and for non-finite rows.
pub(crate) fn moments_f64(at: impl Fn(usize) -> f32, d: usize) -> Option<Moments> {
    let at = |j: usize| at(j) as f64;
    let mut sum = 0.0;
    for j in 0..d {
        let v = at(j);
        if !v.is_finite() {
            return None;
        }
        sum += v;
    }
    let mean = sum / d as f64;
    let m2 = (0..d).map(|j| (at(j) - mean) * (at(j) - mean)).sum();
    Some(Moments { n: d as f64, mean, m2 })
}
