//! aarch64 Advanced SIMD: 4 lanes of f32. NEON has no masked loads, so tails go through a
//! padded stack buffer of one vector. binary16 converts with `fcvtl`/`fcvtn` (inline
//! assembly: the f16 intrinsics are not stable Rust), which round to nearest even under the
//! default FPCR; bfloat16 widens with a shift and narrows with the integer
//! round-to-nearest-even recipe of the x86 paths.

use std::arch::aarch64::*;

use super::{Simd, TileOp, Token};

/// Token of the NEON path; NEON is baseline on aarch64.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Neon(());

impl Token for Neon {
    unsafe fn new_unchecked() -> Self {
        Neon(())
    }
}

/// The index of each lane, for [`Simd::first_lanes`].
static LANE_INDEX: [u32; 4] = [0, 1, 2, 3];

// SAFETY (for every `unsafe` block below that only touches registers): NEON is part of
// the aarch64 baseline, so the intrinsics are always executable.
impl Simd for Neon {
    const LANES: usize = 4;
    const REGISTERS: usize = 32;
    type V = float32x4_t;
    type M = uint32x4_t;

    #[inline(always)]
    unsafe fn with_tile<T: TileOp>(self, op: T) -> T::Output {
        // 24 of the 32 q registers as accumulators, 16 columns per tile.
        // SAFETY: forwarded from the caller.
        unsafe { op.eval::<Self, 6, 4>(self) }
    }

    #[inline(always)]
    fn splat(self, x: f32) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vdupq_n_f32(x) }
    }
    #[inline(always)]
    unsafe fn load(self, p: *const f32) -> float32x4_t {
        // SAFETY: the caller guarantees 4 readable floats.
        unsafe { vld1q_f32(p) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32, v: float32x4_t) {
        // SAFETY: the caller guarantees 4 writable floats.
        unsafe { vst1q_f32(p, v) }
    }
    #[inline(always)]
    unsafe fn load_partial(self, p: *const f32, n: usize, fill: f32) -> float32x4_t {
        debug_assert!(n < 4);
        let mut buf = [fill; 4];
        // SAFETY: `n` floats are readable at `p`; `buf` holds 4.
        unsafe {
            std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), n);
            vld1q_f32(buf.as_ptr())
        }
    }
    #[inline(always)]
    unsafe fn store_partial(self, p: *mut f32, n: usize, v: float32x4_t) {
        debug_assert!(n < 4);
        let mut buf = [0.0f32; 4];
        // SAFETY: `buf` holds 4 floats; `n` floats are writable at `p`.
        unsafe {
            vst1q_f32(buf.as_mut_ptr(), v);
            std::ptr::copy_nonoverlapping(buf.as_ptr(), p, n);
        }
    }
    #[inline(always)]
    unsafe fn load_f16(self, p: *const u16) -> float32x4_t {
        // SAFETY: the caller guarantees 4 readable values; `fcvtl` only touches registers.
        unsafe {
            let h = vld1_u16(p);
            let r: float32x4_t;
            std::arch::asm!("fcvtl {0:v}.4s, {1:v}.4h", out(vreg) r, in(vreg) h, options(pure, nomem, nostack, preserves_flags));
            r
        }
    }
    #[inline(always)]
    unsafe fn store_f16(self, p: *mut u16, v: float32x4_t) {
        // SAFETY: the caller guarantees 4 writable values; `fcvtn` only touches registers.
        unsafe {
            let h: uint16x4_t;
            std::arch::asm!("fcvtn {0:v}.4h, {1:v}.4s", out(vreg) h, in(vreg) v, options(pure, nomem, nostack, preserves_flags));
            vst1_u16(p, h)
        }
    }
    #[inline(always)]
    unsafe fn load_bf16_pair(self, p: *const u32) -> (float32x4_t, float32x4_t) {
        // SAFETY: the caller guarantees 4 readable words.
        unsafe {
            let w = vld1q_u32(p);
            (
                vreinterpretq_f32_u32(vshlq_n_u32::<16>(w)),
                vreinterpretq_f32_u32(vandq_u32(w, vdupq_n_u32(0xffff_0000))),
            )
        }
    }
    #[inline(always)]
    unsafe fn load_bf16(self, p: *const u16) -> float32x4_t {
        // SAFETY: the caller guarantees 4 readable values.
        unsafe { vreinterpretq_f32_u32(vshll_n_u16::<16>(vld1_u16(p))) }
    }
    #[inline(always)]
    unsafe fn store_bf16(self, p: *mut u16, v: float32x4_t) {
        // SAFETY: the caller guarantees 4 writable values.
        unsafe {
            let b = vreinterpretq_u32_f32(v);
            let high = vshrq_n_u32::<16>(b);
            let lsb = vandq_u32(high, vdupq_n_u32(1));
            let rounded = vshrq_n_u32::<16>(vaddq_u32(vaddq_u32(b, vdupq_n_u32(0x7fff)), lsb));
            let quiet = vorrq_u32(high, vdupq_n_u32(0x40));
            let nan = vmvnq_u32(vceqq_f32(v, v));
            vst1_u16(p, vmovn_u32(vbslq_u32(nan, quiet, rounded)))
        }
    }
    #[inline(always)]
    fn add(self, a: float32x4_t, b: float32x4_t) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vaddq_f32(a, b) }
    }
    #[inline(always)]
    fn sub(self, a: float32x4_t, b: float32x4_t) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vsubq_f32(a, b) }
    }
    #[inline(always)]
    fn mul(self, a: float32x4_t, b: float32x4_t) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vmulq_f32(a, b) }
    }
    #[inline(always)]
    fn div(self, a: float32x4_t, b: float32x4_t) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vdivq_f32(a, b) }
    }
    #[inline(always)]
    fn mul_add(self, a: float32x4_t, b: float32x4_t, c: float32x4_t) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vfmaq_f32(c, a, b) }
    }
    #[inline(always)]
    fn max(self, a: float32x4_t, b: float32x4_t) -> float32x4_t {
        // `fmax` returns NaN if either operand is NaN.
        // SAFETY: see the impl.
        unsafe { vmaxq_f32(a, b) }
    }
    #[inline(always)]
    fn min(self, a: float32x4_t, b: float32x4_t) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vminq_f32(a, b) }
    }
    #[inline(always)]
    fn round(self, a: float32x4_t) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vrndnq_f32(a) }
    }
    #[inline(always)]
    fn pow2_of_shifted(self, t: float32x4_t) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vreinterpretq_f32_u32(vshlq_n_u32::<23>(vreinterpretq_u32_f32(t))) }
    }
    #[inline(always)]
    fn pow2i(self, n: float32x4_t) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe {
            let e = vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127));
            vreinterpretq_f32_s32(vshlq_n_s32::<23>(e))
        }
    }
    #[inline(always)]
    fn reduce_add(self, a: float32x4_t) -> f32 {
        // Pairwise, to keep the tree shape of the x86 reductions.
        // SAFETY: see the impl.
        unsafe {
            let pairs = vpaddq_f32(a, a);
            vgetq_lane_f32::<0>(vpaddq_f32(pairs, pairs))
        }
    }
    #[inline(always)]
    fn reduce_add_16(self, v: &[float32x4_t; 16], out: &mut [f32; 16]) {
        // SAFETY: see the impl; the stores write the 16 floats of `out`.
        unsafe {
            // As `reduce_add`, pairwise: lanes `0 + 1`, `2 + 3` of two vectors at once, then
            // the pairs of four vectors, whose sums come out in order.
            // (A loop, not `array::from_fn`: an outlined closure loses the target features.)
            let mut t = [vdupq_n_f32(0.0); 8];
            for (p, t) in t.iter_mut().enumerate() {
                *t = vpaddq_f32(v[2 * p], v[2 * p + 1]);
            }
            for q in 0..4 {
                vst1q_f32(out.as_mut_ptr().add(4 * q), vpaddq_f32(t[2 * q], t[2 * q + 1]));
            }
        }
    }
    #[inline(always)]
    fn reduce_max(self, a: float32x4_t) -> f32 {
        // SAFETY: see the impl.
        unsafe { vmaxvq_f32(a) }
    }
    #[inline(always)]
    fn eq(self, a: float32x4_t, b: float32x4_t) -> uint32x4_t {
        // SAFETY: see the impl.
        unsafe { vceqq_f32(a, b) }
    }
    #[inline(always)]
    fn lt(self, a: float32x4_t, b: float32x4_t) -> uint32x4_t {
        // SAFETY: see the impl.
        unsafe { vcltq_f32(a, b) }
    }
    #[inline(always)]
    fn is_nan(self, a: float32x4_t) -> uint32x4_t {
        // SAFETY: see the impl.
        unsafe { vmvnq_u32(vceqq_f32(a, a)) }
    }
    #[inline(always)]
    fn select(self, m: uint32x4_t, a: float32x4_t, b: float32x4_t) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vbslq_f32(m, a, b) }
    }
    #[inline(always)]
    fn any(self, m: uint32x4_t) -> bool {
        // SAFETY: see the impl.
        unsafe { vmaxvq_u32(m) != 0 }
    }
    #[inline(always)]
    fn first_lanes(self, n: usize) -> uint32x4_t {
        debug_assert!(n <= 4);
        // SAFETY: `LANE_INDEX` holds the 4 `u32` that `vld1q_u32` reads (it has no alignment
        // requirement); the rest only touches registers, see the impl.
        unsafe { vcltq_u32(vld1q_u32(LANE_INDEX.as_ptr()), vdupq_n_u32(n as u32)) }
    }
    #[inline(always)]
    fn reduce_add_f64(self, a: float32x4_t) -> f64 {
        // SAFETY: see the impl.
        unsafe {
            let lo = vcvt_f64_f32(vget_low_f32(a));
            let hi = vcvt_high_f64_f32(a);
            vaddvq_f64(vaddq_f64(lo, hi))
        }
    }
}
