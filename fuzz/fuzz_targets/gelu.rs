//! Differential fuzzing of `gelu` (erf form) and `gelu_tanh` on every ISA: any bit pattern,
//! length and offset, in f32, f16 or bf16, within the documented bound of the f64 oracle
//! (`reference::check_gelu`, `check_gelu_tanh`); in place and out of place agree bit for bit.
#![no_main]

use kernels::half::{bf16, f16};
use kernels::{available_isas, Element, Kernels};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (bool, u8, u8, Vec<u32>)| {
    let (tanh, ty, offset, bits) = input;
    let offset = (offset % 16) as usize;
    match ty % 3 {
        0 => run(tanh, offset, bits.iter().map(|&b| f32::from_bits(b))),
        1 => run(
            tanh,
            offset,
            bits.iter()
                .flat_map(|&b| [b as u16, (b >> 16) as u16].map(f16::from_bits)),
        ),
        _ => run(
            tanh,
            offset,
            bits.iter()
                .flat_map(|&b| [b as u16, (b >> 16) as u16].map(bf16::from_bits)),
        ),
    }
});

fn run<E: Element + reference::Element + Copy>(tanh: bool, offset: usize, values: impl Iterator<Item = E>) {
    let zero = <E as Element>::from_f32(0.0);
    let mut buf = vec![zero; offset];
    buf.extend(values);
    let x = &buf[offset..];
    for isa in available_isas() {
        let k = Kernels::for_isa(isa).unwrap();
        let mut out = vec![zero; x.len()];
        let mut inplace = x.to_vec();
        let checked = if tanh {
            k.gelu_tanh(x, &mut out).unwrap();
            k.gelu_tanh_inplace(&mut inplace).unwrap();
            reference::check_gelu_tanh(x, &out)
        } else {
            k.gelu(x, &mut out).unwrap();
            k.gelu_inplace(&mut inplace).unwrap();
            reference::check_gelu(x, &out)
        };
        if let Err(m) = checked {
            let at = <E as Element>::to_f32(x[m.index]);
            panic!("{isa} {} tanh {tanh}: x = {at:e}: {m}", <E as reference::Element>::NAME);
        }
        let same = inplace
            .iter()
            .zip(&out)
            .all(|(a, b)| <E as Element>::to_f32(*a).to_bits() == <E as Element>::to_f32(*b).to_bits());
        assert!(same, "{isa}: in place differs");
    }
}
