//! Half-typed tensors inside the report's f32 buffers.
//!
//! The report's driver places one `x` and one `y` buffer of f32 slots for every case (see
//! [`crate::buffers`]). A case over `f16` or `bf16` stores its `len` elements in the first
//! `⌈len/2⌉` slots, so that its byte counts, its copy roofline and the buffers' placement are
//! those of the narrower type.

use std::mem::{align_of, size_of};

use kernels::half::{bf16, f16};
use kernels::Element;

/// A storage type both crates know: the kernels compute with it, `reference` checks it.
pub trait Typed: Element + reference::Element {}
impl Typed for f32 {}
impl Typed for f16 {}
impl Typed for bf16 {}

/// f32 slots that hold `len` elements of `E`.
pub fn slots<E: Element>(len: usize) -> usize {
    (len * size_of::<E>()).div_ceil(size_of::<f32>())
}

/// The elements of `E` stored in `buf`: the first `len` of them.
///
/// # Panics
/// If `buf` holds fewer than `len` elements of `E`.
pub fn view<E: Element>(buf: &[f32], len: usize) -> &[E] {
    assert!(
        slots::<E>(len) <= buf.len(),
        "{len} {} do not fit {} slots",
        E::NAME,
        buf.len()
    );
    const { assert!(align_of::<E>() <= align_of::<f32>()) };
    // SAFETY: the bytes are in bounds (checked), aligned for `E` (f32's alignment is at least
    // `E`'s), and every bit pattern is a valid `E` (f32, or a `repr(transparent)` u16).
    unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<E>(), len) }
}

/// [`view`], mutable.
pub fn view_mut<E: Element>(buf: &mut [f32], len: usize) -> &mut [E] {
    assert!(
        slots::<E>(len) <= buf.len(),
        "{len} {} do not fit {} slots",
        E::NAME,
        buf.len()
    );
    const { assert!(align_of::<E>() <= align_of::<f32>()) };
    // SAFETY: as `view`; the borrow of `buf` is exclusive.
    unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<E>(), len) }
}

/// `values` rounded to `E` and stored in f32 slots.
pub fn pack<E: Element>(values: &[f32]) -> Vec<f32> {
    let mut buf = vec![0.0f32; slots::<E>(values.len())];
    for (d, &v) in view_mut::<E>(&mut buf, values.len()).iter_mut().zip(values) {
        *d = E::from_f32(v);
    }
    buf
}

/// The first `len` elements of `E` in `buf`, widened to f32.
pub fn unpack<E: Element>(buf: &[f32], len: usize) -> Vec<f32> {
    view::<E>(buf, len).iter().map(|e| e.to_f32()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kernels::half::{bf16, f16};

    #[test]
    fn packs_and_unpacks() {
        let v = [1.0f32, -2.5, 3.0e-3, 70000.0, 0.0];
        assert_eq!(slots::<f16>(5), 3);
        let p = pack::<f16>(&v);
        assert_eq!(p.len(), 3);
        let u = unpack::<f16>(&p, 5);
        assert_eq!(u[..2], [1.0, -2.5]);
        assert_eq!(u[3], f32::INFINITY);
        assert_eq!(unpack::<bf16>(&pack::<bf16>(&v), 5)[3], 70144.0);
        assert_eq!(unpack::<f32>(&pack::<f32>(&v), 5), v);
    }
}
