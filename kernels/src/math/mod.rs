//! Elementary functions and row loops, written once over [`Simd`].

pub(crate) mod exp;

use crate::simd::Simd;

/// Applies `f` to every vector of a row: `dst[i] = f(src[i])` for `i < n`.
///
/// Unrolled by four vectors so that the latency of `f` overlaps; the tail goes through a
/// partial load and store and touches nothing past `n`. `src` may equal `dst` (in-place).
///
/// # Safety
/// `src..src + n` must be readable and `dst..dst + n` writable; if they overlap they must be
/// equal.
#[inline(always)]
pub(crate) unsafe fn map_row<S: Simd>(s: S, src: *const f32, dst: *mut f32, n: usize, f: impl Fn(S::V) -> S::V) {
    let lanes = S::LANES;
    let mut i = 0;
    // SAFETY (all blocks): every access covers lanes `i..i + LANES ≤ n`, or the `n − i`
    // lanes of a partial access, all inside the row.
    while i + 4 * lanes <= n {
        unsafe {
            let v = [0, 1, 2, 3].map(|k| f(s.load(src.add(i + k * lanes))));
            for (k, v) in v.into_iter().enumerate() {
                s.store(dst.add(i + k * lanes), v);
            }
        }
        i += 4 * lanes;
    }
    while i + lanes <= n {
        unsafe { s.store(dst.add(i), f(s.load(src.add(i)))) };
        i += lanes;
    }
    if i < n {
        unsafe { s.store_partial(dst.add(i), n - i, f(s.load_partial(src.add(i), n - i, 0.0))) };
    }
}
