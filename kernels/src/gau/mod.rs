//! The gated attention unit (GAU, "Transformer Quality in Linear Time"), single head, fused.
//!
//! # Semantics
//!
//! Input `X[B,T,d]`, weights `W_in[d, 2e+s]` (+ bias `[2e+s]`), per-dimension `γ_q, β_q, γ_k,
//! β_k [s]`, `W_o[e, d]` (+ bias `[d]`); output `O[B,T,d]`. All row-major.
//!
//! ```text
//! [U | V | Z] = swish(X·W_in + b_in)          U, V: [T, e];  Z: [T, s]
//! Q = Z⊙γ_q + β_q ;  K = Z⊙γ_k + β_k           then RoPE on Q and K, if asked
//! S_ij = c·Q_i·K_j + B_ij                      c: 1/√s (default), 1/T, or a constant
//! A_ij = allowed_ij ? relu(S_ij)²/l_i : 0      allowed: j < key_lengths[b] ∧ (¬causal ∨ j ≤ i)
//!                                                       ∧ B_ij ≠ −∞;  n_i = Σ_j allowed_ij
//! O = (U ⊙ A·V)·W_o + b_o                      l_i: T (default), n_i, or a constant
//! ```
//!
//! [`GauAttention`] replaces `relu²/l`: by Mega's Laplace function `Φ((S − μ)/σ)/l`, by a
//! softmax over the allowed keys, or by GAU-α's softmax-plus `softmax_j(S_ij·ln(max(n_i,
//! min_len))/ln 512)`; a row with no allowed key gets `A·V = 0` (so `O = b_o` there). The bias
//! `B` is `[T, T]`, `[B, T, T]` or `[B, T]` ([`AdditiveMask`](crate::AdditiveMask)); its −∞
//! entries mask keys, and `n_i` counts what is left, so a prefix-LM mask or left padding
//! gives each row its own key count. `causal` is `j ≤ i`: queries and keys share positions,
//! so this is both attention's bottom-right alignment and the top-left one.
//!
//! With the defaults this is the paper's `A = relu²(Q·Kᵀ/√s)/T`, i.e. `relu²(Q·Kᵀ)/(T·s)`;
//! `c = 1/T, l = 1` gives the `relu(Q·Kᵀ/T)²` form of other public implementations. A NaN in
//! an allowed score makes its row of `A·V` NaN; disallowed positions contribute nothing even
//! where their score is NaN.
//!
//! [`Rope`] rotates the pairs `(2m, 2m+1)` or `(m, m + r/2)` of the first `r` dimensions of Q
//! and K (all `s` by default) at position `t` by `t·θ^(−2m/r)` (`θ = 10000` by default).
//!
//! [`GauOptions`] maps each public implementation (the paper, lucidrains, bert4keras, GAU-α)
//! onto one call; `tests/gau.rs` checks each against its own formulas.
//!
//! # Storage types
//!
//! `X` and `O` are stored as any [`Element`] `E` (`f32`, `f16`, `bf16`); the weights, biases,
//! `γ`/`β` and the score bias stay f32 whatever `E` (engines keep GAU weights in f32 here: the
//! activations are what is half). For `E ≠ f32`, `X` is widened exactly into the f32
//! workspace once per sequence (`T·d`, against the `T·d·(2e+s)` of the projection); everything
//! is computed in f32 exactly as the f32 kernel does, and the output projection's epilogue
//! rounds each element of `O` once to `E` as it stores it. So a half output's bound is the f32
//! bound below plus one rounding to `E`.
//!
//! # Error bound
//!
//! `reference::gau` computes the exact output and, alongside it, a running error bound that
//! follows this algorithm step by step: each dot product of length `n` (the two projections,
//! `Q·Kᵀ`, `A·V`) errs by `(n + 2)·u` of the sum of its terms' magnitudes plus what its inputs
//! carry; swish by 3 ulp plus `1.1×` its input's error; `Z⊙γ + β`, the gate, `c`, `1/l`, the
//! square and the rotations by one rounding each; values below 2⁻¹²⁶ by 2⁻¹²⁶. Softmax-plus's
//! weights sum to 1 whatever their errors, so a score error `ε_j` moves `A·V` by
//! `Σ_j w_j·ε_j·(v_j − o)` to first order (`o` the row's output): the bound charges each key
//! its score error times its value's distance from `o`, plus the softmax's own roundings. The
//! tests enforce `|O − Ô| ≤` that bound on every element and every ISA, and check that it is
//! tight enough to fail a kernel whose score scale or normalizer is off by 10⁻³ or that drops
//! a bias (with scores spread as a trained model's: a nearly uniform softmax barely depends on
//! its scale).
//!
//! # Algorithm
//!
//! Per batch, with every product on the register-tile micro-kernel of `gemm.rs` (the ISA's
//! own, so each `Kernels` runs its ISA end to end):
//!
//! 1. `X·W_in` with bias and swish applied to the accumulator tile before it is stored
//!    (`W_in` packed once per call, or once for good with [`Kernels::pack_gau_weights`]);
//!    `Q`, `K` from `Z` (and RoPE), `K` packed for the scores;
//! 2. per block of 48 query rows, per tile of keys: the `Q·Kᵀ` tile in registers, scaled,
//!    biased, `relu²/l` and masked there, stored as a small L1 tile; then `A·V` accumulated
//!    into the block's rows (`V` read in place, each tile of it reused by the block's `48/MR`
//!    micro-blocks); key tiles no row of the block may see are skipped. No `T × T` buffer
//!    exists;
//! 3. the gate `U ⊙ A·V` as the block's epilogue, written over `U`;
//! 4. `(U ⊙ A·V)·W_o` with `b_o` added to the tile before it is stored.
//!
//! Split over threads ([`Kernels::with_parallelism`]), a call goes by sequences, each part
//! with a workspace slot of its own; with fewer sequences than threads, each sequence goes by
//! blocks of 48 rows instead: step 1 split over them, the keys packed on the calling thread,
//! steps 2–4 split over them (each part with its own block accumulators). The parts' blocks
//! are the call's, so every row is computed as on one thread.

mod body;
mod options;

use crate::aligned::AlignedBuf;
use crate::attention::MaskShape;
use crate::dispatch::{with_detected, Kernels};
use crate::element::{Element, PerElement, Typed};
use crate::error::Error;
use crate::isa::Isa;
use crate::parallel::Split;
use body::{GauCall, Phase};
pub use options::{GauAttention, GauOptions, GauShape, GauWeights, Normalizer, Rope, RopePairs, ScoreScale};

/// The weights of a GAU packed once for the kernels of one ISA, by
/// [`Kernels::pack_gau_weights`]; used by [`Kernels::gau_packed`] of the same ISA. Owns its
/// copies: the caller's weights may change or go afterwards.
#[derive(Debug, Clone)]
pub struct PackedGauWeights {
    isa: Isa,
    /// `(d, e, s)`.
    dims: (usize, usize, usize),
    w_in: AlignedBuf<f32>,
    w_out: AlignedBuf<f32>,
    b_in: Option<Vec<f32>>,
    gamma_q: Vec<f32>,
    beta_q: Vec<f32>,
    gamma_k: Vec<f32>,
    beta_k: Vec<f32>,
    b_out: Option<Vec<f32>>,
}

impl PackedGauWeights {
    /// The ISA whose kernels these weights were packed for.
    pub fn isa(&self) -> Isa {
        self.isa
    }
}

/// Reusable scratch memory of [`Kernels::gau`]: the packed weights (not with
/// [`Kernels::gau_packed`]), the projections of one
/// sequence, one block's accumulators, and the RoPE table (kept between calls of the same
/// `T` and `s`); a call split over threads has one such slot per part. It grows to the
/// largest call it has served; a long-lived workspace makes every call allocation-free.
#[derive(Debug, Default, Clone)]
pub struct GauWorkspace {
    buf: AlignedBuf<f32>,
    rope: Vec<f32>,
    /// `(T, width, base bits)` of the table.
    rope_for: Option<(usize, usize, u32)>,
}

impl GauWorkspace {
    /// An empty workspace; the first call sizes it.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Kernels {
    /// The GAU into `out`, with an explicit workspace. See [`gau`](crate::gau()).
    pub fn gau<E: Element>(
        &self,
        shape: &GauShape,
        x: &[E],
        weights: &GauWeights,
        opts: &GauOptions,
        out: &mut [E],
        workspace: &mut GauWorkspace,
    ) -> Result<(), Error> {
        check_weights(shape, weights)?;
        self.launch(shape, x, weights, false, opts, out, workspace)
    }

    /// Packs the weights of a GAU for the kernels of this ISA, once: `W_in` and `W_o` into the
    /// panels of its micro-kernel, the other parameters copied. [`Kernels::gau_packed`] then
    /// skips packing them on every call (about 8% of a call at `T = 256`, `d = 512`,
    /// `e = 1024`, `s = 128`, where `W_in` and `W_o` hold 6.5 MiB), and its workspace holds
    /// no copy of them. For the engine that runs a layer many times with the same weights.
    ///
    /// # Errors
    /// As [`Kernels::gau`] for `shape` and `weights`.
    ///
    /// ```
    /// use kernels::{GauOptions, GauShape, GauWeights, GauWorkspace, Kernels};
    ///
    /// let shape = GauShape { batch: 1, seq_len: 3, dim: 4, expand: 2, qk_dim: 2 };
    /// let (w_in, w_out) = (vec![0.1; 4 * 6], vec![0.2; 2 * 4]);
    /// let ones = [1.0; 2];
    /// let weights = GauWeights {
    ///     w_in: &w_in, b_in: None, gamma_q: &ones, beta_q: &ones, gamma_k: &ones, beta_k: &ones,
    ///     w_out: &w_out, b_out: None,
    /// };
    /// let k = Kernels::best();
    /// let packed = k.pack_gau_weights(&shape, &weights)?;
    /// let x = vec![0.5; 3 * 4];
    /// let (mut a, mut b) = (vec![0.0; 3 * 4], vec![0.0; 3 * 4]);
    /// let mut ws = GauWorkspace::new();
    /// k.gau_packed(&shape, &x, &packed, &GauOptions::default(), &mut a, &mut ws)?;
    /// k.gau(&shape, &x, &weights, &GauOptions::default(), &mut b, &mut ws)?;
    /// assert_eq!(a, b); // the same arithmetic, bit for bit
    /// # Ok::<(), kernels::Error>(())
    /// ```
    pub fn pack_gau_weights(&self, shape: &GauShape, weights: &GauWeights) -> Result<PackedGauWeights, Error> {
        check_weights(shape, weights)?;
        let (d, e, s) = (shape.dim, shape.expand, shape.qk_dim);
        let width = 2 * e + s;
        Ok(PackedGauWeights {
            isa: self.isa(),
            dims: (d, e, s),
            w_in: self.pack_panels(weights.w_in, width, d, width),
            w_out: self.pack_panels(weights.w_out, d, e, d),
            b_in: weights.b_in.map(<[f32]>::to_vec),
            gamma_q: weights.gamma_q.to_vec(),
            beta_q: weights.beta_q.to_vec(),
            gamma_k: weights.gamma_k.to_vec(),
            beta_k: weights.beta_k.to_vec(),
            b_out: weights.b_out.map(<[f32]>::to_vec),
        })
    }

    /// [`Kernels::gau`] with weights packed by [`Kernels::pack_gau_weights`]: the same
    /// arithmetic in the same order, so the same output bit for bit, without packing the
    /// weights on each call.
    ///
    /// # Errors
    /// As [`Kernels::gau`], and [`Error::Param`] naming `weights` if they were packed for
    /// another ISA, [`Error::Shape`] naming `weights` if for other `dim`, `expand`, `qk_dim`.
    pub fn gau_packed<E: Element>(
        &self,
        shape: &GauShape,
        x: &[E],
        weights: &PackedGauWeights,
        opts: &GauOptions,
        out: &mut [E],
        workspace: &mut GauWorkspace,
    ) -> Result<(), Error> {
        if weights.isa != self.isa() {
            return Err(Error::param(
                "weights",
                format!("weights packed for {}", self.isa()),
                format!("weights packed for {}", weights.isa),
            ));
        }
        let dims = (shape.dim, shape.expand, shape.qk_dim);
        if weights.dims != dims {
            return Err(Error::shape(
                "weights",
                format!("packed for (dim, expand, qk_dim) = {dims:?}"),
                format!("{:?}", weights.dims),
            ));
        }
        let view = GauWeights {
            w_in: weights.w_in.as_slice(),
            b_in: weights.b_in.as_deref(),
            gamma_q: &weights.gamma_q,
            beta_q: &weights.beta_q,
            gamma_k: &weights.gamma_k,
            beta_k: &weights.beta_k,
            w_out: weights.w_out.as_slice(),
            b_out: weights.b_out.as_deref(),
        };
        self.launch(shape, x, &view, true, opts, out, workspace)
    }

    /// Checks the rest of a call whose weights are checked (`packed`: `w_in`, `w_out` hold
    /// this ISA's panels), and runs it.
    #[allow(clippy::too_many_arguments)]
    fn launch<E: Element>(
        &self,
        shape: &GauShape,
        x: &[E],
        weights: &GauWeights,
        packed: bool,
        opts: &GauOptions,
        out: &mut [E],
        workspace: &mut GauWorkspace,
    ) -> Result<(), Error> {
        let GauShape {
            batch,
            seq_len: t,
            dim: d,
            qk_dim: s,
            ..
        } = *shape;
        Error::check_len("x", "B·T·d", Error::product("x", &[batch, t, d])?, x.len())?;
        Error::check_len("out", "B·T·d", Error::product("out", &[batch, t, d])?, out.len())?;
        if let Some(lens) = opts.key_lengths {
            Error::check_len("key_lengths", "B", batch, lens.len())?;
            if let Some((i, &len)) = lens.iter().enumerate().find(|(_, &len)| len > t) {
                return Err(Error::param(
                    "key_lengths",
                    format!("every length ≤ seq_len = {t}"),
                    format!("{len} at {i}"),
                ));
            }
        }
        if let Some(bias) = opts.bias {
            let (what, len) = match bias.shape {
                MaskShape::Shared => ("T·T", Error::product("bias", &[t, t])?),
                MaskShape::PerBatch | MaskShape::PerHead => ("B·T·T", Error::product("bias", &[batch, t, t])?),
                MaskShape::KeyPadding => ("B·T", Error::product("bias", &[batch, t])?),
            };
            Error::check_len("bias", what, len, bias.values.len())?;
        }
        let scale = match opts.scale {
            ScoreScale::InvSqrtQkDim => (1.0 / (s as f64).sqrt()) as f32,
            ScoreScale::InvSeqLen => (1.0 / t.max(1) as f64) as f32,
            ScoreScale::Value(c) if c.is_finite() => c,
            ScoreScale::Value(c) => return Err(Error::param("scale", "a finite constant", c)),
        };
        if let Normalizer::Value(l) = opts.normalizer {
            if !(l.is_finite() && l > 0.0) {
                return Err(Error::param("normalizer", "a finite constant > 0", l));
            }
        }
        if let GauAttention::SoftmaxPlus { min_len: 0 } = opts.attention {
            return Err(Error::param("attention", "softmax-plus with min_len ≥ 1", 0));
        }
        let rope_width = match opts.rope {
            None => 0,
            Some(Rope { width: None, .. }) if s % 2 != 0 => {
                return Err(Error::shape("shape.qk_dim", "an even width for RoPE", s));
            }
            Some(Rope { width: None, .. }) => s,
            Some(Rope { width: Some(w), .. }) if w % 2 != 0 || w > s => {
                return Err(Error::param("rope.width", format!("an even width ≤ qk_dim = {s}"), w));
            }
            Some(Rope { width: Some(w), .. }) => w,
        };
        if let Some(Rope { base, .. }) = opts.rope {
            if !(base.is_finite() && base > 0.0) {
                return Err(Error::param("rope.base", "a finite base > 0", base));
            }
        }
        let too_large = || Error::shape("shape", "a workspace that fits in memory", format!("{shape:?}"));
        let ws_len = body::workspace_len(shape, !E::IS_F32, packed).ok_or_else(too_large)?;
        let block = body::block_len(shape).ok_or_else(too_large)?;
        if batch == 0 || t == 0 {
            return Ok(());
        }
        if let Some(rope) = opts.rope {
            let key = (t, rope_width, rope.base.to_bits());
            if workspace.rope_for != Some(key) {
                workspace.rope = body::rope_table(t, rope_width, rope.base);
                workspace.rope_for = Some(key);
            }
        }
        let null = std::ptr::null();
        let mut call = GauCall {
            shape: *shape,
            x: x.as_ptr(),
            w_in: weights.w_in.as_ptr(),
            b_in: weights.b_in.map_or(null, |b| b.as_ptr()),
            gamma_q: weights.gamma_q.as_ptr(),
            beta_q: weights.beta_q.as_ptr(),
            gamma_k: weights.gamma_k.as_ptr(),
            beta_k: weights.beta_k.as_ptr(),
            w_out: weights.w_out.as_ptr(),
            b_out: weights.b_out.map_or(null, |b| b.as_ptr()),
            out: out.as_mut_ptr(),
            scale,
            normalizer: opts.normalizer,
            key_lengths: opts.key_lengths.map_or(std::ptr::null(), |l| l.as_ptr()),
            causal: opts.causal,
            bias: opts.bias.map_or(null, |b| b.values.as_ptr()),
            bias_shape: opts.bias.map_or(MaskShape::Shared, |b| b.shape),
            rope: opts.rope.map(|r| (r.pairs, rope_width)),
            attention: opts.attention,
            rope_table: workspace.rope.as_ptr(),
            workspace: std::ptr::null_mut(),
            slot: ws_len,
            batches: (0, batch),
            phase: Phase::All,
            rows: (0, t),
            blocks: std::ptr::null_mut(),
            block,
            packed,
        };
        // Split over sequences; where they are fewer than the threads, over blocks of rows
        // within each sequence, if that makes more parts.
        let by_batch = self.parts(batch, call.grain());
        let attend = GauCall {
            phase: Phase::Attend(0),
            ..call
        };
        let within = self.parts(attend.units(), attend.grain());
        let phased = within > by_batch;
        let total = if phased {
            (within - 1)
                .checked_mul(block)
                .and_then(|blocks| blocks.checked_add(ws_len))
        } else {
            ws_len.checked_mul(by_batch)
        }
        .ok_or_else(too_large)?;
        call.workspace = workspace.buf.grow(total).as_mut_ptr();
        let go = |phase| {
            // SAFETY: every pointer covers the length its shape gives (checked above), the
            // workspace holds `workspace_len` floats and a block region for each part after
            // the first, the RoPE table `T·s` when RoPE is on, and `out` is an exclusive
            // borrow; the phases of a sequence run in order.
            unsafe { self.run_gau(E::typed(GauCall { phase, ..call })) }
        };
        if phased {
            go(Phase::Weights);
            for b in 0..batch {
                go(Phase::Project(b));
                go(Phase::Keys(b));
                go(Phase::Attend(b));
            }
        } else {
            go(Phase::All);
        }
        Ok(())
    }

    /// Runs a validated call. Not generic: the kernel is compiled in this crate (see
    /// [`Typed`]).
    ///
    /// # Safety
    /// As [`GauCall`].
    unsafe fn run_gau(&self, call: Typed<Gau>) {
        // SAFETY: forwarded.
        unsafe { call.run_split(self) }
    }
}

/// The GAU calls of every storage type.
struct Gau;

impl PerElement for Gau {
    type Of<E: Element> = GauCall<E>;
}

/// Checks `weights` against the dimensions of `shape` (each nonzero).
fn check_weights(shape: &GauShape, weights: &GauWeights) -> Result<(), Error> {
    let GauShape {
        dim: d,
        expand: e,
        qk_dim: s,
        ..
    } = *shape;
    for (arg, v) in [("shape.dim", d), ("shape.expand", e), ("shape.qk_dim", s)] {
        if v == 0 {
            return Err(Error::shape(arg, "at least 1", 0));
        }
    }
    let width = Error::product("shape", &[2, e])?
        .checked_add(s)
        .ok_or_else(|| Error::shape("shape", "fits", "overflow"))?;
    Error::check_len(
        "weights.w_in",
        "d·(2e+s)",
        Error::product("weights.w_in", &[d, width])?,
        weights.w_in.len(),
    )?;
    Error::check_len(
        "weights.w_out",
        "e·d",
        Error::product("weights.w_out", &[e, d])?,
        weights.w_out.len(),
    )?;
    if let Some(b) = weights.b_in {
        Error::check_len("weights.b_in", "2e+s", width, b.len())?;
    }
    if let Some(b) = weights.b_out {
        Error::check_len("weights.b_out", "d", d, b.len())?;
    }
    for (arg, v) in [
        ("weights.gamma_q", weights.gamma_q),
        ("weights.beta_q", weights.beta_q),
        ("weights.gamma_k", weights.gamma_k),
        ("weights.beta_k", weights.beta_k),
    ] {
        Error::check_len(arg, "s", s, v.len())?;
    }
    Ok(())
}

/// The gated attention unit: `[U|V|Z] = swish(X·W_in + b)`, `Q, K` per-dimension affine maps
/// of `Z`, `A = relu²(c·Q·Kᵀ + B)/l` (masked), `O = (U ⊙ A·V)·W_o + b_o`, fused. Allocates a
/// fresh workspace; keep a [`GauWorkspace`] and call [`Kernels::gau`] to avoid that.
///
/// Shapes, options, storage types (`x` and `out` in any [`Element`]; the weights in f32) and
/// the error bound are in the [module docs](mod@crate::gau).
///
/// # Errors
/// [`Error::Shape`] naming the first argument whose length does not match `shape` (or a zero
/// width, or an odd `qk_dim` with RoPE); [`Error::Param`] for a non-finite scale, a
/// normalizer that is not finite and positive, or a key length beyond `seq_len`.
pub fn gau<E: Element>(
    shape: &GauShape,
    x: &[E],
    weights: &GauWeights,
    opts: &GauOptions,
    out: &mut [E],
) -> Result<(), Error> {
    with_detected(|k| k.gau(shape, x, weights, opts, out, &mut GauWorkspace::new()))
}
