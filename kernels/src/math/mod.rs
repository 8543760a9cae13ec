//! Elementary functions and row loops, written once over [`Simd`].

pub(crate) mod activation;
pub(crate) mod exp;
pub(crate) mod gelu;

use crate::element::Element;
use crate::simd::lockstep::Lockstep;
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

/// The identity map: [`map_row`] with it converts between storage types.
#[derive(Clone, Copy)]
pub(crate) struct Identity;

impl<S: Simd> Map<S> for Identity {
    #[inline(always)]
    fn apply(self, _s: S, x: S::V) -> S::V {
        x
    }
}

/// An element-wise function every ISA runs, for the ops of the public maps (`exp`,
/// `sigmoid`, …): its [`Elementwise::row`] is [`map_row`] of itself. (A bound `F: Map<S>`
/// cannot be stated for every `S` at once; this trait states it per function.)
pub(crate) trait Elementwise: Copy {
    /// `dst[i] = f(src[i])` for `i < n`.
    ///
    /// # Safety
    /// As [`map_row`].
    unsafe fn row<S: Simd, A: Element, B: Element>(self, s: S, src: *const A, dst: *mut B, n: usize);
}

impl Elementwise for Identity {
    #[inline(always)]
    unsafe fn row<S: Simd, A: Element, B: Element>(self, s: S, src: *const A, dst: *mut B, n: usize) {
        // SAFETY: forwarded from the caller.
        unsafe { map_row(s, src, dst, n, self) }
    }
}

/// Applies `f` to every vector of a row: `dst[i] = f(src[i])` for `i < n`, loading `A` and
/// storing `B` (each element widened, then rounded once on store).
///
/// Unrolled by four vectors so that the latency of `f` overlaps; the tail goes through a
/// partial load and store and touches nothing past `n`. `src` may equal `dst` (in-place).
///
/// # Safety
/// `src..src + n` must be readable and `dst..dst + n` writable; if they overlap they must be
/// equal.
#[inline(always)]
pub(crate) unsafe fn map_row<S: Simd, A: Element, B: Element>(
    s: S,
    src: *const A,
    dst: *mut B,
    n: usize,
    f: impl Map<S>,
) {
    let lanes = S::LANES;
    let mut i = 0;
    // SAFETY (all blocks): every access covers lanes `i..i + LANES ≤ n`, or the `n − i`
    // lanes of a partial access, all inside the row.
    while i + 4 * lanes <= n {
        unsafe {
            let v0 = f.apply(s, A::load(s, src.add(i)));
            let v1 = f.apply(s, A::load(s, src.add(i + lanes)));
            let v2 = f.apply(s, A::load(s, src.add(i + 2 * lanes)));
            let v3 = f.apply(s, A::load(s, src.add(i + 3 * lanes)));
            B::store(s, dst.add(i), v0);
            B::store(s, dst.add(i + lanes), v1);
            B::store(s, dst.add(i + 2 * lanes), v2);
            B::store(s, dst.add(i + 3 * lanes), v3);
        }
        i += 4 * lanes;
    }
    while i + lanes <= n {
        unsafe { B::store(s, dst.add(i), f.apply(s, A::load(s, src.add(i)))) };
        i += lanes;
    }
    if i < n {
        unsafe {
            B::store_partial(
                s,
                dst.add(i),
                n - i,
                f.apply(s, A::load_partial(s, src.add(i), n - i, 0.0)),
            )
        };
    }
}

/// [`map_row`] with `f` run on `N` vectors in lockstep ([`Lockstep`]): for maps whose long
/// dependent chains (GELU's) would otherwise hold the core's scheduler full of waiting
/// operations. The same bits as [`map_row`].
///
/// # Safety
/// As [`map_row`].
#[inline(always)]
pub(crate) unsafe fn map_row_lockstep<S: Simd, A: Element, B: Element, const N: usize>(
    s: S,
    src: *const A,
    dst: *mut B,
    n: usize,
    f: impl Map<S> + Map<Lockstep<S, N>>,
) {
    let main = n - n % (N * S::LANES);
    // SAFETY: the caller's promise, split at `main ≤ n`; the first part is whole vectors of
    // `Lockstep<S, N>`.
    unsafe {
        map_row(Lockstep::<S, N>(s), src, dst, main, f);
        map_row(s, src.add(main), dst.add(main), n - main, f);
    }
}
