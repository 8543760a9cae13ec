//! The gated attention unit (GAU), in f64, straight from the formulas, with a running error
//! bound: every intermediate carries the largest error an f32 kernel may have made on it,
//! propagated to first order (and with the second-order cross terms where they appear).

use crate::attention::MaskShape;

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

/// Which dimensions of Q and K rotate together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopePairs {
    /// Pairs `(2m, 2m+1)`.
    Interleaved,
    /// Pairs `(m, m + r/2)` of the rotated width `r`.
    HalfSplit,
}

/// Rotary position embedding on Q and K (positions `0..T`): the first `width` dimensions
/// turn pair by pair, pair `m` by `t·base^(−2m/width)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rope {
    /// Which dimensions pair up.
    pub pairs: RopePairs,
    /// The rotated width `r` (even, ≤ s).
    pub width: usize,
    /// `θ`.
    pub base: f32,
}

/// The attention function of the GAU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attention {
    /// `relu(S)²/l`.
    Relu2,
    /// `Φ((S − √½)·√(4π))/l`.
    Laplace,
    /// `softmax_j(S_ij)`.
    Softmax,
    /// `softmax_j(S_ij·ln(max(n_i, min_len))/ln 512)`.
    SoftmaxPlus(usize),
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
    /// Additive score bias in one of the attention's layouts (`PerHead` as `PerBatch`); a −∞
    /// disallows its key.
    pub bias: Option<(&'a [f32], MaskShape)>,
    /// Rotary embedding of Q and K.
    pub rope: Option<Rope>,
    /// The attention function.
    pub attention: Attention,
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

/// `(value, error)` of Laplace's `Φ((S − μ)/σ)/l` for a score `S` with error `ε`. The kernel
/// forms `y = (S − μ)·(1/σ)` with two roundings and `1/σ` rounded once (`ε/σ + 3u·|y|`), which
/// `Φ` turns into at most `φ(y')·err(y)` with `y'` the point of the interval nearest 0; `Φ`
/// itself is within 8 ulp (`16u` relative, or 2⁻¹²⁶), and `1/l` and the product add a rounding
/// each.
fn laplace(sv: f64, serr: f64, l: f64) -> (f64, f64) {
    let (mu, inv_sigma) = (0.5f64.sqrt(), (4.0 * std::f64::consts::PI).sqrt());
    let y = (sv - mu) * inv_sigma;
    let ey = serr * inv_sigma + 3.0 * U * y.abs() + SUB;
    let near = (y.abs() - ey).max(0.0);
    let pdf = (-0.5 * near * near).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let cdf = libm::erfc(-y * std::f64::consts::FRAC_1_SQRT_2) / 2.0;
    let av = cdf / l;
    (
        av,
        (pdf * ey + 16.0 * U * cdf + TINY) / l.abs() + 2.0 * U * av + 2.0 * SUB,
    )
}

/// `(value, error)` of the gate `U ⊙ (A·V)` from its inputs' values and errors.
fn gate((u, ue): (f64, f64), (av, ae): (f64, f64)) -> (f64, f64) {
    let gv = u * av;
    (gv, u.abs() * ae + ue * av.abs() + ue * ae + U * gv.abs() + SUB)
}

/// One row of softmax-plus's weights with their error terms, for [`SoftmaxRow::av`].
struct SoftmaxRow {
    /// `(j, w_j, e_j, softmax rounding of w_j)` for each allowed key that may weigh.
    keys: Vec<(usize, f64, f64, f64)>,
    /// `(j, w_j, ŵ_j)` for each allowed key whose weight stays below `ŵ_j ≤ 2⁻²⁰⁰` whatever
    /// its error (a finite `−10¹²` mask, say).
    dead: Vec<(usize, f64, f64)>,
    /// The relative remainder beyond first order, `ρ`.
    rest: f64,
    /// `e^(2E)`: how far any weight may grow.
    grow: f64,
    /// `T + 2` roundings of the `A·V` sum.
    sum: f64,
}

impl SoftmaxRow {
    /// The weights of a row from its scores `(S_j, error)` (−∞ for a masked key) and its
    /// length factor `f` (already rounded to f32).
    ///
    /// With `z_j = f·S_j` the kernel's weights are `exp(z_j + ε_j)/Σ_k exp(z_k + ε_k)` for
    /// score errors `|ε_j| ≤ e_j = f·err(S_j) + 2u·|z_j|` (the product and the rounded
    /// factor). As `Σ_j w_j = 1` whatever the `ε`, an output `Σ_j w_j·v_j` moves by
    /// `Σ_j (w̃_j − w_j)·(v_j − o)`, `o` the exact output; to first order
    /// `w̃_j − w_j = w_j·(ε_j − Σ_k w_k·ε_k)`, and the second term adds `Σ_j w_j·(v_j − o) = 0`.
    /// So the score errors cost `Σ_j w_j·e_j·|v_j − o|`: a shift common to a row's scores
    /// costs nothing, nor does a key whose value is the row's output, where bounding each
    /// weight alone (`2·max e` relative) costs several times more and lets a wrong scale
    /// through. Beyond first order a weight moves by at most `ρ = (e^E − 1 − E) +
    /// 2·sinh E·(e^E − 1)·e^E` relative, `E = max e_j`. The softmax's own roundings (the
    /// subtraction of the max, `exp` to 2 ulp, the rescales, the `T`-term sums and the
    /// division) do not depend on the scores: `(|z_j − m| + 3T + 16)·u` relative per weight,
    /// costing `|v_j|`, as does the `A·V` sum with `(T + 2)·u`.
    ///
    /// A key whose weight is at most `ŵ_j = exp(z_j + e_j − max_k(z_k − e_k)) ≤ 2⁻²⁰⁰`
    /// whatever the errors (one masked by a finite `−10¹²`, whose error bound is huge) is left
    /// out of `E`: it costs `2ŵ_j·(|v_j| + |o|)` plus what its weight may take from the others.
    fn new(sc: &[(f64, f64)], f: f64, t: usize) -> SoftmaxRow {
        // Masked keys stay −∞ (with f = 0, −∞·f would be NaN).
        let z: Vec<f64> = sc
            .iter()
            .map(|&(sv, _)| if sv == f64::NEG_INFINITY { sv } else { sv * f })
            .collect();
        let m = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let allowed = || (0..z.len()).filter(|&j| z[j] > f64::NEG_INFINITY);
        let d: f64 = allowed().map(|j| (z[j] - m).exp()).sum();
        let err = |j: usize| f * sc[j].1 + 2.0 * U * z[j].abs();
        let low = allowed().map(|j| z[j] - err(j)).fold(f64::NEG_INFINITY, f64::max);
        let (mut keys, mut dead) = (Vec::new(), Vec::new());
        for j in allowed() {
            let w = (z[j] - m).exp() / d;
            let most = (z[j] + err(j) - low).exp();
            if most <= 2f64.powi(-200) {
                dead.push((j, w, most));
            } else {
                let rounding = ((z[j] - m).abs() + 3.0 * t as f64 + 16.0) * U;
                keys.push((j, w, err(j), rounding));
            }
        }
        let big = keys.iter().map(|k| k.2).fold(0.0, f64::max);
        SoftmaxRow {
            keys,
            dead,
            rest: big.exp_m1() - big + 2.0 * big.sinh() * big.exp_m1() * big.exp(),
            grow: (2.0 * big).exp(),
            sum: (t as f64 + 2.0) * U,
        }
    }

    /// `(value, error)` of `Σ_j w_j·v_j` for a column `v` of V with its errors; `(0, 0)` for
    /// a row without keys.
    fn av(&self, v: impl Fn(usize) -> (f64, f64)) -> (f64, f64) {
        let o: f64 = self.keys.iter().map(|&(j, w, ..)| w * v(j).0).sum::<f64>()
            + self.dead.iter().map(|&(j, w, _)| w * v(j).0).sum::<f64>();
        let mass: f64 = self.dead.iter().map(|d| d.2).sum();
        let mut bound = 0.0;
        for &(j, _, most) in &self.dead {
            bound += 2.0 * most * (v(j).0.abs() + o.abs()) + 2.0 * SUB;
        }
        for &(j, w, e, rounding) in &self.keys {
            let (vj, ev) = v(j);
            let grow = self.grow * (1.0 + rounding);
            bound += w * (e + self.rest) * (vj - o).abs()
                + w * mass * (vj.abs() + o.abs())
                + w * (rounding * self.grow + self.sum * grow) * vj.abs()
                + w * grow * ev
                + 2.0 * SUB;
        }
        (o, bound)
    }
}

/// The GAU in f64:
///
/// ```text
/// [U | V | Z] = swish(X·W_in + b_in)
/// Q = Z⊙γ_q + β_q,  K = Z⊙γ_k + β_k          (then RoPE, if asked)
/// S_ij = c·Q_i·K_j + B_ij
/// A_ij = allowed_ij ? relu(S_ij)²/l_i : 0    allowed: j < key_lengths[b] ∧ (¬causal ∨ j ≤ i)
///                                                     ∧ B_ij ≠ −∞;  n_i = Σ_j allowed_ij
///   (Laplace: Φ((S_ij − √½)·√(4π))/l_i in place of relu²;
///    softmax: A_ij = softmax over allowed j of S_ij, softmax-plus of S_ij·ln(max(n_i, min_len))/ln 512)
/// O = (U ⊙ A·V)·W_o + b_o
/// ```
///
/// The bound of each element follows the f32 algorithm of `kernels::gau`: each dot product of
/// length `n` errs by `(n + 2)·u` of its magnitude plus what its inputs carry; swish by 6u
/// relative (3 ulp) plus its slope times its input's error; `relu²/l` by 3u relative plus
/// `(2·relu(S) + ε)·ε/l` for a score error ε; Laplace as `laplace` says; RoPE's rotation by 4u of its magnitude plus
/// the rounding of its sines and cosines; softmax-plus's `A·V` by its score errors weighted
/// by how far each key's value is from the row's output (see `SoftmaxRow`), its own roundings
/// and the errors of V. Products and sums of subnormals add 2⁻¹⁵⁰ each.
///
/// The bound is tight enough to catch a relative error of 10⁻³ in the score scale or the
/// normalizer, or a dropped bias, whenever the output depends on them that much: `relu²/l`
/// scales with `c²/l`, so a wrong `c` or `l` moves every output coherently; a softmax moves
/// with its temperature by `δ·Cov_w(z, v)`, which nearly uniform attention (scores spread
/// well below 1) makes smaller than any rounding bound.
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
                    let r = rope.width;
                    for pair in 0..r / 2 {
                        let (a, bb) = match rope.pairs {
                            RopePairs::Interleaved => (2 * pair, 2 * pair + 1),
                            RopePairs::HalfSplit => (pair, pair + r / 2),
                        };
                        let theta = i as f64 * (rope.base as f64).powf(-2.0 * pair as f64 / r as f64);
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
            let bias = |j: usize| {
                p.bias.map_or(0.0, |(v, shape)| {
                    v[match shape {
                        MaskShape::Shared => i * t + j,
                        MaskShape::PerBatch | MaskShape::PerHead => (b * t + i) * t + j,
                        MaskShape::KeyPadding => b * t + j,
                    }]
                })
            };
            let allowed = |j: usize| j < valid && (!p.causal || j <= i) && bias(j) != f32::NEG_INFINITY;
            let count = (0..t).filter(|&j| allowed(j)).count();
            let l = match p.normalizer {
                Normalizer::SeqLen => t as f64,
                Normalizer::ValidKeys => count.max(1) as f64,
                Normalizer::Value(v) => v as f64,
            };
            // The scores of the allowed keys, with their error bounds.
            let mut sc = vec![(f64::NEG_INFINITY, 0.0); t];
            for (j, sj) in sc.iter_mut().enumerate() {
                if !allowed(j) {
                    continue;
                }
                let (dotv, derr) = dot(s, |kk| q[i * s + kk], |kk| k[j * s + kk], 0.0);
                let sv = c * dotv + bias(j) as f64;
                *sj = (
                    sv,
                    c.abs() * derr + 2.0 * U * (c * dotv).abs() + U * sv.abs() + 2.0 * SUB,
                );
            }
            match p.attention {
                Attention::Relu2 | Attention::Laplace => {
                    let mut a = vec![(0.0, 0.0); t];
                    for (aj, &(sv, serr)) in a.iter_mut().zip(&sc) {
                        if sv == f64::NEG_INFINITY {
                            continue;
                        }
                        *aj = if p.attention == Attention::Relu2 {
                            let r = sv.max(0.0);
                            let av = r * r / l;
                            (av, (2.0 * r + serr) * serr / l.abs() + 3.0 * U * av + 2.0 * SUB)
                        } else {
                            laplace(sv, serr, l)
                        };
                    }
                    for col in 0..e {
                        let (av, aerr) = dot(t, |j| a[j], |j| h[j * w + e + col], 0.0);
                        g[i * e + col] = gate(h[i * w + col], (av, aerr));
                    }
                }
                Attention::Softmax | Attention::SoftmaxPlus(_) => {
                    let f = match p.attention {
                        Attention::SoftmaxPlus(min_len) => {
                            let f = count.max(min_len) as f64;
                            (f.ln() / 512f64.ln()) as f32 as f64
                        }
                        _ => 1.0,
                    };
                    let row = SoftmaxRow::new(&sc, f, t);
                    for col in 0..e {
                        g[i * e + col] = gate(h[i * w + col], row.av(|j| h[j * w + e + col]));
                    }
                }
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
