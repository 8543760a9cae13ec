//! The thin vector layer: one trait, one zero-sized token type per ISA.
//!
//! The trait holds primitives only (load, store, arithmetic, compare, reduce); every
//! algorithm is written once, generic over it, in `math/`, `softmax/`, … Having a token
//! value proves the CPU has the ISA's features (the idea of pulp's tokens), which is what
//! makes the register-only methods safe to call. Memory methods stay `unsafe`: they take
//! raw pointers, and the caller proves the lanes they touch are in bounds.
//!
//! The methods are `#[inline(always)]` and carry no `#[target_feature]`: they are inlined
//! into the per-ISA entry functions of `dispatch.rs`, which do carry it, so the whole kernel
//! is compiled for that ISA. [`lockstep::Lockstep`] drives several vectors of an ISA as one,
//! so that a generic body interleaves independent vectors step by step.

pub(crate) mod lockstep;
pub(crate) mod scalar;

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;
#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;

/// A vector of `LANES` f32 lanes and the primitives every kernel is built from.
///
/// NaN convention of `max`/`min`: if `a` is NaN the result is NaN; if only `b` is NaN the
/// result is unspecified (x86 returns `a`, NEON NaN). Algorithms that must propagate NaN
/// say how they do it.
pub(crate) trait Simd: Copy + Send + Sync + 'static {
    /// Number of f32 lanes.
    const LANES: usize;
    /// Number of architectural vector registers (16 for AVX2 and the scalar path, 32 for
    /// AVX-512 and NEON): how many vectors a loop body can hold without spilling.
    const REGISTERS: usize;
    /// The f32 vector.
    type V: Copy;
    /// A per-lane boolean.
    type M: Copy;

    fn splat(self, x: f32) -> Self::V;

    /// Loads `LANES` floats.
    ///
    /// # Safety
    /// `p..p + LANES` must be readable.
    unsafe fn load(self, p: *const f32) -> Self::V;

    /// Stores `LANES` floats.
    ///
    /// # Safety
    /// `p..p + LANES` must be writable.
    unsafe fn store(self, p: *mut f32, v: Self::V);

    /// Loads the first `n < LANES` floats, filling the other lanes with `fill`. Never touches
    /// memory past `p + n`.
    ///
    /// # Safety
    /// `p..p + n` must be readable.
    unsafe fn load_partial(self, p: *const f32, n: usize, fill: f32) -> Self::V;

    /// Stores the first `n < LANES` lanes. Never touches memory past `p + n`.
    ///
    /// # Safety
    /// `p..p + n` must be writable.
    unsafe fn store_partial(self, p: *mut f32, n: usize, v: Self::V);

    /// Loads `LANES` IEEE binary16 values (given by their bits), widened exactly.
    ///
    /// # Safety
    /// `p..p + LANES` must be readable.
    unsafe fn load_f16(self, p: *const u16) -> Self::V;

    /// Stores `LANES` lanes as binary16, rounded to nearest even (overflow to ±∞, gradual
    /// underflow through the f16 subnormals, NaN stays NaN).
    ///
    /// # Safety
    /// `p..p + LANES` must be writable.
    unsafe fn store_f16(self, p: *mut u16, v: Self::V);

    /// Loads `LANES` bfloat16 values (given by their bits), widened exactly.
    ///
    /// # Safety
    /// `p..p + LANES` must be readable.
    unsafe fn load_bf16(self, p: *const u16) -> Self::V;

    /// Stores `LANES` lanes as bfloat16, rounded to nearest even (subnormals kept, NaN stays
    /// a quiet NaN of the same sign).
    ///
    /// # Safety
    /// `p..p + LANES` must be writable.
    unsafe fn store_bf16(self, p: *mut u16, v: Self::V);

    /// Loads two vectors of bfloat16 values packed in pairs: `LANES` 32-bit words, each holding
    /// lane `i` of the first vector in its low half and lane `i` of the second in its high
    /// half, both widened exactly. One load and two integer operations for two vectors, with
    /// no shuffle: the layout of the bf16 weights of `linear`.
    ///
    /// # Safety
    /// `p..p + LANES` must be readable.
    unsafe fn load_bf16_pair(self, p: *const u32) -> (Self::V, Self::V);

    /// [`Simd::load_f16`] of the first `n < LANES` values, `fill` elsewhere. Never touches
    /// memory past `p + n`. The default goes through a stack buffer.
    ///
    /// # Safety
    /// `p..p + n` must be readable.
    #[inline(always)]
    unsafe fn load_partial_f16(self, p: *const u16, n: usize, fill: f32) -> Self::V {
        // SAFETY: forwarded; the buffer holds `MAX_LANES ≥ LANES` values.
        unsafe {
            self.select(
                self.first_lanes(n),
                self.load_f16(stage_in(p, n).as_ptr()),
                self.splat(fill),
            )
        }
    }

    /// [`Simd::store_f16`] of the first `n < LANES` lanes. Never touches memory past `p + n`.
    ///
    /// # Safety
    /// `p..p + n` must be writable.
    #[inline(always)]
    unsafe fn store_partial_f16(self, p: *mut u16, n: usize, v: Self::V) {
        let mut buf = [0u16; MAX_LANES];
        // SAFETY: the buffer holds `MAX_LANES ≥ LANES` values; `n` of them go to `p`.
        unsafe {
            self.store_f16(buf.as_mut_ptr(), v);
            std::ptr::copy_nonoverlapping(buf.as_ptr(), p, n);
        }
    }

    /// [`Simd::load_bf16`] of the first `n < LANES` values, `fill` elsewhere.
    ///
    /// # Safety
    /// `p..p + n` must be readable.
    #[inline(always)]
    unsafe fn load_partial_bf16(self, p: *const u16, n: usize, fill: f32) -> Self::V {
        // SAFETY: as `load_partial_f16`.
        unsafe {
            self.select(
                self.first_lanes(n),
                self.load_bf16(stage_in(p, n).as_ptr()),
                self.splat(fill),
            )
        }
    }

    /// [`Simd::store_bf16`] of the first `n < LANES` lanes.
    ///
    /// # Safety
    /// `p..p + n` must be writable.
    #[inline(always)]
    unsafe fn store_partial_bf16(self, p: *mut u16, n: usize, v: Self::V) {
        let mut buf = [0u16; MAX_LANES];
        // SAFETY: as `store_partial_f16`.
        unsafe {
            self.store_bf16(buf.as_mut_ptr(), v);
            std::ptr::copy_nonoverlapping(buf.as_ptr(), p, n);
        }
    }

    fn add(self, a: Self::V, b: Self::V) -> Self::V;
    fn sub(self, a: Self::V, b: Self::V) -> Self::V;
    fn mul(self, a: Self::V, b: Self::V) -> Self::V;
    fn div(self, a: Self::V, b: Self::V) -> Self::V;
    /// `a·b + c` with a single rounding.
    fn mul_add(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    fn max(self, a: Self::V, b: Self::V) -> Self::V;
    fn min(self, a: Self::V, b: Self::V) -> Self::V;
    /// Rounds to the nearest integer, ties to even.
    fn round(self, a: Self::V) -> Self::V;
    /// `2ⁿ` for lanes holding an integral `n ∈ [−127, 127]`; `n = −127` gives `+0` (the
    /// flush that `exp` of large negative arguments relies on).
    fn pow2i(self, n: Self::V) -> Self::V;
    /// The bit pattern of each lane shifted left by 23, as a float: for a lane `t` in
    /// `[2²³, 2²⁴)` whose integer value is `≡ n + 127 (mod 2⁹)`, `n ∈ [−127, 127]`, that is
    /// `2ⁿ` (`+0` for `n = −127`). With `t = x + 1.5·2²³ + 127` it is `2^round(x)` in one
    /// instruction, with `round(x) = t − (1.5·2²³ + 127)` exactly (see `math::exp`).
    fn pow2_of_shifted(self, t: Self::V) -> Self::V;

    /// `a·2ⁿ` for integral `n ∈ [−252, 254]`, overflowing to ±∞ and underflowing gradually
    /// through the subnormals, with at most two roundings (one where the ISA has `scalef`).
    #[inline(always)]
    fn ldexp(self, a: Self::V, n: Self::V) -> Self::V {
        let half = self.round(self.mul(n, self.splat(0.5)));
        let rest = self.sub(n, half);
        self.mul(self.mul(a, self.pow2i(half)), self.pow2i(rest))
    }

    /// Sum of the lanes (a balanced tree, so the rounding error grows with log₂ LANES).
    fn reduce_add(self, a: Self::V) -> f32;
    /// Maximum of the lanes (NaN lanes may be dropped).
    fn reduce_max(self, a: Self::V) -> f32;
    /// Sum of the lanes in f64: each lane converted exactly, then added as a tree, so the only
    /// rounding is f64's (a relative error ≤ log₂ LANES · 2⁻⁵³). Statistics reductions use it.
    fn reduce_add_f64(self, a: Self::V) -> f64;
    /// [`reduce_add`](Simd::reduce_add) of each of 16 vectors, bit for bit (the same tree of
    /// the same additions for every vector): `out[r]` is the sum of `v[r]`. By default one
    /// vector at a time; the vector ISAs run the tree's levels with the vectors transposed,
    /// several vectors' lanes to each instruction, and store the sums whole. (LayerNorm's
    /// short rows reduce sixteen rows with it and one row with `reduce_add`, so the test
    /// `short_rows_by_groups_match_the_row_loop_bit_for_bit` holds it to that on every ISA:
    /// it fails when a level adds its lanes in another order.)
    #[inline(always)]
    fn reduce_add_16(self, v: &[Self::V; 16], out: &mut [f32; 16]) {
        for (o, v) in out.iter_mut().zip(v) {
            *o = self.reduce_add(*v);
        }
    }
    /// [`reduce_max`](Simd::reduce_max) of each of 16 vectors: `out[r]` is the maximum of
    /// `v[r]`, by the same tree for every vector, so which NaN lanes are dropped depends on the
    /// lanes' positions only, not on `r`. By default one vector at a time; the x86 ISAs run it
    /// transposed as [`reduce_add_16`](Simd::reduce_add_16).
    #[inline(always)]
    fn reduce_max_16(self, v: &[Self::V; 16], out: &mut [f32; 16]) {
        for (o, v) in out.iter_mut().zip(v) {
            *o = self.reduce_max(*v);
        }
    }
    /// Hints that the cache line holding `p` will be read soon. Never faults, so `p` need not
    /// point to valid memory. The default does nothing.
    #[inline(always)]
    fn prefetch(self, p: *const f32) {
        let _ = p;
    }
    /// Hints that the cache line holding `p` will be read, but not before a while: fetched
    /// into the level-2 cache rather than the level-1 (x86's `prefetcht1`), so that lines
    /// fetched well ahead neither wait in nor crowd the small level-1 cache. Never faults. The
    /// default does nothing.
    #[inline(always)]
    fn prefetch_l2(self, p: *const f32) {
        let _ = p;
    }

    /// Stores `LANES` floats with a streaming (non-temporal) store where the ISA has one: the
    /// line goes to memory without being read first or kept in cache. The default stores
    /// ordinarily. A caller that streamed calls [`Simd::fence`] before returning.
    ///
    /// # Safety
    /// `p..p + LANES` must be writable and `p` aligned to `4·LANES` bytes.
    #[inline(always)]
    unsafe fn store_stream(self, p: *mut f32, v: Self::V) {
        // SAFETY: forwarded.
        unsafe { self.store(p, v) }
    }

    /// Orders the streaming stores before it before every later store (x86's `sfence`): what
    /// a kernel streamed is then seen like ordinary stores by whoever synchronizes with it.
    /// The default, for ISAs without streaming stores, does nothing.
    #[inline(always)]
    fn fence(self) {}

    fn eq(self, a: Self::V, b: Self::V) -> Self::M;
    fn lt(self, a: Self::V, b: Self::V) -> Self::M;
    /// Lanes where `a` is NaN.
    fn is_nan(self, a: Self::V) -> Self::M;
    /// `a` where `m` is set, else `b`.
    fn select(self, m: Self::M, a: Self::V, b: Self::V) -> Self::V;
    fn any(self, m: Self::M) -> bool;
    /// The lanes with index `< n` (for `n ≤ LANES`).
    fn first_lanes(self, n: usize) -> Self::M;

    /// Runs `op` with this ISA's register tile for the GEMM micro-kernels: `MR` rows by `NV`
    /// vectors, whose `MR·NV` accumulators, `NV` loaded vectors and one broadcast fit the
    /// register file. The per-ISA files state the choice and its reason.
    ///
    /// # Safety
    /// As [`TileOp::eval`] for `op`.
    unsafe fn with_tile<T: TileOp>(self, op: T) -> T::Output;

    /// Transposes a `LANES × LANES` block: `dst[c·ldd + r] = src[r·lds + c]`. Packing keys for
    /// `Q·Kᵀ` is this; element by element it cost attention 5–7% on AVX-512. The default
    /// moves one float at a time; x86 shuffles in registers.
    ///
    /// # Safety
    /// `src` covers `LANES` rows of `LANES` floats at stride `lds`, `dst` covers `LANES` rows
    /// of `LANES` floats at stride `ldd`, and the two do not overlap.
    #[inline(always)]
    unsafe fn transpose(self, src: *const f32, lds: usize, dst: *mut f32, ldd: usize) {
        for r in 0..Self::LANES {
            for c in 0..Self::LANES {
                // SAFETY: inside both blocks (the contract).
                unsafe { *dst.add(c * ldd + r) = *src.add(r * lds + c) };
            }
        }
    }
}

/// An operation generic over the register tile of the GEMM micro-kernels, run by
/// [`Simd::with_tile`] with the ISA's own tile (the visitor of matrixmultiply's `GemmSelect`:
/// the tile never names what runs on it).
pub(crate) trait TileOp {
    /// What the operation returns.
    type Output;

    /// Runs the operation with a tile of `MR` rows by `NV` vectors of `S`.
    ///
    /// # Safety
    /// What the operation's type documents of its fields.
    unsafe fn eval<S: Simd, const MR: usize, const NV: usize>(self, s: S) -> Self::Output;
}

/// The widest vector of any ISA, in f32 lanes.
pub(crate) const MAX_LANES: usize = 16;

/// The first `n` 16-bit values at `p`, zero-padded to a full vector.
///
/// # Safety
/// `p..p + n` must be readable, `n ≤ MAX_LANES`.
#[inline(always)]
unsafe fn stage_in(p: *const u16, n: usize) -> [u16; MAX_LANES] {
    debug_assert!(n <= MAX_LANES);
    let mut buf = [0u16; MAX_LANES];
    // SAFETY: `n` values are readable at `p` and fit the buffer.
    unsafe { std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), n) };
    buf
}

/// The token of one ISA: a value of this type exists only where the CPU has the ISA.
pub(crate) trait Token: Simd {
    /// # Safety
    /// The CPU must support the ISA (see [`crate::Isa::check`]).
    unsafe fn new_unchecked() -> Self;
}
