//! Input and output buffers placed deliberately.
//!
//! Where an output sits relative to its input changes the timing of a streaming kernel on x86:
//! when a store and a later load are a multiple of 4 KiB apart, the CPU may take the load for
//! a dependence on the store ("4K aliasing") and stall it. Two separate large allocations are
//! both page-aligned plus the same allocator header, so they alias on every element; on this
//! project's machines an output 2 KiB past the input's page offset ran 20–40% faster. Every
//! kernel, baseline and roofline of one case therefore runs on the same
//! [`Pair`]: one allocation, the input page-aligned, the output starting `offset` bytes past
//! the first page boundary after the input.

use std::ops::Range;

/// Page size assumed for the placement (x86-64 and most aarch64 kernels).
pub const PAGE: usize = 4096;

/// Default distance in bytes of the output's start past the page boundary after the input.
pub const DEFAULT_OUT_OFFSET: usize = 2048;

const F32: usize = std::mem::size_of::<f32>();

/// One allocation holding an input `x` and an output `y` of f32, placed as the module says.
pub struct Pair {
    storage: Vec<f32>,
    x: Range<usize>,
    y: Range<usize>,
    offset: usize,
}

impl Pair {
    /// `x` of `x_len` and `y` of `y_len` floats, zeroed and touched (no page faults left for
    /// the first timed call). `offset` is rounded down to a multiple of 4 bytes.
    pub fn new(x_len: usize, y_len: usize, offset: usize) -> Pair {
        let offset = offset / F32 * F32;
        let page = PAGE / F32;
        let x_span = x_len.div_ceil(page) * page;
        let len = page + x_span + offset / F32 + y_len;
        let mut storage = vec![0.0f32; len];
        let start = storage.as_ptr().align_offset(PAGE);
        // `align_offset` may refuse (usize::MAX) in theory; fall back to no alignment rather
        // than panic, the placement is then only relative.
        let start = if start < page { start } else { 0 };
        let x = start..start + x_len;
        let y_start = start + x_span + offset / F32;
        let y = y_start..y_start + y_len;
        // Write every page so that the kernel does not pay for first-touch faults.
        storage.fill(1.0);
        Pair { storage, x, y, offset }
    }

    /// The input.
    pub fn x(&self) -> &[f32] {
        &self.storage[self.x.clone()]
    }

    /// The input, to fill it.
    pub fn x_mut(&mut self) -> &mut [f32] {
        &mut self.storage[self.x.clone()]
    }

    /// The output.
    pub fn y(&self) -> &[f32] {
        &self.storage[self.y.clone()]
    }

    /// The input and the output at once, for a call.
    pub fn io(&mut self) -> (&[f32], &mut [f32]) {
        let (head, tail) = self.storage.split_at_mut(self.y.start);
        (&head[self.x.clone()], &mut tail[..self.y.len()])
    }

    /// Distance in bytes from the input's start to the output's start.
    pub fn distance(&self) -> usize {
        (self.y.start - self.x.start) * F32
    }

    /// The configured offset past the page boundary.
    pub fn offset(&self) -> usize {
        self.offset
    }
}

/// Distance in bytes between the page offsets of consecutive buffers of a [`Staggered`] set:
/// a multiple of 64 (every buffer starts on a cache line) that is not a divisor of the page, so
/// that no two of up to 7 buffers share a page offset.
pub const STAGGER: usize = 1088;

/// Several f32 buffers in one allocation (kernels with more than one input or output, such as
/// attention's Q, K, V, P, O and S): buffer `i` starts `i·STAGGER mod PAGE` bytes past a page
/// boundary, so that no two streams are a multiple of 4 KiB apart (see the module docs).
pub struct Staggered {
    storage: Vec<f32>,
    spans: Vec<Range<usize>>,
}

impl Staggered {
    /// Buffers of these lengths in floats, filled with 1.0 (every page touched).
    pub fn new(lens: &[usize]) -> Staggered {
        let page = PAGE / F32;
        let mut spans = Vec::with_capacity(lens.len());
        let mut at = 0;
        for (i, &len) in lens.iter().enumerate() {
            let start = at + (i * STAGGER % PAGE) / F32;
            spans.push(start..start + len);
            at = (start + len).div_ceil(page) * page;
        }
        let storage = vec![1.0f32; at + page];
        let base = storage.as_ptr().align_offset(PAGE);
        let base = if base < page { base } else { 0 };
        for span in &mut spans {
            *span = span.start + base..span.end + base;
        }
        Staggered { storage, spans }
    }

    /// Buffer `i`.
    pub fn get(&self, i: usize) -> &[f32] {
        &self.storage[self.spans[i].clone()]
    }

    /// Buffer `i`, to fill it.
    pub fn get_mut(&mut self, i: usize) -> &mut [f32] {
        &mut self.storage[self.spans[i].clone()]
    }

    /// Every buffer at once, mutable, in order (they are disjoint).
    pub fn all_mut(&mut self) -> Vec<&mut [f32]> {
        let mut out = Vec::with_capacity(self.spans.len());
        let mut rest: &mut [f32] = &mut self.storage;
        let mut consumed = 0;
        for span in &self.spans {
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(span.start - consumed);
            let (buf, tail) = tail.split_at_mut(span.len());
            out.push(buf);
            rest = tail;
            consumed = span.end;
        }
        out
    }
}

/// One line that says how [`Pair`] places buffers with this `offset`.
pub fn describe(offset: usize) -> String {
    format!(
        "one allocation per case; input page-aligned, output at the next page boundary after the input + {offset} B \
         (output − input ≡ {} B mod {PAGE})",
        offset % PAGE
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_is_as_described() {
        for (xl, yl) in [(0, 0), (1, 1), (1000, 1000), (4096, 17)] {
            let mut p = Pair::new(xl, yl, DEFAULT_OUT_OFFSET);
            assert_eq!(p.x().len(), xl);
            assert_eq!(p.y().len(), yl);
            assert_eq!(p.x().as_ptr() as usize % PAGE, 0);
            assert_eq!(p.distance() % PAGE, DEFAULT_OUT_OFFSET);
            assert_eq!((p.y().as_ptr() as usize) % PAGE, DEFAULT_OUT_OFFSET);
            let (x, y) = p.io();
            assert_eq!((x.len(), y.len()), (xl, yl));
        }
    }

    #[test]
    fn staggered_buffers_are_disjoint_and_placed() {
        let lens = [5000, 0, 3, 4096, 1, 70000, 2];
        let mut s = Staggered::new(&lens);
        for (i, &len) in lens.iter().enumerate() {
            assert_eq!(s.get(i).len(), len);
            let at = s.get(i).as_ptr() as usize;
            assert_eq!(at % PAGE, i * STAGGER % PAGE, "buffer {i}");
        }
        for (i, buf) in s.all_mut().into_iter().enumerate() {
            assert_eq!(buf.len(), lens[i]);
            buf.fill(i as f32);
        }
        for (i, &len) in lens.iter().enumerate() {
            assert!(s.get(i).iter().all(|&v| v == i as f32), "buffer {i} was overwritten");
            assert_eq!(s.get_mut(i).len(), len);
        }
    }
}
