//! The `roofline` rows: this machine's limits in this run, per ISA: the FMA peak, and the copy
//! bandwidth with L1-, L2- and beyond-LLC-sized buffers.

use std::hint::black_box;

use kernels::Isa;

use super::case::Context;
use super::output::Row;
use super::timing;
use super::ReportError;
use crate::buffers::Pair;
use crate::roofline::{self, Stores, FMA_ITERS};

/// Copy sizes (bytes read; as many written), with their labels.
const COPY_SIZES: [(usize, &str); 3] = [(16 << 10, "16KiB"), (256 << 10, "256KiB"), (64 << 20, "64MiB")];

/// The roofline rows of every printed ISA.
pub fn rows(ctx: &Context) -> Result<Vec<Row>, ReportError> {
    let isas: Vec<Isa> = ctx.printed.clone();
    let mut rows = Vec::new();
    if isas.is_empty() {
        return Ok(rows);
    }

    let samples = timing::interleaved(isas.len(), &ctx.timing, |i| {
        black_box(roofline::fma_peak(isas[i], black_box(FMA_ITERS)));
    });
    for (i, &isa) in isas.iter().enumerate() {
        let (_, _, label) = roofline::fma_shape(isa);
        rows.push(Row {
            kernel: "roofline".to_string(),
            isa: isa.to_string(),
            dtype: "f32".to_string(),
            shape: "fma peak".to_string(),
            flops: Some((FMA_ITERS * roofline::fma_flops_per_iter(isa)) as f64),
            ns_per_iter: samples.median(i),
            method: Some(format!("{} {label}", roofline::vectors(isa))),
            rel_iqr: samples.rel_iqr(i),
            rounds: samples.rounds(),
            ..Row::default()
        });
    }

    for (idx, &(size, label)) in COPY_SIZES.iter().enumerate() {
        let n = size / std::mem::size_of::<f32>();
        let mut pair = Pair::new(n, n, ctx.out_offset);
        let mut contenders: Vec<(Isa, Stores)> = isas.iter().map(|&isa| (isa, Stores::Ordinary)).collect();
        if idx == COPY_SIZES.len() - 1 && cfg!(target_arch = "x86_64") {
            // Beyond the LLC, streaming stores are the other ceiling: they skip reading each
            // written line first.
            contenders.extend(isas.iter().map(|&isa| (isa, Stores::Streaming)));
        }
        for &(isa, stores) in &contenders {
            let (x, y) = pair.io();
            if !roofline::copy(isa, stores, x, y) {
                return Err(ReportError::new(format!(
                    "roofline: {} is not available",
                    roofline::copy_name(isa, stores)
                )));
            }
        }
        let samples = timing::interleaved(contenders.len(), &ctx.timing, |i| {
            let (isa, stores) = contenders[i];
            let (x, y) = pair.io();
            roofline::copy(isa, stores, black_box(x), black_box(y));
            black_box(y);
        });
        for (i, &(isa, stores)) in contenders.iter().enumerate() {
            rows.push(Row {
                kernel: "roofline".to_string(),
                isa: isa.to_string(),
                dtype: "f32".to_string(),
                shape: format!("copy {label}"),
                bytes: Some((2 * size) as f64),
                elements: Some(n as f64),
                ns_per_iter: samples.median(i),
                method: Some(roofline::copy_name(isa, stores)),
                rel_iqr: samples.rel_iqr(i),
                rounds: samples.rounds(),
                ..Row::default()
            });
        }
    }
    Ok(rows)
}
