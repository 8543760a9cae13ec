//! The gated attention unit on every ISA against the f64 oracle and its running error bound.

mod common;

use common::{all_kernels, same, to_half};
use kernels::half::{bf16, f16};
use kernels::{
    AdditiveMask, Element, GauAttention, GauOptions, GauShape, GauWeights, GauWorkspace, Kernels, MaskShape,
    Normalizer, Rope, RopePairs, ScoreScale,
};
use proptest::prelude::*;

/// One call with owned inputs.
#[derive(Debug, Clone)]
struct Case {
    shape: GauShape,
    x: Vec<f32>,
    w_in: Vec<f32>,
    b_in: Option<Vec<f32>>,
    gq: Vec<f32>,
    bq: Vec<f32>,
    gk: Vec<f32>,
    bk: Vec<f32>,
    w_out: Vec<f32>,
    b_out: Option<Vec<f32>>,
    scale: ScoreScale,
    normalizer: Normalizer,
    key_lengths: Option<Vec<usize>>,
    causal: bool,
    bias: Option<(Vec<f32>, MaskShape)>,
    rope: Option<Rope>,
    attention: GauAttention,
}

fn rng(seed: u64) -> impl FnMut() -> f32 {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

impl Case {
    /// Random inputs of unit scale, weights scaled by 1/√fan-in as in a trained layer.
    fn new(shape: GauShape, seed: u64) -> Case {
        let GauShape {
            batch,
            seq_len: t,
            dim: d,
            expand: e,
            qk_dim: s,
        } = shape;
        let w = 2 * e + s;
        let mut r = rng(seed);
        let mut v = |n: usize, scale: f32| (0..n).map(|_| r() * scale).collect::<Vec<f32>>();
        Case {
            shape,
            x: v(batch * t * d, 2.0),
            w_in: v(d * w, 2.0 / (d as f32).sqrt()),
            b_in: Some(v(w, 0.5)),
            gq: v(s, 1.5),
            bq: v(s, 0.5),
            gk: v(s, 1.5),
            bk: v(s, 0.5),
            w_out: v(e * d, 2.0 / (e as f32).sqrt()),
            b_out: Some(v(d, 0.5)),
            scale: ScoreScale::default(),
            normalizer: Normalizer::default(),
            key_lengths: None,
            causal: false,
            bias: None,
            rope: None,
            attention: GauAttention::Relu2,
        }
    }

    fn weights(&self) -> GauWeights<'_> {
        GauWeights {
            w_in: &self.w_in,
            b_in: self.b_in.as_deref(),
            gamma_q: &self.gq,
            beta_q: &self.bq,
            gamma_k: &self.gk,
            beta_k: &self.bk,
            w_out: &self.w_out,
            b_out: self.b_out.as_deref(),
        }
    }

    fn opts(&self) -> GauOptions<'_> {
        GauOptions {
            scale: self.scale,
            normalizer: self.normalizer,
            key_lengths: self.key_lengths.as_deref(),
            causal: self.causal,
            bias: self
                .bias
                .as_ref()
                .map(|(values, shape)| AdditiveMask { values, shape: *shape }),
            rope: self.rope,
            attention: self.attention,
        }
    }

    fn run(&self, k: &Kernels, ws: &mut GauWorkspace) -> Vec<f32> {
        let s = self.shape;
        let mut out = vec![f32::NAN; s.batch * s.seq_len * s.dim];
        k.gau(&s, &self.x, &self.weights(), &self.opts(), &mut out, ws).unwrap();
        out
    }

    fn reference(&self) -> (reference::GauShape, reference::GauParams<'_>) {
        let s = self.shape;
        let shape = reference::GauShape {
            batch: s.batch,
            seq_len: s.seq_len,
            dim: s.dim,
            expand: s.expand,
            qk_dim: s.qk_dim,
        };
        let params = reference::GauParams {
            w_in: &self.w_in,
            b_in: self.b_in.as_deref(),
            gamma_q: &self.gq,
            beta_q: &self.bq,
            gamma_k: &self.gk,
            beta_k: &self.bk,
            w_out: &self.w_out,
            b_out: self.b_out.as_deref(),
            scale: match self.scale {
                ScoreScale::InvSqrtQkDim => reference::ScoreScale::InvSqrtQkDim,
                ScoreScale::InvSeqLen => reference::ScoreScale::InvSeqLen,
                ScoreScale::Value(v) => reference::ScoreScale::Value(v),
            },
            normalizer: match self.normalizer {
                Normalizer::SeqLen => reference::Normalizer::SeqLen,
                Normalizer::ValidKeys => reference::Normalizer::ValidKeys,
                Normalizer::Value(v) => reference::Normalizer::Value(v),
            },
            key_lengths: self.key_lengths.as_deref(),
            causal: self.causal,
            bias: self.bias.as_ref().map(|(values, shape)| {
                let shape = match shape {
                    MaskShape::Shared => reference::MaskShape::Shared,
                    MaskShape::PerBatch => reference::MaskShape::PerBatch,
                    MaskShape::PerHead => reference::MaskShape::PerHead,
                    _ => reference::MaskShape::KeyPadding,
                };
                (&values[..], shape)
            }),
            rope: self.rope.map(|r| reference::Rope {
                pairs: match r.pairs {
                    RopePairs::Interleaved => reference::RopePairs::Interleaved,
                    RopePairs::HalfSplit => reference::RopePairs::HalfSplit,
                },
                width: r.width.unwrap_or(s.qk_dim),
                base: r.base,
            }),
            attention: match self.attention {
                GauAttention::Relu2 => reference::Attention::Relu2,
                GauAttention::Laplace => reference::Attention::Laplace,
                GauAttention::Softmax => reference::Attention::Softmax,
                GauAttention::SoftmaxPlus { min_len } => reference::Attention::SoftmaxPlus(min_len),
            },
        };
        (shape, params)
    }

    fn check(&self, k: &Kernels, out: &[f32]) -> Result<(), TestCaseError> {
        let (shape, params) = self.reference();
        reference::check_gau(&shape, &self.x, &params, out)
            .map_err(|m| TestCaseError::fail(format!("{}: {m}", k.isa())))
    }
}

/// A bias in one of its layouts: relative-position-like values with, now and then, keys
/// masked by −∞ (a prefix-LM pattern for the square layouts, left padding for the per-key one).
fn bias(shape: MaskShape, batch: usize, t: usize, seed: u64) -> (Vec<f32>, MaskShape) {
    let mut r = rng(seed);
    let masked = seed.is_multiple_of(3);
    let prefix = (seed as usize / 3) % (t + 1);
    let values = match shape {
        MaskShape::KeyPadding => (0..batch * t)
            .map(|n| {
                if masked && n % t < (n / t + seed as usize) % t {
                    f32::NEG_INFINITY
                } else {
                    r()
                }
            })
            .collect(),
        _ => {
            let per = if shape == MaskShape::Shared { 1 } else { batch };
            (0..per * t * t)
                .map(|n| {
                    let (i, j) = (n / t % t, n % t);
                    if masked && j >= prefix && j > i {
                        f32::NEG_INFINITY
                    } else {
                        r()
                    }
                })
                .collect()
        }
    };
    (values, shape)
}

fn case() -> impl Strategy<Value = Case> {
    let dims = (1usize..=2, 1usize..=40, 1usize..=24, 1usize..=40, 1usize..=12);
    let flags = (
        0u8..3,
        0u8..3,
        any::<bool>(),
        any::<bool>(),
        0u8..4,
        0u8..5,
        0u8..4,
        any::<u64>(),
    );
    (dims, flags).prop_map(
        |((batch, t, d, e, s), (scale, norm, padded, causal, bias_shape, rope, attention, seed))| {
            let s = if rope > 0 { 2 * s } else { s };
            let mut c = Case::new(
                GauShape {
                    batch,
                    seq_len: t,
                    dim: d,
                    expand: e,
                    qk_dim: s,
                },
                seed,
            );
            c.scale = [ScoreScale::InvSqrtQkDim, ScoreScale::InvSeqLen, ScoreScale::Value(0.3)][scale as usize];
            c.normalizer = [Normalizer::SeqLen, Normalizer::ValidKeys, Normalizer::Value(2.5)][norm as usize];
            let mut r = rng(seed ^ 5);
            if padded {
                c.key_lengths = Some(
                    (0..batch)
                        .map(|_| ((r() + 1.0) * 0.5 * (t + 1) as f32) as usize % (t + 1))
                        .collect(),
                );
            }
            c.causal = causal;
            c.bias = [
                None,
                Some(MaskShape::Shared),
                Some(MaskShape::PerBatch),
                Some(MaskShape::KeyPadding),
            ][bias_shape as usize]
                .map(|shape| bias(shape, batch, t, seed ^ 9));
            if seed % 5 == 0 {
                c.b_in = None;
                c.b_out = None;
            }
            // Partial widths: an even part of `s`, and a base other than 10000.
            let part = 2 * (seed as usize % (s / 2).max(1));
            c.rope = [
                None,
                Some(Rope::INTERLEAVED),
                Some(Rope::HALF_SPLIT),
                Some(Rope::INTERLEAVED.with_width(part).with_base(500.0)),
                Some(Rope::HALF_SPLIT.with_width(part)),
            ][rope as usize];
            c.attention = [
                GauAttention::Relu2,
                GauAttention::Laplace,
                GauAttention::Softmax,
                GauAttention::SoftmaxPlus {
                    min_len: 1 + seed as usize % 64,
                },
            ][attention as usize];
            c
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(200), ..ProptestConfig::default() })]

    #[test]
    fn gau_matches_oracle_on_every_isa(c in case()) {
        let mut ws = GauWorkspace::new();
        for k in all_kernels() {
            let out = c.run(&k, &mut ws);
            c.check(&k, &out)?;
            // Prepacked weights: the same arithmetic, the same bits.
            let packed = k.pack_gau_weights(&c.shape, &c.weights()).unwrap();
            let mut again = vec![f32::NAN; out.len()];
            k.gau_packed(&c.shape, &c.x, &packed, &c.opts(), &mut again, &mut ws).unwrap();
            prop_assert!(out.iter().zip(&again).all(|(a, b)| same(*a, *b)), "isa {}: packed weights differ", k.isa());
        }
    }
}

/// Prepacked weights with half storage give the bits of unpacked ones; they are refused by the
/// kernels of another ISA and for another shape, and packing checks the weights as `gau` does.
#[test]
fn packed_weights_in_half_storage_and_their_errors() {
    let shape = GauShape {
        batch: 2,
        seq_len: 70,
        dim: 40,
        expand: 72,
        qk_dim: 24,
    };
    let c = Case::new(shape, 5);
    let n = 2 * 70 * 40;
    let kernels = all_kernels();
    let mut ws = GauWorkspace::new();
    for k in &kernels {
        let packed = k.pack_gau_weights(&shape, &c.weights()).unwrap();
        assert_eq!(packed.isa(), k.isa());
        let (xh, _) = to_half::<f16>(&c.x);
        let (mut a, mut b) = (vec![f16::ZERO; n], vec![f16::ONE; n]);
        k.gau(&shape, &xh, &c.weights(), &c.opts(), &mut a, &mut ws).unwrap();
        k.gau_packed(&shape, &xh, &packed, &c.opts(), &mut b, &mut ws).unwrap();
        assert!(
            a.iter().zip(&b).all(|(a, b)| same(a.to_f32(), b.to_f32())),
            "isa {}",
            k.isa()
        );

        let other = GauShape { dim: 41, ..shape };
        let mut out = vec![0.0f32; 2 * 70 * 41];
        let err = k
            .gau_packed(&other, &vec![0.0; 2 * 70 * 41], &packed, &c.opts(), &mut out, &mut ws)
            .unwrap_err();
        assert_eq!(err.arg(), Some("weights"), "{err}");
        assert!(err.to_string().contains("(40, 72, 24)"), "{err}");
        for k2 in kernels.iter().filter(|k2| k2.isa() != k.isa()) {
            let mut out = vec![0.0f32; n];
            let err = k2
                .gau_packed(&shape, &c.x, &packed, &c.opts(), &mut out, &mut ws)
                .unwrap_err();
            assert_eq!(err.arg(), Some("weights"), "{err}");
            assert!(err.to_string().contains(&format!("packed for {}", k.isa())), "{err}");
        }
        let mut w = c.weights();
        w.w_out = &c.w_out[1..];
        assert_eq!(k.pack_gau_weights(&shape, &w).unwrap_err().arg(), Some("weights.w_out"));
        let mut out = vec![0.0f32; n];
        let err = k
            .gau_packed(&shape, &c.x[1..], &packed, &c.opts(), &mut out, &mut ws)
            .unwrap_err();
        assert_eq!(err.arg(), Some("x"));
    }
}

/// With X and O stored as `E`, the kernel computes exactly what the f32 kernel computes on the
/// widened X, and rounds each output once: `O_E = E(O_f32)` bit for bit.
fn half_is_f32_rounded_once<E: Element>(c: &Case, k: &Kernels, ws: &mut GauWorkspace) -> Result<(), TestCaseError> {
    let s = c.shape;
    let (xh, xw) = to_half::<E>(&c.x);
    let out32 = Case { x: xw, ..c.clone() }.run(k, ws);
    let mut out = vec![E::from_f32(f32::NAN); s.batch * s.seq_len * s.dim];
    k.gau(&s, &xh, &c.weights(), &c.opts(), &mut out, ws).unwrap();
    for (i, (&o, &o32)) in out.iter().zip(&out32).enumerate() {
        let want = E::from_f32(o32);
        prop_assert!(
            same(o.to_f32(), want.to_f32()),
            "{} {}: out[{i}] = {o:?}, the f32 kernel's {o32:e} rounds to {want:?}",
            k.isa(),
            E::NAME
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(100), ..ProptestConfig::default() })]

    #[test]
    fn half_storage_is_the_f32_kernel_rounded_once_on_every_isa(c in case()) {
        let mut ws = GauWorkspace::new();
        for k in all_kernels() {
            half_is_f32_rounded_once::<f16>(&c, &k, &mut ws)?;
            half_is_f32_rounded_once::<bf16>(&c, &k, &mut ws)?;
        }
    }
}

/// The case with X and O stored as `E` (X rounded to it), checked against the oracle on the
/// widened X: each output within the f32 bound plus one rounding to `E`.
fn check_half<E: Element + reference::Element>(
    c: &Case,
    k: &Kernels,
    ws: &mut GauWorkspace,
) -> Result<(), TestCaseError> {
    let s = c.shape;
    let xh = to_half::<E>(&c.x).0;
    let mut out: Vec<E> = to_half(&vec![f32::NAN; s.batch * s.seq_len * s.dim]).0;
    k.gau(&s, &xh, &c.weights(), &c.opts(), &mut out, ws).unwrap();
    let (shape, params) = c.reference();
    reference::check_gau(&shape, &xh, &params, &out)
        .map_err(|m| TestCaseError::fail(format!("{} {}: {m}", k.isa(), <E as Element>::NAME)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(150), ..ProptestConfig::default() })]

    #[test]
    fn half_gau_matches_oracle_on_every_isa(c in case()) {
        let mut ws = GauWorkspace::new();
        for k in all_kernels() {
            check_half::<f16>(&c, &k, &mut ws)?;
            check_half::<bf16>(&c, &k, &mut ws)?;
        }
    }
}

/// A tile-sized case (several row blocks and key tiles): B = 2, T = 150 (the second sequence
/// with 101 keys), d = 40, e = 72, s = 24, a shared bias, and the options given.
fn tile_case(causal: bool, rope: Option<Rope>, attention: GauAttention) -> Case {
    let shape = GauShape {
        batch: 2,
        seq_len: 150,
        dim: 40,
        expand: 72,
        qk_dim: 24,
    };
    let mut c = Case::new(shape, 11);
    c.causal = causal;
    c.rope = rope;
    c.attention = attention;
    c.key_lengths = Some(vec![150, 101]);
    c.bias = Some((
        (0..150 * 150).map(|i| ((i % 7) as f32 - 3.0) * 0.1).collect(),
        MaskShape::Shared,
    ));
    c
}

/// Tile-sized shapes: several row blocks and key tiles, every option on.
#[test]
fn larger_shapes_match_oracle() {
    for (causal, rope, attention) in [
        (false, None, GauAttention::Relu2),
        (true, Some(Rope::HALF_SPLIT), GauAttention::Relu2),
        (true, Some(Rope::INTERLEAVED), GauAttention::SoftmaxPlus { min_len: 16 }),
    ] {
        let c = tile_case(causal, rope, attention);
        for k in all_kernels() {
            let out = c.run(&k, &mut GauWorkspace::new());
            c.check(&k, &out).unwrap_or_else(|e| panic!("causal {causal}: {e}"));
        }
    }
}

/// The bound catches plausible mistakes: a kernel run with its score scale off by 10⁻³, its
/// normalizer off by one or by 10⁻³, or one of its biases dropped fails `check_gau` against the
/// true options on every ISA, where the true options pass. The query and key gains are doubled
/// so that the scores spread a few units, as a trained model's do: a nearly uniform softmax
/// barely depends on its scale, and no rounding bound could see that mistake there.
#[test]
fn bound_fails_a_wrong_scale_normalizer_or_bias() {
    for (causal, rope, attention) in [
        (false, None, GauAttention::Relu2),
        (true, Some(Rope::HALF_SPLIT), GauAttention::Relu2),
        (true, Some(Rope::INTERLEAVED), GauAttention::SoftmaxPlus { min_len: 16 }),
        (
            false,
            Some(Rope::HALF_SPLIT),
            GauAttention::SoftmaxPlus { min_len: 150 },
        ),
        (false, None, GauAttention::Laplace),
        (true, Some(Rope::INTERLEAVED.with_width(8)), GauAttention::Softmax),
    ] {
        let mut c = tile_case(causal, rope, attention);
        for g in c.gq.iter_mut().chain(c.gk.iter_mut()) {
            *g *= 2.0;
        }
        let (shape, t) = (c.shape, c.shape.seq_len as f32);
        let mutant = |what: &'static str, change: &dyn Fn(&mut Case)| {
            let mut m = c.clone();
            change(&mut m);
            (what, m)
        };
        let scale = 1.0 / (shape.qk_dim as f32).sqrt();
        let mut mutants = vec![
            mutant("scale × (1 + 10⁻³)", &|m| {
                m.scale = ScoreScale::Value(scale * 1.001)
            }),
            mutant("no input bias", &|m| m.b_in = None),
            mutant("no score bias", &|m| m.bias = None),
            mutant("no output bias", &|m| m.b_out = None),
        ];
        match attention {
            GauAttention::Relu2 | GauAttention::Laplace => {
                mutants.push(mutant("l = T + 1", &|m| m.normalizer = Normalizer::Value(t + 1.0)));
                mutants.push(mutant("l = T·(1 + 10⁻³)", &|m| {
                    m.normalizer = Normalizer::Value(t * 1.001)
                }));
            }
            // Every row's length factor is that of `min_len = T`: one more key changes it by
            // 1.3·10⁻³.
            GauAttention::SoftmaxPlus { min_len: 150 } => {
                mutants.push(mutant("length + 1", &|m| {
                    m.attention = GauAttention::SoftmaxPlus { min_len: 151 }
                }));
            }
            GauAttention::Softmax | GauAttention::SoftmaxPlus { .. } => {}
        }
        let mut ws = GauWorkspace::new();
        for k in all_kernels() {
            c.check(&k, &c.run(&k, &mut ws)).unwrap();
            for (what, m) in &mutants {
                let out = m.run(&k, &mut ws);
                assert!(
                    c.check(&k, &out).is_err(),
                    "{}, {attention:?}, causal {causal}: the bound lets {what} through",
                    k.isa()
                );
            }
        }
    }
}

/// Tile-sized shapes with f16 and bf16 storage: within the oracle's bound plus one rounding,
/// and the f32 kernel rounded once, bit for bit.
#[test]
fn larger_shapes_in_half_storage() {
    let shape = GauShape {
        batch: 2,
        seq_len: 131,
        dim: 37,
        expand: 72,
        qk_dim: 24,
    };
    for (causal, rope, attention) in [
        (false, None, GauAttention::Relu2),
        (true, Some(Rope::INTERLEAVED), GauAttention::SoftmaxPlus { min_len: 16 }),
    ] {
        let mut c = Case::new(shape, 13);
        c.causal = causal;
        c.rope = rope;
        c.attention = attention;
        c.key_lengths = Some(vec![131, 90]);
        let mut ws = GauWorkspace::new();
        for k in all_kernels() {
            let mut run = || -> Result<(), TestCaseError> {
                check_half::<f16>(&c, &k, &mut ws)?;
                check_half::<bf16>(&c, &k, &mut ws)?;
                half_is_f32_rounded_once::<f16>(&c, &k, &mut ws)?;
                half_is_f32_rounded_once::<bf16>(&c, &k, &mut ws)
            };
            run().unwrap_or_else(|e| panic!("causal {causal}: {e}"));
        }
    }
}

/// `relu²(x/√s)/T` and `relu²(x)/(T·s)` are the same attention: the default options and
/// (c = 1, l = T·s) agree within the sum of their bounds.
#[test]
fn scale_identity() {
    let shape = GauShape {
        batch: 1,
        seq_len: 33,
        dim: 16,
        expand: 24,
        qk_dim: 16,
    };
    let a = Case::new(shape, 3);
    let mut b = a.clone();
    b.scale = ScoreScale::Value(1.0);
    b.normalizer = Normalizer::Value((33 * 16) as f32);
    let (rs, rp) = a.reference();
    let bound = reference::gau(&rs, &a.x, &rp).bound;
    for k in all_kernels() {
        let (ya, yb) = (a.run(&k, &mut GauWorkspace::new()), b.run(&k, &mut GauWorkspace::new()));
        a.check(&k, &ya).unwrap();
        b.check(&k, &yb).unwrap();
        for i in 0..ya.len() {
            assert!(
                ((ya[i] - yb[i]) as f64).abs() <= 2.0 * bound[i],
                "{}: {} vs {}",
                k.isa(),
                ya[i],
                yb[i]
            );
        }
    }
}

/// A row with no allowed key gets A·V = 0, so O = b_o; T = 1 works.
#[test]
fn rows_without_keys_and_single_token() {
    let shape = GauShape {
        batch: 2,
        seq_len: 5,
        dim: 6,
        expand: 8,
        qk_dim: 4,
    };
    let mut c = Case::new(shape, 8);
    c.key_lengths = Some(vec![0, 5]);
    for k in all_kernels() {
        let out = c.run(&k, &mut GauWorkspace::new());
        c.check(&k, &out).unwrap();
        for row in out[..5 * 6].chunks(6) {
            assert_eq!(row, c.b_out.as_deref().unwrap(), "{}", k.isa());
        }
    }
    let c = Case::new(
        GauShape {
            batch: 3,
            seq_len: 1,
            dim: 3,
            expand: 2,
            qk_dim: 2,
        },
        9,
    );
    for k in all_kernels() {
        let out = c.run(&k, &mut GauWorkspace::new());
        c.check(&k, &out).unwrap();
    }
}

#[test]
fn errors_name_the_argument() {
    let k = Kernels::best();
    let shape = GauShape {
        batch: 1,
        seq_len: 4,
        dim: 3,
        expand: 5,
        qk_dim: 3,
    };
    let c = Case::new(shape, 1);
    let mut out = vec![0.0; 12];
    let mut ws = GauWorkspace::new();
    let w = c.weights();
    let err = |shape: &GauShape, x: &[f32], w: &GauWeights, o: &GauOptions, out: &mut [f32]| {
        kernels::Kernels::best()
            .gau(shape, x, w, o, out, &mut GauWorkspace::new())
            .unwrap_err()
    };
    let d = GauOptions::default();
    assert_eq!(
        err(&shape, &c.x[1..], &w, &d, &mut out).to_string(),
        "`x`: expected length 12 (B·T·d), got 11"
    );
    assert_eq!(err(&shape, &c.x, &w, &d, &mut out[1..]).arg(), Some("out"));
    assert_eq!(
        err(
            &shape,
            &c.x,
            &GauWeights {
                w_in: &c.w_in[1..],
                ..w
            },
            &d,
            &mut out
        )
        .arg(),
        Some("weights.w_in")
    );
    assert_eq!(
        err(
            &shape,
            &c.x,
            &GauWeights {
                w_out: &c.w_out[1..],
                ..w
            },
            &d,
            &mut out
        )
        .arg(),
        Some("weights.w_out")
    );
    assert_eq!(
        err(
            &shape,
            &c.x,
            &GauWeights {
                b_in: Some(&[0.0; 2]),
                ..w
            },
            &d,
            &mut out
        )
        .arg(),
        Some("weights.b_in")
    );
    assert_eq!(
        err(
            &shape,
            &c.x,
            &GauWeights {
                b_out: Some(&[0.0; 2]),
                ..w
            },
            &d,
            &mut out
        )
        .arg(),
        Some("weights.b_out")
    );
    assert_eq!(
        err(
            &shape,
            &c.x,
            &GauWeights {
                gamma_k: &[1.0; 2],
                ..w
            },
            &d,
            &mut out
        )
        .arg(),
        Some("weights.gamma_k")
    );
    assert_eq!(
        err(&GauShape { qk_dim: 0, ..shape }, &c.x, &w, &d, &mut out).arg(),
        Some("shape.qk_dim")
    );
    let rope = GauOptions {
        rope: Some(Rope::INTERLEAVED),
        ..d
    };
    assert_eq!(
        err(&shape, &c.x, &w, &rope, &mut out).to_string(),
        "`shape.qk_dim`: expected an even width for RoPE, got 3"
    );
    let lens = [5];
    assert_eq!(
        err(
            &shape,
            &c.x,
            &w,
            &GauOptions {
                key_lengths: Some(&lens),
                ..d
            },
            &mut out
        )
        .arg(),
        Some("key_lengths")
    );
    assert_eq!(
        err(
            &shape,
            &c.x,
            &w,
            &GauOptions {
                bias: Some(AdditiveMask {
                    values: &[0.0; 3],
                    shape: MaskShape::Shared
                }),
                ..d
            },
            &mut out
        )
        .arg(),
        Some("bias")
    );
    // A per-sequence bias is `B·T·T`, a per-key one `B·T`.
    for (shape_of, len) in [
        (MaskShape::PerBatch, 2 * shape.seq_len.pow(2)),
        (MaskShape::KeyPadding, 1),
    ] {
        let values = vec![0.0; len];
        let bias = Some(AdditiveMask {
            values: &values,
            shape: shape_of,
        });
        let e = err(&shape, &c.x, &w, &GauOptions { bias, ..d }, &mut out);
        assert_eq!(e.arg(), Some("bias"), "{e}");
    }
    let even = GauShape { qk_dim: 4, ..shape };
    let c4 = Case::new(even, 3);
    for (rope, arg, msg) in [
        (
            Rope::INTERLEAVED.with_width(3),
            "rope.width",
            "an even width ≤ qk_dim = 4, got 3",
        ),
        (
            Rope::HALF_SPLIT.with_width(6),
            "rope.width",
            "an even width ≤ qk_dim = 4, got 6",
        ),
        (
            Rope::INTERLEAVED.with_base(0.0),
            "rope.base",
            "a finite base > 0, got 0",
        ),
        (
            Rope::INTERLEAVED.with_base(f32::NAN),
            "rope.base",
            "a finite base > 0, got NaN",
        ),
    ] {
        let opts = GauOptions { rope: Some(rope), ..d };
        let e = Kernels::best()
            .gau(&even, &c4.x, &c4.weights(), &opts, &mut out, &mut ws)
            .unwrap_err();
        assert_eq!(e.arg(), Some(arg), "{e}");
        assert!(e.to_string().ends_with(msg), "{e}");
    }
    let bad = GauOptions {
        normalizer: Normalizer::Value(0.0),
        ..d
    };
    assert_eq!(err(&shape, &c.x, &w, &bad, &mut out).arg(), Some("normalizer"));
    let bad = GauOptions {
        scale: ScoreScale::Value(f32::INFINITY),
        ..d
    };
    assert_eq!(err(&shape, &c.x, &w, &bad, &mut out).arg(), Some("scale"));
    k.gau(&shape, &c.x, &w, &d, &mut out, &mut ws).unwrap();
    let mut again = vec![0.0; 12];
    kernels::gau(&shape, &c.x, &w, &d, &mut again).unwrap();
    assert_eq!(out, again);
}

/// GAU-α's block, `y = rms_norm(x + GAU(x))` without gain, composed from our kernels: each
/// stage within its own bound, and the block within the propagated bound of the exact
/// `RMS(x + Ô)`: with `δ` the largest error of `h = x + O` and `r̂` the exact RMS of a row,
/// `|y_j − ŷ_j| ≤ δ/(r̂ − δ)·(1 + |ŷ_j|) +` the RMSNorm bound.
#[test]
fn gau_alpha_block_with_rms_norm() {
    let shape = GauShape {
        batch: 2,
        seq_len: 37,
        dim: 24,
        expand: 48,
        qk_dim: 16,
    };
    let mut c = Case::new(shape, 21);
    c.causal = true;
    c.rope = Some(Rope::HALF_SPLIT);
    let (rs, rp) = c.reference();
    let exact = reference::gau(&rs, &c.x, &rp);
    let d = shape.dim;
    let eps = 1e-6f32;
    for k in all_kernels() {
        let o = c.run(&k, &mut GauWorkspace::new());
        c.check(&k, &o).unwrap();
        let (mut y, mut h) = (vec![0.0; o.len()], vec![0.0; o.len()]);
        let opts = kernels::RmsNormOptions { gain: None, eps };
        k.add_rms_norm(&c.x, &o, &mut y, Some(&mut h), d, &kernels::Residual::default(), &opts)
            .unwrap();
        reference::check_rms_norm(&h, d, None, eps, &y).unwrap_or_else(|e| panic!("{}: {e:?}", k.isa()));
        for row in 0..o.len() / d {
            let at = row * d..(row + 1) * d;
            let h_exact: Vec<f64> = at.clone().map(|i| c.x[i] as f64 + exact.out[i]).collect();
            let delta = at
                .clone()
                .map(|i| exact.bound[i] + reference::U * (h[i] as f64).abs())
                .fold(0.0, f64::max);
            let r = (h_exact.iter().map(|v| v * v).sum::<f64>() / d as f64 + eps as f64).sqrt();
            for (j, i) in at.enumerate() {
                let y_exact = h_exact[j] / r;
                let bound = delta / (r - delta) * (1.0 + y_exact.abs()) + 4.0 * reference::U * (1.0 + y_exact.abs());
                assert!(
                    ((y[i] as f64) - y_exact).abs() <= bound,
                    "{}: row {row}: {} vs {y_exact}",
                    k.isa(),
                    y[i]
                );
            }
        }
    }
}

/// Regression (fuzz): GAU-α with `min_len = 1` gives a row that sees one key the factor
/// `ln 1/ln 512 = 0`; masked keys must stay −∞ (the oracle once made them `−∞·0 = NaN`).
#[test]
fn softmax_plus_with_a_zero_length_factor() {
    let mut c = Case::new(
        GauShape {
            batch: 1,
            seq_len: 6,
            dim: 4,
            expand: 5,
            qk_dim: 3,
        },
        31,
    );
    c.causal = true;
    c.bias = Some(((0..36).map(|i| (i % 5) as f32 * 0.25).collect(), MaskShape::Shared));
    c.attention = GauAttention::SoftmaxPlus { min_len: 1 };
    for k in all_kernels() {
        let out = c.run(&k, &mut GauWorkspace::new());
        assert!(out.iter().all(|v| v.is_finite()), "{}", k.isa());
        c.check(&k, &out).unwrap();
    }
}

/// Random weights in the layouts of the public implementations (see the table in `GauOptions`' docs).
struct Public {
    batch: usize,
    t: usize,
    d: usize,
    e: usize,
    s: usize,
    x: Vec<f32>,
}

impl Public {
    fn new(batch: usize, t: usize, d: usize, e: usize, s: usize) -> Public {
        let mut r = rng(77);
        Public {
            batch,
            t,
            d,
            e,
            s,
            x: (0..batch * t * d).map(|_| 2.0 * r()).collect(),
        }
    }

    fn shape(&self) -> GauShape {
        GauShape {
            batch: self.batch,
            seq_len: self.t,
            dim: self.d,
            expand: self.e,
            qk_dim: self.s,
        }
    }

    /// `Σ_k x[b, i, k]·w(k)` in f64.
    fn row_dot(&self, b: usize, i: usize, w: impl Fn(usize) -> f32) -> f64 {
        (0..self.d)
            .map(|k| self.x[(b * self.t + i) * self.d + k] as f64 * w(k) as f64)
            .sum()
    }
}

fn swish64(v: f64) -> f64 {
    v / (1.0 + (-v).exp())
}

/// One row's `(u, v, q, k)` in f64.
type Row64 = (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>);

/// `O` of a GAU from per-row `(u, v, q, k)` in f64 and the row's attention weights, then
/// `(u ⊙ A·v)·W_o + b_o` with `W_o` as `out(col, k)`.
fn finish(
    p: &Public,
    uvqk: &[Row64],
    a: impl Fn(usize, usize) -> f64,
    out: impl Fn(usize, usize) -> f64,
    b_out: impl Fn(usize) -> f64,
) -> Vec<f64> {
    let mut o = Vec::with_capacity(p.t * p.d);
    for i in 0..p.t {
        let g: Vec<f64> = (0..p.e)
            .map(|c| uvqk[i].0[c] * (0..p.t).map(|j| a(i, j) * uvqk[j].1[c]).sum::<f64>())
            .collect();
        for col in 0..p.d {
            o.push((0..p.e).map(|k| g[k] * out(col, k)).sum::<f64>() + b_out(col));
        }
    }
    o
}

/// Checks a call against an implementation's own f64 output: within the oracle's bound of the
/// mapped options (plus 10⁻⁹ relative for the two f64 computations' different orders).
fn check_public(c: &Case, k: &Kernels, theirs: &[f64], what: &str) {
    let out = c.run(k, &mut GauWorkspace::new());
    let (rs, rp) = c.reference();
    let bound = reference::gau(&rs, &c.x, &rp).bound;
    for (n, (&got, &want)) in out.iter().zip(theirs).enumerate() {
        assert!(
            (got as f64 - want).abs() <= bound[n] + 1e-9 * want.abs(),
            "{what}, {}: element {n}: {got} against {want} (bound {})",
            k.isa(),
            bound[n]
        );
    }
}

/// lucidrains' `GAU` (flash-pytorch), its norm and residual aside: `v, gate =
/// to_hidden(x).chunk(2)` with SiLU, `qk = SiLU(to_qk(x))`, `q, k = OffsetScale(qk)`,
/// `A = attn_fn((q·kᵀ + rel_pos)/T)` with `relu²` or the Laplace function, zeroed where the
/// boolean key mask is false and above the diagonal when causal, `O = to_out((A·v)·gate)`.
/// `nn.Linear` weights are `[out, in]`.
#[test]
fn lucidrains_gau_conventions() {
    let p = Public::new(2, 37, 20, 40, 16);
    let (t, d, e, s) = (p.t, p.d, p.e, p.s);
    let mut r = rng(78);
    let mut v = |n: usize, scale: f32| (0..n).map(|_| r() * scale).collect::<Vec<f32>>();
    let (to_hidden, to_hidden_b) = (v(2 * e * d, 1.0 / (d as f32).sqrt()), v(2 * e, 0.3));
    let (to_qk, to_qk_b) = (v(s * d, 1.0 / (d as f32).sqrt()), v(s, 0.3));
    let (gamma, beta) = (v(2 * s, 1.5), v(2 * s, 0.3));
    let (to_out, to_out_b) = (v(d * e, 1.0 / (e as f32).sqrt()), v(d, 0.3));
    let rel_pos = v(t * t, 2.0);
    // Sequence 1 masks its first 5 keys (left padding); sequence 0 none.
    let mask = |b: usize, j: usize| b == 0 || j >= 5;
    for (laplace, causal) in [(false, false), (true, true), (false, true)] {
        let mut theirs = Vec::new();
        for b in 0..2 {
            let rows: Vec<_> = (0..t)
                .map(|i| {
                    let hidden: Vec<f64> = (0..2 * e)
                        .map(|o| swish64(p.row_dot(b, i, |kk| to_hidden[o * d + kk]) + to_hidden_b[o] as f64))
                        .collect();
                    let qk: Vec<f64> = (0..s)
                        .map(|o| swish64(p.row_dot(b, i, |kk| to_qk[o * d + kk]) + to_qk_b[o] as f64))
                        .collect();
                    let q: Vec<f64> = (0..s).map(|m| qk[m] * gamma[m] as f64 + beta[m] as f64).collect();
                    let k: Vec<f64> = (0..s)
                        .map(|m| qk[m] * gamma[s + m] as f64 + beta[s + m] as f64)
                        .collect();
                    // `v, gate = chunk(2)`: V is the first half.
                    (hidden[e..].to_vec(), hidden[..e].to_vec(), q, k)
                })
                .collect();
            let attn = |i: usize, j: usize| {
                let sim: f64 = (0..s).map(|m| rows[i].2[m] * rows[j].3[m]).sum::<f64>() + rel_pos[i * t + j] as f64;
                let x = sim / t as f64;
                let a = if laplace {
                    let (mu, std) = (0.5f64.sqrt(), (4.0 * std::f64::consts::PI).powf(-0.5));
                    (1.0 + libm::erf((x - mu) / (std * 2f64.sqrt()))) * 0.5
                } else {
                    x.max(0.0).powi(2)
                };
                if !mask(b, j) || causal && j > i {
                    0.0
                } else {
                    a
                }
            };
            theirs.extend(finish(
                &p,
                &rows,
                attn,
                |col, kk| to_out[col * e + kk] as f64,
                |col| to_out_b[col] as f64,
            ));
        }
        // Ours: W_in = [gate | v | qk], transposed; the bias divided by T, −∞ where masked.
        let w_in: Vec<f32> = (0..d * (2 * e + s))
            .map(|n| {
                let (kk, j) = (n / (2 * e + s), n % (2 * e + s));
                match j {
                    j if j < e => to_hidden[(e + j) * d + kk],
                    j if j < 2 * e => to_hidden[(j - e) * d + kk],
                    j => to_qk[(j - 2 * e) * d + kk],
                }
            })
            .collect();
        let b_in = [&to_hidden_b[e..], &to_hidden_b[..e], &to_qk_b[..]].concat();
        let bias: Vec<f32> = (0..2 * t * t)
            .map(|n| {
                let (b, j) = (n / (t * t), n % t);
                if mask(b, j) {
                    rel_pos[n % (t * t)] / t as f32
                } else {
                    f32::NEG_INFINITY
                }
            })
            .collect();
        let mut c = Case::new(p.shape(), 1);
        c.x = p.x.clone();
        c.w_in = w_in;
        c.b_in = Some(b_in);
        c.gq = gamma[..s].to_vec();
        c.gk = gamma[s..].to_vec();
        c.bq = beta[..s].to_vec();
        c.bk = beta[s..].to_vec();
        c.w_out = (0..e * d).map(|n| to_out[(n % d) * e + n / d]).collect();
        c.b_out = Some(to_out_b.clone());
        c.scale = ScoreScale::InvSeqLen;
        c.normalizer = Normalizer::Value(1.0);
        c.causal = causal;
        c.bias = Some((bias, MaskShape::PerBatch));
        c.attention = if laplace {
            GauAttention::Laplace
        } else {
            GauAttention::Relu2
        };
        for k in all_kernels() {
            check_public(
                &c,
                &k,
                &theirs,
                &format!("lucidrains laplace {laplace} causal {causal}"),
            );
        }
    }
}

/// bert4keras' `GatedAttentionUnit` (and GAU-α, built on it): `u, v, qk = split(swish(i_dense(x)),
/// [e, e, s])`, `q, k = ScaleOffset(qk)`, RoPE on interleaved pairs over all of `s` (base 10000),
/// `a = q·kᵀ/√s + a_bias`, padded keys −∞, then `relu(a)²/l` or `softmax(a·ln(max(l, c))/ln 512)`
/// with `l` the sequence's unpadded keys (`c = 16` from bert4keras 0.11.5, none before:
/// GAU-α), and `O = o_dense(u ⊙ A·v)`. Keras `Dense` kernels are `[in, out]`. The `a_bias` is
/// bert4keras' language-model mask, `−10¹²` above the diagonal: finite, so not counted out of
/// `l`.
#[test]
fn bert4keras_and_gau_alpha_conventions() {
    let p = Public::new(2, 41, 24, 36, 16);
    let (t, d, e, s) = (p.t, p.d, p.e, p.s);
    let w = 2 * e + s;
    let mut r = rng(79);
    let mut v = |n: usize, scale: f32| (0..n).map(|_| r() * scale).collect::<Vec<f32>>();
    let (i_dense, i_bias) = (v(d * w, 1.0 / (d as f32).sqrt()), v(w, 0.3));
    let (gamma, beta) = (v(2 * s, 1.5), v(2 * s, 0.3));
    let (o_dense, o_bias) = (v(e * d, 1.0 / (e as f32).sqrt()), v(d, 0.3));
    // The second sequence is shorter than the clamp of 16.
    let lengths = [41usize, 11];
    // (normalization, clamp, biases on, language-model mask)
    for (method, clamp, biased, lm) in [
        ("squared_relu", 1, true, false),
        ("squared_relu", 1, true, true),
        ("softmax_plus", 16, true, true),
        ("softmax_plus", 1, false, false),
        ("softmax", 1, true, false),
    ] {
        let on = |v: f32| if biased { v as f64 } else { 0.0 };
        let mut theirs = Vec::new();
        for (b, &len) in lengths.iter().enumerate() {
            let rows: Vec<_> = (0..t)
                .map(|i| {
                    let h: Vec<f64> = (0..w)
                        .map(|o| swish64(p.row_dot(b, i, |kk| i_dense[kk * w + o]) + on(i_bias[o])))
                        .collect();
                    let affine = |g: &[f32], be: &[f32]| -> Vec<f64> {
                        let x: Vec<f64> = (0..s).map(|m| h[2 * e + m] * g[m] as f64 + on(be[m])).collect();
                        // `x·cos + [−x₁, x₀]·sin` with `pos·10000^(−2m/s)`.
                        (0..s)
                            .map(|n| {
                                let m = n / 2;
                                let (sin, cos) = (i as f64 * 10000f64.powf(-2.0 * m as f64 / s as f64)).sin_cos();
                                let other = if n % 2 == 0 { -x[n + 1] } else { x[n - 1] };
                                x[n] * cos + other * sin
                            })
                            .collect()
                    };
                    (
                        h[..e].to_vec(),
                        h[e..2 * e].to_vec(),
                        affine(&gamma[..s], &beta[..s]),
                        affine(&gamma[s..], &beta[s..]),
                    )
                })
                .collect();
            let l = len as f64;
            let score = |i: usize, j: usize| {
                let a = (0..s).map(|m| rows[i].2[m] * rows[j].3[m]).sum::<f64>() / (s as f64).sqrt();
                let a = if lm && j > i { a - 1e12 } else { a };
                if j < len {
                    a
                } else {
                    f64::NEG_INFINITY
                }
            };
            let weights: Vec<Vec<f64>> = (0..t)
                .map(|i| {
                    let a: Vec<f64> = (0..t).map(|j| score(i, j)).collect();
                    match method {
                        "squared_relu" => a.iter().map(|x| x.max(0.0).powi(2) / l).collect(),
                        _ => {
                            let f = if method == "softmax" {
                                1.0
                            } else {
                                l.max(clamp as f64).ln() / 512f64.ln()
                            };
                            let m = a.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x * f));
                            let ex: Vec<f64> = a.iter().map(|&x| (x * f - m).exp()).collect();
                            let sum: f64 = ex.iter().sum();
                            ex.iter().map(|x| x / sum).collect()
                        }
                    }
                })
                .collect();
            theirs.extend(finish(
                &p,
                &rows,
                |i, j| weights[i][j],
                |col, kk| o_dense[kk * d + col] as f64,
                |col| on(o_bias[col]),
            ));
        }
        let mut c = Case::new(p.shape(), 1);
        c.x = p.x.clone();
        c.w_in = i_dense.clone();
        c.b_in = biased.then(|| i_bias.clone());
        c.gq = gamma[..s].to_vec();
        c.gk = gamma[s..].to_vec();
        c.bq = if biased { beta[..s].to_vec() } else { vec![0.0; s] };
        c.bk = if biased { beta[s..].to_vec() } else { vec![0.0; s] };
        c.w_out = o_dense.clone();
        c.b_out = biased.then(|| o_bias.clone());
        c.scale = ScoreScale::InvSqrtQkDim;
        c.normalizer = Normalizer::ValidKeys;
        c.key_lengths = Some(lengths.to_vec());
        c.rope = Some(Rope::INTERLEAVED);
        c.bias = lm.then(|| {
            let lm_mask = (0..t * t).map(|n| if n % t > n / t { -1e12 } else { 0.0 }).collect();
            (lm_mask, MaskShape::Shared)
        });
        c.attention = match method {
            "squared_relu" => GauAttention::Relu2,
            "softmax" => GauAttention::Softmax,
            _ => GauAttention::SoftmaxPlus { min_len: clamp },
        };
        for k in all_kernels() {
            check_public(&c, &k, &theirs, &format!("bert4keras {method} clamp {clamp} lm {lm}"));
        }
    }
}

/// lucidrains' `RotaryEmbedding(dim = r)` as FLASH applies it to queries and keys of width
/// `s > r`: the first `r` dimensions turn on interleaved pairs with frequencies over `r`, the
/// rest stay; one call with `Rope::INTERLEAVED.with_width(r)`, checked on the scores' effect
/// through the whole unit (`relu²`, the defaults otherwise).
#[test]
fn partial_rotary_conventions() {
    let p = Public::new(1, 30, 16, 20, 24);
    let (t, d, e, s, r) = (p.t, p.d, p.e, p.s, 8);
    let c = {
        let mut c = Case::new(p.shape(), 80);
        c.x = p.x.clone();
        c.rope = Some(Rope::INTERLEAVED.with_width(r).with_base(10000.0));
        c
    };
    let w = 2 * e + s;
    let rows: Vec<_> = (0..t)
        .map(|i| {
            let h: Vec<f64> = (0..w)
                .map(|o| swish64(p.row_dot(0, i, |kk| c.w_in[kk * w + o]) + c.b_in.as_ref().unwrap()[o] as f64))
                .collect();
            let rotate = |g: &[f32], be: &[f32]| -> Vec<f64> {
                let x: Vec<f64> = (0..s).map(|m| h[2 * e + m] * g[m] as f64 + be[m] as f64).collect();
                // `rotate_half` pairs `(2m, 2m+1)` as `(−x₁, x₀)`; `freqs = θ^(−2m/r)`.
                (0..s)
                    .map(|n| {
                        if n >= r {
                            return x[n];
                        }
                        let (sin, cos) = (i as f64 * 10000f64.powf(-2.0 * (n / 2) as f64 / r as f64)).sin_cos();
                        let half = if n % 2 == 0 { -x[n + 1] } else { x[n - 1] };
                        x[n] * cos + half * sin
                    })
                    .collect()
            };
            (
                h[..e].to_vec(),
                h[e..2 * e].to_vec(),
                rotate(&c.gq, &c.bq),
                rotate(&c.gk, &c.bk),
            )
        })
        .collect();
    let a = |i: usize, j: usize| {
        let sc = (0..s).map(|m| rows[i].2[m] * rows[j].3[m]).sum::<f64>() / (s as f64).sqrt();
        sc.max(0.0).powi(2) / t as f64
    };
    let b_out = c.b_out.clone().unwrap();
    let theirs = finish(
        &p,
        &rows,
        a,
        |col, kk| c.w_out[kk * d + col] as f64,
        |col| b_out[col] as f64,
    );
    for k in all_kernels() {
        check_public(&c, &k, &theirs, "partial rotary");
    }
}
