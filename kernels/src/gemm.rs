//! A packed, register-blocked matrix product with a fused epilogue, generic over [`Simd`].
//!
//! `C = A·B` for row-major `A[m, k]` (any row stride) and `B[k, n]` packed into panels of
//! `NR = NV·LANES` columns laid out `[panel][k][NR]` (zero past `n`). The micro-kernel holds
//! an `MR × NR` tile of `C` in `MR·NV` vector registers and walks `k`, broadcasting one element
//! of `A` per row and loading `NV` vectors of `B` per step: `MR·NV` FMAs for `NV` loads and
//! `MR` broadcasts. The finished tile goes to an epilogue closure while still in registers,
//! which is where the callers fuse bias, activation, scaling, masking and the stores.
//!
//! Blocking: `MB = 8·MR` rows of `A` (a few hundred KiB at most, kept in L2) are run against
//! every panel of `B` in turn (streamed from L2/L3, one panel at a time reused by the 8
//! micro-blocks), so `B` is read `m/MB` times and `A` once per panel from L2.
//!
//! Attention uses the same micro-kernel ([`tile`]) for `Q·Kᵀ` with the keys packed as `B`.
//!
//! Hot loops here use plain `for` loops over fixed-size arrays, never `array::from_fn` or
//! other closures over vectors: an outlined closure carries no target features and turns
//! every intrinsic into a call (measured: 10× slower on AVX2).

use std::array;

use crate::aligned::AlignedBuf;
use crate::dispatch::{Kernels, Op};
use crate::element::Element;
use crate::simd::{Simd, TileOp};

/// Micro-blocks of `MR` rows per row block (`MB = ROW_BLOCKS·MR`).
pub(crate) const ROW_BLOCKS: usize = 8;

/// Upper bounds of `MR` and `NR = NV·LANES` over the ISAs: workspaces are sized with them, so
/// that one size fits every ISA.
pub(crate) const MAX_MR: usize = 16;
pub(crate) const MAX_NR: usize = 64;

/// Checks, at compile time, that a tile of `MR` rows by `NV` vectors fits the bounds
/// workspaces are sized with. Every [`TileOp`] that sizes buffers by them calls it.
#[inline(always)]
pub(crate) const fn assert_tile_fits<S: Simd, const MR: usize, const NV: usize>() {
    const {
        assert!(MR <= MAX_MR && NV * S::LANES <= MAX_NR && MAX_NR.is_multiple_of(NV * S::LANES));
    }
}

/// Packs `B[k, n]` (row stride `ldb`) into the panels of the ISA's tile.
struct PackPanels<'a> {
    b: &'a [f32],
    ldb: usize,
    k: usize,
    n: usize,
}

impl Op for PackPanels<'_> {
    type Output = AlignedBuf<f32>;

    /// # Safety
    /// None beyond the token's: the slices are checked here.
    #[inline(always)]
    unsafe fn eval<S: Simd>(self, s: S) -> AlignedBuf<f32> {
        // SAFETY: `PackPanels` is itself a `TileOp` with no safety conditions.
        unsafe { s.with_tile(self) }
    }
}

impl TileOp for PackPanels<'_> {
    type Output = AlignedBuf<f32>;

    #[inline(always)]
    unsafe fn eval<S: Simd, const MR: usize, const NV: usize>(self, s: S) -> AlignedBuf<f32> {
        let nr = NV * S::LANES;
        let PackPanels { b, ldb, k, n } = self;
        assert!(
            ldb >= n && (k == 0 || n == 0 || (k - 1) * ldb + n <= b.len()),
            "pack_panels: B too short"
        );
        let mut dst = AlignedBuf::zeroed(packed_len(k, n, nr));
        // SAFETY: `b` covers `k` rows of `ldb ≥ n` floats (asserted); `dst` holds
        // `packed_len(k, n, nr)` floats; `nr` is a multiple of `LANES`.
        unsafe { pack_b(s, b.as_ptr(), ldb, k, n, nr, dst.as_mut_slice().as_mut_ptr()) };
        dst
    }
}

impl Kernels {
    /// `B[k, n]` (row stride `ldb`) packed into the panels of this ISA's GEMM tile.
    ///
    /// # Panics
    /// If `b` does not hold `k` rows of `ldb ≥ n` floats: callers pass checked weights.
    pub(crate) fn pack_panels(&self, b: &[f32], ldb: usize, k: usize, n: usize) -> AlignedBuf<f32> {
        // SAFETY: the op checks its slices.
        unsafe { self.run(PackPanels { b, ldb, k, n }) }
    }
}

/// Floats of a packed `B[k, n]` for panels of `nr` columns.
pub(crate) fn packed_len(k: usize, n: usize, nr: usize) -> usize {
    n.div_ceil(nr) * nr * k
}

/// Packs row-major `b[k, n]` (row stride `ldb`) into panels `[panel][k][nr]`, zero past `n`.
/// Whole panels are copied a vector at a time (a `memcpy` call per row of 64 floats made
/// packing the GAU's weights take twice as long).
///
/// # Safety
/// `b` covers `k` rows of `ldb ≥ n` floats (the last row `n`); `dst` holds
/// `packed_len(k, n, nr)` floats; `nr` is a multiple of `LANES`.
#[inline(always)]
pub(crate) unsafe fn pack_b<S: Simd>(s: S, b: *const f32, ldb: usize, k: usize, n: usize, nr: usize, dst: *mut f32) {
    for p in 0..n.div_ceil(nr) {
        let c0 = p * nr;
        let width = nr.min(n - c0);
        for kk in 0..k {
            // SAFETY: row `kk` of `b` has `n ≥ c0 + width` columns; panel `p` row `kk` is in
            // `dst`.
            unsafe {
                let (from, to) = (b.add(kk * ldb + c0), dst.add((p * k + kk) * nr));
                if width == nr {
                    for v in (0..nr).step_by(S::LANES) {
                        s.store(to.add(v), s.load(from.add(v)));
                    }
                } else {
                    let out = std::slice::from_raw_parts_mut(to, nr);
                    out[..width].copy_from_slice(std::slice::from_raw_parts(from, width));
                    out[width..].fill(0.0);
                }
            }
        }
    }
}

/// Packs the rows `0..count` of `bt[n, k]` (rows `ld ≥ k` elements apart; the transpose of
/// `B[k, n]`, e.g. keys for `Q·Kᵀ`) into panels `[panel][k][nr]`, zero past `count`, for `panels` panels. The
/// source may be stored as any [`Element`]: each value is widened exactly as it is packed
/// (half-typed rows with the ISA's conversions, a chunk at a time through a stack buffer).
/// f32 rows go `LANES` keys by `LANES` columns at a time through [`Simd::transpose`].
///
/// # Safety
/// `bt` holds `count` rows of `k` elements, `ld ≥ k` apart; `dst` holds `panels·nr·k` floats;
/// `nr` is a multiple of `LANES`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn pack_bt<S: Simd, E: Element>(
    s: S,
    bt: *const E,
    ld: usize,
    dst: *mut f32,
    count: usize,
    panels: usize,
    nr: usize,
    k: usize,
) {
    let lanes = S::LANES;
    for p in 0..panels {
        let panel = dst.wrapping_add(p * k * nr);
        for g in (0..nr).step_by(lanes) {
            let j = p * nr + g;
            if E::IS_F32 && j + lanes <= count {
                let rows = bt.wrapping_add(j * ld).cast::<f32>();
                let mut kk = 0;
                while kk + lanes <= k {
                    // SAFETY: keys `j..j + LANES ≤ count`, columns `kk..kk + LANES ≤ k`; the
                    // block lands in rows `kk..` and columns `g..g + LANES ≤ nr` of panel `p`.
                    unsafe { s.transpose(rows.add(kk), ld, panel.add(kk * nr + g), nr) };
                    kk += lanes;
                }
                for jj in g..g + lanes {
                    // SAFETY: as above, for the columns `kk..k` left.
                    unsafe { pack_key(s, rows.add((jj - g) * ld).cast::<E>(), panel.add(jj), kk, k, nr) };
                }
            } else {
                for jj in g..g + lanes {
                    if p * nr + jj < count {
                        // SAFETY: row `p·nr + jj < count` is read; column `jj` of the panel
                        // is written.
                        unsafe { pack_key(s, bt.add((p * nr + jj) * ld), panel.add(jj), 0, k, nr) };
                    } else {
                        for kk in 0..k {
                            // SAFETY: inside panel `p`.
                            unsafe { *panel.add(kk * nr + jj) = 0.0 };
                        }
                    }
                }
            }
        }
    }
}

/// Writes elements `from..k` of one key row (widened to f32) down a panel column:
/// `column[kk·nr] = row[kk]`.
///
/// # Safety
/// `row` holds `k` elements; `column` covers `k` rows of the panel at stride `nr`.
#[inline(always)]
unsafe fn pack_key<S: Simd, E: Element>(s: S, row: *const E, column: *mut f32, from: usize, k: usize, nr: usize) {
    const CHUNK: usize = 64;
    if E::IS_F32 {
        let row = row.cast::<f32>();
        for kk in from..k {
            // SAFETY: `kk < k`. A volatile read keeps this loop scalar: vectorized, its strided
            // stores become scatters, slower than scalar code on Zen 5.
            unsafe { *column.add(kk * nr) = row.add(kk).read_volatile() };
        }
    } else {
        let mut wide = [0.0f32; CHUNK];
        for k0 in (from..k).step_by(CHUNK) {
            let len = CHUNK.min(k - k0);
            // SAFETY: elements `k0..k0 + len ≤ k` of the row; the buffer holds `CHUNK`.
            unsafe { crate::math::map_row(s, row.add(k0), wide.as_mut_ptr(), len, crate::math::Identity) };
            for (kk, &w) in wide[..len].iter().enumerate() {
                // SAFETY: row `k0 + kk < k` of the column.
                unsafe { *column.add((k0 + kk) * nr) = w };
            }
        }
    }
}

/// The `MR × NV·LANES` tile `Σ_kk a[r][kk]·b[kk][·]` of one packed panel.
///
/// # Safety
/// Each `a[r]` holds `k` floats; `bp` holds `k·NV·LANES` floats laid out `[kk][col]`.
#[inline(always)]
pub(crate) unsafe fn tile<S: Simd, const MR: usize, const NV: usize>(
    s: S,
    a: &[*const f32; MR],
    bp: *const f32,
    k: usize,
) -> [[S::V; NV]; MR] {
    // SAFETY: forwarded; the panel's rows are `NV·LANES` apart.
    unsafe { tile_cols::<S, MR, NV>(s, a, bp, k, NV * S::LANES) }
}

/// The first `W·LANES` columns of a packed panel's tile, rows `ldb` floats apart: [`tile`]
/// when `ldb = W·LANES`, or the left part of a wider panel's tile.
///
/// # Safety
/// Each `a[r]` holds `k` floats; `bp` holds `k` rows of `ldb ≥ W·LANES` floats.
#[inline(always)]
pub(crate) unsafe fn tile_cols<S: Simd, const MR: usize, const W: usize>(
    s: S,
    a: &[*const f32; MR],
    bp: *const f32,
    k: usize,
    ldb: usize,
) -> [[S::V; W]; MR] {
    let mut acc = [[s.splat(0.0); W]; MR];
    for kk in 0..k {
        // SAFETY: `kk < k` and `v·LANES < W·LANES ≤ ldb`: inside the panel and the rows of `a`.
        unsafe {
            let mut b = [s.splat(0.0); W];
            for (v, x) in b.iter_mut().enumerate() {
                *x = s.load(bp.add(kk * ldb + v * S::LANES));
            }
            for r in 0..MR {
                let av = s.splat(*a[r].add(kk));
                for v in 0..W {
                    acc[r][v] = s.mul_add(av, b[v], acc[r][v]);
                }
            }
        }
    }
    acc
}

/// Loads `count ≤ LANES` floats, zero past them.
///
/// # Safety
/// `p..p + count` is readable.
#[inline(always)]
pub(crate) unsafe fn load_n<S: Simd>(s: S, p: *const f32, count: usize) -> S::V {
    // SAFETY: forwarded; the partial load stops at `count`.
    unsafe {
        if count == S::LANES {
            s.load(p)
        } else {
            s.load_partial(p, count, 0.0)
        }
    }
}

/// Stores the first `count ≤ LANES` lanes, each rounded once to `E` (a plain store for f32).
///
/// # Safety
/// `p..p + count` is writable.
#[inline(always)]
pub(crate) unsafe fn store_n<S: Simd, E: Element>(s: S, p: *mut E, count: usize, v: S::V) {
    // SAFETY: forwarded; the partial store stops at `count`.
    unsafe {
        if count == S::LANES {
            E::store(s, p, v)
        } else {
            E::store_partial(s, p, count, v)
        }
    }
}

/// `o[r][0..NV·LANES] = alpha[r]·o[r][..] + Σ_{j < keys} p[r·ldp + j]·v[j·ldv + ..]` for the
/// `MR` rows: one column chunk of a rank-`keys` update (the `p·V` of attention), with the
/// `MR × NV` chunk of `o` in registers. `alpha` absent is 1: `o` is loaded as it is.
///
/// # Safety
/// `p` covers `MR` rows of `ldp ≥ keys`; `v` covers `keys` rows of `NV·LANES` floats at
/// stride `ldv`; `o` covers `MR` rows of `NV·LANES` floats at stride `ldo`.
// Index loops over the register tile: `acc[r][c]`, `alpha[r]`, `vv[c]` all at once.
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
#[inline(always)]
pub(crate) unsafe fn rank_update<S: Simd, const MR: usize, const NV: usize>(
    s: S,
    p: *const f32,
    ldp: usize,
    keys: usize,
    v: *const f32,
    ldv: usize,
    o: *mut f32,
    ldo: usize,
    alpha: Option<&[S::V; MR]>,
) {
    // SAFETY: every access is inside the regions of the contract.
    unsafe {
        let mut acc = [[s.splat(0.0); NV]; MR];
        for r in 0..MR {
            for c in 0..NV {
                acc[r][c] = s.load(o.add(r * ldo + c * S::LANES));
            }
        }
        if let Some(alpha) = alpha {
            for r in 0..MR {
                for c in 0..NV {
                    acc[r][c] = s.mul(acc[r][c], alpha[r]);
                }
            }
        }
        for j in 0..keys {
            let mut vv = [s.splat(0.0); NV];
            for (c, x) in vv.iter_mut().enumerate() {
                *x = s.load(v.add(j * ldv + c * S::LANES));
            }
            for r in 0..MR {
                let pr = s.splat(*p.add(r * ldp + j));
                for c in 0..NV {
                    acc[r][c] = s.mul_add(pr, vv[c], acc[r][c]);
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            for (c, &x) in row.iter().enumerate() {
                s.store(o.add(r * ldo + c * S::LANES), x);
            }
        }
    }
}

/// Where a finished tile of `C` sits: rows `row0..row0 + rows`, columns `col0..col0 + cols`
/// (`rows ≤ MR`, `cols ≤ NR`; the tile's other rows and columns are padding to ignore).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TileAt {
    pub row0: usize,
    pub rows: usize,
    pub col0: usize,
    pub cols: usize,
}

/// What happens to a finished tile of `C`: bias, activation, stores. A trait with an
/// `#[inline(always)]` method rather than a closure, so that a heavy epilogue (a whole swish)
/// is inlined into the ISA's code (see [`crate::math::Map`]).
pub(crate) trait Epilogue<S: Simd, const MR: usize, const NV: usize> {
    /// # Safety
    /// As the implementor states; `at` is inside the `C` the product was called for.
    unsafe fn tile(&mut self, s: S, at: TileAt, acc: &[[S::V; NV]; MR]);
}

/// `C = A·B`, handing every `MR × NR` tile to `epilogue` (which stores it).
///
/// # Safety
/// `a` covers `m` rows of `lda ≥ k` floats (the last row `k`); `bp` is `B[k, n]` packed by
/// [`pack_b`] with `nr = NV·LANES`; `m ≥ 1`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn gemm<S: Simd, const MR: usize, const NV: usize>(
    s: S,
    a: *const f32,
    lda: usize,
    m: usize,
    k: usize,
    bp: *const f32,
    n: usize,
    epilogue: &mut impl Epilogue<S, MR, NV>,
) {
    let nr = NV * S::LANES;
    let mb = ROW_BLOCKS * MR;
    let mut r0 = 0;
    while r0 < m {
        let block_end = (r0 + mb).min(m);
        for p in 0..n.div_ceil(nr) {
            let col0 = p * nr;
            let mut i0 = r0;
            while i0 < block_end {
                let rows = MR.min(block_end - i0);
                // Rows past the block repeat its last row: computed, never stored.
                // SAFETY: `i0 + min(r, rows − 1) < m`; panel `p` holds `k·nr` floats.
                let acc = unsafe {
                    let rows_a: [*const f32; MR] = array::from_fn(|r| a.add((i0 + r.min(rows - 1)) * lda));
                    tile::<S, MR, NV>(s, &rows_a, bp.add(p * k * nr), k)
                };
                // SAFETY: the tile lies inside `C[m, n]`.
                unsafe {
                    epilogue.tile(
                        s,
                        TileAt {
                            row0: i0,
                            rows,
                            col0,
                            cols: nr.min(n - col0),
                        },
                        &acc,
                    )
                };
                i0 += MR;
            }
        }
        r0 = block_end;
    }
}
