//! A growable buffer of 4-byte words whose first word starts a cache line.
//!
//! Packed weight panels and the workspaces of attention and the GAU are read a whole vector
//! at a time. A 64-byte AVX-512 load from an address that is not a multiple of 64 straddles two
//! cache lines and costs two level-1 accesses, and the allocator only promises 16 bytes: the
//! large `Vec<f32>` panels measured came back 16 or 48 bytes past a line, so every load split.
//! The kernels place every region at a multiple of 16 words from the start of its buffer, so
//! this one alignment serves all of them.

use std::collections::TryReserveError;
use std::fmt;

/// Words of a cache line.
pub(crate) const LINE_WORDS: usize = 16;

/// Four-byte words, zero a value of each.
pub(crate) trait Word: Copy + Default {
    const ZERO: Self;
}

impl Word for f32 {
    const ZERO: Self = 0.0;
}

impl Word for u32 {
    const ZERO: Self = 0;
}

/// One cache line of words.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line<T>([T; LINE_WORDS]);

// A line is its words with no padding, so that lines in a row are words in a row.
const _: () = assert!(std::mem::size_of::<Line<f32>>() == 64 && std::mem::size_of::<Line<u32>>() == 64);

/// `len` words on whole cache lines, the first one aligned to 64 bytes.
#[derive(Clone, Default)]
pub(crate) struct AlignedBuf<T: Word> {
    lines: Vec<Line<T>>,
    len: usize,
}

impl<T: Word> AlignedBuf<T> {
    /// `len` zero words.
    pub(crate) fn zeroed(len: usize) -> Self {
        let mut buf = Self::default();
        buf.grow(len);
        buf
    }

    /// Reserves room for `len` words in all, without writing them, reporting what the
    /// allocator refused.
    pub(crate) fn try_reserve(&mut self, len: usize) -> Result<(), TryReserveError> {
        let lines = len.div_ceil(LINE_WORDS);
        self.lines.try_reserve_exact(lines.saturating_sub(self.lines.len()))
    }

    /// Grows the buffer to at least `len` words, new ones zero, and returns its first `len`.
    pub(crate) fn grow(&mut self, len: usize) -> &mut [T] {
        let lines = len.div_ceil(LINE_WORDS);
        if self.lines.len() < lines {
            self.lines.resize(lines, Line([T::ZERO; LINE_WORDS]));
        }
        self.len = self.len.max(len);
        &mut self.as_mut_slice()[..len]
    }

    /// Words in the buffer.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The words.
    pub(crate) fn as_slice(&self) -> &[T] {
        // SAFETY: a `Line<T>` is `LINE_WORDS` words with no padding (asserted above for both
        // word types), so the lines are `lines.len()·LINE_WORDS ≥ len` initialized words in a
        // row.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<T>(), self.len) }
    }

    /// The words, to write.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as in `as_slice`, through the exclusive borrow of the lines.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<T>(), self.len) }
    }
}

impl<T: Word> fmt::Debug for AlignedBuf<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuf").field("len", &self.len).finish()
    }
}
