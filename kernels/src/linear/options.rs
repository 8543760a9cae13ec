//! The public weights, layouts and options of `linear` (see the [module docs](super)).

/// How the weight matrix of a layer is laid out, row-major.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightLayout {
    /// `W[in_features, out_features]`: `Y = X·W`.
    InOut,
    /// `W[out_features, in_features]`, PyTorch's `nn.Linear.weight`: `Y = X·Wᵀ`.
    OutIn,
}

/// How [`Kernels::pack_linear`](crate::Kernels::pack_linear) stores the weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum WeightType {
    /// f32, as given.
    #[default]
    F32,
    /// Rounded to bfloat16 (to nearest even), computed with in f32: half the bytes.
    Bf16,
}

/// The activation applied to `X·W + b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Activation {
    /// None: `Y = X·W + b`.
    #[default]
    Identity,
    /// `max(z, 0)` (NaN stays NaN).
    Relu,
    /// [`gelu`](crate::gelu()), the erf form (BERT).
    Gelu,
    /// [`gelu_tanh`](crate::gelu_tanh()), the tanh form (GPT-2).
    GeluTanh,
    /// [`swish`](crate::swish()) (SiLU).
    Swish,
}

/// The weights and bias of a layer, as the model stores them.
#[derive(Debug, Clone, Copy)]
pub struct LinearWeights<'a> {
    /// The weight matrix, `in_features·out_features` values in `layout`.
    pub weights: &'a [f32],
    /// How `weights` is laid out.
    pub layout: WeightLayout,
    /// `K`, the width of the rows of `X` (≥ 1).
    pub in_features: usize,
    /// `N`, the width of the rows of `Y` (≥ 1).
    pub out_features: usize,
    /// The bias, `out_features` values.
    pub bias: Option<&'a [f32]>,
}

/// The options of a [`Kernels::linear`](crate::Kernels::linear) call: `Default` is `Y = X·W + b`.
///
/// ```
/// use kernels::{Activation, LinearOptions};
///
/// let residual = vec![0.0f32; 8];
/// let opts = LinearOptions::default().activation(Activation::Gelu).residual(&residual);
/// assert_eq!(opts.activation, Activation::Gelu);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct LinearOptions<'a, E> {
    /// The activation.
    pub activation: Activation,
    /// `R[M, N]`, added after the activation (the residual stream before an Add & Norm).
    pub residual: Option<&'a [E]>,
}

impl<E> Default for LinearOptions<'_, E> {
    fn default() -> Self {
        LinearOptions {
            activation: Activation::Identity,
            residual: None,
        }
    }
}

impl<'a, E> LinearOptions<'a, E> {
    /// These options with `activation`.
    pub fn activation(self, activation: Activation) -> Self {
        LinearOptions { activation, ..self }
    }

    /// These options with the residual `R` added last.
    pub fn residual(self, residual: &'a [E]) -> Self {
        LinearOptions {
            residual: Some(residual),
            ..self
        }
    }
}
