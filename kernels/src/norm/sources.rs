//! What a row's sweeps read and write: the sources of a row's values (read as they are, or
//! built as `α·x + (r + b)` and stored on the way), where the normalize sweep reads them back,
//! and the stores of its outputs (ordinary, or streaming around the caches).

use super::call::NormCall;
use crate::simd::Simd;
use crate::Element;

/// Where the statistics sweep gets a row's values `h` from: read from `x`, or built as
/// `α·x + (r + b)` (and, for f32, stored on the way).
pub(crate) trait Source<S: Simd> {
    /// Whether the statistics sweep reads each chunk twice (its sum, then its squared
    /// deviations from its mean, the second pass from L1, calling [`Source::full`] again), or
    /// runs the per-lane Welford recurrence over it once (see the module docs). Two passes
    /// only where `full` is a bare load.
    const TWO_PASS: bool;
    /// `h₀`, computed exactly as the vector lanes compute it.
    ///
    /// # Safety
    /// The row is not empty.
    unsafe fn first(&self) -> f32;
    /// `h[i..i + LANES]`.
    ///
    /// # Safety
    /// `i + LANES ≤ d`.
    unsafe fn full(&self, s: S, i: usize) -> S::V;
    /// `h[i..i + n]` for `n < LANES`; the other lanes are unspecified.
    ///
    /// # Safety
    /// `i + n ≤ d`.
    unsafe fn partial(&self, s: S, i: usize, n: usize) -> S::V;
    /// Whether this source prefetches the inputs of the next row.
    fn prefetches(&self) -> bool;
    /// Prefetches element `i` of the inputs of the next row, into the level-2 cache where `l2`
    /// and into the level-1 otherwise (LayerNorm's chunk loops ask for the level-2, RMSNorm's
    /// for the level-1: see [`PREFETCH_MIN`](super::stats::PREFETCH_MIN)); only where
    /// [`Source::prefetches`]. (The sweeps test that once per chunk, not once per line:
    /// measured on AVX2, the test in the Welford step took 4 of its 36 instructions.)
    fn prefetch(&self, s: S, i: usize, l2: bool);
}

/// A [`Source`] over the rows of a [`NormCall`], with what the normalize sweep of a row reads.
pub(crate) trait RowSource<S: Simd, E: Element>: Source<S> + Sized {
    /// Where the normalize sweep gets the row's `h`.
    type Back: Values<S>;
    /// The source of the row at offset `off` of `call`, and where its `h` is read back.
    ///
    /// # Safety
    /// `off + d` is within the call's rows.
    unsafe fn row(s: S, call: &NormCall<E>, off: usize) -> (Self, Self::Back);
}

/// Where the normalize sweep (and the f64 path) of a row gets its f32 values `h`: exactly the
/// values the statistics sweep saw, never a copy rounded to a half type.
pub(crate) trait Values<S: Simd>: Copy {
    /// `h[i..i + n]`, `n ≤ LANES` (the other lanes unspecified). The half-typed add forms
    /// rebuild `h` here from `x`, `r`, `b` and write the `h` output (rounded once) after reading
    /// them.
    ///
    /// # Safety
    /// `i + n ≤ d`; called once per span, in the normalize sweep.
    unsafe fn get(&self, s: S, i: usize, n: usize) -> S::V;
    /// Writes the span `i..i + n` of the `h` output of a row of `d` values where the normalize
    /// sweep streams it (see [`AddResidual::stream_h`]), before `y` is written there; else
    /// nothing.
    ///
    /// # Safety
    /// As [`write_span`].
    #[inline(always)]
    unsafe fn write_h(&self, s: S, d: usize, i: usize, n: usize) {
        let _ = (s, d, i, n);
    }
    /// `h_j`, for the f64 path (which may call it several times per `j`).
    ///
    /// # Safety
    /// `j < d`, and `finish` has not run.
    unsafe fn at(&self, j: usize) -> f32;
    /// Ends the f64 path of a row, after its last `at`: writes the `h` output where the
    /// statistics sweep did not (the half-typed add forms).
    ///
    /// # Safety
    /// The row holds `d` values.
    #[inline(always)]
    unsafe fn finish(&self, d: usize) {
        let _ = d;
    }
}

/// The inputs to prefetch during the row at `off`: those of the next row (`x`, and `r` for the
/// add forms), when rows are long and there is one.
///
/// # Safety
/// `off + d` is within the call's rows.
#[inline(always)]
unsafe fn ahead_of<E: Element>(call: &NormCall<E>, off: usize) -> [*const E; 2] {
    let next = off + call.d;
    if !call.prefetch || next >= call.rows * call.d {
        return [std::ptr::null(); 2];
    }
    // SAFETY: `next` starts a row of the call.
    unsafe {
        [
            call.x.add(next),
            if call.r.is_null() { call.r } else { call.r.add(next) },
        ]
    }
}

/// Prefetches element `i` of the first `N` rows at `ahead`, which are not null, into the
/// level-2 cache where `l2`, else into the level-1.
#[inline(always)]
fn prefetch_ahead<S: Simd, E, const N: usize>(s: S, i: usize, ahead: &[*const E; 2], l2: bool) {
    for p in &ahead[..N] {
        debug_assert!(!p.is_null());
        let p = p.wrapping_add(i).cast();
        if l2 {
            s.prefetch_l2(p);
        } else {
            s.prefetch(p);
        }
    }
}

/// A row read as it is (widened exactly to f32).
pub(crate) struct Plain<E, const TWO_PASS: bool = true> {
    pub x: *const E,
    /// The inputs of the next row, prefetched during this row's statistics sweep (null: none).
    pub ahead: [*const E; 2],
}

impl<S: Simd, E: Element, const TWO_PASS: bool> Source<S> for Plain<E, TWO_PASS> {
    const TWO_PASS: bool = TWO_PASS;
    #[inline(always)]
    unsafe fn first(&self) -> f32 {
        // SAFETY: the row is not empty.
        unsafe { (*self.x).to_f32() }
    }
    #[inline(always)]
    unsafe fn full(&self, s: S, i: usize) -> S::V {
        // SAFETY: in bounds by the caller's promise.
        unsafe { E::load(s, self.x.add(i)) }
    }
    #[inline(always)]
    unsafe fn partial(&self, s: S, i: usize, n: usize) -> S::V {
        // SAFETY: in bounds by the caller's promise.
        unsafe { E::load_partial(s, self.x.add(i), n, 0.0) }
    }
    #[inline(always)]
    fn prefetches(&self) -> bool {
        !self.ahead[0].is_null()
    }
    #[inline(always)]
    fn prefetch(&self, s: S, i: usize, l2: bool) {
        prefetch_ahead::<S, E, 1>(s, i, &self.ahead, l2);
    }
}

impl<S: Simd, E: Element, const TWO_PASS: bool> RowSource<S, E> for Plain<E, TWO_PASS> {
    type Back = Reread<E>;
    #[inline(always)]
    unsafe fn row(_: S, call: &NormCall<E>, off: usize) -> (Self, Reread<E>) {
        // SAFETY: in bounds by the caller's promise.
        unsafe {
            let x = call.x.add(off);
            (
                Plain {
                    x,
                    ahead: ahead_of(call, off),
                },
                Reread { p: x },
            )
        }
    }
}

/// `h` read back from memory: `x` itself for the plain forms, the stored f32 `h` for the f32
/// add forms.
pub(crate) struct Reread<E> {
    p: *const E,
}

impl<E> Clone for Reread<E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<E> Copy for Reread<E> {}

impl<S: Simd, E: Element> Values<S> for Reread<E> {
    #[inline(always)]
    unsafe fn get(&self, s: S, i: usize, n: usize) -> S::V {
        // SAFETY: in bounds by the caller's promise.
        unsafe { load_n(s, self.p, i, n) }
    }
    #[inline(always)]
    unsafe fn at(&self, j: usize) -> f32 {
        // SAFETY: in bounds by the caller's promise.
        unsafe { (*self.p.add(j)).to_f32() }
    }
}

/// `h = α·x + (r + b)` (one FMA, after one addition when there is a bias), from the inputs
/// widened exactly. For f32, `h` is stored to `h` as it is produced and the normalize sweep
/// reads it back. Elsewhere nothing is stored here, and the normalize sweep rebuilds the same
/// f32 `h` from the inputs: for a half type, which writes the `h` output (if any) rounded
/// once; for f32 with `h` null; and for f32 with `stream_h`, which streams the `h` output.
/// `h` may equal `x` (the in-place forms): each vector is read before it is written.
pub(crate) struct AddResidual<S: Simd, E, const BIAS: bool> {
    pub x: *const E,
    pub r: *const E,
    /// Length `d`, shared by all rows; unused without `BIAS`.
    pub b: *const f32,
    /// For f32: where `h` goes (the `h` output, `y` as scratch, or `x`), or null (no `h`
    /// output, and `y` streamed: scratch lines in `y` would be cached, then overwritten); for
    /// a half type: the `h` output, or null.
    pub h: *mut E,
    /// f32 only: the `h` output (not `x`) is written by the normalize sweep, ahead of `y`,
    /// with streaming stores, instead of by the statistics sweep: its lines are then never
    /// read from memory before being overwritten.
    pub stream_h: bool,
    pub alpha: f32,
    pub alpha_v: S::V,
    /// As [`Plain::ahead`].
    pub ahead: [*const E; 2],
}

impl<S: Simd, E, const BIAS: bool> Clone for AddResidual<S, E, BIAS> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S: Simd, E, const BIAS: bool> Copy for AddResidual<S, E, BIAS> {}

impl<S: Simd, E: Element, const BIAS: bool> AddResidual<S, E, BIAS> {
    /// Whether the statistics sweep stores `h` for the normalize sweep to read back.
    #[inline(always)]
    fn stores_h(&self) -> bool {
        E::IS_F32 && !self.h.is_null() && !self.stream_h
    }

    #[inline(always)]
    fn combine(&self, s: S, x: S::V, r: S::V, b: S::V) -> S::V {
        let t = if BIAS { s.add(r, b) } else { r };
        s.mul_add(self.alpha_v, x, t)
    }

    /// `h[i..i + n]`, `n ≤ LANES`, built from the inputs.
    ///
    /// # Safety
    /// `i + n ≤ d`.
    #[inline(always)]
    unsafe fn build(&self, s: S, i: usize, n: usize) -> S::V {
        // SAFETY: in bounds by the caller's promise.
        unsafe {
            let b = if BIAS { load_n(s, self.b, i, n) } else { s.splat(0.0) };
            self.combine(s, load_n(s, self.x, i, n), load_n(s, self.r, i, n), b)
        }
    }

    /// `h_j` built from the inputs: scalar IEEE addition and FMA round exactly as the lanes do.
    ///
    /// # Safety
    /// `j < d`, and `x[j]` not yet overwritten by `h`.
    #[inline(always)]
    unsafe fn scalar(&self, j: usize) -> f32 {
        // SAFETY: in bounds by the caller's promise.
        unsafe {
            let r = (*self.r.add(j)).to_f32();
            let t = if BIAS { r + *self.b.add(j) } else { r };
            self.alpha.mul_add((*self.x.add(j)).to_f32(), t)
        }
    }
}

impl<S: Simd, E: Element, const BIAS: bool> Source<S> for AddResidual<S, E, BIAS> {
    const TWO_PASS: bool = false;
    #[inline(always)]
    unsafe fn first(&self) -> f32 {
        // SAFETY: the row is not empty, and nothing of it was stored yet.
        unsafe { self.scalar(0) }
    }
    #[inline(always)]
    unsafe fn full(&self, s: S, i: usize) -> S::V {
        // SAFETY: in bounds by the caller's promise; `h` is written after `x` is read.
        unsafe {
            let b = if BIAS { s.load(self.b.add(i)) } else { s.splat(0.0) };
            let h = self.combine(s, E::load(s, self.x.add(i)), E::load(s, self.r.add(i)), b);
            if self.stores_h() {
                E::store(s, self.h.add(i), h);
            }
            h
        }
    }
    #[inline(always)]
    unsafe fn partial(&self, s: S, i: usize, n: usize) -> S::V {
        // SAFETY: in bounds by the caller's promise; partial accesses stop at `n`.
        unsafe {
            let b = if BIAS {
                s.load_partial(self.b.add(i), n, 0.0)
            } else {
                s.splat(0.0)
            };
            let h = self.combine(
                s,
                E::load_partial(s, self.x.add(i), n, 0.0),
                E::load_partial(s, self.r.add(i), n, 0.0),
                b,
            );
            if self.stores_h() {
                E::store_partial(s, self.h.add(i), n, h);
            }
            h
        }
    }
    #[inline(always)]
    fn prefetches(&self) -> bool {
        !self.ahead[0].is_null()
    }
    #[inline(always)]
    fn prefetch(&self, s: S, i: usize, l2: bool) {
        // `r` is not null in the add forms, nor then its row ahead.
        prefetch_ahead::<S, E, 2>(s, i, &self.ahead, l2);
    }
}

impl<S: Simd, E: Element, const BIAS: bool> RowSource<S, E> for AddResidual<S, E, BIAS> {
    type Back = Self;
    #[inline(always)]
    unsafe fn row(s: S, call: &NormCall<E>, off: usize) -> (Self, Self) {
        // SAFETY: in bounds by the caller's promise; `h` is null only for a half type without
        // an `h` output, and then neither offset nor written.
        unsafe {
            let src = AddResidual {
                x: call.x.add(off),
                r: call.r.add(off),
                b: call.bias,
                h: if call.h.is_null() { call.h } else { call.h.add(off) },
                // A separate `h` output (neither null nor `x`) of a streaming call; in place,
                // `h` goes where `x` was just read, in cache.
                stream_h: call.stream && !call.h.is_null() && call.h.cast_const() != call.x,
                alpha: call.alpha,
                alpha_v: s.splat(call.alpha),
                ahead: ahead_of(call, off),
            };
            (src, src)
        }
    }
}

impl<S: Simd, E: Element, const BIAS: bool> Values<S> for AddResidual<S, E, BIAS> {
    #[inline(always)]
    unsafe fn get(&self, s: S, i: usize, n: usize) -> S::V {
        // SAFETY: in bounds by the caller's promise. Where `h` is rebuilt, the inputs at
        // `i..i + n` are read before the `h` output (possibly `x`) is written there.
        unsafe {
            if self.stores_h() {
                load_n(s, self.h.cast_const(), i, n)
            } else {
                let h = self.build(s, i, n);
                if !(self.h.is_null() || self.stream_h) {
                    store_n(s, self.h, i, n, h);
                }
                h
            }
        }
    }
    #[inline(always)]
    unsafe fn write_h(&self, s: S, d: usize, i: usize, n: usize) {
        if self.stream_h {
            // SAFETY: forwarded; `h` is not `x`, so the inputs stay intact for `y`.
            unsafe { write_span(s, &Rebuilt(*self), self.h, d, i, n, true) }
        }
    }
    #[inline(always)]
    unsafe fn at(&self, j: usize) -> f32 {
        // SAFETY: in bounds by the caller's promise. Where the statistics sweep stored `h`, `x`
        // may be overwritten (in place); elsewhere `x` is intact until `finish`.
        unsafe {
            if self.stores_h() {
                (*self.h.add(j)).to_f32()
            } else {
                self.scalar(j)
            }
        }
    }
    #[inline(always)]
    unsafe fn finish(&self, d: usize) {
        if !(self.stores_h() || self.h.is_null()) {
            for j in 0..d {
                // SAFETY: `j < d`; `x[j]` is read before `h[j]` (possibly `x[j]`) is written.
                unsafe { *self.h.add(j) = E::from_f32(self.scalar(j)) };
            }
        }
    }
}

/// The `h` of an [`AddResidual`] row built again from its inputs, as an [`Output`].
struct Rebuilt<S: Simd, E, const BIAS: bool>(AddResidual<S, E, BIAS>);

impl<S: Simd, E: Element, const BIAS: bool> Output<S> for Rebuilt<S, E, BIAS> {
    #[inline(always)]
    unsafe fn get(&self, s: S, i: usize, n: usize) -> S::V {
        // SAFETY: forwarded.
        unsafe { self.0.build(s, i, n) }
    }
}

/// Loads `n ≤ LANES` elements at `p + i`, widened to f32: a full load when `n = LANES`.
///
/// # Safety
/// `p + i .. p + i + n` is readable.
#[inline(always)]
pub(crate) unsafe fn load_n<S: Simd, E: Element>(s: S, p: *const E, i: usize, n: usize) -> S::V {
    // SAFETY: forwarded.
    unsafe {
        if n == S::LANES {
            E::load(s, p.add(i))
        } else {
            E::load_partial(s, p.add(i), n, 0.0)
        }
    }
}

/// Stores `n ≤ LANES` elements at `p + i`, each rounded once to `E`.
///
/// # Safety
/// `p + i .. p + i + n` is writable.
#[inline(always)]
pub(crate) unsafe fn store_n<S: Simd, E: Element>(s: S, p: *mut E, i: usize, n: usize, v: S::V) {
    // SAFETY: forwarded.
    unsafe {
        if n == S::LANES {
            E::store(s, p.add(i), v)
        } else {
            E::store_partial(s, p.add(i), n, v)
        }
    }
}

/// Runs `$body` with `$i` (the start) and `$n` (the length) of every vector of a row of `$d`
/// values: `n = LANES`, unrolled by four so that the latencies of neighbouring vectors overlap,
/// then a last partial one. A macro rather than a function taking a closure: a closure carries
/// no target features, and where LLVM declines to inline it its intrinsics become calls.
macro_rules! for_each_vector {
    ($lanes:expr, $d:expr, |$i:ident, $n:ident| $body:block) => {{
        let (lanes, d): (usize, usize) = ($lanes, $d);
        let mut at = 0;
        // Tested against `at < whole`, not `at + 4·lanes <= d`: LLVM then keeps one
        // induction variable (3 instructions of loop control per 4 vectors, not 5).
        let whole = d - d % (4 * lanes);
        while at < whole {
            for u in 0..4 {
                let ($i, $n) = (at + u * lanes, lanes);
                $body
            }
            at += 4 * lanes;
        }
        while at + lanes <= d {
            let ($i, $n) = (at, lanes);
            $body
            at += lanes;
        }
        if at < d {
            let ($i, $n) = (at, d - at);
            $body
        }
    }};
}
pub(crate) use for_each_vector;

/// A normalize sweep's output: the vector of `n ≤ LANES` values at offset `i` of its row.
pub(crate) trait Output<S: Simd> {
    /// # Safety
    /// `i + n ≤ d`; called once per offset, in increasing order (an output may read back
    /// what the statistics sweep stored there).
    unsafe fn get(&self, s: S, i: usize, n: usize) -> S::V;
}

/// Writes the outputs of the span `i..i + n` of a row of `d` values to `y`.
///
/// With ordinary stores: a vector at a time from `i`, unrolled by four. With `stream` (f32
/// only): streaming stores of the row's vector-aligned vectors, so that each of their lines
/// is written whole, once; ordinary stores for the partial vectors before the first aligned
/// element and after the last whole vector. A span writes the aligned vectors that start
/// from its first aligned element up to (not including) the first aligned element after it,
/// so a vector may reach past the span's end; the row's first span writes the head, its last
/// the tail. Each output is computed the same either way: only where it goes differs.
/// A line written by ordinary stores is read from memory first and holds up the streaming
/// stores behind it, so partial lines are left only at the ends of rows, and the line at the
/// end of the next row is prefetched when a row starts.
///
/// # Safety
/// `y..y + d` is writable, `out` gives `d` values, `i + n ≤ d`, and the spans of a row come
/// in order, each starting where the previous one ended.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn write_span<S: Simd, E: Element, O: Output<S>>(
    s: S,
    out: &O,
    y: *mut E,
    d: usize,
    i: usize,
    n: usize,
    stream: bool,
) {
    if !(E::IS_F32 && stream) {
        for_each_vector!(S::LANES, n, |j, m| {
            // SAFETY: `i + j + m ≤ i + n ≤ d`.
            unsafe { store_n(s, y, i + j, m, out.get(s, i + j, m)) };
        });
        return;
    }
    // `black_box`: without it LLVM hoists the set-up below, loop-invariant and cheap to
    // speculate, out of the statistics loop into every row, streamed or not (measured: up to
    // 30% of the time of the add forms' and RMSNorm's rows in cache).
    let y = std::hint::black_box(y).cast::<f32>();
    let (lanes, size) = (S::LANES, 4 * S::LANES);
    // The first index from `j` on whose address is vector-aligned (`j` itself if it is).
    let aligned = |j: usize| j + (size - y.wrapping_add(j) as usize % size) % size / 4;
    let head = aligned(0).min(d);
    let whole_end = head + (d - head) / lanes * lanes;
    let bound = |j: usize| aligned(j).clamp(head, whole_end);
    let end = i + n;
    // SAFETY: every offset written lies in `0..d`; streamed ones are aligned by construction.
    unsafe {
        if i == 0 {
            let next_end = y.wrapping_add(2 * d);
            if !(next_end as usize).is_multiple_of(size) {
                s.prefetch(next_end.wrapping_sub(1));
            }
            if head > 0 {
                store_n(s, y, 0, head, out.get(s, 0, head));
            }
        }
        let mut at = bound(i);
        while at < bound(end) {
            s.store_stream(y.add(at), out.get(s, at, lanes));
            at += lanes;
        }
        if end == d && whole_end < d {
            store_n(s, y, whole_end, d - whole_end, out.get(s, whole_end, d - whole_end));
        }
    }
}
