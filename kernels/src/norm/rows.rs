//! The calls of LayerNorm and RMSNorm, plain and with the residual add: their validation,
//! and the row loop that runs a norm over them.

use std::marker::PhantomData;

use super::plan::{plan, HOutput, NormForm, NormPlan};
use super::source::{write_span, AddResidual, Output, Plain, Source};
use super::stats::{short_vectors, Idle, Pending, ACC};
use crate::dispatch::Kernels;
use crate::element::{Element, PerElement};
use crate::error::Error;
use crate::simd::Simd;

/// The residual add in front of the norm of [`add_layer_norm`](crate::add_layer_norm()) and
/// [`add_rms_norm`](crate::add_rms_norm()): `h = α·x + (r + b)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Residual<'a> {
    /// Scales the residual stream `x`; DeepNorm uses `α = (2N)^¼` for an N-layer encoder.
    /// Must be finite. Default 1.
    pub alpha: f32,
    /// A bias of length `d` added to `r` (the last bias of the sublayer, fused here), shared by
    /// all rows.
    pub bias: Option<&'a [f32]>,
}

impl Default for Residual<'_> {
    fn default() -> Self {
        Residual { alpha: 1.0, bias: None }
    }
}

/// Optional per-row statistics written by the `_with_stats` forms (per channel for
/// BatchNorm training): each slice has one entry per row.
#[derive(Debug, Default)]
pub struct RowStats<'a> {
    /// The mean `μ`, rounded to f32.
    pub mean: Option<&'a mut [f32]>,
    /// `rstd = 1/√(σ² + ε)`, rounded to f32.
    pub rstd: Option<&'a mut [f32]>,
}

/// `Error::Param` naming `eps` unless it is finite and positive.
pub(crate) fn check_eps(eps: f32) -> Result<(), Error> {
    if eps > 0.0 && eps.is_finite() {
        Ok(())
    } else {
        Err(Error::param("eps", "a finite number > 0", eps))
    }
}

/// `Error::Shape` naming `arg` unless `len == want`.
pub(crate) fn check_len(arg: &'static str, len: usize, want: usize, what: &str) -> Result<(), Error> {
    if len == want {
        Ok(())
    } else {
        Err(Error::shape(arg, format!("length {want} ({what})"), len))
    }
}

/// The optional slice `v` has length `want`.
pub(crate) fn check_opt(arg: &'static str, v: Option<&[f32]>, want: usize, what: &str) -> Result<(), Error> {
    v.map_or(Ok(()), |v| check_len(arg, v.len(), want, what))
}

/// The pointer of an optional slice, null when absent.
pub(crate) fn ptr_of(v: Option<&[f32]>) -> *const f32 {
    v.map_or(std::ptr::null(), |v| v.as_ptr())
}

/// The pointer of an optional output slice, null when absent.
pub(crate) fn mut_ptr_of(v: Option<&mut [f32]>) -> *mut f32 {
    v.map_or(std::ptr::null_mut(), |v| v.as_mut_ptr())
}

/// The arguments of a LayerNorm or RMSNorm call before validation.
pub(crate) struct NormArgs<'a, 's, E> {
    /// `x` and its length.
    pub x: (*const E, usize),
    /// `out` and its length (`x` in place).
    pub y: (*mut E, usize),
    /// The residual branch `r` with the add's parameters; `None` for the plain forms.
    pub add: Option<(&'a [E], Residual<'a>)>,
    /// The `h` output and its length, if asked for (`x` itself in the in-place add forms).
    pub h: Option<(*mut E, usize)>,
    pub d: usize,
    /// `γ` (or RMSNorm's gain) and the name of its argument.
    pub gamma: (&'static str, Option<&'a [f32]>),
    pub beta: Option<&'a [f32]>,
    pub eps: f32,
    pub stats: RowStats<'s>,
}

/// The LayerNorm and RMSNorm calls of every storage type.
pub(crate) struct Calls;

impl PerElement for Calls {
    type Of<E: Element> = NormCall<E>;
}

/// A validated LayerNorm or RMSNorm call, in raw form.
#[derive(Clone, Copy)]
pub(crate) struct NormCall<E> {
    pub x: *const E,
    /// The residual branch; null for the plain forms.
    pub r: *const E,
    /// The bias of the residual add (length `d`); null for none.
    pub bias: *const f32,
    pub alpha: f32,
    /// Where the add forms keep `h` ([`NormPlan::keep_h`]: the `h` output, `y` or `x`), or
    /// else the `h` output; null for neither.
    pub h: *mut E,
    pub y: *mut E,
    /// `γ` (or RMSNorm's gain), `β`; null for none.
    pub gamma: *const f32,
    pub beta: *const f32,
    /// Per-row outputs; null for none.
    pub mean: *mut f32,
    pub rstd: *mut f32,
    pub rows: usize,
    pub d: usize,
    pub eps: f32,
    pub plan: NormPlan,
}

/// The number of rows of a `[rows, d]` matrix stored in `len` values.
pub(crate) fn rows_of(len: usize, d: usize) -> Result<usize, Error> {
    if d == 0 {
        return if len == 0 {
            Ok(0)
        } else {
            Err(Error::shape("d", format!("a row length dividing x.len() = {len}"), "0"))
        };
    }
    if !len.is_multiple_of(d) {
        return Err(Error::shape(
            "x",
            format!("a length that is a multiple of d = {d}"),
            len,
        ));
    }
    Ok(len / d)
}

impl Kernels {
    /// Validates `a` (every length and parameter, before anything is written) and plans it.
    pub(crate) fn norm_call<E: Element>(&self, a: NormArgs<E>) -> Result<NormCall<E>, Error> {
        let (x, len) = a.x;
        let rows = rows_of(len, a.d)?;
        check_len("out", a.y.1, len, "as x")?;
        let (mut r, mut bias, mut alpha) = (std::ptr::null(), std::ptr::null(), 1.0);
        if let Some((rr, res)) = a.add {
            check_len("r", rr.len(), len, "as x")?;
            check_opt("bias", res.bias, a.d, "d")?;
            if !res.alpha.is_finite() {
                return Err(Error::param("alpha", "a finite number", res.alpha));
            }
            (r, bias, alpha) = (rr.as_ptr(), ptr_of(res.bias), res.alpha);
        }
        if let Some((_, h_len)) = a.h {
            check_len("h", h_len, len, "as x")?;
        }
        check_opt(a.gamma.0, a.gamma.1, a.d, "d")?;
        check_opt("beta", a.beta, a.d, "d")?;
        check_eps(a.eps)?;
        let RowStats { mean, rstd } = a.stats;
        check_opt("mean", mean.as_deref(), rows, "rows")?;
        check_opt("rstd", rstd.as_deref(), rows, "rows")?;
        let form = match (a.add.is_some(), a.h) {
            (false, _) => NormForm::Plain {
                inplace: a.y.0.cast_const() == x,
            },
            (true, None) => NormForm::Add { h: HOutput::None },
            (true, Some((h, _))) if h.cast_const() == x => NormForm::Add { h: HOutput::InPlace },
            (true, Some(_)) => NormForm::Add { h: HOutput::Separate },
        };
        let plan = plan::<E>(form, rows, a.d, self.isa(), self.caches(), self.stores());
        let h = match a.h {
            Some((h, _)) => h,
            // Without an `h` output, `y` holds the kept `h` between the sweeps.
            None if a.add.is_some() && plan.keep_h => a.y.0,
            None => std::ptr::null_mut(),
        };
        Ok(NormCall {
            x,
            r,
            bias,
            alpha,
            h,
            y: a.y.0,
            gamma: ptr_of(a.gamma.1),
            beta: ptr_of(a.beta),
            mean: mut_ptr_of(mean),
            rstd: mut_ptr_of(rstd),
            rows,
            d: a.d,
            eps: a.eps,
            plan,
        })
    }
}

/// What a norm computes of a row: statistics, then `y` from `h` a vector at a time.
pub(crate) trait RowOp: 'static {
    /// What the statistics leave for the normalize sweep, NaN-marked where the row takes the
    /// f64 path (a NaN or ±∞ in it, an f32 overflow of its statistics).
    type Stats: Copy + Default;
    /// The same, as the normalize sweep holds it (splat).
    type Consts<S: Simd>: Copy;
    /// Whether a short row's statistics take a second pass ([`RowOp::second`]).
    const TWO_PASS: bool;
    /// The statistics of the row `src` of `call` (longer than [`short_vectors`]), with
    /// `pending` run behind the reads.
    ///
    /// # Safety
    /// `src` covers `call.d` values, and `pending`'s row as many.
    unsafe fn stats<S: Simd, E: Element, R: Source<S>, P: Pending<S>, const PREFETCH: bool>(
        s: S,
        call: &NormCall<E>,
        src: &R,
        pending: &P,
    ) -> Self::Stats;
    /// The first pass of a short row of `d ≤ B·LANES` values shifted by `k` (`FULL`: equal):
    /// a vector whose lanes sum to what [`RowOp::short_stats`] takes.
    ///
    /// # Safety
    /// `src` covers `d` values, none stored yet.
    unsafe fn first<S: Simd, R: Source<S>, const B: usize, const FULL: bool>(s: S, src: &R, d: usize, k: f32) -> S::V;
    /// The second pass of the same row, `first` the lane sum of the first.
    ///
    /// # Safety
    /// As [`RowOp::first`], which has run.
    unsafe fn second<S: Simd, R: Source<S>, const B: usize, const FULL: bool>(
        s: S,
        src: &R,
        d: usize,
        k: f32,
        first: f32,
    ) -> S::V;
    /// The statistics of a short row from its shift and the lane sums of its passes.
    fn short_stats<E>(call: &NormCall<E>, k: f32, first: f32, second: f32) -> Self::Stats;
    /// Whether the row goes the vector path.
    fn fast(st: &Self::Stats) -> bool;
    fn consts<S: Simd>(s: S, st: Self::Stats) -> Self::Consts<S>;
    /// `y[i..i + n]` from `h[i..i + n]`.
    ///
    /// # Safety
    /// `i + n ≤ call.d`.
    unsafe fn y<S: Simd, E>(s: S, call: &NormCall<E>, c: &Self::Consts<S>, h: S::V, i: usize, n: usize) -> S::V;
    /// The f64 path of the row `src`: normalizes it into `y` and returns its per-row outputs.
    ///
    /// # Safety
    /// `src` gives `call.d` values, `y` covers as many (equal to where `src` reads if they
    /// overlap).
    unsafe fn wide<S: Simd, E: Element, R: Source<S>>(call: &NormCall<E>, src: &R, y: *mut E) -> (f32, f32);
    /// The per-row outputs `(mean, rstd)` of a row on the vector path.
    fn outputs(st: Self::Stats) -> (f32, f32);
}

/// A row source over the rows of a call.
pub(crate) trait RowSource<S: Simd, E>: Source<S> {
    /// Row `row` of `call`.
    ///
    /// # Safety
    /// `row < call.rows`.
    unsafe fn row(s: S, call: &NormCall<E>, row: usize) -> Self;
}

/// The row after `off` (or the same row for the last one), for the prefetches.
fn ahead<E>(call: &NormCall<E>, p: *const E, off: usize) -> *const E {
    let next = off + call.d;
    p.wrapping_add(if next < call.rows * call.d { next } else { off })
}

impl<S: Simd, E: Element> RowSource<S, E> for Plain<E> {
    #[inline(always)]
    unsafe fn row(_: S, call: &NormCall<E>, row: usize) -> Self {
        let off = row * call.d;
        Plain {
            // SAFETY: the row lies in `x`.
            x: unsafe { call.x.add(off) },
            ahead: ahead(call, call.x, off),
        }
    }
}

impl<S: Simd, E: Element, const BIAS: bool> RowSource<S, E> for AddResidual<S, E, BIAS> {
    #[inline(always)]
    unsafe fn row(s: S, call: &NormCall<E>, row: usize) -> Self {
        let off = row * call.d;
        // SAFETY: the row lies in `x`, `r` and `h` (unless null, then never offset).
        unsafe {
            AddResidual {
                x: call.x.add(off),
                r: call.r.add(off),
                b: call.bias,
                h: if call.h.is_null() { call.h } else { call.h.add(off) },
                keep: call.plan.keep_h,
                stream_h: call.plan.stream,
                alpha: call.alpha,
                alpha_v: s.splat(call.alpha),
                ahead: [ahead(call, call.x, off), ahead(call, call.r, off)],
            }
        }
    }
}

/// The normalize sweep of a row: a [`Pending`] run behind the next row's statistics.
struct Sweep<'a, S: Simd, E, Op: RowOp, R> {
    call: &'a NormCall<E>,
    c: Op::Consts<S>,
    src: R,
    y: *mut E,
}

impl<S: Simd, E: Element, Op: RowOp, R: Source<S>> Output<S> for Sweep<'_, S, E, Op, R> {
    #[inline(always)]
    unsafe fn get(&self, s: S, i: usize, n: usize) -> S::V {
        // SAFETY: `i + n ≤ d`; `h[i..]` is read before `y[i..]` is written.
        unsafe { Op::y(s, self.call, &self.c, self.src.again(s, i, n), i, n) }
    }
}

impl<S: Simd, E: Element, Op: RowOp, R: Source<S>> Pending<S> for Sweep<'_, S, E, Op, R> {
    #[inline(always)]
    unsafe fn run(&self, s: S, i: usize, n: usize) {
        let (d, stream) = (self.call.d, self.call.plan.stream);
        // SAFETY: forwarded; `y` covers the row.
        unsafe {
            write_span(s, self, self.y, d, i, n, stream);
            self.src.write_h(s, d, i, n);
        }
    }
}

/// The rows of `call` through the source `R`, each row's normalize sweep run behind the
/// statistics of the next: both sweeps still see each row once, but reading one row
/// overlaps writing the other, and the chain that ends a row's statistics (reductions,
/// square root, division) overlaps the sweep of the row before.
///
/// # Safety
/// `call` is validated: `x`, `y` (and `r`, and `h` unless null) cover `rows·d` elements,
/// `gamma`, `beta`, `bias` are null or cover `d`, `mean`, `rstd` null or cover `rows`; `y` and
/// `h` overlap `x` only by being equal to it.
#[inline(always)]
unsafe fn each_row<S: Simd, E: Element, Op: RowOp, R: RowSource<S, E>, const PREFETCH: bool>(s: S, call: &NormCall<E>) {
    let d = call.d;
    // The row before: its source, statistics and `y`.
    let mut prev: Option<(R, Op::Stats, *mut E)> = None;
    // SAFETY (below): every row lies in every operand, and rows are disjoint, so the sweep of
    // one row never touches what the statistics of the next read or write.
    for row in 0..call.rows {
        let src = unsafe { R::row(s, call, row) };
        let st = match prev {
            Some((psrc, pst, y)) if Op::fast(&pst) => {
                let c = Op::consts(s, pst);
                let sweep = Sweep::<S, E, Op, R> { call, c, src: psrc, y };
                let st = unsafe { Op::stats::<S, E, R, _, PREFETCH>(s, call, &src, &sweep) };
                write_stats(call, row - 1, Op::outputs(pst));
                st
            }
            Some((psrc, _, y)) => {
                write_stats(call, row - 1, unsafe { Op::wide(call, &psrc, y) });
                unsafe { Op::stats::<S, E, R, _, PREFETCH>(s, call, &src, &Idle) }
            }
            None => unsafe { Op::stats::<S, E, R, _, PREFETCH>(s, call, &src, &Idle) },
        };
        prev = Some((src, st, unsafe { call.y.add(row * d) }));
    }
    if let Some((src, st, y)) = prev {
        // SAFETY: as above.
        unsafe { sweep_row::<S, E, Op, R>(s, call, call.rows - 1, src, st, y) };
    }
}

/// The normalize sweep of row `row` (from `src`, into `y`) with its statistics `st`, or its
/// f64 path, and its per-row outputs.
///
/// # Safety
/// As [`each_row`]; `st` are the row's statistics, and nothing of it written since.
#[inline(always)]
unsafe fn sweep_row<S: Simd, E: Element, Op: RowOp, R: Source<S>>(
    s: S,
    call: &NormCall<E>,
    row: usize,
    src: R,
    st: Op::Stats,
    y: *mut E,
) {
    // SAFETY: forwarded; the sweep reads `h` before writing `y` at each offset.
    unsafe {
        if Op::fast(&st) {
            let c = Op::consts(s, st);
            Sweep::<S, E, Op, R> { call, c, src, y }.run(s, 0, call.d);
            write_stats(call, row, Op::outputs(st));
        } else {
            write_stats(call, row, Op::wide(call, &src, y));
        }
    }
}

/// Rows at a time of [`by_groups`]: as many as [`Simd::reduce_add_16`] reduces.
const GROUP: usize = 16;

/// Short rows (at most [`short_vectors`] vectors), by groups of [`GROUP`] rows, pass by pass
/// and pipelined: each stage runs, row by row, the normalize sweep of a row of one group, the
/// second pass of that row of the next group and the first pass of that of the group after,
/// then reduces the lanes of the passes' sums sixteen rows at once and finishes the
/// statistics of a group in vectors across rows. One row at a time, a short row is one chain
/// of dependent steps (sums, reductions, square root, division) longer than its loads and
/// stores; pipelined by groups, every step has independent work beside it. Each row's results
/// depend on its own values only, whatever its group.
///
/// # Safety
/// As [`each_row`], with `call.d` at most [`short_vectors`] vectors.
#[inline(always)]
unsafe fn by_groups<S: Simd, E: Element, Op: RowOp, R: RowSource<S, E>>(s: S, call: &NormCall<E>) {
    let (d, lanes) = (call.d, S::LANES);
    // SAFETY: forwarded; each block holds the rows (exactly where `FULL`).
    unsafe {
        if d == ACC * lanes {
            groups::<S, E, Op, R, ACC, true>(s, call)
        } else if d < ACC * lanes {
            groups::<S, E, Op, R, ACC, false>(s, call)
        } else if d == 2 * ACC * lanes {
            groups::<S, E, Op, R, { 2 * ACC }, true>(s, call)
        } else if d < 2 * ACC * lanes {
            groups::<S, E, Op, R, { 2 * ACC }, false>(s, call)
        } else if d == 4 * ACC * lanes {
            groups::<S, E, Op, R, { 4 * ACC }, true>(s, call)
        } else {
            groups::<S, E, Op, R, { 4 * ACC }, false>(s, call)
        }
    }
}

/// [`by_groups`] with the rows held in `B` vectors (`FULL`: filling them).
///
/// # Safety
/// As [`by_groups`], with `d ≤ B·LANES` (equal where `FULL`).
#[inline(always)]
unsafe fn groups<S: Simd, E: Element, Op: RowOp, R: RowSource<S, E>, const B: usize, const FULL: bool>(
    s: S,
    call: &NormCall<E>,
) {
    let (d, zero) = (call.d, s.splat(0.0));
    let count = call.rows.div_ceil(GROUP);
    // The rows of group `g` (none past the last).
    let rows = |g: usize| if g < count { GROUP.min(call.rows - g * GROUP) } else { 0 };
    // Carried from stage to stage: the shifts and first lane sums of the group whose second
    // pass comes next, the statistics of the group whose sweeps come next.
    let (mut k1, mut first1) = ([0.0; GROUP], [0.0; GROUP]);
    let mut st2 = [Op::Stats::default(); GROUP];
    // Stage `t`: the sweeps of group `t − 2`, the second passes of group `t − 1`, the first
    // passes of group `t`, row by row.
    for t in 0..count + 2 {
        let (n0, n1, n2) = (rows(t), rows(t.wrapping_sub(1)), rows(t.wrapping_sub(2)));
        let (mut sums, mut devs, mut k0) = ([zero; GROUP], [zero; GROUP], [0.0; GROUP]);
        // SAFETY: rows lie in the call; a row's first pass runs before anything of it is
        // written but its kept `h`, its second pass a stage later, its sweep (reading `h`
        // before writing `y` at each offset) a stage after that; the rows of the three groups
        // of a stage are disjoint.
        unsafe {
            for j in 0..GROUP {
                if j < n2 {
                    let row = (t - 2) * GROUP + j;
                    sweep_row::<S, E, Op, R>(s, call, row, R::row(s, call, row), st2[j], call.y.add(row * d));
                }
                if Op::TWO_PASS && j < n1 {
                    let src = R::row(s, call, (t - 1) * GROUP + j);
                    devs[j] = Op::second::<S, R, B, FULL>(s, &src, d, k1[j], first1[j]);
                }
                if j < n0 {
                    let src = R::row(s, call, t * GROUP + j);
                    k0[j] = src.first();
                    sums[j] = Op::first::<S, R, B, FULL>(s, &src, d, k0[j]);
                }
            }
        }
        if n1 > 0 {
            let mut second = [0.0; GROUP];
            if Op::TWO_PASS {
                s.reduce_add_16(&devs, &mut second);
            }
            for j in 0..GROUP {
                st2[j] = Op::short_stats(call, k1[j], first1[j], second[j]);
            }
        }
        if n0 > 0 {
            s.reduce_add_16(&sums, &mut first1);
            k1 = k0;
        }
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

/// One instance of a norm over the rows of a call, a source and an op: a dispatch operation,
/// compiled as a function of its own per ISA.
struct Instance<E, Op, R> {
    call: NormCall<E>,
    instance: PhantomData<(Op, R)>,
}

impl<E: Element, Op: RowOp, R: 'static> crate::dispatch::Op for Instance<E, Op, R>
where
    R: RowSourceFamily<E>,
{
    type Output = ();

    #[inline(always)]
    unsafe fn eval<S: Simd>(self, s: S) {
        let call = &self.call;
        // SAFETY: the call was validated (see `run`).
        unsafe {
            if call.plan.groups && call.d <= short_vectors(S::REGISTERS) * S::LANES {
                by_groups::<S, E, Op, R::Of<S>>(s, call);
            } else if call.plan.prefetch {
                each_row::<S, E, Op, R::Of<S>, true>(s, call);
            } else {
                each_row::<S, E, Op, R::Of<S>, false>(s, call);
            }
        }
        if call.plan.stream {
            s.fence();
        }
    }
}

/// A row source for every ISA: names the source of an [`Instance`] before the ISA is known.
trait RowSourceFamily<E> {
    type Of<S: Simd>: RowSource<S, E>;
}

struct PlainRows;
struct AddRows<const BIAS: bool>;

impl<E: Element> RowSourceFamily<E> for PlainRows {
    type Of<S: Simd> = Plain<E>;
}

impl<E: Element, const BIAS: bool> RowSourceFamily<E> for AddRows<BIAS> {
    type Of<S: Simd> = AddResidual<S, E, BIAS>;
}

/// Runs `Op` over the rows of `call` on the ISA of `k`, with the source the call asks for.
///
/// # Safety
/// `call` comes from [`Kernels::norm_call`], and the slices it was made from are alive and
/// not otherwise borrowed.
#[inline(always)]
pub(crate) unsafe fn run<E: Element, Op: RowOp>(k: &Kernels, call: &NormCall<E>) {
    if call.rows == 0 {
        return;
    }
    fn instance<E: Element, Op, R>(call: &NormCall<E>) -> Instance<E, Op, R> {
        Instance {
            call: *call,
            instance: PhantomData,
        }
    }
    // SAFETY: forwarded; `r` is null exactly for the plain forms, `bias` exactly where absent.
    unsafe {
        if call.r.is_null() {
            k.run(instance::<E, Op, PlainRows>(call));
        } else if call.bias.is_null() {
            k.run(instance::<E, Op, AddRows<false>>(call));
        } else {
            k.run(instance::<E, Op, AddRows<true>>(call));
        }
    }
}
