//! Thread safety: every public kernel run from many threads at once, on every ISA and through
//! the free functions (which share the dispatch cache), each thread with its own inputs and its
//! own reusable workspaces, every result checked against the f64 oracle; and the dispatch cache
//! initialised once under a race.

mod common;

use std::sync::Barrier;

use kernels::{
    AttentionOptions, AttentionShape, AttentionWorkspace, BatchNormOptions, GauOptions, GauShape, GauWeights,
    GauWorkspace, Kernels, LayerNormOptions, MaskedRows, Normalizer, Residual, RmsNormOptions, RowStats, ScoreScale,
    SoftmaxOptions,
};

const THREADS: usize = 8;
const ITERATIONS: usize = 25;

/// Where a call goes: the kernels of one ISA, or the crate's free functions.
#[derive(Clone, Copy, Debug)]
enum Via {
    Isa(Kernels),
    Free,
}

/// `$via.$f(args)` or `kernels::$f(args)`.
macro_rules! call {
    ($via:expr, $f:ident($($arg:expr),* $(,)?)) => {
        match $via {
            Via::Isa(k) => k.$f($($arg),*),
            Via::Free => kernels::$f($($arg),*),
        }
    };
}

/// A small deterministic generator: each thread and iteration draws its own inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next() * scale).collect()
    }
    fn below(&mut self, n: usize) -> usize {
        ((self.next() + 1.0) * 0.5 * n as f32) as usize % n
    }
}

/// Every kernel once on inputs drawn from `rng`, checked against the oracle.
fn every_kernel(via: Via, rng: &mut Rng, attn_ws: &mut AttentionWorkspace, gau_ws: &mut GauWorkspace) {
    let ctx = format!("{via:?}");
    let n = 37 + rng.below(90);

    // exp, sigmoid, swish.
    let x = rng.vec(n, 40.0);
    let mut y = vec![0.0f32; n];
    call!(via, exp(&x, &mut y)).unwrap();
    reference::check_exp(&x, &y).unwrap_or_else(|m| panic!("{ctx}: exp: {m}"));
    call!(via, sigmoid(&x, &mut y)).unwrap();
    reference::check_activation(&x, false, &y).unwrap_or_else(|m| panic!("{ctx}: sigmoid: {m}"));
    let mut z = x.clone();
    call!(via, swish_inplace(&mut z)).unwrap();
    reference::check_activation(&x, true, &z).unwrap_or_else(|m| panic!("{ctx}: swish: {m}"));

    // softmax and log-softmax, with a scale and a mask.
    let (rows, d) = (3, 5 + rng.below(60));
    let x = rng.vec(rows * d, 8.0);
    let mask = rng.vec(d, 4.0);
    let opts = SoftmaxOptions {
        scale: 0.5,
        mask: Some(&mask),
        masked_rows: MaskedRows::Zero,
    };
    let mut y = vec![0.0f32; rows * d];
    call!(via, softmax(&x, &mut y, d, &opts)).unwrap();
    reference::check_softmax(&x, d, 0.5, Some(&mask), reference::MaskedRows::Zero, false, &y)
        .unwrap_or_else(|m| panic!("{ctx}: softmax: {m}"));
    let mut z = x.clone();
    call!(via, log_softmax_inplace(&mut z, d, &opts)).unwrap();
    reference::check_softmax(&x, d, 0.5, Some(&mask), reference::MaskedRows::Zero, true, &z)
        .unwrap_or_else(|m| panic!("{ctx}: log_softmax: {m}"));

    // LayerNorm with γ, β and the statistics; Add & LayerNorm with α, bias and h.
    let offset = rng.next() * 100.0;
    let x: Vec<f32> = rng.vec(rows * d, 3.0).iter().map(|v| v + offset).collect();
    let r = rng.vec(rows * d, 1.0);
    let (gamma, beta, bias) = (rng.vec(d, 2.0), rng.vec(d, 1.0), rng.vec(d, 0.5));
    let ln = LayerNormOptions {
        gamma: Some(&gamma),
        beta: Some(&beta),
        eps: 1e-5,
    };
    let (mut mean, mut rstd) = (vec![0.0f32; rows], vec![0.0f32; rows]);
    let stats = RowStats {
        mean: Some(&mut mean),
        rstd: Some(&mut rstd),
    };
    call!(via, layer_norm_with_stats(&x, &mut y, d, &ln, stats)).unwrap();
    reference::check_layer_norm(&x, d, Some(&gamma), Some(&beta), 1e-5, &y, Some(&mean), Some(&rstd))
        .unwrap_or_else(|m| panic!("{ctx}: layer_norm: {m}"));
    let residual = Residual {
        alpha: 1.5,
        bias: Some(&bias),
    };
    let mut h = vec![0.0f32; rows * d];
    call!(via, add_layer_norm(&x, &r, &mut y, Some(&mut h), d, &residual, &ln)).unwrap();
    let h_ref = reference::residual(&x, &r, Some(&bias), 1.5, d);
    assert_eq!(h, h_ref, "{ctx}: add_layer_norm: h");
    reference::check_layer_norm(&h_ref, d, Some(&gamma), Some(&beta), 1e-5, &y, None, None)
        .unwrap_or_else(|m| panic!("{ctx}: add_layer_norm: {m}"));

    // RMSNorm and Add & RMSNorm (in place).
    let rn = RmsNormOptions {
        gain: Some(&gamma),
        eps: 1e-6,
    };
    call!(via, rms_norm(&x, &mut y, d, &rn)).unwrap();
    reference::check_rms_norm(&x, d, Some(&gamma), 1e-6, &y).unwrap_or_else(|m| panic!("{ctx}: rms_norm: {m}"));
    let mut xi = x.clone();
    call!(via, add_rms_norm_inplace(&mut xi, &r, &mut y, d, &residual, &rn)).unwrap();
    assert_eq!(xi, h_ref, "{ctx}: add_rms_norm_inplace: h");
    reference::check_rms_norm(&h_ref, d, Some(&gamma), 1e-6, &y).unwrap_or_else(|m| panic!("{ctx}: add_rms_norm: {m}"));

    // BatchNorm, inference and training.
    let shape = [2, 3, 4 + rng.below(20)];
    let len = shape.iter().product();
    let x = rng.vec(len, 5.0);
    let mut y = vec![0.0f32; len];
    let rm = rng.vec(3, 1.0);
    let rv: Vec<f32> = rng.vec(3, 1.0).iter().map(|v| v.abs() + 0.5).collect();
    let (g3, b3) = (rng.vec(3, 2.0), rng.vec(3, 1.0));
    let bn = BatchNormOptions {
        gamma: Some(&g3),
        beta: Some(&b3),
        eps: 1e-5,
        momentum: 0.1,
    };
    call!(via, batch_norm(&x, &mut y, shape, &rm, &rv, &bn)).unwrap();
    reference::check_batch_norm(&x, shape, &rm, &rv, Some(&g3), Some(&b3), 1e-5, &y)
        .unwrap_or_else(|m| panic!("{ctx}: batch_norm: {m}"));
    let (mut rm2, mut rv2) = (rm.clone(), rv.clone());
    call!(via, batch_norm_train(&x, &mut y, shape, &mut rm2, &mut rv2, &bn)).unwrap();
    let got = reference::BatchNormTrainOutputs {
        y: &y,
        running_mean: &rm2,
        running_var: &rv2,
        mean: None,
        rstd: None,
    };
    reference::check_batch_norm_train(&x, shape, &rm, &rv, Some(&g3), Some(&b3), 1e-5, 0.1, got)
        .unwrap_or_else(|m| panic!("{ctx}: batch_norm_train: {m}"));

    // Attention: grouped heads, causal, with the scores out; the shape varies between calls so
    // the workspace is resized while other threads use theirs.
    let shape = AttentionShape {
        batch: 1,
        heads: 4,
        kv_heads: 2,
        q_len: 5 + rng.below(12),
        kv_len: 7 + rng.below(20),
        head_dim: 8 + rng.below(9),
        value_dim: 8,
    };
    let q = rng.vec(shape.batch * shape.heads * shape.q_len * shape.head_dim, 1.0);
    let k = rng.vec(shape.batch * shape.kv_heads * shape.kv_len * shape.head_dim, 1.0);
    let v = rng.vec(shape.batch * shape.kv_heads * shape.kv_len * shape.value_dim, 1.0);
    let mut out = vec![0.0f32; shape.batch * shape.heads * shape.q_len * shape.value_dim];
    let mut scores = vec![0.0f32; shape.batch * shape.heads * shape.q_len * shape.kv_len];
    let opts = AttentionOptions::default().causal(true);
    match via {
        Via::Isa(kern) => kern.attention(&shape, &q, &k, &v, &mut out, Some(&mut scores), &opts, attn_ws),
        Via::Free => kernels::attention(&shape, &q, &k, &v, &mut out, Some(&mut scores), &opts),
    }
    .unwrap();
    let rshape = reference::AttentionShape {
        batch: shape.batch,
        heads: shape.heads,
        kv_heads: shape.kv_heads,
        q_len: shape.q_len,
        kv_len: shape.kv_len,
        head_dim: shape.head_dim,
        value_dim: shape.value_dim,
    };
    let ropts = reference::AttentionOptions {
        scale: None,
        mask: None,
        key_lengths: None,
        causal: true,
        prev_scores: None,
        running_mean_layer: None,
        carry_masked: false,
        masked_rows: reference::MaskedRows::Zero,
    };
    reference::check_attention(&rshape, &q, &k, &v, &ropts, &out, Some(&scores))
        .unwrap_or_else(|m| panic!("{ctx}: attention: {m}"));

    // GAU.
    let shape = GauShape {
        batch: 1,
        seq_len: 4 + rng.below(8),
        dim: 8,
        expand: 12,
        qk_dim: 4,
    };
    let w = 2 * shape.expand + shape.qk_dim;
    let x = rng.vec(shape.batch * shape.seq_len * shape.dim, 1.0);
    let w_in = rng.vec(shape.dim * w, 1.0 / (shape.dim as f32).sqrt());
    let b_in = rng.vec(w, 0.5);
    let (gq, bq, gk, bk) = (
        rng.vec(shape.qk_dim, 1.0),
        rng.vec(shape.qk_dim, 0.5),
        rng.vec(shape.qk_dim, 1.0),
        rng.vec(shape.qk_dim, 0.5),
    );
    let w_out = rng.vec(shape.expand * shape.dim, 1.0 / (shape.expand as f32).sqrt());
    let b_out = rng.vec(shape.dim, 0.5);
    let weights = GauWeights {
        w_in: &w_in,
        b_in: Some(&b_in),
        gamma_q: &gq,
        beta_q: &bq,
        gamma_k: &gk,
        beta_k: &bk,
        w_out: &w_out,
        b_out: Some(&b_out),
    };
    let opts = GauOptions {
        scale: ScoreScale::InvSqrtQkDim,
        normalizer: Normalizer::SeqLen,
        causal: true,
        ..Default::default()
    };
    let mut out = vec![0.0f32; shape.batch * shape.seq_len * shape.dim];
    match via {
        Via::Isa(kern) => kern.gau(&shape, &x, &weights, &opts, &mut out, gau_ws),
        Via::Free => kernels::gau(&shape, &x, &weights, &opts, &mut out),
    }
    .unwrap();
    let rshape = reference::GauShape {
        batch: shape.batch,
        seq_len: shape.seq_len,
        dim: shape.dim,
        expand: shape.expand,
        qk_dim: shape.qk_dim,
    };
    let rparams = reference::GauParams {
        w_in: &w_in,
        b_in: Some(&b_in),
        gamma_q: &gq,
        beta_q: &bq,
        gamma_k: &gk,
        beta_k: &bk,
        w_out: &w_out,
        b_out: Some(&b_out),
        scale: reference::ScoreScale::InvSqrtQkDim,
        normalizer: reference::Normalizer::SeqLen,
        key_lengths: None,
        causal: true,
        bias: None,
        rope: None,
        attention: reference::Attention::Relu2,
    };
    reference::check_gau(&rshape, &x, &rparams, &out).unwrap_or_else(|m| panic!("{ctx}: gau: {m}"));
}

#[test]
fn every_kernel_from_many_threads_matches_the_oracle() {
    let mut vias: Vec<Via> = common::all_kernels().into_iter().map(Via::Isa).collect();
    vias.push(Via::Free);
    let barrier = Barrier::new(THREADS);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (vias, barrier) = (&vias, &barrier);
            s.spawn(move || {
                // Workspaces owned by the thread, reused across calls, shapes and ISAs.
                let mut attn_ws = AttentionWorkspace::new();
                let mut gau_ws = GauWorkspace::new();
                barrier.wait();
                for i in 0..ITERATIONS {
                    // Threads start on different ISAs, so different paths run at the same time.
                    for j in 0..vias.len() {
                        let via = vias[(t + j) % vias.len()];
                        let mut rng = Rng(((t * ITERATIONS + i) * 64 + j) as u64 + 1);
                        every_kernel(via, &mut rng, &mut attn_ws, &mut gau_ws);
                    }
                }
            });
        }
    });
}

/// Calls `Kernels::detected` from many threads released at once by a barrier: all must get
/// the same kernels. Meaningful only in a process where nothing called it before, which
/// [`detected_is_initialised_once_in_a_fresh_process`] arranges.
#[test]
fn detected_race() {
    let barrier = Barrier::new(THREADS);
    let isas: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    format!("{:?}", Kernels::detected().map(|k| k.isa()))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        isas.iter().all(|i| *i == isas[0]),
        "threads saw different ISAs: {isas:?}"
    );
    assert_eq!(isas[0], format!("{:?}", Kernels::from_env().map(|k| k.isa())));
    // Later calls see the cached value.
    assert_eq!(isas[0], format!("{:?}", Kernels::detected().map(|k| k.isa())));
}

/// Runs [`detected_race`] alone in a new process of this test binary, so that the cache is
/// empty when the threads race for it (in this process another test may have filled it).
#[test]
fn detected_is_initialised_once_in_a_fresh_process() {
    let exe = std::env::current_exe().unwrap();
    // Under emulation the child must go through the same runner as this process (qemu with
    // its sysroot flags): `scripts/test-aarch64.sh` puts that command in KERNELS_TEST_RUNNER.
    let mut cmd = match std::env::var("KERNELS_TEST_RUNNER") {
        Ok(runner) if !runner.trim().is_empty() => {
            let mut words = runner.split_whitespace();
            let mut cmd = std::process::Command::new(words.next().unwrap());
            cmd.args(words).arg(&exe);
            cmd
        }
        _ => std::process::Command::new(&exe),
    };
    let out = cmd
        .args(["detected_race", "--exact", "--test-threads=1"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
