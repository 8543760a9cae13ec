//! Where a row's values `h` come from (read from `x`, or built as `α·x + (r + b)`), and how a
//! normalize sweep writes its output (ordinary or streaming stores).

use crate::element::Element;
use crate::simd::Simd;

/// The values `h` of one row, as the statistics and normalize sweeps read them.
pub(crate) trait Source<S: Simd>: Copy {
    /// `h₀`, the statistics' shift, computed as the vector lanes compute it.
    ///
    /// # Safety
    /// The row is not empty, and nothing of it has been stored yet.
    unsafe fn first(&self) -> f32;
    /// `h[i..i + n]`, `n ≤ LANES`, zero past `n`: the statistics sweep's first read (the add
    /// forms store `h` here where they keep it).
    ///
    /// # Safety
    /// `i + n ≤ d`.
    unsafe fn get(&self, s: S, i: usize, n: usize) -> S::V;
    /// `h[i..i + n]` once more, the same bits: the second pass and the normalize sweep.
    ///
    /// # Safety
    /// `i + n ≤ d`, and `get` has run over `i..i + n`.
    unsafe fn again(&self, s: S, i: usize, n: usize) -> S::V;
    /// `h_j`, for the f64 path.
    ///
    /// # Safety
    /// `j < d`, and [`Source::finish`] has not run.
    unsafe fn at(&self, j: usize) -> f32;
    /// Prefetches element `i` of the next row's inputs, if the row has any to prefetch.
    fn prefetch(&self, s: S, i: usize);
    /// Writes the span `i..i + n` of the `h` output where the normalize sweep writes it
    /// (after `y` there: in place, `h` goes over the `x` that `y` is built from); else
    /// nothing.
    ///
    /// # Safety
    /// As [`write_span`] for a row of `d` values.
    #[inline(always)]
    unsafe fn write_h(&self, s: S, d: usize, i: usize, n: usize) {
        let _ = (s, d, i, n);
    }
    /// Ends a row on the f64 path: writes the `h` output where the sweeps did not.
    ///
    /// # Safety
    /// The row holds `d` values.
    #[inline(always)]
    unsafe fn finish(&self, d: usize) {
        let _ = d;
    }
}

/// A row read as it is, widened exactly. `ahead` is the next row's `x`, prefetched during
/// this row's statistics, or null.
#[derive(Clone, Copy)]
pub(crate) struct Plain<E> {
    pub x: *const E,
    pub ahead: *const E,
}

impl<S: Simd, E: Element> Source<S> for Plain<E> {
    #[inline(always)]
    unsafe fn first(&self) -> f32 {
        // SAFETY: the row is not empty.
        unsafe { (*self.x).to_f32() }
    }
    #[inline(always)]
    unsafe fn get(&self, s: S, i: usize, n: usize) -> S::V {
        // SAFETY: in bounds by the caller's promise.
        unsafe { load_n(s, self.x, i, n) }
    }
    #[inline(always)]
    unsafe fn again(&self, s: S, i: usize, n: usize) -> S::V {
        // SAFETY: as `get`.
        unsafe { load_n(s, self.x, i, n) }
    }
    #[inline(always)]
    unsafe fn at(&self, j: usize) -> f32 {
        // SAFETY: as `get`.
        unsafe { (*self.x.add(j)).to_f32() }
    }
    #[inline(always)]
    fn prefetch(&self, s: S, i: usize) {
        s.prefetch_l2(self.ahead.wrapping_add(i).cast());
    }
}

/// `h = α·x + (r + b)` (one FMA, after one addition where there is a bias `b`), from the
/// inputs widened exactly: scalar and vector lanes round alike, so every path builds the
/// same bits.
///
/// Where `keep`, the statistics sweep stores the f32 `h` to `h` (the `h` output, `y` as
/// scratch, or `x` in place) and the later reads load it back. Elsewhere `h` is rebuilt from
/// the inputs by each read, and the `h` output, if any (`h` not null), is written by the
/// normalize sweep: rounded once for a half type, streamed for f32 where `stream_h`.
#[derive(Clone, Copy)]
pub(crate) struct AddResidual<S: Simd, E, const BIAS: bool> {
    pub x: *const E,
    pub r: *const E,
    /// Length `d`, shared by all rows; unused without `BIAS`.
    pub b: *const f32,
    pub h: *mut E,
    pub keep: bool,
    pub stream_h: bool,
    pub alpha: f32,
    pub alpha_v: S::V,
    /// The next row's `x` and `r`, prefetched during this row's statistics, or null.
    pub ahead: [*const E; 2],
}

impl<S: Simd, E: Element, const BIAS: bool> AddResidual<S, E, BIAS> {
    /// `h[i..i + n]` built from the inputs.
    ///
    /// # Safety
    /// `i + n ≤ d`, and `x[i..i + n]` not yet overwritten by `h`.
    #[inline(always)]
    unsafe fn build(&self, s: S, i: usize, n: usize) -> S::V {
        // SAFETY: in bounds by the caller's promise.
        unsafe {
            let r = load_n(s, self.r, i, n);
            let t = if BIAS { s.add(r, load_n(s, self.b, i, n)) } else { r };
            s.mul_add(self.alpha_v, load_n(s, self.x, i, n), t)
        }
    }

    /// `h_j` built from the inputs.
    ///
    /// # Safety
    /// As [`AddResidual::build`] for `j..j + 1`.
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
    #[inline(always)]
    unsafe fn first(&self) -> f32 {
        // SAFETY: the row is not empty, and `x₀` not yet overwritten.
        unsafe { self.scalar(0) }
    }
    #[inline(always)]
    unsafe fn get(&self, s: S, i: usize, n: usize) -> S::V {
        // SAFETY: in bounds by the caller's promise; `x[i..]` is read before `h[i..]`
        // (possibly `x`) is written.
        unsafe {
            let h = self.build(s, i, n);
            if self.keep {
                store_n(s, self.h, i, n, h);
            }
            h
        }
    }
    #[inline(always)]
    unsafe fn again(&self, s: S, i: usize, n: usize) -> S::V {
        // SAFETY: in bounds; where `h` was not kept, the inputs are intact.
        unsafe {
            if self.keep {
                load_n(s, self.h.cast_const(), i, n)
            } else {
                self.build(s, i, n)
            }
        }
    }
    #[inline(always)]
    unsafe fn at(&self, j: usize) -> f32 {
        // SAFETY: as `again`.
        unsafe {
            if self.keep {
                (*self.h.add(j)).to_f32()
            } else {
                self.scalar(j)
            }
        }
    }
    #[inline(always)]
    fn prefetch(&self, s: S, i: usize) {
        for p in self.ahead {
            s.prefetch_l2(p.wrapping_add(i).cast());
        }
    }
    #[inline(always)]
    unsafe fn write_h(&self, s: S, d: usize, i: usize, n: usize) {
        if !self.keep && !self.h.is_null() {
            // SAFETY: forwarded; `h[i..i + n]` is written after the last reads of the inputs
            // there (`y`'s), and nothing reads it back.
            unsafe { write_span(s, &Rebuilt(*self), self.h, d, i, n, self.stream_h) }
        }
    }
    #[inline(always)]
    unsafe fn finish(&self, d: usize) {
        if !self.keep && !self.h.is_null() {
            for j in 0..d {
                // SAFETY: `j < d`; `x[j]` is read before `h[j]` (possibly `x[j]`) is written.
                unsafe { *self.h.add(j) = E::from_f32(self.scalar(j)) };
            }
        }
    }
}

/// The `h` of an [`AddResidual`] row built again, as an [`Output`].
struct Rebuilt<S: Simd, E, const BIAS: bool>(AddResidual<S, E, BIAS>);

impl<S: Simd, E: Element, const BIAS: bool> Output<S> for Rebuilt<S, E, BIAS> {
    #[inline(always)]
    unsafe fn get(&self, s: S, i: usize, n: usize) -> S::V {
        // SAFETY: forwarded.
        unsafe { self.0.build(s, i, n) }
    }
}

/// Loads `n ≤ LANES` elements at `p + i`, widened to f32, zero past `n`.
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

/// Runs `$body` with `$i` (the start) and `$n` (the length) of every vector of `$d` values:
/// unrolled by four so that neighbouring vectors' latencies overlap, then a last partial one.
/// A macro, not a function taking a closure: a closure carries no target features.
macro_rules! for_each_vector {
    ($lanes:expr, $d:expr, |$i:ident, $n:ident| $body:block) => {{
        let (lanes, d): (usize, usize) = ($lanes, $d);
        let mut at = 0;
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

/// What a normalize sweep writes: the vector of `n ≤ LANES` values at offset `i` of a row.
pub(crate) trait Output<S: Simd> {
    /// # Safety
    /// `i + n ≤ d`; called once per offset, in increasing order (an output may read back
    /// what was stored at the same offset).
    unsafe fn get(&self, s: S, i: usize, n: usize) -> S::V;
}

/// Writes the span `i..i + n` of a row of `d` values of `out` to `y`.
///
/// With `stream` (f32 only), the row's vector-aligned vectors go with streaming stores, so
/// that each of their lines is written whole, once, and the partial vectors at the row's
/// ends with ordinary stores: a span streams the aligned vectors from its first aligned
/// element up to the first aligned element after it, the row's first span writes the head,
/// its last the tail. Where a value goes changes, never the value.
///
/// # Safety
/// `y..y + d` is writable, `out` gives `d` values, `i + n ≤ d`, and the spans of a row come
/// in order, each starting where the previous one ended.
#[inline(always)]
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
    let y = y.cast::<f32>();
    let (lanes, size) = (S::LANES, 4 * S::LANES);
    // The first index from `j` on whose address is vector-aligned.
    let aligned = |j: usize| j + (size - y.wrapping_add(j) as usize % size) % size / 4;
    let head = aligned(0).min(d);
    let whole_end = head + (d - head) / lanes * lanes;
    let bound = |j: usize| aligned(j).clamp(head, whole_end);
    let end = i + n;
    // SAFETY: every offset written lies in `0..d`; streamed ones are aligned by construction.
    unsafe {
        if i == 0 && head > 0 {
            store_n(s, y, 0, head, out.get(s, 0, head));
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
