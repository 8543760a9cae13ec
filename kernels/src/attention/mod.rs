//! Scaled-dot-product attention with an additive mask and RealFormer residual scores.
//!
//! # Semantics
//!
//! Shapes `Q[B,H,Lq,Dk]`, `K[B,Hkv,Lk,Dk]`, `V[B,Hkv,Lk,Dv]`, `O[B,H,Lq,Dv]`, scores
//! `[B,H,Lq,Lk]`. `H` is a multiple of `Hkv`: query head `h` reads key/value head
//! `h / (H/Hkv)` (multi-query and grouped-query attention). [`Kernels::attention`] takes them
//! row-major; [`Kernels::attention_args`] takes `Q`, `K`, `V` and `O` as views with a
//! [`Layout`] each (`[B, L, H, D]`, the column blocks of a fused QKV projection), so nothing
//! is transposed or copied. The mask is `[Lq,Lk]`, `[B,1,Lq,Lk]`, `[B,H,Lq,Lk]` or a key-padding
//! `[B,Lk]` ([`MaskShape`]).
//!
//! ```text
//! S = scale·Q·Kᵀ + P        scale defaults to 1/√Dk; P = the previous layer's S (optional)
//! L = S/(ℓ+1)               with the running-mean option (layer ℓ), else L = S
//! Z = L + M                 −∞ wherever M = −∞, j ≥ key_lengths[b], or (causal) j > i + Lk − Lq
//! O = softmax_j(Z)·V
//! ```
//!
//! - The scores output, when asked for, receives `S` (pre-mask: the official RealFormer
//!   recurrence, the next layer's `P`), or `Z` with [`CarriedScores::Masked`] (x-transformers,
//!   older bert4keras). It is written for every key, padded or not.
//! - Causal masking is bottom-right aligned: query `i` sees keys `j ≤ i + Lk − Lq`, so the last
//!   query sees every key (the KV-cache convention, PyTorch's `causal_lower_right`). PyTorch's
//!   `is_causal=True` is top-left aligned (`j ≤ i`); the two agree when `Lq = Lk`.
//! - Masked positions contribute nothing, even where `Q·K` is NaN. Keys past
//!   `key_lengths[b]` are padding: their V rows are never read. Keys masked by `M` or by
//!   causality get weight 0, and their V rows may be multiplied by it: where such a row holds
//!   ±∞ or NaN, the output columns it meets may be NaN (`0·∞`). Keep masked V rows finite, or
//!   mask them with `key_lengths`.
//! - A fully masked row gives `O = 0` ([`MaskedRows::Zero`](crate::MaskedRows::Zero), the
//!   default) or NaN. A finite floor (say −10000) is not a mask: a row all under it averages V.
//! - A NaN or +∞ among a row's unmasked `Z` makes that row of `O` NaN. ±∞ in V gives ±∞ or
//!   NaN in the output columns it reaches (a weight that underflows to 0 meets it as `0·∞`).
//!
//! # Storage types
//!
//! `Q`, `K`, `V`, `O` are any [`Element`]; the mask, `P` and the scores stay f32 (carried across
//! layers, where half roundings would compound). Inputs are widened exactly, the rest is the f32
//! kernel, and each `O` rounds once to `E`: the f32 bound plus one rounding.
//!
//! # Error bound
//!
//! With `u = 2⁻²⁴`, hats for exact values, `A_ij = |scale|·Σ_d |Q_id·K_jd| + |P_ij|` (the
//! magnitude the score is computed from), `σ = 1/(ℓ+1)` (1 without running mean),
//! `λ = max(1, |scale|)` and, per row, `E_i = max over unmasked j of (Dk + 4)·(u·σ·A_ij +
//! λ·2⁻¹⁵⁰) + 2u·|Ẑ_ij|` (the error of the scores):
//!
//! ```text
//! |S_ij − Ŝ_ij| ≤ (Dk + 2)·(u·A_ij + λ·2⁻¹⁵⁰)                 (scores output, CarriedScores::Raw)
//! |Z_ij − Ẑ_ij| ≤ (Dk + 4)·(u·σ·A_ij + λ·2⁻¹⁵⁰) + 2u·|Ẑ_ij|    (CarriedScores::Masked)
//! |O_id − Ô_id| ≤ Σ_j ŵ_ij·|V_jd| · ((1 + expm1(2E_i))·(1 + (|Ẑ_ij − m̂_i| + 3Lk + 16)·u) − 1)
//!                 + Lk·2⁻¹²⁶·max_j |V_jd| + (3Lk + 16)·2⁻¹⁵⁰
//! ```
//!
//! where `ŵ_ij` are the exact softmax weights. The dot product accumulates in f32 (`Dk·u·A`),
//! then is scaled (hence `λ`); the scale, `P`, `ℓ` and `M` round once each; a score error `ε`
//! moves each weight by at most a factor `exp(±2·max|ε|)`; `exp` is within 1 ulp; every key
//! adds one rounding to the `P·V` and row sums, every step of keys one rescaling; weights below
//! 2⁻¹²⁶ may be flushed, and subnormal roundings err by 2⁻¹⁵⁰ (the last two terms). It assumes
//! no overflow: `A_ij < 10³⁷` and `Lk·max_j |V_jd| < 10³⁷` (`Σ p·V` is summed before the
//! division). `reference::check_attention` states the same bound as code.
//!
//! # Algorithm
//!
//! FlashAttention-style, one pass over the keys per block of `MR` query rows. Per `(b, kv
//! head)`, K is packed into key tiles `[d][key]` (through in-register transposes) and V into
//! rows padded to whole vectors (zeros past `key_lengths[b]`). Per block and step of 64 keys,
//! a register-blocked micro-kernel computes the `MR × NR` score tiles (`NR` = 64 on AVX-512,
//! 16 on AVX2 and NEON, 4 in scalar code); scale, `P`, `ℓ`, mask, padding and causality are
//! applied in registers and the scores written from there; the online softmax turns them into
//! `exp(z − m)`, and a second micro-kernel accumulates `p·V` into the block's output rows,
//! rescaled only when some row's max moved. Steps of 64 keys on every ISA make that rescaling
//! and the output rows' loads and stores come once per 64 keys. Nothing of size `Lq × Lk`
//! touches memory unless `P` or the scores are asked for; key tiles no row of a block sees
//! (padding, causality) are skipped, not masked. Heads of 32 run a narrower `p·V`
//! micro-kernel rather than multiply zeros of V padded to the register tile.
//!
//! The walk follows the caches of one core ([`AttentionPlan`]): where one head's packed K and V
//! would not stay in cache, the keys go in blocks that do, each swept by 48 query rows before
//! the next. Over threads ([`Kernels::with_parallelism`]) the units are `(b, kv head)` pairs,
//! or chunks of 48 query rows where those are fewer than the threads. Neither a plan nor a
//! split changes a bit: every row takes the same steps in the same order.

mod flash;
mod options;

use crate::aligned::AlignedBuf;
use crate::dispatch::{with_detected, Kernels};
use crate::element::{Element, PerElement, Typed};
use crate::error::Error;
use crate::parallel::Split;
use flash::{plan, workspace_len, AttentionCall, Q_UNIT};
pub use options::{
    AdditiveMask, AttentionArgs, AttentionOptions, AttentionPlan, AttentionShape, CarriedScores, Layout, MaskShape,
};

/// Reusable scratch memory of [`Kernels::attention`]: packed K and V of one head and the
/// running state of one block of query rows, once per part of a call split over threads. It
/// grows to the largest call it has served and is never shrunk, so a long-lived workspace
/// makes every call allocation-free.
#[derive(Debug, Default, Clone)]
pub struct AttentionWorkspace {
    buf: AlignedBuf<f32>,
}

impl AttentionWorkspace {
    /// An empty workspace; the first call sizes it.
    pub fn new() -> Self {
        Self::default()
    }

    /// A workspace with room for calls of `shape`, reserved (not yet written). A shape that no
    /// call could accept (a zero head size, `kv_heads` not dividing `heads`, an operand of
    /// more elements than `usize` counts), or whose workspace the allocator refuses, leaves it
    /// empty: the call then reports what is wrong, and nothing here can abort.
    pub fn for_shape(shape: &AttentionShape) -> Self {
        let mut ws = Self::new();
        let s = shape;
        let operands = [
            [s.batch, s.heads, s.q_len, s.head_dim],
            [s.batch, s.kv_heads, s.kv_len, s.head_dim],
            [s.batch, s.kv_heads, s.kv_len, s.value_dim],
            [s.batch, s.heads, s.q_len, s.value_dim],
        ];
        let counted = operands.iter().all(|dims| Error::product("shape", dims).is_ok());
        if let (Ok(()), true, Some(len)) = (
            check_shape(s),
            counted,
            workspace_len(s.kv_len, s.head_dim, s.value_dim),
        ) {
            let _ = ws.buf.try_reserve(len);
        }
        ws
    }

    /// Grows the buffer to `len` floats if needed and returns it.
    fn reserve(&mut self, len: usize) -> &mut [f32] {
        self.buf.grow(len)
    }
}

impl Kernels {
    /// How a call of `shape` with `options`, that writes the scores where `scores`, walks its
    /// keys and queries on these kernels' caches: a pure function of the key and value sizes,
    /// whether the call reads or writes `Lq × Lk` values (P, S, a mask other than
    /// [`MaskShape::KeyPadding`]), and the level-1 and level-2 caches
    /// ([`Kernels::with_caches`]), for any shape, valid or not. See [`AttentionPlan`].
    ///
    /// ```
    /// use kernels::{AttentionOptions, AttentionPlan, AttentionShape, Caches, Kernels};
    ///
    /// // Heads of 64 over 2048 keys: 512 B of packed K and V per key, 1 MiB per head.
    /// let shape = AttentionShape::self_attention(1, 8, 2048, 64);
    /// let plain = AttentionOptions::default();
    /// // 64 keys (32 KiB) fill two thirds of a 48 KiB L1.
    /// let xeon = Kernels::best().with_caches(Caches { l1: 48 << 10, l2: 2 << 20, llc: None });
    /// assert_eq!(xeon.attention_plan(&shape, &plain, false), AttentionPlan::KeyBlocks { keys: 64, query_rows: 48 });
    /// // With S written, half of its 2 MiB L2 holds the head.
    /// assert_eq!(xeon.attention_plan(&shape, &plain, true), AttentionPlan::Rows);
    /// // Not two thirds of a 32 KiB L1: blocks of K and V fill half the L2 beside 48 rows of Q
    /// // and O.
    /// let zen3 = Kernels::best().with_caches(Caches { l1: 32 << 10, l2: 512 << 10, llc: None });
    /// assert_eq!(zen3.attention_plan(&shape, &plain, false), AttentionPlan::KeyBlocks { keys: 448, query_rows: 48 });
    /// ```
    pub fn attention_plan(&self, shape: &AttentionShape, options: &AttentionOptions, scores: bool) -> AttentionPlan {
        let whole_mask = options.mask.is_some_and(|m| m.shape != MaskShape::KeyPadding);
        let score_rows = scores || options.prev_scores.is_some() || whole_mask;
        plan(self.caches(), shape.kv_len, shape.head_dim, shape.value_dim, score_rows)
    }

    /// Attention into `out`, with an explicit workspace: `q`, `k`, `v` and `out` contiguous
    /// `[B, H, L, D]` ([`Layout::heads_first`]). See [`attention`](crate::attention()), and
    /// [`Kernels::attention_args`] for other layouts and operands by name.
    #[allow(clippy::too_many_arguments)]
    pub fn attention<E: Element>(
        &self,
        shape: &AttentionShape,
        q: &[E],
        k: &[E],
        v: &[E],
        out: &mut [E],
        scores: Option<&mut [f32]>,
        opts: &AttentionOptions,
        workspace: &mut AttentionWorkspace,
    ) -> Result<(), Error> {
        let s = shape;
        // The contiguous form names the lengths it expects; the views are checked again, as
        // every call of `attention_args` is.
        check_shape(s)?;
        let (b, h, hkv, lq, lk, dk, dv) = (s.batch, s.heads, s.kv_heads, s.q_len, s.kv_len, s.head_dim, s.value_dim);
        Error::check_len("q", "B·H·Lq·Dk", Error::product("q", &[b, h, lq, dk])?, q.len())?;
        Error::check_len("k", "B·Hkv·Lk·Dk", Error::product("k", &[b, hkv, lk, dk])?, k.len())?;
        Error::check_len("v", "B·Hkv·Lk·Dv", Error::product("v", &[b, hkv, lk, dv])?, v.len())?;
        Error::check_len("out", "B·H·Lq·Dv", Error::product("out", &[b, h, lq, dv])?, out.len())?;
        let args = AttentionArgs {
            shape: *shape,
            q,
            q_layout: Layout::heads_first(s.heads, s.q_len, s.head_dim),
            k,
            k_layout: Layout::heads_first(s.kv_heads, s.kv_len, s.head_dim),
            v,
            v_layout: Layout::heads_first(s.kv_heads, s.kv_len, s.value_dim),
            out,
            out_layout: Layout::heads_first(s.heads, s.q_len, s.value_dim),
            scores,
            options: *opts,
        };
        self.attention_args(args, workspace)
    }

    /// Attention on the operands of `args`, each a view with its own [`Layout`]: `Q`, `K`, `V`
    /// read in place from the projections' outputs (`[B, L, H, D]`, or the three column
    /// blocks of a fused QKV projection), `O` written straight into `[B, L, H·D]`. Semantics,
    /// bounds and speed are those of [`Kernels::attention`]; see the
    /// [module docs](mod@crate::attention).
    ///
    /// # Errors
    /// [`Error::Shape`] naming the first operand whose slice does not hold every element its
    /// layout places (`q`, `k`, `v`, `out`), `out_layout` if it places two elements of `O` in
    /// the same place, a `shape` field that is inconsistent, or a mask, score or key-length
    /// argument whose length does not match; [`Error::Param`] for a non-finite scale or a key
    /// length beyond `kv_len`.
    ///
    /// ```
    /// use kernels::{AttentionArgs, AttentionOptions, AttentionShape, AttentionWorkspace, Kernels, Layout};
    ///
    /// // 2 sentences of 4 tokens, 3 heads of 8: one fused QKV projection [B, L, 3·H·D].
    /// let (b, l, h, d) = (2, 4, 3, 8);
    /// let qkv: Vec<f32> = (0..b * l * 3 * h * d).map(|i| (i % 7) as f32 * 0.1).collect();
    /// let mut out = vec![0.0f32; b * l * h * d]; // [B, L, H·D]
    /// let (width, at) = (3 * h * d, |block| Layout::tokens_first(l, 3 * h * d, block * h * d, d));
    /// let args = AttentionArgs {
    ///     shape: AttentionShape::self_attention(b, h, l, d),
    ///     q: &qkv, q_layout: at(0),
    ///     k: &qkv, k_layout: at(1),
    ///     v: &qkv, v_layout: at(2),
    ///     out: &mut out, out_layout: Layout::tokens_first(l, h * d, 0, d),
    ///     scores: None,
    ///     options: AttentionOptions::default(),
    /// };
    /// Kernels::best().attention_args(args, &mut AttentionWorkspace::new())?;
    /// # let _ = width;
    /// # Ok::<(), kernels::Error>(())
    /// ```
    pub fn attention_args<E: Element>(
        &self,
        args: AttentionArgs<E>,
        workspace: &mut AttentionWorkspace,
    ) -> Result<(), Error> {
        let AttentionArgs {
            shape,
            q,
            q_layout,
            k,
            k_layout,
            v,
            v_layout,
            out,
            out_layout,
            scores,
            options: opts,
        } = args;
        let AttentionShape {
            batch: b,
            heads: h,
            kv_heads: hkv,
            q_len: lq,
            kv_len: lk,
            head_dim: dk,
            value_dim: dv,
        } = shape;
        check_shape(&shape)?;
        check_view("q", q.len(), q_layout, [b, h, lq, dk])?;
        check_view("k", k.len(), k_layout, [b, hkv, lk, dk])?;
        check_view("v", v.len(), v_layout, [b, hkv, lk, dv])?;
        check_view("out", out.len(), out_layout, [b, h, lq, dv])?;
        check_distinct("out_layout", out_layout, [b, h, lq, dv])?;
        let n_scores = Error::product("scores", &[b, h, lq, lk])?;
        if let Some(s) = &scores {
            Error::check_len("scores", "B·H·Lq·Lk", n_scores, s.len())?;
        }
        if let Some(p) = opts.prev_scores {
            Error::check_len("prev_scores", "B·H·Lq·Lk", n_scores, p.len())?;
        }
        // (elements between batches, heads, query rows)
        let mask_strides = match opts.mask {
            None => (0, 0, 0),
            Some(AdditiveMask { values, shape }) => {
                let (dims, what, strides): (&[usize], _, _) = match shape {
                    MaskShape::Shared => (&[lq, lk], "Lq·Lk for MaskShape::Shared", (0, 0, lk)),
                    MaskShape::PerBatch => (&[b, lq, lk], "B·Lq·Lk for MaskShape::PerBatch", (lq * lk, 0, lk)),
                    MaskShape::PerHead => (
                        &[b, h, lq, lk],
                        "B·H·Lq·Lk for MaskShape::PerHead",
                        (h * lq * lk, lq * lk, lk),
                    ),
                    MaskShape::KeyPadding => (&[b, lk], "B·Lk for MaskShape::KeyPadding", (lk, 0, 0)),
                };
                let n = Error::product("mask", dims)?;
                Error::check_len("mask", what, n, values.len())?;
                strides
            }
        };
        if let Some(lens) = opts.key_lengths {
            Error::check_len("key_lengths", "B", b, lens.len())?;
            if let Some((i, &len)) = lens.iter().enumerate().find(|(_, &len)| len > lk) {
                return Err(Error::param(
                    "key_lengths",
                    format!("every length ≤ kv_len = {lk}"),
                    format!("{len} at {i}"),
                ));
            }
        }
        let scale = opts.scale.unwrap_or(1.0 / (dk as f32).sqrt());
        if !scale.is_finite() {
            return Err(Error::param("scale", "a finite number", scale));
        }
        let ws_len = workspace_len(lk, dk, dv)
            .ok_or_else(|| Error::shape("shape", "a workspace size that fits in memory", format!("{shape:?}")))?;
        if b * h * lq == 0 {
            return Ok(());
        }
        let plan = self.attention_plan(&shape, &opts, scores.is_some());
        let mut call = AttentionCall {
            batch: b,
            heads: h,
            kv_heads: hkv,
            q_len: lq,
            kv_len: lk,
            head_dim: dk,
            value_dim: dv,
            q: q.as_ptr(),
            q_layout,
            k: k.as_ptr(),
            k_layout,
            v: v.as_ptr(),
            v_layout,
            out: out.as_mut_ptr(),
            out_layout,
            scores: scores.map_or(std::ptr::null_mut(), |s| s.as_mut_ptr()),
            prev: opts.prev_scores.map_or(std::ptr::null(), |p| p.as_ptr()),
            mask: opts.mask.map_or(std::ptr::null(), |m| m.values.as_ptr()),
            mask_batch_stride: mask_strides.0,
            mask_head_stride: mask_strides.1,
            mask_row_stride: mask_strides.2,
            key_lengths: opts.key_lengths.map_or(std::ptr::null(), |l| l.as_ptr()),
            causal: opts.causal,
            scale,
            mean_factor: opts.running_mean_layer.map(|layer| (1.0 / (layer as f64 + 1.0)) as f32),
            carry_masked: opts.carried == CarriedScores::Masked,
            masked_rows: opts.masked_rows,
            workspace: std::ptr::null_mut(),
            slot: ws_len,
            q_chunk: lq,
            plan,
            units: (0, 0),
        };
        // Heads first; where they are fewer than the threads, each head's query rows split too
        // (each part packing the head's K and V for its own rows).
        let threads = self.parallelism().threads();
        let heads = b * hkv;
        if heads < threads {
            let per_head = threads.div_ceil(heads);
            call.q_chunk = lq.div_ceil(per_head).next_multiple_of(Q_UNIT).min(lq);
        }
        call.units = (0, call.all_units());
        let parts = self.parts(call.all_units(), call.grain());
        let total = ws_len
            .checked_mul(parts)
            .ok_or_else(|| Error::shape("shape", "a workspace size that fits in memory", format!("{shape:?}")))?;
        call.workspace = workspace.reserve(total).as_mut_ptr();
        // SAFETY: every view holds what its layout places and the other pointers cover the
        // lengths their shapes give (checked above), `O`'s layout places its elements apart,
        // the workspace holds `workspace_len` floats, and `out`/`scores` are exclusive borrows,
        // distinct from the inputs.
        unsafe { self.run_attention(E::typed(call)) };
        Ok(())
    }

    /// Runs a validated call. Not generic: the kernel is compiled in this crate (see
    /// [`Typed`]).
    ///
    /// # Safety
    /// As [`AttentionCall`].
    unsafe fn run_attention(&self, call: Typed<Attention>) {
        // SAFETY: forwarded.
        unsafe { call.run_split(self) }
    }
}

/// `Ok` if the fields of `shape` are consistent: dimensions of at least 1, `Hkv` dividing `H`.
fn check_shape(shape: &AttentionShape) -> Result<(), Error> {
    if shape.head_dim == 0 {
        return Err(Error::shape("shape.head_dim", "at least 1", 0));
    }
    if shape.value_dim == 0 {
        return Err(Error::shape("shape.value_dim", "at least 1", 0));
    }
    let (h, hkv) = (shape.heads, shape.kv_heads);
    if hkv == 0 || h % hkv != 0 {
        return Err(Error::shape("shape.kv_heads", format!("a divisor of heads = {h}"), hkv));
    }
    Ok(())
}

/// `Ok` if a slice of `len` elements holds every element `(b, h, l, d)` of `dims` that
/// `layout` places, with checked arithmetic; a shape error naming `arg` otherwise. A tensor
/// with no element needs nothing.
fn check_view(arg: &'static str, len: usize, layout: Layout, dims: [usize; 4]) -> Result<(), Error> {
    if dims.contains(&0) {
        return Ok(());
    }
    let strides = [layout.batch, layout.head, layout.row, 1];
    let last = dims.iter().zip(strides).try_fold(layout.offset, |at, (&n, stride)| {
        (n - 1).checked_mul(stride)?.checked_add(at)
    });
    match last {
        Some(last) if last < len => Ok(()),
        _ => Err(Error::shape(
            arg,
            format!("a slice holding every element of {dims:?} (B, H, L, D) at {layout:?}"),
            format!("length {len}"),
        )),
    }
}

/// `Ok` if `layout` places the elements of `dims` each in a place of its own: sorted by
/// stride, each axis steps past everything the smaller ones span. A tensor with no element
/// has nothing to place.
fn check_distinct(arg: &'static str, layout: Layout, dims: [usize; 4]) -> Result<(), Error> {
    if dims.contains(&0) {
        return Ok(());
    }
    // (An array, not a Vec: a call with a long-lived workspace allocates nothing.)
    let strides = [layout.batch, layout.head, layout.row, 1];
    let mut axes: [(usize, usize); 4] = std::array::from_fn(|i| (strides[i], dims[i]));
    axes.sort_unstable();
    let mut span = 0usize;
    // An axis of one element places nothing apart.
    for (stride, n) in axes.into_iter().filter(|&(_, n)| n > 1) {
        if stride <= span {
            return Err(Error::shape(
                arg,
                format!("strides that place every element of {dims:?} apart"),
                format!("{layout:?}"),
            ));
        }
        // `stride·(n − 1)` fits: `check_view` bounded it by the slice's length.
        span += stride * (n - 1);
    }
    Ok(())
}

/// The attention calls of every storage type.
struct Attention;

impl PerElement for Attention {
    type Of<E: Element> = AttentionCall<E>;
}

/// Scaled-dot-product attention with an additive mask and RealFormer residual scores:
/// `S = scale·Q·Kᵀ + P`, `Z = S/(ℓ+1) + M` (−∞ where masked), `O = softmax(Z)·V`, with `S` (or
/// `Z`) written to `scores` when given. Allocates a fresh workspace (after validating the
/// call); keep an [`AttentionWorkspace`] and call [`Kernels::attention`] to avoid that.
///
/// Shapes, options, policies, storage types (`q`, `k`, `v`, `out` in any [`Element`]; the
/// mask and scores in f32) and the error bound are in the [module docs](mod@crate::attention).
///
/// # Errors
/// [`Error::Shape`] naming the first argument whose length does not match `shape` (or a
/// `shape` field that is inconsistent); [`Error::Param`] for a non-finite scale or a key length
/// beyond `kv_len`.
///
/// ```
/// use kernels::{AttentionOptions, AttentionShape};
///
/// // One head, two queries, three keys of dimension 2; the second query sees only 2 keys.
/// let shape = AttentionShape::self_attention(1, 1, 2, 2);
/// let shape = AttentionShape { kv_len: 3, ..shape };
/// let (q, k, v) = (vec![1.0f32; 4], vec![0.5; 6], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
/// let mut out = vec![0.0; 4];
/// let mut scores = vec![0.0; 6]; // S, for the next layer
/// let opts = AttentionOptions::default().causal(true);
/// kernels::attention(&shape, &q, &k, &v, &mut out, Some(&mut scores), &opts)?;
/// // Bottom-right causal: query 0 sees keys 0..2, query 1 all 3, with equal scores.
/// assert!((out[0] - 2.0).abs() < 1e-6 && (out[2] - 3.0).abs() < 1e-6);
/// # Ok::<(), kernels::Error>(())
/// ```
pub fn attention<E: Element>(
    shape: &AttentionShape,
    q: &[E],
    k: &[E],
    v: &[E],
    out: &mut [E],
    scores: Option<&mut [f32]>,
    opts: &AttentionOptions,
) -> Result<(), Error> {
    with_detected(|kern| kern.attention(shape, q, k, v, out, scores, opts, &mut AttentionWorkspace::new()))
}
