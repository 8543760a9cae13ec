//! Hostile shapes at every public entry point: lengths near `usize::MAX`, shape products that
//! overflow, zero dimensions beside non-zero ones, empty slices with huge shapes, on every ISA.
//!
//! Each call must return (never abort or panic; the test profile has overflow checks on), and
//! allocate at most [`SMALL`] bytes on its thread while it runs: a counting global allocator
//! measures that, so a workspace sized from an unvalidated shape, or a buffer allocated before
//! the check that would refuse it, fails the test even where the allocation would succeed.
//! Where the input is inconsistent the result must be an `Err` naming the argument at fault.
//! Each case prints what it returned.

use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::cell::Cell;

mod common;

use common::all_kernels;
use kernels::half::f16;
use kernels::{
    AddNorm, AttentionArgs, AttentionOptions, AttentionShape, AttentionWorkspace, BatchNormOptions, Error, GauOptions,
    GauShape, GauWeights, GauWorkspace, LayerNormOptions, Layout, LinearOptions, LinearWeights, MaskShape, Residual,
    RmsNormOptions, RowStats, SoftmaxOptions, WeightLayout, WeightType,
};

/// Counts the bytes allocated by the current thread.
struct Counting;

thread_local! {
    static ALLOCATED: Cell<usize> = const { Cell::new(0) };
}

fn count(bytes: usize) {
    // `try_with`: a thread being torn down has no counter any more.
    let _ = ALLOCATED.try_with(|a| a.set(a.get().saturating_add(bytes)));
}

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: AllocLayout) -> *mut u8 {
        count(layout.size());
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: AllocLayout) -> *mut u8 {
        count(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: AllocLayout, new_size: usize) -> *mut u8 {
        count(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: AllocLayout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// What a hostile call may allocate: the error's message, nothing sized from the shape.
const SMALL: usize = 4096;

/// Runs `f`, checks the allocation bound, and, where `arg` is given, that it failed naming
/// `arg`; prints the outcome (once, on the best ISA).
fn hostile<T>(case: &str, isa: kernels::Isa, arg: Option<&str>, f: impl FnOnce() -> Result<T, Error>) {
    let before = ALLOCATED.with(Cell::get);
    let result = f();
    let bytes = ALLOCATED.with(Cell::get) - before;
    let outcome = match &result {
        Ok(_) => "Ok".to_string(),
        Err(e) => format!("Err({:?}): {e}", e.arg().unwrap_or("-")),
    };
    assert!(bytes <= SMALL, "{case} on {isa}: allocated {bytes} bytes ({outcome})");
    if let Some(arg) = arg {
        match &result {
            Err(e) => assert_eq!(e.arg(), Some(arg), "{case} on {isa}: {e}"),
            Ok(_) => panic!("{case} on {isa}: accepted, expected an error naming {arg}"),
        }
    }
    if isa == kernels::best_isa() {
        eprintln!("{case}: {outcome} ({bytes} bytes allocated)");
    }
}

const HUGE: usize = usize::MAX / 2 + 3;

#[test]
fn softmax_and_elementwise() {
    for k in all_kernels() {
        let isa = k.isa();
        let (x, mut y) = (vec![1.0f32; 6], vec![0.0f32; 6]);
        let o = SoftmaxOptions::default();
        hostile("softmax n = 0, x of 6", isa, Some("n"), || k.softmax(&x, &mut y, 0, &o));
        hostile("softmax n = usize::MAX, x of 6", isa, Some("x"), || {
            k.softmax(&x, &mut y, usize::MAX, &o)
        });
        hostile("softmax n = usize::MAX, x empty", isa, None, || {
            k.softmax::<f32>(&[], &mut [], usize::MAX, &o)
        });
        hostile("softmax out of 5", isa, Some("out"), || {
            k.softmax(&x, &mut y[..5], 3, &o)
        });
        let mask = [0.0f32; 2];
        let masked = SoftmaxOptions { mask: Some(&mask), ..o };
        hostile("softmax mask of 2, n = 3", isa, Some("mask"), || {
            k.softmax(&x, &mut y, 3, &masked)
        });
        hostile("log_softmax_inplace n = usize::MAX, x of 6", isa, Some("x"), || {
            k.log_softmax_inplace(&mut y, usize::MAX, &o)
        });
        hostile("exp out of 5", isa, Some("out"), || k.exp(&x, &mut y[..5]));
        hostile("gelu out empty", isa, Some("out"), || k.gelu(&x, &mut []));
        let mut h = vec![f16::ZERO; 5];
        hostile("narrow out of 5", isa, Some("out"), || k.narrow(&x, &mut h));
    }
}

#[test]
fn attention() {
    for k in all_kernels() {
        let isa = k.isa();
        let o = AttentionOptions::default();
        let shape = |batch, heads, q_len, kv_len, head_dim| AttentionShape {
            batch,
            heads,
            kv_heads: heads,
            q_len,
            kv_len,
            head_dim,
            value_dim: head_dim,
        };
        let mut ws = AttentionWorkspace::new();
        let (q, mut out) = (vec![0.0f32; 64], vec![0.0f32; 64]);
        let cases: [(&str, AttentionShape, &str); 5] = [
            ("B·H·L·D overflows, slices empty", shape(HUGE, 4, 2, 2, 8), "q"),
            ("Lq·Lk overflows", shape(1, 1, HUGE, HUGE, 1), "q"),
            ("D huge", shape(1, 1, 1, 1, HUGE), "q"),
            ("head_dim 0 beside the rest", shape(1, 2, 4, 4, 0), "shape.head_dim"),
            ("kv_len huge, q 64", shape(1, 1, 8, HUGE, 8), "k"),
        ];
        for (what, s, arg) in cases {
            hostile(&format!("attention: {what}"), isa, Some(arg), || {
                k.attention(&s, &q, &q, &q, &mut out, None, &o, &mut ws)
            });
            hostile(&format!("attention (free): {what}"), isa, Some(arg), || {
                kernels::attention(&s, &q, &q, &q, &mut out, None, &o)
            });
            // Sized from a shape nobody has validated: it may not abort, nor allocate it.
            hostile(&format!("AttentionWorkspace::for_shape: {what}"), isa, None, || {
                Ok::<_, Error>(AttentionWorkspace::for_shape(&s))
            });
        }
        // A score output of Lq·Lk that overflows, a mask whose shape products overflow.
        let s = shape(1, 1, 8, 8, 8);
        let mut scores = vec![0.0f32; 4];
        hostile("attention: scores of 4 for 8×8", isa, Some("scores"), || {
            k.attention(&s, &q, &q, &q, &mut out, Some(&mut scores), &o, &mut ws)
        });
        let mask = [0.0f32; 3];
        let masked = o.mask(&mask, MaskShape::KeyPadding);
        hostile("attention: key padding of 3 for B·Lk = 8", isa, Some("mask"), || {
            k.attention(&s, &q, &q, &q, &mut out, None, &masked, &mut ws)
        });
        // Strided views whose strides overflow.
        let huge = Layout {
            offset: 0,
            batch: HUGE,
            head: HUGE,
            row: HUGE,
        };
        let contiguous = Layout::heads_first(1, 8, 8);
        hostile("attention_args: q strides overflow", isa, Some("q"), || {
            k.attention_args(
                AttentionArgs {
                    shape: s,
                    q: &q,
                    q_layout: huge,
                    k: &q,
                    k_layout: contiguous,
                    v: &q,
                    v_layout: contiguous,
                    out: &mut out,
                    out_layout: contiguous,
                    scores: None,
                    options: o,
                },
                &mut ws,
            )
        });
        hostile(
            "attention_args: Layout helpers with overflowing products",
            isa,
            Some("k"),
            || {
                k.attention_args(
                    AttentionArgs {
                        shape: s,
                        q: &q,
                        q_layout: Layout::heads_first(HUGE, HUGE, 8),
                        k: &q,
                        k_layout: Layout::tokens_first(HUGE, HUGE, 0, 8),
                        v: &q,
                        v_layout: contiguous,
                        out: &mut out,
                        out_layout: contiguous,
                        scores: None,
                        options: o,
                    },
                    &mut ws,
                )
            },
        );
        hostile("attention_args: offset past the slice", isa, Some("out"), || {
            k.attention_args(
                AttentionArgs {
                    shape: s,
                    q: &q,
                    q_layout: contiguous,
                    k: &q,
                    k_layout: contiguous,
                    v: &q,
                    v_layout: contiguous,
                    out: &mut out,
                    out_layout: Layout {
                        offset: usize::MAX,
                        ..contiguous
                    },
                    scores: None,
                    options: o,
                },
                &mut ws,
            )
        });
    }
}

#[test]
fn gau() {
    for k in all_kernels() {
        let isa = k.isa();
        let (d, e, s) = (4, 2, 2);
        let (w_in, w_out, ones) = (vec![0.1f32; d * (2 * e + s)], vec![0.1f32; e * d], [1.0f32; 2]);
        let weights = GauWeights {
            w_in: &w_in,
            b_in: None,
            gamma_q: &ones,
            beta_q: &ones,
            gamma_k: &ones,
            beta_k: &ones,
            w_out: &w_out,
            b_out: None,
        };
        let shape = |batch, seq_len, dim, expand, qk_dim| GauShape {
            batch,
            seq_len,
            dim,
            expand,
            qk_dim,
        };
        let (x, mut out) = (vec![0.0f32; 12], vec![0.0f32; 12]);
        let mut ws = GauWorkspace::new();
        let o = GauOptions::default();
        hostile("gau: B·T·d overflows, x of 12", isa, Some("x"), || {
            k.gau(&shape(HUGE, 3, d, e, s), &x, &weights, &o, &mut out, &mut ws)
        });
        hostile("gau: T huge (T² overflows)", isa, Some("x"), || {
            k.gau(&shape(1, HUGE, d, e, s), &x, &weights, &o, &mut out, &mut ws)
        });
        hostile("gau: expand huge, weights small", isa, Some("shape"), || {
            k.gau(&shape(1, 3, d, HUGE, s), &x, &weights, &o, &mut out, &mut ws)
        });
        hostile("gau: dim 0 beside the rest", isa, Some("shape.dim"), || {
            k.gau(&shape(1, 3, 0, e, s), &x, &weights, &o, &mut out, &mut ws)
        });
        hostile("pack_gau_weights: (2e + s)·d overflows", isa, Some("shape"), || {
            k.pack_gau_weights(&shape(1, 1, HUGE, HUGE, s), &weights)
        });
        let lengths = [usize::MAX];
        let padded = GauOptions {
            key_lengths: Some(&lengths),
            ..o
        };
        hostile("gau: a key length past T", isa, Some("key_lengths"), || {
            k.gau(&shape(1, 3, d, e, s), &x, &weights, &padded, &mut out, &mut ws)
        });
    }
}

#[test]
fn linear() {
    for k in all_kernels() {
        let isa = k.isa();
        let w = vec![0.5f32; 6];
        let weights = |in_features, out_features| LinearWeights {
            weights: &w,
            layout: WeightLayout::InOut,
            in_features,
            out_features,
            bias: None,
        };
        for ty in [WeightType::F32, WeightType::Bf16] {
            hostile("pack_linear: K·N overflows", isa, Some("weights.weights"), || {
                k.pack_linear(&weights(HUGE, 4), ty)
            });
            hostile("pack_linear: K huge, N 1", isa, Some("weights.weights"), || {
                k.pack_linear(&weights(HUGE, 1), ty)
            });
            hostile("pack_linear: K 0 beside N 6", isa, Some("weights.in_features"), || {
                k.pack_linear(&weights(0, 6), ty)
            });
        }
        let packed = k.pack_linear(&weights(2, 3), WeightType::F32).expect("valid");
        let (x, mut y) = (vec![1.0f32; 5], vec![0.0f32; 9]);
        let o = LinearOptions::default();
        hostile("linear: x of 5 for K = 2", isa, Some("x"), || {
            k.linear(&x, &packed, &mut y, &o)
        });
        hostile("linear: out of 9 for M·N = 6", isa, Some("out"), || {
            k.linear(&x[..4], &packed, &mut y, &o)
        });
        let r = vec![0.0f32; 2];
        hostile("linear: residual of 2 for M·N = 6", isa, Some("opts.residual"), || {
            k.linear(&x[..4], &packed, &mut y[..6], &o.residual(&r))
        });
    }
}

#[test]
fn norms() {
    for k in all_kernels() {
        let isa = k.isa();
        let (x, mut y) = (vec![1.0f32; 6], vec![0.0f32; 6]);
        let ln = LayerNormOptions::default();
        let rms = RmsNormOptions::default();
        hostile("layer_norm d = 0, x of 6", isa, Some("d"), || {
            k.layer_norm(&x, &mut y, 0, &ln)
        });
        hostile("layer_norm d = usize::MAX, x of 6", isa, Some("x"), || {
            k.layer_norm(&x, &mut y, usize::MAX, &ln)
        });
        hostile("layer_norm d = usize::MAX, x empty", isa, None, || {
            k.layer_norm::<f32>(&[], &mut [], usize::MAX, &ln)
        });
        let gamma = [1.0f32; 2];
        hostile("layer_norm gamma of 2, d = 3", isa, Some("gamma"), || {
            k.layer_norm(
                &x,
                &mut y,
                3,
                &LayerNormOptions {
                    gamma: Some(&gamma),
                    ..ln
                },
            )
        });
        let mut mean = [0.0f32; 1];
        hostile("layer_norm_with_stats mean of 1 for 2 rows", isa, Some("mean"), || {
            let stats = RowStats {
                mean: Some(&mut mean),
                rstd: None,
            };
            k.layer_norm_with_stats(&x, &mut y, 3, &ln, stats)
        });
        hostile("add_layer_norm r of 5", isa, Some("r"), || {
            k.add_layer_norm(&x, &x[..5], &mut y, None, 3, &Residual::default(), &ln)
        });
        hostile("rms_norm d = usize::MAX, x of 6", isa, Some("x"), || {
            k.rms_norm(&x, &mut y, usize::MAX, &rms)
        });
        hostile("add_rms_norm_inplace out of 5", isa, Some("out"), || {
            let mut stream = x.clone();
            k.add_rms_norm_inplace(&mut stream, &x, &mut y[..5], 3, &Residual::default(), &rms)
        });
        hostile("AddNorm width 0", isa, Some("width"), || {
            k.add_and_layer_norm(AddNorm::new(&x, &x, &mut y, 0), &ln)
        });
        let bn = BatchNormOptions::default();
        let (m, v) = (vec![0.0f32; 2], vec![1.0f32; 2]);
        let cases: [(&str, [usize; 3], &str); 4] = [
            ("N·C·S overflows", [HUGE, 2, 4], "shape"),
            ("C huge", [1, HUGE, 1], "x"),
            ("S usize::MAX, N 0", [0, 2, usize::MAX], "x"),
            ("C 0 beside N, S", [3, 0, 2], "x"),
        ];
        for (what, shape, arg) in cases {
            hostile(&format!("batch_norm: {what}"), isa, Some(arg), || {
                k.batch_norm(&x, &mut y, shape, &m, &v, &bn)
            });
            let (mut m, mut v) = (m.clone(), v.clone());
            hostile(&format!("batch_norm_train: {what}"), isa, Some(arg), || {
                k.batch_norm_train(&x, &mut y, shape, &mut m, &mut v, &bn)
            });
        }
    }
}
