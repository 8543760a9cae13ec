//! Attention on every ISA against the f64 oracle, under the documented bound.

mod common;

use common::{all_kernels, same, to_half};
use kernels::half::{bf16, f16};
use kernels::{
    AdditiveMask, AttentionOptions, AttentionShape, AttentionWorkspace, CarriedScores, Element, Error, Kernels,
    MaskShape, MaskedRows,
};
use proptest::prelude::*;

/// One call: shapes, inputs and options (owned, so proptest can shrink and print it).
#[derive(Debug, Clone)]
struct Case {
    shape: AttentionShape,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    scale: Option<f32>,
    mask: Option<(Vec<f32>, MaskShape)>,
    key_lengths: Option<Vec<usize>>,
    causal: bool,
    prev: Option<Vec<f32>>,
    running_mean_layer: Option<u32>,
    want_scores: bool,
    carried: CarriedScores,
    masked_rows: MaskedRows,
}

impl Case {
    fn opts(&self) -> AttentionOptions<'_> {
        AttentionOptions {
            scale: self.scale,
            mask: self
                .mask
                .as_ref()
                .map(|(values, shape)| AdditiveMask { values, shape: *shape }),
            key_lengths: self.key_lengths.as_deref(),
            causal: self.causal,
            prev_scores: self.prev.as_deref(),
            running_mean_layer: self.running_mean_layer,
            carried: self.carried,
            masked_rows: self.masked_rows,
        }
    }

    fn ref_opts(&self) -> reference::AttentionOptions<'_> {
        reference::AttentionOptions {
            scale: self.scale,
            mask: self.mask.as_ref().map(|(values, shape)| {
                let shape = match shape {
                    MaskShape::Shared => reference::MaskShape::Shared,
                    MaskShape::PerBatch => reference::MaskShape::PerBatch,
                    MaskShape::PerHead => reference::MaskShape::PerHead,
                };
                (values.as_slice(), shape)
            }),
            key_lengths: self.key_lengths.as_deref(),
            causal: self.causal,
            prev_scores: self.prev.as_deref(),
            running_mean_layer: self.running_mean_layer,
            carry_masked: self.carried == CarriedScores::Masked,
            masked_rows: match self.masked_rows {
                MaskedRows::Zero => reference::MaskedRows::Zero,
                MaskedRows::Nan => reference::MaskedRows::Nan,
            },
        }
    }

    fn ref_shape(&self) -> reference::AttentionShape {
        let s = self.shape;
        reference::AttentionShape {
            batch: s.batch,
            heads: s.heads,
            kv_heads: s.kv_heads,
            q_len: s.q_len,
            kv_len: s.kv_len,
            head_dim: s.head_dim,
            value_dim: s.value_dim,
        }
    }

    fn n_scores(&self) -> usize {
        let s = self.shape;
        s.batch * s.heads * s.q_len * s.kv_len
    }

    /// Runs the kernel; returns `(out, scores)`.
    fn run(&self, k: &Kernels, ws: &mut AttentionWorkspace) -> (Vec<f32>, Option<Vec<f32>>) {
        let s = self.shape;
        let mut out = vec![f32::NAN; s.batch * s.heads * s.q_len * s.value_dim];
        let mut scores = self.want_scores.then(|| vec![f32::NAN; self.n_scores()]);
        k.attention(
            &s,
            &self.q,
            &self.k,
            &self.v,
            &mut out,
            scores.as_deref_mut(),
            &self.opts(),
            ws,
        )
        .unwrap();
        (out, scores)
    }

    fn check(&self, k: &Kernels, out: &[f32], scores: Option<&[f32]>) -> Result<(), TestCaseError> {
        reference::check_attention(
            &self.ref_shape(),
            &self.q,
            &self.k,
            &self.v,
            &self.ref_opts(),
            out,
            scores,
        )
        .map_err(|m| TestCaseError::fail(format!("{}: {m}", k.isa())))
    }
}

fn values(len: usize, specials: bool) -> BoxedStrategy<Vec<f32>> {
    let v = if specials {
        common::value(3.0).boxed()
    } else {
        (-3.0f32..3.0).boxed()
    };
    proptest::collection::vec(v, len).boxed()
}

fn dim() -> impl Strategy<Value = usize> {
    prop_oneof![6 => 1usize..=40, 2 => 41usize..=80, 1 => 120usize..=256]
}

fn case() -> impl Strategy<Value = Case> {
    let dims = (
        1usize..=2,
        1usize..=3,
        1usize..=2,
        0usize..=40,
        0usize..=70,
        dim(),
        dim(),
    );
    let flags = (
        any::<bool>(),
        0u8..4,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    );
    (dims, flags, any::<u64>()).prop_flat_map(
        |((batch, kv_heads, group, q_len, kv_len, head_dim, value_dim), flags, seed)| {
            let (causal, mask_kind, padded, with_prev, with_scores, running_mean, nan_policy) = flags;
            let shape = AttentionShape {
                batch,
                heads: kv_heads * group,
                kv_heads,
                q_len,
                kv_len,
                head_dim,
                value_dim,
            };
            let n_scores = batch * shape.heads * q_len * kv_len;
            let mask_shape = [MaskShape::Shared, MaskShape::PerBatch, MaskShape::PerHead][mask_kind as usize % 3];
            let mask_len = match mask_shape {
                MaskShape::Shared => q_len * kv_len,
                MaskShape::PerBatch => batch * q_len * kv_len,
                MaskShape::PerHead => n_scores,
            };
            let mask_value = prop_oneof![
                6 => -2.0f32..2.0,
                2 => Just(f32::NEG_INFINITY),
                1 => Just(-1e4f32),
                1 => Just(-1e9f32),
            ];
            let specials = seed % 4 == 0;
            (
                values(batch * shape.heads * q_len * head_dim, specials),
                values(batch * kv_heads * kv_len * head_dim, specials),
                values(batch * kv_heads * kv_len * value_dim, specials),
                proptest::option::of(proptest::collection::vec(mask_value, mask_len)),
                proptest::collection::vec(0..=kv_len, batch),
                values(n_scores, false),
                prop_oneof![3 => Just(None), 1 => (0.01f32..1.0).prop_map(Some)],
                0u32..12,
            )
                .prop_map(move |(q, k, v, mask, lens, prev, scale, layer)| Case {
                    shape,
                    q,
                    k,
                    v,
                    scale,
                    mask: if mask_kind == 3 {
                        None
                    } else {
                        mask.map(|m| (m, mask_shape))
                    },
                    key_lengths: padded.then_some(lens),
                    causal,
                    prev: with_prev.then_some(prev),
                    running_mean_layer: running_mean.then_some(layer),
                    want_scores: with_scores,
                    carried: if seed % 3 == 0 {
                        CarriedScores::Masked
                    } else {
                        CarriedScores::Raw
                    },
                    masked_rows: if nan_policy { MaskedRows::Nan } else { MaskedRows::Zero },
                })
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(300), ..ProptestConfig::default() })]

    #[test]
    fn attention_matches_oracle_on_every_isa(c in case()) {
        let mut ws = AttentionWorkspace::new();
        for k in all_kernels() {
            let (out, scores) = c.run(&k, &mut ws);
            c.check(&k, &out, scores.as_deref())?;
        }
    }
}

/// With Q, K, V and O stored as `E`, the kernel computes exactly what the f32 kernel computes
/// on the widened inputs, and rounds each output once: `O_E = E(O_f32)` bit for bit, and the
/// f32 scores output is the f32 kernel's.
fn half_is_f32_rounded_once<E: Element>(
    c: &Case,
    k: &Kernels,
    ws: &mut AttentionWorkspace,
) -> Result<(), TestCaseError> {
    let s = c.shape;
    let (qh, qw) = to_half::<E>(&c.q);
    let (kh, kw) = to_half::<E>(&c.k);
    let (vh, vw) = to_half::<E>(&c.v);
    let wide = Case {
        q: qw,
        k: kw,
        v: vw,
        ..c.clone()
    };
    let (out32, scores32) = wide.run(k, ws);
    let mut out = vec![E::from_f32(f32::NAN); s.batch * s.heads * s.q_len * s.value_dim];
    let mut scores = c.want_scores.then(|| vec![f32::NAN; c.n_scores()]);
    k.attention(&s, &qh, &kh, &vh, &mut out, scores.as_deref_mut(), &c.opts(), ws)
        .unwrap();
    for (i, (&o, &o32)) in out.iter().zip(&out32).enumerate() {
        let want = E::from_f32(o32);
        prop_assert!(
            same(o.to_f32(), want.to_f32()),
            "{} {}: out[{i}] = {o:?}, the f32 kernel's {o32:e} rounds to {want:?}",
            k.isa(),
            E::NAME
        );
    }
    if let (Some(sc), Some(sc32)) = (&scores, &scores32) {
        for (i, (&x, &x32)) in sc.iter().zip(sc32).enumerate() {
            prop_assert!(
                same(x, x32),
                "{} {}: scores[{i}] = {x:e}, f32 kernel {x32:e}",
                k.isa(),
                E::NAME
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(100), ..ProptestConfig::default() })]

    #[test]
    fn half_storage_is_the_f32_kernel_rounded_once_on_every_isa(c in case()) {
        let mut ws = AttentionWorkspace::new();
        for k in all_kernels() {
            half_is_f32_rounded_once::<f16>(&c, &k, &mut ws)?;
            half_is_f32_rounded_once::<bf16>(&c, &k, &mut ws)?;
        }
    }
}

/// The case with Q, K, V and O stored as `E` (the inputs rounded to it), checked against the
/// oracle on the widened inputs: each output within the f32 bound plus one rounding to `E`,
/// the f32 scores within the f32 bound.
fn check_half<E: Element + reference::Element>(
    c: &Case,
    k: &Kernels,
    ws: &mut AttentionWorkspace,
) -> Result<(), TestCaseError> {
    let s = c.shape;
    let (qh, kh, vh) = (to_half::<E>(&c.q).0, to_half::<E>(&c.k).0, to_half::<E>(&c.v).0);
    let mut out: Vec<E> = to_half(&vec![f32::NAN; s.batch * s.heads * s.q_len * s.value_dim]).0;
    let mut scores = c.want_scores.then(|| vec![f32::NAN; c.n_scores()]);
    k.attention(&s, &qh, &kh, &vh, &mut out, scores.as_deref_mut(), &c.opts(), ws)
        .unwrap();
    reference::check_attention(&c.ref_shape(), &qh, &kh, &vh, &c.ref_opts(), &out, scores.as_deref())
        .map_err(|m| TestCaseError::fail(format!("{} {}: {m}", k.isa(), <E as Element>::NAME)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(150), ..ProptestConfig::default() })]

    #[test]
    fn half_attention_matches_oracle_on_every_isa(c in case()) {
        let mut ws = AttentionWorkspace::new();
        for k in all_kernels() {
            check_half::<f16>(&c, &k, &mut ws)?;
            check_half::<bf16>(&c, &k, &mut ws)?;
        }
    }
}

fn random(len: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

fn plain_case(shape: AttentionShape, seed: u64) -> Case {
    let (b, h, hkv) = (shape.batch, shape.heads, shape.kv_heads);
    Case {
        shape,
        q: random(b * h * shape.q_len * shape.head_dim, seed),
        k: random(b * hkv * shape.kv_len * shape.head_dim, seed + 1),
        v: random(b * hkv * shape.kv_len * shape.value_dim, seed + 2),
        scale: None,
        mask: None,
        key_lengths: None,
        causal: false,
        prev: None,
        running_mean_layer: None,
        want_scores: false,
        carried: CarriedScores::Raw,
        masked_rows: MaskedRows::Zero,
    }
}

/// A 12-layer RealFormer chain: each layer adds the previous layer's scores. The kernel's
/// scores are checked against the oracle layer by layer, and against the exact recurrence
/// carried in f64 through all 12 layers, where the per-layer bounds add up.
#[test]
fn realformer_chain_of_12_layers() {
    let shape = AttentionShape {
        batch: 1,
        heads: 2,
        kv_heads: 2,
        q_len: 37,
        kv_len: 45,
        head_dim: 24,
        value_dim: 16,
    };
    for k in all_kernels() {
        let mut ws = AttentionWorkspace::new();
        let n = 2 * 37 * 45;
        let mut prev: Option<Vec<f32>> = None;
        let mut exact = vec![0.0f64; n];
        let mut allowed = vec![0.0f64; n];
        for layer in 0..12u64 {
            let mut c = plain_case(shape, 100 + 7 * layer);
            c.prev = prev.clone();
            c.want_scores = true;
            let (out, scores) = c.run(&k, &mut ws);
            let scores = scores.unwrap();
            c.check(&k, &out, Some(&scores))
                .unwrap_or_else(|e| panic!("layer {layer}: {e}"));
            // The exact recurrence: S_n = scale·Q·Kᵀ + S_{n−1}, all in f64.
            let scale = 1.0 / (shape.head_dim as f64).sqrt();
            for h in 0..2 {
                for i in 0..37 {
                    for j in 0..45 {
                        let qi = &c.q[(h * 37 + i) * 24..][..24];
                        let kj = &c.k[(h * 45 + j) * 24..][..24];
                        let dot: f64 = qi.iter().zip(kj).map(|(&a, &b)| a as f64 * b as f64).sum();
                        let abs: f64 = qi.iter().zip(kj).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum();
                        let at = (h * 37 + i) * 45 + j;
                        exact[at] += scale * dot;
                        // This layer's bound on its own rounding, with |P| ≤ |S_{n−1}|.
                        allowed[at] += 26.0 * reference::U * (scale * abs + exact[at].abs() + 1.0);
                    }
                }
            }
            for (at, (&got, &want)) in scores.iter().zip(&exact).enumerate() {
                assert!(
                    (got as f64 - want).abs() <= allowed[at],
                    "{} layer {layer} at {at}: {got} vs {want}",
                    k.isa()
                );
            }
            prev = Some(scores);
        }
    }
}

/// Masked keys contribute nothing even where K is NaN; padded keys are never read at all.
#[test]
fn nan_in_masked_out_keys_does_not_leak() {
    let shape = AttentionShape {
        batch: 2,
        heads: 2,
        kv_heads: 1,
        q_len: 5,
        kv_len: 40,
        head_dim: 8,
        value_dim: 8,
    };
    let mut c = plain_case(shape, 9);
    // Batch 0: keys ≥ 33 are padding, NaN in both K and V. Batch 1: key 3 masked by −∞ with
    // NaN in K (its V stays finite: masked keys enter as 0·V).
    c.key_lengths = Some(vec![33, 40]);
    for j in 33..40 {
        c.k[j * 8..][..8].fill(f32::NAN);
        c.v[j * 8..][..8].fill(f32::NAN);
    }
    c.k[(40 + 3) * 8..][..8].fill(f32::NAN);
    let mut mask = vec![0.0f32; 2 * 5 * 40];
    for i in 0..5 {
        mask[(5 + i) * 40 + 3] = f32::NEG_INFINITY;
    }
    c.mask = Some((mask, MaskShape::PerBatch));
    for k in all_kernels() {
        let (out, _) = c.run(&k, &mut AttentionWorkspace::new());
        assert!(out.iter().all(|v| v.is_finite()), "{}: {out:?}", k.isa());
        c.check(&k, &out, None).unwrap();
    }
}

/// A NaN score and a larger score in the same lane of two vectors of one tile: the vector max
/// that decides whether the row's max grows may lose the large score to the NaN (NEON's and
/// the scalar path's `max` propagate NaN), and `exp` must still not see a positive argument.
/// The row is NaN, on every ISA, without a panic (the scalar path once overflowed `2ⁿ`).
#[test]
fn nan_score_beside_a_larger_one_in_the_same_lane() {
    let shape = AttentionShape {
        batch: 1,
        heads: 1,
        kv_heads: 1,
        q_len: 1,
        kv_len: 64,
        head_dim: 1,
        value_dim: 3,
    };
    let mut c = plain_case(shape, 4);
    c.q = vec![1.0];
    c.k = vec![0.5; 64];
    c.k[0] = f32::NAN;
    // Lane 0 of vector 1 for 1, 4, 8 and 16 lanes; huge, so that `exp` of it would overflow `2ⁿ`.
    for j in [1, 4, 8, 16] {
        c.k[j] = 3.0e38;
    }
    for k in all_kernels() {
        let (out, _) = c.run(&k, &mut AttentionWorkspace::new());
        assert!(out.iter().all(|v| v.is_nan()), "{}: {out:?}", k.isa());
    }
}

/// A fully masked row follows the policy; a finite floor on a whole row averages V.
#[test]
fn fully_masked_rows_and_finite_floors() {
    let shape = AttentionShape {
        batch: 1,
        heads: 1,
        kv_heads: 1,
        q_len: 3,
        kv_len: 20,
        head_dim: 4,
        value_dim: 5,
    };
    let mut c = plain_case(shape, 3);
    let mut mask = vec![0.0f32; 3 * 20];
    mask[..20].fill(f32::NEG_INFINITY); // row 0: fully masked
    mask[20..40].fill(-1e4); // row 1: a finite floor everywhere
    c.mask = Some((mask, MaskShape::Shared));
    for policy in [MaskedRows::Zero, MaskedRows::Nan] {
        c.masked_rows = policy;
        for k in all_kernels() {
            let (out, _) = c.run(&k, &mut AttentionWorkspace::new());
            c.check(&k, &out, None).unwrap();
            match policy {
                MaskedRows::Zero => assert_eq!(&out[..5], &[0.0; 5]),
                MaskedRows::Nan => assert!(out[..5].iter().all(|v| v.is_nan())),
            }
            assert!(out[5..].iter().all(|v| v.is_finite()));
        }
    }
    // Causal with Lq > Lk: the first Lq − Lk rows see no key at all.
    let shape = AttentionShape { q_len: 25, ..shape };
    let mut c = plain_case(shape, 4);
    c.causal = true;
    for k in all_kernels() {
        let (out, _) = c.run(&k, &mut AttentionWorkspace::new());
        c.check(&k, &out, None).unwrap();
        assert!(out[..5 * 5].iter().all(|&v| v == 0.0));
        assert!(out[5 * 5..].iter().all(|v| v.is_finite() && *v != 0.0));
    }
}

/// Bottom-right causal against top-left: with Lq < Lk, query i sees keys 0..=i + Lk − Lq.
#[test]
fn causal_is_bottom_right_aligned() {
    let shape = AttentionShape {
        batch: 1,
        heads: 1,
        kv_heads: 1,
        q_len: 2,
        kv_len: 5,
        head_dim: 1,
        value_dim: 1,
    };
    let mut c = plain_case(shape, 0);
    c.q = vec![0.0; 2]; // equal scores: O is the mean of the visible V
    c.v = vec![1.0, 2.0, 3.0, 4.0, 5.0];
    c.causal = true;
    for k in all_kernels() {
        let (out, _) = c.run(&k, &mut AttentionWorkspace::new());
        assert!(
            (out[0] - 2.5).abs() < 1e-6 && (out[1] - 3.0).abs() < 1e-6,
            "{}: {out:?}",
            k.isa()
        );
    }
}

#[test]
fn errors_name_the_argument() {
    let k = Kernels::best();
    let shape = AttentionShape {
        batch: 2,
        heads: 4,
        kv_heads: 2,
        q_len: 3,
        kv_len: 5,
        head_dim: 4,
        value_dim: 6,
    };
    let c = plain_case(shape, 1);
    let mut out = vec![0.0; 2 * 4 * 3 * 6];
    let mut ws = AttentionWorkspace::new();
    let call = |shape: &AttentionShape, q: &[f32], kk: &[f32], v: &[f32], out: &mut [f32], opts: &AttentionOptions| {
        k.attention(shape, q, kk, v, out, None, opts, &mut AttentionWorkspace::new())
            .unwrap_err()
    };
    let d = AttentionOptions::default();
    let err = call(&shape, &c.q[1..], &c.k, &c.v, &mut out, &d);
    assert_eq!(err.to_string(), "`q`: expected length 96 (B·H·Lq·Dk), got 95");
    assert_eq!(call(&shape, &c.q, &c.k[1..], &c.v, &mut out, &d).arg(), Some("k"));
    assert_eq!(call(&shape, &c.q, &c.k, &c.v[1..], &mut out, &d).arg(), Some("v"));
    assert_eq!(call(&shape, &c.q, &c.k, &c.v, &mut out[1..], &d).arg(), Some("out"));
    let bad = AttentionShape { kv_heads: 3, ..shape };
    assert_eq!(
        call(&bad, &c.q, &c.k, &c.v, &mut out, &d).to_string(),
        "`shape.kv_heads`: expected a divisor of heads = 4, got 3"
    );
    assert_eq!(
        call(&AttentionShape { head_dim: 0, ..shape }, &[], &[], &c.v, &mut out, &d).arg(),
        Some("shape.head_dim")
    );
    assert_eq!(
        call(&AttentionShape { value_dim: 0, ..shape }, &c.q, &c.k, &[], &mut [], &d).arg(),
        Some("shape.value_dim")
    );
    let mask = vec![0.0; 15];
    let opts = AttentionOptions {
        mask: Some(AdditiveMask {
            values: &mask,
            shape: MaskShape::PerBatch,
        }),
        ..d
    };
    assert_eq!(
        call(&shape, &c.q, &c.k, &c.v, &mut out, &opts).to_string(),
        "`mask`: expected length 30 (B·Lq·Lk for MaskShape::PerBatch), got 15"
    );
    let lens = [5, 6];
    let opts = AttentionOptions {
        key_lengths: Some(&lens),
        ..d
    };
    assert_eq!(
        call(&shape, &c.q, &c.k, &c.v, &mut out, &opts).to_string(),
        "`key_lengths`: expected every length ≤ kv_len = 5, got 6 at 1"
    );
    let opts = AttentionOptions {
        key_lengths: Some(&lens[..1]),
        ..d
    };
    assert_eq!(
        call(&shape, &c.q, &c.k, &c.v, &mut out, &opts).arg(),
        Some("key_lengths")
    );
    let prev = vec![0.0; 3];
    let opts = AttentionOptions {
        prev_scores: Some(&prev),
        ..d
    };
    assert_eq!(
        call(&shape, &c.q, &c.k, &c.v, &mut out, &opts).arg(),
        Some("prev_scores")
    );
    let opts = AttentionOptions {
        scale: Some(f32::NAN),
        ..d
    };
    assert!(matches!(
        call(&shape, &c.q, &c.k, &c.v, &mut out, &opts),
        Error::Param { arg: "scale", .. }
    ));
    let mut scores = vec![0.0; 7];
    let err = k
        .attention(&shape, &c.q, &c.k, &c.v, &mut out, Some(&mut scores), &d, &mut ws)
        .unwrap_err();
    assert_eq!(err.arg(), Some("scores"));
    // Empty shapes are fine.
    let empty = AttentionShape { q_len: 0, ..shape };
    k.attention(&empty, &[], &c.k, &c.v, &mut [], None, &d, &mut ws)
        .unwrap();
}

#[test]
fn free_function_matches_the_handle() {
    let shape = AttentionShape::self_attention(1, 2, 33, 16);
    let c = plain_case(shape, 5);
    let mut a = vec![0.0; 2 * 33 * 16];
    kernels::attention(&shape, &c.q, &c.k, &c.v, &mut a, None, &Default::default()).unwrap();
    let (b, _) = c.run(&Kernels::detected().unwrap(), &mut AttentionWorkspace::new());
    assert_eq!(a, b);
}

/// The benchmark's shape class (D = 64, many key tiles and query blocks, GQA), every option
/// family at once, checked element by element: fast paths must not skip work.
#[test]
fn large_shapes_match_oracle() {
    let shape = AttentionShape {
        batch: 1,
        heads: 4,
        kv_heads: 2,
        q_len: 300,
        kv_len: 333,
        head_dim: 64,
        value_dim: 64,
    };
    for (causal, realformer) in [(false, false), (true, false), (false, true), (true, true)] {
        let mut c = plain_case(shape, 77);
        c.causal = causal;
        if realformer {
            c.prev = Some(random(c.n_scores(), 78));
            c.want_scores = true;
            c.key_lengths = Some(vec![300]);
        }
        for k in all_kernels() {
            let (out, scores) = c.run(&k, &mut AttentionWorkspace::new());
            c.check(&k, &out, scores.as_deref())
                .unwrap_or_else(|e| panic!("causal {causal} rf {realformer}: {e}"));
        }
    }
}

/// The large shapes (many query blocks and key tiles, grouped heads) with f16 and bf16 storage:
/// within the oracle's bound plus one rounding, and the f32 kernel rounded once, bit for bit.
#[test]
fn large_shapes_in_half_storage() {
    let shape = AttentionShape {
        batch: 2,
        heads: 6,
        kv_heads: 2,
        q_len: 131,
        kv_len: 157,
        head_dim: 67,
        value_dim: 45,
    };
    for (causal, realformer) in [(false, false), (true, true)] {
        let mut c = plain_case(shape, 91);
        c.causal = causal;
        if realformer {
            c.prev = Some(random(c.n_scores(), 92));
            c.want_scores = true;
            c.key_lengths = Some(vec![157, 120]);
        }
        let mut ws = AttentionWorkspace::new();
        for k in all_kernels() {
            let mut run = || -> Result<(), TestCaseError> {
                check_half::<f16>(&c, &k, &mut ws)?;
                check_half::<bf16>(&c, &k, &mut ws)?;
                half_is_f32_rounded_once::<f16>(&c, &k, &mut ws)?;
                half_is_f32_rounded_once::<bf16>(&c, &k, &mut ws)
            };
            run().unwrap_or_else(|e| panic!("causal {causal} rf {realformer}: {e}"));
        }
    }
}

/// Regression (fuzz): a tiny scale on a huge `Q·K`. The f32 dot product overflows before it is
/// scaled, so the row is NaN where the exact output is finite; the documented bound excludes
/// such dot products, and the check must say so rather than flag the kernel.
#[test]
fn overflowing_dot_product_is_excluded_by_the_bound() {
    let shape = AttentionShape {
        batch: 1,
        heads: 1,
        kv_heads: 1,
        q_len: 2,
        kv_len: 3,
        head_dim: 2,
        value_dim: 2,
    };
    let mut c = plain_case(shape, 12);
    c.q[..2].fill(1e20);
    c.k.fill(1e20);
    c.scale = Some(1e-30);
    for k in all_kernels() {
        let (out, _) = c.run(&k, &mut AttentionWorkspace::new());
        assert!(out[..2].iter().all(|v| v.is_nan()), "{}: {out:?}", k.isa());
        c.check(&k, &out, None).unwrap();
    }
}

/// Regression (fuzz, issue 6): the dot product is rounded in the subnormal range *before* it
/// is scaled, so the scale multiplies that absolute error (up to 2⁻¹⁵⁰); the bound's
/// `λ = max(1, |scale|)` covers it. The fuzzer's case: `Q = K = P = 9.1e−41`, scale
/// `−8.4·10³⁷` (`Q·K` underflows to 0, worth `−7e−43` once scaled); and a scale of 1000 on a
/// product half a subnormal step off the grid.
#[test]
fn subnormal_dot_products_times_a_large_scale() {
    let shape = AttentionShape {
        batch: 1,
        heads: 1,
        kv_heads: 1,
        q_len: 1,
        kv_len: 1,
        head_dim: 1,
        value_dim: 1,
    };
    let tiny = f32::from_bits(65024);
    // 0.3·215·2⁻¹⁴⁹ = 64.500002·2⁻¹⁴⁹ rounds to 65·2⁻¹⁴⁹.
    for (q, key, prev, scale) in [
        (tiny, tiny, tiny, f32::from_bits(4269604864)),
        (0.3, f32::from_bits(215), 0.0, 1000.0),
    ] {
        let mut c = plain_case(shape, 14);
        (c.q, c.k, c.scale, c.want_scores) = (vec![q], vec![key], Some(scale), true);
        c.prev = Some(vec![prev]);
        let exact = scale as f64 * q as f64 * key as f64 + prev as f64;
        for k in all_kernels() {
            let (out, scores) = c.run(&k, &mut AttentionWorkspace::new());
            let err = (scores.as_ref().unwrap()[0] as f64 - exact).abs();
            // Beyond the bound without λ, as the fuzzer found.
            assert!(
                err > 3.0 * 2f64.powi(-150),
                "{}: scale {scale:e}: error {err:e}",
                k.isa()
            );
            c.check(&k, &out, scores.as_deref())
                .unwrap_or_else(|e| panic!("{}: scale {scale:e}: {e}", k.isa()));
        }
    }
}

/// Regression (fuzz, the f16/bf16 target): scores near 10²⁰ carry an error `E` near 10¹⁵, so a
/// key whose exact weight underflows f64 to 0 may still take all the weight in f32. The
/// oracle's bound now evaluates `ŵ·e^{2E}` in the log domain for such keys instead of
/// skipping them (the kernel was within the documented bound all along).
#[test]
fn huge_scores_may_move_weight_to_keys_whose_exact_weight_underflows() {
    // The fuzzer's bf16 values, widened: −6.95e9 everywhere but a few, one V of 0.
    let table: Vec<f32> = (0..39)
        .map(|i| match i {
            8 => 53002u16,
            28 => 57295,
            38 => 0,
            _ => 53199,
        })
        .map(|b| f32::from_bits((b as u32) << 16))
        .collect();
    let (n, keys, queries) = (47, 2, 2);
    let shape = AttentionShape {
        batch: 1,
        heads: 1,
        kv_heads: 1,
        q_len: queries,
        kv_len: keys,
        head_dim: n,
        value_dim: n,
    };
    let mut c = plain_case(shape, 15);
    c.q = (0..queries * n).map(|i| table[i % 39]).collect();
    c.k = (0..keys * n).map(|i| table[(i + 7) % 39]).collect();
    c.v = c.k.clone();
    for k in all_kernels() {
        let (out, _) = c.run(&k, &mut AttentionWorkspace::new());
        c.check(&k, &out, None).unwrap_or_else(|e| panic!("{}: {e}", k.isa()));
    }
}

/// Regression (fuzz, the f16/bf16 target): an exact weight that is an f64 subnormal times a
/// tiny `|V|` underflowed to 0 before it met an infinite relative factor (scores near 10¹⁵,
/// `E` near 10⁹), and the oracle's bound became `0·∞ = NaN`; it is now `w·(|V|·rel) = ∞`.
#[test]
fn underflowing_weight_times_tiny_values_keeps_the_bound_finite_or_infinite() {
    // The fuzzer's bf16 values, widened (every key's V column 0 is −1.58e−23).
    let table: Vec<f32> = [
        39321u16, 19353, 39321, 39321, 39321, 39321, 39321, 39321, 39321, 39321, 39168, 24217, 48, 827, 225,
    ]
    .iter()
    .map(|&b| f32::from_bits((b as u32) << 16))
    .collect();
    let (n, keys) = (73, 3);
    let shape = AttentionShape {
        batch: 1,
        heads: 1,
        kv_heads: 1,
        q_len: keys,
        kv_len: keys,
        head_dim: n,
        value_dim: n,
    };
    let mut c = plain_case(shape, 16);
    c.q = (0..keys * n).map(|i| table[i % table.len()]).collect();
    c.k = (0..keys * n).map(|i| table[(i + 7) % table.len()]).collect();
    c.v = c.k.clone();
    c.scale = Some(f32::from_bits(3716415616)); // −1.19e18
    for k in all_kernels() {
        let (out, _) = c.run(&k, &mut AttentionWorkspace::new());
        c.check(&k, &out, None).unwrap_or_else(|e| panic!("{}: {e}", k.isa()));
    }
}

/// Regression (qemu run): subnormal products in `Q·K` round to 0 in f32; the scores' bound has
/// an absolute term of 2⁻¹⁵⁰ per rounding for that.
#[test]
fn subnormal_scores_are_within_the_bound() {
    let shape = AttentionShape {
        batch: 1,
        heads: 1,
        kv_heads: 1,
        q_len: 3,
        kv_len: 5,
        head_dim: 7,
        value_dim: 2,
    };
    let mut c = plain_case(shape, 13);
    c.q.iter_mut().for_each(|v| *v *= 1e-23);
    c.k.iter_mut().for_each(|v| *v *= -1e-23);
    c.want_scores = true;
    for carried in [CarriedScores::Raw, CarriedScores::Masked] {
        c.carried = carried;
        for k in all_kernels() {
            let (out, scores) = c.run(&k, &mut AttentionWorkspace::new());
            c.check(&k, &out, scores.as_deref())
                .unwrap_or_else(|e| panic!("{carried:?}: {e}"));
        }
    }
}
