//! Storage types: every kernel reads and writes `f32`, `half::f16` or `half::bf16` tensors
//! (see [`Element`]).

use std::fmt::Debug;

use half::{bf16, f16};

use crate::dispatch::Kernels;
use crate::parallel::Split;
use crate::simd::Simd;

/// The read and write pointers of an in-place call on `x`, and its length, from one borrow:
/// `x.as_ptr()` then `x.as_mut_ptr()` would invalidate the first pointer (the second borrow of
/// `x` does), and the kernel reads through it.
pub(crate) fn in_place<E>(x: &mut [E]) -> (*const E, *mut E, usize) {
    let len = x.len();
    let p = x.as_mut_ptr();
    (p.cast_const(), p, len)
}

/// A storage type of tensors: `f32`, [`half::f16`] or [`half::bf16`]. Sealed.
///
/// The element type is only how a tensor is *stored*. Kernels widen each input element to
/// f32 exactly as they load it (binary16 and bfloat16 are subsets of f32), compute and
/// accumulate in f32 exactly as the f32 kernel does, and round each output element once, to
/// nearest even, as they store it. No arithmetic happens in half precision, so a half-typed
/// kernel's error bound is its f32 bound plus that one rounding (`2⁻¹¹` relative for f16,
/// `2⁻⁸` for bf16, and gradual underflow through the type's subnormals; an f32 result beyond
/// the type's range, such as `|y| > 65504` for f16, becomes ±∞).
///
/// The conversions are the ISA's own instructions: F16C on AVX2, the AVX-512 binary16
/// conversions, `fcvtl`/`fcvtn` on NEON, and `half` on the scalar path. bfloat16 widens with a
/// shift and narrows with an integer round-to-nearest-even that keeps subnormals (AVX512-BF16's
/// `vcvtneps2bf16` flushes them to zero, so it is not used). NaN stays NaN.
///
/// Parameters that engines keep in f32 stay f32 whatever the tensors' type: masks, carried
/// attention scores, γ/β/gains and biases of the norms, running statistics and per-row
/// statistics, and the GAU weights. The API is one generic function per kernel:
///
/// ```
/// use kernels::half::f16;
///
/// let x: Vec<f16> = [1.0f32, 2.0, 3.0].iter().map(|&v| f16::from_f32(v)).collect();
/// let mut y = vec![f16::ZERO; 3];
/// kernels::softmax(&x, &mut y, 3, &Default::default())?;
/// assert!((y[2].to_f32() - 0.665).abs() < 1e-3);
/// # Ok::<(), kernels::Error>(())
/// ```
pub trait Element: sealed::Sealed + Copy + Default + PartialEq + Debug + Send + Sync + 'static {
    /// The type's name in reports and messages: `"f32"`, `"f16"` or `"bf16"`.
    const NAME: &'static str;
    /// The value, widened exactly.
    fn to_f32(self) -> f32;
    /// `x` rounded to nearest even (±∞ beyond the type's range, NaN stays NaN).
    fn from_f32(x: f32) -> Self;
}

/// A family of types with one member per storage type: a kernel's call for tensors of `E`.
pub(crate) trait PerElement {
    /// The member for `E`.
    type Of<E: Element>;
}

/// A member of a [`PerElement`] family, its storage type a value rather than a type parameter.
///
/// The public functions are generic over `E`, and a generic function is compiled in every
/// crate that calls it, with all it inlines. So each kernel's public function only validates
/// and turns its call into a `Typed`, which it hands to a function of its module that is not
/// generic: that one, with the three instances of the kernel below it, is compiled once, here.
pub(crate) enum Typed<F: PerElement> {
    F32(F::Of<f32>),
    F16(F::Of<f16>),
    Bf16(F::Of<bf16>),
}

impl<F: PerElement> Typed<F> {
    /// Runs the member, a [`Split`] op, on the ISA of `k`, in parts on threads as `k`'s
    /// parallelism says.
    ///
    /// # Safety
    /// As [`Kernels::run_split`] for the member.
    #[inline(always)]
    pub(crate) unsafe fn run_split(self, k: &Kernels)
    where
        F::Of<f32>: Split,
        F::Of<f16>: Split,
        F::Of<bf16>: Split,
    {
        // SAFETY: forwarded from the caller.
        unsafe {
            match self {
                Typed::F32(op) => k.run_split(op),
                Typed::F16(op) => k.run_split(op),
                Typed::Bf16(op) => k.run_split(op),
            }
        }
    }
}

pub(crate) mod sealed {
    use super::*;

    /// The per-ISA vector loads and stores of a storage type. Private: the set of element
    /// types is closed.
    #[allow(private_bounds, private_interfaces)]
    pub trait Sealed: Sized {
        /// Whether this is `f32` itself (a kernel may then keep intermediates in the output).
        const IS_F32: bool;
        /// # Safety
        /// `p..p + LANES` must be readable.
        unsafe fn load<S: Simd>(s: S, p: *const Self) -> S::V;
        /// # Safety
        /// `p..p + LANES` must be writable.
        unsafe fn store<S: Simd>(s: S, p: *mut Self, v: S::V);
        /// # Safety
        /// `p..p + n` must be readable, `n < LANES`.
        unsafe fn load_partial<S: Simd>(s: S, p: *const Self, n: usize, fill: f32) -> S::V;
        /// # Safety
        /// `p..p + n` must be writable, `n < LANES`.
        unsafe fn store_partial<S: Simd>(s: S, p: *mut Self, n: usize, v: S::V);
        /// `x` as the member of its family for this type.
        fn typed<F: PerElement>(x: F::Of<Self>) -> Typed<F>
        where
            Self: Element;
    }
}

impl Element for f32 {
    const NAME: &'static str = "f32";
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        x
    }
}

impl Element for f16 {
    const NAME: &'static str = "f16";
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
}

impl Element for bf16 {
    const NAME: &'static str = "bf16";
    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        bf16::from_f32(x)
    }
}

#[allow(private_bounds, private_interfaces)]
impl sealed::Sealed for f32 {
    const IS_F32: bool = true;
    #[inline(always)]
    unsafe fn load<S: Simd>(s: S, p: *const f32) -> S::V {
        // SAFETY: forwarded.
        unsafe { s.load(p) }
    }
    #[inline(always)]
    unsafe fn store<S: Simd>(s: S, p: *mut f32, v: S::V) {
        // SAFETY: forwarded.
        unsafe { s.store(p, v) }
    }
    #[inline(always)]
    unsafe fn load_partial<S: Simd>(s: S, p: *const f32, n: usize, fill: f32) -> S::V {
        // SAFETY: forwarded.
        unsafe { s.load_partial(p, n, fill) }
    }
    #[inline(always)]
    unsafe fn store_partial<S: Simd>(s: S, p: *mut f32, n: usize, v: S::V) {
        // SAFETY: forwarded.
        unsafe { s.store_partial(p, n, v) }
    }
    fn typed<F: PerElement>(x: F::Of<f32>) -> Typed<F> {
        Typed::F32(x)
    }
}

/// Implements `Sealed` for a 16-bit type through the `Simd` methods with the given suffix.
macro_rules! sealed_16 {
    ($t:ty, $variant:ident, $load:ident, $store:ident, $load_partial:ident, $store_partial:ident) => {
        #[allow(private_bounds, private_interfaces)]
        impl sealed::Sealed for $t {
            const IS_F32: bool = false;
            #[inline(always)]
            unsafe fn load<S: Simd>(s: S, p: *const $t) -> S::V {
                // SAFETY: forwarded; the type is a `repr(transparent)` u16.
                unsafe { s.$load(p.cast()) }
            }
            #[inline(always)]
            unsafe fn store<S: Simd>(s: S, p: *mut $t, v: S::V) {
                // SAFETY: as `load`.
                unsafe { s.$store(p.cast(), v) }
            }
            #[inline(always)]
            unsafe fn load_partial<S: Simd>(s: S, p: *const $t, n: usize, fill: f32) -> S::V {
                // SAFETY: as `load`.
                unsafe { s.$load_partial(p.cast(), n, fill) }
            }
            #[inline(always)]
            unsafe fn store_partial<S: Simd>(s: S, p: *mut $t, n: usize, v: S::V) {
                // SAFETY: as `load`.
                unsafe { s.$store_partial(p.cast(), n, v) }
            }
            fn typed<F: PerElement>(x: F::Of<$t>) -> Typed<F> {
                Typed::$variant(x)
            }
        }
    };
}

sealed_16!(f16, F16, load_f16, store_f16, load_partial_f16, store_partial_f16);
sealed_16!(bf16, Bf16, load_bf16, store_bf16, load_partial_bf16, store_partial_bf16);
