//! Differential fuzzing of the f16/bf16 forms of the kernels: any bit pattern of the storage
//! type (NaN, ±∞, subnormals, ±65504 all reachable), shape, offset and kernel, on every ISA the
//! host has. Two oracles: the half-typed result must be bit for bit the f32 kernel's result
//! on the widened input, rounded once to the type (the contract of `kernels::Element`); and
//! it must pass `reference`'s check of the documented bound for the type. ASan watches the
//! 16-bit partial loads and stores of the tails.
#![no_main]

use arbitrary::Arbitrary;
use kernels::half::{bf16, f16};
use kernels::{
    available_isas, AttentionOptions, AttentionShape, AttentionWorkspace, Element, Kernels, LayerNormOptions,
    Residual, RmsNormOptions, SoftmaxOptions,
};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input {
    op: u8,
    bf16: bool,
    /// Row length (or head dimension).
    n: u8,
    rows: u8,
    /// Elements of padding before the input slice (any 2-byte alignment).
    offset: u8,
    /// Raw bits of the storage type.
    values: Vec<u16>,
    scale_bits: Option<u32>,
}

/// The storage types, with what the checks need of both crates' traits.
trait Half: Element + reference::Element {
    fn from_bits(b: u16) -> Self;
    fn bits(self) -> u16;
}
impl Half for f16 {
    fn from_bits(b: u16) -> Self {
        f16::from_bits(b)
    }
    fn bits(self) -> u16 {
        self.to_bits()
    }
}
impl Half for bf16 {
    fn from_bits(b: u16) -> Self {
        bf16::from_bits(b)
    }
    fn bits(self) -> u16 {
        self.to_bits()
    }
}

/// `got` is `want` rounded to `E`, element by element (any NaN for a NaN).
fn rounded_once<E: Half>(what: &str, got: &[E], want: &[f32]) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let r = <E as Element>::from_f32(*w);
        let nan = <E as Element>::to_f32(*g).is_nan() && w.is_nan();
        assert!(g.bits() == r.bits() || nan, "{what}: element {i}: {g:?} is not {w:e} rounded ({r:?})");
    }
}

fn run<E: Half>(input: &Input) {
    let n = input.n as usize % 80;
    let rows = input.rows as usize % 5;
    let len = rows * n;
    let offset = input.offset as usize % 16;
    let value = |i: usize| E::from_bits(input.values.get(i % input.values.len().max(1)).copied().unwrap_or(0x3c00));
    let mut buf: Vec<E> = (0..offset).map(|_| <E as Element>::from_f32(0.0)).collect();
    buf.extend((0..len).map(value));
    let x = &buf[offset..];
    let wide: Vec<f32> = x.iter().map(|v| <E as Element>::to_f32(*v)).collect();
    let scale = input.scale_bits.map_or(1.0, f32::from_bits);
    let scale = if scale.is_finite() { scale } else { 1.0 };

    for isa in available_isas() {
        let k = Kernels::for_isa(isa).unwrap();
        let mut y = vec![<E as Element>::from_f32(0.0); len];
        let mut want = vec![0.0f32; len];
        let what = format!("{isa} {} op {}", <E as Element>::NAME, input.op % 8);
        match input.op % 8 {
            op @ (0 | 1) => {
                let (opts, log) = (SoftmaxOptions { scale, ..Default::default() }, op == 1);
                if n == 0 {
                    continue;
                }
                if log {
                    k.log_softmax(x, &mut y, n, &opts).unwrap();
                    k.log_softmax(&wide, &mut want, n, &opts).unwrap();
                } else {
                    k.softmax(x, &mut y, n, &opts).unwrap();
                    k.softmax(&wide, &mut want, n, &opts).unwrap();
                }
                rounded_once(&what, &y, &want);
                let policy = reference::MaskedRows::Zero;
                if let Err(m) = reference::check_softmax(x, n, scale, None, policy, log, &y) {
                    panic!("{what}: {m}");
                }
            }
            op @ (2..=4) => {
                let (half, single) = match op {
                    2 => (k.exp(x, &mut y), k.exp(&wide, &mut want)),
                    3 => (k.sigmoid(x, &mut y), k.sigmoid(&wide, &mut want)),
                    _ => (k.swish(x, &mut y), k.swish(&wide, &mut want)),
                };
                half.and(single).unwrap();
                rounded_once(&what, &y, &want);
                let checked = if op == 2 {
                    reference::check_exp(x, &y)
                } else {
                    reference::check_activation(x, op == 4, &y)
                };
                if let Err(m) = checked {
                    panic!("{what}: {m}");
                }
                let mut back = vec![0.0f32; len];
                k.widen(x, &mut back).unwrap();
                // Exact, and NaN stays NaN (a signalling NaN may keep or lose its quiet bit).
                let same = |(a, b): (&f32, &f32)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
                assert!(back.iter().zip(&wide).all(same), "{what}: widen");
                let mut narrowed = vec![<E as Element>::from_f32(0.0); len];
                k.narrow(&want, &mut narrowed).unwrap();
                rounded_once(&what, &narrowed, &want);
            }
            5 if n > 0 => {
                let opts = LayerNormOptions { eps: 1e-5, ..Default::default() };
                k.layer_norm(x, &mut y, n, &opts).unwrap();
                k.layer_norm(&wide, &mut want, n, &opts).unwrap();
                rounded_once(&what, &y, &want);
                if let Err(m) = reference::check_layer_norm(x, n, None, None, opts.eps, &y, None, None) {
                    panic!("{what}: {m:?}");
                }
            }
            6 if n > 0 => {
                // Add & RMSNorm with the h output: h is the f32 residual rounded once, y comes
                // from the f32 residual (never from the rounded h).
                let r: Vec<E> = x.iter().rev().copied().collect();
                let rw: Vec<f32> = r.iter().map(|v| <E as Element>::to_f32(*v)).collect();
                let mut h = vec![<E as Element>::from_f32(0.0); len];
                let mut hw = vec![0.0f32; len];
                let opts = RmsNormOptions { eps: 1e-5, ..Default::default() };
                k.add_rms_norm(x, &r, &mut y, Some(&mut h), n, &Residual::default(), &opts).unwrap();
                k.add_rms_norm(&wide, &rw, &mut want, Some(&mut hw), n, &Residual::default(), &opts).unwrap();
                rounded_once(&what, &y, &want);
                rounded_once(&what, &h, &hw);
                let exact_h = reference::residual(&wide, &rw, None, 1.0, n);
                if let Err(m) = reference::check_rms_norm(&exact_h, n, None, opts.eps, &y) {
                    panic!("{what}: {m:?}");
                }
            }
            7 if n > 0 => {
                // One head of attention, Lq = rows + 1 queries over the same rows as keys and
                // values, Dk = Dv = n.
                let lq = rows.max(1);
                let shape = AttentionShape {
                    batch: 1,
                    heads: 1,
                    kv_heads: 1,
                    q_len: lq,
                    kv_len: rows.max(1),
                    head_dim: n,
                    value_dim: n,
                };
                let kv: Vec<E> = (0..rows.max(1) * n).map(|i| value(i + 7)).collect();
                let q: Vec<E> = (0..lq * n).map(value).collect();
                let widen = |v: &[E]| -> Vec<f32> { v.iter().map(|e| <E as Element>::to_f32(*e)).collect() };
                let (qw, kw) = (widen(&q), widen(&kv));
                let opts = AttentionOptions::default().scale(scale);
                let mut out = vec![<E as Element>::from_f32(0.0); lq * n];
                let mut out_w = vec![0.0f32; lq * n];
                let mut ws = AttentionWorkspace::new();
                k.attention(&shape, &q, &kv, &kv, &mut out, None, &opts, &mut ws).unwrap();
                k.attention(&shape, &qw, &kw, &kw, &mut out_w, None, &opts, &mut ws).unwrap();
                rounded_once(&what, &out, &out_w);
                let rshape = reference::AttentionShape {
                    batch: 1,
                    heads: 1,
                    kv_heads: 1,
                    q_len: lq,
                    kv_len: rows.max(1),
                    head_dim: n,
                    value_dim: n,
                };
                let ropts = reference::AttentionOptions { scale: Some(scale), ..Default::default() };
                if let Err(m) = reference::check_attention(&rshape, &q, &kv, &kv, &ropts, &out, None) {
                    panic!("{what}: {m}");
                }
            }
            _ => {}
        }
    }
}

fuzz_target!(|input: Input| {
    if input.bf16 {
        run::<bf16>(&input);
    } else {
        run::<f16>(&input);
    }
});
