//! Fully connected layers: `Y = act(X·W + b)`, optionally `+ R`, with the bias, the activation
//! and the residual fused into the matrix product.
//!
//! # Semantics
//!
//! `X[M, K]` (rows of `in_features = K`), `W[K, N]`, `b[N]`, `Y[M, N]` and `R[M, N]`, all
//! row-major:
//!
//! ```text
//! Y = act(X·W + b) + R        act ∈ {identity, ReLU, GELU (erf), GELU (tanh), swish}
//! ```
//!
//! The weights are packed once, by [`Kernels::pack_linear`], from either layout the models
//! ship: `[in, out]` ([`WeightLayout::InOut`], `Y = X·W`) or PyTorch's `nn.Linear.weight`
//! `[out, in]` ([`WeightLayout::OutIn`], `Y = X·Wᵀ`), in f32 or rounded to bfloat16
//! ([`WeightType::Bf16`], half the bytes to stream: what small batches are bound by). The bias
//! is copied with them and stays f32. `X`, `Y` and `R` are stored as any [`Element`]: `X` is
//! widened exactly, everything is computed in f32, each element of `Y` rounded once.
//! NaN and ±∞ propagate as in the f32 formula (`act(NaN) = NaN`; ReLU keeps NaN).
//!
//! # Error bound
//!
//! With `u = 2⁻²⁴`, `ŵ` the packed weights (exact for f32, the bf16 rounding of `W` for
//! [`WeightType::Bf16`]: the bound is against the product with `ŵ`, `reference::linear` takes
//! the same rounding) and `z = Σ_k x_k·ŵ_kn + b_n`:
//!
//! ```text
//! |z − ẑ| ≤ (K + 1)·u·(Σ_k |x_k·ŵ_kn| + |b_n|) + (K + 1)·2⁻¹⁴⁹
//! |Y − Ŷ| ≤ |act'|·|z − ẑ| + (the activation's own bound at z) + u·|Y| (the residual add)
//! ```
//!
//! The dot product accumulates in f32, one FMA per term, in order of `k` (`K·u` of the sum of
//! magnitudes), the bias adds one rounding, the activation contributes its bound (ReLU and the
//! identity none, GELU 6 ulp, `gelu_tanh` `4 + 3|v|` ulp, swish 3 ulp) plus its slope times
//! the error of `z` (at most 1.13 for the GELUs, 1.1 for swish), the residual one rounding.
//! `reference::check_linear` states the same bound as code.
//!
//! # Algorithm
//!
//! The crate's register-tiled micro-kernel (`MR × NR` accumulators, one broadcast of `X` per
//! row and `NR/LANES` loads of `W` per step of `k`) over the packed panels `[panel][k][NR]`:
//! panel by panel, every block of `MR` rows of `X` against the whole panel, so that the panel
//! (`K·NR` weights) is read from memory once and from L2 for the other rows, and `X` streams;
//! the first blocks of rows prefetch the next panel into L2, a part each, so that at small
//! `M`, where the weights stream from memory, their transfer overlaps the panel's compute.
//! The finished tile gets the bias, the activation and the residual in registers and is
//! stored once. bf16 weights are packed in pairs of vectors, each 32-bit word holding a
//! column of one vector in its low half and of the next in its high half, so that one load
//! and two integer operations give two vectors. Half-typed `X` is widened into a stack
//! buffer a block of rows and `k` at a time. Nothing is allocated per call.

mod body;
mod options;

use crate::dispatch::{with_detected, Kernels, Op};
use crate::element::{Element, PerElement, Typed};
use crate::error::Error;
use crate::gemm::MAX_NR;
use crate::isa::Isa;
use crate::simd::{Simd, TileOp};
use body::{pack, LinearCall, Panels};
pub use options::{Activation, LinearOptions, LinearWeights, WeightLayout, WeightType};

/// The weights and bias of a layer packed once for the kernels of one ISA by
/// [`Kernels::pack_linear`]: owns its copies.
#[derive(Debug, Clone)]
pub struct PackedLinear {
    isa: Isa,
    in_features: usize,
    out_features: usize,
    panels: Panels,
    bias: Option<Vec<f32>>,
}

impl PackedLinear {
    /// The ISA whose kernels these weights were packed for.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// `K`.
    pub fn in_features(&self) -> usize {
        self.in_features
    }

    /// `N`.
    pub fn out_features(&self) -> usize {
        self.out_features
    }

    /// How the weights are stored.
    pub fn weight_type(&self) -> WeightType {
        match self.panels {
            Panels::F32(_) => WeightType::F32,
            Panels::Bf16(_) => WeightType::Bf16,
        }
    }

    /// Bytes of packed weights a call streams (the panels, padding included).
    pub fn weight_bytes(&self) -> usize {
        match &self.panels {
            Panels::F32(p) => p.len() * 4,
            Panels::Bf16(p) => p.len() * 4,
        }
    }
}

/// Packs the weights for the tile of the ISA it runs on.
struct Pack<'a> {
    w: &'a LinearWeights<'a>,
    ty: WeightType,
}

impl Op for Pack<'_> {
    type Output = Panels;

    #[inline(always)]
    unsafe fn eval<S: Simd>(self, s: S) -> Panels {
        // SAFETY: `Pack` has no safety conditions.
        unsafe { s.with_tile(self) }
    }
}

impl TileOp for Pack<'_> {
    type Output = Panels;

    #[inline(always)]
    unsafe fn eval<S: Simd, const MR: usize, const NV: usize>(self, _s: S) -> Panels {
        // bf16 panels pair their vectors.
        const { assert!(NV.is_multiple_of(2)) };
        pack(self.w, self.ty, NV * S::LANES, S::LANES)
    }
}

/// The linear calls of every storage type.
struct Linear;

impl PerElement for Linear {
    type Of<E: Element> = LinearCall<E>;
}

impl Kernels {
    /// Packs a layer's weights (and bias) once, for the kernels of this ISA, as
    /// [`Kernels::linear`] reads them: panels of the micro-kernel's width, in f32 or bf16.
    ///
    /// # Errors
    /// [`Error::Shape`] naming `weights.in_features` or `weights.out_features` if zero,
    /// `weights.weights` if its length is not their product, `weights.bias` if its length is
    /// not `out_features`.
    pub fn pack_linear(&self, weights: &LinearWeights, ty: WeightType) -> Result<PackedLinear, Error> {
        let LinearWeights {
            in_features: k,
            out_features: n,
            ..
        } = *weights;
        if k == 0 {
            return Err(Error::shape("weights.in_features", "at least 1", 0));
        }
        if n == 0 {
            return Err(Error::shape("weights.out_features", "at least 1", 0));
        }
        let len = Error::product("weights.weights", &[k, n])?;
        Error::check_len(
            "weights.weights",
            "in_features·out_features",
            len,
            weights.weights.len(),
        )?;
        if let Some(b) = weights.bias {
            Error::check_len("weights.bias", "out_features", n, b.len())?;
        }
        // SAFETY: `Pack` has no safety conditions.
        let panels = unsafe { self.run(Pack { w: weights, ty }) };
        Ok(PackedLinear {
            isa: self.isa(),
            in_features: k,
            out_features: n,
            panels,
            bias: weights.bias.map(<[f32]>::to_vec),
        })
    }

    /// `out = act(x·W + b) (+ R)` for the rows of `x` (`[M, K]`, `M = x.len()/K`) into `out`
    /// (`[M, N]`), with weights packed by [`Kernels::pack_linear`] of this ISA. See the
    /// [module docs](mod@crate::linear).
    ///
    /// # Errors
    /// [`Error::Param`] naming `weights` if they were packed for another ISA; [`Error::Shape`]
    /// naming `x` if its length is not a multiple of `K`, `out` if its length is not `M·N`,
    /// `opts.residual` if its length is not `M·N`.
    ///
    /// ```
    /// use kernels::{Activation, Kernels, LinearOptions, LinearWeights, WeightLayout, WeightType};
    ///
    /// // nn.Linear(3, 2) with PyTorch's [out, in] weight, then ReLU.
    /// let (w, b) = ([1.0, 0.0, -1.0, 0.5, 0.5, 0.5], [0.0, -1.0]);
    /// let k = Kernels::best();
    /// let layer = k.pack_linear(
    ///     &LinearWeights { weights: &w, layout: WeightLayout::OutIn, in_features: 3, out_features: 2, bias: Some(&b) },
    ///     WeightType::F32,
    /// )?;
    /// let mut y = [0.0f32; 2];
    /// k.linear(&[1.0, 2.0, 3.0], &layer, &mut y, &LinearOptions::default().activation(Activation::Relu))?;
    /// assert_eq!(y, [0.0, 2.0]);
    /// # Ok::<(), kernels::Error>(())
    /// ```
    pub fn linear<E: Element>(
        &self,
        x: &[E],
        weights: &PackedLinear,
        out: &mut [E],
        opts: &LinearOptions<E>,
    ) -> Result<(), Error> {
        if weights.isa != self.isa() {
            return Err(Error::param(
                "weights",
                format!("weights packed for {}", self.isa()),
                format!("weights packed for {}", weights.isa),
            ));
        }
        let (k, n) = (weights.in_features, weights.out_features);
        if !x.len().is_multiple_of(k) {
            return Err(Error::shape(
                "x",
                format!("a length that is a multiple of in_features = {k}"),
                x.len(),
            ));
        }
        let m = x.len() / k;
        let len = Error::product("out", &[m, n])?;
        Error::check_len("out", "M·out_features", len, out.len())?;
        if let Some(r) = opts.residual {
            Error::check_len("opts.residual", "M·out_features", len, r.len())?;
        }
        if m == 0 {
            return Ok(());
        }
        let (panels, bf16) = match &weights.panels {
            Panels::F32(p) => (p.as_slice().as_ptr().cast::<u32>(), false),
            Panels::Bf16(p) => (p.as_slice().as_ptr(), true),
        };
        debug_assert!((panels as usize).is_multiple_of(64), "panels start a cache line");
        let call = LinearCall {
            x: x.as_ptr(),
            m,
            k,
            n,
            panels,
            bf16,
            bias: weights.bias.as_deref().map_or(std::ptr::null(), <[f32]>::as_ptr),
            activation: opts.activation,
            residual: opts.residual.map_or(std::ptr::null(), <[E]>::as_ptr),
            out: out.as_mut_ptr(),
            col0: 0,
            col1: n,
            // By columns where every thread gets some: each part then streams only its own
            // panels of the weights, the bytes small-batch inference is bound by.
            split_rows: n.div_ceil(MAX_NR) < self.parallelism().threads(),
        };
        // SAFETY: `x` holds `M·K` elements and `out` (an exclusive borrow) and the residual
        // `M·N`, as checked; the panels were packed for this ISA's tile from `K × N` weights,
        // the bias has `N` values.
        unsafe { self.run_linear(E::typed(call)) };
        Ok(())
    }

    /// Runs a validated call. Not generic: the kernel is compiled in this crate (see
    /// [`Typed`]).
    ///
    /// # Safety
    /// As [`LinearCall`].
    unsafe fn run_linear(&self, call: Typed<Linear>) {
        // SAFETY: forwarded.
        unsafe { call.run_split(self) }
    }
}

/// [`Kernels::pack_linear`] with the kernels of [`Kernels::detected`].
///
/// # Errors
/// As [`Kernels::pack_linear`].
pub fn pack_linear(weights: &LinearWeights, ty: WeightType) -> Result<PackedLinear, Error> {
    with_detected(|k| k.pack_linear(weights, ty))
}

/// [`Kernels::linear`] with the kernels of [`Kernels::detected`] (the weights must have been
/// packed for them, e.g. by [`pack_linear()`]).
///
/// # Errors
/// As [`Kernels::linear`].
pub fn linear<E: Element>(
    x: &[E],
    weights: &PackedLinear,
    out: &mut [E],
    opts: &LinearOptions<E>,
) -> Result<(), Error> {
    with_detected(|k| k.linear(x, weights, out, opts))
}
