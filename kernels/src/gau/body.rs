//! The fused GAU body, generic over [`Simd`] and the register tile `MR × NV` (see the
//! [module docs](super) for the algorithm).

use std::array;
use std::ops::Range;

use super::options::{GauAttention, GauShape, Normalizer, RopePairs};
use crate::aligned::LINE_WORDS;
use crate::attention::MaskShape;
use crate::dispatch::Op;
use crate::element::Element;
use crate::gemm::{
    assert_tile_fits, gemm, load_n, pack_b, pack_bt, packed_len, rank_update, store_n, tile, Epilogue, TileAt, MAX_NR,
};
use crate::math::activation::swish;
use crate::math::exp::exp_nonpositive;
use crate::math::gelu::normal_cdf;
use crate::math::Identity;
use crate::parallel::{within, Split};
use crate::simd::{Simd, TileOp};

/// A validated GAU call: every pointer covers what the shape gives, the workspace holds
/// [`workspace_len`] floats, the RoPE table `T·s` floats when RoPE is on, and `out` is
/// distinct from the inputs.
#[derive(Clone, Copy)]
pub(super) struct GauCall<E> {
    pub shape: GauShape,
    pub x: *const E,
    pub w_in: *const f32,
    /// Null when absent.
    pub b_in: *const f32,
    pub gamma_q: *const f32,
    pub beta_q: *const f32,
    pub gamma_k: *const f32,
    pub beta_k: *const f32,
    pub w_out: *const f32,
    /// Null when absent.
    pub b_out: *const f32,
    pub out: *mut E,
    pub scale: f32,
    pub normalizer: Normalizer,
    /// Null when absent.
    pub key_lengths: *const usize,
    pub causal: bool,
    /// Null when absent.
    pub bias: *const f32,
    /// The layout of `bias`.
    pub bias_shape: MaskShape,
    /// The pairs and the rotated width `r` of RoPE.
    pub rope: Option<(RopePairs, usize)>,
    pub attention: GauAttention,
    /// `[T][r/2]` pairs `(cos, sin)` when `rope` is set.
    pub rope_table: *const f32,
    /// The slot of workspace of this call (or part of a call), [`workspace_len`] floats.
    pub workspace: *mut f32,
    /// Floats from one part's slot of workspace to the next's.
    pub slot: usize,
    /// The sequences of the batch this call computes, `batches.0..batches.1`.
    pub batches: (usize, usize),
    /// What of the call this op runs.
    pub phase: Phase,
    /// The rows of the sequence a [`Phase::Project`] or [`Phase::Attend`] op computes.
    pub rows: (usize, usize),
    /// This part's own block accumulators ([`block_len`] floats) in a call split within a
    /// sequence; null to use those of the slot.
    pub blocks: *mut f32,
    /// Floats of the block accumulators of a part ([`block_len`]).
    pub block: usize,
    /// `w_in` and `w_out` are already packed for this ISA's panels ([`PackedGauWeights`]).
    pub packed: bool,
}

/// The fewest multiply-adds a part of a call has: about 20 µs of work.
const GRAIN_FMAS: usize = 1 << 21;

/// What a GAU op runs. A call runs [`Phase::All`], split over sequences; a call with fewer
/// sequences than threads runs the other phases in order instead, each sequence's projections
/// and attention split over blocks of rows (the weights and keys are packed once, on the calling
/// thread). Every row is computed by the same operations either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Every phase of the sequences `batches`.
    All,
    /// The weights packed into the slot (unless they come packed).
    Weights,
    /// The projections in of rows `rows` of a sequence, with their Q, K.
    Project(usize),
    /// The keys of a sequence packed.
    Keys(usize),
    /// The attention and the projection out of rows `rows` of a sequence.
    Attend(usize),
}

/// Query rows per block of the attention, whole micro-blocks of every ISA's tile (`MR` 6 or
/// 4). A sequence split over threads is split at multiples of it, so that a part's blocks, and
/// the keys each block visits, are the whole call's: the bits do not depend on the split. Not
/// a larger multiple: 1024 rows in units of 96 split 576 + 448 over two threads.
pub(super) const BLOCK_ROWS: usize = 48;

/// Micro-blocks per block for the smallest `MR` (4): the length of the per-block arrays.
const MICROS: usize = BLOCK_ROWS / 4;

/// Floats of the block accumulators of one part: the block's output rows and its probability
/// tiles.
pub(super) fn block_len(shape: &GauShape) -> Option<usize> {
    let l = Layout::new(shape, false, true)?;
    l.o_acc.checked_add(l.p)
}

impl<E: Element> Split for GauCall<E> {
    fn units(&self) -> usize {
        match self.phase {
            Phase::All => self.batches.1 - self.batches.0,
            Phase::Project(_) | Phase::Attend(_) => (self.rows.1 - self.rows.0).div_ceil(BLOCK_ROWS),
            Phase::Weights | Phase::Keys(_) => 1,
        }
    }

    fn grain(&self) -> usize {
        let GauShape {
            seq_len: t,
            dim: d,
            expand: e,
            qk_dim: sd,
            ..
        } = self.shape;
        let fmas = match self.phase {
            // The projections in and out, and the attention.
            Phase::All => t.saturating_mul(d.saturating_mul(3 * e + sd).saturating_add(t.saturating_mul(sd + e))),
            Phase::Project(_) => BLOCK_ROWS.saturating_mul(d).saturating_mul(2 * e + sd),
            Phase::Attend(_) => BLOCK_ROWS.saturating_mul(t.saturating_mul(sd + e).saturating_add(e * d)),
            Phase::Weights | Phase::Keys(_) => usize::MAX,
        };
        GRAIN_FMAS.div_ceil(fmas.max(1))
    }

    unsafe fn part(&self, units: Range<usize>, index: usize) -> Self {
        match self.phase {
            Phase::All => GauCall {
                batches: within(self.batches, units),
                workspace: self.workspace.wrapping_add(index * self.slot),
                ..*self
            },
            Phase::Project(_) | Phase::Attend(_) => {
                let start = self.rows.0 + units.start * BLOCK_ROWS;
                let end = (self.rows.0 + units.end * BLOCK_ROWS).min(self.rows.1);
                // Part 0 uses the slot's own accumulators, part `i` the `i`-th after the slot.
                let blocks = match (self.phase, index) {
                    (Phase::Attend(_), i) if i > 0 => self.workspace.wrapping_add(self.slot + (i - 1) * self.block),
                    _ => std::ptr::null_mut(),
                };
                GauCall {
                    rows: (start, end),
                    blocks,
                    ..*self
                }
            }
            Phase::Weights | Phase::Keys(_) => *self,
        }
    }
}

impl<E: Element> Op for GauCall<E> {
    type Output = ();

    #[inline(always)]
    unsafe fn eval<S: Simd>(self, s: S) {
        // SAFETY: the call's contract.
        unsafe { s.with_tile(self) }
    }
}

impl<E: Element> TileOp for GauCall<E> {
    type Output = ();

    #[inline(always)]
    unsafe fn eval<S: Simd, const MR: usize, const NV: usize>(self, s: S) {
        assert_tile_fits::<S, MR, NV>();
        // SAFETY: the call's contract; the tile fits the workspace's bounds.
        unsafe { run::<S, E, MR, NV>(s, &self) }
    }
}

/// Regions of the workspace, in floats, sized with the largest tile of any ISA and rounded up
/// to whole cache lines, so that each starts one as the workspace does.
struct Layout {
    w_in: usize,
    w_out: usize,
    h: usize,
    q: usize,
    k: usize,
    k_packed: usize,
    o_acc: usize,
    p: usize,
    /// One sequence of X widened to f32 (`T·d`), when X is not stored as f32; else 0.
    x: usize,
}

impl Layout {
    /// `packed`: the weights come packed (`PackedGauWeights`), so the workspace
    /// holds no copy of them.
    fn new(shape: &GauShape, widen_x: bool, packed: bool) -> Option<Layout> {
        let GauShape {
            seq_len: t,
            dim: d,
            expand: e,
            qk_dim: s,
            ..
        } = *shape;
        let w = e.checked_mul(2)?.checked_add(s)?;
        let rows = BLOCK_ROWS;
        Some(Layout {
            w_in: if packed {
                0
            } else {
                d.checked_mul(w.div_ceil(MAX_NR))?.checked_mul(MAX_NR)?
            },
            w_out: if packed {
                0
            } else {
                e.checked_mul(d.div_ceil(MAX_NR))?.checked_mul(MAX_NR)?
            },
            // V chunks are read whole past column 2e: pad the last row.
            h: lines(t.checked_mul(w)?.checked_add(MAX_NR)?)?,
            q: lines(t.checked_mul(s)?)?,
            k: lines(t.checked_mul(s)?)?,
            k_packed: t.div_ceil(MAX_NR).checked_mul(MAX_NR)?.checked_mul(s)?,
            o_acc: rows
                .checked_mul(e.div_ceil(MAX_NR).checked_add(1)?)?
                .checked_mul(MAX_NR)?,
            p: rows * MAX_NR,
            x: if widen_x { lines(t.checked_mul(d)?)? } else { 0 },
        })
    }

    fn total(&self) -> Option<usize> {
        [
            self.w_in,
            self.w_out,
            self.h,
            self.q,
            self.k,
            self.k_packed,
            self.o_acc,
            self.p,
            self.x,
        ]
        .into_iter()
        .try_fold(0usize, |acc, n| acc.checked_add(n))
    }
}

/// `n` floats rounded up to whole cache lines.
fn lines(n: usize) -> Option<usize> {
    n.checked_next_multiple_of(LINE_WORDS)
}

/// Floats of workspace any ISA needs for `shape` (with room for one widened sequence of X
/// when `widen_x`, and for the packed weights unless they come `packed`).
pub(super) fn workspace_len(shape: &GauShape, widen_x: bool, packed: bool) -> Option<usize> {
    Layout::new(shape, widen_x, packed)?.total()
}

/// `(cos, sin)` of `t·θ^(−2m/r)` for `t < T`, `m < r/2`, computed in f64 and rounded once.
pub(super) fn rope_table(t: usize, r: usize, base: f32) -> Vec<f32> {
    let mut table = Vec::with_capacity(t * r);
    for pos in 0..t {
        for m in 0..r / 2 {
            let (sin, cos) = (pos as f64 * (base as f64).powf(-2.0 * m as f64 / r as f64)).sin_cos();
            table.push(cos as f32);
            table.push(sin as f32);
        }
    }
    table
}

/// Epilogue of `X·W_in`: `h = swish(acc + b_in)`.
struct Projection {
    h: *mut f32,
    ldh: usize,
    bias: *const f32,
}

impl<S: Simd, const MR: usize, const NV: usize> Epilogue<S, MR, NV> for Projection {
    #[inline(always)]
    unsafe fn tile(&mut self, s: S, at: TileAt, acc: &[[S::V; NV]; MR]) {
        for (v, col) in (0..NV).map(|v| (v, v * S::LANES)).take_while(|&(_, c)| c < at.cols) {
            let count = (at.cols - col).min(S::LANES);
            // SAFETY: columns `at.col0 + col + count ≤ 2e+s`, rows `< T`: inside `h` and `b_in`.
            unsafe {
                let bias = if self.bias.is_null() {
                    s.splat(0.0)
                } else {
                    load_n(s, self.bias.add(at.col0 + col), count)
                };
                for (r, row) in acc.iter().enumerate().take(at.rows) {
                    let y = swish(s, s.add(row[v], bias));
                    store_n(s, self.h.add((at.row0 + r) * self.ldh + at.col0 + col), count, y);
                }
            }
        }
    }
}

/// Epilogue of `G·W_o`: `out = acc + b_o`, rounded once to the storage type `E`.
struct Output<E> {
    out: *mut E,
    ldo: usize,
    bias: *const f32,
}

impl<S: Simd, E: Element, const MR: usize, const NV: usize> Epilogue<S, MR, NV> for Output<E> {
    #[inline(always)]
    unsafe fn tile(&mut self, s: S, at: TileAt, acc: &[[S::V; NV]; MR]) {
        for (v, col) in (0..NV).map(|v| (v, v * S::LANES)).take_while(|&(_, c)| c < at.cols) {
            let count = (at.cols - col).min(S::LANES);
            // SAFETY: columns `< d`, rows `< T`: inside `out` and `b_o`.
            unsafe {
                let bias = if self.bias.is_null() {
                    s.splat(0.0)
                } else {
                    load_n(s, self.bias.add(at.col0 + col), count)
                };
                for (r, row) in acc.iter().enumerate().take(at.rows) {
                    store_n(
                        s,
                        self.out.add((at.row0 + r) * self.ldo + at.col0 + col),
                        count,
                        s.add(row[v], bias),
                    );
                }
            }
        }
    }
}

/// The regions of a call's workspace, and the weights it multiplies by.
struct Regions {
    w_in: *const f32,
    w_out: *const f32,
    h: *mut f32,
    q: *mut f32,
    kt: *mut f32,
    kp: *mut f32,
    o_acc: *mut f32,
    p_tile: *mut f32,
    x_wide: *mut f32,
}

impl Regions {
    /// The regions of `c`'s slot (the block's accumulators in `c.blocks` where it has its
    /// own); the weights as they come when packed, else their packed copies in the slot.
    ///
    /// # Safety
    /// `c.workspace` holds `layout.total()` floats; `c.blocks`, when not null, `layout.o_acc +
    /// layout.p`.
    #[inline(always)]
    unsafe fn of<E>(c: &GauCall<E>, layout: &Layout) -> Regions {
        debug_assert!(
            (c.workspace as usize).is_multiple_of(64) && (c.blocks as usize).is_multiple_of(64),
            "workspace regions start cache lines"
        );
        // SAFETY (offsets): the regions follow each other inside the slot's `total()` floats.
        unsafe {
            let w_in_p = c.workspace;
            let w_out_p = w_in_p.add(layout.w_in);
            let h = w_out_p.add(layout.w_out);
            let q = h.add(layout.h);
            let kt = q.add(layout.q);
            let kp = kt.add(layout.k);
            let mut o_acc = kp.add(layout.k_packed);
            let x_wide = o_acc.add(layout.o_acc + layout.p);
            if !c.blocks.is_null() {
                o_acc = c.blocks;
            }
            let (w_in, w_out) = if c.packed {
                (c.w_in, c.w_out)
            } else {
                (w_in_p.cast_const(), w_out_p.cast_const())
            };
            Regions {
                w_in,
                w_out,
                h,
                q,
                kt,
                kp,
                o_acc,
                p_tile: o_acc.add(layout.o_acc),
                x_wide,
            }
        }
    }
}

/// Runs the phase of a GAU call that `c.phase` names.
///
/// # Safety
/// As [`GauCall`]; `MR ≤ MAX_MR` and `NV·LANES` divides `MAX_NR`.
#[inline(always)]
unsafe fn run<S: Simd, E: Element, const MR: usize, const NV: usize>(s: S, c: &GauCall<E>) {
    let layout = Layout::new(&c.shape, !E::IS_F32, c.packed).expect("validated");
    // SAFETY: the call's contract.
    let r = unsafe { Regions::of(c, &layout) };
    let t = c.shape.seq_len;
    // SAFETY (every phase): the call's contract; the phases of one sequence run in order.
    unsafe {
        match c.phase {
            Phase::All => {
                pack_weights::<S, E, NV>(s, c, &layout);
                for b in c.batches.0..c.batches.1 {
                    project::<S, E, MR, NV>(s, c, &r, b, 0..t);
                    pack_keys::<S, E, NV>(s, c, &r, b);
                    attend::<S, E, MR, NV>(s, c, &r, b, 0..t);
                }
            }
            Phase::Weights => pack_weights::<S, E, NV>(s, c, &layout),
            Phase::Project(b) => project::<S, E, MR, NV>(s, c, &r, b, c.rows.0..c.rows.1),
            Phase::Keys(b) => pack_keys::<S, E, NV>(s, c, &r, b),
            Phase::Attend(b) => attend::<S, E, MR, NV>(s, c, &r, b, c.rows.0..c.rows.1),
        }
    }
}

/// Packs `W_in` and `W_out` into the slot's panels, unless they come packed.
///
/// # Safety
/// As [`GauCall`]; `layout` is the call's.
#[inline(always)]
unsafe fn pack_weights<S: Simd, E: Element, const NV: usize>(s: S, c: &GauCall<E>, layout: &Layout) {
    if c.packed {
        return;
    }
    let GauShape {
        dim: d,
        expand: e,
        qk_dim: sd,
        ..
    } = c.shape;
    let (w, nr) = (2 * e + sd, NV * S::LANES);
    debug_assert!(packed_len(d, w, nr) <= layout.w_in && packed_len(e, d, nr) <= layout.w_out);
    // SAFETY: the weights have the validated shapes; the packed regions are large enough.
    unsafe {
        pack_b(s, c.w_in, w, d, w, nr, c.workspace);
        pack_b(s, c.w_out, d, e, d, nr, c.workspace.add(layout.w_in));
    }
}

/// Rows `rows` of sequence `b`: `[U | V | Z] = swish(X·W_in + b_in)` (X read in place when
/// f32, else widened first), then their Q, K from Z, with RoPE.
///
/// # Safety
/// As [`GauCall`], the weights packed; `rows` inside `0..T`.
#[inline(always)]
unsafe fn project<S: Simd, E: Element, const MR: usize, const NV: usize>(
    s: S,
    c: &GauCall<E>,
    r: &Regions,
    b: usize,
    rows: Range<usize>,
) {
    let GauShape {
        seq_len: t,
        dim: d,
        expand: e,
        qk_dim: sd,
        ..
    } = c.shape;
    let w = 2 * e + sd;
    let lanes = S::LANES;
    let (i0, n) = (rows.start, rows.len());
    // SAFETY: X of batch `b` holds `T·d` elements, rows `i0..i0 + n` of it; `x_wide` holds
    // `T·d` floats when `E` is not f32; `h` holds `T·(2e+s)`.
    unsafe {
        let x = if E::IS_F32 {
            c.x.add((b * t + i0) * d).cast::<f32>()
        } else {
            crate::math::map_row(s, c.x.add((b * t + i0) * d), r.x_wide.add(i0 * d), n * d, Identity);
            r.x_wide.add(i0 * d).cast_const()
        };
        let mut epi = Projection {
            h: r.h.add(i0 * w),
            ldh: w,
            bias: c.b_in,
        };
        gemm::<S, MR, NV>(s, x, d, n, d, r.w_in, w, &mut epi);
    }
    for i in rows.clone() {
        let mut col = 0;
        while col < sd {
            let count = (sd - col).min(lanes);
            // SAFETY: row `i`, columns `col..col + count ≤ s` of Z, Q, K and the γ/β.
            unsafe {
                let z = load_n(s, r.h.add(i * w + 2 * e + col), count);
                let qv = s.mul_add(
                    z,
                    load_n(s, c.gamma_q.add(col), count),
                    load_n(s, c.beta_q.add(col), count),
                );
                let kv = s.mul_add(
                    z,
                    load_n(s, c.gamma_k.add(col), count),
                    load_n(s, c.beta_k.add(col), count),
                );
                store_n(s, r.q.add(i * sd + col), count, qv);
                store_n(s, r.kt.add(i * sd + col), count, kv);
            }
            col += count;
        }
    }
    if let Some((pairs, width)) = c.rope {
        // SAFETY: rows `i0..i0 + n` of Q and K (`s` floats each) and of the table (`r` each).
        unsafe {
            apply_rope(
                r.q.add(i0 * sd),
                r.kt.add(i0 * sd),
                c.rope_table.add(i0 * width),
                n,
                sd,
                (pairs, width),
            )
        };
    }
}

/// The keys of sequence `b`, from K, packed as the `B` of `Q·Kᵀ`.
///
/// # Safety
/// As [`GauCall`], after [`project`] of every row of the sequence.
#[inline(always)]
unsafe fn pack_keys<S: Simd, E: Element, const NV: usize>(s: S, c: &GauCall<E>, r: &Regions, b: usize) {
    let sd = c.shape.qk_dim;
    let nr = NV * S::LANES;
    let valid = valid_keys(c, b);
    // SAFETY: K holds `T` rows of `s`; `kp` holds `⌈T/MAX_NR⌉·MAX_NR·s ≥ tiles·nr·s`.
    unsafe { pack_bt(s, r.kt, sd, r.kp, valid, valid.div_ceil(nr), nr, sd) };
}

/// The keys sequence `b` has.
fn valid_keys<E>(c: &GauCall<E>, b: usize) -> usize {
    if c.key_lengths.is_null() {
        c.shape.seq_len
    } else {
        // SAFETY: `key_lengths` has `B` entries when present, `b < B`.
        unsafe { *c.key_lengths.add(b) }
    }
}

/// Rows `span` of sequence `b`: `A·V` per block of rows, gated by U in place, then
/// `O = G·W_o + b_o` for them.
///
/// # Safety
/// As [`GauCall`], after [`pack_keys`] of the sequence; `span` inside `0..T`.
// `m` indexes the block's micro-block states, alphas and buffers together.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn attend<S: Simd, E: Element, const MR: usize, const NV: usize>(
    s: S,
    c: &GauCall<E>,
    r: &Regions,
    b: usize,
    span: Range<usize>,
) {
    let GauShape {
        seq_len: t,
        dim: d,
        expand: e,
        qk_dim: sd,
        ..
    } = c.shape;
    let w = 2 * e + sd;
    let lanes = S::LANES;
    let nr = NV * lanes;
    let valid = valid_keys(c, b);
    let (h, q, kp, o_acc, p_tile) = (r.h, r.q, r.kp, r.o_acc, r.p_tile);
    // Rows of the block accumulators: `e` rounded up to whole tiles, plus one tile so that the
    // stride is never a multiple of 4 KiB (e = 1024 would put every row of a micro-block in
    // the same L1 set, and make loads alias the stores of the row before).
    let e_pad = (e.div_ceil(nr) + 1) * nr;
    const { assert!(BLOCK_ROWS.is_multiple_of(MR) && BLOCK_ROWS / MR <= MICROS) };
    let block = BLOCK_ROWS;
    let mut i0 = span.start;
    while i0 < span.end {
        let rows = block.min(span.end - i0);
        let micro = rows.div_ceil(MR);
        // SAFETY: the block's accumulators hold `block·e_pad ≤ layout.o_acc` floats.
        unsafe { std::slice::from_raw_parts_mut(o_acc, micro * MR * e_pad).fill(0.0) };
        let key_end = if c.causal { valid.min(i0 + rows) } else { valid };
        let mut states = [RowSoftmax::<S, MR>::new(s); MICROS];
        let mut alphas = [[s.splat(1.0); MR]; MICROS];
        // `n_i` of each row of the block's micro-blocks, as `scores` maps their rows; only
        // where the attention reads it.
        let counted = matches!(c.attention, GauAttention::SoftmaxPlus { .. })
            || c.normalizer == Normalizer::ValidKeys && !matches!(c.attention, GauAttention::Softmax);
        let counts: [[usize; MR]; MICROS] = array::from_fn(|m| {
            array::from_fn(|r| {
                let i = (i0 + m * MR + r).min(i0 + rows - 1);
                if counted && m < micro {
                    keys_seen(c, b, i, if c.causal { valid.min(i + 1) } else { valid })
                } else {
                    0
                }
            })
        });
        for tt in 0..key_end.div_ceil(nr) {
            let j0 = tt * nr;
            for m in 0..micro {
                let r0 = i0 + m * MR;
                // SAFETY: rows `< T`, tile `tt` of the packed keys, the block's `p` tile.
                alphas[m] = unsafe {
                    scores::<S, E, MR, NV>(
                        s,
                        c,
                        q,
                        kp.add(tt * sd * nr),
                        p_tile.add(m * MR * nr),
                        r0,
                        i0 + rows,
                        j0,
                        (b, valid),
                        &counts[m],
                        &mut states[m],
                    )
                };
            }
            let keys = nr.min(key_end - j0);
            let mut c0 = 0;
            while c0 < e {
                for m in 0..micro {
                    // SAFETY: V rows `j0..j0 + keys < T` at columns `e + c0..e + c0 + nr`
                    // (inside the padded `h`); the block's `p` and accumulators.
                    unsafe {
                        rank_update::<S, MR, NV>(
                            s,
                            p_tile.add(m * MR * nr),
                            nr,
                            keys,
                            h.add(j0 * w + e + c0),
                            w,
                            o_acc.add(m * MR * e_pad + c0),
                            e_pad,
                            Some(&alphas[m]),
                        )
                    };
                }
                c0 += nr;
            }
        }
        for r in 0..rows {
            // The softmaxes divide by the row's sum here; relu² and Laplace need nothing.
            let norm = s.splat(
                if matches!(c.attention, GauAttention::Softmax | GauAttention::SoftmaxPlus { .. }) {
                    states[r / MR].inv_sum(s, r % MR)
                } else {
                    1.0
                },
            );
            let mut col = 0;
            while col < e {
                let count = (e - col).min(lanes);
                // SAFETY: row `i0 + r < T` of U (in `h`) and of the accumulators.
                unsafe {
                    let u = h.add((i0 + r) * w + col);
                    let av = s.mul(s.load(o_acc.add(r * e_pad + col)), norm);
                    let g = s.mul(load_n(s, u, count), av);
                    store_n(s, u, count, g);
                }
                col += count;
            }
        }
        i0 += rows;
    }

    // O = G·W_o + b_o for the rows, with G over U's columns of `h`.
    // SAFETY: `h` holds `T` rows of stride `2e+s` whose first `e` columns are G, rows `span`
    // of them gated above; the output of batch `b` holds `T·d` floats.
    unsafe {
        let mut epi = Output {
            out: c.out.add((b * t + span.start) * d),
            ldo: d,
            bias: c.b_out,
        };
        gemm::<S, MR, NV>(s, h.add(span.start * w), w, span.len(), e, r.w_out, d, &mut epi);
    }
}

/// The running max and sums of softmax-plus for the `MR` rows of a micro-block.
#[derive(Clone, Copy)]
struct RowSoftmax<S: Simd, const MR: usize> {
    max: [f32; MR],
    sums: [S::V; MR],
}

impl<S: Simd, const MR: usize> RowSoftmax<S, MR> {
    fn new(s: S) -> Self {
        RowSoftmax {
            max: [f32::NEG_INFINITY; MR],
            sums: [s.splat(0.0); MR],
        }
    }

    /// `1/Σ p` of row `r`, or 0 for a row that saw no key (its `A·V` is 0); NaN stays NaN.
    fn inv_sum(&self, s: S, r: usize) -> f32 {
        let sum = s.reduce_add(self.sums[r]);
        if self.max[r] == f32::NEG_INFINITY && !sum.is_nan() {
            0.0
        } else {
            1.0 / sum
        }
    }
}

/// The `MR × nr` tile of `A` for rows `r0..` (up to `row_end`) and keys `j0..`, stored
/// row-major with stride `nr` at `p`: scores, scale, bias, then either `relu²/l` and the mask,
/// or (softmax-plus) the length factor, the mask and the online softmax's `exp(z − m)`.
/// Returns the factors that rescale the rows' accumulators (1 for relu²).
///
/// # Safety
/// `r0 < row_end ≤ T`; `kp` is one packed key tile; `p` holds `MR·nr` floats.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn scores<S: Simd, E: Element, const MR: usize, const NV: usize>(
    s: S,
    c: &GauCall<E>,
    q: *const f32,
    kp: *const f32,
    p: *mut f32,
    r0: usize,
    row_end: usize,
    j0: usize,
    (b, valid): (usize, usize),
    counts: &[usize; MR],
    state: &mut RowSoftmax<S, MR>,
) -> [S::V; MR] {
    let GauShape {
        seq_len: t, qk_dim: sd, ..
    } = c.shape;
    let lanes = S::LANES;
    let neg_inf = s.splat(f32::NEG_INFINITY);
    let row = |r: usize| (r0 + r).min(row_end - 1);
    // SAFETY: `row(r) < T`.
    let q_rows: [*const f32; MR] = array::from_fn(|r| unsafe { q.add(row(r) * sd) });
    // SAFETY: forwarded.
    let acc = unsafe { tile::<S, MR, NV>(s, &q_rows, kp, sd) };
    let mut alpha = [s.splat(1.0); MR];
    for (r, acc_r) in acc.iter().enumerate() {
        let i = row(r);
        let allowed = if c.causal { valid.min(i + 1) } else { valid };
        let bias = bias_row(c, b, i);
        // The scores `c·Q·K + B` of the row (−∞ where the bias disallows a key, whatever the
        // product), and how many lanes of each vector it may see.
        let mut z = [s.splat(0.0); NV];
        let mut seen = [0usize; NV];
        for v in 0..NV {
            let jv = j0 + v * lanes;
            seen[v] = allowed.saturating_sub(jv).min(lanes);
            if seen[v] > 0 {
                z[v] = s.mul(acc_r[v], s.splat(c.scale));
                if !bias.is_null() {
                    // SAFETY: `seen ≥ 1` lanes from `jv < T` lie inside the row of the bias.
                    let bv = unsafe { load_n(s, bias.add(jv), (t - jv).min(lanes)) };
                    z[v] = s.select(s.eq(bv, neg_inf), neg_inf, s.add(z[v], bv));
                }
            }
        }
        let inv_l = || {
            s.splat(match c.normalizer {
                Normalizer::SeqLen => (1.0 / t as f64) as f32,
                Normalizer::ValidKeys => (1.0 / counts[r].max(1) as f64) as f32,
                Normalizer::Value(l) => (1.0 / l as f64) as f32,
            })
        };
        let out = match c.attention {
            GauAttention::Relu2 => {
                let inv_l = inv_l();
                let mut out = [s.splat(0.0); NV];
                for v in 0..NV {
                    // relu with the score first: a NaN score stays NaN.
                    let rl = s.max(z[v], s.splat(0.0));
                    let av = s.mul(s.mul(rl, rl), inv_l);
                    out[v] = s.select(s.first_lanes(seen[v]), av, s.splat(0.0));
                }
                out
            }
            GauAttention::Laplace => {
                let inv_l = inv_l();
                let mut out = [s.splat(0.0); NV];
                for v in 0..NV {
                    let y = s.mul(s.sub(z[v], s.splat(LAPLACE_MU)), s.splat(LAPLACE_INV_SIGMA));
                    let av = s.mul(normal_cdf(s, y), inv_l);
                    out[v] = s.select(s.first_lanes(seen[v]), av, s.splat(0.0));
                }
                out
            }
            GauAttention::Softmax | GauAttention::SoftmaxPlus { .. } => {
                let mut tile_max = f32::NEG_INFINITY;
                for v in 0..NV {
                    z[v] = s.select(s.first_lanes(seen[v]), z[v], neg_inf);
                }
                if let GauAttention::SoftmaxPlus { min_len } = c.attention {
                    let factor = s.splat(length_factor(counts[r], min_len));
                    for zv in &mut z {
                        // Masked keys stay −∞ (a factor of 0 would make them NaN).
                        *zv = s.select(s.eq(*zv, neg_inf), neg_inf, s.mul(*zv, factor));
                    }
                }
                for zv in &z {
                    tile_max = tile_max.max(s.reduce_max(*zv));
                }
                let new_max = state.max[r].max(tile_max);
                // While a row has seen only −∞, subtract 0 so that −∞ − m is not NaN.
                let shift = if new_max == f32::NEG_INFINITY { 0.0 } else { new_max };
                alpha[r] = exp_nonpositive(s, s.splat(state.max[r] - shift));
                state.max[r] = new_max;
                let mut sum = s.mul(state.sums[r], alpha[r]);
                let mut out = [s.splat(0.0); NV];
                for v in 0..NV {
                    out[v] = exp_nonpositive(s, s.sub(z[v], s.splat(shift)));
                    sum = s.add(sum, out[v]);
                }
                state.sums[r] = sum;
                out
            }
        };
        for (v, &o) in out.iter().enumerate() {
            // SAFETY: row `r`, lanes `v·LANES..` of the `MR × nr` tile.
            unsafe { s.store(p.add(r * NV * lanes + v * lanes), o) };
        }
    }
    alpha
}

/// Laplace's `μ = √½` and `1/σ = √(4π)`, rounded once.
const LAPLACE_MU: f32 = std::f32::consts::FRAC_1_SQRT_2;
const LAPLACE_INV_SIGMA: f32 = 3.544_907_7;

/// Row `i` of sequence `b`'s bias at key 0; null when the call has none.
fn bias_row<E>(c: &GauCall<E>, b: usize, i: usize) -> *const f32 {
    if c.bias.is_null() {
        return c.bias;
    }
    let t = c.shape.seq_len;
    let at = match c.bias_shape {
        MaskShape::Shared => i * t,
        MaskShape::PerBatch | MaskShape::PerHead => (b * t + i) * t,
        MaskShape::KeyPadding => b * t,
    };
    // SAFETY: validation checked the bias's length against its shape; `b < B`, `i < T`.
    unsafe { c.bias.add(at) }
}

/// `n_i`: the keys row `i` of sequence `b` sees, its first `allowed` less those its bias
/// disallows with −∞.
fn keys_seen<E>(c: &GauCall<E>, b: usize, i: usize, allowed: usize) -> usize {
    let row = bias_row(c, b, i);
    if row.is_null() {
        return allowed;
    }
    // SAFETY: the row of the bias has `T ≥ allowed` values.
    let row = unsafe { std::slice::from_raw_parts(row, allowed) };
    row.iter().filter(|&&v| v != f32::NEG_INFINITY).count()
}

/// GAU-α's `ln(max(l, min_len))/ln 512` for a row that sees `l` keys, rounded once.
fn length_factor(allowed: usize, min_len: usize) -> f32 {
    ((allowed.max(min_len) as f64).ln() / 512f64.ln()) as f32
}

/// Rotates the pairs of the first `r` dimensions of every row of Q and K by the table's angles.
///
/// # Safety
/// `q`, `k` hold `T·s` floats, `table` `T·r`; `r ≤ s` is even.
#[inline(always)]
unsafe fn apply_rope(q: *mut f32, k: *mut f32, table: *const f32, t: usize, sd: usize, (pairs, r): (RopePairs, usize)) {
    let half = r / 2;
    for i in 0..t {
        for m in 0..half {
            let (a, b) = match pairs {
                RopePairs::Interleaved => (2 * m, 2 * m + 1),
                RopePairs::HalfSplit => (m, m + half),
            };
            // SAFETY: `i < T`, `a, b < r ≤ s`.
            unsafe {
                let (cos, sin) = (*table.add((i * half + m) * 2), *table.add((i * half + m) * 2 + 1));
                for x in [q, k] {
                    let (x0, x1) = (*x.add(i * sd + a), *x.add(i * sd + b));
                    *x.add(i * sd + a) = x0.mul_add(cos, -(x1 * sin));
                    *x.add(i * sd + b) = x0.mul_add(sin, x1 * cos);
                }
            }
        }
    }
}
