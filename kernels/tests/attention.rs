//! Attention on every ISA against the f64 oracle, under the documented bound.

mod common;

use common::{all_kernels, same, to_half};
use kernels::half::{bf16, f16};
use kernels::{
    AdditiveMask, AttentionArgs, AttentionOptions, AttentionPlan, AttentionShape, AttentionWorkspace, Caches,
    CarriedScores, Element, Error, Kernels, Layout, MaskShape, MaskedRows,
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
        let mut opts = AttentionOptions::default()
            .causal(self.causal)
            .carried(self.carried)
            .masked_rows(self.masked_rows);
        opts.scale = self.scale;
        opts.mask = self
            .mask
            .as_ref()
            .map(|(values, shape)| AdditiveMask { values, shape: *shape });
        opts.key_lengths = self.key_lengths.as_deref();
        opts.prev_scores = self.prev.as_deref();
        opts.running_mean_layer = self.running_mean_layer;
        opts
    }

    fn ref_opts(&self) -> reference::AttentionOptions<'_> {
        reference::AttentionOptions {
            scale: self.scale,
            mask: self.mask.as_ref().map(|(values, shape)| {
                let shape = match shape {
                    MaskShape::Shared => reference::MaskShape::Shared,
                    MaskShape::PerBatch => reference::MaskShape::PerBatch,
                    MaskShape::PerHead => reference::MaskShape::PerHead,
                    MaskShape::KeyPadding => reference::MaskShape::KeyPadding,
                    _ => unreachable!("a mask shape the oracle does not know"),
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
    case_up_to(40, 70)
}

/// Cases of at most `q_max` query rows and `kv_max` keys.
fn case_up_to(q_max: usize, kv_max: usize) -> impl Strategy<Value = Case> {
    let dims = (
        1usize..=2,
        1usize..=3,
        1usize..=2,
        0usize..=q_max,
        0usize..=kv_max,
        dim(),
        dim(),
    );
    let flags = (
        any::<bool>(),
        0u8..5,
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
            let mask_shapes = [
                MaskShape::Shared,
                MaskShape::PerBatch,
                MaskShape::PerHead,
                MaskShape::KeyPadding,
            ];
            let mask_shape = mask_shapes[mask_kind as usize % 4];
            let mask_len = match mask_shape {
                MaskShape::Shared => q_len * kv_len,
                MaskShape::PerBatch => batch * q_len * kv_len,
                MaskShape::KeyPadding => batch * kv_len,
                _ => n_scores,
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
                    mask: if mask_kind == 4 {
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

/// `O` (widened) and the scores of a call.
type Outputs = (Vec<f32>, Option<Vec<f32>>);

/// `O` and the scores of `c` stored as `E`, through `k`.
fn run_as<E: Element>(c: &Case, k: &Kernels, ws: &mut AttentionWorkspace) -> Outputs {
    let s = c.shape;
    let (q, kk, v) = (to_half::<E>(&c.q).0, to_half::<E>(&c.k).0, to_half::<E>(&c.v).0);
    let mut out = vec![E::from_f32(f32::NAN); s.batch * s.heads * s.q_len * s.value_dim];
    let mut scores = c.want_scores.then(|| vec![f32::NAN; c.n_scores()]);
    k.attention(&s, &q, &kk, &v, &mut out, scores.as_deref_mut(), &c.opts(), ws)
        .unwrap();
    (out.iter().map(|o| o.to_f32()).collect(), scores)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(60), ..ProptestConfig::default() })]

    /// Blocking the keys for a small level-2 cache (blocks of 64 keys, each swept by a query
    /// block of 48 rows) changes where the work is done, never a value: every output and score
    /// is the bits of the walk that sweeps every key per block of rows, in each storage type.
    #[test]
    fn key_blocks_give_the_bits_of_the_row_walk(c in case_up_to(100, 200)) {
        let mut ws = AttentionWorkspace::new();
        for k in all_kernels() {
            let small = k.with_caches(Caches { l2: 0, ..k.caches() });
            let runs: [fn(&Case, &Kernels, &mut AttentionWorkspace) -> Outputs; 3] =
                [run_as::<f32>, run_as::<f16>, run_as::<bf16>];
            for (ty, run) in ["f32", "f16", "bf16"].into_iter().zip(runs) {
                let (out, scores) = run(&c, &k, &mut ws);
                let (blocked, blocked_scores) = run(&c, &small, &mut ws);
                for (i, (&a, &b)) in blocked.iter().zip(&out).enumerate() {
                    prop_assert!(same(a, b), "{} {ty}: out[{i}] = {a:e} by key blocks, {b:e} by rows", k.isa());
                }
                prop_assert!(
                    blocked_scores.iter().flatten().zip(scores.iter().flatten()).all(|(&a, &b)| same(a, b)),
                    "{} {ty}: scores differ", k.isa()
                );
            }
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
    let opts = d.mask(&mask, MaskShape::PerBatch);
    assert_eq!(
        call(&shape, &c.q, &c.k, &c.v, &mut out, &opts).to_string(),
        "`mask`: expected length 30 (B·Lq·Lk for MaskShape::PerBatch), got 15"
    );
    let lens = [5, 6];
    let opts = d.key_lengths(&lens);
    assert_eq!(
        call(&shape, &c.q, &c.k, &c.v, &mut out, &opts).to_string(),
        "`key_lengths`: expected every length ≤ kv_len = 5, got 6 at 1"
    );
    let opts = d.key_lengths(&lens[..1]);
    assert_eq!(
        call(&shape, &c.q, &c.k, &c.v, &mut out, &opts).arg(),
        Some("key_lengths")
    );
    let prev = vec![0.0; 3];
    let opts = d.prev_scores(&prev);
    assert_eq!(
        call(&shape, &c.q, &c.k, &c.v, &mut out, &opts).arg(),
        Some("prev_scores")
    );
    let opts = d.scale(f32::NAN);
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

/// Regression (found by fuzzing): the dot product is rounded in the subnormal range *before* it
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

/// One case run on strided views: `Q`, `K`, `V` gathered into one fused projection
/// `[B, L, (H + 2·Hkv)·D]` (when `Lq = Lk` and `Dk = Dv`) or each into `[B, L, H, D]` with
/// `extra` unused columns per token, `O` scattered into `[B, L, H·Dv + extra]`.
struct Strided {
    q: Vec<f32>,
    q_layout: Layout,
    k: Vec<f32>,
    k_layout: Layout,
    v: Vec<f32>,
    v_layout: Layout,
    out_layout: Layout,
    out_len: usize,
}

/// Writes the contiguous `[B, H, L, D]` tensor `src` into `dst` at `layout`.
fn scatter(src: &[f32], dims: [usize; 4], layout: Layout, dst: &mut [f32]) {
    let [b, h, l, d] = dims;
    for (i, &x) in src.iter().enumerate().take(b * h * l * d) {
        let (bi, hi, li, di) = (i / (h * l * d), i / (l * d) % h, i / d % l, i % d);
        dst[layout.offset + bi * layout.batch + hi * layout.head + li * layout.row + di] = x;
    }
}

/// Reads the contiguous `[B, H, L, D]` tensor at `layout` out of `src`.
fn gather(src: &[f32], dims: [usize; 4], layout: Layout) -> Vec<f32> {
    let [b, h, l, d] = dims;
    (0..b * h * l * d)
        .map(|i| {
            let (bi, hi, li, di) = (i / (h * l * d), i / (l * d) % h, i / d % l, i % d);
            src[layout.offset + bi * layout.batch + hi * layout.head + li * layout.row + di]
        })
        .collect()
}

fn strided(c: &Case, fused: bool, extra: usize) -> Strided {
    let s = c.shape;
    let (qd, kd, vd) = (
        [s.batch, s.heads, s.q_len, s.head_dim],
        [s.batch, s.kv_heads, s.kv_len, s.head_dim],
        [s.batch, s.kv_heads, s.kv_len, s.value_dim],
    );
    let out_layout = Layout::tokens_first(s.q_len, s.heads * s.value_dim + extra, extra, s.value_dim);
    let out_len = s.batch * s.q_len * (s.heads * s.value_dim + extra);
    if fused {
        let (hd, kvd) = (s.heads * s.head_dim, s.kv_heads * s.head_dim);
        let width = hd + 2 * kvd + extra;
        let at = |offset| Layout::tokens_first(s.q_len, width, offset, s.head_dim);
        let (q_layout, k_layout, v_layout) = (at(extra), at(extra + hd), at(extra + hd + kvd));
        let mut qkv = vec![f32::NAN; s.batch * s.q_len * width];
        scatter(&c.q, qd, q_layout, &mut qkv);
        scatter(&c.k, kd, k_layout, &mut qkv);
        scatter(&c.v, vd, v_layout, &mut qkv);
        return Strided {
            q: qkv.clone(),
            q_layout,
            k: qkv.clone(),
            k_layout,
            v: qkv,
            v_layout,
            out_layout,
            out_len,
        };
    }
    let view = |src: &[f32], [b, h, l, d]: [usize; 4]| {
        let layout = Layout::tokens_first(l, h * d + extra, extra, d);
        let mut dst = vec![f32::NAN; b * l * (h * d + extra)];
        scatter(src, [b, h, l, d], layout, &mut dst);
        (dst, layout)
    };
    let ((q, q_layout), (k, k_layout), (v, v_layout)) = (view(&c.q, qd), view(&c.k, kd), view(&c.v, vd));
    Strided {
        q,
        q_layout,
        k,
        k_layout,
        v,
        v_layout,
        out_layout,
        out_len,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(100), ..ProptestConfig::default() })]

    /// Strided views (unused columns filled with NaN) give the contiguous call's output and
    /// scores bit for bit, and the output's unused columns are left alone.
    #[test]
    fn strided_views_are_the_contiguous_call_bit_for_bit(c in case(), extra in 0usize..3, fused_seed in any::<bool>()) {
        let s = c.shape;
        let fused = fused_seed && s.q_len == s.kv_len && s.head_dim == s.value_dim;
        let view = strided(&c, fused, extra);
        let mut ws = AttentionWorkspace::new();
        for k in all_kernels() {
            let (want, want_scores) = c.run(&k, &mut ws);
            let mut out = vec![-7.0f32; view.out_len];
            let mut scores = c.want_scores.then(|| vec![f32::NAN; c.n_scores()]);
            let args = AttentionArgs {
                shape: s,
                q: &view.q,
                q_layout: view.q_layout,
                k: &view.k,
                k_layout: view.k_layout,
                v: &view.v,
                v_layout: view.v_layout,
                out: &mut out,
                out_layout: view.out_layout,
                scores: scores.as_deref_mut(),
                options: c.opts(),
            };
            k.attention_args(args, &mut ws).unwrap();
            let od = [s.batch, s.heads, s.q_len, s.value_dim];
            let got = gather(&out, od, view.out_layout);
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                prop_assert!(same(g, w), "{}: out[{i}] = {g:e}, contiguous {w:e}", k.isa());
            }
            let mut untouched = vec![-7.0f32; view.out_len];
            scatter(&want, od, view.out_layout, &mut untouched);
            prop_assert!(out.iter().zip(&untouched).all(|(&a, &b)| same(a, b)), "{}: wrote outside O", k.isa());
            if let (Some(got), Some(want)) = (&scores, &want_scores) {
                prop_assert!(got.iter().zip(want).all(|(&a, &b)| same(a, b)), "{}: scores differ", k.isa());
            }
        }
    }

    /// A key-padding mask `[B, Lk]` is the per-batch mask `[B, 1, Lq, Lk]` that repeats it
    /// over the queries, bit for bit.
    #[test]
    fn key_padding_mask_is_the_broadcast_per_batch_mask(c in case(), seed in any::<u64>()) {
        let s = c.shape;
        let pad: Vec<f32> = random(s.batch * s.kv_len, seed)
            .into_iter()
            .map(|x| if x > 0.5 { f32::NEG_INFINITY } else { x })
            .collect();
        let per_batch: Vec<f32> = (0..s.batch * s.q_len * s.kv_len)
            .map(|i| pad[i / (s.q_len * s.kv_len) * s.kv_len + i % s.kv_len])
            .collect();
        let with = |mask: Vec<f32>, shape| Case { mask: Some((mask, shape)), ..c.clone() };
        let (padded, broadcast) = (with(pad, MaskShape::KeyPadding), with(per_batch, MaskShape::PerBatch));
        let mut ws = AttentionWorkspace::new();
        for k in all_kernels() {
            let (out, scores) = padded.run(&k, &mut ws);
            let (want, want_scores) = broadcast.run(&k, &mut ws);
            prop_assert!(out.iter().zip(&want).all(|(&a, &b)| same(a, b)), "{}: outputs differ", k.isa());
            prop_assert!(scores.iter().flatten().zip(want_scores.iter().flatten()).all(|(&a, &b)| same(a, b)));
            padded.check(&k, &out, scores.as_deref())?;
        }
    }
}

/// Heads of 32 (MiniLM's) through a fused QKV projection, against the oracle on every ISA.
#[test]
fn heads_of_32_on_a_fused_projection_match_the_oracle() {
    let shape = AttentionShape::self_attention(2, 12, 37, 32);
    let mut c = plain_case(shape, 32);
    c.mask = Some((
        (0..2 * 37)
            .map(|i| {
                if i % 37 >= 30 && i >= 37 {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
            .collect(),
        MaskShape::KeyPadding,
    ));
    let view = strided(&c, true, 0);
    let mut ws = AttentionWorkspace::new();
    for k in all_kernels() {
        let mut out = vec![f32::NAN; view.out_len];
        let args = AttentionArgs {
            shape,
            q: &view.q,
            q_layout: view.q_layout,
            k: &view.k,
            k_layout: view.k_layout,
            v: &view.v,
            v_layout: view.v_layout,
            out: &mut out,
            out_layout: view.out_layout,
            scores: None,
            options: c.opts(),
        };
        k.attention_args(args, &mut ws).unwrap();
        let got = gather(&out, [2, 12, 37, 32], view.out_layout);
        c.check(&k, &got, None).unwrap();
    }
}

#[test]
fn layouts_are_checked_before_anything_runs() {
    let shape = AttentionShape::self_attention(2, 3, 4, 8);
    let (l, h, d) = (4, 3, 8);
    let qkv = vec![0.5f32; 2 * l * 3 * h * d];
    let at = |block| Layout::tokens_first(l, 3 * h * d, block * h * d, d);
    let call = |q_layout: Layout, out_layout: Layout, out_len: usize| {
        let mut out = vec![0.0f32; out_len];
        let args = AttentionArgs {
            shape,
            q: &qkv,
            q_layout,
            k: &qkv,
            k_layout: at(1),
            v: &qkv,
            v_layout: at(2),
            out: &mut out,
            out_layout,
            scores: None,
            options: AttentionOptions::default(),
        };
        Kernels::best()
            .attention_args(args, &mut AttentionWorkspace::new())
            .unwrap_err()
            .to_string()
    };
    let out = Layout::tokens_first(l, h * d, 0, d);
    // Q's block starts past the end of the projection.
    let msg = call(at(3), out, 2 * l * h * d);
    assert!(
        msg.starts_with("`q`: expected a slice holding every element of [2, 3, 4, 8]"),
        "{msg}"
    );
    assert!(msg.ends_with("got length 576"), "{msg}");
    // An output one element short.
    let msg = call(at(0), out, 2 * l * h * d - 1);
    assert!(
        msg.starts_with("`out`: expected a slice holding every element"),
        "{msg}"
    );
    // Heads written over each other.
    let overlapping = Layout { head: d / 2, ..out };
    let msg = call(at(0), overlapping, 2 * l * h * d);
    assert!(
        msg.starts_with("`out_layout`: expected strides that place every element"),
        "{msg}"
    );
    // Strides near usize::MAX do not wrap around.
    let huge = Layout {
        batch: usize::MAX / 2,
        ..out
    };
    let msg = call(at(0), huge, 2 * l * h * d);
    assert!(msg.starts_with("`out`: expected a slice holding"), "{msg}");
}

/// The plan of each shape on four cache geometries: a Zen 3 core (32 KiB of L1, 512 KiB of
/// L2), a Zen 4 (32 KiB, 1 MiB), a Xeon (48 KiB, 2 MiB) and a small Arm core (32 KiB, a
/// quarter of a 1 MiB L2 shared by four), at `4·(Dk + Dv)` bytes a key or a row. Key blocks of
/// whole 64-key steps fill two thirds of the L1 where one fits and the head does not; else one
/// head's K and V stay whole where they fit half the L2, and past that key blocks fill that
/// half beside 48 rows of Q and O.
#[test]
fn plans_follow_the_caches() {
    let geometry = |l1: usize, l2: usize| Kernels::best().with_caches(Caches { l1, l2, llc: None });
    let (zen3, zen4, xeon, arm) = (
        geometry(32 << 10, 512 << 10),
        geometry(32 << 10, 1 << 20),
        geometry(48 << 10, 2 << 20),
        geometry(32 << 10, 256 << 10),
    );
    let blocks = |keys| AttentionPlan::KeyBlocks { keys, query_rows: 48 };
    let rows = AttentionPlan::Rows;
    // (Lk, D): the plans on the Zen 3, the Zen 4, the Xeon and the Arm core.
    let want = [
        // 512 B a key: 64 keys fill two thirds of the Xeon's L1, none of the others'; whole
        // heads up to 512, 1024, 2048 and 256 keys in their L2.
        ((64, 64), [rows, rows, rows, rows]),
        ((512, 64), [rows, rows, blocks(64), blocks(192)]),
        ((1024, 64), [blocks(448), rows, blocks(64), blocks(192)]),
        ((2048, 64), [blocks(448), blocks(960), blocks(64), blocks(192)]),
        ((8192, 64), [blocks(448), blocks(960), blocks(64), blocks(192)]),
        // Heads of 32 (MiniLM): 256 B a key, 64 keys in two thirds of a 32 KiB L1, 128 in 48.
        ((128, 32), [blocks(64), blocks(64), rows, blocks(64)]),
        ((2048, 32), [blocks(64), blocks(64), blocks(128), blocks(64)]),
        // Heads of 128: 1 KiB a key, too much for any L1; on the Arm core an L2 block holds
        // only 80 keys: one step.
        ((4096, 128), [blocks(192), blocks(448), blocks(960), blocks(64)]),
    ];
    for ((kv_len, dim), plans) in want {
        let shape = AttentionShape::self_attention(1, 8, kv_len, dim);
        for (k, plan) in [&zen3, &zen4, &xeon, &arm].into_iter().zip(plans) {
            assert_eq!(
                k.attention_plan(&shape, &AttentionOptions::default(), false),
                plan,
                "Lk = {kv_len}, D = {dim}, {:?}",
                k.caches()
            );
        }
    }
}

/// A call that reads or writes `Lq × Lk` values (P, S, a mask of whole rows) keeps the
/// level-2 plan: L1 key blocks would walk those rows 64 values at a time. A key-padding mask
/// is `B·Lk` values and changes nothing.
#[test]
fn plans_with_score_rows_follow_the_level_2_cache() {
    let xeon = Kernels::best().with_caches(Caches {
        l1: 48 << 10,
        l2: 2 << 20,
        llc: None,
    });
    let shape = AttentionShape::self_attention(1, 8, 2048, 64);
    let (p, mask, padding) = ([0.0f32; 0], [0.0f32; 0], [0.0f32; 0]);
    let plain = AttentionOptions::default();
    let l1 = AttentionPlan::KeyBlocks {
        keys: 64,
        query_rows: 48,
    };
    let rows = AttentionPlan::Rows;
    let cases = [
        (plain, false, l1),
        (plain, true, rows),
        (plain.prev_scores(&p), false, rows),
        (plain.mask(&mask, MaskShape::Shared), false, rows),
        (plain.mask(&mask, MaskShape::PerHead), false, rows),
        (plain.mask(&padding, MaskShape::KeyPadding), false, l1),
        (plain.causal(true), false, l1),
    ];
    for (i, (opts, scores, want)) in cases.into_iter().enumerate() {
        assert_eq!(xeon.attention_plan(&shape, &opts, scores), want, "case {i}");
    }
}
