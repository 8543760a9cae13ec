//! Rows of `linear` with the weights streamed from memory: [`Kernels::linear`](kernels::Kernels::linear) at M = 16 (one
//! sentence) where each call reads its layer's weights from beyond the last-level cache, as a
//! small batch through a model larger than the LLC does (all-MiniLM-L6-v2 has 42 MB of f32
//! weights, BERT-base 340 MB). The `linear` rows at M = 16 time one layer again and again, so
//! their weights come from the LLC.
//!
//! A case packs one layer ([`LAYERS`]) into a cycle of copies that
//! together hold at least twice the LLC ([`kernels::last_level_cache`], [`ASSUMED_LLC`] where
//! the CPU does not say), and each call takes the next copy. Shapes print as the `linear` ones
//! followed by `streamed`. The default run takes 384 → 1536 (GELU), `--full` every layer,
//! `--quick` none (the cycles take hundreds of megabytes).
//!
//! Each case times, interleaved: the kernel of every printed SIMD ISA with f32 and with bf16
//! weights; for each, a copy of the same bytes over a cycle of buffers as large, each call on
//! the next (half read, half written: the report's convention for copies); the FMA peak of
//! each ISA (the row's roofline). A row's `vs` holds `copy` (the copy's time ÷ the kernel's:
//! the weight bytes per second as a fraction of the copy bandwidth of that many bytes from
//! memory) and, on bf16-weight rows, `f32 weights` (the same ISA's kernel, streamed too).
//!
//! Errors: every row of `Y` of the first call of each contender, against
//! `reference::fraction::linear` as in the `linear` rows (every copy of the cycle holds the
//! same weights).

use std::hint::black_box;

use kernels::{Isa, LinearOptions, PackedLinear, WeightType};

use super::accuracy::normwise;
use super::case::{fma_call_flops, fma_ratio, Context, Custom};
use super::linear::{activation, flops, input, oracle_activation, streamed_name, Layer, Weights, LAYERS, TYPES};
use super::output::Row;
use super::timing;
use super::{Plan, ReportError};
use crate::buffers::Pair;
use crate::roofline::{self, Stores, FMA_ITERS};

/// Rows of `X`: one sentence.
const M: usize = 16;

/// The LLC assumed where the CPU does not describe its caches.
pub const ASSUMED_LLC: usize = 32 << 20;

/// The cases of `plan`'s scope.
pub fn custom(plan: &Plan) -> Vec<Custom> {
    plan.pick(&LAYERS, &LAYERS[2..3], &[])
        .iter()
        .map(|&layer| Custom {
            kernel: "linear",
            shape: streamed_name(M, layer, WeightType::F32),
            measure: Box::new(move |ctx| measure(layer, ctx)),
        })
        .collect()
}

/// Copies in a cycle of things of `bytes` bytes that together hold at least twice the LLC.
fn cycle(bytes: usize) -> usize {
    let llc = kernels::last_level_cache().unwrap_or(ASSUMED_LLC);
    (2 * llc).div_ceil(bytes.max(1)).max(2)
}

/// One thing timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contender {
    /// The kernel of `ctx.kernels[i]` with weights of a type, over its cycle of copies.
    Kernel(usize, WeightType),
    /// The copy of those weights' bytes with the ISA's vectors, over a cycle as large.
    Copy(usize, WeightType),
    /// The FMA-peak loop of an ISA.
    Fma(Isa),
}

fn measure(layer: Layer, ctx: &Context) -> Result<Vec<Row>, ReportError> {
    let (k, n, gelu) = layer;
    let what = format!("linear {}", streamed_name(M, layer, WeightType::F32));
    let fail = |msg: String| ReportError::new(format!("{what}: {msg}"));
    let weights = Weights::new(layer);
    let opts = LinearOptions::default().activation(activation(gelu));
    let flops = flops(M, layer);

    let mut contenders = Vec::new();
    for (i, kern) in ctx.kernels.iter().enumerate() {
        if kern.isa() != Isa::Scalar && ctx.printed.contains(&kern.isa()) {
            contenders.extend(TYPES.map(|ty| Contender::Kernel(i, ty)));
            contenders.extend(TYPES.map(|ty| Contender::Copy(i, ty)));
            contenders.push(Contender::Fma(kern.isa()));
        }
    }

    // Per contender: its cycle of packed layers or its copy's buffers, and where it is in it.
    let mut layers: Vec<Vec<PackedLinear>> = Vec::new();
    let mut copies: Vec<Option<(Pair, usize)>> = Vec::new();
    for &c in &contenders {
        let (mut cycle_of, mut copy) = (Vec::new(), None);
        match c {
            Contender::Kernel(i, ty) => {
                let kern = ctx.kernels[i];
                let first = kern
                    .pack_linear(&weights.view(), ty)
                    .map_err(|e| fail(format!("packing the weights for {}: {e}", kern.isa())))?;
                let count = cycle(first.weight_bytes());
                cycle_of.push(first);
                for _ in 1..count {
                    cycle_of.push(kern.pack_linear(&weights.view(), ty).map_err(|e| fail(e.to_string()))?);
                }
            }
            Contender::Copy(i, ty) => {
                let at = contenders
                    .iter()
                    .position(|&x| x == Contender::Kernel(i, ty))
                    .ok_or_else(|| fail("no kernel for the copy".to_string()))?;
                let bytes = layers[at][0].weight_bytes();
                let floats = bytes / (2 * std::mem::size_of::<f32>());
                let side = floats * cycle(bytes);
                copy = Some((Pair::new(side, side, ctx.out_offset), floats));
            }
            Contender::Fma(_) => {}
        }
        layers.push(cycle_of);
        copies.push(copy);
    }
    let mut cursor = vec![0usize; contenders.len()];

    let mut io = Pair::new(M * k, M * n, ctx.out_offset);
    let x = input(M, k);
    io.x_mut().copy_from_slice(&x);
    let mut run = |c: usize, io: &mut Pair| -> Result<(), String> {
        match contenders[c] {
            Contender::Kernel(i, _) => {
                let cycle_of = &layers[c];
                let (x, y) = io.io();
                ctx.kernels[i]
                    .linear(black_box(x), &cycle_of[cursor[c]], y, &opts)
                    .map_err(|e| e.to_string())?;
                black_box(y);
                cursor[c] = (cursor[c] + 1) % cycle_of.len();
            }
            Contender::Copy(i, _) => {
                let isa = ctx.kernels[i].isa();
                let (pair, floats) = copies[c].as_mut().ok_or("no buffers for the copy")?;
                let count = pair.x().len() / *floats;
                let at = cursor[c] * *floats..(cursor[c] + 1) * *floats;
                let (x, y) = pair.io();
                if !roofline::copy(isa, Stores::Ordinary, black_box(&x[at.clone()]), &mut y[at]) {
                    return Err(format!("no {}", roofline::copy_name(isa, Stores::Ordinary)));
                }
                black_box(y);
                cursor[c] = (cursor[c] + 1) % count;
            }
            Contender::Fma(isa) => {
                black_box(roofline::fma_peak(isa, black_box(FMA_ITERS)));
            }
        }
        Ok(())
    };

    // Every contender once: errors surface here; the kernels' outputs are checked.
    let mut checked: Vec<Option<(f64, f64)>> = vec![None; contenders.len()];
    for (c, &contender) in contenders.iter().enumerate() {
        io.io().1.fill(f32::NAN);
        run(c, &mut io).map_err(|e| fail(format!("{contender:?}: {e}")))?;
        if let Contender::Kernel(_, ty) = contender {
            let w = weights.effective(ty);
            let bias = Some(weights.bias.as_slice());
            let exact = reference::linear(&x, &w, (k, n), bias, oracle_activation(gelu), None).y;
            let fraction = reference::fraction::linear(&x, &w, (k, n), bias, oracle_activation(gelu), None, io.y());
            checked[c] = Some((normwise(io.y(), &exact), fraction));
        }
    }

    let samples = timing::interleaved(contenders.len(), &ctx.timing, |c| {
        // Checked above; a failure here cannot differ from the first call's.
        let _ = run(c, &mut io);
    });

    let at = |c: Contender| contenders.iter().position(|&x| x == c);
    let mut out = Vec::new();
    for (c, &contender) in contenders.iter().enumerate() {
        let Contender::Kernel(i, ty) = contender else {
            continue;
        };
        let isa = ctx.kernels[i].isa();
        let median = samples.median(c);
        let weight_bytes = layers[c][0].weight_bytes();
        let mut vs = Vec::new();
        if ty != WeightType::F32 {
            if let Some(o) = at(Contender::Kernel(i, WeightType::F32)) {
                vs.push(("f32 weights".to_string(), samples.speedup(c, o)));
            }
        }
        if let Some(o) = at(Contender::Copy(i, ty)) {
            vs.push(("copy".to_string(), samples.speedup(c, o)));
        }
        let roof = at(Contender::Fma(isa)).map(|r| {
            let scale = flops / fma_call_flops(isa);
            (samples.min(r) * scale, fma_ratio(samples.min(r), median, scale))
        });
        let (rel, fraction) = checked[c].map_or((None, None), |(r, f)| (Some(r), Some(f)));
        let moved = weight_bytes + (M * k + M * n + n) * std::mem::size_of::<f32>();
        out.push(Row {
            kernel: "linear".to_string(),
            isa: isa.to_string(),
            dtype: "f32".to_string(),
            shape: streamed_name(M, layer, ty),
            elements: Some((M * n) as f64),
            flops: Some(flops),
            bytes: Some(moved as f64),
            ns_per_iter: median,
            max_rel_err: rel,
            bound_fraction: fraction,
            within_bound: fraction.map(|f| f <= 1.0),
            vs,
            roofline: Some(roofline::fma_name(isa)),
            roofline_ns_per_iter: roof.map(|r| r.0),
            roofline_ratio: roof.map(|r| r.1),
            rel_iqr: samples.rel_iqr(c),
            rounds: samples.rounds(),
            ..Row::default()
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycles_hold_twice_the_llc() {
        let llc = kernels::last_level_cache().unwrap_or(ASSUMED_LLC);
        for bytes in [1, 4096, 590 << 10, 9 << 20, 3 * llc] {
            let count = cycle(bytes);
            assert!(count >= 2 && count * bytes >= 2 * llc, "{bytes}: {count}");
            assert!(
                (count - 1) * bytes < 2 * llc || count == 2,
                "{bytes}: {count} is more than needed"
            );
        }
    }
}
