//! AVX2 + FMA + F16C: 8 lanes of f32. Tails use `vmaskmovps`, which never faults on masked
//! lanes. binary16 converts with F16C (`vcvtph2ps`/`vcvtps2ph`); bfloat16 widens with a shift
//! and narrows with the integer round-to-nearest-even recipe of [`bf16_rne`].

use std::arch::x86_64::*;

use super::{Simd, TileOp, Token};

/// Token proving the CPU has AVX2, FMA and F16C.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx2(());

impl Token for Avx2 {
    unsafe fn new_unchecked() -> Self {
        Avx2(())
    }
}

/// `TAIL[8 - n..][..8]` has its first `n` lanes all-ones: the mask of a partial access.
static TAIL: [i32; 16] = [-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0];

#[inline(always)]
fn tail_mask(n: usize) -> __m256i {
    debug_assert!(n <= 8);
    // SAFETY: `8 - n + 8 <= 16` elements of `TAIL` are read; AVX is implied by the token.
    unsafe { _mm256_loadu_si256(TAIL.as_ptr().add(8 - n).cast()) }
}

/// Sum of the 4 lanes of an SSE vector, as a tree.
#[inline(always)]
pub(crate) fn reduce_add_128(v: __m128) -> f32 {
    // SAFETY: SSE is baseline on x86-64.
    unsafe {
        let pairs = _mm_add_ps(v, _mm_movehl_ps(v, v));
        _mm_cvtss_f32(_mm_add_ss(pairs, _mm_shuffle_ps::<0b01>(pairs, pairs)))
    }
}

/// Maximum of the 4 lanes of an SSE vector.
#[inline(always)]
pub(crate) fn reduce_max_128(v: __m128) -> f32 {
    // SAFETY: SSE is baseline on x86-64.
    unsafe {
        let pairs = _mm_max_ps(v, _mm_movehl_ps(v, v));
        _mm_cvtss_f32(_mm_max_ss(pairs, _mm_shuffle_ps::<0b01>(pairs, pairs)))
    }
}

/// Sum of the 4 lanes of an f64 AVX vector, as a tree.
///
/// # Safety
/// The CPU must support AVX (the AVX2 and AVX-512 tokens prove it).
#[inline(always)]
pub(crate) unsafe fn reduce_add_pd256(v: __m256d) -> f64 {
    // SAFETY: AVX is available by the caller's promise.
    unsafe {
        let pairs = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd::<1>(v));
        _mm_cvtsd_f64(_mm_add_sd(pairs, _mm_unpackhi_pd(pairs, pairs)))
    }
}

/// `a + b`, or `max(a, b)` (NaN lanes of `a` dropped), lane by lane.
#[inline(always)]
fn pair<const MAX: bool>(_: Avx2, a: __m256, b: __m256) -> __m256 {
    // SAFETY: the token proves AVX2.
    unsafe {
        if MAX {
            _mm256_max_ps(a, b)
        } else {
            _mm256_add_ps(a, b)
        }
    }
}

/// The sum (or with `MAX` the maximum) of each of 16 vectors' lanes into `out`, with the tree
/// of `reduce_add` (`reduce_max`) for every vector.
#[inline(always)]
fn reduce_16<const MAX: bool>(s: Avx2, v: &[__m256; 16], out: &mut [f32; 16]) {
    // SAFETY: the token proves AVX2; the stores write the 16 floats of `out`.
    unsafe {
        // As `reduce_add`, level by level, the lanes of two vectors to each result: lanes
        // `l` and `l + 4` (128-bit halves), `l + 2`, `l + 1`.
        // `t[p]`: the halves of vectors `2p` (low half) and `2p + 1` (high half).
        // (Loops, not `array::from_fn`: an outlined closure loses the target features.)
        let mut t = [_mm256_setzero_ps(); 8];
        for (p, t) in t.iter_mut().enumerate() {
            let (a, b) = (v[2 * p], v[2 * p + 1]);
            *t = pair::<MAX>(
                s,
                _mm256_permute2f128_ps::<0x20>(a, b),
                _mm256_permute2f128_ps::<0x31>(a, b),
            );
        }
        // `u[q]`: the two partial sums of vectors `4q`, `4q + 2` in the low half, of
        // `4q + 1`, `4q + 3` in the high half.
        let mut u = [_mm256_setzero_ps(); 4];
        for (q, u) in u.iter_mut().enumerate() {
            let (a, b) = (t[2 * q], t[2 * q + 1]);
            *u = pair::<MAX>(s, _mm256_shuffle_ps::<0x44>(a, b), _mm256_shuffle_ps::<0xee>(a, b));
        }
        // Lane `c` of `z[r]` holds the sum of vector `8r + 2c` (`c < 4`), lane `4 + c`
        // that of `8r + 2c + 1`: put back in order.
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for r in 0..2 {
            let (a, b) = (u[2 * r], u[2 * r + 1]);
            let z = pair::<MAX>(s, _mm256_shuffle_ps::<0x88>(a, b), _mm256_shuffle_ps::<0xdd>(a, b));
            _mm256_storeu_ps(out.as_mut_ptr().add(8 * r), _mm256_permutevar8x32_ps(z, order));
        }
    }
}

/// The bfloat16 bits of each lane in the low half of its 32-bit lane, rounded to nearest
/// even: add `0x7fff` plus the lowest kept bit, keep the high half. That carries into the
/// exponent exactly as rounding should (up to ±∞ past the largest bfloat16), keeps
/// subnormals (unlike AVX512-BF16's `vcvtneps2bf16`, which flushes them), and a NaN becomes
/// the quiet NaN of its sign and high payload bits.
#[inline(always)]
fn bf16_rne(v: __m256) -> __m256i {
    // SAFETY: AVX2 is implied by the callers' tokens.
    unsafe {
        let b = _mm256_castps_si256(v);
        let high = _mm256_srli_epi32::<16>(b);
        let lsb = _mm256_and_si256(high, _mm256_set1_epi32(1));
        let rounded = _mm256_srli_epi32::<16>(_mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), lsb));
        let quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
        let nan = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
        _mm256_blendv_epi8(rounded, quiet, nan)
    }
}

// SAFETY (for every `unsafe` block below that only touches registers): a value of `Avx2`
// exists only once the CPU was checked for AVX2, FMA and F16C.
impl Simd for Avx2 {
    const LANES: usize = 8;
    const REGISTERS: usize = 16;
    type V = __m256;
    type M = __m256;

    #[inline(always)]
    unsafe fn with_tile<T: TileOp>(self, op: T) -> T::Output {
        // 12 of the 16 ymm registers as accumulators, 16 columns per tile.
        // SAFETY: forwarded from the caller.
        unsafe { op.eval::<Self, 6, 2>(self) }
    }

    #[inline(always)]
    fn splat(self, x: f32) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn load(self, p: *const f32) -> __m256 {
        // SAFETY: the caller guarantees 8 readable floats.
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32, v: __m256) {
        // SAFETY: the caller guarantees 8 writable floats.
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn load_partial(self, p: *const f32, n: usize, fill: f32) -> __m256 {
        // SAFETY: masked lanes are neither read nor faulted on; the first `n` are readable.
        unsafe {
            let m = tail_mask(n);
            let v = _mm256_maskload_ps(p, m);
            _mm256_blendv_ps(_mm256_set1_ps(fill), v, _mm256_castsi256_ps(m))
        }
    }
    #[inline(always)]
    unsafe fn store_stream(self, p: *mut f32, v: __m256) {
        debug_assert!((p as usize).is_multiple_of(32));
        // SAFETY: the caller guarantees 8 writable floats at a 32-byte aligned `p`.
        unsafe { _mm256_stream_ps(p, v) }
    }
    #[inline(always)]
    fn fence(self) {
        // SAFETY: SSE is part of x86-64.
        unsafe { _mm_sfence() }
    }
    #[inline(always)]
    unsafe fn store_partial(self, p: *mut f32, n: usize, v: __m256) {
        // SAFETY: only the first `n` lanes are written, and they are writable.
        unsafe { _mm256_maskstore_ps(p, tail_mask(n), v) }
    }
    #[inline(always)]
    unsafe fn load_f16(self, p: *const u16) -> __m256 {
        // SAFETY: the caller guarantees 8 readable values; F16C is part of the token.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }
    #[inline(always)]
    unsafe fn store_f16(self, p: *mut u16, v: __m256) {
        // SAFETY: the caller guarantees 8 writable values; F16C is part of the token.
        unsafe { _mm_storeu_si128(p.cast(), _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v)) }
    }
    #[inline(always)]
    unsafe fn load_bf16_pair(self, p: *const u32) -> (__m256, __m256) {
        // SAFETY: the caller guarantees 8 readable words.
        unsafe {
            let w = _mm256_loadu_si256(p.cast());
            (
                _mm256_castsi256_ps(_mm256_slli_epi32::<16>(w)),
                _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32(-65536))),
            )
        }
    }
    #[inline(always)]
    unsafe fn load_bf16(self, p: *const u16) -> __m256 {
        // SAFETY: the caller guarantees 8 readable values.
        unsafe {
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(
                p.cast(),
            ))))
        }
    }
    #[inline(always)]
    unsafe fn store_bf16(self, p: *mut u16, v: __m256) {
        // SAFETY: the caller guarantees 8 writable values.
        unsafe {
            let b = bf16_rne(v);
            let packed = _mm_packus_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256::<1>(b));
            _mm_storeu_si128(p.cast(), packed)
        }
    }
    #[inline(always)]
    fn add(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_add_ps(a, b) }
    }
    #[inline(always)]
    fn sub(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_sub_ps(a, b) }
    }
    #[inline(always)]
    fn mul(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_mul_ps(a, b) }
    }
    #[inline(always)]
    fn div(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_div_ps(a, b) }
    }
    #[inline(always)]
    fn mul_add(self, a: __m256, b: __m256, c: __m256) -> __m256 {
        // SAFETY: see the impl (FMA is part of the token).
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    fn max(self, a: __m256, b: __m256) -> __m256 {
        // `maxps` returns its second operand when either is NaN: put `a` there.
        // SAFETY: see the impl.
        unsafe { _mm256_max_ps(b, a) }
    }
    #[inline(always)]
    fn min(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_min_ps(b, a) }
    }
    #[inline(always)]
    fn round(self, a: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(a) }
    }
    #[inline(always)]
    fn pow2_of_shifted(self, t: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_castps_si256(t))) }
    }
    #[inline(always)]
    fn pow2i(self, n: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe {
            let e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
            _mm256_castsi256_ps(_mm256_slli_epi32::<23>(e))
        }
    }
    #[inline(always)]
    fn reduce_add(self, a: __m256) -> f32 {
        // SAFETY: see the impl.
        unsafe { reduce_add_128(_mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps::<1>(a))) }
    }
    #[inline(always)]
    fn reduce_add_16(self, v: &[__m256; 16], out: &mut [f32; 16]) {
        reduce_16::<false>(self, v, out);
    }
    #[inline(always)]
    fn reduce_max_16(self, v: &[__m256; 16], out: &mut [f32; 16]) {
        reduce_16::<true>(self, v, out);
    }
    #[inline(always)]
    fn reduce_max(self, a: __m256) -> f32 {
        // SAFETY: see the impl.
        unsafe { reduce_max_128(_mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps::<1>(a))) }
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
    fn reduce_add_f64(self, a: __m256) -> f64 {
        // SAFETY: see the impl (AVX2 implies AVX).
        unsafe {
            let lo = _mm256_cvtps_pd(_mm256_castps256_ps128(a));
            let hi = _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(a));
            reduce_add_pd256(_mm256_add_pd(lo, hi))
        }
    }
    #[inline(always)]
    fn eq(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_cmp_ps::<_CMP_EQ_OQ>(a, b) }
    }
    #[inline(always)]
    fn lt(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_cmp_ps::<_CMP_LT_OQ>(a, b) }
    }
    #[inline(always)]
    fn is_nan(self, a: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_cmp_ps::<_CMP_UNORD_Q>(a, a) }
    }
    #[inline(always)]
    fn select(self, m: __m256, a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_blendv_ps(b, a, m) }
    }
    #[inline(always)]
    fn any(self, m: __m256) -> bool {
        // SAFETY: see the impl.
        unsafe { _mm256_movemask_ps(m) != 0 }
    }
    #[inline(always)]
    fn first_lanes(self, n: usize) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_castsi256_ps(tail_mask(n)) }
    }
    #[inline(always)]
    unsafe fn transpose(self, src: *const f32, lds: usize, dst: *mut f32, ldd: usize) {
        // SAFETY: the rows read and written are those of the contract.
        unsafe {
            // Loops, not `array::from_fn`: an outlined closure loses the target features.
            let mut a = [_mm256_setzero_ps(); 8];
            for (r, x) in a.iter_mut().enumerate() {
                *x = _mm256_loadu_ps(src.add(r * lds));
            }
            // As on AVX-512: `u[4q + c]` holds, in its 128-bit lane `l`, column `4l + c` of
            // rows `4q..4q + 4`; output row `4l + c` pairs lane `l` of `u[c]` and `u[4 + c]`.
            let mut t = [_mm256_setzero_ps(); 8];
            for m in 0..4 {
                t[2 * m] = _mm256_unpacklo_ps(a[2 * m], a[2 * m + 1]);
                t[2 * m + 1] = _mm256_unpackhi_ps(a[2 * m], a[2 * m + 1]);
            }
            let mut u = [_mm256_setzero_ps(); 8];
            for q in 0..2 {
                u[4 * q] = _mm256_shuffle_ps::<0x44>(t[4 * q], t[4 * q + 2]);
                u[4 * q + 1] = _mm256_shuffle_ps::<0xee>(t[4 * q], t[4 * q + 2]);
                u[4 * q + 2] = _mm256_shuffle_ps::<0x44>(t[4 * q + 1], t[4 * q + 3]);
                u[4 * q + 3] = _mm256_shuffle_ps::<0xee>(t[4 * q + 1], t[4 * q + 3]);
            }
            for c in 0..4 {
                _mm256_storeu_ps(dst.add(c * ldd), _mm256_permute2f128_ps::<0x20>(u[c], u[4 + c]));
                _mm256_storeu_ps(dst.add((4 + c) * ldd), _mm256_permute2f128_ps::<0x31>(u[c], u[4 + c]));
            }
        }
    }
}
