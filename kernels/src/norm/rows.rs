//! The walks over the rows of a LayerNorm or RMSNorm call: which source the rows are read
//! through, and in what order the sweeps of the rows run (row by row, pipelined; by groups of
//! short rows; by blocks).

use std::marker::PhantomData;
use std::ops::Range;

use super::call::NormCall;
use super::sources::{AddResidual, Plain, RowSource, Source, Values};
use super::stats::{group_means_of, is_short, short_block, GroupMeans, Idle, Pending, ACC, BLOCK, GROUP, WIDE};
use crate::dispatch::Kernels;
use crate::element::Element;
use crate::parallel::{Split, GRAIN_ELEMENTS};
use crate::simd::Simd;

/// One instance of the LayerNorm and RMSNorm bodies, an op ([`RowOp`]) and a walk over the
/// rows ([`Walk`]), as a dispatch operation: each instance is compiled as a function of its
/// own per ISA (inlined into one function per ISA and storage type, the 30 instances made
/// functions of about a megabyte of machine code each, which LLVM optimized in minutes).
struct Instance<E, Op, W> {
    call: NormCall<E>,
    instance: PhantomData<(Op, W)>,
}

impl<E: Element, Op: RowOp, W: Walk> crate::dispatch::Op for Instance<E, Op, W> {
    type Output = ();

    #[inline(always)]
    unsafe fn eval<S: Simd>(self, s: S) {
        // SAFETY: `walks` builds an instance only under its walk's conditions.
        unsafe { walk_rows::<S, E, Op, W>(s, &self.call) }
    }
}

impl<E: Element, Op: RowOp, W: Walk> Clone for Instance<E, Op, W> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<E: Element, Op: RowOp, W: Walk> Copy for Instance<E, Op, W> {}

impl<E: Element, Op: RowOp, W: Walk> Split for Instance<E, Op, W> {
    fn units(&self) -> usize {
        self.call.rows
    }

    fn grain(&self) -> usize {
        GRAIN_ELEMENTS.div_ceil(self.call.d)
    }

    unsafe fn part(&self, rows: Range<usize>, _: usize) -> Self {
        Instance {
            call: self.call.rows(rows),
            instance: PhantomData,
        }
    }
}

/// Runs `Op` on the ISA of `k` with the walk over the rows the call asks for.
///
/// # Safety
/// As `api::norm_rows`.
#[inline(always)]
pub(super) unsafe fn walks<E: Element, Op: RowOp>(k: &Kernels, call: &NormCall<E>) {
    fn instance<E: Element, Op, W>(call: &NormCall<E>) -> Instance<E, Op, W> {
        Instance {
            call: *call,
            instance: PhantomData,
        }
    }
    // SAFETY: forwarded from the caller; each walk's own conditions are those checked here.
    unsafe {
        if call.r.is_null() {
            k.run_split(instance::<E, Op, PlainWalk>(call));
        } else if E::IS_F32 && Blocks::<false>::takes(call) {
            // (`E::IS_F32` first and by itself: a constant, so the other storage types do
            // not instantiate the blocks at all.)
            if call.bias.is_null() {
                k.run_split(instance::<E, Op, Blocks<false>>(call));
            } else {
                k.run_split(instance::<E, Op, Blocks<true>>(call));
            }
        } else if call.bias.is_null() {
            k.run_split(instance::<E, Op, AddWalk<false>>(call));
        } else {
            k.run_split(instance::<E, Op, AddWalk<true>>(call));
        }
    }
}

/// Runs the instance `(Op, W)` over every row of the call, for the ISA of `S`.
///
/// # Safety
/// As `api::norm_rows`, with the conditions of [`walks`] for `W`.
#[inline(always)]
pub(super) unsafe fn walk_rows<S: Simd, E: Element, Op: RowOp, W: Walk>(s: S, call: &NormCall<E>) {
    // SAFETY: forwarded from the caller.
    unsafe { W::rows::<S, E, Op>(s, call) };
    if call.stream {
        s.fence();
    }
}

/// A walk over the rows of a call: which source the rows are read through, and in what order
/// the sweeps of the rows run.
pub(crate) trait Walk {
    /// Runs `Op` over every row of `call`.
    ///
    /// # Safety
    /// As `api::norm_rows`, with the conditions under which [`walks`] picks this walk.
    unsafe fn rows<S: Simd, E: Element, Op: RowOp>(s: S, call: &NormCall<E>);
}

/// Plain calls (no residual add): [`plain_rows`], two-pass chunks.
pub(crate) struct PlainWalk;

impl Walk for PlainWalk {
    #[inline(always)]
    unsafe fn rows<S: Simd, E: Element, Op: RowOp>(s: S, call: &NormCall<E>) {
        // SAFETY: forwarded; `call.r` is null.
        unsafe { plain_rows::<S, E, Op, true>(s, call) }
    }
}

/// The f32 add forms with short rows and an `h` to build them in: LayerNorm's by groups
/// ([`by_groups`]) where the ISA holds the rows in registers, else by the row loop; RMSNorm's
/// by blocks ([`by_blocks`]).
pub(crate) struct Blocks<const BIAS: bool>;

impl Blocks<false> {
    /// Whether the call goes by blocks. (`blocks` implies the rest; restated, the rest lets
    /// the compiler drop the branches for long rows, streaming and a null `h` from the
    /// block's sweeps: without that those ran 15% slower at 256×64.)
    #[inline(always)]
    fn takes<E: Element>(call: &NormCall<E>) -> bool {
        E::IS_F32 && call.blocks && call.d <= BLOCKS_MAX_D && !call.stream && !call.h.is_null()
    }
}

impl<const BIAS: bool> Walk for Blocks<BIAS> {
    #[inline(always)]
    unsafe fn rows<S: Simd, E: Element, Op: RowOp>(s: S, call: &NormCall<E>) {
        // `walks` picks this walk only where `takes` holds: checked, not assumed, so that the
        // sweeps below drop their branches for long rows, streaming and a null `h`.
        if !Blocks::<false>::takes(call) {
            unreachable!("the blocks walk without its conditions");
        }
        // SAFETY: `call.bias` is null exactly when `!BIAS`; forwarded.
        unsafe {
            if !Op::GROUPS {
                by_blocks::<S, E, Op, BIAS>(s, call);
            } else if is_short::<S, AddResidual<S, E, BIAS>>(call.d) {
                // The blocks' add fused into the groups' first pass.
                by_groups::<S, E, Op, AddResidual<S, E, BIAS>>(s, call, call.h.cast_const());
            } else {
                // LayerNorm's rows too long for the groups (65 to 128 values on AVX2): the
                // row loop, measured faster than the blocks there.
                each_row_of::<S, E, Op, AddResidual<S, E, BIAS>>(s, call);
            }
        }
    }
}

/// The other add forms: the row loop over [`AddResidual`].
pub(crate) struct AddWalk<const BIAS: bool>;

impl<const BIAS: bool> Walk for AddWalk<BIAS> {
    #[inline(always)]
    unsafe fn rows<S: Simd, E: Element, Op: RowOp>(s: S, call: &NormCall<E>) {
        // SAFETY: forwarded; `call.r` is not null, `call.bias` is exactly when `BIAS`.
        unsafe { each_row_of::<S, E, Op, AddResidual<S, E, BIAS>>(s, call) }
    }
}

/// What is done with one row: a statistics sweep, then a normalize sweep, which the row loop
/// runs alongside the statistics sweep of the next row.
pub(crate) trait RowOp {
    /// What the statistics sweep leaves for the normalize sweep.
    type Stats: Copy + Default;
    /// The vector normalize sweep of a row, writing `E`, reading `h` from `V`.
    type Sweep<S: Simd, E: Element, V: Values<S>>: Pending<S>;
    /// The statistics sweep, from `src` (which also stores `h` for the f32 add forms), with
    /// `pending` run at the same offsets.
    ///
    /// # Safety
    /// `src` covers `call.d ≥ 1` values; so does the row of `pending`.
    unsafe fn stats<S: Simd, E: Element, R: Source<S>, P: Pending<S>>(
        s: S,
        call: &NormCall<E>,
        src: &R,
        pending: &P,
    ) -> Self::Stats;
    /// Whether short rows go by groups ([`by_groups`]): those of plain calls, and those of
    /// the f32 add forms that go by blocks.
    const GROUPS: bool = false;
    /// The first pass of short row `row` by groups ([`by_groups`], rows held in blocks of `B`
    /// vectors, `FULL` where they fill it): the sum of the row's values minus its shift `k`
    /// (its first value, [`Source::first`]) as a vector ([`group_row_sum`]). By default
    /// nothing: the default [`RowOp::group_stats`] gathers each row's statistics from its
    /// source as the row loop does.
    ///
    /// # Safety
    /// Row `row` lies in `call`, short, of `d ≤ B·LANES` values (equal where `FULL`).
    #[inline(always)]
    unsafe fn group_sum<S: Simd, E: Element, R: RowSource<S, E>, const B: usize, const FULL: bool>(
        s: S,
        call: &NormCall<E>,
        row: usize,
        k: f32,
    ) -> S::V {
        let _ = (call, row, k);
        s.splat(0.0)
    }
    /// The second pass of short row `row` by groups, read back at `again`, its shift `k` and
    /// its mean from the first ([`group_row_dev`]). By default nothing, as
    /// [`RowOp::group_sum`].
    ///
    /// # Safety
    /// Row `row` lies at `again`, as for [`RowOp::group_sum`], and its first pass has run.
    #[inline(always)]
    unsafe fn group_dev<S: Simd, E: Element, const B: usize, const FULL: bool>(
        s: S,
        call: &NormCall<E>,
        again: *const E,
        row: usize,
        k: f32,
        mean: (f64, f32),
    ) -> S::V {
        let _ = (call, again, row, k, mean);
        s.splat(0.0)
    }
    /// The statistics of the `n ≤ GROUP` short rows `r0..r0 + n` of `call` ([`is_short`]),
    /// each row's exactly as [`RowOp::stats`] gathers them from its source `R`: from the
    /// shifts `k` and means of their first passes and the `devs` of their second (zero past
    /// `n`); by default, one row after the other from `R`, as the row loop does.
    ///
    /// # Safety
    /// Rows `r0..r0 + n` lie in `call`, of `call.d ≥ 1` values, and they are short; their
    /// second passes have run, or by default, none of their values has been written yet.
    #[inline(always)]
    unsafe fn group_stats<S: Simd, E: Element, R: RowSource<S, E>>(
        s: S,
        call: &NormCall<E>,
        r0: usize,
        n: usize,
        k: &[f32; GROUP],
        means: &GroupMeans,
        devs: &[S::V; GROUP],
    ) -> [Self::Stats; GROUP] {
        let _ = (k, means, devs);
        let mut out = [Self::Stats::default(); GROUP];
        for (j, o) in out[..n].iter_mut().enumerate() {
            // SAFETY: row `r0 + j` lies in `call` and holds `d ≥ 1` values.
            *o = unsafe {
                let (src, _) = R::row(s, call, (r0 + j) * call.d);
                Self::stats(s, call, &src, &Idle)
            };
        }
        out
    }
    /// The vector normalize sweep of a row from the values `h` into `y`, or `None` if the row
    /// takes the f64 path.
    fn sweep<S: Simd, E: Element, V: Values<S>>(
        s: S,
        call: &NormCall<E>,
        st: Self::Stats,
        h: V,
        y: *mut E,
    ) -> Option<Self::Sweep<S, E, V>>;
    /// The f64 path of a row: normalizes it into `y` (and ends `h`, see [`Values::finish`]),
    /// returns its `(mean, rstd)`. Not inlined (it is cold), so it takes the call by value: a
    /// reference would put the call in memory for the whole row loop, whose every store could
    /// then overwrite it, and the loop would load its fields again after each.
    ///
    /// # Safety
    /// `h` gives the `call.d` values the statistics were gathered on, `y` covers as many writable
    /// ones (equal to where `h` reads if they overlap).
    unsafe fn wide<S: Simd, E: Element, V: Values<S>>(call: NormCall<E>, h: V, y: *mut E) -> (f32, f32);
    /// The per-row outputs `(mean, rstd)` of a row on the vector path.
    fn outputs(st: Self::Stats) -> (f32, f32);
}

/// Rows of the f32 add forms at most this long go by [`Blocks`] in calls that fit the
/// last-level cache: short rows gain from building `h` for many rows at once (RMSNorm's by
/// blocks, 1.1–1.6× the row loop at 64 to 128 values); longer rows gain less and not
/// everywhere, and beyond the last-level cache the blocks lose the row loop's overlap of
/// reading one row with computing another.
pub(super) const BLOCKS_MAX_D: usize = 128;

/// Rows of a block of [`by_blocks`]: as many as this many values hold (8 KiB of f32 per
/// operand, so that `x`, `r`, `h` and `y` of a block fit L1 together).
const ADD_BLOCK: usize = 2048;

/// RMSNorm's f32 add forms with short rows, a block of rows at a time: `h = α·x + (r + b)`
/// for the whole block (stored to `h`, which is the `h` output, `y` as scratch, or `x` in
/// place), then the plain row loop over the block's `h`, still in L1. The values, and every
/// operation on them, are those of the row loop of the add forms, so the bits are too; what
/// changes is that a short row's statistics no longer wait behind its add (see
/// [`BLOCKS_MAX_D`]).
///
/// # Safety
/// As `api::norm_rows`, with `call.blocks`: f32, `h` not null, `y` equal to `h` or distinct.
#[inline(always)]
unsafe fn by_blocks<S: Simd, E: Element, Op: RowOp, const BIAS: bool>(s: S, call: &NormCall<E>) {
    let d = call.d;
    let lanes = S::LANES;
    let block = (ADD_BLOCK / d).max(1);
    let mut r0 = 0;
    while r0 < call.rows {
        let n = block.min(call.rows - r0);
        for row in r0..r0 + n {
            // SAFETY: the row lies inside the `rows·d` elements of every operand; `h` is not
            // null, so the source stores each vector of `h` after reading its inputs.
            unsafe {
                let (src, _) = AddResidual::<S, E, BIAS>::row(s, call, row * d);
                let mut i = 0;
                while i + lanes <= d {
                    src.full(s, i);
                    i += lanes;
                }
                if i < d {
                    src.partial(s, i, d - i);
                }
            }
        }
        let at = |p: *mut f32| if p.is_null() { p } else { p.wrapping_add(r0) };
        // SAFETY: rows `r0..r0 + n` of `h` hold the block's `h`; `y` equals `h` (scratch) or
        // is distinct from it; `mean`, `rstd` are offset to the block's first row.
        let sub = unsafe {
            NormCall {
                x: call.h.add(r0 * d).cast_const(),
                r: std::ptr::null(),
                bias: std::ptr::null(),
                h: std::ptr::null_mut(),
                y: call.y.add(r0 * d),
                mean: at(call.mean),
                rstd: at(call.rstd),
                rows: n,
                blocks: false,
                // The block's `h`, just stored, is in L1.
                groups: true,
                ..*call
            }
        };
        // SAFETY: `sub` is a plain call over the block. (Welford chunks as the add forms' row
        // loop, or groups of short rows, which give the row loop's bits.)
        unsafe { plain_rows::<S, E, Op, false>(s, &sub) };
        r0 += n;
    }
}

/// The rows of a plain call (no residual add): by groups where they are short ([`by_groups`]),
/// else by the row loop or by columns ([`each_row_of`]), with two-pass chunks where
/// `TWO_PASS` and Welford chunks otherwise (see [`Source::TWO_PASS`]).
///
/// # Safety
/// As `api::norm_rows`, with `call.r` null.
#[inline(always)]
unsafe fn plain_rows<S: Simd, E: Element, Op: RowOp, const TWO_PASS: bool>(s: S, call: &NormCall<E>) {
    // SAFETY: forwarded.
    unsafe {
        if Op::GROUPS && call.groups && is_short::<S, Plain<E, TWO_PASS>>(call.d) {
            by_groups::<S, E, Op, Plain<E>>(s, call, call.x);
        } else {
            each_row_of::<S, E, Op, Plain<E, TWO_PASS>>(s, call);
        }
    }
}

/// Plain calls whose working set (`x` and `y`) is at most this many bytes go by groups
/// ([`by_groups`]) where their rows are short; the blocks of the add forms always do. Beyond it
/// the row loop, which overlaps the reads of one row with the work of others, keeps more loads
/// in flight.
pub(super) const GROUPS_MAX_BYTES: usize = 1 << 20;

/// Short rows ([`is_short`]), [`GROUP`] rows at a time, stage by stage: the first pass of
/// every row of a group ([`RowOp::group_sum`], from the source `R`, which reads `x`, or
/// builds `h` from `x` and `r` and stores it), their means; the second pass of every row
/// ([`RowOp::group_dev`], the rows read again at `again`: `x`, or the stored `h`), their
/// statistics ([`RowOp::group_stats`]); then the normalize sweep of each row. Each row's
/// statistics are exactly those [`RowOp::stats`] gathers for it alone, so the bits are those
/// of the row loop over `R`.
///
/// One row at a time, a short row is one chain of dependent steps (sum, reductions,
/// deviations, reductions, square root, division); by passes, each pass is as many independent
/// chains as rows, the reductions of a pass run together (`Simd::reduce_add_16`), and what
/// follows them runs as loops over arrays of the rows' results ([`GroupMeans`]), which the
/// compiler vectorizes: the square roots and divisions go a vector of rows at a time. RMSNorm,
/// one reduction a row with nothing waiting on it, is faster by the row loop and keeps it.
/// Rows that fill their block exactly are pipelined across groups ([`pipelined`]); rows with a
/// tail go one group at a time.
///
/// # Safety
/// As `api::norm_rows`, with short rows, and `R` a plain source with `again` equal to `call.x`,
/// or the f32 add source storing `h` with `again` equal to `call.h`.
#[inline(always)]
unsafe fn by_groups<S: Simd, E: Element, Op: RowOp, R: RowSource<S, E>>(s: S, call: &NormCall<E>, again: *const E) {
    // SAFETY: forwarded; the rows are short, so `short_block` gives their block.
    unsafe {
        match short_block::<S>(call.d) {
            (ACC, true) => pipelined::<S, E, Op, R, ACC>(s, call, again),
            (BLOCK, true) => pipelined::<S, E, Op, R, BLOCK>(s, call, again),
            (_, true) => pipelined::<S, E, Op, R, WIDE>(s, call, again),
            (b, false) => {
                let mut r0 = 0;
                while r0 < call.rows {
                    let n = GROUP.min(call.rows - r0);
                    let stats = match b {
                        ACC => group_stats_of::<S, E, Op, R, ACC>(s, call, again, r0, n),
                        BLOCK => group_stats_of::<S, E, Op, R, BLOCK>(s, call, again, r0, n),
                        _ => group_stats_of::<S, E, Op, R, WIDE>(s, call, again, r0, n),
                    };
                    for (j, &st) in stats[..n].iter().enumerate() {
                        sweep_row::<S, E, Op, R>(s, call, r0 + j, st);
                    }
                    r0 += n;
                }
            }
        }
    }
}

/// The statistics of the `n ≤ GROUP` rows `r0..r0 + n` of a group, one pass after the other
/// over the group, for rows with a tail in blocks of `B` vectors.
///
/// # Safety
/// As [`by_groups`], rows `r0..r0 + n` lying in `call`, none of them written yet, with
/// `d < B·LANES`.
#[inline(always)]
unsafe fn group_stats_of<S: Simd, E: Element, Op: RowOp, R: RowSource<S, E>, const B: usize>(
    s: S,
    call: &NormCall<E>,
    again: *const E,
    r0: usize,
    n: usize,
) -> [Op::Stats; GROUP] {
    // The rows' sums, then their deviations (zero past `n`).
    let (mut v, mut k) = ([s.splat(0.0); GROUP], [0.0; GROUP]);
    // SAFETY: by the caller's promise; each row's first pass runs before its second.
    unsafe {
        for (j, k) in k[..n].iter_mut().enumerate() {
            *k = shift::<S, E, R>(s, call, r0 + j);
        }
        for j in 0..n {
            v[j] = Op::group_sum::<S, E, R, B, false>(s, call, r0 + j, k[j]);
        }
        let means = group_means_of(s, call.d, &v);
        for j in 0..n {
            let mean = (means.mean[j], means.mc[j]);
            v[j] = Op::group_dev::<S, E, B, false>(s, call, again, r0 + j, k[j], mean);
        }
        Op::group_stats::<S, E, R>(s, call, r0, n, &k, &means, &v)
    }
}

/// [`by_groups`] pipelined, for rows that fill their block of `B` vectors: stage `t`
/// ([`stage`]) sweeps group `t`, runs the second passes of group `t + 1` and the first of
/// group `t + 2`.
///
/// # Safety
/// As [`by_groups`], with `d = B·LANES`.
#[inline(always)]
unsafe fn pipelined<S: Simd, E: Element, Op: RowOp, R: RowSource<S, E>, const B: usize>(
    s: S,
    call: &NormCall<E>,
    again: *const E,
) {
    let groups = call.rows.div_ceil(GROUP) as isize;
    // Rows in group `g`: none before the first or past the last.
    let n = |g: isize| {
        if (0..groups).contains(&g) {
            GROUP.min(call.rows - g as usize * GROUP)
        } else {
            0
        }
    };
    let mut p = Stages::<Op> {
        stats: [Op::Stats::default(); GROUP],
        k: [0.0; GROUP],
        means: GroupMeans::default(),
    };
    for t in -2..groups {
        let n = [n(t), n(t + 1), n(t + 2)];
        // SAFETY: each group's first passes run in the stage before its second, and those
        // in the stage before its sweeps, whose rows are disjoint from those of the passes
        // beside them.
        unsafe {
            if n == [GROUP; 3] {
                stage::<S, E, Op, R, B, true>(s, call, again, t, n, &mut p);
            } else {
                stage::<S, E, Op, R, B, false>(s, call, again, t, n, &mut p);
            }
        }
    }
}

/// What one stage of [`pipelined`] leaves for the next: the statistics of the group it
/// sweeps, and the shifts and means of the group whose second passes it runs.
struct Stages<Op: RowOp> {
    stats: [Op::Stats; GROUP],
    k: [f32; GROUP],
    means: GroupMeans,
}

/// Stage `t` of [`pipelined`] over the first `n[u]` rows of group `t + u`: for each row `j`,
/// the sweep of row `j` of group `t` (from `p.stats`), the second pass of row `j` of group
/// `t + 1` (from `p.k`, `p.means`), the first pass of row `j` of group `t + 2`; then the
/// statistics of group `t + 1` and the means of group `t + 2` into `p`, for the next stage.
/// `ALL` where every `n[u]` is [`GROUP`].
///
/// # Safety
/// As [`pipelined`]; the first passes of group `t + 1` have run in an earlier stage, and so
/// have both passes of group `t`.
#[inline(always)]
unsafe fn stage<S: Simd, E: Element, Op: RowOp, R: RowSource<S, E>, const B: usize, const ALL: bool>(
    s: S,
    call: &NormCall<E>,
    again: *const E,
    t: isize,
    n: [usize; 3],
    p: &mut Stages<Op>,
) {
    let zero = s.splat(0.0);
    let [n0, n1, n2] = if ALL { [GROUP; 3] } else { n };
    // The first row of group `t + u` (used only where that group has rows).
    let r = |u: isize| (t + u) as usize * GROUP;
    let (mut sums, mut devs, mut k) = ([zero; GROUP], [zero; GROUP], [0.0; GROUP]);
    // SAFETY: by the caller's promise.
    unsafe {
        for j in 0..GROUP {
            if j < n0 {
                sweep_row::<S, E, Op, R>(s, call, r(0) + j, p.stats[j]);
            }
            if j < n1 {
                let mean = (p.means.mean[j], p.means.mc[j]);
                devs[j] = Op::group_dev::<S, E, B, true>(s, call, again, r(1) + j, p.k[j], mean);
            }
            if j < n2 {
                k[j] = shift::<S, E, R>(s, call, r(2) + j);
                sums[j] = Op::group_sum::<S, E, R, B, true>(s, call, r(2) + j, k[j]);
            }
        }
        if n1 > 0 {
            p.stats = Op::group_stats::<S, E, R>(s, call, r(1), n1, &p.k, &p.means, &devs);
        }
    }
    if n2 > 0 {
        p.means = group_means_of(s, call.d, &sums);
        p.k = k;
    }
}

/// The shift of row `row` of `call` through `R`: its first value, as [`RowOp::stats`] takes it.
///
/// # Safety
/// Row `row` lies in `call`, of `d ≥ 1` values.
#[inline(always)]
unsafe fn shift<S: Simd, E: Element, R: RowSource<S, E>>(s: S, call: &NormCall<E>, row: usize) -> f32 {
    // SAFETY: by the caller's promise.
    unsafe { R::row(s, call, row * call.d).0.first() }
}

/// The normalize sweep of row `row` of `call` from its statistics `st` (or its f64 path),
/// and its per-row outputs.
///
/// # Safety
/// Row `row` lies in `call`; `st` are its statistics, from its values through `R`, and
/// none of them has been written since.
#[inline(always)]
unsafe fn sweep_row<S: Simd, E: Element, Op: RowOp, R: RowSource<S, E>>(
    s: S,
    call: &NormCall<E>,
    row: usize,
    st: Op::Stats,
) {
    let off = row * call.d;
    // SAFETY: by the caller's promise; the sweep reads `h` before writing `y` at each offset.
    unsafe {
        let (_, h) = R::row(s, call, off);
        let y = call.y.add(off);
        match Op::sweep(s, call, st, h, y) {
            Some(sweep) => {
                sweep.run(s, 0, call.d);
                write_stats(call, row, Op::outputs(st));
            }
            None => write_stats(call, row, Op::wide::<S, E, R::Back>(*call, h, y)),
        }
    }
}

/// The rows of a call through the source `R` where they do not go by groups or blocks:
/// LayerNorm's long rows by columns in calls that fit, on 16 lanes ([`by_columns`]), else
/// [`each_row`], with a loop of its own for LayerNorm's short rows ([`is_short`]) and one for
/// its long rows, so that the long rows' loop carries no code for the short rows' blocks.
///
/// # Safety
/// As `api::norm_rows`, with `R` the call's source (plain, or the add source of [`AddWalk`]).
#[inline(always)]
unsafe fn each_row_of<S: Simd, E: Element, Op: RowOp, R: RowSource<S, E>>(s: S, call: &NormCall<E>) {
    // SAFETY: forwarded.
    unsafe {
        if Op::GROUPS && call.groups && call.d >= COLUMNS_MIN_D && S::LANES >= COLUMNS_MIN_LANES {
            by_columns::<S, E, Op, R>(s, call);
        } else if Op::GROUPS && is_short::<S, R>(call.d) {
            each_row::<S, E, Op, R, true>(s, call);
        } else {
            each_row::<S, E, Op, R, false>(s, call);
        }
    }
}

/// LayerNorm's rows at least this long go by columns ([`by_columns`]) in calls of at most
/// [`GROUPS_MAX_BYTES`] (every operand counted), plain and add forms: in the row loop such a
/// row, the previous one, its `y`, `γ` and `β` overflow L1, so the normalize sweep would read
/// `γ` and `β` from L2 for every row. Shorter rows are read from L1 by the row loop already.
const COLUMNS_MIN_D: usize = 4096;

/// By columns only where a vector holds at least this many f32 (AVX-512): measured A/B, the
/// row loop was faster on AVX2 at every shape that goes by columns, by columns faster on
/// AVX-512. A likely reason, not measured apart: with 8 lanes the sweep issues twice the
/// instructions per value, the L2 reads of `γ` and `β` hide behind them, and by columns only
/// adds the re-read of each row from L2.
const COLUMNS_MIN_LANES: usize = 16;

/// Values of each row normalized at a time by [`by_columns`]: `γ` and `β` for them (8 KiB)
/// stay in L1 across the rows.
const COLUMN_SPAN: usize = 1024;

/// Long rows ([`COLUMNS_MIN_D`]) in a call that fits L2, [`GROUP`] rows at a time: the
/// statistics of each row, then the normalize sweeps of the rows by columns of
/// [`COLUMN_SPAN`] values, all the rows of the group over one column before the next, so
/// that `γ` and `β` are read from L1 by all but the first row. The bits are those of the
/// row loop: the same statistics, and the same sweep of each value. Beyond 1 MiB the row loop
/// stays: by columns gives up its overlap of reading one row with writing another.
///
/// # Safety
/// As `api::norm_rows`, with `R` the source the row loop would read the call through.
#[inline(always)]
unsafe fn by_columns<S: Simd, E: Element, Op: RowOp, R: RowSource<S, E>>(s: S, call: &NormCall<E>) {
    let d = call.d;
    let mut r0 = 0;
    while r0 < call.rows {
        let n = GROUP.min(call.rows - r0);
        let mut stats = [Op::Stats::default(); GROUP];
        for (j, st) in stats[..n].iter_mut().enumerate() {
            // SAFETY: row `r0 + j` lies in `call`; no `y` of the group is written yet (the
            // source of an add form stores the row's `h` as it reads it, as in the row loop).
            *st = unsafe {
                let (src, _) = R::row(s, call, (r0 + j) * d);
                Op::stats(s, call, &src, &Idle)
            };
        }
        let mut c = 0;
        while c < d {
            let m = COLUMN_SPAN.min(d - c);
            for (j, &st) in stats[..n].iter().enumerate() {
                let off = (r0 + j) * d;
                // SAFETY: the row lies in `call`; its sweep reads `h` before writing `y` at
                // each offset, within `c..c + m ≤ d`.
                unsafe {
                    let (_, h) = R::row(s, call, off);
                    if let Some(sweep) = Op::sweep(s, call, st, h, call.y.add(off)) {
                        sweep.run(s, c, m);
                    }
                }
            }
            c += m;
        }
        for (j, &st) in stats[..n].iter().enumerate() {
            let (row, off) = (r0 + j, (r0 + j) * d);
            // SAFETY: as above; a row on the f64 path was not swept, and its values are intact.
            unsafe {
                let (_, h) = R::row(s, call, off);
                let y = call.y.add(off);
                match Op::sweep(s, call, st, h, y) {
                    Some(_) => write_stats(call, row, Op::outputs(st)),
                    None => write_stats(call, row, Op::wide::<S, E, R::Back>(*call, h, y)),
                }
            }
        }
        r0 += n;
    }
}

/// The row loop, pipelined: the normalize sweep of row `r − 1` runs inside the statistics sweep
/// of row `r`. Both sweeps of a row still see it once each; only their order across rows
/// changes. `SHORT` where the rows are LayerNorm's short rows.
///
/// # Safety
/// As `api::norm_rows`, and for LayerNorm (`Op::GROUPS`) `SHORT` is whether the rows are short.
#[inline(always)]
unsafe fn each_row<S: Simd, E: Element, Op: RowOp, R: RowSource<S, E>, const SHORT: bool>(s: S, call: &NormCall<E>) {
    // Checked, not assumed: past it, the statistics drop the path of the other row length.
    if Op::GROUPS && is_short::<S, R>(call.d) != SHORT {
        unreachable!("a row loop for the other row length");
    }
    let d = call.d;
    // SAFETY (below): every row lies inside the `rows·d` elements of every operand, and rows are
    // disjoint, so the sweep of one row never touches what the other reads or writes.
    let (src, h) = unsafe { R::row(s, call, 0) };
    let mut prev = (unsafe { Op::stats(s, call, &src, &Idle) }, h, call.y);
    for row in 1..call.rows {
        let off = row * d;
        let (src, h) = unsafe { R::row(s, call, off) };
        let (pst, ph, py) = prev;
        let st = match Op::sweep(s, call, pst, ph, py) {
            Some(sweep) => {
                let st = unsafe { Op::stats(s, call, &src, &sweep) };
                write_stats(call, row - 1, Op::outputs(pst));
                st
            }
            None => {
                write_stats(call, row - 1, unsafe { Op::wide::<S, E, R::Back>(*call, ph, py) });
                unsafe { Op::stats(s, call, &src, &Idle) }
            }
        };
        prev = (st, h, unsafe { call.y.add(off) });
    }
    let (pst, ph, py) = prev;
    match Op::sweep(s, call, pst, ph, py) {
        Some(sweep) => {
            unsafe { sweep.run(s, 0, d) };
            write_stats(call, call.rows - 1, Op::outputs(pst));
        }
        None => write_stats(call, call.rows - 1, unsafe { Op::wide::<S, E, R::Back>(*call, ph, py) }),
    }
}

/// Writes a row's `(mean, rstd)` to the per-row outputs the call has.
#[inline(always)]
fn write_stats<E>(call: &NormCall<E>, row: usize, (mean, rstd): (f32, f32)) {
    debug_assert!(row < call.rows);
    // SAFETY: `row < rows`, and `mean`, `rstd` hold `rows` entries when not null.
    unsafe {
        if !call.mean.is_null() {
            *call.mean.add(row) = mean;
        }
        if !call.rstd.is_null() {
            *call.rstd.add(row) = rstd;
        }
    }
}
