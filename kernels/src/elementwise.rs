//! Element-wise maps: `exp`, `sigmoid`, `swish`, `gelu` (erf and tanh forms), and the
//! conversions between storage types.
//!
//! Each is one [`Elementwise`] function of `math/` run over the whole slice by
//! [`map_row`](crate::math::map_row): four vectors at a time, the tail through a partial load
//! and store that touches nothing past the end. Inputs of any [`Element`] type are widened
//! exactly, outputs rounded once.

use std::ops::Range;

use crate::dispatch::{with_detected, Kernels, Op};
use crate::element::{in_place, Element, PerElement, Typed};
use crate::error::Error;
use crate::math::activation::{Sigmoid, Swish};
use crate::math::exp::Exp;
use crate::math::gelu::{Gelu, GeluTanh};
use crate::math::{Elementwise, Identity};
use crate::parallel::{Split, GRAIN_ELEMENTS};
use crate::simd::Simd;

/// `dst[i] = f(src[i])` for `i < n`. `src` and `dst` cover `n` elements and are equal if they
/// overlap.
#[derive(Clone, Copy)]
struct MapRow<A, B, F> {
    src: *const A,
    dst: *mut B,
    n: usize,
    f: F,
}

impl<A: Element, B: Element, F: Elementwise> Op for MapRow<A, B, F> {
    type Output = ();

    #[inline(always)]
    unsafe fn eval<S: Simd>(self, s: S) {
        // SAFETY: the fields' contract.
        unsafe { self.f.row(s, self.src, self.dst, self.n) }
    }
}

/// Elements of a unit of a split map: a cache line of f32, so that parts share no line of it.
const UNIT: usize = 16;

impl<A: Element, B: Element, F: Elementwise + Copy> Split for MapRow<A, B, F> {
    fn units(&self) -> usize {
        self.n.div_ceil(UNIT)
    }

    fn grain(&self) -> usize {
        GRAIN_ELEMENTS / UNIT
    }

    unsafe fn part(&self, units: Range<usize>, _: usize) -> Self {
        let start = units.start * UNIT;
        MapRow {
            src: self.src.wrapping_add(start),
            dst: self.dst.wrapping_add(start),
            n: (units.end * UNIT).min(self.n) - start,
            f: self.f,
        }
    }
}

/// `f` from and to tensors of the same storage type.
struct Same<F>(F);

impl<F: Elementwise> PerElement for Same<F> {
    type Of<E: Element> = MapRow<E, E, F>;
}

/// The widening of a storage type to f32.
struct Widen;

impl PerElement for Widen {
    type Of<E: Element> = MapRow<E, f32, Identity>;
}

/// The rounding of f32 to a storage type.
struct Narrow;

impl PerElement for Narrow {
    type Of<E: Element> = MapRow<f32, E, Identity>;
}

/// `dst[i] = f(src[i])` for `n` elements of validated slices.
fn map_row<A: Element, B: Element, F>(src: *const A, dst: *mut B, n: usize, f: F) -> MapRow<A, B, F> {
    MapRow { src, dst, n, f }
}

/// The runs of validated maps, one function per map: not generic, so that the maps are
/// compiled in this crate (see [`Typed`]).
///
/// # Safety (all)
/// As [`MapRow`].
impl Kernels {
    unsafe fn run_exp(&self, op: Typed<Same<Exp>>) {
        // SAFETY: forwarded.
        unsafe { op.run_split(self) }
    }

    unsafe fn run_sigmoid(&self, op: Typed<Same<Sigmoid>>) {
        // SAFETY: forwarded.
        unsafe { op.run_split(self) }
    }

    unsafe fn run_swish(&self, op: Typed<Same<Swish>>) {
        // SAFETY: forwarded.
        unsafe { op.run_split(self) }
    }

    unsafe fn run_gelu(&self, op: Typed<Same<Gelu>>) {
        // SAFETY: forwarded.
        unsafe { op.run_split(self) }
    }

    unsafe fn run_gelu_tanh(&self, op: Typed<Same<GeluTanh>>) {
        // SAFETY: forwarded.
        unsafe { op.run_split(self) }
    }

    unsafe fn run_widen(&self, op: Typed<Widen>) {
        // SAFETY: forwarded.
        unsafe { op.run_split(self) }
    }

    unsafe fn run_narrow(&self, op: Typed<Narrow>) {
        // SAFETY: forwarded.
        unsafe { op.run_split(self) }
    }
}

/// `Ok` if `out` has the length of `x`.
fn check_out(x: usize, out: usize) -> Result<(), Error> {
    if out == x {
        Ok(())
    } else {
        Err(Error::shape("out", format!("length {x} (as x)"), out))
    }
}

// SAFETY (every `unsafe` block of the methods below): the map covers `x.len()` elements of
// `x` and of `out`, which has that length (checked); `out` is an exclusive borrow, distinct
// from `x`, or `x` itself in place.
impl Kernels {
    /// `out[i] = eˣⁱ`. See [`exp()`].
    pub fn exp<E: Element>(&self, x: &[E], out: &mut [E]) -> Result<(), Error> {
        check_out(x.len(), out.len())?;
        unsafe { self.run_exp(E::typed(map_row(x.as_ptr(), out.as_mut_ptr(), x.len(), Exp))) };
        Ok(())
    }

    /// `x[i] = eˣⁱ`, in place.
    pub fn exp_inplace<E: Element>(&self, x: &mut [E]) -> Result<(), Error> {
        let (src, dst, len) = in_place(x);
        unsafe { self.run_exp(E::typed(map_row(src, dst, len, Exp))) };
        Ok(())
    }

    /// `out[i] = σ(xᵢ)`. See [`sigmoid()`].
    pub fn sigmoid<E: Element>(&self, x: &[E], out: &mut [E]) -> Result<(), Error> {
        check_out(x.len(), out.len())?;
        unsafe { self.run_sigmoid(E::typed(map_row(x.as_ptr(), out.as_mut_ptr(), x.len(), Sigmoid))) };
        Ok(())
    }

    /// `x[i] = σ(xᵢ)`, in place.
    pub fn sigmoid_inplace<E: Element>(&self, x: &mut [E]) -> Result<(), Error> {
        let (src, dst, len) = in_place(x);
        unsafe { self.run_sigmoid(E::typed(map_row(src, dst, len, Sigmoid))) };
        Ok(())
    }

    /// `out[i] = swish(xᵢ)`. See [`swish()`].
    pub fn swish<E: Element>(&self, x: &[E], out: &mut [E]) -> Result<(), Error> {
        check_out(x.len(), out.len())?;
        unsafe { self.run_swish(E::typed(map_row(x.as_ptr(), out.as_mut_ptr(), x.len(), Swish))) };
        Ok(())
    }

    /// `x[i] = swish(xᵢ)`, in place.
    pub fn swish_inplace<E: Element>(&self, x: &mut [E]) -> Result<(), Error> {
        let (src, dst, len) = in_place(x);
        unsafe { self.run_swish(E::typed(map_row(src, dst, len, Swish))) };
        Ok(())
    }

    /// `out[i] = gelu(xᵢ)`, the erf form. See [`gelu()`].
    pub fn gelu<E: Element>(&self, x: &[E], out: &mut [E]) -> Result<(), Error> {
        check_out(x.len(), out.len())?;
        unsafe { self.run_gelu(E::typed(map_row(x.as_ptr(), out.as_mut_ptr(), x.len(), Gelu))) };
        Ok(())
    }

    /// `x[i] = gelu(xᵢ)`, the erf form, in place.
    pub fn gelu_inplace<E: Element>(&self, x: &mut [E]) -> Result<(), Error> {
        let (src, dst, len) = in_place(x);
        unsafe { self.run_gelu(E::typed(map_row(src, dst, len, Gelu))) };
        Ok(())
    }

    /// `out[i] = gelu_tanh(xᵢ)`, the tanh form. See [`gelu_tanh()`].
    pub fn gelu_tanh<E: Element>(&self, x: &[E], out: &mut [E]) -> Result<(), Error> {
        check_out(x.len(), out.len())?;
        unsafe { self.run_gelu_tanh(E::typed(map_row(x.as_ptr(), out.as_mut_ptr(), x.len(), GeluTanh))) };
        Ok(())
    }

    /// `x[i] = gelu_tanh(xᵢ)`, the tanh form, in place.
    pub fn gelu_tanh_inplace<E: Element>(&self, x: &mut [E]) -> Result<(), Error> {
        let (src, dst, len) = in_place(x);
        unsafe { self.run_gelu_tanh(E::typed(map_row(src, dst, len, GeluTanh))) };
        Ok(())
    }

    /// `out[i] = xᵢ` widened exactly to f32. See [`widen()`].
    pub fn widen<E: Element>(&self, x: &[E], out: &mut [f32]) -> Result<(), Error> {
        check_out(x.len(), out.len())?;
        unsafe { self.run_widen(E::typed(map_row(x.as_ptr(), out.as_mut_ptr(), x.len(), Identity))) };
        Ok(())
    }

    /// `out[i] = xᵢ` rounded to `E`. See [`narrow()`].
    pub fn narrow<E: Element>(&self, x: &[f32], out: &mut [E]) -> Result<(), Error> {
        check_out(x.len(), out.len())?;
        unsafe { self.run_narrow(E::typed(map_row(x.as_ptr(), out.as_mut_ptr(), x.len(), Identity))) };
        Ok(())
    }
}

/// `out[i] = xᵢ` as f32: the exact widening of a storage type (see [`Element`]), with the
/// ISA's conversion instructions. A copy for `E = f32`.
///
/// # Errors
/// [`Error::Shape`] naming `out` when its length differs from `x`'s.
pub fn widen<E: Element>(x: &[E], out: &mut [f32]) -> Result<(), Error> {
    with_detected(|k| k.widen(x, out))
}

/// `out[i] = xᵢ` rounded to nearest even in `E` (±∞ beyond its range, gradual underflow,
/// NaN stays NaN), with the ISA's conversion instructions. A copy for `E = f32`.
///
/// # Errors
/// [`Error::Shape`] naming `out` when its length differs from `x`'s.
pub fn narrow<E: Element>(x: &[f32], out: &mut [E]) -> Result<(), Error> {
    with_detected(|k| k.narrow(x, out))
}

/// `out[i] = eˣⁱ` for every element (of any [`Element`] type: a half-typed result is the f32
/// one rounded once).
///
/// Error ≤ 1 ulp against `exp` computed in f64 and rounded to f32, for normal and subnormal
/// results alike (checked over all 2³² inputs on every ISA). Overflow (`x > 88.72`) gives +∞,
/// underflow (`x < −103.97`) +0 after gradual underflow; `exp(NaN) = NaN`, `exp(±∞) = +∞, +0`.
///
/// # Errors
/// [`Error::Shape`] naming `out` when its length differs from `x`'s.
pub fn exp<E: Element>(x: &[E], out: &mut [E]) -> Result<(), Error> {
    with_detected(|k| k.exp(x, out))
}

/// [`exp()`] in place.
pub fn exp_inplace<E: Element>(x: &mut [E]) -> Result<(), Error> {
    with_detected(|k| k.exp_inplace(x))
}

/// `out[i] = σ(xᵢ) = 1/(1 + e^−xᵢ)` for every element.
///
/// Error ≤ 3 ulp (relative `≤ 6u`), and ≤ 2⁻¹²⁶ absolute where `σ(x) < 2⁻¹²⁶`
/// (`x < −87.3`, flushed towards 0); `σ(NaN) = NaN`, `σ(+∞) = 1`, `σ(−∞) = 0`.
///
/// # Errors
/// [`Error::Shape`] naming `out` when its length differs from `x`'s.
pub fn sigmoid<E: Element>(x: &[E], out: &mut [E]) -> Result<(), Error> {
    with_detected(|k| k.sigmoid(x, out))
}

/// [`sigmoid()`] in place.
pub fn sigmoid_inplace<E: Element>(x: &mut [E]) -> Result<(), Error> {
    with_detected(|k| k.sigmoid_inplace(x))
}

/// `out[i] = swish(xᵢ) = xᵢ·σ(xᵢ)` (also called SiLU) for every element.
///
/// Error ≤ 3 ulp, and ≤ 2⁻¹²⁶ absolute where `|swish(x)| < 2⁻¹²⁶`; `swish(NaN) = NaN`,
/// `swish(+∞) = +∞`, `swish(−∞) = −0` (the limit).
///
/// # Errors
/// [`Error::Shape`] naming `out` when its length differs from `x`'s.
pub fn swish<E: Element>(x: &[E], out: &mut [E]) -> Result<(), Error> {
    with_detected(|k| k.swish(x, out))
}

/// [`swish()`] in place.
pub fn swish_inplace<E: Element>(x: &mut [E]) -> Result<(), Error> {
    with_detected(|k| k.swish_inplace(x))
}

/// `out[i] = gelu(xᵢ) = xᵢ·Φ(xᵢ)` for every element: the exact GELU (BERT, PyTorch's default
/// `approximate='none'`), `Φ` the standard normal distribution function.
///
/// Error ≤ 6 ulp against `x·Φ(x)` in f64, and ≤ 2⁻¹²⁶ absolute where `|gelu(x)| < 2⁻¹²⁶`
/// (`x < −13.2`); the negative half keeps its relative precision (the tail `Φ(x)` is computed
/// as such, not as `½(1 + erf)`). `gelu(NaN) = NaN`, `gelu(+∞) = +∞`, `gelu(−∞) = −0`.
///
/// # Errors
/// [`Error::Shape`] naming `out` when its length differs from `x`'s.
///
/// ```
/// let mut y = [0.0f32; 3];
/// kernels::gelu(&[-1.0, 0.0, 1.0], &mut y)?;
/// assert!((y[2] - 0.841_344_7).abs() < 1e-6 && (y[0] + 0.158_655_25).abs() < 1e-6);
/// # Ok::<(), kernels::Error>(())
/// ```
pub fn gelu<E: Element>(x: &[E], out: &mut [E]) -> Result<(), Error> {
    with_detected(|k| k.gelu(x, out))
}

/// [`gelu()`] in place.
pub fn gelu_inplace<E: Element>(x: &mut [E]) -> Result<(), Error> {
    with_detected(|k| k.gelu_inplace(x))
}

/// `out[i] = gelu_tanh(xᵢ) = ½xᵢ·(1 + tanh(√(2/π)·(xᵢ + 0.044715xᵢ³)))` for every element: the
/// tanh approximation of GELU (GPT-2, PyTorch's `approximate='tanh'`), computed as `x·σ(v)`,
/// `v = √(8/π)·(x + 0.044715x³)`.
///
/// Error ≤ `4 + 3|v|` ulp against the formula in f64 (the f32 rounding of `v` is amplified by
/// `σ` where `v` is large and negative, the tail where the result is tiny), and ≤ 2⁻¹²⁶
/// absolute where `|gelu_tanh(x)| < 2⁻¹²⁶`. `gelu_tanh(NaN) = NaN`, `(+∞) = +∞`, `(−∞) = −0`.
///
/// # Errors
/// [`Error::Shape`] naming `out` when its length differs from `x`'s.
pub fn gelu_tanh<E: Element>(x: &[E], out: &mut [E]) -> Result<(), Error> {
    with_detected(|k| k.gelu_tanh(x, out))
}

/// [`gelu_tanh()`] in place.
pub fn gelu_tanh_inplace<E: Element>(x: &mut [E]) -> Result<(), Error> {
    with_detected(|k| k.gelu_tanh_inplace(x))
}
