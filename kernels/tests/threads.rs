//! Threads: every kernel's output, split over 1, 2, 3 and 7 threads, is the sequential
//! output bit for bit, on every ISA and storage type.
//!
//! The shapes are uneven (row counts, widths and head counts that no thread count divides) and
//! large enough that each kernel splits (for 7 threads, into as many parts as its work allows:
//! the comments give the parts of each call). Each setting runs twice: inside a pool of that many
//! threads with `Parallelism::Rayon(0)`, and on the global pool with `Parallelism::Rayon(n)`.

#![cfg(feature = "rayon")]

mod common;

use common::{all_kernels, narrow};
use kernels::half::{bf16, f16};
use kernels::{
    Activation, AdditiveMask, AttentionOptions, AttentionShape, AttentionWorkspace, BatchNormOptions, Caches, Element,
    GauAttention, GauOptions, GauShape, GauWeights, GauWorkspace, Kernels, LayerNormOptions, LinearOptions,
    LinearWeights, MaskShape, Parallelism, Residual, RmsNormOptions, Rope, RowStats, SoftmaxOptions, WeightLayout,
    WeightType,
};

const THREADS: [usize; 4] = [1, 2, 3, 7];

/// Deterministic values in about `[-2, 2]`.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

fn bits<E: Element>(xs: &[E]) -> Vec<u32> {
    xs.iter().map(|x| x.to_f32().to_bits()).collect()
}

/// Runs `f` with `k` sequential, then with every thread count both ways, and checks that each
/// output is the sequential one bit for bit.
fn same_bits(what: &str, k: Kernels, f: impl Fn(Kernels) -> Vec<u32> + Sync) {
    let want = f(k.with_parallelism(Parallelism::Sequential));
    for n in THREADS {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(n).build().unwrap();
        let inside = pool.install(|| f(k.with_parallelism(Parallelism::Rayon(0))));
        let global = f(k.with_parallelism(Parallelism::Rayon(n)));
        for (how, got) in [("in a pool", inside), ("on the global pool", global)] {
            assert_eq!(got.len(), want.len());
            let first = got.iter().zip(&want).position(|(a, b)| a != b);
            assert!(
                first.is_none(),
                "{what} on {:?}, {n} threads {how}: element {} differs",
                k.isa(),
                first.unwrap_or(0)
            );
        }
    }
}

// 1001 rows of 251: 251k elements, 7 parts of 32k.
const ROWS: usize = 1001;
const WIDTH: usize = 251;

/// `$f::<E>($k, $args)` for each storage type `E`.
macro_rules! each_type {
    ($f:ident($k:expr; $($x:expr),*)) => {
        $f::<f32>($k, $($x),*);
        $f::<f16>($k, $($x),*);
        $f::<bf16>($k, $($x),*);
    };
}

#[test]
fn softmax_and_maps() {
    let x = values(ROWS * WIDTH, 1);
    for k in all_kernels() {
        each_type!(softmax_of(k; &x));
    }
}

fn softmax_of<E: Element>(k: Kernels, x: &[f32]) {
    let (ty, x) = (E::NAME, &narrow::<E>(x));
    let mask: Vec<f32> = (0..WIDTH)
        .map(|j| if j % 5 == 0 { f32::NEG_INFINITY } else { 0.0 })
        .collect();
    let opts = SoftmaxOptions {
        scale: 0.7,
        mask: Some(&mask),
        ..Default::default()
    };
    same_bits(&format!("softmax {ty}"), k, |k| {
        let mut y = x.to_vec();
        k.softmax(x, &mut y, WIDTH, &opts).unwrap();
        bits(&y)
    });
    same_bits(&format!("log_softmax in place {ty}"), k, |k| {
        let mut y = x.to_vec();
        k.log_softmax_inplace(&mut y, WIDTH, &opts).unwrap();
        bits(&y)
    });
    same_bits(&format!("gelu {ty}"), k, |k| {
        let mut y = x.to_vec();
        k.gelu(x, &mut y).unwrap();
        bits(&y)
    });
    same_bits(&format!("exp in place {ty}"), k, |k| {
        let mut y = x.to_vec();
        k.exp_inplace(&mut y).unwrap();
        bits(&y)
    });
}

// Long rows too: 32 rows of 4096, a working set of at most 1 MiB, which LayerNorm walks by
// columns; two grains of rows, so 2 parts of 16.
const LONG_ROWS: usize = 32;
const LONG: usize = 4096;

#[test]
fn norms() {
    let (x, r) = (values(ROWS * WIDTH, 2), values(ROWS * WIDTH, 3));
    let xl = values(LONG_ROWS * LONG, 7);
    for k in all_kernels() {
        each_type!(norms_of(k; &x, &r, &xl));
    }
}

fn norms_of<E: Element>(k: Kernels, x: &[f32], r: &[f32], xl: &[f32]) {
    let (ty, x, r, xl) = (E::NAME, &narrow::<E>(x), &narrow::<E>(r), &narrow::<E>(xl));
    let (gamma, beta, bias) = (&values(WIDTH, 4), &values(WIDTH, 5), &values(WIDTH, 6));
    let (gl, bl, long) = (&values(LONG, 8), &values(LONG, 9), LONG);
    let ln = LayerNormOptions {
        gamma: Some(gamma),
        beta: Some(beta),
        eps: 1e-5,
    };
    let rms = RmsNormOptions {
        gain: Some(gamma),
        eps: 1e-6,
    };
    let res = Residual {
        alpha: 1.5,
        bias: Some(bias),
    };
    same_bits(&format!("layer_norm {ty}"), k, |k| {
        let mut y = x.to_vec();
        let (mut mean, mut rstd) = (vec![0.0; ROWS], vec![0.0; ROWS]);
        let stats = RowStats {
            mean: Some(&mut mean),
            rstd: Some(&mut rstd),
        };
        k.layer_norm_with_stats(x, &mut y, WIDTH, &ln, stats).unwrap();
        [bits(&y), bits(&mean), bits(&rstd)].concat()
    });
    same_bits(&format!("add_layer_norm {ty}"), k, |k| {
        let (mut y, mut h) = (x.to_vec(), x.to_vec());
        k.add_layer_norm(x, r, &mut y, Some(&mut h), WIDTH, &res, &ln).unwrap();
        [bits(&y), bits(&h)].concat()
    });
    same_bits(&format!("add_layer_norm in place {ty}"), k, |k| {
        let (mut h, mut y) = (x.to_vec(), x.to_vec());
        k.add_layer_norm_inplace(&mut h, r, &mut y, WIDTH, &res, &ln).unwrap();
        [bits(&y), bits(&h)].concat()
    });
    same_bits(&format!("rms_norm {ty}"), k, |k| {
        let mut y = x.to_vec();
        k.rms_norm(x, &mut y, WIDTH, &rms).unwrap();
        bits(&y)
    });
    same_bits(&format!("add_rms_norm {ty}"), k, |k| {
        let mut y = x.to_vec();
        k.add_rms_norm(x, r, &mut y, None, WIDTH, &res, &rms).unwrap();
        bits(&y)
    });
    let ll = LayerNormOptions {
        gamma: Some(gl),
        beta: Some(bl),
        eps: 1e-5,
    };
    same_bits(&format!("layer_norm of long rows {ty}"), k, |k| {
        let mut y = xl.to_vec();
        k.layer_norm(xl, &mut y, long, &ll).unwrap();
        bits(&y)
    });
}

#[test]
fn batch_norm() {
    // Training and inference, `[N, C, S]` = [7, 301, 33] (short segments: channels go by
    // runs) and [3, 41, 1031] (long ones): 301 channels of 231 values, 142 a part (2 parts);
    // 41 channels of 3093 values, 11 a part (3 parts).
    for k in all_kernels() {
        for shape in [[7, 301, 33], [3, 41, 1031]] {
            each_type!(batch_norm_of(k; shape));
        }
    }
}

fn batch_norm_of<E: Element>(k: Kernels, shape: [usize; 3]) {
    let [n, c, sp] = shape;
    let x = narrow::<E>(&values(n * c * sp, 40));
    let (gamma, beta) = (values(c, 41), values(c, 42));
    let mean0 = values(c, 43);
    let var0: Vec<f32> = values(c, 44).iter().map(|v| v.abs() + 0.1).collect();
    let opts = BatchNormOptions {
        gamma: Some(&gamma),
        beta: Some(&beta),
        ..Default::default()
    };
    same_bits(&format!("batch_norm {} {shape:?}", E::NAME), k, |k| {
        let mut y = x.clone();
        k.batch_norm(&x, &mut y, shape, &mean0, &var0, &opts).unwrap();
        bits(&y)
    });
    same_bits(&format!("batch_norm_train {} {shape:?}", E::NAME), k, |k| {
        let (mut y, mut mean, mut var) = (x.clone(), mean0.clone(), var0.clone());
        let (mut bm, mut br) = (vec![0.0; c], vec![0.0; c]);
        let stats = RowStats {
            mean: Some(&mut bm),
            rstd: Some(&mut br),
        };
        k.batch_norm_train_with_stats(&x, &mut y, shape, &mut mean, &mut var, &opts, stats)
            .unwrap();
        [bits(&y), bits(&mean), bits(&var), bits(&bm), bits(&br)].concat()
    });
}

#[test]
fn linear() {
    // By columns: N = 1000 is 16 units of 64 columns; M = 100, K = 300 gives 2 units a part,
    // so 7 parts. By rows: N = 70 (2 units of columns, fewer than 3 threads), M = 500 is 32
    // units of 16 rows, 7 a part (4 parts).
    let (m, kk) = (100, 300);
    let x = values(500 * kk, 10);
    for k in all_kernels() {
        for n in [1000, 70] {
            let w = values(kk * n, 11);
            let b = values(n, 12);
            for ty in [WeightType::F32, WeightType::Bf16] {
                let layer = LinearWeights {
                    weights: &w,
                    layout: WeightLayout::OutIn,
                    in_features: kk,
                    out_features: n,
                    bias: Some(&b),
                };
                let packed = k.pack_linear(&layer, ty).unwrap();
                let rows = if n == 70 { 500 } else { m };
                let x = &x[..rows * kk];
                let r = values(rows * n, 13);
                each_type!(linear_of(k; x, &r, &packed));
            }
        }
    }
}

fn linear_of<E: Element>(k: Kernels, x: &[f32], r: &[f32], packed: &kernels::PackedLinear) {
    let (x, r) = (&narrow::<E>(x), &narrow::<E>(r));
    let n = packed.out_features();
    let opts = LinearOptions::default().activation(Activation::Gelu).residual(r);
    let what = format!("linear {}, N = {n}, {:?} weights", E::NAME, packed.weight_type());
    same_bits(&what, k, |k| {
        let mut y = vec![E::default(); r.len()];
        k.linear(x, packed, &mut y, &opts).unwrap();
        bits(&y)
    });
}

#[test]
fn attention() {
    // Each kernel as it plans for this machine's caches, and with its keys in blocks of 64 (a
    // level-2 cache too small for any head): query chunks of 48 rows are whole query blocks.
    let kernels = all_kernels()
        .into_iter()
        .flat_map(|k| [k, k.with_caches(Caches { l2: 0, ..k.caches() })]);
    for k in kernels {
        // Grouped-query, B = 1, 3 query heads on 1 kv head, Lq = 200: fewer kv heads than
        // threads, so the query rows split too (2 threads: chunks of 144; 3 and 7: of 96).
        let gqa = AttentionShape {
            batch: 1,
            heads: 3,
            kv_heads: 1,
            q_len: 200,
            kv_len: 190,
            head_dim: 40,
            value_dim: 24,
        };
        each_type!(attention_of(k; &gqa, false, true));
        // B = 3, H = 5, a per-head mask, carried scores in and out, the running mean: 15
        // units of 0.8M FMAs, 3 a part (5 parts).
        let shape = AttentionShape::self_attention(3, 5, 131, 48);
        each_type!(attention_of(k; &shape, true, false));
    }
}

fn attention_of<E: Element>(k: Kernels, shape: &AttentionShape, masked: bool, causal: bool) {
    let s = shape;
    let q = narrow::<E>(&values(s.batch * s.heads * s.q_len * s.head_dim, 20));
    let kt = narrow::<E>(&values(s.batch * s.kv_heads * s.kv_len * s.head_dim, 21));
    let v = narrow::<E>(&values(s.batch * s.kv_heads * s.kv_len * s.value_dim, 22));
    let scores = s.batch * s.heads * s.q_len * s.kv_len;
    let mask: Vec<f32> = values(scores, 23)
        .iter()
        .map(|&m| if m > 1.8 { f32::NEG_INFINITY } else { m })
        .collect();
    let prev = values(scores, 24);
    let lengths: Vec<usize> = (0..s.batch).map(|b| s.kv_len - 7 * b).collect();
    let mut opts = AttentionOptions::default();
    opts.causal = causal;
    opts.key_lengths = Some(&lengths);
    if masked {
        opts = opts.mask(&mask, MaskShape::PerHead);
        opts.prev_scores = Some(&prev);
        opts.running_mean_layer = Some(2);
    }
    let what = format!("attention {} {s:?}", E::NAME);
    same_bits(&what, k, |k| {
        let mut out = vec![E::default(); s.batch * s.heads * s.q_len * s.value_dim];
        let mut carried = vec![0.0f32; if masked { scores } else { 0 }];
        let carried_out = if masked { Some(&mut carried[..]) } else { None };
        let mut ws = AttentionWorkspace::new();
        k.attention(s, &q, &kt, &v, &mut out, carried_out, &opts, &mut ws)
            .unwrap();
        [bits(&out), bits(&carried)].concat()
    });
}

#[test]
fn gau() {
    // B = 5 sequences of 97: 5 units of about 3M FMAs, one a part.
    let batched = GauShape {
        batch: 5,
        seq_len: 97,
        dim: 64,
        expand: 128,
        qk_dim: 32,
    };
    // One sequence of 500: split within it, the attention over 11 blocks of 48 rows (as many
    // parts as threads) and the projections over 3 parts of 3 or 4 blocks; causal, with RoPE.
    let single = GauShape {
        batch: 1,
        seq_len: 500,
        ..batched
    };
    for k in all_kernels() {
        for attention in [
            GauAttention::Relu2,
            GauAttention::SoftmaxPlus { min_len: 64 },
            GauAttention::Laplace,
        ] {
            each_type!(gau_of(k; &batched, attention, false));
            each_type!(gau_of(k; &single, attention, true));
        }
    }
}

fn gau_of<E: Element>(k: Kernels, shape: &GauShape, attention: GauAttention, causal: bool) {
    let GauShape {
        batch: b,
        seq_len: t,
        dim: d,
        expand: e,
        qk_dim: s,
    } = *shape;
    let x = narrow::<E>(&values(b * t * d, 30));
    let scaled = |v: Vec<f32>, by: f32| v.into_iter().map(|x| x * by).collect::<Vec<f32>>();
    let w_in = scaled(values(d * (2 * e + s), 31), 0.1);
    let w_out = scaled(values(e * d, 32), 0.1);
    let (gq, bq, gk, bk) = (values(s, 33), values(s, 34), values(s, 35), values(s, 36));
    let weights = GauWeights {
        w_in: &w_in,
        b_in: None,
        gamma_q: &gq,
        beta_q: &bq,
        gamma_k: &gk,
        beta_k: &bk,
        w_out: &w_out,
        b_out: None,
    };
    let lengths: Vec<usize> = (0..b).map(|i| t - 5 * i).collect();
    // A prefix-LM mask per sequence (row `i` sees keys `j < 20 + b` or `j ≤ i`): every row
    // has its own key count.
    let prefix: Vec<f32> = (0..b * t * t)
        .map(|n| {
            let (seq, i, j) = (n / (t * t), n / t % t, n % t);
            if j < 20 + seq || j <= i {
                0.1
            } else {
                f32::NEG_INFINITY
            }
        })
        .collect();
    let opts = GauOptions {
        key_lengths: Some(&lengths),
        attention,
        causal,
        rope: causal.then_some(Rope::HALF_SPLIT.with_width(s / 2)),
        bias: Some(AdditiveMask {
            values: &prefix,
            shape: MaskShape::PerBatch,
        }),
        normalizer: kernels::Normalizer::ValidKeys,
        ..Default::default()
    };
    same_bits(&format!("gau {} {shape:?} {attention:?}", E::NAME), k, |k| {
        let mut out = vec![E::default(); b * t * d];
        k.gau(shape, &x, &weights, &opts, &mut out, &mut GauWorkspace::new())
            .unwrap();
        bits(&out)
    });
}
