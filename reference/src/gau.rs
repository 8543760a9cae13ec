//! The gated attention unit (GAU), in f64, straight from the formulas, with a running error
//! bound: every intermediate carries the largest error an f32 kernel may have made on it,
//! propagated to first order (and with the second-order cross terms where they appear).

/// Sizes of a GAU call: `X[B,T,d]`, `W_in[d, 2e+s]`, `W_o[e, d]`, `O[B,T,d]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GauShape {
    /// `B`.
    pub batch: usize,
    /// `T`, the sequence length.
    pub seq_len: usize,
    /// `d`, the model width.
    pub dim: usize,
    /// `e`, the expanded width of U and V.
    pub expand: usize,
    /// `s`, the width of the shared Q/K projection.
    pub qk_dim: usize,
}

/// The score scale `c`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ScoreScale {
    /// `1/√s`.
    InvSqrtQkDim,
    /// `1/T`.
    InvSeqLen,
    /// A given constant.
    Value(f32),
}

/// The normalizer `l_i`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Normalizer {
    /// `T`.
    SeqLen,
    /// The number of keys row `i` may see (at least 1).
    ValidKeys,
    /// A given constant.
    Value(f32),
}

/// Rotary position embedding on Q and K (positions `0..T`, base 10000).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rope {
    /// Pairs `(2i, 2i+1)`.
    Interleaved,
    /// Pairs `(i, i + s/2)`.
    HalfSplit,
}

/// The weights and options of a GAU call.
#[derive(Debug, Clone, Copy)]
pub struct GauParams<'a> {
    /// `W_in[d, 2e+s]`, row-major.
    pub w_in: &'a [f32],
    /// Bias of the input projection, `[2e+s]`.
    pub b_in: Option<&'a [f32]>,
    /// `γ_q, β_q, γ_k, β_k`, each `[s]`.
    pub gamma_q: &'a [f32],
    /// See `gamma_q`.
    pub beta_q: &'a [f32],
    /// See `gamma_q`.
    pub gamma_k: &'a [f32],
    /// See `gamma_q`.
    pub beta_k: &'a [f32],
    /// `W_o[e, d]`, row-major.
    pub w_out: &'a [f32],
    /// Bias of the output projection, `[d]`.
    pub b_out: Option<&'a [f32]>,
    /// `c`.
    pub scale: ScoreScale,
    /// `l`.
    pub normalizer: Normalizer,
    /// Valid keys per batch.
    pub key_lengths: Option<&'a [usize]>,
    /// Key `j` is allowed for query `i` only if `j ≤ i`.
    pub causal: bool,
    /// Additive score bias `[T, T]`.
    pub bias: Option<&'a [f32]>,
    /// Rotary embedding of Q and K.
    pub rope: Option<Rope>,
    /// GAU-α's softmax-plus with this `min_len` instead of `relu²/l`.
    pub softmax_plus: Option<usize>,
}

/// The output and its error bound, both `[B, T, d]`.
#[derive(Debug, Clone)]
pub struct GauResult {
    /// `O`, exact.
    pub out: Vec<f64>,
    /// The largest error an f32 kernel following the documented algorithm may make on each
    /// element of `O` (first order, see [`gau`]).
    pub bound: Vec<f64>,
}

const U: f64 = 1.0 / (1u64 << 24) as f64;
const TINY: f64 = f32::MIN_POSITIVE as f64;
/// Absolute rounding error of an f32 operation with a subnormal result.
const SUB: f64 = TINY * U;

/// `swish(x) = x·σ(x)`.
fn swish(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// `max |swish'(x)|` over all x: `swish' = σ(x)·(1 + x·(1 − σ(x)))` peaks at 1.0998 near
/// x = 2.4, so an input error ε moves swish by at most 1.1·ε.
const SWISH_SLOPE: f64 = 1.1;

/// `(value, error bound)` of a dot product `Σ a_k·b_k (+ c)` computed in f32 with FMAs, given
/// the inputs' own error bounds: `Σ(|a|·eb + ea·|b| + ea·eb) + (n + 2)·u·(Σ|a·b| + |c|)`.
fn dot(n: usize, a: impl Fn(usize) -> (f64, f64), b: impl Fn(usize) -> (f64, f64), c: f64) -> (f64, f64) {
    let (mut v, mut mag, mut err) = (c, c.abs(), 0.0);
    for k in 0..n {
        let ((x, ex), (y, ey)) = (a(k), b(k));
        v += x * y;
        mag += (x * y).abs();
        err += x.abs() * ey + ex * y.abs() + ex * ey;
    }
    (v, err + (n as f64 + 2.0) * U * mag + (n as f64 + 2.0) * SUB)
}

/// The GAU in f64:
///
/// ```text
/// [U | V | Z] = swish(X·W_in + b_in)
/// Q = Z⊙γ_q + β_q,  K = Z⊙γ_k + β_k          (then RoPE, if asked)
/// S_ij = c·Q_i·K_j + B_ij
/// A_ij = allowed_ij ? relu(S_ij)²/l_i : 0    allowed: j < key_lengths[b] ∧ (¬causal ∨ j ≤ i)
///   (softmax-plus: A_ij = softmax over allowed j of S_ij·ln(max(n_i, min_len))/ln 512)
/// O = (U ⊙ A·V)·W_o + b_o
/// ```
///
/// The bound of each element follows the f32 algorithm of `kernels::gau`: each dot product of
/// length `n` errs by `(n + 2)·u` of its magnitude plus what its inputs carry; swish by 6u
/// relative (3 ulp) plus its slope times its input's error; `relu²/l` by 3u relative plus
/// `(2·relu(S) + ε)·ε/l` for a score error ε; RoPE's rotation by 4u of its magnitude plus
/// the rounding of its sines and cosines. Products and sums of subnormals add 2⁻¹⁵⁰ each.
///
/// # Panics
/// If a slice does not have the length its shape gives.
pub fn gau(shape: &GauShape, x: &[f32], p: &GauParams) -> GauResult {
    let GauShape {
        batch,
        seq_len: t,
        dim: d,
        expand: e,
        qk_dim: s,
    } = *shape;
    let w = 2 * e + s;
    assert_eq!(x.len(), batch * t * d, "x");
    assert_eq!(p.w_in.len(), d * w, "w_in");
    assert_eq!(p.w_out.len(), e * d, "w_out");
    let c = match p.scale {
        ScoreScale::InvSqrtQkDim => 1.0 / (s as f64).sqrt(),
        ScoreScale::InvSeqLen => 1.0 / t as f64,
        ScoreScale::Value(v) => v as f64,
    };
    // The kernel rounds `c` (and `1/l`) to f32: one more relative u on each.
    let mut res = GauResult {
        out: vec![0.0; batch * t * d],
        bound: vec![0.0; batch * t * d],
    };
    for b in 0..batch {
        let xb = &x[b * t * d..][..t * d];
        // Projection and swish: (value, error) per [t][w].
        let mut h = vec![(0.0, 0.0); t * w];
        for i in 0..t {
            for j in 0..w {
                let bias = p.b_in.map_or(0.0, |bb| bb[j] as f64);
                let (v, err) = dot(
                    d,
                    |k| (xb[i * d + k] as f64, 0.0),
                    |k| (p.w_in[k * w + j] as f64, 0.0),
                    bias,
                );
                let y = swish(v);
                // The kernel's swish is within 3 ulp (6u relative), or 2⁻¹²⁶ absolute.
                h[i * w + j] = (y, SWISH_SLOPE * err + 6.0 * U * y.abs() + TINY);
            }
        }
        // Q and K, then RoPE.
        let affine = |g: &[f32], be: &[f32], i: usize, k: usize| {
            let (z, ez) = h[i * w + 2 * e + k];
            let (g, be) = (g[k] as f64, be[k] as f64);
            let v = z * g + be;
            (v, g.abs() * ez + U * v.abs() + SUB)
        };
        let mut q: Vec<(f64, f64)> = (0..t * s).map(|n| affine(p.gamma_q, p.beta_q, n / s, n % s)).collect();
        let mut k: Vec<(f64, f64)> = (0..t * s).map(|n| affine(p.gamma_k, p.beta_k, n / s, n % s)).collect();
        if let Some(rope) = p.rope {
            for m in [&mut q, &mut k] {
                for i in 0..t {
                    for pair in 0..s / 2 {
                        let (a, bb) = match rope {
                            Rope::Interleaved => (2 * pair, 2 * pair + 1),
                            Rope::HalfSplit => (pair, pair + s / 2),
                        };
                        let theta = i as f64 * 10000f64.powf(-2.0 * pair as f64 / s as f64);
                        let (sin, cos) = theta.sin_cos();
                        let ((x0, e0), (x1, e1)) = (m[i * s + a], m[i * s + bb]);
                        // The kernel's sines and cosines are f32 (one rounding each).
                        let mag = x0.abs() + x1.abs();
                        let err = e0.max(e1) * (cos.abs() + sin.abs()) + 4.0 * U * mag + 2.0 * SUB;
                        m[i * s + a] = (x0 * cos - x1 * sin, err);
                        m[i * s + bb] = (x0 * sin + x1 * cos, err);
                    }
                }
            }
        }
        let valid = p.key_lengths.map_or(t, |l| l[b].min(t));
        // A·V, gated by U.
        let mut g = vec![(0.0, 0.0); t * e];
        for i in 0..t {
            let allowed = |j: usize| j < valid && (!p.causal || j <= i);
            let count = (0..t).filter(|&j| allowed(j)).count();
            let l = match p.normalizer {
                Normalizer::SeqLen => t as f64,
                Normalizer::ValidKeys => count.max(1) as f64,
                Normalizer::Value(v) => v as f64,
            };
            let mut a = vec![(0.0, 0.0); t];
            // The scores of the allowed keys, with their error bounds.
            let mut sc = vec![(f64::NEG_INFINITY, 0.0); t];
            for (j, sj) in sc.iter_mut().enumerate() {
                if !allowed(j) {
                    continue;
                }
                let bias = p.bias.map_or(0.0, |bb| bb[i * t + j] as f64);
                let (dotv, derr) = dot(s, |kk| q[i * s + kk], |kk| k[j * s + kk], 0.0);
                let sv = c * dotv + bias;
                *sj = (
                    sv,
                    c.abs() * derr + 2.0 * U * (c * dotv).abs() + U * sv.abs() + 2.0 * SUB,
                );
            }
            match p.softmax_plus {
                None => {
                    for (aj, &(sv, serr)) in a.iter_mut().zip(&sc) {
                        if sv == f64::NEG_INFINITY {
                            continue;
                        }
                        let r = sv.max(0.0);
                        let av = r * r / l;
                        *aj = (av, (2.0 * r + serr) * serr / l.abs() + 3.0 * U * av + 2.0 * SUB);
                    }
                }
                Some(min_len) => {
                    // z = S·f with f = ln(max(n, min_len))/ln 512 rounded once; a perturbation ε of
                    // the z moves each weight by at most a factor exp(±2·max ε); the softmax
                    // itself adds the attention kernel's rounding (exp 1 ulp, T-term sums).
                    let f = count.max(min_len) as f64;
                    let f = (f.ln() / 512f64.ln()) as f32 as f64;
                    // Masked keys stay −∞ (with f = 0, −∞·f would be NaN).
                    let z: Vec<f64> = sc
                        .iter()
                        .map(|&(sv, _)| if sv == f64::NEG_INFINITY { sv } else { sv * f })
                        .collect();
                    let m = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    if m > f64::NEG_INFINITY {
                        let e = sc
                            .iter()
                            .zip(&z)
                            .filter(|(_, zj)| zj.is_finite())
                            .map(|(&(_, serr), zj)| f * serr + 2.0 * U * zj.abs())
                            .fold(0.0, f64::max);
                        let d: f64 = z.iter().map(|&zj| (zj - m).exp()).sum();
                        for (aj, &zj) in a.iter_mut().zip(&z) {
                            if zj == f64::NEG_INFINITY {
                                continue;
                            }
                            let w = (zj - m).exp() / d;
                            let rel =
                                (1.0 + (2.0 * e).exp_m1()) * (1.0 + ((zj - m).abs() + 3.0 * t as f64 + 16.0) * U) - 1.0;
                            *aj = (w, w * rel + 2.0 * SUB);
                        }
                    }
                }
            }
            for col in 0..e {
                let (av, aerr) = dot(t, |j| a[j], |j| h[j * w + e + col], 0.0);
                let (uu, uerr) = h[i * w + col];
                let gv = uu * av;
                g[i * e + col] = (gv, uu.abs() * aerr + uerr * av.abs() + uerr * aerr + U * gv.abs() + SUB);
            }
        }
        // Output projection.
        for i in 0..t {
            for col in 0..d {
                let bias = p.b_out.map_or(0.0, |bb| bb[col] as f64);
                let (v, err) = dot(e, |kk| g[i * e + kk], |kk| (p.w_out[kk * d + col] as f64, 0.0), bias);
                res.out[(b * t + i) * d + col] = v;
                res.bound[(b * t + i) * d + col] = err;
            }
        }
    }
    res
}
