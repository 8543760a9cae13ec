//! The public shapes, weights and options of the GAU (see the [module docs](super)).

use crate::attention::AdditiveMask;

/// Sizes of a GAU call (see the [module docs](super)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GauShape {
    /// `B`.
    pub batch: usize,
    /// `T`, the sequence length.
    pub seq_len: usize,
    /// `d`, the model width (≥ 1).
    pub dim: usize,
    /// `e`, the expanded width of U and V (≥ 1; 2d in the paper).
    pub expand: usize,
    /// `s`, the width of the shared Q/K projection (≥ 1; 128 in the paper).
    pub qk_dim: usize,
}

/// The score scale `c`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum ScoreScale {
    /// `1/√s`, the paper's.
    #[default]
    InvSqrtQkDim,
    /// `1/T`.
    InvSeqLen,
    /// A given finite constant.
    Value(f32),
}

/// The normalizer `l_i` that divides `relu²`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Normalizer {
    /// `T`, the paper's.
    #[default]
    SeqLen,
    /// The number of keys row `i` may see (padding and causality), at least 1.
    ValidKeys,
    /// A given constant, finite and > 0.
    Value(f32),
}

/// Which dimensions of Q and K rotate together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopePairs {
    /// The pairs `(2m, 2m+1)` (GPT-J, RoFormer, lucidrains' `rotary-embedding-torch`).
    Interleaved,
    /// The pairs `(m, m + r/2)` of the rotated width `r` (GPT-NeoX, LLaMA).
    HalfSplit,
}

/// Rotary position embedding on Q and K: the first `width` dimensions (all `s` by default) turn
/// pair by pair, pair `m` at position `t` by the angle `t·base^(−2m/width)`; the rest stay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rope {
    /// Which dimensions pair up.
    pub pairs: RopePairs,
    /// How many leading dimensions rotate: even, ≤ `s`; `None` for all `s` (then `s` must be
    /// even). lucidrains' FLASH rotates 32 of its 128.
    pub width: Option<usize>,
    /// `θ`, finite and > 0: 10000 in RoFormer, LLaMA and most others.
    pub base: f32,
}

impl Rope {
    /// Interleaved pairs over the whole width, base 10000.
    pub const INTERLEAVED: Rope = Rope {
        pairs: RopePairs::Interleaved,
        width: None,
        base: 10000.0,
    };
    /// Half-split pairs over the whole width, base 10000.
    pub const HALF_SPLIT: Rope = Rope {
        pairs: RopePairs::HalfSplit,
        width: None,
        base: 10000.0,
    };

    /// This embedding on the first `width` dimensions only.
    pub const fn with_width(self, width: usize) -> Rope {
        Rope {
            width: Some(width),
            ..self
        }
    }

    /// This embedding with base `θ`.
    pub const fn with_base(self, base: f32) -> Rope {
        Rope { base, ..self }
    }
}

/// The weights of a GAU.
#[derive(Debug, Clone, Copy)]
pub struct GauWeights<'a> {
    /// `W_in[d, 2e+s]`, row-major: columns `0..e` give U, `e..2e` V, `2e..` Z.
    pub w_in: &'a [f32],
    /// Bias of the input projection, `[2e+s]`.
    pub b_in: Option<&'a [f32]>,
    /// `γ_q [s]`.
    pub gamma_q: &'a [f32],
    /// `β_q [s]`.
    pub beta_q: &'a [f32],
    /// `γ_k [s]`.
    pub gamma_k: &'a [f32],
    /// `β_k [s]`.
    pub beta_k: &'a [f32],
    /// `W_o[e, d]`, row-major.
    pub w_out: &'a [f32],
    /// Bias of the output projection, `[d]`.
    pub b_out: Option<&'a [f32]>,
}

/// Options of [`gau`](crate::gau()); `Default` gives the paper's GAU.
///
/// # The public implementations
///
/// Each maps onto one call; `tests/gau.rs` builds each from its own formulas and weight layout
/// in f64 and checks the call against it.
///
/// | implementation | `W_in [d, 2e+s]` columns | attention | `c`, `l` | RoPE | bias |
/// |---|---|---|---|---|---|
/// | the paper's equations | `[U \| V \| Z]` | `Relu2` | `1/√s`, `T` (the defaults) | as its positions need | `B` |
/// | lucidrains `GAU` | `to_hidden` is `[V \| U]`: its second half, its first, then `to_qk`, each `nn.Linear` weight transposed | `Relu2` or `Laplace` | `1/T`, `Value(1)` | none | `rel_pos/T` (added before the `/T`) |
/// | lucidrains `FLASH` positions | | | | `INTERLEAVED.with_width(32)` | |
/// | bert4keras `GatedAttentionUnit` | `i_dense` as is: `[U \| V \| Z]` | `Relu2`; `SoftmaxPlus`; `Softmax` | `1/√s`, `ValidKeys` | `INTERLEAVED` | `a_bias` as is |
/// | GAU-α | as bert4keras, no biases, `β = 0` | `SoftmaxPlus { min_len: 1 }` | `1/√s` | `INTERLEAVED` | — |
///
/// - bert4keras counts `l` and softmax-plus's `n` over the key padding mask only, and masks
///   with finite `−10¹²` biases: key lengths and a finite bias reproduce it, where a −∞ bias
///   would also shrink the counts. Its softmax-plus has no clamp up to 0.11.4 (`min_len = 1`,
///   what GAU-α was released with, which asks for ≥ 0.11.2) and clamps at 16 from 0.11.5.
/// - lucidrains zeroes masked positions after `relu²`/Laplace (`l = 1`, nothing counted): a
///   `[B, T]` bias of 0 and −∞ is its boolean key mask.
/// - The norms around the unit are separate calls: lucidrains' pre-norm is `nn.LayerNorm`
///   (ε = 10⁻⁵) or `ScaleNorm` (ε = 10⁻⁵ on the clamped norm); GAU-α's post-norm is an RMS
///   norm without gain, ε = Keras's `epsilon()` (10⁻⁷ by default).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct GauOptions<'a> {
    /// `c`.
    pub scale: ScoreScale,
    /// `l`.
    pub normalizer: Normalizer,
    /// Valid keys per batch (`B` entries, each ≤ `T`).
    pub key_lengths: Option<&'a [usize]>,
    /// Query `i` sees only keys `j ≤ i`.
    pub causal: bool,
    /// An additive score bias `B` (relative positions, an arbitrary mask): `[T, T]` shared by
    /// the batch, `[B, T, T]` per sequence (`PerBatch`; `PerHead` is the same for one head),
    /// or `[B, T]` per key (`KeyPadding`, e.g. left padding). A −∞ disallows its key: it adds
    /// nothing and is not counted in `n_i`.
    pub bias: Option<AdditiveMask<'a>>,
    /// Rotary embedding of Q and K.
    pub rope: Option<Rope>,
    /// The attention of the unit: the paper's `relu²` (default), Laplace, softmax or GAU-α's
    /// softmax-plus.
    pub attention: GauAttention,
}

/// Which attention the GAU applies to its scores `S = c·Q·Kᵀ + B`; `n_i` is the number of keys
/// row `i` may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GauAttention {
    /// `A = relu(S)²/l`, the paper's (FLASH); no normalization by a sum.
    #[default]
    Relu2,
    /// `A = Φ((S − μ)/σ)/l = (1 + erf((S − μ)/(σ√2)))/(2l)` with `μ = √½`, `σ = 1/√(4π)`: the
    /// Laplace attention function of Mega, which lucidrains' FLASH offers in place of `relu²`
    /// (there with `l = 1`).
    Laplace,
    /// `A_ij = softmax_j(S_ij)` over the allowed keys (the normalizer `l` is not used).
    Softmax,
    /// GAU-α's softmax-plus: `A_ij = softmax_j(S_ij·ln(max(n_i, min_len))/ln 512)` over the
    /// allowed keys (the normalizer `l` is not used). The released GAU-α code has no clamp
    /// (`min_len = 1`); `min_len = 512` is a plain softmax up to 512 keys.
    SoftmaxPlus {
        /// The length below which the factor stays that of `min_len` (≥ 1).
        min_len: usize,
    },
}
