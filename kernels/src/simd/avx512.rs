//! AVX-512 (f, bw, dq, vl) + FMA: 16 lanes of f32. Tails use mask registers; `ldexp` is
//! one `vscalefps`, which rounds once even into the subnormals. binary16 converts with
//! `vcvtph2ps`/`vcvtps2ph`; bfloat16 narrows with the integer round-to-nearest-even recipe
//! (not AVX512-BF16's `vcvtneps2bf16`, which flushes subnormal inputs and outputs to zero).

use std::arch::x86_64::*;

use super::avx2::{reduce_add_128, reduce_add_pd256, reduce_max_128};
use super::{Simd, TileOp, Token};

/// Token proving the CPU has AVX-512 f, bw, dq, vl and FMA.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx512(());

impl Token for Avx512 {
    unsafe fn new_unchecked() -> Self {
        Avx512(())
    }
}

#[inline(always)]
fn tail_mask(n: usize) -> __mmask16 {
    debug_assert!(n <= 16);
    ((1u32 << n) - 1) as __mmask16
}

/// binary16 bits of each lane, rounded to nearest even.
#[inline(always)]
fn f16_rne(v: __m512) -> __m256i {
    // SAFETY: AVX-512 f is implied by the callers' tokens.
    unsafe { _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v) }
}

/// The f32 values of 16 bfloat16 bit patterns (exact: a shift into the high half).
#[inline(always)]
fn bf16_widen(b: __m256i) -> __m512 {
    // SAFETY: AVX-512 f is implied by the callers' tokens.
    unsafe { _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(b))) }
}

/// bfloat16 bits of each lane, rounded to nearest even: the recipe of AVX2's `bf16_rne`
/// (add `0x7fff` plus the lowest kept bit, keep the high half; NaN → quiet NaN), then
/// `vpmovdw` to 16 bits.
#[inline(always)]
fn bf16_rne(v: __m512) -> __m256i {
    // SAFETY: AVX-512 f is implied by the callers' tokens.
    unsafe {
        let b = _mm512_castps_si512(v);
        let high = _mm512_srli_epi32::<16>(b);
        let lsb = _mm512_and_si512(high, _mm512_set1_epi32(1));
        let rounded = _mm512_srli_epi32::<16>(_mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)), lsb));
        let quiet = _mm512_or_si512(high, _mm512_set1_epi32(0x40));
        let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
        _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet))
    }
}

/// `a + b`, or `max(a, b)` (NaN lanes of `a` dropped), lane by lane.
#[inline(always)]
fn pair<const MAX: bool>(_: Avx512, a: __m512, b: __m512) -> __m512 {
    // SAFETY: the token proves AVX-512.
    unsafe {
        if MAX {
            _mm512_max_ps(a, b)
        } else {
            _mm512_add_ps(a, b)
        }
    }
}

/// The sum (or with `MAX` the maximum) of each of 16 vectors' lanes into `out`, with the tree
/// of `reduce_add` (`reduce_max`) for every vector.
#[inline(always)]
fn reduce_16<const MAX: bool>(s: Avx512, v: &[__m512; 16], out: &mut [f32; 16]) {
    // SAFETY: the token proves AVX-512; the store writes the 16 floats of `out`.
    unsafe {
        // As `reduce_add`, level by level, the lanes of two vectors to each result: lanes
        // `l` and `l + 8` (256-bit halves), `l + 4` (128-bit blocks), `l + 2`, `l + 1`.
        // `t[p]`: the halves of vectors `2p` (blocks 0, 1) and `2p + 1` (blocks 2, 3).
        // (Loops, not `array::from_fn`: an outlined closure loses the target features.)
        let mut t = [_mm512_setzero_ps(); 8];
        for (p, t) in t.iter_mut().enumerate() {
            let (a, b) = (v[2 * p], v[2 * p + 1]);
            *t = pair::<MAX>(
                s,
                _mm512_shuffle_f32x4::<0x44>(a, b),
                _mm512_shuffle_f32x4::<0xee>(a, b),
            );
        }
        // `u[q]`: block `m` holds vector `4q + m`'s four partial sums.
        let mut u = [_mm512_setzero_ps(); 4];
        for (q, u) in u.iter_mut().enumerate() {
            let (a, b) = (t[2 * q], t[2 * q + 1]);
            *u = pair::<MAX>(
                s,
                _mm512_shuffle_f32x4::<0x88>(a, b),
                _mm512_shuffle_f32x4::<0xdd>(a, b),
            );
        }
        // `w[r]`: block `m` holds the two partial sums of vectors `8r + m`, `8r + 4 + m`.
        let mut w = [_mm512_setzero_ps(); 2];
        for (r, w) in w.iter_mut().enumerate() {
            let (a, b) = (u[2 * r], u[2 * r + 1]);
            *w = pair::<MAX>(s, _mm512_shuffle_ps::<0x44>(a, b), _mm512_shuffle_ps::<0xee>(a, b));
        }
        // Lane `4m + c` holds the sum of vector `m + 4c`: put back in order.
        let z = pair::<MAX>(
            s,
            _mm512_shuffle_ps::<0x88>(w[0], w[1]),
            _mm512_shuffle_ps::<0xdd>(w[0], w[1]),
        );
        let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        _mm512_storeu_ps(out.as_mut_ptr(), _mm512_permutexvar_ps(order, z));
    }
}

// SAFETY (for every `unsafe` block below that only touches registers): a value of `Avx512`
// exists only once the CPU was checked for AVX-512 f, bw, dq, vl and FMA.
impl Simd for Avx512 {
    const LANES: usize = 16;
    const REGISTERS: usize = 32;
    type V = __m512;
    type M = __mmask16;

    #[inline(always)]
    unsafe fn with_tile<T: TileOp>(self, op: T) -> T::Output {
        // 24 of the 32 zmm registers as accumulators, 64 columns per tile: twice the keys per tile halve
        // the per-row cost of attention's online softmax, which made it faster than 12 × 2 on
        // attention and the GAU.
        // SAFETY: forwarded from the caller.
        unsafe { op.eval::<Self, 6, 4>(self) }
    }

    #[inline(always)]
    fn splat(self, x: f32) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn load(self, p: *const f32) -> __m512 {
        // SAFETY: the caller guarantees 16 readable floats.
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32, v: __m512) {
        // SAFETY: the caller guarantees 16 writable floats.
        unsafe { _mm512_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn load_partial(self, p: *const f32, n: usize, fill: f32) -> __m512 {
        // SAFETY: masked-off lanes are neither read nor faulted on.
        unsafe { _mm512_mask_loadu_ps(_mm512_set1_ps(fill), tail_mask(n), p) }
    }
    #[inline(always)]
    unsafe fn store_stream(self, p: *mut f32, v: __m512) {
        debug_assert!((p as usize).is_multiple_of(64));
        // SAFETY: the caller guarantees 16 writable floats at a 64-byte aligned `p`.
        unsafe { _mm512_stream_ps(p, v) }
    }
    #[inline(always)]
    fn fence(self) {
        // SAFETY: SSE is part of x86-64.
        unsafe { _mm_sfence() }
    }
    #[inline(always)]
    unsafe fn store_partial(self, p: *mut f32, n: usize, v: __m512) {
        // SAFETY: only the first `n` lanes are written, and they are writable.
        unsafe { _mm512_mask_storeu_ps(p, tail_mask(n), v) }
    }
    #[inline(always)]
    unsafe fn load_f16(self, p: *const u16) -> __m512 {
        // SAFETY: the caller guarantees 16 readable values.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) }
    }
    #[inline(always)]
    unsafe fn store_f16(self, p: *mut u16, v: __m512) {
        // SAFETY: the caller guarantees 16 writable values.
        unsafe { _mm256_storeu_si256(p.cast(), f16_rne(v)) }
    }
    #[inline(always)]
    unsafe fn load_bf16_pair(self, p: *const u32) -> (__m512, __m512) {
        // SAFETY: the caller guarantees 16 readable words.
        unsafe {
            let w = _mm512_loadu_si512(p.cast());
            (
                _mm512_castsi512_ps(_mm512_slli_epi32::<16>(w)),
                _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(-65536))),
            )
        }
    }
    #[inline(always)]
    unsafe fn load_bf16(self, p: *const u16) -> __m512 {
        // SAFETY: the caller guarantees 16 readable values.
        unsafe { bf16_widen(_mm256_loadu_si256(p.cast())) }
    }
    #[inline(always)]
    unsafe fn store_bf16(self, p: *mut u16, v: __m512) {
        // SAFETY: the caller guarantees 16 writable values.
        unsafe { _mm256_storeu_si256(p.cast(), bf16_rne(v)) }
    }
    #[inline(always)]
    unsafe fn load_partial_f16(self, p: *const u16, n: usize, fill: f32) -> __m512 {
        // SAFETY: masked-off lanes are neither read nor faulted on (AVX-512 bw + vl).
        unsafe {
            let v = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail_mask(n), p.cast()));
            _mm512_mask_blend_ps(tail_mask(n), _mm512_set1_ps(fill), v)
        }
    }
    #[inline(always)]
    unsafe fn store_partial_f16(self, p: *mut u16, n: usize, v: __m512) {
        // SAFETY: only the first `n` values are written, and they are writable.
        unsafe { _mm256_mask_storeu_epi16(p.cast(), tail_mask(n), f16_rne(v)) }
    }
    #[inline(always)]
    unsafe fn load_partial_bf16(self, p: *const u16, n: usize, fill: f32) -> __m512 {
        // SAFETY: as `load_partial_f16`.
        unsafe {
            let v = bf16_widen(_mm256_maskz_loadu_epi16(tail_mask(n), p.cast()));
            _mm512_mask_blend_ps(tail_mask(n), _mm512_set1_ps(fill), v)
        }
    }
    #[inline(always)]
    unsafe fn store_partial_bf16(self, p: *mut u16, n: usize, v: __m512) {
        // SAFETY: as `store_partial_f16`.
        unsafe { _mm256_mask_storeu_epi16(p.cast(), tail_mask(n), bf16_rne(v)) }
    }
    #[inline(always)]
    fn add(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_add_ps(a, b) }
    }
    #[inline(always)]
    fn sub(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_sub_ps(a, b) }
    }
    #[inline(always)]
    fn mul(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_mul_ps(a, b) }
    }
    #[inline(always)]
    fn div(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_div_ps(a, b) }
    }
    #[inline(always)]
    fn mul_add(self, a: __m512, b: __m512, c: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    fn max(self, a: __m512, b: __m512) -> __m512 {
        // `vmaxps` returns its second operand when either is NaN: put `a` there.
        // SAFETY: see the impl.
        unsafe { _mm512_max_ps(b, a) }
    }
    #[inline(always)]
    fn min(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_min_ps(b, a) }
    }
    #[inline(always)]
    fn round(self, a: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(a) }
    }
    #[inline(always)]
    fn pow2_of_shifted(self, t: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_castps_si512(t))) }
    }
    #[inline(always)]
    fn pow2i(self, n: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe {
            let e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
            _mm512_castsi512_ps(_mm512_slli_epi32::<23>(e))
        }
    }
    #[inline(always)]
    fn ldexp(self, a: __m512, n: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_scalef_ps(a, n) }
    }
    #[inline(always)]
    fn reduce_add(self, a: __m512) -> f32 {
        // SAFETY: see the impl.
        unsafe {
            let h = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps::<1>(a));
            reduce_add_128(_mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h)))
        }
    }
    #[inline(always)]
    fn reduce_max(self, a: __m512) -> f32 {
        // SAFETY: see the impl.
        unsafe {
            let h = _mm256_max_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps::<1>(a));
            reduce_max_128(_mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h)))
        }
    }
    #[inline(always)]
    fn prefetch(self, p: *const f32) {
        // SAFETY: a prefetch never faults, whatever the address; SSE is baseline on x86-64.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) }
    }
    #[inline(always)]
    fn prefetch_l2(self, p: *const f32) {
        // SAFETY: as `prefetch`.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(p.cast()) }
    }
    #[inline(always)]
    fn reduce_add_f64(self, a: __m512) -> f64 {
        // SAFETY: see the impl (AVX-512 implies AVX).
        unsafe {
            let lo = _mm512_cvtps_pd(_mm512_castps512_ps256(a));
            let hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps::<1>(a));
            let s = _mm512_add_pd(lo, hi);
            reduce_add_pd256(_mm256_add_pd(_mm512_castpd512_pd256(s), _mm512_extractf64x4_pd::<1>(s)))
        }
    }
    #[inline(always)]
    fn reduce_add_16(self, v: &[__m512; 16], out: &mut [f32; 16]) {
        reduce_16::<false>(self, v, out);
    }
    #[inline(always)]
    fn reduce_max_16(self, v: &[__m512; 16], out: &mut [f32; 16]) {
        reduce_16::<true>(self, v, out);
    }
    #[inline(always)]
    fn eq(self, a: __m512, b: __m512) -> __mmask16 {
        // SAFETY: see the impl.
        unsafe { _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(a, b) }
    }
    #[inline(always)]
    fn lt(self, a: __m512, b: __m512) -> __mmask16 {
        // SAFETY: see the impl.
        unsafe { _mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, b) }
    }
    #[inline(always)]
    fn is_nan(self, a: __m512) -> __mmask16 {
        // SAFETY: see the impl.
        unsafe { _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, a) }
    }
    #[inline(always)]
    fn select(self, m: __mmask16, a: __m512, b: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_mask_blend_ps(m, b, a) }
    }
    #[inline(always)]
    fn any(self, m: __mmask16) -> bool {
        m != 0
    }
    #[inline(always)]
    fn first_lanes(self, n: usize) -> __mmask16 {
        tail_mask(n)
    }
    #[inline(always)]
    unsafe fn transpose(self, src: *const f32, lds: usize, dst: *mut f32, ldd: usize) {
        // SAFETY: the rows read and written are those of the contract.
        unsafe {
            // Loops, not `array::from_fn`: an outlined closure loses the target features.
            let mut a = [_mm512_setzero_ps(); 16];
            for (r, x) in a.iter_mut().enumerate() {
                *x = _mm512_loadu_ps(src.add(r * lds));
            }
            // Pairs of rows interleaved, then groups of four: `u[4q + c]` holds, in its
            // 128-bit lane `l`, column `4l + c` of rows `4q..4q + 4`.
            let mut t = [_mm512_setzero_ps(); 16];
            for m in 0..8 {
                t[2 * m] = _mm512_unpacklo_ps(a[2 * m], a[2 * m + 1]);
                t[2 * m + 1] = _mm512_unpackhi_ps(a[2 * m], a[2 * m + 1]);
            }
            let mut u = [_mm512_setzero_ps(); 16];
            for q in 0..4 {
                u[4 * q] = _mm512_shuffle_ps::<0x44>(t[4 * q], t[4 * q + 2]);
                u[4 * q + 1] = _mm512_shuffle_ps::<0xee>(t[4 * q], t[4 * q + 2]);
                u[4 * q + 2] = _mm512_shuffle_ps::<0x44>(t[4 * q + 1], t[4 * q + 3]);
                u[4 * q + 3] = _mm512_shuffle_ps::<0xee>(t[4 * q + 1], t[4 * q + 3]);
            }
            // Output row `4l + c` is lane `l` of `u[c], u[4 + c], u[8 + c], u[12 + c]`: a
            // 4 × 4 transpose of 128-bit lanes.
            for c in 0..4 {
                let v0 = _mm512_shuffle_f32x4::<0x44>(u[c], u[4 + c]);
                let v1 = _mm512_shuffle_f32x4::<0xee>(u[c], u[4 + c]);
                let v2 = _mm512_shuffle_f32x4::<0x44>(u[8 + c], u[12 + c]);
                let v3 = _mm512_shuffle_f32x4::<0xee>(u[8 + c], u[12 + c]);
                _mm512_storeu_ps(dst.add(c * ldd), _mm512_shuffle_f32x4::<0x88>(v0, v2));
                _mm512_storeu_ps(dst.add((4 + c) * ldd), _mm512_shuffle_f32x4::<0xdd>(v0, v2));
                _mm512_storeu_ps(dst.add((8 + c) * ldd), _mm512_shuffle_f32x4::<0x88>(v1, v3));
                _mm512_storeu_ps(dst.add((12 + c) * ldd), _mm512_shuffle_f32x4::<0xdd>(v1, v3));
            }
        }
    }
}
