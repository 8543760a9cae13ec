//! The unfused attention a user would compose without this crate's fused kernel: per head, a
//! GEMM `Q·Kᵀ` into an `Lq × Lk` scores matrix, a row softmax over it, and a GEMM `P·V`.
//!
//! The softmax ([`RowSoftmax`]) is either [`Kernels::softmax`] of a chosen ISA with its scale
//! and mask options, the strongest baseline: it differs from the fused kernel only in the
//! materialized scores; or the plain scalar Rust softmax of [`crate::plain`] (libm's
//! `f32::exp`), the peer "gemm crate + scalar softmax" of the report's attention target. The
//! GEMMs come from one of two crates ([`Gemm`]), single-threaded. The gemm crate runs its
//! kernels for the composition's ISA: its AVX2 + FMA kernels on an AVX2 row (even on a CPU
//! with AVX-512), its best otherwise (AVX-512 where the CPU has it, with its `x86-v4`
//! feature); matrixmultiply picks its best kernels at run time (it has no AVX-512 ones).
//!
//! - Plain: `S = Q·Kᵀ` (GEMM), `softmax_inplace(S, scale = 1/√Dk)`, `O = S·V` (GEMM).
//! - With previous scores `P` (RealFormer) or a scores output: the scores buffer (the output
//!   `S`, or scratch) is first filled with `P`, the GEMM accumulates `scale·Q·Kᵀ` into it
//!   (`baddbmm`), the softmax goes out of place into scratch, and `O = W·V`.
//! - Key padding: one mask row of length `Lk` (−∞ past the valid length) for every row.
//! - Causal (bottom-right aligned, as the kernel): a `[Lq, Lk]` mask, one softmax call per row
//!   with its mask row. The GEMMs compute every score, masked or not (as an unfused
//!   composition does).
//! - The plain softmax takes no options: the first GEMM applies the scale (as with `P`), the
//!   mask is added to the scores (in the weights' buffer when `S` is kept), then the rows are
//!   normalized in place.

use kernels::{AttentionOptions, AttentionShape, Isa, Kernels, MaskedRows, SoftmaxOptions};

use crate::plain;

/// The row softmax of a composition.
#[derive(Debug, Clone, Copy)]
pub enum RowSoftmax {
    /// [`Kernels::softmax`] of an ISA, with its scale and mask options.
    Kernels(Kernels),
    /// [`plain::softmax_inplace`]: idiomatic scalar Rust with libm's `f32::exp`.
    Plain,
}

impl From<Kernels> for RowSoftmax {
    fn from(k: Kernels) -> RowSoftmax {
        RowSoftmax::Kernels(k)
    }
}

impl RowSoftmax {
    /// `softmax(ISA)` or `softmax(plain)`, for names and messages.
    pub fn name(self) -> String {
        match self {
            RowSoftmax::Kernels(k) => format!("softmax({})", k.isa()),
            RowSoftmax::Plain => "softmax(plain)".to_string(),
        }
    }
}

/// Which GEMM crate a composition uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gemm {
    /// The `gemm` crate 0.19 (`gemm::gemm`, `Parallelism::None`).
    GemmCrate,
    /// The `matrixmultiply` crate 0.3 (`sgemm`).
    MatrixMultiply,
}

impl Gemm {
    /// Both crates.
    pub const ALL: [Gemm; 2] = [Gemm::GemmCrate, Gemm::MatrixMultiply];

    /// The crate's name.
    pub fn name(self) -> &'static str {
        match self {
            Gemm::GemmCrate => "gemm",
            Gemm::MatrixMultiply => "matrixmultiply",
        }
    }

    /// `c = (c if accumulate, else 0) + alpha·a·b` for an `m × kk` matrix `a` and a `kk × n`
    /// matrix `b`, given by their (row, column) strides, into the row-major `m × n` matrix `c`,
    /// on the kernels of `isa` (see the [module docs](self)).
    ///
    /// # Panics
    /// If a matrix does not fit in its slice.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul(
        self,
        isa: Isa,
        (m, n, kk): (usize, usize, usize),
        alpha: f32,
        a: &[f32],
        (a_rs, a_cs): (usize, usize),
        b: &[f32],
        (b_rs, b_cs): (usize, usize),
        c: &mut [f32],
        accumulate: bool,
    ) {
        if m == 0 || n == 0 {
            return;
        }
        let last = |rows: usize, cols: usize, rs: usize, cs: usize| (rows - 1) * rs + (cols - 1) * cs;
        assert!(c.len() >= m * n, "matmul: c holds {} floats, needs {}", c.len(), m * n);
        if kk == 0 {
            if !accumulate {
                c[..m * n].fill(0.0);
            }
            return;
        }
        assert!(last(m, kk, a_rs, a_cs) < a.len(), "matmul: a is too short");
        assert!(last(kk, n, b_rs, b_cs) < b.len(), "matmul: b is too short");
        let s = |v: usize| v as isize;
        // Only the gemm crate on x86-64 has kernels to choose by ISA.
        #[cfg(not(target_arch = "x86_64"))]
        let _ = isa;
        match self {
            // SAFETY: as below.
            #[cfg(target_arch = "x86_64")]
            Gemm::GemmCrate if isa == Isa::Avx2 => unsafe {
                gemm_avx2::gemm(
                    m,
                    n,
                    kk,
                    c.as_mut_ptr(),
                    1,
                    s(n),
                    accumulate,
                    a.as_ptr(),
                    s(a_cs),
                    s(a_rs),
                    b.as_ptr(),
                    s(b_cs),
                    s(b_rs),
                    1.0,
                    alpha,
                    false,
                    false,
                    false,
                    gemm_avx2::Parallelism::None,
                )
            },
            // SAFETY: every element the strides address lies inside its slice (asserted
            // above); `c` is an exclusive borrow distinct from `a` and `b`.
            Gemm::GemmCrate => unsafe {
                gemm::gemm(
                    m,
                    n,
                    kk,
                    c.as_mut_ptr(),
                    1,
                    s(n),
                    accumulate,
                    a.as_ptr(),
                    s(a_cs),
                    s(a_rs),
                    b.as_ptr(),
                    s(b_cs),
                    s(b_rs),
                    1.0,
                    alpha,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                )
            },
            // SAFETY: as above; with beta = 0 matrixmultiply does not read `c`.
            Gemm::MatrixMultiply => unsafe {
                matrixmultiply::sgemm(
                    m,
                    kk,
                    n,
                    alpha,
                    a.as_ptr(),
                    s(a_rs),
                    s(a_cs),
                    b.as_ptr(),
                    s(b_rs),
                    s(b_cs),
                    if accumulate { 1.0 } else { 0.0 },
                    c.as_mut_ptr(),
                    s(n),
                    1,
                )
            },
        }
    }
}

/// An unfused attention for one shape and set of options, with its scratch and masks made
/// once (outside the timed calls).
pub struct Composition {
    gemm: Gemm,
    shape: AttentionShape,
    scale: f32,
    causal: bool,
    /// Per batch: the causal mask `[Lq, Lk]` (with the padding), or the padding row `[Lk]`;
    /// empty when neither applies.
    masks: Vec<Vec<f32>>,
    /// One head's scores or weights, `Lq × Lk`.
    scratch: Vec<f32>,
}

impl Composition {
    /// The composition of `shape` with these options, or a message naming the option it does
    /// not support (an additive mask, the running mean, carried masked scores, the NaN policy).
    pub fn new(gemm: Gemm, shape: &AttentionShape, opts: &AttentionOptions) -> Result<Composition, String> {
        if opts.mask.is_some()
            || opts.running_mean_layer.is_some()
            || opts.carried != Default::default()
            || opts.masked_rows != MaskedRows::Zero
        {
            return Err("the composition supports scale, prev_scores, key_lengths and causal only".to_string());
        }
        let (lq, lk) = (shape.q_len, shape.kv_len);
        let valid = |b: usize| opts.key_lengths.map_or(lk, |l| l[b].min(lk));
        let masks = (0..shape.batch)
            .map(|b| {
                let pad = |j: usize| if j < valid(b) { 0.0 } else { f32::NEG_INFINITY };
                if opts.causal {
                    let mut m = vec![0.0f32; lq * lk];
                    for (i, row) in m.chunks_exact_mut(lk.max(1)).enumerate() {
                        for (j, v) in row.iter_mut().enumerate() {
                            // Query i sees keys j ≤ i + Lk − Lq.
                            *v = if j + lq > i + lk { f32::NEG_INFINITY } else { pad(j) };
                        }
                    }
                    m
                } else if opts.key_lengths.is_some() {
                    (0..lk).map(pad).collect()
                } else {
                    Vec::new()
                }
            })
            .collect();
        Ok(Composition {
            gemm,
            shape: *shape,
            scale: opts.scale.unwrap_or(1.0 / (shape.head_dim as f32).sqrt()),
            causal: opts.causal,
            masks,
            scratch: vec![0.0; lq * lk],
        })
    }

    /// The GEMM crate it uses.
    pub fn gemm(&self) -> Gemm {
        self.gemm
    }

    /// Runs the composition, its GEMMs on the kernels of `isa` and its rows through `softmax`:
    /// `out[B,H,Lq,Dv]`, and the scores `S = scale·Q·Kᵀ + P` into `scores[B,H,Lq,Lk]` when
    /// given.
    ///
    /// # Panics
    /// If a slice does not have the length the shape gives.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &mut self,
        isa: Isa,
        softmax: impl Into<RowSoftmax>,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        prev_scores: Option<&[f32]>,
        out: &mut [f32],
        mut scores: Option<&mut [f32]>,
    ) -> Result<(), kernels::Error> {
        let AttentionShape {
            batch,
            heads,
            kv_heads,
            q_len: lq,
            kv_len: lk,
            head_dim: dk,
            value_dim: dv,
        } = self.shape;
        assert_eq!(q.len(), batch * heads * lq * dk, "q");
        assert_eq!(k.len(), batch * kv_heads * lk * dk, "k");
        assert_eq!(v.len(), batch * kv_heads * lk * dv, "v");
        assert_eq!(out.len(), batch * heads * lq * dv, "out");
        let n_scores = batch * heads * lq * lk;
        if let Some(p) = prev_scores {
            assert_eq!(p.len(), n_scores, "prev_scores");
        }
        if let Some(s) = &scores {
            assert_eq!(s.len(), n_scores, "scores");
        }
        if lk == 0 {
            // Every row is fully masked: O = 0 (MaskedRows::Zero).
            out.fill(0.0);
            return Ok(());
        }
        let group = heads / kv_heads;
        let gemm = self.gemm;
        let softmax = softmax.into();
        for b in 0..batch {
            let mask = &self.masks[b];
            for h in 0..heads {
                let (bh, bhk) = (b * heads + h, b * kv_heads + h / group);
                let q_h = &q[bh * lq * dk..][..lq * dk];
                let k_h = &k[bhk * lk * dk..][..lk * dk];
                let v_h = &v[bhk * lk * dv..][..lk * dv];
                let o_h = &mut out[bh * lq * dv..][..lq * dv];
                let prev_h = prev_scores.map(|p| &p[bh * lq * lk..][..lq * lk]);
                let scores_h = scores.as_deref_mut().map(|s| &mut s[bh * lq * lk..][..lq * lk]);
                let raw = prev_h.is_some() || scores_h.is_some() || matches!(softmax, RowSoftmax::Plain);
                // Where the scores are computed: the scores output if asked for, else scratch.
                let (s, w): (&mut [f32], Option<&mut [f32]>) = match scores_h {
                    Some(s) => (s, Some(&mut self.scratch)),
                    None => (&mut self.scratch, None),
                };
                if let Some(p) = prev_h {
                    s.copy_from_slice(p);
                }
                // With P, a scores output or the plain softmax (which takes no scale),
                // S = scale·Q·Kᵀ + P is computed by the GEMM; otherwise the softmax applies
                // the scale.
                let alpha = if raw { self.scale } else { 1.0 };
                gemm.matmul(
                    isa,
                    (lq, lk, dk),
                    alpha,
                    q_h,
                    (dk, 1),
                    k_h,
                    (1, dk),
                    s,
                    prev_h.is_some(),
                );
                let weights: &[f32] = match softmax {
                    RowSoftmax::Kernels(kernels) => {
                        let scale = if raw { 1.0 } else { self.scale };
                        kernel_softmax(kernels, scale, self.causal, mask, lk, s, w)?
                    }
                    RowSoftmax::Plain => {
                        let w = match w {
                            Some(w) => {
                                w.copy_from_slice(s);
                                w
                            }
                            None => s,
                        };
                        if !mask.is_empty() {
                            // `[Lq, Lk]` when causal, one row `[Lk]` for every row otherwise.
                            for (i, row) in w.chunks_exact_mut(lk).enumerate() {
                                let m = if self.causal { &mask[i * lk..][..lk] } else { &mask[..] };
                                for (x, &m) in row.iter_mut().zip(m) {
                                    *x += m;
                                }
                            }
                        }
                        plain::softmax_inplace(w, lk);
                        w
                    }
                };
                gemm.matmul(isa, (lq, dv, lk), 1.0, weights, (lk, 1), v_h, (dv, 1), o_h, false);
            }
        }
        Ok(())
    }
}

/// [`Kernels::softmax`] with `scale` and the head's mask (`[Lq, Lk]` when `causal`, else one
/// row `[Lk]` or none) over one head's scores `s`, in place or into `w`; the weights.
fn kernel_softmax<'a>(
    kernels: Kernels,
    scale: f32,
    causal: bool,
    mask: &[f32],
    lk: usize,
    s: &'a mut [f32],
    w: Option<&'a mut [f32]>,
) -> Result<&'a [f32], kernels::Error> {
    let opts = |mask| SoftmaxOptions {
        scale,
        mask,
        masked_rows: MaskedRows::Zero,
    };
    Ok(match w {
        Some(w) => {
            if causal {
                for (i, (s, w)) in s.chunks_exact(lk).zip(w.chunks_exact_mut(lk)).enumerate() {
                    kernels.softmax(s, w, lk, &opts(Some(&mask[i * lk..][..lk])))?;
                }
            } else {
                kernels.softmax(s, w, lk, &opts((!mask.is_empty()).then_some(mask)))?;
            }
            w
        }
        None => {
            if causal {
                for (i, s) in s.chunks_exact_mut(lk).enumerate() {
                    kernels.softmax_inplace(s, lk, &opts(Some(&mask[i * lk..][..lk])))?;
                }
            } else {
                kernels.softmax_inplace(s, lk, &opts((!mask.is_empty()).then_some(mask)))?;
            }
            s
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data;

    fn max_diff(a: &[f32], b: &[f64]) -> f64 {
        a.iter().zip(b).map(|(&a, &b)| (a as f64 - b).abs()).fold(0.0, f64::max)
    }

    #[test]
    fn compositions_match_the_oracle() {
        let shape = AttentionShape {
            batch: 2,
            heads: 4,
            kv_heads: 2,
            q_len: 13,
            kv_len: 21,
            head_dim: 7,
            value_dim: 5,
        };
        let rshape = reference::AttentionShape {
            batch: 2,
            heads: 4,
            kv_heads: 2,
            q_len: 13,
            kv_len: 21,
            head_dim: 7,
            value_dim: 5,
        };
        let q = data::uniform(2 * 4 * 13 * 7, -1.0, 1.0, 1);
        let k = data::uniform(2 * 2 * 21 * 7, -1.0, 1.0, 2);
        let v = data::uniform(2 * 2 * 21 * 5, -1.0, 1.0, 3);
        let p = data::uniform(2 * 4 * 13 * 21, -2.0, 2.0, 4);
        let lens = [21, 9];
        for gemm in Gemm::ALL {
            // Each ISA's GEMMs, with that ISA's softmax and with the plain one.
            let runs = kernels::available_isas().into_iter().flat_map(|isa| {
                let k = Kernels::for_isa(isa).expect("available");
                [(isa, RowSoftmax::Kernels(k)), (isa, RowSoftmax::Plain)]
            });
            for (isa, softmax) in runs {
                for (prev, causal, padded) in [
                    (false, false, false),
                    (true, false, false),
                    (false, true, false),
                    (false, false, true),
                    (true, true, true),
                ] {
                    let mut opts = AttentionOptions::default().causal(causal);
                    opts.prev_scores = prev.then_some(&p[..]);
                    opts.key_lengths = padded.then_some(&lens[..]);
                    let ropts = reference::AttentionOptions {
                        prev_scores: opts.prev_scores,
                        causal,
                        key_lengths: opts.key_lengths,
                        ..reference::AttentionOptions::default()
                    };
                    let exact = reference::attention(&rshape, &q, &k, &v, &ropts);
                    let mut c = Composition::new(gemm, &shape, &opts).expect("supported");
                    let mut out = vec![0.0; 2 * 4 * 13 * 5];
                    let mut s = vec![0.0; p.len()];
                    let what = format!(
                        "{}({isa}) {} prev={prev} causal={causal} padded={padded}",
                        gemm.name(),
                        softmax.name()
                    );
                    c.run(
                        isa,
                        softmax,
                        &q,
                        &k,
                        &v,
                        opts.prev_scores,
                        &mut out,
                        prev.then_some(&mut s[..]),
                    )
                    .expect("valid");
                    assert!(max_diff(&out, &exact.out) < 1e-5, "{what}: out");
                    if prev {
                        assert!(max_diff(&s, &exact.scores) < 1e-5, "{what}: scores");
                    }
                }
            }
        }
    }
}
