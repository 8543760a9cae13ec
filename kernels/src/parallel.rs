//! Threads: how a call's work is split into parts, and the parts run on a rayon pool.
//!
//! A kernel whose work divides into independent units (rows, tiles of a product, `(batch,
//! head)` pairs and their query blocks) implements [`Split`]: the op restricted to a range of
//! its units is again an op, writing a disjoint part of the output. Every output value is
//! computed by the same operations in the same order whichever part it falls in, so the
//! results are the same bits for every thread count; what a part must not do (and none does)
//! is reduce across units. [`Kernels::run_split`] runs the parts, one per thread, when the
//! call is large enough to pay for waking them ([`Split::grain`]).

use std::ops::Range;

use crate::dispatch::{Kernels, Op};

/// The fewest elements a part of a memory-bound, row-wise kernel (softmax, the norms, the
/// element-wise maps) covers: 256 KiB of f32, some tens of microseconds of work. Split in two,
/// softmax and LayerNorm over 64 rows of 1024 ran slower than on one thread (0.87× and 0.76×
/// on two Zen 5 cores, back-to-back calls), over 128 rows faster (1.2×).
pub(crate) const GRAIN_ELEMENTS: usize = 1 << 16;

/// An op whose work is `units()` independent units, any range of which is an op of its own.
pub(crate) trait Split: Op<Output = ()> + Copy {
    /// The number of units.
    fn units(&self) -> usize;

    /// The fewest units worth a part of their own: below two grains, a call runs on the calling
    /// thread. Sized so that a part's work (some tens of microseconds) dwarfs waking a thread.
    fn grain(&self) -> usize;

    /// The op over `units`, as part `index` of the call (a part with a workspace uses slot
    /// `index` of it).
    ///
    /// # Safety
    /// `units` lies inside `0..self.units()`, and `index` is below the part count the call's
    /// workspace was sized for (see [`Kernels::parts`]).
    unsafe fn part(&self, units: Range<usize>, index: usize) -> Self;
}

/// `p` advanced by `count` elements; null (an operand the call does not have) stays null.
pub(crate) fn advance<T>(p: *const T, count: usize) -> *const T {
    if p.is_null() {
        p
    } else {
        p.wrapping_add(count)
    }
}

/// [`advance`] for a pointer to an output.
pub(crate) fn advance_mut<T>(p: *mut T, count: usize) -> *mut T {
    advance(p.cast_const(), count).cast_mut()
}

/// The units `units` of a call's own units `of`, as the units of a part.
pub(crate) fn within(of: (usize, usize), units: Range<usize>) -> (usize, usize) {
    (of.0 + units.start, of.0 + units.end)
}

/// An op moved to the threads of a pool. Its pointers are to data the call borrows for its
/// whole duration, and its parts touch disjoint outputs.
struct Shared<O>(O);

// SAFETY: see the type's documentation; the parts run inside the call, which waits for them.
unsafe impl<O> Sync for Shared<O> {}
// SAFETY: as above.
unsafe impl<O> Send for Shared<O> {}

impl<O: Copy> Shared<O> {
    /// The op (a method, so that a closure captures the whole `Shared`, not its field).
    fn get(&self) -> O {
        self.0
    }
}

/// The range of units of part `i` of `parts`: contiguous, sizes differing by at most one.
pub(crate) fn part_range(units: usize, parts: usize, i: usize) -> Range<usize> {
    let (base, extra) = (units / parts, units % parts);
    let start = i * base + i.min(extra);
    start..start + base + usize::from(i < extra)
}

impl Kernels {
    /// The number of parts a call of `units` units with a grain of `grain` is split into: 1
    /// when sequential, else as many as threads while each has at least `grain` units.
    pub(crate) fn parts(&self, units: usize, grain: usize) -> usize {
        let threads = self.parallelism().threads();
        if threads <= 1 {
            return 1;
        }
        (units / grain.max(1)).clamp(1, threads)
    }

    /// Runs `op`, split into [`Kernels::parts`] parts on the pool when that is more than one.
    ///
    /// # Safety
    /// As [`Op::eval`] for `op`; a workspace `op` uses holds a slot for each of those parts.
    pub(crate) unsafe fn run_split<O: Split>(&self, op: O) {
        let units = op.units();
        let parts = self.parts(units, op.grain());
        if parts <= 1 {
            // SAFETY: forwarded.
            unsafe { self.run(op) };
            return;
        }
        let shared = Shared(op);
        let k = *self;
        let run_part = move |i: usize| {
            // SAFETY: the ranges of the parts tile `0..units`, `i < parts`, and the parts write
            // disjoint outputs (the contract of `Split`).
            unsafe { k.run(shared.get().part(part_range(units, parts, i), i)) }
        };
        for_each_part(parts, run_part);
    }
}

/// Runs `f(0)`, …, `f(parts − 1)`, each as a task of the current rayon pool.
#[cfg(feature = "rayon")]
fn for_each_part(parts: usize, f: impl Fn(usize) + Send + Sync) {
    use rayon::prelude::*;
    (0..parts).into_par_iter().with_max_len(1).for_each(f);
}

/// Without rayon every setting is sequential, and no call is split.
#[cfg(not(feature = "rayon"))]
fn for_each_part(parts: usize, f: impl Fn(usize) + Send + Sync) {
    (0..parts).for_each(f);
}
