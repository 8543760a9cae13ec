//! The fused attention body, generic over [`Simd`] and the register tile `MR × NV`.
//!
//! Per `(b, kv head)`: pack K into key tiles `[tile][d][NR]` and V into rows of `dv_pad`
//! floats (both widened to f32 as they are packed, whatever the storage type `E`). Per query
//! head and block of `MR` query rows (for `E ≠ f32` first widened into a small f32 region):
//! for each step of `MAX_NR` keys (one tile on AVX-512, several narrower ones elsewhere), the
//! `MR × NR` scores of a tile live in `MR·NV` vector registers while each row's max `m` is
//! updated; they are turned into the step's `exp(z − m)` (in a small L1 buffer,
//! `MR × MAX_NR`; a step of several tiles parks its scores there until its max is known) and
//! each row's vector of partial sums; then `p·V` is accumulated into the block's output rows
//! (`MR × dv_pad`, also L1), each rescaled by `exp(m_old − m_new)` as it is loaded; the rows
//! are rounded to `E` as they are stored. Under [`AttentionPlan::KeyBlocks`] the steps of a
//! block of rows run one key block at a time ([`Block::keys`]), the rows' softmax state
//! ([`RowState`]) and output rows kept between them. See the [module docs](super) for
//! semantics and bounds.

use std::array;
use std::ops::Range;

use super::options::{AttentionPlan, Layout};
use crate::dispatch::Op;
use crate::element::Element;
use crate::gemm::{assert_tile_fits, pack_bt, rank_update, tile, tile_cols, MAX_MR, MAX_NR};
use crate::math::exp::exp_nonpositive;
use crate::math::Identity;
use crate::parallel::{within, Split};
use crate::simd::{Simd, TileOp};
use crate::softmax::MaskedRows;
use crate::stores::Caches;

/// A validated attention call. `q`, `k`, `v` and `out` hold every element their layouts place
/// (`Q[B, H, Lq, Dk]`, `K[B, Hkv, Lk, Dk]`, `V[B, Hkv, Lk, Dv]`, `O[B, H, Lq, Dv]`), no two
/// elements of `O` in the same place; `scores` and `prev` cover `B·H·Lq·Lk`, the mask every
/// element its strides reach, `key_lengths` `B` entries each ≤ `Lk`; `out` and `scores` are
/// distinct from the inputs; `H` is a multiple of `Hkv`; the workspace holds
/// [`workspace_len`] floats.
#[derive(Clone, Copy)]
pub(super) struct AttentionCall<E> {
    pub batch: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub q_len: usize,
    pub kv_len: usize,
    pub head_dim: usize,
    pub value_dim: usize,
    pub q: *const E,
    pub q_layout: Layout,
    pub k: *const E,
    pub k_layout: Layout,
    pub v: *const E,
    pub v_layout: Layout,
    pub out: *mut E,
    pub out_layout: Layout,
    /// Null when not asked for.
    pub scores: *mut f32,
    /// Null when absent.
    pub prev: *const f32,
    /// Null when absent.
    pub mask: *const f32,
    /// Elements between the masks of consecutive batches, heads and query rows (0 where
    /// broadcast).
    pub mask_batch_stride: usize,
    pub mask_head_stride: usize,
    pub mask_row_stride: usize,
    /// Null when absent (then every key is valid).
    pub key_lengths: *const usize,
    pub causal: bool,
    pub scale: f32,
    /// `1/(ℓ+1)`, or `None` without running mean.
    pub mean_factor: Option<f32>,
    pub carry_masked: bool,
    pub masked_rows: MaskedRows,
    /// The slot of workspace of this call (or part of a call), [`workspace_len`] floats.
    pub workspace: *mut f32,
    /// Floats from one part's slot of workspace to the next's.
    pub slot: usize,
    /// Query rows of a unit of work: `Lq` in one unit, or a multiple of [`Q_UNIT`].
    pub q_chunk: usize,
    /// How the call walks its keys and queries.
    pub plan: AttentionPlan,
    /// The units of work of this call: unit `u` is query rows `(u mod chunks)·q_chunk..` of
    /// every query head of kv head `(u / chunks) mod Hkv` of batch `u / (chunks·Hkv)`, with
    /// `chunks = ⌈Lq/q_chunk⌉`.
    pub units: (usize, usize),
}

/// Query rows of a unit, when a head's rows are split across units, are a multiple of this:
/// of every ISA's tile height (6 or 4), so that a part's blocks of `MR` rows are those of the
/// whole call, and of the widest [`MAX_MR`].
pub(super) const Q_UNIT: usize = 48;

/// The fewest multiply-adds a part of a call has: about 20 µs of work.
const GRAIN_FMAS: usize = 1 << 21;

impl<E> AttentionCall<E> {
    /// Units of query rows per `(batch, kv head)`.
    pub(super) fn chunks(&self) -> usize {
        self.q_len.div_ceil(self.q_chunk)
    }

    /// Multiply-adds of one unit, about: `Q·Kᵀ` and `P·V` for its rows of each query head.
    pub(super) fn unit_fmas(&self) -> usize {
        let group = self.heads / self.kv_heads;
        (group * self.q_chunk.min(self.q_len))
            .saturating_mul(self.kv_len)
            .saturating_mul(self.head_dim + self.value_dim)
    }

    /// The number of units of the whole call.
    pub(super) fn all_units(&self) -> usize {
        self.batch * self.kv_heads * self.chunks()
    }
}

impl<E: Element> Split for AttentionCall<E> {
    fn units(&self) -> usize {
        self.units.1 - self.units.0
    }

    fn grain(&self) -> usize {
        GRAIN_FMAS.div_ceil(self.unit_fmas().max(1))
    }

    unsafe fn part(&self, units: Range<usize>, index: usize) -> Self {
        AttentionCall {
            units: within(self.units, units),
            workspace: self.workspace.wrapping_add(index * self.slot),
            ..*self
        }
    }
}

impl<E: Element> Op for AttentionCall<E> {
    type Output = ();

    #[inline(always)]
    unsafe fn eval<S: Simd>(self, s: S) {
        // SAFETY: the call's contract.
        unsafe { s.with_tile(self) }
    }
}

impl<E: Element> TileOp for AttentionCall<E> {
    type Output = ();

    #[inline(always)]
    unsafe fn eval<S: Simd, const MR: usize, const NV: usize>(self, s: S) {
        assert_tile_fits::<S, MR, NV>();
        // SAFETY: the call's contract; the tile fits the workspace's bounds.
        unsafe { run::<S, E, MR, NV>(s, &self) }
    }
}

/// Floats of workspace any ISA needs for `Lk` keys of dimension `Dk` and values of `Dv`: K
/// tiles and V rows of one kv head, padded to `MAX_NR` keys and value columns, plus the output
/// rows of one query block ([`Q_UNIT`] rows) and one probability tile, plus (last, read only
/// when the storage type is not f32) the block's queries widened to f32, `Q_UNIT × Dk`.
/// `None` if it overflows.
pub(super) fn workspace_len(kv_len: usize, head_dim: usize, value_dim: usize) -> Option<usize> {
    let keys = kv_len.div_ceil(MAX_NR).checked_mul(MAX_NR)?;
    let dv_pad = value_dim.div_ceil(MAX_NR).checked_mul(MAX_NR)?;
    let k = keys.checked_mul(head_dim)?;
    let v = keys.checked_mul(dv_pad)?;
    let block = Q_UNIT.checked_mul(dv_pad)?.checked_add(MAX_MR * MAX_NR)?;
    let q = Q_UNIT.checked_mul(head_dim)?;
    k.checked_add(v)?.checked_add(block)?.checked_add(q)
}

/// The walk of a call with `Lk` keys of dimension `Dk` and values of `Dv` on a core with
/// `caches`, `4·(Dk + Dv)` bytes a key (f32, value rows padded to 16 floats); `score_rows`:
/// the call reads or writes `Lk` values per query (P, S, a mask of whole rows).
/// - [`AttentionPlan::KeyBlocks`] of the most whole softmax steps (`MAX_NR` keys) whose K and
///   V fit two thirds of the level-1 cache, where at least one does, the head does not, and
///   the call has no score rows: each block is then read from L1 by the `Q_UNIT / MR`
///   micro-blocks of a query block rather than from L2 by each, which pays where the FMA rate
///   asks many bytes a cycle (AVX-512). Two thirds: the rest holds a micro-block's queries,
///   output rows and probabilities. Score rows would be walked 64 values at a time, one row
///   after another, which the prefetchers follow badly.
/// - Else [`AttentionPlan::Rows`] where one head's packed K and V fit half of the level-2
///   cache, or key blocks that fill that half beside a query block's rows of Q and O. Half:
///   the block shares the cache with the queries, the outputs, the probability tile, the
///   streams of P and S, and the lines the prefetchers bring ahead.
pub(super) fn plan(
    caches: Caches,
    kv_len: usize,
    head_dim: usize,
    value_dim: usize,
    score_rows: bool,
) -> AttentionPlan {
    let key_bytes = 4usize.saturating_mul(head_dim.saturating_add(value_dim.next_multiple_of(16)));
    let l1_keys = (caches.l1 / 3 * 2).checked_div(key_bytes).unwrap_or(0) / MAX_NR * MAX_NR;
    if !score_rows && l1_keys > 0 && kv_len > l1_keys {
        return AttentionPlan::KeyBlocks {
            keys: l1_keys,
            query_rows: Q_UNIT,
        };
    }
    let budget = caches.l2 / 2;
    if kv_len.saturating_mul(key_bytes) <= budget {
        return AttentionPlan::Rows;
    }
    let rows = Q_UNIT.saturating_mul(key_bytes);
    let keys = budget.saturating_sub(rows) / key_bytes;
    AttentionPlan::KeyBlocks {
        keys: (keys / MAX_NR).max(1) * MAX_NR,
        query_rows: Q_UNIT,
    }
}

/// Runs a whole attention call.
///
/// # Safety
/// As [`AttentionCall`]; `MR ≤ MAX_MR` and `NV·LANES` divides `MAX_NR`.
#[inline(always)]
unsafe fn run<S: Simd, E: Element, const MR: usize, const NV: usize>(s: S, c: &AttentionCall<E>) {
    let AttentionCall {
        heads,
        kv_heads,
        q_len,
        kv_len,
        head_dim: dk,
        value_dim: dv,
        ..
    } = *c;
    // A part's blocks are the whole call's: its rows start at a multiple of `MR`.
    assert!(
        c.chunks() == 1 || c.q_chunk.is_multiple_of(MR),
        "query chunks of whole tiles"
    );
    let nr = NV * S::LANES;
    let tiles = kv_len.div_ceil(nr);
    // Value rows are padded to whole vectors only: `p·V` runs a narrower tile on the last
    // vectors of a row rather than multiply-add zeros (a head of 32 on AVX-512 would waste
    // half of them in a 64-column tile).
    let dv_pad = dv.div_ceil(S::LANES) * S::LANES;
    let group = heads / kv_heads;
    // Workspace: K tiles, V rows, the query block's output rows and a probability tile, then
    // the block's widened queries (used only when `E` is not f32).
    let kp = c.workspace;
    debug_assert!((kp as usize).is_multiple_of(64), "workspace slots start cache lines");
    // SAFETY (workspace offsets): `tiles·nr ≤ ⌈Lk/MAX_NR⌉·MAX_NR` because `nr` divides
    // `MAX_NR`, and `dv_pad ≤` the padded `Dv` of `workspace_len`, so every region fits.
    let vp = unsafe { kp.add(tiles * nr * dk) };
    let o_acc = unsafe { vp.add(tiles * nr * dv_pad) };
    let p_tile = unsafe { o_acc.add(Q_UNIT * dv_pad) };
    // SAFETY: `MR ≤ MAX_MR`, `nr ≤ MAX_NR`: the block regions fit in
    // `Q_UNIT·dv_pad + MAX_MR·MAX_NR` of the padded `Dv`, and `Q_UNIT·Dk` floats follow them.
    let q_wide = unsafe {
        let keys = kv_len.div_ceil(MAX_NR) * MAX_NR;
        let dv_max = dv.div_ceil(MAX_NR) * MAX_NR;
        kp.add(keys * dk + keys * dv_max + Q_UNIT * dv_max + MAX_MR * MAX_NR)
    };
    // Rows of a query block, and tiles of a key block (whole softmax steps: `MAX_NR` divides
    // the block).
    let (block_rows, block_tiles) = match c.plan {
        AttentionPlan::KeyBlocks { keys, query_rows } => (query_rows, keys / nr),
        _ => (MR, tiles),
    };
    const { assert!(Q_UNIT.is_multiple_of(MR) && Q_UNIT / MR <= MICROS) };
    let chunks = c.chunks();
    // The states of a query block's micro-blocks, each set by `begin` before it is read.
    let mut states = [RowState::<S, MR>::new(s); MICROS];
    // The `(b, kv head)` whose K and V the workspace holds.
    let mut packed_for = None;
    for u in c.units.0..c.units.1 {
        let (b, hk, chunk) = (u / (chunks * kv_heads), (u / chunks) % kv_heads, u % chunks);
        // SAFETY: `key_lengths` has `B` entries when present.
        let valid = if c.key_lengths.is_null() {
            kv_len
        } else {
            unsafe { *c.key_lengths.add(b) }
        };
        if packed_for != Some((b, hk)) {
            packed_for = Some((b, hk));
            // Scores are asked for everywhere, padding included: pack all keys then.
            let packed = if c.scores.is_null() { valid } else { kv_len };
            // SAFETY: K and V of `(b, hk)` hold `Lk` rows at their layouts' row strides; the
            // workspace regions hold the padded tiles (see above).
            unsafe {
                let (kl, vl) = (c.k_layout, c.v_layout);
                let k = c.k.add(kl.offset + b * kl.batch + hk * kl.head);
                pack_bt(s, k, kl.row, kp, packed, tiles, nr, dk);
                let v = c.v.add(vl.offset + b * vl.batch + hk * vl.head);
                pack_v(s, v, vl.row, vp, valid, tiles * nr, dv, dv_pad);
            }
        }
        let rows = chunk * c.q_chunk..((chunk + 1) * c.q_chunk).min(q_len);
        for h in hk * group..(hk + 1) * group {
            let mut i0 = rows.start;
            while i0 < rows.end {
                let end = (i0 + block_rows).min(rows.end);
                let micros = (end - i0).div_ceil(MR);
                // Micro-block `m`: rows `i0 + m·MR..`, its output rows and widened queries.
                let block = |m: usize| Block {
                    b,
                    h,
                    i0: i0 + m * MR,
                    rows: MR.min(end - i0 - m * MR),
                    valid,
                    nr,
                    tiles,
                    dv_pad,
                    kp,
                    vp,
                    o_acc: o_acc.wrapping_add(m * MR * dv_pad),
                    p_tile,
                    q_wide: q_wide.wrapping_add(m * MR * dk),
                };
                // SAFETY (below): forwarded; each micro-block lies inside `(b, h)`, its
                // regions inside the block's (`micros·MR ≤ Q_UNIT` rows).
                for (m, state) in states[..micros].iter_mut().enumerate() {
                    *state = unsafe { block(m).begin::<S, E, MR, NV>(s, c) };
                }
                let mut t0 = 0;
                while t0 < tiles {
                    let t1 = (t0 + block_tiles).min(tiles);
                    for (m, state) in states[..micros].iter_mut().enumerate() {
                        unsafe { block(m).keys::<S, E, MR, NV>(s, c, state, t0..t1) };
                    }
                    t0 = t1;
                }
                for (m, state) in states[..micros].iter().enumerate() {
                    unsafe { block(m).end::<S, E, MR, NV>(s, c, state) };
                }
                i0 = end;
            }
        }
    }
}

/// Micro-blocks of a query block at most: [`Q_UNIT`] rows of the shortest tile (4 rows).
const MICROS: usize = Q_UNIT / 4;

/// Copies value rows `0..count` (`ldv` elements apart) into rows of `dv_pad` floats, zero
/// elsewhere up to `keys`, widening them to f32 on the way when they are stored as another `E`.
///
/// # Safety
/// `v` holds `count` rows of `dv` elements, `ldv` apart; `vp` holds `keys·dv_pad` floats.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn pack_v<S: Simd, E: Element>(
    s: S,
    v: *const E,
    ldv: usize,
    vp: *mut f32,
    count: usize,
    keys: usize,
    dv: usize,
    dv_pad: usize,
) {
    for j in 0..keys {
        // SAFETY: rows `j < count` of `v` are read; row `j` of `vp` is written.
        unsafe {
            let dst = std::slice::from_raw_parts_mut(vp.add(j * dv_pad), dv_pad);
            if j < count {
                if E::IS_F32 {
                    dst[..dv].copy_from_slice(std::slice::from_raw_parts(v.add(j * ldv).cast::<f32>(), dv));
                } else {
                    crate::math::map_row(s, v.add(j * ldv), dst.as_mut_ptr(), dv, Identity);
                }
                dst[dv..].fill(0.0);
            } else {
                dst.fill(0.0);
            }
        }
    }
}

/// What a block of `MR` query rows carries from one range of keys to the next: its queries,
/// the keys each row sees, and its online softmax (each row's max and vector of sums; the
/// output rows are in the block's workspace).
#[derive(Clone, Copy)]
struct RowState<S: Simd, const MR: usize> {
    q_rows: [*const f32; MR],
    allowed: [usize; MR],
    live_tiles: usize,
    score_tiles: usize,
    whole_tiles: usize,
    last_key: usize,
    max: [f32; MR],
    sums: [S::V; MR],
}

impl<S: Simd, const MR: usize> RowState<S, MR> {
    /// A state that no block has started (a placeholder in arrays of them).
    fn new(s: S) -> Self {
        RowState {
            q_rows: [std::ptr::null(); MR],
            allowed: [0; MR],
            live_tiles: 0,
            score_tiles: 0,
            whole_tiles: 0,
            last_key: 0,
            max: [f32::NEG_INFINITY; MR],
            sums: [s.splat(0.0); MR],
        }
    }
}

/// One block of up to `MR` query rows of head `(b, h)`.
struct Block {
    b: usize,
    h: usize,
    i0: usize,
    rows: usize,
    valid: usize,
    nr: usize,
    tiles: usize,
    dv_pad: usize,
    kp: *const f32,
    vp: *const f32,
    o_acc: *mut f32,
    p_tile: *mut f32,
    /// `MR` rows of `Dk` floats: the block's queries widened, when `E` is not f32.
    q_wide: *mut f32,
}

impl Block {
    /// Starts the block: its queries (widened once where `E` is not f32), the keys each row
    /// sees, and an empty softmax.
    ///
    /// # Safety
    /// As [`run`]; the block's rows lie inside head `(b, h)`.
    #[inline(always)]
    unsafe fn begin<S: Simd, E: Element, const MR: usize, const NV: usize>(
        &self,
        s: S,
        c: &AttentionCall<E>,
    ) -> RowState<S, MR> {
        let AttentionCall {
            q_len,
            kv_len,
            head_dim: dk,
            ..
        } = *c;
        let nr = self.nr;
        let ql = c.q_layout;
        let q_head = ql.offset + self.b * ql.batch + self.h * ql.head;
        // SAFETY: `self.row(r) < Lq`, so each pointer is a row of Q of head `(b, h)`.
        let q_rows: [*const f32; MR] = if E::IS_F32 {
            // f32 queries are read in place.
            array::from_fn(|r| unsafe { c.q.add(q_head + self.row(r) * ql.row).cast::<f32>() })
        } else {
            // Other storage: widen the block's rows once (`rows·Dk`, against `Lk·Dk` FMAs per
            // row), repeated rows pointing at the last.
            for r in 0..self.rows {
                // SAFETY: row `i0 + r < Lq` of Q; row `r < MR` of the widened block.
                unsafe {
                    crate::math::map_row(
                        s,
                        c.q.add(q_head + (self.i0 + r) * ql.row),
                        self.q_wide.add(r * dk),
                        dk,
                        Identity,
                    )
                };
            }
            // SAFETY: rows `< rows ≤ MR` of the widened block.
            array::from_fn(|r| unsafe { self.q_wide.add(r.min(self.rows - 1) * dk).cast_const() })
        };
        // Keys row `r` may see: `allowed[r]` is one past the last (padding, causality, Lk).
        let allowed: [usize; MR] = array::from_fn(|r| {
            let limit = if c.causal {
                (self.row(r) + kv_len).saturating_sub(q_len - 1).min(kv_len)
            } else {
                kv_len
            };
            limit.min(self.valid)
        });
        // Tiles the softmax must visit: up to the last key any row sees.
        let live_tiles = allowed.iter().max().map_or(0, |&a| a.div_ceil(nr));
        let score_tiles = if c.scores.is_null() { live_tiles } else { self.tiles };

        // SAFETY: the block's output rows hold `MR·dv_pad` floats of workspace.
        unsafe { std::slice::from_raw_parts_mut(self.o_acc, MR * self.dv_pad).fill(0.0) };
        RowState {
            q_rows,
            allowed,
            live_tiles,
            score_tiles,
            // Tiles every row of the block sees whole (inside `Lk`, before padding and the
            // causal diagonal).
            whole_tiles: allowed.iter().min().map_or(0, |&a| a / nr),
            // Keys past the last one any row sees weigh exactly 0: `p·V` stops there.
            last_key: allowed.iter().max().copied().unwrap_or(0),
            max: [f32::NEG_INFINITY; MR],
            sums: [s.splat(0.0); MR],
        }
    }

    /// The softmax steps of the block over the key tiles `tiles` (whole steps, or the last),
    /// from `state` on.
    ///
    /// # Safety
    /// As [`Block::begin`], which made `state`; the steps before `tiles` have run.
    #[inline(always)]
    unsafe fn keys<S: Simd, E: Element, const MR: usize, const NV: usize>(
        &self,
        s: S,
        c: &AttentionCall<E>,
        state: &mut RowState<S, MR>,
        tiles: Range<usize>,
    ) {
        let dk = c.head_dim;
        let lanes = S::LANES;
        let nr = self.nr;
        let neg_inf = s.splat(f32::NEG_INFINITY);
        let RowState {
            q_rows,
            allowed,
            live_tiles,
            score_tiles,
            whole_tiles,
            last_key,
            mut max,
            mut sums,
        } = *state;
        // Without P, S, a mask or the running mean, scores only need the scale, and whole
        // tiles need no masking either.
        let plain = c.prev.is_null() && c.scores.is_null() && c.mask.is_null() && c.mean_factor.is_none();
        // Without a mask, whole tiles need no per-vector tests: RealFormer's P in, S out.
        let carried = !plain && c.mask.is_null();

        // Keys per softmax step: AVX-512's tile holds `MAX_NR` of them; narrower tiles are
        // grouped up to as many, their scores parked in the probability buffer until the step's
        // max is known. So the rows' rescaling by `exp(m_old − m_new)` and `p·V`'s loads and
        // stores of the output rows come once per `MAX_NR` keys on every ISA.
        let group = (MAX_NR / nr).max(1);
        let ldp = group * nr;

        for t0 in (tiles.start..tiles.end.min(score_tiles)).step_by(group) {
            let t1 = (t0 + group).min(score_tiles);
            let j0 = t0 * nr;
            let max_before = max;
            let mut raised = [false; MR];
            let mut alpha = [s.splat(1.0); MR];
            // Whether some row's max changed: else `p·V` leaves the output rows unscaled.
            let mut rescaled = false;
            for t in t0..t1 {
                let jt = t * nr;
                // SAFETY: tile `t` of the packed keys holds `dk·nr` floats.
                let keys = unsafe { self.kp.add(t * dk * nr) };
                let mut z;
                if plain {
                    // In the last tile of a causal or padded block, only the vectors some row sees.
                    let vectors = (last_key - jt).div_ceil(lanes);
                    // SAFETY: as above.
                    z = unsafe { front_tile::<S, MR, NV>(s, &q_rows, keys, dk, vectors) };
                    let scale = s.splat(c.scale);
                    for zr in z.iter_mut() {
                        for zv in zr.iter_mut() {
                            *zv = s.mul(*zv, scale);
                        }
                    }
                    if t >= whole_tiles {
                        // −∞ past each row's last key (padding, causality, `Lk`).
                        for (r, zr) in z.iter_mut().enumerate() {
                            for (v, zv) in zr.iter_mut().enumerate() {
                                let seen = allowed[r].saturating_sub(jt + v * lanes);
                                if seen < lanes {
                                    *zv = s.select(s.first_lanes(seen), *zv, neg_inf);
                                }
                            }
                        }
                    }
                } else if carried && t < whole_tiles {
                    // SAFETY: as above.
                    z = unsafe { tile::<S, MR, NV>(s, &q_rows, keys, dk) };
                    // SAFETY: forwarded; tile `t` is whole and inside head `(b, h)`.
                    unsafe { self.carried_scores(s, c, &mut z, t) };
                } else {
                    // SAFETY: as above.
                    z = unsafe { tile::<S, MR, NV>(s, &q_rows, keys, dk) };
                    // SAFETY: forwarded; tile `t` lies inside head `(b, h)`.
                    unsafe { self.scores(s, c, &mut z, t, &allowed, live_tiles) };
                    if t >= live_tiles {
                        continue;
                    }
                }
                // Online softmax. A row's max (and with it the rescaling of its sum and output
                // by `exp(m_old − m_new)`) changes only when a lane of the tile exceeds it, which
                // is rare after the first tiles: the vector max of the tile is compared with it
                // first, and the horizontal reduction runs only then.
                for (r, zr) in z.iter().enumerate() {
                    let mut tile_max = zr[0];
                    for &zv in &zr[1..] {
                        tile_max = s.max(tile_max, zv);
                    }
                    if s.any(s.lt(s.splat(max[r]), tile_max)) {
                        max[r] = max[r].max(s.reduce_max(tile_max));
                        raised[r] = true;
                    }
                }
                if group == 1 {
                    // A step of one tile: its probabilities straight from the registers.
                    rescaled = rescale(s, &max_before, &max, &raised, &mut sums, &mut alpha);
                    for (r, zr) in z.iter().enumerate() {
                        let shift = s.splat(shift_of(max[r]));
                        let mut sum = sums[r];
                        for (v, &zv) in zr.iter().enumerate() {
                            let p = probability(s, zv, shift);
                            // SAFETY: the probability buffer holds `MR·ldp` floats.
                            unsafe { s.store(self.p_tile.add(r * ldp + v * lanes), p) };
                            sum = s.add(sum, p);
                        }
                        sums[r] = sum;
                    }
                } else {
                    for (r, zr) in z.iter().enumerate() {
                        for (v, &zv) in zr.iter().enumerate() {
                            // SAFETY: column `jt − j0 + v·lanes < ldp` of row `r < MR`.
                            unsafe { s.store(self.p_tile.add(r * ldp + jt - j0 + v * lanes), zv) };
                        }
                    }
                }
            }
            // The step's tiles that the softmax sees (the others only stored scores).
            let live_end = t1.min(live_tiles);
            if live_end <= t0 {
                continue;
            }
            if group > 1 {
                rescaled = rescale(s, &max_before, &max, &raised, &mut sums, &mut alpha);
                for r in 0..MR {
                    let shift = s.splat(shift_of(max[r]));
                    let mut sum = sums[r];
                    for col in (0..(live_end - t0) * nr).step_by(lanes) {
                        // SAFETY: the scores parked above, row `r`, column `col < ldp`.
                        unsafe {
                            let at = self.p_tile.add(r * ldp + col);
                            let p = probability(s, s.load(at), shift);
                            s.store(at, p);
                            sum = s.add(sum, p);
                        }
                    }
                    sums[r] = sum;
                }
            }
            // SAFETY: the V rows of the step's tiles and the block's buffers are in the
            // workspace; `last_key − j0 ≤ (live_end − t0)·nr` keys were given probabilities.
            unsafe {
                pv_tile::<S, MR, NV>(
                    s,
                    self.p_tile,
                    self.vp.add(j0 * self.dv_pad),
                    self.o_acc,
                    rescaled.then_some(&alpha),
                    ldp,
                    (last_key - j0).min(ldp),
                    self.dv_pad,
                )
            };
        }

        state.max = max;
        state.sums = sums;
    }

    /// Ends the block: normalizes its rows of O and writes them.
    ///
    /// # Safety
    /// As [`Block::keys`], after the steps over every key tile.
    #[inline(always)]
    unsafe fn end<S: Simd, E: Element, const MR: usize, const NV: usize>(
        &self,
        s: S,
        c: &AttentionCall<E>,
        state: &RowState<S, MR>,
    ) {
        let dv = c.value_dim;
        let ol = c.out_layout;
        let out_head = ol.offset + self.b * ol.batch + self.h * ol.head;
        let RowState { max, sums, .. } = *state;
        // Normalize and write the block's rows of O.
        for r in 0..self.rows {
            let i = self.row(r);
            // SAFETY: row `i` of O of head `(b, h)` holds `dv` elements; the output row in the
            // workspace `dv_pad ≥ dv`.
            let out = unsafe { std::slice::from_raw_parts_mut(c.out.add(out_head + i * ol.row), dv) };
            let sum = s.reduce_add(sums[r]);
            if max[r] == f32::NEG_INFINITY && !sum.is_nan() {
                out.fill(E::from_f32(match c.masked_rows {
                    MaskedRows::Zero => 0.0,
                    MaskedRows::Nan => f32::NAN,
                }));
                continue;
            }
            let inv = s.splat(1.0 / sum);
            // Each output element is rounded once to `E` as it is stored.
            // SAFETY: as above.
            unsafe {
                crate::math::map_row(
                    s,
                    self.o_acc.add(r * self.dv_pad),
                    out.as_mut_ptr(),
                    dv,
                    |s: S, o: S::V| s.mul(o, inv),
                )
            };
        }
    }
}

impl Block {
    /// The query row that micro-kernel row `r` computes. Rows past the end of Q repeat the
    /// last row: the micro-kernels always run `MR` rows, and nothing of the extra rows is
    /// written out.
    #[inline(always)]
    fn row(&self, r: usize) -> usize {
        self.i0 + r.min(self.rows - 1)
    }

    /// The score step of a whole tile `t` (every row sees all its keys, inside `Lk`) of a call
    /// without a mask: `z ← scale·z (+ P)`, stored to S when asked, then the running mean (its
    /// factor applied before the store where S carries the softmax's input). The same values
    /// as [`Block::scores`] gives such a tile, without its per-vector tests.
    ///
    /// # Safety
    /// As [`Block::scores`], and the tile is whole.
    #[inline(always)]
    unsafe fn carried_scores<S: Simd, E: Element, const MR: usize, const NV: usize>(
        &self,
        s: S,
        c: &AttentionCall<E>,
        z: &mut [[S::V; NV]; MR],
        t: usize,
    ) {
        let lanes = S::LANES;
        let scale = s.splat(c.scale);
        let head_row = (self.b * c.heads + self.h) * c.q_len;
        let j0 = t * self.nr;
        let at: [usize; MR] = array::from_fn(|r| (head_row + self.row(r)) * c.kv_len + j0);
        // (A function, not a closure: a closure over vectors carries no target features.)
        #[inline(always)]
        fn mean<S: Simd, const MR: usize, const NV: usize>(s: S, z: &mut [[S::V; NV]; MR], factor: Option<f32>) {
            if let Some(f) = factor {
                let f = s.splat(f);
                for zv in z.iter_mut().flatten() {
                    *zv = s.mul(*zv, f);
                }
            }
        }
        // Every row's P is loaded before any row's S is stored: P and S of the same score lie
        // at the same address modulo 4 KiB whenever their buffers do (as two large
        // allocations often are), and so do consecutive rows when `Lk` is a multiple of
        // 1024; a load behind a store to such an address waits for it (4K aliasing).
        // SAFETY (both loops): the tile's `nr` keys of row `row(r)` lie inside `Lk`, so
        // inside row `row(r)` of P and of the scores.
        for (r, zr) in z.iter_mut().enumerate() {
            for (v, zv) in zr.iter_mut().enumerate() {
                *zv = if c.prev.is_null() {
                    s.mul(*zv, scale)
                } else {
                    s.mul_add(*zv, scale, unsafe { s.load(c.prev.add(at[r] + v * lanes)) })
                };
            }
        }
        if c.carry_masked {
            mean(s, z, c.mean_factor);
        }
        if !c.scores.is_null() {
            for (r, zr) in z.iter().enumerate().take(self.rows) {
                for (v, &zv) in zr.iter().enumerate() {
                    unsafe { s.store(c.scores.add(at[r] + v * lanes), zv) };
                }
            }
        }
        if !c.carry_masked {
            mean(s, z, c.mean_factor);
        }
    }

    /// The general score step of tile `t`: `z ← scale·z (+ P)`, stored to S when asked
    /// (before or after the mask, by `carry_masked`), then the running mean, the mask, and
    /// −∞ past each row's `allowed` keys. Tiles at or past `live_tiles` only store S.
    ///
    /// # Safety
    /// As [`Block::run`]; tile `t` lies inside head `(b, h)`.
    #[inline(always)]
    unsafe fn scores<S: Simd, E: Element, const MR: usize, const NV: usize>(
        &self,
        s: S,
        c: &AttentionCall<E>,
        z: &mut [[S::V; NV]; MR],
        t: usize,
        allowed: &[usize; MR],
        live_tiles: usize,
    ) {
        let AttentionCall {
            heads, q_len, kv_len, ..
        } = *c;
        let lanes = S::LANES;
        let neg_inf = s.splat(f32::NEG_INFINITY);
        let j0 = t * self.nr;
        let live = t < live_tiles;
        let head_row = (self.b * heads + self.h) * q_len;
        for (r, zr) in z.iter_mut().enumerate() {
            let i = self.row(r);
            let at = (head_row + i) * kv_len + j0;
            let mask_row = if c.mask.is_null() {
                std::ptr::null()
            } else {
                // SAFETY: the strides were derived from the mask's validated shape.
                unsafe {
                    c.mask
                        .add(self.b * c.mask_batch_stride + self.h * c.mask_head_stride + i * c.mask_row_stride + j0)
                }
            };
            for (v, zv) in zr.iter_mut().enumerate() {
                let jv = v * lanes;
                // Lanes inside `Lk`, and lanes this row may see.
                let in_range = kv_len.saturating_sub(j0 + jv).min(lanes);
                let seen = allowed[r].saturating_sub(j0 + jv).min(lanes);
                if in_range == 0 {
                    // Past `Lk`: no score, no pointer (it could point past the buffers).
                    *zv = neg_inf;
                    continue;
                }
                // SAFETY: every access below covers `in_range` lanes from `at + jv`,
                // inside row `i` of the scores, `P` or the mask.
                unsafe {
                    let load = |p: *const f32| {
                        if in_range == lanes {
                            s.load(p)
                        } else {
                            s.load_partial(p, in_range, 0.0)
                        }
                    };
                    let store = |p: *mut f32, x: S::V| {
                        if r < self.rows {
                            if in_range == lanes {
                                s.store(p, x)
                            } else {
                                s.store_partial(p, in_range, x)
                            }
                        }
                    };
                    let mut sv = if c.prev.is_null() {
                        s.mul(*zv, s.splat(c.scale))
                    } else {
                        s.mul_add(*zv, s.splat(c.scale), load(c.prev.add(at + jv)))
                    };
                    if !c.scores.is_null() && !c.carry_masked {
                        store(c.scores.add(at + jv), sv);
                    }
                    if !live && (c.scores.is_null() || !c.carry_masked) {
                        continue;
                    }
                    if let Some(f) = c.mean_factor {
                        sv = s.mul(sv, s.splat(f));
                    }
                    if !mask_row.is_null() {
                        let m = load(mask_row.add(jv));
                        sv = s.select(s.eq(m, neg_inf), neg_inf, s.add(sv, m));
                    }
                    if seen < lanes {
                        sv = s.select(s.first_lanes(seen), sv, neg_inf);
                    }
                    if !c.scores.is_null() && c.carry_masked {
                        store(c.scores.add(at + jv), sv);
                    }
                    *zv = sv;
                }
            }
        }
    }
}

/// A row's shift for `exp(z − m)`: its max, or 0 while it has seen only −∞ (so that
/// `−∞ − m` is not NaN).
#[inline(always)]
fn shift_of(max: f32) -> f32 {
    if max == f32::NEG_INFINITY {
        0.0
    } else {
        max
    }
}

/// `exp(z − shift)`. `z − m ≤ 0` except in a row with a NaN score, where a NaN lane may have
/// hidden a larger one from the vector max (NEON's max propagates NaN): the `min` keeps `exp`
/// in its domain there (the row's output is NaN anyway).
#[inline(always)]
fn probability<S: Simd>(s: S, z: S::V, shift: S::V) -> S::V {
    exp_nonpositive(s, s.min(s.sub(z, shift), s.splat(0.0)))
}

/// After a softmax step raised the max of the rows in `raised` from `before` to `max`: each
/// such row's `alpha = exp(m_old − m_new)`, and its sum rescaled by it. Returns whether any
/// row was.
#[inline(always)]
fn rescale<S: Simd, const MR: usize>(
    s: S,
    before: &[f32; MR],
    max: &[f32; MR],
    raised: &[bool; MR],
    sums: &mut [S::V; MR],
    alpha: &mut [S::V; MR],
) -> bool {
    let mut any = false;
    for r in 0..MR {
        if raised[r] {
            alpha[r] = exp_nonpositive(s, s.splat(before[r] - shift_of(max[r])));
            sums[r] = s.mul(sums[r], alpha[r]);
            any = true;
        }
    }
    any
}

/// The tile of a packed key panel with only its first `vectors` column vectors computed
/// (the others 0): the last tile a causal or padded block sees often needs one or two of
/// them.
///
/// # Safety
/// As [`tile`].
#[inline(always)]
unsafe fn front_tile<S: Simd, const MR: usize, const NV: usize>(
    s: S,
    q: &[*const f32; MR],
    keys: *const f32,
    dk: usize,
    vectors: usize,
) -> [[S::V; NV]; MR] {
    /// The first `W < NV` vectors, or the whole tile when `W ≥ NV`.
    #[inline(always)]
    unsafe fn front<S: Simd, const MR: usize, const NV: usize, const W: usize>(
        s: S,
        q: &[*const f32; MR],
        keys: *const f32,
        dk: usize,
    ) -> [[S::V; NV]; MR] {
        if W >= NV {
            // SAFETY: forwarded.
            return unsafe { tile::<S, MR, NV>(s, q, keys, dk) };
        }
        // SAFETY: forwarded; `W·LANES < NV·LANES`, the panel's row stride.
        let part = unsafe { tile_cols::<S, MR, W>(s, q, keys, dk, NV * S::LANES) };
        let mut z = [[s.splat(0.0); NV]; MR];
        for (zr, pr) in z.iter_mut().zip(&part) {
            zr[..W].copy_from_slice(pr);
        }
        z
    }
    // SAFETY (all arms): forwarded.
    unsafe {
        match vectors {
            1 => front::<S, MR, NV, 1>(s, q, keys, dk),
            2 => front::<S, MR, NV, 2>(s, q, keys, dk),
            3 => front::<S, MR, NV, 3>(s, q, keys, dk),
            _ => tile::<S, MR, NV>(s, q, keys, dk),
        }
    }
}

/// `o[r] = alpha[r]·o[r] + Σ_{j < keys} p[r][j]·V[j]` for the `MR` rows of the block (`alpha`
/// absent: 1), one chunk of `NV` vectors of value columns at a time, and the last `< NV`
/// vectors of a row in a chunk of their own width.
///
/// # Safety
/// `p` holds `MR` rows of `ldp` floats, `vp` holds `keys` rows of `dv_pad`, `o` holds `MR`
/// rows of `dv_pad`; `keys ≤ ldp`, and `dv_pad` is a multiple of `LANES`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn pv_tile<S: Simd, const MR: usize, const NV: usize>(
    s: S,
    p: *const f32,
    vp: *const f32,
    o: *mut f32,
    alpha: Option<&[S::V; MR]>,
    ldp: usize,
    keys: usize,
    dv_pad: usize,
) {
    // The tail below has arms for up to 3 vectors.
    const { assert!(NV <= 4) };
    let chunk = NV * S::LANES;
    let mut c0 = 0;
    // SAFETY (all calls): columns `c0..c0 + w·LANES ≤ dv_pad` of the rows named in the
    // contract.
    while c0 + chunk <= dv_pad {
        unsafe { rank_update::<S, MR, NV>(s, p, ldp, keys, vp.add(c0), dv_pad, o.add(c0), dv_pad, alpha) };
        c0 += chunk;
    }
    let (v, o) = unsafe { (vp.add(c0), o.add(c0)) };
    match (dv_pad - c0) / S::LANES {
        0 => {}
        1 => unsafe { rank_update::<S, MR, 1>(s, p, ldp, keys, v, dv_pad, o, dv_pad, alpha) },
        2 => unsafe { rank_update::<S, MR, 2>(s, p, ldp, keys, v, dv_pad, o, dv_pad, alpha) },
        _ => unsafe { rank_update::<S, MR, 3>(s, p, ldp, keys, v, dv_pad, o, dv_pad, alpha) },
    }
}
