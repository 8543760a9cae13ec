//! Scaled-dot-product attention with an additive mask and RealFormer residual scores.
//!
//! # Semantics
//!
//! Shapes `Q[B,H,Lq,Dk]`, `K[B,Hkv,Lk,Dk]`, `V[B,Hkv,Lk,Dv]`, `O[B,H,Lq,Dv]`, scores
//! `[B,H,Lq,Lk]`, all row-major. `H` is a multiple of `Hkv`: query head `h` reads key/value
//! head `h / (H/Hkv)` (multi-query and grouped-query attention).
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
//! - A fully masked row gives `O = 0` ([`MaskedRows::Zero`], the default) or NaN. A mask floor
//!   that is finite (say −10000) is not a mask: a row masked by it everywhere averages V.
//! - A NaN or +∞ among a row's unmasked `Z` makes that row of `O` NaN. ±∞ in V gives ±∞ or
//!   NaN in the output columns it reaches (a weight that underflows to 0 meets it as `0·∞`).
//!
//! # Storage types
//!
//! `Q`, `K`, `V` and `O` are stored as any [`Element`] `E` (`f32`, `f16`, `bf16`); the mask,
//! the previous scores `P` and the scores output stay f32, whatever `E`: they are carried
//! across layers, where rounding them to half would compound. K and V are widened exactly as
//! they are packed, Q one block of rows at a time; everything is computed in f32 exactly as
//! the f32 kernel does, and each element of `O` is rounded once to `E` as it is stored. So a
//! half output's bound is the f32 bound below plus one rounding to `E`, and the scores output
//! is the f32 kernel's on the widened inputs.
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
//! where `ŵ_ij` are the exact softmax weights. The dot product over `Dk` accumulates in f32
//! (`Dk·u·A`); the scale, `P`, `ℓ` and `M` each round once; a perturbation `ε` of the scores
//! moves each weight by at most a factor `exp(±2·max|ε|)`; `exp` is within 1 ulp; every key
//! adds one rounding to the `P·V` sums and the row sums, and every step of keys one rescaling;
//! weights below 2⁻¹²⁶ may be flushed, and a rounding in the subnormal range errs by up to
//! 2⁻¹⁵⁰ absolute (the last two terms) — multiplied by `|scale|` for the roundings of the dot
//! product, which is accumulated before it is scaled (hence `λ`).
//! The bound assumes nothing overflows f32 on the way: scores with `A_ij < 10³⁷`, and
//! `Lk·max_j |V_jd| < 10³⁷` (the online softmax accumulates `Σ p·V` before dividing by the
//! sum, so a value column near `f32::MAX` may overflow to ±∞ although the average would not).
//! `reference::check_attention` states the same bound as code.
//!
//! # Algorithm
//!
//! FlashAttention-style, one pass over the keys per block of query rows:
//!
//! 1. per `(b, kv head)`, K is packed into key tiles laid out `[d][key]` (f32 keys through
//!    in-register `LANES × LANES` transposes) and V into rows padded to whole vectors (zeros
//!    past `key_lengths[b]`), in the workspace;
//! 2. per query head in the group and block of `MR` query rows, for each step of 64 keys:
//!    a register-blocked micro-kernel computes each `MR × NR` score tile of `Q·Kᵀ`
//!    (`MR × NR/LANES` accumulators, one broadcast of `Q` per FMA row; `NR` is 64 on
//!    AVX-512, 16 on AVX2 and NEON, 4 in scalar code, so a step is one tile or several);
//!    scale, `P`, `ℓ`, the mask, padding and causality are applied to the tile in registers,
//!    the scores written from it when asked, and each row's max updated; the online softmax
//!    turns the step's scores into `exp(z − m)` and adds them to each row's sum; a second
//!    micro-kernel accumulates `p·V` into the block's output rows, rescaled by
//!    `exp(m_old − m_new)` on the way;
//! 3. the block's output rows are divided by their sums.
//!
//! Nothing of size `Lq × Lk` touches memory unless `P` or the scores are asked for. Key tiles
//! past the last key any row of the block may see (padding, causality) are skipped, not
//! masked, unless the scores output needs them; in the last tile a block sees, `Q·Kᵀ` computes
//! only the vectors of keys some row sees and `p·V` stops at the last such key.
//!
//! What keeps the FMA units busy (measured on AMD Zen 5, AVX-512, `Dk = Dv = 64`, about
//! three quarters of the FMA peak): the two micro-kernels do `MR·NR/LANES` FMAs per
//! `NR/LANES` loads and `MR` broadcasts; the per-tile softmax work is one `exp` per score,
//! while a row's max, and with it the horizontal reduction, the `exp(m_old − m_new)` and the
//! rescaling of its sum, changes only when a lane of the tile exceeds it (a vector compare
//! first), which is rare after a row's first tiles; when no row of the block changed its max in
//! a tile, `p·V` loads the output rows without multiplying them by 1 (measured on AMD Zen 3,
//! AVX2, `L = 512`, best of 6 runs: 1.2% dense, 2.4% causal). The narrower tiles of AVX2,
//! NEON and scalar code are grouped into steps of 64 keys, their scores parked in L1 until the
//! step's max is known, so that the rescaling and `p·V`'s loads and stores of the output rows
//! come once per 64 keys there too (Zen 3, AVX2, `L = 512`, best of 3 runs against tiles of 16
//! keys: dense 4%, causal 3%, with `P` in and `S` out 25% faster). Without `P`, `S`, a mask or
//! the running mean, tiles every row sees whole only take the scale. Packing K one float at a time cost
//! 5–7% at `L = 512` (LLVM turned it into scatters); the transposes made it negligible.
//!
//! Where it stands (AMD Zen 4, one core, `B = 1`, `H = 8`, `Dk = Dv = 64`, three report runs):
//! 0.75–0.83 of the same-run FMA peak on AVX-512, 0.67–0.73 on AVX2. The unfused composition
//! of the gemm crate's GEMMs around this crate's softmax reaches 0.76–0.80 of the peak itself
//! (its scores matrix, 1 MiB a head at `L = 512`, stays in L2), and the fused kernel runs at
//! 0.91–1.04× its speed; against the same GEMMs around a plain scalar softmax, 1.9–2.3×.
//! Causal calls take 0.55–0.57 of the dense time at `L = 512` and 0.51–0.52 at `L = 2048`
//! (0.54 and 0.51 best of 7 alone), closer to the share of 64-key steps a block runs (0.57
//! and 0.52: 4.6 of 8 on average at `L = 512`) than to the share of visible keys (0.50);
//! skipping the softmax of the diagonal tile's masked vectors measured even.

mod flash;

use crate::dispatch::{with_detected, Kernels};
use crate::element::{Element, PerElement, Typed};
use crate::error::Error;
use crate::softmax::MaskedRows;
use flash::{workspace_len, AttentionCall};

/// Shapes of an attention call (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionShape {
    /// `B`.
    pub batch: usize,
    /// `H`, the query heads.
    pub heads: usize,
    /// `Hkv`, the key/value heads; `H` must be a multiple of it.
    pub kv_heads: usize,
    /// `Lq`, the queries per head.
    pub q_len: usize,
    /// `Lk`, the keys per head.
    pub kv_len: usize,
    /// `Dk`, the dimension of queries and keys (≥ 1).
    pub head_dim: usize,
    /// `Dv`, the dimension of values and outputs (≥ 1).
    pub value_dim: usize,
}

impl AttentionShape {
    /// `B` sequences, `H` heads of their own K and V, `L` queries and keys of dimension `D`.
    pub fn self_attention(batch: usize, heads: usize, len: usize, dim: usize) -> Self {
        AttentionShape {
            batch,
            heads,
            kv_heads: heads,
            q_len: len,
            kv_len: len,
            head_dim: dim,
            value_dim: dim,
        }
    }
}

/// Which scores an additive mask covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaskShape {
    /// `[Lq, Lk]`, broadcast over B and H.
    Shared,
    /// `[B, 1, Lq, Lk]`, broadcast over H.
    PerBatch,
    /// `[B, H, Lq, Lk]`.
    PerHead,
}

/// An additive f32 mask: −∞ masks a position, finite values bias it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdditiveMask<'a> {
    /// The values, row-major in the layout `shape` names.
    pub values: &'a [f32],
    /// Which of the broadcastable layouts `values` has.
    pub shape: MaskShape,
}

/// Which scores the scores output carries to the next layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CarriedScores {
    /// `S = scale·Q·Kᵀ + P`, before the running mean and the mask (the RealFormer paper).
    #[default]
    Raw,
    /// `Z`, after the running mean and the mask (−∞ where masked).
    Masked,
}

/// Options of [`attention`](crate::attention()); `Default` gives plain scaled-dot-product
/// attention.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct AttentionOptions<'a> {
    /// Multiplies `Q·Kᵀ`; `None` means `1/√Dk`. Must be finite.
    pub scale: Option<f32>,
    /// An additive mask.
    pub mask: Option<AdditiveMask<'a>>,
    /// Valid keys per batch (`B` entries, each ≤ `Lk`): keys past them are padding.
    pub key_lengths: Option<&'a [usize]>,
    /// Bottom-right aligned causal masking: query `i` sees keys `j ≤ i + Lk − Lq`.
    pub causal: bool,
    /// The previous layer's scores `P[B,H,Lq,Lk]`, added before the softmax.
    pub prev_scores: Option<&'a [f32]>,
    /// RealFormer's running-mean variant: the softmax sees `S/(ℓ+1)` for layer `ℓ`.
    pub running_mean_layer: Option<u32>,
    /// What the scores output receives.
    pub carried: CarriedScores,
    /// The policy for fully masked rows.
    pub masked_rows: MaskedRows,
}

/// Reusable scratch memory of [`Kernels::attention`]: packed K and V of one head and the
/// running state of one block of query rows. It grows to the largest call it has served and
/// is never shrunk, so a long-lived workspace makes every call allocation-free.
#[derive(Debug, Default, Clone)]
pub struct AttentionWorkspace {
    buf: Vec<f32>,
}

impl AttentionWorkspace {
    /// An empty workspace; the first call sizes it.
    pub fn new() -> Self {
        Self::default()
    }

    /// A workspace already large enough for calls of `shape`.
    pub fn for_shape(shape: &AttentionShape) -> Self {
        let mut ws = Self::new();
        if let Some(len) = workspace_len(shape.kv_len, shape.head_dim, shape.value_dim) {
            ws.buf.resize(len, 0.0);
        }
        ws
    }

    /// Grows the buffer to `len` floats if needed and returns it.
    fn reserve(&mut self, len: usize) -> &mut [f32] {
        if self.buf.len() < len {
            self.buf.resize(len, 0.0);
        }
        &mut self.buf[..len]
    }
}

impl Kernels {
    /// Attention into `out`, with an explicit workspace. See [`attention`](crate::attention()).
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
        let AttentionShape {
            batch: b,
            heads: h,
            kv_heads: hkv,
            q_len: lq,
            kv_len: lk,
            head_dim: dk,
            value_dim: dv,
        } = *shape;
        if dk == 0 {
            return Err(Error::shape("shape.head_dim", "at least 1", 0));
        }
        if dv == 0 {
            return Err(Error::shape("shape.value_dim", "at least 1", 0));
        }
        if hkv == 0 || h % hkv != 0 {
            return Err(Error::shape("shape.kv_heads", format!("a divisor of heads = {h}"), hkv));
        }
        Error::check_len("q", "B·H·Lq·Dk", Error::product("q", &[b, h, lq, dk])?, q.len())?;
        Error::check_len("k", "B·Hkv·Lk·Dk", Error::product("k", &[b, hkv, lk, dk])?, k.len())?;
        Error::check_len("v", "B·Hkv·Lk·Dv", Error::product("v", &[b, hkv, lk, dv])?, v.len())?;
        Error::check_len("out", "B·H·Lq·Dv", Error::product("out", &[b, h, lq, dv])?, out.len())?;
        let n_scores = Error::product("scores", &[b, h, lq, lk])?;
        if let Some(s) = &scores {
            Error::check_len("scores", "B·H·Lq·Lk", n_scores, s.len())?;
        }
        if let Some(p) = opts.prev_scores {
            Error::check_len("prev_scores", "B·H·Lq·Lk", n_scores, p.len())?;
        }
        let (mask_batch_stride, mask_head_stride) = match opts.mask {
            None => (0, 0),
            Some(AdditiveMask {
                values,
                shape: MaskShape::Shared,
            }) => {
                let n = Error::product("mask", &[lq, lk])?;
                Error::check_len("mask", "Lq·Lk for MaskShape::Shared", n, values.len())?;
                (0, 0)
            }
            Some(AdditiveMask {
                values,
                shape: MaskShape::PerBatch,
            }) => {
                let n = Error::product("mask", &[b, lq, lk])?;
                Error::check_len("mask", "B·Lq·Lk for MaskShape::PerBatch", n, values.len())?;
                (lq * lk, 0)
            }
            Some(AdditiveMask {
                values,
                shape: MaskShape::PerHead,
            }) => {
                Error::check_len("mask", "B·H·Lq·Lk for MaskShape::PerHead", n_scores, values.len())?;
                (h * lq * lk, lq * lk)
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
        if out.is_empty() && scores.as_ref().is_none_or(|s| s.is_empty()) {
            return Ok(());
        }
        let call = AttentionCall {
            batch: b,
            heads: h,
            kv_heads: hkv,
            q_len: lq,
            kv_len: lk,
            head_dim: dk,
            value_dim: dv,
            q: q.as_ptr(),
            k: k.as_ptr(),
            v: v.as_ptr(),
            out: out.as_mut_ptr(),
            scores: scores.map_or(std::ptr::null_mut(), |s| s.as_mut_ptr()),
            prev: opts.prev_scores.map_or(std::ptr::null(), |p| p.as_ptr()),
            mask: opts.mask.map_or(std::ptr::null(), |m| m.values.as_ptr()),
            mask_batch_stride,
            mask_head_stride,
            key_lengths: opts.key_lengths.map_or(std::ptr::null(), |l| l.as_ptr()),
            causal: opts.causal,
            scale,
            mean_factor: opts.running_mean_layer.map(|layer| (1.0 / (layer as f64 + 1.0)) as f32),
            carry_masked: opts.carried == CarriedScores::Masked,
            masked_rows: opts.masked_rows,
            workspace: workspace.reserve(ws_len).as_mut_ptr(),
        };
        // SAFETY: every pointer covers the length its shape gives (checked above), the
        // workspace holds `workspace_len` floats, and `out`/`scores` are exclusive borrows,
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
        unsafe { call.run(self) }
    }
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
/// let opts = AttentionOptions { causal: true, ..Default::default() };
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
