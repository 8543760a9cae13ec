//! The portable path: a "vector" of one f32. The generic bodies unroll across several
//! accumulators, so this still keeps a superscalar core busy, and it is the baseline every
//! report ratio is taken against.

use super::{Simd, TileOp, Token};

/// Token of the portable path; always constructible.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Scalar;

impl Token for Scalar {
    unsafe fn new_unchecked() -> Self {
        Scalar
    }
}

impl Simd for Scalar {
    const LANES: usize = 1;
    const REGISTERS: usize = 16;
    type V = f32;
    type M = bool;

    #[inline(always)]
    unsafe fn with_tile<T: TileOp>(self, op: T) -> T::Output {
        // 16 accumulators: what 16 general FP registers hold without spilling.
        // SAFETY: forwarded from the caller.
        unsafe { op.eval::<Self, 4, 4>(self) }
    }

    #[inline(always)]
    fn splat(self, x: f32) -> f32 {
        x
    }
    #[inline(always)]
    unsafe fn load(self, p: *const f32) -> f32 {
        // SAFETY: the caller guarantees `p` is readable.
        unsafe { p.read_unaligned() }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32, v: f32) {
        // SAFETY: the caller guarantees `p` is writable.
        unsafe { p.write_unaligned(v) }
    }
    #[inline(always)]
    unsafe fn load_partial(self, _p: *const f32, n: usize, fill: f32) -> f32 {
        debug_assert_eq!(n, 0);
        fill
    }
    #[inline(always)]
    unsafe fn store_partial(self, _p: *mut f32, n: usize, _v: f32) {
        debug_assert_eq!(n, 0);
    }
    #[inline(always)]
    unsafe fn load_f16(self, p: *const u16) -> f32 {
        // SAFETY: the caller guarantees `p` is readable.
        f16_to_f32(unsafe { p.read_unaligned() })
    }
    #[inline(always)]
    unsafe fn store_f16(self, p: *mut u16, v: f32) {
        // SAFETY: the caller guarantees `p` is writable.
        unsafe { p.write_unaligned(f32_to_f16(v)) }
    }
    #[inline(always)]
    unsafe fn load_bf16_pair(self, p: *const u32) -> (f32, f32) {
        // SAFETY: the caller guarantees `p` is readable.
        let w = unsafe { p.read_unaligned() };
        (f32::from_bits(w << 16), f32::from_bits(w & 0xffff_0000))
    }
    #[inline(always)]
    unsafe fn load_bf16(self, p: *const u16) -> f32 {
        // SAFETY: the caller guarantees `p` is readable.
        half::bf16::from_bits(unsafe { p.read_unaligned() }).to_f32()
    }
    #[inline(always)]
    unsafe fn store_bf16(self, p: *mut u16, v: f32) {
        // SAFETY: the caller guarantees `p` is writable.
        unsafe { p.write_unaligned(half::bf16::from_f32(v).to_bits()) }
    }
    #[inline(always)]
    unsafe fn load_partial_f16(self, _p: *const u16, n: usize, fill: f32) -> f32 {
        debug_assert_eq!(n, 0);
        fill
    }
    #[inline(always)]
    unsafe fn store_partial_f16(self, _p: *mut u16, n: usize, _v: f32) {
        debug_assert_eq!(n, 0);
    }
    #[inline(always)]
    unsafe fn load_partial_bf16(self, _p: *const u16, n: usize, fill: f32) -> f32 {
        debug_assert_eq!(n, 0);
        fill
    }
    #[inline(always)]
    unsafe fn store_partial_bf16(self, _p: *mut u16, n: usize, _v: f32) {
        debug_assert_eq!(n, 0);
    }
    #[inline(always)]
    fn add(self, a: f32, b: f32) -> f32 {
        a + b
    }
    #[inline(always)]
    fn sub(self, a: f32, b: f32) -> f32 {
        a - b
    }
    #[inline(always)]
    fn mul(self, a: f32, b: f32) -> f32 {
        a * b
    }
    #[inline(always)]
    fn div(self, a: f32, b: f32) -> f32 {
        a / b
    }
    #[inline(always)]
    fn mul_add(self, a: f32, b: f32, c: f32) -> f32 {
        // A true fused multiply-add keeps the scalar path's error the same as the SIMD ones;
        // on x86-64 without FMA this is a libm call, slow but exact.
        a.mul_add(b, c)
    }
    #[inline(always)]
    fn max(self, a: f32, b: f32) -> f32 {
        // Same NaN behaviour as `maxps b, a`: a NaN `a` survives.
        if b > a {
            b
        } else {
            a
        }
    }
    #[inline(always)]
    fn min(self, a: f32, b: f32) -> f32 {
        if b < a {
            b
        } else {
            a
        }
    }
    #[inline(always)]
    fn round(self, a: f32) -> f32 {
        a.round_ties_even()
    }
    #[inline(always)]
    fn pow2_of_shifted(self, t: f32) -> f32 {
        f32::from_bits(t.to_bits() << 23)
    }
    #[inline(always)]
    fn pow2i(self, n: f32) -> f32 {
        f32::from_bits((((n as i32) + 127) as u32) << 23)
    }
    #[inline(always)]
    fn reduce_add(self, a: f32) -> f32 {
        a
    }
    #[inline(always)]
    fn reduce_max(self, a: f32) -> f32 {
        a
    }
    #[inline(always)]
    fn reduce_add_f64(self, a: f32) -> f64 {
        a as f64
    }
    #[inline(always)]
    fn eq(self, a: f32, b: f32) -> bool {
        a == b
    }
    #[inline(always)]
    fn lt(self, a: f32, b: f32) -> bool {
        a < b
    }
    #[inline(always)]
    fn is_nan(self, a: f32) -> bool {
        a.is_nan()
    }
    #[inline(always)]
    fn select(self, m: bool, a: f32, b: f32) -> f32 {
        if m {
            a
        } else {
            b
        }
    }
    #[inline(always)]
    fn any(self, m: bool) -> bool {
        m
    }
    #[inline(always)]
    fn first_lanes(self, n: usize) -> bool {
        n > 0
    }
}

// The f16 conversions, out of line: `half` inlines each one as a run-time F16C check with a
// call on one side and the software conversion on the other, and the generic bodies load and
// store at hundreds of sites. A call per element costs the portable path nothing it is
// measured on (the report's scalar baselines are f32).

#[inline(never)]
fn f16_to_f32(bits: u16) -> f32 {
    half::f16::from_bits(bits).to_f32()
}

#[inline(never)]
fn f32_to_f16(v: f32) -> u16 {
    half::f16::from_f32(v).to_bits()
}
