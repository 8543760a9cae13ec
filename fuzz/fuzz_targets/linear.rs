//! Differential fuzzing of `linear`: any shape (M up to 20 rows, K up to 300 columns, past the
//! 256-column chunk of half-typed inputs, N up to 150, past two panels of every tile), either
//! weight layout, f32 or bf16 weights, every activation, with or without bias and residual,
//! `X`, `R` and `Y` in f32, f16 or bf16, values as raw bits (NaN, ±∞, subnormals, ±1e38
//! reachable) or small integers scaled, on every ISA the host has, against
//! `reference::check_linear` (with bf16 weights: against the weights rounded to bf16, as the
//! bound is stated). A call with a wrong length, or weights packed for another ISA, must come
//! back as `Err` naming that argument, never as a panic or an out-of-bounds access.
#![no_main]

use arbitrary::Arbitrary;
use kernels::half::{bf16, f16};
use kernels::{available_isas, Activation, Element, Kernels, LinearOptions, LinearWeights, WeightLayout, WeightType};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input {
    m: u8,
    k: u16,
    n: u8,
    out_in: bool,
    bf16_weights: bool,
    activation: u8,
    bias: bool,
    residual: bool,
    /// Storage type of `X`, `R` and `Y`: f32, f16, bf16.
    ty: u8,
    /// Raw bits, or (with `ordinary`) small integers around `offset` in steps of `step`.
    values: Vec<u32>,
    ordinary: bool,
    offset_bits: u32,
    step_bits: u32,
    /// Perturbs the length of one argument: (which, by how much).
    skew: Option<(u8, u8)>,
}

/// The values of the call, drawn cyclically from the input.
struct Pool<'a> {
    input: &'a Input,
    at: usize,
}

impl Pool<'_> {
    fn next(&mut self) -> f32 {
        let bits = self
            .input
            .values
            .get(self.at % self.input.values.len().max(1))
            .copied()
            .unwrap_or(0);
        self.at += 1;
        if self.input.ordinary {
            let step = f32::from_bits(self.input.step_bits);
            f32::from_bits(self.input.offset_bits) + (bits as i8 as f32) * step
        } else {
            f32::from_bits(bits)
        }
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.next()).collect()
    }
}

const ACTIVATIONS: [(Activation, reference::Activation); 5] = [
    (Activation::Identity, reference::Activation::Identity),
    (Activation::Relu, reference::Activation::Relu),
    (Activation::Gelu, reference::Activation::Gelu),
    (Activation::GeluTanh, reference::Activation::GeluTanh),
    (Activation::Swish, reference::Activation::Swish),
];

fuzz_target!(|input: Input| {
    match input.ty % 3 {
        0 => run::<f32>(&input),
        1 => run::<f16>(&input),
        _ => run::<bf16>(&input),
    }
});

fn run<E: Element + reference::Element>(input: &Input) {
    let m = input.m as usize % 21;
    let k = input.k as usize % 300 + 1;
    let n = input.n as usize % 150 + 1;
    let (act, oracle_act) = ACTIVATIONS[input.activation as usize % ACTIVATIONS.len()];
    let ty = if input.bf16_weights {
        WeightType::Bf16
    } else {
        WeightType::F32
    };
    let layout = if input.out_in {
        WeightLayout::OutIn
    } else {
        WeightLayout::InOut
    };
    let mut pool = Pool { input, at: 0 };
    let w = pool.vec(k * n);
    let bias = input.bias.then(|| pool.vec(n));
    let x: Vec<E> = pool.vec(m * k).into_iter().map(<E as Element>::from_f32).collect();
    let r: Option<Vec<E>> = input
        .residual
        .then(|| pool.vec(m * n).into_iter().map(<E as Element>::from_f32).collect());

    // `w` is given in `layout`; the oracle reads `W[K, N]` (with bf16 weights, their rounding).
    let w_oracle: Vec<f32> = match layout {
        WeightLayout::InOut => w.clone(),
        WeightLayout::OutIn => (0..k * n).map(|i| w[(i % n) * k + i / n]).collect(),
    };
    let effective: Vec<f32> = if input.bf16_weights {
        w_oracle.iter().map(|&v| bf16::from_f32(v).to_f32()).collect()
    } else {
        w_oracle
    };
    let weights = LinearWeights {
        weights: &w,
        layout,
        in_features: k,
        out_features: n,
        bias: bias.as_deref(),
    };

    let isas = available_isas();
    for (at, &isa) in isas.iter().enumerate() {
        let kern = Kernels::for_isa(isa).unwrap();
        let packed = kern.pack_linear(&weights, ty).unwrap();
        assert_eq!(packed.weight_type(), ty);

        if let Some((which, by)) = input.skew {
            // One wrong argument: an `Err` naming it.
            let by = by as usize % 3 + 1;
            let (name, res) = match which % 4 {
                0 => {
                    // Any length is a multiple of K = 1.
                    if k == 1 {
                        continue;
                    }
                    let xs = vec![zero::<E>(); m * k + (by - 1) % (k - 1) + 1];
                    let mut out = vec![zero::<E>(); m * n];
                    ("x", kern.linear(&xs, &packed, &mut out, &LinearOptions::default()))
                }
                1 => {
                    let mut out = vec![zero::<E>(); m * n + by];
                    ("out", kern.linear(&x, &packed, &mut out, &LinearOptions::default()))
                }
                2 => {
                    let rs = vec![zero::<E>(); m * n + by];
                    let mut out = vec![zero::<E>(); m * n];
                    let opts = LinearOptions::default().residual(&rs);
                    ("opts.residual", kern.linear(&x, &packed, &mut out, &opts))
                }
                _ => {
                    // Weights packed for another ISA.
                    let Some(&other) = isas.get((at + 1) % isas.len()).filter(|&&o| o != isa) else {
                        continue;
                    };
                    let foreign = Kernels::for_isa(other).unwrap().pack_linear(&weights, ty).unwrap();
                    let mut out = vec![zero::<E>(); m * n];
                    (
                        "weights",
                        kern.linear(&x, &foreign, &mut out, &LinearOptions::default()),
                    )
                }
            };
            let e = res.expect_err(name);
            assert_eq!(e.arg(), Some(name), "{isa}: {e}");
            continue;
        }

        let mut out = vec![<E as Element>::from_f32(f32::NAN); m * n];
        let mut opts = LinearOptions::default().activation(act);
        if let Some(r) = &r {
            opts = opts.residual(r);
        }
        kern.linear(&x, &packed, &mut out, &opts).unwrap();
        if let Err(e) = reference::check_linear(&x, &effective, (k, n), bias.as_deref(), oracle_act, r.as_deref(), &out)
        {
            panic!(
                "{isa} {} M={m} K={k} N={n} {act:?} {ty:?} {layout:?}: {e}",
                <E as reference::Element>::NAME
            );
        }
    }
}

fn zero<E: Element>() -> E {
    E::from_f32(0.0)
}
