//! The public shapes, weights and options of the GAU (see the [module docs](super)).

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

/// Rotary position embedding on Q and K.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rope {
    /// Rotates the pairs `(2m, 2m+1)` (GPT-J, RoFormer).
    Interleaved,
    /// Rotates the pairs `(m, m + s/2)` (GPT-NeoX, LLaMA).
    HalfSplit,
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
    /// An additive score bias `B[T, T]`, shared by the batch (e.g. relative positions).
    pub bias: Option<&'a [f32]>,
    /// Rotary embedding of Q and K (`s` must be even).
    pub rope: Option<Rope>,
    /// The attention of the unit: the paper's `relu²` (default) or GAU-α's softmax-plus.
    pub attention: GauAttention,
}

/// Which attention the GAU applies to its scores `S = c·Q·Kᵀ + B`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GauAttention {
    /// `A = relu(S)²/l`, the paper's (FLASH); no normalization by a sum.
    #[default]
    Relu2,
    /// GAU-α's softmax-plus: `A_ij = softmax_j(S_ij·ln(max(n_i, min_len))/ln 512)` over the
    /// allowed keys, `n_i` the number of keys row `i` sees (the normalizer `l` is not used).
    /// `min_len = 512` leaves sequences up to 512 tokens with a plain softmax.
    SoftmaxPlus {
        /// The length below which the factor is 1 (≥ 1).
        min_len: usize,
    },
}
