//! `N` vectors of an ISA driven as one: the operations of a generic body applied to each in
//! turn, step by step.
//!
//! A long dependent chain, such as the exponential's polynomial or GELU's, computed for one
//! vector after another leaves the out-of-order core's scheduler full of operations that
//! wait on the step before theirs, and the core issues fewer operations a cycle than it has
//! ports for. Run in lockstep, each step is issued for `N` independent vectors back to back,
//! so the operations that wait are fewer and the ports stay busy. Each lane still goes
//! through the same operations in the same order, so every result is bit for bit the one the
//! underlying ISA gives.

use super::{Simd, TileOp};

/// `N` vectors of `S`, lane `j·S::LANES + i` being lane `i` of vector `j`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lockstep<S, const N: usize>(pub S);

impl<S: Simd, const N: usize> Lockstep<S, N> {
    /// How many of the first `n` lanes fall in vector `j`.
    #[inline(always)]
    fn lanes_in(j: usize, n: usize) -> usize {
        n.saturating_sub(j * S::LANES).min(S::LANES)
    }
}

impl<S: Simd, const N: usize> Simd for Lockstep<S, N> {
    const LANES: usize = N * S::LANES;
    /// The registers per vector of `S` held at once.
    const REGISTERS: usize = S::REGISTERS / N;
    type V = [S::V; N];
    type M = [S::M; N];

    #[inline(always)]
    fn splat(self, x: f32) -> Self::V {
        [self.0.splat(x); N]
    }

    #[inline(always)]
    unsafe fn load(self, p: *const f32) -> Self::V {
        // SAFETY: vector `j` reads `p + j·LANES..`, inside the `N·LANES` floats the caller
        // promises (also in the other loads and stores below).
        let mut r = [self.0.splat(0.0); N];
        for (j, r) in r.iter_mut().enumerate() {
            *r = unsafe { self.0.load(p.add(j * S::LANES)) };
        }
        r
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32, v: Self::V) {
        for (j, v) in v.into_iter().enumerate() {
            // SAFETY: as `load`.
            unsafe { self.0.store(p.add(j * S::LANES), v) };
        }
    }
    #[inline(always)]
    unsafe fn load_partial(self, p: *const f32, n: usize, fill: f32) -> Self::V {
        let mut r = [self.0.splat(fill); N];
        for (j, r) in r.iter_mut().enumerate() {
            *r = match Self::lanes_in(j, n) {
                0 => continue,
                // SAFETY: `m` floats from `p + j·LANES`, within the `n` readable.
                m if m == S::LANES => unsafe { self.0.load(p.add(j * S::LANES)) },
                m => unsafe { self.0.load_partial(p.add(j * S::LANES), m, fill) },
            };
        }
        r
    }
    #[inline(always)]
    unsafe fn store_partial(self, p: *mut f32, n: usize, v: Self::V) {
        for (j, v) in v.into_iter().enumerate() {
            // SAFETY: as `load_partial`, writable.
            match Self::lanes_in(j, n) {
                0 => {}
                m if m == S::LANES => unsafe { self.0.store(p.add(j * S::LANES), v) },
                m => unsafe { self.0.store_partial(p.add(j * S::LANES), m, v) },
            }
        }
    }
    #[inline(always)]
    unsafe fn load_f16(self, p: *const u16) -> Self::V {
        // SAFETY: as `load`.
        let mut r = [self.0.splat(0.0); N];
        for (j, r) in r.iter_mut().enumerate() {
            *r = unsafe { self.0.load_f16(p.add(j * S::LANES)) };
        }
        r
    }
    #[inline(always)]
    unsafe fn store_f16(self, p: *mut u16, v: Self::V) {
        for (j, v) in v.into_iter().enumerate() {
            // SAFETY: as `load`.
            unsafe { self.0.store_f16(p.add(j * S::LANES), v) };
        }
    }
    #[inline(always)]
    unsafe fn load_bf16(self, p: *const u16) -> Self::V {
        // SAFETY: as `load`.
        let mut r = [self.0.splat(0.0); N];
        for (j, r) in r.iter_mut().enumerate() {
            *r = unsafe { self.0.load_bf16(p.add(j * S::LANES)) };
        }
        r
    }
    #[inline(always)]
    unsafe fn store_bf16(self, p: *mut u16, v: Self::V) {
        for (j, v) in v.into_iter().enumerate() {
            // SAFETY: as `load`.
            unsafe { self.0.store_bf16(p.add(j * S::LANES), v) };
        }
    }
    /// Vector `j` of each half from words `j·LANES..` of `S`, as `S` pairs them.
    #[inline(always)]
    unsafe fn load_bf16_pair(self, p: *const u32) -> (Self::V, Self::V) {
        let mut lo = self.splat(0.0);
        let mut hi = lo;
        for j in 0..N {
            // SAFETY: as `load`.
            (lo[j], hi[j]) = unsafe { self.0.load_bf16_pair(p.add(j * S::LANES)) };
        }
        (lo, hi)
    }
    #[inline(always)]
    unsafe fn load_partial_f16(self, p: *const u16, n: usize, fill: f32) -> Self::V {
        let mut r = [self.0.splat(fill); N];
        for (j, r) in r.iter_mut().enumerate() {
            *r = match Self::lanes_in(j, n) {
                0 => continue,
                // SAFETY: as `load_partial`.
                m if m == S::LANES => unsafe { self.0.load_f16(p.add(j * S::LANES)) },
                m => unsafe { self.0.load_partial_f16(p.add(j * S::LANES), m, fill) },
            };
        }
        r
    }
    #[inline(always)]
    unsafe fn store_partial_f16(self, p: *mut u16, n: usize, v: Self::V) {
        for (j, v) in v.into_iter().enumerate() {
            // SAFETY: as `store_partial`.
            match Self::lanes_in(j, n) {
                0 => {}
                m if m == S::LANES => unsafe { self.0.store_f16(p.add(j * S::LANES), v) },
                m => unsafe { self.0.store_partial_f16(p.add(j * S::LANES), m, v) },
            }
        }
    }
    #[inline(always)]
    unsafe fn load_partial_bf16(self, p: *const u16, n: usize, fill: f32) -> Self::V {
        let mut r = [self.0.splat(fill); N];
        for (j, r) in r.iter_mut().enumerate() {
            *r = match Self::lanes_in(j, n) {
                0 => continue,
                // SAFETY: as `load_partial`.
                m if m == S::LANES => unsafe { self.0.load_bf16(p.add(j * S::LANES)) },
                m => unsafe { self.0.load_partial_bf16(p.add(j * S::LANES), m, fill) },
            };
        }
        r
    }
    #[inline(always)]
    unsafe fn store_partial_bf16(self, p: *mut u16, n: usize, v: Self::V) {
        for (j, v) in v.into_iter().enumerate() {
            // SAFETY: as `store_partial`.
            match Self::lanes_in(j, n) {
                0 => {}
                m if m == S::LANES => unsafe { self.0.store_bf16(p.add(j * S::LANES), v) },
                m => unsafe { self.0.store_partial_bf16(p.add(j * S::LANES), m, v) },
            }
        }
    }

    #[inline(always)]
    fn add(self, a: Self::V, b: Self::V) -> Self::V {
        let mut r = [self.0.splat(0.0); N];
        for j in 0..N {
            r[j] = self.0.add(a[j], b[j]);
        }
        r
    }
    #[inline(always)]
    fn sub(self, a: Self::V, b: Self::V) -> Self::V {
        let mut r = [self.0.splat(0.0); N];
        for j in 0..N {
            r[j] = self.0.sub(a[j], b[j]);
        }
        r
    }
    #[inline(always)]
    fn mul(self, a: Self::V, b: Self::V) -> Self::V {
        let mut r = [self.0.splat(0.0); N];
        for j in 0..N {
            r[j] = self.0.mul(a[j], b[j]);
        }
        r
    }
    #[inline(always)]
    fn div(self, a: Self::V, b: Self::V) -> Self::V {
        let mut r = [self.0.splat(0.0); N];
        for j in 0..N {
            r[j] = self.0.div(a[j], b[j]);
        }
        r
    }
    #[inline(always)]
    fn mul_add(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V {
        let mut r = [self.0.splat(0.0); N];
        for j in 0..N {
            r[j] = self.0.mul_add(a[j], b[j], c[j]);
        }
        r
    }
    #[inline(always)]
    fn max(self, a: Self::V, b: Self::V) -> Self::V {
        let mut r = [self.0.splat(0.0); N];
        for j in 0..N {
            r[j] = self.0.max(a[j], b[j]);
        }
        r
    }
    #[inline(always)]
    fn min(self, a: Self::V, b: Self::V) -> Self::V {
        let mut r = [self.0.splat(0.0); N];
        for j in 0..N {
            r[j] = self.0.min(a[j], b[j]);
        }
        r
    }
    #[inline(always)]
    fn round(self, a: Self::V) -> Self::V {
        let mut r = [self.0.splat(0.0); N];
        for j in 0..N {
            r[j] = self.0.round(a[j]);
        }
        r
    }
    #[inline(always)]
    fn pow2i(self, n: Self::V) -> Self::V {
        let mut r = [self.0.splat(0.0); N];
        for j in 0..N {
            r[j] = self.0.pow2i(n[j]);
        }
        r
    }
    #[inline(always)]
    fn pow2_of_shifted(self, t: Self::V) -> Self::V {
        let mut r = [self.0.splat(0.0); N];
        for j in 0..N {
            r[j] = self.0.pow2_of_shifted(t[j]);
        }
        r
    }
    /// `S`'s own `ldexp` (AVX-512's is one instruction, with one rounding).
    #[inline(always)]
    fn ldexp(self, a: Self::V, n: Self::V) -> Self::V {
        let mut r = [self.0.splat(0.0); N];
        for j in 0..N {
            r[j] = self.0.ldexp(a[j], n[j]);
        }
        r
    }

    /// The vectors added as a tree, then their lanes as `S` adds them.
    #[inline(always)]
    fn reduce_add(self, a: Self::V) -> f32 {
        let mut v = a;
        let mut n = N;
        while n > 1 {
            let half = n / 2;
            for j in 0..half {
                v[j] = self.0.add(v[j], v[n - half + j]);
            }
            n -= half;
        }
        self.0.reduce_add(v[0])
    }
    #[inline(always)]
    fn reduce_max(self, a: Self::V) -> f32 {
        let mut m = self.0.reduce_max(a[0]);
        for v in &a[1..] {
            m = m.max(self.0.reduce_max(*v));
        }
        m
    }
    #[inline(always)]
    fn reduce_add_f64(self, a: Self::V) -> f64 {
        let mut sum = 0.0;
        for v in a {
            sum += self.0.reduce_add_f64(v);
        }
        sum
    }

    #[inline(always)]
    fn prefetch(self, p: *const f32) {
        self.0.prefetch(p);
    }
    #[inline(always)]
    fn prefetch_l2(self, p: *const f32) {
        self.0.prefetch_l2(p);
    }
    #[inline(always)]
    unsafe fn store_stream(self, p: *mut f32, v: Self::V) {
        for (j, v) in v.into_iter().enumerate() {
            // SAFETY: as `load`; `p + j·LANES` keeps the alignment of `p` to whole vectors.
            unsafe { self.0.store_stream(p.add(j * S::LANES), v) };
        }
    }
    #[inline(always)]
    fn fence(self) {
        self.0.fence();
    }

    #[inline(always)]
    fn eq(self, a: Self::V, b: Self::V) -> Self::M {
        let mut m = [self.0.eq(a[0], b[0]); N];
        for j in 1..N {
            m[j] = self.0.eq(a[j], b[j]);
        }
        m
    }
    #[inline(always)]
    fn lt(self, a: Self::V, b: Self::V) -> Self::M {
        let mut m = [self.0.lt(a[0], b[0]); N];
        for j in 1..N {
            m[j] = self.0.lt(a[j], b[j]);
        }
        m
    }
    #[inline(always)]
    fn is_nan(self, a: Self::V) -> Self::M {
        let mut m = [self.0.is_nan(a[0]); N];
        for j in 1..N {
            m[j] = self.0.is_nan(a[j]);
        }
        m
    }
    #[inline(always)]
    fn select(self, m: Self::M, a: Self::V, b: Self::V) -> Self::V {
        let mut r = [self.0.splat(0.0); N];
        for j in 0..N {
            r[j] = self.0.select(m[j], a[j], b[j]);
        }
        r
    }
    #[inline(always)]
    fn any(self, m: Self::M) -> bool {
        let mut any = false;
        for m in m {
            any |= self.0.any(m);
        }
        any
    }
    #[inline(always)]
    fn first_lanes(self, n: usize) -> Self::M {
        let mut m = [self.0.first_lanes(Self::lanes_in(0, n)); N];
        for (j, m) in m.iter_mut().enumerate().skip(1) {
            *m = self.0.first_lanes(Self::lanes_in(j, n));
        }
        m
    }

    /// `S`'s tile: the GEMM micro-kernels run on the ISA's own vectors.
    #[inline(always)]
    unsafe fn with_tile<T: TileOp>(self, op: T) -> T::Output {
        // SAFETY: forwarded.
        unsafe { self.0.with_tile(op) }
    }
}
