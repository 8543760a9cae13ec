//! The packed weights and the fused product of `linear`, generic over [`Simd`] and the register
//! tile `MR × NV` (see the [module docs](super) for the algorithm).

use std::ops::Range;

use super::options::{Activation, LinearWeights, WeightLayout, WeightType};
use crate::aligned::{AlignedBuf, LINE_WORDS};
use crate::dispatch::Op;
use crate::element::Element;
use crate::gemm::{assert_tile_fits, store_n, MAX_MR, MAX_NR};
use crate::math::activation::swish;
use crate::math::gelu::{gelu, gelu_tanh};
use crate::math::Identity;
use crate::parallel::{advance, advance_mut, Split};
use crate::simd::{Simd, TileOp};

/// Weights packed into panels of the tile's `NR` columns, zero past `out_features`:
/// f32 `[panel][k][NR]`, or bf16 `[panel][k][NR/2]` words, word `j·LANES + i` of a row holding
/// column `2j·LANES + i` in its low half and column `(2j + 1)·LANES + i` in its high half (two
/// vectors from one load, [`Simd::load_bf16_pair`]).
#[derive(Debug, Clone)]
pub(super) enum Panels {
    F32(AlignedBuf<f32>),
    Bf16(AlignedBuf<u32>),
}

/// Packs `w` into panels of `nr` columns, vectors of `lanes`.
pub(super) fn pack(w: &LinearWeights, ty: WeightType, nr: usize, lanes: usize) -> Panels {
    let (k, n) = (w.in_features, w.out_features);
    let at = |kk: usize, col: usize| match w.layout {
        WeightLayout::InOut => w.weights[kk * n + col],
        WeightLayout::OutIn => w.weights[col * k + kk],
    };
    let panels = n.div_ceil(nr);
    match ty {
        WeightType::F32 => {
            let mut buf = AlignedBuf::zeroed(panels * k * nr);
            let p = buf.as_mut_slice();
            for (col, column) in (0..n).map(|col| (col, (col / nr) * k * nr + col % nr)) {
                for kk in 0..k {
                    p[column + kk * nr] = at(kk, col);
                }
            }
            Panels::F32(buf)
        }
        WeightType::Bf16 => {
            let half = nr / 2;
            let mut buf = AlignedBuf::<u32>::zeroed(panels * k * half);
            let p = buf.as_mut_slice();
            for col in 0..n {
                // Column `c` of its panel: vector `c / lanes`, lane `c % lanes`; vectors pair up.
                let c = col % nr;
                let (vector, lane) = (c / lanes, c % lanes);
                let word = (col / nr) * k * half + (vector / 2) * lanes + lane;
                let shift = if vector % 2 == 0 { 0 } else { 16 };
                for kk in 0..k {
                    p[word + kk * half] |= (half::bf16::from_f32(at(kk, col)).to_bits() as u32) << shift;
                }
            }
            Panels::Bf16(buf)
        }
    }
}

/// A validated linear call: `x` holds `m·k` elements, `out` (distinct from the inputs) and
/// `residual` (null if absent) `m·n`; `panels` holds the weights packed by [`pack`] for the
/// tile of the ISA it runs on (as f32 or, if `bf16`, bf16 words), `bias` null or `n` floats.
#[derive(Clone, Copy)]
pub(super) struct LinearCall<E> {
    pub x: *const E,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub panels: *const u32,
    pub bf16: bool,
    pub bias: *const f32,
    pub activation: Activation,
    pub residual: *const E,
    pub out: *mut E,
    /// The columns of `out` this call computes, `col0..col1`: `col0` a multiple of
    /// [`MAX_NR`] (so of every ISA's panel width), `col1` one too or `n`.
    pub col0: usize,
    pub col1: usize,
    /// Whether the call splits over threads by blocks of rows, else by columns.
    pub split_rows: bool,
}

/// Rows of a unit of a call split by rows.
const ROW_UNIT: usize = MAX_MR;

/// The fewest multiply-adds a part of a call has: about 20 µs of work.
const GRAIN_FMAS: usize = 1 << 21;

impl<E: Element> Split for LinearCall<E> {
    fn units(&self) -> usize {
        if self.split_rows {
            self.m.div_ceil(ROW_UNIT)
        } else {
            (self.col1 - self.col0).div_ceil(MAX_NR)
        }
    }

    fn grain(&self) -> usize {
        let per_unit = if self.split_rows {
            ROW_UNIT * self.k * (self.col1 - self.col0)
        } else {
            self.m * self.k * MAX_NR
        };
        GRAIN_FMAS.div_ceil(per_unit.max(1))
    }

    unsafe fn part(&self, units: Range<usize>, _: usize) -> Self {
        if self.split_rows {
            let (r0, r1) = (units.start * ROW_UNIT, (units.end * ROW_UNIT).min(self.m));
            LinearCall {
                x: advance(self.x, r0 * self.k),
                residual: advance(self.residual, r0 * self.n),
                out: advance_mut(self.out, r0 * self.n),
                m: r1 - r0,
                ..*self
            }
        } else {
            LinearCall {
                col0: self.col0 + units.start * MAX_NR,
                col1: (self.col0 + units.end * MAX_NR).min(self.col1),
                ..*self
            }
        }
    }
}

impl<E: Element> Op for LinearCall<E> {
    type Output = ();

    #[inline(always)]
    unsafe fn eval<S: Simd>(self, s: S) {
        // SAFETY: the call's contract.
        unsafe { s.with_tile(self) }
    }
}

impl<E: Element> TileOp for LinearCall<E> {
    type Output = ();

    #[inline(always)]
    unsafe fn eval<S: Simd, const MR: usize, const NV: usize>(self, s: S) {
        assert_tile_fits::<S, MR, NV>();
        // SAFETY: the call's contract; the tile fits the stack buffer.
        unsafe {
            if self.bf16 {
                run::<S, E, Bf16Pairs, MR, NV>(s, &self)
            } else {
                run::<S, E, F32Panel, MR, NV>(s, &self)
            }
        }
    }
}

/// How one row of a packed panel is read: `NV` vectors of f32.
trait PanelRow {
    /// Words (4 bytes) of a row of a panel of `nr` columns.
    fn words(nr: usize) -> usize;

    /// The row at `p` as `NV` vectors.
    ///
    /// # Safety
    /// `p` holds a row of a panel of `NV·LANES` columns.
    unsafe fn load<S: Simd, const NV: usize>(s: S, p: *const u32) -> [S::V; NV];
}

/// Panels of f32 weights.
struct F32Panel;

impl PanelRow for F32Panel {
    #[inline(always)]
    fn words(nr: usize) -> usize {
        nr
    }

    #[inline(always)]
    unsafe fn load<S: Simd, const NV: usize>(s: S, p: *const u32) -> [S::V; NV] {
        let mut b = [s.splat(0.0); NV];
        for (v, x) in b.iter_mut().enumerate() {
            // SAFETY: vector `v < NV` of the row.
            *x = unsafe { s.load(p.cast::<f32>().add(v * S::LANES)) };
        }
        b
    }
}

/// Panels of bf16 weights in vector pairs (see [`Panels`]).
struct Bf16Pairs;

impl PanelRow for Bf16Pairs {
    #[inline(always)]
    fn words(nr: usize) -> usize {
        nr / 2
    }

    #[inline(always)]
    unsafe fn load<S: Simd, const NV: usize>(s: S, p: *const u32) -> [S::V; NV] {
        let mut b = [s.splat(0.0); NV];
        for j in 0..NV / 2 {
            // SAFETY: words `j·LANES..` of the row, `NV/2` vectors of words in all.
            let (lo, hi) = unsafe { s.load_bf16_pair(p.add(j * S::LANES)) };
            b[2 * j] = lo;
            b[2 * j + 1] = hi;
        }
        b
    }
}

/// Columns of `X` widened at a time for half-typed inputs: `MAX_MR` rows of them (16 KiB) sit
/// on the stack.
const CHUNK: usize = 256;

/// Rows of the smaller tile that a block of at most this many rows (the last of a call) runs
/// on, where the ISA's tile is taller: M = 16 on a tile of 6 rows is 6 + 6 + 4, and the last
/// block would otherwise spend a third of its multiply-adds on repeated rows.
const SHORT_ROWS: usize = 4;

/// The first blocks of rows of a panel, at most this many, share the prefetch of the next
/// panel, a part each (see [`accumulate`]). Two measured faster than one and than four on a
/// Zen 3 at M = 16, with the weights streamed from memory and in cache (four issue twice the
/// prefetches, most of them for lines already asked for); at large `M` it matters little.
const SPREAD: usize = 2;

/// `acc[r] += Σ_{kk < k} a[r][kk]·B[kk]` over `k` rows of a packed panel, for the first
/// `rows` rows of the tile: on the tile's `MR` rows, or on its first [`SHORT_ROWS`] where
/// `rows` fits them (the other rows of `acc` are left as they are). Either way each row's
/// sums are the same operations in the same order.
///
/// Unless `next` is null, step `kk` also prefetches the `step` words at `next + kk·step` into
/// L2. Where the weights stream from memory (small `M`, a model larger than the LLC), the first
/// [`SPREAD`] blocks of rows of a panel each fetch their part of the next panel that way (`step
/// ≥ words/blocks`), so that its transfer overlaps most of the panel's compute (fetched by the
/// first block alone, at M = 16, it would be asked for in a third of that time, faster than the
/// memory delivers it). A prefetch never faults, so `next` needs no bounds (a part may run past
/// the next panel); the caller passes null rather than the current panel, whose rows are
/// already cached (prefetching them measured slower).
///
/// # Safety
/// Each `a[r]` holds `k` floats; `bp` holds `k` rows of `words` words; `1 ≤ rows ≤ MR`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn accumulate<S: Simd, P: PanelRow, const MR: usize, const NV: usize>(
    s: S,
    a: &[*const f32; MR],
    bp: *const u32,
    k: usize,
    words: usize,
    rows: usize,
    next: *const u32,
    step: usize,
    acc: &mut [[S::V; NV]; MR],
) {
    // SAFETY (both): forwarded.
    if MR > SHORT_ROWS && rows <= SHORT_ROWS {
        unsafe { accumulate_first::<S, P, SHORT_ROWS, MR, NV>(s, a, bp, k, words, next, step, acc) }
    } else {
        unsafe { accumulate_first::<S, P, MR, MR, NV>(s, a, bp, k, words, next, step, acc) }
    }
}

/// [`accumulate`] for the first `R ≤ MR` rows of the tile.
///
/// # Safety
/// As [`accumulate`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn accumulate_first<S: Simd, P: PanelRow, const R: usize, const MR: usize, const NV: usize>(
    s: S,
    a: &[*const f32; MR],
    bp: *const u32,
    k: usize,
    words: usize,
    next: *const u32,
    step: usize,
    acc: &mut [[S::V; NV]; MR],
) {
    const { assert!(R <= MR) };
    for kk in 0..k {
        if !next.is_null() {
            for line in (0..step).step_by(LINE_WORDS) {
                s.prefetch_l2(next.wrapping_add(kk * step + line).cast());
            }
        }
        // SAFETY: row `kk < k` of the panel and element `kk` of each row of `a`.
        unsafe {
            let b = P::load::<S, NV>(s, bp.add(kk * words));
            for r in 0..R {
                let av = s.splat(*a[r].add(kk));
                for v in 0..NV {
                    acc[r][v] = s.mul_add(av, b[v], acc[r][v]);
                }
            }
        }
    }
}

/// Runs a whole call: panel by panel, each block of `MR` rows against the whole panel.
///
/// # Safety
/// As [`LinearCall`], with the panels packed as `P` for tiles of `NV·LANES` columns; `MR ≤
/// MAX_MR`.
// `r` and `v` index the tile, the rows of `a` and the bias vectors together.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn run<S: Simd, E: Element, P: PanelRow, const MR: usize, const NV: usize>(s: S, c: &LinearCall<E>) {
    let (m, k, n) = (c.m, c.k, c.n);
    let lanes = S::LANES;
    let nr = NV * lanes;
    let words = P::words(nr);
    let zero = s.splat(0.0);
    let mut wide = [0.0f32; MAX_MR * CHUNK];
    for p in c.col0 / nr..c.col1.div_ceil(nr) {
        let col0 = p * nr;
        let cols = nr.min(c.col1 - col0);
        // SAFETY: panel `p` holds `k` rows of `words` words.
        let bp = unsafe { c.panels.add(p * k * words) };
        // The first blocks of rows prefetch the next panel (see `accumulate`).
        let next_panel = if (p + 1) * nr < c.col1 {
            bp.wrapping_add(k * words)
        } else {
            std::ptr::null()
        };
        let mut bias = [zero; NV];
        if !c.bias.is_null() {
            for (v, b) in bias.iter_mut().enumerate().take(cols.div_ceil(lanes)) {
                let count = (cols - v * lanes).min(lanes);
                // SAFETY: columns `col0 + v·LANES + count ≤ n` of the bias.
                *b = unsafe { load::<S, f32>(s, c.bias.add(col0 + v * lanes), count) };
            }
        }
        let blocks = m.div_ceil(MR).min(SPREAD);
        let step = words.div_ceil(blocks);
        let mut i0 = 0;
        while i0 < m {
            let rows = MR.min(m - i0);
            let mut acc = [[zero; NV]; MR];
            let block = i0 / MR;
            let next = if block < blocks && !next_panel.is_null() {
                next_panel.wrapping_add(block * k * step)
            } else {
                std::ptr::null()
            };
            if E::IS_F32 {
                // Rows past the end repeat the last row: computed, never stored.
                let mut a = [std::ptr::null::<f32>(); MR];
                for (r, a) in a.iter_mut().enumerate() {
                    // SAFETY: row `i0 + min(r, rows − 1) < m` of `x`.
                    *a = unsafe { c.x.add((i0 + r.min(rows - 1)) * k).cast::<f32>() };
                }
                // SAFETY: the rows hold `k` floats, the panel `k` rows.
                unsafe { accumulate::<S, P, MR, NV>(s, &a, bp, k, words, rows, next, step, &mut acc) };
            } else {
                let mut k0 = 0;
                while k0 < k {
                    let len = CHUNK.min(k - k0);
                    let mut a = [std::ptr::null::<f32>(); MR];
                    for r in 0..MR {
                        // SAFETY: elements `k0..k0 + len` of row `i0 + r < m`, into row `r` of
                        // the buffer (`MR ≤ MAX_MR` rows of `CHUNK`).
                        unsafe {
                            if r < rows {
                                crate::math::map_row(
                                    s,
                                    c.x.add((i0 + r) * k + k0),
                                    wide.as_mut_ptr().add(r * CHUNK),
                                    len,
                                    Identity,
                                );
                            }
                            a[r] = wide.as_ptr().add(r.min(rows - 1) * CHUNK);
                        }
                    }
                    let next = if next.is_null() {
                        next
                    } else {
                        next.wrapping_add(k0 * step)
                    };
                    // SAFETY: the buffer's rows hold `len` floats, the panel rows `k0..k0 + len`.
                    unsafe {
                        accumulate::<S, P, MR, NV>(s, &a, bp.add(k0 * words), len, words, rows, next, step, &mut acc)
                    };
                    k0 += len;
                }
            }
            for r in 0..rows {
                let row = (i0 + r) * n + col0;
                for v in 0..cols.div_ceil(lanes) {
                    let count = (cols - v * lanes).min(lanes);
                    let z = s.add(acc[r][v], bias[v]);
                    let mut y = match c.activation {
                        Activation::Identity => z,
                        // NaN stays NaN: `max` returns its first operand's NaN.
                        Activation::Relu => s.max(z, zero),
                        Activation::Gelu => gelu(s, z),
                        Activation::GeluTanh => gelu_tanh(s, z),
                        Activation::Swish => swish(s, z),
                    };
                    // SAFETY: columns `col0 + v·LANES + count ≤ n` of row `i0 + r < m` of the
                    // residual and of `out`.
                    unsafe {
                        if !c.residual.is_null() {
                            y = s.add(y, load::<S, E>(s, c.residual.add(row + v * lanes), count));
                        }
                        store_n::<S, E>(s, c.out.add(row + v * lanes), count, y);
                    }
                }
            }
            i0 += MR;
        }
    }
}

/// Loads `count ≤ LANES` elements, zero past them.
///
/// # Safety
/// `p..p + count` is readable.
#[inline(always)]
unsafe fn load<S: Simd, E: Element>(s: S, p: *const E, count: usize) -> S::V {
    // SAFETY: forwarded; the partial load stops at `count`.
    unsafe {
        if count == S::LANES {
            E::load(s, p)
        } else {
            E::load_partial(s, p, count, 0.0)
        }
    }
}
