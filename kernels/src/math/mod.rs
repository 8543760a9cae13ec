//! Elementary functions and row loops, written once over [`Simd`].

pub(crate) mod activation;
pub(crate) mod exp;

use crate::simd::Simd;

/// An element-wise vector operation, for [`map_row`].
///
/// Heavy operations (`exp`, `sigmoid`, …) are unit structs whose `apply` is
/// `#[inline(always)]`: passed as a closure or a function item, their body would sit in a
/// closure or an `Fn::call` shim, which carries no target features and is too large for LLVM to
/// inline, so every vector would go through a call (measured: 40× slower). Small closures
/// (a multiply by a captured constant) implement the trait too and are inlined as usual.
pub(crate) trait Map<S: Simd>: Copy {
    fn apply(self, s: S, x: S::V) -> S::V;
}

impl<S: Simd, F: Fn(S, S::V) -> S::V + Copy> Map<S> for F {
    #[inline(always)]
    fn apply(self, s: S, x: S::V) -> S::V {
        self(s, x)
    }
}

/// Applies `f` to every vector of a row: `dst[i] = f(src[i])` for `i < n`.
///
/// Unrolled by four vectors so that the latency of `f` overlaps; the tail goes through a
/// partial load and store and touches nothing past `n`. `src` may equal `dst` (in-place).
///
/// # Safety
/// `src..src + n` must be readable and `dst..dst + n` writable; if they overlap they must be
/// equal.
#[inline(always)]
pub(crate) unsafe fn map_row<S: Simd>(s: S, src: *const f32, dst: *mut f32, n: usize, f: impl Map<S>) {
    let lanes = S::LANES;
    let mut i = 0;
    // SAFETY (all blocks): every access covers lanes `i..i + LANES ≤ n`, or the `n − i`
    // lanes of a partial access, all inside the row.
    while i + 4 * lanes <= n {
        unsafe {
            let v0 = f.apply(s, s.load(src.add(i)));
            let v1 = f.apply(s, s.load(src.add(i + lanes)));
            let v2 = f.apply(s, s.load(src.add(i + 2 * lanes)));
            let v3 = f.apply(s, s.load(src.add(i + 3 * lanes)));
            s.store(dst.add(i), v0);
            s.store(dst.add(i + lanes), v1);
            s.store(dst.add(i + 2 * lanes), v2);
            s.store(dst.add(i + 3 * lanes), v3);
        }
        i += 4 * lanes;
    }
    while i + lanes <= n {
        unsafe { s.store(dst.add(i), f.apply(s, s.load(src.add(i)))) };
        i += lanes;
    }
    if i < n {
        unsafe { s.store_partial(dst.add(i), n - i, f.apply(s, s.load_partial(src.add(i), n - i, 0.0))) };
    }
}
