//! Add & Norm with its operands named: [`AddNorm`], run by [`Kernels::add_and_layer_norm`]
//! and [`Kernels::add_and_rms_norm`].

use super::call::Residual;
use super::layer_norm::LayerNormOptions;
use super::rms_norm::RmsNormOptions;
use crate::dispatch::Kernels;
use crate::element::Element;
use crate::error::Error;

/// The operands of one Add & Norm step, by name:
///
/// ```text
/// h   = α·skip + (sublayer + bias)     written to `sum` when given (Pre-LN's next residual stream)
/// out = Norm(h)                        LayerNorm or RMSNorm, row by row
/// ```
///
/// `skip` is the residual stream, the sublayer's input that skips it (and that DeepNorm's `α`
/// scales); `sublayer` is the output of the attention or feed-forward sublayer; `bias` is the
/// sublayer's last bias, fused here. All are row-major `[rows, width]`.
///
/// ```
/// use kernels::{AddNorm, Kernels, LayerNormOptions};
///
/// let (rows, width) = (2, 4);
/// let x = vec![1.0f32; rows * width]; // the layer's input
/// let attn = vec![0.5f32; rows * width]; // the attention sublayer's output
/// let bias = vec![0.25f32; width];
/// let mut y = vec![0.0f32; rows * width];
/// let mut h = vec![0.0f32; rows * width];
/// let step = AddNorm::new(&x, &attn, &mut y, width).bias(&bias).alpha(2.0).sum(&mut h);
/// Kernels::best().add_and_layer_norm(step, &LayerNormOptions::default())?;
/// assert_eq!(h[0], 2.0 * 1.0 + (0.5 + 0.25));
/// # Ok::<(), kernels::Error>(())
/// ```
#[derive(Debug)]
pub struct AddNorm<'a, E> {
    skip: &'a [E],
    sublayer: &'a [E],
    out: &'a mut [E],
    sum: Option<&'a mut [E]>,
    width: usize,
    residual: Residual<'a>,
}

impl<'a, E: Element> AddNorm<'a, E> {
    /// `out = Norm(skip + sublayer)` over rows of `width`, with `α = 1`, no bias, no `sum`.
    pub fn new(skip: &'a [E], sublayer: &'a [E], out: &'a mut [E], width: usize) -> Self {
        AddNorm {
            skip,
            sublayer,
            out,
            sum: None,
            width,
            residual: Residual::default(),
        }
    }

    /// `α`, the factor of `skip` (DeepNorm: `(2N)^¼` for an `N`-layer encoder); finite.
    pub fn alpha(mut self, alpha: f32) -> Self {
        self.residual.alpha = alpha;
        self
    }

    /// The sublayer's bias, `width` values added to every row of `sublayer`.
    pub fn bias(mut self, bias: &'a [f32]) -> Self {
        self.residual.bias = Some(bias);
        self
    }

    /// Writes `h` (before the norm) to `sum` as well: the residual stream of a Pre-LN layer.
    pub fn sum(mut self, sum: &'a mut [E]) -> Self {
        self.sum = Some(sum);
        self
    }

    /// Checks the operands' lengths under their own names (the positional calls name them `x`,
    /// `r` and `h`).
    fn check(&self) -> Result<(), Error> {
        if self.width == 0 {
            return Err(Error::shape("width", "at least 1", 0));
        }
        let n = self.skip.len();
        if !n.is_multiple_of(self.width) {
            return Err(Error::shape(
                "skip",
                format!("a length that is a multiple of width = {}", self.width),
                n,
            ));
        }
        Error::check_len("sublayer", "the length of skip", n, self.sublayer.len())?;
        Error::check_len("out", "the length of skip", n, self.out.len())?;
        if let Some(sum) = &self.sum {
            Error::check_len("sum", "the length of skip", n, sum.len())?;
        }
        Ok(())
    }
}

impl Kernels {
    /// Add & LayerNorm on named operands: `h = α·skip + (sublayer + bias)`, `out = LN(h)`.
    /// The same bits, bound and errors as [`add_layer_norm`](Self::add_layer_norm), whose
    /// `x` is `skip`, `r` is `sublayer` and `h` is `sum`.
    ///
    /// # Errors
    /// [`Error::Shape`] naming `width`, `skip`, `sublayer`, `out`, `sum`, `gamma`, `beta` or
    /// `bias` when its length does not match; [`Error::Param`] for a non-finite `alpha` or
    /// an `eps` that is not finite and positive.
    pub fn add_and_layer_norm<E: Element>(&self, step: AddNorm<E>, opts: &LayerNormOptions) -> Result<(), Error> {
        step.check()?;
        let AddNorm {
            skip,
            sublayer,
            out,
            sum,
            width,
            residual,
        } = step;
        self.add_layer_norm(skip, sublayer, out, sum, width, &residual, opts)
    }

    /// Add & RMSNorm on named operands: `h = α·skip + (sublayer + bias)`, `out = RMSNorm(h)`.
    /// The same bits, bound and errors as [`add_rms_norm`](Self::add_rms_norm).
    ///
    /// # Errors
    /// As [`add_and_layer_norm`](Self::add_and_layer_norm), with `gain` for the gain.
    pub fn add_and_rms_norm<E: Element>(&self, step: AddNorm<E>, opts: &RmsNormOptions) -> Result<(), Error> {
        step.check()?;
        let AddNorm {
            skip,
            sublayer,
            out,
            sum,
            width,
            residual,
        } = step;
        self.add_rms_norm(skip, sublayer, out, sum, width, &residual, opts)
    }
}
