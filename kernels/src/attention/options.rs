//! The public shapes, layouts and options of attention (see the [module docs](super)).

use crate::softmax::MaskedRows;

/// Shapes of an attention call (see the [module docs](super)).
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
#[non_exhaustive]
pub enum MaskShape {
    /// `[Lq, Lk]`, broadcast over B and H.
    Shared,
    /// `[B, 1, Lq, Lk]`, broadcast over H.
    PerBatch,
    /// `[B, H, Lq, Lk]`.
    PerHead,
    /// `[B, Lk]`, one value per key of each batch, broadcast over H and the queries: the
    /// key-padding mask of an encoder (what BERT's `attention_mask` becomes: 0 for a token,
    /// −∞, or a large negative number, for padding), `B·Lk` floats instead of `B·Lq·Lk`.
    KeyPadding,
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
/// attention, and each option has a method of its name that sets it.
///
/// ```
/// use kernels::{AttentionOptions, MaskShape};
///
/// let padding = [0.0, 0.0, f32::NEG_INFINITY]; // [B = 1, Lk = 3]
/// let opts = AttentionOptions::default().mask(&padding, MaskShape::KeyPadding).scale(0.125);
/// assert_eq!(opts.scale, Some(0.125));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub struct AttentionOptions<'a> {
    /// Multiplies `Q·Kᵀ`; `None` means `1/√Dk`. Must be finite.
    pub scale: Option<f32>,
    /// An additive mask.
    pub mask: Option<AdditiveMask<'a>>,
    /// Valid keys per batch (`B` entries, each ≤ `Lk`): keys past them are padding.
    pub key_lengths: Option<&'a [usize]>,
    /// Bottom-right aligned causal masking: query `i` sees keys `j ≤ i + Lk − Lq`.
    pub causal: bool,
    /// The previous layer's scores `P[B,H,Lq,Lk]`, added before the softmax. Give it a buffer
    /// that starts a cache line, as for [`AttentionArgs::scores`].
    pub prev_scores: Option<&'a [f32]>,
    /// RealFormer's running-mean variant: the softmax sees `S/(ℓ+1)` for layer `ℓ`.
    pub running_mean_layer: Option<u32>,
    /// What the scores output receives.
    pub carried: CarriedScores,
    /// The policy for fully masked rows.
    pub masked_rows: MaskedRows,
}

impl<'a> AttentionOptions<'a> {
    /// These options with `Q·Kᵀ` multiplied by `scale` instead of `1/√Dk`.
    pub fn scale(self, scale: f32) -> Self {
        AttentionOptions {
            scale: Some(scale),
            ..self
        }
    }

    /// These options with an additive mask of the given shape.
    pub fn mask(self, values: &'a [f32], shape: MaskShape) -> Self {
        AttentionOptions {
            mask: Some(AdditiveMask { values, shape }),
            ..self
        }
    }

    /// These options with `lengths[b]` valid keys in batch `b`.
    pub fn key_lengths(self, lengths: &'a [usize]) -> Self {
        AttentionOptions {
            key_lengths: Some(lengths),
            ..self
        }
    }

    /// These options with bottom-right aligned causal masking on or off.
    pub fn causal(self, causal: bool) -> Self {
        AttentionOptions { causal, ..self }
    }

    /// These options with the previous layer's scores `P` added.
    pub fn prev_scores(self, prev: &'a [f32]) -> Self {
        AttentionOptions {
            prev_scores: Some(prev),
            ..self
        }
    }

    /// These options with RealFormer's running mean at layer `layer`.
    pub fn running_mean_layer(self, layer: u32) -> Self {
        AttentionOptions {
            running_mean_layer: Some(layer),
            ..self
        }
    }

    /// These options with the scores output receiving `carried`.
    pub fn carried(self, carried: CarriedScores) -> Self {
        AttentionOptions { carried, ..self }
    }

    /// These options with the policy `masked_rows` for fully masked rows.
    pub fn masked_rows(self, masked_rows: MaskedRows) -> Self {
        AttentionOptions { masked_rows, ..self }
    }
}

/// Where the elements of a 4-D tensor `[B, H, L, D]` sit in a slice: element `(b, h, l, d)` at
/// `offset + b·batch + h·head + l·row + d`. The last axis is contiguous; the others may be
/// laid out any way, so that attention reads the outputs of the projections in place.
///
/// ```
/// use kernels::Layout;
///
/// // One fused QKV projection [B, L, 3·H·D] (B sentences of L tokens, H heads of D): Q, K
/// // and V are its three column blocks, each [B, L, H, D].
/// let (l, h, d) = (16, 12, 32);
/// let q = Layout::tokens_first(l, 3 * h * d, 0, d);
/// let k = Layout::tokens_first(l, 3 * h * d, h * d, d);
/// assert_eq!((k.offset, k.head, k.row, k.batch), (h * d, d, 3 * h * d, l * 3 * h * d));
/// // The output written straight into [B, L, H·D], ready for the output projection.
/// let out = Layout::tokens_first(l, h * d, 0, d);
/// # let _ = (q, out);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The index of element `(0, 0, 0, 0)`.
    pub offset: usize,
    /// Elements from one batch to the next.
    pub batch: usize,
    /// Elements from one head to the next.
    pub head: usize,
    /// Elements from one row (query or key) to the next.
    pub row: usize,
}

impl Layout {
    /// `[B, H, L, D]` row-major, from index 0: the layout of [`Kernels::attention`]'s slices.
    /// (The strides saturate where the products overflow: the call that takes the view then
    /// refuses it.)
    ///
    /// [`Kernels::attention`]: crate::Kernels::attention
    pub fn heads_first(heads: usize, len: usize, dim: usize) -> Self {
        Layout {
            offset: 0,
            batch: heads.saturating_mul(len).saturating_mul(dim),
            head: len.saturating_mul(dim),
            row: dim,
        }
    }

    /// `[B, L, H, D]` inside rows of `width` elements per token, the heads starting at column
    /// `offset` of a row: `[B, L, H·D]` (`width = H·D`, `offset = 0`), or Q, K or V in the
    /// output of a fused projection `[B, L, 3·H·D]` (`width = 3·H·D`, `offset` = 0, `H·D` or
    /// `2·H·D`). (The batch stride saturates where `L·width` overflows.)
    pub fn tokens_first(len: usize, width: usize, offset: usize, dim: usize) -> Self {
        Layout {
            offset,
            batch: len.saturating_mul(width),
            head: dim,
            row: width,
        }
    }
}

/// The operands of one attention call, by name: what [`Kernels::attention_args`] runs. `Q`,
/// `K`, `V` and `O` are views with a [`Layout`] each (they may share one slice: a fused QKV
/// projection); the scores stay `[B, H, Lq, Lk]` row-major.
///
/// [`Kernels::attention_args`]: crate::Kernels::attention_args
#[derive(Debug)]
pub struct AttentionArgs<'a, E> {
    /// The sizes.
    pub shape: AttentionShape,
    /// `Q[B, H, Lq, Dk]`.
    pub q: &'a [E],
    /// Where `Q` sits in `q`.
    pub q_layout: Layout,
    /// `K[B, Hkv, Lk, Dk]`.
    pub k: &'a [E],
    /// Where `K` sits in `k`.
    pub k_layout: Layout,
    /// `V[B, Hkv, Lk, Dv]`.
    pub v: &'a [E],
    /// Where `V` sits in `v`.
    pub v_layout: Layout,
    /// `O[B, H, Lq, Dv]`, written.
    pub out: &'a mut [E],
    /// Where `O` goes in `out` (no two elements in the same place).
    pub out_layout: Layout,
    /// `S` (or `Z`), `[B, H, Lq, Lk]`, written when given: the next layer's `P`.
    ///
    /// Give it (and `P`) a buffer that starts a cache line: one 16 bytes past a line (a large
    /// `Vec<f32>` from the system allocator) splits half (AVX2) or all (AVX-512) of their vector
    /// accesses across two lines. It is stored through the caches even beyond the last-level
    /// cache: streaming stores measured slower there (AVX2, on a Zen 3; not measured on AVX-512).
    pub scores: Option<&'a mut [f32]>,
    /// Scale, masks, causality, carried scores.
    pub options: AttentionOptions<'a>,
}

/// How [`Kernels::attention`] walks the keys and queries of a call of some shape, on the
/// caches of a handle ([`Kernels::attention_plan`]). Plans are chosen from the shape and the
/// level-1 and level-2 caches of one core ([`Kernels::with_caches`]); they decide where the
/// work is done, never a value: every plan gives the same bits.
///
/// [`Kernels::attention`]: crate::Kernels::attention
/// [`Kernels::attention_plan`]: crate::Kernels::attention_plan
/// [`Kernels::with_caches`]: crate::Kernels::with_caches
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AttentionPlan {
    /// Each block of query rows (the register tile's height, 4 or 6) sweeps every key of its
    /// head: one head's K and V, packed as f32, fit two thirds of the level-1 cache or half
    /// of the level-2 cache and stay there across the blocks.
    Rows,
    /// The keys in blocks of `keys` (a multiple of 64), each swept by the blocks of
    /// `query_rows` query rows in turn before the next: one key block, not the head's K and
    /// V, stays in the level-1 cache (where one softmax step of 64 keys fits two thirds of
    /// it) or the level-2 cache, and what comes from beyond it is read once per `query_rows`
    /// rows instead of once per tile height.
    KeyBlocks {
        /// Keys of a block.
        keys: usize,
        /// Query rows that sweep a key block before the next (a multiple of every tile
        /// height).
        query_rows: usize,
    },
}
